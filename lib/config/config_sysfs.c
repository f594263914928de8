/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NUMA nodes from sysfs: of a PCI device (bus/pci/devices/<addr>/numa_node) and of a CPU
 * (devices/system/cpu/cpuN/nodeM). The root is a parameter so tests can use a fake tree;
 * anything unreadable means "unknown" (-1), never an error: a VM or a vdev has no NUMA facts.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_priv.h"

/* Node numbers above this are not real: treat them as unknown. */
#define NODE_MAX 1023

int
cfg_sysfs_pci_node(const char *root, const char *pci)
{
	char path[PHUB_CONFIG_PATH_MAX + 64];
	char buf[32];
	char *end;
	ssize_t n;
	long node;
	int fd;

	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", root, pci);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	node = strtol(buf, &end, 10);
	if (end == buf || (*end != '\0' && *end != '\n') || node < 0 || node > NODE_MAX)
		return -1;
	return (int)node;
}

int
cfg_sysfs_cpu_node(const char *root, unsigned int cpu)
{
	char path[PHUB_CONFIG_PATH_MAX + 64];
	struct dirent *e;
	int node = -1;
	DIR *dir;

	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu%u", root, cpu);
	dir = opendir(path);
	if (dir == NULL)
		return -1;
	while ((e = readdir(dir)) != NULL) {
		char *end;
		long n;

		if (strncmp(e->d_name, "node", 4) != 0 || e->d_name[4] < '0' || e->d_name[4] > '9')
			continue;
		n = strtol(e->d_name + 4, &end, 10);
		if (*end == '\0' && n >= 0 && n <= NODE_MAX) {
			node = (int)n;
			break;
		}
	}
	closedir(dir);
	return node;
}
