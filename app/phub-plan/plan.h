/* SPDX-License-Identifier: BSD-3-Clause */
/* What the phub-plan commands share: exit codes, option parsing, model selection, JSON output. */

#ifndef PHUB_PLAN_H
#define PHUB_PLAN_H

#include <stdbool.h>

#include <jansson.h>

#include "model/phub_model.h"

/* Exit codes: 0 success; 1 a value is wrong (negative size, zero bandwidth, unknown preset,
 * a bad or unverified input file); 2 the command line cannot be understood (unknown command
 * or option, missing argument, text where a number belongs, options that exclude each other). */
#define PLAN_EXIT_OK 0
#define PLAN_EXIT_VALUE 1
#define PLAN_EXIT_USAGE 2

int plan_bandwidth(int argc, char **argv);
int plan_hierarchy(int argc, char **argv);
int plan_cost(int argc, char **argv);
int plan_optimize(int argc, char **argv);
int plan_calibrate(int argc, char **argv);

/* Prints "phub-plan <cmd>: <message>" on stderr; returns code. */
int plan_fail(const char *cmd, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* For getopt_long's '?' and ':' answers: names the option, points at --help, returns 2. */
int plan_bad_option(const char *cmd, char **argv);

/* A number option: text that is not a number is a usage error (2). */
int plan_double(const char *cmd, const char *opt, const char *s, double *out);
/* An integer option: not an integer is a usage error (2); negative or above max a value
 * error (1). */
int plan_uint(const char *cmd, const char *opt, const char *s, unsigned long max,
		unsigned int *out);
/* A byte size with an optional K, M, G suffix (powers of 1024): "32K". */
int plan_bytes(const char *cmd, const char *opt, const char *s, double *out);

/* Where a command's model comes from: --preset, --model FILE, or --model-bytes/--compute-s. */
struct plan_model_opts {
	const char *preset;
	const char *file;
	double model_bytes;	/* NAN: not given */
	double compute_s;	/* NAN: not given */
	bool units_given;
	enum phub_model_units units;
};

void plan_model_opts_init(struct plan_model_opts *m);

/*
 * getopt_long values of the options several commands share; a command numbers its own from
 * PLAN_OPT_OWN and leaves these to plan_common_option().
 */
enum plan_opt {
	PLAN_OPT_PRESET = 256,
	PLAN_OPT_MODEL,
	PLAN_OPT_MODEL_BYTES,
	PLAN_OPT_COMPUTE_S,
	PLAN_OPT_COMPUTE_MS,
	PLAN_OPT_UNITS,
	PLAN_OPT_JSON,
	PLAN_OPT_HELP,
	PLAN_OPT_OWN,
};

/* plan_common_option() took the option: go on parsing. */
#define PLAN_OPT_NEXT (-1)

/*
 * One getopt_long answer c that is not the command's own: a shared option (into *m, which
 * may be NULL for a command without a model, and *json), -h/--help (prints usage and returns
 * PLAN_EXIT_OK), or an unknown option or missing value (plan_bad_option()). Returns
 * PLAN_OPT_NEXT, or the exit code to return now.
 */
int plan_common_option(const char *cmd, int c, char **argv, struct plan_model_opts *m,
		bool *json, void (*usage)(void));
/* Loads the job the options name; *name gets a label ("RN269", file path or "custom").
 * need_compute: the command needs a compute time. */
int plan_model_load(const char *cmd, const struct plan_model_opts *m, bool need_compute,
		struct phub_model_job *job, const char **name);

/* Prints a JSON value on stdout (indented, newline) and frees it. */
int plan_json_print(json_t *v);

#endif /* PHUB_PLAN_H */
