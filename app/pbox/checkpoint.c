/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Checkpoints of the jobs on disk: the periodic snapshots the data lcores collect, written by a
 * control thread, the last snapshot on SIGTERM, the restore of every job at start, and the
 * removal of a job's files when it ends. Files and their format: docs/reliability.md.
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
#include <rte_malloc.h>

#include "pbox.h"

/* A collection that some segment raced past is looked for this often (a pass over the slots). */
#define CKPT_SCAN_MS 100
/* On SIGTERM, how long the data lcores may run on to reach an iteration boundary. */
#define CKPT_DRAIN_MS 2000
/* A job whose segments completed nothing for this long is idle: its live state is final. */
#define CKPT_QUIET_MS 50
/* While draining, a job's slots are read this often (a pass over all of them each time). */
#define CKPT_DRAIN_SCAN_MS 5
#define CKPT_SUFFIX ".ckpt"
#define CKPT_TMP_SUFFIX ".ckpt.tmp"
#define CKPT_BAD_SUFFIX ".corrupt"
/* "<escaped name>.<10-digit iteration>.ckpt": the escaped name is at most 3 x 63 bytes. */
#define CKPT_FILE_MAX 256

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
	struct phub_engine_job *job;
	enum phub_engine_ckpt_source src;
	uint32_t iteration;
	int rc;
	uint64_t bytes;
	double ms;
	char file[CKPT_FILE_MAX];
	char err[256];
};

static struct {
	bool enabled;
	uint32_t interval;
	char dir[PHUB_CONFIG_PATH_MAX];
	int dir_fd;
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
} ck = { .dir_fd = -1 };

/* snprintf that may truncate: paths and messages are cut rather than refused. */
static void
strf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
strf(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}

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

/* ---- file names ---- */

/* A job name made safe for a file name: [A-Za-z0-9_-] as they are, any other byte as %XX. */
static void
name_escape(const char *name, char *out, size_t cap)
{
	size_t n = 0;

	for (const char *c = name; *c != '\0' && n + 4 < cap; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		    (*c >= '0' && *c <= '9') || *c == '_' || *c == '-')
			out[n++] = *c;
		else
			n += (size_t)snprintf(out + n, cap - n, "%%%02X", (unsigned char)*c);
	}
	out[n] = '\0';
}

static void
file_name(const char *job_name, uint32_t iteration, char *out, size_t cap)
{
	char esc[CKPT_FILE_MAX];

	name_escape(job_name, esc, sizeof(esc));
	strf(out, cap, "%s.%010" PRIu32 CKPT_SUFFIX, esc, iteration);
}

static bool
ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The iteration in a checkpoint file name of the job whose escaped name is esc; false if not. */
static bool
file_of_job(const char *file, const char *esc, uint32_t *iteration)
{
	size_t n = strlen(esc);
	const char *p = file + n + 1;
	char *end;
	unsigned long v;

	if (strncmp(file, esc, n) != 0 || file[n] != '.' || !ends_with(file, CKPT_SUFFIX))
		return false;
	if (strlen(p) != 10 + strlen(CKPT_SUFFIX))
		return false;
	for (int i = 0; i < 10; i++)
		if (p[i] < '0' || p[i] > '9')
			return false;
	v = strtoul(p, &end, 10);
	if (end != p + 10 || v > UINT32_MAX)
		return false;
	*iteration = (uint32_t)v;
	return true;
}

/*
 * Keep the newest file of the job (newest: iteration just written) and the one before it;
 * remove the others. The older one is what a restart falls back to if the newest is damaged.
 */
static void
prune(const char *job_name, uint32_t newest)
{
	char esc[CKPT_FILE_MAX];
	uint32_t keep = newest, it;
	bool have_keep = false;
	struct dirent *e;
	DIR *d;

	name_escape(job_name, esc, sizeof(esc));
	d = opendir(ck.dir);
	if (d == NULL)
		return;
	/* The newest older than the one just written. */
	while ((e = readdir(d)) != NULL) {
		if (!file_of_job(e->d_name, esc, &it) || phub_wire_iter_cmp(it, newest) >= 0)
			continue;
		if (!have_keep || phub_wire_iter_cmp(it, keep) > 0) {
			keep = it;
			have_keep = true;
		}
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if (!file_of_job(e->d_name, esc, &it) || it == newest || (have_keep && it == keep))
			continue;
		if (unlinkat(ck.dir_fd, e->d_name, 0) != 0 && errno != ENOENT)
			PBOX_LOG(WARNING, "checkpoint %s/%s: cannot remove: %s", ck.dir, e->d_name,
					strerror(errno));
	}
	closedir(d);
}

/* Every file of the job: it ended, its workers have the model. */
static void
remove_all(const char *job_name)
{
	char esc[CKPT_FILE_MAX];
	unsigned int removed = 0;
	struct dirent *e;
	uint32_t it;
	DIR *d;

	name_escape(job_name, esc, sizeof(esc));
	d = opendir(ck.dir);
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (file_of_job(e->d_name, esc, &it) && unlinkat(ck.dir_fd, e->d_name, 0) == 0)
			removed++;
	}
	closedir(d);
	if (removed > 0) {
		fsync(ck.dir_fd);
		PBOX_LOG(INFO, "job %s ended: its %u checkpoint file(s) removed", job_name,
				removed);
	}
}

/* ---- writing ---- */

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * Write one checkpoint atomically: a temporary file in the same directory, fsync, rename over
 * the final name, fsync the directory. A crash at any point leaves the previous files intact
 * and at most a temporary file, which the next start removes.
 */
static void
write_one(struct ckpt_write *w)
{
	char name[CKPT_FILE_MAX], tmp[CKPT_FILE_MAX + 8];
	struct phub_engine_job_info info;
	double t0 = now_ms();
	struct stat sb;
	int fd;

	phub_engine_job_get_info(w->job, &info);
	file_name(info.name, w->iteration, name, sizeof(name));
	strf(tmp, sizeof(tmp), ".%s.tmp", name);
	strf(w->file, sizeof(w->file), "%s", name);
	w->err[0] = '\0';
	fd = openat(ck.dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		w->rc = -errno;
		strf(w->err, sizeof(w->err), "cannot create %s/%s: %s", ck.dir, tmp,
				strerror(errno));
		return;
	}
	/* The engine records the job's deterministic flag itself. */
	w->rc = phub_engine_ckpt_write(w->job, w->src, 0, fd, w->err, sizeof(w->err));
	if (w->rc == 0 && fsync(fd) != 0) {
		w->rc = -errno;
		strf(w->err, sizeof(w->err), "fsync %s/%s: %s", ck.dir, tmp, strerror(errno));
	}
	if (w->rc == 0 && fstat(fd, &sb) == 0)
		w->bytes = (uint64_t)sb.st_size;
	close(fd);
	if (w->rc == 0 && renameat(ck.dir_fd, tmp, ck.dir_fd, name) != 0) {
		w->rc = -errno;
		strf(w->err, sizeof(w->err), "rename %s to %s: %s", tmp, name, strerror(errno));
	}
	if (w->rc != 0) {
		unlinkat(ck.dir_fd, tmp, 0);
		return;
	}
	/* The rename is durable only once the directory is. */
	if (fsync(ck.dir_fd) != 0) {
		w->rc = -errno;
		strf(w->err, sizeof(w->err), "fsync %s: %s", ck.dir, strerror(errno));
		return;
	}
	w->ms = now_ms() - t0;
	prune(info.name, w->iteration);
}

static void
write_done(const struct ckpt_write *w)
{
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
			w->bytes >> 10, w->ms);
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
		arm(ckpt_job_of(w.job), next_target(w.job));
	else
		phub_engine_job_ckpt_cancel(w.job);
}

/* Wait until the writer is not busy with job (any job when NULL), and collect its result. */
static void
writer_wait(const struct phub_engine_job *job)
{
	pthread_mutex_lock(&ck.lock);
	while (ck.busy && !ck.finished && (job == NULL || ck.req.job == job))
		pthread_cond_wait(&ck.cond, &ck.lock);
	pthread_mutex_unlock(&ck.lock);
	collect_writer();
}

static bool
writer_hand(struct ckpt_job *cj, uint32_t iteration)
{
	bool handed = false;

	pthread_mutex_lock(&ck.lock);
	if (!ck.busy) {
		memset(&ck.req, 0, sizeof(ck.req));
		ck.req.job = cj->job;
		ck.req.src = PHUB_ENGINE_CKPT_SHADOW;
		ck.req.iteration = iteration;
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
	has = ck.busy && ck.req.job == job;
	pthread_mutex_unlock(&ck.lock);
	return has;
}

void
pbox_checkpoint_poll(struct pbox *pb)
{
	uint64_t now;

	(void)pb;
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
			writer_hand(cj, st.iteration);
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

bool
pbox_checkpoint_enabled(const struct pbox *pb)
{
	(void)pb;
	return ck.enabled;
}

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

void
pbox_checkpoint_job_end(struct pbox *pb, struct phub_engine_job *job)
{
	struct ckpt_job *cj;
	struct phub_engine_job_info info;

	(void)pb;
	if (!ck.enabled)
		return;
	cj = ckpt_job_of(job);
	if (cj->job != job)
		return;
	writer_wait(job);
	phub_engine_job_get_info(job, &info);
	remove_all(info.name);
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
final_write(struct ckpt_job *cj)
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
	w.job = cj->job;
	if (live && (!shadow || phub_wire_iter_cmp(info.iteration_min, st.iteration) >= 0)) {
		w.src = PHUB_ENGINE_CKPT_LIVE;
		w.iteration = info.iteration_min;
	} else if (shadow) {
		w.src = PHUB_ENGINE_CKPT_SHADOW;
		w.iteration = st.iteration;
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
	if (cj->have_file && w.iteration == cj->written) {
		PBOX_LOG(INFO, "job %s: checkpoint of iteration %u is current", info.name,
				w.iteration);
		return;
	}
	write_one(&w);
	write_done(&w);
}

void
pbox_checkpoint_fini(struct pbox *pb)
{
	(void)pb;
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
			final_write(&ck.jobs[i]);
	if (ck.dir_fd >= 0)
		close(ck.dir_fd);
	ck.dir_fd = -1;
	ck.enabled = false;
}

/* ---- start: the directory, then every job it holds ---- */

/* mkdir -p, 0700: checkpoints hold a job's nonce. */
static int
mkdir_p(const char *path)
{
	char p[PHUB_CONFIG_PATH_MAX];

	strf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s != '\0'; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0700) != 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, 0700) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int
pbox_checkpoint_init(struct pbox *pb)
{
	const struct phub_config_checkpoint *c = &pb->cfg.checkpoint;
	int rc;

	memset(&ck, 0, sizeof(ck));
	ck.dir_fd = -1;
	strf(ck.dir, sizeof(ck.dir), "%s", c->dir);
	ck.interval = c->interval_iterations;
	rc = mkdir_p(ck.dir);
	if (rc == 0) {
		ck.dir_fd = open(ck.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (ck.dir_fd < 0)
			rc = -errno;
	}
	if (rc == 0 && faccessat(ck.dir_fd, ".", W_OK, AT_EACCESS) != 0)
		rc = -errno;
	if (rc != 0) {
		PBOX_LOG(ERR, "checkpoint.dir %s: %s: create it writable for this user, or point "
				"checkpoint.dir elsewhere", ck.dir, strerror(-rc));
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
		PBOX_LOG(INFO, "checkpoints in %s every %u iterations and on SIGTERM", ck.dir,
				ck.interval);
	else
		PBOX_LOG(INFO, "checkpoints in %s on SIGTERM only", ck.dir);
	return 0;
}

static void *
restore_alloc(size_t size, size_t align, void *ctx)
{
	return rte_malloc_socket("phub_job", size, (unsigned int)align, (int)(intptr_t)ctx);
}

static void
restore_free(void *ptr, void *ctx)
{
	(void)ctx;
	rte_free(ptr);
}

/* One file found at start. */
struct found {
	char file[CKPT_FILE_MAX];
	char name[PHUB_ENGINE_NAME_MAX];
	uint32_t iteration;
	bool tried;
};

/* A file that cannot be restored is set aside, kept for a look but out of the way. */
static void
set_aside(const char *file, const char *why)
{
	char bad[CKPT_FILE_MAX + 16];

	strf(bad, sizeof(bad), "%s" CKPT_BAD_SUFFIX, file);
	if (renameat(ck.dir_fd, file, ck.dir_fd, bad) == 0)
		PBOX_LOG(ERR, "checkpoint %s/%s refused: %s; renamed to %s", ck.dir, file, why,
				bad);
	else
		PBOX_LOG(ERR, "checkpoint %s/%s refused: %s", ck.dir, file, why);
}

static struct found *
scan_dir(unsigned int *n_found)
{
	struct found *found = NULL;
	unsigned int n = 0, cap = 0;
	struct dirent *e;
	DIR *d = opendir(ck.dir);

	*n_found = 0;
	if (d == NULL)
		return NULL;
	while ((e = readdir(d)) != NULL) {
		struct phub_engine_ckpt_info info;
		char err[256];
		int fd;

		if (e->d_name[0] == '.' && ends_with(e->d_name, ".tmp")) {
			/* A write cut short by a crash: the rename never happened. */
			unlinkat(ck.dir_fd, e->d_name, 0);
			PBOX_LOG(NOTICE, "checkpoint %s/%s: an unfinished write, removed", ck.dir,
					e->d_name);
			continue;
		}
		if (!ends_with(e->d_name, CKPT_SUFFIX) || strlen(e->d_name) >= CKPT_FILE_MAX)
			continue;
		fd = openat(ck.dir_fd, e->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			PBOX_LOG(ERR, "checkpoint %s/%s: %s", ck.dir, e->d_name, strerror(errno));
			continue;
		}
		if (phub_engine_ckpt_peek(fd, &info, err, sizeof(err)) != 0) {
			close(fd);
			set_aside(e->d_name, err);
			continue;
		}
		close(fd);
		if (n == cap) {
			struct found *more = realloc(found, (cap = cap * 2 + 8) * sizeof(*found));

			if (more == NULL)
				break;
			found = more;
		}
		memset(&found[n], 0, sizeof(found[n]));
		strf(found[n].file, sizeof(found[n].file), "%s", e->d_name);
		strf(found[n].name, sizeof(found[n].name), "%s", info.name);
		found[n].iteration = info.iteration;
		n++;
	}
	closedir(d);
	*n_found = n;
	return found;
}

/* The newest untried file of the job named name; NULL when none is left. */
static struct found *
newest_of(struct found *found, unsigned int n, const char *name)
{
	struct found *best = NULL;

	for (unsigned int i = 0; i < n; i++) {
		if (found[i].tried || strcmp(found[i].name, name) != 0)
			continue;
		if (best == NULL || phub_wire_iter_cmp(found[i].iteration, best->iteration) > 0)
			best = &found[i];
	}
	return best;
}

/* A job of the config must still be what the file says; else the file is stale. */
static bool
matches_config(const struct pbox *pb, const struct phub_engine_ckpt_info *info)
{
	int idx = phub_config_job_find(&pb->cfg, info->name);
	const struct phub_config_job *j;

	if (idx < 0)
		return true;
	j = &pb->cfg.jobs[idx];
	return j->nonce == info->nonce && j->workers == info->world_size &&
		(unsigned int)j->dtype == (unsigned int)info->dtype;
}

/* Restore the job of one file; 0, or -errno with the reason in err. */
static int
restore_one(struct pbox *pb, const struct found *f, char *err, size_t errlen)
{
	struct phub_engine_allocator allocator = {
		.alloc = restore_alloc, .free = restore_free,
		.ctx = (void *)(intptr_t)pb->ports[0].socket,
	};
	struct phub_engine_ckpt_restore_params rp;
	struct phub_engine_ckpt_info info;
	struct phub_engine_job_info ji;
	struct phub_engine_job *job;
	unsigned int n_jobs = 0;
	double t0 = now_ms();
	int fd, rc = 0;

	for (job = phub_engine_job_next(pb->engine, NULL); job != NULL;
	     job = phub_engine_job_next(pb->engine, job))
		n_jobs++;
	if (n_jobs >= pb->cfg.limits.max_jobs) {
		strf(err, errlen, "this PBox serves at most %u jobs (limits.max_jobs)",
				pb->cfg.limits.max_jobs);
		return -ENOSPC;
	}
	fd = openat(ck.dir_fd, f->file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		strf(err, errlen, "%s", strerror(errno));
		return rc;
	}
	memset(&rp, 0, sizeof(rp));
	rp.servers = pb->servers;
	rp.n_servers = pb->n_servers;
	rp.memory_limit_bytes = pbox_control_job_memory_limit(pb);
	rp.allocator = &allocator;
	rp.checkpoint_shadow = true;
	/* The limits depend on the header: read it first. */
	rc = phub_engine_ckpt_peek(fd, &info, err, errlen);
	if (rc != 0) {
		close(fd);
		return rc;
	}
	rp.max_segment_elems = pbox_control_segment_elems(pb, info.dtype);
	if (info.world_size > pb->cfg.limits.max_workers_per_job) {
		strf(err, errlen, "%u workers, this PBox allows %u (limits.max_workers_per_job)",
				info.world_size, pb->cfg.limits.max_workers_per_job);
		close(fd);
		return -E2BIG;
	}
	if (!matches_config(pb, &info)) {
		strf(err, errlen, "the config declares job %s with another nonce, worker count "
				"or dtype", info.name);
		close(fd);
		return -EINVAL;
	}
	job = phub_engine_ckpt_restore(pb->engine, fd, &rp, &info, err, errlen);
	rc = job == NULL ? -errno : 0;
	close(fd);
	if (rc != 0)
		return rc;
	pbox_control_job_restored(pb, job, &info);
	pbox_checkpoint_job_created(pb, job);
	ckpt_job_of(job)->have_file = true;
	ckpt_job_of(job)->written = info.iteration;
	phub_engine_job_get_info(job, &ji);
	PBOX_LOG(NOTICE, "job %s (id %u) restored from %s/%s in %.1f ms: iteration %u, %u "
			"workers, %u keys, %" PRIu64 " elements %s, optimizer %s, %" PRIu64 " KB; "
			"its workers resume at iteration %u once they JOIN again", info.name,
			ji.job_id, ck.dir, f->file, now_ms() - t0, info.iteration, info.world_size,
			info.n_keys, info.n_elems, phub_wire_dtype_name((uint8_t)info.dtype),
			phub_opt_type_name(info.optimizer.type), ji.memory_bytes >> 10,
			info.iteration + 1);
	return 0;
}

int
pbox_checkpoint_restore(struct pbox *pb)
{
	unsigned int n = 0, restored = 0;
	struct found *found;

	if (!ck.enabled)
		return 0;
	found = scan_dir(&n);
	for (unsigned int i = 0; i < n; i++) {
		struct found *f;

		if (found[i].tried)
			continue;
		/* Newest first; a file refused gives way to the one before it. */
		while ((f = newest_of(found, n, found[i].name)) != NULL) {
			char err[320] = "";
			int rc;

			f->tried = true;
			rc = restore_one(pb, f, err, sizeof(err));
			if (rc == 0) {
				restored++;
				break;
			}
			if (rc == -EBADMSG || rc == -EPROTONOSUPPORT) {
				set_aside(f->file, err);
			} else {
				PBOX_LOG(ERR, "checkpoint %s/%s not restored: %s", ck.dir, f->file,
						err);
				break;
			}
			if (newest_of(found, n, found[i].name) != NULL)
				PBOX_LOG(NOTICE, "job %s: trying its previous checkpoint",
						found[i].name);
		}
		/* The other files of the job are older than the one restored. */
		for (unsigned int j = 0; j < n; j++)
			if (strcmp(found[j].name, found[i].name) == 0)
				found[j].tried = true;
	}
	free(found);
	if (restored > 0)
		PBOX_LOG(NOTICE, "checkpoints: %u job(s) restored from %s", restored, ck.dir);
	return 0;
}
