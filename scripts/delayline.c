/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The virtual rack's delay line, where the kernel has no sch_netem: it holds the frames that the
 * impairment program (drivers-cfg/bpf/impair.bpf.c) diverts into tap device TAP for a delay,
 * with optional uniform jitter, then writes them back into the tap, whose ingress program
 * (drivers-cfg/bpf/impair_return.bpf.c) sends them on out of the link they were diverted from.
 * Frames that are not diverted overtake the held ones: that is netem's "delay D reorder P%".
 *
 * usage: phub-delayline --tap NAME --delay-us D [--jitter-us J] [--limit N] [--pidfile FILE]
 *                       [--foreground]
 *
 * It creates TAP (in the network namespace it runs in), then detaches into the background and
 * writes its pid into FILE, so that the caller may attach the programs as soon as it returns.
 * Held frames are released in the order of their release times, ties in arrival order; with
 * no jitter that is arrival order. Like netem's limit, at most N frames (default 1000) are held;
 * more are dropped and counted. SIGTERM ends it (held frames are lost, as when a netem qdisc
 * is removed) and it writes its counts to standard error.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "phub_parse.h"

/* A tap frame without GSO is at most the largest MTU plus its Ethernet header. */
#define MAX_FRAME 65550
#define DEFAULT_LIMIT 1000u
#define MAX_LIMIT 1000000u
/* 60 s: a delay longer than a test could want is a typing error. */
#define MAX_DELAY_US 60000000u

struct held_frame {
	uint64_t release_ns;
	uint64_t seq;		/* arrival order: ties keep it */
	uint32_t len;
	uint8_t *data;
};

struct delayline {
	struct held_frame *heap;	/* min-heap on (release_ns, seq) */
	uint32_t n_held;
	uint32_t limit;
	uint64_t delay_ns;
	uint64_t jitter_ns;
	uint64_t next_seq;
	uint64_t rng;
	uint64_t frames_in;
	uint64_t frames_out;
	uint64_t dropped_full;
	uint64_t dropped_write;
};

static volatile sig_atomic_t stop_requested;

static void
on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: jitter needs spread, not cryptographic strength. */
static uint64_t
rng_next(struct delayline *dl)
{
	dl->rng ^= dl->rng >> 12;
	dl->rng ^= dl->rng << 25;
	dl->rng ^= dl->rng >> 27;
	return dl->rng * 0x2545F4914F6CDD1DULL;
}

static bool
frame_before(const struct held_frame *a, const struct held_frame *b)
{
	return a->release_ns < b->release_ns ||
		(a->release_ns == b->release_ns && a->seq < b->seq);
}

static void
heap_push(struct delayline *dl, struct held_frame f)
{
	uint32_t i = dl->n_held++;

	while (i > 0) {
		uint32_t parent = (i - 1) / 2;

		if (!frame_before(&f, &dl->heap[parent]))
			break;
		dl->heap[i] = dl->heap[parent];
		i = parent;
	}
	dl->heap[i] = f;
}

static struct held_frame
heap_pop(struct delayline *dl)
{
	struct held_frame top = dl->heap[0];
	struct held_frame last = dl->heap[--dl->n_held];
	uint32_t i = 0;

	for (;;) {
		uint32_t child = 2 * i + 1;

		if (child >= dl->n_held)
			break;
		if (child + 1 < dl->n_held && frame_before(&dl->heap[child + 1], &dl->heap[child]))
			child++;
		if (!frame_before(&dl->heap[child], &last))
			break;
		dl->heap[i] = dl->heap[child];
		i = child;
	}
	if (dl->n_held > 0)
		dl->heap[i] = last;
	return top;
}

/* The release time of a frame that arrives now: delay plus uniform jitter in [-J, +J]. */
static uint64_t
release_time(struct delayline *dl, uint64_t now)
{
	int64_t t = (int64_t)(now + dl->delay_ns);

	if (dl->jitter_ns != 0)
		t += (int64_t)(rng_next(dl) % (2 * dl->jitter_ns + 1)) - (int64_t)dl->jitter_ns;
	/* Never before now: a frame is not sent before it arrived. */
	return t < (int64_t)now ? now : (uint64_t)t;
}

/* Read every frame the tap has now; hold each, or drop it when the line is full. */
static int
take_frames(struct delayline *dl, int fd, uint8_t *scratch)
{
	for (;;) {
		ssize_t n = read(fd, scratch, MAX_FRAME);
		struct held_frame f;

		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			return -errno;
		}
		dl->frames_in++;
		if (dl->n_held >= dl->limit) {
			dl->dropped_full++;
			continue;
		}
		f.data = malloc((size_t)n);
		if (f.data == NULL) {
			dl->dropped_full++;
			continue;
		}
		memcpy(f.data, scratch, (size_t)n);
		f.len = (uint32_t)n;
		f.seq = dl->next_seq++;
		f.release_ns = release_time(dl, now_ns());
		heap_push(dl, f);
	}
}

/* Write back every frame whose time has come. */
static void
release_frames(struct delayline *dl, int fd)
{
	uint64_t now = now_ns();

	while (dl->n_held > 0 && dl->heap[0].release_ns <= now) {
		struct held_frame f = heap_pop(dl);

		if (write(fd, f.data, f.len) == (ssize_t)f.len)
			dl->frames_out++;
		else
			dl->dropped_write++;
		free(f.data);
	}
}

static int
run(struct delayline *dl, int fd)
{
	uint8_t *scratch = malloc(MAX_FRAME);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int rc = 0;

	if (scratch == NULL)
		return -ENOMEM;
	while (!stop_requested) {
		struct timespec wait = { .tv_sec = 1, .tv_nsec = 0 };
		struct timespec *timeout = &wait;

		if (dl->n_held > 0) {
			uint64_t now = now_ns();
			uint64_t left = dl->heap[0].release_ns > now ?
				dl->heap[0].release_ns - now : 0;

			wait.tv_sec = (time_t)(left / 1000000000u);
			wait.tv_nsec = (long)(left % 1000000000u);
		}
		if (ppoll(&pfd, 1, timeout, NULL) < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		if (pfd.revents & POLLIN) {
			rc = take_frames(dl, fd, scratch);
			if (rc < 0)
				break;
		}
		release_frames(dl, fd);
	}
	free(scratch);
	while (dl->n_held > 0)
		free(heap_pop(dl).data);
	return rc;
}

static int
tap_open(const char *name)
{
	struct ifreq ifr;
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	/* No packet-information prefix: the tap reads and writes bare Ethernet frames. */
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static int
parse_u32(const char *what, const char *s, uint32_t max, uint32_t *out)
{
	uint64_t v;

	if (phub_parse_u64(s, 0, max, &v) < 0) {
		fprintf(stderr, "phub-delayline: %s '%s': expected an integer 0..%u\n", what, s, max);
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

static void
usage(FILE *f)
{
	fprintf(f, "usage: phub-delayline --tap NAME --delay-us D [--jitter-us J] [--limit N]\n"
		"                      [--pidfile FILE] [--foreground]\n"
		"Holds the frames written into tap NAME for D +- J microseconds, then writes them\n"
		"back; at most N frames (default %u) at once.\n", DEFAULT_LIMIT);
}

/* Detach once the tap exists; the parent exits 0 after it wrote the child's pid. */
static int
detach(const char *pidfile)
{
	pid_t pid = fork();
	FILE *f;
	int fd;

	if (pid < 0)
		return -errno;
	if (pid > 0) {
		if (pidfile != NULL) {
			f = fopen(pidfile, "w");
			if (f == NULL || fprintf(f, "%d\n", (int)pid) < 0 || fclose(f) != 0) {
				fprintf(stderr, "phub-delayline: cannot write %s: %s\n", pidfile,
					strerror(errno));
				kill(pid, SIGTERM);
				_exit(1);
			}
		}
		_exit(0);
	}
	setsid();
	/* Whoever waits for the parent's output (a shell's $(...)) must not wait for ours. */
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tap", required_argument, NULL, 't' },
		{ "delay-us", required_argument, NULL, 'd' },
		{ "jitter-us", required_argument, NULL, 'j' },
		{ "limit", required_argument, NULL, 'l' },
		{ "pidfile", required_argument, NULL, 'p' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct delayline dl = { .limit = DEFAULT_LIMIT };
	const char *tap = NULL, *pidfile = NULL;
	uint32_t delay_us = UINT32_MAX, jitter_us = 0;
	bool foreground = false;
	struct sigaction sa;
	int fd, opt, rc;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 't': tap = optarg; break;
		case 'd':
			if (parse_u32("--delay-us", optarg, MAX_DELAY_US, &delay_us) < 0)
				return 2;
			break;
		case 'j':
			if (parse_u32("--jitter-us", optarg, MAX_DELAY_US, &jitter_us) < 0)
				return 2;
			break;
		case 'l':
			if (parse_u32("--limit", optarg, MAX_LIMIT, &dl.limit) < 0 || dl.limit == 0) {
				fprintf(stderr, "phub-delayline: --limit must be 1..%u\n", MAX_LIMIT);
				return 2;
			}
			break;
		case 'p': pidfile = optarg; break;
		case 'f': foreground = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc || tap == NULL || delay_us == UINT32_MAX) {
		usage(stderr);
		return 2;
	}
	if (strlen(tap) >= IFNAMSIZ) {
		fprintf(stderr, "phub-delayline: tap name '%s': at most %d characters\n", tap,
			IFNAMSIZ - 1);
		return 2;
	}
	dl.delay_ns = (uint64_t)delay_us * 1000u;
	dl.jitter_ns = (uint64_t)jitter_us * 1000u;
	dl.rng = now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
	dl.heap = calloc(dl.limit, sizeof(*dl.heap));
	if (dl.heap == NULL) {
		fprintf(stderr, "phub-delayline: no memory for %u frames\n", dl.limit);
		return 1;
	}
	fd = tap_open(tap);
	if (fd < 0) {
		fprintf(stderr, "phub-delayline: cannot create tap %s: %s\n", tap, strerror(-fd));
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (!foreground && detach(pidfile) < 0) {
		fprintf(stderr, "phub-delayline: fork: %s\n", strerror(errno));
		return 1;
	}
	rc = run(&dl, fd);
	close(fd);
	free(dl.heap);
	fprintf(stderr, "phub-delayline %s: %" PRIu64 " frames in, %" PRIu64 " out, %" PRIu64
		" dropped (line full), %" PRIu64 " dropped (write failed)%s%s\n", tap, dl.frames_in,
		dl.frames_out, dl.dropped_full, dl.dropped_write, rc < 0 ? ": " : "",
		rc < 0 ? strerror(-rc) : "");
	return rc < 0 ? 1 : 0;
}
