/* SPDX-License-Identifier: BSD-3-Clause */
/* The AUTH extension on datagrams lib/wire has already encoded (control messages, JOIN). */

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "phub_auth.h"
#include "wire/phub_wire.h"

static_assert(PHUB_AUTH_TRAILER_LEN == PHUB_WIRE_AUTH_TRAILER_LEN, "one trailer length");
static_assert(PHUB_AUTH_PK_LEN == PHUB_WIRE_AUTH_PK_LEN, "one key length");

int
phub_auth_wire_extend(uint8_t *dgram, size_t len, size_t cap)
{
	size_t hdr_len, ext, total;
	uint8_t flags;

	if (dgram == NULL || len < PHUB_WIRE_HDR_LEN)
		return -EINVAL;
	hdr_len = dgram[offsetof(struct phub_wire_hdr, hdr_len)];
	flags = dgram[offsetof(struct phub_wire_hdr, flags)];
	if (hdr_len < PHUB_WIRE_HDR_LEN || hdr_len > len || (flags & PHUB_WIRE_F_AUTH))
		return -EINVAL;
	ext = phub_wire_auth_ext_len(dgram[offsetof(struct phub_wire_hdr, opcode)]);
	total = len + ext;
	if (total > cap || total > PHUB_WIRE_MAX_DATAGRAM || hdr_len + ext > UINT8_MAX)
		return -ENOSPC;
	memmove(dgram + hdr_len + ext, dgram + hdr_len, len - hdr_len);
	memset(dgram + hdr_len, 0, ext);
	dgram[offsetof(struct phub_wire_hdr, hdr_len)] = (uint8_t)(hdr_len + ext);
	dgram[offsetof(struct phub_wire_hdr, flags)] =
		(uint8_t)((flags | PHUB_WIRE_F_AUTH) & ~PHUB_WIRE_F_CSUM);
	memset(dgram + offsetof(struct phub_wire_hdr, csum), 0, 4);
	return (int)total;
}

int
phub_auth_wire_seal_hs(uint8_t *dgram, size_t len, size_t cap,
		const uint8_t pk[PHUB_AUTH_PK_LEN], const uint8_t key[PHUB_AUTH_KEY_LEN])
{
	return phub_auth_wire_seal_hs_seq(dgram, len, cap, pk, key, 0);
}

int
phub_auth_wire_seal_hs_seq(uint8_t *dgram, size_t len, size_t cap,
		const uint8_t pk[PHUB_AUTH_PK_LEN], const uint8_t key[PHUB_AUTH_KEY_LEN],
		uint64_t seq)
{
	int n = phub_auth_wire_extend(dgram, len, cap);
	size_t hdr_len;

	if (n < 0)
		return n;
	hdr_len = dgram[offsetof(struct phub_wire_hdr, hdr_len)];
	memcpy(phub_auth_wire_pk(dgram, hdr_len), pk, PHUB_AUTH_PK_LEN);
	phub_auth_hs_seal(key, seq, dgram, hdr_len, dgram + hdr_len, (size_t)n - hdr_len);
	return n;
}
