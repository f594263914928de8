/* SPDX-License-Identifier: BSD-3-Clause */
/* What every ISA of lib/kernels shares: element conversions, the optimizer's per-element order. */

#ifndef PHUB_KERNELS_PRIV_H
#define PHUB_KERNELS_PRIV_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "phub_kernels.h"

/*
 * This header is compiled into the scalar, AVX2 and AVX-512 files alike.
 * Everything here is static inline, never plain inline: a function with
 * external linkage compiled once with -mavx512f and once without could be
 * merged by the linker into the AVX-512 copy and run on a CPU without it.
 *
 * The conversions and the optimizer order below are the reference: the
 * scalar kernels run them as they are, kernels_simd.h repeats them lane by
 * lane (tails included), and the tests hold the two to the same bits.
 */

#define KERNELS_ALWAYS_INLINE inline __attribute__((always_inline))

/*
 * Constants of one last-arrival call, rounded to float once, in one place
 * (kernels.c, no SIMD flags), so every ISA multiplies by the same floats.
 */
struct opt_consts {
	float scale;      /* 1/N */
	float lr;
	float wd;
	float mu;         /* momentum */
	float b1;
	float omb1;       /* 1 - beta1 */
	float b2;
	float omb2;       /* 1 - beta2 */
	float eps;
	float lr_c1;      /* lr * c1: Adam's step size */
	float c2;         /* 1 / sqrt(1 - beta2^t) */
	float decay;      /* 1 - lr * wd: AdamW's decoupled weight decay */
};

void
opt_consts_init(struct opt_consts *c, const struct phub_optimizer_params *params,
		const struct phub_opt_step *step);

/*
 * binary16 to binary32 is exact. A NaN keeps its sign and payload and is
 * quietened, as the F16C instruction VCVTPH2PS does.
 */
static inline float
fp16_to_fp32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t mant = h & 0x3ff;

	if (exp == 0x1f)
		return phub_f32_from_bits(sign | 0x7f800000 | (mant << 13) |
					  (mant != 0 ? 0x400000 : 0));
	if (exp != 0)
		return phub_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
	if (mant == 0)
		return phub_f32_from_bits(sign);
	/* A subnormal half is a normal float: shift the leading one into bit 10. */
	exp = 113;
	while ((mant & 0x400) == 0) {
		mant <<= 1;
		exp--;
	}
	return phub_f32_from_bits(sign | (exp << 23) | ((mant & 0x3ff) << 13));
}

/*
 * binary32 to binary16, round to nearest even, as VCVTPS2PH with imm8 0:
 * overflow gives Inf, results below 2^-14 are subnormal halves, a NaN keeps
 * its sign and top payload bits and is quietened.
 */
static inline uint16_t
fp32_to_fp16(float f)
{
	uint32_t x = phub_f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t ax = x & 0x7fffffff;
	uint32_t mant, r, rem, half;
	int shift;

	if (ax > 0x7f800000)
		return sign | 0x7e00 | ((ax >> 13) & 0x1ff);
	/* 65520 is the midpoint between 65504 (odd mantissa) and 2^16: it rounds up to Inf. */
	if (ax >= 0x477ff000)
		return sign | 0x7c00;
	if (ax >= 0x38800000) {
		/* Normal half: rebias by (127 - 15) << 23 and round away 13 bits; a carry into
		 * the exponent is the correct result. */
		r = ax - 0x38000000;
		r += 0xfff + ((r >> 13) & 1);
		return sign | (uint16_t)(r >> 13);
	}
	/* Subnormal half: the result counts units of 2^-24; 2^-25 itself ties to 0. */
	if ((ax >> 23) < 102)
		return sign;
	mant = (ax & 0x7fffff) | 0x800000;
	shift = 126 - (int)(ax >> 23);
	r = mant >> shift;
	rem = mant & ((1u << shift) - 1);
	half = 1u << (shift - 1);
	if (rem > half || (rem == half && (r & 1) != 0))
		r++;
	return sign | (uint16_t)r;
}

static inline float
bf16_to_fp32(uint16_t b)
{
	return phub_f32_from_bits((uint32_t)b << 16);
}

/*
 * binary32 to bfloat16, round to nearest even on the integer bits; overflow
 * carries into Inf, subnormals stay subnormal (unlike VCVTNEPS2BF16, which
 * flushes them), a NaN is quietened so that truncation never makes it Inf.
 */
static inline uint16_t
fp32_to_bf16(float f)
{
	uint32_t x = phub_f32_bits(f);

	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40);
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* Element i of a wire buffer, which may sit at any byte address. */
static inline float
load_elem(const void *p, size_t i, enum phub_dtype dtype)
{
	const unsigned char *b = p;
	uint16_t h;
	float f;

	switch (dtype) {
	case PHUB_DTYPE_FP16:
		memcpy(&h, b + 2 * i, sizeof(h));
		return fp16_to_fp32(h);
	case PHUB_DTYPE_BF16:
		memcpy(&h, b + 2 * i, sizeof(h));
		return bf16_to_fp32(h);
	case PHUB_DTYPE_FP32:
	default:
		memcpy(&f, b + 4 * i, sizeof(f));
		return f;
	}
}

static inline void
store_elem(void *p, size_t i, enum phub_dtype dtype, float f)
{
	unsigned char *b = p;
	uint16_t h;

	switch (dtype) {
	case PHUB_DTYPE_FP16:
		h = fp32_to_fp16(f);
		memcpy(b + 2 * i, &h, sizeof(h));
		break;
	case PHUB_DTYPE_BF16:
		h = fp32_to_bf16(f);
		memcpy(b + 2 * i, &h, sizeof(h));
		break;
	case PHUB_DTYPE_FP32:
	default:
		memcpy(b + 4 * i, &f, sizeof(f));
		break;
	}
}

/*
 * Element i of an fp32 sum, which may sit at any 4-byte offset from alignment too: an engine
 * that keeps a lent PUSH payload as the sum hands its kernels the datagram's bytes.
 */
static inline float
load_acc(const float *acc, size_t i)
{
	return load_elem(acc, i, PHUB_DTYPE_FP32);
}

/*
 * The gradient mean of element i: the sum in the order acc + grad, then the
 * scale. Every ISA computes exactly these operations in this order.
 */
static KERNELS_ALWAYS_INLINE float
last_grad_elem(const struct phub_opt_buffers *b, size_t i, const struct opt_consts *c)
{
	float g;

	if (b->acc == NULL)
		g = load_elem(b->grad, i, b->grad_dtype);
	else if (b->grad == NULL)
		g = load_acc(b->acc, i);
	else
		g = load_acc(b->acc, i) + load_elem(b->grad, i, b->grad_dtype);
	return g * c->scale;
}

/*
 * One element of the optimizer: the reference order of operations. The SIMD
 * bodies repeat it operation by operation, without FMA, which is why their
 * results carry the same bits (see docs/kernels.md, "Tolerances").
 */
static KERNELS_ALWAYS_INLINE void
opt_elem(enum phub_opt_type type, const struct opt_consts *c, float g, float *w, float *m,
	 float *v)
{
	float wi = *w;
	float mi, vi;

	switch (type) {
	case PHUB_OPT_NONE:
		*w = g;
		break;
	case PHUB_OPT_SGD:
		g = g + c->wd * wi;
		*w = wi - c->lr * g;
		break;
	case PHUB_OPT_MOMENTUM:
		g = g + c->wd * wi;
		mi = c->mu * *m + g;
		*m = mi;
		*w = wi - c->lr * mi;
		break;
	case PHUB_OPT_NESTEROV:
		g = g + c->wd * wi;
		mi = c->mu * *m + g;
		*m = mi;
		*w = wi - c->lr * (g + c->mu * mi);
		break;
	case PHUB_OPT_ADAM:
		g = g + c->wd * wi;
		mi = c->b1 * *m + c->omb1 * g;
		vi = c->b2 * *v + c->omb2 * (g * g);
		*m = mi;
		*v = vi;
		*w = wi - (c->lr_c1 * mi) / (sqrtf(vi) * c->c2 + c->eps);
		break;
	case PHUB_OPT_ADAMW:
		mi = c->b1 * *m + c->omb1 * g;
		vi = c->b2 * *v + c->omb2 * (g * g);
		*m = mi;
		*v = vi;
		*w = wi * c->decay - (c->lr_c1 * mi) / (sqrtf(vi) * c->c2 + c->eps);
		break;
	}
}

/* The per-ISA tables; the SIMD ones exist only on x86-64. */
extern const struct phub_kernels kernels_scalar;
#if defined(__x86_64__)
extern const struct phub_kernels kernels_avx2;
extern const struct phub_kernels kernels_avx512;
#endif

#endif /* PHUB_KERNELS_PRIV_H */
