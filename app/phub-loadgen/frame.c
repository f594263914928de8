/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-loadgen's frames: Ethernet/IPv4/UDP around PHub datagrams, ARP, the TX queue. */

#include <errno.h>
#include <string.h>

#include <rte_arp.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include "loadgen.h"

void
lg_tx_flush(struct lg *lg)
{
	uint16_t sent;

	if (lg->n_txq == 0)
		return;
	sent = rte_eth_tx_burst(lg->opt.port_id, 0, lg->txq, lg->n_txq);
	for (uint16_t i = 0; i < sent; i++) {
		lg->stats.tx_pkts++;
		lg->stats.tx_bytes += lg->txq[i]->pkt_len;
	}
	if (sent < lg->n_txq) {
		/* The ring is full: keep the rest, in order, for the next try. */
		memmove(lg->txq, lg->txq + sent, (lg->n_txq - sent) * sizeof(lg->txq[0]));
		lg->stats.tx_full++;
	}
	lg->n_txq = (uint16_t)(lg->n_txq - sent);
}

/* Queue m; the caller checked that the queue has room (n_txq < LG_BURST). */
void
lg_tx(struct lg *lg, struct rte_mbuf *m)
{
	lg->txq[lg->n_txq++] = m;
	if (lg->n_txq == LG_BURST)
		lg_tx_flush(lg);
}

/* Flush until the queue has room, for the control path that must not drop its frame. */
static int
tx_make_room(struct lg *lg)
{
	uint64_t deadline = rte_rdtsc() + lg->tsc_hz;

	while (lg->n_txq == LG_BURST) {
		lg_tx_flush(lg);
		if (rte_rdtsc() > deadline)
			return -EAGAIN;
	}
	return 0;
}

/* One control datagram (JOIN, LEAVE) from worker w to the PBox's control port. */
int
lg_frame_control(struct lg *lg, const struct lg_worker *w, const void *datagram, uint16_t len)
{
	struct rte_mbuf *m;
	uint8_t *p;

	if (tx_make_room(lg) != 0)
		return -EAGAIN;
	m = rte_pktmbuf_alloc(lg->pool);
	if (m == NULL)
		return -ENOMEM;
	p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(LG_L2_L4_LEN + len));
	if (p == NULL) {
		rte_pktmbuf_free(m);
		return -ENOSPC;
	}
	phub_net_udp_build(m, &w->mac, &lg->pbox_mac, w->ipv4, lg->opt.pbox_ipv4, w->udp,
			lg->opt.base_port, len);
	memcpy(p + LG_L2_L4_LEN, datagram, len);
	/* With --no-udp-csum the field stays 0, which UDP over IPv4 reads as "no checksum". */
	if (lg->opt.udp_csum)
		phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + len), 0);
	lg_tx(lg, m);
	lg_tx_flush(lg);
	return 0;
}

/*
 * One PUSH (or PULL) frame of segment s from worker w with header hdr. The payload is the shared
 * gradient mbuf, attached by reference when the port takes chained frames, else copied: either
 * way the generator does not write 8 KB per datagram, so it stays ahead of what it measures.
 */
struct rte_mbuf *
lg_frame_push(struct lg *lg, struct lg_worker *w, const struct lg_segment *s,
		const struct phub_wire_msg *hdr)
{
	uint16_t bytes = hdr->payload_len;
	uint16_t hl = (uint16_t)((hdr->flags & PHUB_WIRE_F_AUTH) ?
			LG_HEAD_LEN_AUTH - LG_L2_L4_LEN : PHUB_WIRE_HDR_LEN);
	struct rte_mbuf *m;
	uint8_t *p;

	m = rte_pktmbuf_alloc(lg->chained_tx ? lg->hdr_pool : lg->pool);
	if (unlikely(m == NULL))
		return NULL;
	p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(LG_L2_L4_LEN + hl));
	if (unlikely(p == NULL))
		goto err;
	phub_net_udp_build(m, &w->mac, &lg->pbox_mac, w->ipv4, lg->opt.pbox_ipv4, w->udp,
			s->dst_udp, (uint16_t)(hl + bytes));
	if (unlikely(phub_wire_hdr_encode(p + LG_L2_L4_LEN, hl, hdr, 0) < 0))
		goto err;
	/* The MAC over the header and the shared gradient, where it lies: no copy for it. */
	if ((hdr->flags & PHUB_WIRE_F_AUTH) &&
	    unlikely(s->lane >= w->n_lanes ||
		     !phub_auth_lane_seal(&w->lanes[s->lane], s->lane, p + LG_L2_L4_LEN, hl,
				     hdr->payload, bytes)))
		goto err;
	if (bytes > 0 && lg->chained_tx) {
		struct rte_mbuf *mi = phub_net_extref_get(lg->refs, lg->indirect_pool,
				rte_pktmbuf_mtod(lg->payload, void *), rte_pktmbuf_iova(lg->payload),
				lg->payload->data_len, bytes);

		if (unlikely(mi == NULL))
			goto err;
		if (unlikely(rte_pktmbuf_chain(m, mi) != 0)) {
			rte_pktmbuf_free(mi);
			goto err;
		}
	} else if (bytes > 0) {
		void *dst = rte_pktmbuf_append(m, bytes);

		if (unlikely(dst == NULL))
			goto err;
		memcpy(dst, rte_pktmbuf_mtod(lg->payload, void *), bytes);
	}
	if (lg->opt.udp_csum)
		phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + hl),
				bytes > 0 ? s->payload_sum : 0);
	return m;
err:
	rte_pktmbuf_free(m);
	return NULL;
}

const uint8_t *
lg_frame_udp_payload(struct rte_mbuf *m, uint32_t *dst_ip, uint16_t *dst_udp, uint16_t *src_udp,
		uint16_t *len)
{
	const struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, const struct rte_ether_hdr *);
	const struct rte_ipv4_hdr *ip;
	const struct rte_udp_hdr *udp;
	uint16_t ihl, ip_len, udp_len;

	/* The whole frame in one mbuf: the pool is sized for the MTU. */
	if (m->nb_segs != 1 || m->data_len < LG_L2_L4_LEN ||
	    eth->ether_type != RTE_BE16(RTE_ETHER_TYPE_IPV4))
		return NULL;
	ip = (const struct rte_ipv4_hdr *)(eth + 1);
	ihl = (uint16_t)((ip->version_ihl & RTE_IPV4_HDR_IHL_MASK) * 4);
	ip_len = rte_be_to_cpu_16(ip->total_length);
	if (ip->next_proto_id != IPPROTO_UDP || ihl < sizeof(*ip) ||
	    ip_len < ihl + sizeof(*udp) || ip_len > m->data_len - RTE_ETHER_HDR_LEN)
		return NULL;
	udp = (const struct rte_udp_hdr *)((const uint8_t *)ip + ihl);
	udp_len = rte_be_to_cpu_16(udp->dgram_len);
	if (udp_len < sizeof(*udp) || udp_len > ip_len - ihl)
		return NULL;
	*dst_ip = rte_be_to_cpu_32(ip->dst_addr);
	*dst_udp = rte_be_to_cpu_16(udp->dst_port);
	if (src_udp != NULL)
		*src_udp = rte_be_to_cpu_16(udp->src_port);
	*len = (uint16_t)(udp_len - sizeof(*udp));
	return (const uint8_t *)(udp + 1);
}

static int
arp_request(struct lg *lg, const struct lg_worker *w)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(lg->pool);
	struct rte_ether_hdr *eth;
	struct rte_arp_hdr *arp;

	if (m == NULL)
		return -ENOMEM;
	eth = (struct rte_ether_hdr *)rte_pktmbuf_append(m, sizeof(*eth) + sizeof(*arp));
	if (eth == NULL) {
		rte_pktmbuf_free(m);
		return -ENOSPC;
	}
	arp = (struct rte_arp_hdr *)(eth + 1);
	memset(&eth->dst_addr, 0xff, sizeof(eth->dst_addr));
	rte_ether_addr_copy(&w->mac, &eth->src_addr);
	eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_ARP);
	arp->arp_hardware = RTE_BE16(RTE_ARP_HRD_ETHER);
	arp->arp_protocol = RTE_BE16(RTE_ETHER_TYPE_IPV4);
	arp->arp_hlen = RTE_ETHER_ADDR_LEN;
	arp->arp_plen = 4;
	arp->arp_opcode = RTE_BE16(RTE_ARP_OP_REQUEST);
	rte_ether_addr_copy(&w->mac, &arp->arp_data.arp_sha);
	arp->arp_data.arp_sip = rte_cpu_to_be_32(w->ipv4);
	memset(&arp->arp_data.arp_tha, 0, sizeof(arp->arp_data.arp_tha));
	arp->arp_data.arp_tip = rte_cpu_to_be_32(lg->opt.pbox_ipv4);
	if (tx_make_room(lg) != 0) {
		rte_pktmbuf_free(m);
		return -EAGAIN;
	}
	lg_tx(lg, m);
	lg_tx_flush(lg);
	return 0;
}

/*
 * Learn the PBox's MAC by ARP, as a worker's kernel would: a request every 100 ms from worker
 * 0's address until the reply comes or timeout_s passes (-ETIMEDOUT).
 */
int
lg_resolve_pbox(struct lg *lg, double timeout_s)
{
	uint64_t start = rte_rdtsc();
	uint64_t deadline = start + (uint64_t)(timeout_s * (double)lg->tsc_hz);
	uint64_t next_req = start;

	while (!lg_quit && rte_rdtsc() < deadline) {
		struct rte_mbuf *pkts[LG_BURST];
		uint16_t n;

		if (rte_rdtsc() >= next_req) {
			arp_request(lg, &lg->workers[0]);
			next_req = rte_rdtsc() + lg->tsc_hz / 10;
		}
		n = rte_eth_rx_burst(lg->opt.port_id, 0, pkts, LG_BURST);
		for (uint16_t i = 0; i < n; i++) {
			const struct rte_ether_hdr *eth = rte_pktmbuf_mtod(pkts[i],
					const struct rte_ether_hdr *);
			const struct rte_arp_hdr *arp = (const struct rte_arp_hdr *)(eth + 1);
			bool reply = pkts[i]->data_len >= sizeof(*eth) + sizeof(*arp) &&
				eth->ether_type == RTE_BE16(RTE_ETHER_TYPE_ARP) &&
				arp->arp_opcode == RTE_BE16(RTE_ARP_OP_REPLY) &&
				arp->arp_data.arp_sip == rte_cpu_to_be_32(lg->opt.pbox_ipv4);

			if (reply)
				rte_ether_addr_copy(&arp->arp_data.arp_sha, &lg->pbox_mac);
			rte_pktmbuf_free(pkts[i]);
			if (reply) {
				rte_pktmbuf_free_bulk(pkts + i + 1, n - i - 1);
				return 0;
			}
		}
	}
	return -ETIMEDOUT;
}
