/* SPDX-License-Identifier: BSD-3-Clause */
/* lib/control: JOIN reassembly and timeout, the JOIN checks, LEAVE, PING, and the endpoint race. */

#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit_suite.h"

/* The messages' own decisions (JOIN checks, reassembly, LEAVE, PING) are checked one by one. */
#include "control/control_priv.h"

#define NONCE 0x1122334455667788ull

static const struct phub_layout_key lkeys[] = {
	{ .key_id = 10, .n_elems = 7 },
	{ .key_id = 11, .n_elems = 300 },
	{ .key_id = 12, .n_elems = 1000 },
};
#define N_KEYS 3

static const struct phub_wire_key wkeys[N_KEYS] = {
	{ .key_id = 10, .elem_count = 7 },
	{ .key_id = 11, .elem_count = 300 },
	{ .key_id = 12, .elem_count = 1000 },
};

static struct phub_engine *engine;
static struct phub_engine_job *job;

/* A job of two ranks over lkeys, SGD at learning rate 0.5, made by hand in the engine. */
static struct phub_engine_job *
make_job(const char *name)
{
	struct phub_engine_job_params p = {
		.name = name, .nonce = NONCE, .world_size = 2, .dtype = PHUB_DTYPE_FP32,
		.optimizer = { .type = PHUB_OPT_SGD, .lr = 0.5f },
		.keys = lkeys, .n_keys = N_KEYS, .chunk_bytes = 1024, .segment_elems = 64,
	};
	struct phub_engine_job *j = phub_engine_job_create(engine, &p);

	ck_assert_ptr_nonnull(j);
	return j;
}

static void
job_setup(void)
{
	engine = phub_engine_create();
	ck_assert_ptr_nonnull(engine);
	job = make_job("job");
}

static void
job_teardown(void)
{
	phub_engine_job_unpublish(engine, job);
	phub_engine_job_free(job);
	phub_engine_free(engine);
}

static struct phub_wire_join
join_of(uint16_t rank)
{
	struct phub_wire_join j;

	memset(&j, 0, sizeof(j));
	strcpy(j.name, "job");
	j.nonce = NONCE;
	j.rank = rank;
	j.world_size = 2;
	j.dtype = (uint8_t)PHUB_DTYPE_FP32;
	j.optimizer = (uint8_t)PHUB_OPT_SGD;
	j.hyper.lr = 0.5f;
	j.chunk_bytes = 1024;
	return j;
}

/* ---- the JOIN checks ---- */

START_TEST(test_join_matching_the_first_rank_passes)
{
	struct phub_wire_join first = join_of(0), later = join_of(1);
	struct phub_control_decl d;

	phub_control_decl_from_join(&d, &first);
	ck_assert_ptr_null(phub_control_join_mismatch(job, &d, &later, wkeys, N_KEYS, false));
}
END_TEST

START_TEST(test_join_mismatch_names_every_declared_field)
{
	struct phub_wire_join first = join_of(0);
	struct phub_control_decl d;
	struct phub_wire_key other_keys[N_KEYS];
	struct {
		const char *what;
		struct phub_wire_join j;
	} cases[7];
	unsigned int n = 0;

	phub_control_decl_from_join(&d, &first);
	cases[n].what = "world size"; cases[n].j = join_of(1); cases[n++].j.world_size = 3;
	cases[n].what = "dtype"; cases[n].j = join_of(1);
	cases[n++].j.dtype = (uint8_t)PHUB_DTYPE_FP16;
	cases[n].what = "optimizer"; cases[n].j = join_of(1);
	cases[n++].j.optimizer = (uint8_t)PHUB_OPT_ADAM;
	cases[n].what = "hyper-parameters"; cases[n].j = join_of(1); cases[n++].j.hyper.lr = 0.25f;
	cases[n].what = "hyper-parameters"; cases[n].j = join_of(1);
	cases[n++].j.hyper.weight_decay = 1e-4f;
	cases[n].what = "chunk size"; cases[n].j = join_of(1); cases[n++].j.chunk_bytes = 2048;
	for (unsigned int i = 0; i < n; i++) {
		const char *got = phub_control_join_mismatch(job, &d, &cases[i].j, wkeys, N_KEYS,
				false);

		ck_assert_msg(got != NULL && strcmp(got, cases[i].what) == 0,
				"case %u: expected %s, got %s", i, cases[i].what,
				got ? got : "none");
	}
	/* The summing order, and the keys. */
	ck_assert_str_eq(phub_control_join_mismatch(job, &d, &first, wkeys, N_KEYS, true),
			"summing order (deterministic flag)");
	memcpy(other_keys, wkeys, sizeof(other_keys));
	other_keys[2].elem_count = 999;
	ck_assert_str_eq(phub_control_join_mismatch(job, &d, &first, other_keys, N_KEYS, false),
			"keys");
	ck_assert_str_eq(phub_control_join_mismatch(job, &d, &first, wkeys, N_KEYS - 1, false),
			"keys");
}
END_TEST

START_TEST(test_restored_job_takes_its_declaration_from_the_first_rank_back)
{
	struct phub_control_decl d = { .known = PHUB_CONTROL_DECL_OPTIMIZER,
		.optimizer = (uint8_t)PHUB_OPT_SGD };
	struct phub_wire_join back = join_of(1), other = join_of(0);

	back.hyper.lr = 0.125f;
	back.chunk_bytes = 0;
	/* Unknown fields pass; the known optimizer does not. */
	ck_assert_ptr_null(phub_control_join_mismatch(job, &d, &back, wkeys, N_KEYS, false));
	other.optimizer = (uint8_t)PHUB_OPT_NESTEROV;
	ck_assert_str_eq(phub_control_join_mismatch(job, &d, &other, wkeys, N_KEYS, false),
			"optimizer");
	phub_control_decl_complete(&d, &back);
	ck_assert_uint_eq(d.known, PHUB_CONTROL_DECL_ALL);
	/* The next rank must repeat what the first one back declared. */
	other = join_of(0);
	ck_assert_str_eq(phub_control_join_mismatch(job, &d, &other, wkeys, N_KEYS, false),
			"hyper-parameters");
	other.hyper.lr = 0.125f;
	ck_assert_str_eq(phub_control_join_mismatch(job, &d, &other, wkeys, N_KEYS, false),
			"chunk size");
	other.chunk_bytes = 0;
	ck_assert_ptr_null(phub_control_join_mismatch(job, &d, &other, wkeys, N_KEYS, false));
}
END_TEST

/* ---- JOIN reassembly ---- */

/* The JOIN of rank with n_keys keys of one element each, cut for mtu; datagram i in buf. */
static struct phub_wire_msg
join_dgram(uint8_t *buf, size_t cap, uint16_t rank, uint32_t n_keys, unsigned int mtu,
		uint16_t i, struct phub_wire_key *keys, int *n_dgrams)
{
	struct phub_wire_join_params jp;
	struct phub_wire_msg msg;
	int len;

	memset(&jp, 0, sizeof(jp));
	jp.join = join_of(rank);
	for (uint32_t k = 0; k < n_keys; k++)
		keys[k] = (struct phub_wire_key){ .key_id = k, .elem_count = 1 };
	jp.keys = keys;
	jp.key_count = n_keys;
	*n_dgrams = phub_wire_join_segments(&jp, mtu);
	len = phub_wire_join_write(buf, cap, &jp, mtu, i);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(phub_wire_parse(buf, (size_t)len, &msg), PHUB_DROP_OK);
	return msg;
}

static struct phub_wire_key many_keys[600];

START_TEST(test_split_join_completes_with_its_last_datagram)
{
	struct phub_control_joins *joins = phub_control_joins_create(4, 1000);
	struct phub_control_addr src = { .ipv4 = 0x0a000002, .udp_port = 4000 };
	struct phub_control_join out;
	uint8_t buf[1500];
	int n = 0;

	ck_assert_ptr_nonnull(joins);
	join_dgram(buf, sizeof(buf), 1, 600, 1500, 0, many_keys, &n);
	ck_assert_int_gt(n, 1);
	/* Out of order: the last first. */
	for (int i = n - 1; i >= 0; i--) {
		struct phub_wire_msg m = join_dgram(buf, sizeof(buf), 1, 600, 1500, (uint16_t)i,
				many_keys, &n);
		enum phub_control_join_result r = phub_control_joins_add(joins, &src, &m, 100,
				&out);

		ck_assert_int_eq(r, i == 0 ? PHUB_CONTROL_JOIN_COMPLETE : PHUB_CONTROL_JOIN_MORE);
	}
	ck_assert_uint_eq(out.n_keys, 600);
	ck_assert_uint_eq(out.join->rank, 1);
	ck_assert_uint_eq(out.keys[599].key_id, 599);
	phub_control_joins_done(joins, &src, &out);
	/* Done: nothing left to time out. */
	ck_assert_uint_eq(phub_control_joins_expire(joins, UINT64_MAX / 2, 1, NULL, NULL), 0);
	phub_control_joins_free(joins);
}
END_TEST

START_TEST(test_join_of_too_many_keys_is_refused_before_any_allocation)
{
	struct phub_control_joins *joins = phub_control_joins_create(4, 100);
	struct phub_control_addr src = { .ipv4 = 0x0a000002, .udp_port = 4000 };
	struct phub_control_join out;
	uint8_t buf[1500];
	int n;
	struct phub_wire_msg m = join_dgram(buf, sizeof(buf), 0, 600, 1500, 0, many_keys, &n);

	ck_assert_int_eq(phub_control_joins_add(joins, &src, &m, 0, &out),
			PHUB_CONTROL_JOIN_TOO_MANY_KEYS);
	ck_assert_uint_eq(phub_control_joins_expire(joins, UINT64_MAX / 2, 1, NULL, NULL), 0);
	phub_control_joins_free(joins);
}
END_TEST

struct timeouts {
	unsigned int n;
	struct phub_control_addr src;
	struct phub_wire_msg about;
};

static void
on_timeout(void *ctx, const struct phub_control_addr *src, const struct phub_wire_msg *about)
{
	struct timeouts *t = ctx;

	t->n++;
	t->src = *src;
	t->about = *about;
}

START_TEST(test_incomplete_join_times_out_once_with_its_header)
{
	struct phub_control_joins *joins = phub_control_joins_create(4, 1000);
	struct phub_control_addr src = { .ipv4 = 0x0a000003, .udp_port = 4001 };
	struct phub_control_join out;
	struct timeouts t = { 0 };
	uint8_t buf[1500];
	int n;
	struct phub_wire_msg m = join_dgram(buf, sizeof(buf), 1, 600, 1500, 0, many_keys, &n);

	ck_assert_int_eq(phub_control_joins_add(joins, &src, &m, 1000, &out),
			PHUB_CONTROL_JOIN_MORE);
	/* The fake clock: not yet at 1000 + 500, then past it. */
	ck_assert_uint_eq(phub_control_joins_expire(joins, 1500, 500, on_timeout, &t), 0);
	ck_assert_uint_eq(t.n, 0);
	ck_assert_uint_eq(phub_control_joins_expire(joins, 1501, 500, on_timeout, &t), 1);
	ck_assert_uint_eq(t.n, 1);
	ck_assert_uint_eq(t.src.ipv4, src.ipv4);
	ck_assert_uint_eq(t.src.udp_port, src.udp_port);
	ck_assert_uint_eq(t.about.opcode, PHUB_WIRE_OP_JOIN);
	ck_assert_uint_eq(t.about.worker_rank, 1);
	ck_assert_uint_eq(phub_control_joins_expire(joins, 99999, 500, on_timeout, &t), 0);
	ck_assert_uint_eq(t.n, 1);
	phub_control_joins_free(joins);
}
END_TEST

START_TEST(test_full_table_gives_the_oldest_join_away)
{
	struct phub_control_joins *joins = phub_control_joins_create(2, 1000);
	struct phub_control_join out;
	struct timeouts t = { 0 };
	uint8_t buf[1500];
	int n;

	for (uint16_t i = 0; i < 3; i++) {
		struct phub_control_addr src = { .ipv4 = 0x0a000010u + i, .udp_port = 4000 };
		struct phub_wire_msg m = join_dgram(buf, sizeof(buf), 0, 600, 1500, 0,
				many_keys, &n);

		ck_assert_int_eq(phub_control_joins_add(joins, &src, &m, 10u + i, &out),
				PHUB_CONTROL_JOIN_MORE);
	}
	/* The first source's entry went to the third: two expire, neither from the first. */
	ck_assert_uint_eq(phub_control_joins_expire(joins, 1000, 100, on_timeout, &t), 2);
	ck_assert_uint_ne(t.src.ipv4, 0x0a000010u);
	phub_control_joins_free(joins);
}
END_TEST

/* ---- LEAVE and PING ---- */

static uint64_t
join_rank(uint16_t rank, uint32_t ip, uint16_t port)
{
	struct phub_engine_peer peer = { .ipv4 = ip, .udp_port = port };
	uint64_t token = 0;

	ck_assert_int_eq(phub_engine_job_join(job, rank, NONCE, &peer, &token), 0);
	return token;
}

static struct phub_wire_msg
session_msg(uint8_t opcode, uint16_t rank, uint64_t token)
{
	struct phub_wire_msg m;

	phub_wire_msg_init(&m, opcode);
	m.job_id = phub_engine_job_id(job);
	m.worker_rank = rank;
	m.session_token = token;
	m.iteration = 7;
	return m;
}

START_TEST(test_leave_ends_the_session_then_is_acked_again)
{
	struct phub_control_leaves leaves;
	struct phub_control_addr a = { .ipv4 = 1, .udp_port = 10 };
	uint64_t t0 = join_rank(0, 1, 10);
	struct phub_control_leave_verdict v;
	struct phub_wire_msg m = session_msg(PHUB_WIRE_OP_LEAVE, 0, t0), ack;

	memset(&leaves, 0, sizeof(leaves));
	join_rank(1, 2, 20);
	phub_control_leave(&leaves, job, &a, &m, &v);
	ck_assert(v.ack && v.left);
	ck_assert_int_eq(v.remaining, 1);
	/* The LEAVE_ACK was lost: the same LEAVE again is ACKed, nothing more. */
	phub_control_leave(&leaves, job, &a, &m, &v);
	ck_assert(v.ack && !v.left);
	phub_control_leave_ack(&m, &ack);
	ck_assert_uint_eq(ack.opcode, PHUB_WIRE_OP_LEAVE_ACK);
	ck_assert_uint_eq(ack.session_token, t0);
	ck_assert_uint_eq(ack.iteration, 7);
}
END_TEST

START_TEST(test_leave_of_a_session_not_held_is_dropped_with_the_push_reason)
{
	struct phub_control_leaves leaves;
	struct phub_control_addr a = { .ipv4 = 1, .udp_port = 10 };
	struct phub_control_addr b = { .ipv4 = 9, .udp_port = 10 };
	uint64_t t0 = join_rank(0, 1, 10);
	struct phub_control_leave_verdict v;
	struct phub_wire_msg m;

	memset(&leaves, 0, sizeof(leaves));
	m = session_msg(PHUB_WIRE_OP_LEAVE, 0, t0);
	phub_control_leave(&leaves, NULL, &a, &m, &v);
	ck_assert(!v.ack);
	ck_assert_int_eq(v.drop, PHUB_DROP_UNKNOWN_JOB);
	m = session_msg(PHUB_WIRE_OP_LEAVE, 5, t0);
	phub_control_leave(&leaves, job, &a, &m, &v);
	ck_assert_int_eq(v.drop, PHUB_DROP_RANK_RANGE);
	m = session_msg(PHUB_WIRE_OP_LEAVE, 1, t0);
	phub_control_leave(&leaves, job, &a, &m, &v);
	ck_assert_int_eq(v.drop, PHUB_DROP_NOT_JOINED);
	m = session_msg(PHUB_WIRE_OP_LEAVE, 0, t0 + 1);
	phub_control_leave(&leaves, job, &a, &m, &v);
	ck_assert_int_eq(v.drop, PHUB_DROP_BAD_TOKEN);
	m = session_msg(PHUB_WIRE_OP_LEAVE, 0, t0);
	phub_control_leave(&leaves, job, &b, &m, &v);
	ck_assert(!v.ack);
	ck_assert_int_eq(v.drop, PHUB_DROP_WRONG_SOURCE);
	/* Still joined after all of them. */
	ck_assert_uint_eq(phub_control_session_check(job, &a, &m), PHUB_DROP_OK);
}
END_TEST

START_TEST(test_ping_of_a_lost_session_asks_for_a_new_join)
{
	struct phub_control_addr a = { .ipv4 = 1, .udp_port = 10 };
	struct phub_control_addr b = { .ipv4 = 2, .udp_port = 10 };
	uint64_t t0 = join_rank(0, 1, 10);
	struct phub_wire_msg m = session_msg(PHUB_WIRE_OP_PING, 0, t0), pong;

	ck_assert_uint_eq(phub_control_ping(job, &a, &m), 0);
	phub_control_pong(&m, &pong);
	ck_assert_uint_eq(pong.opcode, PHUB_WIRE_OP_PONG);
	ck_assert_uint_eq(pong.session_token, t0);
	ck_assert_uint_eq(phub_control_ping(NULL, &a, &m), PHUB_WIRE_ERR_UNKNOWN_JOB);
	ck_assert_uint_eq(phub_control_ping(job, &b, &m), PHUB_WIRE_ERR_BAD_SESSION);
	m = session_msg(PHUB_WIRE_OP_PING, 1, t0);
	ck_assert_uint_eq(phub_control_ping(job, &a, &m), PHUB_WIRE_ERR_UNKNOWN_JOB);
	/* Without a session: a path probe, answered. */
	m = session_msg(PHUB_WIRE_OP_PING, 1, 0);
	ck_assert_uint_eq(phub_control_ping(job, &a, &m), 0);
}
END_TEST

/* ---- the endpoint: re-JOIN against data-path readers ---- */

#define READERS 2
#define REJOINS 20000

static atomic_bool race_stop;
static atomic_ulong torn;
static atomic_ulong reads;

/* Two endpoints whose every field differs: a mix of them is a torn read. */
static const struct phub_engine_peer ep[2] = {
	{ .ipv4 = 0x0a000001, .udp_port = 1111, .mac = { 1, 1, 1, 1, 1, 1 }, .flags = 0 },
	{ .ipv4 = 0x0a000002, .udp_port = 2222, .mac = { 2, 2, 2, 2, 2, 2 },
		.flags = PHUB_ENGINE_PEER_F_CSUM },
};

static void *
reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&race_stop)) {
		struct phub_engine_peer p;
		uint64_t token;

		if (!phub_engine_job_rank(job, 1, &p, &token))
			continue;
		atomic_fetch_add(&reads, 1);
		for (unsigned int i = 0; i < 2; i++) {
			if (p.ipv4 == ep[i].ipv4 && (p.udp_port != ep[i].udp_port ||
			    memcmp(p.mac, ep[i].mac, 6) != 0 || p.flags != ep[i].flags))
				atomic_fetch_add(&torn, 1);
		}
		if (p.ipv4 != ep[0].ipv4 && p.ipv4 != ep[1].ipv4)
			atomic_fetch_add(&torn, 1);
	}
	return NULL;
}

START_TEST(test_rejoin_never_shows_a_torn_endpoint_to_the_data_path)
{
	pthread_t th[READERS];
	uint64_t token;

	atomic_store(&race_stop, false);
	atomic_store(&torn, 0);
	atomic_store(&reads, 0);
	ck_assert_int_eq(phub_engine_job_join(job, 1, NONCE, &ep[0], &token), 0);
	for (unsigned int i = 0; i < READERS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, reader, NULL), 0);
	/* The control thread: the rank comes back from one address, then the other. */
	for (unsigned int n = 0; n < REJOINS; n++)
		ck_assert_int_eq(phub_engine_job_join(job, 1, NONCE, &ep[n % 2 ? 0 : 1], &token),
				0);
	atomic_store(&race_stop, true);
	for (unsigned int i = 0; i < READERS; i++)
		pthread_join(th[i], NULL);
	ck_assert_uint_gt(atomic_load(&reads), 0);
	ck_assert_uint_eq(atomic_load(&torn), 0);
}
END_TEST


/* ---- the control plane object: a fake clock and captured sends ---- */

#define MAX_SENT 64

struct fake {
	uint64_t now;
	unsigned int n_sent;
	struct phub_control_peer to[MAX_SENT];
	uint8_t dgram[MAX_SENT][PHUB_WIRE_MAX_DATAGRAM];
	size_t len[MAX_SENT];
	unsigned int created, released;
};

static struct fake fk;
static struct phub_control *ctl;
static const struct phub_layout_server one_server[1] = {
	{ .lcore = 0, .port = 0, .port_numa = PHUB_LAYOUT_NUMA_ANY, .lcore_numa = 0 },
};
static const struct phub_wire_endpoint one_endpoint[1] = { { .ipv4 = 0, .udp_port = 47001 } };

static uint64_t
fake_now(void *ctx)
{
	return ((struct fake *)ctx)->now;
}

static void
fake_send(void *ctx, const struct phub_control_peer *to, const void *buf, size_t len)
{
	struct fake *f = ctx;

	ck_assert_uint_lt(f->n_sent, MAX_SENT);
	ck_assert_uint_le(len, sizeof(f->dgram[0]));
	f->to[f->n_sent] = *to;
	memcpy(f->dgram[f->n_sent], buf, len);
	f->len[f->n_sent] = len;
	f->n_sent++;
}

static void
fake_created(void *ctx, struct phub_engine_job *job)
{
	(void)job;
	((struct fake *)ctx)->created++;
}

static void
fake_release(void *ctx, struct phub_engine_job *job)
{
	((struct fake *)ctx)->released++;
	phub_engine_job_unpublish(engine, job);
	phub_engine_job_free(job);
}

static const struct phub_control_ops fake_ops = {
	.now_ns = fake_now, .send = fake_send, .job_created = fake_created,
	.job_release = fake_release,
};

static struct phub_control_params
ctl_params(void)
{
	struct phub_control_params p = {
		.engine = engine, .ops = &fake_ops, .ctx = &fk, .servers = one_server,
		.endpoints = one_endpoint, .n_servers = 1, .mtu = 1500, .chunk_bytes = 1024,
		.join_ms = 2000, .worker_dead_ms = 1000,
	};
	return p;
}

static void
ctl_setup(void)
{
	struct phub_control_params p;

	memset(&fk, 0, sizeof(fk));
	fk.now = 1000000000ull;
	engine = phub_engine_create();
	ck_assert_ptr_nonnull(engine);
	p = ctl_params();
	ctl = phub_control_create(&p);
	ck_assert_ptr_nonnull(ctl);
}

static void
ctl_teardown(void)
{
	struct phub_engine_job *j;

	phub_control_free(ctl);
	while ((j = phub_engine_job_next(engine, NULL)) != NULL) {
		phub_engine_job_unpublish(engine, j);
		phub_engine_job_free(j);
	}
	phub_engine_free(engine);
}

static const struct phub_control_peer worker[3] = {
	{ .ipv4 = 0x0a000065, .udp_port = 5000, .port = 0, .mac = { 2, 0, 0, 0, 0, 1 } },
	{ .ipv4 = 0x0a000066, .udp_port = 5001, .port = 0, .mac = { 2, 0, 0, 0, 0, 2 } },
	{ .ipv4 = 0x0a000067, .udp_port = 5002, .port = 0, .mac = { 2, 0, 0, 0, 0, 3 } },
};

/* Send rank's JOIN (every datagram) from worker[rank]; join_flags and world as given. */
static void
send_join(uint16_t rank, uint16_t world, uint16_t join_flags, float lr)
{
	struct phub_wire_join_params jp;
	uint8_t buf[1500];
	int n;

	memset(&jp, 0, sizeof(jp));
	jp.join = join_of(rank);
	jp.join.world_size = world;
	jp.join.join_flags = join_flags;
	jp.join.hyper.lr = lr;
	jp.keys = wkeys;
	jp.key_count = N_KEYS;
	n = phub_wire_join_segments(&jp, 1500);
	for (int i = 0; i < n; i++) {
		int len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, (uint16_t)i);

		ck_assert_int_gt(len, 0);
		phub_control_input(ctl, &worker[rank], buf, (size_t)len);
	}
}

/* The i-th datagram sent, parsed. */
static struct phub_wire_msg
sent(unsigned int i)
{
	struct phub_wire_msg m;

	ck_assert_uint_lt(i, fk.n_sent);
	ck_assert_int_eq(phub_wire_parse(fk.dgram[i], fk.len[i], &m), PHUB_DROP_OK);
	return m;
}

static uint16_t
error_code(unsigned int i, char *text, size_t cap)
{
	struct phub_wire_msg m = sent(i);
	struct phub_wire_error_msg e;

	ck_assert_uint_eq(m.opcode, PHUB_WIRE_OP_ERROR);
	ck_assert_int_eq(phub_wire_error_parse(m.payload, m.payload_len, &e), PHUB_DROP_OK);
	snprintf(text, cap, "%.*s", (int)e.msg_len, e.text);
	return e.code;
}

START_TEST(test_first_join_creates_the_job_and_answers_join_ack)
{
	struct phub_wire_join_ack_seg seg;
	struct phub_engine_peer peer;
	struct phub_wire_msg m;
	uint64_t token;

	send_join(0, 2, 0, 0.5f);
	ck_assert_uint_eq(fk.n_sent, 1);
	m = sent(0);
	ck_assert_uint_eq(m.opcode, PHUB_WIRE_OP_JOIN_ACK);
	ck_assert_uint_ne(m.session_token, 0);
	ck_assert_uint_eq(m.flags & (PHUB_WIRE_F_CSUM | PHUB_WIRE_F_REPLAY), 0);
	ck_assert_int_eq(phub_wire_join_ack_parse(m.payload, m.payload_len, &seg), PHUB_DROP_OK);
	ck_assert_uint_eq(seg.ack.iteration, 0);
	ck_assert_uint_eq(seg.endpoint_count, 1);
	ck_assert_uint_eq(phub_wire_join_ack_seg_endpoint(&seg, 0).udp_port, 47001);
	ck_assert_uint_eq(fk.to[0].ipv4, worker[0].ipv4);
	ck_assert_uint_eq(fk.to[0].udp_port, worker[0].udp_port);
	ck_assert_uint_eq(fk.created, 1);
	ck_assert_uint_eq(phub_control_job_count(ctl), 1);
	job = phub_engine_job_lookup(engine, m.job_id);
	ck_assert_ptr_nonnull(job);
	ck_assert(phub_engine_job_rank(job, 0, &peer, &token));
	ck_assert_uint_eq(token, m.session_token);
	ck_assert_mem_eq(peer.mac, worker[0].mac, 6);
	/* The same JOIN again (its JOIN_ACK lost): the same token, marked REPLAY. */
	send_join(0, 2, 0, 0.5f);
	ck_assert_uint_eq(fk.n_sent, 2);
	ck_assert_uint_eq(sent(1).session_token, m.session_token);
	ck_assert_uint_eq(sent(1).flags & PHUB_WIRE_F_REPLAY, PHUB_WIRE_F_REPLAY);
	ck_assert_uint_eq(fk.created, 1);
}
END_TEST

START_TEST(test_later_join_with_other_hyper_parameters_gets_layout_mismatch)
{
	char text[PHUB_WIRE_ERROR_MSG_MAX + 1];

	send_join(0, 2, 0, 0.5f);
	send_join(1, 2, 0, 0.25f);
	ck_assert_uint_eq(fk.n_sent, 2);
	ck_assert_uint_eq(error_code(1, text, sizeof(text)), PHUB_WIRE_ERR_LAYOUT_MISMATCH);
	ck_assert_msg(strstr(text, "hyper-parameters") != NULL, "%s", text);
	ck_assert_uint_eq(fk.to[1].udp_port, worker[1].udp_port);
	/* With the same ones it joins. */
	send_join(1, 2, 0, 0.5f);
	ck_assert_uint_eq(sent(2).opcode, PHUB_WIRE_OP_JOIN_ACK);
}
END_TEST

START_TEST(test_csum_join_gets_csum_on_join_ack_and_in_the_endpoint)
{
	struct phub_engine_peer peer;
	struct phub_wire_msg m;
	uint64_t token;

	send_join(0, 2, PHUB_WIRE_JOIN_F_CSUM, 0.5f);
	send_join(1, 2, 0, 0.5f);
	m = sent(0);
	ck_assert_uint_eq(m.flags & PHUB_WIRE_F_CSUM, PHUB_WIRE_F_CSUM);
	ck_assert_uint_eq(sent(1).flags & PHUB_WIRE_F_CSUM, 0);
	job = phub_engine_job_lookup(engine, m.job_id);
	ck_assert(phub_engine_job_rank(job, 0, &peer, &token));
	ck_assert_uint_eq(peer.flags & PHUB_ENGINE_PEER_F_CSUM, PHUB_ENGINE_PEER_F_CSUM);
	ck_assert(phub_engine_job_rank(job, 1, &peer, &token));
	ck_assert_uint_eq(peer.flags & PHUB_ENGINE_PEER_F_CSUM, 0);
}
END_TEST

START_TEST(test_incomplete_join_is_answered_join_timeout_on_the_fake_clock)
{
	struct phub_wire_join_params jp;
	char text[PHUB_WIRE_ERROR_MSG_MAX + 1];
	uint8_t buf[1500];
	int len;

	memset(&jp, 0, sizeof(jp));
	jp.join = join_of(1);
	for (uint32_t k = 0; k < 600; k++)
		many_keys[k] = (struct phub_wire_key){ .key_id = k, .elem_count = 1 };
	jp.keys = many_keys;
	jp.key_count = 600;
	ck_assert_int_gt(phub_wire_join_segments(&jp, 1500), 1);
	len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
	phub_control_input(ctl, &worker[1], buf, (size_t)len);
	ck_assert_uint_eq(fk.n_sent, 0);
	fk.now += 2000ull * 1000000u;		/* join_ms: not yet */
	phub_control_poll(ctl);
	ck_assert_uint_eq(fk.n_sent, 0);
	fk.now += 1;
	phub_control_poll(ctl);
	ck_assert_uint_eq(fk.n_sent, 1);
	ck_assert_uint_eq(error_code(0, text, sizeof(text)), PHUB_WIRE_ERR_JOIN_TIMEOUT);
	ck_assert_uint_eq(fk.to[0].udp_port, worker[1].udp_port);
	ck_assert_mem_eq(fk.to[0].mac, worker[1].mac, 6);
	ck_assert_uint_eq(sent(0).worker_rank, 1);
	phub_control_poll(ctl);
	ck_assert_uint_eq(fk.n_sent, 1);
}
END_TEST

static struct phub_wire_msg
leave_msg(const struct phub_wire_msg *ack)
{
	struct phub_wire_msg m;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_LEAVE);
	m.job_id = ack->job_id;
	m.session_token = ack->session_token;
	m.worker_rank = ack->worker_rank;
	return m;
}

static void
input_msg(const struct phub_control_peer *from, const struct phub_wire_msg *m)
{
	uint8_t buf[PHUB_WIRE_HDR_LEN];
	int len = phub_wire_encode(buf, sizeof(buf), m);

	ck_assert_int_gt(len, 0);
	phub_control_input(ctl, from, buf, (size_t)len);
}

START_TEST(test_last_leave_ends_the_job_and_a_repeat_is_acked_again)
{
	struct phub_control_stats st;
	struct phub_wire_msg ack, l;

	send_join(0, 1, 0, 0.5f);
	ack = sent(0);
	l = leave_msg(&ack);
	/* Another token: dropped, counted, unanswered. */
	l.session_token ^= 1;
	input_msg(&worker[0], &l);
	ck_assert_uint_eq(fk.n_sent, 1);
	phub_control_get_stats(ctl, &st);
	ck_assert_uint_eq(st.drops[PHUB_DROP_BAD_TOKEN], 1);
	l.session_token ^= 1;
	input_msg(&worker[0], &l);
	ck_assert_uint_eq(fk.n_sent, 2);
	ck_assert_uint_eq(sent(1).opcode, PHUB_WIRE_OP_LEAVE_ACK);
	ck_assert_uint_eq(sent(1).flags & PHUB_WIRE_F_REPLAY, 0);
	ck_assert_uint_eq(fk.released, 1);
	ck_assert_uint_eq(phub_control_job_count(ctl), 0);
	input_msg(&worker[0], &l);
	ck_assert_uint_eq(fk.n_sent, 3);
	ck_assert_uint_eq(sent(2).opcode, PHUB_WIRE_OP_LEAVE_ACK);
	ck_assert_uint_eq(sent(2).flags & PHUB_WIRE_F_REPLAY, PHUB_WIRE_F_REPLAY);
	ck_assert_uint_eq(fk.released, 1);
}
END_TEST

START_TEST(test_ping_of_a_session_the_pbox_lost_gets_unknown_job)
{
	char text[PHUB_WIRE_ERROR_MSG_MAX + 1];
	struct phub_wire_msg ack, ping;

	send_join(0, 2, 0, 0.5f);
	ack = sent(0);
	phub_wire_msg_init(&ping, PHUB_WIRE_OP_PING);
	ping.job_id = ack.job_id;
	ping.session_token = ack.session_token;
	ping.worker_rank = 0;
	ping.aux = 77;
	input_msg(&worker[0], &ping);
	ck_assert_uint_eq(sent(1).opcode, PHUB_WIRE_OP_PONG);
	ck_assert_uint_eq(sent(1).aux, 77);
	ping.worker_rank = 1;
	input_msg(&worker[1], &ping);
	ck_assert_uint_eq(error_code(2, text, sizeof(text)), PHUB_WIRE_ERR_UNKNOWN_JOB);
	ck_assert_msg(strstr(text, "JOIN again") != NULL, "%s", text);
}
END_TEST

START_TEST(test_job_limits_refuse_with_the_reason)
{
	struct phub_control_params p = ctl_params();
	char text[PHUB_WIRE_ERROR_MSG_MAX + 1];
	struct phub_wire_join_params jp;
	uint8_t buf[1500];
	int len;

	phub_control_free(ctl);
	p.max_jobs = 1;
	p.job_memory_bytes = 1 << 20;
	ctl = phub_control_create(&p);
	send_join(0, 1, 0, 0.5f);
	ck_assert_uint_eq(sent(0).opcode, PHUB_WIRE_OP_JOIN_ACK);
	/* A second job: the table of this PBox is full. */
	memset(&jp, 0, sizeof(jp));
	jp.join = join_of(0);
	strcpy(jp.join.name, "other");
	jp.join.world_size = 1;
	jp.keys = wkeys;
	jp.key_count = N_KEYS;
	len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
	phub_control_input(ctl, &worker[1], buf, (size_t)len);
	ck_assert_uint_eq(error_code(1, text, sizeof(text)), PHUB_WIRE_ERR_JOB_LIMIT);
	ck_assert_msg(strstr(text, "limits.max_jobs") != NULL, "%s", text);
	/* A job bigger than a job may be, once the first is gone. */
	phub_control_job_end(ctl, phub_engine_job_next(engine, NULL));
	many_keys[0] = (struct phub_wire_key){ .key_id = 1, .elem_count = 1u << 20 };
	jp.keys = many_keys;
	jp.key_count = 1;
	len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
	phub_control_input(ctl, &worker[1], buf, (size_t)len);
	ck_assert_uint_eq(error_code(2, text, sizeof(text)), PHUB_WIRE_ERR_NO_MEMORY);
	ck_assert_msg(strstr(text, "limits.job_memory_mb") != NULL, "%s", text);
}
END_TEST

START_TEST(test_restored_job_nobody_joins_ends_after_worker_dead_ms)
{
	struct phub_engine_ckpt_info info = { .optimizer = { .type = PHUB_OPT_SGD } };

	job = make_job("restored");
	phub_control_job_restored(ctl, job, &info);
	ck_assert_uint_eq(phub_control_job_count(ctl), 1);
	/* The first check finds it without a rank; the clock starts there. */
	fk.now += 200ull * 1000000u;
	phub_control_poll(ctl);
	fk.now += 1000ull * 1000000u;		/* worker_dead_ms: not yet */
	phub_control_poll(ctl);
	ck_assert_uint_eq(fk.released, 0);
	fk.now += 200ull * 1000000u;
	phub_control_poll(ctl);
	ck_assert_uint_eq(fk.released, 1);
	ck_assert_uint_eq(phub_control_job_count(ctl), 0);
}
END_TEST

START_TEST(test_restored_job_is_kept_once_a_rank_joins)
{
	struct phub_engine_ckpt_info info = { .optimizer = { .type = PHUB_OPT_SGD } };

	job = make_job("job");
	phub_control_job_restored(ctl, job, &info);
	fk.now += 200ull * 1000000u;
	phub_control_poll(ctl);
	/* Rank 0 comes back with hyper-parameters of its own: the restored job takes them. */
	send_join(0, 2, 0, 0.125f);
	ck_assert_uint_eq(sent(0).opcode, PHUB_WIRE_OP_JOIN_ACK);
	fk.now += 5000ull * 1000000u;
	phub_control_poll(ctl);
	ck_assert_uint_eq(fk.released, 0);
	/* Rank 1 must repeat what rank 0 declared. */
	send_join(1, 2, 0, 0.5f);
	ck_assert_uint_eq(sent(1).opcode, PHUB_WIRE_OP_ERROR);
	send_join(1, 2, 0, 0.125f);
	ck_assert_uint_eq(sent(2).opcode, PHUB_WIRE_OP_JOIN_ACK);
}
END_TEST

/* ---- elastic jobs: a dead rank removed, the others told (WORLD) ---- */

static uint64_t
fake_engine_now(void *arg)
{
	return ((struct fake *)arg)->now;
}

/* The fixture's engine and control plane again, the engine on the fake clock (liveness). */
static void
ctl_on_fake_clock(void)
{
	struct phub_engine_params ep = { .clock = fake_engine_now, .clock_arg = &fk };
	struct phub_control_params p;

	phub_control_free(ctl);
	phub_engine_free(engine);
	engine = phub_engine_create_with(&ep);
	p = ctl_params();
	ctl = phub_control_create(&p);
	ck_assert_ptr_nonnull(ctl);
}

/* Every segment of iteration it pushed by rank (from worker[rank]) with zeros. */
static void
push_iteration(struct phub_engine_job *j, uint16_t rank, uint32_t it)
{
	const struct phub_layout *layout = phub_engine_job_layout(j);
	static float zeros[1024];
	struct phub_engine_stats st;
	struct phub_engine_peer peer;
	uint64_t token;

	ck_assert(phub_engine_job_rank(j, rank, &peer, &token));
	memset(&st, 0, sizeof(st));
	for (uint32_t c = 0; c < phub_layout_chunk_count(layout); c++) {
		struct phub_layout_chunk ci;

		phub_layout_chunk_get(layout, c, &ci);
		for (uint32_t sg = 0; sg < ci.n_segments; sg++) {
			struct phub_layout_segment si;
			struct phub_engine_request req;
			struct phub_engine_reply reply;

			phub_layout_segment_get(layout, c, sg, &si);
			memset(&req, 0, sizeof(req));
			req.session_token = token;
			req.chunk_id = c;
			req.iteration = it;
			req.rank = rank;
			req.elem_offset = si.elem_offset;
			req.elem_count = si.n_elems;
			req.seg_index = (uint16_t)sg;
			req.seg_count = (uint16_t)ci.n_segments;
			req.dtype = (uint8_t)PHUB_DTYPE_FP32;
			req.src_ipv4 = worker[rank].ipv4;
			req.src_udp_port = worker[rank].udp_port;
			req.payload = zeros;
			req.payload_len = si.n_elems * sizeof(float);
			phub_engine_push(j, &req, &reply, &st);
			ck_assert_uint_ne(reply.actions, PHUB_ENGINE_DROP);
		}
	}
}

/*
 * Three ranks join (elastic or not), train iterations 0 and 1; at iteration 2 rank 2 falls
 * silent while 0 and 1 push. The clock passes worker_dead_ms and two liveness checks run.
 */
static struct phub_engine_job *
rank_two_dies(uint16_t join_flags)
{
	struct phub_engine_job *j;

	ctl_on_fake_clock();
	for (uint16_t r = 0; r < 3; r++)
		send_join(r, 3, join_flags, 0.5f);
	j = phub_engine_job_find(engine, "job");
	ck_assert_ptr_nonnull(j);
	for (uint32_t it = 0; it < 2; it++)
		for (uint16_t r = 0; r < 3; r++)
			push_iteration(j, r, it);
	fk.now += 500000000ull;
	push_iteration(j, 0, 2);
	push_iteration(j, 1, 2);
	fk.n_sent = 0;
	/* Ranks 0 and 1 PING while they wait; rank 2 is silent. */
	for (int k = 0; k < 2; k++) {
		fk.now += 600000000ull;
		for (uint16_t r = 0; r < 2; r++) {
			struct phub_engine_peer peer;
			uint64_t token;

			phub_engine_job_rank(j, r, &peer, &token);
			phub_engine_job_heard(j, r, token, worker[r].ipv4, worker[r].udp_port);
		}
		phub_control_poll(ctl);
	}
	return j;
}

START_TEST(test_dead_rank_of_an_elastic_job_is_removed_and_the_others_told)
{
	struct phub_control_stats cs;
	struct phub_engine_job_info info;
	struct phub_engine_job *j = rank_two_dies(PHUB_WIRE_JOIN_F_ELASTIC);
	struct phub_wire_msg m, ack;
	uint8_t buf[128];
	uint32_t from;
	int len;

	/* The job goes on with two ranks. */
	ck_assert_ptr_eq(phub_engine_job_find(engine, "job"), j);
	ck_assert(phub_engine_job_rank_removed(j, 2, &from));
	ck_assert_uint_eq(from, 2);
	phub_engine_job_get_info(j, &info);
	ck_assert_uint_eq(info.live, 2);
	phub_control_get_stats(ctl, &cs);
	ck_assert_uint_eq(cs.ranks_removed, 1);
	/* The job goes on without the rank: it did not fail. */
	ck_assert_uint_eq(cs.jobs_failed, 0);
	/* WORLD to ranks 0 and 1, none to the dead one, no ERROR. */
	ck_assert_uint_eq(fk.n_sent, 2);
	for (unsigned int i = 0; i < 2; i++) {
		m = sent(i);
		ck_assert_uint_eq(m.opcode, PHUB_WIRE_OP_WORLD);
		ck_assert_uint_eq(m.worker_rank, i);
		ck_assert_uint_eq(fk.to[i].ipv4, worker[i].ipv4);
		ck_assert_uint_eq(m.job_id, info.job_id);
		ck_assert_uint_eq(m.iteration, 2);
		ck_assert_uint_eq(PHUB_WIRE_WORLD_CHANGE(m.aux), 1);
		ck_assert_uint_eq(PHUB_WIRE_WORLD_RANK(m.aux), 2);
	}
	/* Unanswered, they go again at the next liveness check. */
	fk.n_sent = 0;
	fk.now += 200000000ull;
	phub_control_poll(ctl);
	ck_assert_uint_eq(fk.n_sent, 2);
	/* Rank 0 answers; an answer from another address counts for nothing. */
	ack = sent(0);
	ack.opcode = PHUB_WIRE_OP_WORLD_ACK;
	len = phub_wire_encode(buf, sizeof(buf), &ack);
	ck_assert_int_gt(len, 0);
	phub_control_input(ctl, &worker[1], buf, (size_t)len);
	phub_control_get_stats(ctl, &cs);
	ck_assert_uint_eq(cs.world_acks, 0);
	phub_control_input(ctl, &worker[0], buf, (size_t)len);
	phub_control_get_stats(ctl, &cs);
	ck_assert_uint_eq(cs.world_acks, 1);
	fk.n_sent = 0;
	fk.now += 200000000ull;
	phub_control_poll(ctl);
	ck_assert_uint_eq(fk.n_sent, 1);
	ck_assert_uint_eq(sent(0).worker_rank, 1);
	/*
	 * It comes back: its JOIN_ACK names the boundary, two past the iteration the segments
	 * sum (2: nobody completed it here without a data thread), and every rank hears of it.
	 */
	fk.n_sent = 0;
	send_join(2, 3, PHUB_WIRE_JOIN_F_ELASTIC, 0.5f);
	{
		struct phub_wire_join_ack_seg seg;
		unsigned int worlds = 0;

		m = sent(0);
		ck_assert_uint_eq(m.opcode, PHUB_WIRE_OP_JOIN_ACK);
		ck_assert_int_eq(phub_wire_join_ack_parse(m.payload, m.payload_len, &seg),
				PHUB_DROP_OK);
		ck_assert_uint_eq(seg.ack.iteration, 4);
		ck_assert(phub_engine_job_rank_joining(j, 2, &from));
		ck_assert_uint_eq(from, 4);
		for (unsigned int i = 1; i < fk.n_sent; i++) {
			m = sent(i);
			ck_assert_uint_eq(m.opcode, PHUB_WIRE_OP_WORLD);
			worlds++;
			/* Rank 0 took change 1 and gets 2; ranks 1 and 2 get 1 first. */
			ck_assert_uint_eq(PHUB_WIRE_WORLD_CHANGE(m.aux), m.worker_rank == 0 ? 2 : 1);
			ck_assert_uint_eq(PHUB_WIRE_WORLD_RANK(m.aux), 2);
			ck_assert_uint_eq(m.iteration, m.worker_rank == 0 ? 4 : 2);
		}
		ck_assert_uint_eq(worlds, 3);
		phub_engine_job_get_info(j, &info);
		ck_assert_uint_eq(info.live, 3);
	}
}
END_TEST

START_TEST(test_dead_rank_of_a_fail_job_ends_it_as_before)
{
	struct phub_control_stats cs;
	char text[256];

	rank_two_dies(0);
	/* ERROR WORKER_TIMEOUT to each joined rank (the dead one too), and the job is gone. */
	ck_assert_ptr_null(phub_engine_job_find(engine, "job"));
	ck_assert_uint_eq(fk.n_sent, 3);
	for (unsigned int i = 0; i < 3; i++)
		ck_assert_uint_eq(error_code(i, text, sizeof(text)), PHUB_WIRE_ERR_WORKER_TIMEOUT);
	phub_control_get_stats(ctl, &cs);
	ck_assert_uint_eq(cs.ranks_removed, 0);
	ck_assert_uint_eq(cs.worlds_sent, 0);
	/* A job that ended on a dead rank failed; it did not end by its workers' LEAVEs. */
	ck_assert_uint_eq(cs.jobs_failed, 1);
	ck_assert_uint_eq(cs.jobs_ended, 1);
}
END_TEST

START_TEST(test_elastic_flag_must_agree_across_ranks)
{
	char text[256];

	send_join(0, 2, PHUB_WIRE_JOIN_F_ELASTIC, 0.5f);
	ck_assert(phub_engine_job_elastic(phub_engine_job_find(engine, "job")));
	fk.n_sent = 0;
	send_join(1, 2, 0, 0.5f);
	ck_assert_uint_eq(error_code(0, text, sizeof(text)), PHUB_WIRE_ERR_LAYOUT_MISMATCH);
	ck_assert_ptr_nonnull(strstr(text, "on_worker_dead"));
}
END_TEST

/* ---- checkpoint files ---- */

static unsigned int n_restored;

static void
on_restored(void *ctx, struct phub_engine_job *j, const struct phub_engine_ckpt_info *info,
		const char *file)
{
	(void)ctx;
	(void)j;
	ck_assert_uint_eq(info->iteration, 0);
	ck_assert_str_eq(file, "job.0000000000.ckpt");
	n_restored++;
}

START_TEST(test_checkpoint_written_restored_and_a_damaged_one_set_aside)
{
	char dirpath[] = "/tmp/phub-control-test.XXXXXX";
	char path[256];
	struct phub_control_ckpt_dir dir;
	struct phub_control_ckpt_write w;
	struct phub_engine_ckpt_restore_params rp = { .servers = one_server, .n_servers = 1 };
	struct phub_control_params p;
	struct phub_wire_msg ack;
	struct stat sb;
	int fd;
	uint8_t b;

	ck_assert_ptr_nonnull(mkdtemp(dirpath));
	ck_assert_int_eq(phub_control_ckpt_open(&dir, dirpath), 0);
	send_join(0, 1, 0, 0.5f);
	ack = sent(0);
	job = phub_engine_job_lookup(engine, ack.job_id);
	/* Iteration 0 pushed whole: the job has a model to save. */
	push_iteration(job, 0, 0);
	memset(&w, 0, sizeof(w));
	w.job = job;
	w.src = PHUB_ENGINE_CKPT_LIVE;
	w.iteration = 0;
	phub_control_ckpt_write(&dir, &w);
	ck_assert_msg(w.rc == 0, "%s", w.err);
	ck_assert_str_eq(w.file, "job.0000000000.ckpt");
	ck_assert_uint_gt(w.bytes, 0);

	/* A PBox started again on the directory: the job is back, its declaration waits. */
	ctl_teardown();
	ctl_setup();
	n_restored = 0;
	ck_assert_uint_eq(phub_control_ckpt_restore(&dir, ctl, &rp, on_restored, NULL), 1);
	ck_assert_uint_eq(n_restored, 1);
	ck_assert_uint_eq(phub_control_job_count(ctl), 1);
	send_join(0, 1, 0, 0.5f);
	ck_assert_uint_eq(sent(0).opcode, PHUB_WIRE_OP_JOIN_ACK);

	/* One byte flipped: refused by its CRC, renamed .corrupt, nothing restored. */
	snprintf(path, sizeof(path), "%s/job.0000000000.ckpt", dirpath);
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &b, 1, 200), 1);
	b ^= 0x40;
	ck_assert_int_eq(pwrite(fd, &b, 1, 200), 1);
	close(fd);
	ctl_teardown();
	ctl_setup();
	p = ctl_params();
	(void)p;
	ck_assert_uint_eq(phub_control_ckpt_restore(&dir, ctl, &rp, NULL, NULL), 0);
	ck_assert_uint_eq(phub_control_job_count(ctl), 0);
	ck_assert_int_ne(stat(path, &sb), 0);
	snprintf(path, sizeof(path), "%s/job.0000000000.ckpt.corrupt", dirpath);
	ck_assert_int_eq(stat(path, &sb), 0);
	unlink(path);
	ck_assert_uint_eq(phub_control_ckpt_remove_all(&dir, "job"), 0);
	phub_control_ckpt_close(&dir);
	rmdir(dirpath);
}
END_TEST

Suite *
phub_control_suite(void)
{
	Suite *s = suite_create("control");
	TCase *tc;

	/* The messages' own decisions, on a job made by hand (job_setup). */
	tc = PHUB_TCASE(s, "messages",
		test_join_matching_the_first_rank_passes,
		test_join_mismatch_names_every_declared_field,
		test_restored_job_takes_its_declaration_from_the_first_rank_back,
		test_leave_ends_the_session_then_is_acked_again,
		test_leave_of_a_session_not_held_is_dropped_with_the_push_reason,
		test_ping_of_a_lost_session_asks_for_a_new_join,
		test_rejoin_never_shows_a_torn_endpoint_to_the_data_path);
	tcase_add_checked_fixture(tc, job_setup, job_teardown);

	PHUB_TCASE(s, "join reassembly",
		test_split_join_completes_with_its_last_datagram,
		test_join_of_too_many_keys_is_refused_before_any_allocation,
		test_full_table_gives_the_oldest_join_away,
		test_incomplete_join_times_out_once_with_its_header);

	/* The control object through its API, with captured sends and a fake clock (ctl_setup). */
	tc = PHUB_TCASE(s, "object",
		test_first_join_creates_the_job_and_answers_join_ack,
		test_later_join_with_other_hyper_parameters_gets_layout_mismatch,
		test_csum_join_gets_csum_on_join_ack_and_in_the_endpoint,
		test_incomplete_join_is_answered_join_timeout_on_the_fake_clock,
		test_last_leave_ends_the_job_and_a_repeat_is_acked_again,
		test_ping_of_a_session_the_pbox_lost_gets_unknown_job,
		test_job_limits_refuse_with_the_reason,
		test_restored_job_nobody_joins_ends_after_worker_dead_ms,
		test_restored_job_is_kept_once_a_rank_joins,
		test_dead_rank_of_an_elastic_job_is_removed_and_the_others_told,
		test_dead_rank_of_a_fail_job_ends_it_as_before,
		test_elastic_flag_must_agree_across_ranks,
		test_checkpoint_written_restored_and_a_damaged_one_set_aside);
	tcase_add_checked_fixture(tc, ctl_setup, ctl_teardown);
	return s;
}
