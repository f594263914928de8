/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The emulated workers' protocol: JOIN and JOIN_ACK, then whole-model iterations of PUSH with
 * ACK and MODEL counted per (worker, segment), retransmission after an RTO from the measured
 * round trips, and LEAVE.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_ip.h>

#include "loadgen.h"

/* Control exchanges give up after this long: the PBox is not there or refuses. */
#define JOIN_TIMEOUT_S 10.0
#define JOIN_RESEND_MS 500
#define LEAVE_WAIT_MS 300
#define MODEL_WAIT_RTOS 4

static uint64_t
ms_to_tsc(const struct lg *lg, uint64_t ms)
{
	return lg->tsc_hz / 1000 * ms;
}

static struct lg_worker *
worker_of(struct lg *lg, uint32_t dst_ip, uint16_t dst_udp)
{
	uint32_t i = dst_ip - lg->opt.worker_ipv4;

	if (i >= lg->n_workers || lg->workers[i].udp != dst_udp)
		return NULL;
	return &lg->workers[i];
}

static void
join_params(const struct lg *lg, const struct phub_wire_key *keys,
		struct phub_wire_join_params *p)
{
	memset(p, 0, sizeof(*p));
	/* One job per run: a run's job is gone (LEAVE) or at least not in the way of the next. */
	snprintf(p->join.name, sizeof(p->join.name), "%.50s-%u", lg->opt.job, lg->run);
	p->join.nonce = lg->opt.nonce[lg->run % lg->opt.n_nonces];
	p->join.world_size = lg->n_workers;
	p->join.dtype = PHUB_DTYPE_FP32;
	p->join.optimizer = lg->opt.optimizer;
	p->join.chunk_bytes = lg->opt.chunk_bytes;
	/* ACKV as libphub asks for it, unless --no-ackv or PHUB_ACKV=0 (libphub's switch). */
	if (!lg->opt.no_ackv && (getenv("PHUB_ACKV") == NULL ||
			strcmp(getenv("PHUB_ACKV"), "0") != 0))
		p->join.join_flags |= PHUB_WIRE_JOIN_F_ACKV;
	/* Only the hyper-parameters the optimizer uses are sent; the others must be 0. */
	switch (lg->opt.optimizer) {
	case PHUB_OPT_NONE:
		break;
	case PHUB_OPT_SGD:
		p->join.hyper.lr = 0.01f;
		break;
	case PHUB_OPT_MOMENTUM:
	case PHUB_OPT_NESTEROV:
		p->join.hyper.lr = 0.01f;
		p->join.hyper.momentum = 0.9f;
		break;
	default:
		p->join.hyper.lr = 0.001f;
		p->join.hyper.beta1 = 0.9f;
		p->join.hyper.beta2 = 0.999f;
		p->join.hyper.eps = 1e-8f;
		break;
	}
	p->keys = keys;
	p->key_count = lg->opt.keys;
}

static int
join_send(struct lg *lg, struct lg_worker *w, struct phub_wire_join_params *p, uint8_t *buf)
{
	/* --auth: each datagram's key and MAC must still fit the MTU. */
	unsigned int mtu = lg->opt.auth ?
		lg->opt.mtu - PHUB_WIRE_AUTH_PK_LEN - PHUB_WIRE_AUTH_TRAILER_LEN : lg->opt.mtu;
	int segs;

	p->join.rank = w->rank;
	segs = phub_wire_join_segments(p, mtu);
	if (segs < 0)
		return segs;
	for (int i = 0; i < segs; i++) {
		int len = phub_wire_join_write(buf, PHUB_WIRE_MAX_DATAGRAM, p, mtu, (uint16_t)i);

		if (len > 0 && lg->opt.auth)
			len = phub_auth_initiator_seal(w->auth_join, buf, (size_t)len,
					PHUB_WIRE_MAX_DATAGRAM);
		if (len < 0)
			return len;
		if (lg_frame_control(lg, w, buf, (uint16_t)len) != 0)
			return -EAGAIN;
	}
	return 0;
}

/* --auth: the session's lanes, keyed by the JOIN_ACK's exchange. */
static int
lanes_start(struct lg_worker *w)
{
	uint16_t n = (uint16_t)(1 + w->n_endpoints);

	w->lanes = calloc(n, sizeof(*w->lanes));
	if (w->lanes == NULL)
		return -ENOMEM;
	for (w->n_lanes = 0; w->n_lanes < n; w->n_lanes++)
		if (phub_auth_lane_init(&w->lanes[w->n_lanes], &w->auth_join->next) != 0)
			return -ENOMEM;
	return 0;
}

static void
lanes_end(struct lg_worker *w)
{
	for (uint16_t i = 0; i < w->n_lanes; i++)
		phub_auth_lane_fini(&w->lanes[i]);
	free(w->lanes);
	w->lanes = NULL;
	w->n_lanes = 0;
}

/*
 * Take a JOIN_ACK or ERROR (datagram d) for a worker that has not joined yet; -EPROTO on
 * ERROR. --auth: a JOIN_ACK counts only when it proves the PBox holds the job's PSK.
 */
static int
join_rx(struct lg *lg, struct lg_worker *w, const uint8_t *d, const struct phub_wire_msg *msg)
{
	if (msg->opcode == PHUB_WIRE_OP_ERROR) {
		struct phub_wire_error_msg err;

		if (phub_wire_error_parse(msg->payload, msg->payload_len, &err) == PHUB_DROP_OK)
			LG_LOG(ERR, "rank %u: the PBox refused the JOIN: %s: %.*s", w->rank,
					phub_wire_error_name(err.code), (int)err.msg_len, err.text);
		return -EPROTO;
	}
	if (msg->opcode == PHUB_WIRE_OP_JOIN_ACK && !w->joined) {
		struct phub_wire_join_ack_seg seg;

		if (phub_wire_join_ack_parse(msg->payload, msg->payload_len, &seg) != PHUB_DROP_OK)
			return 0;
		if (lg->opt.auth && (!(msg->flags & PHUB_WIRE_F_AUTH) ||
				!phub_auth_initiator_answer(w->auth_join, d, msg->hdr_len,
					msg->payload, msg->payload_len))) {
			lg->stats.auth_failed++;
			return 0;
		}
		if (phub_wire_join_ack_merge_add(&w->ack_merge, msg, &seg) == 1) {
			w->joined = true;
			w->token = msg->session_token;
			w->job_id = msg->job_id;
			w->n_endpoints = w->ack_merge.endpoint_count;
			if (lg->opt.auth)
				return lanes_start(w);
		}
	}
	return 0;
}

/* Every worker JOINs; JOIN again every JOIN_RESEND_MS for those without a whole JOIN_ACK. */
static int
join_all(struct lg *lg)
{
	struct phub_wire_join_params p;
	struct phub_wire_key *keys;
	uint64_t start = rte_rdtsc(), next_send = start;
	uint64_t deadline = start + (uint64_t)(JOIN_TIMEOUT_S * (double)lg->tsc_hz);
	uint16_t joined = 0;
	uint8_t *buf;
	int rc = 0;

	keys = calloc(lg->opt.keys, sizeof(*keys));
	buf = malloc(PHUB_WIRE_MAX_DATAGRAM);
	if (keys == NULL || buf == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t k = 0; k < lg->opt.keys; k++) {
		keys[k].key_id = k;
		keys[k].elem_count = lg->opt.key_elems;
	}
	join_params(lg, keys, &p);
	if (lg->opt.auth) {
		uint8_t psk[PHUB_AUTH_KEY_LEN];

		/* The run's job name and the nonce: libphub's PSK (client_auth.c). */
		phub_auth_psk(psk, p.join.name, p.join.nonce);
		for (uint16_t i = 0; i < lg->n_workers; i++) {
			phub_auth_initiator_init(lg->workers[i].auth_join, psk);
			phub_auth_initiator_start(lg->workers[i].auth_join);
		}
		phub_auth_wipe(psk, sizeof(psk));
	}
	while (joined < lg->n_workers) {
		struct rte_mbuf *pkts[LG_BURST];
		uint16_t n;

		if (lg_quit || rte_rdtsc() > deadline) {
			LG_LOG(ERR, "%u of %u workers joined in %.0f s: is the PBox at %u.%u.%u.%u "
					"port %u up?", joined, lg->n_workers, JOIN_TIMEOUT_S,
					lg->opt.pbox_ipv4 >> 24, (lg->opt.pbox_ipv4 >> 16) & 0xff,
					(lg->opt.pbox_ipv4 >> 8) & 0xff, lg->opt.pbox_ipv4 & 0xff,
					lg->opt.base_port);
			rc = -ETIMEDOUT;
			goto out;
		}
		if (rte_rdtsc() >= next_send) {
			for (uint16_t i = 0; i < lg->n_workers; i++) {
				if (lg->workers[i].joined)
					continue;
				p.flags = next_send == start ? 0 : PHUB_WIRE_F_RETRANSMIT;
				rc = join_send(lg, &lg->workers[i], &p, buf);
				if (rc != 0) {
					LG_LOG(ERR, "cannot send JOIN: %s", strerror(-rc));
					goto out;
				}
			}
			next_send = rte_rdtsc() + ms_to_tsc(lg, JOIN_RESEND_MS);
		}
		n = rte_eth_rx_burst(lg->opt.port_id, 0, pkts, LG_BURST);
		for (uint16_t i = 0; i < n; i++) {
			struct phub_wire_msg msg;
			struct lg_worker *w;
			const uint8_t *d;
			uint32_t dst_ip;
			uint16_t dst_udp, len;

			lg->stats.rx_pkts++;
			lg->stats.rx_bytes += pkts[i]->pkt_len;
			d = lg_frame_udp_payload(pkts[i], &dst_ip, &dst_udp, NULL, &len);
			w = d != NULL ? worker_of(lg, dst_ip, dst_udp) : NULL;
			if (w != NULL && phub_wire_parse(d, len, &msg) == PHUB_DROP_OK) {
				bool was = w->joined;

				if (rc == 0)
					rc = join_rx(lg, w, d, &msg);
				joined = (uint16_t)(joined + (!was && w->joined));
			} else {
				lg->stats.other++;
			}
			rte_pktmbuf_free(pkts[i]);
		}
		if (rc != 0)
			goto out;
	}
out:
	free(keys);
	free(buf);
	return rc;
}

/* The model as every worker cuts it, from the first worker's JOIN_ACK. */
static int
layout_build(struct lg *lg)
{
	const struct phub_wire_join_ack_merge *a = &lg->workers[0].ack_merge;
	struct phub_layout_params lp;
	struct phub_layout_key *keys;
	uint32_t si = 0;
	int rc = 0;

	for (uint16_t i = 1; i < lg->n_workers; i++) {
		const struct phub_wire_join_ack_merge *b = &lg->workers[i].ack_merge;

		if (b->ack.job_id != a->ack.job_id || b->ack.iteration != a->ack.iteration ||
		    b->ack.seg_elems != a->ack.seg_elems || b->total_chunks != a->total_chunks) {
			LG_LOG(ERR, "rank %u got another job or geometry than rank 0", i);
			return -EPROTO;
		}
	}
	keys = calloc(lg->opt.keys, sizeof(*keys));
	if (keys == NULL)
		return -ENOMEM;
	for (uint32_t k = 0; k < lg->opt.keys; k++) {
		keys[k].key_id = k;
		keys[k].n_elems = lg->opt.key_elems;
	}
	memset(&lp, 0, sizeof(lp));
	lp.keys = keys;
	lp.n_keys = lg->opt.keys;
	lp.elem_size = sizeof(float);
	lp.chunk_bytes = a->ack.chunk_bytes;
	lp.segment_elems = a->ack.seg_elems;
	lg->layout = phub_layout_create(&lp);
	free(keys);
	if (lg->layout == NULL)
		return -errno;
	lg->n_chunks = phub_layout_chunk_count(lg->layout);
	lg->n_segments = (uint32_t)phub_layout_segment_count(lg->layout);
	lg->seg_elems = a->ack.seg_elems;
	lg->iteration = a->ack.iteration;
	if (lg->n_chunks != a->total_chunks) {
		LG_LOG(ERR, "the PBox cut %u chunks, this layout %u: the two disagree",
				a->total_chunks, lg->n_chunks);
		return -EPROTO;
	}
	if ((size_t)lg->seg_elems * sizeof(float) > rte_pktmbuf_tailroom(lg->payload) +
	    lg->payload->data_len) {
		LG_LOG(ERR, "segments of %u elements do not fit this generator's mbufs (--mtu)",
				lg->seg_elems);
		return -ENOSPC;
	}
	lg->segs = calloc(lg->n_segments, sizeof(*lg->segs));
	lg->chunk_first_seg = calloc(lg->n_chunks + 1, sizeof(*lg->chunk_first_seg));
	if (lg->segs == NULL || lg->chunk_first_seg == NULL)
		return -ENOMEM;
	for (uint32_t c = 0; c < lg->n_chunks; c++) {
		struct phub_layout_chunk ci;
		const struct phub_wire_endpoint *ep;

		phub_layout_chunk_get(lg->layout, c, &ci);
		ep = &a->endpoints[a->chunk_endpoints[c]];
		if (ep->ipv4 != 0 && ep->ipv4 != lg->opt.pbox_ipv4) {
			LG_LOG(ERR, "chunk %u is served at another address than --pbox-ip: this "
					"generator sends to one address", c);
			rc = -ENOTSUP;
		}
		lg->chunk_first_seg[c] = si;
		for (uint32_t s = 0; s < ci.n_segments; s++, si++) {
			struct phub_layout_segment ls;
			struct lg_segment *seg = &lg->segs[si];

			phub_layout_segment_get(lg->layout, c, s, &ls);
			seg->chunk_id = c;
			seg->elem_offset = ls.elem_offset;
			seg->elem_count = ls.n_elems;
			seg->seg_index = (uint16_t)s;
			seg->seg_count = (uint16_t)ci.n_segments;
			seg->dst_udp = ep->udp_port;
			seg->lane = (uint16_t)(1 + a->chunk_endpoints[c]);
			seg->key = ci.key_index;
			/* P3: the first layer is needed first in the next forward pass. */
			seg->priority = (uint8_t)RTE_MIN((uint32_t)lg->opt.priority +
					(lg->opt.p3 ? ci.key_index : 0), (uint32_t)UINT8_MAX);
			seg->payload_sum = rte_raw_cksum(rte_pktmbuf_mtod(lg->payload, void *),
					(size_t)ls.n_elems * sizeof(float));
		}
	}
	lg->chunk_first_seg[lg->n_chunks] = si;
	if (lg->opt.p3) {
		uint32_t pos = 0;

		lg->n_keys = lg->opt.keys;
		lg->push_order = calloc(lg->n_segments, sizeof(*lg->push_order));
		lg->key_left = calloc(lg->n_keys, sizeof(*lg->key_left));
		if (lg->key_done_us == NULL)
			lg->key_done_us = calloc((size_t)lg->n_keys * LG_P3_MAX_ITERS,
					sizeof(*lg->key_done_us));
		if (lg->push_order == NULL || lg->key_left == NULL || lg->key_done_us == NULL)
			return -ENOMEM;
		/* Backprop's order: the last key's segments first. */
		for (uint32_t k = lg->n_keys; k-- > 0;)
			for (uint32_t s = 0; s < lg->n_segments; s++)
				if (lg->segs[s].key == k)
					lg->push_order[pos++] = s;
		if (pos != lg->n_segments)
			return -EINVAL;
	}
	for (uint16_t i = 0; i < lg->n_workers && rc == 0; i++) {
		struct lg_worker *w = &lg->workers[i];

		w->state = calloc(lg->n_segments, sizeof(*w->state));
		w->sent_tsc = calloc(lg->n_segments, sizeof(*w->sent_tsc));
		w->tries = calloc(lg->n_segments, sizeof(*w->tries));
		w->ack_hi = calloc(RTE_MAX(w->n_endpoints, 1), sizeof(*w->ack_hi));
		w->probe_tsc = 0;
		if (w->state == NULL || w->sent_tsc == NULL || w->tries == NULL ||
		    w->ack_hi == NULL)
			rc = -ENOMEM;
	}
	return rc;
}

/* The transmit stamp of TSC t, as send_segment() puts it in aux: microseconds, wrapping. */
static inline uint32_t
stamp_of(const struct lg *lg, uint64_t t)
{
	return (uint32_t)(t / (lg->tsc_hz / 1000000));
}

/* Whether stamp a was taken after stamp b (serial-number order: the clock wraps in 71 min). */
static inline bool
stamp_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

/* Send PUSH (or PULL when pull is set) of segment si from worker w for the current iteration. */
static int
send_segment(struct lg *lg, struct lg_worker *w, uint32_t si, bool pull, bool again)
{
	const struct lg_segment *s = &lg->segs[si];
	struct phub_wire_msg hdr;
	struct rte_mbuf *m;
	uint64_t now = rte_rdtsc();

	phub_wire_msg_init(&hdr, pull ? PHUB_WIRE_OP_PULL : PHUB_WIRE_OP_PUSH);
	hdr.job_id = w->job_id;
	hdr.session_token = w->token;
	hdr.worker_rank = w->rank;
	hdr.chunk_id = s->chunk_id;
	hdr.iteration = lg->iteration;
	hdr.elem_offset = s->elem_offset;
	hdr.elem_count = s->elem_count;
	hdr.seg_index = s->seg_index;
	hdr.seg_count = s->seg_count;
	hdr.priority = s->priority;
	/* The transmit stamp, in microseconds like the worker library's. */
	hdr.aux = stamp_of(lg, now);
	hdr.flags = (uint8_t)(s->seg_index + 1 == s->seg_count ? PHUB_WIRE_F_LAST : 0);
	if (again)
		hdr.flags |= PHUB_WIRE_F_RETRANSMIT;
	if (lg->opt.auth)
		hdr.flags |= PHUB_WIRE_F_AUTH;
	if (!pull) {
		hdr.dtype = PHUB_DTYPE_FP32;
		hdr.payload_len = (uint16_t)(s->elem_count * sizeof(float));
		hdr.payload = rte_pktmbuf_mtod(lg->payload, const uint8_t *);
	}
	m = lg_frame_push(lg, w, s, &hdr);
	if (unlikely(m == NULL))
		return -ENOBUFS;
	lg_tx(lg, m);
	w->sent_tsc[si] = now;
	if (pull) {
		lg->stats.pulls++;
	} else if (again) {
		lg->stats.retransmits++;
	} else {
		lg->stats.pushes++;
		lg->stats.push_bytes += hdr.payload_len;
	}
	return 0;
}

/*
 * A round trip from the stamp an answer echoes (the PUSH's or PULL's aux, send_segment()): it
 * names the very transmission answered, so a retransmitted segment's answer measures its own
 * round trip (no Karn ambiguity: an answer to the first copy names the first copy's time).
 */
static void
rtt_sample(struct lg *lg, struct lg_worker *w, uint32_t si, uint32_t aux)
{
	uint64_t now = rte_rdtsc();
	uint64_t us_hz = lg->tsc_hz / 1000000;
	uint32_t us = (uint32_t)(now / us_hz) - aux;
	uint16_t ep = (uint16_t)(lg->segs[si].lane - 1);

	/* 0: no stamp (a MODEL that stands for no ACK); a minute: a stamp from before a wrap. */
	if (aux == 0 || us > 60000000u)
		return;
	if (ep < RTE_MAX(w->n_endpoints, 1) && stamp_after(aux, w->ack_hi[ep]))
		w->ack_hi[ep] = aux;
	phub_rtt_sample(&lg->rtt, (uint64_t)us * 1000u, now / us_hz * 1000u);
	lg->rto_tsc = phub_rtt_rto(&lg->rtt, (uint64_t)lg->opt.rto_min_us * 1000u,
			(uint64_t)lg->opt.rto_max_us * 1000u) / 1000u * us_hz;
	lg->stats.rtt_samples++;
}

/* One ACK of a PUSH (from an ACK, or an entry of an ACKV). */
static void
ack_rx(struct lg *lg, struct lg_worker *w, uint32_t chunk_id, uint16_t seg_index,
		uint32_t iteration, uint32_t aux)
{
	uint32_t si;
	uint8_t *st;

	if (chunk_id >= lg->n_chunks || iteration != lg->iteration ||
	    seg_index >= lg->chunk_first_seg[chunk_id + 1] - lg->chunk_first_seg[chunk_id]) {
		lg->stats.stale++;
		return;
	}
	si = lg->chunk_first_seg[chunk_id] + seg_index;
	st = &w->state[si];
	lg->stats.acks++;
	rtt_sample(lg, w, si, aux);
	if (*st == LG_SEG_PUSHED) {
		*st = LG_SEG_ACKED;
		w->inflight--;
		w->sent_tsc[si] = rte_rdtsc();
	}
}

/* An ACKV: each entry as an ACK. */
static void
ackv_rx(struct lg *lg, struct lg_worker *w, const struct phub_wire_msg *msg)
{
	unsigned int n;

	if (msg->job_id != w->job_id ||
	    phub_wire_ackv_parse(msg->payload, msg->payload_len, &n) != PHUB_DROP_OK) {
		lg->stats.stale++;
		return;
	}
	lg->stats.ackv++;
	for (unsigned int i = 0; i < n; i++) {
		struct phub_wire_ackv_entry e;

		phub_wire_ackv_get(msg->payload, i, &e);
		ack_rx(lg, w, e.chunk_id, e.seg_index, e.iteration, e.aux);
	}
}

/*
 * --auth: an answer's MAC and number on the lane of the port it came from, before anything
 * reads it, as libphub checks them (client_auth.c).
 */
static bool
answer_authentic(struct lg *lg, struct lg_worker *w, uint16_t src_udp, const uint8_t *d,
		const struct phub_wire_msg *msg)
{
	uint16_t lane = 0;

	if (!(msg->flags & PHUB_WIRE_F_AUTH))
		return false;
	if (src_udp != lg->opt.base_port) {
		while (lane < w->n_endpoints && w->endpoints[lane].udp_port != src_udp)
			lane++;
		lane++;
	}
	return lane < w->n_lanes && phub_auth_lane_open(&w->lanes[lane], lane, d, msg->hdr_len,
			msg->payload, msg->payload_len);
}

/* An ACK, ACKV or MODEL for one of our workers. */
static void
answer_rx(struct lg *lg, struct lg_worker *w, const struct phub_wire_msg *msg)
{
	uint32_t si;
	uint8_t *st;

	if (msg->opcode == PHUB_WIRE_OP_ERROR) {
		lg->stats.errors++;
		return;
	}
	if (msg->opcode == PHUB_WIRE_OP_ACKV) {
		ackv_rx(lg, w, msg);
		return;
	}
	if (msg->opcode != PHUB_WIRE_OP_ACK && msg->opcode != PHUB_WIRE_OP_MODEL) {
		lg->stats.other++;
		return;
	}
	if (msg->flags & PHUB_WIRE_F_REPLAY)
		lg->stats.replays++;
	if (msg->job_id != w->job_id || msg->chunk_id >= lg->n_chunks ||
	    msg->iteration != lg->iteration ||
	    msg->seg_index >= lg->chunk_first_seg[msg->chunk_id + 1] -
	    lg->chunk_first_seg[msg->chunk_id]) {
		lg->stats.stale++;
		return;
	}
	si = lg->chunk_first_seg[msg->chunk_id] + msg->seg_index;
	st = &w->state[si];
	if (msg->opcode == PHUB_WIRE_OP_ACK) {
		ack_rx(lg, w, msg->chunk_id, msg->seg_index, msg->iteration, msg->aux);
		return;
	}
	/* A MODEL's aux: the stamp of the PUSH it acknowledges, or of the PULL it answers. */
	rtt_sample(lg, w, si, msg->aux);
	if (*st == LG_SEG_DONE || *st == LG_SEG_IDLE) {
		lg->stats.stale++;
		return;
	}
	lg->stats.models++;
	lg->stats.model_bytes += msg->payload_len;
	if (*st == LG_SEG_PUSHED)
		w->inflight--;
	*st = LG_SEG_DONE;
	w->done++;
	if (lg->key_left != NULL && --lg->key_left[lg->segs[si].key] == 0 && lg->measuring &&
	    lg->n_key_iters < LG_P3_MAX_ITERS)
		lg->key_done_us[(size_t)lg->segs[si].key * LG_P3_MAX_ITERS + lg->n_key_iters] =
			(uint32_t)((rte_rdtsc() - lg->iter_start_tsc) * 1000000 / lg->tsc_hz);
}

/* Frames for the workers of lg's job or of the job beside it (--bulk-workers). */
static void
rx_poll(struct lg *lg)
{
	struct rte_mbuf *pkts[LG_BURST];
	uint16_t n;

	n = rte_eth_rx_burst(lg->opt.port_id, 0, pkts, LG_BURST);
	/*
	 * Every answer's headers (two cache lines, written by the server's CPU) asked for at
	 * once: one frame ahead, the generator waited on each in turn (a fifth of its time at
	 * 1 KB in a zero-copy client).
	 */
	for (uint16_t i = 0; i < n; i++) {
		rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void *));
		rte_prefetch0(rte_pktmbuf_mtod_offset(pkts[i], char *, RTE_CACHE_LINE_SIZE));
	}
	for (uint16_t i = 0; i < n; i++) {
		struct phub_wire_msg msg;
		struct lg_worker *w;
		struct lg *job;
		const uint8_t *d;
		uint32_t dst_ip;
		uint16_t dst_udp, src_udp, len;

		lg->stats.rx_pkts++;
		lg->stats.rx_bytes += pkts[i]->pkt_len;
		d = lg_frame_udp_payload(pkts[i], &dst_ip, &dst_udp, &src_udp, &len);
		job = lg;
		w = d != NULL ? worker_of(lg, dst_ip, dst_udp) : NULL;
		if (w == NULL && d != NULL && lg->bulk != NULL) {
			job = lg->bulk;
			w = worker_of(job, dst_ip, dst_udp);
		}
		if (w != NULL && phub_wire_parse(d, len, &msg) == PHUB_DROP_OK) {
			if (job->opt.auth && !answer_authentic(job, w, src_udp, d, &msg))
				job->stats.auth_failed++;
			else
				answer_rx(job, w, &msg);
		} else
			lg->stats.other++;
	}
	rte_pktmbuf_free_bulk(pkts, n);
}

/*
 * Fill the window: segment-major over all workers, so that every worker pushes segment s close
 * together and the PBox completes segments (and sends MODEL) as the iteration goes, as real
 * workers sending the same layer would.
 */
static void
push_some(struct lg *lg, uint64_t *cursor)
{
	uint64_t end = (uint64_t)lg->n_segments * lg->n_workers;

	while (*cursor < end && lg->n_txq < LG_BURST) {
		struct lg_worker *w = &lg->workers[*cursor % lg->n_workers];
		uint32_t si = (uint32_t)(*cursor / lg->n_workers);

		if (lg->push_order != NULL)
			si = lg->push_order[si];

		if (w->inflight >= lg->opt.window)
			break;
		if (send_segment(lg, w, si, false, false) != 0)
			break;
		w->state[si] = LG_SEG_PUSHED;
		w->inflight++;
		w->next = si + 1;
		(*cursor)++;
	}
}

/*
 * Recovery, as libphub's (client_node.c, timer_fire): a PUSH without ACK after its RTO (doubled
 * with each time it was sent again) was lost if a PUSH sent after it to the same endpoint has
 * been answered; if nothing newer was answered either, the PBox or the path is stalled (its
 * lcore descheduled on a shared CPU) and sending the whole window again would only queue twice
 * the work behind the stall: one segment per RTO and worker goes as a probe, the others wait.
 * An ACK without MODEL is PULLed after MODEL_WAIT_RTOS RTOs, since the other workers' PUSHes
 * legitimately delay the MODEL (docs/protocol.md, section 9).
 */
static void
retransmit_due(struct lg *lg, uint64_t now, uint64_t rto)
{
	uint64_t rto_max = lg->tsc_hz / 1000000 * lg->opt.rto_max_us;

	for (uint16_t i = 0; i < lg->n_workers; i++) {
		struct lg_worker *w = &lg->workers[i];

		/* --p3 pushes out of index order: every segment may have been sent. */
		uint32_t end = lg->push_order != NULL ? lg->n_segments : w->next;

		for (uint32_t si = 0; si < end && lg->n_txq < LG_BURST; si++) {
			uint8_t st = w->state[si];

			if (st == LG_SEG_PUSHED) {
				uint64_t due = rto << RTE_MIN(w->tries[si], 16);
				bool lost;

				if (now - w->sent_tsc[si] <= RTE_MIN(due, rto_max))
					continue;
				lost = stamp_after(w->ack_hi[lg->segs[si].lane - 1],
						stamp_of(lg, w->sent_tsc[si]));
				if (!lost && now - w->probe_tsc < rto)
					continue;
				if (!lost)
					w->probe_tsc = now;
				if (send_segment(lg, w, si, false, true) == 0 &&
				    w->tries[si] < UINT8_MAX)
					w->tries[si]++;
			} else if (st == LG_SEG_ACKED &&
				 now - w->sent_tsc[si] > MODEL_WAIT_RTOS * rto) {
				send_segment(lg, w, si, true, true);
			}
		}
	}
}

/* Where each worker stands in the current iteration, for a run that had to be stopped. */
static void
log_progress(const struct lg *lg)
{
	for (uint16_t i = 0; i < lg->n_workers; i++) {
		const struct lg_worker *w = &lg->workers[i];
		uint32_t n[LG_SEG_DONE + 1] = { 0 };

		for (uint32_t si = 0; si < lg->n_segments; si++)
			n[w->state[si]]++;
		LG_LOG(NOTICE, "iteration %u, rank %u: %u segments not sent, %u pushed, %u acked, "
				"%u done", lg->iteration, w->rank, n[LG_SEG_IDLE], n[LG_SEG_PUSHED],
				n[LG_SEG_ACKED], n[LG_SEG_DONE]);
	}
	LG_LOG(NOTICE, "sent %" PRIu64 " pushes, %" PRIu64 " retransmits, %" PRIu64 " pulls; got %"
			PRIu64 " ACK, %" PRIu64 " MODEL, %" PRIu64 " stale, %" PRIu64 " ERROR, %"
			PRIu64 " other", lg->stats.pushes, lg->stats.retransmits, lg->stats.pulls,
			lg->stats.acks, lg->stats.models, lg->stats.stale, lg->stats.errors,
			lg->stats.other);
}

static bool
iteration_done(const struct lg *lg)
{
	for (uint16_t i = 0; i < lg->n_workers; i++)
		if (lg->workers[i].done < lg->n_segments)
			return false;
	return true;
}

/* A new iteration: nothing sent, nothing done, the clock of its per-key times started. */
static void
iteration_begin(struct lg *lg)
{
	for (uint16_t i = 0; i < lg->n_workers; i++) {
		struct lg_worker *w = &lg->workers[i];

		memset(w->state, LG_SEG_IDLE, lg->n_segments);
		memset(w->tries, 0, lg->n_segments);
		w->inflight = 0;
		w->done = 0;
		w->next = 0;
	}
	if (lg->key_left != NULL) {
		memset(lg->key_left, 0, lg->n_keys * sizeof(*lg->key_left));
		for (uint32_t s = 0; s < lg->n_segments; s++)
			lg->key_left[lg->segs[s].key] += lg->n_workers;
	}
	lg->push_cursor = 0;
	lg->iter_start_tsc = rte_rdtsc();
	lg->next_scan = lg->iter_start_tsc + lg->rto_tsc / 4;
}

/* Fill the window, send; every quarter RTO, what is due again. True when it scanned. */
static bool
iteration_work(struct lg *lg, uint64_t now)
{
	push_some(lg, &lg->push_cursor);
	lg_tx_flush(lg);
	if (now < lg->next_scan)
		return false;
	retransmit_due(lg, now, lg->rto_tsc);
	lg_tx_flush(lg);
	lg->next_scan = now + lg->rto_tsc / 4;
	return true;
}

static int record_iteration(struct lg *lg, uint64_t ns);

/*
 * The job beside this one (--bulk-workers) runs without pause: its iteration ends, the next
 * begins. Its iterations that began while this job was measuring are its measured ones.
 */
static void
bulk_work(struct lg *lg, uint64_t now)
{
	struct lg *b = lg->bulk;

	if (iteration_done(b)) {
		if (b->measuring) {
			if (b->n_key_iters < LG_P3_MAX_ITERS)
				b->n_key_iters++;
			b->stats.exchanges++;
			record_iteration(b, (now - b->iter_start_tsc) * 1000000000ull / b->tsc_hz);
		}
		b->iteration++;
		b->measuring = lg->measuring;
		iteration_begin(b);
	}
	iteration_work(b, now);
}

/* One whole-model iteration; false when stopped (time, signal) before it completed. */
static bool
run_iteration(struct lg *lg, uint64_t deadline)
{
	iteration_begin(lg);
	while (!iteration_done(lg)) {
		uint64_t start = rte_rdtsc(), now;
		uint64_t rx = lg->stats.rx_pkts, tx = lg->stats.tx_pkts;
		bool scanned;

		rx_poll(lg);
		now = rte_rdtsc();
		if (lg->bulk != NULL)
			bulk_work(lg, now);
		scanned = iteration_work(lg, now);
		if (lg->stats.rx_pkts != rx || lg->stats.tx_pkts != tx)
			lg->stats.busy_tsc += rte_rdtsc() - start;
		if (scanned && (lg_quit || (deadline != 0 && now >= deadline)))
			return false;
	}
	return true;
}

static void
leave_all(struct lg *lg)
{
	uint64_t deadline = rte_rdtsc() + ms_to_tsc(lg, LEAVE_WAIT_MS);
	uint8_t buf[PHUB_WIRE_HDR_LEN + PHUB_WIRE_AUTH_TRAILER_LEN];

	for (uint16_t i = 0; i < lg->n_workers; i++) {
		struct lg_worker *w = &lg->workers[i];
		struct phub_wire_msg msg;
		int len;

		if (!w->joined)
			continue;
		phub_wire_msg_init(&msg, PHUB_WIRE_OP_LEAVE);
		msg.job_id = w->job_id;
		msg.session_token = w->token;
		msg.worker_rank = w->rank;
		msg.iteration = lg->iteration - 1;
		if (lg->opt.auth)
			msg.flags |= PHUB_WIRE_F_AUTH;
		len = phub_wire_encode(buf, sizeof(buf), &msg);
		if (len > 0 && lg->opt.auth &&
		    (w->n_lanes == 0 || !phub_auth_lane_seal(&w->lanes[0], 0, buf, (size_t)len,
				NULL, 0)))
			len = -EINVAL;
		if (len > 0)
			lg_frame_control(lg, w, buf, (uint16_t)len);
	}
	/* Drain what is still coming (late MODELs, LEAVE_ACK) so the PBox's ring stays free. */
	while (rte_rdtsc() < deadline) {
		lg_tx_flush(lg);
		rx_poll(lg);
	}
}

static int
record_iteration(struct lg *lg, uint64_t ns)
{
	if (lg->n_iter_ns == lg->cap_iter_ns) {
		uint64_t cap = lg->cap_iter_ns == 0 ? 1024 : lg->cap_iter_ns * 2;
		uint64_t *p = realloc(lg->iter_ns, cap * sizeof(*p));

		if (p == NULL)
			return -ENOMEM;
		lg->iter_ns = p;
		lg->cap_iter_ns = cap;
	}
	lg->iter_ns[lg->n_iter_ns++] = ns;
	return 0;
}

/*
 * The job beside lg: JOIN, its layout and its warm-up iteration alone, then its first iteration
 * begun; lg's iterations keep it going from here (bulk_work).
 */
static int
bulk_start(struct lg *lg)
{
	struct lg *b = lg->bulk;
	int rc;

	b->pbox_mac = lg->pbox_mac;
	rc = join_all(b);
	if (rc == 0)
		rc = layout_build(b);
	if (rc != 0)
		return rc;
	LG_LOG(INFO, "%u workers joined job %u beside it, priority %u%s, window %u",
			b->n_workers, b->workers[0].job_id, b->opt.priority,
			b->opt.p3 ? " + key" : "", b->opt.window);
	if (!run_iteration(b, 0)) {
		log_progress(b);
		return lg_quit ? -EINTR : -ETIMEDOUT;
	}
	b->iteration++;
	b->measuring = false;
	iteration_begin(b);
	return 0;
}

/*
 * JOIN, one warm-up iteration (the initial-model round of a new job), then iterations until
 * --iterations or --duration. lg->stats then holds the counts of the measured part only: from
 * the start of the first counted iteration to the end of the last completed one.
 */
int
lg_session_run(struct lg *lg, struct lg_stats *measured, double *seconds)
{
	struct lg_stats base, at_end;
	uint64_t start, end, deadline = 0;
	int rc;

	rc = lg_resolve_pbox(lg, 3.0);
	if (rc != 0) {
		LG_LOG(WARNING, "no ARP reply from the PBox: sending to the broadcast address");
		memset(&lg->pbox_mac, 0xff, sizeof(lg->pbox_mac));
	}
	rc = join_all(lg);
	if (rc != 0)
		return rc;
	rc = layout_build(lg);
	if (rc != 0)
		return rc;
	LG_LOG(INFO, "%u workers joined job %u: %u chunks, %u segments of %u elements, "
			"starting at iteration %u", lg->n_workers, lg->workers[0].job_id,
			lg->n_chunks, lg->n_segments, lg->seg_elems, lg->iteration);
	if (lg->bulk != NULL) {
		rc = bulk_start(lg);
		if (rc != 0)
			goto leave;
	}

	/* Warm-up: the initial round (or the first resumed iteration) is not measured. */
	if (!run_iteration(lg, 0)) {
		log_progress(lg);
		rc = lg_quit ? -EINTR : -ETIMEDOUT;
		goto leave;
	}
	lg->iteration++;

	base = lg->stats;
	at_end = base;
	/* The job beside: its counters from here, over the same span as this job's. */
	if (lg->bulk != NULL)
		memset(&lg->bulk->stats, 0, sizeof(lg->bulk->stats));
	start = rte_rdtsc();
	end = start;
	if (lg->opt.iterations == 0)
		deadline = start + (uint64_t)(lg->opt.duration_s * (double)lg->tsc_hz);
	for (uint64_t k = 0; lg->opt.iterations == 0 || k < lg->opt.iterations; k++) {
		uint64_t t0 = rte_rdtsc();

		lg->measuring = true;
		if (!run_iteration(lg, deadline))
			break;
		if (lg->key_left != NULL && lg->n_key_iters < LG_P3_MAX_ITERS)
			lg->n_key_iters++;
		end = rte_rdtsc();
		lg->stats.exchanges++;
		record_iteration(lg, (end - t0) * 1000000000ull / lg->tsc_hz);
		at_end = lg->stats;
		lg->iteration++;
	}
	*seconds = (double)(end - start) / (double)lg->tsc_hz;
	/* The counts of the measured span: completed iterations only. */
	memset(measured, 0, sizeof(*measured));
	measured->tx_pkts = at_end.tx_pkts - base.tx_pkts;
	measured->tx_bytes = at_end.tx_bytes - base.tx_bytes;
	measured->rx_pkts = at_end.rx_pkts - base.rx_pkts;
	measured->rx_bytes = at_end.rx_bytes - base.rx_bytes;
	measured->pushes = at_end.pushes - base.pushes;
	measured->push_bytes = at_end.push_bytes - base.push_bytes;
	measured->retransmits = at_end.retransmits - base.retransmits;
	measured->pulls = at_end.pulls - base.pulls;
	measured->acks = at_end.acks - base.acks;
	measured->models = at_end.models - base.models;
	measured->model_bytes = at_end.model_bytes - base.model_bytes;
	measured->replays = at_end.replays - base.replays;
	measured->stale = at_end.stale - base.stale;
	measured->errors = at_end.errors - base.errors;
	measured->other = at_end.other - base.other;
	measured->auth_failed = at_end.auth_failed - base.auth_failed;
	measured->tx_full = at_end.tx_full - base.tx_full;
	measured->exchanges = at_end.exchanges - base.exchanges;
	measured->busy_tsc = at_end.busy_tsc - base.busy_tsc;
	measured->rtt_samples = at_end.rtt_samples - base.rtt_samples;
leave:
	if (lg->bulk != NULL)
		leave_all(lg->bulk);
	leave_all(lg);
	return rc;
}

/*
 * Worker i: MAC 02:00:00:00:T:(i+1) (T the job's tag, 1 for the first), address worker_ipv4 + i,
 * UDP port worker_udp + i.
 */
int
lg_workers_init(struct lg *lg, uint16_t max_workers)
{
	uint32_t min_chunk = lg->opt.chunk_bytes != 0 && lg->opt.chunk_bytes < 4096 ?
		lg->opt.chunk_bytes : 4096;
	/* The most chunks the PBox can cut the layout into: its smallest chunk is 4 KB. */
	uint64_t chunks_cap = (uint64_t)lg->opt.keys *
		((uint64_t)lg->opt.key_elems * sizeof(float) / min_chunk + 1);

	if (chunks_cap > PHUB_LAYOUT_MAX_CHUNKS)
		chunks_cap = PHUB_LAYOUT_MAX_CHUNKS;
	if (lg->mac_tag == 0)
		lg->mac_tag = 1;
	lg->chunks_cap = (uint32_t)chunks_cap;
	lg->max_workers = max_workers;
	lg->n_workers = max_workers;
	lg->workers = calloc(max_workers, sizeof(*lg->workers));
	if (lg->workers == NULL)
		return -ENOMEM;
	for (uint16_t i = 0; i < max_workers; i++) {
		struct lg_worker *w = &lg->workers[i];

		w->mac = (struct rte_ether_addr){ { 0x02, 0, 0, 0, lg->mac_tag, (uint8_t)(i + 1) } };
		w->ipv4 = lg->opt.worker_ipv4 + i;
		w->udp = (uint16_t)(lg->opt.worker_udp + i);
		w->rank = i;
		if (lg->opt.blast)
			continue;
		if (lg->opt.auth) {
			w->auth_join = calloc(1, sizeof(*w->auth_join));
			if (w->auth_join == NULL)
				return -ENOMEM;
		}
		w->endpoint_of_chunk = calloc(chunks_cap, sizeof(*w->endpoint_of_chunk));
		if (w->endpoint_of_chunk == NULL)
			return -ENOMEM;
	}
	return 0;
}

/* What one run built (layout, per-segment state) goes; the identities and arrays stay. */
static void
run_state_free(struct lg *lg)
{
	for (uint16_t i = 0; lg->workers != NULL && i < lg->max_workers; i++) {
		lanes_end(&lg->workers[i]);
		free(lg->workers[i].state);
		free(lg->workers[i].sent_tsc);
		free(lg->workers[i].tries);
		free(lg->workers[i].ack_hi);
		lg->workers[i].state = NULL;
		lg->workers[i].sent_tsc = NULL;
		lg->workers[i].tries = NULL;
		lg->workers[i].ack_hi = NULL;
	}
	free(lg->segs);
	free(lg->chunk_first_seg);
	free(lg->push_order);
	free(lg->key_left);
	lg->push_order = NULL;
	lg->key_left = NULL;
	phub_layout_free(lg->layout);
	lg->segs = NULL;
	lg->chunk_first_seg = NULL;
	lg->layout = NULL;
}

/*
 * Make ready for one run of n workers: a fresh session for each (not joined, no token) and
 * zero counters, so that every run of a process measures alone and the port stays connected
 * between runs (a memif server that sees its client go and come back may crash: DPDK 22.11).
 */
void
lg_run_reset(struct lg *lg, uint16_t n_workers, unsigned int run)
{
	run_state_free(lg);
	lg->n_workers = n_workers;
	lg->run = run;
	lg->iteration = 0;
	lg->n_segments = 0;
	lg->n_chunks = 0;
	lg->seg_elems = 0;
	lg->n_iter_ns = 0;
	lg->n_key_iters = 0;
	lg->measuring = false;
	memset(&lg->stats, 0, sizeof(lg->stats));
	/* A new job, a new path: no round trip known yet. */
	memset(&lg->rtt, 0, sizeof(lg->rtt));
	lg->rto_tsc = lg->tsc_hz / 1000000 * lg->opt.rto_us;
	for (uint16_t i = 0; i < lg->max_workers; i++) {
		struct lg_worker *w = &lg->workers[i];

		w->token = 0;
		w->job_id = 0;
		w->joined = false;
		w->inflight = 0;
		w->done = 0;
		w->next = 0;
		w->n_endpoints = 0;
		if (w->endpoint_of_chunk != NULL)
			phub_wire_join_ack_merge_init(&w->ack_merge, w->endpoints,
					LG_MAX_ENDPOINTS, w->endpoint_of_chunk, lg->chunks_cap);
	}
}

void
lg_workers_free(struct lg *lg)
{
	run_state_free(lg);
	for (uint16_t i = 0; lg->workers != NULL && i < lg->max_workers; i++) {
		free(lg->workers[i].endpoint_of_chunk);
		if (lg->workers[i].auth_join != NULL)
			phub_auth_initiator_wipe(lg->workers[i].auth_join);
		free(lg->workers[i].auth_join);
	}
	free(lg->workers);
	lg->workers = NULL;
	free(lg->iter_ns);
	lg->iter_ns = NULL;
	free(lg->key_done_us);
	lg->key_done_us = NULL;
}

/*
 * The job beside lg's (--bulk-workers): lg's port, pools and payload, its own workers at
 * addresses and UDP ports LG_MAX_WORKERS above lg's, its own window and priority, and a job
 * name of its own ("bulk-" before lg's, so that a long name truncated stays distinct).
 */
int
lg_bulk_init(struct lg *lg)
{
	struct lg *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return -ENOMEM;
	b->opt = lg->opt;
	b->opt.worker_ipv4 += LG_MAX_WORKERS;
	b->opt.worker_udp = (uint16_t)(b->opt.worker_udp + LG_MAX_WORKERS);
	b->opt.window = lg->opt.bulk_window;
	b->opt.priority = lg->opt.bulk_priority;
	b->opt.bulk_workers = 0;
	snprintf(b->opt.job, sizeof(b->opt.job), "bulk-%.40s", lg->opt.job);
	b->pool = lg->pool;
	b->hdr_pool = lg->hdr_pool;
	b->indirect_pool = lg->indirect_pool;
	b->payload = lg->payload;
	b->refs = lg->refs;
	b->port_mac = lg->port_mac;
	b->chained_tx = lg->chained_tx;
	b->tsc_hz = lg->tsc_hz;
	b->mac_tag = 2;
	lg->bulk = b;
	return lg_workers_init(b, lg->opt.bulk_workers);
}

void
lg_bulk_free(struct lg *lg)
{
	if (lg->bulk == NULL)
		return;
	rte_pktmbuf_free_bulk(lg->bulk->txq, lg->bulk->n_txq);
	lg_workers_free(lg->bulk);
	free(lg->bulk);
	lg->bulk = NULL;
}
