/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane on the main lcore: JOIN (reassembled when split), job
 * creation within the configured limits, JOIN_ACK with the chunk map, LEAVE,
 * keep-alives, the end of a job whose worker fell silent or that no worker
 * JOINed after its restore, and the freeing of a job once no data lcore can
 * still hold it.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_ip.h>
#include <rte_malloc.h>
#include <rte_udp.h>

#include "pbox.h"

#define MAX_PENDING_JOINS 64
#define CONTROL_BURST 32
/* How often the jobs are checked for a silent worker. */
#define LIVENESS_PERIOD_MS 100

/*
 * Keys of one job's layout. A split JOIN's key array is allocated when its first datagram
 * comes, sized by the total that datagram claims: without a bound one unauthenticated
 * datagram made the PBox allocate and zero 8 bytes a claimed key (800 MB for 10^8) for
 * timeouts.join_ms. 65536 keys is 512 KB a pending JOIN; models have hundreds of tensors.
 */
#define MAX_JOB_KEYS 65536

/* A JOIN split over several datagrams, until its last one is in. */
struct pending_join {
	bool used;
	uint32_t src_ip;
	uint16_t src_udp;
	uint16_t port_index;
	uint16_t rank;
	uint64_t started_tsc;
	struct rte_ether_addr src_mac;
	struct phub_wire_join_merge merge;
	struct phub_wire_key *keys;
};

/* The requester of a control operation, for the answer. */
struct requester {
	uint16_t port_index;
	struct rte_ether_addr mac;
	uint32_t ip;
	uint16_t udp;
};

/*
 * A rank found silent and waited on; the job ends only when the next check
 * finds the same, so that one racy look at the slots never ends a job.
 */
struct suspect {
	uint32_t job_id;
	uint16_t rank;
	bool seen;
};

/* A job without any joined rank, by job slot: since the first check that found it so. */
struct orphan {
	uint32_t job_id;
	uint64_t since_tsc;
	bool seen;
};

static struct pending_join pending[MAX_PENDING_JOINS];
static uint64_t jobs_memory_bytes;
/* The port each rank's JOIN came in on, by job slot: where an ERROR to it goes. */
static uint16_t rank_port[PHUB_ENGINE_MAX_JOBS][PHUB_ENGINE_MAX_WORKERS];
static struct suspect suspects[PHUB_ENGINE_MAX_JOBS];
static struct orphan orphans[PHUB_ENGINE_MAX_JOBS];

/*
 * The sessions that left last, so that a LEAVE sent again is ACKed again: enough for every
 * rank of a job of 64 workers whose LEAVE_ACKs all got lost, and the sessions' tokens are
 * random, so an old entry never answers for a new session.
 */
#define RECENT_LEAVES 64
struct left_session {
	uint64_t token;
	uint32_t job_id;
	uint32_t ip;
	uint16_t udp;
	uint16_t rank;
	bool used;
};
static struct left_session recent_leaves[RECENT_LEAVES];
static unsigned int recent_leaves_next;
static uint64_t liveness_tsc;

static void *
numa_alloc(size_t size, size_t align, void *ctx)
{
	return rte_malloc_socket("phub_job", size, (unsigned int)align, (int)(intptr_t)ctx);
}

static void
numa_free(void *ptr, void *ctx)
{
	(void)ctx;
	rte_free(ptr);
}

/* Send one built datagram through a data lcore that has a queue on the port. */
static void
control_send(struct pbox *pb, const struct requester *to, const void *payload, uint16_t len)
{
	const struct phub_config_port *cp = &pb->cfg.ports[to->port_index];
	struct pbox_lcore *lc = &pb->lcores[pb->lcore_index[cp->lcores[0]]];
	struct rte_mbuf *m = rte_pktmbuf_alloc(lc->pool);
	uint8_t *p;

	if (m == NULL)
		return;
	p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(RTE_ETHER_HDR_LEN +
			sizeof(struct rte_ipv4_hdr) + sizeof(struct rte_udp_hdr) + len));
	if (p == NULL) {
		rte_pktmbuf_free(m);
		return;
	}
	pbox_build_udp(m, &pb->ports[to->port_index], &to->mac, to->ip, pb->cfg.udp_base_port,
			to->udp, len);
	memcpy(p + m->l2_len + m->l3_len + sizeof(struct rte_udp_hdr), payload, len);
	pbox_finish_udp_csum(m, (uint16_t)(sizeof(struct rte_udp_hdr) + len), 0);
	m->hash.usr = PBOX_INBOX_TX | ((uint32_t)to->port_index << 8);
	if (rte_ring_enqueue(lc->inbox, m) != 0)
		rte_pktmbuf_free(m);
}

static void
send_error(struct pbox *pb, const struct requester *to, const struct phub_wire_msg *about,
		enum phub_wire_error code, const char *fmt, ...)
{
	uint8_t buf[PHUB_WIRE_HDR_LEN + sizeof(struct phub_wire_error_body) +
		PHUB_WIRE_ERROR_MSG_MAX];
	char text[PHUB_WIRE_ERROR_MSG_MAX];
	va_list ap;
	int len;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	PBOX_LOG(NOTICE, "to %u.%u.%u.%u:%u: %s: %s", to->ip >> 24, (to->ip >> 16) & 0xff,
			(to->ip >> 8) & 0xff, to->ip & 0xff, to->udp, phub_wire_error_name(code), text);
	len = phub_wire_error_write(buf, sizeof(buf), about, (uint16_t)code, text);
	if (len > 0)
		control_send(pb, to, buf, (uint16_t)len);
}

/* Segment elements for a dtype: what every port's MTU carries, within segment_bytes. */
static uint32_t
segment_elems(const struct pbox *pb, enum phub_dtype dtype)
{
	uint32_t elems = pb->cfg.segment_bytes / (uint32_t)phub_dtype_size(dtype);

	for (unsigned int i = 0; i < pb->n_ports; i++) {
		int max = phub_wire_max_elems(pb->ports[i].mtu, (uint8_t)dtype);

		if (max > 0 && (uint32_t)max < elems)
			elems = (uint32_t)max;
	}
	return elems / PHUB_WIRE_ELEM_ALIGN * PHUB_WIRE_ELEM_ALIGN;
}

uint32_t
pbox_control_segment_elems(const struct pbox *pb, enum phub_dtype dtype)
{
	return segment_elems(pb, dtype);
}

/* What the next job may take: the per-job limit, within what the others leave of the total. */
uint64_t
pbox_control_job_memory_limit(const struct pbox *pb)
{
	uint64_t limit = (uint64_t)pb->cfg.limits.total_memory_mb << 20;

	limit = limit > jobs_memory_bytes ? limit - jobs_memory_bytes : 0;
	limit = RTE_MIN((uint64_t)pb->cfg.limits.job_memory_mb << 20, limit);
	/* 0 would mean "no limit" */
	return limit != 0 ? limit : 1;
}

void
pbox_control_job_charge(struct pbox *pb, const struct phub_engine_job *job)
{
	struct phub_engine_job_info info;

	(void)pb;
	phub_engine_job_get_info(job, &info);
	jobs_memory_bytes += info.memory_bytes;
}

static bool
layout_matches(const struct phub_engine_job *job, const struct phub_wire_join *join,
		const struct phub_wire_key *keys, uint32_t n_keys)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);

	if (join->world_size != phub_engine_job_world_size(job) ||
	    join->dtype != (uint8_t)phub_engine_job_dtype(job) ||
	    n_keys != phub_layout_key_count(layout))
		return false;
	for (uint32_t i = 0; i < n_keys; i++) {
		struct phub_layout_key_info info;

		if (phub_layout_key_get(layout, i, &info) != 0 || info.key_id != keys[i].key_id ||
		    info.n_elems != keys[i].elem_count)
			return false;
	}
	return true;
}

/*
 * Deterministic aggregation: the config's choice for the job (declared, or the
 * global default), or the worker's JOIN flag.
 */
static bool
join_wants_deterministic(const struct pbox *pb, const struct phub_wire_join *join)
{
	int idx = phub_config_job_find(&pb->cfg, join->name);
	bool cfg = idx >= 0 ? pb->cfg.jobs[idx].deterministic : pb->cfg.deterministic;

	return cfg || (join->join_flags & PHUB_WIRE_JOIN_F_DETERMINISTIC) != 0;
}

/* The job a complete JOIN names: found, or created within the limits. */
static struct phub_engine_job *
job_for_join(struct pbox *pb, const struct requester *to, const struct phub_wire_msg *msg,
		const struct phub_wire_join *join, const struct phub_wire_key *keys, uint32_t n_keys)
{
	struct phub_engine_allocator allocator = {
		.alloc = numa_alloc, .free = numa_free, .place = pbox_memory_place,
		.ctx = (void *)(intptr_t)pb->ports[to->port_index].socket,
	};
	struct phub_engine_job_params p;
	struct phub_layout_key *lkeys;
	struct phub_engine_job *job;
	const struct phub_config_job *declared = NULL;
	struct phub_engine_job_info info;
	unsigned int n_jobs = 0;
	int idx;

	job = phub_engine_job_find(pb->engine, join->name);
	if (job != NULL) {
		/*
		 * The nonce before anything else, and an answer that says nothing of the job: a
		 * layout check first told anyone without the nonce the job's world size, dtype
		 * and keys, one LAYOUT_MISMATCH at a time.
		 */
		if (!phub_engine_job_nonce_matches(job, join->nonce)) {
			send_error(pb, to, msg, PHUB_WIRE_ERR_BAD_NONCE, "job %s: wrong nonce",
					join->name);
			return NULL;
		}
		if (!layout_matches(job, join, keys, n_keys)) {
			send_error(pb, to, msg, PHUB_WIRE_ERR_LAYOUT_MISMATCH,
					"job %s: rank %u declares another world size, dtype or key "
					"layout than the job has", join->name, join->rank);
			return NULL;
		}
		if (join_wants_deterministic(pb, join) != phub_engine_job_deterministic(job)) {
			bool det = phub_engine_job_deterministic(job);

			send_error(pb, to, msg, PHUB_WIRE_ERR_LAYOUT_MISMATCH,
					"job %s sums %s; rank %u asks for %s aggregation",
					join->name, det ? "in rank order" : "in arrival order",
					join->rank, det ? "default" : "deterministic");
			return NULL;
		}
		return job;
	}

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
	p.deterministic = join_wants_deterministic(pb, join);

	/* A job declared in the config fixes the nonce, size, dtype and optimizer. */
	idx = phub_config_job_find(&pb->cfg, join->name);
	if (idx >= 0) {
		declared = &pb->cfg.jobs[idx];
		if (declared->nonce != join->nonce) {
			send_error(pb, to, msg, PHUB_WIRE_ERR_BAD_NONCE,
					"job %s: wrong nonce", join->name);
			return NULL;
		}
		if (declared->workers != join->world_size ||
		    (unsigned int)declared->dtype != join->dtype) {
			send_error(pb, to, msg, PHUB_WIRE_ERR_LAYOUT_MISMATCH,
					"job %s is configured for %u workers in %s; the JOIN says "
					"%u in %s", join->name, declared->workers,
					phub_config_dtype_name(declared->dtype), join->world_size,
					phub_wire_dtype_name(join->dtype));
			return NULL;
		}
		p.optimizer.type = (enum phub_opt_type)declared->optimizer.type;
		p.optimizer.lr = (float)declared->optimizer.lr;
		p.optimizer.momentum = (float)declared->optimizer.momentum;
		p.optimizer.weight_decay = (float)declared->optimizer.weight_decay;
		p.optimizer.beta1 = (float)declared->optimizer.beta1;
		p.optimizer.beta2 = (float)declared->optimizer.beta2;
		p.optimizer.eps = (float)declared->optimizer.eps;
	}
	for (job = phub_engine_job_next(pb->engine, NULL); job != NULL;
	     job = phub_engine_job_next(pb->engine, job))
		n_jobs++;
	if (n_jobs >= pb->cfg.limits.max_jobs) {
		send_error(pb, to, msg, PHUB_WIRE_ERR_JOB_LIMIT,
				"this PBox serves at most %u jobs (limits.max_jobs)",
				pb->cfg.limits.max_jobs);
		return NULL;
	}
	if (join->world_size > pb->cfg.limits.max_workers_per_job) {
		send_error(pb, to, msg, PHUB_WIRE_ERR_JOB_LIMIT,
				"job %s: %u workers, this PBox allows %u (limits.max_workers_per_job)",
				join->name, join->world_size, pb->cfg.limits.max_workers_per_job);
		return NULL;
	}

	lkeys = calloc(n_keys, sizeof(*lkeys));
	if (lkeys == NULL)
		return NULL;
	for (uint32_t i = 0; i < n_keys; i++) {
		lkeys[i].key_id = keys[i].key_id;
		lkeys[i].n_elems = keys[i].elem_count;
	}
	p.keys = lkeys;
	p.n_keys = n_keys;
	p.chunk_bytes = join->chunk_bytes != 0 ? join->chunk_bytes : pb->cfg.chunk_bytes;
	p.segment_elems = segment_elems(pb, p.dtype);
	p.servers = pb->servers;
	p.n_servers = pb->n_servers;
	p.allocator = &allocator;
	p.memory_limit_bytes = pbox_control_job_memory_limit(pb);
	/* The snapshot buffers of checkpoints count in the job's memory. */
	p.checkpoint_shadow = pbox_checkpoint_enabled(pb);

	job = phub_engine_job_create(pb->engine, &p);
	free(lkeys);
	if (job == NULL) {
		int err = errno;

		char why[PHUB_WIRE_ERROR_MSG_MAX];

		if (err == E2BIG || err == ENOMEM) {
			pbox_memory_explain(pb, &p, keys, n_keys, err,
					pb->ports[to->port_index].socket, why, sizeof(why));
			send_error(pb, to, msg, PHUB_WIRE_ERR_NO_MEMORY, "job %s %s", join->name,
					why);
		} else if (err == ENOSPC)
			send_error(pb, to, msg, PHUB_WIRE_ERR_JOB_LIMIT, "job table full");
		else
			send_error(pb, to, msg, PHUB_WIRE_ERR_BAD_REQUEST,
					"job %s: invalid parameters (%s)", join->name, strerror(err));
		return NULL;
	}
	phub_engine_job_get_info(job, &info);
	jobs_memory_bytes += info.memory_bytes;
	pbox_checkpoint_job_created(pb, job);
	PBOX_LOG(INFO, "job %s (id %u): %u workers, %u keys, %u chunks, %" PRIu64 " elements "
			"%s, optimizer %s, %s sums, %" PRIu64 " KB%s", info.name, info.job_id,
			info.world_size, info.n_keys, info.n_chunks, info.n_elems,
			phub_wire_dtype_name((uint8_t)info.dtype),
			phub_opt_type_name(p.optimizer.type),
			info.deterministic ? "rank-order" : "arrival-order",
			info.memory_bytes >> 10,
			declared != NULL ? " (declared in the config)" : "");
	return job;
}

static void
send_join_ack(struct pbox *pb, const struct requester *to, struct phub_engine_job *job,
		uint16_t rank, uint64_t token)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);
	struct phub_wire_endpoint endpoints[PHUB_CONFIG_MAX_QUEUES];
	struct phub_wire_join_ack_params p;
	struct phub_engine_job_info info;
	uint16_t *map;
	uint8_t *buf;
	int segs;

	phub_engine_job_get_info(job, &info);
	map = calloc(info.n_chunks, sizeof(*map));
	buf = malloc(PHUB_WIRE_MAX_DATAGRAM);
	if (map == NULL || buf == NULL)
		goto out;
	for (uint32_t s = 0; s < pb->n_servers; s++) {
		const struct pbox_lcore *lc = &pb->lcores[pb->server_lcore_index[s]];

		endpoints[s].ipv4 = pb->ports[pb->servers[s].port].ipv4;
		endpoints[s].udp_port = lc->udp_port;
	}
	for (uint32_t c = 0; c < info.n_chunks; c++) {
		uint32_t server = 0;

		phub_layout_chunk_server(layout, c, &server);
		map[c] = (uint16_t)server;
	}
	memset(&p, 0, sizeof(p));
	p.ack.job_id = info.job_id;
	/* The first iteration to push: one past what every segment finished. */
	p.ack.iteration = info.iteration_min + 1;
	p.ack.chunk_bytes = phub_layout_chunk_elems(layout) * PHUB_LAYOUT_MODEL_ELEM_SIZE;
	p.ack.seg_elems = phub_layout_segment_elems(layout);
	p.session_token = token;
	p.endpoints = endpoints;
	p.endpoint_count = (uint16_t)pb->n_servers;
	p.chunk_endpoints = map;
	p.total_chunks = info.n_chunks;
	p.rank = rank;
	segs = phub_wire_join_ack_segments(&p, pb->ports[to->port_index].mtu);
	for (int i = 0; i < segs; i++) {
		int len = phub_wire_join_ack_write(buf, PHUB_WIRE_MAX_DATAGRAM, &p,
				pb->ports[to->port_index].mtu, (uint16_t)i);

		if (len > 0)
			control_send(pb, to, buf, (uint16_t)len);
	}
out:
	free(map);
	free(buf);
}

static void
join_complete(struct pbox *pb, const struct requester *to, const struct phub_wire_msg *msg,
		const struct phub_wire_join *join, const struct phub_wire_key *keys, uint32_t n_keys)
{
	struct phub_engine_peer peer;
	struct phub_engine_job *job;
	uint64_t token;
	int rc;

	job = job_for_join(pb, to, msg, join, keys, n_keys);
	if (job == NULL)
		return;
	peer.ipv4 = to->ip;
	peer.udp_port = to->udp;
	memcpy(peer.mac, to->mac.addr_bytes, sizeof(peer.mac));
	rc = phub_engine_job_join(job, join->rank, join->nonce, &peer, &token);
	if (rc != 0) {
		send_error(pb, to, msg, (enum phub_wire_error)-rc, "job %s: rank %u refused: %s",
				join->name, join->rank, phub_wire_error_name((uint16_t)-rc));
		return;
	}
	rank_port[phub_engine_job_id(job) & 0xff][join->rank] = to->port_index;
	PBOX_LOG(INFO, "job %s: rank %u of %u joined from %u.%u.%u.%u:%u", join->name, join->rank,
			join->world_size, to->ip >> 24, (to->ip >> 16) & 0xff, (to->ip >> 8) & 0xff,
			to->ip & 0xff, to->udp);
	send_join_ack(pb, to, job, join->rank, token);
}

static struct pending_join *
pending_find(const struct requester *to, uint16_t rank)
{
	struct pending_join *free_slot = NULL;
	uint64_t oldest = UINT64_MAX;
	struct pending_join *victim = &pending[0];

	for (unsigned int i = 0; i < MAX_PENDING_JOINS; i++) {
		struct pending_join *pj = &pending[i];

		if (pj->used && pj->src_ip == to->ip && pj->src_udp == to->udp && pj->rank == rank)
			return pj;
		if (!pj->used && free_slot == NULL)
			free_slot = pj;
		if (pj->used && pj->started_tsc < oldest) {
			oldest = pj->started_tsc;
			victim = pj;
		}
	}
	if (free_slot != NULL)
		return free_slot;
	/* Full: the oldest half-made JOIN gives way; its worker will send it again. */
	free(victim->keys);
	victim->used = false;
	return victim;
}

static void
handle_join(struct pbox *pb, const struct requester *to, const struct phub_wire_msg *msg)
{
	struct phub_wire_join_seg seg;
	struct pending_join *pj;
	int rc;

	if (phub_wire_join_parse(msg->payload, msg->payload_len, &seg) != PHUB_DROP_OK)
		return;		/* phub_wire_parse already checked it: cannot happen */
	if (seg.total_keys > MAX_JOB_KEYS) {
		send_error(pb, to, msg, PHUB_WIRE_ERR_BAD_REQUEST,
				"job %s: a layout of %u keys; this PBox takes at most %u keys a job",
				seg.join.name, seg.total_keys, MAX_JOB_KEYS);
		return;
	}
	pj = pending_find(to, seg.join.rank);
	if (!pj->used) {
		memset(pj, 0, sizeof(*pj));
		pj->keys = calloc(seg.total_keys, sizeof(*pj->keys));
		if (pj->keys == NULL)
			return;
		pj->used = true;
		pj->src_ip = to->ip;
		pj->src_udp = to->udp;
		pj->rank = seg.join.rank;
		pj->started_tsc = rte_rdtsc();
		phub_wire_join_merge_init(&pj->merge, pj->keys, seg.total_keys);
	}
	rc = phub_wire_join_merge_add(&pj->merge, msg, &seg);
	if (rc < 0) {
		send_error(pb, to, msg, PHUB_WIRE_ERR_BAD_REQUEST,
				"JOIN datagrams of rank %u contradict each other; start again",
				seg.join.rank);
	} else if (rc == 1) {
		join_complete(pb, to, msg, &pj->merge.join, pj->keys, pj->merge.total_keys);
	} else {
		return;
	}
	free(pj->keys);
	pj->keys = NULL;
	pj->used = false;
}

static void
job_release(struct pbox *pb, struct phub_engine_job *job)
{
	struct phub_engine_job_info info;

	phub_engine_job_get_info(job, &info);
	pthread_mutex_lock(&pb->jobs_lock);
	phub_engine_job_unpublish(pb->engine, job);
	/* Every data lcore passes a quiescent point before the buffers go. */
	rte_rcu_qsbr_synchronize(pb->qsbr, RTE_QSBR_THRID_INVALID);
	/* Its checkpoints go with it: the workers have the final model. */
	pbox_checkpoint_job_end(pb, job);
	phub_engine_job_free(job);
	pthread_mutex_unlock(&pb->jobs_lock);
	jobs_memory_bytes -= RTE_MIN(jobs_memory_bytes, info.memory_bytes);
	PBOX_LOG(INFO, "job %s (id %u) ended after iteration %u; %" PRIu64 " KB freed", info.name,
			info.job_id, info.iteration_min, info.memory_bytes >> 10);
}

/*
 * Whether the session a LEAVE or PING names is one this PBox holds, checked as the data path
 * checks a PUSH (request_check() in lib/engine), with the same drop reasons: the job, the
 * rank, its session, the token, then the address that joined with it.
 */
static enum phub_drop_reason
session_check(const struct phub_engine_job *job, const struct requester *to,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_peer peer;
	uint64_t token;

	if (job == NULL)
		return PHUB_DROP_UNKNOWN_JOB;
	if (msg->worker_rank >= phub_engine_job_world_size(job))
		return PHUB_DROP_RANK_RANGE;
	if (!phub_engine_job_rank(job, msg->worker_rank, &peer, &token))
		return PHUB_DROP_NOT_JOINED;
	if (token != msg->session_token)
		return PHUB_DROP_BAD_TOKEN;
	if (peer.ipv4 != to->ip || peer.udp_port != to->udp)
		return PHUB_DROP_WRONG_SOURCE;
	return PHUB_DROP_OK;
}

static void
send_leave_ack(struct pbox *pb, const struct requester *to, const struct phub_wire_msg *msg)
{
	uint8_t buf[PHUB_WIRE_HDR_LEN];
	struct phub_wire_msg ack;
	int len;

	phub_wire_msg_init(&ack, PHUB_WIRE_OP_LEAVE_ACK);
	ack.job_id = msg->job_id;
	ack.session_token = msg->session_token;
	ack.worker_rank = msg->worker_rank;
	ack.iteration = msg->iteration;
	len = phub_wire_encode(buf, sizeof(buf), &ack);
	if (len > 0)
		control_send(pb, to, buf, (uint16_t)len);
}

/* Whether msg is a LEAVE sent again for a session that left lately, from the same address. */
static bool
leave_is_repeat(const struct requester *to, const struct phub_wire_msg *msg)
{
	for (unsigned int i = 0; i < RECENT_LEAVES; i++) {
		const struct left_session *ls = &recent_leaves[i];

		if (ls->used && ls->token == msg->session_token && ls->job_id == msg->job_id &&
		    ls->rank == msg->worker_rank && ls->ip == to->ip && ls->udp == to->udp)
			return true;
	}
	return false;
}

static void
leave_remember(const struct requester *to, const struct phub_wire_msg *msg)
{
	recent_leaves[recent_leaves_next] = (struct left_session){
		.token = msg->session_token, .job_id = msg->job_id, .ip = to->ip,
		.udp = to->udp, .rank = msg->worker_rank, .used = true };
	recent_leaves_next = (recent_leaves_next + 1) % RECENT_LEAVES;
}

static void
handle_leave(struct pbox *pb, const struct requester *to, const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(pb->engine, msg->job_id);
	enum phub_drop_reason why = session_check(job, to, msg);
	int left;

	/*
	 * Only the address that joined may end its session. A LEAVE refused is counted like a
	 * PUSH refused, so that LEAVEs of guessed sessions show in /phub/stats. A worker's LEAVE
	 * sent again because its LEAVE_ACK was lost or late is no drop: it is ACKed again, as
	 * TCP's TIME_WAIT answers a FIN sent again.
	 */
	if (why != PHUB_DROP_OK) {
		if (leave_is_repeat(to, msg))
			send_leave_ack(pb, to, msg);
		else
			pb->control_drops[why]++;
		return;
	}
	left = phub_engine_job_leave(job, msg->worker_rank, msg->session_token);
	if (left < 0) {
		pb->control_drops[PHUB_DROP_BAD_TOKEN]++;	/* checked above: cannot happen */
		return;
	}
	send_leave_ack(pb, to, msg);
	leave_remember(to, msg);
	PBOX_LOG(INFO, "job id %u: rank %u left, %d still joined", msg->job_id, msg->worker_rank,
			left);
	if (left == 0)
		job_release(pb, job);
}

/*
 * A PING that names a session this PBox does not hold is answered with the ERROR that makes
 * the worker JOIN again: unknown_job when the job or the rank's session is gone (the PBox
 * restarted, the job ended), bad_session when the rank has another session now.
 */
static bool
ping_session_known(struct pbox *pb, const struct requester *to, const struct phub_wire_msg *msg)
{
	if (msg->session_token == 0)
		return true;
	switch (session_check(phub_engine_job_lookup(pb->engine, msg->job_id), to, msg)) {
	case PHUB_DROP_OK:
		return true;
	case PHUB_DROP_BAD_TOKEN:
	case PHUB_DROP_WRONG_SOURCE:
		send_error(pb, to, msg, PHUB_WIRE_ERR_BAD_SESSION, "rank %u of job id %u has "
				"another session now", msg->worker_rank, msg->job_id);
		return false;
	default:
		send_error(pb, to, msg, PHUB_WIRE_ERR_UNKNOWN_JOB, "no session of rank %u in job "
				"id %u here (the PBox restarted, or the job ended): JOIN again",
				msg->worker_rank, msg->job_id);
		return false;
	}
}

static void
handle_ping(struct pbox *pb, const struct requester *to, const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(pb->engine, msg->job_id);
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	struct phub_wire_msg pong = *msg;
	int len;

	if (!ping_session_known(pb, to, msg))
		return;
	/* A worker's keep-alive: alive, even while it computes and pushes nothing. */
	if (job != NULL)
		phub_engine_job_heard(job, msg->worker_rank, msg->session_token, to->ip, to->udp);

	pong.opcode = PHUB_WIRE_OP_PONG;
	pong.flags &= (uint8_t)~(PHUB_WIRE_F_CSUM | PHUB_WIRE_F_RETRANSMIT);
	len = phub_wire_encode(buf, sizeof(buf), &pong);
	if (len > 0)
		control_send(pb, to, buf, (uint16_t)len);
}

static void
handle_control(struct pbox *pb, struct rte_mbuf *m)
{
	struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)((uint8_t *)ip +
			(ip->version_ihl & RTE_IPV4_HDR_IHL_MASK) * 4);
	struct requester to;
	struct phub_wire_msg msg;
	enum phub_drop_reason why;

	/* The data lcore checked the frame up to the UDP header. */
	to.port_index = (uint16_t)(m->hash.usr >> 8);
	rte_ether_addr_copy(&eth->src_addr, &to.mac);
	to.ip = rte_be_to_cpu_32(ip->src_addr);
	to.udp = rte_be_to_cpu_16(udp->src_port);
	why = phub_wire_parse(udp + 1, rte_be_to_cpu_16(udp->dgram_len) - sizeof(*udp), &msg);
	if (why != PHUB_DROP_OK) {
		pb->control_drops[why]++;
		return;
	}
	pb->control_msgs++;
	switch (msg.opcode) {
	case PHUB_WIRE_OP_JOIN:
		handle_join(pb, &to, &msg);
		break;
	case PHUB_WIRE_OP_LEAVE:
		handle_leave(pb, &to, &msg);
		break;
	case PHUB_WIRE_OP_PING:
		handle_ping(pb, &to, &msg);
		break;
	default:
		pb->control_drops[PHUB_DROP_UNEXPECTED_OPCODE]++;
		break;
	}
}

/* Half-made JOINs older than timeouts.join_ms are dropped; their workers retry. */
static void
expire_pending(struct pbox *pb)
{
	uint64_t limit = rte_get_tsc_hz() / 1000 * pb->cfg.timeouts.join_ms;
	uint64_t now = rte_rdtsc();

	for (unsigned int i = 0; i < MAX_PENDING_JOINS; i++) {
		if (pending[i].used && now - pending[i].started_tsc > limit) {
			free(pending[i].keys);
			pending[i].keys = NULL;
			pending[i].used = false;
		}
	}
}

/*
 * End a job whose rank has been silent for worker_dead_ms while others wait
 * on it: every joined rank learns why (ERROR WORKER_TIMEOUT), then the job is
 * freed as after the last LEAVE.
 */
static void
job_timeout(struct pbox *pb, struct phub_engine_job *job, uint16_t dead, uint64_t silent_ms,
		uint32_t iteration)
{
	uint32_t slot = phub_engine_job_id(job) & 0xff;
	struct phub_engine_job_info info;
	struct phub_engine_rank_status st;
	const char *why = "";

	phub_engine_job_get_info(job, &info);
	/* A rank that is not joined never came, or left before the others were done. */
	if (phub_engine_job_rank_status(job, dead, &st) == 0 && !st.joined)
		why = " (not joined)";
	PBOX_LOG(ERR, "job %s (id %u): rank %u silent for %" PRIu64 " ms%s while iteration %u "
			"waits on it (timeouts.worker_dead_ms %u): the job ends", info.name,
			info.job_id, dead, silent_ms, why, iteration,
			pb->cfg.timeouts.worker_dead_ms);
	for (uint16_t r = 0; r < info.world_size; r++) {
		struct phub_engine_peer peer;
		struct phub_wire_msg about;
		struct requester to;
		uint64_t token;

		if (!phub_engine_job_rank(job, r, &peer, &token))
			continue;
		to.port_index = rank_port[slot][r];
		memcpy(to.mac.addr_bytes, peer.mac, sizeof(peer.mac));
		to.ip = peer.ipv4;
		to.udp = peer.udp_port;
		phub_wire_msg_init(&about, PHUB_WIRE_OP_ERROR);
		about.job_id = info.job_id;
		about.session_token = token;
		about.worker_rank = r;
		about.iteration = iteration;
		send_error(pb, &to, &about, PHUB_WIRE_ERR_WORKER_TIMEOUT,
				"rank %u silent for %" PRIu64 " ms%s", dead, silent_ms, why);
	}
	job_release(pb, job);
}

/*
 * The silent rank of a job that others wait on, if any: the one silent the
 * longest among the waited-on ranks, silent for more than dead_ns.
 */
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

/* Whether some rank of the job has joined: a cheap look at the sessions, no slot read. */
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
 * Free a job that has gone worker_dead_ms without any joined rank; true when it did. Only a
 * job restored from a checkpoint is ever in that state: a job made by a JOIN has the rank that
 * sent it from the start, the last LEAVE frees it, and so does a timeout. Without this a
 * restored job whose workers never come back would keep its memory, its slot in the job table
 * and its checkpoint files for good, since no rank has a session that could time out. The clock
 * starts at the first check after the PBox is ready, not at the restore, so that restoring
 * other big jobs first does not eat into the workers' time.
 */
static bool
orphan_expired(struct pbox *pb, struct phub_engine_job *job, uint64_t now)
{
	struct orphan *o = &orphans[phub_engine_job_id(job) & 0xff];
	uint64_t limit = rte_get_tsc_hz() / 1000 * pb->cfg.timeouts.worker_dead_ms;
	struct phub_engine_job_info info;

	if (job_has_session(job)) {
		o->seen = false;
		return false;
	}
	if (!o->seen || o->job_id != phub_engine_job_id(job)) {
		*o = (struct orphan){ .job_id = phub_engine_job_id(job), .since_tsc = now,
			.seen = true };
		return false;
	}
	if (now - o->since_tsc <= limit)
		return false;
	o->seen = false;
	phub_engine_job_get_info(job, &info);
	PBOX_LOG(ERR, "job %s (id %u): restored from checkpoint, no worker joined within "
			"worker_dead_ms %u ms: freed (a worker that JOINs later starts a new job)",
			info.name, info.job_id, pb->cfg.timeouts.worker_dead_ms);
	job_release(pb, job);
	return true;
}

/*
 * Free a job all of whose joined ranks have been silent for more than dead_ns; true when it
 * did. Nobody waits on anybody in such a job when every worker died at an iteration boundary
 * or before its first PUSH (a training run killed as a whole), so job_find_dead() never names
 * one, and the job would keep its memory and its slot until the PBox restarts. A live libphub
 * worker is never that silent: its progress thread PINGs every second.
 */
static bool
job_abandoned(struct pbox *pb, struct phub_engine_job *job, uint64_t dead_ns)
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
		least_silent_ns = RTE_MIN(least_silent_ns, st.silent_ns);
	}
	if (least_silent_ns == UINT64_MAX)
		return false;	/* no joined rank: orphan_expired() decides */
	phub_engine_job_get_info(job, &info);
	PBOX_LOG(ERR, "job %s (id %u): every joined rank silent for %" PRIu64 " ms or more "
			"(timeouts.worker_dead_ms %u) after iteration %u: the job ends",
			info.name, info.job_id, least_silent_ns / 1000000u,
			pb->cfg.timeouts.worker_dead_ms, info.iteration_min);
	job_release(pb, job);
	return true;
}

/*
 * Every LIVENESS_PERIOD_MS: end the jobs that wait on a worker that is gone and those whose
 * workers are all gone, and free the restored jobs whose workers never came back.
 */
static void
check_liveness(struct pbox *pb)
{
	uint64_t now = rte_rdtsc();
	uint64_t dead_ns = (uint64_t)pb->cfg.timeouts.worker_dead_ms * 1000000u;
	struct phub_engine_job *job, *next;

	if (now - liveness_tsc < rte_get_tsc_hz() / 1000 * LIVENESS_PERIOD_MS)
		return;
	liveness_tsc = now;
	for (job = phub_engine_job_next(pb->engine, NULL); job != NULL; job = next) {
		struct suspect *sus = &suspects[phub_engine_job_id(job) & 0xff];
		uint64_t silent_ns;
		uint32_t iteration;
		uint16_t dead;

		next = phub_engine_job_next(pb->engine, job);
		if (orphan_expired(pb, job, now) || job_abandoned(pb, job, dead_ns))
			continue;
		if (!job_find_dead(job, dead_ns, &dead, &silent_ns, &iteration)) {
			sus->seen = false;
			continue;
		}
		if (!sus->seen || sus->job_id != phub_engine_job_id(job) || sus->rank != dead) {
			*sus = (struct suspect){ .job_id = phub_engine_job_id(job), .rank = dead,
				.seen = true };
			continue;
		}
		sus->seen = false;
		job_timeout(pb, job, dead, silent_ns / 1000000u, iteration);
	}
}

int
pbox_control_init(struct pbox *pb)
{
	(void)pb;
	memset(pending, 0, sizeof(pending));
	memset(suspects, 0, sizeof(suspects));
	memset(orphans, 0, sizeof(orphans));
	memset(recent_leaves, 0, sizeof(recent_leaves));
	recent_leaves_next = 0;
	jobs_memory_bytes = 0;
	liveness_tsc = rte_rdtsc();
	return 0;
}

void
pbox_control_poll(struct pbox *pb)
{
	struct rte_mbuf *pkts[CONTROL_BURST];
	unsigned int n;

	n = rte_ring_dequeue_burst(pb->control_ring, (void **)pkts, CONTROL_BURST, NULL);
	for (unsigned int i = 0; i < n; i++) {
		handle_control(pb, pkts[i]);
		rte_pktmbuf_free(pkts[i]);
	}
	expire_pending(pb);
	check_liveness(pb);
	if (n == 0)
		rte_delay_us_sleep(200);
}

void
pbox_control_fini(struct pbox *pb)
{
	struct rte_mbuf *m;

	while (rte_ring_dequeue(pb->control_ring, (void **)&m) == 0)
		rte_pktmbuf_free(m);
	for (unsigned int i = 0; i < MAX_PENDING_JOINS; i++)
		free(pending[i].keys);
}
