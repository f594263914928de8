/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The progress thread: the only user of the socket. It sends queued segments in priority order
 * under the window, takes ACK and MODEL, retransmits and pulls on timeouts, and completes tickets.
 */

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_priv.h"

enum {
	RX_BATCHES = 8,			/* recvmmsg calls per loop before sending again */
	TRIES_MAX = 20,			/* back-off exponent cap; rto_max caps the timeout */
	RTT_SAMPLE_MAX_US = 60000000,	/* an older stamp is from before a wrap: no sample */
	MODEL_WAIT_SHIFT = 2,		/* a MODEL waits on the slowest rank: 4 RTO */
	OVERTAKE_TRUST_MAX = 1024,	/* overtaken MODELs are taken as lost above half */
	/*
	 * Segments PULLed as overtaken whose MODEL has not come yet, at most, per session: the
	 * score learns a guess's outcome only when the MODEL comes, and until then every
	 * overtaken segment guessed at each back-off. A job across racks gets its MODELs in the
	 * ring's order, seconds late, a quarter of a ResNet-50 worker's segments overtaken:
	 * 73,000 PULLs a worker in 4 rounds, 279 of them answered from kept state. Losses the
	 * guesses prove still go 32 at a time, each answered within a round trip.
	 */
	OVERTAKE_GUESSES_MAX = 32,
};

/* An idle session says PING this often, so that the PBox knows it is alive (protocol §11). */
#define KEEPALIVE_NS UINT64_C(1000000000)
/*
 * Once the PBox has been silent for ping_every() while we wait on it, a PING goes this often.
 * After a PBox restart the ERROR that answers a PING is how a worker learns that its session is
 * gone (the data path drops a PUSH of an unknown session without a word). On a link that loses
 * bursts, and loses them frame by frame (a Gilbert-Elliott chain moves on each frame, so a link
 * that carries only a PING a second stays in its bad state for seconds), ten answers a second
 * apart were all lost one run in five: longer than the PBox waits for a rank (issue 9).
 */
#define PING_RETRY_NS UINT64_C(200000000)

/* ---- indexed heaps of segment ids, each entry with its own order ---- */

static inline uint32_t *
heap_pos(struct seg *s, bool timer)
{
	return timer ? &s->timer_pos : &s->send_pos;
}

static inline bool
heap_before(const struct seg_heap_ent *a, const struct seg_heap_ent *b)
{
	if (a->hi != b->hi)
		return a->hi < b->hi;
	return a->lo < b->lo;
}

static inline void
heap_set(struct phub *h, struct seg_heap *hp, uint32_t i, const struct seg_heap_ent *e,
		bool timer)
{
	hp->ents[i] = *e;
	*heap_pos(&h->segs[e->id], timer) = i + 1;
}

static void
heap_sift(struct phub *h, struct seg_heap *hp, uint32_t i, bool timer)
{
	struct seg_heap_ent e = hp->ents[i];

	while (i > 0) {
		uint32_t parent = (i - 1) / 2;

		if (!heap_before(&e, &hp->ents[parent]))
			break;
		heap_set(h, hp, i, &hp->ents[parent], timer);
		i = parent;
	}
	for (;;) {
		uint32_t child = 2 * i + 1;

		if (child >= hp->n)
			break;
		if (child + 1 < hp->n && heap_before(&hp->ents[child + 1], &hp->ents[child]))
			child++;
		if (!heap_before(&hp->ents[child], &e))
			break;
		heap_set(h, hp, i, &hp->ents[child], timer);
		i = child;
	}
	heap_set(h, hp, i, &e, timer);
}

/* The segment's order in the heap: (priority, queueing order), or its deadline. */
static inline struct seg_heap_ent
heap_ent(const struct phub *h, uint32_t id, bool timer)
{
	const struct seg *s = &h->segs[id];

	if (timer)
		return (struct seg_heap_ent){ .lo = s->deadline_ns, .hi = 0, .id = id };
	return (struct seg_heap_ent){ .lo = s->send_seq, .hi = s->send_prio, .id = id };
}

/* Insert, or move after the key changed. */
static void
heap_update(struct phub *h, struct seg_heap *hp, uint32_t id, bool timer)
{
	uint32_t pos = *heap_pos(&h->segs[id], timer);
	struct seg_heap_ent e = heap_ent(h, id, timer);

	if (pos == 0)
		pos = ++hp->n;
	heap_set(h, hp, pos - 1, &e, timer);
	heap_sift(h, hp, pos - 1, timer);
}

static void
heap_remove(struct phub *h, struct seg_heap *hp, uint32_t id, bool timer)
{
	uint32_t pos = *heap_pos(&h->segs[id], timer);
	struct seg_heap_ent last;

	if (pos == 0)
		return;
	*heap_pos(&h->segs[id], timer) = 0;
	last = hp->ents[--hp->n];
	if (pos - 1 == hp->n)
		return;
	heap_set(h, hp, pos - 1, &last, timer);
	heap_sift(h, hp, pos - 1, timer);
}

static inline struct seg *
heap_top(struct phub *h, const struct seg_heap *hp)
{
	return hp->n > 0 ? &h->segs[hp->ents[0].id] : NULL;
}

static inline uint32_t
seg_id(const struct phub *h, const struct seg *s)
{
	return (uint32_t)(s - h->segs);
}

/* ---- time ---- */

/* The transmit stamp in aux: microseconds since connect, never 0 (0 means "no stamp"). */
static uint32_t
stamp(const struct phub *h, uint64_t now)
{
	uint32_t us = (uint32_t)((now - h->start_ns) / 1000u);

	return us != 0 ? us : 1;
}

static void
rto_update(struct phub *h)
{
	h->rto_ns = phub_rtt_rto(&h->rtt, h->rto_min_ns, h->rto_max_ns);
	h->stats.srtt_us = (uint32_t)(h->rtt.srtt_ns / 1000u);
	h->stats.rttvar_us = (uint32_t)(h->rtt.rttvar_ns / 1000u);
	h->stats.rto_us = (uint32_t)(h->rto_ns / 1000u);
}

/*
 * RFC 6298 on the stamp an ACK (or a replayed MODEL) echoes: it names the very transmission
 * answered, so retransmitted segments give samples too (no Karn ambiguity).
 */
static void
rtt_sample(struct phub *h, uint32_t aux, uint64_t now)
{
	uint32_t us = stamp(h, now) - aux;

	if (aux == 0 || us > RTT_SAMPLE_MAX_US)
		return;
	phub_rtt_sample(&h->rtt, (uint64_t)us * 1000u, now);
	rto_update(h);
}

/* Whether stamp a was taken after stamp b (serial-number order: the clock wraps in 71 min). */
static inline bool
stamp_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

static uint64_t
backoff(const struct phub *h, unsigned int tries)
{
	uint64_t t = h->rto_ns << (tries < TRIES_MAX ? tries : TRIES_MAX);

	return t < h->rto_max_ns ? t : h->rto_max_ns;
}

/*
 * A MODEL that came after a later-pushed segment's MODEL is taken as lost only while that rule
 * proves right. It does while the ranks push in the same order (the PBox completes segments in
 * the order the last rank pushes them); it does not when they push in different orders (PyTorch
 * workers whose backward passes run out of step, P3 reordering their queues), and each wrong
 * guess is a PULL the PBox must ignore, thousands a step for a large model. The outcome is known
 * when the MODEL comes: answered from kept state (REPLAY) after our PULL, it was lost; in the
 * broadcast, it was not. While the rule is mostly wrong, overtaken segments wait like the others
 * and one probe per model wait finds what was really lost.
 */
static bool
overtake_trusted(const struct phub *h)
{
	return h->overtake_trust >= OVERTAKE_TRUST_MAX / 2;
}

static void
overtake_outcome(struct phub *h, bool was_lost)
{
	if (was_lost) {
		h->overtake_trust += (OVERTAKE_TRUST_MAX - h->overtake_trust) / 8;
	} else {
		h->overtake_trust -= h->overtake_trust / 8;
		h->stats.pulls_early++;
	}
}

static void
timer_arm(struct phub *h, struct seg *s, uint64_t deadline)
{
	s->deadline_ns = deadline;
	heap_update(h, &h->timer_heap, seg_id(h, s), true);
}

/*
 * ---- segments waiting for their MODEL ----
 *
 * A job across racks gets its MODELs seconds after the ACKs, and thousands of segments wait.
 * In the timer heap each would fire every model wait only to be armed again (a quarter of a
 * worker's own CPU at 3 racks). They wait instead in their endpoint's list, oldest push first:
 * the overtaken ones (an answer to a later push came) are its prefix, and the probe takes the
 * oldest head. A segment leaves the list for the timer heap when it is PULLed.
 */

static inline struct seg *
wait_seg(const struct phub *h, uint32_t link)
{
	return link != 0 ? &h->segs[link - 1] : NULL;
}

/* Into its endpoint's list by first_stamp: ACKs come nearly in push order, so from the tail. */
static void
model_wait_add(struct phub *h, struct seg *s, uint64_t deadline)
{
	struct ep_order *o = &h->ep_order[s->endpoint];
	uint32_t link = seg_id(h, s) + 1;
	struct seg *after = wait_seg(h, o->wait_tail);

	heap_remove(h, &h->timer_heap, link - 1, true);
	s->deadline_ns = deadline;
	s->model_wait = true;
	while (after != NULL && stamp_after(after->first_stamp, s->first_stamp))
		after = wait_seg(h, after->wait_prev);
	s->wait_prev = after != NULL ? seg_id(h, after) + 1 : 0;
	s->wait_next = after != NULL ? after->wait_next : o->wait_head;
	if (s->wait_next != 0)
		wait_seg(h, s->wait_next)->wait_prev = link;
	else
		o->wait_tail = link;
	if (after != NULL)
		after->wait_next = link;
	else
		o->wait_head = link;
}

static void
model_wait_remove(struct phub *h, struct seg *s)
{
	struct ep_order *o = &h->ep_order[s->endpoint];

	if (!s->model_wait)
		return;
	s->model_wait = false;
	if (s->wait_prev != 0)
		wait_seg(h, s->wait_prev)->wait_next = s->wait_next;
	else
		o->wait_head = s->wait_next;
	if (s->wait_next != 0)
		wait_seg(h, s->wait_next)->wait_prev = s->wait_prev;
	else
		o->wait_tail = s->wait_prev;
	s->wait_prev = 0;
	s->wait_next = 0;
}

/* ---- transmit ---- */

/* Queue one datagram: msg's header, written here, and payload_len bytes at payload. */
static void
tx_add(struct phub *h, const struct sockaddr_in *dst, struct phub_wire_msg *msg,
		const void *payload)
{
	struct tx_batch *tx = &h->tx;
	unsigned int i = tx->n;
	uint32_t crc = 0;
	int hdr_len;

	msg->flags |= h->tx_flags;
	if (h->auth)
		msg->flags |= PHUB_WIRE_F_AUTH;
	if (msg->seg_index + 1 == msg->seg_count)
		msg->flags |= PHUB_WIRE_F_LAST;
	if ((msg->flags & PHUB_WIRE_F_CSUM) && msg->payload_len != 0)
		crc = phub_wire_csum_payload(payload, msg->payload_len);
	hdr_len = phub_wire_hdr_encode(tx->hdr[i], sizeof(tx->hdr[i]), msg, crc);
	if (hdr_len < 0) {
		/* Only a bug of ours gets here; counting it beats sending garbage. */
		h->stats.tx_errors++;
		return;
	}
	/* The MAC and sequence number last, over the header as it goes and the payload. */
	if (h->auth && !client_auth_tx(h, dst, tx->hdr[i], (size_t)hdr_len, payload,
			msg->payload_len)) {
		h->stats.tx_errors++;
		return;
	}
	tx->dst[i] = *dst;
	tx->iov[i][0].iov_base = tx->hdr[i];
	tx->iov[i][0].iov_len = (size_t)hdr_len;
	tx->iov[i][1].iov_base = (void *)(uintptr_t)payload;
	tx->iov[i][1].iov_len = msg->payload_len;
	tx->iovlen[i] = msg->payload_len != 0 ? 2 : 1;
	if (++tx->n == CLIENT_BATCH)
		client_tx_flush(h);
}

static void
msg_for_seg(const struct phub *h, const struct seg *s, uint8_t opcode, struct phub_wire_msg *msg)
{
	phub_wire_msg_init(msg, opcode);
	msg->flags = 0;
	msg->job_id = h->job_id;
	msg->session_token = h->token;
	msg->worker_rank = h->rank;
	msg->chunk_id = s->chunk;
	msg->iteration = s->iter;
	msg->elem_offset = s->chunk_elem;
	msg->elem_count = s->n_elems;
	msg->seg_index = s->seg_index;
	msg->seg_count = s->seg_count;
}

static void
send_push(struct phub *h, struct seg *s, const struct op *op, uint64_t now, bool again)
{
	struct phub_wire_msg msg;
	const uint8_t *payload;

	msg_for_seg(h, s, PHUB_WIRE_OP_PUSH, &msg);
	msg.flags = again ? PHUB_WIRE_F_RETRANSMIT : 0;
	if (op->hyper) {
		msg.flags |= PHUB_WIRE_F_HYPER;
		msg.hyper_lr = op->hyper_lr;
		msg.hyper_weight_decay = op->hyper_weight_decay;
	}
	msg.dtype = h->dtype;
	msg.priority = op->wire_prio;
	msg.payload_len = (uint16_t)(s->n_elems * h->elem_size);
	msg.aux = stamp(h, now);
	s->tx_stamp = msg.aux;
	if (!again)
		s->first_stamp = msg.aux;
	payload = op->grad != NULL ?
		(const uint8_t *)op->grad + (size_t)s->key_elem * h->elem_size : h->zeros;
	tx_add(h, &h->endpoints[s->endpoint], &msg, payload);
}

static void
send_pull(struct phub *h, const struct seg *s, uint64_t now, bool again)
{
	struct phub_wire_msg msg;

	msg_for_seg(h, s, PHUB_WIRE_OP_PULL, &msg);
	msg.flags = again ? PHUB_WIRE_F_RETRANSMIT : 0;
	msg.aux = stamp(h, now);
	tx_add(h, &h->endpoints[s->endpoint], &msg, NULL);
}

static void
send_ping(struct phub *h, uint64_t now)
{
	struct phub_wire_msg msg;

	phub_wire_msg_init(&msg, PHUB_WIRE_OP_PING);
	msg.flags = 0;
	msg.job_id = h->job_id;
	msg.session_token = h->token;
	msg.worker_rank = h->rank;
	msg.aux = ++h->ping_seq;
	tx_add(h, &h->ctrl, &msg, NULL);
	h->last_ping_ns = now;
	h->stats.pings++;
}

/* ---- operations ---- */

static void
send_heap_add(struct phub *h, struct seg *s, const struct op *op)
{
	s->tries = 0;
	s->send_prio = op->prio;
	s->send_seq = h->send_seq++;
	heap_update(h, &h->send_heap, seg_id(h, s), false);
}

static void
seg_queue(struct phub *h, struct seg *s, const struct op *op)
{
	s->iter = op->iter;
	s->state = SEG_QUEUED;
	send_heap_add(h, s, op);
}

/* The head of the key's FIFO starts. The previous operation on the key has completed. */
static void
op_activate(struct phub *h, struct key *key)
{
	struct op *op = key->head;

	for (uint32_t i = 0; i < key->n_segs; i++) {
		struct seg *s = &h->segs[key->first_seg + i];

		if (op->type == OP_PULL) {
			/* Its broadcast went by unclaimed: ask for it again, in turn. */
			if (s->state == SEG_DONE) {
				s->iter = op->iter;
				s->state = SEG_ACKED;
				s->repull = true;
				h->n_waiting++;
				send_heap_add(h, s, op);
			}
		} else if (s->state == SEG_DONE) {
			seg_queue(h, s, op);
		} else {
			/* A push of ours that completed at its ACK: the PBox takes the next one
			 * only after this segment's MODEL, which will queue it. */
			s->next_pending = true;
		}
	}
}

static void
op_complete_if_done(struct phub *h, struct key *key)
{
	struct op *op = key->head;
	bool done;

	if (op == NULL)
		return;
	done = op->type == OP_PUSH ? op->n_acked == key->n_segs : op->n_models == key->n_segs;
	if (!done)
		return;
	key->head = op->next;
	if (key->head == NULL)
		key->tail = NULL;
	h->n_active--;
	/* What the application has seen of this key: a restarted PBox must not be behind it. */
	if (!key->done_any || phub_wire_iter_cmp(op->iter, key->done_iter) > 0)
		key->done_iter = op->iter;
	key->done_any = true;
	client_op_finish(h, op, 0);
	if (key->head != NULL)
		op_activate(h, key);
}

/* Take what the API submitted; true when the session is to stop. */
static bool
take_submissions(struct phub *h, uint64_t now)
{
	struct op *list;
	bool stop;

	pthread_mutex_lock(&h->lock);
	list = h->sub_head;
	h->sub_head = NULL;
	h->sub_tail = NULL;
	stop = h->stop || h->error != 0;
	h->stats.inflight_bytes = h->inflight_bytes;
	h->pub_stats = h->stats;
	pthread_mutex_unlock(&h->lock);

	/* Silence while idle is no sign of death: the clock starts with the work. */
	if (list != NULL && h->n_active == 0 && h->n_waiting == 0)
		h->last_heard_ns = now;
	while (list != NULL) {
		struct op *op = list;
		struct key *key = &h->keys[op->key];

		list = op->next;
		op->next = NULL;
		h->n_active++;
		if (key->tail != NULL) {
			key->tail->next = op;
			key->tail = op;
		} else {
			key->head = op;
			key->tail = op;
			op_activate(h, key);
		}
	}
	return stop;
}

/* ---- receive ---- */

/* The segment a reply names, when it is ours and matches the segment grid; else NULL. */
static struct seg *
seg_lookup(struct phub *h, const struct phub_wire_msg *msg)
{
	struct seg *s;

	if (msg->job_id != h->job_id || msg->session_token != h->token ||
	    msg->worker_rank != h->rank || msg->chunk_id >= h->n_chunks)
		return NULL;
	s = &h->segs[h->chunk_first_seg[msg->chunk_id]];
	if (msg->seg_count != s->seg_count || msg->seg_index >= s->seg_count)
		return NULL;
	s += msg->seg_index;
	if (msg->elem_offset != s->chunk_elem || msg->elem_count != s->n_elems)
		return NULL;
	return s;
}

/* The PUSH of s left the window: ACKed, or answered by its MODEL. */
static void
seg_acked(struct phub *h, struct seg *s)
{
	struct op *op = h->keys[s->key].head;

	h->inflight_bytes -= s->n_elems * h->elem_size;
	if (op != NULL && op->iter == s->iter && op->type != OP_PULL)
		op->n_acked++;
}

/*
 * An answer about s echoed transmission stamp aux (0: none): the newest its endpoint echoed is
 * what the loss detector compares the older sends with.
 */
static void
ack_order_note(struct phub *h, const struct seg *s, uint32_t aux)
{
	if (aux != 0 && stamp_after(aux, h->ep_order[s->endpoint].ack_hi))
		h->ep_order[s->endpoint].ack_hi = aux;
}

static void
rx_ack(struct phub *h, const struct phub_wire_msg *msg, uint64_t now)
{
	struct seg *s = seg_lookup(h, msg);

	if (s == NULL) {
		h->stats.rx_dropped++;
		return;
	}
	h->last_heard_ns = now;
	rtt_sample(h, msg->aux, now);
	ack_order_note(h, s, msg->aux);
	if (msg->iteration != s->iter || s->state != SEG_SENT) {
		/* A duplicate, or an ACK overtaken by the MODEL. */
		h->stats.rx_dropped++;
		return;
	}
	h->stats.acks++;
	if (msg->iteration == 0)
		h->stats.initial_acks++;
	seg_acked(h, s);
	s->state = SEG_ACKED;
	s->tries = 0;
	model_wait_add(h, s, now + backoff(h, MODEL_WAIT_SHIFT));
	op_complete_if_done(h, &h->keys[s->key]);
}

/*
 * An ACKV: each entry as an ACK of its PUSH, but one RTT sample, from the newest stamp: the
 * older ones also waited in the PBox for the burst's end, which is not the path's delay. The
 * loss detector wants only the newest stamp answered (ack_hi), which the entries give whatever
 * their order.
 */
static void
rx_ackv(struct phub *h, const struct phub_wire_msg *msg, uint64_t now)
{
	struct phub_wire_msg one = *msg;
	uint32_t newest = 0;
	unsigned int n;

	if (msg->job_id != h->job_id || msg->session_token != h->token ||
	    msg->worker_rank != h->rank ||
	    phub_wire_ackv_parse(msg->payload, msg->payload_len, &n) != PHUB_DROP_OK) {
		h->stats.rx_dropped++;
		return;
	}
	for (unsigned int i = 0; i < n; i++) {
		struct phub_wire_ackv_entry e;
		const struct seg *s;

		phub_wire_ackv_get(msg->payload, i, &e);
		if (e.aux != 0 && (newest == 0 || stamp_after(e.aux, newest)))
			newest = e.aux;
		/* The ACK this entry stands for, checked against the segment grid as one is. */
		if (e.chunk_id >= h->n_chunks) {
			h->stats.rx_dropped++;
			continue;
		}
		s = &h->segs[h->chunk_first_seg[e.chunk_id]];
		one.opcode = PHUB_WIRE_OP_ACK;
		one.chunk_id = e.chunk_id;
		one.iteration = e.iteration;
		one.seg_index = e.seg_index;
		one.seg_count = s->seg_count;
		if (e.seg_index < s->seg_count) {
			one.elem_offset = s[e.seg_index].chunk_elem;
			one.elem_count = s[e.seg_index].n_elems;
		}
		one.aux = 0;		/* no sample per entry: the one below */
		one.payload = NULL;
		one.payload_len = 0;
		rx_ack(h, &one, now);
		if (e.aux != 0) {
			const struct seg *acked = seg_lookup(h, &one);

			if (acked != NULL)
				ack_order_note(h, acked, e.aux);
		}
	}
	rtt_sample(h, newest, now);
}

static void
rx_model(struct phub *h, const struct phub_wire_msg *msg, uint64_t now)
{
	struct seg *s = seg_lookup(h, msg);
	struct key *key;
	struct op *op;

	if (s == NULL || msg->dtype != h->dtype) {
		h->stats.rx_dropped++;
		return;
	}
	h->last_heard_ns = now;
	rtt_sample(h, msg->aux, now);
	ack_order_note(h, s, msg->aux);
	if (msg->iteration != s->iter || (s->state != SEG_SENT && s->state != SEG_ACKED)) {
		h->stats.rx_dropped++;
		return;
	}
	h->stats.models++;
	if (s->pulled_overtaken) {
		overtake_outcome(h, (msg->flags & PHUB_WIRE_F_REPLAY) != 0);
		h->overtake_guesses--;
	}
	s->pulled_overtaken = false;
	if (!s->repull && stamp_after(s->first_stamp, h->ep_order[s->endpoint].model_hi))
		h->ep_order[s->endpoint].model_hi = s->first_stamp;
	if (s->charged)
		h->inflight_bytes -= s->n_elems * h->elem_size;
	s->charged = false;
	s->repull = false;
	/* An answer to an earlier PULL may overtake the one still queued. */
	heap_remove(h, &h->send_heap, seg_id(h, s), false);
	key = &h->keys[s->key];
	op = key->head;
	if (s->state == SEG_SENT)
		seg_acked(h, s);
	s->state = SEG_DONE;
	s->tries = 0;
	h->n_waiting--;
	heap_remove(h, &h->timer_heap, seg_id(h, s), true);
	model_wait_remove(h, s);
	if (op != NULL && op->iter == s->iter && op->type != OP_PUSH) {
		if (op->out != NULL)
			memcpy((uint8_t *)op->out + (size_t)s->key_elem * h->elem_size,
					msg->payload, msg->payload_len);
		op->n_models++;
		/* Iteration 0 is pushed by the initial round only; a PULL of it is not progress. */
		if (op->iter == 0 && op->type == OP_PUSHPULL)
			h->stats.initial_models++;
	}
	if (s->next_pending) {
		s->next_pending = false;
		seg_queue(h, s, op);
	}
	op_complete_if_done(h, key);
}

static void
rx_error(struct phub *h, const struct phub_wire_msg *msg)
{
	struct phub_wire_error_msg e;

	/* Only an ERROR about our session may end it. */
	if (msg->job_id != h->job_id || msg->session_token != h->token ||
	    phub_wire_error_parse(msg->payload, msg->payload_len, &e) != PHUB_DROP_OK) {
		h->stats.rx_dropped++;
		return;
	}
	/* The PBox has no such session: it restarted (or lost the job). JOIN again. */
	if (e.code == PHUB_WIRE_ERR_UNKNOWN_JOB) {
		h->rejoin = true;
		return;
	}
	client_fail(h, -EIO, "PBox %s ended the session of rank %u of job '%s': %s: %.*s",
			h->server_name, h->rank, h->job_name, phub_wire_error_name(e.code),
			(int)e.msg_len, e.text);
}

/*
 * WORLD: an elastic job removed a rank, or took one back. Changes are taken in order, each
 * answered (WORLD_ACK to the control port); one taken before is answered again (our answer was
 * lost), one past the next is left for the PBox to send again after the one before it. Whether
 * a change takes the rank out or back in follows from the changes before it.
 */
static void
rx_world(struct phub *h, const struct phub_wire_msg *msg)
{
	uint16_t change = PHUB_WIRE_WORLD_CHANGE(msg->aux);
	uint16_t who = PHUB_WIRE_WORLD_RANK(msg->aux);
	struct phub_wire_msg ack;

	if (msg->job_id != h->job_id || msg->session_token != h->token || change == 0 ||
	    change > h->stats.world_changes + 1 || who >= h->world_size) {
		h->stats.rx_dropped++;
		return;
	}
	if (change == h->stats.world_changes + 1) {
		bool out = h->removed_from[who] != UINT32_MAX;

		pthread_mutex_lock(&h->lock);
		if (out) {
			h->removed_from[who] = UINT32_MAX;
			h->world_live++;
		} else {
			h->removed_from[who] = msg->iteration;
			h->world_live--;
		}
		if (change <= CLIENT_MAX_CHANGES)
			h->changes[change - 1] = (struct phub_world_change){
				.rank = who, .joined = out, .iteration = msg->iteration,
			};
		h->stats.world_changes = change;
		h->stats.world_size = h->world_live;
		pthread_mutex_unlock(&h->lock);
	}
	phub_wire_msg_init(&ack, PHUB_WIRE_OP_WORLD_ACK);
	ack.flags = 0;
	ack.job_id = h->job_id;
	ack.session_token = h->token;
	ack.worker_rank = h->rank;
	ack.iteration = msg->iteration;
	ack.aux = msg->aux;
	tx_add(h, &h->ctrl, &ack, NULL);
}

static void
rx_one(struct phub *h, const struct sockaddr_in *src, const uint8_t *buf, size_t len,
		uint64_t now)
{
	struct phub_wire_msg msg;

	h->stats.rx_datagrams++;
	h->stats.rx_bytes += len;
	if (phub_wire_parse(buf, len, &msg) != PHUB_DROP_OK) {
		h->stats.rx_dropped++;
		return;
	}
	/* An authenticated session believes nothing before its MAC and sequence number. */
	if (h->auth && !client_auth_rx(h, src, buf, &msg)) {
		h->stats.rx_dropped++;
		/*
		 * But for a plain "no such session" from the control port (a restarted PBox holds
		 * no keys): a hint to JOIN again, nothing more. Forged, it costs one JOIN, which
		 * the PBox answers with the session we have.
		 */
		if (msg.opcode == PHUB_WIRE_OP_ERROR && !(msg.flags & PHUB_WIRE_F_AUTH) &&
		    msg.aux == PHUB_WIRE_ERR_UNKNOWN_JOB && msg.job_id == h->job_id &&
		    msg.session_token == h->token && src != NULL &&
		    src->sin_addr.s_addr == h->ctrl.sin_addr.s_addr &&
		    src->sin_port == h->ctrl.sin_port)
			h->rejoin = true;
		return;
	}
	/* phub_wire_parse() has checked the CRC of every datagram that carries the flag. */
	if (msg.flags & PHUB_WIRE_F_CSUM)
		h->stats.rx_csum++;
	if (msg.flags & PHUB_WIRE_F_REPLAY)
		h->stats.replays++;
	switch (msg.opcode) {
	case PHUB_WIRE_OP_ACK:
		rx_ack(h, &msg, now);
		break;
	case PHUB_WIRE_OP_MODEL:
		rx_model(h, &msg, now);
		break;
	case PHUB_WIRE_OP_ACKV:
		rx_ackv(h, &msg, now);
		break;
	case PHUB_WIRE_OP_PONG:
		if (msg.job_id == h->job_id && msg.session_token == h->token)
			h->last_heard_ns = now;
		break;
	case PHUB_WIRE_OP_ERROR:
		rx_error(h, &msg);
		break;
	case PHUB_WIRE_OP_WORLD:
		rx_world(h, &msg);
		break;
	default:
		/* Late JOIN_ACKs and the like: nothing left to do with them. */
		h->stats.rx_dropped++;
		break;
	}
}

/*
 * One received buffer: a datagram, or (UDP_GRO) datagrams of one source the kernel coalesced,
 * each gso_size bytes but the last. True when the session failed.
 */
static bool
rx_buffer(struct phub *h, struct mmsghdr *m, const uint8_t *buf, uint64_t now)
{
	size_t len = m->msg_len, gso = h->gro_on ? client_gro_size(&m->msg_hdr) : 0;
	size_t off = 0, dl;

	if (gso != 0 && len > gso)
		h->stats.rx_gro_batches++;
	while ((dl = client_gro_dgram_len(len, gso, off)) != 0) {
		rx_one(h, m->msg_hdr.msg_name, buf + off, dl, now);
		if (h->error != 0)
			return true;
		off += dl;
	}
	/* An empty datagram is one too: malformed. */
	if (len == 0)
		rx_one(h, m->msg_hdr.msg_name, buf, 0, now);
	return h->error != 0;
}

static void
rx_drain(struct phub *h)
{
	struct rx_batch *rx = &h->rx;

	for (int b = 0; b < RX_BATCHES; b++) {
		uint64_t now;
		int n;

		for (unsigned int i = 0; i < CLIENT_BATCH; i++) {
			rx->msgs[i].msg_hdr.msg_namelen = sizeof(rx->src[i]);
			rx->msgs[i].msg_len = 0;
			if (h->gro_on) {
				rx->msgs[i].msg_hdr.msg_control = rx->cmsg[i].buf;
				rx->msgs[i].msg_hdr.msg_controllen = sizeof(rx->cmsg[i].buf);
			}
		}
		n = recvmmsg(h->fd, rx->msgs, CLIENT_BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			return;
		now = client_now_ns();
		for (int i = 0; i < n; i++) {
			/* A datagram larger than a segment is none of ours. */
			if (rx->msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
				h->stats.rx_datagrams++;
				h->stats.rx_dropped++;
				continue;
			}
			if (rx_buffer(h, &rx->msgs[i], rx->buf + (size_t)i * rx->rx_size, now))
				return;
		}
		if (n < CLIENT_BATCH)
			return;
	}
}

/* ---- timers and sending ---- */


/*
 * A PUSH whose ACK is late was lost if a transmission sent after it to the same endpoint has
 * been answered (struct ep_order); if
 * nothing newer was answered either, the PBox or the path is stalled (a busy PBox, a descheduled
 * thread) and resending the whole window would only add to the queue: one segment per RTO goes
 * as a probe, the others wait. The same for a MODEL that is late: lost if a segment pushed after
 * this one has its MODEL, else the ranks are still pushing and one PULL per model wait probes.
 */
/* A later push to the same port has its MODEL: s's was lost, while the ranks push in one order. */
static bool
seg_overtaken(const struct phub *h, const struct seg *s)
{
	return !s->repull && stamp_after(h->ep_order[s->endpoint].model_hi, s->first_stamp);
}

/* PULL the MODEL of s, taken for lost (overtaken) or as the probe; its timer backs off. */
static void
seg_pull(struct phub *h, struct seg *s, bool overtaken, uint64_t now)
{
	/* A probe of an overtaken segment tells as much about the rule as a guess. */
	if (overtaken != s->pulled_overtaken)
		h->overtake_guesses += overtaken ? 1u : UINT32_MAX;	/* -1 */
	s->pulled_overtaken = overtaken;
	send_pull(h, s, now, s->tries > 0 || s->charged);
	h->stats.pulls++;
	if (s->tries < UINT8_MAX)
		s->tries++;
	timer_arm(h, s, now + backoff(h, s->tries + (s->repull ? 0 : MODEL_WAIT_SHIFT)));
}

static void
timer_fire(struct phub *h, struct seg *s, uint64_t now)
{
	bool lost, go, overtaken;

	if (s->state == SEG_SENT) {
		lost = stamp_after(h->ep_order[s->endpoint].ack_hi, s->tx_stamp);
		go = lost || now - h->push_probe_ns >= h->rto_ns;
		if (go && !lost)
			h->push_probe_ns = now;
		if (go) {
			send_push(h, s, h->keys[s->key].head, now, true);
			h->stats.retransmits++;
			if (s->tries < UINT8_MAX)
				s->tries++;
		}
		timer_arm(h, s, now + (go ? backoff(h, s->tries) : h->rto_ns));
		return;
	}
	overtaken = seg_overtaken(h, s);
	/* A guess takes one of OVERTAKE_GUESSES_MAX places until its MODEL comes, and keeps it. */
	lost = s->repull || (overtaken && overtake_trusted(h) &&
			(s->pulled_overtaken || h->overtake_guesses < OVERTAKE_GUESSES_MAX));
	go = lost || now - h->pull_probe_ns >= backoff(h, MODEL_WAIT_SHIFT);
	if (go && !lost)
		h->pull_probe_ns = now;
	if (go) {
		seg_pull(h, s, overtaken, now);
		return;
	}
	timer_arm(h, s, now + backoff(h, s->tries + (s->repull ? 0 : MODEL_WAIT_SHIFT)));
}

static void
timers_run(struct phub *h, uint64_t now)
{
	struct seg *s;

	while ((s = heap_top(h, &h->timer_heap)) != NULL && s->deadline_ns <= now)
		timer_fire(h, s, now);
}

/* A waiting segment's first PULL: it leaves the wait list for the timer heap. */
static void
model_wait_pull(struct phub *h, struct seg *s, bool overtaken, uint64_t now)
{
	model_wait_remove(h, s);
	seg_pull(h, s, overtaken, now);
}

/* Taken for lost at the end of its wait: overtaken, while the rule holds and guesses are left. */
static bool
model_wait_lost(const struct phub *h, const struct seg *s)
{
	return seg_overtaken(h, s) && overtake_trusted(h) &&
		h->overtake_guesses < OVERTAKE_GUESSES_MAX;
}

/*
 * The wait lists' heads whose model wait is over: overtaken ones are PULLed as lost while the
 * rule is trusted and guesses are left; of the others, the oldest is the probe when one is due.
 */
static void
model_waits_run(struct phub *h, uint64_t now)
{
	struct seg *oldest = NULL;

	for (uint32_t e = 0; e < h->n_endpoints; e++) {
		struct seg *s;

		while ((s = wait_seg(h, h->ep_order[e].wait_head)) != NULL &&
		       s->deadline_ns <= now && model_wait_lost(h, s))
			model_wait_pull(h, s, true, now);
		if (s != NULL && s->deadline_ns <= now &&
		    (oldest == NULL || s->deadline_ns < oldest->deadline_ns))
			oldest = s;
	}
	if (oldest != NULL && now - h->pull_probe_ns >= backoff(h, MODEL_WAIT_SHIFT)) {
		h->pull_probe_ns = now;
		model_wait_pull(h, oldest, seg_overtaken(h, oldest), now);
	}
}

/* When model_waits_run() has work next; UINT64_MAX: none but a MODEL can bring. */
static uint64_t
model_waits_next(const struct phub *h)
{
	uint64_t probe = h->pull_probe_ns + backoff(h, MODEL_WAIT_SHIFT);
	uint64_t next = UINT64_MAX;

	for (uint32_t e = 0; e < h->n_endpoints; e++) {
		const struct seg *s = wait_seg(h, h->ep_order[e].wait_head);
		uint64_t t;

		if (s == NULL)
			continue;
		t = s->deadline_ns;
		/* Not taken for lost: its wait ends with the probe (a MODEL wakes us anyway). */
		if (!model_wait_lost(h, s) && t < probe)
			t = probe;
		if (t < next)
			next = t;
	}
	return next;
}

static void
send_run(struct phub *h, uint64_t now)
{
	struct seg *s;

	while ((s = heap_top(h, &h->send_heap)) != NULL) {
		uint32_t bytes = s->n_elems * h->elem_size;

		/* One segment always goes, so a window below a segment still moves. */
		if (h->inflight_bytes != 0 && h->inflight_bytes + bytes > h->window_bytes)
			break;
		heap_remove(h, &h->send_heap, seg_id(h, s), false);
		h->inflight_bytes += bytes;
		if (s->state == SEG_ACKED) {
			/* A repull: its MODEL comes from kept state, at once. */
			send_pull(h, s, now, false);
			h->stats.pulls++;
			s->charged = true;
			timer_arm(h, s, now + backoff(h, 0));
			continue;
		}
		send_push(h, s, h->keys[s->key].head, now, false);
		h->stats.pushes++;
		s->state = SEG_SENT;
		h->n_waiting++;
		timer_arm(h, s, now + backoff(h, 0));
	}
}

static uint64_t
ping_every(const struct phub *h)
{
	return h->dead_ns / 8 < KEEPALIVE_NS ? h->dead_ns / 8 : KEEPALIVE_NS;
}

static uint64_t
ping_retry(const struct phub *h)
{
	return ping_every(h) < PING_RETRY_NS ? ping_every(h) : PING_RETRY_NS;
}

/* Liveness: the PBox must say something within dead_ms while we wait on it. */
static void
liveness(struct phub *h, uint64_t now)
{
	if (h->n_active == 0 && h->n_waiting == 0) {
		h->last_heard_ns = now;
		if (now - h->last_ping_ns >= KEEPALIVE_NS)
			send_ping(h, now);
		return;
	}
	if (now - h->last_heard_ns >= h->dead_ns) {
		client_fail(h, -ECONNRESET, "PBox %s silent for %llu ms while rank %u of job '%s'"
				" waited on it: it stopped, or the path to it is down",
				h->server_name,
				(unsigned long long)((now - h->last_heard_ns) / 1000000u),
				h->rank, h->job_name);
		return;
	}
	/*
	 * Waiting on slower workers looks like silence: a PING tells the two apart. Unanswered,
	 * it goes again every ping_retry().
	 */
	if (now - h->last_heard_ns >= ping_every(h) && now - h->last_ping_ns >= ping_retry(h))
		send_ping(h, now);
}

/* How long the loop may sleep: until the first timer, PING or liveness check. */
static void
sleep_ts(struct phub *h, uint64_t now, struct timespec *ts)
{
	uint64_t next = UINT64_MAX, wait_next;
	struct seg *s = heap_top(h, &h->timer_heap);

	if (s != NULL)
		next = s->deadline_ns;
	wait_next = model_waits_next(h);
	if (wait_next < next)
		next = wait_next;
	if (h->n_active != 0 || h->n_waiting != 0) {
		uint64_t t = h->last_heard_ns + ping_every(h);

		/* Silent already: the next PING is a retry. */
		if (t <= now)
			t = h->last_ping_ns + ping_retry(h) > t ? h->last_ping_ns + ping_retry(h) : t;

		if (h->last_heard_ns + h->dead_ns < t)
			t = h->last_heard_ns + h->dead_ns;
		if (t < next)
			next = t;
	} else if (h->last_ping_ns + KEEPALIVE_NS < next) {
		next = h->last_ping_ns + KEEPALIVE_NS;
	}
	next = next > now ? next - now : 0;
	ts->tv_sec = (time_t)(next / 1000000000u);
	ts->tv_nsec = (long)(next % 1000000000u);
}

static void
idle_wait(struct phub *h, uint64_t now)
{
	struct pollfd pfd[2] = {
		{ .fd = h->fd, .events = POLLIN },
		{ .fd = h->wake_fd, .events = POLLIN },
	};
	struct timespec ts;
	bool more;

	atomic_store(&h->sleeping, true);
	/* Submitted between the last look and the flag: do not sleep on it. */
	pthread_mutex_lock(&h->lock);
	more = h->sub_head != NULL || h->stop;
	pthread_mutex_unlock(&h->lock);
	if (!more) {
		sleep_ts(h, now, &ts);
		ppoll(pfd, 2, &ts, NULL);
	}
	atomic_store(&h->sleeping, false);
	if (more || (pfd[1].revents & POLLIN)) {
		uint64_t v;

		if (read(h->wake_fd, &v, sizeof(v)) < 0)
			return;
	}
}

/* ---- a restarted PBox ---- */

/* Forget everything in flight: heaps, timers, window, per-endpoint order. */
static void
progress_reset(struct phub *h)
{
	for (uint32_t i = 0; i < h->n_segs; i++) {
		struct seg *s = &h->segs[i];

		s->state = SEG_DONE;
		s->tries = 0;
		s->next_pending = false;
		s->repull = false;
		s->charged = false;
		s->pulled_overtaken = false;
		s->model_wait = false;
		s->wait_prev = 0;
		s->wait_next = 0;
		s->timer_pos = 0;
		s->send_pos = 0;
	}
	for (uint32_t e = 0; e < h->n_endpoints; e++) {
		h->ep_order[e].wait_head = 0;
		h->ep_order[e].wait_tail = 0;
	}
	h->send_heap.n = 0;
	h->timer_heap.n = 0;
	h->inflight_bytes = 0;
	h->n_waiting = 0;
	h->push_probe_ns = 0;
	h->pull_probe_ns = 0;
	h->overtake_guesses = 0;
}

/* The tickets of the keys' FIFOs complete with status; the FIFOs are left empty. */
static void
fail_key_fifos(struct phub *h, int status)
{
	for (uint32_t k = 0; k < h->n_keys; k++) {
		struct key *key = &h->keys[k];

		while (key->head != NULL) {
			struct op *op = key->head;

			key->head = op->next;
			client_op_finish(h, op, status);
		}
		key->tail = NULL;
	}
	h->n_active = 0;
}

/* The tickets of a list of operations no key's FIFO took complete with status. */
static void
fail_list(struct phub *h, struct op *list, int status)
{
	while (list != NULL) {
		struct op *op = list;

		list = op->next;
		client_op_finish(h, op, status);
	}
}

/* The tickets of the keys' FIFOs and those not yet taken complete with status. */
static void
fail_ops(struct phub *h, struct op *list, int status)
{
	fail_key_fifos(h, status);
	fail_list(h, list, status);
}

/*
 * The PBox restarted and took us back at iteration r (JOIN_ACK). It has the model of r - 1
 * and nothing newer. If the application has seen nothing of r or later, every operation in
 * progress runs again from its start (its gradient is still the application's to keep): the
 * restart is invisible but for the time. Otherwise the application must go back to r - 1:
 * its tickets fail with -ESTALE, and so does everything until phub_resume().
 */
static void
reconnect(struct phub *h)
{
	char err[CLIENT_ERRMSG] = "";
	bool stale = false;
	struct op *list;
	uint32_t r;
	int rc;

	h->rejoin = false;
	/* The JOIN exchange takes its answers one datagram at a time. */
	if (h->gro_on)
		client_gro_set(h, false);
	rc = client_rejoin(h, err, sizeof(err));
	if (h->gro_on)
		client_gro_set(h, true);
	h->last_heard_ns = client_now_ns();
	if (rc == -ECANCELED)
		return;
	if (rc != 0) {
		client_fail(h, rc, "PBox %s lost the session of rank %u of job '%s' and the JOIN "
				"again failed: %s", h->server_name, h->rank, h->job_name, err);
		return;
	}
	r = h->first_iteration;
	for (uint32_t k = 0; k < h->n_keys; k++) {
		const struct key *key = &h->keys[k];

		/* Lost with no checkpoint: only a job still in its initial round starts over. */
		if (r == 0 && key->done_any) {
			client_fail(h, -EIO, "PBox %s restarted without a checkpoint of job '%s': "
					"the job's model is lost", h->server_name, h->job_name);
			return;
		}
		if (key->done_any && phub_wire_iter_cmp(key->done_iter, r) >= 0)
			stale = true;
	}
	pthread_mutex_lock(&h->lock);
	/* A PBox ahead of what we pushed (a checkpoint newer than this worker) also moves us. */
	for (uint32_t k = 0; k < h->n_keys; k++)
		if (phub_wire_iter_cmp(h->keys[k].sub_iter, r - 1) < 0)
			stale = true;
	list = NULL;
	if (stale) {
		h->stale = true;
		for (uint32_t k = 0; k < h->n_keys; k++)
			h->keys[k].sub_iter = r - 1;
		list = h->sub_head;
		h->sub_head = NULL;
		h->sub_tail = NULL;
	}
	h->stats.reconnects++;
	if (stale)
		h->stats.rollbacks++;
	pthread_mutex_unlock(&h->lock);

	progress_reset(h);
	if (stale) {
		fail_ops(h, list, -ESTALE);
		for (uint32_t i = 0; i < h->n_segs; i++)
			h->segs[i].iter = r - 1;
		return;
	}
	for (uint32_t k = 0; k < h->n_keys; k++) {
		struct key *key = &h->keys[k];

		if (key->head == NULL)
			continue;
		key->head->n_acked = 0;
		key->head->n_models = 0;
		op_activate(h, key);
	}
}

/* Every ticket still open completes with status: the session ended. */
static void
fail_all(struct phub *h, int status)
{
	struct op *list;

	fail_key_fifos(h, status);
	/* Taken after the FIFOs: a callback above may have submitted more. */
	pthread_mutex_lock(&h->lock);
	list = h->sub_head;
	h->sub_head = NULL;
	h->sub_tail = NULL;
	pthread_mutex_unlock(&h->lock);
	fail_list(h, list, status);
}

void *
client_node_main(void *arg)
{
	struct phub *h = arg;
	sigset_t all;
	int status;

	/* Signals are the application's business: let its own threads take them. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	h->last_heard_ns = client_now_ns();
	for (;;) {
		uint64_t now = client_now_ns();

		if (take_submissions(h, now))
			break;
		rx_drain(h);
		if (h->rejoin)
			reconnect(h);
		if (h->error != 0)
			break;
		now = client_now_ns();
		timers_run(h, now);
		model_waits_run(h, now);
		send_run(h, now);
		client_tx_flush(h);
		liveness(h, now);
		client_tx_flush(h);
		if (h->error != 0)
			break;
		idle_wait(h, now);
	}
	pthread_mutex_lock(&h->lock);
	if (h->error == 0) {
		h->error = -ECANCELED;
		snprintf(h->errmsg, sizeof(h->errmsg), "the session was closed");
	}
	status = h->error;
	pthread_mutex_unlock(&h->lock);
	fail_all(h, status);
	return NULL;
}

int
client_node_init(struct phub *h)
{
	struct rx_batch *rx = &h->rx;

	h->send_heap.ents = calloc(h->n_segs, sizeof(struct seg_heap_ent));
	h->timer_heap.ents = calloc(h->n_segs, sizeof(struct seg_heap_ent));
	/* MODEL bursts coalesced by the kernel: a buffer holds what one skb may. */
	if (h->gro_on && !client_gro_set(h, true)) {
		h->gro_on = false;
		h->stats.rx_gro_refused++;
	}
	if (h->gro_on && rx->rx_size < CLIENT_GRO_BUF)
		rx->rx_size = CLIENT_GRO_BUF;
	rx->buf = malloc(CLIENT_BATCH * rx->rx_size);
	h->ep_order = calloc(h->n_endpoints, sizeof(*h->ep_order));
	h->overtake_trust = OVERTAKE_TRUST_MAX;
	if (h->send_heap.ents == NULL || h->timer_heap.ents == NULL || rx->buf == NULL ||
	    h->ep_order == NULL)
		return -ENOMEM;
	for (unsigned int i = 0; i < CLIENT_BATCH; i++) {
		rx->iov[i].iov_base = rx->buf + (size_t)i * rx->rx_size;
		rx->iov[i].iov_len = rx->rx_size;
		memset(&rx->msgs[i], 0, sizeof(rx->msgs[i]));
		rx->msgs[i].msg_hdr.msg_name = &rx->src[i];
		rx->msgs[i].msg_hdr.msg_namelen = sizeof(rx->src[i]);
		rx->msgs[i].msg_hdr.msg_iov = &rx->iov[i];
		rx->msgs[i].msg_hdr.msg_iovlen = 1;
	}
	/* Before any sample: the JOIN round trip if clean, else RFC 6298's cautious start. */
	if (h->rtt.srtt_ns != 0) {
		h->rtt.rttvar_ns = h->rtt.srtt_ns / 2;
		rto_update(h);
	} else {
		h->rto_ns = 200 * 1000000u;
		if (h->rto_ns < h->rto_min_ns)
			h->rto_ns = h->rto_min_ns;
		if (h->rto_ns > h->rto_max_ns)
			h->rto_ns = h->rto_max_ns;
		h->stats.rto_us = (uint32_t)(h->rto_ns / 1000u);
	}
	h->stats.window_bytes = h->window_bytes;
	h->pub_stats = h->stats;
	return 0;
}

void
client_node_free(struct phub *h)
{
	free(h->send_heap.ents);
	free(h->timer_heap.ents);
	free(h->rx.buf);
	free(h->ep_order);
}
