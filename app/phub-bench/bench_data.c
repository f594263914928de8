/* SPDX-License-Identifier: BSD-3-Clause */
/* The deterministic gradients and initial weights: windows of a shared pattern, exact or random. */

#include <errno.h>
#include <stdlib.h>

#include "phub_bench.h"
#include "phub_mix.h"

/* Elements converted per call while filling the pattern, to bound the fp32 scratch buffer. */
#define FILL_BLOCK 4096u

float
phub_bench_pattern_value(uint64_t j)
{
	int s = (int)(phub_mix64(j + UINT64_C(0x9e3779b97f4a7c15)) %
		      (2 * PHUB_BENCH_VALUE_MAX + 1));

	/* An integer times a power of two: exact in every dtype (|s| < 2^8 for bf16). */
	return (float)(s - PHUB_BENCH_VALUE_MAX) * PHUB_BENCH_VALUE_SCALE;
}

/* The domain tags keep gradient and initial-weight windows independent of each other. */
uint32_t
phub_bench_grad_offset(uint32_t rank, uint32_t iteration, uint32_t key)
{
	uint64_t h = phub_mix64(((uint64_t)rank << 32) | iteration);

	return (uint32_t)(phub_mix64(h ^ ((uint64_t)key << 1)) % PHUB_BENCH_PATTERN_PERIOD);
}

uint32_t
phub_bench_initial_offset(uint32_t key)
{
	return (uint32_t)(phub_mix64(((uint64_t)key << 1) | 1) % PHUB_BENCH_PATTERN_PERIOD);
}

float
phub_bench_random_value(uint64_t j)
{
	uint64_t h = phub_mix64(j ^ UINT64_C(0x5851f42d4c957f2d));

	/* 53 random bits as a double in (-1, 1), rounded once to fp32. */
	return (float)((double)(h >> 11) * 0x1p-52 - 1.0);
}

static struct phub_bench_pattern *
pattern_create(enum phub_dtype dtype, uint32_t max_key_elems, bool random)
{
	const struct phub_kernels *k = phub_kernels_for_isa(PHUB_ISA_SCALAR);
	struct phub_bench_pattern *p;
	float block[FILL_BLOCK];
	uint64_t j, i, n;

	if (phub_dtype_size(dtype) == 0 || max_key_elems == 0 || k == NULL) {
		errno = EINVAL;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		goto nomem;
	p->dtype = dtype;
	p->random = random;
	p->elem_size = phub_dtype_size(dtype);
	p->n_elems = (uint64_t)max_key_elems + PHUB_BENCH_PATTERN_PERIOD;
	p->data = malloc(p->n_elems * p->elem_size);
	if (p->data == NULL)
		goto nomem;
	for (j = 0; j < p->n_elems; j += n) {
		n = p->n_elems - j < FILL_BLOCK ? p->n_elems - j : FILL_BLOCK;
		for (i = 0; i < n; i++)
			block[i] = random ? phub_bench_random_value(j + i) :
				phub_bench_pattern_value(j + i);
		k->to_wire((char *)p->data + j * p->elem_size, dtype, block, n);
	}
	return p;
nomem:
	phub_bench_pattern_free(p);
	errno = ENOMEM;
	return NULL;
}

struct phub_bench_pattern *
phub_bench_pattern_create(enum phub_dtype dtype, uint32_t max_key_elems)
{
	return pattern_create(dtype, max_key_elems, false);
}

struct phub_bench_pattern *
phub_bench_pattern_create_random(enum phub_dtype dtype, uint32_t max_key_elems)
{
	return pattern_create(dtype, max_key_elems, true);
}

void
phub_bench_pattern_free(struct phub_bench_pattern *p)
{
	if (p == NULL)
		return;
	free(p->data);
	free(p);
}

const void *
phub_bench_grad(const struct phub_bench_pattern *p, uint32_t rank, uint32_t iteration,
		uint32_t key)
{
	return (const char *)p->data +
		(size_t)phub_bench_grad_offset(rank, iteration, key) * p->elem_size;
}

const void *
phub_bench_initial(const struct phub_bench_pattern *p, uint32_t key)
{
	return (const char *)p->data + (size_t)phub_bench_initial_offset(key) * p->elem_size;
}
