/* SPDX-License-Identifier: BSD-3-Clause */
/* Option parsing, model selection and JSON printing shared by the phub-plan commands. */

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

int
plan_fail(const char *cmd, int code, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "phub-plan%s%s: ", cmd != NULL ? " " : "", cmd != NULL ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

int
plan_bad_option(const char *cmd, char **argv)
{
	/* getopt_long has already advanced past the offending word. */
	const char *opt = optind > 0 ? argv[optind - 1] : "?";

	return plan_fail(cmd, PLAN_EXIT_USAGE,
			"option %s is unknown or lacks its value (see phub-plan %s --help)", opt,
			cmd);
}

int
plan_double(const char *cmd, const char *opt, const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || errno == ERANGE || isnan(v))
		return plan_fail(cmd, PLAN_EXIT_USAGE, "--%s: '%s' is not a number", opt, s);
	*out = v;
	return 0;
}

int
plan_uint(const char *cmd, const char *opt, const char *s, unsigned long max, unsigned int *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || *end != '\0' || errno == ERANGE)
		return plan_fail(cmd, PLAN_EXIT_USAGE, "--%s: '%s' is not an integer", opt, s);
	if (v < 0 || (unsigned long long)v > max)
		return plan_fail(cmd, PLAN_EXIT_VALUE,
				"--%s: must be an integer from 0 to %lu (got %s)", opt, max, s);
	*out = (unsigned int)v;
	return 0;
}

int
plan_bytes(const char *cmd, const char *opt, const char *s, double *out)
{
	char *end;
	double v, mul = 1;

	errno = 0;
	v = strtod(s, &end);
	if (end != s && (*end == 'K' || *end == 'k'))
		mul = 1024, end++;
	else if (end != s && (*end == 'M' || *end == 'm'))
		mul = 1024.0 * 1024, end++;
	else if (end != s && (*end == 'G' || *end == 'g'))
		mul = 1024.0 * 1024 * 1024, end++;
	if (end == s || *end != '\0' || errno == ERANGE || isnan(v))
		return plan_fail(cmd, PLAN_EXIT_USAGE,
				"--%s: '%s' is not a size in bytes (a number with an optional K, M or G)",
				opt, s);
	*out = v * mul;
	return 0;
}

void
plan_model_opts_init(struct plan_model_opts *m)
{
	memset(m, 0, sizeof(*m));
	m->model_bytes = NAN;
	m->compute_s = NAN;
	m->units = PHUB_MODEL_UNITS_SI;
}

int
plan_common_option(const char *cmd, int c, char **argv, struct plan_model_opts *m,
		bool *json, void (*usage)(void))
{
	double ms = 0;
	int rc = 0;

	if (m == NULL && c >= PLAN_OPT_PRESET && c <= PLAN_OPT_UNITS)
		return plan_bad_option(cmd, argv);
	switch (c) {
	case PLAN_OPT_PRESET:
	case PLAN_OPT_MODEL:
		if (m->preset != NULL || m->file != NULL)
			return plan_fail(cmd, PLAN_EXIT_USAGE, "give the model once (--model or"
					" its old spelling --preset)");
		/*
		 * --model NAME|FILE, as phub-bench takes it: a name of the model table (any case,
		 * "resnet50" or "RN50") is that network; anything else is a model file. --preset,
		 * the old spelling, takes names only.
		 */
		if (c == PLAN_OPT_PRESET || phub_model_preset_find(optarg) != NULL)
			m->preset = optarg;
		else
			m->file = optarg;
		break;
	case PLAN_OPT_MODEL_BYTES:
		rc = plan_bytes(cmd, "model-bytes", optarg, &m->model_bytes);
		break;
	case PLAN_OPT_COMPUTE_S:
		rc = plan_double(cmd, "compute-s", optarg, &m->compute_s);
		break;
	case PLAN_OPT_COMPUTE_MS:
		rc = plan_double(cmd, "compute-ms", optarg, &ms);
		if (rc == 0)
			m->compute_s = ms / 1e3;
		break;
	case PLAN_OPT_UNITS:
		if (phub_model_units_parse(optarg, &m->units) != 0)
			rc = plan_fail(cmd, PLAN_EXIT_USAGE, "--units: '%s' is not si or paper",
					optarg);
		m->units_given = true;
		break;
	case PLAN_OPT_JSON:
		*json = true;
		break;
	case 'h':
	case PLAN_OPT_HELP:
		usage();
		return PLAN_EXIT_OK;
	default:
		return plan_bad_option(cmd, argv);
	}
	return rc != 0 ? rc : PLAN_OPT_NEXT;
}

/* getopt_long's value of fields[i]: above every command's own. */
#define PLAN_OPT_FIELD 1024
/* Entries of a command's getopt_long table, its end included. */
#define PLAN_OPTIONS_MAX 64

static int
field_option(const char *cmd, const struct plan_field *f, const char *arg, void *own)
{
	void *field = (char *)own + f->off;
	double v;
	int rc;

	switch (f->kind) {
	case PLAN_F_FLAG:
		*(bool *)field = true;
		return 0;
	case PLAN_F_TEXT:
		*(const char **)field = arg;
		return 0;
	case PLAN_F_UINT:
		rc = plan_uint(cmd, f->name, arg, f->max, field);
		v = *(unsigned int *)field;
		break;
	default:
		rc = plan_double(cmd, f->name, arg, field);
		v = *(double *)field;
		break;
	}
	if (rc == 0 && f->why != NULL && !(v <= f->hi && (f->lo_open ? v > f->lo : v >= f->lo)))
		rc = plan_fail(cmd, PLAN_EXIT_VALUE, "--%s %s", f->name, f->why);
	return rc;
}

int
plan_parse(const char *cmd, int argc, char **argv, const struct option *opts,
		const struct plan_field *fields, size_t n_fields, plan_own_option_fn *take_own,
		void *own, struct plan_model_opts *m, bool *json, void (*usage)(void))
{
	struct option all[PLAN_OPTIONS_MAX];
	size_t n = 0;
	int c, rc;

	if (m != NULL)
		plan_model_opts_init(m);
	while (opts[n].name != NULL)
		n++;
	if (n + n_fields >= PLAN_OPTIONS_MAX)
		return plan_fail(cmd, PLAN_EXIT_USAGE, "more options than PLAN_OPTIONS_MAX (a bug)");
	memcpy(all, opts, n * sizeof(all[0]));
	for (size_t i = 0; i < n_fields; i++) {
		size_t j = 0;

		/*
		 * Two names of one field (--list-models, --list-presets) are one option to
		 * getopt_long: the same value, so an abbreviation of both is not ambiguous.
		 */
		while (fields[j].off != fields[i].off || fields[j].kind != fields[i].kind)
			j++;
		all[n++] = (struct option){ fields[i].name,
			fields[i].kind == PLAN_F_FLAG ? no_argument : required_argument, NULL,
			PLAN_OPT_FIELD + (int)j };
	}
	all[n] = (struct option){ NULL, 0, NULL, 0 };
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", all, NULL)) != -1) {
		if (c >= PLAN_OPT_FIELD) {
			rc = field_option(cmd, &fields[c - PLAN_OPT_FIELD], optarg, own);
			if (rc != 0)
				return rc;
			continue;
		}
		if (c >= PLAN_OPT_OWN && take_own != NULL) {
			rc = take_own(own, c, optarg);
			if (rc != 0)
				return rc;
			continue;
		}
		rc = plan_common_option(cmd, c, argv, m, json, usage);
		if (rc != PLAN_OPT_NEXT)
			return rc;
	}
	if (optind < argc)
		return plan_fail(cmd, PLAN_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
	return PLAN_OPT_NEXT;
}

int
plan_model_load(const char *cmd, const struct plan_model_opts *m, bool need_compute,
		struct phub_model_job *job, const char **name)
{
	const struct phub_model_preset *p;
	char err[PHUB_MODEL_ERR_LEN];
	int sources = (m->preset != NULL) + (m->file != NULL) + !isnan(m->model_bytes);

	if (sources == 0)
		return plan_fail(cmd, PLAN_EXIT_USAGE,
				"give a model: --model NAME|FILE or --model-bytes B (see --help)");
	if (sources > 1)
		return plan_fail(cmd, PLAN_EXIT_USAGE,
				"--model (or --preset) and --model-bytes exclude each other");
	if (m->preset != NULL) {
		if (!isnan(m->compute_s))
			return plan_fail(cmd, PLAN_EXIT_USAGE,
					"--compute-s goes with --model-bytes, not with a model"
					" name");
		p = phub_model_preset_find(m->preset);
		if (p == NULL)
			return plan_fail(cmd, PLAN_EXIT_VALUE,
					"unknown model '%s' (phub-plan bandwidth --list-models"
					" shows them)",
					m->preset);
		if (phub_model_job_from_preset(p, m->units, job, err, sizeof(err)) != 0)
			return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
		*name = p->abbr;
		return 0;
	}
	if (m->file != NULL) {
		if (!isnan(m->compute_s))
			return plan_fail(cmd, PLAN_EXIT_USAGE,
					"--compute-s goes with --model-bytes; a model file has its own compute_s");
		if (phub_model_job_load(m->file, job, err, sizeof(err)) != 0)
			return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
		*name = m->file;
		return 0;
	}
	if (!(m->model_bytes > 0) || !isfinite(m->model_bytes))
		return plan_fail(cmd, PLAN_EXIT_VALUE,
				"--model-bytes must be a positive size (got %g)", m->model_bytes);
	if (isnan(m->compute_s) && need_compute)
		return plan_fail(cmd, PLAN_EXIT_USAGE,
				"--model-bytes needs --compute-s (or --compute-ms)");
	if (!isnan(m->compute_s) && (!(m->compute_s > 0) || !isfinite(m->compute_s)))
		return plan_fail(cmd, PLAN_EXIT_VALUE,
				"--compute-s must be a positive time in seconds");
	memset(job, 0, sizeof(*job));
	job->layer_bytes = malloc(sizeof(double));
	if (job->layer_bytes == NULL)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "out of memory");
	job->layer_bytes[0] = m->model_bytes;
	job->layers = 1;
	/* Commands that need no compute time still get a valid job. */
	job->compute_s = isnan(m->compute_s) ? 1 : m->compute_s;
	job->overlap = 2.0 / 3.0;
	job->batch = 1;
	*name = "custom";
	return 0;
}

int
plan_json_print(json_t *v)
{
	char *s;

	if (v == NULL)
		return plan_fail(NULL, PLAN_EXIT_VALUE, "out of memory");
	s = json_dumps(v, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
	json_decref(v);
	if (s == NULL)
		return plan_fail(NULL, PLAN_EXIT_VALUE, "out of memory");
	puts(s);
	free(s);
	return 0;
}
