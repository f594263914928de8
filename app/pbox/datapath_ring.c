/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ring of PBoxes on the data lcores (docs/hierarchy.md): a segment's ring steps as
 * RING_REDUCE and RING_GATHER frames to the next PBox, the ring datagrams from the previous one
 * taken by the engine and acknowledged a turn at a time (RING_ACKV), the acknowledgements from
 * the next one shared among the lcores that own their chunks, the held steps an ACK releases.
 */

#include <string.h>

#include "datapath_priv.h"
/*
 * Segments an ACK's release of window-held ring steps looks at, at most: held steps sit in
 * the segments whose rack sums came last, in a run from the cursor; the bound keeps an ACK
 * cheap when the held ones are another lcore's.
 */
#define PBOX_RING_RELEASE_VISITS 256

/* An authenticated ring's windows take any neighbour's sending lanes: one per lcore at most. */
_Static_assert(PHUB_ENGINE_RING_AUTH_CHANNELS >= RTE_MAX_LCORE,
	"a neighbour's data lcores outnumber the ring's replay windows");

uint16_t
pbox_ring_udp_port(const struct pbox *pb, uint16_t port)
{
	return pb->lcores[pb->lcore_index[pb->cfg.ports[port].lcores[0]]].udp_port;
}

/*
 * The port that reaches a ring peer's data address: the one whose subnet holds it (the spine),
 * else the port configured for the peer of that address, else the first.
 */
static uint16_t
ring_tx_port(uint32_t ipv4)
{
	for (uint16_t p = 0; p < pbox.n_ports; p++) {
		uint8_t len = pbox.cfg.ports[p].prefix_len;
		uint32_t mask = len == 0 ? 0 : ~UINT32_C(0) << (32 - len);

		if (((ipv4 ^ pbox.ports[p].ipv4) & mask) == 0)
			return p;
	}
	for (uint16_t i = 0; i < pbox.cfg.n_peers; i++)
		if (pbox.cfg.peers[i].ipv4 == ipv4)
			return pbox.cfg.peers[i].port_index;
	return 0;
}

/* One ring step's part of a segment, as a RING_REDUCE or RING_GATHER frame to the next PBox. */
static struct rte_mbuf *
ring_frame(struct pbox_lcore *lc, uint16_t port, const struct phub_engine_ring_link *next,
		const struct phub_wire_msg *hdr, const float *payload, struct phub_engine_job *auth)
{
	/* An authenticated ring's (auth: its job): the AUTH trailer, sealed on this lane. */
	uint16_t hl = (uint16_t)(PHUB_WIRE_HDR_LEN +
			(auth != NULL ? PHUB_WIRE_AUTH_TRAILER_LEN : 0));
	uint16_t head = (uint16_t)(L2_L3_L4_LEN + hl);
	struct rte_mbuf *m = rte_pktmbuf_alloc(lc->pool);
	uint8_t *p;

	if (unlikely(m == NULL))
		return NULL;
	p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(head + hdr->payload_len));
	if (unlikely(p == NULL))
		goto err;
	phub_net_udp_build(m, &pbox.ports[port].mac,
			(const struct rte_ether_addr *)next->peer.mac, pbox.ports[port].ipv4,
			next->peer.ipv4, pbox_ring_udp_port(&pbox, port), next->peer.udp_port,
			(uint16_t)(hl + hdr->payload_len));
	if (unlikely(phub_wire_hdr_encode(p + L2_L3_L4_LEN, hl, hdr, 0) < 0)) {
		lc->stats.encode_errors++;
		goto err;
	}
	memcpy(p + head, payload, hdr->payload_len);
	if (auth != NULL && !phub_engine_ring_auth_tx(auth, PHUB_ENGINE_RING_NEXT, lc->data_index,
			p + L2_L3_L4_LEN, hl, p + head, hdr->payload_len)) {
		lc->engine_stats.drops[PHUB_DROP_NOT_JOINED]++;
		goto err;
	}
	phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + hl),
			phub_net_raw_cksum(payload, hdr->payload_len));
	return m;
err:
	rte_pktmbuf_free(m);
	return NULL;
}

/*
 * The ring steps of one segment to the next PBox (engine reply RING_SEND or a retransmission):
 * one datagram per step (a whole segment, or 1/R of one for a split ring), fp32, from this
 * PBox's ring address on the port that reaches it.
 * Before the control plane has linked the ring the engine holds the steps back (the scan
 * sends them once it has); a link that went away in between drops them here, unacknowledged.
 */
void
send_ring(struct pbox_lcore *lc, struct phub_engine_job *job,
		const struct phub_engine_ring_send *what)
{
	struct phub_engine_ring_params rp;
	struct phub_engine_ring_link next;
	struct phub_wire_msg hdr;
	uint16_t port;

	if (!phub_engine_job_ring(job, &rp, NULL, &next) || next.token == 0)
		return;
	port = ring_tx_port(next.peer.ipv4);
	phub_wire_msg_init(&hdr, PHUB_WIRE_OP_RING_REDUCE);
	hdr.job_id = next.job_id;	/* the next PBox's id of the job */
	hdr.session_token = next.token;
	hdr.worker_rank = rp.pos;
	hdr.chunk_id = what->chunk_id;
	hdr.iteration = what->iteration;
	hdr.dtype = PHUB_DTYPE_FP32;
	if (unlikely(phub_engine_job_ring_auth(job)))
		hdr.flags |= PHUB_WIRE_F_AUTH;
	for (unsigned int step = 0; step < phub_ring_steps(rp.racks); step++) {
		uint32_t off, count;
		struct rte_mbuf *m;

		if ((what->steps & (1u << step)) == 0)
			continue;
		phub_ring_seg_part(rp.racks, what->elem_count, what->root,
				phub_ring_send_part(rp.racks, rp.pos, step), &off, &count);
		if (count == 0)
			continue;	/* an empty part: both ends skip its step */
		hdr.opcode = phub_ring_step_is_reduce(rp.racks, step) ? PHUB_WIRE_OP_RING_REDUCE :
			PHUB_WIRE_OP_RING_GATHER;
		hdr.elem_offset = what->elem_offset + off;
		hdr.elem_count = count;
		hdr.aux = step;
		hdr.payload_len = (uint16_t)(count * sizeof(float));
		hdr.payload = (const uint8_t *)(what->sum + off);
		m = ring_frame(lc, port, &next, &hdr, what->sum + off,
				(hdr.flags & PHUB_WIRE_F_AUTH) ? job : NULL);
		if (unlikely(m == NULL)) {
			lc->engine_stats.drops[PHUB_DROP_NO_BUFFER]++;
			continue;
		}
		lc->stats.ring_out++;
		lc->stats.ring_out_bytes += hdr.payload_len;
		tx_any(lc, port, m);
	}
}

/* The MODEL broadcast of a segment whose ring completed, to this rack's workers. */
static void
send_ring_model(struct pbox_lcore *lc, struct phub_engine_job *job, const struct rx_frame *f,
		const struct phub_engine_reply *reply, uint16_t tx_port)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);
	uint32_t seg_elems = phub_layout_segment_elems(layout);
	struct phub_layout_chunk chunk;
	struct phub_wire_msg about;

	phub_layout_chunk_get(layout, f->msg.chunk_id, &chunk);
	/* The ring datagram carried one part: the MODEL is the whole segment holding it. */
	phub_wire_msg_init(&about, PHUB_WIRE_OP_MODEL);
	about.job_id = f->msg.job_id;
	about.chunk_id = f->msg.chunk_id;
	about.seg_index = (uint16_t)(f->msg.elem_offset / seg_elems);
	about.seg_count = (uint16_t)chunk.n_segments;
	about.elem_offset = about.seg_index * seg_elems;
	about.flags = about.seg_index + 1u == chunk.n_segments ? PHUB_WIRE_F_LAST : 0;
	send_model(lc, job, &about, reply, tx_port, true);
}

bool
ring_poll_owns(void *arg, uint32_t server)
{
	const struct ring_poll_ctx *c = arg;

	return server < pbox.n_servers && pbox.server_lcore_index[server] == c->lc->data_index;
}

void
ring_poll_send(void *arg, const struct phub_engine_ring_send *what)
{
	struct ring_poll_ctx *c = arg;

	send_ring(c->lc, c->job, what);
}

/*
 * An ACK opened the link's window: the ring steps it held back go now, not at the next scan
 * (a millisecond holds 12 kB of a 100 Mbit/s spine, a window's worth of a fast one).
 */
static void
ring_release(struct pbox_lcore *lc, struct phub_engine_job *job)
{
	struct ring_poll_ctx c = { .lc = lc, .job = job };

	phub_engine_ring_release(job, lc->now_ns, ring_poll_owns, ring_poll_send, &c,
			&lc->ring_release_cursor[phub_engine_job_slot(job)],
			PBOX_RING_RELEASE_VISITS);
}

/*
 * The RING_ACKV an lcore gathers over one turn of its loop: one entry per ring datagram taken
 * (or seen before) from the previous PBox, sent as one datagram when the turn's bursts are
 * served (ring_ackv_flush()), when another job's or peer's datagram comes, or when full.
 * Against one RING_ACK per datagram: a PBox's frames for the ring's acknowledgements fall from
 * one per ring datagram to one per burst. The first datagram's mbuf carries it back.
 */
struct ring_ackv {
	struct rx_frame f;		/* the first datagram acknowledged; f.m NULL: none */
	struct phub_engine_job *job;
	unsigned int n, max;
	uint8_t body[PHUB_WIRE_RING_ACKV_MAX * sizeof(struct phub_wire_ring_ack_entry)];
};

/* By lcore id: only that lcore touches its own. */
static struct ring_ackv ring_ackvs[RTE_MAX_LCORE];

/* Send the gathered RING_ACKV, if any, back to the previous PBox. */
void
ring_ackv_flush(struct pbox_lcore *lc)
{
	struct ring_ackv *a = &ring_ackvs[lc->lcore_id];
	struct phub_engine_ring_params rp;
	struct phub_engine_ring_link prev;
	struct phub_wire_msg ack;

	if (a->f.m == NULL)
		return;
	/* A datagram the engine took is of a linked ring job: our position, prev's job id. */
	phub_engine_job_ring(a->job, &rp, &prev, NULL);
	phub_wire_msg_init(&ack, PHUB_WIRE_OP_RING_ACKV);
	ack.job_id = prev.job_id;
	ack.session_token = a->f.msg.session_token;
	ack.worker_rank = rp.pos;
	ack.payload = a->body;
	ack.payload_len = (uint16_t)(a->n * sizeof(struct phub_wire_ring_ack_entry));
	lc->stats.ring_acks_out++;
	if (unlikely(phub_engine_job_ring_auth(a->job))) {
		struct auth_to auth = { .job = a->job, .rank = PBOX_AUTH_RING_PREV,
			.lane = lc->data_index };

		ack.flags |= PHUB_WIRE_F_AUTH;
		reply_in_place(lc, &a->f, a->f.port_index, &ack, &auth);
	} else {
		reply_in_place(lc, &a->f, a->f.port_index, &ack, NULL);
	}
	a->f.m = NULL;
	a->job = NULL;
}

/* One more ring datagram to acknowledge (f's mbuf is the RING_ACKV's or freed). */
static void
ring_ackv_add(struct pbox_lcore *lc, struct rx_frame *f, struct phub_engine_job *job)
{
	struct ring_ackv *a = &ring_ackvs[lc->lcore_id];
	uint32_t seg_elems = phub_layout_segment_elems(phub_engine_job_layout(job));

	if (a->f.m != NULL && (a->job != job || a->f.src_ip != f->src_ip ||
			       a->f.src_udp != f->src_udp || a->f.port_index != f->port_index ||
			       a->f.msg.session_token != f->msg.session_token || a->n == a->max))
		ring_ackv_flush(lc);
	if (a->f.m == NULL) {
		int room = phub_wire_max_payload(pbox.ports[f->port_index].mtu) -
			(phub_engine_job_ring_auth(job) ? PHUB_WIRE_AUTH_TRAILER_LEN : 0);

		a->f = *f;
		a->job = job;
		a->n = 0;
		a->max = room > 0 ?
			(unsigned int)room / sizeof(struct phub_wire_ring_ack_entry) : 1;
		if (a->max > PHUB_WIRE_RING_ACKV_MAX)
			a->max = PHUB_WIRE_RING_ACKV_MAX;
	} else {
		rte_pktmbuf_free(f->m);
	}
	phub_wire_ring_ackv_put(a->body, a->n++, &(struct phub_wire_ring_ack){
			.chunk_id = f->msg.chunk_id,
			.seg_index = (uint16_t)(f->msg.elem_offset / seg_elems),
			.iteration = f->msg.iteration, .step = f->msg.aux });
}

/*
 * An authenticated ring's MAC and replay window on link (the neighbour it came from), before
 * the engine reads anything: false when the datagram failed, dropped and counted.
 */
static bool
ring_auth_ok(struct pbox_lcore *lc, struct rx_frame *f, struct phub_engine_job *job,
		unsigned int link)
{
	enum phub_drop_reason why;

	if (likely(!phub_engine_job_ring_auth(job) && !(f->msg.flags & PHUB_WIRE_F_AUTH)))
		return true;
	why = phub_engine_ring_auth_rx(job, link, lc->data_index, f->msg.flags, f->udp_payload,
			f->msg.hdr_len, f->msg.payload, f->msg.payload_len);
	if (why == PHUB_DROP_OK)
		return true;
	wire_drop(lc, f->m, why);
	return false;
}

/* The fields every ring request takes from its datagram: who sent it, what it carries, when. */
static void
ring_request_init(struct phub_engine_ring_request *req, const struct pbox_lcore *lc,
		const struct rx_frame *f)
{
	memset(req, 0, sizeof(*req));
	req->session_token = f->msg.session_token;
	req->rank = f->msg.worker_rank;
	req->opcode = f->msg.opcode;
	req->src_ipv4 = f->src_ip;
	req->src_udp_port = f->src_udp;
	req->payload = f->msg.payload;
	req->payload_len = f->msg.payload_len;
	req->now_ns = lc->now_ns;
}

/*
 * A RING_REDUCE, RING_GATHER or RING_ACK, on the lcore that owns its chunk: the engine checks
 * it (token and source of the job's ring neighbour, step, iteration), the taken ones are
 * acknowledged in the turn's RING_ACKV, and what they complete goes on: ring steps to the next
 * PBox, MODEL to this rack's workers.
 */
void
handle_ring(struct pbox_lcore *lc, struct rx_frame *f, struct phub_engine_job *job, uint32_t server)
{
	struct phub_engine_ring_request req;
	struct phub_engine_reply reply;

	if (!ring_auth_ok(lc, f, job, f->msg.opcode == PHUB_WIRE_OP_RING_ACK ?
			PHUB_ENGINE_RING_NEXT : PHUB_ENGINE_RING_PREV))
		return;
	ring_request_init(&req, lc, f);
	req.chunk_id = f->msg.chunk_id;
	req.iteration = f->msg.iteration;
	req.elem_offset = f->msg.elem_offset;
	req.elem_count = f->msg.elem_count;
	req.step = f->msg.aux;
	req.dtype = f->msg.dtype;
	if (f->msg.opcode == PHUB_WIRE_OP_RING_ACK) {
		phub_engine_ring_receive(job, &req, &reply, &lc->engine_stats);
		rte_pktmbuf_free(f->m);
		if (reply.reason != PHUB_DROP_OK)
			return;
		lc->stats.ring_acks_in++;
		ring_release(lc, job);
		return;
	}
	phub_engine_ring_receive(job, &req, &reply, &lc->engine_stats);
	if (reply.actions == PHUB_ENGINE_DROP) {
		rte_pktmbuf_free(f->m);	/* counted by the engine under its reason */
		return;
	}
	lc->stats.ring_in++;
	lc->stats.ring_in_bytes += f->msg.payload_len;
	if (reply.actions & PHUB_ENGINE_RING_SEND)
		send_ring(lc, job, &reply.ring);
	if (reply.actions & PHUB_ENGINE_MODEL_ALL)
		send_ring_model(lc, job, f, &reply, pbox.servers[server].port);
	/* Last: the acknowledgement keeps the mbuf; the steps above no longer need its payload. */
	ring_ackv_add(lc, f, job);
}

/*
 * Hand a RING_ACKV whose entries name chunks of other data lcores to each of them (a copy
 * each): every lcore acknowledges the entries of its own chunks (phub_engine_ring_ackv()).
 */
static void
ring_ackv_hand_off(struct pbox_lcore *lc, const struct rx_frame *f,
		const struct phub_engine_job *job)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);
	/* Every data lcore a PBox can have, not the first 64 (issue 25). */
	uint64_t others[(RTE_MAX_LCORE + 63) / 64] = { 0 };
	unsigned int n = f->msg.payload_len / sizeof(struct phub_wire_ring_ack_entry);

	for (unsigned int i = 0; i < n; i++) {
		struct phub_wire_ring_ack e;
		uint32_t server;
		uint16_t owner;

		phub_wire_ring_ackv_get(f->msg.payload, i, &e);
		if (phub_layout_chunk_server(layout, e.chunk_id, &server) != 0)
			continue;	/* counted by the engine */
		owner = pbox.server_lcore_index[server];
		if (owner != lc->data_index && owner < RTE_MAX_LCORE)
			others[owner / 64] |= UINT64_C(1) << (owner % 64);
	}
	for (unsigned int w = 0; w < RTE_DIM(others); w++)
		while (others[w] != 0) {
			uint16_t owner = (uint16_t)(w * 64 + (unsigned int)__builtin_ctzll(others[w]));
			struct rte_mbuf *copy = rte_pktmbuf_copy(f->m, lc->pool, 0, UINT32_MAX);

			others[w] &= others[w] - 1;
			if (unlikely(copy == NULL)) {
				lc->engine_stats.drops[PHUB_DROP_NO_BUFFER]++;
				continue;
			}
			hand_off(lc, copy, f->port_index, owner);
		}
}

/*
 * A RING_ACKV from the next PBox: the entries of this lcore's chunks acknowledged, a copy to
 * each other lcore whose chunks it names (not again for a copy handed here), then the steps the
 * window held back go out, as after a RING_ACK.
 */
void
handle_ring_ackv(struct pbox_lcore *lc, struct rx_frame *f, bool handed)
{
	struct phub_engine_job *job = phub_engine_job_lookup(pbox.engine, f->msg.job_id);
	struct ring_poll_ctx c = { .lc = lc, .job = job };
	struct phub_engine_ring_request req;
	struct phub_engine_reply reply;

	if (job == NULL) {
		wire_drop(lc, f->m, PHUB_DROP_UNKNOWN_JOB);
		return;
	}
	/* Checked once, where it arrived: a copy handed here was (and its window moved there). */
	if (!handed && !ring_auth_ok(lc, f, job, PHUB_ENGINE_RING_NEXT))
		return;
	ring_request_init(&req, lc, f);
	phub_engine_ring_ackv(job, &req, ring_poll_owns, &c, &reply, &lc->engine_stats);
	if (reply.reason == PHUB_DROP_OK) {
		lc->stats.ring_acks_in++;
		if (!handed && pbox.n_lcores > 1)
			ring_ackv_hand_off(lc, f, job);
		ring_release(lc, job);
	}
	rte_pktmbuf_free(f->m);
}
