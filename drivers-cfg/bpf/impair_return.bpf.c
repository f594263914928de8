/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The way back from the virtual rack's delay line: a tc (clsact ingress, direct-action) program
 * on the delay line's tap that sends each frame the delay line (scripts/delayline.c) writes back
 * out of the link it was diverted from, marked so that the impairment program there
 * (impair.bpf.c) lets it pass instead of impairing it twice. The mark survives the redirect:
 * the tap and the link are in the same network namespace.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#ifndef PHUB_IMPAIR_RETURN_IFINDEX
#error "PHUB_IMPAIR_RETURN_IFINDEX: the ifindex of the impaired link"
#endif

/* The same value as impair.bpf.c's DELAYED_MARK. */
#define DELAYED_MARK 0x70687563u

SEC("tc")
int
phub_impair_return(struct __sk_buff *skb)
{
	skb->mark = DELAYED_MARK;
	return bpf_redirect(PHUB_IMPAIR_RETURN_IFINDEX, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
