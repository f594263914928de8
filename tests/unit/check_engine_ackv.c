/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/engine's ACK coalescing (phub_ackv.h): what a burst's ACKV datagrams hold. */

#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"

#include "engine/phub_ackv.h"

/* What one send call got. */
struct sent {
	uint32_t job_id;
	uint16_t rank;
	uint16_t port;
	void *job;
	unsigned int n;
	struct phub_wire_ackv_entry e[PHUB_ACKV_BATCH_MAX];
};

struct log {
	unsigned int n;
	struct sent s[PHUB_ACKV_BATCH_MAX];
};

static void
record(void *arg, const struct phub_ackv_pending *to, const struct phub_wire_ackv_entry *e,
		unsigned int n)
{
	struct log *l = arg;
	struct sent *s = &l->s[l->n++];

	ck_assert_uint_ge(n, 1);
	s->job_id = to->job_id;
	s->rank = to->rank;
	s->port = to->port;
	s->job = to->job;
	s->n = n;
	memcpy(s->e, e, n * sizeof(*e));
}

static struct phub_wire_ackv_entry
entry(uint32_t chunk, uint16_t seg, uint32_t iter, uint32_t aux)
{
	return (struct phub_wire_ackv_entry){ .chunk_id = chunk, .seg_index = seg,
		.iteration = iter, .aux = aux };
}

static struct phub_ackv_batch batch;
static struct log out;
static int job_a, job_b;

/* A burst of PUSHes from ranks 0, 1, 0, 2, 1, 0 of job 7: one ACKV per rank, in arrival order. */
START_TEST(test_one_ackv_per_rank_in_arrival_order)
{
	static const uint16_t ranks[] = { 0, 1, 0, 2, 1, 0 };
	struct phub_wire_ackv_entry e;

	phub_ackv_init(&batch);
	memset(&out, 0, sizeof(out));
	for (unsigned int i = 0; i < 6; i++) {
		e = entry(i, (uint16_t)(i % 3), 9, 100 + i);
		phub_ackv_add(&batch, &job_a, 7, ranks[i], (uint16_t)(ranks[i] + 10), &e);
	}
	ck_assert_uint_eq(phub_ackv_flush(&batch, 64, record, &out), 3);
	ck_assert_uint_eq(out.n, 3);
	/* Rank 0 first (its ACK came first): entries 0, 2, 5. */
	ck_assert_uint_eq(out.s[0].rank, 0);
	ck_assert_uint_eq(out.s[0].port, 10);
	ck_assert_ptr_eq(out.s[0].job, &job_a);
	ck_assert_uint_eq(out.s[0].n, 3);
	ck_assert_uint_eq(out.s[0].e[0].chunk_id, 0);
	ck_assert_uint_eq(out.s[0].e[1].chunk_id, 2);
	ck_assert_uint_eq(out.s[0].e[2].chunk_id, 5);
	ck_assert_uint_eq(out.s[0].e[2].aux, 105);
	ck_assert_uint_eq(out.s[1].rank, 1);
	ck_assert_uint_eq(out.s[1].n, 2);
	ck_assert_uint_eq(out.s[1].e[1].chunk_id, 4);
	ck_assert_uint_eq(out.s[2].rank, 2);
	ck_assert_uint_eq(out.s[2].n, 1);
	ck_assert_uint_eq(batch.frames, 3);
	ck_assert_uint_eq(batch.entries, 6);
	/* Empty after the flush: nothing sent twice. */
	ck_assert_uint_eq(phub_ackv_flush(&batch, 64, record, &out), 0);
}
END_TEST

/* The same rank number in two jobs is two destinations. */
START_TEST(test_same_rank_of_two_jobs_gets_two_ackvs)
{
	struct phub_wire_ackv_entry e = entry(1, 0, 0, 1);

	phub_ackv_init(&batch);
	memset(&out, 0, sizeof(out));
	phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	phub_ackv_add(&batch, &job_b, 8, 0, 0, &e);
	phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	ck_assert_uint_eq(phub_ackv_flush(&batch, 64, record, &out), 2);
	ck_assert_uint_eq(out.s[0].job_id, 7);
	ck_assert_uint_eq(out.s[0].n, 2);
	ck_assert_uint_eq(out.s[1].job_id, 8);
	ck_assert_ptr_eq(out.s[1].job, &job_b);
	ck_assert_uint_eq(out.s[1].n, 1);
}
END_TEST

/* More ACKs to one rank than a datagram holds: several ACKVs, full ones first. */
START_TEST(test_ackvs_split_at_the_entries_a_datagram_holds)
{
	phub_ackv_init(&batch);
	memset(&out, 0, sizeof(out));
	for (uint32_t i = 0; i < 23; i++) {
		struct phub_wire_ackv_entry e = entry(i, 0, 1, i + 1);

		phub_ackv_add(&batch, &job_a, 7, 3, 0, &e);
	}
	ck_assert_uint_eq(phub_ackv_flush(&batch, 10, record, &out), 3);
	ck_assert_uint_eq(out.s[0].n, 10);
	ck_assert_uint_eq(out.s[1].n, 10);
	ck_assert_uint_eq(out.s[2].n, 3);
	ck_assert_uint_eq(out.s[1].e[0].chunk_id, 10);
	ck_assert_uint_eq(out.s[2].e[2].chunk_id, 22);
}
END_TEST

/*
 * A segment whose MODEL leaves in the same burst: the ACKs owed to that rank for that segment and
 * iteration go (the newest stamp comes back for the MODEL), the others stay.
 */
START_TEST(test_model_takes_only_its_ranks_acks_of_that_segment)
{
	struct phub_wire_ackv_entry e;
	uint32_t aux = 0;

	phub_ackv_init(&batch);
	memset(&out, 0, sizeof(out));
	e = entry(5, 2, 40, 0xfffffff0u);	/* rank 0, the segment */
	phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	e = entry(5, 2, 40, 0x10);		/* rank 0 again (a retransmission), a newer stamp */
	phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	e = entry(5, 2, 40, 0x20);		/* rank 1, the same segment */
	phub_ackv_add(&batch, &job_a, 7, 1, 0, &e);
	e = entry(5, 3, 40, 0x30);		/* rank 0, the next segment */
	phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	e = entry(5, 2, 39, 0x40);		/* rank 0, the segment's previous iteration */
	phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	e = entry(5, 2, 40, 0x50);		/* rank 0 of another job */
	phub_ackv_add(&batch, &job_b, 8, 0, 0, &e);

	ck_assert(phub_ackv_take(&batch, 7, 0, 5, 2, 40, &aux));
	/* 0x10 is after 0xfffffff0 in serial order: the clock wrapped between them. */
	ck_assert_uint_eq(aux, 0x10);
	ck_assert(!phub_ackv_take(&batch, 7, 0, 5, 2, 40, &aux));
	ck_assert(!phub_ackv_take(&batch, 7, 2, 5, 2, 40, &aux));
	ck_assert_uint_eq(batch.taken, 2);
	ck_assert_uint_eq(batch.live, 4);
	ck_assert_uint_eq(phub_ackv_flush(&batch, 64, record, &out), 3);
	/* Rank 1 first now (rank 0's first ACKs were taken), then rank 0 of job 7. */
	ck_assert_uint_eq(out.s[0].rank, 1);
	ck_assert_uint_eq(out.s[0].n, 1);
	ck_assert_uint_eq(out.s[0].e[0].aux, 0x20);
	/* Rank 0 of job 7: the next segment and the older iteration, not the taken two. */
	ck_assert_uint_eq(out.s[1].rank, 0);
	ck_assert_uint_eq(out.s[1].job_id, 7);
	ck_assert_uint_eq(out.s[1].n, 2);
	ck_assert_uint_eq(out.s[1].e[0].aux, 0x30);
	ck_assert_uint_eq(out.s[1].e[1].aux, 0x40);
	ck_assert_uint_eq(out.s[2].job_id, 8);
}
END_TEST

/* Every ACK taken by MODELs: nothing to send. A full batch refuses more rather than overrun. */
START_TEST(test_all_taken_sends_nothing_and_full_refuses)
{
	struct phub_wire_ackv_entry e = entry(1, 1, 1, 1);
	uint32_t aux;

	phub_ackv_init(&batch);
	memset(&out, 0, sizeof(out));
	phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	phub_ackv_add(&batch, &job_a, 7, 1, 0, &e);
	ck_assert(phub_ackv_take(&batch, 7, 0, 1, 1, 1, &aux));
	ck_assert(phub_ackv_take(&batch, 7, 1, 1, 1, 1, &aux));
	ck_assert_uint_eq(phub_ackv_flush(&batch, 64, record, &out), 0);
	ck_assert_uint_eq(out.n, 0);
	for (unsigned int i = 0; i < PHUB_ACKV_BATCH_MAX; i++)
		phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	ck_assert(phub_ackv_full(&batch));
	phub_ackv_add(&batch, &job_a, 7, 0, 0, &e);
	ck_assert_uint_eq(batch.n, PHUB_ACKV_BATCH_MAX);
	ck_assert_uint_eq(phub_ackv_flush(&batch, PHUB_ACKV_BATCH_MAX, record, &out), 1);
	ck_assert_uint_eq(out.s[0].n, PHUB_ACKV_BATCH_MAX);
}
END_TEST

/* Before a MODEL with a stamp: only that rank's ACKs leave, in one ACKV; the rest wait. */
START_TEST(test_flush_of_one_rank_leaves_the_others_owed)
{
	struct phub_wire_ackv_entry e;

	phub_ackv_init(&batch);
	memset(&out, 0, sizeof(out));
	for (uint32_t i = 0; i < 6; i++) {
		e = entry(i, 0, 3, 10 + i);
		phub_ackv_add(&batch, &job_a, 7, (uint16_t)(i % 2), 0, &e);
	}
	e = entry(9, 0, 3, 99);
	phub_ackv_add(&batch, &job_b, 8, 1, 0, &e);
	ck_assert_uint_eq(phub_ackv_flush_rank(&batch, 7, 1, 64, record, &out), 1);
	ck_assert_uint_eq(out.s[0].rank, 1);
	ck_assert_uint_eq(out.s[0].job_id, 7);
	ck_assert_uint_eq(out.s[0].n, 3);
	ck_assert_uint_eq(out.s[0].e[2].chunk_id, 5);
	ck_assert_uint_eq(batch.live, 4);
	/* Nothing owed to rank 1 of job 7 any more. */
	ck_assert_uint_eq(phub_ackv_flush_rank(&batch, 7, 1, 64, record, &out), 0);
	ck_assert_uint_eq(phub_ackv_flush(&batch, 64, record, &out), 2);
	ck_assert_uint_eq(out.s[1].rank, 0);
	ck_assert_uint_eq(out.s[1].n, 3);
	ck_assert_uint_eq(out.s[2].job_id, 8);
}
END_TEST

Suite *
phub_engine_ackv_suite(void)
{
	Suite *s = suite_create("engine_ackv");

	PHUB_TCASE(s, "coalescing",
		test_one_ackv_per_rank_in_arrival_order,
		test_same_rank_of_two_jobs_gets_two_ackvs,
		test_ackvs_split_at_the_entries_a_datagram_holds,
		test_model_takes_only_its_ranks_acks_of_that_segment,
		test_all_taken_sends_nothing_and_full_refuses,
		test_flush_of_one_rank_leaves_the_others_owed);
	return s;
}
