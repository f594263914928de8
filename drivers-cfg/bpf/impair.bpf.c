/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Link impairment for the virtual rack where the kernel has no sch_netem: a tc (clsact egress,
 * direct-action) program that drops frames at random or in bursts, duplicates or corrupts them,
 * and diverts the frames to delay into the delay line's tap (scripts/delayline.c), whose
 * ingress program (impair_return.bpf.c) sends them back out of this device once they are due.
 *
 * The rates are compile-time constants in parts per million (-DPHUB_IMPAIR_LOSS=10000 is 1%):
 * tc loads the object itself and has no way to set a map or a global without bpftool, so
 * scripts/virtual-rack compiles one object per netem-style argument list, in the rack's state
 * directory.
 *
 * Bursty loss is netem's "loss gemodel p r 1-h 1-k", the Gilbert-Elliott model: a good and a
 * bad state; each frame is lost with probability 1-k in the good state and 1-h in the bad one,
 * then the link moves from good to bad with probability p and back with probability r. The
 * long-run loss is (p (1-h) + r (1-k)) / (p + r), and with 1-h = 1 a burst lasts 1/r frames on
 * average. The state lives in a one-entry array map of this attachment (each tc attach loads
 * its own object, so the two directions of a link have their own chains). Frames on several
 * CPUs may read and write the state at once: a lost update only shortens or lengthens one
 * sojourn, which a random process does not notice.
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
/* Gilbert-Elliott: p = 0 turns the model off. */
#ifndef PHUB_IMPAIR_GE_P
#define PHUB_IMPAIR_GE_P 0
#endif
#ifndef PHUB_IMPAIR_GE_R
#define PHUB_IMPAIR_GE_R 1000000
#endif
#ifndef PHUB_IMPAIR_GE_LOSS_BAD
#define PHUB_IMPAIR_GE_LOSS_BAD 1000000
#endif
#ifndef PHUB_IMPAIR_GE_LOSS_GOOD
#define PHUB_IMPAIR_GE_LOSS_GOOD 0
#endif
/* The delay line: its tap's ifindex (0: none) and the share of frames it delays. */
#ifndef PHUB_IMPAIR_DELAY_IFINDEX
#define PHUB_IMPAIR_DELAY_IFINDEX 0
#endif
#ifndef PHUB_IMPAIR_DELAY
#define PHUB_IMPAIR_DELAY 0
#endif

#define PPM 1000000u
/* skb->mark of the copy a duplication sends: let it pass once, do not duplicate it again. */
#define DUP_MARK 0x70687562u
/* skb->mark of a frame back from the delay line (impair_return.bpf.c): it was impaired. */
#define DELAYED_MARK 0x70687563u

_Static_assert(PHUB_IMPAIR_LOSS <= PPM && PHUB_IMPAIR_DUPLICATE <= PPM &&
	       PHUB_IMPAIR_CORRUPT <= PPM && PHUB_IMPAIR_DELAY <= PPM,
	       "rates are parts per million");
_Static_assert(PHUB_IMPAIR_GE_P <= PPM && PHUB_IMPAIR_GE_R <= PPM &&
	       PHUB_IMPAIR_GE_LOSS_BAD <= PPM && PHUB_IMPAIR_GE_LOSS_GOOD <= PPM,
	       "Gilbert-Elliott probabilities are parts per million");

enum { GE_GOOD = 0, GE_BAD = 1 };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ge_state SEC(".maps");

static __always_inline int
chance(__u32 ppm)
{
	return ppm != 0 && bpf_get_prandom_u32() % PPM < ppm;
}

/* One step of the Gilbert-Elliott chain: whether this frame is lost. */
static __always_inline int
ge_lost(void)
{
	__u32 key = 0;
	__u32 *state = bpf_map_lookup_elem(&ge_state, &key);
	int lost;

	if (state == NULL)
		return 0;
	if (*state == GE_BAD) {
		lost = chance(PHUB_IMPAIR_GE_LOSS_BAD);
		if (chance(PHUB_IMPAIR_GE_R))
			*state = GE_GOOD;
	} else {
		lost = chance(PHUB_IMPAIR_GE_LOSS_GOOD);
		if (chance(PHUB_IMPAIR_GE_P))
			*state = GE_BAD;
	}
	return lost;
}

/*
 * Where a duplicate goes: 0 out of the device again (the program on its egress), BPF_F_INGRESS
 * (1) into its ingress again (the program on its ingress, scripts/virtual-rack's worker links).
 */
#ifndef PHUB_IMPAIR_CLONE_FLAGS
#define PHUB_IMPAIR_CLONE_FLAGS 0
#endif

SEC("tc")
int
phub_impair(struct __sk_buff *skb)
{
	__u32 mark = skb->mark;
	__u32 off;
	__u8 byte;

	if (mark == DUP_MARK || mark == DELAYED_MARK) {
		skb->mark = 0;
		return TC_ACT_OK;
	}
	if (PHUB_IMPAIR_GE_P != 0 && ge_lost())
		return TC_ACT_SHOT;
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
		bpf_clone_redirect(skb, skb->ifindex, PHUB_IMPAIR_CLONE_FLAGS);
		skb->mark = mark;
	}
	/* As netem: lost, corrupted and duplicated first, then delayed. The copy of a
	 * duplication is not delayed, which netem would not do either (it queues the copy
	 * at the head of the line).
	 */
	if (PHUB_IMPAIR_DELAY_IFINDEX != 0 && chance(PHUB_IMPAIR_DELAY))
		return bpf_redirect(PHUB_IMPAIR_DELAY_IFINDEX, 0);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
