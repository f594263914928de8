/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the files of lib/config share: the parse context with its JSON path and error sink,
 * the Redis-style field table, and the steps parse -> params -> validate.
 */

#ifndef PHUB_CONFIG_PRIV_H
#define PHUB_CONFIG_PRIV_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "phub_config.h"

/* Deepest JSON path the schema has is jobs[i].optimizer.lr (4); keep room. */
#define CFG_PATH_MAX 8

/* Placeholder for "not written": resolved from other fields by cfg_params(). */
#define CFG_UNSET_U16 UINT16_MAX

/* One component of a JSON path: an object member (key != NULL) or an array element. */
struct cfg_path_comp {
	const char *key;
	size_t index;
};

/*
 * One text being parsed (the config or a driver profile). Errors are formatted against this
 * text: the path locates the value, config_pos.c finds its line and column.
 */
struct cfg_ctx {
	const char *name;		/* file name in messages */
	const char *text;		/* the bytes jansson parsed */
	size_t len;
	json_t *root;
	unsigned int depth;		/* may exceed CFG_PATH_MAX: only the first are kept */
	struct cfg_path_comp path[CFG_PATH_MAX];
	char *err;
	size_t errlen;
	bool failed;			/* the first error is kept, later ones are dropped */
	/* Config only: where relative paths and the outside world are found. */
	char base_dir[PHUB_CONFIG_PATH_MAX];
	const char *sysfs_root;
	const char *default_drivers_dir;
};

/* Where an error points: at the value of the path, or at the key of its last component. */
enum cfg_at {
	CFG_AT_VALUE,
	CFG_AT_KEY,
};

enum cfg_type {
	CFG_BOOL,
	CFG_INT,		/* json integer, bounds [min, max], stored by size */
	CFG_REAL,		/* json integer or real, bounds [rmin, rmax] (see flags) */
	CFG_STRING,		/* byte length in [min, max], charset, stored in char[size] */
	CFG_ENUM,		/* one of names[], stored as int */
	CFG_OBJECT,		/* nested table sub at base + offset */
	CFG_CUSTOM,		/* parse(ctx, value, base + offset) */
};

enum cfg_flag {
	CFG_REQUIRED = 1u << 0,
	CFG_POW2 = 1u << 1,		/* integer must be a power of two */
	CFG_ALIGN64 = 1u << 2,		/* integer must be a multiple of 64 */
	CFG_ZERO_OK = 1u << 3,		/* 0 is accepted outside [min, max] */
	CFG_RMIN_OPEN = 1u << 4,	/* real bound rmin excluded */
	CFG_RMAX_OPEN = 1u << 5,	/* real bound rmax excluded */
};

enum cfg_charset {
	CFG_CS_ANY,			/* any UTF-8 (jansson already checked it) */
	CFG_CS_IDENT,			/* letters, digits, '_', '.', '-' */
	CFG_CS_PRINTABLE,		/* ASCII 0x20 .. 0x7e, no space at either end */
	CFG_CS_PATH,			/* printable ASCII, no control characters */
};

struct cfg_ctx;

/*
 * One key of an object, as in Redis' config table: name, type, bounds, default, target.
 * Tables end with a NULL name.
 */
struct cfg_field {
	const char *name;
	enum cfg_type type;
	unsigned int flags;
	int64_t min;			/* CFG_INT bounds; CFG_STRING byte length bounds */
	int64_t max;
	double rmin;			/* CFG_REAL bounds */
	double rmax;
	int64_t def;			/* CFG_INT, CFG_BOOL, CFG_ENUM default */
	double rdef;			/* CFG_REAL default */
	const char *sdef;		/* CFG_STRING default (NULL: empty) */
	size_t offset;			/* target, from the base of the struct being filled */
	size_t size;			/* 1, 2, 4, 8 for integers; array size for strings */
	enum cfg_charset charset;
	const char *const *names;	/* CFG_ENUM: NULL-terminated */
	const struct cfg_field *sub;	/* CFG_OBJECT */
	/* CFG_CUSTOM */
	int (*parse)(struct cfg_ctx *ctx, const json_t *value, void *target);
};

/* config_pos.c: the JSON path and the error sink. */
void
cfg_push_key(struct cfg_ctx *ctx, const char *key);
void
cfg_push_index(struct cfg_ctx *ctx, size_t index);
void
cfg_pop(struct cfg_ctx *ctx);
int
cfg_error(struct cfg_ctx *ctx, enum cfg_at at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int
cfg_error_at(struct cfg_ctx *ctx, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool
cfg_has(struct cfg_ctx *ctx, const char *path);
int
cfg_error_syntax(struct cfg_ctx *ctx, const json_error_t *jerr);
int
cfg_error_file(struct cfg_ctx *ctx, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool
cfg_locate(const char *text, size_t len, const struct cfg_path_comp *path, unsigned int depth,
	   enum cfg_at at, size_t *offset);
void
cfg_line_col(const char *text, size_t len, size_t offset, unsigned int *line,
	     unsigned int *col);
void
cfg_quote(char *buf, size_t size, const char *s, size_t len);

/* config_table.c: the table-driven object parser. */
int
cfg_parse_object(struct cfg_ctx *ctx, const json_t *obj, const struct cfg_field *fields,
		 void *base);
/*
 * Asked about each known member before cfg_parse_members parses it, with the member's key on
 * ctx's path: 0 to parse it, CFG_MEMBER_SKIP to pass over it, or the error it reported.
 */
#define CFG_MEMBER_SKIP 1
typedef int (*cfg_member_check)(struct cfg_ctx *ctx, const struct cfg_field *f,
				const void *base);
/*
 * Parse each member of the object obj into base in the order written, an unknown key an error;
 * check (or NULL) may refuse or pass over a member. The fields parsed go to *seen as bits.
 */
int
cfg_parse_members(struct cfg_ctx *ctx, const json_t *obj, const struct cfg_field *fields,
		  void *base, cfg_member_check check, uint64_t *seen);
int
cfg_parse_value(struct cfg_ctx *ctx, const struct cfg_field *f, const json_t *v, void *base);
int
cfg_unknown_key(struct cfg_ctx *ctx, const struct cfg_field *fields, unsigned int skip);
/* The field of the table named key, or its NULL-named terminator. */
const struct cfg_field *
cfg_field_find(const struct cfg_field *fields, const char *key);
/* 0 when obj is a JSON object, else the error "expected an object" at its value. */
int
cfg_expect_object(struct cfg_ctx *ctx, const json_t *obj);
int
cfg_parse_string(struct cfg_ctx *ctx, const json_t *v, const struct cfg_field *f, char *dst);
int
cfg_parse_int(struct cfg_ctx *ctx, const json_t *v, const struct cfg_field *f, int64_t *out);
const char *
cfg_json_type(const json_t *v);
int
cfg_read_file(const char *path, char **text, size_t *len);
const char *
cfg_read_error(int rc);
json_t *
cfg_parse_text(struct cfg_ctx *ctx);

/* config_schema.c: parse step of the main file. */
int
cfg_parse(struct cfg_ctx *ctx, struct phub_config *cfg);
const char *
cfg_nonce_weakness(uint64_t nonce);
extern const struct cfg_field cfg_top_fields[];

struct cfg_schema_table {
	const char *prefix;		/* "ports[]." */
	const struct cfg_field *fields;
};
extern const struct cfg_schema_table cfg_schema[];
extern const struct cfg_field cfg_optimizer_fields[];

/* config_driver.c: the driver profiles. */
int
cfg_drivers_load(struct cfg_ctx *ctx, struct phub_config *cfg);
extern const struct cfg_field cfg_driver_fields[];

/* config_sysfs.c: NUMA nodes of PCI devices and CPUs. */
int
cfg_sysfs_pci_node(const char *root, const char *pci);
int
cfg_sysfs_cpu_node(const char *root, unsigned int cpu);

/* config_validate.c: params (defaults that depend on other fields) and cross-field rules. */
int
cfg_params(struct cfg_ctx *ctx, struct phub_config *cfg);
int
cfg_validate(struct cfg_ctx *ctx, struct phub_config *cfg);
void
cfg_derive(struct phub_config *cfg);

#endif /* PHUB_CONFIG_PRIV_H */
