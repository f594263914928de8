/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of the cross-rack ring schedule (lib/engine/phub_ring.h): the part schedule, the
 * drop verdicts, and R = 2 .. 8 PBoxes reducing through a lossy, duplicating and reordering
 * simulated network to sums that are bit-identical to the fixed ring order.
 */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"
#include "test_rand.h"

#include "engine/phub_ring.h"

#define MAX_ELEMS 1000u
#define NS_PER_MS 1000000ull

/* ---- the part schedule ---- */

/* Every part is sent exactly once per phase and each send feeds the next step's send. */
START_TEST(test_each_step_forwards_the_part_the_previous_step_brought)
{
	unsigned int racks = (unsigned int)_i;
	unsigned int pos, step;

	for (pos = 0; pos < racks; pos++) {
		unsigned int reduce_seen = 0, gather_seen = 0;

		for (step = 0; step < phub_ring_steps(racks); step++) {
			unsigned int sent = phub_ring_send_part(racks, pos, step);

			ck_assert_uint_lt(sent, racks);
			if (phub_ring_step_is_reduce(racks, step))
				reduce_seen |= 1u << sent;
			else
				gather_seen |= 1u << sent;
			/* What arrives at step k leaves at step k+1. */
			if (step + 1 < phub_ring_steps(racks))
				ck_assert_uint_eq(phub_ring_recv_part(racks, pos, step),
						  phub_ring_send_part(racks, pos, step + 1));
		}
		/* Reduce never sends the part this PBox completes (pos+1); gather never pos+2. */
		ck_assert_uint_eq(reduce_seen, ((1u << racks) - 1) & ~(1u << (pos + 1) % racks));
		ck_assert_uint_eq(gather_seen, ((1u << racks) - 1) & ~(1u << (pos + 2) % racks));
		/* After the reduce phase pos holds part pos+1 complete: the first gather sends it. */
		ck_assert_uint_eq(phub_ring_recv_part(racks, pos, racks - 2), (pos + 1) % racks);
		ck_assert_uint_eq(phub_ring_send_part(racks, pos, racks - 1), (pos + 1) % racks);
	}
}
END_TEST

START_TEST(test_parts_tile_the_segment_in_even_shares)
{
	static const uint32_t sizes[] = { 1, 7, 16, 17, 100, 999, 2048, 8192 };
	unsigned int racks = (unsigned int)_i;
	size_t i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t next = 0, off, count, largest = 0, smallest = UINT32_MAX;
		unsigned int part;

		for (part = 0; part < racks; part++) {
			phub_ring_part(racks, sizes[i], part, &off, &count);
			ck_assert_uint_eq(off, next);
			next = off + count;
			if (count > largest)
				largest = count;
			if (count < smallest)
				smallest = count;
			if (count != 0)
				ck_assert_int_eq(phub_ring_part_at(racks, sizes[i], off, count),
						 (int)part);
		}
		ck_assert_uint_eq(next, sizes[i]);
		ck_assert_uint_le(largest - smallest, 1);
	}
}
END_TEST

/* ---- the verdicts ---- */

static float bufs[4][MAX_ELEMS];

static struct phub_ring_params
params(unsigned int racks, unsigned int pos)
{
	struct phub_ring_params p = {
		.racks = (uint16_t)racks,
		.pos = (uint16_t)pos,
		.rto_ns = 2 * NS_PER_MS,
		.rto_max_ns = 64 * NS_PER_MS,
	};
	return p;
}

static void
seg_init(struct phub_ring_seg *seg, uint32_t first)
{
	phub_ring_seg_init(seg, first, bufs[0], bufs[1], bufs[2], bufs[3]);
}

START_TEST(test_hostile_and_repeated_segments_get_their_verdicts)
{
	struct phub_ring_params p = params(3, 1);
	struct phub_ring_seg seg;
	struct phub_ring_out out;
	float payload[MAX_ELEMS], rack[300];
	uint32_t off, count, off2, count2;
	uint64_t rtt;
	unsigned int part;

	for (unsigned int i = 0; i < 300; i++) {
		payload[i] = 1.0f;
		rack[i] = 2.0f;
	}
	seg_init(&seg, 5);
	part = phub_ring_recv_part(3, 1, 0);
	phub_ring_part(3, 300, part, &off, &count);
	phub_ring_part(3, 300, (part + 1) % 3, &off2, &count2);

	/* Steps beyond 2R-3, an opcode that does not match the step, the wrong part. */
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, true, 5, 4, off, count, payload, 0, &out),
			 PHUB_RING_STEP);
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, false, 5, 0, off, count, payload, 0,
					   &out), PHUB_RING_STEP);
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, true, 5, 0, off2, count2, payload, 0,
					   &out), PHUB_RING_STEP);
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, true, 5, 0, off, count - 1, payload, 0,
					   &out), PHUB_RING_STEP);
	/* A gather step before this rack's sum cannot be honest. */
	part = phub_ring_recv_part(3, 1, 2);
	phub_ring_part(3, 300, part, &off2, &count2);
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, false, 5, 2, off2, count2, payload, 0,
					   &out), PHUB_RING_STEP);
	/* Iterations ahead of the rack sum this PBox is summing, and long past ones. */
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, true, 6, 0, off, count, payload, 0, &out),
			 PHUB_RING_FUTURE);
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, true, 1, 0, off, count, payload, 0, &out),
			 PHUB_RING_STALE);
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, true, 4, 0, off, count, payload, 0, &out),
			 PHUB_RING_DUPLICATE);

	/* Early reduce part: taken into the inbox, nothing to send yet; again: a duplicate. */
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, true, 5, 0, off, count, payload, 0, &out),
			 PHUB_RING_TAKEN);
	ck_assert_uint_eq(out.send_steps, 0);
	ck_assert(!out.complete);
	ck_assert_int_eq(phub_ring_receive(&seg, &p, 300, true, 5, 0, off, count, payload, 0, &out),
			 PHUB_RING_DUPLICATE);

	/* The rack sum: step 0 (own part) and step 1 (the part that waited) go out. */
	ck_assert_int_eq(phub_ring_local(&seg, &p, 300, 5, rack, 0, &out), 0);
	ck_assert_uint_eq(out.send_steps, 0x3);
	ck_assert_uint_eq(out.iteration, 5);
	ck_assert(out.sum[off] == 3.0f);	/* partial 1 + own 2 */
	ck_assert_int_eq(phub_ring_local(&seg, &p, 300, 5, rack, 0, &out), -EALREADY);
	ck_assert_int_eq(phub_ring_local(&seg, &p, 300, 7, rack, 0, &out), -EINVAL);

	/*
	 * ACKs: only for steps sent, once each; the timer resends only what is unacknowledged.
	 * The first ACK, 0.5 ms after the sends, is a round-trip sample; an ACK that comes once
	 * something was resent is none (it may answer either copy).
	 */
	ck_assert(phub_ring_ack(&seg, &p, 5, 0, NS_PER_MS / 2, &rtt));
	ck_assert_uint_eq(rtt, NS_PER_MS / 2);
	ck_assert(!phub_ring_ack(&seg, &p, 5, 0, NS_PER_MS / 2, &rtt));
	ck_assert_uint_eq(rtt, 0);
	ck_assert(!phub_ring_ack(&seg, &p, 5, 3, 0, NULL));
	ck_assert(!phub_ring_ack(&seg, &p, 4, 1, 0, NULL));
	{
		struct phub_ring_out due[2];

		ck_assert_uint_eq(phub_ring_poll(&seg, &p, 300, 1 * NS_PER_MS, due), 0);
		ck_assert_uint_eq(phub_ring_poll(&seg, &p, 300, 3 * NS_PER_MS, due), 1);
		ck_assert_uint_eq(due[0].send_steps, 0x2);
		ck_assert_uint_eq(due[0].iteration, 5);
		/* Backed off: not due again 2 ms later, due after 4 ms. */
		ck_assert_uint_eq(phub_ring_poll(&seg, &p, 300, 5 * NS_PER_MS, due), 0);
		ck_assert_uint_eq(phub_ring_poll(&seg, &p, 300, 8 * NS_PER_MS, due), 1);
	}
	ck_assert(!phub_ring_idle(&seg));
	ck_assert(phub_ring_ack(&seg, &p, 5, 1, 9 * NS_PER_MS, &rtt));
	ck_assert_uint_eq(rtt, 0);
	ck_assert(phub_ring_idle(&seg));
}
END_TEST

/* ---- R PBoxes through a lossy network ---- */

enum msg_kind { MSG_REDUCE, MSG_GATHER, MSG_ACK };

struct msg {
	enum msg_kind kind;
	unsigned int to;
	uint32_t iteration;
	uint32_t step;
	uint32_t off;
	uint32_t count;
	float data[MAX_ELEMS];
};

struct sim_pbox {
	struct phub_ring_params p;
	struct phub_ring_seg seg;
	float buf[4][MAX_ELEMS];
	uint32_t done;			/* iterations completed */
	bool local_due;			/* its workers' next rack sum is ready to give */
	uint64_t first_send_elems;	/* elements sent once per step (no retransmits) */
	uint64_t resent;
	float result[8][MAX_ELEMS];	/* complete sum per iteration */
};

struct sim {
	unsigned int racks;
	uint32_t elems;
	uint32_t iterations;
	uint32_t first;
	struct sim_pbox pbox[PHUB_RING_MAX_RACKS];
	struct msg *queue;
	size_t queued, cap;
	uint64_t now;
	unsigned int seed;
	unsigned int loss_pct, dup_pct;
	uint64_t taken, duplicates;
};

static unsigned int
rnd(struct sim *s)
{
	return phub_test_lcg(&s->seed);
}

/* Rack r's sum of iteration it: values whose sums depend on the order they are added in. */
static float
rack_value(unsigned int r, uint32_t it, uint32_t e)
{
	uint32_t h = (r * 2654435761u) ^ (it * 40503u) ^ (e * 2246822519u);

	h ^= h >> 13;
	h *= 0x5bd1e995u;
	h ^= h >> 15;
	return ((float)(h & 0xffffff) / 16777216.0f - 0.5f) * (1.0f + (float)(r % 3) * 1e3f);
}

static void
post(struct sim *s, const struct msg *m)
{
	unsigned int copies = phub_test_copies(&s->seed, s->loss_pct, s->dup_pct);

	while (copies-- > 0) {
		if (s->queued == s->cap) {
			s->cap = s->cap ? 2 * s->cap : 64;
			s->queue = realloc(s->queue, s->cap * sizeof(*s->queue));
			ck_assert_ptr_nonnull(s->queue);
		}
		s->queue[s->queued++] = *m;
	}
}

static void
send_steps(struct sim *s, unsigned int from, const struct phub_ring_out *out, bool resend)
{
	struct sim_pbox *b = &s->pbox[from];
	unsigned int step;

	for (step = 0; step < phub_ring_steps(s->racks); step++) {
		struct msg m;

		if ((out->send_steps & (1u << step)) == 0)
			continue;
		m.kind = phub_ring_step_is_reduce(s->racks, step) ? MSG_REDUCE : MSG_GATHER;
		m.to = (from + 1) % s->racks;
		m.iteration = out->iteration;
		m.step = step;
		phub_ring_part(s->racks, s->elems, phub_ring_send_part(s->racks, from, step), &m.off,
			       &m.count);
		ck_assert_uint_ne(m.count, 0);
		memcpy(m.data, out->sum + m.off, m.count * sizeof(float));
		if (resend)
			b->resent++;
		else
			b->first_send_elems += m.count;
		post(s, &m);
	}
}

static void
handle_out(struct sim *s, unsigned int pos, const struct phub_ring_out *out)
{
	struct sim_pbox *b = &s->pbox[pos];

	send_steps(s, pos, out, false);
	if (out->complete) {
		uint32_t k = out->iteration - s->first;

		ck_assert_uint_eq(k, b->done);
		memcpy(b->result[k], out->sum, s->elems * sizeof(float));
		b->done++;
		/* The optimizer ran, MODEL went out, the workers push the next iteration. */
		b->local_due = b->done < s->iterations;
	}
}

static void
give_local(struct sim *s, unsigned int pos)
{
	struct sim_pbox *b = &s->pbox[pos];
	uint32_t it = s->first + b->done;
	struct phub_ring_out out;
	float rack[MAX_ELEMS];
	uint32_t e;

	for (e = 0; e < s->elems; e++)
		rack[e] = rack_value(pos, it, e);
	b->local_due = false;
	ck_assert_int_eq(phub_ring_local(&b->seg, &b->p, s->elems, it, rack, s->now, &out), 0);
	handle_out(s, pos, &out);
}

static void
deliver(struct sim *s, size_t idx)
{
	struct msg m = s->queue[idx];
	struct sim_pbox *b = &s->pbox[m.to];
	struct phub_ring_out out;

	s->queue[idx] = s->queue[--s->queued];
	if (m.kind == MSG_ACK) {
		phub_ring_ack(&b->seg, &b->p, m.iteration, m.step, s->now, NULL);
		return;
	}
	switch (phub_ring_receive(&b->seg, &b->p, s->elems, m.kind == MSG_REDUCE, m.iteration,
				  m.step, m.off, m.count, m.data, s->now, &out)) {
	case PHUB_RING_TAKEN:
		s->taken++;
		handle_out(s, m.to, &out);
		break;
	case PHUB_RING_DUPLICATE:
		s->duplicates++;
		break;
	case PHUB_RING_FUTURE:
		return;		/* not acknowledged: the sender retransmits */
	case PHUB_RING_STALE:
		return;		/* a copy the simulated network held for iterations */
	default:
		ck_abort_msg("honest ring datagram refused (it %u step %u)", m.iteration, m.step);
	}
	{
		struct msg ack = { .kind = MSG_ACK, .to = (m.to + s->racks - 1) % s->racks,
				   .iteration = m.iteration, .step = m.step };

		post(s, &ack);
	}
}

static void
sim_run(struct sim *s)
{
	unsigned int r, guard = 0;
	uint32_t it, e, k;

	for (r = 0; r < s->racks; r++) {
		struct sim_pbox *b = &s->pbox[r];

		b->p = params(s->racks, r);
		phub_ring_seg_init(&b->seg, s->first, b->buf[0], b->buf[1], b->buf[2], b->buf[3]);
		b->local_due = true;
	}
	for (;;) {
		bool all_done = true;
		unsigned int choice;

		for (r = 0; r < s->racks; r++)
			all_done &= s->pbox[r].done == s->iterations;
		if (all_done)
			break;
		ck_assert_uint_lt(++guard, 2000000);
		choice = rnd(s) % 8;
		if (choice == 0) {
			/* One rack's workers finish their sum: racks run out of step. */
			r = rnd(s) % s->racks;
			if (s->pbox[r].local_due)
				give_local(s, r);
		} else if (s->queued > 0) {
			deliver(s, rnd(s) % s->queued);	/* any order: reordering */
		} else {
			/* Nothing in flight: time passes and retransmission timers fire. */
			s->now += NS_PER_MS;
			for (r = 0; r < s->racks; r++) {
				struct phub_ring_out due[2];
				unsigned int n = phub_ring_poll(&s->pbox[r].seg, &s->pbox[r].p,
								s->elems, s->now, due);

				for (k = 0; k < n; k++)
					send_steps(s, r, &due[k], true);
			}
		}
	}
	/* Every PBox has, for every iteration, the sum of the racks in each part's ring order. */
	for (it = 0; it < s->iterations; it++) {
		for (e = 0; e < s->elems; e++) {
			unsigned int part, start;
			uint32_t off, count;
			float want;

			for (part = 0; part < s->racks; part++) {
				phub_ring_part(s->racks, s->elems, part, &off, &count);
				if (e >= off && e < off + count)
					break;
			}
			start = part;
			want = rack_value(start, s->first + it, e);
			for (k = 1; k < s->racks; k++)
				want = want + rack_value((start + k) % s->racks, s->first + it, e);
			for (r = 0; r < s->racks; r++)
				if (memcmp(&s->pbox[r].result[it][e], &want, sizeof(float)) != 0)
					ck_abort_msg("R=%u pbox %u it %u elem %u: %a, want %a",
						     s->racks, r, it, e, s->pbox[r].result[it][e],
						     want);
		}
	}
	free(s->queue);
}

static struct sim *
sim_new(unsigned int racks, uint32_t elems, unsigned int seed)
{
	struct sim *s = calloc(1, sizeof(*s));

	ck_assert_ptr_nonnull(s);
	s->racks = racks;
	s->elems = elems;
	s->iterations = 6;
	s->first = 0xfffffffeu;		/* across the serial-number wrap */
	s->seed = seed;
	return s;
}

/* Elements PBox r sends per iteration: every part twice but pos+1 (reduce) and pos+2 (gather). */
static uint32_t
elems_sent_per_iteration(unsigned int racks, uint32_t elems, unsigned int r)
{
	uint32_t off, count, expect = 2 * elems;

	phub_ring_part(racks, elems, (r + 1) % racks, &off, &count);
	expect -= count;
	phub_ring_part(racks, elems, (r + 2) % racks, &off, &count);
	expect -= count;
	return expect;
}

START_TEST(test_loss_free_ring_sends_two_r_minus_one_parts_once_each)
{
	unsigned int racks = (unsigned int)_i;
	struct sim *s = sim_new(racks, MAX_ELEMS, 7 * racks);
	unsigned int r;

	sim_run(s);
	for (r = 0; r < racks; r++) {
		uint32_t expect = elems_sent_per_iteration(racks, MAX_ELEMS, r);

		ck_assert_uint_eq(s->pbox[r].first_send_elems, (uint64_t)expect * s->iterations);
		ck_assert_uint_eq(s->pbox[r].resent, 0);
		/* 2(R-1)/R of the segment, give or take an element per part. */
		ck_assert(fabs((double)expect - 2.0 * (racks - 1) * MAX_ELEMS / racks) <= 2.0);
	}
	free(s);
}
END_TEST

START_TEST(test_lossy_duplicating_reordering_ring_gives_the_fixed_order_sum)
{
	unsigned int racks = (unsigned int)_i;
	unsigned int seed;

	for (seed = 1; seed <= 4; seed++) {
		struct sim *s = sim_new(racks, seed == 4 ? 37 : MAX_ELEMS, 1000 * racks + seed);
		uint64_t resent = 0;
		unsigned int r;

		s->loss_pct = 15;
		s->dup_pct = 10;
		sim_run(s);
		for (r = 0; r < racks; r++)
			resent += s->pbox[r].resent;
		/* The loss really happened and was repaired; duplicates were seen and ACKed. */
		ck_assert_uint_gt(resent, 0);
		ck_assert_uint_gt(s->duplicates, 0);
		free(s);
	}
}
END_TEST

START_TEST(test_small_segment_skips_empty_parts)
{
	/* 5 elements on 8 racks: three parts are empty. */
	struct sim *s = sim_new(8, 5, 99);
	uint32_t off, count;
	unsigned int r;

	phub_ring_part(8, 5, 0, &off, &count);
	ck_assert_uint_eq(count, 0);
	sim_run(s);		/* would never finish if an empty part's step waited for data */
	for (r = 0; r < 8; r++)
		ck_assert_uint_eq(s->pbox[r].first_send_elems,
				  (uint64_t)elems_sent_per_iteration(8, 5, r) * s->iterations);
	free(s);
}
END_TEST

/*
 * The window: two segments share one link whose window takes one part. The second segment's
 * step is held back (not sent, no timer, no loss), and the ACK of the first lets it go.
 */
START_TEST(test_window_holds_steps_until_an_ack_opens_it)
{
	static float b2[4][MAX_ELEMS];
	struct phub_ring_params p = params(2, 0);
	struct phub_ring_window win;
	struct phub_ring_seg a, b;
	struct phub_ring_out out, due[2];
	float rack[200];
	uint64_t steps;

	for (unsigned int i = 0; i < 200; i++)
		rack[i] = 1.0f;
	/* 200 elements cut in two: 100 floats, 400 bytes a part; the window takes one. */
	phub_ring_window_init(&win, 400, 400, 400);
	p.win = &win;
	phub_ring_seg_init(&a, 0, bufs[0], bufs[1], bufs[2], bufs[3]);
	phub_ring_seg_init(&b, 0, b2[0], b2[1], b2[2], b2[3]);
	ck_assert_int_eq(phub_ring_local(&a, &p, 200, 0, rack, 0, &out), 0);
	ck_assert_uint_eq(out.send_steps, 0x1);
	ck_assert_uint_eq(phub_ring_window_inflight(&win, &steps), 400);
	ck_assert_uint_eq(steps, 1);
	ck_assert_int_eq(phub_ring_local(&b, &p, 200, 0, rack, 0, &out), 0);
	ck_assert_uint_eq(out.send_steps, 0);
	ck_assert(phub_ring_holds(&b));
	ck_assert_uint_eq(win.held, 1);
	ck_assert_uint_eq(win.held_total, 1);
	/* Held is not sent: no retransmission, no cut, however late; the window still full. */
	ck_assert_uint_eq(phub_ring_release(&b, &p, 1 * NS_PER_MS, due), 0);
	ck_assert(phub_ring_idle(&b));
	/* a's timer fires: a resends (already in flight) and the window is halved, to its floor. */
	ck_assert_uint_eq(phub_ring_poll(&a, &p, 200, 3 * NS_PER_MS, due), 1);
	ck_assert_uint_eq(due[0].send_steps, 0x1);
	ck_assert_uint_eq(due[0].resent_steps, 0x1);
	ck_assert_uint_eq(win.cuts, 1);
	ck_assert_uint_eq(win.cwnd, 400);
	ck_assert_uint_eq(phub_ring_poll(&b, &p, 200, 3 * NS_PER_MS, due), 0);
	ck_assert_uint_eq(phub_ring_window_inflight(&win, NULL), 400);
	/* The ACK of a's step: b's goes, now in flight, and its timer starts then. */
	ck_assert(phub_ring_ack(&a, &p, 0, 0, 4 * NS_PER_MS, NULL));
	ck_assert_uint_eq(phub_ring_window_inflight(&win, &steps), 0);
	ck_assert_uint_eq(phub_ring_release(&b, &p, 4 * NS_PER_MS, due), 1);
	ck_assert_uint_eq(due[0].send_steps, 0x1);
	ck_assert_uint_eq(due[0].resent_steps, 0);
	ck_assert_uint_eq(due[0].iteration, 0);
	ck_assert(due[0].sum == b2[0]);
	ck_assert(!phub_ring_holds(&b));
	ck_assert_uint_eq(win.held, 0);
	ck_assert_uint_eq(phub_ring_window_inflight(&win, &steps), 400);
	ck_assert_uint_eq(steps, 1);
	ck_assert_uint_eq(phub_ring_poll(&b, &p, 200, 5 * NS_PER_MS, due), 0);	/* 2 ms RTO */
	ck_assert_uint_eq(phub_ring_poll(&b, &p, 200, 6 * NS_PER_MS, due), 1);
	/* The window never went past its one part; ACKs grow it, never past its ceiling. */
	ck_assert(phub_ring_ack(&b, &p, 0, 0, 7 * NS_PER_MS, NULL));
	ck_assert_uint_eq(win.cwnd, 400);
	ck_assert_uint_eq(phub_ring_window_inflight(&win, NULL), 0);
}
END_TEST

/* A window grows by what is acknowledged, halves on a timeout once per RTO, within bounds. */
START_TEST(test_window_grows_and_halves_within_its_bounds)
{
	static float b2[4][MAX_ELEMS];
	struct phub_ring_params p = params(2, 0);
	struct phub_ring_window win;
	struct phub_ring_seg seg[8];
	struct phub_ring_out out, due[2];
	float rack[200];

	for (unsigned int i = 0; i < 200; i++)
		rack[i] = 1.0f;
	phub_ring_window_init(&win, 800, 400, 2000);
	ck_assert_uint_eq(win.cwnd, 800);
	p.win = &win;
	for (unsigned int i = 0; i < 8; i++) {
		phub_ring_seg_init(&seg[i], 0, b2[0], b2[1], b2[2], b2[3]);
		ck_assert_int_eq(phub_ring_local(&seg[i], &p, 200, 0, rack, 0, &out), 0);
		/* Two parts of 400 bytes fit 800. */
		ck_assert_uint_eq(out.send_steps, i < 2 ? 0x1u : 0u);
	}
	/* Slow start: each ACK adds its bytes. */
	ck_assert(phub_ring_ack(&seg[0], &p, 0, 0, NS_PER_MS / 4, NULL));
	ck_assert_uint_eq(win.cwnd, 1200);
	ck_assert(phub_ring_ack(&seg[1], &p, 0, 0, NS_PER_MS / 4, NULL));
	ck_assert_uint_eq(win.cwnd, 1600);
	for (unsigned int i = 2; i < 6; i++)
		ck_assert_uint_eq(phub_ring_release(&seg[i], &p, NS_PER_MS / 2, due), 1);
	ck_assert_uint_eq(phub_ring_release(&seg[6], &p, NS_PER_MS / 2, due), 0);
	for (unsigned int i = 2; i < 6; i++)
		ck_assert(phub_ring_ack(&seg[i], &p, 0, 0, NS_PER_MS, NULL));
	ck_assert_uint_eq(win.cwnd, 2000);	/* the ceiling */
	ck_assert_uint_eq(phub_ring_release(&seg[6], &p, NS_PER_MS, due), 1);
	ck_assert_uint_eq(phub_ring_release(&seg[7], &p, NS_PER_MS, due), 1);
	/* Both time out together: one cut (to 1000), not two, and one probe (the first's). */
	ck_assert_uint_eq(phub_ring_poll(&seg[6], &p, 200, 4 * NS_PER_MS, due), 1);
	ck_assert_uint_eq(phub_ring_poll(&seg[7], &p, 200, 4 * NS_PER_MS, due), 0);
	ck_assert_uint_eq(win.cuts, 1);
	ck_assert_uint_eq(win.cwnd, 1000);
	ck_assert_uint_eq(win.ssthresh, 1000);
	/* Past ssthresh the growth is about a part per window, not a part per ACK. */
	ck_assert(phub_ring_ack(&seg[6], &p, 0, 0, 5 * NS_PER_MS, NULL));
	ck_assert_uint_eq(win.cwnd, 1000 + 400 * 400 / 1000 + 1);
}
END_TEST

/*
 * A timeout resends one step of the link, not all it holds in flight (a neighbour descheduled
 * past the RTO would get the whole window again); the rest follows by the ACK clock, two per
 * ACK of a resent step, oldest first, and not at all once a step sent before the timeout is
 * acknowledged (its queue was intact: the timeout was spurious, its cut is undone). The probe
 * backs off.
 */
START_TEST(test_timeout_resends_one_step_then_by_the_ack_clock)
{
	enum { N = 20 };
	static float b2[N][4][200];
	struct phub_ring_params p = params(2, 0);
	struct phub_ring_window win;
	struct phub_ring_seg seg[N];
	struct phub_ring_out out, due[2];
	float rack[200];
	unsigned int i, n;
	uint64_t t;

	for (i = 0; i < 200; i++)
		rack[i] = 1.0f;
	phub_ring_window_init(&win, N * 400, 400, 2 * N * 400);
	p.win = &win;
	for (i = 0; i < N; i++) {
		phub_ring_seg_init(&seg[i], 0, b2[i][0], b2[i][1], b2[i][2], b2[i][3]);
		ck_assert_int_eq(phub_ring_local(&seg[i], &p, 200, 0, rack, 0, &out), 0);
		ck_assert_uint_eq(out.send_steps, 0x1);
	}
	/* Nothing comes back: every round times out at 2 ms, one datagram goes, segment 0's. */
	for (n = 0, i = 0; i < N; i++)
		if (phub_ring_poll(&seg[i], &p, 200, 3 * NS_PER_MS, due) == 1) {
			ck_assert_uint_eq(due[0].resent_steps, 0x1);
			ck_assert_uint_eq(i, 0);
			n++;
		}
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(win.timeouts, 1);
	/* Still silent: the next probe after the backed-off 4 ms, not at the 2 ms RTO. */
	for (i = 0; i < N; i++)
		ck_assert_uint_eq(phub_ring_poll(&seg[i], &p, 200, 6 * NS_PER_MS, due), 0);
	for (n = 0, t = 7 * NS_PER_MS + 1, i = 0; i < N; i++)
		n += phub_ring_poll(&seg[i], &p, 200, t, due);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(win.timeouts, 2);
	ck_assert_uint_eq(win.cwnd, N * 400 / 4);	/* halved by each probe */
	/* The probe's ACK (segment 0's, resent): two more go, the oldest (segments 1 and 2). */
	p.heard_ns = 8 * NS_PER_MS;
	ck_assert(phub_ring_ack(&seg[0], &p, 0, 0, 8 * NS_PER_MS, NULL));
	for (n = 0, i = 0; i < N; i++)
		if (phub_ring_poll(&seg[i], &p, 200, 8 * NS_PER_MS, due) == 1) {
			ck_assert(i == 1 || i == 2);
			n++;
		}
	ck_assert_uint_eq(n, 2);
	/* Segment 3, sent once before the timeout, acknowledged: spurious, no more resends. */
	ck_assert(phub_ring_ack(&seg[3], &p, 0, 0, 9 * NS_PER_MS, NULL));
	ck_assert_uint_eq(win.spurious, 1);
	/* The last probe's cut is undone (the first one's stays: a probe went unanswered). */
	ck_assert_uint_eq(win.ssthresh, N * 400 / 2);
	ck_assert_uint_ge(win.cwnd, N * 400 / 2);
	ck_assert(phub_ring_ack(&seg[1], &p, 0, 0, 9 * NS_PER_MS, NULL));
	for (i = 0; i < N; i++)
		ck_assert_uint_eq(phub_ring_poll(&seg[i], &p, 200, 9 * NS_PER_MS, due), 0);
	/* The rest is acknowledged as it comes; nothing was lost from the window's accounts. */
	for (i = 2; i < N; i++)
		if (i != 3)
			ck_assert(phub_ring_ack(&seg[i], &p, 0, 0, 10 * NS_PER_MS, NULL));
	ck_assert_uint_eq(phub_ring_window_inflight(&win, NULL), 0);
	ck_assert_uint_eq(win.timeouts, 2);
}
END_TEST

/*
 * Loss by the order of ACKs: a step that sends made PHUB_RING_REORDER datagrams after it on the
 * link overtook is resent at once, before its timeout; one not overtaken that far is not, and
 * its timer fires only once the link has been silent for an RTO.
 */
START_TEST(test_step_overtaken_by_acked_later_ones_is_resent_before_timeout)
{
	enum { N = PHUB_RING_REORDER + 3 };
	static float b2[4][MAX_ELEMS];
	struct phub_ring_params p = params(2, 0);
	struct phub_ring_window win;
	struct phub_ring_seg seg[N];
	struct phub_ring_out out, due[2];
	float rack[200];

	for (unsigned int i = 0; i < 200; i++)
		rack[i] = 1.0f;
	/* A ceiling of 4 N steps: the slack is PHUB_RING_REORDER, not half the ceiling's. */
	phub_ring_window_init(&win, N * 400, N * 400, 4 * N * 400);
	p.win = &win;
	/* One step each, sent in segment order: places 1 .. N on the link. */
	for (unsigned int i = 0; i < N; i++) {
		phub_ring_seg_init(&seg[i], 0, b2[0], b2[1], b2[2], b2[3]);
		ck_assert_int_eq(phub_ring_local(&seg[i], &p, 200, 0, rack, 0, &out), 0);
		ck_assert_uint_eq(out.send_steps, 0x1);
	}
	/* Every ACK but those of segments 0 and 4 comes back. */
	for (unsigned int i = 1; i < N; i++)
		if (i != 4)
			ck_assert(phub_ring_ack(&seg[i], &p, 0, 0, NS_PER_MS, NULL));
	ck_assert_uint_eq(win.acked_seq, N);
	p.heard_ns = NS_PER_MS;
	/* Segment 0 (place 1) is N - 1 places behind: lost, resent before its 2 ms RTO. */
	ck_assert_uint_eq(phub_ring_poll(&seg[0], &p, 200, NS_PER_MS + NS_PER_MS / 2, due), 1);
	ck_assert_uint_eq(due[0].send_steps, 0x1);
	ck_assert_uint_eq(due[0].resent_steps, 0x1);
	ck_assert_uint_eq(win.fast_resends, 1);
	ck_assert_uint_eq(win.cuts, 1);
	/* Not again at the next scan: its new place is the newest. */
	ck_assert_uint_eq(phub_ring_poll(&seg[0], &p, 200, NS_PER_MS + NS_PER_MS / 2, due), 0);
	/* Segment 4 (place 5) is within the slack: not lost, and not timed out while ACKs come. */
	ck_assert_uint_eq(phub_ring_poll(&seg[4], &p, 200, NS_PER_MS + NS_PER_MS / 2, due), 0);
	p.heard_ns = 2 * NS_PER_MS + NS_PER_MS / 2;
	ck_assert_uint_eq(phub_ring_poll(&seg[4], &p, 200, 3 * NS_PER_MS, due), 0);
	ck_assert_uint_eq(win.timeouts, 0);
	/* The link silent for an RTO: its timer fires. */
	ck_assert_uint_eq(phub_ring_poll(&seg[4], &p, 200, 5 * NS_PER_MS, due), 1);
	ck_assert_uint_eq(due[0].resent_steps, 0x1);
	ck_assert_uint_eq(win.timeouts, 1);
	/* A resent step's ACK may answer its first copy: it moves no place (Karn). */
	ck_assert(phub_ring_ack(&seg[0], &p, 0, 0, 6 * NS_PER_MS, NULL));
	ck_assert(phub_ring_ack(&seg[4], &p, 0, 0, 6 * NS_PER_MS, NULL));
	ck_assert_uint_eq(win.acked_seq, N);
	ck_assert_uint_eq(phub_ring_window_inflight(&win, NULL), 0);
}
END_TEST

/*
 * Whole-MTU steps: a 256 KiB window holds 29 of 2224 floats, fewer than PHUB_RING_REORDER, so
 * the slack is half of them (14): a lost step that 20 later ones overtook is still found by
 * the ACKs' order, not left to wait for the link to fall silent.
 */
START_TEST(test_whole_mtu_steps_are_found_lost_by_ack_order)
{
	enum { N = 21, ELEMS = 2224 };
	static float b2[N][4][ELEMS], rack[ELEMS];
	struct phub_ring_params p = params(2, 0);
	struct phub_ring_window win;
	struct phub_ring_seg seg[N];
	struct phub_ring_out out, due[2];

	phub_ring_window_init(&win, PHUB_RING_WINDOW_MAX, PHUB_RING_WINDOW_MIN,
			      PHUB_RING_WINDOW_MAX);
	p.win = &win;
	for (unsigned int i = 0; i < N; i++) {
		phub_ring_seg_init(&seg[i], 0, b2[i][0], b2[i][1], b2[i][2], b2[i][3]);
		seg[i].root = 0;	/* the whole segment is this PBox's step 0 */
		ck_assert_int_eq(phub_ring_local(&seg[i], &p, ELEMS, 0, rack, 0, &out), 0);
		ck_assert_uint_eq(out.send_steps, i < 29 ? 0x1u : 0u);
	}
	for (unsigned int i = 1; i < N; i++)
		ck_assert(phub_ring_ack(&seg[i], &p, 0, 0, NS_PER_MS, NULL));
	p.heard_ns = NS_PER_MS;
	ck_assert_uint_eq(phub_ring_poll(&seg[0], &p, ELEMS, NS_PER_MS + NS_PER_MS / 2, due), 1);
	ck_assert_uint_eq(due[0].resent_steps, 0x1);
	ck_assert_uint_eq(win.fast_resends, 1);
	ck_assert_uint_eq(win.timeouts, 0);
}
END_TEST

/*
 * A window whose ceiling adapts (phub_ring_window_adapt()) between 2000 and 8000 bytes, fed
 * 400 one-step segments of 400 bytes at once, each acknowledged base_ns plus ns_per_byte for
 * every byte in flight at its send (the queue it waited behind) after it went. Returns the
 * ceiling at the end.
 */
static uint64_t
adapt_run(struct phub_ring_window *win, uint64_t base_ns, uint64_t ns_per_byte)
{
	enum { N = 400, ELEMS = 100 };
	static float b[N][4][ELEMS], rack[ELEMS];
	static struct phub_ring_seg seg[N];
	static uint64_t due_ns[N];
	struct phub_ring_params p = params(2, 0);
	struct phub_ring_out out, rel[2];
	unsigned int fifo[N], head = 0, tail = 0, cursor = 0;
	uint64_t now = 0;

	p.rto_ns = p.rto_max_ns = 1000 * NS_PER_MS;	/* no timeout: this is about delay */
	phub_ring_window_init(win, 800, 400, 2000);
	phub_ring_window_adapt(win, 8000);
	p.win = win;
	for (unsigned int i = 0; i < N; i++) {
		phub_ring_seg_init(&seg[i], 0, b[i][0], b[i][1], b[i][2], b[i][3]);
		seg[i].root = 0;	/* the whole segment is step 0's part: one datagram */
		ck_assert_int_eq(phub_ring_local(&seg[i], &p, ELEMS, 0, rack, 0, &out), 0);
		if (out.send_steps != 0) {
			due_ns[i] = base_ns + ns_per_byte * phub_ring_window_inflight(win, NULL);
			fifo[tail++] = i;
		}
	}
	while (head < tail) {
		unsigned int i = fifo[head++];

		if (now < due_ns[i])
			now = due_ns[i];
		ck_assert(phub_ring_ack(&seg[i], &p, 0, 0, now, NULL));
		for (; cursor < N; cursor++) {
			if (seg[cursor].round[0].held == 0)
				continue;
			if (phub_ring_release(&seg[cursor], &p, now, rel) == 0)
				break;
			due_ns[cursor] = now + base_ns +
					 ns_per_byte * phub_ring_window_inflight(win, NULL);
			fifo[tail++] = cursor;
		}
	}
	ck_assert_uint_eq(tail, N);	/* every segment went, once */
	ck_assert_uint_eq(phub_ring_window_inflight(win, NULL), 0);
	return atomic_load(&win->ceil);
}

/*
 * The ceiling follows the path: with no queueing delay it grows to its top, and the window
 * with it; where the window's own bytes queue more than PHUB_RING_QDELAY_TARGET_NS it never
 * grows; a loss takes it back to its floor, held there.
 */
START_TEST(test_window_ceiling_follows_delay_and_loss)
{
	static float b2[4][MAX_ELEMS];
	struct phub_ring_params p = params(2, 0);
	struct phub_ring_window win;
	struct phub_ring_seg seg;
	struct phub_ring_out out, due[2];
	float rack[200] = { 0 };

	/* 1 ms round trips whatever is in flight: no queue. */
	ck_assert_uint_eq(adapt_run(&win, NS_PER_MS, 0), 8000);
	ck_assert_uint_gt(win.ceil_ups, 0);
	ck_assert_uint_eq(win.ceil_downs, 0);
	ck_assert_uint_gt(win.cwnd, 2000);
	ck_assert_uint_eq(win.min_rtt_ns, NS_PER_MS);
	/* 10 us a byte in flight: 2000 bytes queue 20 ms. */
	ck_assert_uint_eq(adapt_run(&win, NS_PER_MS, 10000), 2000);
	ck_assert_uint_eq(win.ceil_ups, 0);
	ck_assert_uint_le(win.cwnd, 2000);
	/* Grown, then a timeout: the ceiling is back at its floor and does not grow again. */
	ck_assert_uint_eq(adapt_run(&win, NS_PER_MS, 0), 8000);
	p.win = &win;
	phub_ring_seg_init(&seg, 0, b2[0], b2[1], b2[2], b2[3]);
	ck_assert_int_eq(phub_ring_local(&seg, &p, 200, 0, rack, 500 * NS_PER_MS, &out), 0);
	ck_assert_uint_eq(out.send_steps, 0x1);
	ck_assert_uint_eq(phub_ring_poll(&seg, &p, 200, 510 * NS_PER_MS, due), 1);
	ck_assert_uint_eq(win.timeouts, 1);
	ck_assert_uint_eq(win.ceil, 2000);
	ck_assert_uint_eq(win.ceil_hold_ns, 510 * NS_PER_MS + PHUB_RING_CEIL_HOLD_NS);
	ck_assert(phub_ring_ack(&seg, &p, 0, 0, 511 * NS_PER_MS, NULL));
	ck_assert_uint_le(win.cwnd, 2000);
}
END_TEST

Suite *
phub_ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("schedule");

	/* Loop tests only: one run per number of racks. */
	tcase_add_loop_test(tc, test_each_step_forwards_the_part_the_previous_step_brought, 2,
			    PHUB_RING_MAX_RACKS + 1);
	tcase_add_loop_test(tc, test_parts_tile_the_segment_in_even_shares, 2,
			    PHUB_RING_MAX_RACKS + 1);
	suite_add_tcase(s, tc);

	PHUB_TCASE(s, "verdicts", test_hostile_and_repeated_segments_get_their_verdicts);

	tc = PHUB_TCASE(s, "network", test_small_segment_skips_empty_parts);
	tcase_add_loop_test(tc, test_loss_free_ring_sends_two_r_minus_one_parts_once_each, 2, 9);
	tcase_add_loop_test(tc, test_lossy_duplicating_reordering_ring_gives_the_fixed_order_sum, 2,
			    9);

	PHUB_TCASE(s, "window",
		test_window_holds_steps_until_an_ack_opens_it,
		test_window_grows_and_halves_within_its_bounds,
		test_step_overtaken_by_acked_later_ones_is_resent_before_timeout,
		test_timeout_resends_one_step_then_by_the_ack_clock,
		test_whole_mtu_steps_are_found_lost_by_ack_order,
		test_window_ceiling_follows_delay_and_loss);
	return s;
}
