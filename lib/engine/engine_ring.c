/* SPDX-License-Identifier: BSD-3-Clause */
/* The ring schedule and the per-segment reduce-scatter/all-gather state machine (phub_ring.h). */

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/phub_kernels.h"
#include "phub_ring.h"

void
phub_ring_part(unsigned int racks, uint32_t elems, unsigned int part, uint32_t *offset,
	       uint32_t *count)
{
	/*
	 * Even shares, differing by one element at most: PBox pos sends every part but pos+1
	 * and pos+2, so any systematic difference between parts would load the same PBoxes'
	 * links more on every segment. The kernels take any alignment.
	 */
	uint64_t begin = (uint64_t)elems * part / racks;
	uint64_t end = (uint64_t)elems * (part + 1) / racks;

	*offset = (uint32_t)begin;
	*count = (uint32_t)(end - begin);
}

unsigned int
phub_ring_send_part(unsigned int racks, unsigned int pos, unsigned int step)
{
	/* Reduce step k: (pos - k); gather step g = k - (R-1): (pos + 1 - g). All mod R. */
	if (phub_ring_step_is_reduce(racks, step))
		return (pos + racks - step % racks) % racks;
	return (pos + 1 + racks - (step - (racks - 1)) % racks) % racks;
}

unsigned int
phub_ring_recv_part(unsigned int racks, unsigned int pos, unsigned int step)
{
	return phub_ring_send_part(racks, (pos + racks - 1) % racks, step);
}

int
phub_ring_part_at(unsigned int racks, uint32_t elems, uint32_t elem_offset, uint32_t elem_count)
{
	uint32_t off, count;
	unsigned int part;

	for (part = 0; part < racks; part++) {
		phub_ring_part(racks, elems, part, &off, &count);
		if (count != 0 && off == elem_offset && count == elem_count)
			return (int)part;
	}
	return -1;
}

void
phub_ring_seg_init(struct phub_ring_seg *seg, uint32_t first_iteration, float *sum0,
		   float *sum1, float *inbox0, float *inbox1)
{
	memset(seg, 0, sizeof(*seg));
	seg->next_iteration = first_iteration;
	seg->root = PHUB_RING_SPLIT;
	seg->sum[0] = sum0;
	seg->sum[1] = sum1;
	seg->inbox[0] = inbox0;
	seg->inbox[1] = inbox1;
}

static uint32_t
all_steps(unsigned int racks)
{
	return (uint32_t)((1ull << phub_ring_steps(racks)) - 1);
}

void
phub_ring_window_init(struct phub_ring_window *w, uint64_t init_bytes, uint64_t min_bytes,
		      uint64_t max_bytes)
{
	if (min_bytes == 0)
		min_bytes = 1;
	if (max_bytes < min_bytes)
		max_bytes = min_bytes;
	if (init_bytes < min_bytes)
		init_bytes = min_bytes;
	if (init_bytes > max_bytes)
		init_bytes = max_bytes;
	w->min_bytes = min_bytes;
	w->max_bytes = max_bytes;
	atomic_store_explicit(&w->cwnd, init_bytes, memory_order_relaxed);
	atomic_store_explicit(&w->ssthresh, max_bytes, memory_order_relaxed);
	atomic_store_explicit(&w->inflight, 0, memory_order_relaxed);
	atomic_store_explicit(&w->held, 0, memory_order_relaxed);
	atomic_store_explicit(&w->cut_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&w->cuts, 0, memory_order_relaxed);
	atomic_store_explicit(&w->held_total, 0, memory_order_relaxed);
	atomic_store_explicit(&w->tx_seq, 0, memory_order_relaxed);
	atomic_store_explicit(&w->acked_seq, 0, memory_order_relaxed);
	atomic_store_explicit(&w->fast_resends, 0, memory_order_relaxed);
	atomic_store_explicit(&w->timeouts, 0, memory_order_relaxed);
	atomic_store_explicit(&w->probe_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&w->probe_retries, 0, memory_order_relaxed);
	atomic_store_explicit(&w->rto_seq, 0, memory_order_relaxed);
	atomic_store_explicit(&w->recovering, false, memory_order_relaxed);
	atomic_store_explicit(&w->credits, 0, memory_order_relaxed);
	atomic_store_explicit(&w->spurious, 0, memory_order_relaxed);
	atomic_store_explicit(&w->undo_cuts, UINT64_MAX, memory_order_relaxed);
	atomic_store_explicit(&w->ceil, max_bytes, memory_order_relaxed);
	w->top_bytes = max_bytes;
	atomic_store_explicit(&w->ceil_hold_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&w->epoch_bytes, 0, memory_order_relaxed);
	atomic_store_explicit(&w->epoch_rtt_ns, UINT64_MAX, memory_order_relaxed);
	atomic_store_explicit(&w->min_rtt_ns, UINT64_MAX, memory_order_relaxed);
	atomic_store_explicit(&w->ceil_ups, 0, memory_order_relaxed);
	atomic_store_explicit(&w->ceil_downs, 0, memory_order_relaxed);
	atomic_store_explicit(&w->epochs, 0, memory_order_relaxed);
	for (unsigned int i = 0; i < PHUB_RING_WINDOW_TIMES; i++) {
		atomic_store_explicit(&w->sent_ns[i], 0, memory_order_relaxed);
		atomic_store_explicit(&w->sent_seq[i], 0, memory_order_relaxed);
	}
}

void
phub_ring_window_adapt(struct phub_ring_window *w, uint64_t top_bytes)
{
	w->top_bytes = top_bytes > w->max_bytes ? top_bytes : w->max_bytes;
	atomic_store_explicit(&w->ssthresh, w->top_bytes, memory_order_relaxed);
}

/*
 * The link's next place in its send order (never 0, the "nothing acknowledged" mark), sent at
 * now_ns (a first transmission's time, for its round trip; 0: a resend, which has none).
 */
static uint32_t
window_seq(struct phub_ring_window *w, uint64_t now_ns)
{
	uint32_t seq = atomic_fetch_add_explicit(&w->tx_seq, 1, memory_order_relaxed) + 1;
	unsigned int slot = seq & (PHUB_RING_WINDOW_TIMES - 1);

	atomic_store_explicit(&w->sent_ns[slot], now_ns, memory_order_relaxed);
	atomic_store_explicit(&w->sent_seq[slot], seq, memory_order_release);
	return seq;
}

/* Keep *v at most x. */
static void
atomic_min_u64(_Atomic uint64_t *v, uint64_t x)
{
	uint64_t cur = atomic_load_explicit(v, memory_order_relaxed);

	while (x < cur && !atomic_compare_exchange_weak_explicit(v, &cur, x, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

/*
 * A first transmission answered at now_ns: the newest place in the send order known delivered,
 * and its round trip (if its send time is still kept) into the ceiling's delay figures.
 */
static void
window_delivered(struct phub_ring_window *w, uint32_t seq, uint64_t now_ns)
{
	uint32_t cur = atomic_load_explicit(&w->acked_seq, memory_order_relaxed);
	unsigned int slot = seq & (PHUB_RING_WINDOW_TIMES - 1);
	uint64_t sent;

	while ((int32_t)(seq - cur) > 0 &&
	       !atomic_compare_exchange_weak_explicit(&w->acked_seq, &cur, seq,
						      memory_order_relaxed, memory_order_relaxed))
		;
	if (w->top_bytes <= w->max_bytes ||
	    atomic_load_explicit(&w->sent_seq[slot], memory_order_acquire) != seq)
		return;
	sent = atomic_load_explicit(&w->sent_ns[slot], memory_order_relaxed);
	/* Another lcore's clock may be a little behind: no sample rather than a wrong one. */
	if (sent == 0 || now_ns <= sent)
		return;
	atomic_min_u64(&w->min_rtt_ns, now_ns - sent);
	atomic_min_u64(&w->epoch_rtt_ns, now_ns - sent);
}

/* Part `part` of the segment as its ring carries it (its root). */
static void
seg_part(const struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
	 unsigned int part, uint32_t *off, uint32_t *count)
{
	phub_ring_seg_part(p->racks, elems, seg->root, part, off, count);
}

/* Payload bytes of step's datagram from this PBox (the part it sends). */
static uint64_t
step_bytes(const struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
	   unsigned int step)
{
	uint32_t off, count;

	seg_part(seg, p, elems, phub_ring_send_part(p->racks, p->pos, step), &off, &count);
	return (uint64_t)count * sizeof(float);
}

#define STEP_ONE (1ull << PHUB_RING_WINDOW_STEP_SHIFT)
#define BYTES_MASK (STEP_ONE - 1)

/*
 * Room for one step of bytes more in flight (within cwnd and PHUB_RING_WINDOW_MAX_STEPS)?
 * Take it if so; an empty window takes any one step.
 */
static bool
window_take(struct phub_ring_window *w, uint64_t bytes)
{
	uint64_t cur = atomic_load_explicit(&w->inflight, memory_order_relaxed);

	do {
		if (cur != 0 &&
		    ((cur & BYTES_MASK) + bytes > atomic_load_explicit(&w->cwnd,
								       memory_order_relaxed) ||
		     (cur >> PHUB_RING_WINDOW_STEP_SHIFT) >= PHUB_RING_WINDOW_MAX_STEPS))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&w->inflight, &cur, cur + STEP_ONE + bytes,
							memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

/* steps of bytes sent once are out of flight (acknowledged, or dropped with their round). */
static void
window_out(struct phub_ring_window *w, uint64_t steps, uint64_t bytes)
{
	atomic_fetch_sub_explicit(&w->inflight, steps * STEP_ONE + bytes, memory_order_relaxed);
}

uint64_t
phub_ring_window_inflight(struct phub_ring_window *w, uint64_t *steps)
{
	uint64_t cur = atomic_load_explicit(&w->inflight, memory_order_relaxed);

	if (steps != NULL)
		*steps = cur >> PHUB_RING_WINDOW_STEP_SHIFT;
	return cur & BYTES_MASK;
}

/*
 * An epoch of the ceiling ends: grow it while the epoch's least round trip stayed near the
 * link's least, shrink it (and the window with it) when the window's own queue grew past twice
 * the target. See phub_ring_window.ceil.
 */
static void
window_ceil_epoch(struct phub_ring_window *w, uint64_t ceil, uint64_t now_ns)
{
	uint64_t rtt = atomic_exchange_explicit(&w->epoch_rtt_ns, UINT64_MAX,
						memory_order_relaxed);
	uint64_t min = atomic_load_explicit(&w->min_rtt_ns, memory_order_relaxed);
	uint64_t next = ceil;

	/* The first epoch only learns the link's least round trip: its own would be the base. */
	if (atomic_fetch_add_explicit(&w->epochs, 1, memory_order_relaxed) == 0 ||
	    rtt == UINT64_MAX || min == UINT64_MAX)
		return;
	if (rtt - min <= PHUB_RING_QDELAY_TARGET_NS) {
		if (now_ns < atomic_load_explicit(&w->ceil_hold_ns, memory_order_relaxed))
			return;
		next = ceil + ceil / 8;
		if (next > w->top_bytes)
			next = w->top_bytes;
	} else if (rtt - min > 2 * PHUB_RING_QDELAY_TARGET_NS) {
		next = ceil - ceil / 8;
		if (next < w->max_bytes)
			next = w->max_bytes;
	}
	if (next == ceil)
		return;
	atomic_store_explicit(&w->ceil, next, memory_order_relaxed);
	atomic_fetch_add_explicit(next > ceil ? &w->ceil_ups : &w->ceil_downs, 1,
				  memory_order_relaxed);
	if (next < ceil && atomic_load_explicit(&w->cwnd, memory_order_relaxed) > next)
		atomic_store_explicit(&w->cwnd, next, memory_order_relaxed);
}

/*
 * An ACK of bytes at now_ns: the window grows, doubling per round trip below ssthresh, then
 * linearly, up to its ceiling; with cwnd at the ceiling, the ceiling's epoch counts the bytes.
 */
static void
window_grow(struct phub_ring_window *w, uint64_t bytes, uint64_t now_ns)
{
	uint64_t cwnd = atomic_load_explicit(&w->cwnd, memory_order_relaxed);
	uint64_t ceil = atomic_load_explicit(&w->ceil, memory_order_relaxed);
	uint64_t before;

	if (cwnd < atomic_load_explicit(&w->ssthresh, memory_order_relaxed))
		cwnd += bytes;
	else
		cwnd += bytes * bytes / cwnd + 1;
	if (cwnd > ceil)
		cwnd = ceil;
	atomic_store_explicit(&w->cwnd, cwnd, memory_order_relaxed);
	if (w->top_bytes <= w->max_bytes)
		return;
	/*
	 * An epoch is a ceiling's worth acknowledged at the ceiling, in one go, with the window
	 * used (3/4 of it in flight): a ceiling the sender does not fill (too little to send, or
	 * PHUB_RING_WINDOW_MAX_STEPS binds) says nothing of the path and does not grow.
	 */
	if (cwnd < ceil || phub_ring_window_inflight(w, NULL) + bytes < ceil / 4 * 3) {
		/* Its round trips too: those of a smaller window would hide the queue. */
		atomic_store_explicit(&w->epoch_bytes, 0, memory_order_relaxed);
		atomic_store_explicit(&w->epoch_rtt_ns, UINT64_MAX, memory_order_relaxed);
		return;
	}
	before = atomic_fetch_add_explicit(&w->epoch_bytes, bytes, memory_order_relaxed);
	if (before < ceil && before + bytes >= ceil) {
		atomic_store_explicit(&w->epoch_bytes, 0, memory_order_relaxed);
		window_ceil_epoch(w, ceil, now_ns);
	}
}

/* A retransmission timeout: halve the window, once per gap_ns (one loss, many timers). */
static void
window_cut(struct phub_ring_window *w, uint64_t now_ns, uint64_t gap_ns)
{
	uint64_t last = atomic_load_explicit(&w->cut_ns, memory_order_relaxed);
	uint64_t cwnd;

	if (last != 0 && now_ns - last < gap_ns)
		return;
	if (!atomic_compare_exchange_strong_explicit(&w->cut_ns, &last, now_ns != 0 ? now_ns : 1,
						     memory_order_relaxed, memory_order_relaxed))
		return;
	cwnd = atomic_load_explicit(&w->cwnd, memory_order_relaxed);
	if (w->top_bytes > w->max_bytes) {
		/*
		 * The path lost what the window held (a receiver descheduled longer than its
		 * queue lasts, a shallow queue): the ceiling goes back to its floor and stays there
		 * for PHUB_RING_CEIL_HOLD_NS. A loss costs more than the deeper window gains: a
		 * cut, a resent round, often a timeout.
		 */
		uint64_t ceil = atomic_load_explicit(&w->ceil, memory_order_relaxed);
		uint64_t next = w->max_bytes;

		if (next < ceil) {
			atomic_store_explicit(&w->ceil, next, memory_order_relaxed);
			atomic_fetch_add_explicit(&w->ceil_downs, 1, memory_order_relaxed);
		}
		atomic_store_explicit(&w->ceil_hold_ns, now_ns + PHUB_RING_CEIL_HOLD_NS,
				      memory_order_relaxed);
		atomic_store_explicit(&w->epoch_bytes, 0, memory_order_relaxed);
		atomic_store_explicit(&w->epoch_rtt_ns, UINT64_MAX, memory_order_relaxed);
	}
	cwnd /= 2;
	if (cwnd < w->min_bytes)
		cwnd = w->min_bytes;
	atomic_store_explicit(&w->ssthresh, cwnd, memory_order_relaxed);
	atomic_store_explicit(&w->cwnd, cwnd, memory_order_relaxed);
	atomic_fetch_add_explicit(&w->cuts, 1, memory_order_relaxed);
}

/*
 * Make round iteration&1 hold `iteration`, dropping what it held (iteration - 2, whose sends
 * pos+1 has all received: see phub_ring_seg). Steps with an empty part need no datagram: they
 * are received, applied, sent and acknowledged from the start.
 */
static struct phub_ring_round *
round_open(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
	   uint32_t iteration)
{
	struct phub_ring_round *r = &seg->round[iteration & 1];
	unsigned int step, steps = phub_ring_steps(p->racks);
	uint32_t off, count;

	if (r->active && r->iteration == iteration)
		return r;
	seg->elems = elems;
	if (r->active && p->win != NULL) {
		/* What pos+1 provably has (see phub_ring_seg) leaves the window's accounts. */
		uint32_t unacked = r->sent & ~r->acked;
		uint64_t bytes = 0, n = 0;

		for (step = 0; step < steps; step++)
			if (unacked & (1u << step)) {
				bytes += step_bytes(seg, p, elems, step);
				n++;
			}
		if (n != 0)
			window_out(p->win, n, bytes);
		if (r->held != 0)
			atomic_fetch_sub_explicit(&p->win->held,
						  (uint64_t)__builtin_popcount(r->held),
						  memory_order_relaxed);
	}
	memset(r, 0, sizeof(*r));
	r->iteration = iteration;
	r->active = true;
	for (step = 0; step < steps; step++) {
		seg_part(seg, p, elems, phub_ring_recv_part(p->racks, p->pos, step), &off, &count);
		if (count == 0) {
			r->received |= 1u << step;
			r->applied |= 1u << step;
		}
		seg_part(seg, p, elems, phub_ring_send_part(p->racks, p->pos, step), &off, &count);
		if (count == 0) {
			r->sent |= 1u << step;
			r->acked |= 1u << step;
		}
	}
	return r;
}

/* May step be sent: is the part it carries final at this PBox for this step? */
static bool
step_ready(const struct phub_ring_round *r, unsigned int step)
{
	/* Step 0 sends the rack sum; every later step forwards what step-1 brought in. */
	if (step == 0)
		return r->local;
	return (r->applied & (1u << (step - 1))) != 0;
}

/*
 * Send the round's held steps that the window has room for, in step order (a later step never
 * overtakes an earlier one of the same round): into out->send_steps, the timer started if
 * nothing of the round was out.
 */
static void
round_release(struct phub_ring_seg *seg, const struct phub_ring_params *p,
	      struct phub_ring_round *r, uint64_t now_ns, struct phub_ring_out *out)
{
	unsigned int step, steps = phub_ring_steps(p->racks);
	uint32_t fresh = 0, released = 0;

	/*
	 * Before the control plane links the ring there is nowhere to send: a step "sent" then
	 * would be lost, time out and cut the window. Held, it goes once the link is up.
	 */
	if (p->unlinked)
		return;
	for (step = 0; step < steps && r->held != 0; step++) {
		uint32_t bit = 1u << step;

		if ((r->held & bit) == 0)
			continue;
		if (p->win != NULL && !window_take(p->win, step_bytes(seg, p, seg->elems, step)))
			break;
		r->held &= ~bit;
		fresh |= bit;
		released++;
		if (p->win != NULL)
			r->tx_seq[step] = window_seq(p->win, now_ns);
	}
	if (p->win != NULL && released != 0)
		atomic_fetch_sub_explicit(&p->win->held, released, memory_order_relaxed);
	if (fresh == 0)
		return;
	/* The timer runs for the oldest unacknowledged send; start it if none was out. */
	if ((r->sent & ~r->acked) == 0) {
		r->rto_deadline_ns = now_ns + p->rto_ns;
		r->timer_ns = now_ns;
		r->retries = 0;
	}
	r->sent |= fresh;
	out->iteration = r->iteration;
	out->sum = seg->sum[r->iteration & 1];
	out->send_steps |= fresh;
}

/* After any change to a round: queue the steps that became ready and notice completion. */
static void
round_advance(struct phub_ring_seg *seg, const struct phub_ring_params *p,
	      struct phub_ring_round *r, uint64_t now_ns, struct phub_ring_out *out)
{
	unsigned int step, steps = phub_ring_steps(p->racks);
	uint32_t ready = 0;

	out->iteration = r->iteration;
	out->sum = seg->sum[r->iteration & 1];
	for (step = 0; step < steps; step++)
		if (((r->sent | r->held) & (1u << step)) == 0 && step_ready(r, step))
			ready |= 1u << step;
	if (ready != 0) {
		r->held |= ready;
		if (p->win != NULL)
			atomic_fetch_add_explicit(&p->win->held, (uint64_t)__builtin_popcount(ready),
						  memory_order_relaxed);
		round_release(seg, p, r, now_ns, out);
		if (p->win != NULL && (ready & r->held) != 0)
			atomic_fetch_add_explicit(&p->win->held_total,
						  (uint64_t)__builtin_popcount(ready & r->held),
						  memory_order_relaxed);
	}
	if (!r->complete && r->local && r->applied == all_steps(p->racks)) {
		r->complete = true;
		out->complete = true;
	}
}

/* Add reduce step `step`'s partial sum (src) to this rack's part: partial + own, as IEEE. */
static void
apply_reduce(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
	     struct phub_ring_round *r, unsigned int step, const void *src)
{
	uint32_t off, count;

	seg_part(seg, p, elems, phub_ring_recv_part(p->racks, p->pos, step), &off, &count);
	phub_kernels_get()->add(seg->sum[r->iteration & 1] + off, src, PHUB_DTYPE_FP32, count);
	r->applied |= 1u << step;
}

int
phub_ring_local(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
		uint32_t iteration, const float *rack_sum, uint64_t now_ns, struct phub_ring_out *out)
{
	struct phub_ring_round *r;
	unsigned int step;
	uint32_t off, count;

	memset(out, 0, sizeof(*out));
	if (iteration != seg->next_iteration) {
		r = &seg->round[iteration & 1];
		return r->active && r->iteration == iteration && r->local ? -EALREADY : -EINVAL;
	}
	r = round_open(seg, p, elems, iteration);
	memcpy(seg->sum[iteration & 1], rack_sum, (size_t)elems * sizeof(float));
	r->local = true;
	seg->next_iteration = iteration + 1;
	/* Reduce parts that came before the rack sum waited in the inbox. */
	for (step = 0; step < p->racks - 1u; step++) {
		uint32_t bit = 1u << step;

		if ((r->received & bit) == 0 || (r->applied & bit) != 0)
			continue;
		seg_part(seg, p, elems, phub_ring_recv_part(p->racks, p->pos, step), &off, &count);
		apply_reduce(seg, p, elems, r, step, seg->inbox[iteration & 1] + off);
	}
	round_advance(seg, p, r, now_ns, out);
	return 0;
}

enum phub_ring_verdict
phub_ring_receive(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
		  bool reduce, uint32_t iteration, uint32_t step, uint32_t elem_offset,
		  uint32_t elem_count, const void *payload, uint64_t now_ns,
		  struct phub_ring_out *out)
{
	/* How far iteration is ahead of the rack sum this PBox expects next (serial numbers). */
	int32_t ahead = (int32_t)(iteration - seg->next_iteration);
	struct phub_ring_round *r;
	uint32_t off, count;
	unsigned int part;

	memset(out, 0, sizeof(*out));
	if (step >= phub_ring_steps(p->racks) || reduce != phub_ring_step_is_reduce(p->racks, step))
		return PHUB_RING_STEP;
	part = phub_ring_recv_part(p->racks, p->pos, step);
	seg_part(seg, p, elems, part, &off, &count);
	if (count == 0 || elem_offset != off || elem_count != count)
		return PHUB_RING_STEP;
	/*
	 * pos-1 can be at most at the iteration this PBox sums now (it needs this rack's previous
	 * sum to have finished its own previous round), and retransmits an iteration only until
	 * it reuses that round, three iterations on: older ones are nobody's.
	 */
	if (ahead > 0)
		return PHUB_RING_FUTURE;
	if (ahead < -3)
		return PHUB_RING_STALE;
	r = &seg->round[iteration & 1];
	if (ahead < -1 || (ahead == -1 && !(r->active && r->iteration == iteration)))
		return PHUB_RING_DUPLICATE;
	if (ahead == 0) {
		/* Gather parts need this rack's sum in them: none can come before it. */
		if (!reduce)
			return PHUB_RING_STEP;
		r = round_open(seg, p, elems, iteration);
	}
	if ((r->received & (1u << step)) != 0)
		return PHUB_RING_DUPLICATE;
	r->received |= 1u << step;
	if (!reduce) {
		memcpy(seg->sum[iteration & 1] + off, payload, (size_t)count * sizeof(float));
		r->applied |= 1u << step;
	} else if (r->local) {
		apply_reduce(seg, p, elems, r, step, payload);
	} else {
		memcpy(seg->inbox[iteration & 1] + off, payload, (size_t)count * sizeof(float));
	}
	round_advance(seg, p, r, now_ns, out);
	return PHUB_RING_TAKEN;
}

/* *to = *from, relaxed: the window's fields are skewed by a race at worst, never torn. */
static void
copy_u64(_Atomic uint64_t *to, _Atomic uint64_t *from)
{
	atomic_store_explicit(to, atomic_load_explicit(from, memory_order_relaxed),
			      memory_order_relaxed);
}

/* Before the probe's cut: what a spurious timeout gives back (F-RTO's undo, RFC 5682). */
static void
window_save(struct phub_ring_window *w)
{
	copy_u64(&w->undo_cwnd, &w->cwnd);
	copy_u64(&w->undo_ssthresh, &w->ssthresh);
	copy_u64(&w->undo_ceil, &w->ceil);
	copy_u64(&w->undo_hold_ns, &w->ceil_hold_ns);
	/* The cut about to come is the only one the undo may take back. */
	atomic_store_explicit(&w->undo_cuts,
			      atomic_load_explicit(&w->cuts, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* A spurious timeout: the window and its ceiling as they were, unless a loss cut them since. */
static void
window_undo(struct phub_ring_window *w)
{
	if (atomic_exchange_explicit(&w->undo_cuts, UINT64_MAX, memory_order_relaxed) !=
	    atomic_load_explicit(&w->cuts, memory_order_relaxed))
		return;
	copy_u64(&w->ceil, &w->undo_ceil);
	copy_u64(&w->ceil_hold_ns, &w->undo_hold_ns);
	copy_u64(&w->ssthresh, &w->undo_ssthresh);
	copy_u64(&w->cwnd, &w->undo_cwnd);
}

/*
 * An ACK on the link: the probe's back-off ends. In recovery (see phub_ring_window.probe_ns) a
 * resent step's ACK lets two more of the steps sent before the timeout go again; a step sent
 * once before the timeout and acknowledged now was queued, not lost: the timeout was spurious.
 */
static void
window_recovery_ack(struct phub_ring_window *w, uint32_t seq, bool resent)
{
	bool was = true, spurious;

	/* Stored only when set: every data lcore's ACKs pass here. */
	if (atomic_load_explicit(&w->probe_retries, memory_order_relaxed) != 0)
		atomic_store_explicit(&w->probe_retries, 0, memory_order_relaxed);
	if (atomic_load_explicit(&w->probe_ns, memory_order_relaxed) != 0)
		atomic_store_explicit(&w->probe_ns, 0, memory_order_relaxed);
	if (!atomic_load_explicit(&w->recovering, memory_order_relaxed))
		return;
	if (resent) {
		atomic_fetch_add_explicit(&w->credits, 2, memory_order_relaxed);
		return;
	}
	/*
	 * A first transmission newer than the timeout delivered ends recovery too: the link is
	 * FIFO, what is older and still unacknowledged is lost and found by the ACKs' order.
	 */
	spurious = (int32_t)(seq - atomic_load_explicit(&w->rto_seq, memory_order_relaxed)) <= 0;
	if (atomic_compare_exchange_strong_explicit(&w->recovering, &was, false,
						    memory_order_relaxed, memory_order_relaxed)) {
		atomic_store_explicit(&w->credits, 0, memory_order_relaxed);
		if (spurious) {
			atomic_fetch_add_explicit(&w->spurious, 1, memory_order_relaxed);
			window_undo(w);
		}
	}
}

/*
 * A round's timer fired: may it send the link's probe now? Only one round per backed-off RTO
 * does; *gate_ns gets when the next probe may go (the timed-out rounds' next deadline).
 */
static bool
window_probe(struct phub_ring_window *w, const struct phub_ring_params *p, uint64_t now_ns,
	     uint64_t *gate_ns)
{
	uint64_t gate = atomic_load_explicit(&w->probe_ns, memory_order_relaxed);
	uint32_t retries = atomic_load_explicit(&w->probe_retries, memory_order_relaxed) + 1;
	uint64_t rto = p->rto_ns << (retries < 16 ? retries : 16);

	if (rto > p->rto_max_ns || rto < p->rto_ns)
		rto = p->rto_max_ns;
	if (now_ns < gate ||
	    !atomic_compare_exchange_strong_explicit(&w->probe_ns, &gate, now_ns + rto,
						     memory_order_relaxed, memory_order_relaxed)) {
		*gate_ns = gate > now_ns ? gate : now_ns + p->rto_ns;
		return false;
	}
	*gate_ns = now_ns + rto;
	if (retries < 31)
		atomic_fetch_add_explicit(&w->probe_retries, 1, memory_order_relaxed);
	atomic_store_explicit(&w->rto_seq, atomic_load_explicit(&w->tx_seq, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&w->credits, 0, memory_order_relaxed);
	atomic_store_explicit(&w->recovering, true, memory_order_relaxed);
	return true;
}

bool
phub_ring_ack(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t iteration,
	      uint32_t step, uint64_t now_ns, uint64_t *rtt_ns)
{
	struct phub_ring_round *r = &seg->round[iteration & 1];
	uint32_t bit = 1u << step;

	if (rtt_ns != NULL)
		*rtt_ns = 0;
	if (step >= phub_ring_steps(p->racks) || !r->active || r->iteration != iteration)
		return false;
	if ((r->sent & bit) == 0 || (r->acked & bit) != 0)
		return false;
	if (rtt_ns != NULL && r->retries == 0 && r->resent == 0 && now_ns > r->timer_ns)
		*rtt_ns = now_ns - r->timer_ns;
	/* Karn's rule for the send order too: a resent step's ACK may answer the first copy. */
	if (p->win != NULL && (r->resent & bit) == 0)
		window_delivered(p->win, r->tx_seq[step], now_ns);
	if (p->win != NULL)
		window_recovery_ack(p->win, r->tx_seq[step], (r->resent & bit) != 0);
	r->resent &= ~bit;
	r->acked |= bit;
	r->retries = 0;
	r->rto_deadline_ns = now_ns + p->rto_ns;
	r->timer_ns = now_ns;
	if (p->win != NULL) {
		uint64_t bytes = step_bytes(seg, p, seg->elems, step);

		window_out(p->win, 1, bytes);
		window_grow(p->win, bytes, now_ns);
	}
	return true;
}

/*
 * The slack of loss detection by ACK order for a step of `bytes`: PHUB_RING_REORDER datagrams,
 * but at most half of what the window's ceiling holds of them. Whole-MTU datagrams fill a
 * 256 KiB window with 29: with a slack of 32, no lost one could ever be overtaken that far,
 * and each loss waited for the link to fall silent for an RTO.
 */
static int32_t
reorder_slack(const struct phub_ring_params *p, uint64_t bytes)
{
	uint64_t ceil = atomic_load_explicit(&p->win->ceil, memory_order_relaxed);
	uint64_t fit = bytes != 0 ? ceil / bytes / 2 : PHUB_RING_REORDER;

	if (fit < 3)
		fit = 3;
	return fit < PHUB_RING_REORDER ? (int32_t)fit : PHUB_RING_REORDER;
}

/* The unacknowledged steps of a round that sends later on the link overtook: lost. */
static uint32_t
round_overtaken(const struct phub_ring_seg *seg, const struct phub_ring_params *p,
		const struct phub_ring_round *r, uint32_t unacked)
{
	uint32_t acked_seq, lost = 0;
	unsigned int step, steps = phub_ring_steps(p->racks);

	if (p->win == NULL || unacked == 0)
		return 0;
	acked_seq = atomic_load_explicit(&p->win->acked_seq, memory_order_relaxed);
	for (step = 0; step < steps; step++)
		if ((unacked & (1u << step)) != 0 &&
		    (int32_t)(acked_seq - r->tx_seq[step]) >
			    reorder_slack(p, step_bytes(seg, p, seg->elems, step)))
			lost |= 1u << step;
	return lost;
}

/* Steps going again: each takes a new place in the link's send order. */
static void
round_resend(const struct phub_ring_params *p, struct phub_ring_round *r, uint32_t steps_mask)
{
	unsigned int step, steps = phub_ring_steps(p->racks);

	r->resent |= steps_mask;
	if (p->win == NULL)
		return;
	for (step = 0; step < steps; step++)
		if ((steps_mask & (1u << step)) != 0)
			r->tx_seq[step] = window_seq(p->win, 0);
}

/* Take one resend from the ACK clock's credits, if any. */
static bool
window_take_credit(struct phub_ring_window *w)
{
	int64_t cur = atomic_load_explicit(&w->credits, memory_order_relaxed);

	while (cur > 0)
		if (atomic_compare_exchange_weak_explicit(&w->credits, &cur, cur - 1,
							  memory_order_relaxed,
							  memory_order_relaxed))
			return true;
	return false;
}

/* The step of mask sent earliest on the link (mask not empty). */
static unsigned int
round_oldest(const struct phub_ring_params *p, const struct phub_ring_round *r, uint32_t mask)
{
	unsigned int step, best = PHUB_RING_MAX_STEPS, steps = phub_ring_steps(p->racks);

	for (step = 0; step < steps; step++)
		if ((mask & (1u << step)) != 0 &&
		    (best == PHUB_RING_MAX_STEPS ||
		     (int32_t)(r->tx_seq[step] - r->tx_seq[best]) < 0))
			best = step;
	return best;
}

/*
 * In recovery after a timeout: the round's steps sent before it and not acknowledged, oldest
 * first, as many as the ACK clock's credits allow.
 */
static uint32_t
round_recover(const struct phub_ring_params *p, const struct phub_ring_round *r, uint32_t unacked)
{
	uint32_t rto_seq, pending = 0, go = 0;
	unsigned int step, steps = phub_ring_steps(p->racks);

	if (!atomic_load_explicit(&p->win->recovering, memory_order_relaxed) || unacked == 0 ||
	    atomic_load_explicit(&p->win->credits, memory_order_relaxed) <= 0)
		return 0;
	rto_seq = atomic_load_explicit(&p->win->rto_seq, memory_order_relaxed);
	for (step = 0; step < steps; step++)
		if ((unacked & (1u << step)) != 0 && (int32_t)(r->tx_seq[step] - rto_seq) <= 0)
			pending |= 1u << step;
	while (pending != 0 && window_take_credit(p->win)) {
		step = round_oldest(p, r, pending);
		pending &= ~(1u << step);
		go |= 1u << step;
	}
	return go;
}

/*
 * A round's timer may fire: its deadline passed and, with a window, nothing came back from the
 * link for an RTO either (ACKs still coming in send order mean its steps are queued, not lost).
 */
static bool
round_timed_out(const struct phub_ring_params *p, const struct phub_ring_round *r,
		uint64_t now_ns)
{
	if (now_ns < r->rto_deadline_ns)
		return false;
	/* Another lcore's clock may be a little ahead: heard after now is heard now. */
	return p->win == NULL || p->heard_ns == 0 ||
	       (now_ns > p->heard_ns && now_ns - p->heard_ns >= p->rto_ns);
}

/* The rounds' sends due now: retransmissions (if resend) and held steps that fit the window. */
static unsigned int
seg_due(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint64_t now_ns,
	bool resend, struct phub_ring_out out[2])
{
	unsigned int i, n = 0;

	for (i = 0; i < 2; i++) {
		struct phub_ring_round *r = &seg->round[i];
		uint32_t unacked = r->sent & ~r->acked;
		struct phub_ring_out *o = &out[n];
		uint32_t lost;

		if (!r->active)
			continue;
		memset(o, 0, sizeof(*o));
		lost = resend ? round_overtaken(seg, p, r, unacked) : 0;
		if (resend && unacked != 0 && p->win != NULL && round_timed_out(p, r, now_ns)) {
			uint64_t gate;

			/* One step per link and RTO, the oldest of the round: see probe_ns. */
			if (window_probe(p->win, p, now_ns, &gate)) {
				uint32_t probe = 1u << round_oldest(p, r, unacked);

				o->send_steps = probe;
				o->resent_steps = probe;
				round_resend(p, r, probe);
				window_save(p->win);
				window_cut(p->win, now_ns, p->rto_ns);
				atomic_fetch_add_explicit(&p->win->timeouts, 1,
							  memory_order_relaxed);
			}
			r->rto_deadline_ns = gate;
		} else if (resend && unacked != 0 && round_timed_out(p, r, now_ns)) {
			uint64_t rto;

			if (r->retries < 30)
				r->retries++;
			rto = p->rto_ns << (r->retries < 16 ? r->retries : 16);
			if (rto > p->rto_max_ns || rto < p->rto_ns)
				rto = p->rto_max_ns;
			r->rto_deadline_ns = now_ns + rto;
			o->send_steps = unacked;
			o->resent_steps = unacked;
			round_resend(p, r, unacked);
		} else if (lost != 0) {
			/* No back-off: the link delivers, this one datagram did not arrive. */
			o->send_steps = lost;
			o->resent_steps = lost;
			round_resend(p, r, lost);
			r->rto_deadline_ns = now_ns + p->rto_ns;
			window_cut(p->win, now_ns, p->rto_ns);
			atomic_fetch_add_explicit(&p->win->fast_resends,
						  (uint64_t)__builtin_popcount(lost),
						  memory_order_relaxed);
		} else if (resend && p->win != NULL) {
			uint32_t go = round_recover(p, r, unacked);

			if (go != 0) {
				o->send_steps = go;
				o->resent_steps = go;
				round_resend(p, r, go);
				r->rto_deadline_ns = now_ns + p->rto_ns;
			}
		}
		if (r->held != 0)
			round_release(seg, p, r, now_ns, o);
		if (o->send_steps == 0)
			continue;
		o->iteration = r->iteration;
		o->sum = seg->sum[i];
		n++;
	}
	return n;
}

unsigned int
phub_ring_poll(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
	       uint64_t now_ns, struct phub_ring_out out[2])
{
	(void)elems;
	return seg_due(seg, p, now_ns, true, out);
}

unsigned int
phub_ring_release(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint64_t now_ns,
		  struct phub_ring_out out[2])
{
	return seg_due(seg, p, now_ns, false, out);
}

bool
phub_ring_idle(const struct phub_ring_seg *seg)
{
	unsigned int i;

	for (i = 0; i < 2; i++)
		if (seg->round[i].active && (seg->round[i].sent & ~seg->round[i].acked) != 0)
			return false;
	return true;
}
