/* SPDX-License-Identifier: BSD-3-Clause */
/* The ACKs of one receive burst, coalesced per rank into ACKV datagrams (phub_ackv.h). */

#include <string.h>

#include "phub_ackv.h"

void
phub_ackv_init(struct phub_ackv_batch *b)
{
	memset(b, 0, sizeof(*b));
}

/*
 * With every entry taken or sent the batch starts again from its first slot: the next ACKs reuse
 * the lines still in cache, and the walks of take and flush stay as short as what is owed (a turn
 * whose MODELs answer all its PUSHes wrote a new line of the array per PUSH, and a store that
 * missed was most of phub_ackv_add's time at 1 KB segments).
 */
static inline void
batch_settle(struct phub_ackv_batch *b)
{
	if (b->live == 0)
		b->n = 0;
}

void
phub_ackv_add(struct phub_ackv_batch *b, void *job, uint32_t job_id, uint16_t rank,
		uint16_t port, const struct phub_wire_ackv_entry *e)
{
	struct phub_ackv_pending *p;

	if (b->n == PHUB_ACKV_BATCH_MAX)
		return;		/* the caller flushes first; never lose a slot past the end */
	p = &b->p[b->n++];
	p->job = job;
	p->job_id = job_id;
	p->rank = rank;
	p->port = port;
	p->gone = false;
	/*
	 * Field by field, as the caller has just stored them: one 16-byte copy of the struct
	 * cannot be forwarded from those narrower stores, and that stall was nearly all of this
	 * function's time (perf annotate at 1 KB segments).
	 */
	p->e.chunk_id = e->chunk_id;
	p->e.iteration = e->iteration;
	p->e.aux = e->aux;
	p->e.seg_index = e->seg_index;
	p->e.flags = e->flags;
	b->live++;
}

bool
phub_ackv_take(struct phub_ackv_batch *b, uint32_t job_id, uint16_t rank, uint32_t chunk_id,
		uint16_t seg_index, uint32_t iteration, uint32_t *aux)
{
	bool found = false;

	/* Most MODELs go out with nothing owed to their rank: a short walk, often none. */
	for (unsigned int i = 0; b->live != 0 && i < b->n; i++) {
		struct phub_ackv_pending *p = &b->p[i];

		if (p->gone || p->e.chunk_id != chunk_id || p->e.seg_index != seg_index ||
		    p->rank != rank || p->job_id != job_id || p->e.iteration != iteration)
			continue;
		/* A duplicate PUSH in the same burst owes its ACK too: the MODEL answers both. */
		if (!found || (int32_t)(p->e.aux - *aux) > 0)
			*aux = p->e.aux;
		found = true;
		p->gone = true;
		b->live--;
		b->taken++;
	}
	batch_settle(b);
	return found;
}

/* Send every ACK owed to the destination of b->p[i] (not gone), from i on. */
static unsigned int
flush_dest(struct phub_ackv_batch *b, unsigned int i, unsigned int max_per_frame,
		phub_ackv_send_fn send, void *arg)
{
	struct phub_wire_ackv_entry out[PHUB_ACKV_BATCH_MAX];
	const struct phub_ackv_pending *first = &b->p[i];
	unsigned int calls = 0, k = 0;

	if (max_per_frame == 0)
		max_per_frame = 1;
	if (max_per_frame > PHUB_ACKV_BATCH_MAX)
		max_per_frame = PHUB_ACKV_BATCH_MAX;
	/* Every later ACK to the same rank joins this one's datagram, in arrival order. */
	for (unsigned int j = i; j < b->n; j++) {
		struct phub_ackv_pending *p = &b->p[j];

		if (p->gone || p->rank != first->rank || p->job_id != first->job_id)
			continue;
		out[k++] = p->e;
		p->gone = true;
		b->live--;
		if (k == max_per_frame) {
			send(arg, first, out, k);
			b->frames++;
			b->entries += k;
			calls++;
			k = 0;
		}
	}
	if (k != 0) {
		send(arg, first, out, k);
		b->frames++;
		b->entries += k;
		calls++;
	}
	return calls;
}

unsigned int
phub_ackv_flush(struct phub_ackv_batch *b, unsigned int max_per_frame, phub_ackv_send_fn send,
		void *arg)
{
	unsigned int calls = 0;

	for (unsigned int i = 0; b->live != 0 && i < b->n; i++)
		if (!b->p[i].gone)
			calls += flush_dest(b, i, max_per_frame, send, arg);
	b->n = 0;
	b->live = 0;
	return calls;
}

unsigned int
phub_ackv_flush_rank(struct phub_ackv_batch *b, uint32_t job_id, uint16_t rank,
		unsigned int max_per_frame, phub_ackv_send_fn send, void *arg)
{
	for (unsigned int i = 0; b->live != 0 && i < b->n; i++) {
		const struct phub_ackv_pending *p = &b->p[i];

		if (!p->gone && p->rank == rank && p->job_id == job_id) {
			unsigned int calls = flush_dest(b, i, max_per_frame, send, arg);

			batch_settle(b);
			return calls;
		}
	}
	return 0;
}
