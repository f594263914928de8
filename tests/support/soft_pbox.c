/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The soft PBox: a socket adapter over the appliance's own control plane (lib/control: JOIN,
 * job policy, LEAVE, PING, timeouts) and engine (lib/engine: PUSH, PULL), one control socket and
 * one socket per "lcore", all in one thread, with optional seeded loss injection.
 */

#include <arpa/inet.h>
#include <errno.h>
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

#include "control/phub_control.h"
#include "engine/phub_ackv.h"
#include "engine/phub_engine.h"
#include "engine/phub_engine_auth.h"

#include "soft_pbox.h"

enum {
	BATCH = 32,
	RX_BATCHES = 8,			/* per socket and wake-up, so that no port starves */
	POLL_MS = 100,			/* the control plane's timers, at least this often */
	SOCKET_BUFFER = 8 << 20,
	LOG_CAP_DEFAULT = 65536,
	MAX_DGRAM = 65536,
	ACKV_MTU = 1500,		/* entries per ACKV: what a 1500-byte path holds */
	ACKV_MAX_BYTES = 1416,		/* phub_wire_max_payload(ACKV_MTU) */
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
	struct phub_control *ctl;
	struct phub_layout_server servers[SOFT_PBOX_MAX_LCORES];
	struct phub_wire_endpoint endpoints[SOFT_PBOX_MAX_LCORES];
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
	uint8_t thdr[BATCH][PHUB_WIRE_HDR_LEN_MAX + PHUB_WIRE_AUTH_TRAILER_LEN];
	unsigned int tn;
	int tfd;
	/* The ACKs a receive batch owes to ranks that take ACKV; their bodies by send slot. */
	struct phub_ackv_batch ackv;
	uint8_t tackv[BATCH][ACKV_MAX_BYTES];
	uint8_t *cbuf;			/* one control datagram */

	struct phub_engine_stats estats;
	struct soft_pbox_stats stats;
	uint32_t elastic_epoch[PHUB_ENGINE_MAX_JOBS];	/* phub_engine_elastic_poll()'s */

	/* Shared with the API, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	bool paused;
	bool paused_seen;
	unsigned int steps;		/* passes over the sockets allowed while paused */
	struct soft_pbox_stats pub;
	struct soft_pbox_arrival *log;
	size_t log_n;
	size_t log_cap;
};

static uint64_t
now_ns(void *ctx)
{
	struct timespec ts;

	(void)ctx;
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

/* A datagram of job's rank from data port lane (1 + lcore): sealed when the job authenticates. */
static void
data_send(struct soft_pbox *sp, unsigned int lane, const struct sockaddr_in *dst,
		struct phub_engine_job *job, struct phub_wire_msg *msg, const void *payload,
		uint32_t payload_crc)
{
	int fd = sp->fds[lane];
	unsigned int i;
	int hdr_len;

	if (lose(sp)) {
		sp->stats.tx_lost++;
		return;
	}
	if (sp->tn != 0 && sp->tfd != fd)
		data_flush(sp);
	sp->tfd = fd;
	i = sp->tn;
	if (phub_engine_job_auth(job))
		msg->flags = (uint8_t)((msg->flags | PHUB_WIRE_F_AUTH) & ~PHUB_WIRE_F_CSUM);
	hdr_len = phub_wire_hdr_encode(sp->thdr[i], sizeof(sp->thdr[i]), msg, payload_crc);
	if (hdr_len < 0)
		return;
	if ((msg->flags & PHUB_WIRE_F_AUTH) &&
	    !phub_engine_auth_tx(job, msg->worker_rank, lane, lane, sp->thdr[i], (size_t)hdr_len,
			payload, msg->payload_len))
		return;
	sp->tdst[i] = *dst;
	sp->tiov[i][0].iov_base = sp->thdr[i];
	sp->tiov[i][0].iov_len = (size_t)hdr_len;
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

/* lib/control's answers leave by the socket the question came in on. */
static void
control_send(void *ctx, const struct phub_control_peer *to, const void *buf, size_t len)
{
	struct soft_pbox *sp = ctx;
	struct sockaddr_in dst = { .sin_family = AF_INET };

	if (to->port >= sp->n_fds)
		return;
	dst.sin_addr.s_addr = htonl(to->ipv4);
	dst.sin_port = htons(to->udp_port);
	ctrl_send(sp, sp->fds[to->port], &dst, buf, len);
}

/* The control plane's log lines on stderr, when the params ask (phub-soft-pbox does). */
static void
control_log_line(void *ctx, enum phub_control_log_level level, const char *text)
{
	const struct soft_pbox *sp = ctx;

	(void)level;
	if (sp->p.log_stderr)
		fprintf(stderr, "phub-soft-pbox: %s\n", text);
}

static const struct phub_control_ops control_ops = {
	.now_ns = now_ns,
	.send = control_send,
	.log = control_log_line,
};

/* ---- PUSH, PULL ---- */

/* Whether rank asked in its JOIN for CSUM on what the PBox sends it (as the appliance reads it). */
static bool
rank_wants_csum(const struct phub_engine_job *job, uint16_t rank)
{
	struct phub_engine_peer peer;
	uint64_t token;

	return phub_engine_job_rank(job, rank, &peer, &token) &&
		(peer.flags & PHUB_ENGINE_PEER_F_CSUM) != 0;
}

/* Whether rank asked in its JOIN for ACKV instead of one ACK per PUSH. */
static bool
rank_wants_ackv(const struct phub_engine_job *job, uint16_t rank)
{
	struct phub_engine_peer peer;
	uint64_t token;

	return phub_engine_job_rank(job, rank, &peer, &token) &&
		(peer.flags & PHUB_ENGINE_PEER_F_ACKV) != 0;
}

/* One ACKV (phub_ackv_flush()'s send), from the socket of the lcore that took the PUSHes. */
static void
ackv_send(void *arg, const struct phub_ackv_pending *to, const struct phub_wire_ackv_entry *e,
		unsigned int n)
{
	struct soft_pbox *sp = arg;
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct phub_engine_peer peer;
	struct phub_wire_msg m;
	uint64_t token;
	int fd = sp->fds[to->port];

	if (!phub_engine_job_rank(to->job, to->rank, &peer, &token))
		return;
	dst.sin_addr.s_addr = htonl(peer.ipv4);
	dst.sin_port = htons(peer.udp_port);
	phub_wire_msg_init(&m, PHUB_WIRE_OP_ACKV);
	m.job_id = to->job_id;
	m.session_token = token;
	m.worker_rank = to->rank;
	m.payload_len = (uint16_t)(n * PHUB_WIRE_ACKV_ENTRY_LEN);
	/* The body lives in the send slot data_send() will take, until the batch is sent. */
	if (sp->tn != 0 && sp->tfd != fd)
		data_flush(sp);
	phub_wire_ackv_put(sp->tackv[sp->tn], e, n);
	m.payload = sp->tackv[sp->tn];
	if (peer.flags & PHUB_ENGINE_PEER_F_CSUM)
		m.flags |= PHUB_WIRE_F_CSUM;
	sp->stats.ackv_sent++;
	sp->stats.ackv_entries += n;
	data_send(sp, to->port, &dst, to->job, &m, m.payload,
			(m.flags & PHUB_WIRE_F_CSUM) ? phub_wire_csum_payload(m.payload,
					m.payload_len) : 0);
}

/* The ACKs the batch owes, one ACKV per rank. */
static void
ackv_flush(struct soft_pbox *sp)
{
	phub_ackv_flush(&sp->ackv, phub_wire_ackv_max_entries(ACKV_MTU), ackv_send, sp);
}

/* The ACK of msg's PUSH, owed until the batch's end (or made unneeded by its MODEL). */
static void
ackv_owe(struct soft_pbox *sp, struct phub_engine_job *job, unsigned int sock,
		const struct phub_wire_msg *msg)
{
	struct phub_wire_ackv_entry e = {
		.chunk_id = msg->chunk_id,
		.seg_index = msg->seg_index,
		.flags = msg->seg_index + 1 == msg->seg_count ? PHUB_WIRE_F_LAST : 0,
		.iteration = msg->iteration,
		.aux = msg->aux,
	};

	if (phub_ackv_full(&sp->ackv))
		ackv_flush(sp);
	phub_ackv_add(&sp->ackv, job, msg->job_id, msg->worker_rank, (uint16_t)sock, &e);
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
send_models(struct soft_pbox *sp, unsigned int lane, const struct sockaddr_in *src,
		struct phub_engine_job *job, const struct phub_wire_msg *in,
		const struct phub_engine_reply *reply)
{
	struct phub_wire_msg m;
	bool crc_done = false;
	uint32_t crc = 0;

	reply_header(&m, PHUB_WIRE_OP_MODEL, in);
	m.dtype = (uint8_t)phub_engine_job_dtype(job);
	m.iteration = reply->iteration;
	m.payload_len = (uint16_t)reply->model_bytes;
	if (reply->actions & PHUB_ENGINE_MODEL_ONE) {
		/* An answer from kept state to the asker: its stamp goes back for its RTT. */
		m.aux = in->aux;
		m.flags |= PHUB_WIRE_F_REPLAY;
		if (rank_wants_csum(job, in->worker_rank)) {
			m.flags |= PHUB_WIRE_F_CSUM;
			crc = phub_wire_csum_payload(reply->model, reply->model_bytes);
		}
		data_send(sp, lane, src, job, &m, reply->model, crc);
		return;
	}
	for (uint16_t r = 0; r < phub_engine_job_world_size(job); r++) {
		struct phub_engine_peer peer;
		struct sockaddr_in dst = { .sin_family = AF_INET };
		uint64_t token;

		if (!phub_engine_job_rank(job, r, &peer, &token))
			continue;
		dst.sin_addr.s_addr = htonl(peer.ipv4);
		dst.sin_port = htons(peer.udp_port);
		m.worker_rank = r;
		m.session_token = token;
		/* An ACK this batch owes r for the segment: the MODEL is it, with the stamp. */
		m.aux = 0;
		if ((peer.flags & PHUB_ENGINE_PEER_F_ACKV) &&
		    phub_ackv_take(&sp->ackv, m.job_id, r, m.chunk_id, m.seg_index, m.iteration,
				&m.aux))
			sp->stats.acks_in_model++;
		/* Its other ACKs of the batch first: never an answer to a later PUSH ahead. */
		if (m.aux != 0)
			phub_ackv_flush_rank(&sp->ackv, m.job_id, r,
					phub_wire_ackv_max_entries(ACKV_MTU), ackv_send, sp);
		m.flags &= (uint8_t)~PHUB_WIRE_F_CSUM;
		if (peer.flags & PHUB_ENGINE_PEER_F_CSUM) {
			/* The payload's CRC once, finished with each rank's header. */
			if (!crc_done)
				crc = phub_wire_csum_payload(reply->model, reply->model_bytes);
			crc_done = true;
			m.flags |= PHUB_WIRE_F_CSUM;
		}
		data_send(sp, lane, &dst, job, &m, reply->model, crc);
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
		const uint8_t *dgram, const struct phub_wire_msg *msg)
{
	struct phub_engine_job *job = phub_engine_job_lookup(sp->engine, msg->job_id);
	struct phub_engine_request req;
	struct phub_engine_reply reply;
	enum phub_drop_reason why;
	uint32_t server;

	/* As the appliance's data path: a datagram of an unknown job is dropped, unanswered. */
	if (job == NULL) {
		sp->estats.drops[PHUB_DROP_UNKNOWN_JOB]++;
		return;
	}
	/* An authenticated job's MAC and replay window, before anything reads the datagram. */
	why = phub_engine_auth_rx(job, msg->worker_rank, sock, sock, msg->flags, dgram,
			msg->hdr_len, msg->payload, msg->payload_len);
	if (why != PHUB_DROP_OK) {
		sp->estats.drops[why]++;
		return;
	}
	/* The chunk map says which port serves a chunk; another port is a worker's bug. */
	if (phub_layout_chunk_server(phub_engine_job_layout(job), msg->chunk_id, &server) == 0 &&
	    server != sock - 1) {
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
	if ((reply.actions & PHUB_ENGINE_ACK) && rank_wants_ackv(job, msg->worker_rank)) {
		ackv_owe(sp, job, sock, msg);
	} else if (reply.actions & PHUB_ENGINE_ACK) {
		struct phub_wire_msg ack;

		reply_header(&ack, PHUB_WIRE_OP_ACK, msg);
		ack.aux = msg->aux;
		if (rank_wants_csum(job, msg->worker_rank))
			ack.flags |= PHUB_WIRE_F_CSUM;
		sp->stats.acks++;
		data_send(sp, sock, src, job, &ack, NULL, 0);
	}
	if (reply.actions & (PHUB_ENGINE_MODEL_ONE | PHUB_ENGINE_MODEL_ALL))
		send_models(sp, sock, src, job, msg, &reply);
}

/* ---- the loop ---- */

struct elastic_ctx {
	struct soft_pbox *sp;
	struct phub_engine_job *job;
};

static bool
elastic_owns(void *arg, uint32_t server)
{
	(void)arg;
	(void)server;
	return true;	/* one thread is every lcore */
}

/* A segment that a removed rank no longer holds up: its MODEL to every rank left. */
static void
elastic_done(void *arg, const struct phub_engine_segment_done *what)
{
	struct elastic_ctx *c = arg;
	struct phub_wire_msg about;
	uint32_t server = 0;

	phub_wire_msg_init(&about, PHUB_WIRE_OP_MODEL);
	about.job_id = phub_engine_job_id(c->job);
	about.chunk_id = what->chunk_id;
	about.elem_offset = what->elem_offset;
	about.elem_count = what->reply.elem_count;
	about.seg_index = what->seg_index;
	about.seg_count = what->seg_count;
	phub_layout_chunk_server(phub_engine_job_layout(c->job), what->chunk_id, &server);
	send_models(c->sp, 1 + server, NULL, c->job, &about, &what->reply);
}

/* As the appliance's data lcores do each millisecond: segments that waited on a removed rank. */
static void
elastic_poll(struct soft_pbox *sp)
{
	struct elastic_ctx c = { .sp = sp };

	for (c.job = phub_engine_job_next(sp->engine, NULL); c.job != NULL;
	     c.job = phub_engine_job_next(sp->engine, c.job))
		phub_engine_elastic_poll(c.job, elastic_owns, elastic_done, &c, &sp->estats,
				&sp->elastic_epoch[phub_engine_job_slot(c.job)]);
	data_flush(sp);
}

static void
on_datagram(struct soft_pbox *sp, unsigned int sock, const struct sockaddr_in *src,
		const uint8_t *buf, size_t len)
{
	struct phub_control_peer from = {
		.ipv4 = ntohl(src->sin_addr.s_addr),
		.udp_port = ntohs(src->sin_port),
		.port = (uint16_t)sock,
	};
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
	case PHUB_WIRE_OP_LEAVE:
	case PHUB_WIRE_OP_WORLD_ACK:
		/* Only the control port takes them, as on the appliance. */
		if (sock == 0)
			phub_control_input(sp->ctl, &from, buf, len);
		else
			sp->estats.drops[PHUB_DROP_UNEXPECTED_OPCODE]++;
		break;
	case PHUB_WIRE_OP_PING:
		phub_control_input(sp->ctl, &from, buf, len);
		break;
	case PHUB_WIRE_OP_PUSH:
	case PHUB_WIRE_OP_PULL:
		if (sock != 0)
			on_data(sp, sock, src, buf, &msg);
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
		ackv_flush(sp);
		data_flush(sp);
		if (n < BATCH)
			break;
	}
}

static void
stats_publish(struct soft_pbox *sp)
{
	struct soft_pbox_stats *s = &sp->stats;
	struct phub_control_stats cs;

	phub_control_get_stats(sp->ctl, &cs);
	s->joins = cs.joins;
	s->errors_sent = cs.errors_sent;
	s->pings = cs.pings;
	s->leaves = cs.leaves;
	s->pushes = sp->estats.pushes;
	s->duplicates = sp->estats.duplicates;
	s->retransmits_seen = sp->estats.retransmits_seen;
	s->models_resent = sp->estats.models_resent;
	s->pulls = sp->estats.pulls;
	for (unsigned int i = 0; i < PHUB_DROP_REASON_MAX; i++)
		s->drops[i] = sp->estats.drops[i] + cs.drops[i];
	s->jobs = phub_control_job_count(sp->ctl);
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
		paused = sp->paused && sp->steps == 0;
		if (sp->paused && sp->steps > 0)
			sp->steps--;
		sp->paused_seen = sp->paused;
		stats_publish(sp);
		pthread_cond_broadcast(&sp->cond);
		pthread_mutex_unlock(&sp->lock);

		pfd[0] = (struct pollfd){ .fd = sp->wake_fd, .events = POLLIN };
		for (unsigned int i = 0; !paused && i < sp->n_fds; i++)
			pfd[n++] = (struct pollfd){ .fd = sp->fds[i], .events = POLLIN };
		phub_control_poll(sp->ctl);
		elastic_poll(sp);
		if (poll(pfd, n, POLL_MS) < 0)
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

/* The control plane over the engine; ports and endpoints are set once the sockets are bound. */
static struct phub_control *
control_create(struct soft_pbox *sp)
{
	struct phub_control_params cp;

	if (sp->engine == NULL)
		return NULL;
	for (unsigned int k = 0; k < sp->p.n_lcores; k++)
		sp->servers[k] = (struct phub_layout_server){
			.lcore = k, .port = 0, .port_numa = PHUB_LAYOUT_NUMA_ANY, .lcore_numa = 0,
		};
	memset(&cp, 0, sizeof(cp));
	cp.engine = sp->engine;
	cp.ops = &control_ops;
	cp.ctx = sp;
	cp.servers = sp->servers;
	cp.endpoints = sp->endpoints;
	cp.n_servers = sp->p.n_lcores;
	cp.mtu = (uint16_t)sp->p.mtu;
	cp.chunk_bytes = sp->p.chunk_bytes;
	cp.worker_dead_ms = sp->p.worker_dead_ms;
	cp.declared = sp->p.declared;
	cp.n_declared = sp->p.n_declared;
	return phub_control_create(&cp);
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
	phub_control_free(sp->ctl);
	if (sp->engine != NULL) {
		struct phub_engine_job *job;

		while ((job = phub_engine_job_next(sp->engine, NULL)) != NULL) {
			phub_engine_job_unpublish(sp->engine, job);
			phub_engine_job_free(job);
		}
	}
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
	sp->ctl = control_create(sp);
	sp->rbuf = malloc(BATCH * sp->max_dgram);
	sp->cbuf = malloc(sp->max_dgram);
	sp->log_cap = sp->p.log_cap;
	sp->log = calloc(sp->log_cap, sizeof(*sp->log));
	sp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (sp->engine == NULL || sp->ctl == NULL || sp->rbuf == NULL || sp->cbuf == NULL ||
	    sp->log == NULL || sp->wake_fd < 0) {
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
	/* Address 0: the JOIN_ACK's source, the address the worker reached us on. */
	for (unsigned int k = 0; rc == 0 && k < sp->p.n_lcores; k++)
		sp->endpoints[k] = (struct phub_wire_endpoint){ .ipv4 = 0,
			.udp_port = sp->ports[1 + k] };
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

/*
 * Every job of the directory back (lib/control's restore, the appliance's): newest file first,
 * a damaged one set aside and the one before it tried. A directory that is not there is none.
 */
static int
restore_dir(struct soft_pbox *sp)
{
	struct phub_engine_ckpt_restore_params rp;
	struct phub_control_ckpt_dir dir;
	int rc;

	rc = phub_control_ckpt_open(&dir, sp->p.checkpoint_dir);
	if (rc != 0)
		return rc;
	memset(&rp, 0, sizeof(rp));
	rp.servers = sp->servers;
	rp.n_servers = sp->p.n_lcores;
	phub_control_ckpt_restore(&dir, sp->ctl, &rp, NULL, NULL);
	phub_control_ckpt_close(&dir);
	return 0;
}

int
soft_pbox_checkpoint(struct soft_pbox *sp)
{
	struct phub_control_ckpt_dir dir;
	struct phub_engine_job *job;
	int saved = 0, rc;

	if (sp->p.checkpoint_dir == NULL)
		return -EINVAL;
	rc = phub_control_ckpt_open(&dir, sp->p.checkpoint_dir);
	if (rc != 0)
		return rc;
	soft_pbox_pause(sp, true);
	for (job = phub_engine_job_next(sp->engine, NULL); job != NULL && rc == 0;
	     job = phub_engine_job_next(sp->engine, job)) {
		struct phub_engine_job_info info;

		phub_engine_job_get_info(job, &info);
		if (info.iteration_min != info.iteration_max)
			rc = -EAGAIN;
	}
	for (job = phub_engine_job_next(sp->engine, NULL); job != NULL && rc == 0;
	     job = phub_engine_job_next(sp->engine, job)) {
		struct phub_control_ckpt_write w = { .job = job, .src = PHUB_ENGINE_CKPT_LIVE };
		struct phub_engine_job_info info;

		phub_engine_job_get_info(job, &info);
		w.iteration = info.iteration_min;
		phub_control_ckpt_write(&dir, &w);
		rc = w.rc;
		if (rc == 0)
			saved++;
	}
	soft_pbox_pause(sp, false);
	phub_control_ckpt_close(&dir);
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
soft_pbox_step(struct soft_pbox *sp)
{
	uint64_t one = 1;

	pthread_mutex_lock(&sp->lock);
	sp->steps++;
	if (write(sp->wake_fd, &one, sizeof(one)) < 0)
		abort();
	pthread_mutex_unlock(&sp->lock);
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
