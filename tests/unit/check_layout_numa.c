/* SPDX-License-Identifier: BSD-3-Clause */
/* NUMA placement of a job's buffers (lib/layout/layout_numa.c) on an injected two-node box. */

#include <errno.h>
#include <stdbool.h>

#include <check.h>

#include "unit_suite.h"

#include "layout/phub_layout.h"

/*
 * Two nodes, as on a dual-socket PBox: port 0 and lcores 1, 2 on node 0; port 1 and lcores
 * 9, 10 on node 1. The last server has no known lcore node: its port's decides.
 */
static const struct phub_layout_server two_nodes[] = {
	{ .lcore = 1, .port = 0, .port_numa = 0, .lcore_numa = 0 },
	{ .lcore = 2, .port = 0, .port_numa = 0, .lcore_numa = 0 },
	{ .lcore = 9, .port = 1, .port_numa = 1, .lcore_numa = 1 },
	{ .lcore = 10, .port = 1, .port_numa = 1, .lcore_numa = 1 },
};

#define PAGE 4096u
#define MAX_PAGES 4096

struct runs {
	uint64_t next_page;
	int page_node[MAX_PAGES];
	unsigned int n_runs;
	int last_node;
	bool ok;
};

static void
record(uint64_t first, uint64_t n, int node, void *arg)
{
	struct runs *r = arg;

	/* Runs are in order, adjacent, maximal (two runs in a row never share a node). */
	if (first != r->next_page || n == 0 || (r->n_runs > 0 && node == r->last_node))
		r->ok = false;
	for (uint64_t p = first; p < first + n && p < MAX_PAGES; p++)
		r->page_node[p] = node;
	r->next_page = first + n;
	r->last_node = node;
	r->n_runs++;
}

static struct phub_layout *
make(const struct phub_layout_key *keys, uint32_t n_keys, const struct phub_layout_server *s,
     uint32_t n_servers)
{
	struct phub_layout_params p = {
		.keys = keys, .n_keys = n_keys, .elem_size = 4, .chunk_bytes = 32768,
		.segment_elems = 2048, .servers = s, .n_servers = n_servers,
	};
	struct phub_layout *l = phub_layout_create(&p);

	ck_assert_ptr_nonnull(l);
	return l;
}

START_TEST(test_every_chunk_belongs_on_its_lcores_node_and_both_nodes_are_used)
{
	static const struct phub_layout_key keys[] = {
		{ 0, 100000 }, { 1, 7 }, { 2, 33333 }, { 3, 8192 }, { 4, 250000 }, { 5, 1 },
	};
	struct phub_layout *l = make(keys, 6, two_nodes, 4);
	uint64_t bytes[2] = { 0, 0 };

	for (uint32_t c = 0; c < phub_layout_chunk_count(l); c++) {
		struct phub_layout_chunk ch;
		int node = phub_layout_chunk_node(l, two_nodes, 4, c);

		ck_assert_int_eq(phub_layout_chunk_get(l, c, &ch), 0);
		ck_assert_uint_lt(ch.server, 4);
		ck_assert_int_eq(node, two_nodes[ch.server].lcore_numa);
		bytes[node] += (uint64_t)ch.n_elems * 4;
	}
	/* The placement spreads over both nodes: neither holds everything. */
	ck_assert_uint_gt(bytes[0], 0);
	ck_assert_uint_gt(bytes[1], 0);
	ck_assert_uint_eq(bytes[0] + bytes[1], phub_layout_elem_count(l) * 4);
	ck_assert_int_eq(phub_layout_chunk_node(l, two_nodes, 4, phub_layout_chunk_count(l)),
			 -EINVAL);
	phub_layout_free(l);
}
END_TEST

START_TEST(test_a_server_without_an_lcore_node_takes_its_ports)
{
	static const struct phub_layout_server placed[] = {
		{ .lcore = 3, .port = 1, .port_numa = 1, .lcore_numa = 1 },
	};
	/* The same server as a caller that lost the lcore's node (or both) describes it. */
	static const struct phub_layout_server port_only[] = {
		{ .lcore = 3, .port = 1, .port_numa = 1, .lcore_numa = -1 },
	};
	static const struct phub_layout_server unknown[] = {
		{ .lcore = 3, .port = 1, .port_numa = PHUB_LAYOUT_NUMA_ANY, .lcore_numa = -1 },
	};
	static const struct phub_layout_key keys[] = { { 0, 1000 } };
	struct phub_layout *l = make(keys, 1, placed, 1);

	ck_assert_int_eq(phub_layout_chunk_node(l, placed, 1, 0), 1);
	ck_assert_int_eq(phub_layout_chunk_node(l, port_only, 1, 0), 1);
	ck_assert_int_eq(phub_layout_chunk_node(l, unknown, 1, 0), PHUB_LAYOUT_NUMA_ANY);
	ck_assert_int_eq(phub_layout_chunk_node(l, placed, 0, 0), -EINVAL);
	phub_layout_free(l);
}
END_TEST

/* Pages of chunk-aligned keys each lie in one chunk: every page is on its chunk's node. */
START_TEST(test_pages_of_aligned_chunks_follow_their_chunk_exactly)
{
	static const struct phub_layout_key keys[] = { { 0, 8192 * 5 }, { 1, 8192 * 3 } };
	struct phub_layout *l = make(keys, 2, two_nodes, 4);
	struct runs r = { .ok = true, .last_node = -2 };
	uint64_t per_node[2] = { 0, 0 };

	ck_assert_int_eq(phub_layout_pages_by_node(l, two_nodes, 4, 4, PAGE, record, &r), 0);
	ck_assert(r.ok);
	ck_assert_uint_eq(r.next_page, 8192u * 8 * 4 / PAGE);
	for (uint32_t c = 0; c < phub_layout_chunk_count(l); c++) {
		struct phub_layout_chunk ch;
		int node = phub_layout_chunk_node(l, two_nodes, 4, c);

		phub_layout_chunk_get(l, c, &ch);
		for (uint64_t b = ch.elem_base * 4; b < (ch.elem_base + ch.n_elems) * 4; b += PAGE)
			ck_assert_int_eq(r.page_node[b / PAGE], node);
		per_node[node] += ch.n_elems * 4;
	}
	/* The bytes placed per node are the layout's own NUMA bins. */
	for (uint32_t i = 0; i < phub_layout_bin_count(l, PHUB_LAYOUT_LEVEL_NUMA); i++) {
		struct phub_layout_load load;

		phub_layout_bin_get(l, PHUB_LAYOUT_LEVEL_NUMA, i, &load);
		ck_assert_uint_eq(per_node[load.id], load.bytes);
	}
	phub_layout_free(l);
}
END_TEST

/* Unaligned keys: a page shared by chunks goes where most of its bytes are used. */
START_TEST(test_a_shared_page_goes_to_the_node_of_most_of_its_bytes)
{
	static const struct phub_layout_key keys[] = {
		{ 0, 1000 }, { 1, 3000 }, { 2, 77777 }, { 3, 5 }, { 4, 12345 }, { 5, 40000 },
	};
	struct phub_layout *l = make(keys, 6, two_nodes, 4);
	struct runs r = { .ok = true, .last_node = -2 };
	uint64_t n_pages = (phub_layout_elem_count(l) * 4 + PAGE - 1) / PAGE;

	ck_assert_int_eq(phub_layout_pages_by_node(l, two_nodes, 4, 4, PAGE, record, &r), 0);
	ck_assert(r.ok);
	ck_assert_uint_eq(r.next_page, n_pages);
	ck_assert_uint_gt(r.n_runs, 1);
	for (uint64_t p = 0; p < n_pages; p++) {
		uint64_t on[2] = { 0, 0 };

		/* Brute force: bytes of page p used by chunks of each node. */
		for (uint32_t c = 0; c < phub_layout_chunk_count(l); c++) {
			struct phub_layout_chunk ch;
			uint64_t a, b, lo = p * PAGE, hi = lo + PAGE;

			phub_layout_chunk_get(l, c, &ch);
			a = ch.elem_base * 4;
			b = a + (uint64_t)ch.n_elems * 4;
			if (b > lo && a < hi)
				on[phub_layout_chunk_node(l, two_nodes, 4, c)] +=
					(b < hi ? b : hi) - (a > lo ? a : lo);
		}
		ck_assert_msg(on[r.page_node[p]] >= on[1 - r.page_node[p]],
			      "page %llu on node %d: %llu vs %llu bytes", (unsigned long long)p,
			      r.page_node[p], (unsigned long long)on[0], (unsigned long long)on[1]);
	}
	phub_layout_free(l);
}
END_TEST

Suite *
phub_layout_numa_suite(void)
{
	Suite *s = suite_create("layout_numa");

	PHUB_TCASE(s, "numa",
		test_every_chunk_belongs_on_its_lcores_node_and_both_nodes_are_used,
		test_a_server_without_an_lcore_node_takes_its_ports,
		test_pages_of_aligned_chunks_follow_their_chunk_exactly,
		test_a_shared_page_goes_to_the_node_of_most_of_its_bytes);
	return s;
}
