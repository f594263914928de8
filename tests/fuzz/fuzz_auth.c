/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fuzz target of lib/auth: arbitrary datagrams into the MAC check (it must agree with a reseal
 * and never read out of bounds), arbitrary sequence-number streams into the replay window
 * (it must agree with a model that remembers every number), and a ring link's key exchange
 * from arbitrary secrets and keys (both ends agree, or both refuse a low-order key).
 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "phub_auth.h"
#include "wire/phub_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { SPAN = 1 << 20 };

static uint8_t seen[SPAN / 8];
static uint8_t copy[65536 + 256];

static void
require(int cond)
{
	if (!cond)
		abort();
}

/* Bytes 1.. as 3-byte steps: a distance behind or ahead of the newest number. */
static void
fuzz_window(const uint8_t *data, size_t size)
{
	struct phub_auth_window w;
	uint64_t top = 0;

	memset(seen, 0, sizeof(seen));
	phub_auth_window_reset(&w);
	for (size_t i = 0; i + 3 <= size; i += 3) {
		uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];
		uint64_t c;
		bool want, got;

		/* Top bit: ahead by up to 2^15; else behind by up to 2^23 - 1. */
		if (v & 0x800000)
			c = top + (v & 0x7fff);
		else
			c = top > v ? top - v : 0;
		if (c >= SPAN)
			return;
		want = !(seen[c / 8] & (1u << (c % 8))) &&
			(c >= top || top - c <= PHUB_AUTH_WINDOW);
		got = phub_auth_window_update(&w, c);
		require(got == want);
		require(phub_auth_window_check(&w, c) == false);
		if (got) {
			seen[c / 8] |= (uint8_t)(1u << (c % 8));
			if (c >= top)
				top = c + 1;
		}
	}
}

/* Byte 1 picks the header length; the rest is the datagram. */
static void
fuzz_mac(const uint8_t *data, size_t size, bool handshake)
{
	static const uint8_t key[PHUB_AUTH_KEY_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	size_t hdr_len;
	uint64_t seq = 0, seq2 = 0;
	bool ok;

	if (size < 2 || size - 2 > sizeof(copy))
		return;
	hdr_len = PHUB_AUTH_TRAILER_LEN + 8u * (data[1] % 32);
	data += 2;
	size -= 2;
	if (hdr_len > size)
		return;
	/* Exact-size copy: a read past it is a sanitizer error. */
	memcpy(copy, data, size);
	ok = handshake ? phub_auth_hs_open(key, copy, hdr_len, copy + hdr_len, size - hdr_len, &seq)
		       : phub_auth_open(key, copy, hdr_len, copy + hdr_len, size - hdr_len, &seq);
	/* Sealing the same bytes at the same number gives a tag that opens, and it is the
	 * datagram's own exactly when the datagram opened. */
	if (handshake)
		phub_auth_hs_seal(key, seq, copy, hdr_len, copy + hdr_len, size - hdr_len);
	else
		phub_auth_seal(key, seq, copy, hdr_len, copy + hdr_len, size - hdr_len);
	require(ok == (memcmp(copy, data, size) == 0));
	require(handshake ? phub_auth_hs_open(key, copy, hdr_len, copy + hdr_len,
					size - hdr_len, &seq2)
			  : phub_auth_open(key, copy, hdr_len, copy + hdr_len, size - hdr_len,
					  &seq2));
	require(seq2 == seq);
}

/*
 * Bytes 1..: a third party's "public key" (any 32 bytes: a key swapped in on the spine) and a
 * HELLO number, then a RING_HELLO-like body sealed at that number and opened again. The two
 * neighbours' key pairs are fresh ones.
 */
static void
fuzz_ring(const uint8_t *data, size_t size)
{
	uint8_t psk[PHUB_AUTH_KEY_LEN] = { 7 }, rpsk[PHUB_AUTH_KEY_LEN];
	uint8_t ask[PHUB_AUTH_SK_LEN], bsk[PHUB_AUTH_SK_LEN], apk[PHUB_AUTH_PK_LEN];
	uint8_t bpk[PHUB_AUTH_PK_LEN], xpk[PHUB_AUTH_PK_LEN];
	struct phub_auth_keys a, b;
	uint8_t dg[256];
	uint64_t seq = 0, want;
	size_t hl;
	int ra, rb, n;

	if (size < 32 + 8)
		return;
	memcpy(xpk, data, 32);
	memcpy(&want, data + 32, 8);
	want &= PHUB_AUTH_COUNTER_MAX;
	data += 40;
	size -= 40;
	phub_auth_ring_psk(rpsk, psk);
	phub_auth_keypair(apk, ask);
	phub_auth_keypair(bpk, bsk);
	ra = phub_auth_ring_keys(&a, rpsk, ask, apk, bpk, true);
	rb = phub_auth_ring_keys(&b, rpsk, bsk, bpk, apk, false);
	require(ra == 0 && rb == 0);
	require(phub_auth_key_equal(a.tx, b.rx) && phub_auth_key_equal(a.rx, b.tx));
	/* A key from the spine: refused when low-order, else keys nobody else holds. */
	ra = phub_auth_ring_keys(&a, rpsk, ask, apk, xpk, true);
	if (ra == 0)
		require(!phub_auth_key_equal(a.tx, b.rx) || memcmp(xpk, bpk, 32) == 0);
	/* The rest as a HELLO's body behind a header: sealed at want, it opens at want. */
	if (size > sizeof(dg) - PHUB_WIRE_HDR_LEN - 56)
		size = sizeof(dg) - PHUB_WIRE_HDR_LEN - 56;
	memset(dg, 0, sizeof(dg));
	dg[offsetof(struct phub_wire_hdr, opcode)] = PHUB_WIRE_OP_RING_HELLO;
	dg[offsetof(struct phub_wire_hdr, hdr_len)] = PHUB_WIRE_HDR_LEN;
	memcpy(dg + PHUB_WIRE_HDR_LEN, data, size);
	n = phub_auth_wire_seal_hs_seq(dg, PHUB_WIRE_HDR_LEN + size, sizeof(dg), apk, rpsk,
			phub_auth_seq(0, want));
	require(n == (int)(PHUB_WIRE_HDR_LEN + size + 56));
	hl = dg[offsetof(struct phub_wire_hdr, hdr_len)];
	require(phub_auth_hs_open(rpsk, dg, hl, dg + hl, (size_t)n - hl, &seq));
	require(seq == phub_auth_seq(0, want));
	require(memcmp(phub_auth_wire_pk(dg, hl), apk, 32) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	require(phub_auth_init() == 0);
	if (size < 1)
		return 0;
	/* 0 .. 3 as before the ring's case (its seeds keep their meaning), 4 the ring's. */
	switch (data[0] % 5) {
	case 0:
	case 3:
		fuzz_window(data + 1, size - 1);
		break;
	case 4:
		fuzz_ring(data + 1, size - 1);
		break;
	case 1:
		fuzz_mac(data, size, false);
		break;
	default:
		fuzz_mac(data, size, true);
		break;
	}
	return 0;
}
