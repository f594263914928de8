/* SPDX-License-Identifier: BSD-3-Clause */
/* Where a job's chunk buffers belong: the NUMA node of the lcore and port that own each chunk. */

#include <errno.h>

#include "layout_priv.h"

int
phub_layout_chunk_node(const struct phub_layout *layout,
		const struct phub_layout_server *servers, uint32_t n_servers, uint32_t chunk)
{
	uint32_t server;
	int rc;

	if (layout == NULL || servers == NULL)
		return -EINVAL;
	rc = phub_layout_chunk_server(layout, chunk, &server);
	if (rc != 0)
		return rc;
	if (server >= n_servers)
		return -EINVAL;
	/* The lcore reads and writes the chunk on every datagram; the port only DMAs packets. */
	if (servers[server].lcore_numa >= 0)
		return servers[server].lcore_numa;
	return servers[server].port_numa >= 0 ? servers[server].port_numa : PHUB_LAYOUT_NUMA_ANY;
}

int
phub_layout_pages_by_node(const struct phub_layout *layout,
		const struct phub_layout_server *servers, uint32_t n_servers, size_t elem_bytes,
		size_t page_bytes, phub_layout_page_run_fn *fn, void *arg)
{
	uint64_t total, n_pages, run_first = 0;
	uint32_t n_chunks, c = 0;
	struct phub_layout_chunk ch;
	int run_node = PHUB_LAYOUT_NUMA_ANY;

	if (layout == NULL || servers == NULL || elem_bytes == 0 || page_bytes == 0 || fn == NULL)
		return -EINVAL;
	if (phub_layout_chunk_server(layout, 0, &(uint32_t){ 0 }) == -ENODATA)
		return -ENODATA;
	n_chunks = phub_layout_chunk_count(layout);
	total = phub_layout_elem_count(layout) * elem_bytes;
	n_pages = (total + page_bytes - 1) / page_bytes;
	for (uint64_t p = 0; p < n_pages; p++) {
		uint64_t lo = p * page_bytes, hi = lo + page_bytes, best_bytes = 0;
		int best = PHUB_LAYOUT_NUMA_ANY;

		/* Chunks in element order: the first that may touch page p is at or after c. */
		while (c < n_chunks) {
			phub_layout_chunk_get(layout, c, &ch);
			if ((ch.elem_base + ch.n_elems) * elem_bytes > lo)
				break;
			c++;
		}
		for (uint32_t k = c; k < n_chunks; k++) {
			uint64_t a, b;
			int node;

			phub_layout_chunk_get(layout, k, &ch);
			a = ch.elem_base * elem_bytes;
			b = (ch.elem_base + ch.n_elems) * elem_bytes;
			if (a >= hi)
				break;
			node = phub_layout_chunk_node(layout, servers, n_servers, k);
			/* The page goes where most of its bytes are used; ties to the first. */
			if ((b < hi ? b : hi) - (a > lo ? a : lo) > best_bytes) {
				best_bytes = (b < hi ? b : hi) - (a > lo ? a : lo);
				best = node;
			}
		}
		if (p > 0 && best != run_node) {
			fn(run_first, p - run_first, run_node, arg);
			run_first = p;
		}
		run_node = best;
	}
	if (n_pages > 0)
		fn(run_first, n_pages - run_first, run_node, arg);
	return 0;
}
