/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-plan optimize: the best PHub deployments for a job within a machine budget. */

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static const char *const cmd = "optimize";

#define TOP_MAX 50

static const char usage_text[] =
	"usage: phub-plan optimize (--model NAME|FILE | --model-bytes B --compute-s S)\n"
	"                         [--budget N] [search options] [hardware options]\n"
	"                         [--top K] [--json]\n\n"
	"Searches PBoxes per rack, racks and workers (so workers per rack), flat or hierarchical\n"
	"reduction, interfaces per PBox and chunk size for the most samples/s within a budget of\n"
	"machines (workers + PBoxes), after Yan et al. (KDD 2015) §5: polynomial enumeration of\n"
	"the resources, the PBox's own greedy chunk placement instead of all placements, and the\n"
	"balanced split of workers over racks instead of all splits (docs/planning.md).\n\n"
	"search:\n"
	"  --budget N            machines at most, workers + PBoxes (default 64)\n"
	"  --rack-max N          machines one rack (ToR) holds (default 32)\n"
	"  --pbox-max N          PBoxes per rack at most (default 2)\n"
	"  --interfaces-max N    interfaces per PBox at most (default 10)\n"
	"  --chunks LIST         chunk sizes, e.g. 16K,32K,64K (default 4K..4M, powers of 2)\n"
	"  --top K               configurations to print (default 5)\n"
	"hardware (default in brackets):\n"
	"  --worker-gbps B       worker NIC, achievable, each direction [25]\n"
	"  --port-gbps B         PBox interface, achievable, each direction [25]\n"
	"  --core-gbps B         one rack's uplink to the core, each direction [100]\n"
	"  --pbox-mem-gbps B     PBox memory ceiling, in + out [640, §4.7's 80 GB/s]\n"
	"  --per-packet-ns T     PBox lcore time per received segment [200]\n"
	"  --per-chunk-ns T      PBox lcore time per chunk and worker, beyond segments [1000]\n"
	"  --rtt-us T            fixed time of one round trip [20]\n"
	"  --lcores N            PBox lcores that aggregate [16]\n"
	"  --segment-bytes N     payload per datagram [1400]\n"
	"  --calibration FILE    constants from phub-plan calibrate --json (applied before the\n"
	"                        options above)\n"
	"model:\n"
	"  --batch N             samples per worker batch (named networks: Table 3's)\n"
	"  --overlap F           fraction of compute that communication can overlap [0.667]\n"
	"  --units si|paper      reading of a named network's MB (default si)\n\n"
	"Exit status: 0 done, 1 bad value (budget too small, bandwidth <= 0), 2 usage.\n";

static void
usage(void)
{
	fputs(usage_text, stdout);
}

static int
parse_chunks(const char *s, unsigned int *list, size_t *n)
{
	char buf[512], *tok, *save = NULL;
	double v;
	int rc;

	snprintf(buf, sizeof(buf), "%s", s);
	*n = 0;
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		if (*n == 32)
			return plan_fail(cmd, PLAN_EXIT_VALUE, "--chunks: at most 32 sizes");
		rc = plan_bytes(cmd, "chunks", tok, &v);
		if (rc != 0)
			return rc;
		if (v < 64 || v > 1073741824.0)
			return plan_fail(cmd, PLAN_EXIT_VALUE,
					"--chunks: sizes must be from 64 bytes to 1G (got %s)",
					tok);
		list[(*n)++] = (unsigned int)v;
	}
	if (*n == 0)
		return plan_fail(cmd, PLAN_EXIT_USAGE, "--chunks: give a list such as 16K,32K");
	return 0;
}

static json_t *
estimate_json(const struct phub_model_estimate *e)
{
	json_t *o = json_object(), *res = json_object();

	for (int i = 0; i < PHUB_MODEL_BN_COUNT; i++)
		json_object_set_new(res, phub_model_bottleneck_name(i),
				json_real(e->resource_s[i]));
	json_object_set_new(o, "racks", json_integer(e->racks));
	json_object_set_new(o, "workers", json_integer(e->workers));
	json_object_set_new(o, "workers_per_rack", json_integer(e->rack_workers_max));
	json_object_set_new(o, "pbox_per_rack", json_integer(e->pbox_per_rack));
	json_object_set_new(o, "pboxes", json_integer(e->racks * e->pbox_per_rack));
	json_object_set_new(o, "interfaces", json_integer(e->interfaces));
	json_object_set_new(o, "chunk_bytes", json_integer(e->chunk_bytes));
	json_object_set_new(o, "reduction", json_string(phub_model_reduction_name(e->reduction)));
	json_object_set_new(o, "machines", json_integer(e->machines));
	json_object_set_new(o, "iteration_s", json_real(e->iteration_s));
	json_object_set_new(o, "exchange_s", json_real(e->exchange_s));
	json_object_set_new(o, "tail_s", json_real(e->tail_s));
	json_object_set_new(o, "samples_per_s", json_real(e->samples_per_s));
	json_object_set_new(o, "bottleneck",
			json_string(phub_model_bottleneck_name(e->bottleneck)));
	json_object_set_new(o, "resource_s", res);
	return o;
}

static json_t *
hw_json(const struct phub_model_hw *hw)
{
	json_t *o = json_object();

	json_object_set_new(o, "worker_gbps", json_real(hw->worker_gbps));
	json_object_set_new(o, "port_gbps", json_real(hw->port_gbps));
	json_object_set_new(o, "core_gbps", json_real(hw->core_gbps));
	json_object_set_new(o, "pbox_mem_gbps", json_real(hw->pbox_mem_gbps));
	json_object_set_new(o, "per_packet_s", json_real(hw->per_packet_s));
	json_object_set_new(o, "per_chunk_s", json_real(hw->per_chunk_s));
	json_object_set_new(o, "rtt_s", json_real(hw->rtt_s));
	json_object_set_new(o, "lcores", json_integer(hw->pbox_lcores));
	json_object_set_new(o, "segment_bytes", json_integer(hw->segment_bytes));
	return o;
}

enum { O_CHUNKS = PLAN_OPT_OWN };

/* What optimize's own options set: the hardware ones (< 0 or 0: not given) are applied after
 * the calibration file, whatever their order. */
struct optimize_opts {
	struct phub_model_search_params s;
	double worker, port, core, mem, pkt_ns, chunk_ns, rtt_us, overlap;
	unsigned int lcores, seg, batch, top, chunks[32];
	const char *calib;
};

static const struct plan_field optimize_fields[] = {
	PLAN_UINT("budget", struct optimize_opts, s.machine_budget, 1000000),
	PLAN_UINT("rack-max", struct optimize_opts, s.rack_machines_max, 1000000),
	PLAN_UINT("pbox-max", struct optimize_opts, s.pbox_per_rack_max, 1000000),
	PLAN_UINT("interfaces-max", struct optimize_opts, s.interfaces_max, 1000000),
	PLAN_UINT_MIN("top", struct optimize_opts, top, TOP_MAX, 1,
		      "must be from 1 to " PLAN_STR(TOP_MAX)),
	PLAN_REAL("worker-gbps", struct optimize_opts, worker),
	PLAN_REAL("port-gbps", struct optimize_opts, port),
	PLAN_REAL("core-gbps", struct optimize_opts, core),
	PLAN_REAL("pbox-mem-gbps", struct optimize_opts, mem),
	PLAN_REAL_IN("per-packet-ns", struct optimize_opts, pkt_ns, 0, INFINITY, false,
		     "must not be negative"),
	PLAN_REAL_IN("per-chunk-ns", struct optimize_opts, chunk_ns, 0, INFINITY, false,
		     "must not be negative"),
	PLAN_REAL_IN("rtt-us", struct optimize_opts, rtt_us, 0, INFINITY, false,
		     "must not be negative"),
	PLAN_UINT_MIN("lcores", struct optimize_opts, lcores, 1024, 1, "must be at least 1"),
	PLAN_UINT_MIN("segment-bytes", struct optimize_opts, seg, 65536, 64,
		      "must be at least 64"),
	PLAN_UINT_MIN("batch", struct optimize_opts, batch, 1000000, 1, "must be at least 1"),
	PLAN_REAL_IN("overlap", struct optimize_opts, overlap, 0, 1, false,
		     "must be from 0 to 1"),
	PLAN_TEXT("calibration", struct optimize_opts, calib),
};

static int
optimize_option(void *own, int c, const char *arg)
{
	struct optimize_opts *o = own;

	(void)c;	/* --chunks, its only one */
	o->s.chunk_bytes = o->chunks;
	return parse_chunks(arg, o->chunks, &o->s.chunk_count);
}

int
plan_optimize(int argc, char **argv)
{
	static const struct option opts[] = {
		PLAN_OPTIONS_MODEL,
		PLAN_OPTIONS_COMPUTE,
		{ "chunks", required_argument, NULL, O_CHUNKS },
		PLAN_OPTIONS_END,
	};
	struct optimize_opts args = {
		.worker = -1, .port = -1, .core = -1, .mem = -1, .pkt_ns = -1, .chunk_ns = -1,
		.rtt_us = -1, .overlap = -1, .top = 5,
	};
	struct phub_model_estimate best[TOP_MAX];
	char err[PHUB_MODEL_ERR_LEN];
	struct plan_model_opts m;
	struct phub_model_job job = { 0 };
	struct phub_model_hw hw;
	const char *name = NULL;
	bool json = false;
	size_t n = 0;
	int rc;

	phub_model_hw_default(&hw);
	phub_model_search_default(&args.s);
	rc = plan_parse(cmd, argc, argv, opts, optimize_fields, PLAN_DIM(optimize_fields),
			optimize_option, &args, &m, &json, usage);
	if (rc != PLAN_OPT_NEXT)
		return rc;
	if (args.calib != NULL &&
			phub_model_hw_load_calibration(args.calib, &hw, err, sizeof(err)) != 0)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
	if (args.worker >= 0)
		hw.worker_gbps = args.worker;
	if (args.port >= 0)
		hw.port_gbps = args.port;
	if (args.core >= 0)
		hw.core_gbps = args.core;
	if (args.mem >= 0)
		hw.pbox_mem_gbps = args.mem;
	if (args.pkt_ns >= 0)
		hw.per_packet_s = args.pkt_ns * 1e-9;
	if (args.chunk_ns >= 0)
		hw.per_chunk_s = args.chunk_ns * 1e-9;
	if (args.rtt_us >= 0)
		hw.rtt_s = args.rtt_us * 1e-6;
	if (args.lcores != 0)
		hw.pbox_lcores = args.lcores;
	if (args.seg != 0)
		hw.segment_bytes = args.seg;

	rc = plan_model_load(cmd, &m, true, &job, &name);
	if (rc != 0)
		return rc;
	if (args.batch != 0)
		job.batch = args.batch;
	if (args.overlap >= 0)
		job.overlap = args.overlap;
	n = args.top;
	if (phub_model_optimize(&job, &hw, &args.s, best, &n, err, sizeof(err)) != 0) {
		phub_model_job_free(&job);
		return plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
	}

	if (json) {
		json_t *arr = json_array(), *o = json_object();

		for (size_t i = 0; i < n; i++)
			json_array_append_new(arr, estimate_json(&best[i]));
		json_object_set_new(o, "model", json_string(name));
		json_object_set_new(o, "model_bytes", json_real(phub_model_job_bytes(&job)));
		json_object_set_new(o, "layers", json_integer(job.layers));
		json_object_set_new(o, "compute_s", json_real(job.compute_s));
		json_object_set_new(o, "batch", json_integer(job.batch));
		json_object_set_new(o, "hardware", hw_json(&hw));
		json_object_set_new(o, "search", json_pack("{s:i, s:i, s:i, s:i}",
				"budget", (int)args.s.machine_budget,
				"rack_max", (int)args.s.rack_machines_max,
				"pbox_max", (int)args.s.pbox_per_rack_max,
				"interfaces_max", (int)args.s.interfaces_max));
		json_object_set_new(o, "configs", arr);
		rc = plan_json_print(o);
		phub_model_job_free(&job);
		return rc;
	}
	printf("model %s: %.0f bytes in %zu layer(s), %.4g s compute, batch %u; budget %u machines\n",
			name, phub_model_job_bytes(&job), job.layers, job.compute_s, job.batch,
			args.s.machine_budget);
	printf("%-3s %5s %7s %5s %5s %5s %8s %-12s %9s %11s %-11s\n", "#", "racks", "workers",
			"/rack", "pbox", "ifs", "chunk", "reduction", "iter_ms", "samples/s",
			"bottleneck");
	for (size_t i = 0; i < n; i++) {
		const struct phub_model_estimate *e = &best[i];

		printf("%-3zu %5u %7u %5u %5u %5u %7uK %-12s %9.3f %11.1f %-11s\n", i + 1, e->racks,
				e->workers, e->rack_workers_max, e->racks * e->pbox_per_rack,
				e->interfaces, e->chunk_bytes / 1024,
				phub_model_reduction_name(e->reduction), e->iteration_s * 1e3,
				e->samples_per_s, phub_model_bottleneck_name(e->bottleneck));
	}
	phub_model_job_free(&job);
	return 0;
}
