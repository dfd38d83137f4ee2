/* SPDX-License-Identifier: MIT */
/*
 * core/child_env.h: what a process keeps of its environment at start, the
 * environment an exec gets with the missing parts added, and the new
 * program taking them back: the round trip gives the program exactly the
 * environment its parent passed, in its order, and nothing is added when
 * nothing is missing.
 */
#include "core/child_env.h"

#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SELF "/opt/tfa/lib/libtfalloc.so"

/* The test's strings and arrays: from a static pool, as the shim's come from its arena (never freed). */
static char pool[1 << 16] __attribute__((aligned(16)));
static size_t pool_used;

static void *
pool_alloc(size_t n)
{
	size_t at = (pool_used + 15) & ~(size_t)15;

	ck_assert_uint_le(at + n, sizeof(pool));
	pool_used = at + n;
	return pool + at;
}

static char *
pool_strdup(const char *s)
{
	size_t n = strlen(s) + 1;

	return memcpy(pool_alloc(n), s, n);
}

static char *
copy_str(const char *s, size_t n)
{
	char *c = pool_alloc(n + 1);

	ck_assert_ptr_nonnull(c);
	memcpy(c, s, n);
	c[n] = '\0';
	return c;
}

/* A NULL-terminated environment of writable copies of the strings (the kernel's are writable). */
static char **
make_env(const char *const *strs)
{
	size_t n = 0;

	while (strs[n] != NULL)
		n++;
	char **env = pool_alloc((n + 1) * sizeof(char *));
	for (size_t i = 0; i < n; i++)
		env[i] = pool_strdup(strs[i]);
	env[n] = NULL;
	return env;
}

#define ENV(...) make_env((const char *const[]){ __VA_ARGS__, NULL })

/* The environment the shim started with, under tfalloc run. */
#define STARTED ENV("HOME=/root", "LD_PRELOAD=" SELF ":/usr/lib/other.so", "TFALLOC_OUTPUT=/tmp/out", \
		    "PATH=/usr/bin", "TFALLOC_QUIET=1")

static void
keep_started(tfa_child_env_t *ce)
{
	ck_assert(tfa_child_env_keep(ce, STARTED, SELF, copy_str));
}

/*
 * What the new program's environment becomes: envp built for exec, copied
 * into writable strings (as the kernel gives them), then taken back.
 * Returns the number of entries; out gets them.
 */
static size_t
round_trip(const tfa_child_env_t *ce, char **envp, char ***exec_envp, char **out, size_t cap)
{
	static char buf[1 << 14] __attribute__((aligned(8)));
	size_t need = tfa_child_env_size(ce, envp);

	ck_assert_uint_le(need, sizeof(buf));
	char *const *given = envp;
	if (need > 0) {
		*exec_envp = tfa_child_env_build(ce, envp, buf, need);
		ck_assert_ptr_nonnull(*exec_envp);
		given = *exec_envp;
	} else {
		*exec_envp = NULL;
	}
	size_t n = 0;
	for (; given[n] != NULL; n++) {
		ck_assert_uint_lt(n + 1, cap);
		out[n] = pool_strdup(given[n]);
	}
	out[n] = NULL;
	tfa_child_env_take_back(out);
	size_t m = 0;
	while (out[m] != NULL)
		m++;
	return m;
}

static void
check_same(char **got, char **want)
{
	size_t i = 0;

	for (; want[i] != NULL; i++) {
		ck_assert_ptr_nonnull(got[i]);
		ck_assert_str_eq(got[i], want[i]);
	}
	ck_assert_ptr_null(got[i]);
}

/* The entry named name in envp, or NULL. */
static const char *
lookup(char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; envp[i] != NULL; i++)
		if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
			return envp[i] + n + 1;
	return NULL;
}

START_TEST(keeps_preload_element_and_vars)
{
	tfa_child_env_t ce;

	keep_started(&ce);
	ck_assert_str_eq(ce.preload, SELF);
	ck_assert_uint_eq(ce.preload_len, strlen(SELF));
	ck_assert_uint_eq(ce.nvars, 2);
	ck_assert_str_eq(ce.vars[0], "TFALLOC_OUTPUT=/tmp/out");
	ck_assert_str_eq(ce.vars[1], "TFALLOC_QUIET=1");
}
END_TEST

START_TEST(not_loaded_by_preload)
{
	tfa_child_env_t ce;
	char **env = ENV("LD_PRELOAD=/usr/lib/other.so", "TFALLOC_OUTPUT=/x");

	ck_assert(!tfa_child_env_keep(&ce, env, SELF, copy_str));
	ck_assert_ptr_null(ce.preload);
	char **bare = ENV("PATH=/usr/bin");
	ck_assert_uint_eq(tfa_child_env_size(&ce, bare), 0);
}
END_TEST

START_TEST(same_file_by_another_name)
{
	char dir[] = "/tmp/check_child_env.XXXXXX", file[PATH_MAX], link[PATH_MAX], entry[PATH_MAX + 64];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/libtfalloc.so", dir);
	snprintf(link, sizeof(link), "%s/link.so", dir);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_int_eq(symlink(file, link), 0);
	snprintf(entry, sizeof(entry), "LD_PRELOAD=/usr/lib/other.so %s", link);
	char **env = ENV(entry);
	tfa_child_env_t ce;

	ck_assert(tfa_child_env_keep(&ce, env, file, copy_str));
	ck_assert_str_eq(ce.preload, link);
	unlink(link);
	unlink(file);
	rmdir(dir);
}
END_TEST

START_TEST(nothing_missing_nothing_added)
{
	tfa_child_env_t ce;

	keep_started(&ce);
	ck_assert_uint_eq(tfa_child_env_size(&ce, STARTED), 0);
	/* The variables set otherwise by the program stay as it set them. */
	char **own = ENV("TFALLOC_QUIET=0", "LD_PRELOAD=/usr/lib/x.so " SELF, "TFALLOC_OUTPUT=/elsewhere");
	ck_assert_uint_eq(tfa_child_env_size(&ce, own), 0);
}
END_TEST

START_TEST(empty_environment)
{
	tfa_child_env_t ce;
	char **empty = make_env((const char *const[]){ NULL });
	char **exec_envp, *got[16];

	keep_started(&ce);
	ck_assert_uint_eq(round_trip(&ce, empty, &exec_envp, got, 16), 0);
	ck_assert_ptr_nonnull(exec_envp);
	ck_assert_str_eq(lookup(exec_envp, "LD_PRELOAD"), SELF);
	ck_assert_str_eq(lookup(exec_envp, "TFALLOC_OUTPUT"), "/tmp/out");
	ck_assert_str_eq(lookup(exec_envp, "TFALLOC_QUIET"), "1");
	ck_assert_str_eq(lookup(exec_envp, TFA_CHILD_ENV_INJECTED), "LD_PRELOAD,TFALLOC_OUTPUT,TFALLOC_QUIET");
}
END_TEST

START_TEST(their_preload_kept_after_ours)
{
	tfa_child_env_t ce;
	char **env = ENV("A=1", "LD_PRELOAD=/usr/lib/faketime.so", "B=2");
	char **exec_envp, *got[16];

	keep_started(&ce);
	ck_assert_uint_eq(round_trip(&ce, env, &exec_envp, got, 16), 3);
	ck_assert_str_eq(lookup(exec_envp, "LD_PRELOAD"), SELF ":/usr/lib/faketime.so");
	/* In place of theirs: the order of the other entries is kept. */
	ck_assert_str_eq(exec_envp[0], "A=1");
	ck_assert_str_eq(exec_envp[1], "LD_PRELOAD=" SELF ":/usr/lib/faketime.so");
	ck_assert_str_eq(exec_envp[2], "B=2");
	check_same(got, env);
}
END_TEST

START_TEST(their_empty_preload)
{
	tfa_child_env_t ce;
	char **env = ENV("LD_PRELOAD=", "TFALLOC_QUIET=0");
	char **exec_envp, *got[16];

	keep_started(&ce);
	ck_assert_uint_eq(round_trip(&ce, env, &exec_envp, got, 16), 2);
	ck_assert_str_eq(lookup(exec_envp, "LD_PRELOAD"), SELF);
	ck_assert_str_eq(lookup(exec_envp, "TFALLOC_QUIET"), "0");
	ck_assert_str_eq(lookup(exec_envp, TFA_CHILD_ENV_INJECTED), "LD_PRELOAD:26,TFALLOC_OUTPUT");
	check_same(got, env);
}
END_TEST

START_TEST(only_vars_missing)
{
	tfa_child_env_t ce;
	char **env = ENV("LD_PRELOAD=" SELF, "X=y");
	char **exec_envp, *got[16];

	keep_started(&ce);
	ck_assert_uint_eq(round_trip(&ce, env, &exec_envp, got, 16), 2);
	ck_assert_str_eq(lookup(exec_envp, "LD_PRELOAD"), SELF);
	ck_assert_str_eq(lookup(exec_envp, TFA_CHILD_ENV_INJECTED), "TFALLOC_OUTPUT,TFALLOC_QUIET");
	check_same(got, env);
}
END_TEST

START_TEST(stale_injected_replaced)
{
	tfa_child_env_t ce;
	char **env = ENV("TFALLOC_INJECTED=TFALLOC_OUTPUT", "X=y");
	char **exec_envp, *got[16];

	keep_started(&ce);
	round_trip(&ce, env, &exec_envp, got, 16);
	size_t injected = 0;
	for (size_t i = 0; exec_envp[i] != NULL; i++)
		injected += strncmp(exec_envp[i], TFA_CHILD_ENV_INJECTED "=", sizeof(TFA_CHILD_ENV_INJECTED)) == 0;
	ck_assert_uint_eq(injected, 1);
	char **want = ENV("X=y");
	check_same(got, want);
}
END_TEST

START_TEST(take_back_without_injected)
{
	char **env = ENV("LD_PRELOAD=" SELF, "TFALLOC_QUIET=1");

	ck_assert_int_eq(tfa_child_env_take_back(env), 0);
	ck_assert_str_eq(env[0], "LD_PRELOAD=" SELF);
	ck_assert_str_eq(env[1], "TFALLOC_QUIET=1");
}
END_TEST

START_TEST(take_back_ignores_bad_lists)
{
	/* A cut longer than the value, names that are not ours, a missing entry: nothing else changes. */
	char **env = ENV("LD_PRELOAD=/x.so", "PATH=/bin", "TFALLOC_INJECTED=LD_PRELOAD:99,PATH,TFALLOC_NONE,,");

	tfa_child_env_take_back(env);
	ck_assert_str_eq(env[0], "LD_PRELOAD=/x.so");
	ck_assert_str_eq(env[1], "PATH=/bin");
	ck_assert_ptr_null(env[2]);
}
END_TEST

START_TEST(small_buffer_refused)
{
	tfa_child_env_t ce;
	char **empty = make_env((const char *const[]){ NULL });
	static char buf[4096] __attribute__((aligned(8)));

	keep_started(&ce);
	size_t need = tfa_child_env_size(&ce, empty);
	ck_assert_uint_gt(need, 0);
	ck_assert_ptr_null(tfa_child_env_build(&ce, empty, buf, need - 1));
	ck_assert_ptr_nonnull(tfa_child_env_build(&ce, empty, buf, need));
}
END_TEST

/*
 * A hand-off (core/handoff.h) is added to the exec's environment like a
 * missing variable, named in TFALLOC_INJECTED, and taken back by the new
 * program; a TFALLOC_HANDOFF in the environment the process started with is
 * never kept (it was that exec's, with that exec's descriptors).
 */
START_TEST(handoff_added_and_taken_back)
{
	tfa_child_env_t ce;
	char **started = ENV("LD_PRELOAD=" SELF, "TFALLOC_OUTPUT=/tmp/out", "TFALLOC_HANDOFF=u:1027:5:9");

	ck_assert(tfa_child_env_keep(&ce, started, SELF, copy_str));
	ck_assert_uint_eq(ce.nvars, 1);
	ck_assert_str_eq(ce.vars[0], "TFALLOC_OUTPUT=/tmp/out");
	char var[] = "TFALLOC_HANDOFF=u:1027:66:77,l:1026:66:78";
	ce.handoff = var;
	/* Nothing else missing: the hand-off alone makes a new environment. */
	char **envp = ENV("PATH=/usr/bin", "LD_PRELOAD=" SELF, "TFALLOC_OUTPUT=/tmp/out");
	char **exec_envp, *out[16];
	size_t n = round_trip(&ce, envp, &exec_envp, out, 16);
	ck_assert_ptr_nonnull(exec_envp);
	ck_assert_str_eq(lookup(exec_envp, "TFALLOC_HANDOFF"), "u:1027:66:77,l:1026:66:78");
	ck_assert_str_eq(lookup(exec_envp, "TFALLOC_INJECTED"), "TFALLOC_HANDOFF");
	ck_assert_uint_eq(n, 3);
	check_same(out, envp);
	/* With the variables missing too: all of them added, all taken back. */
	char **bare = ENV("PATH=/usr/bin");
	n = round_trip(&ce, bare, &exec_envp, out, 16);
	ck_assert_str_eq(lookup(exec_envp, "TFALLOC_HANDOFF"), "u:1027:66:77,l:1026:66:78");
	ck_assert_str_eq(lookup(exec_envp, "TFALLOC_OUTPUT"), "/tmp/out");
	ck_assert_uint_eq(n, 1);
	check_same(out, bare);
	/* Without a hand-off, nothing is missing. */
	ce.handoff = NULL;
	ck_assert_uint_eq(tfa_child_env_size(&ce, envp), 0);
}
END_TEST

START_TEST(valgrind_tool_without_shim)
{
	tfa_child_env_t ce;
	static char buf[4096] __attribute__((aligned(8)));

	keep_started(&ce);
	char **tool = ENV("VALGRIND_LAUNCHER=/usr/bin/valgrind.bin", "LD_PRELOAD=/vg/core.so:" SELF " /vg/mc.so", "X=1");
	ck_assert(tfa_child_env_is_valgrind(tool));
	ck_assert(!tfa_child_env_is_valgrind(STARTED));
	size_t need = tfa_child_env_size_without(&ce, tool);
	ck_assert_uint_gt(need, 0);
	char **out = tfa_child_env_build_without(&ce, tool, buf, need);
	ck_assert_ptr_nonnull(out);
	char **want = ENV("VALGRIND_LAUNCHER=/usr/bin/valgrind.bin", "LD_PRELOAD=/vg/core.so:/vg/mc.so", "X=1");
	check_same(out, want);

	/* The shim alone: no LD_PRELOAD at all. */
	char **alone = ENV("A=1", "LD_PRELOAD=" SELF, "VALGRIND_LAUNCHER=x");
	out = tfa_child_env_build_without(&ce, alone, buf, tfa_child_env_size_without(&ce, alone));
	ck_assert_ptr_nonnull(out);
	char **want_alone = ENV("A=1", "VALGRIND_LAUNCHER=x");
	check_same(out, want_alone);

	/* Not named: nothing to take out. */
	char **other = ENV("LD_PRELOAD=/vg/core.so", "VALGRIND_LAUNCHER=x");
	ck_assert_uint_eq(tfa_child_env_size_without(&ce, other), 0);
	ck_assert_ptr_null(tfa_child_env_build_without(&ce, other, buf, sizeof(buf)));
}
END_TEST

START_TEST(sanitizer_runtime_first)
{
	/* This test's own binary: gcc links libasan.so into the ASan build's. */
#if defined(__SANITIZE_ADDRESS__)
	bool sanitized = true;
#else
	bool sanitized = false;
#endif
	char self[PATH_MAX], dir[] = "/tmp/check_child_env.XXXXXX", script[PATH_MAX], text[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	ck_assert_int_gt(n, 0);
	self[n] = '\0';
	ck_assert_int_eq(tfa_child_env_path_needs_first(AT_FDCWD, self), sanitized);
	ck_assert(!tfa_child_env_path_needs_first(AT_FDCWD, "/bin/sh"));
	ck_assert(!tfa_child_env_path_needs_first(AT_FDCWD, "/nonexistent/program"));
	ck_assert(!tfa_child_env_path_needs_first(AT_FDCWD, "/etc/passwd"));
	/* A script: its interpreter decides. */
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(script, sizeof(script), "%s/script", dir);
	snprintf(text, sizeof(text), "#! %s -x\necho\n", self);
	FILE *f = fopen(script, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	ck_assert_int_eq(tfa_child_env_path_needs_first(AT_FDCWD, script), sanitized);
	unlink(script);
	rmdir(dir);
}
END_TEST

static Suite *
child_env_suite(void)
{
	Suite *s = suite_create("child_env");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, keeps_preload_element_and_vars);
	tcase_add_test(tc, not_loaded_by_preload);
	tcase_add_test(tc, same_file_by_another_name);
	tcase_add_test(tc, nothing_missing_nothing_added);
	tcase_add_test(tc, empty_environment);
	tcase_add_test(tc, their_preload_kept_after_ours);
	tcase_add_test(tc, their_empty_preload);
	tcase_add_test(tc, only_vars_missing);
	tcase_add_test(tc, stale_injected_replaced);
	tcase_add_test(tc, take_back_without_injected);
	tcase_add_test(tc, take_back_ignores_bad_lists);
	tcase_add_test(tc, small_buffer_refused);
	tcase_add_test(tc, handoff_added_and_taken_back);
	tcase_add_test(tc, valgrind_tool_without_shim);
	tcase_add_test(tc, sanitizer_runtime_first);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(child_env_suite());

	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
