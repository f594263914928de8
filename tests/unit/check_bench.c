/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of phub-bench's core: model tables, layout files, exact data, reference, report. */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "unit_suite.h"

#include "phub_bench.h"

/* ---- presets ---- */

static const struct {
	const char *model;
	uint32_t keys;
	uint64_t params;
} preset_totals[] = {
	/* sum(p.numel() for p in torchvision.models.<m>().parameters()), len(list(...)) */
	{ "resnet18", 62, 11689512 },
	{ "resnet50", 161, 25557032 },
	{ "vgg19", 38, 143667240 },
	{ "alexnet", 16, 61100840 },
	{ "inception3", 292, 27161264 },
};

START_TEST(test_preset_has_torchvision_key_count_and_parameter_total)
{
	struct phub_bench_layout *l = phub_bench_layout_preset(preset_totals[_i].model);
	uint64_t sum = 0;
	uint32_t i, max = 0;

	ck_assert_ptr_nonnull(l);
	ck_assert_str_eq(l->model, preset_totals[_i].model);
	ck_assert_uint_eq(l->n_keys, preset_totals[_i].keys);
	ck_assert_uint_eq(l->total_elems, preset_totals[_i].params);
	for (i = 0; i < l->n_keys; i++) {
		sum += l->n_elems[i];
		max = l->n_elems[i] > max ? l->n_elems[i] : max;
		ck_assert_ptr_nonnull(l->names[i]);
	}
	ck_assert_uint_eq(sum, l->total_elems);
	ck_assert_uint_eq(max, l->max_key_elems);
	phub_bench_layout_free(l);
}
END_TEST

/* The key of a given name, or -1. */
static int
key_of(const struct phub_bench_layout *l, const char *name)
{
	uint32_t i;

	for (i = 0; i < l->n_keys; i++)
		if (strcmp(l->names[i], name) == 0)
			return (int)i;
	return -1;
}

START_TEST(test_preset_keys_follow_torchvision_parameter_order)
{
	struct phub_bench_layout *r50 = phub_bench_layout_preset("resnet50");
	struct phub_bench_layout *vgg = phub_bench_layout_preset("vgg19");
	struct phub_bench_layout *inc = phub_bench_layout_preset("inception3");

	ck_assert_ptr_nonnull(r50);
	ck_assert_ptr_nonnull(vgg);
	ck_assert_ptr_nonnull(inc);
	/* ResNet-50: stem first, the classifier last, downsample after the block's conv3/bn3. */
	ck_assert_str_eq(r50->names[0], "conv1.weight");
	ck_assert_uint_eq(r50->n_elems[0], 64 * 3 * 7 * 7);
	ck_assert_str_eq(r50->names[3], "layer1.0.conv1.weight");
	ck_assert_int_eq(key_of(r50, "layer1.0.downsample.0.weight"), 12);
	ck_assert_uint_eq(r50->n_elems[12], 256 * 64);
	ck_assert_uint_eq(r50->n_elems[key_of(r50, "layer4.2.conv2.weight")], 512 * 512 * 9);
	ck_assert_str_eq(r50->names[159], "fc.weight");
	ck_assert_uint_eq(r50->n_elems[159], 2048 * 1000);
	ck_assert_str_eq(r50->names[160], "fc.bias");
	/* VGG-19: fc6 is the largest tensor of all presets. */
	ck_assert_int_eq(key_of(vgg, "classifier.0.weight"), 32);
	ck_assert_uint_eq(vgg->max_key_elems, 25088u * 4096);
	ck_assert_uint_eq(vgg->n_elems[key_of(vgg, "features.34.bias")], 512);
	/* Inception v3: asymmetric kernels, and AuxLogits between Mixed_6e and Mixed_7a. */
	ck_assert_uint_eq(inc->n_elems[key_of(inc, "Mixed_6b.branch7x7_2.conv.weight")],
		128 * 128 * 7);
	ck_assert_int_lt(key_of(inc, "Mixed_6e.branch_pool.bn.bias"),
		key_of(inc, "AuxLogits.conv0.conv.weight"));
	ck_assert_int_lt(key_of(inc, "AuxLogits.fc.bias"),
		key_of(inc, "Mixed_7a.branch3x3_1.conv.weight"));
	ck_assert_uint_eq(inc->n_elems[key_of(inc, "Mixed_7c.branch_pool.conv.weight")],
		192 * 2048);
	ck_assert_str_eq(inc->names[inc->n_keys - 1], "fc.bias");
	phub_bench_layout_free(r50);
	phub_bench_layout_free(vgg);
	phub_bench_layout_free(inc);
}
END_TEST

START_TEST(test_unknown_preset_is_enoent)
{
	errno = 0;
	ck_assert_ptr_null(phub_bench_layout_preset("resnet51"));
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_ptr_null(phub_bench_layout_preset(NULL));
	ck_assert_uint_eq(phub_bench_preset_count(), 5);
	ck_assert_str_eq(phub_bench_preset_name(4), "inception3");
	ck_assert_ptr_null(phub_bench_preset_name(5));
}
END_TEST

/* Every name phub-plan takes, in any case: the same layout under each of a network's names. */
START_TEST(test_model_names_are_phub_plans_in_any_case)
{
	static const char *const rn50[] = { "resnet50", "RN50", "rn50", "ResNet50" };
	struct phub_bench_layout *ref = phub_bench_layout_preset("resnet50");
	struct phub_bench_layout *gn;

	ck_assert_ptr_nonnull(ref);
	for (size_t i = 0; i < sizeof(rn50) / sizeof(rn50[0]); i++) {
		struct phub_bench_layout *l = phub_bench_layout_preset(rn50[i]);

		ck_assert_msg(l != NULL, "%s", rn50[i]);
		ck_assert_str_eq(l->model, "resnet50");
		ck_assert_uint_eq(l->n_keys, ref->n_keys);
		ck_assert_uint_eq(l->total_elems, ref->total_elems);
		ck_assert_str_eq(l->names[0], ref->names[0]);
		phub_bench_layout_free(l);
	}
	ck_assert(phub_bench_model_has_layers("RN18"));
	/* GoogleNet: no layer list, so Table 3's 38 MB (2^20 B) of fp32 in keys of 2^22. */
	ck_assert(!phub_bench_model_has_layers("GN"));
	gn = phub_bench_layout_preset("GN");
	ck_assert_ptr_nonnull(gn);
	ck_assert_str_eq(gn->model, "googlenet");
	ck_assert_uint_eq(gn->total_elems, 38u * 1024 * 1024 / 4);
	ck_assert_uint_eq(gn->n_keys, 3);
	ck_assert_uint_eq(gn->n_elems[0], 1u << 22);
	ck_assert_uint_eq(gn->n_elems[2], 38u * 1024 * 1024 / 4 - 2 * (1u << 22));
	ck_assert_ptr_null(gn->names);
	phub_bench_layout_free(gn);
	phub_bench_layout_free(ref);
}
END_TEST

/* ---- layout files and synthetic layouts ---- */

START_TEST(test_layout_file_lists_key_sizes_in_order)
{
	char path[] = "/tmp/check_bench_XXXXXX";
	struct phub_bench_layout *l;
	char err[256] = "";
	FILE *f;
	int fd;

	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	ck_assert_ptr_nonnull(f);
	fputs("[1024, 3,\n 9408]\n", f);
	fclose(f);
	l = phub_bench_layout_load(path, err, sizeof(err));
	unlink(path);
	ck_assert_msg(l != NULL, "%s", err);
	ck_assert_uint_eq(l->n_keys, 3);
	ck_assert_uint_eq(l->n_elems[0], 1024);
	ck_assert_uint_eq(l->n_elems[1], 3);
	ck_assert_uint_eq(l->n_elems[2], 9408);
	ck_assert_uint_eq(l->total_elems, 1024 + 3 + 9408);
	ck_assert_uint_eq(l->max_key_elems, 9408);
	ck_assert_ptr_null(l->names);
	/* The model is named after the file. */
	ck_assert_str_eq(l->model, strrchr(path, '/') + 1);
	phub_bench_layout_free(l);
}
END_TEST

START_TEST(test_layout_file_errors_name_file_line_and_path)
{
	char err[256];

	ck_assert_ptr_null(phub_bench_layout_parse("[1, 2,\n 0]", "a.json", err, sizeof(err)));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_str_eq(err, "a.json: $[2]: a key size must be an integer in [1, 4294967295]");
	ck_assert_ptr_null(phub_bench_layout_parse("[1, -5]", "a.json", err, sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "$[1]"));
	ck_assert_ptr_null(phub_bench_layout_parse("[1, 2.5]", "a.json", err, sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "$[1]"));
	ck_assert_ptr_null(phub_bench_layout_parse("[4294967296]", "a.json", err, sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "$[0]"));
	ck_assert_ptr_null(phub_bench_layout_parse("[]", "a.json", err, sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "non-empty list"));
	ck_assert_ptr_null(phub_bench_layout_parse("{\"keys\": [1]}", "a.json", err,
		sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "non-empty list"));
	ck_assert_ptr_null(phub_bench_layout_parse("[1,\n 2,,]", "b.json", err, sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "b.json:2:"));
	ck_assert_ptr_null(phub_bench_layout_load("/nonexistent/x.json", err, sizeof(err)));
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.json"));
}
END_TEST

START_TEST(test_synthetic_layout_has_equal_keys)
{
	struct phub_bench_layout *l = phub_bench_layout_synthetic(7, 1000);

	ck_assert_ptr_nonnull(l);
	ck_assert_uint_eq(l->n_keys, 7);
	ck_assert_uint_eq(l->n_elems[6], 1000);
	ck_assert_uint_eq(l->total_elems, 7000);
	ck_assert_str_eq(l->model, "synthetic");
	phub_bench_layout_free(l);
	ck_assert_ptr_null(phub_bench_layout_synthetic(0, 10));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(phub_bench_layout_synthetic(3, 0));
}
END_TEST

/* ---- deterministic data ---- */

START_TEST(test_pattern_values_are_exact_small_integers_in_every_dtype)
{
	const struct phub_kernels *k = phub_kernels_for_isa(PHUB_ISA_SCALAR);
	static const enum phub_dtype dtypes[] = { PHUB_DTYPE_FP32, PHUB_DTYPE_FP16,
		PHUB_DTYPE_BF16 };
	float back[512];
	unsigned int d, i;
	int lo = 0, hi = 0;

	for (d = 0; d < 3; d++) {
		struct phub_bench_pattern *p = phub_bench_pattern_create(dtypes[d], 100);

		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq(p->n_elems, 100 + PHUB_BENCH_PATTERN_PERIOD);
		ck_assert_uint_eq(p->elem_size, phub_dtype_size(dtypes[d]));
		/* Read the tail back: conversion to the dtype must not have rounded anything. */
		k->first(back, (char *)p->data + (p->n_elems - 512) * p->elem_size, dtypes[d],
			512);
		for (i = 0; i < 512; i++) {
			float want = phub_bench_pattern_value(p->n_elems - 512 + i);
			float s = want * 1024;

			ck_assert_float_eq(back[i], want);
			ck_assert_float_eq(s, floorf(s));
			ck_assert_float_le(fabsf(s), PHUB_BENCH_VALUE_MAX);
			lo = s < lo ? (int)s : lo;
			hi = s > hi ? (int)s : hi;
		}
		phub_bench_pattern_free(p);
	}
	/* The values use the range, both signs. */
	ck_assert_int_lt(lo, -100);
	ck_assert_int_gt(hi, 100);
	ck_assert_ptr_null(phub_bench_pattern_create(PHUB_DTYPE_FP32, 0));
	ck_assert_ptr_null(phub_bench_pattern_create((enum phub_dtype)7, 10));
}
END_TEST

START_TEST(test_gradients_depend_on_rank_iteration_and_key)
{
	struct phub_bench_pattern *p = phub_bench_pattern_create(PHUB_DTYPE_FP32, 10);
	uint32_t r, t, same = 0;

	ck_assert_ptr_nonnull(p);
	for (r = 0; r < 16; r++) {
		for (t = 1; t < 16; t++) {
			uint32_t o = phub_bench_grad_offset(r, t, 3);

			ck_assert_uint_lt(o, PHUB_BENCH_PATTERN_PERIOD);
			same += o == phub_bench_grad_offset(r + 1, t, 3);
			same += o == phub_bench_grad_offset(r, t + 1, 3);
			same += o == phub_bench_grad_offset(r, t, 4);
		}
	}
	/* 720 pairs over 65521 offsets: a coincidence or two at most. */
	ck_assert_uint_le(same, 2);
	ck_assert_ptr_eq(phub_bench_grad(p, 2, 5, 9), phub_bench_grad(p, 2, 5, 9));
	ck_assert_ptr_eq((const char *)phub_bench_grad(p, 2, 5, 9),
		(const char *)p->data + 4 * (size_t)phub_bench_grad_offset(2, 5, 9));
	ck_assert_ptr_eq((const char *)phub_bench_initial(p, 9),
		(const char *)p->data + 4 * (size_t)phub_bench_initial_offset(9));
	ck_assert_uint_ne(phub_bench_initial_offset(0), phub_bench_initial_offset(1));
	phub_bench_pattern_free(p);
}
END_TEST

START_TEST(test_gradient_sums_are_the_same_bits_in_any_order)
{
	const struct phub_kernels *k = phub_kernels_for_isa(PHUB_ISA_SCALAR);
	enum phub_dtype dtype = _i == 0 ? PHUB_DTYPE_FP16 : PHUB_DTYPE_BF16;
	struct phub_bench_pattern *p = phub_bench_pattern_create(dtype, 4096);
	static float fwd[4096], rev[4096], mid[4096];
	const void *srcs[64];
	unsigned int r, n = 64;

	ck_assert_ptr_nonnull(p);
	for (r = 0; r < n; r++)
		srcs[r] = phub_bench_grad(p, r, 7, 2);
	k->first(fwd, srcs[0], dtype, 4096);
	for (r = 1; r < n; r++)
		k->add(fwd, srcs[r], dtype, 4096);
	k->first(rev, srcs[n - 1], dtype, 4096);
	for (r = n - 1; r-- > 0;)
		k->add(rev, srcs[r], dtype, 4096);
	/* An interleaved order as a PBox might see it: 37 is prime to 64, so a permutation. */
	k->first(mid, srcs[5], dtype, 4096);
	for (r = 1; r < n; r++)
		k->add(mid, srcs[(r * 37 + 5) % n], dtype, 4096);
	ck_assert_int_eq(memcmp(fwd, rev, sizeof(fwd)), 0);
	ck_assert_int_eq(memcmp(fwd, mid, sizeof(fwd)), 0);
	/* Sums of 64 ranks reach values no 16-bit dtype holds: the fp32 sum carries them. */
	ck_assert_float_gt(fabsf(fwd[0]) + fabsf(fwd[1]) + fabsf(fwd[2]), 0);
	phub_bench_pattern_free(p);
}
END_TEST

/* ---- reference and verification ---- */

static struct phub_bench_verify_params
verify_params(struct phub_bench_pattern *p, enum phub_opt_type type, uint16_t nw, uint32_t iters)
{
	struct phub_bench_verify_params vp = {
		.pattern = p,
		.world_size = nw,
		.iterations = iters,
	};

	vp.optimizer.type = type;
	vp.optimizer.lr = 0.01f;
	vp.optimizer.momentum = 0.9f;
	vp.optimizer.beta1 = 0.9f;
	vp.optimizer.beta2 = 0.999f;
	vp.optimizer.eps = 1e-8f;
	return vp;
}

/* A pattern, the parameters of its verifier and the verifier, made together. */
struct verifier_fix {
	struct phub_bench_pattern *p;
	struct phub_bench_verify_params vp;
	struct phub_bench_verifier *v;
};

static void
verifier_open(struct verifier_fix *f, enum phub_dtype dtype, uint32_t max_elems,
		enum phub_opt_type type, uint16_t nw, uint32_t iters)
{
	f->p = phub_bench_pattern_create(dtype, max_elems);
	ck_assert_ptr_nonnull(f->p);
	f->vp = verify_params(f->p, type, nw, iters);
	f->v = phub_bench_verifier_create(&f->vp);
	ck_assert_ptr_nonnull(f->v);
}

static void
verifier_close(struct verifier_fix *f)
{
	phub_bench_verifier_free(f->v);
	phub_bench_pattern_free(f->p);
}

START_TEST(test_reference_sgd_is_initial_minus_lr_times_mean_gradient)
{
	struct verifier_fix f;
	float out[64];
	unsigned int i;

	verifier_open(&f, PHUB_DTYPE_FP32, 64, PHUB_OPT_SGD, 2, 1);
	phub_bench_reference_key(f.v, 5, 64, out);
	for (i = 0; i < 64; i++) {
		const float *w0 = phub_bench_initial(f.p, 5);
		const float *g0 = phub_bench_grad(f.p, 0, 1, 5);
		const float *g1 = phub_bench_grad(f.p, 1, 1, 5);
		double want = (double)w0[i] - 0.01 * ((double)g0[i] + g1[i]) / 2;

		ck_assert_double_eq_tol(out[i], want, 1e-7);
	}
	verifier_close(&f);
}
END_TEST

START_TEST(test_reference_with_no_iteration_is_the_initial_weights)
{
	struct verifier_fix f;
	uint16_t out[300];

	verifier_open(&f, PHUB_DTYPE_BF16, 300, PHUB_OPT_ADAM, 3, 0);
	phub_bench_reference_key(f.v, 11, 300, out);
	ck_assert_int_eq(memcmp(out, phub_bench_initial(f.p, 11), sizeof(out)), 0);
	verifier_close(&f);
}
END_TEST

START_TEST(test_reference_of_a_large_key_matches_one_pass_over_the_whole_key)
{
	const struct phub_kernels *k = phub_kernels_for_isa(PHUB_ISA_SCALAR);
	enum { N = 40000, NW = 3, ITERS = 4 };
	struct verifier_fix f;
	float *acc = malloc(N * 4), *w = malloc(N * 4), *m = calloc(N, 4);
	uint16_t *want = malloc(N * 2), *got = malloc(N * 2);
	struct phub_opt_step step;
	const void *srcs[NW];
	unsigned int t, r;

	verifier_open(&f, PHUB_DTYPE_FP16, N, PHUB_OPT_NESTEROV, NW, ITERS);
	ck_assert(acc != NULL && w != NULL && m != NULL && want != NULL && got != NULL);
	/* What the PBox does, on the whole key at once, ranks arriving 2, 0, 1. */
	k->first(w, phub_bench_initial(f.p, 1), PHUB_DTYPE_FP16, N);
	for (t = 1; t <= ITERS; t++) {
		struct phub_opt_buffers b = {
			.acc = acc, .weight = w, .m = m, .grad_dtype = PHUB_DTYPE_FP16,
			.out_dtype = PHUB_DTYPE_FP16,
		};

		for (r = 0; r < NW; r++)
			srcs[r] = phub_bench_grad(f.p, r, t, 1);
		k->first(acc, srcs[2], PHUB_DTYPE_FP16, N);
		k->add(acc, srcs[0], PHUB_DTYPE_FP16, N);
		b.grad = srcs[1];
		b.out = want;
		phub_opt_step_init(&step, &f.vp.optimizer, t, NW);
		k->last(&b, N, &f.vp.optimizer, &step);
	}
	phub_bench_reference_key(f.v, 1, N, got);
	ck_assert_int_eq(memcmp(got, want, N * 2), 0);
	free(acc);
	free(w);
	free(m);
	free(want);
	free(got);
	verifier_close(&f);
}
END_TEST

START_TEST(test_verify_accepts_the_reference_and_counts_every_element)
{
	struct verifier_fix f;
	struct phub_bench_verify_result res = { 0 };
	float *model = malloc(20000 * 4);

	verifier_open(&f, PHUB_DTYPE_FP32, 20000, PHUB_OPT_SGD, 4, 3);
	ck_assert_ptr_nonnull(model);
	phub_bench_reference_key(f.v, 2, 20000, model);
	phub_bench_verify_key(f.v, 2, 20000, model, &res);
	ck_assert_uint_eq(res.checked, 20000);
	ck_assert_uint_eq(res.mismatches, 0);
	ck_assert_uint_eq(res.differing, 0);
	ck_assert_double_eq(res.max_abs_error, 0);
	/* The same bytes checked as another key's model are wrong. */
	phub_bench_verify_key(f.v, 3, 20000, model, &res);
	ck_assert_uint_eq(res.checked, 40000);
	ck_assert_uint_gt(res.mismatches, 19000);
	ck_assert_uint_eq(res.first_bad_key, 3);
	free(model);
	verifier_close(&f);
}
END_TEST

/* Key 0's reference model into model[n], element elem one ULP up, then verified into res. */
static void
verify_one_ulp_up(struct verifier_fix *f, float *model, uint32_t n, uint32_t elem,
		struct phub_bench_verify_result *res)
{
	phub_bench_reference_key(f->v, 0, n, model);
	model[elem] = nextafterf(model[elem], INFINITY);
	memset(res, 0, sizeof(*res));
	phub_bench_verify_key(f->v, 0, n, model, res);
}

/*
 * One ULP off the reference: a mismatch for SGD, whose reference is exact; only a difference
 * for Adam, checked within a tolerance that still takes a real error or a NaN.
 */
START_TEST(test_verify_one_ulp_fails_sgd_and_adam_tolerates_only_rounding)
{
	struct verifier_fix sgd, adam;
	struct phub_bench_verify_result res;
	float model[1000];

	verifier_open(&sgd, PHUB_DTYPE_FP32, 1000, PHUB_OPT_SGD, 2, 2);
	verify_one_ulp_up(&sgd, model, 1000, 777, &res);
	ck_assert_uint_eq(res.mismatches, 1);
	ck_assert_uint_eq(res.first_bad_elem, 777);
	ck_assert_float_eq(res.first_bad_got, model[777]);
	ck_assert_float_eq(res.first_bad_want, nextafterf(model[777], -INFINITY));
	ck_assert_double_gt(res.max_abs_error, 0);
	ck_assert_double_lt(res.max_abs_error, 1e-7);
	/* A range names elements by their index in the key. */
	memset(&res, 0, sizeof(res));
	phub_bench_verify_range(sgd.v, 0, 500, 500, model + 500, &res);
	ck_assert_uint_eq(res.checked, 500);
	ck_assert_uint_eq(res.mismatches, 1);
	ck_assert_uint_eq(res.first_bad_elem, 777);
	memset(&res, 0, sizeof(res));
	phub_bench_verify_range(sgd.v, 0, 0, 500, model, &res);
	ck_assert_uint_eq(res.mismatches, 0);
	verifier_close(&sgd);

	verifier_open(&adam, PHUB_DTYPE_FP32, 1000, PHUB_OPT_ADAM, 2, 2);
	verify_one_ulp_up(&adam, model, 1000, 10, &res);
	ck_assert_uint_eq(res.mismatches, 0);
	ck_assert_uint_eq(res.differing, 1);
	ck_assert_double_gt(res.max_abs_error, 0);
	model[20] += 0.01f;
	model[30] = NAN;
	memset(&res, 0, sizeof(res));
	phub_bench_verify_key(adam.v, 0, 1000, model, &res);
	ck_assert_uint_eq(res.mismatches, 2);
	ck_assert_uint_eq(res.first_bad_elem, 20);
	ck_assert(isinf(res.max_abs_error));
	verifier_close(&adam);
}
END_TEST

START_TEST(test_verify_tolerance_is_one_ulp_of_the_dtype)
{
	double rtol, atol;

	phub_bench_verify_tolerance(PHUB_DTYPE_FP16, &rtol, &atol);
	ck_assert_double_eq(rtol, 1.0 / 1024);
	phub_bench_verify_tolerance(PHUB_DTYPE_BF16, &rtol, &atol);
	ck_assert_double_eq(rtol, 1.0 / 128);
	phub_bench_verify_tolerance(PHUB_DTYPE_FP32, &rtol, &atol);
	ck_assert_double_eq(rtol, 1e-5);
	ck_assert(phub_bench_verify_exact(PHUB_OPT_SGD));
	ck_assert(phub_bench_verify_exact(PHUB_OPT_NONE));
	ck_assert(!phub_bench_verify_exact(PHUB_OPT_NESTEROV));
	ck_assert(!phub_bench_verify_exact(PHUB_OPT_ADAM));
}
END_TEST

START_TEST(test_verifier_rejects_bad_parameters)
{
	struct phub_bench_pattern *p = phub_bench_pattern_create(PHUB_DTYPE_FP32, 10);
	struct phub_bench_verify_params vp = verify_params(p, PHUB_OPT_SGD, 0, 1);

	ck_assert_ptr_null(phub_bench_verifier_create(&vp));
	ck_assert_int_eq(errno, EINVAL);
	vp = verify_params(p, PHUB_OPT_SGD, 1, 1);
	vp.optimizer.lr = -1;
	ck_assert_ptr_null(phub_bench_verifier_create(&vp));
	vp = verify_params(NULL, PHUB_OPT_SGD, 1, 1);
	ck_assert_ptr_null(phub_bench_verifier_create(&vp));
	phub_bench_pattern_free(p);
}
END_TEST

/* ---- statistics and report ---- */

START_TEST(test_quantile_is_nearest_rank)
{
	double v[] = { 5, 1, 4, 2, 3, 10, 9, 8, 7, 6 };
	double one[] = { 42 };

	ck_assert_double_eq(phub_bench_quantile(v, 10, 0.5), 5);
	ck_assert_double_eq(phub_bench_quantile(v, 10, 0.99), 10);
	ck_assert_double_eq(phub_bench_quantile(v, 10, 0.9), 9);
	ck_assert_double_eq(phub_bench_quantile(v, 10, 0), 1);
	ck_assert_double_eq(phub_bench_quantile(one, 1, 0.99), 42);
	ck_assert_double_eq(phub_bench_quantile(NULL, 0, 0.5), 0);
}
END_TEST

/* A run of 2 workers on a synthetic layout of n_keys keys of key_elems; test_run_free() ends it. */
static struct phub_bench_run
test_run(uint32_t n_keys, uint32_t key_elems)
{
	struct phub_bench_run run = {
		.layout = phub_bench_layout_synthetic(n_keys, key_elems),
		.dtype = PHUB_DTYPE_FP16,
		.world_size = 2,
		.iterations = 5,
		.warmup = 1,
		.server = "127.0.0.1",
		.port = 47000,
		.job = "j",
	};

	ck_assert_ptr_nonnull(run.layout);
	run.optimizer.type = PHUB_OPT_SGD;
	run.optimizer.lr = 0.5f;
	return run;
}

static void
test_run_free(struct phub_bench_run *run)
{
	phub_bench_layout_free((struct phub_bench_layout *)run->layout);
}

START_TEST(test_summary_adds_worker_rates_and_pools_exchange_times)
{
	struct phub_bench_run run = test_run(10, 50000);
	struct phub_bench_worker_result r[2] = {
		{ .rank = 0, .timed = 4, .timed_s = 2.0, .verified = true, .bitwise = true,
			.retransmits = 3, .pulls = 1, .wire_bytes = 1e9, .cpu_s = 0.004 },
		{ .rank = 1, .timed = 4, .timed_s = 4.0, .verified = true, .bitwise = true,
			.retransmits = 4, .max_abs_error = 0.5, .cpu_s = 0.012 },
	};
	double t0[] = { 1, 2, 3, 4 }, t1[] = { 5, 6, 7, 100 };
	const double *times[] = { t0, t1 };
	struct phub_bench_summary s;

	phub_bench_summarize(&run, r, times, 2, 2, &s);
	ck_assert_uint_eq(s.workers, 2);
	ck_assert_uint_eq(s.model_bytes, 10 * 50000 * 2);
	/* 4/2 + 4/4 exchanges/s; each moves the 1 MB gradient up and the 1 MB model down. */
	ck_assert_double_eq_tol(s.exchanges_per_s, 3.0, 1e-12);
	ck_assert_double_eq_tol(s.job_iterations_per_s, 1.0, 1e-12);
	ck_assert_double_eq_tol(s.goodput_gbps, 3.0 * 2e6 * 8 / 1e9, 1e-12);
	ck_assert_double_eq_tol(s.wire_gbps, 4.0, 1e-12);
	/* 0.016 CPU seconds for 8 exchanges of 2 MB (0.016 GB): 1 s per GB. */
	ck_assert_double_eq_tol(s.cpu_s, 0.016, 1e-12);
	ck_assert_double_eq_tol(s.cpu_s_per_gb, 1.0, 1e-9);
	ck_assert_double_eq(s.p50_ms, 4);
	ck_assert_double_eq(s.p99_ms, 100);
	/* Exchange k takes its slowest worker's time (5, 6, 7, 100): the fastest is 5. */
	ck_assert_double_eq(s.best_ms, 5);
	ck_assert_uint_eq(s.retransmits, 7);
	ck_assert_uint_eq(s.pulls, 1);
	ck_assert_double_eq(s.max_abs_error, 0.5);
	ck_assert(s.verified);
	ck_assert(s.bitwise);
	/* A worker missing, or one that failed, and the run is not verified. */
	phub_bench_summarize(&run, r, times, 1, 2, &s);
	ck_assert(!s.verified);
	r[1].status = -ETIMEDOUT;
	phub_bench_summarize(&run, r, times, 2, 2, &s);
	ck_assert(!s.verified);
	ck_assert_uint_eq(s.failed, 1);
	test_run_free(&run);
}
END_TEST

START_TEST(test_report_json_has_the_documented_fields)
{
	struct phub_bench_run run = test_run(4, 100);
	struct phub_bench_worker_result r[2] = {
		{ .rank = 0, .timed = 4, .timed_s = 1.0, .verified = true, .bitwise = true },
		{ .rank = 1, .status = -EIO, .max_abs_error = NAN },
	};
	const char *num[] = { "exchanges_per_s", "goodput_gbps", "p50_ms", "p99_ms", "best_ms",
		"max_abs_error" };
	const char *ints[] = { "workers", "model_bytes", "iterations", "retransmits", "keys",
		"pulls" };
	struct phub_bench_summary s;
	json_t *j, *w;
	unsigned int i;

	strcpy(r[1].error, "rank 1: bad \xff byte");
	phub_bench_summarize(&run, r, NULL, 2, 2, &s);
	j = phub_bench_report_json(&run, &s, r, 2, "rank 1 failed");
	ck_assert_ptr_nonnull(j);
	for (i = 0; i < sizeof(num) / sizeof(num[0]); i++)
		ck_assert_msg(json_is_number(json_object_get(j, num[i])), "%s", num[i]);
	for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		ck_assert_msg(json_is_integer(json_object_get(j, ints[i])), "%s", ints[i]);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "workers")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "model_bytes")), 800);
	ck_assert(json_is_false(json_object_get(j, "verified")));
	ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "synthetic");
	ck_assert_str_eq(json_string_value(json_object_get(j, "dtype")), "fp16");
	ck_assert_str_eq(json_string_value(json_object_get(j, "optimizer")), "sgd");
	ck_assert_str_eq(json_string_value(json_object_get(j, "error")), "rank 1 failed");
	ck_assert_uint_eq(json_array_size(json_object_get(j, "per_worker")), 2);
	w = json_array_get(json_object_get(j, "per_worker"), 1);
	ck_assert(json_is_false(json_object_get(w, "ok")));
	ck_assert_str_eq(json_string_value(json_object_get(w, "error")), "rank 1: bad ? byte");
	ck_assert(json_is_null(json_object_get(w, "max_abs_error")));
	w = json_array_get(json_object_get(j, "per_worker"), 0);
	ck_assert(json_is_true(json_object_get(w, "verified")));
	ck_assert_double_eq(json_real_value(json_object_get(w, "exchanges_per_s")), 4);
	json_decref(j);
	test_run_free(&run);
}
END_TEST

START_TEST(test_dtype_names_round_trip)
{
	enum phub_dtype d;

	ck_assert_int_eq(phub_dtype_parse("bf16", &d), 0);
	ck_assert_int_eq(d, PHUB_DTYPE_BF16);
	ck_assert_str_eq(phub_dtype_name(PHUB_DTYPE_FP16), "fp16");
	ck_assert_int_eq(phub_dtype_parse("fp64", &d), -EINVAL);
	ck_assert_int_eq(phub_dtype_parse(NULL, &d), -EINVAL);
}
END_TEST

/* ---- racks ---- */

START_TEST(test_racks_parse_in_ring_order_with_contiguous_ranks)
{
	struct phub_bench_racks r;
	char err[256];
	uint32_t local = 99;

	ck_assert_int_eq(phub_bench_racks_parse("10.30.0.1:1,10.31.0.1:2,10.32.0.1:3", &r, err,
		sizeof(err)), 0);
	ck_assert_uint_eq(r.n, 3);
	ck_assert_uint_eq(r.world_size, 6);
	ck_assert_str_eq(r.rack[1].server, "10.31.0.1");
	ck_assert_uint_eq(r.rack[0].first_rank, 0);
	ck_assert_uint_eq(r.rack[1].first_rank, 1);
	ck_assert_uint_eq(r.rack[2].first_rank, 3);
	ck_assert_uint_eq(r.rack[2].ranks, 3);
	/* Global rank -> rack and index inside it. */
	ck_assert_int_eq(phub_bench_rack_of(&r, 0, &local), 0);
	ck_assert_uint_eq(local, 0);
	ck_assert_int_eq(phub_bench_rack_of(&r, 1, &local), 1);
	ck_assert_uint_eq(local, 0);
	ck_assert_int_eq(phub_bench_rack_of(&r, 2, &local), 1);
	ck_assert_uint_eq(local, 1);
	ck_assert_int_eq(phub_bench_rack_of(&r, 5, &local), 2);
	ck_assert_uint_eq(local, 2);
	ck_assert_int_eq(phub_bench_rack_of(&r, 6, &local), -ERANGE);
	/* One rack is a job on one PBox. */
	ck_assert_int_eq(phub_bench_racks_parse("10.1.0.1:4", &r, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.n, 1);
	ck_assert_uint_eq(r.world_size, 4);
}
END_TEST

START_TEST(test_racks_parse_refuses_what_is_not_ip_colon_ranks)
{
	const char *bad[] = { "", "10.1.0.1", "10.1.0.1:0", "10.1.0.1:x", "10.1.0.1:2,",
		"host:2", "10.1.0.1:-1", "10.1.0.1:2,,10.2.0.1:2", "10.1.0.1:65535,10.2.0.1:1",
		"10.1.0.1:2:47000", "10.1.0.1:2 ", "10.1.0.1:01",
		"1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1" };
	struct phub_bench_racks r;
	char err[256];
	unsigned int i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		ck_assert_msg(phub_bench_racks_parse(bad[i], &r, err, sizeof(err)) == -EINVAL,
			"'%s' accepted", bad[i]);
		ck_assert_msg(strncmp(err, "--servers", 9) == 0, "'%s': %s", bad[i], err);
	}
	ck_assert_int_eq(phub_bench_racks_parse(NULL, &r, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(test_netns_names_per_rack)
{
	struct phub_bench_racks r;
	char err[256], buf[64];

	ck_assert_int_eq(phub_bench_racks_parse("10.30.0.1:1,10.31.0.1:2,10.32.0.1:3", &r, err,
		sizeof(err)), 0);
	/* %r: the rack's number; the index within the rack counts from 1. */
	ck_assert_int_eq(phub_bench_netns_name("ring.%r-w", NULL, &r, 0, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "ring.0-w1");
	ck_assert_int_eq(phub_bench_netns_name("ring.%r-w", NULL, &r, 2, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "ring.1-w2");
	ck_assert_int_eq(phub_bench_netns_name("r%r.%r-", NULL, &r, 5, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "r2.2-3");
	/* A list: one prefix per rack. */
	ck_assert_int_eq(phub_bench_netns_name(NULL, "a-w,bb-w,c", &r, 1, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "bb-w1");
	ck_assert_int_eq(phub_bench_netns_name(NULL, "a-w,bb-w,c", &r, 4, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "c2");
	/* A plain prefix: the global rank, as without racks. */
	ck_assert_int_eq(phub_bench_netns_name("all", NULL, &r, 4, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "all5");
	ck_assert_int_eq(phub_bench_netns_name("pt7-w", NULL, NULL, 0, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "pt7-w1");
	/* Errors. */
	ck_assert_int_eq(phub_bench_netns_name("x%r", NULL, &r, 6, buf, sizeof(buf)), -ERANGE);
	ck_assert_int_eq(phub_bench_netns_name("a-very-long-prefix-%r-", NULL, &r, 0, buf, 8),
		-ENAMETOOLONG);
	ck_assert_int_eq(phub_bench_netns_name(NULL, NULL, &r, 0, buf, sizeof(buf)), -EINVAL);
	ck_assert_int_eq(phub_bench_prefixes_check("a,b,c", 3, err, sizeof(err)), 0);
	ck_assert_int_eq(phub_bench_prefixes_check("a,b", 3, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "2 prefix(es) for 3 rack(s)"));
}
END_TEST

START_TEST(test_order_dependence_and_exact_runs_across_racks)
{
	struct phub_bench_run run = test_run(2, 10);
	struct phub_bench_racks r;
	char err[64];

	ck_assert(!phub_bench_order_dependent(false, false, 3));
	ck_assert(!phub_bench_order_dependent(true, true, 0));
	ck_assert(!phub_bench_order_dependent(true, true, 1));
	ck_assert(phub_bench_order_dependent(true, false, 0));
	/* The ring adds rack sums from a different rack per part: a tolerance check. */
	ck_assert(phub_bench_order_dependent(true, true, 2));
	ck_assert_int_eq(phub_bench_racks_parse("10.1.0.1:1,10.2.0.1:1", &r, err, sizeof(err)),
		0);
	run.random_gradients = true;
	run.deterministic = true;
	ck_assert(phub_bench_run_exact(&run));
	run.racks = &r;
	ck_assert(!phub_bench_run_exact(&run));
	run.random_gradients = false;
	ck_assert(phub_bench_run_exact(&run));
	test_run_free(&run);
}
END_TEST

START_TEST(test_digest_is_fnv1a_and_the_report_shows_one_when_all_agree)
{
	struct phub_bench_run run = test_run(2, 10);
	struct phub_bench_worker_result res[2] = {
		{ .rank = 0, .verified = true },
		{ .rank = 1, .verified = true },
	};
	struct phub_bench_racks r;
	struct phub_bench_summary s;
	char err[64];
	json_t *j, *racks;

	/* FNV-1a 64 test vectors. */
	ck_assert_uint_eq(phub_bench_digest("", 0, PHUB_BENCH_DIGEST_INIT),
		0xcbf29ce484222325ull);
	ck_assert_uint_eq(phub_bench_digest("a", 1, PHUB_BENCH_DIGEST_INIT),
		0xaf63dc4c8601ec8cull);
	ck_assert_uint_eq(phub_bench_digest("foobar", 6, PHUB_BENCH_DIGEST_INIT),
		0x85944171f73967e8ull);
	ck_assert_uint_eq(phub_bench_digest("bar", 3, phub_bench_digest("foo", 3,
		PHUB_BENCH_DIGEST_INIT)), 0x85944171f73967e8ull);
	ck_assert_int_eq(phub_bench_racks_parse("10.1.0.1:1,10.2.0.1:1", &r, err, sizeof(err)),
		0);
	run.racks = &r;
	res[0].digest = res[1].digest = 0x0123456789abcdefull;
	phub_bench_summarize(&run, res, NULL, 2, 2, &s);
	j = phub_bench_report_json(&run, &s, res, 2, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "model_digest")),
		"0123456789abcdef");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(
		json_object_get(j, "per_worker"), 1), "model_digest")), "0123456789abcdef");
	racks = json_object_get(j, "racks");
	ck_assert_uint_eq(json_array_size(racks), 2);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(racks, 1), "server")),
		"10.2.0.1");
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(racks, 1),
		"first_rank")), 1);
	json_decref(j);
	/* Models that differ: no run-wide digest. */
	res[1].digest = 1;
	j = phub_bench_report_json(&run, &s, res, 2, NULL);
	ck_assert_ptr_null(json_object_get(j, "model_digest"));
	json_decref(j);
	test_run_free(&run);
}
END_TEST

Suite *
phub_bench_suite(void)
{
	Suite *s = suite_create("bench");

	/* By what they test: models, patterns, the verifier, the report, racks. */
	PHUB_TCASE_LOOP(s, "preset_totals", test_preset_has_torchvision_key_count_and_parameter_total,
		sizeof(preset_totals) / sizeof(preset_totals[0]));
	PHUB_TCASE(s, "models",
		test_preset_keys_follow_torchvision_parameter_order,
		test_unknown_preset_is_enoent,
		test_model_names_are_phub_plans_in_any_case,
		test_layout_file_lists_key_sizes_in_order,
		test_layout_file_errors_name_file_line_and_path,
		test_synthetic_layout_has_equal_keys);
	PHUB_TCASE(s, "patterns",
		test_pattern_values_are_exact_small_integers_in_every_dtype,
		test_gradients_depend_on_rank_iteration_and_key);
	PHUB_TCASE_LOOP(s, "sum_order", test_gradient_sums_are_the_same_bits_in_any_order, 2);
	PHUB_TCASE(s, "verifier",
		test_reference_sgd_is_initial_minus_lr_times_mean_gradient,
		test_reference_with_no_iteration_is_the_initial_weights,
		test_reference_of_a_large_key_matches_one_pass_over_the_whole_key,
		test_verify_accepts_the_reference_and_counts_every_element,
		test_verify_one_ulp_fails_sgd_and_adam_tolerates_only_rounding,
		test_verify_tolerance_is_one_ulp_of_the_dtype,
		test_verifier_rejects_bad_parameters);
	PHUB_TCASE(s, "report",
		test_quantile_is_nearest_rank,
		test_summary_adds_worker_rates_and_pools_exchange_times,
		test_report_json_has_the_documented_fields,
		test_dtype_names_round_trip);
	PHUB_TCASE(s, "racks",
		test_racks_parse_in_ring_order_with_contiguous_ranks,
		test_racks_parse_refuses_what_is_not_ip_colon_ranks,
		test_netns_names_per_rack,
		test_order_dependence_and_exact_runs_across_racks,
		test_digest_is_fnv1a_and_the_report_shows_one_when_all_agree);
	return s;
}
