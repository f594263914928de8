/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An authenticated job's session keys, per rank, and the sequence numbers and replay windows of
 * each lane (the control thread, each data thread): the engine's side of lib/auth.
 */

#ifndef PHUB_ENGINE_AUTH_H
#define PHUB_ENGINE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/phub_auth.h"
#include "engine/phub_engine.h"

/*
 * Lanes: PHUB_ENGINE_AUTH_LANE_CONTROL for the control thread, PHUB_ENGINE_AUTH_LANE_DATA(k)
 * for data thread k. One writer per lane: its sequence numbers and windows need no lock.
 */
#define PHUB_ENGINE_AUTH_LANE_CONTROL	0u
#define PHUB_ENGINE_AUTH_LANE_DATA(k)	(1u + (k))

/* Whether the job authenticates every datagram (jobs[].auth "required"). */
bool phub_engine_job_auth(const struct phub_engine_job *job);
/* The job's PSK (derived from its name and nonce); NULL without auth. Control thread. */
const uint8_t *phub_engine_job_auth_psk(const struct phub_engine_job *job);

/*
 * Control thread, at a JOIN that passed its MAC, before the engine joins the rank. live: the
 * rank's session was heard within the liveness timeout; same_source: the JOIN comes from the
 * session's address. Returns 0 and the keys to answer with when the JOIN is the rank's current
 * one (same ephemeral key: a JOIN sent again) or a new session may start (new keys, in force
 * at once); -EALREADY when a live session would be ended by it: another ephemeral key or
 * another address (a replayed or rival JOIN: PHUB_DROP_AUTH_JOIN_REPLAY).
 */
int phub_engine_job_auth_join(struct phub_engine_job *job, uint16_t rank,
		const uint8_t worker_pk[PHUB_AUTH_PK_LEN], bool live, bool same_source,
		uint8_t pbox_pk[PHUB_AUTH_PK_LEN], uint8_t confirm[PHUB_AUTH_KEY_LEN]);

/* Whether rank holds session keys (a restored job's ranks hold none until they JOIN again). */
bool phub_engine_auth_has_keys(const struct phub_engine_job *job, uint16_t rank);

/*
 * Data or control thread: check an authenticated datagram of rank arriving on lane at our UDP
 * port channel (hdr: the datagram, hdr_len its header). PHUB_DROP_OK, or the reason: nothing
 * of the job's state has changed but the lane's window, which moves only for a datagram whose
 * MAC matched. flags: the header's (AUTH or not).
 */
enum phub_drop_reason phub_engine_auth_rx(struct phub_engine_job *job, uint16_t rank,
		unsigned int lane, uint16_t channel, uint8_t flags, const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len);

/*
 * Seal a datagram to rank sent from lane through our UDP port channel: the header (hdr_len
 * bytes, encoded with flag AUTH) gets the lane's next sequence number and the tag. False when
 * the rank holds no keys (then nothing may be sent).
 */
bool phub_engine_auth_tx(struct phub_engine_job *job, uint16_t rank, unsigned int lane,
		uint16_t channel, void *hdr, size_t hdr_len, const void *payload,
		size_t payload_len);

/*
 * An authenticated ring job (engine_ring_auth.c; docs/protocol.md section 12): the keys of its
 * links to the previous and the next PBox (PHUB_ENGINE_RING_PREV, _NEXT; one neighbour in a
 * ring of two, one set of keys), from the RING_HELLO exchange; every ring datagram is sealed
 * and checked on a data lane: lane is the data lcore's index (< the job's auth_lanes, as many as
 * the PBox has), the sequence number's channel 1 + the sending lane (<=
 * PHUB_ENGINE_RING_AUTH_CHANNELS: a neighbour's lanes, as many as any PBox's lcores), one
 * replay window per (link, lane, sending channel).
 */
#define PHUB_ENGINE_RING_PREV		0u
#define PHUB_ENGINE_RING_NEXT		1u
#define PHUB_ENGINE_RING_AUTH_CHANNELS	128u

/* Whether the job's ring datagrams carry the MAC: an authenticated job with a ring. */
bool phub_engine_job_ring_auth(const struct phub_engine_job *job);
/*
 * Control thread: the link's keys (tx seals what goes to the neighbour, rx opens what comes);
 * the same keys again change nothing. 0, -EINVAL (no authenticated ring), -ENOMEM.
 */
int phub_engine_job_ring_auth_keys(struct phub_engine_job *job, unsigned int link,
		const uint8_t tx[PHUB_AUTH_KEY_LEN], const uint8_t rx[PHUB_AUTH_KEY_LEN]);
/*
 * Data lane: check a ring datagram from the link's neighbour before anything reads it:
 * PHUB_DROP_OK, or the reason (auth_missing, auth_unexpected, auth_bad_tag, auth_replay,
 * auth_wrong_channel; not_joined before the link has keys).
 */
enum phub_drop_reason phub_engine_ring_auth_rx(struct phub_engine_job *job, unsigned int link,
		unsigned int lane, uint8_t flags, const void *hdr, size_t hdr_len,
		const void *payload, size_t payload_len);
/* Data lane: seal a ring datagram to the link's neighbour; false without keys (do not send). */
bool phub_engine_ring_auth_tx(struct phub_engine_job *job, unsigned int link, unsigned int lane,
		void *hdr, size_t hdr_len, const void *payload, size_t payload_len);
/* Ring datagrams sealed and opened (MAC matched, not a replay) so far, every lane's. */
void phub_engine_ring_auth_stats(const struct phub_engine_job *job, uint64_t *sealed,
		uint64_t *opened);

#endif /* PHUB_ENGINE_AUTH_H */
