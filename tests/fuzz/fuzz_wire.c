/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fuzz target of lib/wire: arbitrary bytes into the datagram validator and the body
 * parsers; whatever parses must encode back to the same bytes, and the encoder must accept it.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "phub_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[PHUB_WIRE_MAX_DATAGRAM + 64];
#define N_KEYS (1u << 14)
#define N_EPS (1u << 10)
#define N_CHUNKS (1u << 14)

static struct phub_wire_key merge_keys[N_KEYS];
static struct phub_wire_endpoint merge_eps[N_EPS];
static uint16_t merge_map[N_CHUNKS];

/* A property that does not hold is a bug: crash so that libFuzzer and the replay report it. */
static void
require(int cond)
{
	if (!cond)
		abort();
}

static void
same_fields(const struct phub_wire_msg *a, const struct phub_wire_msg *b)
{
	require(a->opcode == b->opcode && a->flags == b->flags && a->dtype == b->dtype);
	require(a->priority == b->priority && a->job_id == b->job_id);
	require(a->worker_rank == b->worker_rank && a->seg_index == b->seg_index);
	require(a->seg_count == b->seg_count && a->payload_len == b->payload_len);
	require(a->session_token == b->session_token && a->chunk_id == b->chunk_id);
	require(a->iteration == b->iteration && a->elem_offset == b->elem_offset);
	require(a->elem_count == b->elem_count && a->aux == b->aux);
	require(a->payload_len == 0 || memcmp(a->payload, b->payload, a->payload_len) == 0);
	require(memcmp(&a->hyper_lr, &b->hyper_lr, sizeof(float)) == 0);
	require(memcmp(&a->hyper_weight_decay, &b->hyper_weight_decay, sizeof(float)) == 0);
}

static void
fuzz_datagram(const uint8_t *data, size_t size)
{
	struct phub_wire_msg m, again;
	size_t canon, auth;
	int n;

	if (phub_wire_parse(data, size, &m) != PHUB_DROP_OK)
		return;
	/* The header length an encoder writes: 56, or 64 with the HYPER extension, and the AUTH
	 * extension after it. */
	canon = (m.flags & PHUB_WIRE_F_HYPER) ? PHUB_WIRE_HDR_LEN_HYPER : PHUB_WIRE_HDR_LEN;
	auth = (m.flags & PHUB_WIRE_F_AUTH) ? phub_wire_auth_ext_len(m.opcode) : 0;
	canon += auth;
	/* Whatever the validator takes, a sender could have sent. */
	require(phub_wire_msg_check(&m) == PHUB_DROP_OK);
	n = phub_wire_encode(out, sizeof(out), &m);
	require(n > 0);
	require(phub_wire_parse(out, (size_t)n, &again) == PHUB_DROP_OK);
	same_fields(&m, &again);
	if (m.hdr_len == canon) {
		/* Version 1 bytes are canonical: one message, one encoding; the AUTH extension
		 * (key, sequence number, tag) is lib/auth's to fill, the encoder zeroes it. */
		require((size_t)n == size && memcmp(out, data, canon - auth) == 0);
		require(memcmp(out + canon, data + canon, size - canon) == 0);
		for (size_t i = canon - auth; i < canon; i++)
			require(out[i] == 0);
	} else {
		/* A longer header from a later version is re-sent as version 1 without the part
		 * version 1 does not know. */
		require((size_t)n == size - (m.hdr_len - canon));
	}

	/* An ACKV the validator took holds whole entries with an ACK's flags only. */
	if (m.opcode == PHUB_WIRE_OP_ACKV) {
		unsigned int count;

		require(phub_wire_ackv_parse(m.payload, m.payload_len, &count) == PHUB_DROP_OK);
		require(count >= 1 && count * PHUB_WIRE_ACKV_ENTRY_LEN == m.payload_len);
		for (unsigned int i = 0; i < count; i++) {
			struct phub_wire_ackv_entry e;

			phub_wire_ackv_get(m.payload, i, &e);
			require((e.flags & ~PHUB_WIRE_ACKV_ENTRY_F_ALL) == 0);
		}
	}
	/* The reassemblers take any valid segment without reading out of bounds. */
	if (m.opcode == PHUB_WIRE_OP_JOIN) {
		struct phub_wire_join_merge jm;
		struct phub_wire_join_seg js;

		require(phub_wire_join_parse(m.payload, m.payload_len, &js) == PHUB_DROP_OK);
		phub_wire_join_merge_init(&jm, merge_keys, N_KEYS);
		n = phub_wire_join_merge_add(&jm, &m, &js);
		require(n == -ENOSPC || n == (js.key_count == js.total_keys));
	} else if (m.opcode == PHUB_WIRE_OP_JOIN_ACK) {
		struct phub_wire_join_ack_merge am;
		struct phub_wire_join_ack_seg as;

		require(phub_wire_join_ack_parse(m.payload, m.payload_len, &as) == PHUB_DROP_OK);
		phub_wire_join_ack_merge_init(&am, merge_eps, N_EPS, merge_map, N_CHUNKS);
		n = phub_wire_join_ack_merge_add(&am, &m, &as);
		require(n == -ENOSPC || n == (as.chunk_count == as.total_chunks));
	}
}

static void
fuzz_bodies(const uint8_t *data, size_t size)
{
	struct phub_wire_join_seg js;
	struct phub_wire_join_ack_seg as;
	struct phub_wire_error_msg es;
	struct phub_wire_ring_hello hs;
	unsigned int n;

	if (phub_wire_join_parse(data, size, &js) == PHUB_DROP_OK) {
		require(phub_wire_join_seg_encode(out, sizeof(out), &js) == (int)size);
		require(memcmp(out, data, size) == 0);
		for (uint32_t i = 0; i < js.key_count; i++)
			require(phub_wire_join_seg_key(&js, i).elem_count != 0);
	}
	if (phub_wire_join_ack_parse(data, size, &as) == PHUB_DROP_OK) {
		require(phub_wire_join_ack_seg_encode(out, sizeof(out), &as) == (int)size);
		require(memcmp(out, data, size) == 0);
		for (uint32_t i = 0; i < as.chunk_count; i++)
			require(phub_wire_join_ack_seg_chunk(&as, i) < as.endpoint_count);
	}
	if (phub_wire_error_parse(data, size, &es) == PHUB_DROP_OK) {
		require(phub_wire_error_encode(out, sizeof(out), &es) == (int)size);
		require(memcmp(out, data, size) == 0);
	}
	/* An ACKV body the parser takes is written back byte for byte, entry by entry. */
	if (phub_wire_ackv_parse(data, size, &n) == PHUB_DROP_OK) {
		require(n * PHUB_WIRE_ACKV_ENTRY_LEN == size);
		for (unsigned int i = 0; i < n; i++) {
			struct phub_wire_ackv_entry e;

			phub_wire_ackv_get(data, i, &e);
			phub_wire_ackv_put(out + (size_t)i * PHUB_WIRE_ACKV_ENTRY_LEN, &e, 1);
		}
		require(memcmp(out, data, size) == 0);
	}
	/* A RING_HELLO body the parser takes is written back byte for byte. */
	if (phub_wire_ring_hello_parse(data, size, &hs) == PHUB_DROP_OK) {
		require(phub_wire_ring_hello_write(out, sizeof(out), PHUB_WIRE_OP_RING_HELLO, &hs) ==
			(int)(PHUB_WIRE_HDR_LEN + size));
		require(memcmp(out + PHUB_WIRE_HDR_LEN, data, size) == 0);
	}
	/* So is a RING_ACKV body, entry by entry, each within the ring's steps. */
	if (phub_wire_ring_ackv_parse(data, size, &n) == PHUB_DROP_OK) {
		require(n >= 1 && n <= PHUB_WIRE_RING_ACKV_MAX &&
			n * sizeof(struct phub_wire_ring_ack_entry) == size);
		for (unsigned int i = 0; i < n; i++) {
			struct phub_wire_ring_ack e;

			phub_wire_ring_ackv_get(data, i, &e);
			require(e.step < 2 * (PHUB_WIRE_RING_MAX_RACKS - 1));
			phub_wire_ring_ackv_put(out, i, &e);
		}
		require(memcmp(out, data, size) == 0);
	}
}

static void
fuzz_iterations(const uint8_t *data, size_t size)
{
	uint32_t a, b;
	int32_t ab, ba;

	if (size < 8)
		return;
	memcpy(&a, data, sizeof(a));
	memcpy(&b, data + 4, sizeof(b));
	ab = phub_wire_iter_cmp(a, b);
	ba = phub_wire_iter_cmp(b, a);
	/* Antisymmetric except at the undefined half-circle distance. */
	require(ab == INT32_MIN ? ba == INT32_MIN : ab == -ba);
	require((ab == 0) == (a == b));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_datagram(data, size);
	fuzz_bodies(data, size);
	fuzz_iterations(data, size);
	return 0;
}
