/* SPDX-License-Identifier: BSD-3-Clause */
/* The memif gate (phub_memif_gate.h says why and how). */

#include <errno.h>
#include <string.h>

#include <rte_alarm.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_pause.h>

#include "phub_memif_gate.h"

atomic_bool phub_memif_gate_open;

static atomic_bool gate_stop;
static bool gate_armed;
static atomic_bool *gate_sections[RTE_MAX_LCORE];
static uint16_t gate_n_sections;

bool
phub_port_is_memif(uint16_t port_id)
{
	struct rte_eth_dev_info info;

	if (rte_eth_dev_info_get(port_id, &info) != 0 || info.driver_name == NULL)
		return false;
	return strcmp(info.driver_name, "net_memif") == 0;
}

/* The interrupt thread's turn: open, sleep, shut, wait for the lcores to leave, re-arm. */
static void
gate_cycle(void *arg __rte_unused)
{
	if (atomic_load(&gate_stop))
		return;
	atomic_store(&phub_memif_gate_open, true);
	rte_delay_us_sleep(PHUB_MEMIF_GATE_OPEN_US);
	atomic_store(&phub_memif_gate_open, false);
	for (uint16_t k = 0; k < gate_n_sections; k++)
		while (atomic_load(gate_sections[k]))
			rte_pause();
	if (atomic_load(&gate_stop))
		return;
	/* Not re-armed, memif ports stop: the lcores see the gate shut from now on. */
	if (rte_eal_alarm_set(PHUB_MEMIF_GATE_SHUT_US, gate_cycle, NULL) != 0)
		RTE_LOG(ERR, USER1, "memif gate: cannot re-arm its alarm: memif ports stop\n");
}

int
phub_memif_gate_init(atomic_bool *const *in_section, uint16_t n)
{
	int rc;

	if (gate_armed)
		return -EALREADY;
	if (n == 0 || n > RTE_MAX_LCORE)
		return -EINVAL;
	atomic_store(&phub_memif_gate_open, false);
	atomic_store(&gate_stop, false);
	for (uint16_t k = 0; k < n; k++) {
		atomic_store(in_section[k], false);
		gate_sections[k] = in_section[k];
	}
	gate_n_sections = n;
	rc = rte_eal_alarm_set(PHUB_MEMIF_GATE_SHUT_US, gate_cycle, NULL);
	if (rc != 0)
		return rc;
	gate_armed = true;
	return 0;
}

void
phub_memif_gate_fini(void)
{
	if (!gate_armed)
		return;
	atomic_store(&gate_stop, true);
	/* Waits for a running gate_cycle, which then does not re-arm. */
	rte_eal_alarm_cancel(gate_cycle, NULL);
	atomic_store(&phub_memif_gate_open, false);
	gate_armed = false;
}
