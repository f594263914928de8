/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * phub-loadgen: a DPDK traffic source that emulates W PHub workers over one port (net_memif
 * client, net_ring...), so that the PBox's own packet path is measured with no kernel in the
 * way; or, with --blast, PUSH-sized frames against a plain forwarder. Options, EAL, the port,
 * the report.
 */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include "loadgen.h"

int lg_logtype;
volatile bool lg_quit;

#define POOL_MBUFS 8191
#define HDR_MBUFS 16383
#define PORT_DESC 1024
#define LINK_WAIT_S 10
#define START_TRIES 25
#define START_RETRY_US 200000

static void
usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [EAL options] -- [options]\n"
		"       %s --help | --version   (no EAL options needed)\n"
		"\n"
		"Emulates W PHub workers on one DPDK port: JOIN, then whole-model iterations of\n"
		"PUSH (a synthetic layout of --keys x --key-elems fp32), counting ACK and MODEL;\n"
		"or, with --blast, PUSH-sized frames within the window, reading and counting what\n"
		"comes back.\n"
		"\n"
		"  -w, --workers W[,W..]  emulated workers (default 2, at most %u); a list makes\n"
		"                         one run per entry, in this process, on one connection\n"
		"      --repeat N         the runs of the list, N times (default 1)\n"
		"      --keys N           keys of the synthetic layout (default 32)\n"
		"      --key-elems E      fp32 elements per key (default 32768)\n"
		"  -d, --duration S       measured seconds (default 5)\n"
		"  -i, --iterations K     measured whole-model exchanges instead of a duration\n"
		"                         (not with --blast)\n"
		"      --blast            plain frames for a forwarder (testpmd macswap/io)\n"
		"      --payload-bytes B  --blast: element bytes per frame (default 8192)\n"
		"      --server A         the PBox port's address (default 10.77.0.1; --pbox-ip:\n"
		"                         the deprecated spelling)\n"
		"      --worker-ip A      worker 0's address, worker i's is A + i (10.77.0.101)\n"
		"      --port P           the PBox's control UDP port, its udp_base_port, as in\n"
		"                         phub-bench (default 47000; --base-port: the\n"
		"                         deprecated spelling)\n"
		"      --worker-port P    worker 0's UDP port; worker i has P + i (default 40000)\n"
		"      --mtu M            for splitting JOIN and sizing mbufs (default 9000)\n"
		"      --window-segments N  PUSH segments in flight per worker (default 32); 0:\n"
		"                         no limit (--blast then sends as fast as the port\n"
		"                         takes); --window: the deprecated spelling\n"
		"      --rto-us U         retransmission timeout until the first round trip is\n"
		"                         measured (default 20000); then RFC 6298's from the\n"
		"                         round trips answers echo, as libphub's\n"
		"      --rto-min-us U     that RTO's floor (default 20000: on a shared CPU the\n"
		"                         PBox's lcore is descheduled for ms at a time)\n"
		"      --rto-max-us U     and its ceiling (default 1000000); both U: a fixed RTO\n"
		"      --job NAME         job name prefix, run r joins NAME-r (default loadgen)\n"
		"      --nonce HEX[,HEX..]  job nonce (default 0x9b51e4c07a2d3f86); a list:\n"
		"                         run r uses entry r modulo its length (one job each)\n"
		"      --optimizer NAME   none, sgd, momentum, nesterov, adam, adamw (sgd)\n"
		"      --chunk-bytes B    chunk size asked for in JOIN (default 0: the PBox's)\n"
		"      --no-udp-csum      send UDP checksum 0 instead of a full checksum\n"
		"      --dpdk-port N      DPDK port id (default 0)\n"
		"      --json             one JSON object per run on stdout instead of text\n"
		"      --reflect          the server side of --blast on a memif server port: every\n"
		"                         frame's UDP datagram summed (its checksum checked) and\n"
		"                         sent back, MACs swapped, until a signal: the floor of\n"
		"                         the PBox's packet path (docs/performance.md)\n"
		"      --reflect-acks     --reflect, and an ACK-sized frame for W - 1 of every W\n"
		"                         frames of a worker (W and the rank from --blast's frames)\n"
		"      --reflect-ackv     --reflect, and one ACK-sized frame per worker and burst\n"
		"                         that has a frame of a group of W not completed in it\n"
		"                         (the PBox's ACKV: a completed segment's MODELs answer)\n"
		"      --reflect-sum      with a --reflect mode: also the least aggregation work per\n"
		"                         group of W frames (one segment): the first frame held as\n"
		"                         the sum, the others added, the fused SGD step into a\n"
		"                         model of --keys x --key-elems fp32 and the new MODEL\n"
		"                         payload's checksum (the floor-ackv-sum of\n"
		"                         bench-packet-path)\n"
		"      --no-ackv          workers ask for one ACK per PUSH, not ACKV (as\n"
		"                         PHUB_ACKV=0 in the environment)\n"
		"      --auth             authenticated sessions, as libphub's PHUB_CONNECT_F_AUTH:\n"
		"                         the JOIN's key exchange, a MAC on every datagram both\n"
		"                         ways (for jobs with \"auth\": \"required\"; PSK from\n"
		"                         each run's job name and --nonce)\n"
		"      --p3               PUSH priority = key index (P3: first layer first), keys\n"
		"                         pushed last first (backprop's order); reports per key\n"
		"                         the median time to its last MODEL at every worker\n"
		"      --priority P       every PUSH's priority, 0 to 255 (default 0; with --p3\n"
		"                         P + key index, at most 255)\n"
		"      --bulk-workers N   a second job of N workers beside this one, all the\n"
		"                         time, on the same port (addresses and UDP ports %u\n"
		"                         above these); its counters are reported with each run\n"
		"      --bulk-priority P  the second job's --priority (default 128)\n"
		"      --bulk-window-segments N  the second job's --window-segments (default\n"
		"                         64; --bulk-window: the deprecated spelling)\n"
		"  -h, --help             this text\n"
		"      --version          print the version and exit\n",
		prog, prog, LG_MAX_WORKERS, LG_MAX_WORKERS);
}

static void
on_signal(int sig)
{
	(void)sig;
	lg_quit = true;
}

static int
parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int
parse_ipv4(const char *s, uint32_t *out)
{
	struct in_addr a;

	if (inet_pton(AF_INET, s, &a) != 1)
		return -EINVAL;
	*out = ntohl(a.s_addr);
	return 0;
}

static int
parse_optimizer(const char *s, uint8_t *out)
{
	enum phub_opt_type t;

	if (phub_opt_type_parse(s, &t) != 0)
		return -EINVAL;
	*out = (uint8_t)t;
	return 0;
}

/* "a,b,c": at most LG_MAX_RUNS_W numbers in [min, max] into out; how many, or -EINVAL. */
static int
parse_list(const char *s, uint64_t min, uint64_t max, uint64_t out[LG_MAX_RUNS_W])
{
	char buf[LG_MAX_RUNS_W * 24], *save = NULL, *tok;
	int n = 0;

	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
		if (n == LG_MAX_RUNS_W || parse_u64(tok, min, max, &out[n++]) != 0)
			return -EINVAL;
	return n > 0 ? n : -EINVAL;
}

/* "2,4,8": the worker counts of the runs. */
static int
parse_workers(const char *s, struct lg_options *o)
{
	uint64_t v[LG_MAX_RUNS_W];
	int n = parse_list(s, 1, LG_MAX_WORKERS, v);

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++)
		o->workers[i] = (uint16_t)v[i];
	o->n_workers_list = (uint16_t)n;
	return 0;
}

/* --nonce N[,N..]: run r joins with entry r modulo the list's length. */
static int
parse_nonces(const char *s, struct lg_options *o)
{
	int n = parse_list(s, 1, UINT64_MAX, o->nonce);

	if (n < 0)
		return n;
	o->n_nonces = (uint16_t)n;
	return 0;
}

enum {
	OPT_KEYS = 256, OPT_KEY_ELEMS, OPT_BLAST, OPT_PAYLOAD, OPT_PBOX_IP, OPT_WORKER_IP,
	OPT_BASE_PORT, OPT_WORKER_PORT, OPT_MTU, OPT_WINDOW, OPT_RTO, OPT_RTO_MIN, OPT_RTO_MAX, OPT_JOB, OPT_NONCE,
	OPT_OPTIMIZER, OPT_CHUNK, OPT_NO_CSUM, OPT_DPDK_PORT, OPT_JSON, OPT_P3, OPT_REPEAT,
	OPT_REFLECT, OPT_REFLECT_ACKS, OPT_REFLECT_ACKV, OPT_REFLECT_SUM, OPT_NO_ACKV, OPT_AUTH,
	OPT_PRIORITY, OPT_BULK_WORKERS, OPT_BULK_PRIORITY, OPT_BULK_WINDOW, OPT_VERSION,
};

/* Old spellings still taken, each with a line on stderr naming the new one (docs/index.md). */
static const char *const deprecated[][2] = {
	{ "pbox-ip", "server" },
	{ "window", "window-segments" },
	{ "bulk-window", "bulk-window-segments" },
	{ "base-port", "port" },
};

static void
warn_deprecated(const char *name)
{
	for (size_t i = 0; i < RTE_DIM(deprecated); i++)
		if (strcmp(name, deprecated[i][0]) == 0)
			fprintf(stderr, "phub-loadgen: --%s is deprecated: use --%s\n", name,
					deprecated[i][1]);
}

static int
parse_args(int argc, char **argv, struct lg_options *o)
{
	static const struct option options[] = {
		{ "workers", required_argument, NULL, 'w' },
		{ "repeat", required_argument, NULL, OPT_REPEAT },
		{ "keys", required_argument, NULL, OPT_KEYS },
		{ "key-elems", required_argument, NULL, OPT_KEY_ELEMS },
		{ "duration", required_argument, NULL, 'd' },
		{ "iterations", required_argument, NULL, 'i' },
		{ "blast", no_argument, NULL, OPT_BLAST },
		{ "payload-bytes", required_argument, NULL, OPT_PAYLOAD },
		{ "server", required_argument, NULL, OPT_PBOX_IP },
		{ "pbox-ip", required_argument, NULL, OPT_PBOX_IP },
		{ "worker-ip", required_argument, NULL, OPT_WORKER_IP },
		{ "base-port", required_argument, NULL, OPT_BASE_PORT },
		{ "worker-port", required_argument, NULL, OPT_WORKER_PORT },
		{ "mtu", required_argument, NULL, OPT_MTU },
		{ "window-segments", required_argument, NULL, OPT_WINDOW },
		{ "window", required_argument, NULL, OPT_WINDOW },
		{ "rto-us", required_argument, NULL, OPT_RTO },
		{ "rto-min-us", required_argument, NULL, OPT_RTO_MIN },
		{ "rto-max-us", required_argument, NULL, OPT_RTO_MAX },
		{ "job", required_argument, NULL, OPT_JOB },
		{ "nonce", required_argument, NULL, OPT_NONCE },
		{ "optimizer", required_argument, NULL, OPT_OPTIMIZER },
		{ "chunk-bytes", required_argument, NULL, OPT_CHUNK },
		{ "no-udp-csum", no_argument, NULL, OPT_NO_CSUM },
		/* --port as in phub-bench: the PBox's control port (--base-port: old spelling). */
		{ "port", required_argument, NULL, OPT_BASE_PORT },
		{ "dpdk-port", required_argument, NULL, OPT_DPDK_PORT },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "p3", no_argument, NULL, OPT_P3 },
		{ "reflect", no_argument, NULL, OPT_REFLECT },
		{ "reflect-acks", no_argument, NULL, OPT_REFLECT_ACKS },
		{ "reflect-ackv", no_argument, NULL, OPT_REFLECT_ACKV },
		{ "reflect-sum", no_argument, NULL, OPT_REFLECT_SUM },
		{ "no-ackv", no_argument, NULL, OPT_NO_ACKV },
		{ "auth", no_argument, NULL, OPT_AUTH },
		{ "priority", required_argument, NULL, OPT_PRIORITY },
		{ "bulk-workers", required_argument, NULL, OPT_BULK_WORKERS },
		{ "bulk-priority", required_argument, NULL, OPT_BULK_PRIORITY },
		{ "bulk-window-segments", required_argument, NULL, OPT_BULK_WINDOW },
		{ "bulk-window", required_argument, NULL, OPT_BULK_WINDOW },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	char *end;
	int opt, idx, rc = 0;

	memset(o, 0, sizeof(*o));
	snprintf(o->job, sizeof(o->job), "loadgen");
	o->nonce[0] = UINT64_C(0x9b51e4c07a2d3f86);
	o->n_nonces = 1;
	o->duration_s = 5.0;
	o->pbox_ipv4 = RTE_IPV4(10, 77, 0, 1);
	o->worker_ipv4 = RTE_IPV4(10, 77, 0, 101);
	o->keys = 32;
	o->key_elems = 32768;
	o->window = 32;
	o->rto_us = 20000;
	o->rto_min_us = 20000;
	o->rto_max_us = 1000000;
	o->payload_bytes = 8192;
	o->mtu = 9000;
	o->workers[0] = 2;
	o->n_workers_list = 1;
	o->repeat = 1;
	o->base_port = 47000;
	o->worker_udp = 40000;
	o->optimizer = PHUB_OPT_SGD;
	o->udp_csum = true;
	o->bulk_priority = 128;
	o->bulk_window = 64;

	optind = 1;
	while (rc == 0) {
		idx = -1;
		opt = getopt_long(argc, argv, "w:d:i:h", options, &idx);
		if (opt == -1)
			break;
		if (idx >= 0)
			warn_deprecated(options[idx].name);
		switch (opt) {
		case 'w':
			rc = parse_workers(optarg, o);
			break;
		case OPT_REPEAT:
			rc = parse_u64(optarg, 1, 1000, &v);
			o->repeat = (uint16_t)v;
			break;
		case OPT_KEYS:
			rc = parse_u64(optarg, 1, 1u << 20, &v);
			o->keys = (uint32_t)v;
			break;
		case OPT_KEY_ELEMS:
			rc = parse_u64(optarg, 1, UINT32_MAX / 4, &v);
			o->key_elems = (uint32_t)v;
			break;
		case 'd':
			o->duration_s = strtod(optarg, &end);
			rc = *end != '\0' || !(o->duration_s > 0 && o->duration_s <= 3600) ?
				-EINVAL : 0;
			break;
		case 'i':
			rc = parse_u64(optarg, 1, UINT32_MAX, &o->iterations);
			break;
		case OPT_BLAST:
			o->blast = true;
			break;
		case OPT_PAYLOAD:
			rc = parse_u64(optarg, 64, PHUB_WIRE_MAX_DATAGRAM, &v);
			o->payload_bytes = (uint32_t)v;
			break;
		case OPT_PBOX_IP:
			rc = parse_ipv4(optarg, &o->pbox_ipv4);
			break;
		case OPT_WORKER_IP:
			rc = parse_ipv4(optarg, &o->worker_ipv4);
			break;
		case OPT_BASE_PORT:
			rc = parse_u64(optarg, 1, 65535 - 1024, &v);
			/* --port N used to be the DPDK port id: say so rather than send to it. */
			if (rc == 0 && v < RTE_MAX_ETHPORTS) {
				fprintf(stderr, "--port %s: --port is the PBox's control UDP "
					"port, as in phub-bench; the DPDK port id is "
					"--dpdk-port\n", optarg);
				rc = -EINVAL;
			}
			o->base_port = (uint16_t)v;
			break;
		case OPT_WORKER_PORT:
			rc = parse_u64(optarg, 1, 65535 - LG_MAX_WORKERS, &v);
			o->worker_udp = (uint16_t)v;
			break;
		case OPT_MTU:
			rc = parse_u64(optarg, PHUB_WIRE_MIN_MTU, 9000, &v);
			o->mtu = (uint32_t)v;
			break;
		case OPT_WINDOW:
			rc = parse_u64(optarg, 0, 1u << 20, &v);
			o->window = v == 0 ? UINT32_MAX : (uint32_t)v;
			break;
		case OPT_RTO:
			rc = parse_u64(optarg, 100, 10000000, &v);
			o->rto_us = (uint32_t)v;
			break;
		case OPT_RTO_MIN:
			rc = parse_u64(optarg, 100, 10000000, &v);
			o->rto_min_us = (uint32_t)v;
			break;
		case OPT_RTO_MAX:
			rc = parse_u64(optarg, 100, 10000000, &v);
			o->rto_max_us = (uint32_t)v;
			break;
		case OPT_JOB:
			rc = strlen(optarg) < sizeof(o->job) && optarg[0] != '\0' ? 0 : -EINVAL;
			snprintf(o->job, sizeof(o->job), "%s", optarg);
			break;
		case OPT_NONCE:
			rc = parse_nonces(optarg, o);
			break;
		case OPT_OPTIMIZER:
			rc = parse_optimizer(optarg, &o->optimizer);
			break;
		case OPT_CHUNK:
			rc = parse_u64(optarg, 0, 1u << 22, &v);
			o->chunk_bytes = (uint32_t)v;
			break;
		case OPT_NO_CSUM:
			o->udp_csum = false;
			break;
		case OPT_DPDK_PORT:
			rc = parse_u64(optarg, 0, RTE_MAX_ETHPORTS - 1, &v);
			o->port_id = (uint16_t)v;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_P3:
			o->p3 = true;
			break;
		case OPT_NO_ACKV:
			o->no_ackv = true;
			break;
		case OPT_AUTH:
			o->auth = true;
			break;
		case OPT_REFLECT_ACKV:
			o->reflect_ackv = true;
			o->reflect = true;
			break;
		case OPT_REFLECT_SUM:
			o->reflect_sum = true;
			break;
		case OPT_REFLECT_ACKS:
			o->reflect_acks = true;
			/* fall through */
		case OPT_REFLECT:
			o->reflect = true;
			break;
		case OPT_PRIORITY:
			rc = parse_u64(optarg, 0, UINT8_MAX, &v);
			o->priority = (uint8_t)v;
			break;
		case OPT_BULK_WORKERS:
			rc = parse_u64(optarg, 0, LG_MAX_WORKERS, &v);
			o->bulk_workers = (uint16_t)v;
			break;
		case OPT_BULK_PRIORITY:
			rc = parse_u64(optarg, 0, UINT8_MAX, &v);
			o->bulk_priority = (uint8_t)v;
			break;
		case OPT_BULK_WINDOW:
			rc = parse_u64(optarg, 0, 1u << 20, &v);
			o->bulk_window = v == 0 ? UINT32_MAX : (uint32_t)v;
			break;
		case 'h':
			usage(stdout, argv[0]);
			exit(EXIT_SUCCESS);
		case OPT_VERSION:
			printf("phub-loadgen %s\n", PHUB_VERSION);
			exit(EXIT_SUCCESS);
		default:
			return -EINVAL;
		}
		/* The option as known, whether given as "--x v", "--x=v" or "-w v". */
		if (rc != 0 && idx >= 0)
			fprintf(stderr, "phub-loadgen: bad value for --%s: '%s'\n",
					options[idx].name, optarg);
		else if (rc != 0)
			fprintf(stderr, "phub-loadgen: bad value for -%c: '%s'\n", opt, optarg);
	}
	if (rc == 0 && o->reflect_sum && !o->reflect) {
		fprintf(stderr, "phub-loadgen: --reflect-sum needs --reflect, --reflect-acks or "
				"--reflect-ackv\n");
		rc = -EINVAL;
	}
	if (rc == 0 && optind != argc) {
		fprintf(stderr, "phub-loadgen: unexpected argument '%s'\n", argv[optind]);
		rc = -EINVAL;
	}
	if (rc == 0 && o->rto_min_us > o->rto_max_us) {
		fprintf(stderr, "phub-loadgen: --rto-min-us %u is above --rto-max-us %u\n",
				o->rto_min_us, o->rto_max_us);
		rc = -EINVAL;
	}
	if (rc == 0 && o->auth && (o->blast || o->reflect)) {
		fprintf(stderr, "phub-loadgen: --auth authenticates sessions: not with --blast or "
				"--reflect\n");
		rc = -EINVAL;
	}
	if (rc == 0 && o->auth && phub_auth_init() != 0) {
		fprintf(stderr, "phub-loadgen: --auth: libsodium cannot start (no randomness)\n");
		rc = -EIO;
	}
	if (rc == 0 && o->bulk_workers > 0 && o->blast) {
		fprintf(stderr, "phub-loadgen: --bulk-workers runs a second job: not with --blast\n");
		rc = -EINVAL;
	}
	if (rc == 0 && o->bulk_workers > 0 &&
	    (uint32_t)o->worker_udp + 2 * LG_MAX_WORKERS > 65535) {
		fprintf(stderr, "phub-loadgen: --worker-port %u: with --bulk-workers the second "
				"job's ports start at %u and must stay below 65536\n", o->worker_udp,
				o->worker_udp + LG_MAX_WORKERS);
		rc = -EINVAL;
	}
	return rc;
}

/* One RX and one TX queue; chained TX when the device takes it; the link up within a while. */
static int
port_init(struct lg *lg)
{
	uint16_t port = lg->opt.port_id;
	uint16_t room = (uint16_t)(RTE_PKTMBUF_HEADROOM + RTE_MAX(lg->opt.mtu + RTE_ETHER_HDR_LEN +
			RTE_ETHER_CRC_LEN, 2048u));
	uint16_t rx_desc = PORT_DESC, tx_desc = PORT_DESC;
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	struct rte_eth_link link;
	int socket = rte_socket_id();
	uint64_t deadline;
	int rc;

	if (!rte_eth_dev_is_valid_port(port)) {
		LG_LOG(ERR, "no port %u: pass a device, e.g. --vdev net_memif0,role=client,"
				"socket=/tmp/x.sock (EAL option)", port);
		return -ENODEV;
	}
	lg->pool = rte_pktmbuf_pool_create("lg_mbuf", POOL_MBUFS, 256, 0, room, socket);
	lg->hdr_pool = rte_pktmbuf_pool_create("lg_hdr", HDR_MBUFS, 256, 0,
			RTE_PKTMBUF_HEADROOM + 128, socket);
	lg->indirect_pool = rte_pktmbuf_pool_create("lg_ind", HDR_MBUFS, 256, 0, 0, socket);
	if (lg->pool == NULL || lg->hdr_pool == NULL || lg->indirect_pool == NULL) {
		LG_LOG(ERR, "cannot create the mbuf pools: %s (give EAL more memory, -m)",
				rte_strerror(rte_errno));
		return -ENOMEM;
	}
	rc = rte_eth_dev_info_get(port, &info);
	if (rc != 0)
		return rc;
	memset(&conf, 0, sizeof(conf));
	if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) {
		conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
		lg->chained_tx = true;
	}
	rc = rte_eth_dev_configure(port, 1, 1, &conf);
	if (rc == 0)
		rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rx_desc, &tx_desc);
	if (rc == 0)
		rc = rte_eth_rx_queue_setup(port, 0, rx_desc, (unsigned int)socket, NULL, lg->pool);
	if (rc == 0)
		rc = rte_eth_tx_queue_setup(port, 0, tx_desc, (unsigned int)socket, NULL);
	/* A memif server still tearing down the previous client refuses for a moment. */
	for (unsigned int tries = 1; rc == 0; tries++) {
		rc = rte_eth_dev_start(port);
		if (rc == 0 || lg_quit || tries == START_TRIES)
			break;
		rte_delay_us_sleep(START_RETRY_US);
		rc = 0;
	}
	if (rc != 0) {
		LG_LOG(ERR, "port %u: set-up failed: %s", port, rte_strerror(-rc));
		return rc;
	}
	rte_eth_promiscuous_enable(port);
	rte_eth_macaddr_get(port, &lg->port_mac);

	/* The gradient every PUSH carries: small distinct values, so sums stay finite. */
	lg->payload = rte_pktmbuf_alloc(lg->pool);
	if (lg->payload == NULL)
		return -ENOMEM;
	{
		uint16_t bytes = (uint16_t)(rte_pktmbuf_tailroom(lg->payload) & ~63u);
		float *f = (float *)rte_pktmbuf_append(lg->payload, bytes);

		for (unsigned int i = 0; i < bytes / sizeof(float); i++)
			f[i] = 1e-3f * (float)(i % 97);
	}

	/* One reference to it per indirect mbuf: every chained PUSH can be out at once. */
	lg->refs = calloc(1, sizeof(*lg->refs));
	if (lg->refs == NULL)
		return -ENOMEM;
	{
		struct phub_net_extref *all = calloc(HDR_MBUFS, sizeof(*all));
		struct phub_net_extref **free_slots = calloc(HDR_MBUFS, sizeof(*free_slots));

		if (all == NULL || free_slots == NULL) {
			free(all);
			free(free_slots);
			return -ENOMEM;
		}
		phub_net_extref_stack_init(lg->refs, all, free_slots, HDR_MBUFS);
	}

	/* A server side waits for nobody: its client connects when it likes. */
	if (lg->opt.reflect)
		return 0;
	/*
	 * memif connects in the background: wait for the link before the first frame. A client
	 * that reached the server before the server's port started is refused and does not try
	 * again: restarting the port makes it connect anew.
	 */
	deadline = rte_rdtsc() + LINK_WAIT_S * rte_get_tsc_hz();
	for (unsigned int tick = 1; !lg_quit && rte_rdtsc() < deadline; tick++) {
		rc = rte_eth_link_get_nowait(port, &link);
		if (rc == 0 && link.link_status == RTE_ETH_LINK_UP)
			return 0;
		rte_delay_us_sleep(10000);
		if (tick % 100 == 0) {
			rte_eth_dev_stop(port);
			rte_eth_dev_start(port);
		}
	}
	LG_LOG(ERR, "port %u: link still down after %u s (is the server side running?)", port,
			LINK_WAIT_S);
	return -ENOTCONN;
}

static double
percentile_ms(uint64_t *v, uint64_t n, double p)
{
	uint64_t i;

	if (n == 0)
		return 0.0;
	i = (uint64_t)(p * (double)(n - 1) + 0.5);
	return (double)v[i] / 1e6;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * --p3: per key (priority --priority + key index), the median over the measured iterations of
 * the time from the iteration's start to the key's last MODEL at every worker, in microseconds.
 */
static void
report_p3(struct lg *lg, bool json)
{
	uint32_t n = lg->n_key_iters;

	if (!lg->opt.p3 || lg->key_done_us == NULL)
		return;
	if (json)
		printf(",\"p3\":true,\"p3_iterations\":%u,\"key_done_p50_us\":[", n);
	else
		printf("  key done   p50 us by key (priority %u + key) over %u iterations:",
				lg->opt.priority, n);
	for (uint32_t k = 0; k < lg->n_keys; k++) {
		uint32_t *row = &lg->key_done_us[(size_t)k * LG_P3_MAX_ITERS];

		qsort(row, n, sizeof(*row), cmp_u32);
		printf("%s%u", k == 0 ? (json ? "" : " ") : (json ? "," : " "),
				n == 0 ? 0 : row[n / 2]);
	}
	printf("%s", json ? "]" : "\n");
}

/* --bulk-workers: the job beside this one over the same measured span (sec). */
static void
report_bulk(struct lg *lg, double sec)
{
	struct lg *b = lg->bulk;
	double d = sec > 0 ? sec : 1e-9;

	if (b == NULL)
		return;
	qsort(b->iter_ns, b->n_iter_ns, sizeof(uint64_t), cmp_u64);
	if (lg->opt.json)
		printf(",\"priority\":%u,\"bulk\":{\"workers\":%u,\"priority\":%u,"
				"\"window\":%u,\"exchanges\":%" PRIu64 ",\"exchanges_per_s\":%.2f,"
				"\"iteration_p50_ms\":%.3f,\"iteration_p99_ms\":%.3f,"
				"\"pushes\":%" PRIu64 ",\"retransmits\":%" PRIu64 ",\"pulls\":%"
				PRIu64, lg->opt.priority, b->n_workers, b->opt.priority,
				b->opt.window == UINT32_MAX ? 0 : b->opt.window, b->stats.exchanges,
				(double)b->stats.exchanges / d,
				percentile_ms(b->iter_ns, b->n_iter_ns, 0.50),
				percentile_ms(b->iter_ns, b->n_iter_ns, 0.99), b->stats.pushes,
				b->stats.retransmits, b->stats.pulls);
	else
		printf("  beside it  job of %u workers, priority %u%s, window %u: %" PRIu64
				" exchanges, %.2f/s, iteration p50 %.3f ms p99 %.3f ms, %" PRIu64
				" retransmits\n", b->n_workers, b->opt.priority,
				b->opt.p3 ? " + key" : "", b->opt.window, b->stats.exchanges,
				(double)b->stats.exchanges / d,
				percentile_ms(b->iter_ns, b->n_iter_ns, 0.50),
				percentile_ms(b->iter_ns, b->n_iter_ns, 0.99), b->stats.retransmits);
	report_p3(b, lg->opt.json);
	if (lg->opt.json)
		printf("}");
}

static void
report(struct lg *lg, const struct lg_stats *s, double sec)
{
	const struct lg_options *o = &lg->opt;
	uint32_t seg_bytes = o->blast ? o->payload_bytes : lg->seg_elems * (uint32_t)sizeof(float);
	uint32_t frame = (o->auth ? LG_HEAD_LEN_AUTH : LG_HEAD_LEN) + seg_bytes;
	double d = sec > 0 ? sec : 1e-9;
	/* The generator's own load: near 1.0, it may be what limits the server it measures. */
	double busy = (double)s->busy_tsc / (double)lg->tsc_hz / d;
	double p50, p99;

	qsort(lg->iter_ns, lg->n_iter_ns, sizeof(uint64_t), cmp_u64);
	p50 = percentile_ms(lg->iter_ns, lg->n_iter_ns, 0.50);
	p99 = percentile_ms(lg->iter_ns, lg->n_iter_ns, 0.99);
	if (o->json) {
		printf("{\"mode\":\"%s\",\"run\":%u,\"workers\":%u,\"keys\":%u,\"key_elems\":%u,"
			"\"segments\":%u,\"segment_bytes\":%u,\"push_frame_bytes\":%u,"
			"\"udp_csum\":%s,\"seconds\":%.3f,\"exchanges\":%" PRIu64 ","
			"\"exchanges_per_s\":%.2f,\"iteration_p50_ms\":%.3f,"
			"\"iteration_p99_ms\":%.3f,"
			"\"pushes\":%" PRIu64 ",\"pushes_per_s\":%.0f,\"push_gbps\":%.3f,"
			"\"tx_pkts\":%" PRIu64 ",\"tx_pps\":%.0f,\"tx_gbps\":%.3f,"
			"\"rx_pkts\":%" PRIu64 ",\"rx_pps\":%.0f,\"rx_gbps\":%.3f,"
			"\"acks\":%" PRIu64 ",\"ackv\":%" PRIu64 ",\"models\":%" PRIu64 ","
			"\"retransmits\":%" PRIu64 ","
			"\"pulls\":%" PRIu64 ",\"replays\":%" PRIu64 ",\"stale\":%" PRIu64 ","
			"\"errors\":%" PRIu64 ",\"other\":%" PRIu64 ",\"tx_ring_full\":%" PRIu64 ","
			"\"window\":%u,\"generator_busy\":%.3f,\"auth\":%s,"
			"\"auth_failed\":%" PRIu64 ",\"rtt_samples\":%" PRIu64 ","
			"\"srtt_us\":%.1f,\"rttvar_us\":%.1f,\"rto_us\":%.1f",
			o->blast ? "blast" : "session", lg->run, lg->n_workers, o->keys,
			o->key_elems,
			lg->n_segments, seg_bytes, frame, o->udp_csum ? "true" : "false", sec,
			s->exchanges, (double)s->exchanges / d, p50, p99,
			s->pushes, (double)s->pushes / d, (double)s->push_bytes * 8 / d / 1e9,
			s->tx_pkts, (double)s->tx_pkts / d, (double)s->tx_bytes * 8 / d / 1e9,
			s->rx_pkts, (double)s->rx_pkts / d, (double)s->rx_bytes * 8 / d / 1e9,
			s->acks, s->ackv, s->models, s->retransmits, s->pulls, s->replays, s->stale,
			s->errors, s->other, s->tx_full, o->window == UINT32_MAX ? 0 : o->window,
			busy, o->auth ? "true" : "false", s->auth_failed, s->rtt_samples,
			lg->rtt.srtt_ns / 1e3, lg->rtt.rttvar_ns / 1e3,
			(double)lg->rto_tsc * 1e6 / (double)lg->tsc_hz);
		report_p3(lg, true);
		report_bulk(lg, sec);
		printf("}\n");
		return;
	}
	printf("phub-loadgen %s: %u workers, %u-byte segments (%u-byte PUSH frames), UDP "
			"checksum %s,%s %.2f s measured\n", o->blast ? "blast" : "session",
			lg->n_workers, seg_bytes, frame, o->udp_csum ? "on" : "off",
			o->auth ? " authenticated," : "", sec);
	if (!o->blast)
		printf("  model      %u keys x %u fp32 = %u segments; %" PRIu64 " exchanges, "
				"%.2f/s, iteration p50 %.3f ms p99 %.3f ms\n", o->keys,
				o->key_elems, lg->n_segments, s->exchanges,
				(double)s->exchanges / d, p50, p99);
	printf("  pushes     %" PRIu64 " (%.0f/s, %.2f Gbit/s of elements)\n", s->pushes,
			(double)s->pushes / d, (double)s->push_bytes * 8 / d / 1e9);
	printf("  sent       %" PRIu64 " frames, %.0f/s, %.2f Gbit/s\n", s->tx_pkts,
			(double)s->tx_pkts / d, (double)s->tx_bytes * 8 / d / 1e9);
	printf("  received   %" PRIu64 " frames, %.0f/s, %.2f Gbit/s\n", s->rx_pkts,
			(double)s->rx_pkts / d, (double)s->rx_bytes * 8 / d / 1e9);
	printf("  busy       %.2f of the generator's time (loop turns that sent or received)\n",
			busy);
	if (o->blast)
		printf("  lost       %" PRIu64 " frames (nothing back for %u ms with frames out)\n",
				s->other, LG_BLAST_LOSS_US / 1000);
	if (!o->blast)
		printf("  answers    %" PRIu64 " ACK, %" PRIu64 " MODEL, %" PRIu64 " retransmits, "
				"%" PRIu64 " PULL, %" PRIu64 " replays, %" PRIu64 " stale, %" PRIu64
				" ERROR, %" PRIu64 " other\n", s->acks, s->models, s->retransmits,
				s->pulls, s->replays, s->stale, s->errors, s->other);
	if (!o->blast)
		printf("  rtt        %" PRIu64 " samples, srtt %.1f us, rttvar %.1f us, rto %.1f us "
				"at the end\n", s->rtt_samples, lg->rtt.srtt_ns / 1e3,
				lg->rtt.rttvar_ns / 1e3,
				(double)lg->rto_tsc * 1e6 / (double)lg->tsc_hz);
	if (o->auth)
		printf("  auth       %" PRIu64 " answers failed their MAC or number, dropped\n",
				s->auth_failed);
	report_p3(lg, false);
	report_bulk(lg, sec);
}

int
main(int argc, char **argv)
{
	struct lg lg;
	struct lg_stats measured;
	double seconds = 0;
	uint16_t max_workers = 1;
	bool port_valid;
	int rc;

	memset(&lg, 0, sizeof(lg));
	/*
	 * --help and --version answer before EAL starts (no hugepages, no lock, no "--" needed):
	 * EAL would otherwise take --help as its own and refuse --version.
	 */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout, "phub-loadgen");
			return EXIT_SUCCESS;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("phub-loadgen %s\n", PHUB_VERSION);
			return EXIT_SUCCESS;
		}
	}
	rc = rte_eal_init(argc, argv);
	if (rc < 0)
		rte_exit(EXIT_FAILURE, "EAL start failed: %s\n", rte_strerror(rte_errno));
	argc -= rc;
	argv += rc;
	argv[0] = (char *)"phub-loadgen";
	lg_logtype = rte_log_register_type_and_pick_level("phub.loadgen", RTE_LOG_INFO);
	if (lg_logtype < 0)
		lg_logtype = RTE_LOGTYPE_USER1;
	if (parse_args(argc, argv, &lg.opt) != 0) {
		usage(stderr, "phub-loadgen");
		rte_eal_cleanup();
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	lg.tsc_hz = rte_get_tsc_hz();

	for (uint16_t i = 0; i < lg.opt.n_workers_list; i++)
		max_workers = RTE_MAX(max_workers, lg.opt.workers[i]);
	rc = lg_workers_init(&lg, max_workers);
	if (rc == 0)
		rc = port_init(&lg);
	if (rc == 0 && lg.opt.reflect)
		rc = lg_reflect_run(&lg, lg.opt.reflect_acks, lg.opt.reflect_ackv);
	if (rc == 0 && !lg.opt.reflect && lg.opt.bulk_workers > 0)
		rc = lg_bulk_init(&lg);
	for (unsigned int run = 0; rc == 0 && !lg_quit && !lg.opt.reflect &&
	     run < (unsigned int)lg.opt.repeat * lg.opt.n_workers_list; run++) {
		lg_run_reset(&lg, lg.opt.workers[run % lg.opt.n_workers_list], run);
		if (lg.bulk != NULL)
			lg_run_reset(lg.bulk, lg.opt.bulk_workers, run);
		rc = lg.opt.blast ? lg_blast_run(&lg, &measured, &seconds) :
			lg_session_run(&lg, &measured, &seconds);
		if (rc == 0)
			report(&lg, &measured, seconds);
		fflush(stdout);
	}
	if (rc != 0)
		LG_LOG(ERR, "stopped: %s", strerror(-rc));

	rte_pktmbuf_free_bulk(lg.txq, lg.n_txq);
	/*
	 * --blast: the server's last answers (a summing floor's held frames among them) land
	 * before we leave. A memif server's interrupt thread unmaps our region as we go, while its
	 * data lcore may still copy into it (net_memif 22.11 has no guard there): the floor died
	 * of it 1 run in 3 at 8 KB. The floor servers and the PBox now gate their memif bursts
	 * (lib/net/phub_memif_gate.h); testpmd does not, and the drain still spares it.
	 */
	port_valid = rte_eth_dev_is_valid_port(lg.opt.port_id);
	if (lg.opt.blast && port_valid)
		lg_blast_drain(&lg);
	lg_bulk_free(&lg);
	lg_workers_free(&lg);
	/* No such port (a --vdev that failed): nothing to stop, and no burst on it. */
	if (port_valid) {
		rte_eth_dev_stop(lg.opt.port_id);
		rte_eth_dev_close(lg.opt.port_id);
	}
	/* After the port: its close frees the frames still queued, which point into these. */
	if (lg.payload != NULL)
		rte_pktmbuf_free(lg.payload);
	if (lg.refs != NULL) {
		free(lg.refs->all);
		free(lg.refs->free);
		free(lg.refs);
	}
	rte_eal_cleanup();
	return rc == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
