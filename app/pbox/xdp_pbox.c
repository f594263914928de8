/* SPDX-License-Identifier: BSD-3-Clause */
/* The PBox's own XDP program on af_xdp ports: given to DPDK as xdp_prog=, configured once up. */

#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "pbox.h"
#include "steer_tap.h"
#include "xdp_pbox_cfg.h"

#define AF_XDP_PMD "net_af_xdp"

/* The device strings this file rewrote (argv points at them until EAL is done with them). */
static char *rewritten[PBOX_MAX_PORTS];
static unsigned int n_rewritten;

/* The value of key= in a device string "pmd,k=v,...", copied into buf; false when absent. */
static bool
devarg(const char *device, const char *key, char *buf, size_t size)
{
	size_t klen = strlen(key);

	for (const char *p = strchr(device, ','); p != NULL; p = strchr(p + 1, ',')) {
		size_t len;

		if (strncmp(p + 1, key, klen) != 0 || p[1 + klen] != '=')
			continue;
		p += klen + 2;
		len = strcspn(p, ",");
		if (len >= size)
			len = size - 1;
		memcpy(buf, p, len);
		buf[len] = '\0';
		return true;
	}
	return false;
}

/* The object beside the tap steering program: the same directory, found the same way. */
static int
xdp_obj_path(char *buf, size_t size)
{
	char *slash;
	int rc = phub_steer_tap_obj_path(buf, size);

	if (rc != 0)
		return rc;
	slash = strrchr(buf, '/');
	if (slash == NULL || (size_t)(slash - buf) + 1 + strlen(PHUB_XDP_PBOX_OBJ_NAME) >= size)
		return -ENAMETOOLONG;
	strcpy(slash + 1, PHUB_XDP_PBOX_OBJ_NAME);
	return 0;
}

void
pbox_xdp_eal_args(int argc, char **argv)
{
	char path[PATH_MAX], iface[IF_NAMESIZE], other[IF_NAMESIZE], given[2];

	if (xdp_obj_path(path, sizeof(path)) != 0 || access(path, R_OK) != 0)
		return;
	for (int i = 1; i + 1 < argc && n_rewritten < PBOX_MAX_PORTS; i++) {
		const char *dev = argv[i + 1];
		bool shared = false;
		char *s;

		if (strcmp(argv[i], "--vdev") != 0 || strncmp(dev, AF_XDP_PMD, strlen(AF_XDP_PMD)) ||
		    !devarg(dev, "iface", iface, sizeof(iface)) ||
		    devarg(dev, "xdp_prog", given, sizeof(given)))
			continue;
		/* Two vdevs on one interface cannot both load a program: leave them DPDK's. */
		for (int j = 1; j + 1 < argc; j++)
			if (j != i && strcmp(argv[j], "--vdev") == 0 &&
			    devarg(argv[j + 1], "iface", other, sizeof(other)) &&
			    strcmp(other, iface) == 0)
				shared = true;
		if (shared)
			continue;
		if (asprintf(&s, "%s,xdp_prog=%s", dev, path) < 0)
			return;
		rewritten[n_rewritten++] = s;
		argv[i + 1] = s;
	}
}

/* The fd of map name of the XDP program attached to ifindex, or -errno. */
static int
xdp_map_fd(unsigned int ifindex, const char *name, char *prog_name, size_t size)
{
	struct bpf_prog_info info;
	__u32 ids[16], len = sizeof(info), prog_id = 0;
	int prog_fd, rc = -ENOENT;

	if (bpf_xdp_query_id((int)ifindex, 0, &prog_id) != 0 || prog_id == 0)
		return -ENOENT;
	prog_fd = bpf_prog_get_fd_by_id(prog_id);
	if (prog_fd < 0)
		return -errno;
	memset(&info, 0, sizeof(info));
	info.nr_map_ids = RTE_DIM(ids);
	info.map_ids = (__u64)(uintptr_t)ids;
	if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) {
		rc = -errno;
		goto out;
	}
	snprintf(prog_name, size, "%s", info.name);
	for (__u32 m = 0; m < RTE_MIN(info.nr_map_ids, (__u32)RTE_DIM(ids)); m++) {
		struct bpf_map_info mi;
		__u32 mlen = sizeof(mi);
		int fd = bpf_map_get_fd_by_id(ids[m]);

		if (fd < 0)
			continue;
		memset(&mi, 0, sizeof(mi));
		if (bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0 && strcmp(mi.name, name) == 0) {
			rc = fd;
			goto out;
		}
		close(fd);
	}
out:
	close(prog_fd);
	return rc;
}

void
pbox_xdp_configure(struct pbox *pb, const struct pbox_port *port, unsigned int pi)
{
	const struct phub_config_port *cp = &pb->cfg.ports[pi];
	struct phub_xdp_pbox_cfg cfg = {
		.ipv4 = port->ipv4, .udp_lo = pb->cfg.udp_base_port,
		.udp_hi = (uint16_t)(pb->cfg.udp_base_port + pb->cfg.n_data_lcores),
		.configured = 1,
	};
	char iface[IF_NAMESIZE], prog[BPF_OBJ_NAME_LEN] = "";
	unsigned int ifindex;
	__u32 key = 0;
	int fd;

	if (cp->driver != PHUB_CONFIG_DRIVER_AF_XDP || !devarg(cp->device, "iface", iface,
			sizeof(iface)))
		return;
	ifindex = if_nametoindex(iface);
	fd = ifindex != 0 ? xdp_map_fd(ifindex, PHUB_XDP_PBOX_MAP_NAME, prog, sizeof(prog)) :
		-ENODEV;
	if (fd < 0) {
		PBOX_LOG(NOTICE, "port %s: XDP program %s on %s is not the PBox's: every frame "
				"goes to the socket, none to the kernel", port->name,
				prog[0] != '\0' ? prog : "(none)", iface);
		return;
	}
	if (bpf_map_update_elem(fd, &key, &cfg, BPF_ANY) != 0)
		PBOX_LOG(WARNING, "port %s: cannot configure XDP program %s: %s", port->name, prog,
				strerror(errno));
	else
		PBOX_LOG(INFO, "port %s: XDP program %s on %s: ARP for and UDP %u-%u to %u.%u.%u.%u "
				"go to the PBox, the rest to the kernel", port->name, prog, iface,
				cfg.udp_lo, cfg.udp_hi, cfg.ipv4 >> 24, (cfg.ipv4 >> 16) & 0xff,
				(cfg.ipv4 >> 8) & 0xff, cfg.ipv4 & 0xff);
	close(fd);
}

void
pbox_xdp_fini(void)
{
	for (unsigned int i = 0; i < n_rewritten; i++)
		free(rewritten[i]);
	n_rewritten = 0;
}
