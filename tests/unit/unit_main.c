/* SPDX-License-Identifier: BSD-3-Clause */
/* The main of every unit test runner: runs the one Check suite named by PHUB_SUITE. */

#include <stdlib.h>

#include <check.h>

Suite *PHUB_SUITE(void);

int
main(void)
{
	SRunner *runner = srunner_create(PHUB_SUITE());
	int failed;

	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
