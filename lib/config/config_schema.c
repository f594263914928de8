/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The schema of the configuration file: one field table per object (name, type, bounds,
 * default, target) and the parsers of the values that a table cannot describe alone.
 * docs/config.md documents every key here; a unit test checks that it does.
 */

#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/phub_auth.h"
#include "config_priv.h"
#include "model/phub_model.h"

#define FIELD_SIZE(st, m) sizeof(((st *)0)->m)

#define F_BOOL(n, st, m, d) \
	{ .name = (n), .type = CFG_BOOL, .def = (d), .offset = offsetof(st, m) }
#define F_INT(n, st, m, lo, hi, d, fl) \
	{ .name = (n), .type = CFG_INT, .flags = (fl), .min = (lo), .max = (hi), .def = (d), \
	  .offset = offsetof(st, m), .size = FIELD_SIZE(st, m) }
#define F_REAL(n, st, m, lo, hi, fl) \
	{ .name = (n), .type = CFG_REAL, .flags = (fl), .rmin = (lo), .rmax = (hi), \
	  .offset = offsetof(st, m) }
#define F_STR(n, st, m, lo, hi, cs, d, fl) \
	{ .name = (n), .type = CFG_STRING, .flags = (fl), .min = (lo), .max = (hi), \
	  .charset = (cs), .sdef = (d), .offset = offsetof(st, m), .size = FIELD_SIZE(st, m) }
#define F_ENUM(n, st, m, names_, d, fl) \
	{ .name = (n), .type = CFG_ENUM, .flags = (fl), .names = (names_), .def = (d), \
	  .offset = offsetof(st, m), .size = FIELD_SIZE(st, m) }
#define F_OBJ(n, st, m, sub_, fl) \
	{ .name = (n), .type = CFG_OBJECT, .flags = (fl), .sub = (sub_), .offset = offsetof(st, m) }
#define F_CUSTOM(n, off, fn, fl) \
	{ .name = (n), .type = CFG_CUSTOM, .flags = (fl), .parse = (fn), .offset = (off) }
#define F_END { .name = NULL }

#define NAME_(id, name) name,
static const char *const driver_names[] = { PHUB_CONFIG_FOREACH_DRIVER(NAME_) NULL };
static const char *const idle_names[] = { PHUB_CONFIG_FOREACH_IDLE(NAME_) NULL };
#undef NAME_
/* Indexed by value: the dtype and optimizer values run from 0 without a hole. */
#define DTYPE_NAME_(id, v, sz, name) [PHUB_DTYPE_##id] = name,
static const char *const dtype_names[] = { PHUB_FOREACH_DTYPE(DTYPE_NAME_) NULL };
#undef DTYPE_NAME_
static const char *const auth_names[] = {
	[PHUB_CONFIG_AUTH_OFF] = "off", [PHUB_CONFIG_AUTH_REQUIRED] = "required", NULL
};
static const char *const on_dead_names[] = {
	[PHUB_CONFIG_ON_DEAD_FAIL] = "fail", [PHUB_CONFIG_ON_DEAD_CONTINUE] = "continue", NULL
};
#define OPT_NAME_(id, v, name) [PHUB_OPT_##id] = name,
static const char *const optimizer_names[] = { PHUB_FOREACH_OPT(OPT_NAME_) NULL };
#undef OPT_NAME_
static_assert(sizeof(dtype_names) / sizeof(dtype_names[0]) == PHUB_DTYPE_COUNT + 1, "dtypes");
static_assert(sizeof(optimizer_names) / sizeof(optimizer_names[0]) == PHUB_OPT_COUNT + 1, "opts");

static int
expect_array(struct cfg_ctx *ctx, const json_t *v, size_t min, size_t max)
{
	size_t n;

	if (!json_is_array(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected an array, got %s", cfg_json_type(v));
	n = json_array_size(v);
	if (n < min || n > max)
		return cfg_error(ctx, CFG_AT_VALUE, "%zu elements is out of bounds [%zu, %zu]", n,
				 min, max);
	return 0;
}

/* One element of an array: element i is v; arg is the parser's own. */
typedef int (*cfg_elem_fn)(struct cfg_ctx *ctx, const json_t *v, size_t i, void *arg);

/*
 * An array of min .. max elements, each given to elem with its index on the error path; the
 * first error ends it. *count is set once every element parsed.
 */
static int
parse_array(struct cfg_ctx *ctx, const json_t *arr, size_t min, size_t max, cfg_elem_fn elem,
	    void *arg, uint16_t *count)
{
	size_t i;
	int rc;

	rc = expect_array(ctx, arr, min, max);
	if (rc != 0)
		return rc;
	for (i = 0; i < json_array_size(arr); i++) {
		cfg_push_index(ctx, i);
		rc = elem(ctx, json_array_get(arr, i), i, arg);
		cfg_pop(ctx);
		if (rc != 0)
			return rc;
	}
	*count = (uint16_t)i;
	return 0;
}

/* An lcore: N (on CPU N) or "N@C" (lcore N pinned to CPU C, as EAL's --lcores writes it). */
static int
parse_lcore_spec(const json_t *v, uint16_t *lcore, uint16_t *cpu)
{
	unsigned long id;
	unsigned long c;
	const char *s;
	char *end;

	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if (x < 0 || x >= PHUB_CONFIG_MAX_LCORES || x >= PHUB_CONFIG_MAX_CPUS)
			return -ERANGE;
		*lcore = (uint16_t)x;
		*cpu = (uint16_t)x;
		return 0;
	}
	if (!json_is_string(v))
		return -EINVAL;
	s = json_string_value(v);
	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	id = strtoul(s, &end, 10);
	if (*end != '@' || !isdigit((unsigned char)end[1]))
		return -EINVAL;
	c = strtoul(end + 1, &end, 10);
	if (*end != '\0' || end - s != (long)json_string_length(v))
		return -EINVAL;
	if (id >= PHUB_CONFIG_MAX_LCORES || c >= PHUB_CONFIG_MAX_CPUS)
		return -ERANGE;
	*lcore = (uint16_t)id;
	*cpu = (uint16_t)c;
	return 0;
}

static int
parse_eal_lcore(struct cfg_ctx *ctx, const json_t *v, size_t i, void *arg)
{
	struct phub_config_lcore *l = &((struct phub_config_eal *)arg)->lcores[i];
	int rc;

	rc = parse_lcore_spec(v, &l->id, &l->cpu);
	if (rc == -ERANGE && json_is_integer(v))
		return cfg_error(ctx, CFG_AT_VALUE, "lcore %lld is out of bounds [0, %d]",
				 (long long)json_integer_value(v), PHUB_CONFIG_MAX_LCORES - 1);
	if (rc == -ERANGE)
		return cfg_error(ctx, CFG_AT_VALUE,
				 "\"%s\": lcore ids are 0 to %d, CPU ids 0 to %d",
				 json_string_value(v), PHUB_CONFIG_MAX_LCORES - 1,
				 PHUB_CONFIG_MAX_CPUS - 1);
	if (rc != 0 && json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected \"lcore@cpu\" such as \"2@1\"");
	if (rc != 0)
		return cfg_error(ctx, CFG_AT_VALUE,
				 "expected an lcore id or \"lcore@cpu\", got %s", cfg_json_type(v));
	l->numa_node = -1;
	l->data_index = -1;
	return 0;
}

static int
parse_eal_lcores(struct cfg_ctx *ctx, const json_t *arr, void *target)
{
	struct phub_config_eal *eal = target;

	return parse_array(ctx, arr, 1, PHUB_CONFIG_MAX_LCORES, parse_eal_lcore, eal,
			   &eal->n_lcores);
}

static const struct cfg_field extra_arg_field =
	F_STR("extra_args", struct phub_config_eal, extra_args[0], 1, PHUB_CONFIG_ARG_MAX - 1,
	      CFG_CS_PATH, NULL, 0);

static int
parse_extra_arg(struct cfg_ctx *ctx, const json_t *v, size_t i, void *arg)
{
	struct phub_config_eal *eal = arg;

	return cfg_parse_string(ctx, v, &extra_arg_field, eal->extra_args[i]);
}

static int
parse_extra_args(struct cfg_ctx *ctx, const json_t *arr, void *target)
{
	struct phub_config_eal *eal = target;

	return parse_array(ctx, arr, 0, PHUB_CONFIG_MAX_EXTRA_ARGS, parse_extra_arg, eal,
			   &eal->n_extra_args);
}

static const struct cfg_field eal_fields[] = {
	F_CUSTOM("lcores", 0, parse_eal_lcores, CFG_REQUIRED),
	F_INT("main_lcore", struct phub_config_eal, main_lcore, 0, PHUB_CONFIG_MAX_LCORES - 1,
	      CFG_UNSET_U16, 0),
	F_INT("memory_mb", struct phub_config_eal, memory_mb, 64, 1048576, 512, 0),
	F_BOOL("no_huge", struct phub_config_eal, no_huge, false),
	F_STR("file_prefix", struct phub_config_eal, file_prefix, 1, PHUB_CONFIG_PREFIX_MAX - 1,
	      CFG_CS_IDENT, "phub", 0),
	F_CUSTOM("extra_args", 0, parse_extra_args, 0),
	F_END
};

/* "0000:3b:00.0" or "3b:00.0"; written back as dddd:bb:dd.f in lower case, as sysfs names it. */
static bool
parse_pci(const char *s, char *norm, size_t size)
{
	unsigned int domain = 0;
	unsigned int bus;
	unsigned int dev;
	unsigned int fn;
	size_t len = strlen(s);
	const char *p = s;

	for (size_t i = 0; i < len; i++) {
		if (!isxdigit((unsigned char)s[i]) && s[i] != ':' && s[i] != '.')
			return false;
	}
	if (len == 12) {
		if (s[4] != ':')
			return false;
		domain = (unsigned int)strtoul(s, NULL, 16);
		p = s + 5;
	} else if (len != 7) {
		return false;
	}
	if (p[2] != ':' || p[5] != '.' || !isxdigit((unsigned char)p[0]) ||
	    !isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[3]) ||
	    !isxdigit((unsigned char)p[4]) || !isdigit((unsigned char)p[6]))
		return false;
	if (len == 12 && (s[0] == ':' || s[1] == ':' || s[2] == ':' || s[3] == ':' ||
			  s[0] == '.' || s[1] == '.' || s[2] == '.' || s[3] == '.'))
		return false;
	bus = (unsigned int)strtoul(p, NULL, 16);
	dev = (unsigned int)strtoul(p + 3, NULL, 16);
	fn = (unsigned int)(p[6] - '0');
	if (dev > 0x1f || fn > 7)
		return false;
	snprintf(norm, size, "%04x:%02x:%02x.%u", domain, bus, dev, fn);
	return true;
}

/* A vdev string: a name net_<letters, digits, _> then optional ",key=value" arguments. */
static bool
is_vdev(const char *s)
{
	size_t name_len = strcspn(s, ",");

	if (strncmp(s, "net_", 4) != 0 || name_len <= 4)
		return false;
	for (size_t i = 4; i < name_len; i++) {
		if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_')
			return false;
	}
	for (const char *p = s + name_len; *p != '\0'; p++) {
		if (*p <= ' ' || *p > '~')
			return false;
	}
	return true;
}

static const struct cfg_field device_field =
	F_STR("device", struct phub_config_port, device, 1, PHUB_CONFIG_DEVICE_MAX - 1,
	      CFG_CS_PATH, NULL, 0);

static int
parse_device(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	struct phub_config_port *port = target;
	char norm[16];
	char shown[64];
	int rc;

	rc = cfg_parse_string(ctx, v, &device_field, port->device);
	if (rc != 0)
		return rc;
	if (parse_pci(port->device, norm, sizeof(norm))) {
		snprintf(port->device, sizeof(port->device), "%s", norm);
		port->is_pci = true;
		return 0;
	}
	if (is_vdev(port->device))
		return 0;
	cfg_quote(shown, sizeof(shown), port->device, strlen(port->device));
	return cfg_error(ctx, CFG_AT_VALUE, "%s is neither a PCI address (0000:3b:00.0) nor "
			 "a vdev (net_tap0,iface=pb0)", shown);
}

/* A dotted quad, nothing else (inet_pton refuses leading zeros and short forms). */
static bool
parse_ipv4(const char *s, uint32_t *addr)
{
	struct in_addr a;

	if (inet_pton(AF_INET, s, &a) != 1)
		return false;
	*addr = ntohl(a.s_addr);
	return true;
}

/* An address a host of ours or a peer may have: not 0/8, loopback, multicast or reserved. */
static const char *
unicast_problem(uint32_t a)
{
	if ((a >> 24) == 0)
		return "is in 0.0.0.0/8, which no host may use";
	if ((a >> 24) == 127)
		return "is a loopback address";
	if ((a >> 28) == 0xe)
		return "is a multicast address";
	if ((a >> 28) == 0xf)
		return "is a reserved or broadcast address";
	return NULL;
}

static int
parse_port_ipv4(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	struct phub_config_port *port = target;
	char addr_text[INET_ADDRSTRLEN];
	char shown[64];
	const char *s;
	const char *slash;
	const char *problem;
	unsigned long len;
	uint32_t host_mask;
	char *end;

	if (!json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a string \"a.b.c.d/len\", got %s",
				 cfg_json_type(v));
	s = json_string_value(v);
	cfg_quote(shown, sizeof(shown), s, json_string_length(v));
	slash = strchr(s, '/');
	if (slash == NULL || (size_t)(slash - s) >= sizeof(addr_text) ||
	    !isdigit((unsigned char)slash[1]))
		return cfg_error(ctx, CFG_AT_VALUE, "%s is not \"a.b.c.d/len\"", shown);
	memcpy(addr_text, s, (size_t)(slash - s));
	addr_text[slash - s] = '\0';
	len = strtoul(slash + 1, &end, 10);
	if (*end != '\0' || end - s != (long)json_string_length(v) ||
	    !parse_ipv4(addr_text, &port->ipv4))
		return cfg_error(ctx, CFG_AT_VALUE, "%s is not \"a.b.c.d/len\"", shown);
	if (len < 8 || len > 32)
		return cfg_error(ctx, CFG_AT_VALUE, "prefix length %lu is out of bounds [8, 32]",
				 len);
	problem = unicast_problem(port->ipv4);
	if (problem != NULL)
		return cfg_error(ctx, CFG_AT_VALUE, "%s %s", shown, problem);
	host_mask = len == 32 ? 0 : (UINT32_MAX >> len);
	/* /31 and /32 have no network or broadcast address (RFC 3021). */
	if (len <= 30 && (port->ipv4 & host_mask) == 0)
		return cfg_error(ctx, CFG_AT_VALUE, "%s is the network address of its subnet",
				 shown);
	if (len <= 30 && (port->ipv4 & host_mask) == host_mask)
		return cfg_error(ctx, CFG_AT_VALUE, "%s is the broadcast address of its subnet",
				 shown);
	port->prefix_len = (uint8_t)len;
	return 0;
}

static const struct cfg_field port_lcore_field = {
	.name = "lcores", .type = CFG_INT, .min = 0, .max = PHUB_CONFIG_MAX_LCORES - 1,
};

static int
parse_port_lcore(struct cfg_ctx *ctx, const json_t *v, size_t i, void *arg)
{
	struct phub_config_port *port = arg;
	int64_t x;
	int rc;

	rc = cfg_parse_int(ctx, v, &port_lcore_field, &x);
	if (rc == 0)
		port->lcores[i] = (uint16_t)x;
	return rc;
}

static int
parse_port_lcores(struct cfg_ctx *ctx, const json_t *arr, void *target)
{
	struct phub_config_port *port = target;

	return parse_array(ctx, arr, 1, PHUB_CONFIG_MAX_PORT_LCORES, parse_port_lcore, port,
			   &port->n_lcores);
}

static const struct cfg_field port_fields[] = {
	F_STR("name", struct phub_config_port, name, 1, PHUB_CONFIG_NAME_MAX - 1, CFG_CS_IDENT,
	      NULL, CFG_REQUIRED),
	F_CUSTOM("device", 0, parse_device, CFG_REQUIRED),
	F_ENUM("driver", struct phub_config_port, driver, driver_names, 0, CFG_REQUIRED),
	F_CUSTOM("ipv4", 0, parse_port_ipv4, CFG_REQUIRED),
	F_INT("mtu", struct phub_config_port, mtu, 576, 65535, 1500, 0),
	F_INT("rx_desc", struct phub_config_port, rx_desc, 64, 32768, CFG_UNSET_U16, CFG_POW2),
	F_INT("tx_desc", struct phub_config_port, tx_desc, 64, 32768, CFG_UNSET_U16, CFG_POW2),
	F_CUSTOM("lcores", 0, parse_port_lcores, CFG_REQUIRED),
	F_END
};

static int
parse_port(struct cfg_ctx *ctx, const json_t *v, size_t i, void *arg)
{
	struct phub_config_port *port = &((struct phub_config *)arg)->ports[i];

	memset(port, 0, sizeof(*port));
	port->numa_node = -1;
	return cfg_parse_object(ctx, v, port_fields, port);
}

static int
parse_ports(struct cfg_ctx *ctx, const json_t *arr, void *target)
{
	struct phub_config *cfg = target;

	return parse_array(ctx, arr, 1, PHUB_CONFIG_MAX_PORTS, parse_port, cfg, &cfg->n_ports);
}

/*
 * A nonce is the job's shared secret: refuse the values people type as placeholders. A random
 * 64-bit value fails these tests with probability below 1e-6.
 */
const char *
cfg_nonce_weakness(uint64_t x)
{
	unsigned int seen = 0;
	unsigned int distinct = 0;
	bool sequence = true;

	if (x == 0)
		return "it is zero";
	if ((x >> 32) == 0)
		return "it fits in 32 bits";
	if ((x >> 32) == (x & UINT32_MAX))
		return "its two halves are equal";
	for (unsigned int i = 0; i < 16; i++) {
		unsigned int d = (unsigned int)((x >> (60 - 4 * i)) & 0xf);

		if (!(seen & (1u << d)))
			distinct++;
		seen |= 1u << d;
	}
	if (distinct < 5)
		return "it has fewer than 5 distinct hex digits";
	/* 0123456789abcdef, fedcba9876543210 and other constant steps. */
	for (unsigned int i = 2; i < 16 && sequence; i++) {
		unsigned int a = (unsigned int)((x >> (60 - 4 * (i - 2))) & 0xf);
		unsigned int b = (unsigned int)((x >> (60 - 4 * (i - 1))) & 0xf);
		unsigned int c = (unsigned int)((x >> (60 - 4 * i)) & 0xf);

		sequence = ((b - a) & 0xf) == ((c - b) & 0xf);
	}
	if (sequence)
		return "its digits form a sequence";
	return NULL;
}

static int
parse_nonce(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	uint64_t *nonce = target;
	const char *s;
	const char *weak;
	char shown[64];
	uint64_t x = 0;

	if (!json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a string \"0x\" + 16 hex digits, "
				 "got %s", cfg_json_type(v));
	s = json_string_value(v);
	cfg_quote(shown, sizeof(shown), s, json_string_length(v));
	if (json_string_length(v) != 18 || s[0] != '0' || s[1] != 'x')
		return cfg_error(ctx, CFG_AT_VALUE, "%s is not \"0x\" + 16 hex digits", shown);
	for (unsigned int i = 2; i < 18; i++) {
		int c = (unsigned char)s[i];

		if (!isxdigit(c))
			return cfg_error(ctx, CFG_AT_VALUE, "%s is not \"0x\" + 16 hex digits",
					 shown);
		x = (x << 4) | (uint64_t)(isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
	}
	weak = cfg_nonce_weakness(x);
	if (weak != NULL)
		return cfg_error(ctx, CFG_AT_VALUE,
				 "%s is a weak nonce (%s): use 16 random hex digits", shown, weak);
	*nonce = x;
	return 0;
}

/* Which hyper-parameters each optimizer uses; any other is an error, not silently ignored. */
enum {
	OPT_LR = 1u << 1,
	OPT_MOMENTUM = 1u << 2,
	OPT_WEIGHT_DECAY = 1u << 3,
	OPT_BETA1 = 1u << 4,
	OPT_BETA2 = 1u << 5,
	OPT_EPS = 1u << 6,
};

static const unsigned int optimizer_uses[PHUB_OPT_COUNT] = {
	[PHUB_OPT_NONE] = 0,
	[PHUB_OPT_SGD] = OPT_LR | OPT_WEIGHT_DECAY,
	[PHUB_OPT_MOMENTUM] = OPT_LR | OPT_MOMENTUM | OPT_WEIGHT_DECAY,
	[PHUB_OPT_NESTEROV] = OPT_LR | OPT_MOMENTUM | OPT_WEIGHT_DECAY,
	[PHUB_OPT_ADAM] = OPT_LR | OPT_BETA1 | OPT_BETA2 | OPT_EPS | OPT_WEIGHT_DECAY,
	[PHUB_OPT_ADAMW] = OPT_LR | OPT_BETA1 | OPT_BETA2 | OPT_EPS | OPT_WEIGHT_DECAY,
};

/* The field order matches the OPT_* bits: field i is bit i. */
const struct cfg_field cfg_optimizer_fields[] = {
	F_ENUM("type", struct phub_config_optimizer, type, optimizer_names,
	       PHUB_OPT_SGD, 0),
	F_REAL("lr", struct phub_config_optimizer, lr, 0.0, 10.0, CFG_RMIN_OPEN),
	F_REAL("momentum", struct phub_config_optimizer, momentum, 0.0, 1.0, CFG_RMAX_OPEN),
	F_REAL("weight_decay", struct phub_config_optimizer, weight_decay, 0.0, 1.0, 0),
	F_REAL("beta1", struct phub_config_optimizer, beta1, 0.0, 1.0, CFG_RMAX_OPEN),
	F_REAL("beta2", struct phub_config_optimizer, beta2, 0.0, 1.0, CFG_RMAX_OPEN),
	F_REAL("eps", struct phub_config_optimizer, eps, 0.0, 1.0, CFG_RMIN_OPEN),
	F_END
};

/* Defaults per type, as the frameworks' own (PyTorch's SGD, Adam, AdamW). */
static void
optimizer_defaults(struct phub_config_optimizer *o, enum phub_opt_type type)
{
	memset(o, 0, sizeof(*o));
	o->type = type;
	switch (type) {
	case PHUB_OPT_NONE:
		break;
	case PHUB_OPT_SGD:
		o->lr = 0.01;
		break;
	case PHUB_OPT_MOMENTUM:
	case PHUB_OPT_NESTEROV:
		o->lr = 0.01;
		o->momentum = 0.9;
		break;
	case PHUB_OPT_ADAM:
	case PHUB_OPT_ADAMW:
		o->lr = 0.001;
		o->beta1 = 0.9;
		o->beta2 = 0.999;
		o->eps = 1e-8;
		o->weight_decay = type == PHUB_OPT_ADAMW ? 0.01 : 0.0;
		break;
	}
}

/* "type", read already, is passed over; another key must be one the optimizer uses. */
static int
optimizer_member(struct cfg_ctx *ctx, const struct cfg_field *f, const void *base)
{
	const struct phub_config_optimizer *o = base;

	if (f == &cfg_optimizer_fields[0])
		return CFG_MEMBER_SKIP;
	if (!(optimizer_uses[o->type] & (1u << (f - cfg_optimizer_fields))))
		return cfg_error(ctx, CFG_AT_KEY, "optimizer \"%s\" does not use %s",
				 phub_opt_type_name(o->type), f->name);
	return 0;
}

/*
 * "type" is read first wherever it is written, because it decides the defaults and which
 * other keys are allowed; the others are then read in the order written.
 */
static int
parse_optimizer(struct cfg_ctx *ctx, const json_t *obj, void *target)
{
	struct phub_config_optimizer *o = target;
	struct phub_config_optimizer parsed = { .type = PHUB_OPT_SGD };
	const json_t *type;
	uint64_t seen = 0;
	int rc;

	rc = cfg_expect_object(ctx, obj);
	if (rc != 0)
		return rc;
	type = json_object_get(obj, "type");
	if (type != NULL) {
		cfg_push_key(ctx, "type");
		rc = cfg_parse_value(ctx, &cfg_optimizer_fields[0], type, &parsed);
		cfg_pop(ctx);
		if (rc != 0)
			return rc;
	}
	optimizer_defaults(o, parsed.type);
	return cfg_parse_members(ctx, obj, cfg_optimizer_fields, o, optimizer_member, &seen);
}

static int
parse_job_bool(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	if (!json_is_boolean(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected true or false, got %s",
				 cfg_json_type(v));
	*(bool *)target = json_is_true(v);
	return 0;
}

static const struct cfg_field rack_fields[] = {
	F_STR("pbox", struct phub_config_job_rack, pbox, 1, PHUB_CONFIG_NAME_MAX - 1,
	      CFG_CS_IDENT, NULL, CFG_REQUIRED),
	F_INT("ranks", struct phub_config_job_rack, ranks, 1, 1024, 1, CFG_REQUIRED),
	F_END
};

/*
 * An array of min .. max objects of one table into base[0 .. n) (elements of stride bytes);
 * *count is set once every element parsed.
 */
struct object_array {
	const struct cfg_field *fields;
	void *base;
	size_t stride;
};

static int
parse_array_object(struct cfg_ctx *ctx, const json_t *v, size_t i, void *arg)
{
	const struct object_array *a = arg;

	return cfg_parse_object(ctx, v, a->fields, (uint8_t *)a->base + i * a->stride);
}

static int
parse_object_array(struct cfg_ctx *ctx, const json_t *arr, size_t min, size_t max,
		   const struct cfg_field *fields, void *base, size_t stride, uint16_t *count)
{
	struct object_array a = { .fields = fields, .base = base, .stride = stride };

	return parse_array(ctx, arr, min, max, parse_array_object, &a, count);
}

/* A job's ring: 2 .. PHUB_CONFIG_MAX_RACKS racks in ring order; cfg_validate() checks them. */
static int
parse_racks(struct cfg_ctx *ctx, const json_t *arr, void *target)
{
	struct phub_config_job *job = target;

	return parse_object_array(ctx, arr, 2, PHUB_CONFIG_MAX_RACKS, rack_fields, job->racks,
				  sizeof(job->racks[0]), &job->n_racks);
}

/* "model": a Table 3 network by name or abbreviation; its parameters are the preset's size. */
static int
parse_job_model(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	struct phub_config_job *job = target;
	const struct phub_model_preset *mp;
	char known[256];
	size_t n = 0;

	if (!json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a model name, got %s",
				 cfg_json_type(v));
	mp = phub_model_preset_find(json_string_value(v));
	if (mp == NULL || strlen(json_string_value(v)) >= sizeof(job->model)) {
		known[0] = '\0';
		for (size_t i = 0; i < phub_model_preset_count() && n < sizeof(known); i++)
			n += (size_t)snprintf(known + n, sizeof(known) - n, "%s%s", i ? ", " : "",
					      phub_model_preset_at(i)->name);
		return cfg_error(ctx, CFG_AT_VALUE, "unknown model \"%s\": one of %s (phub-bench "
				 "--list-models), or give \"parameters\" instead",
				 json_string_value(v), known);
	}
	snprintf(job->model, sizeof(job->model), "%s", mp->name);
	job->parameters = (uint64_t)(phub_model_preset_bytes(mp, PHUB_MODEL_UNITS_PAPER) /
				     sizeof(float));
	return 0;
}

/* jobs[].key: 64 hex digits, the secret an authenticated job's PSK comes from. */
static int
job_key_set(struct cfg_ctx *ctx, struct phub_config_job *job, const char *hex, const char *what)
{
	if (job->has_key)
		return cfg_error(ctx, CFG_AT_KEY, "give \"key\" or \"key_file\", not both");
	if (phub_auth_key_parse(job->key, hex) != 0)
		return cfg_error(ctx, CFG_AT_VALUE, "%s is not 64 hex digits (a 256-bit key, e.g. "
				 "from 'openssl rand -hex 32')", what);
	job->has_key = true;
	return 0;
}

static int
parse_job_key(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	if (!json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a string of 64 hex digits, got %s",
				 cfg_json_type(v));
	/* The key itself is never quoted back in a message. */
	return job_key_set(ctx, target, json_string_value(v), "the key");
}

/* jobs[].key_file: an absolute path to a file holding the key's 64 hex digits (and a newline). */
static int
parse_job_key_file(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	struct phub_config_job *job = target;
	char buf[2 * 32 + 3], shown[PHUB_CONFIG_PATH_MAX + 8];
	const char *path;
	size_t n;
	FILE *f;
	int rc = 0;

	if (!json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a path string, got %s",
				 cfg_json_type(v));
	path = json_string_value(v);
	cfg_quote(shown, sizeof(shown), path, json_string_length(v));
	if (job->has_key)
		return cfg_error(ctx, CFG_AT_KEY, "give \"key\" or \"key_file\", not both");
	if (path[0] != '/')
		return cfg_error(ctx, CFG_AT_VALUE, "%s must be an absolute path: the daemon's "
				 "working directory is /", shown);
	if (json_string_length(v) >= sizeof(job->key_file))
		return cfg_error(ctx, CFG_AT_VALUE, "%s is longer than %zu bytes", shown,
				 sizeof(job->key_file) - 1);
	f = fopen(path, "r");
	if (f == NULL)
		return cfg_error(ctx, CFG_AT_VALUE, "%s: %s", shown, strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* One trailing newline (as echo and openssl write it) is taken; nothing else is. */
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (phub_auth_key_parse(job->key, buf) == 0) {
		job->has_key = true;
		snprintf(job->key_file, sizeof(job->key_file), "%s", path);
	} else
		rc = cfg_error(ctx, CFG_AT_VALUE, "%s does not hold 64 hex digits (a 256-bit key, "
			       "e.g. 'openssl rand -hex 32 > file')", shown);
	phub_auth_wipe(buf, sizeof(buf));
	return rc;
}

/* deterministic and optimizer are custom so that their defaults (set by parse_jobs) stay. */
static const struct cfg_field job_fields[] = {
	F_STR("name", struct phub_config_job, name, 1, PHUB_CONFIG_JOB_NAME_MAX - 1,
	      CFG_CS_PRINTABLE, NULL, CFG_REQUIRED),
	F_CUSTOM("nonce", offsetof(struct phub_config_job, nonce), parse_nonce, CFG_REQUIRED),
	F_INT("workers", struct phub_config_job, workers, 1, 1024, 1, CFG_REQUIRED),
	F_ENUM("dtype", struct phub_config_job, dtype, dtype_names, PHUB_DTYPE_FP32, 0),
	F_CUSTOM("deterministic", offsetof(struct phub_config_job, deterministic), parse_job_bool,
		 0),
	F_CUSTOM("optimizer", offsetof(struct phub_config_job, optimizer), parse_optimizer, 0),
	F_ENUM("on_worker_dead", struct phub_config_job, on_worker_dead, on_dead_names,
	       PHUB_CONFIG_ON_DEAD_FAIL, 0),
	F_ENUM("auth", struct phub_config_job, auth, auth_names, PHUB_CONFIG_AUTH_OFF, 0),
	F_CUSTOM("key", 0, parse_job_key, 0),
	F_CUSTOM("key_file", 0, parse_job_key_file, 0),
	F_CUSTOM("racks", 0, parse_racks, 0),
	F_CUSTOM("model", 0, parse_job_model, 0),
	F_INT("parameters", struct phub_config_job, parameters, 1, INT64_C(1) << 42, 0, 0),
	F_END
};

static int
parse_jobs(struct cfg_ctx *ctx, const json_t *arr, void *target)
{
	struct phub_config *cfg = target;
	/* A job inherits the top-level deterministic wherever that is written. */
	bool deterministic = json_is_true(json_object_get(ctx->root, "deterministic"));
	const json_t *v;
	size_t i;
	int rc;

	rc = expect_array(ctx, arr, 0, PHUB_CONFIG_MAX_JOBS);
	if (rc != 0)
		return rc;
	if (json_array_size(arr) == 0)
		return 0;
	cfg->jobs = calloc(json_array_size(arr), sizeof(*cfg->jobs));
	if (cfg->jobs == NULL)
		return cfg_error_file(ctx, -ENOMEM, "out of memory");
	for (i = 0; i < json_array_size(arr); i++) {
		struct phub_config_job *job = &cfg->jobs[i];

		v = json_array_get(arr, i);
		job->deterministic = deterministic;
		optimizer_defaults(&job->optimizer, PHUB_OPT_SGD);
		cfg_push_index(ctx, i);
		rc = cfg_parse_object(ctx, v, job_fields, job);
		/* One source of the size: a model's preset or a count, never two that disagree. */
		if (rc == 0 && json_object_get(v, "model") != NULL &&
		    json_object_get(v, "parameters") != NULL) {
			cfg_push_key(ctx, "parameters");
			rc = cfg_error(ctx, CFG_AT_KEY, "give \"model\" or \"parameters\", not both");
			cfg_pop(ctx);
		}
		/* A key is the secret of authenticated JOINs: a job without them never uses it. */
		if (rc == 0 && job->has_key && job->auth != PHUB_CONFIG_AUTH_REQUIRED) {
			cfg_push_key(ctx, json_object_get(v, "key") != NULL ? "key" : "key_file");
			rc = cfg_error(ctx, CFG_AT_KEY, "a key is for a job with \"auth\": "
				       "\"required\" (its JOINs carry the nonce in clear otherwise)");
			cfg_pop(ctx);
		}
		cfg_pop(ctx);
		if (rc != 0)
			return rc;
		cfg->n_jobs = (uint16_t)(i + 1);
	}
	return 0;
}

static const struct cfg_field abs_dir_field =
	F_STR("dir", struct phub_config_checkpoint, dir, 1, PHUB_CONFIG_PATH_MAX - 1, CFG_CS_PATH,
	      NULL, 0);

static int
parse_abs_dir(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	char *dir = target;
	int rc;

	rc = cfg_parse_string(ctx, v, &abs_dir_field, dir);
	if (rc == 0 && dir[0] != '/')
		rc = cfg_error(ctx, CFG_AT_VALUE,
			       "must be an absolute path: the daemon's working directory is /");
	return rc;
}

static const struct cfg_field checkpoint_fields[] = {
	{ .name = "dir", .type = CFG_CUSTOM, .parse = parse_abs_dir,
	  .offset = offsetof(struct phub_config_checkpoint, dir) },
	F_INT("interval_iterations", struct phub_config_checkpoint, interval_iterations, 0, 1000000,
	      100, 0),
	F_END
};

static int
parse_peer_ipv4(struct cfg_ctx *ctx, const json_t *v, void *target)
{
	uint32_t *addr = target;
	const char *problem;
	char shown[64];

	if (!json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a string \"a.b.c.d\", got %s",
				 cfg_json_type(v));
	cfg_quote(shown, sizeof(shown), json_string_value(v), json_string_length(v));
	if (strlen(json_string_value(v)) != json_string_length(v) ||
	    !parse_ipv4(json_string_value(v), addr))
		return cfg_error(ctx, CFG_AT_VALUE, "%s is not \"a.b.c.d\"", shown);
	problem = unicast_problem(*addr);
	if (problem != NULL)
		return cfg_error(ctx, CFG_AT_VALUE, "%s %s", shown, problem);
	return 0;
}

static const struct cfg_field peer_fields[] = {
	F_STR("name", struct phub_config_peer, name, 1, PHUB_CONFIG_NAME_MAX - 1, CFG_CS_IDENT,
	      NULL, CFG_REQUIRED),
	F_CUSTOM("ipv4", offsetof(struct phub_config_peer, ipv4), parse_peer_ipv4, CFG_REQUIRED),
	F_INT("udp_port", struct phub_config_peer, udp_port, 1024, 65535, 47000, 0),
	F_STR("port", struct phub_config_peer, port, 1, PHUB_CONFIG_NAME_MAX - 1, CFG_CS_IDENT,
	      NULL, 0),
	F_END
};

static int
parse_peers(struct cfg_ctx *ctx, const json_t *arr, void *target)
{
	struct phub_config *cfg = target;

	return parse_object_array(ctx, arr, 0, PHUB_CONFIG_MAX_PEERS, peer_fields, cfg->peers,
				  sizeof(cfg->peers[0]), &cfg->n_peers);
}

static const struct cfg_field idle_fields[] = {
	F_ENUM("policy", struct phub_config_idle, policy, idle_names, PHUB_CONFIG_IDLE_POLL, 0),
	F_INT("spin_polls", struct phub_config_idle, spin_polls, 1, 1000000, 64, 0),
	F_INT("max_sleep_us", struct phub_config_idle, max_sleep_us, 1, 100000, 200, 0),
	F_END
};

static const struct cfg_field timeouts_fields[] = {
	F_INT("rto_min_ms", struct phub_config_timeouts, rto_min_ms, 1, 10000, 2, 0),
	F_INT("rto_max_ms", struct phub_config_timeouts, rto_max_ms, 1, 60000, 200, 0),
	F_INT("worker_dead_ms", struct phub_config_timeouts, worker_dead_ms, 100, 3600000, 10000,
	      0),
	F_INT("join_ms", struct phub_config_timeouts, join_ms, 10, 600000, 2000, 0),
	F_END
};

static const struct cfg_field limits_fields[] = {
	F_INT("max_jobs", struct phub_config_limits, max_jobs, 1, PHUB_CONFIG_MAX_JOBS, 16, 0),
	F_INT("max_workers_per_job", struct phub_config_limits, max_workers_per_job, 1, 1024, 64,
	      0),
	F_INT("job_memory_mb", struct phub_config_limits, job_memory_mb, 1, 1048576, 2048, 0),
	F_INT("total_memory_mb", struct phub_config_limits, total_memory_mb, 1, 4194304, 8192, 0),
	F_END
};

/* telemetry.enabled lands in phub_config itself: the sub-table's base is the config. */
static const struct cfg_field telemetry_fields[] = {
	F_BOOL("enabled", struct phub_config, telemetry_enabled, true),
	F_END
};

const struct cfg_field cfg_top_fields[] = {
	F_STR("name", struct phub_config, name, 1, PHUB_CONFIG_NAME_MAX - 1, CFG_CS_IDENT, "pbox",
	      0),
	F_OBJ("eal", struct phub_config, eal, eal_fields, CFG_REQUIRED),
	F_STR("drivers_dir", struct phub_config, drivers_dir, 1, PHUB_CONFIG_PATH_MAX - 1,
	      CFG_CS_PATH, NULL, 0),
	F_CUSTOM("ports", 0, parse_ports, CFG_REQUIRED),
	F_INT("udp_base_port", struct phub_config, udp_base_port, 1024, 65535, 47000, 0),
	F_INT("chunk_bytes", struct phub_config, chunk_bytes, 4096, 4194304, 32768, CFG_POW2),
	F_INT("segment_bytes", struct phub_config, segment_bytes, 256, 65536, 0,
	      CFG_ZERO_OK | CFG_ALIGN64),
	F_OBJ("idle", struct phub_config, idle, idle_fields, 0),
	F_OBJ("timeouts", struct phub_config, timeouts, timeouts_fields, 0),
	F_INT("window_bytes", struct phub_config, window_bytes, 4096, 1073741824, 1048576, 0),
	F_BOOL("deterministic", struct phub_config, deterministic, false),
	F_BOOL("priority_order", struct phub_config, priority_order, true),
	F_INT("priority_hold", struct phub_config, priority_hold, 32, 1024, 0, CFG_ZERO_OK),
	F_INT("priority_hold_us", struct phub_config, priority_hold_us, 100, 4000, 1000, 0),
	F_OBJ("limits", struct phub_config, limits, limits_fields, 0),
	F_CUSTOM("jobs", 0, parse_jobs, 0),
	F_OBJ("checkpoint", struct phub_config, checkpoint, checkpoint_fields, 0),
	F_CUSTOM("peers", 0, parse_peers, 0),
	{ .name = "telemetry", .type = CFG_OBJECT, .sub = telemetry_fields, .offset = 0 },
	F_END
};

/* Parse step: the text's values into cfg, each checked alone (type, bounds, form). */
int
cfg_parse(struct cfg_ctx *ctx, struct phub_config *cfg)
{
	/* Defaults of custom-parsed keys that a table cannot hold. */
	snprintf(cfg->checkpoint.dir, sizeof(cfg->checkpoint.dir), "%s",
		 "/var/lib/phub/checkpoints");
	return cfg_parse_object(ctx, ctx->root, cfg_top_fields, cfg);
}

/* Every table with the JSON path of its keys, for docs and tests; custom arrays included. */
const struct cfg_schema_table cfg_schema[] = {
	{ "", cfg_top_fields },
	{ "eal.", eal_fields },
	{ "ports[].", port_fields },
	{ "idle.", idle_fields },
	{ "timeouts.", timeouts_fields },
	{ "limits.", limits_fields },
	{ "jobs[].", job_fields },
	{ "jobs[].optimizer.", cfg_optimizer_fields },
	{ "jobs[].racks[].", rack_fields },
	{ "checkpoint.", checkpoint_fields },
	{ "peers[].", peer_fields },
	{ "telemetry.", telemetry_fields },
	{ NULL, NULL },
};
