/* SPDX-License-Identifier: BSD-3-Clause */
/* Why a job does not fit: its memory by part, what is free, and the key that raises the limit. */

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <numa.h>
#include <numaif.h>

#include <rte_malloc.h>

#include "model/phub_model.h"
#include "pbox.h"

#define MB(b) ((double)(b) / (1 << 20))

/* The bytes all jobs hold now, as control.c charges them. */
static uint64_t
jobs_bytes(const struct pbox *pb)
{
	uint64_t sum = 0;

	for (struct phub_engine_job *j = phub_engine_job_next(pb->engine, NULL); j != NULL;
	     j = phub_engine_job_next(pb->engine, j)) {
		struct phub_engine_job_info info;

		phub_engine_job_get_info(j, &info);
		sum += info.memory_bytes;
	}
	return sum;
}

void
pbox_memory_explain(const struct pbox *pb, const struct phub_engine_job_params *p,
		const struct phub_wire_key *keys, uint32_t n_keys, int err, int socket,
		char *buf, size_t size)
{
	struct phub_engine_memory_params mp = {
		.n_keys = n_keys, .dtype = p->dtype, .optimizer = p->optimizer.type,
		.world_size = p->world_size, .deterministic = p->deterministic,
		.checkpoint_shadow = p->checkpoint_shadow, .n_servers = p->n_servers,
		.segment_elems = p->segment_elems,
	};
	struct phub_engine_memory m;
	struct rte_malloc_socket_stats stats;
	uint64_t total = (uint64_t)pb->cfg.limits.total_memory_mb << 20, used;
	int n;

	for (uint32_t i = 0; i < n_keys; i++)
		mp.n_elems += keys[i].elem_count;
	phub_engine_memory_need(&mp, &m);
	/* What to change first: a worker shows only the start of a long message. */
	if (err == E2BIG) {
		used = RTE_MIN(jobs_bytes(pb), total);
		n = snprintf(buf, size, "needs %.1f MB, more than the limits leave: %u MB per job "
				"(limits.job_memory_mb), %.0f MB left of %u MB "
				"(limits.total_memory_mb)", MB(m.total),
				pb->cfg.limits.job_memory_mb, MB(total - used),
				pb->cfg.limits.total_memory_mb);
	} else {
		if (rte_malloc_get_socket_stats(socket, &stats) != 0)
			memset(&stats, 0, sizeof(stats));
		n = snprintf(buf, size, "needs %.1f MB on NUMA node %d, where EAL has %.1f MB free "
				"(largest block %.1f MB): raise eal.memory_mb (now %u)",
				MB(m.total), socket, MB(stats.heap_freesz_bytes),
				MB(stats.greatest_free_size), pb->cfg.eal.memory_mb);
	}
	if (n < 0 || (size_t)n >= size)
		return;
	/* Then the parts, only those the job has. */
	const struct {
		const char *name;
		uint64_t bytes;
	} parts[] = {
		{ "model", m.model }, { "optimizer state", m.optimizer },
		{ "wire copy", m.wire_copy }, { "checkpoint shadow", m.checkpoint_shadow },
		{ "deterministic staging", m.deterministic_staging },
	};
	const char *sep = "; ";

	for (size_t i = 0; i < RTE_DIM(parts) && n > 0 && (size_t)n < size; i++) {
		if (parts[i].bytes == 0)
			continue;
		n += snprintf(buf + n, size - (size_t)n, "%s%s %.1f MB", sep, parts[i].name,
				MB(parts[i].bytes));
		sep = ", ";
	}
}

/* A job of n_elems fp32 parameters with optimizer opt, as this configuration would run it. */
static uint64_t
job_bytes(const struct phub_config *cfg, uint64_t n_elems, enum phub_opt_type opt,
		uint16_t workers)
{
	struct phub_engine_memory_params mp = {
		.n_elems = n_elems, .n_keys = 1, .dtype = PHUB_DTYPE_FP32, .optimizer = opt,
		.world_size = workers, .deterministic = cfg->deterministic,
		.checkpoint_shadow = cfg->checkpoint.dir[0] != '\0',
		.n_servers = cfg->n_lcore_params, .segment_elems = cfg->segment_bytes / 4,
	};
	struct phub_engine_memory m;

	if (mp.segment_elems == 0)
		mp.segment_elems = 1024;
	phub_engine_memory_need(&mp, &m);
	return m.total;
}

static const char *
fit_word(uint64_t need, uint64_t job_limit, uint64_t eal_free)
{
	if (need > job_limit)
		return "over limits";
	if (need > eal_free)
		return "over EAL";
	return "fits";
}

static unsigned int eal_nodes(const struct phub_config *cfg);

void
pbox_memory_plan(const struct phub_config *cfg, FILE *f)
{
	uint64_t job_limit = (uint64_t)RTE_MIN(cfg->limits.job_memory_mb,
			cfg->limits.total_memory_mb) << 20;
	uint64_t eal = (uint64_t)cfg->eal.memory_mb << 20;
	uint64_t pools = pbox_pools_estimate_bytes(cfg);
	unsigned int nodes = eal_nodes(cfg);
	/* A job takes its memory on one node: the JOIN port's. */
	uint64_t eal_free = eal > pools ? (eal - pools) / nodes : 0;
	uint16_t workers = 2;

	fprintf(f, "# memory: a job may take %u MB (limits.job_memory_mb), all jobs %u MB "
			"(limits.total_memory_mb); EAL memory %u MB (eal.memory_mb) over %u NUMA "
			"node(s), about %.0f MB of it for the mbuf pools\n",
			cfg->limits.job_memory_mb, cfg->limits.total_memory_mb, cfg->eal.memory_mb,
			nodes, MB(pools));
	fprintf(f, "# one job of %u workers, fp32, %s sums, checkpoints %s: MB needed and "
			"whether it fits\n", workers, cfg->deterministic ? "rank-order" :
			"arrival-order", cfg->checkpoint.dir[0] != '\0' ? "on" : "off");
	fprintf(f, "#   %-12s %10s  %-22s %s\n", "model", "params", "sgd with momentum",
			"adam");
	for (size_t i = 0; i < phub_model_preset_count(); i++) {
		const struct phub_model_preset *mp = phub_model_preset_at(i);
		uint64_t elems = (uint64_t)(phub_model_preset_bytes(mp, PHUB_MODEL_UNITS_PAPER) /
				sizeof(float));
		uint64_t mom = job_bytes(cfg, elems, PHUB_OPT_MOMENTUM, workers);
		uint64_t adam = job_bytes(cfg, elems, PHUB_OPT_ADAM, workers);
		char a[32], b[32];

		snprintf(a, sizeof(a), "%7.0f %s", MB(mom), fit_word(mom, job_limit, eal_free));
		snprintf(b, sizeof(b), "%7.0f %s", MB(adam), fit_word(adam, job_limit, eal_free));
		fprintf(f, "#   %-12s %9.1fM  %-22s %s\n", mp->title, (double)elems / 1e6, a, b);
	}
	fprintf(f, "# (over limits: raise limits.job_memory_mb and limits.total_memory_mb; over EAL: "
			"more than one node's share: raise eal.memory_mb)\n");
}

/*
 * The NUMA nodes phub-setup shares eal.memory_mb over (scripts/phub-setup, hugepages): those
 * of the ports and their lcores, where sysfs told; 1 when none is known.
 */
static unsigned int
eal_nodes(const struct phub_config *cfg)
{
	uint64_t seen = 0;
	unsigned int n = 0;

	for (unsigned int i = 0; i < cfg->n_ports; i++)
		if (cfg->ports[i].numa_node >= 0 && cfg->ports[i].numa_node < 64)
			seen |= UINT64_C(1) << cfg->ports[i].numa_node;
	for (unsigned int i = 0; i < cfg->n_data_lcores; i++) {
		const struct phub_config_lcore *l = phub_config_lcore_find(cfg, cfg->data_lcores[i]);

		if (l != NULL && l->numa_node >= 0 && l->numa_node < 64)
			seen |= UINT64_C(1) << l->numa_node;
	}
	for (; seen != 0; seen &= seen - 1)
		n++;
	return n == 0 ? 1 : n;
}

static uint64_t
mb_up(uint64_t bytes)
{
	return (bytes + (1u << 20) - 1) >> 20;
}

/* One declared job as its own file says: its size, workers, dtype, optimizer, sums. */
static void
declared_job_need(const struct phub_config *cfg, const struct phub_config_job *job,
		struct phub_engine_memory *m)
{
	struct phub_engine_memory_params mp = {
		.n_elems = job->parameters, .n_keys = 1, .dtype = job->dtype,
		.optimizer = job->optimizer.type, .deterministic = job->deterministic,
		/* A ring job's PBox holds its own rack's ranks, and the ring's four buffers. */
		.world_size = job->n_racks != 0 ? job->racks[job->ring_pos].ranks : job->workers,
		.ring = job->n_racks != 0,
		.checkpoint_shadow = cfg->checkpoint.dir[0] != '\0',
		.n_servers = cfg->n_lcore_params,
		.segment_elems = cfg->segment_bytes / (uint32_t)phub_dtype_size(job->dtype),
	};

	if (mp.segment_elems == 0)
		mp.segment_elems = 1024;
	phub_engine_memory_need(&mp, m);
}

int
pbox_memory_check_jobs(const struct phub_config *cfg, const char *path, FILE *f)
{
	uint64_t pools = pbox_pools_estimate_bytes(cfg);
	uint64_t eal = (uint64_t)cfg->eal.memory_mb << 20;
	unsigned int nodes = eal_nodes(cfg);
	uint64_t node_free = eal > pools ? (eal - pools) / nodes : 0;
	uint64_t all = 0;
	int failed = 0;

	for (unsigned int i = 0; i < cfg->n_jobs; i++) {
		const struct phub_config_job *job = &cfg->jobs[i];
		struct phub_engine_memory m;
		char why[320];
		char ring[32];

		if (job->parameters == 0) {
			fprintf(f, "# jobs[%u] %s: no \"model\" or \"parameters\": its memory is not "
					"checked\n", i, job->name);
			continue;
		}
		declared_job_need(cfg, job, &m);
		all += m.total;
		ring[0] = '\0';
		if (m.ring != 0)
			snprintf(ring, sizeof(ring), ", ring %.0f", MB(m.ring));
		fprintf(f, "# jobs[%u] %s: %.1fM parameters (%s%s), %u workers%s, %s, %s, %s sums, "
				"checkpoints %s: %.0f MB (model %.0f, optimizer state %.0f, wire "
				"copy %.0f, checkpoint shadow %.0f, deterministic staging %.0f%s)\n",
				i,
				job->name, (double)job->parameters / 1e6,
				job->model[0] != '\0' ? "model " : "parameters", job->model,
				job->workers, job->n_racks != 0 ? " over its ring" : "",
				phub_dtype_name(job->dtype), phub_opt_type_name(job->optimizer.type),
				job->deterministic ? "rank-order" : "arrival-order",
				cfg->checkpoint.dir[0] != '\0' ? "on" : "off", MB(m.total),
				MB(m.model), MB(m.optimizer), MB(m.wire_copy),
				MB(m.checkpoint_shadow), MB(m.deterministic_staging), ring);
		/* The key to raise (job_memory_mb <= total_memory_mb: the config checks it). */
		why[0] = '\0';
		if (m.total > (uint64_t)cfg->limits.job_memory_mb << 20)
			snprintf(why, sizeof(why), "more than limits.job_memory_mb (%u): raise it to "
					"%" PRIu64 " or more", cfg->limits.job_memory_mb,
					mb_up(m.total));
		else if (m.total > node_free)
			snprintf(why, sizeof(why), "more than EAL has on one NUMA node (%.0f MB: "
					"eal.memory_mb %u over %u node(s), less about %.0f MB of mbuf "
					"pools): raise eal.memory_mb to %" PRIu64 " or more",
					MB(node_free), cfg->eal.memory_mb, nodes, MB(pools),
					mb_up(m.total * nodes + pools));
		if (why[0] != '\0') {
			fprintf(stderr, "phub-pbox: %s: jobs[%u] (%s) needs %" PRIu64 " MB, %s\n",
					path, i, job->name, mb_up(m.total), why);
			failed = 1;
		}
	}
	if (all > (uint64_t)cfg->limits.total_memory_mb << 20 && cfg->n_jobs > 1)
		fprintf(f, "# the declared jobs together need %.0f MB, more than "
				"limits.total_memory_mb (%u): they cannot all run at once\n", MB(all),
				cfg->limits.total_memory_mb);
	/* A peer no declared ring job names serves nothing (the PBox only rings declared jobs). */
	for (unsigned int p = 0; p < cfg->n_peers; p++) {
		bool used = false;

		for (unsigned int i = 0; i < cfg->n_jobs && !used; i++)
			for (unsigned int r = 0; r < cfg->jobs[i].n_racks && !used; r++)
				used = strcmp(cfg->jobs[i].racks[r].pbox, cfg->peers[p].name) == 0;
		if (!used)
			fprintf(f, "# peers[%u] %s: no job of jobs[] has it in its racks: it serves "
					"nothing (remove it, or declare the ring job)\n", p,
					cfg->peers[p].name);
	}
	return failed ? -E2BIG : 0;
}

struct place_ctx {
	uint8_t *base;
	size_t size;
	size_t page;
	uint64_t bytes[RTE_MAX_NUMA_NODES];
	int failures;
};

static void
place_run(uint64_t first_page, uint64_t n_pages, int node, void *arg)
{
	struct place_ctx *pc = arg;
	unsigned long mask[RTE_MAX_NUMA_NODES / (8 * sizeof(unsigned long)) + 1] = { 0 };
	uint64_t off = first_page * pc->page, len = n_pages * pc->page;

	if (node < 0 || node >= RTE_MAX_NUMA_NODES || off >= pc->size)
		return;
	len = RTE_MIN(len, pc->size - off);
	mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
	/* Pages already written (the engine zeroes its buffers) move: MPOL_MF_MOVE. */
	if (mbind(pc->base + off, len, MPOL_BIND, mask, RTE_MAX_NUMA_NODES + 1, MPOL_MF_MOVE) != 0)
		pc->failures++;
	else
		pc->bytes[node] += len;
}

void
pbox_memory_place(void *ptr, size_t size, size_t elem_bytes, const struct phub_layout *layout,
		void *ctx)
{
	struct place_ctx pc = { .size = size, .page = (size_t)sysconf(_SC_PAGESIZE) };
	unsigned int nodes = 0;

	(void)ctx;
	/* One node: nothing to choose. libnuma says whether the kernel has NUMA at all. */
	if (ptr == NULL || numa_available() < 0 || numa_max_node() < 1)
		return;
	for (unsigned int s = 0; s < pbox.n_servers; s++)
		if (pbox.servers[s].lcore_numa != pbox.servers[0].lcore_numa)
			nodes++;
	if (nodes == 0)
		return;
	/* The engine gives page-aligned buffers to a placing allocator; anything else stays. */
	if ((uintptr_t)ptr % pc.page != 0)
		return;
	pc.base = (uint8_t *)ptr;
	phub_layout_pages_by_node(layout, pbox.servers, pbox.n_servers, elem_bytes, pc.page,
			place_run, &pc);
	if (pc.failures != 0)
		PBOX_LOG(NOTICE, "job buffer of %zu KB: %d page run(s) could not move to their "
				"chunk's NUMA node (mbind): they stay on the JOIN port's node",
				size >> 10, pc.failures);
}

/*
 * DPDK's control threads (telemetry, interrupts, multi-process) onto the CPUs of node that no
 * data lcore uses; EAL puts them on every CPU outside the lcores, on any node.
 */
static void
place_control_threads(const struct pbox *pb, int node)
{
	static const char *const names[] = { "telemetry", "eal-intr", "rte_mp" };
	struct bitmask *cpus = numa_allocate_cpumask();
	struct dirent *e;
	cpu_set_t set;
	unsigned int n = 0, moved = 0;
	DIR *dir;

	if (cpus == NULL)
		return;
	CPU_ZERO(&set);
	if (numa_node_to_cpus(node, cpus) == 0) {
		for (unsigned int c = 0; c < cpus->size && c < CPU_SETSIZE; c++) {
			bool data = false;

			if (!numa_bitmask_isbitset(cpus, c))
				continue;
			for (unsigned int i = 0; i < pb->cfg.eal.n_lcores; i++)
				if (pb->cfg.eal.lcores[i].cpu == c &&
				    pb->cfg.eal.lcores[i].id != pb->cfg.eal.main_lcore)
					data = true;
			if (!data) {
				CPU_SET(c, &set);
				n++;
			}
		}
	}
	numa_free_cpumask(cpus);
	dir = n > 0 ? opendir("/proc/self/task") : NULL;
	while (dir != NULL && (e = readdir(dir)) != NULL) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(comm, sizeof(comm), f) == NULL)
			comm[0] = '\0';
		fclose(f);
		for (size_t i = 0; i < RTE_DIM(names); i++)
			if (strncmp(comm, names[i], strlen(names[i])) == 0 &&
			    sched_setaffinity((pid_t)atoi(e->d_name), sizeof(set), &set) == 0)
				moved++;
	}
	if (dir != NULL)
		closedir(dir);
	PBOX_LOG(INFO, "control threads: %u on the %u CPU(s) of NUMA node %d no data lcore uses",
			moved, n, node);
}

void
pbox_memory_control_node(const struct pbox *pb)
{
	int node = (int)rte_lcore_to_socket_id(rte_get_main_lcore());

	if (numa_available() < 0 || numa_max_node() < 1)
		return;
	/*
	 * The control plane (the main lcore: JOINs, checkpoints' arming, the answers telemetry
	 * reads) allocates its own memory (jansson, job tables) on its node; EAL already pins it
	 * to its CPU. DPDK's control threads go to that node too.
	 */
	numa_set_preferred(node);
	PBOX_LOG(INFO, "control plane on NUMA node %d (lcore %u)", node, rte_get_main_lcore());
	place_control_threads(pb, node);
}

static void *
socket_alloc(size_t size, size_t align, void *ctx)
{
	return rte_malloc_socket("phub_job", size, (unsigned int)align, (int)(intptr_t)ctx);
}

static void
socket_free(void *ptr, void *ctx)
{
	(void)ctx;
	rte_free(ptr);
}

struct phub_engine_allocator
pbox_memory_allocator(int socket)
{
	return (struct phub_engine_allocator){ .alloc = socket_alloc, .free = socket_free,
		.place = pbox_memory_place, .ctx = (void *)(intptr_t)socket };
}
