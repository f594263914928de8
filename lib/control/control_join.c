/* SPDX-License-Identifier: BSD-3-Clause */
/* JOINs split over several datagrams, reassembled until their last one is in or they time out. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "phub_control.h"

struct pending {
	bool used;
	struct phub_control_addr src;
	uint16_t rank;
	char name[PHUB_WIRE_JOB_NAME_LEN];
	uint64_t started_ns;
	struct phub_wire_msg about;	/* the first datagram's header, for JOIN_TIMEOUT */
	struct phub_wire_join_merge merge;
	struct phub_wire_key *keys;
};

struct phub_control_joins {
	unsigned int cap;
	uint32_t max_keys;
	struct pending entries[];
};

struct phub_control_joins *
phub_control_joins_create(unsigned int cap, uint32_t max_keys)
{
	struct phub_control_joins *j;

	if (cap == 0 || max_keys == 0) {
		errno = EINVAL;
		return NULL;
	}
	j = calloc(1, sizeof(*j) + cap * sizeof(j->entries[0]));
	if (j == NULL)
		return NULL;
	j->cap = cap;
	j->max_keys = max_keys;
	return j;
}

static void
pending_clear(struct pending *p)
{
	free(p->keys);
	memset(p, 0, sizeof(*p));
}

void
phub_control_joins_free(struct phub_control_joins *joins)
{
	if (joins == NULL)
		return;
	for (unsigned int i = 0; i < joins->cap; i++)
		pending_clear(&joins->entries[i]);
	free(joins);
}

static bool
pending_is(const struct pending *p, const struct phub_control_addr *src, uint16_t rank,
		const char *name)
{
	return p->used && p->src.ipv4 == src->ipv4 && p->src.udp_port == src->udp_port &&
		p->rank == rank && strcmp(p->name, name) == 0;
}

static struct pending *
pending_find(struct phub_control_joins *joins, const struct phub_control_addr *src,
		uint16_t rank, const char *name)
{
	for (unsigned int i = 0; i < joins->cap; i++)
		if (pending_is(&joins->entries[i], src, rank, name))
			return &joins->entries[i];
	return NULL;
}

/* A free entry, else the oldest: its worker sends its JOIN again. */
static struct pending *
pending_take(struct phub_control_joins *joins)
{
	struct pending *victim = &joins->entries[0];

	for (unsigned int i = 0; i < joins->cap; i++) {
		struct pending *p = &joins->entries[i];

		if (!p->used)
			return p;
		if (p->started_ns < victim->started_ns)
			victim = p;
	}
	pending_clear(victim);
	return victim;
}

static int
pending_start(struct pending *p, const struct phub_control_addr *src,
		const struct phub_wire_msg *msg, const struct phub_wire_join_seg *seg,
		uint64_t now_ns)
{
	p->keys = calloc(seg->total_keys != 0 ? seg->total_keys : 1, sizeof(*p->keys));
	if (p->keys == NULL)
		return -ENOMEM;
	p->used = true;
	p->src = *src;
	p->rank = seg->join.rank;
	memcpy(p->name, seg->join.name, sizeof(p->name));
	p->started_ns = now_ns;
	p->about = *msg;
	p->about.payload = NULL;
	p->about.payload_len = 0;
	phub_wire_join_merge_init(&p->merge, p->keys, seg->total_keys);
	return 0;
}

enum phub_control_join_result
phub_control_joins_add(struct phub_control_joins *joins, const struct phub_control_addr *src,
		const struct phub_wire_msg *msg, uint64_t now_ns, struct phub_control_join *out)
{
	struct phub_wire_join_seg seg;
	struct pending *p;
	int rc;

	if (phub_wire_join_parse(msg->payload, msg->payload_len, &seg) != PHUB_DROP_OK)
		return PHUB_CONTROL_JOIN_CONTRADICTS;	/* phub_wire_parse() checked it */
	if (seg.total_keys > joins->max_keys)
		return PHUB_CONTROL_JOIN_TOO_MANY_KEYS;
	p = pending_find(joins, src, seg.join.rank, seg.join.name);
	if (p == NULL) {
		p = pending_take(joins);
		if (pending_start(p, src, msg, &seg, now_ns) != 0)
			return PHUB_CONTROL_JOIN_NO_MEMORY;
	}
	rc = phub_wire_join_merge_add(&p->merge, msg, &seg);
	if (rc < 0) {
		pending_clear(p);
		return PHUB_CONTROL_JOIN_CONTRADICTS;
	}
	if (rc == 0)
		return PHUB_CONTROL_JOIN_MORE;
	out->join = &p->merge.join;
	out->keys = p->keys;
	out->n_keys = p->merge.total_keys;
	return PHUB_CONTROL_JOIN_COMPLETE;
}

void
phub_control_joins_done(struct phub_control_joins *joins, const struct phub_control_addr *src,
		const struct phub_control_join *join)
{
	struct pending *p = pending_find(joins, src, join->join->rank, join->join->name);

	if (p != NULL)
		pending_clear(p);
}

unsigned int
phub_control_joins_expire(struct phub_control_joins *joins, uint64_t now_ns, uint64_t timeout_ns,
		void (*timed_out)(void *ctx, const struct phub_control_addr *src,
			const struct phub_wire_msg *about), void *ctx)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < joins->cap; i++) {
		struct pending *p = &joins->entries[i];

		if (!p->used || now_ns - p->started_ns <= timeout_ns)
			continue;
		if (timed_out != NULL)
			timed_out(ctx, &p->src, &p->about);
		pending_clear(p);
		n++;
	}
	return n;
}
