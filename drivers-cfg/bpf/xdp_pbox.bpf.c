/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The XDP program of the PBox's af_xdp ports (DPDK's xdp_prog=): the PBox's own traffic goes to
 * its AF_XDP socket, everything else (ARP for other addresses, SSH, management) to the kernel,
 * so that a PBox shares a NIC with the host.
 *
 * The PBox's traffic: ARP requests and replies whose target is the PBox's address, and IPv4 to
 * that address carrying UDP to one of its ports (control and data lcores), with the fragments
 * of any IPv4 datagram to it (the PBox counts and drops them: no one else owns the address).
 * The socket of the receive queue is in xsks_map at the queue's index; without one, or before
 * the PBox configured the program, the frame takes the default path of each case.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "xdp_pbox_cfg.h"

/* IPv4 flags and fragment offset (the kernel's uapi headers do not export them). */
#define IPV4_MF 0x2000
#define IPV4_OFFSET 0x1fff

/* An ARP header (linux/if_arp.h would pull in libc's headers, which the BPF target lacks). */
struct arp_hdr {
	__be16 ar_hrd;
	__be16 ar_pro;
	__u8 ar_hln;
	__u8 ar_pln;
	__be16 ar_op;
};

/* The IPv4-over-Ethernet body of an ARP packet, after struct arp_hdr. */
struct arp_ipv4 {
	__u8 sha[ETH_ALEN];
	__be32 spa;
	__u8 tha[ETH_ALEN];
	__be32 tpa;
} __attribute__((packed));

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phub_xdp_pbox_cfg);
} pbox_xdp_cfg SEC(".maps");

static __always_inline int
to_socket(struct xdp_md *ctx)
{
	/* XDP_PASS when no socket serves this queue: the kernel sees what DPDK cannot. */
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

SEC("xdp")
int
xdp_pbox(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct phub_xdp_pbox_cfg *cfg;
	struct ethhdr *eth = data;
	__u32 key = 0;
	__u16 proto;

	cfg = bpf_map_lookup_elem(&pbox_xdp_cfg, &key);
	if (cfg == NULL || !cfg->configured)
		return to_socket(ctx);
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	proto = bpf_ntohs(eth->h_proto);
	if (proto == ETH_P_ARP) {
		struct arp_hdr *arp = (void *)(eth + 1);
		struct arp_ipv4 *body = (void *)(arp + 1);

		if ((void *)(body + 1) > data_end)
			return XDP_PASS;
		if (arp->ar_pro != bpf_htons(ETH_P_IP) || arp->ar_pln != 4)
			return XDP_PASS;
		return bpf_ntohl(body->tpa) == cfg->ipv4 ? to_socket(ctx) : XDP_PASS;
	}
	if (proto == ETH_P_IP) {
		struct iphdr *ip = (void *)(eth + 1);
		struct udphdr *udp;
		__u16 port;

		if ((void *)(ip + 1) > data_end)
			return XDP_PASS;
		if (bpf_ntohl(ip->daddr) != cfg->ipv4)
			return XDP_PASS;
		if (bpf_ntohs(ip->frag_off) & (IPV4_MF | IPV4_OFFSET))
			return to_socket(ctx);
		if (ip->protocol != IPPROTO_UDP || ip->ihl < 5)
			return XDP_PASS;
		udp = (void *)ip + ip->ihl * 4;
		if ((void *)(udp + 1) > data_end)
			return XDP_PASS;
		port = bpf_ntohs(udp->dest);
		if (port >= cfg->udp_lo && port <= cfg->udp_hi)
			return to_socket(ctx);
	}
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
