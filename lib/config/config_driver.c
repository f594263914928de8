/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Driver profiles: drivers-cfg/<driver>.json says what a NIC driver can do (queues, MTU,
 * descriptors, offloads) and how the PBox steers a UDP port to its lcore on it. Each profile a
 * port names is read once, with the same table parser and the same error format as the config.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config_priv.h"

/* DPDK's RTE_MBUF_DEFAULT_BUF_SIZE and RTE_PKTMBUF_HEADROOM, without including DPDK. */
#define MBUF_DEFAULT_SIZE 2176
#define MBUF_HEADROOM 128
#define ETHER_HDR_LEN 14

/* The profile and its "driver" key, which must name the file it is in. */
struct profile {
	struct phub_config_driver d;
	enum phub_config_driver_id driver;
};

#define NAME_(id, name) name,
static const char *const driver_names[] = { PHUB_CONFIG_FOREACH_DRIVER(NAME_) NULL };
static const char *const steering_names[] = { PHUB_CONFIG_FOREACH_STEERING(NAME_) NULL };
static const char *const bus_names[] = { PHUB_CONFIG_FOREACH_BUS(NAME_) NULL };
#undef NAME_

#define P_SIZE(m) sizeof(((struct profile *)0)->m)
#define P_INT(n, m, lo, hi, d, fl) \
	{ .name = (n), .type = CFG_INT, .flags = (fl), .min = (lo), .max = (hi), .def = (d), \
	  .offset = offsetof(struct profile, m), .size = P_SIZE(m) }
#define P_BOOL(n, m) \
	{ .name = (n), .type = CFG_BOOL, .flags = CFG_REQUIRED, \
	  .offset = offsetof(struct profile, m) }
#define P_ENUM(n, m, names_) \
	{ .name = (n), .type = CFG_ENUM, .flags = CFG_REQUIRED, .names = (names_), \
	  .offset = offsetof(struct profile, m), .size = P_SIZE(m) }
#define P_STR(n, m, lo, hi, cs, fl) \
	{ .name = (n), .type = CFG_STRING, .flags = (fl), .min = (lo), .max = (hi), \
	  .charset = (cs), .offset = offsetof(struct profile, m), .size = P_SIZE(m) }

/* The offload flags land in the profile too: the sub-table's base is the profile. */
static const struct cfg_field offload_fields[] = {
	P_BOOL("rx_checksum", d.rx_checksum),
	P_BOOL("tx_checksum", d.tx_checksum),
	P_BOOL("multi_seg", d.multi_seg),
	{ .name = NULL },
};

const struct cfg_field cfg_driver_fields[] = {
	P_ENUM("driver", driver, driver_names),
	P_ENUM("bus", d.bus, bus_names),
	P_STR("pmd", d.pmd, 1, PHUB_CONFIG_PMD_MAX - 1, CFG_CS_IDENT, CFG_REQUIRED),
	P_INT("max_queues", d.max_queues, 1, 1024, 0, CFG_REQUIRED),
	P_INT("rx_desc_default", d.rx_desc_default, 64, 32768, 0, CFG_REQUIRED | CFG_POW2),
	P_INT("tx_desc_default", d.tx_desc_default, 64, 32768, 0, CFG_REQUIRED | CFG_POW2),
	P_INT("max_mtu", d.max_mtu, 576, 65535, 0, CFG_REQUIRED),
	P_ENUM("steering", d.steering, steering_names),
	P_ENUM("fallback", d.fallback, steering_names),
	{ .name = "offloads", .type = CFG_OBJECT, .flags = CFG_REQUIRED, .sub = offload_fields,
	  .offset = 0 },
	P_INT("mbuf_size", d.mbuf_size, 1024, 65535, 0, CFG_ZERO_OK),
	P_STR("kernel_driver", d.kernel_driver, 1, PHUB_CONFIG_PMD_MAX - 1, CFG_CS_IDENT, 0),
	P_STR("notes", d.notes, 0, PHUB_CONFIG_NOTES_MAX - 1, CFG_CS_ANY, 0),
	{ .name = NULL },
};

/* Rules between the keys of one profile. */
static int
profile_validate(struct cfg_ctx *ctx, const struct profile *p, enum phub_config_driver_id id)
{
	const struct phub_config_driver *d = &p->d;
	unsigned int room = (d->mbuf_size != 0 ? d->mbuf_size : MBUF_DEFAULT_SIZE) -
			    MBUF_HEADROOM;

	if (p->driver != id)
		return cfg_error_at(ctx, "driver", "\"%s\" does not match the file name %s.json",
				    phub_config_driver_name(p->driver),
				    phub_config_driver_name(id));
	if (d->steering == PHUB_CONFIG_STEERING_NONE)
		return cfg_error_at(ctx, "steering", "\"none\" is only a fallback: a port needs "
				    "a way to reach each lcore's queue");
	if (d->steering == PHUB_CONFIG_STEERING_PORT_PER_LCORE && d->max_queues != 1)
		return cfg_error_at(ctx, "max_queues", "%u, but port_per_lcore steering means "
				    "one queue per port: it must be 1", d->max_queues);
	/* phub-setup binds each PCI NIC to this driver; a vdev is no device to bind. */
	if (d->bus == PHUB_CONFIG_BUS_PCI && d->kernel_driver[0] == '\0')
		return cfg_error_at(ctx, "bus", "a PCI profile needs \"kernel_driver\": the "
				    "driver phub-setup binds the NIC to (\"vfio-pci\", or the "
				    "kernel's own for a bifurcated driver)");
	if (d->bus != PHUB_CONFIG_BUS_PCI && d->kernel_driver[0] != '\0')
		return cfg_error_at(ctx, "kernel_driver", "only a PCI device is bound to a "
				    "kernel driver; this profile's bus is \"%s\"",
				    phub_config_bus_name(d->bus));
	if (d->fallback != PHUB_CONFIG_STEERING_NONE && d->fallback == d->steering)
		return cfg_error_at(ctx, "fallback", "\"%s\" is the steering itself",
				    phub_config_steering_name(d->fallback));
	/* Without multi-segment mbufs a whole frame must fit one mbuf. */
	if (!d->multi_seg && (unsigned int)d->max_mtu + ETHER_HDR_LEN > room)
		return cfg_error_at(ctx, cfg_has(ctx, "mbuf_size") ? "mbuf_size" : "max_mtu",
				    "max_mtu %u needs mbufs of %u bytes (frame and %u of headroom) "
				    "without multi_seg, but they are %u", d->max_mtu,
				    d->max_mtu + ETHER_HDR_LEN + MBUF_HEADROOM, MBUF_HEADROOM,
				    room + MBUF_HEADROOM);
	return 0;
}

/* Read, parse and check drivers_dir/<name>.json into cfg->drivers[id]; port i named it. */
static int
profile_load(struct cfg_ctx *ctx, struct phub_config *cfg, unsigned int port,
	     enum phub_config_driver_id id)
{
	struct cfg_ctx pctx;
	struct profile p;
	char path[PHUB_CONFIG_PATH_MAX + 32];
	char where[64];
	char *text = NULL;
	size_t len = 0;
	int rc;

	snprintf(where, sizeof(where), "ports[%u].driver", port);
	snprintf(path, sizeof(path), "%s/%s.json", cfg->drivers_dir, phub_config_driver_name(id));
	rc = cfg_read_file(path, &text, &len);
	if (rc != 0)
		return cfg_error_at(ctx, where, "cannot read the profile %s: %s", path,
				    cfg_read_error(rc));
	memset(&pctx, 0, sizeof(pctx));
	pctx.name = path;
	pctx.text = text;
	pctx.len = len;
	pctx.err = ctx->err;
	pctx.errlen = ctx->errlen;
	memset(&p, 0, sizeof(p));
	pctx.root = cfg_parse_text(&pctx);
	if (pctx.root == NULL) {
		rc = -EINVAL;
		goto out;
	}
	rc = cfg_parse_object(&pctx, pctx.root, cfg_driver_fields, &p);
	if (rc == 0)
		rc = profile_validate(&pctx, &p, id);
	if (rc == 0) {
		cfg->drivers[id] = p.d;
		cfg->drivers[id].loaded = true;
	}
out:
	/* The profile's own message is the one to keep. */
	if (pctx.failed)
		ctx->failed = true;
	json_decref(pctx.root);
	free(text);
	return rc;
}

int
cfg_drivers_load(struct cfg_ctx *ctx, struct phub_config *cfg)
{
	for (unsigned int i = 0; i < cfg->n_ports; i++) {
		enum phub_config_driver_id id = cfg->ports[i].driver;
		int rc;

		if (cfg->drivers[id].loaded)
			continue;
		rc = profile_load(ctx, cfg, i, id);
		if (rc != 0)
			return rc;
	}
	return 0;
}
