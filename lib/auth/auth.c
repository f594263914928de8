/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The auth constructions: PSK, key exchange and handshake MAC over libsodium, the datagram MAC
 * (AES-256-GCM as GMAC) over OpenSSL's libcrypto, and the replay window.
 */

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/modes.h>
#include <sodium.h>

#include "phub_auth.h"

static_assert(PHUB_AUTH_KEY_LEN == 32, "AES-256 key");
static_assert(PHUB_AUTH_TAG_LEN == 16, "GCM tag");
static_assert(PHUB_AUTH_PK_LEN == crypto_scalarmult_BYTES, "X25519 public key");
static_assert(PHUB_AUTH_SK_LEN == crypto_scalarmult_SCALARBYTES, "X25519 secret key");
static_assert(PHUB_AUTH_WINDOW % 64 == 0, "the window is whole words");

#define WINDOW_WORDS (sizeof(((struct phub_auth_window *)0)->bits) / sizeof(uint64_t))

/* Domain separation: every hash of this file starts with its own label. */
static const char LABEL_PSK[] = "PHub auth v1 psk";
static const char LABEL_PSK_KEY[] = "PHub auth v1 psk from key";
static const char LABEL_KEYS[] = "PHub auth v1 session keys";
static const char LABEL_CONFIRM[] = "PHub auth v1 confirm";
static const char LABEL_RING[] = "PHub auth v1 ring hello";
static const char LABEL_RING_PSK[] = "PHub auth v1 ring psk";

int
phub_auth_init(void)
{
	/* 0 the first time, 1 after: both fine; -1 only when no randomness source works. */
	return sodium_init() < 0 ? -EIO : 0;
}

static void
st64_be(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

static uint64_t
ld64_be(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

void
phub_auth_psk(uint8_t psk[PHUB_AUTH_KEY_LEN], const char *job_name, uint64_t nonce)
{
	crypto_generichash_state st;
	uint8_t name[64] = { 0 };
	uint8_t n[8];

	/* The name is bound in, so two jobs that share a nonce still get two keys. */
	strncpy((char *)name, job_name, sizeof(name) - 1);
	st64_be(n, nonce);
	crypto_generichash_init(&st, NULL, 0, PHUB_AUTH_KEY_LEN);
	crypto_generichash_update(&st, (const uint8_t *)LABEL_PSK, sizeof(LABEL_PSK));
	crypto_generichash_update(&st, name, sizeof(name));
	crypto_generichash_update(&st, n, sizeof(n));
	crypto_generichash_final(&st, psk, PHUB_AUTH_KEY_LEN);
	sodium_memzero(n, sizeof(n));
	sodium_memzero(&st, sizeof(st));
}

void
phub_auth_psk_key(uint8_t psk[PHUB_AUTH_KEY_LEN], const char *job_name,
		const uint8_t key[PHUB_AUTH_KEY_LEN])
{
	crypto_generichash_state st;
	uint8_t name[64] = { 0 };

	/* Keyed with the secret; the name bound in, so two jobs that share a key differ. */
	strncpy((char *)name, job_name, sizeof(name) - 1);
	crypto_generichash_init(&st, key, PHUB_AUTH_KEY_LEN, PHUB_AUTH_KEY_LEN);
	crypto_generichash_update(&st, (const uint8_t *)LABEL_PSK_KEY, sizeof(LABEL_PSK_KEY));
	crypto_generichash_update(&st, name, sizeof(name));
	crypto_generichash_final(&st, psk, PHUB_AUTH_KEY_LEN);
	sodium_memzero(&st, sizeof(st));
}

void
phub_auth_job_psk(uint8_t psk[PHUB_AUTH_KEY_LEN], const char *job_name, uint64_t nonce,
		const uint8_t *key)
{
	if (key != NULL)
		phub_auth_psk_key(psk, job_name, key);
	else
		phub_auth_psk(psk, job_name, nonce);
}

int
phub_auth_key_parse(uint8_t key[PHUB_AUTH_KEY_LEN], const char *hex)
{
	uint8_t k[PHUB_AUTH_KEY_LEN];
	size_t len;

	if (hex == NULL || strlen(hex) != 2 * PHUB_AUTH_KEY_LEN)
		return -EINVAL;
	/* libsodium's decoder runs in constant time: the key's digits leak nothing. */
	if (sodium_hex2bin(k, sizeof(k), hex, 2 * PHUB_AUTH_KEY_LEN, NULL, &len, NULL) != 0 ||
	    len != PHUB_AUTH_KEY_LEN) {
		sodium_memzero(k, sizeof(k));
		return -EINVAL;
	}
	memcpy(key, k, sizeof(k));
	sodium_memzero(k, sizeof(k));
	return 0;
}

uint64_t
phub_auth_ring_proof(const uint8_t psk[PHUB_AUTH_KEY_LEN])
{
	uint8_t out[8];

	crypto_generichash(out, sizeof(out), (const uint8_t *)LABEL_RING, sizeof(LABEL_RING), psk,
			PHUB_AUTH_KEY_LEN);
	return ld64_be(out);
}

void
phub_auth_ring_psk(uint8_t ring_psk[PHUB_AUTH_KEY_LEN], const uint8_t psk[PHUB_AUTH_KEY_LEN])
{
	crypto_generichash(ring_psk, PHUB_AUTH_KEY_LEN, (const uint8_t *)LABEL_RING_PSK,
			sizeof(LABEL_RING_PSK), psk, PHUB_AUTH_KEY_LEN);
}

int
phub_auth_ring_keys(struct phub_auth_keys *keys, const uint8_t ring_psk[PHUB_AUTH_KEY_LEN],
		const uint8_t my_sk[PHUB_AUTH_SK_LEN], const uint8_t my_pk[PHUB_AUTH_PK_LEN],
		const uint8_t peer_pk[PHUB_AUTH_PK_LEN], bool lower)
{
	/* Both ends offer a HELLO: the ring's order, not who spoke first, names the roles. */
	return phub_auth_session_keys(keys, ring_psk, my_sk, peer_pk, lower ? my_pk : peer_pk,
			lower ? peer_pk : my_pk, lower);
}

void
phub_auth_keypair(uint8_t pk[PHUB_AUTH_PK_LEN], uint8_t sk[PHUB_AUTH_SK_LEN])
{
	randombytes_buf(sk, PHUB_AUTH_SK_LEN);
	crypto_scalarmult_base(pk, sk);
}

int
phub_auth_session_keys(struct phub_auth_keys *keys, const uint8_t psk[PHUB_AUTH_KEY_LEN],
		const uint8_t my_sk[PHUB_AUTH_SK_LEN], const uint8_t peer_pk[PHUB_AUTH_PK_LEN],
		const uint8_t initiator_pk[PHUB_AUTH_PK_LEN],
		const uint8_t responder_pk[PHUB_AUTH_PK_LEN], bool initiator)
{
	uint8_t dh[crypto_scalarmult_BYTES];
	uint8_t out[2 * PHUB_AUTH_KEY_LEN];
	crypto_generichash_state st;

	/* libsodium refuses a low-order point (the shared secret would be all zero). */
	if (crypto_scalarmult(dh, my_sk, peer_pk) != 0)
		return -EINVAL;
	/*
	 * crypto_kx's derivation (BLAKE2b-512 of the shared secret and both public keys) keyed
	 * with the PSK: the keys need both an ephemeral secret and the job's secret.
	 */
	crypto_generichash_init(&st, psk, PHUB_AUTH_KEY_LEN, sizeof(out));
	crypto_generichash_update(&st, (const uint8_t *)LABEL_KEYS, sizeof(LABEL_KEYS));
	crypto_generichash_update(&st, dh, sizeof(dh));
	crypto_generichash_update(&st, initiator_pk, PHUB_AUTH_PK_LEN);
	crypto_generichash_update(&st, responder_pk, PHUB_AUTH_PK_LEN);
	crypto_generichash_final(&st, out, sizeof(out));
	memcpy(initiator ? keys->tx : keys->rx, out, PHUB_AUTH_KEY_LEN);
	memcpy(initiator ? keys->rx : keys->tx, out + PHUB_AUTH_KEY_LEN, PHUB_AUTH_KEY_LEN);

	crypto_generichash_init(&st, psk, PHUB_AUTH_KEY_LEN, PHUB_AUTH_KEY_LEN);
	crypto_generichash_update(&st, (const uint8_t *)LABEL_CONFIRM, sizeof(LABEL_CONFIRM));
	crypto_generichash_update(&st, dh, sizeof(dh));
	crypto_generichash_update(&st, initiator_pk, PHUB_AUTH_PK_LEN);
	crypto_generichash_update(&st, responder_pk, PHUB_AUTH_PK_LEN);
	crypto_generichash_final(&st, keys->confirm, PHUB_AUTH_KEY_LEN);

	sodium_memzero(dh, sizeof(dh));
	sodium_memzero(out, sizeof(out));
	sodium_memzero(&st, sizeof(st));
	return 0;
}

/*
 * One stream's GMAC state: an EVP context with the key (its AES key schedule and GHASH table)
 * set once; a datagram sets only the nonce. OpenSSL picks AES-NI + PCLMULQDQ (or VAES) code
 * where the CPU has it and its constant-time vector-permute AES (SSSE3) or plain C otherwise.
 */
/*
 * One stream key: its AES-256 schedule in an ECB context (AES-NI through the provider) and
 * libcrypto's GCM state over it (GHASH with PCLMULQDQ/AVX, H computed once per key). A
 * datagram then costs its nonce's block and its GHASH, without the EVP GCM path's per-call
 * parameter lookups by name, which were most of a 1 KB datagram's MAC.
 */
struct phub_auth_mac {
	EVP_CIPHER_CTX *ecb;
	GCM128_CONTEXT *gcm;
};

/* GCM's block cipher: one AES-256 block through the key's ECB context (key is that context). */
static void
ecb_block(const unsigned char in[16], unsigned char out[16], const void *key)
{
	int n;

	EVP_EncryptUpdate((EVP_CIPHER_CTX *)(uintptr_t)key, out, &n, in, 16);
}

struct phub_auth_mac *
phub_auth_mac_new(const uint8_t key[PHUB_AUTH_KEY_LEN])
{
	struct phub_auth_mac *m = calloc(1, sizeof(*m));

	if (m == NULL)
		return NULL;
	m->ecb = EVP_CIPHER_CTX_new();
	if (m->ecb == NULL || phub_auth_mac_rekey(m, key) != 0) {
		phub_auth_mac_free(m);
		return NULL;
	}
	return m;
}

int
phub_auth_mac_rekey(struct phub_auth_mac *m, const uint8_t key[PHUB_AUTH_KEY_LEN])
{
	if (EVP_EncryptInit_ex(m->ecb, EVP_aes_256_ecb(), NULL, key, NULL) != 1 ||
	    EVP_CIPHER_CTX_set_padding(m->ecb, 0) != 1)
		return -EIO;
	/* H = AES_K(0) and its GHASH tables, once per key. */
	if (m->gcm == NULL)
		m->gcm = CRYPTO_gcm128_new(m->ecb, ecb_block);
	else
		CRYPTO_gcm128_init(m->gcm, m->ecb, ecb_block);
	return m->gcm != NULL ? 0 : -EIO;
}

struct phub_auth_mac *
phub_auth_mac_keyed(struct phub_auth_mac *m, const uint8_t key[PHUB_AUTH_KEY_LEN])
{
	if (m == NULL)
		return phub_auth_mac_new(key);
	if (phub_auth_mac_rekey(m, key) != 0) {
		phub_auth_mac_free(m);
		return NULL;
	}
	return m;
}

void
phub_auth_mac_free(struct phub_auth_mac *m)
{
	if (m == NULL)
		return;
	/* Both cleanse what they hold: the key schedule, H and its tables. */
	CRYPTO_gcm128_release(m->gcm);
	EVP_CIPHER_CTX_free(m->ecb);
	free(m);
}

bool
phub_auth_mac_hw(void)
{
	/* libsodium's probe (made by sodium_init) of the CPU features OpenSSL's fast GCM needs. */
	return phub_auth_init() == 0 && crypto_aead_aes256gcm_is_available() != 0;
}

/*
 * GMAC (AES-256-GCM, empty plaintext, SP 800-38D) over the header up to the tag (seq included)
 * and the payload as additional data in two parts; the 96-bit nonce is 32 zero bits and seq,
 * so one key never sees a nonce twice as long as its sender never reuses a seq. The direction
 * is in the key, the stream (channel) in seq. false on a libcrypto failure.
 */
static bool
gmac_tag(uint8_t tag[PHUB_AUTH_TAG_LEN], struct phub_auth_mac *m, uint64_t seq,
		const uint8_t *hdr, size_t hdr_len, const void *payload, size_t payload_len)
{
	uint8_t nonce[12] = { 0 };

	st64_be(nonce + 4, seq);
	/* A 96-bit nonce: J0 = nonce | 1, and the state (lengths, GHASH) starts afresh. */
	CRYPTO_gcm128_setiv(m->gcm, nonce, sizeof(nonce));
	/* hdr_len and payload_len are in the header, so the two parts cannot be re-cut. */
	if (CRYPTO_gcm128_aad(m->gcm, hdr, hdr_len - PHUB_AUTH_TAG_LEN) != 0)
		return false;
	if (payload_len != 0 && CRYPTO_gcm128_aad(m->gcm, payload, payload_len) != 0)
		return false;
	/* No plaintext: the tag is GHASH of the additional data and lengths, masked by E(J0). */
	CRYPTO_gcm128_tag(m->gcm, tag, PHUB_AUTH_TAG_LEN);
	return true;
}

static void
hs_tag(uint8_t tag[PHUB_AUTH_TAG_LEN], const uint8_t key[PHUB_AUTH_KEY_LEN],
		const uint8_t *hdr, size_t hdr_len, const void *payload, size_t payload_len)
{
	crypto_generichash_state st;

	crypto_generichash_init(&st, key, PHUB_AUTH_KEY_LEN, PHUB_AUTH_TAG_LEN);
	crypto_generichash_update(&st, hdr, hdr_len - PHUB_AUTH_TAG_LEN);
	if (payload_len != 0)
		crypto_generichash_update(&st, payload, payload_len);
	crypto_generichash_final(&st, tag, PHUB_AUTH_TAG_LEN);
}

void
phub_auth_mac_seal(struct phub_auth_mac *m, uint64_t seq, void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len)
{
	uint8_t *h = hdr;

	st64_be(h + hdr_len - PHUB_AUTH_TRAILER_LEN, seq);
	/* A libcrypto failure leaves a zero tag, which no receiver accepts (a loss). */
	if (!gmac_tag(h + hdr_len - PHUB_AUTH_TAG_LEN, m, seq, h, hdr_len, payload, payload_len))
		memset(h + hdr_len - PHUB_AUTH_TAG_LEN, 0, PHUB_AUTH_TAG_LEN);
}

bool
phub_auth_mac_open(struct phub_auth_mac *m, const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len, uint64_t *seq)
{
	const uint8_t *h = hdr;
	uint8_t tag[PHUB_AUTH_TAG_LEN];

	if (hdr_len < PHUB_AUTH_TRAILER_LEN)
		return false;
	*seq = ld64_be(h + hdr_len - PHUB_AUTH_TRAILER_LEN);
	if (!gmac_tag(tag, m, *seq, h, hdr_len, payload, payload_len))
		return false;
	return CRYPTO_memcmp(tag, h + hdr_len - PHUB_AUTH_TAG_LEN, PHUB_AUTH_TAG_LEN) == 0;
}

void
phub_auth_seal(const uint8_t key[PHUB_AUTH_KEY_LEN], uint64_t seq, void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len)
{
	struct phub_auth_mac *m = phub_auth_mac_new(key);
	uint8_t *h = hdr;

	if (m == NULL) {
		st64_be(h + hdr_len - PHUB_AUTH_TRAILER_LEN, seq);
		memset(h + hdr_len - PHUB_AUTH_TAG_LEN, 0, PHUB_AUTH_TAG_LEN);
		return;
	}
	phub_auth_mac_seal(m, seq, hdr, hdr_len, payload, payload_len);
	phub_auth_mac_free(m);
}

bool
phub_auth_open(const uint8_t key[PHUB_AUTH_KEY_LEN], const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len, uint64_t *seq)
{
	struct phub_auth_mac *m = phub_auth_mac_new(key);
	bool ok;

	if (m == NULL)
		return false;
	ok = phub_auth_mac_open(m, hdr, hdr_len, payload, payload_len, seq);
	phub_auth_mac_free(m);
	return ok;
}

void
phub_auth_hs_seal(const uint8_t key[PHUB_AUTH_KEY_LEN], uint64_t seq, void *hdr,
		size_t hdr_len, const void *payload, size_t payload_len)
{
	uint8_t *h = hdr;

	st64_be(h + hdr_len - PHUB_AUTH_TRAILER_LEN, seq);
	hs_tag(h + hdr_len - PHUB_AUTH_TAG_LEN, key, h, hdr_len, payload, payload_len);
}

bool
phub_auth_hs_open(const uint8_t key[PHUB_AUTH_KEY_LEN], const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len, uint64_t *seq)
{
	const uint8_t *h = hdr;
	uint8_t tag[PHUB_AUTH_TAG_LEN];

	if (hdr_len < PHUB_AUTH_TRAILER_LEN)
		return false;
	*seq = ld64_be(h + hdr_len - PHUB_AUTH_TRAILER_LEN);
	hs_tag(tag, key, h, hdr_len, payload, payload_len);
	return crypto_verify_16(tag, h + hdr_len - PHUB_AUTH_TAG_LEN) == 0;
}

void
phub_auth_window_reset(struct phub_auth_window *w)
{
	memset(w, 0, sizeof(*w));
}

bool
phub_auth_window_check(const struct phub_auth_window *w, uint64_t counter)
{
	/* Ahead of everything seen: new. */
	if (counter >= w->top)
		return true;
	/* Further behind than the bitmap reaches: can no longer tell, so refuse. */
	if (w->top - counter > PHUB_AUTH_WINDOW)
		return false;
	return !(w->bits[(counter / 64) % WINDOW_WORDS] & (UINT64_C(1) << (counter % 64)));
}

bool
phub_auth_window_update(struct phub_auth_window *w, uint64_t counter)
{
	if (!phub_auth_window_check(w, counter))
		return false;
	if (counter >= w->top) {
		/* Clear the words the window slides onto: they hold counters a lap older. */
		uint64_t first = w->top == 0 ? 0 : (w->top - 1) / 64 + 1;
		uint64_t last = counter / 64;

		if (w->top == 0 || (last >= first && last - first + 1 >= WINDOW_WORDS))
			memset(w->bits, 0, sizeof(w->bits));
		else
			for (uint64_t i = first; i <= last; i++)
				w->bits[i % WINDOW_WORDS] = 0;
		w->top = counter + 1;
	}
	w->bits[(counter / 64) % WINDOW_WORDS] |= UINT64_C(1) << (counter % 64);
	return true;
}

bool
phub_auth_key_equal(const uint8_t a[PHUB_AUTH_KEY_LEN], const uint8_t b[PHUB_AUTH_KEY_LEN])
{
	return sodium_memcmp(a, b, PHUB_AUTH_KEY_LEN) == 0;
}

void
phub_auth_wipe(void *p, size_t len)
{
	sodium_memzero(p, len);
}
