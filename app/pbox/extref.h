/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * References to memory that frames point into without a copy (an external buffer per frame),
 * each with a shared info of its own at refcount 1: the driver's free of such a frame counts
 * 1 to 0 without a locked instruction, which would wait for the driver's copy of the frame to
 * leave the store buffer (a shared count above 1 is dropped with one). The references not in
 * use are a stack; one lcore takes and gives them back (its TX frees them). phub-pbox's MODEL
 * frames and phub-loadgen's PUSHes use it.
 */

#ifndef PBOX_EXTREF_H
#define PBOX_EXTREF_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_mbuf.h>

struct pbox_extref_stack;

struct pbox_extref {
	struct rte_mbuf_ext_shared_info shinfo;
	struct pbox_extref_stack *owner;
};

struct pbox_extref_stack {
	struct pbox_extref *all;	/* n of them, memory of the caller's */
	struct pbox_extref **free;	/* n slots */
	uint32_t n;
	uint32_t n_free;
};

/* The stack over all and free, n each, every reference free. */
static inline void
pbox_extref_stack_init(struct pbox_extref_stack *st, struct pbox_extref *all,
		struct pbox_extref **free_slots, uint32_t n)
{
	st->all = all;
	st->free = free_slots;
	st->n = n;
	st->n_free = n;
	for (uint32_t i = 0; i < n; i++) {
		all[i].owner = st;
		free_slots[i] = &all[i];
	}
}

/* Whether a frame still holds one of the stack's references. */
static inline bool
pbox_extref_out(const struct pbox_extref_stack *st)
{
	return st->n_free != st->n;
}

/* The driver freed a frame: its reference goes back. */
static inline void
pbox_extref_put(void *addr, void *opaque)
{
	struct pbox_extref *ref = opaque;

	(void)addr;
	ref->owner->free[ref->owner->n_free++] = ref;
}

/*
 * An mbuf of pool (no data room of its own needed) whose data are data_len bytes at addr, in
 * a buffer of buf_len bytes there (IOVA iova); NULL when no reference or mbuf is left.
 */
static inline struct rte_mbuf *
pbox_extref_get(struct pbox_extref_stack *st, struct rte_mempool *pool, void *addr,
		rte_iova_t iova, uint16_t buf_len, uint16_t data_len)
{
	struct pbox_extref *ref;
	struct rte_mbuf *m;

	if (unlikely(st->n_free == 0))
		return NULL;
	m = rte_pktmbuf_alloc(pool);
	if (unlikely(m == NULL))
		return NULL;
	ref = st->free[--st->n_free];
	ref->shinfo.free_cb = pbox_extref_put;
	ref->shinfo.fcb_opaque = ref;
	rte_mbuf_ext_refcnt_set(&ref->shinfo, 1);
	rte_pktmbuf_attach_extbuf(m, addr, iova, buf_len, &ref->shinfo);
	m->data_len = data_len;
	m->pkt_len = data_len;
	return m;
}

#endif /* PBOX_EXTREF_H */
