/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The soft PBox's state, shared by its data path (soft_pbox.c) and its life and test controls
 * (soft_pbox_api.c). Private to tests/support.
 */

#ifndef PHUB_SOFT_PBOX_PRIV_H
#define PHUB_SOFT_PBOX_PRIV_H

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "control/phub_control.h"
#include "dataplane/phub_dataplane.h"
#include "engine/phub_ackv.h"
#include "engine/phub_engine.h"

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

/* The clock of the control plane and the engine's requests (CLOCK_MONOTONIC). */
uint64_t soft_pbox_now_ns(void *ctx);

/* lib/control's clock, send (by the socket the question came in on) and log. */
extern const struct phub_control_ops soft_pbox_control_ops;

/* The thread: every socket read, answered, the control plane's timers run. */
void *soft_pbox_thread(void *arg);

/* The counters as soft_pbox_get_stats() gives them, under sp->lock. */
void soft_pbox_stats_publish(struct soft_pbox *sp);

#endif /* PHUB_SOFT_PBOX_PRIV_H */
