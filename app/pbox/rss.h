/* SPDX-License-Identifier: BSD-3-Clause */
/* RSS on the UDP destination port: the hash inputs and keys the PBox asks for, and their RETA. */

#ifndef PBOX_RSS_H
#define PBOX_RSS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_thash.h>

/* Largest key and RETA the PBox programs (every PMD of DPDK 22.11 fits). */
#define PBOX_RSS_KEY_MAX 64
#define PBOX_RSS_RETA_MAX 512

/*
 * How the NIC hashes a UDP datagram, so that the hash depends on the destination port only:
 * - DST_ONLY: rss_hf NONFRAG_IPV4_UDP | L4_DST_ONLY; the Toeplitz input is the 16-bit
 *   destination port alone (input bits 0..15).
 * - DPORT_KEY: rss_hf NONFRAG_IPV4_UDP on the whole (src IP, dst IP, src port, dst port)
 *   input; the destination port is input bits 80..95 and the key (pbox_rss_dport_key()) keeps
 *   everything before it out of the hash.
 */
enum pbox_rss_mode {
	PBOX_RSS_DST_ONLY,
	PBOX_RSS_DPORT_KEY,
};

/* log2 of a RETA size (a power of two on every NIC), at most 16. */
static inline unsigned int
pbox_rss_reta_bits(uint16_t reta_size)
{
	unsigned int k = 0;

	while (k < 16 && (1u << (k + 1)) <= reta_size)
		k++;
	return k;
}

/*
 * The key that makes the RETA index the destination port's low k bits (reta_size = 2^k), bit
 * reversed: no two of 2^k consecutive ports share an entry. Toeplitz: input bit i flips hash
 * bit j (0 = most significant) when key bit i + j is set. Port bit b is input bit P - b (P =
 * 15 for DST_ONLY, 95 for DPORT_KEY) and RETA index bit m is hash bit 31 - m: they meet at key
 * bit P + 31 - (b + m). One key bit set, at P + 32 - k, links exactly the pairs b + m = k - 1.
 * In DPORT_KEY mode it is bit 127 - k >= 111: the addresses and the source port (input bits
 * 0..79) meet key bits 0..110 only, all zero, and do not reach the hash. len >= 16.
 */
static inline void
pbox_rss_dport_key(uint8_t *key, size_t len, enum pbox_rss_mode mode, uint16_t reta_size)
{
	unsigned int bit = (mode == PBOX_RSS_DST_ONLY ? 15 : 95) + 32 -
		pbox_rss_reta_bits(reta_size);

	memset(key, 0, len);
	key[bit / 8] = (uint8_t)(0x80 >> (bit % 8));
}

/* The hash a NIC computes for a UDP datagram to dport, in mode with key (host order inputs). */
static inline uint32_t
pbox_rss_hash(enum pbox_rss_mode mode, const uint8_t *key, uint32_t src_ip, uint32_t dst_ip,
		uint16_t sport, uint16_t dport)
{
	uint32_t tuple[3];

	if (mode == PBOX_RSS_DST_ONLY) {
		/* The port is the first 16 bits of the input; the rest of the word adds nothing. */
		tuple[0] = (uint32_t)dport << 16;
		return rte_softrss(tuple, 1, key);
	}
	tuple[0] = src_ip;
	tuple[1] = dst_ip;
	tuple[2] = (uint32_t)sport << 16 | dport;
	return rte_softrss(tuple, 3, key);
}

/* The RETA entry a hash selects: its low bits (reta_size is a power of two on every NIC). */
static inline uint32_t
pbox_rss_reta_index(uint32_t hash, uint16_t reta_size)
{
	return hash % reta_size;
}

/*
 * Fill reta[0 .. reta_size) so that UDP port ports[k] goes to queue queues[k]: entries no
 * port uses go to queue 0. Returns the number of ports whose entry another port took first
 * (their datagrams reach a wrong lcore and are handed over in software).
 */
static inline unsigned int
pbox_rss_reta_fill(enum pbox_rss_mode mode, const uint8_t *key, uint16_t reta_size,
		const uint16_t *ports, const uint16_t *queues, unsigned int n, uint16_t *reta)
{
	bool taken[PBOX_RSS_RETA_MAX] = { false };
	unsigned int collisions = 0;

	for (unsigned int i = 0; i < reta_size; i++)
		reta[i] = 0;
	for (unsigned int k = 0; k < n; k++) {
		/* The source does not reach the hash in either mode: any will do. */
		uint32_t e = pbox_rss_reta_index(pbox_rss_hash(mode, key, 0, 0, 0, ports[k]),
				reta_size);

		if (taken[e]) {
			collisions++;
			continue;
		}
		taken[e] = true;
		reta[e] = queues[k];
	}
	return collisions;
}

/* One rte_flow rule: UDP to ipv4 (host order) and dport goes to queue. */
struct pbox_flow_rule {
	struct rte_flow_attr attr;
	struct rte_flow_item_ipv4 ip_spec;
	struct rte_flow_item_ipv4 ip_mask;
	struct rte_flow_item_udp udp_spec;
	struct rte_flow_item_udp udp_mask;
	struct rte_flow_action_queue queue;
	struct rte_flow_item pattern[4];
	struct rte_flow_action actions[2];
};

/* Build the rule in place (it points into itself: do not copy it afterwards). */
static inline void
pbox_flow_rule_build(struct pbox_flow_rule *r, uint32_t ipv4, uint16_t dport, uint16_t queue)
{
	memset(r, 0, sizeof(*r));
	r->attr.ingress = 1;
	r->ip_spec.hdr.dst_addr = rte_cpu_to_be_32(ipv4);
	r->ip_mask.hdr.dst_addr = RTE_BE32(0xffffffff);
	r->udp_spec.hdr.dst_port = rte_cpu_to_be_16(dport);
	r->udp_mask.hdr.dst_port = RTE_BE16(0xffff);
	r->queue.index = queue;
	r->pattern[0].type = RTE_FLOW_ITEM_TYPE_ETH;
	r->pattern[1].type = RTE_FLOW_ITEM_TYPE_IPV4;
	r->pattern[1].spec = &r->ip_spec;
	r->pattern[1].mask = &r->ip_mask;
	r->pattern[2].type = RTE_FLOW_ITEM_TYPE_UDP;
	r->pattern[2].spec = &r->udp_spec;
	r->pattern[2].mask = &r->udp_mask;
	r->pattern[3].type = RTE_FLOW_ITEM_TYPE_END;
	r->actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
	r->actions[0].conf = &r->queue;
	r->actions[1].type = RTE_FLOW_ACTION_TYPE_END;
}

#endif /* PBOX_RSS_H */
