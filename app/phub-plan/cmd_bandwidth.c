/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-plan bandwidth: Figure 4's per-host bandwidth for a model, and Table 2 reproduced. */

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan.h"

static const char *const cmd = "bandwidth";

static const char usage_text[] =
	"usage: phub-plan bandwidth (--model NAME|FILE | --model-bytes B --compute-s S)\n"
	"                           [--workers N] [--servers S] [--interfaces I]\n"
	"                           [--units si|paper] [--json]\n"
	"       phub-plan bandwidth --table2 [--units si|paper] [--json]\n"
	"       phub-plan bandwidth --list-models [--json]\n\n"
	"Minimum per-host bandwidth (send + receive, Gbit/s) that hides communication when\n"
	"N workers exchange a model of M bytes every T seconds of compute (PHub §2.3.1,\n"
	"Figure 4), for the four PS configurations CC, CS, NCC, NCS and for a PBox.\n\n"
	"  --model NAME|FILE   a network of Table 3 by name, as phub-bench takes it, in any\n"
	"                      case: alexnet vgg11 vgg19 googlenet inception3 resnet18\n"
	"                      resnet50 resnet269 resnext269, or AN V11 V19 GN I3 RN18 RN50\n"
	"                      RN269 RX269; anything else is a model file, JSON\n"
	"                      {\"layer_bytes\": [...], \"compute_s\": T} (--preset NAME: the\n"
	"                      old spelling, names only)\n"
	"  --model-bytes B     model size in bytes (K, M, G suffixes are powers of 1024)\n"
	"  --compute-s S       compute time per batch in seconds (--compute-ms: in ms)\n"
	"  --workers N         worker machines (default 8, Table 2's setup)\n"
	"  --servers S         NCS server processes (default: as many as workers)\n"
	"  --interfaces I      PBox interfaces (default 10, §3.3)\n"
	"  --units si|paper    si: MB = 10^6 B, Gbit = 10^9 bit; paper: MB = 2^20 B,\n"
	"                      Gbit = 2^30 bit, the reading that reproduces Table 2 (default:\n"
	"                      paper with a model name and --table2, si otherwise)\n"
	"  --table2            Table 2 beside the model, with the residual of every cell\n"
	"  --list-models       the networks of Table 3 (--list-presets: the old spelling)\n"
	"  --json              one JSON object: CC, CS, NCC, NCS, PBOX, each in Gbit/s\n\n"
	"Exit status: 0 done, 1 bad value (size <= 0, workers < 2, unknown model), 2 usage.\n";

static void
usage(void)
{
	fputs(usage_text, stdout);
}

static int
list_presets(bool json)
{
	json_t *arr = json ? json_array() : NULL;

	if (!json)
		printf("%-6s %-11s %-14s %9s %12s %6s\n", "abbr", "name", "network", "size_MB",
				"compute_ms", "batch");
	for (size_t i = 0; i < phub_model_preset_count(); i++) {
		const struct phub_model_preset *p = phub_model_preset_at(i);

		if (json)
			json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i}",
					"abbr", p->abbr, "name", p->name, "title", p->title,
					"model_mb", p->model_mb, "compute_ms", p->compute_ms,
					"batch", (int)p->batch));
		else
			printf("%-6s %-11s %-14s %9.0f %12.0f %6u\n", p->abbr, p->name, p->title,
					p->model_mb, p->compute_ms, p->batch);
	}
	return json ? plan_json_print(arr) : 0;
}

static const char *const cols[4] = { "CC", "CS", "NCC", "NCS" };

static int
table2(enum phub_model_units units, bool json)
{
	struct phub_model_table2_row rows[PHUB_MODEL_TABLE2_ROWS];
	char err[PHUB_MODEL_ERR_LEN];
	double worst = 0;
	json_t *arr, *o;

	if (phub_model_table2(units, rows, err, sizeof(err)) != 0)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
	for (int r = 0; r < PHUB_MODEL_TABLE2_ROWS; r++)
		for (int c = 0; c < 4; c++)
			worst = fmax(worst, fabs(rows[r].residual[c]));
	if (json) {
		arr = json_array();
		for (int r = 0; r < PHUB_MODEL_TABLE2_ROWS; r++) {
			json_t *paper = json_object(), *model = json_object(), *res = json_object();

			for (int c = 0; c < 4; c++) {
				json_object_set_new(paper, cols[c],
						json_real(rows[r].paper_gbps[c]));
				json_object_set_new(model, cols[c],
						json_real(rows[r].model_gbps[c]));
				json_object_set_new(res, cols[c], json_real(rows[r].residual[c]));
			}
			json_array_append_new(arr, json_pack("{s:s, s:o, s:o, s:o}", "network",
					rows[r].abbr, "paper_gbps", paper, "model_gbps", model,
					"residual", res));
		}
		o = json_pack("{s:s, s:i, s:o, s:f}", "units", phub_model_units_name(units),
				"workers", 8, "rows", arr, "max_abs_residual", worst);
		return plan_json_print(o);
	}
	printf("Table 2 (8 workers), units %s: paper | model | residual\n",
			phub_model_units_name(units));
	printf("%-6s", "");
	for (int c = 0; c < 4; c++)
		printf(" %24s", cols[c]);
	printf("\n");
	for (int r = 0; r < PHUB_MODEL_TABLE2_ROWS; r++) {
		printf("%-6s", rows[r].abbr);
		for (int c = 0; c < 4; c++)
			printf("  %5.0f %8.1f %+7.1f%%", rows[r].paper_gbps[c],
					rows[r].model_gbps[c], 100 * rows[r].residual[c]);
		printf("\n");
	}
	printf("largest |residual|: %.1f%%\n", 100 * worst);
	return 0;
}

/* What bandwidth's own options set. */
struct bandwidth_opts {
	struct phub_model_bw_params p;
	bool table2, list;
};

static const struct plan_field bandwidth_fields[] = {
	PLAN_UINT("workers", struct bandwidth_opts, p.workers, 1000000),
	PLAN_UINT("servers", struct bandwidth_opts, p.servers, 1000000),
	PLAN_UINT_MIN("interfaces", struct bandwidth_opts, p.pbox_interfaces, 1024, 1,
		      "must be at least 1"),
	PLAN_FLAG("table2", struct bandwidth_opts, table2),
	PLAN_FLAG("list-presets", struct bandwidth_opts, list),
	PLAN_FLAG("list-models", struct bandwidth_opts, list),
};

int
plan_bandwidth(int argc, char **argv)
{
	static const struct option opts[] = {
		PLAN_OPTIONS_MODEL,
		PLAN_OPTIONS_COMPUTE,
		PLAN_OPTIONS_END,
	};
	struct bandwidth_opts args = { .p = { .workers = 8 } };
	struct phub_model_bw bw[PHUB_MODEL_PS_COUNT];
	char err[PHUB_MODEL_ERR_LEN];
	struct plan_model_opts m;
	struct phub_model_job job = { 0 };
	bool json = false;
	const char *name = NULL;
	int rc;

	rc = plan_parse(cmd, argc, argv, opts, bandwidth_fields, PLAN_DIM(bandwidth_fields), NULL,
			&args, &m, &json, usage);
	if (rc != PLAN_OPT_NEXT)
		return rc;
	if (args.list)
		return list_presets(json);
	if (args.table2)
		return table2(m.units_given ? m.units : PHUB_MODEL_UNITS_PAPER, json);

	/* The presets are the paper's numbers: read them as the paper did unless told. */
	if (m.preset != NULL && !m.units_given)
		m.units = PHUB_MODEL_UNITS_PAPER;
	rc = plan_model_load(cmd, &m, true, &job, &name);
	if (rc != 0)
		return rc;
	args.p.model_bytes = phub_model_job_bytes(&job);
	args.p.compute_s = job.compute_s;
	args.p.units = m.units;
	phub_model_job_free(&job);
	if (phub_model_bandwidth(&args.p, bw, err, sizeof(err)) != 0)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);

	if (json) {
		json_t *o = json_pack("{s:s, s:f, s:f, s:i, s:s, s:f}", "model", name,
				"model_bytes", args.p.model_bytes, "compute_s", args.p.compute_s,
				"workers", (int)args.p.workers,
				"units", phub_model_units_name(args.p.units),
				"gbit_bits", phub_model_units_gbit_bits(args.p.units));

		for (int i = 0; i < PHUB_MODEL_PS_COUNT; i++) {
			json_t *v = json_pack("{s:f, s:f, s:f, s:f}", "gbps", bw[i].host_gbps,
					"send_gbps", bw[i].send_gbps, "worker_gbps",
					bw[i].worker_gbps, "interface_gbps", bw[i].interface_gbps);

			json_object_set_new(o, phub_model_ps_name(i), v);
		}
		json_object_set_new(json_object_get(o, "PBOX"), "interfaces",
				json_integer(args.p.pbox_interfaces ? args.p.pbox_interfaces : 10));
		return plan_json_print(o);
	}
	printf("model %s: %.0f bytes, %.4g s compute per batch, %u workers (units %s)\n", name,
			args.p.model_bytes, args.p.compute_s, args.p.workers,
			phub_model_units_name(args.p.units));
	printf("minimum bandwidth of the busiest host, send + receive, to hide communication:\n");
	for (int i = 0; i < PHUB_MODEL_PS_COUNT; i++) {
		printf("  %-5s %10.2f Gbit/s", phub_model_ps_name(i), bw[i].host_gbps);
		if (i == PHUB_MODEL_PS_PBOX)
			printf("  (%.2f per interface over %u; each worker %.2f)",
					bw[i].interface_gbps,
					args.p.pbox_interfaces ? args.p.pbox_interfaces : 10,
					bw[i].worker_gbps);
		printf("\n");
	}
	return 0;
}
