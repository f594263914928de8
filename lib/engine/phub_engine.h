/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The PBox protocol state machine: jobs, ranks and their sessions, and the
 * per-segment aggregation slots, as plain C over plain buffers (no DPDK type).
 *
 * Threading model (the same as the appliance's):
 * - The control thread (the main lcore) creates, publishes, joins, leaves,
 *   unpublishes and frees jobs.
 * - Data threads (one per lcore) call phub_engine_push() and
 *   phub_engine_pull() only for the chunks placed on them, so that no two
 *   threads ever touch the same segment slot: no locks.
 * - Rank sessions (token, source address) are written by the control thread
 *   and read by data threads with acquire/release atomics; a job is freed only
 *   after every data thread has passed a quiescent point (the caller's job).
 */

#ifndef PHUB_ENGINE_H
#define PHUB_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/phub_kernels.h"
#include "layout/phub_layout.h"
#include "wire/phub_wire.h"

/* Limits that size fixed arrays; the config's limits are checked against them. */
enum {
	PHUB_ENGINE_MAX_WORKERS = 256,	/* bits in a segment's rank bitmap */
	PHUB_ENGINE_MAX_JOBS = 64,	/* slots in the job table */
	PHUB_ENGINE_NAME_MAX = 64,	/* job name including its NUL */
};

#define PHUB_ENGINE_BITMAP_WORDS (PHUB_ENGINE_MAX_WORKERS / 64)

/* What a rank asked for in its JOIN, kept with its endpoint for the data path. */
#define PHUB_ENGINE_PEER_F_CSUM 0x01	/* set CSUM (CRC32C) on what the PBox sends it */
#define PHUB_ENGINE_PEER_F_ACKV 0x02	/* its ACKs coalesced in ACKV (lib/engine/phub_ackv.h) */

/* A worker's network identity: where its packets come from and MODEL goes. */
struct phub_engine_peer {
	uint32_t ipv4;		/* host byte order */
	uint16_t udp_port;	/* host byte order */
	uint8_t mac[6];		/* learnt from the JOIN, for the reply path */
	uint8_t flags;		/* PHUB_ENGINE_PEER_F_* */
};

/* Optional allocator so that the appliance puts job memory on a NUMA node. */
struct phub_engine_allocator {
	void *(*alloc)(size_t size, size_t align, void *ctx);
	void (*free)(void *ptr, void *ctx);
	/*
	 * Optional: move the pages of a per-element buffer (elem_bytes per element of the job,
	 * in the layout's element order) to the nodes of the chunks they hold
	 * (phub_layout_pages_by_node()). Called once per such buffer after it was allocated.
	 */
	void (*place)(void *ptr, size_t size, size_t elem_bytes, const struct phub_layout *layout,
			void *ctx);
	void *ctx;
};

struct phub_engine_job_params {
	const char *name;
	uint64_t nonce;
	uint16_t world_size;
	enum phub_dtype dtype;
	struct phub_optimizer_params optimizer;
	const struct phub_layout_key *keys;
	uint32_t n_keys;
	uint32_t chunk_bytes;
	uint32_t segment_elems;
	/* Where chunks may be placed; NULL/0 puts every chunk on server 0. */
	const struct phub_layout_server *servers;
	uint32_t n_servers;
	/* Iteration to resume at (0 for a new job: the initial-model round). */
	uint32_t first_iteration;
	uint64_t memory_limit_bytes;	/* 0: no limit */
	const struct phub_engine_allocator *allocator;	/* NULL: aligned_alloc */
	/*
	 * Allocate the checkpoint shadow (a copy of model and optimizer state that the data
	 * threads fill at a chosen iteration, engine_ckpt.c); counted in the memory limit.
	 */
	bool checkpoint_shadow;
	/*
	 * Sum each segment in rank order whatever order the ranks arrive in, so
	 * that the model is bit-identical to a loss-free run's. Costs a staging
	 * buffer of (world_size - 1) x the model in the wire dtype.
	 */
	bool deterministic;
	/*
	 * on_worker_dead "continue": the control thread may remove a rank that died
	 * (phub_engine_job_rank_remove()) and the job goes on with the others. Not with a ring.
	 */
	bool elastic;
	/*
	 * Cross-rack ring (docs/hierarchy.md): racks >= 2 makes the job one rack's part of a job
	 * that spans ring.racks PBoxes; world_size stays this rack's ranks. NULL: one rack.
	 */
	const struct phub_engine_ring_params *ring;
	/*
	 * Authenticated job (jobs[].auth, phub_engine_auth.h): the PSK from its name and nonce,
	 * and the lanes (the control thread and each data thread) that send and receive its
	 * datagrams. NULL: datagrams are not authenticated.
	 */
	const uint8_t *auth_psk;
	unsigned int auth_lanes;
};

/* A job's place in the ring of PBoxes; its peers and tokens come later (job_ring_peers). */
struct phub_engine_ring_params {
	uint16_t racks;			/* R, 2 .. PHUB_RING_MAX_RACKS */
	uint16_t pos;			/* this PBox's position, 0 .. R-1 */
	uint32_t total_world;		/* ranks over every rack: the mean divides by it */
	/*
	 * The job's global rank of this rack's first rank: workers name themselves by global
	 * rank on the wire (PUSH, PULL, JOIN), the engine by local index 0 .. world_size - 1.
	 */
	uint32_t rank_base;
	bool holds_rank0;		/* this rack's rank 0 is the job's: its weights start it */
	uint64_t rto_ns;		/* first retransmission timeout of a ring segment */
	uint64_t rto_max_ns;		/* ceiling of its back-off */
	/*
	 * Ceiling of the send window of the link to next (bytes of ring payload in flight):
	 * 0 gives PHUB_RING_WINDOW_MAX; PHUB_ENGINE_RING_NO_WINDOW sends every step at once.
	 */
	uint64_t window_max_bytes;
	/*
	 * Cut each segment into R parts, one ring datagram each (the format of PBoxes without
	 * PHUB_WIRE_RING_CAP_WHOLE); false, the default: in a job of fp32 elements each ring
	 * datagram carries a whole segment, the segments' roots taking turns
	 * (phub_ring_seg_part()). A 16-bit job's segments are always cut: the ring's fp32 sum
	 * of one is twice its PUSH.
	 */
	bool split_segments;
};

#define PHUB_ENGINE_RING_NO_WINDOW UINT64_MAX

/* Counters of one data thread; only that thread writes them. */
struct phub_engine_stats {
	uint64_t pushes;		/* PUSH datagrams accepted and added */
	uint64_t push_bytes;		/* their payload bytes */
	uint64_t duplicates;		/* PUSH already counted this iteration: ACKed again */
	uint64_t retransmits_seen;	/* PUSH or PULL carrying the RETRANSMIT flag */
	uint64_t segments_completed;	/* last arrivals: optimizer ran, MODEL broadcast */
	uint64_t models_resent;		/* MODEL sent again for a finished iteration */
	uint64_t pulls;			/* PULL answered */
	uint64_t agg_ns;		/* time in aggregation kernels (one call in 64 timed) */
	uint64_t opt_ns;		/* time in fused last-arrival kernels (the same) */
	uint64_t prof_calls;		/* kernel calls, timed or not: which one is timed */
	uint64_t ring_taken;		/* RING_REDUCE/RING_GATHER taken in */
	uint64_t ring_taken_bytes;	/* their payload bytes */
	uint64_t ring_acks;		/* RING_ACKs that acknowledged a step */
	uint64_t ring_retransmits;	/* ring steps sent again on timeout */
	uint64_t drops[PHUB_DROP_REASON_MAX];
};

/* What the data path must send after a PUSH or PULL. */
enum phub_engine_action {
	PHUB_ENGINE_DROP = 0,		/* nothing to send; reason says why */
	PHUB_ENGINE_ACK = 1 << 0,	/* ACK to the sender */
	PHUB_ENGINE_MODEL_ONE = 1 << 1,	/* MODEL of the finished iteration to the sender */
	PHUB_ENGINE_MODEL_ALL = 1 << 2,	/* MODEL to every joined rank of the job */
	PHUB_ENGINE_RING_SEND = 1 << 3,	/* ring steps to the next PBox: reply.ring */
	PHUB_ENGINE_RING_ACK = 1 << 4,	/* RING_ACK of the ring datagram to the previous PBox */
};

/*
 * Ring steps of one segment to send to the next PBox. For each bit k of steps: opcode
 * RING_REDUCE if phub_ring_step_is_reduce(racks, k), else RING_GATHER; part
 * phub_ring_send_part(racks, pos, k) of the segment, cut by phub_ring_seg_part(racks,
 * elem_count, root, ...): elem_offset + the part's offset within the chunk, aux k, fp32
 * payload from sum.
 */
struct phub_engine_ring_send {
	uint32_t chunk_id;
	uint32_t elem_offset;		/* the segment's first element within the chunk */
	uint32_t elem_count;		/* the segment's elements */
	uint32_t iteration;
	uint32_t steps;
	const float *sum;		/* the segment's ring buffer (elem_count floats) */
	unsigned int root;		/* the segment's, phub_ring_seg_part() */
};

struct phub_engine_reply {
	unsigned int actions;		/* enum phub_engine_action bits */
	enum phub_drop_reason reason;	/* set when actions == PHUB_ENGINE_DROP */
	uint32_t iteration;		/* the iteration the MODEL belongs to */
	uint32_t elem_count;		/* elements of the segment */
	const void *model;		/* MODEL payload in the job's wire dtype */
	size_t model_bytes;
	/*
	 * PUSH: the engine kept the payload the caller lent (request.lend) as the segment's sum;
	 * the caller must neither free nor reuse it until the engine hands it back (release).
	 */
	bool kept;
	struct phub_engine_ring_send ring;	/* PHUB_ENGINE_RING_SEND */
};

/* A PUSH or PULL as the data path parsed it (host byte order). */
struct phub_engine_request {
	uint64_t session_token;
	uint32_t chunk_id;
	uint32_t iteration;
	uint32_t elem_offset;
	uint32_t elem_count;
	uint16_t rank;
	uint16_t seg_index;
	uint16_t seg_count;
	uint8_t dtype;
	bool retransmit;
	uint32_t src_ipv4;
	uint16_t src_udp_port;
	const void *payload;		/* PUSH only: elem_count elements of dtype */
	size_t payload_len;
	/*
	 * PUSH: non-NULL lends the payload's buffer, which must then be writable, under this
	 * cookie: the first arrival of a segment may be kept as its sum (reply.kept) instead of
	 * copied, later arrivals added into it in place, and the cookie goes back through the
	 * engine's release exactly once (struct phub_engine_params). NULL: nothing lent.
	 */
	void *lend;
	/*
	 * PUSH with PHUB_WIRE_F_HYPER: this iteration's lr and weight decay for the segment. The
	 * first PUSH of an iteration sets them (or their absence: the job's JOIN values) for the
	 * segment; a later rank's PUSH that differs is dropped (PHUB_DROP_HYPER_MISMATCH).
	 */
	bool has_hyper;
	float hyper_lr;
	float hyper_weight_decay;
	/*
	 * The job clock's time of the request (read once per burst by the caller, from the same
	 * clock as the job's); 0: the engine reads the clock itself.
	 */
	uint64_t now_ns;
};

struct phub_engine;
struct phub_engine_job;

/*
 * The clock of every timestamp the engine keeps (job creation, when each rank was last heard):
 * nanoseconds that never go back. Tests pass one they move by hand, so that no test sleeps.
 */
typedef uint64_t (*phub_engine_clock_fn)(void *arg);

/* What phub_engine_create_with() needs; zero-initialised, it gives phub_engine_create(). */
struct phub_engine_params {
	phub_engine_clock_fn clock;	/* NULL: CLOCK_MONOTONIC */
	void *clock_arg;		/* passed to clock */
	/*
	 * Hands back a payload buffer a PUSH lent (request.lend) and the engine kept: called once
	 * per kept cookie, by the data thread that completes the segment (its last PUSH, an
	 * elastic completion) or by phub_engine_job_free() for segments still in flight. NULL: the
	 * engine keeps nothing and copies every first arrival. Only default-mode (not
	 * deterministic), one-rack fp32 jobs keep: elsewhere the first arrival is staged, widened
	 * from fp16/bf16 or summed for the ring, and copied as before.
	 */
	void (*release)(void *cookie, void *arg);
	void *release_arg;		/* passed to release */
};

/*
 * CLOCK_MONOTONIC in nanoseconds: the engine's default clock, and the one callers stamp ring
 * requests with (phub_engine_ring_request.now_ns) when they left the clock at its default.
 */
uint64_t phub_engine_monotonic_ns(void);

/* The job table, on CLOCK_MONOTONIC. NULL and errno ENOMEM. */
struct phub_engine *phub_engine_create(void);
/* The job table, with params (NULL: defaults). NULL and errno ENOMEM. */
struct phub_engine *phub_engine_create_with(const struct phub_engine_params *params);
void phub_engine_free(struct phub_engine *engine);

/*
 * Create a job and its buffers (model, aggregation, optimizer state, wire
 * copy); NULL and errno: EINVAL for bad parameters, E2BIG when it would exceed
 * memory_limit_bytes, ENOMEM, ENOSPC when the job table is full, EEXIST when a
 * job of that name exists. The job is visible to lookups at once.
 */
struct phub_engine_job *phub_engine_job_create(struct phub_engine *engine,
		const struct phub_engine_job_params *params);

/* Hide the job from lookups; free it once no data thread can hold it. */
void phub_engine_job_unpublish(struct phub_engine *engine, struct phub_engine_job *job);
void phub_engine_job_free(struct phub_engine_job *job);

struct phub_engine_job *phub_engine_job_lookup(const struct phub_engine *engine, uint32_t job_id);
struct phub_engine_job *phub_engine_job_find(const struct phub_engine *engine, const char *name);
/* Iterate: the next published job after job_id (UINT32_MAX to start), NULL at the end. */
struct phub_engine_job *phub_engine_job_next(const struct phub_engine *engine, const struct phub_engine_job *prev);

/*
 * JOIN of one rank (control thread). Idempotent: the same rank joining again
 * from the same address gets the same token; from another address (a restarted
 * worker) it gets a new token and the old one stops working. Returns 0 or a
 * negative wire error code (-PHUB_WIRE_ERR_*), with the token in *token.
 */
int phub_engine_job_join(struct phub_engine_job *job, uint16_t rank, uint64_t nonce,
		const struct phub_engine_peer *peer, uint64_t *token);
/*
 * Whether nonce is the job's (control thread). The control plane asks before it looks at
 * anything else of a JOIN to an existing job, so that a JOIN without the nonce learns nothing
 * of the job's shape. One 64-bit comparison, whose time does not depend on how many bits of a
 * guess are right.
 */
bool phub_engine_job_nonce_matches(const struct phub_engine_job *job, uint64_t nonce);
/* LEAVE; returns the number of ranks still joined, or -errno. */
int phub_engine_job_leave(struct phub_engine_job *job, uint16_t rank, uint64_t token);

/* Data path. Both fill *reply and count into *stats; neither allocates. */
void phub_engine_push(struct phub_engine_job *job, const struct phub_engine_request *req,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats);
void phub_engine_pull(struct phub_engine_job *job, const struct phub_engine_request *req,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats);

/* Read-only views for the control thread, telemetry and tests. */
struct phub_engine_job_info {
	uint32_t job_id;
	char name[PHUB_ENGINE_NAME_MAX];
	uint16_t world_size;
	uint16_t joined;
	enum phub_dtype dtype;
	uint32_t n_keys;
	uint32_t n_chunks;
	uint32_t n_segments;
	uint64_t n_elems;
	uint64_t memory_bytes;
	uint32_t iteration_min;		/* every segment has finished this iteration */
	uint32_t iteration_max;		/* some segment has finished this iteration */
	uint64_t segments_completed;	/* since creation, all lcores */
	bool deterministic;
	bool elastic;			/* on_worker_dead "continue" */
	uint16_t live;			/* ranks not removed (world_size but in an elastic job) */
};

void phub_engine_job_get_info(const struct phub_engine_job *job, struct phub_engine_job_info *info);
uint32_t phub_engine_job_id(const struct phub_engine_job *job);
/*
 * The job's slot in the job table, < PHUB_ENGINE_MAX_JOBS: an index for the caller's own
 * per-job arrays, stable for the job's life. Job ids are not slots: never derive one.
 */
uint32_t phub_engine_job_slot(const struct phub_engine_job *job);
uint16_t phub_engine_job_world_size(const struct phub_engine_job *job);
/*
 * The global rank of local index 0 (0 but in a ring job: the ranks of the racks before this
 * one) and the ranks over every rack (world_size but in a ring job). Wire ranks are global;
 * the rank arguments of this API are local, from 0 to world_size - 1.
 */
uint32_t phub_engine_job_rank_base(const struct phub_engine_job *job);
uint32_t phub_engine_job_total_world(const struct phub_engine_job *job);
/*
 * The local index of a wire (global) rank: false when the rank is another rack's or beyond
 * the job.
 */
bool phub_engine_job_local_rank(const struct phub_engine_job *job, uint32_t global_rank,
		uint16_t *local);
enum phub_dtype phub_engine_job_dtype(const struct phub_engine_job *job);
const struct phub_layout *phub_engine_job_layout(const struct phub_engine_job *job);
/*
 * The peer (address, MAC and flags, one consistent record even while the control thread
 * re-JOINs the rank) and token of a joined rank; false when the rank has not joined. Any
 * thread.
 */
bool phub_engine_job_rank(const struct phub_engine_job *job, uint16_t rank,
		struct phub_engine_peer *peer, uint64_t *token);
/* The fp32 model (n_elems floats); for tests and checkpoints. */
const float *phub_engine_job_model(const struct phub_engine_job *job);
/* Optimizer state i (0: m, 1: v) or NULL when the optimizer has none; for tests. */
const float *phub_engine_job_state(const struct phub_engine_job *job, unsigned int i);

/*
 * ---- Checkpoints (engine_ckpt.c; docs/reliability.md, "PBox restart and checkpoints") ----
 *
 * A consistent snapshot of iteration T is built without locks by the data threads: the
 * control thread arms a collection of T (phub_engine_job_ckpt_collect()); each data thread,
 * as one of its segments completes T, copies the segment's new weights and optimizer state
 * into the job's shadow and counts it. Once every segment is counted the shadow is a
 * snapshot of iteration T that no data thread touches until the next collection is armed,
 * and the control thread (or a thread it hands the job to) writes it with
 * phub_engine_ckpt_write(). Partial sums of an unfinished iteration are never saved.
 *
 * The file, little endian, one per job (docs/reliability.md has the diagram):
 *   header (PHUB_ENGINE_CKPT_HEADER_BYTES: magic, version, the job's parameters, iteration),
 *   n_keys x { key_id u32, n_elems u32 }, the fp32 model, each optimizer state (m, v),
 *   and the CRC32C of every byte before it.
 */
#define PHUB_ENGINE_CKPT_MAGIC "PHUBCKPT"
#define PHUB_ENGINE_CKPT_VERSION 1
#define PHUB_ENGINE_CKPT_HEADER_BYTES 152
/* Header flags. */
#define PHUB_ENGINE_CKPT_F_DETERMINISTIC 0x1u
/* An elastic job (on_worker_dead "continue"); the membership is not kept: every rank is in. */
#define PHUB_ENGINE_CKPT_F_ELASTIC 0x2u

/* Where phub_engine_ckpt_write() takes the state from. */
enum phub_engine_ckpt_source {
	PHUB_ENGINE_CKPT_SHADOW = 0,	/* the complete shadow snapshot */
	PHUB_ENGINE_CKPT_LIVE = 1,	/* the job's own buffers, while no data thread runs */
};

/* The shadow's state as the control thread sees it. */
struct phub_engine_ckpt_status {
	bool armed;		/* a collection is armed */
	bool complete;		/* every segment copied: a consistent snapshot of iteration */
	bool missed;		/* (scan) every segment passed iteration, some without a copy */
	uint32_t iteration;	/* the iteration armed */
	uint32_t copied;	/* segments copied so far */
	uint32_t n_segments;
};

/* What a checkpoint file says about its job. */
struct phub_engine_ckpt_info {
	char name[PHUB_ENGINE_NAME_MAX];
	uint64_t nonce;
	uint32_t iteration;		/* the model is the result of this iteration */
	uint32_t flags;			/* PHUB_ENGINE_CKPT_F_* */
	uint16_t world_size;
	enum phub_dtype dtype;
	struct phub_optimizer_params optimizer;
	uint32_t chunk_bytes;		/* fp32 bytes per chunk, as the layout was cut */
	uint32_t segment_elems;
	uint32_t n_keys;
	uint64_t n_elems;
	uint64_t file_bytes;		/* the size the header implies */
};

/* What phub_engine_ckpt_restore() takes from the appliance rather than from the file. */
struct phub_engine_ckpt_restore_params {
	const struct phub_layout_server *servers;	/* placement, as in job params */
	uint32_t n_servers;
	uint64_t memory_limit_bytes;	/* 0: no limit */
	const struct phub_engine_allocator *allocator;	/* NULL: aligned_alloc */
	bool checkpoint_shadow;
	uint32_t max_segment_elems;	/* 0: any; a file cut in larger segments is refused */
	/*
	 * A job across racks: this rack's place in the ring (the file holds this rack's model,
	 * state and world size only). NULL: a one-rack job.
	 */
	const struct phub_engine_ring_params *ring;
	/* An authenticated job (phub_engine_job_params' auth_psk, auth_lanes); NULL: not. */
	const uint8_t *auth_psk;
	unsigned int auth_lanes;
};

/*
 * Arm the collection of iteration into the shadow (control thread). Whatever an earlier
 * collection gathered is abandoned: a data thread still copying for it does not count.
 * Choose an iteration no segment has completed yet (one past get_info's iteration_max is
 * safe); if one raced past it, the status says missed. 0, or -ENOTSUP without a shadow.
 */
int phub_engine_job_ckpt_collect(struct phub_engine_job *job, uint32_t iteration);
/* Disarm: data threads stop copying. */
void phub_engine_job_ckpt_cancel(struct phub_engine_job *job);
/*
 * The shadow's state. scan also reads every segment's iteration to tell a collection that can
 * no longer complete (missed); it costs a pass over the job's slots, so not on every poll.
 */
void phub_engine_job_ckpt_status(const struct phub_engine_job *job, bool scan,
		struct phub_engine_ckpt_status *status);

/*
 * Write the job's checkpoint to fd (at its current offset) from src: the complete shadow, or
 * the live buffers when every segment has finished the same iteration and no data thread runs.
 * flags: PHUB_ENGINE_CKPT_F_*. 0 or -errno with the reason in err: EAGAIN (the shadow is not
 * complete, or the segments are not at one iteration), or write(2)'s error.
 */
int phub_engine_ckpt_write(const struct phub_engine_job *job, enum phub_engine_ckpt_source src,
		uint32_t flags, int fd, char *err, size_t errlen);

/*
 * Read and check a checkpoint's header, and its length against fd's size (a torn file is
 * refused here); fd is left after the header. 0 or -errno with the reason in err: EBADMSG
 * (not a checkpoint, corrupt or torn), EPROTONOSUPPORT (another version), or read's error.
 */
int phub_engine_ckpt_peek(int fd, struct phub_engine_ckpt_info *info, char *err, size_t errlen);

/*
 * Create the job a checkpoint file describes, from fd's start: parameters, key layout, model
 * and optimizer state; its segments wait for iteration + 1 and the model of iteration is kept
 * for late PUSHes and PULLs (an fp16/bf16 job's wire copy is rebuilt). Every byte is checked
 * against the CRC before the job is returned; nothing is left behind on failure. Call it
 * before data threads run. NULL and errno with the reason in err: EBADMSG (corrupt, torn),
 * EPROTONOSUPPORT, E2BIG (memory limit, or segments larger than max_segment_elems), and
 * phub_engine_job_create()'s errors.
 */
struct phub_engine_job *phub_engine_ckpt_restore(struct phub_engine *engine, int fd,
		const struct phub_engine_ckpt_restore_params *params,
		struct phub_engine_ckpt_info *info, char *err, size_t errlen);
bool phub_engine_job_deterministic(const struct phub_engine_job *job);

/*
 * A keep-alive (PING) of a joined rank, seen by the control thread: it counts
 * as hearing from the rank when the token and the source are the session's.
 * 0, or -EPERM.
 */
int phub_engine_job_heard(struct phub_engine_job *job, uint16_t rank, uint64_t token,
		uint32_t src_ipv4, uint16_t src_udp_port);

/* What the PBox knows of one rank's liveness and progress. */
struct phub_engine_rank_status {
	struct phub_engine_peer peer;	/* valid when joined */
	bool joined;
	bool pushed;			/* some PUSH of it was taken */
	uint32_t newest_iteration;	/* newest iteration it pushed (valid when pushed) */
	/*
	 * Since the newest valid PUSH, PULL, keep-alive or JOIN of the rank; for
	 * a rank that never joined, since the job was created.
	 */
	uint64_t silent_ns;
};

/*
 * The status of a rank (< world_size): 0 or -EINVAL. Any thread; the counters
 * are summed over the data threads with relaxed loads, each one whole.
 */
int phub_engine_job_rank_status(const struct phub_engine_job *job, uint16_t rank,
		struct phub_engine_rank_status *status);

/*
 * The oldest iteration that some segment has not finished (*iteration), and
 * the ranks it waits for (bits of waiting): those missing from a segment of
 * that iteration that another rank has already pushed. Returns how many ranks
 * are waited on (0: nobody waits, e.g. every rank is still computing). Any
 * thread: a racy snapshot of slots that data threads keep changing. A slot
 * caught in the middle of a change (its iteration moved, or its bitmap and
 * count disagree) is skipped; a rank that pushed while the bitmap was read may
 * still be named, but never one that has been silent.
 */
int phub_engine_job_waiting_on(const struct phub_engine_job *job, uint32_t *iteration,
		uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS]);

/*
 * ---- Elastic jobs (engine_elastic.c; docs/design.md, "Elastic jobs") ----
 *
 * A rank of an elastic job that died is removed by the control thread: its token is revoked,
 * so nothing more of it is taken, and every segment stops waiting for it. A gradient of it that
 * a segment took before counts where it was taken: a segment completes once it holds every rank
 * not removed, and the mean divides by the ranks it holds. A deterministic job sums those in
 * rank order, the highest one by the fused step, as a reference of that membership does.
 */

/*
 * Remove rank (control thread): 0 with *iteration the first iteration none of the rank's
 * gradients reaches (one past the newest it pushed); -EINVAL (not an elastic job, or no such
 * rank), -EALREADY, or -EBUSY when the rank has not pushed past the initial-model round (a
 * barrier of every rank, whose model is rank 0's weights).
 */
int phub_engine_job_rank_remove(struct phub_engine_job *job, uint16_t rank, uint32_t *iteration);
/*
 * Readmit a removed rank at an iteration boundary (control thread, before its JOIN): 0 with
 * *iteration the first iteration it counts in again, two past the newest any segment is
 * summing, so that no data thread can be completing it already; the rank pushes from there
 * (earlier PUSHes of it are dropped as stale). -EINVAL, or -EALREADY when it is not removed.
 * A readmitted rank that dies again is removed again (phub_engine_job_rank_remove()).
 */
int phub_engine_job_rank_readmit(struct phub_engine_job *job, uint16_t rank, uint32_t *iteration);
/* Whether rank was readmitted and is in from *iteration on (NULL: not wanted). Any thread. */
bool phub_engine_job_rank_joining(const struct phub_engine_job *job, uint16_t rank,
		uint32_t *iteration);
/*
 * Whether rank is removed (and not readmitted), and from which iteration (NULL: not wanted).
 * Any thread.
 */
bool phub_engine_job_rank_removed(const struct phub_engine_job *job, uint16_t rank,
		uint32_t *iteration);
/* Ranks not removed, or readmitted. Any thread. */
uint16_t phub_engine_job_live(const struct phub_engine_job *job);
bool phub_engine_job_elastic(const struct phub_engine_job *job);

/* A segment that a removal completed: MODEL_ALL of reply, for the segment named here. */
struct phub_engine_segment_done {
	uint32_t chunk_id;
	uint32_t elem_offset;		/* within the chunk */
	uint16_t seg_index;
	uint16_t seg_count;
	struct phub_engine_reply reply;
};

/*
 * The data thread's part of a removal: once after each change of membership (*epoch_seen, the
 * thread's own per job, starts at 0), complete the segments whose server owns() says this thread
 * owns that waited only on removed ranks, and call done() for each (a MODEL_ALL to send).
 * Returns how many completed; a cheap comparison when nothing changed. Not an elastic job: 0.
 */
unsigned int phub_engine_elastic_poll(struct phub_engine_job *job,
		bool (*owns)(void *arg, uint32_t server),
		void (*done)(void *arg, const struct phub_engine_segment_done *what), void *arg,
		struct phub_engine_stats *stats, uint32_t *epoch_seen);

/* What a job needs, before it exists (engine_memory.c): for the limits, messages, planning. */
struct phub_engine_memory_params {
	uint64_t n_elems;		/* elements of the model, all keys */
	uint32_t n_keys;
	enum phub_dtype dtype;		/* on the wire */
	enum phub_opt_type optimizer;
	uint16_t world_size;
	bool deterministic;		/* rank-order sums: a staging buffer */
	bool checkpoint_shadow;		/* checkpoints enabled on the PBox */
	bool ring;			/* a job across racks: its ring buffers */
	uint32_t n_servers;		/* (port, queue) servers; 0: 1 */
	/* The job's segments if known, else 0 and the segment size to estimate them from. */
	uint32_t n_segments;
	uint32_t segment_elems;
};

/* Bytes, by part. */
struct phub_engine_memory {
	uint64_t model;			/* model and aggregation buffer, fp32 */
	uint64_t optimizer;		/* optimizer state (momentum, Adam's two moments) */
	uint64_t wire_copy;		/* the model in the wire dtype (fp16, bf16) */
	uint64_t checkpoint_shadow;	/* model and optimizer state, for consistent checkpoints */
	uint64_t deterministic_staging;	/* (world_size - 1) models in the wire dtype */
	uint64_t ring;			/* a ring job's rack sums in flight: 4 fp32 models */
	uint64_t bookkeeping;		/* segment slots, chunk index, per-rank cells */
	uint64_t total;
};

/*
 * The memory a job of these parameters takes on the PBox. Every part but the bookkeeping is
 * exactly what phub_engine_job_create() allocates and checks against memory_limit_bytes; the
 * bookkeeping is an estimate (from n_segments, or segment_elems), within a few KB per key.
 */
void phub_engine_memory_need(const struct phub_engine_memory_params *p,
		struct phub_engine_memory *m);
/*
 * ---- The cross-rack ring (engine_ring_node.c; docs/hierarchy.md) ----
 *
 * In a ring job a segment's last local PUSH does not run the optimizer: it hands the rack sum
 * to the segment's ring (reply RING_SEND). Ring datagrams from the previous PBox go to
 * phub_engine_ring_receive() on the lcore that owns the chunk; the one that completes the
 * segment's sum runs the optimizer there and answers MODEL_ALL to this rack's workers.
 */

/*
 * One ring link's identity: the peer PBox's address, the token the link's datagrams carry, and
 * the peer's id of the job (job ids are each PBox's own): what datagrams to the peer carry.
 */
struct phub_engine_ring_link {
	struct phub_engine_peer peer;
	uint64_t token;
	uint32_t job_id;
};

/*
 * Set the ring peers (control thread, before ring traffic): prev sends RING_REDUCE and
 * RING_GATHER here carrying prev.token (and gets RING_ACKs with it); next gets this PBox's
 * ring datagrams carrying next.token and acknowledges with it. 0, or -EINVAL for a job
 * without a ring.
 */
int phub_engine_job_ring_peers(struct phub_engine_job *job,
		const struct phub_engine_ring_link *prev, const struct phub_engine_ring_link *next);
/* The links as set; false for a job without a ring. */
bool phub_engine_job_ring(const struct phub_engine_job *job, struct phub_engine_ring_params *p,
		struct phub_engine_ring_link *prev, struct phub_engine_ring_link *next);

/* A RING_REDUCE, RING_GATHER, RING_ACK or RING_ACKV as the data path parsed it (host order). */
struct phub_engine_ring_request {
	uint64_t session_token;
	uint32_t chunk_id;
	uint32_t iteration;
	uint32_t elem_offset;
	uint32_t elem_count;
	uint32_t step;			/* aux */
	uint16_t rank;			/* worker_rank: the sender's ring position */
	uint8_t opcode;			/* PHUB_WIRE_OP_RING_* */
	uint8_t dtype;
	uint32_t src_ipv4;
	uint16_t src_udp_port;
	const void *payload;		/* REDUCE/GATHER: elem_count fp32; RING_ACKV: body */
	size_t payload_len;
	uint64_t now_ns;		/* CLOCK_MONOTONIC, read once per burst by the caller */
};

/*
 * Take a ring datagram (the lcore that owns req->chunk_id). Reply: RING_ACK to send back for
 * REDUCE/GATHER that were taken or seen before; RING_SEND with steps that became ready; and
 * MODEL_ALL (+ the model fields) when the segment's all-rack sum completed and the optimizer
 * ran. A RING_ACK gets actions 0 and reason OK when it was counted. Drops: BAD_TOKEN and
 * WRONG_SOURCE (not the job's ring peer), RANK_RANGE (not the neighbour's ring position),
 * UNEXPECTED_OPCODE (a job without a ring), RING_STEP, FUTURE_ITERATION (not acknowledged: the
 * sender retransmits), STALE_ITERATION, DTYPE_MISMATCH, CHUNK_RANGE, OFFSET_RANGE.
 */
void phub_engine_ring_receive(struct phub_engine_job *job, const struct phub_engine_ring_request *req,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats);

/*
 * Take a RING_ACKV from next (req: session_token, rank, opcode, source, now_ns, and its body as
 * payload/payload_len): every entry of a chunk whose server owns() gives this thread (NULL:
 * every chunk) acknowledges its step as a RING_ACK would, round-trip sample and window
 * included; entries of other threads' chunks are left to them (the data path hands them the
 * datagram). Returns the steps newly acknowledged; reply->reason is OK, or the drop of the
 * whole datagram (as RING_ACK's, and RING_ACKV_FIELDS for a body that does not parse). An
 * entry naming no chunk or segment of the job is counted as CHUNK_RANGE or OFFSET_RANGE and
 * skipped. Call phub_engine_ring_release() after it, as after a RING_ACK.
 */
unsigned int phub_engine_ring_ackv(struct phub_engine_job *job,
		const struct phub_engine_ring_request *req,
		bool (*owns)(void *arg, uint32_t server), void *arg,
		struct phub_engine_reply *reply, struct phub_engine_stats *stats);

/*
 * Retransmit what is due at now_ns among the chunks whose server owns() says this thread
 * owns: send() is called once per segment and iteration with the unacknowledged steps.
 * Returns how many segments had something to send.
 */
unsigned int phub_engine_ring_poll(struct phub_engine_job *job, uint64_t now_ns,
		bool (*owns)(void *arg, uint32_t server),
		void (*send)(void *arg, const struct phub_engine_ring_send *what), void *arg,
		struct phub_engine_stats *stats);

/*
 * phub_engine_ring_poll() with a budget: at most budget segments send, starting at the segment
 * *cursor names and going round; *cursor is left where the scan stopped, so that the next one
 * starts there. A segment past the budget is not looked at (its timer stays due), so none
 * starves behind others that keep being due. Returns how many segments sent.
 */
unsigned int phub_engine_ring_poll_some(struct phub_engine_job *job, uint64_t now_ns,
		bool (*owns)(void *arg, uint32_t server),
		void (*send)(void *arg, const struct phub_engine_ring_send *what), void *arg,
		struct phub_engine_stats *stats, uint32_t *cursor, unsigned int budget);

/*
 * The round trip to next as RING_ACKs measured it (smoothed, and its variation; 0 before the
 * first sample) and the retransmission timeout it sets: srtt + 4 rttvar within the job's
 * rto_ns .. rto_max_ns.
 */
void phub_engine_job_ring_rtt(const struct phub_engine_job *job, uint64_t *srtt_ns,
		uint64_t *rttvar_ns, uint64_t *rto_ns);

/*
 * Send the ring steps the link's window held back, now that ACKs made room: from the segment
 * *cursor names, going round, at most `visits` segments looked at, among the chunks owns()
 * gives this thread; stops at the first segment that still holds steps (the window is full)
 * and leaves *cursor there. Returns how many sends. Cheap when nothing is held: call it after
 * each RING_ACK. phub_engine_ring_poll_some() sends held steps too.
 */
unsigned int phub_engine_ring_release(struct phub_engine_job *job, uint64_t now_ns,
		bool (*owns)(void *arg, uint32_t server),
		void (*send)(void *arg, const struct phub_engine_ring_send *what), void *arg,
		uint32_t *cursor, unsigned int visits);

/* The send window of the link to next (docs/hierarchy.md "The ring's send window"). */
struct phub_engine_ring_window {
	uint64_t cwnd_bytes;		/* payload bytes allowed in flight now */
	uint64_t ssthresh_bytes;	/* slow start below it */
	uint64_t inflight_bytes;	/* sent and not acknowledged */
	uint64_t inflight_steps;	/* their datagrams */
	uint64_t held_steps;		/* ready, held back until the window opens */
	uint64_t held_total;		/* steps ever held back */
	uint64_t cuts;			/* losses that halved cwnd (once per RTO) */
	uint64_t fast_resends;		/* steps resent because later ones were acknowledged */
	uint64_t timeouts;		/* rounds resent because the link fell silent */
	uint64_t min_bytes, max_bytes;	/* cwnd's bounds */
};

/* The window of a ring job (all zero for a job without a ring). */
void phub_engine_job_ring_window(const struct phub_engine_job *job,
		struct phub_engine_ring_window *w);

/* Nanoseconds since a valid ring datagram from prev and a RING_ACK from next (control). */
void phub_engine_job_ring_silence(const struct phub_engine_job *job, uint64_t now_ns,
		uint64_t *prev_ns, uint64_t *next_ns);

#endif /* PHUB_ENGINE_H */
