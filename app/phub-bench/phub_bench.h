/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The pure core of phub-bench (no sockets, no processes): model layouts, the deterministic
 * gradients and initial weights, the reference model that checks what the PBox computed, the
 * statistics and the JSON report. Unit-tested by tests/unit/check_bench.c.
 */

#ifndef PHUB_BENCH_H
#define PHUB_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "kernels/phub_kernels.h"

/* ---- Layouts -------------------------------------------------------------------------------- */

/* The keys of one job: key i is tensor i of the model, in forward order (priority = i). */
struct phub_bench_layout {
	char model[64];		/* "resnet50", "synthetic", or the layout file's name */
	uint32_t n_keys;
	uint32_t *n_elems;	/* n_keys entries, each >= 1 */
	char **names;		/* presets: torchvision's parameter names; else NULL */
	uint64_t total_elems;
	uint32_t max_key_elems;
};

/*
 * Models with torchvision's layer list here, and the name of the i-th ("resnet18", ...), NULL
 * past the end. Every network of lib/model's table (phub-plan's) is a model of phub-bench too.
 */
unsigned int phub_bench_preset_count(void);
const char *phub_bench_preset_name(unsigned int i);

/* Whether a model name (any name of lib/model's table) has its layers here. */
bool phub_bench_model_has_layers(const char *name);

/*
 * A model's layout by any of its names in lib/model's table, in any case ("resnet50", "RN50"):
 * torchvision's tensors for the models with a layer list, else the Table 3 size (the paper's
 * MB) in equal keys of at most 2^22 elements. NULL and errno ENOENT (unknown name) or ENOMEM.
 */
struct phub_bench_layout *phub_bench_layout_preset(const char *model);

/*
 * A layout from a JSON file holding a list of key sizes ([1024, 3, 9408]). NULL and errno
 * (EINVAL with the file, line, column and JSON path in err; ENOMEM).
 */
struct phub_bench_layout *phub_bench_layout_load(const char *path, char *err, size_t errlen);

/* The same from a string already in memory (the file name is only for messages). */
struct phub_bench_layout *phub_bench_layout_parse(const char *text, const char *name, char *err,
		size_t errlen);

/* n_keys keys of key_elems elements each; NULL and errno EINVAL (a zero) or ENOMEM. */
struct phub_bench_layout *phub_bench_layout_synthetic(uint32_t n_keys, uint32_t key_elems);

void phub_bench_layout_free(struct phub_bench_layout *layout);

/* ---- Deterministic data --------------------------------------------------------------------- */

/*
 * Every gradient and every initial weight is a window of one shared pattern: element j of the
 * pattern is an integer in [-PHUB_BENCH_VALUE_MAX, PHUB_BENCH_VALUE_MAX] times 2^-10, exact in
 * fp32, fp16 and bf16 alike, and a window starts at an offset below PHUB_BENCH_PATTERN_PERIOD
 * that depends on (rank, iteration, key). Sums of up to 2^16 such values stay integers times
 * 2^-10 below 2^24 times 2^-10, so the PBox's fp32 sums are exact in any order of arrival.
 * Pushing costs no computation, and the reference recomputes any gradient from its indices.
 */
#define PHUB_BENCH_PATTERN_PERIOD 65521u	/* a prime: windows of keys rarely line up */
#define PHUB_BENCH_VALUE_MAX 127		/* fits bf16's 8 significant bits */
#define PHUB_BENCH_VALUE_SCALE (1.0f / 1024.0f)

struct phub_bench_pattern {
	enum phub_dtype dtype;
	size_t elem_size;
	uint64_t n_elems;	/* max_key_elems + PHUB_BENCH_PATTERN_PERIOD */
	void *data;		/* read-only once made; shared by the forked workers */
	bool random;		/* phub_bench_random_value() rather than exact values */
};

/* The pattern for keys of at most max_key_elems elements; NULL and errno EINVAL or ENOMEM. */
struct phub_bench_pattern *phub_bench_pattern_create(enum phub_dtype dtype,
		uint32_t max_key_elems);

/*
 * The same windows over a pattern of pseudo-random fractions in (-1, 1) that use every bit of
 * the fp32 significand: sums of them round, so their value depends on the order of addition and
 * only a PBox that adds in rank order (deterministic aggregation) matches the rank-order
 * reference bit for bit. Still a function of (rank, iteration, element) alone.
 */
struct phub_bench_pattern *phub_bench_pattern_create_random(enum phub_dtype dtype,
		uint32_t max_key_elems);

/* Element j of the random pattern as a float (before the conversion to the dtype). */
float phub_bench_random_value(uint64_t j);
void phub_bench_pattern_free(struct phub_bench_pattern *pattern);

/* Element j of the pattern as a float (what data holds, converted). */
float phub_bench_pattern_value(uint64_t j);

/* Where the window of a gradient and of a key's initial weights starts. */
uint32_t phub_bench_grad_offset(uint32_t rank, uint32_t iteration, uint32_t key);
uint32_t phub_bench_initial_offset(uint32_t key);

/* The gradient rank pushes for key at iteration (>= 1), and the key's initial weights. */
const void *phub_bench_grad(const struct phub_bench_pattern *pattern, uint32_t rank,
		uint32_t iteration, uint32_t key);
const void *phub_bench_initial(const struct phub_bench_pattern *pattern, uint32_t key);

/* ---- Reference model and verification ------------------------------------------------------- */

struct phub_bench_verify_params {
	const struct phub_bench_pattern *pattern;
	struct phub_optimizer_params optimizer;
	uint16_t world_size;
	uint32_t iterations;	/* updates the PBox applied: iterations 1 .. iterations */
	/*
	 * The PBox's sums depend on the order of arrival (random gradients, default
	 * aggregation): compare within tolerance even for SGD and NONE.
	 */
	bool order_dependent;
	/*
	 * An elastic job's membership history (libphub's phub_world_change()), in order: rank r
	 * counts in iteration t when its last change at or before t has it in (no change: every
	 * rank is in); the mean is over the ranks in. 0 changes: every rank throughout.
	 */
	const struct phub_bench_change *changes;
	uint32_t n_changes;
};

/* One membership change of an elastic job. */
struct phub_bench_change {
	uint16_t rank;
	bool joined;		/* in again from iteration; false: out from iteration */
	uint32_t iteration;
};

/* Whether rank counts in iteration t, given the changes (in order). */
bool phub_bench_rank_in(const struct phub_bench_change *changes, uint32_t n, uint16_t rank,
		uint32_t t);

/* What one comparison found; phub_bench_verify_key() adds to it. */
struct phub_bench_verify_result {
	uint64_t checked;	/* elements compared */
	uint64_t mismatches;	/* elements out of tolerance (not byte-equal when exact) */
	uint64_t differing;	/* elements not byte-equal, within tolerance or not */
	double max_abs_error;	/* largest |model - reference| */
	uint32_t first_bad_key;	/* valid when mismatches > 0 */
	uint64_t first_bad_elem;
	float first_bad_got;
	float first_bad_want;
};

/*
 * SGD and NONE are compared byte for byte: the PBox runs the same fused step on exact sums, and
 * the kernels promise the same bits on every ISA. The other optimizers are compared within
 * |model - reference| <= atol + rtol * |reference|, in case a PBox's kernels round differently.
 */
bool phub_bench_verify_exact(enum phub_opt_type type);
void phub_bench_verify_tolerance(enum phub_dtype dtype, double *rtol, double *atol);

struct phub_bench_verifier;

/* NULL and errno EINVAL (bad parameters) or ENOMEM. */
struct phub_bench_verifier *phub_bench_verifier_create(const struct phub_bench_verify_params *p);
void phub_bench_verifier_free(struct phub_bench_verifier *v);

/*
 * Recompute key's model after the iterations with the scalar kernels, summing the ranks'
 * gradients in rank order, block by block (memory stays bounded whatever the key's size), and
 * compare it with model (n_elems elements in the pattern's dtype).
 */
void phub_bench_verify_key(struct phub_bench_verifier *v, uint32_t key, uint32_t n_elems,
		const void *model, struct phub_bench_verify_result *res);

/* The same for elements [first, first + n) of key; model points at element first. */
void phub_bench_verify_range(struct phub_bench_verifier *v, uint32_t key, uint64_t first,
		uint64_t n, const void *model, struct phub_bench_verify_result *res);

/* The reference alone: key's model after the iterations into out (n_elems in the dtype). */
void phub_bench_reference_key(struct phub_bench_verifier *v, uint32_t key, uint32_t n_elems,
		void *out);

/* ---- Racks ---------------------------------------------------------------------------------- */

/*
 * A job across racks: each rack's PBox and how many of the job's ranks it holds, in ring order.
 * Rack r holds the contiguous global ranks first_rank .. first_rank + ranks - 1 after those of
 * racks 0 .. r-1; every rank joins its own rack's PBox with its global rank and the total
 * world size (docs/hierarchy.md).
 */
#define PHUB_BENCH_MAX_RACKS 16u

struct phub_bench_rack {
	char server[16];	/* the PBox's control address, dotted IPv4 */
	uint16_t ranks;
	uint16_t first_rank;
};

struct phub_bench_racks {
	unsigned int n;		/* 0: one PBox (--server) */
	struct phub_bench_rack rack[PHUB_BENCH_MAX_RACKS];
	uint16_t world_size;	/* the sum of the ranks */
};

/* "IP0:N0,IP1:N1,..." into out; 0, or -EINVAL with the reason in err. */
int phub_bench_racks_parse(const char *spec, struct phub_bench_racks *out, char *err,
		size_t errlen);

/* The rack of global rank (and its index inside the rack in *local); -ERANGE past the world. */
int phub_bench_rack_of(const struct phub_bench_racks *racks, uint32_t rank, uint32_t *local);

/* A comma list of one namespace prefix per rack: 0, or -EINVAL (another count) with err. */
int phub_bench_prefixes_check(const char *list, unsigned int n_racks, char *err,
		size_t errlen);

/*
 * The network namespace (the name under /run/netns) global rank joins from: with prefixes (a
 * comma list, one per rack) <prefix of its rack><index in its rack + 1>; with a prefix that
 * holds %r, the prefix with %r replaced by the rack's number, then <index in its rack + 1>;
 * with a plain prefix <prefix><rank + 1>, as without racks. racks NULL or empty: one rack.
 * 0, -ERANGE (rank past the world), -EINVAL (no prefix) or -ENAMETOOLONG.
 */
int phub_bench_netns_name(const char *prefix, const char *prefixes,
		const struct phub_bench_racks *racks, uint32_t rank, char *buf, size_t len);

/* Whether the PBoxes' sums depend on the order of addition (verify within tolerance). */
bool phub_bench_order_dependent(bool random_gradients, bool deterministic, unsigned int n_racks);

/* FNV-1a (64 bits) of len bytes, continuing from h (start with PHUB_BENCH_DIGEST_INIT). */
#define PHUB_BENCH_DIGEST_INIT 0xcbf29ce484222325ull
uint64_t phub_bench_digest(const void *data, size_t len, uint64_t h);

/* ---- Statistics and report ------------------------------------------------------------------ */

/* The q-quantile (0 <= q <= 1) of n values by nearest rank; sorts values; 0 when n is 0. */
double phub_bench_quantile(double *values, size_t n, double q);

/* What one worker measured and found. */
struct phub_bench_worker_result {
	uint16_t rank;
	int status;			/* 0, or -errno of the failure */
	char error[256];		/* why it failed */
	uint32_t iterations;		/* exchanges done, warm-up included */
	uint32_t timed;			/* exchanges timed (after the warm-up) */
	double timed_s;			/* their wall-clock time */
	double connect_s;		/* phub_connect(), including the initial-model round */
	double verify_s;
	double verify_from;		/* CLOCK_MONOTONIC seconds it began: after every timed_to */
	double p50_ms;
	double p99_ms;
	double wire_bytes;		/* UDP payload bytes both ways over the timed exchanges */
	double cpu_s;			/* the worker process's user + system CPU over them */
	double timed_from;		/* CLOCK_MONOTONIC seconds the timed exchanges began, */
	double timed_to;		/* and ended: for system-wide CPU figures beside the run */
	uint64_t retransmits;		/* whole session */
	uint64_t pulls;
	uint64_t replays;
	uint64_t tx_errors;
	uint64_t tx_datagrams;		/* whole session, and of them ... */
	uint64_t tx_gso_sends;		/* ... messages of several datagrams (UDP GSO) */
	uint64_t tx_gso_refused;
	uint64_t rx_datagrams;		/* whole session, and ... */
	uint64_t rx_gro_batches;	/* ... buffers the kernel coalesced (UDP GRO) */
	uint32_t reconnects;		/* sessions made again after a PBox restart */
	uint32_t rollbacks;		/* of them, those that sent the worker back */
	uint32_t resumed_at;		/* the last iteration it went back to (0: none) */
	bool verified;
	bool bitwise;			/* every element byte-equal to the reference */
	double max_abs_error;
	uint64_t mismatches;
	uint64_t digest;		/* phub_bench_digest() of its final model (0: none) */
	uint16_t world_end;		/* ranks left at the end (libphub's phub_world_size()) */
	uint16_t removed;		/* ranks an elastic job removed */
};

/* What the run was. */
struct phub_bench_run {
	const struct phub_bench_layout *layout;
	enum phub_dtype dtype;
	struct phub_optimizer_params optimizer;
	uint16_t world_size;
	uint32_t iterations;
	uint32_t warmup;
	const char *server;
	uint16_t port;
	const char *job;
	bool random_gradients;		/* --gradients random */
	bool deterministic;		/* --deterministic */
	const struct phub_bench_racks *racks;	/* --racks; NULL or empty: one PBox */
};

/* Whether the run is compared byte for byte: an exact optimizer and order-free sums. */
bool phub_bench_run_exact(const struct phub_bench_run *run);

/* The combination of the workers' results. */
struct phub_bench_summary {
	unsigned int workers;		/* results combined */
	unsigned int failed;		/* of them with status != 0 */
	uint64_t model_bytes;		/* one copy of the model in the dtype */
	double exchanges_per_s;		/* sum over workers of their exchanges/s */
	double job_iterations_per_s;	/* timed exchanges of the slowest worker / its time */
	double goodput_gbps;		/* sum over workers */
	double wire_gbps;
	double cpu_s;			/* sum over workers of their CPU over the timed exchanges */
	/* That CPU per GB of exchange_bytes the timed exchanges moved (0: nothing timed). */
	double cpu_s_per_gb;
	double p50_ms;			/* over every timed exchange of every worker */
	double p99_ms;
	/*
	 * The fastest exchange of the job: exchange k takes the longest of the workers' k-th
	 * times; the least of those over k (the exchanges every worker timed; 0: none). Against
	 * p50 it tells what the path can do from what a stalled worker cost.
	 */
	double best_ms;
	uint64_t retransmits;
	uint64_t pulls;
	uint64_t reconnects;		/* sums over workers */
	uint64_t rollbacks;
	double max_abs_error;
	bool verified;			/* every expected worker reported and matched */
	bool bitwise;
};

/* Gradient bytes pushed plus model bytes received by one worker in one exchange. */
uint64_t phub_bench_exchange_bytes(const struct phub_bench_layout *layout, enum phub_dtype dtype);

/* Per-worker exchanges/s and goodput in Gbit/s (0 when nothing was timed). */
double phub_bench_worker_rate(const struct phub_bench_worker_result *r);
double phub_bench_worker_gbps(const struct phub_bench_worker_result *r, uint64_t exchange_bytes);

/*
 * Combine n results; times[i] holds results[i].timed exchange times in ms (NULL entries allowed
 * when a worker timed nothing). expected is the number of workers that should have reported.
 */
void phub_bench_summarize(const struct phub_bench_run *run,
		const struct phub_bench_worker_result *results, const double *const *times,
		unsigned int n, unsigned int expected, struct phub_bench_summary *s);

/* The one JSON object of --json; NULL and errno ENOMEM. error may be NULL. */
json_t *phub_bench_report_json(const struct phub_bench_run *run,
		const struct phub_bench_summary *s, const struct phub_bench_worker_result *results,
		unsigned int n, const char *error);

#endif /* PHUB_BENCH_H */
