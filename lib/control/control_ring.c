/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ring of PBoxes in the control plane (docs/hierarchy.md): a job declared with racks is this
 * rack's part of one job; its PBox offers each ring neighbour a RING_HELLO (job, nonce, ring
 * shape, its own token and data endpoint) until answered, then as a keep-alive; each HELLO or
 * HELLO_ACK taken is a link, and with both links the engine gets its ring peers. A neighbour
 * that falls silent, or comes back with another token (it restarted), ends the job with an
 * ERROR to every local worker that names the rack.
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "control_priv.h"
#include "util/phub_addr.h"

/*
 * The ring's retransmission timeout at least: a ring datagram crosses two PBoxes' queues and
 * the spine. A lost step is found by the ACKs of later ones (phub_ring_window), so the timeout
 * only covers a link fallen silent: a lost tail, or a neighbour descheduled. With a floor of
 * 10 ms, a PBox of a loaded 2-core machine (load 20) fell silent that long about twice a
 * second, and each time the window was halved and a window's worth resent (40 cuts in 20 s
 * on a 37.8 MB model); at 50 ms, 2 to 6.
 */
#define RING_RTO_FLOOR_MS 50u

/* Until a neighbour answers, it is offered a HELLO this often. */
#define HELLO_RETRY_NS (200 * 1000000ull)

/* Before a neighbour's MAC is known: the spine is one L2 segment, its IP stack takes it. */
static const uint8_t broadcast_mac[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

static uint16_t
self_pos(const struct phub_control_declared_job *d)
{
	for (uint16_t i = 0; i < d->n_racks; i++)
		if (d->racks[i].peer < 0)
			return i;
	return 0;	/* the config guarantees one */
}

/* The global rank of rack i's first rank: the ranks of the racks before it. */
static uint32_t
rack_base(const struct phub_control_declared_job *d, uint16_t i)
{
	uint32_t base = 0;

	for (uint16_t k = 0; k < i; k++)
		base += d->racks[k].ranks;
	return base;
}

void
control_ring_job_params(const struct phub_control *ctl, const struct phub_control_declared_job *d,
		struct phub_engine_job_params *p, struct phub_engine_ring_params *ring)
{
	uint16_t pos;

	if (d->n_racks < 2)
		return;
	pos = self_pos(d);
	memset(ring, 0, sizeof(*ring));
	ring->racks = d->n_racks;
	ring->pos = pos;
	ring->total_world = d->workers;
	ring->rank_base = rack_base(d, pos);
	/* Racks hold contiguous ranks in ring order: rank 0 is the first rack's. */
	ring->holds_rank0 = ring->rank_base == 0;
	ring->rto_ns = (uint64_t)(ctl->p.rto_min_ms > RING_RTO_FLOOR_MS ? ctl->p.rto_min_ms :
			RING_RTO_FLOOR_MS) * 1000000u;
	ring->rto_max_ns = (uint64_t)ctl->p.rto_max_ms * 1000000u;
	if (ring->rto_max_ns < ring->rto_ns)
		ring->rto_max_ns = ring->rto_ns;
	p->world_size = d->racks[pos].ranks;
	p->ring = ring;
}

/* Ours: random, never 0 (no session); a PBox that restarts has another. */
static uint64_t
new_token(const struct phub_control *ctl)
{
	uint64_t token = 0;

	if (getrandom(&token, sizeof(token), 0) != sizeof(token))
		token = control_now_ns(ctl) * 0x9e3779b97f4a7c15ull;
	return token != 0 ? token : 1;
}

static void
link_init(struct cring_link *l, const struct phub_control_declared_job *d, uint16_t pos,
		uint64_t now)
{
	memset(l, 0, sizeof(*l));
	l->pos = pos;
	l->peer = (uint16_t)d->racks[pos].peer;
	memcpy(l->mac, broadcast_mac, sizeof(l->mac));
	/* Silent since the job began: a neighbour gets worker_dead_ms to show up. */
	l->heard_ns = now;
	l->next_hello_ns = now;
	l->newest_ckpt = PHUB_WIRE_RING_HELLO_NONE;
}

void
control_ring_start(struct phub_control *ctl, struct cjob *cj,
		const struct phub_control_declared_job *d)
{
	struct cring *r = &cj->ring;
	uint16_t racks = d->n_racks;
	uint64_t now = control_now_ns(ctl);

	memset(r, 0, sizeof(*r));
	r->decl = d;
	r->pos = self_pos(d);
	r->token = new_token(ctl);
	link_init(&r->prev, d, (uint16_t)((r->pos + racks - 1u) % racks), now);
	link_init(&r->next, d, (uint16_t)((r->pos + 1u) % racks), now);
	control_ring_auth_start(r);
}

bool
control_ring_rank_refused(struct phub_control *ctl, const struct phub_control_peer *to,
		const struct phub_wire_msg *msg, const struct phub_wire_join *join)
{
	const struct phub_control_declared_job *d = control_declared_find(ctl, join->name);
	uint16_t self, holder;
	uint32_t base = 0;
	char addr[16];

	/* Only a worker with the nonce learns where the racks are; the others get BAD_NONCE. */
	if (d == NULL || d->n_racks < 2 || d->nonce != join->nonce)
		return false;
	self = self_pos(d);
	for (holder = 0; holder < d->n_racks; holder++) {
		if (join->rank < base + d->racks[holder].ranks)
			break;
		base += d->racks[holder].ranks;
	}
	if (holder == self)
		return false;
	if (holder == d->n_racks) {
		control_send_error(ctl, to, msg, PHUB_WIRE_ERR_RANK_RANGE, "job %s: rank %u is "
				"beyond its %u ranks", join->name, join->rank, d->workers);
		return true;
	}
	phub_ipv4_text(ctl->p.ring_peers[d->racks[holder].peer].ipv4, addr, sizeof(addr));
	control_send_error(ctl, to, msg, PHUB_WIRE_ERR_RANK_RANGE, "job %s: rank %u is rack %s's "
			"(%s): join that rack's PBox; this one (%s) holds ranks %u .. %u",
			join->name, join->rank, d->racks[holder].name, addr, ctl->p.rack_name,
			rack_base(d, self), rack_base(d, self) + d->racks[self].ranks - 1u);
	return true;
}

/* Our HELLO for a job, naming the data endpoint of the port it leaves by. */
static void
hello_fill(const struct phub_control *ctl, const struct cjob *cj, uint16_t port,
		struct phub_wire_ring_hello *h)
{
	const struct cring *r = &cj->ring;

	memset(h, 0, sizeof(*h));
	h->job_id = phub_engine_job_id(cj->job);
	snprintf(h->name, sizeof(h->name), "%s", r->decl->name);
	/* An authenticated job's nonce stays on its hosts: the spine sees a proof of it. */
	h->nonce = control_auth_ring_nonce(r->decl);
	h->token = r->token;
	h->racks = r->decl->n_racks;
	h->pos = r->pos;
	/* The ring this version runs: whole-segment datagrams, acknowledged by RING_ACKV. */
	h->caps = PHUB_WIRE_RING_CAP_ALL | (r->auth.on ? PHUB_WIRE_RING_CAP_AUTH : 0);
	h->endpoint_count = 1;
	if (ctl->p.n_ring_endpoints != 0)
		h->endpoints[0] = ctl->p.ring_endpoints[port < ctl->p.n_ring_endpoints ? port : 0];
	else
		h->endpoints[0] = ctl->p.endpoints[0];
	control_ring_hello_restore_fill(ctl, r, h);
}

static void
hello_send(struct phub_control *ctl, struct cjob *cj, const struct cring_link *l, uint8_t opcode,
		const struct phub_control_peer *to)
{
	struct phub_wire_ring_hello h;
	int len;

	hello_fill(ctl, cj, to->port, &h);
	len = phub_wire_ring_hello_write(ctl->buf, sizeof(ctl->buf), opcode, &h);
	/* An authenticated ring's: our key for the link and the MAC under the ring's PSK. */
	if (len > 0)
		len = control_ring_auth_seal(&cj->ring, l, ctl->buf, (size_t)len,
				sizeof(ctl->buf));
	if (len > 0) {
		control_send(ctl, to, ctl->buf, (size_t)len);
		ctl->stats.ring_hellos_sent++;
	}
}

static void hello_refuse(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_ring_hello *h, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* A HELLO that does not fit our ring: counted, logged, not answered. */
static void
hello_refuse(struct phub_control *ctl, const struct phub_control_peer *from,
		const struct phub_wire_ring_hello *h, const char *fmt, ...)
{
	char why[256], addr[16];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	phub_ipv4_text(from->ipv4, addr, sizeof(addr));
	ctl->stats.ring_hellos_refused++;
	control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "RING_HELLO from %s:%u (position %u) for job %s "
			"refused: %s", addr, from->udp_port, h->pos, h->name, why);
}

/* The ring job ends: every local worker learns which neighbour and why. */
static void
ring_fail(struct phub_control *ctl, struct cjob *cj, const struct cring_link *l,
		const char *why)
{
	const struct phub_control_ring_peer *peer = &ctl->p.ring_peers[l->peer];
	char text[PHUB_WIRE_ERROR_MSG_MAX], addr[16];
	struct phub_engine_job_info info;

	phub_engine_job_get_info(cj->job, &info);
	phub_ipv4_text(peer->ipv4, addr, sizeof(addr));
	snprintf(text, sizeof(text), "ring peer %s (%s) %s", peer->name, addr, why);
	control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s (id %u), ring position %u: %s: the job "
			"ends", info.name, info.job_id, cj->ring.pos, text);
	ctl->stats.ring_jobs_failed++;
	control_job_abort(ctl, cj->job, PHUB_WIRE_ERR_JOB_ABORTED, info.iteration_min + 1, text);
}

void
control_ring_fail(struct phub_control *ctl, struct cjob *cj, const struct cring_link *l,
		const char *why)
{
	ring_fail(ctl, cj, l, why);
}

/* Both neighbours known: the engine takes ring datagrams from prev and sends to next. */
static void
ring_link_engine(struct phub_control *ctl, struct cjob *cj)
{
	struct cring *r = &cj->ring;
	struct phub_engine_ring_link prev, next;

	if (r->linked || !r->prev.known || !r->next.known)
		return;
	/* prev's datagrams to us carry our token; ours to next carry next's. */
	prev.peer = r->prev.data;
	prev.token = r->token;
	prev.job_id = r->prev.job_id;
	next.peer = r->next.data;
	next.token = r->next.token;
	next.job_id = r->next.job_id;
	if (phub_engine_job_ring_peers(cj->job, &prev, &next) == 0) {
		r->linked = true;
		control_log(ctl, PHUB_CONTROL_LOG_INFO, "job %s: ring position %u of %u linked: "
				"prev %s, next %s", r->decl->name, r->pos, r->decl->n_racks,
				ctl->p.ring_peers[r->prev.peer].name,
				ctl->p.ring_peers[r->next.peer].name);
	}
}

/* Record a neighbour's HELLO(_ACK) in its link; false when it restarted (the job ended). */
static bool
link_take(struct phub_control *ctl, struct cjob *cj, struct cring_link *l,
		const struct phub_control_peer *from, const struct phub_wire_ring_hello *h)
{
	if (l->known && l->token != h->token) {
		ring_fail(ctl, cj, l, "restarted: its session of the job is a new one");
		return false;
	}
	l->known = true;
	l->token = h->token;
	l->job_id = h->job_id;
	memset(&l->data, 0, sizeof(l->data));
	l->data.ipv4 = h->endpoints[0].ipv4;
	l->data.udp_port = h->endpoints[0].udp_port;
	/* Its data leaves by the port its HELLO did: the frame's MAC is its. */
	memcpy(l->data.mac, from->mac, sizeof(l->data.mac));
	memcpy(l->mac, from->mac, sizeof(l->mac));
	l->heard_ns = control_now_ns(ctl);
	return true;
}

void
control_ring_input(struct phub_control *ctl, const struct phub_control_peer *from,
		const uint8_t *dgram, const struct phub_wire_msg *msg)
{
	const struct phub_control_declared_job *d;
	struct phub_wire_ring_hello h;
	struct phub_engine_job *job;
	struct cring_link *links[2];
	unsigned int n = 0;
	enum phub_drop_reason why;
	struct cring *r;
	struct cjob *cj;
	char addr[16];

	if (phub_wire_ring_hello_parse(msg->payload, msg->payload_len, &h) != PHUB_DROP_OK)
		return;		/* phub_wire_parse() checked it: cannot happen */
	h.job_id = msg->job_id;
	job = phub_engine_job_find(ctl->p.engine, h.name);
	if (job == NULL) {
		d = control_declared_find(ctl, h.name);
		/* Its first worker has not joined here yet: the neighbour offers again. */
		if (d != NULL && d->n_racks >= 2 && control_auth_ring_nonce(d) == h.nonce) {
			ctl->stats.ring_hellos_early++;
			return;
		}
		hello_refuse(ctl, from, &h, "no job of that name spans racks here");
		return;
	}
	cj = control_cjob(ctl, job);
	r = &cj->ring;
	if (r->decl == NULL) {
		hello_refuse(ctl, from, &h, "the job does not span racks here");
		return;
	}
	if (h.nonce != control_auth_ring_nonce(r->decl)) {
		hello_refuse(ctl, from, &h, "wrong nonce");
		return;
	}
	if (h.racks != r->decl->n_racks) {
		hello_refuse(ctl, from, &h, "a ring of %u racks; ours has %u", h.racks,
				r->decl->n_racks);
		return;
	}
	/* A segment's parts are the whole ring's choice: every PBox of it must cut them alike. */
	if ((h.caps & PHUB_WIRE_RING_CAP_ALL) != PHUB_WIRE_RING_CAP_ALL) {
		hello_refuse(ctl, from, &h, "ring format 0x%x; ours is 0x%x (another version)",
				h.caps & PHUB_WIRE_RING_CAP_ALL, PHUB_WIRE_RING_CAP_ALL);
		return;
	}
	if (r->prev.pos == h.pos)
		links[n++] = &r->prev;
	if (r->next.pos == h.pos)
		links[n++] = &r->next;
	if (n == 0) {
		hello_refuse(ctl, from, &h, "position %u is not a neighbour of ours (%u)", h.pos,
				r->pos);
		return;
	}
	/* The rack at that position is a configured peer, known by its address. */
	if (ctl->p.ring_peers[links[0]->peer].ipv4 != from->ipv4) {
		phub_ipv4_text(ctl->p.ring_peers[links[0]->peer].ipv4, addr, sizeof(addr));
		hello_refuse(ctl, from, &h, "position %u is rack %s, at %s", h.pos,
				ctl->p.ring_peers[links[0]->peer].name, addr);
		return;
	}
	/*
	 * An authenticated ring's HELLO: its MAC and number before anything changes; one that
	 * fails is counted, not answered. A neighbour that does not authenticate is refused.
	 */
	why = control_ring_auth_check(r, links[0], dgram, msg, &h);
	if (why == PHUB_DROP_AUTH_MISSING || why == PHUB_DROP_AUTH_UNEXPECTED)
		hello_refuse(ctl, from, &h, why == PHUB_DROP_AUTH_MISSING ? "the job requires an "
				"authenticated ring (jobs[].auth); the neighbour's is not" :
				"an authenticated ring; the job here does not require auth");
	if (why != PHUB_DROP_OK) {
		ctl->stats.drops[why]++;
		return;
	}
	/*
	 * A drained job (every worker left) whose neighbour has a new session of the name: the
	 * neighbour's old one ended, so nothing of ours is still needed there. It ends quietly; the
	 * neighbour offers its HELLO again, to our next job of the name. Failed instead, it sent
	 * JOB_ABORTED to nobody but counted as a failure, and a job that took the place of it
	 * before its end could be caught in that (see link_hello()).
	 */
	if (r->draining && links[0]->known && links[0]->token != h.token) {
		control_log(ctl, PHUB_CONTROL_LOG_INFO, "job %s: drained; ring peer %s has a new "
				"session of it: the old one ends", r->decl->name,
				ctl->p.ring_peers[links[0]->peer].name);
		phub_control_job_end(ctl, job);
		return;
	}
	/* A neighbour or this PBox restored from a checkpoint: the ring may have to go back. */
	if (control_ring_restore_hello(ctl, cj, links[0], &h) != CONTROL_RING_LINK)
		return;
	for (unsigned int i = 0; i < n; i++)
		if (!link_take(ctl, cj, links[i], from, &h) ||
		    control_ring_auth_take(ctl, cj, links[i], dgram, msg) != 0)
			return;
	ctl->stats.ring_hellos_taken++;
	if (msg->opcode == PHUB_WIRE_OP_RING_HELLO)
		hello_send(ctl, cj, links[0], PHUB_WIRE_OP_RING_HELLO_ACK, from);
	ring_link_engine(ctl, cj);
}

/* Offer a neighbour our HELLO if it is due: every 200 ms until it answers, then keep-alives. */
static void
link_hello(struct phub_control *ctl, struct cjob *cj, struct cring_link *l, uint64_t now)
{
	const struct phub_control_ring_peer *peer = &ctl->p.ring_peers[l->peer];
	struct phub_control_peer to;

	if ((int64_t)(now - l->next_hello_ns) < 0)
		return;
	/*
	 * A drained job offers no HELLO: its session is over for the neighbour too. A keep-alive
	 * that reached a neighbour's NEW job of the name (its workers joined again first) linked
	 * that job to this old session's token; when our own workers joined again, our new
	 * session's HELLO then looked like a restart of ours, and the neighbour aborted its new
	 * job ("ring peer ... restarted: its session of the job is a new one"). The drain needs
	 * none: it waits for the ring's data to fall quiet, not for HELLOs.
	 */
	if (cj->ring.draining)
		return;
	memset(&to, 0, sizeof(to));
	to.ipv4 = peer->ipv4;
	to.udp_port = peer->udp_port;
	to.port = peer->port;
	memcpy(to.mac, l->mac, sizeof(to.mac));
	hello_send(ctl, cj, l, PHUB_WIRE_OP_RING_HELLO, &to);
	l->next_hello_ns = now + (l->known ? (uint64_t)ctl->p.worker_dead_ms * 1000000u / 4 :
			HELLO_RETRY_NS);
}

void
control_ring_poll(struct phub_control *ctl, uint64_t now)
{
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct cjob *cj = &ctl->jobs[i];
		struct cring *r = &cj->ring;

		if (cj->job == NULL || r->decl == NULL)
			continue;
		link_hello(ctl, cj, &r->prev, now);
		/* A ring of two: one neighbour, one HELLO. */
		if (r->next.pos != r->prev.pos)
			link_hello(ctl, cj, &r->next, now);
		else
			r->next.next_hello_ns = r->prev.next_hello_ns;
	}
}

bool
control_ring_drain(struct phub_control *ctl, struct phub_engine_job *job)
{
	struct cring *r = &control_cjob(ctl, job)->ring;

	if (r->decl == NULL)
		return false;
	r->draining = true;
	r->drain_since_ns = control_now_ns(ctl);
	return true;
}

/*
 * A drained ring job ends when no ring datagram or RING_ACK has come for a while (three of the
 * longest retransmission timeouts, at least half a second): a step of ours that a neighbour
 * still lacks would be retransmitted and acknowledged within that; at the latest after
 * worker_dead_ms, when the neighbour would take us for dead anyway.
 */
static bool
ring_drained(struct phub_control *ctl, struct cjob *cj, uint64_t now)
{
	uint64_t dead_ns = (uint64_t)ctl->p.worker_dead_ms * 1000000u;
	uint64_t quiet_ns = 3 * (uint64_t)ctl->p.rto_max_ms * 1000000u;
	uint64_t prev_ns, next_ns;

	if (quiet_ns < 500000000u)
		quiet_ns = 500000000u;
	if (quiet_ns > dead_ns)
		quiet_ns = dead_ns;
	phub_engine_job_ring_silence(cj->job, now, &prev_ns, &next_ns);
	if (now - cj->ring.drain_since_ns < dead_ns &&
	    (now - cj->ring.drain_since_ns < quiet_ns || prev_ns < quiet_ns || next_ns < quiet_ns))
		return false;
	control_log(ctl, PHUB_CONTROL_LOG_INFO, "job %s: every worker left and the ring is quiet",
			cj->ring.decl->name);
	phub_control_job_end(ctl, cj->job);
	return true;
}

/* How long a neighbour has said nothing: no HELLO(_ACK), and no ring datagram (data_ns). */
static uint64_t
link_silence(const struct cring_link *l, uint64_t now, uint64_t data_ns)
{
	uint64_t control_ns = now > l->heard_ns ? now - l->heard_ns : 0;

	return control_ns < data_ns ? control_ns : data_ns;
}

bool
control_ring_check(struct phub_control *ctl, struct cjob *cj, uint64_t now)
{
	uint64_t dead_ns = (uint64_t)ctl->p.worker_dead_ms * 1000000u;
	struct cring *r = &cj->ring;
	uint64_t prev_ns, next_ns, silent;
	const struct cring_link *l;
	char why[96];

	if (r->decl == NULL)
		return false;
	if (r->draining)
		return ring_drained(ctl, cj, now);
	phub_engine_job_ring_silence(cj->job, now, &prev_ns, &next_ns);
	/* In a ring of two, prev and next are one PBox: any word from it counts for both. */
	if (r->prev.pos == r->next.pos) {
		prev_ns = prev_ns < next_ns ? prev_ns : next_ns;
		next_ns = prev_ns;
	}
	l = &r->prev;
	silent = link_silence(l, now, prev_ns);
	if (silent <= dead_ns) {
		l = &r->next;
		silent = link_silence(l, now, next_ns);
		if (silent <= dead_ns)
			return false;
	}
	snprintf(why, sizeof(why), "silent for %" PRIu64 " ms", silent / 1000000u);
	ring_fail(ctl, cj, l, why);
	return true;
}

bool
phub_control_job_ring_links(const struct phub_control *ctl, const struct phub_engine_job *job,
		struct phub_control_ring_link_info *prev, struct phub_control_ring_link_info *next)
{
	const struct cring *r = &ctl->jobs[phub_engine_job_slot(job)].ring;
	uint64_t now = control_now_ns(ctl), prev_ns, next_ns;
	const struct cring_link *links[2] = { &r->prev, &r->next };
	struct phub_control_ring_link_info *out[2] = { prev, next };

	if (ctl->jobs[phub_engine_job_slot(job)].job != job || r->decl == NULL)
		return false;
	phub_engine_job_ring_silence(job, now, &prev_ns, &next_ns);
	for (unsigned int i = 0; i < 2; i++) {
		const struct cring_link *l = links[i];

		if (out[i] == NULL)
			continue;
		memset(out[i], 0, sizeof(*out[i]));
		out[i]->rack = ctl->p.ring_peers[l->peer].name;
		out[i]->control_ipv4 = ctl->p.ring_peers[l->peer].ipv4;
		out[i]->pos = l->pos;
		out[i]->known = l->known;
		out[i]->data = l->data;
		out[i]->silent_ns = link_silence(l, now, i == 0 ? prev_ns : next_ns);
	}
	return true;
}
