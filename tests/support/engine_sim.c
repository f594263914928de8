/* SPDX-License-Identifier: BSD-3-Clause */
/* The lossy network of lib/engine's exchange tests (engine_sim.h): workers, a queue, the engine. */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "engine_sim.h"
#include "engine_test.h"
#include "kernels/phub_kernels.h"
#include "phub_mix.h"
#include "test_rand.h"

enum { MAX_W = PHUB_SIM_MAX_WORLD, ITERATIONS = PHUB_SIM_ITERATIONS, MAX_MSGS = 4096 };

struct sim_msg {
	int to_pbox;		/* 1: PUSH/PULL to the engine; 0: reply to a worker */
	int pull;
	int model;		/* reply: 1 MODEL, 0 ACK */
	uint16_t rank;
	uint32_t chunk;
	uint16_t seg;
	uint32_t iteration;
};

struct sim {
	struct phub_engine_job *job;
	uint16_t world;
	uint64_t token[MAX_W];
	uint32_t n_chunks;
	uint32_t n_segments;
	/* per worker, per (chunk, seg): 0 sent, 1 acked, 2 model in */
	uint8_t *state[MAX_W];
	float *worker_model[MAX_W];
	uint32_t iteration[MAX_W];
	uint32_t pending[MAX_W];
	struct sim_msg queue[MAX_MSGS];
	unsigned int queued;
	uint64_t rng;
	unsigned int loss_pct, dup_pct;
	uint64_t lost;
	bool random;		/* random fractions rather than small integers */
	float *payload;		/* one segment's gradient, built at delivery */
};

static uint32_t
sim_rand(struct sim *s)
{
	return (uint32_t)(phub_test_rand(&s->rng) >> 11);
}

static float
gradient(bool random, uint16_t rank, uint32_t iteration, uint64_t elem)
{
	uint64_t h;

	/* Iteration 0: the initial weights, the same on every rank. */
	if (iteration == 0)
		return (float)(elem % 5) * 0.25f;
	if (!random)
		return (float)((int)((elem * 7 + rank * 13 + iteration * 3) % 17) - 8);
	/* Uniform in (-4, 4) with every bit of the significand used: sums round. */
	h = phub_mix64(((uint64_t)rank << 48) ^ ((uint64_t)iteration << 32) ^ elem);
	return (float)(((double)(h >> 11) * 0x1p-53 - 0.5) * 8.0);
}

static void
sim_send(struct sim *s, struct sim_msg m)
{
	if (sim_rand(s) % 100 < s->loss_pct) {
		s->lost++;
		return;
	}
	for (int copies = sim_rand(s) % 100 < s->dup_pct ? 2 : 1; copies > 0; copies--) {
		ck_assert_uint_lt(s->queued, MAX_MSGS);
		s->queue[s->queued++] = m;
	}
}

static uint32_t
sim_index(const struct sim *s, uint32_t chunk, uint16_t seg)
{
	const struct phub_layout *layout = phub_engine_job_layout(s->job);
	uint32_t index = 0;

	for (uint32_t c = 0; c < chunk; c++) {
		struct phub_layout_chunk info;

		phub_layout_chunk_get(layout, c, &info);
		index += info.n_segments;
	}
	return index + seg;
}

static void
sim_push(struct sim *s, uint16_t rank, uint32_t chunk, uint16_t seg, int pull)
{
	struct sim_msg m = { .to_pbox = 1, .pull = pull, .rank = rank, .chunk = chunk,
		.seg = seg, .iteration = s->iteration[rank] };

	sim_send(s, m);
}

static void
sim_start_iteration(struct sim *s, uint16_t rank)
{
	const struct phub_layout *layout = phub_engine_job_layout(s->job);

	memset(s->state[rank], 0, s->n_segments);
	s->pending[rank] = s->n_segments;
	for (uint32_t c = 0; c < s->n_chunks; c++) {
		struct phub_layout_chunk info;

		phub_layout_chunk_get(layout, c, &info);
		for (uint16_t g = 0; g < info.n_segments; g++)
			sim_push(s, rank, c, g, 0);
	}
}

static void
sim_deliver_to_pbox(struct sim *s, const struct sim_msg *m, struct phub_engine_stats *stats)
{
	const struct phub_layout *layout = phub_engine_job_layout(s->job);
	struct phub_layout_chunk info;
	struct phub_layout_segment seg;
	struct phub_engine_reply reply;
	struct phub_engine_request r;

	phub_layout_chunk_get(layout, m->chunk, &info);
	phub_layout_segment_get(layout, m->chunk, m->seg, &seg);
	for (uint32_t i = 0; i < seg.n_elems; i++)
		s->payload[i] = gradient(s->random, m->rank, m->iteration,
				info.elem_base + seg.elem_offset + i);
	r = phub_test_request(s->job, m->rank, s->token[m->rank], m->chunk, m->seg,
			m->iteration, s->payload);
	if (m->pull)
		phub_engine_pull(s->job, &r, &reply, stats);
	else
		phub_engine_push(s->job, &r, &reply, stats);

	if (reply.actions & PHUB_ENGINE_ACK) {
		struct sim_msg ack = *m;

		ack.to_pbox = 0;
		ack.model = 0;
		sim_send(s, ack);
	}
	if (reply.actions & (PHUB_ENGINE_MODEL_ONE | PHUB_ENGINE_MODEL_ALL)) {
		/* The model travels in the message by reference: copy it at delivery. */
		for (uint16_t w = 0; w < s->world; w++) {
			struct sim_msg model = *m;

			if (!(reply.actions & PHUB_ENGINE_MODEL_ALL) && w != m->rank)
				continue;
			model.to_pbox = 0;
			model.model = 1;
			model.rank = w;
			model.iteration = reply.iteration;
			sim_send(s, model);
		}
	}
}

static void
sim_deliver_to_worker(struct sim *s, const struct sim_msg *m)
{
	const struct phub_layout *layout = phub_engine_job_layout(s->job);
	const float *model = phub_engine_job_model(s->job);
	struct phub_layout_chunk info;
	struct phub_layout_segment seg;
	uint32_t index = sim_index(s, m->chunk, m->seg);
	uint8_t *st = &s->state[m->rank][index];

	if (m->iteration != s->iteration[m->rank] || *st == 2)
		return;		/* stale or already complete: the worker ignores it */
	if (!m->model) {
		*st = 1;
		return;
	}
	/*
	 * The engine's model buffer still holds this iteration's result: the
	 * next one cannot finish before this worker pushes to it.
	 */
	phub_layout_chunk_get(layout, m->chunk, &info);
	phub_layout_segment_get(layout, m->chunk, m->seg, &seg);
	memcpy(s->worker_model[m->rank] + info.elem_base + seg.elem_offset,
			model + info.elem_base + seg.elem_offset, seg.n_elems * sizeof(float));
	*st = 2;
	if (--s->pending[m->rank] == 0 && ++s->iteration[m->rank] <= ITERATIONS)
		sim_start_iteration(s, m->rank);
}

/* The worker's timer: everything not yet answered goes again, as PUSH or PULL. */
static void
sim_timeout(struct sim *s, uint16_t rank)
{
	const struct phub_layout *layout = phub_engine_job_layout(s->job);
	uint32_t index = 0;

	if (s->iteration[rank] > ITERATIONS)
		return;
	for (uint32_t c = 0; c < s->n_chunks; c++) {
		struct phub_layout_chunk info;

		phub_layout_chunk_get(layout, c, &info);
		for (uint16_t g = 0; g < info.n_segments; g++, index++) {
			if (s->state[rank][index] == 0)
				sim_push(s, rank, c, g, 0);
			else if (s->state[rank][index] == 1)
				sim_push(s, rank, c, g, 1);
		}
	}
}

/* The model every worker must end with: the scalar kernels in rank order. */
static float *
reference_model(uint16_t world, bool random, const struct phub_optimizer_params *opt,
		uint64_t n_elems)
{
	const struct phub_kernels *k = phub_kernels_for_isa(PHUB_ISA_SCALAR);
	float *w = calloc(n_elems, sizeof(float));
	float *m = calloc(n_elems, sizeof(float));
	float *v = calloc(n_elems, sizeof(float));
	float *acc = calloc(n_elems, sizeof(float));
	float *g = calloc(n_elems, sizeof(float));

	for (uint64_t i = 0; i < n_elems; i++)
		w[i] = gradient(random, 0, 0, i);
	for (uint32_t t = 1; t <= ITERATIONS; t++) {
		struct phub_opt_step step;
		struct phub_opt_buffers buf = {
			.acc = world > 1 ? acc : NULL, .grad = g, .weight = w, .m = m, .v = v,
			.grad_dtype = PHUB_DTYPE_FP32, .out_dtype = PHUB_DTYPE_FP32,
		};

		for (uint16_t r = 0; r < world; r++) {
			for (uint64_t i = 0; i < n_elems; i++)
				g[i] = gradient(random, r, t, i);
			if (r == 0 && world > 1)
				k->first(acc, g, PHUB_DTYPE_FP32, n_elems);
			else if (r + 1 < world)
				k->add(acc, g, PHUB_DTYPE_FP32, n_elems);
		}
		phub_opt_step_init(&step, opt, t, world);
		k->last(&buf, n_elems, opt, &step);
	}
	free(m);
	free(v);
	free(acc);
	free(g);
	return w;
}

/*
 * Run the exchange to the end and check it; returns the largest difference
 * of the engine's model from the reference relative to max(|reference|, 1)
 * (0 when bit-identical).
 */
double
phub_sim_run(const struct phub_engine_job_params *params, const struct phub_sim_exchange *x)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = *params;
	struct phub_engine_stats stats;
	struct phub_engine_job_info info;
	struct sim *s = calloc(1, sizeof(*s));
	uint16_t world = x->world;
	const float *got;
	double worst = 0;
	float *ref;
	unsigned int rounds = 0;
	int done;

	ck_assert_uint_le(world, MAX_W);
	ck_assert_uint_eq(p.world_size, world);
	ck_assert_int_eq(p.optimizer.type, x->opt);
	memset(&stats, 0, sizeof(stats));
	p.deterministic = x->deterministic;
	s->job = phub_engine_job_create(engine, &p);
	ck_assert_ptr_nonnull(s->job);
	phub_engine_job_get_info(s->job, &info);
	ck_assert(info.deterministic == x->deterministic);
	s->world = world;
	s->n_chunks = info.n_chunks;
	s->n_segments = info.n_segments;
	s->rng = x->seed;
	s->loss_pct = x->loss_pct;
	s->dup_pct = x->dup_pct;
	s->random = x->random;
	s->payload = calloc(p.segment_elems, sizeof(float));
	for (uint16_t r = 0; r < world; r++) {
		s->token[r] = phub_test_join(s->job, r, p.nonce);
		s->state[r] = calloc(info.n_segments, 1);
		s->worker_model[r] = calloc(info.n_elems, sizeof(float));
	}
	for (uint16_t r = 0; r < world; r++)
		sim_start_iteration(s, r);

	do {
		/* Deliver what is in flight in random order, then let timers fire. */
		while (s->queued > 0) {
			unsigned int i = sim_rand(s) % s->queued;
			struct sim_msg m = s->queue[i];

			s->queue[i] = s->queue[--s->queued];
			if (m.to_pbox)
				sim_deliver_to_pbox(s, &m, &stats);
			else
				sim_deliver_to_worker(s, &m);
		}
		done = 1;
		for (uint16_t r = 0; r < world; r++) {
			sim_timeout(s, r);
			done &= s->iteration[r] > ITERATIONS;
		}
		ck_assert_uint_lt(++rounds, 10000);
	} while (!done);

	ref = reference_model(world, x->random, &p.optimizer, info.n_elems);
	got = phub_engine_job_model(s->job);
	if (x->expect_exact)
		ck_assert_mem_eq(got, ref, info.n_elems * sizeof(float));
	for (uint64_t i = 0; i < info.n_elems; i++) {
		double d = fabs((double)got[i] - (double)ref[i]) / fmax(fabs((double)ref[i]), 1.0);

		ck_assert(!isnan(d));
		worst = d > worst ? d : worst;
	}
	for (uint16_t r = 0; r < world; r++) {
		/* Every worker holds the PBox's model, whatever it is. */
		ck_assert_mem_eq(s->worker_model[r], got, info.n_elems * sizeof(float));
		free(s->state[r]);
		free(s->worker_model[r]);
	}
	phub_engine_job_get_info(s->job, &info);
	ck_assert_uint_eq(info.iteration_min, ITERATIONS);
	ck_assert_uint_eq(info.iteration_max, ITERATIONS);
	ck_assert_uint_eq(stats.segments_completed, (uint64_t)info.n_segments * (ITERATIONS + 1));
	/* Every accepted push was added exactly once. */
	ck_assert_uint_eq(stats.pushes, (uint64_t)info.n_segments * (ITERATIONS + 1) * world);
	if (x->loss_pct > 0)
		ck_assert_uint_gt(s->lost, 0);
	free(ref);
	free(s->payload);
	free(s);
	phub_engine_free(engine);
	return worst;
}
