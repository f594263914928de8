/* SPDX-License-Identifier: BSD-3-Clause */
/* What a job costs in PBox memory, by part: the computation the limits and the planner share. */

#include <string.h>

#include "engine_priv.h"

void
phub_engine_memory_need(const struct phub_engine_memory_params *p, struct phub_engine_memory *m)
{
	uint64_t elems = p->n_elems;
	uint64_t wire = phub_dtype_size(p->dtype);
	uint64_t states = phub_opt_state_count(p->optimizer);
	uint64_t segments = p->n_segments;

	memset(m, 0, sizeof(*m));
	/* The model and the aggregation buffer, fp32 whatever the wire dtype. */
	m->model = elems * sizeof(float) * 2;
	m->optimizer = elems * sizeof(float) * states;
	if (p->dtype != PHUB_DTYPE_FP32)
		m->wire_copy = elems * wire;
	/* The snapshot a checkpoint copies: the model and the optimizer state. */
	if (p->checkpoint_shadow)
		m->checkpoint_shadow = elems * sizeof(float) * (1 + states);
	/* Rank 0 is added as it arrives; every other rank may wait in the staging buffer. */
	if (p->deterministic && p->world_size > 1)
		m->deterministic_staging = elems * wire * (p->world_size - 1u);
	/* A job across racks keeps four fp32 buffers of the model for the ring's steps. */
	if (p->ring)
		m->ring = elems * sizeof(float) * 4;
	if (segments == 0 && p->segment_elems != 0)
		segments = (elems + p->segment_elems - 1) / p->segment_elems + p->n_keys;
	m->bookkeeping = segments * sizeof(struct segment_slot) + segments * sizeof(struct engine_chunk) +
		(uint64_t)(p->n_servers > 0 ? p->n_servers : 1) * p->world_size *
		sizeof(struct rank_cell);
	m->total = m->model + m->optimizer + m->wire_copy + m->checkpoint_shadow +
		m->deterministic_staging + m->ring + m->bookkeeping;
}
