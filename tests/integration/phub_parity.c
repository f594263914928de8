/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One fixed exchange of two ranks (JOIN, PUSHes of two iterations, a retransmission, a PULL, a
 * PUSH to the wrong lcore's port, a PUSH with a wrong token, LEAVE), one datagram at a time,
 * every answer printed: run against phub-pbox and against the soft PBox, the two outputs must
 * be the same line for line (tests/integration/test_parity_rack.py), which shows that the
 * appliance and the soft PBox answer with the same bytes (lib/dataplane).
 *
 *   phub-parity --server IP [--port 47000] [--name JOB]
 *
 * Each line is "step N: <hex of the answer's UDP payload>", the lines of a step sorted. What must
 * differ between two PBoxes is normalized: a session token (random) is printed as the index of
 * the rank it was handed to, and the CRC32C of a CSUM answer, checked here first (a wrong one
 * prints "BAD_CRC"), as zeros; the JOIN_ACK's body (the PBox's addresses and ports) is left
 * out, its header kept. Addresses and UDP ports are not printed at all.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/phub_wire.h"

enum {
	RANKS = 2,
	KEY0 = 1000,		/* 3 segments at MTU 1500 */
	KEY1 = 400,		/* 2 segments */
	MAX_LINES = 64,
	QUIET_MS = 150,		/* a step is over when nothing came for this long */
	TOKEN_OFF = 24,
	CSUM_OFF = 52,
};

struct rank {
	int fd;
	uint64_t token;
	uint32_t job_id;
	uint32_t seg_elems;
	struct sockaddr_in data[2];	/* the data address of chunk 0 and chunk 1 */
};

static struct sockaddr_in ctrl;
static struct rank ranks[RANKS];
static unsigned int step;
static float grad[KEY0];

static void
put_line(char (*lines)[2 * PHUB_WIRE_MAX_DATAGRAM + 32], unsigned int *n, const uint8_t *b,
		size_t len, const char *note)
{
	char *p;

	if (*n == MAX_LINES)
		return;
	p = lines[(*n)++];
	p += sprintf(p, "step %u: %s", step, note);
	for (size_t i = 0; i < len; i++)
		p += sprintf(p, "%02x", b[i]);
}

static int
cmp_lines(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Every answer on both ranks' sockets until QUIET_MS pass without one, normalized, sorted. */
static void
collect(void)
{
	static char lines[MAX_LINES][2 * PHUB_WIRE_MAX_DATAGRAM + 32];
	unsigned int n = 0;
	struct pollfd pfd[RANKS];

	for (int r = 0; r < RANKS; r++)
		pfd[r] = (struct pollfd){ .fd = ranks[r].fd, .events = POLLIN };
	while (poll(pfd, RANKS, QUIET_MS) > 0) {
		for (int r = 0; r < RANKS; r++) {
			uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
			struct phub_wire_msg msg;
			ssize_t len;

			if (!(pfd[r].revents & POLLIN))
				continue;
			len = recv(ranks[r].fd, buf, sizeof(buf), 0);
			if (len <= 0)
				continue;
			/* phub_wire_parse() checks the CRC32C of a datagram with CSUM. */
			if (phub_wire_parse(buf, (size_t)len, &msg) != PHUB_DROP_OK) {
				put_line(lines, &n, buf, (size_t)len, "BAD_CRC ");
				continue;
			}
			for (int k = 0; k < RANKS; k++)
				if (ranks[k].token != 0 && msg.session_token == ranks[k].token) {
					memset(buf + TOKEN_OFF, 0, 8);
					buf[TOKEN_OFF + 7] = (uint8_t)(k + 1);
				}
			if (msg.flags & PHUB_WIRE_F_CSUM)
				memset(buf + CSUM_OFF, 0, 4);
			if (msg.opcode == PHUB_WIRE_OP_JOIN_ACK)
				len = PHUB_WIRE_HDR_LEN;
			put_line(lines, &n, buf, (size_t)len, r == 0 ? "to 0 " : "to 1 ");
		}
	}
	qsort(lines, n, sizeof(lines[0]), cmp_lines);
	for (unsigned int i = 0; i < n; i++)
		printf("%s\n", lines[i]);
	if (n == 0)
		printf("step %u: none\n", step);
	step++;
}

static void
send_to(int r, const struct sockaddr_in *to, const void *buf, int len)
{
	if (len <= 0 || sendto(ranks[r].fd, buf, (size_t)len, 0, (const struct sockaddr *)to,
			sizeof(*to)) != len) {
		fprintf(stderr, "phub-parity: step %u: cannot send (%d)\n", step, len);
		exit(1);
	}
	collect();
}

/* JOIN rank r (rank 0 asks for CSUM, rank 1 for ACKV) and take its session from the JOIN_ACK. */
static int
join(int r, const char *name)
{
	struct phub_wire_key keys[2] = { { .key_id = 0, .elem_count = KEY0 },
					 { .key_id = 1, .elem_count = KEY1 } };
	struct phub_wire_join_params jp;
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	struct phub_wire_join_ack_seg seg;
	struct phub_wire_msg msg;
	struct pollfd pfd = { .fd = ranks[r].fd, .events = POLLIN };
	ssize_t n;

	memset(&jp, 0, sizeof(jp));
	snprintf(jp.join.name, sizeof(jp.join.name), "%s", name);
	jp.join.nonce = 0x9a41;
	jp.join.rank = (uint16_t)r;
	jp.join.world_size = RANKS;
	jp.join.dtype = PHUB_DTYPE_FP32;
	jp.join.optimizer = PHUB_OPT_SGD;
	jp.join.hyper = (struct phub_wire_hyper){ .lr = 0.5f, .beta1 = 0.9f, .beta2 = 0.999f,
		.eps = 1e-8f };
	jp.join.join_flags = r == 0 ? PHUB_WIRE_JOIN_F_CSUM : PHUB_WIRE_JOIN_F_ACKV;
	jp.flags = r == 0 ? PHUB_WIRE_F_CSUM : 0;
	jp.keys = keys;
	jp.key_count = 2;
	if (sendto(ranks[r].fd, buf, (size_t)phub_wire_join_write(buf, sizeof(buf), &jp, 1500, 0),
			0, (const struct sockaddr *)&ctrl, sizeof(ctrl)) <= 0)
		return -errno;
	if (poll(&pfd, 1, 5000) <= 0)
		return -ETIMEDOUT;
	n = recv(ranks[r].fd, buf, sizeof(buf), 0);
	if (n <= 0 || phub_wire_parse(buf, (size_t)n, &msg) != PHUB_DROP_OK ||
	    msg.opcode != PHUB_WIRE_OP_JOIN_ACK ||
	    phub_wire_join_ack_parse(msg.payload, msg.payload_len, &seg) != PHUB_DROP_OK ||
	    seg.chunk_count < 2)
		return -EPROTO;
	ranks[r].token = msg.session_token;
	ranks[r].job_id = msg.job_id;
	ranks[r].seg_elems = seg.ack.seg_elems;
	for (uint32_t c = 0; c < 2; c++) {
		struct phub_wire_endpoint ep = phub_wire_join_ack_seg_endpoint(&seg,
				phub_wire_join_ack_seg_chunk(&seg, c));

		ranks[r].data[c] = (struct sockaddr_in){ .sin_family = AF_INET,
			.sin_addr.s_addr = ep.ipv4 != 0 ? htonl(ep.ipv4) : ctrl.sin_addr.s_addr,
			.sin_port = htons(ep.udp_port) };
	}
	printf("step %u: joined rank %d, job %u, %u elements a segment\n", step++, r,
			msg.job_id, seg.ack.seg_elems);
	return 0;
}

/* A PUSH (or PULL) of rank r: segment seg of key (= chunk) c at iteration it. */
static int
data_msg(uint8_t *buf, int r, uint8_t opcode, uint32_t c, uint16_t seg, uint32_t it,
		uint8_t flags, uint64_t token)
{
	uint32_t elems = c == 0 ? KEY0 : KEY1;
	uint32_t se = ranks[r].seg_elems;
	struct phub_wire_msg m;

	phub_wire_msg_init(&m, opcode);
	m.job_id = ranks[r].job_id;
	m.session_token = token;
	m.worker_rank = (uint16_t)r;
	m.chunk_id = c;
	m.iteration = it;
	m.elem_offset = seg * se;
	m.elem_count = elems - m.elem_offset < se ? elems - m.elem_offset : se;
	m.seg_index = seg;
	m.seg_count = (uint16_t)((elems + se - 1) / se);
	m.aux = 0x1000u + step;		/* a stamp, the same on both runs */
	m.flags = (uint8_t)(flags | (seg + 1u == m.seg_count ? PHUB_WIRE_F_LAST : 0) |
			(r == 0 ? PHUB_WIRE_F_CSUM : 0));
	if (opcode == PHUB_WIRE_OP_PUSH) {
		m.dtype = PHUB_DTYPE_FP32;
		for (uint32_t i = 0; i < m.elem_count; i++)
			grad[i] = (float)((r + 1) * (int)(i % 7) - 3) * 0.25f + (float)it;
		m.payload = (const uint8_t *)grad;
		m.payload_len = (uint16_t)(m.elem_count * sizeof(float));
	}
	return phub_wire_encode(buf, PHUB_WIRE_MAX_DATAGRAM, &m);
}

static void
push(int r, uint32_t c, uint16_t seg, uint32_t it, uint8_t flags, int port_of)
{
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];

	send_to(r, &ranks[r].data[port_of], buf,
			data_msg(buf, r, PHUB_WIRE_OP_PUSH, c, seg, it, flags, ranks[r].token));
}

int
main(int argc, char **argv)
{
	const char *server = NULL, *name = "parity";
	uint8_t buf[PHUB_WIRE_MAX_DATAGRAM];
	int port = 47000;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--server") == 0)
			server = argv[i + 1];
		else if (strcmp(argv[i], "--port") == 0)
			port = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--name") == 0)
			name = argv[i + 1];
	}
	ctrl = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (server == NULL || inet_pton(AF_INET, server, &ctrl.sin_addr) != 1) {
		fprintf(stderr, "usage: phub-parity --server IP [--port P] [--name JOB]\n");
		return 2;
	}
	for (int r = 0; r < RANKS; r++) {
		ranks[r].fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (ranks[r].fd < 0 || join(r, name) != 0) {
			fprintf(stderr, "phub-parity: rank %d could not join\n", r);
			return 1;
		}
	}
	/* Iterations 0 and 1, every segment of both keys, rank 0 first. */
	for (uint32_t it = 0; it < 2; it++)
		for (uint32_t c = 0; c < 2; c++)
			for (uint16_t s = 0; s < (c == 0 ? 3 : 2); s++)
				for (int r = 0; r < RANKS; r++)
					push(r, c, s, it, 0, (int)c);
	/* A retransmitted PUSH of a finished segment: the kept MODEL to the sender alone. */
	push(0, 0, 1, 1, PHUB_WIRE_F_RETRANSMIT, 0);
	push(1, 1, 0, 1, PHUB_WIRE_F_RETRANSMIT, 1);
	/* PULLs of the finished iteration. */
	send_to(1, &ranks[1].data[0], buf, data_msg(buf, 1, PHUB_WIRE_OP_PULL, 0, 2, 1, 0,
			ranks[1].token));
	send_to(0, &ranks[0].data[1], buf, data_msg(buf, 0, PHUB_WIRE_OP_PULL, 1, 1, 1, 0,
			ranks[0].token));
	/* Iteration 2 of chunk 0, segment 0, on the port of chunk 1's lcore: its owner answers. */
	push(0, 0, 0, 2, 0, 1);
	push(1, 0, 0, 2, 0, 1);
	/* A wrong token: dropped, unanswered. */
	send_to(0, &ranks[0].data[0], buf, data_msg(buf, 0, PHUB_WIRE_OP_PUSH, 0, 1, 2, 0,
			ranks[0].token ^ 1));
	/* LEAVE, both ranks: the job ends. */
	for (int r = 0; r < RANKS; r++) {
		struct phub_wire_msg m;

		phub_wire_msg_init(&m, PHUB_WIRE_OP_LEAVE);
		m.job_id = ranks[r].job_id;
		m.session_token = ranks[r].token;
		m.worker_rank = (uint16_t)r;
		send_to(r, &ctrl, buf, phub_wire_encode(buf, sizeof(buf), &m));
	}
	return 0;
}
