/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The frames of the DPDK programs (phub-pbox, phub-loadgen): Ethernet/IPv4/UDP headers and their
 * checksums, and references to memory that frames point into without a copy. The checksums
 * alone need no DPDK (phub_net_csum.h); the rest works on mbufs.
 */

#ifndef PHUB_NET_H
#define PHUB_NET_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include "phub_net_csum.h"

/* Bytes of the Ethernet, IPv4 (no options) and UDP headers that phub_net_udp_build writes. */
#define PHUB_NET_UDP_HDR_LEN (RTE_ETHER_HDR_LEN + sizeof(struct rte_ipv4_hdr) + \
		sizeof(struct rte_udp_hdr))

/*
 * Write Ethernet, IPv4 and UDP headers at the start of m's data (PHUB_NET_UDP_HDR_LEN bytes
 * there, appended or not); udp_payload_len bytes follow them, in this mbuf or chained ones.
 * Addresses and ports in host order. The IPv4 checksum is written; the UDP checksum is left 0
 * ("none") for phub_net_udp_csum_finish. Returns PHUB_NET_UDP_HDR_LEN.
 */
uint16_t phub_net_udp_build(struct rte_mbuf *m, const struct rte_ether_addr *src_mac,
		const struct rte_ether_addr *dst_mac, uint32_t src_ip, uint32_t dst_ip,
		uint16_t src_udp, uint16_t dst_udp, uint16_t udp_payload_len);

/*
 * The UDP checksum of a frame built by phub_net_udp_build, as a kernel sender puts it: the
 * pseudo-header, the head_udp_len bytes of UDP in the first mbuf and payload_sum, the raw sum
 * (phub_net_raw_cksum, 16 bits) of the rest, computed once for a payload that several frames
 * share. The sums add because the rest starts at an even offset of the datagram.
 */
void phub_net_udp_csum_finish(struct rte_mbuf *m, uint16_t head_udp_len, uint32_t payload_sum);

/* The UDP checksum over the pseudo-header and the datagram's own length sums to all ones. */
static inline bool
phub_net_udp_csum_ok(const struct rte_ipv4_hdr *ip, const struct rte_udp_hdr *udp,
		uint16_t udp_len)
{
	uint32_t sum = phub_net_udp_phdr_sum(ip->src_addr, ip->dst_addr, udp_len) +
		phub_net_raw_cksum(udp, udp_len);

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

/*
 * References to memory that frames point into without a copy (an external buffer per frame),
 * each with a shared info of its own at refcount 1: the driver's free of such a frame counts
 * 1 to 0 without a locked instruction, which would wait for the driver's copy of the frame to
 * leave the store buffer (a shared count above 1 is dropped with one). The references not in
 * use are a stack; one lcore takes and gives them back (its TX frees them). phub-pbox's MODEL
 * frames and phub-loadgen's PUSHes use it.
 */
struct phub_net_extref_stack;

struct phub_net_extref {
	struct rte_mbuf_ext_shared_info shinfo;
	struct phub_net_extref_stack *owner;
};

struct phub_net_extref_stack {
	struct phub_net_extref *all;	/* n of them, memory of the caller's */
	struct phub_net_extref **free;	/* n slots */
	uint32_t n;
	uint32_t n_free;
};

/* The stack over all and free_slots, n each, every reference free. */
void phub_net_extref_stack_init(struct phub_net_extref_stack *st, struct phub_net_extref *all,
		struct phub_net_extref **free_slots, uint32_t n);

/* The driver freed a frame: its reference (opaque) goes back. The shared info's free_cb. */
void phub_net_extref_put(void *addr, void *opaque);

/* Whether a frame still holds one of the stack's references. */
static inline bool
phub_net_extref_out(const struct phub_net_extref_stack *st)
{
	return st->n_free != st->n;
}

/*
 * An mbuf of pool (no data room of its own needed) whose data are data_len bytes at addr, in
 * a buffer of buf_len bytes there (IOVA iova); NULL when no reference or mbuf is left.
 */
static inline struct rte_mbuf *
phub_net_extref_get(struct phub_net_extref_stack *st, struct rte_mempool *pool, void *addr,
		rte_iova_t iova, uint16_t buf_len, uint16_t data_len)
{
	struct phub_net_extref *ref;
	struct rte_mbuf *m;

	if (unlikely(st->n_free == 0))
		return NULL;
	m = rte_pktmbuf_alloc(pool);
	if (unlikely(m == NULL))
		return NULL;
	ref = st->free[--st->n_free];
	ref->shinfo.free_cb = phub_net_extref_put;
	ref->shinfo.fcb_opaque = ref;
	rte_mbuf_ext_refcnt_set(&ref->shinfo, 1);
	rte_pktmbuf_attach_extbuf(m, addr, iova, buf_len, &ref->shinfo);
	m->data_len = data_len;
	m->pkt_len = data_len;
	return m;
}

#endif /* PHUB_NET_H */
