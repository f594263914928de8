/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The appliance's configuration: one JSON file (and the driver profiles it names) parsed into
 * a plain C struct, validated across fields, with every error naming file, line, column and
 * JSON path. No DPDK here: the struct is what app/pbox turns into EAL arguments and ports.
 */

#ifndef PHUB_CONFIG_H
#define PHUB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wire/phub_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Size of the caller's error buffer that always holds a whole message. */
#define PHUB_CONFIG_ERR_MAX 512

/* Limits of the schema; docs/config.md gives the same numbers. */
#define PHUB_CONFIG_MAX_LCORES 128	/* lcore ids are 0 .. 127 (DPDK's RTE_MAX_LCORE) */
#define PHUB_CONFIG_MAX_CPUS 1024	/* CPU ids in "lcore@cpu" are 0 .. 1023 */
#define PHUB_CONFIG_MAX_PORTS 16
#define PHUB_CONFIG_MAX_PORT_LCORES 64	/* lcores (hence queues) per port */
#define PHUB_CONFIG_MAX_QUEUES (PHUB_CONFIG_MAX_PORTS * PHUB_CONFIG_MAX_PORT_LCORES)
#define PHUB_CONFIG_MAX_PEERS 16
#define PHUB_CONFIG_MAX_RACKS 16	/* racks of a job's ring (PHUB_RING_MAX_RACKS) */
#define PHUB_CONFIG_MAX_JOBS 1024
#define PHUB_CONFIG_MAX_EXTRA_ARGS 32
#define PHUB_CONFIG_ARG_MAX 256		/* one EAL extra argument, with its NUL */
#define PHUB_CONFIG_NAME_MAX 32		/* port and peer names, with the NUL */
#define PHUB_CONFIG_JOB_NAME_MAX 64	/* job names, with the NUL */
#define PHUB_CONFIG_DEVICE_MAX 256	/* PCI address or vdev string, with the NUL */
#define PHUB_CONFIG_PREFIX_MAX 64	/* EAL file prefix, with the NUL */
#define PHUB_CONFIG_PMD_MAX 32
#define PHUB_CONFIG_NOTES_MAX 512
#define PHUB_CONFIG_PATH_MAX 4096

/*
 * Bytes of a datagram that are not segment payload: IPv4 (20) + UDP (8) + a reserve of 64 for
 * the PHub header. A port of MTU m carries segments of at most m - 92 bytes.
 */
#define PHUB_CONFIG_SEGMENT_OVERHEAD 92
/* Segments are whole cache lines so that aggregation never handles a partial vector. */
#define PHUB_CONFIG_SEGMENT_ALIGN 64

/*
 * X-macros: each makes an enum and its names in the JSON (VPP's foreach_x_error idiom). Ids are
 * meant to be pasted with ## (PHUB_CONFIG_DRIVER_##id): the driver id NULL would otherwise
 * expand to the C macro.
 */
#define PHUB_CONFIG_FOREACH_DRIVER(_) \
	_(MLX5, "mlx5") \
	_(ICE, "ice") \
	_(I40E, "i40e") \
	_(IXGBE, "ixgbe") \
	_(AF_XDP, "af_xdp") \
	_(AF_PACKET, "af_packet") \
	_(TAP, "tap") \
	_(NULL, "null") \
	_(RING, "ring") \
	_(MEMIF, "memif")

#define PHUB_CONFIG_FOREACH_STEERING(_) \
	_(NONE, "none") \
	_(TAP_BPF, "tap_bpf") \
	_(RTE_FLOW, "rte_flow") \
	_(RSS, "rss") \
	_(PORT_PER_LCORE, "port_per_lcore")

#define PHUB_CONFIG_FOREACH_BUS(_) \
	_(PCI, "pci") \
	_(VDEV, "vdev")

#define PHUB_CONFIG_FOREACH_IDLE(_) \
	_(POLL, "poll") \
	_(ADAPTIVE, "adaptive")

#define PHUB_CONFIG_ENUM_DRIVER_(id, name) PHUB_CONFIG_DRIVER_##id,
enum phub_config_driver_id {
	PHUB_CONFIG_FOREACH_DRIVER(PHUB_CONFIG_ENUM_DRIVER_)
	PHUB_CONFIG_DRIVER_COUNT
};
#undef PHUB_CONFIG_ENUM_DRIVER_

#define PHUB_CONFIG_ENUM_STEERING_(id, name) PHUB_CONFIG_STEERING_##id,
enum phub_config_steering {
	PHUB_CONFIG_FOREACH_STEERING(PHUB_CONFIG_ENUM_STEERING_)
	PHUB_CONFIG_STEERING_COUNT
};
#undef PHUB_CONFIG_ENUM_STEERING_

#define PHUB_CONFIG_ENUM_BUS_(id, name) PHUB_CONFIG_BUS_##id,
enum phub_config_bus {
	PHUB_CONFIG_FOREACH_BUS(PHUB_CONFIG_ENUM_BUS_)
	PHUB_CONFIG_BUS_COUNT
};
#undef PHUB_CONFIG_ENUM_BUS_

#define PHUB_CONFIG_ENUM_IDLE_(id, name) PHUB_CONFIG_IDLE_##id,
enum phub_config_idle_policy {
	PHUB_CONFIG_FOREACH_IDLE(PHUB_CONFIG_ENUM_IDLE_)
	PHUB_CONFIG_IDLE_COUNT
};
#undef PHUB_CONFIG_ENUM_IDLE_

/* One driver profile, drivers-cfg/<driver>.json. */
struct phub_config_driver {
	bool loaded;				/* a port uses it and it was read */
	enum phub_config_bus bus;
	enum phub_config_steering steering;
	enum phub_config_steering fallback;	/* PHUB_CONFIG_STEERING_NONE: none */
	uint16_t max_queues;
	uint16_t rx_desc_default;
	uint16_t tx_desc_default;
	uint16_t max_mtu;
	uint16_t mbuf_size;			/* data room with headroom; 0: DPDK's default */
	bool rx_checksum;
	bool tx_checksum;
	bool multi_seg;
	char pmd[PHUB_CONFIG_PMD_MAX];		/* "net_tap", "mlx5_pci", ... */
	/* PCI: the kernel driver phub-setup binds the NIC to ("vfio-pci", "mlx5_core"); else "" */
	char kernel_driver[PHUB_CONFIG_PMD_MAX];
	char notes[PHUB_CONFIG_NOTES_MAX];
};

/* An EAL lcore: eal.lcores[i]. */
struct phub_config_lcore {
	uint16_t id;		/* EAL lcore id */
	uint16_t cpu;		/* its CPU: the id itself unless written "id@cpu" */
	int16_t numa_node;	/* of that CPU, from sysfs; -1 when unknown */
	int16_t data_index;	/* index among the sorted data lcores; -1: main or unused */
};

struct phub_config_eal {
	struct phub_config_lcore lcores[PHUB_CONFIG_MAX_LCORES];	/* in the order written */
	uint16_t n_lcores;
	uint16_t main_lcore;
	uint32_t memory_mb;
	bool no_huge;
	uint16_t n_extra_args;
	char file_prefix[PHUB_CONFIG_PREFIX_MAX];
	char extra_args[PHUB_CONFIG_MAX_EXTRA_ARGS][PHUB_CONFIG_ARG_MAX];
};

struct phub_config_port {
	enum phub_config_driver_id driver;
	bool is_pci;			/* device is a PCI address, written dddd:bb:dd.f */
	int16_t numa_node;		/* of the PCI device, from sysfs; -1: unknown or vdev */
	uint32_t ipv4;			/* host byte order */
	uint8_t prefix_len;
	uint16_t mtu;
	uint16_t rx_desc;		/* the profile's default when not written */
	uint16_t tx_desc;
	uint16_t n_lcores;
	uint16_t lcores[PHUB_CONFIG_MAX_PORT_LCORES];	/* queue q is served by lcores[q] */
	char name[PHUB_CONFIG_NAME_MAX];
	char device[PHUB_CONFIG_DEVICE_MAX];
};

/* The lcore -> (port, queue) map as flat data, as in DPDK's l3fwd. */
struct phub_config_lcore_params {
	uint16_t port;		/* index in phub_config.ports, not a DPDK port id */
	uint16_t queue;
	uint16_t lcore;
};

struct phub_config_idle {
	enum phub_config_idle_policy policy;
	uint32_t spin_polls;	/* adaptive: empty polls before the first sleep */
	uint32_t max_sleep_us;	/* adaptive: ceiling of the back-off sleep */
};

struct phub_config_timeouts {
	uint32_t rto_min_ms;
	uint32_t rto_max_ms;
	uint32_t worker_dead_ms;
	uint32_t join_ms;
};

struct phub_config_limits {
	uint32_t max_jobs;
	uint32_t max_workers_per_job;
	uint32_t job_memory_mb;
	uint32_t total_memory_mb;
};

/* Hyper-parameters the type does not use are 0. */
struct phub_config_optimizer {
	enum phub_opt_type type;
	double lr;
	double momentum;
	double weight_decay;
	double beta1;
	double beta2;
	double eps;
};

/* One rack of a job's ring, in ring order (docs/hierarchy.md). */
struct phub_config_job_rack {
	char pbox[PHUB_CONFIG_NAME_MAX];	/* this PBox's name or a peers[].name */
	uint16_t ranks;			/* the job's ranks this rack holds */
	/* Derived: peers[] index of the rack's PBox; -1 for this PBox. */
	int16_t peer;
	/* Derived: the global rank of the rack's first rank. */
	uint16_t rank_base;
};

/* jobs[].on_worker_dead: what a rank silent for timeouts.worker_dead_ms does to its job. */
enum phub_config_on_worker_dead {
	PHUB_CONFIG_ON_DEAD_FAIL = 0,		/* the job ends (ERROR WORKER_TIMEOUT) */
	PHUB_CONFIG_ON_DEAD_CONTINUE = 1,	/* the rank is removed, the others go on */
};

/* jobs[].auth: whether every datagram of the job carries a MAC (docs/protocol.md section 8). */
enum phub_config_auth {
	PHUB_CONFIG_AUTH_OFF = 0,	/* the nonce in JOIN, the token: a trusted network */
	PHUB_CONFIG_AUTH_REQUIRED = 1,	/* key exchange at JOIN, a MAC on every datagram */
};

struct phub_config_job {
	uint64_t nonce;
	uint16_t workers;		/* the whole job's ranks, over every rack of its ring */
	uint16_t n_racks;		/* 0: a job of this PBox alone; else 2 .. MAX_RACKS */
	uint16_t ring_pos;		/* derived: this PBox's index in racks[] */
	struct phub_config_job_rack racks[PHUB_CONFIG_MAX_RACKS];
	enum phub_dtype dtype;
	bool deterministic;
	enum phub_config_on_worker_dead on_worker_dead;
	enum phub_config_auth auth;
	/* jobs[].key or jobs[].key_file: the PSK's 256-bit secret (auth "required" only). */
	uint8_t key[32];
	bool has_key;
	/* jobs[].key_file as written ("": the key was inline): a dump names the file, never its key. */
	char key_file[PHUB_CONFIG_PATH_MAX];
	struct phub_config_optimizer optimizer;
	/*
	 * What it trains, when the file says: "parameters" (a count) or "model" (a Table 3 name
	 * phub-plan and phub-bench know, its parameters from there). 0: not said; the memory
	 * check of phub-pbox --check-config then has nothing to check.
	 */
	uint64_t parameters;
	char model[PHUB_CONFIG_NAME_MAX];
	char name[PHUB_CONFIG_JOB_NAME_MAX];
};

struct phub_config_checkpoint {
	uint32_t interval_iterations;	/* 0: only at shutdown */
	char dir[PHUB_CONFIG_PATH_MAX];
};

struct phub_config_peer {
	uint32_t ipv4;			/* host byte order */
	uint16_t udp_port;		/* the peer's control port (its udp_base_port) */
	uint16_t port_index;		/* derived: ports[] index of "port" */
	char name[PHUB_CONFIG_NAME_MAX];
	char port[PHUB_CONFIG_NAME_MAX];	/* our port that reaches it; "": the first */
};

/*
 * Everything the file says, with defaults filled in and derived tables built. About 41 KiB:
 * keep it static or on the heap. Read-only once loaded; release with phub_config_free().
 */
struct phub_config {
	char name[PHUB_CONFIG_NAME_MAX];	/* this PBox's rack name in jobs[].racks */
	struct phub_config_eal eal;
	uint16_t n_ports;
	struct phub_config_port ports[PHUB_CONFIG_MAX_PORTS];
	/* Sorted by port, then queue; one entry per (port, queue). */
	uint16_t n_lcore_params;
	struct phub_config_lcore_params lcore_params[PHUB_CONFIG_MAX_QUEUES];
	/* Lcores that serve a port, in increasing order: data lcore k has UDP port base + 1 + k. */
	uint16_t n_data_lcores;
	uint16_t data_lcores[PHUB_CONFIG_MAX_LCORES];
	uint16_t udp_base_port;		/* the control port, served by the main lcore */
	uint32_t chunk_bytes;
	uint32_t segment_bytes;		/* effective: from the MTUs when written as 0 */
	uint32_t window_bytes;
	bool deterministic;
	bool priority_order;		/* P3: serve each RX burst most urgent first */
	uint16_t priority_hold;		/* P3 across bursts: frames a data lcore may hold back */
	uint16_t priority_hold_us;	/* ... and for how long at most */
	struct phub_config_idle idle;
	struct phub_config_timeouts timeouts;
	struct phub_config_limits limits;
	uint16_t n_jobs;
	struct phub_config_job *jobs;	/* n_jobs entries, owned by the config */
	struct phub_config_checkpoint checkpoint;
	uint16_t n_peers;
	struct phub_config_peer peers[PHUB_CONFIG_MAX_PEERS];
	bool telemetry_enabled;
	/* The profiles of the drivers the ports use, indexed by driver id. */
	struct phub_config_driver drivers[PHUB_CONFIG_DRIVER_COUNT];
	char drivers_dir[PHUB_CONFIG_PATH_MAX];	/* as resolved, as messages show it */
	char source[PHUB_CONFIG_PATH_MAX];	/* the name used in messages */
};

/*
 * Where load_buffer looks for what the text does not say. Every member may be NULL.
 * - name: shown in messages (default "<buffer>"); a relative drivers_dir in the text is taken
 *   relative to the directory part of name (the current directory when it has none).
 * - drivers_dir: used when the text has no drivers_dir; NULL: $PHUB_DRIVERS_DIR, else
 *   phub_config_default_drivers_dir().
 * - sysfs_root: where /sys is (tests point it at a fake tree); NULL: $PHUB_SYSFS_ROOT, else
 *   "/sys".
 */
struct phub_config_params {
	const char *name;
	const char *drivers_dir;
	const char *sysfs_root;
};

/*
 * Load and validate the file at path. Returns 0, or -EINVAL when the configuration is wrong,
 * -errno when the file cannot be read, -ENOMEM. On failure err holds the first error found as
 * one line "file:line:column: json.path: message" (file-level problems have no position or
 * path), cfg is left empty, and phub_config_free(cfg) is harmless.
 */
int
phub_config_load(const char *path, struct phub_config *cfg, char *err, size_t errlen);

/* The same from memory (size bytes, no NUL needed), as the fuzzer and tests use it. */
int
phub_config_load_buffer(const void *buf, size_t size, const struct phub_config_params *params,
			struct phub_config *cfg, char *err, size_t errlen);

/* Release what load allocated and zero cfg. */
void
phub_config_free(struct phub_config *cfg);

/*
 * Write the effective configuration (every key, defaults included) as JSON that loads back to
 * the same struct, then nothing else. Returns 0 or -EIO.
 */
int
phub_config_dump(const struct phub_config *cfg, FILE *f);

/*
 * Write what the configuration implies, for --check-config: lcores with CPUs and NUMA nodes,
 * the (port, queue, lcore) map, UDP ports per lcore, segment size, driver profiles.
 * Every line starts with "# " so that the output can follow phub_config_dump()'s JSON.
 */
int
phub_config_dump_plan(const struct phub_config *cfg, FILE *f);

/* UDP port a data lcore listens on (udp_base_port + 1 + its data index), or -ENOENT. */
int
phub_config_lcore_udp_port(const struct phub_config *cfg, unsigned int lcore_id);

/* The data lcore that listens on udp_port, or -ENOENT (the control port included). */
int
phub_config_udp_port_lcore(const struct phub_config *cfg, unsigned int udp_port);

/* The eal.lcores entry of an lcore id, or NULL with errno ENOENT. */
const struct phub_config_lcore *
phub_config_lcore_find(const struct phub_config *cfg, unsigned int lcore_id);

/* The profile of a port's driver, or NULL with errno EINVAL. */
const struct phub_config_driver *
phub_config_port_driver(const struct phub_config *cfg, unsigned int port);

/* The index of the job with that name, or -ENOENT. */
int
phub_config_job_find(const struct phub_config *cfg, const char *name);

/*
 * The EAL command line the configuration asks for: prog, --lcores, --main-lcore, -m,
 * --no-huge, --file-prefix, --vdev / -a per port (--no-pci when no port is PCI), then
 * eal.extra_args. *argv is one allocation (free(*argv)), NULL-terminated. Returns argc or
 * -ENOMEM.
 */
int
phub_config_eal_argv(const struct phub_config *cfg, const char *prog, char ***argv);

/*
 * True when the running program is the one in the build tree it was built in (not an installed
 * copy): it then takes the source tree's driver profiles and the build tree's BPF objects.
 */
bool
phub_config_in_build_tree(void);

/*
 * The installed data directory (driver profiles in drivers-cfg/, BPF objects in bpf/, examples
 * in examples/): <program's directory>/../share/phub when that exists, so that an install under
 * a --destdir or a moved prefix works as it is, else the datadir meson installed to. Returns 0,
 * -EINVAL or -ENAMETOOLONG. Does not check that the directory exists.
 */
int
phub_config_data_dir(char *buf, size_t size);

/*
 * Where the driver profiles are when neither the file nor $PHUB_DRIVERS_DIR says: the source
 * tree's drivers-cfg for a program in its build tree, else <data dir>/drivers-cfg.
 */
int
phub_config_default_drivers_dir(char *buf, size_t size);

/* JSON names of the enums ("tap", "rte_flow", ...); "?" when out of range. */
const char *
phub_config_driver_name(enum phub_config_driver_id id);
const char *
phub_config_steering_name(enum phub_config_steering steering);
const char *
phub_config_bus_name(enum phub_config_bus bus);
const char *
phub_config_idle_name(enum phub_config_idle_policy policy);

#ifdef __cplusplus
}
#endif

#endif /* PHUB_CONFIG_H */
