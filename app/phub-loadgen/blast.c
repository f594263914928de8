/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * --blast: PUSH-shaped frames (the same headers and sizes as the session's) sent as fast as the
 * window allows, and every frame that comes back read (its headers, as a worker reads each answer)
 * and counted: the rate of a plain forwarder such as dpdk-testpmd in macswap or io mode, to set
 * beside the PBox's. The window (--window frames per emulated worker, as in the session) closes
 * the loop the way the session's ACKs do: an open loop only measures how fast the forwarder's RX
 * ring overflows. Frames shorter than a PUSH that come back (--reflect-acks' ACK-sized answers)
 * are counted as acks, not as reflected frames.
 */

#include <errno.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_prefetch.h>

#include "loadgen.h"

/* The first half second fills rings and caches: it is not measured. */
#define BLAST_WARMUP_S 0.5

int
lg_blast_run(struct lg *lg, struct lg_stats *measured, double *seconds)
{
	uint32_t elems = lg->opt.payload_bytes / sizeof(float);
	struct lg_segment seg = {
		.chunk_id = 0, .elem_offset = 0, .elem_count = elems, .seg_index = 0,
		.seg_count = 1, .dst_udp = (uint16_t)(lg->opt.base_port + 1),
	};
	struct phub_wire_msg hdr;
	struct lg_stats base;
	uint64_t start, warm, deadline;
	uint64_t window = lg->opt.window == UINT32_MAX ? UINT64_MAX :
		(uint64_t)lg->opt.window * lg->n_workers;
	uint64_t last_rx, loss_tsc = lg->tsc_hz / 1000000 * LG_BLAST_LOSS_US;
	uint64_t inflight = 0;
	uint32_t frame_len = LG_HEAD_LEN + lg->opt.payload_bytes;
	uint16_t answered;
	uint64_t sent;
	uint32_t rr = 0;
	bool measuring = false;

	if (elems == 0 || lg->opt.payload_bytes % (PHUB_WIRE_ELEM_ALIGN * sizeof(float)) != 0 ||
	    (size_t)lg->opt.payload_bytes > rte_pktmbuf_tailroom(lg->payload) +
	    lg->payload->data_len) {
		LG_LOG(ERR, "--payload-bytes %u: must be a multiple of %u bytes and fit the MTU",
				lg->opt.payload_bytes, PHUB_WIRE_ELEM_ALIGN * 4);
		return -EINVAL;
	}
	seg.payload_sum = rte_raw_cksum(rte_pktmbuf_mtod(lg->payload, void *),
			lg->opt.payload_bytes);
	/* A forwarder does not answer ARP: any unicast destination will do. */
	lg->pbox_mac = (struct rte_ether_addr){ { 0x02, 0, 0, 0, 0x02, 0x01 } };

	phub_wire_msg_init(&hdr, PHUB_WIRE_OP_PUSH);
	hdr.job_id = 1;
	hdr.session_token = 1;
	hdr.chunk_id = 0;
	hdr.iteration = 1;
	hdr.elem_count = elems;
	hdr.dtype = PHUB_DTYPE_FP32;
	hdr.payload_len = (uint16_t)lg->opt.payload_bytes;
	hdr.payload = rte_pktmbuf_mtod(lg->payload, const uint8_t *);

	start = rte_rdtsc();
	warm = start + (uint64_t)(BLAST_WARMUP_S * (double)lg->tsc_hz);
	deadline = warm + (uint64_t)(lg->opt.duration_s * (double)lg->tsc_hz);
	memset(&base, 0, sizeof(base));
	last_rx = start;
	for (;;) {
		struct rte_mbuf *pkts[LG_BURST];
		uint64_t now = rte_rdtsc();
		uint16_t n;

		if (!measuring && now >= warm) {
			base = lg->stats;
			start = now;
			measuring = true;
		}
		if (lg_quit || now >= deadline)
			break;
		n = rte_eth_rx_burst(lg->opt.port_id, 0, pkts, LG_BURST);
		answered = 0;
		/*
		 * Every frame's headers read, as the session's workers read each ACK and MODEL
		 * (rx_poll): a server's TX then writes into lines this CPU holds, whichever server
		 * it is. Left unread, they cost testpmd and the floors less than the PBox: the floor
		 * took a quarter more time per frame at 1 KB once they were read.
		 */
		for (uint16_t i = 0; i < n; i++) {
			rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void *));
			rte_prefetch0(rte_pktmbuf_mtod_offset(pkts[i], char *, RTE_CACHE_LINE_SIZE));
		}
		for (uint16_t i = 0; i < n; i++) {
			struct phub_wire_msg msg;
			const uint8_t *d;
			uint32_t dst_ip;
			uint16_t dst_udp, len;

			/* Its IPv4 and UDP headers; a frame shorter than a PUSH is --reflect-acks'. */
			d = lg_frame_udp_payload(pkts[i], &dst_ip, &dst_udp, NULL, &len);
			if (pkts[i]->pkt_len < frame_len) {
				lg->stats.acks++;
				continue;
			}
			/* A frame that came back, but not as the PUSH it was, is not counted. */
			if (d == NULL || phub_wire_parse(d, len, &msg) != PHUB_DROP_OK ||
			    msg.opcode != PHUB_WIRE_OP_PUSH) {
				lg->stats.stale++;
				answered++;
				continue;
			}
			lg->stats.rx_pkts++;
			lg->stats.rx_bytes += pkts[i]->pkt_len;
			answered++;
		}
		rte_pktmbuf_free_bulk(pkts, n);
		sent = lg->stats.tx_pkts;
		if (answered > 0) {
			inflight -= RTE_MIN(inflight, (uint64_t)answered);
			last_rx = now;
		} else if (inflight > 0 && now - last_rx > loss_tsc) {
			lg->stats.other += inflight;	/* lost in the forwarder */
			inflight = 0;
			last_rx = now;
		}
		while (lg->n_txq < LG_BURST && inflight < window) {
			struct lg_worker *w = &lg->workers[rr];
			struct rte_mbuf *m;

			hdr.worker_rank = w->rank;
			/* The run's worker count, for --reflect-acks' share of ACK-sized answers. */
			hdr.aux = lg->n_workers;
			m = lg_frame_push(lg, w, &seg, &hdr);
			if (m == NULL)
				break;
			lg->stats.pushes++;
			lg->stats.push_bytes += lg->opt.payload_bytes;
			lg_tx(lg, m);
			inflight++;
			rr = rr + 1 == lg->n_workers ? 0 : rr + 1;
		}
		lg_tx_flush(lg);
		if (n > 0 || lg->stats.tx_pkts != sent)
			lg->stats.busy_tsc += rte_rdtsc() - now;
	}
	*seconds = (double)(rte_rdtsc() - start) / (double)lg->tsc_hz;
	memset(measured, 0, sizeof(*measured));
	measured->tx_pkts = lg->stats.tx_pkts - base.tx_pkts;
	measured->tx_bytes = lg->stats.tx_bytes - base.tx_bytes;
	measured->rx_pkts = lg->stats.rx_pkts - base.rx_pkts;
	measured->rx_bytes = lg->stats.rx_bytes - base.rx_bytes;
	measured->pushes = lg->stats.pushes - base.pushes;
	measured->push_bytes = lg->stats.push_bytes - base.push_bytes;
	measured->tx_full = lg->stats.tx_full - base.tx_full;
	measured->other = lg->stats.other - base.other;
	measured->acks = lg->stats.acks - base.acks;
	measured->stale = lg->stats.stale - base.stale;
	measured->busy_tsc = lg->stats.busy_tsc - base.busy_tsc;
	/* Frames still in the queue were built, never sent. */
	rte_pktmbuf_free_bulk(lg->txq, lg->n_txq);
	lg->n_txq = 0;
	return 0;
}

/* Reads and frees what the server still sends, until it has been quiet for BLAST_DRAIN_QUIET_MS. */
#define BLAST_DRAIN_QUIET_MS 50

void
lg_blast_drain(struct lg *lg)
{
	uint64_t quiet = lg->tsc_hz / 1000 * BLAST_DRAIN_QUIET_MS;
	uint64_t last = rte_rdtsc();

	while (!lg_quit && rte_rdtsc() - last < quiet) {
		struct rte_mbuf *pkts[LG_BURST];
		uint16_t n = rte_eth_rx_burst(lg->opt.port_id, 0, pkts, LG_BURST);

		if (n > 0) {
			rte_pktmbuf_free_bulk(pkts, n);
			last = rte_rdtsc();
		} else {
			rte_delay_us_sleep(1000);
		}
	}
}
