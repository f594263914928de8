/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An authenticated ring job's RING_HELLO (docs/protocol.md section 12): each PBox's ephemeral
 * X25519 key per neighbour in its HELLO's AUTH extension, the HELLO's MAC under the ring's PSK
 * with a sequence number that only grows, and the link keys both ends derive from the two keys
 * and the PSK, handed to the engine, which seals and checks every ring datagram with them.
 */

#include <string.h>
#include <time.h>

#include "control_priv.h"
#include "engine/phub_engine_auth.h"

/* In a ring of two, prev and next are one PBox: one key pair, one set of keys. */
static unsigned int
slot_of(const struct cring *r, const struct cring_link *l)
{
	return r->prev.pos == r->next.pos || l == &r->prev ? PHUB_ENGINE_RING_PREV :
		PHUB_ENGINE_RING_NEXT;
}

void
control_ring_auth_start(struct cring *r)
{
	struct cring_auth *a = &r->auth;
	uint8_t psk[PHUB_AUTH_KEY_LEN];

	memset(a, 0, sizeof(*a));
	if (!r->decl->auth || phub_auth_init() != 0)
		return;
	phub_auth_job_psk(psk, r->decl->name, r->decl->nonce, r->decl->key);
	phub_auth_ring_psk(a->ring_psk, psk);
	phub_auth_wipe(psk, sizeof(psk));
	/* Fresh for every ring session of the job here: a restart never meets its old keys. */
	for (unsigned int s = 0; s < 2; s++)
		phub_auth_keypair(a->pk[s], a->sk[s]);
	a->on = true;
}

void
control_ring_auth_end(struct cring *r)
{
	phub_auth_wipe(&r->auth, sizeof(r->auth));
}

/*
 * The number of our next HELLO: the wall clock's milliseconds, or one more than the last. A
 * PBox that restarts numbers on from where its earlier run stopped (as WireGuard's handshake
 * carries a TAI64N time), so that its neighbours refuse an old HELLO of that run sent again.
 */
static uint64_t
hello_seq_next(struct cring_auth *a)
{
	struct timespec ts;
	uint64_t ms = 0;

	if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
		ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	a->hello_seq = ms > a->hello_seq ? ms : a->hello_seq + 1;
	return a->hello_seq & PHUB_AUTH_COUNTER_MAX;
}

int
control_ring_auth_seal(struct cring *r, const struct cring_link *l, uint8_t *buf, size_t len,
		size_t cap)
{
	struct cring_auth *a = &r->auth;

	if (!a->on)
		return (int)len;
	return phub_auth_wire_seal_hs_seq(buf, len, cap, a->pk[slot_of(r, l)], a->ring_psk,
			phub_auth_seq(0, hello_seq_next(a)));
}

enum phub_drop_reason
control_ring_auth_check(const struct cring *r, const struct cring_link *l, const uint8_t *dgram,
		const struct phub_wire_msg *msg, const struct phub_wire_ring_hello *h)
{
	const struct cring_auth *a = &r->auth;
	bool flagged = (msg->flags & PHUB_WIRE_F_AUTH) != 0;
	bool capped = (h->caps & PHUB_WIRE_RING_CAP_AUTH) != 0;
	uint64_t seq;

	if (!a->on)
		return flagged || capped ? PHUB_DROP_AUTH_UNEXPECTED : PHUB_DROP_OK;
	/* A neighbour that does not authenticate its ring is refused: it would send in clear. */
	if (!flagged || !capped)
		return PHUB_DROP_AUTH_MISSING;
	if (!phub_auth_hs_open(a->ring_psk, dgram, msg->hdr_len, dgram + msg->hdr_len,
			msg->payload_len, &seq))
		return PHUB_DROP_AUTH_BAD_TAG;
	if (phub_auth_seq_channel(seq) != 0)
		return PHUB_DROP_AUTH_CHANNEL;
	/* Seen before, or older than the newest taken: a HELLO recorded and sent again. */
	if ((seq & PHUB_AUTH_COUNTER_MAX) <= a->hello_top[slot_of(r, l)])
		return PHUB_DROP_AUTH_REPLAY;
	return PHUB_DROP_OK;
}

int
control_ring_auth_take(struct phub_control *ctl, struct cjob *cj, const struct cring_link *l,
		const uint8_t *dgram, const struct phub_wire_msg *msg)
{
	struct cring *r = &cj->ring;
	struct cring_auth *a = &r->auth;
	unsigned int s = slot_of(r, l);
	const uint8_t *pk;
	struct phub_auth_keys keys;
	uint8_t seqb[PHUB_AUTH_SEQ_LEN];
	uint64_t seq = 0;
	int rc;

	if (!a->on)
		return 0;
	/* The sequence number control_ring_auth_check() read: big-endian, before the tag. */
	memcpy(seqb, dgram + msg->hdr_len - PHUB_AUTH_TRAILER_LEN, sizeof(seqb));
	for (unsigned int i = 0; i < sizeof(seqb); i++)
		seq = (seq << 8) | seqb[i];
	if ((seq & PHUB_AUTH_COUNTER_MAX) > a->hello_top[s])
		a->hello_top[s] = seq & PHUB_AUTH_COUNTER_MAX;
	pk = phub_auth_wire_pk((uint8_t *)(uintptr_t)dgram, msg->hdr_len);
	if (a->keyed[s] && memcmp(a->peer_pk[s], pk, PHUB_AUTH_PK_LEN) == 0)
		return 0;	/* its key of this session: the keys we hold */
	rc = phub_auth_ring_keys(&keys, a->ring_psk, a->sk[s], a->pk[s], pk, r->pos < l->pos);
	if (rc == 0)
		rc = phub_engine_job_ring_auth_keys(cj->job, s, keys.tx, keys.rx);
	phub_auth_wipe(&keys, sizeof(keys));
	if (rc != 0) {
		control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s: ring position %u: no keys for the "
				"link to position %u (%d)", r->decl->name, r->pos, l->pos, rc);
		return rc;
	}
	memcpy(a->peer_pk[s], pk, PHUB_AUTH_PK_LEN);
	a->keyed[s] = true;
	return 0;
}
