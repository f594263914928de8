/* SPDX-License-Identifier: BSD-3-Clause */
/* How a unit test file builds its Check suite: one call a TCase, its tests listed in order. */

#ifndef PHUB_TEST_UNIT_SUITE_H
#define PHUB_TEST_UNIT_SUITE_H

#include <stddef.h>

#include <check.h>

/*
 * Creates TCase name in suite s with the tests of the NULL-terminated list, in order, and
 * returns it for a timeout, a fixture or loop tests. A TCase created and never added to its
 * suite runs none of its tests, and nothing says so: here the two steps cannot come apart.
 */
static inline TCase *
phub_suite_add_tests(Suite *s, const char *name, const TTest *const *tests)
{
	TCase *tc = tcase_create(name);

	for (; *tests != NULL; tests++)
		tcase_add_test(tc, *tests);
	suite_add_tcase(s, tc);
	return tc;
}

/* phub_suite_add_tests() with the tests as arguments: PHUB_TCASE(s, "keys", test_a, test_b). */
#define PHUB_TCASE(s, name, ...) \
	phub_suite_add_tests((s), (name), (const TTest *const[]){ __VA_ARGS__, NULL })

/* TCase name in suite s with loop test test run for _i = 0 .. n - 1 (a table's rows); returned. */
static inline TCase *
phub_suite_add_loop(Suite *s, const char *name, const TTest *test, int n)
{
	TCase *tc = tcase_create(name);

	tcase_add_loop_test(tc, test, 0, n);
	suite_add_tcase(s, tc);
	return tc;
}

#define PHUB_TCASE_LOOP(s, name, test, n) phub_suite_add_loop((s), (name), (test), (int)(n))

#endif /* PHUB_TEST_UNIT_SUITE_H */
