/* SPDX-License-Identifier: BSD-3-Clause */
/* What phub-bench's parent and its workers share: the run's settings and the pipe records. */

#ifndef PHUB_BENCH_PRIV_H
#define PHUB_BENCH_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "phub_bench.h"

/* The settings of a run, read-only once the workers are forked. */
struct bench_config {
	const char *server;
	uint16_t port;
	const char *bind_addr;
	const char *job;
	uint64_t nonce;
	uint16_t world_size;
	const char *netns_prefix;	/* worker i enters /run/netns/<prefix><i>; NULL: stay */
	const char *netns_prefixes;	/* with racks: one prefix per rack, comma-separated */
	const struct phub_bench_racks *racks;	/* --racks: the PBox of each rank; n 0: server */
	enum phub_dtype dtype;
	struct phub_optimizer_params optimizer;
	uint32_t iterations;
	uint32_t warmup;
	uint32_t mtu;
	uint32_t window_bytes;
	uint32_t chunk_bytes;
	uint32_t connect_timeout_ms;
	uint32_t dead_ms;
	uint32_t pause_at;		/* after this iteration (0: never) each worker waits... */
	uint32_t pause_ms;		/* ... this long */
	/*
	 * --die-at (with --rank): after this iteration the worker kills itself with SIGKILL, no
	 * LEAVE, as a crashed worker would (0: never); for elastic-job tests.
	 */
	uint32_t die_at;
	unsigned int connect_flags;
	bool random_gradients;
	bool deterministic;
	const struct phub_bench_layout *layout;
	const struct phub_bench_pattern *pattern;
};

/*
 * A worker reports to the parent over its own pipe with records of a header and a payload:
 * PROGRESS now and then (at most every PROGRESS_INTERVAL_MS), TIMES once with its exchange
 * times, RESULT last. A worker that closes its pipe without RESULT has died.
 */
enum bench_msg_type {
	BENCH_MSG_PROGRESS = 1,
	BENCH_MSG_TIMES = 2,
	BENCH_MSG_RESULT = 3,
};

#define BENCH_PROGRESS_INTERVAL_MS 250

struct bench_msg_hdr {
	uint32_t type;
	uint32_t len;	/* payload bytes after the header */
};

enum bench_phase {
	BENCH_PHASE_CONNECTING = 0,
	BENCH_PHASE_RUNNING = 1,
	BENCH_PHASE_VERIFYING = 2,
	BENCH_PHASE_DONE = 3,
	/*
	 * Its timed loop ended; it verifies once every rank's has (the parent writes a byte):
	 * a verifying rank takes a CPU that ranks still timed on the same machine would lose.
	 */
	BENCH_PHASE_TIMED = 4,
};

struct bench_progress {
	uint32_t phase;		/* enum bench_phase */
	uint32_t iteration;	/* exchanges completed */
	uint32_t timed;		/* of them after the warm-up */
	uint64_t elems_verified;
	double timed_s;		/* time since the warm-up ended */
	uint64_t retransmits;
	uint64_t pulls;
	/* While connecting: libphub's progress (struct phub_stats). */
	uint64_t join_acks;
	uint64_t initial_acks;
	uint64_t initial_models;
};

/* Run worker rank to the end and report on fd; returns the process's exit status. */
int bench_worker_run(const struct bench_config *cfg, uint16_t rank, int fd);

/* CLOCK_MONOTONIC in seconds. */
double bench_now(void);

#endif /* PHUB_BENCH_PRIV_H */
