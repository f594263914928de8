/* SPDX-License-Identifier: BSD-3-Clause */
/* Placing chunks on (port, lcore) servers: LPT under a lexicographic load key, and the balance. */

#include <errno.h>
#include <stdlib.h>

#include "layout_priv.h"

/*
 * A server as the heap sees it. The key is (load of its lcore, load of its port, its own load,
 * its index), compared lexicographically; loads are in elements (the job has one element size,
 * so elements and bytes order the same way).
 */
struct heap_ent {
	uint64_t lcore_load;
	uint64_t port_load;
	uint64_t pair_load;
	uint32_t server;
};

struct placer {
	struct heap_ent *heap;
	uint32_t (*bin)[LAYOUT_N_LEVELS];	/* per server: its bin at each level */
	struct layout_bin **bins;		/* the layout's bins */
	uint32_t n;
};

static int
ent_less(const struct heap_ent *a, const struct heap_ent *b)
{
	if (a->lcore_load != b->lcore_load)
		return a->lcore_load < b->lcore_load;
	if (a->port_load != b->port_load)
		return a->port_load < b->port_load;
	if (a->pair_load != b->pair_load)
		return a->pair_load < b->pair_load;
	return a->server < b->server;
}

static void
sift_down(struct heap_ent *heap, uint32_t n, uint32_t i)
{
	struct heap_ent e = heap[i];

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && ent_less(&heap[c + 1], &heap[c]))
			c++;
		if (!ent_less(&heap[c], &e))
			break;
		heap[i] = heap[c];
		i = c;
	}
	heap[i] = e;
}

static struct heap_ent
current_key(const struct placer *pl, uint32_t server)
{
	const uint32_t *b = pl->bin[server];

	return (struct heap_ent){
		.lcore_load = pl->bins[PHUB_LAYOUT_LEVEL_LCORE][b[PHUB_LAYOUT_LEVEL_LCORE]].n_elems,
		.port_load = pl->bins[PHUB_LAYOUT_LEVEL_PORT][b[PHUB_LAYOUT_LEVEL_PORT]].n_elems,
		.pair_load = pl->bins[PHUB_LAYOUT_LEVEL_SERVER][server].n_elems,
		.server = server,
	};
}

/*
 * The server with the least key. Loads only grow, so a stored key is a lower bound of the
 * server's current key: when the top's stored key is still current, no other server can beat
 * it. A stale top is refreshed and sunk, and the search goes on (lazy update: placing a chunk
 * touches one lcore and one port, and so the keys of every pair sharing either, which would
 * be too many to fix eagerly).
 */
static uint32_t
least_loaded(struct placer *pl)
{
	for (;;) {
		struct heap_ent now = current_key(pl, pl->heap[0].server);

		if (now.lcore_load == pl->heap[0].lcore_load &&
				now.port_load == pl->heap[0].port_load &&
				now.pair_load == pl->heap[0].pair_load)
			return now.server;
		pl->heap[0] = now;
		sift_down(pl->heap, pl->n, 0);
	}
}

static void
place_chunk(struct placer *pl, struct phub_layout *l, uint32_t chunk, uint32_t n_elems)
{
	uint32_t s = least_loaded(pl);
	int level;

	for (level = 0; level < LAYOUT_N_LEVELS; level++) {
		struct layout_bin *b = &pl->bins[level][pl->bin[s][level]];

		b->n_elems += n_elems;
		b->n_chunks++;
	}
	l->chunk_server[chunk] = s;
	/* The top is s: refresh it now rather than on the next search. */
	pl->heap[0] = current_key(pl, s);
	sift_down(pl->heap, pl->n, 0);
}

struct tail {
	uint32_t n_elems;
	uint32_t chunk;
};

/* Largest first; among equals the lower chunk id first, so the order is total. */
static int
cmp_tail(const void *x, const void *y)
{
	const struct tail *a = x;
	const struct tail *b = y;

	if (a->n_elems != b->n_elems)
		return a->n_elems > b->n_elems ? -1 : 1;
	return a->chunk < b->chunk ? -1 : (a->chunk > b->chunk);
}

static int
cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x;
	uint32_t b = *(const uint32_t *)y;

	return a < b ? -1 : (a > b);
}

/*
 * Bins of one level, one per distinct value of ids[] (the servers' lcores, ports...), ascending;
 * on return ids[s] is the bin of server s. 0 or -ENOMEM.
 */
static int
make_bins(uint32_t *ids, uint32_t n, struct layout_bin **bins, uint32_t *n_bins)
{
	uint32_t *sorted;
	uint32_t i;
	uint32_t m = 0;

	sorted = malloc(sizeof(*sorted) * n);
	if (sorted == NULL)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		sorted[i] = ids[i];
	qsort(sorted, n, sizeof(*sorted), cmp_u32);
	for (i = 0; i < n; i++) {
		if (m == 0 || sorted[m - 1] != sorted[i])
			sorted[m++] = sorted[i];
	}
	*bins = calloc(m, sizeof(**bins));
	if (*bins == NULL) {
		free(sorted);
		return -ENOMEM;
	}
	for (i = 0; i < m; i++)
		(*bins)[i].id = sorted[i];
	for (i = 0; i < n; i++) {
		const uint32_t *hit = bsearch(&ids[i], sorted, m, sizeof(*sorted), cmp_u32);

		ids[i] = (uint32_t)(hit - sorted);
	}
	*n_bins = m;
	free(sorted);
	return 0;
}

int
layout_place(struct phub_layout *l, const struct phub_layout_server *servers, uint32_t n_servers)
{
	struct placer pl = { .n = n_servers, .bins = l->bins };
	struct tail *tails = NULL;
	uint32_t *ids = NULL;
	uint32_t n_tails = 0;
	uint32_t i;
	int level;
	int ret = -ENOMEM;

	l->n_servers = n_servers;
	l->chunk_server = malloc(sizeof(*l->chunk_server) * l->n_chunks);
	pl.heap = malloc(sizeof(*pl.heap) * n_servers);
	pl.bin = malloc(sizeof(*pl.bin) * n_servers);
	ids = malloc(sizeof(*ids) * n_servers);
	tails = malloc(sizeof(*tails) * l->n_keys);
	if (l->chunk_server == NULL || pl.heap == NULL || pl.bin == NULL || ids == NULL ||
			tails == NULL)
		goto out;

	for (level = 0; level < LAYOUT_N_LEVELS; level++) {
		for (i = 0; i < n_servers; i++) {
			switch (level) {
			case PHUB_LAYOUT_LEVEL_SERVER:
				ids[i] = i;
				break;
			case PHUB_LAYOUT_LEVEL_LCORE:
				ids[i] = servers[i].lcore;
				break;
			case PHUB_LAYOUT_LEVEL_PORT:
				ids[i] = servers[i].port;
				break;
			default:
				/* Checked >= 0: work and buffers live on the lcore's node. */
				ids[i] = (uint32_t)servers[i].lcore_numa;
				break;
			}
		}
		ret = make_bins(ids, n_servers, &l->bins[level], &l->n_bins[level]);
		if (ret < 0)
			goto out;
		for (i = 0; i < n_servers; i++)
			pl.bin[i][level] = ids[i];
	}

	/* All keys equal zero and ties go to the lower index: index order is already a heap. */
	for (i = 0; i < n_servers; i++)
		pl.heap[i] = (struct heap_ent){ .server = i };

	/*
	 * Largest first, as LPT wants. Every chunk but a key's last has chunk_elems elements, the
	 * most any chunk has: those go first in chunk id order, then the short last chunks sorted.
	 * That is the stable sort of all chunks by size, without an array per chunk.
	 */
	for (i = 0; i < l->n_keys; i++) {
		const struct layout_key *k = &l->keys[i];
		uint32_t n_full = k->n_elems / l->chunk_elems;
		uint32_t j;

		for (j = 0; j < n_full; j++)
			place_chunk(&pl, l, k->first_chunk + j, l->chunk_elems);
		if (n_full < k->n_chunks)
			tails[n_tails++] = (struct tail){
				.n_elems = k->n_elems - n_full * l->chunk_elems,
				.chunk = k->first_chunk + n_full,
			};
	}
	qsort(tails, n_tails, sizeof(*tails), cmp_tail);
	for (i = 0; i < n_tails; i++)
		place_chunk(&pl, l, tails[i].chunk, tails[i].n_elems);
	ret = 0;
out:
	free(tails);
	free(ids);
	free(pl.bin);
	free(pl.heap);
	return ret;
}

uint32_t
phub_layout_bin_count(const struct phub_layout *layout, enum phub_layout_level level)
{
	if (layout == NULL || (unsigned int)level >= LAYOUT_N_LEVELS)
		return 0;
	return layout->n_bins[level];
}

int
phub_layout_chunk_server(const struct phub_layout *layout, uint32_t chunk, uint32_t *server)
{
	if (layout == NULL || server == NULL || chunk >= layout->n_chunks)
		return -EINVAL;
	if (layout->chunk_server == NULL)
		return -ENODATA;
	*server = layout->chunk_server[chunk];
	return 0;
}

int
phub_layout_bin_get(const struct phub_layout *layout, enum phub_layout_level level, uint32_t i,
		struct phub_layout_load *load)
{
	const struct layout_bin *b;

	if (layout == NULL || load == NULL || (unsigned int)level >= LAYOUT_N_LEVELS)
		return -EINVAL;
	if (layout->chunk_server == NULL)
		return -ENODATA;
	if (i >= layout->n_bins[level])
		return -EINVAL;
	b = &layout->bins[level][i];
	load->n_elems = b->n_elems;
	load->bytes = b->n_elems * layout->elem_size;
	load->id = b->id;
	load->n_chunks = b->n_chunks;
	return 0;
}

int
phub_layout_balance_get(const struct phub_layout *layout, enum phub_layout_level level,
		struct phub_layout_balance *balance)
{
	uint64_t lo = UINT64_MAX;
	uint64_t hi = 0;
	uint64_t total = 0;
	uint32_t i;

	if (layout == NULL || balance == NULL || (unsigned int)level >= LAYOUT_N_LEVELS)
		return -EINVAL;
	if (layout->chunk_server == NULL)
		return -ENODATA;
	for (i = 0; i < layout->n_bins[level]; i++) {
		uint64_t bytes = layout->bins[level][i].n_elems * layout->elem_size;

		lo = bytes < lo ? bytes : lo;
		hi = bytes > hi ? bytes : hi;
		total += bytes;
	}
	balance->min_bytes = lo;
	balance->max_bytes = hi;
	balance->total_bytes = total;
	balance->n_bins = layout->n_bins[level];
	balance->mean_bytes = (double)total / layout->n_bins[level];
	return 0;
}
