/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fuzz target of the engine's state machine: the input is a script of JOIN,
 * LEAVE, PUSH and PULL operations with hostile fields (ranks, tokens, sources,
 * chunks, offsets, counts, iterations, dtypes) against one small job. The
 * sanitizers catch any access outside the job's buffers; the checks below
 * catch a reply that points outside the model.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/phub_engine.h"

#define WORLD 3
#define SEG_ELEMS 16

static const struct phub_layout_key keys[] = {
	{ .key_id = 1, .n_elems = 5 },
	{ .key_id = 2, .n_elems = 70 },
	{ .key_id = 3, .n_elems = 33 },
};

/* One operation: 16 bytes of the input. */
struct op {
	uint8_t kind;		/* % 5: push, push, pull, join, leave */
	uint8_t rank;
	uint8_t token_sel;	/* even: the rank's token; odd: garbage */
	uint8_t source_sel;	/* 0: right address; else another */
	uint8_t chunk;
	uint8_t seg;
	int8_t iter_delta;	/* added to the rank's idea of the iteration */
	int8_t offset_delta;
	int8_t count_delta;
	uint8_t dtype;
	uint8_t flags;
	uint8_t fill[5];
};

static int
check_reply(const struct phub_engine_reply *reply, const float *model, size_t n_elems,
		size_t elem_size)
{
	const uint8_t *p = reply->model;

	if (reply->actions == PHUB_ENGINE_DROP)
		return reply->reason > PHUB_DROP_OK && reply->reason < PHUB_DROP_REASON_MAX;
	if (!(reply->actions & (PHUB_ENGINE_MODEL_ONE | PHUB_ENGINE_MODEL_ALL)))
		return 1;
	/* The MODEL payload lies inside the model (fp32) or its wire copy. */
	if (elem_size == 4)
		return p >= (const uint8_t *)model &&
			p + reply->model_bytes <= (const uint8_t *)(model + n_elems);
	return reply->model_bytes == (size_t)reply->elem_count * elem_size;
}

/* The telemetry views stay within the job: waited-on ranks and rank status. */
static int
check_views(const struct phub_engine_job *job, uint16_t rank)
{
	uint64_t waiting[PHUB_ENGINE_BITMAP_WORDS];
	struct phub_engine_rank_status st;
	uint32_t iteration;
	int n = phub_engine_job_waiting_on(job, &iteration, waiting);

	if (n < 0 || n > WORLD || (waiting[0] >> WORLD) != 0 ||
	    (waiting[1] | waiting[2] | waiting[3]) != 0)
		return 0;
	if (rank >= WORLD)
		return phub_engine_job_rank_status(job, rank, &st) == -EINVAL;
	return phub_engine_job_rank_status(job, rank, &st) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct phub_engine *engine;
	struct phub_engine_job *job;
	struct phub_engine_stats stats;
	struct phub_engine_job_params p;
	uint64_t tokens[WORLD] = { 0 };
	uint32_t iteration[WORLD] = { 0 };
	enum phub_dtype dtype;
	size_t elem_size;

	if (size < 1)
		return 0;
	dtype = (enum phub_dtype)(data[0] % 3);
	elem_size = phub_dtype_size(dtype);
	memset(&p, 0, sizeof(p));
	p.name = "fuzz";
	p.nonce = 42;
	p.world_size = WORLD;
	p.dtype = dtype;
	p.optimizer.type = (enum phub_opt_type)(data[0] / 3 % 6);
	/* Half the inputs run a deterministic job: staging and the rank-order cursor. */
	p.deterministic = data[0] / 18 % 2;
	p.optimizer.lr = 0.125f;
	p.optimizer.momentum = 0.5f;
	p.optimizer.beta1 = 0.9f;
	p.optimizer.beta2 = 0.99f;
	p.optimizer.eps = 1e-6f;
	p.keys = keys;
	p.n_keys = 3;
	p.chunk_bytes = 128;	/* 32 elements: two segments a chunk */
	p.segment_elems = SEG_ELEMS;
	data++;
	size--;

	engine = phub_engine_create();
	if (engine == NULL)
		return 0;
	job = phub_engine_job_create(engine, &p);
	if (job == NULL) {
		phub_engine_free(engine);
		return 0;
	}
	memset(&stats, 0, sizeof(stats));
	for (; size >= sizeof(struct op); data += sizeof(struct op), size -= sizeof(struct op)) {
		struct op op;
		struct phub_engine_request req;
		struct phub_engine_reply reply;
		struct phub_engine_peer peer = { .ipv4 = 0x0a000001, .udp_port = 1000 };
		uint8_t payload[SEG_ELEMS * 4 + 8];
		uint16_t rank;

		memcpy(&op, data, sizeof(op));
		rank = op.rank % (WORLD + 1);
		peer.udp_port = (uint16_t)(1000 + rank);
		if (op.kind % 5 == 3) {
			uint64_t t;

			if (phub_engine_job_join(job, rank, op.flags & 1 ? 7 : 42, &peer, &t) == 0 &&
			    rank < WORLD)
				tokens[rank] = t;
			continue;
		}
		if (op.kind % 5 == 4) {
			if (rank < WORLD && phub_engine_job_leave(job, rank, tokens[rank]) >= 0)
				tokens[rank] = 0;
			continue;
		}
		memset(&req, 0, sizeof(req));
		req.rank = rank;
		req.session_token = rank < WORLD && !(op.token_sel & 1) ? tokens[rank] :
			(uint64_t)op.token_sel * 0x9e3779b97f4a7c15ull;
		req.src_ipv4 = peer.ipv4 + (op.source_sel != 0);
		req.src_udp_port = peer.udp_port;
		req.chunk_id = op.chunk % 8;
		req.seg_index = op.seg % 3;
		req.seg_count = 1 + op.seg / 3 % 3;
		req.iteration = (rank < WORLD ? iteration[rank] : 0) + op.iter_delta;
		req.elem_offset = (uint32_t)(req.seg_index * SEG_ELEMS + op.offset_delta);
		req.elem_count = (uint32_t)(SEG_ELEMS + op.count_delta);
		req.dtype = op.dtype % 4 == 3 ? 7 : op.dtype % 3;
		req.retransmit = op.flags & 2;
		/* Step hyper-parameters: present or not, agreeing or not, usable or not. */
		req.has_hyper = op.flags & 8;
		req.hyper_lr = op.flags & 16 ? 0.25f : op.flags & 32 ? -1.0f : 0.5f;
		req.hyper_weight_decay = op.flags & 64 ? 1e-3f : 0.0f;
		for (size_t i = 0; i < sizeof(payload); i++)
			payload[i] = op.fill[i % sizeof(op.fill)];
		req.payload = payload;
		req.payload_len = req.elem_count * elem_size;
		if (req.payload_len > sizeof(payload))
			req.payload_len = sizeof(payload);
		if (op.kind % 5 == 2)
			phub_engine_pull(job, &req, &reply, &stats);
		else
			phub_engine_push(job, &req, &reply, &stats);
		if (!check_reply(&reply, phub_engine_job_model(job), 108, elem_size))
			abort();
		/* A worker moves on once a MODEL of its iteration came back. */
		if (rank < WORLD && (reply.actions & PHUB_ENGINE_MODEL_ALL) && op.flags & 4)
			iteration[rank]++;
		if (!check_views(job, rank))
			abort();
	}
	phub_engine_job_unpublish(engine, job);
	phub_engine_job_free(job);
	phub_engine_free(engine);
	return 0;
}
