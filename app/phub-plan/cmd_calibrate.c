/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-plan calibrate: fits the model's constants to phub-bench --json runs. */

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan.h"

static const char *const cmd = "calibrate";

static const char usage_text[] =
	"usage: phub-plan calibrate [--json] RUN.json...\n\n"
	"Fits  exchange_s = rtt_s + bits_per_port / achievable rate + segments_per_lcore *\n"
	"per_packet_s  to phub-bench --json runs (one object, or an array of them, per file) by\n"
	"non-negative least squares, and prints the constants and every run's residual. The\n"
	"--json output is what phub-plan optimize --calibration reads.\n\n"
	"Each run needs workers, model_bytes, iterations, verified (true), exchanges_per_s,\n"
	"goodput_gbps, p50_ms, p99_ms, retransmits; calibration uses workers, model_bytes,\n"
	"exchanges_per_s and, when present, ports, lcores, segment_bytes (or mtu), chunk_bytes,\n"
	"packets_per_exchange. Runs must vary segment size, ports or lcores, not only workers\n"
	"and model size, for the per-packet cost to be told apart from the bandwidth.\n\n"
	"Exit status: 0 done, 1 bad run (unverified, missing field, too few runs), 2 usage.\n";

static void
usage(void)
{
	fputs(usage_text, stdout);
}

int
plan_calibrate(int argc, char **argv)
{
	static const struct option opts[] = {
		PLAN_OPTIONS_END,
	};
	struct phub_model_run *runs = NULL;
	char err[PHUB_MODEL_ERR_LEN];
	struct phub_model_fit *fit;
	bool json = false;
	size_t n = 0;
	int c, rc = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		rc = plan_common_option(cmd, c, argv, NULL, &json, usage);
		if (rc != PLAN_OPT_NEXT)
			return rc;
	}
	rc = 0;
	if (optind >= argc)
		return plan_fail(cmd, PLAN_EXIT_USAGE, "give one or more phub-bench JSON files");
	fit = calloc(1, sizeof(*fit));
	if (fit == NULL)
		return plan_fail(cmd, PLAN_EXIT_VALUE, "out of memory");
	for (int i = optind; i < argc; i++) {
		if (phub_model_runs_load(argv[i], &runs, &n, err, sizeof(err)) != 0) {
			rc = plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
			goto out;
		}
	}
	if (phub_model_calibrate(runs, n, fit, err, sizeof(err)) != 0) {
		rc = plan_fail(cmd, PLAN_EXIT_VALUE, "%s", err);
		goto out;
	}

	if (json) {
		json_t *arr = json_array();

		for (size_t i = 0; i < n; i++) {
			double bits, pkts, t;

			phub_model_run_terms(&runs[i], &bits, &pkts, &t, NULL, 0);
			json_array_append_new(arr, json_pack("{s:s, s:f, s:f, s:f, s:f, s:i}",
					"source", runs[i].source, "exchange_s", t,
					"fitted_s", t - fit->residual_s[i],
					"residual_s", fit->residual_s[i],
					"residual_rel", fit->residual_s[i] / t,
					"retransmits", (int)runs[i].retransmits));
		}
		rc = plan_json_print(json_pack("{s:i, s:f, s:o, s:f, s:b, s:b, s:b, s:f, s:f, s:o}",
				"points", (int)fit->points, "achievable_gbps", fit->achievable_gbps,
				"per_packet_s",
				fit->per_packet_fitted ? json_real(fit->per_packet_s) : json_null(),
				"rtt_s", fit->rtt_s, "rtt_fitted", fit->rtt_fitted,
				"per_packet_fitted", fit->per_packet_fitted, "identifiable",
				fit->identifiable, "residual_rms_s", fit->residual_rms_s,
				"residual_rel_rms", fit->residual_rel_rms, "runs", arr));
		goto out;
	}
	printf("%zu runs fitted to  exchange_s = rtt + bits/port / rate + segments/lcore * cost:\n",
			n);
	printf("  achievable rate per PBox port  %10.3f Gbit/s\n", fit->achievable_gbps);
	if (fit->per_packet_fitted)
		printf("  per-packet cost per lcore      %10.1f ns\n", fit->per_packet_s * 1e9);
	else
		printf("  per-packet cost per lcore      %10s (%s)\n", "-", fit->identifiable ?
				"fitted as 0: negative otherwise" :
				"not identifiable: vary segment size, ports or lcores between runs");
	printf("  rtt (fixed per exchange)       %10.1f us%s\n", fit->rtt_s * 1e6,
			fit->rtt_fitted ? "" : " (constrained to 0)");
	printf("  residual RMS                   %10.1f us (%.2f%% of the exchange time)\n",
			fit->residual_rms_s * 1e6, 100 * fit->residual_rel_rms);
	for (size_t i = 0; i < n; i++) {
		double bits, pkts, t;

		phub_model_run_terms(&runs[i], &bits, &pkts, &t, NULL, 0);
		printf("  %-44s %10.1f us observed %+8.1f us residual%s\n", runs[i].source, t * 1e6,
				fit->residual_s[i] * 1e6,
				runs[i].retransmits > 0 ? " (retransmits)" : "");
	}
out:
	free(runs);
	free(fit);
	return rc;
}
