/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The configuration record shared by the af_xdp XDP program (xdp_pbox.bpf.c) and the PBox
 * that fills it (app/pbox/xdp_pbox.c): the one place that defines its layout.
 */
#ifndef PHUB_XDP_PBOX_CFG_H
#define PHUB_XDP_PBOX_CFG_H

#include <linux/types.h>

/* Names the PBox and DPDK look up: DPDK's net_af_xdp requires the XSKMAP to be "xsks_map". */
#define PHUB_XDP_PBOX_OBJ_NAME "xdp_pbox.bpf.o"
#define PHUB_XDP_PBOX_PROG_NAME "xdp_pbox"
#define PHUB_XDP_PBOX_MAP_NAME "pbox_xdp_cfg"

/*
 * Value of the single entry (key 0) of the array map, host byte order. Until the PBox sets
 * configured, every frame goes to the AF_XDP socket (as DPDK's own program does); then only
 * ARP asking for ipv4 and IPv4 to ipv4 with UDP destination port in [udp_lo, udp_hi] (and its
 * fragments) do, and everything else goes to the kernel.
 */
struct phub_xdp_pbox_cfg {
	__u32 ipv4;
	__u16 udp_lo;
	__u16 udp_hi;
	__u32 configured;
	__u32 reserved;		/* zero */
};

#endif /* PHUB_XDP_PBOX_CFG_H */
