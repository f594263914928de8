/* SPDX-License-Identifier: BSD-3-Clause */
/* The scalar reference kernels: portable C that defines the bits every other ISA must produce. */

#include "kernels_priv.h"

/*
 * The loops are written per dtype (the dtype argument of load_elem() is a
 * constant in each copy), so the compiler needs no per-element switch. At -O2
 * it may still use SSE2 for them: vector or not, each element is the same
 * single IEEE operation.
 */
static KERNELS_ALWAYS_INLINE void
sum_tpl(float *acc, bool accumulate, const void *const *srcs, unsigned int k,
	enum phub_dtype dtype, size_t n)
{
	/* Blocks of 64 keep the partial sums in a small array that stays in L1. */
	float s[64];
	size_t i, e, len;
	unsigned int j;

	for (i = 0; i < n; i += len) {
		len = n - i < 64 ? n - i : 64;
		for (e = 0; e < len; e++)
			s[e] = accumulate ? load_acc(acc, i + e) + load_elem(srcs[0], i + e, dtype) :
					    load_elem(srcs[0], i + e, dtype);
		for (j = 1; j < k; j++)
			for (e = 0; e < len; e++)
				s[e] = s[e] + load_elem(srcs[j], i + e, dtype);
		memcpy(acc + i, s, len * sizeof(float));
	}
}

#define SCALAR_BY_DTYPE(dtype, call)                                                               \
	do {                                                                                       \
		switch (dtype) {                                                                   \
		case PHUB_DTYPE_FP32:                                                              \
			call(PHUB_DTYPE_FP32);                                                     \
			break;                                                                     \
		case PHUB_DTYPE_FP16:                                                              \
			call(PHUB_DTYPE_FP16);                                                     \
			break;                                                                     \
		case PHUB_DTYPE_BF16:                                                              \
			call(PHUB_DTYPE_BF16);                                                     \
			break;                                                                     \
		}                                                                                  \
	} while (0)

static KERNELS_ALWAYS_INLINE void
first_tpl(float *acc, const void *src, enum phub_dtype dtype, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		store_elem(acc, i, PHUB_DTYPE_FP32, load_elem(src, i, dtype));
}

static KERNELS_ALWAYS_INLINE void
add_tpl(float *acc, const void *src, enum phub_dtype dtype, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		store_elem(acc, i, PHUB_DTYPE_FP32, load_acc(acc, i) + load_elem(src, i, dtype));
}

static void
scalar_first(float *acc, const void *src, enum phub_dtype dtype, size_t n)
{
#define CALL(dt) first_tpl(acc, src, dt, n)
	SCALAR_BY_DTYPE(dtype, CALL);
#undef CALL
}

static void
scalar_add(float *acc, const void *src, enum phub_dtype dtype, size_t n)
{
#define CALL(dt) add_tpl(acc, src, dt, n)
	SCALAR_BY_DTYPE(dtype, CALL);
#undef CALL
}

static void
scalar_sum(float *acc, bool accumulate, const void *const *srcs, unsigned int k,
	   enum phub_dtype dtype, size_t n)
{
	if (k == 0)
		return;
#define CALL(dt) sum_tpl(acc, accumulate, srcs, k, dt, n)
	SCALAR_BY_DTYPE(dtype, CALL);
#undef CALL
}

static KERNELS_ALWAYS_INLINE void
last_tpl(const struct phub_opt_buffers *buf, size_t n, enum phub_opt_type type,
	 const struct opt_consts *c)
{
	size_t i;

	for (i = 0; i < n; i++) {
		opt_elem(type, c, last_grad_elem(buf, i, c), &buf->weight[i],
			 buf->m != NULL ? &buf->m[i] : NULL, buf->v != NULL ? &buf->v[i] : NULL);
		if (buf->out != NULL)
			store_elem(buf->out, i, buf->out_dtype, buf->weight[i]);
	}
}

static void
scalar_last(const struct phub_opt_buffers *buf, size_t n,
	    const struct phub_optimizer_params *params, const struct phub_opt_step *step)
{
	struct opt_consts c;

	opt_consts_init(&c, params, step);
	/* One copy of the loop per optimizer: no switch per element. */
	switch (params->type) {
#define LAST_CASE_(name, v, s) \
	case PHUB_OPT_##name: \
		last_tpl(buf, n, PHUB_OPT_##name, &c); \
		break;
	PHUB_FOREACH_OPT(LAST_CASE_)
#undef LAST_CASE_
	}
}

static void
scalar_to_wire(void *dst, enum phub_dtype dtype, const float *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		store_elem(dst, i, dtype, src[i]);
}

/* One table per ISA with the same entries (kernels_avx2.c, kernels_avx512.c): per-ISA twins. */
const struct phub_kernels kernels_scalar = {
	.isa = PHUB_ISA_SCALAR,
	.first = scalar_first,
	.add = scalar_add,
	.sum = scalar_sum,
	.last = scalar_last,
	.to_wire = scalar_to_wire,
};
