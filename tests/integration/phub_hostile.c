/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * phub-hostile: a tenant that misbehaves, for the integration tests. From a worker's namespace
 * it sends a PBox every kind of bad datagram it can make with lib/wire and writes, as JSON, how
 * many of each the PBox must count under each drop reason, so that a test can hold the PBox's
 * /phub/stats to it. It also joins a job of its own legitimately (the only way to learn a real
 * token) and abuses that session: the token from a second socket, off-grid segments,
 * iterations far from the current one, another job's id.
 *
 *   phub-hostile --server IP [--port 47000] [--victim JOB_ID]... [--victim-name NAME]
 *                [--victim-world N] [--repeat N] [--guesses N] [--ping] [--join-keys N]
 *                [--csum] [--misdirect] [--ring-spray JOB_ID]
 *
 * --victim: a job that runs beside (the test reads its id from /phub/jobs; an attacker would
 * scan the 2^32 ids, this tries the right ones with guessed tokens, the worst case).
 * --victim-name: JOIN that job with guessed nonces, --repeat times each in two shapes: as a job
 * of --victim-world ranks (default 2) with one key of 1000 fp32 elements (the job's own shape
 * when the test says so), and with one rank more and a key of 999 elements (never the job's).
 * Both must get bad_nonce with a text that says nothing of the job's shape. --ping: only check
 * that the PBox answers a PING (exit 0) and stop. --join-keys N: only send one JOIN that claims
 * a layout of N keys (and carries one), print the PBox's answer as JSON, and stop.
 * --misdirect: only join a job of our own and push its initial round (every segment of its one
 * chunk) to another lcore's UDP port than the JOIN_ACK named (the PBox has data ports
 * port+1 .. port+n, n >= 2), as a stale map would; print {"misdirected": datagrams sent,
 * "segments": of the chunk, "models": segments whose MODEL came back} and stop. A PBox hands
 * each such datagram to the chunk's lcore (counted as wrong_lcore) and answers it as usual.
 * --ring-spray JOB_ID: only send --repeat RING_REDUCE, RING_GATHER, RING_ACK and RING_ACKV
 * datagrams each for that job (a job across racks, as the PBox at --server:--port knows it:
 * send them to a data port of its uplink) with guessed tokens, as a host on the spine that is
 * not the job's ring peer would; print {"sent": datagrams} and stop. The PBox must drop each
 * as bad_token.
 * --csum: only JOIN a job of its own asking for CRC32C (JOIN flag CSUM), PUSH its three
 * segments with CSUM, then one PUSH whose payload was changed after its CRC was computed (the UDP
 * checksum is the kernel's, so only the CRC can tell), then that PUSH intact; print as JSON
 * whether the JOIN_ACK, the ACKs and the MODELs carried a valid CSUM and which PUSHes were ACKed,
 * and stop.
 *
 * JSON on stdout: "expect" (reason -> count, exact), "at_least" (reason -> count: reasons that
 * real workers beside may also cause), "sent", "foreign_models" (MODELs of other jobs received:
 * must be 0), "errors" (ERROR answers: code name, text, and "victim_join": true for the answers
 * to the JOINs of --victim-name), "victim_joins" (how many such JOINs were sent), "own_job",
 * "leave_acks" (LEAVE_ACKs of our own session: 3, the LEAVEs sent again are ACKed again).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "wire/phub_wire.h"

#define DEFAULT_PORT 47000
#define MAX_VICTIMS 16
#define MAX_ERRORS 32
#define OWN_ELEMS 1000u
#define BUF_SIZE 2048

struct hostile_params {
	struct sockaddr_in ctrl;
	uint32_t victims[MAX_VICTIMS];
	unsigned int n_victims;
	const char *victim_name;
	uint16_t victim_world;
	unsigned int repeat;
	unsigned int guesses;
	bool ping_only;
	uint32_t join_keys;		/* --join-keys: one JOIN claiming this many keys */
	bool csum;			/* --csum: the checksum exchange alone */
	bool misdirect;			/* --misdirect: initial round to the wrong lcore */
	uint32_t ring_job;		/* --ring-spray: ring datagrams for this job id */
	bool ring_spray;
};

/* The legitimate session of the hostile's own job. */
struct own_session {
	uint32_t job_id;
	uint64_t token;
	uint32_t seg_elems;
	struct sockaddr_in data;	/* the endpoint of chunk 0 */
	bool ack_csum;			/* the JOIN_ACK carried a (valid) CSUM */
};

struct tally {
	uint64_t expect[PHUB_DROP_REASON_MAX];
	uint64_t at_least[PHUB_DROP_REASON_MAX];
	uint64_t sent;
	uint64_t foreign_models;
	unsigned int n_errors;
	uint16_t error_codes[MAX_ERRORS];
	char error_texts[MAX_ERRORS][PHUB_WIRE_ERROR_MSG_MAX + 1];
	bool error_victim[MAX_ERRORS];	/* an answer to a JOIN of --victim-name */
	bool in_victim_join;		/* what comes now answers such a JOIN */
	unsigned int victim_joins;
	unsigned int leave_acks;	/* LEAVE_ACKs of our own session */
};

static float zeros[OWN_ELEMS];

static uint64_t
random_u64(void)
{
	uint64_t v = 0;

	while (v == 0)
		if (getrandom(&v, sizeof(v), 0) != sizeof(v))
			v = 0;
	return v;
}

static int
udp_socket(void)
{
	struct sockaddr_in any = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&any, sizeof(any)) != 0) {
		perror("phub-hostile: socket");
		exit(1);
	}
	return fd;
}

/* Send len bytes; a negative len is an encoder's refusal, a bug of this program: stop. */
static void
send_raw(struct tally *t, int fd, const struct sockaddr_in *to, const void *buf, long len)
{
	if (len < 0) {
		fprintf(stderr, "phub-hostile: a datagram did not encode (%s)\n", strerror((int)-len));
		exit(1);
	}
	if (sendto(fd, buf, (size_t)len, 0, (const struct sockaddr *)to, sizeof(*to)) == len)
		t->sent++;
	else
		perror("phub-hostile: sendto");
	/* The PBox's queues are deep, the tap path is not: do not be the one that drops. */
	if (t->sent % 32 == 0)
		usleep(1000);
}

/* Note what came back: ERRORs, and any MODEL of a job that is not ours. */
static void
take_answer(struct tally *t, const struct own_session *own, const uint8_t *buf, size_t len)
{
	struct phub_wire_msg msg;
	struct phub_wire_error_msg e;

	if (phub_wire_parse(buf, len, &msg) != PHUB_DROP_OK)
		return;
	if (msg.opcode == PHUB_WIRE_OP_MODEL && (own == NULL || msg.job_id != own->job_id))
		t->foreign_models++;
	if (msg.opcode == PHUB_WIRE_OP_LEAVE_ACK && own != NULL && msg.job_id == own->job_id &&
	    msg.session_token == own->token)
		t->leave_acks++;
	if (msg.opcode == PHUB_WIRE_OP_ERROR && t->n_errors < MAX_ERRORS &&
	    phub_wire_error_parse(msg.payload, msg.payload_len, &e) == PHUB_DROP_OK) {
		t->error_codes[t->n_errors] = e.code;
		t->error_victim[t->n_errors] = t->in_victim_join;
		snprintf(t->error_texts[t->n_errors], sizeof(t->error_texts[0]), "%.*s",
				(int)e.msg_len, e.text);
		t->n_errors++;
	}
}

/* Read what is queued on fd for up to ms milliseconds. */
static void
drain(struct tally *t, const struct own_session *own, int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];

	while (poll(&pfd, 1, ms) > 0) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n > 0)
			take_answer(t, own, buf, (size_t)n);
	}
}

/* A datagram the PBox's validator refuses: count its reason, as our own copy of it says. */
static void
send_malformed(struct tally *t, int fd, const struct sockaddr_in *to, const uint8_t *buf,
		size_t len, unsigned int repeat)
{
	struct phub_wire_msg msg;
	enum phub_drop_reason why = phub_wire_parse(buf, len, &msg);

	/* A mutation that still parses is not malformed; the session checks are tested apart. */
	if (why == PHUB_DROP_OK)
		return;
	for (unsigned int i = 0; i < repeat; i++) {
		send_raw(t, fd, to, buf, len);
		t->expect[why]++;
	}
}

/* A well-formed PUSH of segment seg of chunk 0 (1000-element fp32 layout: 3 segments). */
static int
push_segment(uint8_t *buf, size_t cap, uint32_t job_id, uint64_t token, uint16_t rank,
		uint32_t seg_elems, uint32_t iteration, uint16_t seg, uint8_t flags)
{
	uint16_t n_segs = (uint16_t)((OWN_ELEMS + seg_elems - 1) / seg_elems);
	uint32_t off = seg * seg_elems;
	struct phub_wire_msg m;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_PUSH);
	m.job_id = job_id;
	m.session_token = token;
	m.worker_rank = rank;
	m.chunk_id = 0;
	m.iteration = iteration;
	m.elem_offset = off;
	m.elem_count = OWN_ELEMS - off < seg_elems ? OWN_ELEMS - off : seg_elems;
	m.seg_index = seg;
	m.seg_count = n_segs;
	m.flags = (uint8_t)(flags | (seg + 1 == n_segs ? PHUB_WIRE_F_LAST : 0));
	m.dtype = PHUB_DTYPE_FP32;
	m.payload = (const uint8_t *)zeros;
	m.payload_len = (uint16_t)(m.elem_count * sizeof(float));
	return phub_wire_encode(buf, cap, &m);
}

/* Segment 0 of that PUSH, no flags of its own: the base of the hostile variants below. */
static int
push_datagram(uint8_t *buf, size_t cap, uint32_t job_id, uint64_t token, uint16_t rank,
		uint32_t seg_elems, uint32_t iteration)
{
	return push_segment(buf, cap, job_id, token, rank, seg_elems, iteration, 0, 0);
}

static void
join_params(struct phub_wire_join_params *jp, struct phub_wire_key *key, const char *name,
		uint64_t nonce, uint16_t world_size)
{
	memset(jp, 0, sizeof(*jp));
	snprintf(jp->join.name, sizeof(jp->join.name), "%s", name);
	jp->join.nonce = nonce;
	jp->join.rank = 0;
	jp->join.world_size = world_size;
	jp->join.dtype = PHUB_DTYPE_FP32;
	jp->join.optimizer = PHUB_OPT_NONE;
	jp->join.hyper.beta1 = 0.9f;
	jp->join.hyper.beta2 = 0.999f;
	jp->join.hyper.eps = 1e-8f;
	key->key_id = 0;
	key->elem_count = OWN_ELEMS;
	jp->keys = key;
	jp->key_count = 1;
}

/* JOIN a one-worker job of our own and take the session from the JOIN_ACK. */
static int
join_own(const struct hostile_params *hp, struct tally *t, int fd, struct own_session *own)
{
	struct phub_wire_join_params jp;
	struct phub_wire_key key;
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	char name[PHUB_WIRE_JOB_NAME_LEN];
	int len;

	snprintf(name, sizeof(name), "hostile-%d", (int)getpid());
	join_params(&jp, &key, name, random_u64(), 1);
	if (hp->csum) {
		jp.join.join_flags = PHUB_WIRE_JOIN_F_CSUM;
		jp.flags = PHUB_WIRE_F_CSUM;
	}
	len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
	if (len <= 0)
		return -EINVAL;
	for (int attempt = 0; attempt < 20; attempt++) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		send_raw(t, fd, &hp->ctrl, buf, len);
		while (poll(&pfd, 1, 250) > 0) {
			struct phub_wire_join_ack_seg seg;
			struct phub_wire_endpoint ep;
			struct phub_wire_msg msg;
			ssize_t n = recv(fd, buf, sizeof(buf), 0);

			if (n <= 0 || phub_wire_parse(buf, (size_t)n, &msg) != PHUB_DROP_OK)
				continue;
			if (msg.opcode == PHUB_WIRE_OP_ERROR) {
				take_answer(t, NULL, buf, (size_t)n);
				return -EPERM;
			}
			if (msg.opcode != PHUB_WIRE_OP_JOIN_ACK ||
			    phub_wire_join_ack_parse(msg.payload, msg.payload_len, &seg) !=
			    PHUB_DROP_OK || seg.first_chunk != 0)
				continue;
			own->job_id = msg.job_id;
			own->token = msg.session_token;
			own->seg_elems = seg.ack.seg_elems;
			ep = phub_wire_join_ack_seg_endpoint(&seg,
					phub_wire_join_ack_seg_chunk(&seg, 0));
			own->data.sin_family = AF_INET;
			own->data.sin_addr.s_addr = ep.ipv4 != 0 ? htonl(ep.ipv4) :
					hp->ctrl.sin_addr.s_addr;
			own->data.sin_port = htons(ep.udp_port);
			/* phub_wire_parse() checked the CRC when the flag is set. */
			own->ack_csum = (msg.flags & PHUB_WIRE_F_CSUM) != 0;
			return 0;
		}
		len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
	}
	return -ETIMEDOUT;
}

/* Malformed datagrams: truncated, header fields and JOIN bodies mutated one at a time. */
static void
malformed(const struct hostile_params *hp, struct tally *t, int fd, const struct own_session *own)
{
	static const struct { uint8_t off, val; } patches[] = {
		{ 0, 0x00 }, { 1, 0x49 },		/* magic */
		{ 2, 0 }, { 2, 2 }, { 2, 0xff },	/* version */
		{ 3, 0x00 }, { 3, 0x05 }, { 3, 0x45 }, { 3, 0x7f }, { 3, 0xff },	/* opcode */
		{ 4, 0x10 }, { 4, 0x80 }, { 4, 0x05 },	/* flags: unknown, CSUM without a CRC */
		{ 5, 0 }, { 5, 50 }, { 5, 60 }, { 5, 64 }, { 5, 248 },	/* hdr_len */
		{ 6, 0x03 }, { 6, 0x7f },		/* dtype */
		{ 14, 0xff }, { 16, 0 }, { 17, 0 },	/* seg_index, seg_count */
		{ 18, 0xff }, { 19, 0x01 },		/* payload_len */
		{ 21, 1 }, { 23, 1 },			/* reserved */
		{ 32, 0x80 },				/* chunk_id in a PING */
		{ 44, 0 }, { 45, 0 }, { 46, 0 }, { 47, 0 },	/* elem_count */
		{ 53, 1 },				/* csum without the flag */
	};
	static const size_t cuts[] = { 0, 1, 8, 20, 55 };
	struct phub_wire_join_params jp;
	struct phub_wire_key key;
	struct phub_wire_msg m;
	uint8_t base[BUF_SIZE], buf[BUF_SIZE], join[BUF_SIZE];
	int push_len, ping_len, join_len;

	push_len = push_datagram(base, sizeof(base), own->job_id, own->token, 0, own->seg_elems, 0);
	phub_wire_msg_init(&m, PHUB_WIRE_OP_PING);
	m.job_id = own->job_id;
	m.session_token = own->token;
	ping_len = phub_wire_encode(buf, sizeof(buf), &m);
	join_params(&jp, &key, "hostile-malformed", 1, 1);
	join_len = phub_wire_join_write(join, sizeof(join), &jp, 1500, 0);
	if (push_len <= 0 || ping_len <= 0 || join_len <= 0) {
		fprintf(stderr, "phub-hostile: cannot encode the base datagrams\n");
		exit(1);
	}

	/* Truncated PUSHes, to the data port and the control port. */
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		send_malformed(t, fd, &own->data, base, cuts[i], hp->repeat);
		send_malformed(t, fd, &hp->ctrl, base, cuts[i], hp->repeat);
	}
	/* One header byte at a time, on a PUSH and on a PING. */
	for (size_t i = 0; i < sizeof(patches) / sizeof(patches[0]); i++) {
		memcpy(buf, base, (size_t)push_len);
		buf[patches[i].off] = patches[i].val;
		send_malformed(t, fd, &own->data, buf, (size_t)push_len, hp->repeat);
		phub_wire_encode(buf, sizeof(buf), &m);
		buf[patches[i].off] = patches[i].val;
		send_malformed(t, fd, &own->data, buf, (size_t)ping_len, hp->repeat);
	}
	/* A payload longer than payload_len says. */
	memcpy(buf, base, (size_t)push_len);
	memset(buf + push_len, 0, 8);
	send_malformed(t, fd, &own->data, buf, (size_t)push_len + 8, hp->repeat);
	/* JOIN bodies (at hdr_len 56): name, nonce, rank/world, dtype, optimizer, flags, hyper,
	 * chunk_bytes, key counts, a key of 0 elements. */
	{
		static const struct { uint16_t off; uint8_t val; } body[] = {
			{ 0, 0x01 }, { 0, 0x00 }, { 5, 0x7f },	/* name */
			{ 73, 5 },			/* rank 5 of 1 */
			{ 74, 0 }, { 75, 0 },		/* world_size 0 */
			{ 76, 9 }, { 77, 9 },		/* dtype, optimizer */
			{ 78, 0x80 },			/* join_flags */
			{ 80, 0xff }, { 81, 0xc0 },	/* lr NaN, lr negative... */
			{ 107, 3 },			/* chunk_bytes odd */
			{ 111, 2 }, { 115, 1 }, { 119, 0 }, { 119, 2 },	/* key counts */
			{ 127, 0 },			/* the key's elem_count low byte */
		};

		for (size_t i = 0; i < sizeof(body) / sizeof(body[0]); i++) {
			memcpy(buf, join, (size_t)join_len);
			buf[PHUB_WIRE_HDR_LEN + body[i].off] = body[i].val;
			if (body[i].off == 127)	/* 1000 = 0x3e8: clear both low bytes */
				buf[PHUB_WIRE_HDR_LEN + 126] = 0;
			send_malformed(t, fd, &hp->ctrl, buf, (size_t)join_len, hp->repeat);
		}
		/* A name without its NUL. */
		memcpy(buf, join, (size_t)join_len);
		memset(buf + PHUB_WIRE_HDR_LEN, 'a', PHUB_WIRE_JOB_NAME_LEN);
		send_malformed(t, fd, &hp->ctrl, buf, (size_t)join_len, hp->repeat);
	}
}

/*
 * Well-formed datagrams that the session checks refuse: other jobs with guessed tokens and
 * ranks, ids of no job, and our own session abused.
 */
static void
session_abuse(const struct hostile_params *hp, struct tally *t, int fd, int fd2,
		const struct own_session *own)
{
	struct sockaddr_in port0 = own->data;
	uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m;
	uint32_t seg = own->seg_elems;
	int len;

	for (unsigned int v = 0; v < hp->n_victims; v++) {
		for (unsigned int g = 0; g < hp->guesses; g++) {
			/* A guessed token for rank 0, which has joined. */
			len = push_datagram(buf, sizeof(buf), hp->victims[v], random_u64(), 0, seg,
					g % 4);
			send_raw(t, fd, &port0, buf, len);
			t->expect[PHUB_DROP_BAD_TOKEN]++;
			/* Our real token in another job. */
			len = push_datagram(buf, sizeof(buf), hp->victims[v], own->token, 0, seg, 1);
			send_raw(t, fd, &port0, buf, len);
			t->expect[PHUB_DROP_BAD_TOKEN]++;
			/* A rank the job does not have. */
			len = push_datagram(buf, sizeof(buf), hp->victims[v], random_u64(), 999, seg,
					1);
			send_raw(t, fd, &port0, buf, len);
			t->expect[PHUB_DROP_RANK_RANGE]++;
			/* A chunk the job does not have (checked before the token). */
			len = push_datagram(buf, sizeof(buf), hp->victims[v], random_u64(), 0, seg, 1);
			phub_wire_parse(buf, (size_t)len, &m);
			m.chunk_id = 0x7fffffff;
			len = phub_wire_encode(buf, sizeof(buf), &m);
			send_raw(t, fd, &port0, buf, len);
			t->expect[PHUB_DROP_CHUNK_RANGE]++;
			/* A PULL of the model with a guessed token: a read. */
			phub_wire_msg_init(&m, PHUB_WIRE_OP_PULL);
			m.job_id = hp->victims[v];
			m.session_token = random_u64();
			m.elem_count = seg;
			m.seg_count = (uint16_t)((OWN_ELEMS + seg - 1) / seg);
			m.iteration = g % 4;
			m.flags = 0;	/* segment 0 of 3 is not the last */
			len = phub_wire_encode(buf, sizeof(buf), &m);
			send_raw(t, fd, &port0, buf, len);
			t->expect[PHUB_DROP_BAD_TOKEN]++;
		}
	}
	/* Job ids that no job has: the job table has 64 slots, so a low byte of 200 is none. */
	for (unsigned int g = 0; g < hp->guesses; g++) {
		uint32_t id = ((uint32_t)random_u64() & 0xffffff00u) | (200u + g % 56);

		len = push_datagram(buf, sizeof(buf), id, random_u64(), 0, seg, 1);
		send_raw(t, fd, &port0, buf, len);
		t->expect[PHUB_DROP_UNKNOWN_JOB]++;
	}
	for (unsigned int r = 0; r < hp->repeat; r++) {
		/* Our token from another socket: another source port. */
		len = push_datagram(buf, sizeof(buf), own->job_id, own->token, 0, seg, 0);
		send_raw(t, fd2, &port0, buf, len);
		t->expect[PHUB_DROP_WRONG_SOURCE]++;
		/* A rank beyond our own one-worker job. */
		len = push_datagram(buf, sizeof(buf), own->job_id, own->token, 1, seg, 0);
		send_raw(t, fd, &port0, buf, len);
		t->expect[PHUB_DROP_RANK_RANGE]++;
		/* Off the segment grid: offset 16, then one element short. */
		len = push_datagram(buf, sizeof(buf), own->job_id, own->token, 0, seg, 0);
		phub_wire_parse(buf, (size_t)len, &m);
		m.elem_offset = 16;
		len = phub_wire_encode(buf, sizeof(buf), &m);
		send_raw(t, fd, &port0, buf, len);
		t->expect[PHUB_DROP_OFFSET_RANGE]++;
		len = push_datagram(buf, sizeof(buf), own->job_id, own->token, 0, seg - 16, 0);
		send_raw(t, fd, &port0, buf, len);
		t->expect[PHUB_DROP_OFFSET_RANGE]++;
		/* fp16 elements in an fp32 job. */
		len = push_datagram(buf, sizeof(buf), own->job_id, own->token, 0, seg, 0);
		phub_wire_parse(buf, (size_t)len, &m);
		m.dtype = PHUB_DTYPE_FP16;
		m.payload_len = (uint16_t)(seg * 2);
		len = phub_wire_encode(buf, sizeof(buf), &m);
		send_raw(t, fd, &port0, buf, len);
		t->expect[PHUB_DROP_DTYPE_MISMATCH]++;
		/* Iterations far ahead and far behind the current one (0). */
		len = push_datagram(buf, sizeof(buf), own->job_id, own->token, 0, seg, 1000000);
		send_raw(t, fd, &port0, buf, len);
		t->at_least[PHUB_DROP_FUTURE_ITERATION]++;
		len = push_datagram(buf, sizeof(buf), own->job_id, own->token, 0, seg, 0xfffff000u);
		send_raw(t, fd, &port0, buf, len);
		t->at_least[PHUB_DROP_STALE_ITERATION]++;
		/* A JOIN on a data port. */
		{
			struct phub_wire_join_params jp;
			struct phub_wire_key key;

			join_params(&jp, &key, "hostile-dataport", 1, 1);
			len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
			send_raw(t, fd, &port0, buf, len);
			t->expect[PHUB_DROP_UNEXPECTED_OPCODE]++;
		}
	}
}

/*
 * LEAVE other jobs with guessed tokens: rank 0, which has joined in every victim (the tests hold
 * back only a job's last rank), and rank 999, which no job has. The PBox refuses and counts
 * them as it does PUSHes; the test checks that those jobs run on, exact.
 */
static void
leave_victims(const struct hostile_params *hp, struct tally *t, int fd)
{
	uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m;
	int len;

	for (unsigned int v = 0; v < hp->n_victims; v++) {
		for (unsigned int g = 0; g < hp->guesses; g++) {
			phub_wire_msg_init(&m, PHUB_WIRE_OP_LEAVE);
			m.job_id = hp->victims[v];
			m.session_token = random_u64();
			m.worker_rank = g % 2 == 0 ? 0 : 999;
			len = phub_wire_encode(buf, sizeof(buf), &m);
			send_raw(t, fd, &hp->ctrl, buf, len);
			t->expect[g % 2 == 0 ? PHUB_DROP_BAD_TOKEN : PHUB_DROP_RANK_RANGE]++;
		}
	}
}

/*
 * JOIN another job by name with guessed nonces, in the shape the test gave and in another one:
 * refused with an ERROR every time, the same whatever the shape.
 */
static void
join_victim(const struct hostile_params *hp, struct tally *t, int fd)
{
	struct phub_wire_join_params jp;
	struct phub_wire_key key;
	uint8_t buf[BUF_SIZE];
	int len;

	t->in_victim_join = true;
	for (unsigned int g = 0; g < 2 * hp->repeat; g++) {
		join_params(&jp, &key, hp->victim_name, random_u64(),
				(uint16_t)(hp->victim_world + g % 2));
		if (g % 2 == 1)
			key.elem_count = OWN_ELEMS - 1;
		len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
		send_raw(t, fd, &hp->ctrl, buf, len);
		t->victim_joins++;
		drain(t, NULL, fd, 100);
	}
	t->in_victim_join = false;
}

/*
 * LEAVE our own job: first with our token from the second socket (refused: wrong_source), then
 * three times from the socket that joined (each gets a LEAVE_ACK), then once with a wrong token
 * (unknown_job).
 */
static void
leave_own(const struct hostile_params *hp, struct tally *t, int fd, int fd2,
		const struct own_session *own)
{
	uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m;
	int len;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_LEAVE);
	m.job_id = own->job_id;
	m.session_token = own->token;
	len = phub_wire_encode(buf, sizeof(buf), &m);
	for (unsigned int i = 0; i < hp->repeat; i++) {
		send_raw(t, fd2, &hp->ctrl, buf, len);
		t->expect[PHUB_DROP_WRONG_SOURCE]++;
	}
	/* The two sockets' datagrams may reach the main lcore through different lcores. */
	drain(t, own, fd, 100);
	/*
	 * The first LEAVE ends the session and the job; the two after it are what a worker sends
	 * again when a LEAVE_ACK is lost: ACKed again, not counted. One with another token from
	 * the same address is refused: the job is gone.
	 */
	for (int i = 0; i < 3; i++)
		send_raw(t, fd, &hp->ctrl, buf, len);
	drain(t, own, fd, 300);
	m.session_token = own->token ^ 1;
	len = phub_wire_encode(buf, sizeof(buf), &m);
	send_raw(t, fd, &hp->ctrl, buf, len);
	t->expect[PHUB_DROP_UNKNOWN_JOB]++;
}

static int
ping(const struct hostile_params *hp)
{
	struct tally t = { 0 };
	uint8_t buf[BUF_SIZE];
	struct phub_wire_msg m;
	int fd = udp_socket();
	int len;

	phub_wire_msg_init(&m, PHUB_WIRE_OP_PING);
	m.aux = 7;
	len = phub_wire_encode(buf, sizeof(buf), &m);
	for (int i = 0; i < 20; i++) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		send_raw(&t, fd, &hp->ctrl, buf, len);
		if (poll(&pfd, 1, 200) > 0) {
			ssize_t n = recv(fd, buf, sizeof(buf), 0);

			if (n > 0 && phub_wire_parse(buf, (size_t)n, &m) == PHUB_DROP_OK &&
			    m.opcode == PHUB_WIRE_OP_PONG && m.aux == 7) {
				printf("PONG\n");
				return 0;
			}
		}
	}
	fprintf(stderr, "phub-hostile: no PONG\n");
	return 1;
}

static void
json_reasons(const char *name, const uint64_t *counts)
{
	const char *sep = "";

	printf("  \"%s\": {", name);
	for (unsigned int i = 1; i < PHUB_DROP_REASON_MAX; i++) {
		if (counts[i] == 0)
			continue;
		printf("%s\"%s\": %" PRIu64, sep, phub_drop_reason_name(i), counts[i]);
		sep = ", ";
	}
	printf("},\n");
}

static void
json_string(const char *s)
{
	putchar('"');
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
	putchar('"');
}

/*
 * One JOIN datagram that claims a layout of n keys and carries the first: what a PBox
 * allocates for the rest before it has seen them is the attacker's to choose.
 */
static int
join_claim(const struct hostile_params *hp, uint32_t n)
{
	struct tally t = { 0 };
	struct phub_wire_join_params jp;
	struct phub_wire_key key;
	uint8_t buf[BUF_SIZE];
	int fd = udp_socket();
	int len;

	join_params(&jp, &key, "hostile-claim", random_u64(), 1);
	len = phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0);
	if (len <= 0)
		return 1;
	buf[PHUB_WIRE_HDR_LEN + 108] = (uint8_t)(n >> 24);
	buf[PHUB_WIRE_HDR_LEN + 109] = (uint8_t)(n >> 16);
	buf[PHUB_WIRE_HDR_LEN + 110] = (uint8_t)(n >> 8);
	buf[PHUB_WIRE_HDR_LEN + 111] = (uint8_t)n;
	send_raw(&t, fd, &hp->ctrl, buf, len);
	drain(&t, NULL, fd, 1000);
	printf("{\"claimed_keys\": %u, \"errors\": [", n);
	for (unsigned int i = 0; i < t.n_errors; i++) {
		printf("%s{\"code\": \"%s\", \"text\": ", i > 0 ? ", " : "",
				phub_wire_error_name(t.error_codes[i]));
		json_string(t.error_texts[i]);
		printf("}");
	}
	printf("]}\n");
	close(fd);
	return 0;
}

/* What came back during the checksum exchange. */
struct csum_tally {
	unsigned int acks_csum, acks_plain, models_csum, models_plain, bad;
	unsigned int acked[2][8];	/* ACKs by iteration (0, 1) and segment */
};

static void
csum_drain(struct csum_tally *c, const struct own_session *own, int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];

	while (poll(&pfd, 1, ms) > 0) {
		struct phub_wire_msg msg;
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		bool csum;

		if (n <= 0)
			continue;
		if (phub_wire_parse(buf, (size_t)n, &msg) != PHUB_DROP_OK) {
			c->bad++;	/* among them a CRC that does not match */
			continue;
		}
		if (msg.job_id != own->job_id)
			continue;
		csum = (msg.flags & PHUB_WIRE_F_CSUM) != 0;
		if (msg.opcode == PHUB_WIRE_OP_ACK) {
			*(csum ? &c->acks_csum : &c->acks_plain) += 1;
			if (msg.iteration < 2 && msg.seg_index < 8)
				c->acked[msg.iteration][msg.seg_index]++;
		} else if (msg.opcode == PHUB_WIRE_OP_MODEL) {
			*(csum ? &c->models_csum : &c->models_plain) += 1;
		}
	}
}

static int
csum_exchange(const struct hostile_params *hp)
{
	struct tally t = { 0 };
	struct csum_tally c = { 0 };
	struct own_session own;
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	int fd = udp_socket();
	uint16_t n_segs;
	int len, rc;

	rc = join_own(hp, &t, fd, &own);
	if (rc != 0) {
		fprintf(stderr, "phub-hostile: cannot join: %s\n", strerror(-rc));
		return 1;
	}
	n_segs = (uint16_t)((OWN_ELEMS + own.seg_elems - 1) / own.seg_elems);
	/* The initial-model round of a job of one: each segment ACKed and its MODEL sent. */
	for (uint16_t s = 0; s < n_segs; s++) {
		len = push_segment(buf, sizeof(buf), own.job_id, own.token, 0, own.seg_elems, 0, s,
				PHUB_WIRE_F_CSUM);
		send_raw(&t, fd, &own.data, buf, len);
	}
	csum_drain(&c, &own, fd, 300);
	/* Iteration 1, segment 0, damaged after its CRC: the PBox must drop it as bad_csum. */
	len = push_segment(buf, sizeof(buf), own.job_id, own.token, 0, own.seg_elems, 1, 0,
			PHUB_WIRE_F_CSUM);
	buf[PHUB_WIRE_HDR_LEN + 5] ^= 0x10;
	send_raw(&t, fd, &own.data, buf, len);
	csum_drain(&c, &own, fd, 300);
	printf("{\"join_ack_csum\": %s, \"acks_csum\": %u, \"acks_plain\": %u, "
			"\"models_csum\": %u, \"models_plain\": %u, \"bad_received\": %u, "
			"\"segments\": %u, \"initial_acked\": %u, \"damaged_acked\": %u, ",
			own.ack_csum ? "true" : "false", c.acks_csum, c.acks_plain, c.models_csum,
			c.models_plain, c.bad, n_segs,
			c.acked[0][0] > 0 && c.acked[0][1] > 0 && c.acked[0][2] > 0 ? 3u : 0u,
			c.acked[1][0]);
	/* The same PUSH intact: the path works, only the damage was refused. */
	buf[PHUB_WIRE_HDR_LEN + 5] ^= 0x10;
	send_raw(&t, fd, &own.data, buf, len);
	csum_drain(&c, &own, fd, 300);
	printf("\"intact_acked\": %u}\n", c.acked[1][0]);
	/* The job ends with its only rank. */
	{
		struct phub_wire_msg m;

		phub_wire_msg_init(&m, PHUB_WIRE_OP_LEAVE);
		m.job_id = own.job_id;
		m.session_token = own.token;
		len = phub_wire_encode(buf, sizeof(buf), &m);
		send_raw(&t, fd, &hp->ctrl, buf, len);
		drain(&t, &own, fd, 200);
	}
	close(fd);
	return 0;
}

/* --ring-spray: ring steps and acknowledgements of a job across racks, with guessed tokens. */
static int
ring_spray(const struct hostile_params *hp)
{
	static const uint8_t opcodes[] = {
		PHUB_WIRE_OP_RING_REDUCE, PHUB_WIRE_OP_RING_GATHER, PHUB_WIRE_OP_RING_ACK,
		PHUB_WIRE_OP_RING_ACKV,
	};
	struct tally t = { 0 };
	uint8_t buf[BUF_SIZE], acks[2 * sizeof(struct phub_wire_ring_ack_entry)];
	int fd = udp_socket();

	/* A RING_ACKV of two entries naming real-looking segments. */
	phub_wire_ring_ackv_put(acks, 0, &(struct phub_wire_ring_ack){ .iteration = 1 });
	phub_wire_ring_ackv_put(acks, 1, &(struct phub_wire_ring_ack){ .chunk_id = 1,
			.iteration = 1 });

	/*
	 * The kernel keeps only a few datagrams while it resolves the PBox's address: one goes
	 * first, alone, and is not counted (the PBox drops it like the others).
	 */
	for (unsigned int i = 0; i <= hp->repeat; i++) {
		if (i == 1) {
			usleep(300 * 1000);
			t.sent = 0;
		}
		for (size_t o = 0; o < (i == 0 ? 1 : sizeof(opcodes)); o++) {
			struct phub_wire_msg m;

			phub_wire_msg_init(&m, opcodes[o]);
			m.job_id = hp->ring_job;
			m.session_token = random_u64();
			m.worker_rank = 0;
			m.iteration = 1;
			m.elem_count = 4;
			m.aux = 0;	/* the ring step */
			if (opcodes[o] == PHUB_WIRE_OP_RING_ACKV) {
				m.iteration = 0;
				m.elem_count = 0;
				m.payload = acks;
				m.payload_len = sizeof(acks);
			} else if (opcodes[o] != PHUB_WIRE_OP_RING_ACK) {
				m.dtype = PHUB_DTYPE_FP32;
				m.payload = (const uint8_t *)zeros;
				m.payload_len = 4 * sizeof(float);
			}
			send_raw(&t, fd, &hp->ctrl, buf, phub_wire_encode(buf, sizeof(buf), &m));
		}
		/* Paced: the uplink carries the ring's own bursts; do not be what it drops. */
		usleep(2000);
	}
	printf("{\"sent\": %" PRIu64 "}\n", t.sent);
	close(fd);
	return 0;
}

/* --misdirect: the initial round of our own job, every PUSH to the other lcore's port. */
static int
misdirect(const struct hostile_params *hp)
{
	struct tally t = { 0 };
	struct own_session own;
	struct sockaddr_in wrong;
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	bool got[OWN_ELEMS] = { false };
	unsigned int n_segs, n_got = 0;
	uint16_t base = ntohs(hp->ctrl.sin_port);
	uint64_t joins;
	int fd = udp_socket();

	if (join_own(hp, &t, fd, &own) != 0 || own.seg_elems == 0) {
		fprintf(stderr, "phub-hostile: cannot join a job of its own\n");
		return 1;
	}
	joins = t.sent;
	n_segs = (OWN_ELEMS + own.seg_elems - 1) / own.seg_elems;
	wrong = own.data;
	wrong.sin_port = htons(ntohs(own.data.sin_port) == base + 1 ? base + 2 : base + 1);
	/* Again for the segments whose MODEL has not come, as a worker's RTO would. */
	for (int round = 0; round < 20 && n_got < n_segs; round++) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		struct phub_wire_msg m;

		for (unsigned int sgi = 0; sgi < n_segs; sgi++) {
			uint32_t off = sgi * own.seg_elems;
			uint32_t cnt = OWN_ELEMS - off < own.seg_elems ? OWN_ELEMS - off :
				own.seg_elems;

			if (got[sgi])
				continue;
			phub_wire_msg_init(&m, PHUB_WIRE_OP_PUSH);
			m.job_id = own.job_id;
			m.session_token = own.token;
			m.elem_offset = off;
			m.elem_count = cnt;
			m.seg_index = (uint16_t)sgi;
			m.seg_count = (uint16_t)n_segs;
			m.flags = (uint8_t)((sgi + 1 == n_segs ? PHUB_WIRE_F_LAST : 0) |
					(round > 0 ? PHUB_WIRE_F_RETRANSMIT : 0));
			m.dtype = PHUB_DTYPE_FP32;
			m.payload = (const uint8_t *)zeros;
			m.payload_len = (uint16_t)(cnt * sizeof(float));
			send_raw(&t, fd, &wrong, buf, phub_wire_encode(buf, sizeof(buf), &m));
		}
		while (n_got < n_segs && poll(&pfd, 1, 250) > 0) {
			ssize_t n = recv(fd, buf, sizeof(buf), 0);

			if (n <= 0 || phub_wire_parse(buf, (size_t)n, &m) != PHUB_DROP_OK ||
			    m.opcode != PHUB_WIRE_OP_MODEL || m.job_id != own.job_id ||
			    m.iteration != 0 || m.seg_index >= n_segs || got[m.seg_index])
				continue;
			got[m.seg_index] = true;
			n_got++;
		}
	}
	printf("{\"misdirected\": %" PRIu64 ", \"segments\": %u, \"models\": %u, "
			"\"wrong_port\": %u, \"right_port\": %u}\n", t.sent - joins, n_segs, n_got,
			ntohs(wrong.sin_port), ntohs(own.data.sin_port));
	close(fd);
	return n_got == n_segs ? 0 : 1;
}

static void
usage(void)
{
	fprintf(stderr, "usage: phub-hostile --server IP [--port P] [--victim JOB_ID]... "
			"[--victim-name NAME] [--victim-world N] [--repeat N] [--guesses N] [--ping] "
			"[--join-keys N] [--csum] [--misdirect] [--ring-spray JOB_ID]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	struct hostile_params hp = { .repeat = 3, .guesses = 20, .victim_world = 2 };
	struct own_session own;
	struct tally *t;
	int fd, fd2, rc;

	hp.ctrl.sin_family = AF_INET;
	hp.ctrl.sin_port = htons(DEFAULT_PORT);
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(argv[i], "--ping") == 0) {
			hp.ping_only = true;
			continue;
		}
		if (strcmp(argv[i], "--csum") == 0) {
			hp.csum = true;
			continue;
		}
		if (strcmp(argv[i], "--misdirect") == 0) {
			hp.misdirect = true;
			continue;
		}
		if (v == NULL)
			usage();
		if (strcmp(argv[i], "--server") == 0) {
			if (inet_pton(AF_INET, v, &hp.ctrl.sin_addr) != 1)
				usage();
		} else if (strcmp(argv[i], "--port") == 0) {
			hp.ctrl.sin_port = htons((uint16_t)strtoul(v, NULL, 0));
		} else if (strcmp(argv[i], "--victim") == 0 && hp.n_victims < MAX_VICTIMS) {
			hp.victims[hp.n_victims++] = (uint32_t)strtoul(v, NULL, 0);
		} else if (strcmp(argv[i], "--victim-name") == 0) {
			hp.victim_name = v;
		} else if (strcmp(argv[i], "--victim-world") == 0) {
			hp.victim_world = (uint16_t)strtoul(v, NULL, 0);
		} else if (strcmp(argv[i], "--repeat") == 0) {
			hp.repeat = (unsigned int)strtoul(v, NULL, 0);
		} else if (strcmp(argv[i], "--join-keys") == 0) {
			hp.join_keys = (uint32_t)strtoul(v, NULL, 0);
		} else if (strcmp(argv[i], "--ring-spray") == 0) {
			hp.ring_job = (uint32_t)strtoul(v, NULL, 0);
			hp.ring_spray = true;
		} else if (strcmp(argv[i], "--guesses") == 0) {
			hp.guesses = (unsigned int)strtoul(v, NULL, 0);
		} else {
			usage();
		}
		i++;
	}
	if (hp.ctrl.sin_addr.s_addr == 0)
		usage();
	if (hp.ping_only)
		return ping(&hp);
	if (hp.join_keys != 0)
		return join_claim(&hp, hp.join_keys);
	if (hp.csum)
		return csum_exchange(&hp);
	if (hp.misdirect)
		return misdirect(&hp);
	if (hp.ring_spray)
		return ring_spray(&hp);

	/* Only the whole run tallies; the single-purpose modes above need none. */
	t = calloc(1, sizeof(*t));
	if (t == NULL) {
		fprintf(stderr, "phub-hostile: out of memory\n");
		return 1;
	}
	fd = udp_socket();
	fd2 = udp_socket();
	rc = join_own(&hp, t, fd, &own);
	if (rc != 0) {
		fprintf(stderr, "phub-hostile: cannot join a job of its own: %s%s%s\n",
				strerror(-rc), t->n_errors > 0 ? ": " : "",
				t->n_errors > 0 ? t->error_texts[0] : "");
		free(t);
		return 1;
	}
	malformed(&hp, t, fd, &own);
	session_abuse(&hp, t, fd, fd2, &own);
	leave_victims(&hp, t, fd);
	if (hp.victim_name != NULL)
		join_victim(&hp, t, fd);
	drain(t, &own, fd, 300);
	drain(t, &own, fd2, 10);
	leave_own(&hp, t, fd, fd2, &own);
	drain(t, &own, fd, 200);

	printf("{\n  \"own_job\": %u,\n  \"sent\": %" PRIu64 ",\n  \"foreign_models\": %" PRIu64
			",\n  \"victim_joins\": %u,\n  \"leave_acks\": %u,\n", own.job_id, t->sent,
			t->foreign_models, t->victim_joins, t->leave_acks);
	json_reasons("expect", t->expect);
	json_reasons("at_least", t->at_least);
	printf("  \"errors\": [");
	for (unsigned int i = 0; i < t->n_errors; i++) {
		printf("%s{\"code\": \"%s\", \"victim_join\": %s, \"text\": ", i > 0 ? ", " : "",
				phub_wire_error_name(t->error_codes[i]),
				t->error_victim[i] ? "true" : "false");
		json_string(t->error_texts[i]);
		printf("}");
	}
	printf("]\n}\n");
	close(fd);
	close(fd2);
	free(t);
	return 0;
}
