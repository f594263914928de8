/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libphub, the worker side of PHub: join a job on a PBox, then push gradients and pull models
 * key by key over kernel UDP sockets. The only header a training program needs.
 *
 * A session (struct phub) owns one UDP socket and one progress thread. The calls below may be
 * made from any thread; the progress thread alone touches the socket, sends segments in priority
 * order under a window of bytes in flight, retransmits, pulls lost models, and completes tickets.
 * See docs/client.md for a complete example.
 */

#ifndef PHUB_H
#define PHUB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Element types of gradients and models, as on the wire. This header must stand alone once
 * installed, so it repeats the tree's one definition (lib/wire/phub_types.h) under the same
 * guard; lib/client/client_priv.h checks at build time that the values agree.
 */
#ifndef PHUB_DTYPE_DEFINED
#define PHUB_DTYPE_DEFINED
enum phub_dtype {
	PHUB_DTYPE_FP32 = 0,
	PHUB_DTYPE_FP16 = 1, /* IEEE 754 binary16 */
	PHUB_DTYPE_BF16 = 2, /* bfloat16: the upper half of a binary32 */
};

#define PHUB_DTYPE_COUNT 3

/* Bytes per element of a dtype, or 0 for a value that is not a dtype. */
static inline size_t
phub_dtype_size(enum phub_dtype dtype)
{
	switch (dtype) {
	case PHUB_DTYPE_FP32:
		return 4;
	case PHUB_DTYPE_FP16:
	case PHUB_DTYPE_BF16:
		return 2;
	}
	return 0;
}
#endif /* PHUB_DTYPE_DEFINED */

/* The PBox control port when phub_connect_params.server_port is 0. */
#define PHUB_DEFAULT_PORT 47000

/* Pass as priority to use the key's default: its index in the layout (P3: first layer first). */
#define PHUB_PRIORITY_DEFAULT (-1)

/* phub_connect_params.flags: checksum (CRC32C) every datagram both ways. */
#define PHUB_CONNECT_F_CSUM 0x1u
/*
 * Ask for deterministic aggregation: the PBox adds the ranks' gradients in rank order whatever
 * order they arrive in, so that the model is bit-identical from run to run. Every rank of the
 * job must ask alike (the PBox refuses a JOIN that differs with LAYOUT_MISMATCH); a PBox
 * configured with "deterministic" gives it to every rank without the flag.
 */
#define PHUB_CONNECT_F_DETERMINISTIC 0x2u
/*
 * An elastic job (on_worker_dead "continue", for a job the PBox's config does not declare): a
 * rank that dies is removed at an iteration boundary and the job goes on with the others, the
 * mean over the ranks left; phub_world_size() and phub_rank_removed() say who is left. Every
 * rank must ask alike (LAYOUT_MISMATCH otherwise).
 */
#define PHUB_CONNECT_F_ELASTIC 0x4u
/*
 * One datagram per slot of sendmmsg/recvmmsg: no UDP segmentation offload (UDP_SEGMENT) for
 * bursts of PUSHes and no receive coalescing (UDP_GRO) of MODELs. Without the flag libphub uses
 * both where the kernel takes them and falls back by itself where it does not (docs/client.md).
 */
#define PHUB_CONNECT_F_NO_OFFLOAD 0x8u
/*
 * An authenticated session, for a job the PBox's config declares with "auth": "required": the
 * nonce never leaves this host (the JOIN proves it with a MAC and an X25519 key exchange), and
 * every datagram both ways carries a MAC and a sequence number, checked before anything reads
 * it (docs/protocol.md section 8). Replaces PHUB_CONNECT_F_CSUM, which it implies and more.
 */
#define PHUB_CONNECT_F_AUTH 0x10u
/*
 * One ACK per PUSH, as workers before ACKV had: without the flag (and without PHUB_ACKV=0 in the
 * environment) libphub asks the PBox to acknowledge each burst of PUSHes in one ACKV datagram
 * (docs/protocol.md section 3). For interop debugging and before/after measurements.
 */
#define PHUB_CONNECT_F_NO_ACKV 0x20u

/* One key (a layer's tensor) of the job. Every rank declares the same keys in the same order. */
struct phub_key {
	uint32_t key_id;	/* unique in the job */
	uint32_t n_elems;	/* >= 1 */
};

struct phub_stats;

/*
 * Called by phub_connect() on its own thread while it waits, about every 100 ms and whenever
 * JOIN or the initial round moves on, with the session's counters so far (join_acks,
 * initial_acks, initial_models): a progress display for a join that takes long.
 */
typedef void (*phub_connect_progress_fn)(void *arg, const struct phub_stats *stats);

/*
 * What phub_connect() needs. Zero-initialise it and set what matters: every numeric field that
 * is 0 takes the default given beside it.
 */
struct phub_connect_params {
	const char *server;		/* PBox control address, an IPv4 literal ("10.0.0.1") */
	uint16_t server_port;		/* control UDP port; 0: PHUB_DEFAULT_PORT */
	const char *bind_addr;		/* local IPv4 to send from; NULL: any */
	const char *job;		/* job name, printable ASCII, < 64 bytes */
	uint64_t nonce;			/* the job's secret, the same in every rank */
	uint16_t rank;			/* this worker, < world_size */
	uint16_t world_size;		/* workers in the job, >= 1 */
	int dtype;			/* enum phub_dtype of every gradient and model */
	const char *optimizer;		/* "none", "sgd", "momentum", "nesterov", "adam",
					 * "adamw"; NULL: "sgd" */
	float lr;			/* hyper-parameters of the PBox-side optimizer */
	float momentum;
	float weight_decay;
	float beta1;			/* 0: 0.9 (Adam) */
	float beta2;			/* 0: 0.999 (Adam) */
	float eps;			/* 0: 1e-8 (Adam) */
	const struct phub_key *keys;	/* the layout, n_keys entries */
	uint32_t n_keys;		/* >= 1 */
	const void *const *initial;	/* per key initial weights in dtype; NULL (or a NULL
					 * entry): zeros. Only rank 0's become the model. */
	uint32_t chunk_bytes;		/* chunk size in fp32 bytes; 0: the PBox's default */
	uint32_t mtu;			/* largest JOIN datagram; 0: 1500. The session
					 * learns the path's MTU itself at JOIN */
	uint32_t window_bytes;		/* payload bytes in flight (PUSH, and the MODEL a
					 * PULL asks for); 0: 256 KiB */
	uint32_t rto_min_ms;		/* retransmission timeout bounds; 0: 5 ms ... */
	uint32_t rto_max_ms;		/* ... 0: 1000 ms */
	uint32_t dead_ms;		/* PBox silent this long, work pending: failed; 0: 10 s */
	uint32_t connect_timeout_ms;	/* JOIN, then the initial round, fails after this long
					 * without progress (a JOIN_ACK datagram; an ACK or
					 * MODEL of iteration 0), however long it takes as a
					 * whole; 0: 10 s */
	unsigned int flags;		/* PHUB_CONNECT_F_* */
	phub_connect_progress_fn progress;	/* NULL: none */
	void *progress_arg;		/* passed to progress */
	/*
	 * PHUB_CONNECT_F_AUTH: the job's 256-bit key as 64 hex digits (jobs[].key); NULL: the
	 * environment's PHUB_KEY, and without it the PSK comes from the nonce. New fields go
	 * here, at the end: a caller that zeroes the struct gets their defaults.
	 */
	const char *key;
};

/* Counters of one session since phub_connect(), for monitoring and tests. */
struct phub_stats {
	uint64_t tx_datagrams;		/* datagrams sent, all opcodes */
	uint64_t tx_bytes;		/* their UDP payload bytes */
	uint64_t rx_datagrams;		/* datagrams received, valid or not */
	uint64_t rx_bytes;
	uint64_t pushes;		/* PUSH segments sent for the first time */
	uint64_t retransmits;		/* PUSH segments sent again after a timeout */
	uint64_t pulls;			/* PULL sent: a MODEL late, or asked again by a pull */
	uint64_t acks;			/* ACK taken */
	uint64_t models;		/* MODEL segments taken (duplicates not counted) */
	uint64_t replays;		/* ACK/MODEL the PBox marked as answered from kept state */
	uint64_t rx_dropped;		/* malformed, other session, stale or duplicate */
	uint64_t tx_errors;		/* datagrams the kernel refused (counted as lost) */
	uint64_t pings;			/* keep-alive PINGs sent */
	uint64_t ops_completed;		/* tickets completed successfully */
	uint32_t srtt_us;		/* smoothed round-trip time (RFC 6298) */
	uint32_t rttvar_us;		/* its variation */
	uint32_t rto_us;		/* current retransmission timeout */
	uint32_t window_bytes;		/* the window of payload bytes in flight */
	uint32_t inflight_bytes;	/* PUSH bytes not yet ACKed, MODEL bytes PULLed */
	/* Last, so that code built against the layout before them reads the rest right. */
	uint64_t reconnects;		/* sessions made again after a PBox restart */
	uint64_t rollbacks;		/* of them, those that failed tickets with -ESTALE */
	uint64_t tx_csum;		/* datagrams sent with a CRC32C (PHUB_CONNECT_F_CSUM) */
	uint64_t rx_csum;		/* datagrams received with a CRC32C, checked, matching */
	/* What phub_connect() waited for: progress, which its timeout measures. */
	uint64_t join_acks;		/* JOIN_ACK datagrams that added to the chunk map */
	uint64_t initial_acks;		/* initial-round (iteration 0) segments ACKed */
	uint64_t initial_models;	/* initial-round MODEL segments taken, of phub_info's
					 * n_segments */
	/*
	 * Of pulls, those for a MODEL that a later segment's MODEL made look lost but that came
	 * in its broadcast after all: ranks that push in another order, not loss (client.md).
	 */
	uint64_t pulls_early;
	/* Elastic jobs (PHUB_CONNECT_F_ELASTIC): the ranks left, and the changes taken (WORLD). */
	uint64_t world_size;
	uint64_t world_changes;
	/* UDP offloads (PHUB_CONNECT_F_NO_OFFLOAD turns them off). */
	uint64_t tx_gso_sends;		/* messages that carried several datagrams (UDP GSO) */
	uint64_t tx_gso_refused;	/* the kernel refused GSO: sent one by one from then on */
	uint64_t rx_gro_batches;	/* received buffers the kernel coalesced (UDP GRO) */
	uint64_t rx_gro_refused;	/* the kernel refused UDP_GRO on the socket */
	/* PHUB_CONNECT_F_AUTH: datagrams dropped for a MAC, sequence number or AUTH missing. */
	uint64_t rx_auth_failed;
};

/* What the PBox decided at JOIN. */
struct phub_info {
	uint32_t job_id;
	uint16_t rank;
	uint16_t world_size;
	int dtype;
	uint32_t chunk_bytes;		/* fp32 bytes per chunk */
	uint32_t segment_elems;		/* elements per datagram */
	uint32_t n_keys;
	uint32_t n_chunks;
	uint64_t n_segments;
	uint64_t n_elems;
	uint32_t n_endpoints;		/* PBox data ports serving this job */
	uint32_t first_iteration;	/* the iteration the job started (or resumed) at */
};

/*
 * Called once per ticket, on the progress thread, when it completes: status 0, or -errno as
 * phub_wait() would return. It must be short and must not call phub_wait(), phub_wait_all() or
 * phub_close(); it may submit new work (phub_push(), phub_pull(), phub_pushpull()).
 */
typedef void (*phub_done_fn)(void *arg, int ticket, int status);

struct phub;

/*
 * Join the job (PHub's CreateService/ConnectService/InitService): send JOIN (split over several
 * datagrams when the layout is large, retransmitted until answered), receive the session and the
 * chunk map, start the progress thread, then run the initial-model round: every rank pushes its
 * initial weights as iteration 0, rank 0's become the model. Returns when the model of
 * iteration 0 is in at this worker, i.e. once every rank has joined (a barrier); phub_pull()
 * then gives rank 0's weights. On failure returns NULL, sets errno and writes a one-line reason
 * into err (when err is not NULL): EINVAL bad parameters, ETIMEDOUT nothing moved for
 * connect_timeout_ms (the PBox did not answer the JOIN, or the initial round stalled: a rank
 * did not come), EACCES wrong nonce, EBUSY rank taken or job
 * full, ENOMEM, EPROTO any other refusal (the PBox's text is in err), ECONNRESET or EIO when
 * the PBox fell silent or sent an ERROR during the initial round.
 */
struct phub *phub_connect(const struct phub_connect_params *p, char *err, size_t errlen);

/*
 * Send the gradient of key_id for the key's next iteration and receive that iteration's model:
 * model_out gets n_elems elements in the job's dtype, then cb (if not NULL) runs and the ticket
 * completes. grad must stay valid and unchanged until then; grad and model_out may be the same
 * buffer (a segment's model only arrives once its gradient is no longer needed). model_out may
 * be NULL to wait for the model without keeping it. priority: lower is sent sooner
 * (PHUB_PRIORITY_DEFAULT = the key's index); a key submitted later with a lower value overtakes
 * segments still queued. Returns a ticket > 0, or -EINVAL (bad argument), -ENOENT (unknown
 * key), -ENOMEM, or the session's error once it has failed.
 *
 * The calls on one key run in submission order, each after the previous one completed; calls
 * on different keys run concurrently. Every key has its own iteration counter.
 */
int phub_pushpull(struct phub *h, uint32_t key_id, const void *grad, void *model_out,
		int priority, phub_done_fn cb, void *arg);

/* As phub_pushpull() without the model: completes when every segment is acknowledged. */
int phub_push(struct phub *h, uint32_t key_id, const void *grad, int priority, phub_done_fn cb,
		void *arg);

/*
 * The model of the key's latest pushed iteration (after phub_connect(): iteration 0, rank 0's
 * initial weights) into out, n_elems elements of the job's dtype. Segments whose broadcast
 * arrived before the pull was submitted are asked for again with PULL.
 */
int phub_pull(struct phub *h, uint32_t key_id, void *out, int priority, phub_done_fn cb,
		void *arg);

/*
 * Wait until a ticket completes: 0; -ETIMEDOUT when timeout_ms (< 0: forever) passed first (the
 * ticket is still pending); -EINVAL for a ticket never handed out; -ECONNRESET when the PBox
 * fell silent for dead_ms, -EIO when it sent an ERROR, -ECANCELED when the session was closed:
 * phub_last_error() says what happened. Once the session has failed every wait returns its error.
 * -ESTALE: the PBox restarted from a checkpoint older than what the application has seen, see
 * phub_resume(); every wait returns it until phub_resume() is called.
 */
int phub_wait(struct phub *h, int ticket, int timeout_ms);

/* Wait until no ticket is pending; the same results as phub_wait(). */
int phub_wait_all(struct phub *h, int timeout_ms);

/*
 * A PBox restart (docs/client.md, "When the PBox restarts"). A restarted PBox restores each job
 * from its checkpoint of some iteration K and answers the old session with ERROR unknown_job;
 * libphub JOINs again by itself (same job, nonce and rank, until connect_timeout_ms pass
 * without an answer) and learns from JOIN_ACK the iteration to resume at, r = K + 1
 * (phub_info().first_iteration). Then:
 *
 * - If the application has seen nothing of iteration r or later (no ticket of an iteration
 *   >= r completed), every operation in progress starts again from its beginning with the
 *   same buffers, which the application keeps valid anyway until its ticket completes. The
 *   restart costs time only. phub_stats().reconnects counts it.
 * - Otherwise the session rolls back: every pending ticket completes with -ESTALE (callbacks
 *   run with it), and from then on every submission, phub_wait() and phub_wait_all() return
 *   -ESTALE until the application calls phub_resume(). After it, each key's next push is
 *   iteration r and phub_pull() gives the model of iteration r - 1: the application goes
 *   back there (pull the model, recompute from it) and pushes r, r + 1, ... again.
 *   phub_stats().rollbacks counts it too. Tickets of before the rollback are forgotten:
 *   do not wait on them after phub_resume().
 *
 * A PBox that comes back without the job (no checkpoint) ends the session with -EIO; one that
 * stays silent for dead_ms ends it with -ECONNRESET.
 *
 * phub_resume(): leave the rolled-back state; *iteration (if not NULL) gets r, the iteration
 * the next push of every key is. 0; -EINVAL when no rollback is pending; the session's error
 * once it has failed.
 */
int phub_resume(struct phub *h, uint32_t *iteration);

/*
 * Step hyper-parameters of one key (docs/protocol.md, "Step hyper-parameters"): a learning-rate
 * schedule, parameter groups with their own lr and weight decay.
 */
struct phub_key_hyper {
	float lr;
	float weight_decay;
};

/*
 * Set the learning rate and weight decay the PBox's optimizer uses for key_id from the next
 * push submitted on it (phub_push(), phub_pushpull()) on: every PUSH of those iterations carries
 * them (flag HYPER and an 8-byte header extension). hyper NULL goes back to the job's values
 * (those of phub_connect_params). Every rank must set the same values for the same iterations:
 * the PBox drops PUSHes that differ from the iteration's first (drop reason hyper_mismatch), so
 * a rank that disagrees stalls the key until it sends what the others sent. Momentum, betas
 * and eps stay the job's. Returns 0; -EINVAL (h NULL, a value not finite or < 0), -ENOENT
 * (unknown key), -EMSGSIZE (a full segment with the 64-byte header exceeds the path MTU the
 * session learnt at connect: only against a PBox that cut its segments without room for it), or
 * the session's error once it has failed.
 */
int phub_set_key_hyper(struct phub *h, uint32_t key_id, const struct phub_key_hyper *hyper);

/* Why the session failed ("" while it has not). The string lives as long as the session. */
const char *phub_last_error(const struct phub *h);

/* A snapshot of the counters; 0 or -EINVAL. */
int phub_stats(struct phub *h, struct phub_stats *stats);

/* The job's geometry as the PBox set it; 0 or -EINVAL. */
int phub_info(struct phub *h, struct phub_info *info);

/*
 * The ranks of the job still in it: world_size, less the ranks an elastic job removed (a WORLD
 * from the PBox), 0 for h NULL. Changes come in on the progress thread; a pushpull completed
 * after a change was made with it.
 */
uint16_t phub_world_size(struct phub *h);

/*
 * Whether rank is out of the job now (1, with *iteration the first iteration none of its
 * gradients reached: its sums divide by the ranks left), or in (0); -EINVAL for a bad rank.
 * iteration may be NULL. A removed rank may come back (phub_world_change()).
 */
int phub_rank_removed(struct phub *h, uint16_t rank, uint32_t *iteration);

/* One change of an elastic job's membership, as the PBox announced it (WORLD). */
struct phub_world_change {
	uint16_t rank;		/* the rank removed or back */
	uint8_t joined;		/* 1: back in from iteration on; 0: out from iteration on */
	uint32_t iteration;
};

/*
 * Change i (from 0, in the order they happened) of the job's membership: 0, -ENOENT past the
 * last one taken (phub_stats().world_changes of them), -EINVAL. A rank's gradients count in
 * iteration t when its last change at or before t (none: every rank is in from the start) has
 * it in: the history a reference of the job's model follows.
 */
int phub_world_change(struct phub *h, uint32_t i, struct phub_world_change *change);

/*
 * Leave the job and free the session: tickets still pending complete with -ECANCELED (their
 * callbacks run), then LEAVE is sent and its answer awaited for a bounded time (best effort).
 * h may be NULL.
 */
void phub_close(struct phub *h);

#ifdef __cplusplus
}
#endif

#endif /* PHUB_H */
