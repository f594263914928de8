/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * P3 at the PBox: the order in which a data lcore serves one received burst, most urgent PHub
 * priority first (lower is sooner, docs/protocol.md), arrival order among equals. Free of
 * DPDK: it reads frame bytes only, so that tests/unit/check_pbox_prio.c checks it alone.
 */

#ifndef PBOX_PRIO_H
#define PBOX_PRIO_H

#include <stdbool.h>
#include <stdint.h>

/* Ethernet header, and the PHub header's magic and priority within the UDP payload. */
#define PBOX_PRIO_ETH_LEN 14
#define PBOX_PRIO_MAGIC_HI 0x50
#define PBOX_PRIO_MAGIC_LO 0x48
#define PBOX_PRIO_OFFSET 7

/*
 * The priority byte of a PHub datagram in an untagged IPv4/UDP frame of len bytes. Anything
 * else (ARP, a short or foreign frame) gets 0: it is served first, as it costs little, and its
 * own checks still run in order. Reads only within len.
 */
static inline uint8_t
pbox_prio_of_frame(const uint8_t *frame, uint32_t len)
{
	uint32_t ihl, phub;

	if (len < PBOX_PRIO_ETH_LEN + 20 || frame[12] != 0x08 || frame[13] != 0x00)
		return 0;
	ihl = (uint32_t)(frame[PBOX_PRIO_ETH_LEN] & 0x0f) * 4;
	if (ihl < 20 || frame[PBOX_PRIO_ETH_LEN + 9] != 17)
		return 0;
	phub = PBOX_PRIO_ETH_LEN + ihl + 8;
	if (len <= phub + PBOX_PRIO_OFFSET || frame[phub] != PBOX_PRIO_MAGIC_HI ||
	    frame[phub + 1] != PBOX_PRIO_MAGIC_LO)
		return 0;
	return frame[phub + PBOX_PRIO_OFFSET];
}

/*
 * The service order of n frames with the priorities prio[]: order[k] is the index of the k-th
 * to serve, by priority, ties in arrival order (a stable insertion sort: n is a burst, at most
 * a few dozen). Returns false, with order untouched, when every priority is the same: the
 * burst is then served as received and costs one pass over prio.
 */
static inline bool
pbox_prio_order(const uint8_t *prio, uint16_t n, uint16_t *order)
{
	uint16_t k;

	for (k = 1; k < n && prio[k] == prio[0]; k++)
		;
	if (k >= n)
		return false;
	for (uint16_t i = 0; i < n; i++) {
		uint16_t j = i;

		while (j > 0 && prio[order[j - 1]] > prio[i]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
	return true;
}

#endif /* PBOX_PRIO_H */
