/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The memif gate: keeps DPDK's net_memif control handlers (EAL interrupt thread) and the data
 * lcores' bursts on memif ports from running at the same time, in any DPDK program of ours that
 * polls a memif port (phub-pbox's data lcores, phub-loadgen's --reflect floor servers).
 *
 * Why: when a memif peer leaves, net_memif (22.11, and upstream as of this writing) clears its
 * "connected" flag and munmaps the shared region from the interrupt thread at once, without
 * waiting for a burst that already passed the flag check; that burst then faults on the ring.
 * Seen as SIGSEGV in eth_memif_rx with the interrupt thread inside memif_free_regions, in
 * phub-pbox, phub-loadgen --reflect and dpdk-testpmd alike (docs/history/performance-log.md,
 * "Pitfalls found on the way").
 *
 * How: the interrupt thread runs its callbacks one at a time, so while it sits in an alarm
 * callback of ours no memif handler can run. The callback opens the gate, sleeps a while,
 * closes the gate, waits until no registered lcore is inside a gated section, and arms itself
 * again a little later; in between, the interrupt thread serves memif (connects, disconnects)
 * while the gated lcores leave memif ports alone. Each loop turn of a gated lcore is one
 * section: phub_memif_gate_enter() announces it, then looks at the gate (Dekker's order, both
 * sequentially consistent, so the closing side either sees the lcore inside or the lcore sees
 * the gate shut). One gate a process.
 */

#ifndef PHUB_MEMIF_GATE_H
#define PHUB_MEMIF_GATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The interrupt thread sleeps this long with the gate open ... */
#define PHUB_MEMIF_GATE_OPEN_US 10000
/* ... then serves its other callbacks for at least this long with the gate shut. */
#define PHUB_MEMIF_GATE_SHUT_US 100

/* Open while the interrupt thread is parked in the gate's callback. */
extern atomic_bool phub_memif_gate_open;

/* Whether a port is a net_memif one. */
bool phub_port_is_memif(uint16_t port_id);

/*
 * Start the gate for n lcores, each with its in-section flag (written by that lcore only). The
 * flags must outlive phub_memif_gate_fini. 0, -EINVAL (n is 0 or too large), -EALREADY, or
 * the alarm's error.
 */
int phub_memif_gate_init(atomic_bool *const *in_section, uint16_t n);

/* Stop the gate (waits for a running turn of the interrupt thread); a no-op when not started. */
void phub_memif_gate_fini(void);

/*
 * Before a loop turn that touches memif ports: true when the lcore may (it must then call
 * phub_memif_gate_leave at the turn's end), false when it must leave them alone this turn.
 */
static inline bool
phub_memif_gate_enter(atomic_bool *in_section)
{
	atomic_store(in_section, true);
	if (atomic_load(&phub_memif_gate_open))
		return true;
	atomic_store_explicit(in_section, false, memory_order_release);
	return false;
}

static inline void
phub_memif_gate_leave(atomic_bool *in_section)
{
	atomic_store_explicit(in_section, false, memory_order_release);
}

#endif /* PHUB_MEMIF_GATE_H */
