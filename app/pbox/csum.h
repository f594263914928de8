/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The Internet checksum's raw sum, 8 bytes per step. DPDK 22.11's rte_raw_cksum adds 16 bits
 * per step: on an 8 KB datagram that cost as much as both of its memif copies (see
 * docs/performance.md). The ones'-complement sum does not care how the bytes are grouped, so
 * 32-bit little-endian halves added into 64-bit accumulators and folded give the same 16-bit
 * value as rte_raw_cksum, byte for byte; tests/unit/check_pbox_csum.c checks that.
 */

#ifndef PBOX_CSUM_H
#define PBOX_CSUM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The same value as rte_raw_cksum(buf, len): the sum folded to 16 bits, not complemented. */
static inline uint16_t
pbox_raw_cksum(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint64_t s0 = 0, s1 = 0;

	/* Two independent chains: each 32-bit half is below 2^32, so no 64-bit sum can wrap. */
	while (len >= 16) {
		uint64_t a, b;

		memcpy(&a, p, sizeof(a));
		memcpy(&b, p + 8, sizeof(b));
		s0 += (a & 0xffffffffu) + (a >> 32);
		s1 += (b & 0xffffffffu) + (b >> 32);
		p += 16;
		len -= 16;
	}
	s0 += s1;
	if (len >= 8) {
		uint64_t a;

		memcpy(&a, p, sizeof(a));
		s0 += (a & 0xffffffffu) + (a >> 32);
		p += 8;
		len -= 8;
	}
	if (len >= 4) {
		uint32_t w;

		memcpy(&w, p, sizeof(w));
		s0 += w;
		p += 4;
		len -= 4;
	}
	if (len >= 2) {
		uint16_t h;

		memcpy(&h, p, sizeof(h));
		s0 += h;
		p += 2;
		len -= 2;
	}
	/* An odd last byte is the low byte of a 16-bit word, as rte_raw_cksum takes it. */
	if (len != 0)
		s0 += *p;
	s0 = (s0 & 0xffffffffu) + (s0 >> 32);
	s0 = (s0 & 0xffffffffu) + (s0 >> 32);
	s0 = (s0 & 0xffffu) + (s0 >> 16);
	s0 = (s0 & 0xffffu) + (s0 >> 16);
	s0 = (s0 & 0xffffu) + (s0 >> 16);
	return (uint16_t)s0;
}

#endif /* PBOX_CSUM_H */
