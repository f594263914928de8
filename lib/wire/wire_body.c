/* SPDX-License-Identifier: BSD-3-Clause */
/* The control bodies: JOIN, JOIN_ACK and ERROR parse, encode, split by MTU and reassembly. */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "phub_wire.h"
#include "wire_priv.h"

#define JOIN_FIXED sizeof(struct phub_wire_join_body)
#define KEY_ENTRY sizeof(struct phub_wire_key_entry)
#define ACK_FIXED sizeof(struct phub_wire_join_ack_body)
#define EP_ENTRY sizeof(struct phub_wire_endpoint_entry)
#define ERR_FIXED sizeof(struct phub_wire_error_body)
#define CHUNK_UNKNOWN 0xffff

/* A hyper-parameter is a finite number >= 0 (sign bit clear, exponent not all ones): NaN,
 * infinity or a negative rate would poison every step of the optimizer. */
static bool
hyper_ok(uint32_t bits)
{
	return (bits & 0x80000000u) == 0 && (bits & 0x7f800000u) != 0x7f800000u;
}

/* A job name field, as JOIN and RING_HELLO carry it. */
static enum phub_drop_reason
job_name_check(const char name[PHUB_WIRE_JOB_NAME_LEN])
{
	const char *nul;

	/* The name must end within its 64 bytes, or a reader of it would run past the field. */
	nul = memchr(name, '\0', PHUB_WIRE_JOB_NAME_LEN);
	if (nul == NULL)
		return PHUB_DROP_JOIN_NAME_UNTERMINATED;
	/* One job, one spelling: at least one printable ASCII character, NUL padding after it. */
	if (nul == name)
		return PHUB_DROP_JOIN_NAME;
	for (const char *c = name; c < nul; c++)
		if (*c < 0x21 || *c > 0x7e)
			return PHUB_DROP_JOIN_NAME;
	for (const char *c = nul; c < name + PHUB_WIRE_JOB_NAME_LEN; c++)
		if (*c != '\0')
			return PHUB_DROP_JOIN_NAME;
	return PHUB_DROP_OK;
}

enum phub_drop_reason
phub_wire_join_parse(const void *body, size_t len, struct phub_wire_join_seg *out)
{
	struct phub_wire_join_body b;
	enum phub_drop_reason r;
	unsigned int esize;

	/* Shorter than the fixed part: not even the key counts are there. */
	if (body == NULL || len < JOIN_FIXED)
		return PHUB_DROP_BODY_SHORT;
	memcpy(&b, body, sizeof(b));
	r = job_name_check(b.name);
	if (r != PHUB_DROP_OK)
		return r;

	memset(out, 0, sizeof(*out));
	memcpy(out->join.name, b.name, sizeof(b.name));
	out->join.nonce = wire_ld64(&b.nonce);
	out->join.rank = wire_ld16(&b.rank);
	out->join.world_size = wire_ld16(&b.world_size);
	out->join.dtype = b.dtype;
	out->join.optimizer = b.optimizer;
	out->join.join_flags = wire_ld16(&b.join_flags);
	out->join.chunk_bytes = wire_ld32(&b.chunk_bytes);
	out->total_keys = wire_ld32(&b.total_keys);
	out->first_key = wire_ld32(&b.first_key);
	out->key_count = wire_ld32(&b.key_count);

	/* A job of no workers has nobody to serve. */
	if (out->join.world_size == 0)
		return PHUB_DROP_JOIN_WORLD_SIZE;
	/* Ranks are 0 .. world_size - 1; another would index past the job's rank bitmap. */
	if (out->join.rank >= out->join.world_size)
		return PHUB_DROP_JOIN_RANK;
	/* The job's elements must be a type the adders know. */
	esize = phub_wire_dtype_size(out->join.dtype);
	if (esize == 0)
		return PHUB_DROP_JOIN_DTYPE;
	/* An optimizer we do not know would leave the model unchanged without saying so. */
	if (strcmp(phub_wire_optimizer_name(out->join.optimizer), "unknown") == 0)
		return PHUB_DROP_JOIN_OPTIMIZER;
	/* Join flags this version does not define: a behaviour we cannot give. */
	if ((out->join.join_flags & ~PHUB_WIRE_JOIN_F_ALL) != 0)
		return PHUB_DROP_JOIN_FLAGS;
	{
		/* lr, momentum, weight_decay, beta1, beta2, eps: six consecutive float32. */
		const uint8_t *hp = (const uint8_t *)body +
			offsetof(struct phub_wire_join_body, lr);
		float *hf[] = { &out->join.hyper.lr, &out->join.hyper.momentum,
				&out->join.hyper.weight_decay, &out->join.hyper.beta1,
				&out->join.hyper.beta2, &out->join.hyper.eps };

		for (size_t i = 0; i < sizeof(hf) / sizeof(hf[0]); i++) {
			uint32_t bits = wire_ld32(hp + i * sizeof(uint32_t));

			/* Finite and >= 0, see hyper_ok(). */
			if (!hyper_ok(bits))
				return PHUB_DROP_JOIN_HYPER;
			*hf[i] = phub_f32_from_bits(bits);
		}
	}
	/* A chunk is whole elements (0 asks for the PBox's default). */
	if (out->join.chunk_bytes % esize != 0)
		return PHUB_DROP_JOIN_CHUNK_BYTES;
	/* The datagram holds exactly key_count entries, at least one: the count is what the key
	 * loop below trusts, so it must agree with the bytes that are really there. */
	if (out->key_count == 0 || (uint64_t)out->key_count * KEY_ENTRY != len - JOIN_FIXED)
		return PHUB_DROP_JOIN_KEY_COUNT;
	/* This datagram's keys lie within a non-empty layout (64-bit sum: no wrap). */
	if (out->total_keys == 0 ||
	    (uint64_t)out->first_key + out->key_count > out->total_keys)
		return PHUB_DROP_JOIN_KEY_RANGE;
	out->keys = (const uint8_t *)body + JOIN_FIXED;
	/* A key of no elements would give chunks of no elements. */
	for (uint32_t i = 0; i < out->key_count; i++)
		if (wire_ld32(out->keys + i * KEY_ENTRY + 4) == 0)
			return PHUB_DROP_JOIN_KEY_EMPTY;
	return PHUB_DROP_OK;
}

struct phub_wire_key
phub_wire_join_seg_key(const struct phub_wire_join_seg *seg, uint32_t i)
{
	struct phub_wire_key k;

	k.key_id = wire_ld32(seg->keys + (size_t)i * KEY_ENTRY);
	k.elem_count = wire_ld32(seg->keys + (size_t)i * KEY_ENTRY + 4);
	return k;
}

/* The fixed part of a JOIN body, in wire order, at buf (JOIN_FIXED bytes). */
static void
join_fixed_store(uint8_t *buf, const struct phub_wire_join *j, uint32_t total_keys,
		uint32_t first_key, uint32_t key_count)
{
	struct phub_wire_join_body b;

	memset(&b, 0, sizeof(b));
	/* Up to the NUL only, so whatever the caller left after it is sent as padding; a name
	 * without a NUL is copied whole and the parser then refuses it. */
	memcpy(b.name, j->name, strnlen(j->name, sizeof(b.name)));
	wire_st64(&b.nonce, j->nonce);
	wire_st16(&b.rank, j->rank);
	wire_st16(&b.world_size, j->world_size);
	b.dtype = j->dtype;
	b.optimizer = j->optimizer;
	wire_st16(&b.join_flags, j->join_flags);
	wire_st32(&b.lr, phub_f32_bits(j->hyper.lr));
	wire_st32(&b.momentum, phub_f32_bits(j->hyper.momentum));
	wire_st32(&b.weight_decay, phub_f32_bits(j->hyper.weight_decay));
	wire_st32(&b.beta1, phub_f32_bits(j->hyper.beta1));
	wire_st32(&b.beta2, phub_f32_bits(j->hyper.beta2));
	wire_st32(&b.eps, phub_f32_bits(j->hyper.eps));
	wire_st32(&b.chunk_bytes, j->chunk_bytes);
	wire_st32(&b.total_keys, total_keys);
	wire_st32(&b.first_key, first_key);
	wire_st32(&b.key_count, key_count);
	memcpy(buf, &b, sizeof(b));
}

int
phub_wire_join_seg_encode(void *buf, size_t cap, const struct phub_wire_join_seg *seg)
{
	struct phub_wire_join_seg check;
	size_t len;

	if (buf == NULL || seg == NULL || (seg->key_count != 0 && seg->keys == NULL))
		return -EINVAL;
	len = JOIN_FIXED + (size_t)seg->key_count * KEY_ENTRY;
	if (len > PHUB_WIRE_MAX_DATAGRAM)
		return -EINVAL;
	if (cap < len)
		return -ENOSPC;
	join_fixed_store(buf, &seg->join, seg->total_keys, seg->first_key, seg->key_count);
	memmove((uint8_t *)buf + JOIN_FIXED, seg->keys, (size_t)seg->key_count * KEY_ENTRY);
	/* What we write must be what a receiver takes. */
	if (phub_wire_join_parse(buf, len, &check) != PHUB_DROP_OK)
		return -EINVAL;
	return (int)len;
}

/*
 * A JOIN's key table and a JOIN_ACK's chunk map are split over datagrams the same way: per
 * entries in each, the last one short. These three are that split; each message adds its body.
 */

/* Datagrams that carry total entries at per a datagram (per < 0 is passed on), or -EINVAL when
 * seg_count could not say it. */
static int
segment_count(uint64_t total, int per)
{
	uint64_t segs;

	if (per < 0)
		return per;
	segs = (total + (unsigned int)per - 1) / (unsigned int)per;
	if (segs > UINT16_MAX)
		return -EINVAL;
	return (int)segs;
}

/* The entries of segment seg_index: its first into *first, the count returned. */
static uint32_t
segment_entries(uint32_t total, int per, uint16_t seg_index, uint32_t *first)
{
	*first = (uint32_t)seg_index * (uint32_t)per;
	return total - *first < (uint32_t)per ? total - *first : (uint32_t)per;
}

/* Encode segment seg_index of segs around the body written at buf's payload: F_LAST on the last
 * one only, whatever the caller's flags said. */
static int
segment_encode(void *buf, size_t cap, struct phub_wire_msg *msg, uint8_t flags,
		uint16_t seg_index, int segs, size_t body_len)
{
	msg->seg_index = seg_index;
	msg->seg_count = (uint16_t)segs;
	msg->flags = (flags & ~PHUB_WIRE_F_LAST) | (seg_index == segs - 1 ? PHUB_WIRE_F_LAST : 0);
	msg->payload = (uint8_t *)buf + PHUB_WIRE_HDR_LEN;
	msg->payload_len = (uint16_t)body_len;
	return phub_wire_encode(buf, cap, msg);
}

int
phub_wire_join_keys_per_datagram(unsigned int mtu)
{
	int room = phub_wire_max_payload(mtu);

	if (room < 0)
		return room;
	if ((size_t)room < JOIN_FIXED + KEY_ENTRY)
		return -EINVAL;
	return (int)(((size_t)room - JOIN_FIXED) / KEY_ENTRY);
}

int
phub_wire_join_segments(const struct phub_wire_join_params *p, unsigned int mtu)
{
	int per = phub_wire_join_keys_per_datagram(mtu);

	if (per < 0)
		return per;
	if (p == NULL || p->key_count == 0 || p->keys == NULL)
		return -EINVAL;
	return segment_count(p->key_count, per);
}

int
phub_wire_join_write(void *buf, size_t cap, const struct phub_wire_join_params *p,
		unsigned int mtu, uint16_t seg_index)
{
	int segs = phub_wire_join_segments(p, mtu);
	uint8_t *body = (uint8_t *)buf + PHUB_WIRE_HDR_LEN;
	struct phub_wire_msg msg;
	uint32_t first, count;
	size_t len;

	if (segs < 0)
		return segs;
	if (buf == NULL || seg_index >= segs)
		return -EINVAL;
	count = segment_entries(p->key_count, phub_wire_join_keys_per_datagram(mtu), seg_index,
			&first);
	len = JOIN_FIXED + (size_t)count * KEY_ENTRY;
	if (cap < PHUB_WIRE_HDR_LEN + len)
		return -ENOSPC;

	join_fixed_store(body, &p->join, p->key_count, first, count);
	for (uint32_t i = 0; i < count; i++) {
		wire_st32(body + JOIN_FIXED + i * KEY_ENTRY, p->keys[first + i].key_id);
		wire_st32(body + JOIN_FIXED + i * KEY_ENTRY + 4, p->keys[first + i].elem_count);
	}
	phub_wire_msg_init(&msg, PHUB_WIRE_OP_JOIN);
	msg.worker_rank = p->join.rank;
	msg.priority = p->priority;
	return segment_encode(buf, cap, &msg, p->flags, seg_index, segs, len);
}

static bool
join_equal(const struct phub_wire_join *a, const struct phub_wire_join *b)
{
	return a->nonce == b->nonce && a->rank == b->rank && a->world_size == b->world_size &&
		a->join_flags == b->join_flags && a->dtype == b->dtype &&
		a->optimizer == b->optimizer && a->chunk_bytes == b->chunk_bytes &&
		memcmp(a->name, b->name, sizeof(a->name)) == 0 &&
		phub_f32_bits(a->hyper.lr) == phub_f32_bits(b->hyper.lr) &&
		phub_f32_bits(a->hyper.momentum) == phub_f32_bits(b->hyper.momentum) &&
		phub_f32_bits(a->hyper.weight_decay) == phub_f32_bits(b->hyper.weight_decay) &&
		phub_f32_bits(a->hyper.beta1) == phub_f32_bits(b->hyper.beta1) &&
		phub_f32_bits(a->hyper.beta2) == phub_f32_bits(b->hyper.beta2) &&
		phub_f32_bits(a->hyper.eps) == phub_f32_bits(b->hyper.eps);
}

void
phub_wire_join_merge_init(struct phub_wire_join_merge *m, struct phub_wire_key *keys,
		uint32_t keys_cap)
{
	memset(m, 0, sizeof(*m));
	m->keys = keys;
	m->keys_cap = keys_cap;
}

int
phub_wire_join_merge_add(struct phub_wire_join_merge *m, const struct phub_wire_msg *msg,
		const struct phub_wire_join_seg *seg)
{
	if (m == NULL || msg == NULL || seg == NULL || msg->opcode != PHUB_WIRE_OP_JOIN)
		return -EINVAL;
	if (!m->started) {
		if (seg->total_keys > m->keys_cap)
			return -ENOSPC;
		m->join = seg->join;
		m->total_keys = seg->total_keys;
		m->seg_count = msg->seg_count;
		/* elem_count 0 marks a key not yet received: a real key never has 0. */
		memset(m->keys, 0, (size_t)m->total_keys * sizeof(m->keys[0]));
		m->started = true;
	} else if (!join_equal(&m->join, &seg->join) || m->total_keys != seg->total_keys ||
		   m->seg_count != msg->seg_count) {
		return -EINVAL;
	}
	/* Bounded by the parser (first_key + key_count <= total_keys); checked again because the
	 * caller may hand us a segment it built itself. */
	if ((uint64_t)seg->first_key + seg->key_count > m->total_keys)
		return -EINVAL;
	/* A repeated datagram must repeat the same keys; check all before changing any. */
	for (uint32_t i = 0; i < seg->key_count; i++) {
		struct phub_wire_key k = phub_wire_join_seg_key(seg, i);
		const struct phub_wire_key *have = &m->keys[seg->first_key + i];

		if (have->elem_count != 0 &&
		    (have->key_id != k.key_id || have->elem_count != k.elem_count))
			return -EINVAL;
	}
	for (uint32_t i = 0; i < seg->key_count; i++) {
		struct phub_wire_key *have = &m->keys[seg->first_key + i];

		if (have->elem_count == 0) {
			*have = phub_wire_join_seg_key(seg, i);
			m->keys_filled++;
		}
	}
	return m->keys_filled == m->total_keys ? 1 : 0;
}

enum phub_drop_reason
phub_wire_join_ack_parse(const void *body, size_t len, struct phub_wire_join_ack_seg *out)
{
	struct phub_wire_join_ack_body b;
	const uint8_t *p = body;

	/* Shorter than the fixed part: not even the table sizes are there. */
	if (body == NULL || len < ACK_FIXED)
		return PHUB_DROP_BODY_SHORT;
	memcpy(&b, body, sizeof(b));
	memset(out, 0, sizeof(*out));
	out->ack.job_id = wire_ld32(&b.job_id);
	out->ack.iteration = wire_ld32(&b.iteration);
	out->ack.chunk_bytes = wire_ld32(&b.chunk_bytes);
	out->ack.seg_elems = wire_ld32(&b.seg_elems);
	out->total_chunks = wire_ld32(&b.total_chunks);
	out->first_chunk = wire_ld32(&b.first_chunk);
	out->chunk_count = wire_ld32(&b.chunk_count);
	out->endpoint_count = wire_ld16(&b.endpoint_count);

	/* Chunks and segments of no size cannot be pushed; segments are whole SIMD vectors. */
	if (out->ack.chunk_bytes == 0 || out->ack.seg_elems == 0 ||
	    out->ack.seg_elems % PHUB_WIRE_ELEM_ALIGN != 0)
		return PHUB_DROP_JOIN_ACK_GEOMETRY;
	/* This datagram's chunks lie within a non-empty map (64-bit sum: no wrap). */
	if (out->total_chunks == 0 || out->chunk_count == 0 ||
	    (uint64_t)out->first_chunk + out->chunk_count > out->total_chunks)
		return PHUB_DROP_JOIN_ACK_CHUNK_RANGE;
	/* Somebody must serve the chunks. */
	if (out->endpoint_count == 0)
		return PHUB_DROP_JOIN_ACK_ENDPOINT;
	/* The reserved half-word is 0 in version 1. */
	if (wire_ld16(&b.reserved) != 0)
		return PHUB_DROP_UNUSED_FIELD;
	/* The datagram holds exactly the two tables the counts announce; the loops below and the
	 * accessors trust the counts. */
	if ((uint64_t)ACK_FIXED + (uint64_t)out->endpoint_count * EP_ENTRY +
	    (uint64_t)out->chunk_count * 2 != len)
		return PHUB_DROP_JOIN_ACK_LENGTH;
	out->endpoints = p + ACK_FIXED;
	out->chunk_endpoints = out->endpoints + (size_t)out->endpoint_count * EP_ENTRY;
	/* A port 0 endpoint cannot be sent to; the pad is 0 like every reserved field. */
	for (uint16_t i = 0; i < out->endpoint_count; i++) {
		const uint8_t *e = out->endpoints + (size_t)i * EP_ENTRY;

		if (wire_ld16(e + 4) == 0 || wire_ld16(e + 6) != 0)
			return PHUB_DROP_JOIN_ACK_ENDPOINT;
	}
	/* Every chunk names an endpoint of the table, or the worker would index past it. */
	for (uint32_t i = 0; i < out->chunk_count; i++)
		if (wire_ld16(out->chunk_endpoints + (size_t)i * 2) >= out->endpoint_count)
			return PHUB_DROP_JOIN_ACK_ENDPOINT_INDEX;
	return PHUB_DROP_OK;
}

struct phub_wire_endpoint
phub_wire_join_ack_seg_endpoint(const struct phub_wire_join_ack_seg *seg, uint16_t i)
{
	struct phub_wire_endpoint ep;

	ep.ipv4 = wire_ld32(seg->endpoints + (size_t)i * EP_ENTRY);
	ep.udp_port = wire_ld16(seg->endpoints + (size_t)i * EP_ENTRY + 4);
	return ep;
}

uint16_t
phub_wire_join_ack_seg_chunk(const struct phub_wire_join_ack_seg *seg, uint32_t i)
{
	return wire_ld16(seg->chunk_endpoints + (size_t)i * 2);
}

static void
join_ack_fixed_store(uint8_t *buf, const struct phub_wire_join_ack *a, uint32_t total_chunks,
		uint32_t first_chunk, uint32_t chunk_count, uint16_t endpoint_count)
{
	struct phub_wire_join_ack_body b;

	wire_st32(&b.job_id, a->job_id);
	wire_st32(&b.iteration, a->iteration);
	wire_st32(&b.chunk_bytes, a->chunk_bytes);
	wire_st32(&b.seg_elems, a->seg_elems);
	wire_st32(&b.total_chunks, total_chunks);
	wire_st32(&b.first_chunk, first_chunk);
	wire_st32(&b.chunk_count, chunk_count);
	wire_st16(&b.endpoint_count, endpoint_count);
	b.reserved = 0;
	memcpy(buf, &b, sizeof(b));
}

int
phub_wire_join_ack_seg_encode(void *buf, size_t cap, const struct phub_wire_join_ack_seg *seg)
{
	struct phub_wire_join_ack_seg check;
	size_t ep_len, len;
	uint8_t *p = buf;

	if (buf == NULL || seg == NULL || (seg->endpoint_count != 0 && seg->endpoints == NULL) ||
	    (seg->chunk_count != 0 && seg->chunk_endpoints == NULL))
		return -EINVAL;
	ep_len = (size_t)seg->endpoint_count * EP_ENTRY;
	len = ACK_FIXED + ep_len + (size_t)seg->chunk_count * 2;
	if (len > PHUB_WIRE_MAX_DATAGRAM)
		return -EINVAL;
	if (cap < len)
		return -ENOSPC;
	join_ack_fixed_store(p, &seg->ack, seg->total_chunks, seg->first_chunk, seg->chunk_count,
			seg->endpoint_count);
	memmove(p + ACK_FIXED, seg->endpoints, ep_len);
	memmove(p + ACK_FIXED + ep_len, seg->chunk_endpoints, (size_t)seg->chunk_count * 2);
	/* What we write must be what a receiver takes. */
	if (phub_wire_join_ack_parse(buf, len, &check) != PHUB_DROP_OK)
		return -EINVAL;
	return (int)len;
}

/* Chunk map entries that fit in one JOIN_ACK datagram next to the endpoint table, or -EINVAL. */
static int
join_ack_chunks_per_datagram(const struct phub_wire_join_ack_params *p, unsigned int mtu)
{
	int room = phub_wire_max_payload(mtu);
	size_t fixed;

	if (room < 0)
		return room;
	fixed = ACK_FIXED + (size_t)p->endpoint_count * EP_ENTRY;
	if ((size_t)room < fixed + 2)
		return -EINVAL;
	return (int)(((size_t)room - fixed) / 2);
}

int
phub_wire_join_ack_segments(const struct phub_wire_join_ack_params *p, unsigned int mtu)
{
	if (p == NULL || p->total_chunks == 0 || p->endpoint_count == 0 ||
	    p->endpoints == NULL || p->chunk_endpoints == NULL)
		return -EINVAL;
	return segment_count(p->total_chunks, join_ack_chunks_per_datagram(p, mtu));
}

int
phub_wire_join_ack_write(void *buf, size_t cap, const struct phub_wire_join_ack_params *p,
		unsigned int mtu, uint16_t seg_index)
{
	int segs = phub_wire_join_ack_segments(p, mtu);
	uint8_t *body = (uint8_t *)buf + PHUB_WIRE_HDR_LEN;
	struct phub_wire_msg msg;
	uint32_t first, count;
	size_t ep_len, len;
	uint8_t *map;

	if (segs < 0)
		return segs;
	if (buf == NULL || seg_index >= segs)
		return -EINVAL;
	count = segment_entries(p->total_chunks, join_ack_chunks_per_datagram(p, mtu), seg_index,
			&first);
	ep_len = (size_t)p->endpoint_count * EP_ENTRY;
	len = ACK_FIXED + ep_len + (size_t)count * 2;
	if (cap < PHUB_WIRE_HDR_LEN + len)
		return -ENOSPC;

	join_ack_fixed_store(body, &p->ack, p->total_chunks, first, count, p->endpoint_count);
	for (uint16_t i = 0; i < p->endpoint_count; i++) {
		uint8_t *e = body + ACK_FIXED + (size_t)i * EP_ENTRY;

		wire_st32(e, p->endpoints[i].ipv4);
		wire_st16(e + 4, p->endpoints[i].udp_port);
		wire_st16(e + 6, 0);
	}
	map = body + ACK_FIXED + ep_len;
	for (uint32_t i = 0; i < count; i++)
		wire_st16(map + (size_t)i * 2, p->chunk_endpoints[first + i]);
	phub_wire_msg_init(&msg, PHUB_WIRE_OP_JOIN_ACK);
	msg.job_id = p->ack.job_id;
	msg.session_token = p->session_token;
	msg.worker_rank = p->rank;
	return segment_encode(buf, cap, &msg, p->flags, seg_index, segs, len);
}

void
phub_wire_join_ack_merge_init(struct phub_wire_join_ack_merge *m,
		struct phub_wire_endpoint *endpoints, uint16_t endpoints_cap,
		uint16_t *chunk_endpoints, uint32_t chunks_cap)
{
	memset(m, 0, sizeof(*m));
	m->endpoints = endpoints;
	m->endpoints_cap = endpoints_cap;
	m->chunk_endpoints = chunk_endpoints;
	m->chunks_cap = chunks_cap;
}

int
phub_wire_join_ack_merge_add(struct phub_wire_join_ack_merge *m,
		const struct phub_wire_msg *msg, const struct phub_wire_join_ack_seg *seg)
{
	if (m == NULL || msg == NULL || seg == NULL || msg->opcode != PHUB_WIRE_OP_JOIN_ACK)
		return -EINVAL;
	if (!m->started) {
		if (seg->total_chunks > m->chunks_cap || seg->endpoint_count > m->endpoints_cap)
			return -ENOSPC;
		m->ack = seg->ack;
		m->total_chunks = seg->total_chunks;
		m->endpoint_count = seg->endpoint_count;
		m->seg_count = msg->seg_count;
		for (uint16_t i = 0; i < seg->endpoint_count; i++)
			m->endpoints[i] = phub_wire_join_ack_seg_endpoint(seg, i);
		/* 0xffff marks a chunk not yet mapped: the endpoint table never has that many. */
		for (uint32_t i = 0; i < m->total_chunks; i++)
			m->chunk_endpoints[i] = CHUNK_UNKNOWN;
		m->started = true;
	} else {
		if (memcmp(&m->ack, &seg->ack, sizeof(m->ack)) != 0 ||
		    m->total_chunks != seg->total_chunks ||
		    m->endpoint_count != seg->endpoint_count || m->seg_count != msg->seg_count)
			return -EINVAL;
		for (uint16_t i = 0; i < seg->endpoint_count; i++) {
			struct phub_wire_endpoint ep = phub_wire_join_ack_seg_endpoint(seg, i);

			if (ep.ipv4 != m->endpoints[i].ipv4 ||
			    ep.udp_port != m->endpoints[i].udp_port)
				return -EINVAL;
		}
	}
	if ((uint64_t)seg->first_chunk + seg->chunk_count > m->total_chunks)
		return -EINVAL;
	/* A repeated datagram must repeat the same map; check all before changing any. */
	for (uint32_t i = 0; i < seg->chunk_count; i++) {
		uint16_t have = m->chunk_endpoints[seg->first_chunk + i];

		if (have != CHUNK_UNKNOWN && have != phub_wire_join_ack_seg_chunk(seg, i))
			return -EINVAL;
	}
	for (uint32_t i = 0; i < seg->chunk_count; i++) {
		uint16_t *have = &m->chunk_endpoints[seg->first_chunk + i];

		if (*have == CHUNK_UNKNOWN) {
			*have = phub_wire_join_ack_seg_chunk(seg, i);
			m->chunks_filled++;
		}
	}
	return m->chunks_filled == m->total_chunks ? 1 : 0;
}

/*
 * Well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF, so the
 * text can go to a log or a JSON telemetry string as it is.
 */
static bool
utf8_valid(const uint8_t *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		uint8_t c = s[i];
		size_t n;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			n = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (len - i - 1 < n)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

enum phub_drop_reason
phub_wire_error_parse(const void *body, size_t len, struct phub_wire_error_msg *out)
{
	const uint8_t *p = body;

	/* Shorter than code and length. */
	if (body == NULL || len < ERR_FIXED)
		return PHUB_DROP_BODY_SHORT;
	out->code = wire_ld16(p);
	out->msg_len = wire_ld16(p + 2);
	out->text = (const char *)p + ERR_FIXED;
	/* The text is exactly the rest of the body, and bounded so receivers can keep it. */
	if (out->msg_len > PHUB_WIRE_ERROR_MSG_MAX || ERR_FIXED + (size_t)out->msg_len != len)
		return PHUB_DROP_ERROR_LENGTH;
	/* A code we do not know cannot be acted on. */
	if (strcmp(phub_wire_error_name(out->code), "unknown") == 0)
		return PHUB_DROP_ERROR_CODE;
	/* The text is logged and exported as it is: it must be valid UTF-8. */
	if (!utf8_valid(p + ERR_FIXED, out->msg_len))
		return PHUB_DROP_ERROR_TEXT;
	return PHUB_DROP_OK;
}

int
phub_wire_error_encode(void *buf, size_t cap, const struct phub_wire_error_msg *err)
{
	struct phub_wire_error_msg check;
	uint8_t *p = buf;
	size_t len;

	if (buf == NULL || err == NULL || (err->msg_len != 0 && err->text == NULL))
		return -EINVAL;
	len = ERR_FIXED + (size_t)err->msg_len;
	if (cap < len)
		return -ENOSPC;
	memmove(p + ERR_FIXED, err->text, err->msg_len);
	wire_st16(p, err->code);
	wire_st16(p + 2, err->msg_len);
	/* What we write must be what a receiver takes. */
	if (phub_wire_error_parse(buf, len, &check) != PHUB_DROP_OK)
		return -EINVAL;
	return (int)len;
}

int
phub_wire_error_write(void *buf, size_t cap, const struct phub_wire_msg *about,
		uint16_t code, const char *text)
{
	uint8_t *body = (uint8_t *)buf + PHUB_WIRE_HDR_LEN;
	struct phub_wire_error_msg err;
	struct phub_wire_msg msg;
	size_t n;
	int len;

	if (buf == NULL || text == NULL)
		return -EINVAL;
	if (cap < PHUB_WIRE_HDR_LEN)
		return -ENOSPC;
	n = strnlen(text, PHUB_WIRE_ERROR_MSG_MAX + 1);
	if (n > PHUB_WIRE_ERROR_MSG_MAX) {
		/* Cut before a continuation byte, never inside a character. */
		n = PHUB_WIRE_ERROR_MSG_MAX;
		while (n > 0 && ((uint8_t)text[n] & 0xc0) == 0x80)
			n--;
	}
	err.code = code;
	err.msg_len = (uint16_t)n;
	err.text = text;
	len = phub_wire_error_encode(body, cap - PHUB_WIRE_HDR_LEN, &err);
	if (len < 0)
		return len;

	phub_wire_msg_init(&msg, PHUB_WIRE_OP_ERROR);
	if (about != NULL) {
		msg.job_id = about->job_id;
		msg.session_token = about->session_token;
		msg.worker_rank = about->worker_rank;
		msg.chunk_id = about->chunk_id;
		msg.iteration = about->iteration;
		msg.elem_offset = about->elem_offset;
		msg.elem_count = about->elem_count;
		msg.priority = about->priority;
		msg.flags |= about->flags & PHUB_WIRE_F_CSUM;
	}
	msg.aux = code;
	msg.payload = body;
	msg.payload_len = (uint16_t)len;
	return phub_wire_encode(buf, cap, &msg);
}

/* ---- RING_HELLO, RING_HELLO_ACK ---- */

#define HELLO_FIXED sizeof(struct phub_wire_ring_hello_body)
#define ENDPOINT_SIZE sizeof(struct phub_wire_endpoint_entry)

enum phub_drop_reason
phub_wire_ring_hello_parse(const void *body, size_t len, struct phub_wire_ring_hello *out)
{
	const uint8_t *p = body;
	struct phub_wire_ring_hello_body b;
	enum phub_drop_reason r;
	uint16_t flags;
	size_t trailer;

	if (body == NULL || len < HELLO_FIXED)
		return PHUB_DROP_BODY_SHORT;
	memcpy(&b, body, sizeof(b));
	r = job_name_check(b.name);
	if (r != PHUB_DROP_OK)
		return r;
	memset(out, 0, sizeof(*out));
	memcpy(out->name, b.name, sizeof(b.name));
	out->nonce = wire_ld64(&b.nonce);
	out->token = wire_ld64(&b.token);
	out->racks = wire_ld16(&b.racks);
	out->pos = wire_ld16(&b.pos);
	out->endpoint_count = wire_ld16(&b.endpoint_count);
	flags = wire_ld16(&b.caps);
	out->caps = flags & (PHUB_WIRE_RING_CAP_ALL | PHUB_WIRE_RING_CAP_AUTH);
	trailer = (flags & PHUB_WIRE_RING_CAP_STATE) != 0 ?
		PHUB_WIRE_RING_HELLO_STATE_BYTES : 0;
	/*
	 * A ring of 2 .. 16 racks with the sender on it, a token to carry (0 is "no session"), at
	 * least one endpoint to send to, and exactly the endpoints the count says.
	 */
	if (out->racks < 2 || out->racks > PHUB_WIRE_RING_MAX_RACKS || out->pos >= out->racks ||
	    out->token == 0 ||
	    (flags & ~(PHUB_WIRE_RING_CAP_ALL | PHUB_WIRE_RING_CAP_STATE |
		       PHUB_WIRE_RING_CAP_AUTH)) != 0 ||
	    out->endpoint_count == 0 || out->endpoint_count > PHUB_WIRE_RING_HELLO_MAX_ENDPOINTS ||
	    len != HELLO_FIXED + (size_t)out->endpoint_count * ENDPOINT_SIZE + trailer)
		return PHUB_DROP_RING_HELLO_FIELDS;
	if (trailer != 0) {
		const uint8_t *t = p + HELLO_FIXED + (size_t)out->endpoint_count * ENDPOINT_SIZE;

		out->state = true;
		out->generation = wire_ld32(t);
		out->base_iteration = wire_ld32(t + 4);
		out->newest_ckpt = wire_ld32(t + 8);
	}
	for (uint16_t i = 0; i < out->endpoint_count; i++) {
		const uint8_t *e = p + HELLO_FIXED + (size_t)i * ENDPOINT_SIZE;

		out->endpoints[i].ipv4 = wire_ld32(e);
		out->endpoints[i].udp_port = wire_ld16(e + 4);
		/* A ring peer names where it is: no "the source's address" shorthand here. */
		if (out->endpoints[i].ipv4 == 0 || out->endpoints[i].udp_port == 0 ||
		    wire_ld16(e + 6) != 0)
			return PHUB_DROP_RING_HELLO_FIELDS;
	}
	return PHUB_DROP_OK;
}

int
phub_wire_ring_hello_write(void *buf, size_t cap, uint8_t opcode,
		const struct phub_wire_ring_hello *h)
{
	uint8_t *body = (uint8_t *)buf + PHUB_WIRE_HDR_LEN;
	struct phub_wire_ring_hello_body b;
	struct phub_wire_msg msg;
	size_t len;

	if (buf == NULL || h == NULL ||
	    (opcode != PHUB_WIRE_OP_RING_HELLO && opcode != PHUB_WIRE_OP_RING_HELLO_ACK) ||
	    h->endpoint_count > PHUB_WIRE_RING_HELLO_MAX_ENDPOINTS ||
	    (h->caps & ~(PHUB_WIRE_RING_CAP_ALL | PHUB_WIRE_RING_CAP_AUTH)) != 0)
		return -EINVAL;
	len = HELLO_FIXED + (size_t)h->endpoint_count * ENDPOINT_SIZE +
		(h->state ? PHUB_WIRE_RING_HELLO_STATE_BYTES : 0);
	if (cap < PHUB_WIRE_HDR_LEN + len)
		return -ENOSPC;
	memset(&b, 0, sizeof(b));
	memcpy(b.name, h->name, sizeof(b.name));
	b.name[sizeof(b.name) - 1] = '\0';
	/* NUL padding after the name, whatever the caller's array held there. */
	memset(b.name + strlen(b.name), 0, sizeof(b.name) - strlen(b.name));
	wire_st64(&b.nonce, h->nonce);
	wire_st64(&b.token, h->token);
	wire_st16(&b.racks, h->racks);
	wire_st16(&b.pos, h->pos);
	wire_st16(&b.endpoint_count, h->endpoint_count);
	wire_st16(&b.caps, h->caps | (h->state ? PHUB_WIRE_RING_CAP_STATE : 0));
	memcpy(body, &b, sizeof(b));
	for (uint16_t i = 0; i < h->endpoint_count; i++) {
		uint8_t *e = body + HELLO_FIXED + (size_t)i * ENDPOINT_SIZE;

		wire_st32(e, h->endpoints[i].ipv4);
		wire_st16(e + 4, h->endpoints[i].udp_port);
		wire_st16(e + 6, 0);
	}
	if (h->state) {
		uint8_t *t = body + HELLO_FIXED + (size_t)h->endpoint_count * ENDPOINT_SIZE;

		wire_st32(t, h->generation);
		wire_st32(t + 4, h->base_iteration);
		wire_st32(t + 8, h->newest_ckpt);
	}
	phub_wire_msg_init(&msg, opcode);
	msg.job_id = h->job_id;
	msg.worker_rank = h->pos;
	msg.payload = body;
	msg.payload_len = (uint16_t)len;
	/* phub_wire_encode() checks the body as a receiver would: nothing invalid leaves. */
	return phub_wire_encode(buf, cap, &msg);
}

/* ---- RING_ACKV ---- */

#define ACKV_ENTRY sizeof(struct phub_wire_ring_ack_entry)

enum phub_drop_reason
phub_wire_ring_ackv_parse(const void *body, size_t len, unsigned int *count)
{
	const uint8_t *p = body;
	size_t n = len / ACKV_ENTRY;

	*count = 0;
	if (body == NULL || len == 0)
		return PHUB_DROP_BODY_SHORT;
	/* Whole entries, not more than a sender may put in one. */
	if (len % ACKV_ENTRY != 0 || n > PHUB_WIRE_RING_ACKV_MAX)
		return PHUB_DROP_RING_ACKV_FIELDS;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *e = p + i * ACKV_ENTRY;

		/* flags is kept for later (0); a step no ring of 16 racks has names nothing. */
		if (wire_ld16(e + 6) != 0 ||
		    wire_ld32(e + 12) >= 2u * (PHUB_WIRE_RING_MAX_RACKS - 1))
			return PHUB_DROP_RING_ACKV_FIELDS;
	}
	*count = (unsigned int)n;
	return PHUB_DROP_OK;
}

void
phub_wire_ring_ackv_get(const void *body, unsigned int i, struct phub_wire_ring_ack *out)
{
	const uint8_t *e = (const uint8_t *)body + (size_t)i * ACKV_ENTRY;

	out->chunk_id = wire_ld32(e);
	out->seg_index = wire_ld16(e + 4);
	out->iteration = wire_ld32(e + 8);
	out->step = wire_ld32(e + 12);
}

void
phub_wire_ring_ackv_put(void *body, unsigned int i, const struct phub_wire_ring_ack *e)
{
	uint8_t *d = (uint8_t *)body + (size_t)i * ACKV_ENTRY;

	wire_st32(d, e->chunk_id);
	wire_st16(d + 4, e->seg_index);
	wire_st16(d + 6, 0);
	wire_st32(d + 8, e->iteration);
	wire_st32(d + 12, e->step);
}
