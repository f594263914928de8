/* SPDX-License-Identifier: BSD-3-Clause */
/* Internals shared by the files of lib/wire: unaligned big-endian loads and stores. */

#ifndef PHUB_WIRE_PRIV_H
#define PHUB_WIRE_PRIV_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

/*
 * Datagrams sit at any alignment in a packet buffer (2 mod 4 after an Ethernet header), so every
 * multi-byte field is read and written through memcpy, which compilers turn into one
 * unaligned load or store plus a byte swap.
 */
static inline uint16_t
wire_ld16(const void *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return be16toh(v);
}

static inline uint32_t
wire_ld32(const void *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

static inline uint64_t
wire_ld64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

static inline void
wire_st16(void *p, uint16_t v)
{
	v = htobe16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void
wire_st32(void *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void
wire_st64(void *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

#endif /* PHUB_WIRE_PRIV_H */
