/* SPDX-License-Identifier: BSD-3-Clause */
/* A training job for the models: layer sizes and compute time, from a JSON file or a preset. */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "phub_model.h"
#include "model_priv.h"

/* Backward takes about two thirds of a batch's compute in the usual rule of thumb; gradients
 * appear (and can be sent, wait-free backprop) only during backward. */
#define DEFAULT_OVERLAP (2.0 / 3.0)
/* Layers of a job at most: far above any network of Table 3. */
#define MAX_LAYERS 100000

void
phub_model_job_free(struct phub_model_job *job)
{
	if (job == NULL)
		return;
	free(job->layer_bytes);
	memset(job, 0, sizeof(*job));
}

double
phub_model_job_bytes(const struct phub_model_job *job)
{
	double sum = 0;

	for (size_t i = 0; i < job->layers; i++)
		sum += job->layer_bytes[i];
	return sum;
}

int
phub_model_job_from_preset(const struct phub_model_preset *p, enum phub_model_units units,
		struct phub_model_job *job, char *err, size_t errlen)
{
	if (p == NULL || job == NULL)
		return phub_err(err, errlen, EINVAL, "missing preset");
	memset(job, 0, sizeof(*job));
	job->layer_bytes = malloc(sizeof(double));
	if (job->layer_bytes == NULL)
		return phub_err(err, errlen, ENOMEM, "out of memory");
	/* Table 3 gives only the total: the model is one key. */
	job->layer_bytes[0] = phub_model_preset_bytes(p, units);
	job->layers = 1;
	job->compute_s = p->compute_ms / 1e3;
	job->overlap = DEFAULT_OVERLAP;
	job->batch = p->batch;
	return 0;
}

static int
number(json_t *v, const char *path, const char *file, double *out, char *err, size_t errlen)
{
	if (!json_is_number(v))
		return phub_err(err, errlen, EINVAL, "%s: %s: must be a number", file, path);
	*out = json_number_value(v);
	return 0;
}

static int
parse_job(json_t *root, const char *path, struct phub_model_job *job, char *err, size_t errlen)
{
	bool have_compute = false;
	const char *key;
	json_t *v, *e;
	double d = 0;
	size_t i;
	int rc;

	if (!json_is_object(root))
		return phub_err(err, errlen, EINVAL, "%s: the top level must be an object", path);
	job->overlap = DEFAULT_OVERLAP;
	job->batch = 1;
	json_object_foreach(root, key, v) {
		if (strcmp(key, "layer_bytes") == 0) {
			if (!json_is_array(v) || json_array_size(v) == 0)
				return phub_err(err, errlen, EINVAL,
						"%s: layer_bytes: must be a non-empty array of sizes in bytes",
						path);
			if (json_array_size(v) > MAX_LAYERS)
				return phub_err(err, errlen, EINVAL,
						"%s: layer_bytes: more than %d layers", path,
						MAX_LAYERS);
			job->layer_bytes = calloc(json_array_size(v), sizeof(double));
			if (job->layer_bytes == NULL)
				return phub_err(err, errlen, ENOMEM, "out of memory");
			json_array_foreach(v, i, e) {
				if (!json_is_number(e) || json_number_value(e) <= 0 ||
						!isfinite(json_number_value(e)))
					return phub_err(err, errlen, EINVAL,
							"%s: layer_bytes[%zu]: must be a positive number of bytes",
							path, i);
				job->layer_bytes[i] = json_number_value(e);
			}
			job->layers = json_array_size(v);
		} else if (strcmp(key, "compute_s") == 0 || strcmp(key, "compute_ms") == 0) {
			if (have_compute)
				return phub_err(err, errlen, EINVAL,
						"%s: give compute_s or compute_ms, not both", path);
			rc = number(v, key, path, &d, err, errlen);
			if (rc != 0)
				return rc;
			if (!(d > 0) || !isfinite(d))
				return phub_err(err, errlen, EINVAL, "%s: %s: must be positive",
						path, key);
			job->compute_s = key[8] == 'm' ? d / 1e3 : d;
			have_compute = true;
		} else if (strcmp(key, "batch") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
					json_integer_value(v) > 1000000)
				return phub_err(err, errlen, EINVAL,
						"%s: batch: must be an integer from 1 to 1000000",
						path);
			job->batch = (unsigned int)json_integer_value(v);
		} else if (strcmp(key, "overlap") == 0) {
			rc = number(v, key, path, &d, err, errlen);
			if (rc != 0)
				return rc;
			if (!(d >= 0 && d <= 1))
				return phub_err(err, errlen, EINVAL,
						"%s: overlap: must be a fraction from 0 to 1",
						path);
			job->overlap = d;
		} else if (strcmp(key, "name") == 0 || strcmp(key, "comment") == 0) {
			if (!json_is_string(v))
				return phub_err(err, errlen, EINVAL, "%s: %s: must be a string",
						path, key);
		} else {
			return phub_err(err, errlen, EINVAL,
					"%s: %s: unknown key (expected layer_bytes, compute_s or compute_ms, batch, overlap, name, comment)",
					path, key);
		}
	}
	if (job->layers == 0)
		return phub_err(err, errlen, EINVAL, "%s: layer_bytes: missing", path);
	if (!have_compute)
		return phub_err(err, errlen, EINVAL, "%s: compute_s: missing", path);
	return 0;
}

int
phub_model_job_load(const char *path, struct phub_model_job *job, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root;
	int rc;

	if (path == NULL || job == NULL)
		return phub_err(err, errlen, EINVAL, "missing path");
	memset(job, 0, sizeof(*job));
	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL)
		return phub_err(err, errlen, jerr.line < 0 ? EIO : EINVAL, "%s:%d:%d: %s", path,
				jerr.line, jerr.column, jerr.text);
	rc = parse_job(root, path, job, err, errlen);
	json_decref(root);
	if (rc != 0)
		phub_model_job_free(job);
	return rc;
}
