/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data plane's adapter core: what a data port does with a PUSH or PULL, short of moving
 * bytes. The wire datagram's engine request, who owns its chunk, the MAC check of an
 * authenticated job, the ACK, ACKV and MODEL headers (CSUM and AUTH decided here, wire ranks
 * mapped to the engine's local ranks here) and the MODEL fan-out to a job's ranks. The
 * appliance's lcores (app/pbox) and the soft PBox's sockets (tests/support) both call it, so
 * their answers are the same bytes. No DPDK, no I/O.
 */

#ifndef PHUB_DATAPLANE_H
#define PHUB_DATAPLANE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/phub_ackv.h"
#include "engine/phub_engine.h"
#include "engine/phub_engine_auth.h"
#include "wire/phub_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The engine request of a PUSH or PULL datagram msg from src (host order), at the caller's now.
 * Inline, and one initializer rather than a memset and stores: the memset was a rep stos whose
 * start-up was most of this function's time per PUSH at 1 KB segments (perf annotate).
 */
static inline void
phub_dataplane_request(const struct phub_wire_msg *msg, uint32_t src_ipv4,
		uint16_t src_udp_port, uint64_t now_ns, struct phub_engine_request *req)
{
	*req = (struct phub_engine_request){
		.session_token = msg->session_token,
		.chunk_id = msg->chunk_id,
		.iteration = msg->iteration,
		.elem_offset = msg->elem_offset,
		.elem_count = msg->elem_count,
		.rank = msg->worker_rank,
		.seg_index = msg->seg_index,
		.seg_count = msg->seg_count,
		.dtype = msg->dtype,
		.retransmit = (msg->flags & PHUB_WIRE_F_RETRANSMIT) != 0,
		.src_ipv4 = src_ipv4,
		.src_udp_port = src_udp_port,
		.payload = msg->payload,
		.payload_len = msg->payload_len,
		.has_hyper = (msg->flags & PHUB_WIRE_F_HYPER) != 0,
		.hyper_lr = msg->hyper_lr,
		.hyper_weight_decay = msg->hyper_weight_decay,
		.now_ns = now_ns,
	};
}

/*
 * The job of a data datagram and the server (layout index: a (port, lcore) pair) that owns its
 * chunk; PHUB_DROP_UNKNOWN_JOB or PHUB_DROP_CHUNK_RANGE when there is none. One chunk, one
 * server: a datagram that reached another server's port is handled by the owner alone (the
 * appliance hands it to the owner's lcore, the soft PBox's one thread is every owner), and
 * counted as PHUB_DROP_WRONG_LCORE by the receiver.
 */
enum phub_drop_reason phub_dataplane_route(struct phub_engine *engine,
		const struct phub_wire_msg *msg, struct phub_engine_job **job, uint32_t *server);

/* The authentication lane of the datagrams of server (the worker numbers its endpoints so). */
static inline unsigned int
phub_dataplane_lane(uint32_t server)
{
	return PHUB_ENGINE_AUTH_LANE_DATA(server);
}

/*
 * An authenticated job's MAC and replay window of msg (dgram: its first byte), checked before
 * the engine reads anything; PHUB_DROP_OK for a job without keys and a datagram without AUTH.
 */
enum phub_drop_reason phub_dataplane_auth_rx(struct phub_engine_job *job,
		const struct phub_wire_msg *msg, const void *dgram, uint32_t server);

/*
 * The session of a worker that names itself wire_rank (a ring job's workers carry global
 * ranks, the engine's are its rack's): its local rank, endpoint and token. False: no session.
 */
bool phub_dataplane_peer(const struct phub_engine_job *job, uint16_t wire_rank, uint16_t *rank,
		struct phub_engine_peer *peer, uint64_t *token);

/* Whether wire_rank asked in its JOIN for a PHUB_ENGINE_PEER_F_* wish (CSUM, ACKV). */
bool phub_dataplane_rank_wants(const struct phub_engine_job *job, uint16_t wire_rank,
		uint32_t peer_flag);

/*
 * The ACK of a PUSH or PULL the engine took, header only: the datagram's fields, flag LAST as
 * it came, AUTH for an authenticated job (its MAC replaces the CRC), else CSUM when the rank
 * asked for it (phub_wire_encode() computes the CRC). rank: the sender's local rank (the
 * seal's). False: the sender has no session (then no flag but LAST).
 */
bool phub_dataplane_ack(const struct phub_engine_job *job, const struct phub_wire_msg *msg,
		struct phub_wire_msg *ack, uint16_t *rank);

/* The entry of msg's ACK in an ACKV (a rank that takes ACKV: owed until the turn's end). */
void phub_dataplane_ackv_entry(const struct phub_wire_msg *msg, struct phub_wire_ackv_entry *e);

/*
 * The header of an ACKV of n entries to the rank of to (phub_ackv_flush()'s send), its payload
 * left to the caller; peer: where it goes, rank: the engine's (the seal's). Flag AUTH for an
 * authenticated job (sealed as an ACK is), else CSUM when the rank asked. False: the rank left
 * or was replaced within the turn, its ACKs have nobody to go to.
 */
bool phub_dataplane_ackv_hdr(const struct phub_ackv_pending *to, unsigned int n,
		struct phub_wire_msg *hdr, struct phub_engine_peer *peer, uint16_t *rank);

/*
 * The segment a removed rank no longer holds up (phub_engine_elastic_poll()'s done), as the
 * datagram its MODEL to every rank left answers.
 */
void phub_dataplane_elastic_about(const struct phub_engine_job *job,
		const struct phub_engine_segment_done *what, struct phub_wire_msg *about);

/* The ACKs a turn owes (phub_ackv.h) and how the caller sends them, for a fan-out. */
struct phub_dataplane_ackv {
	struct phub_ackv_batch *batch;
	unsigned int max_entries;	/* per ACKV: what the path's MTU holds */
	phub_ackv_send_fn send;
	void *arg;
};

/*
 * A MODEL's frames, one rank after another: phub_dataplane_fanout_init(), then while
 * phub_dataplane_fanout_next() is true, one frame of hdr (payload reply->model) to peer. A MODEL
 * to every joined rank (all) or the answer from kept state to the datagram's sender (its stamp
 * echoed, flag REPLAY). A rank that takes ACKV and is owed this segment's ACK gets the MODEL as
 * that ACK (the PUSH's stamp in aux), its other owed ACKs sent first, so that no answer to a
 * later PUSH overtakes an earlier one's ACK.
 */
struct phub_dataplane_fanout {
	/* The current frame. */
	struct phub_wire_msg hdr;
	struct phub_engine_peer peer;
	uint16_t rank;			/* the engine's (local) rank: the seal's */
	uint32_t payload_crc;		/* the payload's CRC32C, when hdr.flags has CSUM */
	uint64_t acks_in_model;		/* owed ACKs a MODEL stood for */
	/* Private. */
	struct phub_engine_job *job;
	const struct phub_engine_reply *reply;
	struct phub_dataplane_ackv ackv;
	uint32_t base;
	uint16_t next, end;
	bool all, auth, crc_done;
};

void phub_dataplane_fanout_init(struct phub_dataplane_fanout *f, struct phub_engine_job *job,
		const struct phub_wire_msg *about, const struct phub_engine_reply *reply, bool all,
		const struct phub_dataplane_ackv *ackv);

bool phub_dataplane_fanout_next(struct phub_dataplane_fanout *f);

#ifdef __cplusplus
}
#endif

#endif /* PHUB_DATAPLANE_H */
