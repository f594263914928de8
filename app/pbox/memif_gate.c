/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The PBox's side of the memif gate (lib/net/phub_memif_gate.h says why and how): the data
 * lcores with a queue on a net_memif port take turns with the interrupt thread's net_memif
 * handlers; the others never wait.
 */

#include <errno.h>

#include "pbox.h"

int
pbox_memif_gate_init(struct pbox *pb)
{
	atomic_bool *sections[RTE_MAX_LCORE];
	uint16_t gated = 0;
	int rc;

	for (uint16_t k = 0; k < pb->n_lcores; k++) {
		struct pbox_lcore *lc = &pb->lcores[k];

		atomic_store(&lc->in_memif_section, false);
		lc->memif_gated = false;
		for (uint16_t pi = 0; pi < pb->n_ports; pi++)
			if (lc->queue[pi] != PBOX_NO_QUEUE &&
					phub_port_is_memif(pb->ports[pi].port_id))
				lc->memif_gated = true;
		if (lc->memif_gated)
			sections[gated++] = &lc->in_memif_section;
	}
	if (gated == 0)
		return 0;
	rc = phub_memif_gate_init(sections, gated);
	if (rc != 0) {
		PBOX_LOG(ERR, "memif gate: cannot set its alarm: %s", rte_strerror(-rc));
		return rc;
	}
	PBOX_LOG(INFO, "memif gate: %u data lcore(s) serve memif ports only while the interrupt "
			"thread is parked (%u us open, %u us shut)", gated,
			PHUB_MEMIF_GATE_OPEN_US, PHUB_MEMIF_GATE_SHUT_US);
	return 0;
}

bool
pbox_has_memif_port(const struct pbox *pb)
{
	for (uint16_t pi = 0; pi < pb->n_ports; pi++)
		if (phub_port_is_memif(pb->ports[pi].port_id))
			return true;
	return false;
}
