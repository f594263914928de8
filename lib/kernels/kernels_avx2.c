/* SPDX-License-Identifier: BSD-3-Clause */
/* The AVX2 kernels (with F16C): 8 floats per vector; built with AVX2 flags. */

#include <immintrin.h>

#include "kernels_priv.h"

/*
 * This file alone is compiled with -mavx2 -mfma -mf16c (see meson.build);
 * nothing in it runs before phub_kernels_isa_supported() said yes. FMA is
 * enabled for the instruction set the compiler may pick, not used: the
 * kernels must give the scalar reference's bits (kernels_simd.h).
 */

/*
 * Per-ISA twins: the primitives below have the names and shapes of those in kernels_avx512.c,
 * each wrapping this ISA's intrinsic, so that kernels_simd.h writes every kernel once over
 * them. Their likeness is the design, not a copy to fold away.
 */

typedef __m256 vec;
#define VW 8
#define SIMD_NAME(x) avx2_##x

static KERNELS_ALWAYS_INLINE vec
v_set1(float x)
{
	return _mm256_set1_ps(x);
}

static KERNELS_ALWAYS_INLINE vec
v_add(vec a, vec b)
{
	return _mm256_add_ps(a, b);
}

static KERNELS_ALWAYS_INLINE vec
v_sub(vec a, vec b)
{
	return _mm256_sub_ps(a, b);
}

static KERNELS_ALWAYS_INLINE vec
v_mul(vec a, vec b)
{
	return _mm256_mul_ps(a, b);
}

static KERNELS_ALWAYS_INLINE vec
v_div(vec a, vec b)
{
	return _mm256_div_ps(a, b);
}

static KERNELS_ALWAYS_INLINE vec
v_sqrt(vec a)
{
	return _mm256_sqrt_ps(a);
}

static KERNELS_ALWAYS_INLINE vec
bf16_widen(__m128i h)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Round to nearest even on the bits; see fp32_to_bf16() for the reasoning. */
static KERNELS_ALWAYS_INLINE __m128i
bf16_narrow(vec x)
{
	__m256i b = _mm256_castps_si256(x);
	__m256i hi = _mm256_srli_epi32(b, 16);
	__m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
	__m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
	__m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
	__m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));

	r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
	/* Every lane is at most 0xffff, so the unsigned saturation of packus never bites. */
	return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* Byte arithmetic: a wire payload of 2-byte elements may start at an odd address. */
static KERNELS_ALWAYS_INLINE vec
v_load(const void *p, size_t i, enum phub_dtype dtype)
{
	switch (dtype) {
	case PHUB_DTYPE_FP16:
		return _mm256_cvtph_ps(_mm_loadu_si128((const void *)((const char *)p + 2 * i)));
	case PHUB_DTYPE_BF16:
		return bf16_widen(_mm_loadu_si128((const void *)((const char *)p + 2 * i)));
	case PHUB_DTYPE_FP32:
	default:
		return _mm256_loadu_ps((const void *)((const char *)p + 4 * i));
	}
}

static KERNELS_ALWAYS_INLINE void
v_store(void *p, size_t i, enum phub_dtype dtype, vec x)
{
	switch (dtype) {
	case PHUB_DTYPE_FP16:
		_mm_storeu_si128((void *)((char *)p + 2 * i),
				 _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
		break;
	case PHUB_DTYPE_BF16:
		_mm_storeu_si128((void *)((char *)p + 2 * i), bf16_narrow(x));
		break;
	case PHUB_DTYPE_FP32:
	default:
		_mm256_storeu_ps((void *)((char *)p + 4 * i), x);
		break;
	}
}

/*
 * AVX2 has no 16-bit masked load, so a tail goes through a zeroed vector on the
 * stack and then takes the same vector path as the body: the same bits, and
 * never a read or write past the buffer.
 */
static KERNELS_ALWAYS_INLINE vec
v_load_part(const void *p, size_t i, enum phub_dtype dtype, size_t cnt)
{
	size_t esize = phub_dtype_size(dtype);
	unsigned char tmp[VW * sizeof(float)] = { 0 };

	memcpy(tmp, (const char *)p + esize * i, esize * cnt);
	return v_load(tmp, 0, dtype);
}

static KERNELS_ALWAYS_INLINE void
v_store_part(void *p, size_t i, enum phub_dtype dtype, vec x, size_t cnt)
{
	size_t esize = phub_dtype_size(dtype);
	unsigned char tmp[VW * sizeof(float)];

	v_store(tmp, 0, dtype, x);
	memcpy((char *)p + esize * i, tmp, esize * cnt);
}

#include "kernels_simd.h"

const struct phub_kernels kernels_avx2 = {
	.isa = PHUB_ISA_AVX2,
	.first = avx2_first,
	.add = avx2_add,
	.sum = avx2_sum,
	.last = avx2_last,
	.to_wire = avx2_to_wire,
};
