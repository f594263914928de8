/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Steering of a multi-queue net_tap port's receive queues by UDP destination port, with a BPF
 * program that the tun driver runs to pick the queue of each frame (TUNSETSTEERINGEBPF).
 *
 * The kernels of the virtual rack refuse the TC rules behind net_tap's rte_flow, and tap has
 * no RSS; this puts UDP destination port base + 1 + k into queue k and everything else (the
 * control port base, ARP, ICMP, IP fragments, non-IPv4) into queue 0.
 *
 * Order in the appliance: configure the port with N Rx queues, set the queues up in
 * increasing id order (net_tap attaches one kernel queue per queue id, in set-up order, and the
 * kernel numbers them that way), rte_eth_dev_start(), then phub_steer_tap_attach(). The
 * program stays with the interface until it is detached or the interface goes away (port
 * close); no state is kept in the process. Nothing here prints or needs DPDK.
 */
#ifndef PHUB_STEER_TAP_H
#define PHUB_STEER_TAP_H

#include <stddef.h>
#include <stdint.h>

/* File name of the compiled program, looked up in the BPF directory. */
#define PHUB_STEER_TAP_OBJ_NAME "steer_tap.bpf.o"
/* Environment variable that overrides the BPF directory found by phub_steer_tap_obj_path(). */
#define PHUB_STEER_TAP_DIR_ENV "PHUB_BPF_DIR"
/* The tun driver's limit on queues per interface (MAX_TAP_QUEUES). */
#define PHUB_STEER_TAP_MAX_QUEUES 256

/*
 * Load the steering program from bpf_obj_path (NULL: the default, see
 * phub_steer_tap_obj_path()) and attach it to the tap interface ifname of the current network
 * namespace. UDP destination port udp_base_port + 1 + k goes to queue k for k < n_queues.
 * Replaces a program attached before. Returns 0, or -errno: -EINVAL (bad arguments, or ifname
 * is not a multi-queue tap), -ERANGE (udp_base_port + n_queues beyond 65535), -ENODEV (no such
 * interface), -ENOENT (object file or program missing), -EPERM (needs CAP_NET_ADMIN and
 * CAP_BPF), or what open(2), ioctl(2) and libbpf report.
 */
int
phub_steer_tap_attach(const char *ifname, uint16_t udp_base_port, uint16_t n_queues,
		      const char *bpf_obj_path);

/*
 * Remove the steering program of tap interface ifname: the tun driver goes back to its
 * default spreading by flow hash. Returns 0 (also when no program was attached) or -errno.
 */
int
phub_steer_tap_detach(const char *ifname);

/*
 * Write the default path of the program's object file into buf: $PHUB_BPF_DIR/steer_tap.bpf.o
 * if PHUB_BPF_DIR is set and not empty, else <build directory>/steer_tap.bpf.o for a program
 * run from its build tree, else <installed data dir>/bpf/steer_tap.bpf.o
 * (phub_config_data_dir()).
 * Returns 0, -EINVAL, or -ENAMETOOLONG if size is too small. Does not check that it exists.
 */
int
phub_steer_tap_obj_path(char *buf, size_t size);

#endif /* PHUB_STEER_TAP_H */
