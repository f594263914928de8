/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The /phub/ telemetry commands. They run on DPDK's telemetry thread while
 * the lcores write their counters: every counter is read with a relaxed
 * atomic load, so a snapshot is consistent per counter, not across counters.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_telemetry.h>

#include "engine/phub_engine_auth.h"
#include "pbox.h"
#include "util/phub_addr.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

static uint64_t
uptime_ms(void)
{
	return (rte_rdtsc() - pbox.start_tsc) * 1000 / rte_get_tsc_hz();
}

/* Sums over the data lcores, and the main lcore's control counters. */
struct totals {
	struct pbox_lcore_stats net;
	struct phub_engine_stats engine;
};

/*
 * Adds each of n counters at from to the one at to. Both counter structs are uint64_t words
 * only, so a total is every word of every lcore's, each read with a relaxed load.
 */
static void
counters_add(uint64_t *to, const uint64_t *from, size_t n)
{
	for (size_t i = 0; i < n; i++)
		to[i] += LOAD(from[i]);
}

#define COUNTER_WORDS(s) (sizeof(s) / sizeof(uint64_t))
_Static_assert(sizeof(struct pbox_lcore_stats) % sizeof(uint64_t) == 0, "lcore counters");
_Static_assert(sizeof(struct phub_engine_stats) % sizeof(uint64_t) == 0, "engine counters");

static void
totals_get(struct totals *t)
{
	memset(t, 0, sizeof(*t));
	for (uint16_t k = 0; k < pbox.n_lcores; k++) {
		const struct pbox_lcore *lc = &pbox.lcores[k];

		counters_add((uint64_t *)&t->net, (const uint64_t *)&lc->stats,
				COUNTER_WORDS(t->net));
		counters_add((uint64_t *)&t->engine, (const uint64_t *)&lc->engine_stats,
				COUNTER_WORDS(t->engine));
	}
	counters_add(t->engine.drops, pbox.control_drops, PHUB_DROP_REASON_MAX);
}

/* An empty dict to nest in another (which then frees it), or NULL without memory. */
static struct rte_tel_data *
dict_new(void)
{
	struct rte_tel_data *d = rte_tel_data_alloc();

	if (d != NULL)
		rte_tel_data_start_dict(d);
	return d;
}

/* Every drop reason that happened, by name: a dict holds at most 256 entries. */
static struct rte_tel_data *
drops_dict(const struct totals *t)
{
	struct rte_tel_data *d = dict_new();

	if (d == NULL)
		return NULL;
	for (unsigned int i = 1; i < PHUB_DROP_REASON_MAX; i++)
		if (t->engine.drops[i] != 0)
			rte_tel_data_add_dict_u64(d, phub_drop_reason_name(i), t->engine.drops[i]);
	for (unsigned int i = 0; i < PBOX_NET_DROP_MAX; i++)
		if (t->net.net_drops[i] != 0)
			rte_tel_data_add_dict_u64(d, pbox_net_drop_names[i], t->net.net_drops[i]);
	return d;
}

static int
cmd_stats(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct totals t;
	struct rte_tel_data *drops;
	uint64_t dropped = 0;

	(void)cmd;
	(void)params;
	totals_get(&t);
	for (unsigned int i = 1; i < PHUB_DROP_REASON_MAX; i++)
		if (i != PHUB_DROP_WRONG_LCORE)	/* handed over, not lost */
			dropped += t.engine.drops[i];
	for (unsigned int i = 0; i < PBOX_NET_DROP_MAX; i++)
		dropped += t.net.net_drops[i];
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_string(d, "version", PHUB_VERSION);
	rte_tel_data_add_dict_string(d, "kernels", phub_kernels_isa_name(phub_kernels_get()->isa));
	rte_tel_data_add_dict_u64(d, "uptime_ms", uptime_ms());
	rte_tel_data_add_dict_u64(d, "rx_packets", t.net.rx_pkts);
	rte_tel_data_add_dict_u64(d, "rx_bytes", t.net.rx_bytes);
	rte_tel_data_add_dict_u64(d, "tx_packets", t.net.tx_pkts);
	rte_tel_data_add_dict_u64(d, "tx_bytes", t.net.tx_bytes);
	rte_tel_data_add_dict_u64(d, "tx_dropped", t.net.tx_dropped);
	rte_tel_data_add_dict_u64(d, "encode_errors", t.net.encode_errors);
	rte_tel_data_add_dict_u64(d, "pushes", t.engine.pushes);
	rte_tel_data_add_dict_u64(d, "push_bytes", t.engine.push_bytes);
	rte_tel_data_add_dict_u64(d, "duplicates", t.engine.duplicates);
	rte_tel_data_add_dict_u64(d, "retransmits_seen", t.engine.retransmits_seen);
	rte_tel_data_add_dict_u64(d, "pulls", t.engine.pulls);
	rte_tel_data_add_dict_u64(d, "segments_optimized", t.engine.segments_completed);
	rte_tel_data_add_dict_u64(d, "models_sent", t.net.models_sent);
	rte_tel_data_add_dict_u64(d, "model_payloads_by_reference", t.net.model_zero_copy);
	rte_tel_data_add_dict_u64(d, "model_payloads_copied", t.net.model_copied);
	rte_tel_data_add_dict_u64(d, "model_payloads_inline", t.net.model_inline);
	rte_tel_data_add_dict_u64(d, "models_resent", t.engine.models_resent);
	rte_tel_data_add_dict_u64(d, "acks_sent", t.net.acks_sent);
	rte_tel_data_add_dict_u64(d, "ackv_sent", t.net.ackv_sent);
	rte_tel_data_add_dict_u64(d, "ackv_entries", t.net.ackv_entries);
	rte_tel_data_add_dict_u64(d, "acks_in_model", t.net.acks_in_model);
	rte_tel_data_add_dict_u64(d, "handed_off", t.net.handed_off);
	rte_tel_data_add_dict_u64(d, "control_packets", LOAD(pbox.control_msgs));
	rte_tel_data_add_dict_u64(d, "arp_replies", t.net.arp_replies);
	rte_tel_data_add_dict_u64(d, "aggregation_ns", t.engine.agg_ns);
	rte_tel_data_add_dict_u64(d, "optimizer_ns", t.engine.opt_ns);
	rte_tel_data_add_dict_u64(d, "joins", LOAD(pbox.joins));
	rte_tel_data_add_dict_u64(d, "jobs_created", LOAD(pbox.jobs_created));
	rte_tel_data_add_dict_u64(d, "jobs_ended", LOAD(pbox.jobs_ended));
	rte_tel_data_add_dict_u64(d, "jobs_failed", LOAD(pbox.jobs_failed));
	rte_tel_data_add_dict_u64(d, "ring_jobs_failed", LOAD(pbox.ring_jobs_failed));
	rte_tel_data_add_dict_u64(d, "ranks_removed", LOAD(pbox.ranks_removed));
	rte_tel_data_add_dict_u64(d, "dropped", dropped);
	drops = drops_dict(&t);
	if (drops != NULL)
		rte_tel_data_add_dict_container(d, "drops", drops, 0);
	return 0;
}

/*
 * d as a dict of n dicts, the i-th filled by fill, which returns its name (written to buf or
 * not): /phub/lcores and /phub/ports.
 */
static int
dict_of_dicts(struct rte_tel_data *d, unsigned int n,
		const char *(*fill)(unsigned int i, struct rte_tel_data *item, char *buf, size_t cap))
{
	rte_tel_data_start_dict(d);
	for (unsigned int i = 0; i < n; i++) {
		struct rte_tel_data *item = dict_new();
		char buf[32];

		if (item == NULL)
			return -ENOMEM;
		rte_tel_data_add_dict_container(d, fill(i, item, buf, sizeof(buf)), item, 0);
	}
	return 0;
}

static const char *
lcore_dict(unsigned int k, struct rte_tel_data *l, char *buf, size_t cap)
{
	const struct pbox_lcore *lc = &pbox.lcores[k];

	rte_tel_data_add_dict_u64(l, "udp_port", lc->udp_port);
	rte_tel_data_add_dict_u64(l, "queues", lc->n_rxq);
	rte_tel_data_add_dict_u64(l, "rx_packets", LOAD(lc->stats.rx_pkts));
	rte_tel_data_add_dict_u64(l, "rx_bytes", LOAD(lc->stats.rx_bytes));
	rte_tel_data_add_dict_u64(l, "tx_packets", LOAD(lc->stats.tx_pkts));
	rte_tel_data_add_dict_u64(l, "tx_bytes", LOAD(lc->stats.tx_bytes));
	rte_tel_data_add_dict_u64(l, "pushes", LOAD(lc->engine_stats.pushes));
	rte_tel_data_add_dict_u64(l, "segments_optimized",
			LOAD(lc->engine_stats.segments_completed));
	rte_tel_data_add_dict_u64(l, "handed_off", LOAD(lc->stats.handed_off));
	rte_tel_data_add_dict_u64(l, "handed_in", LOAD(lc->stats.handed_in));
	rte_tel_data_add_dict_u64(l, "aggregation_ns", LOAD(lc->engine_stats.agg_ns));
	rte_tel_data_add_dict_u64(l, "optimizer_ns", LOAD(lc->engine_stats.opt_ns));
	rte_tel_data_add_dict_u64(l, "loops", LOAD(lc->stats.loops));
	rte_tel_data_add_dict_u64(l, "idle_sleeps", LOAD(lc->stats.idle_sleeps));
	rte_tel_data_add_dict_u64(l, "busy_ns", (uint64_t)((double)LOAD(lc->stats.busy_cycles) *
			1e9 / (double)rte_get_tsc_hz()));
	snprintf(buf, cap, "%u", lc->lcore_id);
	return buf;
}

static int
cmd_lcores(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return dict_of_dicts(d, pbox.n_lcores, lcore_dict);
}

static const char *
port_dict(unsigned int i, struct rte_tel_data *p, char *buf, size_t cap)
{
	const struct pbox_port *port = &pbox.ports[i];
	struct rte_eth_stats st;
	struct rte_eth_link link;
	char ip[16];

	(void)buf;
	(void)cap;
	memset(&st, 0, sizeof(st));
	rte_eth_stats_get(port->port_id, &st);
	phub_ipv4_text(port->ipv4, ip, sizeof(ip));
	rte_tel_data_add_dict_u64(p, "port_id", port->port_id);
	rte_tel_data_add_dict_string(p, "device", pbox.cfg.ports[i].device);
	rte_tel_data_add_dict_string(p, "ipv4", ip);
	rte_tel_data_add_dict_u64(p, "mtu", port->mtu);
	rte_tel_data_add_dict_u64(p, "numa_node", (uint64_t)port->socket);
	rte_tel_data_add_dict_u64(p, "queues", port->n_queues);
	rte_tel_data_add_dict_string(p, "steering",
			phub_config_steering_name(port->steering));
	rte_tel_data_add_dict_u64(p, "multi_seg_tx", port->multi_seg_tx);
	memset(&link, 0, sizeof(link));
	rte_tel_data_add_dict_u64(p, "link_up",
			rte_eth_link_get_nowait(port->port_id, &link) == 0 &&
			link.link_status == RTE_ETH_LINK_UP);
	rte_tel_data_add_dict_u64(p, "link_speed_mbps",
			link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0 : link.link_speed);
	rte_tel_data_add_dict_u64(p, "ipackets", st.ipackets);
	rte_tel_data_add_dict_u64(p, "opackets", st.opackets);
	rte_tel_data_add_dict_u64(p, "ibytes", st.ibytes);
	rte_tel_data_add_dict_u64(p, "obytes", st.obytes);
	rte_tel_data_add_dict_u64(p, "imissed", st.imissed);
	rte_tel_data_add_dict_u64(p, "ierrors", st.ierrors);
	rte_tel_data_add_dict_u64(p, "oerrors", st.oerrors);
	rte_tel_data_add_dict_u64(p, "rx_nombuf", st.rx_nombuf);
	return port->name;
}

static int
cmd_ports(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return dict_of_dicts(d, pbox.n_ports, port_dict);
}

/* The PUSHes the engine took for a job: its slot's counts since the job was made. */
static uint64_t
job_pushes(const struct phub_engine_job *job)
{
	uint32_t slot = phub_engine_job_slot(job);
	uint64_t n = 0;

	for (uint16_t k = 0; k < pbox.n_lcores; k++)
		n += LOAD(pbox.lcores[k].stats.job_pushes[slot]);
	return n - LOAD(pbox.job_pushes_base[slot]);
}

static void
job_dict(struct rte_tel_data *d, const struct phub_engine_job *job)
{
	struct phub_engine_ring_params ring;
	struct phub_engine_job_info info;
	uint64_t ms = uptime_ms();

	phub_engine_job_get_info(job, &info);
	rte_tel_data_add_dict_u64(d, "id", info.job_id);
	rte_tel_data_add_dict_string(d, "name", info.name);
	rte_tel_data_add_dict_u64(d, "world_size", info.world_size);
	rte_tel_data_add_dict_u64(d, "joined", info.joined);
	rte_tel_data_add_dict_string(d, "dtype", phub_wire_dtype_name((uint8_t)info.dtype));
	rte_tel_data_add_dict_u64(d, "keys", info.n_keys);
	rte_tel_data_add_dict_u64(d, "chunks", info.n_chunks);
	rte_tel_data_add_dict_u64(d, "segments", info.n_segments);
	rte_tel_data_add_dict_u64(d, "elements", info.n_elems);
	rte_tel_data_add_dict_u64(d, "memory_bytes", info.memory_bytes);
	rte_tel_data_add_dict_u64(d, "deterministic", info.deterministic);
	/* An elastic job: the ranks not removed (world_size in any other job). */
	rte_tel_data_add_dict_string(d, "on_worker_dead", info.elastic ? "continue" : "fail");
	rte_tel_data_add_dict_u64(d, "live", info.live);
	/* UINT32_MAX + 1 wraps to 0: no iteration has finished yet. */
	rte_tel_data_add_dict_u64(d, "iterations_done", (uint32_t)(info.iteration_min + 1));
	rte_tel_data_add_dict_u64(d, "iteration_newest", (uint32_t)(info.iteration_max + 1));
	rte_tel_data_add_dict_u64(d, "segments_optimized", info.segments_completed);
	rte_tel_data_add_dict_u64(d, "pushes", job_pushes(job));
	/* Exchanges: whole-model iterations; per second over the PBox's uptime. */
	rte_tel_data_add_dict_u64(d, "exchanges_per_s_x1000", ms == 0 || info.n_segments == 0 ? 0 :
			info.segments_completed * 1000000 / info.n_segments / ms);
	if (phub_engine_job_ring(job, &ring, NULL, NULL)) {
		/* A job across racks: world_size is this rack's ranks, from rank_base on. */
		rte_tel_data_add_dict_u64(d, "ring_position", ring.pos);
		rte_tel_data_add_dict_u64(d, "ring_racks", ring.racks);
		rte_tel_data_add_dict_u64(d, "rank_base", phub_engine_job_rank_base(job));
		rte_tel_data_add_dict_u64(d, "total_world", phub_engine_job_total_world(job));
	}
}

/* The config's name of the PBox at a ring position of a job (its jobs[].racks). */
static const char *
ring_rack_name(const char *job_name, uint16_t pos)
{
	int i = phub_config_job_find(&pbox.cfg, job_name);

	if (i < 0 || pos >= pbox.cfg.jobs[i].n_racks)
		return "?";
	return pbox.cfg.jobs[i].racks[pos].pbox;
}

/* One neighbour of a ring job: who, where its ring datagrams come from or go to, how long quiet. */
static struct rte_tel_data *
ring_peer_dict(const char *job_name, uint16_t pos, const struct phub_engine_ring_link *link,
		uint64_t silent_ns)
{
	struct rte_tel_data *p = dict_new();
	char where[32];

	if (p == NULL)
		return NULL;
	rte_tel_data_add_dict_string(p, "rack", ring_rack_name(job_name, pos));
	rte_tel_data_add_dict_u64(p, "position", pos);
	if (link->token != 0)
		phub_ipv4_port_text(link->peer.ipv4, link->peer.udp_port, where, sizeof(where));
	else
		snprintf(where, sizeof(where), "not linked");
	rte_tel_data_add_dict_string(p, "address", where);
	rte_tel_data_add_dict_u64(p, "last_heard_ms", silent_ns / 1000000u);
	return p;
}

static int
cmd_jobs_locked(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(d);
	for (struct phub_engine_job *job = phub_engine_job_next(pbox.engine, NULL); job != NULL;
	     job = phub_engine_job_next(pbox.engine, job)) {
		struct rte_tel_data *j = dict_new();
		char id[16];

		if (j == NULL)
			return -ENOMEM;
		job_dict(j, job);
		snprintf(id, sizeof(id), "%u", phub_engine_job_id(job));
		rte_tel_data_add_dict_container(d, id, j, 0);
	}
	return 0;
}

/* A job by id or by name. */
static struct phub_engine_job *
job_param(const char *params)
{
	char *end;
	unsigned long id;

	if (params == NULL || *params == '\0')
		return NULL;
	id = strtoul(params, &end, 10);
	if (*end == '\0')
		return phub_engine_job_lookup(pbox.engine, (uint32_t)id);
	return phub_engine_job_find(pbox.engine, params);
}

/*
 * One rank: where it is, how long ago it was last heard (a valid PUSH, PULL,
 * keep-alive or its JOIN), the newest iteration it pushed and how far that is
 * behind the fastest rank's.
 */
static struct rte_tel_data *
rank_dict(const struct phub_engine_rank_status *st, uint32_t fastest)
{
	struct rte_tel_data *r = dict_new();
	char where[32];

	if (r == NULL)
		return NULL;
	if (st->joined)
		phub_ipv4_port_text(st->peer.ipv4, st->peer.udp_port, where, sizeof(where));
	else
		snprintf(where, sizeof(where), "not joined");
	rte_tel_data_add_dict_string(r, "address", where);
	rte_tel_data_add_dict_u64(r, "last_heard_ms", st->silent_ns / 1000000u);
	if (st->pushed) {
		rte_tel_data_add_dict_u64(r, "newest_iteration", st->newest_iteration);
		rte_tel_data_add_dict_u64(r, "lag", (uint32_t)(fastest - st->newest_iteration));
	}
	return r;
}

static int
cmd_job_locked(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct phub_engine_job *job = job_param(params);
	struct phub_engine_rank_status st[200];
	uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS];
	struct rte_tel_data *w;
	uint32_t fastest = 0, iteration;
	uint16_t n;

	(void)cmd;
	if (job == NULL)
		return -EINVAL;
	/* A dict holds 256 entries: the job's own and up to 200 ranks. */
	n = RTE_MIN(phub_engine_job_world_size(job), RTE_DIM(st));
	rte_tel_data_start_dict(d);
	job_dict(d, job);
	for (uint16_t r = 0; r < n; r++) {
		phub_engine_job_rank_status(job, r, &st[r]);
		if (st[r].pushed && phub_wire_iter_cmp(st[r].newest_iteration, fastest) > 0)
			fastest = st[r].newest_iteration;
	}
	for (uint16_t r = 0; r < n; r++) {
		struct rte_tel_data *rd = rank_dict(&st[r], fastest);
		char name[16];

		if (rd == NULL)
			return -ENOMEM;
		snprintf(name, sizeof(name), "rank_%u", r);
		rte_tel_data_add_dict_container(d, name, rd, 0);
	}
	/* A racy snapshot of the slots: the ranks the oldest unfinished iteration lacks. */
	w = rte_tel_data_alloc();
	if (w == NULL)
		return -ENOMEM;
	rte_tel_data_start_array(w, RTE_TEL_U64_VAL);
	phub_engine_job_waiting_on(job, &iteration, waiting);
	for (uint16_t r = 0; r < phub_engine_job_world_size(job); r++)
		if ((waiting[r / 64] >> (r % 64)) & 1)
			rte_tel_data_add_array_u64(w, r);
	rte_tel_data_add_dict_u64(d, "waiting_iteration", iteration);
	rte_tel_data_add_dict_container(d, "waiting_on", w, 0);
	return 0;
}

static int
cmd_chunkmap_locked(const char *cmd, const char *params, struct rte_tel_data *d)
{
	static const char *const level_names[] = { "servers", "lcores", "ports", "numa" };
	struct phub_engine_job *job = job_param(params);
	const struct phub_layout *layout;

	(void)cmd;
	if (job == NULL)
		return -EINVAL;
	layout = phub_engine_job_layout(job);
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_u64(d, "chunks", phub_layout_chunk_count(layout));
	rte_tel_data_add_dict_u64(d, "chunk_elems", phub_layout_chunk_elems(layout));
	rte_tel_data_add_dict_u64(d, "segment_elems", phub_layout_segment_elems(layout));
	for (unsigned int lv = 0; lv < RTE_DIM(level_names); lv++) {
		struct rte_tel_data *bins = dict_new();
		uint32_t n = phub_layout_bin_count(layout, (enum phub_layout_level)lv);

		if (bins == NULL)
			return -ENOMEM;
		for (uint32_t i = 0; i < n && i < 250; i++) {
			struct phub_layout_load load;
			char name[48];

			if (phub_layout_bin_get(layout, (enum phub_layout_level)lv, i, &load) != 0)
				continue;
			if (lv == PHUB_LAYOUT_LEVEL_SERVER)
				snprintf(name, sizeof(name), "port%u_lcore%u",
						pbox.servers[load.id].port, pbox.servers[load.id].lcore);
			else
				snprintf(name, sizeof(name), "%u", load.id);
			rte_tel_data_add_dict_u64(bins, name, load.bytes);
		}
		rte_tel_data_add_dict_container(d, level_names[lv], bins, 0);
	}
	return 0;
}

/*
 * The ring of PBoxes: per ring job its position and both neighbours; the datagrams and bytes
 * each way (to next: ring steps out, RING_ACKs in; from prev: ring steps in, RING_ACKs out),
 * retransmissions and what the engine made of what came in, summed over ring jobs and lcores;
 * and the RING_HELLO counters of the control plane.
 */
static int
cmd_ring_locked(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct rte_tel_data *jobs = dict_new();
	struct totals t;

	(void)cmd;
	(void)params;
	if (jobs == NULL)
		return -ENOMEM;
	totals_get(&t);
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_string(d, "rack", pbox.cfg.name);
	for (struct phub_engine_job *job = phub_engine_job_next(pbox.engine, NULL); job != NULL;
	     job = phub_engine_job_next(pbox.engine, job)) {
		struct phub_engine_ring_link prev, next;
		struct phub_engine_ring_params ring;
		struct phub_engine_job_info info;
		struct phub_engine_ring_window win;
		struct rte_tel_data *j, *p;
		uint64_t prev_ns, next_ns, srtt_ns, rttvar_ns, rto_ns, auth_sealed, auth_opened;
		char id[16];

		if (!phub_engine_job_ring(job, &ring, &prev, &next))
			continue;
		j = dict_new();
		if (j == NULL)
			break;
		phub_engine_job_get_info(job, &info);
		phub_engine_job_ring_silence(job, phub_engine_monotonic_ns(), &prev_ns, &next_ns);
		rte_tel_data_add_dict_string(j, "name", info.name);
		rte_tel_data_add_dict_u64(j, "position", ring.pos);
		rte_tel_data_add_dict_u64(j, "racks", ring.racks);
		rte_tel_data_add_dict_u64(j, "linked", prev.token != 0 && next.token != 0);
		/* An authenticated ring: datagrams sealed, and taken after their MAC matched. */
		phub_engine_ring_auth_stats(job, &auth_sealed, &auth_opened);
		rte_tel_data_add_dict_u64(j, "auth", phub_engine_job_ring_auth(job));
		rte_tel_data_add_dict_u64(j, "auth_sealed", auth_sealed);
		rte_tel_data_add_dict_u64(j, "auth_opened", auth_opened);
		phub_engine_job_ring_rtt(job, &srtt_ns, &rttvar_ns, &rto_ns);
		rte_tel_data_add_dict_u64(j, "rtt_us", srtt_ns / 1000);
		rte_tel_data_add_dict_u64(j, "rttvar_us", rttvar_ns / 1000);
		rte_tel_data_add_dict_u64(j, "rto_us", rto_ns / 1000);
		phub_engine_job_ring_window(job, &win);
		rte_tel_data_add_dict_u64(j, "cwnd_bytes", win.cwnd_bytes);
		rte_tel_data_add_dict_u64(j, "ssthresh_bytes", win.ssthresh_bytes);
		rte_tel_data_add_dict_u64(j, "inflight_bytes", win.inflight_bytes);
		rte_tel_data_add_dict_u64(j, "inflight_datagrams", win.inflight_steps);
		rte_tel_data_add_dict_u64(j, "held_steps", win.held_steps);
		rte_tel_data_add_dict_u64(j, "held_steps_total", win.held_total);
		rte_tel_data_add_dict_u64(j, "window_cuts", win.cuts);
		rte_tel_data_add_dict_u64(j, "fast_resends", win.fast_resends);
		rte_tel_data_add_dict_u64(j, "timeouts", win.timeouts);
		p = ring_peer_dict(info.name, (uint16_t)((ring.pos + ring.racks - 1u) % ring.racks),
				&prev, prev_ns);
		if (p != NULL)
			rte_tel_data_add_dict_container(j, "prev", p, 0);
		p = ring_peer_dict(info.name, (uint16_t)((ring.pos + 1u) % ring.racks), &next,
				next_ns);
		if (p != NULL)
			rte_tel_data_add_dict_container(j, "next", p, 0);
		snprintf(id, sizeof(id), "%u", info.job_id);
		rte_tel_data_add_dict_container(jobs, id, j, 0);
	}
	rte_tel_data_add_dict_container(d, "jobs", jobs, 0);
	rte_tel_data_add_dict_u64(d, "to_next_datagrams", t.net.ring_out);
	rte_tel_data_add_dict_u64(d, "to_next_bytes", t.net.ring_out_bytes);
	rte_tel_data_add_dict_u64(d, "from_next_acks", t.net.ring_acks_in);
	rte_tel_data_add_dict_u64(d, "from_prev_datagrams", t.net.ring_in);
	rte_tel_data_add_dict_u64(d, "from_prev_bytes", t.net.ring_in_bytes);
	rte_tel_data_add_dict_u64(d, "to_prev_acks", t.net.ring_acks_out);
	rte_tel_data_add_dict_u64(d, "retransmitted_steps", t.engine.ring_retransmits);
	rte_tel_data_add_dict_u64(d, "steps_taken", t.engine.ring_taken);
	rte_tel_data_add_dict_u64(d, "steps_taken_bytes", t.engine.ring_taken_bytes);
	rte_tel_data_add_dict_u64(d, "steps_acknowledged", t.engine.ring_acks);
	rte_tel_data_add_dict_u64(d, "dropped_ring_step", t.engine.drops[PHUB_DROP_RING_STEP]);
	rte_tel_data_add_dict_u64(d, "retransmission_scans", t.net.ring_polls);
	rte_tel_data_add_dict_u64(d, "hellos_sent", LOAD(pbox.ring_hellos_sent));
	rte_tel_data_add_dict_u64(d, "hellos_taken", LOAD(pbox.ring_hellos_taken));
	rte_tel_data_add_dict_u64(d, "hellos_early", LOAD(pbox.ring_hellos_early));
	rte_tel_data_add_dict_u64(d, "hellos_refused", LOAD(pbox.ring_hellos_refused));
	rte_tel_data_add_dict_u64(d, "jobs_failed", LOAD(pbox.ring_jobs_failed));
	return 0;
}

/* Help texts are at most RTE_TEL_MAX_STRING_LEN - 1 bytes, or the command is not registered. */
/* The commands that read jobs, while no job can be freed under them. */
#define JOBS_LOCKED(name) \
static int \
name(const char *cmd, const char *params, struct rte_tel_data *d) \
{ \
	int rc; \
 \
	pthread_mutex_lock(&pbox.jobs_lock); \
	rc = pbox.engine != NULL ? name ## _locked(cmd, params, d) : -ENODEV; \
	pthread_mutex_unlock(&pbox.jobs_lock); \
	return rc; \
}
JOBS_LOCKED(cmd_jobs)
JOBS_LOCKED(cmd_job)
JOBS_LOCKED(cmd_chunkmap)
JOBS_LOCKED(cmd_ring)

int
pbox_telemetry_init(struct pbox *pb)
{
	rte_telemetry_register_cmd("/phub/stats", cmd_stats,
			"PBox totals: packets, bytes, pushes, drops by reason. No parameters");
	rte_telemetry_register_cmd("/phub/lcores", cmd_lcores,
			"Per data lcore counters. No parameters");
	rte_telemetry_register_cmd("/phub/ports", cmd_ports,
			"Per port: device, address, steering, ethdev counters. No parameters");
	rte_telemetry_register_cmd("/phub/jobs", cmd_jobs,
			"Every job: workers, iterations, exchanges/s. No parameters");
	rte_telemetry_register_cmd("/phub/job", cmd_job,
			"One job, its ranks and the ranks it waits on. Parameter: job id or name");
	rte_telemetry_register_cmd("/phub/chunkmap", cmd_chunkmap,
			"Bytes per server, lcore, port and NUMA node of a job. Parameter: job id or name");
	rte_telemetry_register_cmd("/phub/ring", cmd_ring,
			"Ring jobs: position, neighbours, traffic each way, HELLOs. No parameters");
	pbox_health_telemetry_init(pb);
	return 0;
}
