/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Authenticated datagrams (flag AUTH): the JOIN key exchange, per-session keys, the per-datagram
 * MAC over header and payload, and the receiver's replay window. libsodium and libcrypto; no DPDK.
 */

#ifndef PHUB_AUTH_H
#define PHUB_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The AUTH trailer of the header: the last PHUB_AUTH_TRAILER_LEN bytes of hdr_len, after any
 * other extension (HYPER's). JOIN, JOIN_ACK, RING_HELLO and RING_HELLO_ACK carry the sender's
 * ephemeral X25519 public key (PHUB_AUTH_PK_LEN) right before it.
 *
 *  hdr_len - 24 +-----------------------------------------------+
 *               |  seq: channel (16 bits) << 48 | counter (48)  |
 *  hdr_len - 16 +-----------------------------------------------+
 *               |  tag (16 bytes)                               |
 *  hdr_len      +-----------------------------------------------+
 */
enum {
	PHUB_AUTH_KEY_LEN = 32,
	PHUB_AUTH_PK_LEN = 32,
	PHUB_AUTH_SK_LEN = 32,
	PHUB_AUTH_TAG_LEN = 16,
	PHUB_AUTH_SEQ_LEN = 8,
	PHUB_AUTH_TRAILER_LEN = PHUB_AUTH_SEQ_LEN + PHUB_AUTH_TAG_LEN,
	/* Sequence numbers a receiver remembers behind the newest (WireGuard keeps 8192). */
	PHUB_AUTH_WINDOW = 2048,
};

/* A sequence number: a 16-bit channel (the PBox's UDP port of the stream) and a counter. */
#define PHUB_AUTH_COUNTER_BITS 48
#define PHUB_AUTH_COUNTER_MAX ((UINT64_C(1) << PHUB_AUTH_COUNTER_BITS) - 1)

static inline uint64_t
phub_auth_seq(uint16_t channel, uint64_t counter)
{
	return ((uint64_t)channel << PHUB_AUTH_COUNTER_BITS) | (counter & PHUB_AUTH_COUNTER_MAX);
}

static inline uint16_t
phub_auth_seq_channel(uint64_t seq)
{
	return (uint16_t)(seq >> PHUB_AUTH_COUNTER_BITS);
}

/* Initialise libsodium (idempotent, thread-safe); 0 or -EIO. */
int phub_auth_init(void);

/* The job's pre-shared key from its name and nonce; the nonce itself never goes on the wire. */
void phub_auth_psk(uint8_t psk[PHUB_AUTH_KEY_LEN], const char *job_name, uint64_t nonce);

/*
 * The PSK from the job's name and a 256-bit secret of its own (jobs[].key, PHUB_KEY): what a
 * host that saw a JOIN must search offline is then 2^256, not the nonce's 2^64.
 */
void phub_auth_psk_key(uint8_t psk[PHUB_AUTH_KEY_LEN], const char *job_name,
		const uint8_t key[PHUB_AUTH_KEY_LEN]);

/* The job's PSK: from its key when it has one (key != NULL), else from its nonce. */
void phub_auth_job_psk(uint8_t psk[PHUB_AUTH_KEY_LEN], const char *job_name, uint64_t nonce,
		const uint8_t *key);

/*
 * A 256-bit key written as exactly 64 hex digits (either case), as jobs[].key and PHUB_KEY
 * give it: 0, or -EINVAL (key untouched) for anything else.
 */
int phub_auth_key_parse(uint8_t key[PHUB_AUTH_KEY_LEN], const char *hex);

/*
 * What an authenticated ring job's RING_HELLO carries in its nonce field: 64 bits of keyed
 * BLAKE2b of the PSK, which PBoxes that hold the job's nonce compare, and from which the nonce
 * does not follow; the HELLO's MAC is keyed with phub_auth_ring_psk()'s key.
 */
uint64_t phub_auth_ring_proof(const uint8_t psk[PHUB_AUTH_KEY_LEN]);

/*
 * The ring's own PSK, from the job's: RING_HELLO's MAC and the ring links' key exchange use it,
 * so that no MAC or key of the ring's can stand for one of a worker's session (keyed BLAKE2b
 * under its own label).
 */
void phub_auth_ring_psk(uint8_t ring_psk[PHUB_AUTH_KEY_LEN], const uint8_t psk[PHUB_AUTH_KEY_LEN]);

/* A fresh ephemeral X25519 key pair (one per JOIN, per RING_HELLO generation). */
void phub_auth_keypair(uint8_t pk[PHUB_AUTH_PK_LEN], uint8_t sk[PHUB_AUTH_SK_LEN]);

/*
 * The session keys of one handshake, the same on both sides: the initiator (the worker, the
 * ring's lower position) calls with initiator = true. tx/rx are the GMAC stream keys of the
 * two directions; confirm_tx/confirm_rx key the responder's handshake answer (JOIN_ACK,
 * RING_HELLO_ACK), which proves it holds both the PSK and its ephemeral secret.
 */
struct phub_auth_keys {
	uint8_t tx[PHUB_AUTH_KEY_LEN];
	uint8_t rx[PHUB_AUTH_KEY_LEN];
	uint8_t confirm[PHUB_AUTH_KEY_LEN];	/* the responder's answer */
};

/*
 * Derive the session keys from the X25519 shared secret of my_sk and peer_pk, the PSK and both
 * public keys (Noise's NNpsk0 in spirit: an on-path host that saw both public keys has neither
 * secret). initiator_pk/responder_pk in that order on both sides. -EINVAL on a low-order peer
 * key (all-zero shared secret).
 */
int phub_auth_session_keys(struct phub_auth_keys *keys, const uint8_t psk[PHUB_AUTH_KEY_LEN],
		const uint8_t my_sk[PHUB_AUTH_SK_LEN], const uint8_t peer_pk[PHUB_AUTH_PK_LEN],
		const uint8_t initiator_pk[PHUB_AUTH_PK_LEN],
		const uint8_t responder_pk[PHUB_AUTH_PK_LEN], bool initiator);

/*
 * The keys of one ring link (two neighbouring PBoxes), the same on both sides: the
 * phub_auth_session_keys() of my_sk and peer_pk under ring_psk with the lower ring position
 * as the initiator (lower: mine is lower than the peer's). keys->tx seals what I send to the
 * peer, keys->rx opens what it sends me. -EINVAL on a low-order peer key.
 */
int phub_auth_ring_keys(struct phub_auth_keys *keys, const uint8_t ring_psk[PHUB_AUTH_KEY_LEN],
		const uint8_t my_sk[PHUB_AUTH_SK_LEN], const uint8_t my_pk[PHUB_AUTH_PK_LEN],
		const uint8_t peer_pk[PHUB_AUTH_PK_LEN], bool lower);

/*
 * The per-datagram MAC of every datagram after the handshake: AES-256-GCM as a MAC (GMAC:
 * empty plaintext) under the stream's direction key, nonce = 32 zero bits | seq, over the
 * header up to the tag (the sequence number included) and the payload as additional data.
 * A struct phub_auth_mac holds one key's schedule: make one per stream (one thread's), set
 * the key once, and a datagram costs only its GHASH; NULL/-EIO when libcrypto fails.
 * seal writes seq and the tag into the trailer of hdr (hdr_len bytes, >= PHUB_AUTH_TRAILER_LEN);
 * a key must never seal two datagrams with one seq. open recomputes it and compares in constant
 * time: true when it matches, and *seq is the datagram's sequence number (check it with
 * phub_auth_window_check()).
 */
struct phub_auth_mac;
struct phub_auth_mac *phub_auth_mac_new(const uint8_t key[PHUB_AUTH_KEY_LEN]);
int phub_auth_mac_rekey(struct phub_auth_mac *m, const uint8_t key[PHUB_AUTH_KEY_LEN]);
void phub_auth_mac_free(struct phub_auth_mac *m);
/* m keyed with key: a new state for NULL, else m rekeyed; NULL (m freed) when that fails. */
struct phub_auth_mac *phub_auth_mac_keyed(struct phub_auth_mac *m,
		const uint8_t key[PHUB_AUTH_KEY_LEN]);
void phub_auth_mac_seal(struct phub_auth_mac *m, uint64_t seq, void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len);
bool phub_auth_mac_open(struct phub_auth_mac *m, const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len, uint64_t *seq);
/* True when the CPU has AES-NI and PCLMULQDQ; without them the same MAC runs in software. */
bool phub_auth_mac_hw(void);

/* The same with the key given each time (a key schedule per call): tests and tools. */
void phub_auth_seal(const uint8_t key[PHUB_AUTH_KEY_LEN], uint64_t seq, void *hdr,
		size_t hdr_len, const void *payload, size_t payload_len);
bool phub_auth_open(const uint8_t key[PHUB_AUTH_KEY_LEN], const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len, uint64_t *seq);

/*
 * The MAC of handshake datagrams (JOIN keyed with the PSK, the answer with keys.confirm):
 * keyed BLAKE2b-128 over the same bytes, safe under one key for many datagrams (a JOIN is
 * sent again as it was), where a GMAC key must not see one nonce twice.
 */
void phub_auth_hs_seal(const uint8_t key[PHUB_AUTH_KEY_LEN], uint64_t seq, void *hdr,
		size_t hdr_len, const void *payload, size_t payload_len);
bool phub_auth_hs_open(const uint8_t key[PHUB_AUTH_KEY_LEN], const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len, uint64_t *seq);

/*
 * The receiver's replay window of one stream (one key, one channel), RFC 6479's sliding bitmap
 * as WireGuard keeps it: seq above the newest is taken, one within PHUB_AUTH_WINDOW behind it
 * once, anything older never. check before the MAC is spent, update only after it matched.
 */
struct phub_auth_window {
	uint64_t top;			/* newest counter seen + 1; 0: none yet */
	/* One word more than the window: the newest word is partly ahead of top (RFC 6479). */
	uint64_t bits[PHUB_AUTH_WINDOW / 64 + 1];
};

void phub_auth_window_reset(struct phub_auth_window *w);
/* True when counter has not been seen and is not too old. */
bool phub_auth_window_check(const struct phub_auth_window *w, uint64_t counter);
/* Mark counter seen; false (nothing changed) when check would have said no. */
bool phub_auth_window_update(struct phub_auth_window *w, uint64_t counter);

/* Compare two keys in constant time. */
bool phub_auth_key_equal(const uint8_t a[PHUB_AUTH_KEY_LEN], const uint8_t b[PHUB_AUTH_KEY_LEN]);
/* Wipe secrets (sodium_memzero: not optimised away). */
void phub_auth_wipe(void *p, size_t len);

/* ---- on encoded datagrams (auth_wire.c) ---- */

/*
 * Give an encoded datagram of len bytes (a header without AUTH, then its payload; cap bytes
 * of room) the AUTH extension of its opcode: the payload moves back, flag AUTH and hdr_len
 * are set, the extension is zeroed and a CSUM flag and CRC are dropped (the MAC covers more).
 * Returns the new length, -EINVAL when it is not a datagram or already has AUTH, -ENOSPC.
 */
int phub_auth_wire_extend(uint8_t *dgram, size_t len, size_t cap);
/* Where a handshake datagram (header of hdr_len bytes, flag AUTH) keeps the ephemeral key. */
static inline uint8_t *
phub_auth_wire_pk(uint8_t *dgram, size_t hdr_len)
{
	return dgram + hdr_len - PHUB_AUTH_TRAILER_LEN - PHUB_AUTH_PK_LEN;
}

/*
 * A handshake datagram (JOIN or JOIN_ACK) sealed: the AUTH extension added
 * (phub_auth_wire_extend()), the sender's ephemeral key pk written into it, and its tag under
 * key at sequence 0. Returns the new length or phub_auth_wire_extend()'s error.
 */
int phub_auth_wire_seal_hs(uint8_t *dgram, size_t len, size_t cap,
		const uint8_t pk[PHUB_AUTH_PK_LEN], const uint8_t key[PHUB_AUTH_KEY_LEN]);
/* The same at sequence number seq (RING_HELLO's: a sender's handshakes are numbered). */
int phub_auth_wire_seal_hs_seq(uint8_t *dgram, size_t len, size_t cap,
		const uint8_t pk[PHUB_AUTH_PK_LEN], const uint8_t key[PHUB_AUTH_KEY_LEN],
		uint64_t seq);

/* ---- one side's sessions (auth_session.c): what libphub and phub-loadgen share ---- */

/*
 * The initiator of a JOIN handshake (a worker): its ephemeral key pair, made once and kept for
 * every JOIN it sends again, and the keys of the answer it is checking. The PBox answers each
 * JOIN datagram with one JOIN_ACK per datagram, all under one PBox key.
 */
struct phub_auth_initiator {
	struct phub_auth_keys next;	/* of the answering PBox key, once next_ok */
	uint8_t psk[PHUB_AUTH_KEY_LEN];
	uint8_t pk[PHUB_AUTH_PK_LEN];
	uint8_t sk[PHUB_AUTH_SK_LEN];
	uint8_t ppk[PHUB_AUTH_PK_LEN];	/* the answering PBox key */
	bool have_pk;
	bool next_ok;
};

/* Ready with the job's PSK; the key pair comes at the first start. */
void phub_auth_initiator_init(struct phub_auth_initiator *in,
		const uint8_t psk[PHUB_AUTH_KEY_LEN]);
/* A JOIN exchange begins: the key pair made if it is the first, no answer taken yet. */
void phub_auth_initiator_start(struct phub_auth_initiator *in);
/* A JOIN datagram (len bytes of cap) sealed with the key and the PSK's MAC: length or < 0. */
int phub_auth_initiator_seal(const struct phub_auth_initiator *in, uint8_t *dgram, size_t len,
		size_t cap);
/*
 * An answer (JOIN_ACK; flag AUTH, header hdr_len bytes): true when it proves the PBox holds the
 * PSK and the secret of the key it carries. Its keys are then in->next.
 */
bool phub_auth_initiator_answer(struct phub_auth_initiator *in, const uint8_t *dgram,
		size_t hdr_len, const void *payload, size_t payload_len);
/* Wipe every secret. */
void phub_auth_initiator_wipe(struct phub_auth_initiator *in);

/*
 * One stream of a session both ways between one of our sockets and one peer port (libphub's
 * lanes: the control port, each PBox endpoint): its key schedules, the next sequence number
 * to send and the window of those received. Numbers carry the channel both sides agreed.
 */
struct phub_auth_lane {
	uint64_t tx_next;
	struct phub_auth_mac *tx_mac;
	struct phub_auth_mac *rx_mac;
	struct phub_auth_window win;
};

/* Keys tx/rx of a session scheduled, counters from 0: 0 or -ENOMEM (nothing held then). */
int phub_auth_lane_init(struct phub_auth_lane *l, const struct phub_auth_keys *keys);
void phub_auth_lane_fini(struct phub_auth_lane *l);
/* Seal a datagram with the next number on channel; false when the numbers are spent. */
bool phub_auth_lane_seal(struct phub_auth_lane *l, uint16_t channel, void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len);
/* True when the MAC matches, the number is of channel and was never taken (then it is). */
bool phub_auth_lane_open(struct phub_auth_lane *l, uint16_t channel, const void *hdr,
		size_t hdr_len, const void *payload, size_t payload_len);

#endif /* PHUB_AUTH_H */
