/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine tests' layout, jobs, peers, JOINs and requests (engine_test.h). */

#include <string.h>

#include <check.h>

#include "engine_test.h"

struct phub_engine_peer
phub_test_peer(uint16_t rank)
{
	struct phub_engine_peer p = { .ipv4 = PHUB_TEST_PEER_IP(rank),
		.udp_port = PHUB_TEST_PEER_PORT };

	return p;
}

const struct phub_layout_key phub_test_keys[PHUB_TEST_N_KEYS] = {
	{ .key_id = 10, .n_elems = 7 },
	{ .key_id = 11, .n_elems = 300 },
	{ .key_id = 12, .n_elems = 1000 },
};

struct phub_engine_job_params
phub_test_job_params(const char *name, uint64_t nonce, uint16_t world, enum phub_dtype dtype,
		struct phub_optimizer_params optimizer)
{
	struct phub_engine_job_params p = {
		.name = name,
		.nonce = nonce,
		.world_size = world,
		.dtype = dtype,
		.optimizer = optimizer,
		.keys = phub_test_keys,
		.n_keys = PHUB_TEST_N_KEYS,
		.chunk_bytes = PHUB_TEST_CHUNK_BYTES,
		.segment_elems = PHUB_TEST_SEG_ELEMS,
	};

	return p;
}

uint64_t
phub_test_join(struct phub_engine_job *job, uint16_t rank, uint64_t nonce)
{
	struct phub_engine_peer peer = phub_test_peer(rank);
	uint64_t token = 0;

	ck_assert_int_eq(phub_engine_job_join(job, rank, nonce, &peer, &token), 0);
	ck_assert_uint_ne(token, 0);
	return token;
}

struct phub_engine_request
phub_test_request(struct phub_engine_job *job, uint16_t rank, uint64_t token, uint32_t chunk,
		uint16_t seg, uint32_t iteration, const void *payload)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);
	struct phub_layout_chunk c;
	struct phub_layout_segment s;
	struct phub_engine_request r;

	ck_assert_int_eq(phub_layout_chunk_get(layout, chunk, &c), 0);
	ck_assert_int_eq(phub_layout_segment_get(layout, chunk, seg, &s), 0);
	memset(&r, 0, sizeof(r));
	r.session_token = token;
	r.chunk_id = chunk;
	r.iteration = iteration;
	r.elem_offset = s.elem_offset;
	r.elem_count = s.n_elems;
	r.rank = rank;
	r.seg_index = seg;
	r.seg_count = (uint16_t)c.n_segments;
	r.dtype = PHUB_DTYPE_FP32;
	r.src_ipv4 = PHUB_TEST_PEER_IP(rank);
	r.src_udp_port = PHUB_TEST_PEER_PORT;
	r.payload = payload;
	r.payload_len = (size_t)s.n_elems * 4;
	return r;
}
