/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-loadgen's shared state: options, the port, the emulated workers and the counters. */

#ifndef LOADGEN_H
#define LOADGEN_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_common.h>
#include <rte_ether.h>
#include <rte_log.h>
#include <rte_mbuf.h>

#include "auth/phub_auth.h"
#include "layout/phub_layout.h"
#include "net/phub_net.h"
#include "util/phub_rtt.h"
#include "wire/phub_wire.h"

#define LG_BURST 32
#define LG_MAX_WORKERS 64
/* Entries of --workers W1,W2,...: one run each, in one process and one port connection. */
#define LG_MAX_RUNS_W 16
/* Endpoints a JOIN_ACK may name: the PBox's (port, lcore) pairs, at most 16 x 64. */
#define LG_MAX_ENDPOINTS 1024
/* Ethernet + IPv4 without options + UDP: the bytes in front of every PHub datagram. */
#define LG_L2_L4_LEN (RTE_ETHER_HDR_LEN + 20 + 8)
/* Ethernet + IPv4 + UDP + the PHub header: the head mbuf of a PUSH. */
#define LG_HEAD_LEN (LG_L2_L4_LEN + PHUB_WIRE_HDR_LEN)
/* The same with the AUTH extension (--auth): the MAC's sequence number and tag. */
#define LG_HEAD_LEN_AUTH (LG_HEAD_LEN + PHUB_WIRE_AUTH_TRAILER_LEN)
/*
 * --blast: with nothing back for this long while frames are out, they are taken as lost and the
 * window reopens. Long enough that a forwarder preempted on a shared CPU is not taken for lossy.
 */
#define LG_BLAST_LOSS_US 50000

extern int lg_logtype;
#define LG_LOG(level, fmt, ...) \
	rte_log(RTE_LOG_ ## level, lg_logtype, "phub-loadgen: " fmt "\n", ## __VA_ARGS__)

struct lg_options {
	char job[PHUB_WIRE_JOB_NAME_LEN];
	uint64_t nonce[LG_MAX_RUNS_W];	/* run r's is nonce[r % n_nonces] */
	uint16_t n_nonces;
	double duration_s;		/* run time when iterations is 0 */
	uint64_t iterations;		/* exchanges after the initial round; 0: use time */
	uint32_t pbox_ipv4;		/* host order */
	uint32_t worker_ipv4;		/* worker i is worker_ipv4 + i */
	uint32_t keys;			/* synthetic layout: keys x key_elems fp32 */
	uint32_t key_elems;
	uint32_t chunk_bytes;		/* asked for in JOIN; 0 = the PBox's */
	uint32_t window;		/* PUSH segments in flight per worker */
	uint32_t rto_us;		/* retransmission timeout before the first RTT sample */
	uint32_t rto_min_us;		/* the RTO from the RTT estimate, never below this */
	uint32_t rto_max_us;		/* nor above this */
	uint32_t payload_bytes;		/* --blast: element bytes per frame */
	uint32_t mtu;
	uint16_t workers[LG_MAX_RUNS_W];	/* --workers 2,4: one run per entry (and repeat) */
	uint16_t n_workers_list;
	uint16_t repeat;		/* the list of runs, this many times */
	uint16_t base_port;		/* PBox control port; data lcore k is base + 1 + k */
	uint16_t worker_udp;		/* worker i sends from worker_udp + i */
	uint16_t port_id;
	uint8_t optimizer;		/* enum phub_opt_type */
	bool blast;
	bool udp_csum;			/* full UDP checksum, as a kernel sender would */
	bool json;
	bool p3;			/* priority = key index, keys pushed last first */
	bool reflect;			/* server side of --blast (reflect.c) */
	bool reflect_acks;		/* and ACK-sized frames, W - 1 per W frames of a worker */
	bool reflect_ackv;		/* and one ACKV-sized frame per worker and burst, as ACKV */
	bool reflect_sum;		/* and each group's aggregation and SGD step (reflect.c) */
	bool no_ackv;			/* workers ask for one ACK per PUSH, not ACKV */
	bool auth;			/* authenticated sessions (lib/auth), as libphub's */
	uint8_t priority;		/* every PUSH's priority (with --p3: plus the key) */
	/* --bulk-workers: a second job beside this one, on the same port (struct lg.bulk). */
	uint16_t bulk_workers;
	uint8_t bulk_priority;
	uint32_t bulk_window;
};

/* One segment of the model as every worker pushes it. */
struct lg_segment {
	uint32_t chunk_id;
	uint32_t elem_offset;		/* within the chunk */
	uint32_t elem_count;
	uint32_t payload_sum;		/* raw 16-bit ones' complement sum of the payload */
	uint16_t seg_index;
	uint16_t seg_count;
	uint16_t dst_udp;		/* the data lcore that owns the chunk */
	uint16_t lane;			/* --auth: its stream, 1 + the JOIN_ACK's endpoint */
	uint8_t priority;
	uint32_t key;			/* index of its key in the layout */
};

/* --p3: iterations whose per-key completion times are kept, for their medians. */
#define LG_P3_MAX_ITERS 4096

/* Per (worker, segment) state for the current iteration. */
enum lg_seg_state {
	LG_SEG_IDLE = 0,		/* not sent yet this iteration */
	LG_SEG_PUSHED,			/* sent, neither ACK nor MODEL yet */
	LG_SEG_ACKED,			/* ACK in, waiting for MODEL */
	LG_SEG_DONE,			/* MODEL in */
};

struct lg_worker {
	struct rte_ether_addr mac;
	uint32_t ipv4;
	uint16_t udp;
	uint16_t rank;
	uint64_t token;
	uint32_t job_id;
	bool joined;
	uint32_t inflight;		/* PUSHED segments */
	uint32_t done;			/* DONE segments this iteration */
	uint32_t next;			/* next segment to send this iteration */
	uint8_t *state;			/* n_segments enum lg_seg_state */
	uint64_t *sent_tsc;		/* n_segments: last transmission */
	uint8_t *tries;			/* n_segments: its PUSH sent again this iteration */
	uint32_t *ack_hi;		/* n_endpoints: the latest PUSH stamp answered from there */
	uint64_t probe_tsc;		/* the last probe of a path that answered nothing newer */
	uint16_t *endpoint_of_chunk;	/* JOIN_ACK's chunk map */
	struct phub_wire_endpoint endpoints[LG_MAX_ENDPOINTS];
	uint16_t n_endpoints;
	struct phub_wire_join_ack_merge ack_merge;
	/*
	 * --auth: the JOIN's key exchange (lib/auth, as libphub's) and the session's lanes:
	 * 0 the control port, 1 + k endpoint k, the PBox's numbering.
	 */
	struct phub_auth_initiator *auth_join;
	struct phub_auth_lane *lanes;
	uint16_t n_lanes;
};

struct lg_stats {
	uint64_t tx_pkts;
	uint64_t tx_bytes;		/* Ethernet frames without CRC */
	uint64_t rx_pkts;
	uint64_t rx_bytes;
	uint64_t pushes;		/* PUSH datagrams sent, first transmissions */
	uint64_t push_bytes;		/* their element bytes */
	uint64_t retransmits;		/* PUSH sent again */
	uint64_t pulls;
	uint64_t acks;
	uint64_t ackv;			/* ACKV datagrams (their entries count in acks) */
	uint64_t models;		/* MODEL datagrams of the current iteration taken */
	uint64_t model_bytes;
	uint64_t replays;		/* ACK or MODEL with REPLAY */
	uint64_t stale;			/* answers for another iteration or a done segment;
					 * --blast: frames that came back not as a PUSH */
	uint64_t errors;		/* ERROR datagrams */
	uint64_t other;			/* none of the above; --blast: frames lost */
	uint64_t auth_failed;		/* --auth: answers whose MAC or number failed, dropped */
	uint64_t tx_full;		/* bursts the port took only partly */
	uint64_t exchanges;		/* whole-model iterations after the initial round */
	uint64_t busy_tsc;		/* TSC of the loop turns that received or sent frames */
	uint64_t rtt_samples;		/* answers whose echoed stamp gave a round trip */
};

struct lg {
	struct lg_options opt;
	struct rte_mempool *pool;	/* direct mbufs, large enough for a whole frame */
	struct rte_mempool *hdr_pool;	/* small mbufs for the headers of chained PUSHes */
	struct rte_mempool *indirect_pool;
	struct rte_mbuf *payload;	/* the gradient every PUSH carries, shared */
	/*
	 * Each chained PUSH points at the gradient through a reference of its own (lib/net's extref): an
	 * indirect mbuf on the one payload mbuf cost two locked refcount updates per frame (16 %
	 * of the generator's CPU at 1 KB), and the generator must stay ahead of what it measures.
	 * Shared by the jobs of the process (one lcore).
	 */
	struct phub_net_extref_stack *refs;
	struct rte_ether_addr port_mac;
	struct rte_ether_addr pbox_mac;
	bool chained_tx;		/* the port takes multi-segment frames */
	uint64_t tsc_hz;

	/* The session: one layout for all workers. */
	struct phub_layout *layout;
	struct lg_segment *segs;
	uint32_t n_segments;
	uint32_t *chunk_first_seg;	/* n_chunks + 1 */
	uint32_t n_chunks;
	uint32_t seg_elems;
	uint32_t iteration;
	uint32_t chunks_cap;		/* chunk map entries per worker */
	unsigned int run;		/* index of the run in this process */
	uint16_t n_workers;		/* of this run */
	uint16_t max_workers;		/* allocated */
	struct lg_worker *workers;
	uint8_t mac_tag;		/* byte 4 of the workers' MACs: one per job of the process */

	/*
	 * The job that runs beside this one (--bulk-workers), on the same port: its own workers,
	 * session and counters; this job's loop receives for it and keeps its window full.
	 */
	struct lg *bulk;
	uint64_t push_cursor;		/* the current iteration's next (segment, worker) */
	uint64_t next_scan;		/* next retransmission scan */
	/*
	 * The retransmission timeout, as libphub's: RFC 6298 over the round trips that answers'
	 * echoed stamps give (lib/util/phub_rtt.h), --rto-us until the first.
	 */
	struct phub_rtt rtt;
	uint64_t rto_tsc;

	/* Frames waiting for the port. */
	struct rte_mbuf *txq[LG_BURST];
	uint16_t n_txq;

	/*
	 * --p3: the push order (positions to segment indexes, keys last to first, as backprop
	 * produces them), the MODELs still missing per key this iteration, and per key the time
	 * from the iteration's start to its last MODEL at every worker (us, one row a key).
	 */
	uint32_t *push_order;
	uint32_t n_keys;
	uint32_t *key_left;
	uint32_t *key_done_us;		/* n_keys x LG_P3_MAX_ITERS */
	uint32_t n_key_iters;		/* measured iterations recorded */
	bool measuring;
	uint64_t iter_start_tsc;

	struct lg_stats stats;
	uint64_t iter_ns_max;
	uint64_t *iter_ns;		/* duration of each counted exchange */
	uint64_t n_iter_ns;
	uint64_t cap_iter_ns;
};

extern volatile bool lg_quit;

/* frame.c: Ethernet/IPv4/UDP around PHub datagrams, and the way out. */
int lg_frame_control(struct lg *lg, const struct lg_worker *w, const void *datagram,
		uint16_t len);
struct rte_mbuf *lg_frame_push(struct lg *lg, struct lg_worker *w,
		const struct lg_segment *s, const struct phub_wire_msg *hdr);
void lg_tx(struct lg *lg, struct rte_mbuf *m);
void lg_tx_flush(struct lg *lg);
int lg_resolve_pbox(struct lg *lg, double timeout_s);
/*
 * The UDP payload of a received IPv4/UDP frame, with the destination and the source port
 * (src_udp may be NULL); NULL when not one.
 */
const uint8_t *lg_frame_udp_payload(struct rte_mbuf *m, uint32_t *dst_ip, uint16_t *dst_udp,
		uint16_t *src_udp, uint16_t *len);

/* session.c: the workers, JOIN, iterations, LEAVE. */
int lg_workers_init(struct lg *lg, uint16_t max_workers);
void lg_run_reset(struct lg *lg, uint16_t n_workers, unsigned int run);
void lg_workers_free(struct lg *lg);
/* Counts of the measured span in *measured, its length in *seconds. */
int lg_session_run(struct lg *lg, struct lg_stats *measured, double *seconds);

/* The job beside lg (--bulk-workers) on lg's port, and its end. */
int lg_bulk_init(struct lg *lg);
void lg_bulk_free(struct lg *lg);

/* blast.c: PUSH-sized frames as fast as the port takes them; what comes back is counted. */
int lg_blast_run(struct lg *lg, struct lg_stats *measured, double *seconds);

/* reflect.c: the floor of the PBox's packet path, the server side of --blast, until a signal. */
int lg_reflect_run(struct lg *lg, bool acks, bool ackv);

/* blast.c: after the last --blast run, the server's last answers read and freed. */
void lg_blast_drain(struct lg *lg);

#endif /* LOADGEN_H */
