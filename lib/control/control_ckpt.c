/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Checkpoint files in one directory (phub_control.h, docs/history/reliability-log.md): their
 * names, the atomic write, the newest two kept, the removal when a job ends, and the restore of
 * every job at start. Plain POSIX; lib/engine writes and reads the file's contents.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control_priv.h"

#define CKPT_SUFFIX ".ckpt"
#define CKPT_BAD_SUFFIX ".corrupt"

/* snprintf that may truncate: paths and messages are cut rather than refused. */
static void strf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
strf(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}

/* ---- names ---- */

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
	char esc[PHUB_CONTROL_CKPT_FILE_MAX];

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

/* ---- the directory ---- */

/* mkdir -p, 0700. */
static int
mkdir_p(const char *path)
{
	char p[PHUB_CONTROL_CKPT_PATH_MAX];

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
phub_control_ckpt_open(struct phub_control_ckpt_dir *dir, const char *path)
{
	int rc;

	strf(dir->path, sizeof(dir->path), "%s", path);
	dir->fd = -1;
	rc = mkdir_p(dir->path);
	if (rc != 0)
		return rc;
	dir->fd = open(dir->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir->fd < 0)
		return -errno;
	if (faccessat(dir->fd, ".", W_OK, AT_EACCESS) != 0) {
		rc = -errno;
		close(dir->fd);
		dir->fd = -1;
		return rc;
	}
	return 0;
}

void
phub_control_ckpt_close(struct phub_control_ckpt_dir *dir)
{
	if (dir->fd >= 0)
		close(dir->fd);
	dir->fd = -1;
}

/*
 * Keep the newest file of the job (newest: iteration just written) and the one before it;
 * remove the others (files after newest too: a ring job that went back left them). The older
 * one is what a restart falls back to if the newest is damaged. A ring job's (w->keep) also
 * keeps every file from w->keep_from on, and the one before it: what a neighbour restarted
 * from its newest file may ask this PBox to go back to.
 */
static void
prune(const struct phub_control_ckpt_dir *dir, const char *job_name, uint32_t newest,
		const struct phub_control_ckpt_write *w)
{
	char esc[PHUB_CONTROL_CKPT_FILE_MAX];
	uint32_t keep = newest, from = newest, it;
	bool have_keep = false;
	struct dirent *e;
	DIR *d;

	name_escape(job_name, esc, sizeof(esc));
	d = opendir(dir->path);
	if (d == NULL)
		return;
	/* A ring job's: from the oldest of its neighbours' newest on, and the one before it. */
	if (w->keep && phub_wire_iter_cmp(w->keep_from, newest) < 0)
		from = w->keep_from;
	while ((e = readdir(d)) != NULL) {
		if (!file_of_job(e->d_name, esc, &it) || phub_wire_iter_cmp(it, from) >= 0)
			continue;
		if (!have_keep || phub_wire_iter_cmp(it, keep) > 0) {
			keep = it;
			have_keep = true;
		}
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if (!file_of_job(e->d_name, esc, &it) || it == newest ||
		    (have_keep && it == keep) ||
		    (phub_wire_iter_cmp(it, from) >= 0 && phub_wire_iter_cmp(it, newest) < 0))
			continue;
		unlinkat(dir->fd, e->d_name, 0);
	}
	closedir(d);
}

unsigned int
phub_control_ckpt_remove_all(const struct phub_control_ckpt_dir *dir, const char *job_name)
{
	char esc[PHUB_CONTROL_CKPT_FILE_MAX];
	unsigned int removed = 0;
	struct dirent *e;
	uint32_t it;
	DIR *d;

	name_escape(job_name, esc, sizeof(esc));
	d = opendir(dir->path);
	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		if (file_of_job(e->d_name, esc, &it) && unlinkat(dir->fd, e->d_name, 0) == 0)
			removed++;
	}
	closedir(d);
	if (removed > 0)
		fsync(dir->fd);
	return removed;
}

/* ---- writing ---- */

void
phub_control_ckpt_write(const struct phub_control_ckpt_dir *dir, struct phub_control_ckpt_write *w)
{
	char tmp[PHUB_CONTROL_CKPT_FILE_MAX + 8];
	struct phub_engine_job_info info;
	struct stat sb;
	int fd;

	/*
	 * A temporary file in the same directory, fsync, rename over the final name, fsync the
	 * directory: a crash at any point leaves the previous files intact and at most a
	 * temporary file, which the next start removes.
	 */
	phub_engine_job_get_info(w->job, &info);
	file_name(info.name, w->iteration, w->file, sizeof(w->file));
	strf(tmp, sizeof(tmp), ".%s.tmp", w->file);
	w->err[0] = '\0';
	w->bytes = 0;
	fd = openat(dir->fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		w->rc = -errno;
		strf(w->err, sizeof(w->err), "cannot create %s/%s: %s", dir->path, tmp,
				strerror(errno));
		return;
	}
	/* The engine records the job's deterministic flag itself. */
	w->rc = phub_engine_ckpt_write(w->job, w->src, 0, fd, w->err, sizeof(w->err));
	if (w->rc == 0 && fsync(fd) != 0) {
		w->rc = -errno;
		strf(w->err, sizeof(w->err), "fsync %s/%s: %s", dir->path, tmp, strerror(errno));
	}
	if (w->rc == 0 && fstat(fd, &sb) == 0)
		w->bytes = (uint64_t)sb.st_size;
	close(fd);
	if (w->rc == 0 && renameat(dir->fd, tmp, dir->fd, w->file) != 0) {
		w->rc = -errno;
		strf(w->err, sizeof(w->err), "rename %s to %s: %s", tmp, w->file, strerror(errno));
	}
	if (w->rc != 0) {
		unlinkat(dir->fd, tmp, 0);
		return;
	}
	/* The rename is durable only once the directory is. */
	if (fsync(dir->fd) != 0) {
		w->rc = -errno;
		strf(w->err, sizeof(w->err), "fsync %s: %s", dir->path, strerror(errno));
		return;
	}
	prune(dir, info.name, w->iteration, w);
}

/* ---- the restore at start ---- */

/* One file found at start. */
struct found {
	char file[PHUB_CONTROL_CKPT_FILE_MAX];
	char name[PHUB_ENGINE_NAME_MAX];
	uint32_t iteration;
	bool tried;
};

/* A file that cannot be restored is set aside, kept for a look but out of the way. */
static void
set_aside(const struct phub_control_ckpt_dir *dir, struct phub_control *ctl, const char *file,
		const char *why)
{
	char bad[PHUB_CONTROL_CKPT_FILE_MAX + 16];

	strf(bad, sizeof(bad), "%s" CKPT_BAD_SUFFIX, file);
	if (renameat(dir->fd, file, dir->fd, bad) == 0)
		control_log(ctl, PHUB_CONTROL_LOG_ERR,
				"checkpoint %s/%s refused: %s; renamed to %s", dir->path, file,
				why, bad);
	else
		control_log(ctl, PHUB_CONTROL_LOG_ERR, "checkpoint %s/%s refused: %s", dir->path,
				file, why);
}

static struct found *
scan_dir(const struct phub_control_ckpt_dir *dir, struct phub_control *ctl, unsigned int *n_found)
{
	struct found *found = NULL;
	unsigned int n = 0, cap = 0;
	struct dirent *e;
	DIR *d = opendir(dir->path);

	*n_found = 0;
	if (d == NULL)
		return NULL;
	while ((e = readdir(d)) != NULL) {
		struct phub_engine_ckpt_info info;
		char err[256];
		int fd;

		if (e->d_name[0] == '.' && ends_with(e->d_name, ".tmp")) {
			/* A write cut short by a crash: the rename never happened. */
			unlinkat(dir->fd, e->d_name, 0);
			control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "checkpoint %s/%s: an unfinished "
					"write, removed", dir->path, e->d_name);
			continue;
		}
		if (!ends_with(e->d_name, CKPT_SUFFIX) ||
		    strlen(e->d_name) >= PHUB_CONTROL_CKPT_FILE_MAX)
			continue;
		fd = openat(dir->fd, e->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			control_log(ctl, PHUB_CONTROL_LOG_ERR, "checkpoint %s/%s: %s", dir->path,
					e->d_name, strerror(errno));
			continue;
		}
		if (phub_engine_ckpt_peek(fd, &info, err, sizeof(err)) != 0) {
			close(fd);
			set_aside(dir, ctl, e->d_name, err);
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

/* The ranks of this PBox's rack in a declared ring job. */
static uint16_t
ring_rack_ranks(const struct phub_control_declared_job *j)
{
	for (uint16_t i = 0; i < j->n_racks; i++)
		if (j->racks[i].peer < 0)
			return j->racks[i].ranks;
	return 0;
}

/* A job of the config must still be what the file says; else the file is stale. */
static bool
matches_declared(const struct phub_control_params *p, const struct phub_engine_ckpt_info *info)
{
	for (unsigned int i = 0; i < p->n_declared; i++) {
		const struct phub_control_declared_job *j = &p->declared[i];

		if (strcmp(j->name, info->name) != 0)
			continue;
		/* A ring job's file holds this rack's ranks. */
		if (j->n_racks >= 2)
			return j->nonce == info->nonce && j->dtype == info->dtype &&
				ring_rack_ranks(j) == info->world_size;
		return j->nonce == info->nonce && j->workers == info->world_size &&
			j->dtype == info->dtype;
	}
	return true;
}

/* Restore the job of one file; the job, or NULL and errno with the reason in err. */
static struct phub_engine_job *
restore_one(const struct phub_control_ckpt_dir *dir, struct phub_control *ctl,
		const struct phub_engine_ckpt_restore_params *base, const struct found *f,
		struct phub_engine_ckpt_info *info, char *err, size_t errlen)
{
	const struct phub_control_params *p = control_params(ctl);
	struct phub_engine_ckpt_restore_params rp = *base;
	const struct phub_control_declared_job *d;
	struct phub_engine_ring_params ring;
	struct phub_engine_job_params jp;
	uint8_t psk[PHUB_AUTH_KEY_LEN] = { 0 };
	struct phub_engine_job *job;
	int fd, rc;

	if (p->max_jobs != 0 && phub_control_job_count(ctl) >= p->max_jobs) {
		strf(err, errlen, "this PBox serves at most %u jobs (limits.max_jobs)",
				p->max_jobs);
		errno = ENOSPC;
		return NULL;
	}
	fd = openat(dir->fd, f->file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		strf(err, errlen, "%s", strerror(errno));
		return NULL;
	}
	/* The limits depend on the header: read it first. */
	rc = phub_engine_ckpt_peek(fd, info, err, errlen);
	if (rc != 0) {
		close(fd);
		errno = -rc;
		return NULL;
	}
	rc = 0;
	if (p->max_workers_per_job != 0 && info->world_size > p->max_workers_per_job) {
		strf(err, errlen, "%u workers, this PBox allows %u (limits.max_workers_per_job)",
				info->world_size, p->max_workers_per_job);
		rc = E2BIG;
	} else if (!matches_declared(p, info)) {
		strf(err, errlen, "the config declares job %s with another nonce, worker count "
				"or dtype", info->name);
		rc = EINVAL;
	}
	if (rc != 0) {
		close(fd);
		errno = rc;
		return NULL;
	}
	/* A job across racks comes back in its place of the ring (docs/hierarchy.md). */
	d = control_declared_find(ctl, info->name);
	if (d != NULL && d->n_racks >= 2) {
		memset(&jp, 0, sizeof(jp));
		control_ring_job_params(ctl, d, &jp, &ring);
		rp.ring = &ring;
	}
	rp.memory_limit_bytes = phub_control_job_memory_limit(ctl);
	rp.max_segment_elems = phub_control_segment_elems(ctl, info->dtype);
	/* A job the config declares with auth comes back with it, its segments cut for it. */
	if (d != NULL && d->auth) {
		phub_auth_job_psk(psk, d->name, d->nonce, d->key);
		rp.auth_psk = psk;
		rp.auth_lanes = 1 + p->n_servers;
		rp.max_segment_elems = control_auth_segment_elems(ctl, info->dtype);
	}
	job = phub_engine_ckpt_restore(p->engine, fd, &rp, info, err, errlen);
	phub_auth_wipe(psk, sizeof(psk));
	rc = errno;
	close(fd);
	errno = rc;
	return job;
}

unsigned int
phub_control_ckpt_restore(const struct phub_control_ckpt_dir *dir, struct phub_control *ctl,
		const struct phub_engine_ckpt_restore_params *rp,
		void (*restored)(void *ctx, struct phub_engine_job *job,
			const struct phub_engine_ckpt_info *info, const char *file), void *ctx)
{
	unsigned int n = 0, count = 0;
	struct found *found = scan_dir(dir, ctl, &n);

	for (unsigned int i = 0; i < n; i++) {
		struct found *f;

		if (found[i].tried)
			continue;
		/*
		 * A ring job comes back too, in its place of the ring: its neighbours go back to
		 * the same checkpoint when its HELLO says which (control_ring_restore.c).
		 */
		/* Newest first; a file refused gives way to the one before it. */
		while ((f = newest_of(found, n, found[i].name)) != NULL) {
			struct phub_engine_ckpt_info info;
			struct phub_engine_job_info ji;
			struct phub_engine_job *job;
			uint64_t t0 = control_now_ns(ctl);
			char err[320] = "";

			f->tried = true;
			job = restore_one(dir, ctl, rp, f, &info, err, sizeof(err));
			if (job != NULL) {
				phub_control_job_restored(ctl, job, &info);
				if (restored != NULL)
					restored(ctx, job, &info, f->file);
				phub_engine_job_get_info(job, &ji);
				control_log(ctl, PHUB_CONTROL_LOG_NOTICE,
					"job %s (id %u) restored from %s/%s in %.1f ms: "
					"iteration %u, %u workers, %u keys, %" PRIu64
					" elements %s, optimizer %s, %" PRIu64 " KB; its "
					"workers resume at iteration %u once they JOIN again",
					info.name, ji.job_id, dir->path, f->file,
					(double)(control_now_ns(ctl) - t0) / 1e6,
					info.iteration, info.world_size, info.n_keys,
					info.n_elems, phub_wire_dtype_name((uint8_t)info.dtype),
					phub_opt_type_name(info.optimizer.type),
					ji.memory_bytes >> 10, info.iteration + 1);
				count++;
				break;
			}
			if (errno == EBADMSG || errno == EPROTONOSUPPORT) {
				set_aside(dir, ctl, f->file, err);
			} else {
				control_log(ctl, PHUB_CONTROL_LOG_ERR, "checkpoint %s/%s not "
						"restored: %s", dir->path, f->file, err);
				break;
			}
			if (newest_of(found, n, found[i].name) != NULL)
				control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "job %s: trying its "
						"previous checkpoint", found[i].name);
		}
		/* The other files of the job are older than the one restored. */
		for (unsigned int j = 0; j < n; j++)
			if (strcmp(found[j].name, found[i].name) == 0)
				found[j].tried = true;
	}
	free(found);
	if (count > 0)
		control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "checkpoints: %u job(s) restored from %s",
				count, dir->path);
	return count;
}

/* Remove the job's files of iterations after it. */
static void
remove_after(const struct phub_control_ckpt_dir *dir, const char *job_name, uint32_t iteration)
{
	char esc[PHUB_CONTROL_CKPT_FILE_MAX];
	struct dirent *e;
	uint32_t it;
	DIR *d = opendir(dir->path);

	if (d == NULL)
		return;
	name_escape(job_name, esc, sizeof(esc));
	while ((e = readdir(d)) != NULL)
		if (file_of_job(e->d_name, esc, &it) && phub_wire_iter_cmp(it, iteration) > 0)
			unlinkat(dir->fd, e->d_name, 0);
	closedir(d);
}

void
phub_control_ckpt_attach(struct phub_control *ctl, const struct phub_control_ckpt_dir *dir,
		const struct phub_engine_ckpt_restore_params *rp,
		void (*restored)(void *ctx, struct phub_engine_job *job,
			const struct phub_engine_ckpt_info *info, const char *file), void *ctx)
{
	ctl->ckpt.dir = dir;
	ctl->ckpt.rp = rp;
	ctl->ckpt.restored = restored;
	ctl->ckpt.ctx = ctx;
}

bool
control_ckpt_newest(const struct phub_control *ctl, const char *name, uint32_t at_most,
		uint32_t *iteration)
{
	char esc[PHUB_CONTROL_CKPT_FILE_MAX];
	bool found = false;
	struct dirent *e;
	uint32_t it;
	DIR *d;

	if (ctl->ckpt.dir == NULL || (d = opendir(ctl->ckpt.dir->path)) == NULL)
		return false;
	name_escape(name, esc, sizeof(esc));
	while ((e = readdir(d)) != NULL) {
		if (!file_of_job(e->d_name, esc, &it) ||
		    (at_most != PHUB_WIRE_RING_HELLO_NONE && phub_wire_iter_cmp(it, at_most) > 0))
			continue;
		if (!found || phub_wire_iter_cmp(it, *iteration) > 0)
			*iteration = it;
		found = true;
	}
	closedir(d);
	return found;
}

struct phub_engine_job *
control_ckpt_restore_at(struct phub_control *ctl, const char *name, uint32_t iteration)
{
	struct phub_engine_ckpt_info info;
	struct phub_engine_job *job;
	struct found f;
	char err[320] = "";
	uint64_t t0 = control_now_ns(ctl);

	if (ctl->ckpt.dir == NULL)
		return NULL;
	memset(&f, 0, sizeof(f));
	file_name(name, iteration, f.file, sizeof(f.file));
	strf(f.name, sizeof(f.name), "%s", name);
	f.iteration = iteration;
	job = restore_one(ctl->ckpt.dir, ctl, ctl->ckpt.rp, &f, &info, err, sizeof(err));
	if (job == NULL || info.iteration != iteration) {
		if (job != NULL) {
			strf(err, sizeof(err), "it holds iteration %u", info.iteration);
			phub_engine_job_unpublish(control_params(ctl)->engine, job);
			phub_engine_job_free(job);
		}
		control_log(ctl, PHUB_CONTROL_LOG_ERR, "job %s: checkpoint %s/%s not restored: %s; "
				"the job ends here", name, ctl->ckpt.dir->path, f.file, err);
		return NULL;
	}
	/* The files after it are of iterations that run again: no restart may take them. */
	remove_after(ctl->ckpt.dir, name, iteration);
	phub_control_job_restored(ctl, job, &info);
	if (ctl->ckpt.restored != NULL)
		ctl->ckpt.restored(ctl->ckpt.ctx, job, &info, f.file);
	control_log(ctl, PHUB_CONTROL_LOG_NOTICE, "job %s (id %u) restored from %s/%s in %.1f ms: "
			"iteration %u; its workers resume at iteration %u once they JOIN again",
			name, phub_engine_job_id(job), ctl->ckpt.dir->path, f.file,
			(double)(control_now_ns(ctl) - t0) / 1e6, iteration, iteration + 1);
	return job;
}

/* ---- a job back from its file ---- */

void
phub_control_job_restored(struct phub_control *ctl, struct phub_engine_job *job,
		const struct phub_engine_ckpt_info *ckpt)
{
	struct cjob *cj;

	control_cjob_start(ctl, job);
	cj = control_cjob(ctl, job);
	/* The file knows the optimizer; the first rank back declares the rest. */
	cj->decl.known = PHUB_CONTROL_DECL_OPTIMIZER;
	cj->decl.optimizer = (uint8_t)ckpt->optimizer.type;
	/* A ring job's links start again, saying which checkpoint it went back to. */
	if (phub_engine_job_ring(job, NULL, NULL, NULL)) {
		const struct phub_control_declared_job *d = control_declared_find(ctl, ckpt->name);

		if (d != NULL && d->n_racks >= 2) {
			control_ring_start(ctl, cj, d);
			control_ring_restored(cj, ckpt->iteration);
		}
	}
}
