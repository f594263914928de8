/* SPDX-License-Identifier: BSD-3-Clause */
/* A deterministic lossy network between up to four workers and one lib/engine job, for tests. */

#ifndef PHUB_TEST_ENGINE_SIM_H
#define PHUB_TEST_ENGINE_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/phub_engine.h"

/*
 * Workers push every segment of every iteration; the network loses, duplicates and reorders
 * the PUSHes, PULLs, ACKs and MODELs (a seeded xorshift decides); a worker's timer sends again
 * what is unanswered. Gradients are small integers, so that every partial sum is exact in fp32
 * whatever the order of arrival, and the reference (the scalar kernels applied in rank order)
 * must match the engine bit for bit; or random fractions, whose sums round differently in
 * each order, so that only a deterministic job matches.
 */
enum { PHUB_SIM_MAX_WORLD = 4, PHUB_SIM_ITERATIONS = 6 };

/* One simulated run: the network, the job's mode and what the check demands. */
struct phub_sim_exchange {
	uint16_t world;
	enum phub_opt_type opt;	/* the job's optimizer (the caller's params say it too) */
	unsigned int loss_pct;
	unsigned int dup_pct;
	uint64_t seed;
	bool random;		/* random fractions as gradients */
	bool deterministic;	/* the job sums in rank order */
	bool expect_exact;	/* the model must be the reference bit for bit */
};

/*
 * Run the exchange on a job of params (world_size x->world, fp32; its deterministic flag is
 * x's) for PHUB_SIM_ITERATIONS iterations and check it with Check's assertions: every worker
 * holds the engine's model, every segment completed once per round, every accepted PUSH added
 * once. Returns the largest difference of the engine's model from the reference relative to
 * max(|reference|, 1) (0 when bit-identical).
 */
double phub_sim_run(const struct phub_engine_job_params *params,
		const struct phub_sim_exchange *x);

#endif /* PHUB_TEST_ENGINE_SIM_H */
