/* SPDX-License-Identifier: BSD-3-Clause */
/* The AVX-512 kernels (F, BW, VL): 16 floats per vector, masked tails; built with AVX-512 flags. */

#include <immintrin.h>

#include "kernels_priv.h"

/*
 * This file alone is compiled with -mavx512f -mavx512bw -mavx512vl (see
 * meson.build); nothing in it runs before phub_kernels_isa_supported() said yes.
 * bfloat16 goes through integer shifts, not AVX512_BF16: many AVX-512 CPUs
 * lack it, and VCVTNEPS2BF16 flushes subnormals, which the reference keeps.
 */

/*
 * Per-ISA twins: the primitives below have the names and shapes of those in kernels_avx2.c,
 * each wrapping this ISA's intrinsic, so that kernels_simd.h writes every kernel once over
 * them. Their likeness is the design, not a copy to fold away.
 */

typedef __m512 vec;
#define VW 16
#define SIMD_NAME(x) avx512_##x

static KERNELS_ALWAYS_INLINE vec
v_set1(float x)
{
	return _mm512_set1_ps(x);
}

static KERNELS_ALWAYS_INLINE vec
v_add(vec a, vec b)
{
	return _mm512_add_ps(a, b);
}

static KERNELS_ALWAYS_INLINE vec
v_sub(vec a, vec b)
{
	return _mm512_sub_ps(a, b);
}

static KERNELS_ALWAYS_INLINE vec
v_mul(vec a, vec b)
{
	return _mm512_mul_ps(a, b);
}

static KERNELS_ALWAYS_INLINE vec
v_div(vec a, vec b)
{
	return _mm512_div_ps(a, b);
}

static KERNELS_ALWAYS_INLINE vec
v_sqrt(vec a)
{
	return _mm512_sqrt_ps(a);
}

static KERNELS_ALWAYS_INLINE vec
bf16_widen(__m256i h)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Round to nearest even on the bits; see fp32_to_bf16() for the reasoning. */
static KERNELS_ALWAYS_INLINE __m256i
bf16_narrow(vec x)
{
	__m512i b = _mm512_castps_si512(x);
	__m512i hi = _mm512_srli_epi32(b, 16);
	__m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
	__m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, bias), 16);
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);

	r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(r);
}

/* Byte arithmetic: a wire payload of 2-byte elements may start at an odd address. */
static KERNELS_ALWAYS_INLINE vec
v_load(const void *p, size_t i, enum phub_dtype dtype)
{
	switch (dtype) {
	case PHUB_DTYPE_FP16:
		return _mm512_cvtph_ps(_mm256_loadu_si256((const void *)((const char *)p + 2 * i)));
	case PHUB_DTYPE_BF16:
		return bf16_widen(_mm256_loadu_si256((const void *)((const char *)p + 2 * i)));
	case PHUB_DTYPE_FP32:
	default:
		return _mm512_loadu_ps((const char *)p + 4 * i);
	}
}

static KERNELS_ALWAYS_INLINE void
v_store(void *p, size_t i, enum phub_dtype dtype, vec x)
{
	switch (dtype) {
	case PHUB_DTYPE_FP16:
		_mm256_storeu_si256((void *)((char *)p + 2 * i),
				    _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
		break;
	case PHUB_DTYPE_BF16:
		_mm256_storeu_si256((void *)((char *)p + 2 * i), bf16_narrow(x));
		break;
	case PHUB_DTYPE_FP32:
	default:
		_mm512_storeu_ps((char *)p + 4 * i, x);
		break;
	}
}

/* Masked loads do not fault on the lanes they skip, so a tail never reads past the buffer. */
static KERNELS_ALWAYS_INLINE vec
v_load_part(const void *p, size_t i, enum phub_dtype dtype, size_t cnt)
{
	__mmask16 k = (__mmask16)((1u << cnt) - 1);

	switch (dtype) {
	case PHUB_DTYPE_FP16:
		return _mm512_cvtph_ps(
			_mm256_maskz_loadu_epi16(k, (const void *)((const char *)p + 2 * i)));
	case PHUB_DTYPE_BF16:
		return bf16_widen(
			_mm256_maskz_loadu_epi16(k, (const void *)((const char *)p + 2 * i)));
	case PHUB_DTYPE_FP32:
	default:
		return _mm512_maskz_loadu_ps(k, (const char *)p + 4 * i);
	}
}

static KERNELS_ALWAYS_INLINE void
v_store_part(void *p, size_t i, enum phub_dtype dtype, vec x, size_t cnt)
{
	__mmask16 k = (__mmask16)((1u << cnt) - 1);

	switch (dtype) {
	case PHUB_DTYPE_FP16:
		_mm256_mask_storeu_epi16((void *)((char *)p + 2 * i), k,
					 _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
		break;
	case PHUB_DTYPE_BF16:
		_mm256_mask_storeu_epi16((void *)((char *)p + 2 * i), k, bf16_narrow(x));
		break;
	case PHUB_DTYPE_FP32:
	default:
		_mm512_mask_storeu_ps((char *)p + 4 * i, k, x);
		break;
	}
}

#include "kernels_simd.h"

const struct phub_kernels kernels_avx512 = {
	.isa = PHUB_ISA_AVX512,
	.first = avx512_first,
	.add = avx512_add,
	.sum = avx512_sum,
	.last = avx512_last,
	.to_wire = avx512_to_wire,
};
