/* SPDX-License-Identifier: BSD-3-Clause */
/* The appliance's fast raw checksum gives exactly rte_raw_cksum's value. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <rte_ip.h>

#include "csum.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint8_t
next_byte(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint8_t)(rng >> 24);
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

				ck_assert_uint_eq(pbox_raw_cksum(buf + off, len), want);
				ck_assert_uint_eq(pbox_raw_cksum_scalar(buf + off, len), want);
#if defined(__x86_64__)
				if (__builtin_cpu_supports("avx2"))
					ck_assert_uint_eq(pbox_raw_cksum_avx2(buf + off, len), want);
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
		ck_assert_uint_eq(pbox_raw_cksum(buf, sizeof(buf)),
				rte_raw_cksum(buf, sizeof(buf)));
		ck_assert_uint_eq(pbox_raw_cksum(buf + 1, sizeof(buf) - 3),
				rte_raw_cksum(buf + 1, sizeof(buf) - 3));
	}
}
END_TEST

/* The largest datagram, all ones: the vector lanes' and the folds' worst case. */
START_TEST(test_fast_sum_of_largest_all_ones_datagram)
{
	static uint8_t buf[65535];

	memset(buf, 0xff, sizeof(buf));
	ck_assert_uint_eq(pbox_raw_cksum(buf, sizeof(buf)), rte_raw_cksum(buf, sizeof(buf)));
	ck_assert_uint_eq(pbox_raw_cksum(buf + 3, sizeof(buf) - 3),
			rte_raw_cksum(buf + 3, sizeof(buf) - 3));
}
END_TEST

Suite *
phub_pbox_csum_suite(void)
{
	Suite *s = suite_create("pbox_csum");
	TCase *tc = tcase_create("raw sum");

	tcase_add_test(tc, test_fast_sum_equals_dpdk_sum_for_every_length_and_offset);
	tcase_add_test(tc, test_fast_sum_equals_dpdk_sum_on_jumbo_datagrams);
	tcase_add_test(tc, test_fast_sum_of_largest_all_ones_datagram);
	suite_add_tcase(s, tc);
	return s;
}
