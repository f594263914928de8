/* SPDX-License-Identifier: BSD-3-Clause */
/* The session: phub_connect(), phub_close(), the calls that submit and wait, and the tickets. */

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "client_priv.h"

uint64_t
client_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The first failure wins: later ones are consequences and would hide the cause. */
void
client_fail(struct phub *h, int error, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&h->lock);
	if (h->error == 0) {
		h->error = error;
		va_start(ap, fmt);
		vsnprintf(h->errmsg, sizeof(h->errmsg), fmt, ap);
		va_end(ap);
	}
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

void
client_set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static struct op **
ticket_bucket(struct phub *h, int ticket)
{
	return &h->pending[(unsigned int)ticket % CLIENT_TICKET_BUCKETS];
}

static bool
ticket_pending(struct phub *h, int ticket)
{
	for (struct op *op = *ticket_bucket(h, ticket); op != NULL; op = op->hnext)
		if (op->ticket == ticket)
			return true;
	return false;
}

/* Called by the progress thread once op has left every queue. */
void
client_op_finish(struct phub *h, struct op *op, int status)
{
	struct op **pp;

	/* The callback runs before waiters wake, so that they see what it did. */
	if (op->cb != NULL)
		op->cb(op->arg, op->ticket, status);
	pthread_mutex_lock(&h->lock);
	for (pp = ticket_bucket(h, op->ticket); *pp != NULL; pp = &(*pp)->hnext) {
		if (*pp == op) {
			*pp = op->hnext;
			break;
		}
	}
	h->n_pending--;
	if (status == 0)
		h->stats.ops_completed++;
	h->stats.inflight_bytes = h->inflight_bytes;
	h->pub_stats = h->stats;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	free(op);
}

static void
wake(struct phub *h)
{
	uint64_t one = 1;

	/* A full eventfd counter still wakes the reader: the error is of no concern. */
	if (write(h->wake_fd, &one, sizeof(one)) < 0)
		return;
}

static int
submit(struct phub *h, uint32_t key_id, enum op_type type, const void *grad, void *out,
		int priority, phub_done_fn cb, void *arg, bool initial)
{
	struct key *key;
	uint32_t index;
	struct op *op;
	int rc;

	if (h == NULL || priority < PHUB_PRIORITY_DEFAULT)
		return -EINVAL;
	if ((type != OP_PULL && grad == NULL && !initial) || (type == OP_PULL && out == NULL))
		return -EINVAL;
	if (phub_layout_key_index(h->layout, key_id, &index) != 0)
		return -ENOENT;
	key = &h->keys[index];
	op = calloc(1, sizeof(*op));
	if (op == NULL)
		return -ENOMEM;
	op->type = type;
	op->grad = grad;
	op->out = out;
	op->cb = cb;
	op->arg = arg;
	op->key = index;
	op->prio = priority == PHUB_PRIORITY_DEFAULT ? index : (uint32_t)priority;
	op->wire_prio = op->prio > UINT8_MAX ? UINT8_MAX : (uint8_t)op->prio;

	pthread_mutex_lock(&h->lock);
	if (h->error != 0 || h->stop || h->stale) {
		rc = h->error != 0 ? h->error : h->stop ? -ECANCELED : -ESTALE;
		pthread_mutex_unlock(&h->lock);
		free(op);
		return rc;
	}
	/* Iterations are fixed here, in the order the application called. */
	if (type == OP_PULL || initial) {
		op->iter = key->sub_iter;
	} else {
		op->iter = ++key->sub_iter;
		op->hyper = key->hyper;
		op->hyper_lr = key->hyper_lr;
		op->hyper_weight_decay = key->hyper_weight_decay;
	}
	do {
		if (h->next_ticket == INT32_MAX)
			h->tickets_wrapped = true;
		h->next_ticket = h->next_ticket == INT32_MAX ? 1 : h->next_ticket + 1;
	} while (ticket_pending(h, h->next_ticket));
	op->ticket = h->next_ticket;
	op->hnext = *ticket_bucket(h, op->ticket);
	*ticket_bucket(h, op->ticket) = op;
	h->n_pending++;
	if (h->sub_tail != NULL)
		h->sub_tail->next = op;
	else
		h->sub_head = op;
	h->sub_tail = op;
	rc = op->ticket;
	pthread_mutex_unlock(&h->lock);

	if (atomic_load(&h->sleeping))
		wake(h);
	return rc;
}

int
phub_pushpull(struct phub *h, uint32_t key_id, const void *grad, void *model_out,
		int priority, phub_done_fn cb, void *arg)
{
	return submit(h, key_id, OP_PUSHPULL, grad, model_out, priority, cb, arg, false);
}

int
phub_push(struct phub *h, uint32_t key_id, const void *grad, int priority, phub_done_fn cb,
		void *arg)
{
	return submit(h, key_id, OP_PUSH, grad, NULL, priority, cb, arg, false);
}

int
phub_pull(struct phub *h, uint32_t key_id, void *out, int priority, phub_done_fn cb, void *arg)
{
	return submit(h, key_id, OP_PULL, NULL, out, priority, cb, arg, false);
}

static void
deadline_after(struct timespec *ts, int timeout_ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += timeout_ms / 1000;
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/* Wait under h->lock until done(h, ticket) or the session failed; -ETIMEDOUT after timeout_ms. */
static int
wait_until(struct phub *h, int ticket, int timeout_ms)
{
	struct timespec until;
	int rc = 0;

	if (timeout_ms >= 0)
		deadline_after(&until, timeout_ms);
	pthread_mutex_lock(&h->lock);
	if (ticket > h->next_ticket && !h->tickets_wrapped)
		rc = -EINVAL;
	while (rc == 0) {
		if (h->error != 0) {
			rc = h->error;
			break;
		}
		if (h->stale) {
			rc = -ESTALE;
			break;
		}
		if (ticket > 0 ? !ticket_pending(h, ticket) : h->n_pending == 0)
			break;
		if (timeout_ms < 0) {
			pthread_cond_wait(&h->cond, &h->lock);
		} else if (pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT) {
			/* The last look decides: the ticket may have completed just now. */
			if (h->error == 0 && !h->stale &&
			    (ticket > 0 ? ticket_pending(h, ticket) : h->n_pending != 0)) {
				rc = -ETIMEDOUT;
				break;
			}
		}
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int
phub_wait(struct phub *h, int ticket, int timeout_ms)
{
	if (h == NULL || ticket <= 0)
		return -EINVAL;
	return wait_until(h, ticket, timeout_ms);
}

int
phub_wait_all(struct phub *h, int timeout_ms)
{
	if (h == NULL)
		return -EINVAL;
	return wait_until(h, 0, timeout_ms);
}

const char *
phub_last_error(const struct phub *h)
{
	if (h == NULL)
		return "no session";
	/* errmsg is written once, before error is set, and never again. */
	return h->errmsg;
}

int
phub_stats(struct phub *h, struct phub_stats *stats)
{
	if (h == NULL || stats == NULL)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	*stats = h->pub_stats;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

int
phub_info(struct phub *h, struct phub_info *info)
{
	if (h == NULL || info == NULL)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	/* A re-JOIN after a PBox restart changes the session under the lock. */
	pthread_mutex_lock(&h->lock);
	info->job_id = h->job_id;
	info->n_endpoints = h->n_endpoints;
	info->first_iteration = h->first_iteration;
	pthread_mutex_unlock(&h->lock);
	info->rank = h->rank;
	info->world_size = h->world_size;
	info->dtype = h->dtype;
	info->chunk_bytes = h->chunk_bytes;
	info->segment_elems = h->segment_elems;
	info->n_keys = h->n_keys;
	info->n_chunks = h->n_chunks;
	info->n_segments = h->n_segs;
	info->n_elems = phub_layout_elem_count(h->layout);
	return 0;
}

uint16_t
phub_world_size(struct phub *h)
{
	uint16_t n;

	if (h == NULL)
		return 0;
	pthread_mutex_lock(&h->lock);
	n = h->world_live;
	pthread_mutex_unlock(&h->lock);
	return n;
}

int
phub_world_change(struct phub *h, uint32_t i, struct phub_world_change *change)
{
	int rc = 0;

	if (h == NULL || change == NULL)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	if (i >= h->stats.world_changes || i >= CLIENT_MAX_CHANGES)
		rc = -ENOENT;
	else
		*change = h->changes[i];
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int
phub_rank_removed(struct phub *h, uint16_t rank, uint32_t *iteration)
{
	uint32_t from;

	if (h == NULL || rank >= h->world_size)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	from = h->removed_from[rank];
	pthread_mutex_unlock(&h->lock);
	if (from == UINT32_MAX)
		return 0;
	if (iteration != NULL)
		*iteration = from;
	return 1;
}

int
phub_resume(struct phub *h, uint32_t *iteration)
{
	int rc = 0;

	if (h == NULL)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	if (h->error != 0)
		rc = h->error;
	else if (!h->stale)
		rc = -EINVAL;
	else
		h->stale = false;
	if (rc == 0 && iteration != NULL)
		*iteration = h->first_iteration;
	pthread_mutex_unlock(&h->lock);
	return rc;
}

static bool
finite_nonneg(float x)
{
	return isfinite(x) && x >= 0.0f;
}

static int
params_check(const struct phub_connect_params *p, char *err, size_t errlen)
{
	struct in_addr a;

	if (p == NULL) {
		client_set_err(err, errlen, "no parameters");
		return -EINVAL;
	}
	if (p->server == NULL || inet_pton(AF_INET, p->server, &a) != 1) {
		client_set_err(err, errlen, "server '%s' is not an IPv4 address",
				p->server != NULL ? p->server : "(null)");
		return -EINVAL;
	}
	if (p->bind_addr != NULL && inet_pton(AF_INET, p->bind_addr, &a) != 1) {
		client_set_err(err, errlen, "bind_addr '%s' is not an IPv4 address", p->bind_addr);
		return -EINVAL;
	}
	if (p->job == NULL || p->job[0] == '\0' || strlen(p->job) >= PHUB_WIRE_JOB_NAME_LEN) {
		client_set_err(err, errlen, "job name must have 1 to %d bytes",
				PHUB_WIRE_JOB_NAME_LEN - 1);
		return -EINVAL;
	}
	for (const char *c = p->job; *c != '\0'; c++) {
		if (*c < 0x21 || *c > 0x7e) {
			client_set_err(err, errlen, "job name '%s' is not printable ASCII", p->job);
			return -EINVAL;
		}
	}
	if (p->world_size == 0 || p->rank >= p->world_size) {
		client_set_err(err, errlen, "rank %u is not below world_size %u", p->rank,
				p->world_size);
		return -EINVAL;
	}
	if (p->dtype < 0 || p->dtype >= PHUB_DTYPE_COUNT) {
		client_set_err(err, errlen, "dtype %d is not fp32 (0), fp16 (1) or bf16 (2)",
				p->dtype);
		return -EINVAL;
	}
	if (p->keys == NULL || p->n_keys == 0) {
		client_set_err(err, errlen, "no keys");
		return -EINVAL;
	}
	for (uint32_t k = 0; k < p->n_keys; k++) {
		if (p->keys[k].n_elems == 0) {
			client_set_err(err, errlen, "keys[%u] (key id %u) has no elements", k,
					p->keys[k].key_id);
			return -EINVAL;
		}
	}
	if (!finite_nonneg(p->lr) || !finite_nonneg(p->momentum) ||
	    !finite_nonneg(p->weight_decay) || !finite_nonneg(p->beta1) ||
	    !finite_nonneg(p->beta2) || !finite_nonneg(p->eps)) {
		client_set_err(err, errlen, "optimizer hyper-parameters must be finite and >= 0");
		return -EINVAL;
	}
	if (p->mtu != 0 && p->mtu < PHUB_WIRE_MIN_MTU) {
		client_set_err(err, errlen, "mtu %u is below %d", p->mtu, PHUB_WIRE_MIN_MTU);
		return -EINVAL;
	}
	if ((p->flags & ~(PHUB_CONNECT_F_CSUM | PHUB_CONNECT_F_DETERMINISTIC |
			PHUB_CONNECT_F_ELASTIC | PHUB_CONNECT_F_NO_OFFLOAD |
			PHUB_CONNECT_F_AUTH | PHUB_CONNECT_F_NO_ACKV)) != 0) {
		client_set_err(err, errlen, "unknown flags 0x%x",
				p->flags & ~(PHUB_CONNECT_F_CSUM | PHUB_CONNECT_F_DETERMINISTIC |
					PHUB_CONNECT_F_ELASTIC | PHUB_CONNECT_F_NO_OFFLOAD |
					PHUB_CONNECT_F_AUTH | PHUB_CONNECT_F_NO_ACKV));
		return -EINVAL;
	}
	return 0;
}

int
phub_set_key_hyper(struct phub *h, uint32_t key_id, const struct phub_key_hyper *hyper)
{
	struct key *key;
	uint32_t index;
	size_t datagram;
	int rc = 0;

	if (h == NULL || (hyper != NULL && (!finite_nonneg(hyper->lr) ||
			!finite_nonneg(hyper->weight_decay))))
		return -EINVAL;
	if (phub_layout_key_index(h->layout, key_id, &index) != 0)
		return -ENOENT;
	/* A full segment under the longer header must still fit the path MTU (IPv4 + UDP). */
	datagram = 20 + 8 + PHUB_WIRE_HDR_LEN_HYPER + (h->auth ? PHUB_WIRE_AUTH_TRAILER_LEN : 0) +
		(size_t)h->segment_elems * h->elem_size;
	if (hyper != NULL && datagram > h->mtu)
		return -EMSGSIZE;
	key = &h->keys[index];
	pthread_mutex_lock(&h->lock);
	if (h->error != 0) {
		rc = h->error;
	} else {
		key->hyper = hyper != NULL;
		key->hyper_lr = hyper != NULL ? hyper->lr : 0;
		key->hyper_weight_decay = hyper != NULL ? hyper->weight_decay : 0;
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

static int
socket_open(struct phub *h, const struct phub_connect_params *p, char *err, size_t errlen)
{
	struct sockaddr_in local = { .sin_family = AF_INET };
	int size = CLIENT_SOCKET_BUFFER;
	uint16_t port = p->server_port != 0 ? p->server_port : PHUB_DEFAULT_PORT;

	h->mtu = p->mtu != 0 ? p->mtu : CLIENT_MTU_DEFAULT;
	h->ctrl.sin_family = AF_INET;
	h->ctrl.sin_port = htons(port);
	inet_pton(AF_INET, p->server, &h->ctrl.sin_addr);
	snprintf(h->server_name, sizeof(h->server_name), "%s:%u", p->server, port);
	if (p->bind_addr != NULL)
		inet_pton(AF_INET, p->bind_addr, &local.sin_addr);

	h->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (h->fd < 0) {
		client_set_err(err, errlen, "socket: %s", strerror(errno));
		return -errno;
	}
	/*
	 * MODEL broadcasts are not windowed: give them room. The kernel caps SO_RCVBUF at
	 * net.core.rmem_max (4 MiB here, about 1,700 MODEL datagrams: 60 ms of a PBox's
	 * broadcast); a process allowed to (CAP_NET_ADMIN) takes CLIENT_SOCKET_RCVBUF_FORCE
	 * beyond it, so that a worker descheduled for a while on a loaded machine does not lose
	 * MODELs it must then PULL one by one (2% of a ResNet-50 ring job's MODELs were lost at
	 * two workers sharing 2 loaded cores, RcvbufErrors).
	 */
	if (setsockopt(h->fd, SOL_SOCKET, SO_RCVBUFFORCE, &(int){ CLIENT_SOCKET_RCVBUF_FORCE },
		       sizeof(int)) != 0)
		setsockopt(h->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	setsockopt(h->fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	if (bind(h->fd, (struct sockaddr *)&local, sizeof(local)) != 0) {
		client_set_err(err, errlen, "bind %s: %s",
				p->bind_addr != NULL ? p->bind_addr : "0.0.0.0",
				strerror(errno));
		return -errno;
	}
	h->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (h->wake_fd < 0) {
		client_set_err(err, errlen, "eventfd: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

static void
session_free(struct phub *h)
{
	if (h->fd >= 0)
		close(h->fd);
	if (h->wake_fd >= 0)
		close(h->wake_fd);
	client_node_free(h);
	client_join_free(h);
	client_auth_free(h);
	phub_layout_free(h->layout);
	free(h->endpoints);
	free(h->keys);
	free(h->segs);
	free(h->chunk_first_seg);
	free(h->zeros);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

static struct phub *
session_alloc(void)
{
	pthread_condattr_t attr;
	struct phub *h = calloc(1, sizeof(*h));

	if (h == NULL)
		return NULL;
	h->fd = -1;
	h->wake_fd = -1;
	pthread_mutex_init(&h->lock, NULL);
	/* Waits measure their timeout on the monotonic clock, immune to clock steps. */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cond, &attr);
	pthread_condattr_destroy(&attr);
	return h;
}

/* Stop the progress thread: pending tickets complete with -ECANCELED. */
static void
thread_stop(struct phub *h)
{
	if (!h->thread_started)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_mutex_unlock(&h->lock);
	wake(h);
	pthread_join(h->thread, NULL);
	h->thread_started = false;
}

/* The initial round's progress: what moves when it does. */
static uint64_t
initial_progress(const struct phub_stats *st)
{
	return st->initial_acks + st->initial_models;
}

/*
 * Iteration 0 of a new job: every rank pushes its initial weights and waits for the model, so
 * that phub_connect() returns once all ranks are in (rank 0's weights are the model). It fails
 * when nothing moves (no ACK, no MODEL of iteration 0) for connect_timeout_ms, not when it
 * merely takes long: a large model on a slow link, or ranks that come one by one.
 */
static int
initial_round(struct phub *h, const struct phub_connect_params *p, char *err, size_t errlen)
{
	uint64_t bound = (uint64_t)h->connect_timeout_ms * 1000000u;
	struct phub_stats st;
	uint64_t seen, moved_ns;
	int rc;

	for (uint32_t k = 0; k < h->n_keys; k++) {
		const void *w = p->initial != NULL ? p->initial[k] : NULL;

		rc = submit(h, h->keys[k].key_id, OP_PUSHPULL, w, NULL, PHUB_PRIORITY_DEFAULT,
				NULL, NULL, true);
		if (rc < 0)
			break;
	}
	phub_stats(h, &st);
	seen = initial_progress(&st);
	moved_ns = client_now_ns();
	for (;;) {
		uint64_t now;

		rc = phub_wait_all(h, CLIENT_CONNECT_SLICE_MS);
		if (rc != -ETIMEDOUT)
			break;
		now = client_now_ns();
		phub_stats(h, &st);
		if (initial_progress(&st) != seen) {
			seen = initial_progress(&st);
			moved_ns = now;
		}
		if (p->progress != NULL)
			p->progress(p->progress_arg, &st);
		if (now - moved_ns >= bound)
			break;
	}
	if (rc == -ETIMEDOUT)
		client_set_err(err, errlen,
				"the initial-model round of job '%s' stalled: nothing for %u ms"
				" (%" PRIu64 " of %" PRIu64 " segments in); have all %u ranks"
				" joined PBox %s?", h->job_name, h->connect_timeout_ms,
				st.initial_models, (uint64_t)h->n_segs, h->world_size,
				h->server_name);
	else if (rc != 0)
		client_set_err(err, errlen, "the initial-model round failed: %s",
				phub_last_error(h));
	return rc;
}

struct phub *
phub_connect(const struct phub_connect_params *p, char *err, size_t errlen)
{
	struct phub *h;
	int rc;

	client_set_err(err, errlen, "%s", "");
	rc = params_check(p, err, errlen);
	if (rc != 0) {
		errno = -rc;
		return NULL;
	}
	h = session_alloc();
	if (h == NULL) {
		client_set_err(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	h->start_ns = client_now_ns();
	h->rank = p->rank;
	h->world_size = p->world_size;
	h->world_live = p->world_size;
	h->stats.world_size = p->world_size;
	for (unsigned int r = 0; r < CLIENT_MAX_RANKS; r++)
		h->removed_from[r] = UINT32_MAX;
	h->dtype = (uint8_t)p->dtype;
	h->elem_size = (uint32_t)phub_dtype_size((enum phub_dtype)p->dtype);
	/* The MAC of an authenticated session covers what the CRC would: no CRC then. */
	h->tx_flags = (p->flags & (PHUB_CONNECT_F_CSUM | PHUB_CONNECT_F_AUTH)) ==
		PHUB_CONNECT_F_CSUM ? PHUB_WIRE_F_CSUM : 0;
	h->gso_on = (p->flags & PHUB_CONNECT_F_NO_OFFLOAD) == 0;
	h->gro_on = (p->flags & PHUB_CONNECT_F_NO_OFFLOAD) == 0;
	h->window_bytes = p->window_bytes != 0 ? p->window_bytes : CLIENT_WINDOW_DEFAULT;
	h->rto_min_ns = (uint64_t)(p->rto_min_ms != 0 ? p->rto_min_ms : CLIENT_RTO_MIN_MS) *
		1000000u;
	h->rto_max_ns = (uint64_t)(p->rto_max_ms != 0 ? p->rto_max_ms : CLIENT_RTO_MAX_MS) *
		1000000u;
	if (h->rto_max_ns < h->rto_min_ns)
		h->rto_max_ns = h->rto_min_ns;
	h->dead_ns = (uint64_t)(p->dead_ms != 0 ? p->dead_ms : CLIENT_DEAD_MS) * 1000000u;
	h->connect_timeout_ms = p->connect_timeout_ms != 0 ? p->connect_timeout_ms :
		CLIENT_CONNECT_TIMEOUT_MS;
	snprintf(h->job_name, sizeof(h->job_name), "%s", p->job);

	rc = client_auth_init(h, p);
	if (rc == -EINVAL)
		client_set_err(err, errlen, "the job's key (%s) is not 64 hex digits (a 256-bit "
				"key, as jobs[].key)", p->key != NULL ? "the key option" : "PHUB_KEY");
	else if (rc != 0)
		client_set_err(err, errlen, "libsodium: no source of randomness");
	if (rc == 0)
		rc = socket_open(h, p, err, errlen);
	if (rc == 0)
		rc = client_join(h, p, err, errlen);
	if (rc == 0) {
		rc = client_node_init(h);
		if (rc != 0)
			client_set_err(err, errlen, "out of memory for %u segments", h->n_segs);
	}
	if (rc == 0) {
		rc = -pthread_create(&h->thread, NULL, client_node_main, h);
		if (rc != 0)
			client_set_err(err, errlen, "pthread_create: %s", strerror(-rc));
		else
			h->thread_started = true;
	}
	if (rc == 0 && p->progress != NULL) {
		struct phub_stats st;

		phub_stats(h, &st);
		p->progress(p->progress_arg, &st);
	}
	if (rc == 0 && h->first_iteration == 0)
		rc = initial_round(h, p, err, errlen);
	if (rc != 0)
		goto fail;
	return h;

fail:
	thread_stop(h);
	/* A session the PBox knows is left, so that the rank may join again at once. */
	if (h->token != 0 && rc != -ECONNRESET)
		client_leave(h);
	session_free(h);
	errno = -rc;
	return NULL;
}

void
phub_close(struct phub *h)
{
	if (h == NULL)
		return;
	thread_stop(h);
	client_leave(h);
	session_free(h);
}
