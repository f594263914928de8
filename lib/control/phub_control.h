/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane as one object, shared by the appliance (app/pbox/control.c) and the soft
 * PBox (tests/support/soft_pbox.c): what an adapter gives it (struct phub_control_ops: a clock,
 * a send callback, a log, memory and job-release hooks), the datagrams it takes and the timers
 * it runs, and the checkpoint files. Plain C over lib/engine and lib/wire: no DPDK, no clock of
 * its own, no I/O; the adapters send what it decides. How it decides (JOIN, LEAVE, PING,
 * liveness, the ring) is its own business: control_priv.h.
 */

#ifndef PHUB_CONTROL_H
#define PHUB_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/phub_engine.h"
#include "wire/phub_wire.h"

/* ---- the control plane as one object ---- */

/*
 * Where a control datagram came from and where its answer goes: the address, the MAC the
 * appliance answers to without ARP, and the port it came in on (the appliance's port index, the
 * soft PBox's socket), so that the answer leaves the way the question came.
 */
struct phub_control_peer {
	uint32_t ipv4;			/* host byte order */
	uint16_t udp_port;		/* host byte order */
	uint16_t port;
	uint8_t mac[6];
};

enum phub_control_log_level {
	PHUB_CONTROL_LOG_ERR,
	PHUB_CONTROL_LOG_NOTICE,
	PHUB_CONTROL_LOG_INFO,
};

/*
 * What the adapter gives the control plane. now_ns and send are required; the others may be
 * NULL. Every callback runs on the thread that calls phub_control_input()/_poll().
 */
struct phub_control_ops {
	/* A monotonic clock; the engine's, when the adapter can give the engine one. */
	uint64_t (*now_ns)(void *ctx);
	/* Send one built datagram (a whole UDP payload) to a peer. */
	void (*send)(void *ctx, const struct phub_control_peer *to, const void *buf, size_t len);
	/* One line of log, without a newline. NULL: silent. */
	void (*log)(void *ctx, enum phub_control_log_level level, const char *text);
	/* Where a new job's memory comes from, for a JOIN that came in on port. NULL: malloc. */
	const struct phub_engine_allocator *(*allocator)(void *ctx, uint16_t port);
	/*
	 * Why a job of params p did not fit (err E2BIG: over the limits; ENOMEM: its allocator
	 * ran out), for the no_memory ERROR: the adapter knows its memory. NULL: the limits'
	 * own text.
	 */
	void (*explain_no_memory)(void *ctx, const struct phub_engine_job_params *p,
			const struct phub_wire_key *keys, uint32_t n_keys, int err, uint16_t port,
			char *buf, size_t size);
	/* A job was created by a JOIN (checkpoints arm its first snapshot). */
	void (*job_created)(void *ctx, struct phub_engine_job *job);
	/*
	 * A job ends: hide it, wait until no data thread can hold it, forget its checkpoints,
	 * free it. NULL: phub_engine_job_unpublish() and phub_engine_job_free() at once (one
	 * thread does everything).
	 */
	void (*job_release)(void *ctx, struct phub_engine_job *job);
	/*
	 * A ring job goes back to its checkpoint because a ring neighbour restarted
	 * (docs/hierarchy.md, "Failure behaviour"): as job_release, but its checkpoint files
	 * stay, one of them is restored next. NULL: ring jobs never go back, a neighbour's
	 * restart ends them.
	 */
	void (*job_replace)(void *ctx, struct phub_engine_job *job);
};

/* One rack of a job that spans racks, in ring order (the config's jobs[].racks[]). */
struct phub_control_rack {
	const char *name;		/* its PBox's name, for messages */
	uint16_t ranks;			/* the job's ranks in it, after the racks before */
	int16_t peer;			/* index in params.ring_peers; -1: this PBox */
};

/*
 * A PBox of the ring (the config's peers[]): where its control plane listens, and which of our
 * ports reaches it. Its data endpoint and MAC come in its RING_HELLO.
 */
struct phub_control_ring_peer {
	const char *name;
	uint32_t ipv4;			/* host byte order */
	uint16_t udp_port;		/* its control port */
	uint16_t port;			/* ours, as struct phub_control_peer.port */
};

/* A job declared in the PBox's config: its nonce, shape and optimizer are fixed. */
struct phub_control_declared_job {
	const char *name;
	uint64_t nonce;
	uint16_t workers;		/* the whole job's ranks, over every rack */
	enum phub_dtype dtype;
	struct phub_optimizer_params optimizer;
	bool deterministic;
	bool elastic;			/* on_worker_dead "continue" (docs/config.md) */
	bool auth;			/* jobs[].auth "required": every datagram has a MAC */
	/* jobs[].key: the 256-bit secret its PSK comes from (PHUB_AUTH_KEY_LEN); NULL: the nonce. */
	const uint8_t *key;
	/* A job across racks (docs/hierarchy.md): 2 .. 16 racks, this PBox among them; 0: none. */
	uint16_t n_racks;
	const struct phub_control_rack *racks;
};

struct phub_control_params {
	struct phub_engine *engine;
	const struct phub_control_ops *ops;
	void *ctx;
	/* Where chunks go (lib/layout) and the data endpoint of each server, for JOIN_ACK. */
	const struct phub_layout_server *servers;
	const struct phub_wire_endpoint *endpoints;
	uint32_t n_servers;
	uint16_t mtu;			/* the ports' smallest: segments and JOIN_ACKs fit */
	uint32_t segment_bytes;		/* a segment's payload at most; 0: what MTU carries */
	uint32_t chunk_bytes;		/* for a JOIN that asks for 0 */
	bool deterministic;		/* the PBox's default summing order (a JOIN may ask) */
	bool checkpoint_shadow;		/* jobs get a checkpoint shadow (checkpoints on) */
	/* Limits; 0: the engine's own bound, or none for memory. */
	uint32_t max_jobs;
	uint32_t max_workers_per_job;
	uint64_t job_memory_bytes;
	uint64_t total_memory_bytes;
	uint32_t max_job_keys;		/* 0: 65536 */
	unsigned int max_pending_joins;	/* 0: 64 */
	uint32_t join_ms;		/* an incomplete JOIN's life; 0: 2000 */
	uint32_t worker_dead_ms;	/* a silent rank's; 0: 10000 */
	const struct phub_control_declared_job *declared;
	unsigned int n_declared;
	/* The ring of PBoxes (docs/hierarchy.md); none without ring jobs. */
	const char *rack_name;		/* this PBox's, for messages; NULL: "pbox" */
	const struct phub_control_ring_peer *ring_peers;
	unsigned int n_ring_peers;
	/*
	 * Where this PBox takes ring datagrams, by our port (index = phub_control_peer.port): the
	 * endpoint a RING_HELLO sent through that port names. The ring datagrams of every data
	 * thread leave from it, so that the peer knows them by one address.
	 */
	const struct phub_wire_endpoint *ring_endpoints;
	unsigned int n_ring_endpoints;
	uint32_t rto_min_ms;		/* a ring segment's first retransmission; 0: 2 */
	uint32_t rto_max_ms;		/* its back-off's ceiling; 0: 200 */
};

/* What the control plane counts (its thread alone writes them). */
struct phub_control_stats {
	uint64_t msgs;			/* control datagrams taken */
	uint64_t joins;			/* JOINs answered with JOIN_ACK */
	uint64_t errors_sent;
	uint64_t leaves;		/* LEAVE_ACKs sent */
	uint64_t pings;
	uint64_t join_timeouts;
	uint64_t jobs_created;
	uint64_t jobs_ended;
	uint64_t ring_hellos_sent;	/* RING_HELLO and RING_HELLO_ACK */
	uint64_t ring_hellos_taken;	/* RING_HELLO(_ACK) of a ring job's neighbour, recorded */
	uint64_t ring_hellos_early;	/* for a declared ring job not made here yet: unanswered */
	uint64_t ring_hellos_refused;	/* another ring, nonce, position or address: logged */
	uint64_t ring_jobs_failed;	/* ended because a ring peer fell silent or restarted */
	/*
	 * Jobs that ended without their workers' LEAVEs: aborted with an ERROR to their ranks
	 * (a dead rank, a ring peer lost), every rank silent, or restored and never joined.
	 */
	uint64_t jobs_failed;
	uint64_t ranks_removed;		/* dead ranks an elastic job went on without */
	uint64_t worlds_sent;		/* WORLD datagrams, first and again */
	uint64_t world_acks;		/* WORLD_ACKs that acknowledged a change */
	uint64_t drops[PHUB_DROP_REASON_MAX];
};

struct phub_control;

/* NULL and errno (EINVAL, ENOMEM). The params' arrays must outlive the object. */
struct phub_control *phub_control_create(const struct phub_control_params *params);
/*
 * Free the object. Its jobs stay in the engine (a PBox that stops keeps their checkpoints):
 * the adapter frees them with the engine. ctl may be NULL.
 */
void phub_control_free(struct phub_control *ctl);

/*
 * One datagram for the control plane (JOIN, LEAVE, PING; anything else is counted as
 * unexpected_opcode): parsed and validated here, answered through ops->send.
 */
void phub_control_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const void *dgram, size_t len);

/*
 * Timers: JOINs that stayed incomplete (ERROR JOIN_TIMEOUT) and, every 100 ms, the jobs
 * that wait on a silent rank (ERROR WORKER_TIMEOUT to every rank, then the job ends), whose
 * ranks are all silent, or that were restored and that no rank JOINed (both end).
 */
void phub_control_poll(struct phub_control *ctl);

/*
 * A job restored from a checkpoint before any datagram (lib/control's restore, or the
 * adapter's): its memory counts in the limits, its declaration waits for its first rank back.
 */
void phub_control_job_restored(struct phub_control *ctl, struct phub_engine_job *job,
		const struct phub_engine_ckpt_info *ckpt);

/* End a job now (job_release), as after its last LEAVE. */
void phub_control_job_end(struct phub_control *ctl, struct phub_engine_job *job);

/* What the control plane knows of a ring job's link to one neighbour. */
struct phub_control_ring_link_info {
	const char *rack;		/* the neighbour's name */
	uint32_t control_ipv4;		/* its control address */
	uint16_t pos;			/* its ring position */
	bool known;			/* its RING_HELLO(_ACK) came: the engine has the link */
	struct phub_engine_peer data;	/* its data endpoint and MAC, when known */
	uint64_t silent_ns;		/* since its newest RING_HELLO(_ACK) or ring datagram */
};

/*
 * A ring job's neighbours as the control plane has them (prev, next); false for a job without
 * a ring. Control thread (telemetry copies it from there).
 */
bool phub_control_job_ring_links(const struct phub_control *ctl, const struct phub_engine_job *job,
		struct phub_control_ring_link_info *prev, struct phub_control_ring_link_info *next);

/* The number of jobs. */
unsigned int phub_control_job_count(const struct phub_control *ctl);

void phub_control_get_stats(const struct phub_control *ctl, struct phub_control_stats *stats);

/*
 * ---- checkpoint files (control_ckpt.c; docs/reliability.md) ----
 *
 * One directory, files "<escaped job name>.<10-digit iteration>.ckpt" written atomically
 * (a temporary file, fsync, rename, fsync of the directory), the newest two of a job kept,
 * every file of a job removed when it ends, and at start every job restored from its newest
 * file that passes its checks (a damaged one set aside as .corrupt, the one before it tried).
 * Plain POSIX: the appliance runs the writes on a thread of its own, the soft PBox inline.
 */

/* "<escaped name>.<10-digit iteration>.ckpt": the escaped name is at most 3 x 63 bytes. */
#define PHUB_CONTROL_CKPT_FILE_MAX 256
#define PHUB_CONTROL_CKPT_PATH_MAX 4096

struct phub_control_ckpt_dir {
	char path[PHUB_CONTROL_CKPT_PATH_MAX];
	int fd;
};

/* mkdir -p (0700: checkpoints hold a job's nonce), open, check it is writable. 0 or -errno. */
int phub_control_ckpt_open(struct phub_control_ckpt_dir *dir, const char *path);
void phub_control_ckpt_close(struct phub_control_ckpt_dir *dir);

/* One written checkpoint, or why not. */
struct phub_control_ckpt_write {
	struct phub_engine_job *job;
	enum phub_engine_ckpt_source src;
	uint32_t iteration;
	int rc;				/* 0 or -errno */
	uint64_t bytes;
	char file[PHUB_CONTROL_CKPT_FILE_MAX];
	char err[256];
	/*
	 * A ring job's (phub_control_ckpt_keep_from()): keep every file from keep_from on and
	 * the newest one before it too, so that a neighbour's restart finds one to go back to.
	 */
	bool keep;
	uint32_t keep_from;
};

/*
 * Write w->job's checkpoint of w->iteration from w->src atomically, then keep only it and the
 * newest older one of the job (what a restart falls back to if this one is damaged). Sets rc,
 * bytes, file and err. Any thread, as long as the source is not written meanwhile.
 */
void phub_control_ckpt_write(const struct phub_control_ckpt_dir *dir,
		struct phub_control_ckpt_write *w);

/*
 * For a ring job: the oldest of its neighbours' newest checkpoints (their HELLOs say them),
 * which its own files must reach back to (phub_control_ckpt_write.keep_from). False for
 * other jobs, or while a neighbour has said none.
 */
bool phub_control_ckpt_keep_from(const struct phub_control *ctl,
		const struct phub_engine_job *job, uint32_t *keep_from);

/* Remove every file of a job (it ended: its workers have the model); how many went. */
unsigned int phub_control_ckpt_remove_all(const struct phub_control_ckpt_dir *dir,
		const char *job_name);

/*
 * Restore every job of the directory into ctl's engine, within ctl's limits: newest file
 * first, a file refused by its checks set aside and the one before it tried; leftovers of
 * writes cut short removed. rp gives placement and allocation (memory limit and segment bound
 * are ctl's). For each job restored: phub_control_job_restored(), then restored(ctx, job,
 * info, file). Logs through ctl. Returns how many jobs came back.
 */
unsigned int phub_control_ckpt_restore(const struct phub_control_ckpt_dir *dir,
		struct phub_control *ctl, const struct phub_engine_ckpt_restore_params *rp,
		void (*restored)(void *ctx, struct phub_engine_job *job,
			const struct phub_engine_ckpt_info *info, const char *file), void *ctx);

/*
 * The directory and restore parameters a ring job goes back with when a ring neighbour
 * restarted from its checkpoint of iteration K (docs/hierarchy.md, "Failure behaviour"): the
 * job is replaced by the restore of its own file of K, and restored(ctx, ...) is called as at
 * start. Every pointer must stay valid while ctl lives. Without it (or without ops->job_replace)
 * a neighbour's restart ends a ring job.
 */
void phub_control_ckpt_attach(struct phub_control *ctl, const struct phub_control_ckpt_dir *dir,
		const struct phub_engine_ckpt_restore_params *rp,
		void (*restored)(void *ctx, struct phub_engine_job *job,
			const struct phub_engine_ckpt_info *info, const char *file), void *ctx);

#endif /* PHUB_CONTROL_H */
