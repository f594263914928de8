/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of an authenticated ring's RING_HELLO (lib/control/control_ring_auth.c): the
 * HELLO's MAC and number, the link keys both neighbours derive from it (the engine of one opens
 * what the other's seals), replays, a key swapped in, a neighbour without auth, and a restart's
 * new keys while an old HELLO of the neighbour stays refused.
 */

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "control_priv.h"
#include "engine/phub_engine_auth.h"

#define NONCE 0x5eed5eed5eed0002ull

static const struct phub_layout_key keys[] = { { .key_id = 1, .n_elems = 1000 } };

/* One PBox of a ring of three: its declared job, its engine job and control state. */
struct box {
	struct phub_control_rack racks[3];
	struct phub_control_declared_job decl;
	struct phub_engine *engine;
	struct cjob cj;
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	size_t len;
	struct phub_wire_msg msg;
	struct phub_wire_ring_hello h;
};

static void
box_make(struct box *b, uint16_t pos, bool auth)
{
	struct phub_engine_ring_params ring = {
		.racks = 3, .pos = pos, .total_world = 3, .rank_base = pos,
		.holds_rank0 = pos == 0, .rto_ns = 1000000, .rto_max_ns = 1000000,
	};
	uint8_t psk[PHUB_AUTH_KEY_LEN];
	struct phub_engine_job_params p = {
		.name = "ring", .nonce = NONCE, .world_size = 1, .dtype = PHUB_DTYPE_FP32,
		.optimizer = { .type = PHUB_OPT_NONE }, .keys = keys, .n_keys = 1,
		.chunk_bytes = 4096, .segment_elems = 256, .ring = &ring,
		.auth_psk = auth ? psk : NULL, .auth_lanes = 2,
	};
	int16_t peer = 0;

	memset(b, 0, sizeof(*b));
	ck_assert_int_eq(phub_auth_init(), 0);
	phub_auth_psk(psk, "ring", NONCE);
	for (uint16_t r = 0; r < 3; r++) {
		b->racks[r].ranks = 1;
		b->racks[r].peer = r == pos ? -1 : peer++;
	}
	b->decl = (struct phub_control_declared_job){ .name = "ring", .nonce = NONCE,
		.workers = 3, .dtype = PHUB_DTYPE_FP32, .auth = auth, .n_racks = 3,
		.racks = b->racks };
	b->engine = phub_engine_create();
	ck_assert_ptr_nonnull(b->engine);
	b->cj.job = phub_engine_job_create(b->engine, &p);
	ck_assert_ptr_nonnull(b->cj.job);
	b->cj.ring.decl = &b->decl;
	b->cj.ring.pos = pos;
	b->cj.ring.prev.pos = (uint16_t)((pos + 2) % 3);
	b->cj.ring.next.pos = (uint16_t)((pos + 1) % 3);
	control_ring_auth_start(&b->cj.ring);
	ck_assert(b->cj.ring.auth.on == auth);
}

static void
box_free(struct box *b)
{
	control_ring_auth_end(&b->cj.ring);
	phub_engine_free(b->engine);
}

/* b's HELLO to its neighbour on link l, as the wire carries it, parsed. */
static void
hello(struct box *b, const struct cring_link *l)
{
	struct phub_wire_ring_hello h = { .token = 5, .racks = 3, .endpoint_count = 1 };
	int n;

	snprintf(h.name, sizeof(h.name), "%s", "ring");
	h.pos = b->cj.ring.pos;
	h.caps = PHUB_WIRE_RING_CAP_ALL | (b->cj.ring.auth.on ? PHUB_WIRE_RING_CAP_AUTH : 0);
	h.endpoints[0] = (struct phub_wire_endpoint){ .ipv4 = 0x0a000001, .udp_port = 47001 };
	n = phub_wire_ring_hello_write(b->buf, sizeof(b->buf), PHUB_WIRE_OP_RING_HELLO, &h);
	ck_assert_int_gt(n, 0);
	n = control_ring_auth_seal(&b->cj.ring, l, b->buf, (size_t)n, sizeof(b->buf));
	ck_assert_int_gt(n, 0);
	b->len = (size_t)n;
	ck_assert_int_eq(phub_wire_parse(b->buf, b->len, &b->msg), PHUB_DROP_OK);
	ck_assert_int_eq(phub_wire_ring_hello_parse(b->msg.payload, b->msg.payload_len, &b->h),
			PHUB_DROP_OK);
}

static enum phub_drop_reason
check(struct box *to, const struct cring_link *l, const struct box *from)
{
	return control_ring_auth_check(&to->cj.ring, l, from->buf, &from->msg, &from->h);
}

/* A ring datagram sealed by a's engine to its next opens in b's engine from its prev. */
static enum phub_drop_reason
datagram(struct box *a, struct box *b)
{
	uint8_t d[PHUB_WIRE_HDR_LEN + PHUB_WIRE_AUTH_TRAILER_LEN + 16] = { 1, 2, 3 };
	size_t hl = PHUB_WIRE_HDR_LEN + PHUB_WIRE_AUTH_TRAILER_LEN;

	d[offsetof(struct phub_wire_hdr, flags)] = PHUB_WIRE_F_AUTH;
	if (!phub_engine_ring_auth_tx(a->cj.job, PHUB_ENGINE_RING_NEXT, 0, d, hl, d + hl, 16))
		return PHUB_DROP_NOT_JOINED;
	return phub_engine_ring_auth_rx(b->cj.job, PHUB_ENGINE_RING_PREV, 0, PHUB_WIRE_F_AUTH, d,
			hl, d + hl, 16);
}

/* Position 0 and its next, position 1: each takes the other's HELLO; both derive one key. */
static void
link_up(struct box *a, struct box *b)
{
	hello(a, &a->cj.ring.next);
	ck_assert_int_eq(check(b, &b->cj.ring.prev, a), PHUB_DROP_OK);
	ck_assert_int_eq(control_ring_auth_take(NULL, &b->cj, &b->cj.ring.prev, a->buf, &a->msg),
			0);
	hello(b, &b->cj.ring.prev);
	ck_assert_int_eq(check(a, &a->cj.ring.next, b), PHUB_DROP_OK);
	ck_assert_int_eq(control_ring_auth_take(NULL, &a->cj, &a->cj.ring.next, b->buf, &b->msg),
			0);
}

START_TEST(test_neighbours_link_with_one_key_from_their_hellos)
{
	struct box a, b;

	box_make(&a, 0, true);
	box_make(&b, 1, true);
	hello(&a, &a.cj.ring.next);
	ck_assert(a.h.caps & PHUB_WIRE_RING_CAP_AUTH);
	ck_assert(a.msg.flags & PHUB_WIRE_F_AUTH);
	ck_assert_int_eq(datagram(&a, &b), PHUB_DROP_NOT_JOINED);	/* no keys yet */
	link_up(&a, &b);
	ck_assert_int_eq(datagram(&a, &b), PHUB_DROP_OK);
	/* The HELLO taken, sent again: refused, whatever link it claims. */
	ck_assert_int_eq(check(&b, &b.cj.ring.prev, &a), PHUB_DROP_AUTH_REPLAY);
	/* Its next one is taken and changes no key. */
	hello(&a, &a.cj.ring.next);
	ck_assert_int_eq(check(&b, &b.cj.ring.prev, &a), PHUB_DROP_OK);
	ck_assert_int_eq(control_ring_auth_take(NULL, &b.cj, &b.cj.ring.prev, a.buf, &a.msg), 0);
	ck_assert_int_eq(datagram(&a, &b), PHUB_DROP_OK);
	box_free(&a);
	box_free(&b);
}
END_TEST

START_TEST(test_a_forged_or_plain_hello_is_refused)
{
	struct box a, b, c;

	box_make(&a, 0, true);
	box_make(&b, 1, true);
	box_make(&c, 0, false);
	/* A key swapped in on the spine, the number moved, the body changed: the tag fails. */
	hello(&a, &a.cj.ring.next);
	phub_auth_wire_pk(a.buf, a.msg.hdr_len)[3] ^= 1;
	ck_assert_int_eq(check(&b, &b.cj.ring.prev, &a), PHUB_DROP_AUTH_BAD_TAG);
	hello(&a, &a.cj.ring.next);
	a.buf[a.msg.hdr_len - PHUB_AUTH_TRAILER_LEN + 7] ^= 1;
	ck_assert_int_eq(check(&b, &b.cj.ring.prev, &a), PHUB_DROP_AUTH_BAD_TAG);
	hello(&a, &a.cj.ring.next);
	a.buf[a.msg.hdr_len + 75] ^= 1;	/* the token */
	ck_assert_int_eq(check(&b, &b.cj.ring.prev, &a), PHUB_DROP_AUTH_BAD_TAG);
	/* A neighbour without auth is refused; an authenticated HELLO to a job without it too. */
	hello(&c, &c.cj.ring.next);
	ck_assert(!(c.msg.flags & PHUB_WIRE_F_AUTH));
	ck_assert_int_eq(check(&b, &b.cj.ring.prev, &c), PHUB_DROP_AUTH_MISSING);
	hello(&a, &a.cj.ring.next);
	ck_assert_int_eq(check(&c, &c.cj.ring.next, &a), PHUB_DROP_AUTH_UNEXPECTED);
	/* Nothing of those changed b: a's right HELLO still links. */
	ck_assert(!b.cj.ring.auth.keyed[PHUB_ENGINE_RING_PREV]);
	link_up(&a, &b);
	ck_assert_int_eq(datagram(&a, &b), PHUB_DROP_OK);
	box_free(&a);
	box_free(&b);
	box_free(&c);
}
END_TEST

/* b restarts: new key pair, new keys; b's HELLO of before, sent again, is refused. */
START_TEST(test_a_restarted_neighbour_brings_new_keys_and_its_old_hello_is_refused)
{
	struct box a, b, old;
	uint8_t first[PHUB_WIRE_MAX_DATAGRAM];

	box_make(&a, 0, true);
	box_make(&b, 1, true);
	link_up(&a, &b);
	memcpy(&old, &b, sizeof(b));	/* b's HELLO as the spine saw it */
	memcpy(first, b.buf, b.len);
	ck_assert_int_eq(datagram(&a, &b), PHUB_DROP_OK);
	/* The new process: a fresh ring job state, its HELLO numbered after the old ones. */
	usleep(2000);	/* a restart takes longer than the clock's millisecond */
	box_free(&b);
	box_make(&b, 1, true);
	ck_assert(memcmp(b.cj.ring.auth.pk[PHUB_ENGINE_RING_PREV],
			old.cj.ring.auth.pk[PHUB_ENGINE_RING_PREV], PHUB_AUTH_PK_LEN) != 0);
	link_up(&a, &b);
	ck_assert_int_eq(datagram(&a, &b), PHUB_DROP_OK);
	/* The old session's HELLO (and with it its key) cannot come back. */
	memcpy(old.buf, first, old.len);
	ck_assert_int_eq(check(&a, &a.cj.ring.next, &old), PHUB_DROP_AUTH_REPLAY);
	box_free(&a);
	box_free(&b);
}
END_TEST

Suite *
phub_control_ring_auth_suite(void)
{
	Suite *s = suite_create("control_ring_auth");
	TCase *tc = tcase_create("hello");

	tcase_add_test(tc, test_neighbours_link_with_one_key_from_their_hellos);
	tcase_add_test(tc, test_a_forged_or_plain_hello_is_refused);
	tcase_add_test(tc, test_a_restarted_neighbour_brings_new_keys_and_its_old_hello_is_refused);
	suite_add_tcase(s, tc);
	return s;
}
