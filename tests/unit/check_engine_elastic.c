/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/engine's elastic jobs: a rank removed, the segments it held up, the models. */

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "engine/phub_engine.h"
#include "engine_test.h"
#include "kernels/phub_kernels.h"

#define NONCE 0x1122334455667788ull
#define WORLD 4u
#define DEAD 2u			/* the rank that dies */
#define DIES_AT 3u		/* the iteration it pushes only chunk 0 of */
#define ITERATIONS 6u

static struct phub_engine_job_params
test_params(bool deterministic, bool elastic)
{
	struct phub_optimizer_params sgd = { .type = PHUB_OPT_SGD, .lr = 0.5f };
	struct phub_engine_job_params p = phub_test_job_params("elastic", NONCE, WORLD,
			PHUB_DTYPE_FP32, sgd);

	p.deterministic = deterministic;
	p.elastic = elastic;
	return p;
}

/*
 * Rank r's gradient (or, at iteration 0, initial weights) of element e: magnitudes that differ
 * by rank, so that another summing order rounds differently.
 */
static float
grad(uint16_t r, uint32_t t, uint32_t e)
{
	static const float scale[WORLD] = { 1.0f, 3e3f, 7e-3f, 1.1e5f };
	int v = (int)((e * 37u + t * 11u + r * 5u) % 19u) - 9;

	return (float)v * scale[r] * (1.0f + (float)t * 1e-3f);
}

static void
fill(float *g, uint16_t r, uint32_t t)
{
	for (uint32_t e = 0; e < PHUB_TEST_N_ELEMS; e++)
		g[e] = grad(r, t, e);
}

static uint64_t
join(struct phub_engine_job *job, uint16_t rank)
{
	return phub_test_join(job, rank, NONCE);
}

/* Push segment seg of chunk: the reply's actions. */
static unsigned int
push(struct phub_engine_job *job, uint16_t rank, uint64_t token, uint32_t chunk, uint16_t seg,
		uint32_t it, const float *flat, struct phub_engine_stats *stats)
{
	struct phub_engine_request r = phub_test_request(job, rank, token, chunk, seg, it, NULL);
	struct phub_engine_reply reply;
	struct phub_layout_chunk c;

	phub_layout_chunk_get(phub_engine_job_layout(job), chunk, &c);
	r.payload = flat + c.elem_base + r.elem_offset;
	phub_engine_push(job, &r, &reply, stats);
	if (reply.actions & PHUB_ENGINE_MODEL_ALL)
		ck_assert_uint_eq(reply.iteration, it);
	return reply.actions;
}

/* Rank's PUSHes of iteration it: every segment, or chunk 0's only; MODEL_ALLs counted. */
static unsigned int
push_rank(struct phub_engine_job *job, uint16_t rank, uint64_t token, uint32_t it,
		bool chunk0_only, struct phub_engine_stats *stats)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);
	static float g[PHUB_TEST_N_ELEMS];
	unsigned int models = 0;

	fill(g, rank, it);
	for (uint32_t c = 0; c < (chunk0_only ? 1 : phub_layout_chunk_count(layout)); c++) {
		struct phub_layout_chunk info;

		phub_layout_chunk_get(layout, c, &info);
		for (uint16_t s = 0; s < info.n_segments; s++) {
			unsigned int a = push(job, rank, token, c, s, it, g, stats);

			ck_assert_uint_ne(a, PHUB_ENGINE_DROP);
			models += (a & PHUB_ENGINE_MODEL_ALL) != 0;
		}
	}
	return models;
}

/*
 * The model a reference computes with the scalar kernels: each iteration sums the ranks in
 * members (a bitmask) in rank order, the highest one by the fused step, the mean over them.
 */
static void
reference(float *w, uint32_t from, uint32_t to, unsigned int (*members)(uint32_t t, uint32_t e))
{
	const struct phub_kernels *k = phub_kernels_for_isa(PHUB_ISA_SCALAR);
	struct phub_optimizer_params opt = test_params(true, true).optimizer;

	for (uint32_t t = from; t <= to; t++) {
		for (uint32_t e = 0; e < PHUB_TEST_N_ELEMS; e++) {
			float g[WORLD], acc;
			const void *srcs[WORLD];
			unsigned int m = members(t, e), n = 0;
			uint16_t top = 0;
			struct phub_opt_step step;
			struct phub_opt_buffers buf;

			for (uint16_t r = 0; r < WORLD; r++) {
				g[r] = grad(r, t, e);
				if (m & (1u << r))
					top = r;
			}
			for (uint16_t r = 0; r < top; r++)
				if (m & (1u << r))
					srcs[n++] = &g[r];
			if (n > 0)
				k->sum(&acc, false, srcs, n, PHUB_DTYPE_FP32, 1);
			phub_opt_step_init(&step, &opt, t, n + 1);
			buf = (struct phub_opt_buffers){
				.acc = n > 0 ? &acc : NULL, .grad = &g[top], .weight = &w[e],
				.grad_dtype = PHUB_DTYPE_FP32, .out_dtype = PHUB_DTYPE_FP32,
			};
			k->last(&buf, 1, &opt, &step);
		}
	}
}

/* Chunk 0 holds elements [0, chunk0_elems): the elements the dead rank pushed at DIES_AT. */
static uint32_t chunk0_elems;

static unsigned int
members_history(uint32_t t, uint32_t e)
{
	unsigned int all = (1u << WORLD) - 1;

	if (t < DIES_AT || (t == DIES_AT && e < chunk0_elems))
		return all;
	return all & ~(1u << DEAD);
}

static void
count_done(void *arg, const struct phub_engine_segment_done *what)
{
	unsigned int *n = arg;

	ck_assert_uint_eq(what->reply.actions, PHUB_ENGINE_MODEL_ALL);
	ck_assert_uint_eq(what->reply.iteration, DIES_AT);
	ck_assert_uint_eq(what->reply.model_bytes, (size_t)what->reply.elem_count * 4);
	(*n)++;
}

static bool
owns_all(void *arg, uint32_t server)
{
	(void)arg;
	(void)server;
	return true;
}

/*
 * Four ranks train; at DIES_AT rank DEAD pushes chunk 0 only and dies; the others push all of
 * it (the ranks in order, or in reverse). The PBox removes it: the job ends with the model of
 * that membership history. Returns the job's model (a copy).
 */
static float *
run_history(bool deterministic, bool reverse)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(deterministic, true);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p);
	struct phub_engine_job_info info;
	struct phub_engine_stats stats;
	struct phub_layout_chunk c0;
	uint64_t tok[WORLD];
	unsigned int models = 0, done = 0, waiting_segments;
	uint32_t from = 0, epoch = 0, it;
	float *model;
	uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS];

	ck_assert_ptr_nonnull(job);
	memset(&stats, 0, sizeof(stats));
	phub_layout_chunk_get(phub_engine_job_layout(job), 0, &c0);
	ck_assert_uint_eq(c0.elem_base, 0);
	chunk0_elems = c0.n_elems;
	phub_engine_job_get_info(job, &info);
	for (uint16_t r = 0; r < WORLD; r++)
		tok[r] = join(job, r);
	for (uint32_t t = 0; t < DIES_AT; t++)
		for (uint16_t i = 0; i < WORLD; i++)
			push_rank(job, reverse ? (uint16_t)(WORLD - 1 - i) : i,
					tok[reverse ? WORLD - 1 - i : i], t, false, &stats);
	/* Nothing to remove in a job whose ranks are all in. */
	ck_assert_uint_eq(phub_engine_elastic_poll(job, owns_all, count_done, &done, &stats,
			&epoch), 0);
	/* The dead rank pushes chunk 0 only; the live ones everything, in the order asked. */
	for (uint16_t i = 0; i < WORLD; i++) {
		uint16_t r = reverse ? (uint16_t)(WORLD - 1 - i) : i;

		models += push_rank(job, r, tok[r], DIES_AT, r == DEAD, &stats);
	}
	/* Chunk 0's segments had every rank; the others wait on the dead one. */
	ck_assert_uint_eq(models, c0.n_segments);
	waiting_segments = info.n_segments - c0.n_segments;
	ck_assert_int_eq(phub_engine_job_waiting_on(job, &it, waiting), 1);
	ck_assert_uint_eq(waiting[0], 1u << DEAD);

	ck_assert_int_eq(phub_engine_job_rank_remove(job, DEAD, &from), 0);
	/* One past the newest iteration it pushed, even though it reached only some segments. */
	ck_assert_uint_eq(from, DIES_AT + 1);
	ck_assert_int_eq(phub_engine_job_rank_remove(job, DEAD, &from), -EALREADY);
	ck_assert(phub_engine_job_rank_removed(job, DEAD, &it));
	ck_assert_uint_eq(it, DIES_AT + 1);
	ck_assert(!phub_engine_job_rank_removed(job, 0, NULL));
	ck_assert_uint_eq(phub_engine_job_live(job), WORLD - 1);
	phub_engine_job_get_info(job, &info);
	ck_assert_uint_eq(info.live, WORLD - 1);
	ck_assert_uint_eq(info.joined, WORLD - 1);
	/* Nobody waits on a removed rank. */
	ck_assert_int_eq(phub_engine_job_waiting_on(job, &it, waiting), 0);

	/* The data thread's scan completes exactly the segments that waited on it, once. */
	ck_assert_uint_eq(phub_engine_elastic_poll(job, owns_all, count_done, &done, &stats,
			&epoch), waiting_segments);
	ck_assert_uint_eq(done, waiting_segments);
	ck_assert_uint_eq(phub_engine_elastic_poll(job, owns_all, count_done, &done, &stats,
			&epoch), 0);
	phub_engine_job_get_info(job, &info);
	ck_assert_uint_eq(info.iteration_min, DIES_AT);

	/* Its PUSHes are refused from now on. */
	{
		static float g[PHUB_TEST_N_ELEMS];

		ck_assert_uint_eq(push(job, DEAD, tok[DEAD], 0, 0, DIES_AT + 1, g, &stats),
				PHUB_ENGINE_DROP);
		ck_assert_uint_eq(stats.drops[PHUB_DROP_NOT_JOINED], 1);
	}
	/* The three go on: the last of them completes each segment. */
	for (uint32_t t = DIES_AT + 1; t <= ITERATIONS; t++) {
		unsigned int m = 0;

		for (uint16_t i = 0; i < WORLD; i++) {
			uint16_t r = reverse ? (uint16_t)(WORLD - 1 - i) : i;

			if (r != DEAD)
				m += push_rank(job, r, tok[r], t, false, &stats);
		}
		ck_assert_uint_eq(m, info.n_segments);
	}
	model = malloc(PHUB_TEST_N_ELEMS * sizeof(float));
	memcpy(model, phub_engine_job_model(job), PHUB_TEST_N_ELEMS * sizeof(float));
	phub_engine_free(engine);
	return model;
}

START_TEST(test_removed_rank_leaves_the_model_a_reference_of_the_others_computes)
{
	float *want = malloc(PHUB_TEST_N_ELEMS * sizeof(float));
	float *got;

	/* Rank 0's initial weights, then the membership history: four ranks, three after. */
	fill(want, 0, 0);
	free(run_history(true, false));	/* sets chunk0_elems */
	reference(want, 1, ITERATIONS, members_history);
	/* Rank order and arrival order alike when the ranks arrive in rank order. */
	got = run_history(false, false);
	ck_assert_mem_eq(got, want, PHUB_TEST_N_ELEMS * sizeof(float));
	free(got);
	/* Rank order whatever the arrival order in a deterministic job. */
	got = run_history(true, true);
	ck_assert_mem_eq(got, want, PHUB_TEST_N_ELEMS * sizeof(float));
	free(got);
	free(want);
}
END_TEST

static unsigned int
members_all(uint32_t t, uint32_t e)
{
	(void)t;
	(void)e;
	return (1u << WORLD) - 1;
}

START_TEST(test_the_reference_tells_the_membership_apart)
{
	float *all = malloc(PHUB_TEST_N_ELEMS * sizeof(float));
	float *got = run_history(true, false);
	unsigned int differ = 0;

	/* The comparison above can fail: four ranks throughout is another model. */
	fill(all, 0, 0);
	reference(all, 1, ITERATIONS, members_all);
	for (uint32_t e = 0; e < PHUB_TEST_N_ELEMS; e++)
		differ += memcmp(&got[e], &all[e], sizeof(float)) != 0;
	ck_assert_uint_gt(differ, PHUB_TEST_N_ELEMS / 2);
	free(got);
	free(all);
}
END_TEST

START_TEST(test_deterministic_elastic_job_is_bit_identical_across_runs_of_a_history)
{
	float *a = run_history(true, false);
	float *b = run_history(true, true);

	ck_assert_mem_eq(a, b, PHUB_TEST_N_ELEMS * sizeof(float));
	free(a);
	free(b);
}
END_TEST

START_TEST(test_remove_refuses_what_it_cannot_do)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(false, false);
	struct phub_engine_job *fail_job = phub_engine_job_create(engine, &p);
	struct phub_engine_job *job;
	struct phub_engine_ring_params ring = {
		.racks = 2, .pos = 0, .total_world = 2 * WORLD, .rank_base = 0,
		.holds_rank0 = true, .rto_ns = 1000000, .rto_max_ns = 2000000,
	};
	struct phub_engine_stats stats;
	uint64_t tok[WORLD];
	uint32_t from = 77;

	memset(&stats, 0, sizeof(stats));
	/* An on_worker_dead "fail" job removes nobody. */
	ck_assert_int_eq(phub_engine_job_rank_remove(fail_job, 1, &from), -EINVAL);
	ck_assert(!phub_engine_job_elastic(fail_job));
	p.name = "e";
	p.elastic = true;
	job = phub_engine_job_create(engine, &p);
	ck_assert(phub_engine_job_elastic(job));
	ck_assert_int_eq(phub_engine_job_rank_remove(job, WORLD, &from), -EINVAL);
	/* A rank that never pushed past the initial round: its barrier needs it. */
	for (uint16_t r = 0; r < WORLD; r++)
		tok[r] = join(job, r);
	ck_assert_int_eq(phub_engine_job_rank_remove(job, 1, &from), -EBUSY);
	for (uint16_t r = 0; r < WORLD; r++)
		push_rank(job, r, tok[r], 0, false, &stats);
	ck_assert_int_eq(phub_engine_job_rank_remove(job, 1, &from), -EBUSY);
	push_rank(job, 1, tok[1], 1, false, &stats);
	ck_assert_int_eq(phub_engine_job_rank_remove(job, 1, &from), 0);
	ck_assert_uint_eq(from, 2);
	/* A ring job's racks sum in step: not elastic. */
	p.name = "ring";
	p.ring = &ring;
	ck_assert_ptr_null(phub_engine_job_create(engine, &p));
	ck_assert_int_eq(errno, EINVAL);
	phub_engine_free(engine);
}
END_TEST

/* Rank DEAD out from DIES_AT + 1 (all of DIES_AT but chunk 0's), in again from REJOIN_AT. */
#define REJOIN_AT (DIES_AT + 3)
#define REJOIN_LAST (REJOIN_AT + 3)

static unsigned int
members_rejoin(uint32_t t, uint32_t e)
{
	return t >= REJOIN_AT ? (1u << WORLD) - 1 : members_history(t, e);
}

START_TEST(test_readmitted_rank_counts_again_from_its_boundary)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(true, true);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p);
	float *want = malloc(PHUB_TEST_N_ELEMS * sizeof(float));
	struct phub_engine_stats stats;
	struct phub_engine_job_info info;
	struct phub_layout_chunk c0;
	uint64_t tok[WORLD];
	uint32_t from, epoch = 0, it;
	unsigned int done = 0;
	static float g[PHUB_TEST_N_ELEMS];

	memset(&stats, 0, sizeof(stats));
	phub_layout_chunk_get(phub_engine_job_layout(job), 0, &c0);
	chunk0_elems = c0.n_elems;
	phub_engine_job_get_info(job, &info);
	for (uint16_t r = 0; r < WORLD; r++)
		tok[r] = join(job, r);
	/* Not removed: nothing to readmit. */
	ck_assert_int_eq(phub_engine_job_rank_readmit(job, DEAD, &from), -EALREADY);
	for (uint32_t t = 0; t < DIES_AT; t++)
		for (uint16_t r = 0; r < WORLD; r++)
			push_rank(job, r, tok[r], t, false, &stats);
	for (uint16_t r = 0; r < WORLD; r++)
		push_rank(job, r, tok[r], DIES_AT, r == DEAD, &stats);
	ck_assert_int_eq(phub_engine_job_rank_remove(job, DEAD, &from), 0);
	phub_engine_elastic_poll(job, owns_all, count_done, &done, &stats, &epoch);
	/* Every segment waits for iteration DIES_AT + 1: it comes back two later. */
	ck_assert_int_eq(phub_engine_job_rank_readmit(job, DEAD, &from), 0);
	ck_assert_uint_eq(from, REJOIN_AT);
	ck_assert(phub_engine_job_rank_joining(job, DEAD, &it));
	ck_assert_uint_eq(it, REJOIN_AT);
	ck_assert(!phub_engine_job_rank_removed(job, DEAD, NULL));
	ck_assert_uint_eq(phub_engine_job_live(job), WORLD);
	tok[DEAD] = join(job, DEAD);
	/* Before its boundary the others go on without it; its PUSHes there are stale. */
	for (uint32_t t = DIES_AT + 1; t < REJOIN_AT; t++) {
		unsigned int m = 0;

		fill(g, DEAD, t);
		ck_assert_uint_eq(push(job, DEAD, tok[DEAD], 1, 0, t, g, &stats),
				PHUB_ENGINE_DROP);
		for (uint16_t r = 0; r < WORLD; r++)
			if (r != DEAD)
				m += push_rank(job, r, tok[r], t, false, &stats);
		ck_assert_uint_eq(m, info.n_segments);
	}
	ck_assert_uint_ge(stats.drops[PHUB_DROP_STALE_ITERATION], REJOIN_AT - DIES_AT - 1);
	/* From it on, every segment waits for it again: the last of the four completes it. */
	for (uint32_t t = REJOIN_AT; t <= REJOIN_LAST; t++) {
		unsigned int m = 0;

		for (uint16_t r = 0; r < WORLD; r++) {
			unsigned int got = push_rank(job, r, tok[r], t, false, &stats);

			ck_assert_uint_eq(got, r == WORLD - 1 ? info.n_segments : 0);
			m += got;
		}
		ck_assert_uint_eq(m, info.n_segments);
	}
	fill(want, 0, 0);
	reference(want, 1, REJOIN_LAST, members_rejoin);
	ck_assert_mem_eq(phub_engine_job_model(job), want, PHUB_TEST_N_ELEMS * sizeof(float));
	/* Gone again: removed from its boundary at the earliest, the others go on. */
	ck_assert_int_eq(phub_engine_job_rank_remove(job, DEAD, &from), 0);
	ck_assert_uint_eq(from, REJOIN_LAST + 1);
	ck_assert(!phub_engine_job_rank_joining(job, DEAD, NULL));
	ck_assert(phub_engine_job_rank_removed(job, DEAD, NULL));
	ck_assert_uint_eq(phub_engine_job_live(job), WORLD - 1);
	free(want);
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_checkpoint_keeps_the_job_elastic)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(true, true);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p), *back;
	struct phub_engine_ckpt_restore_params rp = { .n_servers = 0 };
	struct phub_engine_ckpt_info info;
	struct phub_engine_stats stats;
	char err[256];
	int fd = memfd_create("ckpt", 0);

	memset(&stats, 0, sizeof(stats));
	ck_assert_int_ge(fd, 0);
	for (uint16_t r = 0; r < WORLD; r++) {
		uint64_t t = join(job, r);

		push_rank(job, r, t, 0, false, &stats);
	}
	ck_assert_int_eq(phub_engine_ckpt_write(job, PHUB_ENGINE_CKPT_LIVE, 0, fd, err,
			sizeof(err)), 0);
	phub_engine_job_unpublish(engine, job);
	phub_engine_job_free(job);
	ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
	ck_assert_int_eq(phub_engine_ckpt_peek(fd, &info, err, sizeof(err)), 0);
	ck_assert_uint_eq(info.flags, PHUB_ENGINE_CKPT_F_DETERMINISTIC | PHUB_ENGINE_CKPT_F_ELASTIC);
	ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
	back = phub_engine_ckpt_restore(engine, fd, &rp, &info, err, sizeof(err));
	ck_assert_msg(back != NULL, "%s", err);
	ck_assert(phub_engine_job_elastic(back));
	ck_assert(phub_engine_job_deterministic(back));
	close(fd);
	phub_engine_free(engine);
}
END_TEST

/*
 * The control thread removes a rank while a data thread pushes the others' segments and scans
 * after each change: every iteration completes, and ThreadSanitizer sees the removal published
 * cleanly (suite threads).
 */
struct race {
	struct phub_engine_job *job;
	uint64_t tok[WORLD];
	atomic_bool removed;
	unsigned int done;
};

static void
race_done(void *arg, const struct phub_engine_segment_done *what)
{
	struct race *r = arg;

	(void)what;
	r->done++;
}

static void *
race_data(void *arg)
{
	struct race *x = arg;
	const struct phub_layout *layout = phub_engine_job_layout(x->job);
	static float g[PHUB_TEST_N_ELEMS];
	struct phub_engine_stats stats;
	struct phub_engine_job_info info;
	uint32_t epoch = 0;

	memset(&stats, 0, sizeof(stats));
	for (uint32_t t = 0; t < 40; t++) {
		for (uint16_t r = 0; r < WORLD; r++) {
			if (r != DEAD) {
				push_rank(x->job, r, x->tok[r], t, false, &stats);
				continue;
			}
			if (t >= 2)
				continue;
			/* The dying rank: its PUSHes of iteration 1 may meet the removal. */
			fill(g, r, t);
			for (uint32_t c = 0; c < phub_layout_chunk_count(layout); c++) {
				struct phub_layout_chunk ci;

				phub_layout_chunk_get(layout, c, &ci);
				for (uint16_t s = 0; s < ci.n_segments; s++)
					push(x->job, r, x->tok[r], c, s, t, g, &stats);
			}
		}
		/* From iteration 1 on, a segment may wait for the rank until it is removed. */
		while (t >= 1) {
			phub_engine_elastic_poll(x->job, owns_all, race_done, x, &stats, &epoch);
			phub_engine_job_get_info(x->job, &info);
			if (info.iteration_min == t)
				break;
		}
	}
	return NULL;
}

START_TEST(test_removal_races_the_data_thread_cleanly)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(true, true);
	struct race x = { .job = phub_engine_job_create(engine, &p) };
	struct phub_engine_rank_status st;
	struct phub_engine_job_info info;
	pthread_t th;
	uint32_t from;

	for (uint16_t r = 0; r < WORLD; r++)
		x.tok[r] = join(x.job, r);
	ck_assert_int_eq(pthread_create(&th, NULL, race_data, &x), 0);
	/* Once it has pushed iteration 1 (the data thread's cells say so), remove it. */
	do {
		phub_engine_job_rank_status(x.job, DEAD, &st);
	} while (!st.pushed || st.newest_iteration < 1);
	ck_assert_int_eq(phub_engine_job_rank_remove(x.job, DEAD, &from), 0);
	ck_assert_uint_eq(from, 2);
	pthread_join(th, NULL);
	phub_engine_job_get_info(x.job, &info);
	ck_assert_uint_eq(info.iteration_min, 39);
	ck_assert_uint_eq(info.live, WORLD - 1);
	phub_engine_free(engine);
}
END_TEST

Suite *
phub_engine_elastic_suite(void)
{
	Suite *s = suite_create("engine_elastic");
	TCase *tc;

	tc = PHUB_TCASE(s, "removal",
		test_removed_rank_leaves_the_model_a_reference_of_the_others_computes,
		test_the_reference_tells_the_membership_apart,
		test_deterministic_elastic_job_is_bit_identical_across_runs_of_a_history,
		test_remove_refuses_what_it_cannot_do,
		test_readmitted_rank_counts_again_from_its_boundary,
		test_checkpoint_keeps_the_job_elastic);
	tcase_set_timeout(tc, 60);

	tc = PHUB_TCASE(s, "races", test_removal_races_the_data_thread_cleanly);
	tcase_set_timeout(tc, 120);
	return s;
}
