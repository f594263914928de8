/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the files of lib/control share beyond phub_control.h, by the message each owns:
 * control.c the object (datagrams in, timers), control_join.c JOIN, control_session.c LEAVE,
 * PING, WORLD_ACK and liveness, control_ring*.c the ring of PBoxes, control_auth.c
 * authenticated jobs, control_ckpt.c the checkpoint files and the restore; under them all
 * control_jobs.c, the per-job records, the limits and the way out. The phub_control_*
 * functions here are the messages' own decisions, kept apart from the object so that the unit
 * test checks them one by one; nothing outside lib/control and its test calls them.
 */

#ifndef PHUB_CONTROL_PRIV_H
#define PHUB_CONTROL_PRIV_H

#include "auth/phub_auth.h"
#include "phub_control.h"

/* Where a control datagram came from (host byte order): the session's address. */
struct phub_control_addr {
	uint32_t ipv4;
	uint16_t udp_port;
};

/* ---- control_join.c: JOIN ---- */

/* A job's declaration. */

/* Which fields of a declaration are known: a job restored from a checkpoint knows fewer. */
enum {
	PHUB_CONTROL_DECL_OPTIMIZER = 1 << 0,	/* optimizer type */
	PHUB_CONTROL_DECL_HYPER = 1 << 1,	/* hyper-parameters */
	PHUB_CONTROL_DECL_CHUNK = 1 << 2,	/* chunk size as the JOIN asked (0: the default) */
	PHUB_CONTROL_DECL_ALL = 0x7,
};

/*
 * What a job's ranks declared beyond what lib/engine keeps (world size, dtype, keys and the
 * summing order are the engine job's own). The first JOIN sets it; a job restored from a
 * checkpoint starts with the optimizer type only, and its first rank back sets the rest.
 */
struct phub_control_decl {
	uint32_t known;			/* PHUB_CONTROL_DECL_* */
	uint8_t optimizer;
	struct phub_wire_hyper hyper;
	uint32_t chunk_bytes;
};

/* The declaration of a job's first JOIN. */
void phub_control_decl_from_join(struct phub_control_decl *decl, const struct phub_wire_join *join);

/*
 * Complete a restored job's declaration with its first rank back's JOIN (call after
 * phub_control_join_mismatch() accepted it).
 */
void phub_control_decl_complete(struct phub_control_decl *decl, const struct phub_wire_join *join);

/*
 * What a rank's JOIN to the existing job declares differently, in protocol.md's order (world
 * size, dtype, optimizer, hyper-parameters, chunk size, summing order, keys), or NULL when it
 * matches. deterministic: what this JOIN asks for after the PBox's own policy. The nonce is the
 * caller's to check first (phub_engine_job_nonce_matches()).
 */
const char *phub_control_join_mismatch(const struct phub_engine_job *job,
		const struct phub_control_decl *decl, const struct phub_wire_join *join,
		const struct phub_wire_key *keys, uint32_t n_keys, bool deterministic);

/* ---- JOIN reassembly ---- */

struct phub_control_joins;

/* One complete JOIN, valid until phub_control_joins_done(). */
struct phub_control_join {
	const struct phub_wire_join *join;
	const struct phub_wire_key *keys;
	uint32_t n_keys;
};

/*
 * A table of JOINs being reassembled, at most cap at once, each of at most max_keys keys (a
 * split JOIN's key array is allocated when its first datagram comes, sized by the total it
 * claims: the bound keeps one datagram from making the PBox allocate gigabytes). NULL, errno.
 */
struct phub_control_joins *phub_control_joins_create(unsigned int cap, uint32_t max_keys);
void phub_control_joins_free(struct phub_control_joins *joins);

/* What phub_control_joins_add() made of a JOIN datagram. */
enum phub_control_join_result {
	PHUB_CONTROL_JOIN_MORE = 0,	/* taken; more datagrams to come */
	PHUB_CONTROL_JOIN_COMPLETE,	/* *out is the whole JOIN: handle it, then _done() */
	PHUB_CONTROL_JOIN_TOO_MANY_KEYS,	/* more keys than max_keys: ERROR BAD_REQUEST */
	PHUB_CONTROL_JOIN_CONTRADICTS,	/* contradicts the datagrams before it: BAD_REQUEST */
	PHUB_CONTROL_JOIN_NO_MEMORY,	/* dropped; the worker sends it again */
};

/*
 * Add one parsed JOIN datagram from src (phub_wire_parse() said OK). A JOIN is reassembled by
 * (source, rank, job name); a new one takes a free entry, else the oldest gives way (its worker
 * sends it again). Its JOIN_TIMEOUT clock starts at its first datagram.
 */
enum phub_control_join_result phub_control_joins_add(struct phub_control_joins *joins,
		const struct phub_control_addr *src, const struct phub_wire_msg *msg,
		uint64_t now_ns, struct phub_control_join *out);

/* The complete JOIN of the last _add() is handled: its entry is free again. */
void phub_control_joins_done(struct phub_control_joins *joins, const struct phub_control_addr *src,
		const struct phub_control_join *join);

/*
 * Drop the JOINs that stayed incomplete for more than timeout_ns: for each, timed_out(ctx, src,
 * about) where about is the header of its first datagram, for the ERROR JOIN_TIMEOUT that
 * protocol.md promises. Returns how many were dropped.
 */
unsigned int phub_control_joins_expire(struct phub_control_joins *joins, uint64_t now_ns,
		uint64_t timeout_ns,
		void (*timed_out)(void *ctx, const struct phub_control_addr *src,
			const struct phub_wire_msg *about), void *ctx);

/* ---- control_session.c: LEAVE, PING, liveness ---- */

/*
 * Whether the session a LEAVE or PING names is one the PBox holds, checked as the data path
 * checks a PUSH (lib/engine's request check), with the same drop reasons in the same order:
 * the job (NULL: unknown_job), the rank, its session, the token, then the address.
 */
enum phub_drop_reason phub_control_session_check(const struct phub_engine_job *job,
		const struct phub_control_addr *src, const struct phub_wire_msg *msg);

/* How many sessions that left are remembered, for a LEAVE sent again (TCP's TIME_WAIT). */
#define PHUB_CONTROL_RECENT_LEAVES 64

/* A session that left. */
struct phub_control_left {
	uint64_t token;
	uint32_t job_id;
	uint32_t ipv4;
	uint16_t udp_port;
	uint16_t rank;
	bool used;
};

/* The sessions that left lately, a ring. Zeroed is empty. */
struct phub_control_leaves {
	struct phub_control_left recent[PHUB_CONTROL_RECENT_LEAVES];
	unsigned int next;
};

/* What to do with a LEAVE. */
struct phub_control_leave_verdict {
	bool ack;			/* answer LEAVE_ACK */
	bool left;			/* the session ended now (else: a repeat, or a drop) */
	int remaining;			/* when left: ranks still joined (0: free the job) */
	enum phub_drop_reason drop;	/* when !ack: the reason to count */
};

/*
 * The one LEAVE behaviour: only the address that joined ends its session (LEAVE_ACK); a LEAVE
 * sent again for a session that left lately is ACKed again; any other LEAVE is dropped without
 * an answer and counted under the reason a PUSH would get. job: the job msg->job_id names, or
 * NULL.
 */
void phub_control_leave(struct phub_control_leaves *leaves, struct phub_engine_job *job,
		const struct phub_control_addr *src, const struct phub_wire_msg *msg,
		struct phub_control_leave_verdict *verdict);

/* Fill ack (a LEAVE_ACK header) for msg. */
void phub_control_leave_ack(const struct phub_wire_msg *msg, struct phub_wire_msg *ack);

/*
 * A PING: 0 when it is a keep-alive of a session held (or names none: token 0), counted as
 * hearing from the rank; else the ERROR code that makes the worker JOIN again: UNKNOWN_JOB when
 * the job or the rank's session is gone (the PBox restarted, the job ended), BAD_SESSION when
 * the rank has another session now.
 */
uint16_t phub_control_ping(struct phub_engine_job *job, const struct phub_control_addr *src,
		const struct phub_wire_msg *msg);

/* Fill pong (a PONG header echoing msg) for a PING that phub_control_ping() took. */
void phub_control_pong(const struct phub_wire_msg *msg, struct phub_wire_msg *pong);

/*
 * One neighbour of a ring job (control_ring.c): what its RING_HELLO(_ACK) said, and when to
 * offer ours again. In a ring of two, prev and next are the same PBox and both links take its
 * HELLO.
 */
struct cring_link {
	uint16_t peer;			/* index in params.ring_peers */
	uint16_t pos;			/* its ring position */
	bool known;			/* its HELLO(_ACK) came */
	uint64_t token;			/* its own: what our ring datagrams to it carry */
	uint32_t job_id;		/* its id of the job: what our datagrams to it carry */
	struct phub_engine_peer data;	/* its first data endpoint, MAC from its HELLO's frame */
	uint8_t mac[6];			/* where our HELLOs go once known (broadcast before) */
	uint64_t heard_ns;		/* its newest HELLO(_ACK); the job's creation before */
	uint64_t next_hello_ns;		/* when ours goes out again */
	/* Its newest checkpoint file of the job, as its HELLO says (NONE: none, or not said). */
	uint32_t newest_ckpt;
};

/*
 * An authenticated ring job's handshake state (control_ring_auth.c): the ring's PSK, our
 * ephemeral key pair per neighbour (slot: PHUB_ENGINE_RING_PREV or _NEXT; one in a ring of
 * two), the number of our newest HELLO, and per neighbour its key and newest HELLO taken.
 */
struct cring_auth {
	bool on;
	uint8_t ring_psk[PHUB_AUTH_KEY_LEN];
	uint8_t pk[2][PHUB_AUTH_PK_LEN];
	uint8_t sk[2][PHUB_AUTH_SK_LEN];
	uint64_t hello_seq;
	bool keyed[2];
	uint8_t peer_pk[2][PHUB_AUTH_PK_LEN];
	uint64_t hello_top[2];
};

/* A ring job's control state (zero for other jobs). */
struct cring {
	const struct phub_control_declared_job *decl;	/* NULL: not a ring job */
	uint16_t pos;
	uint64_t token;			/* ours: what ring datagrams to us carry */
	struct cring_link prev, next;
	bool linked;			/* phub_engine_job_ring_peers() done */
	bool draining;			/* every worker left: ends once the ring is quiet */
	uint64_t drain_since_ns;
	/*
	 * Restores (control_ring_restore.c): a job restored from its checkpoint of iteration
	 * `base`, at this PBox's start or because a neighbour restarted, and the generation of
	 * the ring's state it belongs to (0: restored at start and not yet given one by a
	 * neighbour; a job created by JOINs is not restored, generation 0).
	 */
	bool restored;
	uint32_t generation;
	uint32_t base;
	struct cring_auth auth;
};

/* Membership changes an elastic job keeps (WORLD's change counts them in 16 bits). */
#define CONTROL_MAX_CHANGES 1024

/*
 * What the control plane keeps per job, by engine slot (phub_engine_job_slot()). A rank found
 * silent is waited on: the job ends only when the next check finds the same, so that one racy
 * look at the slots never ends a job. A job without any joined rank is an orphan since the
 * first check that found it so. Ranks here are the engine's local ones.
 */
struct cjob {
	struct phub_engine_job *job;
	struct phub_control_decl decl;
	uint64_t memory_bytes;
	uint16_t rank_port[PHUB_ENGINE_MAX_WORKERS];	/* where each rank's JOIN came in */
	uint8_t rank_mac[PHUB_ENGINE_MAX_WORKERS][6];
	bool suspect_seen;
	uint16_t suspect_rank;
	bool orphan_seen;
	uint64_t orphan_since_ns;
	struct cring ring;
	/*
	 * Elastic jobs: the membership changes, in order (change c is change_rank[c - 1] removed
	 * or readmitted from change_iteration[c - 1]), and the last change each rank acknowledged
	 * (WORLD_ACK); WORLD goes again every liveness period to a rank behind. At most
	 * CONTROL_MAX_CHANGES per job: a rank dying past them ends the job as "fail" would.
	 */
	uint16_t changes;
	uint16_t change_rank[CONTROL_MAX_CHANGES];
	uint32_t change_iteration[CONTROL_MAX_CHANGES];
	uint16_t world_acked[PHUB_ENGINE_MAX_WORKERS];
};

/* The MAC and port of recent JOIN sources, for the ERROR JOIN_TIMEOUT of one left incomplete. */
struct join_source {
	struct phub_control_peer peer;
	bool used;
};

struct phub_control {
	struct phub_control_params p;
	struct phub_control_joins *joins;
	struct join_source *sources;
	unsigned int sources_next;
	struct phub_control_leaves leaves;
	struct cjob jobs[PHUB_ENGINE_MAX_JOBS];
	uint64_t memory_bytes;
	uint64_t liveness_ns;
	struct phub_control_stats stats;
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	/* phub_control_ckpt_attach(): where a ring job goes back to when a neighbour restarted. */
	struct {
		const struct phub_control_ckpt_dir *dir;
		const struct phub_engine_ckpt_restore_params *rp;
		void (*restored)(void *ctx, struct phub_engine_job *job,
				const struct phub_engine_ckpt_info *info, const char *file);
		void *ctx;
	} ckpt;
	/* Authenticated jobs (control_auth.c): the JOIN being handled, and its answer's keys. */
	bool auth_join;
	uint8_t auth_wpk[PHUB_AUTH_PK_LEN];
	uint8_t auth_ppk[PHUB_AUTH_PK_LEN];
	uint8_t auth_confirm[PHUB_AUTH_KEY_LEN];
	uint8_t auth_in[PHUB_WIRE_MAX_DATAGRAM];	/* a JOIN with its nonce put back */
	uint8_t auth_out[PHUB_WIRE_MAX_DATAGRAM];	/* a control datagram sealed */
};

/* ---- control_jobs.c: the jobs, and the way out ---- */

/* One line of log through ops->log (nothing when it is NULL). */
void control_log(struct phub_control *ctl, enum phub_control_log_level level, const char *fmt,
		...) __attribute__((format(printf, 3, 4)));
const struct phub_control_params *control_params(const struct phub_control *ctl);
uint64_t control_now_ns(const struct phub_control *ctl);
void control_send(struct phub_control *ctl, const struct phub_control_peer *to, const void *buf,
		size_t len);
/* ERROR code about msg to a peer, logged; the text is formatted. */
void control_send_error(struct phub_control *ctl, const struct phub_control_peer *to,
		const struct phub_wire_msg *about, uint16_t code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
struct cjob *control_cjob(struct phub_control *ctl, const struct phub_engine_job *job);
/* A job the engine made (JOIN or restore) starts counting here: its memory, its record. */
void control_cjob_start(struct phub_control *ctl, struct phub_engine_job *job);
const struct phub_control_declared_job *control_declared_find(const struct phub_control *ctl,
		const char *name);
/* The job ends to be restored from its checkpoint (ops->job_replace: its files stay). */
void control_job_replace(struct phub_control *ctl, struct phub_engine_job *job);
/*
 * Tell every joined rank of the job why it ends (ERROR code with text, about iteration), then
 * end it.
 */
void control_job_abort(struct phub_control *ctl, struct phub_engine_job *job, uint16_t code,
		uint32_t iteration, const char *text);
/*
 * Where rank of the job is now (its session's endpoint, through the port it joined on) and
 * its token; false when the rank holds no session. peer_flags may be NULL.
 */
bool control_rank_endpoint(const struct cjob *cj, struct phub_engine_job *job, uint16_t rank,
		struct phub_control_peer *to, uint64_t *token, uint32_t *peer_flags);

/* Segment elements for a dtype: what the MTU carries within segment_bytes, aligned. */
uint32_t phub_control_segment_elems(const struct phub_control *ctl, enum phub_dtype dtype);
/* A segment's elements at the ports' MTU with extra header bytes on every datagram. */
uint32_t control_segment_elems_room(const struct phub_control *ctl, enum phub_dtype dtype,
		unsigned int extra);
/* What the next job may take: the per-job limit within what the others leave (0: none). */
uint64_t phub_control_job_memory_limit(const struct phub_control *ctl);

/* ---- control_join.c: JOIN handled ---- */

/* A JOIN datagram (authenticated, when its job is): reassembled, then answered. */
void control_join_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg);
/* Every poll: ERROR JOIN_TIMEOUT for each JOIN that stayed incomplete too long. */
void control_join_expire(struct phub_control *ctl, uint64_t now);

/* ---- control_session.c: sessions handled ---- */

void control_leave_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg);
void control_ping_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg);
void control_world_ack_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg);
/* Every live rank of an elastic job behind its last membership change hears of the next one. */
void control_send_worlds(struct phub_control *ctl, struct phub_engine_job *job);
/*
 * Every liveness period: a rank silent while others wait on it (twice in a row) ends the job
 * or leaves an elastic one; a job whose ranks are all silent, or restored and never joined,
 * ends; a ring job's neighbours are checked (control_ring_check()).
 */
void control_liveness_check(struct phub_control *ctl, uint64_t now);

/* control_auth.c: authenticated jobs (docs/protocol.md section 8). */
/*
 * A JOIN at the control port: false when it is dropped (counted) or refused; else msg may now
 * describe a copy that carries the declared nonce, and the JOIN's ephemeral key is kept.
 */
bool control_auth_join_in(struct phub_control *ctl, const struct phub_control_peer *from,
		const uint8_t *dgram, size_t len, struct phub_wire_msg *msg);
/* Before the engine joins the rank: the session keys; false when the JOIN is dropped. */
bool control_auth_join_keys(struct phub_control *ctl, struct phub_engine_job *job,
		uint16_t rank, bool live, bool same_source);
/* A JOIN_ACK datagram of an authenticated JOIN: its key and MAC; the new length or < 0. */
int control_auth_join_ack(struct phub_control *ctl, uint8_t *buf, size_t len, size_t cap);
/* Every control datagram out: sealed when it is for an authenticated session; 0: not sent. */
size_t control_auth_out(struct phub_control *ctl, const void **buf, size_t len);
/* LEAVE, PING, WORLD_ACK in: false when dropped (counted). */
bool control_auth_in(struct phub_control *ctl, const uint8_t *dgram,
		const struct phub_wire_msg *msg);
uint32_t control_auth_segment_elems(const struct phub_control *ctl, enum phub_dtype dtype);
/* The RING_HELLO nonce field of a declared job: its nonce, or with auth a proof of it. */
uint64_t control_auth_ring_nonce(const struct phub_control_declared_job *d);

/* control_ring.c: the ring of PBoxes. */
/*
 * A declared ring job's engine parameters: this rack's ranks as world size, the ring's shape
 * and this rack's first global rank. NULL ring for a job without racks.
 */
void control_ring_job_params(const struct phub_control *ctl,
		const struct phub_control_declared_job *d, struct phub_engine_job_params *p,
		struct phub_engine_ring_params *ring);
/* A new ring job's links: HELLOs go out at the next poll. */
void control_ring_start(struct phub_control *ctl, struct cjob *cj,
		const struct phub_control_declared_job *d);
/* An ERROR RANK_RANGE naming the rack that holds a JOIN's rank, when it is not this one's. */
bool control_ring_rank_refused(struct phub_control *ctl, const struct phub_control_peer *to,
		const struct phub_wire_msg *msg, const struct phub_wire_join *join);
/* RING_HELLO and RING_HELLO_ACK. */
void control_ring_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const uint8_t *dgram, const struct phub_wire_msg *msg);
/* Every poll: the HELLOs that are due. */
void control_ring_poll(struct phub_control *ctl, uint64_t now);
/*
 * The last worker of a ring job left: true when the job is a ring job, which stays (draining)
 * until its ring has been quiet a while, for the neighbours' last steps (control_ring_check()).
 */
bool control_ring_drain(struct phub_control *ctl, struct phub_engine_job *job);
/*
 * Liveness of a ring job's neighbours: true when it ended the job (a peer silent or new, or a
 * drained job).
 */
bool control_ring_check(struct phub_control *ctl, struct cjob *cj, uint64_t now);

/* control_ckpt.c: restore the job name from its file of iteration; NULL (logged) if none. */
struct phub_engine_job *control_ckpt_restore_at(struct phub_control *ctl, const char *name,
		uint32_t iteration);
/*
 * The newest file of the job name in the attached directory at or before at_most (any when
 * at_most is PHUB_WIRE_RING_HELLO_NONE): true and its iteration, or false.
 */
bool control_ckpt_newest(const struct phub_control *ctl, const char *name, uint32_t at_most,
		uint32_t *iteration);

/* control_ring_restore.c: a ring job across a PBox restart (docs/hierarchy.md). */
/* A ring job restored at start from its checkpoint of base: it has no generation yet. */
void control_ring_restored(struct cjob *cj, uint32_t base);
/* The state trailer of our HELLO, when this PBox keeps checkpoints. */
void control_ring_hello_restore_fill(const struct phub_control *ctl, const struct cring *r,
		struct phub_wire_ring_hello *h);
enum control_ring_verdict {
	CONTROL_RING_LINK,	/* take the HELLO as a link (the token may have changed) */
	CONTROL_RING_IGNORE,	/* not now: the neighbour follows ours when it hears it */
	CONTROL_RING_GONE,	/* the job was replaced or ended: nothing more to do with it */
};
/* What a HELLO(_ACK) from neighbour link l means for the ring's generation and checkpoint. */
enum control_ring_verdict control_ring_restore_hello(struct phub_control *ctl, struct cjob *cj,
		struct cring_link *l, const struct phub_wire_ring_hello *h);
/* control_ring.c: the job ends, with an ERROR naming the neighbour l to every worker. */
void control_ring_fail(struct phub_control *ctl, struct cjob *cj, const struct cring_link *l,
		const char *why);

/* control_ring_auth.c: an authenticated ring's RING_HELLO (docs/protocol.md section 12). */
/* At the ring job's start: its keys' material when the job requires auth. */
void control_ring_auth_start(struct cring *r);
void control_ring_auth_end(struct cring *r);
/* Our HELLO (len bytes in buf, cap of room) to link l sealed: the new length, or < 0. */
int control_ring_auth_seal(struct cring *r, const struct cring_link *l, uint8_t *buf,
		size_t len, size_t cap);
/*
 * A HELLO from the neighbour of link l, before anything of the job changes: PHUB_DROP_OK, or
 * why it is dropped (counted by the caller, never answered).
 */
enum phub_drop_reason control_ring_auth_check(const struct cring *r, const struct cring_link *l,
		const uint8_t *dgram, const struct phub_wire_msg *msg,
		const struct phub_wire_ring_hello *h);
/* The HELLO was taken for link l: its key, and the link's keys in the engine if new. */
int control_ring_auth_take(struct phub_control *ctl, struct cjob *cj, const struct cring_link *l,
		const uint8_t *dgram, const struct phub_wire_msg *msg);

#endif /* PHUB_CONTROL_PRIV_H */
