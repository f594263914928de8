/* SPDX-License-Identifier: BSD-3-Clause */
/* The session's private structures: keys, segments, operations, heaps and the progress state. */

#ifndef PHUB_CLIENT_PRIV_H
#define PHUB_CLIENT_PRIV_H

#include <assert.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * phub.h first: its copy of enum phub_dtype is then the one compiled into libphub, and the
 * static_asserts below hold it to the tree's definition, PHUB_FOREACH_DTYPE of wire/phub_types.h.
 */
#include "phub.h"

#include "auth/phub_auth.h"
#include "layout/phub_layout.h"
#include "util/phub_rtt.h"
#include "wire/phub_wire.h"

/* Ranks of a job at most: the PBox's bitmap (PHUB_ENGINE_MAX_WORKERS). */
#define CLIENT_MAX_RANKS 256
/* Membership changes of an elastic job kept for phub_world_change() (the PBox's bound). */
#define CLIENT_MAX_CHANGES 1024

#define CLIENT_DTYPE_SAME_(n, v, sz, s) \
	static_assert(PHUB_DTYPE_##n == (v), "phub.h: PHUB_DTYPE_" #n " differs from phub_types.h");
PHUB_FOREACH_DTYPE(CLIENT_DTYPE_SAME_)
#undef CLIENT_DTYPE_SAME_
#define CLIENT_DTYPE_ONE_(n, v, sz, s) +1
static_assert(PHUB_DTYPE_COUNT == 0 PHUB_FOREACH_DTYPE(CLIENT_DTYPE_ONE_),
	      "phub.h: PHUB_DTYPE_COUNT differs from phub_types.h");
#undef CLIENT_DTYPE_ONE_

/* Defaults and limits of struct phub_connect_params. */
enum {
	CLIENT_MTU_DEFAULT = 1500,
	CLIENT_WINDOW_DEFAULT = 256 * 1024,
	CLIENT_RTO_MIN_MS = 5,
	CLIENT_RTO_MAX_MS = 1000,
	CLIENT_DEAD_MS = 10000,
	CLIENT_CONNECT_TIMEOUT_MS = 10000,
	CLIENT_CONNECT_SLICE_MS = 100,	/* phub_connect() looks at the initial round */
	CLIENT_SOCKET_BUFFER = 4 << 20,	/* asked of the kernel; it may give less */
	CLIENT_SOCKET_RCVBUF_FORCE = 32 << 20,	/* receive buffer where rmem_max may be passed */
	CLIENT_BATCH = 32,		/* datagrams per sendmmsg/recvmmsg */
	CLIENT_TICKET_BUCKETS = 1024,
	CLIENT_ERRMSG = 256,
	CLIENT_LEAVE_MS = 500,		/* LEAVE is answered within this or not waited for */
	/*
	 * One UDP GSO send: at most this many datagrams (the kernel's UDP_MAX_SEGMENTS was 64
	 * before Linux 6.9) and this many payload bytes (an IPv4 datagram's 65507, with room).
	 */
	CLIENT_GSO_MAX_SEGS = 64,
	CLIENT_GSO_MAX_BYTES = 65000,
	CLIENT_GRO_BUF = 65536,		/* a receive buffer with UDP_GRO: one coalesced skb */
};

/*
 * One segment's state for the iteration in seg->iter. A segment moves
 * DONE -> QUEUED -> SENT -> ACKED -> DONE once per pushed iteration; a pull of a model whose
 * broadcast went by moves it DONE -> ACKED with repull set: its PULL waits in the send heap like
 * a PUSH and, once sent, holds the MODEL's bytes of the window.
 */
enum seg_state {
	SEG_DONE = 0,	/* the MODEL of iter is in (or iter is the job's start) */
	SEG_QUEUED,	/* PUSH of iter waits in the send heap */
	SEG_SENT,	/* PUSH of iter in flight: counts in the window, timer = retransmit */
	SEG_ACKED,	/* waiting for the MODEL of iter: timer = PULL */
};

/* One datagram's worth of one chunk: what moves on the wire. */
struct seg {
	/* Fixed at connect. */
	uint32_t chunk;
	uint32_t key;			/* index in h->keys */
	uint32_t key_elem;		/* first element within the key */
	uint32_t chunk_elem;		/* first element within the chunk (wire elem_offset) */
	uint32_t n_elems;
	uint16_t seg_index;
	uint16_t seg_count;
	uint16_t endpoint;
	/* Progress thread only. */
	uint8_t state;			/* enum seg_state */
	uint8_t tries;			/* timeouts since progress: back-off exponent */
	bool next_pending;		/* the key's next push waits for this segment's MODEL */
	bool repull;			/* a pull wants the MODEL that went by: PULL it */
	bool charged;			/* that PULL holds window bytes until the MODEL */
	bool pulled_overtaken;		/* PULLed as lost because a later MODEL came first */
	bool model_wait;		/* ACKED, never PULLed: in its endpoint's wait list */
	uint32_t iter;
	uint32_t first_stamp;		/* aux of the PUSH's first transmission: its place */
	uint32_t tx_stamp;		/* aux of its latest transmission */
	uint32_t timer_pos;		/* 1 + index in the timer heap, 0 when not in it */
	uint32_t send_pos;		/* 1 + index in the send heap, 0 when not in it */
	uint32_t send_prio;		/* send heap order: priority, then queueing order */
	uint64_t send_seq;
	uint64_t deadline_ns;		/* the timer's; in a wait list, when its wait ends */
	/* Its endpoint's wait list, by first_stamp: 1 + id of the neighbour, 0 for none. */
	uint32_t wait_prev;
	uint32_t wait_next;
};

enum op_type {
	OP_PUSH,
	OP_PULL,
	OP_PUSHPULL,
};

/* One call of phub_push/pull/pushpull: a ticket. */
struct op {
	struct op *next;		/* submission list, then the key's FIFO */
	struct op *hnext;		/* bucket of the pending-ticket table */
	const void *grad;		/* PUSH, PUSHPULL; NULL: zeros (the initial round) */
	void *out;			/* PULL, PUSHPULL; may be NULL for PUSHPULL */
	phub_done_fn cb;
	void *arg;
	int ticket;
	uint8_t type;			/* enum op_type */
	uint8_t wire_prio;		/* the header's priority byte */
	uint32_t prio;
	uint32_t key;
	uint32_t iter;
	uint32_t n_acked;		/* segments ACKed (PUSH, PUSHPULL) */
	uint32_t n_models;		/* segments whose MODEL landed (PULL, PUSHPULL) */
	/* The key's step hyper-parameters when submitted (phub_set_key_hyper): HYPER. */
	bool hyper;
	float hyper_lr;
	float hyper_weight_decay;
};

struct key {
	uint32_t key_id;
	uint32_t n_elems;
	uint32_t first_seg;
	uint32_t n_segs;
	uint32_t sub_iter;		/* latest iteration submitted for push; under h->lock */
	/* phub_set_key_hyper(), under h->lock: sent with every push submitted after it. */
	bool hyper;
	float hyper_lr;
	float hyper_weight_decay;
	/* Progress thread: the newest iteration an operation on the key completed with. */
	uint32_t done_iter;
	bool done_any;
	struct op *head;		/* progress thread: head is the active op */
	struct op *tail;
};

/*
 * What a PBox endpoint answered last. One endpoint (one lcore) answers in the order it received,
 * so an answer to a later datagram means an earlier one without answer was lost; across
 * endpoints the order means nothing (each lcore drains its own queue).
 */
struct ep_order {
	uint32_t ack_hi;		/* newest transmission stamp an ACK or replay echoed */
	uint32_t model_hi;		/* newest first_stamp of a segment whose MODEL came */
	/*
	 * The segments ACKed here and waiting for their MODEL, never PULLed, oldest push first
	 * (1 + id, 0: empty). Overtaken ones are a prefix; they wait outside the timer heap.
	 */
	uint32_t wait_head;
	uint32_t wait_tail;
};

/* An indexed binary min-heap of segment ids; the order is the heap's own. */
/*
 * A heap entry carries its own order, (hi, lo), beside the segment's id: a comparison reads the
 * heap's array only, not the segment (72 bytes apart, a cache miss each in a large model).
 */
struct seg_heap_ent {
	uint64_t lo;			/* the send heap's queueing order; the timer heap's deadline */
	uint32_t hi;			/* the send heap's priority; 0 in the timer heap */
	uint32_t id;
};

struct seg_heap {
	struct seg_heap_ent *ents;
	uint32_t n;
};

/* A UDP_SEGMENT or UDP_GRO control message. */
union client_cmsg {
	char buf[CMSG_SPACE(sizeof(int))];
	struct cmsghdr align;
};

/*
 * A batch of datagrams for sendmmsg: a header of ours, the payload by reference. client_tx_flush()
 * sends runs of them to one destination as one message each (UDP GSO): msgs, iov and n_dgrams
 * describe those messages.
 */
struct tx_batch {
	struct iovec iov[CLIENT_BATCH][2];
	unsigned int iovlen[CLIENT_BATCH];
	struct sockaddr_in dst[CLIENT_BATCH];
	uint8_t hdr[CLIENT_BATCH][PHUB_WIRE_HDR_LEN_HYPER + PHUB_WIRE_AUTH_TRAILER_LEN];
	unsigned int n;
	/* The messages of one sendmmsg, built from the datagrams. */
	struct mmsghdr msgs[CLIENT_BATCH];
	struct iovec msg_iov[2 * CLIENT_BATCH];
	unsigned int n_dgrams[CLIENT_BATCH];
	union client_cmsg cmsg[CLIENT_BATCH];
};

struct rx_batch {
	struct mmsghdr msgs[CLIENT_BATCH];
	struct iovec iov[CLIENT_BATCH];
	struct sockaddr_in src[CLIENT_BATCH];
	union client_cmsg cmsg[CLIENT_BATCH];
	uint8_t *buf;			/* CLIENT_BATCH buffers of rx_size */
	size_t rx_size;
};

struct client_join;

struct phub {
	/*
	 * Fixed once phub_connect() returns: read by every thread; but for the session (job_id,
	 * token, endpoints, first_iteration), which a re-JOIN after a PBox restart changes on
	 * the progress thread, under lock for phub_info().
	 */
	int fd;				/* the socket; only the progress thread uses it */
	int wake_fd;			/* eventfd: the API wakes the progress thread */
	struct sockaddr_in ctrl;	/* PBox control port */
	struct sockaddr_in *endpoints;	/* PBox data ports */
	uint32_t n_endpoints;
	struct phub_layout *layout;
	struct key *keys;
	uint32_t n_keys;
	struct seg *segs;
	uint32_t n_segs;
	uint32_t *chunk_first_seg;	/* chunk -> its first segment in segs */
	uint32_t n_chunks;
	uint32_t job_id;
	uint64_t token;
	uint16_t rank;
	uint16_t world_size;
	uint8_t dtype;
	uint8_t tx_flags;		/* PHUB_WIRE_F_CSUM or 0 */
	/* Progress thread: UDP GSO on send, UDP_GRO on receive (off: refused, or the flag). */
	bool gso_on;
	bool gro_on;
	uint32_t elem_size;
	uint32_t chunk_bytes;
	uint32_t segment_elems;
	uint32_t mtu;			/* the path MTU learnt at JOIN (for HYPER) */
	uint32_t first_iteration;
	uint32_t window_bytes;
	uint64_t rto_min_ns;
	uint64_t rto_max_ns;
	uint64_t dead_ns;
	uint32_t connect_timeout_ms;
	uint64_t start_ns;		/* origin of the aux transmit stamps */
	uint8_t *zeros;			/* a segment of zeros: start without weights */
	char server_name[32];		/* "a.b.c.d:port", for messages */
	char job_name[PHUB_WIRE_JOB_NAME_LEN];
	pthread_t thread;
	bool thread_started;
	struct client_join *join;	/* the JOIN, kept to send it again after a PBox restart */
	/* PHUB_CONNECT_F_AUTH (client_auth.c); the progress thread's once connected. */
	bool auth;
	uint32_t n_auth_lanes;
	struct phub_auth_lane *auth_lanes;	/* 1 + n_endpoints */
	struct phub_auth_keys auth_keys;	/* the session's */
	struct phub_auth_initiator auth_join;	/* the JOIN exchange (one key pair per handle) */

	/* Shared between the API and the progress thread, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* a ticket completed or the session failed */
	struct op *sub_head;		/* submitted, not yet taken by the progress thread */
	struct op *sub_tail;
	struct op *pending[CLIENT_TICKET_BUCKETS];
	uint32_t n_pending;
	int next_ticket;		/* the last ticket handed out */
	bool tickets_wrapped;		/* next_ticket went past INT32_MAX at least once */
	int error;			/* 0, or the -errno every call returns from now on */
	bool stale;			/* rolled back: -ESTALE until phub_resume() */
	bool stop;
	char errmsg[CLIENT_ERRMSG];
	struct phub_stats pub_stats;	/* snapshot published by the progress thread */
	/* Elastic jobs: each rank's first iteration without it, UINT32_MAX while it is in. */
	uint32_t removed_from[CLIENT_MAX_RANKS];
	uint16_t world_live;		/* the ranks left */
	/* The membership changes taken, in order (at most CLIENT_MAX_CHANGES are kept). */
	struct phub_world_change changes[CLIENT_MAX_CHANGES];
	atomic_bool sleeping;		/* the progress thread is (about to be) in ppoll */

	/* Progress thread only. */
	struct seg_heap send_heap;	/* QUEUED PUSHes and repull PULLs by (priority, order) */
	struct seg_heap timer_heap;	/* SENT and PULLed ACKED segments by deadline */
	uint64_t send_seq;
	uint32_t inflight_bytes;	/* PUSH payload not ACKed + MODEL payload PULLed */
	uint32_t n_active;		/* ops in the keys' FIFOs */
	uint32_t n_waiting;		/* segments SENT or ACKED */
	struct phub_rtt rtt;		/* RFC 6298's estimator (client_node.c, rtt_sample) */
	uint64_t rto_ns;
	struct ep_order *ep_order;	/* per PBox endpoint: what was answered last */
	uint64_t push_probe_ns;		/* last PUSH resent without evidence of loss */
	uint64_t pull_probe_ns;		/* last PULL sent without evidence of loss */
	/*
	 * How often "a later MODEL came first, so this one was lost" proved right: 0 ..
	 * OVERTAKE_TRUST_MAX, decaying (client_node.c, overtake_outcome()).
	 */
	uint32_t overtake_trust;
	uint32_t overtake_guesses;	/* segments PULLed as overtaken, outcome not known yet */
	uint64_t last_heard_ns;		/* last valid datagram, or when work started */
	uint64_t last_ping_ns;
	uint32_t ping_seq;
	bool rejoin;			/* the PBox lost our session: JOIN again */
	struct phub_stats stats;
	struct tx_batch tx;
	struct rx_batch rx;
};

/* client.c */
uint64_t client_now_ns(void);
void client_fail(struct phub *h, int error, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void client_op_finish(struct phub *h, struct op *op, int status);
/* The caller's error text: formats into err unless it is NULL or errlen is 0. */
void client_set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* client_join.c: the JOIN and LEAVE exchanges, on the caller's thread. */
int client_join(struct phub *h, const struct phub_connect_params *p, char *err, size_t errlen);
void client_leave(struct phub *h);
void client_join_free(struct phub *h);
/*
 * The same JOIN again, on the progress thread, after the PBox lost the session: the new
 * session, endpoints and first_iteration are in h on success. 0, or -errno with the reason in
 * err: ECONNRESET no answer, EIO refused or another geometry, ECANCELED the session is closing.
 */
int client_rejoin(struct phub *h, char *err, size_t errlen);

/*
 * client_offload.c: UDP GSO and GRO. Send the datagrams queued in h->tx (runs of equal length
 * to one destination as one GSO message while the kernel takes them), then empty it.
 */
void client_tx_flush(struct phub *h);
/* Ask for UDP_GRO on the socket (on) or stop it; false if the kernel refused. */
bool client_gro_set(struct phub *h, bool on);
/*
 * The length of the datagram at offset off of a received buffer of len bytes that the kernel
 * coalesced from datagrams of gso_size bytes each (the last may be shorter); gso_size 0: the
 * buffer is one datagram. 0 past the end.
 */
size_t client_gro_dgram_len(size_t len, size_t gso_size, size_t off);
/* The gso_size of a received message's UDP_GRO control message; 0 if it has none. */
size_t client_gro_size(const struct msghdr *m);

/* client_node.c: the progress thread. */
int client_node_init(struct phub *h);
void client_node_free(struct phub *h);
void *client_node_main(void *arg);

/* client_auth.c: PHUB_CONNECT_F_AUTH. */
int client_auth_init(struct phub *h, const struct phub_connect_params *p);
void client_auth_free(struct phub *h);
/* A JOIN exchange begins: a fresh ephemeral key. */
void client_auth_join_start(struct phub *h);
/* A JOIN datagram written for mtu less the extension: its key and MAC; new length or < 0. */
int client_auth_join_seal(struct phub *h, uint8_t *buf, size_t len, size_t cap);
/* A JOIN_ACK datagram: true when it proves the PBox holds the PSK and our key exchange. */
bool client_auth_join_ack(struct phub *h, const uint8_t *buf, const struct phub_wire_msg *msg);
/* The JOIN exchange is done (endpoints known): its keys become the session's. */
int client_auth_commit(struct phub *h);
/* Seal a datagram to dst (hdr encoded with flag AUTH); false: do not send it. */
bool client_auth_tx(struct phub *h, const struct sockaddr_in *dst, uint8_t *hdr, size_t hdr_len,
		const void *payload, size_t payload_len);
/* Check a datagram from src; false: drop it (counted in rx_auth_failed). */
bool client_auth_rx(struct phub *h, const struct sockaddr_in *src, const uint8_t *buf,
		const struct phub_wire_msg *msg);

#endif /* PHUB_CLIENT_PRIV_H */
