/* SPDX-License-Identifier: BSD-3-Clause */
/* §3.4: the condition for hierarchical reduction across racks, in the 000 and 001 versions. */

#include <errno.h>
#include <math.h>
#include <string.h>

#include "phub_model.h"
#include "model_priv.h"

/* The model's size and the links' rates: positive numbers. */
static int
check_sizes(const struct phub_model_hier_params *p, char *err, size_t errlen)
{
	const struct model_num pos[] = {
		MODEL_NUM(p, model_bytes), MODEL_NUM(p, pbox_gbps), MODEL_NUM(p, core_gbps),
		MODEL_NUM(p, worker_gbps),
	};

	return model_check_nums(pos, MODEL_DIM(pos), NULL, 0, err, errlen);
}

int
phub_model_hierarchy(const struct phub_model_hier_params *p, struct phub_model_hier *out,
		char *err, size_t errlen)
{
	double n, r, m, bp, bc, bw, bn, flat, local, c_sh, c_ring;
	int rc;

	if (p == NULL || out == NULL)
		return phub_err(err, errlen, EINVAL, "missing parameters");
	rc = check_sizes(p, err, errlen);
	if (rc != 0)
		return rc;
	if (p->workers_per_rack < 1)
		return phub_err(err, errlen, EINVAL, "workers_per_rack must be at least 1");
	if (p->racks < 2)
		return phub_err(err, errlen, EINVAL,
				"racks must be at least 2 (a job in one rack has no cross-rack reduction)");

	n = p->workers_per_rack;
	r = p->racks;
	/* The text writes every term as a time per unit of model: multiply by M in bytes and
	 * divide bandwidths in bytes/s. */
	m = p->model_bytes * MODEL_BITS_PER_BYTE / MODEL_GIGA;
	bp = p->pbox_gbps;
	bc = p->core_gbps;
	bw = p->worker_gbps;

	memset(out, 0, sizeof(*out));
	switch (p->version) {
	case PHUB_MODEL_HIER_000:
		/* §3.4 (SoCC):  N(R-1)/(R B_Core) > max(N/B_PBox, 1/B_Wkr) + C,
		 * C = (r-1)/(r B_bn) for sharded PSs and ~ the same for a ring, B_bn = min(B_PBox,
		 * B_Core). */
		bn = fmin(bp, bc);
		flat = n * (r - 1) / (r * bc);
		local = fmax(n / bp, 1 / bw);
		c_sh = (r - 1) / (r * bn);
		c_ring = (r - 1) / (r * bn);
		break;
	case PHUB_MODEL_HIER_001:
		/* §3.4 (arXiv, seed 001):
		 *   max((N-1)/B_bn, 1/(N B_Wkr)) > max(1/B_PBox, N/B_Wkr) + C,
		 * B_bn = min((r-1) B_PBox, B_Core), C = (N-1)/(N B_bn) for sharded PSs and
		 * ~ (r-1)/(r B_bn) for a ring. Implemented as printed, though its N sits on the
		 * other side of the fractions than in the 000 version. */
		bn = fmin((r - 1) * bp, bc);
		flat = fmax((n - 1) / bn, 1 / (n * bw));
		local = fmax(1 / bp, n / bw);
		c_sh = (n - 1) / (n * bn);
		c_ring = (r - 1) / (r * bn);
		break;
	default:
		return phub_err(err, errlen, EINVAL, "unknown version of the §3.4 condition");
	}

	out->bn_gbps = bn;
	out->flat_s = flat * m;
	out->local_s = local * m;
	out->c_sharded_s = c_sh * m;
	out->c_ring_s = c_ring * m;
	out->hier_sharded = out->flat_s > out->local_s + out->c_sharded_s;
	out->hier_ring = out->flat_s > out->local_s + out->c_ring_s;

	/* Traffic through one rack's uplink per iteration, each direction. Flat (keys sharded
	 * evenly over the racks' PSs): out of the rack go the pushes of its N workers to the
	 * other racks' shards, (R-1)/R M each, and its shard's answers to the N(R-1) remote
	 * workers, M/R each. Hierarchical: the rack's PBox sends 2(R-1)/R M in the ring's
	 * reduce-scatter and all-gather. The ratio is the text's 1/N. */
	out->flat_cross_bytes = 2 * n * (r - 1) / r * p->model_bytes;
	out->hier_cross_bytes = 2 * (r - 1) / r * p->model_bytes;
	out->saved_fraction = 1 - out->hier_cross_bytes / out->flat_cross_bytes;
	return 0;
}

int
phub_model_hier_predict(const struct phub_model_hier_params *p, double rack_sum_s,
		struct phub_model_hier_pred *out, char *err, size_t errlen)
{
	struct phub_model_hier h;
	double r, w, bytes_per_s;
	int rc;

	if (out == NULL)
		return phub_err(err, errlen, EINVAL, "missing parameters");
	/* The same checks as the condition's (racks >= 2, every bandwidth and M > 0). */
	rc = phub_model_hierarchy(p, &h, err, errlen);
	if (rc != 0)
		return rc;
	if (!(rack_sum_s >= 0) || isinf(rack_sum_s))
		return phub_err(err, errlen, EINVAL, "rack_sum_s must be a time >= 0");
	r = p->racks;
	w = r * p->workers_per_rack;
	bytes_per_s = p->core_gbps * MODEL_GIGA / MODEL_BITS_PER_BYTE;
	memset(out, 0, sizeof(*out));
	out->rack_sum_s = rack_sum_s;
	out->ring_cross_s = 2 * (r - 1) / r * p->model_bytes / bytes_per_s;
	out->ring_s = rack_sum_s + out->ring_cross_s;
	out->flat_ring_s = 2 * (w - 1) / w * p->model_bytes / bytes_per_s;
	out->ratio = out->flat_ring_s / out->ring_s;
	return 0;
}
