/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The table-driven parser: reads a JSON object against a table of fields (name, type, bounds,
 * default, target), rejects unknown keys, and reads a file into memory for jansson.
 */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_priv.h"

/* No configuration or profile is anywhere near this; larger input is a mistake. */
#define FILE_MAX (1u << 20)

const char *
cfg_json_type(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "object";
	case JSON_ARRAY:
		return "array";
	case JSON_STRING:
		return "string";
	case JSON_INTEGER:
		return "integer";
	case JSON_REAL:
		return "real";
	case JSON_TRUE:
		return "true";
	case JSON_FALSE:
		return "false";
	case JSON_NULL:
		return "null";
	}
	return "?";
}

static void
store_uint(void *p, size_t size, uint64_t v)
{
	uint8_t u8 = (uint8_t)v;
	uint16_t u16 = (uint16_t)v;
	uint32_t u32 = (uint32_t)v;

	switch (size) {
	case 1:
		memcpy(p, &u8, 1);
		break;
	case 2:
		memcpy(p, &u16, 2);
		break;
	case 4:
		memcpy(p, &u32, 4);
		break;
	default:
		memcpy(p, &v, 8);
		break;
	}
}

static void
apply_defaults(const struct cfg_field *fields, char *base)
{
	for (const struct cfg_field *f = fields; f->name != NULL; f++) {
		char *t = base + f->offset;

		switch (f->type) {
		case CFG_BOOL:
			*(bool *)t = f->def != 0;
			break;
		case CFG_INT:
		case CFG_ENUM:
			store_uint(t, f->size, (uint64_t)f->def);
			break;
		case CFG_REAL:
			memcpy(t, &f->rdef, sizeof(double));
			break;
		case CFG_STRING:
			snprintf(t, f->size, "%s", f->sdef != NULL ? f->sdef : "");
			break;
		case CFG_OBJECT:
			apply_defaults(f->sub, t);
			break;
		case CFG_CUSTOM:
			break;
		}
	}
}

int
cfg_parse_int(struct cfg_ctx *ctx, const json_t *v, const struct cfg_field *f, int64_t *out)
{
	int64_t x;

	if (!json_is_integer(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected an integer, got %s",
				 cfg_json_type(v));
	x = json_integer_value(v);
	if ((f->flags & CFG_ZERO_OK) && x == 0) {
		*out = 0;
		return 0;
	}
	if (x < f->min || x > f->max) {
		if (f->flags & CFG_ZERO_OK)
			return cfg_error(ctx, CFG_AT_VALUE,
					 "%lld is out of bounds: 0 or [%lld, %lld]", (long long)x,
					 (long long)f->min, (long long)f->max);
		return cfg_error(ctx, CFG_AT_VALUE, "%lld is out of bounds [%lld, %lld]",
				 (long long)x, (long long)f->min, (long long)f->max);
	}
	if ((f->flags & CFG_POW2) && (x & (x - 1)) != 0)
		return cfg_error(ctx, CFG_AT_VALUE, "%lld is not a power of two", (long long)x);
	if ((f->flags & CFG_ALIGN64) && x % 64 != 0)
		return cfg_error(ctx, CFG_AT_VALUE, "%lld is not a multiple of 64", (long long)x);
	*out = x;
	return 0;
}

static int
parse_real(struct cfg_ctx *ctx, const json_t *v, const struct cfg_field *f, double *out)
{
	bool lo_open = (f->flags & CFG_RMIN_OPEN) != 0;
	bool hi_open = (f->flags & CFG_RMAX_OPEN) != 0;
	double x;

	if (!json_is_number(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a number, got %s", cfg_json_type(v));
	x = json_number_value(v);
	/* jansson refuses overflowing reals, so x is finite; the bounds still say it. */
	if (!isfinite(x) || (lo_open ? x <= f->rmin : x < f->rmin) ||
	    (hi_open ? x >= f->rmax : x > f->rmax))
		return cfg_error(ctx, CFG_AT_VALUE, "%g is out of bounds %c%g, %g%c", x,
				 lo_open ? '(' : '[', f->rmin, f->rmax, hi_open ? ')' : ']');
	*out = x;
	return 0;
}

static int
check_charset(struct cfg_ctx *ctx, const char *s, size_t len, enum cfg_charset cs)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		bool ok;

		switch (cs) {
		case CFG_CS_IDENT:
			ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
			if (!ok)
				return cfg_error(ctx, CFG_AT_VALUE,
						 "byte %zu (0x%02x) is not allowed: use letters, "
						 "digits, '_', '.', '-'", i, c);
			break;
		case CFG_CS_PRINTABLE:
		case CFG_CS_PATH:
			ok = c >= 0x20 && c <= 0x7e;
			if (!ok)
				return cfg_error(ctx, CFG_AT_VALUE,
						 "byte %zu (0x%02x) is not printable ASCII", i, c);
			break;
		case CFG_CS_ANY:
			break;
		}
	}
	if (cs == CFG_CS_PRINTABLE && len > 0 && (s[0] == ' ' || s[len - 1] == ' '))
		return cfg_error(ctx, CFG_AT_VALUE, "starts or ends with a space");
	return 0;
}

int
cfg_parse_string(struct cfg_ctx *ctx, const json_t *v, const struct cfg_field *f, char *dst)
{
	const char *s;
	size_t len;
	int rc;

	if (!json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a string, got %s", cfg_json_type(v));
	s = json_string_value(v);
	len = json_string_length(v);
	if ((int64_t)len < f->min || (int64_t)len > f->max)
		return cfg_error(ctx, CFG_AT_VALUE, "length %zu is out of bounds [%lld, %lld]", len,
				 (long long)f->min, (long long)f->max);
	rc = check_charset(ctx, s, len, f->charset);
	if (rc != 0)
		return rc;
	/* The table guarantees size > max, so the copy is whole. */
	memcpy(dst, s, len);
	dst[len] = '\0';
	return 0;
}

static int
parse_enum(struct cfg_ctx *ctx, const json_t *v, const struct cfg_field *f, void *dst)
{
	char shown[512];
	char list[256];
	size_t o = 0;

	if (!json_is_string(v))
		return cfg_error(ctx, CFG_AT_VALUE, "expected a string, got %s", cfg_json_type(v));
	for (unsigned int i = 0; f->names[i] != NULL; i++) {
		if (strcmp(json_string_value(v), f->names[i]) == 0 &&
		    strlen(f->names[i]) == json_string_length(v)) {
			store_uint(dst, f->size, i);
			return 0;
		}
	}
	list[0] = '\0';
	for (unsigned int i = 0; f->names[i] != NULL && o < sizeof(list); i++)
		o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", i == 0 ? "" : ", ",
				      f->names[i]);
	cfg_quote(shown, sizeof(shown), json_string_value(v), json_string_length(v));
	return cfg_error(ctx, CFG_AT_VALUE, "%s is not one of: %s", shown, list);
}

int
cfg_parse_value(struct cfg_ctx *ctx, const struct cfg_field *f, const json_t *v, void *base)
{
	char *t = (char *)base + f->offset;
	int64_t x = 0;
	double r = 0.0;
	int rc;

	switch (f->type) {
	case CFG_BOOL:
		if (!json_is_boolean(v))
			return cfg_error(ctx, CFG_AT_VALUE, "expected true or false, got %s",
					 cfg_json_type(v));
		*(bool *)t = json_is_true(v);
		return 0;
	case CFG_INT:
		rc = cfg_parse_int(ctx, v, f, &x);
		if (rc == 0)
			store_uint(t, f->size, (uint64_t)x);
		return rc;
	case CFG_REAL:
		rc = parse_real(ctx, v, f, &r);
		if (rc == 0)
			memcpy(t, &r, sizeof(r));
		return rc;
	case CFG_STRING:
		return cfg_parse_string(ctx, v, f, t);
	case CFG_ENUM:
		return parse_enum(ctx, v, f, t);
	case CFG_OBJECT:
		return cfg_parse_object(ctx, v, f->sub, t);
	case CFG_CUSTOM:
		return f->parse(ctx, v, t);
	}
	return -EINVAL;
}

int
cfg_unknown_key(struct cfg_ctx *ctx, const struct cfg_field *fields, unsigned int skip)
{
	char list[320];
	size_t o = 0;

	list[0] = '\0';
	for (const struct cfg_field *f = fields; f->name != NULL && o < sizeof(list); f++) {
		if (skip & (1u << (f - fields)))
			continue;
		o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", o == 0 ? "" : ", ",
				      f->name);
	}
	return cfg_error(ctx, CFG_AT_KEY, "unknown key (allowed: %s)", list);
}

const struct cfg_field *
cfg_field_find(const struct cfg_field *fields, const char *key)
{
	while (fields->name != NULL && strcmp(fields->name, key) != 0)
		fields++;
	return fields;
}

int
cfg_expect_object(struct cfg_ctx *ctx, const json_t *obj)
{
	if (!json_is_object(obj))
		return cfg_error(ctx, CFG_AT_VALUE, "expected an object, got %s",
				 cfg_json_type(obj));
	return 0;
}

/*
 * Fill base from obj: defaults first, then each member in the order written (jansson keeps
 * insertion order), so the first error reported is the first one in the text. Required keys
 * are checked when the object is done, and the error points at the object.
 */
int
cfg_parse_members(struct cfg_ctx *ctx, const json_t *obj, const struct cfg_field *fields,
		  void *base, cfg_member_check check, uint64_t *seen)
{
	const char *key;
	json_t *v;
	int rc;

	json_object_foreach((json_t *)obj, key, v) {
		const struct cfg_field *f = cfg_field_find(fields, key);

		cfg_push_key(ctx, key);
		if (f->name == NULL)
			rc = cfg_unknown_key(ctx, fields, 0);
		else if (check == NULL || (rc = check(ctx, f, base)) == 0)
			rc = cfg_parse_value(ctx, f, v, base);
		cfg_pop(ctx);
		if (rc == CFG_MEMBER_SKIP)
			continue;
		if (rc != 0)
			return rc;
		*seen |= UINT64_C(1) << (f - fields);
	}
	return 0;
}

int
cfg_parse_object(struct cfg_ctx *ctx, const json_t *obj, const struct cfg_field *fields,
		 void *base)
{
	uint64_t seen = 0;
	int rc;

	rc = cfg_expect_object(ctx, obj);
	if (rc != 0)
		return rc;
	apply_defaults(fields, base);
	rc = cfg_parse_members(ctx, obj, fields, base, NULL, &seen);
	if (rc != 0)
		return rc;
	for (const struct cfg_field *f = fields; f->name != NULL; f++) {
		if ((f->flags & CFG_REQUIRED) && !(seen & (UINT64_C(1) << (f - fields))))
			return cfg_error(ctx, CFG_AT_VALUE, "missing required key \"%s\"",
					 f->name);
	}
	return 0;
}

/* Text of a cfg_read_file() error. */
const char *
cfg_read_error(int rc)
{
	return rc == -EINVAL ? "not a regular file" : strerror(-rc);
}

/* Read a whole regular file (never a FIFO or device, which could block or never end). */
int
cfg_read_file(const char *path, char **text, size_t *len)
{
	struct stat st;
	size_t got = 0;
	char *buf = NULL;
	int fd;
	int rc;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = -EISDIR;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		goto out;
	}
	if (st.st_size > FILE_MAX) {
		rc = -EFBIG;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	*text = buf;
	*len = got;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	close(fd);
	return rc;
}

/*
 * Parse ctx->text. Duplicate keys are rejected: a duplicate would make a JSON path name two
 * values, and silently taking the last one hides mistakes. The end-of-file check stays on:
 * anything after the top value is a mistake in a configuration file.
 */
json_t *
cfg_parse_text(struct cfg_ctx *ctx)
{
	json_error_t jerr;
	json_t *root;

	root = json_loadb(ctx->text, ctx->len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL)
		cfg_error_syntax(ctx, &jerr);
	return root;
}
