/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An authenticated session (PHUB_CONNECT_F_AUTH): the JOIN's key exchange, and the MAC and
 * replay window of every datagram after it (docs/protocol.md section 8).
 */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "client_priv.h"

/* The lanes of the session: 0 the control port, 1 + k endpoint k (as the PBox numbers them). */
struct client_auth_lane {
	uint64_t tx_next;
	/* The session's keys, scheduled once: whichever thread serves the lane uses them. */
	struct phub_auth_mac *tx_mac;
	struct phub_auth_mac *rx_mac;
	struct phub_auth_window win;
};

static void
lanes_free(struct phub *h)
{
	for (uint32_t i = 0; h->auth_lanes != NULL && i < h->n_auth_lanes; i++) {
		phub_auth_mac_free(h->auth_lanes[i].tx_mac);
		phub_auth_mac_free(h->auth_lanes[i].rx_mac);
	}
	free(h->auth_lanes);
	h->auth_lanes = NULL;
	h->n_auth_lanes = 0;
}

int
client_auth_init(struct phub *h, const struct phub_connect_params *p)
{
	if (!(p->flags & PHUB_CONNECT_F_AUTH))
		return 0;
	if (phub_auth_init() != 0)
		return -EIO;
	h->auth = true;
	phub_auth_psk(h->auth_psk, p->job, p->nonce);
	return 0;
}

void
client_auth_free(struct phub *h)
{
	lanes_free(h);
	phub_auth_wipe(h->auth_psk, sizeof(h->auth_psk));
	phub_auth_wipe(h->auth_sk, sizeof(h->auth_sk));
	phub_auth_wipe(&h->auth_keys, sizeof(h->auth_keys));
	phub_auth_wipe(&h->auth_next, sizeof(h->auth_next));
}

void
client_auth_join_start(struct phub *h)
{
	/*
	 * One ephemeral key per handle: a JOIN again (a PBox restart, or a plain ERROR that may be
	 * forged) then meets a PBox that still holds our session with its own answer and keys,
	 * and a restarted one with a fresh key of its own, so every session's keys are new.
	 */
	if (!h->auth_have_pk)
		phub_auth_keypair(h->auth_pk, h->auth_sk);
	h->auth_have_pk = true;
	memset(h->auth_ppk, 0, sizeof(h->auth_ppk));
	h->auth_next_ok = false;
}

int
client_auth_join_seal(struct phub *h, uint8_t *buf, size_t len, size_t cap)
{
	return phub_auth_wire_seal_hs(buf, len, cap, h->auth_pk, h->auth_psk);
}

bool
client_auth_join_ack(struct phub *h, const uint8_t *buf, const struct phub_wire_msg *msg)
{
	const uint8_t *ppk;
	uint64_t seq;

	if (!h->auth)
		return true;
	if (!(msg->flags & PHUB_WIRE_F_AUTH))
		goto bad;
	ppk = phub_auth_wire_pk((uint8_t *)(uintptr_t)buf, msg->hdr_len);
	/* One key exchange per PBox key: the datagrams of one answer all carry the same. */
	if (!h->auth_next_ok || memcmp(ppk, h->auth_ppk, PHUB_AUTH_PK_LEN) != 0) {
		struct phub_auth_keys k;

		if (phub_auth_session_keys(&k, h->auth_psk, h->auth_sk, ppk, h->auth_pk, ppk,
				true) != 0)
			goto bad;
		if (!phub_auth_hs_open(k.confirm, buf, msg->hdr_len, msg->payload,
				msg->payload_len, &seq)) {
			phub_auth_wipe(&k, sizeof(k));
			goto bad;
		}
		h->auth_next = k;
		memcpy(h->auth_ppk, ppk, PHUB_AUTH_PK_LEN);
		h->auth_next_ok = true;
		phub_auth_wipe(&k, sizeof(k));
		return true;
	}
	if (phub_auth_hs_open(h->auth_next.confirm, buf, msg->hdr_len, msg->payload,
			msg->payload_len, &seq))
		return true;
bad:
	h->stats.rx_auth_failed++;
	return false;
}

int
client_auth_commit(struct phub *h)
{
	size_t n;

	if (!h->auth)
		return 0;
	if (!h->auth_next_ok)
		return -EPROTO;
	n = 1 + (size_t)h->n_endpoints;
	/* The same keys (the PBox answered our JOIN again): the same streams, numbers go on. */
	if (h->auth_lanes != NULL && n == h->n_auth_lanes &&
	    sodium_memcmp(&h->auth_keys, &h->auth_next, sizeof(h->auth_keys)) == 0)
		return 0;
	lanes_free(h);
	h->auth_lanes = calloc(n, sizeof(*h->auth_lanes));
	if (h->auth_lanes == NULL)
		return -ENOMEM;
	h->n_auth_lanes = (uint32_t)n;
	for (size_t i = 0; i < n; i++) {
		h->auth_lanes[i].tx_mac = phub_auth_mac_new(h->auth_next.tx);
		h->auth_lanes[i].rx_mac = phub_auth_mac_new(h->auth_next.rx);
		if (h->auth_lanes[i].tx_mac == NULL || h->auth_lanes[i].rx_mac == NULL) {
			lanes_free(h);
			return -ENOMEM;
		}
	}
	h->auth_keys = h->auth_next;
	return 0;
}

/* The lane of a PBox address: its control port, or the first endpoint that matches. */
static int
lane_of(const struct phub *h, const struct sockaddr_in *a)
{
	if (a->sin_addr.s_addr == h->ctrl.sin_addr.s_addr && a->sin_port == h->ctrl.sin_port)
		return 0;
	/* Most callers pass an element of the table itself: no search then. */
	if ((uintptr_t)a >= (uintptr_t)h->endpoints &&
	    (uintptr_t)a < (uintptr_t)(h->endpoints + h->n_endpoints))
		return 1 + (int)(a - h->endpoints);
	for (uint32_t i = 0; i < h->n_endpoints; i++)
		if (a->sin_addr.s_addr == h->endpoints[i].sin_addr.s_addr &&
		    a->sin_port == h->endpoints[i].sin_port)
			return 1 + (int)i;
	return -1;
}

bool
client_auth_tx(struct phub *h, const struct sockaddr_in *dst, uint8_t *hdr, size_t hdr_len,
		const void *payload, size_t payload_len)
{
	int lane = lane_of(h, dst);
	struct client_auth_lane *l;

	if (lane < 0 || (uint32_t)lane >= h->n_auth_lanes)
		return false;
	l = &h->auth_lanes[lane];
	if (l->tx_next > PHUB_AUTH_COUNTER_MAX)
		return false;
	phub_auth_mac_seal(l->tx_mac, phub_auth_seq((uint16_t)lane, l->tx_next++), hdr, hdr_len,
			payload, payload_len);
	return true;
}

bool
client_auth_rx(struct phub *h, const struct sockaddr_in *src, const uint8_t *buf,
		const struct phub_wire_msg *msg)
{
	struct client_auth_lane *l;
	uint64_t seq;
	int lane;

	if (!(msg->flags & PHUB_WIRE_F_AUTH))
		goto bad;
	lane = src != NULL ? lane_of(h, src) : -1;
	if (lane < 0 || (uint32_t)lane >= h->n_auth_lanes)
		goto bad;
	l = &h->auth_lanes[lane];
	if (!phub_auth_mac_open(l->rx_mac, buf, msg->hdr_len, msg->payload, msg->payload_len,
			&seq))
		goto bad;
	/* Numbered for the port it came from, and never seen before. */
	if (phub_auth_seq_channel(seq) != lane ||
	    !phub_auth_window_update(&l->win, seq & PHUB_AUTH_COUNTER_MAX))
		goto bad;
	return true;
bad:
	h->stats.rx_auth_failed++;
	return false;
}
