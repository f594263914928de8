/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * phub-pbox: the PHub parameter-server appliance. Loads one JSON config,
 * starts EAL, sets up ports and the per-lcore state, launches the data lcores
 * and runs the control plane on the main lcore until SIGINT or SIGTERM.
 */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_alarm.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include "pbox.h"
#include "steer_tap.h"

struct pbox pbox = { .jobs_lock = PTHREAD_MUTEX_INITIALIZER };
int pbox_logtype;

const char *const pbox_net_drop_names[PBOX_NET_DROP_MAX] = {
#define PBOX_NET_DROP_NAME(n, s) [PBOX_NET_DROP_##n] = s,
	PBOX_NET_DROPS(PBOX_NET_DROP_NAME)
#undef PBOX_NET_DROP_NAME
};

static void
usage(FILE *f, const char *prog)
{
	fprintf(f,
		"Usage: %s -c FILE [--check-config] [--no-steering]\n"
		"\n"
		"PHub parameter-server appliance (PBox) on DPDK.\n"
		"\n"
		"  -c, --config FILE   the appliance's JSON configuration (docs/config.md)\n"
		"      --check-config  validate FILE and the driver profiles it names, print the\n"
		"                      effective configuration and its plan, and exit\n"
		"      --no-steering   set up no hardware steering: every datagram reaches the lcore\n"
		"                      of its chunk through the software hand-off (diagnostics)\n"
		"  -V, --version       print the version and exit\n"
		"  -h, --help          this text\n"
		"\n"
		"Stop with SIGINT or SIGTERM. Telemetry: dpdk-telemetry.py -f <eal.file_prefix>,\n"
		"commands /phub/stats, /phub/lcores, /phub/ports, /phub/jobs, /phub/job,<id>,\n"
		"/phub/chunkmap,<id>, /phub/ring, /phub/health (docs/operations.md).\n"
		"Under systemd: WATCHDOG=1 while every lcore makes progress ($WATCHDOG_USEC),\n"
		"log lines to the journal once each with their priority ($JOURNAL_STREAM).\n", prog);
}

/* Where the BPF programs of the configured ports are: an installed PBox must find them. */
static void
print_bpf_objects(const struct phub_config *cfg)
{
	char path[PATH_MAX];

	for (unsigned int i = 0; i < cfg->n_ports; i++) {
		if (cfg->ports[i].driver != PHUB_CONFIG_DRIVER_TAP)
			continue;
		if (phub_steer_tap_obj_path(path, sizeof(path)) != 0)
			path[0] = '\0';
		printf("# tap steering program %s%s\n", path, access(path, R_OK) == 0 ? "" :
				" (missing: tap ports fall back to port_per_lcore or the software "
				"hand-off; set PHUB_BPF_DIR)");
		return;
	}
}

/* The first signal stops after the last checkpoints; a second one at once. */
static void
on_signal(int sig)
{
	(void)sig;
	if (pbox.stop_requested)
		pbox.quit = true;
	pbox.stop_requested = true;
}

/*
 * A port that a peers[].port names (the uplink to the other racks' PBoxes), when another port
 * serves the workers: it carries ring traffic only.
 */
static bool
port_is_uplink_only(const struct phub_config *cfg, unsigned int port)
{
	bool uplink = false, other = false;

	for (unsigned int i = 0; i < cfg->n_peers; i++)
		uplink |= cfg->peers[i].port[0] != '\0' && cfg->peers[i].port_index == port;
	for (unsigned int p = 0; p < cfg->n_ports; p++) {
		bool named = false;

		for (unsigned int i = 0; i < cfg->n_peers; i++)
			named |= cfg->peers[i].port[0] != '\0' && cfg->peers[i].port_index == p;
		other |= !named;
	}
	return uplink && other;
}

/* The per-lcore state, the layout servers and the rings: flat data before launch. */
static int
lcores_init(struct pbox *pb)
{
	const struct phub_config *cfg = &pb->cfg;

	pb->n_lcores = cfg->n_data_lcores;
	pb->lcores = rte_zmalloc("phub_lcores", sizeof(*pb->lcores) * pb->n_lcores,
			RTE_CACHE_LINE_SIZE);
	if (pb->lcores == NULL)
		return -ENOMEM;
	memset(pb->lcore_index, 0xff, sizeof(pb->lcore_index));
	for (uint16_t k = 0; k < pb->n_lcores; k++) {
		struct pbox_lcore *lc = &pb->lcores[k];
		unsigned int lcore = cfg->data_lcores[k];
		char name[RTE_RING_NAMESIZE];
		int socket;

		if (!rte_lcore_is_enabled(lcore)) {
			PBOX_LOG(ERR, "lcore %u is not enabled in EAL: check eal.lcores", lcore);
			return -EINVAL;
		}
		if (rte_eal_get_lcore_state(lcore) != WAIT) {
			PBOX_LOG(ERR, "lcore %u is busy: another task runs on it", lcore);
			return -EBUSY;
		}
		lc->lcore_id = lcore;
		lc->data_index = k;
		lc->udp_port = (uint16_t)phub_config_lcore_udp_port(cfg, lcore);
		for (unsigned int p = 0; p < PBOX_MAX_PORTS; p++)
			lc->queue[p] = PBOX_NO_QUEUE;
		pb->lcore_index[lcore] = (int16_t)k;
		socket = (int)rte_lcore_to_socket_id(lcore);
		snprintf(name, sizeof(name), "phub_inbox_%u", lcore);
		lc->inbox = rte_ring_create(name, PBOX_RING_SIZE, socket, RING_F_SC_DEQ);
		if (lc->inbox == NULL)
			return -rte_errno;
	}
	for (unsigned int i = 0; i < cfg->n_lcore_params; i++) {
		const struct phub_config_lcore_params *lp = &cfg->lcore_params[i];
		const struct phub_config_lcore *cl = phub_config_lcore_find(cfg, lp->lcore);
		struct pbox_lcore *lc = &pb->lcores[pb->lcore_index[lp->lcore]];
		struct phub_layout_server *s = &pb->servers[pb->n_servers];

		lc->rx_ports[lc->n_rxq++] = lp->port;
		lc->queue[lp->port] = lp->queue;
		/* Workers cannot reach an uplink: no chunk of theirs is placed on it. */
		if (port_is_uplink_only(cfg, lp->port))
			continue;
		s->lcore = lp->lcore;
		s->port = lp->port;
		s->port_numa = pb->ports[lp->port].socket;
		s->lcore_numa = cl != NULL && cl->numa_node >= 0 ? cl->numa_node :
			s->port_numa;
		/* A virtual device has no node of its own: any lcore may serve it. */
		if (!cfg->ports[lp->port].is_pci)
			s->port_numa = PHUB_LAYOUT_NUMA_ANY;
		pb->server_lcore_index[pb->n_servers] = lc->data_index;
		pb->n_servers++;
	}
	pb->control_ring = rte_ring_create("phub_control", PBOX_RING_SIZE, (int)rte_socket_id(),
			RING_F_SC_DEQ);
	if (pb->control_ring == NULL)
		return -rte_errno;
	return 0;
}

/* What each lcore sends with: a TX buffer per port it has a queue on, its node's pools. */
static int
lcores_tx_init(struct pbox *pb)
{
	for (uint16_t k = 0; k < pb->n_lcores; k++) {
		struct pbox_lcore *lc = &pb->lcores[k];
		int socket = pb->ports[lc->rx_ports[0]].socket;
		struct phub_net_extref *refs;

		lc->pool = pb->pools[socket];
		lc->indirect_pool = pb->indirect_pools[socket];
		/* A broadcast by reference takes one per rank: PHUB_ENGINE_MAX_WORKERS. */
		refs = rte_zmalloc_socket("phub_model_refs", PHUB_ENGINE_MAX_WORKERS *
				(sizeof(*refs) + sizeof(struct phub_net_extref *)), 0, socket);
		if (refs == NULL)
			return -ENOMEM;
		phub_net_extref_stack_init(&lc->model_refs, refs,
				(struct phub_net_extref **)(void *)(refs + PHUB_ENGINE_MAX_WORKERS),
				PHUB_ENGINE_MAX_WORKERS);
		for (uint16_t p = 0; p < pb->n_ports; p++) {
			if (lc->queue[p] == PBOX_NO_QUEUE)
				continue;
			lc->tx[p] = rte_zmalloc_socket("phub_tx", RTE_ETH_TX_BUFFER_SIZE(PBOX_BURST),
					0, pb->ports[p].socket);
			if (lc->tx[p] == NULL)
				return -ENOMEM;
			rte_eth_tx_buffer_init(lc->tx[p], PBOX_BURST);
			rte_eth_tx_buffer_set_err_callback(lc->tx[p],
					rte_eth_tx_buffer_count_callback, &lc->stats.tx_dropped);
		}
	}
	return 0;
}

/*
 * The engine's release of a PUSH frame it kept as a segment's sum (datapath.c lends them): on
 * the data lcore that completes the segment, or the main lcore when a job is freed.
 */
static void
mbuf_release(void *cookie, void *arg)
{
	(void)arg;
	rte_pktmbuf_free(cookie);
}

static int
rcu_init(struct pbox *pb)
{
	size_t size = rte_rcu_qsbr_get_memsize(pb->n_lcores);

	pb->qsbr = rte_zmalloc("phub_qsbr", size, RTE_CACHE_LINE_SIZE);
	if (pb->qsbr == NULL)
		return -ENOMEM;
	return rte_rcu_qsbr_init(pb->qsbr, pb->n_lcores);
}

static void
print_summary(const struct pbox *pb)
{
	uint64_t rx = 0, tx = 0, pushes = 0, done = 0;

	for (uint16_t k = 0; k < pb->n_lcores; k++) {
		rx += pb->lcores[k].stats.rx_pkts;
		tx += pb->lcores[k].stats.tx_pkts;
		pushes += pb->lcores[k].engine_stats.pushes;
		done += pb->lcores[k].engine_stats.segments_completed;
	}
	PBOX_LOG(NOTICE, "stopped: %" PRIu64 " datagrams in, %" PRIu64 " out, %" PRIu64
			" pushes, %" PRIu64 " segments optimized", rx, tx, pushes, done);
}

static void
intr_barrier_cb(void *arg)
{
	atomic_store((atomic_bool *)arg, true);
}

/*
 * Before rte_eal_cleanup: let the EAL interrupt thread finish what the ports' close left it
 * (a memif disconnect's handlers). DPDK 22.11 does not stop that thread in rte_eal_cleanup,
 * and one still walking its interrupt sources while the cleanup unmapped their memory crashed
 * phub-pbox on SIGTERM (core: the interrupt thread in rte_intr_fd_get, the main thread in
 * munmap; about 1 run in 5 of pbox-memif-reconnect). Alarms run on that thread one callback
 * at a time, so two that fired in turn mean the ones queued before them have run.
 */
static void
intr_thread_settle(void)
{
	for (int round = 0; round < 2; round++) {
		atomic_bool fired = false;
		uint64_t end = rte_rdtsc() + rte_get_tsc_hz();

		if (rte_eal_alarm_set(1, intr_barrier_cb, &fired) != 0)
			return;
		while (!atomic_load(&fired) && rte_rdtsc() < end)
			rte_delay_us_sleep(1000);
		if (!atomic_load(&fired)) {
			rte_eal_alarm_cancel(intr_barrier_cb, &fired);
			return;
		}
	}
}

int
main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, 'k' },
		{ "no-steering", no_argument, NULL, 'n' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char err[PHUB_CONFIG_ERR_MAX];
	const char *config_path = NULL;
	bool check_only = false;
	bool has_memif;
	bool stopping_notified = false;
	char **eal_argv = NULL;
	int opt, eal_argc, rc;
	unsigned int lcore;

	while ((opt = getopt_long(argc, argv, "c:Vh", options, NULL)) != -1) {
		switch (opt) {
		case 'c':
			config_path = optarg;
			break;
		case 'k':
			check_only = true;
			break;
		case 'n':
			pbox.no_steering = true;
			break;
		case 'V':
			printf("phub-pbox %s\n", PHUB_VERSION);
			return EXIT_SUCCESS;
		case 'h':
			usage(stdout, argv[0]);
			return EXIT_SUCCESS;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (config_path == NULL || optind != argc) {
		usage(stderr, argv[0]);
		return 2;
	}
	rc = phub_config_load(config_path, &pbox.cfg, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "phub-pbox: %s\n", err);
		return EXIT_FAILURE;
	}
	if (check_only) {
		phub_config_dump(&pbox.cfg, stdout);
		phub_config_dump_plan(&pbox.cfg, stdout);
		print_bpf_objects(&pbox.cfg);
		pbox_memory_plan(&pbox.cfg, stdout);
		rc = pbox_memory_check_jobs(&pbox.cfg, config_path, stdout);
		if (rc == 0)
			printf("# %s: configuration OK\n", config_path);
		phub_config_free(&pbox.cfg);
		return rc == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
	}

	eal_argc = phub_config_eal_argv(&pbox.cfg, argv[0], &eal_argv);
	if (eal_argc < 0) {
		fprintf(stderr, "phub-pbox: out of memory building the EAL arguments\n");
		return EXIT_FAILURE;
	}
	pbox_xdp_eal_args(eal_argc, eal_argv);
	/* Before EAL's first line: under systemd, each line once in the journal (log.c). */
	pbox_log_init();
	pbox.test_hooks = getenv("PHUB_PBOX_TEST_HOOKS") != NULL &&
		strcmp(getenv("PHUB_PBOX_TEST_HOOKS"), "1") == 0;
	rc = rte_eal_init(eal_argc, eal_argv);
	if (rc < 0)
		rte_exit(EXIT_FAILURE, "EAL start failed: %s. Check eal.* in %s: lcores that exist, "
				"eal.memory_mb within what is free (or eal.no_huge), and that no other "
				"process uses file prefix '%s'\n", rte_strerror(rte_errno),
				config_path, pbox.cfg.eal.file_prefix);
	pbox_logtype = rte_log_register_type_and_pick_level("phub.pbox", RTE_LOG_INFO);
	if (pbox_logtype < 0)
		pbox_logtype = RTE_LOGTYPE_USER1;
	pbox.start_tsc = rte_rdtsc();
	pbox_memory_control_node(&pbox);

	rc = lcores_init(&pbox);
	if (rc == 0)
		rc = rcu_init(&pbox);
	if (rc == 0)
		rc = pbox_ports_init(&pbox);
	if (rc == 0) {
		/* Servers were built before the ports knew their NUMA node: refresh. */
		for (uint32_t s = 0; s < pbox.n_servers; s++)
			if (pbox.cfg.ports[pbox.servers[s].port].is_pci)
				pbox.servers[s].port_numa = pbox.ports[pbox.servers[s].port].socket;
		rc = lcores_tx_init(&pbox);
	}
	if (rc == 0) {
		struct phub_engine_params ep = { .release = mbuf_release };

		pbox.engine = phub_engine_create_with(&ep);
		rc = pbox.engine == NULL ? -ENOMEM : 0;
	}
	if (rc == 0)
		rc = pbox_memif_gate_init(&pbox);
	if (rc == 0)
		rc = pbox_control_init(&pbox);
	/* Jobs of the checkpoint directory come back before any lcore runs. */
	if (rc == 0)
		rc = pbox_checkpoint_init(&pbox);
	if (rc == 0)
		rc = pbox_checkpoint_restore(&pbox);
	if (rc == 0 && pbox.cfg.telemetry_enabled)
		rc = pbox_telemetry_init(&pbox);
	if (rc != 0)
		rte_exit(EXIT_FAILURE, "start-up failed: %s (see the messages above)\n",
				strerror(-rc));

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	for (uint16_t k = 0; k < pbox.n_lcores; k++) {
		lcore = pbox.lcores[k].lcore_id;
		rc = rte_eal_remote_launch(pbox_lcore_main, &pbox.lcores[k], lcore);
		if (rc != 0)
			rte_exit(EXIT_FAILURE, "cannot launch lcore %u: %s\n", lcore,
					rte_strerror(-rc));
	}
	PBOX_LOG(NOTICE, "ready: %u ports, %u data lcores, control on UDP port %u, %s",
			pbox.n_ports, pbox.n_lcores, pbox.cfg.udp_base_port,
			phub_kernels_isa_name(phub_kernels_get()->isa));
	pbox_health_init(&pbox);
	rc = pbox_notify("READY=1\nSTATUS=serving");
	if (rc != 0)
		PBOX_LOG(WARNING, "cannot tell systemd we are ready ($NOTIFY_SOCKET): %s",
				strerror(-rc));

	while (!pbox.quit) {
		pbox_control_poll(&pbox);
		pbox_checkpoint_poll(&pbox);
		pbox_health_poll(&pbox);
		if (!pbox.stop_requested)
			continue;
		if (!stopping_notified) {
			pbox_notify("STOPPING=1\nSTATUS=writing checkpoints");
			stopping_notified = true;
		}
		/* The lcores run on until every job is at an iteration boundary, or not long. */
		if (pbox_checkpoint_drain(&pbox))
			pbox.quit = true;
	}

	PBOX_LOG(NOTICE, "stopping");
	rte_eal_mp_wait_lcore();
	phub_memif_gate_fini();
	pbox_checkpoint_fini(&pbox);
	print_summary(&pbox);
	pbox_control_fini(&pbox);
	has_memif = pbox_has_memif_port(&pbox);
	if (has_memif)
		PBOX_LOG(INFO, "the EAL's cleanup is left to the exit (a net_memif port)");
	/*
	 * The ports first: their queues may still hold MODEL frames whose payload is a job's model
	 * memory (sent by reference), which the engine frees.
	 */
	pbox_ports_close(&pbox);
	pthread_mutex_lock(&pbox.jobs_lock);
	phub_engine_free(pbox.engine);
	pbox.engine = NULL;
	pthread_mutex_unlock(&pbox.jobs_lock);
	phub_config_free(&pbox.cfg);
	/*
	 * Not after a net_memif port: DPDK 22.11's memif frees its listening socket's interrupt
	 * handle at the port's close without unregistering the handle from the EAL interrupt
	 * thread, which reads it whenever it rebuilds its wait set; rte_eal_cleanup unmaps the
	 * EAL's memory under it, and it died there (SIGSEGV in rte_intr_fd_get, the main thread
	 * in munmap: 1 run in 3 to 5 of pbox-memif-reconnect, with intr_thread_settle or not).
	 * The process's exit releases the same memory; the close already removed the socket file
	 * and the telemetry socket goes at exit.
	 */
	if (!has_memif) {
		intr_thread_settle();
		rte_eal_cleanup();
	}
	free(eal_argv);
	pbox_xdp_fini();
	return EXIT_SUCCESS;
}
