/* SPDX-License-Identifier: BSD-3-Clause */
/* An authenticated job's keys per rank and each lane's sequence numbers and replay windows. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "phub_engine_auth.h"

#define KEY_WORDS (PHUB_AUTH_KEY_LEN / 8)

/*
 * One rank's keys. The control thread writes them under a sequence lock (gen odd while it
 * writes); data threads copy them out and retry on a change. gen also names the session: a
 * lane that sees a gen other than the one it last saw starts its counter and window afresh.
 */
struct auth_rank {
	_Atomic uint64_t gen;
	_Atomic uint64_t rx[KEY_WORDS];	/* worker -> PBox */
	_Atomic uint64_t tx[KEY_WORDS];	/* PBox -> worker */
	/* Control thread only. */
	bool have;
	uint8_t worker_pk[PHUB_AUTH_PK_LEN];
	uint8_t pbox_pk[PHUB_AUTH_PK_LEN];
	uint8_t confirm[PHUB_AUTH_KEY_LEN];
};

enum { MAC_RX, MAC_TX };

/* One lane's state for one rank: its thread's alone. */
struct auth_lane {
	alignas(64) uint64_t gen;
	uint64_t tx_next;
	/* Each direction's key schedule, made when the lane first meets gen mac_gen's keys. */
	uint64_t mac_gen[2];
	struct phub_auth_mac *mac[2];
	struct phub_auth_window win;
};

struct engine_auth {
	uint8_t psk[PHUB_AUTH_KEY_LEN];
	unsigned int n_lanes;
	struct auth_rank *ranks;	/* world_size */
	struct auth_lane *lanes;	/* world_size x n_lanes */
};

unsigned int
engine_auth_lanes(const struct phub_engine_job *job)
{
	return job->auth != NULL ? job->auth->n_lanes : 0;
}

int
engine_auth_create(struct phub_engine_job *job, const uint8_t *psk, unsigned int n_lanes)
{
	struct engine_auth *a;

	if (psk == NULL)
		return 0;
	if (n_lanes == 0 || phub_auth_init() != 0)
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return -ENOMEM;
	a->ranks = calloc(job->world_size, sizeof(*a->ranks));
	a->lanes = aligned_alloc(64, (size_t)job->world_size * n_lanes * sizeof(*a->lanes));
	if (a->ranks == NULL || a->lanes == NULL) {
		free(a->ranks);
		free(a->lanes);
		free(a);
		return -ENOMEM;
	}
	memset(a->lanes, 0, (size_t)job->world_size * n_lanes * sizeof(*a->lanes));
	memcpy(a->psk, psk, sizeof(a->psk));
	a->n_lanes = n_lanes;
	job->auth = a;
	return 0;
}

void
engine_auth_release(struct phub_engine_job *job)
{
	struct engine_auth *a = job->auth;

	if (a == NULL)
		return;
	phub_auth_wipe(a->ranks, job->world_size * sizeof(*a->ranks));
	phub_auth_wipe(a->psk, sizeof(a->psk));
	for (size_t i = 0; i < (size_t)job->world_size * a->n_lanes; i++) {
		phub_auth_mac_free(a->lanes[i].mac[MAC_RX]);
		phub_auth_mac_free(a->lanes[i].mac[MAC_TX]);
	}
	free(a->ranks);
	free(a->lanes);
	free(a);
	job->auth = NULL;
}

bool
phub_engine_job_auth(const struct phub_engine_job *job)
{
	return job->auth != NULL;
}

const uint8_t *
phub_engine_job_auth_psk(const struct phub_engine_job *job)
{
	return job->auth != NULL ? job->auth->psk : NULL;
}

void
engine_auth_key_store(_Atomic uint64_t *w, const uint8_t *key)
{
	for (unsigned int i = 0; i < KEY_WORDS; i++) {
		uint64_t v;

		memcpy(&v, key + 8 * i, sizeof(v));
		atomic_store_explicit(&w[i], v, memory_order_release);
	}
}

static void
key_load(_Atomic uint64_t *w, uint8_t *key)
{
	for (unsigned int i = 0; i < KEY_WORDS; i++) {
		uint64_t v = atomic_load_explicit(&w[i], memory_order_acquire);

		memcpy(key + 8 * i, &v, sizeof(v));
	}
}

int
phub_engine_job_auth_join(struct phub_engine_job *job, uint16_t rank,
		const uint8_t worker_pk[PHUB_AUTH_PK_LEN], bool live, bool same_source,
		uint8_t pbox_pk[PHUB_AUTH_PK_LEN], uint8_t confirm[PHUB_AUTH_KEY_LEN])
{
	struct engine_auth *a = job->auth;
	struct phub_auth_keys keys;
	uint8_t sk[PHUB_AUTH_SK_LEN];
	struct auth_rank *r;
	uint64_t gen;
	int rc;

	if (a == NULL || rank >= job->world_size)
		return -EINVAL;
	r = &a->ranks[rank];
	/*
	 * While the session lives only its own JOIN, from its own address, is answered (again):
	 * a JOIN seen on the wire and sent again, from anywhere, or another key, must not end
	 * the session (the engine would move the rank to the JOIN's address). Once the session
	 * has been silent for the liveness timeout, the rank may start a new one (a restarted
	 * worker).
	 */
	if (r->have && live &&
	    (!same_source || memcmp(r->worker_pk, worker_pk, PHUB_AUTH_PK_LEN) != 0))
		return -EALREADY;
	if (r->have && memcmp(r->worker_pk, worker_pk, PHUB_AUTH_PK_LEN) == 0) {
		/* The JOIN of the session we hold, sent again: the same answer, the same keys. */
		memcpy(pbox_pk, r->pbox_pk, PHUB_AUTH_PK_LEN);
		memcpy(confirm, r->confirm, PHUB_AUTH_KEY_LEN);
		return 0;
	}
	phub_auth_keypair(pbox_pk, sk);
	rc = phub_auth_session_keys(&keys, a->psk, sk, worker_pk, worker_pk, pbox_pk, false);
	phub_auth_wipe(sk, sizeof(sk));
	if (rc != 0)
		return rc;
	gen = atomic_load_explicit(&r->gen, memory_order_relaxed);
	atomic_store_explicit(&r->gen, gen + 1, memory_order_relaxed);
	engine_auth_key_store(r->rx, keys.rx);
	engine_auth_key_store(r->tx, keys.tx);
	atomic_store_explicit(&r->gen, gen + 2, memory_order_release);
	r->have = true;
	memcpy(r->worker_pk, worker_pk, PHUB_AUTH_PK_LEN);
	memcpy(r->pbox_pk, pbox_pk, PHUB_AUTH_PK_LEN);
	memcpy(r->confirm, keys.confirm, PHUB_AUTH_KEY_LEN);
	memcpy(confirm, keys.confirm, PHUB_AUTH_KEY_LEN);
	phub_auth_wipe(&keys, sizeof(keys));
	return 0;
}

/* A consistent copy of one direction's key and the session's gen; false without keys. */
static bool
keys_read(struct auth_rank *r, bool rx, uint8_t key[PHUB_AUTH_KEY_LEN], uint64_t *gen)
{
	for (;;) {
		uint64_t g = atomic_load_explicit(&r->gen, memory_order_acquire);

		if (g == 0)
			return false;
		if (g & 1)
			continue;	/* the control thread is writing: a few stores */
		key_load(rx ? r->rx : r->tx, key);
		if (atomic_load_explicit(&r->gen, memory_order_relaxed) == g) {
			*gen = g;
			return true;
		}
	}
}

static struct auth_lane *
lane_of(struct engine_auth *a, uint16_t rank, unsigned int lane, uint64_t gen)
{
	struct auth_lane *l = &a->lanes[(size_t)rank * a->n_lanes + lane];

	/* A new session of the rank: its counters start again under its new keys. */
	if (l->gen != gen) {
		l->gen = gen;
		l->tx_next = 0;
		phub_auth_window_reset(&l->win);
	}
	return l;
}

/*
 * The lane's MAC state for one direction of the rank's current session, keyed (a key schedule)
 * only when the session changed since the lane last used it; NULL without keys or memory.
 */
static struct phub_auth_mac *
mac_of(struct engine_auth *a, uint16_t rank, unsigned int lane, int dir, struct auth_lane **lp)
{
	struct auth_rank *r = &a->ranks[rank];
	uint8_t key[PHUB_AUTH_KEY_LEN];
	struct auth_lane *l;
	uint64_t gen = atomic_load_explicit(&r->gen, memory_order_acquire);

	l = &a->lanes[(size_t)rank * a->n_lanes + lane];
	/* The common case: the session the lane has keyed; gen is even and unchanged. */
	if (gen != 0 && gen == l->gen && gen == l->mac_gen[dir] && l->mac[dir] != NULL) {
		*lp = l;
		return l->mac[dir];
	}
	if (!keys_read(r, dir == MAC_RX, key, &gen))
		return NULL;
	l = lane_of(a, rank, lane, gen);
	l->mac[dir] = phub_auth_mac_keyed(l->mac[dir], key);
	phub_auth_wipe(key, sizeof(key));
	l->mac_gen[dir] = l->mac[dir] != NULL ? gen : 0;
	*lp = l;
	return l->mac[dir];
}

enum phub_drop_reason
phub_engine_auth_rx(struct phub_engine_job *job, uint16_t rank, unsigned int lane,
		uint16_t channel, uint8_t flags, const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len)
{
	struct engine_auth *a = job->auth;
	struct phub_auth_mac *m;
	struct auth_lane *l;
	uint64_t seq;

	if (a == NULL)
		return (flags & PHUB_WIRE_F_AUTH) ? PHUB_DROP_AUTH_UNEXPECTED : PHUB_DROP_OK;
	/* The job requires it: a plain datagram is nobody we can believe. */
	if (!(flags & PHUB_WIRE_F_AUTH))
		return PHUB_DROP_AUTH_MISSING;
	if (rank >= job->world_size || lane >= a->n_lanes)
		return PHUB_DROP_RANK_RANGE;
	if (atomic_load_explicit(&a->ranks[rank].gen, memory_order_acquire) == 0)
		return PHUB_DROP_NOT_JOINED;
	m = mac_of(a, rank, lane, MAC_RX, &l);
	/* No key schedule (libcrypto out of memory): nothing can be believed, as a bad tag. */
	if (m == NULL || !phub_auth_mac_open(m, hdr, hdr_len, payload, payload_len, &seq))
		return PHUB_DROP_AUTH_BAD_TAG;
	/* Each port's stream has its own numbers: one sent to another port is a replay there. */
	if (phub_auth_seq_channel(seq) != channel)
		return PHUB_DROP_AUTH_CHANNEL;
	if (!phub_auth_window_update(&l->win, seq & PHUB_AUTH_COUNTER_MAX))
		return PHUB_DROP_AUTH_REPLAY;
	return PHUB_DROP_OK;
}

bool
phub_engine_auth_has_keys(const struct phub_engine_job *job, uint16_t rank)
{
	return job->auth != NULL && rank < job->world_size &&
		atomic_load_explicit(&job->auth->ranks[rank].gen, memory_order_acquire) != 0;
}

bool
phub_engine_auth_tx(struct phub_engine_job *job, uint16_t rank, unsigned int lane,
		uint16_t channel, void *hdr, size_t hdr_len, const void *payload,
		size_t payload_len)
{
	struct engine_auth *a = job->auth;
	struct phub_auth_mac *m;
	struct auth_lane *l;

	if (a == NULL || rank >= job->world_size || lane >= a->n_lanes)
		return false;
	m = mac_of(a, rank, lane, MAC_TX, &l);
	/* A counter never comes back under one key: 2^48 datagrams end the stream instead. */
	if (m == NULL || l->tx_next > PHUB_AUTH_COUNTER_MAX)
		return false;
	phub_auth_mac_seal(m, phub_auth_seq(channel, l->tx_next++), hdr, hdr_len, payload,
			payload_len);
	return true;
}
