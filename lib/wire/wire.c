/* SPDX-License-Identifier: BSD-3-Clause */
/* The datagram header: names, sizes, the opcode table, header encode and the validator. */

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "phub_wire.h"
#include "wire_priv.h"

/* The counts beside the enums of phub_types.h cover their tables, and NONE is none of them. */
#define ONE_DTYPE_(n, v, sz, s) +1
#define ONE_OPT_(n, v, s) +1
static_assert(PHUB_DTYPE_COUNT == 0 PHUB_FOREACH_DTYPE(ONE_DTYPE_), "PHUB_DTYPE_COUNT");
static_assert(PHUB_OPT_COUNT == 0 PHUB_FOREACH_OPT(ONE_OPT_), "PHUB_OPT_COUNT");
static_assert(PHUB_WIRE_DTYPE_NONE >= PHUB_DTYPE_COUNT, "PHUB_WIRE_DTYPE_NONE is a dtype");
#undef ONE_DTYPE_
#undef ONE_OPT_

/* What the validator knows about one opcode value; the X-macro list is its only source. */
struct wire_op {
	const char *name;
	uint8_t valid;
	uint8_t use;		/* PHUB_WIRE_USE_* */
	uint8_t payload;	/* enum phub_wire_payload */
};

static const struct wire_op wire_ops[256] = {
#define WIRE_OP_ENTRY(n, v, s, u, pl) \
	[v] = { .name = s, .valid = 1, .use = (u), .payload = PHUB_WIRE_PAYLOAD_##pl },
	PHUB_WIRE_OPCODES(WIRE_OP_ENTRY)
#undef WIRE_OP_ENTRY
};

static const char *const drop_names[] = {
#define DROP_NAME(n, s) [PHUB_DROP_##n] = s,
	PHUB_DROP_REASONS(DROP_NAME)
#undef DROP_NAME
};

static_assert(sizeof(drop_names) / sizeof(drop_names[0]) == PHUB_DROP_REASON_MAX,
		"one name per drop reason");

const char *
phub_drop_reason_name(enum phub_drop_reason reason)
{
	if ((unsigned int)reason >= PHUB_DROP_REASON_MAX)
		return "unknown";
	return drop_names[reason];
}

const char *
phub_wire_opcode_name(uint8_t opcode)
{
	return wire_ops[opcode].valid ? wire_ops[opcode].name : "unknown";
}

const char *
phub_wire_dtype_name(uint8_t dtype)
{
	const char *name = phub_dtype_name((enum phub_dtype)dtype);

	if (dtype == PHUB_WIRE_DTYPE_NONE)
		return "none";
	return name != NULL ? name : "unknown";
}

unsigned int
phub_wire_dtype_size(uint8_t dtype)
{
	return (unsigned int)phub_dtype_size((enum phub_dtype)dtype);
}

const char *
phub_wire_error_name(uint16_t code)
{
	switch (code) {
#define ERROR_NAME(n, v, s) case (v): return s;
	PHUB_WIRE_ERRORS(ERROR_NAME)
#undef ERROR_NAME
	}
	return "unknown";
}

const char *
phub_wire_optimizer_name(uint8_t optimizer)
{
	const char *name = phub_opt_type_name((enum phub_opt_type)optimizer);

	return name != NULL ? name : "unknown";
}

int
phub_wire_max_payload(unsigned int mtu)
{
	unsigned int room;

	if (mtu < PHUB_WIRE_MIN_MTU)
		return -EINVAL;
	/* An IPv4 datagram is at most 65535 bytes whatever the link says. */
	if (mtu > PHUB_WIRE_MAX_DATAGRAM + PHUB_WIRE_IPV4_UDP_OVERHEAD)
		mtu = PHUB_WIRE_MAX_DATAGRAM + PHUB_WIRE_IPV4_UDP_OVERHEAD;
	room = mtu - PHUB_WIRE_IPV4_UDP_OVERHEAD - PHUB_WIRE_HDR_LEN;
	return (int)room;
}

int
phub_wire_max_elems(unsigned int mtu, uint8_t dtype)
{
	return phub_wire_max_elems_room(mtu, dtype, 0);
}

int
phub_wire_max_elems_room(unsigned int mtu, uint8_t dtype, unsigned int extra)
{
	unsigned int size = phub_wire_dtype_size(dtype);
	int room = phub_wire_max_payload(mtu);
	unsigned int elems;

	if (room < 0)
		return room;
	if (size == 0 || extra > 256)
		return -EINVAL;
	/* A whole segment must still fit when its PUSH carries every header extension. */
	room -= PHUB_WIRE_HDR_LEN_MAX - PHUB_WIRE_HDR_LEN + (int)extra;
	elems = (unsigned int)room / size;
	elems -= elems % PHUB_WIRE_ELEM_ALIGN;
	return (int)elems;
}

void
phub_wire_msg_init(struct phub_wire_msg *msg, uint8_t opcode)
{
	memset(msg, 0, sizeof(*msg));
	msg->opcode = opcode;
	msg->hdr_len = PHUB_WIRE_HDR_LEN;
	msg->seg_count = 1;
	msg->flags = PHUB_WIRE_F_LAST;
	msg->dtype = PHUB_WIRE_DTYPE_NONE;
}

/* The body of a control opcode, and how it must agree with the header. */
static enum phub_drop_reason
check_body(const struct phub_wire_msg *m)
{
	enum phub_drop_reason r = PHUB_DROP_OK;

	switch (m->opcode) {
	case PHUB_WIRE_OP_JOIN: {
		struct phub_wire_join_seg seg;

		r = phub_wire_join_parse(m->payload, m->payload_len, &seg);
		/* The rank is said twice; a sender that disagrees with itself is not believed. */
		if (r == PHUB_DROP_OK && seg.join.rank != m->worker_rank)
			r = PHUB_DROP_JOIN_RANK_MISMATCH;
		break;
	}
	case PHUB_WIRE_OP_JOIN_ACK: {
		struct phub_wire_join_ack_seg seg;

		r = phub_wire_join_ack_parse(m->payload, m->payload_len, &seg);
		/* The body's job must be the header's, which the worker will send back. */
		if (r == PHUB_DROP_OK && seg.ack.job_id != m->job_id)
			r = PHUB_DROP_JOIN_ACK_JOB;
		break;
	}
	case PHUB_WIRE_OP_RING_HELLO:
	case PHUB_WIRE_OP_RING_HELLO_ACK: {
		struct phub_wire_ring_hello hello;

		r = phub_wire_ring_hello_parse(m->payload, m->payload_len, &hello);
		/* The position is said twice, as JOIN's rank. */
		if (r == PHUB_DROP_OK && hello.pos != m->worker_rank)
			r = PHUB_DROP_RING_HELLO_FIELDS;
		break;
	}
	case PHUB_WIRE_OP_ACKV: {
		unsigned int count;

		r = phub_wire_ackv_parse(m->payload, m->payload_len, &count);
		break;
	}
	case PHUB_WIRE_OP_RING_ACKV: {
		unsigned int count;

		r = phub_wire_ring_ackv_parse(m->payload, m->payload_len, &count);
		break;
	}
	case PHUB_WIRE_OP_ERROR: {
		struct phub_wire_error_msg err;

		r = phub_wire_error_parse(m->payload, m->payload_len, &err);
		/* aux carries the code for readers that skip the body; both must agree. */
		if (r == PHUB_DROP_OK && err.code != m->aux)
			r = PHUB_DROP_ERROR_CODE;
		break;
	}
	default:
		break;
	}
	return r;
}

/*
 * Every rule on the host-order fields, shared by the validator and the encoders so that whatever
 * the encoders write, the validator takes. The body is checked when with_body is set.
 */
static inline __attribute__((always_inline)) enum phub_drop_reason
check_fields(const struct phub_wire_msg *m, bool with_body)
{
	const struct wire_op *op = &wire_ops[m->opcode];
	unsigned int size;

	/* Flags this version does not define: the sender means something we cannot honour. */
	if ((m->flags & ~PHUB_WIRE_F_ALL) != 0)
		return PHUB_DROP_BAD_FLAGS;
	/* An opcode we do not know; in the ring range it is one kept for later PBox traffic. */
	if (!op->valid) {
		if (m->opcode >= PHUB_WIRE_OP_RING_FIRST && m->opcode <= PHUB_WIRE_OP_RING_LAST)
			return PHUB_DROP_RESERVED_OPCODE;
		return PHUB_DROP_BAD_OPCODE;
	}
	/* Elements need a numeric dtype to size and add them; everything else says NONE. */
	size = phub_wire_dtype_size(m->dtype);
	if (op->payload == PHUB_WIRE_PAYLOAD_ELEMS ? size == 0 : m->dtype != PHUB_WIRE_DTYPE_NONE)
		return PHUB_DROP_BAD_DTYPE;
	/* A message of zero datagrams cannot be this one. */
	if (m->seg_count == 0)
		return PHUB_DROP_SEG_COUNT_ZERO;
	/* The segment must lie in its message, or a reassembler would index past its map. */
	if (m->seg_index >= m->seg_count)
		return PHUB_DROP_SEG_INDEX;
	/* LAST marks exactly the final segment; disagreement means a damaged or buggy sender. */
	if (((m->flags & PHUB_WIRE_F_LAST) != 0) != (m->seg_index == m->seg_count - 1))
		return PHUB_DROP_SEG_LAST;
	/* Opcodes without payload get none: bytes after their header would be unaccounted for. */
	if (op->payload == PHUB_WIRE_PAYLOAD_NONE && m->payload_len != 0)
		return PHUB_DROP_PAYLOAD_NOT_ALLOWED;
	/* Fields the opcode does not use are 0, so a later version may give them a meaning. */
	if ((!(op->use & PHUB_WIRE_USE_JOB) && m->job_id != 0) ||
	    (!(op->use & PHUB_WIRE_USE_TOKEN) && m->session_token != 0) ||
	    (!(op->use & PHUB_WIRE_USE_CHUNK) && m->chunk_id != 0) ||
	    (!(op->use & PHUB_WIRE_USE_ITER) && m->iteration != 0) ||
	    (!(op->use & PHUB_WIRE_USE_ELEMS) && (m->elem_offset != 0 || m->elem_count != 0)) ||
	    (!(op->use & PHUB_WIRE_USE_AUX) && m->aux != 0))
		return PHUB_DROP_UNUSED_FIELD;
	if (op->use & PHUB_WIRE_USE_RANGE) {
		/* A segment, ACK or PULL of no elements names nothing. */
		if (m->elem_count == 0)
			return PHUB_DROP_ELEM_COUNT_ZERO;
		/* The range must not wrap around the 32-bit element index. */
		if ((uint64_t)m->elem_offset + m->elem_count > UINT32_MAX + (uint64_t)1)
			return PHUB_DROP_ELEM_RANGE;
	}
	/* The payload is exactly elem_count elements: the adder reads elem_count * size bytes. */
	if (op->payload == PHUB_WIRE_PAYLOAD_ELEMS &&
	    (uint64_t)m->elem_count * size != m->payload_len)
		return PHUB_DROP_ELEM_COUNT;
	/* The MAC covers what the CRC would: a datagram carries one or the other. */
	if ((m->flags & PHUB_WIRE_F_AUTH) && (m->flags & PHUB_WIRE_F_CSUM))
		return PHUB_DROP_BAD_AUTH_EXT;
	/* Step hyper-parameters ride on PUSH only, and must be usable as the kernels' are. */
	if (m->flags & PHUB_WIRE_F_HYPER) {
		if (m->opcode != PHUB_WIRE_OP_PUSH || !isfinite(m->hyper_lr) || m->hyper_lr < 0 ||
		    !isfinite(m->hyper_weight_decay) || m->hyper_weight_decay < 0)
			return PHUB_DROP_BAD_HYPER;
	}
	/* A JOIN_ACK hands out a session; token 0 is the "no session" of JOIN and PING. */
	if (m->opcode == PHUB_WIRE_OP_JOIN_ACK && m->session_token == 0)
		return PHUB_DROP_JOIN_ACK_TOKEN;
	if (op->payload == PHUB_WIRE_PAYLOAD_BODY && with_body)
		return check_body(m);
	return PHUB_DROP_OK;
}

enum phub_drop_reason
phub_wire_msg_check(const struct phub_wire_msg *msg)
{
	return check_fields(msg, msg->payload != NULL || msg->payload_len == 0);
}

uint32_t
phub_wire_csum_payload(const void *payload, size_t len)
{
	return len == 0 ? 0 : phub_crc32c(0, payload, len);
}

uint32_t
phub_wire_csum_finish(uint32_t payload_crc, const void *hdr, size_t hdr_len)
{
	static const uint8_t zero[4];
	const uint8_t *h = hdr;
	uint32_t crc;

	static_assert(offsetof(struct phub_wire_hdr, csum) + sizeof(zero) == PHUB_WIRE_HDR_LEN,
			"csum is the last word of the fixed header");
	crc = phub_crc32c(payload_crc, h, offsetof(struct phub_wire_hdr, csum));
	crc = phub_crc32c(crc, zero, sizeof(zero));
	/* The extension of a longer header, if any, is covered too. */
	return phub_crc32c(crc, h + PHUB_WIRE_HDR_LEN, hdr_len - PHUB_WIRE_HDR_LEN);
}

unsigned int
phub_wire_auth_ext_len(uint8_t opcode)
{
	switch (opcode) {
	case PHUB_WIRE_OP_JOIN:
	case PHUB_WIRE_OP_JOIN_ACK:
	case PHUB_WIRE_OP_RING_HELLO:
	case PHUB_WIRE_OP_RING_HELLO_ACK:
		return PHUB_WIRE_AUTH_PK_LEN + PHUB_WIRE_AUTH_TRAILER_LEN;
	default:
		return PHUB_WIRE_AUTH_TRAILER_LEN;
	}
}

/* The header length msg is encoded with: the HYPER and AUTH extensions make it longer. */
static inline size_t
hdr_len_of(const struct phub_wire_msg *m)
{
	size_t len = (m->flags & PHUB_WIRE_F_HYPER) ? PHUB_WIRE_HDR_LEN_HYPER : PHUB_WIRE_HDR_LEN;

	if (m->flags & PHUB_WIRE_F_AUTH)
		len += phub_wire_auth_ext_len(m->opcode);
	return len;
}

/* Store msg's fields as a version 1 header at buf, with csum finished from payload_crc. */
static void
hdr_store(uint8_t *buf, const struct phub_wire_msg *m, uint32_t payload_crc)
{
	size_t hdr_len = hdr_len_of(m);
	struct phub_wire_hdr h;

	wire_st16(&h.magic, PHUB_WIRE_MAGIC);
	h.version = PHUB_WIRE_VERSION;
	h.opcode = m->opcode;
	h.flags = m->flags;
	h.hdr_len = (uint8_t)hdr_len;
	h.dtype = m->dtype;
	h.priority = m->priority;
	wire_st32(&h.job_id, m->job_id);
	wire_st16(&h.worker_rank, m->worker_rank);
	wire_st16(&h.seg_index, m->seg_index);
	wire_st16(&h.seg_count, m->seg_count);
	wire_st16(&h.payload_len, m->payload_len);
	h.reserved = 0;
	wire_st64(&h.session_token, m->session_token);
	wire_st32(&h.chunk_id, m->chunk_id);
	wire_st32(&h.iteration, m->iteration);
	wire_st32(&h.elem_offset, m->elem_offset);
	wire_st32(&h.elem_count, m->elem_count);
	wire_st32(&h.aux, m->aux);
	h.csum = 0;
	memcpy(buf, &h, sizeof(h));
	if (m->flags & PHUB_WIRE_F_HYPER) {
		struct phub_wire_hyper_ext x;

		wire_st32(&x.lr, phub_f32_bits(m->hyper_lr));
		wire_st32(&x.weight_decay, phub_f32_bits(m->hyper_weight_decay));
		memcpy(buf + PHUB_WIRE_HDR_LEN, &x, sizeof(x));
	}
	/* The key, sequence number and tag are the sealer's (lib/auth); nothing stale stays. */
	if (m->flags & PHUB_WIRE_F_AUTH)
		memset(buf + hdr_len - phub_wire_auth_ext_len(m->opcode), 0,
				phub_wire_auth_ext_len(m->opcode));
	if (m->flags & PHUB_WIRE_F_CSUM)
		wire_st32(buf + offsetof(struct phub_wire_hdr, csum),
				phub_wire_csum_finish(payload_crc, buf, hdr_len));
}

int
phub_wire_hdr_encode(void *buf, size_t cap, const struct phub_wire_msg *msg,
		uint32_t payload_crc)
{
	if (buf == NULL || msg == NULL || check_fields(msg, false) != PHUB_DROP_OK)
		return -EINVAL;
	if (cap < hdr_len_of(msg))
		return -ENOSPC;
	hdr_store(buf, msg, payload_crc);
	return (int)hdr_len_of(msg);
}

int
phub_wire_encode(void *buf, size_t cap, const struct phub_wire_msg *msg)
{
	uint8_t *p = buf;
	size_t total, hl;

	if (buf == NULL || msg == NULL || (msg->payload_len != 0 && msg->payload == NULL))
		return -EINVAL;
	if (check_fields(msg, true) != PHUB_DROP_OK)
		return -EINVAL;
	hl = hdr_len_of(msg);
	total = hl + msg->payload_len;
	if (total > PHUB_WIRE_MAX_DATAGRAM)
		return -EINVAL;
	if (cap < total)
		return -ENOSPC;
	/* The payload may already be in place (a body written behind the header), or overlap. */
	if (msg->payload_len != 0 && msg->payload != p + hl)
		memmove(p + hl, msg->payload, msg->payload_len);
	hdr_store(p, msg, (msg->flags & PHUB_WIRE_F_CSUM) ?
			phub_wire_csum_payload(p + hl, msg->payload_len) : 0);
	return (int)total;
}

/*
 * phub_wire_parse()'s work, inlined into it and into phub_wire_parse_push(), where the opcode
 * and flags the caller checked first make the compiler drop the branches a plain PUSH never
 * takes (the CRC, the extensions, the body, the opcode table's look-ups).
 */
static inline __attribute__((always_inline)) enum phub_drop_reason
parse_inline(const void *buf, size_t len, struct phub_wire_msg *out)
{
	const uint8_t *p = buf;
	struct phub_wire_hdr h;
	uint32_t reserved;

	/* Shorter than the fixed header: no field of it may be read. */
	if (len < PHUB_WIRE_HDR_LEN)
		return PHUB_DROP_TOO_SHORT;
	memcpy(&h, p, sizeof(h));
	/* Not our protocol at all (a stray datagram on the port): counted apart from damage. */
	if (wire_ld16(&h.magic) != PHUB_WIRE_MAGIC)
		return PHUB_DROP_BAD_MAGIC;
	/* Another version may lay out everything after the version byte differently. */
	if (h.version != PHUB_WIRE_VERSION)
		return PHUB_DROP_BAD_VERSION;
	/* Shorter than the fixed part would put payload over header fields; a length that is not
	 * a multiple of 8 would misalign the payload for the adders. */
	if (h.hdr_len < PHUB_WIRE_HDR_LEN || h.hdr_len % PHUB_WIRE_HDR_ALIGN != 0)
		return PHUB_DROP_BAD_HDR_LEN;
	/* A header extension that runs past the datagram: truncated. */
	if (h.hdr_len > len)
		return PHUB_DROP_TOO_SHORT;
	/* The datagram ends exactly at the payload's end: shorter is truncation, longer is bytes
	 * nobody accounts for (and the only bound on what the payload readers may touch). */
	if (len - h.hdr_len != wire_ld16(&h.payload_len))
		return PHUB_DROP_BAD_PAYLOAD_LEN;
	/* Flags this version does not define: the sender means something we cannot honour. */
	if ((h.flags & ~PHUB_WIRE_F_ALL) != 0)
		return PHUB_DROP_BAD_FLAGS;
	if (h.flags & PHUB_WIRE_F_CSUM) {
		/* Checked before any other field so that damage is counted as damage. */
		uint32_t crc = phub_wire_csum_payload(p + h.hdr_len, len - h.hdr_len);

		if (phub_wire_csum_finish(crc, p, h.hdr_len) != wire_ld32(&h.csum))
			return PHUB_DROP_BAD_CSUM;
	} else if (h.csum != 0) {
		/* A checksum the flag does not announce: a lost flag bit or a junk field. */
		return PHUB_DROP_CSUM_WITHOUT_FLAG;
	}

	out->opcode = h.opcode;
	out->flags = h.flags;
	out->hdr_len = h.hdr_len;
	out->dtype = h.dtype;
	out->priority = h.priority;
	out->job_id = wire_ld32(&h.job_id);
	out->worker_rank = wire_ld16(&h.worker_rank);
	out->seg_index = wire_ld16(&h.seg_index);
	out->seg_count = wire_ld16(&h.seg_count);
	out->payload_len = wire_ld16(&h.payload_len);
	out->session_token = wire_ld64(&h.session_token);
	out->chunk_id = wire_ld32(&h.chunk_id);
	out->iteration = wire_ld32(&h.iteration);
	out->elem_offset = wire_ld32(&h.elem_offset);
	out->elem_count = wire_ld32(&h.elem_count);
	out->aux = wire_ld32(&h.aux);
	out->csum = wire_ld32(&h.csum);
	out->payload = out->payload_len != 0 ? p + h.hdr_len : NULL;
	out->hyper_lr = 0;
	out->hyper_weight_decay = 0;
	if (h.flags & PHUB_WIRE_F_HYPER) {
		struct phub_wire_hyper_ext x;

		/* The extension must be there: a header of 56 bytes cannot carry it. */
		if (h.hdr_len < PHUB_WIRE_HDR_LEN_HYPER)
			return PHUB_DROP_BAD_HYPER;
		memcpy(&x, p + PHUB_WIRE_HDR_LEN, sizeof(x));
		out->hyper_lr = phub_f32_from_bits(wire_ld32(&x.lr));
		out->hyper_weight_decay = phub_f32_from_bits(wire_ld32(&x.weight_decay));
	}
	/* The trailer (and a handshake's key) after any other extension must fit the header. */
	if ((h.flags & PHUB_WIRE_F_AUTH) &&
	    h.hdr_len < ((h.flags & PHUB_WIRE_F_HYPER) ? PHUB_WIRE_HDR_LEN_HYPER :
			 PHUB_WIRE_HDR_LEN) + phub_wire_auth_ext_len(h.opcode))
		return PHUB_DROP_BAD_AUTH_EXT;
	reserved = wire_ld32(&h.reserved);

	/* The reserved word is 0 in version 1, kept for a later meaning. */
	if (reserved != 0)
		return PHUB_DROP_UNUSED_FIELD;
	/* Every length is now known to lie within the datagram; the field rules follow. */
	return check_fields(out, true);
}

enum phub_drop_reason
phub_wire_parse(const void *buf, size_t len, struct phub_wire_msg *out)
{
	return parse_inline(buf, len, out);
}

bool
phub_wire_parse_push(const void *buf, size_t len, struct phub_wire_msg *out)
{
	const uint8_t *p = buf;
	uint8_t opcode, flags, hdr_len;

	if (len < PHUB_WIRE_HDR_LEN)
		return false;
	opcode = p[offsetof(struct phub_wire_hdr, opcode)];
	flags = p[offsetof(struct phub_wire_hdr, flags)];
	hdr_len = p[offsetof(struct phub_wire_hdr, hdr_len)];
	if (opcode != PHUB_WIRE_OP_PUSH || (flags & ~PHUB_WIRE_F_LAST) != 0 ||
	    hdr_len != PHUB_WIRE_HDR_LEN)
		return false;
	return parse_inline(buf, len, out) == PHUB_DROP_OK;
}
