/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The configuration record shared by the tap steering BPF program and its loader
 * (app/pbox/steer_tap.c): the one place that defines its layout.
 */
#ifndef PHUB_STEER_TAP_CFG_H
#define PHUB_STEER_TAP_CFG_H

#include <linux/types.h>

/* Names the loader looks up in the object file. */
#define PHUB_STEER_TAP_PROG_NAME "phub_steer_tap"
#define PHUB_STEER_TAP_MAP_NAME "phub_steer_cfg"

/*
 * Value of the single entry (key 0) of the program's array map. Host byte order;
 * the map is written by the loader on the same machine that runs the program.
 * UDP destination port udp_base_port + 1 + k goes to queue k for k < n_queues;
 * everything else goes to queue 0.
 */
struct phub_steer_tap_cfg {
	__u16 udp_base_port;
	__u16 n_queues;
	__u32 reserved;		/* zero; keeps the record 8 bytes for later use */
};

#endif /* PHUB_STEER_TAP_CFG_H */
