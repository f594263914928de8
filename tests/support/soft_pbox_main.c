/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-soft-pbox: the soft PBox as a program, for scripts and the Python binding's tests. */

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/phub_auth.h"
#include "phub_parse.h"
#include "soft_pbox.h"

/* --auth-job: jobs declared as jobs[] with "auth": "required" (and "key") in a PBox's config. */
#define MAX_AUTH_JOBS 4
static struct phub_control_declared_job auth_jobs[MAX_AUTH_JOBS];
static char auth_names[MAX_AUTH_JOBS][PHUB_WIRE_JOB_NAME_LEN];
static uint8_t auth_keys[MAX_AUTH_JOBS][PHUB_AUTH_KEY_LEN];

/* NAME:NONCE:WORKERS[:KEY] into auth_jobs[i] (optimizer "none": the mean gradient comes back). */
static int
auth_job_parse(const char *arg, unsigned int i)
{
	char buf[256], *save = NULL, *name, *nonce, *workers, *key;
	uint64_t n, w;

	if (i >= MAX_AUTH_JOBS || strlen(arg) >= sizeof(buf))
		return -1;
	strcpy(buf, arg);
	name = strtok_r(buf, ":", &save);
	nonce = strtok_r(NULL, ":", &save);
	workers = strtok_r(NULL, ":", &save);
	key = strtok_r(NULL, ":", &save);
	if (workers == NULL || strtok_r(NULL, ":", &save) != NULL ||
	    strlen(name) >= sizeof(auth_names[i]) || phub_parse_u64(nonce, 0, UINT64_MAX, &n) != 0 ||
	    phub_parse_u64(workers, 1, UINT16_MAX, &w) != 0 ||
	    (key != NULL && phub_auth_key_parse(auth_keys[i], key) != 0))
		return -1;
	strcpy(auth_names[i], name);
	auth_jobs[i] = (struct phub_control_declared_job){
		.name = auth_names[i], .nonce = n, .workers = (uint16_t)w,
		.dtype = PHUB_DTYPE_FP32, .auth = true, .optimizer = { .type = PHUB_OPT_NONE },
		.key = key != NULL ? auth_keys[i] : NULL,
	};
	return 0;
}

static void
usage(FILE *f)
{
	fprintf(f,
		"usage: phub-soft-pbox [options]\n"
		"  A PBox over kernel UDP sockets (lib/engine, no DPDK), for tests.\n"
		"  --port N         control UDP port; lcore k listens on N+1+k (default 47000;\n"
		"                   0: ephemeral ports, printed at start)\n"
		"  --lcores N       data ports to place chunks on (default 1)\n"
		"  --bind ADDR      IPv4 address to listen on (default 127.0.0.1)\n"
		"  --mtu N          MTU that sizes the segments (default 1500)\n"
		"  --chunk-bytes N  chunk size for JOINs that ask for none (default 32768)\n"
		"  --loss PCT       drop PCT %% of datagrams received and sent (default 0)\n"
		"  --seed N         seed of the loss draws (default 1)\n"
		"  --worker-dead-ms N  a rank silent this long while others wait on it ends its\n"
		"                   job, or is removed from an elastic one (default 10000)\n"
		"  --checkpoint-dir DIR  restore the jobs checkpointed there at start; SIGUSR1\n"
		"                   checkpoints every job there now\n"
		"  --auth-job NAME:NONCE:WORKERS[:KEY]  declare an authenticated job (optimizer\n"
		"                   none), with KEY (64 hex digits) as its jobs[].key; up to 4\n"
		"  --help\n"
		"  --log            the control plane's log lines (jobs made and ended, timeouts)\n"
		"                   on stderr as they come\n"
		"Runs until SIGINT or SIGTERM, then prints its counters to stderr.\n");
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "lcores", required_argument, NULL, 'l' },
		{ "bind", required_argument, NULL, 'b' },
		{ "mtu", required_argument, NULL, 'm' },
		{ "chunk-bytes", required_argument, NULL, 'c' },
		{ "loss", required_argument, NULL, 'L' },
		{ "seed", required_argument, NULL, 's' },
		{ "checkpoint-dir", required_argument, NULL, 'C' },
		{ "worker-dead-ms", required_argument, NULL, 'D' },
		{ "log", no_argument, NULL, 'g' },
		{ "auth-job", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct soft_pbox_params p = { .port = 47000, .bind_addr = "127.0.0.1" };
	struct soft_pbox_stats st;
	struct soft_pbox *sp;
	uint64_t v;
	sigset_t sigs;
	char *end;
	int li = 0;
	int sig;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, &li)) != -1) {
		switch (c) {
		case 'p':
			if (phub_parse_u64(optarg, 0, UINT16_MAX, &v) != 0)
				goto bad;
			p.port = (uint16_t)v;
			break;
		case 'l':
			if (phub_parse_u64(optarg, 1, SOFT_PBOX_MAX_LCORES, &v) != 0)
				goto bad;
			p.n_lcores = (uint16_t)v;
			break;
		case 'b':
			p.bind_addr = optarg;
			break;
		case 'm':
			if (phub_parse_u64(optarg, 0, 65535, &v) != 0)
				goto bad;
			p.mtu = (uint32_t)v;
			break;
		case 'c':
			if (phub_parse_u64(optarg, 0, UINT32_MAX, &v) != 0)
				goto bad;
			p.chunk_bytes = (uint32_t)v;
			break;
		case 'L':
			p.loss = strtod(optarg, &end) / 100.0;
			if (*end != '\0' || p.loss < 0.0 || p.loss >= 1.0)
				goto bad;
			break;
		case 's':
			if (phub_parse_u64(optarg, 0, UINT64_MAX, &v) != 0)
				goto bad;
			p.seed = v;
			break;
		case 'C':
			p.checkpoint_dir = optarg;
			break;
		case 'g':
			p.log_stderr = true;
			break;
		case 'a':
			if (auth_job_parse(optarg, p.n_declared) != 0)
				goto bad;
			p.declared = auth_jobs;
			p.n_declared++;
			break;
		case 'D':
			if (phub_parse_u64(optarg, 1, 3600000, &v) != 0)
				goto bad;
			p.worker_dead_ms = (uint32_t)v;
			break;
		case 'h':
			usage(stdout);
			return EXIT_SUCCESS;
		default:
			usage(stderr);
			return EXIT_FAILURE;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "phub-soft-pbox: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return EXIT_FAILURE;
	}

	/* The PBox thread inherits the mask: only sigwait below takes these. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	sp = soft_pbox_start(&p);
	if (sp == NULL) {
		fprintf(stderr, "phub-soft-pbox: cannot listen on %s:%u: %s\n", p.bind_addr, p.port,
				strerror(errno));
		return EXIT_FAILURE;
	}
	printf("phub-soft-pbox: control %s:%u, %u data port(s) from %u\n", p.bind_addr,
			soft_pbox_port(sp), p.n_lcores != 0 ? p.n_lcores : 1,
			soft_pbox_data_port(sp, 0));
	fflush(stdout);
	/* SIGUSR1: checkpoint every job now (with --checkpoint-dir); one line says how it went. */
	while (sigwait(&sigs, &sig) == 0 && sig == SIGUSR1) {
		int n = soft_pbox_checkpoint(sp);

		if (n >= 0)
			printf("phub-soft-pbox: checkpoint of %d job(s)\n", n);
		else
			printf("phub-soft-pbox: checkpoint failed: %s\n", strerror(-n));
		fflush(stdout);
	}
	soft_pbox_get_stats(sp, &st);
	soft_pbox_stop(sp);
	fprintf(stderr, "phub-soft-pbox: %s: rx %llu tx %llu joins %llu pushes %llu duplicates %llu"
			" pulls %llu models_resent %llu lost rx %llu tx %llu\n", strsignal(sig),
			(unsigned long long)st.rx_datagrams, (unsigned long long)st.tx_datagrams,
			(unsigned long long)st.joins, (unsigned long long)st.pushes,
			(unsigned long long)st.duplicates, (unsigned long long)st.pulls,
			(unsigned long long)st.models_resent, (unsigned long long)st.rx_lost,
			(unsigned long long)st.tx_lost);
	return EXIT_SUCCESS;

bad:
	fprintf(stderr, "phub-soft-pbox: bad value '%s' for --%s\n", optarg, opts[li].name);
	usage(stderr);
	return EXIT_FAILURE;
}
