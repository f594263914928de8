/* SPDX-License-Identifier: BSD-3-Clause */
/* What the phub-plan commands share: exit codes, option parsing, model selection, JSON output. */

#ifndef PHUB_PLAN_H
#define PHUB_PLAN_H

#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

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

/* The getopt_long entries of the shared options, for a command's table (any order). */
#define PLAN_OPTIONS_MODEL \
	{ "preset", required_argument, NULL, PLAN_OPT_PRESET }, \
	{ "model", required_argument, NULL, PLAN_OPT_MODEL }, \
	{ "model-bytes", required_argument, NULL, PLAN_OPT_MODEL_BYTES }, \
	{ "units", required_argument, NULL, PLAN_OPT_UNITS }
#define PLAN_OPTIONS_COMPUTE \
	{ "compute-s", required_argument, NULL, PLAN_OPT_COMPUTE_S }, \
	{ "compute-ms", required_argument, NULL, PLAN_OPT_COMPUTE_MS }
/* --json and --help, which every command takes, and the table's end. */
#define PLAN_OPTIONS_END \
	{ "json", no_argument, NULL, PLAN_OPT_JSON }, \
	{ "help", no_argument, NULL, PLAN_OPT_HELP }, \
	{ NULL, 0, NULL, 0 }

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
/*
 * A command's own options (getopt_long values from PLAN_OPT_OWN up): takes option c with its
 * argument arg (NULL for a flag) into own. Returns 0, or the exit code to return now.
 */
typedef int plan_own_option_fn(void *own, int c, const char *arg);

/*
 * A command's option that sets one field of its own struct, at off: a flag (true), a text (the
 * argument), an unsigned int up to max (plan_uint) or a double (plan_double); a number then,
 * when why is not NULL, a value error "--name why" unless lo <= v <= hi (lo < v when lo_open).
 */
enum plan_field_kind { PLAN_F_FLAG, PLAN_F_TEXT, PLAN_F_UINT, PLAN_F_REAL };

struct plan_field {
	const char *name;
	enum plan_field_kind kind;
	size_t off;
	unsigned long max;
	double lo, hi;
	bool lo_open;
	const char *why;
};

/* A bool set by --name; a const char * that is --name's argument. */
#define PLAN_FLAG(name, type, field) \
	{ name, PLAN_F_FLAG, offsetof(type, field), 0, 0, 0, false, NULL }
#define PLAN_TEXT(name, type, field) \
	{ name, PLAN_F_TEXT, offsetof(type, field), 0, 0, 0, false, NULL }
#define PLAN_REAL(name, type, field) \
	{ name, PLAN_F_REAL, offsetof(type, field), 0, -INFINITY, INFINITY, false, NULL }
/* A double refused outside lo..hi (above lo only, when open). */
#define PLAN_REAL_IN(name, type, field, lo, hi, open, why) \
	{ name, PLAN_F_REAL, offsetof(type, field), 0, lo, hi, open, why }
#define PLAN_UINT(name, type, field, max) \
	{ name, PLAN_F_UINT, offsetof(type, field), max, 0, INFINITY, false, NULL }
/* An unsigned int refused below min. */
#define PLAN_UINT_MIN(name, type, field, max, min, why) \
	{ name, PLAN_F_UINT, offsetof(type, field), max, min, INFINITY, false, why }

#define PLAN_DIM(a) (sizeof(a) / sizeof((a)[0]))

/* The text of a number macro, for a why: "must be from 1 to " PLAN_STR(TOP_MAX). */
#define PLAN_STR_(x) #x
#define PLAN_STR(x) PLAN_STR_(x)

/*
 * Reads a command line with opts and fields (n_fields of them, into own): the command's other
 * options through take_own(own, ...) (NULL: it has none), the shared ones through
 * plan_common_option(), after plan_model_opts_init(m) when m is not NULL; nothing may follow
 * the options. Returns PLAN_OPT_NEXT when the command goes on, or the exit code to return now
 * (0 after --help).
 */
int plan_parse(const char *cmd, int argc, char **argv, const struct option *opts,
		const struct plan_field *fields, size_t n_fields, plan_own_option_fn *take_own,
		void *own, struct plan_model_opts *m, bool *json, void (*usage)(void));

/* Loads the job the options name; *name gets a label ("RN269", file path or "custom").
 * need_compute: the command needs a compute time. */
int plan_model_load(const char *cmd, const struct plan_model_opts *m, bool need_compute,
		struct phub_model_job *job, const char **name);

/* Prints a JSON value on stdout (indented, newline) and frees it. */
int plan_json_print(json_t *v);

#endif /* PHUB_PLAN_H */
