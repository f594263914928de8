/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An authenticated ring job's link keys (from the RING_HELLO exchange, lib/control) and each
 * data lane's sequence numbers and replay windows on its ring links: the MAC of every ring
 * datagram between PBoxes.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "phub_engine_auth.h"

#define KEY_WORDS (PHUB_AUTH_KEY_LEN / 8)
#define N_SLOTS 2

enum { MAC_RX, MAC_TX };

/*
 * One neighbour's keys. The control thread writes them under a sequence lock (gen odd while it
 * writes); data lanes copy them out and retry on a change. A lane that meets another gen than
 * its last starts its windows afresh (its counter goes on: see ring_lane).
 */
struct ring_keys {
	_Atomic uint64_t gen;
	_Atomic uint64_t rx[KEY_WORDS];
	_Atomic uint64_t tx[KEY_WORDS];
};

/* One data lane's state on one neighbour's link: its thread's alone. */
struct ring_lane {
	alignas(64) uint64_t gen;	/* the keys its windows are of */
	/*
	 * Never set back in the job's life, across new keys too: a HELLO seen before cannot
	 * bring back keys this lane has sealed with (lib/control refuses it), and even then no
	 * (key, sequence number) pair would be used twice.
	 */
	uint64_t tx_next;
	uint64_t mac_gen[2];
	struct phub_auth_mac *mac[2];
	/*
	 * By the sender's channel - 1 (its lane): each sending lane numbers its own stream. The
	 * neighbour's lanes are its own count, not ours: room for any PBox's.
	 */
	struct phub_auth_window win[PHUB_ENGINE_RING_AUTH_CHANNELS];
	uint64_t sealed, opened;
};

struct engine_ring_auth {
	struct ring_keys keys[N_SLOTS];
	/* The job's lanes (phub_engine_job_params' auth_lanes: the PBox's data lcores and more). */
	unsigned int n_lanes;
	struct ring_lane *lanes;	/* N_SLOTS x n_lanes */
};

static struct ring_lane *
lane_of(struct engine_ring_auth *ra, unsigned int slot, unsigned int lane)
{
	return &ra->lanes[(size_t)slot * ra->n_lanes + lane];
}

/* In a ring of two, prev and next are one PBox, one key pair: one slot, one counter. */
static unsigned int
slot_of(const struct phub_engine_job *job, unsigned int link)
{
	return job->ring.racks == 2 ? 0 : link;
}

bool
phub_engine_job_ring_auth(const struct phub_engine_job *job)
{
	return job->auth != NULL && job->ring_segs != NULL;
}

void
engine_ring_auth_release(struct phub_engine_job *job)
{
	struct engine_ring_auth *ra = atomic_load_explicit(&job->ring_auth, memory_order_acquire);

	if (ra == NULL)
		return;
	for (unsigned int s = 0; s < N_SLOTS; s++)
		for (unsigned int l = 0; l < ra->n_lanes; l++) {
			phub_auth_mac_free(lane_of(ra, s, l)->mac[MAC_RX]);
			phub_auth_mac_free(lane_of(ra, s, l)->mac[MAC_TX]);
		}
	phub_auth_wipe(ra->keys, sizeof(ra->keys));
	free(ra->lanes);
	free(ra);
	atomic_store_explicit(&job->ring_auth, NULL, memory_order_relaxed);
}

static bool
key_same(_Atomic uint64_t *w, const uint8_t *key)
{
	uint8_t cur[PHUB_AUTH_KEY_LEN];
	bool same;

	for (unsigned int i = 0; i < KEY_WORDS; i++) {
		uint64_t v = atomic_load_explicit(&w[i], memory_order_relaxed);

		memcpy(cur + 8 * i, &v, sizeof(v));
	}
	same = phub_auth_key_equal(cur, key);
	phub_auth_wipe(cur, sizeof(cur));
	return same;
}

int
phub_engine_job_ring_auth_keys(struct phub_engine_job *job, unsigned int link,
		const uint8_t tx[PHUB_AUTH_KEY_LEN], const uint8_t rx[PHUB_AUTH_KEY_LEN])
{
	struct engine_ring_auth *ra = atomic_load_explicit(&job->ring_auth, memory_order_acquire);
	struct ring_keys *k;
	uint64_t gen;

	if (!phub_engine_job_ring_auth(job) || link >= N_SLOTS)
		return -EINVAL;
	if (ra == NULL) {
		unsigned int n_lanes = engine_auth_lanes(job);
		size_t lanes_size = (size_t)N_SLOTS * n_lanes * sizeof(*ra->lanes);

		ra = calloc(1, sizeof(*ra));
		if (ra == NULL)
			return -ENOMEM;
		/* One lane per data lcore the job was made for, however many (issue 25). */
		ra->n_lanes = n_lanes;
		ra->lanes = aligned_alloc(64, lanes_size);	/* a lane is 64-aligned */
		if (ra->lanes == NULL) {
			free(ra);
			return -ENOMEM;
		}
		memset(ra->lanes, 0, lanes_size);
		atomic_store_explicit(&job->ring_auth, ra, memory_order_release);
	}
	k = &ra->keys[slot_of(job, link)];
	gen = atomic_load_explicit(&k->gen, memory_order_relaxed);
	/* The same keys again (a ring of two sets both links; a HELLO kept alive): nothing new. */
	if (gen != 0 && key_same(k->tx, tx) && key_same(k->rx, rx))
		return 0;
	/*
	 * A sequence lock without fences (ThreadSanitizer has none): each key word's store is a
	 * release, so a reader that sees a new word also sees the odd generation stored before it.
	 */
	atomic_store_explicit(&k->gen, gen + 1, memory_order_relaxed);
	engine_auth_key_store(k->rx, rx);
	engine_auth_key_store(k->tx, tx);
	atomic_store_explicit(&k->gen, gen + 2, memory_order_release);
	return 0;
}

/* A consistent copy of one direction's key and its gen; false without keys. */
static bool
keys_read(struct ring_keys *k, int dir, uint8_t key[PHUB_AUTH_KEY_LEN], uint64_t *gen)
{
	for (;;) {
		uint64_t g = atomic_load_explicit(&k->gen, memory_order_acquire);
		_Atomic uint64_t *w = dir == MAC_RX ? k->rx : k->tx;

		if (g == 0)
			return false;
		if (g & 1)
			continue;	/* the control thread is writing: a few stores */
		for (unsigned int i = 0; i < KEY_WORDS; i++) {
			uint64_t v = atomic_load_explicit(&w[i], memory_order_acquire);

			memcpy(key + 8 * i, &v, sizeof(v));
		}
		/* The words' loads are acquires: this second look cannot move before them. */
		if (atomic_load_explicit(&k->gen, memory_order_acquire) == g) {
			*gen = g;
			return true;
		}
	}
}

/* The lane's MAC state for one direction of the link's current keys; NULL without keys. */
static struct phub_auth_mac *
mac_of(struct engine_ring_auth *ra, unsigned int slot, unsigned int lane, int dir,
		struct ring_lane **lp)
{
	struct ring_keys *k = &ra->keys[slot];
	struct ring_lane *l = lane_of(ra, slot, lane);
	uint64_t gen = atomic_load_explicit(&k->gen, memory_order_acquire);
	uint8_t key[PHUB_AUTH_KEY_LEN];

	*lp = l;
	if (gen != 0 && gen == l->gen && gen == l->mac_gen[dir] && l->mac[dir] != NULL)
		return l->mac[dir];
	if (!keys_read(k, dir, key, &gen))
		return NULL;
	if (l->gen != gen) {
		/* New keys: the neighbour's streams start again; ours goes on (tx_next). */
		l->gen = gen;
		for (unsigned int c = 0; c < PHUB_ENGINE_RING_AUTH_CHANNELS; c++)
			phub_auth_window_reset(&l->win[c]);
	}
	l->mac[dir] = phub_auth_mac_keyed(l->mac[dir], key);
	phub_auth_wipe(key, sizeof(key));
	l->mac_gen[dir] = l->mac[dir] != NULL ? gen : 0;
	return l->mac[dir];
}

enum phub_drop_reason
phub_engine_ring_auth_rx(struct phub_engine_job *job, unsigned int link, unsigned int lane,
		uint8_t flags, const void *hdr, size_t hdr_len, const void *payload,
		size_t payload_len)
{
	struct engine_ring_auth *ra = atomic_load_explicit(&job->ring_auth, memory_order_acquire);
	struct phub_auth_mac *m;
	struct ring_lane *l;
	uint16_t channel;
	uint64_t seq;

	if (!phub_engine_job_ring_auth(job))
		return (flags & PHUB_WIRE_F_AUTH) ? PHUB_DROP_AUTH_UNEXPECTED : PHUB_DROP_OK;
	if (!(flags & PHUB_WIRE_F_AUTH))
		return PHUB_DROP_AUTH_MISSING;
	if (link >= N_SLOTS)
		return PHUB_DROP_RANK_RANGE;
	/* No HELLO exchanged yet: no key to believe anything with. */
	if (ra == NULL)
		return PHUB_DROP_NOT_JOINED;
	if (lane >= ra->n_lanes)
		return PHUB_DROP_RANK_RANGE;
	m = mac_of(ra, slot_of(job, link), lane, MAC_RX, &l);
	if (m == NULL) {
		if (atomic_load_explicit(&ra->keys[slot_of(job, link)].gen,
				memory_order_acquire) == 0)
			return PHUB_DROP_NOT_JOINED;
		return PHUB_DROP_AUTH_BAD_TAG;
	}
	if (!phub_auth_mac_open(m, hdr, hdr_len, payload, payload_len, &seq))
		return PHUB_DROP_AUTH_BAD_TAG;
	/* Channel 1 + the sending lane; 0 is the control thread's, which sends no ring data. */
	channel = phub_auth_seq_channel(seq);
	if (channel == 0 || channel > PHUB_ENGINE_RING_AUTH_CHANNELS)
		return PHUB_DROP_AUTH_CHANNEL;
	if (!phub_auth_window_update(&l->win[channel - 1], seq & PHUB_AUTH_COUNTER_MAX))
		return PHUB_DROP_AUTH_REPLAY;
	__atomic_store_n(&l->opened, l->opened + 1, __ATOMIC_RELAXED);
	return PHUB_DROP_OK;
}

bool
phub_engine_ring_auth_tx(struct phub_engine_job *job, unsigned int link, unsigned int lane,
		void *hdr, size_t hdr_len, const void *payload, size_t payload_len)
{
	struct engine_ring_auth *ra = atomic_load_explicit(&job->ring_auth, memory_order_acquire);
	struct phub_auth_mac *m;
	struct ring_lane *l;

	if (ra == NULL || link >= N_SLOTS || lane >= ra->n_lanes)
		return false;
	m = mac_of(ra, slot_of(job, link), lane, MAC_TX, &l);
	/* A counter never comes back under one key: 2^48 datagrams end the stream instead. */
	if (m == NULL || l->tx_next > PHUB_AUTH_COUNTER_MAX)
		return false;
	phub_auth_mac_seal(m, phub_auth_seq((uint16_t)(1u + lane), l->tx_next++), hdr, hdr_len,
			payload, payload_len);
	__atomic_store_n(&l->sealed, l->sealed + 1, __ATOMIC_RELAXED);
	return true;
}

void
phub_engine_ring_auth_stats(const struct phub_engine_job *job, uint64_t *sealed,
		uint64_t *opened)
{
	struct phub_engine_job *j = (struct phub_engine_job *)(uintptr_t)job;
	const struct engine_ring_auth *ra = atomic_load_explicit(&j->ring_auth,
			memory_order_acquire);

	*sealed = 0;
	*opened = 0;
	if (ra == NULL)
		return;
	/* Each lane's own counts, read without a lock: a figure, not a decision. */
	for (unsigned int s = 0; s < N_SLOTS; s++)
		for (unsigned int l = 0; l < ra->n_lanes; l++) {
			const struct ring_lane *rl = &ra->lanes[(size_t)s * ra->n_lanes + l];

			*sealed += __atomic_load_n(&rl->sealed, __ATOMIC_RELAXED);
			*opened += __atomic_load_n(&rl->opened, __ATOMIC_RELAXED);
		}
}
