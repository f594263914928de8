/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A ring job across a PBox restart (docs/hierarchy.md, "Failure behaviour"; docs/protocol.md
 * section 12): the state of the ring job each PBox says in its RING_HELLO's trailer (the
 * generation of the ring's state, the checkpoint its job went back to, its newest checkpoint
 * file), and the rollback of a job to one of its own checkpoints when a neighbour's state is
 * newer: a neighbour restarted from its checkpoint of K, or went back for one that did.
 */

#include <stdio.h>
#include <string.h>

#include "control_priv.h"

#define NONE PHUB_WIRE_RING_HELLO_NONE

void
control_ring_restored(struct cjob *cj, uint32_t base)
{
	cj->ring.restored = true;
	cj->ring.generation = 0;
	cj->ring.base = base;
}

void
control_ring_hello_restore_fill(const struct phub_control *ctl, const struct cring *r,
		struct phub_wire_ring_hello *h)
{
	/* A PBox that keeps no checkpoints says nothing: its HELLO is the one before restarts. */
	if (ctl->ckpt.dir == NULL)
		return;
	h->state = true;
	h->generation = r->generation;
	h->base_iteration = r->restored ? r->base : NONE;
	if (!control_ckpt_newest(ctl, r->decl->name, NONE, &h->newest_ckpt))
		h->newest_ckpt = NONE;
}

bool
phub_control_ckpt_keep_from(const struct phub_control *ctl, const struct phub_engine_job *job,
		uint32_t *keep_from)
{
	const struct cjob *cj = &ctl->jobs[phub_engine_job_slot(job)];
	const struct cring *r = &cj->ring;
	uint32_t a, b;

	if (cj->job != job || r->decl == NULL)
		return false;
	a = r->prev.newest_ckpt;
	b = r->next.newest_ckpt;
	if (a == NONE || b == NONE)
		return false;
	*keep_from = phub_wire_iter_cmp(a, b) < 0 ? a : b;
	return true;
}

/* Serial-number order of iterations and generations. */
static bool
after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

/*
 * Go back to our own newest checkpoint at or before limit, in the ring's state `generation`:
 * the job is replaced by the restore of that file (its workers find their sessions gone, JOIN
 * again and resume after it), and the new job's HELLO says the state to the other neighbour.
 * Without such a file the job ends as before a restart could be followed.
 */
static enum control_ring_verdict
go_back(struct phub_control *ctl, struct cjob *cj, const struct cring_link *l,
		uint32_t generation, uint32_t limit)
{
	const struct phub_control_declared_job *d = cj->ring.decl;
	struct phub_engine_job_info info;
	struct phub_engine_job *job;
	uint32_t base;
	char why[160];

	if (ctl->ckpt.dir == NULL || ctl->p.ops->job_replace == NULL) {
		snprintf(why, sizeof(why), "restarted from its checkpoint of iteration %u; this "
				"PBox keeps no checkpoints to go back to", limit);
		control_ring_fail(ctl, cj, l, why);
		return CONTROL_RING_GONE;
	}
	if (!control_ckpt_newest(ctl, d->name, limit, &base)) {
		snprintf(why, sizeof(why), "is at its checkpoint of iteration %u; this PBox has "
				"none that old to go back to", limit);
		control_ring_fail(ctl, cj, l, why);
		return CONTROL_RING_GONE;
	}
	phub_engine_job_get_info(cj->job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "job %s (id %u), ring position %u: ring peer %s "
			"is at its checkpoint of iteration %u (ring generation %u): this rack goes "
			"back to its own of iteration %u, from iteration %u; its workers JOIN "
			"again and resume at %u", d->name, info.job_id, cj->ring.pos,
			ctl->p.ring_peers[l->peer].name, limit, generation, base,
			info.iteration_max + 1, base + 1);
	control_job_replace(ctl, cj->job);
	job = control_ckpt_restore_at(ctl, d->name, base);
	if (job == NULL) {
		ctl->stats.ring_jobs_failed++;
		return CONTROL_RING_GONE;
	}
	control_cjob(ctl, job)->ring.generation = generation;
	return CONTROL_RING_GONE;
}

enum control_ring_verdict
control_ring_restore_hello(struct phub_control *ctl, struct cjob *cj, struct cring_link *l,
		const struct phub_wire_ring_hello *h)
{
	struct cring *r = &cj->ring;
	/* Restored at our start, no neighbour has given us the ring's generation yet. */
	bool fresh = r->restored && r->generation == 0;
	bool changed = l->known && l->token != h->token;
	bool theirs_restored = h->state && h->base_iteration != NONE;
	uint32_t k = h->base_iteration;
	char why[160];

	/* What it keeps, for our pruning (both links in a ring of two). */
	if (r->prev.pos == h->pos)
		r->prev.newest_ckpt = h->state ? h->newest_ckpt : NONE;
	if (r->next.pos == h->pos)
		r->next.newest_ckpt = h->state ? h->newest_ckpt : NONE;
	if (!theirs_restored) {
		/*
		 * A job that never went back: ours, restored, is the newer state of the ring,
		 * which the neighbour takes when it hears our HELLO. Two jobs that never went
		 * back link as before (a token change ends the job).
		 */
		return r->restored ? CONTROL_RING_IGNORE : CONTROL_RING_LINK;
	}
	if (h->generation == 0) {
		/* The neighbour restarted and restored its job from its checkpoint of k. */
		if (fresh) {
			/* Both restarted: the older checkpoint, which both may have. */
			if (k == r->base)
				return CONTROL_RING_LINK;
			return after(r->base, k) ? go_back(ctl, cj, l, 0, k) : CONTROL_RING_IGNORE;
		}
		if (changed)
			return go_back(ctl, cj, l, r->generation + 1, k);
		if (l->known)
			return CONTROL_RING_LINK;	/* a restart we followed: its keep-alive */
		/*
		 * Its first HELLO to a job of ours not linked to it yet, which cannot have run
		 * past its base: one we restored for this restart (at its checkpoint, or at an
		 * older one that it follows when it hears us), or one that must go back.
		 */
		if (r->restored && r->generation != 0 && !after(r->base, k))
			return r->base == k ? CONTROL_RING_LINK : CONTROL_RING_IGNORE;
		return go_back(ctl, cj, l, r->generation + 1, k);
	}
	/* A neighbour in a given state: a newer generation, or the same one further back, wins. */
	if (fresh) {
		if (after(r->base, k))
			return go_back(ctl, cj, l, h->generation, k);
		r->generation = h->generation;
		return r->base == k ? CONTROL_RING_LINK : CONTROL_RING_IGNORE;
	}
	if (after(h->generation, r->generation) ||
	    (h->generation == r->generation && (!r->restored || after(r->base, k))))
		return go_back(ctl, cj, l, h->generation, k);
	if (h->generation != r->generation || k != r->base)
		return CONTROL_RING_IGNORE;
	if (changed) {
		snprintf(why, sizeof(why), "restarted: its session of the job is a new one "
				"(ring generation %u, checkpoint %u)", h->generation, k);
		control_ring_fail(ctl, cj, l, why);
		return CONTROL_RING_GONE;
	}
	return CONTROL_RING_LINK;
}
