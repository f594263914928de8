/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * JOIN, whole: a JOIN split over several datagrams reassembled (or timed out: ERROR
 * JOIN_TIMEOUT), the job it names found and every field a later rank declares checked
 * (LAYOUT_MISMATCH), or the job created within the limits and the config's declarations, the
 * rank's session opened, and the JOIN_ACK with the chunk map.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "control_priv.h"

/* ---- reassembly ---- */

struct pending {
	bool used;
	struct phub_control_addr src;
	uint16_t rank;
	char name[PHUB_WIRE_JOB_NAME_LEN];
	uint64_t started_ns;
	struct phub_wire_msg about;	/* the first datagram's header, for JOIN_TIMEOUT */
	struct phub_wire_join_merge merge;
	struct phub_wire_key *keys;
};

struct phub_control_joins {
	unsigned int cap;
	uint32_t max_keys;
	struct pending entries[];
};

struct phub_control_joins *
phub_control_joins_create(unsigned int cap, uint32_t max_keys)
{
	struct phub_control_joins *j;

	if (cap == 0 || max_keys == 0) {
		errno = EINVAL;
		return NULL;
	}
	j = calloc(1, sizeof(*j) + cap * sizeof(j->entries[0]));
	if (j == NULL)
		return NULL;
	j->cap = cap;
	j->max_keys = max_keys;
	return j;
}

static void
pending_clear(struct pending *p)
{
	free(p->keys);
	memset(p, 0, sizeof(*p));
}

void
phub_control_joins_free(struct phub_control_joins *joins)
{
	if (joins == NULL)
		return;
	for (unsigned int i = 0; i < joins->cap; i++)
		pending_clear(&joins->entries[i]);
	free(joins);
}

static bool
pending_is(const struct pending *p, const struct phub_control_addr *src, uint16_t rank,
		const char *name)
{
	return p->used && p->src.ipv4 == src->ipv4 && p->src.udp_port == src->udp_port &&
		p->rank == rank && strcmp(p->name, name) == 0;
}

static struct pending *
pending_find(struct phub_control_joins *joins, const struct phub_control_addr *src,
		uint16_t rank, const char *name)
{
	for (unsigned int i = 0; i < joins->cap; i++)
		if (pending_is(&joins->entries[i], src, rank, name))
			return &joins->entries[i];
	return NULL;
}

/* A free entry, else the oldest: its worker sends its JOIN again. */
static struct pending *
pending_take(struct phub_control_joins *joins)
{
	struct pending *victim = &joins->entries[0];

	for (unsigned int i = 0; i < joins->cap; i++) {
		struct pending *p = &joins->entries[i];

		if (!p->used)
			return p;
		if (p->started_ns < victim->started_ns)
			victim = p;
	}
	pending_clear(victim);
	return victim;
}

static int
pending_start(struct pending *p, const struct phub_control_addr *src,
		const struct phub_wire_msg *msg, const struct phub_wire_join_seg *seg,
		uint64_t now_ns)
{
	p->keys = calloc(seg->total_keys != 0 ? seg->total_keys : 1, sizeof(*p->keys));
	if (p->keys == NULL)
		return -ENOMEM;
	p->used = true;
	p->src = *src;
	p->rank = seg->join.rank;
	memcpy(p->name, seg->join.name, sizeof(p->name));
	p->started_ns = now_ns;
	p->about = *msg;
	p->about.payload = NULL;
	p->about.payload_len = 0;
	phub_wire_join_merge_init(&p->merge, p->keys, seg->total_keys);
	return 0;
}

enum phub_control_join_result
phub_control_joins_add(struct phub_control_joins *joins, const struct phub_control_addr *src,
		const struct phub_wire_msg *msg, uint64_t now_ns, struct phub_control_join *out)
{
	struct phub_wire_join_seg seg;
	struct pending *p;
	int rc;

	if (phub_wire_join_parse(msg->payload, msg->payload_len, &seg) != PHUB_DROP_OK)
		return PHUB_CONTROL_JOIN_CONTRADICTS;	/* phub_wire_parse() checked it */
	if (seg.total_keys > joins->max_keys)
		return PHUB_CONTROL_JOIN_TOO_MANY_KEYS;
	p = pending_find(joins, src, seg.join.rank, seg.join.name);
	if (p == NULL) {
		p = pending_take(joins);
		if (pending_start(p, src, msg, &seg, now_ns) != 0)
			return PHUB_CONTROL_JOIN_NO_MEMORY;
	}
	rc = phub_wire_join_merge_add(&p->merge, msg, &seg);
	if (rc < 0) {
		pending_clear(p);
		return PHUB_CONTROL_JOIN_CONTRADICTS;
	}
	if (rc == 0)
		return PHUB_CONTROL_JOIN_MORE;
	out->join = &p->merge.join;
	out->keys = p->keys;
	out->n_keys = p->merge.total_keys;
	return PHUB_CONTROL_JOIN_COMPLETE;
}

void
phub_control_joins_done(struct phub_control_joins *joins, const struct phub_control_addr *src,
		const struct phub_control_join *join)
{
	struct pending *p = pending_find(joins, src, join->join->rank, join->join->name);

	if (p != NULL)
		pending_clear(p);
}

unsigned int
phub_control_joins_expire(struct phub_control_joins *joins, uint64_t now_ns, uint64_t timeout_ns,
		void (*timed_out)(void *ctx, const struct phub_control_addr *src,
			const struct phub_wire_msg *about), void *ctx)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < joins->cap; i++) {
		struct pending *p = &joins->entries[i];

		if (!p->used || now_ns - p->started_ns <= timeout_ns)
			continue;
		if (timed_out != NULL)
			timed_out(ctx, &p->src, &p->about);
		pending_clear(p);
		n++;
	}
	return n;
}

/* ---- what a job's ranks declare ---- */

void
phub_control_decl_from_join(struct phub_control_decl *decl, const struct phub_wire_join *join)
{
	memset(decl, 0, sizeof(*decl));
	decl->known = PHUB_CONTROL_DECL_ALL;
	decl->optimizer = join->optimizer;
	decl->hyper = join->hyper;
	decl->chunk_bytes = join->chunk_bytes;
}

void
phub_control_decl_complete(struct phub_control_decl *decl, const struct phub_wire_join *join)
{
	if (!(decl->known & PHUB_CONTROL_DECL_OPTIMIZER))
		decl->optimizer = join->optimizer;
	if (!(decl->known & PHUB_CONTROL_DECL_HYPER))
		decl->hyper = join->hyper;
	if (!(decl->known & PHUB_CONTROL_DECL_CHUNK))
		decl->chunk_bytes = join->chunk_bytes;
	decl->known = PHUB_CONTROL_DECL_ALL;
}

/* Bit for bit, as the wire carries them: the ranks' optimizers must compute the same. */
static bool
hyper_equal(const struct phub_wire_hyper *a, const struct phub_wire_hyper *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

const char *
phub_control_join_mismatch(const struct phub_engine_job *job,
		const struct phub_control_decl *decl, const struct phub_wire_join *join,
		const struct phub_wire_key *keys, uint32_t n_keys, bool deterministic)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);

	/* Workers say the whole job's world, over every rack of a ring. */
	if (join->world_size != phub_engine_job_total_world(job))
		return "world size";
	if (join->dtype != (uint8_t)phub_engine_job_dtype(job))
		return "dtype";
	if ((decl->known & PHUB_CONTROL_DECL_OPTIMIZER) && join->optimizer != decl->optimizer)
		return "optimizer";
	if ((decl->known & PHUB_CONTROL_DECL_HYPER) && !hyper_equal(&join->hyper, &decl->hyper))
		return "hyper-parameters";
	if ((decl->known & PHUB_CONTROL_DECL_CHUNK) && join->chunk_bytes != decl->chunk_bytes)
		return "chunk size";
	if (deterministic != phub_engine_job_deterministic(job))
		return "summing order (deterministic flag)";
	if (n_keys != phub_layout_key_count(layout))
		return "keys";
	for (uint32_t i = 0; i < n_keys; i++) {
		struct phub_layout_key_info info;

		if (phub_layout_key_get(layout, i, &info) != 0 || info.key_id != keys[i].key_id ||
		    info.n_elems != keys[i].elem_count)
			return "keys";
	}
	return NULL;
}

/* ---- a complete JOIN ---- */

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
	control_cjob_start(ctl, job);
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
		control_send_worlds(ctl, job);
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

void
control_join_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_msg *msg)
{
	struct phub_control_addr src = { .ipv4 = from->ipv4, .udp_port = from->udp_port };
	struct phub_control_join cj;

	source_note(ctl, from);
	switch (phub_control_joins_add(ctl->joins, &src, msg, control_now_ns(ctl), &cj)) {
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
control_join_expire(struct phub_control *ctl, uint64_t now)
{
	phub_control_joins_expire(ctl->joins, now, (uint64_t)ctl->p.join_ms * 1000000u,
			join_timed_out, ctl);
}
