/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The cost of authenticating one datagram, per construction the design could use, at the PUSH
 * sizes of the packet path: what lib/auth does (GMAC: AES-256-GCM with the header and payload
 * as additional data in two parts, libcrypto, the key scheduled once per stream), the same with
 * a key schedule per datagram, libsodium's AES-256-GCM (one contiguous buffer, with and without
 * its precomputed key), the ChaCha20 one-time key + Poly1305 lib/auth used before, and keyed
 * BLAKE2b (the handshake's); ns per datagram and GB/s. Beside them, the UDP checksum pass over
 * the same datagram (lib/net's raw sum) that the MAC replaces on the PBox (protocol.md section 8).
 *
 * usage: phub-bench-auth [--quick] [--json]
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "auth/phub_auth.h"
#include "net/phub_net_csum.h"

enum { HDR = 80, MAX_PAYLOAD = 8192 };

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint8_t dgram[HDR + MAX_PAYLOAD];
static uint8_t key[32];

static struct phub_auth_mac *mac;

/*
 * lib/auth's seal (the sender) and open (the receiver) as the data path calls them, with the
 * stream's key scheduled once, or given each time (a key schedule per datagram).
 */
static void
gmac_round(size_t len, uint64_t seq, bool kept)
{
	uint64_t got;
	bool ok;

	if (kept) {
		phub_auth_mac_seal(mac, seq, dgram, HDR, dgram + HDR, len);
		ok = phub_auth_mac_open(mac, dgram, HDR, dgram + HDR, len, &got);
	} else {
		phub_auth_seal(key, seq, dgram, HDR, dgram + HDR, len);
		ok = phub_auth_open(key, dgram, HDR, dgram + HDR, len, &got);
	}
	if (!ok)
		fprintf(stderr, "open failed\n");
}

static void
run_gmac(size_t len, uint64_t seq)
{
	gmac_round(len, seq, true);
}

static void
run_gmac_rekey(size_t len, uint64_t seq)
{
	gmac_round(len, seq, false);
}

/* What lib/auth did before: Poly1305 keyed with ChaCha20(key, seq)'s first 32 bytes. */
static void
poly_tag(uint8_t tag[16], uint64_t seq, size_t len)
{
	uint8_t nonce[crypto_stream_chacha20_ietf_NONCEBYTES] = { 0 };
	uint8_t otk[crypto_onetimeauth_KEYBYTES];
	crypto_onetimeauth_state st;

	memcpy(nonce + 4, &seq, sizeof(seq));
	crypto_stream_chacha20_ietf(otk, sizeof(otk), nonce, key);
	crypto_onetimeauth_init(&st, otk);
	crypto_onetimeauth_update(&st, dgram, HDR - 16);
	crypto_onetimeauth_update(&st, dgram + HDR, len);
	crypto_onetimeauth_final(&st, tag);
}

/* Tags the datagram twice and compares the tags: the cost of a seal and of an open. */
static void
tag_twice(void (*tag_fn)(uint8_t tag[16], uint64_t seq, size_t len), uint64_t seq, size_t len,
		const char *what)
{
	uint8_t tag[16], tag2[16];

	tag_fn(tag, seq, len);
	tag_fn(tag2, seq, len);
	if (crypto_verify_16(tag, tag2) != 0)
		fprintf(stderr, "%s mismatch\n", what);
}

static void
run_poly(size_t len, uint64_t seq)
{
	tag_twice(poly_tag, seq, len, "poly1305");
}

static crypto_aead_aes256gcm_state gcm_state;

/* AES-256-GCM over header and payload as additional data: with the key, or with pre's. */
static void
gcm_tag(uint8_t tag[16], uint64_t seq, size_t len, const crypto_aead_aes256gcm_state *pre)
{
	uint8_t nonce[crypto_aead_aes256gcm_NPUBBYTES] = { 0 };
	uint8_t none[1] = { 0 };
	unsigned long long tl;

	memcpy(nonce, &seq, sizeof(seq));
	if (pre == NULL)
		crypto_aead_aes256gcm_encrypt_detached(none, tag, &tl, none, 0, dgram,
				HDR - 16 + len, NULL, nonce, key);
	else
		crypto_aead_aes256gcm_encrypt_detached_afternm(none, tag, &tl, none, 0, dgram,
				HDR - 16 + len, NULL, nonce, pre);
}

static void
gcm_key_tag(uint8_t tag[16], uint64_t seq, size_t len)
{
	gcm_tag(tag, seq, len, NULL);
}

/* libsodium's precomputed key; needs the datagram in one buffer (a copy on zero-copy TX). */
static void
gcm_pre_tag(uint8_t tag[16], uint64_t seq, size_t len)
{
	gcm_tag(tag, seq, len, &gcm_state);
}

static void
run_gcm(size_t len, uint64_t seq)
{
	tag_twice(gcm_key_tag, seq, len, "gcm");
}

/* The checksum pass a PBox makes over a plain PUSH (and a MODEL's payload), twice per round. */
static volatile uint16_t csum_sink;

static void
run_csum(size_t len, uint64_t seq)
{
	dgram[0] = (uint8_t)seq;
	csum_sink = phub_net_raw_cksum(dgram, HDR + len);
	dgram[1] = (uint8_t)seq;
	csum_sink = phub_net_raw_cksum(dgram, HDR + len);
}

static void
run_gcm_pre(size_t len, uint64_t seq)
{
	tag_twice(gcm_pre_tag, seq, len, "gcm");
}

static void
run_blake2b(size_t len, uint64_t seq)
{
	uint64_t got;

	phub_auth_hs_seal(key, seq, dgram, HDR, dgram + HDR, len);
	if (!phub_auth_hs_open(key, dgram, HDR, dgram + HDR, len, &got))
		fprintf(stderr, "open failed\n");
}

struct method {
	const char *name;
	void (*run)(size_t len, uint64_t seq);
	bool (*available)(void);
};

static bool
always(void)
{
	return true;
}

static bool
gcm_available(void)
{
	return crypto_aead_aes256gcm_is_available() != 0;
}

int
main(int argc, char **argv)
{
	static const struct method methods[] = {
		{ "gmac libcrypto (lib/auth)", run_gmac, always },
		{ "gmac libcrypto, rekey each", run_gmac_rekey, always },
		{ "aes256gcm libsodium", run_gcm, gcm_available },
		{ "aes256gcm libsodium precomp", run_gcm_pre, gcm_available },
		{ "chacha20-poly1305 (before)", run_poly, always },
		{ "blake2b-128", run_blake2b, always },
		{ "udp checksum (no MAC)", run_csum, always },
	};
	static const size_t sizes[] = { 8192, 1024 };
	bool quick = false, json = false;
	unsigned int rounds;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0)
			quick = true;
		else if (strcmp(argv[i], "--json") == 0)
			json = true;
		else {
			fprintf(stderr, "usage: %s [--quick] [--json]\n", argv[0]);
			return 2;
		}
	}
	if (phub_auth_init() != 0)
		return 1;
	randombytes_buf(key, sizeof(key));
	mac = phub_auth_mac_new(key);
	if (mac == NULL)
		return 1;
	if (gcm_available())
		crypto_aead_aes256gcm_beforenm(&gcm_state, key);
	if (!json)
		printf("AES-NI and PCLMULQDQ: %s\n", phub_auth_mac_hw() ? "yes" :
			"no (lib/auth's GMAC runs in libcrypto's software AES and GHASH)");
	randombytes_buf(dgram, sizeof(dgram));
	rounds = quick ? 20000 : 200000;
	if (json)
		printf("[");
	for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
		if (!methods[m].available()) {
			if (!json)
				printf("%-30s not available on this CPU\n", methods[m].name);
			continue;
		}
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			uint64_t best = UINT64_MAX;

			/* Best of 5: the machine is shared; a seal and an open per round. */
			for (int rep = 0; rep < 5; rep++) {
				uint64_t t0 = now_ns();

				for (unsigned int r = 0; r < rounds; r++)
					methods[m].run(sizes[s], r);
				t0 = now_ns() - t0;
				best = t0 < best ? t0 : best;
			}
			{
				double ns = (double)best / rounds / 2;	/* per seal or open */
				double gbs = (double)(HDR + sizes[s]) / ns;

				if (json)
					printf("%s{\"method\": \"%s\", \"payload\": %zu, "
						"\"ns\": %.1f, \"gb_s\": %.2f}",
						(m || s) ? ", " : "",
						methods[m].name, sizes[s], ns, gbs);
				else
					printf("%-30s payload %5zu B: %7.1f ns per datagram, "
						"%5.2f GB/s\n",
						methods[m].name, sizes[s], ns, gbs);
			}
		}
	}
	if (json)
		printf("]\n");
	phub_auth_mac_free(mac);
	return 0;
}
