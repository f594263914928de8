/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What lib/engine's unit tests share: a layout, a job over it, a rank's address, its JOIN, a
 * valid request for a segment.
 */

#ifndef PHUB_TEST_ENGINE_TEST_H
#define PHUB_TEST_ENGINE_TEST_H

#include <stdint.h>

#include "engine/phub_engine.h"

/* Rank r's worker: 10.0.0.100 + r, one UDP port for all. */
#define PHUB_TEST_PEER_IP(rank) (0x0a000064u + (rank))
#define PHUB_TEST_PEER_PORT 40000u

struct phub_engine_peer phub_test_peer(uint16_t rank);

/*
 * The tests' layout: keys of 7 elements (fewer than a segment), 300 (one chunk and a bit, an
 * odd tail) and 1000 (several chunks), in chunks of 1024 bytes (256 fp32 elements: 4 segments
 * of 64).
 */
#define PHUB_TEST_SEG_ELEMS 64u
#define PHUB_TEST_CHUNK_BYTES 1024u
#define PHUB_TEST_N_KEYS 3u
#define PHUB_TEST_N_ELEMS 1307u
extern const struct phub_layout_key phub_test_keys[PHUB_TEST_N_KEYS];

/* A job of world ranks over the tests' layout, with dtype and optimizer; nothing else set. */
struct phub_engine_job_params phub_test_job_params(const char *name, uint64_t nonce,
		uint16_t world, enum phub_dtype dtype, struct phub_optimizer_params optimizer);

/* Rank joins job with nonce from its peer address; asserts success and returns the token. */
uint64_t phub_test_join(struct phub_engine_job *job, uint16_t rank, uint64_t nonce);

/*
 * A valid fp32 request for segment seg of chunk at iteration, as rank would send it (its
 * peer address, the layout's offsets and counts); payload is the segment's elements.
 */
struct phub_engine_request phub_test_request(struct phub_engine_job *job, uint16_t rank,
		uint64_t token, uint32_t chunk, uint16_t seg, uint32_t iteration,
		const void *payload);

#endif /* PHUB_TEST_ENGINE_TEST_H */
