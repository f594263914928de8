/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine's side of the cross-rack ring: a segment's rack sum into its ring, ring datagrams
 * from the neighbours, retransmission; run by the lcore that owns the chunk (docs/hierarchy.md).
 */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"

/* Words of the bitmap of segments with ring steps in flight or held (job->ring_active). */
static uint64_t
ring_active_words(const struct phub_engine_job *job)
{
	return ((uint64_t)job->n_segments + 63) / 64;
}

static void
bit_keep(_Atomic uint64_t *map, uint32_t seg, bool on)
{
	_Atomic uint64_t *word = &map[seg / 64];
	uint64_t bit = 1ull << (seg % 64);
	bool set = (atomic_load_explicit(word, memory_order_relaxed) & bit) != 0;

	if (on && !set)
		atomic_fetch_or_explicit(word, bit, memory_order_relaxed);
	else if (!on && set)
		atomic_fetch_and_explicit(word, ~bit, memory_order_relaxed);
}

/*
 * Keep the segment's bits in the job's bitmaps of ring work: ring_active while a round has
 * steps in flight (unacknowledged), ring_held while one holds steps back. The retransmission
 * scan visits the active bits only (a window's worth), the release of held steps the held
 * bits from its cursor, stopping at the first that still holds: a scan of every segment every
 * millisecond took a third of a PBox lcore's time on a 37.8 MB model (27 000 segments, perf),
 * and so did one of the segments holding steps back (20 000 of them behind a full window).
 * Bits of one word may belong to segments of several lcores: atomic.
 */
static void
ring_mark(struct phub_engine_job *job, uint32_t seg)
{
	const struct phub_ring_seg *s = &job->ring_segs[seg];

	bit_keep(job->ring_active, seg, !phub_ring_idle(s));
	bit_keep(job->ring_held, seg, phub_ring_holds(s));
}

/*
 * The ring's per-segment state and its bitmaps; its four model buffers are
 * phub_engine_memory_need()'s ring.
 */
uint64_t
engine_ring_bookkeeping(const struct phub_engine_job *job)
{
	if (job->ring.racks < 2)
		return 0;
	return (uint64_t)job->n_segments * sizeof(struct phub_ring_seg) +
	       2 * ring_active_words(job) * sizeof(uint64_t);
}

/* PHUB_RING_WINDOW=adaptive: the default ceiling adapts (read at each ring job's set-up). */
static bool
ring_window_adaptive(void)
{
	const char *v = getenv("PHUB_RING_WINDOW");

	return v != NULL && strcmp(v, "adaptive") == 0;
}

int
engine_ring_setup(struct phub_engine_job *job, void *(*alloc)(struct phub_engine_job *, size_t))
{
	uint64_t n = job->n_elems;

	if (job->ring.racks < 2)
		return 0;
	job->ring_bufs = alloc(job, 4 * n * sizeof(float));
	job->ring_segs = alloc(job, job->n_segments * sizeof(struct phub_ring_seg));
	job->ring_active = alloc(job, 2 * ring_active_words(job) * sizeof(uint64_t));
	if (job->ring_bufs == NULL || job->ring_segs == NULL || job->ring_active == NULL)
		return -ENOMEM;
	job->ring_held = job->ring_active + ring_active_words(job);
	for (uint64_t w = 0; w < 2 * ring_active_words(job); w++)
		atomic_init(&job->ring_active[w], 0);
	{
		uint64_t max = job->ring_window_max;

		if (max == 0 || max == PHUB_ENGINE_RING_NO_WINDOW)
			max = PHUB_RING_WINDOW_MAX;
		phub_ring_window_init(&job->ring_win, PHUB_RING_WINDOW_INIT,
				max < PHUB_RING_WINDOW_MIN ? max : PHUB_RING_WINDOW_MIN, max);
		/*
		 * The ceiling taken from the path (phub_ring_window.ceil), for jobs of the default
		 * ceiling, only where PHUB_RING_WINDOW=adaptive: on the loaded 2-core machine it
		 * showed no gain at 2 x 2 and more failed runs at 3 x 2 (docs/hierarchy.md), so
		 * the constant 256 KiB stays the default until a quiet machine says otherwise.
		 */
		if (job->ring_window_max == 0 && ring_window_adaptive())
			phub_ring_window_adapt(&job->ring_win, PHUB_RING_WINDOW_TOP);
	}
	for (uint32_t c = 0; c < job->n_chunks; c++) {
		struct phub_layout_chunk chunk;

		phub_layout_chunk_get(job->layout, c, &chunk);
		for (uint32_t s = 0; s < chunk.n_segments; s++) {
			uint64_t elem = chunk.elem_base + (uint64_t)s * job->segment_elems;
			float *b = job->ring_bufs + elem;

			uint32_t slot = job->chunks[c].first_segment + s;
			struct phub_ring_seg *rs = &job->ring_segs[slot];

			phub_ring_seg_init(rs, job->first_iteration, b, b + n, b + 2 * n,
					b + 3 * n);
			/* Whole segments: the roots take turns by chunk and index (the wire's). */
			if (!job->ring_split)
				rs->root = (uint8_t)((c + s) % job->ring.racks);
		}
	}
	return 0;
}

void
engine_ring_release(struct phub_engine_job *job, void (*release)(struct phub_engine_job *, void *))
{
	release(job, job->ring_bufs);
	release(job, job->ring_segs);
	release(job, job->ring_active);
	engine_ring_auth_release(job);
}

static inline uint64_t
peer_key(uint32_t ipv4, uint16_t port)
{
	return ((uint64_t)ipv4 << 16) | port;
}

static void
link_set(struct engine_ring_link *l, const struct phub_engine_ring_link *from)
{
	memcpy(l->mac, from->peer.mac, sizeof(l->mac));
	atomic_store_explicit(&l->job_id, from->job_id, memory_order_relaxed);
	atomic_store_explicit(&l->peer, peer_key(from->peer.ipv4, from->peer.udp_port),
			memory_order_release);
	atomic_store_explicit(&l->token, from->token, memory_order_release);
}

static void
link_get(const struct engine_ring_link *l, struct phub_engine_ring_link *to)
{
	uint64_t key = atomic_load_explicit(&l->peer, memory_order_acquire);

	memset(to, 0, sizeof(*to));
	to->peer.ipv4 = (uint32_t)(key >> 16);
	to->peer.udp_port = (uint16_t)key;
	memcpy(to->peer.mac, l->mac, sizeof(to->peer.mac));
	to->token = atomic_load_explicit(&l->token, memory_order_acquire);
	to->job_id = atomic_load_explicit(&l->job_id, memory_order_relaxed);
}

int
phub_engine_job_ring_peers(struct phub_engine_job *job, const struct phub_engine_ring_link *prev,
		const struct phub_engine_ring_link *next)
{
	if (job->ring_segs == NULL || prev == NULL || next == NULL || prev->token == 0 ||
	    next->token == 0)
		return -EINVAL;
	link_set(&job->ring_prev, prev);
	link_set(&job->ring_next, next);
	return 0;
}

/*
 * The ring's parameters with the retransmission timeout the link to next has shown it needs:
 * srtt + 4 rttvar, never below the configured floor nor above the ceiling. A fixed timeout
 * below the round trip (a loaded PBox, a queue on a rate-limited spine) resent most steps.
 */
static void
ring_params_now(const struct phub_engine_job *job, struct phub_ring_params *p)
{
	uint64_t srtt = atomic_load_explicit(&job->ring_next.srtt_ns, memory_order_relaxed);
	uint64_t rto = srtt + 4 * atomic_load_explicit(&job->ring_next.rttvar_ns,
			memory_order_relaxed);

	*p = job->ring;
	/* The window is the link's, shared by every lcore that owns chunks of the job. */
	p->win = job->ring_window_max == PHUB_ENGINE_RING_NO_WINDOW ? NULL :
		(struct phub_ring_window *)&job->ring_win;
	p->unlinked = atomic_load_explicit(&job->ring_next.token, memory_order_acquire) == 0;
	p->heard_ns = atomic_load_explicit(&job->ring_next.heard_ns, memory_order_relaxed);
	if (srtt != 0 && rto > p->rto_ns)
		p->rto_ns = rto < p->rto_max_ns ? rto : p->rto_max_ns;
}

/* One round-trip sample into the link's estimator (RFC 6298, gains 1/8 and 1/4). */
static void
ring_rtt_sample(struct engine_ring_link *l, uint64_t sample)
{
	uint64_t srtt = atomic_load_explicit(&l->srtt_ns, memory_order_relaxed);
	uint64_t var = atomic_load_explicit(&l->rttvar_ns, memory_order_relaxed);

	if (srtt == 0) {
		srtt = sample;
		var = sample / 2;
	} else {
		uint64_t err = srtt > sample ? srtt - sample : sample - srtt;

		var = var - var / 4 + err / 4;
		srtt = srtt - srtt / 8 + sample / 8;
	}
	atomic_store_explicit(&l->srtt_ns, srtt, memory_order_relaxed);
	atomic_store_explicit(&l->rttvar_ns, var, memory_order_relaxed);
}

void
phub_engine_job_ring_rtt(const struct phub_engine_job *job, uint64_t *srtt_ns,
		uint64_t *rttvar_ns, uint64_t *rto_ns)
{
	struct phub_ring_params p;

	ring_params_now(job, &p);
	*srtt_ns = atomic_load_explicit(&job->ring_next.srtt_ns, memory_order_relaxed);
	*rttvar_ns = atomic_load_explicit(&job->ring_next.rttvar_ns, memory_order_relaxed);
	*rto_ns = p.rto_ns;
}

bool
phub_engine_job_ring(const struct phub_engine_job *job, struct phub_engine_ring_params *p,
		struct phub_engine_ring_link *prev, struct phub_engine_ring_link *next)
{
	if (job->ring_segs == NULL)
		return false;
	if (p != NULL) {
		memset(p, 0, sizeof(*p));
		p->racks = job->ring.racks;
		p->pos = job->ring.pos;
		p->total_world = job->ring_total_world;
		p->holds_rank0 = job->ring_holds_rank0;
		p->rto_ns = job->ring.rto_ns;
		p->rto_max_ns = job->ring.rto_max_ns;
	}
	if (prev != NULL)
		link_get(&job->ring_prev, prev);
	if (next != NULL)
		link_get(&job->ring_next, next);
	return true;
}

void
phub_engine_job_ring_silence(const struct phub_engine_job *job, uint64_t now_ns, uint64_t *prev_ns,
		uint64_t *next_ns)
{
	uint64_t p = atomic_load_explicit(&job->ring_prev.heard_ns, memory_order_relaxed);
	uint64_t n = atomic_load_explicit(&job->ring_next.heard_ns, memory_order_relaxed);

	/* Never heard: silent since the job began. */
	if (p == 0)
		p = job->created_ns;
	if (n == 0)
		n = job->created_ns;
	*prev_ns = now_ns > p ? now_ns - p : 0;
	*next_ns = now_ns > n ? now_ns - n : 0;
}

/* What the data path sends for the ring out of one segment's event. */
static void
ring_send_of(const struct phub_engine_job *job, uint32_t seg, const struct phub_ring_out *out,
		struct phub_engine_ring_send *send)
{
	struct phub_layout_chunk chunk;
	uint32_t chunk_id = engine_seg_chunk(job, seg);
	uint32_t index = seg - job->chunks[chunk_id].first_segment;
	uint32_t n;

	phub_layout_chunk_get(job->layout, chunk_id, &chunk);
	n = chunk.n_elems - index * job->segment_elems;
	if (n > job->segment_elems)
		n = job->segment_elems;
	send->chunk_id = chunk_id;
	send->elem_offset = index * job->segment_elems;
	send->elem_count = n;
	send->iteration = out->iteration;
	send->steps = out->send_steps;
	send->sum = out->sum;
	send->root = job->ring_segs[seg].root;
}

/* The segment's sum over every rack is complete: the step, the slot moves on, MODEL to all. */
static void
ring_complete(struct phub_engine_job *job, uint32_t seg, uint64_t elem, uint32_t n,
		const struct phub_ring_out *out, struct phub_engine_reply *reply,
		struct phub_engine_stats *stats)
{
	unsigned int actions = reply->actions;

	engine_segment_finish(job, seg, elem, out->sum, n, out->iteration, stats);
	engine_reply_model(job, elem, n, out->iteration, actions | PHUB_ENGINE_MODEL_ALL, reply);
}

void
engine_ring_rack_done(struct phub_engine_job *job, uint32_t seg, uint64_t elem,
		const struct phub_engine_request *req, uint64_t now, struct phub_engine_reply *reply,
		struct phub_engine_stats *stats)
{
	struct phub_ring_params params;
	struct phub_ring_out out;
	const float *rack = job->agg + elem;
	uint32_t n = req->elem_count;

	if (req->iteration == 0) {
		/*
		 * The initial-model round: the job's rank 0 gives the weights, every other rack
		 * adds -0.0, the one value whose addition leaves every float as it is (-0 + -0 = -0,
		 * +0 + -0 = +0), so that the ring's sum is rank 0's weights bit for bit.
		 */
		if (job->ring_holds_rank0) {
			rack = job->model + elem;
		} else {
			for (uint32_t i = 0; i < n; i++)
				job->agg[elem + i] = -0.0f;
		}
	}
	reply->actions = PHUB_ENGINE_ACK;
	reply->reason = PHUB_DROP_OK;
	ring_params_now(job, &params);
	/* iteration is the slot's, which the ring expects next: the call cannot fail. */
	phub_ring_local(&job->ring_segs[seg], &params, n, req->iteration, rack, now, &out);
	ring_mark(job, seg);
	if (out.send_steps != 0) {
		reply->actions |= PHUB_ENGINE_RING_SEND;
		ring_send_of(job, seg, &out, &reply->ring);
	}
	if (out.complete)
		ring_complete(job, seg, elem, n, &out, reply, stats);
}

static inline void
drop(struct phub_engine_reply *reply, struct phub_engine_stats *stats, enum phub_drop_reason why)
{
	reply->actions = PHUB_ENGINE_DROP;
	reply->reason = why;
	stats->drops[why]++;
}

/* The datagram must come from the neighbour the opcode names: prev for data, next for ACKs. */
static bool
ring_peer_check(struct phub_engine_job *job, const struct phub_engine_ring_request *req,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats,
		struct engine_ring_link **link)
{
	unsigned int racks = job->ring.racks;
	bool ack = req->opcode == PHUB_WIRE_OP_RING_ACK || req->opcode == PHUB_WIRE_OP_RING_ACKV;
	struct engine_ring_link *l = ack ? &job->ring_next : &job->ring_prev;
	unsigned int from = ack ? (job->ring.pos + 1u) % racks : (job->ring.pos + racks - 1u) % racks;
	uint64_t token = atomic_load_explicit(&l->token, memory_order_acquire);

	if (token == 0) {
		drop(reply, stats, PHUB_DROP_NOT_JOINED);
		return false;
	}
	if (token != req->session_token) {
		drop(reply, stats, PHUB_DROP_BAD_TOKEN);
		return false;
	}
	if (atomic_load_explicit(&l->peer, memory_order_acquire) !=
	    peer_key(req->src_ipv4, req->src_udp_port)) {
		drop(reply, stats, PHUB_DROP_WRONG_SOURCE);
		return false;
	}
	if (req->rank != from) {
		drop(reply, stats, PHUB_DROP_RANK_RANGE);
		return false;
	}
	*link = l;
	return true;
}

void
phub_engine_ring_receive(struct phub_engine_job *job, const struct phub_engine_ring_request *req,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats)
{
	struct phub_layout_chunk chunk;
	struct engine_ring_link *link;
	struct phub_ring_params params;
	struct phub_ring_out out;
	uint32_t index, seg, seg_base, n;
	uint64_t elem, now;
	bool reduce;

	memset(reply, 0, sizeof(*reply));
	if (job->ring_segs == NULL) {
		drop(reply, stats, PHUB_DROP_UNEXPECTED_OPCODE);
		return;
	}
	if (!ring_peer_check(job, req, reply, stats, &link))
		return;
	if (req->chunk_id >= job->n_chunks) {
		drop(reply, stats, PHUB_DROP_CHUNK_RANGE);
		return;
	}
	phub_layout_chunk_get(job->layout, req->chunk_id, &chunk);
	/* The segment whose part this is, from the chunk's segment grid. */
	index = req->elem_offset / job->segment_elems;
	if (index >= chunk.n_segments) {
		drop(reply, stats, PHUB_DROP_OFFSET_RANGE);
		return;
	}
	seg_base = index * job->segment_elems;
	n = chunk.n_elems - seg_base;
	if (n > job->segment_elems)
		n = job->segment_elems;
	seg = job->chunks[req->chunk_id].first_segment + index;
	elem = chunk.elem_base + seg_base;
	now = req->now_ns;

	ring_params_now(job, &params);
	if (req->opcode == PHUB_WIRE_OP_RING_ACK) {
		uint64_t rtt;

		atomic_store_explicit(&link->heard_ns, now, memory_order_relaxed);
		reply->reason = PHUB_DROP_OK;
		if (phub_ring_ack(&job->ring_segs[seg], &params, req->iteration, req->step, now,
				&rtt)) {
			stats->ring_acks++;
			if (rtt != 0)
				ring_rtt_sample(link, rtt);
			ring_mark(job, seg);
		}
		return;
	}
	if (req->dtype != PHUB_DTYPE_FP32) {
		drop(reply, stats, PHUB_DROP_DTYPE_MISMATCH);
		return;
	}
	if (req->payload_len != (size_t)req->elem_count * sizeof(float)) {
		drop(reply, stats, PHUB_DROP_OFFSET_RANGE);
		return;
	}
	reduce = req->opcode == PHUB_WIRE_OP_RING_REDUCE;
	switch (phub_ring_receive(&job->ring_segs[seg], &params, n, reduce, req->iteration,
			req->step, req->elem_offset - seg_base, req->elem_count, req->payload, now,
			&out)) {
	case PHUB_RING_TAKEN:
		stats->ring_taken++;
		stats->ring_taken_bytes += req->payload_len;
		break;
	case PHUB_RING_DUPLICATE:
		stats->duplicates++;
		break;
	case PHUB_RING_STEP:
		drop(reply, stats, PHUB_DROP_RING_STEP);
		return;
	case PHUB_RING_FUTURE:
		drop(reply, stats, PHUB_DROP_FUTURE_ITERATION);
		return;
	case PHUB_RING_STALE:
	default:
		drop(reply, stats, PHUB_DROP_STALE_ITERATION);
		return;
	}
	atomic_store_explicit(&link->heard_ns, now, memory_order_relaxed);
	ring_mark(job, seg);
	reply->actions = PHUB_ENGINE_RING_ACK;
	reply->reason = PHUB_DROP_OK;
	if (out.send_steps != 0) {
		reply->actions |= PHUB_ENGINE_RING_SEND;
		ring_send_of(job, seg, &out, &reply->ring);
	}
	if (out.complete)
		ring_complete(job, seg, elem, n, &out, reply, stats);
}

/* The chunk a scan looked up last: a run of its segments asks once whether this lcore owns it. */
struct seg_owner {
	uint32_t chunk;		/* UINT32_MAX: none yet */
	uint32_t end;		/* the first segment after the chunk's */
	bool owned;
};

/* Whether the caller (owns(), NULL: everything) serves the chunk of segment seg. */
static bool
seg_owned(const struct phub_engine_job *job, uint32_t seg, struct seg_owner *o,
		bool (*owns)(void *arg, uint32_t server), void *arg)
{
	if (o->chunk == UINT32_MAX || seg < job->chunks[o->chunk].first_segment || seg >= o->end) {
		struct phub_layout_chunk chunk;

		o->chunk = engine_seg_chunk(job, seg);
		phub_layout_chunk_get(job->layout, o->chunk, &chunk);
		o->end = job->chunks[o->chunk].first_segment + chunk.n_segments;
		o->owned = owns == NULL || owns(arg, chunk.server);
	}
	return o->owned;
}

/* The first segment at or after seg (and before n) whose bit is set in the bitmap, or n. */
static uint32_t
ring_next_bit(_Atomic uint64_t *map, uint32_t seg, uint32_t n)
{
	while (seg < n) {
		uint64_t word = atomic_load_explicit(&map[seg / 64],
				memory_order_relaxed) >> (seg % 64);

		if (word != 0)
			return seg + (uint32_t)__builtin_ctzll(word) < n ?
				seg + (uint32_t)__builtin_ctzll(word) : n;
		seg = (seg / 64 + 1) * 64;
	}
	return n;
}

unsigned int
phub_engine_ring_poll_some(struct phub_engine_job *job, uint64_t now_ns,
		bool (*owns)(void *arg, uint32_t server),
		void (*send)(void *arg, const struct phub_engine_ring_send *what), void *arg,
		struct phub_engine_stats *stats, uint32_t *cursor, unsigned int budget)
{
	uint32_t n = job->n_segments, start, seg;
	struct seg_owner owner = { .chunk = UINT32_MAX };
	struct phub_ring_params params;
	unsigned int sent = 0, pass;

	if (job->ring_segs == NULL || n == 0)
		return 0;
	ring_params_now(job, &params);
	start = *cursor < n ? *cursor : 0;
	seg = start;
	/* Two passes: from the cursor to the end, then from the start to the cursor. */
	for (pass = 0; pass < 2 && sent < budget; pass++) {
		uint32_t stop = pass == 0 ? n : start;

		if (pass == 1)
			seg = 0;
		for (seg = ring_next_bit(job->ring_active, seg, stop); seg < stop && sent < budget;
		     seg = ring_next_bit(job->ring_active, seg + 1, stop)) {
			struct phub_ring_out due[2];
			unsigned int i, due_n;

			if (!seg_owned(job, seg, &owner, owns, arg))
				continue;
			due_n = phub_ring_poll(&job->ring_segs[seg], &params, 0, now_ns, due);
			ring_mark(job, seg);
			for (i = 0; i < due_n; i++) {
				struct phub_engine_ring_send what;

				ring_send_of(job, seg, &due[i], &what);
				stats->ring_retransmits +=
					(uint64_t)__builtin_popcount(due[i].resent_steps);
				send(arg, &what);
			}
			sent += due_n != 0;
		}
	}
	/* A scan cut short by its budget resumes after the last segment it served. */
	*cursor = sent >= budget && seg < n ? seg : start;
	/* Held steps the window has room for now, the first segments first. */
	if (sent < budget) {
		uint32_t from = 0;

		sent += phub_engine_ring_release(job, now_ns, owns, send, arg, &from,
				budget - sent);
	}
	return sent;
}

unsigned int
phub_engine_ring_release(struct phub_engine_job *job, uint64_t now_ns,
		bool (*owns)(void *arg, uint32_t server),
		void (*send)(void *arg, const struct phub_engine_ring_send *what), void *arg,
		uint32_t *cursor, unsigned int visits)
{
	uint32_t n = job->n_segments, start, seg = 0;
	struct seg_owner owner = { .chunk = UINT32_MAX };
	struct phub_ring_params params;
	unsigned int sent = 0, seen = 0, pass;
	bool full = false;

	if (job->ring_segs == NULL || n == 0)
		return 0;
	if (atomic_load_explicit(&job->ring_win.held, memory_order_relaxed) == 0)
		return 0;
	ring_params_now(job, &params);
	start = *cursor < n ? *cursor : 0;
	/* The segments holding steps (bitmap), from the cursor round; visits bounds the owned. */
	for (pass = 0; pass < 2 && !full && seen < visits; pass++) {
		uint32_t stop = pass == 0 ? n : start;

		for (seg = ring_next_bit(job->ring_held, pass == 0 ? start : 0, stop);
		     seg < stop && seen < visits; seg = ring_next_bit(job->ring_held, seg + 1, stop)) {
			struct phub_ring_seg *s = &job->ring_segs[seg];
			struct phub_ring_out due[2];
			unsigned int i, due_n;

			if (!seg_owned(job, seg, &owner, owns, arg) || !phub_ring_holds(s))
				continue;
			seen++;
			due_n = phub_ring_release(s, &params, now_ns, due);
			ring_mark(job, seg);
			for (i = 0; i < due_n; i++) {
				struct phub_engine_ring_send what;

				ring_send_of(job, seg, &due[i], &what);
				send(arg, &what);
			}
			sent += due_n;
			/* Still holding: the window is full; the next call starts here. */
			if (phub_ring_holds(s)) {
				full = true;
				break;
			}
		}
	}
	*cursor = full ? seg : start;
	return sent;
}

unsigned int
phub_engine_ring_ackv(struct phub_engine_job *job, const struct phub_engine_ring_request *req,
		bool (*owns)(void *arg, uint32_t server), void *arg,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats)
{
	struct seg_owner owner = { .chunk = UINT32_MAX };
	struct engine_ring_link *link;
	struct phub_ring_params params;
	unsigned int n, acked = 0;

	memset(reply, 0, sizeof(*reply));
	if (job->ring_segs == NULL) {
		drop(reply, stats, PHUB_DROP_UNEXPECTED_OPCODE);
		return 0;
	}
	if (!ring_peer_check(job, req, reply, stats, &link))
		return 0;
	if (phub_wire_ring_ackv_parse(req->payload, req->payload_len, &n) != PHUB_DROP_OK) {
		drop(reply, stats, PHUB_DROP_RING_ACKV_FIELDS);
		return 0;
	}
	atomic_store_explicit(&link->heard_ns, req->now_ns, memory_order_relaxed);
	reply->reason = PHUB_DROP_OK;
	ring_params_now(job, &params);
	/* Each entry as the RING_ACK it stands for (phub_engine_ring_receive()). */
	for (unsigned int i = 0; i < n; i++) {
		struct phub_layout_chunk chunk;
		struct phub_wire_ring_ack e;
		uint32_t seg;
		uint64_t rtt;

		phub_wire_ring_ackv_get(req->payload, i, &e);
		if (e.chunk_id >= job->n_chunks) {
			stats->drops[PHUB_DROP_CHUNK_RANGE]++;
			continue;
		}
		phub_layout_chunk_get(job->layout, e.chunk_id, &chunk);
		if (e.seg_index >= chunk.n_segments) {
			stats->drops[PHUB_DROP_OFFSET_RANGE]++;
			continue;
		}
		seg = job->chunks[e.chunk_id].first_segment + e.seg_index;
		/* Another lcore's chunk: that lcore takes the entry from its copy. */
		if (!seg_owned(job, seg, &owner, owns, arg))
			continue;
		if (phub_ring_ack(&job->ring_segs[seg], &params, e.iteration, e.step, req->now_ns,
				&rtt)) {
			stats->ring_acks++;
			acked++;
			if (rtt != 0)
				ring_rtt_sample(link, rtt);
			ring_mark(job, seg);
		}
	}
	return acked;
}

void
phub_engine_job_ring_window(const struct phub_engine_job *job,
		struct phub_engine_ring_window *w)
{
	memset(w, 0, sizeof(*w));
	if (job->ring_segs == NULL)
		return;
	w->cwnd_bytes = atomic_load_explicit(&job->ring_win.cwnd, memory_order_relaxed);
	w->ssthresh_bytes = atomic_load_explicit(&job->ring_win.ssthresh, memory_order_relaxed);
	w->inflight_bytes = phub_ring_window_inflight((struct phub_ring_window *)&job->ring_win,
			&w->inflight_steps);
	w->held_steps = atomic_load_explicit(&job->ring_win.held, memory_order_relaxed);
	w->held_total = atomic_load_explicit(&job->ring_win.held_total, memory_order_relaxed);
	w->cuts = atomic_load_explicit(&job->ring_win.cuts, memory_order_relaxed);
	w->fast_resends = atomic_load_explicit(&job->ring_win.fast_resends, memory_order_relaxed);
	w->timeouts = atomic_load_explicit(&job->ring_win.timeouts, memory_order_relaxed);
	/* The ceiling now: the path's, when it adapts. */
	w->max_bytes = atomic_load_explicit(&job->ring_win.ceil, memory_order_relaxed);
	w->min_bytes = job->ring_win.min_bytes;
}

unsigned int
phub_engine_ring_poll(struct phub_engine_job *job, uint64_t now_ns,
		bool (*owns)(void *arg, uint32_t server),
		void (*send)(void *arg, const struct phub_engine_ring_send *what), void *arg,
		struct phub_engine_stats *stats)
{
	uint32_t cursor = 0;

	return phub_engine_ring_poll_some(job, now_ns, owns, send, arg, stats, &cursor, UINT_MAX);
}
