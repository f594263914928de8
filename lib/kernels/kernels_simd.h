/* SPDX-License-Identifier: BSD-3-Clause */
/* The SIMD kernel bodies, written once over a vector type that each ISA file defines. */

/*
 * Not a normal header: kernels_avx2.c and kernels_avx512.c each define, then
 * include this file once,
 *
 *   vec, VW                   the vector type and its width in floats
 *   SIMD_NAME(x)              the prefix of this ISA's functions
 *   v_set1 v_add v_sub v_mul v_div v_sqrt
 *   v_load(p, i, dtype)       VW elements at element index i, converted to fp32
 *   v_store(p, i, dtype, x)   VW elements converted to dtype
 *   v_load_part / v_store_part  the same for cnt < VW elements (the tail)
 *
 * Every arithmetic step below is one IEEE operation in the order of
 * kernels_priv.h (opt_elem, last_grad_elem), never FMA, so each lane computes
 * the scalar reference's bits. The files are built with -ffp-contract=off so
 * that the compiler cannot fuse a v_mul and a v_add into an FMA either.
 */

#ifndef SIMD_NAME
#error "kernels_simd.h is included by an ISA file that defines its vector operations"
#endif

/*
 * Sum loop: four vectors per round keeps two loads and a store in flight per
 * cycle. Four named variables, not an array: gcc 12 keeps an array of vectors
 * indexed in a loop on the stack and copies it out in 16-byte pieces.
 */
static KERNELS_ALWAYS_INLINE void
SIMD_NAME(sum_tpl)(float *acc, bool accumulate, const void *const *srcs, unsigned int k,
		   enum phub_dtype dtype, size_t n)
{
	vec a0, a1, a2, a3;
	const void *s;
	size_t i = 0, cnt;
	unsigned int j;

	for (; i + 4 * VW <= n; i += 4 * VW) {
		s = srcs[0];
		if (accumulate) {
			a0 = v_add(v_load(acc, i, PHUB_DTYPE_FP32), v_load(s, i, dtype));
			a1 = v_add(v_load(acc, i + VW, PHUB_DTYPE_FP32), v_load(s, i + VW, dtype));
			a2 = v_add(v_load(acc, i + 2 * VW, PHUB_DTYPE_FP32),
				   v_load(s, i + 2 * VW, dtype));
			a3 = v_add(v_load(acc, i + 3 * VW, PHUB_DTYPE_FP32),
				   v_load(s, i + 3 * VW, dtype));
		} else {
			a0 = v_load(s, i, dtype);
			a1 = v_load(s, i + VW, dtype);
			a2 = v_load(s, i + 2 * VW, dtype);
			a3 = v_load(s, i + 3 * VW, dtype);
		}
		for (j = 1; j < k; j++) {
			s = srcs[j];
			a0 = v_add(a0, v_load(s, i, dtype));
			a1 = v_add(a1, v_load(s, i + VW, dtype));
			a2 = v_add(a2, v_load(s, i + 2 * VW, dtype));
			a3 = v_add(a3, v_load(s, i + 3 * VW, dtype));
		}
		v_store(acc, i, PHUB_DTYPE_FP32, a0);
		v_store(acc, i + VW, PHUB_DTYPE_FP32, a1);
		v_store(acc, i + 2 * VW, PHUB_DTYPE_FP32, a2);
		v_store(acc, i + 3 * VW, PHUB_DTYPE_FP32, a3);
	}
	for (; i + VW <= n; i += VW) {
		a0 = v_load(srcs[0], i, dtype);
		if (accumulate)
			a0 = v_add(v_load(acc, i, PHUB_DTYPE_FP32), a0);
		for (j = 1; j < k; j++)
			a0 = v_add(a0, v_load(srcs[j], i, dtype));
		v_store(acc, i, PHUB_DTYPE_FP32, a0);
	}
	if (i < n) {
		cnt = n - i;
		a0 = accumulate ? v_add(v_load_part(acc, i, PHUB_DTYPE_FP32, cnt),
					v_load_part(srcs[0], i, dtype, cnt)) :
				  v_load_part(srcs[0], i, dtype, cnt);
		for (j = 1; j < k; j++)
			a0 = v_add(a0, v_load_part(srcs[j], i, dtype, cnt));
		v_store_part(acc, i, PHUB_DTYPE_FP32, a0, cnt);
	}
}

/* dtype becomes a constant in each call, so every loop is specialised for one dtype. */
#define SIMD_BY_DTYPE(dtype, call_fp32, call_fp16, call_bf16)                                      \
	do {                                                                                       \
		switch (dtype) {                                                                   \
		case PHUB_DTYPE_FP32:                                                              \
			call_fp32;                                                                 \
			break;                                                                     \
		case PHUB_DTYPE_FP16:                                                              \
			call_fp16;                                                                 \
			break;                                                                     \
		case PHUB_DTYPE_BF16:                                                              \
			call_bf16;                                                                 \
			break;                                                                     \
		}                                                                                  \
	} while (0)

static void
SIMD_NAME(first)(float *acc, const void *src, enum phub_dtype dtype, size_t n)
{
	SIMD_BY_DTYPE(dtype, SIMD_NAME(sum_tpl)(acc, false, &src, 1, PHUB_DTYPE_FP32, n),
		      SIMD_NAME(sum_tpl)(acc, false, &src, 1, PHUB_DTYPE_FP16, n),
		      SIMD_NAME(sum_tpl)(acc, false, &src, 1, PHUB_DTYPE_BF16, n));
}

static void
SIMD_NAME(add)(float *acc, const void *src, enum phub_dtype dtype, size_t n)
{
	SIMD_BY_DTYPE(dtype, SIMD_NAME(sum_tpl)(acc, true, &src, 1, PHUB_DTYPE_FP32, n),
		      SIMD_NAME(sum_tpl)(acc, true, &src, 1, PHUB_DTYPE_FP16, n),
		      SIMD_NAME(sum_tpl)(acc, true, &src, 1, PHUB_DTYPE_BF16, n));
}

static void
SIMD_NAME(sum)(float *acc, bool accumulate, const void *const *srcs, unsigned int k,
	       enum phub_dtype dtype, size_t n)
{
	if (k == 0)
		return;
	SIMD_BY_DTYPE(dtype, SIMD_NAME(sum_tpl)(acc, accumulate, srcs, k, PHUB_DTYPE_FP32, n),
		      SIMD_NAME(sum_tpl)(acc, accumulate, srcs, k, PHUB_DTYPE_FP16, n),
		      SIMD_NAME(sum_tpl)(acc, accumulate, srcs, k, PHUB_DTYPE_BF16, n));
}

static void
SIMD_NAME(to_wire)(void *dst, enum phub_dtype dtype, const float *src, size_t n)
{
	size_t i = 0;

	switch (dtype) {
	case PHUB_DTYPE_FP32:
		/* memmove's pointers must be valid even for 0 bytes; ours may be NULL then. */
		if (n != 0)
			memcpy(dst, src, n * sizeof(float));
		return;
	/*
	 * One loop per wire dtype, alike on purpose: each hands v_store a constant dtype, so the
	 * always-inline primitives compile to that one conversion, not a switch per vector.
	 */
	case PHUB_DTYPE_FP16:
		for (; i + VW <= n; i += VW)
			v_store(dst, i, PHUB_DTYPE_FP16, v_load(src, i, PHUB_DTYPE_FP32));
		if (i < n)
			v_store_part(dst, i, PHUB_DTYPE_FP16,
				     v_load_part(src, i, PHUB_DTYPE_FP32, n - i), n - i);
		return;
	case PHUB_DTYPE_BF16:
		for (; i + VW <= n; i += VW)
			v_store(dst, i, PHUB_DTYPE_BF16, v_load(src, i, PHUB_DTYPE_FP32));
		if (i < n)
			v_store_part(dst, i, PHUB_DTYPE_BF16,
				     v_load_part(src, i, PHUB_DTYPE_FP32, n - i), n - i);
		return;
	}
}

/* The broadcast constants of one last-arrival call; see struct opt_consts. */
struct SIMD_NAME(vconsts) {
	vec scale, lr, wd, mu, b1, omb1, b2, omb2, eps, lr_c1, c2, decay;
};

/*
 * VW elements (cnt of them when part) of the last-arrival step: the vector
 * image of last_grad_elem() and opt_elem(), operation for operation.
 */
/*
 * Which of the fused step's inputs and outputs a call has: constants in each loop (last_tpl), so
 * that no vector tests the pointers.
 */
enum SIMD_NAME(last_form) {
	SIMD_NAME(ACC_GRAD),	/* acc + grad */
	SIMD_NAME(ACC),		/* acc alone (grad NULL) */
	SIMD_NAME(GRAD),	/* grad alone (acc NULL) */
};

static KERNELS_ALWAYS_INLINE void
SIMD_NAME(last_vec)(const struct phub_opt_buffers *b, size_t i, enum phub_opt_type type,
		    enum phub_dtype gdt, const struct SIMD_NAME(vconsts) *c, bool part, size_t cnt,
		    enum SIMD_NAME(last_form) form, bool out)
{
#define LD(p, dt) (part ? v_load_part((p), i, (dt), cnt) : v_load((p), i, (dt)))
#define ST(p, dt, x)                                                                               \
	do {                                                                                       \
		if (part)                                                                          \
			v_store_part((p), i, (dt), (x), cnt);                                      \
		else                                                                               \
			v_store((p), i, (dt), (x));                                                \
	} while (0)
	vec g, w, m, v;

	if (form == SIMD_NAME(GRAD))
		g = LD(b->grad, gdt);
	else if (form == SIMD_NAME(ACC))
		g = LD(b->acc, PHUB_DTYPE_FP32);
	else
		g = v_add(LD(b->acc, PHUB_DTYPE_FP32), LD(b->grad, gdt));
	g = v_mul(g, c->scale);
	w = LD(b->weight, PHUB_DTYPE_FP32);

	switch (type) {
	case PHUB_OPT_NONE:
		w = g;
		break;
	case PHUB_OPT_SGD:
		g = v_add(g, v_mul(c->wd, w));
		w = v_sub(w, v_mul(c->lr, g));
		break;
	case PHUB_OPT_MOMENTUM:
		g = v_add(g, v_mul(c->wd, w));
		m = v_add(v_mul(c->mu, LD(b->m, PHUB_DTYPE_FP32)), g);
		ST(b->m, PHUB_DTYPE_FP32, m);
		w = v_sub(w, v_mul(c->lr, m));
		break;
	case PHUB_OPT_NESTEROV:
		g = v_add(g, v_mul(c->wd, w));
		m = v_add(v_mul(c->mu, LD(b->m, PHUB_DTYPE_FP32)), g);
		ST(b->m, PHUB_DTYPE_FP32, m);
		w = v_sub(w, v_mul(c->lr, v_add(g, v_mul(c->mu, m))));
		break;
	case PHUB_OPT_ADAM:
		g = v_add(g, v_mul(c->wd, w));
		m = v_add(v_mul(c->b1, LD(b->m, PHUB_DTYPE_FP32)), v_mul(c->omb1, g));
		v = v_add(v_mul(c->b2, LD(b->v, PHUB_DTYPE_FP32)), v_mul(c->omb2, v_mul(g, g)));
		ST(b->m, PHUB_DTYPE_FP32, m);
		ST(b->v, PHUB_DTYPE_FP32, v);
		w = v_sub(w, v_div(v_mul(c->lr_c1, m), v_add(v_mul(v_sqrt(v), c->c2), c->eps)));
		break;
	case PHUB_OPT_ADAMW:
		m = v_add(v_mul(c->b1, LD(b->m, PHUB_DTYPE_FP32)), v_mul(c->omb1, g));
		v = v_add(v_mul(c->b2, LD(b->v, PHUB_DTYPE_FP32)), v_mul(c->omb2, v_mul(g, g)));
		ST(b->m, PHUB_DTYPE_FP32, m);
		ST(b->v, PHUB_DTYPE_FP32, v);
		w = v_sub(v_mul(w, c->decay),
			  v_div(v_mul(c->lr_c1, m), v_add(v_mul(v_sqrt(v), c->c2), c->eps)));
		break;
	}
	ST(b->weight, PHUB_DTYPE_FP32, w);
	/* The MODEL payload is written from the register, while the line is still in L1. */
	if (out)
		ST(b->out, b->out_dtype, w);
#undef LD
#undef ST
}

/*
 * One loop of the fused step for one form, its pointers' presence a constant: two vectors a
 * round (the loop's own count and branch once per 2 * VW elements), then one, then the tail.
 */
static KERNELS_ALWAYS_INLINE void
SIMD_NAME(last_loop)(const struct phub_opt_buffers *lb, size_t n, enum phub_opt_type type,
		     enum phub_dtype gdt, const struct SIMD_NAME(vconsts) *c,
		     enum SIMD_NAME(last_form) form, bool out)
{
	size_t i = 0;

	for (; i + 2 * VW <= n; i += 2 * VW) {
		SIMD_NAME(last_vec)(lb, i, type, gdt, c, false, VW, form, out);
		SIMD_NAME(last_vec)(lb, i + VW, type, gdt, c, false, VW, form, out);
	}
	for (; i + VW <= n; i += VW)
		SIMD_NAME(last_vec)(lb, i, type, gdt, c, false, VW, form, out);
	if (i < n)
		SIMD_NAME(last_vec)(lb, i, type, gdt, c, true, n - i, form, out);
}

/* The loop of lb's form, out a constant. */
static KERNELS_ALWAYS_INLINE void
SIMD_NAME(last_forms)(const struct phub_opt_buffers *lb, size_t n, enum phub_opt_type type,
		      enum phub_dtype gdt, const struct SIMD_NAME(vconsts) *c, bool out)
{
	if (lb->acc == NULL)
		SIMD_NAME(last_loop)(lb, n, type, gdt, c, SIMD_NAME(GRAD), out);
	else if (lb->grad == NULL)
		SIMD_NAME(last_loop)(lb, n, type, gdt, c, SIMD_NAME(ACC), out);
	else
		SIMD_NAME(last_loop)(lb, n, type, gdt, c, SIMD_NAME(ACC_GRAD), out);
}

static KERNELS_ALWAYS_INLINE void
SIMD_NAME(last_tpl)(const struct phub_opt_buffers *b, size_t n, enum phub_opt_type type,
		    enum phub_dtype gdt, const struct opt_consts *sc)
{
	struct SIMD_NAME(vconsts) c = {
		.scale = v_set1(sc->scale),
		.lr = v_set1(sc->lr),
		.wd = v_set1(sc->wd),
		.mu = v_set1(sc->mu),
		.b1 = v_set1(sc->b1),
		.omb1 = v_set1(sc->omb1),
		.b2 = v_set1(sc->b2),
		.omb2 = v_set1(sc->omb2),
		.eps = v_set1(sc->eps),
		.lr_c1 = v_set1(sc->lr_c1),
		.c2 = v_set1(sc->c2),
		.decay = v_set1(sc->decay),
	};
	/*
	 * A private copy of the pointers: the intrinsics store through may_alias
	 * types, so the compiler would reload every pointer from *b after each
	 * store; nothing can store into a local whose address never escapes.
	 */
	struct phub_opt_buffers lb = *b;

	/*
	 * Six loops, each with its inputs and outputs fixed: testing the three pointers per
	 * vector was a third of the loop's instructions (phub-bench-kernels, in cache, the engine's
	 * payload offset, best of 8: SGD 186 -> 170 ns at 8 KB, 29 -> 24 ns at 1 KB).
	 */
	if (b->out == NULL)
		SIMD_NAME(last_forms)(&lb, n, type, gdt, &c, false);
	else
		SIMD_NAME(last_forms)(&lb, n, type, gdt, &c, true);
}

/* One case of SIMD_NAME(last)'s switch per optimizer of PHUB_FOREACH_OPT (phub_types.h). */
#define SIMD_LAST_CASE(name, v, s)                                                                 \
	case PHUB_OPT_##name:                                                                      \
		SIMD_BY_DTYPE(buf->grad_dtype,                                                     \
			      SIMD_NAME(last_tpl)(buf, n, PHUB_OPT_##name, PHUB_DTYPE_FP32, &c),   \
			      SIMD_NAME(last_tpl)(buf, n, PHUB_OPT_##name, PHUB_DTYPE_FP16, &c),   \
			      SIMD_NAME(last_tpl)(buf, n, PHUB_OPT_##name, PHUB_DTYPE_BF16, &c));  \
		break;

static void
SIMD_NAME(last)(const struct phub_opt_buffers *buf, size_t n,
		const struct phub_optimizer_params *params, const struct phub_opt_step *step)
{
	struct opt_consts c;

	opt_consts_init(&c, params, step);
	switch (params->type) {
	PHUB_FOREACH_OPT(SIMD_LAST_CASE)
	}
}

#undef SIMD_LAST_CASE
#undef SIMD_BY_DTYPE
