/* SPDX-License-Identifier: BSD-3-Clause */
/* Loading the tap steering BPF program and attaching it to a net_tap interface. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/if_tun.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "config/phub_config.h"
#include "steer_tap.h"
#include "steer_tap_cfg.h"

#ifndef PHUB_BPF_DIR_DEFAULT
#error "PHUB_BPF_DIR_DEFAULT (the directory of steer_tap.bpf.o) must be defined by the build"
#endif

#define TUN_DEV_PATH "/dev/net/tun"

/* What DPDK's net_tap asks for: no IFF_NO_PI, it reads the packet information header. */
#define NET_TAP_FLAGS (IFF_TAP | IFF_MULTI_QUEUE)

/* The bits of the tun flags that TUNSETIFF may rewrite on a device that exists. */
#define TUN_FEATURE_FLAGS (IFF_NO_PI | IFF_ONE_QUEUE | IFF_VNET_HDR | IFF_MULTI_QUEUE)

static int
sysfs_read_ulong(const char *ifname, const char *attr, unsigned long *value)
{
	char path[128];
	char text[32];
	char *end;
	ssize_t n;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "/sys/class/net/%s/%s", ifname, attr) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	text[n] = '\0';
	errno = 0;
	*value = strtoul(text, &end, 0);
	if (errno != 0 || end == text)
		return -EIO;
	return 0;
}

/*
 * The flags to give TUNSETIFF when joining the existing interface: its own. Older kernels
 * copy the feature bits of the request into the device on every TUNSETIFF, so asking for
 * IFF_NO_PI would make the kernel drop the packet information header that net_tap reads
 * and shift every frame DPDK receives by 4 bytes. sysfs tells the device's flags when it
 * shows this network namespace (same ifindex); otherwise assume net_tap's.
 */
static short
tap_flags(const char *ifname, unsigned int ifindex)
{
	unsigned long sys_ifindex;
	unsigned long flags;

	if (sysfs_read_ulong(ifname, "ifindex", &sys_ifindex) < 0 || sys_ifindex != ifindex ||
	    sysfs_read_ulong(ifname, "tun_flags", &flags) < 0)
		return NET_TAP_FLAGS;
	return (short)(IFF_TAP | (flags & TUN_FEATURE_FLAGS));
}

/*
 * An fd bound to interface ifname as a detached queue: enough for per-device ioctls, and
 * detached at once so that the default queue selection never hands it a frame.
 */
static int
tap_fd_open(const char *ifname)
{
	struct ifreq ifr;
	unsigned int ifindex;
	int ret;
	int fd;

	/* TUNSETIFF creates an interface that does not exist: make sure it does. */
	ifindex = if_nametoindex(ifname);
	if (ifindex == 0)
		return -ENODEV;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, ifname, strlen(ifname));
	ifr.ifr_flags = tap_flags(ifname, ifindex);
	if ((ifr.ifr_flags & IFF_MULTI_QUEUE) == 0)
		return -EINVAL;

	fd = open(TUN_DEV_PATH, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* EINVAL here: the interface is not a multi-queue tap (a veth, a tun, a one-queue tap). */
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		ret = -errno;
		goto err;
	}
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_DETACH_QUEUE;
	if (ioctl(fd, TUNSETQUEUE, &ifr) < 0) {
		ret = -errno;
		goto err;
	}
	return fd;

err:
	close(fd);
	return ret;
}

int
phub_steer_tap_obj_path(char *buf, size_t size)
{
	char data[PATH_MAX];
	const char *dir;
	int n;

	if (buf == NULL || size == 0)
		return -EINVAL;
	dir = getenv(PHUB_STEER_TAP_DIR_ENV);
	if (dir == NULL || dir[0] == '\0') {
		dir = PHUB_BPF_DIR_DEFAULT;
		if (!phub_config_in_build_tree()) {
			n = phub_config_data_dir(data, sizeof(data));
			if (n != 0)
				return n;
			n = snprintf(data + strlen(data), sizeof(data) - strlen(data), "/bpf");
			if (n < 0 || (size_t)n >= sizeof(data) - strlen(data))
				return -ENAMETOOLONG;
			dir = data;
		}
	}
	n = snprintf(buf, size, "%s/%s", dir, PHUB_STEER_TAP_OBJ_NAME);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

int
phub_steer_tap_attach(const char *ifname, uint16_t udp_base_port, uint16_t n_queues,
		      const char *bpf_obj_path)
{
	struct phub_steer_tap_cfg cfg = {
		.udp_base_port = udp_base_port,
		.n_queues = n_queues,
	};
	struct bpf_object *obj = NULL;
	struct bpf_program *prog;
	char path[PATH_MAX];
	struct bpf_map *map;
	uint32_t key = 0;
	int tap_fd = -1;
	int prog_fd;
	int ret;

	if (ifname == NULL || ifname[0] == '\0' || strlen(ifname) >= IFNAMSIZ)
		return -EINVAL;
	if (n_queues == 0 || n_queues > PHUB_STEER_TAP_MAX_QUEUES)
		return -EINVAL;
	if ((uint32_t)udp_base_port + n_queues > UINT16_MAX)
		return -ERANGE;
	if (bpf_obj_path == NULL) {
		ret = phub_steer_tap_obj_path(path, sizeof(path));
		if (ret < 0)
			return ret;
		bpf_obj_path = path;
	}

	/* libbpf 1.x returns NULL and sets errno. */
	obj = bpf_object__open_file(bpf_obj_path, NULL);
	if (obj == NULL)
		return errno != 0 ? -errno : -ENOENT;
	ret = bpf_object__load(obj);
	if (ret < 0)
		goto out;
	prog = bpf_object__find_program_by_name(obj, PHUB_STEER_TAP_PROG_NAME);
	map = bpf_object__find_map_by_name(obj, PHUB_STEER_TAP_MAP_NAME);
	if (prog == NULL || map == NULL) {
		ret = -ENOENT;
		goto out;
	}
	/* Configure before attaching, so that the program never runs unconfigured. */
	ret = bpf_map__update_elem(map, &key, sizeof(key), &cfg, sizeof(cfg), BPF_ANY);
	if (ret < 0)
		goto out;
	prog_fd = bpf_program__fd(prog);
	if (prog_fd < 0) {
		ret = prog_fd;
		goto out;
	}

	tap_fd = tap_fd_open(ifname);
	if (tap_fd < 0) {
		ret = tap_fd;
		goto out;
	}
	/* The device takes its own reference: the program outlives our fds and the object. */
	if (ioctl(tap_fd, TUNSETSTEERINGEBPF, &prog_fd) < 0) {
		ret = -errno;
		goto out;
	}
	ret = 0;

out:
	if (tap_fd >= 0)
		close(tap_fd);
	bpf_object__close(obj);
	return ret;
}

int
phub_steer_tap_detach(const char *ifname)
{
	int none = -1;
	int ret = 0;
	int fd;

	if (ifname == NULL || ifname[0] == '\0' || strlen(ifname) >= IFNAMSIZ)
		return -EINVAL;
	fd = tap_fd_open(ifname);
	if (fd < 0)
		return fd;
	if (ioctl(fd, TUNSETSTEERINGEBPF, &none) < 0)
		ret = -errno;
	close(fd);
	return ret;
}
