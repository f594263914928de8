/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Tests of lib/config: the good and bad files of tests/data (exact first error, with line and
 * column), defaults, the derived lcore map, positions, driver profiles, and the documentation.
 */

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "unit_suite.h"
#include "test_rand.h"

#include "config_priv.h"
#include "phub_config.h"
#include "model/phub_model.h"

static struct phub_config cfg;
static char err[PHUB_CONFIG_ERR_MAX];

static const char *
source_root(void)
{
	const char *root = getenv("PHUB_SOURCE_ROOT");

	return root != NULL ? root : ".";
}

/* Tests of tests/data run there, so that names in messages are the short relative ones. */
static void
enter_data_dir(void)
{
	char dir[PHUB_CONFIG_PATH_MAX];

	snprintf(dir, sizeof(dir), "%s/tests/data", source_root());
	ck_assert_msg(chdir(dir) == 0, "chdir %s: %s", dir, strerror(errno));
}

static char *
read_text(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *text;
	long size;

	ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, 0, SEEK_SET);
	text = malloc((size_t)size + 1);
	ck_assert_ptr_nonnull(text);
	*len = fread(text, 1, (size_t)size, f);
	text[*len] = '\0';
	fclose(f);
	return text;
}

/* Load a file of tests/data (the current directory) with the fake sysfs. */
static int
load_data(const char *name)
{
	struct phub_config_params params = { .name = name, .sysfs_root = "sysfs" };
	size_t len;
	char *text = read_text(name, &len);
	int rc;

	rc = phub_config_load_buffer(text, len, &params, &cfg, err, sizeof(err));
	free(text);
	return rc;
}

static int
load_string(const char *text)
{
	struct phub_config_params params = { .name = "t.json", .sysfs_root = "sysfs" };

	return phub_config_load_buffer(text, strlen(text), &params, &cfg, err, sizeof(err));
}

/* Names of tests/data files that start with prefix and end in .json, sorted. */
static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static unsigned int
list_data(const char *prefix, char names[][128], unsigned int max)
{
	char *ptrs[256];
	char tmp[256][128];
	struct dirent *e;
	unsigned int n = 0;
	DIR *dir = opendir(".");

	ck_assert_ptr_nonnull(dir);
	while ((e = readdir(dir)) != NULL && n < max && n < 256) {
		size_t len = strlen(e->d_name);

		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || len < 5 ||
		    strcmp(e->d_name + len - 5, ".json") != 0)
			continue;
		snprintf(tmp[n], sizeof(tmp[n]), "%s", e->d_name);
		ptrs[n] = tmp[n];
		n++;
	}
	closedir(dir);
	qsort(ptrs, n, sizeof(ptrs[0]), cmp_names);
	for (unsigned int i = 0; i < n; i++)
		snprintf(names[i], 128, "%s", ptrs[i]);
	return n;
}

static char *
dump_to_string(const struct phub_config *c)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(phub_config_dump(c, f), 0);
	fclose(f);
	return buf;
}

static void
teardown(void)
{
	phub_config_free(&cfg);
}

START_TEST(test_good_files_load_without_error)
{
	char names[64][128];
	unsigned int n;

	enter_data_dir();
	n = list_data("good_", names, 64);
	ck_assert_uint_ge(n, 5);
	for (unsigned int i = 0; i < n; i++) {
		int rc = load_data(names[i]);

		ck_assert_msg(rc == 0, "%s: rc %d: %s", names[i], rc, err);
		ck_assert_str_eq(err, "");
		ck_assert_str_eq(cfg.source, names[i]);
		ck_assert_uint_ge(cfg.n_ports, 1);
		phub_config_free(&cfg);
	}
}
END_TEST

START_TEST(test_dump_of_a_good_file_loads_back_to_the_same_dump)
{
	char names[64][128];
	unsigned int n;

	enter_data_dir();
	n = list_data("good_", names, 64);
	for (unsigned int i = 0; i < n; i++) {
		struct phub_config_params params = { .name = names[i], .sysfs_root = "sysfs" };
		char *first;
		char *second;
		int rc;

		ck_assert_int_eq(load_data(names[i]), 0);
		first = dump_to_string(&cfg);
		phub_config_free(&cfg);
		rc = phub_config_load_buffer(first, strlen(first), &params, &cfg, err, sizeof(err));
		ck_assert_msg(rc == 0, "%s reloaded: %s\n%s", names[i], err, first);
		second = dump_to_string(&cfg);
		ck_assert_str_eq(first, second);
		free(first);
		free(second);
		phub_config_free(&cfg);
	}
}
END_TEST

START_TEST(test_bad_files_report_their_exact_first_error)
{
	char line[1024];
	unsigned int checked = 0;
	FILE *f;

	enter_data_dir();
	f = fopen("bad_expected.txt", "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		char *tab = strchr(line, '\t');
		int rc;

		if (line[0] == '#' || tab == NULL)
			continue;
		*tab = '\0';
		tab[strcspn(tab + 1, "\n") + 1] = '\0';
		rc = load_data(line);
		ck_assert_msg(rc == -EINVAL, "%s: rc %d, message %s", line, rc, err);
		ck_assert_str_eq(err, tab + 1);
		/* A failed load leaves nothing behind. */
		ck_assert_uint_eq(cfg.n_ports, 0);
		ck_assert_ptr_null(cfg.jobs);
		checked++;
	}
	fclose(f);
	ck_assert_uint_ge(checked, 30);
}
END_TEST

START_TEST(test_every_bad_file_has_an_expected_message)
{
	char names[256][128];
	char *expected;
	size_t len;
	unsigned int n;

	enter_data_dir();
	n = list_data("bad_", names, 256);
	expected = read_text("bad_expected.txt", &len);
	for (unsigned int i = 0; i < n; i++) {
		char key[160];

		snprintf(key, sizeof(key), "\n%.128s\t", names[i]);
		ck_assert_msg(strstr(expected, key) != NULL, "%s has no line in bad_expected.txt",
			      names[i]);
	}
	free(expected);
	ck_assert_uint_ge(n, 30);
}
END_TEST

/* The appliance-wide settings of a config (all but eal, ports, jobs, peers), in its order. */
struct settings {
	uint16_t udp_base_port;
	uint32_t chunk_bytes, segment_bytes, window_bytes;
	bool deterministic, priority_order;
	uint16_t priority_hold, priority_hold_us;
	struct phub_config_idle idle;
	struct phub_config_timeouts timeouts;
	struct phub_config_limits limits;
};

/* The loaded cfg holds want's settings, each checked on its own for a message naming it. */
static void
assert_settings(const struct settings *want)
{
	ck_assert_uint_eq(cfg.udp_base_port, want->udp_base_port);
	ck_assert_uint_eq(cfg.chunk_bytes, want->chunk_bytes);
	ck_assert_uint_eq(cfg.segment_bytes, want->segment_bytes);
	ck_assert_uint_eq(cfg.window_bytes, want->window_bytes);
	ck_assert_int_eq(cfg.deterministic, want->deterministic);
	ck_assert_int_eq(cfg.priority_order, want->priority_order);
	ck_assert_uint_eq(cfg.priority_hold, want->priority_hold);
	ck_assert_uint_eq(cfg.priority_hold_us, want->priority_hold_us);
	ck_assert_int_eq(cfg.idle.policy, want->idle.policy);
	ck_assert_uint_eq(cfg.idle.spin_polls, want->idle.spin_polls);
	ck_assert_uint_eq(cfg.idle.max_sleep_us, want->idle.max_sleep_us);
	ck_assert_uint_eq(cfg.timeouts.rto_min_ms, want->timeouts.rto_min_ms);
	ck_assert_uint_eq(cfg.timeouts.rto_max_ms, want->timeouts.rto_max_ms);
	ck_assert_uint_eq(cfg.timeouts.worker_dead_ms, want->timeouts.worker_dead_ms);
	ck_assert_uint_eq(cfg.timeouts.join_ms, want->timeouts.join_ms);
	ck_assert_uint_eq(cfg.limits.max_jobs, want->limits.max_jobs);
	ck_assert_uint_eq(cfg.limits.max_workers_per_job, want->limits.max_workers_per_job);
	ck_assert_uint_eq(cfg.limits.job_memory_mb, want->limits.job_memory_mb);
	ck_assert_uint_eq(cfg.limits.total_memory_mb, want->limits.total_memory_mb);
}

START_TEST(test_minimal_config_gets_the_documented_defaults)
{
	const struct phub_config_port *p;

	enter_data_dir();
	ck_assert_int_eq(load_data("good_minimal.json"), 0);
	ck_assert_uint_eq(cfg.eal.main_lcore, 0);
	ck_assert_uint_eq(cfg.eal.memory_mb, 512);
	ck_assert(!cfg.eal.no_huge);
	ck_assert_str_eq(cfg.eal.file_prefix, "phub");
	ck_assert_uint_eq(cfg.eal.n_extra_args, 0);
	p = &cfg.ports[0];
	ck_assert_uint_eq(p->mtu, 1500);
	ck_assert_uint_eq(p->rx_desc, 1024);
	ck_assert_uint_eq(p->tx_desc, 1024);
	ck_assert_uint_eq(p->ipv4, 0x0a0a0001);
	ck_assert_uint_eq(p->prefix_len, 24);
	ck_assert(!p->is_pci);
	ck_assert_int_eq(p->numa_node, -1);
	/* Segments: 1500 - 92 = 1408, a multiple of 64. */
	assert_settings(&(const struct settings){ 47000, 32768, 1408, 1048576, false, true, 0, 1000,
		{ PHUB_CONFIG_IDLE_POLL, 64, 200 }, { 2, 200, 10000, 2000 }, { 16, 64, 2048, 8192 } });
	ck_assert_uint_eq(cfg.n_jobs, 0);
	ck_assert_str_eq(cfg.checkpoint.dir, "/var/lib/phub/checkpoints");
	ck_assert_uint_eq(cfg.checkpoint.interval_iterations, 100);
	ck_assert_uint_eq(cfg.n_peers, 0);
	ck_assert(cfg.telemetry_enabled);
}
END_TEST

START_TEST(test_every_key_is_read_as_written)
{
	const struct phub_config_job *j;

	enter_data_dir();
	ck_assert_int_eq(load_data("good_all_keys.json"), 0);
	ck_assert_uint_eq(cfg.eal.n_lcores, 4);
	ck_assert_uint_eq(cfg.eal.lcores[3].id, 4);
	ck_assert_uint_eq(cfg.eal.lcores[3].cpu, 1);
	ck_assert_uint_eq(cfg.eal.lcores[0].cpu, 3);
	ck_assert_uint_eq(cfg.eal.main_lcore, 3);
	ck_assert_uint_eq(cfg.eal.memory_mb, 2048);
	ck_assert(cfg.eal.no_huge);
	ck_assert_str_eq(cfg.eal.file_prefix, "phub-all_keys.1");
	ck_assert_uint_eq(cfg.eal.n_extra_args, 2);
	ck_assert_str_eq(cfg.eal.extra_args[1], "--log-level=lib.eal:notice");
	ck_assert_str_eq(cfg.drivers_dir, "../../drivers-cfg");
	ck_assert_uint_eq(cfg.n_ports, 2);
	ck_assert_uint_eq(cfg.ports[0].rx_desc, 512);
	ck_assert_uint_eq(cfg.ports[0].tx_desc, 2048);
	ck_assert_uint_eq(cfg.ports[0].mtu, 1500);
	ck_assert_int_eq(cfg.ports[1].driver, PHUB_CONFIG_DRIVER_AF_XDP);
	ck_assert_uint_eq(cfg.ports[1].prefix_len, 31);
	assert_settings(&(const struct settings){ 50000, 65536, 1408, 2097152, true, false, 256, 3000,
		{ PHUB_CONFIG_IDLE_ADAPTIVE, 1000, 50 }, { 3, 300, 20000, 5000 }, { 3, 8, 100, 300 } });
	ck_assert_uint_eq(cfg.n_jobs, 2);
	j = &cfg.jobs[0];
	ck_assert_str_eq(j->name, "resnet 50 (v1.5)");
	ck_assert_uint_eq(j->nonce, UINT64_C(0x5be1c2f07a9d3e64));
	ck_assert_uint_eq(j->workers, 8);
	ck_assert_int_eq(j->dtype, PHUB_DTYPE_FP16);
	ck_assert(!j->deterministic);
	ck_assert_int_eq(j->on_worker_dead, PHUB_CONFIG_ON_DEAD_CONTINUE);
	ck_assert_int_eq(j->optimizer.type, PHUB_OPT_NESTEROV);
	ck_assert_double_eq(j->optimizer.lr, 0.25);
	ck_assert_double_eq(j->optimizer.momentum, 0.8);
	ck_assert_double_eq(j->optimizer.weight_decay, 0.0005);
	j = &cfg.jobs[1];
	ck_assert_uint_eq(j->nonce, UINT64_C(0xd04f7e2b91c6a835));
	ck_assert_int_eq(j->dtype, PHUB_DTYPE_BF16);
	/* Not written in the job: inherited from the top-level deterministic. */
	ck_assert(j->deterministic);
	/* Not written: the job fails when a rank dies, as before elastic jobs. */
	ck_assert_int_eq(j->on_worker_dead, PHUB_CONFIG_ON_DEAD_FAIL);
	ck_assert_int_eq(j->optimizer.type, PHUB_OPT_ADAMW);
	ck_assert_double_eq(j->optimizer.beta1, 0.85);
	ck_assert_double_eq(j->optimizer.beta2, 0.995);
	ck_assert_double_eq(j->optimizer.eps, 1e-6);
	ck_assert_double_eq(j->optimizer.weight_decay, 0.05);
	ck_assert_str_eq(cfg.checkpoint.dir, "/srv/phub/ckpt");
	ck_assert_uint_eq(cfg.checkpoint.interval_iterations, 0);
	ck_assert_uint_eq(cfg.n_peers, 2);
	ck_assert_str_eq(cfg.peers[1].name, "rack-c");
	ck_assert_uint_eq(cfg.peers[1].ipv4, 0x0a140001);
	ck_assert_uint_eq(cfg.peers[1].udp_port, 48001);
	ck_assert(!cfg.telemetry_enabled);
}
END_TEST

START_TEST(test_optimizer_defaults_follow_its_type)
{
	enter_data_dir();
	ck_assert_int_eq(load_data("good_optimizers.json"), 0);
	ck_assert_uint_eq(cfg.n_jobs, 6);
	ck_assert_int_eq(cfg.jobs[0].optimizer.type, PHUB_OPT_NONE);
	ck_assert_double_eq(cfg.jobs[0].optimizer.lr, 0.0);
	ck_assert_int_eq(cfg.jobs[1].optimizer.type, PHUB_OPT_SGD);
	ck_assert_double_eq(cfg.jobs[1].optimizer.lr, 0.01);
	ck_assert_double_eq(cfg.jobs[1].optimizer.momentum, 0.0);
	ck_assert_double_eq(cfg.jobs[2].optimizer.momentum, 0.9);
	ck_assert_double_eq(cfg.jobs[3].optimizer.lr, 1.0);
	ck_assert_double_eq(cfg.jobs[4].optimizer.lr, 0.001);
	ck_assert_double_eq(cfg.jobs[4].optimizer.beta2, 0.999);
	ck_assert_double_eq(cfg.jobs[4].optimizer.eps, 1e-8);
	ck_assert_double_eq(cfg.jobs[4].optimizer.weight_decay, 0.0);
	ck_assert_double_eq(cfg.jobs[5].optimizer.weight_decay, 0.0);
	ck_assert_int_eq(cfg.jobs[5].dtype, PHUB_DTYPE_FP32);
}
END_TEST

START_TEST(test_lcore_map_is_flat_and_sorted_by_port_then_queue)
{
	static const struct phub_config_lcore_params want[] = {
		{ .port = 0, .queue = 0, .lcore = 2 },
		{ .port = 0, .queue = 1, .lcore = 1 },
		{ .port = 1, .queue = 0, .lcore = 4 },
	};

	enter_data_dir();
	ck_assert_int_eq(load_data("good_all_keys.json"), 0);
	ck_assert_uint_eq(cfg.n_lcore_params, 3);
	for (unsigned int i = 0; i < 3; i++) {
		ck_assert_uint_eq(cfg.lcore_params[i].port, want[i].port);
		ck_assert_uint_eq(cfg.lcore_params[i].queue, want[i].queue);
		ck_assert_uint_eq(cfg.lcore_params[i].lcore, want[i].lcore);
	}
	ck_assert_uint_eq(cfg.n_data_lcores, 3);
	ck_assert_uint_eq(cfg.data_lcores[0], 1);
	ck_assert_uint_eq(cfg.data_lcores[1], 2);
	ck_assert_uint_eq(cfg.data_lcores[2], 4);
	/* eal.lcores is [3, 1, 2, 4@1]: data indexes follow the sorted set, not the order. */
	ck_assert_int_eq(cfg.eal.lcores[0].data_index, -1);
	ck_assert_int_eq(cfg.eal.lcores[1].data_index, 0);
	ck_assert_int_eq(cfg.eal.lcores[3].data_index, 2);
}
END_TEST

START_TEST(test_data_lcore_k_listens_on_base_plus_one_plus_k)
{
	enter_data_dir();
	ck_assert_int_eq(load_data("good_all_keys.json"), 0);
	ck_assert_int_eq(phub_config_lcore_udp_port(&cfg, 1), 50001);
	ck_assert_int_eq(phub_config_lcore_udp_port(&cfg, 2), 50002);
	ck_assert_int_eq(phub_config_lcore_udp_port(&cfg, 4), 50003);
	ck_assert_int_eq(phub_config_lcore_udp_port(&cfg, 3), -ENOENT);
	ck_assert_int_eq(phub_config_lcore_udp_port(&cfg, 99), -ENOENT);
	ck_assert_int_eq(phub_config_udp_port_lcore(&cfg, 50003), 4);
	ck_assert_int_eq(phub_config_udp_port_lcore(&cfg, 50001), 1);
	ck_assert_int_eq(phub_config_udp_port_lcore(&cfg, 50000), -ENOENT);
	ck_assert_int_eq(phub_config_udp_port_lcore(&cfg, 50004), -ENOENT);
}
END_TEST

START_TEST(test_lookups_find_what_the_file_names)
{
	const struct phub_config_lcore *l;
	const struct phub_config_driver *d;

	enter_data_dir();
	ck_assert_int_eq(load_data("good_all_keys.json"), 0);
	l = phub_config_lcore_find(&cfg, 4);
	ck_assert_ptr_nonnull(l);
	ck_assert_uint_eq(l->cpu, 1);
	errno = 0;
	ck_assert_ptr_null(phub_config_lcore_find(&cfg, 5));
	ck_assert_int_eq(errno, ENOENT);
	d = phub_config_port_driver(&cfg, 1);
	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(d->pmd, "net_af_xdp");
	ck_assert_ptr_null(phub_config_port_driver(&cfg, 2));
	ck_assert_int_eq(phub_config_job_find(&cfg, "bert"), 1);
	ck_assert_int_eq(phub_config_job_find(&cfg, "gpt"), -ENOENT);
	ck_assert_str_eq(phub_config_driver_name(PHUB_CONFIG_DRIVER_AF_PACKET), "af_packet");
	ck_assert_str_eq(phub_config_steering_name(PHUB_CONFIG_STEERING_PORT_PER_LCORE),
			 "port_per_lcore");
	ck_assert_str_eq(phub_config_bus_name(PHUB_CONFIG_BUS_VDEV), "vdev");
	ck_assert_str_eq(phub_config_idle_name(PHUB_CONFIG_IDLE_ADAPTIVE), "adaptive");
	ck_assert_str_eq(phub_dtype_name(PHUB_DTYPE_BF16), "bf16");
	ck_assert_str_eq(phub_opt_type_name(PHUB_OPT_ADAMW), "adamw");
	ck_assert_str_eq(phub_config_driver_name(PHUB_CONFIG_DRIVER_COUNT), "?");
}
END_TEST

static int
load_example(const char *name, const char *sysfs)
{
	struct phub_config_params params = { .name = name, .sysfs_root = sysfs };
	char path[PHUB_CONFIG_PATH_MAX];
	size_t len;
	char *text;
	int rc;

	snprintf(path, sizeof(path), "%s/docs/examples/%s", source_root(), name);
	text = read_text(path, &len);
	rc = phub_config_load_buffer(text, len, &params, &cfg, err, sizeof(err));
	free(text);
	return rc;
}

START_TEST(test_virtual_rack_example_loads)
{
	const struct phub_config_driver *d;

	ck_assert_msg(load_example("virtual-rack.json", NULL) == 0, "%s", err);
	ck_assert(cfg.eal.no_huge);
	ck_assert_int_eq(cfg.idle.policy, PHUB_CONFIG_IDLE_ADAPTIVE);
	ck_assert_uint_eq(cfg.n_data_lcores, 2);
	ck_assert_int_eq(cfg.ports[0].driver, PHUB_CONFIG_DRIVER_TAP);
	d = phub_config_port_driver(&cfg, 0);
	ck_assert_int_eq(d->steering, PHUB_CONFIG_STEERING_TAP_BPF);
	ck_assert_uint_ge(d->max_queues, 2);
	/* Two data lcores share CPU 1 on a 2-CPU machine. */
	ck_assert_uint_eq(phub_config_lcore_find(&cfg, 2)->cpu, 1);
	ck_assert_uint_eq(cfg.segment_bytes, 1408);
}
END_TEST

START_TEST(test_baremetal_example_loads_with_its_nics_on_two_numa_nodes)
{
	char sysfs[PHUB_CONFIG_PATH_MAX];

	snprintf(sysfs, sizeof(sysfs), "%s/tests/data/sysfs", source_root());
	ck_assert_msg(load_example("baremetal-2nic.json", sysfs) == 0, "%s", err);
	ck_assert(!cfg.eal.no_huge);
	ck_assert_int_eq(cfg.idle.policy, PHUB_CONFIG_IDLE_POLL);
	ck_assert(cfg.ports[0].is_pci);
	ck_assert_int_eq(cfg.ports[0].driver, PHUB_CONFIG_DRIVER_ICE);
	ck_assert_int_eq(cfg.ports[0].numa_node, 0);
	ck_assert_int_eq(cfg.ports[1].numa_node, 1);
	ck_assert_int_eq(phub_config_lcore_find(&cfg, 9)->numa_node, 1);
	ck_assert_int_eq(phub_config_lcore_find(&cfg, 3)->numa_node, 0);
	ck_assert_int_eq(phub_config_port_driver(&cfg, 1)->steering,
			 PHUB_CONFIG_STEERING_RTE_FLOW);
	ck_assert_int_eq(phub_config_port_driver(&cfg, 1)->fallback, PHUB_CONFIG_STEERING_RSS);
}
END_TEST

/* A declared job says what it trains: a Table 3 model by name or abbreviation, or a count. */
START_TEST(test_declared_job_takes_its_parameters_from_a_model_or_a_count)
{
	const struct phub_model_preset *rn50 = phub_model_preset_find("resnet50");
	static const char text[] =
		"{ \"eal\": { \"lcores\": [0, 1], \"no_huge\": true },"
		"  \"ports\": [ { \"name\": \"p0\", \"device\": \"net_null0\", \"driver\": \"null\","
		"    \"ipv4\": \"10.1.0.1/24\", \"lcores\": [1] } ],"
		"  \"jobs\": ["
		"    { \"name\": \"a\", \"nonce\": \"0x5be1c2f07a9d3e64\", \"workers\": 2,"
		"      \"model\": \"RN50\" },"
		"    { \"name\": \"b\", \"nonce\": \"0xd04f7e2b91c6a835\", \"workers\": 2,"
		"      \"parameters\": 340000000 },"
		"    { \"name\": \"c\", \"nonce\": \"0x9f3c61d2a7e4b508\", \"workers\": 2 } ] }";

	enter_data_dir();
	ck_assert_ptr_nonnull(rn50);
	ck_assert_msg(load_string(text) == 0, "%s", err);
	ck_assert_str_eq(cfg.jobs[0].model, "resnet50");
	ck_assert_uint_eq(cfg.jobs[0].parameters,
			  (uint64_t)(phub_model_preset_bytes(rn50, PHUB_MODEL_UNITS_PAPER) / 4));
	ck_assert_uint_gt(cfg.jobs[0].parameters, 25000000);
	ck_assert_uint_lt(cfg.jobs[0].parameters, 26000000);
	ck_assert_str_eq(cfg.jobs[1].model, "");
	ck_assert_uint_eq(cfg.jobs[1].parameters, 340000000);
	/* Not said: nothing to check. */
	ck_assert_uint_eq(cfg.jobs[2].parameters, 0);
}
END_TEST

/* An authenticated job's 256-bit key, written in the file or in a file of its own, checked. */
START_TEST(test_a_job_key_is_64_hex_digits_for_an_authenticated_job)
{
	static const char head[] =
		"{ \"eal\": { \"lcores\": [0, 1], \"no_huge\": true },"
		"  \"ports\": [ { \"name\": \"p0\", \"device\": \"net_null0\", \"driver\": \"null\","
		"    \"ipv4\": \"10.1.0.1/24\", \"lcores\": [1] } ],"
		"  \"jobs\": [ { \"name\": \"a\", \"nonce\": \"0x5be1c2f07a9d3e64\", \"workers\": 2, ";
	static const char hex[] =
		"00112233445566778899aabbccddeeffF0E1D2C3B4A5968778695A4B3C2D1E0f";
	static const struct {
		const char *job;	/* the rest of jobs[0] */
		const char *error;	/* NULL: it loads */
	} cases[] = {
		{ "\"auth\": \"required\", \"key\": \"%s\"", NULL },
		{ "\"auth\": \"required\", \"key_file\": \"%s\"", NULL },
		{ "\"key\": \"%s\"", "jobs[0].key: a key is for a job with \"auth\": \"required\"" },
		{ "\"auth\": \"required\", \"key\": \"%.62s\"", "jobs[0].key: the key is not 64 hex" },
		{ "\"auth\": \"required\", \"key\": \"%.63sg\"", "jobs[0].key: the key is not 64 hex" },
		{ "\"auth\": \"required\", \"key\": 7 %.0s", "jobs[0].key: expected a string" },
		{ "\"auth\": \"required\", \"key\": \"%s\", \"key_file\": \"/etc/hostname\"",
		  "jobs[0].key_file: give \"key\" or \"key_file\", not both" },
		{ "\"auth\": \"required\", \"key_file\": \"/etc/hostname\" %.0s",
		  "jobs[0].key_file: \"/etc/hostname\" does not hold 64 hex digits" },
		{ "\"auth\": \"required\", \"key_file\": \"etc/key\" %.0s",
		  "must be an absolute path" },
	};
	char path[] = "/tmp/phub-check-key.XXXXXX";
	char text[1024], job[256];
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, hex, 64), 64);
	ck_assert_int_eq(write(fd, "\n", 1), 1);
	close(fd);
	enter_data_dir();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(job, sizeof(job), cases[i].job, i == 1 ? path : hex);
		snprintf(text, sizeof(text), "%s%s } ] }", head, job);
		if (cases[i].error == NULL) {
			ck_assert_msg(load_string(text) == 0, "%s: %s", job, err);
			ck_assert(cfg.jobs[0].has_key);
			ck_assert_uint_eq(cfg.jobs[0].key[0], 0x00);
			ck_assert_uint_eq(cfg.jobs[0].key[1], 0x11);
			ck_assert_uint_eq(cfg.jobs[0].key[16], 0xf0);
			ck_assert_uint_eq(cfg.jobs[0].key[31], 0x0f);
		} else {
			ck_assert_msg(load_string(text) != 0, "%s loaded", job);
			ck_assert_msg(strstr(err, cases[i].error) != NULL, "%s: %s", job, err);
			/* The key's digits are never quoted back. */
			ck_assert_msg(strstr(err, "00112233") == NULL, "%s", err);
		}
		phub_config_free(&cfg);
		memset(&cfg, 0, sizeof(cfg));
	}
	unlink(path);
}
END_TEST

/*
 * A dump keeps an authenticated job's key as it was given: an inline key inline, a key_file as
 * the reference to its file, whose digits the dump never carries; both load back to the key.
 */
START_TEST(test_a_dump_keeps_the_job_key_and_never_a_key_files_digits)
{
	static const char head[] =
		"{ \"eal\": { \"lcores\": [0, 1], \"no_huge\": true },"
		"  \"ports\": [ { \"name\": \"p0\", \"device\": \"net_null0\", \"driver\": \"null\","
		"    \"ipv4\": \"10.1.0.1/24\", \"lcores\": [1] } ],"
		"  \"jobs\": [ { \"name\": \"a\", \"nonce\": \"0x5be1c2f07a9d3e64\", \"workers\": 2,"
		"    \"auth\": \"required\", ";
	static const char hex[] =
		"00112233445566778899aabbccddeeffF0E1D2C3B4A5968778695A4B3C2D1E0f";
	struct phub_config_params params = { .name = "t.json", .sysfs_root = "sysfs" };
	char path[] = "/tmp/phub-check-key.XXXXXX";
	char text[1024], want[PHUB_CONFIG_PATH_MAX + 32];
	uint8_t key[32];
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, hex, 64), 64);
	close(fd);
	enter_data_dir();
	for (int from_file = 0; from_file < 2; from_file++) {
		char *first, *second;

		if (from_file)
			snprintf(text, sizeof(text), "%s\"key_file\": \"%s\" } ] }", head, path);
		else
			snprintf(text, sizeof(text), "%s\"key\": \"%s\" } ] }", head, hex);
		ck_assert_msg(load_string(text) == 0, "%s", err);
		memcpy(key, cfg.jobs[0].key, sizeof(key));
		first = dump_to_string(&cfg);
		phub_config_free(&cfg);
		memset(&cfg, 0, sizeof(cfg));
		if (from_file) {
			snprintf(want, sizeof(want), "\"key_file\": \"%s\"", path);
			ck_assert_msg(strstr(first, want) != NULL, "no %s in\n%s", want, first);
			ck_assert_msg(strstr(first, "\"key\":") == NULL, "%s", first);
			ck_assert_msg(strstr(first, "00112233") == NULL, "the file's key: %s", first);
		} else {
			ck_assert_msg(strstr(first, "\"key\": \"00112233445566778899aabbccddeeff"
					     "f0e1d2c3b4a5968778695a4b3c2d1e0f\"") != NULL, "%s", first);
			ck_assert_msg(strstr(first, "key_file") == NULL, "%s", first);
		}
		ck_assert_msg(phub_config_load_buffer(first, strlen(first), &params, &cfg, err,
						      sizeof(err)) == 0, "reloaded: %s\n%s", err, first);
		ck_assert(cfg.jobs[0].has_key);
		ck_assert_mem_eq(cfg.jobs[0].key, key, sizeof(key));
		ck_assert_str_eq(cfg.jobs[0].key_file, from_file ? path : "");
		second = dump_to_string(&cfg);
		ck_assert_str_eq(first, second);
		free(first);
		free(second);
		phub_config_free(&cfg);
		memset(&cfg, 0, sizeof(cfg));
	}
	unlink(path);
}
END_TEST

START_TEST(test_unknown_numa_facts_do_not_fail_the_check)
{
	/* A sysfs root with nothing in it: every node is unknown, so nothing is proven wrong. */
	ck_assert_msg(load_example("baremetal-2nic.json", "/nonexistent") == 0, "%s", err);
	ck_assert_int_eq(cfg.ports[1].numa_node, -1);
	ck_assert_int_eq(cfg.eal.lcores[0].numa_node, -1);
}
END_TEST

START_TEST(test_sysfs_readers_return_the_node_or_minus_one)
{
	enter_data_dir();
	ck_assert_int_eq(cfg_sysfs_pci_node("sysfs", "0000:af:00.0"), 1);
	ck_assert_int_eq(cfg_sysfs_pci_node("sysfs", "0000:3b:00.0"), 0);
	ck_assert_int_eq(cfg_sysfs_pci_node("sysfs", "0000:00:04.0"), -1);
	ck_assert_int_eq(cfg_sysfs_pci_node("sysfs", "0000:11:00.0"), -1);
	ck_assert_int_eq(cfg_sysfs_cpu_node("sysfs", 7), 0);
	ck_assert_int_eq(cfg_sysfs_cpu_node("sysfs", 8), 1);
	ck_assert_int_eq(cfg_sysfs_cpu_node("sysfs", 99), -1);
}
END_TEST

/* Offset of the first occurrence of marker in text. */
static size_t
offset_of(const char *text, const char *marker)
{
	const char *p = strstr(text, marker);

	ck_assert_msg(p != NULL, "marker %s", marker);
	return (size_t)(p - text);
}

START_TEST(test_locate_finds_values_past_escapes_and_lookalike_strings)
{
	/* The first "b" key is inside a string; the real one is escaped; [1] is after a "]". */
	const char *text = "{\"x\": \"{\\\"b\\\": 1}\", \"\\u0062\": [\"]\", {\"c\": 5}]}";
	const struct cfg_path_comp path[] = { { "b", 0 }, { NULL, 1 }, { "c", 0 } };
	size_t off;

	ck_assert(cfg_locate(text, strlen(text), path, 3, CFG_AT_VALUE, &off));
	ck_assert_uint_eq(off, offset_of(text, "5}"));
	ck_assert(cfg_locate(text, strlen(text), path, 3, CFG_AT_KEY, &off));
	ck_assert_uint_eq(off, offset_of(text, "\"c\""));
	ck_assert(cfg_locate(text, strlen(text), path, 1, CFG_AT_KEY, &off));
	ck_assert_uint_eq(off, offset_of(text, "\"\\u0062\""));
	ck_assert(cfg_locate(text, strlen(text), path, 0, CFG_AT_VALUE, &off));
	ck_assert_uint_eq(off, 0);
	/* A path that is not in the text is not found. */
	ck_assert(!cfg_locate(text, strlen(text), (const struct cfg_path_comp[]){ { NULL, 0 } },
			      1, CFG_AT_VALUE, &off));
}
END_TEST

START_TEST(test_columns_count_characters_and_lines_count_newlines)
{
	const char *text = "{\r\n\t\"\xc3\xa9t\xc3\xa9\": 1, \"k\": 2\n}";
	unsigned int line;
	unsigned int col;

	cfg_line_col(text, strlen(text), offset_of(text, "2"), &line, &col);
	ck_assert_uint_eq(line, 2);
	/* \t " é t é " : space 1 , space " k " : space -> 2 is the 17th character. */
	ck_assert_uint_eq(col, 17);
	cfg_line_col(text, strlen(text), 0, &line, &col);
	ck_assert_uint_eq(line, 1);
	ck_assert_uint_eq(col, 1);
}
END_TEST

START_TEST(test_first_error_in_document_order_wins)
{
	const char *text = "{\"eal\": {\"lcores\": [0, 1], \"bogus\": 1}, \"ports\": 7, \"x\": 1}";

	ck_assert_int_eq(load_string(text), -EINVAL);
	ck_assert_str_eq(err, "t.json:1:28: eal.bogus: unknown key (allowed: lcores, main_lcore, "
			 "memory_mb, no_huge, file_prefix, extra_args)");
}
END_TEST

START_TEST(test_short_error_buffer_is_cut_and_terminated)
{
	char small[16];
	struct phub_config_params params = { .name = "t.json" };
	const char *text = "{\"eal\": 1}";

	memset(small, 'x', sizeof(small));
	ck_assert_int_eq(phub_config_load_buffer(text, strlen(text), &params, &cfg, small,
						 sizeof(small)), -EINVAL);
	ck_assert_str_eq(small, "t.json:1:9: eal");
	ck_assert_int_eq(phub_config_load_buffer(text, strlen(text), &params, &cfg, NULL, 0),
			 -EINVAL);
}
END_TEST

START_TEST(test_missing_file_reports_errno_without_position)
{
	ck_assert_int_eq(phub_config_load("/nonexistent/phub.json", &cfg, err, sizeof(err)),
			 -ENOENT);
	ck_assert_str_eq(err, "/nonexistent/phub.json: cannot read: No such file or directory");
	ck_assert_int_eq(phub_config_load("/", &cfg, err, sizeof(err)), -EISDIR);
}
END_TEST

START_TEST(test_load_by_path_finds_drivers_relative_to_the_file)
{
	char path[PHUB_CONFIG_PATH_MAX];

	/* From another directory: "profiles/tap2" resolves against tests/data, not the cwd. */
	ck_assert_int_eq(chdir("/"), 0);
	snprintf(path, sizeof(path), "%s/tests/data/good_relative_drivers_dir.json",
		 source_root());
	ck_assert_msg(phub_config_load(path, &cfg, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(cfg.drivers[PHUB_CONFIG_DRIVER_TAP].max_queues, 2);
	ck_assert_str_eq(cfg.source, path);
}
END_TEST

START_TEST(test_drivers_dir_comes_from_file_then_params_then_environment)
{
	const char *no_key = "{\"eal\": {\"lcores\": [0, 1]}, \"ports\": [{\"name\": \"a\", "
			     "\"device\": \"net_tap0\", \"driver\": \"tap\", "
			     "\"ipv4\": \"10.0.0.1/24\", \"lcores\": [1]}]}";
	const char *with_key = "{\"drivers_dir\": \"/from-file\", \"eal\": {\"lcores\": [0, 1]}, "
			       "\"ports\": [{\"name\": \"a\", \"device\": \"net_tap0\", "
			       "\"driver\": \"tap\", \"ipv4\": \"10.0.0.1/24\", \"lcores\": [1]}]}";
	struct phub_config_params params = { .name = "t.json", .drivers_dir = "/from-params" };

	setenv("PHUB_DRIVERS_DIR", "/from-env", 1);
	ck_assert_int_eq(phub_config_load_buffer(with_key, strlen(with_key), &params, &cfg, err,
						 sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "/from-file/tap.json"));
	ck_assert_int_eq(phub_config_load_buffer(no_key, strlen(no_key), &params, &cfg, err,
						 sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "/from-params/tap.json"));
	params.drivers_dir = NULL;
	ck_assert_int_eq(phub_config_load_buffer(no_key, strlen(no_key), &params, &cfg, err,
						 sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "/from-env/tap.json"));
	unsetenv("PHUB_DRIVERS_DIR");
	ck_assert_msg(phub_config_load_buffer(no_key, strlen(no_key), &params, &cfg, err,
					      sizeof(err)) == 0, "%s", err);
}
END_TEST

/* A ring job's racks: each rack's PBox (this one or a peer), first rank, and our position. */
START_TEST(test_ring_job_racks_resolve_to_peers_and_rank_bases)
{
	const struct phub_config_job *job;

	enter_data_dir();
	ck_assert_msg(load_data("good_ring.json") == 0, "%s", err);
	ck_assert_str_eq(cfg.name, "rack1");
	ck_assert_int_eq(phub_config_job_find(&cfg, "spanning"), 0);
	job = &cfg.jobs[0];
	ck_assert_uint_eq(job->workers, 6);
	ck_assert_uint_eq(job->n_racks, 3);
	ck_assert_uint_eq(job->ring_pos, 1);
	ck_assert_int_eq(job->racks[0].peer, 0);
	ck_assert_int_eq(job->racks[1].peer, -1);
	ck_assert_int_eq(job->racks[2].peer, 1);
	ck_assert_uint_eq(job->racks[0].rank_base, 0);
	ck_assert_uint_eq(job->racks[1].rank_base, 2);
	ck_assert_uint_eq(job->racks[1].ranks, 3);
	ck_assert_uint_eq(job->racks[2].rank_base, 5);
	ck_assert_uint_eq(cfg.jobs[1].n_racks, 0);
	/* Peers reach through the named port; the control port defaults to 47000. */
	ck_assert_uint_eq(cfg.peers[0].port_index, 1);
	ck_assert_uint_eq(cfg.peers[0].udp_port, 47000);
	ck_assert_uint_eq(cfg.peers[1].udp_port, 47100);
	phub_config_free(&cfg);
	/* Without a name the PBox is "pbox"; a peer without a port uses the first. */
	ck_assert_msg(load_string("{\"eal\": {\"lcores\": [0, 1]}, \"ports\": [{\"name\": \"p\", "
			"\"device\": \"net_tap0\", \"driver\": \"tap\", \"ipv4\": "
			"\"10.0.0.1/24\", \"lcores\": [1]}], \"peers\": [{\"name\": \"r\", "
			"\"ipv4\": \"10.0.0.2\"}]}") == 0, "%s", err);
	ck_assert_str_eq(cfg.name, "pbox");
	ck_assert_uint_eq(cfg.peers[0].port_index, 0);
}
END_TEST

/* A one-port configuration for a driver, with a device of the right kind. */
static int
load_driver(enum phub_config_driver_id id)
{
	char text[512];
	const char *name = phub_config_driver_name(id);
	bool pci = id <= PHUB_CONFIG_DRIVER_IXGBE;

	snprintf(text, sizeof(text),
		 "{\"eal\": {\"lcores\": [0, 1]}, \"ports\": [{\"name\": \"p\", "
		 "\"device\": \"%s%s\", \"driver\": \"%s\", \"ipv4\": \"10.0.0.1/24\", "
		 "\"lcores\": [1]}]}", pci ? "0000:11:00.0" : "net_", pci ? "" : name, name);
	return load_string(text);
}

START_TEST(test_every_shipped_profile_loads_with_the_measured_limits)
{
	for (unsigned int id = 0; id < PHUB_CONFIG_DRIVER_COUNT; id++) {
		const struct phub_config_driver *d;

		ck_assert_msg(load_driver(id) == 0, "%s: %s", phub_config_driver_name(id), err);
		d = phub_config_port_driver(&cfg, 0);
		ck_assert_ptr_nonnull(d);
		if (id <= PHUB_CONFIG_DRIVER_IXGBE) {
			ck_assert_int_eq(d->bus, PHUB_CONFIG_BUS_PCI);
			ck_assert_int_eq(d->steering, PHUB_CONFIG_STEERING_RTE_FLOW);
			ck_assert_int_eq(d->fallback, PHUB_CONFIG_STEERING_RSS);
			ck_assert_uint_gt(d->max_queues, 1);
		} else if (id == PHUB_CONFIG_DRIVER_TAP) {
			ck_assert_int_eq(d->steering, PHUB_CONFIG_STEERING_TAP_BPF);
			ck_assert_uint_gt(d->max_queues, 1);
		} else {
			ck_assert_int_eq(d->bus, PHUB_CONFIG_BUS_VDEV);
			ck_assert_int_eq(d->steering, PHUB_CONFIG_STEERING_PORT_PER_LCORE);
			ck_assert_uint_eq(d->max_queues, 1);
		}
		phub_config_free(&cfg);
	}
	/* docs/dpdk-virtual-devices.md: af_packet mbufs of 16600 at MTU 9000; af_xdp 3442/3840. */
	ck_assert_int_eq(load_driver(PHUB_CONFIG_DRIVER_AF_PACKET), 0);
	ck_assert_uint_eq(cfg.drivers[PHUB_CONFIG_DRIVER_AF_PACKET].mbuf_size, 16600);
	ck_assert_uint_ge(cfg.drivers[PHUB_CONFIG_DRIVER_AF_PACKET].max_mtu, 9000);
	ck_assert_int_eq(load_driver(PHUB_CONFIG_DRIVER_AF_XDP), 0);
	ck_assert_uint_eq(cfg.drivers[PHUB_CONFIG_DRIVER_AF_XDP].max_mtu, 3442);
	ck_assert_uint_eq(cfg.drivers[PHUB_CONFIG_DRIVER_AF_XDP].mbuf_size, 3840);
	/* Only the drivers a port uses are read. */
	ck_assert(!cfg.drivers[PHUB_CONFIG_DRIVER_TAP].loaded);
}
END_TEST

START_TEST(test_random_nonces_pass_and_placeholders_fail)
{
	static const uint64_t weak[] = {
		0, UINT64_MAX, UINT64_C(0x0123456789abcdef), UINT64_C(0xfedcba9876543210),
		UINT64_C(0x02468ace02468ace), UINT64_C(0xdeadbeefdeadbeef),
		UINT64_C(0x00000000cafef00d), UINT64_C(0x1111111111111111),
		UINT64_C(0x1212121212121212), UINT64_C(0x0000000100000001),
	};
	uint64_t x = UINT64_C(0x9e3779b97f4a7c15);

	for (size_t i = 0; i < sizeof(weak) / sizeof(weak[0]); i++)
		ck_assert_msg(cfg_nonce_weakness(weak[i]) != NULL, "0x%016llx passed",
			      (unsigned long long)weak[i]);
	/* A fixed stream of well-mixed values, none of which should be refused. */
	for (unsigned int i = 0; i < 100000; i++) {
		phub_test_rand(&x);
		ck_assert_msg(cfg_nonce_weakness(x) == NULL, "0x%016llx refused: %s",
			      (unsigned long long)x, cfg_nonce_weakness(x));
	}
}
END_TEST

START_TEST(test_eal_argv_follows_the_config)
{
	char **argv = NULL;
	int argc;

	enter_data_dir();
	ck_assert_int_eq(load_data("good_all_keys.json"), 0);
	argc = phub_config_eal_argv(&cfg, "phub-pbox", &argv);
	ck_assert_int_eq(argc, 17);
	ck_assert_str_eq(argv[0], "phub-pbox");
	ck_assert_str_eq(argv[1], "--lcores");
	ck_assert_str_eq(argv[2], "3@3,1@1,2@2,4@1");
	ck_assert_str_eq(argv[4], "3");
	ck_assert_str_eq(argv[6], "2048");
	ck_assert_str_eq(argv[7], "--no-huge");
	ck_assert_str_eq(argv[9], "phub-all_keys.1");
	ck_assert_str_eq(argv[10], "--vdev");
	ck_assert_str_eq(argv[11], "net_tap0,iface=pb0");
	ck_assert_str_eq(argv[14], "--no-pci");
	ck_assert_str_eq(argv[16], "--log-level=lib.eal:notice");
	ck_assert_ptr_null(argv[17]);
	free(argv);
	phub_config_free(&cfg);
	ck_assert_int_eq(load_data("good_numa_pci.json"), 0);
	argc = phub_config_eal_argv(&cfg, NULL, &argv);
	ck_assert_str_eq(argv[argc - 2], "-a");
	ck_assert_str_eq(argv[argc - 1], "0000:d8:00.1");
	ck_assert_str_eq(argv[10], "0000:3b:00.0");
	ck_assert_str_eq(argv[12], "0000:af:00.0");
	free(argv);
}
END_TEST

START_TEST(test_plan_lists_every_queue_and_udp_port)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f;

	enter_data_dir();
	ck_assert_int_eq(load_data("good_all_keys.json"), 0);
	f = open_memstream(&buf, &size);
	ck_assert_int_eq(phub_config_dump_plan(&cfg, f), 0);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(buf, "#   (0, 1) -> 1\n"));
	ck_assert_ptr_nonnull(strstr(buf, "#   (1, 0) -> 4\n"));
	ck_assert_ptr_nonnull(strstr(buf, "main     50000 (control)"));
	ck_assert_ptr_nonnull(strstr(buf, "data 2   50003"));
	ck_assert_ptr_nonnull(strstr(buf, "chunk 65536 bytes = 47 segments of at most 1408"));
	for (char *line = buf; *line != '\0'; line = strchr(line, '\n') + 1)
		ck_assert_msg(strncmp(line, "# ", 2) == 0, "line without '# ': %s", line);
	free(buf);
}
END_TEST

/* The docs line of a key must hold its default and bounds as the table says them. */
static void
check_doc_line(const char *docs, const char *path, const struct cfg_field *f)
{
	char needle[160];
	char value[64];
	const char *line;
	const char *end;

	snprintf(needle, sizeof(needle), "| `%s` |", path);
	line = strstr(docs, needle);
	ck_assert_msg(line != NULL, "docs/config.md has no table row for `%s`", path);
	end = strchr(line, '\n');
	value[0] = '\0';
	/* A required key has no default to document. */
	switch ((f->flags & CFG_REQUIRED) ? CFG_CUSTOM : f->type) {
	case CFG_INT:
		if (f->def != CFG_UNSET_U16)
			snprintf(value, sizeof(value), "%lld", (long long)f->def);
		break;
	case CFG_BOOL:
		snprintf(value, sizeof(value), "%s", f->def ? "true" : "false");
		break;
	case CFG_ENUM:
		snprintf(value, sizeof(value), "\"%s\"", f->names[f->def]);
		break;
	case CFG_STRING:
		if (f->sdef != NULL)
			snprintf(value, sizeof(value), "\"%s\"", f->sdef);
		break;
	default:
		break;
	}
	if (value[0] != '\0') {
		const char *hit = strstr(line, value);

		ck_assert_msg(hit != NULL && hit < end, "`%s`: default %s not on its docs line",
			      path, value);
	}
	if (f->type == CFG_INT) {
		snprintf(value, sizeof(value), "%lld", (long long)f->max);
		ck_assert_msg(strstr(line, value) != NULL && strstr(line, value) < end,
			      "`%s`: bound %s not on its docs line", path, value);
	}
}

START_TEST(test_docs_give_every_key_with_its_default_and_bounds)
{
	char path[PHUB_CONFIG_PATH_MAX];
	unsigned int keys = 0;
	size_t len;
	char *docs;

	snprintf(path, sizeof(path), "%s/docs/config.md", source_root());
	docs = read_text(path, &len);
	for (const struct cfg_schema_table *t = cfg_schema; t->prefix != NULL; t++) {
		for (const struct cfg_field *f = t->fields; f->name != NULL; f++) {
			char key[128];

			snprintf(key, sizeof(key), "%s%s", t->prefix, f->name);
			check_doc_line(docs, key, f);
			keys++;
		}
	}
	for (const struct cfg_field *f = cfg_driver_fields; f->name != NULL; f++) {
		char key[128];

		snprintf(key, sizeof(key), "profile.%s", f->name);
		check_doc_line(docs, key, f);
		for (const struct cfg_field *s = f->sub; f->type == CFG_OBJECT && s->name != NULL;
		     s++) {
			snprintf(key, sizeof(key), "profile.%s.%s", f->name, s->name);
			check_doc_line(docs, key, s);
		}
	}
	ck_assert_uint_ge(keys, 50);
	free(docs);
}
END_TEST

Suite *
phub_config_suite(void)
{
	Suite *s = suite_create("config");
	struct {
		const char *name;
		const TTest *test;
	} cases[] = {
		{ "good files", test_good_files_load_without_error },
		{ "dump round trip", test_dump_of_a_good_file_loads_back_to_the_same_dump },
		{ "dump keeps the job key", test_a_dump_keeps_the_job_key_and_never_a_key_files_digits },
		{ "bad files", test_bad_files_report_their_exact_first_error },
		{ "bad files listed", test_every_bad_file_has_an_expected_message },
		{ "defaults", test_minimal_config_gets_the_documented_defaults },
		{ "all keys", test_every_key_is_read_as_written },
		{ "optimizer defaults", test_optimizer_defaults_follow_its_type },
		{ "lcore map", test_lcore_map_is_flat_and_sorted_by_port_then_queue },
		{ "udp ports", test_data_lcore_k_listens_on_base_plus_one_plus_k },
		{ "lookups", test_lookups_find_what_the_file_names },
		{ "ring racks", test_ring_job_racks_resolve_to_peers_and_rank_bases },
		{ "virtual rack example", test_virtual_rack_example_loads },
		{ "bare-metal example",
		  test_baremetal_example_loads_with_its_nics_on_two_numa_nodes },
		{ "declared job size",
		  test_declared_job_takes_its_parameters_from_a_model_or_a_count },
		{ "job key", test_a_job_key_is_64_hex_digits_for_an_authenticated_job },
		{ "unknown numa", test_unknown_numa_facts_do_not_fail_the_check },
		{ "sysfs", test_sysfs_readers_return_the_node_or_minus_one },
		{ "locate", test_locate_finds_values_past_escapes_and_lookalike_strings },
		{ "line and column", test_columns_count_characters_and_lines_count_newlines },
		{ "first error", test_first_error_in_document_order_wins },
		{ "short buffer", test_short_error_buffer_is_cut_and_terminated },
		{ "missing file", test_missing_file_reports_errno_without_position },
		{ "relative drivers_dir", test_load_by_path_finds_drivers_relative_to_the_file },
		{ "drivers_dir precedence",
		  test_drivers_dir_comes_from_file_then_params_then_environment },
		{ "profiles", test_every_shipped_profile_loads_with_the_measured_limits },
		{ "nonces", test_random_nonces_pass_and_placeholders_fail },
		{ "eal argv", test_eal_argv_follows_the_config },
		{ "plan", test_plan_lists_every_queue_and_udp_port },
		{ "docs", test_docs_give_every_key_with_its_default_and_bounds },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		TCase *tc = PHUB_TCASE(s, cases[i].name, cases[i].test);

		tcase_add_checked_fixture(tc, NULL, teardown);
	}
	return s;
}
