/* SPDX-License-Identifier: BSD-3-Clause */
/* One emulated worker: join, exchange the whole model every iteration with zero compute, verify. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "phub.h"
#include "bench_priv.h"

/* How long one phub_wait_all() may block before the worker reports progress again. */
#define WAIT_SLICE_MS BENCH_PROGRESS_INTERVAL_MS

/* Elements verified between two looks at the clock. */
#define VERIFY_SLICE (1u << 20)

struct worker {
	const struct bench_config *cfg;
	uint16_t rank;
	int fd;
	bool parent_gone;
	double last_progress;
	struct bench_progress prog;
	struct phub_bench_worker_result res;
	/* An elastic job's membership changes, as libphub took them (phub_world_change()). */
	struct phub_bench_change *changes;
	uint32_t n_changes;
};

double
bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Write a whole record; a parent that is gone (EPIPE) makes the worker stop at the next check. */
static void
send_msg(struct worker *w, uint32_t type, const void *payload, size_t len)
{
	struct bench_msg_hdr hdr = { .type = type, .len = (uint32_t)len };
	const char *parts[2] = { (const char *)&hdr, payload };
	size_t lens[2] = { sizeof(hdr), len };
	unsigned int i;

	for (i = 0; i < 2 && !w->parent_gone; i++) {
		size_t off = 0;

		while (off < lens[i]) {
			ssize_t n = write(w->fd, parts[i] + off, lens[i] - off);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				w->parent_gone = true;
				break;
			}
			off += (size_t)n;
		}
	}
}

static void
progress(struct worker *w, bool force)
{
	double now = bench_now();

	if (!force && (now - w->last_progress) * 1000 < BENCH_PROGRESS_INTERVAL_MS)
		return;
	w->last_progress = now;
	send_msg(w, BENCH_MSG_PROGRESS, &w->prog, sizeof(w->prog));
}

static void __attribute__((format(printf, 3, 4)))
fail(struct worker *w, int status, const char *fmt, ...)
{
	int n = snprintf(w->res.error, sizeof(w->res.error), "rank %u: ", w->rank);
	va_list ap;

	w->res.status = status < 0 ? status : -EIO;
	va_start(ap, fmt);
	vsnprintf(w->res.error + n, sizeof(w->res.error) - (size_t)n, fmt, ap);
	va_end(ap);
}

/*
 * Move this process into the worker's network namespace of the virtual rack, which numbers its
 * workers from 1: rank i enters <prefix><i + 1>; across racks, the rank's index in its rack
 * counts, under its rack's prefix (phub_bench_netns_name()).
 */
static int
enter_netns(struct worker *w)
{
	char name[PATH_MAX - 16];
	char path[PATH_MAX];
	int fd, e;

	e = phub_bench_netns_name(w->cfg->netns_prefix, w->cfg->netns_prefixes, w->cfg->racks,
		w->rank, name, sizeof(name));
	if (e != 0) {
		fail(w, e, "no network namespace for rank %u: %s", w->rank, strerror(-e));
		return e;
	}
	snprintf(path, sizeof(path), "/run/netns/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		fail(w, -e, "cannot open network namespace %s: %s", path, strerror(e));
		return -e;
	}
	if (setns(fd, CLONE_NEWNET) != 0) {
		e = errno;
		close(fd);
		fail(w, -e, "cannot enter network namespace %s: %s%s", path, strerror(e),
			e == EPERM ? " (needs CAP_SYS_ADMIN)" : "");
		return -e;
	}
	close(fd);
	return 0;
}

/* Wait for every ticket, reporting progress meanwhile; 0 or -errno as phub_wait_all(). */
static int
wait_all(struct worker *w, struct phub *h)
{
	struct phub_stats st;
	int rc;

	for (;;) {
		rc = phub_wait_all(h, WAIT_SLICE_MS);
		if (rc != -ETIMEDOUT)
			return rc;
		if (phub_stats(h, &st) == 0) {
			w->prog.retransmits = st.retransmits;
			w->prog.pulls = st.pulls;
		}
		progress(w, false);
		if (w->parent_gone)
			return -ECANCELED;
	}
}

/*
 * Compare model with the reference after `iterations` updates, key by key in slices (so that
 * the parent hears from a worker checking VGG's fc6), adding to vr; false if cut short.
 */
static bool
verify_against(struct worker *w, const char *model, uint32_t iterations,
		struct phub_bench_verify_result *vr)
{
	const struct bench_config *cfg = w->cfg;
	const struct phub_bench_layout *l = cfg->layout;
	struct phub_bench_verify_params vp = {
		.pattern = cfg->pattern,
		.optimizer = cfg->optimizer,
		.world_size = cfg->world_size,
		.iterations = iterations,
		.order_dependent = phub_bench_order_dependent(cfg->random_gradients,
			cfg->deterministic, cfg->racks != NULL ? cfg->racks->n : 0),
		.changes = w->changes,
		.n_changes = w->n_changes,
	};
	size_t es = phub_dtype_size(cfg->dtype);
	struct phub_bench_verifier *v;
	size_t off = 0;
	uint32_t k;

	v = phub_bench_verifier_create(&vp);
	if (v == NULL) {
		fail(w, -errno, "cannot verify: %s", strerror(errno));
		return false;
	}
	for (k = 0; k < l->n_keys && !w->parent_gone; k++) {
		uint64_t first, n;

		for (first = 0; first < l->n_elems[k]; first += n) {
			n = l->n_elems[k] - first < VERIFY_SLICE ? l->n_elems[k] - first :
				VERIFY_SLICE;
			phub_bench_verify_range(v, k, first, n, model + off + first * es, vr);
			w->prog.elems_verified += n;
			progress(w, false);
		}
		off += (size_t)l->n_elems[k] * es;
	}
	phub_bench_verifier_free(v);
	return k == l->n_keys;
}

/*
 * The PBox restarted from a checkpoint older than this worker's iteration (libphub said
 * -ESTALE): go back to where the PBox is. Pull the model of the iteration before the resume
 * point, check it against the reference of that iteration (a model the PBox kept across the
 * restart must be the one an uninterrupted run had), and set *it so that the loop pushes the
 * resume point next. 0 or -errno (the worker failed, w->res says why).
 */
static int
go_back(struct worker *w, struct phub *h, char *model, uint32_t *it)
{
	const struct bench_config *cfg = w->cfg;
	const struct phub_bench_layout *l = cfg->layout;
	size_t es = phub_dtype_size(cfg->dtype);
	struct phub_bench_verify_result vr;
	uint32_t resume, k;
	size_t off;
	int rc;

	do {
		rc = phub_resume(h, &resume);
		if (rc != 0) {
			fail(w, rc, "iteration %u: cannot resume after the PBox restart: %s", *it,
				strerror(-rc));
			return rc;
		}
		if (resume == 0 || resume - 1 > cfg->iterations) {
			fail(w, -ERANGE, "the PBox resumed the job at iteration %u, outside this"
				" run's 1 .. %u", resume, cfg->iterations);
			return -ERANGE;
		}
		for (k = 0, off = 0, rc = 0; k < l->n_keys && rc >= 0;
		     off += (size_t)l->n_elems[k] * es, k++)
			rc = phub_pull(h, k, model + off, PHUB_PRIORITY_DEFAULT, NULL, NULL);
		if (rc >= 0)
			rc = wait_all(w, h);
		/* Restarted again meanwhile: go back again. */
	} while (rc == -ESTALE);
	if (rc < 0) {
		fail(w, rc, "pulling the model of iteration %u after the PBox restart: %s%s%s",
			resume - 1, strerror(-rc), *phub_last_error(h) != '\0' ? ": " : "",
			phub_last_error(h));
		return rc;
	}
	memset(&vr, 0, sizeof(vr));
	if (!verify_against(w, model, resume - 1, &vr))
		return w->res.status != 0 ? w->res.status : -ECANCELED;
	if (vr.mismatches > 0) {
		fail(w, -EIO, "after the PBox restart, its model of iteration %u differs from the"
			" reference in %" PRIu64 " of %" PRIu64 " elements (key %u element %" PRIu64
			": %.9g, expected %.9g)", resume - 1, vr.mismatches, vr.checked,
			vr.first_bad_key, vr.first_bad_elem, (double)vr.first_bad_got,
			(double)vr.first_bad_want);
		return -EIO;
	}
	w->res.resumed_at = resume;
	*it = resume - 1;
	w->prog.iteration = resume - 1;
	progress(w, true);
	return 0;
}

/* User + system CPU seconds of this process, every thread (libphub's progress thread too). */
static double
cpu_now(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		(double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/*
 * The timed loop: iterations first .. K, each a pushpull of every key then a wait for all.
 * first is 1 for a new job; a worker restarted into a running job starts where the PBox says
 * the job is, and its last exchange still brings the whole model of iteration K.
 */
static int
exchange(struct worker *w, struct phub *h, uint32_t first, char *model, double *times)
{
	const struct bench_config *cfg = w->cfg;
	const struct phub_bench_layout *l = cfg->layout;
	size_t es = phub_dtype_size(cfg->dtype);
	struct phub_stats st0 = { 0 }, st;
	double t_timed = bench_now(), cpu0 = cpu_now();
	uint32_t it, k;
	double t0;
	size_t off;
	int rc;

	w->prog.phase = BENCH_PHASE_RUNNING;
	for (it = first; it <= cfg->iterations; it++) {
		if (it == first + cfg->warmup) {
			/* Warm-up over: page faults, ARP and the first RTT estimates are paid. */
			phub_stats(h, &st0);
			t_timed = bench_now();
			cpu0 = cpu_now();
			w->res.timed_from = t_timed;
		}
		t0 = bench_now();
		for (k = 0, off = 0; k < l->n_keys; off += (size_t)l->n_elems[k] * es, k++) {
			rc = phub_pushpull(h, k, phub_bench_grad(cfg->pattern, w->rank, it, k),
				model + off, PHUB_PRIORITY_DEFAULT, NULL, NULL);
			/* The PBox restarted: the wait below says so too. */
			if (rc == -ESTALE)
				break;
			if (rc < 0) {
				fail(w, rc, "iteration %u: pushpull of key %u: %s%s%s", it, k,
					strerror(-rc), *phub_last_error(h) != '\0' ? ": " : "",
					phub_last_error(h));
				return rc;
			}
		}
		rc = wait_all(w, h);
		if (rc == -ESTALE) {
			rc = go_back(w, h, model, &it);
			if (rc != 0)
				return rc;
			continue;
		}
		if (rc < 0) {
			fail(w, rc, "iteration %u: %s%s%s", it, strerror(-rc),
				*phub_last_error(h) != '\0' ? ": " : "", phub_last_error(h));
			return rc;
		}
		/* Iterations run again after a restart are timed again, within the array. */
		if (it > cfg->warmup && w->res.timed < cfg->iterations) {
			times[w->res.timed++] = (bench_now() - t0) * 1e3;
			w->res.timed_s = bench_now() - t_timed;
			w->res.cpu_s = cpu_now() - cpu0;
			w->res.timed_to = bench_now();
		}
		w->res.iterations = it;
		w->prog.iteration = it;
		w->prog.timed = w->res.timed;
		w->prog.timed_s = w->res.timed_s;
		progress(w, false);
		if (it == cfg->die_at) {
			/* A crash at an iteration boundary: no LEAVE, no result, nothing more. */
			fprintf(stderr, "phub-bench: rank %u dies after iteration %u (--die-at)\n",
				w->rank, it);
			raise(SIGKILL);
		}
		if (it == cfg->pause_at && cfg->pause_ms > 0) {
			struct timespec ts = {
				.tv_sec = cfg->pause_ms / 1000,
				.tv_nsec = (long)(cfg->pause_ms % 1000) * 1000000,
			};

			/* Idle at a boundary: the session's keep-alive PINGs go on meanwhile. */
			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		}
	}
	if (phub_stats(h, &st) == 0 && w->res.timed > 0)
		w->res.wire_bytes = (double)(st.tx_bytes - st0.tx_bytes) +
			(double)(st.rx_bytes - st0.rx_bytes);
	return 0;
}

static void
stats_take(struct worker *w, struct phub *h)
{
	struct phub_stats st;

	if (phub_stats(h, &st) != 0)
		return;
	w->res.retransmits = st.retransmits;
	w->res.pulls = st.pulls;
	w->res.replays = st.replays;
	w->res.tx_errors = st.tx_errors;
	w->res.tx_datagrams = st.tx_datagrams;
	w->res.tx_gso_sends = st.tx_gso_sends;
	w->res.tx_gso_refused = st.tx_gso_refused;
	w->res.rx_datagrams = st.rx_datagrams;
	w->res.rx_gro_batches = st.rx_gro_batches;
	w->res.reconnects = (uint32_t)st.reconnects;
	w->res.rollbacks = (uint32_t)st.rollbacks;
}

/*
 * Test hook: with PHUB_BENCH_FAULT=ulp in its environment, rank 0 moves element 0 of the middle
 * key by one ulp before the check, so that the tests see the verdict on a wrong model end to
 * end (a mismatch for SGD, within tolerance for the other optimizers).
 */
static void
inject_fault(struct worker *w, char *model)
{
	const struct phub_bench_layout *l = w->cfg->layout;
	size_t es = phub_dtype_size(w->cfg->dtype);
	const char *fault = getenv("PHUB_BENCH_FAULT");
	size_t off = 0;
	uint32_t k;

	if (fault == NULL || strcmp(fault, "ulp") != 0 || w->rank != 0)
		return;
	for (k = 0; k < l->n_keys / 2; k++)
		off += (size_t)l->n_elems[k] * es;
	/* The next representable magnitude: the encoding's integer plus one (little endian). */
	if (es == 4) {
		uint32_t x;

		memcpy(&x, model + off, 4);
		x++;
		memcpy(model + off, &x, 4);
	} else {
		uint16_t x;

		memcpy(&x, model + off, 2);
		x++;
		memcpy(model + off, &x, 2);
	}
}

/*
 * Wait for the parent's word that every rank's timed loop ended (BENCH_PHASE_TIMED). A parent
 * that is gone says nothing more: verify anyway, the result goes nowhere.
 */
static void
await_verify(struct worker *w)
{
	w->prog.phase = BENCH_PHASE_TIMED;
	progress(w, true);
	while (!w->parent_gone) {
		char go;

		if (read(w->fd, &go, 1) < 0 && errno == EINTR)
			continue;
		return;
	}
}

static void
verify(struct worker *w, const char *model)
{
	const struct phub_bench_layout *l = w->cfg->layout;
	struct phub_bench_verify_result vr = { 0 };
	double t0 = bench_now();
	bool whole;

	w->prog.phase = BENCH_PHASE_VERIFYING;
	progress(w, true);
	w->res.verify_from = t0;
	whole = verify_against(w, model, w->cfg->iterations, &vr);
	w->res.verify_s = bench_now() - t0;
	w->res.max_abs_error = vr.max_abs_error;
	w->res.mismatches = vr.mismatches;
	w->res.verified = whole && vr.mismatches == 0;
	w->res.bitwise = w->res.verified && vr.differing == 0;
	if (vr.mismatches > 0)
		snprintf(w->res.error, sizeof(w->res.error), "rank %u: model differs from the"
			" reference in %" PRIu64 " of %" PRIu64 " elements; first: key %u%s%s%s"
			" element %" PRIu64 ": %.9g, expected %.9g", w->rank, vr.mismatches,
			vr.checked, vr.first_bad_key, l->names != NULL ? " (" : "",
			l->names != NULL ? l->names[vr.first_bad_key] : "",
			l->names != NULL ? ")" : "", vr.first_bad_elem,
			(double)vr.first_bad_got, (double)vr.first_bad_want);
}

/* phub_connect()'s progress callback: the parent shows it and counts it as progress. */
static void
connect_progress(void *arg, const struct phub_stats *st)
{
	struct worker *w = arg;

	w->prog.join_acks = st->join_acks;
	w->prog.initial_acks = st->initial_acks;
	w->prog.initial_models = st->initial_models;
	progress(w, false);
}

/* The membership changes libphub took (an elastic job), for the reference. 0 or -ENOMEM. */
static int
history_take(struct worker *w, struct phub *h)
{
	struct phub_stats st;
	struct phub_world_change c;

	if (phub_stats(h, &st) != 0 || st.world_changes == 0)
		return 0;
	w->changes = calloc(st.world_changes, sizeof(*w->changes));
	if (w->changes == NULL) {
		fail(w, -ENOMEM, "out of memory for %" PRIu64 " membership changes",
			st.world_changes);
		return -ENOMEM;
	}
	while (w->n_changes < st.world_changes &&
	       phub_world_change(h, w->n_changes, &c) == 0) {
		w->changes[w->n_changes++] = (struct phub_bench_change){
			.rank = c.rank, .joined = c.joined != 0, .iteration = c.iteration,
		};
	}
	return 0;
}

int
bench_worker_run(const struct bench_config *cfg, uint16_t rank, int fd)
{
	const struct phub_bench_layout *l = cfg->layout;
	struct worker w = { .cfg = cfg, .rank = rank, .fd = fd };
	const char *server = cfg->server;
	struct phub_connect_params p;
	struct phub_info info;
	uint32_t first = 1;
	const void **initial = NULL;
	struct phub_key *keys = NULL;
	struct phub *h = NULL;
	double *times = NULL;
	char *model = NULL;
	char err[256] = "";
	double t0;
	uint32_t k;

	w.res.rank = rank;
	w.prog.phase = BENCH_PHASE_CONNECTING;
	progress(&w, true);
	if ((cfg->netns_prefix != NULL || cfg->netns_prefixes != NULL) && enter_netns(&w) != 0)
		goto out;
	if (cfg->racks != NULL && cfg->racks->n > 0) {
		/* Its own rack's PBox, with its global rank and the whole world's size. */
		int r = phub_bench_rack_of(cfg->racks, rank, NULL);

		if (r < 0) {
			fail(&w, -ERANGE, "rank %u is in no rack of --racks", rank);
			goto out;
		}
		server = cfg->racks->rack[r].server;
	}
	keys = calloc(l->n_keys, sizeof(*keys));
	initial = calloc(l->n_keys, sizeof(*initial));
	times = calloc(cfg->iterations, sizeof(*times));
	model = malloc(l->total_elems * phub_dtype_size(cfg->dtype));
	if (keys == NULL || initial == NULL || times == NULL || model == NULL) {
		fail(&w, -ENOMEM, "out of memory for a %" PRIu64 "-element model", l->total_elems);
		goto out;
	}
	for (k = 0; k < l->n_keys; k++) {
		keys[k] = (struct phub_key){ .key_id = k, .n_elems = l->n_elems[k] };
		/* The same on every rank; only rank 0's become the model. */
		initial[k] = phub_bench_initial(cfg->pattern, k);
	}

	memset(&p, 0, sizeof(p));
	p.server = server;
	p.server_port = cfg->port;
	p.bind_addr = cfg->bind_addr;
	p.job = cfg->job;
	p.nonce = cfg->nonce;
	p.rank = rank;
	p.world_size = cfg->world_size;
	p.dtype = cfg->dtype;
	p.optimizer = phub_opt_type_name(cfg->optimizer.type);
	p.lr = cfg->optimizer.lr;
	p.momentum = cfg->optimizer.momentum;
	p.weight_decay = cfg->optimizer.weight_decay;
	p.beta1 = cfg->optimizer.beta1;
	p.beta2 = cfg->optimizer.beta2;
	p.eps = cfg->optimizer.eps;
	p.keys = keys;
	p.n_keys = l->n_keys;
	p.initial = initial;
	p.chunk_bytes = cfg->chunk_bytes;
	p.mtu = cfg->mtu;
	p.window_bytes = cfg->window_bytes;
	p.connect_timeout_ms = cfg->connect_timeout_ms;
	p.dead_ms = cfg->dead_ms;
	p.flags = cfg->connect_flags;
	p.progress = connect_progress;
	p.progress_arg = &w;
	t0 = bench_now();
	h = phub_connect(&p, err, sizeof(err));
	w.res.connect_s = bench_now() - t0;
	if (h == NULL) {
		int e = errno;

		/* libphub's reason names the PBox, the job and the rank already. */
		if (err[0] != '\0')
			fail(&w, -e, "cannot join (%s): %s", strerror(e), err);
		else
			fail(&w, -e, "cannot join job '%s' at %s:%u: %s", cfg->job, server,
				cfg->port, strerror(e));
		goto out;
	}
	/* A rank that joins a job already past its start (a restarted worker) resumes there. */
	if (phub_info(h, &info) == 0 && info.first_iteration > 1) {
		first = info.first_iteration;
		fprintf(stderr, "phub-bench: rank %u resumes job '%s' at iteration %u\n", rank,
			cfg->job, first);
		if (first > cfg->iterations) {
			fail(&w, -EALREADY, "job '%s' is at iteration %u, past --iterations %u",
				cfg->job, first, cfg->iterations);
			goto out;
		}
	}
	/* Fault the model's pages in now rather than in the first exchange. */
	memset(model, 0, l->total_elems * phub_dtype_size(cfg->dtype));
	if (exchange(&w, h, first, model, times) != 0)
		goto out;
	stats_take(&w, h);
	/* An elastic job's membership history, for the reference (phub_world_change()). */
	w.res.world_end = phub_world_size(h);
	for (uint16_t r = 0; r < cfg->world_size; r++)
		w.res.removed += phub_rank_removed(h, r, NULL) == 1;
	if (history_take(&w, h) != 0)
		goto out;
	/* Every rank has the final model once its last wait returned: leave, then check. */
	phub_close(h);
	h = NULL;
	await_verify(&w);
	inject_fault(&w, model);
	verify(&w, model);
	/* The model's bits, for runs that must repeat them (deterministic across racks). */
	w.res.digest = phub_bench_digest(model, l->total_elems * phub_dtype_size(cfg->dtype),
		PHUB_BENCH_DIGEST_INIT);
out:
	if (h != NULL) {
		stats_take(&w, h);
		phub_close(h);
	}
	w.prog.phase = BENCH_PHASE_DONE;
	if (times != NULL && w.res.timed > 0)
		send_msg(&w, BENCH_MSG_TIMES, times, w.res.timed * sizeof(*times));
	send_msg(&w, BENCH_MSG_RESULT, &w.res, sizeof(w.res));
	free(model);
	free(times);
	free(initial);
	free(keys);
	free(w.changes);
	return w.res.status == 0 && w.res.verified ? EXIT_SUCCESS : EXIT_FAILURE;
}
