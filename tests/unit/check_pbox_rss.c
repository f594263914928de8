/* SPDX-License-Identifier: BSD-3-Clause */
/* The appliance's RSS steering (app/pbox/rss.h): Toeplitz vectors, keys, RETA, rte_flow rules. */

#include <stdio.h>
#include <stdlib.h>

#include <check.h>

#include "unit_suite.h"
#include "test_rand.h"

#include "config/phub_config.h"
#include "rss.h"

/* Microsoft's RSS verification key ("Verifying the RSS Hash Calculation"). */
static const uint8_t ms_key[40] = {
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
	0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
	0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
};

#define IP(a, b, c, d) ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (d))

/* Its IPv4 table: destination, source, the hash of the addresses, and with the ports. */
static const struct {
	uint32_t dst_ip, src_ip;
	uint16_t dst_port, src_port;
	uint32_t hash_ip, hash_ip_l4;
} ms_vectors[] = {
	{ IP(161, 142, 100, 80), IP(66, 9, 149, 187), 1766, 2794, 0x323e8fc2, 0x51ccc178 },
	{ IP(65, 69, 140, 83), IP(199, 92, 111, 2), 4739, 14230, 0xd718262a, 0xc626b0ea },
	{ IP(12, 22, 207, 184), IP(24, 19, 198, 95), 38024, 12898, 0xd2d0a5de, 0x5c2b394a },
	{ IP(209, 142, 163, 6), IP(38, 27, 205, 30), 2217, 48228, 0x82989176, 0xafc7327f },
	{ IP(202, 188, 127, 2), IP(153, 39, 163, 191), 1303, 44251, 0x5d1809c5, 0x10e828a2 },
};

START_TEST(test_softrss_matches_the_microsoft_vectors)
{
	for (size_t v = 0; v < sizeof(ms_vectors) / sizeof(ms_vectors[0]); v++) {
		uint32_t tuple[3] = { ms_vectors[v].src_ip, ms_vectors[v].dst_ip,
			(uint32_t)ms_vectors[v].src_port << 16 | ms_vectors[v].dst_port };

		ck_assert_msg(rte_softrss(tuple, 2, ms_key) == ms_vectors[v].hash_ip,
			      "vector %zu IPv4: 0x%08x", v, rte_softrss(tuple, 2, ms_key));
		ck_assert_msg(rte_softrss(tuple, 3, ms_key) == ms_vectors[v].hash_ip_l4,
			      "vector %zu IPv4+ports: 0x%08x", v, rte_softrss(tuple, 3, ms_key));
		/* pbox_rss_hash builds the same 4-tuple input. */
		ck_assert_uint_eq(pbox_rss_hash(PBOX_RSS_DPORT_KEY, ms_key, ms_vectors[v].src_ip,
				ms_vectors[v].dst_ip, ms_vectors[v].src_port,
				ms_vectors[v].dst_port), ms_vectors[v].hash_ip_l4);
	}
}
END_TEST

static uint32_t
rnd32(uint64_t *s)
{
	return (uint32_t)(phub_test_rand(s) >> 11);
}

START_TEST(test_dport_key_keeps_the_source_out_of_the_hash)
{
	static const uint16_t sizes[] = { 64, 128, 512 };
	uint64_t seed = 0x9e3779b97f4a7c15;
	uint8_t key[40];
	bool ms_depends = false;

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		pbox_rss_dport_key(key, sizeof(key), PBOX_RSS_DPORT_KEY, sizes[s]);
		for (int i = 0; i < 2000; i++) {
			uint32_t src = rnd32(&seed), dst = rnd32(&seed);
			uint16_t sport = (uint16_t)rnd32(&seed), dport = (uint16_t)rnd32(&seed);

			ck_assert_uint_eq(pbox_rss_hash(PBOX_RSS_DPORT_KEY, key, src, dst, sport,
					dport), pbox_rss_hash(PBOX_RSS_DPORT_KEY, key, 0, 0, 0,
					dport));
			if (pbox_rss_hash(PBOX_RSS_DPORT_KEY, ms_key, src, dst, sport, dport) !=
			    pbox_rss_hash(PBOX_RSS_DPORT_KEY, ms_key, 0, 0, 0, dport))
				ms_depends = true;
		}
	}
	/* The check above can fail: with an ordinary key the source does change the hash. */
	ck_assert(ms_depends);
}
END_TEST

/* Every lcore's UDP port, from any worker, reaches the queue of its lcore. */
static void
check_ports_land_on_their_queues(enum pbox_rss_mode mode, const uint8_t *key,
				 uint16_t reta_size, uint16_t base, unsigned int n)
{
	uint16_t ports[PHUB_CONFIG_MAX_QUEUES], queues[PHUB_CONFIG_MAX_QUEUES];
	uint16_t reta[PBOX_RSS_RETA_MAX];
	uint64_t seed = 0x2545f4914f6cdd1d ^ base ^ n;
	unsigned int collisions;

	for (unsigned int k = 0; k < n; k++) {
		ports[k] = (uint16_t)(base + 1 + k);
		queues[k] = (uint16_t)k;
	}
	collisions = pbox_rss_reta_fill(mode, key, reta_size, ports, queues, n, reta);
	ck_assert_msg(collisions == 0, "mode %d, RETA %u, ports %u+%u: %u collisions", mode,
		      reta_size, base + 1, n, collisions);
	for (unsigned int k = 0; k < n; k++) {
		for (int w = 0; w < 16; w++) {
			uint32_t h = pbox_rss_hash(mode, key, rnd32(&seed), IP(10, 20, 0, 1),
					(uint16_t)rnd32(&seed), ports[k]);

			ck_assert_msg(reta[pbox_rss_reta_index(h, reta_size)] == k,
				      "port %u went to queue %u, not %u", ports[k],
				      reta[pbox_rss_reta_index(h, reta_size)], k);
		}
	}
}

START_TEST(test_every_lcore_port_lands_on_its_queue)
{
	static const uint16_t sizes[] = { 64, 128, 512 };
	static const uint16_t bases[] = { 47000, 4791, 65000 - 64 };
	uint8_t key[52];

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
			for (unsigned int n = 1; n <= 64 && n <= sizes[s]; n *= 2) {
				pbox_rss_dport_key(key, sizeof(key), PBOX_RSS_DPORT_KEY, sizes[s]);
				check_ports_land_on_their_queues(PBOX_RSS_DPORT_KEY, key, sizes[s],
						bases[b], n);
				pbox_rss_dport_key(key, sizeof(key), PBOX_RSS_DST_ONLY, sizes[s]);
				check_ports_land_on_their_queues(PBOX_RSS_DST_ONLY, key, sizes[s],
						bases[b], n);
			}
		}
	}
}
END_TEST

START_TEST(test_reta_entries_no_port_uses_go_to_queue_zero_and_collisions_count)
{
	uint16_t ports[2] = { 47001, 47001 + 128 }, queues[2] = { 3, 5 };
	uint16_t reta[128];
	uint8_t key[40];
	unsigned int used = 0;

	/* 128 apart: the same low 7 bits, the same entry of a 128-entry RETA. */
	pbox_rss_dport_key(key, sizeof(key), PBOX_RSS_DPORT_KEY, 128);
	ck_assert_uint_eq(pbox_rss_reta_fill(PBOX_RSS_DPORT_KEY, key, 128, ports, queues, 2,
			reta), 1);
	for (unsigned int i = 0; i < 128; i++) {
		ck_assert(reta[i] == 0 || reta[i] == 3);
		used += reta[i] == 3;
	}
	ck_assert_uint_eq(used, 1);
}
END_TEST

/* Load a configuration with one port of driver name, its PCI profile from this tree. */
static int
load_pci(const char *name, unsigned int lcores, struct phub_config *cfg)
{
	char text[1024], err[PHUB_CONFIG_ERR_MAX], list[256] = "", eal[256] = "0";
	const char *root = getenv("PHUB_SOURCE_ROOT");
	char dir[512];
	struct phub_config_params params = { .name = "rss.json", .drivers_dir = dir };
	int rc;

	snprintf(dir, sizeof(dir), "%s/drivers-cfg", root != NULL ? root : "../..");
	for (unsigned int i = 1; i <= lcores; i++) {
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%u",
			 i > 1 ? ", " : "", i);
		snprintf(eal + strlen(eal), sizeof(eal) - strlen(eal), ", %u", i);
	}
	snprintf(text, sizeof(text),
		 "{\"eal\": {\"lcores\": [%s]}, \"ports\": [{\"name\": \"nic0\", "
		 "\"device\": \"0000:3b:00.0\", \"driver\": \"%s\", \"ipv4\": \"10.20.0.1/16\", "
		 "\"lcores\": [%s]}]}", eal, name, list);
	rc = phub_config_load_buffer(text, strlen(text), &params, cfg, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s: %s", name, err);
	return rc;
}

/*
 * Without hardware: the rules the PBox would give each real NIC (one per lcore of a port of
 * 4 lcores) have the structure its steering needs: ETH / IPV4 dst / UDP dst with full masks,
 * QUEUE to a queue the profile has, END; and the RSS fallback's RETA steers them all.
 */
START_TEST(test_flow_rules_and_rss_fit_every_real_nic_profile)
{
	static const char *const nics[] = { "mlx5", "ice", "i40e", "ixgbe" };

	for (size_t d = 0; d < sizeof(nics) / sizeof(nics[0]); d++) {
		struct phub_config cfg;
		const struct phub_config_driver *drv;
		uint16_t ports[4], queues[4], reta[PBOX_RSS_RETA_MAX];
		uint8_t key[52];

		load_pci(nics[d], 4, &cfg);
		drv = phub_config_port_driver(&cfg, 0);
		ck_assert_int_eq(drv->steering, PHUB_CONFIG_STEERING_RTE_FLOW);
		ck_assert_int_eq(drv->fallback, PHUB_CONFIG_STEERING_RSS);
		for (uint16_t q = 0; q < cfg.ports[0].n_lcores; q++) {
			int udp = phub_config_lcore_udp_port(&cfg, cfg.ports[0].lcores[q]);
			struct pbox_flow_rule r;

			ck_assert_int_gt(udp, 0);
			pbox_flow_rule_build(&r, cfg.ports[0].ipv4, (uint16_t)udp, q);
			ck_assert(r.attr.ingress == 1 && r.attr.egress == 0);
			ck_assert_int_eq(r.pattern[0].type, RTE_FLOW_ITEM_TYPE_ETH);
			ck_assert_int_eq(r.pattern[1].type, RTE_FLOW_ITEM_TYPE_IPV4);
			ck_assert_uint_eq(rte_be_to_cpu_32(((const struct rte_flow_item_ipv4 *)
					r.pattern[1].spec)->hdr.dst_addr), IP(10, 20, 0, 1));
			ck_assert_uint_eq(((const struct rte_flow_item_ipv4 *)r.pattern[1].mask)
					->hdr.dst_addr, 0xffffffff);
			ck_assert_int_eq(r.pattern[2].type, RTE_FLOW_ITEM_TYPE_UDP);
			ck_assert_uint_eq(rte_be_to_cpu_16(((const struct rte_flow_item_udp *)
					r.pattern[2].spec)->hdr.dst_port), (unsigned int)udp);
			ck_assert_uint_eq(((const struct rte_flow_item_udp *)r.pattern[2].mask)
					->hdr.dst_port, 0xffff);
			ck_assert_int_eq(r.pattern[3].type, RTE_FLOW_ITEM_TYPE_END);
			ck_assert_int_eq(r.actions[0].type, RTE_FLOW_ACTION_TYPE_QUEUE);
			ck_assert_uint_eq(((const struct rte_flow_action_queue *)r.actions[0].conf)
					->index, q);
			ck_assert_uint_lt(q, drv->max_queues);
			ck_assert_int_eq(r.actions[1].type, RTE_FLOW_ACTION_TYPE_END);
			ports[q] = (uint16_t)udp;
			queues[q] = q;
		}
		/* Their RETAs: 512 (ice, i40e's X722 up to 512), 128 (ixgbe), 512 (mlx5). */
		pbox_rss_dport_key(key, sizeof(key), PBOX_RSS_DPORT_KEY, 128);
		ck_assert_uint_eq(pbox_rss_reta_fill(PBOX_RSS_DPORT_KEY, key, 128, ports, queues,
				4, reta), 0);
		phub_config_free(&cfg);
	}
}
END_TEST

Suite *
phub_pbox_rss_suite(void)
{
	Suite *s = suite_create("pbox_rss");

	/* The hash itself, then what the appliance programs with it. */
	PHUB_TCASE(s, "toeplitz",
		test_softrss_matches_the_microsoft_vectors,
		test_dport_key_keeps_the_source_out_of_the_hash);
	PHUB_TCASE(s, "steering",
		test_every_lcore_port_lands_on_its_queue,
		test_reta_entries_no_port_uses_go_to_queue_zero_and_collisions_count,
		test_flow_rules_and_rss_fit_every_real_nic_profile);
	return s;
}
