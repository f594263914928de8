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
 * unaligned load or store plus a byte swap. One definition makes wire_ldN and wire_stN for
 * each width N.
 */
#define WIRE_LD_ST(n) \
static inline uint##n##_t \
wire_ld##n(const void *p) \
{ \
	uint##n##_t v; \
 \
	memcpy(&v, p, sizeof(v)); \
	return be##n##toh(v); \
} \
 \
static inline void \
wire_st##n(void *p, uint##n##_t v) \
{ \
	v = htobe##n(v); \
	memcpy(p, &v, sizeof(v)); \
}

WIRE_LD_ST(16)
WIRE_LD_ST(32)
WIRE_LD_ST(64)

#undef WIRE_LD_ST

#endif /* PHUB_WIRE_PRIV_H */
