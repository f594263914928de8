/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What every message of the control plane works with: the per-job records (struct cjob, by
 * engine slot) and the limits they count against, the config's declarations, a job's end
 * (released, replaced for its checkpoint, or aborted with an ERROR to each rank), and the one
 * way out for every datagram (control_send(), sealed for an authenticated session).
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "control_priv.h"

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

/* The job ends; replace: to be restored from its checkpoint, whose files stay. */
static void
job_end(struct phub_control *ctl, struct phub_engine_job *job, bool replace)
{
	struct cjob *cj = control_cjob(ctl, job);
	struct phub_engine_job_info info;

	phub_engine_job_get_info(job, &info);
	ctl->memory_bytes -= cj->memory_bytes < ctl->memory_bytes ? cj->memory_bytes :
		ctl->memory_bytes;
	control_ring_auth_end(&cj->ring);	/* its keys wiped */
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

/*
 * Where rank of the job is now (its session's endpoint, through the port it joined on) and
 * its token; false when the rank holds no session.
 */
bool
control_rank_endpoint(const struct cjob *cj, struct phub_engine_job *job, uint16_t rank,
		struct phub_control_peer *to, uint64_t *token, uint32_t *peer_flags)
{
	struct phub_engine_peer peer;

	if (!phub_engine_job_rank(job, rank, &peer, token))
		return false;
	to->ipv4 = peer.ipv4;
	to->udp_port = peer.udp_port;
	to->port = cj->rank_port[rank];
	memcpy(to->mac, peer.mac, sizeof(to->mac));
	if (peer_flags != NULL)
		*peer_flags = peer.flags;
	return true;
}

void
control_job_abort(struct phub_control *ctl, struct phub_engine_job *job, uint16_t code,
		uint32_t iteration, const char *text)
{
	struct cjob *cj = control_cjob(ctl, job);
	uint32_t base = phub_engine_job_rank_base(job);
	struct phub_engine_job_info info;

	ctl->stats.jobs_failed++;
	phub_engine_job_get_info(job, &info);
	for (uint16_t r = 0; r < info.world_size; r++) {
		struct phub_control_peer to;
		struct phub_wire_msg about;
		uint64_t token;

		if (!control_rank_endpoint(cj, job, r, &to, &token, NULL))
			continue;
		phub_wire_msg_init(&about, PHUB_WIRE_OP_ERROR);
		about.job_id = info.job_id;
		about.session_token = token;
		about.worker_rank = (uint16_t)(base + r);	/* the worker's own, global */
		about.iteration = iteration;
		control_send_error(ctl, &to, &about, code, "%s", text);
	}
	phub_control_job_end(ctl, job);
}
