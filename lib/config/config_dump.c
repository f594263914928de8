/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Writing a loaded configuration back out: as JSON that loads to the same struct (every key,
 * defaults made explicit), and as the plan it implies (lcores, queues, UDP ports, profiles).
 */

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "config_priv.h"

static void
put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* The shortest text that reads back as the same double. */
static void
put_real(FILE *f, double x)
{
	char buf[32];

	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, x);
		if (strtod(buf, NULL) == x)
			break;
	}
	fputs(buf, f);
}

static void
put_ipv4(FILE *f, uint32_t a)
{
	fprintf(f, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
}

static void
dump_eal(const struct phub_config_eal *eal, FILE *f)
{
	fprintf(f, "  \"eal\": {\n    \"lcores\": [");
	for (unsigned int i = 0; i < eal->n_lcores; i++) {
		const struct phub_config_lcore *l = &eal->lcores[i];

		if (l->id == l->cpu)
			fprintf(f, "%s%u", i == 0 ? "" : ", ", l->id);
		else
			fprintf(f, "%s\"%u@%u\"", i == 0 ? "" : ", ", l->id, l->cpu);
	}
	fprintf(f, "],\n    \"main_lcore\": %u,\n    \"memory_mb\": %u,\n", eal->main_lcore,
		eal->memory_mb);
	fprintf(f, "    \"no_huge\": %s,\n    \"file_prefix\": ", eal->no_huge ? "true" : "false");
	put_string(f, eal->file_prefix);
	fprintf(f, ",\n    \"extra_args\": [");
	for (unsigned int i = 0; i < eal->n_extra_args; i++) {
		fprintf(f, "%s", i == 0 ? "" : ", ");
		put_string(f, eal->extra_args[i]);
	}
	fprintf(f, "]\n  },\n");
}

static void
dump_ports(const struct phub_config *cfg, FILE *f)
{
	fprintf(f, "  \"ports\": [\n");
	for (unsigned int p = 0; p < cfg->n_ports; p++) {
		const struct phub_config_port *port = &cfg->ports[p];

		fprintf(f, "    {\n      \"name\": ");
		put_string(f, port->name);
		fprintf(f, ",\n      \"device\": ");
		put_string(f, port->device);
		fprintf(f, ",\n      \"driver\": \"%s\",\n      \"ipv4\": \"",
			phub_config_driver_name(port->driver));
		put_ipv4(f, port->ipv4);
		fprintf(f, "/%u\",\n      \"mtu\": %u,\n      \"rx_desc\": %u,\n"
			"      \"tx_desc\": %u,\n      \"lcores\": [", port->prefix_len, port->mtu,
			port->rx_desc, port->tx_desc);
		for (unsigned int q = 0; q < port->n_lcores; q++)
			fprintf(f, "%s%u", q == 0 ? "" : ", ", port->lcores[q]);
		fprintf(f, "]\n    }%s\n", p + 1 < cfg->n_ports ? "," : "");
	}
	fprintf(f, "  ],\n");
}

static void
dump_optimizer(const struct phub_config_optimizer *o, FILE *f)
{
	const struct {
		const char *name;
		double value;
		bool used;
	} params[] = {
		{ "lr", o->lr, o->type != PHUB_OPT_NONE },
		{ "momentum", o->momentum, o->type == PHUB_OPT_MOMENTUM ||
					   o->type == PHUB_OPT_NESTEROV },
		{ "weight_decay", o->weight_decay, o->type != PHUB_OPT_NONE },
		{ "beta1", o->beta1, o->type == PHUB_OPT_ADAM ||
				     o->type == PHUB_OPT_ADAMW },
		{ "beta2", o->beta2, o->type == PHUB_OPT_ADAM ||
				     o->type == PHUB_OPT_ADAMW },
		{ "eps", o->eps, o->type == PHUB_OPT_ADAM ||
				 o->type == PHUB_OPT_ADAMW },
	};

	fprintf(f, "      \"optimizer\": { \"type\": \"%s\"", phub_opt_type_name(o->type));
	for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++) {
		if (!params[i].used)
			continue;
		fprintf(f, ", \"%s\": ", params[i].name);
		put_real(f, params[i].value);
	}
	fprintf(f, " }\n");
}

static void
dump_jobs(const struct phub_config *cfg, FILE *f)
{
	fprintf(f, "  \"jobs\": [");
	for (unsigned int i = 0; i < cfg->n_jobs; i++) {
		const struct phub_config_job *job = &cfg->jobs[i];

		fprintf(f, "%s\n    {\n      \"name\": ", i == 0 ? "" : ",");
		put_string(f, job->name);
		fprintf(f, ",\n      \"nonce\": \"0x%016llx\",\n      \"workers\": %u,\n"
			"      \"dtype\": \"%s\",\n      \"deterministic\": %s,\n"
			"      \"on_worker_dead\": \"%s\",\n      \"auth\": \"%s\",\n",
			(unsigned long long)job->nonce, job->workers,
			phub_dtype_name(job->dtype), job->deterministic ? "true" : "false",
			job->on_worker_dead == PHUB_CONFIG_ON_DEAD_CONTINUE ? "continue" : "fail",
			job->auth == PHUB_CONFIG_AUTH_REQUIRED ? "required" : "off");
		/*
		 * The key as it was given: a key_file stays a reference to its file (whose secret a
		 * dump, shown or logged, must not carry), an inline key stays inline.
		 */
		if (job->key_file[0] != '\0') {
			fprintf(f, "      \"key_file\": ");
			put_string(f, job->key_file);
			fprintf(f, ",\n");
		} else if (job->has_key) {
			fprintf(f, "      \"key\": \"");
			for (size_t k = 0; k < sizeof(job->key); k++)
				fprintf(f, "%02x", job->key[k]);
			fprintf(f, "\",\n");
		}
		dump_optimizer(&job->optimizer, f);
		if (job->n_racks != 0) {
			fprintf(f, "      ,\"racks\": [");
			for (unsigned int r = 0; r < job->n_racks; r++) {
				fprintf(f, "%s{ \"pbox\": ", r == 0 ? " " : ", ");
				put_string(f, job->racks[r].pbox);
				fprintf(f, ", \"ranks\": %u }", job->racks[r].ranks);
			}
			fprintf(f, " ]\n");
		}
		fprintf(f, "    }");
	}
	fprintf(f, "%s],\n", cfg->n_jobs > 0 ? "\n  " : "");
}

static void
dump_peers(const struct phub_config *cfg, FILE *f)
{
	fprintf(f, "  \"peers\": [");
	for (unsigned int i = 0; i < cfg->n_peers; i++) {
		fprintf(f, "%s\n    { \"name\": ", i == 0 ? "" : ",");
		put_string(f, cfg->peers[i].name);
		fprintf(f, ", \"ipv4\": \"");
		put_ipv4(f, cfg->peers[i].ipv4);
		fprintf(f, "\", \"udp_port\": %u, \"port\": ", cfg->peers[i].udp_port);
		put_string(f, cfg->ports[cfg->peers[i].port_index].name);
		fprintf(f, " }");
	}
	fprintf(f, "%s],\n", cfg->n_peers > 0 ? "\n  " : "");
}

int
phub_config_dump(const struct phub_config *cfg, FILE *f)
{
	char resolved[PATH_MAX];
	const char *dir = cfg->drivers_dir;

	/* An absolute drivers_dir keeps the dump valid wherever it is loaded from. */
	if (realpath(cfg->drivers_dir, resolved) != NULL)
		dir = resolved;
	fprintf(f, "{\n  \"name\": ");
	put_string(f, cfg->name);
	fprintf(f, ",\n");
	dump_eal(&cfg->eal, f);
	fprintf(f, "  \"drivers_dir\": ");
	put_string(f, dir);
	fprintf(f, ",\n");
	dump_ports(cfg, f);
	fprintf(f, "  \"udp_base_port\": %u,\n  \"chunk_bytes\": %u,\n  \"segment_bytes\": %u,\n",
		cfg->udp_base_port, cfg->chunk_bytes, cfg->segment_bytes);
	fprintf(f, "  \"idle\": { \"policy\": \"%s\", \"spin_polls\": %u, "
		"\"max_sleep_us\": %u },\n", phub_config_idle_name(cfg->idle.policy),
		cfg->idle.spin_polls, cfg->idle.max_sleep_us);
	fprintf(f, "  \"timeouts\": { \"rto_min_ms\": %u, \"rto_max_ms\": %u, "
		"\"worker_dead_ms\": %u, \"join_ms\": %u },\n", cfg->timeouts.rto_min_ms,
		cfg->timeouts.rto_max_ms, cfg->timeouts.worker_dead_ms, cfg->timeouts.join_ms);
	fprintf(f, "  \"window_bytes\": %u,\n  \"deterministic\": %s,\n", cfg->window_bytes,
		cfg->deterministic ? "true" : "false");
	fprintf(f, "  \"priority_order\": %s,\n", cfg->priority_order ? "true" : "false");
	fprintf(f, "  \"priority_hold\": %u,\n  \"priority_hold_us\": %u,\n", cfg->priority_hold,
		cfg->priority_hold_us);
	fprintf(f, "  \"limits\": { \"max_jobs\": %u, \"max_workers_per_job\": %u, "
		"\"job_memory_mb\": %u, \"total_memory_mb\": %u },\n", cfg->limits.max_jobs,
		cfg->limits.max_workers_per_job, cfg->limits.job_memory_mb,
		cfg->limits.total_memory_mb);
	dump_jobs(cfg, f);
	fprintf(f, "  \"checkpoint\": { \"dir\": ");
	put_string(f, cfg->checkpoint.dir);
	fprintf(f, ", \"interval_iterations\": %u },\n", cfg->checkpoint.interval_iterations);
	dump_peers(cfg, f);
	fprintf(f, "  \"telemetry\": { \"enabled\": %s }\n}\n",
		cfg->telemetry_enabled ? "true" : "false");
	return ferror(f) ? -EIO : 0;
}

int
phub_config_dump_plan(const struct phub_config *cfg, FILE *f)
{
	fprintf(f, "# plan of %s\n", cfg->source);
	fprintf(f, "# lcore  cpu  node  role     udp port\n");
	for (unsigned int i = 0; i < cfg->eal.n_lcores; i++) {
		const struct phub_config_lcore *l = &cfg->eal.lcores[i];
		int udp = phub_config_lcore_udp_port(cfg, l->id);

		if (l->id == cfg->eal.main_lcore)
			fprintf(f, "# %5u %4u %5d  main     %u (control)\n", l->id, l->cpu,
				l->numa_node, cfg->udp_base_port);
		else if (udp > 0)
			fprintf(f, "# %5u %4u %5d  data %-3d %d\n", l->id, l->cpu, l->numa_node,
				l->data_index, udp);
		else
			fprintf(f, "# %5u %4u %5d  unused\n", l->id, l->cpu, l->numa_node);
	}
	fprintf(f, "# port  name  device  driver  node  queues\n");
	for (unsigned int p = 0; p < cfg->n_ports; p++) {
		const struct phub_config_port *port = &cfg->ports[p];
		const struct phub_config_driver *d = &cfg->drivers[port->driver];

		fprintf(f, "# %4u  %s  %s  %s (%s, steering %s, fallback %s)  %d  %u\n", p,
			port->name, port->device, phub_config_driver_name(port->driver), d->pmd,
			phub_config_steering_name(d->steering),
			phub_config_steering_name(d->fallback), port->numa_node, port->n_lcores);
	}
	fprintf(f, "# (port, queue) -> lcore\n");
	for (unsigned int i = 0; i < cfg->n_lcore_params; i++)
		fprintf(f, "#   (%u, %u) -> %u\n", cfg->lcore_params[i].port,
			cfg->lcore_params[i].queue, cfg->lcore_params[i].lcore);
	fprintf(f, "# chunk %u bytes = %u segments of at most %u bytes; window %u bytes\n",
		cfg->chunk_bytes, (cfg->chunk_bytes + cfg->segment_bytes - 1) / cfg->segment_bytes,
		cfg->segment_bytes, cfg->window_bytes);
	fprintf(f, "# drivers from %s\n", cfg->drivers_dir);
	return ferror(f) ? -EIO : 0;
}
