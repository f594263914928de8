/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane as one object (phub_control.h): JOIN (reassembled when split), job creation
 * within the limits, JOIN_ACK with the chunk map, LEAVE, keep-alives, and the end of a job whose
 * worker fell silent or that no worker JOINed after its restore. The appliance and the soft PBox
 * are adapters around it: they bring datagrams in, send what it builds, and free jobs safely.
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

/* ---- jobs come and go ---- */

static void
cjob_start(struct phub_control *ctl, struct phub_engine_job *job)
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

	cjob_start(ctl, job);
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

/* ---- JOIN ---- */

const struct phub_control_declared_job *
control_declared_find(const struct phub_control *ctl, const char *name)
{
	for (unsigned int i = 0; i < ctl->p.n_declared; i++)
		if (strcmp(ctl->p.declared[i].name, name) == 0)
			return &ctl->p.declared[i];
	return NULL;
}

/* The summing order: the config's for the job (declared, or the default), or the JOIN's flag. */
static bool
join_wants_deterministic(const struct phub_control *ctl, const struct phub_wire_join *join)
{
	const struct phub_control_declared_job *d = control_declared_find(ctl, join->name);
	bool cfg = d != NULL ? d->deterministic : ctl->p.deterministic;

	return cfg || (join->join_flags & PHUB_WIRE_JOIN_F_DETERMINISTIC) != 0;
}

/* on_worker_dead: the config's for a declared job, else the JOIN's flag. */
static bool
join_wants_elastic(const struct phub_control *ctl, const struct phub_wire_join *join)
{
	const struct phub_control_declared_job *d = control_declared_find(ctl, join->name);

	if (d != NULL)
		return d->elastic;
	return (join->join_flags & PHUB_WIRE_JOIN_F_ELASTIC) != 0;
}

static void
job_create_error(struct phub_control *ctl, const struct phub_control_peer *to,
		const struct phub_wire_msg *msg, const struct phub_wire_join *join, int err,
		const struct phub_engine_job_params *p, const struct phub_wire_key *keys,
		uint32_t n_keys)
{
	uint64_t left = ctl->p.total_memory_bytes > ctl->memory_bytes ?
		ctl->p.total_memory_bytes - ctl->memory_bytes : 0;

	if ((err == E2BIG || err == ENOMEM) && ctl->p.ops->explain_no_memory != NULL) {
		char why[PHUB_WIRE_ERROR_MSG_MAX];

		ctl->p.ops->explain_no_memory(ctl->p.ctx, p, keys, n_keys, err, to->port, why,
				sizeof(why));
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_NO_MEMORY,
				"job %s %s", join->name, why);
		return;
	}
	/* The appliance's config keys by name, so that an operator knows what to raise. */
	if (err == E2BIG)
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_NO_MEMORY,
				"job %s needs more memory than "
				"this PBox allows: per job %" PRIu64 " MB (limits.job_memory_mb), %"
				PRIu64 " MB left of %" PRIu64 " MB (limits.total_memory_mb)",
				join->name, ctl->p.job_memory_bytes >> 20, left >> 20,
				ctl->p.total_memory_bytes >> 20);
	else if (err == ENOMEM)
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_NO_MEMORY, "job %s: out of memory",
				join->name);
	else if (err == ENOSPC)
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_JOB_LIMIT, "job table full");
	else
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_BAD_REQUEST,
				"job %s: invalid parameters (%s)", join->name, strerror(err));
}

/* A new job from its first JOIN, within the limits; NULL after an ERROR. */
static struct phub_engine_job *
job_create(struct phub_control *ctl, const struct phub_control_peer *to,
		const struct phub_wire_msg *msg, const struct phub_wire_join *join,
		const struct phub_wire_key *keys, uint32_t n_keys)
{
	const struct phub_control_declared_job *declared = control_declared_find(ctl, join->name);
	struct phub_engine_ring_params ring;
	struct phub_engine_job_params p;
	uint8_t psk[PHUB_AUTH_KEY_LEN] = { 0 };
	struct phub_layout_key *lkeys;
	struct phub_engine_job_info info;
	struct phub_engine_job *job;
	uint64_t limit;

	memset(&p, 0, sizeof(p));
	p.name = join->name;
	p.nonce = join->nonce;
	p.world_size = join->world_size;
	p.dtype = (enum phub_dtype)join->dtype;
	p.optimizer.type = (enum phub_opt_type)join->optimizer;
	p.optimizer.lr = join->hyper.lr;
	p.optimizer.momentum = join->hyper.momentum;
	p.optimizer.weight_decay = join->hyper.weight_decay;
	p.optimizer.beta1 = join->hyper.beta1;
	p.optimizer.beta2 = join->hyper.beta2;
	p.optimizer.eps = join->hyper.eps;
	p.deterministic = join_wants_deterministic(ctl, join);
	p.elastic = join_wants_elastic(ctl, join);
	/* A job declared in the config fixes the nonce, size, dtype and optimizer. */
	if (declared != NULL) {
		if (declared->nonce != join->nonce) {
			control_send_error(ctl, to, msg, PHUB_WIRE_ERR_BAD_NONCE,
					"job %s: wrong nonce",
					join->name);
			return NULL;
		}
		/*
		 * Named by its config key: the operator's file and the worker's launcher
		 * (WORLD_SIZE) disagree, and the message must say which line to change.
		 */
		if (declared->workers != join->world_size) {
			control_send_error(ctl, to, msg, PHUB_WIRE_ERR_LAYOUT_MISMATCH,
					"job %s: jobs[%u].workers is %u in the PBox's config; "
					"the JOIN says world size %u", join->name,
					(unsigned int)(declared - ctl->p.declared),
					declared->workers, join->world_size);
			return NULL;
		}
		if ((uint8_t)declared->dtype != join->dtype) {
			control_send_error(ctl, to, msg, PHUB_WIRE_ERR_LAYOUT_MISMATCH,
					"job %s: jobs[%u].dtype is %s in the PBox's config; "
					"the JOIN says %s", join->name,
					(unsigned int)(declared - ctl->p.declared),
					phub_wire_dtype_name((uint8_t)declared->dtype),
					phub_wire_dtype_name(join->dtype));
			return NULL;
		}
		p.optimizer = declared->optimizer;
		if (declared->auth) {
			phub_auth_job_psk(psk, declared->name, declared->nonce,
					declared->key);
			p.auth_psk = psk;
			p.auth_lanes = 1 + ctl->p.n_servers;
		}
		/* A job across racks: this rack's ranks, its place in the ring. */
		control_ring_job_params(ctl, declared, &p, &ring);
	}
	if (ctl->p.max_jobs != 0 && phub_control_job_count(ctl) >= ctl->p.max_jobs) {
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_JOB_LIMIT,
				"this PBox serves at most %u jobs (limits.max_jobs)",
				ctl->p.max_jobs);
		return NULL;
	}
	if (ctl->p.max_workers_per_job != 0 && p.world_size > ctl->p.max_workers_per_job) {
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_JOB_LIMIT,
				"job %s: %u workers, this PBox "
				"allows %u (limits.max_workers_per_job)", join->name,
				p.world_size, ctl->p.max_workers_per_job);
		return NULL;
	}
	lkeys = calloc(n_keys != 0 ? n_keys : 1, sizeof(*lkeys));
	if (lkeys == NULL)
		return NULL;
	for (uint32_t i = 0; i < n_keys; i++) {
		lkeys[i].key_id = keys[i].key_id;
		lkeys[i].n_elems = keys[i].elem_count;
	}
	p.keys = lkeys;
	p.n_keys = n_keys;
	p.chunk_bytes = join->chunk_bytes != 0 ? join->chunk_bytes : ctl->p.chunk_bytes;
	/* An authenticated job's segments leave room for the MAC in every datagram. */
	p.segment_elems = p.auth_psk != NULL ? control_auth_segment_elems(ctl, p.dtype) :
		phub_control_segment_elems(ctl, p.dtype);
	p.servers = ctl->p.servers;
	p.n_servers = ctl->p.n_servers;
	p.allocator = ctl->p.ops->allocator != NULL ?
		ctl->p.ops->allocator(ctl->p.ctx, to->port) : NULL;
	limit = phub_control_job_memory_limit(ctl);
	p.memory_limit_bytes = limit;
	/* The snapshot buffers of checkpoints count in the job's memory. */
	p.checkpoint_shadow = ctl->p.checkpoint_shadow;
	job = phub_engine_job_create(ctl->p.engine, &p);
	phub_auth_wipe(psk, sizeof(psk));
	free(lkeys);
	if (job == NULL) {
		job_create_error(ctl, to, msg, join, errno, &p, keys, n_keys);
		return NULL;
	}
	cjob_start(ctl, job);
	phub_control_decl_from_join(&control_cjob(ctl, job)->decl, join);
	if (p.ring != NULL)
		control_ring_start(ctl, control_cjob(ctl, job), declared);
	if (ctl->p.ops->job_created != NULL)
		ctl->p.ops->job_created(ctl->p.ctx, job);
	phub_engine_job_get_info(job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_INFO, "job %s (id %u): %u workers, %u keys, %u chunks, %"
			PRIu64 " elements %s, optimizer %s, %s sums, %" PRIu64 " KB%s", info.name,
			info.job_id, info.world_size, info.n_keys, info.n_chunks, info.n_elems,
			phub_wire_dtype_name((uint8_t)info.dtype),
			phub_opt_type_name(p.optimizer.type),
			info.deterministic ? "rank-order" : "arrival-order",
			info.memory_bytes >> 10,
			declared != NULL ? " (declared in the config)" : "");
	return job;
}

/* The job a complete JOIN names: found and checked, or created. NULL after an ERROR. */
static struct phub_engine_job *
job_for_join(struct phub_control *ctl, const struct phub_control_peer *to,
		const struct phub_wire_msg *msg, const struct phub_wire_join *join,
		const struct phub_wire_key *keys, uint32_t n_keys, bool *created)
{
	struct phub_engine_job *job = phub_engine_job_find(ctl->p.engine, join->name);
	const char *what;

	*created = false;
	/* A ring job's rank of another rack is told where it belongs, job or no job. */
	if (control_ring_rank_refused(ctl, to, msg, join))
		return NULL;
	/* A ring job that its workers left and that still drains is over: a JOIN starts anew. */
	if (job != NULL && control_cjob(ctl, job)->ring.draining) {
		phub_control_job_end(ctl, job);
		job = NULL;
	}
	if (job == NULL) {
		job = job_create(ctl, to, msg, join, keys, n_keys);
		*created = job != NULL;
		return job;
	}
	/*
	 * The nonce before anything else, and an answer that says nothing of the job: a layout
	 * check first told anyone without the nonce the job's shape, one LAYOUT_MISMATCH at a time.
	 */
	if (!phub_engine_job_nonce_matches(job, join->nonce)) {
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_BAD_NONCE, "job %s: wrong nonce",
				join->name);
		return NULL;
	}
	/* Every field the job's ranks declare (docs/protocol.md, section 8). */
	what = phub_control_join_mismatch(job, &control_cjob(ctl, job)->decl, join, keys, n_keys,
			join_wants_deterministic(ctl, join));
	if (what != NULL) {
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_LAYOUT_MISMATCH,
				"job %s: rank %u declares another %s than the job has", join->name,
				join->rank, what);
		return NULL;
	}
	if (join_wants_elastic(ctl, join) != phub_engine_job_elastic(job)) {
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_LAYOUT_MISMATCH,
				"job %s: rank %u declares another on_worker_dead (elastic flag) "
				"than the job has", join->name, join->rank);
		return NULL;
	}
	phub_control_decl_complete(&control_cjob(ctl, job)->decl, join);
	return job;
}

static void
send_join_ack(struct phub_control *ctl, const struct phub_control_peer *to,
		struct phub_engine_job *job, uint16_t rank, uint64_t token, uint8_t flags)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);
	struct phub_wire_join_ack_params p;
	struct phub_engine_job_info info;
	unsigned int mtu;
	uint16_t *map;
	int segs;

	phub_engine_job_get_info(job, &info);
	map = calloc(info.n_chunks != 0 ? info.n_chunks : 1, sizeof(*map));
	if (map == NULL)
		return;		/* the worker sends its JOIN again */
	for (uint32_t c = 0; c < info.n_chunks; c++) {
		uint32_t server = 0;

		phub_layout_chunk_server(layout, c, &server);
		map[c] = (uint16_t)server;
	}
	memset(&p, 0, sizeof(p));
	p.ack.job_id = info.job_id;
	/* The first iteration to push: one past what every segment finished (0: a new job). */
	p.ack.iteration = info.iteration_min + 1;
	/* A readmitted rank's: its boundary, before which the others go on without it. */
	{
		uint16_t local;
		uint32_t from;

		if (phub_engine_job_local_rank(job, rank, &local) &&
		    phub_engine_job_rank_joining(job, local, &from))
			p.ack.iteration = from;
	}
	p.ack.chunk_bytes = phub_layout_chunk_elems(layout) * PHUB_LAYOUT_MODEL_ELEM_SIZE;
	p.ack.seg_elems = phub_layout_segment_elems(layout);
	p.session_token = token;
	p.endpoints = ctl->p.endpoints;
	p.endpoint_count = (uint16_t)ctl->p.n_servers;
	p.chunk_endpoints = map;
	p.total_chunks = info.n_chunks;
	p.rank = rank;
	p.flags = flags;
	/* An authenticated answer's datagrams keep room for the key and MAC within the MTU. */
	mtu = ctl->auth_join ? ctl->p.mtu - PHUB_WIRE_AUTH_PK_LEN - PHUB_WIRE_AUTH_TRAILER_LEN :
		ctl->p.mtu;
	segs = phub_wire_join_ack_segments(&p, mtu);
	for (int i = 0; i < segs; i++) {
		int len = phub_wire_join_ack_write(ctl->buf, sizeof(ctl->buf), &p, mtu,
				(uint16_t)i);

		if (len > 0 && ctl->auth_join)
			len = control_auth_join_ack(ctl, ctl->buf, (size_t)len, sizeof(ctl->buf));
		if (len > 0)
			control_send(ctl, to, ctl->buf, (size_t)len);
	}
	ctl->stats.joins++;
	free(map);
}

static void send_worlds(struct phub_control *ctl, struct phub_engine_job *job);

static void
join_complete(struct phub_control *ctl, const struct phub_control_peer *to,
		const struct phub_wire_msg *msg, const struct phub_control_join *cj)
{
	const struct phub_wire_join *join = cj->join;
	struct phub_engine_peer peer, old;
	struct phub_engine_job *job;
	uint64_t token, old_token;
	uint32_t removed_from, rejoin_at;
	bool created, replay, readmitted = false;
	uint16_t rank;
	struct cjob *c;
	int rc;

	job = job_for_join(ctl, to, msg, join, cj->keys, cj->n_keys, &created);
	if (job == NULL)
		return;
	/* The engine counts a ring job's ranks from its rack's first (checked by job_for_join). */
	if (!phub_engine_job_local_rank(job, join->rank, &rank))
		rank = join->rank;	/* out of range: phub_engine_job_join() refuses it */
	memset(&peer, 0, sizeof(peer));
	peer.ipv4 = to->ipv4;
	peer.udp_port = to->udp_port;
	memcpy(peer.mac, to->mac, sizeof(peer.mac));
	/*
	 * A removed rank comes back at an iteration boundary (docs/design.md, "Elastic jobs"):
	 * the others hear of it (WORLD), and it hears of every change from the first.
	 */
	if (phub_engine_job_rank_removed(job, rank, &removed_from)) {
		c = control_cjob(ctl, job);
		if (c->changes >= CONTROL_MAX_CHANGES ||
		    phub_engine_job_rank_readmit(job, rank, &rejoin_at) != 0) {
			control_send_error(ctl, to, msg, PHUB_WIRE_ERR_RANK_TAKEN,
					"job %s: rank %u was removed from iteration %u on and "
					"cannot join again", join->name, join->rank, removed_from);
			return;
		}
		c->change_rank[c->changes] = rank;
		c->change_iteration[c->changes++] = rejoin_at;
		c->world_acked[rank] = 0;
		control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "job %s: rank %u, removed from "
				"iteration %u, joins again from iteration %u", join->name,
				join->rank, removed_from, rejoin_at);
		readmitted = true;
	}
	/* The data path reads it with the endpoint: CSUM on this rank's ACKs and MODELs. The MAC
	 * of an authenticated session covers what the CRC would. */
	peer.flags = (join->join_flags & PHUB_WIRE_JOIN_F_CSUM) && !ctl->auth_join ?
		PHUB_ENGINE_PEER_F_CSUM : 0;
	/* ... and ACKV instead of one ACK per PUSH, when the worker takes it. */
	if (join->join_flags & PHUB_WIRE_JOIN_F_ACKV)
		peer.flags |= PHUB_ENGINE_PEER_F_ACKV;
	/* The same rank from the same source again: its JOIN_ACK was lost, this is a replay. */
	replay = phub_engine_job_rank(job, rank, &old, &old_token) &&
		old.ipv4 == peer.ipv4 && old.udp_port == peer.udp_port;
	/* The session keys before the session: a JOIN that may not have one changes nothing. */
	if (rank < phub_engine_job_world_size(job)) {
		struct phub_engine_rank_status st;
		bool live;

		phub_engine_job_rank_status(job, rank, &st);
		live = st.joined && st.silent_ns < (uint64_t)ctl->p.worker_dead_ms * 1000000u;
		if (!control_auth_join_keys(ctl, job, rank, live, replay)) {
			if (created)
				phub_control_job_end(ctl, job);
			return;
		}
	}
	rc = phub_engine_job_join(job, rank, join->nonce, &peer, &token);
	if (rc != 0) {
		control_send_error(ctl, to, msg, (uint16_t)-rc,
				"job %s: rank %u refused: %s", join->name,
				join->rank, -rc == PHUB_WIRE_ERR_BAD_NONCE ? "wrong nonce" :
				phub_wire_error_name((uint16_t)-rc));
		if (created)
			phub_control_job_end(ctl, job);
		return;
	}
	c = control_cjob(ctl, job);
	c->rank_port[rank] = to->port;
	memcpy(c->rank_mac[rank], to->mac, 6);
	if (!replay)
		control_log(ctl, PHUB_CONTROL_LOG_INFO, "job %s: rank %u of %u joined from "
				"%u.%u.%u.%u:%u", join->name, join->rank, join->world_size,
				to->ipv4 >> 24, (to->ipv4 >> 16) & 0xff, (to->ipv4 >> 8) & 0xff,
				to->ipv4 & 0xff, to->udp_port);
	send_join_ack(ctl, to, job, join->rank, token,
			(uint8_t)(((peer.flags & PHUB_ENGINE_PEER_F_CSUM) ? PHUB_WIRE_F_CSUM : 0) |
				(replay ? PHUB_WIRE_F_REPLAY : 0)));
	if (readmitted)
		send_worlds(ctl, job);
}

static void
source_note(struct phub_control *ctl, const struct phub_control_peer *from)
{
	unsigned int cap = ctl->p.max_pending_joins;

	for (unsigned int i = 0; i < cap; i++)
		if (ctl->sources[i].used && ctl->sources[i].peer.ipv4 == from->ipv4 &&
		    ctl->sources[i].peer.udp_port == from->udp_port) {
			ctl->sources[i].peer = *from;
			return;
		}
	ctl->sources[ctl->sources_next].peer = *from;
	ctl->sources[ctl->sources_next].used = true;
	ctl->sources_next = (ctl->sources_next + 1) % cap;
}

static void
handle_join(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg)
{
	struct phub_control_addr src = { .ipv4 = from->ipv4, .udp_port = from->udp_port };
	struct phub_control_join cj;

	source_note(ctl, from);
	switch (phub_control_joins_add(ctl->joins, &src, msg, now_ns(ctl), &cj)) {
	case PHUB_CONTROL_JOIN_MORE:
	case PHUB_CONTROL_JOIN_NO_MEMORY:	/* the worker sends it again */
		return;
	case PHUB_CONTROL_JOIN_TOO_MANY_KEYS:
		control_send_error(ctl, from, msg, PHUB_WIRE_ERR_BAD_REQUEST,
				"a layout of more keys than "
				"this PBox takes: at most %u keys a job", ctl->p.max_job_keys);
		return;
	case PHUB_CONTROL_JOIN_CONTRADICTS:
		control_send_error(ctl, from, msg, PHUB_WIRE_ERR_BAD_REQUEST,
				"JOIN datagrams of rank %u "
				"contradict each other; start again", msg->worker_rank);
		return;
	case PHUB_CONTROL_JOIN_COMPLETE:
		join_complete(ctl, from, msg, &cj);
		phub_control_joins_done(ctl->joins, &src, &cj);
		return;
	}
}

/* ---- LEAVE, PING ---- */

static void
handle_leave(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(ctl->p.engine, msg->job_id);
	struct phub_control_addr src = { .ipv4 = from->ipv4, .udp_port = from->udp_port };
	struct phub_control_leave_verdict v;
	struct phub_wire_msg ack;
	const void *out = ctl->buf;
	size_t n = 0;
	int len;

	/* A LEAVE refused is counted like a PUSH refused: LEAVEs of guessed sessions show. */
	phub_control_leave(&ctl->leaves, job, &src, msg, &v);
	if (!v.ack) {
		ctl->stats.drops[v.drop]++;
		return;
	}
	phub_control_leave_ack(msg, &ack);
	if (!v.left)
		ack.flags |= PHUB_WIRE_F_REPLAY;	/* the first LEAVE_ACK was lost */
	len = phub_wire_encode(ctl->buf, sizeof(ctl->buf), &ack);
	/* Sealed while the job (and an authenticated session's keys) is still there. */
	if (len > 0)
		n = control_auth_out(ctl, &out, (size_t)len);
	if (v.left) {
		control_log(ctl, PHUB_CONTROL_LOG_INFO, "job id %u: rank %u left, %d still joined",
				msg->job_id, msg->worker_rank, v.remaining);
		/*
		 * Before the answer: a worker that has its LEAVE_ACK finds the job gone. A ring
		 * job drains first: its neighbours may still need its last ring steps.
		 */
		if (v.remaining == 0 && !control_ring_drain(ctl, job))
			phub_control_job_end(ctl, job);
	}
	if (n != 0)
		control_send(ctl, from, out, n);
	ctl->stats.leaves++;
}

/*
 * Where rank of the job is now (its session's endpoint, through the port it joined on) and
 * its token; false when the rank holds no session.
 */
static bool
rank_endpoint(const struct cjob *cj, struct phub_engine_job *job, uint16_t rank,
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

/* The change after the last one rank acknowledged, to it: WORLD. */
static void
send_world(struct phub_control *ctl, struct phub_engine_job *job, uint16_t rank)
{
	struct cjob *cj = control_cjob(ctl, job);
	uint16_t change = (uint16_t)(cj->world_acked[rank] + 1u);
	uint16_t who = cj->change_rank[change - 1u];
	uint32_t from = cj->change_iteration[change - 1u];
	struct phub_control_peer to;
	struct phub_wire_msg m;
	uint32_t peer_flags;
	uint64_t token;
	int len;

	if (!rank_endpoint(cj, job, rank, &to, &token, &peer_flags))
		return;
	phub_wire_msg_init(&m, PHUB_WIRE_OP_WORLD);
	m.job_id = phub_engine_job_id(job);
	m.session_token = token;
	m.worker_rank = (uint16_t)(phub_engine_job_rank_base(job) + rank);
	m.iteration = from;
	m.aux = PHUB_WIRE_WORLD_AUX(change, phub_engine_job_rank_base(job) + who);
	if (peer_flags & PHUB_ENGINE_PEER_F_CSUM)
		m.flags |= PHUB_WIRE_F_CSUM;
	len = phub_wire_encode(ctl->buf, sizeof(ctl->buf), &m);
	if (len > 0) {
		control_send(ctl, &to, ctl->buf, (size_t)len);
		ctl->stats.worlds_sent++;
	}
}

/* Every live rank behind the job's last change hears of the next one. */
static void
send_worlds(struct phub_control *ctl, struct phub_engine_job *job)
{
	struct cjob *cj = control_cjob(ctl, job);

	for (uint16_t r = 0; r < phub_engine_job_world_size(job); r++)
		if (cj->world_acked[r] < cj->changes && !phub_engine_job_rank_removed(job, r, NULL))
			send_world(ctl, job, r);
}

static void
handle_world_ack(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(ctl->p.engine, msg->job_id);
	struct phub_control_addr src = { .ipv4 = from->ipv4, .udp_port = from->udp_port };
	uint16_t change = PHUB_WIRE_WORLD_CHANGE(msg->aux);
	struct cjob *cj;
	uint16_t rank;

	/* Only the session's own address acknowledges, and only a change that was made. */
	if (job == NULL || phub_control_session_check(job, &src, msg) != PHUB_DROP_OK ||
	    !phub_engine_job_local_rank(job, msg->worker_rank, &rank)) {
		ctl->stats.drops[PHUB_DROP_BAD_TOKEN]++;
		return;
	}
	cj = control_cjob(ctl, job);
	if (change == 0 || change > cj->changes || change <= cj->world_acked[rank])
		return;
	cj->world_acked[rank] = change;
	ctl->stats.world_acks++;
	/* The next change at once, if there is one. */
	if (change < cj->changes)
		send_world(ctl, job, rank);
}

static void
handle_ping(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(ctl->p.engine, msg->job_id);
	struct phub_control_addr src = { .ipv4 = from->ipv4, .udp_port = from->udp_port };
	struct phub_wire_msg pong;
	uint16_t code;
	int len;

	ctl->stats.pings++;
	code = phub_control_ping(job, &src, msg);
	if (code == PHUB_WIRE_ERR_BAD_SESSION) {
		control_send_error(ctl, from, msg, code,
				"rank %u of job id %u has another session now",
				msg->worker_rank, msg->job_id);
		return;
	}
	if (code != 0) {
		control_send_error(ctl, from, msg, code,
				"no session of rank %u in job id %u here (the "
				"PBox restarted, or the job ended): JOIN again", msg->worker_rank,
				msg->job_id);
		return;
	}
	phub_control_pong(msg, &pong);
	len = phub_wire_encode(ctl->buf, sizeof(ctl->buf), &pong);
	if (len > 0)
		control_send(ctl, from, ctl->buf, (size_t)len);
}

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
			handle_join(ctl, from, &msg);
		ctl->auth_join = false;
		break;
	case PHUB_WIRE_OP_LEAVE:
		if (control_auth_in(ctl, dgram, &msg))
			handle_leave(ctl, from, &msg);
		break;
	case PHUB_WIRE_OP_PING:
		if (control_auth_in(ctl, dgram, &msg))
			handle_ping(ctl, from, &msg);
		break;
	case PHUB_WIRE_OP_WORLD_ACK:
		if (control_auth_in(ctl, dgram, &msg))
			handle_world_ack(ctl, from, &msg);
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

/* ---- timers ---- */

/* ERROR JOIN_TIMEOUT to the source of a JOIN that stayed incomplete. */
static void
join_timed_out(void *arg, const struct phub_control_addr *src, const struct phub_wire_msg *about)
{
	struct phub_control *ctl = arg;

	ctl->stats.join_timeouts++;
	for (unsigned int i = 0; i < ctl->p.max_pending_joins; i++) {
		const struct join_source *s = &ctl->sources[i];

		if (s->used && s->peer.ipv4 == src->ipv4 && s->peer.udp_port == src->udp_port) {
			control_send_error(ctl, &s->peer, about, PHUB_WIRE_ERR_JOIN_TIMEOUT,
					"JOIN of rank "
					"%u: datagrams missing for more than %u ms; send it whole "
					"again", about->worker_rank, ctl->p.join_ms);
			return;
		}
	}
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

		if (!rank_endpoint(cj, job, r, &to, &token, NULL))
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

/*
 * End a job whose rank has been silent for worker_dead_ms while others wait on it: every
 * joined rank learns why (ERROR WORKER_TIMEOUT), then the job ends as after the last LEAVE.
 */
static void
job_timeout(struct phub_control *ctl, struct phub_engine_job *job, uint16_t dead,
		uint64_t silent_ms, uint32_t iteration)
{
	uint32_t rank = phub_engine_job_rank_base(job) + dead;	/* as the workers know it */
	struct phub_engine_job_info info;
	struct phub_engine_rank_status st;
	char text[PHUB_WIRE_ERROR_MSG_MAX];
	const char *why = "";

	phub_engine_job_get_info(job, &info);
	/* A rank that is not joined never came, or left before the others were done. */
	if (phub_engine_job_rank_status(job, dead, &st) == 0 && !st.joined)
		why = " (not joined)";
	control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s (id %u): rank %u silent for %" PRIu64
			" ms%s while iteration %u waits on it (timeouts.worker_dead_ms %u): the "
			"job ends",
			info.name, info.job_id, rank, silent_ms, why, iteration,
			ctl->p.worker_dead_ms);
	snprintf(text, sizeof(text), "rank %u silent for %" PRIu64 " ms%s", rank, silent_ms, why);
	control_job_abort(ctl, job, PHUB_WIRE_ERR_WORKER_TIMEOUT, iteration, text);
}

/*
 * An elastic job goes on without a rank that has been silent for worker_dead_ms while others
 * wait on it: the engine removes it, the others learn the new world size (WORLD). False when
 * it cannot (the rank has not passed the initial-model round): the job ends as a "fail" one.
 */
static bool
job_remove_rank(struct phub_control *ctl, struct phub_engine_job *job, uint16_t dead,
		uint64_t silent_ms)
{
	struct cjob *cj = control_cjob(ctl, job);
	struct phub_engine_job_info info;
	uint32_t from;
	int rc;

	if (cj->changes >= CONTROL_MAX_CHANGES)
		return false;
	rc = phub_engine_job_rank_remove(job, dead, &from);
	if (rc != 0)
		return false;
	cj->change_rank[cj->changes] = dead;
	cj->change_iteration[cj->changes++] = from;
	ctl->stats.ranks_removed++;
	phub_engine_job_get_info(job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "job %s (id %u): rank %u silent for %" PRIu64
			" ms (timeouts.worker_dead_ms %u): removed from iteration %u on "
			"(on_worker_dead continue); %u of %u ranks go on", info.name, info.job_id,
			phub_engine_job_rank_base(job) + dead, silent_ms, ctl->p.worker_dead_ms,
			from, info.live, info.world_size);
	send_worlds(ctl, job);
	if (info.joined == 0)
		phub_control_job_end(ctl, job);
	return true;
}

/* The silent rank others wait on, if any: the one silent the longest, for more than dead_ns. */
static bool
job_find_dead(const struct phub_engine_job *job, uint64_t dead_ns, uint16_t *dead,
		uint64_t *silent_ns, uint32_t *iteration)
{
	uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS];
	uint16_t world = phub_engine_job_world_size(job);
	bool any = false;

	*silent_ns = 0;
	/* The cheap test first: the slots are scanned only when someone is that silent. */
	for (uint16_t r = 0; r < world && !any; r++) {
		struct phub_engine_rank_status st;

		any = phub_engine_job_rank_status(job, r, &st) == 0 && st.silent_ns > dead_ns;
	}
	if (!any || phub_engine_job_waiting_on(job, iteration, waiting) <= 0)
		return false;
	for (uint16_t r = 0; r < world; r++) {
		struct phub_engine_rank_status st;

		if (!((waiting[r / 64] >> (r % 64)) & 1) ||
		    phub_engine_job_rank_status(job, r, &st) != 0 || st.silent_ns <= dead_ns ||
		    st.silent_ns <= *silent_ns)
			continue;
		*dead = r;
		*silent_ns = st.silent_ns;
	}
	return *silent_ns != 0;
}

static bool
job_has_session(const struct phub_engine_job *job)
{
	struct phub_engine_peer peer;
	uint64_t token;

	for (uint16_t r = 0; r < phub_engine_job_world_size(job); r++)
		if (phub_engine_job_rank(job, r, &peer, &token))
			return true;
	return false;
}

/*
 * End a job that has gone worker_dead_ms without any joined rank; true when it did. Only a job
 * restored from a checkpoint is ever in that state (a job made by a JOIN has its rank from the
 * start, and the last LEAVE or a timeout ends it); without this its memory, table slot and
 * checkpoint files would stay for good. The clock starts at the first check that finds it so.
 */
static bool
orphan_expired(struct phub_control *ctl, struct phub_engine_job *job, uint64_t now)
{
	struct cjob *cj = control_cjob(ctl, job);
	struct phub_engine_job_info info;

	/* A ring job left by its workers drains, then ends (control_ring_check()). */
	if (job_has_session(job) || cj->ring.draining) {
		cj->orphan_seen = false;
		return false;
	}
	if (!cj->orphan_seen) {
		cj->orphan_seen = true;
		cj->orphan_since_ns = now;
		return false;
	}
	if (now - cj->orphan_since_ns <= (uint64_t)ctl->p.worker_dead_ms * 1000000u)
		return false;
	phub_engine_job_get_info(job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s (id %u): restored from checkpoint, no "
			"worker joined within worker_dead_ms %u ms: freed (a worker that JOINs "
			"later starts a new job)", info.name, info.job_id, ctl->p.worker_dead_ms);
	ctl->stats.jobs_failed++;
	phub_control_job_end(ctl, job);
	return true;
}

/*
 * End a job all of whose joined ranks have been silent for more than dead_ns; true when it
 * did. Nobody waits on anybody when every worker died at an iteration boundary, so
 * job_find_dead() never names one. A live libphub worker is never that silent: it PINGs.
 */
static bool
job_abandoned(struct phub_control *ctl, struct phub_engine_job *job, uint64_t dead_ns)
{
	uint16_t world = phub_engine_job_world_size(job);
	uint64_t least_silent_ns = UINT64_MAX;
	struct phub_engine_job_info info;

	for (uint16_t r = 0; r < world; r++) {
		struct phub_engine_rank_status st;

		if (phub_engine_job_rank_status(job, r, &st) != 0 || !st.joined)
			continue;
		if (st.silent_ns <= dead_ns)
			return false;
		if (st.silent_ns < least_silent_ns)
			least_silent_ns = st.silent_ns;
	}
	if (least_silent_ns == UINT64_MAX)
		return false;	/* no joined rank: orphan_expired() decides */
	phub_engine_job_get_info(job, &info);
	control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s (id %u): every joined rank silent for %"
			PRIu64 " ms or more (timeouts.worker_dead_ms %u) after iteration %u: the "
			"job ends",
			info.name, info.job_id, least_silent_ns / 1000000u, ctl->p.worker_dead_ms,
			info.iteration_min);
	ctl->stats.jobs_failed++;
	phub_control_job_end(ctl, job);
	return true;
}

static void
check_liveness(struct phub_control *ctl, uint64_t now)
{
	uint64_t dead_ns = (uint64_t)ctl->p.worker_dead_ms * 1000000u;

	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct cjob *cj = &ctl->jobs[i];
		struct phub_engine_job *job = cj->job;
		uint64_t silent_ns;
		uint32_t iteration;
		uint16_t dead = 0;

		if (job == NULL || orphan_expired(ctl, job, now) ||
		    job_abandoned(ctl, job, dead_ns) || control_ring_check(ctl, cj, now))
			continue;
		/* WORLDs not yet acknowledged go again. */
		if (cj->changes != 0)
			send_worlds(ctl, job);
		if (!job_find_dead(job, dead_ns, &dead, &silent_ns, &iteration)) {
			cj->suspect_seen = false;
			continue;
		}
		if (!cj->suspect_seen || cj->suspect_rank != dead) {
			cj->suspect_seen = true;
			cj->suspect_rank = dead;
			continue;
		}
		cj->suspect_seen = false;
		if (phub_engine_job_elastic(job) && job_remove_rank(ctl, job, dead,
				silent_ns / 1000000u))
			continue;
		job_timeout(ctl, job, dead, silent_ns / 1000000u, iteration);
	}
}

void
phub_control_poll(struct phub_control *ctl)
{
	uint64_t now = now_ns(ctl);

	phub_control_joins_expire(ctl->joins, now, (uint64_t)ctl->p.join_ms * 1000000u,
			join_timed_out, ctl);
	control_ring_poll(ctl, now);
	if (now - ctl->liveness_ns < LIVENESS_PERIOD_NS)
		return;
	ctl->liveness_ns = now;
	check_liveness(ctl, now);
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
