/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data plane's adapter core (phub_dataplane.h): one wire-to-engine request, one ownership
 * decision, one place that maps wire ranks to local ones, one builder of each answer's header.
 */

#include <string.h>

#include "phub_dataplane.h"

enum phub_drop_reason
phub_dataplane_route(struct phub_engine *engine, const struct phub_wire_msg *msg,
		struct phub_engine_job **job, uint32_t *server)
{
	*job = phub_engine_job_lookup(engine, msg->job_id);
	if (*job == NULL)
		return PHUB_DROP_UNKNOWN_JOB;
	if (phub_layout_chunk_server(phub_engine_job_layout(*job), msg->chunk_id, server) != 0)
		return PHUB_DROP_CHUNK_RANGE;
	return PHUB_DROP_OK;
}

enum phub_drop_reason
phub_dataplane_auth_rx(struct phub_engine_job *job, const struct phub_wire_msg *msg,
		const void *dgram, uint32_t server)
{
	unsigned int lane = phub_dataplane_lane(server);
	uint16_t rank = UINT16_MAX;

	if (!phub_engine_job_auth(job) && (msg->flags & PHUB_WIRE_F_AUTH) == 0)
		return PHUB_DROP_OK;
	/* No session: the engine's check fails on rank UINT16_MAX, counted under its reason. */
	phub_engine_job_local_rank(job, msg->worker_rank, &rank);
	return phub_engine_auth_rx(job, rank, lane, (uint16_t)lane, msg->flags, dgram,
			msg->hdr_len, msg->payload, msg->payload_len);
}

bool
phub_dataplane_peer(const struct phub_engine_job *job, uint16_t wire_rank, uint16_t *rank,
		struct phub_engine_peer *peer, uint64_t *token)
{
	return phub_engine_job_local_rank(job, wire_rank, rank) &&
		phub_engine_job_rank(job, *rank, peer, token);
}

bool
phub_dataplane_rank_wants(const struct phub_engine_job *job, uint16_t wire_rank,
		uint32_t peer_flag)
{
	struct phub_engine_peer peer;
	uint64_t token;
	uint16_t rank;

	return phub_dataplane_peer(job, wire_rank, &rank, &peer, &token) &&
		(peer.flags & peer_flag) != 0;
}

bool
phub_dataplane_ack(const struct phub_engine_job *job, const struct phub_wire_msg *msg,
		struct phub_wire_msg *ack, uint16_t *rank)
{
	struct phub_engine_peer peer;
	uint64_t token;

	phub_wire_msg_init(ack, PHUB_WIRE_OP_ACK);
	ack->job_id = msg->job_id;
	ack->session_token = msg->session_token;
	ack->worker_rank = msg->worker_rank;
	ack->chunk_id = msg->chunk_id;
	ack->iteration = msg->iteration;
	ack->elem_offset = msg->elem_offset;
	ack->elem_count = msg->elem_count;
	ack->seg_index = msg->seg_index;
	ack->seg_count = msg->seg_count;
	ack->aux = msg->aux;
	ack->flags = msg->flags & PHUB_WIRE_F_LAST;
	if (!phub_dataplane_peer(job, msg->worker_rank, rank, &peer, &token))
		return false;
	if (phub_engine_job_auth(job))
		ack->flags |= PHUB_WIRE_F_AUTH;
	else if (peer.flags & PHUB_ENGINE_PEER_F_CSUM)
		ack->flags |= PHUB_WIRE_F_CSUM;
	return true;
}

void
phub_dataplane_ackv_entry(const struct phub_wire_msg *msg, struct phub_wire_ackv_entry *e)
{
	e->chunk_id = msg->chunk_id;
	e->seg_index = msg->seg_index;
	e->flags = msg->flags & PHUB_WIRE_F_LAST;
	e->iteration = msg->iteration;
	e->aux = msg->aux;
}

bool
phub_dataplane_ackv_hdr(const struct phub_ackv_pending *to, unsigned int n,
		struct phub_wire_msg *hdr, struct phub_engine_peer *peer, uint16_t *rank)
{
	uint64_t token;

	if (!phub_dataplane_peer(to->job, to->rank, rank, peer, &token))
		return false;
	phub_wire_msg_init(hdr, PHUB_WIRE_OP_ACKV);
	hdr->job_id = to->job_id;
	hdr->session_token = token;
	hdr->worker_rank = to->rank;
	hdr->payload_len = (uint16_t)(n * PHUB_WIRE_ACKV_ENTRY_LEN);
	if (phub_engine_job_auth(to->job))
		hdr->flags |= PHUB_WIRE_F_AUTH;
	else if (peer->flags & PHUB_ENGINE_PEER_F_CSUM)
		hdr->flags |= PHUB_WIRE_F_CSUM;
	return true;
}

void
phub_dataplane_elastic_about(const struct phub_engine_job *job,
		const struct phub_engine_segment_done *what, struct phub_wire_msg *about)
{
	phub_wire_msg_init(about, PHUB_WIRE_OP_MODEL);
	about->job_id = phub_engine_job_id(job);
	about->chunk_id = what->chunk_id;
	about->elem_offset = what->elem_offset;
	about->elem_count = what->reply.elem_count;
	about->seg_index = what->seg_index;
	about->seg_count = what->seg_count;
	about->flags = what->seg_index + 1u == what->seg_count ? PHUB_WIRE_F_LAST : 0;
}

void
phub_dataplane_fanout_init(struct phub_dataplane_fanout *f, struct phub_engine_job *job,
		const struct phub_wire_msg *about, const struct phub_engine_reply *reply, bool all,
		const struct phub_dataplane_ackv *ackv)
{
	uint16_t first = 0;

	/*
	 * Field by field, not one memset: of the whole struct that is a rep stos, whose start-up
	 * was half this function's time per MODEL broadcast (perf annotate, 1 KB segments).
	 */
	memset(&f->peer, 0, sizeof(f->peer));
	f->rank = 0;
	f->payload_crc = 0;
	f->acks_in_model = 0;
	f->crc_done = false;
	f->end = 0;
	f->job = job;
	f->reply = reply;
	f->ackv = *ackv;
	f->all = all;
	f->auth = phub_engine_job_auth(job);
	/* Workers carry global ranks; the engine's are its rack's, from rank_base. */
	f->base = phub_engine_job_rank_base(job);
	if (all) {
		f->end = (uint16_t)phub_engine_job_world_size(job);
	} else if (phub_engine_job_local_rank(job, about->worker_rank, &first)) {
		f->end = (uint16_t)(first + 1);
	}
	f->next = first;
	phub_wire_msg_init(&f->hdr, PHUB_WIRE_OP_MODEL);
	f->hdr.job_id = about->job_id;
	f->hdr.chunk_id = about->chunk_id;
	f->hdr.iteration = reply->iteration;
	f->hdr.elem_offset = about->elem_offset;
	f->hdr.elem_count = reply->elem_count;
	f->hdr.seg_index = about->seg_index;
	f->hdr.seg_count = about->seg_count;
	/* The job's dtype: a PULL being answered carries none of its own. */
	f->hdr.dtype = (uint8_t)phub_engine_job_dtype(job);
	f->hdr.payload_len = (uint16_t)reply->model_bytes;
	f->hdr.payload = reply->model;
	f->hdr.flags = about->flags & PHUB_WIRE_F_LAST;
	if (!all) {
		f->hdr.flags |= PHUB_WIRE_F_REPLAY;
		f->hdr.aux = about->aux;
	}
	if (f->auth)
		f->hdr.flags |= PHUB_WIRE_F_AUTH;	/* each frame sealed: no CRC */
}

bool
phub_dataplane_fanout_next(struct phub_dataplane_fanout *f)
{
	struct phub_wire_msg *hdr = &f->hdr;
	struct phub_ackv_batch *owed = f->ackv.batch;
	uint64_t token;

	/* A rank that has not joined (or left) gets nothing. */
	while (f->next < f->end && !phub_engine_job_rank(f->job, f->next, &f->peer, &token))
		f->next++;
	if (f->next >= f->end)
		return false;
	f->rank = f->next++;
	hdr->worker_rank = (uint16_t)(f->base + f->rank);
	hdr->session_token = token;
	/*
	 * A rank that takes ACKV and owes this turn an ACK of this segment: the MODEL is that
	 * ACK, and echoes the PUSH's stamp for its RTT sample.
	 */
	if (f->all) {
		hdr->aux = 0;
		if ((f->peer.flags & PHUB_ENGINE_PEER_F_ACKV) && owed != NULL && owed->live != 0 &&
		    phub_ackv_take(owed, hdr->job_id, hdr->worker_rank, hdr->chunk_id,
				hdr->seg_index, hdr->iteration, &hdr->aux))
			f->acks_in_model++;
	}
	/*
	 * The rank's other ACKs of this turn leave before a MODEL with a stamp: an answer to a
	 * later PUSH ahead of an earlier one's ACK makes the worker take that one for lost (RACK),
	 * and on a rate-limited link the turn's MODELs delay an ACKV at the turn's end by
	 * milliseconds.
	 */
	if (hdr->aux != 0 && (f->peer.flags & PHUB_ENGINE_PEER_F_ACKV) && owed != NULL &&
	    owed->live != 0)
		phub_ackv_flush_rank(owed, hdr->job_id, hdr->worker_rank, f->ackv.max_entries,
				f->ackv.send, f->ackv.arg);
	hdr->flags &= (uint8_t)~PHUB_WIRE_F_CSUM;
	if ((f->peer.flags & PHUB_ENGINE_PEER_F_CSUM) && !f->auth) {
		/* The payload's CRC once, finished with each rank's header. */
		if (!f->crc_done)
			f->payload_crc = phub_wire_csum_payload(f->reply->model,
					f->reply->model_bytes);
		f->crc_done = true;
		hdr->flags |= PHUB_WIRE_F_CSUM;
	}
	return true;
}
