/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fuzz target of lib/auth: arbitrary datagrams into the MAC check (it must agree with a reseal
 * and never read out of bounds) and arbitrary sequence-number streams into the replay window
 * (it must agree with a model that remembers every number).
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "phub_auth.h"

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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	require(phub_auth_init() == 0);
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		fuzz_window(data + 1, size - 1);
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
