/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A ring job across a PBox restart (docs/hierarchy.md, "Failure behaviour"; docs/protocol.md
 * section 12): the generation of the ring's state and the checkpoint iteration a PBox's job
 * went back to, as RING_HELLO's restore trailer says them, and the rollback of a job to its own
 * checkpoint of that iteration when a neighbour restarted from it.
 */

#include <stdio.h>
#include <string.h>

#include "control_priv.h"

void
control_ring_restored(struct cjob *cj, uint32_t base)
{
	cj->ring.restored = true;
	cj->ring.generation = 0;
	cj->ring.base = base;
}

void
control_ring_hello_restore_fill(const struct cring *r, struct phub_wire_ring_hello *h)
{
	if (!r->restored)
		return;
	h->restored = true;
	h->generation = r->generation;
	h->base_iteration = r->base;
}

/* Generations in serial-number order: a later restart's is after every earlier one's. */
static bool
gen_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

/*
 * Go back to our own checkpoint of base, in the ring's state `generation`: the job is replaced
 * by the restore of its file (its workers find their sessions gone, JOIN again and resume at
 * base + 1), and the new job offers its HELLO with the trailer that tells the other neighbour
 * to do the same. Without that file the job ends as before.
 */
static enum control_ring_verdict
rollback(struct phub_control *ctl, struct cjob *cj, const struct cring_link *l,
		uint32_t generation, uint32_t base)
{
	const struct phub_control_declared_job *d = cj->ring.decl;
	struct phub_engine_job_info info;
	struct phub_engine_job *job;
	char why[160];

	if (ctl->ckpt.dir == NULL || ctl->p.ops->job_replace == NULL) {
		snprintf(why, sizeof(why), "restarted from its checkpoint of iteration %u; this "
				"PBox keeps no checkpoints to go back to", base);
		control_ring_fail(ctl, cj, l, why);
		return CONTROL_RING_GONE;
	}
	if (!control_ckpt_has(ctl, d->name, base)) {
		snprintf(why, sizeof(why), "restarted from its checkpoint of iteration %u, which "
				"this PBox does not have", base);
		control_ring_fail(ctl, cj, l, why);
		return CONTROL_RING_GONE;
	}
	phub_engine_job_get_info(cj->job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "job %s (id %u), ring position %u: ring peer %s "
			"went back to its checkpoint of iteration %u (ring generation %u): so does "
			"this rack, from iteration %u; its workers JOIN again and resume at %u",
			d->name, info.job_id, cj->ring.pos, ctl->p.ring_peers[l->peer].name, base,
			generation, info.iteration_max + 1, base + 1);
	control_job_replace(ctl, cj->job);
	job = control_ckpt_restore_at(ctl, d->name, base);
	if (job == NULL) {
		ctl->stats.ring_jobs_failed++;
		return CONTROL_RING_GONE;
	}
	cj = control_cjob(ctl, job);
	cj->ring.generation = generation;
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
	char why[160];

	if (!h->restored) {
		/*
		 * A job that never went back: ours is a newer state of the ring (restored, or
		 * given a generation), which the neighbour takes when it hears our HELLO. Two
		 * jobs that never went back link as before (a token change ends the job).
		 */
		return r->restored ? CONTROL_RING_IGNORE : CONTROL_RING_LINK;
	}
	if (h->generation == 0) {
		/* The neighbour restarted and restored its job from its checkpoint of base. */
		if (fresh) {
			if (h->base_iteration == r->base)
				return CONTROL_RING_LINK;
			snprintf(why, sizeof(why), "restarted from its checkpoint of iteration %u "
					"while this PBox restarted from its own of %u", h->base_iteration,
					r->base);
			control_ring_fail(ctl, cj, l, why);
			return CONTROL_RING_GONE;
		}
		/* A restart we already went back for: its keep-alive, or its first HELLO. */
		if ((l->known && !changed) ||
		    (!l->known && r->restored && r->base == h->base_iteration))
			return CONTROL_RING_LINK;
		return rollback(ctl, cj, l, r->generation + 1, h->base_iteration);
	}
	if (fresh) {
		/* A neighbour that went back to our checkpoint: its generation is the ring's. */
		if (h->base_iteration != r->base)
			return CONTROL_RING_IGNORE;
		r->generation = h->generation;
		return CONTROL_RING_LINK;
	}
	if (gen_after(h->generation, r->generation))
		return rollback(ctl, cj, l, h->generation, h->base_iteration);
	if (h->generation != r->generation)
		return CONTROL_RING_IGNORE;
	if (h->base_iteration != r->base || changed) {
		snprintf(why, sizeof(why), "restarted: its session of the job is a new one "
				"(ring generation %u, checkpoint %u)", h->generation,
				h->base_iteration);
		control_ring_fail(ctl, cj, l, why);
		return CONTROL_RING_GONE;
	}
	return CONTROL_RING_LINK;
}
