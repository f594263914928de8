/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * When the appliance checkpoints: the periodic snapshots the data lcores collect, written by a
 * control thread, the last snapshot on SIGTERM, the restore of every job at start, and the
 * removal of a job's files when it ends. The files themselves (names, atomic write, restore)
 * are lib/control's (control_ckpt.c), shared with the soft PBox. Format:
 * docs/history/reliability-log.md, "The files".
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_lcore.h>

#include "control/phub_control.h"
#include "pbox.h"

/* A collection that some segment raced past is looked for this often (a pass over the slots). */
#define CKPT_SCAN_MS 100
/* On SIGTERM, how long the data lcores may run on to reach an iteration boundary. */
#define CKPT_DRAIN_MS 2000
/* A job whose segments completed nothing for this long is idle: its live state is final. */
#define CKPT_QUIET_MS 50
/* While draining, a job's slots are read this often (a pass over all of them each time). */
#define CKPT_DRAIN_SCAN_MS 5
/* What the appliance keeps per job, by the job's engine slot (phub_engine_job_slot()). */
struct ckpt_job {
	struct phub_engine_job *job;
	bool have_file;
	uint32_t written;		/* iteration of the newest file, when have_file */
	uint64_t next_scan_tsc;
	/* SIGTERM drain */
	uint64_t quiet_count;		/* segments_completed when last seen changing */
	uint64_t quiet_tsc;
	bool quiet;			/* idle at the last look: its live state is final */
};

/* One write handed to the writer thread, and its outcome. */
struct ckpt_write {
	struct phub_control_ckpt_write w;
	double ms;
};

static struct {
	bool enabled;
	uint32_t interval;
	struct phub_control_ckpt_dir dir;
	struct ckpt_job jobs[PHUB_ENGINE_MAX_JOBS];
	/* The writer thread; the request is under lock. */
	pthread_t writer;
	bool writer_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool busy;			/* req handed over, not yet collected by the main lcore */
	bool finished;			/* req written (or failed): rc and figures are set */
	bool stop;
	struct ckpt_write req;
	/* SIGTERM */
	bool draining;
	uint64_t drain_start_tsc;
} ck = { .dir = { .fd = -1 } };

static uint64_t
ms_tsc(uint64_t ms)
{
	return rte_get_tsc_hz() / 1000 * ms;
}

static struct ckpt_job *
ckpt_job_of(const struct phub_engine_job *job)
{
	return &ck.jobs[phub_engine_job_slot(job)];
}

/* A ring job's files reach back to what its neighbours may go back to (lib/control knows). */
static bool
keep_from(const struct pbox *pb, const struct phub_engine_job *job, uint32_t *iteration)
{
	return pb->control != NULL && phub_control_ckpt_keep_from(pb->control, job, iteration);
}

/* ---- writing ---- */

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Write one checkpoint (lib/control: atomic, the newest two kept), timed. */
static void
write_one(struct ckpt_write *w)
{
	double t0 = now_ms();

	phub_control_ckpt_write(&ck.dir, &w->w);
	w->ms = now_ms() - t0;
}

static void
write_done(const struct ckpt_write *cw)
{
	const struct phub_control_ckpt_write *w = &cw->w;
	struct ckpt_job *cj = ckpt_job_of(w->job);
	struct phub_engine_job_info info;

	phub_engine_job_get_info(w->job, &info);
	if (w->rc != 0) {
		PBOX_LOG(ERR, "job %s: checkpoint of iteration %u not written: %s; the previous "
				"one stays", info.name, w->iteration, w->err);
		return;
	}
	cj->have_file = true;
	cj->written = w->iteration;
	PBOX_LOG(INFO, "job %s: checkpoint of iteration %u written (%s): %s, %" PRIu64 " KB in "
			"%.1f ms", info.name, w->iteration,
			w->src == PHUB_ENGINE_CKPT_SHADOW ? "snapshot" : "live state", w->file,
			w->bytes >> 10, cw->ms);
}

static void *
writer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&ck.lock);
	for (;;) {
		while (!ck.stop && !(ck.busy && !ck.finished))
			pthread_cond_wait(&ck.cond, &ck.lock);
		if (ck.stop)
			break;
		pthread_mutex_unlock(&ck.lock);
		/* The shadow is complete: no data lcore writes it until the job is armed again. */
		write_one(&ck.req);
		pthread_mutex_lock(&ck.lock);
		ck.finished = true;
		pthread_cond_broadcast(&ck.cond);
	}
	pthread_mutex_unlock(&ck.lock);
	return NULL;
}

/* The first iteration, a multiple of the interval, that no segment of the job has reached. */
static uint32_t
next_target(const struct phub_engine_job *job)
{
	struct phub_engine_job_info info;
	uint64_t after;

	phub_engine_job_get_info(job, &info);
	/*
	 * iteration_max + 1 is being aggregated somewhere and none has finished it; a segment
	 * that does so before the collection is armed makes it missed, and it is aimed again.
	 */
	after = (uint64_t)(uint32_t)(info.iteration_max + 1);
	return (uint32_t)((after + ck.interval - 1) / ck.interval * ck.interval);
}

static void
arm(struct ckpt_job *cj, uint32_t iteration)
{
	phub_engine_job_ckpt_collect(cj->job, iteration);
	cj->next_scan_tsc = rte_rdtsc() + ms_tsc(CKPT_SCAN_MS);
}

/* The writer's result is in: log it and let the data lcores collect the next snapshot. */
static void
collect_writer(void)
{
	struct ckpt_write w;

	pthread_mutex_lock(&ck.lock);
	if (!ck.busy || !ck.finished) {
		pthread_mutex_unlock(&ck.lock);
		return;
	}
	w = ck.req;
	ck.busy = false;
	ck.finished = false;
	pthread_mutex_unlock(&ck.lock);
	write_done(&w);
	if (!ck.draining && ck.interval != 0)
		arm(ckpt_job_of(w.w.job), next_target(w.w.job));
	else
		phub_engine_job_ckpt_cancel(w.w.job);
}

/* Wait until the writer is not busy with job (any job when NULL), and collect its result. */
static void
writer_wait(const struct phub_engine_job *job)
{
	pthread_mutex_lock(&ck.lock);
	while (ck.busy && !ck.finished && (job == NULL || ck.req.w.job == job))
		pthread_cond_wait(&ck.cond, &ck.lock);
	pthread_mutex_unlock(&ck.lock);
	collect_writer();
}

static bool
writer_hand(const struct pbox *pb, struct ckpt_job *cj, uint32_t iteration)
{
	bool handed = false;

	pthread_mutex_lock(&ck.lock);
	if (!ck.busy) {
		memset(&ck.req, 0, sizeof(ck.req));
		ck.req.w.job = cj->job;
		ck.req.w.src = PHUB_ENGINE_CKPT_SHADOW;
		ck.req.w.iteration = iteration;
		ck.req.w.keep = keep_from(pb, cj->job, &ck.req.w.keep_from);
		ck.busy = true;
		ck.finished = false;
		handed = true;
		pthread_cond_broadcast(&ck.cond);
	}
	pthread_mutex_unlock(&ck.lock);
	return handed;
}

static bool
writer_has(const struct phub_engine_job *job)
{
	bool has;

	pthread_mutex_lock(&ck.lock);
	has = ck.busy && ck.req.w.job == job;
	pthread_mutex_unlock(&ck.lock);
	return has;
}

void
pbox_checkpoint_poll(struct pbox *pb)
{
	uint64_t now;

	/* While draining for SIGTERM, the last snapshots are written after the lcores stop. */
	if (!ck.enabled || ck.draining)
		return;
	collect_writer();
	now = rte_rdtsc();
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct ckpt_job *cj = &ck.jobs[i];
		struct phub_engine_ckpt_status st;
		bool scan;

		if (cj->job == NULL || writer_has(cj->job))
			continue;
		scan = now >= cj->next_scan_tsc;
		phub_engine_job_ckpt_status(cj->job, scan, &st);
		if (st.complete) {
			/* One write at a time; the others wait with their complete snapshots. */
			writer_hand(pb, cj, st.iteration);
			continue;
		}
		if (!scan)
			continue;
		cj->next_scan_tsc = now + ms_tsc(CKPT_SCAN_MS);
		/* A segment went past the snapshot before it was armed: aim further. */
		if (st.missed && !ck.draining && ck.interval != 0)
			arm(cj, next_target(cj->job));
	}
}

/* ---- jobs come and go ---- */

void
pbox_checkpoint_job_created(struct pbox *pb, struct phub_engine_job *job)
{
	struct phub_engine_job_info info;
	struct ckpt_job *cj;

	(void)pb;
	if (!ck.enabled)
		return;
	cj = ckpt_job_of(job);
	memset(cj, 0, sizeof(*cj));
	cj->job = job;
	if (ck.interval == 0)
		return;
	phub_engine_job_get_info(job, &info);
	/* A new job (nothing finished: iteration_max + 1 == 0) starts with its initial model. */
	arm(cj, info.iteration_max + 1 == 0 ? 0 : next_target(job));
}

/* The job's snapshots stop, a write of it in progress finished first; NULL: not ours. */
static struct ckpt_job *
job_quiesce(struct phub_engine_job *job)
{
	struct ckpt_job *cj;

	if (!ck.enabled)
		return NULL;
	cj = ckpt_job_of(job);
	if (cj->job != job)
		return NULL;
	writer_wait(job);
	return cj;
}

void
pbox_checkpoint_job_end(struct pbox *pb, struct phub_engine_job *job)
{
	struct ckpt_job *cj = job_quiesce(job);
	struct phub_engine_job_info info;
	unsigned int removed;

	(void)pb;
	if (cj == NULL)
		return;
	phub_engine_job_get_info(job, &info);
	removed = phub_control_ckpt_remove_all(&ck.dir, info.name);
	if (removed > 0)
		PBOX_LOG(INFO, "job %s ended: its %u checkpoint file(s) removed", info.name,
				removed);
	memset(cj, 0, sizeof(*cj));
}

void
pbox_checkpoint_job_replaced(struct pbox *pb, struct phub_engine_job *job)
{
	/* A write of it in progress finishes first: the file it makes is as good as the others. */
	struct ckpt_job *cj = job_quiesce(job);

	(void)pb;
	if (cj == NULL)
		return;
	phub_engine_job_ckpt_cancel(job);
	memset(cj, 0, sizeof(*cj));
}

/* ---- SIGTERM ---- */

bool
pbox_checkpoint_drain(struct pbox *pb)
{
	uint64_t now = rte_rdtsc();
	unsigned int waiting = 0, jobs = 0;

	(void)pb;
	if (!ck.enabled)
		return true;
	collect_writer();
	if (!ck.draining) {
		ck.draining = true;
		ck.drain_start_tsc = now;
		/* The job the writer holds is armed again below, once its write is collected. */
		writer_wait(NULL);
		for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++)
			ck.jobs[i].next_scan_tsc = 0;
	}
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++) {
		struct ckpt_job *cj = &ck.jobs[i];
		struct phub_engine_ckpt_status st;
		struct phub_engine_job_info info;

		if (cj->job == NULL)
			continue;
		jobs++;
		/* Between two looks at the slots, only a snapshot that completed is news. */
		if (now < cj->next_scan_tsc) {
			phub_engine_job_ckpt_status(cj->job, false, &st);
			waiting += !cj->quiet && !st.complete;
			continue;
		}
		cj->next_scan_tsc = now + ms_tsc(CKPT_DRAIN_SCAN_MS);
		phub_engine_job_get_info(cj->job, &info);
		if (info.segments_completed != cj->quiet_count || cj->quiet_tsc == 0) {
			cj->quiet_count = info.segments_completed;
			cj->quiet_tsc = now;
		}
		/* Idle at a boundary (or never started): its live state is what it has. */
		cj->quiet = now - cj->quiet_tsc >= ms_tsc(CKPT_QUIET_MS);
		if (cj->quiet)
			continue;
		/*
		 * Running: snapshot the next boundary every segment will reach, the iteration
		 * the most advanced segment is in; aim again if one races past it.
		 */
		phub_engine_job_ckpt_status(cj->job, true, &st);
		if (st.complete)
			continue;
		/*
		 * Armed once: the boundary moves on as segments complete, and chasing it would
		 * never let a collection finish. Only a miss, or a periodic target further away,
		 * is aimed again.
		 */
		if (!st.armed || st.missed ||
		    phub_wire_iter_cmp(st.iteration, info.iteration_max + 1) > 0)
			arm(cj, info.iteration_max + 1);
		waiting++;
	}
	if (waiting > 0 && now - ck.drain_start_tsc < ms_tsc(CKPT_DRAIN_MS))
		return false;
	if (jobs > 0) {
		double ms = (double)(now - ck.drain_start_tsc) * 1e3 / (double)rte_get_tsc_hz();

		PBOX_LOG(NOTICE, "checkpoints: %u of %u job(s) reached an iteration boundary in "
				"%.0f ms", jobs - waiting, jobs, ms);
	}
	return true;
}

/* The last checkpoint of a job, data lcores stopped: the newest consistent state it has. */
static void
final_write(const struct pbox *pb, struct ckpt_job *cj)
{
	struct phub_engine_job_info info;
	struct phub_engine_ckpt_status st;
	struct ckpt_write w;
	bool live, shadow;

	phub_engine_job_get_info(cj->job, &info);
	phub_engine_job_ckpt_status(cj->job, false, &st);
	/* iteration_min + 1 == 0: nothing finished yet. */
	live = info.iteration_min == info.iteration_max && info.iteration_min + 1 != 0;
	shadow = st.complete;
	memset(&w, 0, sizeof(w));
	w.w.job = cj->job;
	w.w.keep = keep_from(pb, cj->job, &w.w.keep_from);
	if (live && (!shadow || phub_wire_iter_cmp(info.iteration_min, st.iteration) >= 0)) {
		w.w.src = PHUB_ENGINE_CKPT_LIVE;
		w.w.iteration = info.iteration_min;
	} else if (shadow) {
		w.w.src = PHUB_ENGINE_CKPT_SHADOW;
		w.w.iteration = st.iteration;
	} else {
		if (cj->have_file)
			PBOX_LOG(WARNING, "job %s: stopped in the middle of an iteration (segments "
					"between iterations %u and %u): its checkpoint stays at "
					"iteration %u", info.name, info.iteration_min + 1,
					info.iteration_max + 1, cj->written);
		else
			PBOX_LOG(WARNING, "job %s: stopped in the middle of an iteration (segments "
					"between iterations %u and %u) with no checkpoint yet: it "
					"will not be restored", info.name, info.iteration_min + 1,
					info.iteration_max + 1);
		return;
	}
	if (cj->have_file && w.w.iteration == cj->written) {
		PBOX_LOG(INFO, "job %s: checkpoint of iteration %u is current", info.name,
				w.w.iteration);
		return;
	}
	write_one(&w);
	write_done(&w);
}

void
pbox_checkpoint_fini(struct pbox *pb)
{
	if (!ck.enabled)
		return;
	writer_wait(NULL);
	pthread_mutex_lock(&ck.lock);
	ck.stop = true;
	pthread_cond_broadcast(&ck.cond);
	pthread_mutex_unlock(&ck.lock);
	if (ck.writer_started)
		pthread_join(ck.writer, NULL);
	ck.writer_started = false;
	for (unsigned int i = 0; i < PHUB_ENGINE_MAX_JOBS; i++)
		if (ck.jobs[i].job != NULL)
			final_write(pb, &ck.jobs[i]);
	phub_control_ckpt_close(&ck.dir);
	ck.enabled = false;
}

/* ---- start: the directory, then every job it holds ---- */

int
pbox_checkpoint_init(struct pbox *pb)
{
	const struct phub_config_checkpoint *c = &pb->cfg.checkpoint;
	int rc;

	memset(&ck, 0, sizeof(ck));
	ck.interval = c->interval_iterations;
	rc = phub_control_ckpt_open(&ck.dir, c->dir);
	if (rc != 0) {
		PBOX_LOG(ERR, "checkpoint.dir %s: %s: create it writable for this user, or point "
				"checkpoint.dir elsewhere", c->dir, strerror(-rc));
		return rc;
	}
	pthread_mutex_init(&ck.lock, NULL);
	pthread_cond_init(&ck.cond, NULL);
	rc = rte_ctrl_thread_create(&ck.writer, "phub-ckpt", NULL, writer_main, NULL);
	if (rc != 0) {
		PBOX_LOG(ERR, "cannot start the checkpoint writer thread: %s", strerror(rc));
		return -rc;
	}
	ck.writer_started = true;
	ck.enabled = true;
	if (ck.interval != 0)
		PBOX_LOG(INFO, "checkpoints in %s every %u iterations and on SIGTERM", ck.dir.path,
				ck.interval);
	else
		PBOX_LOG(INFO, "checkpoints in %s on SIGTERM only", ck.dir.path);
	return 0;
}

/* A job back from its file: checkpoints go on from where the file is. */
static void
restored(void *ctx, struct phub_engine_job *job, const struct phub_engine_ckpt_info *info,
		const char *file)
{
	(void)file;
	pbox_checkpoint_job_created(ctx, job);
	ckpt_job_of(job)->have_file = true;
	ckpt_job_of(job)->written = info->iteration;
}

int
pbox_checkpoint_restore(struct pbox *pb)
{
	/* Kept: a ring job is restored again when a ring neighbour restarts (lib/control). */
	static struct phub_engine_allocator allocator;
	static struct phub_engine_ckpt_restore_params rp;

	if (!ck.enabled)
		return 0;
	allocator = pbox_memory_allocator(pb->ports[0].socket);
	memset(&rp, 0, sizeof(rp));
	rp.servers = pb->servers;
	rp.n_servers = pb->n_servers;
	rp.allocator = &allocator;
	rp.checkpoint_shadow = true;
	/* Into the control plane's limits; kept attached for a ring job that goes back. */
	phub_control_ckpt_attach(pb->control, &ck.dir, &rp, restored, pb);
	phub_control_ckpt_restore(&ck.dir, pb->control, &rp, restored, pb);
	return 0;
}
