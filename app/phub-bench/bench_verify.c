/* SPDX-License-Identifier: BSD-3-Clause */
/* The reference model (scalar kernels, ranks summed in order) and the comparison with the PBox. */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "phub_bench.h"

/*
 * Elements recomputed at a time. Every optimizer works element by element, so a key is replayed
 * block by block through all its iterations: memory stays a few blocks whatever the key's size.
 */
#define VERIFY_BLOCK 16384u

struct phub_bench_verifier {
	struct phub_bench_verify_params p;
	const struct phub_kernels *k;
	const void **srcs;	/* world_size gradient pointers of one block */
	float *acc;
	float *weight;
	float *m;
	float *v;
	float *got;		/* the PBox's model of the block, in fp32 */
	void *out;		/* the reference in the dtype */
};

bool
phub_bench_verify_exact(enum phub_opt_type type)
{
	return type == PHUB_OPT_NONE || type == PHUB_OPT_SGD;
}

void
phub_bench_verify_tolerance(enum phub_dtype dtype, double *rtol, double *atol)
{
	/*
	 * Two ulps of fp32 for rounding differences that piled up over the iterations; one ulp of
	 * the 16-bit dtypes (2^-10 for fp16, 2^-7 for bf16 relative), as the PBox's fp32 weight
	 * may round to the other neighbour of the reference; atol covers values near zero.
	 */
	switch (dtype) {
	case PHUB_DTYPE_FP16:
		*rtol = 1.0 / 1024;
		break;
	case PHUB_DTYPE_BF16:
		*rtol = 1.0 / 128;
		break;
	default:
		*rtol = 1e-5;
		break;
	}
	*atol = 1e-6;
}

struct phub_bench_verifier *
phub_bench_verifier_create(const struct phub_bench_verify_params *p)
{
	struct phub_bench_verifier *v;
	size_t es;

	if (p == NULL || p->pattern == NULL || p->world_size == 0 ||
			phub_optimizer_params_check(&p->optimizer) != 0) {
		errno = EINVAL;
		return NULL;
	}
	v = calloc(1, sizeof(*v));
	if (v == NULL)
		goto nomem;
	v->p = *p;
	v->k = phub_kernels_for_isa(PHUB_ISA_SCALAR);
	es = p->pattern->elem_size;
	v->srcs = calloc(p->world_size, sizeof(*v->srcs));
	v->acc = malloc(VERIFY_BLOCK * sizeof(float));
	v->weight = malloc(VERIFY_BLOCK * sizeof(float));
	v->m = malloc(VERIFY_BLOCK * sizeof(float));
	v->v = malloc(VERIFY_BLOCK * sizeof(float));
	v->got = malloc(VERIFY_BLOCK * sizeof(float));
	v->out = malloc(VERIFY_BLOCK * es);
	if (v->k == NULL || v->srcs == NULL || v->acc == NULL || v->weight == NULL ||
			v->m == NULL || v->v == NULL || v->got == NULL || v->out == NULL)
		goto nomem;
	return v;
nomem:
	phub_bench_verifier_free(v);
	errno = ENOMEM;
	return NULL;
}

void
phub_bench_verifier_free(struct phub_bench_verifier *v)
{
	if (v == NULL)
		return;
	free(v->srcs);
	free(v->acc);
	free(v->weight);
	free(v->m);
	free(v->v);
	free(v->got);
	free(v->out);
	free(v);
}

bool
phub_bench_rank_in(const struct phub_bench_change *changes, uint32_t n, uint16_t rank, uint32_t t)
{
	bool in = true;

	for (uint32_t i = 0; i < n; i++)
		if (changes[i].rank == rank && t >= changes[i].iteration)
			in = changes[i].joined;
	return in;
}

/* Replay elements [off, off + n) of key through every iteration; the result is in v->out. */
static void
reference_block(struct phub_bench_verifier *v, uint32_t key, uint64_t off, size_t n)
{
	const struct phub_bench_pattern *pat = v->p.pattern;
	const struct phub_kernels *k = v->k;
	uint16_t nw = v->p.world_size;
	struct phub_opt_buffers buf;
	struct phub_opt_step step;
	uint32_t t;
	uint16_t r;

	/* Iteration 0: rank 0's initial weights, widened as the PBox does. */
	k->first(v->weight, (const char *)phub_bench_initial(pat, key) + off * pat->elem_size,
		pat->dtype, n);
	memset(v->m, 0, n * sizeof(float));
	memset(v->v, 0, n * sizeof(float));
	for (t = 1; t <= v->p.iterations; t++) {
		uint16_t in = 0;

		/* The ranks in at iteration t: every one, but in an elastic job that lost some. */
		for (r = 0; r < nw; r++)
			if (phub_bench_rank_in(v->p.changes, v->p.n_changes, r, t))
				v->srcs[in++] = (const char *)phub_bench_grad(pat, r, t, key) +
					off * pat->elem_size;
		if (in == 0)
			continue;
		/* Ranks summed in order, the last one in as the last arrival; the mean over them. */
		if (in > 1)
			k->sum(v->acc, false, v->srcs, in - 1u, pat->dtype, n);
		phub_opt_step_init(&step, &v->p.optimizer, t, in);
		buf = (struct phub_opt_buffers){
			.acc = in > 1 ? v->acc : NULL,
			.grad = v->srcs[in - 1],
			.weight = v->weight,
			.m = v->m,
			.v = v->v,
			.out = NULL,
			.grad_dtype = pat->dtype,
			.out_dtype = pat->dtype,
		};
		k->last(&buf, n, &v->p.optimizer, &step);
	}
	/* Without any update the model is the initial weights as the PBox stored them. */
	k->to_wire(v->out, pat->dtype, v->weight, n);
}

void
phub_bench_reference_key(struct phub_bench_verifier *v, uint32_t key, uint32_t n_elems,
		void *out)
{
	size_t es = v->p.pattern->elem_size;
	uint64_t off;
	size_t n;

	for (off = 0; off < n_elems; off += n) {
		n = n_elems - off < VERIFY_BLOCK ? n_elems - off : VERIFY_BLOCK;
		reference_block(v, key, off, n);
		memcpy((char *)out + off * es, v->out, n * es);
	}
}

void
phub_bench_verify_range(struct phub_bench_verifier *v, uint32_t key, uint64_t first,
		uint64_t n_elems, const void *model, struct phub_bench_verify_result *res)
{
	const struct phub_bench_pattern *pat = v->p.pattern;
	bool exact = phub_bench_verify_exact(v->p.optimizer.type) && !v->p.order_dependent;
	size_t es = pat->elem_size;
	double rtol, atol;
	uint64_t off;
	size_t n, i;

	phub_bench_verify_tolerance(pat->dtype, &rtol, &atol);
	for (off = first; off < first + n_elems; off += n) {
		const char *got_raw = (const char *)model + (off - first) * es;
		float *want = v->acc;	/* free after reference_block() */

		n = first + n_elems - off < VERIFY_BLOCK ? first + n_elems - off : VERIFY_BLOCK;
		reference_block(v, key, off, n);
		v->k->first(v->got, got_raw, pat->dtype, n);
		v->k->first(want, v->out, pat->dtype, n);
		res->checked += n;
		if (memcmp(got_raw, v->out, n * es) == 0)
			continue;
		for (i = 0; i < n; i++) {
			double err = fabs((double)v->got[i] - (double)want[i]);
			const char *ref_raw = (const char *)v->out + i * es;
			bool same = memcmp(got_raw + i * es, ref_raw, es) == 0;
			bool bad;

			if (same)
				continue;
			res->differing++;
			/* A NaN compares false everywhere: count it as a mismatch explicitly. */
			bad = exact || isnan(err) || !(err <= atol + rtol * fabs((double)want[i]));
			if (!isnan(err) && err > res->max_abs_error)
				res->max_abs_error = err;
			if (isnan(err))
				res->max_abs_error = INFINITY;
			if (!bad)
				continue;
			if (res->mismatches == 0) {
				res->first_bad_key = key;
				res->first_bad_elem = off + i;
				res->first_bad_got = v->got[i];
				res->first_bad_want = want[i];
			}
			res->mismatches++;
		}
	}
}

void
phub_bench_verify_key(struct phub_bench_verifier *v, uint32_t key, uint32_t n_elems,
		const void *model, struct phub_bench_verify_result *res)
{
	phub_bench_verify_range(v, key, 0, n_elems, model, res);
}
