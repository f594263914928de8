/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data lcores' run-to-completion loop and the checks of a frame: receive, check each header
 * before reading past it, hand a datagram to the lcore that owns its chunk, let the engine
 * aggregate it, answer (datapath_tx.c), drain the TX buffers, idle. No locks, no malloc, no log.
 */

#include <string.h>

#include <rte_arp.h>
#include <rte_cycles.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_udp.h>

#include "datapath_priv.h"
#include "prio.h"

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

void
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

/* The PHub flags byte of a UDP payload says AUTH (the MAC replaces the UDP checksum pass). */
static inline bool
udp_auth_flagged(const struct rte_udp_hdr *udp, uint16_t udp_len)
{
	return udp_len >= sizeof(*udp) + PHUB_WIRE_HDR_LEN &&
		(((const uint8_t *)(udp + 1))[offsetof(struct phub_wire_hdr, flags)] &
		 PHUB_WIRE_F_AUTH) != 0;
}

/*
 * What a data lcore learned of the jobs and sessions it served in one loop turn, asked once a
 * turn instead of once per datagram: a job's layout and whether it authenticates (fixed for the
 * job's life), a session's ACKV wish (fixed for the session, which its token names). Valid in
 * the turn that filled it only: a job may be freed once the lcore reports its quiescent state at
 * the turn's end (turn_cache_next()). The job itself is still looked up per datagram, so that
 * one unpublished within the turn is dropped as before.
 */
#define TURN_CACHE_RANKS 16

struct turn_rank {
	uint64_t turn;
	const struct phub_engine_job *job;
	uint64_t token;
	uint16_t wire_rank;
	bool ackv;
};

struct turn_cache {
	uint64_t turn;
	uint64_t job_turn;
	const struct phub_engine_job *job;
	const struct phub_layout *layout;
	bool auth;
	struct turn_rank rank[TURN_CACHE_RANKS];
} __rte_cache_aligned;

static struct turn_cache turn_caches[RTE_MAX_LCORE];

/* A new loop turn: nothing the last one learned is used again (RCU). */
static inline void
turn_cache_next(struct pbox_lcore *lc)
{
	turn_caches[lc->data_index].turn++;
}

/* phub_dataplane_route(), the job's layout and AUTH asked once a turn. */
static inline enum phub_drop_reason
route_cached(struct turn_cache *tc, const struct phub_wire_msg *msg,
		struct phub_engine_job **job, uint32_t *server)
{
	*job = phub_engine_job_lookup(pbox.engine, msg->job_id);
	if (unlikely(*job == NULL))
		return PHUB_DROP_UNKNOWN_JOB;
	if (tc->job != *job || tc->job_turn != tc->turn) {
		tc->job = *job;
		tc->job_turn = tc->turn;
		tc->layout = phub_engine_job_layout(*job);
		tc->auth = phub_engine_job_auth(*job);
	}
	if (unlikely(phub_layout_chunk_server(tc->layout, msg->chunk_id, server) != 0))
		return PHUB_DROP_CHUNK_RANGE;
	return PHUB_DROP_OK;
}

/*
 * Whether the sender of msg takes ACKV (phub_dataplane_rank_wants()), asked once a turn per
 * session: a datagram with its session's token reads the answer its session gave. Any other
 * (no session, a stale or wrong token) asks again: the engine drops it anyway.
 */
static inline bool
rank_ackv_cached(struct turn_cache *tc, const struct phub_engine_job *job,
		const struct phub_wire_msg *msg)
{
	struct turn_rank *r = &tc->rank[msg->worker_rank % TURN_CACHE_RANKS];
	struct phub_engine_peer peer;
	uint64_t token;
	uint16_t rank;

	if (likely(r->turn == tc->turn && r->job == job && r->wire_rank == msg->worker_rank &&
		   r->token == msg->session_token))
		return r->ackv;
	if (!phub_dataplane_peer(job, msg->worker_rank, &rank, &peer, &token))
		return false;
	r->turn = tc->turn;
	r->job = job;
	r->wire_rank = msg->worker_rank;
	r->token = token;
	r->ackv = (peer.flags & PHUB_ENGINE_PEER_F_ACKV) != 0;
	return r->ackv;
}

static void
handle_data(struct pbox_lcore *lc, struct rx_frame *f)
{
	struct turn_cache *tc = &turn_caches[lc->data_index];
	struct phub_engine_request req;
	struct phub_engine_reply reply;
	bool ackv;
	struct phub_engine_job *job;
	enum phub_drop_reason why;
	uint32_t server;
	uint16_t tx_port, owner;

	why = route_cached(tc, &f->msg, &job, &server);
	if (why != PHUB_DROP_OK) {
		wire_drop(lc, f->m, why);
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
	if (unlikely(tc->auth || (f->msg.flags & PHUB_WIRE_F_AUTH))) {
		why = phub_dataplane_auth_rx(job, &f->msg, f->udp_payload, server);
		if (unlikely(why != PHUB_DROP_OK)) {
			wire_drop(lc, f->m, why);
			return;
		}
	}
	/* The loop's one clock read (the jobs' clock, control.c): none per PUSH. */
	phub_dataplane_request(&f->msg, f->src_ip, f->src_udp, lc->now_ns, &req);
	/* Asked once: the lending below and the ACK's form must agree. */
	ackv = rank_ackv_cached(tc, job, &f->msg);

	if (f->msg.opcode == PHUB_WIRE_OP_PUSH) {
		uint64_t taken = lc->engine_stats.pushes;

		/*
		 * The frame is lent as the segment's sum (the engine copies nothing; main.c's
		 * release frees it) while the pools have plenty and its ACK leaves in an ACKV, so
		 * that nothing reuses the frame; a small one is copied (PBOX_LEND_MIN_BYTES). A
		 * kept frame is the engine's: f->m NULL.
		 */
		if (lc->may_lend && req.payload_len >= PBOX_LEND_MIN_BYTES && ackv)
			req.lend = f->m;
		phub_engine_push(job, &req, &reply, &lc->engine_stats);
		if (reply.kept)
			f->m = NULL;
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
		answer_ack(lc, job, f, server, ackv);
		send_model(lc, job, &f->msg, &reply, tx_port, true);
	} else if (reply.actions & PHUB_ENGINE_MODEL_ONE) {
		send_model(lc, job, &f->msg, &reply, tx_port, false);
		rte_pktmbuf_free(f->m);
	} else {
		answer_ack(lc, job, f, server, ackv);
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
 * What the checks of a frame's headers found (handle_frame(): they left the Ethernet and IPv4
 * header lengths in l2_len and l3_len), read back without checking again: on the lcore that
 * checked it, and on the one it was handed to.
 */
static inline void
rx_frame_fill(struct rx_frame *f, struct rte_mbuf *m, uint16_t pi)
{
	const struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, const struct rte_ether_hdr *);
	const struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(m, const struct rte_ipv4_hdr *,
			m->l2_len);
	const struct rte_udp_hdr *udp = rte_pktmbuf_mtod_offset(m, const struct rte_udp_hdr *,
			m->l2_len + m->l3_len);

	f->m = m;
	f->port_index = pi;
	rte_ether_addr_copy(&eth->src_addr, &f->src_mac);
	f->src_ip = rte_be_to_cpu_32(ip->src_addr);
	f->src_udp = rte_be_to_cpu_16(udp->src_port);
	f->dst_udp = rte_be_to_cpu_16(udp->dst_port);
	f->udp_payload = (const uint8_t *)(udp + 1);
	f->udp_payload_len = (uint16_t)(rte_be_to_cpu_16(udp->dgram_len) - sizeof(*udp));
}

/*
 * A datagram on a data port, its headers checked: the PHub header parsed and the opcode's
 * handler called; handed is true for a frame another lcore checked and passed here (its owner:
 * handle_data() is the one ownership check), which RING_ACKV does not hand on again.
 */
static void
handle_datagram(struct pbox_lcore *lc, struct rx_frame *f, bool handed)
{
	enum phub_drop_reason why;

	/* The common datagram, a plain PUSH, parsed without the general parser's branches. */
	if (likely(phub_wire_parse_push(f->udp_payload, f->udp_payload_len, &f->msg))) {
		handle_data(lc, f);
		return;
	}
	why = phub_wire_parse(f->udp_payload, f->udp_payload_len, &f->msg);
	if (why != PHUB_DROP_OK) {
		wire_drop(lc, f->m, why);
		return;
	}
	switch (f->msg.opcode) {
	case PHUB_WIRE_OP_PUSH:
	case PHUB_WIRE_OP_PULL:
	case PHUB_WIRE_OP_RING_REDUCE:
	case PHUB_WIRE_OP_RING_GATHER:
	case PHUB_WIRE_OP_RING_ACK:
		handle_data(lc, f);
		break;
	case PHUB_WIRE_OP_RING_ACKV:
		handle_ring_ackv(lc, f, handed);
		break;
	case PHUB_WIRE_OP_PING:
		handle_ping(lc, f);
		break;
	default:
		wire_drop(lc, f->m, PHUB_DROP_UNEXPECTED_OPCODE);
		break;
	}
}

/* Every check of one received frame's headers, in the order they come. */
static void
handle_frame(struct pbox_lcore *lc, struct rte_mbuf *m, uint16_t pi)
{
	const struct pbox_port *port = &pbox.ports[pi];
	struct rte_ether_hdr *eth;
	struct rte_ipv4_hdr *ip;
	struct rte_udp_hdr *udp;
	struct rx_frame f;
	uint16_t ip_len, udp_len, ihl, dst_udp;

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
	if (udp->dgram_cksum != 0) {
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

	/*
	 * Both lengths in one store of the word that holds them: the two bitfields' own stores are
	 * a read of that word (the mbuf's second cache line) waiting on the first one's byte store,
	 * two thirds of this function at 1 KB segments (perf annotate). Its other fields are not
	 * used here.
	 */
	m->tx_offload = rte_mbuf_tx_offload(RTE_ETHER_HDR_LEN, ihl, 0, 0, 0, 0, 0);
	dst_udp = rte_be_to_cpu_16(udp->dst_port);
	if (dst_udp == pbox.cfg.udp_base_port) {
		/* Control: JOIN, LEAVE, PING to the control port go to the main lcore. */
		m->hash.usr = PBOX_INBOX_RX | ((uint32_t)pi << 8);
		if (rte_ring_enqueue(pbox.control_ring, m) != 0) {
			net_drop(lc, m, PBOX_NET_DROP_RING_FULL);
			return;
		}
		lc->stats.control++;
		return;
	}
	/*
	 * A data port no lcore serves. Which lcore owns the datagram is not the port's to say: the
	 * chunk's owner in the layout is (handle_data()), whatever port it came to.
	 */
	if (dst_udp <= pbox.cfg.udp_base_port ||
	    dst_udp - pbox.cfg.udp_base_port - 1 >= pbox.n_lcores) {
		net_drop(lc, m, PBOX_NET_DROP_UNKNOWN_PORT);
		return;
	}
	rx_frame_fill(&f, m, pi);
	handle_datagram(lc, &f, false);
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
			struct rx_frame f;

			/* Checked by the lcore that handed it: its headers are not checked again. */
			lc->stats.handed_in++;
			rx_frame_fill(&f, m, pi);
			handle_datagram(lc, &f, true);
		}
	}
	*work += n;
}

/* A segment that a removed rank no longer holds up: its MODEL to every rank left. */
static void
elastic_done(void *arg, const struct phub_engine_segment_done *what)
{
	struct ring_poll_ctx *c = arg;
	struct phub_wire_msg about;
	uint32_t server = 0;

	phub_layout_chunk_server(phub_engine_job_layout(c->job), what->chunk_id, &server);
	phub_dataplane_elastic_about(c->job, what, &about);
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
		handle_frame(lc, m, pi);
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

/*
 * Whether PUSH frames may be lent to the engine (handle_data()): while every direct pool has
 * more than half its mbufs free. Counting a pool's free mbufs reads every lcore's cache, so
 * once per PBOX_LEND_CHECK_NS; the kept frames are bounded by the segments in flight.
 */
static void
lend_check(struct pbox_lcore *lc)
{
	lc->lend_checked_ns = lc->now_ns;
	lc->may_lend = true;
	for (unsigned int s = 0; s < RTE_MAX_NUMA_NODES; s++)
		if (pbox.pools[s] != NULL &&
		    rte_mempool_avail_count(pbox.pools[s]) <= pbox.pools[s]->size / 2)
			lc->may_lend = false;
}

static void
flush_tx(struct pbox_lcore *lc)
{
	for (uint16_t pi = 0; pi < pbox.n_ports; pi++) {
		if (lc->tx[pi] != NULL)
			rte_eth_tx_buffer_flush(pbox.ports[pi].port_id, lc->queue[pi], lc->tx[pi]);
	}
	model_refs_flushed(lc);
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

/*
 * Microseconds between reads of the jobs' clock (CLOCK_MONOTONIC) on a data lcore; the turns
 * between take it from the TSC they already read. The read (a vDSO call with its own TSC read)
 * was 5 to 11 ns per datagram at 1 KB segments; the TSC's rate as the EAL measured it is off by
 * a part in a thousand at worst, a microsecond per read here.
 */
#define PBOX_CLOCK_SYNC_US 1000

static void
turn_clock_init(struct pbox_lcore *lc)
{
	lc->clock_mult = (uint64_t)(((unsigned __int128)NS_PER_S << 32) / rte_get_tsc_hz());
	lc->clock_sync_tsc = rte_get_tsc_hz() / US_PER_S * PBOX_CLOCK_SYNC_US;
	lc->clock_tsc = rte_rdtsc();
	lc->clock_ns = phub_engine_monotonic_ns();
	lc->now_ns = lc->clock_ns;
}

/* The jobs' clock at the turn that read tsc: never behind the last turn's. */
static inline void
turn_clock(struct pbox_lcore *lc, uint64_t tsc)
{
	uint64_t d = tsc - lc->clock_tsc, ns;

	if (unlikely(d >= lc->clock_sync_tsc)) {
		lc->clock_tsc = tsc;
		lc->clock_ns = phub_engine_monotonic_ns();
		ns = lc->clock_ns;
	} else {
		/* d < clock_sync_tsc: the product stays under 2^64 (10^6 ns << 32). */
		ns = lc->clock_ns + ((d * lc->clock_mult) >> 32);
	}
	if (ns > lc->now_ns)
		lc->now_ns = ns;
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

	turn_clock_init(lc);
	rte_rcu_qsbr_thread_register(pbox.qsbr, tid);
	rte_rcu_qsbr_thread_online(pbox.qsbr, tid);
	PBOX_LOG(INFO, "lcore %u: serving UDP port %u on %u queues", lc->lcore_id, lc->udp_port,
			lc->n_rxq);

	while (!pbox.quit) {
		unsigned int work = 0;
		uint64_t start_tsc;

		if (unlikely(__atomic_load_n(&lc->test_stall_ms, __ATOMIC_RELAXED) != 0))
			pbox_health_test_stall(lc);
		/* Every burst of this iteration, RX and TX, lies within one memif gate turn. */
		if (!pbox_memif_gate_enter(lc))
			goto quiescent;
		start_tsc = rte_rdtsc();
		/* One time per turn: the ring's timestamps and RTOs. */
		turn_clock(lc, start_tsc);
		turn_cache_next(lc);
		if (unlikely(lc->now_ns - lc->lend_checked_ns > PBOX_LEND_CHECK_NS))
			lend_check(lc);
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
				handle_frame(lc, pkts[j], pi);
			}
			work += n;
		}
		drain_inbox(lc, &work);
		/* The turn's ring datagrams are acknowledged together, one RING_ACKV. */
		ring_ackv_flush(lc);

		/* The turn's ACKs, one ACKV per rank, before the flush that sends them. */
		ackv_flush(lc);
		/* The turn's start stands for its time here too: a turn is microseconds. */
		work += ring_poll(lc, start_tsc);
		/* A loop that produced answers sends them now; an idle one every drain_tsc. */
		if (work != 0 || lc->model_refs_turn || start_tsc - prev_tsc > drain_tsc) {
			flush_tx(lc);
			prev_tsc = start_tsc;
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
