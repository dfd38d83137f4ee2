/* SPDX-License-Identifier: MIT */
#include "core/options.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "core/log.h"

#define PREFIX     "TFALLOC_"
#define PREFIX_LEN (sizeof(PREFIX) - 1)

static int
lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
}

static bool
eq_nocase(const char *a, const char *b)
{
	while (*a != '\0' && lower(*a) == lower(*b)) {
		a++;
		b++;
	}
	return *a == '\0' && *b == '\0';
}

int
tfa_parse_uint(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (s == NULL || *s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
			return -ERANGE;
	}
	if (*s != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

int
tfa_parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	unsigned shift = 0;

	if (s == NULL || *s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
			return -ERANGE;
	}
	switch (lower(*s)) {
	case '\0':
		break;
	case 'k':
		shift = 10;
		break;
	case 'm':
		shift = 20;
		break;
	case 'g':
		shift = 30;
		break;
	case 't':
		shift = 40;
		break;
	case 'b':
		if (s[1] != '\0')
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	if (shift != 0) {
		s++;
		/* "4K", "4KB", "4KiB" */
		if (lower(*s) == 'i' && lower(s[1]) == 'b')
			s += 2;
		else if (lower(*s) == 'b')
			s++;
		if (*s != '\0')
			return -EINVAL;
		if (v > (UINT64_MAX >> shift))
			return -ERANGE;
		v <<= shift;
	}
	*out = v;
	return 0;
}

int
tfa_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	if (s == NULL)
		return -EINVAL;
	for (size_t i = 0; i < TFA_ARRAY_SIZE(yes); i++) {
		if (eq_nocase(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (eq_nocase(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

void
tfa_options_defaults(tfa_options_t *out)
{
	memset(out, 0, sizeof(*out));
#define TFA_OPT_DEFAULT_str(field, def)  memcpy(out->field, def, sizeof(def))
#define TFA_OPT_DEFAULT_bool(field, def) out->field = (def)
#define TFA_OPT_DEFAULT_size(field, def) out->field = (def)
#define TFA_OPT_DEFAULT_uint(field, def) out->field = (def)
#define TFA_OPT_SET_DEFAULT(NAME, field, type, def, help) TFA_OPT_DEFAULT_##type(field, def);
	TFA_OPTIONS(TFA_OPT_SET_DEFAULT)
#undef TFA_OPT_SET_DEFAULT
}

struct diag {
	tfa_diag_fn fn;
	void *ctx;
	int count;
};

static void
complain(struct diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
complain(struct diag *d, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	d->count++;
	if (d->fn == NULL)
		return;
	va_start(ap, fmt);
	tfa_vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	d->fn(d->ctx, buf);
}

static const char *
errno_words(int err, const char *what)
{
	return err == -ERANGE ? "too large" : what;
}

/* The value as a person typed it, cut for the message. */
#define SHOWN(v) 64, (v)

static void
set_str(struct diag *d, const char *name, const char *value, char *field, tfa_opt_state_t *state,
	const char *def)
{
	size_t n = strnlen(value, TFA_OPT_STR_MAX);

	if (n >= TFA_OPT_STR_MAX) {
		/* What the line says is used, even over an earlier entry of the variable. */
		memcpy(field, def, strlen(def) + 1);
		*state = TFA_OPT_DEFAULT;
		complain(d, "%s: longer than %u bytes; using \"%s\"", name, TFA_OPT_STR_MAX - 1, def);
		return;
	}
	memcpy(field, value, n + 1);
	*state = TFA_OPT_SET;
}

static void
set_bool(struct diag *d, const char *name, const char *value, bool *field, tfa_opt_state_t *state,
	 bool def)
{
	if (tfa_parse_bool(value, field) != 0) {
		*field = def;
		*state = TFA_OPT_DEFAULT;
		complain(d, "%s=\"%.*s\": not a boolean (1/0, true/false, yes/no, on/off); using %s",
			 name, SHOWN(value), def ? "1" : "0");
		return;
	}
	*state = TFA_OPT_SET;
}

static void
set_size(struct diag *d, const char *name, const char *value, uint64_t *field,
	 tfa_opt_state_t *state, uint64_t def)
{
	int err = tfa_parse_size(value, field);

	if (err != 0) {
		*field = def;
		*state = TFA_OPT_DEFAULT;
		complain(d, "%s=\"%.*s\": %s; using %llu", name, SHOWN(value),
			 errno_words(err, "not a size (a number of bytes with an optional K, M, G or T suffix)"),
			 (unsigned long long)def);
		return;
	}
	*state = TFA_OPT_SET;
}

static void
set_uint(struct diag *d, const char *name, const char *value, uint64_t *field,
	 tfa_opt_state_t *state, uint64_t def)
{
	int err = tfa_parse_uint(value, field);

	if (err != 0) {
		*field = def;
		*state = TFA_OPT_DEFAULT;
		complain(d, "%s=\"%.*s\": %s; using %llu", name, SHOWN(value),
			 errno_words(err, "not a non-negative whole number"), (unsigned long long)def);
		return;
	}
	*state = TFA_OPT_SET;
}

/* Whether entry "NAME=value" names the variable; *value points past the '='. */
static bool
entry_is(const char *entry, const char *name, const char **value)
{
	size_t n = strlen(name);

	if (strncmp(entry, name, n) != 0 || entry[n] != '=')
		return false;
	*value = entry + n + 1;
	return true;
}

static bool
is_tool_variable(const char *entry)
{
	const char *list = TFA_TOOL_VARIABLES;

	while (*list != '\0') {
		const char *end = strchr(list, ' ');
		size_t n = end != NULL ? (size_t)(end - list) : strlen(list);
		if (strncmp(entry, list, n) == 0 && entry[n] == '=')
			return true;
		list += n;
		while (*list == ' ')
			list++;
	}
	return false;
}

int
tfa_options_parse(char *const *envp, tfa_options_t *out, tfa_diag_fn diag, void *ctx)
{
	struct diag d = { .fn = diag, .ctx = ctx, .count = 0 };

	tfa_options_defaults(out);
	if (envp == NULL)
		return 0;
	for (char *const *e = envp; *e != NULL; e++) {
		const char *entry = *e;
		const char *value;

		if (strncmp(entry, PREFIX, PREFIX_LEN) != 0)
			continue;
#define TFA_OPT_SETTER_str(NAME, field, def)                                                    \
	set_str(&d, PREFIX #NAME, value, out->field, &out->field##_state, def)
#define TFA_OPT_SETTER_bool(NAME, field, def)                                                   \
	set_bool(&d, PREFIX #NAME, value, &out->field, &out->field##_state, def)
#define TFA_OPT_SETTER_size(NAME, field, def)                                                   \
	set_size(&d, PREFIX #NAME, value, &out->field, &out->field##_state, def)
#define TFA_OPT_SETTER_uint(NAME, field, def)                                                   \
	set_uint(&d, PREFIX #NAME, value, &out->field, &out->field##_state, def)
#define TFA_OPT_MATCH(NAME, field, type, def, help)                                             \
	if (entry_is(entry, PREFIX #NAME, &value)) {                                            \
		TFA_OPT_SETTER_##type(NAME, field, def);                                        \
		continue;                                                                       \
	}
		TFA_OPTIONS(TFA_OPT_MATCH)
#undef TFA_OPT_MATCH
		if (is_tool_variable(entry))
			continue;
		const char *eq = strchr(entry, '=');
		int n = eq != NULL ? (int)(eq - entry) : (int)strlen(entry);
		complain(&d, "%.*s: unknown variable, ignored (tfalloc --help-env lists them)",
			 n < 64 ? n : 64, entry);
	}
	return d.count;
}

void
tfa_options_describe(void (*fn)(void *ctx, const char *line), void *ctx)
{
	char line[512];

#define TFA_OPT_DEFSTR_str(def)  def
#define TFA_OPT_DEFSTR_bool(def) ((def) ? "1" : "0")
#define TFA_OPT_DEFSTR_size(def) #def
#define TFA_OPT_DEFSTR_uint(def) #def
#define TFA_OPT_DESCRIBE(NAME, field, type, def, help)                                          \
	tfa_snprintf(line, sizeof(line), "%-25s %-5s %-9s %s", PREFIX #NAME, #type,              \
		     *(TFA_OPT_DEFSTR_##type(def)) == '\0' ? "(empty)" : TFA_OPT_DEFSTR_##type(def), \
		     help);                                                                      \
	fn(ctx, line);
	TFA_OPTIONS(TFA_OPT_DESCRIBE)
#undef TFA_OPT_DESCRIBE
}
