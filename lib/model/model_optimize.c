/* SPDX-License-Identifier: BSD-3-Clause */
/* Iteration time of a PHub deployment and the polynomial configuration search (seed 004, §5). */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "phub_model.h"
#include "model_priv.h"

/* Limits that keep the search within seconds (see docs/planning.md for its cost). */
#define SEARCH_BUDGET_MAX 1024
#define SEARCH_PBOX_MAX 16
#define SEARCH_IFACES_MAX 64
#define SEARCH_CHUNKS_MAX 32
#define LCORES_MAX 1024

static const unsigned int default_chunks[] = {
	4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576, 2097152, 4194304,
};

void
phub_model_hw_default(struct phub_model_hw *hw)
{
	hw->worker_gbps = 25;		/* §4.9's future deployment: 25GbE workers */
	hw->port_gbps = 25;		/* and 25GbE PBox ports */
	hw->core_gbps = 100;		/* one 100G uplink per rack */
	hw->pbox_mem_gbps = 640;	/* §4.7: PBox sustained 80 GB/s of memory bandwidth */
	hw->per_packet_s = 200e-9;	/* until calibrated: one AVX2 pass over a segment + ACK */
	hw->per_chunk_s = 1e-6;		/* a chunk's completion: optimizer call, MODEL headers */
	hw->rtt_s = 20e-6;
	hw->pbox_lcores = 16;
	hw->segment_bytes = 1400;	/* 1500-byte MTU less IPv4, UDP and chunk headers */
}

void
phub_model_search_default(struct phub_model_search_params *s)
{
	s->machine_budget = 64;
	s->rack_machines_max = 32;
	s->pbox_per_rack_max = 2;
	s->interfaces_max = 10;		/* §3.3: the PBox prototype has 10 interfaces */
	s->chunk_bytes = NULL;
	s->chunk_count = 0;
}

const char *
phub_model_bottleneck_name(enum phub_model_bottleneck bn)
{
	static const char *const names[PHUB_MODEL_BN_COUNT] = {
		[PHUB_MODEL_BN_COMPUTE] = "compute",
		[PHUB_MODEL_BN_WORKER_NIC] = "worker_nic",
		[PHUB_MODEL_BN_PBOX_PORT] = "pbox_port",
		[PHUB_MODEL_BN_PBOX_CPU] = "pbox_cpu",
		[PHUB_MODEL_BN_PBOX_MEMORY] = "pbox_memory",
		[PHUB_MODEL_BN_CORE] = "core",
	};

	if ((unsigned int)bn >= PHUB_MODEL_BN_COUNT)
		return NULL;
	return names[bn];
}

const char *
phub_model_reduction_name(enum phub_model_reduction r)
{
	switch (r) {
	case PHUB_MODEL_FLAT:
		return "flat";
	case PHUB_MODEL_HIERARCHICAL:
		return "hierarchical";
	}
	return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Chunking (§3.2.3) and the largest-first placement of chunks on interfaces and lcores
 * (§3.2.4's 4/3 set partition). The model uses the placement the PBox itself computes, so the
 * search never enumerates placements (an exponential space, bins^chunks).
 */

static int
cmp_desc(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x < y) - (x > y);
}

int
model_chunking_init(struct model_chunking *ck, const struct phub_model_job *job,
		unsigned int chunk_bytes, unsigned int segment_bytes)
{
	double q, rem;

	memset(ck, 0, sizeof(*ck));
	if (chunk_bytes == 0 || segment_bytes == 0)
		return -EINVAL;
	ck->chunk_bytes = chunk_bytes;
	ck->segment_bytes = segment_bytes;
	ck->pkts_per_full = ceil((double)chunk_bytes / segment_bytes);
	ck->rem_bytes = calloc(job->layers, sizeof(double));
	if (ck->rem_bytes == NULL)
		return -ENOMEM;
	for (size_t l = 0; l < job->layers; l++) {
		q = floor(job->layer_bytes[l] / chunk_bytes);
		rem = job->layer_bytes[l] - q * chunk_bytes;
		ck->full += q;
		if (rem > 0)
			ck->rem_bytes[ck->nrem++] = rem;
	}
	qsort(ck->rem_bytes, ck->nrem, sizeof(double), cmp_desc);
	ck->total_pkts = ck->full * ck->pkts_per_full;
	for (size_t i = 0; i < ck->nrem; i++)
		ck->total_pkts += ceil(ck->rem_bytes[i] / segment_bytes);
	return 0;
}

void
model_chunking_fini(struct model_chunking *ck)
{
	free(ck->rem_bytes);
	memset(ck, 0, sizeof(*ck));
}

struct bin {
	double bytes;
	double pkts;
	double chunks;
};

static void
heap_down(struct bin *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct bin t;

		if (l < n && h[l].bytes < h[m].bytes)
			m = l;
		if (r < n && h[r].bytes < h[m].bytes)
			m = r;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

/*
 * Largest-first greedy onto `bins` equal bins, computed without listing the chunks: all full
 * chunks are equal, so they go round-robin (floor(Q/b) or one more per bin); the few
 * remainders (one per layer at most) then go, largest first, to the least loaded bin.
 */
int
model_lpt(const struct model_chunking *ck, unsigned int bins, struct model_bin *max)
{
	double base, c = ck->chunk_bytes, ppc = ck->pkts_per_full, mb, mp, mc;
	size_t extra, floor_bins, nf, nc, n = 0;
	struct bin *h;

	if (bins == 0)
		return -EINVAL;
	base = floor(ck->full / bins);
	extra = (size_t)(ck->full - base * bins);
	floor_bins = bins - extra;
	mb = (extra > 0 ? base + 1 : base) * c;
	mp = (extra > 0 ? base + 1 : base) * ppc;
	mc = extra > 0 ? base + 1 : base;
	if (ck->nrem == 0)
		goto out;
	if (ck->nrem <= floor_bins) {
		/* Each remainder lands on its own untouched floor bin, which stays below a ceil bin
		 * (a remainder is smaller than a chunk): only the largest one matters. */
		mb = fmax(mb, base * c + ck->rem_bytes[0]);
		mp = fmax(mp, base * ppc + ceil(ck->rem_bytes[0] / ck->segment_bytes));
		mc = fmax(mc, base + 1);
		goto out;
	}
	/* Only bins that can receive a remainder need to be in the heap. */
	nf = floor_bins;
	nc = extra < ck->nrem ? extra : ck->nrem;
	h = malloc((nf + nc) * sizeof(*h));
	if (h == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < nf; i++)
		h[n++] = (struct bin){ base * c, base * ppc, base };
	for (size_t i = 0; i < nc; i++)
		h[n++] = (struct bin){ (base + 1) * c, (base + 1) * ppc, base + 1 };
	for (size_t i = n / 2; i-- > 0;)
		heap_down(h, n, i);
	for (size_t i = 0; i < ck->nrem; i++) {
		h[0].bytes += ck->rem_bytes[i];
		h[0].pkts += ceil(ck->rem_bytes[i] / ck->segment_bytes);
		h[0].chunks += 1;
		mb = fmax(mb, h[0].bytes);
		mp = fmax(mp, h[0].pkts);
		mc = fmax(mc, h[0].chunks);
		heap_down(h, n, 0);
	}
	free(h);
out:
	max->bytes = mb;
	max->pkts = mp;
	max->chunks = mc;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The iteration time. Following seed 004 §4.2.3, an iteration is compute plus the part of
 * communication that compute does not hide; following PHub (§2.3.1, §3.4) the communication
 * is a set of resources that work in parallel (full duplex, chunks pipelined), the busiest of
 * which sets the exchange time.
 */
struct shape {
	unsigned int racks;
	unsigned int workers;
	unsigned int rack_max;	/* workers of the fullest rack */
	unsigned int pbox;
	unsigned int ifaces;
	enum phub_model_reduction reduction;
};

static void
estimate(const struct phub_model_job *job, const struct phub_model_hw *hw,
		const struct model_chunking *ck, const struct shape *s,
		const struct model_bin *port, const struct model_bin *core, double model_bytes,
		struct phub_model_estimate *e)
{
	double r = s->racks, w = s->workers, nmax = s->rack_max, p = s->pbox, served, ring;
	double bw = hw->worker_gbps * MODEL_GIGA, bp = hw->port_gbps * MODEL_GIGA;
	double bc = hw->core_gbps * MODEL_GIGA, bm = hw->pbox_mem_gbps * MODEL_GIGA;
	double m = model_bytes * MODEL_BITS_PER_BYTE, *t = e->resource_s, last, hop, bn, busy;
	double start, lcore;

	memset(e, 0, sizeof(*e));
	e->racks = s->racks;
	e->workers = s->workers;
	e->rack_workers_max = s->rack_max;
	e->pbox_per_rack = s->pbox;
	e->interfaces = s->ifaces;
	e->chunk_bytes = ck->chunk_bytes;
	e->reduction = s->reduction;
	e->machines = s->workers + s->racks * s->pbox;

	t[PHUB_MODEL_BN_COMPUTE] = job->compute_s;
	/* A worker sends its gradients and receives the weights, M each way (Figure 4, PBox). */
	t[PHUB_MODEL_BN_WORKER_NIC] = m / bw;
	/* The busiest lcore's work for one worker's copy of its chunks: every segment is
	 * aggregated and acknowledged, every chunk completed and optimized once it is whole. */
	lcore = core->pkts * hw->per_packet_s + core->chunks * hw->per_chunk_s;
	if (s->reduction == PHUB_MODEL_FLAT) {
		/* The racks' PBoxes are one sharded PS: each serves its keys to all W workers. */
		served = w;
		t[PHUB_MODEL_BN_PBOX_PORT] = w * port->bytes * MODEL_BITS_PER_BYTE / bp;
		t[PHUB_MODEL_BN_PBOX_CPU] = w * lcore;
		/* §4.7: the PBox is bound by memory (PCIe) bandwidth, in + out. */
		t[PHUB_MODEL_BN_PBOX_MEMORY] = 2 * w * m / (r * p) / bm;
		/* Out of rack i: its workers' pushes to remote shards, n_i (R-1)/R M, and its
		 * shards' answers to remote workers, (W - n_i) M/R; most for the fullest rack. */
		t[PHUB_MODEL_BN_CORE] = s->racks > 1 ? (nmax * (r - 2) + w) * m / r / bc : 0;
	} else {
		/* §3.4: the rack's PBoxes aggregate its workers, then reduce-scatter and
		 * all-gather with the other racks' PBoxes in a ring, 2(R-1)/R of their keys each
		 * way. */
		ring = 2 * (r - 1) / r;
		served = nmax;
		t[PHUB_MODEL_BN_PBOX_PORT] = (nmax + ring) * port->bytes * MODEL_BITS_PER_BYTE / bp;
		t[PHUB_MODEL_BN_PBOX_CPU] = (nmax + ring) * lcore;
		t[PHUB_MODEL_BN_PBOX_MEMORY] = 2 * (nmax + ring) * m / p / bm;
		t[PHUB_MODEL_BN_CORE] = ring * m / bc;
	}

	e->exchange_s = 0;
	e->bottleneck = PHUB_MODEL_BN_WORKER_NIC;
	for (unsigned int i = PHUB_MODEL_BN_WORKER_NIC; i < PHUB_MODEL_BN_COUNT; i++) {
		if (t[i] > e->exchange_s) {
			e->exchange_s = t[i];
			e->bottleneck = i;
		}
	}

	/* After the last gradient (the first layer's) exists, its last chunk still travels to
	 * the PBox and back, and is aggregated only once whole (§3.2.3): one chunk from the
	 * worker, and all served workers' copies through one PBox port, each way; the ring
	 * adds 2(R-1) steps of a chunk's 1/R (§4.8: the added rounds of hierarchical
	 * reduction). */
	last = fmin(ck->chunk_bytes, job->layer_bytes[0]) * MODEL_BITS_PER_BYTE;
	hop = fmax(last / bw, served * last / bp);
	e->tail_s = 2 * hop + hw->rtt_s;
	if (s->reduction == PHUB_MODEL_HIERARCHICAL) {
		bn = fmin(p * s->ifaces * bp, bc);
		e->tail_s += 2 * (r - 1) * (last / r / bn + hw->rtt_s / 2);
	}

	/* Gradients flow from the start of backward (wait-free backprop, Poseidon). */
	start = (1 - job->overlap) * job->compute_s;
	busy = start + e->exchange_s;
	if (job->compute_s >= busy) {
		e->bottleneck = PHUB_MODEL_BN_COMPUTE;
		busy = job->compute_s;
	}
	e->iteration_s = busy + e->tail_s;
	e->samples_per_s = w * job->batch / e->iteration_s;
}

/* The hardware's rates (positive) and its costs in time (zero or more). */
static int
check_hw_numbers(const struct phub_model_hw *hw, char *err, size_t errlen)
{
	const struct model_num pos[] = {
		MODEL_NUM(hw, worker_gbps), MODEL_NUM(hw, port_gbps), MODEL_NUM(hw, core_gbps),
		MODEL_NUM(hw, pbox_mem_gbps),
	};
	const struct model_num nonneg[] = {
		MODEL_NUM(hw, per_packet_s), MODEL_NUM(hw, per_chunk_s), MODEL_NUM(hw, rtt_s),
	};

	return model_check_nums(pos, MODEL_DIM(pos), nonneg, MODEL_DIM(nonneg), err, errlen);
}

static int
check_inputs(const struct phub_model_job *job, const struct phub_model_hw *hw, char *err,
		size_t errlen)
{
	int rc;

	if (job == NULL || hw == NULL || job->layers == 0 || job->layer_bytes == NULL)
		return phub_err(err, errlen, EINVAL, "the job has no layers");
	for (size_t i = 0; i < job->layers; i++) {
		if (!(job->layer_bytes[i] > 0) || !isfinite(job->layer_bytes[i]))
			return phub_err(err, errlen, EINVAL,
					"layer_bytes[%zu] must be a positive number", i);
	}
	rc = model_check_pos(job->compute_s, "compute_s", err, errlen);
	if (rc == 0 && !(job->overlap >= 0 && job->overlap <= 1))
		rc = phub_err(err, errlen, EINVAL, "overlap must be a fraction from 0 to 1");
	if (rc == 0 && job->batch < 1)
		rc = phub_err(err, errlen, EINVAL, "batch must be at least 1");
	if (rc == 0)
		rc = check_hw_numbers(hw, err, errlen);
	if (rc == 0 && (hw->pbox_lcores < 1 || hw->pbox_lcores > LCORES_MAX))
		rc = phub_err(err, errlen, EINVAL, "pbox_lcores must be from 1 to %d",
				LCORES_MAX);
	if (rc == 0 && hw->segment_bytes < 64)
		rc = phub_err(err, errlen, EINVAL, "segment_bytes must be at least 64");
	return rc;
}

int
phub_model_evaluate(const struct phub_model_job *job, const struct phub_model_hw *hw,
		const struct phub_model_deploy *d, struct phub_model_estimate *out,
		char *err, size_t errlen)
{
	struct model_chunking ck;
	struct shape s;
	struct model_bin pb, cb;
	unsigned int port_bins, core_bins;
	int rc;

	rc = check_inputs(job, hw, err, errlen);
	if (rc != 0)
		return rc;
	if (d == NULL || out == NULL || d->racks < 1 || d->rack_workers == NULL)
		return phub_err(err, errlen, EINVAL, "a deployment needs at least one rack");
	if (d->pbox_per_rack < 1 || d->interfaces < 1 || d->chunk_bytes < 1)
		return phub_err(err, errlen, EINVAL,
				"a deployment needs a PBox per rack, an interface and a chunk size");
	if (d->reduction == PHUB_MODEL_HIERARCHICAL && d->racks < 2)
		return phub_err(err, errlen, EINVAL,
				"hierarchical reduction needs at least 2 racks");
	if (d->reduction != PHUB_MODEL_FLAT && d->reduction != PHUB_MODEL_HIERARCHICAL)
		return phub_err(err, errlen, EINVAL, "unknown reduction");

	memset(&s, 0, sizeof(s));
	s.racks = d->racks;
	s.pbox = d->pbox_per_rack;
	s.ifaces = d->interfaces;
	s.reduction = d->reduction;
	for (unsigned int i = 0; i < d->racks; i++) {
		if (d->rack_workers[i] < 1)
			return phub_err(err, errlen, EINVAL, "rack %u has no worker", i);
		s.workers += d->rack_workers[i];
		if (d->rack_workers[i] > s.rack_max)
			s.rack_max = d->rack_workers[i];
	}
	port_bins = d->interfaces * d->pbox_per_rack;
	core_bins = hw->pbox_lcores * d->pbox_per_rack;
	if (d->reduction == PHUB_MODEL_FLAT) {
		port_bins *= d->racks;
		core_bins *= d->racks;
	}

	rc = model_chunking_init(&ck, job, d->chunk_bytes, hw->segment_bytes);
	if (rc != 0)
		return phub_err(err, errlen, -rc, "cannot cut the job into chunks");
	rc = model_lpt(&ck, port_bins, &pb);
	if (rc == 0)
		rc = model_lpt(&ck, core_bins, &cb);
	if (rc == 0)
		estimate(job, hw, &ck, &s, &pb, &cb, phub_model_job_bytes(job), out);
	model_chunking_fini(&ck);
	if (rc != 0)
		return phub_err(err, errlen, -rc, "out of memory");
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The search.
 */

/* Ranks a over b: more samples/s, then fewer machines, fewer PBoxes, fewer interfaces, flat
 * before hierarchical, larger chunks (fewer packets for the same time). */
static bool
better(const struct phub_model_estimate *a, const struct phub_model_estimate *b)
{
	double tol = 1e-12 * fmax(a->samples_per_s, b->samples_per_s);

	if (fabs(a->samples_per_s - b->samples_per_s) > tol)
		return a->samples_per_s > b->samples_per_s;
	if (a->machines != b->machines)
		return a->machines < b->machines;
	if (a->racks * a->pbox_per_rack != b->racks * b->pbox_per_rack)
		return a->racks * a->pbox_per_rack < b->racks * b->pbox_per_rack;
	if (a->interfaces != b->interfaces)
		return a->interfaces < b->interfaces;
	if (a->reduction != b->reduction)
		return a->reduction == PHUB_MODEL_FLAT;
	return a->chunk_bytes > b->chunk_bytes;
}

/* Configurations that differ only in interfaces or chunk size are one deployment: the list
 * shows each deployment once, with its best interfaces and chunk size. */
static bool
same_deployment(const struct phub_model_estimate *a, const struct phub_model_estimate *b)
{
	return a->racks == b->racks && a->workers == b->workers &&
		a->pbox_per_rack == b->pbox_per_rack && a->reduction == b->reduction;
}

static void
top_insert(struct phub_model_estimate *best, size_t cap, size_t *n,
		const struct phub_model_estimate *e)
{
	size_t i;

	for (i = 0; i < *n; i++) {
		if (same_deployment(&best[i], e))
			break;
	}
	if (i < *n) {
		if (!better(e, &best[i]))
			return;
		/* Remove the old entry; the new one is inserted below at its rank. */
		memmove(&best[i], &best[i + 1], (*n - i - 1) * sizeof(*best));
		(*n)--;
	}
	if (*n == cap && !better(e, &best[cap - 1]))
		return;
	i = *n < cap ? *n : cap - 1;
	while (i > 0 && better(e, &best[i - 1])) {
		best[i] = best[i - 1];
		i--;
	}
	best[i] = *e;
	if (*n < cap)
		(*n)++;
}

struct memo {
	struct model_bin *bin;	/* bytes NAN until computed */
	size_t size;
};

/* Bin counts past this are computed each time (cheap: few remainders per bin then). */
#define MEMO_BINS_MAX (1u << 18)

static size_t
memo_size(size_t max_bins)
{
	return max_bins + 1 < MEMO_BINS_MAX ? max_bins + 1 : MEMO_BINS_MAX;
}

static int
memo_init(struct memo *m, size_t size)
{
	m->size = size;
	m->bin = malloc(size * sizeof(*m->bin));
	if (m->bin == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < size; i++)
		m->bin[i].bytes = NAN;
	return 0;
}

static void
memo_fini(struct memo *m)
{
	free(m->bin);
}

static int
memo_lpt(struct memo *m, const struct model_chunking *ck, unsigned int bins,
		struct model_bin *out)
{
	int rc;

	if (bins >= m->size)
		return model_lpt(ck, bins, out);
	if (isnan(m->bin[bins].bytes)) {
		rc = model_lpt(ck, bins, &m->bin[bins]);
		if (rc != 0)
			return rc;
	}
	*out = m->bin[bins];
	return 0;
}

/* What the search carries from one deployment to the next. */
struct search {
	const struct phub_model_job *job;
	const struct phub_model_hw *hw;
	struct model_chunking ck;	/* the job at the current chunk size */
	struct memo port;		/* placements on interfaces, by bin count */
	struct memo core;		/* placements on lcores, by bin count */
	double mbytes;
	struct phub_model_estimate *best;
	size_t cap;
	size_t found;
};

/* Every interface count and reduction of one (racks, workers, PBoxes per rack). */
static int
try_shape(struct search *ctx, unsigned int r, unsigned int w, unsigned int p,
		unsigned int ifaces_max)
{
	struct shape sh = {
		.racks = r, .workers = w, .rack_max = (w + r - 1) / r, .pbox = p,
	};
	struct phub_model_estimate e;
	struct model_bin pb, cb;
	int rc;

	for (unsigned int i = 1; i <= ifaces_max; i++) {
		for (int red = 0; red < 2; red++) {
			unsigned int pbins = i * p, cbins = ctx->hw->pbox_lcores * p;

			if (red == PHUB_MODEL_HIERARCHICAL && r < 2)
				continue;
			if (red == PHUB_MODEL_FLAT) {
				pbins *= r;
				cbins *= r;
			}
			sh.ifaces = i;
			sh.reduction = red;
			rc = memo_lpt(&ctx->port, &ctx->ck, pbins, &pb);
			if (rc == 0)
				rc = memo_lpt(&ctx->core, &ctx->ck, cbins, &cb);
			if (rc != 0)
				return rc;
			estimate(ctx->job, ctx->hw, &ctx->ck, &sh, &pb, &cb, ctx->mbytes, &e);
			top_insert(ctx->best, ctx->cap, &ctx->found, &e);
		}
	}
	return 0;
}

/*
 * Seed 004 §5 enumerates the resource parameters (at most N^3 choices) and replaces the two
 * exponential parts of the space by a greedy mapping and a dynamic program. Here:
 *  - resources: racks R, workers W, PBoxes per rack p, interfaces I, chunk size c and the
 *    reduction, each enumerated: O(B^2 p_max I_max C) for a budget of B machines;
 *  - placement of chunks on interfaces and lcores (bins^chunks ways): the PBox's own
 *    largest-first placement (model_lpt), memoized per (c, bins);
 *  - split of W workers over R racks (compositions, exponential in R): the iteration time
 *    depends on the split only through the fullest rack and grows with it (every term above
 *    is non-decreasing in n_max), so the balanced split, ceil(W/R) at most per rack, is
 *    optimal for every (R, W) and the only one evaluated.
 */
int
phub_model_optimize(const struct phub_model_job *job, const struct phub_model_hw *hw,
		const struct phub_model_search_params *s, struct phub_model_estimate *best,
		size_t *n, char *err, size_t errlen)
{
	struct search ctx = { 0 };
	const unsigned int *chunks;
	size_t nchunks, cap;
	unsigned int b;
	int rc;

	if (s == NULL || best == NULL || n == NULL || *n == 0)
		return phub_err(err, errlen, EINVAL, "no room for results");
	cap = *n;
	*n = 0;
	rc = check_inputs(job, hw, err, errlen);
	if (rc != 0)
		return rc;
	b = s->machine_budget;
	if (b < 2 || b > SEARCH_BUDGET_MAX)
		return phub_err(err, errlen, EINVAL,
				"machine budget must be from 2 to %d (a worker and a PBox at least)",
				SEARCH_BUDGET_MAX);
	if (s->rack_machines_max < 2)
		return phub_err(err, errlen, EINVAL,
				"a rack must hold at least 2 machines (a worker and a PBox)");
	if (s->pbox_per_rack_max < 1 || s->pbox_per_rack_max > SEARCH_PBOX_MAX)
		return phub_err(err, errlen, EINVAL, "PBoxes per rack must be from 1 to %d",
				SEARCH_PBOX_MAX);
	if (s->interfaces_max < 1 || s->interfaces_max > SEARCH_IFACES_MAX)
		return phub_err(err, errlen, EINVAL, "interfaces per PBox must be from 1 to %d",
				SEARCH_IFACES_MAX);
	chunks = s->chunk_bytes != NULL ? s->chunk_bytes : default_chunks;
	nchunks = s->chunk_bytes != NULL ? s->chunk_count :
		sizeof(default_chunks) / sizeof(default_chunks[0]);
	if (nchunks < 1 || nchunks > SEARCH_CHUNKS_MAX)
		return phub_err(err, errlen, EINVAL, "give from 1 to %d chunk sizes",
				SEARCH_CHUNKS_MAX);
	for (size_t i = 0; i < nchunks; i++) {
		if (chunks[i] < 64 || chunks[i] > (1u << 30))
			return phub_err(err, errlen, EINVAL,
					"chunk sizes must be from 64 bytes to 1 GiB (got %u)",
					chunks[i]);
	}

	/* Flat mode spreads keys over every PBox of every rack. */
	rc = memo_init(&ctx.port, memo_size((size_t)b * s->pbox_per_rack_max * s->interfaces_max));
	if (rc == 0)
		rc = memo_init(&ctx.core, memo_size((size_t)b * s->pbox_per_rack_max *
				hw->pbox_lcores));
	if (rc != 0) {
		rc = phub_err(err, errlen, ENOMEM, "out of memory");
		goto out;
	}

	ctx.job = job;
	ctx.hw = hw;
	ctx.mbytes = phub_model_job_bytes(job);
	ctx.best = best;
	ctx.cap = cap;
	for (size_t ci = 0; ci < nchunks; ci++) {
		rc = model_chunking_init(&ctx.ck, job, chunks[ci], hw->segment_bytes);
		if (rc != 0) {
			rc = phub_err(err, errlen, -rc, "cannot cut the job into chunks");
			goto out;
		}
		for (size_t i = 0; i < ctx.port.size; i++)
			ctx.port.bin[i].bytes = NAN;
		for (size_t i = 0; i < ctx.core.size; i++)
			ctx.core.bin[i].bytes = NAN;
		for (unsigned int p = 1; p <= s->pbox_per_rack_max; p++) {
			if (p >= s->rack_machines_max)
				break;
			for (unsigned int r = 1; r <= b / (p + 1); r++) {
				unsigned int wmax = b - r * p;

				if (wmax > r * (s->rack_machines_max - p))
					wmax = r * (s->rack_machines_max - p);
				for (unsigned int w = r; w <= wmax && rc == 0; w++)
					rc = try_shape(&ctx, r, w, p, s->interfaces_max);
			}
		}
		model_chunking_fini(&ctx.ck);
		if (rc != 0) {
			rc = phub_err(err, errlen, ENOMEM, "out of memory");
			goto out;
		}
	}
	if (ctx.found == 0)
		rc = phub_err(err, errlen, EINVAL,
				"no configuration fits: the budget or the rack size is too small");
out:
	memo_fini(&ctx.port);
	memo_fini(&ctx.core);
	*n = rc == 0 ? ctx.found : 0;
	return rc;
}
