/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/kernels: conversions, sums and fused steps on every ISA this CPU runs. */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "phub_kernels.h"

/* Longest segment every test walks through, element by element. */
#define MAX_LEN 300
/* Room on each side of a buffer, filled with a pattern that must survive every kernel. */
#define GUARD 64
#define GUARD_BYTE 0xa5

/*
 * Check's ck_assert writes a mark to its log on every check that passes; the
 * loops below check millions of values, so they call into Check only on a
 * failure.
 */
#define EXPECT(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond))                                                                       \
			ck_abort_msg(__VA_ARGS__);                                                 \
	} while (0)

/* Deterministic xorshift64*: a failure reproduces bit for bit. */
static uint64_t rng_state;

static void
rng_seed(uint64_t seed)
{
	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
}

static uint32_t
rng_u32(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* Uniform in [lo, hi). */
static float
rng_float(float lo, float hi)
{
	return lo + (hi - lo) * (float)(rng_u32() >> 8) * (1.0f / 16777216.0f);
}

/* A float whose magnitude spans 2^-20..2^20, so that sums round in every way. */
static float
rng_wide(void)
{
	float m = rng_float(1.0f, 2.0f);

	return ldexpf((rng_u32() & 1) ? -m : m, (int)(rng_u32() % 41) - 20);
}

/* Same bits, or both NaN: C leaves an arithmetic NaN's payload to the hardware's operand order. */
static bool
same_float(float a, float b)
{
	return phub_f32_bits(a) == phub_f32_bits(b) || (isnan(a) && isnan(b));
}

/* The first index where two fp32 arrays differ, or -1. */
static long
first_float_diff(const float *a, const float *b, size_t n)
{
	float x, y;
	size_t i;

	for (i = 0; i < n; i++) {
		memcpy(&x, a + i, sizeof(x));
		memcpy(&y, b + i, sizeof(y));
		if (!same_float(x, y))
			return (long)i;
	}
	return -1;
}

/*
 * A buffer with GUARD bytes of pattern before and after the part the kernel
 * may touch; the kernels write through pointers at odd offsets inside it.
 */
struct gbuf {
	unsigned char *mem;
	size_t size;
};

static void
gbuf_init(struct gbuf *g, size_t size)
{
	g->size = size;
	g->mem = malloc(size + 2 * GUARD);
	ck_assert_ptr_nonnull(g->mem);
	memset(g->mem, GUARD_BYTE, size + 2 * GUARD);
}

static void *
gbuf_at(struct gbuf *g, size_t byte_offset)
{
	return g->mem + GUARD + byte_offset;
}

/* True when nothing outside [off, off + len) changed. */
static bool
gbuf_guards_intact(const struct gbuf *g, size_t off, size_t len)
{
	size_t i;

	for (i = 0; i < GUARD + off; i++)
		if (g->mem[i] != GUARD_BYTE)
			return false;
	for (i = GUARD + off + len; i < g->size + 2 * GUARD; i++)
		if (g->mem[i] != GUARD_BYTE)
			return false;
	return true;
}

static void
gbuf_reset(struct gbuf *g)
{
	memset(g->mem, GUARD_BYTE, g->size + 2 * GUARD);
}

static void
gbuf_free(struct gbuf *g)
{
	free(g->mem);
}

/*
 * The SIMD implementations this CPU runs, in *out; prints why the others are
 * skipped, once per test. Returns how many.
 */
static unsigned int
simd_variants(const struct phub_kernels **out, const char *test)
{
	enum phub_isa isa;
	unsigned int n = 0;

	for (isa = PHUB_ISA_AVX2; isa < PHUB_ISA_COUNT; isa++) {
		out[n] = phub_kernels_for_isa(isa);
		if (out[n] == NULL) {
			fprintf(stderr, "%s: %s skipped: this CPU does not support it\n", test,
				phub_kernels_isa_name(isa));
			continue;
		}
		n++;
	}
	return n;
}

static const struct phub_kernels *
scalar(void)
{
	const struct phub_kernels *k = phub_kernels_for_isa(PHUB_ISA_SCALAR);

	ck_assert_ptr_nonnull(k);
	return k;
}

/* fp32 inputs whose conversion is the hard part: every class and every rounding edge. */
struct conv_case {
	uint32_t f32;
	uint16_t fp16;
	uint16_t bf16;
};

static const struct conv_case conv_cases[] = {
	{ 0x00000000, 0x0000, 0x0000 }, /* +0 */
	{ 0x80000000, 0x8000, 0x8000 }, /* -0 */
	{ 0x3f800000, 0x3c00, 0x3f80 }, /* 1 */
	{ 0xbf800000, 0xbc00, 0xbf80 }, /* -1 */
	{ 0x7f800000, 0x7c00, 0x7f80 }, /* +Inf */
	{ 0xff800000, 0xfc00, 0xff80 }, /* -Inf */
	{ 0x7fc00000, 0x7e00, 0x7fc0 }, /* quiet NaN */
	{ 0xffc00000, 0xfe00, 0xffc0 }, /* negative quiet NaN */
	{ 0x7f800001, 0x7e00, 0x7fc0 }, /* signalling NaN, payload only in low bits: quietened */
	{ 0x7fa02000, 0x7f01, 0x7fe0 }, /* signalling NaN, payload kept in the top bits */
	{ 0xff812345, 0xfe09, 0xffc1 }, /* negative signalling NaN */
	{ 0x7fffffff, 0x7fff, 0x7fff }, /* NaN with every payload bit */
	{ 0x7f7fffff, 0x7c00, 0x7f80 }, /* FLT_MAX: Inf in both (bf16: above the midpoint) */
	{ 0xff7fffff, 0xfc00, 0xff80 }, /* -FLT_MAX */
	{ 0x00000001, 0x0000, 0x0000 }, /* smallest fp32 denormal */
	{ 0x807fffff, 0x8000, 0x8080 }, /* largest negative denormal: bf16 rounds up to normal */
	{ 0x00008000, 0x0000, 0x0000 }, /* bf16 tie between 0 and its smallest denormal: even */
	{ 0x00018000, 0x0000, 0x0002 }, /* bf16 tie between denormals 1 and 2: even */
	{ 0x00400000, 0x0000, 0x0040 }, /* fp32 denormal that bf16 keeps exactly */
	{ 0x00800000, 0x0000, 0x0080 }, /* FLT_MIN */
	{ 0x477fe000, 0x7bff, 0x4780 }, /* 65504: the largest half */
	{ 0x477fefff, 0x7bff, 0x4780 }, /* just below the half overflow midpoint */
	{ 0x477ff000, 0x7c00, 0x4780 }, /* 65520: the midpoint, rounds to Inf */
	{ 0xc77ff000, 0xfc00, 0xc780 }, /* -65520 */
	{ 0x38800000, 0x0400, 0x3880 }, /* 2^-14: smallest normal half */
	{ 0x387fc000, 0x03ff, 0x3880 }, /* largest subnormal half (bf16 rounds up) */
	{ 0x387fe000, 0x0400, 0x3880 }, /* half tie between 0x03ff and 0x0400: even is 0x0400 */
	{ 0x33800000, 0x0001, 0x3380 }, /* 2^-24: smallest subnormal half */
	{ 0x33000000, 0x0000, 0x3300 }, /* 2^-25: tie between 0 and 2^-24, even is 0 */
	{ 0x33000001, 0x0001, 0x3300 }, /* just above that tie */
	{ 0x33c00000, 0x0002, 0x33c0 }, /* 1.5 * 2^-24: tie, even is 2 */
	{ 0x34200000, 0x0002, 0x3420 }, /* 2.5 * 2^-24: tie, even is 2 */
	{ 0x32ffffff, 0x0000, 0x3300 }, /* below 2^-25: 0 (bf16 rounds up) */
	{ 0x3f801000, 0x3c00, 0x3f80 }, /* 1 + 2^-11: half tie, even is 1 */
	{ 0x3f803000, 0x3c02, 0x3f80 }, /* 1 + 3 * 2^-11: half tie, even is 1 + 2^-9 */
	{ 0x3f801001, 0x3c01, 0x3f80 }, /* just above the half tie */
	{ 0x3f808000, 0x3c04, 0x3f80 }, /* 1 + 2^-8: bf16 tie, even is 1 */
	{ 0x3f818000, 0x3c0c, 0x3f82 }, /* 1 + 3 * 2^-8: bf16 tie, even is 1 + 2^-6 */
	{ 0x3f808001, 0x3c04, 0x3f81 }, /* just above the bf16 tie */
	{ 0x7f7f8000, 0x7c00, 0x7f80 }, /* bf16 tie at the top: odd 0x7f7f rounds up to Inf */
	{ 0x7f7f7fff, 0x7c00, 0x7f7f }, /* just below: the largest bf16 */
	{ 0x40490fdb, 0x4248, 0x4049 }, /* pi */
};

#define N_CONV_CASES (sizeof(conv_cases) / sizeof(conv_cases[0]))

/* --- dtype and dispatch --------------------------------------------------------------------- */

START_TEST(test_dtype_values_and_sizes_match_the_wire)
{
	ck_assert_int_eq(PHUB_DTYPE_FP32, 0);
	ck_assert_int_eq(PHUB_DTYPE_FP16, 1);
	ck_assert_int_eq(PHUB_DTYPE_BF16, 2);
	ck_assert_uint_eq(phub_dtype_size(PHUB_DTYPE_FP32), 4);
	ck_assert_uint_eq(phub_dtype_size(PHUB_DTYPE_FP16), 2);
	ck_assert_uint_eq(phub_dtype_size(PHUB_DTYPE_BF16), 2);
	ck_assert_uint_eq(phub_dtype_size((enum phub_dtype)3), 0);
}
END_TEST

START_TEST(test_get_returns_the_best_supported_isa)
{
	enum phub_isa best = PHUB_ISA_SCALAR;
	const struct phub_kernels *k;

	if (phub_kernels_isa_supported(PHUB_ISA_AVX2))
		best = PHUB_ISA_AVX2;
	if (phub_kernels_isa_supported(PHUB_ISA_AVX512))
		best = PHUB_ISA_AVX512;
	k = phub_kernels_get();
	ck_assert_ptr_nonnull(k);
	ck_assert_int_eq(k->isa, best);
	ck_assert_ptr_nonnull(k->first);
	ck_assert_ptr_nonnull(k->add);
	ck_assert_ptr_nonnull(k->sum);
	ck_assert_ptr_nonnull(k->last);
	ck_assert_ptr_nonnull(k->to_wire);
	fprintf(stderr, "phub_kernels_get: %s\n", phub_kernels_isa_name(k->isa));
}
END_TEST

START_TEST(test_select_forces_an_isa_and_rejects_unknown_ones)
{
	enum phub_isa isa;

	ck_assert_int_eq(phub_kernels_select(PHUB_ISA_SCALAR), 0);
	ck_assert_int_eq(phub_kernels_get()->isa, PHUB_ISA_SCALAR);
	for (isa = PHUB_ISA_AVX2; isa < PHUB_ISA_COUNT; isa++) {
		if (phub_kernels_isa_supported(isa)) {
			ck_assert_int_eq(phub_kernels_select(isa), 0);
			ck_assert_int_eq(phub_kernels_get()->isa, isa);
			ck_assert_int_eq(phub_kernels_for_isa(isa)->isa, isa);
		} else {
			ck_assert_int_eq(phub_kernels_select(isa), -ENOTSUP);
			errno = 0;
			ck_assert_ptr_null(phub_kernels_for_isa(isa));
			ck_assert_int_eq(errno, ENOTSUP);
		}
	}
	ck_assert_int_eq(phub_kernels_select((enum phub_isa)PHUB_ISA_COUNT), -EINVAL);
	errno = 0;
	ck_assert_ptr_null(phub_kernels_for_isa((enum phub_isa)7));
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST

START_TEST(test_names_of_isas_and_optimizers_round_trip)
{
	enum phub_opt_type t, parsed;

	ck_assert_str_eq(phub_kernels_isa_name(PHUB_ISA_SCALAR), "scalar");
	ck_assert_str_eq(phub_kernels_isa_name(PHUB_ISA_AVX2), "avx2");
	ck_assert_str_eq(phub_kernels_isa_name(PHUB_ISA_AVX512), "avx512");
	ck_assert_str_eq(phub_kernels_isa_name((enum phub_isa)9), "unknown");
	for (t = PHUB_OPT_NONE; t < PHUB_OPT_COUNT; t++) {
		ck_assert_ptr_nonnull(phub_opt_type_name(t));
		parsed = (enum phub_opt_type)99;
		ck_assert_int_eq(phub_opt_type_parse(phub_opt_type_name(t), &parsed), 0);
		ck_assert_int_eq(parsed, t);
	}
	ck_assert_str_eq(phub_opt_type_name(PHUB_OPT_NESTEROV), "nesterov");
	ck_assert_ptr_null(phub_opt_type_name((enum phub_opt_type)PHUB_OPT_COUNT));
	ck_assert_int_eq(phub_opt_type_parse("lamb", &parsed), -EINVAL);
	ck_assert_int_eq(phub_opt_type_parse(NULL, &parsed), -EINVAL);
}
END_TEST

/* --- optimizer parameters and step scalars -------------------------------------------------- */

START_TEST(test_params_check_rejects_out_of_range_hyperparameters)
{
	struct phub_optimizer_params ok = {
		.type = PHUB_OPT_ADAM, .lr = 1e-3f, .momentum = 0.9f, .weight_decay = 1e-4f,
		.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	};
	struct phub_optimizer_params p;

	ck_assert_int_eq(phub_optimizer_params_check(&ok), 0);
	p = ok, p.lr = -1.0f;
	ck_assert_int_eq(phub_optimizer_params_check(&p), -EINVAL);
	p = ok, p.lr = NAN;
	ck_assert_int_eq(phub_optimizer_params_check(&p), -EINVAL);
	p = ok, p.weight_decay = -1e-4f;
	ck_assert_int_eq(phub_optimizer_params_check(&p), -EINVAL);
	p = ok, p.beta1 = 1.0f;
	ck_assert_int_eq(phub_optimizer_params_check(&p), -EINVAL);
	p = ok, p.beta2 = -0.1f;
	ck_assert_int_eq(phub_optimizer_params_check(&p), -EINVAL);
	p = ok, p.eps = 0.0f;
	ck_assert_int_eq(phub_optimizer_params_check(&p), -EINVAL);
	p = ok, p.type = PHUB_OPT_NESTEROV, p.momentum = 1.0f;
	ck_assert_int_eq(phub_optimizer_params_check(&p), -EINVAL);
	/* Adam's betas do not matter to SGD. */
	p = ok, p.type = PHUB_OPT_SGD, p.beta1 = 5.0f, p.eps = 0.0f;
	ck_assert_int_eq(phub_optimizer_params_check(&p), 0);
	p = ok, p.type = (enum phub_opt_type)PHUB_OPT_COUNT;
	ck_assert_int_eq(phub_optimizer_params_check(&p), -EINVAL);
	ck_assert_int_eq(phub_optimizer_params_check(NULL), -EINVAL);
}
END_TEST

START_TEST(test_step_init_computes_scale_and_bias_corrections)
{
	struct phub_optimizer_params p = {
		.type = PHUB_OPT_ADAM, .lr = 0.5f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	};
	struct phub_opt_step s;
	double b1 = (double)p.beta1, b2 = (double)p.beta2;

	ck_assert_int_eq(phub_opt_step_init(&s, &p, 1, 4), 0);
	ck_assert_float_eq(s.grad_scale, 0.25f);
	ck_assert_float_eq(s.lr, 0.5f);
	ck_assert_float_eq(s.adam_c1, (float)(1.0 / (1.0 - b1)));
	ck_assert_float_eq(s.adam_c2, (float)(1.0 / sqrt(1.0 - b2)));
	ck_assert_int_eq(phub_opt_step_init(&s, &p, 1000, 3), 0);
	ck_assert_float_eq(s.grad_scale, (float)(1.0 / 3.0));
	/* The scale of every world size, table or not, is the run-time division's bits. */
	for (volatile unsigned int n = 1; n <= 1000; n++) {
		ck_assert_int_eq(phub_opt_step_init(&s, &p, 1000, n), 0);
		ck_assert_uint_eq(phub_f32_bits(s.grad_scale), phub_f32_bits((float)(1.0 / n)));
	}
	ck_assert_float_eq(s.adam_c1, (float)(1.0 / (1.0 - pow(b1, 1000))));
	ck_assert_float_eq(s.adam_c2, (float)(1.0 / sqrt(1.0 - pow(b2, 1000))));
	/* beta1 = 0 means no averaging and no correction. */
	p.beta1 = 0.0f;
	ck_assert_int_eq(phub_opt_step_init(&s, &p, 7, 1), 0);
	ck_assert_float_eq(s.adam_c1, 1.0f);
	ck_assert_int_eq(phub_opt_step_init(&s, &p, 0, 1), -EINVAL);
	ck_assert_int_eq(phub_opt_step_init(&s, &p, 1, 0), -EINVAL);
	ck_assert_uint_eq(phub_opt_state_count(PHUB_OPT_SGD), 0);
	ck_assert_uint_eq(phub_opt_state_count(PHUB_OPT_NESTEROV), 1);
	ck_assert_uint_eq(phub_opt_state_count(PHUB_OPT_ADAMW), 2);
}
END_TEST

/* --- conversions ---------------------------------------------------------------------------- */

START_TEST(test_scalar_conversion_rounds_to_nearest_even_on_edge_values)
{
	const struct phub_kernels *k = scalar();
	uint16_t h;
	size_t i;
	float f;

	for (i = 0; i < N_CONV_CASES; i++) {
		f = phub_f32_from_bits(conv_cases[i].f32);
		k->to_wire(&h, PHUB_DTYPE_FP16, &f, 1);
		EXPECT(h == conv_cases[i].fp16, "fp16 of %08x: %04x, expected %04x",
		       conv_cases[i].f32, h, conv_cases[i].fp16);
		k->to_wire(&h, PHUB_DTYPE_BF16, &f, 1);
		EXPECT(h == conv_cases[i].bf16, "bf16 of %08x: %04x, expected %04x",
		       conv_cases[i].f32, h, conv_cases[i].bf16);
	}
}
END_TEST

/*
 * Every half and every bfloat16 widens exactly: the value is checked by
 * arithmetic in double, independently of the bit tricks of the library.
 */
START_TEST(test_scalar_widening_is_exact_for_every_16_bit_pattern)
{
	const struct phub_kernels *k = scalar();
	uint32_t x, e, m;
	uint16_t h, back;
	double want;
	float f;

	for (x = 0; x <= 0xffff; x++) {
		h = (uint16_t)x;
		k->first(&f, &h, PHUB_DTYPE_FP16, 1);
		e = (x >> 10) & 0x1f;
		m = x & 0x3ff;
		if (e == 0x1f && m != 0) {
			EXPECT(isnan(f) && (phub_f32_bits(f) & 0x400000) != 0 &&
			       ((phub_f32_bits(f) >> 13) & 0x1ff) == (m & 0x1ff) &&
			       !!signbit(f) == ((x & 0x8000) != 0),
			       "fp16 NaN %04x widened to %08x", x, phub_f32_bits(f));
		} else {
			want = e == 0x1f ? INFINITY :
			       e == 0	 ? ldexp((double)m, -24) :
					   ldexp((double)(m | 0x400), (int)e - 25);
			if (x & 0x8000)
				want = -want;
			EXPECT((double)f == want && !signbit(f) == !signbit(want),
			       "fp16 %04x widened to %a, expected %a", x, (double)f, want);
			/* A value that is a half converts back to itself. */
			k->to_wire(&back, PHUB_DTYPE_FP16, &f, 1);
			EXPECT(back == h, "fp16 %04x came back as %04x", x, back);
		}
		k->first(&f, &h, PHUB_DTYPE_BF16, 1);
		EXPECT(phub_f32_bits(f) == x << 16, "bf16 %04x widened to %08x", x,
		       phub_f32_bits(f));
	}
}
END_TEST

#ifdef __FLT16_MAX__
/* Where the compiler has _Float16, its conversion is an independent oracle for rounding. */
START_TEST(test_scalar_fp16_rounding_agrees_with_the_compiler)
{
	const struct phub_kernels *k = scalar();
	_Float16 want;
	uint16_t h, w;
	float f;
	int i;

	rng_seed(11);
	for (i = 0; i < 1000000; i++) {
		/* Exponents around the half range, where every rounding path lives. */
		f = phub_f32_from_bits((rng_u32() & 0x807fffff) |
				       ((uint32_t)(96 + rng_u32() % 60) << 23));
		want = (_Float16)f;
		memcpy(&w, &want, sizeof(w));
		k->to_wire(&h, PHUB_DTYPE_FP16, &f, 1);
		EXPECT(h == w, "fp16 of %08x: %04x, compiler says %04x", phub_f32_bits(f), h, w);
	}
}
END_TEST
#endif

/* Narrow n elements at src with one SIMD ISA, at an element offset (3: plus one byte). */
static void
check_narrow_case(const struct phub_kernels *simd, enum phub_dtype dt, const float *src, size_t n,
		  size_t off)
{
	unsigned char got_mem[2 * (MAX_LEN + 4) + 8];
	size_t start = 2 * off + (off == 3 ? 1 : 0), i;
	uint16_t want[MAX_LEN + 4];

	scalar()->to_wire(want, dt, src + off, n);
	memset(got_mem, GUARD_BYTE, sizeof(got_mem));
	simd->to_wire(got_mem + start, dt, src + off, n);
	EXPECT(memcmp(got_mem + start, want, 2 * n) == 0, "%s to_wire dtype %d n %zu off %zu",
	       phub_kernels_isa_name(simd->isa), dt, n, off);
	for (i = 0; i < sizeof(got_mem); i++)
		EXPECT((i >= start && i < start + 2 * n) || got_mem[i] == GUARD_BYTE,
		       "%s to_wire n %zu wrote byte %zu", phub_kernels_isa_name(simd->isa), n, i);
}

START_TEST(test_simd_conversions_match_scalar_bit_for_bit)
{
	static float wide_ref[1 << 16], wide_simd[1 << 16];
	static uint16_t pat[1 << 16], narrow_ref[1 << 16];
	const struct phub_kernels *simd[PHUB_ISA_COUNT];
	const struct phub_kernels *ref = scalar();
	unsigned int nsimd = simd_variants(simd, "conversions");
	unsigned char odd[2 * MAX_LEN + 1];
	float src[MAX_LEN + 4];
	unsigned int v, round;
	enum phub_dtype dt;
	size_t n, off, i;

	/* Edge values repeated at every position of a vector, then random bit patterns. */
	rng_seed(3);
	for (i = 0; i < MAX_LEN + 4; i++)
		src[i] = phub_f32_from_bits(i < 4 * N_CONV_CASES ?
					    conv_cases[i % N_CONV_CASES].f32 : rng_u32());
	for (i = 0; i <= 0xffff; i++)
		pat[i] = (uint16_t)i;
	for (v = 0; v < nsimd; v++) {
		for (dt = PHUB_DTYPE_FP16; dt <= PHUB_DTYPE_BF16; dt++) {
			/* Narrowing: every length, element offsets 0..3 and an odd byte address. */
			for (n = 0; n <= MAX_LEN; n++)
				for (off = 0; off < 4; off++)
					check_narrow_case(simd[v], dt, src, n, off);
			/* Widening: all 65536 patterns, and from an odd byte address. */
			ref->first(wide_ref, pat, dt, 1 << 16);
			simd[v]->first(wide_simd, pat, dt, 1 << 16);
			for (i = 0; i <= 0xffff; i++)
				EXPECT(phub_f32_bits(wide_ref[i]) == phub_f32_bits(wide_simd[i]),
				       "%s widen dtype %d %04zx: %08x, scalar %08x",
				       phub_kernels_isa_name(simd[v]->isa), dt, i,
				       phub_f32_bits(wide_simd[i]), phub_f32_bits(wide_ref[i]));
			memcpy(odd + 1, pat + 7, 2 * MAX_LEN);
			simd[v]->first(wide_simd, odd + 1, dt, MAX_LEN);
			ck_assert_int_eq(first_float_diff(wide_simd, wide_ref + 7, MAX_LEN), -1);
		}
		/* 2^20 random fp32 patterns through both narrowings. */
		rng_seed(5);
		for (round = 0; round < 16; round++) {
			for (i = 0; i < (1u << 16); i++)
				wide_ref[i] = phub_f32_from_bits(rng_u32());
			for (dt = PHUB_DTYPE_FP16; dt <= PHUB_DTYPE_BF16; dt++) {
				ref->to_wire(narrow_ref, dt, wide_ref, 1 << 16);
				simd[v]->to_wire(wide_simd, dt, wide_ref, 1 << 16);
				ck_assert_int_eq(memcmp(narrow_ref, wide_simd, 2 << 16), 0);
			}
		}
	}
}
END_TEST

/* --- sums ----------------------------------------------------------------------------------- */

/* Inputs in dtype, mostly wide-range numbers, with a few specials for propagation. */
static void
fill_wire(void *dst, enum phub_dtype dt, size_t n)
{
	float tmp[MAX_LEN + 8];
	size_t i;

	for (i = 0; i < n; i++) {
		tmp[i] = rng_wide();
		if (rng_u32() % 61 == 0)
			tmp[i] = phub_f32_from_bits(conv_cases[rng_u32() % N_CONV_CASES].f32);
	}
	scalar()->to_wire(dst, dt, tmp, n);
}

enum sum_op { OP_FIRST, OP_ADD };

/*
 * Where a source of element offset off starts, in bytes: off 3 adds one byte
 * to a 2-byte dtype (an odd address) and two to fp32, which is where the
 * engine finds a PUSH payload (34 bytes past a cache line in an RX mbuf).
 */
static size_t
byte_off(enum phub_dtype dt, size_t off)
{
	size_t esize = phub_dtype_size(dt);

	return esize * off + (off == 3 ? (esize == 2 ? 1 : 2) : 0);
}

/*
 * One first() or add() of n elements: acc at element offset off + 1, the
 * source at byte_off(dt, off).
 */
static void
check_sum_case(const struct phub_kernels *simd, enum sum_op op, enum phub_dtype dt, size_t n,
	       size_t off, struct gbuf *acc, struct gbuf *src)
{
	size_t esize = phub_dtype_size(dt);
	size_t soff = byte_off(dt, off);
	size_t aoff = 4 * ((off + 1) % 4);
	float want[MAX_LEN + 4];
	void *s;
	float *a;

	gbuf_reset(src);
	s = gbuf_at(src, soff);
	fill_wire(s, dt, n);
	gbuf_reset(acc);
	a = gbuf_at(acc, aoff);
	fill_wire(a, PHUB_DTYPE_FP32, n);
	memcpy(want, a, 4 * n);
	if (op == OP_FIRST) {
		scalar()->first(want, s, dt, n);
		simd->first(a, s, dt, n);
	} else {
		scalar()->add(want, s, dt, n);
		simd->add(a, s, dt, n);
	}
	EXPECT(first_float_diff(a, want, n) == -1, "%s dtype %d n %zu off %zu: element %ld",
	       phub_kernels_isa_name(simd->isa), dt, n, off, first_float_diff(a, want, n));
	EXPECT(gbuf_guards_intact(acc, aoff, 4 * n), "n %zu: a write outside acc", n);
	EXPECT(gbuf_guards_intact(src, soff, esize * n), "n %zu: a write to src", n);
}

static void
check_sum_op(enum sum_op op)
{
	const struct phub_kernels *simd[PHUB_ISA_COUNT];
	unsigned int nsimd = simd_variants(simd, op == OP_FIRST ? "first" : "add");
	struct gbuf acc, src;
	enum phub_dtype dt;
	size_t n, off;
	unsigned int v;

	gbuf_init(&acc, 4 * (MAX_LEN + 4));
	gbuf_init(&src, 4 * (MAX_LEN + 4) + 2);
	for (v = 0; v < nsimd; v++) {
		for (dt = PHUB_DTYPE_FP32; dt <= PHUB_DTYPE_BF16; dt++) {
			rng_seed(100 + dt);
			for (n = 0; n <= MAX_LEN; n++)
				for (off = 0; off < 4; off++)
					check_sum_case(simd[v], op, dt, n, off, &acc, &src);
		}
	}
	gbuf_free(&acc);
	gbuf_free(&src);
}

START_TEST(test_simd_first_arrival_matches_scalar_for_every_length_and_offset)
{
	check_sum_op(OP_FIRST);
}
END_TEST

START_TEST(test_simd_later_arrival_matches_scalar_for_every_length_and_offset)
{
	check_sum_op(OP_ADD);
}
END_TEST

/*
 * The batched sum of k arrivals gives the bits of first and adds one by one,
 * on every ISA: the engine may batch or not and the model does not change.
 */
START_TEST(test_sum_of_k_equals_one_arrival_at_a_time)
{
	const struct phub_kernels *all[PHUB_ISA_COUNT];
	const struct phub_kernels *ref = scalar();
	unsigned char srcmem[5][4 * (MAX_LEN + 4) + 8];
	float acc0[MAX_LEN + 4], want[MAX_LEN + 4], got[MAX_LEN + 8];
	unsigned int nall, v, k, j, accumulate;
	const void *srcs[5];
	enum phub_dtype dt;
	size_t n, esize;
	void *sp;

	all[0] = ref;
	nall = 1 + simd_variants(all + 1, "sum");
	for (v = 0; v < nall; v++) {
		for (dt = PHUB_DTYPE_FP32; dt <= PHUB_DTYPE_BF16; dt++) {
			esize = phub_dtype_size(dt);
			rng_seed(200 + dt);
			for (n = 0; n <= MAX_LEN; n += 1 + n / 16) {
				for (k = 1; k <= 5; k++) {
					/* Each source at its own element (and byte) offset. */
					for (j = 0; j < k; j++) {
						sp = srcmem[j] + esize * ((n + j) % 4) +
						     (j % 2) * (esize == 2 ? 1 : 2);
						fill_wire(sp, dt, n);
						srcs[j] = sp;
					}
					fill_wire(acc0, PHUB_DTYPE_FP32, n);
					for (accumulate = 0; accumulate < 2; accumulate++) {
						/* The reference: one arrival per call, in order. */
						memcpy(want, acc0, 4 * n);
						if (!accumulate)
							ref->first(want, srcs[0], dt, n);
						for (j = accumulate ? 0 : 1; j < k; j++)
							ref->add(want, srcs[j], dt, n);
						memcpy(got + 1, acc0, 4 * n);
						got[n + 1] = 42.0f;
						all[v]->sum(got + 1, accumulate, srcs, k, dt, n);
						EXPECT(first_float_diff(got + 1, want, n) == -1,
						       "%s sum dtype %d n %zu k %u acc %u",
						       phub_kernels_isa_name(all[v]->isa), dt, n,
						       k, accumulate);
						EXPECT(got[n + 1] == 42.0f, "sum wrote past n");
					}
				}
			}
		}
	}
}
END_TEST

/* Hyper-parameters of the fused-step tests: weight decay on, so every term is exercised. */
static const struct phub_optimizer_params test_params[PHUB_OPT_COUNT] = {
	[PHUB_OPT_NONE] = { .type = PHUB_OPT_NONE },
	[PHUB_OPT_SGD] = { .type = PHUB_OPT_SGD, .lr = 0.1f, .weight_decay = 1e-2f },
	[PHUB_OPT_MOMENTUM] = { .type = PHUB_OPT_MOMENTUM, .lr = 0.1f, .momentum = 0.9f,
				.weight_decay = 1e-2f },
	[PHUB_OPT_NESTEROV] = { .type = PHUB_OPT_NESTEROV, .lr = 0.1f, .momentum = 0.9f,
				.weight_decay = 1e-2f },
	[PHUB_OPT_ADAM] = { .type = PHUB_OPT_ADAM, .lr = 1e-2f, .weight_decay = 1e-2f,
			    .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f },
	[PHUB_OPT_ADAMW] = { .type = PHUB_OPT_ADAMW, .lr = 1e-2f, .weight_decay = 1e-2f,
			     .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f },
};

/* Bytes of each canary buffer below, enough for the k = 0 sum of CANARY_ELEMS elements. */
enum { CANARY_ELEMS = 1000, CANARY_BYTES = CANARY_ELEMS * sizeof(float) };

static bool
canary_intact(const uint8_t *buf)
{
	for (size_t i = 0; i < CANARY_BYTES; i++) {
		if (buf[i] != 0xa5)
			return false;
	}
	return true;
}

/*
 * An empty segment (a key of 0 elements, a zero-length tail) touches no pointer at all: NULL
 * pointers are not read (ASan would stop the run), and real buffers come back byte for byte as
 * they went in, as does the accumulator of a sum of k = 0 arrivals of any length.
 */
START_TEST(test_every_kernel_accepts_an_empty_segment_with_null_pointers)
{
	enum { ACC, SRC, WEIGHT, M, V, OUT, N_BUFS };
	static uint8_t bufs[N_BUFS][CANARY_BYTES] __attribute__((aligned(64)));
	const struct phub_kernels *all[PHUB_ISA_COUNT];
	struct phub_opt_buffers b = { 0 };
	struct phub_opt_buffers real;
	struct phub_opt_step step;
	const void *nosrc = NULL;
	const void *src;
	unsigned int nall, v, i;
	enum phub_opt_type t;
	enum phub_dtype dt;

	memset(bufs, 0xa5, sizeof(bufs));
	src = bufs[SRC];
	all[0] = scalar();
	nall = 1 + simd_variants(all + 1, "empty");
	for (v = 0; v < nall; v++) {
		for (dt = PHUB_DTYPE_FP32; dt <= PHUB_DTYPE_BF16; dt++) {
			all[v]->first(NULL, NULL, dt, 0);
			all[v]->add(NULL, NULL, dt, 0);
			all[v]->sum(NULL, true, &nosrc, 1, dt, 0);
			all[v]->sum(NULL, false, NULL, 0, dt, 1000);
			all[v]->to_wire(NULL, dt, NULL, 0);
			all[v]->first((float *)bufs[ACC], src, dt, 0);
			all[v]->add((float *)bufs[ACC], src, dt, 0);
			all[v]->sum((float *)bufs[ACC], true, &src, 1, dt, 0);
			all[v]->sum((float *)bufs[ACC], false, &src, 0, dt, CANARY_ELEMS);
			all[v]->sum((float *)bufs[ACC], true, &src, 0, dt, CANARY_ELEMS);
			all[v]->to_wire(bufs[OUT], dt, (const float *)bufs[SRC], 0);
			b.grad_dtype = dt;
			b.out_dtype = dt;
			real = (struct phub_opt_buffers){
				.acc = (const float *)bufs[ACC], .grad = src,
				.weight = (float *)bufs[WEIGHT], .m = (float *)bufs[M],
				.v = (float *)bufs[V], .out = bufs[OUT],
				.grad_dtype = dt, .out_dtype = dt,
			};
			for (t = PHUB_OPT_NONE; t < PHUB_OPT_COUNT; t++) {
				phub_opt_step_init(&step, &test_params[t], 1, 2);
				all[v]->last(&b, 0, &test_params[t], &step);
				all[v]->last(&real, 0, &test_params[t], &step);
			}
			for (i = 0; i < N_BUFS; i++)
				ck_assert_msg(canary_intact(bufs[i]),
					      "%s dtype %d: buffer %u written",
					      phub_kernels_isa_name(all[v]->isa), (int)dt, i);
		}
	}
}
END_TEST

/* --- fused last-arrival steps --------------------------------------------------------------- */


/* Which of acc and grad the last step gets. */
enum presence { BOTH, ACC_ONLY, GRAD_ONLY };

/* The state of one segment before the step: the same for the scalar run and the SIMD run. */
struct seg_init {
	float acc[MAX_LEN];
	float w[MAX_LEN];
	float m[MAX_LEN];
	float v[MAX_LEN];
	unsigned char grad[4 * MAX_LEN];
};

static void
seg_init_fill(struct seg_init *si, enum phub_dtype gdt, size_t n)
{
	size_t i;
	float g[MAX_LEN];

	for (i = 0; i < n; i++) {
		si->acc[i] = rng_float(-3.0f, 3.0f);
		si->w[i] = rng_float(-1.0f, 1.0f);
		si->m[i] = rng_float(-0.1f, 0.1f);
		/* v is a running mean of squares: never negative. */
		si->v[i] = i % 7 == 0 ? 0.0f : rng_float(0.0f, 1e-2f);
		g[i] = rng_float(-1.0f, 1.0f);
	}
	scalar()->to_wire(si->grad, gdt, g, n);
}

/*
 * The buffers of one run: each pointer at its own element offset, grad and
 * out at byte_off() (odd addresses, fp32 two bytes past a multiple of 4) when off is 3.
 */
struct seg_run {
	struct gbuf acc, grad, w, m, v, out;
	struct phub_opt_buffers b;
};

static void
seg_run_init(struct seg_run *r)
{
	gbuf_init(&r->acc, 4 * (MAX_LEN + 4));
	gbuf_init(&r->grad, 4 * (MAX_LEN + 4) + 2);
	gbuf_init(&r->w, 4 * (MAX_LEN + 4));
	gbuf_init(&r->m, 4 * (MAX_LEN + 4));
	gbuf_init(&r->v, 4 * (MAX_LEN + 4));
	gbuf_init(&r->out, 4 * (MAX_LEN + 4) + 2);
}

/* fn on each of r's buffers. */
static void
seg_run_each(struct seg_run *r, void (*fn)(struct gbuf *g))
{
	struct gbuf *all[] = { &r->acc, &r->grad, &r->w, &r->m, &r->v, &r->out };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		fn(all[i]);
}

static void
seg_run_free(struct seg_run *r)
{
	seg_run_each(r, gbuf_free);
}

static void
seg_run_prepare(struct seg_run *r, const struct seg_init *si, enum phub_opt_type type,
		enum phub_dtype gdt, int odt, enum presence pr, size_t n, size_t off)
{
	unsigned int states = phub_opt_state_count(type);

	seg_run_each(r, gbuf_reset);
	memset(&r->b, 0, sizeof(r->b));
	r->b.acc = pr == GRAD_ONLY ? NULL : memcpy(gbuf_at(&r->acc, 4 * off), si->acc, 4 * n);
	r->b.grad = pr == ACC_ONLY ? NULL :
				     memcpy(gbuf_at(&r->grad, byte_off(gdt, off)), si->grad,
					    phub_dtype_size(gdt) * n);
	r->b.grad_dtype = gdt;
	r->b.weight = memcpy(gbuf_at(&r->w, 4 * ((off + 1) % 4)), si->w, 4 * n);
	if (states >= 1)
		r->b.m = memcpy(gbuf_at(&r->m, 4 * ((off + 2) % 4)), si->m, 4 * n);
	if (states >= 2)
		r->b.v = memcpy(gbuf_at(&r->v, 4 * ((off + 3) % 4)), si->v, 4 * n);
	if (odt >= 0) {
		r->b.out_dtype = (enum phub_dtype)odt;
		r->b.out = gbuf_at(&r->out, byte_off(r->b.out_dtype, off));
	}
}

/* Neither run wrote outside its buffers. */
static void
seg_run_check_guards(const struct seg_run *r, enum phub_dtype gdt, int odt, size_t n, size_t off)
{
	size_t osize = odt >= 0 ? phub_dtype_size((enum phub_dtype)odt) : 0;
	bool ok;

	ok = gbuf_guards_intact(&r->acc, r->b.acc ? 4 * off : 0, r->b.acc ? 4 * n : 0) &&
	     gbuf_guards_intact(&r->grad, r->b.grad ? byte_off(gdt, off) : 0,
				r->b.grad ? phub_dtype_size(gdt) * n : 0) &&
	     gbuf_guards_intact(&r->w, 4 * ((off + 1) % 4), 4 * n) &&
	     gbuf_guards_intact(&r->m, r->b.m ? 4 * ((off + 2) % 4) : 0, r->b.m ? 4 * n : 0) &&
	     gbuf_guards_intact(&r->v, r->b.v ? 4 * ((off + 3) % 4) : 0, r->b.v ? 4 * n : 0) &&
	     gbuf_guards_intact(&r->out, odt >= 0 ? byte_off((enum phub_dtype)odt, off) : 0,
				osize * n);
	EXPECT(ok, "n %zu off %zu: a write outside the segment's buffers", n, off);
}

/*
 * Tolerance of a fused step against the scalar reference: 0 ulp. The SIMD
 * bodies perform the reference's operations in its order without FMA, so any
 * difference is a bug, not rounding (docs/kernels.md, "Tolerances").
 */
#define LAST_TOLERANCE_ULP 0

static bool
within_ulps(float a, float b, unsigned int ulps)
{
	int64_t ia = (int32_t)phub_f32_bits(a), ib = (int32_t)phub_f32_bits(b);

	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	/* Map the sign-magnitude bits onto a line where adjacent floats differ by 1. */
	ia = ia < 0 ? INT32_MIN - ia : ia;
	ib = ib < 0 ? INT32_MIN - ib : ib;
	return llabs(ia - ib) <= (long long)ulps;
}

/* What one optimizer's fused-step test shares between its cases. */
struct last_ctx {
	enum phub_opt_type type;
	struct phub_opt_step step;
	struct seg_init *si;
	struct seg_run ref;
	struct seg_run simd;
};

static void
check_last_case(struct last_ctx *x, const struct phub_kernels *simd, enum phub_dtype gdt, int odt,
		enum presence pr, size_t n, size_t off)
{
	const struct phub_optimizer_params *p = &test_params[x->type];
	struct seg_run *ref_run = &x->ref, *simd_run = &x->simd;
	const struct phub_opt_step *step = &x->step;
	enum phub_opt_type type = x->type;
	float wire[MAX_LEN];
	size_t i, osize;

	seg_run_prepare(ref_run, x->si, type, gdt, odt, pr, n, off);
	seg_run_prepare(simd_run, x->si, type, gdt, odt, pr, n, off);
	scalar()->last(&ref_run->b, n, p, step);
	simd->last(&simd_run->b, n, p, step);
	for (i = 0; i < n; i++) {
		EXPECT(within_ulps(simd_run->b.weight[i], ref_run->b.weight[i],
				   LAST_TOLERANCE_ULP),
		       "%s %s gdt %d odt %d pr %d n %zu off %zu: w[%zu] %a, scalar %a",
		       phub_kernels_isa_name(simd->isa), phub_opt_type_name(type), gdt, odt,
		       pr, n, off, i, (double)simd_run->b.weight[i],
		       (double)ref_run->b.weight[i]);
		if (simd_run->b.m != NULL)
			EXPECT(within_ulps(simd_run->b.m[i], ref_run->b.m[i], LAST_TOLERANCE_ULP),
			       "%s n %zu: m[%zu] %a, scalar %a", phub_opt_type_name(type), n, i,
			       (double)simd_run->b.m[i], (double)ref_run->b.m[i]);
		if (simd_run->b.v != NULL)
			EXPECT(within_ulps(simd_run->b.v[i], ref_run->b.v[i], LAST_TOLERANCE_ULP),
			       "%s n %zu: v[%zu] %a, scalar %a", phub_opt_type_name(type), n, i,
			       (double)simd_run->b.v[i], (double)ref_run->b.v[i]);
	}
	if (odt >= 0) {
		/* The MODEL payload is the new weight in the wire dtype, nothing else. */
		scalar()->to_wire(wire, (enum phub_dtype)odt, simd_run->b.weight, n);
		osize = phub_dtype_size((enum phub_dtype)odt);
		EXPECT(memcmp(simd_run->b.out, wire, osize * n) == 0,
		       "%s %s odt %d n %zu: MODEL payload is not the converted weight",
		       phub_kernels_isa_name(simd->isa), phub_opt_type_name(type), odt, n);
	}
	seg_run_check_guards(simd_run, gdt, odt, n, off);
}

static void
check_last_type(enum phub_opt_type type)
{
	const struct phub_kernels *simd[PHUB_ISA_COUNT];
	unsigned int nsimd = simd_variants(simd, phub_opt_type_name(type));
	struct last_ctx x = { .type = type };
	enum phub_dtype gdt;
	unsigned int v, c;
	size_t n, off;
	enum presence pr;
	int odt;

	x.si = malloc(sizeof(*x.si));
	ck_assert_ptr_nonnull(x.si);
	seg_run_init(&x.ref);
	seg_run_init(&x.simd);
	ck_assert_int_eq(phub_opt_step_init(&x.step, &test_params[type], 3, 4), 0);
	for (v = 0; v < nsimd; v++) {
		for (gdt = PHUB_DTYPE_FP32; gdt <= PHUB_DTYPE_BF16; gdt++) {
			rng_seed(300 + 10 * type + gdt);
			for (n = 0; n <= MAX_LEN; n++) {
				seg_init_fill(x.si, gdt, n);
				/*
				 * c walks offset x presence x output dtype: all 48 on short
				 * lengths and every 37th, a rotating quarter on the others.
				 */
				for (c = 0; c < 4 * 3 * 4; c++) {
					off = c % 4;
					pr = (enum presence)(c / 4 % 3);
					odt = (int)(c / 12) - 1;
					if (n > 40 && n % 37 != 0 && c % 4 != n % 4)
						continue;
					check_last_case(&x, simd[v], gdt, odt, pr, n, off);
				}
			}
		}
	}
	seg_run_free(&x.ref);
	seg_run_free(&x.simd);
	free(x.si);
}

START_TEST(test_simd_last_arrival_matches_scalar_for_every_optimizer)
{
	check_last_type((enum phub_opt_type)_i);
}
END_TEST

/* --- trajectories against double precision ------------------------------------------------- */

#define TRAJ_LEN 37
#define TRAJ_WORKERS 3
#define TRAJ_STEPS 25

/*
 * The formulas of docs/kernels.md in double, step by step: an independent
 * statement of what each optimizer does, to catch a formula that is wrong in
 * the same way on every ISA.
 */
static void
reference_step(const struct phub_optimizer_params *p, uint64_t t, const double *g_sum, double *w,
	       double *m, double *v, size_t n)
{
	double g, lr = p->lr, wd = p->weight_decay, mu = p->momentum, b1 = p->beta1,
		  b2 = p->beta2, eps = p->eps;
	double c1 = 1.0 / (1.0 - pow(b1, (double)t)), c2 = 1.0 / sqrt(1.0 - pow(b2, (double)t));
	size_t i;

	for (i = 0; i < n; i++) {
		g = g_sum[i] / TRAJ_WORKERS;
		switch (p->type) {
		case PHUB_OPT_NONE:
			w[i] = g;
			break;
		case PHUB_OPT_SGD:
			w[i] -= lr * (g + wd * w[i]);
			break;
		case PHUB_OPT_MOMENTUM:
			m[i] = mu * m[i] + g + wd * w[i];
			w[i] -= lr * m[i];
			break;
		case PHUB_OPT_NESTEROV:
			/* MXNet NAG: mom = mu*mom + g'; w -= lr*(g' + mu*mom), g' = g + wd*w. */
			g += wd * w[i];
			m[i] = mu * m[i] + g;
			w[i] -= lr * (g + mu * m[i]);
			break;
		case PHUB_OPT_ADAM:
			g += wd * w[i];
			m[i] = b1 * m[i] + (1 - b1) * g;
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			w[i] -= lr * (m[i] * c1) / (sqrt(v[i] * c2 * c2) + eps);
			break;
		case PHUB_OPT_ADAMW:
			w[i] *= 1 - lr * wd;
			m[i] = b1 * m[i] + (1 - b1) * g;
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			w[i] -= lr * (m[i] * c1) / (sqrt(v[i] * c2 * c2) + eps);
			break;
		}
	}
}

static void
check_trajectory(enum phub_opt_type type, enum phub_dtype dt)
{
	const struct phub_optimizer_params *p = &test_params[type];
	const struct phub_kernels *k = phub_kernels_get();
	float acc[TRAJ_LEN], w[TRAJ_LEN], m[TRAJ_LEN] = { 0 }, v[TRAJ_LEN] = { 0 };
	float g[TRAJ_LEN], exact[TRAJ_LEN];
	double wd_[TRAJ_LEN], md[TRAJ_LEN] = { 0 }, vd[TRAJ_LEN] = { 0 }, gsum[TRAJ_LEN];
	unsigned char wire[TRAJ_WORKERS][4 * TRAJ_LEN];
	struct phub_opt_buffers b = {
		.acc = acc, .weight = w, .m = m, .v = v, .grad_dtype = dt,
	};
	struct phub_opt_step step;
	unsigned int t, r;
	size_t i;

	for (i = 0; i < TRAJ_LEN; i++) {
		w[i] = 0.5f * sinf((float)i);
		wd_[i] = w[i];
	}
	for (t = 1; t <= TRAJ_STEPS; t++) {
		for (i = 0; i < TRAJ_LEN; i++)
			gsum[i] = 0.0;
		for (r = 0; r < TRAJ_WORKERS; r++) {
			/* A gradient that points back to 0.3 plus worker noise: a real descent. */
			for (i = 0; i < TRAJ_LEN; i++)
				g[i] = (w[i] - 0.3f) + 0.2f * cosf((float)(i * 7 + r * 3 + t));
			scalar()->to_wire(wire[r], dt, g, TRAJ_LEN);
			/* The reference sums the values the wire really carries. */
			scalar()->first(exact, wire[r], dt, TRAJ_LEN);
			for (i = 0; i < TRAJ_LEN; i++)
				gsum[i] += exact[i];
		}
		/* Engine order: first arrival, later arrivals, fused last arrival. */
		k->first(acc, wire[0], dt, TRAJ_LEN);
		for (r = 1; r + 1 < TRAJ_WORKERS; r++)
			k->add(acc, wire[r], dt, TRAJ_LEN);
		b.grad = wire[TRAJ_WORKERS - 1];
		ck_assert_int_eq(phub_opt_step_init(&step, p, t, TRAJ_WORKERS), 0);
		k->last(&b, TRAJ_LEN, p, &step);
		reference_step(p, t, gsum, wd_, md, vd, TRAJ_LEN);
		/* fp32 rounding of a few operations per step, accumulated over the steps. */
		for (i = 0; i < TRAJ_LEN; i++)
			EXPECT(fabs((double)w[i] - wd_[i]) <= 2e-5 * (1.0 + fabs(wd_[i])),
			       "%s %s dtype %d step %u w[%zu] = %.9g, double says %.9g",
			       phub_kernels_isa_name(k->isa), phub_opt_type_name(type), dt, t, i,
			       (double)w[i], wd_[i]);
	}
	/* The weights moved: a step that did nothing would match a reference that did nothing. */
	if (type != PHUB_OPT_NONE)
		ck_assert_double_gt(fabs(wd_[1] - 0.5 * sin(1.0)), 1e-2);
}

START_TEST(test_optimizer_trajectory_follows_the_double_precision_formula)
{
	enum phub_dtype dt;

	for (dt = PHUB_DTYPE_FP32; dt <= PHUB_DTYPE_BF16; dt++)
		check_trajectory((enum phub_opt_type)_i, dt);
}
END_TEST

Suite *
phub_kernels_suite(void)
{
	Suite *s = suite_create("kernels");
	TCase *tc;

	PHUB_TCASE(s, "dtype", test_dtype_values_and_sizes_match_the_wire);

	PHUB_TCASE(s, "dispatch",
		test_get_returns_the_best_supported_isa,
		test_select_forces_an_isa_and_rejects_unknown_ones,
		test_names_of_isas_and_optimizers_round_trip);

	PHUB_TCASE(s, "params",
		test_params_check_rejects_out_of_range_hyperparameters,
		test_step_init_computes_scale_and_bias_corrections);

	tc = PHUB_TCASE(s, "conversion",
		test_scalar_conversion_rounds_to_nearest_even_on_edge_values,
		test_scalar_widening_is_exact_for_every_16_bit_pattern,
		test_simd_conversions_match_scalar_bit_for_bit);
	tcase_set_timeout(tc, 120);
#ifdef __FLT16_MAX__
	tcase_add_test(tc, test_scalar_fp16_rounding_agrees_with_the_compiler);
#endif

	tc = PHUB_TCASE(s, "sum",
		test_simd_first_arrival_matches_scalar_for_every_length_and_offset,
		test_simd_later_arrival_matches_scalar_for_every_length_and_offset,
		test_sum_of_k_equals_one_arrival_at_a_time);
	tcase_set_timeout(tc, 120);

	PHUB_TCASE(s, "empty", test_every_kernel_accepts_an_empty_segment_with_null_pointers);

	/* Loop tests only: one run per optimizer. */
	tc = tcase_create("last");
	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, test_simd_last_arrival_matches_scalar_for_every_optimizer,
			    PHUB_OPT_NONE, PHUB_OPT_COUNT);
	suite_add_tcase(s, tc);

	tc = tcase_create("trajectory");
	tcase_add_loop_test(tc, test_optimizer_trajectory_follows_the_double_precision_formula,
			    PHUB_OPT_NONE, PHUB_OPT_COUNT);
	suite_add_tcase(s, tc);

	return s;
}
