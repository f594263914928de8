/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The PHub UDP chunk protocol: the only definition in the tree of what goes on the wire (header,
 * opcodes, bodies, drop reasons), with encoders, the validator and CRC32C. No DPDK in here.
 */

#ifndef PHUB_WIRE_H
#define PHUB_WIRE_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "phub_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Byte order.
 *
 * Every multi-byte field of the header and of the control bodies is big-endian (network order),
 * like every other protocol a packet capture shows next to ours. Payload ELEMENTS (PUSH, MODEL,
 * RING_REDUCE, RING_GATHER) are little-endian IEEE 754: every host we serve (x86-64, aarch64 in
 * little-endian mode) stores floats that way, so the PBox adds a datagram straight from the NIC
 * buffer with SIMD and the worker sends its gradient memory as is, with no per-element swap on
 * the hot path. A big-endian host would convert elements when it writes and reads them.
 *
 * The phub_be*_t types only document that a field holds big-endian bytes; read and write them
 * through phub_wire_hdr_encode()/phub_wire_parse() or the load/store helpers of wire.c.
 */
typedef uint16_t phub_be16_t;
typedef uint32_t phub_be32_t;
typedef uint64_t phub_be64_t;

/* Named limits of version 1. */
enum {
	PHUB_WIRE_MAGIC = 0x5048,	/* "PH" */
	PHUB_WIRE_VERSION = 1,
	PHUB_WIRE_HDR_LEN = 56,		/* bytes of the version 1 header */
	PHUB_WIRE_HDR_ALIGN = 8,	/* hdr_len is a multiple: payload stays 8-byte aligned */
	PHUB_WIRE_IPV4_UDP_OVERHEAD = 28, /* IPv4 header without options + UDP header */
	PHUB_WIRE_MAX_DATAGRAM = 65507,	/* largest UDP payload over IPv4 */
	PHUB_WIRE_MIN_MTU = 576,	/* every IPv4 link carries this (RFC 791) */
	PHUB_WIRE_ELEM_ALIGN = 16,	/* elements per segment are a multiple of this */
	PHUB_WIRE_JOB_NAME_LEN = 64,	/* JOIN name field, NUL padded */
	PHUB_WIRE_ERROR_MSG_MAX = 512,	/* bytes of text in one ERROR */
};

/*
 * The fixed header, 56 bytes, at the start of every UDP payload.
 *
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +-------------------------------+---------------+---------------+
 * |         magic 0x5048          |  version (1)  |    opcode     |  0
 * +---------------+---------------+---------------+---------------+
 * |     flags     |    hdr_len    |     dtype     |   priority    |  4
 * +---------------+---------------+---------------+---------------+
 * |                            job_id                             |  8
 * +-------------------------------+-------------------------------+
 * |          worker_rank          |           seg_index           | 12
 * +-------------------------------+-------------------------------+
 * |           seg_count           |          payload_len          | 16
 * +-------------------------------+-------------------------------+
 * |                      reserved (sent as 0)                     | 20
 * +---------------------------------------------------------------+
 * |                                                               | 24
 * +                         session_token                         +
 * |                                                               | 28
 * +---------------------------------------------------------------+
 * |                           chunk_id                            | 32
 * +---------------------------------------------------------------+
 * |                           iteration                           | 36
 * +---------------------------------------------------------------+
 * |                          elem_offset                          | 40
 * +---------------------------------------------------------------+
 * |                          elem_count                           | 44
 * +---------------------------------------------------------------+
 * |                              aux                              | 48
 * +---------------------------------------------------------------+
 * |                             csum                              | 52
 * +---------------------------------------------------------------+
 * |            header extension (hdr_len - 56 bytes)              | 56
 * +---------------------------------------------------------------+
 * |                 payload (payload_len bytes)                   | hdr_len
 * +---------------------------------------------------------------+
 *
 * The reserved word keeps every field naturally aligned (the token on 8 bytes) within 56 bytes;
 * version 1 sends it as 0 and rejects anything else, so a later version may give it a meaning.
 * A receiver accepts hdr_len >= 56 (a multiple of 8) and skips the bytes it does not know:
 * a later version can grow the header without breaking version 1 readers of the fixed part.
 * Fields an opcode does not use are sent as 0 and rejected otherwise (PHUB_DROP_UNUSED_FIELD):
 * the opcode table below says which fields each opcode uses.
 *
 * The struct is packed because a datagram sits 42 bytes into an Ethernet frame, so the header is
 * only 2-byte aligned in an mbuf; code copies it out (phub_wire_parse) rather than casting.
 */
struct __attribute__((packed)) phub_wire_hdr {
	phub_be16_t magic;		/* PHUB_WIRE_MAGIC */
	uint8_t version;		/* PHUB_WIRE_VERSION */
	uint8_t opcode;			/* enum phub_wire_opcode */
	uint8_t flags;			/* PHUB_WIRE_F_* */
	uint8_t hdr_len;		/* bytes before the payload, >= 56 */
	uint8_t dtype;			/* enum phub_dtype of the payload, or ..._NONE */
	uint8_t priority;		/* P3: lower is needed sooner, 0 first */
	phub_be32_t job_id;		/* handed out in JOIN_ACK; 0 in JOIN */
	phub_be16_t worker_rank;	/* sender's or addressee's rank in the job */
	phub_be16_t seg_index;		/* this datagram's index in the message/chunk */
	phub_be16_t seg_count;		/* datagrams of the message/chunk, >= 1 */
	phub_be16_t payload_len;	/* bytes after the header */
	phub_be32_t reserved;		/* 0 */
	phub_be64_t session_token;	/* from JOIN_ACK; 0 in JOIN */
	phub_be32_t chunk_id;		/* global chunk index within the job */
	phub_be32_t iteration;		/* serial number, see phub_wire_iter_cmp() */
	phub_be32_t elem_offset;	/* first element of the segment within the chunk */
	phub_be32_t elem_count;		/* elements in (or asked for by) this segment */
	phub_be32_t aux;		/* opcode-specific, see the opcode table */
	phub_be32_t csum;		/* CRC32C when PHUB_WIRE_F_CSUM, else 0 */
};

static_assert(sizeof(struct phub_wire_hdr) == PHUB_WIRE_HDR_LEN, "header is 56 bytes");
static_assert(offsetof(struct phub_wire_hdr, flags) == 4, "flags at 4");
static_assert(offsetof(struct phub_wire_hdr, job_id) == 8, "job_id at 8");
static_assert(offsetof(struct phub_wire_hdr, worker_rank) == 12, "worker_rank at 12");
static_assert(offsetof(struct phub_wire_hdr, seg_count) == 16, "seg_count at 16");
static_assert(offsetof(struct phub_wire_hdr, payload_len) == 18, "payload_len at 18");
static_assert(offsetof(struct phub_wire_hdr, reserved) == 20, "reserved at 20");
static_assert(offsetof(struct phub_wire_hdr, session_token) == 24, "token at 24, 8-aligned");
static_assert(offsetof(struct phub_wire_hdr, chunk_id) == 32, "chunk_id at 32");
static_assert(offsetof(struct phub_wire_hdr, iteration) == 36, "iteration at 36");
static_assert(offsetof(struct phub_wire_hdr, elem_offset) == 40, "elem_offset at 40");
static_assert(offsetof(struct phub_wire_hdr, elem_count) == 44, "elem_count at 44");
static_assert(offsetof(struct phub_wire_hdr, aux) == 48, "aux at 48");
static_assert(offsetof(struct phub_wire_hdr, csum) == 52, "csum at 52");

/*
 * Header flags. A bit not defined here is an error (PHUB_DROP_BAD_FLAGS), so a later version
 * can define one knowing that version 1 peers refuse rather than misread it.
 *
 * CSUM:	csum holds CRC32C over the payload, then the header (hdr_len bytes) with csum = 0.
 *		Payload first so that the PBox, which sends one MODEL payload under N per-worker
 *		headers, computes the payload's CRC once and finishes it with each 56-byte header.
 *		Without the flag csum must be 0. UDP's own checksum already covers the datagram;
 *		CRC32C is the end-to-end check for paths where NICs or AF_XDP skip it.
 * RETRANSMIT:	the sender sent this datagram before and got no answer in time (PUSH, PULL, JOIN,
 *		LEAVE, PING, RING_*). The receiver counts retransmits seen; processing is the same,
 *		since iteration numbers and the rank bitmap make a repeat harmless.
 * LAST:	set on, and only on, the datagram with seg_index == seg_count - 1 of a message or
 *		chunk; a reassembler that misses seg_count in a damaged packet still sees the end.
 * REPLAY:	the PBox answers from kept state (a MODEL or ACK sent again for a duplicate or late
 *		PUSH, or a PULL); the worker counts them: a high count means its ACKs are lost.
 * HYPER:	PUSH only. The header extension (hdr_len >= 64) starts with struct
 *		phub_wire_hyper_ext: the learning rate and weight decay of this key for this
 *		iteration (a schedule, a parameter group). Every rank's PUSHes of one segment and
 *		iteration must carry the same values, or none; without the flag the job's JOIN
 *		values apply. Values must be finite and >= 0 (PHUB_DROP_BAD_HYPER).
 * AUTH:	any opcode. The header ends with the AUTH trailer (PHUB_WIRE_AUTH_TRAILER_LEN:
 *		a 64-bit sequence number and a 16-byte MAC over header and payload, lib/auth),
 *		after any other extension; JOIN, JOIN_ACK, RING_HELLO and RING_HELLO_ACK carry
 *		the sender's ephemeral X25519 key (PHUB_WIRE_AUTH_PK_LEN) right before it. The
 *		MAC replaces the CRC: AUTH with CSUM is refused (PHUB_DROP_BAD_AUTH_EXT).
 */
#define PHUB_WIRE_F_CSUM	0x01
#define PHUB_WIRE_F_RETRANSMIT	0x02
#define PHUB_WIRE_F_LAST	0x04
#define PHUB_WIRE_F_REPLAY	0x08
#define PHUB_WIRE_F_HYPER	0x10
#define PHUB_WIRE_F_AUTH	0x20
#define PHUB_WIRE_F_ALL	\
	(PHUB_WIRE_F_CSUM | PHUB_WIRE_F_RETRANSMIT | PHUB_WIRE_F_LAST | PHUB_WIRE_F_REPLAY | \
	 PHUB_WIRE_F_HYPER | PHUB_WIRE_F_AUTH)

/*
 * The header extension of a PUSH with PHUB_WIRE_F_HYPER, at offset 56: float32 bit patterns,
 * big-endian like the rest of the header. hdr_len is then PHUB_WIRE_HDR_LEN_HYPER.
 *
 *  56 +---------------------------------------------------------------+
 *     |                     lr (float32 bits)                         |
 *  60 +---------------------------------------------------------------+
 *     |                 weight_decay (float32 bits)                   |
 *  64 +---------------------------------------------------------------+
 */
struct __attribute__((packed)) phub_wire_hyper_ext {
	phub_be32_t lr;
	phub_be32_t weight_decay;
};

#define PHUB_WIRE_HDR_LEN_HYPER (PHUB_WIRE_HDR_LEN + 8)
static_assert(sizeof(struct phub_wire_hyper_ext) == 8, "HYPER extension is 8 bytes");

/*
 * The longest header a PUSH may carry, extensions included. Segments are cut so that a whole
 * one fits the path MTU under this header, so a session may add an extension to any PUSH
 * (a learning rate change mid-training) without a datagram outgrowing the link.
 */
#define PHUB_WIRE_HDR_LEN_MAX PHUB_WIRE_HDR_LEN_HYPER

/*
 * The AUTH extension (flag PHUB_WIRE_F_AUTH), at the end of the header:
 *
 *  hdr_len - 56 +---------------------------------------------------------------+
 *  (handshake   |  ephemeral X25519 public key, 32 bytes (JOIN, JOIN_ACK,        |
 *   opcodes)    |  RING_HELLO, RING_HELLO_ACK only)                         ... |
 *  hdr_len - 24 +---------------------------------------------------------------+
 *               |  seq (64 bits): channel (16) << 48 | counter (48)             |
 *  hdr_len - 16 +---------------------------------------------------------------+
 *               |  tag: 16 bytes, over header [0, hdr_len - 16) and payload ... |
 *  hdr_len      +---------------------------------------------------------------+
 *
 * A session that authenticates has its segments cut for PHUB_WIRE_HDR_LEN_MAX +
 * PHUB_WIRE_AUTH_TRAILER_LEN (phub_wire_max_elems_room()); other sessions keep theirs.
 */
#define PHUB_WIRE_AUTH_TRAILER_LEN	24
#define PHUB_WIRE_AUTH_PK_LEN		32

/*
 * Payload element types: enum phub_dtype of wire/phub_types.h, or NONE. NONE marks a control body
 * or an empty payload: it is the dtype of every opcode that does not carry elements, and a
 * numeric dtype is required on every opcode that does.
 */
#define PHUB_WIRE_DTYPE_NONE	0xff

/*
 * Which header fields an opcode uses besides the ones every opcode uses (magic, version, opcode,
 * flags, hdr_len, dtype, priority, worker_rank, seg_index, seg_count, payload_len, csum).
 * A field not listed for an opcode must be 0.
 */
#define PHUB_WIRE_USE_JOB	0x01	/* job_id */
#define PHUB_WIRE_USE_TOKEN	0x02	/* session_token */
#define PHUB_WIRE_USE_CHUNK	0x04	/* chunk_id */
#define PHUB_WIRE_USE_ITER	0x08	/* iteration */
#define PHUB_WIRE_USE_ELEMS	0x10	/* elem_offset, elem_count */
#define PHUB_WIRE_USE_AUX	0x20	/* aux */
#define PHUB_WIRE_USE_RANGE	0x40	/* elem_count > 0, elem_offset + elem_count <= 2^32 */
#define PHUB_WIRE_USE_SESSION	(PHUB_WIRE_USE_JOB | PHUB_WIRE_USE_TOKEN)
#define PHUB_WIRE_USE_DATA	(PHUB_WIRE_USE_SESSION | PHUB_WIRE_USE_CHUNK | \
				 PHUB_WIRE_USE_ITER | PHUB_WIRE_USE_ELEMS | PHUB_WIRE_USE_RANGE | \
				 PHUB_WIRE_USE_AUX)

/* What may follow the header. */
enum phub_wire_payload {
	PHUB_WIRE_PAYLOAD_NONE,		/* payload_len must be 0 */
	PHUB_WIRE_PAYLOAD_ELEMS,	/* elem_count elements of dtype, elem_count > 0 */
	PHUB_WIRE_PAYLOAD_BODY,		/* a control body, checked by its parser */
	PHUB_WIRE_PAYLOAD_ANY,		/* opaque bytes, 0 up to the datagram */
};

/*
 * The opcodes: _(NAME, value, name, fields used, payload).
 *
 * JOIN 0x01       worker -> PBox control port. Body: struct phub_wire_join_body + keys, split
 *                 over seg_count datagrams when the layout does not fit one. worker_rank = body
 *                 rank; job_id and token 0 (the job is named in the body).
 * JOIN_ACK 0x02   PBox -> worker. job_id and session_token of the new session, worker_rank
 *                 echoed. Body: struct phub_wire_join_ack_body + endpoints + chunk map, split over
 *                 seg_count datagrams.
 * LEAVE 0x03      worker -> PBox: job_id, token; iteration = last iteration the worker finished.
 * LEAVE_ACK 0x04  PBox -> worker: job_id, token, iteration echoed. No payload.
 * PUSH 0x10       worker -> PBox data port: one segment of a chunk's gradient. chunk_id,
 *                 iteration, elem_offset, elem_count locate it; seg_index/seg_count are its place
 *                 in the chunk's segment grid; aux = sender's transmit stamp (opaque), echoed by
 *                 ACK so RTT is measured even across retransmits (no Karn ambiguity).
 * ACK 0x11        PBox -> worker: the PUSH segment named by chunk_id, iteration, elem_offset,
 *                 elem_count, seg_index/seg_count was taken in; aux = the PUSH's aux. No payload.
 * MODEL 0x12      PBox -> worker: new weights of one segment for iteration (the one whose PUSHes
 *                 produced them). aux = the aux of the PULL or late PUSH it answers (with REPLAY);
 *                 in the broadcast, to a rank that asked for ACKV, the aux of its own PUSH of the
 *                 segment that the MODEL acknowledges instead of an ACKV entry, else 0.
 * PULL 0x13       worker -> PBox: send the MODEL of iteration for [elem_offset, elem_offset +
 *                 elem_count) of chunk_id again (every segment overlapping it). aux = stamp.
 * ACKV 0x14       PBox -> worker that asked for it (JOIN flag ACKV): the ACKs of several PUSHes
 *                 in one datagram. Session and worker_rank as an ACK's; no other field. Body: a
 *                 count-implied array of struct phub_wire_ackv_entry_wire (16 bytes each, at
 *                 least one), each naming one PUSH (chunk, segment, iteration, its aux echoed).
 * PING 0x20       either way: aux = sequence, iteration = sender's current iteration; job_id and
 *                 token when the sender has a session, else 0. Any payload (path MTU probing).
 * PONG 0x21       answer to PING: aux, iteration and payload echoed.
 * WORLD 0x22      PBox -> worker control: the job's membership changed (an elastic job removed
 *                 a rank that died, or took a removed one back). job_id, token and worker_rank
 *                 are the addressee's; aux = change << 16 | the rank (global): change counts
 *                 the job's changes from 1; iteration = the first iteration without the rank
 *                 (none of its gradients reaches it), or with it again. Whether a change takes
 *                 the rank out or in follows from the changes before it. Sent for each change
 *                 in order until the worker answers it.
 * WORLD_ACK 0x23  worker -> PBox control: the WORLD with this aux was taken (session, iteration
 *                 and aux echoed). A worker answers only the change after the last it took
 *                 (and any earlier one again), so it takes every change, in order.
 * ERROR 0x3f      PBox -> worker (or PBox -> PBox): aux = error code (enum phub_wire_error);
 *                 chunk_id, iteration, elem_offset, elem_count echo the packet that caused it.
 *                 Body: struct phub_wire_error_body + UTF-8 text.
 * RING_REDUCE 0x40  PBox -> next PBox in the ring, reduce-scatter phase: the sender's partial sum
 *                 of one segment; worker_rank = sender's ring position; aux = ring step.
 * RING_GATHER 0x41  PBox -> next PBox, all-gather phase: fully reduced values of one segment;
 *                 fields as RING_REDUCE.
 * RING_ACK 0x42   the RING_REDUCE/RING_GATHER segment was taken in; fields as ACK, aux = step.
 * RING_HELLO 0x43 PBox -> ring neighbour's control port: a ring job's link, offered. Body:
 *                 struct phub_wire_ring_hello_body + endpoints; worker_rank = the sender's ring
 *                 position (as in the body); job_id = the sender's id of the job, which ring
 *                 datagrams to it carry. Sent until answered, then as a keep-alive.
 * RING_HELLO_ACK 0x44  the answer, from the receiver's control port: the same body, the
 *                 receiver's own.
 * RING_ACKV 0x45  PBox -> previous PBox: the RING_REDUCE/RING_GATHER segments of one job taken
 *                 in one receive burst, one RING_ACK each in one datagram. job_id and token as
 *                 RING_ACK, worker_rank = the sender's ring position. Body: 1 ..
 *                 PHUB_WIRE_RING_ACKV_MAX entries of struct phub_wire_ring_ack_entry, their
 *                 count payload_len / 16.
 * 0x46-0x4f       reserved for PBox-to-PBox traffic (PHUB_DROP_RESERVED_OPCODE).
 */
#define PHUB_WIRE_OPCODES(_) \
	_(JOIN,		0x01, "join",		0, BODY) \
	_(JOIN_ACK,	0x02, "join_ack",	PHUB_WIRE_USE_SESSION, BODY) \
	_(LEAVE,	0x03, "leave",		PHUB_WIRE_USE_SESSION | PHUB_WIRE_USE_ITER, NONE) \
	_(LEAVE_ACK,	0x04, "leave_ack",	PHUB_WIRE_USE_SESSION | PHUB_WIRE_USE_ITER, NONE) \
	_(PUSH,		0x10, "push",		PHUB_WIRE_USE_DATA, ELEMS) \
	_(ACK,		0x11, "ack",		PHUB_WIRE_USE_DATA, NONE) \
	_(MODEL,	0x12, "model",		PHUB_WIRE_USE_DATA, ELEMS) \
	_(PULL,		0x13, "pull",		PHUB_WIRE_USE_DATA, NONE) \
	_(ACKV,		0x14, "ackv",		PHUB_WIRE_USE_SESSION, BODY) \
	_(PING,		0x20, "ping",		PHUB_WIRE_USE_SESSION | PHUB_WIRE_USE_ITER | \
						PHUB_WIRE_USE_AUX, ANY) \
	_(PONG,		0x21, "pong",		PHUB_WIRE_USE_SESSION | PHUB_WIRE_USE_ITER | \
						PHUB_WIRE_USE_AUX, ANY) \
	_(WORLD,	0x22, "world",		PHUB_WIRE_USE_SESSION | PHUB_WIRE_USE_ITER | \
						PHUB_WIRE_USE_AUX, NONE) \
	_(WORLD_ACK,	0x23, "world_ack",	PHUB_WIRE_USE_SESSION | PHUB_WIRE_USE_ITER | \
						PHUB_WIRE_USE_AUX, NONE) \
	_(ERROR,	0x3f, "error",		PHUB_WIRE_USE_SESSION | PHUB_WIRE_USE_CHUNK | \
						PHUB_WIRE_USE_ITER | PHUB_WIRE_USE_ELEMS | \
						PHUB_WIRE_USE_AUX, BODY) \
	_(RING_REDUCE,	0x40, "ring_reduce",	PHUB_WIRE_USE_DATA, ELEMS) \
	_(RING_GATHER,	0x41, "ring_gather",	PHUB_WIRE_USE_DATA, ELEMS) \
	_(RING_ACK,	0x42, "ring_ack",	PHUB_WIRE_USE_DATA, NONE) \
	_(RING_HELLO,	0x43, "ring_hello",	PHUB_WIRE_USE_JOB, BODY) \
	_(RING_HELLO_ACK, 0x44, "ring_hello_ack", PHUB_WIRE_USE_JOB, BODY) \
	_(RING_ACKV,	0x45, "ring_ackv",	PHUB_WIRE_USE_SESSION, BODY)

enum phub_wire_opcode {
#define PHUB_WIRE_OP_ENUM(n, v, s, use, pl) PHUB_WIRE_OP_##n = (v),
	PHUB_WIRE_OPCODES(PHUB_WIRE_OP_ENUM)
#undef PHUB_WIRE_OP_ENUM
};

/* The PBox-to-PBox range; opcodes in it that are not defined above are reserved. */
#define PHUB_WIRE_OP_RING_FIRST	0x40
#define PHUB_WIRE_OP_RING_LAST	0x4f

/*
 * Drop reasons: _(NAME, "counter name"). One list gives enum phub_drop_reason and the names in
 * counters and telemetry. The first group is what phub_wire_parse() and the body parsers return;
 * the second group, from PHUB_DROP_BAD_TOKEN on, is never returned by this library: the engine
 * returns it for packets that are well formed but do not fit the session or the slot state.
 */
#define PHUB_DROP_REASONS(_) \
	_(OK,			"ok") \
	/* the datagram */ \
	_(TOO_SHORT,		"too_short") \
	_(BAD_MAGIC,		"bad_magic") \
	_(BAD_VERSION,		"bad_version") \
	_(BAD_HDR_LEN,		"bad_hdr_len") \
	_(BAD_PAYLOAD_LEN,	"payload_len_mismatch") \
	_(BAD_FLAGS,		"unknown_flags") \
	_(CSUM_WITHOUT_FLAG,	"csum_without_flag") \
	_(BAD_CSUM,		"bad_csum") \
	/* the header fields */ \
	_(BAD_OPCODE,		"unknown_opcode") \
	_(RESERVED_OPCODE,	"reserved_opcode") \
	_(BAD_DTYPE,		"bad_dtype") \
	_(SEG_COUNT_ZERO,	"seg_count_zero") \
	_(SEG_INDEX,		"seg_index_range") \
	_(SEG_LAST,		"last_flag_mismatch") \
	_(PAYLOAD_NOT_ALLOWED,	"payload_not_allowed") \
	_(ELEM_COUNT_ZERO,	"elem_count_zero") \
	_(ELEM_COUNT,		"elem_count_mismatch") \
	_(ELEM_RANGE,		"elem_range_overflow") \
	_(UNUSED_FIELD,		"unused_field_nonzero") \
	_(BAD_HYPER,		"bad_step_hyper") \
	_(BAD_AUTH_EXT,		"bad_auth_ext") \
	/* the control bodies */ \
	_(BODY_SHORT,		"body_too_short") \
	_(JOIN_NAME_UNTERMINATED, "join_name_unterminated") \
	_(JOIN_NAME,		"join_name_invalid") \
	_(JOIN_WORLD_SIZE,	"join_world_size_zero") \
	_(JOIN_RANK,		"join_rank_range") \
	_(JOIN_RANK_MISMATCH,	"join_rank_mismatch") \
	_(JOIN_DTYPE,		"join_bad_dtype") \
	_(JOIN_OPTIMIZER,	"join_bad_optimizer") \
	_(JOIN_FLAGS,		"join_unknown_flags") \
	_(JOIN_HYPER,		"join_bad_hyperparameter") \
	_(JOIN_CHUNK_BYTES,	"join_bad_chunk_bytes") \
	_(JOIN_KEY_COUNT,	"join_key_count_mismatch") \
	_(JOIN_KEY_RANGE,	"join_key_range") \
	_(JOIN_KEY_EMPTY,	"join_key_elem_count_zero") \
	_(JOIN_ACK_JOB,		"join_ack_job_mismatch") \
	_(JOIN_ACK_TOKEN,	"join_ack_token_zero") \
	_(JOIN_ACK_GEOMETRY,	"join_ack_bad_geometry") \
	_(JOIN_ACK_ENDPOINT,	"join_ack_bad_endpoint") \
	_(JOIN_ACK_LENGTH,	"join_ack_length_mismatch") \
	_(JOIN_ACK_CHUNK_RANGE,	"join_ack_chunk_range") \
	_(JOIN_ACK_ENDPOINT_INDEX, "join_ack_endpoint_index") \
	_(ERROR_LENGTH,		"error_length_mismatch") \
	_(ERROR_CODE,		"error_bad_code") \
	_(ERROR_TEXT,		"error_text_not_utf8") \
	_(RING_HELLO_FIELDS,	"ring_hello_bad_fields") \
	_(RING_ACKV_FIELDS,	"ring_ackv_bad_fields") \
	_(ACKV_LENGTH,		"ackv_bad_length") \
	_(ACKV_ENTRY,		"ackv_bad_entry") \
	/* second group: session and slot state, returned by the engine */ \
	_(BAD_TOKEN,		"bad_token") \
	_(UNKNOWN_JOB,		"unknown_job") \
	_(RANK_RANGE,		"rank_range") \
	_(WRONG_SOURCE,		"wrong_source") \
	_(NOT_JOINED,		"not_joined") \
	_(UNEXPECTED_OPCODE,	"unexpected_opcode") \
	_(DTYPE_MISMATCH,	"dtype_mismatch") \
	_(CHUNK_RANGE,		"chunk_range") \
	_(OFFSET_RANGE,		"offset_range") \
	_(STALE_ITERATION,	"stale_iteration") \
	_(FUTURE_ITERATION,	"future_iteration") \
	_(DUPLICATE,		"duplicate") \
	_(WRONG_LCORE,		"wrong_lcore") \
	_(NO_BUFFER,		"no_buffer") \
	_(HYPER_MISMATCH,	"hyper_mismatch") \
	_(RING_STEP,		"ring_step_range") \
	/* authenticated sessions (lib/auth; docs/protocol.md section 8) */ \
	_(AUTH_MISSING,		"auth_missing") \
	_(AUTH_UNEXPECTED,	"auth_unexpected") \
	_(AUTH_BAD_TAG,		"auth_bad_tag") \
	_(AUTH_REPLAY,		"auth_replay") \
	_(AUTH_CHANNEL,		"auth_wrong_channel") \
	_(AUTH_JOIN_REPLAY,	"auth_join_replay")

/*
 * Second-group meanings, for the engine: BAD_TOKEN token unknown for the job; UNKNOWN_JOB no such
 * job_id; RANK_RANGE worker_rank >= the job's world size; WRONG_SOURCE a valid token from another
 * IP/port than the one that joined; NOT_JOINED a data packet before the session is complete;
 * UNEXPECTED_OPCODE an opcode this endpoint does not take (JOIN on a data port, MODEL at the PBox);
 * DTYPE_MISMATCH elements of another dtype than the job's; CHUNK_RANGE chunk_id >= the job's
 * chunks; OFFSET_RANGE elem_offset/elem_count off the chunk's segment grid; STALE_ITERATION older
 * than the finished one; FUTURE_ITERATION beyond the current one; DUPLICATE a segment already
 * added (ACKed again, not added); WRONG_LCORE handed to the lcore that owns the chunk;
 * NO_BUFFER TX ring full or no mbuf; HYPER_MISMATCH a PUSH whose HYPER values (or their absence)
 * differ from those of the segment's first PUSH of the iteration. RING_STEP a ring datagram whose step is beyond 2R-3, whose
 * opcode does not match its step, whose elements are not the step's part, or a gather step
 * before this rack's sum (docs/hierarchy.md). AUTH_MISSING a datagram without flag AUTH for a
 * job that requires it; AUTH_UNEXPECTED flag AUTH where no keys are held (a job without auth, a
 * session without keys); AUTH_BAD_TAG the MAC does not match (forged, damaged, another key);
 * AUTH_REPLAY a sequence number seen or older than the replay window; AUTH_CHANNEL a sequence
 * number of another stream (another port's) than the one it arrived on; AUTH_JOIN_REPLAY an
 * authenticated JOIN with another ephemeral key than the rank's live session's.
 */
enum phub_drop_reason {
#define PHUB_DROP_ENUM(n, s) PHUB_DROP_##n,
	PHUB_DROP_REASONS(PHUB_DROP_ENUM)
#undef PHUB_DROP_ENUM
	PHUB_DROP_REASON_MAX
};

/* The first reason of the second group; every reason before it comes from this library. */
#define PHUB_DROP_FIRST_SESSION PHUB_DROP_BAD_TOKEN

/*
 * ERROR codes: _(NAME, value, name). Sent in the ERROR body and in the header's aux.
 * BAD_NONCE the nonce differs from the job's; JOB_FULL world_size ranks already joined;
 * RANK_TAKEN the rank joined with another nonce or source; RANK_RANGE rank >= the job's world
 * size; LAYOUT_MISMATCH keys, dtype, optimizer or hyper-parameters differ from the first rank's;
 * NO_MEMORY the PBox cannot hold the job's buffers; JOB_LIMIT too many jobs on this PBox;
 * UNKNOWN_JOB job_id not known; BAD_SESSION token or source does not match; JOB_ABORTED the job
 * was torn down; WORKER_TIMEOUT a rank went silent and the job stops; BAD_REQUEST a well-formed
 * packet that makes no sense here; UNSUPPORTED a dtype, optimizer or flag this PBox lacks;
 * JOIN_TIMEOUT JOIN segments missing for too long; SHUTTING_DOWN the PBox is stopping;
 * INTERNAL a bug in the PBox (see its log).
 */
#define PHUB_WIRE_ERRORS(_) \
	_(BAD_NONCE,		1, "bad_nonce") \
	_(JOB_FULL,		2, "job_full") \
	_(RANK_TAKEN,		3, "rank_taken") \
	_(RANK_RANGE,		4, "rank_range") \
	_(LAYOUT_MISMATCH,	5, "layout_mismatch") \
	_(NO_MEMORY,		6, "no_memory") \
	_(JOB_LIMIT,		7, "job_limit") \
	_(UNKNOWN_JOB,		8, "unknown_job") \
	_(BAD_SESSION,		9, "bad_session") \
	_(JOB_ABORTED,		10, "job_aborted") \
	_(WORKER_TIMEOUT,	11, "worker_timeout") \
	_(BAD_REQUEST,		12, "bad_request") \
	_(UNSUPPORTED,		13, "unsupported") \
	_(JOIN_TIMEOUT,		14, "join_timeout") \
	_(SHUTTING_DOWN,	15, "shutting_down") \
	_(INTERNAL,		16, "internal")

enum phub_wire_error {
#define PHUB_WIRE_ERROR_ENUM(n, v, s) PHUB_WIRE_ERR_##n = (v),
	PHUB_WIRE_ERRORS(PHUB_WIRE_ERROR_ENUM)
#undef PHUB_WIRE_ERROR_ENUM
};

/* WORLD's aux: the change (1, 2, ...) and the removed rank. */
#define PHUB_WIRE_WORLD_AUX(change, rank) (((uint32_t)(change) << 16) | (uint16_t)(rank))
#define PHUB_WIRE_WORLD_CHANGE(aux) ((uint16_t)((aux) >> 16))
#define PHUB_WIRE_WORLD_RANK(aux) ((uint16_t)((aux) & 0xffff))

/* Optimizers named in JOIN: enum phub_opt_type of wire/phub_types.h. */

/*
 * JOIN flags.
 * DETERMINISTIC: add the ranks' segments in rank order, not arrival order, so that the sum is
 *                bit-identical across runs (the PBox keeps each rank's segment until all are in).
 * CSUM:          the worker asks the PBox to set PHUB_WIRE_F_CSUM on what it sends to it.
 * ELASTIC:       on_worker_dead "continue" for a job the PBox's config does not declare: a rank
 *                that dies is removed and the job goes on with the others (WORLD). Every rank
 *                must say the same (LAYOUT_MISMATCH otherwise).
 * ACKV:          the worker takes ACKV: the PBox acknowledges its PUSHes of one receive burst in
 *                one ACKV (or none, when their MODELs leave in the same burst) instead of one ACK
 *                each. Per rank; a worker without it gets one ACK per PUSH.
 */
#define PHUB_WIRE_JOIN_F_DETERMINISTIC	0x0001
#define PHUB_WIRE_JOIN_F_CSUM		0x0002
#define PHUB_WIRE_JOIN_F_ELASTIC	0x0004
#define PHUB_WIRE_JOIN_F_ACKV		0x0008
#define PHUB_WIRE_JOIN_F_ALL		(PHUB_WIRE_JOIN_F_DETERMINISTIC | PHUB_WIRE_JOIN_F_CSUM | \
					 PHUB_WIRE_JOIN_F_ELASTIC | PHUB_WIRE_JOIN_F_ACKV)

/*
 * JOIN body, 120 bytes, then key_count key entries of 8 bytes. Every datagram of a split layout
 * repeats the fixed part, so each one is checked on its own and any one tells the PBox the job.
 *
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +---------------------------------------------------------------+
 * |      name: 64 bytes, printable ASCII, NUL-terminated, NUL      |  0
 * |      padded                                               ... |
 * +---------------------------------------------------------------+
 * |                       nonce (64 bits)                         | 64
 * |                                                               |
 * +-------------------------------+-------------------------------+
 * |             rank              |          world_size           | 72
 * +---------------+---------------+-------------------------------+
 * |     dtype     |   optimizer   |          join_flags           | 76
 * +---------------+---------------+-------------------------------+
 * |   lr | momentum | weight_decay | beta1 | beta2 | eps (float32 | 80
 * |   bit patterns, 4 bytes each)                             ... |
 * +---------------------------------------------------------------+
 * |                          chunk_bytes                          | 104
 * |                          total_keys                           | 108
 * |                           first_key                           | 112
 * |                           key_count                           | 116
 * +---------------------------------------------------------------+
 * |     key_count x { key_id u32, elem_count u32 }            ... | 120
 * +---------------------------------------------------------------+
 */
struct __attribute__((packed)) phub_wire_join_body {
	char name[PHUB_WIRE_JOB_NAME_LEN];
	phub_be64_t nonce;		/* the job's secret, the same in every rank */
	phub_be16_t rank;
	phub_be16_t world_size;		/* >= 1 */
	uint8_t dtype;			/* element type of every key */
	uint8_t optimizer;		/* enum phub_opt_type */
	phub_be16_t join_flags;		/* PHUB_WIRE_JOIN_F_* */
	phub_be32_t lr;			/* IEEE float32 bit patterns: finite, >= 0 */
	phub_be32_t momentum;
	phub_be32_t weight_decay;
	phub_be32_t beta1;
	phub_be32_t beta2;
	phub_be32_t eps;
	phub_be32_t chunk_bytes;	/* wanted chunk size, 0 = the PBox's default */
	phub_be32_t total_keys;		/* keys in the whole layout, >= 1 */
	phub_be32_t first_key;		/* index of this datagram's first key in the layout */
	phub_be32_t key_count;		/* key entries in this datagram, >= 1 */
};

struct __attribute__((packed)) phub_wire_key_entry {
	phub_be32_t key_id;
	phub_be32_t elem_count;		/* >= 1 */
};

static_assert(sizeof(struct phub_wire_join_body) == 120, "JOIN body fixed part is 120 bytes");
static_assert(offsetof(struct phub_wire_join_body, eps) == 100, "six hyper-parameters from 80 on");
static_assert(offsetof(struct phub_wire_join_body, nonce) == 64, "nonce at 64");
static_assert(offsetof(struct phub_wire_join_body, dtype) == 76, "dtype at 76");
static_assert(offsetof(struct phub_wire_join_body, lr) == 80, "lr at 80");
static_assert(offsetof(struct phub_wire_join_body, chunk_bytes) == 104, "chunk_bytes at 104");
static_assert(offsetof(struct phub_wire_join_body, key_count) == 116, "key_count at 116");
static_assert(sizeof(struct phub_wire_key_entry) == 8, "key entry is 8 bytes");

/*
 * JOIN_ACK body, 32 bytes, then endpoint_count endpoints of 8 bytes, then chunk_count u16
 * endpoint indices, one per chunk from first_chunk on. Every fixed field, the chunk counts
 * included, comes before the variable endpoint table, so that all of them have fixed offsets.
 * Every datagram repeats the fixed part and the whole endpoint table: each is usable alone.
 *
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +---------------------------------------------------------------+
 * |                    job_id (= header job_id)                   |  0
 * |                  iteration to resume at                       |  4
 * |                          chunk_bytes                          |  8
 * |          seg_elems (elements per PUSH/MODEL segment)          | 12
 * |                         total_chunks                          | 16
 * |                          first_chunk                          | 20
 * |                          chunk_count                          | 24
 * +-------------------------------+-------------------------------+
 * |        endpoint_count         |         reserved (0)          | 28
 * +-------------------------------+-------------------------------+
 * |  endpoint_count x { ipv4 u32, udp_port u16, pad u16 (0) } ... | 32
 * +---------------------------------------------------------------+
 * |  chunk_count x endpoint index u16 (< endpoint_count)      ... |
 * +---------------------------------------------------------------+
 *
 * ipv4 0 means "the address this JOIN_ACK came from", so a single-address PBox need not know
 * which of its addresses the worker reached.
 */
struct __attribute__((packed)) phub_wire_join_ack_body {
	phub_be32_t job_id;
	phub_be32_t iteration;		/* the first iteration the worker pushes */
	phub_be32_t chunk_bytes;	/* > 0 */
	phub_be32_t seg_elems;		/* > 0, a multiple of PHUB_WIRE_ELEM_ALIGN */
	phub_be32_t total_chunks;	/* >= 1 */
	phub_be32_t first_chunk;
	phub_be32_t chunk_count;	/* >= 1 */
	phub_be16_t endpoint_count;	/* >= 1 */
	phub_be16_t reserved;		/* 0 */
};

struct __attribute__((packed)) phub_wire_endpoint_entry {
	phub_be32_t ipv4;
	phub_be16_t udp_port;		/* != 0; names the lcore that owns the chunk */
	phub_be16_t pad;		/* 0 */
};

static_assert(sizeof(struct phub_wire_join_ack_body) == 32, "JOIN_ACK fixed part is 32 bytes");
static_assert(offsetof(struct phub_wire_join_ack_body, endpoint_count) == 28, "count at 28");
static_assert(sizeof(struct phub_wire_endpoint_entry) == 8, "endpoint entry is 8 bytes");

/*
 * ERROR body: 4 bytes, then msg_len bytes of UTF-8 text, not NUL-terminated.
 *
 * +-------------------------------+-------------------------------+
 * |        code (= aux)           |            msg_len            |  0
 * +-------------------------------+-------------------------------+
 * |     text (msg_len <= PHUB_WIRE_ERROR_MSG_MAX bytes)       ... |  4
 * +---------------------------------------------------------------+
 */
struct __attribute__((packed)) phub_wire_error_body {
	phub_be16_t code;		/* enum phub_wire_error */
	phub_be16_t msg_len;
};

static_assert(sizeof(struct phub_wire_error_body) == 4, "ERROR fixed part is 4 bytes");

/*
 * One datagram in host order: what phub_wire_parse() fills and phub_wire_encode() writes.
 * payload points into the parsed datagram (or, to encode, at the bytes to send).
 */
struct phub_wire_msg {
	const uint8_t *payload;		/* NULL when payload_len == 0 */
	uint64_t session_token;
	uint32_t job_id;
	uint32_t chunk_id;
	uint32_t iteration;
	uint32_t elem_offset;
	uint32_t elem_count;
	uint32_t aux;
	uint32_t csum;			/* as received; computed by the encoder */
	uint16_t worker_rank;
	uint16_t seg_index;
	uint16_t seg_count;
	uint16_t payload_len;
	uint8_t opcode;
	uint8_t flags;
	uint8_t hdr_len;		/* as received; the encoder writes PHUB_WIRE_HDR_LEN, or
					 * PHUB_WIRE_HDR_LEN_HYPER with PHUB_WIRE_F_HYPER */
	uint8_t dtype;
	uint8_t priority;
	/* With PHUB_WIRE_F_HYPER (PUSH): this iteration's hyper-parameters of the key. */
	float hyper_lr;
	float hyper_weight_decay;
};

/* Host form of a key entry. */
struct phub_wire_key {
	uint32_t key_id;
	uint32_t elem_count;
};

/* Host form of an endpoint entry. */
struct phub_wire_endpoint {
	uint32_t ipv4;			/* host order, 0 = the JOIN_ACK's source address */
	uint16_t udp_port;
};

/* Optimizer hyper-parameters as sent in JOIN. */
struct phub_wire_hyper {
	float lr;
	float momentum;
	float weight_decay;
	float beta1;
	float beta2;
	float eps;
};

/* The fixed part of a JOIN body in host order: the same in every datagram of one JOIN. */
struct phub_wire_join {
	uint64_t nonce;
	struct phub_wire_hyper hyper;
	uint32_t chunk_bytes;
	uint16_t rank;
	uint16_t world_size;
	uint16_t join_flags;
	uint8_t dtype;
	uint8_t optimizer;
	char name[PHUB_WIRE_JOB_NAME_LEN];	/* NUL-terminated */
};

/* One parsed JOIN body: the fixed part and this datagram's keys, still in wire order. */
struct phub_wire_join_seg {
	struct phub_wire_join join;
	uint32_t total_keys;
	uint32_t first_key;
	uint32_t key_count;
	const uint8_t *keys;		/* key_count struct phub_wire_key_entry, in the datagram */
};

/* A JOIN to send: the fixed part, the whole layout and the header flags wanted. */
struct phub_wire_join_params {
	struct phub_wire_join join;
	const struct phub_wire_key *keys;
	uint32_t key_count;
	uint8_t flags;			/* PHUB_WIRE_F_CSUM and/or RETRANSMIT */
	uint8_t priority;
};

/* The fixed part of a JOIN_ACK body in host order. */
struct phub_wire_join_ack {
	uint32_t job_id;
	uint32_t iteration;
	uint32_t chunk_bytes;
	uint32_t seg_elems;
};

/* One parsed JOIN_ACK body; endpoints and chunk map still in wire order. */
struct phub_wire_join_ack_seg {
	struct phub_wire_join_ack ack;
	uint32_t total_chunks;
	uint32_t first_chunk;
	uint32_t chunk_count;
	uint16_t endpoint_count;
	const uint8_t *endpoints;	/* endpoint_count struct phub_wire_endpoint_entry */
	const uint8_t *chunk_endpoints;	/* chunk_count big-endian u16 */
};

/* A JOIN_ACK to send: the fixed part, the endpoints, the whole chunk map, the header fields. */
struct phub_wire_join_ack_params {
	struct phub_wire_join_ack ack;
	uint64_t session_token;		/* != 0 */
	const struct phub_wire_endpoint *endpoints;
	const uint16_t *chunk_endpoints;	/* total_chunks indices into endpoints */
	uint32_t total_chunks;
	uint16_t endpoint_count;
	uint16_t rank;
	uint8_t flags;			/* PHUB_WIRE_F_CSUM and/or REPLAY */
};

/* One parsed ERROR body. */
struct phub_wire_error_msg {
	const char *text;		/* msg_len bytes in the datagram, not NUL-terminated */
	uint16_t code;
	uint16_t msg_len;
};

/* Reassembly of a split JOIN into the caller's key array (control path, no allocation). */
struct phub_wire_join_merge {
	struct phub_wire_join join;	/* from the first datagram taken */
	struct phub_wire_key *keys;	/* caller's array, total_keys entries filled at the end */
	uint32_t keys_cap;
	uint32_t total_keys;
	uint32_t keys_filled;
	uint16_t seg_count;
	bool started;
};

/* Reassembly of a split JOIN_ACK into the caller's endpoint and chunk map arrays. */
struct phub_wire_join_ack_merge {
	struct phub_wire_join_ack ack;
	struct phub_wire_endpoint *endpoints;	/* caller's array of endpoints_cap */
	uint16_t *chunk_endpoints;	/* caller's array of chunks_cap; 0xffff = not yet known */
	uint32_t chunks_cap;
	uint32_t total_chunks;
	uint32_t chunks_filled;
	uint16_t endpoints_cap;
	uint16_t endpoint_count;
	uint16_t seg_count;
	bool started;
};

/* ---- names ---- */

/* Counter name of a drop reason; "unknown" outside the list. */
const char *phub_drop_reason_name(enum phub_drop_reason reason);
/* Name of an opcode ("push"); "unknown" for others. */
const char *phub_wire_opcode_name(uint8_t opcode);
/* Name of a dtype ("fp32"); "unknown" for others. */
const char *phub_wire_dtype_name(uint8_t dtype);
/* Name of an ERROR code ("bad_nonce"); "unknown" for others. */
const char *phub_wire_error_name(uint16_t code);
/* Name of an optimizer ("adam"); "unknown" for others. */
const char *phub_wire_optimizer_name(uint8_t optimizer);
/* Bytes per element of a numeric dtype; 0 for NONE and unknown values. */
unsigned int phub_wire_dtype_size(uint8_t dtype);

/* ---- sizes ---- */

/*
 * Largest payload of one datagram on an IPv4/UDP path of this MTU: mtu - 20 - 8 - 56, capped by
 * the largest UDP datagram. -EINVAL when mtu < PHUB_WIRE_MIN_MTU.
 */
int phub_wire_max_payload(unsigned int mtu);

/*
 * Most elements of dtype in one PUSH/MODEL segment at this MTU, with room for the longest
 * header (PHUB_WIRE_HDR_LEN_MAX), rounded down to a multiple of PHUB_WIRE_ELEM_ALIGN (16): 16 float32 are one AVX-512 register or two AVX2 ones, so every
 * segment but a key's last is whole vectors with no scalar tail, and segment starts stay 64-byte
 * aligned within a cache-aligned chunk buffer. -EINVAL for a bad mtu or a non-numeric dtype.
 */
int phub_wire_max_elems(unsigned int mtu, uint8_t dtype);
/* The same with extra more header bytes on every datagram (PHUB_WIRE_AUTH_TRAILER_LEN). */
int phub_wire_max_elems_room(unsigned int mtu, uint8_t dtype, unsigned int extra);
/* Bytes flag AUTH adds to the header of opcode: the trailer, and the key on a handshake. */
unsigned int phub_wire_auth_ext_len(uint8_t opcode);

/* ---- header ---- */

/* Zero msg and set what every datagram needs: opcode, hdr_len, seg_count 1, LAST, dtype NONE. */
void phub_wire_msg_init(struct phub_wire_msg *msg, uint8_t opcode);

/*
 * Check msg as a sender would send it (every header rule; the body too when the opcode has one
 * and msg->payload is set). PHUB_DROP_OK or the reason a receiver would give.
 */
enum phub_drop_reason phub_wire_msg_check(const struct phub_wire_msg *msg);

/*
 * Write msg's header and copy its payload (unless it is already at buf + 56) into buf,
 * computing csum when PHUB_WIRE_F_CSUM is set. Bytes written, -EINVAL when msg fails
 * phub_wire_msg_check(), -ENOSPC when cap is too small.
 */
int phub_wire_encode(void *buf, size_t cap, const struct phub_wire_msg *msg);

/*
 * Write only the header, for a payload sent from another buffer (one MODEL payload under N
 * headers, a PUSH from the application's gradient). payload_crc is phub_wire_csum_payload() of
 * that payload, used when the CSUM flag is set. The header's length: PHUB_WIRE_HDR_LEN, or
 * PHUB_WIRE_HDR_LEN_HYPER with PHUB_WIRE_F_HYPER; -EINVAL or -ENOSPC. The body of a control
 * opcode is not checked.
 */
int phub_wire_hdr_encode(void *buf, size_t cap, const struct phub_wire_msg *msg,
		uint32_t payload_crc);

/*
 * Validate a datagram (the UDP payload, len bytes) and fill out. Every length is checked before
 * any byte is read past it; bodies of JOIN, JOIN_ACK and ERROR are validated too. Returns
 * PHUB_DROP_OK, or the reason to count; out is only meaningful on PHUB_DROP_OK.
 */
enum phub_drop_reason phub_wire_parse(const void *buf, size_t len, struct phub_wire_msg *out);

/*
 * The common datagram of a data port, parsed with less work: true when buf is a PUSH with no
 * flag but LAST and the fixed header that phub_wire_parse() takes (out then as it fills it);
 * false for anything else, valid or not, which phub_wire_parse() is to parse and count.
 */
bool phub_wire_parse_push(const void *buf, size_t len, struct phub_wire_msg *out);

/* ---- checksum ---- */

/* CRC32C (Castagnoli), zlib-style chaining: pass 0 first, then the previous result. */
uint32_t phub_crc32c(uint32_t crc, const void *buf, size_t len);
/* The portable slicing-by-8 version and the SSE4.2 one; the latter only if available. */
uint32_t phub_crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t phub_crc32c_hw(uint32_t crc, const void *buf, size_t len);
/* True when this CPU has the SSE4.2 crc32 instruction (phub_crc32c() then uses it). */
bool phub_crc32c_hw_available(void);

/* First step of a datagram's csum: the payload's CRC. */
uint32_t phub_wire_csum_payload(const void *payload, size_t len);
/* Last step: finish payload_crc with the header's hdr_len (>= 56) bytes, csum taken as 0. */
uint32_t phub_wire_csum_finish(uint32_t payload_crc, const void *hdr, size_t hdr_len);

/* ---- iteration numbers ---- */

/*
 * Iterations are 32-bit serial numbers (RFC 1982): a - b as a signed 32-bit distance, so the
 * comparison keeps working when the counter wraps. Negative: a is before b; 0: equal; positive:
 * a is after b. At a distance of exactly 2^31 the order is undefined (returns INT32_MIN both
 * ways); the PBox never keeps more than a few iterations apart.
 */
static inline int32_t
phub_wire_iter_cmp(uint32_t a, uint32_t b)
{
	uint32_t d = a - b;

	/* Converted by hand: an out-of-range unsigned-to-signed cast is implementation-defined. */
	return d <= (uint32_t)INT32_MAX ? (int32_t)d : -(int32_t)(~d) - 1;
}

static inline bool
phub_wire_iter_before(uint32_t a, uint32_t b)
{
	return phub_wire_iter_cmp(a, b) < 0;
}

/* ---- JOIN ---- */

/* Key entries that fit in one JOIN datagram at this MTU, or -EINVAL. */
int phub_wire_join_keys_per_datagram(unsigned int mtu);
/* Datagrams a layout of p->key_count keys takes at this MTU, or -EINVAL (also if > 65535). */
int phub_wire_join_segments(const struct phub_wire_join_params *p, unsigned int mtu);
/* Write JOIN datagram seg_index of the layout split for mtu. Bytes, -EINVAL or -ENOSPC. */
int phub_wire_join_write(void *buf, size_t cap, const struct phub_wire_join_params *p,
		unsigned int mtu, uint16_t seg_index);
/* Validate a JOIN body of len bytes; never reads past body + len. */
enum phub_drop_reason phub_wire_join_parse(const void *body, size_t len,
		struct phub_wire_join_seg *out);
/* Write a JOIN body from a parsed segment. Bytes, -EINVAL or -ENOSPC. */
int phub_wire_join_seg_encode(void *buf, size_t cap, const struct phub_wire_join_seg *seg);
/* Key i (< seg->key_count) of a parsed segment. */
struct phub_wire_key phub_wire_join_seg_key(const struct phub_wire_join_seg *seg, uint32_t i);

void phub_wire_join_merge_init(struct phub_wire_join_merge *m, struct phub_wire_key *keys,
		uint32_t keys_cap);
/*
 * Take one parsed JOIN datagram. 1 when the layout is complete, 0 when more are needed (a
 * repeated datagram is taken again without effect), -EINVAL when it contradicts what came before
 * (another job, rank, hyper-parameter, seg_count or key list), -ENOSPC when total_keys > cap.
 */
int phub_wire_join_merge_add(struct phub_wire_join_merge *m, const struct phub_wire_msg *msg,
		const struct phub_wire_join_seg *seg);

/* ---- JOIN_ACK ---- */

/* Datagrams the chunk map takes at this MTU, or -EINVAL (also if > 65535). */
int phub_wire_join_ack_segments(const struct phub_wire_join_ack_params *p, unsigned int mtu);
/* Write JOIN_ACK datagram seg_index. Bytes, -EINVAL or -ENOSPC. */
int phub_wire_join_ack_write(void *buf, size_t cap, const struct phub_wire_join_ack_params *p,
		unsigned int mtu, uint16_t seg_index);
/* Validate a JOIN_ACK body of len bytes; never reads past body + len. */
enum phub_drop_reason phub_wire_join_ack_parse(const void *body, size_t len,
		struct phub_wire_join_ack_seg *out);
/* Write a JOIN_ACK body from a parsed segment. Bytes, -EINVAL or -ENOSPC. */
int phub_wire_join_ack_seg_encode(void *buf, size_t cap, const struct phub_wire_join_ack_seg *seg);
/* Endpoint i (< endpoint_count) and the endpoint index of chunk i (< chunk_count). */
struct phub_wire_endpoint phub_wire_join_ack_seg_endpoint(const struct phub_wire_join_ack_seg *seg,
		uint16_t i);
uint16_t phub_wire_join_ack_seg_chunk(const struct phub_wire_join_ack_seg *seg, uint32_t i);

void phub_wire_join_ack_merge_init(struct phub_wire_join_ack_merge *m,
		struct phub_wire_endpoint *endpoints, uint16_t endpoints_cap,
		uint16_t *chunk_endpoints, uint32_t chunks_cap);
/* As phub_wire_join_merge_add(), for JOIN_ACK datagrams. */
int phub_wire_join_ack_merge_add(struct phub_wire_join_ack_merge *m,
		const struct phub_wire_msg *msg, const struct phub_wire_join_ack_seg *seg);

/* ---- ERROR ---- */

/*
 * Write an ERROR datagram: the header fields of about (job_id, session_token, worker_rank,
 * chunk_id, iteration, elem_offset, elem_count, flags CSUM; may be NULL), aux and body code =
 * code, and text cut to PHUB_WIRE_ERROR_MSG_MAX bytes at a character boundary. text must be
 * UTF-8. Bytes, -EINVAL or -ENOSPC.
 */
int phub_wire_error_write(void *buf, size_t cap, const struct phub_wire_msg *about,
		uint16_t code, const char *text);
/* Validate an ERROR body of len bytes; never reads past body + len. */
enum phub_drop_reason phub_wire_error_parse(const void *body, size_t len,
		struct phub_wire_error_msg *out);
/* Write an ERROR body from a parsed one. Bytes, -EINVAL or -ENOSPC. */
int phub_wire_error_encode(void *buf, size_t cap, const struct phub_wire_error_msg *err);

/* ---- ACKV (docs/protocol.md section 3, "ACKV") ---- */

/*
 * One ACKV entry, 16 bytes, big-endian: one PUSH acknowledged.
 *
 * +---------------------------------------------------------------+
 * |                           chunk_id                            |  0
 * +-------------------------------+-------------------------------+
 * |           seg_index           |             flags             |  4
 * +-------------------------------+-------------------------------+
 * |                           iteration                           |  8
 * +---------------------------------------------------------------+
 * |                  aux (the PUSH's, echoed)                     | 12
 * +---------------------------------------------------------------+
 *
 * flags: what the ACK of that PUSH would carry among LAST and REPLAY; other bits are refused
 * (ackv_bad_entry). The datagram's payload_len is a nonzero multiple of 16 (ackv_bad_length).
 */
struct __attribute__((packed)) phub_wire_ackv_entry_wire {
	phub_be32_t chunk_id;
	phub_be16_t seg_index;
	phub_be16_t flags;
	phub_be32_t iteration;
	phub_be32_t aux;
};

static_assert(sizeof(struct phub_wire_ackv_entry_wire) == 16, "ACKV entry is 16 bytes");

#define PHUB_WIRE_ACKV_ENTRY_LEN	16u
#define PHUB_WIRE_ACKV_ENTRY_F_ALL	(PHUB_WIRE_F_LAST | PHUB_WIRE_F_REPLAY)

/* An ACKV entry in host order. */
struct phub_wire_ackv_entry {
	uint32_t chunk_id;
	uint32_t iteration;
	uint32_t aux;
	uint16_t seg_index;
	uint16_t flags;
};

/* Entries one ACKV datagram holds on an IPv4/UDP path of this MTU (0 below the smallest MTU). */
unsigned int phub_wire_ackv_max_entries(unsigned int mtu);
/* Validate an ACKV body of len bytes (every entry); the entry count in *count. */
enum phub_drop_reason phub_wire_ackv_parse(const void *body, size_t len, unsigned int *count);
/* Entry i of a body phub_wire_ackv_parse() took. */
void phub_wire_ackv_get(const void *body, unsigned int i, struct phub_wire_ackv_entry *out);
/* Write n entries as an ACKV body of n * 16 bytes at body. */
void phub_wire_ackv_put(void *body, const struct phub_wire_ackv_entry *e, unsigned int n);

/* ---- RING_HELLO, RING_HELLO_ACK (docs/protocol.md section 12) ---- */

#define PHUB_WIRE_RING_MAX_RACKS 16
#define PHUB_WIRE_RING_HELLO_MAX_ENDPOINTS 64

/*
 * RING_HELLO and RING_HELLO_ACK body, 88 bytes, then endpoint_count endpoint entries of 8
 * bytes (struct phub_wire_endpoint_entry): the data endpoints where the sender takes ring
 * datagrams (the first is the one its ring datagrams come from and go to).
 *
 * +---------------------------------------------------------------+
 * |      name: 64 bytes, the job's, as in JOIN                ... |  0
 * +---------------------------------------------------------------+
 * |                 nonce (64 bits): the job's secret             | 64
 * +---------------------------------------------------------------+
 * |  token (64 bits): what ring datagrams to the sender carry,    | 72
 * |  and the RING_ACKs it sends; never 0                          |
 * +-------------------------------+-------------------------------+
 * |        racks (2 .. 16)        |   pos (the sender's, < racks) | 80
 * +-------------------------------+-------------------------------+
 * |   endpoint_count (1 .. 64)    |   caps (PHUB_WIRE_RING_CAP_*) | 84
 * +-------------------------------+-------------------------------+
 *
 * caps (the field reserved before): PHUB_WIRE_RING_CAP_STATE says that 12 bytes follow
 * the endpoints, the sender's checkpoint state of the job: its ring generation (u32; 0: never
 * restored, or restored at its start and not yet given one), the checkpoint iteration its job
 * was restored at (u32; PHUB_WIRE_RING_HELLO_NONE: never restored) and its newest checkpoint
 * file of the job (u32; NONE: none); docs/protocol.md section 12. A PBox that keeps no
 * checkpoints sends no flag and no trailer, as before.
 */
struct __attribute__((packed)) phub_wire_ring_hello_body {
	char name[PHUB_WIRE_JOB_NAME_LEN];
	phub_be64_t nonce;
	phub_be64_t token;
	phub_be16_t racks;
	phub_be16_t pos;
	phub_be16_t endpoint_count;
	phub_be16_t caps;		/* PHUB_WIRE_RING_CAP_*; was reserved (0) */
};

/*
 * What the sender's ring speaks (the body's caps; 0 before them, the field was reserved). The
 * two ends of a link must speak the same: a segment's parts are the whole ring's choice.
 * WHOLE: each ring datagram carries a whole segment, the segments' roots taking turns
 * (docs/protocol.md section 12); without it a segment is cut in R parts. ACKV: it
 * acknowledges with RING_ACKV. These are the ring's format, compared between neighbours.
 * STATE is not part of the format: it says a state trailer (generation, base, newest
 * checkpoint; u32 each) ends the body, and is parsed into `state`, not `caps`. Other bits are
 * refused (ring_hello_bad_fields).
 */
#define PHUB_WIRE_RING_CAP_WHOLE	0x0001
#define PHUB_WIRE_RING_CAP_ACKV		0x0002
#define PHUB_WIRE_RING_CAP_ALL		(PHUB_WIRE_RING_CAP_WHOLE | PHUB_WIRE_RING_CAP_ACKV)
#define PHUB_WIRE_RING_CAP_STATE	0x0004u
/* The sender's job authenticates its ring (flag AUTH on every ring datagram; docs/protocol.md). */
#define PHUB_WIRE_RING_CAP_AUTH		0x0008u
#define PHUB_WIRE_RING_HELLO_STATE_BYTES 12
#define PHUB_WIRE_RING_HELLO_NONE 0xffffffffu	/* no such iteration */

static_assert(sizeof(struct phub_wire_ring_hello_body) == 88, "RING_HELLO body is 88 bytes");

/* One RING_HELLO or RING_HELLO_ACK, parsed or to send. */
struct phub_wire_ring_hello {
	uint32_t job_id;		/* the header's: the sender's id of the job (not parsed) */
	char name[PHUB_WIRE_JOB_NAME_LEN];
	uint64_t nonce;
	uint64_t token;
	uint16_t racks;
	uint16_t pos;
	uint16_t endpoint_count;
	uint16_t caps;			/* PHUB_WIRE_RING_CAP_WHOLE | _ACKV | _AUTH bits */
	struct phub_wire_endpoint endpoints[PHUB_WIRE_RING_HELLO_MAX_ENDPOINTS];
	/* The state trailer: state false, the rest 0, when the flag is not set. */
	bool state;
	uint32_t generation;		/* the ring state's generation (0: none yet) */
	uint32_t base_iteration;	/* the checkpoint its job went back to; NONE: never */
	uint32_t newest_ckpt;		/* its newest checkpoint file of the job; NONE: none */
};

/*
 * Write a whole RING_HELLO or RING_HELLO_ACK datagram (opcode), worker_rank = h->pos, job_id =
 * h->job_id. Bytes,
 * -EINVAL (a field out of its bounds) or -ENOSPC.
 */
int phub_wire_ring_hello_write(void *buf, size_t cap, uint8_t opcode,
		const struct phub_wire_ring_hello *h);
/* Validate a RING_HELLO(_ACK) body of len bytes; never reads past body + len. */
enum phub_drop_reason phub_wire_ring_hello_parse(const void *body, size_t len,
		struct phub_wire_ring_hello *out);

/* ---- RING_ACKV (docs/protocol.md section 12) ---- */

/*
 * One entry of a RING_ACKV body, 16 bytes, big-endian: the RING_REDUCE/RING_GATHER it
 * acknowledges, as a RING_ACK would name it.
 *
 * +-------------------------------+-------------------------------+
 * |                           chunk_id                            |  0
 * +-------------------------------+-------------------------------+
 * |  seg_index (in the chunk)     |           flags (0)           |  4
 * +-------------------------------+-------------------------------+
 * |                           iteration                           |  8
 * +---------------------------------------------------------------+
 * |            aux: the ring step, echoed (< 2 (16 - 1))          | 12
 * +---------------------------------------------------------------+
 */
struct __attribute__((packed)) phub_wire_ring_ack_entry {
	phub_be32_t chunk_id;
	phub_be16_t seg_index;
	phub_be16_t flags;
	phub_be32_t iteration;
	phub_be32_t aux;
};

static_assert(sizeof(struct phub_wire_ring_ack_entry) == 16, "RING_ACKV entry is 16 bytes");

/*
 * Entries in one RING_ACKV at most: 1024 bytes of body, more than the ring datagrams of a
 * receive burst (32) and an inbox burst together. A sender puts fewer where its MTU is
 * smaller (phub_wire_max_payload() / 16: 30 at PHUB_WIRE_MIN_MTU).
 */
#define PHUB_WIRE_RING_ACKV_MAX 64

/* One RING_ACKV entry in host order. */
struct phub_wire_ring_ack {
	uint32_t chunk_id;
	uint16_t seg_index;
	uint32_t iteration;
	uint32_t step;			/* aux */
};

/*
 * Validate a RING_ACKV body of len bytes: 1 .. PHUB_WIRE_RING_ACKV_MAX whole entries, flags 0,
 * steps below 2 (PHUB_WIRE_RING_MAX_RACKS - 1). PHUB_DROP_OK and *count, or the reason.
 */
enum phub_drop_reason phub_wire_ring_ackv_parse(const void *body, size_t len,
		unsigned int *count);
/* Entry i of a body phub_wire_ring_ackv_parse() took. */
void phub_wire_ring_ackv_get(const void *body, unsigned int i, struct phub_wire_ring_ack *out);
/* Write entry i of a body (16 bytes at body + 16 i). */
void phub_wire_ring_ackv_put(void *body, unsigned int i, const struct phub_wire_ring_ack *e);

#ifdef __cplusplus
}
#endif

#endif /* PHUB_WIRE_H */
