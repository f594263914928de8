/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/layout: cutting keys into chunks and segments, placing chunks on servers. */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "phub_layout.h"

/* 32 KB chunks and an MTU of 1500: (1500 - 20 - 8 - 56) / 4 = 354, rounded down to 16s. */
#define SEG_FP32_1500	352u
#define SEG_FP16_1500	704u

static struct phub_layout *
make(const struct phub_layout_key *keys, uint32_t n_keys, uint32_t elem_size,
		uint32_t chunk_bytes, uint32_t segment_elems,
		const struct phub_layout_server *servers, uint32_t n_servers)
{
	struct phub_layout_params p = {
		.keys = keys,
		.n_keys = n_keys,
		.elem_size = elem_size,
		.chunk_bytes = chunk_bytes,
		.segment_elems = segment_elems,
		.servers = servers,
		.n_servers = n_servers,
	};
	struct phub_layout *l = phub_layout_create(&p);

	ck_assert_msg(l != NULL, "phub_layout_create: errno %d", errno);
	return l;
}

/* Deterministic PRNG (xorshift64*), so that every run sees the same instances. */
static uint64_t rng_state;

static uint32_t
rng_next(uint32_t bound)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32) % bound;
}

/* ResNet-50 as torchvision lists its parameters: 161 tensors, 25,557,032 elements. */
static uint32_t
resnet50_keys(struct phub_layout_key *keys)
{
	static const uint32_t blocks[4] = { 3, 4, 6, 3 };
	uint32_t in = 64;
	uint32_t n = 0;
	uint32_t stage;

#define KEY(elems) (keys[n] = (struct phub_layout_key){ .key_id = 1000 + n, .n_elems = (elems) }, \
	n++)
	KEY(64 * 3 * 7 * 7);
	KEY(64);
	KEY(64);
	for (stage = 0; stage < 4; stage++) {
		uint32_t width = 64u << stage;
		uint32_t out = width * 4;
		uint32_t b;

		for (b = 0; b < blocks[stage]; b++) {
			KEY(width * in);
			KEY(width);
			KEY(width);
			KEY(width * width * 9);
			KEY(width);
			KEY(width);
			KEY(out * width);
			KEY(out);
			KEY(out);
			if (b == 0) {
				KEY(out * in);
				KEY(out);
				KEY(out);
			}
			in = out;
		}
	}
	KEY(1000 * 2048);
	KEY(1000);
#undef KEY
	return n;
}

/*
 * Walk every chunk and segment and check that they tile each key, in order, with no gap and no
 * overlap; that only a key's last chunk is short or has a short segment; and that the lookups
 * agree with one another. Returns the number of segments seen.
 */
static uint64_t
check_tiling(const struct phub_layout *l, const struct phub_layout_key *keys, uint32_t n_keys)
{
	uint32_t ce = phub_layout_chunk_elems(l);
	uint32_t se = phub_layout_segment_elems(l);
	uint64_t base = 0;
	uint64_t segs = 0;
	uint32_t chunk = 0;
	uint32_t k;

	ck_assert_uint_eq(ce % se, 0);
	ck_assert_uint_eq(phub_layout_key_count(l), n_keys);
	for (k = 0; k < n_keys; k++) {
		struct phub_layout_key_info ki;
		struct phub_layout_segment sg_past;
		uint32_t key_index;
		uint32_t found;
		uint32_t offset = 0;
		uint32_t j;

		ck_assert_int_eq(phub_layout_key_get(l, k, &ki), 0);
		ck_assert_uint_eq(ki.key_id, keys[k].key_id);
		ck_assert_uint_eq(ki.n_elems, keys[k].n_elems);
		ck_assert_uint_eq(ki.first_chunk, chunk);
		ck_assert_uint_eq(ki.elem_base, base);
		ck_assert_int_eq(phub_layout_key_index(l, keys[k].key_id, &key_index), 0);
		ck_assert_uint_eq(key_index, k);
		for (j = 0; j < ki.n_chunks; j++, chunk++) {
			struct phub_layout_chunk c;
			uint32_t seg_offset = 0;
			uint32_t last;
			uint32_t s;

			ck_assert_int_eq(phub_layout_chunk_get(l, chunk, &c), 0);
			ck_assert_uint_eq(c.key_index, k);
			ck_assert_uint_eq(c.key_id, keys[k].key_id);
			ck_assert_uint_eq(c.elem_offset, offset);
			ck_assert_uint_eq(c.elem_base, base + offset);
			ck_assert_uint_ge(c.n_elems, 1);
			ck_assert_uint_le(c.n_elems, ce);
			if (j + 1 < ki.n_chunks)
				ck_assert_uint_eq(c.n_elems, ce);
			/* Its first and last element lead back to it. */
			ck_assert_int_eq(phub_layout_chunk_find(l, k, offset, &found), 0);
			ck_assert_uint_eq(found, chunk);
			last = offset + c.n_elems - 1;
			ck_assert_int_eq(phub_layout_chunk_find(l, k, last, &found), 0);
			ck_assert_uint_eq(found, chunk);
			for (s = 0; s < c.n_segments; s++) {
				struct phub_layout_segment sg;

				ck_assert_int_eq(phub_layout_segment_get(l, chunk, s, &sg), 0);
				ck_assert_uint_eq(sg.elem_offset, seg_offset);
				ck_assert_uint_ge(sg.n_elems, 1);
				ck_assert_uint_le(sg.n_elems, se);
				if (sg.n_elems < se)
					ck_assert_msg(j + 1 == ki.n_chunks && s + 1 == c.n_segments,
						"short segment %u of chunk %u is not the last",
						s, chunk);
				seg_offset += sg.n_elems;
			}
			ck_assert_uint_eq(seg_offset, c.n_elems);
			ck_assert_int_eq(phub_layout_segment_get(l, chunk, c.n_segments, &sg_past),
				-EINVAL);
			segs += c.n_segments;
			offset += c.n_elems;
		}
		ck_assert_uint_eq(offset, keys[k].n_elems);
		ck_assert_int_eq(phub_layout_chunk_find(l, k, keys[k].n_elems, &found), -EINVAL);
		base += keys[k].n_elems;
	}
	ck_assert_uint_eq(phub_layout_chunk_count(l), chunk);
	ck_assert_uint_eq(phub_layout_elem_count(l), base);
	ck_assert_uint_eq(phub_layout_segment_count(l), segs);
	return segs;
}

/* Count how often each element of the job is named by some (chunk, segment): all must be 1. */
static void
check_cover_once(const struct phub_layout *l)
{
	uint64_t n = phub_layout_elem_count(l);
	uint8_t *seen = calloc(n, 1);
	uint32_t chunk;
	uint64_t i;

	ck_assert_ptr_nonnull(seen);
	for (chunk = 0; chunk < phub_layout_chunk_count(l); chunk++) {
		struct phub_layout_chunk c;
		uint32_t s;

		ck_assert_int_eq(phub_layout_chunk_get(l, chunk, &c), 0);
		for (s = 0; s < c.n_segments; s++) {
			struct phub_layout_segment sg;
			uint32_t e;

			ck_assert_int_eq(phub_layout_segment_get(l, chunk, s, &sg), 0);
			ck_assert_uint_le(c.elem_base + sg.elem_offset + sg.n_elems, n);
			for (e = 0; e < sg.n_elems; e++)
				seen[c.elem_base + sg.elem_offset + e]++;
		}
	}
	for (i = 0; i < n; i++) {
		if (seen[i] != 1)
			ck_abort_msg("element %llu covered %u times", (unsigned long long)i,
				seen[i]);
	}
	free(seen);
}

/*
 * Check a placement against first principles: every chunk on exactly one valid server, and each
 * level's bins equal to what the chunk list says.
 */
static void
check_placement(const struct phub_layout *l, const struct phub_layout_server *sv, uint32_t ns)
{
	uint64_t *elems = calloc(ns, sizeof(*elems));
	uint32_t *chunks = calloc(ns, sizeof(*chunks));
	uint32_t n_chunks = phub_layout_chunk_count(l);
	uint32_t elem_size = phub_layout_elem_size(l);
	enum phub_layout_level level;
	uint32_t c;
	uint32_t i;

	ck_assert_ptr_nonnull(elems);
	ck_assert_ptr_nonnull(chunks);
	for (c = 0; c < n_chunks; c++) {
		struct phub_layout_chunk info;
		uint32_t s;

		ck_assert_int_eq(phub_layout_chunk_server(l, c, &s), 0);
		ck_assert_uint_lt(s, ns);
		ck_assert_int_eq(phub_layout_chunk_get(l, c, &info), 0);
		ck_assert_uint_eq(info.server, s);
		ck_assert(phub_layout_server_numa_ok(&sv[s]));
		elems[s] += info.n_elems;
		chunks[s]++;
	}

	ck_assert_uint_eq(phub_layout_bin_count(l, PHUB_LAYOUT_LEVEL_SERVER), ns);
	for (level = PHUB_LAYOUT_LEVEL_SERVER; level <= PHUB_LAYOUT_LEVEL_NUMA; level++) {
		uint32_t nb = phub_layout_bin_count(l, level);
		uint32_t total_chunks = 0;
		uint64_t total_bytes = 0;
		struct phub_layout_balance bal;
		struct phub_layout_load load;
		uint64_t lo = UINT64_MAX;
		uint64_t hi = 0;

		ck_assert_uint_ge(nb, 1);
		for (i = 0; i < nb; i++) {
			uint64_t want_elems = 0;
			uint32_t want_chunks = 0;
			uint32_t s;

			ck_assert_int_eq(phub_layout_bin_get(l, level, i, &load), 0);
			if (i > 0) {
				struct phub_layout_load prev;

				ck_assert_int_eq(phub_layout_bin_get(l, level, i - 1, &prev), 0);
				ck_assert_uint_lt(prev.id, load.id);
			}
			for (s = 0; s < ns; s++) {
				uint32_t id = level == PHUB_LAYOUT_LEVEL_SERVER ? s :
					level == PHUB_LAYOUT_LEVEL_LCORE ? sv[s].lcore :
					level == PHUB_LAYOUT_LEVEL_PORT ? sv[s].port :
					(uint32_t)sv[s].lcore_numa;

				if (id == load.id) {
					want_elems += elems[s];
					want_chunks += chunks[s];
				}
			}
			ck_assert_uint_eq(load.n_elems, want_elems);
			ck_assert_uint_eq(load.bytes, want_elems * elem_size);
			ck_assert_uint_eq(load.n_chunks, want_chunks);
			total_chunks += load.n_chunks;
			total_bytes += load.bytes;
			lo = load.bytes < lo ? load.bytes : lo;
			hi = load.bytes > hi ? load.bytes : hi;
		}
		ck_assert_int_eq(phub_layout_bin_get(l, level, nb, &load), -EINVAL);
		ck_assert_uint_eq(total_chunks, n_chunks);
		ck_assert_uint_eq(total_bytes, phub_layout_elem_count(l) * elem_size);
		ck_assert_int_eq(phub_layout_balance_get(l, level, &bal), 0);
		ck_assert_uint_eq(bal.n_bins, nb);
		ck_assert_uint_eq(bal.min_bytes, lo);
		ck_assert_uint_eq(bal.max_bytes, hi);
		ck_assert_uint_eq(bal.total_bytes, total_bytes);
		ck_assert_double_eq_tol(bal.mean_bytes, (double)total_bytes / nb, 1e-6);
	}
	free(elems);
	free(chunks);
}

/* One line of docs/layout.md's table, when PHUB_LAYOUT_FIGURES is set. */
static void
print_figures(const struct phub_layout *l, const char *name)
{
	static const char *const level_name[] = { "pair", "lcore", "port", "numa" };
	enum phub_layout_level level;

	if (getenv("PHUB_LAYOUT_FIGURES") == NULL)
		return;
	fprintf(stderr, "%-30s %u chunks", name, phub_layout_chunk_count(l));
	for (level = PHUB_LAYOUT_LEVEL_SERVER; level <= PHUB_LAYOUT_LEVEL_NUMA; level++) {
		struct phub_layout_balance bal;

		ck_assert_int_eq(phub_layout_balance_get(l, level, &bal), 0);
		fprintf(stderr, " | %s x%u max/mean %.5f min/mean %.5f", level_name[level],
			bal.n_bins, bal.max_bytes / bal.mean_bytes, bal.min_bytes / bal.mean_bytes);
	}
	fprintf(stderr, "\n");
}

/* max / mean of a level's bytes. */
static double
spread(const struct phub_layout *l, enum phub_layout_level level)
{
	struct phub_layout_balance bal;

	ck_assert_int_eq(phub_layout_balance_get(l, level, &bal), 0);
	return (double)bal.max_bytes / bal.mean_bytes;
}

/* --- cutting ----------------------------------------------------------------------------- */

START_TEST(test_cut_counts_chunk_bytes_in_fp32_elements_rounded_to_segments)
{
	struct phub_layout_key key = { .key_id = 1, .n_elems = 100000 };
	struct phub_layout *l;

	/* fp32, MTU 1500: 8192 fp32 elements hold 23 whole segments of 352. */
	l = make(&key, 1, 4, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, NULL, 0);
	ck_assert_uint_eq(phub_layout_chunk_elems(l), 23 * SEG_FP32_1500);
	phub_layout_free(l);
	/* Same segments on an fp16 wire: still 8096 elements, the cache unit is fp32. */
	l = make(&key, 1, 2, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, NULL, 0);
	ck_assert_uint_eq(phub_layout_chunk_elems(l), 8096);
	phub_layout_free(l);
	/* fp16, MTU 1500: 11 segments of 704. */
	l = make(&key, 1, 2, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP16_1500, NULL, 0);
	ck_assert_uint_eq(phub_layout_chunk_elems(l), 11 * SEG_FP16_1500);
	phub_layout_free(l);
	/* A chunk smaller than a segment is one segment. */
	l = make(&key, 1, 4, 1024, SEG_FP32_1500, NULL, 0);
	ck_assert_uint_eq(phub_layout_chunk_elems(l), SEG_FP32_1500);
	phub_layout_free(l);
}
END_TEST

START_TEST(test_cut_splits_a_large_key_into_whole_segment_chunks_and_a_short_tail)
{
	/* A 3x3x512x512 convolution: the worked example of docs/layout.md. */
	struct phub_layout_key key = { .key_id = 9, .n_elems = 3 * 3 * 512 * 512 };
	struct phub_layout_segment sg;
	struct phub_layout_chunk c;
	struct phub_layout *l;

	l = make(&key, 1, 4, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, NULL, 0);
	ck_assert_uint_eq(phub_layout_chunk_count(l), 292);
	ck_assert_int_eq(phub_layout_chunk_get(l, 290, &c), 0);
	ck_assert_uint_eq(c.n_elems, 8096);
	ck_assert_uint_eq(c.n_segments, 23);
	ck_assert_int_eq(phub_layout_chunk_get(l, 291, &c), 0);
	ck_assert_uint_eq(c.elem_offset, 291 * 8096);
	ck_assert_uint_eq(c.n_elems, 3360);
	ck_assert_uint_eq(c.n_segments, 10);
	ck_assert_int_eq(phub_layout_segment_get(l, 291, 9, &sg), 0);
	ck_assert_uint_eq(sg.elem_offset, 9 * 352);
	ck_assert_uint_eq(sg.n_elems, 192);
	ck_assert_uint_eq(phub_layout_segment_count(l), 6703);
	check_tiling(l, &key, 1);
	check_cover_once(l);
	phub_layout_free(l);
}
END_TEST

START_TEST(test_cut_makes_each_key_smaller_than_a_chunk_one_chunk)
{
	static const struct phub_layout_key keys[] = {
		{ .key_id = 5, .n_elems = 1 },
		{ .key_id = 6, .n_elems = 15 },
		{ .key_id = 7, .n_elems = 352 },
		{ .key_id = 8, .n_elems = 353 },
		{ .key_id = 9, .n_elems = 8095 },
		{ .key_id = 10, .n_elems = 8096 },
	};
	static const uint32_t segments[] = { 1, 1, 1, 2, 23, 23 };
	struct phub_layout *l;
	uint32_t k;

	l = make(keys, 6, 4, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, NULL, 0);
	ck_assert_uint_eq(phub_layout_chunk_count(l), 6);
	for (k = 0; k < 6; k++) {
		struct phub_layout_chunk c;

		ck_assert_int_eq(phub_layout_chunk_get(l, k, &c), 0);
		ck_assert_uint_eq(c.key_index, k);
		ck_assert_uint_eq(c.n_elems, keys[k].n_elems);
		ck_assert_uint_eq(c.n_segments, segments[k]);
	}
	check_tiling(l, keys, 6);
	check_cover_once(l);
	phub_layout_free(l);
}
END_TEST

START_TEST(test_cut_covers_every_element_once_for_keys_of_any_size)
{
	struct phub_layout_key keys[32];
	uint32_t round;

	rng_state = 0x5eed0001;
	for (round = 0; round < 40; round++) {
		uint32_t n_keys = 1 + rng_next(32);
		uint32_t seg = 16 + rng_next(400);
		uint32_t chunk_bytes = 4 + rng_next(40000);
		struct phub_layout *l;
		uint32_t k;

		for (k = 0; k < n_keys; k++) {
			/* Ids out of order and sparse, sizes around segment and chunk edges. */
			keys[k].key_id = (n_keys - k) * 7919u + rng_next(7);
			keys[k].n_elems = 1 + rng_next(rng_next(2) ? 3 * seg : 60000);
		}
		l = make(keys, n_keys, 2 + 2 * rng_next(2), chunk_bytes, seg, NULL, 0);
		check_tiling(l, keys, n_keys);
		check_cover_once(l);
		phub_layout_free(l);
	}
}
END_TEST

START_TEST(test_cut_counts_in_64_bits_for_keys_of_2_32_minus_1_elements)
{
	static const struct phub_layout_key keys[] = {
		{ .key_id = 1, .n_elems = UINT32_MAX },
		{ .key_id = 2, .n_elems = UINT32_MAX },
		{ .key_id = 3, .n_elems = UINT32_MAX },
	};
	static const struct phub_layout_server sv[] = {
		{ .lcore = 1, .port = 0, .port_numa = 0, .lcore_numa = 0 },
		{ .lcore = 2, .port = 0, .port_numa = 0, .lcore_numa = 0 },
		{ .lcore = 1, .port = 1, .port_numa = 0, .lcore_numa = 0 },
		{ .lcore = 2, .port = 1, .port_numa = 0, .lcore_numa = 0 },
	};
	const uint32_t per_key = 524288;	/* ceil((2^32 - 1) / 8192) */
	struct phub_layout_balance bal;
	struct phub_layout_chunk c;
	struct phub_layout *l;
	uint32_t chunk;

	l = make(keys, 3, 2, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, 1024, sv, 4);
	ck_assert_uint_eq(phub_layout_chunk_elems(l), 8192);
	ck_assert_uint_eq(phub_layout_chunk_count(l), 3 * per_key);
	ck_assert_uint_eq(phub_layout_elem_count(l), 3ull * UINT32_MAX);
	ck_assert_uint_eq(phub_layout_segment_count(l), 3ull * 4194304);
	ck_assert_int_eq(phub_layout_chunk_find(l, 2, UINT32_MAX - 1, &chunk), 0);
	ck_assert_uint_eq(chunk, 3 * per_key - 1);
	ck_assert_int_eq(phub_layout_chunk_get(l, chunk, &c), 0);
	ck_assert_uint_eq(c.key_index, 2);
	ck_assert_uint_eq(c.elem_offset, (per_key - 1) * 8192u);
	ck_assert_uint_eq(c.elem_base, 2ull * UINT32_MAX + (per_key - 1) * 8192u);
	ck_assert_uint_eq(c.n_elems, 8191);
	ck_assert_uint_eq(c.n_segments, 8);
	/* 1.5 million chunks on 2 x 2: lcores and ports differ by at most one chunk. */
	ck_assert_int_eq(phub_layout_balance_get(l, PHUB_LAYOUT_LEVEL_LCORE, &bal), 0);
	ck_assert_uint_le(bal.max_bytes - bal.min_bytes, 8192 * 2);
	ck_assert_int_eq(phub_layout_balance_get(l, PHUB_LAYOUT_LEVEL_PORT, &bal), 0);
	ck_assert_uint_le(bal.max_bytes - bal.min_bytes, 8192 * 2);
	phub_layout_free(l);
}
END_TEST

START_TEST(test_cut_accepts_exactly_the_chunk_limit)
{
	struct phub_layout_key key = { .key_id = 1, .n_elems = PHUB_LAYOUT_MAX_CHUNKS };
	struct phub_layout_params p = {
		.keys = &key, .n_keys = 1, .elem_size = 4, .chunk_bytes = 4, .segment_elems = 1,
	};
	struct phub_layout *l;

	l = phub_layout_create(&p);
	ck_assert_ptr_nonnull(l);
	ck_assert_uint_eq(phub_layout_chunk_count(l), PHUB_LAYOUT_MAX_CHUNKS);
	phub_layout_free(l);
	key.n_elems++;
	l = phub_layout_create(&p);
	ck_assert_ptr_null(l);
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST

/* --- lookups ----------------------------------------------------------------------------- */

START_TEST(test_lookup_finds_keys_by_id_and_refuses_what_is_not_there)
{
	static const struct phub_layout_key keys[] = {
		{ .key_id = 42, .n_elems = 10000 },
		{ .key_id = 7, .n_elems = 5 },
		{ .key_id = UINT32_MAX, .n_elems = 20000 },
		{ .key_id = 0, .n_elems = 1 },
	};
	struct phub_layout_key_info ki;
	struct phub_layout_segment sg;
	struct phub_layout_chunk c;
	struct phub_layout *l;
	uint32_t idx;
	uint32_t chunk;

	l = make(keys, 4, 4, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, NULL, 0);
	ck_assert_int_eq(phub_layout_key_index(l, 42, &idx), 0);
	ck_assert_uint_eq(idx, 0);
	ck_assert_int_eq(phub_layout_key_index(l, UINT32_MAX, &idx), 0);
	ck_assert_uint_eq(idx, 2);
	ck_assert_int_eq(phub_layout_key_index(l, 0, &idx), 0);
	ck_assert_uint_eq(idx, 3);
	ck_assert_int_eq(phub_layout_key_index(l, 8, &idx), -ENOENT);
	ck_assert_int_eq(phub_layout_key_get(l, 2, &ki), 0);
	ck_assert_uint_eq(ki.first_chunk, 3);		/* 2 chunks of key 42, 1 of key 7 */
	ck_assert_uint_eq(ki.n_chunks, 3);
	ck_assert_uint_eq(ki.elem_base, 10005);
	ck_assert_int_eq(phub_layout_key_get(l, 4, &ki), -EINVAL);
	ck_assert_int_eq(phub_layout_chunk_get(l, 7, &c), -EINVAL);
	ck_assert_int_eq(phub_layout_chunk_find(l, 4, 0, &chunk), -EINVAL);
	ck_assert_int_eq(phub_layout_chunk_find(l, 1, 5, &chunk), -EINVAL);
	ck_assert_int_eq(phub_layout_chunk_find(l, 2, 8096, &chunk), 0);
	ck_assert_uint_eq(chunk, 4);
	/* Key 42's second chunk: 1904 = 5 * 352 + 144. */
	ck_assert_int_eq(phub_layout_segment_get(l, 1, 5, &sg), 0);
	ck_assert_uint_eq(sg.n_elems, 144);
	ck_assert_int_eq(phub_layout_segment_get(l, 1, 6, &sg), -EINVAL);
	ck_assert_int_eq(phub_layout_segment_get(l, 2, 1, &sg), -EINVAL);
	ck_assert_int_eq(phub_layout_segment_get(l, 7, 0, &sg), -EINVAL);
	phub_layout_free(l);
}
END_TEST

START_TEST(test_lookup_of_placement_on_a_cut_only_layout_gives_enodata)
{
	struct phub_layout_key key = { .key_id = 1, .n_elems = 100000 };
	struct phub_layout_balance bal;
	struct phub_layout_load load;
	struct phub_layout_chunk c;
	struct phub_layout *l;
	uint32_t s;

	l = make(&key, 1, 4, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, NULL, 0);
	ck_assert_int_eq(phub_layout_chunk_server(l, 0, &s), -ENODATA);
	ck_assert_int_eq(phub_layout_chunk_get(l, 0, &c), 0);
	ck_assert_uint_eq(c.server, UINT32_MAX);
	ck_assert_uint_eq(phub_layout_bin_count(l, PHUB_LAYOUT_LEVEL_LCORE), 0);
	ck_assert_int_eq(phub_layout_bin_get(l, PHUB_LAYOUT_LEVEL_PORT, 0, &load), -ENODATA);
	ck_assert_int_eq(phub_layout_balance_get(l, PHUB_LAYOUT_LEVEL_PORT, &bal), -ENODATA);
	phub_layout_free(l);
}
END_TEST

/* --- bad input --------------------------------------------------------------------------- */

enum {
	BAD_NULL_PARAMS, BAD_NULL_KEYS, BAD_NO_KEYS, BAD_ELEM_SIZE_0, BAD_ELEM_SIZE_9,
	BAD_CHUNK_0, BAD_CHUNK_3, BAD_SEGMENT_0, BAD_EMPTY_KEY, BAD_DUP_KEY, BAD_ONE_KEY_TOO_BIG,
	BAD_KEYS_TOO_BIG, BAD_SEGMENTS_PER_CHUNK, BAD_NULL_SERVERS, BAD_TOO_MANY_SERVERS,
	BAD_DUP_SERVER, BAD_CROSS_NUMA, BAD_PORT_TWO_NODES, BAD_LCORE_TWO_NODES, BAD_LCORE_NUMA,
	BAD_PORT_NUMA, N_BAD,
};

START_TEST(test_create_rejects_bad_params_with_einval_and_a_reason)
{
	struct phub_layout_key keys[] = {
		{ .key_id = 7, .n_elems = 1000 },
		{ .key_id = 8, .n_elems = 100000 },
		{ .key_id = 9, .n_elems = 3 },
	};
	struct phub_layout_server sv[] = {
		{ .lcore = 1, .port = 0, .port_numa = 0, .lcore_numa = 0 },
		{ .lcore = 2, .port = 0, .port_numa = 0, .lcore_numa = 0 },
		{ .lcore = 3, .port = 1, .port_numa = 1, .lcore_numa = 1 },
	};
	struct phub_layout_params p = {
		.keys = keys, .n_keys = 3, .elem_size = 4,
		.chunk_bytes = PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, .segment_elems = SEG_FP32_1500,
		.servers = sv, .n_servers = 3,
	};
	const struct phub_layout_params *pp = &p;
	struct phub_layout *l;
	char msg[160];

	/* The unmutated parameters are fine: each case below breaks exactly one thing. */
	ck_assert_int_eq(phub_layout_params_check(&p, msg, sizeof(msg)), 0);
	switch (_i) {
	case BAD_NULL_PARAMS: pp = NULL; break;
	case BAD_NULL_KEYS: p.keys = NULL; break;
	case BAD_NO_KEYS: p.n_keys = 0; break;
	case BAD_ELEM_SIZE_0: p.elem_size = 0; break;
	case BAD_ELEM_SIZE_9: p.elem_size = 9; break;
	case BAD_CHUNK_0: p.chunk_bytes = 0; break;
	case BAD_CHUNK_3: p.chunk_bytes = 3; break;
	case BAD_SEGMENT_0: p.segment_elems = 0; break;
	case BAD_EMPTY_KEY: keys[1].n_elems = 0; break;
	case BAD_DUP_KEY: keys[2].key_id = 7; break;
	case BAD_ONE_KEY_TOO_BIG:
		p.chunk_bytes = 4;
		p.segment_elems = 1;
		keys[1].n_elems = PHUB_LAYOUT_MAX_CHUNKS + 1;
		break;
	case BAD_KEYS_TOO_BIG:
		p.chunk_bytes = 4;
		p.segment_elems = 1;
		keys[0].n_elems = PHUB_LAYOUT_MAX_CHUNKS / 2;
		keys[1].n_elems = PHUB_LAYOUT_MAX_CHUNKS / 2;
		break;
	case BAD_SEGMENTS_PER_CHUNK:
		p.chunk_bytes = 4 * (PHUB_LAYOUT_MAX_SEGMENTS + 1);
		p.segment_elems = 1;
		break;
	case BAD_NULL_SERVERS: p.servers = NULL; break;
	case BAD_TOO_MANY_SERVERS: p.n_servers = PHUB_LAYOUT_MAX_SERVERS + 1; break;
	case BAD_DUP_SERVER: sv[1].lcore = 1; break;
	case BAD_CROSS_NUMA: sv[2].port = 0; sv[2].port_numa = 0; break;
	case BAD_PORT_TWO_NODES: sv[1].port_numa = PHUB_LAYOUT_NUMA_ANY; break;
	case BAD_LCORE_TWO_NODES:
		sv[1].lcore = 3;
		sv[1].port = 2;
		sv[1].port_numa = PHUB_LAYOUT_NUMA_ANY;
		break;
	case BAD_LCORE_NUMA: sv[0].lcore_numa = PHUB_LAYOUT_NUMA_ANY; break;
	case BAD_PORT_NUMA: sv[0].port_numa = -2; break;
	default: ck_abort();
	}
	errno = 0;
	l = phub_layout_create(pp);
	ck_assert_ptr_null(l);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(phub_layout_params_check(pp, msg, sizeof(msg)), -EINVAL);
	ck_assert_msg(msg[0] != '\0', "case %d gives no reason", _i);
	if (_i == BAD_DUP_KEY)
		ck_assert_str_eq(msg, "keys[2]: key id 7 repeats keys[0]");
	if (_i == BAD_CROSS_NUMA)
		ck_assert_str_eq(msg,
			"servers[2]: lcore 3 on NUMA node 1 cannot serve port 0 on node 0");
}
END_TEST

/* --- placement --------------------------------------------------------------------------- */

/* Best makespan of sizes[] (descending) on m identical machines, by exhaustive search. */
static uint64_t opt_best;

static void
opt_search(const uint64_t *sizes, uint32_t n, uint32_t i, uint64_t *load, uint32_t m)
{
	uint32_t b;

	if (i == n) {
		uint64_t hi = 0;

		for (b = 0; b < m; b++)
			hi = load[b] > hi ? load[b] : hi;
		opt_best = hi < opt_best ? hi : opt_best;
		return;
	}
	for (b = 0; b < m; b++) {
		uint32_t a;

		/* Machines with equal loads are interchangeable: try only the first of them. */
		for (a = 0; a < b && load[a] != load[b]; a++)
			;
		if (a < b || load[b] + sizes[i] >= opt_best)
			continue;
		load[b] += sizes[i];
		opt_search(sizes, n, i + 1, load, m);
		load[b] -= sizes[i];
	}
}

static int
cmp_desc(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x;
	uint64_t b = *(const uint64_t *)y;

	return a > b ? -1 : (a < b);
}

static uint64_t
optimum(const struct phub_layout *l, uint32_t m)
{
	uint64_t sizes[16];
	uint64_t load[8] = { 0 };
	uint32_t n = phub_layout_chunk_count(l);
	uint32_t c;

	ck_assert_uint_le(n, 16);
	ck_assert_uint_le(m, 8);
	for (c = 0; c < n; c++) {
		struct phub_layout_chunk info;

		ck_assert_int_eq(phub_layout_chunk_get(l, c, &info), 0);
		sizes[c] = (uint64_t)info.n_elems * phub_layout_elem_size(l);
	}
	qsort(sizes, n, sizeof(*sizes), cmp_desc);
	opt_best = UINT64_MAX;
	opt_search(sizes, n, 0, load, m);
	return opt_best;
}

/* LPT's bound on m identical machines: max <= (4/3 - 1/(3m)) OPT, in integers. */
static void
check_lpt_bound(const struct phub_layout *l, enum phub_layout_level level)
{
	struct phub_layout_balance bal;
	uint32_t m = phub_layout_bin_count(l, level);
	uint64_t opt = optimum(l, m);

	ck_assert_int_eq(phub_layout_balance_get(l, level, &bal), 0);
	ck_assert_uint_ge(bal.max_bytes, opt);
	ck_assert_msg(3 * m * bal.max_bytes <= (4 * m - 1) * opt,
		"level %d: max %llu, optimum %llu on %u bins", level,
		(unsigned long long)bal.max_bytes, (unsigned long long)opt, m);
}

/* A random job of at most 12 chunks of 1..100 elements (100-element chunks, 1-element segments). */
static uint32_t
random_small_job(struct phub_layout_key *keys)
{
	uint32_t want = 1 + rng_next(12);
	uint32_t chunks = 0;
	uint32_t n = 0;

	while (chunks < want) {
		uint32_t elems = 1 + rng_next(250);
		uint32_t c = (elems + 99) / 100;

		if (chunks + c > want)
			elems = 1 + rng_next(100), c = 1;
		keys[n] = (struct phub_layout_key){ .key_id = n, .n_elems = elems };
		chunks += c;
		n++;
	}
	return n;
}

/*
 * Servers for m lcores written to sv (8 at most), drawn at random where they may be; their
 * count, and the size of an element of the job placed on them.
 */
typedef uint32_t (*servers_fn)(struct phub_layout_server *sv, uint32_t m, uint32_t *elem_size);

/*
 * 200 random small jobs placed on the servers of servers(), each checked as a placement and
 * against LPT's bound at the lcore level and at level other.
 */
static void
check_random_placements(uint32_t seed, servers_fn servers, enum phub_layout_level other)
{
	struct phub_layout_server sv[8];
	struct phub_layout_key keys[12];

	rng_state = seed;
	for (uint32_t inst = 0; inst < 200; inst++) {
		uint32_t n_keys = random_small_job(keys);
		uint32_t m = 2 + rng_next(3);
		uint32_t elem_size;
		uint32_t n = servers(sv, m, &elem_size);
		struct phub_layout *l = make(keys, n_keys, elem_size, 400, 1, sv, n);

		check_placement(l, sv, n);
		check_lpt_bound(l, PHUB_LAYOUT_LEVEL_LCORE);
		check_lpt_bound(l, other);
		phub_layout_free(l);
	}
}

/* One server per lcore, ports drawn at random: the lcores are LPT's machines. */
static uint32_t
one_server_per_lcore(struct phub_layout_server *sv, uint32_t m, uint32_t *elem_size)
{
	for (uint32_t s = 0; s < m; s++)
		sv[s] = (struct phub_layout_server){
			.lcore = 10 + s, .port = (uint16_t)rng_next(2),
			.port_numa = 0, .lcore_numa = 0,
		};
	*elem_size = 2 + 2 * rng_next(2);
	return m;
}

/* Every lcore serves each of 2 or 3 ports (2 where that would be more than 8 servers). */
static uint32_t
every_lcore_every_port(struct phub_layout_server *sv, uint32_t m, uint32_t *elem_size)
{
	uint32_t ports = 2 + rng_next(2);

	if (m * ports > 8)
		ports = 2;
	for (uint32_t i = 0; i < m * ports; i++)
		sv[i] = (struct phub_layout_server){
			.lcore = i % m, .port = (uint16_t)(i / m),
			.port_numa = 0, .lcore_numa = 0,
		};
	*elem_size = 4;
	return m * ports;
}

START_TEST(test_place_keeps_lcore_load_within_4_3_of_the_optimum)
{
	check_random_placements(0x5eed0002, one_server_per_lcore, PHUB_LAYOUT_LEVEL_SERVER);
}
END_TEST

START_TEST(test_place_keeps_lcore_and_port_loads_within_4_3_when_every_lcore_has_every_port)
{
	check_random_placements(0x5eed0003, every_lcore_every_port, PHUB_LAYOUT_LEVEL_PORT);
}
END_TEST

START_TEST(test_place_follows_lpt_on_its_worst_case)
{
	/*
	 * 2m+1 jobs m..2m-1 twice and m once: LPT makes 4m-1 where 3m is possible. The keys come
	 * shuffled so that greedy in input order makes something else (6 and 12): only LPT's
	 * largest-first order gives exactly 4m-1.
	 */
	static const uint32_t sizes[2][7] = { { 2, 3, 2, 3, 2 }, { 3, 3, 3, 4, 4, 5, 5 } };
	static const uint32_t counts[2] = { 5, 7 };
	struct phub_layout_server sv[3];
	struct phub_layout_key keys[7];
	uint32_t t;

	for (t = 0; t < 2; t++) {
		uint32_t m = t + 2;
		struct phub_layout_balance bal;
		struct phub_layout *l;
		uint32_t i;

		for (i = 0; i < counts[t]; i++)
			keys[i] = (struct phub_layout_key){
				.key_id = i, .n_elems = 100 * sizes[t][i],
			};
		for (i = 0; i < m; i++)
			sv[i] = (struct phub_layout_server){
				.lcore = i, .port = 0, .port_numa = 0, .lcore_numa = 0,
			};
		l = make(keys, counts[t], 4, 4 * 500, 100, sv, m);
		ck_assert_uint_eq(phub_layout_chunk_count(l), counts[t]);
		ck_assert_int_eq(phub_layout_balance_get(l, PHUB_LAYOUT_LEVEL_LCORE, &bal), 0);
		ck_assert_uint_eq(bal.max_bytes, 4 * 100 * (4 * m - 1));
		ck_assert_uint_eq(optimum(l, m), 4 * 100 * 3 * m);
		phub_layout_free(l);
	}
}
END_TEST

/* Every (port, lcore) pair of a box, filtered by the NUMA rule. */
static uint32_t
numa_box(struct phub_layout_server *sv, uint32_t ports_per_node, uint32_t lcores_per_node,
		uint32_t nodes)
{
	uint32_t n = 0;
	uint32_t p;
	uint32_t c;

	for (p = 0; p < ports_per_node * nodes; p++) {
		for (c = 0; c < lcores_per_node * nodes; c++) {
			struct phub_layout_server s = {
				.lcore = c, .port = (uint16_t)p,
				.port_numa = (int32_t)(p / ports_per_node),
				.lcore_numa = (int32_t)(c / lcores_per_node),
			};

			if (phub_layout_server_numa_ok(&s))
				sv[n++] = s;
		}
	}
	return n;
}

START_TEST(test_place_keeps_every_chunk_on_its_ports_numa_node)
{
	struct phub_layout_server sv[64];
	struct phub_layout_key keys[161];
	uint32_t n_keys = resnet50_keys(keys);
	struct phub_layout_load load;
	struct phub_layout *l;
	uint32_t ns;
	uint32_t c;

	/* 2 nodes, 2 ports and 4 lcores each: 16 of the 64 pairs are on one node. */
	ns = numa_box(sv, 2, 4, 2);
	ck_assert_uint_eq(ns, 16);
	l = make(keys, n_keys, 4, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, sv, ns);
	check_placement(l, sv, ns);
	for (c = 0; c < phub_layout_chunk_count(l); c++) {
		uint32_t s;

		ck_assert_int_eq(phub_layout_chunk_server(l, c, &s), 0);
		ck_assert_int_eq(sv[s].port / 2, (int)sv[s].lcore / 4);
	}
	ck_assert_uint_eq(phub_layout_bin_count(l, PHUB_LAYOUT_LEVEL_NUMA), 2);
	ck_assert_int_eq(phub_layout_bin_get(l, PHUB_LAYOUT_LEVEL_NUMA, 1, &load), 0);
	ck_assert_uint_eq(load.id, 1);
	ck_assert_double_le(spread(l, PHUB_LAYOUT_LEVEL_NUMA), 1.01);
	phub_layout_free(l);

	/* A port of unknown node (a virtual device) is served by lcores of both nodes. */
	sv[ns++] = (struct phub_layout_server){ .lcore = 0, .port = 9,
		.port_numa = PHUB_LAYOUT_NUMA_ANY, .lcore_numa = 0 };
	sv[ns++] = (struct phub_layout_server){ .lcore = 7, .port = 9,
		.port_numa = PHUB_LAYOUT_NUMA_ANY, .lcore_numa = 1 };
	l = make(keys, n_keys, 4, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, sv, ns);
	check_placement(l, sv, ns);
	ck_assert_int_eq(phub_layout_bin_get(l, PHUB_LAYOUT_LEVEL_SERVER, ns - 2, &load), 0);
	ck_assert_uint_gt(load.n_chunks, 0);
	ck_assert_int_eq(phub_layout_bin_get(l, PHUB_LAYOUT_LEVEL_SERVER, ns - 1, &load), 0);
	ck_assert_uint_gt(load.n_chunks, 0);
	phub_layout_free(l);
}
END_TEST

START_TEST(test_place_gives_the_same_map_byte_for_byte_on_every_run)
{
	struct phub_layout_server sv[64];
	struct phub_layout_key keys[161];
	uint32_t n_keys = resnet50_keys(keys);
	uint32_t ns = numa_box(sv, 2, 4, 2);
	struct phub_layout *a;
	struct phub_layout *b;
	uint32_t *map[2];
	uint32_t n;
	uint32_t c;
	int run;

	a = make(keys, n_keys, 2, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP16_1500, sv, ns);
	b = make(keys, n_keys, 2, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP16_1500, sv, ns);
	n = phub_layout_chunk_count(a);
	ck_assert_uint_eq(phub_layout_chunk_count(b), n);
	for (run = 0; run < 2; run++) {
		map[run] = malloc(sizeof(uint32_t) * n);
		ck_assert_ptr_nonnull(map[run]);
		for (c = 0; c < n; c++)
			ck_assert_int_eq(phub_layout_chunk_server(run ? b : a, c, &map[run][c]), 0);
	}
	ck_assert_mem_eq(map[0], map[1], sizeof(uint32_t) * n);
	for (c = 0; c < ns; c++) {
		struct phub_layout_load la;
		struct phub_layout_load lb;

		ck_assert_int_eq(phub_layout_bin_get(a, PHUB_LAYOUT_LEVEL_SERVER, c, &la), 0);
		ck_assert_int_eq(phub_layout_bin_get(b, PHUB_LAYOUT_LEVEL_SERVER, c, &lb), 0);
		ck_assert_mem_eq(&la, &lb, sizeof(la));
	}
	/* Not all on one server: the map is worth comparing. */
	ck_assert_uint_ne(map[0][0], map[0][1]);
	free(map[0]);
	free(map[1]);
	phub_layout_free(a);
	phub_layout_free(b);
}
END_TEST

START_TEST(test_place_balances_resnet50_per_lcore_and_per_port)
{
	static const struct {
		const char *name;
		uint32_t ports_per_node;
		uint32_t lcores_per_node;
		uint32_t nodes;
	} box[] = {
		{ "2 ports x 2 lcores", 2, 2, 1 },
		{ "2 ports x 3 lcores", 2, 3, 1 },	/* not a multiple */
		{ "3 ports x 2 lcores", 3, 2, 1 },
		{ "2 nodes x (2 ports x 4 lcores)", 2, 4, 2 },
		{ "2 nodes x (5 ports x 8 lcores)", 5, 8, 2 },	/* the paper's 10-NIC PBox */
	};
	struct phub_layout_server sv[160];
	struct phub_layout_key keys[161];
	uint32_t n_keys = resnet50_keys(keys);
	uint64_t total = 0;
	uint32_t i;

	ck_assert_uint_eq(n_keys, 161);
	for (i = 0; i < n_keys; i++)
		total += keys[i].n_elems;
	ck_assert_uint_eq(total, 25557032);

	for (i = 0; i < sizeof(box) / sizeof(box[0]); i++) {
		uint32_t ns = numa_box(sv, box[i].ports_per_node, box[i].lcores_per_node,
			box[i].nodes);
		struct phub_layout *l;

		l = make(keys, n_keys, 4, PHUB_LAYOUT_CHUNK_BYTES_DEFAULT, SEG_FP32_1500, sv, ns);
		check_placement(l, sv, ns);
		print_figures(l, box[i].name);
		ck_assert_msg(spread(l, PHUB_LAYOUT_LEVEL_LCORE) <= 1.01, "box %u: lcore %.4f", i,
			spread(l, PHUB_LAYOUT_LEVEL_LCORE));
		ck_assert_msg(spread(l, PHUB_LAYOUT_LEVEL_PORT) <= 1.01, "box %u: port %.4f", i,
			spread(l, PHUB_LAYOUT_LEVEL_PORT));
		ck_assert_msg(spread(l, PHUB_LAYOUT_LEVEL_NUMA) <= 1.01, "box %u: numa %.4f", i,
			spread(l, PHUB_LAYOUT_LEVEL_NUMA));
		ck_assert_msg(spread(l, PHUB_LAYOUT_LEVEL_SERVER) <= 1.05, "box %u: pair %.4f", i,
			spread(l, PHUB_LAYOUT_LEVEL_SERVER));
		if (i == 0)
			check_cover_once(l);
		phub_layout_free(l);
	}
}
END_TEST

Suite *
phub_layout_suite(void)
{
	Suite *s = suite_create("layout");
	TCase *tc;

#define ADD(name, fn) tcase_set_timeout(PHUB_TCASE(s, name, fn), 60)
	ADD("cut_geometry", test_cut_counts_chunk_bytes_in_fp32_elements_rounded_to_segments);
	ADD("cut_large_key",
		test_cut_splits_a_large_key_into_whole_segment_chunks_and_a_short_tail);
	ADD("cut_small_keys", test_cut_makes_each_key_smaller_than_a_chunk_one_chunk);
	ADD("cut_cover", test_cut_covers_every_element_once_for_keys_of_any_size);
	ADD("cut_64bit", test_cut_counts_in_64_bits_for_keys_of_2_32_minus_1_elements);
	ADD("cut_limit", test_cut_accepts_exactly_the_chunk_limit);
	ADD("lookup_keys", test_lookup_finds_keys_by_id_and_refuses_what_is_not_there);
	ADD("lookup_unplaced", test_lookup_of_placement_on_a_cut_only_layout_gives_enodata);
	ADD("place_lpt_bound", test_place_keeps_lcore_load_within_4_3_of_the_optimum);
	ADD("place_lpt_bound_ports",
		test_place_keeps_lcore_and_port_loads_within_4_3_when_every_lcore_has_every_port);
	ADD("place_lpt_worst_case", test_place_follows_lpt_on_its_worst_case);
	ADD("place_numa", test_place_keeps_every_chunk_on_its_ports_numa_node);
	ADD("place_deterministic", test_place_gives_the_same_map_byte_for_byte_on_every_run);
	ADD("place_resnet50", test_place_balances_resnet50_per_lcore_and_per_port);
#undef ADD
	tc = tcase_create("bad_params");
	tcase_add_loop_test(tc, test_create_rejects_bad_params_with_einval_and_a_reason, 0, N_BAD);
	suite_add_tcase(s, tc);
	return s;
}
