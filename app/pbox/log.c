/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Where the PBox's log lines go under systemd. DPDK's default stream writes each line to
 * stderr and to syslog(3); under systemd both reach the journal, so every line was there
 * twice, and the stderr copy at priority info whatever its level. When stderr is the
 * journal's stream ($JOURNAL_STREAM names it), this stream writes each line once, to stderr,
 * behind the "<N>" prefix that journald reads as its priority (sd-daemon(3)); syslog is not
 * used. Elsewhere (a terminal, a file) DPDK's default stays.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rte_log.h>

#include "pbox.h"

/* Whether the next byte starts a line: the stream's lock serializes the writes. */
static bool at_line_start = true;

static void
write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDERR_FILENO, p, n);

		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static ssize_t
journal_write(void *cookie, const char *buf, size_t size)
{
	/* RTE_LOG_EMERG is 1, LOG_EMERG 0: DPDK's levels are syslog's plus one. */
	int prio = rte_log_cur_msg_loglevel() - 1;
	size_t done = 0;

	(void)cookie;
	if (prio < 0 || prio > 7)
		prio = 6;	/* LOG_INFO: a line not written through rte_log */
	while (done < size) {
		const char *nl = memchr(buf + done, '\n', size - done);
		size_t len = nl != NULL ? (size_t)(nl - (buf + done)) + 1 : size - done;

		if (at_line_start) {
			char tag[4] = { '<', (char)('0' + prio), '>', '\0' };

			write_all(tag, 3);
		}
		write_all(buf + done, len);
		at_line_start = nl != NULL;
		done += len;
	}
	return (ssize_t)size;
}

/* $JOURNAL_STREAM is "device:inode" of the journal's stream: is it our stderr? */
static bool
stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void
pbox_log_init(void)
{
	static const cookie_io_functions_t io = { .write = journal_write };
	FILE *f;

	if (!stderr_is_journal())
		return;
	f = fopencookie(NULL, "w", io);
	if (f == NULL)
		return;
	/* One write per line, under the stream's lock: a line's priority is its writer's. */
	setvbuf(f, NULL, _IOLBF, 0);
	rte_openlog_stream(f);
}
