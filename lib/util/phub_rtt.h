/* SPDX-License-Identifier: BSD-3-Clause */
/* RFC 6298: the round-trip estimator and retransmission timeout libphub and phub-loadgen share. */

#ifndef PHUB_RTT_H
#define PHUB_RTT_H

#include <stdint.h>

/* The G of RFC 6298: the senders' clocks and their scheduling on a shared CPU. */
#define PHUB_RTT_GRANULARITY_NS 100000u

struct phub_rtt {
	uint64_t srtt_ns;		/* 0 until the first sample */
	uint64_t rttvar_ns;
	uint64_t rttvar_fell_ns;	/* when RTTVAR last went down */
};

/*
 * One round-trip sample of r_ns taken at now_ns (any monotonic clock in ns).
 *
 * RFC 6298's gains assume a sample per round trip; a PUSH's ACK gives one, hundreds per round
 * trip on a busy link, and RTTVAR then forgot a delay spike (a PBox or worker thread waiting for
 * a CPU) within a millisecond, so that the next spike expired RTOs again and sent probes the
 * PBox answered as duplicates or with replayed MODELs. As Linux's TCP does with its mdev_max,
 * RTTVAR rises at once with every sample but falls at most once per SRTT.
 */
static inline void
phub_rtt_sample(struct phub_rtt *e, uint64_t r_ns, uint64_t now_ns)
{
	if (e->srtt_ns == 0) {
		e->srtt_ns = r_ns;
		e->rttvar_ns = r_ns / 2;
		e->rttvar_fell_ns = now_ns;
	} else {
		uint64_t delta = e->srtt_ns > r_ns ? e->srtt_ns - r_ns : r_ns - e->srtt_ns;
		uint64_t var = (3 * e->rttvar_ns + delta) / 4;

		if (var >= e->rttvar_ns) {
			e->rttvar_ns = var;
		} else if (now_ns - e->rttvar_fell_ns >= e->srtt_ns) {
			e->rttvar_ns = var;
			e->rttvar_fell_ns = now_ns;
		}
		e->srtt_ns = (7 * e->srtt_ns + r_ns) / 8;
	}
}

/* SRTT + max(G, 4 RTTVAR), never below min_ns nor above max_ns. */
static inline uint64_t
phub_rtt_rto(const struct phub_rtt *e, uint64_t min_ns, uint64_t max_ns)
{
	uint64_t var = 4 * e->rttvar_ns;
	uint64_t rto = e->srtt_ns + (var > PHUB_RTT_GRANULARITY_NS ? var : PHUB_RTT_GRANULARITY_NS);

	if (rto < min_ns)
		rto = min_ns;
	return rto > max_ns ? max_ns : rto;
}

#endif /* PHUB_RTT_H */
