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
 *
 * --reflect-sum puts back the aggregation, the part of the PBox's work that is arithmetic on a
 * model larger than the caches, in its least form (the one the PBox takes for fp32 jobs): each
 * group of W consecutive frames is one segment; its first frame is held as the sum (not copied),
 * the middle ones are added into it (a group cut by a burst's end goes back unsummed, counted as
 * split), and the last runs the fused SGD step (sum, 1/W, weight
 * update, MODEL payload) against the segment's place in a model of --keys x --key-elems fp32,
 * walked in order; the new payload is then summed for its UDP checksum, and the group's frames
 * are reflected. Still left out: the header parse, the answers' headers and the MODEL frames'
 * building (the frames go back as they came).
 *
 * On a memif port the loop takes turns with net_memif's handlers through the memif gate, as the
 * PBox's data lcores do (lib/net/phub_memif_gate.h): a generator that left while a turn of ours
 * was in its region killed the floor (SIGSEGV: one CI run of packet-path-floor, and 2 of 45
 * generators in a row on a loaded machine).
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_pause.h>
#include <rte_udp.h>

#include <rte_malloc.h>

#include "kernels/phub_kernels.h"
#include "loadgen.h"
#include "net/phub_memif_gate.h"
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

/* --reflect-sum: the model, the open group and the fused step's constants. */
struct reflect_sum {
	const struct phub_kernels *kern;
	float *model;
	size_t model_elems;
	size_t cursor;			/* the next group's first element in the model */
	float *payload;			/* the fused step's MODEL payload, reused */
	size_t payload_elems;
	struct rte_mbuf *held;		/* the open group's first frame: its payload is the sum */
	float *sum;
	uint32_t elems;			/* of the open group's frames */
	uint32_t arrivals;
	struct phub_optimizer_params params;
	uint64_t groups;
	uint64_t split;			/* groups cut by a burst's end: sent back unsummed */
	uint32_t csum_fold;		/* the payloads' checksums, kept so none is optimised away */
};

static int
reflect_sum_init(struct lg *lg, struct reflect_sum *rs)
{
	memset(rs, 0, sizeof(*rs));
	rs->kern = phub_kernels_get();
	rs->model_elems = (size_t)lg->opt.keys * lg->opt.key_elems;
	/* The largest segment a frame can carry. */
	rs->payload_elems = (RTE_MBUF_DEFAULT_DATAROOM + 16384) / sizeof(float);
	rs->model = rte_zmalloc("lg_reflect_model", rs->model_elems * sizeof(float),
			RTE_CACHE_LINE_SIZE);
	rs->payload = rte_zmalloc("lg_reflect_payload", rs->payload_elems * sizeof(float),
			RTE_CACHE_LINE_SIZE);
	if (rs->model == NULL || rs->payload == NULL) {
		LG_LOG(ERR, "--reflect-sum: no memory for a model of %zu elements", rs->model_elems);
		rte_free(rs->model);
		rte_free(rs->payload);
		return -ENOMEM;
	}
	rs->params = (struct phub_optimizer_params){ .type = PHUB_OPT_SGD, .lr = 0.01f };
	return 0;
}

static void
reflect_sum_fini(struct reflect_sum *rs)
{
	rte_pktmbuf_free(rs->held);
	rte_free(rs->model);
	rte_free(rs->payload);
}

/*
 * Frame m (its UDP datagram udp, checksum checked) as arrival of the open group of world; queues
 * on out what is to be reflected now: nothing while m is held as the group's sum, m itself in
 * the middle, the held frame and m at the group's end.
 */
static void
reflect_sum_frame(struct reflect_sum *rs, struct rte_mbuf *m, const struct rte_udp_hdr *udp,
		uint16_t world, struct rte_mbuf **out, uint16_t *n_out)
{
	const uint8_t *d = (const uint8_t *)(udp + 1);
	uint16_t udp_len = rte_be_to_cpu_16(udp->dgram_len);
	uint16_t hl = (uint16_t)(udp_len - sizeof(*udp)) > 5 ? d[5] : 0;
	uint32_t bytes = udp_len - (uint32_t)sizeof(*udp) - hl;
	uint32_t elems = bytes / sizeof(float);
	float *grad = (float *)(uintptr_t)(d + hl);

	if (hl < PHUB_WIRE_HDR_LEN || udp_len < sizeof(*udp) + hl || elems == 0 ||
	    elems > rs->payload_elems || elems > rs->model_elems) {
		out[(*n_out)++] = m;
		return;
	}
	/* A group of another segment size cannot be summed with this one: it goes back as is. */
	if (rs->held != NULL && rs->elems != elems) {
		out[(*n_out)++] = rs->held;
		rs->held = NULL;
	}
	if (rs->held == NULL && world > 1) {
		rs->held = m;
		rs->sum = grad;
		rs->elems = elems;
		rs->arrivals = 1;
		return;
	}
	if (rs->held != NULL && ++rs->arrivals < world) {
		rs->kern->add(rs->sum, grad, PHUB_DTYPE_FP32, elems);
		out[(*n_out)++] = m;
		return;
	}
	if (rs->cursor + elems > rs->model_elems)
		rs->cursor = 0;
	{
		struct phub_opt_buffers buf = {
			.acc = rs->held != NULL ? rs->sum : NULL, .grad = grad,
			.weight = rs->model + rs->cursor, .out = rs->payload,
			.grad_dtype = PHUB_DTYPE_FP32, .out_dtype = PHUB_DTYPE_FP32,
		};
		struct phub_opt_step step = {
			.grad_scale = 1.0f / (float)world, .lr = rs->params.lr,
			.adam_c1 = 1.0f, .adam_c2 = 1.0f,
		};

		rs->kern->last(&buf, elems, &rs->params, &step);
	}
	rs->csum_fold += phub_net_raw_cksum(rs->payload, bytes);
	rs->cursor += elems;
	rs->groups++;
	if (rs->held != NULL)
		out[(*n_out)++] = rs->held;
	rs->held = NULL;
	out[(*n_out)++] = m;
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
	struct reflect_sum rs;
	bool sum = lg->opt.reflect_sum;
	bool gated = phub_port_is_memif(port);
	atomic_bool in_section;
	atomic_bool *sections[1] = { &in_section };
	int rc;

	if (gated) {
		rc = phub_memif_gate_init(sections, 1);
		if (rc != 0) {
			LG_LOG(ERR, "memif gate: cannot set its alarm: %s", rte_strerror(-rc));
			return rc;
		}
	}
	if (sum && reflect_sum_init(lg, &rs) != 0) {
		phub_memif_gate_fini();
		return -ENOMEM;
	}
	memset(&st, 0, sizeof(st));
	printf("phub-loadgen reflect: ready on port %u%s%s%s\n", port,
			acks ? ", with ACK-sized frames" : ackv ? ", with ACKV-sized frames" : "",
			sum ? ", summing groups into a model" : "",
			gated ? ", behind the memif gate" : "");
	fflush(stdout);
	while (!lg_quit) {
		/* + 1: a frame held as a group's sum in the last burst leaves in this one. */
		struct rte_mbuf *pkts[LG_BURST], *out[2 * LG_BURST + LG_MAX_WORKERS + 1];
		/* --reflect-ackv: ranks with a frame of an open group, and one of their frames. */
		const uint8_t *owed_frame[LG_MAX_WORKERS];
		uint64_t owed_group = 0;
		uint16_t n, n_out = 0, sent;
		uint64_t now;

		if (gated && !phub_memif_gate_enter(&in_section)) {
			/* The gate is shut: not a turn, its wait is not busy time. */
			rte_pause();
			turn_start = rte_rdtsc();
			continue;
		}
		n = rte_eth_rx_burst(port, 0, pkts, LG_BURST);
		for (uint16_t i = 0; i < n; i++) {
			struct rte_mbuf *m = pkts[i];
			struct rte_ether_hdr *eth;
			struct rte_ether_addr a;
			const struct rte_udp_hdr *udp;
			bool ok = false, none = false;
			uint16_t world = 1;

			if (i + 1 < n)
				rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 1], void *));
			udp = reflect_check(m, &ok, &none);
			if (udp == NULL) {
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
			if (acks || ackv || sum) {
				const uint8_t *p = rte_pktmbuf_mtod(m, const uint8_t *);
				uint32_t w;

				memcpy(&w, p + REFLECT_WORLD_OFF, sizeof(w));
				world = (uint16_t)RTE_MIN(RTE_MAX(rte_be_to_cpu_32(w), 1u),
						(uint32_t)LG_MAX_WORKERS);
			}
			if (acks || ackv) {
				const uint8_t *p = rte_pktmbuf_mtod(m, const uint8_t *);
				uint16_t rank;

				memcpy(&rank, p + REFLECT_RANK_OFF, sizeof(rank));
				rank = (uint16_t)(rte_be_to_cpu_16(rank) % LG_MAX_WORKERS);
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
			if (sum)
				reflect_sum_frame(&rs, m, udp, world, out, &n_out);
			else
				out[n_out++] = m;
			st.frames++;
		}
		/*
		 * --reflect-ackv: one ACKV-sized frame (one entry) for each rank of the group still
		 * open at the burst's end, copied from its frame before that one is sent.
		 */
		/*
		 * A frame held as a group's sum leaves in the turn it came: a group whose frames
		 * straddle two bursts is not summed (counted apart), so the floor does a little less
		 * than a PBox, never more. Held across turns, the memif server's TX into the
		 * zero-copy client's region faulted (SIGSEGV in net_memif, 1 run in 3).
		 */
		if (sum && rs.held != NULL) {
			out[n_out++] = rs.held;
			rs.held = NULL;
			rs.split++;
		}
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
		if (gated)
			phub_memif_gate_leave(&in_section);
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
	phub_memif_gate_fini();
	reflect_report(&st, acks || ackv);
	if (sum) {
		printf("{\"mode\":\"reflect-sum\",\"groups\":%" PRIu64 ",\"split\":%" PRIu64
				",\"csum_fold\":%u}\n", rs.groups, rs.split, rs.csum_fold);
		fflush(stdout);
		reflect_sum_fini(&rs);
	}
	return 0;
}
