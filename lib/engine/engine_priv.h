/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's private structures: the job, its rank sessions and segment slots. */

#ifndef PHUB_ENGINE_PRIV_H
#define PHUB_ENGINE_PRIV_H

#include <stdalign.h>
#include <stdio.h>
#include <time.h>

#include "phub_engine.h"
#include "phub_ring.h"

#define PHUB_ENGINE_ALIGN 64
/* Alignment of buffers whose pages are placed on NUMA nodes (allocator.place). */
#define PHUB_ENGINE_PAGE 4096

/*
 * CLOCK_MONOTONIC in nanoseconds (vDSO, no system call): the default clock of the engine's
 * timestamps, and always the clock of its profiling counters (agg_ns, opt_ns), which measure the
 * CPU, not the protocol.
 */
static inline uint64_t
engine_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * The profiling counters' clock (agg_ns, opt_ns): the TSC where the CPU has an invariant one
 * (a register read, not a vDSO call: three clock_gettime per PUSH were 4 to 6 % of a PBox lcore
 * at 1 KB segments), converted to nanoseconds with a rate calibrated once per process against
 * CLOCK_MONOTONIC (engine_prof_calibrate, from phub_engine_create_with); CLOCK_MONOTONIC
 * elsewhere.
 */
extern double engine_prof_ns_per_tick;	/* 0: no usable TSC, ticks are nanoseconds */
void engine_prof_calibrate(void);

static inline uint64_t
engine_prof_ticks(void)
{
#if defined(__x86_64__)
	if (engine_prof_ns_per_tick != 0)
		return __builtin_ia32_rdtsc();
#endif
	return engine_now_ns();
}

/*
 * One kernel call in ENGINE_PROF_EVERY is timed and counts that many times: the two TSC reads
 * around every call were a third of phub_engine_push's samples at 1 KB segments (2 % of a PBox
 * lcore), for a counter that is a share of time, not a per-call figure. One in 8 still left a
 * quarter of phub_engine_push's samples on RDTSC (5 ns per PUSH at 1 KB).
 */
#define ENGINE_PROF_EVERY 64

/* The start of a kernel call: a value of engine_prof_ticks() when this call is timed, else 0. */
static inline uint64_t
engine_prof_start(struct phub_engine_stats *stats)
{
	return stats->prof_calls++ % ENGINE_PROF_EVERY == 0 ? engine_prof_ticks() : 0;
}

/* The nanoseconds to count for a call that started at t0 (engine_prof_start): 0 when untimed. */
static inline uint64_t
engine_prof_since(uint64_t t0)
{
	uint64_t d;

	if (t0 == 0)
		return 0;
	d = (engine_prof_ticks() - t0) * ENGINE_PROF_EVERY;
	return engine_prof_ns_per_tick != 0 ? (uint64_t)((double)d * engine_prof_ns_per_tick) : d;
}

/*
 * A chunk's geometry, from the layout once at job creation: a request's check reads it with
 * no division and no call into the layout.
 */
struct engine_chunk {
	uint64_t elem_base;		/* the chunk's first element in the job's flat buffers */
	uint32_t first_segment;		/* its first segment slot */
	uint32_t n_elems;
	uint32_t n_segments;
	uint32_t cell_row;		/* the row of job->cells its server's lcore writes */
};

/*
 * The state of one segment of one chunk. Only the lcore that owns the chunk
 * touches it; the alignment keeps two lcores' slots off one cache line where
 * chunks meet.
 */
struct segment_slot {
	alignas(PHUB_ENGINE_ALIGN) uint32_t next_iteration;	/* being aggregated */
	uint16_t seen;						/* ranks in so far */
	/*
	 * Deterministic jobs: the next rank to add. Ranks below it are summed
	 * into the aggregation buffer; present ranks at or above it wait in the
	 * staging buffer. Always 0 in the default mode.
	 */
	uint16_t next_add;
	/* Deterministic jobs: the aggregation buffer holds the ranks below next_add that came. */
	bool acc_used;
	uint64_t seen_bits[PHUB_ENGINE_BITMAP_WORDS];
	/*
	 * The step hyper-parameters of the iteration being aggregated, from its first PUSH:
	 * hyper false means the job's JOIN values. They fit the slot's cache line.
	 */
	bool hyper;
	float hyper_lr;
	float hyper_weight_decay;
};

/*
 * What one server's lcore last saw of one rank. A row of world_size cells
 * per server (a (port, queue) pair, owned by one lcore): one writer per cell,
 * relaxed atomics so that the telemetry and control threads read whole values.
 * Rows are cache-aligned so that two lcores never write one line.
 */
struct rank_cell {
	_Atomic uint64_t heard_ns;		/* newest valid PUSH or PULL; 0: none */
	_Atomic uint32_t newest_iteration;	/* newest iteration pushed (valid if pushed) */
	_Atomic uint32_t pushed;		/* 1 once the rank pushed through this server */
};

/* The slot of a job in the table: the low bits of its id (the generation is above them). */
#define ENGINE_SLOT_BITS 8
#define ENGINE_SLOT(job_id) ((job_id) & ((1u << ENGINE_SLOT_BITS) - 1))

/*
 * One rank's session: written by the control thread, read by data threads. The endpoint
 * (peer, and mac with the rank's flags above its 48 bits) is read whole or not at all: a
 * seqlock whose writer is the control thread alone (seq odd while it writes), so that a MODEL
 * built during a re-JOIN never leaves with one session's address and another's MAC.
 */
struct rank_session {
	_Atomic uint64_t token;		/* 0: not joined */
	_Atomic uint64_t peer;		/* ipv4 << 16 | udp port */
	_Atomic uint64_t heard_ns;	/* JOIN or keep-alive, written by the control thread */
	_Atomic uint32_t ep_seq;	/* endpoint seqlock */
	_Atomic uint64_t mac_flags;	/* MAC in the low 48 bits, PHUB_ENGINE_PEER_F_* << 48 */
};

/*
 * The checkpoint shadow (engine_ckpt.c). collect packs what the data threads must agree on
 * into one word, so that a thread counts its copy only if the collection it copied for is
 * still the armed one: target iteration << 32 | CKPT_ARMED | segments copied.
 */
#define CKPT_ARMED (UINT64_C(1) << 31)
#define CKPT_COUNT_MASK (CKPT_ARMED - 1)

struct engine_ckpt {
	_Atomic uint64_t collect;	/* armed by the control thread, counted by data threads */
	float *model;			/* NULL: no shadow */
	float *state[2];
};

struct engine_auth;
struct engine_ring_auth;

struct phub_engine_job {
	/* Read by the data path on every packet. */
	uint32_t id;
	struct engine_auth *auth;	/* NULL: not authenticated (engine_auth.c) */
	uint16_t world_size;
	enum phub_dtype dtype;
	uint32_t segment_elems;
	uint32_t n_chunks;
	uint32_t n_segments;
	uint64_t n_elems;
	struct engine_chunk *chunks;	/* n_chunks */
	struct segment_slot *slots;
	float *model;
	float *agg;
	float *state[2];
	void *model_wire;	/* model in the wire dtype; NULL for fp32 */
	/* Deterministic jobs: ranks 1 .. world_size - 1 times n_elems wire elements. */
	uint8_t *staging;
	struct rank_cell *cells;	/* n_cell_rows rows of cell_row_len cells */
	uint32_t cell_row_len;
	uint32_t n_cell_rows;
	bool deterministic;
	/*
	 * Elastic jobs (on_worker_dead "continue"): ranks the control thread removed. A removed
	 * rank's bit is set once, with release, after its token was revoked, and never cleared;
	 * data threads read it with acquire to know which ranks a segment still waits for.
	 */
	bool elastic;
	_Atomic uint64_t removed_bits[PHUB_ENGINE_BITMAP_WORDS];
	/*
	 * Removed ranks readmitted at an iteration boundary: required again from rejoin_from[r]
	 * on (stored before the bit, with release). A removed bit stays set while joining.
	 */
	_Atomic uint64_t joining_bits[PHUB_ENGINE_BITMAP_WORDS];
	_Atomic uint32_t rejoin_from[PHUB_ENGINE_MAX_WORKERS];
	/* Bumped (release) after each removal: data threads scan their segments once per change. */
	_Atomic uint32_t members_epoch;
	struct phub_optimizer_params optimizer;
	struct phub_layout *layout;
	phub_engine_clock_fn clock;	/* the engine's, copied; NULL: CLOCK_MONOTONIC */
	void *clock_arg;
	/*
	 * Jobs that keep lent first arrivals (phub_engine_params.release): per segment slot, the
	 * kept buffer that is the segment's sum (acc NULL: the sum is in agg, or nothing came).
	 * NULL for jobs that never keep.
	 */
	struct engine_held {
		float *acc;
		void *cookie;
	} *held;
	void (*release)(void *cookie, void *arg);
	void *release_arg;
	struct rank_session ranks[PHUB_ENGINE_MAX_WORKERS];

	/* Control only. */
	_Atomic uint16_t joined;
	_Atomic uint64_t segments_completed;
	uint64_t nonce;
	uint32_t first_iteration;
	/* Elastic jobs: the first iteration of each removed rank's absence (control thread). */
	uint32_t removed_from[PHUB_ENGINE_MAX_WORKERS];
	uint64_t created_ns;
	uint64_t memory_bytes;
	struct phub_engine_allocator allocator;
	char name[PHUB_ENGINE_NAME_MAX];
	bool ckpt_shadow;		/* allocate the shadow (job params) */
	struct engine_ckpt ckpt;

	/* Cross-rack ring (engine_ring_node.c); ring_segs is NULL in a one-rack job. */
	struct phub_ring_seg *ring_segs;	/* one per segment slot */
	_Atomic uint64_t *ring_active;		/* bit per segment: ring steps in flight */
	_Atomic uint64_t *ring_held;		/* bit per segment: ring steps held back */
	float *ring_bufs;			/* 4 x n_elems: two rounds of sum and inbox */
	struct phub_ring_params ring;
	uint32_t ring_total_world;
	uint32_t rank_base;		/* global rank of local index 0 (ring jobs) */
	bool ring_holds_rank0;
	struct engine_ring_link {
		_Atomic uint64_t token;
		_Atomic uint64_t peer;		/* ipv4 << 16 | udp port */
		_Atomic uint64_t heard_ns;	/* newest valid datagram from it */
		_Atomic uint32_t job_id;	/* the peer's id of the job */
		uint8_t mac[6];
		/*
		 * Round trip to this peer and back (RFC 6298's estimator, from RING_ACKs of
		 * next): 0 until the first sample. Every lcore that owns chunks of the job
		 * updates it; a lost update only delays the estimate.
		 */
		_Atomic uint64_t srtt_ns;
		_Atomic uint64_t rttvar_ns;
	} ring_prev, ring_next;
	struct phub_ring_window ring_win;	/* the send window of the link to next */
	/* An authenticated ring's link keys, made at the first HELLO (engine_ring_auth.c). */
	struct engine_ring_auth *_Atomic ring_auth;
	uint64_t ring_window_max;		/* 0: default; PHUB_ENGINE_RING_NO_WINDOW: none */
	bool ring_split;			/* segments cut in R parts (split_segments) */
};

struct phub_engine {
	struct phub_engine_job *_Atomic jobs[PHUB_ENGINE_MAX_JOBS];
	uint32_t generation[PHUB_ENGINE_MAX_JOBS];
	struct phub_engine_params params;	/* read-only after create */
};

/* The job's clock (its engine's): a timestamp to store or compare with stored ones. */
static inline uint64_t
engine_job_now_ns(const struct phub_engine_job *job)
{
	return job->clock != NULL ? job->clock(job->clock_arg) : engine_now_ns();
}

/* The chunk of a segment slot: the last chunk whose first segment is at or before it. */
static inline uint32_t
engine_seg_chunk(const struct phub_engine_job *job, uint32_t seg)
{
	uint32_t lo = 0, hi = job->n_chunks - 1;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;

		if (job->chunks[mid].first_segment <= seg)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Hand a kept buffer back (h->acc not NULL) and forget it: the segment's sum is done with. */
static inline void
engine_held_release(const struct phub_engine_job *job, struct engine_held *h)
{
	void *cookie = h->cookie;

	h->acc = NULL;
	h->cookie = NULL;
	job->release(cookie, job->release_arg);
}

/* engine_ring_node.c: the ring's memory and set-up at job creation. */
uint64_t engine_ring_bookkeeping(const struct phub_engine_job *job);
int engine_ring_setup(struct phub_engine_job *job, void *(*alloc)(struct phub_engine_job *, size_t));
void engine_ring_release(struct phub_engine_job *job, void (*release)(struct phub_engine_job *, void *));
/* engine_ring_auth.c: an authenticated ring's keys and windows, if any were made. */
void engine_ring_auth_release(struct phub_engine_job *job);
/*
 * engine_ring_node.c: a ring job's last local PUSH of a segment: the rack sum is in agg (or,
 * in the initial round, rank 0's weights in the model) and goes into the ring.
 */
void engine_ring_rack_done(struct phub_engine_job *job, uint32_t seg, uint64_t elem,
		const struct phub_engine_request *req, uint64_t now, struct phub_engine_reply *reply,
		struct phub_engine_stats *stats);
/* engine_node.c: the optimizer step of a complete segment sum, and the slot moving on. */
void engine_segment_finish(struct phub_engine_job *job, uint32_t seg, uint64_t elem,
		const float *sum, uint32_t n, uint32_t iteration, struct phub_engine_stats *stats);
void engine_reply_model(const struct phub_engine_job *job, uint64_t elem, uint32_t n,
		uint32_t iteration, unsigned int actions, struct phub_engine_reply *reply);

/*
 * Whether rank r counts in iteration it of an elastic job: not removed, or readmitted from an
 * iteration at or before it.
 */
static inline bool
engine_rank_required(const struct phub_engine_job *job, uint16_t r, uint32_t it)
{
	uint64_t bit = UINT64_C(1) << (r % 64);

	if (!(atomic_load_explicit(&job->removed_bits[r / 64], memory_order_acquire) & bit))
		return true;
	if (!(atomic_load_explicit(&job->joining_bits[r / 64], memory_order_acquire) & bit))
		return false;
	return phub_wire_iter_cmp(it, atomic_load_explicit(&job->rejoin_from[r],
			memory_order_relaxed)) >= 0;
}

/*
 * Whether the ranks taken by a slot (bits), with rank extra (UINT16_MAX: none), include every
 * rank of the job that counts in iteration it: the segment is complete.
 */
static inline bool
engine_slot_covers(const struct phub_engine_job *job, const uint64_t *bits, uint16_t extra,
		uint32_t it)
{
	for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++) {
		unsigned int lo = w * 64;
		uint64_t want, have = bits[w], joining;

		if (lo >= job->world_size)
			break;
		want = job->world_size - lo >= 64 ? UINT64_MAX :
			(UINT64_C(1) << (job->world_size - lo)) - 1;
		want &= ~atomic_load_explicit(&job->removed_bits[w], memory_order_acquire);
		joining = atomic_load_explicit(&job->joining_bits[w], memory_order_acquire);
		for (; joining != 0; joining &= joining - 1) {
			uint16_t r = (uint16_t)(lo + (unsigned int)__builtin_ctzll(joining));

			if (engine_rank_required(job, r, it))
				want |= UINT64_C(1) << (r % 64);
		}
		if (extra / 64u == w)
			have |= UINT64_C(1) << (extra % 64);
		if ((want & ~have) != 0)
			return false;
	}
	return true;
}

/* Removed and not readmitted: out of the job. */
static inline bool
engine_rank_removed(const struct phub_engine_job *job, uint16_t rank)
{
	uint64_t bit = UINT64_C(1) << (rank % 64);

	return (atomic_load_explicit(&job->removed_bits[rank / 64], memory_order_acquire) &
			~atomic_load_explicit(&job->joining_bits[rank / 64], memory_order_acquire) &
			bit) != 0;
}

/*
 * engine_node.c: complete a slot of an elastic job whose remaining ranks were removed (the
 * ranks it took are all it will get); false when it still waits for a rank or took none.
 */
bool engine_slot_complete_elastic(struct phub_engine_job *job, uint32_t seg, uint64_t elem,
		uint32_t n, struct phub_engine_reply *reply, struct phub_engine_stats *stats);

/* engine_ckpt.c: the shadow's memory, with the job's allocator. */
uint64_t engine_ckpt_memory(const struct phub_engine_job *job);
int engine_ckpt_alloc(struct phub_engine_job *job);
void engine_ckpt_release(struct phub_engine_job *job);
void engine_ckpt_copy(struct phub_engine_job *job, const struct segment_slot *slot,
		uint64_t collect);

/*
 * A segment completes slot->next_iteration (called by its lcore before the slot moves on):
 * if that is the iteration the shadow collects, copy the segment's new state into it.
 */
static inline void
engine_ckpt_segment_done(struct phub_engine_job *job, const struct segment_slot *slot)
{
	uint64_t collect;

	if (job->ckpt.model == NULL)
		return;
	collect = atomic_load_explicit(&job->ckpt.collect, memory_order_acquire);
	if ((collect & CKPT_ARMED) != 0 && (uint32_t)(collect >> 32) == slot->next_iteration)
		engine_ckpt_copy(job, slot, collect);
}

/* engine_auth.c: an authenticated job's keys and windows; nothing without a PSK. */
int engine_auth_create(struct phub_engine_job *job, const uint8_t *psk, unsigned int n_lanes);
/* The lanes an authenticated job was made for (0: not authenticated). */
unsigned int engine_auth_lanes(const struct phub_engine_job *job);
void engine_auth_release(struct phub_engine_job *job);
/*
 * Store a PHUB_AUTH_KEY_LEN-byte key into its words under a sequence lock the caller holds (gen
 * odd): each word's store is a release, so a reader that sees a new word also sees the odd gen.
 * A job's rank keys and a ring's link keys are written the same way.
 */
void engine_auth_key_store(_Atomic uint64_t *w, const uint8_t *key);

#endif /* PHUB_ENGINE_PRIV_H */
