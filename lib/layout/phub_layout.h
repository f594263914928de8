/* SPDX-License-Identifier: BSD-3-Clause */
/* The chunk map of a job: keys cut into chunks and segments, chunks placed on (port, lcore). */

#ifndef PHUB_LAYOUT_H
#define PHUB_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A layout is computed once per job, at JOIN, and read-only afterwards: every lookup below is
 * safe from any number of threads. The worker cuts only (n_servers = 0; it receives the placement
 * in JOIN_ACK); the PBox cuts and places. Both must pass the same keys, chunk_bytes and
 * segment_elems, or their chunk ids will not agree. See docs/layout.md.
 */

/** Default chunk ("virtual key") size, in fp32 model bytes (PHub §3.2.3). */
#define PHUB_LAYOUT_CHUNK_BYTES_DEFAULT	32768u
/** Bytes of one element of the model on the PBox: chunk_bytes counts in these. */
#define PHUB_LAYOUT_MODEL_ELEM_SIZE	4u
/** Widest wire element accepted (fp64). */
#define PHUB_LAYOUT_MAX_ELEM_SIZE	8u
/** Most chunks in one job: chunk ids stay well inside 32 bits and the map inside 128 MiB. */
#define PHUB_LAYOUT_MAX_CHUNKS		(1u << 24)
/** Most segments in one chunk: a segment index fits 16 bits. */
#define PHUB_LAYOUT_MAX_SEGMENTS	65535u
/** Most (port, lcore) servers. */
#define PHUB_LAYOUT_MAX_SERVERS		65535u
/** A port whose NUMA node the driver does not know (virtual devices): any lcore may serve it. */
#define PHUB_LAYOUT_NUMA_ANY		(-1)

/** One key (a layer's tensor) of a job, as the worker declares it. */
struct phub_layout_key {
	uint32_t key_id;	/**< the job's name for the key; unique in the job */
	uint32_t n_elems;	/**< elements in the key, >= 1 */
};

/** One (port, lcore) pair of the PBox: the lcore owns an RX/TX queue pair on the port. */
struct phub_layout_server {
	uint32_t lcore;		/**< EAL lcore id */
	uint16_t port;		/**< DPDK port id */
	int32_t port_numa;	/**< NUMA node of the port, or PHUB_LAYOUT_NUMA_ANY */
	int32_t lcore_numa;	/**< NUMA node of the lcore, >= 0 */
};

/**
 * True when the pair keeps all traffic of its chunks on one NUMA node (PHub §3.3): the lcore
 * sits on the port's node, or the port's node is unknown. phub_layout_create() rejects pairs for
 * which this is false; a caller that lists every (port, lcore) pair may filter with it first.
 */
static inline int
phub_layout_server_numa_ok(const struct phub_layout_server *s)
{
	return s->lcore_numa >= 0 &&
		(s->port_numa == PHUB_LAYOUT_NUMA_ANY || s->port_numa == s->lcore_numa);
}

struct phub_layout_params {
	const struct phub_layout_key *keys;	/**< the job's keys, in the job's order */
	uint32_t n_keys;			/**< >= 1 */
	uint32_t elem_size;			/**< wire bytes per element: 4 fp32, 2 fp16 */
	uint32_t chunk_bytes;			/**< chunk size in fp32 model bytes, >= 4 */
	uint32_t segment_elems;			/**< elements per datagram, >= 1 */
	const struct phub_layout_server *servers; /**< NULL when n_servers is 0 */
	uint32_t n_servers;			/**< 0: cut only, do not place */
};

/** Where a chunk lies and how it travels. */
struct phub_layout_chunk {
	uint64_t elem_base;	/**< offset of the chunk's first element in the whole job */
	uint32_t key_index;	/**< index of the key in params.keys */
	uint32_t key_id;
	uint32_t elem_offset;	/**< offset of the chunk's first element in its key */
	uint32_t n_elems;
	uint32_t n_segments;
	uint32_t server;	/**< index in params.servers; UINT32_MAX if not placed */
};

/** One key, as cut. */
struct phub_layout_key_info {
	uint64_t elem_base;	/**< offset of the key's first element in the whole job */
	uint32_t key_id;
	uint32_t n_elems;
	uint32_t first_chunk;
	uint32_t n_chunks;
};

/** One segment (one datagram's payload) of a chunk. */
struct phub_layout_segment {
	uint32_t elem_offset;	/**< offset of the segment's first element in its chunk */
	uint32_t n_elems;
};

/** The levels at which placement balances load. */
enum phub_layout_level {
	PHUB_LAYOUT_LEVEL_SERVER,	/**< one bin per (port, lcore) pair, in params order */
	PHUB_LAYOUT_LEVEL_LCORE,	/**< one bin per distinct lcore, by ascending lcore id */
	PHUB_LAYOUT_LEVEL_PORT,		/**< one bin per distinct port, by ascending id */
	PHUB_LAYOUT_LEVEL_NUMA,		/**< one bin per lcore NUMA node, ascending */
};

/** The load of one bin. Bytes are wire bytes of one worker's push (n_elems * elem_size). */
struct phub_layout_load {
	uint64_t n_elems;
	uint64_t bytes;
	uint32_t id;		/**< server index, lcore id, port id or NUMA node */
	uint32_t n_chunks;
};

/** The spread of load over the bins of one level (telemetry: /phub/chunkmap). */
struct phub_layout_balance {
	uint64_t min_bytes;
	uint64_t max_bytes;
	uint64_t total_bytes;
	double mean_bytes;
	uint32_t n_bins;
};

/**
 * Check params without building anything. Returns 0, -EINVAL with a one-line reason in msg
 * (when msg is not NULL; e.g. "keys[3]: key id 7 repeats keys[1]"), or -ENOMEM.
 */
int
phub_layout_params_check(const struct phub_layout_params *params, char *msg, size_t msg_len);

/**
 * Cut the keys into chunks and segments and, when params->n_servers > 0, place the chunks.
 * Returns NULL with errno EINVAL (see phub_layout_params_check()) or ENOMEM. The layout keeps
 * no pointer into params.
 */
struct phub_layout *
phub_layout_create(const struct phub_layout_params *params);

void
phub_layout_free(struct phub_layout *layout);

/* Totals. The layout must not be NULL. */
uint32_t
phub_layout_key_count(const struct phub_layout *layout);
uint32_t
phub_layout_chunk_count(const struct phub_layout *layout);
uint64_t
phub_layout_elem_count(const struct phub_layout *layout);
uint64_t
phub_layout_segment_count(const struct phub_layout *layout);
/** Elements of every chunk but the last of a key: a multiple of segment_elems. */
uint32_t
phub_layout_chunk_elems(const struct phub_layout *layout);
uint32_t
phub_layout_segment_elems(const struct phub_layout *layout);
uint32_t
phub_layout_elem_size(const struct phub_layout *layout);

/** Index in params.keys of key_id: 0, or -ENOENT. O(log n_keys). */
int
phub_layout_key_index(const struct phub_layout *layout, uint32_t key_id, uint32_t *key_index);

/** 0, or -EINVAL when key_index is out of range. */
int
phub_layout_key_get(const struct phub_layout *layout, uint32_t key_index,
		struct phub_layout_key_info *info);

/** 0, or -EINVAL when chunk is out of range. O(1). */
int
phub_layout_chunk_get(const struct phub_layout *layout, uint32_t chunk,
		struct phub_layout_chunk *info);

/** The chunk holding element elem_offset of a key: 0, or -EINVAL when out of range. O(1). */
int
phub_layout_chunk_find(const struct phub_layout *layout, uint32_t key_index, uint32_t elem_offset,
		uint32_t *chunk);

/** Segment number segment of a chunk: 0, or -EINVAL when either is out of range. O(1). */
int
phub_layout_segment_get(const struct phub_layout *layout, uint32_t chunk, uint32_t segment,
		struct phub_layout_segment *seg);

/* Placement. Each returns -ENODATA on a layout made with n_servers = 0. */

/** The server (index in params.servers) of a chunk: 0, -EINVAL or -ENODATA. O(1). */
int
phub_layout_chunk_server(const struct phub_layout *layout, uint32_t chunk, uint32_t *server);

/** Number of bins of a level; 0 on a layout that was not placed or for an unknown level. */
uint32_t
phub_layout_bin_count(const struct phub_layout *layout, enum phub_layout_level level);

/** The load of bin i of a level: 0, -EINVAL or -ENODATA. */
int
phub_layout_bin_get(const struct phub_layout *layout, enum phub_layout_level level, uint32_t i,
		struct phub_layout_load *load);

/** Min, max and mean bytes over the bins of a level: 0, -EINVAL or -ENODATA. */
int
phub_layout_balance_get(const struct phub_layout *layout, enum phub_layout_level level,
		struct phub_layout_balance *balance);

/* NUMA placement of the job's buffers (layout_numa.c). servers: the params.servers of create. */

/**
 * The NUMA node a chunk's buffers belong on: its lcore's (which reads and writes them on every
 * datagram), else its port's, else PHUB_LAYOUT_NUMA_ANY. -EINVAL or -ENODATA otherwise.
 */
int
phub_layout_chunk_node(const struct phub_layout *layout,
		const struct phub_layout_server *servers, uint32_t n_servers, uint32_t chunk);

/** Called once per maximal run of consecutive pages that belong on one node. */
typedef void phub_layout_page_run_fn(uint64_t first_page, uint64_t n_pages, int node, void *arg);

/**
 * Pages of a buffer of elem_bytes per element of the whole job (page-aligned, page_bytes per
 * page) by node: each page goes to the node of the chunk that holds most of its bytes. Calls
 * fn for each run, in order, covering every page. 0, -EINVAL or -ENODATA.
 */
int
phub_layout_pages_by_node(const struct phub_layout *layout,
		const struct phub_layout_server *servers, uint32_t n_servers, size_t elem_bytes,
		size_t page_bytes, phub_layout_page_run_fn *fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif /* PHUB_LAYOUT_H */
