/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * lib/net: the fast raw checksum gives exactly rte_raw_cksum's value, its incremental update
 * (RFC 1624) the full recompute's; the built frame's headers and UDP checksum are DPDK's; the
 * reference stack gives every reference back.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"
#include "test_rand.h"

#include "phub_net.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint8_t
next_byte(void)
{
	return (uint8_t)(phub_test_rand(&rng) >> 24);
}

START_TEST(test_fast_sum_equals_dpdk_sum_for_every_length_and_offset)
{
	static uint8_t buf[2100];

	for (int round = 0; round < 4; round++) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = round == 0 ? 0xff : round == 1 ? 0 : next_byte();
		for (size_t off = 0; off < 8; off++)
			for (size_t len = 0; len + off <= 2048 + 8 && len <= 2048; len++) {
				uint16_t want = rte_raw_cksum(buf + off, len);

				ck_assert_uint_eq(phub_net_raw_cksum(buf + off, len), want);
				ck_assert_uint_eq(phub_net_raw_cksum_scalar(buf + off, len), want);
#if defined(__x86_64__)
				if (__builtin_cpu_supports("avx2"))
					ck_assert_uint_eq(phub_net_raw_cksum_avx2(buf + off, len), want);
				if (__builtin_cpu_supports("avx512f"))
					ck_assert_uint_eq(phub_net_raw_cksum_avx512(buf + off, len), want);
				if (__builtin_cpu_supports("avx512vnni"))
					ck_assert_uint_eq(phub_net_raw_cksum_vnni(buf + off, len), want);
#endif
			}
	}
}
END_TEST

START_TEST(test_fast_sum_equals_dpdk_sum_on_jumbo_datagrams)
{
	static uint8_t buf[9000];

	for (int round = 0; round < 20; round++) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = next_byte();
		ck_assert_uint_eq(phub_net_raw_cksum(buf, sizeof(buf)),
				rte_raw_cksum(buf, sizeof(buf)));
		ck_assert_uint_eq(phub_net_raw_cksum(buf + 1, sizeof(buf) - 3),
				rte_raw_cksum(buf + 1, sizeof(buf) - 3));
	}
}
END_TEST

/*
 * The AVX-512 sum loads from a cache line's start: every start within a line (the head it sums
 * apart, even or odd) and lengths around its 128-byte steps, a PUSH's 8 KB among them.
 */
START_TEST(test_fast_sum_equals_dpdk_sum_from_every_offset_in_a_cache_line)
{
	static const size_t lens[] = { 256, 257, 318, 1058, 2046, 2048, 2049, 2050, 8200, 8290 };
	static _Alignas(64) uint8_t buf[64 + 8290];

	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = round == 0 ? 0xff : next_byte();
		for (size_t off = 0; off < 64; off++)
			for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
				uint16_t want = rte_raw_cksum(buf + off, lens[k]);

				ck_assert_uint_eq(phub_net_raw_cksum(buf + off, lens[k]), want);
#if defined(__x86_64__)
				if (__builtin_cpu_supports("avx512f"))
					ck_assert_uint_eq(phub_net_raw_cksum_avx512(buf + off,
							lens[k]), want);
#endif
			}
	}
}
END_TEST

/* The largest datagram, all ones: the vector lanes' and the folds' worst case. */
START_TEST(test_fast_sum_of_largest_all_ones_datagram)
{
	static uint8_t buf[65535];

	memset(buf, 0xff, sizeof(buf));
	ck_assert_uint_eq(phub_net_raw_cksum(buf, sizeof(buf)), rte_raw_cksum(buf, sizeof(buf)));
	ck_assert_uint_eq(phub_net_raw_cksum(buf + 3, sizeof(buf) - 3),
			rte_raw_cksum(buf + 3, sizeof(buf) - 3));
	/* All zeros: the VNNI sum's lanes at their most negative (every word biased -32768). */
	memset(buf, 0, sizeof(buf));
	ck_assert_uint_eq(phub_net_raw_cksum(buf, sizeof(buf)), rte_raw_cksum(buf, sizeof(buf)));
}
END_TEST

static uint32_t
next_u32(void)
{
	return (uint32_t)next_byte() << 24 | (uint32_t)next_byte() << 16 |
		(uint32_t)next_byte() << 8 | next_byte();
}

/* The checksum of a 20-byte IPv4 header summed in full by DPDK (whatever its IHL byte says). */
static uint16_t
ip_csum_full(uint8_t *ip)
{
	memset(ip + 10, 0, 2);
	return (uint16_t)~rte_raw_cksum(ip, 20);
}

/* Many random headers, one word or one address changed: the update equals the recompute. */
START_TEST(test_incremental_update_equals_full_recompute)
{
	uint8_t ip[20];

	for (int round = 0; round < 200000; round++) {
		uint16_t csum, updated;
		int word;

		for (size_t i = 0; i < sizeof(ip); i++)
			ip[i] = round % 97 == 0 ? 0xff : round % 89 == 0 ? 0 : next_byte();
		ip[0] = 0x45;
		csum = ip_csum_full(ip);
		memcpy(ip + 10, &csum, 2);
		if (round % 2 == 0) {
			uint16_t old, new = (uint16_t)next_u32();

			/*
			 * Any 16-bit word but the checksum's own (word 5) and the version's (word
			 * 0, never changed: with it, the header can never sum to zero, the one
			 * case where eqn. 3 gives 0x0000 for the recompute's 0xffff).
			 */
			word = 1 + (int)(next_u32() % 8);
			word += word >= 5;
			if (round % 5 == 0)
				new = round % 10 == 0 ? 0 : 0xffff;
			memcpy(&old, ip + 2 * word, 2);
			memcpy(ip + 2 * word, &new, 2);
			updated = phub_net_csum_update16(csum, old, new);
		} else {
			uint32_t old, new = round % 7 == 1 ? 0 : next_u32();

			word = round % 4 == 1 ? 12 : 16;	/* the source or the destination */
			memcpy(&old, ip + word, 4);
			memcpy(ip + word, &new, 4);
			updated = phub_net_csum_update32(csum, old, new);
		}
		ck_assert_uint_eq(updated, ip_csum_full(ip));
	}
}
END_TEST

/* The pseudo-header's sum from the fields: DPDK's, folded, for random addresses and lengths. */
START_TEST(test_udp_phdr_sum_equals_dpdk)
{
	struct rte_ipv4_hdr ip;

	for (int round = 0; round < 100000; round++) {
		uint16_t udp_len = (uint16_t)(next_u32() % (65535 - 20));
		uint32_t sum;

		memset(&ip, 0, sizeof(ip));
		ip.version_ihl = RTE_IPV4_VHL_DEF;
		ip.next_proto_id = IPPROTO_UDP;
		ip.total_length = rte_cpu_to_be_16((uint16_t)(udp_len + 20));
		ip.src_addr = round % 50 == 0 ? 0xffffffff : next_u32();
		ip.dst_addr = round % 70 == 0 ? 0xffffffff : next_u32();
		sum = phub_net_udp_phdr_sum(ip.src_addr, ip.dst_addr, udp_len);
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		ck_assert_uint_eq(sum, rte_ipv4_phdr_cksum(&ip, 0));
	}
}
END_TEST

/* An mbuf over buf without EAL or pool: what phub_net_udp_build and _csum_finish read. */
static void
mbuf_over(struct rte_mbuf *m, uint8_t *buf, uint16_t len)
{
	memset(m, 0, sizeof(*m));
	m->buf_addr = buf;
	m->buf_len = len;
	m->data_off = 0;
	m->data_len = len;
	m->pkt_len = len;
	m->nb_segs = 1;
}

/*
 * Random addresses, ports and payloads, the payload summed apart at an even offset as the
 * programs do for a shared payload: the headers and the UDP checksum are DPDK's own.
 */
START_TEST(test_udp_build_equals_dpdk_headers_and_checksum)
{
	static uint8_t frame[PHUB_NET_UDP_HDR_LEN + 2048];

	for (int round = 0; round < 20000; round++) {
		struct rte_ether_hdr *eth = (struct rte_ether_hdr *)(void *)frame;
		struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
		struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
		uint16_t payload_len = (uint16_t)(next_u32() % 2048), head, want;
		uint32_t src_ip = next_u32(), dst_ip = round % 13 == 0 ? 0xffffffff : next_u32();
		uint16_t src_udp = (uint16_t)next_u32(), dst_udp = (uint16_t)next_u32();
		struct rte_ether_addr smac, dmac;
		struct rte_mbuf m;

		for (int i = 0; i < 6; i++) {
			smac.addr_bytes[i] = next_byte();
			dmac.addr_bytes[i] = next_byte();
		}
		memset(frame, 0xa5, sizeof(frame));
		for (uint16_t i = 0; i < payload_len; i++)
			frame[PHUB_NET_UDP_HDR_LEN + i] = next_byte();
		mbuf_over(&m, frame, (uint16_t)(PHUB_NET_UDP_HDR_LEN + payload_len));
		ck_assert_uint_eq(phub_net_udp_build(&m, &smac, &dmac, src_ip, dst_ip, src_udp,
				dst_udp, payload_len), PHUB_NET_UDP_HDR_LEN);
		ck_assert_mem_eq(eth->dst_addr.addr_bytes, dmac.addr_bytes, 6);
		ck_assert_mem_eq(eth->src_addr.addr_bytes, smac.addr_bytes, 6);
		ck_assert_uint_eq(eth->ether_type, RTE_BE16(RTE_ETHER_TYPE_IPV4));
		ck_assert_uint_eq(rte_be_to_cpu_16(ip->total_length), 20 + 8 + payload_len);
		ck_assert_uint_eq(ip->fragment_offset, RTE_BE16(RTE_IPV4_HDR_DF_FLAG));
		ck_assert_uint_eq(rte_be_to_cpu_32(ip->src_addr), src_ip);
		ck_assert_uint_eq(rte_be_to_cpu_32(ip->dst_addr), dst_ip);
		ck_assert_uint_eq(rte_ipv4_cksum(ip), 0);
		ck_assert_uint_eq(rte_be_to_cpu_16(udp->src_port), src_udp);
		ck_assert_uint_eq(rte_be_to_cpu_16(udp->dst_port), dst_udp);
		ck_assert_uint_eq(rte_be_to_cpu_16(udp->dgram_len), 8 + payload_len);
		ck_assert_uint_eq(udp->dgram_cksum, 0);
		ck_assert_uint_eq(m.l2_len, RTE_ETHER_HDR_LEN);
		ck_assert_uint_eq(m.l3_len, 20);

		want = rte_ipv4_udptcp_cksum(ip, udp);
		/* An even split of the datagram: the head in place, the rest as a payload sum. */
		head = (uint16_t)(8 + (payload_len > 0 ? 2 * (next_u32() % (payload_len / 2 + 1)) :
				0));
		phub_net_udp_csum_finish(&m, head, phub_net_raw_cksum((uint8_t *)udp + head,
				(size_t)(8 + payload_len - head)));
		ck_assert_uint_eq(udp->dgram_cksum, want);
		ck_assert(phub_net_udp_csum_ok(ip, udp, (uint16_t)(8 + payload_len)));
		udp->dgram_cksum ^= 0x0100;
		ck_assert(!phub_net_udp_csum_ok(ip, udp, (uint16_t)(8 + payload_len)));
	}
}
END_TEST

/* References taken off the stack by hand (as _get does) come back through the driver's free. */
START_TEST(test_extref_stack_gives_every_reference_back)
{
	struct phub_net_extref all[8], *free_slots[8], *a, *b;
	struct phub_net_extref_stack st;

	phub_net_extref_stack_init(&st, all, free_slots, 8);
	ck_assert(!phub_net_extref_out(&st));
	for (int i = 0; i < 8; i++)
		ck_assert_ptr_eq(all[i].owner, &st);
	a = st.free[--st.n_free];
	b = st.free[--st.n_free];
	ck_assert(phub_net_extref_out(&st));
	phub_net_extref_put(NULL, a);
	ck_assert(phub_net_extref_out(&st));
	phub_net_extref_put(NULL, b);
	ck_assert(!phub_net_extref_out(&st));
	ck_assert_uint_eq(st.n_free, 8);
}
END_TEST

Suite *
phub_net_suite(void)
{
	Suite *s = suite_create("net");

	PHUB_TCASE(s, "raw sum",
		test_fast_sum_equals_dpdk_sum_for_every_length_and_offset,
		test_fast_sum_equals_dpdk_sum_on_jumbo_datagrams,
		test_fast_sum_equals_dpdk_sum_from_every_offset_in_a_cache_line,
		test_fast_sum_of_largest_all_ones_datagram);

	PHUB_TCASE(s, "incremental",
		test_incremental_update_equals_full_recompute,
		test_udp_phdr_sum_equals_dpdk);

	PHUB_TCASE(s, "frames",
		test_udp_build_equals_dpdk_headers_and_checksum,
		test_extref_stack_gives_every_reference_back);
	return s;
}
