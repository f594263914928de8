/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of the engine's cross-rack ring (lib/engine/engine_ring_node.c): R engines, one
 * per rack, each with its own workers, reduce through a lossy, duplicating, reordering ring
 * to the same models a single PBox with every worker computes, and refuse hostile ring traffic.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <check.h>

#include "unit_suite.h"
#include "test_rand.h"

#include "engine/phub_engine.h"
#include "engine/phub_ring.h"

#include "ring_test.h"

#define MAX_RACKS 4
#define MAX_RANKS 8		/* over all racks */
#define ITERATIONS 5		/* the initial round and four steps */
#define SEG_ELEMS 64u
#define CHUNK_BYTES 1024u
#define NONCE 0x0123456789abcdefull
#define NS_PER_MS 1000000ull

static const struct phub_layout_key keys[] = {
	{ .key_id = 1, .n_elems = 5 },		/* fewer elements than racks in a part */
	{ .key_id = 2, .n_elems = 300 },
	{ .key_id = 3, .n_elems = 1000 },
};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))
#define N_ELEMS 1305u

enum msg_kind { MSG_RING, MSG_RING_ACK, MSG_RING_ACKV };

/* Entries a simulated RING_ACKV gathers at most (its body lives in struct msg's data). */
#define SIM_ACKV_MAX (SEG_ELEMS * sizeof(float) / sizeof(struct phub_wire_ring_ack_entry))

struct msg {
	enum msg_kind kind;
	unsigned int to;		/* rack */
	struct phub_engine_ring_request req;
	float data[SEG_ELEMS];
};

struct rack {
	struct phub_engine *engine;
	struct phub_engine_job *job;
	unsigned int first_rank;	/* global rank of local rank 0 */
	unsigned int ranks;
	uint64_t token[MAX_RANKS];
	uint32_t models_done[ITERATIONS];	/* MODEL_ALL segments per iteration */
	struct phub_engine_stats stats;
};

struct sim {
	unsigned int racks;
	unsigned int total;
	enum phub_dtype dtype;
	enum phub_opt_type opt;
	bool exact;		/* gradients whose sums do not depend on the order */
	bool deterministic;
	bool split;		/* segments cut in R parts, not whole ones (split_segments) */
	struct rack rack[MAX_RACKS];
	uint32_t n_segments;
	struct msg *queue;
	size_t queued, cap;
	unsigned int seed;
	unsigned int loss_pct, dup_pct;
	uint64_t skipped;		/* simulated time that passed, on top of the clock */
	unsigned int polling;		/* the rack whose retransmissions poll_send() sends */
	uint64_t ring_datagrams;
	/*
	 * Whole-segment rings acknowledge with RING_ACKV, as phub-pbox does: each rack gathers
	 * the entries of the datagrams it takes (a random 1 .. SIM_ACKV_MAX, or until nothing
	 * is in flight), one message for them all; the split ring with one RING_ACK each.
	 */
	struct msg ackv[MAX_RACKS];
	unsigned int ackv_n[MAX_RACKS], ackv_at[MAX_RACKS];
	uint64_t ackvs;			/* RING_ACKV messages posted */
};

static unsigned int
rnd(struct sim *s)
{
	return phub_test_lcg(&s->seed);
}

static uint32_t
rack_ip(unsigned int r)
{
	return 0x0a000001u + (r << 8);
}

/* Rank g's gradient (or, in round 0, its initial weight) for element e of iteration it. */
static float
value(const struct sim *s, unsigned int g, uint32_t it, uint32_t e)
{
	uint32_t h = (g + 1) * 2654435761u ^ (it + 7) * 40503u ^ (e + 3) * 2246822519u;

	h ^= h >> 13;
	h *= 0x5bd1e995u;
	h ^= h >> 15;
	if (s->exact)
		return (float)((int)(h % 129) - 64) / 64.0f;	/* k/64: every sum exact */
	return ((float)(h & 0xffffff) / 16777216.0f - 0.5f) * (1.0f + (float)(g % 3) * 3.0f);
}

static void
to_dtype(enum phub_dtype dtype, const float *src, void *dst, size_t n)
{
	phub_kernels_get()->to_wire(dst, dtype, src, n);
}

static void
post(struct sim *s, const struct msg *m)
{
	unsigned int copies = phub_test_copies(&s->seed, s->loss_pct, s->dup_pct);

	while (copies-- > 0) {
		if (s->queued == s->cap) {
			s->cap = s->cap != 0 ? 2 * s->cap : 256;
			s->queue = realloc(s->queue, s->cap * sizeof(*s->queue));
			ck_assert_ptr_nonnull(s->queue);
		}
		s->queue[s->queued] = *m;
		/* The payload pointer must follow the copy. */
		s->queue[s->queued].req.payload = s->queue[s->queued].data;
		s->queued++;
	}
}

/* Ring datagrams of a RING_SEND, from rack r to rack r+1. */
static void
send_ring(struct sim *s, unsigned int r, const struct phub_engine_ring_send *what)
{
	struct phub_engine_ring_link next;
	struct phub_engine_ring_params rp;
	unsigned int step;

	ck_assert(phub_engine_job_ring(s->rack[r].job, &rp, NULL, &next));
	for (step = 0; step < phub_ring_steps(s->racks); step++) {
		uint32_t off, count;
		struct msg m;

		if ((what->steps & (1u << step)) == 0)
			continue;
		phub_ring_seg_part(s->racks, what->elem_count, what->root,
				   phub_ring_send_part(s->racks, r, step), &off, &count);
		memset(&m, 0, sizeof(m));
		m.kind = MSG_RING;
		m.to = (r + 1) % s->racks;
		phub_test_ring_request(&m.req, m.data, what, next.token, s->racks, r, step, off,
				count);
		m.req.src_ipv4 = rack_ip(r);
		m.req.src_udp_port = 47000;
		s->ring_datagrams++;
		post(s, &m);
	}
}

static void
handle_reply(struct sim *s, unsigned int r, const struct phub_engine_reply *reply)
{
	struct rack *k = &s->rack[r];

	if (reply->actions & PHUB_ENGINE_RING_SEND)
		send_ring(s, r, &reply->ring);
	if (reply->actions & PHUB_ENGINE_MODEL_ALL) {
		ck_assert_uint_lt(reply->iteration, ITERATIONS);
		ck_assert_uint_eq(reply->model_bytes, reply->elem_count * phub_dtype_size(s->dtype));
		k->models_done[reply->iteration]++;
	}
}

static void
rack_create(struct sim *s, unsigned int r, unsigned int ranks, unsigned int first_rank)
{
	struct rack *k = &s->rack[r];
	struct phub_engine_ring_params ring = {
		.racks = (uint16_t)s->racks,
		.pos = (uint16_t)r,
		.total_world = s->total,
		.rank_base = first_rank,
		.holds_rank0 = first_rank == 0,
		.rto_ns = 2 * NS_PER_MS,
		.rto_max_ns = 32 * NS_PER_MS,
		.split_segments = s->split,
	};
	struct phub_engine_job_params p = {
		.name = "spanning",
		.nonce = NONCE,
		.world_size = (uint16_t)ranks,
		.dtype = s->dtype,
		.optimizer = { .type = s->opt, .lr = 0.25f, .momentum = 0.5f, .beta1 = 0.9f,
			       .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f },
		.keys = keys,
		.n_keys = N_KEYS,
		.chunk_bytes = CHUNK_BYTES,
		.segment_elems = SEG_ELEMS,
		.deterministic = s->deterministic,
		.ring = s->racks > 1 ? &ring : NULL,
	};

	k->engine = phub_engine_create();
	ck_assert_ptr_nonnull(k->engine);
	k->job = phub_engine_job_create(k->engine, &p);
	ck_assert_ptr_nonnull(k->job);
	k->first_rank = first_rank;
	k->ranks = ranks;
	for (unsigned int i = 0; i < ranks; i++) {
		struct phub_engine_peer peer = { .ipv4 = rack_ip(r) + 100 + i, .udp_port = 40000 };

		ck_assert_int_eq(phub_engine_job_join(k->job, (uint16_t)i, NONCE, &peer,
						      &k->token[i]), 0);
	}
}

/* Link r -> r + 1 under token 0x1000 + r. */
static void
rings_connect(struct sim *s)
{
	for (unsigned int r = 0; r < s->racks && s->racks > 1; r++)
		ck_assert_int_eq(phub_test_ring_link(s->rack[r].job, s->racks, r, rack_ip, 0x1000),
				0);
}

/* Every worker of rack r pushes every segment of iteration it, in a random order. */
static void
rack_push_all(struct sim *s, unsigned int r, uint32_t it)
{
	struct rack *k = &s->rack[r];
	const struct phub_layout *layout = phub_engine_job_layout(k->job);
	uint32_t n_chunks = phub_layout_chunk_count(layout);
	size_t size = phub_dtype_size(s->dtype);
	struct {
		uint32_t chunk, seg;
		uint16_t rank;
	} order[2048];
	unsigned int n = 0, i;

	for (uint32_t c = 0; c < n_chunks; c++) {
		struct phub_layout_chunk chunk;

		phub_layout_chunk_get(layout, c, &chunk);
		for (uint32_t g = 0; g < chunk.n_segments; g++)
			for (uint16_t w = 0; w < k->ranks; w++) {
				ck_assert_uint_lt(n, 2048);
				order[n].chunk = c;
				order[n].seg = g;
				order[n].rank = w;
				n++;
			}
	}
	for (i = n; i > 1; i--) {
		unsigned int j = rnd(s) % i;
		__typeof__(order[0]) t = order[i - 1];

		order[i - 1] = order[j];
		order[j] = t;
	}
	for (i = 0; i < n; i++) {
		struct phub_layout_chunk chunk;
		struct phub_engine_request req;
		struct phub_engine_reply reply;
		float grad[SEG_ELEMS];
		uint8_t wire[SEG_ELEMS * 4];
		uint32_t count, e;

		phub_layout_chunk_get(layout, order[i].chunk, &chunk);
		count = chunk.n_elems - order[i].seg * SEG_ELEMS;
		if (count > SEG_ELEMS)
			count = SEG_ELEMS;
		for (e = 0; e < count; e++)
			grad[e] = value(s, k->first_rank + order[i].rank, it,
					(uint32_t)chunk.elem_base + order[i].seg * SEG_ELEMS + e);
		to_dtype(s->dtype, grad, wire, count);
		memset(&req, 0, sizeof(req));
		req.session_token = k->token[order[i].rank];
		req.chunk_id = order[i].chunk;
		req.iteration = it;
		req.elem_offset = order[i].seg * SEG_ELEMS;
		req.elem_count = count;
		/* Workers name themselves by global rank; the engine maps it to its rack's. */
		req.rank = (uint16_t)(k->first_rank + order[i].rank);
		req.seg_index = (uint16_t)order[i].seg;
		req.seg_count = (uint16_t)chunk.n_segments;
		req.dtype = (uint8_t)s->dtype;
		req.src_ipv4 = rack_ip(r) + 100 + order[i].rank;
		req.src_udp_port = 40000;
		req.payload = wire;
		req.payload_len = count * size;
		memset(&reply, 0, sizeof(reply));
		phub_engine_push(k->job, &req, &reply, &k->stats);
		ck_assert_msg(reply.actions & PHUB_ENGINE_ACK, "push refused: %d", reply.reason);
		handle_reply(s, r, &reply);
	}
}

/* The simulation's clock: the engine's own clock (PUSH) plus the time the simulation skipped. */
static uint64_t
sim_now(const struct sim *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + s->skipped;
}

/* Post rack r's gathered RING_ACKV to its prev; true when there was one. */
static bool
ackv_flush(struct sim *s, unsigned int r)
{
	if (s->ackv_n[r] == 0)
		return false;
	s->ackv[r].req.payload_len = s->ackv_n[r] * sizeof(struct phub_wire_ring_ack_entry);
	post(s, &s->ackv[r]);
	s->ackvs++;
	s->ackv_n[r] = 0;
	return true;
}

/* One more entry for rack r's RING_ACKV, acknowledging m. */
static void
ackv_add(struct sim *s, unsigned int r, const struct msg *m, uint64_t prev_token)
{
	struct msg *a = &s->ackv[r];

	if (s->ackv_n[r] == 0) {
		memset(a, 0, sizeof(*a));
		a->kind = MSG_RING_ACKV;
		a->to = (r + s->racks - 1) % s->racks;
		a->req.opcode = PHUB_WIRE_OP_RING_ACKV;
		a->req.session_token = prev_token;
		a->req.rank = (uint16_t)r;
		a->req.src_ipv4 = rack_ip(r);
		a->req.src_udp_port = m->req.src_udp_port;
		s->ackv_at[r] = 1 + rnd(s) % SIM_ACKV_MAX;
	}
	phub_wire_ring_ackv_put(a->data, s->ackv_n[r]++, &(struct phub_wire_ring_ack){
			.chunk_id = m->req.chunk_id,
			.seg_index = (uint16_t)(m->req.elem_offset / SEG_ELEMS),
			.iteration = m->req.iteration, .step = m->req.step });
	if (s->ackv_n[r] >= s->ackv_at[r])
		ackv_flush(s, r);
}

static void
deliver(struct sim *s, size_t idx)
{
	struct msg m = s->queue[idx];
	struct rack *k = &s->rack[m.to];
	struct phub_engine_reply reply;

	s->queue[idx] = s->queue[--s->queued];
	m.req.payload = m.data;
	m.req.now_ns = sim_now(s);
	if (m.kind == MSG_RING_ACKV) {
		phub_engine_ring_ackv(k->job, &m.req, NULL, NULL, &reply, &k->stats);
		ck_assert_int_eq(reply.reason, PHUB_DROP_OK);
		return;
	}
	phub_engine_ring_receive(k->job, &m.req, &reply, &k->stats);
	if (m.kind == MSG_RING_ACK) {
		ck_assert_int_eq(reply.reason, PHUB_DROP_OK);
		return;
	}
	if (reply.actions == PHUB_ENGINE_DROP) {
		/* Honest traffic: only a datagram ahead of this rack (retransmitted later). */
		ck_assert_msg(reply.reason == PHUB_DROP_FUTURE_ITERATION ||
				      reply.reason == PHUB_DROP_STALE_ITERATION,
			      "ring datagram dropped: %d", reply.reason);
		return;
	}
	ck_assert(reply.actions & PHUB_ENGINE_RING_ACK);
	{
		struct msg ack = m;
		struct phub_engine_ring_link prev;

		ck_assert(phub_engine_job_ring(k->job, NULL, &prev, NULL));
		if (!s->split) {
			ackv_add(s, m.to, &m, prev.token);
			handle_reply(s, m.to, &reply);
			return;
		}
		ack.kind = MSG_RING_ACK;
		ack.to = (m.to + s->racks - 1) % s->racks;
		ack.req.opcode = PHUB_WIRE_OP_RING_ACK;
		ack.req.session_token = prev.token;
		ack.req.rank = (uint16_t)m.to;
		ack.req.src_ipv4 = rack_ip(m.to);
		ack.req.payload_len = 0;
		post(s, &ack);
	}
	handle_reply(s, m.to, &reply);
}

static void
poll_send(void *arg, const struct phub_engine_ring_send *what)
{
	struct sim *s = arg;

	send_ring(s, s->polling, what);
}

/* After the initial round every rack's model is the job's rank 0's weights, bit for bit. */
static void
check_initial_model(const struct sim *s, unsigned int r)
{
	const float *model = phub_engine_job_model(s->rack[r].job);
	float w[N_ELEMS], want[N_ELEMS];
	uint8_t wire[N_ELEMS * 4];

	for (uint32_t e = 0; e < N_ELEMS; e++)
		w[e] = value(s, 0, 0, e);
	to_dtype(s->dtype, w, wire, N_ELEMS);
	phub_kernels_get()->first(want, wire, s->dtype, N_ELEMS);
	ck_assert_msg(memcmp(model, want, sizeof(want)) == 0, "rack %u: initial model", r);
}

static void
sim_run(struct sim *s, const unsigned int *ranks)
{
	uint32_t next_push[MAX_RACKS] = { 0 };
	struct phub_engine_job_info info;
	unsigned int r, first = 0, guard = 0;

	s->total = 0;
	for (r = 0; r < s->racks; r++)
		s->total += ranks[r];
	for (r = 0; r < s->racks; r++) {
		rack_create(s, r, ranks[r], first);
		first += ranks[r];
	}
	rings_connect(s);
	phub_engine_job_get_info(s->rack[0].job, &info);
	s->n_segments = info.n_segments;
	for (;;) {
		bool done = true;

		for (r = 0; r < s->racks; r++)
			done &= s->rack[r].models_done[ITERATIONS - 1] == s->n_segments;
		if (done)
			break;
		ck_assert_uint_lt(++guard, 5000000);
		if (rnd(s) % 4 == 0) {
			/* A rack whose workers have the previous model pushes the next iteration. */
			r = rnd(s) % s->racks;
			if (next_push[r] < ITERATIONS &&
			    (next_push[r] == 0 ||
			     s->rack[r].models_done[next_push[r] - 1] == s->n_segments)) {
				if (next_push[r] == 1)
					check_initial_model(s, r);
				rack_push_all(s, r, next_push[r]++);
			}
		} else if (s->queued > 0) {
			deliver(s, rnd(s) % s->queued);
		} else {
			bool flushed = false;

			/* The racks' last RING_ACKVs go before time passes, as at a burst's end. */
			for (r = 0; r < s->racks; r++)
				flushed |= ackv_flush(s, r);
			if (flushed)
				continue;
			/* Nothing in flight: time passes, retransmission timers fire. */
			s->skipped += 4 * NS_PER_MS;
			for (r = 0; r < s->racks; r++) {
				s->polling = r;
				phub_engine_ring_poll(s->rack[r].job, sim_now(s), NULL, poll_send, s,
						      &s->rack[r].stats);
			}
		}
	}
	free(s->queue);
	s->queue = NULL;
	s->queued = s->cap = 0;
}

static void
sim_free(struct sim *s)
{
	for (unsigned int r = 0; r < s->racks; r++)
		phub_engine_free(s->rack[r].engine);
	free(s);
}

static struct sim *
sim_new(unsigned int racks, enum phub_dtype dtype, enum phub_opt_type opt, bool exact,
	unsigned int seed)
{
	struct sim *s = calloc(1, sizeof(*s));

	ck_assert_ptr_nonnull(s);
	s->racks = racks;
	s->dtype = dtype;
	s->opt = opt;
	s->exact = exact;
	s->deterministic = !exact;
	s->seed = seed;
	return s;
}

static void
assert_same_state(const struct phub_engine_job *a, const struct phub_engine_job *b,
		  const char *what)
{
	ck_assert_msg(memcmp(phub_engine_job_model(a), phub_engine_job_model(b),
			     N_ELEMS * sizeof(float)) == 0, "%s: model differs", what);
	for (unsigned int i = 0; i < 2; i++) {
		const float *sa = phub_engine_job_state(a, i), *sb = phub_engine_job_state(b, i);

		ck_assert((sa == NULL) == (sb == NULL));
		if (sa != NULL)
			ck_assert_msg(memcmp(sa, sb, N_ELEMS * sizeof(float)) == 0,
				      "%s: optimizer state %u differs", what, i);
	}
}

/* The cases: racks, ranks per rack, dtype, optimizer. */
static const struct ring_case {
	unsigned int racks;
	unsigned int ranks[MAX_RACKS];
	enum phub_dtype dtype;
	enum phub_opt_type opt;
} cases[] = {
	{ 2, { 2, 2 }, PHUB_DTYPE_FP32, PHUB_OPT_SGD },
	{ 2, { 1, 1 }, PHUB_DTYPE_FP32, PHUB_OPT_NESTEROV },
	{ 3, { 1, 2, 3 }, PHUB_DTYPE_FP32, PHUB_OPT_MOMENTUM },
	{ 3, { 2, 1, 2 }, PHUB_DTYPE_FP16, PHUB_OPT_ADAM },
	{ 4, { 2, 2, 2, 2 }, PHUB_DTYPE_BF16, PHUB_OPT_ADAMW },
	{ 2, { 3, 1 }, PHUB_DTYPE_FP32, PHUB_OPT_NONE },
};

/*
 * With gradients whose sums are exact in any order, R racks through a ring that loses,
 * duplicates and reorders compute the very model and optimizer state of one PBox that has
 * every worker: same sums, same mean, same step.
 */
START_TEST(test_ring_of_racks_matches_one_pbox_with_every_worker)
{
	/* Each case twice: whole-segment ring datagrams, then segments cut in R parts. */
	const unsigned int n_cases = sizeof(cases) / sizeof(cases[0]);
	const struct ring_case *c = &cases[_i % n_cases];
	struct sim *ring = sim_new(c->racks, c->dtype, c->opt, true, 11 + _i);
	struct sim *flat = sim_new(1, c->dtype, c->opt, true, 5);
	unsigned int all = 0, r;
	uint64_t taken = 0, retransmits = 0;

	ring->split = _i >= (int)n_cases;

	for (r = 0; r < c->racks; r++)
		all += c->ranks[r];
	ring->loss_pct = 10;
	ring->dup_pct = 10;
	sim_run(ring, c->ranks);
	sim_run(flat, &all);
	for (r = 0; r < c->racks; r++) {
		assert_same_state(ring->rack[r].job, flat->rack[0].job, "ring vs one PBox");
		taken += ring->rack[r].stats.ring_taken;
		retransmits += ring->rack[r].stats.ring_retransmits;
	}
	/* The ring carried the sums, and the loss was repaired by retransmission. */
	ck_assert_uint_gt(taken, 0);
	ck_assert_uint_gt(retransmits, 0);
	/* Every PBox measured its round trip to next, and its RTO stays within the bounds. */
	for (r = 0; r < c->racks; r++) {
		struct phub_engine_ring_params rp;
		uint64_t srtt, var, rto;

		ck_assert(phub_engine_job_ring(ring->rack[r].job, &rp, NULL, NULL));
		phub_engine_job_ring_rtt(ring->rack[r].job, &srtt, &var, &rto);
		ck_assert_uint_gt(srtt, 0);
		ck_assert_uint_ge(rto, rp.rto_ns);
		ck_assert_uint_le(rto, rp.rto_max_ns);
	}
	sim_free(ring);
	sim_free(flat);
}
END_TEST

/*
 * Gradients whose sums depend on the order: two runs with different timing, loss and
 * duplication give bit-identical models (ranks in rank order, racks in ring order).
 */
START_TEST(test_deterministic_ring_is_bit_reproducible)
{
	static const unsigned int ranks[] = { 2, 3, 1 };
	struct sim *a = sim_new(3, PHUB_DTYPE_FP32, PHUB_OPT_ADAM, false, 21);
	struct sim *b = sim_new(3, PHUB_DTYPE_FP32, PHUB_OPT_ADAM, false, 77);
	unsigned int r;

	a->loss_pct = 5;
	b->loss_pct = 20;
	b->dup_pct = 20;
	sim_run(a, ranks);
	sim_run(b, ranks);
	for (r = 0; r < 3; r++) {
		assert_same_state(a->rack[r].job, b->rack[r].job, "run a vs run b");
		assert_same_state(a->rack[r].job, a->rack[0].job, "rack vs rack 0");
	}
	sim_free(a);
	sim_free(b);
}
END_TEST

/*
 * Whole-segment ring datagrams: the same model as the split ring's, from R times fewer ring
 * datagrams taken (each carries a whole segment where the split ring's carry 1/R of one).
 */
START_TEST(test_whole_segments_take_r_times_fewer_datagrams)
{
	static const unsigned int ranks[] = { 1, 2, 1 };

	for (unsigned int racks = 2; racks <= 3; racks++) {
		struct sim *whole = sim_new(racks, PHUB_DTYPE_FP32, PHUB_OPT_SGD, true, 41);
		struct sim *split = sim_new(racks, PHUB_DTYPE_FP32, PHUB_OPT_SGD, true, 41);
		uint64_t taken_whole = 0, taken_split = 0, bytes_whole = 0, bytes_split = 0;

		split->split = true;
		sim_run(whole, ranks);
		sim_run(split, ranks);
		for (unsigned int r = 0; r < racks; r++) {
			assert_same_state(whole->rack[r].job, split->rack[r].job, "whole vs split");
			taken_whole += whole->rack[r].stats.ring_taken;
			taken_split += split->rack[r].stats.ring_taken;
			bytes_whole += whole->rack[r].stats.ring_taken_bytes;
			bytes_split += split->rack[r].stats.ring_taken_bytes;
		}
		ck_assert_uint_gt(taken_whole, 0);
		ck_assert_uint_eq(taken_whole * racks, taken_split);
		/* Acknowledged by RING_ACKVs of several entries, the split ring by RING_ACKs. */
		ck_assert_uint_gt(whole->ackvs, 0);
		ck_assert_uint_lt(whole->ackvs, taken_whole);
		ck_assert_uint_eq(split->ackvs, 0);
		ck_assert_uint_eq(bytes_whole, bytes_split);
		sim_free(whole);
		sim_free(split);
	}
}
END_TEST

/*
 * A RING_ACKV from anyone but next, or of a body that does not parse, changes nothing; entries
 * naming no chunk or segment are counted and skipped, the others still acknowledge.
 */
START_TEST(test_hostile_ring_ackv_is_counted_and_harmless)
{
	struct sim *s = sim_new(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD, false, 9);
	struct phub_engine_ring_link next;
	struct phub_engine_ring_request good, bad;
	struct phub_engine_ring_window w0, w1;
	struct phub_engine_reply reply;
	struct phub_engine_job_info info;
	struct rack *k;
	uint8_t body[4 * 16];
	unsigned int found = 0;

	s->split = true;	/* rack 0 sends step 0 of every segment */
	s->total = 2;
	rack_create(s, 0, 1, 0);
	rack_create(s, 1, 1, 1);
	rings_connect(s);
	s->loss_pct = 100;	/* nothing arrives: the steps stay in flight */
	rack_push_all(s, 0, 0);
	k = &s->rack[0];
	phub_engine_job_get_info(k->job, &info);
	ck_assert(phub_engine_job_ring(k->job, NULL, NULL, &next));
	phub_engine_job_ring_window(k->job, &w0);
	ck_assert_uint_gt(w0.inflight_steps, 0);
	/* Entry 0: chunk 1000; 1: segment 99 of chunk 0; 2 and 3: step 0 of real segments. */
	phub_wire_ring_ackv_put(body, 0, &(struct phub_wire_ring_ack){ .chunk_id = 1000 });
	phub_wire_ring_ackv_put(body, 1, &(struct phub_wire_ring_ack){ .seg_index = 99 });
	phub_wire_ring_ackv_put(body, 2, &(struct phub_wire_ring_ack){ .chunk_id = 1 });
	phub_wire_ring_ackv_put(body, 3, &(struct phub_wire_ring_ack){ .chunk_id = 2 });
	memset(&good, 0, sizeof(good));
	good.session_token = next.token;
	good.rank = 1;
	good.opcode = PHUB_WIRE_OP_RING_ACKV;
	good.src_ipv4 = rack_ip(1);
	good.src_udp_port = 47000;
	good.payload = body;
	good.payload_len = sizeof(body);
	good.now_ns = sim_now(s);

#define EXPECT_DROP(field, val, why) \
	do { \
		bad = good; \
		bad.field = val; \
		ck_assert_uint_eq(phub_engine_ring_ackv(k->job, &bad, NULL, NULL, &reply, \
							&k->stats), 0); \
		ck_assert_int_eq(reply.reason, why); \
		ck_assert_uint_eq(k->stats.drops[why], 1); \
	} while (0)

	EXPECT_DROP(session_token, next.token + 1, PHUB_DROP_BAD_TOKEN);
	EXPECT_DROP(src_ipv4, rack_ip(1) + 1, PHUB_DROP_WRONG_SOURCE);
	EXPECT_DROP(rank, 0, PHUB_DROP_RANK_RANGE);
	EXPECT_DROP(payload_len, 24, PHUB_DROP_RING_ACKV_FIELDS);
#undef EXPECT_DROP
	phub_engine_job_ring_window(k->job, &w1);
	ck_assert_uint_eq(w1.inflight_steps, w0.inflight_steps);
	/* The honest one: two bad entries counted, the two real ones acknowledged. */
	found = phub_engine_ring_ackv(k->job, &good, NULL, NULL, &reply, &k->stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_OK);
	ck_assert_uint_eq(found, 2);
	ck_assert_uint_eq(k->stats.drops[PHUB_DROP_CHUNK_RANGE], 1);
	ck_assert_uint_eq(k->stats.drops[PHUB_DROP_OFFSET_RANGE], 1);
	phub_engine_job_ring_window(k->job, &w1);
	ck_assert_uint_eq(w1.inflight_steps, w0.inflight_steps - 2);
	/* Again: nothing new to acknowledge. */
	ck_assert_uint_eq(phub_engine_ring_ackv(k->job, &good, NULL, NULL, &reply, &k->stats), 0);
	sim_free(s);
}
END_TEST

/* Each hostile ring datagram is refused and counted under its reason; the job is unharmed. */
START_TEST(test_hostile_ring_traffic_is_counted_by_reason)
{
	static const unsigned int ranks[] = { 1, 1 };
	struct sim *s = sim_new(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD, true, 3);
	struct phub_engine_ring_link prev;
	struct phub_engine_ring_request good, bad;
	struct phub_engine_reply reply;
	struct rack *k;
	float data[SEG_ELEMS] = { 0 };
	uint32_t off, count;

	s->split = true;

	sim_run(s, ranks);
	k = &s->rack[1];
	ck_assert(phub_engine_job_ring(k->job, NULL, &prev, NULL));
	/* The split ring: chunk 1's first segment has a reduce part for rack 1 at step 0. */
	phub_ring_part(2, SEG_ELEMS, phub_ring_recv_part(2, 1, 0), &off, &count);
	memset(&good, 0, sizeof(good));
	good.session_token = prev.token;
	good.chunk_id = 1;		/* 256 elements: its first segment is a whole one */
	good.iteration = ITERATIONS;	/* the iteration rack 1 sums next */
	good.elem_offset = off;
	good.elem_count = count;
	good.step = 0;
	good.rank = 0;
	good.opcode = PHUB_WIRE_OP_RING_REDUCE;
	good.dtype = PHUB_DTYPE_FP32;
	good.src_ipv4 = rack_ip(0);
	good.src_udp_port = 47000;
	good.payload = data;
	good.payload_len = count * sizeof(float);
	good.now_ns = sim_now(s);

#define EXPECT_DROP(field, val, why) \
	do { \
		bad = good; \
		bad.field = val; \
		phub_engine_ring_receive(k->job, &bad, &reply, &k->stats); \
		ck_assert_uint_eq(reply.actions, PHUB_ENGINE_DROP); \
		ck_assert_int_eq(reply.reason, why); \
		ck_assert_uint_eq(k->stats.drops[why], 1); \
	} while (0)

	EXPECT_DROP(session_token, prev.token + 1, PHUB_DROP_BAD_TOKEN);
	EXPECT_DROP(src_ipv4, rack_ip(0) + 1, PHUB_DROP_WRONG_SOURCE);
	EXPECT_DROP(rank, 1, PHUB_DROP_RANK_RANGE);
	EXPECT_DROP(step, 2, PHUB_DROP_RING_STEP);
	EXPECT_DROP(iteration, ITERATIONS + 1, PHUB_DROP_FUTURE_ITERATION);
	EXPECT_DROP(chunk_id, 1000, PHUB_DROP_CHUNK_RANGE);
	EXPECT_DROP(dtype, PHUB_DTYPE_FP16, PHUB_DROP_DTYPE_MISMATCH);
	EXPECT_DROP(iteration, 0, PHUB_DROP_STALE_ITERATION);
#undef EXPECT_DROP

	/* The honest datagram is still taken: nothing above touched the segment. */
	phub_engine_ring_receive(k->job, &good, &reply, &k->stats);
	ck_assert_uint_eq(reply.actions & PHUB_ENGINE_RING_ACK, PHUB_ENGINE_RING_ACK);
	sim_free(s);
}
END_TEST

/*
 * Workers carry global ranks: rack 1 of { 2, 2 } takes ranks 2 and 3 (its local 0 and 1) and
 * refuses another rack's rank and one beyond the job, as RANK_RANGE.
 */
START_TEST(test_ring_job_maps_global_ranks_to_its_rack)
{
	static const unsigned int ranks[] = { 2, 2 };
	struct sim *s = sim_new(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD, true, 5);
	struct phub_engine_request req;
	struct phub_engine_reply reply;
	struct rack *k;
	uint16_t local;

	sim_run(s, ranks);
	k = &s->rack[1];
	ck_assert_uint_eq(phub_engine_job_rank_base(k->job), 2);
	ck_assert_uint_eq(phub_engine_job_total_world(k->job), 4);
	ck_assert(phub_engine_job_local_rank(k->job, 3, &local));
	ck_assert_uint_eq(local, 1);
	ck_assert(!phub_engine_job_local_rank(k->job, 1, &local));
	ck_assert(!phub_engine_job_local_rank(k->job, 4, &local));
	memset(&req, 0, sizeof(req));
	req.session_token = k->token[0];
	req.chunk_id = 1;		/* 256 elements: four whole segments */
	req.iteration = ITERATIONS - 1;
	req.elem_count = SEG_ELEMS;
	req.seg_count = 4;
	req.src_ipv4 = rack_ip(1) + 100;
	req.src_udp_port = 40000;
	req.rank = 2;		/* rack 1's local 0: a PULL of the finished iteration is answered */
	phub_engine_pull(k->job, &req, &reply, &k->stats);
	ck_assert_uint_eq(reply.actions, PHUB_ENGINE_MODEL_ONE);
	req.rank = 1;		/* rack 0's */
	phub_engine_pull(k->job, &req, &reply, &k->stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_RANK_RANGE);
	req.rank = 4;		/* nobody's */
	phub_engine_pull(k->job, &req, &reply, &k->stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_RANK_RANGE);
	ck_assert_uint_eq(k->stats.drops[PHUB_DROP_RANK_RANGE], 2);
	sim_free(s);
}
END_TEST

static unsigned int budget_sends;
static uint64_t budget_seen[64];	/* bit per (chunk, segment offset / SEG_ELEMS) */

static void
budget_send(void *arg, const struct phub_engine_ring_send *what)
{
	unsigned int bit = what->chunk_id * 4 + what->elem_offset / SEG_ELEMS;

	(void)arg;
	ck_assert_uint_lt(bit, 64 * 64);
	budget_seen[bit / 64] |= UINT64_C(1) << (bit % 64);
	budget_sends++;
}

/*
 * Retransmission with a budget: one segment per scan, every due segment in turn (the scan
 * resumes where it stopped), none starved behind the first ones.
 */
START_TEST(test_ring_poll_with_a_budget_serves_every_segment_in_turn)
{
	struct sim *s = sim_new(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD, false, 11);
	struct phub_engine_job_info info;
	uint32_t cursor = 0;
	unsigned int distinct = 0;

	s->split = true;	/* rack 0 sends step 0 of every segment */
	s->total = 2;
	rack_create(s, 0, 1, 0);
	rack_create(s, 1, 1, 1);
	rings_connect(s);
	s->loss_pct = 100;		/* every first send lost: all segments wait for their RTO */
	rack_push_all(s, 0, 0);
	phub_engine_job_get_info(s->rack[0].job, &info);
	memset(budget_seen, 0, sizeof(budget_seen));
	budget_sends = 0;
	/* A second apart: every segment served before is due again at each scan. */
	for (uint32_t k = 0; k < info.n_segments; k++)
		ck_assert_uint_eq(phub_engine_ring_poll_some(s->rack[0].job, sim_now(s) +
				(1000 + 1000 * (uint64_t)k) * NS_PER_MS, NULL, budget_send, NULL,
				&s->rack[0].stats, &cursor, 1), 1);
	for (unsigned int w = 0; w < 64; w++)
		distinct += (unsigned int)__builtin_popcountll(budget_seen[w]);
	ck_assert_uint_eq(budget_sends, info.n_segments);
	ck_assert_uint_eq(distinct, info.n_segments);
	sim_free(s);
}
END_TEST

/*
 * Rack sums that complete before the control plane links the ring are held back, not sent
 * into the void (which would time out and cut the window), and go out once it is linked.
 */
START_TEST(test_ring_steps_wait_for_the_link)
{
	struct sim *s = sim_new(2, PHUB_DTYPE_FP32, PHUB_OPT_SGD, false, 5);
	struct phub_engine_ring_window w;
	struct phub_engine_job_info info;

	s->split = true;	/* rack 0 sends step 0 of every segment */
	s->total = 2;
	rack_create(s, 0, 1, 0);
	rack_create(s, 1, 1, 1);
	rack_push_all(s, 0, 0);
	phub_engine_job_get_info(s->rack[0].job, &info);
	ck_assert_uint_eq(s->ring_datagrams, 0);
	phub_engine_job_ring_window(s->rack[0].job, &w);
	ck_assert_uint_eq(w.held_steps, info.n_segments);	/* step 0 of each segment */
	ck_assert_uint_eq(w.inflight_bytes, 0);
	/* A late scan, still unlinked: nothing goes, nothing is a loss. */
	s->polling = 0;
	phub_engine_ring_poll(s->rack[0].job, sim_now(s) + 1000 * NS_PER_MS, NULL, poll_send, s,
			      &s->rack[0].stats);
	ck_assert_uint_eq(s->ring_datagrams, 0);
	rings_connect(s);
	phub_engine_ring_poll(s->rack[0].job, sim_now(s), NULL, poll_send, s, &s->rack[0].stats);
	ck_assert_uint_eq(s->ring_datagrams, w.held_steps);
	phub_engine_job_ring_window(s->rack[0].job, &w);
	ck_assert_uint_eq(w.held_steps, 0);
	ck_assert_uint_eq(w.cuts, 0);
	ck_assert_uint_gt(w.inflight_bytes, 0);
	ck_assert_uint_eq(s->rack[0].stats.ring_retransmits, 0);
	free(s->queue);
	sim_free(s);
}
END_TEST

/* A job without a ring takes no ring datagram. */
START_TEST(test_one_rack_job_refuses_ring_datagrams)
{
	static const unsigned int ranks[] = { 2 };
	struct sim *s = sim_new(1, PHUB_DTYPE_FP32, PHUB_OPT_SGD, true, 3);
	struct phub_engine_ring_request req = { .opcode = PHUB_WIRE_OP_RING_REDUCE };
	struct phub_engine_reply reply;

	sim_run(s, ranks);
	phub_engine_ring_receive(s->rack[0].job, &req, &reply, &s->rack[0].stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_UNEXPECTED_OPCODE);
	ck_assert_int_eq(phub_engine_job_ring_peers(s->rack[0].job,
			&(struct phub_engine_ring_link){ .token = 1 },
			&(struct phub_engine_ring_link){ .token = 1 }), -EINVAL);
	sim_free(s);
}
END_TEST

Suite *
phub_engine_ring_suite(void)
{
	Suite *s = suite_create("engine_ring");
	TCase *tc;

	tc = PHUB_TCASE(s, "ring",
		test_whole_segments_take_r_times_fewer_datagrams,
		test_hostile_ring_ackv_is_counted_and_harmless,
		test_deterministic_ring_is_bit_reproducible,
		test_hostile_ring_traffic_is_counted_by_reason,
		test_one_rack_job_refuses_ring_datagrams,
		test_ring_job_maps_global_ranks_to_its_rack,
		test_ring_poll_with_a_budget_serves_every_segment_in_turn,
		test_ring_steps_wait_for_the_link);
	tcase_add_loop_test(tc, test_ring_of_racks_matches_one_pbox_with_every_worker, 0,
			2 * (int)(sizeof(cases) / sizeof(cases[0])));
	return s;
}
