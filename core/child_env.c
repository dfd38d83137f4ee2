/* SPDX-License-Identifier: MIT */
#include "core/child_env.h"
#include "core/elf.h"

#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define PRELOAD_NAME "LD_PRELOAD"
#define PRELOAD_EQ   PRELOAD_NAME "="
#define VAR_PREFIX   "TFALLOC_"
#define INJECTED_EQ  TFA_CHILD_ENV_INJECTED "="
#define HANDOFF_EQ   TFA_CHILD_ENV_HANDOFF "="

/* glibc separates LD_PRELOAD's elements by colons and by spaces. */
static bool
is_preload_sep(char c)
{
	return c == ':' || c == ' ';
}

/* The length of NAME in "NAME=value" (the whole string without '='). */
static size_t
name_len(const char *entry)
{
	const char *eq = strchr(entry, '=');

	return eq != NULL ? (size_t)(eq - entry) : strlen(entry);
}

/* The index of the entry named name (n bytes) in envp, or -1. */
static long
find_entry(char *const *envp, const char *name, size_t n)
{
	for (long i = 0; envp != NULL && envp[i] != NULL; i++)
		if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
			return i;
	return -1;
}

/* The next element of an LD_PRELOAD list at *p (false: none left); *p moves past it. */
static bool
next_element(const char **p, const char **start, size_t *len)
{
	while (is_preload_sep(**p))
		(*p)++;
	*start = *p;
	while (**p != '\0' && !is_preload_sep(**p))
		(*p)++;
	*len = (size_t)(*p - *start);
	return *len > 0;
}

/* Whether the LD_PRELOAD value list has an element equal to elem (n bytes). */
static bool
preload_has(const char *list, const char *elem, size_t n)
{
	const char *start;
	size_t len;

	while (next_element(&list, &start, &len))
		if (len == n && memcmp(start, elem, n) == 0)
			return true;
	return false;
}

static bool
same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool
tfa_child_env_keep(tfa_child_env_t *ce, char *const *envp, const char *self_path,
		   char *(*copy_str)(const char *s, size_t n))
{
	memset(ce, 0, sizeof(*ce));
	long at = find_entry(envp, PRELOAD_NAME, sizeof(PRELOAD_NAME) - 1);
	if (at >= 0 && self_path != NULL) {
		const char *p = envp[at] + sizeof(PRELOAD_EQ) - 1;
		const char *found = NULL;
		size_t found_len = 0;
		size_t self_len = strlen(self_path);
		/* The same string first; else the same file (a relative or bare name, a symlink). */
		for (int pass = 0; pass < 2 && found == NULL; pass++) {
			const char *q = p, *start;
			size_t n;
			while (found == NULL && next_element(&q, &start, &n)) {
				char elem[4096];
				if (n >= sizeof(elem))
					continue;
				if (pass == 0 && n == self_len && memcmp(start, self_path, n) == 0) {
					found = start;
					found_len = n;
				} else if (pass == 1) {
					memcpy(elem, start, n);
					elem[n] = '\0';
					if (same_file(elem, self_path)) {
						found = start;
						found_len = n;
					}
				}
			}
		}
		if (found != NULL) {
			ce->preload = copy_str(found, found_len);
			ce->preload_len = ce->preload != NULL ? found_len : 0;
		}
	}
	for (size_t i = 0; envp != NULL && envp[i] != NULL; i++) {
		const char *e = envp[i];
		if (strncmp(e, VAR_PREFIX, sizeof(VAR_PREFIX) - 1) != 0 || strchr(e, '=') == NULL
		    || strncmp(e, INJECTED_EQ, sizeof(INJECTED_EQ) - 1) == 0
		    || strncmp(e, HANDOFF_EQ, sizeof(HANDOFF_EQ) - 1) == 0 || ce->nvars == TFA_CHILD_ENV_MAX_VARS)
			continue;
		char *copy = copy_str(e, strlen(e));
		if (copy != NULL)
			ce->vars[ce->nvars++] = copy;
	}
	return ce->preload != NULL;
}

/* Removes envp[i], as unsetenv does: the entries after it move down. */
static void
remove_entry(char **envp, long i)
{
	do
		envp[i] = envp[i + 1];
	while (envp[i++] != NULL);
}

int
tfa_child_env_take_back(char **envp)
{
	long at = find_entry(envp, TFA_CHILD_ENV_INJECTED, sizeof(TFA_CHILD_ENV_INJECTED) - 1);
	int changed = 0;

	if (at < 0)
		return 0;
	/* The list is read before its entry goes (the string stays where it is). */
	const char *list = envp[at] + sizeof(INJECTED_EQ) - 1;
	remove_entry(envp, at);
	changed++;
	while (*list != '\0') {
		const char *end = strchr(list, ',');
		size_t n = end != NULL ? (size_t)(end - list) : strlen(list);
		const char *colon = memchr(list, ':', n);
		size_t nn = colon != NULL ? (size_t)(colon - list) : n;
		if (nn == sizeof(PRELOAD_NAME) - 1 && memcmp(list, PRELOAD_NAME, nn) == 0) {
			long i = find_entry(envp, PRELOAD_NAME, nn);
			if (i >= 0 && colon == NULL) {
				remove_entry(envp, i);
				changed++;
			} else if (i >= 0) {
				/* "LD_PRELOAD:N": the first N bytes of its value were added. */
				size_t cut = 0;
				for (const char *d = colon + 1; d < list + n && *d >= '0' && *d <= '9'; d++)
					cut = cut * 10 + (size_t)(*d - '0');
				char *value = envp[i] + sizeof(PRELOAD_EQ) - 1;
				size_t len = strlen(value);
				if (cut <= len) {
					memmove(value, value + cut, len - cut + 1);
					changed++;
				}
			}
		} else if (nn > sizeof(VAR_PREFIX) - 1 && memcmp(list, VAR_PREFIX, sizeof(VAR_PREFIX) - 1) == 0) {
			long i = find_entry(envp, list, nn);
			if (i >= 0) {
				remove_entry(envp, i);
				changed++;
			}
		}
		list += n;
		if (*list == ',')
			list++;
	}
	return changed;
}

/* ce's variables: those kept at start, then the hand-off of this exec. */
static size_t
nvars_of(const tfa_child_env_t *ce)
{
	return ce->nvars + (ce->handoff != NULL);
}

static char *
var_at(const tfa_child_env_t *ce, size_t i)
{
	return i < ce->nvars ? ce->vars[i] : ce->handoff;
}

/* What envp lacks of ce: *preload_at (-1: no LD_PRELOAD), whether it names the shim, and the vars missing. */
struct missing {
	long preload_at;
	bool preload_ok;
	size_t nenv;
	size_t nvars;
	bool var[TFA_CHILD_ENV_MAX_VARS + 1];
	long injected_at; /* a stale TFALLOC_INJECTED, replaced */
};

static void
find_missing(const tfa_child_env_t *ce, char *const *envp, struct missing *m)
{
	memset(m, 0, sizeof(*m));
	m->preload_at = find_entry(envp, PRELOAD_NAME, sizeof(PRELOAD_NAME) - 1);
	m->preload_ok = m->preload_at >= 0
			&& preload_has(envp[m->preload_at] + sizeof(PRELOAD_EQ) - 1, ce->preload, ce->preload_len);
	m->injected_at = find_entry(envp, TFA_CHILD_ENV_INJECTED, sizeof(TFA_CHILD_ENV_INJECTED) - 1);
	while (envp != NULL && envp[m->nenv] != NULL)
		m->nenv++;
	for (size_t i = 0; i < nvars_of(ce); i++) {
		m->var[i] = find_entry(envp, var_at(ce, i), name_len(var_at(ce, i))) < 0;
		m->nvars += m->var[i];
	}
}

/* The bytes of the TFALLOC_INJECTED entry (with its NUL), and of a new LD_PRELOAD one (0: none). */
static size_t
strings_size(const tfa_child_env_t *ce, char *const *envp, const struct missing *m, size_t *preload_bytes)
{
	size_t injected = sizeof(INJECTED_EQ) + sizeof(PRELOAD_NAME) + 24;

	*preload_bytes = 0;
	if (!m->preload_ok)
		*preload_bytes = sizeof(PRELOAD_EQ) + ce->preload_len + 1
				 + (m->preload_at >= 0 ? strlen(envp[m->preload_at]) : 0);
	for (size_t i = 0; i < nvars_of(ce); i++)
		if (m->var[i])
			injected += name_len(var_at(ce, i)) + 1;
	return injected + *preload_bytes;
}

size_t
tfa_child_env_size(const tfa_child_env_t *ce, char *const *envp)
{
	struct missing m;
	size_t preload_bytes;

	if (ce->preload == NULL)
		return 0;
	find_missing(ce, envp, &m);
	if (m.preload_ok && m.nvars == 0)
		return 0;
	/* Every entry, a new LD_PRELOAD, the missing variables, TFALLOC_INJECTED, NULL. */
	size_t slots = m.nenv + 1 + m.nvars + 1 + 1;
	return slots * sizeof(char *) + strings_size(ce, envp, &m, &preload_bytes);
}

/* Appends n bytes of src at *s. */
static void
put(char **s, const char *src, size_t n)
{
	memcpy(*s, src, n);
	*s += n;
}

static void
put_str(char **s, const char *src)
{
	put(s, src, strlen(src));
}

static void
put_uint(char **s, size_t v)
{
	char digits[24];
	size_t n = 0;

	do
		digits[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	while (n > 0)
		*(*s)++ = digits[--n];
}

char **
tfa_child_env_build(const tfa_child_env_t *ce, char *const *envp, void *buf, size_t size)
{
	struct missing m;
	size_t preload_bytes;

	if (ce->preload == NULL)
		return NULL;
	find_missing(ce, envp, &m);
	size_t slots = m.nenv + 1 + m.nvars + 1 + 1;
	size_t need = slots * sizeof(char *) + strings_size(ce, envp, &m, &preload_bytes);
	if (size < need || ((uintptr_t)buf & 7) != 0)
		return NULL;
	char **out = buf;
	char *s = (char *)buf + slots * sizeof(char *);
	size_t n = 0;

	/* Without snprintf: this may run in a vfork child (no locale, no allocation). */
	char *injected = s;
	put_str(&s, INJECTED_EQ);
	bool first = true;
	char *preload = NULL;
	const char *theirs = m.preload_at >= 0 ? envp[m.preload_at] + sizeof(PRELOAD_EQ) - 1 : NULL;
	if (!m.preload_ok) {
		put_str(&s, PRELOAD_NAME);
		if (theirs != NULL) {
			*s++ = ':';
			put_uint(&s, ce->preload_len + (theirs[0] != '\0' ? 1 : 0));
		}
		first = false;
	}
	for (size_t i = 0; i < nvars_of(ce); i++) {
		if (!m.var[i])
			continue;
		if (!first)
			*s++ = ',';
		put(&s, var_at(ce, i), name_len(var_at(ce, i)));
		first = false;
	}
	*s++ = '\0';
	if (!m.preload_ok) {
		/* Ours first, so that its malloc is the one found; theirs after, as tfalloc run does. */
		preload = s;
		put_str(&s, PRELOAD_EQ);
		put(&s, ce->preload, ce->preload_len);
		if (theirs != NULL && theirs[0] != '\0') {
			*s++ = ':';
			put_str(&s, theirs);
		}
		*s++ = '\0';
	}
	for (size_t i = 0; i < m.nenv; i++) {
		if ((long)i == m.injected_at)
			continue;
		out[n++] = (long)i == m.preload_at && preload != NULL ? preload : envp[i];
	}
	if (preload != NULL && m.preload_at < 0)
		out[n++] = preload;
	for (size_t i = 0; i < nvars_of(ce); i++)
		if (m.var[i])
			out[n++] = var_at(ce, i);
	out[n++] = injected;
	out[n] = NULL;
	return out;
}

bool
tfa_child_env_is_valgrind(char *const *envp)
{
	return find_entry(envp, "VALGRIND_LAUNCHER", sizeof("VALGRIND_LAUNCHER") - 1) >= 0;
}

size_t
tfa_child_env_size_without(const tfa_child_env_t *ce, char *const *envp)
{
	if (ce->preload == NULL)
		return 0;
	long at = find_entry(envp, PRELOAD_NAME, sizeof(PRELOAD_NAME) - 1);
	if (at < 0 || !preload_has(envp[at] + sizeof(PRELOAD_EQ) - 1, ce->preload, ce->preload_len))
		return 0;
	size_t n = 0;
	while (envp[n] != NULL)
		n++;
	return (n + 1) * sizeof(char *) + strlen(envp[at]) + 1;
}

char **
tfa_child_env_build_without(const tfa_child_env_t *ce, char *const *envp, void *buf, size_t size)
{
	size_t need = tfa_child_env_size_without(ce, envp);

	if (need == 0 || size < need || ((uintptr_t)buf & 7) != 0)
		return NULL;
	long at = find_entry(envp, PRELOAD_NAME, sizeof(PRELOAD_NAME) - 1);
	size_t n = 0;
	while (envp[n] != NULL)
		n++;
	char **out = buf;
	char *s = (char *)buf + (n + 1) * sizeof(char *);
	char *preload = s;
	const char *p = envp[at] + sizeof(PRELOAD_EQ) - 1, *start;
	size_t len;
	bool empty = true;

	/* Every element but the shim's, colon-separated (glibc takes colons and spaces alike). */
	put_str(&s, PRELOAD_EQ);
	while (next_element(&p, &start, &len)) {
		if (len == ce->preload_len && memcmp(start, ce->preload, len) == 0)
			continue;
		if (!empty)
			*s++ = ':';
		put(&s, start, len);
		empty = false;
	}
	*s = '\0';
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if ((long)i != at)
			out[k++] = envp[i];
		else if (!empty)
			out[k++] = preload;
	}
	out[k] = NULL;
	return out;
}

/* ---- programs whose sanitizer runtime must be the first library --------------------------------- */

/* Whether a needed library's name is of a runtime that must come first. */
static bool
is_first_runtime(const char *name, void *arg)
{
	static const char *const runtimes[] = { "libasan.so", "libtsan.so", "liblsan.so", "libhwasan.so" };

	(void)arg;
	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++)
		if (strncmp(name, runtimes[i], strlen(runtimes[i])) == 0)
			return true;
	return false;
}

/*
 * One read for the file header and the program headers, one for the dynamic
 * section, one for each needed library's name: every exec asks (strace -c,
 * 10 execs of /bin/true under the shim: 64 preads, 24 without this check; 334
 * when it read each header apart, twice over).
 */
bool
tfa_child_env_needs_first(int fd)
{
	unsigned char head[TFA_ELF_HEAD_BYTES];
	tfa_elf_t e;

	return tfa_elf_open(fd, head, &e) && tfa_elf_any_needed(&e, is_first_runtime, NULL);
}

bool
tfa_child_env_path_needs_first(int dirfd, const char *path)
{
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	char line[256];

	if (fd < 0)
		return false;
	bool first = tfa_child_env_needs_first(fd);
	ssize_t n = first ? 0 : pread(fd, line, sizeof(line) - 1, 0);
	close(fd);
	if (n > 2 && line[0] == '#' && line[1] == '!') {
		/* A script: its interpreter is the program (one level: the kernel's own limit is 4). */
		line[n] = '\0';
		char *interp = line + 2 + strspn(line + 2, " \t");
		interp[strcspn(interp, " \t\n")] = '\0';
		if (interp[0] == '/' && (fd = open(interp, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) >= 0) {
			first = tfa_child_env_needs_first(fd);
			close(fd);
		}
	}
	return first;
}
