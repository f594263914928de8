/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * steer_tap_check: a DPDK receiver that counts on which Rx queue each kind of frame arrives
 * (UDP per destination port, fragments, ARP, ICMP, others) and whether UDP checksums are right.
 *
 *   steer_tap_check EAL-ARGS -- [--queues N] [--base PORT] [--iface NAME] [--no-steer]
 *                   [--bpf-obj PATH] [--mtu M] [--mbuf-size BYTES] [--seconds S] [--busy]
 *                   [--api-checks]
 *
 * Uses the first ethdev port. With --iface (a net_tap port's interface) and without
 * --no-steer it attaches the tap steering program after the port starts. Prints "READY ..."
 * once it receives, runs until SIGINT/SIGTERM or S seconds, then prints one line per non-zero
 * counter and a summary line (see report()). With --api-checks it first checks the steering
 * API's answers to bad requests and detach ("api-check ..." lines). Used by test_steer_tap.py and
 * for the checksum survey.
 */
#include <errno.h>
#include <getopt.h>
#include <net/if.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include "steer_tap.h"
#include "util/phub_parse.h"

#define MAX_QUEUES 16
#define BURST 32
/* UDP destination ports base .. base + PORT_SPAN - 1 are counted one by one. */
#define PORT_SPAN 64
#define RX_DESC 512
#define TX_DESC 512
/*
 * Default data room: a 9000-byte MTU frame with two VLAN tags in one mbuf. af_packet with
 * framesz=16384 needs 16600, af_xdp at most 3800 (a umem chunk is at most a page).
 */
#define MBUF_DATA_ROOM (RTE_PKTMBUF_HEADROOM + 9216)
/* Empty polls of all queues before a short sleep, so that the sender keeps a CPU. */
#define IDLE_POLLS 256
#define IDLE_SLEEP_US 50

enum frame_kind {
	KIND_UDP,		/* a whole UDP datagram, counted per destination port */
	KIND_UDP_OTHER,		/* a whole UDP datagram for a port past the counted span */
	KIND_FRAG,		/* any IPv4 fragment */
	KIND_ICMP,
	KIND_ARP,
	KIND_IPV6,
	KIND_OTHER,
	KIND_MAX,
};

static const char *const kind_names[KIND_MAX] = {
	[KIND_UDP] = "udp",
	[KIND_UDP_OTHER] = "udp-other",
	[KIND_FRAG] = "frag",
	[KIND_ICMP] = "icmp",
	[KIND_ARP] = "arp",
	[KIND_IPV6] = "ipv6",
	[KIND_OTHER] = "other",
};

struct frame_class {
	enum frame_kind kind;
	uint16_t port;		/* UDP destination port */
	bool tagged;		/* carried at least one VLAN tag */
	bool bad_csum;		/* UDP checksum present and wrong */
};

struct queue_counts {
	uint64_t udp[2][PORT_SPAN];		/* [tagged][port - base] */
	uint64_t udp_bad_csum[2][PORT_SPAN];
	uint64_t kind[KIND_MAX];
};

struct check_params {
	const char *iface;
	const char *bpf_obj;
	unsigned int seconds;
	uint16_t mbuf_size;
	uint16_t n_queues;
	uint16_t base;
	uint16_t mtu;
	bool steer;
	bool busy;
	bool api_checks;
};

static volatile sig_atomic_t stop;

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void
usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s EAL-ARGS -- [--queues N] [--base PORT] [--iface NAME] [--no-steer]\n"
		"       [--bpf-obj PATH] [--mtu M] [--mbuf-size BYTES] [--seconds S] [--busy]\n"
		"       [--api-checks]\n", prog);
}

static int
parse_args(int argc, char **argv, struct check_params *p)
{
	static const struct option opts[] = {
		{ "queues", required_argument, NULL, 'q' },
		{ "base", required_argument, NULL, 'b' },
		{ "iface", required_argument, NULL, 'i' },
		{ "no-steer", no_argument, NULL, 'n' },
		{ "bpf-obj", required_argument, NULL, 'o' },
		{ "mtu", required_argument, NULL, 'm' },
		{ "mbuf-size", required_argument, NULL, 'z' },
		{ "seconds", required_argument, NULL, 's' },
		{ "busy", no_argument, NULL, 'B' },
		{ "api-checks", no_argument, NULL, 'A' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'q':
			if (phub_parse_u64(optarg, 1, MAX_QUEUES, &v) < 0)
				return -EINVAL;
			p->n_queues = v;
			break;
		case 'b':
			if (phub_parse_u64(optarg, 0, UINT16_MAX - PORT_SPAN, &v) < 0)
				return -EINVAL;
			p->base = v;
			break;
		case 'i':
			p->iface = optarg;
			break;
		case 'n':
			p->steer = false;
			break;
		case 'o':
			p->bpf_obj = optarg;
			break;
		case 'm':
			if (phub_parse_u64(optarg, 576, 9000, &v) < 0)
				return -EINVAL;
			p->mtu = v;
			break;
		case 'z':
			if (phub_parse_u64(optarg, RTE_MBUF_DEFAULT_BUF_SIZE, UINT16_MAX, &v) < 0)
				return -EINVAL;
			p->mbuf_size = v;
			break;
		case 's':
			if (phub_parse_u64(optarg, 1, 3600, &v) < 0)
				return -EINVAL;
			p->seconds = v;
			break;
		case 'B':
			p->busy = true;
			break;
		case 'A':
			p->api_checks = true;
			break;
		default:
			return -EINVAL;
		}
	}
	if (optind != argc)
		return -EINVAL;
	return 0;
}

/* A datagram's one's complement sum, checksum field and pseudo-header included, is 0xffff. */
static bool
udp_csum_ok(const struct rte_ipv4_hdr *ip, const struct rte_udp_hdr *udp, uint32_t l4_len)
{
	uint32_t sum = rte_raw_cksum(udp, l4_len) + rte_ipv4_phdr_cksum(ip, 0);

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

/* The frame is in one segment: the mempool's data room holds the largest frame. */
static void
classify(const struct rte_mbuf *m, uint16_t base, struct frame_class *c)
{
	const uint8_t *data = rte_pktmbuf_mtod(m, const uint8_t *);
	const struct rte_ether_hdr *eth = (const struct rte_ether_hdr *)data;
	uint32_t len = rte_pktmbuf_data_len(m);
	const struct rte_ipv4_hdr *ip;
	const struct rte_udp_hdr *udp;
	uint32_t off = sizeof(*eth);
	uint32_t ip_len;
	uint32_t ihl;
	uint16_t proto;

	memset(c, 0, sizeof(*c));
	c->kind = KIND_OTHER;
	if (len < sizeof(*eth))
		return;
	proto = rte_be_to_cpu_16(eth->ether_type);
	while (proto == RTE_ETHER_TYPE_VLAN || proto == RTE_ETHER_TYPE_QINQ) {
		const struct rte_vlan_hdr *vlan = (const struct rte_vlan_hdr *)(data + off);

		if (len < off + sizeof(*vlan))
			return;
		c->tagged = true;
		proto = rte_be_to_cpu_16(vlan->eth_proto);
		off += sizeof(*vlan);
	}
	if (proto == RTE_ETHER_TYPE_ARP) {
		c->kind = KIND_ARP;
		return;
	}
	if (proto == RTE_ETHER_TYPE_IPV6) {
		c->kind = KIND_IPV6;
		return;
	}
	if (proto != RTE_ETHER_TYPE_IPV4 || len < off + sizeof(*ip))
		return;
	ip = (const struct rte_ipv4_hdr *)(data + off);
	ihl = (ip->version_ihl & RTE_IPV4_HDR_IHL_MASK) * RTE_IPV4_IHL_MULTIPLIER;
	ip_len = rte_be_to_cpu_16(ip->total_length);
	/* A header that lies about its lengths is "other", never a datagram. */
	if ((ip->version_ihl >> 4) != 4 || ihl < sizeof(*ip) || ip_len < ihl ||
	    len < off + ip_len)
		return;
	if ((rte_be_to_cpu_16(ip->fragment_offset) &
	     (RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) != 0) {
		c->kind = KIND_FRAG;
		return;
	}
	if (ip->next_proto_id == IPPROTO_ICMP) {
		c->kind = KIND_ICMP;
		return;
	}
	if (ip->next_proto_id != IPPROTO_UDP || ip_len < ihl + sizeof(*udp))
		return;
	udp = (const struct rte_udp_hdr *)((const uint8_t *)ip + ihl);
	c->port = rte_be_to_cpu_16(udp->dst_port);
	c->kind = (c->port >= base && c->port - base < PORT_SPAN) ? KIND_UDP : KIND_UDP_OTHER;
	/* Zero means "no checksum" in IPv4; anything else must verify. */
	c->bad_csum = udp->dgram_cksum != 0 && !udp_csum_ok(ip, udp, ip_len - ihl);
}

static void
count(struct queue_counts *qc, const struct frame_class *c, uint16_t base)
{
	qc->kind[c->kind]++;
	if (c->kind != KIND_UDP)
		return;
	qc->udp[c->tagged][c->port - base]++;
	if (c->bad_csum)
		qc->udp_bad_csum[c->tagged][c->port - base]++;
}

/*
 * Lines, all on stdout:
 *   queue Q udp PORT vlan 0|1 packets N bad_csum B
 *   queue Q KIND packets N            (KIND: udp-other frag icmp arp ipv6 other)
 *   summary packets N bad_csum B span_s T rate_pps R ierrors E imissed M nombuf X
 * span_s is the time from the first to the last frame received.
 */
static void
report(const struct queue_counts *qc, const struct check_params *p, uint16_t port_id,
       uint64_t first_tsc, uint64_t last_tsc)
{
	uint64_t total = 0;
	uint64_t bad = 0;
	struct rte_eth_stats st;
	double span = 0.0;
	double rate = 0.0;
	unsigned int q;
	unsigned int t;
	unsigned int i;
	unsigned int k;

	for (q = 0; q < p->n_queues; q++) {
		for (t = 0; t < 2; t++) {
			for (i = 0; i < PORT_SPAN; i++) {
				if (qc[q].udp[t][i] == 0)
					continue;
				printf("queue %u udp %u vlan %u packets %" PRIu64
				       " bad_csum %" PRIu64 "\n", q, p->base + i, t,
				       qc[q].udp[t][i], qc[q].udp_bad_csum[t][i]);
				bad += qc[q].udp_bad_csum[t][i];
			}
		}
		for (k = 0; k < KIND_MAX; k++) {
			total += qc[q].kind[k];
			if (k == KIND_UDP || qc[q].kind[k] == 0)
				continue;
			printf("queue %u %s packets %" PRIu64 "\n", q, kind_names[k],
			       qc[q].kind[k]);
		}
	}
	if (total > 1 && last_tsc > first_tsc) {
		span = (double)(last_tsc - first_tsc) / rte_get_tsc_hz();
		rate = (double)(total - 1) / span;
	}
	memset(&st, 0, sizeof(st));
	rte_eth_stats_get(port_id, &st);
	printf("summary packets %" PRIu64 " bad_csum %" PRIu64 " span_s %.3f rate_pps %.0f"
	       " ierrors %" PRIu64 " imissed %" PRIu64 " nombuf %" PRIu64 "\n", total, bad,
	       span, rate, st.ierrors, st.imissed, st.rx_nombuf);
	fflush(stdout);
}

static int
api_check(const char *what, int got, int want)
{
	printf("api-check %s: %s (got %d, want %d)\n", got == want ? "ok" : "FAIL", what, got,
	       want);
	return got == want ? 0 : -1;
}

/*
 * The steering API on requests it must refuse, and detach then attach again on the real
 * interface; the port's steering is attached when this returns 0.
 */
static int
api_checks(const struct check_params *p)
{
	const char *missing = "phubnone0";
	char path[64];
	int bad = 0;

	bad |= api_check("an interface that does not exist is ENODEV",
			 phub_steer_tap_attach(missing, p->base, p->n_queues, p->bpf_obj), -ENODEV);
	bad |= api_check("and attach did not create it", (int)if_nametoindex(missing), 0);
	bad |= api_check("a device that is not a tap is EINVAL",
			 phub_steer_tap_attach("lo", p->base, p->n_queues, p->bpf_obj), -EINVAL);
	bad |= api_check("zero queues is EINVAL",
			 phub_steer_tap_attach(p->iface, p->base, 0, p->bpf_obj), -EINVAL);
	bad |= api_check("ports past 65535 are ERANGE",
			 phub_steer_tap_attach(p->iface, 65534, 2, p->bpf_obj), -ERANGE);
	bad |= api_check("a missing object file is ENOENT",
			 phub_steer_tap_attach(p->iface, p->base, p->n_queues,
					       "/nonexistent/steer_tap.bpf.o"), -ENOENT);
	bad |= api_check("a short path buffer is ENAMETOOLONG",
			 phub_steer_tap_obj_path(path, 4), -ENAMETOOLONG);
	bad |= api_check("attach", phub_steer_tap_attach(p->iface, p->base, p->n_queues,
							 p->bpf_obj), 0);
	bad |= api_check("detach", phub_steer_tap_detach(p->iface), 0);
	bad |= api_check("detach without a program", phub_steer_tap_detach(p->iface), 0);
	bad |= api_check("attach again", phub_steer_tap_attach(p->iface, p->base, p->n_queues,
							       p->bpf_obj), 0);
	return bad != 0 ? -1 : 0;
}

static int
port_start(uint16_t port_id, const struct check_params *p, struct rte_mempool *mp)
{
	struct rte_eth_conf conf;
	uint16_t q;
	int ret;

	memset(&conf, 0, sizeof(conf));
	ret = rte_eth_dev_configure(port_id, p->n_queues, p->n_queues, &conf);
	if (ret < 0)
		return ret;
	/* net_tap attaches kernel queues in set-up order: ids must go up for the steering. */
	for (q = 0; q < p->n_queues; q++) {
		ret = rte_eth_rx_queue_setup(port_id, q, RX_DESC, rte_eth_dev_socket_id(port_id),
					     NULL, mp);
		if (ret < 0)
			return ret;
		ret = rte_eth_tx_queue_setup(port_id, q, TX_DESC, rte_eth_dev_socket_id(port_id),
					     NULL);
		if (ret < 0)
			return ret;
	}
	if (p->mtu != 0) {
		ret = rte_eth_dev_set_mtu(port_id, p->mtu);
		if (ret < 0)
			fprintf(stderr, "steer_tap_check: set MTU %u: %s (going on)\n", p->mtu,
				rte_strerror(-ret));
	}
	return rte_eth_dev_start(port_id);
}

int
main(int argc, char **argv)
{
	struct check_params p = {
		.seconds = 60,
		.mbuf_size = MBUF_DATA_ROOM,
		.n_queues = 2,
		.base = 47000,
		.steer = true,
	};
	static struct queue_counts qc[MAX_QUEUES];
	struct rte_mbuf *pkts[BURST];
	struct rte_ether_addr mac;
	struct rte_mempool *mp;
	uint64_t first_tsc = 0;
	uint64_t last_tsc = 0;
	uint64_t deadline;
	unsigned int idle = 0;
	bool started = false;
	uint16_t port_id = 0;
	int status = 1;
	int ret;

	ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		fprintf(stderr, "steer_tap_check: EAL init: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	argc -= ret;
	argv += ret;
	argv[0] = "steer_tap_check";
	if (parse_args(argc, argv, &p) < 0) {
		usage(argv[0]);
		goto out;
	}
	if (p.steer && p.iface == NULL) {
		fprintf(stderr, "steer_tap_check: steering needs --iface (or pass --no-steer)\n");
		goto out;
	}
	if (rte_eth_dev_count_avail() == 0) {
		fprintf(stderr, "steer_tap_check: no ethdev port (pass --vdev=...)\n");
		goto out;
	}
	port_id = rte_eth_find_next(0);

	mp = rte_pktmbuf_pool_create("rx", 4095, 128, 0, p.mbuf_size, rte_socket_id());
	if (mp == NULL) {
		fprintf(stderr, "steer_tap_check: mbuf pool: %s\n", rte_strerror(rte_errno));
		goto out;
	}
	ret = port_start(port_id, &p, mp);
	if (ret < 0) {
		fprintf(stderr, "steer_tap_check: port %u start: %s\n", port_id,
			rte_strerror(-ret));
		goto out;
	}
	started = true;
	if (p.api_checks && (!p.steer || api_checks(&p) < 0)) {
		fprintf(stderr, "steer_tap_check: API checks failed (they need steering)\n");
		goto out;
	}
	if (p.steer) {
		ret = phub_steer_tap_attach(p.iface, p.base, p.n_queues, p.bpf_obj);
		if (ret < 0) {
			fprintf(stderr, "steer_tap_check: steering on %s: %s\n", p.iface,
				strerror(-ret));
			goto out;
		}
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	rte_eth_macaddr_get(port_id, &mac);
	printf("READY port %u mac " RTE_ETHER_ADDR_PRT_FMT " queues %u steer %s\n", port_id,
	       RTE_ETHER_ADDR_BYTES(&mac), p.n_queues, p.steer ? "bpf" : "none");
	fflush(stdout);

	deadline = rte_get_tsc_cycles() + (uint64_t)p.seconds * rte_get_tsc_hz();
	while (!stop && rte_get_tsc_cycles() < deadline) {
		bool got = false;
		uint16_t q;

		for (q = 0; q < p.n_queues; q++) {
			uint16_t n = rte_eth_rx_burst(port_id, q, pkts, BURST);
			uint16_t i;

			if (n == 0)
				continue;
			got = true;
			last_tsc = rte_get_tsc_cycles();
			if (first_tsc == 0)
				first_tsc = last_tsc;
			for (i = 0; i < n; i++) {
				struct frame_class c;

				classify(pkts[i], p.base, &c);
				count(&qc[q], &c, p.base);
			}
			rte_pktmbuf_free_bulk(pkts, n);
		}
		if (got || p.busy) {
			idle = 0;
		} else if (++idle >= IDLE_POLLS) {
			idle = 0;
			usleep(IDLE_SLEEP_US);
		}
	}
	report(qc, &p, port_id, first_tsc, last_tsc);
	status = 0;

out:
	if (started) {
		rte_eth_dev_stop(port_id);
		rte_eth_dev_close(port_id);
	}
	rte_eal_cleanup();
	return status;
}
