/* SPDX-License-Identifier: BSD-3-Clause */
/* Calibration: phub-bench runs (JSON) to the model's constants by least squares. */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "phub_model.h"
#include "model_priv.h"

/* Without mtu or segment_bytes a run is assumed to use a 1500-byte MTU. */
#define DEFAULT_SEGMENT_BYTES 1400
/* IPv4 + UDP + the chunk header, at most: what an MTU leaves for payload. */
#define SEGMENT_OVERHEAD_BYTES 64

/* A field the run does not give: an error when it is required, else nothing to read. */
static int
field_absent(const char *src, const char *key, bool required, char *err, size_t errlen)
{
	if (!required)
		return 0;
	return phub_err(err, errlen, EINVAL,
			"%s: missing field \"%s\" (phub-bench --json prints it)", src, key);
}

static int
get_number(json_t *obj, const char *src, const char *key, bool required, double min,
		double *out, bool *present, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	if (present != NULL)
		*present = v != NULL && !json_is_null(v);
	if (v == NULL || json_is_null(v))
		return field_absent(src, key, required, err, errlen);
	if (!json_is_number(v) || !isfinite(json_number_value(v)))
		return phub_err(err, errlen, EINVAL, "%s: %s: must be a number", src, key);
	if (json_number_value(v) < min)
		return phub_err(err, errlen, EINVAL, "%s: %s: must be at least %g (got %g)", src,
				key, min, json_number_value(v));
	*out = json_number_value(v);
	return 0;
}

static int
get_uint(json_t *obj, const char *src, const char *key, bool required, unsigned long min,
		unsigned long *out, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	if (v == NULL || json_is_null(v))
		return field_absent(src, key, required, err, errlen);
	if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min ||
			json_integer_value(v) > (json_int_t)0xffffffff)
		return phub_err(err, errlen, EINVAL, "%s: %s: must be an integer of at least %lu",
				src, key, min);
	*out = (unsigned long)json_integer_value(v);
	return 0;
}

/* An optional field of get_uint() into an unsigned int: 0 when the run does not give it. */
static int
get_opt_uint(json_t *obj, const char *src, const char *key, unsigned long min,
		unsigned int *out, char *err, size_t errlen)
{
	unsigned long u = 0;
	int rc = get_uint(obj, src, key, false, min, &u, err, errlen);

	*out = (unsigned int)u;
	return rc;
}

static int
parse_run(json_t *o, const char *src, struct phub_model_run *r, char *err, size_t errlen)
{
	unsigned long u = 0;
	json_t *ver;
	int rc;

	memset(r, 0, sizeof(*r));
	snprintf(r->source, sizeof(r->source), "%s", src);
	if (!json_is_object(o))
		return phub_err(err, errlen, EINVAL, "%s: a run must be a JSON object", src);

	/* Checked first: an unverified run's timing is not evidence of anything. */
	ver = json_object_get(o, "verified");
	if (ver == NULL)
		return phub_err(err, errlen, EINVAL,
				"%s: missing field \"verified\" (phub-bench --json prints it)",
				src);
	if (!json_is_boolean(ver))
		return phub_err(err, errlen, EINVAL, "%s: verified: must be true or false", src);
	if (!json_is_true(ver))
		return phub_err(err, errlen, EINVAL,
				"%s: run is not verified (\"verified\": false): its sums were wrong, so its timing cannot calibrate anything; rerun phub-bench",
				src);

	rc = get_uint(o, src, "workers", true, 1, &u, err, errlen);
	if (rc != 0)
		return rc;
	r->workers = (unsigned int)u;
	rc = get_number(o, src, "model_bytes", true, 1, &r->model_bytes, NULL, err, errlen);
	if (rc == 0)
		rc = get_uint(o, src, "iterations", true, 1, &r->iterations, err, errlen);
	if (rc == 0)
		rc = get_number(o, src, "exchanges_per_s", true, 0, &r->exchanges_per_s, NULL,
				err, errlen);
	if (rc == 0 && !(r->exchanges_per_s > 0))
		rc = phub_err(err, errlen, EINVAL, "%s: exchanges_per_s: must be positive", src);
	if (rc == 0)
		rc = get_number(o, src, "goodput_gbps", true, 0, &r->goodput_gbps, NULL, err,
				errlen);
	if (rc == 0)
		rc = get_number(o, src, "p50_ms", true, 0, &r->p50_ms, NULL, err, errlen);
	if (rc == 0)
		rc = get_number(o, src, "p99_ms", true, 0, &r->p99_ms, NULL, err, errlen);
	if (rc == 0)
		rc = get_uint(o, src, "retransmits", true, 0, &r->retransmits, err, errlen);
	if (rc != 0)
		return rc;

	/* Optional fields: the ones the model can use. Others are ignored, so that phub-bench
	 * can grow without breaking calibration. */
	rc = get_opt_uint(o, src, "mtu", 128, &r->mtu, err, errlen);
	if (rc == 0)
		rc = get_opt_uint(o, src, "segment_bytes", 64, &r->segment_bytes, err, errlen);
	if (rc == 0)
		rc = get_opt_uint(o, src, "chunk_bytes", 64, &r->chunk_bytes, err, errlen);
	if (rc == 0)
		rc = get_opt_uint(o, src, "ports", 1, &r->ports, err, errlen);
	if (rc == 0)
		rc = get_opt_uint(o, src, "lcores", 1, &r->lcores, err, errlen);
	if (rc == 0)
		rc = get_number(o, src, "packets_per_exchange", false, 1, &r->packets_per_exchange,
				NULL, err, errlen);
	return rc;
}

int
phub_model_runs_load(const char *path, struct phub_model_run **runs, size_t *n, char *err,
		size_t errlen)
{
	struct phub_model_run *grown;
	char src[128];
	json_error_t jerr;
	json_t *root, *o;
	size_t count, i;
	int rc = 0;

	if (path == NULL || runs == NULL || n == NULL)
		return phub_err(err, errlen, EINVAL, "missing path");
	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL)
		return phub_err(err, errlen, jerr.line < 0 ? EIO : EINVAL, "%s:%d:%d: %s", path,
				jerr.line, jerr.column, jerr.text);
	count = json_is_array(root) ? json_array_size(root) : 1;
	if (count == 0) {
		rc = phub_err(err, errlen, EINVAL, "%s: no run in the file", path);
		goto out;
	}
	if (*n + count > PHUB_MODEL_FIT_MAX_POINTS) {
		rc = phub_err(err, errlen, EINVAL, "more than %d runs", PHUB_MODEL_FIT_MAX_POINTS);
		goto out;
	}
	grown = realloc(*runs, (*n + count) * sizeof(**runs));
	if (grown == NULL) {
		rc = phub_err(err, errlen, ENOMEM, "out of memory");
		goto out;
	}
	*runs = grown;
	for (i = 0; i < count; i++) {
		o = json_is_array(root) ? json_array_get(root, i) : root;
		if (json_is_array(root))
			snprintf(src, sizeof(src), "%s[%zu]", path, i);
		else
			snprintf(src, sizeof(src), "%s", path);
		rc = parse_run(o, src, &(*runs)[*n], err, errlen);
		if (rc != 0)
			goto out;
		(*n)++;
	}
out:
	json_decref(root);
	return rc;
}

int
phub_model_run_terms(const struct phub_model_run *r, double *port_bits, double *lcore_packets,
		double *exchange_s, char *err, size_t errlen)
{
	double seg, chunk, full, rem, pkts;
	unsigned int ports, lcores;

	if (r->workers < 1 || !(r->model_bytes > 0) || !(r->exchanges_per_s > 0))
		return phub_err(err, errlen, EINVAL,
				"%s: workers, model_bytes and exchanges_per_s must be positive",
				r->source);
	if (r->segment_bytes != 0)
		seg = r->segment_bytes;
	else if (r->mtu != 0)
		seg = r->mtu - SEGMENT_OVERHEAD_BYTES;
	else
		seg = DEFAULT_SEGMENT_BYTES;
	ports = r->ports != 0 ? r->ports : 1;
	lcores = r->lcores != 0 ? r->lcores : 1;
	if (r->packets_per_exchange > 0) {
		pkts = r->packets_per_exchange;
	} else {
		/* One worker's gradient segments per exchange: chunks of chunk_bytes (the model is
		 * one key without it), each cut into segments. */
		chunk = r->chunk_bytes != 0 ? r->chunk_bytes : r->model_bytes;
		full = floor(r->model_bytes / chunk);
		rem = r->model_bytes - full * chunk;
		pkts = full * ceil(chunk / seg) + ceil(rem / seg);
	}
	/* The PBox port carries every worker's bytes, spread over its ports; its lcores share
	 * every worker's segments. */
	*port_bits = r->workers * r->model_bytes * MODEL_BITS_PER_BYTE / ports;
	*lcore_packets = r->workers * pkts / lcores;
	*exchange_s = 1 / r->exchanges_per_s;
	return 0;
}

/* Least squares on the columns in `use` (0: constant, 1: bits, 2: packets) through scaled
 * normal equations; false if the columns are (nearly) dependent. */
static bool
lsq(double (*x)[3], const double *y, size_t n, const bool use[3], double coef[3])
{
	double a[3][4] = { { 0 } }, scale[3] = { 0 };
	int idx[3], k = 0;

	for (int j = 0; j < 3; j++) {
		coef[j] = 0;
		if (use[j])
			idx[k++] = j;
	}
	if ((size_t)k > n)
		return false;
	for (int j = 0; j < k; j++) {
		for (size_t i = 0; i < n; i++)
			scale[j] += x[i][idx[j]] * x[i][idx[j]];
		scale[j] = sqrt(scale[j]);
		if (!(scale[j] > 0))
			return false;
	}
	for (int r = 0; r < k; r++) {
		for (int c = 0; c < k; c++) {
			for (size_t i = 0; i < n; i++)
				a[r][c] += x[i][idx[r]] * x[i][idx[c]];
			a[r][c] /= scale[r] * scale[c];
		}
		for (size_t i = 0; i < n; i++)
			a[r][k] += x[i][idx[r]] * y[i];
		a[r][k] /= scale[r];
	}
	/* Gauss-Jordan with partial pivoting; the scaled Gram matrix has a unit diagonal, so a
	 * tiny pivot means dependent columns. */
	for (int c = 0; c < k; c++) {
		int piv = c;

		for (int r = c + 1; r < k; r++) {
			if (fabs(a[r][c]) > fabs(a[piv][c]))
				piv = r;
		}
		if (fabs(a[piv][c]) < 1e-9)
			return false;
		for (int j = 0; j <= k; j++) {
			double t = a[c][j];

			a[c][j] = a[piv][j];
			a[piv][j] = t;
		}
		for (int r = 0; r < k; r++) {
			double f;

			if (r == c)
				continue;
			f = a[r][c] / a[c][c];
			for (int j = c; j <= k; j++)
				a[r][j] -= f * a[c][j];
		}
	}
	for (int j = 0; j < k; j++)
		coef[idx[j]] = a[j][k] / a[j][j] / scale[j];
	return true;
}

/*
 * exchange_s = rtt_s + port_bits / rate + lcore_packets * per_packet_s, the bench's version of
 * the iteration model (model_optimize.c) with compute zero (ZeroComputeEngine, §4.4). The
 * constants must not be negative; with three of them, non-negative least squares (weighted by
 * 1/observed time, so relative errors) is solved
 * exactly by fitting every support that keeps the bandwidth term and keeping the best
 * feasible one.
 */
int
phub_model_calibrate(const struct phub_model_run *runs, size_t n, struct phub_model_fit *fit,
		char *err, size_t errlen)
{
	static const bool supports[4][3] = {
		{ true, true, true }, { false, true, true },
		{ true, true, false }, { false, true, false },
	};
	double (*x)[3] = NULL, *y = NULL, (*xw)[3] = NULL, *yw = NULL, best_ss = INFINITY;
	double best[3] = { 0 }, coef[3];
	int best_s = -1, rc = 0;

	if (runs == NULL || fit == NULL)
		return phub_err(err, errlen, EINVAL, "missing runs");
	if (n < 2)
		return phub_err(err, errlen, EINVAL,
				"need at least 2 verified runs to fit (got %zu)", n);
	if (n > PHUB_MODEL_FIT_MAX_POINTS)
		return phub_err(err, errlen, EINVAL, "more than %d runs",
				PHUB_MODEL_FIT_MAX_POINTS);
	memset(fit, 0, sizeof(*fit));
	x = calloc(n, sizeof(*x));
	y = calloc(n, sizeof(*y));
	xw = calloc(n, sizeof(*xw));
	yw = calloc(n, sizeof(*yw));
	if (x == NULL || y == NULL || xw == NULL || yw == NULL) {
		rc = phub_err(err, errlen, ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		x[i][0] = 1;
		rc = phub_model_run_terms(&runs[i], &x[i][1], &x[i][2], &y[i], err, errlen);
		if (rc != 0)
			goto out;
		/* Timing noise is proportional to the time: weigh every run by 1/observed, so
		 * that the fit minimizes relative errors and small runs count as much as large. */
		for (int j = 0; j < 3; j++)
			xw[i][j] = x[i][j] / y[i];
		yw[i] = 1;
	}
	fit->identifiable = lsq(xw, yw, n, supports[1], coef);
	for (int s = 0; s < 4; s++) {
		double ss = 0;
		bool ok;

		if (!lsq(xw, yw, n, supports[s], coef))
			continue;
		ok = coef[1] > 0 && coef[0] >= 0 && coef[2] >= 0;
		if (!ok)
			continue;
		for (size_t i = 0; i < n; i++) {
			double r = 1 - (coef[0] + coef[1] * x[i][1] + coef[2] * x[i][2]) / y[i];

			ss += r * r;
		}
		/* Ties (exact data) go to the larger support, listed first. */
		if (ss < best_ss * (1 - 1e-9)) {
			best_ss = ss;
			best_s = s;
			memcpy(best, coef, sizeof(best));
		}
	}
	if (best_s < 0) {
		rc = phub_err(err, errlen, EINVAL,
				"the runs do not fit time = rtt + bits/rate + segments * cost with non-negative constants: do they all come from the same hardware?");
		goto out;
	}
	fit->points = n;
	fit->rtt_s = best[0];
	fit->achievable_gbps = 1 / best[1] / MODEL_GIGA;
	fit->per_packet_s = best[2];
	fit->rtt_fitted = supports[best_s][0];
	fit->per_packet_fitted = supports[best_s][2];
	{
		double abs2 = 0;

		for (size_t i = 0; i < n; i++) {
			double r = y[i] - (best[0] + best[1] * x[i][1] + best[2] * x[i][2]);

			fit->residual_s[i] = r;
			abs2 += r * r;
		}
		fit->residual_rms_s = sqrt(abs2 / n);
		fit->residual_rel_rms = sqrt(best_ss / n);
	}
out:
	free(x);
	free(y);
	free(xw);
	free(yw);
	return rc;
}

int
phub_model_hw_load_calibration(const char *path, struct phub_model_hw *hw, char *err,
		size_t errlen)
{
	json_error_t jerr;
	json_t *root;
	double v;
	bool present;
	int rc;

	if (path == NULL || hw == NULL)
		return phub_err(err, errlen, EINVAL, "missing path");
	root = json_load_file(path, 0, &jerr);
	if (root == NULL)
		return phub_err(err, errlen, jerr.line < 0 ? EIO : EINVAL, "%s:%d:%d: %s", path,
				jerr.line, jerr.column, jerr.text);
	if (!json_is_object(root)) {
		rc = phub_err(err, errlen, EINVAL, "%s: the top level must be an object", path);
		goto out;
	}
	rc = get_number(root, path, "achievable_gbps", false, 0, &v, &present, err, errlen);
	if (rc == 0 && present) {
		if (!(v > 0)) {
			rc = phub_err(err, errlen, EINVAL, "%s: achievable_gbps: must be positive",
					path);
			goto out;
		}
		/* The bench measured this link: workers and PBox ports are the same NICs. */
		hw->port_gbps = v;
		hw->worker_gbps = v;
	}
	if (rc == 0)
		rc = get_number(root, path, "per_packet_s", false, 0, &v, &present, err, errlen);
	if (rc == 0 && present)
		hw->per_packet_s = v;
	if (rc == 0)
		rc = get_number(root, path, "rtt_s", false, 0, &v, &present, err, errlen);
	if (rc == 0 && present)
		hw->rtt_s = v;
out:
	json_decref(root);
	return rc;
}
