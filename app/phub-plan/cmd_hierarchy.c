/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-plan hierarchy: the §3.4 condition for hierarchical reduction, both versions. */

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan.h"

static const char *const cmd = "hierarchy";

static const char usage_text[] =
	"usage: phub-plan hierarchy --racks R --workers-per-rack N --core-gbps B\n"
	"                          [--pbox-gbps B] [--worker-gbps B] [--formula 000|001|both]\n"
	"                          [--model NAME|FILE | --model-bytes B]\n"
	"                          [--rack-sum-ms MS] [--units si|paper] [--json]\n\n"
	"Should a job whose workers span R racks of N workers reduce hierarchically (each rack's\n"
	"PBox first, then the PBoxes across racks)? PHub §3.4:\n"
	"  000 (SoCC):  N(R-1)/(R B_Core) > max(N/B_PBox, 1/B_Wkr) + C,\n"
	"               B_bn = min(B_PBox, B_Core)\n"
	"  001 (arXiv): max((N-1)/B_bn, 1/(N B_Wkr)) > max(1/B_PBox, N/B_Wkr) + C,\n"
	"               B_bn = min((R-1) B_PBox, B_Core)\n"
	"with C the cross-rack cost of sharded PSs or of a ring, both shown. Times are for the\n"
	"model's bytes (the decision does not depend on them; default 1 GB).\n\n"
	"  --racks R              racks the job spans (at least 2)\n"
	"  --workers-per-rack N   workers in each rack\n"
	"  --core-gbps B          B_Core: a rack's bandwidth to the network core, Gbit/s\n"
	"  --pbox-gbps B          B_PBox (default 560: 10 x 56 Gbit/s, §3.3)\n"
	"  --worker-gbps B        B_Wkr (default 56, §4.1)\n"
	"  --formula V            000, 001 or both (default 000)\n"
	"  --rack-sum-ms MS       the calibration: the measured rack-local sum time of the model\n"
	"                         (one rack's job of the same N workers on one PBox, per\n"
	"                         iteration); adds the predicted iteration of the ring of PBoxes,\n"
	"                         MS + 2(R-1)/R M / B_Core, and of a flat ring allreduce of the RN\n"
	"                         workers, 2(RN-1)/(RN) M / B_Core, and their ratio\n"
	"  --model NAME|FILE, --model-bytes   the model whose exchange is timed: a network\n"
	"                         by name (phub-plan bandwidth --list-models) or a model\n"
	"                         file (--preset NAME: the old spelling)\n"
	"  --units si|paper       reading of a named network's MB (default si)\n"
	"  --json                 one JSON object\n\n"
	"Exit status: 0 done, 1 bad value (racks < 2, bandwidth <= 0), 2 usage.\n";

static void
usage(void)
{
	fputs(usage_text, stdout);
}

static json_t *
result_json(const char *formula, const struct phub_model_hier *h)
{
	return json_pack("{s:s, s:f, s:f, s:f, s:{s:f, s:f}, s:{s:b, s:b}}", "formula", formula,
			"flat_s", h->flat_s, "local_s", h->local_s, "bn_gbps", h->bn_gbps, "C",
			"sharded_s", h->c_sharded_s, "ring_s", h->c_ring_s, "hierarchical",
			"sharded", h->hier_sharded, "ring", h->hier_ring);
}

static void
result_text(const char *formula, const struct phub_model_hier *h)
{
	printf("§3.4 formula %s:\n", formula);
	printf("  flat cross-rack time (left side)   %12.6f s\n", h->flat_s);
	printf("  rack-local aggregation             %12.6f s\n", h->local_s);
	printf("  B_bn                               %12.3f Gbit/s\n", h->bn_gbps);
	printf("  C with sharded PSs                 %12.6f s -> %s\n", h->c_sharded_s,
			h->hier_sharded ? "hierarchical" : "flat");
	printf("  C with a ring                      %12.6f s -> %s\n", h->c_ring_s,
			h->hier_ring ? "hierarchical" : "flat");
}

enum { O_RACKS = PLAN_OPT_OWN, O_WPR, O_FORMULA };

/* What hierarchy's own options set. */
struct hierarchy_opts {
	struct phub_model_hier_params p;
	double rack_sum_ms;
	bool racks_given, wpr_given, v000, v001;
};

static const struct plan_field hierarchy_fields[] = {
	PLAN_REAL("core-gbps", struct hierarchy_opts, p.core_gbps),
	PLAN_REAL("pbox-gbps", struct hierarchy_opts, p.pbox_gbps),
	PLAN_REAL("worker-gbps", struct hierarchy_opts, p.worker_gbps),
	PLAN_REAL("rack-sum-ms", struct hierarchy_opts, rack_sum_ms),
};

/* --racks and --workers-per-rack are numbers too, but the command must know they were given. */
static int
hierarchy_option(void *own, int c, const char *arg)
{
	struct hierarchy_opts *o = own;
	int rc = 0;

	switch (c) {
	case O_RACKS:
		rc = plan_uint(cmd, "racks", arg, 1000000, &o->p.racks);
		o->racks_given = true;
		break;
	case O_WPR:
		rc = plan_uint(cmd, "workers-per-rack", arg, 1000000, &o->p.workers_per_rack);
		o->wpr_given = true;
		break;
	case O_FORMULA:
		if (strcmp(arg, "000") == 0) {
			o->v000 = true;
			o->v001 = false;
		} else if (strcmp(arg, "001") == 0) {
			o->v000 = false;
			o->v001 = true;
		} else if (strcmp(arg, "both") == 0) {
			o->v000 = o->v001 = true;
		} else {
			rc = plan_fail(cmd, PLAN_EXIT_USAGE,
					"--formula: '%s' is not 000, 001 or both", arg);
		}
		break;
	}
	return rc;
}

int
plan_hierarchy(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "racks", required_argument, NULL, O_RACKS },
		{ "workers-per-rack", required_argument, NULL, O_WPR },
		{ "formula", required_argument, NULL, O_FORMULA },
		PLAN_OPTIONS_MODEL,
		PLAN_OPTIONS_END,
	};
	struct hierarchy_opts args = {
		.p = { .pbox_gbps = 560, .worker_gbps = 56, .core_gbps = NAN, .model_bytes = 1e9 },
		.rack_sum_ms = NAN,
		.v000 = true,
	};
	struct phub_model_hier_params p;
	struct phub_model_hier h[2];
	struct phub_model_hier_pred pred;
	char err[PHUB_MODEL_ERR_LEN];
	struct plan_model_opts m;
	struct phub_model_job job;
	const char *name = "1 GB";
	bool json = false;
	int rc;

	rc = plan_parse(cmd, argc, argv, opts, hierarchy_fields, PLAN_DIM(hierarchy_fields),
			hierarchy_option, &args, &m, &json, usage);
	if (rc != PLAN_OPT_NEXT)
		return rc;
	p = args.p;
	if (!args.racks_given || !args.wpr_given || isnan(args.p.core_gbps))
		return plan_fail(cmd, PLAN_EXIT_USAGE,
				"--racks, --workers-per-rack and --core-gbps are required (see --help)");
	if (m.preset != NULL || m.file != NULL || !isnan(m.model_bytes)) {
		rc = plan_model_load(cmd, &m, false, &job, &name);
		if (rc != 0)
			return rc;
		p.model_bytes = phub_model_job_bytes(&job);
		phub_model_job_free(&job);
	}

	p.version = PHUB_MODEL_HIER_000;
	if (args.v000 && phub_model_hierarchy(&p, &h[0], err, sizeof(err)) != 0)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
	p.version = PHUB_MODEL_HIER_001;
	if (args.v001 && phub_model_hierarchy(&p, &h[1], err, sizeof(err)) != 0)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
	if (!isnan(args.rack_sum_ms) && phub_model_hier_predict(&p, args.rack_sum_ms / 1e3, &pred,
			err, sizeof(err)) != 0)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "--rack-sum-ms: %s", err);

	if (json) {
		const struct phub_model_hier *t = args.v000 ? &h[0] : &h[1];
		json_t *results = json_array();
		json_t *root;

		if (args.v000)
			json_array_append_new(results, result_json("000", &h[0]));
		if (args.v001)
			json_array_append_new(results, result_json("001", &h[1]));
		root = json_pack(
				"{s:s, s:f, s:i, s:i, s:f, s:f, s:f, s:o, s:{s:f, s:f, s:f}}",
				"model", name, "model_bytes", p.model_bytes, "racks", (int)p.racks,
				"workers_per_rack", (int)p.workers_per_rack, "pbox_gbps",
				p.pbox_gbps, "core_gbps", p.core_gbps, "worker_gbps", p.worker_gbps,
				"results", results, "traffic", "flat_cross_bytes",
				t->flat_cross_bytes, "hier_cross_bytes", t->hier_cross_bytes,
				"saved_fraction", t->saved_fraction);
		if (!isnan(args.rack_sum_ms))
			json_object_set_new(root, "predicted", json_pack(
					"{s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "rack_sum_s",
					pred.rack_sum_s, "ring_cross_s", pred.ring_cross_s, "ring_s",
					pred.ring_s, "ring_it_per_s", 1 / pred.ring_s, "flat_ring_s",
					pred.flat_ring_s, "flat_ring_it_per_s", 1 / pred.flat_ring_s,
					"ratio", pred.ratio));
		return plan_json_print(root);
	}
	printf("%u racks of %u workers, model %s (%.0f bytes); B_PBox %g, B_Core %g, B_Wkr %g Gbit/s\n",
			p.racks, p.workers_per_rack, name, p.model_bytes, p.pbox_gbps, p.core_gbps,
			p.worker_gbps);
	if (args.v000)
		result_text("000", &h[0]);
	if (args.v001)
		result_text("001", &h[1]);
	{
		const struct phub_model_hier *t = args.v000 ? &h[0] : &h[1];

		printf("bytes through one rack's uplink per iteration, each direction: flat %.0f,\n"
			"hierarchical %.0f: %.1f%% saved\n",
				t->flat_cross_bytes, t->hier_cross_bytes, 100 * t->saved_fraction);
	}
	if (!isnan(args.rack_sum_ms)) {
		printf("predicted iteration, calibrated by a rack-local sum of %.1f ms:\n",
				args.rack_sum_ms);
		printf("  ring of PBoxes: sum + ring %.3f s + %.3f s = %.3f s (%.3f it/s)\n",
				pred.rack_sum_s, pred.ring_cross_s, pred.ring_s, 1 / pred.ring_s);
		printf("  flat ring allreduce of %u workers: %.3f s (%.3f it/s)\n",
				p.racks * p.workers_per_rack, pred.flat_ring_s, 1 / pred.flat_ring_s);
		printf("  ring / flat ring, iterations/s: %.2f\n", pred.ratio);
	}
	return 0;
}
