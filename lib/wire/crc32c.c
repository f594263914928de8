/* SPDX-License-Identifier: BSD-3-Clause */
/* CRC32C (Castagnoli) for the datagram checksum: slicing-by-8 C and SSE4.2, picked at run time. */

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "phub_wire.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define CRC32C_HAVE_X86 1
#endif

/* The reflected Castagnoli polynomial 0x1EDC6F41. */
#define CRC32C_POLY 0x82f63b78u

/*
 * crc_table[k][b]: the CRC of byte b followed by k zero bytes, so eight table look-ups fold eight
 * input bytes at once. Filled before main() by crc32c_init(): read-only afterwards, so every
 * thread may use it without synchronisation.
 */
static uint32_t crc_table[8][256];
static bool crc_hw;

__attribute__((constructor)) static void
crc32c_init(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;

		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		crc_table[0][n] = c;
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int k = 1; k < 8; k++)
			crc_table[k][n] = (crc_table[k - 1][n] >> 8) ^
				crc_table[0][crc_table[k - 1][n] & 0xff];
#ifdef CRC32C_HAVE_X86
	/* Decided once: the binary is built for any x86-64 and must not assume SSE4.2. */
	__builtin_cpu_init();
	crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static inline uint32_t
crc32c_byte(uint32_t crc, uint8_t b)
{
	return crc_table[0][(crc ^ b) & 0xff] ^ (crc >> 8);
}

uint32_t
phub_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	crc = ~crc;
	/* Byte at a time up to an 8-byte boundary keeps the 8-byte loads aligned. */
	while (len > 0 && ((uintptr_t)p & 7) != 0) {
		crc = crc32c_byte(crc, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t w;

		memcpy(&w, p, sizeof(w));
		/* The CRC is defined on the byte stream, least significant byte first. */
		w = le64toh(w) ^ crc;
		crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
			crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
			crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
			crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
		p += 8;
		len -= 8;
	}
	while (len-- > 0)
		crc = crc32c_byte(crc, *p++);
	return ~crc;
}

#ifdef CRC32C_HAVE_X86
/* Compiled for SSE4.2 whatever the build's -march; only called after the CPU check above. */
__attribute__((target("sse4.2"))) static uint32_t
crc32c_sse42(uint32_t crc, const uint8_t *p, size_t len)
{
	crc = ~crc;
	while (len > 0 && ((uintptr_t)p & 7) != 0) {
		crc = _mm_crc32_u8(crc, *p++);
		len--;
	}
#if defined(__x86_64__)
	{
		uint64_t c = crc;

		while (len >= 8) {
			uint64_t w;

			memcpy(&w, p, sizeof(w));
			c = _mm_crc32_u64(c, w);
			p += 8;
			len -= 8;
		}
		crc = (uint32_t)c;
	}
#endif
	while (len >= 4) {
		uint32_t w;

		memcpy(&w, p, sizeof(w));
		crc = _mm_crc32_u32(crc, w);
		p += 4;
		len -= 4;
	}
	while (len-- > 0)
		crc = _mm_crc32_u8(crc, *p++);
	return ~crc;
}
#endif

bool
phub_crc32c_hw_available(void)
{
	return crc_hw;
}

uint32_t
phub_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
#ifdef CRC32C_HAVE_X86
	if (crc_hw)
		return crc32c_sse42(crc, buf, len);
#endif
	/* Safe on any CPU: without the instruction this is the portable version. */
	return phub_crc32c_sw(crc, buf, len);
}

/* The checksum of the wire: whichever of the two this CPU runs fastest. */
uint32_t
phub_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return phub_crc32c_hw(crc, buf, len);
}
