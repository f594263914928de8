/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * P3 at the PBox: the order in which a data lcore serves one received burst, most urgent PHub
 * priority first (lower is sooner, docs/protocol.md), arrival order among equals; and across
 * bursts, the hold: frames taken from a backed-up RX queue and served most urgent first, none
 * held longer than an age bound. Free of DPDK: it reads frame bytes and pointers only, so that
 * tests/unit/check_pbox_prio.c checks it alone.
 */

#ifndef PBOX_PRIO_H
#define PBOX_PRIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* The most frames one hold takes (config priority_hold); slot indexes fit 16 bits. */
#define PBOX_PRIO_HOLD_MAX 1024
#define PBOX_PRIO_HOLD_NIL UINT16_MAX

struct pbox_prio_hold_slot {
	void *frame;
	uint64_t since;			/* when it was put, in the caller's clock */
	uint16_t next;			/* next of its priority, in arrival order */
	uint16_t older, newer;		/* arrival order over all priorities */
	uint16_t tag;			/* the caller's (the RX port's index) */
	uint8_t prio;
};

/*
 * Held frames: one FIFO per priority (a bucket queue: the most urgent non-empty one found in
 * the bitmap) and one arrival-order list over all, whose oldest frame is the head of its own
 * priority's FIFO, so that taking by age and by priority are both O(1).
 */
struct pbox_prio_hold {
	uint64_t nonempty[4];		/* bit p: priority p has frames */
	uint16_t head[256];
	uint16_t tail[256];
	uint16_t oldest, newest;
	uint16_t free;			/* unused slots, linked by next */
	uint16_t count;
	uint16_t cap;
	struct pbox_prio_hold_slot slot[PBOX_PRIO_HOLD_MAX];
};

/* An empty hold of cap frames (at most PBOX_PRIO_HOLD_MAX). */
static inline void
pbox_prio_hold_init(struct pbox_prio_hold *h, uint16_t cap)
{
	memset(h, 0, offsetof(struct pbox_prio_hold, slot));
	h->cap = cap < PBOX_PRIO_HOLD_MAX ? cap : PBOX_PRIO_HOLD_MAX;
	h->oldest = h->newest = PBOX_PRIO_HOLD_NIL;
	for (unsigned int p = 0; p < 256; p++)
		h->head[p] = h->tail[p] = PBOX_PRIO_HOLD_NIL;
	h->free = h->cap > 0 ? 0 : PBOX_PRIO_HOLD_NIL;
	for (uint16_t i = 0; i < h->cap; i++)
		h->slot[i].next = i + 1 < h->cap ? (uint16_t)(i + 1) : PBOX_PRIO_HOLD_NIL;
}

static inline uint16_t
pbox_prio_hold_room(const struct pbox_prio_hold *h)
{
	return (uint16_t)(h->cap - h->count);
}

/* Hold frame (priority prio, put at time now); false, frame not taken, when the hold is full. */
static inline bool
pbox_prio_hold_put(struct pbox_prio_hold *h, void *frame, uint8_t prio, uint16_t tag,
		uint64_t now)
{
	uint16_t i = h->free;
	struct pbox_prio_hold_slot *s;

	if (i == PBOX_PRIO_HOLD_NIL)
		return false;
	s = &h->slot[i];
	h->free = s->next;
	s->frame = frame;
	s->since = now;
	s->prio = prio;
	s->tag = tag;
	s->next = PBOX_PRIO_HOLD_NIL;
	if (h->tail[prio] == PBOX_PRIO_HOLD_NIL)
		h->head[prio] = i;
	else
		h->slot[h->tail[prio]].next = i;
	h->tail[prio] = i;
	h->nonempty[prio >> 6] |= UINT64_C(1) << (prio & 63);
	s->older = h->newest;
	s->newer = PBOX_PRIO_HOLD_NIL;
	if (h->newest == PBOX_PRIO_HOLD_NIL)
		h->oldest = i;
	else
		h->slot[h->newest].newer = i;
	h->newest = i;
	h->count++;
	return true;
}

/*
 * The next frame to serve, NULL when none is held: the oldest when it was put more than
 * max_age before now (no priority starves the others for longer, and none waits past a
 * sender's retransmission timeout), else the first of the most urgent priority.
 */
static inline void *
pbox_prio_hold_take(struct pbox_prio_hold *h, uint64_t now, uint64_t max_age, uint16_t *tag)
{
	struct pbox_prio_hold_slot *s;
	unsigned int p = 0;
	uint16_t i;

	if (h->count == 0)
		return NULL;
	if (now - h->slot[h->oldest].since > max_age) {
		p = h->slot[h->oldest].prio;
	} else {
		while (h->nonempty[p >> 6] == 0)
			p += 64;
		p += (unsigned int)__builtin_ctzll(h->nonempty[p >> 6]);
	}
	/* The oldest of every priority heads its FIFO: the frame leaves from a head. */
	i = h->head[p];
	s = &h->slot[i];
	h->head[p] = s->next;
	if (s->next == PBOX_PRIO_HOLD_NIL) {
		h->tail[p] = PBOX_PRIO_HOLD_NIL;
		h->nonempty[p >> 6] &= ~(UINT64_C(1) << (p & 63));
	}
	if (s->older == PBOX_PRIO_HOLD_NIL)
		h->oldest = s->newer;
	else
		h->slot[s->older].newer = s->newer;
	if (s->newer == PBOX_PRIO_HOLD_NIL)
		h->newest = s->older;
	else
		h->slot[s->newer].older = s->older;
	s->next = h->free;
	h->free = i;
	h->count--;
	*tag = s->tag;
	return s->frame;
}

#endif /* PBOX_PRIO_H */
