/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of an authenticated ring's datagrams in the engine (engine_ring_auth.c): link keys
 * derived as the RING_HELLO exchange does, seal on one PBox and open on its neighbour, replays,
 * bit flips, plain datagrams, sending lanes, new keys, and a ring of two's shared counter.
 */

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "auth/phub_auth.h"
#include "engine/phub_engine.h"
#include "engine/phub_engine_auth.h"
#include "wire/phub_wire.h"

#define NONCE 0x5eed5eed5eed0001ull

static const struct phub_layout_key keys[] = { { .key_id = 1, .n_elems = 1000 } };

struct box {
	struct phub_engine *engine;
	struct phub_engine_job *job;
	uint8_t pk[2][PHUB_AUTH_PK_LEN], sk[2][PHUB_AUTH_SK_LEN];
};

static uint8_t psk[PHUB_AUTH_KEY_LEN], ring_psk[PHUB_AUTH_KEY_LEN];

static void
box_make(struct box *b, unsigned int racks, unsigned int pos, bool auth)
{
	struct phub_engine_ring_params ring = {
		.racks = (uint16_t)racks, .pos = (uint16_t)pos, .total_world = racks,
		.rank_base = pos, .holds_rank0 = pos == 0, .rto_ns = 1000000, .rto_max_ns = 1000000,
	};
	struct phub_engine_job_params p = {
		.name = "ring", .nonce = NONCE, .world_size = 1, .dtype = PHUB_DTYPE_FP32,
		.optimizer = { .type = PHUB_OPT_NONE }, .keys = keys, .n_keys = 1,
		.chunk_bytes = 4096, .segment_elems = 256, .ring = &ring,
		.auth_psk = auth ? psk : NULL, .auth_lanes = 2,
	};

	ck_assert_int_eq(phub_auth_init(), 0);
	phub_auth_psk(psk, "ring", NONCE);
	phub_auth_ring_psk(ring_psk, psk);
	b->engine = phub_engine_create();
	ck_assert_ptr_nonnull(b->engine);
	b->job = phub_engine_job_create(b->engine, &p);
	ck_assert_ptr_nonnull(b->job);
	for (unsigned int s = 0; s < 2; s++)
		phub_auth_keypair(b->pk[s], b->sk[s]);
}

static void
box_free(struct box *b)
{
	phub_engine_free(b->engine);	/* and its jobs */
}

/* What control_ring_auth_take() does for a link: the keys from our key and the peer's. */
static void
link_keys(struct box *me, unsigned int my_pos, unsigned int my_slot, struct box *peer,
		unsigned int peer_pos, unsigned int peer_slot, unsigned int link)
{
	struct phub_auth_keys k;

	ck_assert_int_eq(phub_auth_ring_keys(&k, ring_psk, me->sk[my_slot], me->pk[my_slot],
			peer->pk[peer_slot], my_pos < peer_pos), 0);
	ck_assert_int_eq(phub_engine_job_ring_auth_keys(me->job, link, k.tx, k.rx), 0);
}

/*
 * Positions 0 (a) and 1 (b) of an authenticated ring, no keys yet: the checked fixture of
 * each TCase but the last, made before and freed after every test in its process.
 */
static struct box a, b;

static void
ring_of_three_setup(void)
{
	box_make(&a, 3, 0, true);
	box_make(&b, 3, 1, true);
}

static void
ring_of_two_setup(void)
{
	box_make(&a, 2, 0, true);
	box_make(&b, 2, 1, true);
}

static void
pair_teardown(void)
{
	box_free(&a);
	box_free(&b);
}

/* The HELLO exchange over a's next link (b's prev): keys on both ends from their key pairs. */
static void
link_next(void)
{
	link_keys(&a, 0, PHUB_ENGINE_RING_NEXT, &b, 1, PHUB_ENGINE_RING_PREV,
			PHUB_ENGINE_RING_NEXT);
	link_keys(&b, 1, PHUB_ENGINE_RING_PREV, &a, 0, PHUB_ENGINE_RING_NEXT,
			PHUB_ENGINE_RING_PREV);
}

/* A ring datagram: header with flag AUTH and its trailer, then a payload. */
struct dgram {
	uint8_t b[PHUB_WIRE_HDR_LEN + PHUB_WIRE_AUTH_TRAILER_LEN + 64];
	size_t hl;
};

static void
dgram_make(struct dgram *d, uint32_t iteration, bool auth)
{
	struct phub_wire_msg m;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_RING_REDUCE);
	m.job_id = 1;
	m.session_token = 7;
	m.iteration = iteration;
	m.elem_count = 16;
	m.dtype = PHUB_DTYPE_FP32;
	m.payload_len = 64;
	m.flags |= auth ? PHUB_WIRE_F_AUTH : 0;
	memset(d, 0, sizeof(*d));
	ck_assert_int_gt(phub_wire_hdr_encode(d->b, sizeof(d->b), &m, 0), 0);
	d->hl = d->b[5];
	for (unsigned int i = 0; i < 64; i++)
		d->b[d->hl + i] = (uint8_t)(iteration * 3 + i);
}

static bool
seal(struct box *b, unsigned int link, unsigned int lane, struct dgram *d)
{
	return phub_engine_ring_auth_tx(b->job, link, lane, d->b, d->hl, d->b + d->hl, 64);
}

static enum phub_drop_reason
open_(struct box *b, unsigned int link, unsigned int lane, const struct dgram *d)
{
	return phub_engine_ring_auth_rx(b->job, link, lane, d->b[4], d->b, d->hl, d->b + d->hl,
			64);
}

/* A ring of three: positions 0, 1, 2; 0's next is 1, whose prev is 0. */
START_TEST(test_a_ring_datagram_opens_once_at_the_neighbour)
{
	struct dgram d, e;
	uint64_t sealed, opened;

	ck_assert(phub_engine_job_ring_auth(a.job));
	dgram_make(&d, 1, true);
	/* Before the HELLO exchange: nothing to seal with, nothing believed. */
	ck_assert(!seal(&a, PHUB_ENGINE_RING_NEXT, 0, &d));
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d), PHUB_DROP_NOT_JOINED);
	link_next();
	ck_assert(seal(&a, PHUB_ENGINE_RING_NEXT, 0, &d));
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d), PHUB_DROP_OK);
	/* Sent again as it was, on any lane of the receiver: each lane's window refuses it. */
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d), PHUB_DROP_AUTH_REPLAY);
	/* Reflected back to its sender, or taken as from the other neighbour: another key. */
	ck_assert_int_eq(open_(&a, PHUB_ENGINE_RING_NEXT, 0, &d), PHUB_DROP_AUTH_BAD_TAG);
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_NEXT, 0, &d), PHUB_DROP_NOT_JOINED);
	/* Every single bit flip of header and payload fails. */
	dgram_make(&e, 2, true);
	ck_assert(seal(&a, PHUB_ENGINE_RING_NEXT, 0, &e));
	for (size_t bit = 0; bit < 8 * (e.hl + 64); bit++) {
		struct dgram f = e;

		f.b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		/* Flag AUTH or hdr_len flipped: not the datagram it was; anything but OK. */
		ck_assert_int_ne(open_(&b, PHUB_ENGINE_RING_PREV, 1, &f), PHUB_DROP_OK);
	}
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 1, &e), PHUB_DROP_OK);
	/* A plain datagram for an authenticated ring. */
	dgram_make(&e, 3, false);
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &e), PHUB_DROP_AUTH_MISSING);
	phub_engine_ring_auth_stats(a.job, &sealed, &opened);
	ck_assert_uint_eq(sealed, 2);
	phub_engine_ring_auth_stats(b.job, &sealed, &opened);
	ck_assert_uint_eq(opened, 2);
}
END_TEST

START_TEST(test_each_sending_lane_is_a_stream_of_its_own)
{
	struct dgram d0, d1;

	link_next();
	/* Both lanes' first datagram has counter 0: the channel tells their windows apart. */
	dgram_make(&d0, 1, true);
	dgram_make(&d1, 1, true);
	ck_assert(seal(&a, PHUB_ENGINE_RING_NEXT, 0, &d0));
	ck_assert(seal(&a, PHUB_ENGINE_RING_NEXT, 1, &d1));
	ck_assert(memcmp(d0.b + d0.hl - PHUB_AUTH_TRAILER_LEN + 2,
			d1.b + d1.hl - PHUB_AUTH_TRAILER_LEN + 2, 6) == 0);
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d0), PHUB_DROP_OK);
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d1), PHUB_DROP_OK);
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d1), PHUB_DROP_AUTH_REPLAY);
	/* A lane beyond the ring's: nothing sealed. */
	ck_assert(!seal(&a, PHUB_ENGINE_RING_NEXT, PHUB_ENGINE_RING_AUTH_LANES, &d0));
}
END_TEST

START_TEST(test_new_keys_end_the_old_ones_and_the_counter_goes_on)
{
	struct dgram d, e;
	uint64_t s1, s2;

	link_next();
	dgram_make(&d, 1, true);
	ck_assert(seal(&a, PHUB_ENGINE_RING_NEXT, 0, &d));
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d), PHUB_DROP_OK);
	/* The same keys again (a HELLO kept alive): the window remembers. */
	link_keys(&b, 1, PHUB_ENGINE_RING_PREV, &a, 0, PHUB_ENGINE_RING_NEXT,
			PHUB_ENGINE_RING_PREV);
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d), PHUB_DROP_AUTH_REPLAY);
	/* B restarted: a new key pair, new keys on both ends. */
	phub_auth_keypair(b.pk[PHUB_ENGINE_RING_PREV], b.sk[PHUB_ENGINE_RING_PREV]);
	link_next();
	/* What the old keys sealed is nobody's now. */
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &d), PHUB_DROP_AUTH_BAD_TAG);
	dgram_make(&e, 1, true);
	ck_assert(seal(&a, PHUB_ENGINE_RING_NEXT, 0, &e));
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &e), PHUB_DROP_OK);
	/* A's counter did not start again: no (key, number) pair can repeat, new keys or not. */
	memcpy(&s1, d.b + d.hl - PHUB_AUTH_TRAILER_LEN, 8);
	memcpy(&s2, e.b + e.hl - PHUB_AUTH_TRAILER_LEN, 8);
	ck_assert(s1 != s2);
}
END_TEST

/* In a ring of two the neighbour is prev and next: data and acknowledgements share a counter. */
START_TEST(test_a_ring_of_two_has_one_stream_per_lane)
{
	struct dgram data, ack;

	for (unsigned int link = 0; link < 2; link++) {
		link_keys(&a, 0, 0, &b, 1, 0, link);
		link_keys(&b, 1, 0, &a, 0, 0, link);
	}
	dgram_make(&data, 1, true);
	dgram_make(&ack, 2, true);
	ck_assert(seal(&a, PHUB_ENGINE_RING_NEXT, 0, &data));
	ck_assert(seal(&a, PHUB_ENGINE_RING_PREV, 0, &ack));
	ck_assert(memcmp(data.b + data.hl - PHUB_AUTH_TRAILER_LEN,
			ack.b + ack.hl - PHUB_AUTH_TRAILER_LEN, PHUB_AUTH_SEQ_LEN) != 0);
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_PREV, 0, &data), PHUB_DROP_OK);
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_NEXT, 0, &ack), PHUB_DROP_OK);
	/* One window for the neighbour's lane: a datagram replayed as the other kind is seen. */
	ck_assert_int_eq(open_(&b, PHUB_ENGINE_RING_NEXT, 0, &data), PHUB_DROP_AUTH_REPLAY);
}
END_TEST

START_TEST(test_a_ring_without_auth_refuses_the_extension)
{
	struct box plain;
	struct dgram d;

	box_make(&plain, 3, 0, false);
	ck_assert(!phub_engine_job_ring_auth(plain.job));
	dgram_make(&d, 1, true);
	ck_assert_int_eq(open_(&plain, PHUB_ENGINE_RING_PREV, 0, &d), PHUB_DROP_AUTH_UNEXPECTED);
	dgram_make(&d, 1, false);
	ck_assert_int_eq(open_(&plain, PHUB_ENGINE_RING_PREV, 0, &d), PHUB_DROP_OK);
	ck_assert_int_eq(phub_engine_job_ring_auth_keys(plain.job, 0, psk, psk), -EINVAL);
	box_free(&plain);
}
END_TEST

Suite *
phub_engine_ring_auth_suite(void)
{
	Suite *s = suite_create("engine_ring_auth");
	/* The pair of PBoxes is made anew for each test of a ring's size. */
	tcase_add_checked_fixture(PHUB_TCASE(s, "ring_of_three",
			test_a_ring_datagram_opens_once_at_the_neighbour,
			test_each_sending_lane_is_a_stream_of_its_own,
			test_new_keys_end_the_old_ones_and_the_counter_goes_on),
		ring_of_three_setup, pair_teardown);
	tcase_add_checked_fixture(PHUB_TCASE(s, "ring_of_two",
			test_a_ring_of_two_has_one_stream_per_lane),
		ring_of_two_setup, pair_teardown);
	PHUB_TCASE(s, "without_auth", test_a_ring_without_auth_refuses_the_extension);
	return s;
}
