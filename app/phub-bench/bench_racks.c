/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A job across racks (docs/hierarchy.md): --racks "IP0:N0,IP1:N1,..." gives each rack's PBox
 * and how many ranks it holds, in ring order; global rank g belongs to the rack whose
 * contiguous range holds it, joins that rack's PBox with its global rank and the total world
 * size, from that rack's namespace. Pure: parsing, the rank-to-rack map, namespace names.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phub_bench.h"

int
phub_bench_racks_parse(const char *spec, struct phub_bench_racks *out, char *err,
		size_t errlen)
{
	const char *p = spec;
	uint32_t total = 0;

	memset(out, 0, sizeof(*out));
	if (spec == NULL || *spec == '\0') {
		snprintf(err, errlen, "--servers: empty (expected IP0:N0,IP1:N1,...)");
		return -EINVAL;
	}
	while (*p != '\0') {
		struct phub_bench_rack *r = &out->rack[out->n];
		const char *comma = strchr(p, ',');
		size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
		const char *colon = memchr(p, ':', len);
		struct in_addr a;
		unsigned long v;
		char num[16];
		char *end;

		if (out->n == PHUB_BENCH_MAX_RACKS) {
			snprintf(err, errlen, "--servers: more than %u racks", PHUB_BENCH_MAX_RACKS);
			return -EINVAL;
		}
		if (colon == NULL || (size_t)(colon - p) >= sizeof(r->server) ||
				len - (size_t)(colon - p) - 1 >= sizeof(num)) {
			snprintf(err, errlen, "--servers: rack %u '%.*s': expected IP:RANKS",
				out->n, (int)len, p);
			return -EINVAL;
		}
		memcpy(r->server, p, (size_t)(colon - p));
		r->server[colon - p] = '\0';
		memcpy(num, colon + 1, len - (size_t)(colon - p) - 1);
		num[len - (size_t)(colon - p) - 1] = '\0';
		if (inet_pton(AF_INET, r->server, &a) != 1) {
			snprintf(err, errlen, "--servers: rack %u: '%s' is not an IPv4 address",
				out->n, r->server);
			return -EINVAL;
		}
		errno = 0;
		v = strtoul(num, &end, 10);
		if (num[0] < '1' || num[0] > '9' || *end != '\0' || errno != 0 ||
				v > UINT16_MAX || total + v > UINT16_MAX) {
			snprintf(err, errlen, "--servers: rack %u: ranks '%s': an integer from 1,"
				" and the world at most %u", out->n, num, UINT16_MAX);
			return -EINVAL;
		}
		r->ranks = (uint16_t)v;
		r->first_rank = (uint16_t)total;
		total += (uint32_t)v;
		out->n++;
		p += len;
		if (*p == ',') {
			p++;
			if (*p == '\0') {
				snprintf(err, errlen, "--servers: a rack after the last ','");
				return -EINVAL;
			}
		}
	}
	out->world_size = (uint16_t)total;
	return 0;
}

int
phub_bench_rack_of(const struct phub_bench_racks *racks, uint32_t rank, uint32_t *local)
{
	unsigned int i;

	for (i = 0; i < racks->n; i++) {
		if (rank >= racks->rack[i].first_rank &&
				rank < (uint32_t)racks->rack[i].first_rank + racks->rack[i].ranks) {
			if (local != NULL)
				*local = rank - racks->rack[i].first_rank;
			return (int)i;
		}
	}
	return -ERANGE;
}

int
phub_bench_prefixes_check(const char *list, unsigned int n_racks, char *err, size_t errlen)
{
	unsigned int n = 1;
	const char *p;

	for (p = list; *p != '\0'; p++)
		n += *p == ',';
	if (n != n_racks) {
		snprintf(err, errlen, "--netns-prefixes: %u prefix(es) for %u rack(s)", n, n_racks);
		return -EINVAL;
	}
	return 0;
}

int
phub_bench_netns_name(const char *prefix, const char *prefixes,
		const struct phub_bench_racks *racks, uint32_t rank, char *buf, size_t len)
{
	uint32_t local = rank;
	int rack = 0;
	size_t o = 0;
	int n;

	if (racks != NULL && racks->n > 0) {
		rack = phub_bench_rack_of(racks, rank, &local);
		if (rack < 0)
			return rack;
	}
	if (prefixes != NULL) {
		/* The rack's own entry of the comma list. */
		const char *p = prefixes, *comma;
		int i;

		for (i = 0; i < rack && p != NULL; i++) {
			p = strchr(p, ',');
			p = p != NULL ? p + 1 : NULL;
		}
		if (p == NULL)
			return -ERANGE;
		comma = strchr(p, ',');
		n = snprintf(buf, len, "%.*s%u", (int)(comma != NULL ? (size_t)(comma - p) :
			strlen(p)), p, local + 1);
		return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
	}
	if (prefix == NULL)
		return -EINVAL;
	if (strstr(prefix, "%r") == NULL) {
		/* One prefix for every rank: numbered by global rank, as without racks. */
		n = snprintf(buf, len, "%s%u", prefix, rank + 1);
		return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
	}
	/* %r: the rack's number; the rank within its rack after it. */
	for (const char *p = prefix; *p != '\0'; p++) {
		if (p[0] == '%' && p[1] == 'r') {
			n = snprintf(buf + o, o < len ? len - o : 0, "%d", rack);
			p++;
		} else {
			n = snprintf(buf + o, o < len ? len - o : 0, "%c", *p);
		}
		if (n < 0)
			return -ENAMETOOLONG;
		o += (size_t)n;
	}
	n = snprintf(buf + o, o < len ? len - o : 0, "%u", local + 1);
	return n < 0 || o + (size_t)n >= len ? -ENAMETOOLONG : 0;
}

bool
phub_bench_order_dependent(bool random_gradients, bool deterministic, unsigned int n_racks)
{
	/*
	 * Exact gradients sum to the same bits in any order. Random ones only when the PBox
	 * sums in rank order, and on one PBox: across racks, the ring adds rack sums in an order
	 * that starts at a different rack for each part of a segment (docs/hierarchy.md), which
	 * a rank-order reference does not follow; those runs are checked within tolerance, and
	 * their bit-reproducibility from run to run by the models' digests.
	 */
	return random_gradients && (!deterministic || n_racks > 1);
}

uint64_t
phub_bench_digest(const void *data, size_t len, uint64_t h)
{
	const unsigned char *p = data;
	size_t i;

	/* FNV-1a, 64 bits. */
	for (i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}
