/* SPDX-License-Identifier: BSD-3-Clause */
/* The unit tests' pseudo-random numbers: one generator, seeded, the same stream on every run. */

#ifndef PHUB_TEST_RAND_H
#define PHUB_TEST_RAND_H

#include <stdint.h>

/*
 * Marsaglia's xorshift64 (13, 7, 17): advances *state (never 0) and returns it. Fast and
 * well mixed enough for picking lengths, offsets, bit flips and losses; a failing test names
 * its seed, and the same seed gives the same run.
 */
static inline uint64_t
phub_test_rand(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

/*
 * The C standard's example rand(), 24 bits of it: advances *seed and returns them. The ring
 * tests' simulated networks draw from it, so that their seeds keep giving the same runs.
 */
static inline unsigned int
phub_test_lcg(unsigned int *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (*seed >> 8) & 0xffffff;
}

/*
 * The copies of one datagram a lossy network delivers, drawn from *seed: none (loss_pct %
 * of the time), two (dup_pct % of the rest) or one.
 */
static inline unsigned int
phub_test_copies(unsigned int *seed, unsigned int loss_pct, unsigned int dup_pct)
{
	if (phub_test_lcg(seed) % 100 < loss_pct)
		return 0;
	return phub_test_lcg(seed) % 100 < dup_pct ? 2 : 1;
}

#endif /* PHUB_TEST_RAND_H */
