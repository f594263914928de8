/* SPDX-License-Identifier: BSD-3-Clause */
/* Run-time choice of the kernel ISA, and the optimizer's parameters and per-step scalars. */

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "kernels_priv.h"

/* -1 until the first phub_kernels_get() or phub_kernels_select(); then an enum phub_isa. */
static atomic_int chosen_isa = -1;

static const char *const isa_names[PHUB_ISA_COUNT] = {
	[PHUB_ISA_SCALAR] = "scalar",
	[PHUB_ISA_AVX2] = "avx2",
	[PHUB_ISA_AVX512] = "avx512",
};

#if defined(__x86_64__)
/*
 * clang 14 has no "f16c" for __builtin_cpu_supports, so ask CPUID directly.
 * The OS side (YMM state enabled in XCR0) is covered by the "avx2" test,
 * which libgcc and compiler-rt only report when the OS saves YMM registers.
 */
static bool
cpu_has_f16c(void)
{
	unsigned int eax, ebx, ecx, edx;

	if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0)
		return false;
	return (ecx & bit_F16C) != 0;
}
#endif

bool
phub_kernels_isa_supported(enum phub_isa isa)
{
	switch (isa) {
	case PHUB_ISA_SCALAR:
		return true;
#if defined(__x86_64__)
	case PHUB_ISA_AVX2:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       cpu_has_f16c();
	case PHUB_ISA_AVX512:
		/* The AVX-512 file is also compiled with the AVX2 set, so it needs both. */
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vl") &&
		       phub_kernels_isa_supported(PHUB_ISA_AVX2);
#else
	case PHUB_ISA_AVX2:
	case PHUB_ISA_AVX512:
		return false;
#endif
	}
	return false;
}

static const struct phub_kernels *
table_of(enum phub_isa isa)
{
	switch (isa) {
#if defined(__x86_64__)
	case PHUB_ISA_AVX512:
		return &kernels_avx512;
	case PHUB_ISA_AVX2:
		return &kernels_avx2;
#else
	case PHUB_ISA_AVX512:
	case PHUB_ISA_AVX2:
#endif
	case PHUB_ISA_SCALAR:
		break;
	}
	return &kernels_scalar;
}

const struct phub_kernels *
phub_kernels_for_isa(enum phub_isa isa)
{
	if ((unsigned int)isa >= PHUB_ISA_COUNT) {
		errno = EINVAL;
		return NULL;
	}
	if (!phub_kernels_isa_supported(isa)) {
		errno = ENOTSUP;
		return NULL;
	}
	return table_of(isa);
}

const struct phub_kernels *
phub_kernels_get(void)
{
	int isa = atomic_load_explicit(&chosen_isa, memory_order_relaxed);
	int best;

	if (isa < 0) {
		best = PHUB_ISA_SCALAR;
		if (phub_kernels_isa_supported(PHUB_ISA_AVX512))
			best = PHUB_ISA_AVX512;
		else if (phub_kernels_isa_supported(PHUB_ISA_AVX2))
			best = PHUB_ISA_AVX2;
		/* Two threads racing here compute the same answer; a select() wins over both. */
		atomic_compare_exchange_strong(&chosen_isa, &isa, best);
		isa = atomic_load_explicit(&chosen_isa, memory_order_relaxed);
	}
	return table_of((enum phub_isa)isa);
}

int
phub_kernels_select(enum phub_isa isa)
{
	if ((unsigned int)isa >= PHUB_ISA_COUNT)
		return -EINVAL;
	if (!phub_kernels_isa_supported(isa))
		return -ENOTSUP;
	atomic_store(&chosen_isa, (int)isa);
	return 0;
}

const char *
phub_kernels_isa_name(enum phub_isa isa)
{
	if ((unsigned int)isa >= PHUB_ISA_COUNT)
		return "unknown";
	return isa_names[isa];
}

unsigned int
phub_opt_state_count(enum phub_opt_type type)
{
	switch (type) {
	case PHUB_OPT_MOMENTUM:
	case PHUB_OPT_NESTEROV:
		return 1;
	case PHUB_OPT_ADAM:
	case PHUB_OPT_ADAMW:
		return 2;
	case PHUB_OPT_NONE:
	case PHUB_OPT_SGD:
		break;
	}
	return 0;
}

static bool
in_unit_interval(float x)
{
	return isfinite(x) && x >= 0.0f && x < 1.0f;
}

int
phub_optimizer_params_check(const struct phub_optimizer_params *p)
{
	if (p == NULL || (unsigned int)p->type >= PHUB_OPT_COUNT)
		return -EINVAL;
	if (!isfinite(p->lr) || p->lr < 0.0f)
		return -EINVAL;
	if (!isfinite(p->weight_decay) || p->weight_decay < 0.0f)
		return -EINVAL;
	switch (p->type) {
	case PHUB_OPT_MOMENTUM:
	case PHUB_OPT_NESTEROV:
		if (!in_unit_interval(p->momentum))
			return -EINVAL;
		break;
	case PHUB_OPT_ADAM:
	case PHUB_OPT_ADAMW:
		/* eps > 0 keeps the division finite where v is 0 (a weight never touched). */
		if (!in_unit_interval(p->beta1) || !in_unit_interval(p->beta2) ||
		    !isfinite(p->eps) || p->eps <= 0.0f)
			return -EINVAL;
		break;
	case PHUB_OPT_NONE:
	case PHUB_OPT_SGD:
		break;
	}
	return 0;
}

/*
 * (float)(1.0 / n) for n = 1 .. 256, folded by the compiler (correctly rounded, as at run time):
 * the double division was most of phub_opt_step_init, which the engine calls per segment.
 */
#define RECIP1(n) (float)(1.0 / (n)),
#define RECIP4(n) RECIP1(n) RECIP1((n) + 1) RECIP1((n) + 2) RECIP1((n) + 3)
#define RECIP16(n) RECIP4(n) RECIP4((n) + 4) RECIP4((n) + 8) RECIP4((n) + 12)
#define RECIP64(n) RECIP16(n) RECIP16((n) + 16) RECIP16((n) + 32) RECIP16((n) + 48)
static const float recip_table[257] = {
	0.0f, RECIP64(1) RECIP64(65) RECIP64(129) RECIP64(193)
};

int
phub_opt_step_init(struct phub_opt_step *step, const struct phub_optimizer_params *params,
		   uint64_t t, unsigned int nworkers)
{
	double bc1, bc2;

	if (step == NULL || params == NULL || t == 0 || nworkers == 0)
		return -EINVAL;
	step->grad_scale = nworkers < sizeof(recip_table) / sizeof(recip_table[0]) ?
		recip_table[nworkers] : (float)(1.0 / nworkers);
	step->lr = params->lr;
	step->adam_c1 = 1.0f;
	step->adam_c2 = 1.0f;
	if (params->type == PHUB_OPT_ADAM || params->type == PHUB_OPT_ADAMW) {
		/* 1 - beta^t as -expm1(t log beta) keeps its digits when beta^t is near 1;
		 * beta = 0 gives log 0 = -inf and 1 - 0 = 1, as it should. */
		bc1 = -expm1((double)t * log((double)params->beta1));
		bc2 = -expm1((double)t * log((double)params->beta2));
		if (bc1 > 0.0)
			step->adam_c1 = (float)(1.0 / bc1);
		if (bc2 > 0.0)
			step->adam_c2 = (float)(1.0 / sqrt(bc2));
	}
	return 0;
}

void
opt_consts_init(struct opt_consts *c, const struct phub_optimizer_params *p,
		const struct phub_opt_step *s)
{
	c->scale = s->grad_scale;
	c->lr = s->lr;
	c->wd = p->weight_decay;
	c->mu = p->momentum;
	c->b1 = p->beta1;
	c->omb1 = (float)(1.0 - (double)p->beta1);
	c->b2 = p->beta2;
	c->omb2 = (float)(1.0 - (double)p->beta2);
	c->eps = p->eps;
	c->lr_c1 = (float)((double)s->lr * (double)s->adam_c1);
	c->c2 = s->adam_c2;
	c->decay = (float)(1.0 - (double)s->lr * (double)p->weight_decay);
}
