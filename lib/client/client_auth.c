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

static void
lanes_free(struct phub *h)
{
	for (uint32_t i = 0; h->auth_lanes != NULL && i < h->n_auth_lanes; i++)
		phub_auth_lane_fini(&h->auth_lanes[i]);
	free(h->auth_lanes);
	h->auth_lanes = NULL;
	h->n_auth_lanes = 0;
}

int
client_auth_init(struct phub *h, const struct phub_connect_params *p)
{
	const char *hex = p->key != NULL ? p->key : getenv("PHUB_KEY");
	uint8_t psk[PHUB_AUTH_KEY_LEN], key[PHUB_AUTH_KEY_LEN];
	bool have_key = hex != NULL && hex[0] != '\0';

	if (!(p->flags & PHUB_CONNECT_F_AUTH))
		return 0;
	if (phub_auth_init() != 0)
		return -EIO;
	if (have_key && phub_auth_key_parse(key, hex) != 0)
		return -EINVAL;
	h->auth = true;
	phub_auth_job_psk(psk, p->job, p->nonce, have_key ? key : NULL);
	phub_auth_wipe(key, sizeof(key));
	phub_auth_initiator_init(&h->auth_join, psk);
	phub_auth_wipe(psk, sizeof(psk));
	return 0;
}

void
client_auth_free(struct phub *h)
{
	lanes_free(h);
	phub_auth_initiator_wipe(&h->auth_join);
	phub_auth_wipe(&h->auth_keys, sizeof(h->auth_keys));
}

void
client_auth_join_start(struct phub *h)
{
	phub_auth_initiator_start(&h->auth_join);
}

int
client_auth_join_seal(struct phub *h, uint8_t *buf, size_t len, size_t cap)
{
	return phub_auth_initiator_seal(&h->auth_join, buf, len, cap);
}

bool
client_auth_join_ack(struct phub *h, const uint8_t *buf, const struct phub_wire_msg *msg)
{
	if (!h->auth)
		return true;
	if ((msg->flags & PHUB_WIRE_F_AUTH) &&
	    phub_auth_initiator_answer(&h->auth_join, buf, msg->hdr_len, msg->payload,
			msg->payload_len))
		return true;
	h->stats.rx_auth_failed++;
	return false;
}

int
client_auth_commit(struct phub *h)
{
	size_t n;

	if (!h->auth)
		return 0;
	if (!h->auth_join.next_ok)
		return -EPROTO;
	n = 1 + (size_t)h->n_endpoints;
	/* The same keys (the PBox answered our JOIN again): the same streams, numbers go on. */
	if (h->auth_lanes != NULL && n == h->n_auth_lanes &&
	    sodium_memcmp(&h->auth_keys, &h->auth_join.next, sizeof(h->auth_keys)) == 0)
		return 0;
	lanes_free(h);
	h->auth_lanes = calloc(n, sizeof(*h->auth_lanes));
	if (h->auth_lanes == NULL)
		return -ENOMEM;
	h->n_auth_lanes = (uint32_t)n;
	for (size_t i = 0; i < n; i++) {
		if (phub_auth_lane_init(&h->auth_lanes[i], &h->auth_join.next) != 0) {
			lanes_free(h);
			return -ENOMEM;
		}
	}
	h->auth_keys = h->auth_join.next;
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

	if (lane < 0 || (uint32_t)lane >= h->n_auth_lanes)
		return false;
	return phub_auth_lane_seal(&h->auth_lanes[lane], (uint16_t)lane, hdr, hdr_len, payload,
			payload_len);
}

bool
client_auth_rx(struct phub *h, const struct sockaddr_in *src, const uint8_t *buf,
		const struct phub_wire_msg *msg)
{
	int lane = src != NULL ? lane_of(h, src) : -1;

	if ((msg->flags & PHUB_WIRE_F_AUTH) && lane >= 0 && (uint32_t)lane < h->n_auth_lanes &&
	    phub_auth_lane_open(&h->auth_lanes[lane], (uint16_t)lane, buf, msg->hdr_len,
			msg->payload, msg->payload_len))
		return true;
	h->stats.rx_auth_failed++;
	return false;
}
