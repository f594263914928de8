/* SPDX-License-Identifier: BSD-3-Clause */
/* An IPv4 address (host order) as text, with or without its UDP port, for logs and telemetry. */

#ifndef PHUB_ADDR_H
#define PHUB_ADDR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "a.b.c.d" (16 bytes hold any address). */
static inline void
phub_ipv4_text(uint32_t ipv4, char *buf, size_t size)
{
	snprintf(buf, size, "%u.%u.%u.%u", ipv4 >> 24, (ipv4 >> 16) & 0xff, (ipv4 >> 8) & 0xff,
			ipv4 & 0xff);
}

/* "a.b.c.d:port" (22 bytes hold any). */
static inline void
phub_ipv4_port_text(uint32_t ipv4, uint16_t udp_port, char *buf, size_t size)
{
	snprintf(buf, size, "%u.%u.%u.%u:%u", ipv4 >> 24, (ipv4 >> 16) & 0xff, (ipv4 >> 8) & 0xff,
			ipv4 & 0xff, udp_port);
}

#endif /* PHUB_ADDR_H */
