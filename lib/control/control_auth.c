/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane's side of authenticated jobs: the JOIN's MAC and key exchange, the
 * JOIN_ACK's answer, and the MAC of every other control datagram of an authenticated session.
 */

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "control_priv.h"
#include "engine/phub_engine_auth.h"

/* Which declared job a JOIN names; NULL when it is none or does not require auth. */
static const struct phub_control_declared_job *
auth_declared(const struct phub_control *ctl, const struct phub_wire_msg *msg)
{
	const struct phub_control_declared_job *d;
	char name[PHUB_WIRE_JOB_NAME_LEN];

	/* The body parsed (phub_wire_parse() checked it): the name is its first field. */
	memcpy(name, msg->payload, sizeof(name));
	name[sizeof(name) - 1] = '\0';
	d = control_declared_find(ctl, name);
	return d != NULL && d->auth ? d : NULL;
}

bool
control_auth_join_in(struct phub_control *ctl, const struct phub_control_peer *from,
		const uint8_t *dgram, size_t len, struct phub_wire_msg *msg)
{
	const struct phub_control_declared_job *d = auth_declared(ctl, msg);
	uint8_t psk[PHUB_AUTH_KEY_LEN];
	uint64_t seq;
	bool ok;

	ctl->auth_join = false;
	if (d == NULL) {
		/* A key exchange nobody asked for: the job does not authenticate here. */
		if (msg->flags & PHUB_WIRE_F_AUTH) {
			ctl->stats.drops[PHUB_DROP_AUTH_UNEXPECTED]++;
			return false;
		}
		return true;
	}
	if (!(msg->flags & PHUB_WIRE_F_AUTH)) {
		/*
		 * A worker without auth (or an older libphub): told why, since it cannot
		 * learn more than that the job requires auth. Its nonce went in clear.
		 */
		ctl->stats.drops[PHUB_DROP_AUTH_MISSING]++;
		control_send_error(ctl, from, msg, PHUB_WIRE_ERR_UNSUPPORTED,
				"job %s requires authenticated JOIN (jobs[].auth); set "
				"PHUB_AUTH=1 or the auth option", d->name);
		return false;
	}
	phub_auth_job_psk(psk, d->name, d->nonce, d->key);
	ok = phub_auth_hs_open(psk, dgram, msg->hdr_len, dgram + msg->hdr_len, msg->payload_len,
			&seq);
	phub_auth_wipe(psk, sizeof(psk));
	if (!ok) {
		ctl->stats.drops[PHUB_DROP_AUTH_BAD_TAG]++;
		return false;
	}
	/*
	 * The JOIN proved the nonce without carrying it: the rest of the control plane (the
	 * reassembly, the engine's nonce check) sees the declared nonce in a copy.
	 */
	memcpy(ctl->auth_in, dgram, len);
	{
		struct phub_wire_join_body *b =
			(struct phub_wire_join_body *)(ctl->auth_in + msg->hdr_len);
		uint64_t be = htobe64(d->nonce);

		memcpy(&b->nonce, &be, sizeof(be));
	}
	if (phub_wire_parse(ctl->auth_in, len, msg) != PHUB_DROP_OK)
		return false;
	memcpy(ctl->auth_wpk, phub_auth_wire_pk(ctl->auth_in, msg->hdr_len), PHUB_AUTH_PK_LEN);
	ctl->auth_join = true;
	return true;
}

bool
control_auth_join_keys(struct phub_control *ctl, struct phub_engine_job *job, uint16_t rank,
		bool live, bool same_source)
{
	int rc;

	if (!phub_engine_job_auth(job)) {
		/* A job made before its config said auth (a checkpoint of an older config). */
		if (!ctl->auth_join)
			return true;
		ctl->stats.drops[PHUB_DROP_AUTH_UNEXPECTED]++;
		return false;
	}
	if (!ctl->auth_join) {
		ctl->stats.drops[PHUB_DROP_AUTH_MISSING]++;
		return false;
	}
	rc = phub_engine_job_auth_join(job, rank, ctl->auth_wpk, live, same_source, ctl->auth_ppk,
			ctl->auth_confirm);
	if (rc != 0) {
		ctl->stats.drops[rc == -EALREADY ? PHUB_DROP_AUTH_JOIN_REPLAY :
				PHUB_DROP_AUTH_BAD_TAG]++;
		return false;
	}
	return true;
}

int
control_auth_join_ack(struct phub_control *ctl, uint8_t *buf, size_t len, size_t cap)
{
	return phub_auth_wire_seal_hs(buf, len, cap, ctl->auth_ppk, ctl->auth_confirm);
}

/* The job and local rank an outgoing session datagram of an authenticated job is for. */
static struct phub_engine_job *
auth_job_of(struct phub_control *ctl, const uint8_t *dgram, size_t len, uint16_t *rank)
{
	struct phub_engine_job *job;
	struct phub_wire_hdr h;

	if (len < sizeof(h))
		return NULL;
	memcpy(&h, dgram, sizeof(h));
	/* Handshakes are sealed where they are made; ring datagrams are between PBoxes. */
	if ((h.flags & PHUB_WIRE_F_AUTH) || h.session_token == 0 ||
	    h.opcode == PHUB_WIRE_OP_JOIN_ACK || h.opcode >= PHUB_WIRE_OP_RING_FIRST)
		return NULL;
	job = phub_engine_job_lookup(ctl->p.engine, be32toh(h.job_id));
	if (job == NULL || !phub_engine_job_auth(job) ||
	    !phub_engine_job_local_rank(job, be16toh(h.worker_rank), rank))
		return NULL;
	return job;
}

size_t
control_auth_out(struct phub_control *ctl, const void **buf, size_t len)
{
	struct phub_engine_job *job;
	size_t hdr_len;
	uint16_t rank;
	int n;

	job = auth_job_of(ctl, *buf, len, &rank);
	if (job == NULL)
		return len;
	/* No keys to seal with: only the ERROR that tells a worker to JOIN again goes, plain. */
	if (!phub_engine_auth_has_keys(job, rank))
		return ((const uint8_t *)*buf)[offsetof(struct phub_wire_hdr, opcode)] ==
			PHUB_WIRE_OP_ERROR ? len : 0;
	if (*buf != ctl->auth_out)
		memcpy(ctl->auth_out, *buf, len);
	n = phub_auth_wire_extend(ctl->auth_out, len, sizeof(ctl->auth_out));
	if (n < 0)
		return 0;
	hdr_len = ctl->auth_out[offsetof(struct phub_wire_hdr, hdr_len)];
	/* Without keys nothing may go: the session would believe no answer of ours anyway. */
	if (!phub_engine_auth_tx(job, rank, PHUB_ENGINE_AUTH_LANE_CONTROL,
			PHUB_ENGINE_AUTH_LANE_CONTROL, ctl->auth_out, hdr_len,
			ctl->auth_out + hdr_len, (size_t)n - hdr_len))
		return 0;
	*buf = ctl->auth_out;
	return (size_t)n;
}

bool
control_auth_in(struct phub_control *ctl, const uint8_t *dgram, const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job;
	enum phub_drop_reason why;
	uint16_t rank;

	/* A PING without a session asks whether the PBox is there: nothing to authenticate,
	 * and a MAC nobody can check is refused (the UDP checksum pass skipped it). */
	if (msg->session_token == 0 && msg->opcode == PHUB_WIRE_OP_PING) {
		if (msg->flags & PHUB_WIRE_F_AUTH) {
			ctl->stats.drops[PHUB_DROP_AUTH_UNEXPECTED]++;
			return false;
		}
		return true;
	}
	job = phub_engine_job_lookup(ctl->p.engine, msg->job_id);
	if (job == NULL || !phub_engine_job_local_rank(job, msg->worker_rank, &rank)) {
		/*
		 * A PING for a job id gone from here: a ring job this PBox replaced by its
		 * checkpoint's restore when a ring neighbour restarted. As for a rank without
		 * keys below, the plain ERROR that names no session goes back, and the worker
		 * JOINs again (authenticated) instead of waiting for a PBox that is there.
		 */
		if (job == NULL && msg->opcode == PHUB_WIRE_OP_PING)
			return true;
		/*
		 * No job or rank to hold keys (a LEAVE sent again after the job ended): AUTH
		 * here is unverifiable and dropped; plain goes its usual way.
		 */
		if (msg->flags & PHUB_WIRE_F_AUTH) {
			ctl->stats.drops[job == NULL ? PHUB_DROP_UNKNOWN_JOB :
					PHUB_DROP_RANK_RANGE]++;
			return false;
		}
		return true;
	}
	why = phub_engine_auth_rx(job, rank, PHUB_ENGINE_AUTH_LANE_CONTROL,
			PHUB_ENGINE_AUTH_LANE_CONTROL, msg->flags, dgram, msg->hdr_len,
			dgram + msg->hdr_len, msg->payload_len);
	/*
	 * A PING of a rank that holds no keys here (a PBox restarted from its checkpoints): the
	 * ERROR that names no session goes back plain, as WireGuard's peer learns of a restart
	 * from its handshake: the worker JOINs again, which is authenticated.
	 */
	if (why == PHUB_DROP_NOT_JOINED && msg->opcode == PHUB_WIRE_OP_PING)
		return true;
	if (why != PHUB_DROP_OK) {
		ctl->stats.drops[why]++;
		return false;
	}
	return true;
}

uint64_t
control_auth_ring_nonce(const struct phub_control_declared_job *d)
{
	uint8_t psk[PHUB_AUTH_KEY_LEN];
	uint64_t proof;

	if (!d->auth)
		return d->nonce;
	phub_auth_job_psk(psk, d->name, d->nonce, d->key);
	proof = phub_auth_ring_proof(psk);
	phub_auth_wipe(psk, sizeof(psk));
	return proof;
}

uint32_t
control_auth_segment_elems(const struct phub_control *ctl, enum phub_dtype dtype)
{
	return control_segment_elems_room(ctl, dtype, PHUB_WIRE_AUTH_TRAILER_LEN);
}
