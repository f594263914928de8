/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The memif gate: keeps DPDK's net_memif control handlers (EAL interrupt thread) and the data
 * lcores' bursts on memif ports from running at the same time.
 *
 * Why: when a memif peer leaves, net_memif (22.11, and upstream as of this writing) clears its
 * "connected" flag and munmaps the shared region from the interrupt thread at once, without
 * waiting for a burst that already passed the flag check; that burst then faults on the ring.
 * Seen as SIGSEGV in eth_memif_rx with the interrupt thread inside memif_free_regions, in
 * phub-pbox and in dpdk-testpmd alike (docs/history/performance-log.md, "Pitfalls found on the
 * way").
 *
 * How: the interrupt thread runs its callbacks one at a time, so while it sits in an alarm
 * callback of ours no memif handler can run. The callback opens the gate, sleeps GATE_OPEN_US,
 * closes the gate, waits until no lcore is inside a gated section, and arms itself again
 * GATE_SHUT_US later; in between, the interrupt thread serves memif (connects, disconnects)
 * while the gated lcores leave memif ports alone. Each loop iteration of a gated lcore is one
 * section: pbox_memif_gate_enter() announces it, then looks at the gate (Dekker's order, both
 * sequentially consistent, so the closing side either sees the lcore inside or the lcore sees
 * the gate shut).
 */

#include <errno.h>
#include <string.h>

#include <rte_alarm.h>
#include <rte_cycles.h>
#include <rte_pause.h>

#include "pbox.h"

/* The interrupt thread sleeps this long with the gate open ... */
#define GATE_OPEN_US 10000
/* ... then serves its other callbacks for at least this long with the gate shut. */
#define GATE_SHUT_US 100

atomic_bool pbox_memif_gate_open;

static atomic_bool gate_stop;
static bool gate_armed;

static bool
port_is_memif(uint16_t port_id)
{
	struct rte_eth_dev_info info;

	if (rte_eth_dev_info_get(port_id, &info) != 0 || info.driver_name == NULL)
		return false;
	return strcmp(info.driver_name, "net_memif") == 0;
}

/* The interrupt thread's turn: open, sleep, shut, wait for the lcores to leave, re-arm. */
static void
gate_cycle(void *arg)
{
	struct pbox *pb = arg;
	int rc;

	if (atomic_load(&gate_stop))
		return;
	atomic_store(&pbox_memif_gate_open, true);
	rte_delay_us_sleep(GATE_OPEN_US);
	atomic_store(&pbox_memif_gate_open, false);
	for (uint16_t k = 0; k < pb->n_lcores; k++)
		while (atomic_load(&pb->lcores[k].in_memif_section))
			rte_pause();
	if (atomic_load(&gate_stop))
		return;
	rc = rte_eal_alarm_set(GATE_SHUT_US, gate_cycle, pb);
	if (rc != 0)
		PBOX_LOG(ERR, "memif gate: cannot re-arm its alarm (%s): memif ports stop",
				rte_strerror(-rc));
}

int
pbox_memif_gate_init(struct pbox *pb)
{
	uint16_t gated = 0;
	int rc;

	atomic_store(&pbox_memif_gate_open, false);
	atomic_store(&gate_stop, false);
	for (uint16_t k = 0; k < pb->n_lcores; k++) {
		struct pbox_lcore *lc = &pb->lcores[k];

		atomic_store(&lc->in_memif_section, false);
		lc->memif_gated = false;
		for (uint16_t pi = 0; pi < pb->n_ports; pi++)
			if (lc->queue[pi] != PBOX_NO_QUEUE && port_is_memif(pb->ports[pi].port_id))
				lc->memif_gated = true;
		gated += lc->memif_gated;
	}
	if (gated == 0)
		return 0;
	rc = rte_eal_alarm_set(GATE_SHUT_US, gate_cycle, pb);
	if (rc != 0) {
		PBOX_LOG(ERR, "memif gate: cannot set its alarm: %s", rte_strerror(-rc));
		return rc;
	}
	gate_armed = true;
	PBOX_LOG(INFO, "memif gate: %u data lcore(s) serve memif ports only while the interrupt "
			"thread is parked (%u us open, %u us shut)", gated, GATE_OPEN_US,
			GATE_SHUT_US);
	return 0;
}

bool
pbox_has_memif_port(const struct pbox *pb)
{
	for (uint16_t pi = 0; pi < pb->n_ports; pi++)
		if (port_is_memif(pb->ports[pi].port_id))
			return true;
	return false;
}

void
pbox_memif_gate_fini(struct pbox *pb)
{
	if (!gate_armed)
		return;
	atomic_store(&gate_stop, true);
	/* Waits for a running gate_cycle, which then does not re-arm. */
	rte_eal_alarm_cancel(gate_cycle, pb);
	atomic_store(&pbox_memif_gate_open, false);
	gate_armed = false;
}
