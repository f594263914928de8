/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The PBox's ACK coalescing: the ACKs one receive burst owes, kept per rank and sent as ACKV
 * datagrams at the burst's end, or dropped when the segment's MODEL to that rank acknowledges
 * the PUSH instead (docs/protocol.md section 3, "ACKV"). DPDK-free: the appliance's data lcores
 * and the soft PBox hold one batch each and send what the flush hands them.
 */

#ifndef PHUB_ACKV_H
#define PHUB_ACKV_H

#include <stdbool.h>
#include <stdint.h>

#include "wire/phub_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ACKs a batch holds between two flushes; a caller that finds it full flushes first. */
#define PHUB_ACKV_BATCH_MAX 256

/* One ACK owed: to whom (job, wire rank, the caller's TX port) and which PUSH. */
struct phub_ackv_pending {
	void *job;			/* the caller's handle of the job, opaque here */
	uint32_t job_id;
	uint16_t rank;			/* the rank as the worker numbers itself (wire rank) */
	uint16_t port;			/* the caller's TX port for that rank */
	bool gone;			/* taken by a MODEL, or already sent */
	struct phub_wire_ackv_entry e;
};

struct phub_ackv_batch {
	unsigned int n;			/* entries added since the batch was last empty */
	unsigned int live;		/* of them, not taken */
	uint64_t frames;		/* ACKV datagrams handed to send, ever */
	uint64_t entries;		/* entries in them */
	uint64_t taken;			/* entries a MODEL acknowledged instead */
	struct phub_ackv_pending p[PHUB_ACKV_BATCH_MAX];
};

/* Send one ACKV of n (>= 1) entries, all to the same job and rank, in the order they came. */
typedef void (*phub_ackv_send_fn)(void *arg, const struct phub_ackv_pending *to,
		const struct phub_wire_ackv_entry *e, unsigned int n);

void phub_ackv_init(struct phub_ackv_batch *b);

static inline bool
phub_ackv_full(const struct phub_ackv_batch *b)
{
	return b->n == PHUB_ACKV_BATCH_MAX;
}

/* Owe the ACK of one PUSH; the batch must not be full (phub_ackv_full()). */
void phub_ackv_add(struct phub_ackv_batch *b, void *job, uint32_t job_id, uint16_t rank,
		uint16_t port, const struct phub_wire_ackv_entry *e);

/*
 * The MODEL of (chunk, seg_index, iteration) goes to rank now: the ACKs owed to rank for that
 * segment and iteration are no longer sent. True when there was one, with the newest of their
 * stamps (serial order) in *aux, which that MODEL echoes for the rank's RTT sample.
 */
bool phub_ackv_take(struct phub_ackv_batch *b, uint32_t job_id, uint16_t rank,
		uint32_t chunk_id, uint16_t seg_index, uint32_t iteration, uint32_t *aux);

/*
 * Hand every ACK still owed to send: one call per rank with up to max_per_frame (>= 1) entries,
 * more calls when they do not fit, ranks in the order of their first ACK still owed. The batch is
 * empty afterwards. Returns the calls made.
 */
unsigned int phub_ackv_flush(struct phub_ackv_batch *b, unsigned int max_per_frame,
		phub_ackv_send_fn send, void *arg);

/*
 * Hand the ACKs still owed to one rank to send, as phub_ackv_flush() does for all: before a
 * MODEL that echoes a stamp goes to that rank, so that no ACK of an earlier PUSH arrives after
 * the answer to a later one (the worker would take the earlier PUSH for lost, RFC 8985's rule).
 * Returns the calls made.
 */
unsigned int phub_ackv_flush_rank(struct phub_ackv_batch *b, uint32_t job_id, uint16_t rank,
		unsigned int max_per_frame, phub_ackv_send_fn send, void *arg);

#ifdef __cplusplus
}
#endif

#endif /* PHUB_ACKV_H */
