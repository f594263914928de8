/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane's DPDK adapter on the main lcore: control datagrams from the data lcores'
 * ring into lib/control, its answers out through a data lcore's TX, job memory on the port's
 * NUMA node, and a job freed only once no data lcore can still hold it (RCU). Every decision
 * (JOIN, job policy, LEAVE, PING, timeouts) is lib/control's, shared with the soft PBox.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include "auth/phub_auth.h"
#include "control/phub_control.h"
#include "pbox.h"

#define CONTROL_BURST 32
/*
 * The main lcore's nap between empty polls: short while control traffic flows (JOINs, ring
 * HELLOs: their RTOs start at 2 ms), longer once it has been quiet for CONTROL_QUIET_MS. Each
 * nap is a wake-up on the CPU it shares (the data lcores' when there are few): at 200 us, 5000
 * a second cost 7.5 % of a CPU in context switches alone, measured during a job.
 */
#define CONTROL_NAP_BUSY_US 200
#define CONTROL_NAP_QUIET_US 1000
#define CONTROL_QUIET_MS 100

/*
 * What the control plane's params point into (they must outlive it): filled once by
 * pbox_control_init() from the config, read-only after. The object itself is pb->control.
 */
/* The data endpoint of each layout server, for JOIN_ACK. */
static struct phub_wire_endpoint endpoints[PHUB_CONFIG_MAX_QUEUES];
static struct phub_control_declared_job declared[PHUB_CONFIG_MAX_JOBS];
/* The ring of PBoxes: the config's peers, each ring job's racks, our ring address per port. */
static struct phub_control_ring_peer ring_peers[PHUB_CONFIG_MAX_PEERS];
static struct phub_control_rack (*ring_racks)[PHUB_CONFIG_MAX_RACKS];
static struct phub_wire_endpoint ring_endpoints[PBOX_MAX_PORTS];
/* Job memory on the NUMA node of the port the JOIN came in on. */
static struct phub_engine_allocator allocators[PBOX_MAX_PORTS];

/* The engine's and the data lcores' clock: ring silence compares their stamps with it. */
static uint64_t
now_ns(void *ctx)
{
	(void)ctx;
	return phub_engine_monotonic_ns();
}

/* Send one built datagram through a data lcore that has a queue on the port. */
static void
control_send(void *ctx, const struct phub_control_peer *to, const void *payload, size_t len)
{
	struct pbox *pb = ctx;
	const struct phub_config_port *cp = &pb->cfg.ports[to->port];
	struct pbox_lcore *lc = &pb->lcores[pb->lcore_index[cp->lcores[0]]];
	struct rte_mbuf *m = rte_pktmbuf_alloc(lc->pool);
	uint8_t *p;

	if (m == NULL)
		return;
	p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(RTE_ETHER_HDR_LEN +
			sizeof(struct rte_ipv4_hdr) + sizeof(struct rte_udp_hdr) + len));
	if (p == NULL) {
		rte_pktmbuf_free(m);
		return;
	}
	phub_net_udp_build(m, &pb->ports[to->port].mac, (const struct rte_ether_addr *)to->mac,
			pb->ports[to->port].ipv4, to->ipv4, pb->cfg.udp_base_port, to->udp_port,
			(uint16_t)len);
	memcpy(p + m->l2_len + m->l3_len + sizeof(struct rte_udp_hdr), payload, len);
	phub_net_udp_csum_finish(m, (uint16_t)(sizeof(struct rte_udp_hdr) + len), 0);
	m->hash.usr = PBOX_INBOX_TX | ((uint32_t)to->port << 8);
	if (rte_ring_enqueue(lc->inbox, m) != 0)
		rte_pktmbuf_free(m);
}

static void
control_log(void *ctx, enum phub_control_log_level level, const char *text)
{
	(void)ctx;
	switch (level) {
	case PHUB_CONTROL_LOG_ERR:
		PBOX_LOG(ERR, "%s", text);
		break;
	case PHUB_CONTROL_LOG_NOTICE:
		PBOX_LOG(NOTICE, "%s", text);
		break;
	default:
		PBOX_LOG(INFO, "%s", text);
		break;
	}
}

/* Say once, at start, when authenticated jobs will pay a software AES-GCM for every datagram. */
static void
auth_cpu_check(const struct phub_config *cfg)
{
	for (unsigned int i = 0; i < cfg->n_jobs; i++)
		if (cfg->jobs[i].auth == PHUB_CONFIG_AUTH_REQUIRED && !phub_auth_mac_hw()) {
			PBOX_LOG(WARNING, "no AES-NI/PCLMULQDQ on this CPU: authenticated jobs "
				"compute their datagram MAC (AES-256-GCM) in software, several "
				"times slower");
			return;
		}
}

static const struct phub_engine_allocator *
job_allocator(void *ctx, uint16_t port)
{
	(void)ctx;
	return &allocators[port];
}

static void
explain_no_memory(void *ctx, const struct phub_engine_job_params *p,
		const struct phub_wire_key *keys, uint32_t n_keys, int err, uint16_t port,
		char *buf, size_t size)
{
	struct pbox *pb = ctx;

	pbox_memory_explain(pb, p, keys, n_keys, err, pb->ports[port].socket, buf, size);
}

static void
job_created(void *ctx, struct phub_engine_job *job)
{
	struct pbox *pb = ctx;
	uint32_t slot = phub_engine_job_slot(job);
	uint64_t base = 0;

	/* No lcore counts for this slot now: its last job was freed after a quiescent state. */
	for (uint16_t k = 0; k < pb->n_lcores; k++)
		base += __atomic_load_n(&pb->lcores[k].stats.job_pushes[slot], __ATOMIC_RELAXED);
	__atomic_store_n(&pb->job_pushes_base[slot], base, __ATOMIC_RELAXED);
	pbox_checkpoint_job_created(ctx, job);
}

/*
 * A job ends: the telemetry commands that read a job hold jobs_lock; every data lcore passes a
 * quiescent point before the buffers go; its checkpoints go with it (the workers have the
 * final model).
 */
static void
job_drop(struct pbox *pb, struct phub_engine_job *job, bool keep_checkpoints)
{
	pthread_mutex_lock(&pb->jobs_lock);
	phub_engine_job_unpublish(pb->engine, job);
	rte_rcu_qsbr_synchronize(pb->qsbr, RTE_QSBR_THRID_INVALID);
	if (keep_checkpoints)
		pbox_checkpoint_job_replaced(pb, job);
	else
		pbox_checkpoint_job_end(pb, job);
	phub_engine_job_free(job);
	pthread_mutex_unlock(&pb->jobs_lock);
}

static void
job_release(void *ctx, struct phub_engine_job *job)
{
	job_drop(ctx, job, false);
}

/* As job_release, for a ring job that goes back to its checkpoint: its files stay. */
static void
job_replace(void *ctx, struct phub_engine_job *job)
{
	job_drop(ctx, job, true);
}

static const struct phub_control_ops ops = {
	.now_ns = now_ns,
	.send = control_send,
	.log = control_log,
	.allocator = job_allocator,
	.explain_no_memory = explain_no_memory,
	.job_created = job_created,
	.job_release = job_release,
	.job_replace = job_replace,
};

/* The counters telemetry reads: the main lcore alone writes them. */
static void
stats_publish(struct pbox *pb)
{
	struct phub_control_stats st;

	phub_control_get_stats(pb->control, &st);
	pb->control_msgs = st.msgs;
	pb->ring_hellos_sent = st.ring_hellos_sent;
	pb->ring_hellos_taken = st.ring_hellos_taken;
	pb->ring_hellos_early = st.ring_hellos_early;
	pb->ring_hellos_refused = st.ring_hellos_refused;
	pb->ring_jobs_failed = st.ring_jobs_failed;
	pb->jobs_created = st.jobs_created;
	pb->jobs_ended = st.jobs_ended;
	pb->jobs_failed = st.jobs_failed;
	pb->joins = st.joins;
	pb->ranks_removed = st.ranks_removed;
	memcpy(pb->control_drops, st.drops, sizeof(pb->control_drops));
}

int
pbox_control_init(struct pbox *pb)
{
	struct phub_control_params p;
	uint16_t mtu = UINT16_MAX;

	for (uint32_t s = 0; s < pb->n_servers; s++) {
		const struct pbox_lcore *lc = &pb->lcores[pb->server_lcore_index[s]];

		endpoints[s].ipv4 = pb->ports[pb->servers[s].port].ipv4;
		endpoints[s].udp_port = lc->udp_port;
	}
	for (unsigned int i = 0; i < pb->n_ports; i++) {
		allocators[i] = pbox_memory_allocator(pb->ports[i].socket);
		if (pb->ports[i].mtu < mtu)
			mtu = pb->ports[i].mtu;
	}
	for (unsigned int i = 0; i < pb->n_ports; i++)
		ring_endpoints[i] = (struct phub_wire_endpoint){ .ipv4 = pb->ports[i].ipv4,
			.udp_port = pbox_ring_udp_port(pb, (uint16_t)i) };
	for (unsigned int i = 0; i < pb->cfg.n_peers; i++) {
		const struct phub_config_peer *peer = &pb->cfg.peers[i];

		ring_peers[i] = (struct phub_control_ring_peer){ .name = peer->name,
			.ipv4 = peer->ipv4, .udp_port = peer->udp_port, .port = peer->port_index };
	}
	ring_racks = calloc(pb->cfg.n_jobs != 0 ? pb->cfg.n_jobs : 1, sizeof(*ring_racks));
	if (ring_racks == NULL)
		return -ENOMEM;
	for (unsigned int i = 0; i < pb->cfg.n_jobs; i++) {
		const struct phub_config_job *j = &pb->cfg.jobs[i];

		for (unsigned int r = 0; r < j->n_racks; r++)
			ring_racks[i][r] = (struct phub_control_rack){ .name = j->racks[r].pbox,
				.ranks = j->racks[r].ranks, .peer = j->racks[r].peer };

		declared[i] = (struct phub_control_declared_job){
			.name = j->name, .nonce = j->nonce, .workers = j->workers,
			.dtype = (enum phub_dtype)j->dtype, .deterministic = j->deterministic,
			.elastic = j->on_worker_dead == PHUB_CONFIG_ON_DEAD_CONTINUE,
			.auth = j->auth == PHUB_CONFIG_AUTH_REQUIRED,
			.key = j->has_key ? j->key : NULL,
			.optimizer = {
				.type = (enum phub_opt_type)j->optimizer.type,
				.lr = (float)j->optimizer.lr,
				.momentum = (float)j->optimizer.momentum,
				.weight_decay = (float)j->optimizer.weight_decay,
				.beta1 = (float)j->optimizer.beta1,
				.beta2 = (float)j->optimizer.beta2,
				.eps = (float)j->optimizer.eps,
			},
			.n_racks = j->n_racks,
			.racks = ring_racks[i],
		};
	}
	auth_cpu_check(&pb->cfg);
	memset(&p, 0, sizeof(p));
	p.engine = pb->engine;
	p.ops = &ops;
	p.ctx = pb;
	p.servers = pb->servers;
	p.endpoints = endpoints;
	p.n_servers = pb->n_servers;
	p.mtu = mtu;
	p.segment_bytes = pb->cfg.segment_bytes;
	p.chunk_bytes = pb->cfg.chunk_bytes;
	p.deterministic = pb->cfg.deterministic;
	/*
	 * Checkpoints are always on (checkpoint.dir has a default; a PBox that cannot use it
	 * does not start): every job gets its shadow, counted in its memory.
	 */
	p.checkpoint_shadow = pb->cfg.checkpoint.dir[0] != '\0';
	p.max_jobs = pb->cfg.limits.max_jobs;
	p.max_workers_per_job = pb->cfg.limits.max_workers_per_job;
	p.job_memory_bytes = (uint64_t)pb->cfg.limits.job_memory_mb << 20;
	p.total_memory_bytes = (uint64_t)pb->cfg.limits.total_memory_mb << 20;
	p.join_ms = pb->cfg.timeouts.join_ms;
	p.worker_dead_ms = pb->cfg.timeouts.worker_dead_ms;
	p.declared = declared;
	p.n_declared = pb->cfg.n_jobs;
	p.rack_name = pb->cfg.name;
	p.ring_peers = ring_peers;
	p.n_ring_peers = pb->cfg.n_peers;
	p.ring_endpoints = ring_endpoints;
	p.n_ring_endpoints = pb->n_ports;
	p.rto_min_ms = pb->cfg.timeouts.rto_min_ms;
	p.rto_max_ms = pb->cfg.timeouts.rto_max_ms;
	pb->control = phub_control_create(&p);
	return pb->control == NULL ? -errno : 0;
}

void
pbox_control_poll(struct pbox *pb)
{
	static uint64_t last_msg_tsc;
	struct rte_mbuf *pkts[CONTROL_BURST];
	unsigned int n;

	n = rte_ring_dequeue_burst(pb->control_ring, (void **)pkts, CONTROL_BURST, NULL);
	for (unsigned int i = 0; i < n; i++) {
		struct rte_mbuf *m = pkts[i];
		struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
		struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
		struct rte_udp_hdr *udp = (struct rte_udp_hdr *)((uint8_t *)ip +
				(ip->version_ihl & RTE_IPV4_HDR_IHL_MASK) * 4);
		struct phub_control_peer from;

		/* The data lcore checked the frame up to the UDP header. */
		from.port = (uint16_t)(m->hash.usr >> 8);
		memcpy(from.mac, eth->src_addr.addr_bytes, sizeof(from.mac));
		from.ipv4 = rte_be_to_cpu_32(ip->src_addr);
		from.udp_port = rte_be_to_cpu_16(udp->src_port);
		phub_control_input(pb->control, &from, udp + 1,
				rte_be_to_cpu_16(udp->dgram_len) - sizeof(*udp));
		rte_pktmbuf_free(m);
	}
	phub_control_poll(pb->control);
	stats_publish(pb);
	if (n != 0) {
		last_msg_tsc = rte_rdtsc();
		return;
	}
	rte_delay_us_sleep(rte_rdtsc() - last_msg_tsc < rte_get_tsc_hz() / 1000 * CONTROL_QUIET_MS ?
			CONTROL_NAP_BUSY_US : CONTROL_NAP_QUIET_US);
}

void
pbox_control_fini(struct pbox *pb)
{
	struct rte_mbuf *m;

	while (rte_ring_dequeue(pb->control_ring, (void **)&m) == 0)
		rte_pktmbuf_free(m);
	phub_control_free(pb->control);
	pb->control = NULL;
	free(ring_racks);
	ring_racks = NULL;
}
