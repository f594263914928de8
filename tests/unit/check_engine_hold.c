/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of lib/engine's kept first arrivals: PUSH buffers a caller lends become the segment's
 * sum, bit for bit what the copy path computes, and each kept one is handed back exactly once.
 */

#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "engine/phub_engine.h"
#include "engine_test.h"
#include "test_rand.h"

#define NONCE 0x5566778899aabbccull
#define MAX_WORLD 8
#define MAX_LENT 4096

/* One lent buffer: a PUSH's bytes 2 bytes off 4-byte alignment, as in a received frame. */
struct lent {
	uint8_t *mem;
	bool kept;
	unsigned int released;
};

/* What the lending engine was given and gave back. */
struct ledger {
	struct lent *all[MAX_LENT];
	unsigned int n, kept, released;
};

static void
release_cb(void *cookie, void *arg)
{
	struct lent *l = cookie;
	struct ledger *lg = arg;

	ck_assert_msg(l->kept, "the engine handed back a buffer its reply did not keep");
	ck_assert_msg(l->released == 0, "the engine handed a buffer back twice");
	l->released++;
	lg->released++;
	/* Freed at once: ASan sees any later read or write of it by the engine. */
	free(l->mem);
	l->mem = NULL;
}

/* The same job twice: a lends every PUSH to an engine that keeps, b copies as before. */
struct pair {
	struct phub_engine *ea, *eb;
	struct phub_engine_job *a, *b;
	uint64_t ta[MAX_WORLD], tb[MAX_WORLD];
	struct phub_engine_stats sa, sb;
	struct ledger *lg;
	uint16_t world;
	uint32_t n_chunks;
	uint32_t n_segs;
	uint32_t seg_chunk[64];
	uint16_t seg_index[64];
};

static void
pair_open(struct pair *p, struct phub_engine_job_params jp)
{
	struct phub_engine_params ep = { .release = release_cb };
	struct phub_layout_chunk c;

	memset(p, 0, sizeof(*p));
	p->lg = calloc(1, sizeof(*p->lg));
	ck_assert_ptr_nonnull(p->lg);
	ep.release_arg = p->lg;
	p->ea = phub_engine_create_with(&ep);
	p->eb = phub_engine_create();
	p->a = phub_engine_job_create(p->ea, &jp);
	p->b = phub_engine_job_create(p->eb, &jp);
	ck_assert_ptr_nonnull(p->a);
	ck_assert_ptr_nonnull(p->b);
	p->world = jp.world_size;
	for (uint16_t r = 0; r < p->world; r++) {
		p->ta[r] = phub_test_join(p->a, r, NONCE);
		p->tb[r] = phub_test_join(p->b, r, NONCE);
	}
	p->n_chunks = phub_layout_chunk_count(phub_engine_job_layout(p->a));
	for (uint32_t ch = 0; ch < p->n_chunks; ch++) {
		phub_layout_chunk_get(phub_engine_job_layout(p->a), ch, &c);
		for (uint32_t s = 0; s < c.n_segments; s++) {
			ck_assert_uint_lt(p->n_segs, 64);
			p->seg_chunk[p->n_segs] = ch;
			p->seg_index[p->n_segs++] = (uint16_t)s;
		}
	}
}

/* Both engines freed: every buffer kept was handed back once, none other was. */
static void
pair_close(struct pair *p)
{
	phub_engine_free(p->ea);
	phub_engine_free(p->eb);
	ck_assert_uint_eq(p->lg->released, p->lg->kept);
	for (unsigned int i = 0; i < p->lg->n; i++) {
		struct lent *l = p->lg->all[i];

		ck_assert_uint_eq(l->released, l->kept ? 1 : 0);
		free(l->mem);
		free(l);
	}
	free(p->lg);
}

static void
fill(float *g, size_t n, uint64_t *rng)
{
	/* Fractions of several magnitudes: sums in another order round differently. */
	for (size_t i = 0; i < n; i++)
		g[i] = (float)((double)(phub_test_rand(rng) >> 11) / 9007199254740992.0 - 0.5) *
			(float)(1u << (phub_test_rand(rng) % 12));
}

/*
 * Rank r's PUSH of segment s at iteration it, gradient g, to both jobs: the replies must agree
 * (and their MODEL bytes); a's is lent. Returns a's reply actions; *kept says it was kept.
 */
static unsigned int
push_both(struct pair *p, uint16_t r, uint32_t s, uint32_t it, const float *g, bool *kept)
{
	struct phub_engine_request ra = phub_test_request(p->a, r, p->ta[r], p->seg_chunk[s],
			p->seg_index[s], it, NULL);
	struct phub_engine_request rb = phub_test_request(p->b, r, p->tb[r], p->seg_chunk[s],
			p->seg_index[s], it, g);
	struct phub_engine_reply ya, yb;
	struct lent *l = calloc(1, sizeof(*l));

	ck_assert_ptr_nonnull(l);
	ck_assert_uint_lt(p->lg->n, MAX_LENT);
	l->mem = malloc(ra.payload_len + 2);
	ck_assert_ptr_nonnull(l->mem);
	memcpy(l->mem + 2, g, ra.payload_len);
	ra.payload = l->mem + 2;
	ra.lend = l;
	p->lg->all[p->lg->n++] = l;
	memset(&ya, 0xa5, sizeof(ya));
	memset(&yb, 0x5a, sizeof(yb));
	phub_engine_push(p->a, &ra, &ya, &p->sa);
	phub_engine_push(p->b, &rb, &yb, &p->sb);
	ck_assert(!yb.kept);
	ck_assert_uint_eq(ya.actions, yb.actions);
	if (ya.actions == PHUB_ENGINE_DROP)
		ck_assert_uint_eq(ya.reason, yb.reason);
	if (ya.actions & (PHUB_ENGINE_MODEL_ALL | PHUB_ENGINE_MODEL_ONE)) {
		ck_assert_uint_eq(ya.iteration, yb.iteration);
		ck_assert_uint_eq(ya.model_bytes, yb.model_bytes);
		ck_assert_int_eq(memcmp(ya.model, yb.model, ya.model_bytes), 0);
	}
	*kept = ya.kept;
	if (ya.kept) {
		l->kept = true;
		p->lg->kept++;
	} else {
		/* Not kept: the caller has its buffer back at once (the PBox frees or reuses it). */
		free(l->mem);
		l->mem = NULL;
	}
	return ya.actions;
}

static void
assert_models_equal(const struct pair *p)
{
	ck_assert_int_eq(memcmp(phub_engine_job_model(p->a), phub_engine_job_model(p->b),
			PHUB_TEST_N_ELEMS * sizeof(float)), 0);
}

/* Iteration 0: every rank's weights, rank 0's the model; nothing is kept in it. */
static void
initial_round(struct pair *p, uint64_t *rng)
{
	float g[PHUB_TEST_SEG_ELEMS];
	bool kept;

	for (uint32_t s = 0; s < p->n_segs; s++)
		for (uint16_t r = 0; r < p->world; r++) {
			fill(g, PHUB_TEST_SEG_ELEMS, rng);
			push_both(p, r, s, 0, g, &kept);
			ck_assert(!kept);
		}
}

/*
 * One iteration: every (segment, rank) PUSH in a shuffled order, so that many segments hold a
 * kept buffer at once; between them, duplicates of PUSHes taken, stale and future ones, all
 * lent, none of which may be kept. skip_rank (UINT16_MAX: none) pushes only even segments.
 * Returns how many PUSHes were kept.
 */
static unsigned int
iteration(struct pair *p, uint32_t it, uint64_t *rng, uint16_t skip_rank)
{
	struct { uint32_t s; uint16_t r; } order[64 * MAX_WORLD], t;
	float g[PHUB_TEST_SEG_ELEMS];
	unsigned int n = 0, kept_n = 0;
	bool kept;

	for (uint32_t s = 0; s < p->n_segs; s++)
		for (uint16_t r = 0; r < p->world; r++)
			if (r != skip_rank || s % 2 == 0) {
				order[n].s = s;
				order[n++].r = r;
			}
	for (unsigned int i = n; i > 1; i--) {
		unsigned int j = (unsigned int)(phub_test_rand(rng) % i);

		t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
	for (unsigned int i = 0; i < n; i++) {
		unsigned int odd = (unsigned int)(phub_test_rand(rng) % 10);

		fill(g, PHUB_TEST_SEG_ELEMS, rng);
		push_both(p, order[i].r, order[i].s, it, g, &kept);
		kept_n += kept;
		if (odd == 0 && i > 0) {
			/* A retransmission of an earlier PUSH (taken, or its segment done). */
			unsigned int j = (unsigned int)(phub_test_rand(rng) % i);

			push_both(p, order[j].r, order[j].s, it, g, &kept);
			ck_assert(!kept);
		} else if (odd == 1) {
			push_both(p, order[i].r, order[i].s, it - 1, g, &kept);
			ck_assert(!kept);
		} else if (odd == 2) {
			push_both(p, order[i].r, order[i].s, it + 2, g, &kept);
			ck_assert(!kept);
		}
	}
	return kept_n;
}

static void
check_bit_identical(uint16_t world, enum phub_opt_type opt, uint64_t seed)
{
	struct phub_optimizer_params o = { .type = opt, .lr = 0.25f, .momentum = 0.75f,
		.weight_decay = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
	struct phub_engine_job_params jp = phub_test_job_params("hold", NONCE, world,
			PHUB_DTYPE_FP32, o);
	uint64_t rng = seed;
	struct pair p;

	pair_open(&p, jp);
	initial_round(&p, &rng);
	assert_models_equal(&p);
	for (uint32_t it = 1; it <= 6; it++) {
		/* Every segment's first arrival was lent: each one is kept ... */
		ck_assert_uint_eq(iteration(&p, it, &rng, UINT16_MAX), p.n_segs);
		/* ... and every segment completed: each one handed back. */
		ck_assert_uint_eq(p.lg->released, p.lg->kept);
		assert_models_equal(&p);
	}
	ck_assert_uint_eq(p.sa.segments_completed, p.sb.segments_completed);
	ck_assert_uint_eq(p.sa.duplicates, p.sb.duplicates);
	pair_close(&p);
}

START_TEST(test_kept_sums_are_the_copy_paths_bits_whatever_the_order)
{
	static const uint16_t worlds[] = { 2, 3, 4, 8 };
	static const enum phub_opt_type opts[] = { PHUB_OPT_SGD, PHUB_OPT_NESTEROV,
		PHUB_OPT_ADAMW };

	for (unsigned int w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++)
		for (unsigned int o = 0; o < sizeof(opts) / sizeof(opts[0]); o++)
			for (uint64_t seed = 1; seed <= 4; seed++)
				check_bit_identical(worlds[w], opts[o],
						seed * 0x9e3779b97f4a7c15ull + w * 31 + o);
}
END_TEST

START_TEST(test_a_job_freed_mid_iteration_hands_back_what_it_kept)
{
	struct phub_optimizer_params o = { .type = PHUB_OPT_SGD, .lr = 0.5f };
	struct phub_engine_job_params jp = phub_test_job_params("hold", NONCE, 3,
			PHUB_DTYPE_FP32, o);
	float g[PHUB_TEST_SEG_ELEMS];
	uint64_t rng = 7;
	struct pair p;
	bool kept;

	pair_open(&p, jp);
	initial_round(&p, &rng);
	iteration(&p, 1, &rng, UINT16_MAX);
	/* Iteration 2: rank 0 in every segment, rank 1 in some; nothing completes. */
	for (uint32_t s = 0; s < p.n_segs; s++) {
		fill(g, PHUB_TEST_SEG_ELEMS, &rng);
		ck_assert_uint_eq(push_both(&p, 0, s, 2, g, &kept), PHUB_ENGINE_ACK);
		ck_assert(kept);
		if (s % 3 == 0) {
			push_both(&p, 1, s, 2, g, &kept);
			ck_assert(!kept);
		}
	}
	ck_assert_uint_eq(p.lg->kept - p.lg->released, p.n_segs);
	/* pair_close frees the jobs: every segment in flight hands its buffer back. */
	pair_close(&p);
}
END_TEST

static void
done_copy(void *arg, const struct phub_engine_segment_done *what)
{
	unsigned int *n = arg;

	ck_assert_uint_eq(what->reply.actions, PHUB_ENGINE_MODEL_ALL);
	(*n)++;
}

static bool
owns_all(void *arg, uint32_t server)
{
	(void)arg;
	(void)server;
	return true;
}

START_TEST(test_an_elastic_completion_reads_and_hands_back_the_kept_sum)
{
	struct phub_optimizer_params o = { .type = PHUB_OPT_MOMENTUM, .lr = 0.5f,
		.momentum = 0.5f };
	struct phub_engine_job_params jp = phub_test_job_params("hold", NONCE, 4,
			PHUB_DTYPE_FP32, o);
	uint32_t from, ea = 0, eb = 0;
	unsigned int da = 0, db = 0, kept;
	uint64_t rng = 11;
	struct pair p;

	jp.elastic = true;
	pair_open(&p, jp);
	initial_round(&p, &rng);
	iteration(&p, 1, &rng, UINT16_MAX);
	/* Rank 3 dies in iteration 2 with half the segments pushed; the rest wait on it. */
	kept = iteration(&p, 2, &rng, 3);
	ck_assert_uint_eq(kept, p.n_segs);
	ck_assert_uint_lt(p.lg->released, p.lg->kept);
	ck_assert_int_eq(phub_engine_job_rank_remove(p.a, 3, &from), 0);
	ck_assert_int_eq(phub_engine_job_rank_remove(p.b, 3, &from), 0);
	ck_assert_uint_gt(phub_engine_elastic_poll(p.a, owns_all, done_copy, &da, &p.sa, &ea), 0);
	phub_engine_elastic_poll(p.b, owns_all, done_copy, &db, &p.sb, &eb);
	ck_assert_uint_eq(da, db);
	ck_assert_uint_eq(p.lg->released, p.lg->kept);
	assert_models_equal(&p);
	/* The job goes on with three ranks, keeping as before. */
	ck_assert_uint_eq(iteration(&p, 3, &rng, 3) - 0, p.n_segs);
	assert_models_equal(&p);
	pair_close(&p);
}
END_TEST

/* Jobs whose first arrival is not a plain fp32 sum (or an engine without release) keep nothing. */
START_TEST(test_only_default_fp32_jobs_of_a_releasing_engine_keep)
{
	struct phub_optimizer_params o = { .type = PHUB_OPT_SGD, .lr = 0.5f };
	struct phub_engine_params ep = { .release = release_cb };
	struct ledger *lg = calloc(1, sizeof(*lg));
	struct phub_engine *plain = phub_engine_create(), *keeping;
	float g[PHUB_TEST_SEG_ELEMS] = { 0 };
	uint8_t buf[PHUB_TEST_SEG_ELEMS * 4 + 2];

	ep.release_arg = lg;
	keeping = phub_engine_create_with(&ep);
	for (unsigned int k = 0; k < 3; k++) {
		struct phub_engine_job_params jp = phub_test_job_params("hold", NONCE, 2,
				k == 2 ? PHUB_DTYPE_BF16 : PHUB_DTYPE_FP32, o);
		struct phub_engine *e = k == 0 ? plain : keeping;
		struct phub_engine_job *job;
		struct phub_engine_request r;
		struct phub_engine_reply y;
		struct lent l = { .mem = NULL };
		uint64_t t0, t1;

		jp.deterministic = k == 1;
		job = phub_engine_job_create(e, &jp);
		ck_assert_ptr_nonnull(job);
		t0 = phub_test_join(job, 0, NONCE);
		t1 = phub_test_join(job, 1, NONCE);
		for (uint32_t it = 0; it < 2; it++) {
			r = phub_test_request(job, 0, t0, 0, 0, it, g);
			r.dtype = (uint8_t)jp.dtype;
			r.payload_len = (size_t)r.elem_count * phub_dtype_size(jp.dtype);
			r.payload = buf + 2;
			r.lend = &l;
			phub_engine_push(job, &r, &y, &(struct phub_engine_stats){ 0 });
			ck_assert_uint_eq(y.actions, PHUB_ENGINE_ACK);
			ck_assert(!y.kept);
			r = phub_test_request(job, 1, t1, 0, 0, it, g);
			r.dtype = (uint8_t)jp.dtype;
			r.payload_len = (size_t)r.elem_count * phub_dtype_size(jp.dtype);
			phub_engine_push(job, &r, &y, &(struct phub_engine_stats){ 0 });
			ck_assert(y.actions & PHUB_ENGINE_MODEL_ALL);
		}
		phub_engine_job_unpublish(e, job);
		phub_engine_job_free(job);
	}
	ck_assert_uint_eq(lg->released, 0);
	phub_engine_free(plain);
	phub_engine_free(keeping);
	free(lg);
}
END_TEST

Suite *
phub_engine_hold_suite(void)
{
	Suite *s = suite_create("engine_hold");
	TCase *tc;

	tc = PHUB_TCASE(s, "hold",
		test_kept_sums_are_the_copy_paths_bits_whatever_the_order,
		test_a_job_freed_mid_iteration_hands_back_what_it_kept,
		test_an_elastic_completion_reads_and_hands_back_the_kept_sum,
		test_only_default_fp32_jobs_of_a_releasing_engine_keep);
	tcase_set_timeout(tc, 120);
	return s;
}
