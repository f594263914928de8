/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data lcores' run-to-completion loop: receive, check each header before
 * reading past it, hand a datagram to the lcore that owns its chunk, let the
 * engine aggregate it, and send ACK and MODEL. No locks, no malloc, no log.
 */

#include <string.h>

#include <rte_arp.h>
#include <rte_cycles.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_memory.h>
#include <rte_udp.h>

#include "engine/phub_engine_auth.h"
#include "engine/phub_ring.h"
#include "pbox.h"
#include "prio.h"

#define L2_L3_L4_LEN (RTE_ETHER_HDR_LEN + sizeof(struct rte_ipv4_hdr) + sizeof(struct rte_udp_hdr))
/*
 * Microseconds between an lcore's scans of its ring segments for retransmissions: a scan
 * visits the segments with steps in flight (a window's worth, from the job's bitmap); a lost
 * step is found by the ACKs of later ones and resent at the next scan, so this bounds the time
 * a loss takes to repair beside the round trip, and stays a tenth of the ring's shortest RTO.
 */
#define PBOX_RING_POLL_US 1000
/*
 * Segments of a job an lcore retransmits per scan at most (32 000/s): when a burst is lost,
 * its timers expire together, and sending it all again at once, each time its back-off
 * expires, is a storm that keeps the queues full (measured: 8 M ring datagrams sent in 45 s
 * for 83 000 taken, ResNet-18 on two cores). The scan resumes where the last one stopped.
 */
#define PBOX_RING_RETRANSMIT_BUDGET 32
/*
 * Segments an ACK's release of window-held ring steps looks at, at most: held steps sit in
 * the segments whose rack sums came last, in a run from the cursor; the bound keeps an ACK
 * cheap when the held ones are another lcore's.
 */
#define PBOX_RING_RELEASE_VISITS 256

/* What the checks of a received frame found, for the handler of its opcode. */
struct rx_frame {
	struct rte_mbuf *m;
	uint16_t port_index;
	struct rte_ether_addr src_mac;
	uint32_t src_ip;
	uint16_t src_udp;
	uint16_t dst_udp;
	const uint8_t *udp_payload;
	uint16_t udp_payload_len;
	struct phub_wire_msg msg;
};

static inline void
net_drop(struct pbox_lcore *lc, struct rte_mbuf *m, enum pbox_net_drop why)
{
	lc->stats.net_drops[why]++;
	rte_pktmbuf_free(m);
}

static inline void
wire_drop(struct pbox_lcore *lc, struct rte_mbuf *m, enum phub_drop_reason why)
{
	lc->engine_stats.drops[why]++;
	rte_pktmbuf_free(m);
}

static inline void
tx_enqueue(struct pbox_lcore *lc, uint16_t port_index, struct rte_mbuf *m)
{
	uint16_t queue = lc->queue[port_index];

	if (unlikely(queue == PBOX_NO_QUEUE || lc->tx[port_index] == NULL)) {
		lc->stats.tx_dropped++;
		rte_pktmbuf_free(m);
		return;
	}
	lc->stats.tx_pkts++;
	lc->stats.tx_bytes += m->pkt_len;
	rte_eth_tx_buffer(pbox.ports[port_index].port_id, queue, lc->tx[port_index], m);
}

/*
 * Send on a port this lcore may have no queue on (a ring datagram to the uplink, a RING_ACK
 * after a hand-off): through the inbox of the port's first lcore, as the control plane does.
 */
static inline void
tx_any(struct pbox_lcore *lc, uint16_t port_index, struct rte_mbuf *m)
{
	struct pbox_lcore *via;

	if (likely(lc->queue[port_index] != PBOX_NO_QUEUE && lc->tx[port_index] != NULL)) {
		tx_enqueue(lc, port_index, m);
		return;
	}
	via = &pbox.lcores[pbox.lcore_index[pbox.cfg.ports[port_index].lcores[0]]];
	m->hash.usr = PBOX_INBOX_TX | ((uint32_t)port_index << 8);
	if (rte_ring_enqueue(via->inbox, m) != 0)
		net_drop(lc, m, PBOX_NET_DROP_RING_FULL);
}

uint16_t
pbox_ring_udp_port(const struct pbox *pb, uint16_t port)
{
	return pb->lcores[pb->lcore_index[pb->cfg.ports[port].lcores[0]]].udp_port;
}

static void
handle_arp(struct pbox_lcore *lc, struct rte_mbuf *m, uint16_t pi)
{
	const struct pbox_port *port = &pbox.ports[pi];
	struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	struct rte_arp_hdr *arp = (struct rte_arp_hdr *)(eth + 1);

	/* Answer requests for this port's address; everything else is not ours. */
	if (m->data_len < RTE_ETHER_HDR_LEN + sizeof(*arp) ||
	    arp->arp_opcode != RTE_BE16(RTE_ARP_OP_REQUEST) ||
	    arp->arp_data.arp_tip != rte_cpu_to_be_32(port->ipv4)) {
		net_drop(lc, m, PBOX_NET_DROP_NOT_FOR_US);
		return;
	}
	arp->arp_opcode = RTE_BE16(RTE_ARP_OP_REPLY);
	arp->arp_data.arp_tha = arp->arp_data.arp_sha;
	arp->arp_data.arp_tip = arp->arp_data.arp_sip;
	rte_ether_addr_copy(&port->mac, &arp->arp_data.arp_sha);
	arp->arp_data.arp_sip = rte_cpu_to_be_32(port->ipv4);
	rte_ether_addr_copy(&eth->src_addr, &eth->dst_addr);
	rte_ether_addr_copy(&port->mac, &eth->src_addr);
	lc->stats.arp_replies++;
	tx_enqueue(lc, pi, m);
}

/*
 * Reuse the received mbuf for a header-only answer (ACK) or one that echoes
 * the payload in place (PONG): the request's data is no longer needed.
 */
/* An authenticated job's datagram to one of its ranks, sealed on the lane that sends it. */
struct auth_to {
	struct phub_engine_job *job;	/* NULL: not authenticated */
	uint16_t rank;			/* the engine's (local) rank */
	uint16_t lane;			/* PHUB_ENGINE_AUTH_LANE_DATA(server) */
};

/* The lane of a chunk's datagrams: its server's, as the worker numbers its endpoints. */
static inline uint16_t
auth_lane(const struct phub_engine_job *job, uint32_t chunk_id)
{
	uint32_t server = 0;

	phub_layout_chunk_server(phub_engine_job_layout(job), chunk_id, &server);
	return (uint16_t)PHUB_ENGINE_AUTH_LANE_DATA(server);
}

static void
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
	if (auth != NULL && !phub_engine_auth_tx(auth->job, auth->rank, auth->lane, auth->lane,
			phub, hl, phub + hl, answer->payload_len)) {
		wire_drop(lc, m, PHUB_DROP_NOT_JOINED);
		return;
	}
	phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + len), 0);
	tx_any(lc, tx_port, m);
}

/*
 * Whether a worker (its wire rank) asked in its JOIN for a PHUB_ENGINE_PEER_F_* wish (CSUM on
 * what the PBox sends it, ACKV instead of one ACK per PUSH).
 */
static inline bool
rank_wants(const struct phub_engine_job *job, uint16_t wire_rank, uint32_t peer_flag)
{
	struct phub_engine_peer peer;
	uint64_t token;
	uint16_t rank;

	return phub_engine_job_local_rank(job, wire_rank, &rank) &&
		phub_engine_job_rank(job, rank, &peer, &token) &&
		(peer.flags & peer_flag) != 0;
}

static void
send_ack(struct pbox_lcore *lc, const struct phub_engine_job *job, struct rx_frame *f,
		uint16_t tx_port)
{
	struct rte_mbuf *m = f->m;
	struct phub_wire_msg ack;
	bool csum = rank_wants(job, f->msg.worker_rank, PHUB_ENGINE_PEER_F_CSUM);
	struct auth_to auth = { .job = NULL };

	if (unlikely(phub_engine_job_auth(job)) &&
	    phub_engine_job_local_rank(job, f->msg.worker_rank, &auth.rank)) {
		auth.job = (struct phub_engine_job *)(uintptr_t)job;
		auth.lane = auth_lane(job, f->msg.chunk_id);
	}
	/*
	 * The PUSH's frame, its IPv4 header without options, becomes the ACK in place from the
	 * port's template (ack.h): no header built and summed in full, no field encoded. Not for
	 * an authenticated session: each ACK has its own sequence number and MAC.
	 */
	if (likely(!csum && auth.job == NULL &&
		   f->udp_payload == rte_pktmbuf_mtod_offset(m, const uint8_t *,
			PBOX_ACK_HDR_OFF))) {
		m->data_len = pbox_ack_rewrite(rte_pktmbuf_mtod(m, uint8_t *),
				&pbox.ports[tx_port].ack_tmpl, f->msg.flags & PHUB_WIRE_F_LAST);
		m->pkt_len = m->data_len;
		m->l2_len = RTE_ETHER_HDR_LEN;
		m->l3_len = sizeof(struct rte_ipv4_hdr);
		lc->stats.acks_sent++;
		tx_any(lc, tx_port, m);
		return;
	}
	phub_wire_msg_init(&ack, PHUB_WIRE_OP_ACK);
	ack.job_id = f->msg.job_id;
	ack.session_token = f->msg.session_token;
	ack.worker_rank = f->msg.worker_rank;
	ack.chunk_id = f->msg.chunk_id;
	ack.iteration = f->msg.iteration;
	ack.elem_offset = f->msg.elem_offset;
	ack.elem_count = f->msg.elem_count;
	ack.seg_index = f->msg.seg_index;
	ack.seg_count = f->msg.seg_count;
	ack.aux = f->msg.aux;
	ack.flags = f->msg.flags & PHUB_WIRE_F_LAST;
	if (auth.job != NULL)
		ack.flags |= PHUB_WIRE_F_AUTH;	/* the MAC replaces the CRC */
	else if (csum)
		ack.flags |= PHUB_WIRE_F_CSUM;	/* phub_wire_encode() computes it */
	lc->stats.acks_sent++;
	reply_in_place(lc, f, tx_port, &ack, auth.job != NULL ? &auth : NULL);
}

/* One ACKV to one rank (phub_ackv_flush()'s send): a new frame, built and summed in full. */
static void
ackv_send(void *arg, const struct phub_ackv_pending *to, const struct phub_wire_ackv_entry *e,
		unsigned int n)
{
	struct pbox_lcore *lc = arg;
	const struct phub_engine_job *job = to->job;
	struct auth_to auth = { .job = NULL };
	uint16_t hl = PHUB_WIRE_HDR_LEN;
	uint16_t len;
	struct phub_engine_peer peer;
	struct phub_wire_msg hdr;
	struct rte_mbuf *m;
	uint64_t token;
	uint16_t rank;
	uint8_t *p;

	/* The rank left or was replaced within the turn: its ACKs have nobody to go to. */
	if (!phub_engine_job_local_rank(job, to->rank, &rank) ||
	    !phub_engine_job_rank(job, rank, &peer, &token))
		return;
	/* An authenticated rank's ACKV is sealed on the lane of this lcore's server on the port. */
	if (unlikely(phub_engine_job_auth(job))) {
		auth.job = (struct phub_engine_job *)(uintptr_t)job;
		auth.rank = rank;
		for (uint32_t s = 0; s < pbox.n_servers; s++)
			if (pbox.servers[s].port == to->port &&
			    pbox.server_lcore_index[s] == lc->data_index)
				auth.lane = (uint16_t)PHUB_ENGINE_AUTH_LANE_DATA(s);
		hl = (uint16_t)(hl + PHUB_WIRE_AUTH_TRAILER_LEN);
	}
	len = (uint16_t)(hl + n * PHUB_WIRE_ACKV_ENTRY_LEN);
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
	phub_wire_msg_init(&hdr, PHUB_WIRE_OP_ACKV);
	hdr.job_id = to->job_id;
	hdr.session_token = token;
	hdr.worker_rank = to->rank;
	hdr.payload_len = (uint16_t)(n * PHUB_WIRE_ACKV_ENTRY_LEN);
	hdr.payload = p + L2_L3_L4_LEN + hl;
	if (auth.job != NULL)
		hdr.flags |= PHUB_WIRE_F_AUTH;	/* the MAC replaces the CRC */
	else if (peer.flags & PHUB_ENGINE_PEER_F_CSUM)
		hdr.flags |= PHUB_WIRE_F_CSUM;	/* phub_wire_encode() computes it */
	phub_wire_ackv_put(p + L2_L3_L4_LEN + hl, e, n);
	phub_net_udp_build(m, &pbox.ports[to->port].mac, (const struct rte_ether_addr *)peer.mac,
			pbox.ports[to->port].ipv4, peer.ipv4, lc->udp_port, peer.udp_port, len);
	if (unlikely(phub_wire_encode(p + L2_L3_L4_LEN, len, &hdr) < 0)) {
		lc->stats.encode_errors++;
		rte_pktmbuf_free(m);
		return;
	}
	if (auth.job != NULL && !phub_engine_auth_tx(auth.job, auth.rank, auth.lane, auth.lane,
			p + L2_L3_L4_LEN, hl, hdr.payload, hdr.payload_len)) {
		rte_pktmbuf_free(m);
		return;
	}
	phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + len), 0);
	lc->stats.ackv_sent++;
	lc->stats.ackv_entries += n;
	tx_enqueue(lc, to->port, m);
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
static void
ackv_flush(struct pbox_lcore *lc)
{
	if (lc->ackv.n == 0)
		return;
	phub_ackv_flush(&lc->ackv, ackv_max_entries(), ackv_send, lc);
}

/*
 * The ACK of a PUSH: at once, or, to a rank that takes ACKV, owed until the turn's end, where
 * the ACKs of the turn leave together, or are dropped if the segment's MODEL to that rank
 * leaves first and echoes the PUSH's stamp (send_model).
 */
static void
answer_ack(struct pbox_lcore *lc, struct phub_engine_job *job, struct rx_frame *f,
		uint16_t tx_port)
{
	struct phub_wire_ackv_entry e;

	if (!rank_wants(job, f->msg.worker_rank, PHUB_ENGINE_PEER_F_ACKV)) {
		send_ack(lc, job, f, tx_port);
		return;
	}
	e.chunk_id = f->msg.chunk_id;
	e.seg_index = f->msg.seg_index;
	e.flags = f->msg.flags & PHUB_WIRE_F_LAST;
	e.iteration = f->msg.iteration;
	e.aux = f->msg.aux;
	if (unlikely(phub_ackv_full(&lc->ackv)))
		ackv_flush(lc);
	phub_ackv_add(&lc->ackv, job, f->msg.job_id, f->msg.worker_rank, tx_port, &e);
	rte_pktmbuf_free(f->m);
}

/*
 * The headers of the first MODEL frame built in full in a broadcast, for the next ranks': copied
 * and retargeted (ack.h) instead of built and summed again.
 */
struct model_head {
	bool valid;
	uint8_t flags;			/* the PHub flags it was built with */
	struct pbox_frame_peer peer;
	uint8_t bytes[L2_L3_L4_LEN + PHUB_WIRE_HDR_LEN + PHUB_WIRE_AUTH_TRAILER_LEN];
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
		memcpy(p, prev->bytes, head);
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
	if (!copied) {
		/* An authenticated frame's MAC replaces the checksum: UDP's "none", 0. */
		if (auth == NULL)
			phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + hl),
					payload_sum);
		/*
		 * The next ranks' frames start from this one's headers, kept as built: a copy of
		 * a copy would read back the narrow stores of its retargeting.
		 */
		memcpy(prev->bytes, p, head);
		prev->peer = to;
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
 * the job's model memory by reference, when no frame of an earlier broadcast still points into
 * model memory and the port gave the last ones back at its flush; else one copy that every
 * frame chains to. Elsewhere (one rank, a payload under PBOX_MODEL_CHAIN_MIN, or when that
 * copy finds no mbuf) each frame copies the payload after its headers.
 */
static void
model_payload_init(struct pbox_lcore *lc, uint16_t tx_port, const struct phub_engine_reply *reply,
		bool all, struct model_payload *pl)
{
	void *dst;

	*pl = (struct model_payload){ .data = reply->model, .len = (uint16_t)reply->model_bytes };
	if (!all || !pbox.ports[tx_port].multi_seg_tx || reply->model_bytes >= UINT16_MAX)
		return;
	if (reply->model_bytes < PBOX_MODEL_CHAIN_MIN) {
		lc->stats.model_inline++;
		return;
	}
	/* With none out, every rank (at most PHUB_ENGINE_MAX_WORKERS) has a reference. */
	if (!phub_net_extref_out(&lc->model_refs) && !lc->model_copy[tx_port]) {
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
static void
send_model(struct pbox_lcore *lc, struct phub_engine_job *job, const struct phub_wire_msg *about,
		const struct phub_engine_reply *reply, uint16_t tx_port, bool all)
{
	/* Workers carry global ranks; the engine's are its rack's, from rank_base. */
	uint32_t base = phub_engine_job_rank_base(job);
	struct model_head prev = { .valid = false };
	struct model_payload pl;
	struct phub_wire_msg hdr;
	uint32_t payload_sum;
	uint32_t payload_crc = 0;
	struct auth_to auth = { .job = NULL };
	bool crc_done = false;
	uint16_t first = all ? 0 : (uint16_t)(about->worker_rank - base);
	uint16_t end = all ? phub_engine_job_world_size(job) : (uint16_t)(first + 1);

	phub_wire_msg_init(&hdr, PHUB_WIRE_OP_MODEL);
	hdr.job_id = about->job_id;
	hdr.chunk_id = about->chunk_id;
	hdr.iteration = reply->iteration;
	hdr.elem_offset = about->elem_offset;
	hdr.elem_count = reply->elem_count;
	hdr.seg_index = about->seg_index;
	hdr.seg_count = about->seg_count;
	/* The job's dtype: a PULL being answered carries none of its own. */
	hdr.dtype = (uint8_t)phub_engine_job_dtype(job);
	hdr.payload_len = (uint16_t)reply->model_bytes;
	hdr.payload = reply->model;
	hdr.flags = about->flags & PHUB_WIRE_F_LAST;
	if (!all) {
		hdr.flags |= PHUB_WIRE_F_REPLAY;
		hdr.aux = about->aux;
	}
	/*
	 * An authenticated job's frames go with UDP checksum 0 ("none"): their MAC covers all the
	 * checksum would, a payload changed under a frame still out included, so the payload is
	 * not summed for it.
	 */
	payload_sum = 0;
	if (likely(!phub_engine_job_auth(job))) {
		payload_sum = phub_net_raw_cksum(reply->model, reply->model_bytes);
	} else {
		auth.job = job;
		auth.lane = auth_lane(job, about->chunk_id);
		hdr.flags |= PHUB_WIRE_F_AUTH;
	}

	model_payload_init(lc, tx_port, reply, all, &pl);
	for (uint16_t r = first; r < end; r++) {
		struct phub_engine_peer peer;
		struct rte_mbuf *m;
		uint64_t token;

		/* A rank that has not joined (or left) gets nothing. */
		if (!phub_engine_job_rank(job, r, &peer, &token))
			continue;
		hdr.worker_rank = (uint16_t)(base + r);
		hdr.session_token = token;
		/*
		 * A rank that takes ACKV and owes this turn an ACK of this segment: the MODEL is
		 * that ACK, and echoes the PUSH's stamp for its RTT sample.
		 */
		if (all) {
			hdr.aux = 0;
			if ((peer.flags & PHUB_ENGINE_PEER_F_ACKV) && lc->ackv.live != 0 &&
			    phub_ackv_take(&lc->ackv, hdr.job_id, hdr.worker_rank, hdr.chunk_id,
					hdr.seg_index, hdr.iteration, &hdr.aux))
				lc->stats.acks_in_model++;
		}
		/*
		 * The rank's other ACKs of this turn leave before a MODEL with a stamp: an answer
		 * to a later PUSH ahead of an earlier one's ACK makes the worker take that one
		 * for lost (RACK), and on a rate-limited link the turn's MODELs delay an ACKV at
		 * the turn's end by milliseconds.
		 */
		if (hdr.aux != 0 && (peer.flags & PHUB_ENGINE_PEER_F_ACKV) && lc->ackv.live != 0)
			phub_ackv_flush_rank(&lc->ackv, hdr.job_id, hdr.worker_rank,
					ackv_max_entries(), ackv_send, lc);
		hdr.flags &= (uint8_t)~PHUB_WIRE_F_CSUM;
		auth.rank = r;
		if ((peer.flags & PHUB_ENGINE_PEER_F_CSUM) && auth.job == NULL) {
			/* The payload's CRC once, finished with each rank's header. */
			if (!crc_done)
				payload_crc = phub_wire_csum_payload(reply->model,
						reply->model_bytes);
			crc_done = true;
			hdr.flags |= PHUB_WIRE_F_CSUM;
		}
		m = model_frame(lc, tx_port, &peer, &hdr, &pl, payload_sum, payload_crc, &prev,
				auth.job != NULL ? &auth : NULL);
		if (unlikely(m == NULL)) {
			lc->engine_stats.drops[PHUB_DROP_NO_BUFFER]++;
			continue;
		}
		lc->stats.models_sent++;
		tx_enqueue(lc, tx_port, m);
	}
	/* The frames hold their own references to the one copy. */
	if (pl.copy != NULL)
		rte_pktmbuf_free(pl.copy);
	/*
	 * By reference, the frames must be gone before the segment's model changes (its next
	 * iteration): sent now. A port that still holds one after its flush (a NIC's TX ring)
	 * gets copies from now on; the frames still out carry their UDP checksum of these bytes,
	 * so a change under them is a checksum drop and a PULL, never a wrong model.
	 */
	if (pl.by_ref && lc->tx[tx_port] != NULL && lc->queue[tx_port] != PBOX_NO_QUEUE) {
		rte_eth_tx_buffer_flush(pbox.ports[tx_port].port_id, lc->queue[tx_port],
				lc->tx[tx_port]);
		if (phub_net_extref_out(&lc->model_refs))
			lc->model_copy[tx_port] = true;
	}
}

static inline void
hand_off(struct pbox_lcore *lc, struct rte_mbuf *m, uint16_t pi, uint16_t owner)
{
	m->hash.usr = PBOX_INBOX_RX | ((uint32_t)pi << 8);
	if (rte_ring_enqueue(pbox.lcores[owner].inbox, m) != 0) {
		net_drop(lc, m, PBOX_NET_DROP_RING_FULL);
		return;
	}
	lc->engine_stats.drops[PHUB_DROP_WRONG_LCORE]++;
	lc->stats.handed_off++;
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
		const struct phub_wire_msg *hdr, const float *payload)
{
	uint16_t head = (uint16_t)(L2_L3_L4_LEN + PHUB_WIRE_HDR_LEN);
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
			(uint16_t)(PHUB_WIRE_HDR_LEN + hdr->payload_len));
	if (unlikely(phub_wire_hdr_encode(p + L2_L3_L4_LEN, PHUB_WIRE_HDR_LEN, hdr, 0) < 0)) {
		lc->stats.encode_errors++;
		goto err;
	}
	memcpy(p + head, payload, hdr->payload_len);
	phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + PHUB_WIRE_HDR_LEN),
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
static void
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
		m = ring_frame(lc, port, &next, &hdr, what->sum + off);
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

struct ring_poll_ctx {
	struct pbox_lcore *lc;
	struct phub_engine_job *job;
};

static bool
ring_poll_owns(void *arg, uint32_t server)
{
	const struct ring_poll_ctx *c = arg;

	return server < pbox.n_servers && pbox.server_lcore_index[server] == c->lc->data_index;
}

static void
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
static void
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
	reply_in_place(lc, &a->f, a->f.port_index, &ack, NULL);	/* ring: no MAC yet */
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
		int room = phub_wire_max_payload(pbox.ports[f->port_index].mtu);

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
 * A RING_REDUCE, RING_GATHER or RING_ACK, on the lcore that owns its chunk: the engine checks
 * it (token and source of the job's ring neighbour, step, iteration), the taken ones are
 * acknowledged in the turn's RING_ACKV, and what they complete goes on: ring steps to the next
 * PBox, MODEL to this rack's workers.
 */
static void
handle_ring(struct pbox_lcore *lc, struct rx_frame *f, struct phub_engine_job *job, uint32_t server)
{
	struct phub_engine_ring_request req;
	struct phub_engine_reply reply;

	memset(&req, 0, sizeof(req));
	req.session_token = f->msg.session_token;
	req.chunk_id = f->msg.chunk_id;
	req.iteration = f->msg.iteration;
	req.elem_offset = f->msg.elem_offset;
	req.elem_count = f->msg.elem_count;
	req.step = f->msg.aux;
	req.rank = f->msg.worker_rank;
	req.opcode = f->msg.opcode;
	req.dtype = f->msg.dtype;
	req.src_ipv4 = f->src_ip;
	req.src_udp_port = f->src_udp;
	req.payload = f->msg.payload;
	req.payload_len = f->msg.payload_len;
	req.now_ns = lc->now_ns;
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
	uint64_t others = 0;
	unsigned int n = f->msg.payload_len / sizeof(struct phub_wire_ring_ack_entry);

	for (unsigned int i = 0; i < n; i++) {
		struct phub_wire_ring_ack e;
		uint32_t server;
		uint16_t owner;

		phub_wire_ring_ackv_get(f->msg.payload, i, &e);
		if (phub_layout_chunk_server(layout, e.chunk_id, &server) != 0)
			continue;	/* counted by the engine */
		owner = pbox.server_lcore_index[server];
		if (owner != lc->data_index && owner < 64)
			others |= UINT64_C(1) << owner;
	}
	while (others != 0) {
		uint16_t owner = (uint16_t)__builtin_ctzll(others);
		struct rte_mbuf *copy = rte_pktmbuf_copy(f->m, lc->pool, 0, UINT32_MAX);

		others &= others - 1;
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
static void
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
	memset(&req, 0, sizeof(req));
	req.session_token = f->msg.session_token;
	req.rank = f->msg.worker_rank;
	req.opcode = f->msg.opcode;
	req.src_ipv4 = f->src_ip;
	req.src_udp_port = f->src_udp;
	req.payload = f->msg.payload;
	req.payload_len = f->msg.payload_len;
	req.now_ns = lc->now_ns;
	phub_engine_ring_ackv(job, &req, ring_poll_owns, &c, &reply, &lc->engine_stats);
	if (reply.reason == PHUB_DROP_OK) {
		lc->stats.ring_acks_in++;
		if (!handed && pbox.n_lcores > 1)
			ring_ackv_hand_off(lc, f, job);
		ring_release(lc, job);
	}
	rte_pktmbuf_free(f->m);
}

/* The PHub flags byte of a UDP payload says AUTH (the MAC replaces the UDP checksum pass). */
static inline bool
udp_auth_flagged(const struct rte_udp_hdr *udp, uint16_t udp_len)
{
	return udp_len >= sizeof(*udp) + PHUB_WIRE_HDR_LEN &&
		(((const uint8_t *)(udp + 1))[offsetof(struct phub_wire_hdr, flags)] &
		 PHUB_WIRE_F_AUTH) != 0;
}

static void
handle_data(struct pbox_lcore *lc, struct rx_frame *f)
{
	struct phub_engine_request req;
	struct phub_engine_reply reply;
	struct phub_engine_job *job;
	uint32_t server;
	uint16_t tx_port, owner;

	job = phub_engine_job_lookup(pbox.engine, f->msg.job_id);
	if (job == NULL) {
		wire_drop(lc, f->m, PHUB_DROP_UNKNOWN_JOB);
		return;
	}
	if (phub_layout_chunk_server(phub_engine_job_layout(job), f->msg.chunk_id, &server) != 0) {
		wire_drop(lc, f->m, PHUB_DROP_CHUNK_RANGE);
		return;
	}
	/*
	 * One chunk, one lcore: a datagram sent to another lcore's UDP port
	 * (stale map, hostile sender) must not touch this chunk's slot here.
	 */
	owner = pbox.server_lcore_index[server];
	if (owner != lc->data_index) {
		hand_off(lc, f->m, f->port_index, owner);
		return;
	}
	tx_port = pbox.servers[server].port;
	if (f->msg.opcode >= PHUB_WIRE_OP_RING_REDUCE && f->msg.opcode <= PHUB_WIRE_OP_RING_ACK) {
		handle_ring(lc, f, job, server);
		return;
	}
	/* An authenticated job's MAC and replay window, before the engine reads anything. */
	if (unlikely(phub_engine_job_auth(job) || (f->msg.flags & PHUB_WIRE_F_AUTH))) {
		uint16_t rank = UINT16_MAX;
		enum phub_drop_reason why;

		phub_engine_job_local_rank(job, f->msg.worker_rank, &rank);
		why = phub_engine_auth_rx(job, rank, PHUB_ENGINE_AUTH_LANE_DATA(server),
				PHUB_ENGINE_AUTH_LANE_DATA(server), f->msg.flags, f->udp_payload,
				f->msg.hdr_len, f->msg.payload, f->msg.payload_len);
		if (why != PHUB_DROP_OK) {
			wire_drop(lc, f->m, why);
			return;
		}
	}

	memset(&req, 0, sizeof(req));
	req.session_token = f->msg.session_token;
	req.chunk_id = f->msg.chunk_id;
	req.iteration = f->msg.iteration;
	req.elem_offset = f->msg.elem_offset;
	req.elem_count = f->msg.elem_count;
	req.rank = f->msg.worker_rank;
	req.seg_index = f->msg.seg_index;
	req.seg_count = f->msg.seg_count;
	req.dtype = f->msg.dtype;
	req.retransmit = (f->msg.flags & PHUB_WIRE_F_RETRANSMIT) != 0;
	req.src_ipv4 = f->src_ip;
	req.src_udp_port = f->src_udp;
	req.payload = f->msg.payload;
	req.payload_len = f->msg.payload_len;
	req.has_hyper = (f->msg.flags & PHUB_WIRE_F_HYPER) != 0;
	req.hyper_lr = f->msg.hyper_lr;
	req.hyper_weight_decay = f->msg.hyper_weight_decay;
	/* The loop's one clock read (the jobs' clock, control.c): none per PUSH. */
	req.now_ns = lc->now_ns;

	if (f->msg.opcode == PHUB_WIRE_OP_PUSH) {
		uint64_t taken = lc->engine_stats.pushes;

		phub_engine_push(job, &req, &reply, &lc->engine_stats);
		lc->stats.job_pushes[phub_engine_job_slot(job)] += lc->engine_stats.pushes - taken;
	} else
		phub_engine_pull(job, &req, &reply, &lc->engine_stats);

	if (reply.actions == PHUB_ENGINE_DROP) {
		rte_pktmbuf_free(f->m);	/* counted by the engine */
		return;
	}
	/* A ring job's last local PUSH of a segment: the rack sum goes to the next PBox. */
	if (reply.actions & PHUB_ENGINE_RING_SEND)
		send_ring(lc, job, &reply.ring);
	if (reply.actions & PHUB_ENGINE_MODEL_ALL) {
		/*
		 * The last arrival is ACKed too, before the broadcast: the MODEL carries no stamp,
		 * so without the ACK a job of one rank had no RTT sample and no evidence of loss,
		 * and recovered each lost segment by a lone probe per RTO (200 ms).
		 */
		answer_ack(lc, job, f, tx_port);
		send_model(lc, job, &f->msg, &reply, tx_port, true);
	} else if (reply.actions & PHUB_ENGINE_MODEL_ONE) {
		send_model(lc, job, &f->msg, &reply, tx_port, false);
		rte_pktmbuf_free(f->m);
	} else {
		answer_ack(lc, job, f, tx_port);
	}
}

static void
handle_ping(struct pbox_lcore *lc, struct rx_frame *f)
{
	struct phub_wire_msg pong = f->msg;

	pong.opcode = PHUB_WIRE_OP_PONG;
	/* Sessions PING the control port; a data port answers any PING plainly. */
	pong.flags &= (uint8_t)~(PHUB_WIRE_F_CSUM | PHUB_WIRE_F_RETRANSMIT | PHUB_WIRE_F_AUTH);
	lc->stats.pongs++;
	reply_in_place(lc, f, f->port_index, &pong, NULL);
}

/*
 * Every check of one frame, in the order its headers come; handed is true for
 * a frame another lcore passed here, whose UDP port is not this lcore's.
 */
static void
handle_frame(struct pbox_lcore *lc, struct rte_mbuf *m, uint16_t pi, bool handed)
{
	const struct pbox_port *port = &pbox.ports[pi];
	struct rte_ether_hdr *eth;
	struct rte_ipv4_hdr *ip;
	struct rte_udp_hdr *udp;
	struct rx_frame f;
	uint16_t ip_len, udp_len, ihl;
	int owner;
	enum phub_drop_reason why;

	/* The whole frame must be in one segment: the pools are sized for the MTU. */
	if (unlikely(m->nb_segs != 1 || m->data_len < RTE_ETHER_HDR_LEN)) {
		net_drop(lc, m, PBOX_NET_DROP_BAD_IPV4);
		return;
	}
	eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	if (eth->ether_type == RTE_BE16(RTE_ETHER_TYPE_ARP)) {
		handle_arp(lc, m, pi);
		return;
	}
	if (eth->ether_type != RTE_BE16(RTE_ETHER_TYPE_IPV4)) {
		net_drop(lc, m, PBOX_NET_DROP_NOT_IPV4);
		return;
	}
	/* IPv4: a full header, a sane length, our address, not a fragment, UDP. */
	if (m->data_len < RTE_ETHER_HDR_LEN + sizeof(*ip)) {
		net_drop(lc, m, PBOX_NET_DROP_BAD_IPV4);
		return;
	}
	ip = (struct rte_ipv4_hdr *)(eth + 1);
	ihl = (uint16_t)((ip->version_ihl & RTE_IPV4_HDR_IHL_MASK) * 4);
	ip_len = rte_be_to_cpu_16(ip->total_length);
	if ((ip->version_ihl >> 4) != 4 || ihl < sizeof(*ip) || ip_len < ihl ||
	    ip_len > m->data_len - RTE_ETHER_HDR_LEN) {
		net_drop(lc, m, PBOX_NET_DROP_BAD_IPV4);
		return;
	}
	if (ip->dst_addr != rte_cpu_to_be_32(port->ipv4)) {
		net_drop(lc, m, PBOX_NET_DROP_NOT_FOR_US);
		return;
	}
	if (ip->fragment_offset & RTE_BE16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) {
		net_drop(lc, m, PBOX_NET_DROP_IP_FRAGMENT);
		return;
	}
	if (ip->next_proto_id != IPPROTO_UDP) {
		net_drop(lc, m, PBOX_NET_DROP_NOT_UDP);
		return;
	}
	/* UDP: a full header, a length within the IP datagram, a checksum that holds. */
	if (ip_len < ihl + sizeof(*udp)) {
		net_drop(lc, m, PBOX_NET_DROP_BAD_UDP);
		return;
	}
	udp = (struct rte_udp_hdr *)((uint8_t *)ip + ihl);
	udp_len = rte_be_to_cpu_16(udp->dgram_len);
	if (udp_len < sizeof(*udp) || udp_len > ip_len - ihl) {
		net_drop(lc, m, PBOX_NET_DROP_BAD_UDP);
		return;
	}
	if (!handed && udp->dgram_cksum != 0) {
		uint64_t l4 = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;

		/*
		 * The software pass is skipped for a datagram with flag AUTH: its MAC, checked
		 * before anything reads it, catches all the checksum would (and a datagram with
		 * AUTH for a job without keys is dropped as auth_unexpected).
		 */
		if (l4 == RTE_MBUF_F_RX_L4_CKSUM_BAD ||
		    (l4 != RTE_MBUF_F_RX_L4_CKSUM_GOOD && !udp_auth_flagged(udp, udp_len) &&
		     !phub_net_udp_csum_ok(ip, udp, udp_len))) {
			net_drop(lc, m, PBOX_NET_DROP_BAD_UDP_CSUM);
			return;
		}
	}

	f.m = m;
	f.port_index = pi;
	rte_ether_addr_copy(&eth->src_addr, &f.src_mac);
	f.src_ip = rte_be_to_cpu_32(ip->src_addr);
	f.src_udp = rte_be_to_cpu_16(udp->src_port);
	f.dst_udp = rte_be_to_cpu_16(udp->dst_port);
	f.udp_payload = (const uint8_t *)(udp + 1);
	f.udp_payload_len = (uint16_t)(udp_len - sizeof(*udp));

	if (f.dst_udp == pbox.cfg.udp_base_port) {
		/* Control: JOIN, LEAVE, PING to the control port go to the main lcore. */
		m->hash.usr = PBOX_INBOX_RX | ((uint32_t)pi << 8);
		if (rte_ring_enqueue(pbox.control_ring, m) != 0) {
			net_drop(lc, m, PBOX_NET_DROP_RING_FULL);
			return;
		}
		lc->stats.control++;
		return;
	}
	if (!handed) {
		owner = (int)f.dst_udp - (int)pbox.cfg.udp_base_port - 1;
		if (owner < 0 || owner >= pbox.n_lcores) {
			net_drop(lc, m, PBOX_NET_DROP_UNKNOWN_PORT);
			return;
		}
		if (owner != lc->data_index) {
			/* Steering missed: the owner handles it, counted as such. */
			hand_off(lc, m, pi, (uint16_t)owner);
			return;
		}
	}

	why = phub_wire_parse(f.udp_payload, f.udp_payload_len, &f.msg);
	if (why != PHUB_DROP_OK) {
		wire_drop(lc, m, why);
		return;
	}
	switch (f.msg.opcode) {
	case PHUB_WIRE_OP_PUSH:
	case PHUB_WIRE_OP_PULL:
	case PHUB_WIRE_OP_RING_REDUCE:
	case PHUB_WIRE_OP_RING_GATHER:
	case PHUB_WIRE_OP_RING_ACK:
		handle_data(lc, &f);
		break;
	case PHUB_WIRE_OP_RING_ACKV:
		handle_ring_ackv(lc, &f, handed);
		break;
	case PHUB_WIRE_OP_PING:
		handle_ping(lc, &f);
		break;
	default:
		wire_drop(lc, m, PHUB_DROP_UNEXPECTED_OPCODE);
		break;
	}
}

static void
drain_inbox(struct pbox_lcore *lc, unsigned int *work)
{
	struct rte_mbuf *pkts[PBOX_BURST];
	unsigned int n;

	n = rte_ring_dequeue_burst(lc->inbox, (void **)pkts, PBOX_BURST, NULL);
	for (unsigned int i = 0; i < n; i++) {
		struct rte_mbuf *m = pkts[i];
		uint16_t pi = (uint16_t)(m->hash.usr >> 8);

		if ((m->hash.usr & 0xff) == PBOX_INBOX_TX) {
			tx_enqueue(lc, pi, m);
		} else {
			lc->stats.handed_in++;
			handle_frame(lc, m, pi, true);
		}
	}
	*work += n;
}

/* A segment that a removed rank no longer holds up: its MODEL to every rank left. */
static void
elastic_done(void *arg, const struct phub_engine_segment_done *what)
{
	struct ring_poll_ctx *c = arg;
	const struct phub_layout *layout = phub_engine_job_layout(c->job);
	struct phub_wire_msg about;
	uint32_t server = 0;

	phub_layout_chunk_server(layout, what->chunk_id, &server);
	phub_wire_msg_init(&about, PHUB_WIRE_OP_MODEL);
	about.job_id = phub_engine_job_id(c->job);
	about.chunk_id = what->chunk_id;
	about.elem_offset = what->elem_offset;
	about.seg_index = what->seg_index;
	about.seg_count = what->seg_count;
	about.flags = what->seg_index + 1u == what->seg_count ? PHUB_WIRE_F_LAST : 0;
	send_model(c->lc, c->job, &about, &what->reply, pbox.servers[server].port, true);
}

/*
 * Retransmit the ring steps of this lcore's segments that are lost (overtaken by later ones'
 * ACKs) or whose RTO passed, every PBOX_RING_POLL_US: one pass over the ring jobs' segments
 * with steps in flight. Steps the window held back go too when it has room (an ACK normally
 * sends them first).
 */
static unsigned int
ring_poll(struct pbox_lcore *lc, uint64_t tsc)
{
	struct ring_poll_ctx c = { .lc = lc };
	unsigned int sent = 0;

	if (tsc < lc->ring_poll_tsc)
		return 0;
	lc->ring_poll_tsc = tsc + rte_get_tsc_hz() / US_PER_S * PBOX_RING_POLL_US;
	lc->stats.ring_polls++;
	for (c.job = phub_engine_job_next(pbox.engine, NULL); c.job != NULL;
	     c.job = phub_engine_job_next(pbox.engine, c.job))
	{
		sent += phub_engine_ring_poll_some(c.job, lc->now_ns, ring_poll_owns,
				ring_poll_send, &c, &lc->engine_stats,
				&lc->ring_cursor[phub_engine_job_slot(c.job)],
				PBOX_RING_RETRANSMIT_BUDGET);
		/* An elastic job that removed a rank: once per change, a scan of our segments. */
		sent += phub_engine_elastic_poll(c.job, ring_poll_owns, elastic_done, &c,
				&lc->engine_stats, &lc->elastic_epoch[phub_engine_job_slot(c.job)]);
	}
	return sent;
}

/*
 * Put a received burst in P3 service order (prio.h): the more urgent segments are summed,
 * optimized and answered first, so their ACKs and MODELs also leave first. A burst of one
 * priority, the common case, is left as it came.
 */
static void
serve_by_priority(struct rte_mbuf **pkts, uint16_t n)
{
	struct rte_mbuf *in[PBOX_BURST];
	uint16_t order[PBOX_BURST];
	uint8_t prio[PBOX_BURST];

	for (uint16_t j = 0; j < n; j++)
		prio[j] = pbox_prio_of_frame(rte_pktmbuf_mtod(pkts[j], const uint8_t *),
				pkts[j]->data_len);
	if (!pbox_prio_order(prio, n, order))
		return;
	memcpy(in, pkts, n * sizeof(*pkts));
	for (uint16_t j = 0; j < n; j++)
		pkts[j] = in[order[j]];
}

/* P3 across bursts: RX bursts a turn may take into the hold. */
#define PRIO_HOLD_READS 2

/*
 * P3 across bursts (config priority_hold): from each queue, while it returns full bursts and
 * the hold has room, up to PRIO_HOLD_READS bursts go into the hold; then one burst's worth is
 * served from it, most urgent first (prio.h). A backed-up queue's frames so wait in the hold,
 * where a more urgent frame overtakes them, instead of in the RX ring, where it cannot. A queue
 * that keeps up leaves nothing held: what is read is served in the same turn.
 */
static unsigned int
serve_held(struct pbox_lcore *lc, struct pbox_prio_hold *hold, uint64_t max_age)
{
	struct rte_mbuf *pkts[PBOX_BURST];
	uint64_t now = rte_rdtsc();
	unsigned int work = 0;

	for (uint16_t i = 0; i < lc->n_rxq; i++) {
		uint16_t pi = lc->rx_ports[i];

		for (unsigned int r = 0; r < PRIO_HOLD_READS &&
		     pbox_prio_hold_room(hold) >= PBOX_BURST; r++) {
			uint16_t n = rte_eth_rx_burst(pbox.ports[pi].port_id, lc->queue[pi], pkts,
					PBOX_BURST);

			for (uint16_t j = 0; j < n; j++) {
				lc->stats.rx_pkts++;
				lc->stats.rx_bytes += pkts[j]->pkt_len;
				/* Cannot fail: the room was checked for a whole burst. */
				pbox_prio_hold_put(hold, pkts[j], pbox_prio_of_frame(
						rte_pktmbuf_mtod(pkts[j], const uint8_t *),
						pkts[j]->data_len), pi, now);
			}
			work += n;
			if (n < PBOX_BURST)
				break;
		}
	}
	for (unsigned int k = 0; k < PBOX_BURST; k++) {
		uint16_t pi;
		struct rte_mbuf *m = pbox_prio_hold_take(hold, now, max_age, &pi);

		if (m == NULL)
			break;
		handle_frame(lc, m, pi, false);
		work++;
	}
	return work;
}

/* The hold of a data lcore when priority_hold asks for one; NULL: each burst alone. */
static struct pbox_prio_hold *
prio_hold_create(const struct pbox_lcore *lc)
{
	struct pbox_prio_hold *hold;

	if (!pbox.cfg.priority_order || pbox.cfg.priority_hold == 0)
		return NULL;
	hold = rte_malloc_socket("pbox_prio_hold", sizeof(*hold), RTE_CACHE_LINE_SIZE,
			(int)rte_lcore_to_socket_id(lc->lcore_id));
	if (hold == NULL) {
		PBOX_LOG(WARNING, "lcore %u: no memory for a hold of %u frames: each burst is "
				"ordered alone", lc->lcore_id, pbox.cfg.priority_hold);
		return NULL;
	}
	pbox_prio_hold_init(hold, pbox.cfg.priority_hold);
	PBOX_LOG(INFO, "lcore %u: P3 hold of %u frames, %u us at most", lc->lcore_id,
			pbox.cfg.priority_hold, pbox.cfg.priority_hold_us);
	return hold;
}

static void
prio_hold_free(struct pbox_prio_hold *hold)
{
	struct rte_mbuf *m;
	uint16_t pi;

	if (hold == NULL)
		return;
	while ((m = pbox_prio_hold_take(hold, 0, UINT64_MAX, &pi)) != NULL)
		rte_pktmbuf_free(m);
	rte_free(hold);
}

static void
flush_tx(struct pbox_lcore *lc)
{
	for (uint16_t pi = 0; pi < pbox.n_ports; pi++) {
		if (lc->tx[pi] != NULL)
			rte_eth_tx_buffer_flush(pbox.ports[pi].port_id, lc->queue[pi], lc->tx[pi]);
	}
}

/*
 * The idle policy: poll spins; adaptive spins spin_polls empty loops, then
 * sleeps for doubling times up to max_sleep_us, reported offline to RCU so
 * that the main lcore can free a job while this one sleeps.
 */
static void
idle(struct pbox_lcore *lc, unsigned int *empty, unsigned int tid)
{
	const struct phub_config_idle *policy = &pbox.cfg.idle;
	uint32_t us;

	if (policy->policy == PHUB_CONFIG_IDLE_POLL || ++*empty <= policy->spin_polls) {
		rte_pause();
		return;
	}
	us = 1u << RTE_MIN(*empty - policy->spin_polls - 1, 16u);
	us = RTE_MIN(us, policy->max_sleep_us);
	/* Frames left in the buffers wait for the next turn when the memif gate is shut. */
	if (pbox_memif_gate_enter(lc)) {
		flush_tx(lc);
		pbox_memif_gate_leave(lc);
	}
	rte_rcu_qsbr_thread_offline(pbox.qsbr, tid);
	rte_delay_us_sleep(us);
	rte_rcu_qsbr_thread_online(pbox.qsbr, tid);
	lc->stats.idle_sleeps++;
}

int
pbox_lcore_main(void *arg)
{
	struct pbox_lcore *lc = arg;
	const uint64_t drain_tsc = (rte_get_tsc_hz() + US_PER_S - 1) / US_PER_S * PBOX_TX_DRAIN_US;
	const uint64_t hold_age = rte_get_tsc_hz() / US_PER_S * pbox.cfg.priority_hold_us;
	struct pbox_prio_hold *hold = prio_hold_create(lc);
	struct rte_mbuf *pkts[PBOX_BURST];
	uint64_t prev_tsc = rte_rdtsc();
	unsigned int tid = lc->data_index;
	unsigned int empty = 0;

	rte_rcu_qsbr_thread_register(pbox.qsbr, tid);
	rte_rcu_qsbr_thread_online(pbox.qsbr, tid);
	PBOX_LOG(INFO, "lcore %u: serving UDP port %u on %u queues", lc->lcore_id, lc->udp_port,
			lc->n_rxq);

	while (!pbox.quit) {
		unsigned int work = 0;
		uint64_t cur_tsc, start_tsc;

		if (unlikely(__atomic_load_n(&lc->test_stall_ms, __ATOMIC_RELAXED) != 0))
			pbox_health_test_stall(lc);
		/* Every burst of this iteration, RX and TX, lies within one memif gate turn. */
		if (!pbox_memif_gate_enter(lc))
			goto quiescent;
		start_tsc = rte_rdtsc();
		/* One clock read per turn: the ring's timestamps and RTOs. */
		lc->now_ns = phub_engine_monotonic_ns();
		if (hold != NULL)
			work += serve_held(lc, hold, hold_age);
		for (uint16_t i = 0; hold == NULL && i < lc->n_rxq; i++) {
			uint16_t pi = lc->rx_ports[i];
			uint16_t n = rte_eth_rx_burst(pbox.ports[pi].port_id, lc->queue[pi], pkts,
					PBOX_BURST);

			/* P3: a burst of several priorities is served most urgent first. */
			if (pbox.cfg.priority_order && n > 1)
				serve_by_priority(pkts, n);
			for (uint16_t j = 0; j < n; j++) {
				if (j + 1 < n)
					rte_prefetch0(rte_pktmbuf_mtod(pkts[j + 1], void *));
				lc->stats.rx_pkts++;
				lc->stats.rx_bytes += pkts[j]->pkt_len;
				handle_frame(lc, pkts[j], pi, false);
			}
			work += n;
		}
		drain_inbox(lc, &work);
		/* The turn's ring datagrams are acknowledged together, one RING_ACKV. */
		ring_ackv_flush(lc);

		/* The turn's ACKs, one ACKV per rank, before the flush that sends them. */
		ackv_flush(lc);
		cur_tsc = rte_rdtsc();
		work += ring_poll(lc, cur_tsc);
		/* A loop that produced answers sends them now; an idle one every drain_tsc. */
		if (work != 0 || cur_tsc - prev_tsc > drain_tsc) {
			flush_tx(lc);
			prev_tsc = cur_tsc;
		}
		if (work != 0)
			lc->stats.busy_cycles += rte_rdtsc() - start_tsc;
		pbox_memif_gate_leave(lc);
quiescent:
		rte_rcu_qsbr_quiescent(pbox.qsbr, tid);
		lc->stats.loops++;
		if (work == 0)
			idle(lc, &empty, tid);
		else
			empty = 0;
	}
	/* The gate keeps turning until every lcore has returned; a shut one opens within ms. */
	for (uint64_t end = rte_rdtsc() + rte_get_tsc_hz() / 10; rte_rdtsc() < end; rte_pause()) {
		if (pbox_memif_gate_enter(lc)) {
			flush_tx(lc);
			pbox_memif_gate_leave(lc);
			break;
		}
	}
	prio_hold_free(hold);
	rte_rcu_qsbr_thread_offline(pbox.qsbr, tid);
	rte_rcu_qsbr_thread_unregister(pbox.qsbr, tid);
	return 0;
}
