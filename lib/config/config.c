/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The public face of lib/config: load (parse -> params -> validate -> derive), free, the
 * look-ups the appliance needs, and the EAL command line a configuration asks for.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config_priv.h"

#define NAME_(id, name) name,
static const char *const driver_names[] = { PHUB_CONFIG_FOREACH_DRIVER(NAME_) };
static const char *const steering_names[] = { PHUB_CONFIG_FOREACH_STEERING(NAME_) };
static const char *const bus_names[] = { PHUB_CONFIG_FOREACH_BUS(NAME_) };
static const char *const idle_names[] = { PHUB_CONFIG_FOREACH_IDLE(NAME_) };
#undef NAME_

#define ENUM_NAME(table, v) \
	((unsigned int)(v) < sizeof(table) / sizeof((table)[0]) ? (table)[(v)] : "?")

const char *
phub_config_driver_name(enum phub_config_driver_id id)
{
	return ENUM_NAME(driver_names, id);
}

const char *
phub_config_steering_name(enum phub_config_steering steering)
{
	return ENUM_NAME(steering_names, steering);
}

const char *
phub_config_bus_name(enum phub_config_bus bus)
{
	return ENUM_NAME(bus_names, bus);
}

const char *
phub_config_idle_name(enum phub_config_idle_policy policy)
{
	return ENUM_NAME(idle_names, policy);
}

void
phub_config_free(struct phub_config *cfg)
{
	if (cfg == NULL)
		return;
	free(cfg->jobs);
	memset(cfg, 0, sizeof(*cfg));
}

static const char *
env_or(const char *given, const char *env, const char *fallback)
{
	const char *v;

	if (given != NULL)
		return given;
	v = getenv(env);
	return v != NULL && v[0] != '\0' ? v : fallback;
}

int
phub_config_load_buffer(const void *buf, size_t size, const struct phub_config_params *params,
			struct phub_config *cfg, char *err, size_t errlen)
{
	static const struct phub_config_params no_params;
	char drivers_dir[PHUB_CONFIG_PATH_MAX];
	struct cfg_ctx ctx;
	const char *slash;
	int rc;

	if (params == NULL)
		params = &no_params;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (cfg == NULL || (buf == NULL && size > 0))
		return -EINVAL;
	memset(cfg, 0, sizeof(*cfg));
	memset(&ctx, 0, sizeof(ctx));
	ctx.name = params->name != NULL ? params->name : "<buffer>";
	ctx.text = buf != NULL ? buf : "";
	ctx.len = size;
	ctx.err = err;
	ctx.errlen = errlen;
	ctx.sysfs_root = env_or(params->sysfs_root, "PHUB_SYSFS_ROOT", "/sys");
	if (phub_config_default_drivers_dir(drivers_dir, sizeof(drivers_dir)) != 0)
		drivers_dir[0] = '\0';
	ctx.default_drivers_dir = env_or(params->drivers_dir, "PHUB_DRIVERS_DIR", drivers_dir);
	slash = strrchr(ctx.name, '/');
	if (slash != NULL && (size_t)(slash - ctx.name) < sizeof(ctx.base_dir))
		/* "/x.json" lives in "/": keep the slash so that joining gives "//d" at worst. */
		snprintf(ctx.base_dir, sizeof(ctx.base_dir), "%.*s",
			 slash == ctx.name ? 1 : (int)(slash - ctx.name), ctx.name);

	ctx.root = cfg_parse_text(&ctx);
	if (ctx.root == NULL) {
		rc = -EINVAL;
		goto fail;
	}
	rc = cfg_parse(&ctx, cfg);
	if (rc == 0)
		rc = cfg_params(&ctx, cfg);
	if (rc == 0)
		rc = cfg_validate(&ctx, cfg);
	if (rc != 0)
		goto fail;
	cfg_derive(cfg);
	snprintf(cfg->source, sizeof(cfg->source), "%s", ctx.name);
	json_decref(ctx.root);
	return 0;
fail:
	if (!ctx.failed)
		cfg_error_file(&ctx, rc, "%s", strerror(-rc));
	json_decref(ctx.root);
	phub_config_free(cfg);
	return rc;
}

int
phub_config_load(const char *path, struct phub_config *cfg, char *err, size_t errlen)
{
	struct phub_config_params params = { .name = path };
	char *text = NULL;
	size_t len = 0;
	int rc;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (path == NULL || cfg == NULL)
		return -EINVAL;
	memset(cfg, 0, sizeof(*cfg));
	/* Read it ourselves: the text is needed again to place errors. */
	rc = cfg_read_file(path, &text, &len);
	if (rc != 0) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "%s: cannot read: %s", path, cfg_read_error(rc));
		return rc;
	}
	rc = phub_config_load_buffer(text, len, &params, cfg, err, errlen);
	free(text);
	return rc;
}

const struct phub_config_lcore *
phub_config_lcore_find(const struct phub_config *cfg, unsigned int lcore_id)
{
	for (unsigned int i = 0; i < cfg->eal.n_lcores; i++) {
		if (cfg->eal.lcores[i].id == lcore_id)
			return &cfg->eal.lcores[i];
	}
	errno = ENOENT;
	return NULL;
}

int
phub_config_lcore_udp_port(const struct phub_config *cfg, unsigned int lcore_id)
{
	for (unsigned int k = 0; k < cfg->n_data_lcores; k++) {
		if (cfg->data_lcores[k] == lcore_id)
			return (int)(cfg->udp_base_port + 1 + k);
	}
	return -ENOENT;
}

int
phub_config_udp_port_lcore(const struct phub_config *cfg, unsigned int udp_port)
{
	if (udp_port <= cfg->udp_base_port || udp_port > cfg->udp_base_port + cfg->n_data_lcores)
		return -ENOENT;
	return cfg->data_lcores[udp_port - cfg->udp_base_port - 1];
}

const struct phub_config_driver *
phub_config_port_driver(const struct phub_config *cfg, unsigned int port)
{
	if (port >= cfg->n_ports || !cfg->drivers[cfg->ports[port].driver].loaded) {
		errno = EINVAL;
		return NULL;
	}
	return &cfg->drivers[cfg->ports[port].driver];
}

int
phub_config_job_find(const struct phub_config *cfg, const char *name)
{
	for (unsigned int i = 0; i < cfg->n_jobs; i++) {
		if (strcmp(cfg->jobs[i].name, name) == 0)
			return (int)i;
	}
	return -ENOENT;
}

/* Collects argv strings into one buffer before they are packed into one allocation. */
struct argv_builder {
	char text[PHUB_CONFIG_MAX_LCORES * 12 + PHUB_CONFIG_MAX_PORTS * PHUB_CONFIG_DEVICE_MAX +
		  PHUB_CONFIG_MAX_EXTRA_ARGS * PHUB_CONFIG_ARG_MAX + 1024];
	size_t used;
	int argc;
};

static void
argv_add(struct argv_builder *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
argv_add(struct argv_builder *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(b->text + b->used, sizeof(b->text) - b->used, fmt, ap);
	va_end(ap);
	/* The buffer is sized for the largest configuration; never cut an argument. */
	if (n < 0 || (size_t)n >= sizeof(b->text) - b->used)
		return;
	b->used += (size_t)n + 1;
	b->argc++;
}

int
phub_config_eal_argv(const struct phub_config *cfg, const char *prog, char ***argv)
{
	struct argv_builder *b;
	bool any_pci = false;
	char **out;
	char *strings;
	size_t o = 0;
	int rc;

	b = calloc(1, sizeof(*b));
	if (b == NULL)
		return -ENOMEM;
	argv_add(b, "%s", prog != NULL ? prog : "phub-pbox");
	argv_add(b, "--lcores");
	for (unsigned int i = 0; i < cfg->eal.n_lcores; i++)
		o += (size_t)snprintf(b->text + b->used + o, sizeof(b->text) - b->used - o,
				      "%s%u@%u", i == 0 ? "" : ",", cfg->eal.lcores[i].id,
				      cfg->eal.lcores[i].cpu);
	b->used += o + 1;
	b->argc++;
	argv_add(b, "--main-lcore");
	argv_add(b, "%u", cfg->eal.main_lcore);
	argv_add(b, "-m");
	argv_add(b, "%u", cfg->eal.memory_mb);
	if (cfg->eal.no_huge)
		argv_add(b, "--no-huge");
	argv_add(b, "--file-prefix");
	argv_add(b, "%s", cfg->eal.file_prefix);
	for (unsigned int p = 0; p < cfg->n_ports; p++) {
		any_pci |= cfg->ports[p].is_pci;
		argv_add(b, "%s", cfg->ports[p].is_pci ? "-a" : "--vdev");
		argv_add(b, "%s", cfg->ports[p].device);
	}
	if (!any_pci)
		argv_add(b, "--no-pci");
	for (unsigned int i = 0; i < cfg->eal.n_extra_args; i++)
		argv_add(b, "%s", cfg->eal.extra_args[i]);

	out = malloc(sizeof(char *) * (size_t)(b->argc + 1) + b->used);
	if (out == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	strings = (char *)(out + b->argc + 1);
	memcpy(strings, b->text, b->used);
	for (int i = 0; i < b->argc; i++) {
		out[i] = strings;
		strings += strlen(strings) + 1;
	}
	out[b->argc] = NULL;
	*argv = out;
	rc = b->argc;
out:
	free(b);
	return rc;
}
