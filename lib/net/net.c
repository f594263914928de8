/* SPDX-License-Identifier: BSD-3-Clause */
/* lib/net's out-of-line part: the Ethernet/IPv4/UDP header builder and the reference stack. */

#include "phub_net.h"

uint16_t
phub_net_udp_build(struct rte_mbuf *m, const struct rte_ether_addr *src_mac,
		const struct rte_ether_addr *dst_mac, uint32_t src_ip, uint32_t dst_ip,
		uint16_t src_udp, uint16_t dst_udp, uint16_t udp_payload_len)
{
	struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);

	rte_ether_addr_copy(dst_mac, &eth->dst_addr);
	rte_ether_addr_copy(src_mac, &eth->src_addr);
	eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV4);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->type_of_service = 0;
	ip->total_length = rte_cpu_to_be_16((uint16_t)(sizeof(*ip) + sizeof(*udp) +
			udp_payload_len));
	ip->packet_id = 0;
	/* Don't fragment: every datagram fits the MTU by construction (the PBox drops fragments). */
	ip->fragment_offset = RTE_BE16(RTE_IPV4_HDR_DF_FLAG);
	ip->time_to_live = 64;
	ip->next_proto_id = IPPROTO_UDP;
	ip->src_addr = rte_cpu_to_be_32(src_ip);
	ip->dst_addr = rte_cpu_to_be_32(dst_ip);
	ip->hdr_checksum = 0;
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	udp->src_port = rte_cpu_to_be_16(src_udp);
	udp->dst_port = rte_cpu_to_be_16(dst_udp);
	udp->dgram_len = rte_cpu_to_be_16((uint16_t)(sizeof(*udp) + udp_payload_len));
	udp->dgram_cksum = 0;
	m->l2_len = RTE_ETHER_HDR_LEN;
	m->l3_len = sizeof(*ip);
	return PHUB_NET_UDP_HDR_LEN;
}

void
phub_net_udp_csum_finish(struct rte_mbuf *m, uint16_t head_udp_len, uint32_t payload_sum)
{
	struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(m, struct rte_ipv4_hdr *,
			RTE_ETHER_HDR_LEN);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
	uint32_t sum;
	uint16_t csum;

	/*
	 * The pseudo-header from the fields, not rte_ipv4_phdr_cksum: that one sums a copy built
	 * on the stack 16 bits a step, words spanning its narrow stores, which the CPU cannot
	 * forward (two thirds of phub-loadgen's checksum time at 1 KB). Six words of it and two
	 * 16-bit sums stay below 2^19: two folds bring that to 16 bits.
	 */
	sum = phub_net_udp_phdr_sum(ip->src_addr, ip->dst_addr, rte_be_to_cpu_16(udp->dgram_len));
	sum += phub_net_raw_cksum(udp, head_udp_len);
	sum += payload_sum;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	csum = (uint16_t)~sum;
	/* 0 means "no checksum" in UDP over IPv4: send its other form. */
	udp->dgram_cksum = csum == 0 ? 0xffff : csum;
}

void
phub_net_extref_stack_init(struct phub_net_extref_stack *st, struct phub_net_extref *all,
		struct phub_net_extref **free_slots, uint32_t n)
{
	st->all = all;
	st->free = free_slots;
	st->n = n;
	st->n_free = n;
	for (uint32_t i = 0; i < n; i++) {
		all[i].owner = st;
		free_slots[i] = &all[i];
	}
}

void
phub_net_extref_put(void *addr, void *opaque)
{
	struct phub_net_extref *ref = opaque;

	(void)addr;
	ref->owner->free[ref->owner->n_free++] = ref;
}
