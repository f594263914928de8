/* SPDX-License-Identifier: BSD-3-Clause */
/* The inside of struct phub_layout, shared by cutting (layout.c) and placing (layout_place.c). */

#ifndef LAYOUT_PRIV_H
#define LAYOUT_PRIV_H

#include <stdint.h>

#include "phub_layout.h"

#define LAYOUT_N_LEVELS	(PHUB_LAYOUT_LEVEL_NUMA + 1)

/* One key as cut; chunk j of the key starts at element j * chunk_elems. */
struct layout_key {
	uint64_t elem_base;
	uint32_t key_id;
	uint32_t n_elems;
	uint32_t first_chunk;
	uint32_t n_chunks;
};

/* One bin of a level: a server, an lcore, a port or a NUMA node. */
struct layout_bin {
	uint64_t n_elems;
	uint32_t id;
	uint32_t n_chunks;
};

/* Read-only after phub_layout_create() returns. */
struct phub_layout {
	uint32_t n_keys;
	uint32_t n_chunks;
	uint32_t elem_size;
	uint32_t chunk_elems;
	uint32_t segment_elems;
	uint32_t n_servers;		/* 0: cut only */
	uint64_t n_elems;
	uint64_t n_segments;
	struct layout_key *keys;	/* n_keys, in the job's order */
	uint32_t *key_by_id;		/* n_keys key indices, by ascending key id */
	uint32_t *chunk_key;		/* n_chunks: key index of each chunk */
	uint32_t *chunk_server;		/* n_chunks: server of each chunk, or NULL */
	struct layout_bin *bins[LAYOUT_N_LEVELS];
	uint32_t n_bins[LAYOUT_N_LEVELS];
};

/* Place every chunk of a cut layout onto servers (already checked); 0 or -ENOMEM. */
int
layout_place(struct phub_layout *layout, const struct phub_layout_server *servers,
		uint32_t n_servers);

#endif /* LAYOUT_PRIV_H */
