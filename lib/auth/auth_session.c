/* SPDX-License-Identifier: BSD-3-Clause */
/* One side's sessions: a JOIN's initiator and the lanes of a session, for every worker. */

#include <errno.h>
#include <string.h>

#include <sodium.h>

#include "phub_auth.h"

void
phub_auth_initiator_init(struct phub_auth_initiator *in, const uint8_t psk[PHUB_AUTH_KEY_LEN])
{
	memset(in, 0, sizeof(*in));
	memcpy(in->psk, psk, PHUB_AUTH_KEY_LEN);
}

void
phub_auth_initiator_start(struct phub_auth_initiator *in)
{
	/*
	 * One ephemeral key per initiator: a JOIN again (a PBox restart, or a plain ERROR that may
	 * be forged) then meets a PBox that still holds our session with its own answer and keys,
	 * and a restarted one with a fresh key of its own, so every session's keys are new.
	 */
	if (!in->have_pk)
		phub_auth_keypair(in->pk, in->sk);
	in->have_pk = true;
	memset(in->ppk, 0, sizeof(in->ppk));
	in->next_ok = false;
}

int
phub_auth_initiator_seal(const struct phub_auth_initiator *in, uint8_t *dgram, size_t len,
		size_t cap)
{
	if (!in->have_pk)
		return -EINVAL;
	return phub_auth_wire_seal_hs(dgram, len, cap, in->pk, in->psk);
}

bool
phub_auth_initiator_answer(struct phub_auth_initiator *in, const uint8_t *dgram, size_t hdr_len,
		const void *payload, size_t payload_len)
{
	struct phub_auth_keys k;
	const uint8_t *ppk;
	uint64_t seq;
	bool ok;

	if (!in->have_pk || hdr_len < PHUB_AUTH_TRAILER_LEN + PHUB_AUTH_PK_LEN)
		return false;
	ppk = phub_auth_wire_pk((uint8_t *)(uintptr_t)dgram, hdr_len);
	/* One key exchange per PBox key: the datagrams of one answer all carry the same. */
	if (in->next_ok && memcmp(ppk, in->ppk, PHUB_AUTH_PK_LEN) == 0)
		return phub_auth_hs_open(in->next.confirm, dgram, hdr_len, payload, payload_len,
				&seq);
	if (phub_auth_session_keys(&k, in->psk, in->sk, ppk, in->pk, ppk, true) != 0)
		return false;
	ok = phub_auth_hs_open(k.confirm, dgram, hdr_len, payload, payload_len, &seq);
	if (ok) {
		in->next = k;
		memcpy(in->ppk, ppk, PHUB_AUTH_PK_LEN);
		in->next_ok = true;
	}
	phub_auth_wipe(&k, sizeof(k));
	return ok;
}

void
phub_auth_initiator_wipe(struct phub_auth_initiator *in)
{
	phub_auth_wipe(in, sizeof(*in));
}

int
phub_auth_lane_init(struct phub_auth_lane *l, const struct phub_auth_keys *keys)
{
	memset(l, 0, sizeof(*l));
	l->tx_mac = phub_auth_mac_new(keys->tx);
	l->rx_mac = phub_auth_mac_new(keys->rx);
	if (l->tx_mac == NULL || l->rx_mac == NULL) {
		phub_auth_lane_fini(l);
		return -ENOMEM;
	}
	phub_auth_window_reset(&l->win);
	return 0;
}

void
phub_auth_lane_fini(struct phub_auth_lane *l)
{
	phub_auth_mac_free(l->tx_mac);
	phub_auth_mac_free(l->rx_mac);
	memset(l, 0, sizeof(*l));
}

bool
phub_auth_lane_seal(struct phub_auth_lane *l, uint16_t channel, void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len)
{
	if (l->tx_mac == NULL || l->tx_next > PHUB_AUTH_COUNTER_MAX)
		return false;
	phub_auth_mac_seal(l->tx_mac, phub_auth_seq(channel, l->tx_next++), hdr, hdr_len,
			payload, payload_len);
	return true;
}

bool
phub_auth_lane_open(struct phub_auth_lane *l, uint16_t channel, const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len)
{
	uint64_t seq;

	if (l->rx_mac == NULL ||
	    !phub_auth_mac_open(l->rx_mac, hdr, hdr_len, payload, payload_len, &seq))
		return false;
	/* Numbered for the port it came from, and never seen before. */
	return phub_auth_seq_channel(seq) == channel &&
		phub_auth_window_update(&l->win, seq & PHUB_AUTH_COUNTER_MAX);
}
