/* SPDX-License-Identifier: BSD-3-Clause */
/* Checkpoints of a job: the lock-free shadow snapshot, and the file that saves and restores it. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_priv.h"
#include "phub_err.h"

/* Bytes buffered between the CRC and write(2) for the small parts of a file. */
#define CKPT_IO_BUF 4096u
/* A header naming more keys than this is corrupt, not a model: refuse before allocating. */
#define CKPT_MAX_KEYS (1u << 24)

/*
 * The fixed header, little endian (PHUB_ENGINE_CKPT_HEADER_BYTES):
 *
 *   0 magic "PHUBCKPT"       8 version u32          12 header_bytes u32
 *  16 name[64], NUL-padded  80 nonce u64           88 n_elems u64
 *  96 iteration u32        100 flags u32           104 chunk_bytes u32
 * 108 segment_elems u32    112 n_keys u32          116 world_size u16
 * 118 dtype u8             119 optimizer u8        120 n_states u32
 * 124 lr, momentum, weight_decay, beta1, beta2, eps (float32 bit patterns)
 * 148 reserved u32 (0)
 */
enum {
	H_MAGIC = 0,
	H_VERSION = 8,
	H_HEADER_BYTES = 12,
	H_NAME = 16,
	H_NONCE = 80,
	H_N_ELEMS = 88,
	H_ITERATION = 96,
	H_FLAGS = 100,
	H_CHUNK_BYTES = 104,
	H_SEGMENT_ELEMS = 108,
	H_N_KEYS = 112,
	H_WORLD_SIZE = 116,
	H_DTYPE = 118,
	H_OPTIMIZER = 119,
	H_N_STATES = 120,
	H_HYPER = 124,
	H_RESERVED = 148,
};

static_assert(H_RESERVED + 4 == PHUB_ENGINE_CKPT_HEADER_BYTES, "header layout");
static_assert(sizeof(float) == sizeof(uint32_t), "fp32 is 32 bits");

/* The message of a failed read or write for the caller (the function returns its own code). */
#define set_err(err, errlen, ...) ((void)phub_err(err, errlen, 0, __VA_ARGS__))

/* ---- little-endian fields ---- */

static void
put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void
put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void
put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void
put_f32(uint8_t *p, float f)
{
	put_u32(p, phub_f32_bits(f));
}

static uint16_t
get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t
get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static float
get_f32(const uint8_t *p)
{
	return phub_f32_from_bits(get_u32(p));
}

/* fp32 arrays are stored little endian: a big-endian host swaps them in place. */
static void
f32_array_le(float *a, uint64_t n)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	for (uint64_t i = 0; i < n; i++) {
		uint32_t v;

		memcpy(&v, &a[i], sizeof(v));
		v = __builtin_bswap32(v);
		memcpy(&a[i], &v, sizeof(v));
	}
#else
	(void)a;
	(void)n;
#endif
}

/* ---- the shadow ---- */

static unsigned int
ckpt_states(const struct phub_engine_job *job)
{
	return phub_opt_state_count(job->optimizer.type);
}

uint64_t
engine_ckpt_memory(const struct phub_engine_job *job)
{
	if (!job->ckpt_shadow)
		return 0;
	return job->n_elems * sizeof(float) * (1 + ckpt_states(job));
}

static float *
shadow_alloc(struct phub_engine_job *job, size_t size)
{
	float *p = job->allocator.alloc(size, PHUB_ENGINE_ALIGN, job->allocator.ctx);

	if (p != NULL) {
		memset(p, 0, size);
		job->memory_bytes += size;
	}
	return p;
}

int
engine_ckpt_alloc(struct phub_engine_job *job)
{
	size_t floats = job->n_elems * sizeof(float);

	atomic_init(&job->ckpt.collect, 0);
	if (!job->ckpt_shadow)
		return 0;
	job->ckpt.model = shadow_alloc(job, floats);
	if (job->ckpt.model == NULL)
		return -ENOMEM;
	for (unsigned int i = 0; i < ckpt_states(job); i++) {
		job->ckpt.state[i] = shadow_alloc(job, floats);
		if (job->ckpt.state[i] == NULL)
			return -ENOMEM;
	}
	return 0;
}

void
engine_ckpt_release(struct phub_engine_job *job)
{
	float *bufs[3] = { job->ckpt.model, job->ckpt.state[0], job->ckpt.state[1] };

	for (unsigned int i = 0; i < 3; i++)
		if (bufs[i] != NULL)
			job->allocator.free(bufs[i], job->allocator.ctx);
	memset(&job->ckpt, 0, sizeof(job->ckpt));
}

/* The segment of a slot: its first element in the job's flat buffers and its length. */
static void
slot_elems(const struct phub_engine_job *job, uint32_t s, uint64_t *elem, uint32_t *n)
{
	uint32_t lo = engine_seg_chunk(job, s), seg;
	struct phub_layout_chunk chunk;

	phub_layout_chunk_get(job->layout, lo, &chunk);
	seg = s - job->chunks[lo].first_segment;
	*elem = chunk.elem_base + (uint64_t)seg * job->segment_elems;
	*n = chunk.n_elems - seg * job->segment_elems;
	if (*n > job->segment_elems)
		*n = job->segment_elems;
}

void
engine_ckpt_copy(struct phub_engine_job *job, const struct segment_slot *slot, uint64_t collect)
{
	uint32_t s = (uint32_t)(slot - job->slots);
	uint64_t expected = collect;
	uint64_t elem;
	uint32_t n;

	slot_elems(job, s, &elem, &n);
	memcpy(job->ckpt.model + elem, job->model + elem, (size_t)n * sizeof(float));
	for (unsigned int i = 0; i < 2; i++)
		if (job->ckpt.state[i] != NULL)
			memcpy(job->ckpt.state[i] + elem, job->state[i] + elem,
					(size_t)n * sizeof(float));
	/*
	 * Count the copy only for the collection it was made for: if the control thread armed
	 * another one meanwhile, this region belongs to an abandoned snapshot. Release: whoever
	 * sees the count sees the copy.
	 */
	while (!atomic_compare_exchange_weak_explicit(&job->ckpt.collect, &expected, expected + 1,
			memory_order_acq_rel, memory_order_acquire)) {
		if ((expected & CKPT_ARMED) == 0 || (expected >> 32) != (collect >> 32))
			return;
	}
}

int
phub_engine_job_ckpt_collect(struct phub_engine_job *job, uint32_t iteration)
{
	if (job->ckpt.model == NULL)
		return -ENOTSUP;
	atomic_store_explicit(&job->ckpt.collect, (uint64_t)iteration << 32 | CKPT_ARMED,
			memory_order_release);
	return 0;
}

void
phub_engine_job_ckpt_cancel(struct phub_engine_job *job)
{
	atomic_store_explicit(&job->ckpt.collect, 0, memory_order_release);
}

void
phub_engine_job_ckpt_status(const struct phub_engine_job *job, bool scan,
		struct phub_engine_ckpt_status *st)
{
	bool all_past = false;
	uint64_t collect;

	memset(st, 0, sizeof(*st));
	st->n_segments = job->n_segments;
	if (job->ckpt.model == NULL)
		return;
	/*
	 * Segments first, the count after: a thread counts its copy before its slot moves on,
	 * so a count read after every slot was seen past the target includes every copy made.
	 */
	if (scan) {
		uint32_t target;

		collect = atomic_load_explicit(&job->ckpt.collect, memory_order_acquire);
		target = (uint32_t)(collect >> 32);
		all_past = true;
		/*
		 * Only the owning lcores write slots. An acquire load that sees a slot past the
		 * target synchronises with its lcore's release store, made after that lcore
		 * counted its copy, so the count read below includes the copy.
		 */
		for (uint32_t s = 0; s < job->n_segments && all_past; s++)
			all_past = (int32_t)(__atomic_load_n(&job->slots[s].next_iteration,
							     __ATOMIC_ACQUIRE) - target) > 0;
	}
	collect = atomic_load_explicit(&job->ckpt.collect, memory_order_acquire);
	st->armed = (collect & CKPT_ARMED) != 0;
	st->iteration = (uint32_t)(collect >> 32);
	st->copied = (uint32_t)(collect & CKPT_COUNT_MASK);
	st->complete = st->armed && st->copied == job->n_segments;
	st->missed = st->armed && !st->complete && all_past;
}

const float *
phub_engine_job_state(const struct phub_engine_job *job, unsigned int i)
{
	return i < 2 ? job->state[i] : NULL;
}

/* ---- writing ---- */

/* A writer that checksums everything it writes. */
struct ckpt_out {
	int fd;
	uint32_t crc;
	size_t used;
	uint8_t buf[CKPT_IO_BUF];
};

/*
 * All n bytes at b written to fd, or read from it into b (which is then the caller's writable
 * buffer), again after a signal: 0, the call's -errno, or at_end when it moves no byte.
 */
static int
fd_all(int fd, const uint8_t *b, size_t n, bool reading, int at_end)
{
	while (n > 0) {
		ssize_t d = reading ? read(fd, (uint8_t *)(uintptr_t)b, n) : write(fd, b, n);

		if (d < 0 && errno == EINTR)
			continue;
		if (d < 0)
			return -errno;
		if (d == 0)
			return at_end;
		b += d;
		n -= (size_t)d;
	}
	return 0;
}

static int
write_all(int fd, const void *p, size_t n)
{
	return fd_all(fd, p, n, false, -EIO);
}

static int
out_flush(struct ckpt_out *o)
{
	int rc = write_all(o->fd, o->buf, o->used);

	o->used = 0;
	return rc;
}

static int
out_put(struct ckpt_out *o, const void *p, size_t n)
{
	o->crc = phub_crc32c(o->crc, p, n);
	if (o->used + n > sizeof(o->buf)) {
		int rc = out_flush(o);

		if (rc != 0)
			return rc;
	}
	if (n > sizeof(o->buf))
		return write_all(o->fd, p, n);
	memcpy(o->buf + o->used, p, n);
	o->used += n;
	return 0;
}

/* An fp32 array, straight from the job's buffer on a little-endian host. */
static int
out_f32(struct ckpt_out *o, const float *a, uint64_t n)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	for (uint64_t i = 0; i < n; i++) {
		uint8_t le[4];
		int rc;

		put_f32(le, a[i]);
		rc = out_put(o, le, sizeof(le));
		if (rc != 0)
			return rc;
	}
	return 0;
#else
	return out_put(o, a, n * sizeof(float));
#endif
}

static void
header_build(const struct phub_engine_job *job, uint32_t iteration, uint32_t flags, uint8_t *h)
{
	const struct phub_optimizer_params *opt = &job->optimizer;

	memset(h, 0, PHUB_ENGINE_CKPT_HEADER_BYTES);
	memcpy(h + H_MAGIC, PHUB_ENGINE_CKPT_MAGIC, 8);
	put_u32(h + H_VERSION, PHUB_ENGINE_CKPT_VERSION);
	put_u32(h + H_HEADER_BYTES, PHUB_ENGINE_CKPT_HEADER_BYTES);
	memcpy(h + H_NAME, job->name, strnlen(job->name, PHUB_ENGINE_NAME_MAX - 1));
	put_u64(h + H_NONCE, job->nonce);
	put_u64(h + H_N_ELEMS, job->n_elems);
	put_u32(h + H_ITERATION, iteration);
	put_u32(h + H_FLAGS, flags | (job->deterministic ? PHUB_ENGINE_CKPT_F_DETERMINISTIC : 0) |
			(job->elastic ? PHUB_ENGINE_CKPT_F_ELASTIC : 0));
	/* The layout was cut with fp32-sized chunks of chunk_elems elements. */
	put_u32(h + H_CHUNK_BYTES, phub_layout_chunk_elems(job->layout) *
			PHUB_LAYOUT_MODEL_ELEM_SIZE);
	put_u32(h + H_SEGMENT_ELEMS, job->segment_elems);
	put_u32(h + H_N_KEYS, phub_layout_key_count(job->layout));
	put_u16(h + H_WORLD_SIZE, job->world_size);
	h[H_DTYPE] = (uint8_t)job->dtype;
	h[H_OPTIMIZER] = (uint8_t)opt->type;
	put_u32(h + H_N_STATES, ckpt_states(job));
	put_f32(h + H_HYPER, opt->lr);
	put_f32(h + H_HYPER + 4, opt->momentum);
	put_f32(h + H_HYPER + 8, opt->weight_decay);
	put_f32(h + H_HYPER + 12, opt->beta1);
	put_f32(h + H_HYPER + 16, opt->beta2);
	put_f32(h + H_HYPER + 20, opt->eps);
}

int
phub_engine_ckpt_write(const struct phub_engine_job *job, enum phub_engine_ckpt_source src,
		uint32_t flags, int fd, char *err, size_t errlen)
{
	uint8_t header[PHUB_ENGINE_CKPT_HEADER_BYTES];
	const float *model, *state[2];
	struct phub_engine_ckpt_status st;
	struct ckpt_out *o;
	uint32_t iteration;
	uint8_t crc[4];
	int rc = 0;

	if (src == PHUB_ENGINE_CKPT_SHADOW) {
		phub_engine_job_ckpt_status(job, false, &st);
		if (!st.complete) {
			set_err(err, errlen, "job %s: the snapshot of iteration %u is not complete"
					" (%u of %u segments)", job->name, st.iteration, st.copied,
					st.n_segments);
			return -EAGAIN;
		}
		iteration = st.iteration;
		model = job->ckpt.model;
		state[0] = job->ckpt.state[0];
		state[1] = job->ckpt.state[1];
	} else {
		struct phub_engine_job_info info;

		phub_engine_job_get_info(job, &info);
		/* iteration_min + 1 == 0: no iteration has finished, there is no model yet. */
		if (info.iteration_min != info.iteration_max || info.iteration_min + 1 == 0) {
			set_err(err, errlen, "job %s is in the middle of an iteration (segments "
					"between iterations %u and %u)", job->name,
					info.iteration_min + 1, info.iteration_max + 1);
			return -EAGAIN;
		}
		iteration = info.iteration_min;
		model = job->model;
		state[0] = job->state[0];
		state[1] = job->state[1];
	}

	o = malloc(sizeof(*o));
	if (o == NULL) {
		set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	o->fd = fd;
	o->crc = 0;
	o->used = 0;
	header_build(job, iteration, flags, header);
	rc = out_put(o, header, sizeof(header));
	for (uint32_t k = 0; rc == 0 && k < phub_layout_key_count(job->layout); k++) {
		struct phub_layout_key_info info;
		uint8_t key[8];

		phub_layout_key_get(job->layout, k, &info);
		put_u32(key, info.key_id);
		put_u32(key + 4, info.n_elems);
		rc = out_put(o, key, sizeof(key));
	}
	if (rc == 0)
		rc = out_f32(o, model, job->n_elems);
	for (unsigned int i = 0; rc == 0 && i < ckpt_states(job); i++)
		rc = out_f32(o, state[i], job->n_elems);
	if (rc == 0) {
		put_u32(crc, o->crc);
		rc = out_put(o, crc, sizeof(crc));
	}
	if (rc == 0)
		rc = out_flush(o);
	if (rc != 0)
		set_err(err, errlen, "job %s: cannot write the checkpoint of iteration %u: %s",
				job->name, iteration, strerror(-rc));
	free(o);
	return rc;
}

/* ---- reading ---- */

/* A reader that checksums everything it reads. */
struct ckpt_in {
	int fd;
	uint32_t crc;
	uint64_t offset;
};

/* Exactly n bytes, or -EBADMSG at the end of the file (torn), or read's error. */
static int
in_get(struct ckpt_in *in, void *p, size_t n)
{
	int rc = fd_all(in->fd, p, n, true, -EBADMSG);

	if (rc != 0)
		return rc;
	in->crc = phub_crc32c(in->crc, p, n);
	in->offset += n;
	return 0;
}

static uint64_t
file_bytes(uint32_t n_keys, uint64_t n_elems, uint32_t n_states)
{
	return PHUB_ENGINE_CKPT_HEADER_BYTES + 8ull * n_keys +
		n_elems * sizeof(float) * (1ull + n_states) + 4;
}

/* The header's fields, checked one by one: nothing later trusts a value not checked here. */
static int
header_parse(const uint8_t *h, struct phub_engine_ckpt_info *info, char *err, size_t errlen)
{
	uint32_t n_states;

	memset(info, 0, sizeof(*info));
	if (memcmp(h + H_MAGIC, PHUB_ENGINE_CKPT_MAGIC, 8) != 0) {
		set_err(err, errlen, "not a PHub checkpoint (bad magic)");
		return -EBADMSG;
	}
	if (get_u32(h + H_VERSION) != PHUB_ENGINE_CKPT_VERSION) {
		set_err(err, errlen, "checkpoint version %u, this PBox reads version %u",
				get_u32(h + H_VERSION), PHUB_ENGINE_CKPT_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (get_u32(h + H_HEADER_BYTES) != PHUB_ENGINE_CKPT_HEADER_BYTES) {
		set_err(err, errlen, "header of %u bytes, version %u has %u",
				get_u32(h + H_HEADER_BYTES), PHUB_ENGINE_CKPT_VERSION,
				PHUB_ENGINE_CKPT_HEADER_BYTES);
		return -EBADMSG;
	}
	/* The name: NUL-terminated within its field, not empty, NUL-padded. */
	if (h[H_NAME] == '\0' || memchr(h + H_NAME, '\0', PHUB_ENGINE_NAME_MAX) == NULL) {
		set_err(err, errlen, "the job name is empty or not terminated");
		return -EBADMSG;
	}
	memcpy(info->name, h + H_NAME, PHUB_ENGINE_NAME_MAX);
	info->nonce = get_u64(h + H_NONCE);
	info->n_elems = get_u64(h + H_N_ELEMS);
	info->iteration = get_u32(h + H_ITERATION);
	info->flags = get_u32(h + H_FLAGS);
	info->chunk_bytes = get_u32(h + H_CHUNK_BYTES);
	info->segment_elems = get_u32(h + H_SEGMENT_ELEMS);
	info->n_keys = get_u32(h + H_N_KEYS);
	info->world_size = get_u16(h + H_WORLD_SIZE);
	info->dtype = (enum phub_dtype)h[H_DTYPE];
	info->optimizer.type = (enum phub_opt_type)h[H_OPTIMIZER];
	info->optimizer.lr = get_f32(h + H_HYPER);
	info->optimizer.momentum = get_f32(h + H_HYPER + 4);
	info->optimizer.weight_decay = get_f32(h + H_HYPER + 8);
	info->optimizer.beta1 = get_f32(h + H_HYPER + 12);
	info->optimizer.beta2 = get_f32(h + H_HYPER + 16);
	info->optimizer.eps = get_f32(h + H_HYPER + 20);
	n_states = get_u32(h + H_N_STATES);
	if (phub_dtype_size(info->dtype) == 0 || info->world_size == 0 ||
	    info->world_size > PHUB_ENGINE_MAX_WORKERS || info->n_keys == 0 ||
	    info->n_keys > CKPT_MAX_KEYS || info->n_elems == 0 ||
	    info->n_elems > UINT64_MAX / 64 || info->segment_elems == 0 ||
	    info->chunk_bytes == 0 ||
	    (info->flags & ~(PHUB_ENGINE_CKPT_F_DETERMINISTIC | PHUB_ENGINE_CKPT_F_ELASTIC)) != 0 ||
	    get_u32(h + H_RESERVED) != 0) {
		set_err(err, errlen, "job %s: a header field is out of range", info->name);
		return -EBADMSG;
	}
	if (phub_optimizer_params_check(&info->optimizer) != 0 ||
	    n_states != phub_opt_state_count(info->optimizer.type)) {
		set_err(err, errlen, "job %s: the optimizer or its state count is invalid",
				info->name);
		return -EBADMSG;
	}
	info->file_bytes = file_bytes(info->n_keys, info->n_elems, n_states);
	return 0;
}

static int
peek(struct ckpt_in *in, struct phub_engine_ckpt_info *info, char *err, size_t errlen)
{
	uint8_t h[PHUB_ENGINE_CKPT_HEADER_BYTES];
	struct stat sb;
	int rc;

	if (fstat(in->fd, &sb) != 0) {
		rc = -errno;
		set_err(err, errlen, "fstat: %s", strerror(errno));
		return rc;
	}
	rc = in_get(in, h, sizeof(h));
	if (rc == -EBADMSG)
		set_err(err, errlen, "torn: %lld bytes, shorter than a header",
				(long long)sb.st_size);
	else if (rc != 0)
		set_err(err, errlen, "read: %s", strerror(-rc));
	if (rc == 0)
		rc = header_parse(h, info, err, errlen);
	if (rc == 0 && (uint64_t)sb.st_size != info->file_bytes) {
		set_err(err, errlen, "job %s iteration %u: %s: %lld bytes, the header says %llu",
				info->name, info->iteration,
				(uint64_t)sb.st_size < info->file_bytes ? "torn" : "trailing bytes",
				(long long)sb.st_size, (unsigned long long)info->file_bytes);
		rc = -EBADMSG;
	}
	return rc;
}

int
phub_engine_ckpt_peek(int fd, struct phub_engine_ckpt_info *info, char *err, size_t errlen)
{
	struct ckpt_in in = { .fd = fd };

	return peek(&in, info, err, errlen);
}

/* An fp32 array of the file straight into a job's buffer. */
static int
in_f32(struct ckpt_in *in, float *a, uint64_t n)
{
	int rc = in_get(in, a, n * sizeof(float));

	if (rc == 0)
		f32_array_le(a, n);
	return rc;
}

/* The keys of the file, as the layout takes them. */
static struct phub_layout_key *
keys_read(struct ckpt_in *in, const struct phub_engine_ckpt_info *info, int *rc, char *err,
		size_t errlen)
{
	struct phub_layout_key *keys = calloc(info->n_keys, sizeof(*keys));
	uint64_t total = 0;

	if (keys == NULL) {
		*rc = -ENOMEM;
		set_err(err, errlen, "out of memory for %u keys", info->n_keys);
		return NULL;
	}
	for (uint32_t k = 0; k < info->n_keys; k++) {
		uint8_t key[8];

		*rc = in_get(in, key, sizeof(key));
		if (*rc != 0) {
			set_err(err, errlen, "job %s: reading key %u: %s", info->name, k,
					strerror(-*rc));
			free(keys);
			return NULL;
		}
		keys[k].key_id = get_u32(key);
		keys[k].n_elems = get_u32(key + 4);
		total += keys[k].n_elems;
	}
	if (total != info->n_elems) {
		*rc = -EBADMSG;
		set_err(err, errlen, "job %s: the keys hold %llu elements, the header says %llu",
				info->name, (unsigned long long)total,
				(unsigned long long)info->n_elems);
		free(keys);
		return NULL;
	}
	return keys;
}

/* Model, optimizer state and the CRC that closes the file. */
static int
body_read(struct ckpt_in *in, struct phub_engine_job *job, const struct phub_engine_ckpt_info *info,
		char *err, size_t errlen)
{
	uint32_t crc_calc, crc_file;
	uint8_t tail[4], extra;
	ssize_t r;
	int rc;

	rc = in_f32(in, job->model, job->n_elems);
	for (unsigned int i = 0; rc == 0 && i < ckpt_states(job); i++)
		rc = in_f32(in, job->state[i], job->n_elems);
	crc_calc = in->crc;
	if (rc == 0)
		rc = in_get(in, tail, sizeof(tail));
	if (rc != 0) {
		set_err(err, errlen, "job %s iteration %u: %s", info->name, info->iteration,
				rc == -EBADMSG ? "torn: the file ends early" : strerror(-rc));
		return rc;
	}
	crc_file = get_u32(tail);
	if (crc_file != crc_calc) {
		set_err(err, errlen, "job %s iteration %u: corrupt: CRC32C 0x%08x, computed 0x%08x",
				info->name, info->iteration, crc_file, crc_calc);
		return -EBADMSG;
	}
	/* Grown since the header was checked: refuse rather than guess. */
	do {
		r = read(in->fd, &extra, 1);
	} while (r < 0 && errno == EINTR);
	if (r != 0) {
		set_err(err, errlen, "job %s iteration %u: bytes after the CRC", info->name,
				info->iteration);
		return -EBADMSG;
	}
	return 0;
}

struct phub_engine_job *
phub_engine_ckpt_restore(struct phub_engine *engine, int fd,
		const struct phub_engine_ckpt_restore_params *rp,
		struct phub_engine_ckpt_info *info, char *err, size_t errlen)
{
	struct phub_engine_job_params p;
	struct ckpt_in in = { .fd = fd };
	struct phub_layout_key *keys;
	struct phub_engine_job *job;
	int rc;

	if (lseek(fd, 0, SEEK_SET) != 0) {
		rc = errno;
		set_err(err, errlen, "lseek: %s", strerror(rc));
		errno = rc;
		return NULL;
	}
	rc = peek(&in, info, err, errlen);
	if (rc == 0 && rp->max_segment_elems != 0 && info->segment_elems > rp->max_segment_elems) {
		set_err(err, errlen, "job %s: segments of %u elements, the ports now carry at most "
				"%u (a smaller MTU?)", info->name, info->segment_elems,
				rp->max_segment_elems);
		rc = -E2BIG;
	}
	if (rc != 0) {
		errno = -rc;
		return NULL;
	}
	keys = keys_read(&in, info, &rc, err, errlen);
	if (keys == NULL) {
		errno = -rc;
		return NULL;
	}
	memset(&p, 0, sizeof(p));
	p.name = info->name;
	p.nonce = info->nonce;
	p.world_size = info->world_size;
	p.dtype = info->dtype;
	p.optimizer = info->optimizer;
	p.keys = keys;
	p.n_keys = info->n_keys;
	p.chunk_bytes = info->chunk_bytes;
	p.segment_elems = info->segment_elems;
	p.servers = rp->servers;
	p.n_servers = rp->n_servers;
	p.first_iteration = info->iteration + 1;
	p.memory_limit_bytes = rp->memory_limit_bytes;
	p.allocator = rp->allocator;
	p.checkpoint_shadow = rp->checkpoint_shadow;
	p.auth_psk = rp->auth_psk;
	p.auth_lanes = rp->auth_lanes;
	/* A job restored keeps its summation order: a deterministic run stays one. */
	p.deterministic = (info->flags & PHUB_ENGINE_CKPT_F_DETERMINISTIC) != 0;
	/* And its on_worker_dead; who was removed is not kept: every rank JOINs again. */
	p.elastic = (info->flags & PHUB_ENGINE_CKPT_F_ELASTIC) != 0;
	/* A ring job's segments start their ring at first_iteration, as its workers do. */
	p.ring = rp->ring;
	job = phub_engine_job_create(engine, &p);
	free(keys);
	if (job == NULL) {
		rc = errno;
		set_err(err, errlen, "job %s: cannot create the job: %s", info->name,
				strerror(rc));
		errno = rc;
		return NULL;
	}
	if (job->n_elems != info->n_elems) {
		set_err(err, errlen, "job %s: the layout holds %llu elements, the file %llu",
				info->name, (unsigned long long)job->n_elems,
				(unsigned long long)info->n_elems);
		rc = -EBADMSG;
	} else {
		rc = body_read(&in, job, info, err, errlen);
	}
	if (rc != 0) {
		/* Nothing has joined it and no data thread runs yet: it can go at once. */
		phub_engine_job_unpublish(engine, job);
		phub_engine_job_free(job);
		errno = -rc;
		return NULL;
	}
	/* MODEL answers of iteration come from the wire copy: the same bits as the broadcast. */
	if (job->model_wire != NULL)
		phub_kernels_get()->to_wire(job->model_wire, job->dtype, job->model, job->n_elems);
	return job;
}
