/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-plan cost: §4.9's cost per worker and throughput per dollar; Table 5 reproduced. */

#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static const char *const cmd = "cost";

static const char usage_text[] =
	"usage: phub-plan cost [--oversub LIST] [--samples-per-s X] [--phub-ratio R]\n"
	"                     [price options] [--reading uplink-share|inverse] [--json]\n"
	"       phub-plan cost --table5 [--ratio-row 1|2|3] [--reading ...] [--json]\n\n"
	"PHub §4.9: the cost charged to one worker (its machine and GPUs, its network share\n"
	"A = (N+S+C) + F(4S+2C), and for a PHub rack its share of the PBox) and throughput per\n"
	"$1000, for a 100G sharded baseline at 1:1 and 25G PHub racks at x:1 oversubscription.\n\n"
	"  --oversub LIST        PHub oversubscriptions, e.g. 1,2,3 (default)\n"
	"  --samples-per-s X     baseline training throughput of one worker, samples/s\n"
	"                        (default: the value Table 5 implies, see --table5)\n"
	"  --phub-ratio R        PHub worker throughput / baseline (default: Table 5's)\n"
	"  --reading R           how x:1 becomes F: uplink-share F = 1/(x+1) (default, fits\n"
	"                        Table 5) or inverse F = 1/x\n"
	"  --table5              Table 5 beside the model, every cell's residual\n"
	"  --ratio-row K         the Table 5 row (PHub K:1, future GPUs) the ratio comes from\n"
	"                        (default 2, the cell the text quotes)\n"
	"prices, in US dollars (defaults: §4.9):\n"
	"  --worker-usd 4117  --gpu-usd 699  --gpus-per-worker 4  --pbox-usd 8407\n"
	"  --switch-usd 21077  --switch-ports 32  --breakout 4\n"
	"  --fast-nic-usd 795  --fast-cable-usd 94  (100G baseline)\n"
	"  --slow-nic-usd 260  --slow-cable-usd 31.25  --pbox-port-usd 162.5  --pbox-ports 20\n\n"
	"Exit status: 0 done, 1 bad value (negative price, oversubscription 0), 2 usage.\n";

static void
usage(void)
{
	fputs(usage_text, stdout);
}

static const char *const col_names[PHUB_MODEL_TABLE5_COLS] = { "future", "spendy", "cheap" };
static const char *const row_names[PHUB_MODEL_TABLE5_ROWS] = {
	"100Gb sharded 1:1", "25Gb PHub 1:1", "25Gb PHub 2:1", "25Gb PHub 3:1",
};

static const char *
reading_name(enum phub_model_cost_reading r)
{
	return r == PHUB_MODEL_COST_INVERSE ? "inverse" : "uplink-share";
}

static int
table5(enum phub_model_cost_reading reading, unsigned int ratio_row, bool json)
{
	char err[PHUB_MODEL_ERR_LEN];
	struct phub_model_table5 t;
	double worst = 0;
	json_t *rows;

	if (phub_model_table5(reading, ratio_row, &t, err, sizeof(err)) != 0)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
	for (int r = 0; r < PHUB_MODEL_TABLE5_ROWS; r++)
		for (int c = 0; c < PHUB_MODEL_TABLE5_COLS; c++)
			if (!t.derived[r][c])
				worst = fmax(worst, fabs(t.residual[r][c]));
	if (json) {
		rows = json_array();
		for (int r = 0; r < PHUB_MODEL_TABLE5_ROWS; r++) {
			json_t *cells = json_object();

			for (int c = 0; c < PHUB_MODEL_TABLE5_COLS; c++) {
				json_t *cell = json_object();

				json_object_set_new(cell, "paper", json_real(t.paper[r][c]));
				json_object_set_new(cell, "model", json_real(t.model[r][c]));
				json_object_set_new(cell, "residual", json_real(t.residual[r][c]));
				json_object_set_new(cell, "derived", json_boolean(t.derived[r][c]));
				json_object_set_new(cells, col_names[c], cell);
			}
			json_array_append_new(rows, json_pack("{s:s, s:o}", "row", row_names[r],
					"cells", cells));
		}
		return plan_json_print(json_pack("{s:s, s:i, s:f, s:f, s:f, s:f, s:o, s:f}",
				"reading", reading_name(reading), "ratio_row", (int)ratio_row,
				"baseline_samples_per_s", t.baseline_samples_per_s,
				"phub_ratio", t.phub_ratio, "spendy_gpu_usd", t.spendy_gpu_usd,
				"cheap_worker_usd", t.cheap_worker_usd, "rows", rows,
				"max_abs_residual_predicted", worst));
	}
	printf("Table 5, throughput per $1000 (reading %s): paper | model | residual\n",
			reading_name(reading));
	printf("%-18s", "");
	for (int c = 0; c < PHUB_MODEL_TABLE5_COLS; c++)
		printf(" %26s", col_names[c]);
	printf("\n");
	for (int r = 0; r < PHUB_MODEL_TABLE5_ROWS; r++) {
		printf("%-18s", row_names[r]);
		for (int c = 0; c < PHUB_MODEL_TABLE5_COLS; c++)
			printf("  %6.2f %7.2f %+6.2f%%%s", t.paper[r][c], t.model[r][c],
					100 * t.residual[r][c], t.derived[r][c] ? "*" : " ");
		printf("\n");
	}
	printf("* derived cells (fitted, not predicted): baseline %.1f samples/s per worker,\n"
		"  PHub/baseline throughput %.4f (from PHub %u:1), spendy GPU $%.0f, cheap worker $%.0f\n",
			t.baseline_samples_per_s, t.phub_ratio, ratio_row, t.spendy_gpu_usd,
			t.cheap_worker_usd);
	printf("largest |residual| of the predicted cells: %.2f%%\n", 100 * worst);
	return 0;
}

static json_t *
row_json(const char *name, bool phub, unsigned int oversub, const struct phub_model_cost *c,
		double samples_per_s, double vs_baseline)
{
	json_t *o = json_object();

	json_object_set_new(o, "deployment", json_string(name));
	json_object_set_new(o, "phub", json_boolean(phub));
	json_object_set_new(o, "oversub", json_integer(oversub));
	json_object_set_new(o, "workers_per_switch", json_integer(c->workers_per_switch));
	json_object_set_new(o, "network_usd", json_real(c->network_usd));
	json_object_set_new(o, "pbox_share_usd", json_real(c->pbox_share_usd));
	json_object_set_new(o, "worker_usd", json_real(c->worker_usd));
	json_object_set_new(o, "samples_per_s", json_real(samples_per_s));
	json_object_set_new(o, "samples_per_kusd", json_real(c->samples_per_kusd));
	json_object_set_new(o, "vs_baseline", json_real(vs_baseline));
	return o;
}

static int
parse_oversub(const char *s, unsigned int *list, size_t *n)
{
	char buf[256], *tok, *save = NULL;
	unsigned int v;
	int rc;

	snprintf(buf, sizeof(buf), "%s", s);
	*n = 0;
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		if (*n == 16)
			return plan_fail(cmd, PLAN_EXIT_VALUE, "--oversub: at most 16 values");
		rc = plan_uint(cmd, "oversub", tok, 64, &v);
		if (rc != 0)
			return rc;
		list[(*n)++] = v;
	}
	if (*n == 0)
		return plan_fail(cmd, PLAN_EXIT_USAGE, "--oversub: give a list such as 1,2,3");
	return 0;
}

enum { O_OVERSUB = PLAN_OPT_OWN, O_READING };

/* What cost's own options set. */
struct cost_opts {
	struct phub_model_cost_params p;
	enum phub_model_cost_reading reading;
	unsigned int oversub[16], ratio_row;
	size_t noversub;
	double sps, ratio;
	bool table5;
};

/* The number options: the price ones, one per field of struct phub_model_cost_prices, last. */
static const struct plan_field cost_fields[] = {
	PLAN_REAL_IN("samples-per-s", struct cost_opts, sps, 0, INFINITY, true,
		     "must be positive"),
	PLAN_REAL_IN("phub-ratio", struct cost_opts, ratio, 0, INFINITY, true,
		     "must be positive"),
	PLAN_UINT_MIN("ratio-row", struct cost_opts, ratio_row, 3, 1, "must be 1, 2 or 3"),
	PLAN_FLAG("table5", struct cost_opts, table5),
#define P(n, f) PLAN_REAL(n, struct cost_opts, p.prices.f)
#define U(n, f) PLAN_UINT(n, struct cost_opts, p.prices.f, 1000000)
	P("worker-usd", worker_usd),
	P("gpu-usd", gpu_usd),
	U("gpus-per-worker", gpus_per_worker),
	P("pbox-usd", pbox_usd),
	P("switch-usd", switch_usd),
	U("switch-ports", switch_ports),
	U("breakout", breakout),
	P("fast-nic-usd", fast_nic_usd),
	P("fast-cable-usd", fast_cable_usd),
	P("slow-nic-usd", slow_nic_usd),
	P("slow-cable-usd", slow_cable_usd),
	P("pbox-port-usd", pbox_port_usd),
	U("pbox-ports", pbox_ports),
#undef P
#undef U
};

static int
cost_option(void *own, int c, const char *arg)
{
	struct cost_opts *o = own;
	int rc = 0;

	switch (c) {
	case O_OVERSUB:
		rc = parse_oversub(arg, o->oversub, &o->noversub);
		break;
	case O_READING:
		if (strcmp(arg, "uplink-share") == 0)
			o->reading = PHUB_MODEL_COST_UPLINK_SHARE;
		else if (strcmp(arg, "inverse") == 0)
			o->reading = PHUB_MODEL_COST_INVERSE;
		else
			rc = plan_fail(cmd, PLAN_EXIT_USAGE,
					"--reading: '%s' is not uplink-share or inverse", arg);
		break;
	}
	return rc;
}

int
plan_cost(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "oversub", required_argument, NULL, O_OVERSUB },
		{ "reading", required_argument, NULL, O_READING },
		PLAN_OPTIONS_END,
	};
	struct cost_opts args = {
		.reading = PHUB_MODEL_COST_UPLINK_SHARE,
		.oversub = { 1, 2, 3 },
		.noversub = 3,
		.ratio_row = 2,
		.sps = -1,
		.ratio = -1,
	};
	struct phub_model_cost_params *p = &args.p;
	struct phub_model_cost base, phub;
	struct phub_model_table5 t5;
	char err[PHUB_MODEL_ERR_LEN];
	json_t *rows = NULL;
	bool json = false;
	int rc;

	phub_model_cost_prices_default(&p->prices);
	rc = plan_parse(cmd, argc, argv, opts, cost_fields, PLAN_DIM(cost_fields), cost_option, &args,
			NULL, &json, usage);
	if (rc != PLAN_OPT_NEXT)
		return rc;
	if (args.table5)
		return table5(args.reading, args.ratio_row, json);

	/* Throughputs default to what Table 5 implies under this reading. */
	if (args.sps < 0 || args.ratio < 0) {
		if (phub_model_table5(args.reading, args.ratio_row, &t5, err, sizeof(err)) != 0)
			return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
		if (args.sps < 0)
			args.sps = t5.baseline_samples_per_s;
		if (args.ratio < 0)
			args.ratio = t5.phub_ratio;
	}
	p->reading = args.reading;
	p->phub = false;
	p->oversub = 1;
	p->samples_per_s = args.sps;
	if (phub_model_cost(p, &base, err, sizeof(err)) != 0)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
	if (json)
		rows = json_array();
	else
		printf("%-20s %8s %10s %10s %11s %11s %9s\n", "deployment", "workers", "network",
				"pbox_share", "per_worker", "samples/$1k", "vs_base");
#define ROW_TEXT(name, k, c) \
	printf("%-20s %8u %10.2f %10.2f %11.2f %11.2f %8.3fx\n", name, (k).workers_per_switch, \
			(k).network_usd, (k).pbox_share_usd, (k).worker_usd, \
			(k).samples_per_kusd, c)
	if (json)
		json_array_append_new(rows, row_json("100Gb sharded 1:1", false, 1, &base,
				args.sps, 1));
	else
		ROW_TEXT("100Gb sharded 1:1", base, 1.0);
	p->phub = true;
	p->samples_per_s = args.sps * args.ratio;
	for (size_t i = 0; i < args.noversub; i++) {
		char name[32];

		p->oversub = args.oversub[i];
		if (phub_model_cost(p, &phub, err, sizeof(err)) != 0) {
			json_decref(rows);
			return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
		}
		snprintf(name, sizeof(name), "25Gb PHub %u:1", args.oversub[i]);
		if (json)
			json_array_append_new(rows, row_json(name, true, args.oversub[i], &phub,
					p->samples_per_s,
					phub.samples_per_kusd / base.samples_per_kusd));
		else
			ROW_TEXT(name, phub, phub.samples_per_kusd / base.samples_per_kusd);
	}
#undef ROW_TEXT
	if (json)
		return plan_json_print(json_pack("{s:s, s:f, s:f, s:o}", "reading",
				reading_name(args.reading), "baseline_samples_per_s", args.sps,
				"phub_ratio", args.ratio, "rows", rows));
	printf("baseline %.1f samples/s per worker, PHub x%.4f; costs in US dollars per worker\n",
			args.sps, args.ratio);
	return 0;
}
