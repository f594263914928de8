/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The soft PBox: JOIN/LEAVE/PING on a control socket and PUSH/PULL on one socket per "lcore",
 * all in one thread, with lib/engine doing the protocol and optional seeded loss injection.
 */

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/phub_engine.h"

#include "soft_pbox.h"

enum {
	BATCH = 32,
	RX_BATCHES = 8,			/* per socket and wake-up, so that no port starves */
	PENDING_JOINS = 32,		/* JOINs being reassembled at once */
	SOCKET_BUFFER = 8 << 20,
	LOG_CAP_DEFAULT = 65536,
	MAX_DGRAM = 65536,
};

/* What the soft PBox keeps beside the engine's job: the declaration later ranks must repeat. */
struct sjob {
	struct phub_engine_job *job;	/* NULL: free */
	struct phub_wire_join decl;
	struct phub_wire_key *keys;
	uint32_t n_keys;
	uint32_t chunk_bytes;
	uint32_t seg_elems;
	uint32_t n_chunks;
	uint16_t *chunk_lcore;		/* chunk -> data socket index - 1 */
	uint64_t csum_ranks[PHUB_ENGINE_BITMAP_WORDS];
	bool restored;			/* from a checkpoint, until a rank JOINs it again */
};

/* A JOIN split over several datagrams, until its last piece comes. */
struct pending_join {
	bool used;
	uint32_t ip;			/* source, network order */
	uint16_t port;
	uint16_t rank;
	char name[PHUB_WIRE_JOB_NAME_LEN];
	uint64_t last_ns;
	struct phub_wire_key *keys;
	struct phub_wire_join_merge merge;
};

struct soft_pbox {
	struct soft_pbox_params p;
	struct in_addr bind_ip;
	int fds[1 + SOFT_PBOX_MAX_LCORES];	/* 0: control, 1 + k: lcore k */
	uint16_t ports[1 + SOFT_PBOX_MAX_LCORES];
	unsigned int n_fds;
	int wake_fd;
	pthread_t thread;
	bool thread_started;
	struct phub_engine *engine;
	struct sjob jobs[PHUB_ENGINE_MAX_JOBS];
	struct pending_join pend[PENDING_JOINS];
	uint64_t rng;
	size_t max_dgram;

	/* Receive batch. */
	struct mmsghdr rmsg[BATCH];
	struct iovec riov[BATCH];
	struct sockaddr_in rsrc[BATCH];
	uint8_t *rbuf;

	/* Data-path send batch: our header, the payload by reference into the engine. */
	struct mmsghdr tmsg[BATCH];
	struct iovec tiov[BATCH][2];
	struct sockaddr_in tdst[BATCH];
	uint8_t thdr[BATCH][PHUB_WIRE_HDR_LEN];
	unsigned int tn;
	int tfd;
	uint8_t *cbuf;			/* one control datagram */

	struct phub_engine_stats estats;
	struct soft_pbox_stats stats;

	/* Shared with the API, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	bool paused;
	bool paused_seen;
	struct soft_pbox_stats pub;
	struct soft_pbox_arrival *log;
	size_t log_n;
	size_t log_cap;
};

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: a fixed seed gives the same losses run after run. */
static bool
lose(struct soft_pbox *sp)
{
	uint64_t x = sp->rng;

	if (sp->p.loss <= 0.0)
		return false;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	sp->rng = x;
	return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0) <
		sp->p.loss;
}

/* ---- sending ---- */

static void stats_publish(struct soft_pbox *sp);
static int restore_dir(struct soft_pbox *sp);

/*
 * Counters are published before every send: a test that has seen an answer sees the counts
 * of everything that led to it.
 */
static void
stats_publish_locked(struct soft_pbox *sp)
{
	pthread_mutex_lock(&sp->lock);
	stats_publish(sp);
	pthread_mutex_unlock(&sp->lock);
}

static void
ctrl_send(struct soft_pbox *sp, int fd, const struct sockaddr_in *dst, const void *buf,
		size_t len)
{
	if (lose(sp)) {
		sp->stats.tx_lost++;
		return;
	}
	stats_publish_locked(sp);
	if (sendto(fd, buf, len, 0, (const struct sockaddr *)dst, sizeof(*dst)) >= 0)
		sp->stats.tx_datagrams++;
}

static void
data_flush(struct soft_pbox *sp)
{
	unsigned int done = 0;

	if (sp->tn != 0)
		stats_publish_locked(sp);
	while (done < sp->tn) {
		int n = sendmmsg(sp->tfd, sp->tmsg + done, sp->tn - done, 0);

		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			done++;
			continue;
		}
		sp->stats.tx_datagrams += (unsigned int)n;
		done += (unsigned int)n;
	}
	sp->tn = 0;
}

static void
data_send(struct soft_pbox *sp, int fd, const struct sockaddr_in *dst, struct phub_wire_msg *msg,
		const void *payload, uint32_t payload_crc)
{
	unsigned int i;

	if (lose(sp)) {
		sp->stats.tx_lost++;
		return;
	}
	if (sp->tn != 0 && sp->tfd != fd)
		data_flush(sp);
	sp->tfd = fd;
	i = sp->tn;
	if (phub_wire_hdr_encode(sp->thdr[i], PHUB_WIRE_HDR_LEN, msg, payload_crc) < 0)
		return;
	sp->tdst[i] = *dst;
	sp->tiov[i][0].iov_base = sp->thdr[i];
	sp->tiov[i][0].iov_len = PHUB_WIRE_HDR_LEN;
	sp->tiov[i][1].iov_base = (void *)(uintptr_t)payload;
	sp->tiov[i][1].iov_len = msg->payload_len;
	memset(&sp->tmsg[i], 0, sizeof(sp->tmsg[i]));
	sp->tmsg[i].msg_hdr.msg_name = &sp->tdst[i];
	sp->tmsg[i].msg_hdr.msg_namelen = sizeof(sp->tdst[i]);
	sp->tmsg[i].msg_hdr.msg_iov = sp->tiov[i];
	sp->tmsg[i].msg_hdr.msg_iovlen = msg->payload_len != 0 ? 2 : 1;
	if (++sp->tn == BATCH)
		data_flush(sp);
}

static void
send_error(struct soft_pbox *sp, int fd, const struct sockaddr_in *dst,
		const struct phub_wire_msg *about, uint16_t code, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

static void
send_error(struct soft_pbox *sp, int fd, const struct sockaddr_in *dst,
		const struct phub_wire_msg *about, uint16_t code, const char *fmt, ...)
{
	char text[PHUB_WIRE_ERROR_MSG_MAX + 1];
	va_list ap;
	int len;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	len = phub_wire_error_write(sp->cbuf, sp->max_dgram, about, code, text);
	if (len > 0) {
		ctrl_send(sp, fd, dst, sp->cbuf, (size_t)len);
		sp->stats.errors_sent++;
	}
}

/* ---- JOIN ---- */

static struct pending_join *
pending_find(struct soft_pbox *sp, const struct sockaddr_in *src,
		const struct phub_wire_join_seg *seg)
{
	struct pending_join *oldest = &sp->pend[0];

	for (unsigned int i = 0; i < PENDING_JOINS; i++) {
		struct pending_join *pj = &sp->pend[i];

		if (pj->used && pj->ip == src->sin_addr.s_addr && pj->port == src->sin_port &&
		    pj->rank == seg->join.rank && strcmp(pj->name, seg->join.name) == 0)
			return pj;
	}
	/* A new JOIN takes a free entry, else the stalest: its sender will retransmit. */
	for (unsigned int i = 0; i < PENDING_JOINS; i++) {
		struct pending_join *pj = &sp->pend[i];

		if (!pj->used) {
			oldest = pj;
			break;
		}
		if (pj->last_ns < oldest->last_ns)
			oldest = pj;
	}
	free(oldest->keys);
	memset(oldest, 0, sizeof(*oldest));
	oldest->keys = calloc(seg->total_keys, sizeof(*oldest->keys));
	if (oldest->keys == NULL)
		return NULL;
	oldest->used = true;
	oldest->ip = src->sin_addr.s_addr;
	oldest->port = src->sin_port;
	oldest->rank = seg->join.rank;
	snprintf(oldest->name, sizeof(oldest->name), "%s", seg->join.name);
	phub_wire_join_merge_init(&oldest->merge, oldest->keys, seg->total_keys);
	return oldest;
}

static void
pending_free(struct pending_join *pj)
{
	free(pj->keys);
	memset(pj, 0, sizeof(*pj));
}

static void
sjob_free(struct soft_pbox *sp, struct sjob *sj)
{
	if (sj->job != NULL) {
		phub_engine_job_unpublish(sp->engine, sj->job);
		phub_engine_job_free(sj->job);
	}
	free(sj->keys);
	free(sj->chunk_lcore);
	memset(sj, 0, sizeof(*sj));
}

static struct sjob *
sjob_of(struct soft_pbox *sp, const struct phub_engine_job *job)
{
	return &sp->jobs[phub_engine_job_id(job) & 0xff];
}

/* The first JOIN of a job name creates the job from what it declares. */
static struct sjob *
job_create(struct soft_pbox *sp, const struct phub_wire_join *j,
		const struct phub_wire_key *keys, uint32_t n_keys, int *err)
{
	struct phub_layout_server servers[SOFT_PBOX_MAX_LCORES];
	struct phub_engine_job_params jp;
	struct phub_layout_key *lkeys;
	const struct phub_layout *layout;
	struct phub_engine_job *job;
	struct sjob *sj;
	int seg_elems = phub_wire_max_elems(sp->p.mtu, j->dtype);

	lkeys = calloc(n_keys, sizeof(*lkeys));
	if (lkeys == NULL || seg_elems <= 0) {
		free(lkeys);
		*err = lkeys == NULL ? ENOMEM : EINVAL;
		return NULL;
	}
	for (uint32_t k = 0; k < n_keys; k++) {
		lkeys[k].key_id = keys[k].key_id;
		lkeys[k].n_elems = keys[k].elem_count;
	}
	for (unsigned int k = 0; k < sp->p.n_lcores; k++)
		servers[k] = (struct phub_layout_server){
			.lcore = k, .port = 0, .port_numa = PHUB_LAYOUT_NUMA_ANY, .lcore_numa = 0,
		};
	memset(&jp, 0, sizeof(jp));
	jp.name = j->name;
	jp.nonce = j->nonce;
	jp.world_size = j->world_size;
	jp.dtype = (enum phub_dtype)j->dtype;
	jp.deterministic = (j->join_flags & PHUB_WIRE_JOIN_F_DETERMINISTIC) != 0;
	jp.optimizer.type = (enum phub_opt_type)j->optimizer;
	jp.optimizer.lr = j->hyper.lr;
	jp.optimizer.momentum = j->hyper.momentum;
	jp.optimizer.weight_decay = j->hyper.weight_decay;
	jp.optimizer.beta1 = j->hyper.beta1;
	jp.optimizer.beta2 = j->hyper.beta2;
	jp.optimizer.eps = j->hyper.eps;
	jp.keys = lkeys;
	jp.n_keys = n_keys;
	jp.chunk_bytes = j->chunk_bytes != 0 ? j->chunk_bytes : sp->p.chunk_bytes;
	jp.segment_elems = (uint32_t)seg_elems;
	jp.servers = servers;
	jp.n_servers = sp->p.n_lcores;
	job = phub_engine_job_create(sp->engine, &jp);
	free(lkeys);
	if (job == NULL) {
		*err = errno;
		return NULL;
	}
	sj = sjob_of(sp, job);
	memset(sj, 0, sizeof(*sj));
	sj->job = job;
	sj->decl = *j;
	sj->n_keys = n_keys;
	sj->chunk_bytes = jp.chunk_bytes;
	sj->seg_elems = jp.segment_elems;
	layout = phub_engine_job_layout(job);
	sj->n_chunks = phub_layout_chunk_count(layout);
	sj->keys = malloc(n_keys * sizeof(*keys));
	sj->chunk_lcore = calloc(sj->n_chunks, sizeof(*sj->chunk_lcore));
	if (sj->keys == NULL || sj->chunk_lcore == NULL) {
		sjob_free(sp, sj);
		*err = ENOMEM;
		return NULL;
	}
	memcpy(sj->keys, keys, n_keys * sizeof(*keys));
	for (uint32_t c = 0; c < sj->n_chunks; c++) {
		uint32_t server = 0;

		phub_layout_chunk_server(layout, c, &server);
		sj->chunk_lcore[c] = (uint16_t)server;
	}
	return sj;
}

/* What a later rank declares differently from the job's first rank, or NULL. */
static const char *
job_mismatch(const struct sjob *sj, const struct phub_wire_join *j,
		const struct phub_wire_key *keys, uint32_t n_keys)
{
	const struct phub_wire_join *d = &sj->decl;

	/* A restored job knows what its checkpoint says, not how its ranks asked for it. */
	if (sj->restored) {
		if (j->world_size != d->world_size)
			return "world size";
		if (j->dtype != d->dtype)
			return "dtype";
		if (j->optimizer != d->optimizer)
			return "optimizer";
		if (n_keys != sj->n_keys || memcmp(keys, sj->keys, n_keys * sizeof(*keys)) != 0)
			return "keys";
		return NULL;
	}

	if (j->world_size != d->world_size)
		return "world size";
	if (j->dtype != d->dtype)
		return "dtype";
	if (j->optimizer != d->optimizer ||
	    memcmp(&j->hyper, &d->hyper, sizeof(j->hyper)) != 0)
		return "optimizer";
	if (j->chunk_bytes != d->chunk_bytes)
		return "chunk size";
	if ((j->join_flags & ~PHUB_WIRE_JOIN_F_CSUM) != (d->join_flags & ~PHUB_WIRE_JOIN_F_CSUM))
		return "join flags";
	if (n_keys != sj->n_keys || memcmp(keys, sj->keys, n_keys * sizeof(*keys)) != 0)
		return "keys";
	return NULL;
}

static void
join_ack_send(struct soft_pbox *sp, const struct sockaddr_in *src, const struct sjob *sj,
		uint16_t rank, uint64_t token, bool csum, bool replay)
{
	struct phub_wire_endpoint eps[SOFT_PBOX_MAX_LCORES];
	struct phub_wire_join_ack_params ap;
	struct phub_engine_job_info info;
	int n;

	phub_engine_job_get_info(sj->job, &info);
	for (unsigned int k = 0; k < sp->p.n_lcores; k++)
		eps[k] = (struct phub_wire_endpoint){ .ipv4 = 0, .udp_port = sp->ports[1 + k] };
	memset(&ap, 0, sizeof(ap));
	ap.ack.job_id = phub_engine_job_id(sj->job);
	/* The first iteration to push: one past what every segment finished (0: a new job). */
	ap.ack.iteration = info.iteration_min + 1;
	ap.ack.chunk_bytes = sj->chunk_bytes;
	ap.ack.seg_elems = sj->seg_elems;
	ap.session_token = token;
	ap.endpoints = eps;
	ap.chunk_endpoints = sj->chunk_lcore;
	ap.total_chunks = sj->n_chunks;
	ap.endpoint_count = sp->p.n_lcores;
	ap.rank = rank;
	ap.flags = (csum ? PHUB_WIRE_F_CSUM : 0) | (replay ? PHUB_WIRE_F_REPLAY : 0);
	n = phub_wire_join_ack_segments(&ap, sp->p.mtu);
	for (int i = 0; i < n; i++) {
		int len = phub_wire_join_ack_write(sp->cbuf, sp->max_dgram, &ap, sp->p.mtu,
				(uint16_t)i);

		if (len > 0)
			ctrl_send(sp, sp->fds[0], src, sp->cbuf, (size_t)len);
	}
	sp->stats.joins++;
}

static void
join_complete(struct soft_pbox *sp, const struct sockaddr_in *src,
		const struct phub_wire_msg *msg, struct pending_join *pj)
{
	const struct phub_wire_join *j = &pj->merge.join;
	struct phub_engine_job *job = phub_engine_job_find(sp->engine, j->name);
	struct phub_engine_peer peer = {
		.ipv4 = ntohl(src->sin_addr.s_addr),
		.udp_port = ntohs(src->sin_port),
	};
	struct phub_engine_peer old;
	bool created = false;
	bool replay;
	struct sjob *sj;
	const char *what;
	uint64_t token;
	int rc;

	if (job == NULL) {
		int err = 0;

		sj = job_create(sp, j, pj->keys, pj->merge.total_keys, &err);
		if (sj == NULL) {
			uint16_t code = err == ENOSPC ? PHUB_WIRE_ERR_JOB_LIMIT :
				err == ENOMEM || err == E2BIG ? PHUB_WIRE_ERR_NO_MEMORY :
				PHUB_WIRE_ERR_BAD_REQUEST;

			send_error(sp, sp->fds[0], src, msg, code, "job '%s' cannot be created: %s",
					j->name, strerror(err));
			return;
		}
		job = sj->job;
		created = true;
	} else {
		sj = sjob_of(sp, job);
		what = job_mismatch(sj, j, pj->keys, pj->merge.total_keys);
		if (what != NULL) {
			send_error(sp, sp->fds[0], src, msg, PHUB_WIRE_ERR_LAYOUT_MISMATCH,
					"job '%s': rank %u declares another %s than the job's first"
					" rank", j->name, j->rank, what);
			return;
		}
		/* The first rank back fixes the declaration the others must repeat. */
		if (sj->restored) {
			sj->decl = *j;
			sj->restored = false;
		}
	}
	/* The same rank from the same source again: its JOIN_ACK was lost, this is a replay. */
	replay = !created && phub_engine_job_rank(job, j->rank, &old, &token) &&
		old.ipv4 == peer.ipv4 && old.udp_port == peer.udp_port;
	rc = phub_engine_job_join(job, j->rank, j->nonce, &peer, &token);
	if (rc < 0) {
		send_error(sp, sp->fds[0], src, msg, (uint16_t)-rc, "job '%s': rank %u refused: %s",
				j->name, j->rank,
				-rc == PHUB_WIRE_ERR_BAD_NONCE ? "wrong nonce" :
				phub_wire_error_name((uint16_t)-rc));
		if (created)
			sjob_free(sp, sj);
		return;
	}
	if (j->join_flags & PHUB_WIRE_JOIN_F_CSUM)
		sj->csum_ranks[j->rank / 64] |= UINT64_C(1) << (j->rank % 64);
	else
		sj->csum_ranks[j->rank / 64] &= ~(UINT64_C(1) << (j->rank % 64));
	join_ack_send(sp, src, sj, j->rank, token, (j->join_flags & PHUB_WIRE_JOIN_F_CSUM) != 0,
			replay);
}

static void
on_join(struct soft_pbox *sp, const struct sockaddr_in *src, const struct phub_wire_msg *msg)
{
	struct phub_wire_join_seg seg;
	struct pending_join *pj;
	int rc;

	if (phub_wire_join_parse(msg->payload, msg->payload_len, &seg) != PHUB_DROP_OK)
		return;
	if (seg.total_keys > PHUB_LAYOUT_MAX_CHUNKS) {
		send_error(sp, sp->fds[0], src, msg, PHUB_WIRE_ERR_BAD_REQUEST,
				"%u keys is more than this PBox takes", seg.total_keys);
		return;
	}
	pj = pending_find(sp, src, &seg);
	if (pj == NULL)
		return;
	pj->last_ns = now_ns();
	rc = phub_wire_join_merge_add(&pj->merge, msg, &seg);
	if (rc < 0) {
		/* The worker changed its mind (a restarted process): start over with this one. */
		pending_free(pj);
		pj = pending_find(sp, src, &seg);
		if (pj == NULL)
			return;
		pj->last_ns = now_ns();
		rc = phub_wire_join_merge_add(&pj->merge, msg, &seg);
	}
	if (rc == 1) {
		join_complete(sp, src, msg, pj);
		pending_free(pj);
	} else if (rc < 0) {
		send_error(sp, sp->fds[0], src, msg, PHUB_WIRE_ERR_BAD_REQUEST,
				"the JOIN datagrams of rank %u contradict each other",
				seg.join.rank);
		pending_free(pj);
	}
}

/* ---- LEAVE, PING ---- */

static void
on_leave(struct soft_pbox *sp, const struct sockaddr_in *src, const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(sp->engine, msg->job_id);
	struct phub_wire_msg ack;
	int remaining = -1;
	int len;

	if (job != NULL) {
		struct phub_engine_peer peer;
		uint64_t token;

		remaining = phub_engine_job_leave(job, msg->worker_rank, msg->session_token);
		/* Another session of the rank (it joined again) is not ended by an old token. */
		if (remaining < 0 && phub_engine_job_rank(job, msg->worker_rank, &peer, &token))
			return;
	}
	sp->stats.leaves++;
	phub_wire_msg_init(&ack, PHUB_WIRE_OP_LEAVE_ACK);
	ack.job_id = msg->job_id;
	ack.session_token = msg->session_token;
	ack.worker_rank = msg->worker_rank;
	ack.iteration = msg->iteration;
	/* Already gone: the first LEAVE_ACK was lost. */
	if (remaining < 0)
		ack.flags |= PHUB_WIRE_F_REPLAY;
	if (remaining == 0)
		sjob_free(sp, sjob_of(sp, job));
	len = phub_wire_encode(sp->cbuf, sp->max_dgram, &ack);
	if (len > 0)
		ctrl_send(sp, sp->fds[0], src, sp->cbuf, (size_t)len);
}

static void
on_ping(struct soft_pbox *sp, int fd, const struct sockaddr_in *src,
		const struct phub_wire_msg *msg)
{
	struct phub_wire_msg pong = *msg;
	int len;

	sp->stats.pings++;
	/* As phub-pbox: a session it does not hold gets the ERROR that makes the worker JOIN. */
	if (msg->session_token != 0) {
		struct phub_engine_job *job = phub_engine_job_lookup(sp->engine, msg->job_id);
		struct phub_engine_peer peer;
		uint64_t token;

		if (job == NULL || !phub_engine_job_rank(job, msg->worker_rank, &peer, &token)) {
			send_error(sp, fd, src, msg, PHUB_WIRE_ERR_UNKNOWN_JOB,
					"no session of rank %u in job id %u", msg->worker_rank,
					msg->job_id);
			return;
		}
		if (token != msg->session_token) {
			send_error(sp, fd, src, msg, PHUB_WIRE_ERR_BAD_SESSION,
					"rank %u has another session", msg->worker_rank);
			return;
		}
	}
	pong.opcode = PHUB_WIRE_OP_PONG;
	pong.flags &= PHUB_WIRE_F_CSUM | PHUB_WIRE_F_LAST;
	len = phub_wire_encode(sp->cbuf, sp->max_dgram, &pong);
	if (len > 0)
		ctrl_send(sp, fd, src, sp->cbuf, (size_t)len);
}

/* ---- PUSH, PULL ---- */

static bool
rank_wants_csum(const struct sjob *sj, uint16_t rank)
{
	return (sj->csum_ranks[rank / 64] >> (rank % 64)) & 1;
}

static void
reply_header(struct phub_wire_msg *out, uint8_t opcode, const struct phub_wire_msg *in)
{
	phub_wire_msg_init(out, opcode);
	out->job_id = in->job_id;
	out->session_token = in->session_token;
	out->worker_rank = in->worker_rank;
	out->chunk_id = in->chunk_id;
	out->iteration = in->iteration;
	out->elem_offset = in->elem_offset;
	out->elem_count = in->elem_count;
	out->seg_index = in->seg_index;
	out->seg_count = in->seg_count;
	out->priority = in->priority;
	out->flags = in->seg_index + 1 == in->seg_count ? PHUB_WIRE_F_LAST : 0;
}

static void
send_models(struct soft_pbox *sp, int fd, const struct sockaddr_in *src, const struct sjob *sj,
		const struct phub_wire_msg *in, const struct phub_engine_reply *reply)
{
	struct phub_wire_msg m;
	uint64_t any_csum = 0;
	uint32_t crc = 0;

	for (unsigned int w = 0; w < PHUB_ENGINE_BITMAP_WORDS; w++)
		any_csum |= sj->csum_ranks[w];
	/* Computed once for every header that carries the payload, and only if one needs it. */
	if (any_csum != 0)
		crc = phub_wire_csum_payload(reply->model, reply->model_bytes);

	reply_header(&m, PHUB_WIRE_OP_MODEL, in);
	m.dtype = sj->decl.dtype;
	m.iteration = reply->iteration;
	m.payload_len = (uint16_t)reply->model_bytes;
	if (reply->actions & PHUB_ENGINE_MODEL_ONE) {
		/* An answer from kept state to the asker: its stamp goes back for its RTT. */
		m.aux = in->aux;
		m.flags |= PHUB_WIRE_F_REPLAY;
		if (rank_wants_csum(sj, in->worker_rank))
			m.flags |= PHUB_WIRE_F_CSUM;
		data_send(sp, fd, src, &m, reply->model, crc);
		return;
	}
	for (uint16_t r = 0; r < sj->decl.world_size; r++) {
		struct phub_engine_peer peer;
		struct sockaddr_in dst = { .sin_family = AF_INET };
		uint64_t token;

		if (!phub_engine_job_rank(sj->job, r, &peer, &token))
			continue;
		dst.sin_addr.s_addr = htonl(peer.ipv4);
		dst.sin_port = htons(peer.udp_port);
		m.worker_rank = r;
		m.session_token = token;
		m.flags = (uint8_t)((m.flags & ~PHUB_WIRE_F_CSUM) |
				(rank_wants_csum(sj, r) ? PHUB_WIRE_F_CSUM : 0));
		data_send(sp, fd, &dst, &m, reply->model, crc);
	}
}

static void
log_arrival(struct soft_pbox *sp, const struct phub_wire_msg *msg)
{
	pthread_mutex_lock(&sp->lock);
	if (sp->log_n < sp->log_cap)
		sp->log[sp->log_n++] = (struct soft_pbox_arrival){
			.job_id = msg->job_id,
			.chunk_id = msg->chunk_id,
			.iteration = msg->iteration,
			.rank = msg->worker_rank,
			.seg_index = msg->seg_index,
			.priority = msg->priority,
			.retransmit = (msg->flags & PHUB_WIRE_F_RETRANSMIT) != 0,
		};
	pthread_mutex_unlock(&sp->lock);
}

static void
on_data(struct soft_pbox *sp, unsigned int sock, const struct sockaddr_in *src,
		const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(sp->engine, msg->job_id);
	struct phub_engine_request req;
	struct phub_engine_reply reply;
	struct sjob *sj;

	if (job == NULL) {
		sp->estats.drops[PHUB_DROP_UNKNOWN_JOB]++;
		send_error(sp, sp->fds[sock], src, msg, PHUB_WIRE_ERR_UNKNOWN_JOB,
				"job id %u is not known here: the job ended or the PBox restarted",
				msg->job_id);
		return;
	}
	sj = sjob_of(sp, job);
	/* The chunk map says which port serves a chunk; another port is a worker's bug. */
	if (msg->chunk_id < sj->n_chunks && sj->chunk_lcore[msg->chunk_id] != sock - 1) {
		sp->estats.drops[PHUB_DROP_WRONG_LCORE]++;
		return;
	}
	memset(&req, 0, sizeof(req));
	req.session_token = msg->session_token;
	req.chunk_id = msg->chunk_id;
	req.iteration = msg->iteration;
	req.elem_offset = msg->elem_offset;
	req.elem_count = msg->elem_count;
	req.rank = msg->worker_rank;
	req.seg_index = msg->seg_index;
	req.seg_count = msg->seg_count;
	req.dtype = msg->dtype;
	req.retransmit = (msg->flags & PHUB_WIRE_F_RETRANSMIT) != 0;
	req.src_ipv4 = ntohl(src->sin_addr.s_addr);
	req.src_udp_port = ntohs(src->sin_port);
	req.payload = msg->payload;
	req.payload_len = msg->payload_len;
	req.has_hyper = (msg->flags & PHUB_WIRE_F_HYPER) != 0;
	req.hyper_lr = msg->hyper_lr;
	req.hyper_weight_decay = msg->hyper_weight_decay;
	if (msg->opcode == PHUB_WIRE_OP_PUSH) {
		log_arrival(sp, msg);
		phub_engine_push(job, &req, &reply, &sp->estats);
	} else {
		phub_engine_pull(job, &req, &reply, &sp->estats);
	}
	if (reply.actions & PHUB_ENGINE_ACK) {
		struct phub_wire_msg ack;

		reply_header(&ack, PHUB_WIRE_OP_ACK, msg);
		ack.aux = msg->aux;
		if (rank_wants_csum(sj, msg->worker_rank))
			ack.flags |= PHUB_WIRE_F_CSUM;
		data_send(sp, sp->fds[sock], src, &ack, NULL, 0);
	}
	if (reply.actions & (PHUB_ENGINE_MODEL_ONE | PHUB_ENGINE_MODEL_ALL))
		send_models(sp, sp->fds[sock], src, sj, msg, &reply);
}

/* ---- the loop ---- */

static void
on_datagram(struct soft_pbox *sp, unsigned int sock, const struct sockaddr_in *src,
		const uint8_t *buf, size_t len)
{
	struct phub_wire_msg msg;
	enum phub_drop_reason why;

	if (lose(sp)) {
		sp->stats.rx_lost++;
		return;
	}
	sp->stats.rx_datagrams++;
	why = phub_wire_parse(buf, len, &msg);
	if (why != PHUB_DROP_OK) {
		sp->estats.drops[why]++;
		return;
	}
	switch (msg.opcode) {
	case PHUB_WIRE_OP_JOIN:
		if (sock == 0)
			on_join(sp, src, &msg);
		else
			sp->estats.drops[PHUB_DROP_UNEXPECTED_OPCODE]++;
		break;
	case PHUB_WIRE_OP_LEAVE:
		if (sock == 0)
			on_leave(sp, src, &msg);
		else
			sp->estats.drops[PHUB_DROP_UNEXPECTED_OPCODE]++;
		break;
	case PHUB_WIRE_OP_PING:
		on_ping(sp, sp->fds[sock], src, &msg);
		break;
	case PHUB_WIRE_OP_PUSH:
	case PHUB_WIRE_OP_PULL:
		if (sock != 0)
			on_data(sp, sock, src, &msg);
		else
			sp->estats.drops[PHUB_DROP_UNEXPECTED_OPCODE]++;
		break;
	default:
		sp->estats.drops[PHUB_DROP_UNEXPECTED_OPCODE]++;
		break;
	}
}

static void
sock_drain(struct soft_pbox *sp, unsigned int sock)
{
	for (int b = 0; b < RX_BATCHES; b++) {
		int n;

		for (unsigned int i = 0; i < BATCH; i++) {
			sp->rmsg[i].msg_hdr.msg_namelen = sizeof(sp->rsrc[i]);
			sp->rmsg[i].msg_len = 0;
		}
		n = recvmmsg(sp->fds[sock], sp->rmsg, BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			break;
		for (int i = 0; i < n; i++)
			on_datagram(sp, sock, &sp->rsrc[i], sp->rbuf + (size_t)i * sp->max_dgram,
					sp->rmsg[i].msg_len);
		/* Replies leave before the next batch: they may point into state it changes. */
		data_flush(sp);
		if (n < BATCH)
			break;
	}
}

static void
stats_publish(struct soft_pbox *sp)
{
	struct soft_pbox_stats *s = &sp->stats;

	s->pushes = sp->estats.pushes;
	s->duplicates = sp->estats.duplicates;
	s->retransmits_seen = sp->estats.retransmits_seen;
	s->models_resent = sp->estats.models_resent;
	s->pulls = sp->estats.pulls;
	memcpy(s->drops, sp->estats.drops, sizeof(s->drops));
	s->jobs = 0;
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++)
		s->jobs += sp->jobs[i].job != NULL;
	sp->pub = *s;
}

static void *
pbox_main(void *arg)
{
	struct soft_pbox *sp = arg;
	struct pollfd pfd[2 + SOFT_PBOX_MAX_LCORES];
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		unsigned int n = 1;
		bool paused;

		pthread_mutex_lock(&sp->lock);
		if (sp->stop) {
			pthread_mutex_unlock(&sp->lock);
			break;
		}
		paused = sp->paused;
		sp->paused_seen = paused;
		stats_publish(sp);
		pthread_cond_broadcast(&sp->cond);
		pthread_mutex_unlock(&sp->lock);

		pfd[0] = (struct pollfd){ .fd = sp->wake_fd, .events = POLLIN };
		for (unsigned int i = 0; !paused && i < sp->n_fds; i++)
			pfd[n++] = (struct pollfd){ .fd = sp->fds[i], .events = POLLIN };
		if (poll(pfd, n, -1) < 0)
			continue;
		if (pfd[0].revents & POLLIN) {
			uint64_t v;

			if (read(sp->wake_fd, &v, sizeof(v)) < 0)
				continue;
		}
		for (unsigned int i = 1; i < n; i++)
			if (pfd[i].revents & POLLIN)
				sock_drain(sp, i - 1);
	}
	return NULL;
}

static int
sock_open(struct soft_pbox *sp, unsigned int i, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr = sp->bind_ip };
	socklen_t alen = sizeof(a);
	int size = SOCKET_BUFFER;
	int fd;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sp->fds[i] = fd;
	/* Several workers' windows arrive at once: room for all of them. */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	a.sin_port = htons(port);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		return -errno;
	if (getsockname(fd, (struct sockaddr *)&a, &alen) != 0)
		return -errno;
	sp->ports[i] = ntohs(a.sin_port);
	return 0;
}

void
soft_pbox_stop(struct soft_pbox *sp)
{
	if (sp == NULL)
		return;
	if (sp->thread_started) {
		uint64_t one = 1;

		pthread_mutex_lock(&sp->lock);
		sp->stop = true;
		pthread_mutex_unlock(&sp->lock);
		if (write(sp->wake_fd, &one, sizeof(one)) < 0)
			abort();
		pthread_join(sp->thread, NULL);
	}
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++)
		if (sp->jobs[i].job != NULL)
			sjob_free(sp, &sp->jobs[i]);
	for (unsigned int i = 0; i < PENDING_JOINS; i++)
		pending_free(&sp->pend[i]);
	phub_engine_free(sp->engine);
	for (unsigned int i = 0; i < sp->n_fds; i++)
		if (sp->fds[i] >= 0)
			close(sp->fds[i]);
	if (sp->wake_fd >= 0)
		close(sp->wake_fd);
	free(sp->rbuf);
	free(sp->cbuf);
	free(sp->log);
	pthread_cond_destroy(&sp->cond);
	pthread_mutex_destroy(&sp->lock);
	free(sp);
}

struct soft_pbox *
soft_pbox_start(const struct soft_pbox_params *params)
{
	struct soft_pbox *sp;
	int rc = 0;

	sp = calloc(1, sizeof(*sp));
	if (sp == NULL)
		return NULL;
	pthread_mutex_init(&sp->lock, NULL);
	pthread_cond_init(&sp->cond, NULL);
	sp->wake_fd = -1;
	if (params != NULL)
		sp->p = *params;
	if (sp->p.n_lcores == 0)
		sp->p.n_lcores = 1;
	if (sp->p.mtu == 0)
		sp->p.mtu = 1500;
	if (sp->p.chunk_bytes == 0)
		sp->p.chunk_bytes = PHUB_LAYOUT_CHUNK_BYTES_DEFAULT;
	if (sp->p.log_cap == 0)
		sp->p.log_cap = LOG_CAP_DEFAULT;
	sp->rng = sp->p.seed != 0 ? sp->p.seed : 1;
	if (sp->p.n_lcores > SOFT_PBOX_MAX_LCORES || sp->p.mtu < PHUB_WIRE_MIN_MTU ||
	    sp->p.loss < 0.0 || sp->p.loss >= 1.0 ||
	    (sp->p.port != 0 && sp->p.port + sp->p.n_lcores > UINT16_MAX) ||
	    inet_pton(AF_INET, sp->p.bind_addr != NULL ? sp->p.bind_addr : "127.0.0.1",
		    &sp->bind_ip) != 1) {
		rc = -EINVAL;
		goto fail;
	}
	sp->n_fds = 1u + sp->p.n_lcores;
	for (unsigned int i = 0; i < sp->n_fds; i++)
		sp->fds[i] = -1;
	sp->max_dgram = sp->p.mtu - PHUB_WIRE_IPV4_UDP_OVERHEAD;
	if (sp->max_dgram < 2048)
		sp->max_dgram = 2048;
	sp->engine = phub_engine_create();
	sp->rbuf = malloc(BATCH * sp->max_dgram);
	sp->cbuf = malloc(sp->max_dgram);
	sp->log_cap = sp->p.log_cap;
	sp->log = calloc(sp->log_cap, sizeof(*sp->log));
	sp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (sp->engine == NULL || sp->rbuf == NULL || sp->cbuf == NULL || sp->log == NULL ||
	    sp->wake_fd < 0) {
		rc = -ENOMEM;
		goto fail;
	}
	for (unsigned int i = 0; i < BATCH; i++) {
		sp->riov[i].iov_base = sp->rbuf + (size_t)i * sp->max_dgram;
		sp->riov[i].iov_len = sp->max_dgram;
		sp->rmsg[i].msg_hdr.msg_name = &sp->rsrc[i];
		sp->rmsg[i].msg_hdr.msg_iov = &sp->riov[i];
		sp->rmsg[i].msg_hdr.msg_iovlen = 1;
	}
	for (unsigned int i = 0; i < sp->n_fds && rc == 0; i++)
		rc = sock_open(sp, i, sp->p.port != 0 ? (uint16_t)(sp->p.port + i) : 0);
	if (rc == 0 && sp->p.checkpoint_dir != NULL)
		rc = restore_dir(sp);
	if (rc != 0)
		goto fail;
	rc = -pthread_create(&sp->thread, NULL, pbox_main, sp);
	if (rc != 0)
		goto fail;
	sp->thread_started = true;
	return sp;

fail:
	soft_pbox_stop(sp);
	errno = -rc;
	return NULL;
}

/* ---- checkpoints ---- */

/* The soft PBox's part of a job restored from a file: what JOIN_ACK and the data path use. */
static int
sjob_restored(struct soft_pbox *sp, struct phub_engine_job *job,
		const struct phub_engine_ckpt_info *info)
{
	const struct phub_layout *layout = phub_engine_job_layout(job);
	struct sjob *sj = sjob_of(sp, job);

	memset(sj, 0, sizeof(*sj));
	sj->job = job;
	sj->restored = true;
	sj->decl.world_size = info->world_size;
	sj->decl.dtype = (uint8_t)info->dtype;
	sj->decl.optimizer = (uint8_t)info->optimizer.type;
	sj->n_keys = info->n_keys;
	sj->chunk_bytes = info->chunk_bytes;
	sj->seg_elems = info->segment_elems;
	sj->n_chunks = phub_layout_chunk_count(layout);
	sj->keys = calloc(sj->n_keys, sizeof(*sj->keys));
	sj->chunk_lcore = calloc(sj->n_chunks, sizeof(*sj->chunk_lcore));
	if (sj->keys == NULL || sj->chunk_lcore == NULL)
		return -ENOMEM;
	for (uint32_t k = 0; k < sj->n_keys; k++) {
		struct phub_layout_key_info ki;

		phub_layout_key_get(layout, k, &ki);
		sj->keys[k].key_id = ki.key_id;
		sj->keys[k].elem_count = ki.n_elems;
	}
	for (uint32_t c = 0; c < sj->n_chunks; c++) {
		uint32_t server = 0;

		phub_layout_chunk_server(layout, c, &server);
		sj->chunk_lcore[c] = (uint16_t)server;
	}
	return 0;
}

/* Every <...>.ckpt of the directory becomes a job again; a file that does not is an error. */
static int
restore_dir(struct soft_pbox *sp)
{
	struct phub_layout_server servers[SOFT_PBOX_MAX_LCORES];
	struct phub_engine_ckpt_restore_params rp;
	struct dirent *e;
	int rc = 0;
	DIR *d = opendir(sp->p.checkpoint_dir);

	if (d == NULL)
		return errno == ENOENT ? 0 : -errno;
	for (unsigned int k = 0; k < sp->p.n_lcores; k++)
		servers[k] = (struct phub_layout_server){
			.lcore = k, .port = 0, .port_numa = PHUB_LAYOUT_NUMA_ANY, .lcore_numa = 0,
		};
	memset(&rp, 0, sizeof(rp));
	rp.servers = servers;
	rp.n_servers = sp->p.n_lcores;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		struct phub_engine_ckpt_info info;
		struct phub_engine_job *job;
		size_t n = strlen(e->d_name);
		char err[256];
		int fd;

		if (n < 5 || strcmp(e->d_name + n - 5, ".ckpt") != 0)
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			rc = -errno;
			break;
		}
		job = phub_engine_ckpt_restore(sp->engine, fd, &rp, &info, err, sizeof(err));
		close(fd);
		if (job == NULL) {
			fprintf(stderr, "soft PBox: %s/%s: %s\n", sp->p.checkpoint_dir,
					e->d_name, err);
			rc = -errno;
			break;
		}
		rc = sjob_restored(sp, job, &info);
	}
	closedir(d);
	return rc;
}

int
soft_pbox_checkpoint(struct soft_pbox *sp)
{
	int saved = 0, rc = 0;

	if (sp->p.checkpoint_dir == NULL)
		return -EINVAL;
	soft_pbox_pause(sp, true);
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS && rc == 0; i++) {
		struct phub_engine_job_info info;

		if (sp->jobs[i].job == NULL)
			continue;
		phub_engine_job_get_info(sp->jobs[i].job, &info);
		if (info.iteration_min != info.iteration_max)
			rc = -EAGAIN;
	}
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS && rc == 0; i++) {
		char path[4096], tmp[4096 + 8], err[256];
		int fd;

		if (sp->jobs[i].job == NULL)
			continue;
		snprintf(path, sizeof(path), "%s/%u.ckpt", sp->p.checkpoint_dir,
				phub_engine_job_id(sp->jobs[i].job));
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0) {
			rc = -errno;
			break;
		}
		rc = phub_engine_ckpt_write(sp->jobs[i].job, PHUB_ENGINE_CKPT_LIVE, 0, fd, err,
				sizeof(err));
		close(fd);
		if (rc == 0 && rename(tmp, path) != 0)
			rc = -errno;
		if (rc == 0)
			saved++;
	}
	soft_pbox_pause(sp, false);
	return rc != 0 ? rc : saved;
}

uint16_t
soft_pbox_port(const struct soft_pbox *sp)
{
	return sp->ports[0];
}

uint16_t
soft_pbox_data_port(const struct soft_pbox *sp, unsigned int lcore)
{
	return lcore < sp->p.n_lcores ? sp->ports[1 + lcore] : 0;
}

void
soft_pbox_pause(struct soft_pbox *sp, bool paused)
{
	uint64_t one = 1;

	pthread_mutex_lock(&sp->lock);
	sp->paused = paused;
	if (write(sp->wake_fd, &one, sizeof(one)) < 0)
		abort();
	while (sp->paused_seen != paused)
		pthread_cond_wait(&sp->cond, &sp->lock);
	pthread_mutex_unlock(&sp->lock);
}

size_t
soft_pbox_arrivals(struct soft_pbox *sp, struct soft_pbox_arrival *out, size_t cap)
{
	size_t n;

	pthread_mutex_lock(&sp->lock);
	n = sp->log_n;
	memcpy(out, sp->log, (cap < n ? cap : n) * sizeof(*out));
	pthread_mutex_unlock(&sp->lock);
	return n;
}

void
soft_pbox_get_stats(struct soft_pbox *sp, struct soft_pbox_stats *stats)
{
	pthread_mutex_lock(&sp->lock);
	*stats = sp->pub;
	pthread_mutex_unlock(&sp->lock);
}
