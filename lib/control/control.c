/* SPDX-License-Identifier: BSD-3-Clause */
/* The checks of a later rank's JOIN, and the answers to LEAVE and PING (phub_control.h). */

#include <string.h>

#include "phub_control.h"

void
phub_control_decl_from_join(struct phub_control_decl *decl, const struct phub_wire_join *join)
{
	memset(decl, 0, sizeof(*decl));
	decl->known = PHUB_CONTROL_DECL_ALL;
	decl->optimizer = join->optimizer;
	decl->hyper = join->hyper;
	decl->chunk_bytes = join->chunk_bytes;
}

void
phub_control_decl_complete(struct phub_control_decl *decl, const struct phub_wire_join *join)
{
	if (!(decl->known & PHUB_CONTROL_DECL_OPTIMIZER))
		decl->optimizer = join->optimizer;
	if (!(decl->known & PHUB_CONTROL_DECL_HYPER))
		decl->hyper = join->hyper;
	if (!(decl->known & PHUB_CONTROL_DECL_CHUNK))
		decl->chunk_bytes = join->chunk_bytes;
	decl->known = PHUB_CONTROL_DECL_ALL;
}

/* Bit for bit, as the wire carries them: the ranks' optimizers must compute the same. */
static bool
hyper_equal(const struct phub_wire_hyper *a, const struct phub_wire_hyper *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

const char *
phub_control_join_mismatch(const struct phub_engine_job *job,
		const struct phub_control_decl *decl, const struct phub_wire_join *join,
		const struct phub_wire_key *keys, uint32_t n_keys, bool deterministic)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);

	/* Workers say the whole job's world, over every rack of a ring. */
	if (join->world_size != phub_engine_job_total_world(job))
		return "world size";
	if (join->dtype != (uint8_t)phub_engine_job_dtype(job))
		return "dtype";
	if ((decl->known & PHUB_CONTROL_DECL_OPTIMIZER) && join->optimizer != decl->optimizer)
		return "optimizer";
	if ((decl->known & PHUB_CONTROL_DECL_HYPER) && !hyper_equal(&join->hyper, &decl->hyper))
		return "hyper-parameters";
	if ((decl->known & PHUB_CONTROL_DECL_CHUNK) && join->chunk_bytes != decl->chunk_bytes)
		return "chunk size";
	if (deterministic != phub_engine_job_deterministic(job))
		return "summing order (deterministic flag)";
	if (n_keys != phub_layout_key_count(layout))
		return "keys";
	for (uint32_t i = 0; i < n_keys; i++) {
		struct phub_layout_key_info info;

		if (phub_layout_key_get(layout, i, &info) != 0 || info.key_id != keys[i].key_id ||
		    info.n_elems != keys[i].elem_count)
			return "keys";
	}
	return NULL;
}

enum phub_drop_reason
phub_control_session_check(const struct phub_engine_job *job, const struct phub_control_addr *src,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_peer peer;
	uint64_t token;
	uint16_t rank;

	if (job == NULL)
		return PHUB_DROP_UNKNOWN_JOB;
	/* The worker's rank is global; a ring job's engine counts from its rack's first. */
	if (!phub_engine_job_local_rank(job, msg->worker_rank, &rank))
		return PHUB_DROP_RANK_RANGE;
	if (!phub_engine_job_rank(job, rank, &peer, &token))
		return PHUB_DROP_NOT_JOINED;
	if (token != msg->session_token)
		return PHUB_DROP_BAD_TOKEN;
	if (peer.ipv4 != src->ipv4 || peer.udp_port != src->udp_port)
		return PHUB_DROP_WRONG_SOURCE;
	return PHUB_DROP_OK;
}

/* Whether msg is a LEAVE sent again for a session that left lately, from the same address. */
static bool
leave_is_repeat(const struct phub_control_leaves *leaves, const struct phub_control_addr *src,
		const struct phub_wire_msg *msg)
{
	for (unsigned int i = 0; i < PHUB_CONTROL_RECENT_LEAVES; i++) {
		const struct phub_control_left *ls = &leaves->recent[i];

		if (ls->used && ls->token == msg->session_token && ls->job_id == msg->job_id &&
		    ls->rank == msg->worker_rank && ls->ipv4 == src->ipv4 &&
		    ls->udp_port == src->udp_port)
			return true;
	}
	return false;
}

void
phub_control_leave(struct phub_control_leaves *leaves, struct phub_engine_job *job,
		const struct phub_control_addr *src, const struct phub_wire_msg *msg,
		struct phub_control_leave_verdict *v)
{
	enum phub_drop_reason why = phub_control_session_check(job, src, msg);
	unsigned int n;

	memset(v, 0, sizeof(*v));
	if (why != PHUB_DROP_OK) {
		/* A LEAVE_ACK lost or late: the worker sends its LEAVE again. */
		if (leave_is_repeat(leaves, src, msg))
			v->ack = true;
		else
			v->drop = why;
		return;
	}
	v->remaining = phub_engine_job_leave(job, (uint16_t)(msg->worker_rank -
			phub_engine_job_rank_base(job)), msg->session_token);
	if (v->remaining < 0) {
		v->drop = PHUB_DROP_BAD_TOKEN;	/* checked above: cannot happen */
		return;
	}
	v->ack = true;
	v->left = true;
	n = leaves->next;
	leaves->recent[n] = (struct phub_control_left){
		.token = msg->session_token, .job_id = msg->job_id, .ipv4 = src->ipv4,
		.udp_port = src->udp_port, .rank = msg->worker_rank, .used = true };
	leaves->next = (n + 1) % PHUB_CONTROL_RECENT_LEAVES;
}

void
phub_control_leave_ack(const struct phub_wire_msg *msg, struct phub_wire_msg *ack)
{
	phub_wire_msg_init(ack, PHUB_WIRE_OP_LEAVE_ACK);
	ack->job_id = msg->job_id;
	ack->session_token = msg->session_token;
	ack->worker_rank = msg->worker_rank;
	ack->iteration = msg->iteration;
}

uint16_t
phub_control_ping(struct phub_engine_job *job, const struct phub_control_addr *src,
		const struct phub_wire_msg *msg)
{
	/* A PING without a session: a worker measuring the path before it JOINs. */
	if (msg->session_token == 0)
		return 0;
	switch (phub_control_session_check(job, src, msg)) {
	case PHUB_DROP_OK:
		/* A keep-alive: alive, even while it computes and pushes nothing. */
		phub_engine_job_heard(job, (uint16_t)(msg->worker_rank -
				phub_engine_job_rank_base(job)), msg->session_token, src->ipv4,
				src->udp_port);
		return 0;
	case PHUB_DROP_BAD_TOKEN:
	case PHUB_DROP_WRONG_SOURCE:
		return PHUB_WIRE_ERR_BAD_SESSION;
	default:
		return PHUB_WIRE_ERR_UNKNOWN_JOB;
	}
}

void
phub_control_pong(const struct phub_wire_msg *msg, struct phub_wire_msg *pong)
{
	*pong = *msg;
	pong->opcode = PHUB_WIRE_OP_PONG;
	/* The PBox's own flags: no CRC asked of it, nothing retransmitted by it; its own MAC
	 * (control_send) for an authenticated session. */
	pong->flags &= (uint8_t)~(PHUB_WIRE_F_CSUM | PHUB_WIRE_F_RETRANSMIT | PHUB_WIRE_F_AUTH);
}
