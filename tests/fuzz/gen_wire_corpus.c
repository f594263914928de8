/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Writes the seed corpus of fuzz_wire (tests/fuzz/corpus/wire/) with the library's own encoders:
 * a valid datagram of every opcode, split JOIN and JOIN_ACK, bare bodies, and broken packets.
 * Not a test; run it when the wire format changes and commit the result:
 *
 *   ninja -C build && cc -std=c11 -D_GNU_SOURCE -Ilib/wire tests/fuzz/gen_wire_corpus.c \
 *       build/lib/wire/libphub_wire.a -o build/gen_wire_corpus && \
 *       build/gen_wire_corpus tests/fuzz/corpus/wire
 */

#include <endian.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phub_wire.h"

static const char *dir;
static unsigned int written;

static void
save(const char *name, const void *buf, int len)
{
	char path[4096];
	FILE *f;

	if (len < 0) {
		fprintf(stderr, "gen_wire_corpus: %s: encode failed (%d)\n", name, len);
		exit(EXIT_FAILURE);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(buf, 1, (size_t)len, f) != (size_t)len || fclose(f) != 0) {
		perror(path);
		exit(EXIT_FAILURE);
	}
	written++;
}

static void
put32(uint8_t *p, size_t off, uint32_t v)
{
	v = htobe32(v);
	memcpy(p + off, &v, sizeof(v));
}

static int
data_msg(uint8_t *buf, uint8_t opcode, uint8_t flags, uint8_t dtype, uint32_t n)
{
	static uint8_t payload[4096];
	struct phub_wire_msg m;

	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 37 + 11);
	phub_wire_msg_init(&m, opcode);
	m.flags |= flags;
	m.job_id = 3;
	m.session_token = 0x0badc0ffee0ddf00ull;
	m.worker_rank = 1;
	m.chunk_id = 17;
	m.iteration = 42;
	m.elem_offset = 352;
	m.elem_count = n;
	m.aux = 7;
	m.seg_index = 1;
	m.seg_count = 2;
	if (dtype != PHUB_WIRE_DTYPE_NONE) {
		m.dtype = dtype;
		m.payload = payload;
		m.payload_len = (uint16_t)(n * phub_wire_dtype_size(dtype));
	}
	return phub_wire_encode(buf, PHUB_WIRE_MAX_DATAGRAM, &m);
}

/* The MTU JOIN and JOIN_ACK are split for. */
#define MTU 1500u

/* Segment seg of a JOIN or JOIN_ACK of params p split at MTU: bytes or -errno. */
typedef int (*segment_write_fn)(uint8_t *buf, size_t cap, const void *p, uint16_t seg);

static int
join_write(uint8_t *buf, size_t cap, const void *p, uint16_t seg)
{
	return phub_wire_join_write(buf, cap, p, MTU, seg);
}

static int
join_ack_write(uint8_t *buf, size_t cap, const void *p, uint16_t seg)
{
	return phub_wire_join_ack_write(buf, cap, p, MTU, seg);
}

/* Each of the segs segments as <what>_split_<s>_of_<segs>.bin, and segment 0's bare body. */
static void
save_split(const char *what, int segs, segment_write_fn write_seg, const void *p)
{
	static uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	char name[64];
	int len;

	for (int s = 0; s < segs; s++) {
		snprintf(name, sizeof(name), "%s_split_%d_of_%d.bin", what, s, segs);
		save(name, buf, write_seg(buf, sizeof(buf), p, (uint16_t)s));
	}
	len = write_seg(buf, sizeof(buf), p, 0);
	snprintf(name, sizeof(name), "body_%s.bin", what);
	save(name, buf + PHUB_WIRE_HDR_LEN, len - PHUB_WIRE_HDR_LEN);
}

int
main(int argc, char **argv)
{
	static uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	static struct phub_wire_key keys[400];
	static uint16_t map[1500];
	static const struct phub_wire_endpoint eps[] = {
		{ 0, 7000 }, { 0x0a000002, 7001 }, { 0x0a000002, 7002 },
	};
	struct phub_wire_join_params jp;
	struct phub_wire_join_ack_params ap;
	struct phub_wire_msg m;
	int len;

	if (argc != 2) {
		fprintf(stderr, "usage: %s corpus-dir\n", argv[0]);
		return EXIT_FAILURE;
	}
	dir = argv[1];

	/* Data opcodes, each dtype, with and without checksum. */
	save("push_fp32.bin", buf, data_msg(buf, PHUB_WIRE_OP_PUSH, 0, PHUB_DTYPE_FP32, 16));
	save("push_fp32_csum.bin", buf, data_msg(buf, PHUB_WIRE_OP_PUSH, PHUB_WIRE_F_CSUM,
			PHUB_DTYPE_FP32, 32));
	save("push_fp16_retransmit.bin", buf, data_msg(buf, PHUB_WIRE_OP_PUSH,
			PHUB_WIRE_F_RETRANSMIT, PHUB_DTYPE_FP16, 48));
	save("push_bf16_1500.bin", buf, data_msg(buf, PHUB_WIRE_OP_PUSH, PHUB_WIRE_F_CSUM,
			PHUB_DTYPE_BF16, 704));
	save("model_fp32_replay.bin", buf, data_msg(buf, PHUB_WIRE_OP_MODEL, PHUB_WIRE_F_REPLAY,
			PHUB_DTYPE_FP32, 16));
	save("model_fp32_csum.bin", buf, data_msg(buf, PHUB_WIRE_OP_MODEL, PHUB_WIRE_F_CSUM,
			PHUB_DTYPE_FP32, 64));
	save("ring_reduce.bin", buf, data_msg(buf, PHUB_WIRE_OP_RING_REDUCE, PHUB_WIRE_F_CSUM,
			PHUB_DTYPE_FP32, 16));
	save("ring_gather.bin", buf, data_msg(buf, PHUB_WIRE_OP_RING_GATHER, 0,
			PHUB_DTYPE_FP16, 16));
	save("ack.bin", buf, data_msg(buf, PHUB_WIRE_OP_ACK, 0, PHUB_WIRE_DTYPE_NONE, 352));
	save("ack_csum.bin", buf, data_msg(buf, PHUB_WIRE_OP_ACK, PHUB_WIRE_F_CSUM,
			PHUB_WIRE_DTYPE_NONE, 352));
	save("pull.bin", buf, data_msg(buf, PHUB_WIRE_OP_PULL, PHUB_WIRE_F_RETRANSMIT,
			PHUB_WIRE_DTYPE_NONE, 1000));
	save("ring_ack.bin", buf, data_msg(buf, PHUB_WIRE_OP_RING_ACK, 0, PHUB_WIRE_DTYPE_NONE,
			16));

	/* ACKV: one entry, and several with LAST and REPLAY and a checksum. */
	{
		static const struct phub_wire_ackv_entry e[] = {
			{ .chunk_id = 17, .seg_index = 1, .flags = PHUB_WIRE_F_LAST,
			  .iteration = 42, .aux = 7 },
			{ .chunk_id = 18, .seg_index = 0, .flags = 0, .iteration = 42, .aux = 8 },
			{ .chunk_id = 0xffffffffu, .seg_index = 0xffff,
			  .flags = PHUB_WIRE_F_REPLAY | PHUB_WIRE_F_LAST, .iteration = 0xffffffffu,
			  .aux = 0xffffffffu },
		};
		static uint8_t body[sizeof(e) / sizeof(e[0]) * PHUB_WIRE_ACKV_ENTRY_LEN];

		phub_wire_ackv_put(body, e, 3);
		phub_wire_msg_init(&m, PHUB_WIRE_OP_ACKV);
		m.job_id = 3;
		m.session_token = 0x0badc0ffee0ddf00ull;
		m.worker_rank = 1;
		m.payload = body;
		m.payload_len = PHUB_WIRE_ACKV_ENTRY_LEN;
		save("ackv_one.bin", buf, phub_wire_encode(buf, PHUB_WIRE_MAX_DATAGRAM, &m));
		m.payload_len = sizeof(body);
		m.flags |= PHUB_WIRE_F_CSUM;
		save("ackv_three_csum.bin", buf, phub_wire_encode(buf, PHUB_WIRE_MAX_DATAGRAM, &m));
		save("ackv_body.bin", body, (int)sizeof(body));
	}

	/* Session opcodes. */
	phub_wire_msg_init(&m, PHUB_WIRE_OP_LEAVE);
	m.job_id = 3;
	m.session_token = 99;
	m.iteration = 1000;
	save("leave.bin", buf, phub_wire_encode(buf, sizeof(buf), &m));
	m.opcode = PHUB_WIRE_OP_LEAVE_ACK;
	m.flags |= PHUB_WIRE_F_CSUM;
	save("leave_ack_csum.bin", buf, phub_wire_encode(buf, sizeof(buf), &m));
	phub_wire_msg_init(&m, PHUB_WIRE_OP_PING);
	m.aux = 12;
	m.payload = (const uint8_t *)"probe-payload";
	m.payload_len = 13;
	save("ping_no_session.bin", buf, phub_wire_encode(buf, sizeof(buf), &m));
	m.opcode = PHUB_WIRE_OP_PONG;
	m.job_id = 3;
	m.session_token = 99;
	m.iteration = 5;
	m.flags |= PHUB_WIRE_F_CSUM;
	save("pong_csum.bin", buf, phub_wire_encode(buf, sizeof(buf), &m));

	/* JOIN: one datagram, and a 400-key layout split at MTU 1500. */
	memset(&jp, 0, sizeof(jp));
	strcpy(jp.join.name, "bert-large");
	jp.join.nonce = 0x0123456789abcdefull;
	jp.join.rank = 2;
	jp.join.world_size = 8;
	jp.join.dtype = PHUB_DTYPE_BF16;
	jp.join.optimizer = PHUB_OPT_ADAMW;
	jp.join.join_flags = PHUB_WIRE_JOIN_F_CSUM;
	jp.join.hyper = (struct phub_wire_hyper){ 1e-3f, 0.0f, 0.01f, 0.9f, 0.999f, 1e-8f };
	for (uint32_t i = 0; i < 400; i++)
		keys[i] = (struct phub_wire_key){ i, 1024 + i * 16 };
	jp.keys = keys;
	jp.key_count = 3;
	save("join_small.bin", buf, join_write(buf, sizeof(buf), &jp, 0));
	jp.key_count = 400;
	jp.flags = PHUB_WIRE_F_CSUM;
	save_split("join", phub_wire_join_segments(&jp, MTU), join_write, &jp);

	/* JOIN_ACK: one datagram, and a 1500-chunk map split at MTU 1500. */
	for (uint32_t i = 0; i < 1500; i++)
		map[i] = (uint16_t)(i % 3);
	ap = (struct phub_wire_join_ack_params){
		.ack = { 3, 0, 32768, 352 }, .session_token = 0x0badc0ffee0ddf00ull, .rank = 2,
		.endpoints = eps, .endpoint_count = 3, .chunk_endpoints = map, .total_chunks = 5,
	};
	save("join_ack_small.bin", buf, join_ack_write(buf, sizeof(buf), &ap, 0));
	ap.total_chunks = 1500;
	ap.flags = PHUB_WIRE_F_CSUM;
	save_split("join_ack", phub_wire_join_ack_segments(&ap, MTU), join_ack_write, &ap);

	/* ERROR, and its bare body. */
	phub_wire_msg_init(&m, PHUB_WIRE_OP_PUSH);
	m.job_id = 3;
	m.session_token = 99;
	m.chunk_id = 4;
	m.iteration = 9;
	len = phub_wire_error_write(buf, sizeof(buf), &m, PHUB_WIRE_ERR_BAD_SESSION,
			"session token unknown \xe2\x80\x94 join again");
	save("error.bin", buf, len);
	save("body_error.bin", buf + PHUB_WIRE_HDR_LEN, len - PHUB_WIRE_HDR_LEN);
	save("error_join_no_session.bin", buf, phub_wire_error_write(buf, sizeof(buf), NULL,
			PHUB_WIRE_ERR_BAD_NONCE, "nonce does not match the job's"));

	/* RING_HELLO and RING_HELLO_ACK, and the bare body. */
	{
		struct phub_wire_ring_hello h;

		memset(&h, 0, sizeof(h));
		h.job_id = 0x0102;
		snprintf(h.name, sizeof(h.name), "%s", "spanning");
		h.nonce = 0x9f3c61d2a7e4b508ull;
		h.token = 0x5a5a0102a5a50304ull;
		h.racks = 3;
		h.pos = 2;
		h.endpoint_count = 2;
		h.caps = PHUB_WIRE_RING_CAP_ALL;
		h.endpoints[0] = (struct phub_wire_endpoint){ .ipv4 = 0x0a1e0003, .udp_port = 47001 };
		h.endpoints[1] = (struct phub_wire_endpoint){ .ipv4 = 0x0a1e0003, .udp_port = 47002 };
		len = phub_wire_ring_hello_write(buf, sizeof(buf), PHUB_WIRE_OP_RING_HELLO, &h);
		save("ring_hello.bin", buf, len);
		save("body_ring_hello.bin", buf + PHUB_WIRE_HDR_LEN, len - PHUB_WIRE_HDR_LEN);
		save("ring_hello_ack.bin", buf, phub_wire_ring_hello_write(buf, sizeof(buf),
				PHUB_WIRE_OP_RING_HELLO_ACK, &h));
		/*
		 * An authenticated ring's HELLO: cap AUTH, flag AUTH and the handshake extension
		 * (key, number, tag; the parser checks its place, lib/control its MAC).
		 */
		h.caps |= PHUB_WIRE_RING_CAP_AUTH;
		len = phub_wire_ring_hello_write(buf, sizeof(buf), PHUB_WIRE_OP_RING_HELLO, &h);
		memmove(buf + PHUB_WIRE_HDR_LEN + 56, buf + PHUB_WIRE_HDR_LEN,
				(size_t)len - PHUB_WIRE_HDR_LEN);
		for (unsigned int i = 0; i < 56; i++)
			buf[PHUB_WIRE_HDR_LEN + i] = (uint8_t)(0x40 + i);
		buf[offsetof(struct phub_wire_hdr, flags)] |= PHUB_WIRE_F_AUTH;
		buf[offsetof(struct phub_wire_hdr, hdr_len)] = PHUB_WIRE_HDR_LEN + 56;
		save("ring_hello_auth.bin", buf, len + 56);
	}

	/* RING_ACKV of five entries, and the bare body. */
	{
		uint8_t body[5 * sizeof(struct phub_wire_ring_ack_entry)];

		for (unsigned int i = 0; i < 5; i++)
			phub_wire_ring_ackv_put(body, i, &(struct phub_wire_ring_ack){
					.chunk_id = 3 * i, .seg_index = (uint16_t)i,
					.iteration = 0xfffffffeu + i, .step = i });
		phub_wire_msg_init(&m, PHUB_WIRE_OP_RING_ACKV);
		m.job_id = 0x0102;
		m.session_token = 0x5a5a0102a5a50304ull;
		m.worker_rank = 1;
		m.payload = body;
		m.payload_len = sizeof(body);
		m.flags |= PHUB_WIRE_F_CSUM;
		save("ring_ackv.bin", buf, phub_wire_encode(buf, sizeof(buf), &m));
		save("body_ring_ackv.bin", body, sizeof(body));
	}

	/* A PUSH from a later version with an 8-byte header extension. */
	len = data_msg(buf + 8, PHUB_WIRE_OP_PUSH, 0, PHUB_DTYPE_FP32, 16);
	memmove(buf, buf + 8, PHUB_WIRE_HDR_LEN);
	memset(buf + PHUB_WIRE_HDR_LEN, 0xee, 8);
	buf[offsetof(struct phub_wire_hdr, hdr_len)] = PHUB_WIRE_HDR_LEN + 8;
	save("push_hdr_ext.bin", buf, len + 8);

	/* PUSHes with the HYPER extension (this iteration's lr 0.1 and weight decay 1e-4). */
	len = data_msg(buf, PHUB_WIRE_OP_PUSH, PHUB_WIRE_F_HYPER, PHUB_DTYPE_FP32, 16);
	{
		static const uint8_t ext[8] = { 0x3d, 0xcc, 0xcc, 0xcd, 0x38, 0xd1, 0xb7, 0x17 };

		memcpy(buf + PHUB_WIRE_HDR_LEN, ext, sizeof(ext));
	}
	save("push_hyper.bin", buf, len);
	save("push_hyper_csum.bin", buf, data_msg(buf, PHUB_WIRE_OP_PUSH,
			PHUB_WIRE_F_HYPER | PHUB_WIRE_F_CSUM, PHUB_DTYPE_BF16, 32));

	/* Broken packets, one defect each. */
	len = data_msg(buf, PHUB_WIRE_OP_PUSH, PHUB_WIRE_F_CSUM, PHUB_DTYPE_FP32, 16);
	buf[PHUB_WIRE_HDR_LEN + 3] ^= 0x40;
	save("bad_csum.bin", buf, len);
	len = data_msg(buf, PHUB_WIRE_OP_PUSH, 0, PHUB_DTYPE_FP32, 16);
	save("truncated_push.bin", buf, len - 5);
	save("truncated_header.bin", buf, 30);
	buf[0] = 'G';
	save("bad_magic.bin", buf, len);
	len = data_msg(buf, PHUB_WIRE_OP_ACK, 0, PHUB_WIRE_DTYPE_NONE, 16);
	buf[offsetof(struct phub_wire_hdr, opcode)] = 0x4a;
	save("reserved_opcode.bin", buf, len);
	len = data_msg(buf, PHUB_WIRE_OP_ACK, 0, PHUB_WIRE_DTYPE_NONE, 16);
	put32(buf, offsetof(struct phub_wire_hdr, elem_offset), 0xfffffff8u);
	save("elem_range.bin", buf, len);
	len = data_msg(buf, PHUB_WIRE_OP_PUSH, 0, PHUB_DTYPE_FP32, 16);
	put32(buf, offsetof(struct phub_wire_hdr, elem_count), 15);
	save("elem_count_mismatch.bin", buf, len);
	jp.key_count = 2;
	jp.flags = 0;
	len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
	memset(buf + PHUB_WIRE_HDR_LEN, 'x', PHUB_WIRE_JOB_NAME_LEN);
	save("join_name_unterminated.bin", buf, len);

	printf("gen_wire_corpus: %u files in %s\n", written, dir);
	return EXIT_SUCCESS;
}
