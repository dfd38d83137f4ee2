/* SPDX-License-Identifier: MIT */
#include "tools/json.h"

#include "core/common.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void
tfa_json_init(tfa_json_t *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
}

static bool
json_compact(const tfa_json_t *j)
{
	return j->compact_from != 0 && j->depth > j->compact_from;
}

static void
json_indent(tfa_json_t *j)
{
	static const char spaces[] = "                                                                ";

	if (json_compact(j))
		return;
	fputc_unlocked('\n', j->f);
	fwrite_unlocked(spaces, 1, TFA_MIN((size_t)j->depth * 2, sizeof(spaces) - 1), j->f);
}

/* Separator and indentation before a value (or a key) at the current level. */
static void
json_before_item(tfa_json_t *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (j->depth == 0)
		return;
	if (j->has_items[j->depth - 1])
		fputs_unlocked(json_compact(j) ? ", " : ",", j->f);
	j->has_items[j->depth - 1] = true;
	json_indent(j);
}

static void
json_open(tfa_json_t *j, char c)
{
	if (j->depth >= TFA_JSON_MAX_DEPTH)
		abort(); /* a bug of the caller: no document of ours nests this deep */
	json_before_item(j);
	fputc(c, j->f);
	j->has_items[j->depth] = false;
	j->depth++;
}

static void
json_close(tfa_json_t *j, char c)
{
	bool items;

	if (j->depth == 0)
		abort(); /* a bug of the caller: nothing to close */
	items = j->has_items[j->depth - 1];
	bool compact = json_compact(j);
	j->depth--;
	if (items && !compact)
		json_indent(j);
	if (j->compact_from != 0 && j->depth <= j->compact_from)
		j->compact_from = 0;
	fputc(c, j->f);
	if (j->depth == 0)
		fputc('\n', j->f);
}

void
tfa_json_begin_object(tfa_json_t *j)
{
	json_open(j, '{');
}

void
tfa_json_begin_compact_object(tfa_json_t *j)
{
	json_open(j, '{');
	if (j->compact_from == 0)
		j->compact_from = j->depth - 1;
}

void
tfa_json_end_object(tfa_json_t *j)
{
	json_close(j, '}');
}

void
tfa_json_begin_array(tfa_json_t *j)
{
	json_open(j, '[');
}

void
tfa_json_end_array(tfa_json_t *j)
{
	json_close(j, ']');
}

void
tfa_json_key(tfa_json_t *j, const char *key)
{
	json_before_item(j);
	tfa_json_write_string(j->f, key, strlen(key));
	fputs(": ", j->f);
	j->after_key = true;
}

size_t
tfa_utf8_sequence(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (len > n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/* Bytes that go into a JSON string as they are: printable ASCII but '"' and '\\'. */
static bool
json_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

void
tfa_json_write_string(FILE *f, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	fputc_unlocked('"', f);
	while (i < len) {
		size_t run = i;
		while (run < len && json_plain(p[run]))
			run++;
		if (run > i) {
			fwrite_unlocked(p + i, 1, run - i, f);
			i = run;
			continue;
		}
		unsigned char c = p[i];
		size_t n;

		switch (c) {
		case '"':
			fputs_unlocked("\\\"", f);
			i++;
			continue;
		case '\\':
			fputs_unlocked("\\\\", f);
			i++;
			continue;
		case '\n':
			fputs_unlocked("\\n", f);
			i++;
			continue;
		case '\r':
			fputs_unlocked("\\r", f);
			i++;
			continue;
		case '\t':
			fputs_unlocked("\\t", f);
			i++;
			continue;
		case '\b':
			fputs_unlocked("\\b", f);
			i++;
			continue;
		case '\f':
			fputs_unlocked("\\f", f);
			i++;
			continue;
		default:
			break;
		}
		if (c < 0x20 || c == 0x7f) {
			fprintf(f, "\\u%04x", c);
			i++;
			continue;
		}
		n = tfa_utf8_sequence(p + i, len - i);
		if (n == 0) {
			fputs_unlocked("\\ufffd", f);
			i++;
			continue;
		}
		fwrite_unlocked(p + i, 1, n, f);
		i += n;
	}
	fputc_unlocked('"', f);
}

void
tfa_json_string_len(tfa_json_t *j, const char *s, size_t len)
{
	json_before_item(j);
	tfa_json_write_string(j->f, s, len);
}

void
tfa_json_string(tfa_json_t *j, const char *s)
{
	if (s == NULL)
		tfa_json_null(j);
	else
		tfa_json_string_len(j, s, strlen(s));
}

void
tfa_json_u64(tfa_json_t *j, uint64_t v)
{
	json_before_item(j);
	fprintf(j->f, "%" PRIu64, v);
}

void
tfa_json_i64(tfa_json_t *j, int64_t v)
{
	json_before_item(j);
	fprintf(j->f, "%" PRId64, v);
}

void
tfa_json_bool(tfa_json_t *j, bool v)
{
	json_before_item(j);
	fputs(v ? "true" : "false", j->f);
}

void
tfa_json_null(tfa_json_t *j)
{
	json_before_item(j);
	fputs("null", j->f);
}

void
tfa_json_number(tfa_json_t *j, const char *num)
{
	json_before_item(j);
	fputs(num, j->f);
}

void
tfa_json_kv_string(tfa_json_t *j, const char *key, const char *s)
{
	tfa_json_key(j, key);
	tfa_json_string(j, s);
}

void
tfa_json_kv_u64(tfa_json_t *j, const char *key, uint64_t v)
{
	tfa_json_key(j, key);
	tfa_json_u64(j, v);
}

void
tfa_json_kv_i64(tfa_json_t *j, const char *key, int64_t v)
{
	tfa_json_key(j, key);
	tfa_json_i64(j, v);
}

void
tfa_json_kv_bool(tfa_json_t *j, const char *key, bool v)
{
	tfa_json_key(j, key);
	tfa_json_bool(j, v);
}
