/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-bench-kernels: GB/s of the sum and fused optimizer kernels of each ISA, against memcpy. */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "phub_kernels.h"
#include "phub_parse.h"

/*
 * What a figure means. Bytes are the useful bytes of the operation: every
 * input array read once, every output array written once. A sum of K arrays
 * of S bytes moves (K+1)*S; a fused step moves acc, grad, weight and the
 * optimizer state in, weight and the state out. "memcpy of the same bytes"
 * copies half that many bytes (so it too reads B/2 and writes B/2, B in all)
 * over a working set of the same size, and ratio = memcpy time / kernel time
 * (1.0: the kernel moves its bytes as fast as memcpy moves the same number).
 */
#define DEFINITION                                                                                 \
	"GB/s = useful bytes / time (1 GB = 1e9 B): each input array read once, each output "     \
	"written once; sum of K arrays of S bytes = (K+1)*S; fused step = acc + grad + weight + " \
	"state read, weight + state written. memcpy of the same bytes = memcpy of B/2 bytes "     \
	"(B/2 read + B/2 written) over a working set of the same size. ratio = memcpy time / "    \
	"kernel time. sum-seq = first() then K-1 add() calls, one arrival per call as in the "    \
	"engine (it also re-reads and re-writes acc: it moves (3K-1)*S, see ratio(moved)); "      \
	"sum-batch = one sum() call over the K arrays; add = one add() call (K = 1). "            \
	"nt-exp rows: the same AVX-512 loops with non-temporal stores, an experiment outside "    \
	"the library. floor rows: copy-seq = K memcpy() of S bytes into acc, one per arrival: "   \
	"the stores any one-arrival-per-call path must make, without its arithmetic. "            \
	"stage-batch = K-1 arrivals copied to staging buffers, then one sum() over K (the "       \
	"deterministic mode's batching; in-cache rows only). "                                    \
	"fused floor = first + adds + two add() calls (weight += acc, m += grad): the fused "     \
	"Nesterov step's loads and stores without its arithmetic."

#define CHUNK_BYTES (32u << 10)
#define CHUNK_BYTES_MAX (1u << 20)
#define DRAM_BYTES (256u << 20)
#define DRAM_BYTES_QUICK (64u << 20)
#define MAX_K 8
/*
 * Arrays of the arena start this many bytes apart beyond their size: 17 cache
 * lines, so no two sit at the same offset modulo 4 KiB, as the engine's
 * buffers and packet payloads do not (4K aliasing would slow every ISA alike).
 */
#define SKEW 1088
/*
 * Where the engine's PUSH payload starts past a cache line: the RX mbuf's
 * data begins 128 bytes (RTE_PKTMBUF_HEADROOM) into a line-aligned buffer,
 * then Ethernet 14, IPv4 20, UDP 8 and the PHub header 56: 226 = 3*64 + 34.
 * --payload-offset puts the arrivals there (they are line-aligned by default).
 */
#define ENGINE_PAYLOAD_OFFSET 34

struct bench {
	bool json;
	bool quick;
	bool tty;
	bool dram;            /* also the DRAM-sized arrays */
	size_t chunk;         /* bytes of each array of the in-cache rows */
	size_t payload_off;   /* bytes past a cache line where each arrival starts */
	enum phub_isa floor_isa; /* the ISA whose pass also measures the floors */
	double batch_seconds; /* one timed batch of an in-cache op */
	int reps;             /* batches; the fastest counts (the machine is shared) */
	unsigned char *arena;
	size_t arena_bytes;
	json_t *results;
	json_t *fused_vs_sum;
	unsigned int step, steps;
};

/* One operation under test; run() is called many times on the same buffers. */
struct op {
	const struct phub_kernels *k;
	void (*run)(struct op *op);
	float *acc;
	const void *srcs[MAX_K];
	void *stage[MAX_K];  /* stage-batch: where the first K-1 arrivals wait, NULL: no row */
	unsigned int nk;
	size_t n;          /* elements */
	void *cpy_dst;
	const void *cpy_src;
	size_t cpy_bytes;
	struct phub_opt_buffers buf;
	struct phub_optimizer_params params;
	struct phub_opt_step ostep;
};

#if defined(__x86_64__)
#include <immintrin.h>

/*
 * The non-temporal experiment (docs/kernels.md): the AVX-512 batched sum and
 * add with streaming stores instead of cached ones. They live here, not in
 * the library, because they lose wherever the engine runs (see the figures).
 * Both need n a multiple of 16 and acc 64-byte aligned, which the arena gives.
 */
__attribute__((target("avx512f"))) static void
nt_sum(float *acc, const void *const *srcs, unsigned int k, size_t n)
{
	__m512 a0, a1;
	unsigned int j;
	size_t i;

	for (i = 0; i < n; i += 32) {
		a0 = _mm512_loadu_ps((const float *)srcs[0] + i);
		a1 = _mm512_loadu_ps((const float *)srcs[0] + i + 16);
		for (j = 1; j < k; j++) {
			a0 = _mm512_add_ps(a0, _mm512_loadu_ps((const float *)srcs[j] + i));
			a1 = _mm512_add_ps(a1, _mm512_loadu_ps((const float *)srcs[j] + i + 16));
		}
		_mm512_stream_ps(acc + i, a0);
		_mm512_stream_ps(acc + i + 16, a1);
	}
	_mm_sfence();
}

__attribute__((target("avx512f"))) static void
nt_add(float *acc, const void *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i += 16)
		_mm512_stream_ps(acc + i, _mm512_add_ps(_mm512_load_ps(acc + i),
							_mm512_loadu_ps((const float *)src + i)));
	_mm_sfence();
}
#endif

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Keep the compiler from dropping stores nobody reads. */
static void
clobber(void)
{
	__asm__ volatile("" ::: "memory");
}

static void
run_memcpy(struct op *op)
{
	memcpy(op->cpy_dst, op->cpy_src, op->cpy_bytes);
	clobber();
}

/* The first count arrivals, one call each as in the engine: first(), then add()s. */
static void
arrivals(struct op *op, unsigned int count)
{
	unsigned int j;

	op->k->first(op->acc, op->srcs[0], PHUB_DTYPE_FP32, op->n);
	for (j = 1; j < count; j++)
		op->k->add(op->acc, op->srcs[j], PHUB_DTYPE_FP32, op->n);
}

static void
run_sum_seq(struct op *op)
{
	arrivals(op, op->nk);
	clobber();
}

/* The floor of sum-seq: each arrival copied into acc, no arithmetic, no read of acc. */
static void
run_copy_seq(struct op *op)
{
	unsigned int j;

	for (j = 0; j < op->nk; j++)
		memcpy(op->acc, op->srcs[j], op->n * sizeof(float));
	clobber();
}

/*
 * Deterministic mode's way to batch: the first K-1 arrivals copied to a
 * staging buffer as they come, then one sum() over all K at the last.
 */
static void
run_stage_batch(struct op *op)
{
	const void *srcs[MAX_K];
	unsigned int j;

	for (j = 0; j + 1 < op->nk; j++) {
		memcpy(op->stage[j], op->srcs[j], op->n * sizeof(float));
		srcs[j] = op->stage[j];
	}
	srcs[op->nk - 1] = op->srcs[op->nk - 1];
	op->k->sum(op->acc, false, srcs, op->nk, PHUB_DTYPE_FP32, op->n);
	clobber();
}

static void
run_sum_batch(struct op *op)
{
	op->k->sum(op->acc, false, op->srcs, op->nk, PHUB_DTYPE_FP32, op->n);
	clobber();
}

static void
run_last(struct op *op)
{
	op->k->last(&op->buf, op->n, &op->params, &op->ostep);
	clobber();
}

static void
run_add(struct op *op)
{
	op->k->add(op->acc, op->srcs[0], PHUB_DTYPE_FP32, op->n);
	clobber();
}

#if defined(__x86_64__)
static void
run_nt_sum(struct op *op)
{
	nt_sum(op->acc, op->srcs, op->nk, op->n);
	clobber();
}

static void
run_nt_add(struct op *op)
{
	nt_add(op->acc, op->srcs[0], op->n);
	clobber();
}
#endif

/* The engine's whole segment: first arrival, later arrivals, the fused last one. */
static void
run_seq_fused(struct op *op)
{
	arrivals(op, op->nk - 1);
	op->k->last(&op->buf, op->n, &op->params, &op->ostep);
	clobber();
}

/*
 * The floor of the fused segment: run_seq_fused with last() replaced by two
 * add() calls that load acc, grad, weight and m and store weight and m, the
 * fused Nesterov step's memory traffic without its arithmetic. The weights
 * grow by about 1 per call: no overflow or subnormal in a run.
 */
static void
run_seq_floor(struct op *op)
{
	arrivals(op, op->nk - 1);
	op->k->add(op->buf.weight, op->acc, PHUB_DTYPE_FP32, op->n);
	op->k->add(op->buf.m, op->buf.grad, PHUB_DTYPE_FP32, op->n);
	clobber();
}

#define MAX_OPS 8

/*
 * Seconds per run() of each of nops operations that a ratio compares: the
 * fastest of reps batches, each of enough calls to last batch_seconds (one
 * call per batch when a call is longer than that). The batches of the
 * operations alternate, so that a burst of other work on the shared machine
 * slows all of them, not the one that happened to be running.
 */
static void
time_ops(const struct bench *b, struct op *const *ops, unsigned int nops, double *best)
{
	unsigned long calls[MAX_OPS], i;
	unsigned int o;
	double t0, t;
	int r;

	for (o = 0; o < nops; o++) {
		ops[o]->run(ops[o]);
		t0 = now();
		ops[o]->run(ops[o]);
		t = now() - t0;
		calls[o] = 1;
		if (t < b->batch_seconds)
			calls[o] = (unsigned long)(b->batch_seconds / (t > 1e-9 ? t : 1e-9)) + 1;
		best[o] = 1e30;
	}
	for (r = 0; r < b->reps; r++) {
		for (o = 0; o < nops; o++) {
			t0 = now();
			for (i = 0; i < calls[o]; i++)
				ops[o]->run(ops[o]);
			t = (now() - t0) / (double)calls[o];
			if (t < best[o])
				best[o] = t;
		}
	}
}

static double
time_op(const struct bench *b, struct op *op)
{
	double t;

	time_ops(b, &op, 1, &t);
	return t;
}

static void
progress(struct bench *b, const char *what)
{
	b->step++;
	if (b->tty)
		fprintf(stderr, "\rphub-bench-kernels: [%2u/%u] %-40s", b->step, b->steps, what);
	else
		fprintf(stderr, "phub-bench-kernels: [%2u/%u] %s\n", b->step, b->steps, what);
}

/* Array j of the arena, for arrays of bytes each. */
static void *
arena_array(const struct bench *b, unsigned int j, size_t bytes)
{
	return b->arena + (size_t)j * (bytes + SKEW);
}

/*
 * Array j as an arrival (a PUSH payload): payload_off bytes further, its
 * floats written there (fp32 at an address that is not a multiple of 4).
 */
static const void *
arena_arrival(const struct bench *b, unsigned int j, size_t bytes)
{
	unsigned char *p = (unsigned char *)arena_array(b, j, bytes) + b->payload_off;
	size_t i;
	float f;

	if (b->payload_off == 0)
		return p;
	for (i = 0; i < bytes / sizeof(float); i++) {
		f = 0.5f + (float)(i % 97) * 0.01f;
		memcpy(p + i * sizeof(float), &f, sizeof(f));
	}
	return p;
}

/* memcpy moving `bytes` over a working set of `bytes`, in the same arena as the kernel. */
static struct op
memcpy_op(struct bench *b, size_t bytes)
{
	struct op op = {
		.run = run_memcpy,
		.cpy_src = b->arena,
		.cpy_dst = b->arena + bytes / 2 + SKEW,
		.cpy_bytes = bytes / 2,
	};

	return op;
}

static double
memcpy_time(struct bench *b, size_t bytes)
{
	struct op op = memcpy_op(b, bytes);

	return time_op(b, &op);
}

/*
 * One row. moved is what the calls really load and store, which is more than
 * the useful bytes when an accumulator is re-read (sum-seq reads and writes
 * acc once per arrival: (3K-1)*S); ratio_moved is the kernel's moved bytes
 * per second over memcpy's.
 */
static void
record(struct bench *b, const char *isa, const char *kernel, size_t array_bytes, unsigned int nk,
       double bytes, double moved, double t, double t_memcpy)
{
	double gbps = bytes / t / 1e9, mgbps = bytes / t_memcpy / 1e9;

	json_array_append_new(b->results,
			      json_pack("{s:s, s:s, s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "isa", isa,
					"kernel", kernel, "array_bytes", (json_int_t)array_bytes,
					"k", (json_int_t)nk, "gbps", gbps, "memcpy_gbps", mgbps,
					"ratio", t_memcpy / t, "ratio_moved",
					t_memcpy / t * moved / bytes, "ns", t * 1e9));
}

static const char *
size_name(size_t bytes, char *buf, size_t len)
{
	if (bytes >= (1u << 20))
		snprintf(buf, len, "%zuMB", bytes >> 20);
	else
		snprintf(buf, len, "%zuKB", bytes >> 10);
	return buf;
}

static void
bench_sums(struct bench *b, const struct phub_kernels *k, size_t array_bytes)
{
	static const unsigned int ks[] = { 2, 4, 8 };
	struct op op = { .k = k, .n = array_bytes / sizeof(float) };
	struct op mc, seq, cpy, batch, stage;
	struct op *ops[6];
#if defined(__x86_64__)
	struct op nt;
#endif
	const char *isa = phub_kernels_isa_name(k->isa);
	double t, tm, bytes, ts[6];
	char what[64], sz[32];
	unsigned int i, j, nops;
	bool floor, staged, ntexp;

	for (i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		op.nk = ks[i];
		for (j = 0; j < op.nk; j++)
			op.srcs[j] = arena_arrival(b, j, array_bytes);
		op.acc = arena_array(b, op.nk, array_bytes);
		bytes = (double)(op.nk + 1) * (double)array_bytes;
		snprintf(what, sizeof(what), "%s sum K=%u %s", phub_kernels_isa_name(k->isa), op.nk,
			 size_name(array_bytes, sz, sizeof(sz)));
		progress(b, what);
		/* memcpy and the kernels of one row timed in alternation: their ratio is fair. */
		mc = memcpy_op(b, (size_t)bytes);
		seq = op;
		seq.run = run_sum_seq;
		cpy = op;
		cpy.run = run_copy_seq;
		batch = op;
		batch.run = run_sum_batch;
		nops = 0;
		ops[nops++] = &mc;
		ops[nops++] = &seq;
		ops[nops++] = &batch;
		floor = k->isa == b->floor_isa;
		if (floor)
			ops[nops++] = &cpy;
		/* Staging buffers after acc: 2K arrays, only in cache (the arena's size). */
		staged = array_bytes == b->chunk;
		stage = op;
		stage.run = run_stage_batch;
		for (j = 0; j + 1 < op.nk; j++)
			stage.stage[j] = arena_array(b, op.nk + 1 + j, array_bytes);
		if (staged)
			ops[nops++] = &stage;
		ntexp = false;
#if defined(__x86_64__)
		ntexp = k->isa == PHUB_ISA_AVX512 && op.nk != 4 && b->payload_off == 0;
		nt = op;
		nt.run = run_nt_sum;
		if (ntexp)
			ops[nops++] = &nt;
#endif
		time_ops(b, ops, nops, ts);
		tm = ts[0];
		record(b, isa, "sum-seq", array_bytes, op.nk, bytes,
		       (double)(3 * op.nk - 1) * (double)array_bytes, ts[1], tm);
		if (floor)
			record(b, "floor", "copy-seq", array_bytes, op.nk, bytes,
			       2.0 * op.nk * (double)array_bytes, ts[3], tm);
		record(b, isa, "sum-batch", array_bytes, op.nk, bytes, bytes, ts[2], tm);
		if (staged)
			record(b, isa, "stage-batch", array_bytes, op.nk, bytes,
			       (double)(3 * op.nk - 1) * (double)array_bytes,
			       ts[floor ? 4 : 3], tm);
		if (ntexp)
			record(b, "nt-exp", "sum-batch-nt", array_bytes, op.nk, bytes, bytes,
			       ts[nops - 1], tm);
	}
	/* One later arrival on its own: acc += src, the engine's commonest call. */
	op.srcs[0] = arena_arrival(b, 0, array_bytes);
	op.acc = arena_array(b, 1, array_bytes);
	bytes = 3.0 * (double)array_bytes;
	tm = memcpy_time(b, (size_t)bytes);
	op.run = run_add;
	t = time_op(b, &op);
	record(b, isa, "add", array_bytes, 1, bytes, bytes, t, tm);
#if defined(__x86_64__)
	if (k->isa == PHUB_ISA_AVX512 && b->payload_off == 0) {
		op.run = run_nt_add;
		t = time_op(b, &op);
		record(b, "nt-exp", "add-nt", array_bytes, 1, bytes, bytes, t, tm);
	}
#endif
}

/* The fused step's buffers on the first arrays of the arena (all in cache at 32 KB). */
static void
fused_op(struct bench *b, struct op *op, enum phub_opt_type type, enum phub_dtype wire)
{
	size_t n = b->chunk / sizeof(float);

	op->n = n;
	op->params = (struct phub_optimizer_params){
		.type = type, .lr = 1e-3f, .momentum = 0.9f, .weight_decay = 1e-4f,
		.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	};
	phub_opt_step_init(&op->ostep, &op->params, 10, 4);
	op->acc = arena_array(b, 0, b->chunk);
	op->buf = (struct phub_opt_buffers){
		.acc = op->acc,
		.grad = arena_arrival(b, 1, b->chunk),
		.grad_dtype = wire,
		.weight = arena_array(b, 2, b->chunk),
		.m = arena_array(b, 3, b->chunk),
		.v = arena_array(b, 4, b->chunk),
		/* fp32: the model buffer itself is the MODEL payload, nothing to write. */
		.out = wire == PHUB_DTYPE_FP32 ? NULL : arena_array(b, 5, b->chunk),
		.out_dtype = wire,
	};
}

/* Useful bytes of one fused step: see DEFINITION. */
static double
fused_bytes(const struct op *op)
{
	size_t n = op->n, ws = phub_dtype_size(op->buf.grad_dtype);
	double bytes = 4.0 * n + ws * n + 8.0 * n; /* acc, grad, weight in and out */

	bytes += 8.0 * n * phub_opt_state_count(op->params.type);
	if (op->buf.out != NULL)
		bytes += (double)phub_dtype_size(op->buf.out_dtype) * n;
	return bytes;
}

static void
bench_fused(struct bench *b, const struct phub_kernels *k)
{
	static const struct {
		const char *name;
		enum phub_opt_type type;
		enum phub_dtype wire;
	} cases[] = {
		{ "sgd", PHUB_OPT_SGD, PHUB_DTYPE_FP32 },
		{ "nesterov", PHUB_OPT_NESTEROV, PHUB_DTYPE_FP32 },
		{ "adam", PHUB_OPT_ADAM, PHUB_DTYPE_FP32 },
		{ "nesterov-fp16", PHUB_OPT_NESTEROV, PHUB_DTYPE_FP16 },
	};
	struct op op = { .k = k, .run = run_last };
	char what[64], name[32], sz[32];
	double t, tm, bytes;
	unsigned int i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		fused_op(b, &op, cases[i].type, cases[i].wire);
		snprintf(what, sizeof(what), "%s last %s %s", phub_kernels_isa_name(k->isa),
			 cases[i].name, size_name(b->chunk, sz, sizeof(sz)));
		progress(b, what);
		bytes = fused_bytes(&op);
		tm = memcpy_time(b, (size_t)bytes);
		t = time_op(b, &op);
		snprintf(name, sizeof(name), "last-%s", cases[i].name);
		record(b, phub_kernels_isa_name(k->isa), name, b->chunk, 2, bytes, bytes, t, tm);
	}
}

/*
 * The second goal: a segment's whole aggregation with Nesterov fused into the
 * last arrival, against the same aggregation without the optimizer.
 */
static void
bench_fused_vs_sum(struct bench *b, const struct phub_kernels *k)
{
	static const unsigned int ks[] = { 2, 4, 8 };
	struct op sum = { .k = k, .run = run_sum_seq, .n = b->chunk / sizeof(float) };
	struct op fused = { .k = k, .run = run_seq_fused };
	struct op floor_op, *ops[3];
	double ts, tf, tl, ta, tfl, t3[3];
	char what[64], sz[32];
	json_t *row;
	unsigned int i, j;

	for (i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		snprintf(what, sizeof(what), "%s sum+nesterov K=%u %s",
			 phub_kernels_isa_name(k->isa), ks[i], size_name(b->chunk, sz, sizeof(sz)));
		progress(b, what);
		fused_op(b, &fused, PHUB_OPT_NESTEROV, PHUB_DTYPE_FP32);
		fused.nk = ks[i];
		/* Arrays 0..4 are acc, grad, weight, m, v; the other arrivals follow. */
		for (j = 0; j + 1 < ks[i]; j++)
			fused.srcs[j] = arena_arrival(b, 5 + j, b->chunk);
		sum.nk = ks[i];
		sum.acc = fused.acc;
		for (j = 0; j + 1 < ks[i]; j++)
			sum.srcs[j] = fused.srcs[j];
		sum.srcs[ks[i] - 1] = fused.buf.grad;
		floor_op = fused;
		floor_op.run = run_seq_floor;
		ops[0] = &sum;
		ops[1] = &fused;
		ops[2] = &floor_op;
		time_ops(b, ops, 3, t3);
		ts = t3[0];
		tf = t3[1];
		tfl = t3[2];
		/* The last arrival alone: add() against the fused last(). */
		sum.run = run_add;
		sum.srcs[0] = fused.buf.grad;
		fused.run = run_last;
		time_ops(b, ops, 2, t3);
		tl = t3[1];
		ta = t3[0];
		sum.run = run_sum_seq;
		fused.run = run_seq_fused;
		row = json_pack("{s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "isa",
				phub_kernels_isa_name(k->isa), "k", (json_int_t)ks[i], "sum_ns",
				ts * 1e9, "fused_ns", tf * 1e9, "ratio", tf / ts,
				"last_vs_add_ratio", tl / ta, "floor_ns", tfl * 1e9,
				"floor_ratio", tfl / ts);
		json_array_append_new(b->fused_vs_sum, row);
	}
}

static void
print_text(const struct bench *b, json_t *root)
{
	json_t *r;
	size_t i;
	char sz[32];

	printf("phub-bench-kernels (%s run; in-cache arrays of %s, arrivals %zu bytes past a "
	       "cache line)\n%s\n\n",
	       b->quick ? "quick" : "full", size_name(b->chunk, sz, sizeof(sz)), b->payload_off,
	       DEFINITION);
	printf("%-7s %-18s %7s %2s %9s %12s %7s %12s %12s\n", "isa", "kernel", "array", "K", "GB/s",
	       "memcpy GB/s", "ratio", "ratio(moved)", "ns/call");
	json_array_foreach(b->results, i, r) {
		printf("%-7s %-18s %7s %2d %9.1f %12.1f %7.2f %12.2f %12.0f\n",
		       json_string_value(json_object_get(r, "isa")),
		       json_string_value(json_object_get(r, "kernel")),
		       size_name((size_t)json_integer_value(json_object_get(r, "array_bytes")), sz,
				 sizeof(sz)),
		       (int)json_integer_value(json_object_get(r, "k")),
		       json_real_value(json_object_get(r, "gbps")),
		       json_real_value(json_object_get(r, "memcpy_gbps")),
		       json_real_value(json_object_get(r, "ratio")),
		       json_real_value(json_object_get(r, "ratio_moved")),
		       json_real_value(json_object_get(r, "ns")));
	}
	printf("\nSegment of K arrivals of %s, engine order: time of first + adds + fused "
	       "Nesterov last, over first + adds alone (goal <= 1.3); the floor: the same with "
	       "last() replaced by its loads and stores (two add() calls); and the last arrival "
	       "alone: fused last() over add().\n",
	       size_name(b->chunk, sz, sizeof(sz)));
	printf("%-7s %2s %10s %10s %7s %10s %7s %13s\n", "isa", "K", "sum ns", "fused ns",
	       "ratio", "floor ns", "floor", "last/add");
	json_array_foreach(b->fused_vs_sum, i, r) {
		printf("%-7s %2d %10.0f %10.0f %7.2f %10.0f %7.2f %13.2f\n",
		       json_string_value(json_object_get(r, "isa")),
		       (int)json_integer_value(json_object_get(r, "k")),
		       json_real_value(json_object_get(r, "sum_ns")),
		       json_real_value(json_object_get(r, "fused_ns")),
		       json_real_value(json_object_get(r, "ratio")),
		       json_real_value(json_object_get(r, "floor_ns")),
		       json_real_value(json_object_get(r, "floor_ratio")),
		       json_real_value(json_object_get(r, "last_vs_add_ratio")));
	}
	printf("\nbest ISA on this CPU: %s\n",
	       json_string_value(json_object_get(root, "best_isa")));
}

static void
usage(FILE *f)
{
	fprintf(f, "usage: phub-bench-kernels [--json] [--quick] [--isa scalar|avx2|avx512]\n"
		   "                          [--chunk BYTES] [--payload-offset BYTES|engine] [--no-dram]\n"
		   "  GB/s of the lib/kernels sums and fused optimizers against memcpy, for\n"
		   "  every ISA this CPU runs. --quick: a short run (smaller DRAM arrays, fewer\n"
		   "  repetitions); --json: one JSON object on stdout. --chunk: bytes of each\n"
		   "  in-cache array (a multiple of 64 from 1024 to 1048576; default 32768; the\n"
		   "  engine calls the kernels once per segment, 8192 bytes at MTU 9000);\n"
		   "  --payload-offset: each arrival starts that many bytes (0..63) past a cache\n"
		   "  line, 'engine' = %d, where a PUSH payload sits in an RX mbuf; --no-dram:\n"
		   "  the in-cache rows only.\n", ENGINE_PAYLOAD_OFFSET);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "isa", required_argument, NULL, 'i' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "payload-offset", required_argument, NULL, 'o' },
		{ "no-dram", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct bench b = { .batch_seconds = 0.02, .reps = 5, .dram = true, .chunk = CHUNK_BYTES };
	const struct phub_kernels *isas[PHUB_ISA_COUNT];
	unsigned int nisa = 0, i;
	int only = -1, c, e;
	size_t dram, arr_bytes;
	json_t *root;
	uint64_t v;

	while ((c = getopt_long(argc, argv, "jqi:c:o:nh", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			b.json = true;
			break;
		case 'q':
			b.quick = true;
			break;
		case 'i':
			for (e = 0; e < PHUB_ISA_COUNT; e++)
				if (strcmp(optarg, phub_kernels_isa_name((enum phub_isa)e)) == 0)
					only = e;
			if (only < 0) {
				fprintf(stderr, "phub-bench-kernels: unknown ISA '%s'\n", optarg);
				return 2;
			}
			break;
		case 'c':
			if (phub_parse_u64(optarg, 1024, CHUNK_BYTES_MAX, &v) < 0 || v % 64 != 0) {
				fprintf(stderr, "phub-bench-kernels: bad --chunk '%s'\n", optarg);
				return 2;
			}
			b.chunk = v;
			break;
		case 'o':
			if (strcmp(optarg, "engine") == 0) {
				v = ENGINE_PAYLOAD_OFFSET;
			} else if (phub_parse_u64(optarg, 0, 63, &v) < 0) {
				fprintf(stderr, "phub-bench-kernels: bad --payload-offset '%s'\n",
					optarg);
				return 2;
			}
			b.payload_off = v;
			break;
		case 'n':
			b.dram = false;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (b.quick) {
		b.batch_seconds = 0.005;
		b.reps = 3;
	}
	dram = b.quick ? DRAM_BYTES_QUICK : DRAM_BYTES;
	/*
	 * In cache: K arrivals, acc and K-1 staging buffers (bench_sums); acc,
	 * grad, weight, m, v and K-1 more arrivals (bench_fused_vs_sum).
	 */
	arr_bytes = 2 * MAX_K * (b.chunk + SKEW) + 64;
	if (b.dram && (MAX_K + 1) * (dram + SKEW) > arr_bytes)
		arr_bytes = (MAX_K + 1) * (dram + SKEW);
	b.tty = isatty(STDERR_FILENO);
	for (e = 0; e < PHUB_ISA_COUNT; e++) {
		if (only >= 0 && e != only)
			continue;
		isas[nisa] = phub_kernels_for_isa((enum phub_isa)e);
		if (isas[nisa] == NULL) {
			fprintf(stderr, "phub-bench-kernels: %s skipped: not supported here\n",
				phub_kernels_isa_name((enum phub_isa)e));
		} else {
			/* The floors are measured once, in the pass of the best ISA run. */
			b.floor_isa = (enum phub_isa)e;
			nisa++;
		}
	}
	/* Sums of up to 8 arrays plus the accumulator, each DRAM-sized, with their skew. */
	/* aligned_alloc wants a multiple of the alignment. */
	b.arena_bytes = (arr_bytes + 8191) & ~(size_t)4095;
	b.arena = aligned_alloc(4096, b.arena_bytes);
	b.results = json_array();
	b.fused_vs_sum = json_array();
	if (b.arena == NULL || b.results == NULL || b.fused_vs_sum == NULL) {
		fprintf(stderr, "phub-bench-kernels: out of memory (%zu MB arena)\n",
			b.arena_bytes >> 20);
		return 1;
	}
	/* Small normal values: no denormal or overflow slows one ISA and not another. */
	for (i = 0; i < b.arena_bytes / sizeof(float); i++)
		((float *)b.arena)[i] = 0.5f + (float)(i % 97) * 0.01f;

	b.steps = nisa * (3 + 4 + 3 + (b.dram ? 3 : 0));
	for (i = 0; i < nisa; i++) {
		bench_sums(&b, isas[i], b.chunk);
		bench_fused(&b, isas[i]);
		bench_fused_vs_sum(&b, isas[i]);
		if (b.dram)
			bench_sums(&b, isas[i], dram);
	}
	if (b.tty)
		fprintf(stderr, "\n");

	root = json_pack("{s:s, s:b, s:s, s:I, s:I, s:I, s:o, s:o}", "definition", DEFINITION,
			 "quick", b.quick, "best_isa",
			 phub_kernels_isa_name(phub_kernels_get()->isa), "chunk_bytes",
			 (json_int_t)b.chunk, "payload_offset", (json_int_t)b.payload_off,
			 "dram_array_bytes", (json_int_t)(b.dram ? dram : 0), "results", b.results,
			 "fused_vs_sum", b.fused_vs_sum);
	if (b.json) {
		json_dumpf(root, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
		printf("\n");
	} else {
		print_text(&b, root);
	}
	json_decref(root);
	free(b.arena);
	return 0;
}
