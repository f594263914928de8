/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-plan: the command line over lib/model; picks the command and hands it its arguments. */

#include <stdio.h>
#include <string.h>

#include "plan.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *what;
} commands[] = {
	{ "bandwidth", plan_bandwidth,
			"per-host bandwidth that hides communication (§2.3.1, Table 2)" },
	{ "hierarchy", plan_hierarchy, "should a multi-rack job reduce hierarchically (§3.4)" },
	{ "cost", plan_cost, "rack cost and throughput per dollar (§4.9, Table 5)" },
	{ "optimize", plan_optimize,
			"search PBoxes, racks, interfaces, chunk size (Yan et al. §5)" },
	{ "calibrate", plan_calibrate, "fit the model's constants to phub-bench runs" },
};

static const char usage_head[] =
	"usage: phub-plan <command> [options]    (phub-plan <command> --help)\n\n"
	"PHub's performance and cost models as a planning tool. Every command takes --json.\n\n"
	"commands:\n";
static const char usage_tail[] =
	"\nexit status: 0 done, 1 a value is wrong (bad size, unknown model, bad file),\n"
	"2 the command line is not understood (unknown option, missing argument).\n";

static void
usage(FILE *f)
{
	fputs(usage_head, f);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].what);
	fputs(usage_tail, f);
}

int
main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return PLAN_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
			strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return PLAN_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("phub-plan %s\n", PHUB_VERSION);
		return PLAN_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	}
	return plan_fail(NULL, PLAN_EXIT_USAGE,
			"unknown command '%s' (phub-plan --help lists them)", argv[1]);
}
