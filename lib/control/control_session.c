/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A session after its JOIN: LEAVE (one behaviour: the session's own address only, a repeat
 * ACKed again), PING, and liveness: a rank silent while others wait on it ends the job, or is
 * removed from an elastic one (WORLD to the others until each WORLD_ACKs); a job whose ranks
 * are all silent, or that was restored and that nobody JOINed, ends.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "control_priv.h"

/* ---- the checks and answers ---- */

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

/* ---- LEAVE, PING, WORLD_ACK ---- */

void
control_leave_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(ctl->p.engine, msg->job_id);
	struct phub_control_addr src = { .ipv4 = from->ipv4, .udp_port = from->udp_port };
	struct phub_control_leave_verdict v;
	struct phub_wire_msg ack;
	const void *out = ctl->buf;
	size_t n = 0;
	int len;

	/* A LEAVE refused is counted like a PUSH refused: LEAVEs of guessed sessions show. */
	phub_control_leave(&ctl->leaves, job, &src, msg, &v);
	if (!v.ack) {
		ctl->stats.drops[v.drop]++;
		return;
	}
	phub_control_leave_ack(msg, &ack);
	if (!v.left)
		ack.flags |= PHUB_WIRE_F_REPLAY;	/* the first LEAVE_ACK was lost */
	len = phub_wire_encode(ctl->buf, sizeof(ctl->buf), &ack);
	/* Sealed while the job (and an authenticated session's keys) is still there. */
	if (len > 0)
		n = control_auth_out(ctl, &out, (size_t)len);
	if (v.left) {
		control_log(ctl, PHUB_CONTROL_LOG_INFO, "job id %u: rank %u left, %d still joined",
				msg->job_id, msg->worker_rank, v.remaining);
		/*
		 * Before the answer: a worker that has its LEAVE_ACK finds the job gone. A ring
		 * job drains first: its neighbours may still need its last ring steps.
		 */
		if (v.remaining == 0 && !control_ring_drain(ctl, job))
			phub_control_job_end(ctl, job);
	}
	if (n != 0)
		control_send(ctl, from, out, n);
	ctl->stats.leaves++;
}

/* The change after the last one rank acknowledged, to it: WORLD. */
static void
send_world(struct phub_control *ctl, struct phub_engine_job *job, uint16_t rank)
{
	struct cjob *cj = control_cjob(ctl, job);
	uint16_t change = (uint16_t)(cj->world_acked[rank] + 1u);
	uint16_t who = cj->change_rank[change - 1u];
	uint32_t from = cj->change_iteration[change - 1u];
	struct phub_control_peer to;
	struct phub_wire_msg m;
	uint32_t peer_flags;
	uint64_t token;
	int len;

	if (!control_rank_endpoint(cj, job, rank, &to, &token, &peer_flags))
		return;
	phub_wire_msg_init(&m, PHUB_WIRE_OP_WORLD);
	m.job_id = phub_engine_job_id(job);
	m.session_token = token;
	m.worker_rank = (uint16_t)(phub_engine_job_rank_base(job) + rank);
	m.iteration = from;
	m.aux = PHUB_WIRE_WORLD_AUX(change, phub_engine_job_rank_base(job) + who);
	if (peer_flags & PHUB_ENGINE_PEER_F_CSUM)
		m.flags |= PHUB_WIRE_F_CSUM;
	len = phub_wire_encode(ctl->buf, sizeof(ctl->buf), &m);
	if (len > 0) {
		control_send(ctl, &to, ctl->buf, (size_t)len);
		ctl->stats.worlds_sent++;
	}
}

/* Every live rank behind the job's last change hears of the next one. */
void
control_send_worlds(struct phub_control *ctl, struct phub_engine_job *job)
{
	struct cjob *cj = control_cjob(ctl, job);

	for (uint16_t r = 0; r < phub_engine_job_world_size(job); r++)
		if (cj->world_acked[r] < cj->changes && !phub_engine_job_rank_removed(job, r, NULL))
			send_world(ctl, job, r);
}

void
control_world_ack_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(ctl->p.engine, msg->job_id);
	struct phub_control_addr src = { .ipv4 = from->ipv4, .udp_port = from->udp_port };
	uint16_t change = PHUB_WIRE_WORLD_CHANGE(msg->aux);
	struct cjob *cj;
	uint16_t rank;

	/* Only the session's own address acknowledges, and only a change that was made. */
	if (job == NULL || phub_control_session_check(job, &src, msg) != PHUB_DROP_OK ||
	    !phub_engine_job_local_rank(job, msg->worker_rank, &rank)) {
		ctl->stats.drops[PHUB_DROP_BAD_TOKEN]++;
		return;
	}
	cj = control_cjob(ctl, job);
	if (change == 0 || change > cj->changes || change <= cj->world_acked[rank])
		return;
	cj->world_acked[rank] = change;
	ctl->stats.world_acks++;
	/* The next change at once, if there is one. */
	if (change < cj->changes)
		send_world(ctl, job, rank);
}

void
control_ping_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(ctl->p.engine, msg->job_id);
	struct phub_control_addr src = { .ipv4 = from->ipv4, .udp_port = from->udp_port };
	struct phub_wire_msg pong;
	uint16_t code;
	int len;

	ctl->stats.pings++;
	code = phub_control_ping(job, &src, msg);
	if (code == PHUB_WIRE_ERR_BAD_SESSION) {
		control_send_error(ctl, from, msg, code,
				"rank %u of job id %u has another session now",
				msg->worker_rank, msg->job_id);
		return;
	}
	if (code != 0) {
		control_send_error(ctl, from, msg, code,
				"no session of rank %u in job id %u here (the "
				"PBox restarted, or the job ended): JOIN again", msg->worker_rank,
				msg->job_id);
		return;
	}
	phub_control_pong(msg, &pong);
	len = phub_wire_encode(ctl->buf, sizeof(ctl->buf), &pong);
	if (len > 0)
		control_send(ctl, from, ctl->buf, (size_t)len);
}

/* ---- liveness ---- */

/*
 * End a job whose rank has been silent for worker_dead_ms while others wait on it: every
 * joined rank learns why (ERROR WORKER_TIMEOUT), then the job ends as after the last LEAVE.
 */
static void
job_timeout(struct phub_control *ctl, struct phub_engine_job *job, uint16_t dead,
		uint64_t silent_ms, uint32_t iteration)
{
	uint32_t rank = phub_engine_job_rank_base(job) + dead;	/* as the workers know it */
	struct phub_engine_job_info info;
	struct phub_engine_rank_status st;
	char text[PHUB_WIRE_ERROR_MSG_MAX];
	const char *why = "";

	phub_engine_job_get_info(job, &info);
	/* A rank that is not joined never came, or left before the others were done. */
	if (phub_engine_job_rank_status(job, dead, &st) == 0 && !st.joined)
		why = " (not joined)";
	control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s (id %u): rank %u silent for %" PRIu64
			" ms%s while iteration %u waits on it (timeouts.worker_dead_ms %u): the "
			"job ends",
			info.name, info.job_id, rank, silent_ms, why, iteration,
			ctl->p.worker_dead_ms);
	snprintf(text, sizeof(text), "rank %u silent for %" PRIu64 " ms%s", rank, silent_ms, why);
	control_job_abort(ctl, job, PHUB_WIRE_ERR_WORKER_TIMEOUT, iteration, text);
}

/*
 * An elastic job goes on without a rank that has been silent for worker_dead_ms while others
 * wait on it: the engine removes it, the others learn the new world size (WORLD). False when
 * it cannot (the rank has not passed the initial-model round): the job ends as a "fail" one.
 */
static bool
job_remove_rank(struct phub_control *ctl, struct phub_engine_job *job, uint16_t dead,
		uint64_t silent_ms)
{
	struct cjob *cj = control_cjob(ctl, job);
	struct phub_engine_job_info info;
	uint32_t from;
	int rc;

	if (cj->changes >= CONTROL_MAX_CHANGES)
		return false;
	rc = phub_engine_job_rank_remove(job, dead, &from);
	if (rc != 0)
		return false;
	cj->change_rank[cj->changes] = dead;
	cj->change_iteration[cj->changes++] = from;
	ctl->stats.ranks_removed++;
	phub_engine_job_get_info(job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "job %s (id %u): rank %u silent for %" PRIu64
			" ms (timeouts.worker_dead_ms %u): removed from iteration %u on "
			"(on_worker_dead continue); %u of %u ranks go on", info.name, info.job_id,
			phub_engine_job_rank_base(job) + dead, silent_ms, ctl->p.worker_dead_ms,
			from, info.live, info.world_size);
	control_send_worlds(ctl, job);
	if (info.joined == 0)
		phub_control_job_end(ctl, job);
	return true;
}

/* The silent rank others wait on, if any: the one silent the longest, for more than dead_ns. */
static bool
job_find_dead(const struct phub_engine_job *job, uint64_t dead_ns, uint16_t *dead,
		uint64_t *silent_ns, uint32_t *iteration)
{
	uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS];
	uint16_t world = phub_engine_job_world_size(job);
	bool any = false;

	*silent_ns = 0;
	/* The cheap test first: the slots are scanned only when someone is that silent. */
	for (uint16_t r = 0; r < world && !any; r++) {
		struct phub_engine_rank_status st;

		any = phub_engine_job_rank_status(job, r, &st) == 0 && st.silent_ns > dead_ns;
	}
	if (!any || phub_engine_job_waiting_on(job, iteration, waiting) <= 0)
		return false;
	for (uint16_t r = 0; r < world; r++) {
		struct phub_engine_rank_status st;

		if (!((waiting[r / 64] >> (r % 64)) & 1) ||
		    phub_engine_job_rank_status(job, r, &st) != 0 || st.silent_ns <= dead_ns ||
		    st.silent_ns <= *silent_ns)
			continue;
		*dead = r;
		*silent_ns = st.silent_ns;
	}
	return *silent_ns != 0;
}

static bool
job_has_session(const struct phub_engine_job *job)
{
	struct phub_engine_peer peer;
	uint64_t token;

	for (uint16_t r = 0; r < phub_engine_job_world_size(job); r++)
		if (phub_engine_job_rank(job, r, &peer, &token))
			return true;
	return false;
}

/*
 * End a job that has gone worker_dead_ms without any joined rank; true when it did. Only a job
 * restored from a checkpoint is ever in that state (a job made by a JOIN has its rank from the
 * start, and the last LEAVE or a timeout ends it); without this its memory, table slot and
 * checkpoint files would stay for good. The clock starts at the first check that finds it so.
 */
static bool
orphan_expired(struct phub_control *ctl, struct phub_engine_job *job, uint64_t now)
{
	struct cjob *cj = control_cjob(ctl, job);
	struct phub_engine_job_info info;

	/* A ring job left by its workers drains, then ends (control_ring_check()). */
	if (job_has_session(job) || cj->ring.draining) {
		cj->orphan_seen = false;
		return false;
	}
	if (!cj->orphan_seen) {
		cj->orphan_seen = true;
		cj->orphan_since_ns = now;
		return false;
	}
	if (now - cj->orphan_since_ns <= (uint64_t)ctl->p.worker_dead_ms * 1000000u)
		return false;
	phub_engine_job_get_info(job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s (id %u): restored from checkpoint, no "
			"worker joined within worker_dead_ms %u ms: freed (a worker that JOINs "
			"later starts a new job)", info.name, info.job_id, ctl->p.worker_dead_ms);
	ctl->stats.jobs_failed++;
	phub_control_job_end(ctl, job);
	return true;
}

/*
 * End a job all of whose joined ranks have been silent for more than dead_ns; true when it
 * did. Nobody waits on anybody when every worker died at an iteration boundary, so
 * job_find_dead() never names one. A live libphub worker is never that silent: it PINGs.
 */
static bool
job_abandoned(struct phub_control *ctl, struct phub_engine_job *job, uint64_t dead_ns)
{
	uint16_t world = phub_engine_job_world_size(job);
	uint64_t least_silent_ns = UINT64_MAX;
	struct phub_engine_job_info info;

	for (uint16_t r = 0; r < world; r++) {
		struct phub_engine_rank_status st;

		if (phub_engine_job_rank_status(job, r, &st) != 0 || !st.joined)
			continue;
		if (st.silent_ns <= dead_ns)
			return false;
		if (st.silent_ns < least_silent_ns)
			least_silent_ns = st.silent_ns;
	}
	if (least_silent_ns == UINT64_MAX)
		return false;	/* no joined rank: orphan_expired() decides */
	phub_engine_job_get_info(job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s (id %u): every joined rank silent for %"
			PRIu64 " ms or more (timeouts.worker_dead_ms %u) after iteration %u: the "
			"job ends",
			info.name, info.job_id, least_silent_ns / 1000000u, ctl->p.worker_dead_ms,
			info.iteration_min);
	ctl->stats.jobs_failed++;
	phub_control_job_end(ctl, job);
	return true;
}

void
control_liveness_check(struct phub_control *ctl, uint64_t now)
{
	uint64_t dead_ns = (uint64_t)ctl->p.worker_dead_ms * 1000000u;

	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct cjob *cj = &ctl->jobs[i];
		struct phub_engine_job *job = cj->job;
		uint64_t silent_ns;
		uint32_t iteration;
		uint16_t dead = 0;

		if (job == NULL || orphan_expired(ctl, job, now) ||
		    job_abandoned(ctl, job, dead_ns) || control_ring_check(ctl, cj, now))
			continue;
		/* WORLDs not yet acknowledged go again. */
		if (cj->changes != 0)
			control_send_worlds(ctl, job);
		if (!job_find_dead(job, dead_ns, &dead, &silent_ns, &iteration)) {
			cj->suspect_seen = false;
			continue;
		}
		if (!cj->suspect_seen || cj->suspect_rank != dead) {
			cj->suspect_seen = true;
			cj->suspect_rank = dead;
			continue;
		}
		cj->suspect_seen = false;
		if (phub_engine_job_elastic(job) && job_remove_rank(ctl, job, dead,
				silent_ns / 1000000u))
			continue;
		job_timeout(ctl, job, dead, silent_ns / 1000000u, iteration);
	}
}

