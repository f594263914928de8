/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The queue selector of a multi-queue net_tap port (TUNSETSTEERINGEBPF): a UDP datagram for
 * port base + 1 + k goes to queue k, everything else to queue 0.
 *
 * The kernel runs it on every frame the tap interface transmits towards DPDK and takes the
 * return value modulo the number of attached queues. Frames reach it with the Ethernet header
 * at the MAC offset; a VLAN tag may be in the frame (and is skipped) or already pulled into
 * the skb metadata (then the frame shows the inner EtherType directly).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "steer_tap_cfg.h"

/* Queue of everything that is not a datagram for a data lcore: control, ARP, ICMP, others. */
#define QUEUE_DEFAULT 0

/* IPv4 flags and fragment offset (the kernel's uapi headers do not export them). */
#define IPV4_MF 0x2000
#define IPV4_OFFSET 0x1fff

/* 802.1Q and 802.1ad; two tags at most (QinQ). */
#define VLAN_MAX_DEPTH 2

struct vlan_tag {
	__be16 tci;
	__be16 encapsulated_proto;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phub_steer_tap_cfg);
} phub_steer_cfg SEC(".maps");

static __always_inline int
is_vlan(__be16 proto)
{
	return proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD);
}

SEC("socket")
int
phub_steer_tap(struct __sk_buff *skb)
{
	const struct phub_steer_tap_cfg *cfg;
	struct vlan_tag tag;
	struct ethhdr eth;
	struct iphdr ip;
	__u32 key = 0;
	__be16 proto;
	__be16 dport;
	__u32 off;
	__u32 port;
	__u32 k;
	int i;

	if (bpf_skb_load_bytes_relative(skb, 0, &eth, sizeof(eth), BPF_HDR_START_MAC) < 0)
		return QUEUE_DEFAULT;
	proto = eth.h_proto;
	off = sizeof(eth);

#pragma unroll
	for (i = 0; i < VLAN_MAX_DEPTH; i++) {
		if (!is_vlan(proto))
			break;
		if (bpf_skb_load_bytes_relative(skb, off, &tag, sizeof(tag),
						BPF_HDR_START_MAC) < 0)
			return QUEUE_DEFAULT;
		proto = tag.encapsulated_proto;
		off += sizeof(tag);
	}
	if (proto != bpf_htons(ETH_P_IP))
		return QUEUE_DEFAULT;

	if (bpf_skb_load_bytes_relative(skb, off, &ip, sizeof(ip), BPF_HDR_START_MAC) < 0)
		return QUEUE_DEFAULT;
	if (ip.version != 4 || ip.ihl < 5 || ip.protocol != IPPROTO_UDP)
		return QUEUE_DEFAULT;
	/*
	 * Every fragment, the first included, goes to the default queue: later fragments carry
	 * no UDP header, and reassembly needs all pieces of a datagram on one queue.
	 */
	if (ip.frag_off & bpf_htons(IPV4_MF | IPV4_OFFSET))
		return QUEUE_DEFAULT;
	off += ip.ihl * 4;

	if (bpf_skb_load_bytes_relative(skb, off + offsetof(struct udphdr, dest), &dport,
					sizeof(dport), BPF_HDR_START_MAC) < 0)
		return QUEUE_DEFAULT;

	cfg = bpf_map_lookup_elem(&phub_steer_cfg, &key);
	if (cfg == NULL)
		return QUEUE_DEFAULT;
	port = bpf_ntohs(dport);
	/* Unsigned arithmetic only: clang's BPF target rejects signed division and modulo. */
	if (port <= cfg->udp_base_port)
		return QUEUE_DEFAULT;
	k = port - cfg->udp_base_port - 1;
	if (k >= cfg->n_queues)
		return QUEUE_DEFAULT;
	return k;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
