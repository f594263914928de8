/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The JOIN and LEAVE exchanges, run on the caller's thread while no progress thread exists,
 * and the same JOIN again on the progress thread when a restarted PBox lost the session.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_priv.h"

enum {
	JOIN_RTO_FIRST_MS = 100,	/* first JOIN retransmission; doubles up to the next */
	/*
	 * Not a second: on a link that loses bursts frame by frame, a JOIN_ACK a second stayed
	 * lost for the whole connect timeout one run in ten (issue 9). A JOIN is a few datagrams.
	 */
	JOIN_RTO_LAST_MS = 250,
	LEAVE_RTO_MS = 100,
	RX_MAX = 65536,			/* any UDP payload */
};

/* The JOIN of the session, kept for a re-JOIN, and the answer being reassembled. */
struct client_join {
	struct phub_wire_join_params jp;
	struct phub_wire_key *keys;
	unsigned int mtu;
	int n_dgrams;
	uint8_t *tx;
	uint8_t *rx;
	/* The answer, reassembled. */
	struct phub_wire_join_ack_merge merge;
	struct phub_wire_endpoint *endpoints;
	uint16_t *chunk_map;
	uint64_t token;
	uint64_t progress_ns;		/* JOIN began, or a JOIN_ACK last added to the map */
};

/* Whether to ask for ACKV: yes, unless the environment says PHUB_ACKV=0 (docs/client.md). */
static bool
client_ackv_wanted(void)
{
	const char *v = getenv("PHUB_ACKV");

	return v == NULL || strcmp(v, "0") != 0;
}

static int
optimizer_parse(const char *name, uint8_t *opt)
{
	enum phub_opt_type t;

	if (phub_opt_type_parse(name != NULL ? name : "sgd", &t) != 0)
		return -EINVAL;
	*opt = (uint8_t)t;
	return 0;
}

/* The MTU a JOIN datagram is cut for: an authenticated one keeps room for its key and MAC. */
static unsigned int
join_mtu(const struct phub *h, const struct client_join *c)
{
	return h->auth ? c->mtu - PHUB_WIRE_AUTH_PK_LEN - PHUB_WIRE_AUTH_TRAILER_LEN : c->mtu;
}

static int
join_prepare(struct phub *h, const struct phub_connect_params *p, struct client_join *c, char *err,
		size_t errlen)
{
	struct phub_wire_join *j = &c->jp.join;

	c->mtu = p->mtu != 0 ? p->mtu : CLIENT_MTU_DEFAULT;
	if (optimizer_parse(p->optimizer, &j->optimizer) != 0) {
		client_set_err(err, errlen, "unknown optimizer '%s'", p->optimizer);
		return -EINVAL;
	}
	snprintf(j->name, sizeof(j->name), "%s", p->job);
	/* An authenticated JOIN proves the nonce with its MAC and never carries it. */
	j->nonce = h->auth ? 0 : p->nonce;
	j->rank = p->rank;
	j->world_size = p->world_size;
	j->dtype = h->dtype;
	j->chunk_bytes = p->chunk_bytes;
	j->join_flags = (p->flags & PHUB_CONNECT_F_CSUM) ? PHUB_WIRE_JOIN_F_CSUM : 0;
	if (p->flags & PHUB_CONNECT_F_DETERMINISTIC)
		j->join_flags |= PHUB_WIRE_JOIN_F_DETERMINISTIC;
	if (p->flags & PHUB_CONNECT_F_ELASTIC)
		j->join_flags |= PHUB_WIRE_JOIN_F_ELASTIC;
	/*
	 * Coalesced ACKs (ACKV), unless the flag NO_ACKV or PHUB_ACKV=0 asks for one ACK per PUSH
	 * (interop debugging, before/after measurements). A PBox that does not know the flag
	 * refuses the JOIN (join_unknown_flags).
	 */
	if (!(p->flags & PHUB_CONNECT_F_NO_ACKV) && client_ackv_wanted())
		j->join_flags |= PHUB_WIRE_JOIN_F_ACKV;
	j->hyper.lr = p->lr;
	j->hyper.momentum = p->momentum;
	j->hyper.weight_decay = p->weight_decay;
	/* Defaults every rank applies alike, so that they never make a layout mismatch. */
	j->hyper.beta1 = p->beta1 != 0.0f ? p->beta1 : 0.9f;
	j->hyper.beta2 = p->beta2 != 0.0f ? p->beta2 : 0.999f;
	j->hyper.eps = p->eps != 0.0f ? p->eps : 1e-8f;

	c->keys = calloc(p->n_keys, sizeof(*c->keys));
	c->tx = malloc(c->mtu);
	c->rx = malloc(RX_MAX);
	if (c->keys == NULL || c->tx == NULL || c->rx == NULL) {
		client_set_err(err, errlen, "out of memory for %u keys", p->n_keys);
		return -ENOMEM;
	}
	for (uint32_t k = 0; k < p->n_keys; k++) {
		c->keys[k].key_id = p->keys[k].key_id;
		c->keys[k].elem_count = p->keys[k].n_elems;
	}
	c->jp.keys = c->keys;
	c->jp.key_count = p->n_keys;
	c->jp.flags = h->tx_flags;
	c->n_dgrams = phub_wire_join_segments(&c->jp, join_mtu(h, c));
	if (c->n_dgrams <= 0) {
		client_set_err(err, errlen, "the layout of %u keys does not fit a JOIN at mtu %u",
				p->n_keys, c->mtu);
		return -EINVAL;
	}
	return 0;
}

static void
join_send(struct phub *h, struct client_join *c, bool retransmit)
{
	c->jp.flags = h->tx_flags | (retransmit ? PHUB_WIRE_F_RETRANSMIT : 0);
	for (int i = 0; i < c->n_dgrams; i++) {
		int len = phub_wire_join_write(c->tx, c->mtu, &c->jp, join_mtu(h, c), (uint16_t)i);

		if (len > 0 && h->auth)
			len = client_auth_join_seal(h, c->tx, (size_t)len, c->mtu);

		/* A datagram the kernel refuses now is one the next round sends again. */
		if (len > 0)
			sendto(h->fd, c->tx, (size_t)len, 0, (const struct sockaddr *)&h->ctrl,
					sizeof(h->ctrl));
	}
}

static int
refusal_errno(uint16_t code)
{
	switch (code) {
	case PHUB_WIRE_ERR_BAD_NONCE:
		return EACCES;
	case PHUB_WIRE_ERR_JOB_FULL:
	case PHUB_WIRE_ERR_RANK_TAKEN:
		return EBUSY;
	case PHUB_WIRE_ERR_NO_MEMORY:
		return ENOMEM;
	default:
		return EPROTO;
	}
}

/* One JOIN_ACK datagram: 1 when the chunk map is complete, 0 for more, -errno. */
static int
join_ack_take(struct phub *h, struct client_join *c, const struct phub_wire_msg *msg, char *err,
		size_t errlen)
{
	struct phub_wire_join_ack_seg seg;
	uint32_t filled;
	int rc;

	if (msg->worker_rank != h->rank)
		return 0;
	if (phub_wire_join_ack_parse(msg->payload, msg->payload_len, &seg) != PHUB_DROP_OK)
		return 0;
	/* A new token means the PBox began the session again: so does the reassembly. */
	if (c->merge.started && msg->session_token != c->token) {
		free(c->endpoints);
		free(c->chunk_map);
		c->endpoints = NULL;
		c->chunk_map = NULL;
		memset(&c->merge, 0, sizeof(c->merge));
	}
	if (c->endpoints == NULL) {
		c->endpoints = calloc(seg.endpoint_count, sizeof(*c->endpoints));
		c->chunk_map = calloc(seg.total_chunks, sizeof(*c->chunk_map));
		if (c->endpoints == NULL || c->chunk_map == NULL) {
			client_set_err(err, errlen, "out of memory for a chunk map of %u chunks",
					seg.total_chunks);
			return -ENOMEM;
		}
		phub_wire_join_ack_merge_init(&c->merge, c->endpoints, seg.endpoint_count,
				c->chunk_map, seg.total_chunks);
		c->token = msg->session_token;
	}
	filled = c->merge.chunks_filled;
	rc = phub_wire_join_ack_merge_add(&c->merge, msg, &seg);
	if (rc < 0)
		return 0;
	/* A datagram that told us more of the map: progress, which the timeout measures. */
	if (c->merge.chunks_filled != filled || rc == 1) {
		h->stats.join_acks++;
		c->progress_ns = client_now_ns();
	}
	return rc;
}

/* phub_close() during a re-JOIN: give up. False before the progress thread exists. */
static bool
stopping(struct phub *h)
{
	bool stop;

	pthread_mutex_lock(&h->lock);
	stop = h->stop;
	pthread_mutex_unlock(&h->lock);
	return stop;
}

/*
 * Wait for answers until deadline_ns: 1 map complete, 0 time is up, -errno refused
 * (-ECANCELED: the session is closing).
 */
static int
join_receive(struct phub *h, struct client_join *c, uint64_t deadline_ns, char *err,
		size_t errlen)
{
	struct pollfd pfd = { .fd = h->fd, .events = POLLIN };

	for (;;) {
		uint64_t now = client_now_ns();
		uint64_t wait_ms = (deadline_ns - now + 999999) / 1000000;
		struct sockaddr_in src;
		socklen_t srclen = sizeof(src);
		struct phub_wire_msg msg;
		ssize_t len;
		int rc;

		if (now >= deadline_ns)
			return 0;
		if (stopping(h)) {
			client_set_err(err, errlen, "the session was closed");
			return -ECANCELED;
		}
		/* A bounded wait, so that phub_close() is not kept waiting for long. */
		rc = poll(&pfd, 1, (int)(wait_ms < JOIN_RTO_FIRST_MS ? wait_ms :
				JOIN_RTO_FIRST_MS));
		if (rc < 0 && errno != EINTR) {
			client_set_err(err, errlen, "poll: %s", strerror(errno));
			return -errno;
		}
		if (rc <= 0)
			continue;
		len = recvfrom(h->fd, c->rx, RX_MAX, 0, (struct sockaddr *)&src, &srclen);
		if (len < 0)
			continue;
		/* Only the control port answers a JOIN. */
		if (src.sin_addr.s_addr != h->ctrl.sin_addr.s_addr ||
		    src.sin_port != h->ctrl.sin_port)
			continue;
		if (phub_wire_parse(c->rx, (size_t)len, &msg) != PHUB_DROP_OK)
			continue;
		if (msg.opcode == PHUB_WIRE_OP_ERROR) {
			struct phub_wire_error_msg e;

			/*
			 * An ERROR about a session answers a PING of the session being replaced
			 * (late, or one of several): not this JOIN, which has no session yet.
			 */
			if (msg.session_token != 0)
				continue;

			if (phub_wire_error_parse(msg.payload, msg.payload_len, &e) != PHUB_DROP_OK)
				continue;
			/* Some datagrams of a split JOIN were lost: it goes again whole anyway. */
			if (e.code == PHUB_WIRE_ERR_JOIN_TIMEOUT)
				continue;
			client_set_err(err, errlen, "PBox %s refused rank %u of job '%s': %s: %.*s",
					h->server_name, h->rank, h->job_name,
					phub_wire_error_name(e.code), (int)e.msg_len, e.text);
			return -refusal_errno(e.code);
		}
		if (msg.opcode != PHUB_WIRE_OP_JOIN_ACK)
			continue;
		/* Only a PBox that holds the PSK and our key exchange can answer it. */
		if (!client_auth_join_ack(h, c->rx, &msg))
			continue;
		rc = join_ack_take(h, c, &msg, err, errlen);
		if (rc != 0)
			return rc;
	}
}

/* Keys, segments and chunk index from the layout cut as the PBox cut it. */
static int
layout_build(struct phub *h, const struct phub_connect_params *p, struct client_join *c, char *err,
		size_t errlen)
{
	struct phub_layout_params lp = {
		.keys = (const struct phub_layout_key *)p->keys,
		.n_keys = p->n_keys,
		.elem_size = h->elem_size,
		.chunk_bytes = h->chunk_bytes,
		.segment_elems = h->segment_elems,
	};
	char why[128] = "";
	uint64_t n_segs;
	uint32_t s = 0;

	static_assert(sizeof(struct phub_key) == sizeof(struct phub_layout_key) &&
			offsetof(struct phub_key, n_elems) ==
			offsetof(struct phub_layout_key, n_elems),
			"struct phub_key is struct phub_layout_key");
	if (phub_layout_params_check(&lp, why, sizeof(why)) != 0 ||
	    (h->layout = phub_layout_create(&lp)) == NULL) {
		client_set_err(err, errlen,
				"PBox %s chunk map (chunk_bytes %u, segment_elems %u) does"
				" not fit the layout: %s", h->server_name, h->chunk_bytes,
				h->segment_elems, why);
		return -EPROTO;
	}
	h->n_chunks = phub_layout_chunk_count(h->layout);
	n_segs = phub_layout_segment_count(h->layout);
	if (h->n_chunks != c->merge.total_chunks || n_segs >= UINT32_MAX) {
		client_set_err(err, errlen, "PBox %s sent a map of %u chunks, the layout has %u",
				h->server_name, c->merge.total_chunks, h->n_chunks);
		return -EPROTO;
	}
	h->n_segs = (uint32_t)n_segs;
	h->segs = calloc(h->n_segs, sizeof(*h->segs));
	h->chunk_first_seg = calloc(h->n_chunks, sizeof(*h->chunk_first_seg));
	h->keys = calloc(p->n_keys, sizeof(*h->keys));
	h->zeros = calloc(h->segment_elems, h->elem_size);
	if (h->segs == NULL || h->chunk_first_seg == NULL || h->keys == NULL || h->zeros == NULL) {
		client_set_err(err, errlen, "out of memory for %u segments", h->n_segs);
		return -ENOMEM;
	}
	for (uint32_t ch = 0; ch < h->n_chunks; ch++) {
		struct phub_layout_chunk info;

		phub_layout_chunk_get(h->layout, ch, &info);
		h->chunk_first_seg[ch] = s;
		for (uint32_t i = 0; i < info.n_segments; i++, s++) {
			struct phub_layout_segment sg;
			struct seg *seg = &h->segs[s];

			phub_layout_segment_get(h->layout, ch, i, &sg);
			seg->chunk = ch;
			seg->key = info.key_index;
			seg->chunk_elem = sg.elem_offset;
			seg->key_elem = info.elem_offset + sg.elem_offset;
			seg->n_elems = sg.n_elems;
			seg->seg_index = (uint16_t)i;
			seg->seg_count = (uint16_t)info.n_segments;
			seg->endpoint = c->chunk_map[ch];
			/* The job's start counts as a model in hand: its first push may go. */
			seg->state = SEG_DONE;
			seg->iter = h->first_iteration - 1;
		}
	}
	h->n_keys = p->n_keys;
	for (uint32_t k = 0; k < h->n_keys; k++) {
		struct phub_layout_key_info info;
		struct key *key = &h->keys[k];

		phub_layout_key_get(h->layout, k, &info);
		key->key_id = info.key_id;
		key->n_elems = info.n_elems;
		key->first_seg = h->chunk_first_seg[info.first_chunk];
		key->n_segs = (info.first_chunk + info.n_chunks < h->n_chunks ?
				h->chunk_first_seg[info.first_chunk + info.n_chunks] : h->n_segs) -
			key->first_seg;
		/* The latest pushed iteration: the start round's, or the checkpoint's. */
		key->sub_iter = h->first_iteration == 0 ? 0 : h->first_iteration - 1;
	}
	return 0;
}

static int
endpoints_build(struct phub *h, struct client_join *c, char *err, size_t errlen)
{
	h->n_endpoints = c->merge.endpoint_count;
	h->endpoints = calloc(h->n_endpoints, sizeof(*h->endpoints));
	if (h->endpoints == NULL) {
		client_set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < h->n_endpoints; i++) {
		struct sockaddr_in *a = &h->endpoints[i];

		a->sin_family = AF_INET;
		a->sin_port = htons(c->endpoints[i].udp_port);
		/* Address 0 is the one the JOIN_ACK came from: the control address. */
		a->sin_addr.s_addr = c->endpoints[i].ipv4 != 0 ? htonl(c->endpoints[i].ipv4) :
			h->ctrl.sin_addr.s_addr;
	}
	return 0;
}

/*
 * The MTU the kernel knows on our route to one endpoint, asked of a socket bound where the
 * session's is and connected there (IP_MTU needs a connected socket); 0 when it cannot tell.
 */
static unsigned int
route_mtu(const struct phub *h, const struct sockaddr_in *to)
{
	struct sockaddr_in local;
	socklen_t len = sizeof(local);
	unsigned int mtu = 0;
	int value;
	int fd;

	if (getsockname(h->fd, (struct sockaddr *)&local, &len) != 0)
		return 0;
	local.sin_port = 0;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	len = sizeof(value);
	if (bind(fd, (struct sockaddr *)&local, sizeof(local)) == 0 &&
	    connect(fd, (const struct sockaddr *)to, sizeof(*to)) == 0 &&
	    getsockopt(fd, IPPROTO_IP, IP_MTU, &value, &len) == 0 && value > 0)
		mtu = (unsigned int)value;
	close(fd);
	return mtu;
}

/*
 * Learn the MTU every datagram of the session must fit, so that no user sets one for
 * correctness: the smallest of the routes to the PBox's endpoints. The PBox cut its segments to
 * its own MTU; a whole one under the plain header must also fit our side, or every PUSH would
 * leave as IP fragments the PBox never reassembles and every MODEL would be too big for our
 * link: refuse the session then, naming both. Where the kernel cannot tell, the segment is the
 * evidence: the PBox cut it to fit its MTU under the longest header (PHUB_WIRE_HDR_LEN_MAX).
 */
static int
path_mtu_learn(struct phub *h, char *err, size_t errlen)
{
	size_t seg = (size_t)h->segment_elems * h->elem_size;
	size_t auth = h->auth ? PHUB_WIRE_AUTH_TRAILER_LEN : 0;
	size_t need = PHUB_WIRE_IPV4_UDP_OVERHEAD + PHUB_WIRE_HDR_LEN + auth + seg;
	size_t cut_for = PHUB_WIRE_IPV4_UDP_OVERHEAD + PHUB_WIRE_HDR_LEN_MAX + auth + seg;
	unsigned int path = 0;

	for (uint32_t i = 0; i < h->n_endpoints; i++) {
		unsigned int mtu = route_mtu(h, &h->endpoints[i]);

		if (mtu != 0 && (path == 0 || mtu < path))
			path = mtu;
	}
	if (path == 0) {
		if (cut_for > h->mtu)
			h->mtu = (unsigned int)cut_for;
		return 0;
	}
	if (path < need) {
		client_set_err(err, errlen, "PBox %s cuts segments of %zu bytes (datagrams of "
				"%zu bytes: its MTU is at least that) but the route to it has MTU %u; "
				"give this host's interface the PBox ports' MTU", h->server_name, seg,
				need, path);
		return -EMSGSIZE;
	}
	h->mtu = path;
	return 0;
}

/* The datagram the PBox sends for a whole segment must fit what we receive. */
static void
rx_size_set(struct phub *h, unsigned int mtu)
{
	size_t seg = PHUB_WIRE_HDR_LEN + (h->auth ? PHUB_WIRE_AUTH_TRAILER_LEN : 0) +
		(size_t)h->segment_elems * h->elem_size;
	size_t room = mtu - PHUB_WIRE_IPV4_UDP_OVERHEAD;

	h->rx.rx_size = seg > room ? seg : room;
	/* An ERROR with its longest text fits too. */
	if (h->rx.rx_size < PHUB_WIRE_HDR_LEN + 4 + PHUB_WIRE_ERROR_MSG_MAX)
		h->rx.rx_size = PHUB_WIRE_HDR_LEN + 4 + PHUB_WIRE_ERROR_MSG_MAX;
	h->rx.rx_size = (h->rx.rx_size + 63) & ~(size_t)63;
}

/* Forget a half or fully reassembled answer: the next JOIN_ACK starts a new one. */
static void
merge_reset(struct client_join *c)
{
	free(c->endpoints);
	free(c->chunk_map);
	c->endpoints = NULL;
	c->chunk_map = NULL;
	c->token = 0;
	memset(&c->merge, 0, sizeof(c->merge));
}

/*
 * Send the JOIN until the chunk map is complete, with back-off, until connect_timeout_ms pass
 * without a JOIN_ACK datagram that adds to the map: a map of many datagrams on a slow link takes
 * as long as it takes. 0, -ETIMEDOUT, or -errno of a refusal or a failure (err says which).
 */
static int
join_exchange(struct phub *h, struct client_join *c, bool *retransmitted, char *err,
		size_t errlen)
{
	uint64_t bound = (uint64_t)h->connect_timeout_ms * 1000000u;
	uint64_t rto = (uint64_t)JOIN_RTO_FIRST_MS * 1000000u;
	bool retransmit = false;
	uint64_t end;
	int rc;

	c->progress_ns = client_now_ns();
	if (h->auth)
		client_auth_join_start(h);
	for (;;) {
		uint64_t now = client_now_ns();

		end = c->progress_ns + bound;
		if (now >= end && c->merge.chunks_filled == 0) {
			/* An authenticated job drops a JOIN it cannot verify without a word. */
			client_set_err(err, errlen,
					"no answer from PBox %s to the %sJOIN of rank %u of job"
					" '%s' for %u ms: %s", h->server_name,
					h->auth ? "authenticated " : "", h->rank, h->job_name,
					h->connect_timeout_ms, h->auth ?
					"a wrong key (the key option or PHUB_KEY; without one,"
					" the nonce) is dropped unanswered; or is the PBox not"
					" running or reachable?" :
					"is the PBox running and reachable?");
			rc = -ETIMEDOUT;
			break;
		}
		if (now >= end) {
			client_set_err(err, errlen,
					"the JOIN_ACK of rank %u of job '%s' from PBox %s stopped"
					" at %u of %u chunks: nothing more for %u ms", h->rank,
					h->job_name, h->server_name, c->merge.chunks_filled,
					c->merge.total_chunks, h->connect_timeout_ms);
			rc = -ETIMEDOUT;
			break;
		}
		join_send(h, c, retransmit);
		/* Progress while receiving moves the bound on: the wait ends at the RTO. */
		rc = join_receive(h, c, now + rto < end ? now + rto : end, err, errlen);
		if (rc == 1) {
			rc = 0;
			break;
		}
		if (rc < 0)
			break;
		retransmit = true;
		rto = rto * 2 > (uint64_t)JOIN_RTO_LAST_MS * 1000000u ?
			(uint64_t)JOIN_RTO_LAST_MS * 1000000u : rto * 2;
	}
	*retransmitted = retransmit;
	return rc;
}

int
client_join(struct phub *h, const struct phub_connect_params *p, char *err, size_t errlen)
{
	uint64_t start = client_now_ns();
	struct client_join *c;
	bool retransmit = false;
	int rc;

	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		client_set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	h->join = c;
	rc = join_prepare(h, p, c, err, errlen);
	if (rc == 0)
		rc = join_exchange(h, c, &retransmit, err, errlen);
	if (rc == 0) {
		/* The JOIN round trip is the first RTT sample, unless a retransmission blurs it. */
		if (!retransmit)
			h->rtt.srtt_ns = client_now_ns() - start;
		h->job_id = c->merge.ack.job_id;
		h->token = c->token;
		h->chunk_bytes = c->merge.ack.chunk_bytes;
		h->segment_elems = c->merge.ack.seg_elems;
		h->first_iteration = c->merge.ack.iteration;
		rc = endpoints_build(h, c, err, errlen);
		if (rc == 0)
			rc = client_auth_commit(h);
	}
	if (rc == 0)
		rc = layout_build(h, p, c, err, errlen);
	if (rc == 0)
		rc = path_mtu_learn(h, err, errlen);
	if (rc == 0)
		rx_size_set(h, c->mtu);
	merge_reset(c);
	return rc;
}

void
client_join_free(struct phub *h)
{
	struct client_join *c = h->join;

	if (c == NULL)
		return;
	merge_reset(c);
	free(c->keys);
	free(c->tx);
	free(c->rx);
	free(c);
	h->join = NULL;
}

/* Elements per chunk as lib/layout cuts them: whole segments, at least one. */
static uint32_t
chunk_elems(uint32_t chunk_bytes, uint32_t seg_elems)
{
	uint32_t segs = chunk_bytes / PHUB_LAYOUT_MODEL_ELEM_SIZE / seg_elems;

	return (segs == 0 ? 1 : segs) * seg_elems;
}

int
client_rejoin(struct phub *h, char *err, size_t errlen)
{
	struct client_join *c = h->join;
	struct sockaddr_in *old_endpoints = h->endpoints;
	uint32_t old_n = h->n_endpoints;
	struct ep_order *order;
	bool retransmit;
	int rc;

	merge_reset(c);
	rc = join_exchange(h, c, &retransmit, err, errlen);
	if (rc == -ETIMEDOUT || rc == -ECANCELED) {
		rc = rc == -ETIMEDOUT ? -ECONNRESET : rc;
		goto out;
	}
	if (rc != 0) {
		rc = -EIO;
		goto out;
	}
	/*
	 * Segments and chunks are cut as before, or the segment table would not match: the
	 * chunk size counts in whole segments (as lib/layout cuts), whatever bytes it is named in.
	 */
	if (c->merge.ack.seg_elems != h->segment_elems || c->merge.total_chunks != h->n_chunks ||
	    chunk_elems(c->merge.ack.chunk_bytes, h->segment_elems) !=
	    phub_layout_chunk_elems(h->layout)) {
		client_set_err(err, errlen, "PBox %s came back with another geometry for job '%s' "
				"(chunk_bytes %u, seg_elems %u, %u chunks; the session had %u, "
				"%u, %u)", h->server_name, h->job_name, c->merge.ack.chunk_bytes,
				c->merge.ack.seg_elems, c->merge.total_chunks, h->chunk_bytes,
				h->segment_elems, h->n_chunks);
		rc = -EIO;
		goto out;
	}
	order = calloc(c->merge.endpoint_count, sizeof(*order));
	pthread_mutex_lock(&h->lock);
	h->endpoints = NULL;
	rc = order == NULL ? -ENOMEM : endpoints_build(h, c, err, errlen);
	if (rc != 0) {
		free(h->endpoints);
		h->endpoints = old_endpoints;
		h->n_endpoints = old_n;
	}
	pthread_mutex_unlock(&h->lock);
	if (rc != 0) {
		free(order);
		client_set_err(err, errlen, "out of memory for %u endpoints",
				c->merge.endpoint_count);
		rc = -EIO;
		goto out;
	}
	free(old_endpoints);
	free(h->ep_order);
	h->ep_order = order;
	for (uint32_t s = 0; s < h->n_segs; s++)
		h->segs[s].endpoint = c->chunk_map[h->segs[s].chunk];
	pthread_mutex_lock(&h->lock);
	h->job_id = c->merge.ack.job_id;
	h->token = c->token;
	h->first_iteration = c->merge.ack.iteration;
	pthread_mutex_unlock(&h->lock);
	rc = client_auth_commit(h) != 0 ? -EIO : 0;
out:
	merge_reset(c);
	return rc;
}

void
client_leave(struct phub *h)
{
	struct pollfd pfd = { .fd = h->fd, .events = POLLIN };
	uint8_t buf[PHUB_WIRE_HDR_LEN + 4 + PHUB_WIRE_ERROR_MSG_MAX];
	struct phub_wire_msg msg;
	uint64_t end;
	uint32_t last = 0;
	int len;

	if (h->token == 0 || h->fd < 0)
		return;
	for (uint32_t k = 0; k < h->n_keys; k++)
		if (phub_wire_iter_cmp(h->keys[k].sub_iter, last) > 0)
			last = h->keys[k].sub_iter;
	phub_wire_msg_init(&msg, PHUB_WIRE_OP_LEAVE);
	msg.flags |= h->tx_flags;
	msg.job_id = h->job_id;
	msg.session_token = h->token;
	msg.worker_rank = h->rank;
	msg.iteration = last;
	/* A silent PBox would only make us wait: tell it once and go. */
	end = client_now_ns() +
		(h->error == -ECONNRESET ? 0 : (uint64_t)CLIENT_LEAVE_MS * 1000000u);
	do {
		uint64_t now;

		if (h->auth)
			msg.flags = (uint8_t)((msg.flags | PHUB_WIRE_F_AUTH) & ~PHUB_WIRE_F_CSUM);
		len = phub_wire_encode(buf, sizeof(buf), &msg);
		if (len > 0 && h->auth &&
		    !client_auth_tx(h, &h->ctrl, buf, (size_t)len, NULL, 0))
			len = -1;
		if (len > 0)
			sendto(h->fd, buf, (size_t)len, 0, (const struct sockaddr *)&h->ctrl,
					sizeof(h->ctrl));
		msg.flags |= PHUB_WIRE_F_RETRANSMIT;
		now = client_now_ns();
		for (uint64_t until = now + (uint64_t)LEAVE_RTO_MS * 1000000u;
		     now < until && now < end; now = client_now_ns()) {
			struct phub_wire_msg in;
			ssize_t n;

			if (poll(&pfd, 1, (int)((until - now) / 1000000u) + 1) <= 0)
				continue;
			n = recv(h->fd, buf, sizeof(buf), 0);
			if (n > 0 && phub_wire_parse(buf, (size_t)n, &in) == PHUB_DROP_OK &&
			    in.opcode == PHUB_WIRE_OP_LEAVE_ACK && in.session_token == h->token &&
			    (!h->auth || client_auth_rx(h, &h->ctrl, buf, &in)))
				return;
		}
	} while (client_now_ns() < end);
}
