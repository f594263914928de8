/* SPDX-License-Identifier: BSD-3-Clause */
/* The systemd readiness protocol (sd_notify): one datagram to $NOTIFY_SOCKET, no libsystemd. */

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "pbox.h"

int
pbox_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	size_t len;
	ssize_t n;
	int fd, rc = 0;

	/* Not started by systemd (or by a service manager that speaks its protocol). */
	if (path == NULL || path[0] == '\0')
		return 0;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(addr.sun_path))
		return -EINVAL;
	memcpy(addr.sun_path, path, len);
	/* "@name" is a socket of the abstract namespace: its name starts with a NUL byte. */
	if (path[0] == '@')
		addr.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&addr,
			(socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
	if (n < 0)
		rc = -errno;
	close(fd);
	return rc;
}
