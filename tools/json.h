/* SPDX-License-Identifier: MIT */
/*
 * A small streaming JSON writer.  It tracks nesting and commas, so callers
 * just emit keys and values in order; every string is escaped so that the
 * output is valid JSON whatever bytes it holds: '"', '\\' and control
 * characters are escaped (\n, \t, ..., otherwise \u00XX), and bytes that are
 * not valid UTF-8 become U+FFFD.
 *
 * Layout: pretty-printed with two spaces per level; an empty array or object
 * stays on one line ("[]").
 */
#ifndef TFA_TOOLS_JSON_H
#define TFA_TOOLS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TFA_JSON_MAX_DEPTH 32

typedef struct tfa_json_s {
	FILE *f;
	int depth;
	bool has_items[TFA_JSON_MAX_DEPTH]; /* per open level: a value was written */
	bool after_key;                     /* the next value completes a key: value pair */
	int compact_from; /* levels deeper than this are written on one line; 0: none */
} tfa_json_t;

void tfa_json_init(tfa_json_t *j, FILE *f);

void tfa_json_begin_object(tfa_json_t *j);
/* An object written on one line, with everything in it (stack frames: many small objects). */
void tfa_json_begin_compact_object(tfa_json_t *j);
void tfa_json_end_object(tfa_json_t *j);
void tfa_json_begin_array(tfa_json_t *j);
void tfa_json_end_array(tfa_json_t *j);

/* Inside an object: the key of the next value. */
void tfa_json_key(tfa_json_t *j, const char *key);

void tfa_json_string(tfa_json_t *j, const char *s); /* NULL: null */
void tfa_json_string_len(tfa_json_t *j, const char *s, size_t len);
void tfa_json_u64(tfa_json_t *j, uint64_t v);
void tfa_json_i64(tfa_json_t *j, int64_t v);
void tfa_json_bool(tfa_json_t *j, bool v);
void tfa_json_null(tfa_json_t *j);
/* A number the caller formatted (must be valid JSON number syntax). */
void tfa_json_number(tfa_json_t *j, const char *num);

/* Shorthands for key then value. */
void tfa_json_kv_string(tfa_json_t *j, const char *key, const char *s);
void tfa_json_kv_u64(tfa_json_t *j, const char *key, uint64_t v);
void tfa_json_kv_i64(tfa_json_t *j, const char *key, int64_t v);
void tfa_json_kv_bool(tfa_json_t *j, const char *key, bool v);

/*
 * Length of the valid UTF-8 sequence at s (n > 0 bytes available), or 0 when
 * the bytes there are not one (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF).
 */
size_t tfa_utf8_sequence(const unsigned char *s, size_t n);

/* Writes s (len bytes) as a quoted, escaped JSON string. */
void tfa_json_write_string(FILE *f, const char *s, size_t len);

#endif /* TFA_TOOLS_JSON_H */
