/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/engine's checkpoints: the shadow snapshot, the file, and restore. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>

#include "unit_suite.h"

#include "engine/phub_engine.h"
#include "engine_test.h"
#include "test_rand.h"

#define NONCE 0x0badc0ffee15900dull
#define WORLD 2

/* A job with its ranks joined, and where each segment of the layout is. */
struct tjob {
	struct phub_engine *engine;
	struct phub_engine_job *job;
	enum phub_dtype dtype;
	uint64_t token[WORLD];
	uint32_t n_segs;
	uint32_t *seg_chunk;
	uint16_t *seg_index;
	struct phub_engine_stats stats;
};

static struct phub_engine_job_params
params(enum phub_dtype dtype, enum phub_opt_type opt, bool shadow)
{
	struct phub_optimizer_params o = { .type = opt, .lr = 0.125f, .momentum = 0.5f,
		.weight_decay = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
	struct phub_engine_job_params p = phub_test_job_params("resnet/run-7", NONCE, WORLD, dtype,
			o);

	p.checkpoint_shadow = shadow;
	return p;
}

static void
tjob_index(struct tjob *t)
{
	const struct phub_layout *layout = phub_engine_job_layout(t->job);
	struct phub_engine_job_info info;
	uint32_t s = 0;

	phub_engine_job_get_info(t->job, &info);
	t->n_segs = info.n_segments;
	t->seg_chunk = calloc(t->n_segs, sizeof(*t->seg_chunk));
	t->seg_index = calloc(t->n_segs, sizeof(*t->seg_index));
	ck_assert_ptr_nonnull(t->seg_chunk);
	ck_assert_ptr_nonnull(t->seg_index);
	for (uint32_t c = 0; c < info.n_chunks; c++) {
		struct phub_layout_chunk chunk;

		phub_layout_chunk_get(layout, c, &chunk);
		for (uint16_t g = 0; g < chunk.n_segments; g++, s++) {
			t->seg_chunk[s] = c;
			t->seg_index[s] = g;
		}
	}
	ck_assert_uint_eq(s, t->n_segs);
}

static void
tjob_join(struct tjob *t)
{
	for (uint16_t r = 0; r < WORLD; r++)
		t->token[r] = phub_test_join(t->job, r, NONCE);
}

static void
tjob_new(struct tjob *t, enum phub_dtype dtype, enum phub_opt_type opt, bool shadow)
{
	struct phub_engine_job_params p = params(dtype, opt, shadow);

	memset(t, 0, sizeof(*t));
	t->engine = phub_engine_create();
	ck_assert_ptr_nonnull(t->engine);
	t->dtype = dtype;
	t->job = phub_engine_job_create(t->engine, &p);
	ck_assert_ptr_nonnull(t->job);
	tjob_index(t);
	tjob_join(t);
}

static void
tjob_free(struct tjob *t)
{
	free(t->seg_chunk);
	free(t->seg_index);
	phub_engine_free(t->engine);
}

/* An exact value of any dtype: small integers and halves. */
static float
grad_value(uint16_t rank, uint32_t iteration, uint64_t elem)
{
	if (iteration == 0)
		return (float)(elem % 9) * 0.5f - 2.0f;
	return (float)((int)((elem * 5 + rank * 11 + iteration * 7) % 13) - 6) * 0.5f;
}

static uint16_t
to_half(float f)
{
	/* The values above are exact in fp16: integers and halves below 8. */
	uint32_t b = phub_f32_bits(f);
	uint16_t sign, exp, man;

	if (f == 0.0f)
		return 0;
	sign = (uint16_t)((b >> 16) & 0x8000);
	exp = (uint16_t)(((b >> 23) & 0xff) - 127 + 15);
	man = (uint16_t)((b >> 13) & 0x3ff);
	return (uint16_t)(sign | exp << 10 | man);
}

static struct phub_engine_request
request(struct tjob *t, uint16_t rank, uint32_t seg, uint32_t iteration, void *payload)
{
	const struct phub_layout *layout = phub_engine_job_layout(t->job);
	struct phub_layout_chunk c;
	struct phub_layout_segment s;
	struct phub_engine_request r;
	size_t es = phub_dtype_size(t->dtype);

	phub_layout_chunk_get(layout, t->seg_chunk[seg], &c);
	phub_layout_segment_get(layout, t->seg_chunk[seg], t->seg_index[seg], &s);
	r = phub_test_request(t->job, rank, t->token[rank], t->seg_chunk[seg], t->seg_index[seg],
			iteration, payload);
	r.dtype = (uint8_t)t->dtype;
	r.payload_len = (size_t)s.n_elems * es;
	if (payload != NULL) {
		for (uint32_t i = 0; i < s.n_elems; i++) {
			float v = grad_value(rank, iteration, c.elem_base + s.elem_offset + i);

			uint32_t bits;

			memcpy(&bits, &v, sizeof(bits));
			if (es == 4)
				memcpy((uint8_t *)payload + 4 * i, &v, 4);
			else if (t->dtype == PHUB_DTYPE_BF16)
				((uint16_t *)payload)[i] = (uint16_t)(bits >> 16);
			else
				((uint16_t *)payload)[i] = to_half(v);
		}
	}
	return r;
}

/* Every rank pushes segment seg of iteration: the last push completes it. */
static void
complete_segment(struct tjob *t, uint32_t seg, uint32_t iteration)
{
	struct phub_engine_reply reply;
	float payload[PHUB_TEST_SEG_ELEMS];

	for (uint16_t r = 0; r < WORLD; r++) {
		struct phub_engine_request req = request(t, r, seg, iteration, payload);

		phub_engine_push(t->job, &req, &reply, &t->stats);
		ck_assert_uint_ne(reply.actions, PHUB_ENGINE_DROP);
	}
	ck_assert(reply.actions & PHUB_ENGINE_MODEL_ALL);
}

static void
run_iterations(struct tjob *t, uint32_t first, uint32_t last)
{
	for (uint32_t it = first; it <= last; it++)
		for (uint32_t s = 0; s < t->n_segs; s++)
			complete_segment(t, s, it);
}

static int
memfd(void)
{
	int fd = memfd_create("ckpt", 0);

	ck_assert_int_ge(fd, 0);
	return fd;
}

static int
write_to_memfd(struct phub_engine_job *job, enum phub_engine_ckpt_source src)
{
	char err[256] = "";
	int fd = memfd();

	ck_assert_msg(phub_engine_ckpt_write(job, src, 0, fd, err, sizeof(err)) == 0, "%s", err);
	return fd;
}

static struct phub_engine_job *
restore(struct phub_engine *engine, int fd, char *err, size_t errlen,
		struct phub_engine_ckpt_info *info)
{
	struct phub_engine_ckpt_restore_params rp = { .checkpoint_shadow = true };

	return phub_engine_ckpt_restore(engine, fd, &rp, info, err, errlen);
}

/* t is the job of the checkpoint in fd, restored into an engine of its own; not joined. */
static void
tjob_restore(struct tjob *t, int fd, enum phub_dtype dtype, struct phub_engine_ckpt_info *info)
{
	char err[256] = "";

	memset(t, 0, sizeof(*t));
	t->engine = phub_engine_create();
	ck_assert_ptr_nonnull(t->engine);
	t->dtype = dtype;
	t->job = restore(t->engine, fd, err, sizeof(err), info);
	ck_assert_msg(t->job != NULL, "%s", err);
}

static void
assert_same_state(const struct phub_engine_job *a, const struct phub_engine_job *b)
{
	ck_assert_mem_eq(phub_engine_job_model(a), phub_engine_job_model(b), PHUB_TEST_N_ELEMS * 4);
	for (unsigned int i = 0; i < 2; i++) {
		ck_assert((phub_engine_job_state(a, i) == NULL) ==
				(phub_engine_job_state(b, i) == NULL));
		if (phub_engine_job_state(a, i) != NULL)
			ck_assert_mem_eq(phub_engine_job_state(a, i), phub_engine_job_state(b, i),
					PHUB_TEST_N_ELEMS * 4);
	}
}

/* ---- round trip ---- */

static void
round_trip(enum phub_dtype dtype, enum phub_opt_type opt)
{
	struct tjob a, b;
	struct phub_engine_ckpt_info info;
	struct phub_engine_job_info ji;
	struct phub_engine_reply ra, rb;
	struct phub_engine_request req;
	float payload[PHUB_TEST_SEG_ELEMS];
	int fd;

	tjob_new(&a, dtype, opt, false);
	run_iterations(&a, 0, 5);
	fd = write_to_memfd(a.job, PHUB_ENGINE_CKPT_LIVE);

	tjob_restore(&b, fd, dtype, &info);
	close(fd);
	ck_assert_str_eq(info.name, "resnet/run-7");
	ck_assert_uint_eq(info.nonce, NONCE);
	ck_assert_uint_eq(info.iteration, 5);
	ck_assert_uint_eq(info.world_size, WORLD);
	ck_assert_int_eq(info.dtype, dtype);
	ck_assert_int_eq(info.optimizer.type, opt);
	ck_assert_float_eq(info.optimizer.lr, 0.125f);
	ck_assert_uint_eq(info.n_keys, PHUB_TEST_N_KEYS);
	ck_assert_uint_eq(info.n_elems, PHUB_TEST_N_ELEMS);
	ck_assert_ptr_eq(phub_engine_job_find(b.engine, "resnet/run-7"), b.job);
	assert_same_state(a.job, b.job);

	/* It waits for iteration 6, with the model of 5 kept: what JOIN_ACK will say. */
	phub_engine_job_get_info(b.job, &ji);
	ck_assert_uint_eq(ji.iteration_min, 5);
	ck_assert_uint_eq(ji.iteration_max, 5);
	ck_assert_uint_eq(ji.joined, 0);
	tjob_index(&b);
	tjob_join(&b);

	/* A late PUSH of 5 gets the same MODEL bytes as from the job that computed it. */
	req = request(&a, 1, 3, 5, payload);
	phub_engine_push(a.job, &req, &ra, &a.stats);
	req = request(&b, 1, 3, 5, payload);
	phub_engine_push(b.job, &req, &rb, &b.stats);
	ck_assert_uint_eq(ra.actions, PHUB_ENGINE_MODEL_ONE);
	ck_assert_uint_eq(rb.actions, PHUB_ENGINE_MODEL_ONE);
	ck_assert_uint_eq(rb.iteration, 5);
	ck_assert_uint_eq(rb.model_bytes, ra.model_bytes);
	ck_assert_mem_eq(rb.model, ra.model, ra.model_bytes);

	/* Iterations it does not have are refused: nothing newer exists, nothing older is due. */
	req = request(&b, 0, 0, 7, payload);
	phub_engine_push(b.job, &req, &rb, &b.stats);
	ck_assert_uint_eq(rb.actions, PHUB_ENGINE_DROP);
	ck_assert_int_eq(rb.reason, PHUB_DROP_FUTURE_ITERATION);
	req = request(&b, 0, 0, 4, payload);
	phub_engine_push(b.job, &req, &rb, &b.stats);
	ck_assert_int_eq(rb.reason, PHUB_DROP_STALE_ITERATION);

	/* Training goes on from the restored job exactly as from the original. */
	run_iterations(&a, 6, 8);
	run_iterations(&b, 6, 8);
	assert_same_state(a.job, b.job);
	tjob_free(&a);
	tjob_free(&b);
}

START_TEST(test_round_trip_restores_every_bit_and_training_goes_on_the_same)
{
	round_trip(PHUB_DTYPE_FP32, PHUB_OPT_SGD);
	round_trip(PHUB_DTYPE_FP32, PHUB_OPT_MOMENTUM);
	round_trip(PHUB_DTYPE_FP32, PHUB_OPT_ADAM);
	round_trip(PHUB_DTYPE_FP16, PHUB_OPT_NESTEROV);
	round_trip(PHUB_DTYPE_BF16, PHUB_OPT_ADAMW);
}
END_TEST

START_TEST(test_peek_reads_the_header_and_size)
{
	struct phub_engine_ckpt_info info;
	struct tjob a;
	char err[256] = "";
	int fd;

	tjob_new(&a, PHUB_DTYPE_FP32, PHUB_OPT_ADAM, false);
	run_iterations(&a, 0, 2);
	fd = memfd();
	ck_assert_int_eq(phub_engine_ckpt_write(a.job, PHUB_ENGINE_CKPT_LIVE,
			PHUB_ENGINE_CKPT_F_DETERMINISTIC, fd, err, sizeof(err)), 0);
	ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
	ck_assert_int_eq(phub_engine_ckpt_peek(fd, &info, err, sizeof(err)), 0);
	ck_assert_uint_eq(info.iteration, 2);
	ck_assert_uint_eq(info.flags, PHUB_ENGINE_CKPT_F_DETERMINISTIC);
	ck_assert_uint_eq(info.chunk_bytes, PHUB_TEST_CHUNK_BYTES);
	ck_assert_uint_eq(info.segment_elems, PHUB_TEST_SEG_ELEMS);
	/* header, 3 keys, model, m and v, CRC */
	ck_assert_uint_eq(info.file_bytes,
			PHUB_ENGINE_CKPT_HEADER_BYTES + 3 * 8 + 3 * 4 * PHUB_TEST_N_ELEMS + 4);
	ck_assert_int_eq(lseek(fd, 0, SEEK_END), (off_t)info.file_bytes);
	close(fd);
	tjob_free(&a);
}
END_TEST

START_TEST(test_live_write_refuses_a_job_in_the_middle_of_an_iteration)
{
	struct tjob a;
	char err[256] = "";
	int fd = memfd();

	tjob_new(&a, PHUB_DTYPE_FP32, PHUB_OPT_SGD, false);
	/* No iteration finished yet: there is no model to save. */
	ck_assert_int_eq(phub_engine_ckpt_write(a.job, PHUB_ENGINE_CKPT_LIVE, 0, fd, err,
			sizeof(err)), -EAGAIN);
	run_iterations(&a, 0, 1);
	complete_segment(&a, 4, 2);
	ck_assert_int_eq(phub_engine_ckpt_write(a.job, PHUB_ENGINE_CKPT_LIVE, 0, fd, err,
			sizeof(err)), -EAGAIN);
	ck_assert_ptr_nonnull(strstr(err, "middle of an iteration"));
	/* Without a shadow there is no snapshot either. */
	ck_assert_int_eq(phub_engine_ckpt_write(a.job, PHUB_ENGINE_CKPT_SHADOW, 0, fd, err,
			sizeof(err)), -EAGAIN);
	ck_assert_int_eq(phub_engine_job_ckpt_collect(a.job, 4), -ENOTSUP);
	ck_assert_int_eq(lseek(fd, 0, SEEK_END), 0);
	close(fd);
	tjob_free(&a);
}
END_TEST

/* ---- damaged files ---- */

/* A good checkpoint of iteration 3 of an Adam job in a memfd, and its size. */
static int
good_file(off_t *size)
{
	struct tjob a;
	int fd;

	tjob_new(&a, PHUB_DTYPE_FP32, PHUB_OPT_ADAM, false);
	run_iterations(&a, 0, 3);
	fd = write_to_memfd(a.job, PHUB_ENGINE_CKPT_LIVE);
	*size = lseek(fd, 0, SEEK_END);
	tjob_free(&a);
	return fd;
}

static void
assert_refused(int fd, const char *why)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_ckpt_info info;
	char err[256] = "";

	errno = 0;
	ck_assert_ptr_null(restore(engine, fd, err, sizeof(err), &info));
	ck_assert_int_eq(errno, EBADMSG);
	ck_assert_msg(strstr(err, why) != NULL, "'%s' does not say '%s'", err, why);
	/* Nothing is left behind: the job may come back from another file. */
	ck_assert_ptr_null(phub_engine_job_next(engine, NULL));
	phub_engine_free(engine);
}

START_TEST(test_restore_refuses_a_torn_file)
{
	static const off_t cuts[] = { 1, 4, 5, 1000, 4 * PHUB_TEST_N_ELEMS };
	off_t size;
	int fd = good_file(&size);

	for (unsigned int i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		ck_assert_int_eq(ftruncate(fd, size - cuts[i]), 0);
		assert_refused(fd, "torn");
	}
	ck_assert_int_eq(ftruncate(fd, 100), 0);
	assert_refused(fd, "torn");
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	assert_refused(fd, "torn");
	close(fd);
}
END_TEST

START_TEST(test_restore_refuses_a_corrupted_byte_anywhere)
{
	off_t size;
	int fd = good_file(&size);
	/* In the name, the keys, the model, m, v and the CRC itself. */
	const off_t where[] = { 20, PHUB_ENGINE_CKPT_HEADER_BYTES + 9,
		PHUB_ENGINE_CKPT_HEADER_BYTES + 24 + 4 * 600,
		PHUB_ENGINE_CKPT_HEADER_BYTES + 24 + 4 * (PHUB_TEST_N_ELEMS + 17),
		size - 5 - 4 * 3, size - 2 };

	for (unsigned int i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		uint8_t byte, flipped;

		ck_assert_int_eq(pread(fd, &byte, 1, where[i]), 1);
		flipped = byte ^ 0x10;
		ck_assert_int_eq(pwrite(fd, &flipped, 1, where[i]), 1);
		assert_refused(fd, "corrupt");
		ck_assert_int_eq(pwrite(fd, &byte, 1, where[i]), 1);
	}
	/* Put back, it restores: the refusals were about the bytes, not the file. */
	{
		struct phub_engine *engine = phub_engine_create();
		struct phub_engine_ckpt_info info;
		char err[256] = "";

		ck_assert_msg(restore(engine, fd, err, sizeof(err), &info) != NULL, "%s", err);
		phub_engine_free(engine);
	}
	close(fd);
}
END_TEST

START_TEST(test_restore_refuses_a_file_that_is_not_a_checkpoint)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_ckpt_info info;
	char err[256] = "";
	uint8_t junk[PHUB_ENGINE_CKPT_HEADER_BYTES + 64];
	off_t size;
	int fd = memfd();

	memset(junk, 'x', sizeof(junk));
	ck_assert_int_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	ck_assert_ptr_null(restore(engine, fd, err, sizeof(err), &info));
	ck_assert_int_eq(errno, EBADMSG);
	ck_assert_ptr_nonnull(strstr(err, "magic"));
	close(fd);

	/* Another version is named as such, not taken for damage. */
	fd = good_file(&size);
	ck_assert_int_eq(pwrite(fd, "\x02", 1, 8), 1);
	ck_assert_ptr_null(restore(engine, fd, err, sizeof(err), &info));
	ck_assert_int_eq(errno, EPROTONOSUPPORT);
	close(fd);
	phub_engine_free(engine);
}
END_TEST

START_TEST(test_restore_refuses_segments_the_ports_no_longer_carry)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_ckpt_restore_params rp = {
		.max_segment_elems = PHUB_TEST_SEG_ELEMS / 2,
	};
	struct phub_engine_ckpt_info info;
	char err[256] = "";
	off_t size;
	int fd = good_file(&size);

	ck_assert_ptr_null(phub_engine_ckpt_restore(engine, fd, &rp, &info, err, sizeof(err)));
	ck_assert_int_eq(errno, E2BIG);
	ck_assert_ptr_nonnull(strstr(err, "MTU"));
	rp.max_segment_elems = PHUB_TEST_SEG_ELEMS;
	ck_assert_msg(phub_engine_ckpt_restore(engine, fd, &rp, &info, err, sizeof(err)) != NULL,
			"%s", err);
	/* A second restore of the same job finds it there already. */
	ck_assert_ptr_null(phub_engine_ckpt_restore(engine, fd, &rp, &info, err, sizeof(err)));
	ck_assert_int_eq(errno, EEXIST);
	close(fd);
	phub_engine_free(engine);
}
END_TEST

/*
 * Random damage, a few bytes at a time (mostly in the header and the keys, where the parsing
 * is) and random truncations: every damaged file is refused with a reason, nothing crashes
 * (the sanitizer build watches) and nothing is left behind.
 */
START_TEST(test_restore_refuses_random_damage_without_leaving_anything)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	uint8_t *good, *bad;
	off_t size;
	int fd = good_file(&size);

	good = malloc((size_t)size);
	bad = malloc((size_t)size);
	ck_assert_int_eq(pread(fd, good, (size_t)size, 0), size);
	close(fd);
	for (unsigned int round = 0; round < 400; round++) {
		struct phub_engine *engine = phub_engine_create();
		struct phub_engine_ckpt_info info;
		size_t len = (size_t)size;
		unsigned int flips;
		char err[256];

		memcpy(bad, good, len);
		flips = 1 + (unsigned int)(phub_test_rand(&rng) % 3);
		for (unsigned int i = 0; i < flips; i++) {
			size_t at;

			phub_test_rand(&rng);
			/* Distinct places: two flips of one byte could cancel out. */
			at = (rng & 1) ? (size_t)(rng >> 8) % 200 : (size_t)(rng >> 8) % len;
			at = (at + i * 7) % len;
			bad[at] ^= (uint8_t)(1u + (rng >> 40) % 255);
		}
		if (round % 8 == 7)
			len = (size_t)(rng >> 20) % len;
		fd = memfd();
		ck_assert_int_eq(write(fd, bad, len), (ssize_t)len);
		errno = 0;
		ck_assert_ptr_null(restore(engine, fd, err, sizeof(err), &info));
		ck_assert_msg(errno == EBADMSG || errno == EPROTONOSUPPORT || errno == EINVAL ||
				errno == E2BIG, "round %u: errno %d (%s)", round, errno, err);
		ck_assert_msg(err[0] != '\0', "round %u: no reason given", round);
		ck_assert_ptr_null(phub_engine_job_next(engine, NULL));
		close(fd);
		phub_engine_free(engine);
	}
	free(good);
	free(bad);
}
END_TEST

/* ---- the shadow snapshot ---- */

START_TEST(test_shadow_counts_against_the_memory_limit)
{
	struct phub_engine *engine = phub_engine_create();
	struct phub_engine_job_params p = params(PHUB_DTYPE_FP32, PHUB_OPT_MOMENTUM, false);
	struct phub_engine_job_info without, with;
	struct phub_engine_job *job;

	job = phub_engine_job_create(engine, &p);
	ck_assert_ptr_nonnull(job);
	phub_engine_job_get_info(job, &without);
	phub_engine_job_unpublish(engine, job);
	phub_engine_job_free(job);
	p.checkpoint_shadow = true;
	job = phub_engine_job_create(engine, &p);
	ck_assert_ptr_nonnull(job);
	phub_engine_job_get_info(job, &with);
	/* model and m */
	ck_assert_uint_eq(with.memory_bytes - without.memory_bytes, 2 * 4 * PHUB_TEST_N_ELEMS);
	phub_engine_job_unpublish(engine, job);
	phub_engine_job_free(job);
	p.memory_limit_bytes = without.memory_bytes + 4 * PHUB_TEST_N_ELEMS;
	ck_assert_ptr_null(phub_engine_job_create(engine, &p));
	ck_assert_int_eq(errno, E2BIG);
	phub_engine_free(engine);
}
END_TEST

/*
 * The snapshot of iteration 4 while the segments drift apart: the first half completes 4, then
 * 5 and 6 (their model and state move on) before the second half completes 4. The shadow must
 * hold iteration 4 everywhere: the model and optimizer state of a job that stopped at 4.
 */
static void
shadow_while_segments_go_on(enum phub_opt_type opt)
{
	struct tjob a, ref;
	struct phub_engine_ckpt_status st;
	struct phub_engine_ckpt_info info;
	struct phub_engine *engine;
	struct phub_engine_job *restored;
	char err[256] = "";
	uint32_t half;
	int fd;

	tjob_new(&a, PHUB_DTYPE_FP32, opt, true);
	tjob_new(&ref, PHUB_DTYPE_FP32, opt, false);
	half = a.n_segs / 2;
	run_iterations(&a, 0, 3);
	run_iterations(&ref, 0, 4);
	ck_assert_int_eq(phub_engine_job_ckpt_collect(a.job, 4), 0);
	phub_engine_job_ckpt_status(a.job, true, &st);
	ck_assert(st.armed && !st.complete && !st.missed);
	ck_assert_uint_eq(st.copied, 0);

	for (uint32_t s = 0; s < half; s++)
		for (uint32_t it = 4; it <= 6; it++)
			complete_segment(&a, s, it);
	phub_engine_job_ckpt_status(a.job, true, &st);
	ck_assert(!st.complete && !st.missed);
	ck_assert_uint_eq(st.copied, half);
	/* Not yet complete: nothing to write. */
	fd = memfd();
	ck_assert_int_eq(phub_engine_ckpt_write(a.job, PHUB_ENGINE_CKPT_SHADOW, 0, fd, err,
			sizeof(err)), -EAGAIN);
	for (uint32_t s = half; s < a.n_segs; s++)
		complete_segment(&a, s, 4);
	phub_engine_job_ckpt_status(a.job, true, &st);
	ck_assert(st.complete && !st.missed);
	ck_assert_uint_eq(st.iteration, 4);
	ck_assert_uint_eq(st.copied, a.n_segs);
	/* The live job is inconsistent now (4 and 6): only the shadow can be saved. */
	ck_assert_int_eq(phub_engine_ckpt_write(a.job, PHUB_ENGINE_CKPT_LIVE, 0, fd, err,
			sizeof(err)), -EAGAIN);
	ck_assert_msg(phub_engine_ckpt_write(a.job, PHUB_ENGINE_CKPT_SHADOW, 0, fd, err,
			sizeof(err)) == 0, "%s", err);
	/* More completions do not disturb a complete snapshot. */
	for (uint32_t s = half; s < a.n_segs; s++)
		complete_segment(&a, s, 5);
	phub_engine_job_ckpt_status(a.job, true, &st);
	ck_assert(st.complete);

	engine = phub_engine_create();
	restored = restore(engine, fd, err, sizeof(err), &info);
	ck_assert_msg(restored != NULL, "%s", err);
	ck_assert_uint_eq(info.iteration, 4);
	assert_same_state(restored, ref.job);
	close(fd);
	phub_engine_free(engine);
	tjob_free(&a);
	tjob_free(&ref);
}

START_TEST(test_shadow_holds_the_model_at_its_iteration_while_segments_go_on)
{
	shadow_while_segments_go_on(PHUB_OPT_SGD);
	shadow_while_segments_go_on(PHUB_OPT_ADAM);
}
END_TEST

START_TEST(test_collection_a_segment_raced_past_is_reported_missed)
{
	struct phub_engine_ckpt_status st;
	struct tjob a;

	tjob_new(&a, PHUB_DTYPE_FP32, PHUB_OPT_SGD, true);
	run_iterations(&a, 0, 1);
	/* Segment 0 finishes 2 before the collection of 2 is armed. */
	complete_segment(&a, 0, 2);
	ck_assert_int_eq(phub_engine_job_ckpt_collect(a.job, 2), 0);
	for (uint32_t s = 1; s < a.n_segs; s++)
		complete_segment(&a, s, 2);
	phub_engine_job_ckpt_status(a.job, false, &st);
	ck_assert(!st.complete && !st.missed);
	ck_assert_uint_eq(st.copied, a.n_segs - 1);
	phub_engine_job_ckpt_status(a.job, true, &st);
	ck_assert(!st.complete && st.missed);

	/* Armed again at 3, it completes; the counts of 2 do not leak into it. */
	ck_assert_int_eq(phub_engine_job_ckpt_collect(a.job, 3), 0);
	for (uint32_t s = 0; s + 1 < a.n_segs; s++)
		complete_segment(&a, s, 3);
	phub_engine_job_ckpt_status(a.job, true, &st);
	ck_assert(!st.complete && !st.missed);
	ck_assert_uint_eq(st.copied, a.n_segs - 1);
	complete_segment(&a, a.n_segs - 1, 3);
	phub_engine_job_ckpt_status(a.job, true, &st);
	ck_assert(st.complete && !st.missed);

	/* Cancelled, nothing is armed and nothing is copied. */
	phub_engine_job_ckpt_cancel(a.job);
	run_iterations(&a, 4, 4);
	phub_engine_job_ckpt_status(a.job, true, &st);
	ck_assert(!st.armed && !st.complete && !st.missed);
	ck_assert_uint_eq(st.copied, 0);
	tjob_free(&a);
}
END_TEST

START_TEST(test_restored_job_snapshots_its_next_iterations)
{
	struct phub_engine_ckpt_status st;
	struct phub_engine_ckpt_info info;
	struct tjob a, b;
	char err[256] = "";
	int fd, fd2;

	tjob_new(&a, PHUB_DTYPE_FP32, PHUB_OPT_MOMENTUM, true);
	run_iterations(&a, 0, 2);
	fd = write_to_memfd(a.job, PHUB_ENGINE_CKPT_LIVE);
	tjob_restore(&b, fd, PHUB_DTYPE_FP32, &info);
	tjob_index(&b);
	tjob_join(&b);
	ck_assert_int_eq(phub_engine_job_ckpt_collect(b.job, 4), 0);
	run_iterations(&b, 3, 5);
	run_iterations(&a, 3, 4);
	phub_engine_job_ckpt_status(b.job, true, &st);
	ck_assert(st.complete);
	fd2 = write_to_memfd(b.job, PHUB_ENGINE_CKPT_SHADOW);
	ck_assert_ptr_eq(phub_engine_job_find(a.engine, "resnet/run-7"), a.job);
	phub_engine_job_unpublish(a.engine, a.job);
	{
		struct phub_engine_job *c = restore(a.engine, fd2, err, sizeof(err), &info);

		ck_assert_msg(c != NULL, "%s", err);
		ck_assert_uint_eq(info.iteration, 4);
		assert_same_state(c, a.job);
	}
	phub_engine_job_free(a.job);
	close(fd);
	close(fd2);
	tjob_free(&a);
	tjob_free(&b);
}
END_TEST

Suite *
phub_engine_ckpt_suite(void)
{
	Suite *s = suite_create("engine_ckpt");

	PHUB_TCASE(s, "file",
		test_round_trip_restores_every_bit_and_training_goes_on_the_same,
		test_peek_reads_the_header_and_size,
		test_live_write_refuses_a_job_in_the_middle_of_an_iteration);

	PHUB_TCASE(s, "damage",
		test_restore_refuses_a_torn_file,
		test_restore_refuses_a_corrupted_byte_anywhere,
		test_restore_refuses_a_file_that_is_not_a_checkpoint,
		test_restore_refuses_segments_the_ports_no_longer_carry,
		test_restore_refuses_random_damage_without_leaving_anything);

	PHUB_TCASE(s, "shadow",
		test_shadow_counts_against_the_memory_limit,
		test_shadow_holds_the_model_at_its_iteration_while_segments_go_on,
		test_collection_a_segment_raced_past_is_reported_missed,
		test_restored_job_snapshots_its_next_iterations);
	return s;
}
