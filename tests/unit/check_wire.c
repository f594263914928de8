/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/wire: round trips, one defect per drop reason, truncation, CRC32C, splits. */

#include <endian.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "phub_wire.h"

#define BUF_SIZE 65536
#define HDR PHUB_WIRE_HDR_LEN

/* ---- helpers: poke big-endian fields into an encoded datagram ---- */

static void
put16(uint8_t *p, size_t off, uint16_t v)
{
	v = htobe16(v);
	memcpy(p + off, &v, sizeof(v));
}

static void
put32(uint8_t *p, size_t off, uint32_t v)
{
	v = htobe32(v);
	memcpy(p + off, &v, sizeof(v));
}

static void
put64(uint8_t *p, size_t off, uint64_t v)
{
	v = htobe64(v);
	memcpy(p + off, &v, sizeof(v));
}

static uint16_t
get16(const uint8_t *p, size_t off)
{
	uint16_t v;

	memcpy(&v, p + off, sizeof(v));
	return be16toh(v);
}

static uint32_t
get32(const uint8_t *p, size_t off)
{
	uint32_t v;

	memcpy(&v, p + off, sizeof(v));
	return be32toh(v);
}

#define H(field) offsetof(struct phub_wire_hdr, field)
#define JB(field) (HDR + offsetof(struct phub_wire_join_body, field))
#define AB(field) (HDR + offsetof(struct phub_wire_join_ack_body, field))

static float push_payload[64];

/* A PUSH of n fp32 elements, the data packet of the fast path. */
static size_t
make_push(uint8_t *buf, uint32_t n, uint8_t flags)
{
	struct phub_wire_msg m;
	int len;

	for (uint32_t i = 0; i < 64; i++)
		push_payload[i] = (float)i * 0.5f - 3.0f;
	phub_wire_msg_init(&m, PHUB_WIRE_OP_PUSH);
	m.flags |= flags;
	m.dtype = PHUB_DTYPE_FP32;
	m.priority = 3;
	m.job_id = 7;
	m.session_token = 0x1122334455667788ull;
	m.worker_rank = 2;
	m.chunk_id = 41;
	m.iteration = 1000;
	m.elem_offset = 352;
	m.elem_count = n;
	m.seg_index = 1;
	m.seg_count = 2;
	m.flags |= PHUB_WIRE_F_LAST;
	m.aux = 0xabcdef;
	m.payload = (const uint8_t *)push_payload;
	m.payload_len = (uint16_t)(n * sizeof(float));
	len = phub_wire_encode(buf, BUF_SIZE, &m);
	ck_assert_int_gt(len, 0);
	return (size_t)len;
}

static size_t
make_ack(uint8_t *buf)
{
	struct phub_wire_msg m;
	int len;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_ACK);
	m.job_id = 7;
	m.session_token = 99;
	m.worker_rank = 2;
	m.chunk_id = 41;
	m.iteration = 1000;
	m.elem_offset = 0;
	m.elem_count = 352;
	m.aux = 5;
	len = phub_wire_encode(buf, BUF_SIZE, &m);
	ck_assert_int_gt(len, 0);
	return (size_t)len;
}

/* Three ACKV entries; the first has LAST, the second REPLAY. */
static const struct phub_wire_ackv_entry ackv_entries[] = {
	{ .chunk_id = 41, .seg_index = 3, .flags = PHUB_WIRE_F_LAST, .iteration = 1000,
	  .aux = 5 },
	{ .chunk_id = 0x01020304, .seg_index = 0xfffe, .flags = PHUB_WIRE_F_REPLAY,
	  .iteration = 0xfffffff0u, .aux = 0xa0b0c0d0u },
	{ .chunk_id = 0, .seg_index = 0, .flags = 0, .iteration = 0, .aux = 0 },
};

/* An ACKV (to a worker) of ackv_entries to rank 2 of job 7. */
static size_t
make_worker_ackv(uint8_t *buf)
{
	static uint8_t body[3 * PHUB_WIRE_ACKV_ENTRY_LEN];
	struct phub_wire_msg m;
	int len;

	phub_wire_ackv_put(body, ackv_entries, 3);
	phub_wire_msg_init(&m, PHUB_WIRE_OP_ACKV);
	m.job_id = 7;
	m.session_token = 99;
	m.worker_rank = 2;
	m.payload = body;
	m.payload_len = sizeof(body);
	len = phub_wire_encode(buf, BUF_SIZE, &m);
	ck_assert_int_gt(len, 0);
	return (size_t)len;
}

static const struct phub_wire_key two_keys[] = { { 10, 1000 }, { 11, 24 } };

static struct phub_wire_join_params
join_params(const struct phub_wire_key *keys, uint32_t n)
{
	struct phub_wire_join_params p;

	memset(&p, 0, sizeof(p));
	strcpy(p.join.name, "resnet50-job");
	p.join.nonce = 0xfeedfacecafebeefull;
	p.join.rank = 1;
	p.join.world_size = 4;
	p.join.dtype = PHUB_DTYPE_FP32;
	p.join.optimizer = PHUB_OPT_NESTEROV;
	p.join.join_flags = PHUB_WIRE_JOIN_F_DETERMINISTIC;
	p.join.hyper.lr = 0.1f;
	p.join.hyper.momentum = 0.9f;
	p.join.hyper.weight_decay = 1e-4f;
	p.join.hyper.eps = 1e-8f;
	p.join.chunk_bytes = 32768;
	p.keys = keys;
	p.key_count = n;
	return p;
}

static size_t
make_join(uint8_t *buf)
{
	struct phub_wire_join_params p = join_params(two_keys, 2);
	int len = phub_wire_join_write(buf, BUF_SIZE, &p, 1500, 0);

	ck_assert_int_gt(len, 0);
	return (size_t)len;
}

static const struct phub_wire_endpoint two_endpoints[] = {
	{ 0x0a000001, 9000 }, { 0x0a000002, 9001 },
};
static const uint16_t four_chunks[] = { 0, 1, 1, 0 };

static struct phub_wire_join_ack_params
join_ack_params(const uint16_t *map, uint32_t n_chunks, const struct phub_wire_endpoint *eps,
		uint16_t n_eps)
{
	struct phub_wire_join_ack_params p;

	memset(&p, 0, sizeof(p));
	p.ack.job_id = 7;
	p.ack.iteration = 12;
	p.ack.chunk_bytes = 32768;
	p.ack.seg_elems = 352;
	p.session_token = 0x5555aaaa0000ffffull;
	p.rank = 1;
	p.endpoints = eps;
	p.endpoint_count = n_eps;
	p.chunk_endpoints = map;
	p.total_chunks = n_chunks;
	return p;
}

static size_t
make_join_ack(uint8_t *buf)
{
	struct phub_wire_join_ack_params p = join_ack_params(four_chunks, 4, two_endpoints, 2);
	int len = phub_wire_join_ack_write(buf, BUF_SIZE, &p, 1500, 0);

	ck_assert_int_gt(len, 0);
	return (size_t)len;
}

static size_t
make_error(uint8_t *buf)
{
	struct phub_wire_msg about;
	int len;

	phub_wire_msg_init(&about, PHUB_WIRE_OP_PUSH);
	about.job_id = 7;
	about.session_token = 99;
	about.chunk_id = 3;
	about.iteration = 8;
	len = phub_wire_error_write(buf, BUF_SIZE, &about, PHUB_WIRE_ERR_BAD_SESSION,
			"token does not match");
	ck_assert_int_gt(len, 0);
	return (size_t)len;
}

/* A RING_HELLO of position 1 in a ring of 3, with two endpoints. */
static size_t
make_hello(uint8_t *buf, uint8_t opcode)
{
	struct phub_wire_ring_hello h;
	int len;

	memset(&h, 0, sizeof(h));
	h.job_id = 0x0305;
	snprintf(h.name, sizeof(h.name), "%s", "spanning");
	h.nonce = 0x9f3c61d2a7e4b508ull;
	h.token = 0x1122334455667788ull;
	h.racks = 3;
	h.pos = 1;
	h.endpoint_count = 2;
	h.endpoints[0] = (struct phub_wire_endpoint){ .ipv4 = 0x0a1e0002, .udp_port = 47001 };
	h.endpoints[1] = (struct phub_wire_endpoint){ .ipv4 = 0x0a1e0002, .udp_port = 47002 };
	h.caps = PHUB_WIRE_RING_CAP_ALL;
	len = phub_wire_ring_hello_write(buf, BUF_SIZE, opcode, &h);
	ck_assert_int_eq(len, HDR + 88 + 2 * 8);
	return (size_t)len;
}

/* A RING_ACKV of three entries from ring position 1. */
static size_t
make_ackv(uint8_t *buf)
{
	static uint8_t body[3 * 16];
	struct phub_wire_msg m;
	int len;

	for (unsigned int i = 0; i < 3; i++)
		phub_wire_ring_ackv_put(body, i, &(struct phub_wire_ring_ack){ .chunk_id = 40 + i,
				.seg_index = (uint16_t)(7 * i), .iteration = 1000 + i, .step = i });
	phub_wire_msg_init(&m, PHUB_WIRE_OP_RING_ACKV);
	m.job_id = 7;
	m.session_token = 99;
	m.worker_rank = 1;
	m.payload = body;
	m.payload_len = sizeof(body);
	len = phub_wire_encode(buf, BUF_SIZE, &m);
	ck_assert_int_eq(len, HDR + 48);
	return (size_t)len;
}

/* ---- names and sizes ---- */

START_TEST(test_every_drop_reason_has_a_distinct_name)
{
	for (int i = 0; i < PHUB_DROP_REASON_MAX; i++) {
		const char *a = phub_drop_reason_name(i);

		ck_assert_str_ne(a, "unknown");
		ck_assert_uint_gt(strlen(a), 0);
		for (int j = 0; j < i; j++)
			ck_assert_msg(strcmp(a, phub_drop_reason_name(j)) != 0,
					"reasons %d and %d share name %s", i, j, a);
	}
	ck_assert_str_eq(phub_drop_reason_name(PHUB_DROP_OK), "ok");
	ck_assert_str_eq(phub_drop_reason_name(PHUB_DROP_TOO_SHORT), "too_short");
	ck_assert_str_eq(phub_drop_reason_name(PHUB_DROP_REASON_MAX), "unknown");
	ck_assert_int_lt(PHUB_DROP_ERROR_TEXT, PHUB_DROP_FIRST_SESSION);
	ck_assert_int_lt(PHUB_DROP_FIRST_SESSION, PHUB_DROP_NO_BUFFER);
}
END_TEST

START_TEST(test_opcode_dtype_error_and_optimizer_names_follow_their_lists)
{
	ck_assert_str_eq(phub_wire_opcode_name(0x01), "join");
	ck_assert_str_eq(phub_wire_opcode_name(0x10), "push");
	ck_assert_str_eq(phub_wire_opcode_name(0x3f), "error");
	ck_assert_str_eq(phub_wire_opcode_name(0x42), "ring_ack");
	ck_assert_str_eq(phub_wire_opcode_name(0x43), "ring_hello");
	ck_assert_str_eq(phub_wire_opcode_name(0x44), "ring_hello_ack");
	ck_assert_str_eq(phub_wire_opcode_name(0x45), "ring_ackv");
	ck_assert_str_eq(phub_wire_opcode_name(0x46), "unknown");
	ck_assert_str_eq(phub_wire_opcode_name(0x00), "unknown");
	ck_assert_str_eq(phub_wire_dtype_name(PHUB_DTYPE_BF16), "bf16");
	ck_assert_str_eq(phub_wire_dtype_name(3), "unknown");
	ck_assert_uint_eq(phub_wire_dtype_size(PHUB_DTYPE_FP32), 4);
	ck_assert_uint_eq(phub_wire_dtype_size(PHUB_DTYPE_FP16), 2);
	ck_assert_uint_eq(phub_wire_dtype_size(PHUB_WIRE_DTYPE_NONE), 0);
	ck_assert_str_eq(phub_wire_error_name(PHUB_WIRE_ERR_WORKER_TIMEOUT), "worker_timeout");
	ck_assert_str_eq(phub_wire_error_name(0), "unknown");
	ck_assert_str_eq(phub_wire_optimizer_name(PHUB_OPT_ADAMW), "adamw");
	ck_assert_str_eq(phub_wire_optimizer_name(6), "unknown");
}
END_TEST

START_TEST(test_max_payload_subtracts_ip_udp_and_header)
{
	ck_assert_int_eq(phub_wire_max_payload(1500), 1500 - 20 - 8 - 56);
	ck_assert_int_eq(phub_wire_max_payload(9000), 9000 - 84);
	ck_assert_int_eq(phub_wire_max_payload(65535), 65507 - 56);
	ck_assert_int_eq(phub_wire_max_payload(1000000), 65507 - 56);
	ck_assert_int_eq(phub_wire_max_payload(575), -EINVAL);
}
END_TEST

START_TEST(test_max_elems_rounds_down_to_sixteen)
{
	ck_assert_int_eq(phub_wire_max_elems(1500, PHUB_DTYPE_FP32), 352);
	ck_assert_int_eq(phub_wire_max_elems(1500, PHUB_DTYPE_FP16), 704);
	ck_assert_int_eq(phub_wire_max_elems(1500, PHUB_DTYPE_BF16), 704);
	ck_assert_int_eq(phub_wire_max_elems(9000, PHUB_DTYPE_FP32), 2224);
	ck_assert_int_eq(phub_wire_max_elems(1500, PHUB_WIRE_DTYPE_NONE), -EINVAL);
	ck_assert_int_eq(phub_wire_max_elems(100, PHUB_DTYPE_FP32), -EINVAL);
	for (unsigned int mtu = 576; mtu <= 9216; mtu += 7) {
		int e = phub_wire_max_elems(mtu, PHUB_DTYPE_FP16);
		int room = phub_wire_max_payload(mtu) - (PHUB_WIRE_HDR_LEN_MAX - PHUB_WIRE_HDR_LEN);

		ck_assert_int_eq(e % 16, 0);
		ck_assert_int_le(e * 2, room);
		ck_assert_int_gt((e + 16) * 2, room);
	}
}
END_TEST

/* A learning-rate change mid-training adds HYPER to a full PUSH: it must still fit the link. */
START_TEST(test_max_elems_leave_room_for_the_longest_header)
{
	static const uint8_t dtypes[] = { PHUB_DTYPE_FP32, PHUB_DTYPE_FP16, PHUB_DTYPE_BF16 };

	ck_assert_int_ge(PHUB_WIRE_HDR_LEN_MAX, PHUB_WIRE_HDR_LEN_HYPER);
	for (unsigned int mtu = PHUB_WIRE_MIN_MTU; mtu <= 9216; mtu++) {
		for (size_t d = 0; d < sizeof(dtypes); d++) {
			int e = phub_wire_max_elems(mtu, dtypes[d]);
			unsigned int size = phub_wire_dtype_size(dtypes[d]);

			ck_assert_int_gt(e, 0);
			ck_assert_uint_le(PHUB_WIRE_IPV4_UDP_OVERHEAD + PHUB_WIRE_HDR_LEN_MAX +
					(unsigned int)e * size, mtu);
		}
	}
}
END_TEST

/* ---- round trip of every opcode ---- */

static const uint8_t all_opcodes[] = {
#define OPCODE_VALUE(n, v, s, u, pl) v,
	PHUB_WIRE_OPCODES(OPCODE_VALUE)
#undef OPCODE_VALUE
};
#define N_OPCODES ((int)sizeof(all_opcodes))

/* A valid datagram of opcode (every field it uses non-zero), written into buf. */
static size_t
make_opcode(uint8_t *buf, uint8_t opcode, uint8_t flags)
{
	static uint16_t payload[40];
	struct phub_wire_msg m;
	int len;

	switch (opcode) {
	case PHUB_WIRE_OP_JOIN: {
		struct phub_wire_join_params p = join_params(two_keys, 2);

		p.flags = flags;
		len = phub_wire_join_write(buf, BUF_SIZE, &p, 1500, 0);
		break;
	}
	case PHUB_WIRE_OP_JOIN_ACK: {
		struct phub_wire_join_ack_params p =
			join_ack_params(four_chunks, 4, two_endpoints, 2);

		p.flags = flags;
		len = phub_wire_join_ack_write(buf, BUF_SIZE, &p, 1500, 0);
		break;
	}
	case PHUB_WIRE_OP_ERROR: {
		struct phub_wire_msg about;

		phub_wire_msg_init(&about, PHUB_WIRE_OP_PUSH);
		about.flags |= flags;
		about.job_id = 3;
		about.session_token = 4;
		about.chunk_id = 5;
		about.iteration = 6;
		about.elem_offset = 16;
		about.elem_count = 32;
		len = phub_wire_error_write(buf, BUF_SIZE, &about, PHUB_WIRE_ERR_JOB_FULL,
				"job \xc3\xa9t\xc3\xa9 full");
		break;
	}
	case PHUB_WIRE_OP_RING_HELLO:
	case PHUB_WIRE_OP_RING_HELLO_ACK: {
		static uint8_t plain[BUF_SIZE];

		/* The writer sets no flag: the same datagram with the caller's, encoded again. */
		len = (int)make_hello(plain, opcode);
		ck_assert_int_eq(phub_wire_parse(plain, (size_t)len, &m), PHUB_DROP_OK);
		m.flags |= flags;
		len = phub_wire_encode(buf, BUF_SIZE, &m);
		break;
	}
	case PHUB_WIRE_OP_RING_ACKV: {
		static uint8_t plain[BUF_SIZE];

		len = (int)make_ackv(plain);
		ck_assert_int_eq(phub_wire_parse(plain, (size_t)len, &m), PHUB_DROP_OK);
		m.flags |= flags;
		m.priority = 9;
		len = phub_wire_encode(buf, BUF_SIZE, &m);
		break;
	}
	default:
		phub_wire_msg_init(&m, opcode);
		m.flags |= flags;
		m.priority = 9;
		m.worker_rank = 5;
		m.job_id = 77;
		m.session_token = 0x0102030405060708ull;
		m.chunk_id = 1234;
		m.iteration = 0xfffffff0u;
		m.elem_offset = 704;
		m.elem_count = 40;
		m.aux = 0x10203040;
		m.seg_index = 2;
		m.seg_count = 3;
		for (int i = 0; i < 40; i++)
			payload[i] = (uint16_t)(0x3c00 + i);
		switch (opcode) {
		case PHUB_WIRE_OP_WORLD:
		case PHUB_WIRE_OP_WORLD_ACK:
			m.chunk_id = 0;
			m.elem_offset = 0;
			m.elem_count = 0;
			break;
		case PHUB_WIRE_OP_LEAVE:
		case PHUB_WIRE_OP_LEAVE_ACK:
			m.chunk_id = 0;
			m.elem_offset = 0;
			m.elem_count = 0;
			m.aux = 0;
			break;
		case PHUB_WIRE_OP_PING:
		case PHUB_WIRE_OP_PONG:
			m.chunk_id = 0;
			m.elem_offset = 0;
			m.elem_count = 0;
			m.payload = (const uint8_t *)payload;
			m.payload_len = 13;
			break;
		case PHUB_WIRE_OP_ACKV:
			m.chunk_id = 0;
			m.iteration = 0;
			m.elem_offset = 0;
			m.elem_count = 0;
			m.aux = 0;
			/* Two entries: 32 bytes of the payload, flags 0x3c00.. cleared. */
			for (int i = 0; i < 16; i++)
				payload[i] = (uint16_t)(i % 8 == 3 ? 0 : 0x3c00 + i);
			m.payload = (const uint8_t *)payload;
			m.payload_len = 2 * PHUB_WIRE_ACKV_ENTRY_LEN;
			break;
		case PHUB_WIRE_OP_PUSH:
		case PHUB_WIRE_OP_MODEL:
		case PHUB_WIRE_OP_RING_REDUCE:
		case PHUB_WIRE_OP_RING_GATHER:
			m.dtype = PHUB_DTYPE_FP16;
			m.payload = (const uint8_t *)payload;
			m.payload_len = sizeof(payload);
			break;
		default:
			break;
		}
		len = phub_wire_encode(buf, BUF_SIZE, &m);
		break;
	}
	ck_assert_msg(len > 0, "%s: encode returned %d", phub_wire_opcode_name(opcode), len);
	return (size_t)len;
}

static void
assert_msg_eq(const struct phub_wire_msg *a, const struct phub_wire_msg *b)
{
	ck_assert_uint_eq(a->opcode, b->opcode);
	ck_assert_uint_eq(a->flags, b->flags);
	ck_assert_uint_eq(a->dtype, b->dtype);
	ck_assert_uint_eq(a->priority, b->priority);
	ck_assert_uint_eq(a->job_id, b->job_id);
	ck_assert_uint_eq(a->worker_rank, b->worker_rank);
	ck_assert_uint_eq(a->seg_index, b->seg_index);
	ck_assert_uint_eq(a->seg_count, b->seg_count);
	ck_assert_uint_eq(a->payload_len, b->payload_len);
	ck_assert(a->session_token == b->session_token);
	ck_assert_uint_eq(a->chunk_id, b->chunk_id);
	ck_assert_uint_eq(a->iteration, b->iteration);
	ck_assert_uint_eq(a->elem_offset, b->elem_offset);
	ck_assert_uint_eq(a->elem_count, b->elem_count);
	ck_assert_uint_eq(a->aux, b->aux);
	if (a->payload_len != 0)
		ck_assert_mem_eq(a->payload, b->payload, a->payload_len);
}

static void
round_trip(uint8_t opcode, uint8_t flags)
{
	static uint8_t buf[BUF_SIZE], again[BUF_SIZE];
	struct phub_wire_msg m, m2;
	size_t len = make_opcode(buf, opcode, flags);
	enum phub_drop_reason r = phub_wire_parse(buf, len, &m);
	int len2;

	ck_assert_msg(r == PHUB_DROP_OK, "%s: %s", phub_wire_opcode_name(opcode),
			phub_drop_reason_name(r));
	ck_assert_uint_eq(m.opcode, opcode);
	ck_assert_uint_eq(m.hdr_len, HDR);
	ck_assert_uint_eq(m.flags & PHUB_WIRE_F_CSUM, flags & PHUB_WIRE_F_CSUM);
	ck_assert_uint_eq(HDR + m.payload_len, len);
	if (flags & PHUB_WIRE_F_CSUM)
		ck_assert_uint_ne(m.csum, 0);
	else
		ck_assert_uint_eq(m.csum, 0);
	/* Encoding what was parsed gives the same bytes, checksum included. */
	len2 = phub_wire_encode(again, sizeof(again), &m);
	ck_assert_int_eq(len2, (int)len);
	ck_assert_mem_eq(again, buf, len);
	ck_assert_int_eq(phub_wire_parse(again, len, &m2), PHUB_DROP_OK);
	assert_msg_eq(&m, &m2);
}

START_TEST(test_every_opcode_survives_encode_parse_encode)
{
	round_trip(all_opcodes[_i], 0);
}
END_TEST

START_TEST(test_every_opcode_survives_round_trip_with_checksum)
{
	round_trip(all_opcodes[_i], PHUB_WIRE_F_CSUM);
}
END_TEST

START_TEST(test_push_fields_and_payload_are_read_back_in_host_order)
{
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m;
	size_t len = make_push(buf, 16, PHUB_WIRE_F_RETRANSMIT);

	ck_assert_uint_eq(len, HDR + 64);
	/* Header fields are big-endian on the wire: spot-check the bytes themselves. */
	ck_assert_uint_eq(buf[0], 0x50);
	ck_assert_uint_eq(buf[1], 0x48);
	ck_assert_uint_eq(get32(buf, H(iteration)), 1000);
	ck_assert_uint_eq(buf[H(session_token)], 0x11);
	ck_assert_int_eq(phub_wire_parse(buf, len, &m), PHUB_DROP_OK);
	ck_assert(m.session_token == 0x1122334455667788ull);
	ck_assert_uint_eq(m.elem_offset, 352);
	ck_assert_uint_eq(m.aux, 0xabcdef);
	ck_assert_uint_eq(m.flags, PHUB_WIRE_F_RETRANSMIT | PHUB_WIRE_F_LAST);
	ck_assert_ptr_eq(m.payload, buf + HDR);
	/* Elements stay little-endian IEEE: the bytes are the sender's floats unchanged. */
	ck_assert_mem_eq(m.payload, push_payload, 64);
}
END_TEST

START_TEST(test_receiver_skips_a_longer_header)
{
	static uint8_t buf[BUF_SIZE], ext[BUF_SIZE];
	struct phub_wire_msg m;
	size_t len = make_push(buf, 16, 0);
	uint32_t crc;

	/* The same PUSH from a later version with 8 more header bytes it knows about. */
	memcpy(ext, buf, HDR);
	memset(ext + HDR, 0xee, 8);
	memcpy(ext + HDR + 8, buf + HDR, len - HDR);
	ext[H(hdr_len)] = HDR + 8;
	ext[H(flags)] |= PHUB_WIRE_F_CSUM;
	crc = phub_wire_csum_finish(phub_wire_csum_payload(ext + HDR + 8, len - HDR), ext, HDR + 8);
	put32(ext, H(csum), crc);
	ck_assert_int_eq(phub_wire_parse(ext, len + 8, &m), PHUB_DROP_OK);
	ck_assert_uint_eq(m.hdr_len, HDR + 8);
	ck_assert_ptr_eq(m.payload, ext + HDR + 8);
	ck_assert_mem_eq(m.payload, push_payload, 64);
	/* The extension is under the checksum too. */
	ext[HDR + 3] ^= 1;
	ck_assert_int_eq(phub_wire_parse(ext, len + 8, &m), PHUB_DROP_BAD_CSUM);
}
END_TEST

START_TEST(test_header_only_encode_matches_full_encode_for_shared_payload)
{
	static uint8_t full[BUF_SIZE], hdr[HDR];
	struct phub_wire_msg m;
	size_t len = make_push(full, 16, PHUB_WIRE_F_CSUM);
	uint32_t payload_crc;

	ck_assert_int_eq(phub_wire_parse(full, len, &m), PHUB_DROP_OK);
	/* One payload CRC, finished per header: what the PBox does for N workers. */
	payload_crc = phub_wire_csum_payload(push_payload, 64);
	ck_assert_int_eq(phub_wire_hdr_encode(hdr, sizeof(hdr), &m, payload_crc), HDR);
	ck_assert_mem_eq(hdr, full, HDR);
	m.session_token = 12345;
	ck_assert_int_eq(phub_wire_hdr_encode(hdr, sizeof(hdr), &m, payload_crc), HDR);
	ck_assert_uint_ne(get32(hdr, H(csum)), get32(full, H(csum)));
	ck_assert_int_eq(phub_wire_hdr_encode(hdr, HDR - 1, &m, payload_crc), -ENOSPC);
}
END_TEST

START_TEST(test_encoder_refuses_invalid_message_and_small_buffer)
{
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m;
	uint8_t payload[8] = { 0 };

	phub_wire_msg_init(&m, PHUB_WIRE_OP_PUSH);
	m.dtype = PHUB_DTYPE_FP32;
	m.elem_count = 2;
	m.payload = payload;
	m.payload_len = 8;
	ck_assert_int_eq(phub_wire_encode(buf, HDR + 8, &m), HDR + 8);
	ck_assert_int_eq(phub_wire_encode(buf, HDR + 7, &m), -ENOSPC);
	m.elem_count = 3;
	ck_assert_int_eq(phub_wire_encode(buf, sizeof(buf), &m), -EINVAL);
	ck_assert_int_eq(phub_wire_msg_check(&m), PHUB_DROP_ELEM_COUNT);
	m.elem_count = 2;
	m.payload = NULL;
	ck_assert_int_eq(phub_wire_encode(buf, sizeof(buf), &m), -EINVAL);
	m.payload = payload;
	m.opcode = 0x46;
	ck_assert_int_eq(phub_wire_encode(buf, sizeof(buf), &m), -EINVAL);
	ck_assert_int_eq(phub_wire_msg_check(&m), PHUB_DROP_RESERVED_OPCODE);
}
END_TEST

static const uint8_t opcode_use[] = {
#define OPCODE_USE(n, v, s, u, pl) u,
	PHUB_WIRE_OPCODES(OPCODE_USE)
#undef OPCODE_USE
};

START_TEST(test_fields_an_opcode_does_not_use_must_be_zero)
{
	static uint8_t buf[BUF_SIZE];
	uint8_t use = opcode_use[_i];
	struct phub_wire_msg base, m;
	size_t len = make_opcode(buf, all_opcodes[_i], 0);
	int unused = 0;

	ck_assert_int_eq(phub_wire_parse(buf, len, &base), PHUB_DROP_OK);
	for (int f = 0; f < 6; f++) {
		uint8_t bit = (uint8_t[]){ PHUB_WIRE_USE_JOB, PHUB_WIRE_USE_TOKEN,
			PHUB_WIRE_USE_CHUNK, PHUB_WIRE_USE_ITER, PHUB_WIRE_USE_ELEMS,
			PHUB_WIRE_USE_AUX }[f];

		if (use & bit)
			continue;
		unused++;
		m = base;
		switch (f) {
		case 0: m.job_id = 1; break;
		case 1: m.session_token = 1; break;
		case 2: m.chunk_id = 1; break;
		case 3: m.iteration = 1; break;
		case 4: m.elem_offset = 1; break;
		default: m.aux = 1; break;
		}
		ck_assert_msg(phub_wire_msg_check(&m) == PHUB_DROP_UNUSED_FIELD, "%s field %d",
				phub_wire_opcode_name(all_opcodes[_i]), f);
		ck_assert_int_eq(phub_wire_encode(buf, BUF_SIZE, &m), -EINVAL);
	}
	/* Data opcodes use every field; JOIN, before any session, uses none of them. */
	if (use & PHUB_WIRE_USE_RANGE)
		ck_assert_int_eq(unused, 0);
	if (all_opcodes[_i] == PHUB_WIRE_OP_JOIN)
		ck_assert_int_eq(unused, 6);
}
END_TEST

/* ---- one defect per drop reason ---- */

/* Valid datagrams the defect cases start from. */
enum base { B_ACK, B_PUSH, B_PUSH_CSUM, B_JOIN, B_JOIN_ACK, B_ERROR, B_LEAVE, B_HELLO, B_ACKV,
	B_WORKER_ACKV };

static size_t
make_leave(uint8_t *buf)
{
	struct phub_wire_msg m;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_LEAVE);
	m.job_id = 1;
	m.session_token = 2;
	m.iteration = 3;
	ck_assert_int_eq(phub_wire_encode(buf, BUF_SIZE, &m), HDR);
	return HDR;
}

static size_t
make_base(uint8_t *buf, enum base b)
{
	switch (b) {
	case B_ACK:
		return make_ack(buf);
	case B_PUSH:
		return make_push(buf, 16, 0);
	case B_PUSH_CSUM:
		return make_push(buf, 16, PHUB_WIRE_F_CSUM);
	case B_JOIN:
		return make_join(buf);
	case B_JOIN_ACK:
		return make_join_ack(buf);
	case B_ERROR:
		return make_error(buf);
	case B_LEAVE:
		return make_leave(buf);
	case B_HELLO:
		return make_hello(buf, PHUB_WIRE_OP_RING_HELLO);
	case B_ACKV:
		return make_ackv(buf);
	case B_WORKER_ACKV:
		return make_worker_ackv(buf);
	}
	return 0;
}

/* How a defect changes bytes: set a big-endian field, flip bits of a byte, fill a JOIN name. */
enum poke_op { P_NONE, P_SET8, P_SET16, P_SET32, P_SET64, P_XOR8, P_FILL_NAME };

struct poke {
	size_t off;
	enum poke_op op;
	uint64_t value;
};

/*
 * One packet with exactly one defect: a base, up to two field changes (some defects need two
 * fields to agree so that only the one under test is wrong), and the datagram length given to
 * the parser (the base's plus len_delta, or len_abs when non-zero).
 */
struct defect {
	const char *what;
	enum phub_drop_reason reason;
	enum base base;
	struct poke poke[2];
	int len_delta;
	size_t len_abs;
};

#define SET8(o, v) { (o), P_SET8, (v) }
#define SET16(o, v) { (o), P_SET16, (v) }
#define SET32(o, v) { (o), P_SET32, (v) }
#define SET64(o, v) { (o), P_SET64, (v) }
#define XOR8(o, v) { (o), P_XOR8, (v) }
#define TEXT (HDR + 4)	/* the first byte of an ERROR's text */
#define EP1_PORT (HDR + 32 + 8 + 4)	/* JOIN_ACK: port of endpoint 1 */
#define CHUNK1 (HDR + 32 + 2 * 8 + 2)	/* JOIN_ACK: endpoint index of chunk 1 */
#define KEY1_ELEMS (JB(key_count) + 4 + 8 + 4)	/* JOIN: elem_count of key 1 */
#define HB(field) (HDR + offsetof(struct phub_wire_ring_hello_body, field))
#define HELLO_EP1_PORT (HDR + 88 + 8 + 4)	/* RING_HELLO: port of endpoint 1 */
/* ACKV: the flags of entry i. */
#define ACKV_FLAGS(i) (HDR + (i) * PHUB_WIRE_ACKV_ENTRY_LEN + \
		offsetof(struct phub_wire_ackv_entry_wire, flags))

static const struct defect defects[] = {
	{ "datagram shorter than the header", PHUB_DROP_TOO_SHORT, B_ACK, { { 0 } }, -1, 0 },
	{ "hdr_len beyond the datagram", PHUB_DROP_TOO_SHORT, B_ACK,
	  { SET8(H(hdr_len), 64) }, 0, HDR + 4 },
	{ "magic off by one bit", PHUB_DROP_BAD_MAGIC, B_ACK, { XOR8(H(magic), 1) }, 0, 0 },
	{ "version 2", PHUB_DROP_BAD_VERSION, B_ACK, { SET8(H(version), 2) }, 0, 0 },
	{ "hdr_len 48", PHUB_DROP_BAD_HDR_LEN, B_ACK, { SET8(H(hdr_len), 48) }, 0, 0 },
	{ "hdr_len 60, not a multiple of 8", PHUB_DROP_BAD_HDR_LEN, B_PUSH,
	  { SET8(H(hdr_len), 60) }, 0, 0 },
	{ "payload_len one more than sent", PHUB_DROP_BAD_PAYLOAD_LEN, B_PUSH,
	  { SET16(H(payload_len), 65) }, 0, 0 },
	{ "four bytes after the payload", PHUB_DROP_BAD_PAYLOAD_LEN, B_PUSH, { { 0 } }, 4, 0 },
	{ "flag 0x80", PHUB_DROP_BAD_FLAGS, B_ACK, { XOR8(H(flags), 0x80) }, 0, 0 },
	{ "HYPER on an ACK of 56 header bytes", PHUB_DROP_BAD_HYPER, B_ACK,
	  { XOR8(H(flags), PHUB_WIRE_F_HYPER) }, 0, 0 },
	{ "AUTH on an ACK of 56 header bytes", PHUB_DROP_BAD_AUTH_EXT, B_ACK,
	  { XOR8(H(flags), PHUB_WIRE_F_AUTH) }, 0, 0 },
	{ "csum set without the flag", PHUB_DROP_CSUM_WITHOUT_FLAG, B_ACK,
	  { SET32(H(csum), 1) }, 0, 0 },
	{ "payload bit flipped under CSUM", PHUB_DROP_BAD_CSUM, B_PUSH_CSUM,
	  { XOR8(HDR + 5, 0x10) }, 0, 0 },
	{ "header bit flipped under CSUM", PHUB_DROP_BAD_CSUM, B_PUSH_CSUM,
	  { XOR8(H(iteration) + 3, 1) }, 0, 0 },
	{ "opcode 0x7f", PHUB_DROP_BAD_OPCODE, B_ACK, { SET8(H(opcode), 0x7f) }, 0, 0 },
	{ "opcode 0", PHUB_DROP_BAD_OPCODE, B_ACK, { SET8(H(opcode), 0) }, 0, 0 },
	{ "opcode 0x46 of the ring range", PHUB_DROP_RESERVED_OPCODE, B_ACK,
	  { SET8(H(opcode), 0x46) }, 0, 0 },
	{ "PUSH of dtype 3", PHUB_DROP_BAD_DTYPE, B_PUSH, { SET8(H(dtype), 3) }, 0, 0 },
	{ "PUSH of dtype NONE", PHUB_DROP_BAD_DTYPE, B_PUSH,
	  { SET8(H(dtype), PHUB_WIRE_DTYPE_NONE) }, 0, 0 },
	{ "ACK of dtype FP32", PHUB_DROP_BAD_DTYPE, B_ACK,
	  { SET8(H(dtype), PHUB_DTYPE_FP32) }, 0, 0 },
	{ "seg_count 0", PHUB_DROP_SEG_COUNT_ZERO, B_ACK, { SET16(H(seg_count), 0) }, 0, 0 },
	{ "seg_index 1 of 1", PHUB_DROP_SEG_INDEX, B_ACK, { SET16(H(seg_index), 1) }, 0, 0 },
	{ "LAST missing on the only segment", PHUB_DROP_SEG_LAST, B_ACK,
	  { SET8(H(flags), 0) }, 0, 0 },
	{ "LAST on segment 0 of 2", PHUB_DROP_SEG_LAST, B_PUSH, { SET16(H(seg_index), 0) }, 0, 0 },
	{ "ACK with a payload", PHUB_DROP_PAYLOAD_NOT_ALLOWED, B_ACK,
	  { SET16(H(payload_len), 4) }, 4, 0 },
	{ "ACK of 0 elements", PHUB_DROP_ELEM_COUNT_ZERO, B_ACK,
	  { SET32(H(elem_count), 0) }, 0, 0 },
	{ "PUSH of 0 elements", PHUB_DROP_ELEM_COUNT_ZERO, B_PUSH,
	  { SET32(H(elem_count), 0), SET16(H(payload_len), 0) }, 0, HDR },
	{ "PUSH of 15 elements in 64 bytes", PHUB_DROP_ELEM_COUNT, B_PUSH,
	  { SET32(H(elem_count), 15) }, 0, 0 },
	/* (2^30 + 16) * 4 bytes is 64 modulo 2^32: only 64-bit arithmetic sees the lie. */
	{ "PUSH whose byte count wraps 32 bits", PHUB_DROP_ELEM_COUNT, B_PUSH,
	  { SET32(H(elem_count), (1u << 30) + 16) }, 0, 0 },
	{ "ACK range past 2^32", PHUB_DROP_ELEM_RANGE, B_ACK,
	  { SET32(H(elem_offset), 0xfffffff0u), SET32(H(elem_count), 0x20) }, 0, 0 },
	{ "reserved word 1", PHUB_DROP_UNUSED_FIELD, B_ACK, { SET32(H(reserved), 1) }, 0, 0 },
	{ "JOIN with a job_id", PHUB_DROP_UNUSED_FIELD, B_JOIN, { SET32(H(job_id), 1) }, 0, 0 },
	{ "LEAVE with a chunk_id", PHUB_DROP_UNUSED_FIELD, B_LEAVE,
	  { SET32(H(chunk_id), 9) }, 0, 0 },
	{ "ERROR body of 2 bytes", PHUB_DROP_BODY_SHORT, B_ERROR,
	  { SET16(H(payload_len), 2) }, 0, HDR + 2 },
	{ "JOIN without body", PHUB_DROP_BODY_SHORT, B_JOIN,
	  { SET16(H(payload_len), 0) }, 0, HDR },
	{ "JOIN name of 64 letters", PHUB_DROP_JOIN_NAME_UNTERMINATED, B_JOIN,
	  { { JB(name), P_FILL_NAME, 'a' } }, 0, 0 },
	{ "JOIN name with a space", PHUB_DROP_JOIN_NAME, B_JOIN,
	  { SET8(JB(name) + 3, ' ') }, 0, 0 },
	{ "JOIN name empty", PHUB_DROP_JOIN_NAME, B_JOIN,
	  { { JB(name), P_FILL_NAME, 0 } }, 0, 0 },
	{ "JOIN name with junk after NUL", PHUB_DROP_JOIN_NAME, B_JOIN,
	  { SET8(JB(name) + 40, 'x') }, 0, 0 },
	{ "JOIN world_size 0", PHUB_DROP_JOIN_WORLD_SIZE, B_JOIN,
	  { SET16(JB(world_size), 0) }, 0, 0 },
	{ "JOIN rank 4 of 4", PHUB_DROP_JOIN_RANK, B_JOIN,
	  { SET16(JB(rank), 4), SET16(H(worker_rank), 4) }, 0, 0 },
	{ "JOIN header rank 0, body rank 1", PHUB_DROP_JOIN_RANK_MISMATCH, B_JOIN,
	  { SET16(H(worker_rank), 0) }, 0, 0 },
	{ "JOIN dtype NONE", PHUB_DROP_JOIN_DTYPE, B_JOIN,
	  { SET8(JB(dtype), PHUB_WIRE_DTYPE_NONE) }, 0, 0 },
	{ "JOIN optimizer 6", PHUB_DROP_JOIN_OPTIMIZER, B_JOIN, { SET8(JB(optimizer), 6) }, 0, 0 },
	{ "JOIN flag 0x8000", PHUB_DROP_JOIN_FLAGS, B_JOIN,
	  { SET16(JB(join_flags), 0x8000) }, 0, 0 },
	{ "JOIN lr NaN", PHUB_DROP_JOIN_HYPER, B_JOIN, { SET32(JB(lr), 0x7fc00000) }, 0, 0 },
	{ "JOIN lr infinite", PHUB_DROP_JOIN_HYPER, B_JOIN, { SET32(JB(lr), 0x7f800000) }, 0, 0 },
	{ "JOIN eps -1", PHUB_DROP_JOIN_HYPER, B_JOIN, { SET32(JB(eps), 0xbf800000) }, 0, 0 },
	{ "JOIN chunk_bytes not whole fp32", PHUB_DROP_JOIN_CHUNK_BYTES, B_JOIN,
	  { SET32(JB(chunk_bytes), 32766) }, 0, 0 },
	{ "JOIN key_count 3 with 2 entries", PHUB_DROP_JOIN_KEY_COUNT, B_JOIN,
	  { SET32(JB(key_count), 3) }, 0, 0 },
	{ "JOIN key_count 0", PHUB_DROP_JOIN_KEY_COUNT, B_JOIN,
	  { SET32(JB(key_count), 0), SET16(H(payload_len), 120) }, 0, HDR + 120 },
	{ "JOIN keys 1..2 of 2", PHUB_DROP_JOIN_KEY_RANGE, B_JOIN,
	  { SET32(JB(first_key), 1) }, 0, 0 },
	{ "JOIN total_keys 0", PHUB_DROP_JOIN_KEY_RANGE, B_JOIN,
	  { SET32(JB(total_keys), 0) }, 0, 0 },
	{ "JOIN key of 0 elements", PHUB_DROP_JOIN_KEY_EMPTY, B_JOIN,
	  { SET32(KEY1_ELEMS, 0) }, 0, 0 },
	{ "JOIN_ACK body job 8, header 7", PHUB_DROP_JOIN_ACK_JOB, B_JOIN_ACK,
	  { SET32(AB(job_id), 8) }, 0, 0 },
	{ "JOIN_ACK token 0", PHUB_DROP_JOIN_ACK_TOKEN, B_JOIN_ACK,
	  { SET64(H(session_token), 0) }, 0, 0 },
	{ "JOIN_ACK seg_elems 100", PHUB_DROP_JOIN_ACK_GEOMETRY, B_JOIN_ACK,
	  { SET32(AB(seg_elems), 100) }, 0, 0 },
	{ "JOIN_ACK chunk_bytes 0", PHUB_DROP_JOIN_ACK_GEOMETRY, B_JOIN_ACK,
	  { SET32(AB(chunk_bytes), 0) }, 0, 0 },
	{ "JOIN_ACK no endpoint", PHUB_DROP_JOIN_ACK_ENDPOINT, B_JOIN_ACK,
	  { SET16(AB(endpoint_count), 0) }, 0, 0 },
	{ "JOIN_ACK endpoint port 0", PHUB_DROP_JOIN_ACK_ENDPOINT, B_JOIN_ACK,
	  { SET16(EP1_PORT, 0) }, 0, 0 },
	{ "JOIN_ACK reserved half-word", PHUB_DROP_UNUSED_FIELD, B_JOIN_ACK,
	  { SET16(AB(reserved), 1) }, 0, 0 },
	{ "JOIN_ACK 3 endpoints announced, 2 sent", PHUB_DROP_JOIN_ACK_LENGTH, B_JOIN_ACK,
	  { SET16(AB(endpoint_count), 3) }, 0, 0 },
	{ "JOIN_ACK 4 chunks of 3", PHUB_DROP_JOIN_ACK_CHUNK_RANGE, B_JOIN_ACK,
	  { SET32(AB(total_chunks), 3) }, 0, 0 },
	{ "JOIN_ACK chunk on endpoint 2 of 2", PHUB_DROP_JOIN_ACK_ENDPOINT_INDEX, B_JOIN_ACK,
	  { SET16(CHUNK1, 2) }, 0, 0 },
	{ "ERROR text longer than sent", PHUB_DROP_ERROR_LENGTH, B_ERROR,
	  { SET16(HDR + 2, 30) }, 0, 0 },
	{ "ERROR code 999", PHUB_DROP_ERROR_CODE, B_ERROR,
	  { SET16(HDR, 999), SET32(H(aux), 999) }, 0, 0 },
	{ "ERROR code differs from aux", PHUB_DROP_ERROR_CODE, B_ERROR,
	  { SET32(H(aux), 1) }, 0, 0 },
	{ "ERROR text with an overlong NUL", PHUB_DROP_ERROR_TEXT, B_ERROR,
	  { SET16(TEXT, 0xc080) }, 0, 0 },
	{ "ERROR text with a surrogate", PHUB_DROP_ERROR_TEXT, B_ERROR,
	  { SET32(TEXT, 0xeda08061) }, 0, 0 },
	{ "RING_HELLO ring of 1", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(HB(racks), 1), SET16(HB(pos), 0) }, 0, 0 },
	{ "RING_HELLO ring of 17", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(HB(racks), 17) }, 0, 0 },
	{ "RING_HELLO position 3 of 3", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(HB(pos), 3), SET16(H(worker_rank), 3) }, 0, 0 },
	{ "RING_HELLO token 0", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET64(HB(token), 0) }, 0, 0 },
	{ "RING_HELLO no endpoint", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(HB(endpoint_count), 0) }, 0, 0 },
	{ "RING_HELLO 3 endpoints announced, 2 sent", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(HB(endpoint_count), 3) }, 0, 0 },
	{ "RING_HELLO endpoint port 0", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(HELLO_EP1_PORT, 0) }, 0, 0 },
	{ "RING_HELLO position differs from the header's", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(H(worker_rank), 2) }, 0, 0 },
	{ "RING_HELLO unknown cap", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(HB(caps), 0x8000) }, 0, 0 },
	{ "RING_HELLO state cap without its trailer", PHUB_DROP_RING_HELLO_FIELDS, B_HELLO,
	  { SET16(HB(caps), PHUB_WIRE_RING_CAP_STATE) }, 0, 0 },
	{ "RING_ACKV of no entry", PHUB_DROP_BODY_SHORT, B_ACKV,
	  { SET16(H(payload_len), 0) }, 0, HDR },
	{ "RING_ACKV of 2.5 entries", PHUB_DROP_RING_ACKV_FIELDS, B_ACKV,
	  { SET16(H(payload_len), 40) }, -8, 0 },
	{ "RING_ACKV entry flags 1", PHUB_DROP_RING_ACKV_FIELDS, B_ACKV,
	  { SET16(HDR + 16 + 6, 1) }, 0, 0 },
	{ "RING_ACKV step 30", PHUB_DROP_RING_ACKV_FIELDS, B_ACKV,
	  { SET32(HDR + 32 + 12, 30) }, 0, 0 },
	{ "RING_ACKV iteration in the header", PHUB_DROP_UNUSED_FIELD, B_ACKV,
	  { SET32(H(iteration), 1) }, 0, 0 },
	{ "RING_ACKV chunk in the header", PHUB_DROP_UNUSED_FIELD, B_ACKV,
	  { SET32(H(chunk_id), 1) }, 0, 0 },
	{ "RING_ACKV of dtype FP32", PHUB_DROP_BAD_DTYPE, B_ACKV,
	  { SET8(H(dtype), PHUB_DTYPE_FP32) }, 0, 0 },
	{ "RING_HELLO name unterminated", PHUB_DROP_JOIN_NAME_UNTERMINATED, B_HELLO,
	  { { HB(name), P_FILL_NAME, 'a' } }, 0, 0 },
	{ "ACKV of no entry", PHUB_DROP_ACKV_LENGTH, B_WORKER_ACKV,
	  { SET16(H(payload_len), 0) }, 0, HDR },
	{ "ACKV of two and a half entries", PHUB_DROP_ACKV_LENGTH, B_WORKER_ACKV,
	  { SET16(H(payload_len), 40) }, -8, 0 },
	{ "ACKV of 47 bytes", PHUB_DROP_ACKV_LENGTH, B_WORKER_ACKV,
	  { SET16(H(payload_len), 47) }, -1, 0 },
	{ "ACKV entry 2 with flag CSUM", PHUB_DROP_ACKV_ENTRY, B_WORKER_ACKV,
	  { SET16(ACKV_FLAGS(2), PHUB_WIRE_F_CSUM) }, 0, 0 },
	{ "ACKV entry 1 with flag 0x100", PHUB_DROP_ACKV_ENTRY, B_WORKER_ACKV,
	  { SET16(ACKV_FLAGS(1), 0x100 | PHUB_WIRE_F_REPLAY) }, 0, 0 },
	{ "ACKV with a chunk_id", PHUB_DROP_UNUSED_FIELD, B_WORKER_ACKV,
	  { SET32(H(chunk_id), 1) }, 0, 0 },
	{ "ACKV with an aux", PHUB_DROP_UNUSED_FIELD, B_WORKER_ACKV, { SET32(H(aux), 1) }, 0, 0 },
	{ "ACKV with an iteration", PHUB_DROP_UNUSED_FIELD, B_WORKER_ACKV,
	  { SET32(H(iteration), 1) }, 0, 0 },
	{ "ACKV with elements", PHUB_DROP_UNUSED_FIELD, B_WORKER_ACKV,
	  { SET32(H(elem_count), 4) }, 0, 0 },
	{ "ACKV with dtype FP32", PHUB_DROP_BAD_DTYPE, B_WORKER_ACKV, { SET8(H(dtype), 0) }, 0, 0 },
};
#define N_DEFECTS ((int)(sizeof(defects) / sizeof(defects[0])))

static void
apply_poke(uint8_t *buf, const struct poke *p)
{
	switch (p->op) {
	case P_NONE:
		break;
	case P_SET8:
		buf[p->off] = (uint8_t)p->value;
		break;
	case P_SET16:
		put16(buf, p->off, (uint16_t)p->value);
		break;
	case P_SET32:
		put32(buf, p->off, (uint32_t)p->value);
		break;
	case P_SET64:
		put64(buf, p->off, p->value);
		break;
	case P_XOR8:
		buf[p->off] ^= (uint8_t)p->value;
		break;
	case P_FILL_NAME:
		memset(buf + p->off, (int)p->value, PHUB_WIRE_JOB_NAME_LEN);
		break;
	}
}

START_TEST(test_packet_with_one_defect_is_dropped_for_that_reason)
{
	const struct defect *d = &defects[_i];
	struct phub_wire_msg m;
	uint8_t *exact, *buf = calloc(1, BUF_SIZE);
	size_t len;
	enum phub_drop_reason r;

	ck_assert_ptr_nonnull(buf);
	len = make_base(buf, d->base);
	apply_poke(buf, &d->poke[0]);
	apply_poke(buf, &d->poke[1]);
	len = d->len_abs != 0 ? d->len_abs : (size_t)((ptrdiff_t)len + d->len_delta);
	/* An exact-size copy: a read past the datagram is a sanitizer error, not luck. */
	exact = malloc(len);
	ck_assert_ptr_nonnull(exact);
	memcpy(exact, buf, len);
	r = phub_wire_parse(exact, len, &m);
	ck_assert_msg(r == d->reason, "%s: got %s, want %s", d->what, phub_drop_reason_name(r),
			phub_drop_reason_name(d->reason));
	/* The PUSH parser of the data path takes none of them either. */
	ck_assert_msg(!phub_wire_parse_push(exact, len, &m), "%s: taken as a plain PUSH",
			d->what);
	free(exact);
	free(buf);
}
END_TEST

/* Every field of two parses, the payload's address and the fields of extensions included. */
static void
assert_parse_eq(const struct phub_wire_msg *a, const struct phub_wire_msg *b)
{
	assert_msg_eq(a, b);
	ck_assert_uint_eq(a->hdr_len, b->hdr_len);
	ck_assert_uint_eq(a->csum, b->csum);
	ck_assert_ptr_eq(a->payload, b->payload);
	ck_assert(a->hyper_lr == b->hyper_lr && a->hyper_weight_decay == b->hyper_weight_decay);
}

/*
 * phub_wire_parse_push() against phub_wire_parse() on PUSHes with random damage to the header
 * and length: it takes a datagram only if the general parser does, with the same fields, and
 * takes every plain PUSH (no flag but LAST, the fixed header) the general parser takes.
 */
START_TEST(test_plain_push_parser_agrees_with_the_general_one)
{
	static const uint8_t values[] = { 0, 1, 2, 3, 4, 0x10, 0x38, 0x40, 0x7f, 0x80, 0xff };
	static uint8_t base[BUF_SIZE], buf[BUF_SIZE];
	unsigned int seed = 23, taken = 0, plain = 0;
	size_t base_len = make_push(base, 16, 0);

	for (int i = 0; i < 200000; i++) {
		struct phub_wire_msg a, b;
		enum phub_drop_reason r;
		size_t len = base_len;
		bool fast;
		int n = 1 + rand_r(&seed) % 3;

		memcpy(buf, base, len);
		/* One in eight left whole: the plain PUSH itself, or a flag set on it. */
		if (i % 8 == 0)
			n = 0;
		if (i % 16 == 8)
			buf[H(flags)] = (uint8_t)(rand_r(&seed) & 0x3f);
		for (int k = 0; k < n; k++) {
			size_t off = (size_t)rand_r(&seed) % HDR;

			buf[off] = (rand_r(&seed) & 1) ? values[rand_r(&seed) % sizeof(values)] :
				(uint8_t)rand_r(&seed);
		}
		if (i % 5 == 4)
			len = (size_t)((ptrdiff_t)len + rand_r(&seed) % 9 - 4);
		r = phub_wire_parse(buf, len, &a);
		fast = phub_wire_parse_push(buf, len, &b);
		if (fast) {
			ck_assert_msg(r == PHUB_DROP_OK, "case %d: taken, the parser says %s", i,
					phub_drop_reason_name(r));
			assert_parse_eq(&a, &b);
			taken++;
		}
		if (r == PHUB_DROP_OK && a.opcode == PHUB_WIRE_OP_PUSH &&
		    (a.flags & ~PHUB_WIRE_F_LAST) == 0 && a.hdr_len == HDR) {
			ck_assert_msg(fast, "case %d: a plain PUSH left to the general parser", i);
			plain++;
		}
	}
	/* Both sides were exercised: many taken, and the damage reached past the cheap checks. */
	ck_assert_uint_gt(taken, 20000);
	ck_assert_uint_eq(taken, plain);
}
END_TEST

START_TEST(test_every_wire_reason_has_a_defect_case)
{
	for (int r = PHUB_DROP_OK + 1; r < PHUB_DROP_FIRST_SESSION; r++) {
		bool found = false;

		for (int i = 0; i < N_DEFECTS; i++)
			found |= defects[i].reason == (enum phub_drop_reason)r;
		ck_assert_msg(found, "no defect case for %s", phub_drop_reason_name(r));
	}
}
END_TEST

START_TEST(test_every_defect_case_starts_from_a_valid_packet)
{
	/* The bases of the defect cases parse: the defect, not the base, causes the drop. */
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m;

	ck_assert_int_eq(phub_wire_parse(buf, make_ack(buf), &m), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_parse(buf, make_push(buf, 16, 0), &m), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_parse(buf, make_push(buf, 16, PHUB_WIRE_F_CSUM), &m),
			PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_parse(buf, make_join(buf), &m), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_parse(buf, make_join_ack(buf), &m), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_parse(buf, make_error(buf), &m), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_parse(buf, make_leave(buf), &m), PHUB_DROP_OK);
}
END_TEST

/* ---- the HYPER extension ---- */

START_TEST(test_push_with_hyper_round_trips_and_bad_values_are_refused)
{
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m, back;
	float payload[16] = { 1.5f };
	int len;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_PUSH);
	m.flags |= PHUB_WIRE_F_HYPER | PHUB_WIRE_F_CSUM;
	m.dtype = PHUB_DTYPE_FP32;
	m.job_id = 1;
	m.session_token = 2;
	m.chunk_id = 3;
	m.iteration = 4;
	m.elem_count = 16;
	m.payload = (const uint8_t *)payload;
	m.payload_len = sizeof(payload);
	m.hyper_lr = 0.1f;
	m.hyper_weight_decay = 1e-4f;
	len = phub_wire_encode(buf, sizeof(buf), &m);
	ck_assert_int_eq(len, PHUB_WIRE_HDR_LEN_HYPER + (int)sizeof(payload));
	ck_assert_int_eq(buf[5], PHUB_WIRE_HDR_LEN_HYPER);
	/* Big-endian float bits at 56: 0.1f is 0x3dcccccd. */
	ck_assert_int_eq(buf[56], 0x3d);
	ck_assert_int_eq(buf[59], 0xcd);
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &back), PHUB_DROP_OK);
	ck_assert(back.hyper_lr == 0.1f && back.hyper_weight_decay == 1e-4f);
	ck_assert_int_eq(back.hdr_len, PHUB_WIRE_HDR_LEN_HYPER);
	ck_assert(memcmp(back.payload, payload, sizeof(payload)) == 0);
	/* The checksum covers the extension. */
	buf[61] ^= 1;
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &back), PHUB_DROP_BAD_CSUM);

	/* Without CSUM, values the kernels cannot take are refused by encoder and parser. */
	m.flags &= (uint8_t)~PHUB_WIRE_F_CSUM;
	len = phub_wire_encode(buf, sizeof(buf), &m);
	ck_assert_int_gt(len, 0);
	buf[56] = 0xbf;		/* lr -0.8: negative */
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &back), PHUB_DROP_BAD_HYPER);
	buf[56] = 0x7f;
	buf[57] = 0xc0;		/* NaN */
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &back), PHUB_DROP_BAD_HYPER);
	m.hyper_lr = -1.0f;
	ck_assert_int_eq(phub_wire_encode(buf, sizeof(buf), &m), -EINVAL);
	m.hyper_lr = 0.1f;
	m.hyper_weight_decay = INFINITY;
	ck_assert_int_eq(phub_wire_msg_check(&m), PHUB_DROP_BAD_HYPER);
	/* Only PUSH carries it. */
	m.hyper_weight_decay = 0;
	m.opcode = PHUB_WIRE_OP_MODEL;
	ck_assert_int_eq(phub_wire_msg_check(&m), PHUB_DROP_BAD_HYPER);
	/* Without the flag the header stays 56 bytes and the values read back as 0. */
	m.opcode = PHUB_WIRE_OP_PUSH;
	m.flags &= (uint8_t)~PHUB_WIRE_F_HYPER;
	len = phub_wire_encode(buf, sizeof(buf), &m);
	ck_assert_int_eq(len, PHUB_WIRE_HDR_LEN + (int)sizeof(payload));
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &back), PHUB_DROP_OK);
	ck_assert(back.hyper_lr == 0 && back.hyper_weight_decay == 0);
	ck_assert_int_eq(phub_wire_hdr_encode(buf, PHUB_WIRE_HDR_LEN, &m, 0), PHUB_WIRE_HDR_LEN);
	m.flags |= PHUB_WIRE_F_HYPER;
	ck_assert_int_eq(phub_wire_hdr_encode(buf, PHUB_WIRE_HDR_LEN, &m, 0), -ENOSPC);
	ck_assert_int_eq(phub_wire_hdr_encode(buf, PHUB_WIRE_HDR_LEN_HYPER, &m, 0),
			PHUB_WIRE_HDR_LEN_HYPER);
}
END_TEST

/* ---- the AUTH extension ---- */

START_TEST(test_auth_extension_lengths_round_trip_and_exclude_csum)
{
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m, back;
	float payload[16] = { 2.5f };
	int len;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_PUSH);
	m.flags |= PHUB_WIRE_F_AUTH;
	m.dtype = PHUB_DTYPE_FP32;
	m.job_id = 1;
	m.session_token = 2;
	m.elem_count = 16;
	m.payload = (const uint8_t *)payload;
	m.payload_len = sizeof(payload);
	len = phub_wire_encode(buf, sizeof(buf), &m);
	ck_assert_int_eq(len, PHUB_WIRE_HDR_LEN + PHUB_WIRE_AUTH_TRAILER_LEN + 64);
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &back), PHUB_DROP_OK);
	ck_assert_int_eq(back.hdr_len, PHUB_WIRE_HDR_LEN + PHUB_WIRE_AUTH_TRAILER_LEN);
	ck_assert(memcmp(back.payload, payload, sizeof(payload)) == 0);
	/* The trailer goes after HYPER's extension. */
	m.flags |= PHUB_WIRE_F_HYPER;
	m.hyper_lr = 0.5f;
	len = phub_wire_encode(buf, sizeof(buf), &m);
	ck_assert_int_eq(len, PHUB_WIRE_HDR_LEN_HYPER + PHUB_WIRE_AUTH_TRAILER_LEN + 64);
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &back), PHUB_DROP_OK);
	ck_assert(back.hyper_lr == 0.5f);
	/* A header of HYPER's length cannot hold the trailer too. */
	buf[5] = PHUB_WIRE_HDR_LEN_HYPER + 16;
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len - 8, &back), PHUB_DROP_BAD_AUTH_EXT);
	/* The MAC replaces the CRC: both on one datagram is refused. */
	m.flags |= PHUB_WIRE_F_CSUM;
	ck_assert_int_eq(phub_wire_msg_check(&m), PHUB_DROP_BAD_AUTH_EXT);
	ck_assert_int_eq(phub_wire_encode(buf, sizeof(buf), &m), -EINVAL);
	/* Handshake opcodes carry the ephemeral key as well. */
	ck_assert_uint_eq(phub_wire_auth_ext_len(PHUB_WIRE_OP_JOIN),
			PHUB_WIRE_AUTH_PK_LEN + PHUB_WIRE_AUTH_TRAILER_LEN);
	ck_assert_uint_eq(phub_wire_auth_ext_len(PHUB_WIRE_OP_RING_HELLO_ACK),
			PHUB_WIRE_AUTH_PK_LEN + PHUB_WIRE_AUTH_TRAILER_LEN);
	ck_assert_uint_eq(phub_wire_auth_ext_len(PHUB_WIRE_OP_PING), PHUB_WIRE_AUTH_TRAILER_LEN);
	/* An authenticated session's segments leave room for the trailer. */
	ck_assert_int_eq(phub_wire_max_elems_room(1500, PHUB_DTYPE_FP32,
			PHUB_WIRE_AUTH_TRAILER_LEN), 336);
	ck_assert_int_eq(phub_wire_max_elems_room(1500, PHUB_DTYPE_FP32, 0), 352);
}
END_TEST

/* ---- truncation ---- */

START_TEST(test_truncation_at_every_length_is_a_length_drop)
{
	static uint8_t buf[BUF_SIZE];
	size_t len = make_opcode(buf, all_opcodes[_i], PHUB_WIRE_F_CSUM);

	for (size_t k = 0; k < len; k++) {
		/* malloc(k) exactly: AddressSanitizer catches a read at or past byte k. */
		uint8_t *cut = malloc(k == 0 ? 1 : k);
		struct phub_wire_msg m;
		enum phub_drop_reason r;

		ck_assert_ptr_nonnull(cut);
		memcpy(cut, buf, k);
		r = phub_wire_parse(cut, k, &m);
		ck_assert_msg(r == PHUB_DROP_TOO_SHORT || r == PHUB_DROP_BAD_PAYLOAD_LEN,
				"%s cut at %zu: %s", phub_wire_opcode_name(all_opcodes[_i]), k,
				phub_drop_reason_name(r));
		free(cut);
	}
}
END_TEST

START_TEST(test_body_parsers_refuse_every_truncated_body)
{
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_join_seg js;
	struct phub_wire_join_ack_seg as;
	struct phub_wire_error_msg es;
	size_t jl = make_join(buf) - HDR;
	uint8_t *join = malloc(jl);
	size_t al, el;
	uint8_t *ack, *err;

	memcpy(join, buf + HDR, jl);
	al = make_join_ack(buf) - HDR;
	ack = malloc(al);
	memcpy(ack, buf + HDR, al);
	el = make_error(buf) - HDR;
	err = malloc(el);
	memcpy(err, buf + HDR, el);
	ck_assert_int_eq(phub_wire_join_parse(join, jl, &js), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_join_ack_parse(ack, al, &as), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_error_parse(err, el, &es), PHUB_DROP_OK);
	/* Each cut keeps the pointer but shortens the length: the parser must trust the length. */
	for (size_t k = 0; k < jl; k++)
		ck_assert_int_ne(phub_wire_join_parse(join, k, &js), PHUB_DROP_OK);
	for (size_t k = 0; k < al; k++)
		ck_assert_int_ne(phub_wire_join_ack_parse(ack, k, &as), PHUB_DROP_OK);
	for (size_t k = 0; k < el; k++)
		ck_assert_int_ne(phub_wire_error_parse(err, k, &es), PHUB_DROP_OK);
	free(join);
	free(ack);
	free(err);
}
END_TEST

/* RING_ACKV: its entries come back as written; any cut of the body, and 65 entries, refused. */
START_TEST(test_ring_ackv_round_trips_and_refuses_every_cut)
{
	static uint8_t buf[BUF_SIZE], big[(PHUB_WIRE_RING_ACKV_MAX + 1) * 16];
	struct phub_wire_ring_ack e;
	struct phub_wire_msg m;
	size_t len = make_ackv(buf);
	unsigned int count;

	ck_assert_int_eq(phub_wire_parse(buf, len, &m), PHUB_DROP_OK);
	ck_assert_uint_eq(m.opcode, PHUB_WIRE_OP_RING_ACKV);
	ck_assert_uint_eq(m.worker_rank, 1);
	ck_assert_int_eq(phub_wire_ring_ackv_parse(m.payload, m.payload_len, &count),
			PHUB_DROP_OK);
	ck_assert_uint_eq(count, 3);
	for (unsigned int i = 0; i < count; i++) {
		phub_wire_ring_ackv_get(m.payload, i, &e);
		ck_assert_uint_eq(e.chunk_id, 40 + i);
		ck_assert_uint_eq(e.seg_index, 7 * i);
		ck_assert_uint_eq(e.iteration, 1000 + i);
		ck_assert_uint_eq(e.step, i);
	}
	for (size_t k = 0; k < m.payload_len; k++)
		if (k % 16 != 0 || k == 0)
			ck_assert_int_ne(phub_wire_ring_ackv_parse(m.payload, k, &count),
					PHUB_DROP_OK);
	for (unsigned int i = 0; i <= PHUB_WIRE_RING_ACKV_MAX; i++)
		phub_wire_ring_ackv_put(big, i, &(struct phub_wire_ring_ack){ .chunk_id = i });
	ck_assert_int_eq(phub_wire_ring_ackv_parse(big, sizeof(big) - 16, &count), PHUB_DROP_OK);
	ck_assert_uint_eq(count, PHUB_WIRE_RING_ACKV_MAX);
	ck_assert_int_eq(phub_wire_ring_ackv_parse(big, sizeof(big), &count),
			PHUB_DROP_RING_ACKV_FIELDS);
	ck_assert_uint_eq(count, 0);
}
END_TEST

START_TEST(test_ring_hello_round_trips_and_refuses_every_cut)
{
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_ring_hello h;
	struct phub_wire_msg m;
	size_t len = make_hello(buf, PHUB_WIRE_OP_RING_HELLO_ACK);
	uint8_t *body;

	ck_assert_int_eq(phub_wire_parse(buf, len, &m), PHUB_DROP_OK);
	ck_assert_uint_eq(m.opcode, PHUB_WIRE_OP_RING_HELLO_ACK);
	ck_assert_uint_eq(m.worker_rank, 1);
	ck_assert_uint_eq(m.job_id, 0x0305);
	ck_assert_int_eq(phub_wire_ring_hello_parse(m.payload, m.payload_len, &h), PHUB_DROP_OK);
	ck_assert_str_eq(h.name, "spanning");
	ck_assert(h.nonce == 0x9f3c61d2a7e4b508ull);
	ck_assert(h.token == 0x1122334455667788ull);
	ck_assert_uint_eq(h.racks, 3);
	ck_assert_uint_eq(h.pos, 1);
	ck_assert_uint_eq(h.endpoint_count, 2);
	ck_assert_uint_eq(h.endpoints[1].ipv4, 0x0a1e0002);
	ck_assert_uint_eq(h.endpoints[1].udp_port, 47002);
	ck_assert_uint_eq(h.caps, PHUB_WIRE_RING_CAP_ALL);
	body = malloc(m.payload_len);
	ck_assert_ptr_nonnull(body);
	memcpy(body, m.payload, m.payload_len);
	for (size_t k = 0; k < m.payload_len; k++)
		ck_assert_int_ne(phub_wire_ring_hello_parse(body, k, &h), PHUB_DROP_OK);
	free(body);
	/* The writer refuses what a receiver would: a token of 0, another opcode. */
	ck_assert_int_eq(phub_wire_ring_hello_parse(m.payload, m.payload_len, &h), PHUB_DROP_OK);
	h.token = 0;
	ck_assert_int_eq(phub_wire_ring_hello_write(buf, BUF_SIZE, PHUB_WIRE_OP_RING_HELLO, &h),
			-EINVAL);
	h.token = 1;
	ck_assert_int_eq(phub_wire_ring_hello_write(buf, BUF_SIZE, PHUB_WIRE_OP_JOIN, &h), -EINVAL);
	h.caps = 0x8000;
	ck_assert_int_eq(phub_wire_ring_hello_write(buf, BUF_SIZE, PHUB_WIRE_OP_RING_HELLO, &h),
			-EINVAL);
	h.caps = 0;
	ck_assert_int_eq(phub_wire_ring_hello_write(buf, HDR + 88, PHUB_WIRE_OP_RING_HELLO, &h),
			-ENOSPC);
	ck_assert(!h.state);
}
END_TEST

/* A checkpointing PBox's HELLO: the flag and its 12-byte trailer after the endpoints. */
START_TEST(test_ring_hello_state_trailer_round_trips)
{
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_ring_hello h, back;
	struct phub_wire_msg m;
	size_t len = make_hello(buf, PHUB_WIRE_OP_RING_HELLO);
	int n;

	ck_assert_int_eq(phub_wire_parse(buf, len, &m), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_ring_hello_parse(m.payload, m.payload_len, &h), PHUB_DROP_OK);
	h.job_id = m.job_id;
	h.state = true;
	h.generation = 0x01020304u;
	h.base_iteration = 0xfffffffeu;
	h.newest_ckpt = PHUB_WIRE_RING_HELLO_NONE;
	n = phub_wire_ring_hello_write(buf, BUF_SIZE, PHUB_WIRE_OP_RING_HELLO, &h);
	ck_assert_int_eq(n, (int)len + PHUB_WIRE_RING_HELLO_STATE_BYTES);
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)n, &m), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_ring_hello_parse(m.payload, m.payload_len, &back), PHUB_DROP_OK);
	ck_assert(back.state);
	ck_assert_uint_eq(back.generation, 0x01020304u);
	ck_assert_uint_eq(back.base_iteration, 0xfffffffeu);
	ck_assert_uint_eq(back.newest_ckpt, PHUB_WIRE_RING_HELLO_NONE);
	ck_assert_uint_eq(back.endpoints[1].udp_port, 47002);
	/* The trailer without its cap is trailing bytes. */
	ck_assert_uint_eq(back.caps, h.caps);
	ck_assert_uint_eq(buf[HDR + offsetof(struct phub_wire_ring_hello_body, caps) + 1] &
			PHUB_WIRE_RING_CAP_STATE, PHUB_WIRE_RING_CAP_STATE);
	buf[HDR + offsetof(struct phub_wire_ring_hello_body, caps) + 1] &=
		(uint8_t)~PHUB_WIRE_RING_CAP_STATE;
	ck_assert_int_eq(phub_wire_ring_hello_parse(buf + HDR, m.payload_len, &back),
			PHUB_DROP_RING_HELLO_FIELDS);
}
END_TEST

/* ---- CRC32C ---- */

/* ACKV entries read back as written, big-endian at their offsets; the MTU bounds the count. */
START_TEST(test_ackv_entries_round_trip_and_fit_the_mtu)
{
	static uint8_t buf[BUF_SIZE];
	const struct phub_wire_ackv_entry_wire *w;
	struct phub_wire_ackv_entry e;
	struct phub_wire_msg m;
	unsigned int n;
	size_t len = make_worker_ackv(buf);

	ck_assert_uint_eq(len, HDR + 3 * 16);
	ck_assert_int_eq(phub_wire_parse(buf, len, &m), PHUB_DROP_OK);
	ck_assert_uint_eq(m.opcode, PHUB_WIRE_OP_ACKV);
	ck_assert_uint_eq(m.dtype, PHUB_WIRE_DTYPE_NONE);
	ck_assert_int_eq(phub_wire_ackv_parse(m.payload, m.payload_len, &n), PHUB_DROP_OK);
	ck_assert_uint_eq(n, 3);
	for (unsigned int i = 0; i < n; i++) {
		phub_wire_ackv_get(m.payload, i, &e);
		ck_assert_uint_eq(e.chunk_id, ackv_entries[i].chunk_id);
		ck_assert_uint_eq(e.seg_index, ackv_entries[i].seg_index);
		ck_assert_uint_eq(e.flags, ackv_entries[i].flags);
		ck_assert_uint_eq(e.iteration, ackv_entries[i].iteration);
		ck_assert_uint_eq(e.aux, ackv_entries[i].aux);
	}
	/* Big-endian on the wire, at the offsets of the diagram. */
	w = (const void *)(buf + HDR + 16);
	ck_assert_uint_eq(buf[HDR + 16], 0x01);
	ck_assert_uint_eq(buf[HDR + 16 + 3], 0x04);
	ck_assert_uint_eq(buf[HDR + 16 + 12], 0xa0);
	ck_assert_uint_eq(be32toh(w->iteration), 0xfffffff0u);
	ck_assert_uint_eq(be16toh(w->seg_index), 0xfffe);
	/* 1416 / 16 at 1500, 8916 / 16 at 9000; an ACKV of that many fits the MTU. */
	ck_assert_uint_eq(phub_wire_ackv_max_entries(1500), 88);
	ck_assert_uint_eq(phub_wire_ackv_max_entries(9000), 557);
	for (unsigned int mtu = PHUB_WIRE_MIN_MTU; mtu <= 9216; mtu += 7)
		ck_assert_uint_le(PHUB_WIRE_IPV4_UDP_OVERHEAD + HDR +
				phub_wire_ackv_max_entries(mtu) * 16, mtu);
}
END_TEST

/* The JOIN flag ACKV is a known flag; the next bit is not. */
START_TEST(test_join_flag_ackv_is_taken_and_the_next_bit_refused)
{
	static uint8_t buf[BUF_SIZE];
	struct phub_wire_join_params p = join_params(two_keys, 2);
	struct phub_wire_msg m;
	int len;

	p.join.join_flags = PHUB_WIRE_JOIN_F_ACKV | PHUB_WIRE_JOIN_F_CSUM;
	len = phub_wire_join_write(buf, BUF_SIZE, &p, 1500, 0);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &m), PHUB_DROP_OK);
	p.join.join_flags = PHUB_WIRE_JOIN_F_ACKV << 1;
	ck_assert_int_lt(phub_wire_join_write(buf, BUF_SIZE, &p, 1500, 0), 0);
}
END_TEST

START_TEST(test_crc32c_matches_known_vectors)
{
	static const char check[] = "123456789";
	uint8_t zeros[32], ones[32], inc[32];

	memset(zeros, 0, sizeof(zeros));
	memset(ones, 0xff, sizeof(ones));
	for (int i = 0; i < 32; i++)
		inc[i] = (uint8_t)i;
	ck_assert_uint_eq(phub_crc32c(0, check, 9), 0xe3069283u);
	ck_assert_uint_eq(phub_crc32c_sw(0, check, 9), 0xe3069283u);
	ck_assert_uint_eq(phub_crc32c_hw(0, check, 9), 0xe3069283u);
	/* RFC 3720 B.4 (iSCSI) test patterns. */
	ck_assert_uint_eq(phub_crc32c(0, zeros, 32), 0x8a9136aau);
	ck_assert_uint_eq(phub_crc32c(0, ones, 32), 0x62a8ab43u);
	ck_assert_uint_eq(phub_crc32c(0, inc, 32), 0x46dd794eu);
	ck_assert_uint_eq(phub_crc32c(0, check, 0), 0);
}
END_TEST

START_TEST(test_crc32c_software_and_sse42_agree_at_every_length_and_alignment)
{
	static uint8_t data[1100];
	uint32_t seed = 12345;

	for (size_t i = 0; i < sizeof(data); i++) {
		seed = seed * 1103515245u + 12345u;
		data[i] = (uint8_t)(seed >> 16);
	}
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len <= 1040; len++)
			ck_assert_uint_eq(phub_crc32c_sw(0x1234, data + off, len),
					phub_crc32c_hw(0x1234, data + off, len));
}
END_TEST

START_TEST(test_crc32c_chains_like_one_pass)
{
	static const char text[] = "the quick brown fox jumps over the lazy dog, twice over";
	size_t n = strlen(text);
	uint32_t whole = phub_crc32c(0, text, n);

	for (size_t cut = 0; cut <= n; cut++)
		ck_assert_uint_eq(phub_crc32c(phub_crc32c(0, text, cut), text + cut, n - cut),
				whole);
}
END_TEST

START_TEST(test_sse42_is_used_on_this_cpu_when_present)
{
	/* Not a requirement of the machine: only that the probe agrees with the compiler's. */
#if defined(__x86_64__)
	__builtin_cpu_init();
	ck_assert(phub_crc32c_hw_available() == (__builtin_cpu_supports("sse4.2") != 0));
#else
	ck_assert(!phub_crc32c_hw_available());
#endif
}
END_TEST

/* ---- split and merge ---- */

static void
join_split_merge(unsigned int mtu, int want_segs)
{
	enum { N = 500 };
	static struct phub_wire_key keys[N], got[N];
	static uint8_t dgram[16][BUF_SIZE];
	size_t len[16];
	struct phub_wire_join_params p;
	struct phub_wire_join_merge mg;
	int segs;

	for (uint32_t i = 0; i < N; i++) {
		keys[i].key_id = 1000 + i * 3;
		keys[i].elem_count = (i * 7919u) % 100000u + 1;
	}
	p = join_params(keys, N);
	p.flags = PHUB_WIRE_F_CSUM;
	segs = phub_wire_join_segments(&p, mtu);
	ck_assert_int_eq(segs, want_segs);
	for (int s = 0; s < segs; s++) {
		int l = phub_wire_join_write(dgram[s], BUF_SIZE, &p, mtu, (uint16_t)s);

		ck_assert_int_gt(l, 0);
		/* Every datagram fits the MTU with IPv4 and UDP headers. */
		ck_assert_int_le(l + 28, (int)mtu);
		len[s] = (size_t)l;
	}
	ck_assert_int_eq(phub_wire_join_write(dgram[0], BUF_SIZE, &p, mtu, (uint16_t)segs),
			-EINVAL);

	/* Taken last to first, with the middle one twice: order and repeats do not matter. */
	phub_wire_join_merge_init(&mg, got, N);
	for (int s = segs - 1; s >= 0; s--) {
		struct phub_wire_msg m;
		struct phub_wire_join_seg js;
		int again = s == segs / 2 ? 2 : 1;

		ck_assert_int_eq(phub_wire_parse(dgram[s], len[s], &m), PHUB_DROP_OK);
		ck_assert_uint_eq(m.seg_index, s);
		ck_assert_uint_eq(m.seg_count, segs);
		ck_assert_uint_eq(m.worker_rank, 1);
		ck_assert_int_eq(phub_wire_join_parse(m.payload, m.payload_len, &js), PHUB_DROP_OK);
		ck_assert_str_eq(js.join.name, "resnet50-job");
		ck_assert(js.join.hyper.momentum == 0.9f);
		for (int k = 0; k < again; k++)
			ck_assert_int_eq(phub_wire_join_merge_add(&mg, &m, &js), s == 0 ? 1 : 0);
	}
	ck_assert_uint_eq(mg.keys_filled, N);
	ck_assert_mem_eq(got, keys, sizeof(keys));
	ck_assert(mg.join.nonce == p.join.nonce);
	ck_assert_uint_eq(mg.join.optimizer, PHUB_OPT_NESTEROV);
}

START_TEST(test_join_of_500_keys_splits_and_merges_at_mtu_1500)
{
	/* (1500 - 84 - 120) / 8 = 162 keys a datagram. */
	ck_assert_int_eq(phub_wire_join_keys_per_datagram(1500), 162);
	join_split_merge(1500, 4);
}
END_TEST

START_TEST(test_join_of_500_keys_fits_one_datagram_at_mtu_9000)
{
	join_split_merge(9000, 1);
}
END_TEST

START_TEST(test_join_merge_refuses_a_contradicting_segment)
{
	enum { N = 400 };
	static struct phub_wire_key keys[N], got[N];
	static uint8_t b0[BUF_SIZE], b1[BUF_SIZE];
	struct phub_wire_join_params p;
	struct phub_wire_join_merge mg;
	struct phub_wire_msg m0, m1;
	struct phub_wire_join_seg s0, s1;
	size_t l0, l1;

	for (uint32_t i = 0; i < N; i++)
		keys[i] = (struct phub_wire_key){ i, 16 };
	p = join_params(keys, N);
	l0 = (size_t)phub_wire_join_write(b0, BUF_SIZE, &p, 1500, 0);
	p.join.hyper.lr = 0.2f;
	l1 = (size_t)phub_wire_join_write(b1, BUF_SIZE, &p, 1500, 1);
	ck_assert_int_eq(phub_wire_parse(b0, l0, &m0), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_parse(b1, l1, &m1), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_join_parse(m0.payload, m0.payload_len, &s0), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_join_parse(m1.payload, m1.payload_len, &s1), PHUB_DROP_OK);
	phub_wire_join_merge_init(&mg, got, N);
	ck_assert_int_eq(phub_wire_join_merge_add(&mg, &m0, &s0), 0);
	ck_assert_int_eq(phub_wire_join_merge_add(&mg, &m1, &s1), -EINVAL);
	ck_assert_uint_eq(mg.keys_filled, 162);
	/* Too small a key array for the layout. */
	phub_wire_join_merge_init(&mg, got, N - 1);
	ck_assert_int_eq(phub_wire_join_merge_add(&mg, &m0, &s0), -ENOSPC);
}
END_TEST

static void
join_ack_split_merge(unsigned int mtu, int want_segs)
{
	enum { N = 5000, E = 3 };
	static uint16_t map[N], got_map[N];
	static uint8_t dgram[16][BUF_SIZE];
	static const struct phub_wire_endpoint eps[E] = {
		{ 0, 7000 }, { 0xc0a80001, 7001 }, { 0xc0a80002, 7002 },
	};
	struct phub_wire_endpoint got_eps[E];
	struct phub_wire_join_ack_params p;
	struct phub_wire_join_ack_merge mg;
	size_t len[16];
	int segs;

	for (uint32_t i = 0; i < N; i++)
		map[i] = (uint16_t)((i * 7) % E);
	p = join_ack_params(map, N, eps, E);
	segs = phub_wire_join_ack_segments(&p, mtu);
	ck_assert_int_eq(segs, want_segs);
	for (int s = 0; s < segs; s++) {
		int l = phub_wire_join_ack_write(dgram[s], BUF_SIZE, &p, mtu, (uint16_t)s);

		ck_assert_int_gt(l, 0);
		ck_assert_int_le(l + 28, (int)mtu);
		len[s] = (size_t)l;
	}
	phub_wire_join_ack_merge_init(&mg, got_eps, E, got_map, N);
	for (int s = 0; s < segs; s++) {
		int idx = (s + 1) % segs;
		struct phub_wire_msg m;
		struct phub_wire_join_ack_seg as;

		ck_assert_int_eq(phub_wire_parse(dgram[idx], len[idx], &m), PHUB_DROP_OK);
		ck_assert(m.session_token == p.session_token);
		ck_assert_int_eq(phub_wire_join_ack_parse(m.payload, m.payload_len, &as),
				PHUB_DROP_OK);
		ck_assert_int_eq(phub_wire_join_ack_merge_add(&mg, &m, &as), s == segs - 1 ? 1 : 0);
		/* A repeat changes nothing. */
		ck_assert_int_eq(phub_wire_join_ack_merge_add(&mg, &m, &as), s == segs - 1 ? 1 : 0);
	}
	ck_assert_mem_eq(got_map, map, sizeof(map));
	for (int e = 0; e < E; e++) {
		ck_assert_uint_eq(got_eps[e].ipv4, eps[e].ipv4);
		ck_assert_uint_eq(got_eps[e].udp_port, eps[e].udp_port);
	}
	ck_assert_uint_eq(mg.ack.seg_elems, 352);
	ck_assert_uint_eq(mg.ack.iteration, 12);
}

START_TEST(test_join_ack_of_5000_chunks_splits_and_merges_at_mtu_1500)
{
	/* (1416 - 32 - 3 * 8) / 2 = 680 chunks a datagram: 8 datagrams. */
	join_ack_split_merge(1500, 8);
}
END_TEST

START_TEST(test_join_ack_of_5000_chunks_splits_and_merges_at_mtu_9000)
{
	join_ack_split_merge(9000, 2);
}
END_TEST

/* ---- body encoders ---- */

START_TEST(test_body_encoders_reproduce_parsed_bodies)
{
	static uint8_t buf[BUF_SIZE], out[BUF_SIZE];
	struct phub_wire_join_seg js;
	struct phub_wire_join_ack_seg as;
	struct phub_wire_error_msg es;
	size_t n;

	n = make_join(buf) - HDR;
	ck_assert_int_eq(phub_wire_join_parse(buf + HDR, n, &js), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_join_seg_encode(out, sizeof(out), &js), (int)n);
	ck_assert_mem_eq(out, buf + HDR, n);
	ck_assert_int_eq(phub_wire_join_seg_encode(out, n - 1, &js), -ENOSPC);
	n = make_join_ack(buf) - HDR;
	ck_assert_int_eq(phub_wire_join_ack_parse(buf + HDR, n, &as), PHUB_DROP_OK);
	ck_assert_uint_eq(phub_wire_join_ack_seg_chunk(&as, 2), 1);
	ck_assert_uint_eq(phub_wire_join_ack_seg_endpoint(&as, 1).udp_port, 9001);
	ck_assert_int_eq(phub_wire_join_ack_seg_encode(out, sizeof(out), &as), (int)n);
	ck_assert_mem_eq(out, buf + HDR, n);
	n = make_error(buf) - HDR;
	ck_assert_int_eq(phub_wire_error_parse(buf + HDR, n, &es), PHUB_DROP_OK);
	ck_assert_uint_eq(es.code, PHUB_WIRE_ERR_BAD_SESSION);
	ck_assert_uint_eq(es.msg_len, strlen("token does not match"));
	ck_assert_int_eq(memcmp(es.text, "token does not match", es.msg_len), 0);
	ck_assert_int_eq(phub_wire_error_encode(out, sizeof(out), &es), (int)n);
	ck_assert_mem_eq(out, buf + HDR, n);
	/* A body the parser would refuse is not written either. */
	js.join.world_size = 0;
	ck_assert_int_eq(phub_wire_join_seg_encode(out, sizeof(out), &js), -EINVAL);
}
END_TEST

START_TEST(test_error_text_is_cut_at_a_character_boundary)
{
	static uint8_t buf[BUF_SIZE];
	char text[PHUB_WIRE_ERROR_MSG_MAX + 8];
	struct phub_wire_msg m;
	struct phub_wire_error_msg es;

	/* 'a' then two-byte characters: the limit falls inside the last one that would fit. */
	text[0] = 'a';
	for (size_t i = 1; i + 1 < sizeof(text) - 1; i += 2) {
		text[i] = (char)0xc3;
		text[i + 1] = (char)0xa9;
	}
	text[sizeof(text) - 1] = '\0';
	ck_assert_int_gt(phub_wire_error_write(buf, BUF_SIZE, NULL, PHUB_WIRE_ERR_INTERNAL, text),
			0);
	ck_assert_int_eq(phub_wire_parse(buf, HDR + get16(buf, H(payload_len)), &m),
			PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_error_parse(m.payload, m.payload_len, &es), PHUB_DROP_OK);
	ck_assert_uint_eq(es.msg_len, PHUB_WIRE_ERROR_MSG_MAX - 1);
	ck_assert_uint_eq(m.aux, PHUB_WIRE_ERR_INTERNAL);
	/* Invalid UTF-8 from the caller is refused, not sent. */
	ck_assert_int_eq(phub_wire_error_write(buf, BUF_SIZE, NULL, PHUB_WIRE_ERR_INTERNAL,
			"bad \xff"), -EINVAL);
	ck_assert_int_eq(phub_wire_error_write(buf, BUF_SIZE, NULL, 0, "no such code"), -EINVAL);
}
END_TEST

/* ---- iteration numbers ---- */

START_TEST(test_iteration_comparison_survives_the_wrap)
{
	ck_assert_int_eq(phub_wire_iter_cmp(5, 3), 2);
	ck_assert_int_eq(phub_wire_iter_cmp(3, 5), -2);
	ck_assert_int_eq(phub_wire_iter_cmp(7, 7), 0);
	/* 0 comes right after 0xffffffff. */
	ck_assert_int_eq(phub_wire_iter_cmp(0, 0xffffffffu), 1);
	ck_assert_int_eq(phub_wire_iter_cmp(0xffffffffu, 0), -1);
	ck_assert(phub_wire_iter_before(0xfffffffeu, 1));
	ck_assert(!phub_wire_iter_before(1, 0xfffffffeu));
	ck_assert_int_eq(phub_wire_iter_cmp(10, 0xfffffff6u), 20);
	/* The farthest distances each way still order correctly. */
	ck_assert_int_eq(phub_wire_iter_cmp(0x7fffffffu, 0), INT32_MAX);
	ck_assert_int_eq(phub_wire_iter_cmp(0x80000001u, 0), -INT32_MAX);
	/* Exactly half the circle apart: undefined by RFC 1982, reported as INT32_MIN. */
	ck_assert_int_eq(phub_wire_iter_cmp(0x80000000u, 0), INT32_MIN);
	ck_assert_int_eq(phub_wire_iter_cmp(0, 0x80000000u), INT32_MIN);
}
END_TEST

Suite *
phub_wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc;

	PHUB_TCASE(s, "names",
		test_every_drop_reason_has_a_distinct_name,
		test_opcode_dtype_error_and_optimizer_names_follow_their_lists);

	PHUB_TCASE(s, "sizes",
		test_max_payload_subtracts_ip_udp_and_header,
		test_max_elems_rounds_down_to_sixteen,
		test_max_elems_leave_room_for_the_longest_header);

	tc = PHUB_TCASE(s, "round_trip",
		test_push_fields_and_payload_are_read_back_in_host_order,
		test_receiver_skips_a_longer_header,
		test_header_only_encode_matches_full_encode_for_shared_payload,
		test_encoder_refuses_invalid_message_and_small_buffer,
		test_body_encoders_reproduce_parsed_bodies,
		test_ackv_entries_round_trip_and_fit_the_mtu,
		test_join_flag_ackv_is_taken_and_the_next_bit_refused,
		test_error_text_is_cut_at_a_character_boundary);
	tcase_add_loop_test(tc, test_every_opcode_survives_encode_parse_encode, 0, N_OPCODES);
	tcase_add_loop_test(tc, test_every_opcode_survives_round_trip_with_checksum, 0, N_OPCODES);
	tcase_add_loop_test(tc, test_fields_an_opcode_does_not_use_must_be_zero, 0, N_OPCODES);

	tc = PHUB_TCASE(s, "drop_reasons",
		test_every_wire_reason_has_a_defect_case,
		test_every_defect_case_starts_from_a_valid_packet,
		test_plain_push_parser_agrees_with_the_general_one,
		test_push_with_hyper_round_trips_and_bad_values_are_refused,
		test_auth_extension_lengths_round_trip_and_exclude_csum);
	tcase_add_loop_test(tc, test_packet_with_one_defect_is_dropped_for_that_reason, 0,
			N_DEFECTS);

	tc = PHUB_TCASE(s, "truncation",
		test_body_parsers_refuse_every_truncated_body,
		test_ring_hello_round_trips_and_refuses_every_cut,
		test_ring_hello_state_trailer_round_trips);
	tcase_add_loop_test(tc, test_truncation_at_every_length_is_a_length_drop, 0, N_OPCODES);

	PHUB_TCASE(s, "crc32c",
		test_crc32c_matches_known_vectors,
		test_crc32c_software_and_sse42_agree_at_every_length_and_alignment,
		test_crc32c_chains_like_one_pass,
		test_sse42_is_used_on_this_cpu_when_present);

	PHUB_TCASE(s, "split_merge",
		test_join_of_500_keys_splits_and_merges_at_mtu_1500,
		test_join_of_500_keys_fits_one_datagram_at_mtu_9000,
		test_ring_ackv_round_trips_and_refuses_every_cut,
		test_join_merge_refuses_a_contradicting_segment,
		test_join_ack_of_5000_chunks_splits_and_merges_at_mtu_1500,
		test_join_ack_of_5000_chunks_splits_and_merges_at_mtu_9000);

	PHUB_TCASE(s, "iteration", test_iteration_comparison_survives_the_wrap);
	return s;
}
