/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of the ring's send window (lib/engine/phub_ring.h, engine_ring_node.c): R engines
 * on a simulated ring whose links are drop-tail queues of limited depth drained at a fixed
 * rate, in simulated time; with the window, what each PBox sends stays at the schedule's
 * 2(R-1)/R of the model, without it the rack sums' bursts overflow the queues and are sent
 * again; the window stays within its bounds and what it held back goes out.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "engine/phub_engine.h"
#include "engine/phub_ring.h"

#include "ring_test.h"

#define W_RACKS_MAX 3
#define W_RANKS_MAX 2		/* per rack */
#define W_SEG 360u		/* elements per segment: a 1500-byte MTU's PUSH */
#define W_SEGMENTS 1000u
#define W_ELEMS (W_SEG * W_SEGMENTS)
#define W_ITERATIONS 4		/* the initial round and three steps */
#define W_NONCE 0x5eed5eed5eed5eedull
#define NS_PER_US 1000ull
#define NS_PER_MS 1000000ull
#define ACK_DELAY_NS (20 * NS_PER_US)
#define POLL_NS NS_PER_MS	/* the data lcore's retransmission scan */
#define POLL_BUDGET 32		/* segments it sends per scan, as app/pbox/datapath.c */
#define RELEASE_VISITS 256
#define ACK_FIFO 65536u

static const struct phub_layout_key w_keys[] = {
	{ .key_id = 1, .n_elems = W_ELEMS },
};

struct wdgram {
	uint64_t at_ns;		/* leaves the link's queue (ring data) or arrives (ACK) */
	struct phub_engine_ring_request req;
	float data[W_SEG];
};

/* The link from rack r to r+1: a drop-tail queue drained at ns_per_byte; ACKs come back. */
struct wlink {
	struct wdgram *q;	/* depth slots, a circular FIFO */
	unsigned int head, count;
	uint64_t last_departure_ns;
	struct wdgram *acks;	/* ACK_FIFO slots: ACKs of what r+1 took, back to r */
	unsigned int ack_head, ack_count;
	uint64_t offered_bytes;	/* ring payload r sent (taken, dropped, resent alike) */
	uint64_t dropped;
};

struct wrack {
	struct phub_engine *engine;
	struct phub_engine_job *job;
	uint64_t token[W_RANKS_MAX];
	uint32_t models_done[W_ITERATIONS];
	uint32_t pushed;	/* iterations pushed */
	uint32_t cursor, release_cursor;
	struct phub_engine_stats stats;
};

struct wsim {
	unsigned int racks, ranks, depth;
	uint64_t ns_per_byte;
	uint64_t window_max;	/* the jobs' window_max_bytes */
	uint64_t now;
	uint64_t next_poll;
	struct wlink link[W_RACKS_MAX];
	struct wrack rack[W_RACKS_MAX];
	unsigned int sending;	/* the rack whose callback sends */
	uint64_t max_inflight;	/* the largest in-flight count seen */
};

static uint64_t
w_clock(void *arg)
{
	return ((const struct wsim *)arg)->now;
}

static uint32_t
w_ip(unsigned int r)
{
	return 0x0a100001u + (r << 8);
}

/* Exact values (k/64) so that every order gives the same sums. */
static float
w_value(unsigned int g, uint32_t it, uint32_t e)
{
	uint32_t h = (g + 1) * 2654435761u ^ (it + 7) * 40503u ^ (e + 3) * 2246822519u;

	h ^= h >> 13;
	h *= 0x5bd1e995u;
	h ^= h >> 15;
	return (float)((int)(h % 129) - 64) / 64.0f;
}

/* The window after any event: within its bounds, in flight never beyond the ceiling. */
static void
w_check_window(struct wsim *s, unsigned int r)
{
	struct phub_engine_ring_window w;

	phub_engine_job_ring_window(s->rack[r].job, &w);
	if (s->window_max == PHUB_ENGINE_RING_NO_WINDOW)
		return;
	ck_assert_uint_ge(w.cwnd_bytes, w.min_bytes);
	ck_assert_uint_le(w.cwnd_bytes, w.max_bytes);
	ck_assert_uint_le(w.inflight_bytes, w.max_bytes);
	ck_assert_uint_le(w.inflight_steps, PHUB_RING_WINDOW_MAX_STEPS);
	if (w.inflight_bytes > s->max_inflight)
		s->max_inflight = w.inflight_bytes;
}

/* A RING_SEND of rack r onto its link: each step a datagram, dropped when the queue is full. */
static void
w_send(struct wsim *s, unsigned int r, const struct phub_engine_ring_send *what)
{
	struct phub_engine_ring_link next;
	struct wlink *l = &s->link[r];

	ck_assert(phub_engine_job_ring(s->rack[r].job, NULL, NULL, &next));
	for (unsigned int step = 0; step < phub_ring_steps(s->racks); step++) {
		uint32_t off, count;
		struct wdgram *d;

		if ((what->steps & (1u << step)) == 0)
			continue;
		phub_ring_seg_part(s->racks, what->elem_count, what->root,
				   phub_ring_send_part(s->racks, r, step), &off, &count);
		if (count == 0)
			continue;
		l->offered_bytes += count * sizeof(float);
		if (l->count == s->depth) {
			l->dropped++;
			continue;
		}
		d = &l->q[(l->head + l->count) % s->depth];
		l->count++;
		if (l->last_departure_ns < s->now)
			l->last_departure_ns = s->now;
		l->last_departure_ns += (28 + 16 + count * sizeof(float)) * s->ns_per_byte;
		d->at_ns = l->last_departure_ns;
		phub_test_ring_request(&d->req, d->data, what, next.token, s->racks, r, step, off,
				count);
		d->req.src_ipv4 = w_ip(r);
		d->req.src_udp_port = 47000;
	}
}

static void
w_send_cb(void *arg, const struct phub_engine_ring_send *what)
{
	struct wsim *s = arg;

	w_send(s, s->sending, what);
}

static void
w_reply(struct wsim *s, unsigned int r, const struct phub_engine_reply *reply)
{
	if (reply->actions & PHUB_ENGINE_RING_SEND)
		w_send(s, r, &reply->ring);
	if (reply->actions & PHUB_ENGINE_MODEL_ALL) {
		ck_assert_uint_lt(reply->iteration, W_ITERATIONS);
		s->rack[r].models_done[reply->iteration]++;
	}
}

/* Every worker of rack r pushes every segment of the next iteration, segment by segment. */
static void
w_push(struct wsim *s, unsigned int r)
{
	struct wrack *k = &s->rack[r];
	uint32_t it = k->pushed++;
	const struct phub_layout *layout = phub_engine_job_layout(k->job);
	uint32_t n_chunks = phub_layout_chunk_count(layout);

	for (uint32_t c = 0; c < n_chunks; c++) {
		struct phub_layout_chunk chunk;

		phub_layout_chunk_get(layout, c, &chunk);
		for (uint32_t g = 0; g < chunk.n_segments; g++) {
			for (unsigned int w = 0; w < s->ranks; w++) {
				struct phub_engine_request req;
				struct phub_engine_reply reply;
				float grad[W_SEG];
				uint32_t count = chunk.n_elems - g * W_SEG;

				if (count > W_SEG)
					count = W_SEG;
				for (uint32_t e = 0; e < count; e++)
					grad[e] = w_value(r * s->ranks + w, it,
							  (uint32_t)chunk.elem_base + g * W_SEG + e);
				memset(&req, 0, sizeof(req));
				req.session_token = k->token[w];
				req.chunk_id = c;
				req.iteration = it;
				req.elem_offset = g * W_SEG;
				req.elem_count = count;
				req.rank = (uint16_t)(r * s->ranks + w);
				req.seg_index = (uint16_t)g;
				req.seg_count = (uint16_t)chunk.n_segments;
				req.dtype = PHUB_DTYPE_FP32;
				req.src_ipv4 = w_ip(r) + 100 + w;
				req.src_udp_port = 40000;
				req.payload = grad;
				req.payload_len = count * sizeof(float);
				memset(&reply, 0, sizeof(reply));
				phub_engine_push(k->job, &req, &reply, &k->stats);
				ck_assert_msg(reply.actions & PHUB_ENGINE_ACK, "push refused: %d",
					      reply.reason);
				w_reply(s, r, &reply);
			}
		}
	}
	w_check_window(s, r);
}

static void
w_create(struct wsim *s)
{
	for (unsigned int r = 0; r < s->racks; r++) {
		struct wrack *k = &s->rack[r];
		struct phub_engine_params ep = { .clock = w_clock, .clock_arg = s };
		struct phub_engine_ring_params ring = {
			.racks = (uint16_t)s->racks,
			.pos = (uint16_t)r,
			.total_world = s->racks * s->ranks,
			.rank_base = r * s->ranks,
			.holds_rank0 = r == 0,
			.rto_ns = 2 * NS_PER_MS,
			.rto_max_ns = 64 * NS_PER_MS,
			.window_max_bytes = s->window_max,
			/* The schedule's bytes below are the split ring's, 2(R-1)/R per segment. */
			.split_segments = true,
		};
		struct phub_engine_job_params p = {
			.name = "window",
			.nonce = W_NONCE,
			.world_size = (uint16_t)s->ranks,
			.dtype = PHUB_DTYPE_FP32,
			.optimizer = { .type = PHUB_OPT_SGD, .lr = 0.25f },
			.keys = w_keys,
			.n_keys = 1,
			.chunk_bytes = 8 * W_SEG * sizeof(float),
			.segment_elems = W_SEG,
			.ring = &ring,
		};

		k->engine = phub_engine_create_with(&ep);
		ck_assert_ptr_nonnull(k->engine);
		k->job = phub_engine_job_create(k->engine, &p);
		ck_assert_ptr_nonnull(k->job);
		for (unsigned int i = 0; i < s->ranks; i++) {
			struct phub_engine_peer peer = { .ipv4 = w_ip(r) + 100 + i,
							 .udp_port = 40000 };

			ck_assert_int_eq(phub_engine_job_join(k->job, (uint16_t)i, W_NONCE, &peer,
							      &k->token[i]), 0);
		}
		s->link[r].q = calloc(s->depth, sizeof(struct wdgram));
		s->link[r].acks = calloc(ACK_FIFO, sizeof(struct wdgram));
		ck_assert_ptr_nonnull(s->link[r].q);
		ck_assert_ptr_nonnull(s->link[r].acks);
	}
	/* Link r -> r + 1 under token 0x2000 + r. */
	for (unsigned int r = 0; r < s->racks; r++)
		ck_assert_int_eq(phub_test_ring_link(s->rack[r].job, s->racks, r, w_ip, 0x2000), 0);
}

/* The head of link r's queue reaches r+1: taken, ACKed (after a delay), its sends go on. */
static void
w_deliver(struct wsim *s, unsigned int r)
{
	struct wlink *l = &s->link[r];
	unsigned int to = (r + 1) % s->racks;
	struct wdgram *d = &l->q[l->head];
	struct phub_engine_reply reply;
	struct wdgram *a;

	l->head = (l->head + 1) % s->depth;
	l->count--;
	d->req.payload = d->data;
	d->req.now_ns = s->now;
	phub_engine_ring_receive(s->rack[to].job, &d->req, &reply, &s->rack[to].stats);
	if (reply.actions == PHUB_ENGINE_DROP) {
		ck_assert_msg(reply.reason == PHUB_DROP_FUTURE_ITERATION ||
			      reply.reason == PHUB_DROP_STALE_ITERATION, "dropped: %d", reply.reason);
		return;
	}
	ck_assert(reply.actions & PHUB_ENGINE_RING_ACK);
	ck_assert_uint_lt(l->ack_count, ACK_FIFO);
	a = &l->acks[(l->ack_head + l->ack_count) % ACK_FIFO];
	l->ack_count++;
	a->req = d->req;
	a->at_ns = s->now + ACK_DELAY_NS;
	a->req.opcode = PHUB_WIRE_OP_RING_ACK;
	a->req.session_token = 0x2000 + r;
	a->req.rank = (uint16_t)to;
	a->req.src_ipv4 = w_ip(to);
	a->req.payload = NULL;
	a->req.payload_len = 0;
	w_reply(s, to, &reply);
	w_check_window(s, to);
}

/* The oldest ACK on its way back to r arrives; the window it opens sends held steps. */
static void
w_ack(struct wsim *s, unsigned int r)
{
	struct wlink *l = &s->link[r];
	struct phub_engine_reply reply;
	struct phub_engine_ring_request req = l->acks[l->ack_head].req;

	l->ack_head = (l->ack_head + 1) % ACK_FIFO;
	l->ack_count--;
	req.now_ns = s->now;
	phub_engine_ring_receive(s->rack[r].job, &req, &reply, &s->rack[r].stats);
	ck_assert_int_eq(reply.reason, PHUB_DROP_OK);
	s->sending = r;
	phub_engine_ring_release(s->rack[r].job, s->now, NULL, w_send_cb, s,
				 &s->rack[r].release_cursor, RELEASE_VISITS);
	w_check_window(s, r);
}

static bool
w_done(const struct wsim *s)
{
	for (unsigned int r = 0; r < s->racks; r++)
		if (s->rack[r].models_done[W_ITERATIONS - 1] != W_SEGMENTS ||
		    s->link[r].count != 0 || s->link[r].ack_count != 0)
			return false;
	return true;
}

static void
w_run(struct wsim *s)
{
	for (unsigned int r = 0; r < s->racks; r++)
		w_push(s, r);
	s->next_poll = s->now + POLL_NS;
	while (!w_done(s)) {
		uint64_t t = s->next_poll;
		int kind = 0;	/* 0 poll, 1 + r data of link r, 1 + racks + r ACK to r */

		ck_assert_uint_lt(s->now, 120000 * NS_PER_MS);
		for (unsigned int r = 0; r < s->racks; r++) {
			const struct wlink *l = &s->link[r];

			if (l->count > 0 && l->q[l->head].at_ns < t) {
				t = l->q[l->head].at_ns;
				kind = 1 + (int)r;
			}
			if (l->ack_count > 0 && l->acks[l->ack_head].at_ns < t) {
				t = l->acks[l->ack_head].at_ns;
				kind = 1 + (int)(s->racks + r);
			}
		}
		s->now = t;
		if (kind == 0) {
			s->next_poll = s->now + POLL_NS;
			for (unsigned int r = 0; r < s->racks; r++) {
				s->sending = r;
				phub_engine_ring_poll_some(s->rack[r].job, s->now, NULL, w_send_cb, s,
							   &s->rack[r].stats, &s->rack[r].cursor,
							   POLL_BUDGET);
				w_check_window(s, r);
			}
		} else if (kind <= (int)s->racks) {
			w_deliver(s, (unsigned int)kind - 1);
		} else {
			w_ack(s, (unsigned int)kind - 1 - s->racks);
		}
		/* A rack whose workers have the previous model pushes the next iteration. */
		for (unsigned int r = 0; r < s->racks; r++) {
			struct wrack *k = &s->rack[r];

			if (k->pushed < W_ITERATIONS && k->models_done[k->pushed - 1] == W_SEGMENTS)
				w_push(s, r);
		}
	}
}

/* Payload bytes of one iteration that the schedule has PBox pos send: 2(R-1)/R of the model. */
static uint64_t
w_schedule_bytes(unsigned int racks, unsigned int pos)
{
	uint64_t bytes = 0;

	for (unsigned int step = 0; step < phub_ring_steps(racks); step++) {
		uint32_t off, count;

		phub_ring_part(racks, W_SEG, phub_ring_send_part(racks, pos, step), &off, &count);
		bytes += count;
	}
	return bytes * sizeof(float) * W_SEGMENTS;
}

static struct wsim *
w_new(unsigned int racks, unsigned int ranks, unsigned int depth, uint64_t ns_per_byte,
      uint64_t window_max)
{
	struct wsim *s = calloc(1, sizeof(*s));

	ck_assert_ptr_nonnull(s);
	s->racks = racks;
	s->ranks = ranks;
	s->depth = depth;
	s->ns_per_byte = ns_per_byte;
	s->window_max = window_max;
	s->now = 1000 * NS_PER_MS;
	w_create(s);
	w_run(s);
	return s;
}

/* The largest of the racks' sent / schedule, every rack's model the same bits. */
static double
w_ratio(const struct wsim *s)
{
	double worst = 0;
	const float *m0 = phub_engine_job_model(s->rack[0].job);

	for (unsigned int r = 0; r < s->racks; r++) {
		double ratio = (double)s->link[r].offered_bytes /
			       (double)(w_schedule_bytes(s->racks, r) * W_ITERATIONS);

		if (ratio > worst)
			worst = ratio;
		ck_assert_msg(memcmp(phub_engine_job_model(s->rack[r].job), m0,
				     W_ELEMS * sizeof(float)) == 0, "rack %u's model differs", r);
	}
	return worst;
}

static void
w_free(struct wsim *s)
{
	for (unsigned int r = 0; r < s->racks; r++) {
		phub_engine_free(s->rack[r].engine);
		free(s->link[r].q);
		free(s->link[r].acks);
	}
	free(s);
}

/*
 * A queue deeper than the window (af_packet's 512 frames): with the window nothing is lost
 * and each PBox sends the schedule's bytes once; without it a rack sum's burst of 1000 steps
 * overflows the queue and is sent again.
 */
START_TEST(test_window_keeps_a_deep_queue_from_overflowing)
{
	static const unsigned int shapes[][2] = { { 2, 1 }, { 2, 2 }, { 3, 1 }, { 3, 2 } };
	unsigned int racks = shapes[_i][0], ranks = shapes[_i][1];
	struct wsim *with = w_new(racks, ranks, 512, 4, 0);
	struct wsim *without = w_new(racks, ranks, 512, 4, PHUB_ENGINE_RING_NO_WINDOW);
	double r_with = w_ratio(with), r_without = w_ratio(without);

	if (getenv("RING_WINDOW_VERBOSE") != NULL)
		fprintf(stderr, "%s R=%u: %.4f with, %.4f without\n", __func__, racks, r_with,
			r_without);

	for (unsigned int r = 0; r < racks; r++) {
		struct phub_engine_ring_window w;

		phub_engine_job_ring_window(with->rack[r].job, &w);
		ck_assert_uint_eq(with->link[r].dropped, 0);
		ck_assert_uint_eq(w.held_steps, 0);	/* every held step went out */
		ck_assert_uint_eq(w.inflight_bytes, 0);	/* and was acknowledged */
		ck_assert_uint_gt(w.held_total, 0);	/* the window did hold steps */
		/* The ceiling adapts within its bounds (check_ring.c has how). */
		ck_assert_uint_ge(w.max_bytes, PHUB_RING_WINDOW_MAX);
		ck_assert_uint_le(w.max_bytes, PHUB_RING_WINDOW_TOP);
		ck_assert_uint_gt(without->link[r].dropped, 0);
	}
	ck_assert_uint_gt(with->max_inflight, PHUB_RING_WINDOW_INIT);	/* it grew */
	ck_assert_msg(r_with < 1.0001, "with the window: %.4f x the schedule", r_with);
	ck_assert_msg(r_without > 1.1, "without the window: %.4f x the schedule", r_without);
	ck_assert_msg(memcmp(phub_engine_job_model(with->rack[0].job),
			     phub_engine_job_model(without->rack[0].job),
			     W_ELEMS * sizeof(float)) == 0, "the window changed the model");
	w_free(with);
	w_free(without);
}
END_TEST

/*
 * A queue shallower than the window's ceiling (a tbf with a short limit): losses halve the
 * window until it fits, and what is sent stays within a few percent of the schedule, where
 * without the window it is far above.
 */
START_TEST(test_window_adapts_to_a_shallow_queue)
{
	unsigned int racks = 2 + (unsigned int)_i;
	struct wsim *with = w_new(racks, 2, 96, 8, 0);
	struct wsim *without = w_new(racks, 2, 96, 8, PHUB_ENGINE_RING_NO_WINDOW);
	double r_with = w_ratio(with), r_without = w_ratio(without);

	if (getenv("RING_WINDOW_VERBOSE") != NULL)
		fprintf(stderr, "%s R=%u: %.4f with, %.4f without\n", __func__, racks, r_with,
			r_without);
	struct phub_engine_ring_window w;

	phub_engine_job_ring_window(with->rack[0].job, &w);
	ck_assert_uint_gt(w.cuts, 0);
	ck_assert_uint_eq(w.held_steps, 0);
	ck_assert_uint_eq(w.max_bytes, PHUB_RING_WINDOW_MAX);	/* losses keep the ceiling down */
	ck_assert_msg(r_with < 1.05, "with the window: %.4f x the schedule", r_with);
	ck_assert_msg(r_without > 1.2, "without the window: %.4f x the schedule", r_without);
	w_free(with);
	w_free(without);
}
END_TEST

/* A window's ceiling below its default floor: the floor follows, in flight stays under it. */
START_TEST(test_window_ceiling_is_honoured)
{
	struct wsim *s = w_new(2, 1, 512, 4, 16 * 1024);
	struct phub_engine_ring_window w;

	phub_engine_job_ring_window(s->rack[0].job, &w);
	ck_assert_uint_eq(w.max_bytes, 16 * 1024);
	ck_assert_uint_le(w.min_bytes, 16 * 1024);
	ck_assert_uint_le(s->max_inflight, 16 * 1024);
	ck_assert_uint_gt(s->max_inflight, 8 * 1024);
	ck_assert_msg(w_ratio(s) < 1.0001, "%.4f", w_ratio(s));
	w_free(s);
}
END_TEST

Suite *
phub_ring_window_suite(void)
{
	Suite *s = suite_create("ring_window");
	TCase *tc;

	tc = PHUB_TCASE(s, "window", test_window_ceiling_is_honoured);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_window_keeps_a_deep_queue_from_overflowing, 0, 4);
	tcase_add_loop_test(tc, test_window_adapts_to_a_shallow_queue, 0, 2);
	return s;
}
