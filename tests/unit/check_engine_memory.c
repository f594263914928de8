/* SPDX-License-Identifier: BSD-3-Clause */
/* phub_engine_memory_need(): a job's PBox memory by part, against what job creation charges. */

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "engine/phub_engine.h"

/* ResNet-50 as phub-bench lays it out: 25 557 032 parameters. */
#define RESNET50_ELEMS 25557032u

START_TEST(test_resnet50_parts_are_what_each_buffer_holds)
{
	struct phub_engine_memory_params p = {
		.n_elems = RESNET50_ELEMS, .n_keys = 162, .dtype = PHUB_DTYPE_FP32,
		.optimizer = PHUB_OPT_NESTEROV, .world_size = 2, .checkpoint_shadow = true,
		.segment_elems = 2048,
	};
	struct phub_engine_memory m;

	phub_engine_memory_need(&p, &m);
	ck_assert_uint_eq(m.model, (uint64_t)RESNET50_ELEMS * 4 * 2);
	ck_assert_uint_eq(m.optimizer, (uint64_t)RESNET50_ELEMS * 4);	/* one momentum buffer */
	ck_assert_uint_eq(m.wire_copy, 0);
	ck_assert_uint_eq(m.checkpoint_shadow, (uint64_t)RESNET50_ELEMS * 4 * 2);
	ck_assert_uint_eq(m.deterministic_staging, 0);
	ck_assert_uint_gt(m.bookkeeping, 0);
	ck_assert_uint_lt(m.bookkeeping, 2 << 20);
	ck_assert_uint_eq(m.total, m.model + m.optimizer + m.checkpoint_shadow + m.bookkeeping);
	/* About 490 MB: more than the 512 MB of EAL memory the rack once had, with its pools. */
	ck_assert_uint_gt(m.total >> 20, 480);
	ck_assert_uint_lt(m.total >> 20, 500);
}
END_TEST

START_TEST(test_deterministic_bf16_adam_counts_staging_and_the_wire_copy)
{
	struct phub_engine_memory_params p = {
		.n_elems = 1000000, .n_keys = 4, .dtype = PHUB_DTYPE_BF16, .optimizer = PHUB_OPT_ADAM,
		.world_size = 4, .deterministic = true, .segment_elems = 4096,
	};
	struct phub_engine_memory m;

	phub_engine_memory_need(&p, &m);
	ck_assert_uint_eq(m.optimizer, 1000000u * 4 * 2);	/* two moments */
	ck_assert_uint_eq(m.wire_copy, 1000000u * 2);
	ck_assert_uint_eq(m.deterministic_staging, 1000000u * 2 * 3);	/* ranks 1..3 */
	ck_assert_uint_eq(m.checkpoint_shadow, 0);
	p.world_size = 1;
	phub_engine_memory_need(&p, &m);
	ck_assert_uint_eq(m.deterministic_staging, 0);
}
END_TEST

/* A job across racks keeps four fp32 models for the ring's steps; the config check counts them. */
START_TEST(test_ring_job_counts_its_four_ring_buffers)
{
	struct phub_engine_memory_params p = {
		.n_elems = 1000000, .n_keys = 1, .dtype = PHUB_DTYPE_FP32, .optimizer = PHUB_OPT_SGD,
		.world_size = 2, .segment_elems = 2048,
	};
	struct phub_engine_memory flat, ring;

	phub_engine_memory_need(&p, &flat);
	ck_assert_uint_eq(flat.ring, 0);
	p.ring = true;
	phub_engine_memory_need(&p, &ring);
	ck_assert_uint_eq(ring.ring, 1000000u * 4 * 4);
	ck_assert_uint_eq(ring.total, flat.total + ring.ring);
}
END_TEST

static const struct phub_layout_key keys[] = {
	{ .key_id = 0, .n_elems = 300000 },
	{ .key_id = 1, .n_elems = 7 },
	{ .key_id = 2, .n_elems = 123457 },
};

static struct phub_engine_job_params
job_params(enum phub_dtype dtype, enum phub_opt_type opt, bool deterministic, bool shadow)
{
	struct phub_engine_job_params p = {
		.name = "mem", .nonce = 0x5be1c2f07a9d3e64ull, .world_size = 3, .dtype = dtype,
		.optimizer = { .type = opt, .lr = 0.1f, .momentum = 0.9f, .beta1 = 0.9f,
			.beta2 = 0.999f, .eps = 1e-8f },
		.keys = keys, .n_keys = 3, .chunk_bytes = 32768, .segment_elems = 512,
		.checkpoint_shadow = shadow, .deterministic = deterministic,
	};
	return p;
}

/* What creation charges is the computation's large parts plus bookkeeping near its estimate. */
START_TEST(test_created_jobs_are_charged_what_the_computation_says)
{
	static const struct {
		enum phub_dtype dtype;
		enum phub_opt_type opt;
		bool deterministic, shadow;
	} cases[] = {
		{ PHUB_DTYPE_FP32, PHUB_OPT_SGD, false, false },
		{ PHUB_DTYPE_FP32, PHUB_OPT_NESTEROV, false, true },
		{ PHUB_DTYPE_FP16, PHUB_OPT_ADAMW, true, true },
		{ PHUB_DTYPE_BF16, PHUB_OPT_MOMENTUM, true, false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct phub_engine *engine = phub_engine_create();
		struct phub_engine_job_params jp = job_params(cases[i].dtype, cases[i].opt,
				cases[i].deterministic, cases[i].shadow);
		struct phub_engine_memory_params p = {
			.n_elems = 300000 + 7 + 123457, .n_keys = 3, .dtype = cases[i].dtype,
			.optimizer = cases[i].opt, .world_size = 3,
			.deterministic = cases[i].deterministic,
			.checkpoint_shadow = cases[i].shadow, .segment_elems = 512,
		};
		struct phub_engine_memory m;
		struct phub_engine_job_info info;
		struct phub_engine_job *job;
		uint64_t large;

		ck_assert_ptr_nonnull(engine);
		phub_engine_memory_need(&p, &m);
		large = m.total - m.bookkeeping;
		job = phub_engine_job_create(engine, &jp);
		ck_assert_ptr_nonnull(job);
		phub_engine_job_get_info(job, &info);
		ck_assert_msg(info.memory_bytes >= large && info.memory_bytes <= m.total + 16384,
			      "case %zu: charged %llu, computed %llu (large parts %llu)", i,
			      (unsigned long long)info.memory_bytes, (unsigned long long)m.total,
			      (unsigned long long)large);
		phub_engine_free(engine);

		/* A limit one byte below the large parts refuses the job with E2BIG. */
		engine = phub_engine_create();
		jp.memory_limit_bytes = large - 1;
		errno = 0;
		ck_assert_ptr_null(phub_engine_job_create(engine, &jp));
		ck_assert_int_eq(errno, E2BIG);
		phub_engine_free(engine);
	}
}
END_TEST

/* An allocator that records what the engine asks it to place. */
struct placed {
	unsigned int calls;
	size_t bytes;
	bool aligned;
	bool covered;
	const struct phub_layout *layout;
};

static struct placed placed;

static void *
rec_alloc(size_t size, size_t align, void *ctx)
{
	(void)ctx;
	return aligned_alloc(align, (size + align - 1) / align * align);
}

static void
rec_free(void *p, void *ctx)
{
	(void)ctx;
	free(p);
}

static void
count_pages(uint64_t first, uint64_t n, int node, void *arg)
{
	uint64_t *pages = arg;

	(void)node;
	if (first == *pages)
		*pages += n;
}

static void
rec_place(void *ptr, size_t size, size_t elem_bytes, const struct phub_layout *layout,
	  void *ctx)
{
	static const struct phub_layout_server server = { .lcore = 1, .lcore_numa = 0 };
	uint64_t pages = 0;

	(void)ctx;
	placed.calls++;
	placed.bytes += size;
	placed.aligned &= (uintptr_t)ptr % 4096 == 0;
	placed.layout = layout;
	/* The layout the engine hands over cuts exactly this buffer into its pages. */
	phub_layout_pages_by_node(layout, &server, 1, elem_bytes, 4096, count_pages, &pages);
	placed.covered &= pages == (size + 4095) / 4096;
}

START_TEST(test_a_placing_allocator_is_asked_to_place_every_per_element_buffer)
{
	static const struct phub_layout_server server = { .lcore = 1, .lcore_numa = 0 };
	struct phub_engine_allocator a = { .alloc = rec_alloc, .free = rec_free,
		.place = rec_place };
	struct phub_engine_job_params jp = job_params(PHUB_DTYPE_FP16, PHUB_OPT_ADAM, false,
			false);
	struct phub_engine *engine = phub_engine_create();
	uint64_t n = 300000 + 7 + 123457;

	memset(&placed, 0, sizeof(placed));
	placed.aligned = placed.covered = true;
	jp.allocator = &a;
	jp.servers = &server;
	jp.n_servers = 1;
	ck_assert_ptr_nonnull(phub_engine_job_create(engine, &jp));
	/* model, aggregation, Adam's two moments in fp32, the fp16 wire copy */
	ck_assert_uint_eq(placed.calls, 5);
	ck_assert_uint_eq(placed.bytes, n * 4 * 4 + n * 2);
	ck_assert(placed.aligned);
	ck_assert(placed.covered);
	ck_assert_ptr_nonnull(placed.layout);
	phub_engine_free(engine);
}
END_TEST

Suite *
phub_engine_memory_suite(void)
{
	Suite *s = suite_create("engine_memory");

	PHUB_TCASE(s, "memory",
		test_resnet50_parts_are_what_each_buffer_holds,
		test_deterministic_bf16_adam_counts_staging_and_the_wire_copy,
		test_ring_job_counts_its_four_ring_buffers,
		test_created_jobs_are_charged_what_the_computation_says,
		test_a_placing_allocator_is_asked_to_place_every_per_element_buffer);
	return s;
}
