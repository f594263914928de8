/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * udp_send: a kernel UDP sender for the integration tests; sends datagrams round-robin over a
 * list of destination ports with sendmmsg, counted or for a time, optionally paced.
 *
 *   udp_send -d ADDR -p PORTS [-n COUNT] [-t SECONDS] [-s BYTES] [-r PPS]
 *
 * PORTS is a comma-separated list of ports or ranges (47001-47004). -n is the number of
 * datagrams per port (default 100); -t sends for that many seconds instead; -s is the UDP
 * payload size (default 64); -r caps the total rate in datagrams per second (default: none).
 * Prints "port P sent N" per port and "sent N datagrams in T s, R/s".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 64
#define BATCH 32
#define MAX_PAYLOAD 65507

struct send_params {
	struct in_addr dst;
	uint16_t ports[MAX_PORTS];
	unsigned int n_ports;
	uint64_t count;		/* per port; 0 with a duration */
	double seconds;
	size_t size;
	uint64_t rate;		/* datagrams per second, 0: as fast as possible */
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
sleep_until(double t)
{
	struct timespec ts;

	ts.tv_sec = (time_t)t;
	ts.tv_nsec = (long)((t - ts.tv_sec) * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static int
parse_ports(char *s, struct send_params *p)
{
	char *save = NULL;
	char *tok;

	for (tok = strtok_r(s, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		unsigned long lo;
		unsigned long hi;
		char *end;

		lo = strtoul(tok, &end, 10);
		hi = lo;
		if (*end == '-')
			hi = strtoul(end + 1, &end, 10);
		if (*end != '\0' || lo == 0 || hi > UINT16_MAX || lo > hi)
			return -EINVAL;
		for (; lo <= hi; lo++) {
			if (p->n_ports == MAX_PORTS)
				return -E2BIG;
			p->ports[p->n_ports++] = lo;
		}
	}
	return p->n_ports > 0 ? 0 : -EINVAL;
}

static int
parse_args(int argc, char **argv, struct send_params *p)
{
	bool have_dst = false;
	int c;

	while ((c = getopt(argc, argv, "d:p:n:t:s:r:")) != -1) {
		switch (c) {
		case 'd':
			if (inet_pton(AF_INET, optarg, &p->dst) != 1)
				return -EINVAL;
			have_dst = true;
			break;
		case 'p':
			if (parse_ports(optarg, p) < 0)
				return -EINVAL;
			break;
		case 'n':
			p->count = strtoull(optarg, NULL, 10);
			break;
		case 't':
			p->seconds = strtod(optarg, NULL);
			break;
		case 's':
			p->size = strtoul(optarg, NULL, 10);
			break;
		case 'r':
			p->rate = strtoull(optarg, NULL, 10);
			break;
		default:
			return -EINVAL;
		}
	}
	if (!have_dst || p->n_ports == 0 || p->size == 0 || p->size > MAX_PAYLOAD ||
	    optind != argc)
		return -EINVAL;
	if (p->seconds > 0)
		p->count = 0;
	else if (p->count == 0)
		return -EINVAL;
	return 0;
}

int
main(int argc, char **argv)
{
	struct send_params p = { .count = 100, .size = 64 };
	static uint64_t sent_per_port[MAX_PORTS];
	struct sockaddr_in addr[MAX_PORTS];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	uint64_t total_goal;
	uint64_t sent = 0;
	double start;
	double end;
	unsigned int i;
	char *payload;
	int fd;

	if (parse_args(argc, argv, &p) < 0) {
		fprintf(stderr, "usage: %s -d ADDR -p PORTS [-n COUNT] [-t SECONDS] [-s BYTES]"
			" [-r PPS]\n", argv[0]);
		return 2;
	}
	payload = calloc(1, p.size);
	if (payload == NULL)
		return 1;
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("udp_send: socket");
		free(payload);
		return 1;
	}
	for (i = 0; i < p.n_ports; i++) {
		memset(&addr[i], 0, sizeof(addr[i]));
		addr[i].sin_family = AF_INET;
		addr[i].sin_addr = p.dst;
		addr[i].sin_port = htons(p.ports[i]);
	}
	total_goal = p.count * p.n_ports;
	start = now_s();
	end = start + p.seconds;
	for (;;) {
		unsigned int n = BATCH;
		int ret;

		if (total_goal != 0 && total_goal - sent < n)
			n = total_goal - sent;
		if (n == 0 || (total_goal == 0 && now_s() >= end))
			break;
		if (p.rate != 0)
			sleep_until(start + (double)sent / p.rate);
		for (i = 0; i < n; i++) {
			unsigned int k = (sent + i) % p.n_ports;

			iov[i].iov_base = payload;
			iov[i].iov_len = p.size;
			memset(&msgs[i], 0, sizeof(msgs[i]));
			msgs[i].msg_hdr.msg_name = &addr[k];
			msgs[i].msg_hdr.msg_namelen = sizeof(addr[k]);
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
		ret = sendmmsg(fd, msgs, n, 0);
		if (ret < 0) {
			/* A full device queue is loss on the way, not a failure of the sender. */
			if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN)
				continue;
			perror("udp_send: sendmmsg");
			break;
		}
		for (i = 0; i < (unsigned int)ret; i++)
			sent_per_port[(sent + i) % p.n_ports]++;
		sent += ret;
	}
	end = now_s() - start;
	for (i = 0; i < p.n_ports; i++)
		printf("port %u sent %" PRIu64 "\n", p.ports[i], sent_per_port[i]);
	printf("sent %" PRIu64 " datagrams in %.3f s, %.0f/s\n", sent, end,
	       end > 0 ? sent / end : 0.0);
	close(fd);
	free(payload);
	return 0;
}
