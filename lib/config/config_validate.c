/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * After parsing: params (defaults that depend on other fields, driver profiles, NUMA facts),
 * then the cross-field rules in a fixed order, then the derived tables (l3fwd-style lcore map,
 * data lcores and their UDP ports, effective segment size). Each rule blames one value that
 * is written in the text, so that its message has a real line and column.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config_priv.h"
#include "util/phub_addr.h"

#define PATH_LEN 64

static int
resolve_drivers_dir(struct cfg_ctx *ctx, struct phub_config *cfg)
{
	char joined[PHUB_CONFIG_PATH_MAX];
	const char *from;
	int n;

	if (cfg->drivers_dir[0] == '\0') {
		from = ctx->default_drivers_dir;
		n = snprintf(joined, sizeof(joined), "%s", from);
	} else if (cfg->drivers_dir[0] != '/' && ctx->base_dir[0] != '\0') {
		/* Relative to the file that says it, as include paths are. */
		n = snprintf(joined, sizeof(joined), "%s/%s", ctx->base_dir, cfg->drivers_dir);
	} else {
		return 0;
	}
	if (n < 0 || (size_t)n >= sizeof(joined))
		return cfg_error_at(ctx, "drivers_dir", "the drivers directory path is longer "
				    "than %d bytes", PHUB_CONFIG_PATH_MAX - 1);
	memcpy(cfg->drivers_dir, joined, (size_t)n + 1);
	return 0;
}

/* Params step: fill what depends on other fields or on the machine. */
int
cfg_params(struct cfg_ctx *ctx, struct phub_config *cfg)
{
	struct phub_config_eal *eal = &cfg->eal;
	int rc;

	rc = resolve_drivers_dir(ctx, cfg);
	if (rc != 0)
		return rc;
	if (eal->main_lcore == CFG_UNSET_U16) {
		for (unsigned int i = 0; i < eal->n_lcores; i++) {
			if (eal->lcores[i].id < eal->main_lcore)
				eal->main_lcore = eal->lcores[i].id;
		}
	}
	rc = cfg_drivers_load(ctx, cfg);
	if (rc != 0)
		return rc;
	for (unsigned int i = 0; i < cfg->n_ports; i++) {
		struct phub_config_port *port = &cfg->ports[i];
		const struct phub_config_driver *d = &cfg->drivers[port->driver];

		if (port->rx_desc == CFG_UNSET_U16)
			port->rx_desc = d->rx_desc_default;
		if (port->tx_desc == CFG_UNSET_U16)
			port->tx_desc = d->tx_desc_default;
		if (port->is_pci)
			port->numa_node = (int16_t)cfg_sysfs_pci_node(ctx->sysfs_root,
								      port->device);
	}
	for (unsigned int i = 0; i < eal->n_lcores; i++)
		eal->lcores[i].numa_node = (int16_t)cfg_sysfs_cpu_node(ctx->sysfs_root,
								       eal->lcores[i].cpu);
	return 0;
}

/* Index of an lcore id in eal.lcores, or -1. */
static int
eal_index(const struct phub_config *cfg, unsigned int id)
{
	for (unsigned int i = 0; i < cfg->eal.n_lcores; i++) {
		if (cfg->eal.lcores[i].id == id)
			return (int)i;
	}
	return -1;
}

static int
validate_eal(struct cfg_ctx *ctx, const struct phub_config *cfg)
{
	/* Options the configuration already gives EAL: a second, different value is a trap. */
	static const struct {
		const char *opt;
		const char *owner;
	} owned[] = {
		{ "-l", "eal.lcores" }, { "-c", "eal.lcores" }, { "--lcores", "eal.lcores" },
		{ "--main-lcore", "eal.main_lcore" }, { "--master-lcore", "eal.main_lcore" },
		{ "-m", "eal.memory_mb" }, { "--socket-mem", "eal.memory_mb" },
		{ "--no-huge", "eal.no_huge" }, { "--file-prefix", "eal.file_prefix" },
		{ "--vdev", "ports[].device" }, { "-a", "ports[].device" },
		{ "--allow", "ports[].device" }, { "-w", "ports[].device" },
		{ "--no-pci", "ports[].device" },
	};
	const struct phub_config_eal *eal = &cfg->eal;
	char path[PATH_LEN];

	for (unsigned int j = 0; j < eal->n_lcores; j++) {
		int i = eal_index(cfg, eal->lcores[j].id);

		if (i >= 0 && (unsigned int)i < j) {
			snprintf(path, sizeof(path), "eal.lcores[%u]", j);
			return cfg_error_at(ctx, path, "lcore %u is listed twice "
					    "(also eal.lcores[%d])", eal->lcores[j].id, i);
		}
	}
	if (eal_index(cfg, eal->main_lcore) < 0)
		return cfg_error_at(ctx, "eal.main_lcore", "lcore %u is not in eal.lcores",
				    eal->main_lcore);
	for (unsigned int j = 0; j < eal->n_extra_args; j++) {
		const char *arg = eal->extra_args[j];

		for (size_t k = 0; k < sizeof(owned) / sizeof(owned[0]); k++) {
			size_t n = strlen(owned[k].opt);
			bool is_short = owned[k].opt[1] != '-';

			if (strncmp(arg, owned[k].opt, n) != 0 ||
			    (!is_short && arg[n] != '\0' && arg[n] != '='))
				continue;
			snprintf(path, sizeof(path), "eal.extra_args[%u]", j);
			return cfg_error_at(ctx, path, "%s is set from %s; remove it here",
					    owned[k].opt, owned[k].owner);
		}
	}
	return 0;
}

/* Two device strings name the same device: same PCI address, or same vdev name. */
static bool
same_device(const struct phub_config_port *a, const struct phub_config_port *b)
{
	size_t na;
	size_t nb;

	if (a->is_pci != b->is_pci)
		return false;
	if (a->is_pci)
		return strcmp(a->device, b->device) == 0;
	na = strcspn(a->device, ",");
	nb = strcspn(b->device, ",");
	return na == nb && strncmp(a->device, b->device, na) == 0;
}

static int
validate_port_identity(struct cfg_ctx *ctx, const struct phub_config *cfg, unsigned int i)
{
	const struct phub_config_port *port = &cfg->ports[i];
	const struct phub_config_driver *d = &cfg->drivers[port->driver];
	char path[PATH_LEN];
	char addr[INET_ADDRSTRLEN];

	for (unsigned int j = 0; j < i; j++) {
		const struct phub_config_port *other = &cfg->ports[j];

		if (strcmp(other->name, port->name) == 0) {
			snprintf(path, sizeof(path), "ports[%u].name", i);
			return cfg_error_at(ctx, path, "port name \"%s\" is also ports[%u].name",
					    port->name, j);
		}
		if (same_device(other, port)) {
			snprintf(path, sizeof(path), "ports[%u].device", i);
			return cfg_error_at(ctx, path, "device %.*s is also ports[%u].device",
					    (int)strcspn(port->device, ","), port->device, j);
		}
		if (other->ipv4 == port->ipv4) {
			phub_ipv4_text(port->ipv4, addr, sizeof(addr));
			snprintf(path, sizeof(path), "ports[%u].ipv4", i);
			return cfg_error_at(ctx, path, "address %s is also ports[%u].ipv4", addr,
					    j);
		}
	}
	snprintf(path, sizeof(path), "ports[%u].device", i);
	if (port->is_pci && d->bus != PHUB_CONFIG_BUS_PCI)
		return cfg_error_at(ctx, path, "%s is a PCI address, but driver %s takes a vdev "
				    "(%s...)", port->device, phub_config_driver_name(port->driver),
				    d->pmd);
	if (!port->is_pci && d->bus == PHUB_CONFIG_BUS_PCI)
		return cfg_error_at(ctx, path, "driver %s takes a PCI address, not a vdev",
				    phub_config_driver_name(port->driver));
	if (!port->is_pci && strncmp(port->device, d->pmd, strlen(d->pmd)) != 0)
		return cfg_error_at(ctx, path, "vdev %.*s is not a %s device: its name must start "
				    "with %s", (int)strcspn(port->device, ","), port->device,
				    phub_config_driver_name(port->driver), d->pmd);
	return 0;
}

static int
validate_port_lcores(struct cfg_ctx *ctx, const struct phub_config *cfg, unsigned int i)
{
	const struct phub_config_port *port = &cfg->ports[i];
	const struct phub_config_driver *d = &cfg->drivers[port->driver];
	const char *drv = phub_config_driver_name(port->driver);
	char path[PATH_LEN];

	for (unsigned int q = 0; q < port->n_lcores; q++) {
		unsigned int lcore = port->lcores[q];

		snprintf(path, sizeof(path), "ports[%u].lcores[%u]", i, q);
		for (unsigned int r = 0; r < q; r++) {
			if (port->lcores[r] == lcore)
				return cfg_error_at(ctx, path, "lcore %u is listed twice in "
						    "this port (also lcores[%u])", lcore, r);
		}
		if (eal_index(cfg, lcore) < 0)
			return cfg_error_at(ctx, path, "lcore %u is not in eal.lcores", lcore);
		if (lcore == cfg->eal.main_lcore)
			return cfg_error_at(ctx, path, "lcore %u is the main lcore, which does the "
					    "control work and serves no port", lcore);
	}
	snprintf(path, sizeof(path), "ports[%u].lcores", i);
	if (d->steering == PHUB_CONFIG_STEERING_PORT_PER_LCORE && port->n_lcores > 1)
		return cfg_error_at(ctx, path, "driver %s steers port_per_lcore: one lcore per "
				    "port, not %u (give each lcore its own port)", drv,
				    port->n_lcores);
	if (port->n_lcores > d->max_queues)
		return cfg_error_at(ctx, path, "%u lcores, but driver %s has at most %u queues "
				    "per port (max_queues)", port->n_lcores, drv, d->max_queues);
	snprintf(path, sizeof(path), "ports[%u].mtu", i);
	if (port->mtu > d->max_mtu)
		return cfg_error_at(ctx, path, "%u is above driver %s's max_mtu %u", port->mtu, drv,
				    d->max_mtu);
	return 0;
}

/*
 * A port whose NUMA node is known should have a serving lcore on that node, or every packet
 * crosses the interconnect. Unknown nodes (VMs, vdevs, unreadable sysfs) prove nothing.
 */
static int
validate_port_numa(struct cfg_ctx *ctx, const struct phub_config *cfg, unsigned int i)
{
	const struct phub_config_port *port = &cfg->ports[i];
	char list[128];
	char path[PATH_LEN];
	size_t o = 0;

	if (port->numa_node < 0)
		return 0;
	list[0] = '\0';
	for (unsigned int q = 0; q < port->n_lcores; q++) {
		const struct phub_config_lcore *l = &cfg->eal.lcores[eal_index(cfg,
									  port->lcores[q])];

		if (l->numa_node < 0 || l->numa_node == port->numa_node)
			return 0;
		if (o < sizeof(list))
			o += (size_t)snprintf(list + o, sizeof(list) - o, "%slcore %u on node %d",
					      q == 0 ? "" : ", ", l->id, l->numa_node);
	}
	snprintf(path, sizeof(path), "ports[%u].device", i);
	return cfg_error_at(ctx, path, "%s is on NUMA node %d but no lcore serving it is (%s)",
			    port->device, port->numa_node, list);
}

static int
validate_sizes(struct cfg_ctx *ctx, const struct phub_config *cfg)
{
	const struct phub_config_timeouts *t = &cfg->timeouts;
	const struct phub_config_limits *l = &cfg->limits;

	if (cfg->segment_bytes != 0) {
		for (unsigned int i = 0; i < cfg->n_ports; i++) {
			unsigned int fit = cfg->ports[i].mtu - PHUB_CONFIG_SEGMENT_OVERHEAD;

			if (cfg->segment_bytes > fit)
				return cfg_error_at(ctx, "segment_bytes", "%u does not fit "
						    "ports[%u]: mtu %u carries at most %u bytes of "
						    "segment", cfg->segment_bytes, i,
						    cfg->ports[i].mtu, fit);
		}
		if (cfg->segment_bytes > cfg->chunk_bytes)
			return cfg_error_at(ctx, "segment_bytes", "%u is larger than "
					    "chunk_bytes %u", cfg->segment_bytes, cfg->chunk_bytes);
	}
	/* Each pair blames the key that is written; when both are, the first named. */
	if (cfg->window_bytes < cfg->chunk_bytes) {
		if (cfg_has(ctx, "window_bytes"))
			return cfg_error_at(ctx, "window_bytes", "%u is smaller than "
					    "chunk_bytes %u: a worker could not have one chunk in "
					    "flight",
					    cfg->window_bytes, cfg->chunk_bytes);
		return cfg_error_at(ctx, "chunk_bytes", "%u is larger than window_bytes %u: a "
				    "worker could not have one chunk in flight", cfg->chunk_bytes,
				    cfg->window_bytes);
	}
	if (t->rto_min_ms > t->rto_max_ms) {
		if (cfg_has(ctx, "timeouts.rto_min_ms"))
			return cfg_error_at(ctx, "timeouts.rto_min_ms", "%u is above rto_max_ms %u",
					    t->rto_min_ms, t->rto_max_ms);
		return cfg_error_at(ctx, "timeouts.rto_max_ms", "%u is below rto_min_ms %u",
				    t->rto_max_ms, t->rto_min_ms);
	}
	if (t->worker_dead_ms <= t->rto_max_ms) {
		if (cfg_has(ctx, "timeouts.worker_dead_ms"))
			return cfg_error_at(ctx, "timeouts.worker_dead_ms", "%u must exceed "
					    "rto_max_ms %u: a worker is dead only once retransmits "
					    "went unanswered", t->worker_dead_ms, t->rto_max_ms);
		return cfg_error_at(ctx, "timeouts.rto_max_ms", "%u must be below worker_dead_ms "
				    "%u: a worker is dead only once retransmits went unanswered",
				    t->rto_max_ms, t->worker_dead_ms);
	}
	if (l->job_memory_mb > l->total_memory_mb) {
		if (cfg_has(ctx, "limits.job_memory_mb"))
			return cfg_error_at(ctx, "limits.job_memory_mb", "%u is above "
					    "total_memory_mb %u", l->job_memory_mb,
					    l->total_memory_mb);
		return cfg_error_at(ctx, "limits.total_memory_mb", "%u is below job_memory_mb %u",
				    l->total_memory_mb, l->job_memory_mb);
	}
	return 0;
}

static int
validate_jobs(struct cfg_ctx *ctx, const struct phub_config *cfg)
{
	char path[PATH_LEN];

	if (cfg->n_jobs > cfg->limits.max_jobs) {
		snprintf(path, sizeof(path), "jobs[%u]", cfg->limits.max_jobs);
		return cfg_error_at(ctx, path, "%u jobs, but limits.max_jobs is %u", cfg->n_jobs,
				    cfg->limits.max_jobs);
	}
	for (unsigned int i = 0; i < cfg->n_jobs; i++) {
		const struct phub_config_job *job = &cfg->jobs[i];

		if (job->workers > cfg->limits.max_workers_per_job) {
			snprintf(path, sizeof(path), "jobs[%u].workers", i);
			return cfg_error_at(ctx, path, "%u workers, but limits.max_workers_per_job "
					    "is %u", job->workers, cfg->limits.max_workers_per_job);
		}
		for (unsigned int j = 0; j < i; j++) {
			if (strcmp(cfg->jobs[j].name, job->name) == 0) {
				snprintf(path, sizeof(path), "jobs[%u].name", i);
				return cfg_error_at(ctx, path, "job name \"%s\" is also "
						    "jobs[%u].name", job->name, j);
			}
			if (cfg->jobs[j].nonce == job->nonce) {
				snprintf(path, sizeof(path), "jobs[%u].nonce", i);
				return cfg_error_at(ctx, path, "the same nonce as jobs[%u]: "
						    "each job needs its own secret", j);
			}
		}
	}
	return 0;
}

static int
validate_peers(struct cfg_ctx *ctx, const struct phub_config *cfg)
{
	char addr[INET_ADDRSTRLEN];
	char path[PATH_LEN];

	for (unsigned int i = 0; i < cfg->n_peers; i++) {
		const struct phub_config_peer *peer = &cfg->peers[i];

		phub_ipv4_text(peer->ipv4, addr, sizeof(addr));
		snprintf(path, sizeof(path), "peers[%u].ipv4", i);
		for (unsigned int p = 0; p < cfg->n_ports; p++) {
			if (cfg->ports[p].ipv4 == peer->ipv4)
				return cfg_error_at(ctx, path, "%s is our own address "
						    "(ports[%u].ipv4)", addr, p);
		}
		for (unsigned int j = 0; j < i; j++) {
			if (strcmp(cfg->peers[j].name, peer->name) == 0) {
				snprintf(path, sizeof(path), "peers[%u].name", i);
				return cfg_error_at(ctx, path, "peer name \"%s\" is also "
						    "peers[%u].name", peer->name, j);
			}
			if (cfg->peers[j].ipv4 == peer->ipv4 &&
			    cfg->peers[j].udp_port == peer->udp_port)
				return cfg_error_at(ctx, path, "%s:%u is also peers[%u]", addr,
						    peer->udp_port, j);
		}
	}
	return 0;
}

/* The port that reaches each peer: named, or the first. */
static int
validate_peer_ports(struct cfg_ctx *ctx, struct phub_config *cfg)
{
	char path[PATH_LEN];

	for (unsigned int i = 0; i < cfg->n_peers; i++) {
		struct phub_config_peer *peer = &cfg->peers[i];
		unsigned int p;

		peer->port_index = 0;
		if (peer->port[0] == '\0')
			continue;
		for (p = 0; p < cfg->n_ports; p++)
			if (strcmp(cfg->ports[p].name, peer->port) == 0)
				break;
		if (p == cfg->n_ports) {
			snprintf(path, sizeof(path), "peers[%u].port", i);
			return cfg_error_at(ctx, path, "no port is named \"%s\"", peer->port);
		}
		peer->port_index = (uint16_t)p;
	}
	return 0;
}

/*
 * A job's ring: each rack names this PBox or a peer, this PBox exactly once, no PBox twice, and
 * the racks' ranks add up to the job's workers. Derives each rack's peer and first rank.
 */
static int
validate_job_racks(struct cfg_ctx *ctx, struct phub_config *cfg, unsigned int i)
{
	struct phub_config_job *job = &cfg->jobs[i];
	unsigned int self = job->n_racks, total = 0;
	char path[PATH_LEN];

	if (job->on_worker_dead == PHUB_CONFIG_ON_DEAD_CONTINUE) {
		snprintf(path, sizeof(path), "jobs[%u].on_worker_dead", i);
		return cfg_error_at(ctx, path, "\"continue\" is for a job of one PBox: the racks "
				    "of a ring sum in step, none can go on without a rank");
	}
	for (unsigned int r = 0; r < job->n_racks; r++) {
		struct phub_config_job_rack *rack = &job->racks[r];

		snprintf(path, sizeof(path), "jobs[%u].racks[%u].pbox", i, r);
		rack->peer = -1;
		if (strcmp(rack->pbox, cfg->name) == 0) {
			if (self != job->n_racks)
				return cfg_error_at(ctx, path, "\"%s\" is this PBox (name), and so "
						    "is racks[%u]: a PBox holds one rack of a ring",
						    rack->pbox, self);
			self = r;
		} else {
			for (unsigned int p = 0; p < cfg->n_peers; p++)
				if (strcmp(cfg->peers[p].name, rack->pbox) == 0)
					rack->peer = (int16_t)p;
			if (rack->peer < 0)
				return cfg_error_at(ctx, path, "\"%s\" is neither this PBox (name "
						    "\"%s\") nor one of peers[].name", rack->pbox,
						    cfg->name);
		}
		for (unsigned int q = 0; q < r; q++)
			if (strcmp(job->racks[q].pbox, rack->pbox) == 0)
				return cfg_error_at(ctx, path, "\"%s\" is also racks[%u]: a PBox "
						    "holds one rack of a ring", rack->pbox, q);
		rack->rank_base = (uint16_t)total;
		total += rack->ranks;
	}
	if (self == job->n_racks) {
		snprintf(path, sizeof(path), "jobs[%u].racks", i);
		return cfg_error_at(ctx, path, "no rack is this PBox (name \"%s\"): list the "
				    "racks of the ring, this one among them", cfg->name);
	}
	if (total != job->workers) {
		snprintf(path, sizeof(path), "jobs[%u].workers", i);
		return cfg_error_at(ctx, path, "%u workers, but the racks hold %u ranks: workers "
				    "is the whole job's, over every rack", job->workers, total);
	}
	job->ring_pos = (uint16_t)self;
	return 0;
}

/* Validate step: the rules between fields, in a fixed order; the first broken one is told. */
int
cfg_validate(struct cfg_ctx *ctx, struct phub_config *cfg)
{
	bool data[PHUB_CONFIG_MAX_LCORES] = { false };
	unsigned int n_data = 0;
	int rc;

	rc = validate_eal(ctx, cfg);
	for (unsigned int i = 0; rc == 0 && i < cfg->n_ports; i++) {
		rc = validate_port_identity(ctx, cfg, i);
		if (rc == 0)
			rc = validate_port_lcores(ctx, cfg, i);
		if (rc == 0)
			rc = validate_port_numa(ctx, cfg, i);
	}
	if (rc != 0)
		return rc;
	for (unsigned int i = 0; i < cfg->n_ports; i++) {
		for (unsigned int q = 0; q < cfg->ports[i].n_lcores; q++) {
			n_data += !data[cfg->ports[i].lcores[q]];
			data[cfg->ports[i].lcores[q]] = true;
		}
	}
	if (cfg->udp_base_port + n_data > 65535)
		return cfg_error_at(ctx, "udp_base_port", "%u + %u data lcores runs past port "
				    "65535", cfg->udp_base_port, n_data);
	rc = validate_sizes(ctx, cfg);
	if (rc == 0)
		rc = validate_jobs(ctx, cfg);
	if (rc == 0)
		rc = validate_peers(ctx, cfg);
	if (rc == 0)
		rc = validate_peer_ports(ctx, cfg);
	for (unsigned int i = 0; rc == 0 && i < cfg->n_jobs; i++)
		if (cfg->jobs[i].n_racks != 0)
			rc = validate_job_racks(ctx, cfg, i);
	return rc;
}

/* Derived tables; cfg is valid, so every lookup here succeeds. */
void
cfg_derive(struct phub_config *cfg)
{
	bool data[PHUB_CONFIG_MAX_LCORES] = { false };

	cfg->n_lcore_params = 0;
	for (unsigned int p = 0; p < cfg->n_ports; p++) {
		for (unsigned int q = 0; q < cfg->ports[p].n_lcores; q++) {
			struct phub_config_lcore_params *lp =
				&cfg->lcore_params[cfg->n_lcore_params++];

			lp->port = (uint16_t)p;
			lp->queue = (uint16_t)q;
			lp->lcore = cfg->ports[p].lcores[q];
			data[lp->lcore] = true;
		}
	}
	cfg->n_data_lcores = 0;
	for (unsigned int id = 0; id < PHUB_CONFIG_MAX_LCORES; id++) {
		if (data[id])
			cfg->data_lcores[cfg->n_data_lcores++] = (uint16_t)id;
	}
	for (unsigned int i = 0; i < cfg->eal.n_lcores; i++) {
		struct phub_config_lcore *l = &cfg->eal.lcores[i];

		l->data_index = -1;
		for (unsigned int k = 0; k < cfg->n_data_lcores; k++) {
			if (cfg->data_lcores[k] == l->id)
				l->data_index = (int16_t)k;
		}
	}
	if (cfg->segment_bytes == 0) {
		uint32_t seg = cfg->chunk_bytes;

		for (unsigned int p = 0; p < cfg->n_ports; p++) {
			uint32_t fit = cfg->ports[p].mtu - PHUB_CONFIG_SEGMENT_OVERHEAD;

			fit -= fit % PHUB_CONFIG_SEGMENT_ALIGN;
			if (fit < seg)
				seg = fit;
		}
		cfg->segment_bytes = seg;
	}
}
