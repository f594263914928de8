/* SPDX-License-Identifier: BSD-3-Clause */
/* Where the installed data lives (driver profiles, BPF objects, examples), or the build tree's. */

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_priv.h"

/*
 * Set by meson: the build root, the source tree's drivers-cfg, the installed data directory and
 * the same seen from the directory of the installed programs.
 */
#ifndef PHUB_BUILD_ROOT
#define PHUB_BUILD_ROOT ""
#endif
#ifndef PHUB_DATA_DIR
#define PHUB_DATA_DIR "/usr/share/phub"
#endif
#ifndef PHUB_CONFIG_DRIVERS_DIR
#define PHUB_CONFIG_DRIVERS_DIR "/usr/share/phub/drivers-cfg"
#endif
#ifndef PHUB_DATA_DIR_FROM_BIN
#define PHUB_DATA_DIR_FROM_BIN "../share/phub"
#endif

static int
self_exe(char *buf, size_t size)
{
	ssize_t n = readlink("/proc/self/exe", buf, size - 1);

	if (n < 0)
		return -errno;
	if ((size_t)n >= size - 1)
		return -ENAMETOOLONG;
	buf[n] = '\0';
	return 0;
}

bool
phub_config_in_build_tree(void)
{
	char exe[PATH_MAX];
	size_t len = strlen(PHUB_BUILD_ROOT);

	if (len == 0 || self_exe(exe, sizeof(exe)) != 0)
		return false;
	return strncmp(exe, PHUB_BUILD_ROOT, len) == 0 && exe[len] == '/';
}

static bool
is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int
phub_config_data_dir(char *buf, size_t size)
{
	char exe[PATH_MAX];
	char *slash;
	int n;

	if (buf == NULL || size == 0)
		return -EINVAL;
	/*
	 * Next to the program first (bin/../share/phub): an install under --destdir or a moved
	 * prefix works without being told; then where meson said the data would be installed.
	 */
	if (self_exe(exe, sizeof(exe)) == 0 && (slash = strrchr(exe, '/')) != NULL) {
		char cand[PATH_MAX];

		*slash = '\0';
		n = snprintf(cand, sizeof(cand), "%s/%s", exe, PHUB_DATA_DIR_FROM_BIN);
		if (n > 0 && (size_t)n < sizeof(cand) && is_dir(cand)) {
			char real[PATH_MAX];

			/* Messages show /usr/share/phub, not /usr/sbin/../share/phub. */
			if (realpath(cand, real) == NULL)
				snprintf(real, sizeof(real), "%s", cand);
			n = snprintf(buf, size, "%s", real);
			return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
		}
	}
	n = snprintf(buf, size, "%s", PHUB_DATA_DIR);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int
phub_config_default_drivers_dir(char *buf, size_t size)
{
	char dir[PATH_MAX];
	int n, rc;

	if (buf == NULL || size == 0)
		return -EINVAL;
	if (phub_config_in_build_tree()) {
		n = snprintf(buf, size, "%s", PHUB_CONFIG_DRIVERS_DIR);
	} else {
		rc = phub_config_data_dir(dir, sizeof(dir));
		if (rc != 0)
			return rc;
		n = snprintf(buf, size, "%s/drivers-cfg", dir);
	}
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}
