/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target of the shim's option parser (core/options.c).
 *
 * The input is cut at NUL bytes into at most MAX_ENTRIES pieces; each piece
 * becomes one environment entry.  Its first byte picks the variable: one of
 * the TFALLOC_* options, a tool variable, "TFALLOC_" followed by the rest of
 * the piece as is (unknown or malformed names), or the rest with no prefix;
 * the remaining bytes are the value.  Each value is also given to the typed
 * parsers directly.  The parser must never crash and must count its
 * complaints exactly, and every option must end as a small model says: the
 * last entry naming it decides; a good value is used (state SET), a bad one
 * gives the default (state DEFAULT), as its complaint says; no entry, the
 * default.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ENTRIES 8

static const char *const names[] = {
#define TFA_FUZZ_NAME(NAME, field, type, def, help) "TFALLOC_" #NAME,
	TFA_OPTIONS(TFA_FUZZ_NAME)
#undef TFA_FUZZ_NAME
	"TFALLOC_LIBRARY",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

struct diag_count {
	int lines;
};

static void
count_diag(void *ctx, const char *msg)
{
	struct diag_count *c = ctx;

	if (strlen(msg) >= 512)
		abort();
	c->lines++;
}

/* The value of the last entry "NAME=value" of envp, or NULL. */
static const char *
last_value(char *const *envp, const char *name)
{
	const char *v = NULL;
	size_t n = strlen(name);

	for (; *envp != NULL; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			v = *envp + n + 1;
	return v;
}

static void
model_str(const char *v, const char *field, tfa_opt_state_t state, const char *def)
{
	if (memchr(field, '\0', TFA_OPT_STR_MAX) == NULL)
		abort();
	if (v != NULL && strlen(v) < TFA_OPT_STR_MAX) {
		if (state != TFA_OPT_SET || strcmp(field, v) != 0)
			abort();
	} else if (state != TFA_OPT_DEFAULT || strcmp(field, def) != 0) {
		abort();
	}
}

static void
model_bool(const char *v, bool field, tfa_opt_state_t state, bool def)
{
	bool want;

	if (v != NULL && tfa_parse_bool(v, &want) == 0) {
		if (state != TFA_OPT_SET || field != want)
			abort();
	} else if (state != TFA_OPT_DEFAULT || field != def) {
		abort();
	}
}

static void
model_num(const char *v, int (*parse)(const char *, uint64_t *), uint64_t field,
	  tfa_opt_state_t state, uint64_t def)
{
	uint64_t want;

	if (v != NULL && parse(v, &want) == 0) {
		if (state != TFA_OPT_SET || field != want)
			abort();
	} else if (state != TFA_OPT_DEFAULT || field != def) {
		abort();
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char bufs[MAX_ENTRIES][TFA_OPT_STR_MAX * 2 + 64];
	char *envp[MAX_ENTRIES + 1];
	size_t n = 0, pos = 0;
	static tfa_options_t opts;
	struct diag_count c = { 0 };

	while (pos < size && n < MAX_ENTRIES) {
		const uint8_t *end = memchr(data + pos, '\0', size - pos);
		size_t len = end != NULL ? (size_t)(end - (data + pos)) : size - pos;
		unsigned sel = data[pos] % (NNAMES + 2);
		const char *value = (const char *)data + pos + 1;
		size_t vlen = len > 0 ? len - 1 : 0;
		int k;

		if (vlen > TFA_OPT_STR_MAX * 2)
			vlen = TFA_OPT_STR_MAX * 2;
		if (sel < NNAMES)
			k = snprintf(bufs[n], sizeof(bufs[n]), "%s=%.*s", names[sel], (int)vlen, value);
		else if (sel == NNAMES)
			k = snprintf(bufs[n], sizeof(bufs[n]), "TFALLOC_%.*s", (int)vlen, value);
		else
			k = snprintf(bufs[n], sizeof(bufs[n]), "%.*s", (int)vlen, value);
		if (k < 0)
			abort();
		envp[n] = bufs[n];
		n++;
		pos += len + 1;
	}
	envp[n] = NULL;

	int complaints = tfa_options_parse(envp, &opts, count_diag, &c);
	if (complaints != c.lines || complaints < 0 || complaints > (int)n)
		abort();
#define TFA_FUZZ_CHECK_str(NAME, field, def)                                                   \
	model_str(last_value(envp, "TFALLOC_" #NAME), opts.field, opts.field##_state, def)
#define TFA_FUZZ_CHECK_bool(NAME, field, def)                                                  \
	model_bool(last_value(envp, "TFALLOC_" #NAME), opts.field, opts.field##_state, def)
#define TFA_FUZZ_CHECK_size(NAME, field, def)                                                  \
	model_num(last_value(envp, "TFALLOC_" #NAME), tfa_parse_size, opts.field,             \
		  opts.field##_state, def)
#define TFA_FUZZ_CHECK_uint(NAME, field, def)                                                  \
	model_num(last_value(envp, "TFALLOC_" #NAME), tfa_parse_uint, opts.field,             \
		  opts.field##_state, def)
#define TFA_FUZZ_CHECK(NAME, field, type, def, help) TFA_FUZZ_CHECK_##type(NAME, field, def);
	TFA_OPTIONS(TFA_FUZZ_CHECK)
#undef TFA_FUZZ_CHECK
	/* No diag function: the same count, nothing printed. */
	if (tfa_options_parse(envp, &opts, NULL, NULL) != complaints)
		abort();

	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(envp[i], '=');
		const char *v = eq != NULL ? eq + 1 : envp[i];
		uint64_t u;
		bool b;

		if (tfa_parse_size(v, &u) != 0)
			(void)0;
		if (tfa_parse_uint(v, &u) != 0)
			(void)0;
		if (tfa_parse_bool(v, &b) != 0)
			(void)0;
	}
	return 0;
}
