/* SPDX-License-Identifier: BSD-3-Clause */
/* Ports: finding the devices, mempools on their NUMA nodes, queues per lcore, steering. */

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mempool.h>
#include <rte_thash.h>

#include "pbox.h"
#include "rss.h"
#include "steer_tap.h"

/* The ethdev name of a configured device: a PCI address, or a vdev's name before its args. */
static void
device_ethdev_name(const struct phub_config_port *cp, char *name, size_t size)
{
	const char *comma = strchr(cp->device, ',');
	size_t len = comma != NULL ? (size_t)(comma - cp->device) : strlen(cp->device);

	if (len >= size)
		len = size - 1;
	memcpy(name, cp->device, len);
	name[len] = '\0';
}

/* The tap interface name from "net_tapN,iface=NAME,...", or "" when none is given. */
static void
tap_ifname(const char *device, char *ifname, size_t size)
{
	const char *p = strstr(device, "iface=");
	size_t len;

	ifname[0] = '\0';
	if (p == NULL)
		return;
	p += strlen("iface=");
	len = strcspn(p, ",");
	if (len >= size)
		len = size - 1;
	memcpy(ifname, p, len);
	ifname[len] = '\0';
}

static uint16_t
cfg_port_mbuf_size(const struct phub_config *cfg, unsigned int i)
{
	const struct phub_config_driver *drv = phub_config_port_driver(cfg, i);
	uint32_t room = RTE_PKTMBUF_HEADROOM + cfg->ports[i].mtu + RTE_ETHER_HDR_LEN +
		RTE_ETHER_CRC_LEN + 2 * RTE_VLAN_HLEN;

	if (drv != NULL && drv->mbuf_size > room)
		room = drv->mbuf_size;
	return (uint16_t)RTE_MIN(room, (uint32_t)UINT16_MAX);
}

static uint16_t
port_mbuf_size(const struct pbox *pb, unsigned int i)
{
	return cfg_port_mbuf_size(&pb->cfg, i);
}

/*
 * Mbufs of a node's direct pool: descriptors, bursts in flight, inbox rings, MODEL payloads,
 * and the frames each lcore's P3 hold may keep (config priority_hold).
 */
static uint32_t
pool_mbufs(uint32_t descriptors, uint32_t n_lcores, uint32_t hold)
{
	return descriptors + n_lcores * (PBOX_RING_SIZE + 4 * PBOX_BURST + 512 + hold) + 4096;
}

static uint32_t
indirect_pool_mbufs(uint32_t n_lcores)
{
	return 8192 + n_lcores * 2048;
}

uint64_t
pbox_pools_estimate_bytes(const struct phub_config *cfg)
{
	uint64_t per_mbuf = sizeof(struct rte_mbuf) + RTE_CACHE_LINE_SIZE;
	uint32_t need = 0;
	uint16_t room = 0;

	/* As if every port were on one node: the sum is the same, the pools fewer. */
	for (unsigned int i = 0; i < cfg->n_ports; i++) {
		need += (uint32_t)cfg->ports[i].n_lcores *
			(cfg->ports[i].rx_desc + cfg->ports[i].tx_desc);
		room = RTE_MAX(room, cfg_port_mbuf_size(cfg, i));
	}
	if (need == 0)
		return 0;
	return pool_mbufs(need, cfg->n_data_lcores, cfg->priority_hold) * (per_mbuf + room) +
		indirect_pool_mbufs(cfg->n_data_lcores) * per_mbuf;
}

/*
 * One direct pool per NUMA node that has ports, sized for every descriptor of
 * those ports plus each lcore's cache and bursts, and one pool of indirect
 * mbufs for the headers of shared MODEL payloads.
 */
static int
pools_init(struct pbox *pb)
{
	uint32_t need[RTE_MAX_NUMA_NODES] = { 0 };
	uint16_t room[RTE_MAX_NUMA_NODES] = { 0 };

	for (unsigned int i = 0; i < pb->cfg.n_ports; i++) {
		const struct phub_config_port *cp = &pb->cfg.ports[i];
		int socket = pb->ports[i].socket;

		need[socket] += (uint32_t)cp->n_lcores * (cp->rx_desc + cp->tx_desc);
		room[socket] = RTE_MAX(room[socket], port_mbuf_size(pb, i));
	}
	for (unsigned int s = 0; s < RTE_MAX_NUMA_NODES; s++) {
		char name[RTE_MEMPOOL_NAMESIZE];
		uint32_t n;

		if (need[s] == 0)
			continue;
		/* Bursts in flight, inbox rings and MODEL payloads held for broadcast. */
		n = pool_mbufs(need[s], pb->n_lcores, pb->cfg.priority_hold);
		snprintf(name, sizeof(name), "phub_mbuf_%u", s);
		pb->pools[s] = rte_pktmbuf_pool_create(name, n, 256, 0, room[s], (int)s);
		if (pb->pools[s] == NULL) {
			PBOX_LOG(ERR, "cannot create a pool of %u mbufs of %u bytes on NUMA node %u: "
					"%s; give EAL more memory (eal.memory_mb) or fewer descriptors",
					n, room[s], s, rte_strerror(rte_errno));
			return -ENOMEM;
		}
		snprintf(name, sizeof(name), "phub_hdr_%u", s);
		pb->indirect_pools[s] = rte_pktmbuf_pool_create(name, indirect_pool_mbufs(pb->n_lcores),
				256, 0, 0, (int)s);
		if (pb->indirect_pools[s] == NULL) {
			PBOX_LOG(ERR, "cannot create the indirect mbuf pool on NUMA node %u: %s",
					s, rte_strerror(rte_errno));
			return -ENOMEM;
		}
	}
	return 0;
}

/* rte_flow: UDP to our address and lcore k's port goes to the queue of lcore k. */
static int
steer_rte_flow(struct pbox *pb, struct pbox_port *port, unsigned int pi)
{
	const struct phub_config_port *cp = &pb->cfg.ports[pi];

	for (uint16_t q = 0; q < cp->n_lcores; q++) {
		int udp = phub_config_lcore_udp_port(&pb->cfg, cp->lcores[q]);
		struct pbox_flow_rule rule;
		struct rte_flow_error error;

		pbox_flow_rule_build(&rule, port->ipv4, (uint16_t)udp, q);
		if (rte_flow_create(port->port_id, &rule.attr, rule.pattern, rule.actions,
				&error) == NULL) {
			PBOX_LOG(WARNING, "port %s: rte_flow rule for UDP port %d refused: %s",
					port->name, udp, error.message != NULL ? error.message : "?");
			rte_flow_flush(port->port_id, &error);
			return -ENOTSUP;
		}
	}
	return 0;
}

/*
 * Before rte_eth_dev_configure: RSS on UDP with a hash of the destination port alone, when
 * the profile may steer with RSS and the PMD hashes UDP. L4_DST_ONLY where the PMD offers it,
 * else the whole 4-tuple under a key that only lets the destination port through (rss.h).
 */
static void
rss_request(struct pbox *pb, struct pbox_port *port, unsigned int pi,
		const struct rte_eth_dev_info *info, struct rte_eth_conf *conf)
{
	const struct phub_config_driver *drv = phub_config_port_driver(&pb->cfg, pi);

	port->rss_requested = false;
	if (pb->no_steering || pb->cfg.ports[pi].n_lcores == 1 ||
	    (drv->steering != PHUB_CONFIG_STEERING_RSS &&
	     drv->fallback != PHUB_CONFIG_STEERING_RSS))
		return;
	if (!(info->flow_type_rss_offloads & RTE_ETH_RSS_NONFRAG_IPV4_UDP)) {
		PBOX_LOG(NOTICE, "port %s: the PMD offers no RSS on IPv4/UDP (offloads 0x%" PRIx64
				")", port->name, info->flow_type_rss_offloads);
		return;
	}
	if (info->hash_key_size < 16 || info->hash_key_size > PBOX_RSS_KEY_MAX ||
	    info->reta_size == 0 || info->reta_size > PBOX_RSS_RETA_MAX) {
		PBOX_LOG(NOTICE, "port %s: RSS key of %u bytes, RETA of %u entries: not what the "
				"PBox can program", port->name, info->hash_key_size, info->reta_size);
		return;
	}
	port->rss_mode = info->flow_type_rss_offloads & RTE_ETH_RSS_L4_DST_ONLY ?
		PBOX_RSS_DST_ONLY : PBOX_RSS_DPORT_KEY;
	pbox_rss_dport_key(port->rss_key, info->hash_key_size, port->rss_mode, info->reta_size);
	conf->rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
	conf->rx_adv_conf.rss_conf.rss_hf = RTE_ETH_RSS_NONFRAG_IPV4_UDP;
	if (port->rss_mode == PBOX_RSS_DST_ONLY)
		conf->rx_adv_conf.rss_conf.rss_hf |= RTE_ETH_RSS_L4_DST_ONLY;
	conf->rx_adv_conf.rss_conf.rss_key = port->rss_key;
	conf->rx_adv_conf.rss_conf.rss_key_len = info->hash_key_size;
	port->rss_requested = true;
}

/*
 * RSS on the UDP destination port alone: check the PMD took the hash fields asked for in
 * rss_request() (and the key, without which the 4-tuple hash depends on the source), compute
 * the Toeplitz hash of each lcore's port with the key the PMD uses and point that RETA entry
 * at the lcore's queue. Ports whose entries collide (a PMD that kept its own key under
 * L4_DST_ONLY) land on the wrong lcore and are handed over.
 */
static int
steer_rss(struct pbox *pb, struct pbox_port *port, unsigned int pi)
{
	const struct phub_config_port *cp = &pb->cfg.ports[pi];
	struct rte_eth_rss_reta_entry64 reta[PBOX_RSS_RETA_MAX / RTE_ETH_RETA_GROUP_SIZE];
	uint16_t ports[PHUB_CONFIG_MAX_QUEUES], queues[PHUB_CONFIG_MAX_QUEUES];
	uint16_t table[PBOX_RSS_RETA_MAX];
	struct rte_eth_dev_info info;
	uint8_t key[PBOX_RSS_KEY_MAX];
	struct rte_eth_rss_conf conf = { .rss_key = key, .rss_key_len = sizeof(key) };
	unsigned int collisions;
	int rc;

	if (!port->rss_requested)
		return -ENOTSUP;
	rc = rte_eth_dev_info_get(port->port_id, &info);
	if (rc != 0 || info.reta_size == 0 || info.reta_size > PBOX_RSS_RETA_MAX)
		return -ENOTSUP;
	memset(key, 0, sizeof(key));
	conf.rss_key_len = RTE_MIN(info.hash_key_size, (uint8_t)sizeof(key));
	rc = rte_eth_dev_rss_hash_conf_get(port->port_id, &conf);
	if (rc != 0) {
		PBOX_LOG(WARNING, "port %s: cannot read back the RSS configuration: %s", port->name,
				rte_strerror(-rc));
		return -ENOTSUP;
	}
	if (!(conf.rss_hf & RTE_ETH_RSS_NONFRAG_IPV4_UDP) ||
	    (port->rss_mode == PBOX_RSS_DST_ONLY && !(conf.rss_hf & RTE_ETH_RSS_L4_DST_ONLY)) ||
	    (port->rss_mode == PBOX_RSS_DPORT_KEY &&
	     memcmp(key, port->rss_key, info.hash_key_size) != 0)) {
		PBOX_LOG(WARNING, "port %s: the PMD did not take RSS on the UDP destination port "
				"(rss_hf 0x%" PRIx64 "%s): the RETA would not match its hash",
				port->name, conf.rss_hf, port->rss_mode == PBOX_RSS_DPORT_KEY ?
				", key changed" : "");
		return -ENOTSUP;
	}
	for (uint16_t q = 0; q < cp->n_lcores; q++) {
		ports[q] = (uint16_t)phub_config_lcore_udp_port(&pb->cfg, cp->lcores[q]);
		queues[q] = q;
	}
	collisions = pbox_rss_reta_fill(port->rss_mode, key, info.reta_size, ports, queues,
			cp->n_lcores, table);
	if (collisions != 0)
		PBOX_LOG(WARNING, "port %s: %u lcore port(s) share a RETA entry with another: "
				"their datagrams are handed over in software", port->name, collisions);
	memset(reta, 0, sizeof(reta));
	for (unsigned int i = 0; i < info.reta_size; i++) {
		reta[i / RTE_ETH_RETA_GROUP_SIZE].mask |= UINT64_C(1) << (i % RTE_ETH_RETA_GROUP_SIZE);
		reta[i / RTE_ETH_RETA_GROUP_SIZE].reta[i % RTE_ETH_RETA_GROUP_SIZE] = table[i];
	}
	rc = rte_eth_dev_rss_reta_update(port->port_id, reta, info.reta_size);
	if (rc != 0) {
		PBOX_LOG(WARNING, "port %s: RETA update refused: %s", port->name, rte_strerror(-rc));
		return -ENOTSUP;
	}
	PBOX_LOG(INFO, "port %s: RSS on the UDP destination port (%s), RETA of %u entries",
			port->name, port->rss_mode == PBOX_RSS_DST_ONLY ? "L4_DST_ONLY" :
			"4-tuple, destination-port key", info.reta_size);
	return 0;
}

static int
steer_tap(struct pbox *pb, struct pbox_port *port, unsigned int pi)
{
	const struct phub_config_port *cp = &pb->cfg.ports[pi];
	int rc;

	if (port->ifname[0] == '\0') {
		PBOX_LOG(WARNING, "port %s: net_tap without iface=NAME: cannot attach steering",
				port->name);
		return -EINVAL;
	}
	/*
	 * The program maps base + 1 + k to queue k: right when queue k is data
	 * lcore k's, which holds when the port is served by every data lcore.
	 */
	if (cp->n_lcores != pb->n_lcores)
		PBOX_LOG(WARNING, "port %s: served by %u of %u lcores: some datagrams will be "
				"handed over between lcores", port->name, cp->n_lcores, pb->n_lcores);
	rc = phub_steer_tap_attach(port->ifname, pb->cfg.udp_base_port, cp->n_lcores, NULL);
	if (rc != 0)
		PBOX_LOG(WARNING, "port %s: BPF steering on %s failed: %s", port->name,
				port->ifname, strerror(-rc));
	return rc;
}

static int
steer_try(struct pbox *pb, struct pbox_port *port, unsigned int pi, enum phub_config_steering s)
{
	switch (s) {
	case PHUB_CONFIG_STEERING_RTE_FLOW:
		return steer_rte_flow(pb, port, pi);
	case PHUB_CONFIG_STEERING_RSS:
		return steer_rss(pb, port, pi);
	case PHUB_CONFIG_STEERING_TAP_BPF:
		return steer_tap(pb, port, pi);
	case PHUB_CONFIG_STEERING_PORT_PER_LCORE:
		return pb->cfg.ports[pi].n_lcores == 1 ? 0 : -ENOTSUP;
	default:
		return -ENOTSUP;
	}
}

/*
 * Use the profile's method if it really works here, else its fallback; with
 * neither, datagrams are handed to their lcore in software, which is correct
 * but costs a ring hop: say so.
 */
static void
steer_port(struct pbox *pb, struct pbox_port *port, unsigned int pi)
{
	const struct phub_config_driver *drv = phub_config_port_driver(&pb->cfg, pi);

	if (pb->cfg.ports[pi].n_lcores == 1) {
		port->steering = PHUB_CONFIG_STEERING_PORT_PER_LCORE;
		return;
	}
	if (pb->no_steering) {
		PBOX_LOG(WARNING, "port %s: --no-steering: datagrams reach their lcore through "
				"the software hand-off", port->name);
		port->steering = PHUB_CONFIG_STEERING_NONE;
		return;
	}
	if (steer_try(pb, port, pi, drv->steering) == 0) {
		port->steering = drv->steering;
	} else if (drv->fallback != PHUB_CONFIG_STEERING_NONE &&
		   steer_try(pb, port, pi, drv->fallback) == 0) {
		PBOX_LOG(WARNING, "port %s: steering %s does not work here, using %s", port->name,
				phub_config_steering_name(drv->steering),
				phub_config_steering_name(drv->fallback));
		port->steering = drv->fallback;
	} else {
		PBOX_LOG(WARNING, "port %s: no hardware steering works (%s): datagrams reach "
				"their lcore through a software hand-off", port->name,
				phub_config_steering_name(drv->steering));
		port->steering = PHUB_CONFIG_STEERING_NONE;
	}
	PBOX_LOG(INFO, "port %s: steering %s", port->name,
			phub_config_steering_name(port->steering));
}

static int
port_setup(struct pbox *pb, unsigned int pi)
{
	const struct phub_config_port *cp = &pb->cfg.ports[pi];
	const struct phub_config_driver *drv = phub_config_port_driver(&pb->cfg, pi);
	struct pbox_port *port = &pb->ports[pi];
	struct rte_eth_conf conf;
	struct rte_eth_dev_info info;
	uint16_t rx_desc = cp->rx_desc, tx_desc = cp->tx_desc;
	uint32_t max_mtu;
	int rc;

	memset(&conf, 0, sizeof(conf));
	rc = rte_eth_dev_info_get(port->port_id, &info);
	if (rc != 0)
		return rc;
	if (info.max_rx_queues < cp->n_lcores || info.max_tx_queues < cp->n_lcores) {
		PBOX_LOG(ERR, "port %s (%s): %u lcores need %u queues, the device has %u RX "
				"and %u TX: serve it with fewer lcores", port->name, cp->device,
				cp->n_lcores, cp->n_lcores, info.max_rx_queues, info.max_tx_queues);
		return -EINVAL;
	}
	if (drv->multi_seg && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)) {
		conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
		port->multi_seg_tx = true;
	}
	if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_UDP_CKSUM) {
		conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
		port->rx_l4_csum = true;
	}
	/* ethdev checks the frame (MTU + Ethernet header and CRC) against max_rx_pktlen. */
	max_mtu = RTE_MIN((uint32_t)info.max_mtu,
			info.max_rx_pktlen - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN);
	conf.rxmode.mtu = cp->mtu;
	if (cp->mtu > max_mtu) {
		/*
		 * Some virtual PMDs report a 1518-byte frame limit that their data path
		 * does not enforce (af_packet moves whatever fits its framesz): the driver
		 * profile's max_mtu, already checked by the config, says what works. A real
		 * NIC's own limit is the truth.
		 */
		if (cp->is_pci) {
			PBOX_LOG(ERR, "port %s (%s): MTU %u is above the %u the device takes: lower "
					"ports[].mtu", port->name, cp->device, cp->mtu, max_mtu);
			return -EINVAL;
		}
		PBOX_LOG(NOTICE, "port %s: the PMD reports MTU at most %u; its driver profile "
				"allows %u: configuring %u, sending MTU %u", port->name, max_mtu,
				drv->max_mtu, max_mtu, cp->mtu);
		conf.rxmode.mtu = max_mtu;
	}
	rss_request(pb, port, pi, &info, &conf);
	rc = rte_eth_dev_configure(port->port_id, cp->n_lcores, cp->n_lcores, &conf);
	if (rc != 0) {
		PBOX_LOG(ERR, "port %s (%s): configure with %u queues, MTU %u: %s", port->name,
				cp->device, cp->n_lcores, cp->mtu, rte_strerror(-rc));
		return rc;
	}
	rc = rte_eth_dev_adjust_nb_rx_tx_desc(port->port_id, &rx_desc, &tx_desc);
	if (rc != 0)
		return rc;
	/* Queues in increasing id order: net_tap numbers its kernel queues that way. */
	for (uint16_t q = 0; q < cp->n_lcores; q++) {
		int socket = port->socket;

		rc = rte_eth_rx_queue_setup(port->port_id, q, rx_desc, (unsigned int)socket, NULL,
				pb->pools[socket]);
		if (rc == 0)
			rc = rte_eth_tx_queue_setup(port->port_id, q, tx_desc,
					(unsigned int)socket, NULL);
		if (rc != 0) {
			PBOX_LOG(ERR, "port %s: queue %u set-up: %s", port->name, q,
					rte_strerror(-rc));
			return rc;
		}
	}
	rc = rte_eth_dev_start(port->port_id);
	if (rc != 0) {
		PBOX_LOG(ERR, "port %s: start: %s", port->name, rte_strerror(-rc));
		return rc;
	}
	rte_eth_macaddr_get(port->port_id, &port->mac);
	pbox_ack_tmpl_init(&port->ack_tmpl, port->mac.addr_bytes, port->ipv4);
	steer_port(pb, port, pi);
	pbox_xdp_configure(pb, port, pi);
	return 0;
}

int
pbox_ports_init(struct pbox *pb)
{
	int rc;

	pb->n_ports = pb->cfg.n_ports;
	for (unsigned int i = 0; i < pb->cfg.n_ports; i++) {
		const struct phub_config_port *cp = &pb->cfg.ports[i];
		struct pbox_port *port = &pb->ports[i];
		char name[RTE_ETH_NAME_MAX_LEN];

		device_ethdev_name(cp, name, sizeof(name));
		if (rte_eth_dev_get_port_by_name(name, &port->port_id) != 0) {
			PBOX_LOG(ERR, "port %s: device %s not found: %s", cp->name, cp->device,
					cp->is_pci ? "is it bound to its profile's kernel driver "
					"(vfio-pci; mlx5_core for mlx5), and is its PMD installed "
					"(phub-setup --check names the package; docs/deploy.md)?" :
					"check the vdev string and that the PMD is installed");
			return -ENODEV;
		}
		port->socket = rte_eth_dev_socket_id(port->port_id);
		if (port->socket < 0)
			port->socket = 0;
		port->n_queues = cp->n_lcores;
		port->ipv4 = cp->ipv4;
		port->mtu = cp->mtu;
		snprintf(port->name, sizeof(port->name), "%s", cp->name);
		if (cp->driver == PHUB_CONFIG_DRIVER_TAP)
			tap_ifname(cp->device, port->ifname, sizeof(port->ifname));
	}
	rc = pools_init(pb);
	if (rc != 0)
		return rc;
	for (unsigned int i = 0; i < pb->cfg.n_ports; i++) {
		rc = port_setup(pb, i);
		if (rc != 0)
			return rc;
	}
	return 0;
}

void
pbox_ports_close(struct pbox *pb)
{
	for (unsigned int i = 0; i < pb->n_ports; i++) {
		struct pbox_port *port = &pb->ports[i];

		if (port->steering == PHUB_CONFIG_STEERING_TAP_BPF)
			phub_steer_tap_detach(port->ifname);
		rte_eth_dev_stop(port->port_id);
		rte_eth_dev_close(port->port_id);
	}
}
