/* SPDX-License-Identifier: BSD-3-Clause */
/* The job table, job creation and sessions: the control half of the engine. */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "engine_priv.h"

double engine_prof_ns_per_tick;
static pthread_once_t prof_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* Whether the kernel found the TSC constant-rate and running in every C-state (/proc/cpuinfo). */
static bool
tsc_invariant(void)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[4096];
	bool ok = false;

	if (f == NULL)
		return false;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		ok = strstr(line, " constant_tsc") != NULL && strstr(line, " nonstop_tsc") != NULL;
		break;
	}
	fclose(f);
	return ok;
}
#endif

/* The TSC's rate against CLOCK_MONOTONIC over 2 ms, where the CPU says its TSC is invariant. */
static void
prof_calibrate_once(void)
{
#if defined(__x86_64__)
	uint64_t t0, c0, t1, c1;

	if (!tsc_invariant())
		return;
	t0 = engine_now_ns();
	c0 = __builtin_ia32_rdtsc();
	do {
		t1 = engine_now_ns();
		c1 = __builtin_ia32_rdtsc();
	} while (t1 - t0 < 2000000);
	if (c1 > c0)
		engine_prof_ns_per_tick = (double)(t1 - t0) / (double)(c1 - c0);
#endif
}

void
engine_prof_calibrate(void)
{
	pthread_once(&prof_once, prof_calibrate_once);
}

struct phub_engine *
phub_engine_create_with(const struct phub_engine_params *params)
{
	struct phub_engine *engine = calloc(1, sizeof(*engine));

	engine_prof_calibrate();

	if (engine == NULL)
		return NULL;
	if (params != NULL)
		engine->params = *params;
	return engine;
}

struct phub_engine *
phub_engine_create(void)
{
	return phub_engine_create_with(NULL);
}

void
phub_engine_free(struct phub_engine *engine)
{
	if (engine == NULL)
		return;
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct phub_engine_job *job = atomic_load(&engine->jobs[i]);

		if (job != NULL)
			phub_engine_job_free(job);
	}
	free(engine);
}

static void *
default_alloc(size_t size, size_t align, void *ctx)
{
	(void)ctx;
	/* aligned_alloc wants a size that is a multiple of the alignment. */
	return aligned_alloc(align, (size + align - 1) / align * align);
}

static void
default_free(void *ptr, void *ctx)
{
	(void)ctx;
	free(ptr);
}

static const struct phub_engine_allocator default_allocator = {
	.alloc = default_alloc,
	.free = default_free,
};

/* size zeroed bytes at align from the job's allocator, counted in memory_bytes. */
static void *
job_alloc_aligned(struct phub_engine_job *job, size_t size, size_t align)
{
	void *p;

	if (size == 0)
		return NULL;
	p = job->allocator.alloc(size, align, job->allocator.ctx);
	if (p != NULL) {
		memset(p, 0, size);
		job->memory_bytes += size;
	}
	return p;
}

static void *
job_alloc(struct phub_engine_job *job, size_t size)
{
	return job_alloc_aligned(job, size, PHUB_ENGINE_ALIGN);
}

/*
 * A per-element buffer (model, aggregation, optimizer state, wire copy): page-aligned when the
 * allocator places pages on NUMA nodes, so that page p holds elements from p * page on.
 */
static void *
job_alloc_buffer(struct phub_engine_job *job, size_t size)
{
	return job_alloc_aligned(job, size,
			job->allocator.place != NULL ? PHUB_ENGINE_PAGE : PHUB_ENGINE_ALIGN);
}

static void
job_release(struct phub_engine_job *job, void *p)
{
	if (p != NULL)
		job->allocator.free(p, job->allocator.ctx);
}

/*
 * Whether the job keeps lent first arrivals as segment sums: fp32 (a 16-bit arrival is widened
 * into agg), default mode (a deterministic job stages out-of-order ranks and adds the rest in
 * one pass of sum), one rack (the ring's code sums into agg and ring buffers).
 */
static bool
job_keeps_lent(const struct phub_engine_job *job)
{
	return job->release != NULL && job->dtype == PHUB_DTYPE_FP32 && !job->deterministic &&
		job->ring.racks < 2;
}

/* What a job would cost, before allocating any of it. */
static uint64_t
job_memory_estimate(const struct phub_engine_job *job)
{
	struct phub_engine_memory_params p = {
		.n_elems = job->n_elems, .dtype = job->dtype, .optimizer = job->optimizer.type,
		.world_size = job->world_size, .deterministic = job->deterministic,
		.checkpoint_shadow = job->ckpt_shadow, .ring = job->ring.racks >= 2,
		.n_segments = job->n_segments,
	};
	struct phub_engine_memory m;
	uint64_t bytes;

	/* The large buffers as the planner and the refusal messages count them ... */
	phub_engine_memory_need(&p, &m);
	bytes = m.total - m.bookkeeping;
	/* ... and this job's own bookkeeping, exactly. */
	bytes += (uint64_t)job->n_segments * sizeof(struct segment_slot);
	bytes += (uint64_t)job->n_chunks * sizeof(struct engine_chunk);
	bytes += (uint64_t)job->n_cell_rows * job->cell_row_len * sizeof(struct rank_cell);
	bytes += engine_ring_bookkeeping(job);
	if (job_keeps_lent(job))
		bytes += (uint64_t)job->n_segments * sizeof(*job->held);
	return bytes;
}

static int
job_check_params(const struct phub_engine_job_params *p)
{
	if (p == NULL || p->name == NULL || p->name[0] == '\0' ||
	    strlen(p->name) >= PHUB_ENGINE_NAME_MAX)
		return -EINVAL;
	if (p->world_size == 0 || p->world_size > PHUB_ENGINE_MAX_WORKERS)
		return -EINVAL;
	if (phub_dtype_size(p->dtype) == 0)
		return -EINVAL;
	if (p->keys == NULL || p->n_keys == 0)
		return -EINVAL;
	if (phub_optimizer_params_check(&p->optimizer) != 0)
		return -EINVAL;
	if (p->ring != NULL && (p->ring->racks < 2 || p->ring->racks > PHUB_RING_MAX_RACKS ||
			p->ring->pos >= p->ring->racks || p->ring->total_world < p->world_size ||
			p->ring->rank_base > p->ring->total_world - p->world_size ||
			p->ring->holds_rank0 != (p->ring->rank_base == 0) ||
			p->ring->rto_ns == 0 || p->ring->rto_max_ns < p->ring->rto_ns))
		return -EINVAL;
	/* A ring job's ranks are summed by every rack in step: none may leave it alone. */
	if (p->elastic && p->ring != NULL)
		return -EINVAL;
	return 0;
}

/*
 * Each chunk's geometry and first segment, so that a (chunk, segment) finds its slot in O(1).
 * Needs n_cell_rows, set before.
 */
static int
job_index_chunks(struct phub_engine_job *job)
{
	uint32_t segments = 0;

	job->chunks = job_alloc(job, job->n_chunks * sizeof(*job->chunks));
	if (job->chunks == NULL)
		return -ENOMEM;
	for (uint32_t c = 0; c < job->n_chunks; c++) {
		struct phub_layout_chunk chunk;

		phub_layout_chunk_get(job->layout, c, &chunk);
		job->chunks[c].elem_base = chunk.elem_base;
		job->chunks[c].first_segment = segments;
		job->chunks[c].n_elems = chunk.n_elems;
		job->chunks[c].n_segments = chunk.n_segments;
		/* A chunk of an unplaced layout (no servers) writes row 0. */
		job->chunks[c].cell_row = chunk.server < job->n_cell_rows ? chunk.server : 0;
		segments += chunk.n_segments;
	}
	job->n_segments = segments;
	return 0;
}

static void
job_release_all(struct phub_engine_job *job)
{
	/* Segments in flight hand their kept buffers back: every one exactly once. */
	if (job->held != NULL) {
		for (uint32_t s = 0; s < job->n_segments; s++)
			if (job->held[s].acc != NULL)
				engine_held_release(job, &job->held[s]);
	}
	job_release(job, job->held);
	job_release(job, job->model);
	job_release(job, job->agg);
	job_release(job, job->state[0]);
	job_release(job, job->state[1]);
	job_release(job, job->model_wire);
	job_release(job, job->slots);
	job_release(job, job->chunks);
	engine_ckpt_release(job);
	engine_auth_release(job);
	engine_ring_release(job, job_release);
	job_release(job, job->staging);
	job_release(job, job->cells);
	phub_layout_free(job->layout);
	free(job);
}

static int
job_allocate_buffers(struct phub_engine_job *job, uint64_t limit)
{
	size_t floats = job->n_elems * sizeof(float);
	unsigned int states = phub_opt_state_count(job->optimizer.type);
	int rc;

	if (limit != 0 && job_memory_estimate(job) > limit)
		return -E2BIG;
	job->model = job_alloc_buffer(job, floats);
	job->agg = job_alloc_buffer(job, floats);
	job->slots = job_alloc(job, job->n_segments * sizeof(struct segment_slot));
	if (job->model == NULL || job->agg == NULL || job->slots == NULL)
		return -ENOMEM;
	for (unsigned int i = 0; i < states; i++) {
		job->state[i] = job_alloc_buffer(job, floats);
		if (job->state[i] == NULL)
			return -ENOMEM;
	}
	if (job->dtype != PHUB_DTYPE_FP32) {
		job->model_wire = job_alloc_buffer(job, job->n_elems *
				phub_dtype_size(job->dtype));
		if (job->model_wire == NULL)
			return -ENOMEM;
	}
	/* Rank 0 is always the next to add when it arrives: it is never staged. */
	if (job->deterministic && job->world_size > 1) {
		job->staging = job_alloc(job, job->n_elems * phub_dtype_size(job->dtype) *
				(job->world_size - 1u));
		if (job->staging == NULL)
			return -ENOMEM;
	}
	job->cells = job_alloc(job, (size_t)job->n_cell_rows * job->cell_row_len *
			sizeof(struct rank_cell));
	if (job->cells == NULL)
		return -ENOMEM;
	if (job_keeps_lent(job)) {
		job->held = job_alloc(job, job->n_segments * sizeof(*job->held));
		if (job->held == NULL)
			return -ENOMEM;
	}
	for (uint32_t s = 0; s < job->n_segments; s++)
		job->slots[s].next_iteration = job->first_iteration;
	/* Each chunk's part of the per-element buffers on the node of the lcore that owns it. */
	if (job->allocator.place != NULL) {
		job->allocator.place(job->model, floats, sizeof(float), job->layout,
				job->allocator.ctx);
		job->allocator.place(job->agg, floats, sizeof(float), job->layout,
				job->allocator.ctx);
		for (unsigned int i = 0; i < states; i++)
			job->allocator.place(job->state[i], floats, sizeof(float), job->layout,
					job->allocator.ctx);
		if (job->model_wire != NULL)
			job->allocator.place(job->model_wire, job->n_elems *
					phub_dtype_size(job->dtype), phub_dtype_size(job->dtype),
					job->layout, job->allocator.ctx);
	}
	rc = engine_ring_setup(job, job_alloc);
	if (rc != 0)
		return rc;
	return engine_ckpt_alloc(job);
}

static int
engine_claim_slot(struct phub_engine *engine, struct phub_engine_job *job)
{
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct phub_engine_job *expected = NULL;

		if (atomic_load(&engine->jobs[i]) != NULL)
			continue;
		/*
		 * The generation in the upper bits makes a stale job id (a worker
		 * of a job that ended) miss a new job in the same slot.
		 */
		engine->generation[i]++;
		job->id = ((uint32_t)engine->generation[i] << ENGINE_SLOT_BITS) | i;
		if (atomic_compare_exchange_strong(&engine->jobs[i], &expected, job))
			return 0;
	}
	return -ENOSPC;
}

struct phub_engine_job *
phub_engine_job_create(struct phub_engine *engine, const struct phub_engine_job_params *p)
{
	struct phub_layout_params lp;
	struct phub_engine_job *job;
	int rc;

	rc = job_check_params(p);
	if (rc == 0 && phub_engine_job_find(engine, p->name) != NULL)
		rc = -EEXIST;
	if (rc != 0) {
		errno = -rc;
		return NULL;
	}
	job = calloc(1, sizeof(*job));
	if (job == NULL)
		return NULL;
	job->allocator = p->allocator != NULL ? *p->allocator : default_allocator;
	snprintf(job->name, sizeof(job->name), "%s", p->name);
	job->nonce = p->nonce;
	job->world_size = p->world_size;
	job->dtype = p->dtype;
	job->optimizer = p->optimizer;
	job->first_iteration = p->first_iteration;
	job->ckpt_shadow = p->checkpoint_shadow;
	job->deterministic = p->deterministic;
	job->elastic = p->elastic;
	if (p->ring != NULL) {
		job->ring.racks = p->ring->racks;
		job->ring.pos = p->ring->pos;
		job->ring.rto_ns = p->ring->rto_ns;
		job->ring.rto_max_ns = p->ring->rto_max_ns;
		job->ring_window_max = p->ring->window_max_bytes;
		/*
		 * The ring carries fp32 sums: a whole segment fits a datagram when the workers'
		 * elements are fp32 too (a PUSH's size). A 16-bit job's segment is twice that in
		 * fp32; cut in R parts it still fits (a whole datagram at R = 2).
		 */
		job->ring_split = p->ring->split_segments || p->dtype != PHUB_DTYPE_FP32;
		job->ring_total_world = p->ring->total_world;
		job->ring_holds_rank0 = p->ring->holds_rank0;
		job->rank_base = p->ring->rank_base;
	}
	job->clock = engine->params.clock;
	job->clock_arg = engine->params.clock_arg;
	job->release = engine->params.release;
	job->release_arg = engine->params.release_arg;
	job->created_ns = engine_job_now_ns(job);
	/* One row of rank cells per server, each row whole cache lines. */
	job->n_cell_rows = p->n_servers > 0 ? p->n_servers : 1;
	job->cell_row_len = (uint32_t)((p->world_size * sizeof(struct rank_cell) +
			PHUB_ENGINE_ALIGN - 1) / PHUB_ENGINE_ALIGN * PHUB_ENGINE_ALIGN /
			sizeof(struct rank_cell));

	memset(&lp, 0, sizeof(lp));
	lp.keys = p->keys;
	lp.n_keys = p->n_keys;
	lp.elem_size = phub_dtype_size(p->dtype);
	lp.chunk_bytes = p->chunk_bytes;
	lp.segment_elems = p->segment_elems;
	lp.servers = p->servers;
	lp.n_servers = p->n_servers;
	job->layout = phub_layout_create(&lp);
	if (job->layout == NULL) {
		rc = -errno;
		free(job);
		errno = -rc;
		return NULL;
	}
	job->n_chunks = phub_layout_chunk_count(job->layout);
	job->n_elems = phub_layout_elem_count(job->layout);
	job->segment_elems = p->segment_elems;

	rc = job_index_chunks(job);
	if (rc == 0)
		rc = job_allocate_buffers(job, p->memory_limit_bytes);
	if (rc == 0)
		rc = engine_auth_create(job, p->auth_psk, p->auth_lanes);
	if (rc == 0)
		rc = engine_claim_slot(engine, job);
	if (rc != 0) {
		job_release_all(job);
		errno = -rc;
		return NULL;
	}
	return job;
}

void
phub_engine_job_unpublish(struct phub_engine *engine, struct phub_engine_job *job)
{
	struct phub_engine_job *expected = job;

	atomic_compare_exchange_strong(&engine->jobs[ENGINE_SLOT(job->id)], &expected, NULL);
}

void
phub_engine_job_free(struct phub_engine_job *job)
{
	if (job != NULL)
		job_release_all(job);
}

struct phub_engine_job *
phub_engine_job_lookup(const struct phub_engine *engine, uint32_t job_id)
{
	struct phub_engine_job *job;
	uint32_t index = ENGINE_SLOT(job_id);

	if (index >= PHUB_ENGINE_MAX_JOBS)
		return NULL;
	job = atomic_load_explicit(&engine->jobs[index], memory_order_acquire);
	if (job == NULL || job->id != job_id)
		return NULL;
	return job;
}

struct phub_engine_job *
phub_engine_job_find(const struct phub_engine *engine, const char *name)
{
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct phub_engine_job *job = atomic_load(&engine->jobs[i]);

		if (job != NULL && strcmp(job->name, name) == 0)
			return job;
	}
	return NULL;
}

uint64_t
phub_engine_monotonic_ns(void)
{
	return engine_now_ns();
}

struct phub_engine_job *
phub_engine_job_next(const struct phub_engine *engine, const struct phub_engine_job *prev)
{
	unsigned int start = prev == NULL ? 0 : ENGINE_SLOT(prev->id) + 1;

	for (unsigned int i = start; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct phub_engine_job *job = atomic_load(&engine->jobs[i]);

		if (job != NULL)
			return job;
	}
	return NULL;
}

static uint64_t
new_token(void)
{
	uint64_t token = 0;

	/* Zero means "not joined": draw again in the unlikely case. */
	while (token == 0) {
		if (getrandom(&token, sizeof(token), 0) != sizeof(token))
			token = 0;
	}
	return token;
}

static uint64_t
peer_key(uint32_t ipv4, uint16_t udp_port)
{
	return ((uint64_t)ipv4 << 16) | udp_port;
}

static uint64_t
mac_flags_pack(const struct phub_engine_peer *peer)
{
	uint64_t v = (uint64_t)peer->flags << 48;

	for (unsigned int i = 0; i < 6; i++)
		v |= (uint64_t)peer->mac[i] << (8 * i);
	return v;
}

/* The control thread, alone, writes a rank's endpoint (the seqlock of struct rank_session). */
static void
endpoint_publish(struct rank_session *s, uint64_t key, const struct phub_engine_peer *peer)
{
	uint32_t seq = atomic_load_explicit(&s->ep_seq, memory_order_relaxed);

	/*
	 * No standalone fence (ThreadSanitizer does not model one): each field is a release
	 * store, so a reader that sees a new field also sees the odd sequence before it.
	 */
	atomic_store_explicit(&s->ep_seq, seq + 1, memory_order_relaxed);
	atomic_store_explicit(&s->mac_flags, mac_flags_pack(peer), memory_order_release);
	atomic_store_explicit(&s->peer, key, memory_order_release);
	atomic_store_explicit(&s->ep_seq, seq + 2, memory_order_release);
}

/* Any thread: the endpoint as one record, never half of an old one and half of a new one. */
static void
endpoint_read(const struct rank_session *s, struct phub_engine_peer *peer)
{
	uint64_t key, mf;
	uint32_t seq;

	for (;;) {
		seq = atomic_load_explicit(&s->ep_seq, memory_order_acquire);
		if (seq & 1)
			continue;	/* the control thread is writing: a few stores */
		/* Acquire loads: the sequence read after them cannot be read before them. */
		key = atomic_load_explicit(&s->peer, memory_order_acquire);
		mf = atomic_load_explicit(&s->mac_flags, memory_order_acquire);
		if (atomic_load_explicit(&s->ep_seq, memory_order_relaxed) == seq)
			break;
	}
	peer->ipv4 = (uint32_t)(key >> 16);
	peer->udp_port = (uint16_t)key;
	/*
	 * The MAC in one copy where the word's bytes are already in order: six one-byte stores
	 * cannot be forwarded to the caller's wider loads of it right after (a stall that was
	 * a sixth of the PBox's send_model at 1 KB segments).
	 */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(peer->mac, &mf, sizeof(peer->mac));
#else
	for (unsigned int i = 0; i < 6; i++)
		peer->mac[i] = (uint8_t)(mf >> (8 * i));
#endif
	peer->flags = (uint8_t)(mf >> 48);
}

bool
phub_engine_job_nonce_matches(const struct phub_engine_job *job, uint64_t nonce)
{
	/* The whole word at once, not memcmp(): no early exit at the first byte that differs. */
	return job->nonce == nonce;
}

int
phub_engine_job_join(struct phub_engine_job *job, uint16_t rank, uint64_t nonce,
		const struct phub_engine_peer *peer, uint64_t *token)
{
	struct rank_session *s;
	uint64_t key;

	if (!phub_engine_job_nonce_matches(job, nonce))
		return -PHUB_WIRE_ERR_BAD_NONCE;
	if (rank >= job->world_size)
		return -PHUB_WIRE_ERR_RANK_RANGE;
	s = &job->ranks[rank];
	key = peer_key(peer->ipv4, peer->udp_port);
	if (atomic_load(&s->token) != 0 && atomic_load(&s->peer) == key) {
		atomic_store_explicit(&s->heard_ns, engine_job_now_ns(job), memory_order_relaxed);
		/* The same session: what it asks for may change (a worker restarted in place). */
		endpoint_publish(s, key, peer);
		*token = atomic_load(&s->token);
		return 0;
	}
	if (atomic_load(&s->token) == 0)
		atomic_fetch_add(&job->joined, 1);
	/*
	 * A restarted worker: revoke the old token before the address changes,
	 * so that no data thread sees the new address with the old token.
	 */
	atomic_store_explicit(&s->token, 0, memory_order_release);
	endpoint_publish(s, key, peer);
	atomic_store_explicit(&s->heard_ns, engine_job_now_ns(job), memory_order_relaxed);
	*token = new_token();
	atomic_store_explicit(&s->token, *token, memory_order_release);
	return 0;
}

int
phub_engine_job_leave(struct phub_engine_job *job, uint16_t rank, uint64_t token)
{
	struct rank_session *s;

	if (rank >= job->world_size)
		return -EINVAL;
	s = &job->ranks[rank];
	if (token == 0 || atomic_load(&s->token) != token)
		return -EPERM;
	atomic_store_explicit(&s->token, 0, memory_order_release);
	return (int)atomic_fetch_sub(&job->joined, 1) - 1;
}

uint32_t
phub_engine_job_id(const struct phub_engine_job *job)
{
	return job->id;
}

uint16_t
phub_engine_job_world_size(const struct phub_engine_job *job)
{
	return job->world_size;
}

uint32_t
phub_engine_job_rank_base(const struct phub_engine_job *job)
{
	return job->rank_base;
}

uint32_t
phub_engine_job_total_world(const struct phub_engine_job *job)
{
	return job->ring_segs != NULL ? job->ring_total_world : job->world_size;
}

bool
phub_engine_job_local_rank(const struct phub_engine_job *job, uint32_t global_rank,
		uint16_t *local)
{
	if (global_rank < job->rank_base || global_rank - job->rank_base >= job->world_size)
		return false;
	*local = (uint16_t)(global_rank - job->rank_base);
	return true;
}

enum phub_dtype
phub_engine_job_dtype(const struct phub_engine_job *job)
{
	return job->dtype;
}

const struct phub_layout *
phub_engine_job_layout(const struct phub_engine_job *job)
{
	return job->layout;
}

const float *
phub_engine_job_model(const struct phub_engine_job *job)
{
	return job->model;
}

bool
phub_engine_job_rank(const struct phub_engine_job *job, uint16_t rank,
		struct phub_engine_peer *peer, uint64_t *token)
{
	const struct rank_session *s;

	if (rank >= job->world_size)
		return false;
	s = &job->ranks[rank];
	/* A token read on both sides of the endpoint: the endpoint is that session's. */
	do {
		*token = atomic_load_explicit(&s->token, memory_order_acquire);
		if (*token == 0)
			return false;
		endpoint_read(s, peer);
	} while (atomic_load_explicit(&s->token, memory_order_acquire) != *token);
	return true;
}

uint32_t
phub_engine_job_slot(const struct phub_engine_job *job)
{
	return ENGINE_SLOT(job->id);
}

void
phub_engine_job_get_info(const struct phub_engine_job *job, struct phub_engine_job_info *info)
{
	uint32_t lo = UINT32_MAX, hi = 0;

	memset(info, 0, sizeof(*info));
	info->job_id = job->id;
	snprintf(info->name, sizeof(info->name), "%s", job->name);
	info->world_size = job->world_size;
	info->joined = atomic_load(&job->joined);
	info->dtype = job->dtype;
	info->n_keys = phub_layout_key_count(job->layout);
	info->n_chunks = job->n_chunks;
	info->n_segments = job->n_segments;
	info->n_elems = job->n_elems;
	info->memory_bytes = job->memory_bytes;
	/* A snapshot, not a consistent cut: data threads own the slots and move them on. */
	for (uint32_t s = 0; s < job->n_segments; s++) {
		uint32_t next = __atomic_load_n(&job->slots[s].next_iteration, __ATOMIC_RELAXED);

		lo = next < lo ? next : lo;
		hi = next > hi ? next : hi;
	}
	/* next_iteration is one past the finished one; a new job has finished none. */
	info->iteration_min = lo - 1;
	info->iteration_max = hi - 1;
	info->segments_completed = atomic_load(&job->segments_completed);
	info->deterministic = job->deterministic;
	info->elastic = job->elastic;
	info->live = phub_engine_job_live(job);
}

bool
phub_engine_job_deterministic(const struct phub_engine_job *job)
{
	return job->deterministic;
}

int
phub_engine_job_heard(struct phub_engine_job *job, uint16_t rank, uint64_t token,
		uint32_t src_ipv4, uint16_t src_udp_port)
{
	struct rank_session *s;

	if (rank >= job->world_size)
		return -EPERM;
	s = &job->ranks[rank];
	if (token == 0 || atomic_load_explicit(&s->token, memory_order_acquire) != token ||
	    atomic_load_explicit(&s->peer, memory_order_acquire) !=
	    peer_key(src_ipv4, src_udp_port))
		return -EPERM;
	atomic_store_explicit(&s->heard_ns, engine_job_now_ns(job), memory_order_relaxed);
	return 0;
}

int
phub_engine_job_rank_status(const struct phub_engine_job *job, uint16_t rank,
		struct phub_engine_rank_status *st)
{
	uint64_t heard, now;
	uint64_t token;

	if (rank >= job->world_size)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->joined = phub_engine_job_rank(job, rank, &st->peer, &token);
	heard = atomic_load_explicit(&job->ranks[rank].heard_ns, memory_order_relaxed);
	if (heard == 0)
		heard = job->created_ns;
	for (uint32_t row = 0; row < job->n_cell_rows; row++) {
		const struct rank_cell *c = &job->cells[(size_t)row * job->cell_row_len + rank];
		uint64_t t = atomic_load_explicit(&c->heard_ns, memory_order_relaxed);
		uint32_t it;

		heard = t > heard ? t : heard;
		if (!atomic_load_explicit(&c->pushed, memory_order_relaxed))
			continue;
		it = atomic_load_explicit(&c->newest_iteration, memory_order_relaxed);
		if (!st->pushed || phub_wire_iter_cmp(it, st->newest_iteration) > 0)
			st->newest_iteration = it;
		st->pushed = true;
	}
	/* Another thread's stamp may be a little newer than our clock reading. */
	now = engine_job_now_ns(job);
	st->silent_ns = now > heard ? now - heard : 0;
	return 0;
}

static inline unsigned int
popcount_bits(const uint64_t *bits)
{
	unsigned int n = 0;

	for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++)
		n += (unsigned int)__builtin_popcountll(bits[w]);
	return n;
}

int
phub_engine_job_waiting_on(const struct phub_engine_job *job, uint32_t *iteration,
		uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS])
{
	uint32_t oldest = 0;
	bool any = false;
	int n = 0;

	memset(waiting, 0, PHUB_ENGINE_BITMAP_WORDS * sizeof(uint64_t));
	for (uint32_t i = 0; i < job->n_segments; i++) {
		uint32_t next = __atomic_load_n(&job->slots[i].next_iteration, __ATOMIC_RELAXED);

		if (!any || phub_wire_iter_cmp(next, oldest) < 0)
			oldest = next;
		any = true;
	}
	*iteration = oldest;
	for (uint32_t i = 0; i < job->n_segments; i++) {
		const struct segment_slot *slot = &job->slots[i];
		uint64_t bits[PHUB_ENGINE_BITMAP_WORDS];
		uint32_t it1, it2;
		uint16_t seen;

		it1 = __atomic_load_n(&slot->next_iteration, __ATOMIC_ACQUIRE);
		if (it1 != oldest)
			continue;
		/*
		 * Acquire loads, not relaxed ones and an acquire fence: the same order (the second
		 * read of next_iteration cannot move above them), and ThreadSanitizer models loads
		 * but not fences.
		 */
		for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++)
			bits[w] = __atomic_load_n(&slot->seen_bits[w], __ATOMIC_ACQUIRE);
		seen = __atomic_load_n(&slot->seen, __ATOMIC_ACQUIRE);
		it2 = __atomic_load_n(&slot->next_iteration, __ATOMIC_RELAXED);
		/*
		 * Nobody pushed this segment yet (nobody waits), or it changed while
		 * we read it: the bits and the count disagree, or it moved on.
		 */
		if (seen == 0 || it1 != it2 || popcount_bits(bits) != seen)
			continue;
		for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++)
			waiting[w] |= ~bits[w];
	}
	/* A rank an elastic job removed (and has not readmitted) is waited on by nobody. */
	for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++)
		waiting[w] &= ~(atomic_load_explicit(&job->removed_bits[w], memory_order_acquire) &
				~atomic_load_explicit(&job->joining_bits[w],
				memory_order_acquire));
	/* Only the job's ranks: the bits past world_size were never set. */
	for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++) {
		unsigned int lo = w * 64;

		if (lo >= job->world_size)
			waiting[w] = 0;
		else if (job->world_size - lo < 64)
			waiting[w] &= (UINT64_C(1) << (job->world_size - lo)) - 1;
		n += __builtin_popcountll(waiting[w]);
	}
	return n;
}
