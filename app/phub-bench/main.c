/* SPDX-License-Identifier: BSD-3-Clause */
/* phub-bench: options, one forked worker per rank, their supervision, and the combined report. */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/phub_model.h"
#include "phub.h"
#include "phub_parse.h"
#include "bench_priv.h"

#define EXIT_USAGE 2

/* After a worker failed, how long the others get to finish on their own, then to obey SIGTERM. */
#define GRACE_S 2.0

/* A record larger than this is garbage from a broken worker. */
#define MSG_MAX (64u << 20)

struct options {
	struct bench_config cfg;
	struct phub_bench_racks racks;
	const char *racks_spec;
	const char *model;
	const char *layout_file;
	uint32_t keys;
	uint32_t key_elems;
	int rank;			/* -1: every rank */
	unsigned int timeout_s;		/* longest a worker may go without progress */
	bool json;
	bool quiet;
	bool print_layout;
};

struct child {
	pid_t pid;
	uint16_t rank;
	int fd;				/* -1 once the pipe is closed */
	bool reaped;
	int wstatus;
	bool killed;			/* by the parent */
	char *buf;			/* bytes of records not yet taken */
	size_t len;
	size_t cap;
	bool bad_record;
	struct bench_progress prog;
	double last_change;		/* when prog last moved */
	bool have_result;
	struct phub_bench_worker_result res;
	double *times;
	uint32_t n_times;
};

static void
usage(FILE *f)
{
	unsigned int i;

	fprintf(f,
		"usage: phub-bench (--server IP --workers N | --servers IP0:N0,IP1:N1,...)\n"
		"                  (--model NAME|FILE | --layout FILE | --keys N --key-elems E)\n"
		"                  [options]\n"
		"  Emulated workers with zero compute (PHub 4.4): every worker pushes a whole\n"
		"  model of gradients and pulls the model back, --iterations times, then checks\n"
		"  the model against a reference computed locally.\n"
		"  --server IP          the PBox's control address (IPv4)\n"
		"  --port N             its control port (default %u)\n"
		"  --workers N          workers in the job (world size)\n"
		"  --rank I             run only rank I of the N (by hand, e.g. in a namespace)\n"
		"  --servers IP0:N0,IP1:N1,...   a job across racks, in ring order: rack r's PBox\n"
		"                       (control address) holds Nr ranks, the global ranks after\n"
		"                       those of the racks before it; each rank joins its rack's\n"
		"                       PBox with its global rank and world size N0+N1+...\n"
		"                       (instead of --server; --workers, if given, must match;\n"
		"                       --racks: its deprecated spelling)\n"
		"  --netns-prefix P     rank i joins from network namespace /run/netns/<P><i+1>;\n"
		"                       with --servers, a %%r in P is the rack's number and i\n"
		"                       counts within the rack (rank i of rack r: <P/r><i+1>)\n"
		"  --netns-prefixes P0,P1,...   with --servers: one prefix per rack; rank i of\n"
		"                       rack r joins from <Pr><i+1>\n"
		"  --model NAME|FILE    a model by its name, as phub-plan takes it, in any case:\n"
		"                      ",
		PHUB_DEFAULT_PORT);
	for (i = 0; i < phub_model_preset_count(); i++)
		fprintf(f, " %s%s", phub_model_preset_at(i)->name,
			i == 4 ? "\n                      " : "");
	fprintf(f, "\n"
		"                       or the paper's abbreviation (RN50, V19, ...):\n"
		"                       torchvision's tensors for");
	for (i = 0; i < phub_bench_preset_count(); i++)
		fprintf(f, " %s", phub_bench_preset_name(i));
	fprintf(f, ",\n"
		"                       the others Table 3's size (--list-models). A FILE that is\n"
		"                       not a name: as --layout\n"
		"  --list-models        the models, with their keys and elements, and exit\n"
		"  --layout FILE        a JSON list of key sizes in elements: [1024, 3, 9408]\n"
		"  --keys N --key-elems E   N keys of E elements\n"
		"  --iterations K       exchanges per worker (default 10)\n"
		"  --warmup W           first exchanges not timed (default 1)\n"
		"  --dtype T            fp32, fp16 or bf16 (default fp32)\n"
		"  --optimizer O        none, sgd, momentum, nesterov, adam, adamw (default sgd)\n"
		"  --lr X --momentum X --weight-decay X --beta1 X --beta2 X --eps X\n"
		"                       (defaults 0.01, 0.9, 0, 0.9, 0.999, 1e-8)\n"
		"  --job NAME           job name (default phub-bench)\n"
		"  --nonce N            the job's secret (default 0x1)\n"
		"  --bind IP            local address to send from\n"
		"  --mtu M              path MTU (default 1500)\n"
		"  --window-bytes B     gradient bytes in flight per worker (libphub's default)\n"
		"  --chunk-bytes B      chunk size (the PBox's default)\n"
		"  --csum               CRC32C on every datagram\n"
		"  --auth               authenticated session (a job declared with auth)\n"
		"  --no-offload         no UDP GSO/GRO in libphub: one datagram per message\n"
		"  --no-ackv            one ACK per PUSH from the PBox instead of ACKV\n"
		"  --gradients G        exact (default): small integers, sums exact in any\n"
		"                       order; random: fractions whose sums round, so that only\n"
		"                       rank-order sums match the reference bit for bit (else\n"
		"                       the check is within tolerance)\n"
		"  --deterministic      ask the PBox to sum in rank order (JOIN flag)\n"
		"  --elastic            an elastic job (JOIN flag): a rank that dies is removed\n"
		"                       and the others go on; each worker's reference follows the\n"
		"                       ranks the PBox removed and from which iteration\n"
		"  --die-at I           with --rank: the worker kills itself (SIGKILL, no LEAVE)\n"
		"                       after iteration I, as a crashed worker (elastic tests)\n"
		"  --connect-timeout-ms T   joining fails after T ms without progress\n"
		"                       (default 10000)\n"
		"  --dead-ms T          PBox silent this long: the worker fails (default 10000)\n"
		"  --timeout S          stop a worker making no progress for S s (default 120)\n"
		"  --pause-at I:MS      every worker waits MS ms after iteration I (idle at an\n"
		"                       iteration boundary, e.g. to stop the PBox there)\n"
		"  --json               one JSON object on stdout instead of the table\n"
		"  --quiet              no progress lines on stderr\n"
		"  --print-layout       print the keys (index, elements, name) and exit\n"
		"  --help               this text\n"
		"  --version            print the version and exit\n"
		"Exit status: 0 when every worker's model matched the reference, 1 otherwise,\n"
		"2 for bad options.\n");
}

static int
parse_float(const char *s, float *out)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (errno != 0 || *end != '\0' || s[0] == '\0' || !isfinite(v))
		return -EINVAL;
	*out = v;
	return 0;
}

enum {
	OPT_SERVER = 256, OPT_PORT, OPT_WORKERS, OPT_RANK, OPT_NETNS, OPT_MODEL, OPT_LAYOUT,
	OPT_KEYS, OPT_KEY_ELEMS, OPT_ITERATIONS, OPT_WARMUP, OPT_DTYPE, OPT_OPTIMIZER, OPT_LR,
	OPT_MOMENTUM, OPT_WD, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_JOB, OPT_NONCE, OPT_BIND,
	OPT_MTU, OPT_WINDOW, OPT_CHUNK, OPT_CSUM, OPT_AUTH, OPT_NO_OFFLOAD, OPT_NO_ACKV,
	OPT_CONNECT_TIMEOUT, OPT_DEAD, OPT_TIMEOUT,
	OPT_JSON, OPT_QUIET, OPT_PRINT_LAYOUT, OPT_LIST_MODELS, OPT_HELP, OPT_PAUSE_AT,
	OPT_GRADIENTS,
	OPT_DETERMINISTIC, OPT_RACKS, OPT_NETNS_PREFIXES, OPT_ELASTIC, OPT_DIE_AT, OPT_VERSION,
	OPT_RACKS_OLD,
};

/* The hyper-parameter that option opt (OPT_LR to OPT_EPS) sets. */
static float *
hyper_field(struct phub_optimizer_params *p, int opt)
{
	static const size_t off[] = {
		[OPT_LR - OPT_LR] = offsetof(struct phub_optimizer_params, lr),
		[OPT_MOMENTUM - OPT_LR] = offsetof(struct phub_optimizer_params, momentum),
		[OPT_WD - OPT_LR] = offsetof(struct phub_optimizer_params, weight_decay),
		[OPT_BETA1 - OPT_LR] = offsetof(struct phub_optimizer_params, beta1),
		[OPT_BETA2 - OPT_LR] = offsetof(struct phub_optimizer_params, beta2),
		[OPT_EPS - OPT_LR] = offsetof(struct phub_optimizer_params, eps),
	};

	return (float *)(void *)((char *)p + off[opt - OPT_LR]);
}

/* The integer options: the field of struct options each sets (its size says its type). */
#define INT_OPT(opt, min, max, field) [opt - OPT_SERVER] = { min, max, \
	offsetof(struct options, field), sizeof(((struct options *)0)->field) }
static const struct int_opt {
	uint64_t min, max;
	size_t off, size;	/* size 0: not an integer option */
} int_opts[OPT_RACKS_OLD - OPT_SERVER + 1] = {
	INT_OPT(OPT_PORT, 1, UINT16_MAX, cfg.port),
	INT_OPT(OPT_WORKERS, 1, UINT16_MAX, cfg.world_size),
	INT_OPT(OPT_RANK, 0, UINT16_MAX - 1, rank),
	INT_OPT(OPT_KEYS, 1, UINT32_MAX, keys),
	INT_OPT(OPT_KEY_ELEMS, 1, UINT32_MAX, key_elems),
	INT_OPT(OPT_ITERATIONS, 1, UINT32_MAX / 2, cfg.iterations),
	INT_OPT(OPT_WARMUP, 0, UINT32_MAX / 2, cfg.warmup),
	INT_OPT(OPT_NONCE, 0, UINT64_MAX, cfg.nonce),
	INT_OPT(OPT_MTU, 576, 65535, cfg.mtu),
	INT_OPT(OPT_WINDOW, 1, UINT32_MAX, cfg.window_bytes),
	INT_OPT(OPT_CHUNK, 1, UINT32_MAX, cfg.chunk_bytes),
	INT_OPT(OPT_DIE_AT, 1, UINT32_MAX, cfg.die_at),
	INT_OPT(OPT_CONNECT_TIMEOUT, 1, 3600000, cfg.connect_timeout_ms),
	INT_OPT(OPT_DEAD, 1, 3600000, cfg.dead_ms),
	INT_OPT(OPT_TIMEOUT, 1, 86400, timeout_s),
};
#undef INT_OPT

/* The options that only set a phub_connect() flag. */
static const uint32_t connect_flag_opts[OPT_RACKS_OLD - OPT_SERVER + 1] = {
	[OPT_CSUM - OPT_SERVER] = PHUB_CONNECT_F_CSUM,
	[OPT_AUTH - OPT_SERVER] = PHUB_CONNECT_F_AUTH,
	[OPT_NO_OFFLOAD - OPT_SERVER] = PHUB_CONNECT_F_NO_OFFLOAD,
	[OPT_NO_ACKV - OPT_SERVER] = PHUB_CONNECT_F_NO_ACKV,
	[OPT_ELASTIC - OPT_SERVER] = PHUB_CONNECT_F_ELASTIC,
};

/* Integer option opt's argument s into its field of o: 0, or -EINVAL outside its range. */
static int
int_option(struct options *o, int opt, const char *s)
{
	const struct int_opt *io = &int_opts[opt - OPT_SERVER];
	void *field = (char *)o + io->off;
	uint64_t v;
	uint32_t v32;
	uint16_t v16;
	int rc;

	rc = phub_parse_u64(s, io->min, io->max, &v);
	if (rc != 0)
		return rc;
	v32 = (uint32_t)v;
	v16 = (uint16_t)v;
	switch (io->size) {
	case sizeof(uint16_t):
		memcpy(field, &v16, sizeof(v16));
		break;
	case sizeof(uint32_t):
		memcpy(field, &v32, sizeof(v32));	/* a uint32_t, or an int under INT_MAX */
		break;
	default:
		memcpy(field, &v, sizeof(v));
		break;
	}
	return 0;
}

static const struct option long_opts[] = {
	{ "server", required_argument, NULL, OPT_SERVER },
	{ "port", required_argument, NULL, OPT_PORT },
	{ "workers", required_argument, NULL, OPT_WORKERS },
	{ "rank", required_argument, NULL, OPT_RANK },
	{ "netns-prefix", required_argument, NULL, OPT_NETNS },
	{ "servers", required_argument, NULL, OPT_RACKS },
	/* Deprecated: --racks is a count everywhere else (virtual-rack, phub-plan). */
	{ "racks", required_argument, NULL, OPT_RACKS_OLD },
	{ "netns-prefixes", required_argument, NULL, OPT_NETNS_PREFIXES },
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "layout", required_argument, NULL, OPT_LAYOUT },
	{ "keys", required_argument, NULL, OPT_KEYS },
	{ "key-elems", required_argument, NULL, OPT_KEY_ELEMS },
	{ "iterations", required_argument, NULL, OPT_ITERATIONS },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "dtype", required_argument, NULL, OPT_DTYPE },
	{ "optimizer", required_argument, NULL, OPT_OPTIMIZER },
	{ "lr", required_argument, NULL, OPT_LR },
	{ "momentum", required_argument, NULL, OPT_MOMENTUM },
	{ "weight-decay", required_argument, NULL, OPT_WD },
	{ "beta1", required_argument, NULL, OPT_BETA1 },
	{ "beta2", required_argument, NULL, OPT_BETA2 },
	{ "eps", required_argument, NULL, OPT_EPS },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "nonce", required_argument, NULL, OPT_NONCE },
	{ "bind", required_argument, NULL, OPT_BIND },
	{ "mtu", required_argument, NULL, OPT_MTU },
	{ "window-bytes", required_argument, NULL, OPT_WINDOW },
	{ "chunk-bytes", required_argument, NULL, OPT_CHUNK },
	{ "csum", no_argument, NULL, OPT_CSUM },
	{ "auth", no_argument, NULL, OPT_AUTH },
	{ "no-offload", no_argument, NULL, OPT_NO_OFFLOAD },
	{ "no-ackv", no_argument, NULL, OPT_NO_ACKV },
	{ "gradients", required_argument, NULL, OPT_GRADIENTS },
	{ "deterministic", no_argument, NULL, OPT_DETERMINISTIC },
	{ "elastic", no_argument, NULL, OPT_ELASTIC },
	{ "die-at", required_argument, NULL, OPT_DIE_AT },
	{ "connect-timeout-ms", required_argument, NULL, OPT_CONNECT_TIMEOUT },
	{ "dead-ms", required_argument, NULL, OPT_DEAD },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "pause-at", required_argument, NULL, OPT_PAUSE_AT },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "quiet", no_argument, NULL, OPT_QUIET },
	{ "print-layout", no_argument, NULL, OPT_PRINT_LAYOUT },
	{ "list-models", no_argument, NULL, OPT_LIST_MODELS },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* --list-models: the names every command takes, and what phub-bench makes of each. */
static void
list_models(void)
{
	printf("name\tabbr\tkeys\telements\tlayout\n");
	for (size_t i = 0; i < phub_model_preset_count(); i++) {
		const struct phub_model_preset *p = phub_model_preset_at(i);
		struct phub_bench_layout *l = phub_bench_layout_preset(p->name);

		if (l == NULL)
			continue;
		printf("%s\t%s\t%u\t%" PRIu64 "\t%s\n", p->name, p->abbr, l->n_keys,
			l->total_elems, phub_bench_model_has_layers(p->name) ?
			"torchvision tensors" : "Table 3 size, equal keys");
		phub_bench_layout_free(l);
	}
}

/* Parse argv into o; 0, 1 for --help (exit 0), or -EINVAL after saying why. */
static int
parse_args(int argc, char **argv, struct options *o)
{
	struct bench_config *c = &o->cfg;
	bool have_workers = false;
	uint64_t v;
	int li = 0;
	int opt;
	int rc;

	memset(o, 0, sizeof(*o));
	o->rank = -1;
	o->timeout_s = 120;
	c->port = PHUB_DEFAULT_PORT;
	c->job = "phub-bench";
	c->nonce = 1;
	c->iterations = 10;
	c->warmup = 1;
	c->dtype = PHUB_DTYPE_FP32;
	c->optimizer = (struct phub_optimizer_params){
		.type = PHUB_OPT_SGD, .lr = 0.01f, .momentum = 0.9f, .weight_decay = 0,
		.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	};
	c->connect_timeout_ms = 10000;
	c->dead_ms = 10000;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", long_opts, &li)) != -1) {
		rc = 0;
		if (opt == OPT_WORKERS)
			have_workers = true;
		switch (opt) {
		case OPT_PORT:
		case OPT_WORKERS:
		case OPT_RANK:
		case OPT_KEYS:
		case OPT_KEY_ELEMS:
		case OPT_ITERATIONS:
		case OPT_WARMUP:
		case OPT_NONCE:
		case OPT_MTU:
		case OPT_WINDOW:
		case OPT_CHUNK:
		case OPT_DIE_AT:
		case OPT_CONNECT_TIMEOUT:
		case OPT_DEAD:
		case OPT_TIMEOUT:
			rc = int_option(o, opt, optarg);
			break;
		case OPT_SERVER:
			c->server = optarg;
			break;
		case OPT_NETNS:
			c->netns_prefix = optarg;
			break;
		case OPT_RACKS_OLD:
			fprintf(stderr, "phub-bench: --racks is deprecated: use --servers %s\n",
				optarg);
			/* fall through */
		case OPT_RACKS:
			o->racks_spec = optarg;
			break;
		case OPT_NETNS_PREFIXES:
			c->netns_prefixes = optarg;
			break;
		case OPT_MODEL:
			o->model = optarg;
			break;
		case OPT_LAYOUT:
			o->layout_file = optarg;
			break;
		case OPT_DTYPE:
			rc = phub_dtype_parse(optarg, &c->dtype);
			break;
		case OPT_OPTIMIZER:
			rc = phub_opt_type_parse(optarg, &c->optimizer.type);
			break;
		case OPT_LR:
		case OPT_MOMENTUM:
		case OPT_WD:
		case OPT_BETA1:
		case OPT_BETA2:
		case OPT_EPS:
			rc = parse_float(optarg, hyper_field(&c->optimizer, opt));
			break;
		case OPT_JOB:
			c->job = optarg;
			break;
		case OPT_BIND:
			c->bind_addr = optarg;
			break;
		case OPT_CSUM:
		case OPT_AUTH:
		case OPT_NO_OFFLOAD:
		case OPT_NO_ACKV:
		case OPT_ELASTIC:
			c->connect_flags |= connect_flag_opts[opt - OPT_SERVER];
			break;
		case OPT_GRADIENTS:
			if (strcmp(optarg, "random") == 0)
				c->random_gradients = true;
			else if (strcmp(optarg, "exact") == 0)
				c->random_gradients = false;
			else
				rc = -EINVAL;
			break;
		case OPT_DETERMINISTIC:
			c->deterministic = true;
			c->connect_flags |= PHUB_CONNECT_F_DETERMINISTIC;
			break;
		case OPT_PAUSE_AT: {
			char *colon = strchr(optarg, ':');
			uint64_t ms = 0;

			rc = -EINVAL;
			if (colon != NULL) {
				*colon = '\0';
				rc = phub_parse_u64(optarg, 1, UINT32_MAX, &v);
				if (rc == 0)
					rc = phub_parse_u64(colon + 1, 1, 3600000, &ms);
				*colon = ':';
			}
			c->pause_at = (uint32_t)v;
			c->pause_ms = (uint32_t)ms;
			break;
		}
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_QUIET:
			o->quiet = true;
			break;
		case OPT_PRINT_LAYOUT:
			o->print_layout = true;
			break;
		case OPT_LIST_MODELS:
			list_models();
			return 1;
		case OPT_HELP:
			usage(stdout);
			return 1;
		case OPT_VERSION:
			printf("phub-bench %s\n", PHUB_VERSION);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (rc != 0) {
			fprintf(stderr, "phub-bench: bad value '%s' for --%s\n", optarg,
				long_opts[li].name);
			return -EINVAL;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "phub-bench: unexpected argument '%s'\n", argv[optind]);
		return -EINVAL;
	}
	if ((o->model != NULL) + (o->layout_file != NULL) + (o->keys != 0 || o->key_elems != 0)
			!= 1) {
		fprintf(stderr, "phub-bench: give exactly one of --model, --layout, or --keys"
			" with --key-elems\n");
		return -EINVAL;
	}
	if ((o->keys != 0) != (o->key_elems != 0)) {
		fprintf(stderr, "phub-bench: --keys and --key-elems go together\n");
		return -EINVAL;
	}
	if (o->print_layout)
		return 0;
	if (o->racks_spec != NULL) {
		char err[256];

		if (c->server != NULL) {
			fprintf(stderr, "phub-bench: --servers names every rack's PBox: no --server\n");
			return -EINVAL;
		}
		if (phub_bench_racks_parse(o->racks_spec, &o->racks, err, sizeof(err)) != 0 ||
				(c->netns_prefixes != NULL &&
				 phub_bench_prefixes_check(c->netns_prefixes, o->racks.n, err,
					 sizeof(err)) != 0)) {
			fprintf(stderr, "phub-bench: %s\n", err);
			return -EINVAL;
		}
		if (have_workers && c->world_size != o->racks.world_size) {
			fprintf(stderr, "phub-bench: --workers %u is not the %u ranks of --servers\n",
				c->world_size, o->racks.world_size);
			return -EINVAL;
		}
		if (c->netns_prefix != NULL && c->netns_prefixes != NULL) {
			fprintf(stderr, "phub-bench: --netns-prefix or --netns-prefixes, not both\n");
			return -EINVAL;
		}
		c->world_size = o->racks.world_size;
		c->racks = &o->racks;
		/* What the progress lines and the report call the server. */
		c->server = o->racks_spec;
		have_workers = true;
	} else if (c->netns_prefixes != NULL) {
		fprintf(stderr, "phub-bench: --netns-prefixes goes with --servers\n");
		return -EINVAL;
	}
	if (c->server == NULL || !have_workers) {
		fprintf(stderr, "phub-bench: --server and --workers (or --servers) are required"
			" (--help)\n");
		return -EINVAL;
	}
	if (c->die_at != 0 && o->rank < 0) {
		fprintf(stderr, "phub-bench: --die-at is for one rank: give --rank\n");
		return -EINVAL;
	}
	if (o->rank >= (int)c->world_size) {
		fprintf(stderr, "phub-bench: --rank %d is not below --workers %u\n", o->rank,
			c->world_size);
		return -EINVAL;
	}
	if (c->warmup >= c->iterations) {
		fprintf(stderr, "phub-bench: --warmup %u leaves none of the %u iterations to"
			" time\n", c->warmup, c->iterations);
		return -EINVAL;
	}
	if (phub_optimizer_params_check(&c->optimizer) != 0) {
		fprintf(stderr, "phub-bench: bad optimizer hyper-parameters (lr and weight decay"
			" >= 0, momentum and betas in [0, 1), eps > 0)\n");
		return -EINVAL;
	}
	return 0;
}

/* ---- supervision ---- */

static void
child_take(struct child *ch, const struct bench_msg_hdr *hdr, const char *payload)
{
	switch (hdr->type) {
	case BENCH_MSG_PROGRESS:
		if (hdr->len != sizeof(ch->prog))
			goto bad;
		if (memcmp(&ch->prog, payload, sizeof(ch->prog)) != 0) {
			struct bench_progress p;

			memcpy(&p, payload, sizeof(p));
			/* Only a step forward is progress; counters moving while stuck are not. */
			if (p.phase != ch->prog.phase || p.iteration != ch->prog.iteration ||
					p.elems_verified != ch->prog.elems_verified ||
					p.join_acks != ch->prog.join_acks ||
					p.initial_acks != ch->prog.initial_acks ||
					p.initial_models != ch->prog.initial_models)
				ch->last_change = bench_now();
			ch->prog = p;
		}
		return;
	case BENCH_MSG_TIMES:
		if (hdr->len % sizeof(double) != 0 || ch->times != NULL)
			goto bad;
		ch->times = malloc(hdr->len);
		if (ch->times == NULL)
			goto bad;
		memcpy(ch->times, payload, hdr->len);
		ch->n_times = hdr->len / sizeof(double);
		return;
	case BENCH_MSG_RESULT:
		if (hdr->len != sizeof(ch->res))
			goto bad;
		memcpy(&ch->res, payload, sizeof(ch->res));
		ch->res.error[sizeof(ch->res.error) - 1] = '\0';
		ch->have_result = true;
		ch->last_change = bench_now();
		return;
	}
bad:
	ch->bad_record = true;
}

/* Read what the pipe has; false at end of file (or on garbage). */
static bool
child_read(struct child *ch)
{
	struct bench_msg_hdr hdr;
	size_t used = 0;
	ssize_t n;

	if (ch->cap - ch->len < 65536) {
		size_t cap = ch->cap * 2 + 65536;
		char *buf = realloc(ch->buf, cap);

		if (buf == NULL)
			return false;
		ch->buf = buf;
		ch->cap = cap;
	}
	n = read(ch->fd, ch->buf + ch->len, ch->cap - ch->len);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false;
	ch->len += (size_t)n;
	while (ch->len - used >= sizeof(hdr)) {
		memcpy(&hdr, ch->buf + used, sizeof(hdr));
		if (hdr.len > MSG_MAX) {
			ch->bad_record = true;
			return false;
		}
		if (ch->len - used - sizeof(hdr) < hdr.len)
			break;
		child_take(ch, &hdr, ch->buf + used + sizeof(hdr));
		used += sizeof(hdr) + hdr.len;
	}
	memmove(ch->buf, ch->buf + used, ch->len - used);
	ch->len -= used;
	return !ch->bad_record;
}

static void
child_close(struct child *ch)
{
	if (ch->fd >= 0)
		close(ch->fd);
	ch->fd = -1;
}

static void
reap(struct child *kids, unsigned int n, bool block)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		if (kids[i].reaped)
			continue;
		if (waitpid(kids[i].pid, &kids[i].wstatus, block ? 0 : WNOHANG) == kids[i].pid)
			kids[i].reaped = true;
	}
}

static void
kill_all(struct child *kids, unsigned int n, int sig)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		if (!kids[i].reaped && kill(kids[i].pid, sig) == 0)
			kids[i].killed = true;
	}
}

/* The one progress line, on stderr. */
static void
print_progress(const struct options *o, const struct child *kids, unsigned int n)
{
	const struct bench_config *c = &o->cfg;
	unsigned int i, joining = 0, running = 0, verifying = 0;
	uint64_t retr = 0, pulls = 0, verified = 0, init_models = UINT64_MAX, init_acks = 0;
	uint32_t it_min = UINT32_MAX;
	double rate = 0;

	for (i = 0; i < n; i++) {
		const struct bench_progress *p = &kids[i].prog;

		if (kids[i].have_result)
			continue;
		joining += p->phase == BENCH_PHASE_CONNECTING;
		if (p->phase == BENCH_PHASE_CONNECTING) {
			init_acks += p->initial_acks;
			if (p->initial_models < init_models)
				init_models = p->initial_models;
		}
		running += p->phase == BENCH_PHASE_RUNNING;
		verifying += p->phase == BENCH_PHASE_VERIFYING;
		if (p->iteration < it_min)
			it_min = p->iteration;
		if (p->timed_s > 0)
			rate += p->timed / p->timed_s;
		retr += p->retransmits;
		pulls += p->pulls;
		verified += p->elems_verified;
	}
	if (joining > 0 && init_acks == 0)
		fprintf(stderr, "phub-bench: %u of %u worker(s) joining job '%s' at %s:%u\n",
			joining, n, c->job, c->server, c->port);
	else if (joining > 0)
		fprintf(stderr, "phub-bench: initial round, %u of %u worker(s): %" PRIu64
			" model segments in (slowest), %" PRIu64 " pushes ACKed\n", joining, n,
			init_models, init_acks);
	else if (running > 0)
		fprintf(stderr, "phub-bench: iteration %u/%u%s, %.1f exchanges/s, %" PRIu64
			" retransmits, %" PRIu64 " pulls\n", it_min, c->iterations,
			it_min < c->warmup ? " (warm-up)" : "", rate, retr, pulls);
	else if (verifying > 0)
		fprintf(stderr, "phub-bench: verifying, %.0f%% of the models checked\n",
			100.0 * (double)verified / ((double)c->layout->total_elems * verifying));
}

/* Fill the result of a worker that did not give one. */
static void
describe_loss(struct child *ch, bool stopped)
{
	struct phub_bench_worker_result *r = &ch->res;
	char how[96];

	if (ch->have_result)
		return;
	memset(r, 0, sizeof(*r));
	r->rank = ch->rank;
	r->iterations = ch->prog.iteration;
	r->status = -ECHILD;
	if (!ch->reaped)
		snprintf(how, sizeof(how), "did not exit");
	else if (WIFSIGNALED(ch->wstatus))
		snprintf(how, sizeof(how), "was killed by signal %d (%s)", WTERMSIG(ch->wstatus),
			strsignal(WTERMSIG(ch->wstatus)));
	else
		snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(ch->wstatus));
	snprintf(r->error, sizeof(r->error), "rank %u %s %s after %u exchange(s)%s", ch->rank,
		stopped ? "was stopped:" : "died:", how, ch->prog.iteration,
		ch->bad_record ? " (garbled report)" : "");
}

/*
 * Once every worker still running has ended its timed loop (BENCH_PHASE_TIMED), tell each to
 * verify: true when told. A worker that failed or vanished does not hold the others.
 */
static bool
verify_release(struct child *kids, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		if (kids[i].fd >= 0 && !kids[i].have_result &&
		    kids[i].prog.phase != BENCH_PHASE_TIMED)
			return false;
	}
	for (i = 0; i < n; i++) {
		if (kids[i].fd >= 0 && kids[i].prog.phase == BENCH_PHASE_TIMED &&
		    write(kids[i].fd, "v", 1) != 1)
			child_close(&kids[i]);
	}
	return true;
}

/*
 * Run the workers until each has reported and exited, a worker fails (the others then get
 * GRACE_S to finish, then SIGTERM, then SIGKILL), or one makes no progress for timeout_s.
 * Every wait here is bounded; *reason gets the first failure.
 */
static void
supervise(const struct options *o, struct child *kids, unsigned int n, char *reason,
		size_t reason_len)
{
	int died = -1;		/* the first worker that vanished without a result */
	double stall_s = o->timeout_s;
	double connect_s = o->cfg.connect_timeout_ms / 1000.0 + 5;
	double next_print = bench_now() + 1;
	double stop_at = 0, kill_at = 0;
	unsigned int i, open_fds;
	bool stopping = false, verify_released = false;
	struct pollfd *pfd;
	unsigned int *map;

	pfd = calloc(n, sizeof(*pfd));
	map = calloc(n, sizeof(*map));
	if (pfd == NULL || map == NULL) {
		snprintf(reason, reason_len, "out of memory");
		kill_all(kids, n, SIGKILL);
		reap(kids, n, true);
		goto out;
	}
	for (i = 0; i < n; i++)
		kids[i].last_change = bench_now();
	for (;;) {
		double now;

		open_fds = 0;
		for (i = 0; i < n; i++) {
			if (kids[i].fd < 0)
				continue;
			pfd[open_fds] = (struct pollfd){ .fd = kids[i].fd, .events = POLLIN };
			map[open_fds++] = i;
		}
		reap(kids, n, false);
		if (open_fds == 0) {
			bool all = true;

			for (i = 0; i < n; i++)
				all = all && kids[i].reaped;
			if (all)
				break;
		}
		if (poll(pfd, open_fds, 100) < 0 && errno != EINTR)
			break;
		for (i = 0; i < open_fds; i++) {
			struct child *ch = &kids[map[i]];

			if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0)
				continue;
			if (!child_read(ch))
				child_close(ch);
		}
		if (!verify_released)
			verify_released = verify_release(kids, n);
		now = bench_now();
		for (i = 0; i < n && !stopping; i++) {
			struct child *ch = &kids[i];
			double limit = ch->prog.phase == BENCH_PHASE_CONNECTING &&
				connect_s > stall_s ? connect_s : stall_s;

			if (ch->have_result && ch->res.status != 0) {
				snprintf(reason, reason_len, "%s", ch->res.error);
			} else if (ch->fd < 0 && !ch->have_result) {
				/* Said once reaped, when how it ended is known. */
				died = (int)i;
			} else if (!ch->have_result && ch->prog.phase != BENCH_PHASE_TIMED &&
				   now - ch->last_change > limit) {
				snprintf(reason, reason_len, "rank %u made no progress for %.0f s"
					" (phase %u, %u exchange(s) done): stopped", ch->rank,
					limit, ch->prog.phase, ch->prog.iteration);
				/* A worker stuck on its own is stopped at once. */
				stop_at = now;
			} else {
				continue;
			}
			stopping = true;
			if (stop_at == 0)
				stop_at = now + GRACE_S;
		}
		if (stopping && kill_at == 0 && now >= stop_at) {
			kill_all(kids, n, SIGTERM);
			kill_at = now + GRACE_S;
		}
		if (kill_at != 0 && now >= kill_at) {
			kill_all(kids, n, SIGKILL);
			for (i = 0; i < n; i++)
				child_close(&kids[i]);
			reap(kids, n, true);
			break;
		}
		if (!o->quiet && now >= next_print) {
			print_progress(o, kids, n);
			next_print = now + 1;
		}
	}
out:
	for (i = 0; i < n; i++) {
		child_close(&kids[i]);
		describe_loss(&kids[i], kids[i].killed && (int)i != died);
	}
	if (died >= 0)
		snprintf(reason, reason_len, "%s", kids[died].res.error);
	free(pfd);
	free(map);
}

/* ---- report ---- */

static void
print_table(const struct phub_bench_run *run,
		const struct phub_bench_summary *s, const struct child *kids, unsigned int n)
{
	const struct phub_bench_layout *l = run->layout;
	uint64_t xbytes = phub_bench_exchange_bytes(l, run->dtype);
	double rtol, atol;
	unsigned int i;

	printf("phub-bench: %s, %u keys, %" PRIu64 " parameters, %.1f MB %s; %u worker(s) at"
		" %s:%u, job '%s'\n", l->model, l->n_keys, l->total_elems,
		(double)s->model_bytes / 1e6, phub_dtype_name(run->dtype), run->world_size,
		run->server, run->port, run->job);
	printf("phub-bench: %s lr %g; %u iterations, the first %u not timed; %s gradients, %s"
		" sums\n", phub_opt_type_name(run->optimizer.type), (double)run->optimizer.lr,
		run->iterations, run->warmup, run->random_gradients ? "random" : "exact",
		run->deterministic ? "rank-order" : "arrival-order");
	if (s->failed == n) {
		printf("phub-bench: no worker finished (stderr says why)\n");
		return;
	}
	printf("%5s %10s %10s %10s %9s %9s %8s %7s  %s\n", "rank", "exch/s", "goodput",
		"wire", "p50", "p99", "retrans", "pulls", "verified");
	printf("%5s %10s %10s %10s %9s %9s\n", "", "", "Gbit/s", "Gbit/s", "ms", "ms");
	for (i = 0; i < n; i++) {
		const struct phub_bench_worker_result *r = &kids[i].res;

		printf("%5u %10.2f %10.3f %10.3f %9.3f %9.3f %8" PRIu64 " %7" PRIu64 "  %s\n",
			r->rank, phub_bench_worker_rate(r), phub_bench_worker_gbps(r, xbytes),
			r->timed_s > 0 ? r->wire_bytes * 8 / r->timed_s / 1e9 : 0, r->p50_ms,
			r->p99_ms, r->retransmits, r->pulls,
			r->status != 0 ? "FAILED" : !r->verified ? "NO" :
			r->bitwise ? "yes (bitwise)" : "yes");
	}
	printf("%5s %10.2f %10.3f %10.3f %9.3f %9.3f %8" PRIu64 " %7" PRIu64 "  %s\n", "all",
		s->exchanges_per_s, s->goodput_gbps, s->wire_gbps, s->p50_ms, s->p99_ms,
		s->retransmits, s->pulls, s->verified ? "yes" : "NO");
	phub_bench_verify_tolerance(run->dtype, &rtol, &atol);
	if (s->failed > 0)
		printf("phub-bench: not verified: %u of %u worker(s) failed\n", s->failed, n);
	else if (phub_bench_run_exact(run))
		printf("phub-bench: verification byte for byte against the scalar reference;"
			" max abs error %g\n", s->max_abs_error);
	else
		printf("phub-bench: verification within %g + %g * |reference|; max abs error"
			" %g%s\n", atol, rtol, s->max_abs_error, s->bitwise ? " (bitwise)" : "");
	printf("phub-bench: job iterations/s %.2f (slowest worker)\n", s->job_iterations_per_s);
	for (i = 1; i < n && kids[i].res.digest == kids[0].res.digest; i++)
		;
	if (n > 0 && i == n && kids[0].res.digest != 0)
		printf("phub-bench: model digest %016" PRIx64 " (FNV-1a of the final model, every"
			" worker)\n", kids[0].res.digest);
}

/* Workers that ran to the end but whose model is not the reference. */
static unsigned int
mismatched(const struct phub_bench_worker_result *r, unsigned int n)
{
	unsigned int i, bad = 0;

	for (i = 0; i < n; i++)
		bad += r[i].status == 0 && !r[i].verified;
	return bad;
}

static int
build_layout(const struct options *o, struct phub_bench_layout **out)
{
	const char *file = o->layout_file;
	char err[512] = "";

	if (o->model != NULL) {
		*out = phub_bench_layout_preset(o->model);
		/* Not a name: a layout file, as phub-plan takes a model file by the same option. */
		if (*out == NULL && errno == ENOENT && access(o->model, R_OK) == 0) {
			file = o->model;
		} else if (*out == NULL && errno == ENOENT) {
			fprintf(stderr, "phub-bench: unknown model '%s': not a model name"
				" (--list-models) nor a readable layout file\n", o->model);
			return -EINVAL;
		}
	}
	if (file != NULL) {
		*out = phub_bench_layout_load(file, err, sizeof(err));
		if (*out == NULL && errno != ENOMEM) {
			fprintf(stderr, "phub-bench: %s\n", err);
			return -EINVAL;
		}
	} else if (o->model == NULL) {
		*out = phub_bench_layout_synthetic(o->keys, o->key_elems);
	}
	if (*out == NULL) {
		fprintf(stderr, "phub-bench: %s\n", strerror(errno));
		return -errno;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	struct phub_bench_layout *layout = NULL;
	struct phub_bench_pattern *pattern = NULL;
	struct phub_bench_summary sum;
	struct phub_bench_run run;
	struct phub_bench_worker_result *results = NULL;
	const double **times = NULL;
	struct child *kids = NULL;
	char reason[512] = "";
	struct options o;
	struct in_addr a;
	unsigned int n = 0, i;
	int status = EXIT_FAILURE;
	int rc;

	rc = parse_args(argc, argv, &o);
	if (rc != 0)
		return rc > 0 ? EXIT_SUCCESS : EXIT_USAGE;
	if (build_layout(&o, &layout) != 0)
		return EXIT_USAGE;
	if (o.print_layout) {
		for (i = 0; i < layout->n_keys; i++)
			printf("%u\t%u\t%s\n", i, layout->n_elems[i],
				layout->names != NULL ? layout->names[i] : "");
		printf("# %s: %u keys, %" PRIu64 " elements\n", layout->model, layout->n_keys,
			layout->total_elems);
		phub_bench_layout_free(layout);
		return EXIT_SUCCESS;
	}
	if (o.racks.n == 0 && inet_pton(AF_INET, o.cfg.server, &a) != 1) {
		fprintf(stderr, "phub-bench: --server '%s' is not an IPv4 address\n",
			o.cfg.server);
		goto out_usage;
	}
	/* Made once, before the fork: the workers share its pages and never write them. */
	pattern = o.cfg.random_gradients ?
		phub_bench_pattern_create_random(o.cfg.dtype, layout->max_key_elems) :
		phub_bench_pattern_create(o.cfg.dtype, layout->max_key_elems);
	if (pattern == NULL) {
		fprintf(stderr, "phub-bench: cannot make the gradient pattern: %s\n",
			strerror(errno));
		goto out;
	}
	o.cfg.layout = layout;
	o.cfg.pattern = pattern;

	n = o.rank >= 0 ? 1 : o.cfg.world_size;
	kids = calloc(n, sizeof(*kids));
	results = calloc(n, sizeof(*results));
	times = calloc(n, sizeof(*times));
	if (kids == NULL || results == NULL || times == NULL) {
		fprintf(stderr, "phub-bench: out of memory\n");
		goto out;
	}
	/* A worker whose parent is gone learns it from EPIPE, not from a signal. */
	signal(SIGPIPE, SIG_IGN);
	fflush(NULL);
	for (i = 0; i < n; i++) {
		int fds[2];

		kids[i].rank = o.rank >= 0 ? (uint16_t)o.rank : (uint16_t)i;
		kids[i].fd = -1;
		kids[i].reaped = true;
		/* Both ways: the worker's reports up, the word to verify down. */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
			snprintf(reason, sizeof(reason), "socketpair: %s", strerror(errno));
			break;
		}
		kids[i].pid = fork();
		if (kids[i].pid < 0) {
			snprintf(reason, sizeof(reason), "fork: %s", strerror(errno));
			close(fds[0]);
			close(fds[1]);
			break;
		}
		if (kids[i].pid == 0) {
			unsigned int j;

			/* Die with the parent rather than keep a PBox job half joined. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() == 1)
				_exit(EXIT_FAILURE);
			close(fds[0]);
			for (j = 0; j < i; j++)
				if (kids[j].fd >= 0)
					close(kids[j].fd);
			_exit(bench_worker_run(&o.cfg, kids[i].rank, fds[1]));
		}
		close(fds[1]);
		kids[i].fd = fds[0];
		kids[i].reaped = false;
	}
	if (reason[0] != '\0') {
		for (i = 0; i < n; i++)
			child_close(&kids[i]);
		kill_all(kids, n, SIGKILL);
		reap(kids, n, true);
		fprintf(stderr, "phub-bench: %s\n", reason);
		goto out;
	}

	supervise(&o, kids, n, reason, sizeof(reason));

	for (i = 0; i < n; i++) {
		struct child *ch = &kids[i];

		/* The worker's own quantiles, from the times it sent. */
		if (ch->times != NULL && ch->n_times == ch->res.timed) {
			double *copy = malloc(ch->n_times * sizeof(*copy));

			if (copy != NULL) {
				memcpy(copy, ch->times, ch->n_times * sizeof(*copy));
				ch->res.p50_ms = phub_bench_quantile(copy, ch->n_times, 0.50);
				ch->res.p99_ms = phub_bench_quantile(copy, ch->n_times, 0.99);
				free(copy);
			}
			times[i] = ch->times;
		} else {
			ch->res.timed = ch->times != NULL ? ch->res.timed : 0;
		}
		results[i] = ch->res;
		if (reason[0] == '\0' && !ch->res.verified && ch->res.error[0] != '\0')
			snprintf(reason, sizeof(reason), "%s", ch->res.error);
	}
	run = (struct phub_bench_run){
		.layout = layout,
		.dtype = o.cfg.dtype,
		.optimizer = o.cfg.optimizer,
		.world_size = o.cfg.world_size,
		.iterations = o.cfg.iterations,
		.warmup = o.cfg.warmup,
		.server = o.cfg.server,
		.port = o.cfg.port,
		.job = o.cfg.job,
		.random_gradients = o.cfg.random_gradients,
		.deterministic = o.cfg.deterministic,
		.racks = &o.racks,
	};
	phub_bench_summarize(&run, results, times, n, n, &sum);
	if (o.json) {
		json_t *j = phub_bench_report_json(&run, &sum, results, n,
			reason[0] != '\0' ? reason : NULL);

		if (j == NULL || json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10))
				!= 0) {
			fprintf(stderr, "phub-bench: cannot write the JSON report\n");
			sum.verified = false;
		}
		printf("\n");
		json_decref(j);
	} else {
		print_table(&run, &sum, kids, n);
	}
	if (!sum.verified) {
		bool said = false;

		for (i = 0; i < n; i++) {
			if (results[i].error[0] == '\0')
				continue;
			fprintf(stderr, "phub-bench: %s\n", results[i].error);
			said = said || strcmp(results[i].error, reason) == 0;
		}
		if (!said && reason[0] != '\0')
			fprintf(stderr, "phub-bench: %s\n", reason);
		fprintf(stderr, "phub-bench: FAILED: %u of %u worker(s) failed, %u model(s) differ"
			" from the reference\n", sum.failed, n, mismatched(results, n));
	}
	status = sum.verified ? EXIT_SUCCESS : EXIT_FAILURE;
out:
	for (i = 0; kids != NULL && i < n; i++) {
		free(kids[i].times);
		free(kids[i].buf);
	}
	free(kids);
	free(results);
	free(times);
	phub_bench_pattern_free(pattern);
	phub_bench_layout_free(layout);
	return status;
out_usage:
	phub_bench_layout_free(layout);
	return EXIT_USAGE;
}
