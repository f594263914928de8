/* SPDX-License-Identifier: BSD-3-Clause */
/* The one 64-bit mixer of the tree's made-up data: phub-bench's patterns, the tests' gradients. */

#ifndef PHUB_MIX_H
#define PHUB_MIX_H

#include <stdint.h>

/*
 * splitmix64's finaliser: every input bit moves every output bit, so that counters (rank,
 * iteration, element) make values that look random and are the same on every run and host.
 * Header-only, like phub_err.h: the bench and the test support link different libraries.
 */
static inline uint64_t
phub_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

#endif /* PHUB_MIX_H */
