/* SPDX-License-Identifier: BSD-3-Clause */
/* The scalar reference kernels: portable C that defines the bits every other ISA must produce. */

#include "kernels_priv.h"

static void
scalar_first(float *acc, const void *src, enum phub_dtype dtype, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		acc[i] = load_elem(src, i, dtype);
}

static void
scalar_add(float *acc, const void *src, enum phub_dtype dtype, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		acc[i] = acc[i] + load_elem(src, i, dtype);
}

static void
scalar_sum(float *acc, bool accumulate, const void *const *srcs, unsigned int k,
	   enum phub_dtype dtype, size_t n)
{
	unsigned int j;
	size_t i;
	float s;

	if (k == 0)
		return;
	for (i = 0; i < n; i++) {
		s = accumulate ? acc[i] + load_elem(srcs[0], i, dtype) : load_elem(srcs[0], i, dtype);
		for (j = 1; j < k; j++)
			s = s + load_elem(srcs[j], i, dtype);
		acc[i] = s;
	}
}

static void
scalar_last(const struct phub_opt_buffers *buf, size_t n, const struct phub_optimizer_params *params,
	    const struct phub_opt_step *step)
{
	struct opt_consts c;
	size_t i;

	opt_consts_init(&c, params, step);
	for (i = 0; i < n; i++) {
		opt_elem(params->type, &c, last_grad_elem(buf, i, &c), &buf->weight[i],
			 buf->m != NULL ? &buf->m[i] : NULL, buf->v != NULL ? &buf->v[i] : NULL);
		if (buf->out != NULL)
			store_elem(buf->out, i, buf->out_dtype, buf->weight[i]);
	}
}

static void
scalar_to_wire(void *dst, enum phub_dtype dtype, const float *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		store_elem(dst, i, dtype, src[i]);
}

const struct phub_kernels kernels_scalar = {
	.isa = PHUB_ISA_SCALAR,
	.first = scalar_first,
	.add = scalar_add,
	.sum = scalar_sum,
	.last = scalar_last,
	.to_wire = scalar_to_wire,
};
