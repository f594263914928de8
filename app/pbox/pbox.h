/* SPDX-License-Identifier: BSD-3-Clause */
/* The appliance's shared state: ports, per-lcore configuration, counters, and the control rings. */

#ifndef PBOX_H
#define PBOX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <rte_common.h>
#include <rte_ether.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>

#include "config/phub_config.h"
#include "engine/phub_ackv.h"
#include "engine/phub_engine.h"
#include "net/phub_memif_gate.h"
#include "net/phub_net.h"
#include "wire/phub_wire.h"

#include "ack.h"

#define PBOX_BURST 32
#define PBOX_RING_SIZE 4096
#define PBOX_MAX_PORTS PHUB_CONFIG_MAX_PORTS
#define PBOX_NO_QUEUE UINT16_MAX
/* Microseconds between TX drains when a burst is not full. */
#define PBOX_TX_DRAIN_US 50

extern int pbox_logtype;
#define PBOX_LOG(level, fmt, ...) \
	rte_log(RTE_LOG_ ## level, pbox_logtype, "phub.pbox: " fmt "\n", ## __VA_ARGS__)

/* Drops the appliance counts before a datagram reaches the wire validator. */
#define PBOX_NET_DROPS(_) \
	_(NOT_IPV4, "not_ipv4") \
	_(BAD_IPV4, "bad_ipv4") \
	_(NOT_FOR_US, "not_for_us") \
	_(IP_FRAGMENT, "ip_fragment") \
	_(NOT_UDP, "not_udp") \
	_(BAD_UDP, "bad_udp") \
	_(BAD_UDP_CSUM, "bad_udp_csum") \
	_(UNKNOWN_PORT, "unknown_udp_port") \
	_(RING_FULL, "ring_full")

enum pbox_net_drop {
#define PBOX_NET_DROP_ENUM(n, s) PBOX_NET_DROP_##n,
	PBOX_NET_DROPS(PBOX_NET_DROP_ENUM)
#undef PBOX_NET_DROP_ENUM
	PBOX_NET_DROP_MAX
};

extern const char *const pbox_net_drop_names[PBOX_NET_DROP_MAX];

struct pbox_port {
	uint16_t port_id;		/* DPDK port id */
	uint16_t n_queues;		/* RX = TX queues, one per serving lcore */
	uint16_t mtu;
	int socket;
	uint32_t ipv4;			/* host order */
	struct rte_ether_addr mac;
	struct pbox_ack_tmpl ack_tmpl;	/* what every ACK it sends has in common (ack.h) */
	enum phub_config_steering steering;	/* what works, after the start-up check */
	bool multi_seg_tx;		/* MODEL shares one payload mbuf under N headers */
	bool rx_l4_csum;		/* the NIC checks UDP checksums */
	bool rss_requested;		/* port configured for RSS on the UDP destination port */
	uint8_t rss_mode;		/* enum pbox_rss_mode (rss.h) */
	uint8_t rss_key[64];		/* the key asked for in PBOX_RSS_DPORT_KEY mode */
	char ifname[RTE_ETH_NAME_MAX_LEN];	/* net_tap's kernel interface */
	char name[PHUB_CONFIG_NAME_MAX];
};

/* One per data lcore: built before launch, read-only afterwards but for the counters. */
struct pbox_lcore_stats {
	uint64_t rx_pkts;
	uint64_t rx_bytes;
	uint64_t tx_pkts;
	uint64_t tx_bytes;
	uint64_t handed_off;		/* datagrams of another lcore's port, passed to it */
	uint64_t handed_in;
	uint64_t control;		/* datagrams passed to the main lcore */
	uint64_t arp_replies;
	uint64_t pongs;
	uint64_t models_sent;
	uint64_t acks_sent;
	uint64_t ackv_sent;		/* ACKV datagrams (ranks that asked in their JOIN) */
	uint64_t ackv_entries;		/* ACKs they carried */
	uint64_t acks_in_model;		/* ACKs a MODEL in the same burst made unneeded */
	uint64_t tx_dropped;
	uint64_t encode_errors;		/* a reply the wire encoder refused: a bug */
	uint64_t loops;
	uint64_t idle_sleeps;
	/*
	 * TSC cycles of the loop turns that did work (from the turn's start to its flush): over
	 * the wall time, how close the lcore is to saturated, which the spinning hides.
	 */
	uint64_t busy_cycles;
	/* The ring of PBoxes (all ring jobs): datagrams to the next PBox and from the previous. */
	uint64_t ring_out;		/* RING_REDUCE/RING_GATHER sent, retransmissions included */
	uint64_t ring_out_bytes;	/* their payload bytes */
	uint64_t ring_in;		/* RING_REDUCE/RING_GATHER received for a ring job */
	uint64_t ring_in_bytes;
	uint64_t ring_acks_out;		/* RING_ACKs sent to the previous PBox */
	uint64_t ring_acks_in;		/* RING_ACKs received from the next PBox */
	uint64_t ring_polls;		/* retransmission scans */
	uint64_t model_zero_copy;	/* MODEL broadcasts whose payload went by reference */
	uint64_t model_copied;		/* ... and copied (the reference was not free) */
	uint64_t model_inline;		/* ... under PBOX_MODEL_CHAIN_MIN: copied behind each header */
	uint64_t net_drops[PBOX_NET_DROP_MAX];
	/* PUSHes the engine took, by job slot: minus the slot's base, one job's (telemetry). */
	uint64_t job_pushes[PHUB_ENGINE_MAX_JOBS];
};

struct pbox_lcore {
	unsigned int lcore_id;
	uint16_t data_index;		/* index among data lcores; names the UDP port */
	uint16_t udp_port;
	uint16_t n_rxq;
	uint16_t rx_ports[PBOX_MAX_PORTS];	/* indices into pbox.ports */
	uint16_t queue[PBOX_MAX_PORTS];		/* per port index: this lcore's queue or NO_QUEUE */
	struct rte_ring *inbox;		/* from other lcores and the main lcore: mbufs to handle */
	struct rte_eth_dev_tx_buffer *tx[PBOX_MAX_PORTS];
	struct rte_mempool *pool;
	struct rte_mempool *indirect_pool;
	struct pbox_lcore_stats stats;
	struct phub_engine_stats engine_stats;
	uint64_t now_ns;		/* CLOCK_MONOTONIC, once per loop turn: the ring's clock */
	/* now_ns between reads of the clock, from the TSC (datapath.c, turn_clock()). */
	uint64_t clock_tsc, clock_ns;	/* the TSC and the clock at the last read */
	uint64_t clock_mult;		/* ns per TSC cycle, << 32 */
	uint64_t clock_sync_tsc;	/* TSC cycles between reads */
	uint64_t ring_poll_tsc;		/* next retransmission scan */
	/* Per job slot: where the next retransmission scan starts. */
	uint32_t ring_cursor[PHUB_ENGINE_MAX_JOBS];
	/* Elastic jobs: the membership change each job's segments were last scanned for. */
	uint32_t elastic_epoch[PHUB_ENGINE_MAX_JOBS];
	/*
	 * The MODEL payload by reference (send_model): each frame of a broadcast points into the
	 * job's model memory through a reference of its own (lib/net's extref; one shared by all frames
	 * cost 5 % of the lcore at 8 KB, 12 % at 1 KB in locked decrements), one per rank at most.
	 * Per port, whether the frames were all gone at the flush right after the broadcast (a
	 * driver that copies at TX, like net_memif, af_packet, tap) or not (a NIC's DMA: copy
	 * from then on).
	 */
	struct phub_net_extref_stack model_refs;
	bool model_copy[PBOX_MAX_PORTS];
	/*
	 * The references out are this turn's, in TX buffers that the turn's end flushes (several
	 * broadcasts by reference in one turn, one flush), and the ports they went to.
	 */
	bool model_refs_turn;
	bool model_refs_port[PBOX_MAX_PORTS];
	/* Per job slot: where the next release of window-held ring steps starts. */
	uint32_t ring_release_cursor[PHUB_ENGINE_MAX_JOBS];
	bool memif_gated;		/* has a queue on a net_memif port: see memif_gate.c */
	atomic_bool in_memif_section;	/* written by this lcore, read by the interrupt thread */
	/* Test hook (health.c): ms the lcore stands still at its next loop turn, then 0. */
	uint32_t test_stall_ms;
	/* The ACKs this loop turn owes to ranks that take ACKV, sent at its end (datapath.c). */
	struct phub_ackv_batch ackv;
	/* PUSH frames may be lent to the engine: the pools had plenty free at lend_checked_ns. */
	bool may_lend;
	uint64_t lend_checked_ns;
} __rte_cache_aligned;

/* How often a data lcore counts the pools' free mbufs to decide whether it may lend frames. */
#define PBOX_LEND_CHECK_NS 1000000u
/*
 * The smallest PUSH payload lent: at 1 KB the copy it saves (5 ns) is less than asking the
 * rank's session whether it takes ACKV once more (7 ns per PUSH, perf); at 8 KB it is 135 ns.
 */
#define PBOX_LEND_MIN_BYTES 4096u

/* Marks in mbuf->hash.usr of inbox mbufs: what the receiver does with them. */
enum pbox_inbox_kind {
	PBOX_INBOX_RX = 1,		/* a received frame to handle as if it came in */
	PBOX_INBOX_TX = 2,		/* a built frame to send on port mbuf->port */
};

struct phub_control;

struct pbox {
	struct phub_config cfg;
	struct phub_engine *engine;
	/*
	 * Held by the telemetry commands that read a job and by the main lcore while it frees
	 * one: the telemetry thread is not an RCU reader, and neither path is the fast path.
	 */
	pthread_mutex_t jobs_lock;
	struct rte_rcu_qsbr *qsbr;
	struct rte_ring *control_ring;	/* data lcores -> main lcore: control datagrams */
	/*
	 * lib/control's object, made by control.c; the main lcore alone uses it (checkpoint.c
	 * restores jobs into it and asks it what a ring job's files must keep).
	 */
	struct phub_control *control;
	uint16_t n_ports;
	struct pbox_port ports[PBOX_MAX_PORTS];
	uint16_t n_lcores;
	struct pbox_lcore *lcores;	/* n_lcores, by data index */
	/* lcore id -> data index, or -1 */
	int16_t lcore_index[RTE_MAX_LCORE];
	/* Layout servers: one per (port, queue), in cfg.lcore_params order. */
	uint32_t n_servers;
	struct phub_layout_server servers[PHUB_CONFIG_MAX_QUEUES];
	uint16_t server_lcore_index[PHUB_CONFIG_MAX_QUEUES];
	struct rte_mempool *pools[RTE_MAX_NUMA_NODES];
	struct rte_mempool *indirect_pools[RTE_MAX_NUMA_NODES];
	/* Control datagrams taken and dropped by the main lcore (it alone writes them). */
	uint64_t control_msgs;
	uint64_t control_drops[PHUB_DROP_REASON_MAX];
	/* The ring's control counters (RING_HELLO), for /phub/ring. */
	uint64_t ring_hellos_sent;
	uint64_t ring_hellos_taken;
	uint64_t ring_hellos_early;
	uint64_t ring_hellos_refused;
	uint64_t ring_jobs_failed;
	uint64_t jobs_created;
	uint64_t jobs_ended;
	uint64_t jobs_failed;
	uint64_t joins;
	uint64_t ranks_removed;
	/* Per job slot: the lcores' job_pushes when the slot's job was made (main lcore). */
	uint64_t job_pushes_base[PHUB_ENGINE_MAX_JOBS];
	uint64_t start_tsc;
	bool test_hooks;		/* PHUB_PBOX_TEST_HOOKS=1: /phub/test/ commands (health.c) */
	bool no_steering;		/* --no-steering: software hand-off only */
	volatile bool stop_requested;	/* SIGINT or SIGTERM: checkpoint, then quit */
	volatile bool quit;		/* the lcores leave their loops */
};

extern struct pbox pbox;

/* port.c */
int pbox_ports_init(struct pbox *pb);
void pbox_ports_close(struct pbox *pb);
/* The EAL memory the mbuf pools of cfg's ports take, about (for --check-config). */
uint64_t pbox_pools_estimate_bytes(const struct phub_config *cfg);

/* datapath.c */
int pbox_lcore_main(void *arg);
/*
 * The UDP port of the data lcore that serves port first: where this PBox takes ring datagrams
 * arriving through the port, and the source port of those it sends there (one address per
 * PBox and port, whichever lcore sends, so that the peer knows them by it).
 */
uint16_t pbox_ring_udp_port(const struct pbox *pb, uint16_t port);

/* control.c */
int pbox_control_init(struct pbox *pb);
void pbox_control_poll(struct pbox *pb);
void pbox_control_fini(struct pbox *pb);

/*
 * memory.c: the text of a no_memory refusal of a job of params p and keys (err E2BIG: over
 * the limits; ENOMEM: EAL memory on NUMA node socket ran out): the bytes it needs by part,
 * what is free and the configuration key that raises the limit.
 */
void pbox_memory_explain(const struct pbox *pb, const struct phub_engine_job_params *p,
		const struct phub_wire_key *keys, uint32_t n_keys, int err, int socket,
		char *buf, size_t size);

/*
 * memory.c: the job allocator's place callback (phub_engine_allocator.place): with more than
 * one NUMA node among the servers, moves each page of a per-element buffer to the node of
 * the lcore that owns its chunk (libnuma's mbind, phub_layout_pages_by_node()).
 */
void pbox_memory_place(void *ptr, size_t size, size_t elem_bytes,
		const struct phub_layout *layout, void *ctx);

/*
 * memory.c: the engine's allocator for the jobs of a port on NUMA node socket: DPDK memory
 * on that node, per-element buffers placed by pbox_memory_place.
 */
struct phub_engine_allocator pbox_memory_allocator(int socket);

/* memory.c: the main lcore's memory on its NUMA node (libnuma), when there are several. */
void pbox_memory_control_node(const struct pbox *pb);

/* memory.c: which of the Table 3 models a job of this configuration can hold (--check-config). */
void pbox_memory_plan(const struct phub_config *cfg, FILE *f);
/*
 * memory.c, --check-config: each job of jobs[] that says what it trains ("model" or
 * "parameters") against the limits and EAL memory, with its workers, dtype, optimizer,
 * deterministic flag and checkpoints; and the peers[] no ring job uses. Prints to f; each
 * job that does not fit also to stderr, naming the key to raise. 0, or -E2BIG.
 */
int pbox_memory_check_jobs(const struct phub_config *cfg, const char *path, FILE *f);

/* memif_gate.c: the interrupt thread's net_memif handlers and the lcores take turns. */
int pbox_memif_gate_init(struct pbox *pb);
/* Whether a port is a net_memif one (main.c: no rte_eal_cleanup after one; see there). */
bool pbox_has_memif_port(const struct pbox *pb);

/*
 * Before a loop iteration that may touch the lcore's ports: false when the lcore must leave
 * them alone this time (a memif port of its own is being connected or disconnected).
 */
static inline bool
pbox_memif_gate_enter(struct pbox_lcore *lc)
{
	return !lc->memif_gated || phub_memif_gate_enter(&lc->in_memif_section);
}

static inline void
pbox_memif_gate_leave(struct pbox_lcore *lc)
{
	if (lc->memif_gated)
		phub_memif_gate_leave(&lc->in_memif_section);
}

/* checkpoint.c (docs/reliability.md) */
int pbox_checkpoint_init(struct pbox *pb);
int pbox_checkpoint_restore(struct pbox *pb);
void pbox_checkpoint_job_created(struct pbox *pb, struct phub_engine_job *job);
void pbox_checkpoint_job_end(struct pbox *pb, struct phub_engine_job *job);
/* A ring job goes back to its checkpoint (a neighbour restarted): forgotten, its files stay. */
void pbox_checkpoint_job_replaced(struct pbox *pb, struct phub_engine_job *job);
void pbox_checkpoint_poll(struct pbox *pb);
/* SIGTERM: true once every job reached an iteration boundary (or the wait is over). */
bool pbox_checkpoint_drain(struct pbox *pb);
/* After the lcores stopped: the last checkpoint of every job, then the writer stops. */
void pbox_checkpoint_fini(struct pbox *pb);

/*
 * notify.c: tell the service manager our state ("READY=1", "STOPPING=1", "STATUS=..."), when
 * $NOTIFY_SOCKET names one. Returns 0 (also without a service manager) or -errno.
 */
int pbox_notify(const char *state);

/*
 * xdp_pbox.c: the PBox's XDP program (drivers-cfg/bpf/xdp_pbox.bpf.c) on af_xdp ports.
 * Before rte_eal_init: give each af_xdp vdev alone on its interface xdp_prog=<the object>,
 * unless its device string names one. After a port started: tell the program the port's
 * address and UDP ports, so that the rest goes to the kernel. fini frees the strings.
 */
void pbox_xdp_eal_args(int argc, char **argv);
void pbox_xdp_configure(struct pbox *pb, const struct pbox_port *port, unsigned int pi);
void pbox_xdp_fini(void);

/* telemetry.c */
int pbox_telemetry_init(struct pbox *pb);

/*
 * health.c: what the main lcore samples every loop turn for /phub/health and the systemd
 * watchdog: the control loop's heartbeat, each data lcore's loop counter and each port's
 * imissed and rx_nombuf, with the time each last moved.
 */
enum pbox_health_level {
	PBOX_HEALTH_OK,
	PBOX_HEALTH_DEGRADED,
	PBOX_HEALTH_FAILING,
};

/* After the lcores launched: reads $WATCHDOG_USEC (and $WATCHDOG_PID) for the pings. */
void pbox_health_init(struct pbox *pb);
/* One control loop turn: samples, and sends WATCHDOG=1 while everything makes progress. */
void pbox_health_poll(struct pbox *pb);
/* Registers /phub/health (and the /phub/test/ commands when pb->test_hooks). */
void pbox_health_telemetry_init(struct pbox *pb);
/* Test hook: the lcore loop stands still while lc->test_stall_ms says so. */
void pbox_health_test_stall(struct pbox_lcore *lc);

/* log.c: under systemd's journal, each log line once on stderr with its priority. */
void pbox_log_init(void);

#endif /* PBOX_H */
