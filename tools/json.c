/* SPDX-License-Identifier: MIT */
#include "tools/json.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void
tfa_json_init(tfa_json_t *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
}

static void
json_indent(tfa_json_t *j)
{
	fputc('\n', j->f);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
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
		fputc(',', j->f);
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
	j->depth--;
	if (items)
		json_indent(j);
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

void
tfa_json_write_string(FILE *f, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	fputc('"', f);
	while (i < len) {
		unsigned char c = p[i];
		size_t n;

		switch (c) {
		case '"':
			fputs("\\\"", f);
			i++;
			continue;
		case '\\':
			fputs("\\\\", f);
			i++;
			continue;
		case '\n':
			fputs("\\n", f);
			i++;
			continue;
		case '\r':
			fputs("\\r", f);
			i++;
			continue;
		case '\t':
			fputs("\\t", f);
			i++;
			continue;
		case '\b':
			fputs("\\b", f);
			i++;
			continue;
		case '\f':
			fputs("\\f", f);
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
			fputs("\\ufffd", f);
			i++;
			continue;
		}
		fwrite(p + i, 1, n, f);
		i += n;
	}
	fputc('"', f);
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
