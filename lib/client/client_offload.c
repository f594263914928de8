/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The socket's UDP offloads: runs of PUSHes sent as one UDP GSO message each (UDP_SEGMENT), MODEL
 * bursts taken as one coalesced buffer (UDP_GRO) and split, and the fallback when the kernel
 * refuses either.
 */

#include <errno.h>
#include <netinet/udp.h>
#include <stddef.h>
#include <string.h>

#include "client_priv.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

static inline size_t
dgram_len(const struct tx_batch *tx, unsigned int i)
{
	size_t len = 0;

	for (unsigned int k = 0; k < tx->iovlen[i]; k++)
		len += tx->iov[i][k].iov_len;
	return len;
}

static inline bool
same_dst(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/*
 * How many datagrams from i one message carries: with GSO, the run to the same destination whose
 * datagrams have the length of the first, but the last, which may be shorter (the kernel cuts
 * the message at gso_size).
 */
static unsigned int
run_len(const struct tx_batch *tx, unsigned int i, bool gso)
{
	size_t seg = dgram_len(tx, i), total = seg;
	unsigned int j = i + 1;

	if (!gso)
		return 1;
	while (j < tx->n && j - i < CLIENT_GSO_MAX_SEGS) {
		size_t len = dgram_len(tx, j);

		if (!same_dst(&tx->dst[i], &tx->dst[j]) || len > seg || len == 0 ||
		    total + len > CLIENT_GSO_MAX_BYTES)
			break;
		total += len;
		j++;
		if (len < seg)
			break;
	}
	return j - i;
}

/* The messages for the datagrams from first on; returns how many. */
static unsigned int
build_msgs(struct tx_batch *tx, unsigned int first, bool gso)
{
	unsigned int m = 0, v = 0;

	for (unsigned int i = first; i < tx->n; m++) {
		unsigned int n = run_len(tx, i, gso);
		struct msghdr *hdr = &tx->msgs[m].msg_hdr;

		memset(&tx->msgs[m], 0, sizeof(tx->msgs[m]));
		hdr->msg_name = &tx->dst[i];
		hdr->msg_namelen = sizeof(tx->dst[i]);
		hdr->msg_iov = &tx->msg_iov[v];
		for (unsigned int d = i; d < i + n; d++)
			for (unsigned int k = 0; k < tx->iovlen[d]; k++)
				tx->msg_iov[v++] = tx->iov[d][k];
		hdr->msg_iovlen = (size_t)(&tx->msg_iov[v] - hdr->msg_iov);
		if (n > 1) {
			struct cmsghdr *cm;
			uint16_t seg = (uint16_t)dgram_len(tx, i);

			memset(&tx->cmsg[m], 0, sizeof(tx->cmsg[m]));
			hdr->msg_control = tx->cmsg[m].buf;
			hdr->msg_controllen = CMSG_SPACE(sizeof(uint16_t));
			cm = CMSG_FIRSTHDR(hdr);
			cm->cmsg_level = SOL_UDP;
			cm->cmsg_type = UDP_SEGMENT;
			cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
			memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
		}
		tx->n_dgrams[m] = n;
		i += n;
	}
	return m;
}

static void
count_sent(struct phub *h, unsigned int first, unsigned int n)
{
	const struct tx_batch *tx = &h->tx;

	for (unsigned int i = first; i < first + n; i++) {
		uint8_t flags = tx->hdr[i][offsetof(struct phub_wire_hdr, flags)];

		h->stats.tx_datagrams++;
		h->stats.tx_bytes += dgram_len(tx, i);
		/* Counted when sent, with tx_datagrams: one snapshot has both alike. */
		if (flags & PHUB_WIRE_F_CSUM)
			h->stats.tx_csum++;
	}
}

/* What a kernel says when it cannot do UDP GSO on this socket or route. */
static bool
gso_refusal(int err)
{
	return err == EIO || err == EINVAL || err == ENOPROTOOPT || err == EOPNOTSUPP;
}

void
client_tx_flush(struct phub *h)
{
	struct tx_batch *tx = &h->tx;
	unsigned int done = 0;

	while (done < tx->n) {
		unsigned int n_msgs = build_msgs(tx, done, h->gso_on);
		int n = sendmmsg(h->fd, tx->msgs, n_msgs, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (tx->n_dgrams[0] > 1 && gso_refusal(errno)) {
				/* No GSO here (a device without checksum offload: EIO): once. */
				h->gso_on = false;
				h->stats.tx_gso_refused++;
				continue;
			}
			/* The kernel would not take it: lost like on the wire, timers repair it. */
			h->stats.tx_errors += tx->n_dgrams[0];
			done += tx->n_dgrams[0];
			continue;
		}
		for (int m = 0; m < n; m++) {
			count_sent(h, done, tx->n_dgrams[m]);
			if (tx->n_dgrams[m] > 1)
				h->stats.tx_gso_sends++;
			done += tx->n_dgrams[m];
		}
	}
	tx->n = 0;
}

bool
client_gro_set(struct phub *h, bool on)
{
	int v = on ? 1 : 0;

	return setsockopt(h->fd, SOL_UDP, UDP_GRO, &v, sizeof(v)) == 0;
}

size_t
client_gro_dgram_len(size_t len, size_t gso_size, size_t off)
{
	if (off >= len)
		return 0;
	if (gso_size == 0 || len - off < gso_size)
		return len - off;
	return gso_size;
}

size_t
client_gro_size(const struct msghdr *m)
{
	for (const struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm != NULL;
	     cm = CMSG_NXTHDR((struct msghdr *)(uintptr_t)m, (struct cmsghdr *)(uintptr_t)cm)) {
		int v;

		if (cm->cmsg_level != SOL_UDP || cm->cmsg_type != UDP_GRO ||
		    cm->cmsg_len < CMSG_LEN(sizeof(int)))
			continue;
		memcpy(&v, CMSG_DATA(cm), sizeof(v));
		return v > 0 ? (size_t)v : 0;
	}
	return 0;
}
