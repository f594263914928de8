/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The soft PBox: the appliance's control plane (lib/control) and engine (lib/engine) behind
 * kernel UDP sockets, one thread, no DPDK and no root, so that libphub, phub-bench and the Python
 * binding are tested on any machine against the appliance's own protocol logic. Not for
 * production.
 */

#ifndef PHUB_SOFT_PBOX_H
#define PHUB_SOFT_PBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/phub_control.h"
#include "wire/phub_wire.h"

enum {
	SOFT_PBOX_MAX_LCORES = 64,
};

struct soft_pbox_params {
	const char *bind_addr;		/* IPv4 to listen on; NULL: 127.0.0.1 */
	uint16_t port;			/* control port; data ports port+1+k. 0: ephemeral */
	uint16_t n_lcores;		/* data ports, chunks placed over them; 0: 1 */
	uint32_t mtu;			/* sets the segment size; 0: 1500 */
	uint32_t chunk_bytes;		/* for a JOIN that asks for 0; 0: the layout default */
	double loss;			/* fraction of datagrams dropped on receive and send */
	uint64_t seed;			/* of the loss draws; 0: 1 */
	uint32_t log_cap;		/* PUSH arrivals kept for soft_pbox_arrivals(); 0: 65536 */
	/*
	 * Checkpoints (the appliance's files, lib/control): every job saved here is restored at
	 * start, as a restarted phub-pbox does; soft_pbox_checkpoint() saves there. NULL: none.
	 */
	const char *checkpoint_dir;
	/*
	 * lib/control's timeouts.worker_dead_ms: a job that waits this long on a silent rank ends
	 * with ERROR WORKER_TIMEOUT, as on the appliance. 0: 10000.
	 */
	uint32_t worker_dead_ms;
	bool log_stderr;		/* the control plane's log lines on stderr */
	/* Jobs declared as in the appliance's config (jobs[]), e.g. with auth; NULL: none. */
	const struct phub_control_declared_job *declared;
	unsigned int n_declared;
};

/* One PUSH as it arrived (after receive loss), in arrival order. */
struct soft_pbox_arrival {
	uint32_t job_id;
	uint32_t chunk_id;
	uint32_t iteration;
	uint16_t rank;
	uint16_t seg_index;
	uint8_t priority;
	bool retransmit;
};

struct soft_pbox_stats {
	uint64_t rx_datagrams;
	uint64_t tx_datagrams;
	uint64_t rx_lost;		/* dropped on receive by the loss injection */
	uint64_t tx_lost;		/* dropped on send by the loss injection */
	uint64_t joins;			/* JOINs answered with JOIN_ACK */
	uint64_t errors_sent;
	uint64_t pushes;		/* engine: PUSH added */
	uint64_t duplicates;
	uint64_t retransmits_seen;
	uint64_t models_resent;
	uint64_t pulls;
	uint64_t pings;
	uint64_t leaves;
	uint64_t acks;			/* ACK datagrams sent (ranks without ACKV) */
	uint64_t ackv_sent;		/* ACKV datagrams sent (ranks that asked for ACKV) */
	uint64_t ackv_entries;		/* ACKs they carried */
	uint64_t acks_in_model;		/* ACKs a MODEL of the same batch stood for */
	uint64_t drops[PHUB_DROP_REASON_MAX];
	uint32_t jobs;			/* jobs alive */
};

struct soft_pbox;

/* Bind the sockets and start the thread; NULL and errno (EADDRINUSE, EINVAL, ENOMEM...). */
struct soft_pbox *soft_pbox_start(const struct soft_pbox_params *params);

/* Stop the thread, free every job, close the sockets. sp may be NULL. */
void soft_pbox_stop(struct soft_pbox *sp);

/* The control port (useful when params.port was 0) and the data port of lcore k. */
uint16_t soft_pbox_port(const struct soft_pbox *sp);
uint16_t soft_pbox_data_port(const struct soft_pbox *sp, unsigned int lcore);

/*
 * Stop (true) or resume (false) reading the sockets: datagrams wait in the kernel's buffers,
 * as if the PBox were slow. Returns once the thread has taken the change.
 */
void soft_pbox_pause(struct soft_pbox *sp, bool paused);

/*
 * While paused: one pass over the sockets (one batch of what is queued on each, answered),
 * then paused again; returns at once. However late the caller runs, at most that much moves.
 */
void soft_pbox_step(struct soft_pbox *sp);

/* Copy up to cap arrivals from the start of the log; returns how many the log holds. */
size_t soft_pbox_arrivals(struct soft_pbox *sp, struct soft_pbox_arrival *out, size_t cap);

/*
 * Save the live state of every job into params.checkpoint_dir as the appliance names and writes
 * its files (lib/control), the thread paused meanwhile: a test makes the checkpoint a restarted
 * soft PBox restores. The number of jobs saved, or -errno: -EINVAL without a directory, -EAGAIN
 * when a job is in the middle of an iteration (nothing is saved then).
 */
int soft_pbox_checkpoint(struct soft_pbox *sp);

/* A snapshot of the counters. */
void soft_pbox_get_stats(struct soft_pbox *sp, struct soft_pbox_stats *stats);

#endif /* PHUB_SOFT_PBOX_H */
