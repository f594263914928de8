/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/engine: sessions, every drop reason, and exact models through a lossy network. */

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "engine/phub_engine.h"
#include "engine_sim.h"
#include "engine_test.h"

static struct phub_engine_job_params
test_params(uint16_t world, enum phub_dtype dtype, enum phub_opt_type opt)
{
	struct phub_optimizer_params o = { .type = opt, .lr = 0.5f, .momentum = 0.5f,
		.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };

	return phub_test_job_params("job", 0x1122334455667788ull, world, dtype, o);
}

static uint64_t
join(struct phub_engine_job *job, uint16_t rank)
{
	return phub_test_join(job, rank, 0x1122334455667788ull);
}

/* The exchange through the lossy network of engine_sim.c, on a job of test_params. */
static double
run_exchange(const struct phub_sim_exchange *x)
{
	struct phub_engine_job_params p = test_params(x->world, PHUB_DTYPE_FP32, x->opt);

	return phub_sim_run(&p, x);
}

START_TEST(test_job_table_creates_finds_and_frees_jobs)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	struct phub_engine_job *a, *b;
	struct phub_engine_job_info info;
	uint32_t id;

	a = phub_engine_job_create(engine, &p);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_null(phub_engine_job_create(engine, &p));
	ck_assert_int_eq(errno, EEXIST);
	p.name = "other";
	b = phub_engine_job_create(engine, &p);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_ne(phub_engine_job_id(a), phub_engine_job_id(b));
	ck_assert_ptr_eq(phub_engine_job_lookup(engine, phub_engine_job_id(b)), b);
	ck_assert_ptr_eq(phub_engine_job_find(engine, "job"), a);
	ck_assert_ptr_eq(phub_engine_job_next(engine, NULL), a);
	ck_assert_ptr_eq(phub_engine_job_next(engine, a), b);
	ck_assert_ptr_null(phub_engine_job_next(engine, b));

	phub_engine_job_get_info(a, &info);
	ck_assert_uint_eq(info.n_elems, 1307);
	ck_assert_uint_eq(info.n_keys, 3);
	/* 7 -> 1 chunk; 300 -> 256 + 44; 1000 -> 3 x 256 + 232 */
	ck_assert_uint_eq(info.n_chunks, 7);
	ck_assert_uint_eq(info.n_segments, 1 + 4 + 1 + 4 * 3 + 4);
	ck_assert_uint_ge(info.memory_bytes, 1307 * 4 * 2);

	/* A stale id of a freed job must not find a new job in the same slot. */
	id = phub_engine_job_id(a);
	phub_engine_job_unpublish(engine, a);
	phub_engine_job_free(a);
	ck_assert_ptr_null(phub_engine_job_lookup(engine, id));
	p.name = "third";
	a = phub_engine_job_create(engine, &p);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_null(phub_engine_job_lookup(engine, id));
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_job_refuses_memory_beyond_its_limit)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_ADAM);

	p.memory_limit_bytes = 1307 * 4 * 3;	/* model + agg fit, Adam's m and v do not */
	ck_assert_ptr_null(phub_engine_job_create(engine, &p));
	ck_assert_int_eq(errno, E2BIG);
	p.memory_limit_bytes = 1 << 20;
	ck_assert_ptr_nonnull(phub_engine_job_create(engine, &p));
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_job_table_refuses_bad_parameters)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(0, PHUB_DTYPE_FP32, PHUB_OPT_SGD);

	ck_assert_ptr_null(phub_engine_job_create(engine, &p));
	ck_assert_int_eq(errno, EINVAL);
	p = test_params(PHUB_ENGINE_MAX_WORKERS + 1, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	ck_assert_ptr_null(phub_engine_job_create(engine, &p));
	p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	p.optimizer.lr = -1.0f;
	ck_assert_ptr_null(phub_engine_job_create(engine, &p));
	ck_assert_int_eq(errno, EINVAL);
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_join_checks_nonce_and_rank_and_is_idempotent)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p);
	struct phub_engine_peer peer = phub_test_peer(0), moved = phub_test_peer(0), got;
	uint64_t t1, t2, t3, seen;

	ck_assert_int_eq(phub_engine_job_join(job, 0, 42, &peer, &t1), -PHUB_WIRE_ERR_BAD_NONCE);
	ck_assert_int_eq(phub_engine_job_join(job, 2, p.nonce, &peer, &t1),
			-PHUB_WIRE_ERR_RANK_RANGE);
	ck_assert_int_eq(phub_engine_job_join(job, 0, p.nonce, &peer, &t1), 0);
	ck_assert_int_eq(phub_engine_job_join(job, 0, p.nonce, &peer, &t2), 0);
	ck_assert_uint_eq(t1, t2);

	/* The same rank from a new address: a restarted worker gets a new token. */
	moved.udp_port = PHUB_TEST_PEER_PORT + 1;
	ck_assert_int_eq(phub_engine_job_join(job, 0, p.nonce, &moved, &t3), 0);
	ck_assert_uint_ne(t3, t1);
	ck_assert(phub_engine_job_rank(job, 0, &got, &seen));
	ck_assert_uint_eq(seen, t3);
	ck_assert_uint_eq(got.udp_port, PHUB_TEST_PEER_PORT + 1);
	ck_assert(!phub_engine_job_rank(job, 1, &got, &seen));

	ck_assert_int_eq(phub_engine_job_leave(job, 0, t1), -EPERM);
	ck_assert_int_eq(phub_engine_job_leave(job, 0, t3), 0);
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_nonce_matches_only_the_jobs_own_nonce)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	struct phub_engine_job *a, *b;

	a = phub_engine_job_create(engine, &p);
	p.name = "other";
	p.nonce = ~p.nonce;
	b = phub_engine_job_create(engine, &p);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert(phub_engine_job_nonce_matches(a, 0x1122334455667788ull));
	ck_assert(phub_engine_job_nonce_matches(b, ~0x1122334455667788ull));
	/* Another job's nonce, and every guess one bit away, are refused. */
	ck_assert(!phub_engine_job_nonce_matches(a, ~0x1122334455667788ull));
	ck_assert(!phub_engine_job_nonce_matches(b, 0x1122334455667788ull));
	ck_assert(!phub_engine_job_nonce_matches(a, 0));
	for (unsigned int bit = 0; bit < 64; bit++)
		ck_assert_msg(!phub_engine_job_nonce_matches(a, 0x1122334455667788ull ^
				(UINT64_C(1) << bit)), "bit %u", bit);
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_push_drops_each_bad_request_for_its_reason)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p);
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;
	struct phub_engine_request r;
	float payload[PHUB_TEST_SEG_ELEMS] = { 0 };
	uint64_t token = join(job, 0);

	memset(&stats, 0, sizeof(stats));
#define EXPECT_DROP(why) do { \
		phub_engine_push(job, &r, &reply, &stats); \
		ck_assert_uint_eq(reply.actions, PHUB_ENGINE_DROP); \
		ck_assert_int_eq(reply.reason, why); \
		ck_assert_uint_eq(stats.drops[why], 1); \
	} while (0)

	r = phub_test_request(job, 0, token, 1, 0, 0, payload);
	r.rank = 2;
	EXPECT_DROP(PHUB_DROP_RANK_RANGE);
	r = phub_test_request(job, 1, token, 1, 0, 0, payload);
	EXPECT_DROP(PHUB_DROP_NOT_JOINED);
	r = phub_test_request(job, 0, token ^ 1, 1, 0, 0, payload);
	EXPECT_DROP(PHUB_DROP_BAD_TOKEN);
	r = phub_test_request(job, 0, token, 1, 0, 0, payload);
	r.src_ipv4++;
	EXPECT_DROP(PHUB_DROP_WRONG_SOURCE);
	r = phub_test_request(job, 0, token, 1, 0, 0, payload);
	r.chunk_id = 7;
	EXPECT_DROP(PHUB_DROP_CHUNK_RANGE);
	r = phub_test_request(job, 0, token, 1, 1, 0, payload);
	r.elem_offset += 1;
	EXPECT_DROP(PHUB_DROP_OFFSET_RANGE);
	r = phub_test_request(job, 0, token, 1, 0, 0, payload);
	r.iteration = 1;
	EXPECT_DROP(PHUB_DROP_FUTURE_ITERATION);
	r = phub_test_request(job, 0, token, 1, 0, 0, payload);
	r.iteration = UINT32_MAX;
	EXPECT_DROP(PHUB_DROP_STALE_ITERATION);
	/* Nothing was added by any of them. */
	ck_assert_uint_eq(stats.pushes, 0);
#undef EXPECT_DROP
	phub_engine_free(engine);
}
END_TEST

/* Rank r pushes g (7 fp32) for segment 0 of chunk 0 at iteration it, with hyper when has. */
static void
push_hyper(struct phub_engine_job *job, uint16_t rank, uint64_t token, uint32_t it,
		const float *g, bool has, float lr, float wd, struct phub_engine_reply *reply,
		struct phub_engine_stats *stats)
{
	struct phub_engine_request r = phub_test_request(job, rank, token, 0, 0, it, g);

	r.has_hyper = has;
	r.hyper_lr = lr;
	r.hyper_weight_decay = wd;
	phub_engine_push(job, &r, reply, stats);
}

START_TEST(test_step_hyper_parameters_apply_per_iteration_and_must_agree)
{
	struct phub_engine *engine = phub_engine_create();
	/* SGD, JOIN lr 0.5, no weight decay. */
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p);
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;
	float w[7] = { 1, 1, 1, 1, 1, 1, 8 }, g[7] = { 2, 2, 2, 2, 2, 2, 2 };
	uint64_t t0 = join(job, 0), t1 = join(job, 1);

	memset(&stats, 0, sizeof(stats));
	push_hyper(job, 0, t0, 0, w, false, 0, 0, &reply, &stats);
	/* Iteration 0 (the initial round) ignores HYPER. */
	push_hyper(job, 1, t1, 0, w, true, 9.0f, 0, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK | PHUB_ENGINE_MODEL_ALL);

	/* Iteration 1 without HYPER: the JOIN's lr, 1 - 0.5 * 2 = 0. */
	push_hyper(job, 0, t0, 1, g, false, 0, 0, &reply, &stats);
	push_hyper(job, 1, t1, 1, g, false, 0, 0, &reply, &stats);
	ck_assert_float_eq(((const float *)reply.model)[0], 0.0f);

	/* Iteration 2 with lr 0.25 and weight decay 0.5 from both: 0 - 0.25 * (2 + 0.5 * 0). */
	push_hyper(job, 0, t0, 2, g, true, 0.25f, 0.5f, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK);
	push_hyper(job, 1, t1, 2, g, true, 0.25f, 0.5f, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK | PHUB_ENGINE_MODEL_ALL);
	ck_assert_float_eq(((const float *)reply.model)[0], -0.5f);
	/* Element 6: 8 - 0.5 * 2 = 7, then 7 - 0.25 * (2 + 0.5 * 7) = 5.625. */
	ck_assert_float_eq(((const float *)reply.model)[6], 5.625f);

	/* Iteration 3: rank 1 disagrees on lr, then omits it: both dropped, nothing added. */
	push_hyper(job, 0, t0, 3, g, true, 0.1f, 0, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK);
	push_hyper(job, 1, t1, 3, g, true, 0.2f, 0, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_DROP);
	ck_assert_int_eq(reply.reason, PHUB_DROP_HYPER_MISMATCH);
	push_hyper(job, 1, t1, 3, g, false, 0, 0, &reply, &stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_HYPER_MISMATCH);
	push_hyper(job, 1, t1, 3, g, true, 0.1f, 0, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK | PHUB_ENGINE_MODEL_ALL);
	/* -0.5 - 0.1 * 2 = -0.7 */
	ck_assert_float_eq_tol(((const float *)reply.model)[0], -0.7f, 1e-6f);
	ck_assert_uint_eq(stats.drops[PHUB_DROP_HYPER_MISMATCH], 2);

	/* A value the kernels cannot take is refused whatever the slot holds. */
	push_hyper(job, 0, t0, 4, g, true, -1.0f, 0, &reply, &stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_BAD_HYPER);
	push_hyper(job, 0, t0, 4, g, true, 0.1f, NAN, &reply, &stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_BAD_HYPER);
	ck_assert_uint_eq(stats.drops[PHUB_DROP_BAD_HYPER], 2);

	phub_engine_job_unpublish(engine, job);
	phub_engine_job_free(job);
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_push_counts_a_duplicate_once_and_acks_it_again)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_NONE);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p);
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;
	struct phub_engine_request r;
	float a[7] = { 1, 2, 3, 4, 5, 6, 7 }, b[7] = { 10, 20, 30, 40, 50, 60, 70 };
	uint64_t t0 = join(job, 0), t1 = join(job, 1);

	memset(&stats, 0, sizeof(stats));
	/* Iteration 0: rank 0's values become the model. */
	r = phub_test_request(job, 0, t0, 0, 0, 0, a);
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK);
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK);
	ck_assert_uint_eq(stats.duplicates, 1);
	r = phub_test_request(job, 1, t1, 0, 0, 0, b);
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK | PHUB_ENGINE_MODEL_ALL);
	ck_assert_uint_eq(reply.model_bytes, sizeof(a));
	ck_assert_mem_eq(reply.model, a, sizeof(a));

	/* Iteration 1 with NONE: the model is the mean, duplicates excluded. */
	r = phub_test_request(job, 0, t0, 0, 0, 1, a);
	phub_engine_push(job, &r, &reply, &stats);
	phub_engine_push(job, &r, &reply, &stats);
	r = phub_test_request(job, 1, t1, 0, 0, 1, b);
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK | PHUB_ENGINE_MODEL_ALL);
	ck_assert_float_eq(((const float *)reply.model)[6], 38.5f);

	/* A late retransmission of the finished iteration gets the kept MODEL. */
	r = phub_test_request(job, 0, t0, 0, 0, 1, a);
	r.retransmit = true;
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_MODEL_ONE);
	ck_assert_uint_eq(reply.iteration, 1);
	ck_assert_float_eq(((const float *)reply.model)[0], 5.5f);
	ck_assert_uint_eq(stats.models_resent, 1);
	ck_assert_uint_eq(stats.retransmits_seen, 1);
	ck_assert_uint_eq(stats.pushes, 4);
	ck_assert_uint_eq(stats.segments_completed, 2);

	/* PULL: the finished iteration only. */
	r = phub_test_request(job, 1, t1, 0, 0, 1, NULL);
	phub_engine_pull(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_MODEL_ONE);
	r.iteration = 2;
	phub_engine_pull(job, &r, &reply, &stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_FUTURE_ITERATION);
	phub_engine_free(engine);
}
END_TEST


static void
run_lossy_exchange(uint16_t world, enum phub_opt_type opt, unsigned int loss_pct,
		unsigned int dup_pct, uint64_t seed)
{
	struct phub_sim_exchange x = {
		.world = world, .opt = opt, .loss_pct = loss_pct, .dup_pct = dup_pct,
		.seed = seed, .expect_exact = true,
	};

	run_exchange(&x);
}

START_TEST(test_exchange_without_loss_gives_the_reference_model)
{
	run_lossy_exchange(3, PHUB_OPT_SGD, 0, 0, 1);
}
END_TEST

START_TEST(test_exchange_with_loss_duplication_and_reordering_is_exact)
{
	static const enum phub_opt_type opts[] = {
		PHUB_OPT_SGD, PHUB_OPT_NESTEROV, PHUB_OPT_ADAM,
	};

	for (unsigned int i = 0; i < 3; i++) {
		run_lossy_exchange(1, opts[i], 20, 10, 7 + i);
		run_lossy_exchange(2, opts[i], 5, 5, 11 + i);
		run_lossy_exchange(4, opts[i], 20, 10, 13 + i);
	}
}
END_TEST

START_TEST(test_fp16_job_keeps_the_model_in_fp32_and_sends_fp16)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP16, PHUB_OPT_SGD);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p);
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;
	struct phub_engine_request r;
	/* fp16: 1.0 = 0x3c00, 2.0 = 0x4000, 0.5 = 0x3800 */
	uint16_t one[7], two[7];
	uint64_t t0 = join(job, 0), t1 = join(job, 1);

	memset(&stats, 0, sizeof(stats));
	for (int i = 0; i < 7; i++) {
		one[i] = 0x3c00;
		two[i] = 0x4000;
	}
	for (uint32_t it = 0; it < 2; it++) {
		r = phub_test_request(job, 0, t0, 0, 0, it, it == 0 ? one : two);
		r.dtype = PHUB_DTYPE_FP16;
		r.payload_len = sizeof(one);
		phub_engine_push(job, &r, &reply, &stats);
		r = phub_test_request(job, 1, t1, 0, 0, it, it == 0 ? one : one);
		r.dtype = PHUB_DTYPE_FP16;
		r.payload_len = sizeof(one);
		phub_engine_push(job, &r, &reply, &stats);
		ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK | PHUB_ENGINE_MODEL_ALL);
	}
	/* w = 1 - 0.5 * (2 + 1) / 2 = 0.25 = 0x3400 in fp16 */
	ck_assert_float_eq(phub_engine_job_model(job)[3], 0.25f);
	ck_assert_uint_eq(reply.model_bytes, 14);
	ck_assert_uint_eq(((const uint16_t *)reply.model)[3], 0x3400);
	/* An fp32 payload in an fp16 job is refused. */
	r = phub_test_request(job, 0, t0, 0, 0, 2, one);
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_DROP);
	phub_engine_free(engine);
}
END_TEST

/* Every segment of the job pushed by rank at iteration with a zero gradient. */
static void
push_all(struct phub_engine_job *job, uint16_t rank, uint64_t token, uint32_t iteration,
		struct phub_engine_stats *stats)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);
	static const float zeros[PHUB_TEST_SEG_ELEMS];
	struct phub_engine_reply reply;

	for (uint32_t c = 0; c < phub_layout_chunk_count(layout); c++) {
		struct phub_layout_chunk info;

		phub_layout_chunk_get(layout, c, &info);
		for (uint16_t g = 0; g < info.n_segments; g++) {
			struct phub_engine_request r = phub_test_request(job, rank, token, c, g, iteration,
					zeros);

			phub_engine_push(job, &r, &reply, stats);
			ck_assert_uint_ne(reply.actions, PHUB_ENGINE_DROP);
		}
	}
}

START_TEST(test_deterministic_job_sums_in_rank_order_whatever_the_arrival_order)
{
	static const uint16_t orders[6][3] = {
		{ 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 }, { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 },
	};
	/* (1 + 1e8) - 1e8 is 0 in fp32; 1 + (1e8 - 1e8) is 1: the order shows. */
	static const float values[3] = { 1.0f, 1e8f, -1e8f };
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(3, PHUB_DTYPE_FP32, PHUB_OPT_NONE);
	struct phub_engine_job *job, *plain;
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;
	struct phub_engine_request r;
	float g[3][7];
	uint64_t t[3], u[3];

	memset(&stats, 0, sizeof(stats));
	p.deterministic = true;
	job = phub_engine_job_create(engine, &p);
	p.name = "plain";
	p.deterministic = false;
	plain = phub_engine_job_create(engine, &p);
	ck_assert(phub_engine_job_deterministic(job));
	ck_assert(!phub_engine_job_deterministic(plain));
	for (uint16_t k = 0; k < 3; k++) {
		for (int i = 0; i < 7; i++)
			g[k][i] = values[k];
		t[k] = join(job, k);
		u[k] = join(plain, k);
		r = phub_test_request(job, k, t[k], 0, 0, 0, g[0]);
		phub_engine_push(job, &r, &reply, &stats);
		r = phub_test_request(plain, k, u[k], 0, 0, 0, g[0]);
		phub_engine_push(plain, &r, &reply, &stats);
	}
	for (uint32_t o = 0; o < 6; o++) {
		for (int a = 0; a < 3; a++) {
			uint16_t k = orders[o][a];

			r = phub_test_request(job, k, t[k], 0, 0, o + 1, g[k]);
			phub_engine_push(job, &r, &reply, &stats);
			ck_assert_uint_eq(reply.actions, a < 2 ? PHUB_ENGINE_ACK :
					PHUB_ENGINE_ACK | PHUB_ENGINE_MODEL_ALL);
			/* A staged rank sent again is ACKed and not added twice. */
			phub_engine_push(job, &r, &reply, &stats);
			if (a < 2)
				ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK);
			r = phub_test_request(plain, k, u[k], 0, 0, o + 1, g[k]);
			phub_engine_push(plain, &r, &reply, &stats);
		}
		/* NONE: the model is the mean, ((1 + 1e8) - 1e8) / 3 = 0 in every order. */
		ck_assert_float_eq(phub_engine_job_model(job)[6], 0.0f);
		/* The default mode adds in arrival order: rank 0 last gives 1/3. */
		ck_assert_float_eq(phub_engine_job_model(plain)[6],
				orders[o][2] == 0 ? 1.0f / 3 : 0.0f);
	}
	ck_assert_uint_eq(stats.duplicates, 12);
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_deterministic_job_counts_its_staging_buffer_against_the_limit)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(3, PHUB_DTYPE_FP16, PHUB_OPT_SGD);
	struct phub_engine_job_info a, b;
	struct phub_engine_job *job;

	job = phub_engine_job_create(engine, &p);
	phub_engine_job_get_info(job, &a);
	p.name = "det";
	p.deterministic = true;
	job = phub_engine_job_create(engine, &p);
	phub_engine_job_get_info(job, &b);
	/* Ranks 1 and 2 of 3 may wait: two copies of the model in fp16. */
	ck_assert_uint_eq(b.memory_bytes - a.memory_bytes, 2u * 1307 * 2);
	p.name = "det2";
	p.memory_limit_bytes = b.memory_bytes - 1;
	ck_assert_ptr_null(phub_engine_job_create(engine, &p));
	ck_assert_int_eq(errno, E2BIG);
	p.memory_limit_bytes = b.memory_bytes + 4096;
	ck_assert_ptr_nonnull(phub_engine_job_create(engine, &p));
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_deterministic_job_matches_the_reference_through_a_lossy_network)
{
	static const enum phub_opt_type opts[] = {
		PHUB_OPT_SGD, PHUB_OPT_NESTEROV, PHUB_OPT_ADAM,
	};

	for (unsigned int i = 0; i < 3; i++) {
		for (uint16_t world = 1; world <= PHUB_SIM_MAX_WORLD; world++) {
			struct phub_sim_exchange x = {
				.world = world, .opt = opts[i], .loss_pct = 20, .dup_pct = 10,
				.seed = 100 + i * 10 + world, .random = true,
				.deterministic = true, .expect_exact = true,
			};

			ck_assert(run_exchange(&x) == 0.0);
			/* Exact gradients stay exact too. */
			x.random = false;
			ck_assert(run_exchange(&x) == 0.0);
		}
	}
}
END_TEST

START_TEST(test_default_job_rounds_random_gradients_in_arrival_order)
{
	unsigned int differ = 0;

	for (uint64_t seed = 1; seed <= 4; seed++) {
		struct phub_sim_exchange x = {
			.world = 4, .opt = PHUB_OPT_SGD, .loss_pct = 20, .dup_pct = 10,
			.seed = seed, .random = true,
		};
		double worst = run_exchange(&x);

		/* Another rounding of the same sums: a few ulps, not another model. */
		ck_assert(worst < 1e-5);
		differ += worst > 0;
	}
	/* Not once did the arrival order happen to be the rank order everywhere. */
	ck_assert_uint_eq(differ, 4);
}
END_TEST

/* A clock the test moves by hand: the engine's timestamps without sleeping. */
static uint64_t
hand_clock(void *arg)
{
	return *(const uint64_t *)arg;
}

enum { NAP_NS = 30 * 1000 * 1000 };

START_TEST(test_rank_status_tells_when_each_rank_was_last_heard)
{
	uint64_t clock_ns = 1000000000u;
	struct phub_engine_params ep = { .clock = hand_clock, .clock_arg = &clock_ns };
	struct phub_engine *engine = phub_engine_create_with(&ep);
	struct phub_engine_job_params p = test_params(3, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	struct phub_layout_server servers[2] = {
		{ .lcore = 1, .port = 0, .port_numa = 0, .lcore_numa = 0 },
		{ .lcore = 2, .port = 0, .port_numa = 0, .lcore_numa = 0 },
	};
	struct phub_engine_rank_status st[3];
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;
	struct phub_engine_request r;
	struct phub_engine_job *job;
	float zeros[PHUB_TEST_SEG_ELEMS] = { 0 };
	uint32_t on_second = UINT32_MAX, server;
	uint64_t t0, t1;

	memset(&stats, 0, sizeof(stats));
	p.servers = servers;
	p.n_servers = 2;
	job = phub_engine_job_create(engine, &p);
	clock_ns += NAP_NS;
	t0 = join(job, 0);
	t1 = join(job, 1);
	/* Rank 2 has not joined: silent since the job was made, before the nap. */
	ck_assert_int_eq(phub_engine_job_rank_status(job, 2, &st[2]), 0);
	ck_assert(!st[2].joined && !st[2].pushed);
	ck_assert_uint_eq(st[2].silent_ns, NAP_NS);
	ck_assert_int_eq(phub_engine_job_rank_status(job, 0, &st[0]), 0);
	ck_assert(st[0].joined && !st[0].pushed);
	ck_assert_uint_eq(st[0].silent_ns, 0);
	ck_assert_int_eq(phub_engine_job_rank_status(job, 3, &st[0]), -EINVAL);

	push_all(job, 0, t0, 0, &stats);
	push_all(job, 1, t1, 0, &stats);
	push_all(job, 2, join(job, 2), 0, &stats);
	/* Iteration 1 of rank 0 on one chunk of the second server only. */
	for (uint32_t c = 0; c < 7 && on_second == UINT32_MAX; c++)
		if (phub_layout_chunk_server(phub_engine_job_layout(job), c, &server) == 0 &&
		    server == 1)
			on_second = c;
	ck_assert_uint_ne(on_second, UINT32_MAX);
	r = phub_test_request(job, 0, t0, on_second, 0, 1, zeros);
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK);

	for (uint16_t k = 0; k < 3; k++)
		ck_assert_int_eq(phub_engine_job_rank_status(job, k, &st[k]), 0);
	ck_assert(st[0].joined && st[0].pushed);
	ck_assert_uint_eq(st[0].newest_iteration, 1);
	ck_assert_uint_eq(st[0].peer.ipv4, PHUB_TEST_PEER_IP(0));
	ck_assert(st[1].joined && st[1].pushed);
	ck_assert_uint_eq(st[1].newest_iteration, 0);
	ck_assert(st[2].joined && st[2].pushed);

	/* A keep-alive counts only with the session's token and address. */
	ck_assert_int_eq(phub_engine_job_heard(job, 1, t1 ^ 1, PHUB_TEST_PEER_IP(1), PHUB_TEST_PEER_PORT), -EPERM);
	ck_assert_int_eq(phub_engine_job_heard(job, 1, t1, PHUB_TEST_PEER_IP(2), PHUB_TEST_PEER_PORT), -EPERM);
	ck_assert_int_eq(phub_engine_job_heard(job, 2, 0, PHUB_TEST_PEER_IP(2), PHUB_TEST_PEER_PORT), -EPERM);
	clock_ns += NAP_NS;
	ck_assert_int_eq(phub_engine_job_heard(job, 1, t1, PHUB_TEST_PEER_IP(1), PHUB_TEST_PEER_PORT), 0);
	phub_engine_job_rank_status(job, 0, &st[0]);
	phub_engine_job_rank_status(job, 1, &st[1]);
	/* Rank 0 last pushed before the nap; rank 1's keep-alive came after it. */
	ck_assert_uint_eq(st[0].silent_ns, NAP_NS);
	ck_assert_uint_eq(st[1].silent_ns, 0);
	phub_engine_free(engine);
}
END_TEST

/* A request that carries its burst's clock read is stamped with it: the engine reads no clock. */
START_TEST(test_push_and_pull_take_the_callers_time)
{
	uint64_t clock_ns = 5000000000u;
	struct phub_engine_params ep = { .clock = hand_clock, .clock_arg = &clock_ns };
	struct phub_engine *engine = phub_engine_create_with(&ep);
	struct phub_engine_job_params p = test_params(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	struct phub_engine_rank_status st;
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;
	struct phub_engine_request r;
	struct phub_engine_job *job;
	float zeros[PHUB_TEST_SEG_ELEMS] = { 0 };
	uint64_t t0, t1;

	memset(&stats, 0, sizeof(stats));
	job = phub_engine_job_create(engine, &p);
	t0 = join(job, 0);
	t1 = join(job, 1);
	/* The request says 3 naps ago: rank 0 has been silent since then. */
	clock_ns += 3 * NAP_NS;
	r = phub_test_request(job, 0, t0, 0, 0, 0, zeros);
	r.now_ns = clock_ns - 3 * NAP_NS;
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_ACK);
	ck_assert_int_eq(phub_engine_job_rank_status(job, 0, &st), 0);
	ck_assert_uint_eq(st.silent_ns, 3 * NAP_NS);
	/* Without it, the job's clock. */
	r = phub_test_request(job, 1, t1, 0, 0, 0, zeros);
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_int_eq(phub_engine_job_rank_status(job, 1, &st), 0);
	ck_assert_uint_eq(st.silent_ns, 0);
	/* A PULL of the finished iteration, one nap ago. */
	r = phub_test_request(job, 0, t0, 0, 0, 0, NULL);
	r.now_ns = clock_ns - NAP_NS;
	phub_engine_pull(job, &r, &reply, &stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_MODEL_ONE);
	ck_assert_int_eq(phub_engine_job_rank_status(job, 0, &st), 0);
	ck_assert_uint_eq(st.silent_ns, NAP_NS);
	phub_engine_free(engine);
}
END_TEST

/* ---- the control thread's reads against a data lcore ---- */

enum { RACE_RANKS = 2, RACE_ITERATIONS = 40, RACE_MAX_REQS = 64 };

struct race {
	struct phub_engine_job *job;
	struct phub_engine_request reqs[RACE_RANKS][RACE_MAX_REQS];
	unsigned int n_reqs;
	atomic_bool done;
	/* What the control thread saw. */
	unsigned int looks;
	unsigned int waiting_went_back;	/* the oldest iteration moved backwards */
	unsigned int too_many_waiting;
	unsigned int info_went_back;
};

/* A data lcore: every rank's every segment, iteration after iteration. */
static void *
race_data_lcore(void *arg)
{
	struct race *x = arg;
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;

	memset(&stats, 0, sizeof(stats));
	for (uint32_t it = 0; it <= RACE_ITERATIONS; it++)
		for (unsigned int k = 0; k < RACE_RANKS; k++)
			for (unsigned int i = 0; i < x->n_reqs; i++) {
				struct phub_engine_request r = x->reqs[k][i];

				r.iteration = it;
				phub_engine_push(x->job, &r, &reply, &stats);
			}
	atomic_store(&x->done, true);
	return NULL;
}

/* The control thread: telemetry and liveness reads while the slots move. */
static void *
race_control(void *arg)
{
	struct race *x = arg;
	uint32_t oldest = 0, info_max = 0;

	do {
		uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS];
		struct phub_engine_rank_status st;
		struct phub_engine_job_info info;
		uint32_t it;
		int n;

		n = phub_engine_job_waiting_on(x->job, &it, waiting);
		x->too_many_waiting += n < 0 || n > RACE_RANKS;
		x->waiting_went_back += x->looks > 0 && (int32_t)(it - oldest) < 0;
		oldest = it;
		phub_engine_job_get_info(x->job, &info);
		x->info_went_back += (int32_t)(info.iteration_max - info_max) < 0 &&
			info_max != 0;
		info_max = info.iteration_max;
		phub_engine_job_rank_status(x->job, 1, &st);
		x->looks++;
	} while (!atomic_load(&x->done));
	return NULL;
}

/*
 * The engine is lock-free between a data lcore and the control thread: what the control
 * thread reads (waiting_on, job info, rank status) while the data lcore completes segments
 * only moves forward, and the ThreadSanitizer build (suite threads) reports no race.
 */
START_TEST(test_control_reads_race_the_data_path_cleanly)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(RACE_RANKS, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	static const float zeros[PHUB_TEST_SEG_ELEMS];
	struct phub_engine_job_info info;
	pthread_t data, control;
	struct race *x = calloc(1, sizeof(*x));
	const struct phub_layout *layout;

	ck_assert_ptr_nonnull(x);
	x->job = phub_engine_job_create(engine, &p);
	ck_assert_ptr_nonnull(x->job);
	layout = phub_engine_job_layout(x->job);
	for (uint16_t k = 0; k < RACE_RANKS; k++) {
		uint64_t token = join(x->job, k);

		x->n_reqs = 0;
		for (uint32_t c = 0; c < phub_layout_chunk_count(layout); c++) {
			struct phub_layout_chunk ci;

			phub_layout_chunk_get(layout, c, &ci);
			for (uint16_t g = 0; g < ci.n_segments; g++) {
				ck_assert_uint_lt(x->n_reqs, RACE_MAX_REQS);
				x->reqs[k][x->n_reqs++] = phub_test_request(x->job, k, token, c, g, 0, zeros);
			}
		}
	}
	ck_assert_int_eq(pthread_create(&control, NULL, race_control, x), 0);
	ck_assert_int_eq(pthread_create(&data, NULL, race_data_lcore, x), 0);
	pthread_join(data, NULL);
	pthread_join(control, NULL);
	phub_engine_job_get_info(x->job, &info);
	ck_assert_uint_eq(info.iteration_min, RACE_ITERATIONS);
	ck_assert_uint_eq(info.iteration_max, RACE_ITERATIONS);
	ck_assert_uint_gt(x->looks, 0);
	ck_assert_uint_eq(x->too_many_waiting, 0);
	ck_assert_uint_eq(x->waiting_went_back, 0);
	ck_assert_uint_eq(x->info_went_back, 0);
	free(x);
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_waiting_on_names_the_ranks_the_oldest_iteration_lacks)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = test_params(3, PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	struct phub_engine_job *job = phub_engine_job_create(engine, &p);
	uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS];
	struct phub_engine_stats stats;
	struct phub_engine_reply reply;
	struct phub_engine_request r;
	float zeros[PHUB_TEST_SEG_ELEMS] = { 0 };
	uint64_t t[3];
	uint32_t it;

	memset(&stats, 0, sizeof(stats));
	for (uint16_t k = 0; k < 3; k++)
		t[k] = join(job, k);
	/* Nobody pushed anything: nobody waits. */
	ck_assert_int_eq(phub_engine_job_waiting_on(job, &it, waiting), 0);
	ck_assert_uint_eq(it, 0);
	push_all(job, 0, t[0], 0, &stats);
	push_all(job, 1, t[1], 0, &stats);
	ck_assert_int_eq(phub_engine_job_waiting_on(job, &it, waiting), 1);
	ck_assert_uint_eq(it, 0);
	ck_assert_uint_eq(waiting[0], 1u << 2);
	ck_assert_uint_eq(waiting[1] | waiting[2] | waiting[3], 0);
	push_all(job, 2, t[2], 0, &stats);
	ck_assert_int_eq(phub_engine_job_waiting_on(job, &it, waiting), 0);
	ck_assert_uint_eq(it, 1);
	/* Rank 1 alone began iteration 1: it waits on ranks 0 and 2. */
	r = phub_test_request(job, 1, t[1], 3, 0, 1, zeros);
	phub_engine_push(job, &r, &reply, &stats);
	ck_assert_int_eq(phub_engine_job_waiting_on(job, &it, waiting), 2);
	ck_assert_uint_eq(waiting[0], (1u << 0) | (1u << 2));
	phub_engine_free(engine);
}
END_TEST

Suite *
phub_engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *tc;

	PHUB_TCASE(s, "jobs",
		test_job_table_creates_finds_and_frees_jobs,
		test_job_refuses_memory_beyond_its_limit,
		test_job_table_refuses_bad_parameters);

	PHUB_TCASE(s, "sessions",
		test_join_checks_nonce_and_rank_and_is_idempotent,
		test_nonce_matches_only_the_jobs_own_nonce);

	PHUB_TCASE(s, "push",
		test_push_drops_each_bad_request_for_its_reason,
		test_push_counts_a_duplicate_once_and_acks_it_again,
		test_step_hyper_parameters_apply_per_iteration_and_must_agree,
		test_fp16_job_keeps_the_model_in_fp32_and_sends_fp16);

	tc = PHUB_TCASE(s, "exchange",
		test_exchange_without_loss_gives_the_reference_model,
		test_exchange_with_loss_duplication_and_reordering_is_exact);
	tcase_set_timeout(tc, 120);

	tc = PHUB_TCASE(s, "deterministic",
		test_deterministic_job_sums_in_rank_order_whatever_the_arrival_order,
		test_deterministic_job_counts_its_staging_buffer_against_the_limit,
		test_deterministic_job_matches_the_reference_through_a_lossy_network,
		test_default_job_rounds_random_gradients_in_arrival_order);
	tcase_set_timeout(tc, 120);

	PHUB_TCASE(s, "liveness",
		test_rank_status_tells_when_each_rank_was_last_heard,
		test_push_and_pull_take_the_callers_time,
		test_waiting_on_names_the_ranks_the_oldest_iteration_lacks);

	tc = PHUB_TCASE(s, "races", test_control_reads_race_the_data_path_cleanly);
	tcase_set_timeout(tc, 120);
	return s;
}
