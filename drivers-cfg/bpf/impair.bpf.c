/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Link impairment for the virtual rack where the kernel has no sch_netem: a tc (clsact egress,
 * direct-action) program that drops, duplicates or corrupts frames at random.
 *
 * The rates are compile-time constants in parts per million (-DPHUB_IMPAIR_LOSS=10000 is 1%):
 * tc loads the object itself and has no way to set a map or a global without bpftool, so
 * scripts/virtual-rack compiles one object per netem-style argument list, in the rack's state
 * directory.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#ifndef PHUB_IMPAIR_LOSS
#define PHUB_IMPAIR_LOSS 0
#endif
#ifndef PHUB_IMPAIR_DUPLICATE
#define PHUB_IMPAIR_DUPLICATE 0
#endif
#ifndef PHUB_IMPAIR_CORRUPT
#define PHUB_IMPAIR_CORRUPT 0
#endif

#define PPM 1000000u
/* skb->mark of the copy a duplication sends: let it pass once, do not duplicate it again. */
#define DUP_MARK 0x70687562u

_Static_assert(PHUB_IMPAIR_LOSS <= PPM && PHUB_IMPAIR_DUPLICATE <= PPM &&
	       PHUB_IMPAIR_CORRUPT <= PPM, "rates are parts per million");

static __always_inline int
chance(__u32 ppm)
{
	return ppm != 0 && bpf_get_prandom_u32() % PPM < ppm;
}

SEC("tc")
int
phub_impair(struct __sk_buff *skb)
{
	__u32 mark = skb->mark;
	__u32 off;
	__u8 byte;

	if (mark == DUP_MARK) {
		skb->mark = 0;
		return TC_ACT_OK;
	}
	if (chance(PHUB_IMPAIR_LOSS))
		return TC_ACT_SHOT;
	if (chance(PHUB_IMPAIR_CORRUPT) && skb->len > ETH_HLEN) {
		/* Like netem: one random bit, here past the Ethernet header so that it still
		 * reaches its receiver and fails a checksum there.
		 */
		off = ETH_HLEN + bpf_get_prandom_u32() % (skb->len - ETH_HLEN);
		if (bpf_skb_load_bytes(skb, off, &byte, 1) == 0) {
			byte ^= 1u << (bpf_get_prandom_u32() % 8);
			bpf_skb_store_bytes(skb, off, &byte, 1, 0);
		}
	}
	if (chance(PHUB_IMPAIR_DUPLICATE)) {
		skb->mark = DUP_MARK;
		bpf_clone_redirect(skb, skb->ifindex, 0);
		skb->mark = mark;
	}
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
