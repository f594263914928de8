/* SPDX-License-Identifier: BSD-3-Clause */
/* Elastic jobs: a dead rank removed, and the segments that data threads complete without it. */

#include <errno.h>

#include "engine_priv.h"

int
phub_engine_job_rank_remove(struct phub_engine_job *job, uint16_t rank, uint32_t *iteration)
{
	struct phub_engine_rank_status st;

	uint64_t bit = UINT64_C(1) << (rank % 64);
	bool rejoined;

	if (!job->elastic || rank >= job->world_size)
		return -EINVAL;
	if (engine_rank_removed(job, rank))
		return -EALREADY;
	rejoined = (atomic_load(&job->joining_bits[rank / 64]) & bit) != 0;
	if (phub_engine_job_rank_status(job, rank, &st) != 0)
		return -EINVAL;
	/*
	 * The initial-model round is a barrier of every rank (and its model is rank 0's weights):
	 * a rank that never finished a PUSH of iteration 1 or later cannot leave it quietly.
	 */
	if (!rejoined && (!st.pushed || st.newest_iteration == 0))
		return -EBUSY;
	/* Nothing more of it is taken from here on; what was taken counts where it was taken. */
	if (atomic_exchange_explicit(&job->ranks[rank].token, 0, memory_order_acq_rel) != 0)
		atomic_fetch_sub(&job->joined, 1);
	/* The newest iteration it pushed may have reached some segments only: the next one none. */
	job->removed_from[rank] = st.pushed ? st.newest_iteration + 1 : 0;
	if (rejoined) {
		/* Back and gone again: out from its boundary at the earliest. */
		uint32_t from = atomic_load_explicit(&job->rejoin_from[rank], memory_order_relaxed);

		if (phub_wire_iter_cmp(job->removed_from[rank], from) < 0)
			job->removed_from[rank] = from;
		atomic_fetch_and_explicit(&job->joining_bits[rank / 64], ~bit,
				memory_order_release);
	} else {
		atomic_fetch_or_explicit(&job->removed_bits[rank / 64], bit, memory_order_release);
	}
	atomic_fetch_add_explicit(&job->members_epoch, 1, memory_order_release);
	*iteration = job->removed_from[rank];
	return 0;
}

bool
phub_engine_job_rank_removed(const struct phub_engine_job *job, uint16_t rank, uint32_t *iteration)
{
	if (rank >= job->world_size || !engine_rank_removed(job, rank))
		return false;
	if (iteration != NULL)
		*iteration = job->removed_from[rank];
	return true;
}

int
phub_engine_job_rank_readmit(struct phub_engine_job *job, uint16_t rank, uint32_t *iteration)
{
	uint32_t newest = 0;
	bool any = false;

	if (!job->elastic || rank >= job->world_size)
		return -EINVAL;
	if (!engine_rank_removed(job, rank))
		return -EALREADY;
	/*
	 * Segments are at most one iteration apart (a worker pushes t + 1 only with the whole
	 * model of t), so no segment takes newest + 2 before every one has finished newest + 1:
	 * the boundary is a whole iteration ahead of anything a data thread may be completing.
	 */
	for (uint32_t s = 0; s < job->n_segments; s++) {
		uint32_t next = __atomic_load_n(&job->slots[s].next_iteration, __ATOMIC_RELAXED);

		if (!any || phub_wire_iter_cmp(next, newest) > 0)
			newest = next;
		any = true;
	}
	*iteration = newest + 2;
	atomic_store_explicit(&job->rejoin_from[rank], *iteration, memory_order_relaxed);
	atomic_fetch_or_explicit(&job->joining_bits[rank / 64], UINT64_C(1) << (rank % 64),
			memory_order_release);
	atomic_fetch_add_explicit(&job->members_epoch, 1, memory_order_release);
	return 0;
}

bool
phub_engine_job_rank_joining(const struct phub_engine_job *job, uint16_t rank, uint32_t *iteration)
{
	if (rank >= job->world_size ||
	    !(atomic_load_explicit(&job->joining_bits[rank / 64], memory_order_acquire) &
	      (UINT64_C(1) << (rank % 64))))
		return false;
	if (iteration != NULL)
		*iteration = atomic_load_explicit(&job->rejoin_from[rank], memory_order_relaxed);
	return true;
}

uint16_t
phub_engine_job_live(const struct phub_engine_job *job)
{
	unsigned int out = 0;

	for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++)
		out += (unsigned int)__builtin_popcountll(atomic_load_explicit(
				&job->removed_bits[w], memory_order_acquire) &
				~atomic_load_explicit(&job->joining_bits[w], memory_order_acquire));
	return (uint16_t)(job->world_size - out);
}

bool
phub_engine_job_elastic(const struct phub_engine_job *job)
{
	return job->elastic;
}

unsigned int
phub_engine_elastic_poll(struct phub_engine_job *job, bool (*owns)(void *arg, uint32_t server),
		void (*done)(void *arg, const struct phub_engine_segment_done *what), void *arg,
		struct phub_engine_stats *stats, uint32_t *epoch_seen)
{
	uint32_t epoch;
	unsigned int n = 0;

	if (!job->elastic)
		return 0;
	epoch = atomic_load_explicit(&job->members_epoch, memory_order_acquire);
	if (epoch == *epoch_seen)
		return 0;
	/*
	 * Once per change: a segment not complete now completes by the PUSH of a rank it still
	 * waits for, which reads the removed ranks itself.
	 */
	*epoch_seen = epoch;
	for (uint32_t c = 0; c < job->n_chunks; c++) {
		struct phub_layout_chunk chunk;
		uint32_t first = job->chunks[c].first_segment;

		phub_layout_chunk_get(job->layout, c, &chunk);
		if (!owns(arg, chunk.server))
			continue;
		for (uint32_t s = 0; s < chunk.n_segments; s++) {
			struct phub_engine_segment_done what;
			uint32_t off = s * job->segment_elems;
			uint32_t elems = chunk.n_elems - off < job->segment_elems ?
				chunk.n_elems - off : job->segment_elems;

			if (!engine_slot_complete_elastic(job, first + s, chunk.elem_base + off,
					elems, &what.reply, stats))
				continue;
			what.chunk_id = c;
			what.seg_index = (uint16_t)s;
			what.seg_count = (uint16_t)chunk.n_segments;
			what.elem_offset = off;
			done(arg, &what);
			n++;
		}
	}
	return n;
}
