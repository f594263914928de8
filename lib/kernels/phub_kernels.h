/* SPDX-License-Identifier: BSD-3-Clause */
/* The aggregation and optimizer kernels of the PBox: wire dtypes, sums, fused optimizer steps. */

#ifndef PHUB_KERNELS_H
#define PHUB_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/phub_types.h"

#ifdef __cplusplus
extern "C" {
#endif


/* Instruction sets with an implementation, slowest first. */
enum phub_isa {
	PHUB_ISA_SCALAR = 0, /* portable C: the reference every other ISA must match */
	PHUB_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
	PHUB_ISA_AVX512 = 2, /* AVX-512 F + BW + VL (no AVX512_BF16 needed) */
};

#define PHUB_ISA_COUNT 3

/*
 * Optimizers (enum phub_opt_type, in wire/phub_types.h). With g the mean gradient (sum
 * times grad_scale) and w the fp32 weight, each element is updated as below; docs/kernels.md
 * has the same formulas and the exact order of operations.
 *
 *   NONE      w = g                                    (the model buffer holds the mean)
 *   SGD       g += wd*w;  w -= lr*g
 *   MOMENTUM  g += wd*w;  m = mu*m + g;  w -= lr*m     (heavy ball, PyTorch form)
 *   NESTEROV  g += wd*w;  m = mu*m + g;  w -= lr*(g + mu*m)   (MXNet NAG)
 *   ADAM      g += wd*w;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
 *             w -= (lr*c1)*m / (sqrt(v)*c2 + eps)
 *   ADAMW     m, v as ADAM without the wd term;  w = w*(1 - lr*wd) - (lr*c1)*m / (sqrt(v)*c2 + eps)
 *
 * where c1 = 1/(1 - b1^t) and c2 = 1/sqrt(1 - b2^t) come from struct phub_opt_step.
 */

/* Hyper-parameters of one job's optimizer; constant over the job. */
struct phub_optimizer_params {
	enum phub_opt_type type;
	float lr;           /* base learning rate; phub_opt_step.lr may follow a schedule */
	float momentum;     /* mu of MOMENTUM and NESTEROV */
	float weight_decay; /* L2 term for SGD, MOMENTUM, NESTEROV, ADAM; decoupled for ADAMW */
	float beta1;
	float beta2;
	float eps;
};

/*
 * Scalars of one optimizer step, computed once per iteration so that the
 * kernels stay pure streams (no pow() per element).
 */
struct phub_opt_step {
	float grad_scale;  /* 1/N: turns the sum of N gradients into their mean */
	float lr;          /* learning rate of this step */
	float adam_c1;     /* 1 / (1 - beta1^t), t counted from 1 */
	float adam_c2;     /* 1 / sqrt(1 - beta2^t) */
};

/*
 * The buffers of one segment's last-arrival step. The gradient sum is
 * acc + grad; either may be NULL (acc when the last arrival is also the first,
 * grad when acc already holds the whole sum, as after a cross-rack
 * reduction), never both. acc is only read. No buffer may overlap another.
 */
struct phub_opt_buffers {
	const float *acc;          /* fp32 sum of the earlier arrivals, or NULL */
	const void *grad;          /* the last arrival, in grad_dtype, or NULL */
	float *weight;             /* fp32 model, updated in place */
	float *m;                  /* MOMENTUM, NESTEROV, ADAM, ADAMW: first state; else unused */
	float *v;                  /* ADAM, ADAMW: second moment; else unused */
	void *out;                 /* new weights in out_dtype (the MODEL payload), or NULL */
	enum phub_dtype grad_dtype;
	enum phub_dtype out_dtype;
};

/*
 * One implementation of every kernel. The kernels take n elements, accept any
 * alignment (2-byte elements may even start at an odd address), do not
 * validate their arguments (the wire parser and phub_optimizer_params_check()
 * did) and never fail. Sums are bit-identical across ISAs; so are the fused
 * steps (see docs/kernels.md).
 */
struct phub_kernels {
	enum phub_isa isa;
	/* First arrival: acc[i] = (float)src[i]. Also the wire to fp32 conversion. */
	void (*first)(float *acc, const void *src, enum phub_dtype dtype, size_t n);
	/* Later arrival: acc[i] = acc[i] + (float)src[i]. */
	void (*add)(float *acc, const void *src, enum phub_dtype dtype, size_t n);
	/*
	 * k arrivals in one pass: acc[i] = ((acc[i] + s0[i]) + s1[i]) + ... when
	 * accumulate, ((s0[i] + s1[i]) + ...) otherwise; the same bits as first
	 * and k-1 or k calls of add, with acc read and written once; k = 0 does nothing.
	 */
	void (*sum)(float *acc, bool accumulate, const void *const *srcs, unsigned int k,
		    enum phub_dtype dtype, size_t n);
	/* Last arrival: sum, scale, weight decay, optimizer and MODEL payload in one pass. */
	void (*last)(const struct phub_opt_buffers *buf, size_t n,
		     const struct phub_optimizer_params *params, const struct phub_opt_step *step);
	/* fp32 to wire dtype, rounding to nearest even; NaN stays NaN (quietened). */
	void (*to_wire)(void *dst, enum phub_dtype dtype, const float *src, size_t n);
};

/*
 * The best implementation this CPU runs, or the one phub_kernels_select()
 * forced. Never NULL: the scalar one runs everywhere. Thread-safe.
 */
const struct phub_kernels *
phub_kernels_get(void);

/* The implementation of one ISA; NULL and errno ENOTSUP if this CPU lacks it, EINVAL if unknown. */
const struct phub_kernels *
phub_kernels_for_isa(enum phub_isa isa);

/* Force the ISA phub_kernels_get() returns (tests, benchmarks); -ENOTSUP, -EINVAL. */
int
phub_kernels_select(enum phub_isa isa);

/* Whether this CPU (and its OS) runs the ISA's kernels. */
bool
phub_kernels_isa_supported(enum phub_isa isa);

/* "scalar", "avx2", "avx512", or "unknown". */
const char *
phub_kernels_isa_name(enum phub_isa isa);

/* How many fp32 state arrays (m, v) the optimizer keeps per element: 0, 1 or 2. */
unsigned int
phub_opt_state_count(enum phub_opt_type type);

/*
 * Check the hyper-parameters: finite, lr and weight_decay >= 0, momentum and
 * betas in [0, 1), eps > 0 for Adam. 0 or -EINVAL.
 */
int
phub_optimizer_params_check(const struct phub_optimizer_params *params);

/*
 * The scalars of step t (t >= 1, the t-th update of this model) for a sum of
 * nworkers gradients, with the base learning rate; computed in double and
 * rounded once. 0, or -EINVAL if t or nworkers is 0.
 */
int
phub_opt_step_init(struct phub_opt_step *step, const struct phub_optimizer_params *params,
		   uint64_t t, unsigned int nworkers);

#ifdef __cplusplus
}
#endif

#endif /* PHUB_KERNELS_H */
