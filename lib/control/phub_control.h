/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane's decisions, shared by the appliance (app/pbox/control.c) and the soft PBox
 * (tests/support/soft_pbox.c): JOIN reassembly and its timeout, the checks a later rank's JOIN
 * must pass (LAYOUT_MISMATCH for every declared field), and the one answer to LEAVE and PING.
 * Plain C over lib/engine and lib/wire: no DPDK, no clock of its own (the caller passes now_ns),
 * no I/O; the adapters send what it decides.
 */

#ifndef PHUB_CONTROL_H
#define PHUB_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/phub_engine.h"
#include "wire/phub_wire.h"

/* Where a control datagram came from (host byte order): the session's address. */
struct phub_control_addr {
	uint32_t ipv4;
	uint16_t udp_port;
};

/* ---- a job's declaration ---- */

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
		const struct phub_control_addr *src, const struct phub_wire_msg *msg, uint64_t now_ns,
		struct phub_control_join *out);

/* The complete JOIN of the last _add() is handled: its entry is free again. */
void phub_control_joins_done(struct phub_control_joins *joins, const struct phub_control_addr *src,
		const struct phub_control_join *join);

/*
 * Drop the JOINs that stayed incomplete for more than timeout_ns: for each, timed_out(ctx, src,
 * about) where about is the header of its first datagram, for the ERROR JOIN_TIMEOUT that
 * protocol.md promises. Returns how many were dropped.
 */
unsigned int phub_control_joins_expire(struct phub_control_joins *joins, uint64_t now_ns,
		uint64_t timeout_ns, void (*timed_out)(void *ctx, const struct phub_control_addr *src,
			const struct phub_wire_msg *about), void *ctx);

/* ---- LEAVE and PING ---- */

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

#endif /* PHUB_CONTROL_H */
