/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The soft PBox's data path: kernel UDP sockets (one control socket, one per "lcore", all read
 * by one thread, with optional seeded loss) around the appliance's own adapter core
 * (lib/dataplane: requests, ownership, ACK/ACKV/MODEL headers, fan-out), engine (lib/engine) and
 * control plane (lib/control). Its life and test controls are in soft_pbox_api.c.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "soft_pbox_priv.h"

uint64_t
soft_pbox_now_ns(void *ctx)
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

/*
 * Counters are published before every send: a test that has seen an answer sees the counts
 * of everything that led to it.
 */
static void
stats_publish_locked(struct soft_pbox *sp)
{
	pthread_mutex_lock(&sp->lock);
	soft_pbox_stats_publish(sp);
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

/*
 * A datagram from the socket of lcore sock - 1 to dst; sealed on that server's lane (for the
 * engine's local rank) when the core set AUTH.
 */
static void
data_send(struct soft_pbox *sp, unsigned int sock, const struct phub_engine_peer *dst,
		struct phub_engine_job *job, uint16_t rank, const struct phub_wire_msg *msg,
		const void *payload, uint32_t payload_crc)
{
	int fd = sp->fds[sock];
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
	hdr_len = phub_wire_hdr_encode(sp->thdr[i], sizeof(sp->thdr[i]), msg, payload_crc);
	if (hdr_len < 0)
		return;
	if ((msg->flags & PHUB_WIRE_F_AUTH) &&
	    !phub_engine_auth_tx(job, rank, phub_dataplane_lane(sock - 1),
			(uint16_t)phub_dataplane_lane(sock - 1), sp->thdr[i], (size_t)hdr_len,
			payload, msg->payload_len))
		return;
	sp->tdst[i] = (struct sockaddr_in){ .sin_family = AF_INET,
		.sin_addr.s_addr = htonl(dst->ipv4), .sin_port = htons(dst->udp_port) };
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

const struct phub_control_ops soft_pbox_control_ops = {
	.now_ns = soft_pbox_now_ns,
	.send = control_send,
	.log = control_log_line,
};

/* ---- PUSH, PULL ---- */

/* One ACKV (phub_ackv_flush()'s send), from the socket of the lcore that took the PUSHes. */
static void
ackv_send(void *arg, const struct phub_ackv_pending *to, const struct phub_wire_ackv_entry *e,
		unsigned int n)
{
	struct soft_pbox *sp = arg;
	struct phub_engine_peer peer;
	struct phub_wire_msg m;
	int fd = sp->fds[to->port];
	uint16_t rank;

	if (!phub_dataplane_ackv_hdr(to, n, &m, &peer, &rank))
		return;
	/* The body lives in the send slot data_send() will take, until the batch is sent. */
	if (sp->tn != 0 && sp->tfd != fd)
		data_flush(sp);
	phub_wire_ackv_put(sp->tackv[sp->tn], e, n);
	m.payload = sp->tackv[sp->tn];
	sp->stats.ackv_sent++;
	sp->stats.ackv_entries += n;
	data_send(sp, to->port, &peer, to->job, rank, &m, m.payload,
			(m.flags & PHUB_WIRE_F_CSUM) ? phub_wire_csum_payload(m.payload,
					m.payload_len) : 0);
}

/* The ACKs the batch owes, one ACKV per rank. */
static void
ackv_flush(struct soft_pbox *sp)
{
	phub_ackv_flush(&sp->ackv, phub_wire_ackv_max_entries(ACKV_MTU), ackv_send, sp);
}

/*
 * A MODEL to every joined rank (all) or the answer from kept state to msg's sender, from the
 * socket of lcore sock - 1 (the core's fan-out: headers, CSUM, ACKs a MODEL stands for).
 */
static void
send_models(struct soft_pbox *sp, unsigned int sock, struct phub_engine_job *job,
		const struct phub_wire_msg *msg, const struct phub_engine_reply *reply, bool all)
{
	const struct phub_dataplane_ackv owed = {
		.batch = &sp->ackv, .max_entries = phub_wire_ackv_max_entries(ACKV_MTU),
		.send = ackv_send, .arg = sp,
	};
	struct phub_dataplane_fanout fan;

	phub_dataplane_fanout_init(&fan, job, msg, reply, all, &owed);
	while (phub_dataplane_fanout_next(&fan))
		data_send(sp, sock, &fan.peer, job, fan.rank, &fan.hdr,
				reply->model, fan.payload_crc);
	sp->stats.acks_in_model += fan.acks_in_model;
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

/*
 * A PUSH or PULL on the socket of lcore sock - 1, as the appliance's lcores take it: a chunk
 * another lcore owns is handled by its owner (here the same thread), counted as wrong_lcore.
 */
static void
on_data(struct soft_pbox *sp, unsigned int sock, const struct sockaddr_in *src,
		const uint8_t *dgram, const struct phub_wire_msg *msg)
{
	struct phub_engine_peer from = {
		.ipv4 = ntohl(src->sin_addr.s_addr), .udp_port = ntohs(src->sin_port),
	};
	struct phub_engine_request req;
	struct phub_engine_reply reply;
	struct phub_engine_job *job;
	enum phub_drop_reason why;
	uint32_t server;

	why = phub_dataplane_route(sp->engine, msg, &job, &server);
	if (why == PHUB_DROP_OK && server != sock - 1)
		sp->estats.drops[PHUB_DROP_WRONG_LCORE]++;
	if (why == PHUB_DROP_OK)
		why = phub_dataplane_auth_rx(job, msg, dgram, server);
	if (why != PHUB_DROP_OK) {
		sp->estats.drops[why]++;
		return;
	}
	phub_dataplane_request(msg, from.ipv4, from.udp_port, soft_pbox_now_ns(NULL), &req);
	if (msg->opcode == PHUB_WIRE_OP_PUSH) {
		log_arrival(sp, msg);
		phub_engine_push(job, &req, &reply, &sp->estats);
	} else {
		phub_engine_pull(job, &req, &reply, &sp->estats);
	}
	if ((reply.actions & PHUB_ENGINE_ACK) &&
	    phub_dataplane_rank_wants(job, msg->worker_rank, PHUB_ENGINE_PEER_F_ACKV)) {
		struct phub_wire_ackv_entry e;

		phub_dataplane_ackv_entry(msg, &e);
		if (phub_ackv_full(&sp->ackv))
			ackv_flush(sp);
		phub_ackv_add(&sp->ackv, job, msg->job_id, msg->worker_rank, (uint16_t)sock, &e);
	} else if (reply.actions & PHUB_ENGINE_ACK) {
		struct phub_wire_msg ack;
		uint16_t rank = 0;

		phub_dataplane_ack(job, msg, &ack, &rank);
		sp->stats.acks++;
		data_send(sp, sock, &from, job, rank, &ack, NULL, 0);
	}
	if (reply.actions & (PHUB_ENGINE_MODEL_ONE | PHUB_ENGINE_MODEL_ALL))
		send_models(sp, 1 + server, job, msg, &reply,
				(reply.actions & PHUB_ENGINE_MODEL_ALL) != 0);
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

	phub_dataplane_elastic_about(c->job, what, &about);
	phub_layout_chunk_server(phub_engine_job_layout(c->job), what->chunk_id, &server);
	send_models(c->sp, 1 + server, c->job, &about, &what->reply, true);
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

void *
soft_pbox_thread(void *arg)
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
		soft_pbox_stats_publish(sp);
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
