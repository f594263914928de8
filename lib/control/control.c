/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane as one object (phub_control.h): made with its parameters and defaults, each
 * control datagram handed to the file that owns its message (control_join.c, control_session.c,
 * control_ring.c; control_auth.c checks it first), and the timers. The appliance and the soft
 * PBox are adapters around it: they bring datagrams in, send what it builds, and free jobs safely.
 */

#include <errno.h>
#include <stdlib.h>

#include "control_priv.h"
#include "engine/phub_ring.h"

#define LIVENESS_PERIOD_NS (100 * 1000000ull)
#define MAX_JOB_KEYS_DEFAULT 65536
#define MAX_PENDING_DEFAULT 64
#define JOIN_MS_DEFAULT 2000
#define WORKER_DEAD_MS_DEFAULT 10000
#define RTO_MIN_MS_DEFAULT 2
#define RTO_MAX_MS_DEFAULT 200

/* ---- what comes in, and the timers ---- */

void
phub_control_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const void *dgram, size_t len)
{
	struct phub_wire_msg msg;
	enum phub_drop_reason why;

	why = phub_wire_parse(dgram, len, &msg);
	if (why != PHUB_DROP_OK) {
		ctl->stats.drops[why]++;
		return;
	}
	ctl->stats.msgs++;
	switch (msg.opcode) {
	case PHUB_WIRE_OP_JOIN:
		if (control_auth_join_in(ctl, from, dgram, len, &msg))
			control_join_input(ctl, from, &msg);
		ctl->auth_join = false;
		break;
	case PHUB_WIRE_OP_LEAVE:
	case PHUB_WIRE_OP_PING:
	case PHUB_WIRE_OP_WORLD_ACK:
		/* A session's messages: authenticated like its data, then to their handler. */
		if (control_auth_in(ctl, dgram, &msg))
			(msg.opcode == PHUB_WIRE_OP_LEAVE ? control_leave_input :
			 msg.opcode == PHUB_WIRE_OP_PING ? control_ping_input :
			 control_world_ack_input)(ctl, from, &msg);
		break;
	case PHUB_WIRE_OP_RING_HELLO:
	case PHUB_WIRE_OP_RING_HELLO_ACK:
		control_ring_input(ctl, from, dgram, &msg);
		break;
	default:
		ctl->stats.drops[PHUB_DROP_UNEXPECTED_OPCODE]++;
		break;
	}
}

void
phub_control_poll(struct phub_control *ctl)
{
	uint64_t now = control_now_ns(ctl);

	control_join_expire(ctl, now);
	control_ring_poll(ctl, now);
	if (now - ctl->liveness_ns < LIVENESS_PERIOD_NS)
		return;
	ctl->liveness_ns = now;
	control_liveness_check(ctl, now);
}

/* ---- the object ---- */

/*
 * A declared ring job must name its racks' PBoxes among the ring peers, this one exactly once,
 * and hold the job's ranks: the ring code indexes with them (lib/config checks the same).
 */
static bool
declared_rings_valid(const struct phub_control_params *p)
{
	for (unsigned int i = 0; i < p->n_declared; i++) {
		const struct phub_control_declared_job *d = &p->declared[i];
		unsigned int self = 0, ranks = 0;

		if (d->n_racks == 0)
			continue;
		if (d->n_racks < 2 || d->n_racks > PHUB_RING_MAX_RACKS || d->racks == NULL)
			return false;
		for (uint16_t r = 0; r < d->n_racks; r++) {
			if (d->racks[r].peer >= (int)p->n_ring_peers || d->racks[r].ranks == 0)
				return false;
			self += d->racks[r].peer < 0;
			ranks += d->racks[r].ranks;
		}
		if (self != 1 || ranks != d->workers)
			return false;
	}
	return true;
}

struct phub_control *
phub_control_create(const struct phub_control_params *params)
{
	struct phub_control *ctl;

	if (params == NULL || params->engine == NULL || params->ops == NULL ||
	    params->ops->now_ns == NULL || params->ops->send == NULL || params->n_servers == 0 ||
	    params->servers == NULL || params->endpoints == NULL ||
	    params->mtu < PHUB_WIRE_MIN_MTU || !declared_rings_valid(params)) {
		errno = EINVAL;
		return NULL;
	}
	ctl = calloc(1, sizeof(*ctl));
	if (ctl == NULL)
		return NULL;
	ctl->p = *params;
	if (ctl->p.max_job_keys == 0)
		ctl->p.max_job_keys = MAX_JOB_KEYS_DEFAULT;
	if (ctl->p.max_pending_joins == 0)
		ctl->p.max_pending_joins = MAX_PENDING_DEFAULT;
	if (ctl->p.join_ms == 0)
		ctl->p.join_ms = JOIN_MS_DEFAULT;
	if (ctl->p.worker_dead_ms == 0)
		ctl->p.worker_dead_ms = WORKER_DEAD_MS_DEFAULT;
	if (ctl->p.chunk_bytes == 0)
		ctl->p.chunk_bytes = PHUB_LAYOUT_CHUNK_BYTES_DEFAULT;
	if (ctl->p.rack_name == NULL)
		ctl->p.rack_name = "pbox";
	if (ctl->p.rto_min_ms == 0)
		ctl->p.rto_min_ms = RTO_MIN_MS_DEFAULT;
	if (ctl->p.rto_max_ms < ctl->p.rto_min_ms)
		ctl->p.rto_max_ms = ctl->p.rto_min_ms > RTO_MAX_MS_DEFAULT ? ctl->p.rto_min_ms :
			RTO_MAX_MS_DEFAULT;
	ctl->joins = phub_control_joins_create(ctl->p.max_pending_joins, ctl->p.max_job_keys);
	ctl->sources = calloc(ctl->p.max_pending_joins, sizeof(*ctl->sources));
	if (ctl->joins == NULL || ctl->sources == NULL) {
		phub_control_free(ctl);
		errno = ENOMEM;
		return NULL;
	}
	ctl->liveness_ns = control_now_ns(ctl);
	return ctl;
}

void
phub_control_free(struct phub_control *ctl)
{
	if (ctl == NULL)
		return;
	phub_control_joins_free(ctl->joins);
	free(ctl->sources);
	free(ctl);
}

void
phub_control_get_stats(const struct phub_control *ctl, struct phub_control_stats *stats)
{
	*stats = ctl->stats;
}

