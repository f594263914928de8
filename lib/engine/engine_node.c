/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's data path: PUSH and PULL on one segment slot, run by the lcore that owns the chunk. */

#include <math.h>
#include <string.h>

#include "engine_priv.h"

/* The MODEL payload of an element in the wire dtype (fp16, bf16 jobs). */
static inline void *
wire_at(const struct phub_engine_job *job, uint64_t elem)
{
	return (uint8_t *)job->model_wire + elem * phub_dtype_size(job->dtype);
}

static inline void
drop(struct phub_engine_reply *reply, struct phub_engine_stats *stats, enum phub_drop_reason why)
{
	reply->actions = PHUB_ENGINE_DROP;
	reply->reason = why;
	stats->drops[why]++;
}

/*
 * Everything that must hold before a request may touch a buffer: the session
 * (token and source address), the chunk and the segment grid. On success the
 * segment's slot and its offset in the job's flat buffers are returned.
 */
static struct segment_slot *
request_check(struct phub_engine_job *job, const struct phub_engine_request *req,
		uint64_t *elem, struct rank_cell **cell, struct phub_engine_reply *reply,
		struct phub_engine_stats *stats)
{
	const struct rank_session *s;
	const struct engine_chunk *chunk;
	uint64_t token;
	uint32_t expect_elems;

	/* The rank must be one of the job's (request_local() made it local). */
	if (req->rank >= job->world_size) {
		drop(reply, stats, PHUB_DROP_RANK_RANGE);
		return NULL;
	}
	s = &job->ranks[req->rank];
	token = atomic_load_explicit(&s->token, memory_order_acquire);
	/* The rank must have joined and the token must be its current one. */
	if (token == 0) {
		drop(reply, stats, PHUB_DROP_NOT_JOINED);
		return NULL;
	}
	if (token != req->session_token) {
		drop(reply, stats, PHUB_DROP_BAD_TOKEN);
		return NULL;
	}
	/* A valid token is bound to the address that joined with it. */
	if (atomic_load_explicit(&s->peer, memory_order_acquire) !=
	    (((uint64_t)req->src_ipv4 << 16) | req->src_udp_port)) {
		drop(reply, stats, PHUB_DROP_WRONG_SOURCE);
		return NULL;
	}
	/* The chunk must exist in this job's layout. */
	if (req->chunk_id >= job->n_chunks) {
		drop(reply, stats, PHUB_DROP_CHUNK_RANGE);
		return NULL;
	}
	chunk = &job->chunks[req->chunk_id];
	/* The segment must be exactly one cell of the chunk's segment grid. */
	expect_elems = chunk->n_elems - req->seg_index * job->segment_elems;
	if (expect_elems > job->segment_elems)
		expect_elems = job->segment_elems;
	if (req->seg_count != chunk->n_segments || req->seg_index >= chunk->n_segments ||
	    req->elem_offset != (uint32_t)req->seg_index * job->segment_elems ||
	    req->elem_count != expect_elems) {
		drop(reply, stats, PHUB_DROP_OFFSET_RANGE);
		return NULL;
	}
	*elem = chunk->elem_base + req->elem_offset;
	/* The chunk's server names the row this thread alone writes. */
	*cell = &job->cells[(size_t)chunk->cell_row * job->cell_row_len + req->rank];
	return &job->slots[chunk->first_segment + req->seg_index];
}

/* A valid request of the rank came in at now: its liveness, for telemetry and timeouts. */
static inline void
cell_heard(struct rank_cell *cell, uint64_t now)
{
	atomic_store_explicit(&cell->heard_ns, now, memory_order_relaxed);
}

static inline void
cell_pushed(struct rank_cell *cell, uint32_t iteration)
{
	/* One writer per cell: a plain read-compare-store is enough. */
	if (!atomic_load_explicit(&cell->pushed, memory_order_relaxed)) {
		atomic_store_explicit(&cell->newest_iteration, iteration, memory_order_relaxed);
		atomic_store_explicit(&cell->pushed, 1, memory_order_relaxed);
	} else if (phub_wire_iter_cmp(iteration, atomic_load_explicit(&cell->newest_iteration,
			memory_order_relaxed)) > 0) {
		atomic_store_explicit(&cell->newest_iteration, iteration, memory_order_relaxed);
	}
}

/*
 * A slot has a model to give once an iteration has finished on it: a new job
 * starts at 0 (the initial-model round), a restored one past its checkpoint.
 */
static inline bool
slot_has_model(const struct segment_slot *slot)
{
	return slot->next_iteration != 0;
}

void
engine_reply_model(const struct phub_engine_job *job, uint64_t elem, uint32_t n, uint32_t iteration,
		unsigned int actions, struct phub_engine_reply *reply)
{
	size_t size = phub_dtype_size(job->dtype);

	reply->actions = actions;
	reply->reason = PHUB_DROP_OK;
	reply->iteration = iteration;
	reply->elem_count = n;
	reply->model_bytes = (size_t)n * size;
	if (job->model_wire != NULL)
		reply->model = wire_at(job, elem);
	else
		reply->model = job->model + elem;
}

/*
 * Iteration 0 of a new job is the initial-model round: every rank pushes its
 * initial weights (a barrier that all workers start from), rank 0's become the
 * model and the MODEL broadcast gives everyone the same start.
 */
static void
push_initial(struct phub_engine_job *job, const struct phub_engine_request *req, uint64_t elem,
		struct phub_engine_stats *stats)
{
	const struct phub_kernels *k = phub_kernels_get();

	if (req->rank != 0)
		return;
	k->first(job->model + elem, req->payload, job->dtype, req->elem_count);
	if (job->model_wire != NULL)
		k->to_wire(wire_at(job, elem), job->dtype, job->model + elem, req->elem_count);
	(void)stats;
}

/*
 * The step hyper-parameters of the iteration: the first PUSH sets them (from its HYPER
 * extension, or the JOIN's when it has none); every later rank must bring the same.
 */
static bool
hyper_agrees(struct segment_slot *slot, const struct phub_engine_request *req)
{
	if (slot->seen == 0) {
		slot->hyper = req->has_hyper;
		slot->hyper_lr = req->hyper_lr;
		slot->hyper_weight_decay = req->hyper_weight_decay;
		return true;
	}
	if (slot->hyper != req->has_hyper)
		return false;
	return !req->has_hyper || (slot->hyper_lr == req->hyper_lr &&
			slot->hyper_weight_decay == req->hyper_weight_decay);
}

/*
 * The fused last-arrival step: acc (NULL: none) + grad (NULL: none), the optimizer, the MODEL
 * payload. ranks is how many ranks' gradients the sum holds: the mean divides by it (the world
 * size, but in an elastic job that lost ranks).
 */
static void
push_last(struct phub_engine_job *job, const struct segment_slot *slot, const float *acc,
		const void *grad, uint32_t iteration, uint32_t n, uint64_t elem, uint32_t ranks,
		uint64_t t0, struct phub_engine_stats *stats)
{
	const struct phub_kernels *k = phub_kernels_get();
	struct phub_optimizer_params params = job->optimizer;
	struct phub_opt_step step;
	struct phub_opt_buffers buf = {
		.acc = acc,
		.grad = grad,
		.weight = job->model + elem,
		.m = job->state[0] != NULL ? job->state[0] + elem : NULL,
		.v = job->state[1] != NULL ? job->state[1] + elem : NULL,
		.out = job->model_wire != NULL ? wire_at(job, elem) : NULL,
		.grad_dtype = job->dtype,
		.out_dtype = job->dtype,
	};

	/* This iteration's lr and weight decay when its PUSHes carried them (HYPER). */
	if (slot->hyper) {
		params.lr = slot->hyper_lr;
		params.weight_decay = slot->hyper_weight_decay;
	}
	/* Iteration t is the t-th update: Adam's bias correction counts from 1. */
	/* The mean is over every rank of the job: in a ring job, over every rack's. */
	phub_opt_step_init(&step, &params, iteration,
			job->ring_segs != NULL ? job->ring_total_world : ranks);
	k->last(&buf, n, &params, &step);
	stats->opt_ns += engine_prof_since(t0);
}

/*
 * Default mode: the segment is added in arrival order. Where the job keeps lent buffers, a lent
 * first arrival becomes the sum itself (no copy into agg): later ones are added into it in
 * place, the last one's fused step reads it, and it goes back to the caller then.
 */
static void
push_gradient(struct phub_engine_job *job, const struct segment_slot *slot,
		const struct phub_engine_request *req, uint64_t elem, bool last, uint64_t t0,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats)
{
	const struct phub_kernels *k = phub_kernels_get();
	struct engine_held *h = job->held != NULL ? &job->held[slot - job->slots] : NULL;
	float *acc = h != NULL && h->acc != NULL ? h->acc : job->agg + elem;

	if (last) {
		push_last(job, slot, slot->seen == 0 ? NULL : acc, req->payload, req->iteration,
				req->elem_count, elem, slot->seen + 1u, t0, stats);
		if (h != NULL && h->acc != NULL)
			engine_held_release(job, h);
		return;
	}
	if (slot->seen != 0) {
		k->add(acc, req->payload, job->dtype, req->elem_count);
	} else if (h != NULL && req->lend != NULL) {
		/* The caller lent a writable buffer: the cast gives back what it lent. */
		h->acc = (float *)(uintptr_t)req->payload;
		h->cookie = req->lend;
		reply->kept = true;
		return;
	} else {
		k->first(acc, req->payload, job->dtype, req->elem_count);
	}
	stats->agg_ns += engine_prof_since(t0);
}

/* Where rank (>= 1) keeps its copy of the segment at elem until its turn. */
static inline uint8_t *
staged_at(const struct phub_engine_job *job, uint16_t rank, uint64_t elem)
{
	size_t size = phub_dtype_size(job->dtype);

	return job->staging + ((size_t)(rank - 1u) * job->n_elems + elem) * size;
}

static inline bool
slot_has_rank(const struct segment_slot *slot, uint16_t rank)
{
	return (slot->seen_bits[rank / 64] >> (rank % 64)) & 1;
}

/*
 * Add every rank in [next_add, upto) that the slot took (rank r's gradient is payload; the
 * others wait in the staging buffer) into the aggregation buffer, in rank order, in one pass of
 * the sum kernel; the cursor moves to upto.
 */
static void
ordered_add(struct phub_engine_job *job, struct segment_slot *slot, uint16_t upto, uint16_t r,
		const void *payload, uint64_t elem, uint32_t n_elems)
{
	const struct phub_kernels *k = phub_kernels_get();
	const void *srcs[PHUB_ENGINE_MAX_WORKERS];
	unsigned int n = 0;

	for (uint16_t i = slot->next_add; i < upto; i++) {
		if (i == r)
			srcs[n++] = payload;
		else if (slot_has_rank(slot, i))
			srcs[n++] = staged_at(job, i, elem);
	}
	if (n > 0) {
		k->sum(job->agg + elem, slot->acc_used, srcs, n, job->dtype, n_elems);
		slot->acc_used = true;
	}
	slot->next_add = upto;
}

/* The highest rank the slot took, rank r (UINT16_MAX: none) included. */
static uint16_t
slot_top_rank(const struct phub_engine_job *job, const struct segment_slot *slot, uint16_t r)
{
	uint16_t top = r != UINT16_MAX ? r : 0;

	for (uint16_t i = job->world_size; i-- > top;)
		if (i == r || slot_has_rank(slot, i))
			return i;
	return top;
}

/*
 * Deterministic mode: ranks are added in rank order, ((g0 + g1) + g2) + ...,
 * the last one by the fused step, as the reference computes them. An arrival
 * that is not the next to add waits in the staging buffer; the next one is
 * added at once together with every staged rank that follows it, in one pass
 * of the sum kernel, so that in-order arrivals are never copied. A rank an elastic job removed
 * and that the slot did not take is stepped over: it never comes.
 */
static void
push_ordered(struct phub_engine_job *job, struct segment_slot *slot,
		const struct phub_engine_request *req, uint64_t elem, bool last, uint64_t t0,
		struct phub_engine_stats *stats)
{
	uint16_t world = job->world_size;
	uint16_t r = req->rank;
	uint16_t to, top;

	while (job->elastic && slot->next_add < world && slot->next_add != r &&
	       !slot_has_rank(slot, slot->next_add) &&
	       !engine_rank_required(job, slot->next_add, req->iteration))
		slot->next_add++;
	if (r != slot->next_add && !last) {
		memcpy(staged_at(job, r, elem), req->payload, req->payload_len);
		stats->agg_ns += engine_prof_since(t0);
		return;
	}
	if (!last) {
		/* Every rank from the cursor on that is present, this one included. */
		to = slot->next_add;
		while (to < world && (to == r || slot_has_rank(slot, to)))
			to++;
		ordered_add(job, slot, to, r, req->payload, elem, req->elem_count);
		stats->agg_ns += engine_prof_since(t0);
		return;
	}
	/* The highest rank taken is the fused step's gradient; the ones below it are summed. */
	top = slot_top_rank(job, slot, r);
	if (slot->next_add < top)
		ordered_add(job, slot, top, r, req->payload, elem, req->elem_count);
	push_last(job, slot, slot->acc_used ? job->agg + elem : NULL,
			top == r ? req->payload : staged_at(job, top, elem), req->iteration,
			req->elem_count, elem, slot->seen + 1u, t0, stats);
}

/*
 * The slot's next iteration begins. Stored with atomics so that telemetry
 * reads whole words; the iteration goes last, with release, so that a reader
 * that sees it unchanged around its reads knows the rest is from one state.
 */
static void
slot_complete(struct phub_engine_job *job, struct segment_slot *slot,
		struct phub_engine_stats *stats)
{
	engine_ckpt_segment_done(job, slot);
	for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++)
		__atomic_store_n(&slot->seen_bits[w], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&slot->seen, 0, __ATOMIC_RELAXED);
	slot->next_add = 0;
	slot->acc_used = false;
	__atomic_store_n(&slot->next_iteration, slot->next_iteration + 1, __ATOMIC_RELEASE);
	stats->segments_completed++;
	atomic_fetch_add_explicit(&job->segments_completed, 1, memory_order_relaxed);
}

void
engine_segment_finish(struct phub_engine_job *job, uint32_t seg, uint64_t elem, const float *sum,
		uint32_t n, uint32_t iteration, struct phub_engine_stats *stats)
{
	const struct phub_kernels *k = phub_kernels_get();

	if (iteration == 0) {
		/* The initial-model round: the sum is rank 0's weights (docs/hierarchy.md). */
		k->first(job->model + elem, sum, PHUB_DTYPE_FP32, n);
		if (job->model_wire != NULL)
			k->to_wire(wire_at(job, elem), job->dtype, job->model + elem, n);
	} else {
		push_last(job, &job->slots[seg], sum, NULL, iteration, n, elem, job->world_size,
				engine_prof_start(stats), stats);
	}
	slot_complete(job, &job->slots[seg], stats);
}

bool
engine_slot_complete_elastic(struct phub_engine_job *job, uint32_t seg, uint64_t elem,
		uint32_t n, struct phub_engine_reply *reply, struct phub_engine_stats *stats)
{
	struct segment_slot *slot = &job->slots[seg];
	uint32_t iteration = slot->next_iteration;
	uint64_t t0;
	uint16_t top;

	/* Nobody pushed yet (the live ranks will), or a rank that is not removed is missing. */
	if (slot->seen == 0 || !engine_slot_covers(job, slot->seen_bits, UINT16_MAX, iteration))
		return false;
	/* The initial round's model is rank 0's weights: without them it cannot end. */
	if (iteration == 0 && !slot_has_rank(slot, 0))
		return false;
	t0 = engine_prof_start(stats);
	if (iteration != 0 && job->deterministic) {
		/*
		 * As push_ordered() would have done had the highest rank taken come last: the
		 * ranks below it summed in rank order, its own gradient in the fused step (or,
		 * when the cursor has already added it, the sum alone).
		 */
		top = slot_top_rank(job, slot, UINT16_MAX);
		if (slot->next_add <= top) {
			ordered_add(job, slot, top, UINT16_MAX, NULL, elem, n);
			push_last(job, slot, slot->acc_used ? job->agg + elem : NULL,
					top == 0 ? NULL : staged_at(job, top, elem), iteration, n,
					elem, slot->seen, t0, stats);
		} else {
			push_last(job, slot, job->agg + elem, NULL, iteration, n, elem, slot->seen,
					t0, stats);
		}
	} else if (iteration != 0) {
		struct engine_held *h = job->held != NULL ? &job->held[seg] : NULL;

		push_last(job, slot, h != NULL && h->acc != NULL ? h->acc : job->agg + elem, NULL,
				iteration, n, elem, slot->seen, t0, stats);
		if (h != NULL && h->acc != NULL)
			engine_held_release(job, h);
	}
	slot_complete(job, slot, stats);
	engine_reply_model(job, elem, n, iteration, PHUB_ENGINE_MODEL_ALL, reply);
	return true;
}

/*
 * A ring job's workers carry their global rank: the request with the rack's local index, or
 * NULL (RANK_RANGE) for a rank of another rack. One-rack jobs pass through untouched.
 */
static const struct phub_engine_request *
request_local(const struct phub_engine_job *job, const struct phub_engine_request *req,
		struct phub_engine_request *local, struct phub_engine_reply *reply,
		struct phub_engine_stats *stats)
{
	if (job->rank_base == 0)
		return req;
	if (req->rank < job->rank_base) {
		drop(reply, stats, PHUB_DROP_RANK_RANGE);
		return NULL;
	}
	*local = *req;
	local->rank = (uint16_t)(req->rank - job->rank_base);
	return local;
}

void
phub_engine_push(struct phub_engine_job *job, const struct phub_engine_request *wire_req,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats)
{
	struct phub_engine_request local;
	const struct phub_engine_request *req;
	struct segment_slot *slot;
	struct rank_cell *cell;
	uint64_t elem, now, t0;
	int32_t ahead;
	bool last, fused;

	reply->kept = false;
	req = request_local(job, wire_req, &local, reply, stats);
	if (req == NULL)
		return;
	slot = request_check(job, req, &elem, &cell, reply, stats);
	if (slot == NULL)
		return;
	/* The caller's clock read of this burst, else one of the engine's own. */
	now = req->now_ns != 0 ? req->now_ns : engine_job_now_ns(job);
	cell_heard(cell, now);
	/* The payload must be the job's dtype and exactly the segment. */
	if (req->dtype != job->dtype) {
		drop(reply, stats, PHUB_DROP_DTYPE_MISMATCH);
		return;
	}
	if (req->payload_len != (size_t)req->elem_count * phub_dtype_size(job->dtype)) {
		drop(reply, stats, PHUB_DROP_OFFSET_RANGE);
		return;
	}
	if (req->retransmit)
		stats->retransmits_seen++;

	/* Serial-number distance, so that the iteration counter may wrap. */
	ahead = (int32_t)(req->iteration - slot->next_iteration);
	if (ahead == -1 && slot_has_model(slot)) {
		/* Its MODEL was lost: the finished iteration's model answers it. */
		cell_pushed(cell, req->iteration);
		stats->models_resent++;
		engine_reply_model(job, elem, req->elem_count, req->iteration,
				PHUB_ENGINE_MODEL_ONE, reply);
		return;
	}
	if (ahead < 0) {
		drop(reply, stats, PHUB_DROP_STALE_ITERATION);
		return;
	}
	if (ahead > 0) {
		drop(reply, stats, PHUB_DROP_FUTURE_ITERATION);
		return;
	}
	/* A readmitted rank counts from its boundary on: before it, the others went without it. */
	if (job->elastic && !engine_rank_required(job, req->rank, req->iteration)) {
		drop(reply, stats, PHUB_DROP_STALE_ITERATION);
		return;
	}
	cell_pushed(cell, req->iteration);
	if (slot_has_rank(slot, req->rank)) {
		/* A retransmission whose ACK was lost: ACK again, add nothing. */
		stats->duplicates++;
		reply->actions = PHUB_ENGINE_ACK;
		reply->reason = PHUB_DROP_OK;
		return;
	}

	/* Step hyper-parameters: usable values, and the same as the iteration's first PUSH. */
	if (req->has_hyper && (!isfinite(req->hyper_lr) || req->hyper_lr < 0 ||
			!isfinite(req->hyper_weight_decay) || req->hyper_weight_decay < 0)) {
		drop(reply, stats, PHUB_DROP_BAD_HYPER);
		return;
	}
	if (req->iteration != 0 && !hyper_agrees(slot, req)) {
		drop(reply, stats, PHUB_DROP_HYPER_MISMATCH);
		return;
	}

	last = job->elastic ? engine_slot_covers(job, slot->seen_bits, req->rank,
			req->iteration) : slot->seen + 1 == job->world_size;
	/* A ring job's last arrival completes the rack sum only: the ring comes before the step. */
	fused = last && job->ring_segs == NULL;
	/* The profiling counters measure the CPU: their own clock whatever clock the job has. */
	t0 = engine_prof_start(stats);
	if (req->iteration == 0)
		push_initial(job, req, elem, stats);
	else if (job->deterministic)
		push_ordered(job, slot, req, elem, fused, t0, stats);
	else
		push_gradient(job, slot, req, elem, fused, t0, reply, stats);
	stats->pushes++;
	stats->push_bytes += req->payload_len;
	/* The bit before the count: a reader that sees them agree saw one state. */
	__atomic_store_n(&slot->seen_bits[req->rank / 64], slot->seen_bits[req->rank / 64] |
			UINT64_C(1) << (req->rank % 64), __ATOMIC_RELAXED);
	__atomic_store_n(&slot->seen, (uint16_t)(slot->seen + 1), __ATOMIC_RELAXED);

	if (!last) {
		reply->actions = PHUB_ENGINE_ACK;
		reply->reason = PHUB_DROP_OK;
		return;
	}
	if (job->ring_segs != NULL) {
		engine_ring_rack_done(job, (uint32_t)(slot - job->slots), elem, req, now, reply,
				stats);
		return;
	}
	slot_complete(job, slot, stats);
	engine_reply_model(job, elem, req->elem_count, req->iteration,
			PHUB_ENGINE_ACK | PHUB_ENGINE_MODEL_ALL, reply);
}

void
phub_engine_pull(struct phub_engine_job *job, const struct phub_engine_request *wire_req,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats)
{
	struct phub_engine_request local;
	const struct phub_engine_request *req;
	struct segment_slot *slot;
	struct rank_cell *cell;
	uint64_t elem;

	reply->kept = false;
	req = request_local(job, wire_req, &local, reply, stats);
	if (req == NULL)
		return;
	slot = request_check(job, req, &elem, &cell, reply, stats);
	if (slot == NULL)
		return;
	cell_heard(cell, req->now_ns != 0 ? req->now_ns : engine_job_now_ns(job));
	if (req->retransmit)
		stats->retransmits_seen++;
	/* Only a finished iteration has a model to give. */
	if ((int32_t)(req->iteration - slot->next_iteration) != -1 || !slot_has_model(slot)) {
		drop(reply, stats, (int32_t)(req->iteration - slot->next_iteration) >= 0 ?
				PHUB_DROP_FUTURE_ITERATION : PHUB_DROP_STALE_ITERATION);
		return;
	}
	stats->pulls++;
	engine_reply_model(job, elem, req->elem_count, req->iteration, PHUB_ENGINE_MODEL_ONE,
			reply);
}
