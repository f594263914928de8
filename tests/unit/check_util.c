/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * lib/util: a command line's unsigned number is taken whole, in its bounds and its bases, and
 * anything else (a sign, white space, trailing text, an overflow) is refused untouched.
 */

#include <stdint.h>

#include <check.h>

#include "unit_suite.h"

#include "phub_parse.h"

START_TEST(test_parse_takes_every_base_and_both_bounds)
{
	uint64_t v = 0;

	ck_assert_int_eq(phub_parse_u64("0", 0, 10, &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(phub_parse_u64("47000", 0, UINT16_MAX, &v), 0);
	ck_assert_uint_eq(v, 47000);
	ck_assert_int_eq(phub_parse_u64("0x10", 0, 100, &v), 0);
	ck_assert_uint_eq(v, 16);
	ck_assert_int_eq(phub_parse_u64("010", 0, 100, &v), 0);
	ck_assert_uint_eq(v, 8);
	ck_assert_int_eq(phub_parse_u64("576", 576, 9000, &v), 0);
	ck_assert_uint_eq(v, 576);
	ck_assert_int_eq(phub_parse_u64("9000", 576, 9000, &v), 0);
	ck_assert_uint_eq(v, 9000);
	ck_assert_int_eq(phub_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
}
END_TEST

START_TEST(test_parse_refuses_what_is_not_a_whole_number)
{
	static const char *const bad[] = {
		"", "-1", "+1", " 1", "1 ", "12x", "x", "0x", "1.5", "08",
		"18446744073709551616", "99999999999999999999999",
	};
	uint64_t v = 1234;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(phub_parse_u64(bad[i], 0, UINT64_MAX, &v) == -EINVAL, "'%s'",
				bad[i]);
		ck_assert_uint_eq(v, 1234);
	}
}
END_TEST

START_TEST(test_parse_refuses_a_value_out_of_its_bounds)
{
	uint64_t v = 1234;

	/* One below the least and one past the most. */
	ck_assert_int_eq(phub_parse_u64("575", 576, 9000, &v), -EINVAL);
	ck_assert_int_eq(phub_parse_u64("9001", 576, 9000, &v), -EINVAL);
	ck_assert_int_eq(phub_parse_u64("0", 1, UINT32_MAX, &v), -EINVAL);
	ck_assert_int_eq(phub_parse_u64("4294967296", 1, UINT32_MAX, &v), -EINVAL);
	ck_assert_uint_eq(v, 1234);
}
END_TEST

Suite *
phub_util_suite(void)
{
	Suite *s = suite_create("util");

	PHUB_TCASE(s, "parse",
		test_parse_takes_every_base_and_both_bounds,
		test_parse_refuses_what_is_not_a_whole_number,
		test_parse_refuses_a_value_out_of_its_bounds);
	return s;
}
