/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine's request of one ring step, as the appliance sends it, and a job's ring links, as
 * RING_HELLO sets them, for the ring's simulations.
 */

#ifndef PHUB_TEST_RING_TEST_H
#define PHUB_TEST_RING_TEST_H

#include <stdint.h>
#include <string.h>

#include "engine/phub_engine.h"
#include "engine/phub_ring.h"

/*
 * Fills *req with step `step` of RING_SEND what, sent by the PBox at ring position pos with
 * the session token of its link to the next: elements off..off+count of the segment (as
 * phub_ring_seg_part() cut them), copied into payload. The source address and port are the
 * caller's; everything else is as app/pbox's ring path puts it on the wire.
 */
static inline void
phub_test_ring_request(struct phub_engine_ring_request *req, float *payload,
		const struct phub_engine_ring_send *what, uint64_t token, unsigned int racks,
		unsigned int pos, unsigned int step, uint32_t off, uint32_t count)
{
	memset(req, 0, sizeof(*req));
	req->session_token = token;
	req->chunk_id = what->chunk_id;
	req->iteration = what->iteration;
	req->elem_offset = what->elem_offset + off;
	req->elem_count = count;
	req->step = step;
	req->rank = (uint16_t)pos;
	req->opcode = phub_ring_step_is_reduce(racks, step) ? PHUB_WIRE_OP_RING_REDUCE :
							       PHUB_WIRE_OP_RING_GATHER;
	req->dtype = PHUB_DTYPE_FP32;
	memcpy(payload, what->sum + off, count * sizeof(float));
	req->payload_len = count * sizeof(float);
}

/*
 * Gives the job at position pos of a ring of racks its links to its neighbours, as the
 * RING_HELLO exchange does: rack k at ip_of(k), UDP port 47000, and the link from k to k + 1
 * under token token_base + k. 0 or the engine's -errno.
 */
static inline int
phub_test_ring_link(struct phub_engine_job *job, unsigned int racks, unsigned int pos,
		uint32_t (*ip_of)(unsigned int rack), uint64_t token_base)
{
	unsigned int prev = (pos + racks - 1) % racks, next = (pos + 1) % racks;
	struct phub_engine_ring_link pl = { .peer = { .ipv4 = ip_of(prev), .udp_port = 47000 },
					    .token = token_base + prev };
	struct phub_engine_ring_link nl = { .peer = { .ipv4 = ip_of(next), .udp_port = 47000 },
					    .token = token_base + pos };

	return phub_engine_job_ring_peers(job, &pl, &nl);
}

#endif /* PHUB_TEST_RING_TEST_H */
