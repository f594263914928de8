/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The soft PBox's life and test controls: sockets bound, the control plane made, the thread
 * started and stopped, pause and step, the arrival log, the counters, checkpoints.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "soft_pbox_priv.h"

static int restore_dir(struct soft_pbox *sp);

void
soft_pbox_stats_publish(struct soft_pbox *sp)
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
	cp.ops = &soft_pbox_control_ops;
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
	rc = -pthread_create(&sp->thread, NULL, soft_pbox_thread, sp);
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
