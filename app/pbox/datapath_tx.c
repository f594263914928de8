/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data lcores' answers as frames: an ACK in place (the port's template, or built in full
 * for CSUM and AUTH), the ACKVs a turn owes, and a MODEL's frames to a job's ranks, headers
 * from lib/dataplane's fan-out, copied and retargeted from the first, the payload by reference,
 * chained to one copy or copied inline. No locks, no malloc, no log.
 */

#include <string.h>

#include <rte_memory.h>

#include "datapath_priv.h"

/*
 * Reuse the received mbuf for a header-only answer (ACK) or one that echoes
 * the payload in place (PONG): the request's data is no longer needed.
 */
void
reply_in_place(struct pbox_lcore *lc, struct rx_frame *f, uint16_t tx_port,
		const struct phub_wire_msg *answer, const struct auth_to *auth)
{
	struct rte_mbuf *m = f->m;
	uint16_t hl = (uint16_t)(PHUB_WIRE_HDR_LEN + ((answer->flags & PHUB_WIRE_F_AUTH) ?
			phub_wire_auth_ext_len(answer->opcode) : 0));
	uint16_t len = (uint16_t)(hl + answer->payload_len);
	uint8_t *phub;
	int rc;

	m->data_len = (uint16_t)(L2_L3_L4_LEN + len);
	m->pkt_len = m->data_len;
	phub_net_udp_build(m, &pbox.ports[tx_port].mac, &f->src_mac, pbox.ports[tx_port].ipv4,
			f->src_ip, f->dst_udp, f->src_udp, len);
	phub = rte_pktmbuf_mtod_offset(m, uint8_t *, L2_L3_L4_LEN);
	rc = phub_wire_encode(phub, len, answer);
	if (unlikely(rc < 0)) {
		wire_drop(lc, m, PHUB_DROP_NO_BUFFER);
		return;
	}
	if (auth != NULL && !(auth->rank == PBOX_AUTH_RING_PREV ?
			phub_engine_ring_auth_tx(auth->job, PHUB_ENGINE_RING_PREV, auth->lane, phub,
				hl, phub + hl, answer->payload_len) :
			phub_engine_auth_tx(auth->job, auth->rank, auth->lane, auth->lane,
				phub, hl, phub + hl, answer->payload_len))) {
		wire_drop(lc, m, PHUB_DROP_NOT_JOINED);
		return;
	}
	phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + len), 0);
	tx_any(lc, tx_port, m);
}

static void
send_ack(struct pbox_lcore *lc, const struct phub_engine_job *job, struct rx_frame *f,
		uint16_t tx_port)
{
	struct rte_mbuf *m = f->m;
	struct phub_wire_msg ack;
	struct auth_to auth = { .job = NULL };

	if (phub_dataplane_ack(job, &f->msg, &ack, &auth.rank) &&
	    unlikely(ack.flags & PHUB_WIRE_F_AUTH)) {
		auth.job = (struct phub_engine_job *)(uintptr_t)job;
		auth.lane = auth_lane(job, f->msg.chunk_id);
	}
	/*
	 * The PUSH's frame, its IPv4 header without options, becomes the ACK in place from the
	 * port's template (ack.h): no header built and summed in full, no field encoded. Not for
	 * an authenticated session (each ACK has its own sequence number and MAC) nor a CSUM one.
	 */
	if (likely((ack.flags & (PHUB_WIRE_F_CSUM | PHUB_WIRE_F_AUTH)) == 0 &&
		   f->udp_payload == rte_pktmbuf_mtod_offset(m, const uint8_t *,
			PBOX_ACK_HDR_OFF))) {
		m->data_len = pbox_ack_rewrite(rte_pktmbuf_mtod(m, uint8_t *),
				&pbox.ports[tx_port].ack_tmpl, ack.flags);
		m->pkt_len = m->data_len;
		m->l2_len = RTE_ETHER_HDR_LEN;
		m->l3_len = sizeof(struct rte_ipv4_hdr);
		lc->stats.acks_sent++;
		tx_any(lc, tx_port, m);
		return;
	}
	lc->stats.acks_sent++;
	reply_in_place(lc, f, tx_port, &ack, auth.job != NULL ? &auth : NULL);
}

/*
 * One ACKV to one rank (phub_ackv_flush()'s send), to->port naming the server (this lcore's
 * queue on a port) that took the PUSHes: a new frame, built and summed in full, sealed on the
 * server's lane for an authenticated job.
 */
static void
ackv_send(void *arg, const struct phub_ackv_pending *to, const struct phub_wire_ackv_entry *e,
		unsigned int n)
{
	struct pbox_lcore *lc = arg;
	uint16_t port = pbox.servers[to->port].port;
	struct phub_engine_peer peer;
	struct phub_wire_msg hdr;
	struct rte_mbuf *m;
	uint16_t len, hl, rank;
	uint8_t *p;

	if (!phub_dataplane_ackv_hdr(to, n, &hdr, &peer, &rank))
		return;
	hl = (uint16_t)(PHUB_WIRE_HDR_LEN + ((hdr.flags & PHUB_WIRE_F_AUTH) ?
			phub_wire_auth_ext_len(hdr.opcode) : 0));
	len = (uint16_t)(hl + hdr.payload_len);
	m = rte_pktmbuf_alloc(lc->pool);
	if (unlikely(m == NULL)) {
		lc->engine_stats.drops[PHUB_DROP_NO_BUFFER]++;
		return;
	}
	p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(L2_L3_L4_LEN + len));
	if (unlikely(p == NULL)) {
		rte_pktmbuf_free(m);
		lc->engine_stats.drops[PHUB_DROP_NO_BUFFER]++;
		return;
	}
	hdr.payload = p + L2_L3_L4_LEN + hl;
	phub_wire_ackv_put(p + L2_L3_L4_LEN + hl, e, n);
	phub_net_udp_build(m, &pbox.ports[port].mac, (const struct rte_ether_addr *)peer.mac,
			pbox.ports[port].ipv4, peer.ipv4, lc->udp_port, peer.udp_port, len);
	if (unlikely(phub_wire_encode(p + L2_L3_L4_LEN, len, &hdr) < 0)) {
		lc->stats.encode_errors++;
		rte_pktmbuf_free(m);
		return;
	}
	if ((hdr.flags & PHUB_WIRE_F_AUTH) &&
	    !phub_engine_auth_tx(to->job, rank, phub_dataplane_lane(to->port),
			(uint16_t)phub_dataplane_lane(to->port), p + L2_L3_L4_LEN, hl,
			p + L2_L3_L4_LEN + hl, hdr.payload_len)) {
		rte_pktmbuf_free(m);
		return;
	}
	phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + len), 0);
	lc->stats.ackv_sent++;
	lc->stats.ackv_entries += n;
	tx_enqueue(lc, port, m);
}

/* Entries per ACKV: the smallest port MTU's, as the JOIN_ACK tells the workers (control.c). */
static unsigned int
ackv_max_entries(void)
{
	unsigned int mtu = UINT16_MAX;

	for (uint16_t pi = 0; pi < pbox.n_ports; pi++)
		mtu = RTE_MIN(mtu, (unsigned int)pbox.ports[pi].mtu);
	return phub_wire_ackv_max_entries(mtu);
}

/* The ACKs this turn owes, as one ACKV per rank (more when they exceed the port's MTU). */
void
ackv_flush(struct pbox_lcore *lc)
{
	if (lc->ackv.n == 0)
		return;
	phub_ackv_flush(&lc->ackv, ackv_max_entries(), ackv_send, lc);
}

/*
 * The ACK of a PUSH: at once, or, to a rank that takes ACKV (ackv: the caller asked its session
 * once per datagram), owed until the turn's end, where the ACKs of the turn leave together, or
 * are dropped if the segment's MODEL to that rank leaves first and echoes the PUSH's stamp
 * (send_model). A frame the engine kept (f->m NULL) was lent only with ackv true.
 */
void
answer_ack(struct pbox_lcore *lc, struct phub_engine_job *job, struct rx_frame *f,
		uint32_t server, bool ackv)
{
	uint16_t tx_port = pbox.servers[server].port;
	struct phub_wire_ackv_entry e;

	if (!ackv) {
		send_ack(lc, job, f, tx_port);
		return;
	}
	phub_dataplane_ackv_entry(&f->msg, &e);
	if (unlikely(phub_ackv_full(&lc->ackv)))
		ackv_flush(lc);
	phub_ackv_add(&lc->ackv, job, f->msg.job_id, f->msg.worker_rank, (uint16_t)server, &e);
	rte_pktmbuf_free(f->m);	/* NULL: kept by the engine */
}

/* The headers of a MODEL frame without the AUTH trailer: what model_head keeps and copies. */
#define MODEL_HEAD_PLAIN (L2_L3_L4_LEN + PHUB_WIRE_HDR_LEN)

/*
 * The headers of the first MODEL frame built in full in a broadcast, for the next ranks': copied
 * and retargeted (ack.h) instead of built and summed again. Only plain frames are kept (an
 * authenticated one has its own sequence number and MAC).
 */
struct model_head {
	bool valid;
	uint8_t flags;			/* the PHub flags it was built with */
	struct pbox_frame_peer peer;
	uint8_t bytes[MODEL_HEAD_PLAIN];
};

/*
 * A smaller MODEL payload is copied behind each frame's headers rather than chained: a 1 KB
 * copy from the cache costs less than the second mbuf (allocation, attach, chain, the driver's
 * second segment and its free): +9 to 11 % PUSH/s at 1 KB, best of 5 runs.
 */
#define PBOX_MODEL_CHAIN_MIN 2048

/* A broadcast's payload: the segment's new model, and how its frames carry it. */
struct model_payload {
	const void *data;
	rte_iova_t iova;		/* by reference only */
	struct rte_mbuf *copy;		/* else, on a multi-segment port: one copy they all chain */
	uint16_t len;
	bool by_ref;
};

/*
 * One MODEL frame to one rank: headers in m (from prev when it was built with the same flags,
 * else built and kept in prev), payload by reference (pl->by_ref) or copied.
 */
static struct rte_mbuf *
model_frame(struct pbox_lcore *lc, uint16_t tx_port, const struct phub_engine_peer *peer,
		const struct phub_wire_msg *hdr, const struct model_payload *pl,
		uint32_t payload_sum, uint32_t payload_crc, struct model_head *prev,
		const struct auth_to *auth)
{
	const struct pbox_port *port = &pbox.ports[tx_port];
	uint16_t hl = (uint16_t)(PHUB_WIRE_HDR_LEN +
			(auth != NULL ? PHUB_WIRE_AUTH_TRAILER_LEN : 0));
	uint16_t head = (uint16_t)(L2_L3_L4_LEN + hl);
	struct rte_mbuf *m = rte_pktmbuf_alloc(lc->pool);
	struct pbox_frame_peer to;
	bool copied;
	uint8_t *p;

	if (unlikely(m == NULL))
		return NULL;
	p = (uint8_t *)rte_pktmbuf_append(m, head);
	if (unlikely(p == NULL))
		goto err;
	memcpy(to.mac, peer->mac, sizeof(to.mac));
	to.ipv4 = rte_cpu_to_be_32(peer->ipv4);
	to.udp_port = rte_cpu_to_be_16(peer->udp_port);
	to.rank = rte_cpu_to_be_16(hdr->worker_rank);
	to.token = rte_cpu_to_be_64(hdr->session_token);
	to.aux = rte_cpu_to_be_32(hdr->aux);
	/*
	 * Each authenticated frame has its own sequence number and MAC, and a CSUM frame's CRC32C
	 * covers the rank, token and stamp that retargeting changes: both built, not copied.
	 */
	copied = prev->valid && prev->flags == hdr->flags && auth == NULL &&
		(hdr->flags & PHUB_WIRE_F_CSUM) == 0;
	if (copied) {
		/* A constant size (copied: no AUTH trailer): moved inline, not by rep movs. */
		memcpy(p, prev->bytes, MODEL_HEAD_PLAIN);
		pbox_frame_retarget(p, &prev->peer, &to);
		m->l2_len = RTE_ETHER_HDR_LEN;
		m->l3_len = sizeof(struct rte_ipv4_hdr);
	} else {
		phub_net_udp_build(m, &port->mac, (const struct rte_ether_addr *)peer->mac,
				port->ipv4, peer->ipv4, lc->udp_port, peer->udp_port,
				(uint16_t)(hl + hdr->payload_len));
		if (unlikely(phub_wire_hdr_encode(p + L2_L3_L4_LEN, hl, hdr,
				payload_crc) < 0)) {
			lc->stats.encode_errors++;
			goto err;
		}
		if (auth != NULL && !phub_engine_auth_tx(auth->job, auth->rank, auth->lane,
				auth->lane, p + L2_L3_L4_LEN, hl, pl->data, hdr->payload_len))
			goto err;
	}
	if (pl->by_ref || pl->copy != NULL) {
		struct rte_mbuf *mi = pl->by_ref ?
				phub_net_extref_get(&lc->model_refs, lc->indirect_pool,
						(void *)(uintptr_t)pl->data, pl->iova, pl->len,
						pl->len) :
				rte_pktmbuf_alloc(lc->indirect_pool);

		if (unlikely(mi == NULL))
			goto err;
		if (!pl->by_ref)
			rte_pktmbuf_attach(mi, pl->copy);
		if (rte_pktmbuf_chain(m, mi) != 0) {
			rte_pktmbuf_free(mi);
			goto err;
		}
	} else {
		uint8_t *dst = (uint8_t *)rte_pktmbuf_append(m, hdr->payload_len);

		if (unlikely(dst == NULL))
			goto err;
		memcpy(dst, pl->data, hdr->payload_len);
	}
	/* An authenticated frame's MAC replaces the checksum (UDP's "none", 0); nor is it copied. */
	if (!copied && auth == NULL) {
		phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + hl),
				payload_sum);
		/*
		 * The next ranks' frames start from this one's headers, kept as built: a copy of
		 * a copy would read back the narrow stores of its retargeting. The peer field by
		 * field, as it was stored: one wide copy of the struct would wait for those stores
		 * (store forwarding fails), a tenth of send_model at 1 KB segments.
		 */
		memcpy(prev->bytes, p, MODEL_HEAD_PLAIN);
		memcpy(prev->peer.mac, to.mac, sizeof(to.mac));
		prev->peer.ipv4 = to.ipv4;
		prev->peer.udp_port = to.udp_port;
		prev->peer.rank = to.rank;
		prev->peer.token = to.token;
		prev->peer.aux = to.aux;
		prev->flags = hdr->flags;
		prev->valid = true;
	}
	return m;
err:
	rte_pktmbuf_free(m);
	return NULL;
}

/*
 * The IOVA of a byte inside the EAL's memory (the job's buffers are rte_malloc'ed; the
 * pointer is inside one, so rte_malloc_virt2iova, which wants an element's start, does not
 * apply), or RTE_BAD_IOVA.
 */
static inline rte_iova_t
model_iova(const void *p)
{
	const struct rte_memseg *ms = rte_mem_virt2memseg(p, NULL);

	if (ms == NULL || ms->iova == RTE_BAD_IOVA)
		return RTE_BAD_IOVA;
	return ms->iova + (rte_iova_t)((uintptr_t)p - (uintptr_t)ms->addr);
}

/*
 * How a broadcast's frames (all) carry the payload on a port that sends multi-segment frames:
 * the job's model memory by reference, when every frame that still points into model memory is
 * this turn's, waiting in a TX buffer for the turn's end, a reference is left for each of the
 * n_frames, and the port gave the last ones back at its flush; else one copy that every frame
 * chains to. Elsewhere (one rank, a payload under PBOX_MODEL_CHAIN_MIN, or when that copy finds
 * no mbuf) each frame copies the payload after its headers.
 */
static void
model_payload_init(struct pbox_lcore *lc, uint16_t tx_port, const struct phub_engine_reply *reply,
		bool all, uint32_t n_frames, struct model_payload *pl)
{
	void *dst;

	*pl = (struct model_payload){ .data = reply->model, .len = (uint16_t)reply->model_bytes };
	if (!all || !pbox.ports[tx_port].multi_seg_tx || reply->model_bytes >= UINT16_MAX)
		return;
	if (reply->model_bytes < PBOX_MODEL_CHAIN_MIN) {
		lc->stats.model_inline++;
		return;
	}
	if ((!phub_net_extref_out(&lc->model_refs) || lc->model_refs_turn) &&
	    lc->model_refs.n_free >= n_frames && !lc->model_copy[tx_port]) {
		pl->iova = model_iova(reply->model);
		pl->by_ref = pl->iova != RTE_BAD_IOVA;
		if (pl->by_ref) {
			lc->stats.model_zero_copy++;
			return;
		}
	}
	pl->copy = rte_pktmbuf_alloc(lc->pool);
	if (pl->copy == NULL)
		return;
	dst = rte_pktmbuf_append(pl->copy, pl->len);
	if (dst == NULL) {
		rte_pktmbuf_free(pl->copy);
		pl->copy = NULL;
		return;
	}
	memcpy(dst, reply->model, reply->model_bytes);
	lc->stats.model_copied++;
}

/*
 * MODEL of one segment to one rank (MODEL_ONE) or to every joined rank
 * (MODEL_ALL). With multi-segment TX every frame chains to one payload mbuf: the job's model
 * memory by reference (model_payload), or a copy; its checksum is summed once as well.
 */
void
send_model(struct pbox_lcore *lc, struct phub_engine_job *job, const struct phub_wire_msg *about,
		const struct phub_engine_reply *reply, uint16_t tx_port, bool all)
{
	const struct phub_dataplane_ackv owed = {
		.batch = &lc->ackv, .max_entries = ackv_max_entries(), .send = ackv_send, .arg = lc,
	};
	struct model_head prev = { .valid = false };
	struct phub_dataplane_fanout fan;
	struct model_payload pl;
	uint32_t payload_sum;
	struct auth_to auth = { .job = NULL };

	phub_dataplane_fanout_init(&fan, job, about, reply, all, &owed);
	/*
	 * An authenticated job's frames go with UDP checksum 0 ("none"): their MAC covers all the
	 * checksum would, a payload changed under a frame still out included, so the payload is
	 * not summed for it.
	 */
	payload_sum = 0;
	if (likely((fan.hdr.flags & PHUB_WIRE_F_AUTH) == 0)) {
		payload_sum = phub_net_raw_cksum(reply->model, reply->model_bytes);
	} else {
		auth.job = job;
		auth.lane = auth_lane(job, about->chunk_id);
	}
	model_payload_init(lc, tx_port, reply, all, (uint32_t)(fan.end - fan.next), &pl);
	while (phub_dataplane_fanout_next(&fan)) {
		struct rte_mbuf *m;

		auth.rank = fan.rank;
		m = model_frame(lc, tx_port, &fan.peer, &fan.hdr, &pl, payload_sum,
				fan.payload_crc, &prev, auth.job != NULL ? &auth : NULL);
		if (unlikely(m == NULL)) {
			lc->engine_stats.drops[PHUB_DROP_NO_BUFFER]++;
			continue;
		}
		lc->stats.models_sent++;
		tx_enqueue(lc, tx_port, m);
	}
	lc->stats.acks_in_model += fan.acks_in_model;
	/* The frames hold their own references to the one copy. */
	if (pl.copy != NULL)
		rte_pktmbuf_free(pl.copy);
	/*
	 * By reference, the frames must be gone before the segment's model changes: they leave at
	 * this turn's end (model_refs_flushed), and the segment's next iteration needs every rank's
	 * PUSH made from this MODEL. A port that still holds one after its flush (a NIC's TX ring)
	 * gets copies from then on; the frames still out carry their UDP checksum of these bytes,
	 * so a change under them is a checksum drop and a PULL, never a wrong model.
	 */
	if (pl.by_ref) {
		lc->model_refs_turn = true;
		lc->model_refs_port[tx_port] = true;
	}
}

/*
 * After the turn's flush: a port whose frames by reference are still out (held by the driver)
 * takes copies from now on.
 */
void
model_refs_flushed(struct pbox_lcore *lc)
{
	bool out;

	if (likely(!lc->model_refs_turn))
		return;
	lc->model_refs_turn = false;
	out = phub_net_extref_out(&lc->model_refs);
	for (uint16_t pi = 0; pi < pbox.n_ports; pi++) {
		if (out && lc->model_refs_port[pi])
			lc->model_copy[pi] = true;
		lc->model_refs_port[pi] = false;
	}
}
