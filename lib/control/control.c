/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane as one object (phub_control.h): its parameters and limits, each control
 * datagram handed to the file that owns its message (control_join.c, control_session.c,
 * control_ring.c), the timers, jobs counted in and out, and the one way out for every answer
 * (control_send(), sealed for an authenticated session). The appliance and the soft PBox are
 * adapters around it: they bring datagrams in, send what it builds, and free jobs safely.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control_priv.h"
#include "engine/phub_ring.h"

#define LIVENESS_PERIOD_NS (100 * 1000000ull)
#define MAX_JOB_KEYS_DEFAULT 65536
#define MAX_PENDING_DEFAULT 64
#define JOIN_MS_DEFAULT 2000
#define WORKER_DEAD_MS_DEFAULT 10000
#define RTO_MIN_MS_DEFAULT 2
#define RTO_MAX_MS_DEFAULT 200

static uint64_t
now_ns(const struct phub_control *ctl)
{
	return ctl->p.ops->now_ns(ctl->p.ctx);
}

void
control_log(struct phub_control *ctl, enum phub_control_log_level level, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	if (ctl->p.ops->log == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	ctl->p.ops->log(ctl->p.ctx, level, text);
}

const struct phub_control_params *
control_params(const struct phub_control *ctl)
{
	return &ctl->p;
}

uint64_t
control_now_ns(const struct phub_control *ctl)
{
	return now_ns(ctl);
}

void
control_send(struct phub_control *ctl, const struct phub_control_peer *to, const void *buf,
		size_t len)
{
	/* An authenticated session's datagram gets its MAC here, whoever made it. */
	len = control_auth_out(ctl, &buf, len);
	if (len != 0)
		ctl->p.ops->send(ctl->p.ctx, to, buf, len);
}

void
control_send_error(struct phub_control *ctl, const struct phub_control_peer *to,
		const struct phub_wire_msg *about, uint16_t code, const char *fmt, ...)
{
	char text[PHUB_WIRE_ERROR_MSG_MAX + 1];
	va_list ap;
	int len;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "to %u.%u.%u.%u:%u: %s: %s", to->ipv4 >> 24,
			(to->ipv4 >> 16) & 0xff, (to->ipv4 >> 8) & 0xff, to->ipv4 & 0xff,
			to->udp_port, phub_wire_error_name(code), text);
	len = phub_wire_error_write(ctl->buf, sizeof(ctl->buf), about, code, text);
	if (len > 0) {
		control_send(ctl, to, ctl->buf, (size_t)len);
		ctl->stats.errors_sent++;
	}
}

struct cjob *
control_cjob(struct phub_control *ctl, const struct phub_engine_job *job)
{
	return &ctl->jobs[phub_engine_job_slot(job)];
}

/* ---- limits ---- */

uint32_t
phub_control_segment_elems(const struct phub_control *ctl, enum phub_dtype dtype)
{
	return control_segment_elems_room(ctl, dtype, 0);
}

uint32_t
control_segment_elems_room(const struct phub_control *ctl, enum phub_dtype dtype,
		unsigned int extra)
{
	int max = phub_wire_max_elems_room(ctl->p.mtu, (uint8_t)dtype, extra);
	uint32_t elems = max > 0 ? (uint32_t)max : 0;

	if (ctl->p.segment_bytes != 0 &&
	    ctl->p.segment_bytes / (uint32_t)phub_dtype_size(dtype) < elems)
		elems = ctl->p.segment_bytes / (uint32_t)phub_dtype_size(dtype);
	return elems / PHUB_WIRE_ELEM_ALIGN * PHUB_WIRE_ELEM_ALIGN;
}

uint64_t
phub_control_job_memory_limit(const struct phub_control *ctl)
{
	uint64_t limit = ctl->p.job_memory_bytes;

	if (ctl->p.total_memory_bytes != 0) {
		uint64_t left = ctl->p.total_memory_bytes > ctl->memory_bytes ?
			ctl->p.total_memory_bytes - ctl->memory_bytes : 0;

		if (limit == 0 || left < limit)
			limit = left;
		/* 0 would mean "no limit" */
		if (limit == 0)
			limit = 1;
	}
	return limit;
}

unsigned int
phub_control_job_count(const struct phub_control *ctl)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++)
		n += ctl->jobs[i].job != NULL;
	return n;
}

/* ---- the declarations ---- */

const struct phub_control_declared_job *
control_declared_find(const struct phub_control *ctl, const char *name)
{
	for (unsigned int i = 0; i < ctl->p.n_declared; i++)
		if (strcmp(ctl->p.declared[i].name, name) == 0)
			return &ctl->p.declared[i];
	return NULL;
}

/* ---- jobs come and go ---- */

void
control_cjob_start(struct phub_control *ctl, struct phub_engine_job *job)
{
	struct cjob *cj = control_cjob(ctl, job);
	struct phub_engine_job_info info;

	phub_engine_job_get_info(job, &info);
	memset(cj, 0, sizeof(*cj));
	cj->job = job;
	cj->memory_bytes = info.memory_bytes;
	ctl->memory_bytes += info.memory_bytes;
	ctl->stats.jobs_created++;
}

void
phub_control_job_restored(struct phub_control *ctl, struct phub_engine_job *job,
		const struct phub_engine_ckpt_info *ckpt)
{
	struct cjob *cj;

	control_cjob_start(ctl, job);
	cj = control_cjob(ctl, job);
	/* The file knows the optimizer; the first rank back declares the rest. */
	cj->decl.known = PHUB_CONTROL_DECL_OPTIMIZER;
	cj->decl.optimizer = (uint8_t)ckpt->optimizer.type;
	/* A ring job's links start again, saying which checkpoint it went back to. */
	if (phub_engine_job_ring(job, NULL, NULL, NULL)) {
		const struct phub_control_declared_job *d = control_declared_find(ctl, ckpt->name);

		if (d != NULL && d->n_racks >= 2) {
			control_ring_start(ctl, cj, d);
			control_ring_restored(cj, ckpt->iteration);
		}
	}
}

/* The job ends; replace: to be restored from its checkpoint, whose files stay. */
static void
job_end(struct phub_control *ctl, struct phub_engine_job *job, bool replace)
{
	struct cjob *cj = control_cjob(ctl, job);
	struct phub_engine_job_info info;

	phub_engine_job_get_info(job, &info);
	ctl->memory_bytes -= cj->memory_bytes < ctl->memory_bytes ? cj->memory_bytes :
		ctl->memory_bytes;
	memset(cj, 0, sizeof(*cj));
	ctl->stats.jobs_ended++;
	if (replace) {
		ctl->p.ops->job_replace(ctl->p.ctx, job);
	} else if (ctl->p.ops->job_release != NULL) {
		ctl->p.ops->job_release(ctl->p.ctx, job);
	} else {
		phub_engine_job_unpublish(ctl->p.engine, job);
		phub_engine_job_free(job);
	}
	control_log(ctl, PHUB_CONTROL_LOG_INFO, "job %s (id %u) ended after iteration %u; %" PRIu64
			" KB freed", info.name, info.job_id, info.iteration_min,
			info.memory_bytes >> 10);
}

void
phub_control_job_end(struct phub_control *ctl, struct phub_engine_job *job)
{
	job_end(ctl, job, false);
}

void
control_job_replace(struct phub_control *ctl, struct phub_engine_job *job)
{
	job_end(ctl, job, true);
}

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
		if (control_auth_in(ctl, dgram, &msg))
			control_leave_input(ctl, from, &msg);
		break;
	case PHUB_WIRE_OP_PING:
		if (control_auth_in(ctl, dgram, &msg))
			control_ping_input(ctl, from, &msg);
		break;
	case PHUB_WIRE_OP_WORLD_ACK:
		if (control_auth_in(ctl, dgram, &msg))
			control_world_ack_input(ctl, from, &msg);
		break;
	case PHUB_WIRE_OP_RING_HELLO:
	case PHUB_WIRE_OP_RING_HELLO_ACK:
		control_ring_input(ctl, from, &msg);
		break;
	default:
		ctl->stats.drops[PHUB_DROP_UNEXPECTED_OPCODE]++;
		break;
	}
}

void
phub_control_poll(struct phub_control *ctl)
{
	uint64_t now = now_ns(ctl);

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
	ctl->liveness_ns = now_ns(ctl);
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

