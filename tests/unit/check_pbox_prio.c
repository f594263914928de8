/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * P3 at the PBox (app/pbox/prio.h): a frame's priority byte, a burst's service order and the
 * hold's order across bursts.
 */

#include <stdint.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "prio.h"
#include "wire/phub_wire.h"

/* An Ethernet/IPv4/UDP frame around a PUSH of the given priority; its length. */
static uint32_t
push_frame(uint8_t *buf, size_t cap, uint8_t priority, uint8_t ihl_words)
{
	static const float payload[16];
	struct phub_wire_msg msg;
	uint32_t l4 = 14 + ihl_words * 4u;
	int len;

	memset(buf, 0, cap);
	buf[12] = 0x08;
	buf[13] = 0x00;
	buf[14] = (uint8_t)(0x40 | ihl_words);
	buf[14 + 9] = 17;
	phub_wire_msg_init(&msg, PHUB_WIRE_OP_PUSH);
	msg.job_id = 7;
	msg.session_token = 0x1234;
	msg.worker_rank = 1;
	msg.chunk_id = 3;
	msg.iteration = 9;
	msg.elem_count = 16;
	msg.seg_count = 1;
	msg.dtype = PHUB_DTYPE_FP32;
	msg.priority = priority;
	msg.payload = (const uint8_t *)payload;
	msg.payload_len = sizeof(payload);
	len = phub_wire_encode(buf + l4 + 8, cap - l4 - 8, &msg);
	ck_assert_int_gt(len, 0);
	return l4 + 8 + (uint32_t)len;
}

START_TEST(test_priority_byte_of_a_push_frame)
{
	uint8_t f[256];
	uint32_t len;

	for (unsigned int p = 0; p < 256; p += 17) {
		len = push_frame(f, sizeof(f), (uint8_t)p, 5);
		ck_assert_uint_eq(pbox_prio_of_frame(f, len), p);
	}
	/* IPv4 options move the UDP header: the priority still comes from the PHub header. */
	len = push_frame(f, sizeof(f), 200, 7);
	ck_assert_uint_eq(pbox_prio_of_frame(f, len), 200);
}
END_TEST

START_TEST(test_other_frames_are_served_first)
{
	uint8_t f[256];
	uint32_t len = push_frame(f, sizeof(f), 99, 5);

	/* Cut before the priority byte: not read. */
	ck_assert_uint_eq(pbox_prio_of_frame(f, 14 + 20 + 8 + PBOX_PRIO_OFFSET), 0);
	ck_assert_uint_eq(pbox_prio_of_frame(f, 14 + 20 + 8 + PBOX_PRIO_OFFSET + 1), 99);
	f[14 + 9] = 6;		/* TCP */
	ck_assert_uint_eq(pbox_prio_of_frame(f, len), 0);
	f[14 + 9] = 17;
	f[14 + 20 + 8] = 0x51;	/* not PHub's magic */
	ck_assert_uint_eq(pbox_prio_of_frame(f, len), 0);
	f[14 + 20 + 8] = PBOX_PRIO_MAGIC_HI;
	f[13] = 0x06;		/* ARP */
	ck_assert_uint_eq(pbox_prio_of_frame(f, len), 0);
	f[13] = 0x00;
	f[14] = 0x43;		/* IHL below 5 */
	ck_assert_uint_eq(pbox_prio_of_frame(f, len), 0);
}
END_TEST

START_TEST(test_burst_order_by_priority_ties_in_arrival_order)
{
	static const uint8_t prio[] = { 3, 1, 3, 0, 1, 2, 0, 3 };
	static const uint16_t want[] = { 3, 6, 1, 4, 5, 0, 2, 7 };
	uint16_t order[8];

	ck_assert(pbox_prio_order(prio, 8, order));
	for (int i = 0; i < 8; i++)
		ck_assert_uint_eq(order[i], want[i]);
}
END_TEST

START_TEST(test_full_burst_reversed_comes_out_sorted)
{
	uint8_t prio[32];
	uint16_t order[32];

	for (int i = 0; i < 32; i++)
		prio[i] = (uint8_t)(31 - i / 2);	/* pairs, most urgent last */
	ck_assert(pbox_prio_order(prio, 32, order));
	for (int i = 0; i < 32; i++) {
		/* Pair k (priority k) came at 30 - 2k and 31 - 2k, in that order. */
		uint16_t k = (uint16_t)(i / 2);

		ck_assert_uint_eq(order[i], 30 - 2 * k + i % 2);
		if (i > 0)
			ck_assert_uint_le(prio[order[i - 1]], prio[order[i]]);
	}
}
END_TEST

START_TEST(test_burst_of_one_priority_is_left_alone)
{
	static const uint8_t prio[] = { 5, 5, 5, 5 };
	uint16_t order[4] = { 9, 9, 9, 9 };

	ck_assert(!pbox_prio_order(prio, 4, order));
	ck_assert(!pbox_prio_order(prio, 1, order));
	ck_assert(!pbox_prio_order(prio, 0, order));
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(order[i], 9);
}
END_TEST

static struct pbox_prio_hold hold;

/* Frame "pointers" that are only compared: element i of this array. */
static char frames[PBOX_PRIO_HOLD_MAX];

START_TEST(test_hold_serves_most_urgent_first_ties_in_arrival_order)
{
	static const uint8_t prio[] = { 5, 0, 5, 200, 0, 255, 63, 64 };
	static const unsigned int want[] = { 1, 4, 0, 2, 6, 7, 3, 5 };
	uint16_t tag;

	pbox_prio_hold_init(&hold, 16);
	for (unsigned int i = 0; i < sizeof(prio); i++)
		ck_assert(pbox_prio_hold_put(&hold, &frames[i], prio[i], (uint16_t)(100 + i), i));
	ck_assert_uint_eq(pbox_prio_hold_room(&hold), 16 - sizeof(prio));
	for (unsigned int k = 0; k < sizeof(prio); k++) {
		ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 10, 1000, &tag), &frames[want[k]]);
		ck_assert_uint_eq(tag, 100 + want[k]);
	}
	ck_assert_ptr_null(pbox_prio_hold_take(&hold, 10, 1000, &tag));
	ck_assert_uint_eq(pbox_prio_hold_room(&hold), 16);
}
END_TEST

START_TEST(test_hold_serves_a_frame_past_its_age_first)
{
	uint16_t tag;

	pbox_prio_hold_init(&hold, 8);
	ck_assert(pbox_prio_hold_put(&hold, &frames[0], 200, 0, 0));
	ck_assert(pbox_prio_hold_put(&hold, &frames[1], 0, 0, 10));
	ck_assert(pbox_prio_hold_put(&hold, &frames[2], 0, 0, 20));
	ck_assert(pbox_prio_hold_put(&hold, &frames[3], 200, 0, 30));
	/* Within the age: by priority. */
	ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 100, 100, &tag), &frames[1]);
	/* Frame 0 was put 101 ago: it goes before the more urgent frame 2, frame 3 does not. */
	ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 101, 100, &tag), &frames[0]);
	ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 101, 100, &tag), &frames[2]);
	ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 101, 100, &tag), &frames[3]);
	ck_assert_ptr_null(pbox_prio_hold_take(&hold, 101, 100, &tag));
}
END_TEST

START_TEST(test_hold_refuses_when_full_and_reuses_its_slots)
{
	uint16_t tag;

	pbox_prio_hold_init(&hold, 3);
	for (unsigned int i = 0; i < 3; i++)
		ck_assert(pbox_prio_hold_put(&hold, &frames[i], 7, 0, 0));
	ck_assert(!pbox_prio_hold_put(&hold, &frames[3], 0, 0, 0));
	ck_assert_uint_eq(pbox_prio_hold_room(&hold), 0);
	ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 0, 10, &tag), &frames[0]);
	ck_assert(pbox_prio_hold_put(&hold, &frames[3], 0, 0, 0));
	ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 0, 10, &tag), &frames[3]);
	ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 0, 10, &tag), &frames[1]);
	ck_assert_ptr_eq(pbox_prio_hold_take(&hold, 0, 10, &tag), &frames[2]);
	ck_assert_ptr_null(pbox_prio_hold_take(&hold, 0, 10, &tag));
	/* A hold of 0 frames holds nothing. */
	pbox_prio_hold_init(&hold, 0);
	ck_assert(!pbox_prio_hold_put(&hold, &frames[0], 0, 0, 0));
}
END_TEST

/*
 * Many puts and takes in a pseudo-random mix against a plain list searched in full: the same
 * frame every time, by age bound, then priority, then arrival.
 */
START_TEST(test_hold_agrees_with_a_plain_search)
{
	struct ref { unsigned int frame; uint64_t since; uint8_t prio; } ref[64];
	unsigned int n_ref = 0, next_frame = 0;
	uint32_t x = 12345;
	uint64_t now = 0;
	uint16_t tag;

	pbox_prio_hold_init(&hold, 64);
	for (unsigned int step = 0; step < 20000; step++) {
		x = x * 1103515245u + 12345u;
		now += (x >> 8) % 7;
		if (((x >> 16) % 3) != 0 && n_ref < 64) {
			uint8_t p = (uint8_t)((x >> 20) % 5 * 50);
			unsigned int f = next_frame++ % PBOX_PRIO_HOLD_MAX;

			ck_assert(pbox_prio_hold_put(&hold, &frames[f], p, (uint16_t)f, now));
			ref[n_ref++] = (struct ref){ f, now, p };
		} else {
			unsigned int best = 0;
			void *got = pbox_prio_hold_take(&hold, now, 40, &tag);

			if (n_ref == 0) {
				ck_assert_ptr_null(got);
				continue;
			}
			if (now - ref[0].since <= 40)
				for (unsigned int i = 1; i < n_ref; i++)
					if (ref[i].prio < ref[best].prio)
						best = i;
			ck_assert_ptr_eq(got, &frames[ref[best].frame]);
			ck_assert_uint_eq(tag, ref[best].frame);
			memmove(&ref[best], &ref[best + 1], (n_ref - best - 1) * sizeof(ref[0]));
			n_ref--;
		}
		ck_assert_uint_eq(pbox_prio_hold_room(&hold), 64 - n_ref);
	}
}
END_TEST

Suite *
phub_pbox_prio_suite(void)
{
	Suite *s = suite_create("pbox_prio");

	PHUB_TCASE(s, "service order",
		test_priority_byte_of_a_push_frame,
		test_other_frames_are_served_first,
		test_burst_order_by_priority_ties_in_arrival_order,
		test_full_burst_reversed_comes_out_sorted,
		test_burst_of_one_priority_is_left_alone);

	PHUB_TCASE(s, "hold across bursts",
		test_hold_serves_most_urgent_first_ties_in_arrival_order,
		test_hold_serves_a_frame_past_its_age_first,
		test_hold_refuses_when_full_and_reuses_its_slots,
		test_hold_agrees_with_a_plain_search);
	return s;
}
