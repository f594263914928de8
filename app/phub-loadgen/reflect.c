/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * --reflect: the server side of --blast, and the floor of the PBox's packet path: per PUSH-shaped
 * frame only what any correct PBox must do on a port without RX checksum offload. It receives
 * the frame, reads every byte of its UDP datagram once (the raw sum of the PBox's own check,
 * lib/net's checksum: aggregation must read each byte at least once, and the checksum must be checked
 * before a datagram is added), and answers with the frames the protocol requires per PUSH on
 * average: the frame itself, MACs swapped (a full-size frame per PUSH, as the PBox's W MODELs per
 * W PUSHes) and, with --reflect-acks, a small frame of an ACK's size for W - 1 of every W frames
 * of a worker (the PBox's ACKs: the last PUSH of a segment is answered by the MODELs), or, with
 * --reflect-ackv, one small frame per burst for each worker with a frame of a group of W (one
 * segment: --blast sends the workers' frames in turn) not completed within the burst: the PBox's
 * ACKV, one per rank and burst, none for the PUSHes whose MODELs leave in the same burst.
 *
 * What it leaves out, each only work: the PHub header's parse and the session checks; the
 * aggregation's adds and stores and the optimizer pass (the checksum's read stands in for their
 * read of the payload); the answers' headers and checksums (the reflected frame is sent as it
 * came, the ACK-sized frame is the first bytes of the PUSH copied, not a valid ACK); and per W
 * PUSHes it allocates W - 1 small mbufs where the PBox allocates 2 W + 1 for the MODEL frames (a
 * header and a reference to the payload each, and the payload's). A bad checksum drops the frame,
 * as the PBox does.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include "loadgen.h"
#include "net/phub_net_csum.h"

/* Where --blast puts the run's worker count and the sender's rank (frame.c, blast.c). */
#define REFLECT_RANK_OFF (LG_L2_L4_LEN + 12)
#define REFLECT_WORLD_OFF (LG_L2_L4_LEN + 48)

struct reflect_stats {
	uint64_t frames;	/* reflected */
	uint64_t csum_ok;
	uint64_t csum_none;	/* UDP checksum 0: summed all the same, nothing to compare */
	uint64_t csum_bad;	/* dropped */
	uint64_t acks;		/* ACK-sized frames sent */
	uint64_t other;		/* not an IPv4/UDP frame in one segment: dropped */
	uint64_t tx_dropped;	/* the ring was full */
	uint64_t no_mbuf;
	uint64_t busy_tsc;	/* TSC of the loop turns that received frames */
};

static void
reflect_report(const struct reflect_stats *s, bool acks)
{
	printf("{\"mode\":\"reflect\",\"acks_mode\":%s,\"frames\":%" PRIu64 ",\"csum_ok\":%" PRIu64
		",\"csum_none\":%" PRIu64 ",\"csum_bad\":%" PRIu64 ",\"acks\":%" PRIu64
		",\"other\":%" PRIu64 ",\"tx_dropped\":%" PRIu64 ",\"no_mbuf\":%" PRIu64
		",\"busy_ns\":%.0f}\n",
		acks ? "true" : "false", s->frames, s->csum_ok, s->csum_none, s->csum_bad,
		s->acks, s->other, s->tx_dropped, s->no_mbuf,
		(double)s->busy_tsc * 1e9 / (double)rte_get_tsc_hz());
	fflush(stdout);
}

/*
 * The UDP datagram of a one-segment IPv4 frame summed with its pseudo-header: every byte read
 * once. Returns the UDP header, or NULL when the frame is not one; *ok whether the checksum holds
 * (true for a checksum of 0, which says "not computed").
 */
static inline const struct rte_udp_hdr *
reflect_check(struct rte_mbuf *m, bool *ok, bool *none)
{
	const struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, const struct rte_ether_hdr *);
	const struct rte_ipv4_hdr *ip = (const struct rte_ipv4_hdr *)(eth + 1);
	const struct rte_udp_hdr *udp;
	uint16_t ihl, udp_len;
	uint32_t sum;

	if (m->nb_segs != 1 || m->data_len < LG_HEAD_LEN ||
	    eth->ether_type != RTE_BE16(RTE_ETHER_TYPE_IPV4) || ip->next_proto_id != IPPROTO_UDP)
		return NULL;
	ihl = (uint16_t)((ip->version_ihl & RTE_IPV4_HDR_IHL_MASK) * 4);
	udp = (const struct rte_udp_hdr *)((const uint8_t *)ip + ihl);
	udp_len = rte_be_to_cpu_16(udp->dgram_len);
	if (ihl < sizeof(*ip) || udp_len < sizeof(*udp) ||
	    RTE_ETHER_HDR_LEN + ihl + udp_len > m->data_len)
		return NULL;
	sum = (uint32_t)rte_ipv4_phdr_cksum(ip, 0) + phub_net_raw_cksum(udp, udp_len);
	sum = (sum & 0xffff) + (sum >> 16);
	*none = udp->dgram_cksum == 0;
	*ok = *none || sum == 0xffff;
	return udp;
}

/* One small frame, the first bytes of the frame p: an ACK's or an ACKV's stand-in. */
static void
reflect_small(struct lg *lg, struct reflect_stats *st, const uint8_t *p, uint16_t len,
		struct rte_mbuf **out, uint16_t *n_out)
{
	struct rte_mbuf *a_m = rte_pktmbuf_alloc(lg->pool);
	uint8_t *d;

	if (a_m == NULL) {
		st->no_mbuf++;
		return;
	}
	d = (uint8_t *)rte_pktmbuf_append(a_m, len);
	memcpy(d, p, len);
	out[(*n_out)++] = a_m;
	st->acks++;
}

int
lg_reflect_run(struct lg *lg, bool acks, bool ackv)
{
	uint16_t port = lg->opt.port_id;
	struct reflect_stats st;
	uint32_t count[LG_MAX_WORKERS] = { 0 };
	/* The end of the last turn, the start of this one: one clock read a turn, as before. */
	uint64_t turn_start = rte_rdtsc();
	uint64_t next_report = turn_start + lg->tsc_hz;

	memset(&st, 0, sizeof(st));
	printf("phub-loadgen reflect: ready on port %u%s\n", port,
			acks ? ", with ACK-sized frames" : ackv ? ", with ACKV-sized frames" : "");
	fflush(stdout);
	while (!lg_quit) {
		struct rte_mbuf *pkts[LG_BURST], *out[2 * LG_BURST + LG_MAX_WORKERS];
		/* --reflect-ackv: ranks with a frame of an open group, and one of their frames. */
		const uint8_t *owed_frame[LG_MAX_WORKERS];
		uint64_t owed_group = 0;
		uint16_t n, n_out = 0, sent;
		uint64_t now;

		n = rte_eth_rx_burst(port, 0, pkts, LG_BURST);
		for (uint16_t i = 0; i < n; i++) {
			struct rte_mbuf *m = pkts[i];
			struct rte_ether_hdr *eth;
			struct rte_ether_addr a;
			bool ok = false, none = false;

			if (i + 1 < n)
				rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 1], void *));
			if (reflect_check(m, &ok, &none) == NULL) {
				st.other++;
				rte_pktmbuf_free(m);
				continue;
			}
			if (!ok) {
				st.csum_bad++;
				rte_pktmbuf_free(m);
				continue;
			}
			if (none)
				st.csum_none++;
			else
				st.csum_ok++;
			eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
			if (acks || ackv) {
				const uint8_t *p = rte_pktmbuf_mtod(m, const uint8_t *);
				uint16_t rank, world;
				uint32_t w;

				memcpy(&rank, p + REFLECT_RANK_OFF, sizeof(rank));
				memcpy(&w, p + REFLECT_WORLD_OFF, sizeof(w));
				rank = (uint16_t)(rte_be_to_cpu_16(rank) % LG_MAX_WORKERS);
				world = (uint16_t)RTE_MAX(rte_be_to_cpu_32(w), 1u);
				if (++count[rank] % world != 0) {
					if (acks)
						reflect_small(lg, &st, p, LG_HEAD_LEN, out, &n_out);
					owed_group |= UINT64_C(1) << rank;
					owed_frame[rank] = p;
				} else {
					/* The group's last frame: its MODELs answer the group. */
					owed_group = 0;
				}
			}
			a = eth->dst_addr;
			eth->dst_addr = eth->src_addr;
			eth->src_addr = a;
			out[n_out++] = m;
			st.frames++;
		}
		/*
		 * --reflect-ackv: one ACKV-sized frame (one entry) for each rank of the group still
		 * open at the burst's end, copied from its frame before that one is sent.
		 */
		while (owed_group != 0) {
			unsigned int r = (unsigned int)__builtin_ctzll(owed_group);

			owed_group &= owed_group - 1;
			if (ackv)
				reflect_small(lg, &st, owed_frame[r],
						LG_HEAD_LEN + PHUB_WIRE_ACKV_ENTRY_LEN, out, &n_out);
		}
		if (n_out != 0) {
			sent = rte_eth_tx_burst(port, 0, out, n_out);
			if (sent < n_out) {
				st.tx_dropped += n_out - sent;
				rte_pktmbuf_free_bulk(out + sent, n_out - sent);
			}
		}
		now = rte_rdtsc();
		if (n != 0)
			st.busy_tsc += now - turn_start;
		turn_start = now;
		if (now > next_report) {
			reflect_report(&st, acks || ackv);
			turn_start = rte_rdtsc();	/* the report is not a turn's work */
			next_report = turn_start + lg->tsc_hz;
		}
	}
	reflect_report(&st, acks || ackv);
	return 0;
}
