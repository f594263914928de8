/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Positions for messages: the JSON path being parsed, a scanner that finds where a path's value
 * starts in the text (jansson keeps no positions after parsing), and the error formatting.
 *
 * Why this is sound: jansson parsed the very bytes we scan, with JSON_REJECT_DUPLICATES, so a
 * path (keys compared after unescaping, indices counted) names exactly one value, and the
 * first byte of that value in the text is found by a plain left-to-right walk. Only the error
 * path runs the scanner, once, so the successful load pays nothing for it.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_priv.h"

#define SCAN_MAX_DEPTH 2048	/* jansson's own nesting limit */
#define SCAN_FRAMES 16		/* containers whose current key or index is remembered */
#define PATH_TEXT_MAX 256
#define MSG_MAX 384
#define KEY_SHOW_MAX 48

void
cfg_push_key(struct cfg_ctx *ctx, const char *key)
{
	if (ctx->depth < CFG_PATH_MAX) {
		ctx->path[ctx->depth].key = key;
		ctx->path[ctx->depth].index = 0;
	}
	ctx->depth++;
}

void
cfg_push_index(struct cfg_ctx *ctx, size_t index)
{
	if (ctx->depth < CFG_PATH_MAX) {
		ctx->path[ctx->depth].key = NULL;
		ctx->path[ctx->depth].index = index;
	}
	ctx->depth++;
}

void
cfg_pop(struct cfg_ctx *ctx)
{
	if (ctx->depth > 0)
		ctx->depth--;
}

/*
 * Write s (len bytes) as a JSON string literal, shortened with "..." past KEY_SHOW_MAX bytes.
 * Control bytes are escaped so that a message is always one printable line.
 */
void
cfg_quote(char *buf, size_t size, const char *s, size_t len)
{
	size_t o = 0;
	size_t i;

	if (size < 8) {
		if (size > 0)
			buf[0] = '\0';
		return;
	}
	buf[o++] = '"';
	for (i = 0; i < len && o + 8 < size; i++) {
		unsigned char c = (unsigned char)s[i];

		if (i >= KEY_SHOW_MAX && (c & 0xc0) != 0x80) {
			/* Cut at a character boundary, never inside a UTF-8 sequence. */
			o += (size_t)snprintf(buf + o, size - o, "...");
			break;
		}
		if (c == '"' || c == '\\') {
			buf[o++] = '\\';
			buf[o++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			o += (size_t)snprintf(buf + o, size - o, "\\u%04x", c);
		} else {
			buf[o++] = (char)c;
		}
	}
	buf[o++] = '"';
	buf[o] = '\0';
}

static bool
is_ident(const char *key)
{
	if (key[0] == '\0' || !((key[0] >= 'a' && key[0] <= 'z') || (key[0] >= 'A' &&
	    key[0] <= 'Z') || key[0] == '_'))
		return false;
	for (const char *p = key; *p != '\0'; p++) {
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			return false;
	}
	return true;
}

/* ports[1].lcores[0]; keys that are not identifiers as ["a key"]; the empty path as (root). */
static void
path_render(char *buf, size_t size, const struct cfg_path_comp *path, unsigned int depth)
{
	size_t o = 0;
	unsigned int kept = depth < CFG_PATH_MAX ? depth : CFG_PATH_MAX;

	buf[0] = '\0';
	if (depth == 0) {
		snprintf(buf, size, "(root)");
		return;
	}
	for (unsigned int i = 0; i < kept && o < size; i++) {
		if (path[i].key == NULL) {
			o += (size_t)snprintf(buf + o, size - o, "[%zu]", path[i].index);
		} else if (is_ident(path[i].key)) {
			o += (size_t)snprintf(buf + o, size - o, "%s%s", i == 0 ? "" : ".",
					      path[i].key);
		} else {
			char q[KEY_SHOW_MAX * 6 + 16];

			cfg_quote(q, sizeof(q), path[i].key, strlen(path[i].key));
			o += (size_t)snprintf(buf + o, size - o, "[%s]", q);
		}
	}
	if (depth > kept && o < size)
		snprintf(buf + o, size - o, "...");
}

/* Line (1-based) and column (1-based, in characters as jansson counts them) of a byte. */
void
cfg_line_col(const char *text, size_t len, size_t offset, unsigned int *line, unsigned int *col)
{
	size_t line_start = 0;
	unsigned int l = 1;
	unsigned int c = 1;

	if (offset > len)
		offset = len;
	for (size_t i = 0; i < offset; i++) {
		if (text[i] == '\n') {
			l++;
			line_start = i + 1;
		}
	}
	for (size_t i = line_start; i < offset; i++) {
		if (((unsigned char)text[i] & 0xc0) != 0x80)
			c++;
	}
	*line = l;
	*col = c;
}

/* The scanner: a pushdown walk that tracks, for each open container, its current component. */
struct scan_frame {
	const char *key;	/* current member's key token, quotes included */
	size_t key_len;
	size_t index;		/* current element index or member ordinal */
	bool in_value;		/* the walk is inside this member's or element's value */
	bool matched;		/* the path through this component is a prefix of the target */
};

struct scanner {
	const char *text;
	size_t len;
	size_t pos;
	size_t limit;		/* no token that ends at or after it is taken */
	unsigned int depth;
	uint8_t is_object[SCAN_MAX_DEPTH / 8];
	struct scan_frame frames[SCAN_FRAMES];
	const struct cfg_path_comp *target;	/* NULL: only walk (for the syntax-error path) */
	unsigned int tdepth;
	enum cfg_at at;
	bool found;
	size_t found_at;
};

enum scan_state {
	S_VALUE,
	S_FIRST_KEY,
	S_KEY,
	S_COLON,
	S_FIRST_ELEM,
	S_AFTER,
};

static bool
token_equals_key(const char *tok, size_t tok_len, const char *key)
{
	const char *in = tok + 1;
	size_t n = tok_len - 2;
	size_t klen = strlen(key);
	json_t *s;
	bool eq;

	if (memchr(in, '\\', n) == NULL)
		return n == klen && memcmp(in, key, n) == 0;
	/* Escapes: let jansson decode the token, the same decoder that made the key. */
	s = json_loadb(tok, tok_len, JSON_DECODE_ANY, NULL);
	eq = json_is_string(s) && json_string_length(s) == klen &&
	     memcmp(json_string_value(s), key, klen) == 0;
	json_decref(s);
	return eq;
}

static void
scan_skip_ws(struct scanner *s)
{
	while (s->pos < s->len) {
		char c = s->text[s->pos];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		s->pos++;
	}
}

/* End (one past the closing quote) of the string token at pos, or 0 when it has none. */
static size_t
scan_string_end(const struct scanner *s)
{
	for (size_t i = s->pos + 1; i < s->len; i++) {
		if (s->text[i] == '\\')
			i++;
		else if (s->text[i] == '"')
			return i + 1;
	}
	return 0;
}

static size_t
scan_scalar_end(const struct scanner *s)
{
	size_t i = s->pos;

	while (i < s->len && strchr(" \t\r\n,:[]{}\"", s->text[i]) == NULL)
		i++;
	return i;
}

static struct scan_frame *
scan_top(struct scanner *s)
{
	return s->depth - 1 < SCAN_FRAMES ? &s->frames[s->depth - 1] : NULL;
}

static bool
scan_top_is_object(const struct scanner *s)
{
	unsigned int d = s->depth - 1;

	return (s->is_object[d / 8] >> (d % 8)) & 1;
}

/* The value the walk is about to enter is complete: its parent is no longer "in" it. */
static void
scan_value_done(struct scanner *s)
{
	struct scan_frame *f;

	if (s->depth > 0 && (f = scan_top(s)) != NULL)
		f->in_value = false;
}

static void
scan_set_component(struct scanner *s, const char *key, size_t key_len)
{
	unsigned int d = s->depth - 1;
	struct scan_frame *f = scan_top(s);
	bool prefix;

	if (f == NULL)
		return;
	f->key = key;
	f->key_len = key_len;
	f->in_value = key == NULL;
	if (s->target == NULL || d >= s->tdepth) {
		f->matched = false;
		return;
	}
	prefix = d == 0 || s->frames[d - 1].matched;
	if (!prefix)
		f->matched = false;
	else if (key == NULL)
		f->matched = s->target[d].key == NULL && s->target[d].index == f->index;
	else
		f->matched = s->target[d].key != NULL &&
			     token_equals_key(key, key_len, s->target[d].key);
	if (f->matched && key != NULL && s->at == CFG_AT_KEY && d + 1 == s->tdepth) {
		s->found = true;
		s->found_at = (size_t)(key - s->text);
	}
}

static bool
scan_push(struct scanner *s, bool is_object)
{
	unsigned int d = s->depth;

	if (d >= SCAN_MAX_DEPTH)
		return false;
	if (is_object)
		s->is_object[d / 8] |= (uint8_t)(1u << (d % 8));
	else
		s->is_object[d / 8] &= (uint8_t)~(1u << (d % 8));
	s->depth++;
	if (d < SCAN_FRAMES)
		memset(&s->frames[d], 0, sizeof(s->frames[d]));
	return true;
}

static void
scan_value_start(struct scanner *s)
{
	if (s->target == NULL || s->at != CFG_AT_VALUE || s->depth != s->tdepth)
		return;
	if (s->depth == 0 || (s->depth - 1 < SCAN_FRAMES && s->frames[s->depth - 1].matched)) {
		s->found = true;
		s->found_at = s->pos;
	}
}

/* The object or array on top ends at its closing bracket, which is a value done. */
static void
scan_close(struct scanner *s)
{
	s->pos++;
	s->depth--;
	scan_value_done(s);
}

/*
 * Walk the text until the target is found, the limit is reached or the text stops being JSON.
 * Invalid text only stops the walk: the frames then say where it stopped.
 */
static void
scan_run(struct scanner *s)
{
	enum scan_state st = S_VALUE;
	struct scan_frame *f;
	size_t end;

	while (!s->found) {
		char c;

		scan_skip_ws(s);
		if (s->pos >= s->len)
			return;
		c = s->text[s->pos];
		/* An empty object or array closes where its first key or element would stand. */
		if ((st == S_FIRST_KEY && c == '}') || (st == S_FIRST_ELEM && c == ']')) {
			if (s->pos + 1 >= s->limit)
				return;
			scan_close(s);
			st = S_AFTER;
			continue;
		}
		switch (st) {
		case S_VALUE:
			scan_value_start(s);
			if (s->found)
				return;
			if (c == '{' || c == '[') {
				if (s->pos + 1 >= s->limit || !scan_push(s, c == '{'))
					return;
				s->pos++;
				st = c == '{' ? S_FIRST_KEY : S_FIRST_ELEM;
				break;
			}
			end = c == '"' ? scan_string_end(s) : scan_scalar_end(s);
			if (end == 0 || end == s->pos || end >= s->limit)
				return;
			s->pos = end;
			scan_value_done(s);
			st = S_AFTER;
			break;
		case S_FIRST_KEY:
		case S_KEY:
			if (c != '"')
				return;
			end = scan_string_end(s);
			if (end == 0 || end >= s->limit)
				return;
			scan_set_component(s, s->text + s->pos, end - s->pos);
			s->pos = end;
			st = S_COLON;
			break;
		case S_COLON:
			if (c != ':' || s->pos + 1 >= s->limit)
				return;
			s->pos++;
			if ((f = scan_top(s)) != NULL)
				f->in_value = true;
			st = S_VALUE;
			break;
		case S_FIRST_ELEM:
			scan_set_component(s, NULL, 0);
			st = S_VALUE;
			break;
		case S_AFTER:
			if (s->depth == 0)
				return;
			if (s->pos + 1 >= s->limit)
				return;
			if (c == ',') {
				s->pos++;
				if ((f = scan_top(s)) != NULL)
					f->index++;
				if (scan_top_is_object(s)) {
					st = S_KEY;
				} else {
					scan_set_component(s, NULL, 0);
					st = S_VALUE;
				}
			} else if (c == (scan_top_is_object(s) ? '}' : ']')) {
				scan_close(s);
			} else {
				return;
			}
			break;
		}
	}
}

bool
cfg_locate(const char *text, size_t len, const struct cfg_path_comp *path, unsigned int depth,
	   enum cfg_at at, size_t *offset)
{
	struct scanner *s;
	bool found;

	if (text == NULL || depth > CFG_PATH_MAX || (at == CFG_AT_KEY && depth == 0))
		return false;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return false;
	s->text = text;
	s->len = len;
	s->limit = SIZE_MAX;
	s->target = path;
	s->tdepth = depth;
	s->at = at;
	scan_run(s);
	found = s->found;
	*offset = s->found_at;
	free(s);
	return found;
}

/* Keep the message one printable line whatever the input held. */
static void
sanitize(char *s)
{
	for (; *s != '\0'; s++) {
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
	}
}

static int
verror(struct cfg_ctx *ctx, const struct cfg_path_comp *path, unsigned int depth,
       enum cfg_at at, const char *fmt, va_list ap)
{
	char path_text[PATH_TEXT_MAX];
	char msg[MSG_MAX];
	unsigned int line = 1;
	unsigned int col = 1;
	unsigned int d = depth < CFG_PATH_MAX ? depth : CFG_PATH_MAX;
	size_t offset = 0;
	bool found;

	if (ctx->failed)
		return -EINVAL;
	ctx->failed = true;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	path_render(path_text, sizeof(path_text), path, depth);
	found = cfg_locate(ctx->text, ctx->len, path, d, at, &offset);
	/* A value that was defaulted is not in the text: point at its nearest written ancestor. */
	while (!found && d > 0) {
		d--;
		found = cfg_locate(ctx->text, ctx->len, path, d, CFG_AT_VALUE, &offset);
	}
	if (found)
		cfg_line_col(ctx->text, ctx->len, offset, &line, &col);
	if (ctx->err != NULL && ctx->errlen > 0) {
		snprintf(ctx->err, ctx->errlen, "%s:%u:%u: %s: %s", ctx->name, line, col,
			 path_text, msg);
		sanitize(ctx->err);
	}
	return -EINVAL;
}

int
cfg_error(struct cfg_ctx *ctx, enum cfg_at at, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = verror(ctx, ctx->path, ctx->depth, at, fmt, ap);
	va_end(ap);
	return rc;
}

/* Split "ports[1].lcores[0]" (keys that are identifiers) into components kept in buf. */
static int
path_parse(const char *text, char *buf, size_t size, struct cfg_path_comp *path)
{
	unsigned int depth = 0;
	const char *p = text;
	size_t o = 0;

	while (*p != '\0' && depth < CFG_PATH_MAX) {
		if (*p == '[') {
			char *end;

			path[depth].key = NULL;
			path[depth].index = strtoul(p + 1, &end, 10);
			if (*end != ']')
				return -EINVAL;
			p = end + 1;
		} else {
			size_t n;

			if (*p == '.')
				p++;
			n = strcspn(p, ".[");
			if (n == 0 || o + n + 1 > size)
				return -EINVAL;
			memcpy(buf + o, p, n);
			buf[o + n] = '\0';
			path[depth].key = buf + o;
			o += n + 1;
			p += n;
		}
		depth++;
	}
	return (int)depth;
}

int
cfg_error_at(struct cfg_ctx *ctx, const char *path_text, const char *fmt, ...)
{
	struct cfg_path_comp path[CFG_PATH_MAX];
	char keys[PATH_TEXT_MAX];
	va_list ap;
	int depth;
	int rc;

	depth = path_parse(path_text, keys, sizeof(keys), path);
	if (depth < 0)
		depth = 0;
	va_start(ap, fmt);
	rc = verror(ctx, path, (unsigned int)depth, CFG_AT_VALUE, fmt, ap);
	va_end(ap);
	return rc;
}

bool
cfg_has(struct cfg_ctx *ctx, const char *path_text)
{
	struct cfg_path_comp path[CFG_PATH_MAX];
	char keys[PATH_TEXT_MAX];
	size_t offset;
	int depth;

	depth = path_parse(path_text, keys, sizeof(keys), path);
	return depth >= 0 && cfg_locate(ctx->text, ctx->len, path, (unsigned int)depth,
					 CFG_AT_VALUE, &offset);
}

/*
 * A syntax error: jansson's line, column and text, and the path of the value it was in, found
 * by walking the text up to the offending token (or to the end for a truncated text).
 */
int
cfg_error_syntax(struct cfg_ctx *ctx, const json_error_t *jerr)
{
	struct cfg_path_comp path[CFG_PATH_MAX];
	char keys[CFG_PATH_MAX][KEY_SHOW_MAX + 1];
	char path_text[PATH_TEXT_MAX];
	struct scanner *s;
	unsigned int depth = 0;

	if (ctx->failed)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (s != NULL) {
		s->text = ctx->text;
		s->len = ctx->len;
		s->limit = json_error_code(jerr) == json_error_premature_end_of_input ?
			   SIZE_MAX : (size_t)jerr->position;
		scan_run(s);
		for (unsigned int d = 0; d < s->depth && d < SCAN_FRAMES && d < CFG_PATH_MAX;
		     d++) {
			const struct scan_frame *f = &s->frames[d];

			if (!f->in_value)
				break;
			path[depth].index = f->index;
			path[depth].key = NULL;
			if (f->key != NULL) {
				json_t *k = json_loadb(f->key, f->key_len, JSON_DECODE_ANY, NULL);
				const char *v = json_is_string(k) ? json_string_value(k) : "?";

				snprintf(keys[depth], sizeof(keys[depth]), "%s", v);
				json_decref(k);
				path[depth].key = keys[depth];
			}
			depth++;
		}
		free(s);
	}
	path_render(path_text, sizeof(path_text), path, depth);
	ctx->failed = true;
	if (ctx->err != NULL && ctx->errlen > 0) {
		snprintf(ctx->err, ctx->errlen, "%s:%d:%d: %s: %s", ctx->name,
			 jerr->line > 0 ? jerr->line : 1, jerr->column > 0 ? jerr->column : 1,
			 path_text, jerr->text);
		sanitize(ctx->err);
	}
	return -EINVAL;
}

/* A problem with the file itself (cannot read it): no position, no path. */
int
cfg_error_file(struct cfg_ctx *ctx, int rc, const char *fmt, ...)
{
	char msg[MSG_MAX];
	va_list ap;

	if (ctx->failed)
		return rc;
	ctx->failed = true;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (ctx->err != NULL && ctx->errlen > 0) {
		snprintf(ctx->err, ctx->errlen, "%s: %s", ctx->name, msg);
		sanitize(ctx->err);
	}
	return rc;
}
