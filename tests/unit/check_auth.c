/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/auth: key agreement, datagram MACs under every bit flip, the replay window. */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"
#include "test_rand.h"
#include <sodium.h>

#include "phub_auth.h"
#include "wire/phub_wire.h"

enum { HDR = 80, PAYLOAD = 1408 };

struct pair {
	uint8_t psk[PHUB_AUTH_KEY_LEN];
	uint8_t ipk[PHUB_AUTH_PK_LEN], isk[PHUB_AUTH_SK_LEN];
	uint8_t rpk[PHUB_AUTH_PK_LEN], rsk[PHUB_AUTH_SK_LEN];
	struct phub_auth_keys ik, rk;
};

static void
pair_make(struct pair *p, const char *name, uint64_t nonce)
{
	ck_assert_int_eq(phub_auth_init(), 0);
	phub_auth_psk(p->psk, name, nonce);
	phub_auth_keypair(p->ipk, p->isk);
	phub_auth_keypair(p->rpk, p->rsk);
	ck_assert_int_eq(phub_auth_session_keys(&p->ik, p->psk, p->isk, p->rpk, p->ipk, p->rpk,
			true), 0);
	ck_assert_int_eq(phub_auth_session_keys(&p->rk, p->psk, p->rsk, p->ipk, p->ipk, p->rpk,
			false), 0);
}

static void
fill(uint8_t *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 131u + i * 7u);
}

START_TEST(test_both_sides_derive_the_same_keys_per_direction)
{
	struct pair p;

	pair_make(&p, "job", 0x1234);
	ck_assert(phub_auth_key_equal(p.ik.tx, p.rk.rx));
	ck_assert(phub_auth_key_equal(p.ik.rx, p.rk.tx));
	ck_assert(phub_auth_key_equal(p.ik.confirm, p.rk.confirm));
	/* The two directions never share a key, so a reflected datagram does not verify. */
	ck_assert(!phub_auth_key_equal(p.ik.tx, p.ik.rx));
	ck_assert(!phub_auth_key_equal(p.ik.tx, p.ik.confirm));
}
END_TEST

START_TEST(test_keys_need_the_psk_and_an_ephemeral_secret)
{
	struct pair p;
	struct phub_auth_keys k;
	uint8_t psk2[PHUB_AUTH_KEY_LEN], epk[PHUB_AUTH_PK_LEN], esk[PHUB_AUTH_SK_LEN];

	pair_make(&p, "job", 0x1234);
	/* Another nonce, or the same nonce under another job name: another PSK. */
	phub_auth_psk(psk2, "job", 0x1235);
	ck_assert(!phub_auth_key_equal(psk2, p.psk));
	phub_auth_psk(psk2, "jo", 0x1234);
	ck_assert(!phub_auth_key_equal(psk2, p.psk));
	/* The right DH with a wrong PSK. */
	phub_auth_psk(psk2, "job", 0x1235);
	ck_assert_int_eq(phub_auth_session_keys(&k, psk2, p.rsk, p.ipk, p.ipk, p.rpk, false), 0);
	ck_assert(!phub_auth_key_equal(k.rx, p.ik.tx));
	/* The PSK (a rogue member of the job) with both public keys but neither secret. */
	phub_auth_keypair(epk, esk);
	ck_assert_int_eq(phub_auth_session_keys(&k, p.psk, esk, p.ipk, p.ipk, p.rpk, false), 0);
	ck_assert(!phub_auth_key_equal(k.rx, p.ik.tx));
	ck_assert(!phub_auth_key_equal(k.confirm, p.ik.confirm));
}
END_TEST

START_TEST(test_a_low_order_public_key_is_refused)
{
	struct phub_auth_keys k;
	uint8_t psk[PHUB_AUTH_KEY_LEN], pk[PHUB_AUTH_PK_LEN], sk[PHUB_AUTH_SK_LEN];
	uint8_t zero[PHUB_AUTH_PK_LEN] = { 0 };

	ck_assert_int_eq(phub_auth_init(), 0);
	phub_auth_psk(psk, "job", 1);
	phub_auth_keypair(pk, sk);
	ck_assert_int_lt(phub_auth_session_keys(&k, psk, sk, zero, pk, zero, true), 0);
}
END_TEST

START_TEST(test_the_ring_proof_depends_on_the_psk_and_is_not_the_nonce)
{
	uint8_t a[PHUB_AUTH_KEY_LEN], b[PHUB_AUTH_KEY_LEN];

	ck_assert_int_eq(phub_auth_init(), 0);
	phub_auth_psk(a, "ring", 0x1234);
	phub_auth_psk(b, "ring", 0x1235);
	ck_assert_uint_eq(phub_auth_ring_proof(a), phub_auth_ring_proof(a));
	ck_assert_uint_ne(phub_auth_ring_proof(a), phub_auth_ring_proof(b));
	ck_assert_uint_ne(phub_auth_ring_proof(a), 0x1234);
}
END_TEST

/* Two neighbours derive one link's keys whoever computes first; they are no worker's keys. */
START_TEST(test_ring_neighbours_derive_the_same_link_keys)
{
	uint8_t psk[PHUB_AUTH_KEY_LEN], rpsk[PHUB_AUTH_KEY_LEN], rpsk2[PHUB_AUTH_KEY_LEN];
	uint8_t apk[PHUB_AUTH_PK_LEN], ask[PHUB_AUTH_SK_LEN];
	uint8_t bpk[PHUB_AUTH_PK_LEN], bsk[PHUB_AUTH_SK_LEN];
	uint8_t cpk[PHUB_AUTH_PK_LEN], csk[PHUB_AUTH_SK_LEN];
	struct phub_auth_keys a, b, c, w;

	ck_assert_int_eq(phub_auth_init(), 0);
	phub_auth_psk(psk, "ring", 0x77);
	phub_auth_ring_psk(rpsk, psk);
	ck_assert(!phub_auth_key_equal(rpsk, psk));
	phub_auth_psk(psk, "ring", 0x78);
	phub_auth_ring_psk(rpsk2, psk);
	ck_assert(!phub_auth_key_equal(rpsk, rpsk2));
	phub_auth_keypair(apk, ask);
	phub_auth_keypair(bpk, bsk);
	/* a is position 0 (lower), b position 1. */
	ck_assert_int_eq(phub_auth_ring_keys(&a, rpsk, ask, apk, bpk, true), 0);
	ck_assert_int_eq(phub_auth_ring_keys(&b, rpsk, bsk, bpk, apk, false), 0);
	ck_assert(phub_auth_key_equal(a.tx, b.rx));
	ck_assert(phub_auth_key_equal(a.rx, b.tx));
	ck_assert(!phub_auth_key_equal(a.tx, a.rx));
	/* Both claiming the lower position: the keys do not pair up, nothing verifies. */
	ck_assert_int_eq(phub_auth_ring_keys(&c, rpsk, bsk, bpk, apk, true), 0);
	ck_assert(!phub_auth_key_equal(a.tx, c.rx));
	/* Another job's ring PSK, or a fresh key of the neighbour (it restarted): new keys. */
	ck_assert_int_eq(phub_auth_ring_keys(&c, rpsk2, bsk, bpk, apk, false), 0);
	ck_assert(!phub_auth_key_equal(a.tx, c.rx));
	phub_auth_keypair(cpk, csk);
	ck_assert_int_eq(phub_auth_ring_keys(&c, rpsk, ask, apk, cpk, true), 0);
	ck_assert(!phub_auth_key_equal(a.tx, c.tx));
	/* The job's PSK itself, as a worker's session would use it: other keys. */
	ck_assert_int_eq(phub_auth_session_keys(&w, psk, ask, bpk, apk, bpk, true), 0);
	ck_assert(!phub_auth_key_equal(a.tx, w.tx));
	/* A low-order key from the spine is refused. */
	memset(cpk, 0, sizeof(cpk));
	ck_assert_int_lt(phub_auth_ring_keys(&c, rpsk, ask, apk, cpk, true), 0);
}
END_TEST

/* A RING_HELLO's handshake MAC at a sequence number: it opens there and says the number. */
START_TEST(test_a_handshake_sealed_at_a_number_opens_with_it)
{
	uint8_t key[PHUB_AUTH_KEY_LEN] = { 9 }, pk[PHUB_AUTH_PK_LEN] = { 1, 2, 3 };
	uint8_t buf[256] = { 0 };
	uint64_t seq = 0;
	int n, len = PHUB_WIRE_HDR_LEN + 88;
	size_t hl;

	/* What phub_auth_wire_extend() reads of a header: opcode, flags, hdr_len. */
	buf[offsetof(struct phub_wire_hdr, opcode)] = PHUB_WIRE_OP_RING_HELLO;
	buf[offsetof(struct phub_wire_hdr, hdr_len)] = PHUB_WIRE_HDR_LEN;
	fill(buf + PHUB_WIRE_HDR_LEN, 88, 5);
	n = phub_auth_wire_seal_hs_seq(buf, (size_t)len, sizeof(buf), pk, key,
			phub_auth_seq(0, 12345));
	ck_assert_int_eq(n, len + PHUB_AUTH_PK_LEN + PHUB_AUTH_TRAILER_LEN);
	hl = buf[5];
	ck_assert(memcmp(phub_auth_wire_pk(buf, hl), pk, sizeof(pk)) == 0);
	ck_assert(phub_auth_hs_open(key, buf, hl, buf + hl, (size_t)n - hl, &seq));
	ck_assert_uint_eq(seq, phub_auth_seq(0, 12345));
	buf[hl - PHUB_AUTH_TRAILER_LEN + 7] ^= 1;	/* another number: the tag fails */
	ck_assert(!phub_auth_hs_open(key, buf, hl, buf + hl, (size_t)n - hl, &seq));
}
END_TEST

/*
 * The wire's MAC is AES-256-GCM with an empty plaintext: these tags come from Python's
 * cryptography AESGCM(key).encrypt(0^32 | seq, b"", header-to-tag + payload), outside lib/auth.
 */
START_TEST(test_the_datagram_mac_is_gmac_of_header_and_payload)
{
	static const uint8_t want[16] = { 0x43, 0x92, 0x8a, 0x47, 0x27, 0x29, 0x9e, 0xfe, 0x7a,
		0x7a, 0x3e, 0xa8, 0x55, 0xbe, 0x31, 0x5f };
	static const uint8_t want_empty[16] = { 0x80, 0xbe, 0x1f, 0xad, 0x5a, 0x98, 0xcb, 0x72,
		0x78, 0x74, 0xac, 0x03, 0x82, 0x6c, 0x94, 0x38 };
	uint64_t seq = phub_auth_seq(3, 0x0102030405);
	uint8_t key[PHUB_AUTH_KEY_LEN], hdr[HDR], pl[100];
	struct phub_auth_mac *m;

	ck_assert_int_eq(phub_auth_init(), 0);
	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)i;
	fill(hdr, sizeof(hdr), 1);
	fill(pl, sizeof(pl), 2);
	phub_auth_seal(key, seq, hdr, sizeof(hdr), pl, sizeof(pl));
	ck_assert_mem_eq(hdr + HDR - PHUB_AUTH_TAG_LEN, want, sizeof(want));
	/* A kept key schedule gives the same tags, datagram after datagram. */
	m = phub_auth_mac_new(key);
	ck_assert_ptr_nonnull(m);
	for (int i = 0; i < 3; i++) {
		memset(hdr + HDR - PHUB_AUTH_TAG_LEN, 0, PHUB_AUTH_TAG_LEN);
		phub_auth_mac_seal(m, seq, hdr, sizeof(hdr), pl, sizeof(pl));
		ck_assert_mem_eq(hdr + HDR - PHUB_AUTH_TAG_LEN, want, sizeof(want));
		phub_auth_mac_seal(m, seq, hdr, sizeof(hdr), NULL, 0);
		ck_assert_mem_eq(hdr + HDR - PHUB_AUTH_TAG_LEN, want_empty, sizeof(want_empty));
	}
	phub_auth_mac_free(m);
}
END_TEST

/* Where libsodium has its own AES-GCM (AES-NI), it must agree on a datagram in one buffer. */
START_TEST(test_the_datagram_mac_agrees_with_libsodium_aes256gcm)
{
	uint8_t key[PHUB_AUTH_KEY_LEN], dgram[HDR + PAYLOAD], aad[HDR + PAYLOAD];
	uint8_t nonce[crypto_aead_aes256gcm_NPUBBYTES] = { 0 }, tag[16], none[1];
	unsigned long long tl;
	struct phub_auth_mac *m;

	ck_assert_int_eq(phub_auth_init(), 0);
	if (!crypto_aead_aes256gcm_is_available())
		return;
	randombytes_buf(key, sizeof(key));
	randombytes_buf(dgram, sizeof(dgram));
	m = phub_auth_mac_new(key);
	ck_assert_ptr_nonnull(m);
	for (uint64_t seq = 0; seq < 300; seq += 7) {
		size_t len = (size_t)seq * 5 % PAYLOAD;

		phub_auth_mac_seal(m, phub_auth_seq(1, seq), dgram, HDR, dgram + HDR, len);
		memcpy(aad, dgram, HDR - PHUB_AUTH_TAG_LEN);
		memcpy(aad + HDR - PHUB_AUTH_TAG_LEN, dgram + HDR, len);
		for (int i = 0; i < 8; i++)
			nonce[4 + i] = (uint8_t)(phub_auth_seq(1, seq) >> (56 - 8 * i));
		crypto_aead_aes256gcm_encrypt_detached(none, tag, &tl, NULL, 0, aad,
				HDR - PHUB_AUTH_TAG_LEN + len, NULL, nonce, key);
		ck_assert_mem_eq(dgram + HDR - PHUB_AUTH_TAG_LEN, tag, sizeof(tag));
	}
	phub_auth_mac_free(m);
}
END_TEST

/* A rekeyed state is the new key's: what the old key sealed no longer opens. */
START_TEST(test_a_rekeyed_mac_state_is_the_new_keys)
{
	struct pair p;
	uint8_t hdr[HDR], pl[PAYLOAD];
	struct phub_auth_mac *tx, *rx;
	uint64_t seq;

	pair_make(&p, "job", 9);
	fill(hdr, sizeof(hdr), 3);
	fill(pl, sizeof(pl), 4);
	tx = phub_auth_mac_new(p.ik.tx);
	rx = phub_auth_mac_new(p.rk.rx);
	ck_assert(tx != NULL && rx != NULL);
	phub_auth_mac_seal(tx, 11, hdr, sizeof(hdr), pl, sizeof(pl));
	ck_assert(phub_auth_mac_open(rx, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
	ck_assert_uint_eq(seq, 11);
	ck_assert(phub_auth_open(p.rk.rx, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
	ck_assert_int_eq(phub_auth_mac_rekey(rx, p.rk.tx), 0);
	ck_assert(!phub_auth_mac_open(rx, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
	ck_assert_int_eq(phub_auth_mac_rekey(rx, p.rk.rx), 0);
	ck_assert(phub_auth_mac_open(rx, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
	phub_auth_mac_free(tx);
	phub_auth_mac_free(rx);
	phub_auth_mac_free(NULL);
}
END_TEST

START_TEST(test_a_sealed_datagram_opens_once_under_its_key)
{
	struct pair p;
	uint8_t hdr[HDR], pl[PAYLOAD];
	uint64_t seq = 0;

	pair_make(&p, "job", 7);
	fill(hdr, sizeof(hdr), 1);
	fill(pl, sizeof(pl), 2);
	phub_auth_seal(p.ik.tx, phub_auth_seq(9000, 5), hdr, sizeof(hdr), pl, sizeof(pl));
	ck_assert(phub_auth_open(p.rk.rx, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
	ck_assert_uint_eq(seq, phub_auth_seq(9000, 5));
	ck_assert_uint_eq(phub_auth_seq_channel(seq), 9000);
	/* The other direction's key, and the handshake MAC, do not open it. */
	ck_assert(!phub_auth_open(p.rk.tx, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
	ck_assert(!phub_auth_hs_open(p.rk.rx, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
	/* Nor does a payload cut elsewhere between header and payload. */
	ck_assert(!phub_auth_open(p.rk.rx, hdr, sizeof(hdr) - 8, pl, sizeof(pl), &seq));
	ck_assert(!phub_auth_open(p.rk.rx, hdr, sizeof(hdr), pl, sizeof(pl) - 1, &seq));
	/* An empty payload (ACK, PULL) is covered too. */
	phub_auth_seal(p.ik.tx, 6, hdr, sizeof(hdr), NULL, 0);
	ck_assert(phub_auth_open(p.rk.rx, hdr, sizeof(hdr), NULL, 0, &seq));
	ck_assert_uint_eq(seq, 6);
}
END_TEST

START_TEST(test_every_single_bit_flip_fails_the_mac)
{
	struct pair p;
	uint8_t hdr[HDR], pl[256];
	uint64_t seq;

	pair_make(&p, "job", 7);
	fill(hdr, sizeof(hdr), 3);
	fill(pl, sizeof(pl), 4);
	phub_auth_seal(p.ik.tx, 77, hdr, sizeof(hdr), pl, sizeof(pl));
	for (size_t bit = 0; bit < 8 * (sizeof(hdr) + sizeof(pl)); bit++) {
		uint8_t *b = bit < 8 * sizeof(hdr) ? hdr + bit / 8 : pl + (bit / 8 - sizeof(hdr));

		*b ^= (uint8_t)(1u << (bit % 8));
		ck_assert_msg(!phub_auth_open(p.rk.rx, hdr, sizeof(hdr), pl, sizeof(pl), &seq),
				"bit %zu", bit);
		*b ^= (uint8_t)(1u << (bit % 8));
	}
	ck_assert(phub_auth_open(p.rk.rx, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
	/* The handshake MAC, likewise (header bits only: it is the same loop otherwise). */
	phub_auth_hs_seal(p.psk, 0, hdr, sizeof(hdr), pl, sizeof(pl));
	for (size_t bit = 0; bit < 8 * sizeof(hdr); bit++) {
		hdr[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		ck_assert(!phub_auth_hs_open(p.psk, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
		hdr[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	ck_assert(phub_auth_hs_open(p.psk, hdr, sizeof(hdr), pl, sizeof(pl), &seq));
}
END_TEST

START_TEST(test_a_tag_moved_to_another_sequence_number_fails)
{
	struct pair p;
	uint8_t a[HDR], b[HDR];
	uint64_t seq;

	pair_make(&p, "job", 7);
	fill(a, sizeof(a), 5);
	memcpy(b, a, sizeof(b));
	phub_auth_seal(p.ik.tx, 1, a, sizeof(a), NULL, 0);
	phub_auth_seal(p.ik.tx, 2, b, sizeof(b), NULL, 0);
	/* Same bytes, two sequence numbers: two one-time keys, two tags. */
	ck_assert_mem_ne(a + HDR - PHUB_AUTH_TAG_LEN, b + HDR - PHUB_AUTH_TAG_LEN,
			PHUB_AUTH_TAG_LEN);
	memcpy(b + HDR - PHUB_AUTH_TAG_LEN, a + HDR - PHUB_AUTH_TAG_LEN, PHUB_AUTH_TAG_LEN);
	ck_assert(!phub_auth_open(p.rk.rx, b, sizeof(b), NULL, 0, &seq));
}
END_TEST

START_TEST(test_the_window_takes_each_number_once)
{
	struct phub_auth_window w;

	phub_auth_window_reset(&w);
	ck_assert(phub_auth_window_update(&w, 0));
	ck_assert(!phub_auth_window_update(&w, 0));
	ck_assert(phub_auth_window_update(&w, 5));
	/* Reordered within the window: taken once. */
	ck_assert(phub_auth_window_check(&w, 3));
	ck_assert(phub_auth_window_update(&w, 3));
	ck_assert(!phub_auth_window_check(&w, 3));
	ck_assert(!phub_auth_window_update(&w, 5));
	/* A jump far ahead forgets everything behind the window. */
	ck_assert(phub_auth_window_update(&w, 100000));
	ck_assert(!phub_auth_window_check(&w, 5));
	/* The window is the newest and the PHUB_AUTH_WINDOW - 1 numbers before it. */
	ck_assert(!phub_auth_window_check(&w, 100000 - PHUB_AUTH_WINDOW));
	ck_assert(phub_auth_window_check(&w, 100001 - PHUB_AUTH_WINDOW));
	ck_assert(phub_auth_window_check(&w, 100001));
}
END_TEST

START_TEST(test_the_window_does_not_alias_a_lap_behind)
{
	struct phub_auth_window w;

	phub_auth_window_reset(&w);
	ck_assert(phub_auth_window_update(&w, 1));
	/* The newest word shares its slot with the word a whole bitmap behind. */
	ck_assert(phub_auth_window_update(&w, PHUB_AUTH_WINDOW));
	ck_assert(!phub_auth_window_check(&w, 1 + 0));
	ck_assert(!phub_auth_window_update(&w, 1));
	ck_assert(!phub_auth_window_update(&w, PHUB_AUTH_WINDOW));
	ck_assert(phub_auth_window_update(&w, 2));
}
END_TEST

/* The window against a model that remembers every number: the same answers, 200000 times. */
START_TEST(test_the_window_matches_a_model_that_remembers_everything)
{
	enum { SPAN = 1 << 16 };
	struct phub_auth_window w;
	uint8_t *seen = calloc(SPAN, 1);
	uint64_t top = 0, x = 88172645463325252ull;

	ck_assert_ptr_nonnull(seen);
	phub_auth_window_reset(&w);
	for (int i = 0; i < 200000; i++) {
		uint64_t c;
		bool want, got;

		phub_test_rand(&x);
		/* Mostly near the top, sometimes far behind, sometimes a jump ahead. */
		if (x % 100 < 90) {
			uint64_t back = (x >> 16) % 3000;

			c = top + (x >> 8) % 64;
			c = c > back ? c - back : 0;
		} else {
			c = top + (x >> 8) % 300;
		}
		want = !seen[c] && (c >= top || top - c <= PHUB_AUTH_WINDOW);
		got = phub_auth_window_update(&w, c);
		ck_assert_msg(got == want, "counter %llu top %llu", (unsigned long long)c,
				(unsigned long long)top);
		if (got) {
			seen[c] = 1;
			if (c >= top)
				top = c + 1;
		}
		if (top > SPAN - 400)
			break;	/* the model's array is full: enough */
	}
	free(seen);
}
END_TEST

START_TEST(test_a_job_key_gives_a_psk_of_its_own_and_parses_only_64_hex_digits)
{
	static const char hex[] =
		"00112233445566778899aabbccddeeffF0E1D2C3B4A5968778695A4B3C2D1E0f";
	uint8_t key[PHUB_AUTH_KEY_LEN], k2[PHUB_AUTH_KEY_LEN];
	uint8_t a[PHUB_AUTH_KEY_LEN], b[PHUB_AUTH_KEY_LEN];
	char bad[80];

	ck_assert_int_eq(phub_auth_init(), 0);
	ck_assert_int_eq(phub_auth_key_parse(key, hex), 0);
	ck_assert_uint_eq(key[0], 0x00);
	ck_assert_uint_eq(key[15], 0xff);
	ck_assert_uint_eq(key[16], 0xf0);
	ck_assert_uint_eq(key[31], 0x0f);
	memcpy(k2, key, sizeof(k2));
	/* Too short, too long, not hex, nothing: refused, the key untouched. */
	snprintf(bad, sizeof(bad), "%.63s", hex);
	ck_assert_int_eq(phub_auth_key_parse(k2, bad), -EINVAL);
	snprintf(bad, sizeof(bad), "%s0", hex);
	ck_assert_int_eq(phub_auth_key_parse(k2, bad), -EINVAL);
	snprintf(bad, sizeof(bad), "%.63sx", hex);
	ck_assert_int_eq(phub_auth_key_parse(k2, bad), -EINVAL);
	ck_assert_int_eq(phub_auth_key_parse(k2, NULL), -EINVAL);
	ck_assert_mem_eq(k2, key, sizeof(key));
	/* The key's PSK: its own, bound to the name and the key, not the nonce's. */
	phub_auth_job_psk(a, "job", 0x1234, key);
	phub_auth_psk_key(b, "job", key);
	ck_assert_mem_eq(a, b, sizeof(a));
	phub_auth_job_psk(b, "job", 0x1234, NULL);
	phub_auth_psk(k2, "job", 0x1234);
	ck_assert_mem_eq(b, k2, sizeof(b));
	ck_assert(!phub_auth_key_equal(a, b));
	phub_auth_psk_key(b, "jo", key);
	ck_assert(!phub_auth_key_equal(a, b));
	key[31] ^= 1;
	phub_auth_psk_key(b, "job", key);
	ck_assert(!phub_auth_key_equal(a, b));
}
END_TEST

/* An answer as the PBox's control plane makes it: its key, then the MAC under confirm. */
static void
answer_make(uint8_t *d, size_t hl, const uint8_t pbox_pk[PHUB_AUTH_PK_LEN],
		const uint8_t confirm[PHUB_AUTH_KEY_LEN])
{
	fill(d, hl + PAYLOAD, 5);
	memcpy(phub_auth_wire_pk(d, hl), pbox_pk, PHUB_AUTH_PK_LEN);
	phub_auth_hs_seal(confirm, 0, d, hl, d + hl, PAYLOAD);
}

START_TEST(test_an_initiator_takes_only_answers_that_prove_the_psk)
{
	enum { HL = HDR + PHUB_AUTH_PK_LEN };
	struct phub_auth_initiator in;
	uint8_t psk[PHUB_AUTH_KEY_LEN], other[PHUB_AUTH_KEY_LEN];
	uint8_t rpk[PHUB_AUTH_PK_LEN], rsk[PHUB_AUTH_SK_LEN];
	uint8_t d[HL + PAYLOAD];
	struct phub_auth_keys rk, wrong;

	ck_assert_int_eq(phub_auth_init(), 0);
	phub_auth_psk(psk, "job", 0x5eed5eed1234abcdull);
	phub_auth_psk(other, "job", 0x5eed5eed1234abceull);
	phub_auth_initiator_init(&in, psk);
	/* Nothing to answer before a JOIN began. */
	ck_assert(!phub_auth_initiator_answer(&in, d, HL, d + HL, PAYLOAD));
	phub_auth_initiator_start(&in);
	phub_auth_keypair(rpk, rsk);
	ck_assert_int_eq(phub_auth_session_keys(&rk, psk, rsk, in.pk, in.pk, rpk, false), 0);
	ck_assert_int_eq(phub_auth_session_keys(&wrong, other, rsk, in.pk, in.pk, rpk, false), 0);

	/* A PBox with another PSK, then a damaged answer: refused, no keys taken. */
	answer_make(d, HL, rpk, wrong.confirm);
	ck_assert(!phub_auth_initiator_answer(&in, d, HL, d + HL, PAYLOAD));
	ck_assert(!in.next_ok);
	answer_make(d, HL, rpk, rk.confirm);
	d[HL + 17] ^= 1;
	ck_assert(!phub_auth_initiator_answer(&in, d, HL, d + HL, PAYLOAD));
	ck_assert(!in.next_ok);
	/* The PBox's answer: the session keys are the PBox's, each direction crossed. */
	answer_make(d, HL, rpk, rk.confirm);
	ck_assert(phub_auth_initiator_answer(&in, d, HL, d + HL, PAYLOAD));
	ck_assert(in.next_ok);
	ck_assert(phub_auth_key_equal(in.next.tx, rk.rx));
	ck_assert(phub_auth_key_equal(in.next.rx, rk.tx));
	/* Its next datagram, under the same key: taken; damaged: not. */
	ck_assert(phub_auth_initiator_answer(&in, d, HL, d + HL, PAYLOAD));
	d[3] ^= 0x40;
	ck_assert(!phub_auth_initiator_answer(&in, d, HL, d + HL, PAYLOAD));
	/* A JOIN again keeps the key pair (a PBox that kept our session answers the same). */
	memcpy(rpk, in.pk, sizeof(rpk));
	phub_auth_initiator_start(&in);
	ck_assert(!in.next_ok);
	ck_assert_mem_eq(in.pk, rpk, sizeof(rpk));
	phub_auth_initiator_wipe(&in);
	ck_assert(!in.have_pk);
}
END_TEST

START_TEST(test_a_lane_opens_what_its_peer_sealed_once_and_on_its_channel)
{
	struct phub_auth_lane a, b;
	uint8_t d[HDR + PAYLOAD];
	struct pair p;

	pair_make(&p, "lane", 0x1a2b3c4d5e6f7081ull);
	ck_assert_int_eq(phub_auth_lane_init(&a, &p.ik), 0);
	ck_assert_int_eq(phub_auth_lane_init(&b, &p.rk), 0);
	for (unsigned int i = 0; i < 3; i++) {
		fill(d, sizeof(d), i);
		ck_assert(phub_auth_lane_seal(&a, 3, d, HDR, d + HDR, PAYLOAD));
		ck_assert_uint_eq(a.tx_next, i + 1);
		/* Another channel's lane does not take it, and that does not spend it. */
		ck_assert(!phub_auth_lane_open(&b, 4, d, HDR, d + HDR, PAYLOAD));
		ck_assert(phub_auth_lane_open(&b, 3, d, HDR, d + HDR, PAYLOAD));
		/* Once only. */
		ck_assert(!phub_auth_lane_open(&b, 3, d, HDR, d + HDR, PAYLOAD));
	}
	/* The sealer's own direction key does not open its datagrams. */
	ck_assert(phub_auth_lane_seal(&a, 3, d, HDR, d + HDR, PAYLOAD));
	ck_assert(!phub_auth_lane_open(&a, 3, d, HDR, d + HDR, PAYLOAD));
	/* Spent numbers: nothing more is sealed. */
	a.tx_next = PHUB_AUTH_COUNTER_MAX + 1;
	ck_assert(!phub_auth_lane_seal(&a, 3, d, HDR, d + HDR, PAYLOAD));
	phub_auth_lane_fini(&a);
	phub_auth_lane_fini(&b);
	ck_assert_ptr_null(a.tx_mac);
}
END_TEST

Suite *
phub_auth_suite(void)
{
	Suite *s = suite_create("auth");

	PHUB_TCASE(s, "keys",
		test_both_sides_derive_the_same_keys_per_direction,
		test_keys_need_the_psk_and_an_ephemeral_secret,
		test_a_low_order_public_key_is_refused,
		test_the_ring_proof_depends_on_the_psk_and_is_not_the_nonce,
		test_ring_neighbours_derive_the_same_link_keys,
		test_a_handshake_sealed_at_a_number_opens_with_it,
		test_a_job_key_gives_a_psk_of_its_own_and_parses_only_64_hex_digits);

	PHUB_TCASE(s, "mac",
		test_the_datagram_mac_is_gmac_of_header_and_payload,
		test_the_datagram_mac_agrees_with_libsodium_aes256gcm,
		test_a_rekeyed_mac_state_is_the_new_keys,
		test_a_sealed_datagram_opens_once_under_its_key,
		test_every_single_bit_flip_fails_the_mac,
		test_a_tag_moved_to_another_sequence_number_fails);

	PHUB_TCASE(s, "session",
		test_an_initiator_takes_only_answers_that_prove_the_psk,
		test_a_lane_opens_what_its_peer_sealed_once_and_on_its_channel);

	PHUB_TCASE(s, "window",
		test_the_window_takes_each_number_once,
		test_the_window_does_not_alias_a_lap_behind,
		test_the_window_matches_a_model_that_remembers_everything);
	return s;
}
