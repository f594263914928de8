/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the data lcores' files share (datapath.c: the loop and the checks of a frame,
 * datapath_tx.c: the answers' frames, datapath_ring.c: the ring of PBoxes): the checked frame,
 * the drop counters, the TX buffers and the functions one calls in another. Private to
 * app/pbox's data path.
 */

#ifndef PBOX_DATAPATH_PRIV_H
#define PBOX_DATAPATH_PRIV_H

#include <rte_ip.h>
#include <rte_udp.h>

#include "dataplane/phub_dataplane.h"
#include "engine/phub_engine_auth.h"
#include "engine/phub_ring.h"
#include "pbox.h"

#define L2_L3_L4_LEN (RTE_ETHER_HDR_LEN + sizeof(struct rte_ipv4_hdr) + sizeof(struct rte_udp_hdr))

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

/* An authenticated job's datagram to one of its ranks, sealed on the lane that sends it. */
struct auth_to {
	struct phub_engine_job *job;	/* NULL: not authenticated */
	uint16_t rank;			/* the engine's (local) rank; or: */
#define PBOX_AUTH_RING_PREV UINT16_MAX	/* a RING_ACKV to the previous PBox (lane: lcore's) */
	uint16_t lane;			/* PHUB_ENGINE_AUTH_LANE_DATA(server) */
};

/* The lane of a chunk's datagrams: its server's, as the worker numbers its endpoints. */
static inline uint16_t
auth_lane(const struct phub_engine_job *job, uint32_t chunk_id)
{
	uint32_t server = 0;

	phub_layout_chunk_server(phub_engine_job_layout(job), chunk_id, &server);
	return (uint16_t)phub_dataplane_lane(server);
}

/* The lcore and job of a ring or elastic scan (phub_engine_ring_poll_some()'s owns and send). */
struct ring_poll_ctx {
	struct pbox_lcore *lc;
	struct phub_engine_job *job;
};

/* datapath.c: hand a checked frame to the lcore that owns its chunk, counted as wrong_lcore. */
void hand_off(struct pbox_lcore *lc, struct rte_mbuf *m, uint16_t pi, uint16_t owner);

/* datapath_tx.c: the answers. */
void reply_in_place(struct pbox_lcore *lc, struct rx_frame *f, uint16_t tx_port,
		const struct phub_wire_msg *answer, const struct auth_to *auth);
void answer_ack(struct pbox_lcore *lc, struct phub_engine_job *job, struct rx_frame *f,
		uint32_t server, bool ackv);
void ackv_flush(struct pbox_lcore *lc);
void send_model(struct pbox_lcore *lc, struct phub_engine_job *job,
		const struct phub_wire_msg *about, const struct phub_engine_reply *reply,
		uint16_t tx_port, bool all);
void model_refs_flushed(struct pbox_lcore *lc);

/* datapath_ring.c: the ring of PBoxes (docs/hierarchy.md). */
void handle_ring(struct pbox_lcore *lc, struct rx_frame *f, struct phub_engine_job *job,
		uint32_t server);
void handle_ring_ackv(struct pbox_lcore *lc, struct rx_frame *f, bool handed);
void ring_ackv_flush(struct pbox_lcore *lc);
void send_ring(struct pbox_lcore *lc, struct phub_engine_job *job,
		const struct phub_engine_ring_send *what);
bool ring_poll_owns(void *arg, uint32_t server);
void ring_poll_send(void *arg, const struct phub_engine_ring_send *what);

#endif /* PBOX_DATAPATH_PRIV_H */
