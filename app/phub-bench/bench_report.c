/* SPDX-License-Identifier: BSD-3-Clause */
/* The figures of a run: quantiles, per-worker and total rates, and the JSON report of --json. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phub_bench.h"

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a;
	double y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double
phub_bench_quantile(double *values, size_t n, double q)
{
	size_t rank;

	if (n == 0)
		return 0;
	qsort(values, n, sizeof(*values), cmp_double);
	/* Nearest rank: the smallest value with at least q * n values at or below it. */
	rank = (size_t)ceil(q * (double)n);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return values[rank - 1];
}

bool
phub_bench_run_exact(const struct phub_bench_run *run)
{
	/* Random gradients summed in arrival order round differently from the reference. */
	return phub_bench_verify_exact(run->optimizer.type) &&
		!phub_bench_order_dependent(run->random_gradients, run->deterministic,
			run->racks != NULL ? run->racks->n : 0);
}

uint64_t
phub_bench_exchange_bytes(const struct phub_bench_layout *layout, enum phub_dtype dtype)
{
	/* The gradient goes up, the model of the same size comes down. */
	return 2 * layout->total_elems * phub_dtype_size(dtype);
}

double
phub_bench_worker_rate(const struct phub_bench_worker_result *r)
{
	return r->timed > 0 && r->timed_s > 0 ? r->timed / r->timed_s : 0;
}

double
phub_bench_worker_gbps(const struct phub_bench_worker_result *r, uint64_t exchange_bytes)
{
	return phub_bench_worker_rate(r) * (double)exchange_bytes * 8 / 1e9;
}

void
phub_bench_summarize(const struct phub_bench_run *run,
		const struct phub_bench_worker_result *results, const double *const *times,
		unsigned int n, unsigned int expected, struct phub_bench_summary *s)
{
	uint64_t xbytes = phub_bench_exchange_bytes(run->layout, run->dtype);
	double slowest_s = 0, gb = 0;
	uint32_t slowest_timed = 0;
	size_t n_times = 0;
	double *all;
	unsigned int i;
	uint32_t j;

	memset(s, 0, sizeof(*s));
	s->workers = n;
	s->model_bytes = run->layout->total_elems * phub_dtype_size(run->dtype);
	s->verified = n == expected && n > 0;
	s->bitwise = s->verified;
	for (i = 0; i < n; i++) {
		const struct phub_bench_worker_result *r = &results[i];

		if (r->status != 0)
			s->failed++;
		s->verified = s->verified && r->status == 0 && r->verified;
		s->bitwise = s->bitwise && r->status == 0 && r->bitwise;
		s->exchanges_per_s += phub_bench_worker_rate(r);
		s->goodput_gbps += phub_bench_worker_gbps(r, xbytes);
		if (r->timed_s > 0)
			s->wire_gbps += r->wire_bytes * 8 / r->timed_s / 1e9;
		s->cpu_s += r->cpu_s;
		gb += (double)r->timed * (double)xbytes / 1e9;
		s->retransmits += r->retransmits;
		s->pulls += r->pulls;
		s->reconnects += r->reconnects;
		s->rollbacks += r->rollbacks;
		if (r->max_abs_error > s->max_abs_error)
			s->max_abs_error = r->max_abs_error;
		if (r->timed_s > slowest_s) {
			slowest_s = r->timed_s;
			slowest_timed = r->timed;
		}
		if (times != NULL && times[i] != NULL)
			n_times += r->timed;
	}
	if (slowest_s > 0)
		s->job_iterations_per_s = slowest_timed / slowest_s;
	if (gb > 0)
		s->cpu_s_per_gb = s->cpu_s / gb;
	/* Pooled quantiles: every timed exchange of every worker counts once. */
	all = n_times > 0 ? malloc(n_times * sizeof(*all)) : NULL;
	if (all != NULL) {
		n_times = 0;
		for (i = 0; i < n; i++)
			if (times[i] != NULL)
				for (j = 0; j < results[i].timed; j++)
					all[n_times++] = times[i][j];
		s->p50_ms = phub_bench_quantile(all, n_times, 0.50);
		s->p99_ms = phub_bench_quantile(all, n_times, 0.99);
		free(all);
	}
	if (times == NULL || n == 0)
		return;
	for (j = 0;; j++) {
		double job = 0;

		for (i = 0; i < n; i++) {
			if (times[i] == NULL || j >= results[i].timed)
				return;
			if (times[i][j] > job)
				job = times[i][j];
		}
		if (j == 0 || job < s->best_ms)
			s->best_ms = job;
	}
}

/* json_object_set_new() that remembers a failure, so that the builder checks once at the end. */
static void
set(json_t *obj, const char *key, json_t *value, bool *ok)
{
	if (value == NULL || json_object_set_new(obj, key, value) != 0)
		*ok = false;
}

/* A number that JSON can carry: infinities and NaN (a NaN in the model) become null. */
static json_t *
real(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

/* A JSON string of text that may hold any bytes (a PBox's refusal): non-ASCII becomes '?'. */
static json_t *
ascii_string(const char *text)
{
	char buf[512];
	size_t i;

	for (i = 0; text[i] != '\0' && i < sizeof(buf) - 1; i++)
		buf[i] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
	buf[i] = '\0';
	return json_string(buf);
}

/* A float parameter as written on the command line (0.01, not 0.009999999776). */
static json_t *
real_f(float x)
{
	char buf[32];
	int digits;

	/* The shortest decimal that reads back as the same float; 9 digits always do. */
	for (digits = 6; digits <= 9; digits++) {
		snprintf(buf, sizeof(buf), "%.*g", digits, (double)x);
		if (strtof(buf, NULL) == x)
			break;
	}
	return real(strtod(buf, NULL));
}

static json_t *
worker_json(const struct phub_bench_worker_result *r, uint64_t xbytes, bool *ok)
{
	json_t *w = json_object();

	if (w == NULL) {
		*ok = false;
		return NULL;
	}
	set(w, "rank", json_integer(r->rank), ok);
	set(w, "ok", json_boolean(r->status == 0), ok);
	if (r->status != 0)
		set(w, "error", ascii_string(r->error), ok);
	set(w, "iterations", json_integer(r->iterations), ok);
	set(w, "timed_iterations", json_integer(r->timed), ok);
	set(w, "timed_s", real(r->timed_s), ok);
	set(w, "exchanges_per_s", real(phub_bench_worker_rate(r)), ok);
	set(w, "goodput_gbps", real(phub_bench_worker_gbps(r, xbytes)), ok);
	set(w, "cpu_s", real(r->cpu_s), ok);
	set(w, "timed_from_monotonic_s", real(r->timed_from), ok);
	set(w, "timed_to_monotonic_s", real(r->timed_to), ok);
	set(w, "wire_gbps", real(r->timed_s > 0 ? r->wire_bytes * 8 / r->timed_s / 1e9 : 0), ok);
	set(w, "p50_ms", real(r->p50_ms), ok);
	set(w, "p99_ms", real(r->p99_ms), ok);
	set(w, "connect_s", real(r->connect_s), ok);
	set(w, "verify_s", real(r->verify_s), ok);
	set(w, "verify_from_monotonic_s", real(r->verify_from), ok);
	set(w, "retransmits", json_integer((json_int_t)r->retransmits), ok);
	set(w, "pulls", json_integer((json_int_t)r->pulls), ok);
	set(w, "replays", json_integer((json_int_t)r->replays), ok);
	set(w, "tx_errors", json_integer((json_int_t)r->tx_errors), ok);
	set(w, "tx_datagrams", json_integer((json_int_t)r->tx_datagrams), ok);
	set(w, "tx_gso_sends", json_integer((json_int_t)r->tx_gso_sends), ok);
	set(w, "tx_gso_refused", json_integer((json_int_t)r->tx_gso_refused), ok);
	set(w, "rx_datagrams", json_integer((json_int_t)r->rx_datagrams), ok);
	set(w, "rx_gro_batches", json_integer((json_int_t)r->rx_gro_batches), ok);
	set(w, "reconnects", json_integer(r->reconnects), ok);
	set(w, "rollbacks", json_integer(r->rollbacks), ok);
	set(w, "resumed_at", json_integer(r->resumed_at), ok);
	set(w, "world_end", json_integer(r->world_end), ok);
	set(w, "removed", json_integer(r->removed), ok);
	set(w, "verified", json_boolean(r->status == 0 && r->verified), ok);
	set(w, "bitwise", json_boolean(r->status == 0 && r->bitwise), ok);
	set(w, "max_abs_error", real(r->max_abs_error), ok);
	set(w, "mismatches", json_integer((json_int_t)r->mismatches), ok);
	if (r->digest != 0) {
		char hex[24];

		snprintf(hex, sizeof(hex), "%016" PRIx64, r->digest);
		set(w, "model_digest", json_string(hex), ok);
	}
	return w;
}

json_t *
phub_bench_report_json(const struct phub_bench_run *run, const struct phub_bench_summary *s,
		const struct phub_bench_worker_result *results, unsigned int n, const char *error)
{
	uint64_t xbytes = phub_bench_exchange_bytes(run->layout, run->dtype);
	double rtol, atol;
	json_t *root;
	json_t *per;
	json_t *opt;
	bool ok = true;
	unsigned int i;

	root = json_object();
	per = json_array();
	opt = json_object();
	if (root == NULL || per == NULL || opt == NULL)
		goto nomem;
	set(root, "workers", json_integer(run->world_size), &ok);
	set(root, "workers_reported", json_integer(s->workers), &ok);
	set(root, "model", ascii_string(run->layout->model), &ok);
	set(root, "keys", json_integer(run->layout->n_keys), &ok);
	set(root, "params", json_integer((json_int_t)run->layout->total_elems), &ok);
	set(root, "dtype", json_string(phub_dtype_name(run->dtype)), &ok);
	set(root, "model_bytes", json_integer((json_int_t)s->model_bytes), &ok);
	set(root, "exchange_bytes", json_integer((json_int_t)xbytes), &ok);
	set(root, "iterations", json_integer(run->iterations), &ok);
	set(root, "warmup", json_integer(run->warmup), &ok);
	set(root, "optimizer", json_string(phub_opt_type_name(run->optimizer.type)), &ok);
	set(opt, "lr", real_f(run->optimizer.lr), &ok);
	set(opt, "momentum", real_f(run->optimizer.momentum), &ok);
	set(opt, "weight_decay", real_f(run->optimizer.weight_decay), &ok);
	set(opt, "beta1", real_f(run->optimizer.beta1), &ok);
	set(opt, "beta2", real_f(run->optimizer.beta2), &ok);
	set(opt, "eps", real_f(run->optimizer.eps), &ok);
	set(root, "optimizer_params", opt, &ok);
	opt = NULL;
	if (run->server != NULL)
		set(root, "server", ascii_string(run->server), &ok);
	if (run->racks != NULL && run->racks->n > 0) {
		json_t *racks = json_array();

		for (i = 0; racks != NULL && i < run->racks->n; i++) {
			json_t *r = json_object();

			set(r, "server", ascii_string(run->racks->rack[i].server), &ok);
			set(r, "ranks", json_integer(run->racks->rack[i].ranks), &ok);
			set(r, "first_rank", json_integer(run->racks->rack[i].first_rank), &ok);
			if (r == NULL || json_array_append_new(racks, r) != 0)
				ok = false;
		}
		set(root, "racks", racks, &ok);
	}
	set(root, "port", json_integer(run->port), &ok);
	if (run->job != NULL)
		set(root, "job", ascii_string(run->job), &ok);
	set(root, "verified", json_boolean(s->verified), &ok);
	set(root, "bitwise", json_boolean(s->bitwise), &ok);
	set(root, "verify_mode", json_string(phub_bench_run_exact(run) ? "exact" : "tolerance"),
		&ok);
	phub_bench_verify_tolerance(run->dtype, &rtol, &atol);
	set(root, "rtol", json_real(phub_bench_run_exact(run) ? 0 : rtol), &ok);
	set(root, "atol", json_real(phub_bench_run_exact(run) ? 0 : atol), &ok);
	set(root, "gradients", json_string(run->random_gradients ? "random" : "exact"), &ok);
	set(root, "deterministic", json_boolean(run->deterministic), &ok);
	set(root, "max_abs_error", real(s->max_abs_error), &ok);
	set(root, "exchanges_per_s", real(s->exchanges_per_s), &ok);
	set(root, "job_iterations_per_s", real(s->job_iterations_per_s), &ok);
	set(root, "goodput_gbps", real(s->goodput_gbps), &ok);
	set(root, "wire_gbps", real(s->wire_gbps), &ok);
	set(root, "cpu_s", real(s->cpu_s), &ok);
	set(root, "cpu_s_per_gb", real(s->cpu_s_per_gb), &ok);
	set(root, "p50_ms", real(s->p50_ms), &ok);
	set(root, "p99_ms", real(s->p99_ms), &ok);
	set(root, "best_ms", real(s->best_ms), &ok);
	set(root, "retransmits", json_integer((json_int_t)s->retransmits), &ok);
	set(root, "pulls", json_integer((json_int_t)s->pulls), &ok);
	set(root, "reconnects", json_integer((json_int_t)s->reconnects), &ok);
	set(root, "rollbacks", json_integer((json_int_t)s->rollbacks), &ok);
	set(root, "failed_workers", json_integer(s->failed), &ok);
	if (error != NULL)
		set(root, "error", ascii_string(error), &ok);
	for (i = 0; i < n; i++) {
		json_t *w = worker_json(&results[i], xbytes, &ok);

		if (w == NULL || json_array_append_new(per, w) != 0)
			ok = false;
	}
	set(root, "per_worker", per, &ok);
	per = NULL;
	/* One digest when every worker reported the same model (its bits, run to run). */
	for (i = 0; i < n && results[i].digest != 0 && results[i].digest == results[0].digest; i++)
		;
	if (n > 0 && i == n) {
		char hex[24];

		snprintf(hex, sizeof(hex), "%016" PRIx64, results[0].digest);
		set(root, "model_digest", json_string(hex), &ok);
	}
	if (!ok)
		goto nomem;
	return root;
nomem:
	json_decref(opt);
	json_decref(per);
	json_decref(root);
	errno = ENOMEM;
	return NULL;
}
