/* SPDX-License-Identifier: BSD-3-Clause */
/* Cutting a job's keys into chunks and segments, checking the parameters, and the lookups. */

#include <errno.h>
#include <stdlib.h>

#include "layout_priv.h"
#include "phub_err.h"

/* An invalid parameter: the message for the caller, -EINVAL. */
#define invalid(msg, msg_len, ...) phub_err(msg, msg_len, EINVAL, __VA_ARGS__)

/*
 * Elements per chunk: chunk_bytes counts fp32 model bytes (the PBox's working unit whatever the
 * wire dtype), rounded down to whole segments so that only a key's last chunk has a short
 * segment; never less than one segment.
 */
static int
chunk_geometry(const struct phub_layout_params *p, uint32_t *chunk_elems, char *msg,
		size_t msg_len)
{
	uint32_t segs = p->chunk_bytes / PHUB_LAYOUT_MODEL_ELEM_SIZE / p->segment_elems;

	if (segs == 0)
		segs = 1;
	if (segs > PHUB_LAYOUT_MAX_SEGMENTS)
		return invalid(msg, msg_len, "chunk_bytes %u with segment_elems %u makes %u"
			" segments per chunk (most %u)", p->chunk_bytes, p->segment_elems, segs,
			PHUB_LAYOUT_MAX_SEGMENTS);
	/* segs > 1 only when segs * segment_elems <= chunk_bytes / 4, so this fits 32 bits. */
	*chunk_elems = segs * p->segment_elems;
	return 0;
}

/* A sort record: order by (a, b), then by index, so that equal records keep the input order. */
struct ref {
	uint32_t a;
	uint32_t b;
	uint32_t index;
};

static int
cmp_ref(const void *x, const void *y)
{
	const struct ref *r = x;
	const struct ref *s = y;

	if (r->a != s->a)
		return r->a < s->a ? -1 : 1;
	if (r->b != s->b)
		return r->b < s->b ? -1 : 1;
	return r->index < s->index ? -1 : (r->index > s->index);
}

/* Key indices by ascending key id into order[]; a repeated id is an error. */
static int
keys_by_id(const struct phub_layout_params *p, uint32_t *order, char *msg, size_t msg_len)
{
	struct ref *ref;
	uint32_t i;
	int ret = 0;

	ref = malloc(sizeof(*ref) * p->n_keys);
	if (ref == NULL)
		return -ENOMEM;
	for (i = 0; i < p->n_keys; i++)
		ref[i] = (struct ref){ .a = p->keys[i].key_id, .b = 0, .index = i };
	qsort(ref, p->n_keys, sizeof(*ref), cmp_ref);
	for (i = 0; i < p->n_keys; i++) {
		if (i > 0 && ref[i].a == ref[i - 1].a) {
			ret = invalid(msg, msg_len, "keys[%u]: key id %u repeats keys[%u]",
				ref[i].index, ref[i].a, ref[i - 1].index);
			break;
		}
		order[i] = ref[i].index;
	}
	free(ref);
	return ret;
}

/*
 * Every pair on one NUMA node, each port and each lcore on one node whichever pair names it,
 * and no pair twice: the placement trusts all of it.
 */
static int
check_servers(const struct phub_layout_params *p, char *msg, size_t msg_len)
{
	const struct phub_layout_server *sv = p->servers;
	struct ref *ref;
	uint32_t i;
	int ret = 0;

	for (i = 0; i < p->n_servers; i++) {
		if (sv[i].lcore_numa < 0)
			return invalid(msg, msg_len, "servers[%u]: lcore %u has NUMA node %d",
				i, sv[i].lcore, (int)sv[i].lcore_numa);
		if (sv[i].port_numa < PHUB_LAYOUT_NUMA_ANY)
			return invalid(msg, msg_len, "servers[%u]: port %u has NUMA node %d",
				i, sv[i].port, (int)sv[i].port_numa);
		if (!phub_layout_server_numa_ok(&sv[i]))
			return invalid(msg, msg_len, "servers[%u]: lcore %u on NUMA node %d"
				" cannot serve port %u on node %d", i, sv[i].lcore,
				(int)sv[i].lcore_numa, sv[i].port, (int)sv[i].port_numa);
	}

	ref = malloc(sizeof(*ref) * p->n_servers);
	if (ref == NULL)
		return -ENOMEM;
	for (i = 0; i < p->n_servers; i++)
		ref[i] = (struct ref){ .a = sv[i].port, .b = sv[i].lcore, .index = i };
	qsort(ref, p->n_servers, sizeof(*ref), cmp_ref);
	for (i = 1; i < p->n_servers; i++) {
		const struct phub_layout_server *x = &sv[ref[i - 1].index];
		const struct phub_layout_server *y = &sv[ref[i].index];

		if (ref[i].a != ref[i - 1].a)
			continue;
		if (ref[i].b == ref[i - 1].b) {
			ret = invalid(msg, msg_len,
				"servers[%u]: port %u lcore %u repeats servers[%u]",
				ref[i].index, y->port, y->lcore, ref[i - 1].index);
			goto out;
		}
		if (x->port_numa != y->port_numa) {
			ret = invalid(msg, msg_len,
				"servers[%u]: port %u on NUMA node %d, servers[%u] says node %d",
				ref[i].index, y->port, (int)y->port_numa, ref[i - 1].index,
				(int)x->port_numa);
			goto out;
		}
	}

	for (i = 0; i < p->n_servers; i++)
		ref[i] = (struct ref){ .a = sv[i].lcore, .b = 0, .index = i };
	qsort(ref, p->n_servers, sizeof(*ref), cmp_ref);
	for (i = 1; i < p->n_servers; i++) {
		const struct phub_layout_server *x = &sv[ref[i - 1].index];
		const struct phub_layout_server *y = &sv[ref[i].index];

		if (ref[i].a == ref[i - 1].a && x->lcore_numa != y->lcore_numa) {
			ret = invalid(msg, msg_len,
				"servers[%u]: lcore %u on NUMA node %d, servers[%u] says node %d",
				ref[i].index, y->lcore, (int)y->lcore_numa, ref[i - 1].index,
				(int)x->lcore_numa);
			goto out;
		}
	}
out:
	free(ref);
	return ret;
}

/*
 * The whole check. On success *n_chunks and *chunk_elems are set and, when key_by_id is not
 * NULL, *key_by_id is a malloc'd array of the key indices by ascending key id.
 */
static int
check_params(const struct phub_layout_params *p, char *msg, size_t msg_len, uint32_t *n_chunks,
		uint32_t *chunk_elems, uint32_t **key_by_id)
{
	uint32_t *order = NULL;
	uint64_t chunks = 0;
	uint32_t i;
	int ret;

	if (p == NULL)
		return invalid(msg, msg_len, "no parameters");
	if (p->keys == NULL || p->n_keys == 0)
		return invalid(msg, msg_len, "no keys");
	if (p->elem_size == 0 || p->elem_size > PHUB_LAYOUT_MAX_ELEM_SIZE)
		return invalid(msg, msg_len, "elem_size %u is not in 1..%u", p->elem_size,
			PHUB_LAYOUT_MAX_ELEM_SIZE);
	if (p->chunk_bytes < PHUB_LAYOUT_MODEL_ELEM_SIZE)
		return invalid(msg, msg_len, "chunk_bytes %u holds no fp32 element",
			p->chunk_bytes);
	if (p->segment_elems == 0)
		return invalid(msg, msg_len, "segment_elems is 0");
	if (p->n_servers > 0 && p->servers == NULL)
		return invalid(msg, msg_len, "n_servers is %u but servers is NULL", p->n_servers);
	if (p->n_servers > PHUB_LAYOUT_MAX_SERVERS)
		return invalid(msg, msg_len, "%u servers (most %u)", p->n_servers,
			PHUB_LAYOUT_MAX_SERVERS);
	/* Every key is at least one chunk: refuse before touching the keys one by one. */
	if (p->n_keys > PHUB_LAYOUT_MAX_CHUNKS)
		return invalid(msg, msg_len, "%u keys make more than %u chunks", p->n_keys,
			PHUB_LAYOUT_MAX_CHUNKS);
	ret = chunk_geometry(p, chunk_elems, msg, msg_len);
	if (ret < 0)
		return ret;

	for (i = 0; i < p->n_keys; i++) {
		uint32_t n = p->keys[i].n_elems;

		if (n == 0)
			return invalid(msg, msg_len, "keys[%u]: key id %u has no elements", i,
				p->keys[i].key_id);
		chunks += (n - 1) / *chunk_elems + 1;
		/* Checked per key, so the 64-bit sum can never wrap. */
		if (chunks > PHUB_LAYOUT_MAX_CHUNKS)
			return invalid(msg, msg_len,
				"keys[0..%u] already make %llu chunks of %u elements (most %u)",
				i, (unsigned long long)chunks, *chunk_elems,
				PHUB_LAYOUT_MAX_CHUNKS);
	}
	*n_chunks = (uint32_t)chunks;

	order = malloc(sizeof(*order) * p->n_keys);
	if (order == NULL)
		return -ENOMEM;
	ret = keys_by_id(p, order, msg, msg_len);
	if (ret == 0 && p->n_servers > 0)
		ret = check_servers(p, msg, msg_len);
	if (ret == 0 && key_by_id != NULL) {
		*key_by_id = order;
		order = NULL;
	}
	free(order);
	return ret;
}

int
phub_layout_params_check(const struct phub_layout_params *params, char *msg, size_t msg_len)
{
	uint32_t n_chunks;
	uint32_t chunk_elems;

	if (msg != NULL && msg_len > 0)
		msg[0] = '\0';
	return check_params(params, msg, msg_len, &n_chunks, &chunk_elems, NULL);
}

struct phub_layout *
phub_layout_create(const struct phub_layout_params *params)
{
	struct phub_layout *l;
	uint32_t chunk = 0;
	uint64_t base = 0;
	uint32_t i;
	int ret;

	l = calloc(1, sizeof(*l));
	if (l == NULL) {
		ret = -ENOMEM;
		goto err;
	}
	ret = check_params(params, NULL, 0, &l->n_chunks, &l->chunk_elems, &l->key_by_id);
	if (ret < 0)
		goto err;

	l->n_keys = params->n_keys;
	l->elem_size = params->elem_size;
	l->segment_elems = params->segment_elems;
	l->keys = malloc(sizeof(*l->keys) * l->n_keys);
	l->chunk_key = malloc(sizeof(*l->chunk_key) * l->n_chunks);
	if (l->keys == NULL || l->chunk_key == NULL) {
		ret = -ENOMEM;
		goto err;
	}

	for (i = 0; i < l->n_keys; i++) {
		struct layout_key *k = &l->keys[i];
		uint32_t j;

		k->key_id = params->keys[i].key_id;
		k->n_elems = params->keys[i].n_elems;
		k->elem_base = base;
		k->first_chunk = chunk;
		k->n_chunks = (k->n_elems - 1) / l->chunk_elems + 1;
		for (j = 0; j < k->n_chunks; j++)
			l->chunk_key[chunk + j] = i;
		chunk += k->n_chunks;
		base += k->n_elems;
		/* Chunk boundaries are whole segments, so a key's segments are its own ceiling. */
		l->n_segments += (k->n_elems - 1) / l->segment_elems + 1;
	}
	l->n_elems = base;

	if (params->n_servers > 0) {
		ret = layout_place(l, params->servers, params->n_servers);
		if (ret < 0)
			goto err;
	}
	return l;
err:
	phub_layout_free(l);
	errno = -ret;
	return NULL;
}

void
phub_layout_free(struct phub_layout *layout)
{
	int i;

	if (layout == NULL)
		return;
	for (i = 0; i < LAYOUT_N_LEVELS; i++)
		free(layout->bins[i]);
	free(layout->chunk_server);
	free(layout->chunk_key);
	free(layout->key_by_id);
	free(layout->keys);
	free(layout);
}

uint32_t
phub_layout_key_count(const struct phub_layout *layout)
{
	return layout->n_keys;
}

uint32_t
phub_layout_chunk_count(const struct phub_layout *layout)
{
	return layout->n_chunks;
}

uint64_t
phub_layout_elem_count(const struct phub_layout *layout)
{
	return layout->n_elems;
}

uint64_t
phub_layout_segment_count(const struct phub_layout *layout)
{
	return layout->n_segments;
}

uint32_t
phub_layout_chunk_elems(const struct phub_layout *layout)
{
	return layout->chunk_elems;
}

uint32_t
phub_layout_segment_elems(const struct phub_layout *layout)
{
	return layout->segment_elems;
}

uint32_t
phub_layout_elem_size(const struct phub_layout *layout)
{
	return layout->elem_size;
}

int
phub_layout_key_index(const struct phub_layout *layout, uint32_t key_id, uint32_t *key_index)
{
	uint32_t lo = 0;
	uint32_t hi;

	if (layout == NULL || key_index == NULL)
		return -EINVAL;
	hi = layout->n_keys;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		uint32_t id = layout->keys[layout->key_by_id[mid]].key_id;

		if (id == key_id) {
			*key_index = layout->key_by_id[mid];
			return 0;
		}
		if (id < key_id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -ENOENT;
}

int
phub_layout_key_get(const struct phub_layout *layout, uint32_t key_index,
		struct phub_layout_key_info *info)
{
	const struct layout_key *k;

	if (layout == NULL || info == NULL || key_index >= layout->n_keys)
		return -EINVAL;
	k = &layout->keys[key_index];
	info->elem_base = k->elem_base;
	info->key_id = k->key_id;
	info->n_elems = k->n_elems;
	info->first_chunk = k->first_chunk;
	info->n_chunks = k->n_chunks;
	return 0;
}

int
phub_layout_chunk_get(const struct phub_layout *layout, uint32_t chunk,
		struct phub_layout_chunk *info)
{
	const struct layout_key *k;
	uint32_t offset;

	if (layout == NULL || info == NULL || chunk >= layout->n_chunks)
		return -EINVAL;
	k = &layout->keys[layout->chunk_key[chunk]];
	/* Below n_elems <= UINT32_MAX, as the chunk lies inside the key. */
	offset = (chunk - k->first_chunk) * layout->chunk_elems;
	info->key_index = layout->chunk_key[chunk];
	info->key_id = k->key_id;
	info->elem_offset = offset;
	info->elem_base = k->elem_base + offset;
	info->n_elems = k->n_elems - offset < layout->chunk_elems ?
		k->n_elems - offset : layout->chunk_elems;
	info->n_segments = (info->n_elems - 1) / layout->segment_elems + 1;
	info->server = layout->chunk_server != NULL ? layout->chunk_server[chunk] : UINT32_MAX;
	return 0;
}

int
phub_layout_chunk_find(const struct phub_layout *layout, uint32_t key_index, uint32_t elem_offset,
		uint32_t *chunk)
{
	const struct layout_key *k;

	if (layout == NULL || chunk == NULL || key_index >= layout->n_keys)
		return -EINVAL;
	k = &layout->keys[key_index];
	if (elem_offset >= k->n_elems)
		return -EINVAL;
	*chunk = k->first_chunk + elem_offset / layout->chunk_elems;
	return 0;
}

int
phub_layout_segment_get(const struct phub_layout *layout, uint32_t chunk, uint32_t segment,
		struct phub_layout_segment *seg)
{
	struct phub_layout_chunk c;
	int ret;

	if (seg == NULL)
		return -EINVAL;
	ret = phub_layout_chunk_get(layout, chunk, &c);
	if (ret < 0)
		return ret;
	if (segment >= c.n_segments)
		return -EINVAL;
	seg->elem_offset = segment * layout->segment_elems;
	seg->n_elems = c.n_elems - seg->elem_offset < layout->segment_elems ?
		c.n_elems - seg->elem_offset : layout->segment_elems;
	return 0;
}
