/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The Internet checksum, without DPDK: the part of lib/net that a DPDK-free program may use alone
 * (phub_net.h includes it). The raw sum goes 8 bytes per step: DPDK 22.11's rte_raw_cksum adds
 * 16 bits per step, and on an 8 KB datagram that cost as much as both of its memif copies
 * (docs/history/performance-log.md, "What bounds it"). The ones'-complement sum does not care
 * how the bytes are grouped, so 32-bit little-endian halves added into 64-bit accumulators and
 * folded give the same 16-bit value as rte_raw_cksum, byte for byte; tests/unit/check_net.c
 * checks that.
 */

#ifndef PHUB_NET_CSUM_H
#define PHUB_NET_CSUM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The same value as rte_raw_cksum(buf, len): the sum folded to 16 bits, not complemented. */
static inline uint16_t
phub_net_raw_cksum_scalar(const void *buf, size_t len)
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

#if defined(__x86_64__)
/*
 * A vector sum's end: the tail's sum s (at most 16 bits) plus both 32-bit halves of every
 * 64-bit lane, folded to 16 bits.
 */
static inline uint16_t
phub_net_csum_fold_lanes(uint64_t s, const uint64_t *lanes, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		s += lanes[i] & 0xffffffffu;
		s += lanes[i] >> 32;
	}
	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffffu) + (s >> 16);
	s = (s & 0xffffu) + (s >> 16);
	s = (s & 0xffffu) + (s >> 16);
	return (uint16_t)s;
}

/*
 * The same sum, 64 bytes a step in AVX2 registers: each 64-bit lane adds the two 32-bit halves
 * of its word (below 2^33 a step, so a datagram's 1024 steps cannot wrap a lane); the tail goes
 * to the scalar sum, whose start is 64-byte steps past buf, so the two sums add.
 */
__attribute__((target("avx2"))) static inline uint16_t
phub_net_raw_cksum_avx2(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	const __m256i lo = _mm256_set1_epi64x(0xffffffff);
	__m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
	uint64_t lanes[4];

	while (len >= 64) {
		__m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)p);
		__m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));

		a0 = _mm256_add_epi64(a0, _mm256_and_si256(v0, lo));
		a1 = _mm256_add_epi64(a1, _mm256_srli_epi64(v0, 32));
		a0 = _mm256_add_epi64(a0, _mm256_and_si256(v1, lo));
		a1 = _mm256_add_epi64(a1, _mm256_srli_epi64(v1, 32));
		p += 64;
		len -= 64;
	}
	_mm256_storeu_si256((__m256i *)(void *)lanes, _mm256_add_epi64(a0, a1));
	return phub_net_csum_fold_lanes(phub_net_raw_cksum_scalar(p, len), lanes, 4);
}

/*
 * The same sum, 128 bytes a step in AVX-512 registers, four accumulators: a third less time than
 * the AVX2 sum for 8 KB (131 against 179 ns in L1, 123 against 209 ns in L2, measured on this
 * project's build machine). Three operations a vector, not four: each lane adds the whole 64-bit
 * word (mod 2^64) and, apart, its high half; the low halves' sum is the first less the second
 * shifted up (exact: below 2^64): 110 -> 91 ns for 8 KB in L1. From PHUB_NET_CSUM_ALIGN_MIN
 * bytes the loads start on a cache line, an even head up to it summed apart: a PUSH's UDP
 * header sits 34 bytes past a line, and loads across two lines made 8 KB 1.4x slower (154 ->
 * 98 ns in L1 with both steps); below it the head costs what it saves (1 KB). An odd head (a
 * buffer at an odd address) would shift the 16-bit words: such a buffer is summed from where
 * it starts. The AVX2 sum (its scalar tail below 64 bytes) takes the tail, whose start is
 * 128-byte steps past the head, so the sums add. Lanes: below 2^33 a step.
 */
#define PHUB_NET_CSUM_ALIGN_MIN 2048

__attribute__((target("avx512f"))) static inline uint16_t
phub_net_raw_cksum_avx512(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	size_t head = (size_t)(-(uintptr_t)p & 63);
	__m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
	__m512i h0 = _mm512_setzero_si512(), h1 = _mm512_setzero_si512();
	__m512i h;
	uint64_t lanes[8];
	uint64_t s = 0;

	if ((head & 1) == 0 && len >= PHUB_NET_CSUM_ALIGN_MIN) {
		s = phub_net_raw_cksum_scalar(p, head);
		p += head;
		len -= head;
	}
	while (len >= 128) {
		__m512i v0 = _mm512_loadu_si512((const void *)p);
		__m512i v1 = _mm512_loadu_si512((const void *)(p + 64));

		a0 = _mm512_add_epi64(a0, v0);
		h0 = _mm512_add_epi64(h0, _mm512_srli_epi64(v0, 32));
		a1 = _mm512_add_epi64(a1, v1);
		h1 = _mm512_add_epi64(h1, _mm512_srli_epi64(v1, 32));
		p += 128;
		len -= 128;
	}
	h = _mm512_add_epi64(h0, h1);
	_mm512_storeu_si512((void *)lanes, _mm512_add_epi64(h,
			_mm512_sub_epi64(_mm512_add_epi64(a0, a1), _mm512_slli_epi64(h, 32))));
	return phub_net_csum_fold_lanes(s + phub_net_raw_cksum_avx2(p, len), lanes, 8);
}

/*
 * The same sum with AVX512-VNNI's dot product, 256 bytes a step: each 16-bit word with its top
 * bit flipped is the signed word w - 32768, and VPDPWSSD adds pairs of them (times 1) into
 * 32-bit lanes, two instructions per 64 bytes where the AVX-512 sum takes four (the PBox checks
 * every byte of each PUSH and sums each MODEL's payload: at 8 KB segments the largest part of
 * its own per-datagram work). Four accumulators cover the instruction's latency. The lanes hold
 * exact sums: a step adds -65536 to 65534 to a lane, and the whole is within 2^30 for any
 * datagram; the bias, 32768 per word, is added back, and the scalar sum takes the tail below
 * 64 bytes, whose start is 64-byte steps past buf, so the sums add.
 */
__attribute__((target("avx512f,avx512vnni"))) static inline uint16_t
phub_net_raw_cksum_vnni(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	const __m512i flip = _mm512_set1_epi16((short)0x8000);
	const __m512i ones = _mm512_set1_epi16(1);
	__m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
	__m512i a2 = _mm512_setzero_si512(), a3 = _mm512_setzero_si512();
	uint64_t words = len / 64 * 32, total;

	while (len >= 256) {
		a0 = _mm512_dpwssd_epi32(a0, _mm512_xor_si512(_mm512_loadu_si512(p), flip), ones);
		a1 = _mm512_dpwssd_epi32(a1, _mm512_xor_si512(_mm512_loadu_si512(p + 64), flip),
				ones);
		a2 = _mm512_dpwssd_epi32(a2, _mm512_xor_si512(_mm512_loadu_si512(p + 128), flip),
				ones);
		a3 = _mm512_dpwssd_epi32(a3, _mm512_xor_si512(_mm512_loadu_si512(p + 192), flip),
				ones);
		p += 256;
		len -= 256;
	}
	while (len >= 64) {
		a0 = _mm512_dpwssd_epi32(a0, _mm512_xor_si512(_mm512_loadu_si512(p), flip), ones);
		p += 64;
		len -= 64;
	}
	total = (uint64_t)((int64_t)_mm512_reduce_add_epi32(_mm512_add_epi32(
			_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3))) +
			(int64_t)(words * 32768));
	return phub_net_csum_fold_lanes(phub_net_raw_cksum_scalar(p, len), &total, 1);
}
#endif

/*
 * rte_raw_cksum's value: AVX512-VNNI, AVX-512 or AVX2 where the CPU has it (a cached flag per
 * call).
 */
static inline uint16_t
phub_net_raw_cksum(const void *buf, size_t len)
{
#if defined(__x86_64__)
	if (len >= 256 && __builtin_cpu_supports("avx512vnni"))
		return phub_net_raw_cksum_vnni(buf, len);
	if (len >= 256 && __builtin_cpu_supports("avx512f"))
		return phub_net_raw_cksum_avx512(buf, len);
	if (len >= 128 && __builtin_cpu_supports("avx2"))
		return phub_net_raw_cksum_avx2(buf, len);
#endif
	return phub_net_raw_cksum_scalar(buf, len);
}

/*
 * The raw sum (unfolded) of the IPv4 pseudo-header of a UDP datagram of len bytes (host order),
 * src and dst as loaded from the IPv4 header. From the fields in registers: a pseudo-header
 * assembled on the stack and summed 16 bits a step reads words that span its one-byte stores,
 * which the CPU cannot forward (measured: half of phub_net_udp_csum_finish's time).
 */
static inline uint32_t
phub_net_udp_phdr_sum(uint32_t src, uint32_t dst, uint16_t len)
{
	uint8_t proto_bytes[2] = { 0, 17 }, len_bytes[2] = { (uint8_t)(len >> 8), (uint8_t)len };
	uint16_t proto, l;

	memcpy(&proto, proto_bytes, sizeof(proto));
	memcpy(&l, len_bytes, sizeof(l));
	return (src & 0xffff) + (src >> 16) + (dst & 0xffff) + (dst >> 16) + proto + l;
}

/*
 * RFC 1624, eqn. 3: the Internet checksum hc of a header in which one 16-bit word changed from
 * old to new, without summing the header again: HC' = ~(~HC + ~m + m'). Words in memory order,
 * as they are loaded from the header (the sum does not care about byte order as long as every
 * word is taken the same way). Equal to the full recompute for every header with a nonzero word
 * that does not change (an IPv4 header's version, for one): RFC 1624's one exception is a header
 * that sums to zero.
 */
static inline uint16_t
phub_net_csum_update16(uint16_t hc, uint16_t old, uint16_t new)
{
	uint32_t s = (uint32_t)(uint16_t)~hc + (uint16_t)~old + new;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* The same for a 32-bit field (an IPv4 address) loaded from the header: its two words. */
static inline uint16_t
phub_net_csum_update32(uint16_t hc, uint32_t old, uint32_t new)
{
	uint32_t s = (uint32_t)(uint16_t)~hc + (uint16_t)~(old & 0xffff) + (uint16_t)~(old >> 16) +
		(new & 0xffff) + (new >> 16);

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

#endif /* PHUB_NET_CSUM_H */
