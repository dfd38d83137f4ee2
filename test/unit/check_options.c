/* SPDX-License-Identifier: MIT */
/*
 * core/options.h: the value parsers of every type, and tfa_options_parse over
 * fake environments: values and states, one complaint per bad value or
 * unknown variable, everything else ignored.
 */
#include "core/options.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsers ------------------------------------------------------------------------------ */

static const struct {
	const char *in;
	int ret;
	uint64_t value;
} size_table[] = {
	{ "0", 0, 0 },
	{ "1", 0, 1 },
	{ "4096", 0, 4096 },
	{ "4K", 0, 4096 },
	{ "4k", 0, 4096 },
	{ "4KiB", 0, 4096 },
	{ "4kib", 0, 4096 },
	{ "4KB", 0, 4096 },
	{ "1M", 0, UINT64_C(1) << 20 },
	{ "1m", 0, UINT64_C(1) << 20 },
	{ "3MiB", 0, UINT64_C(3) << 20 },
	{ "2G", 0, UINT64_C(2) << 30 },
	{ "1T", 0, UINT64_C(1) << 40 },
	{ "0K", 0, 0 },
	{ "007", 0, 7 },
	{ "18446744073709551615", 0, UINT64_MAX },
	{ "16777215T", 0, UINT64_C(16777215) << 40 },
	{ "18014398509481983K", 0, UINT64_C(18014398509481983) << 10 },
	{ "99999999999999999999", -ERANGE, 0 },
	{ "18446744073709551616", -ERANGE, 0 },
	{ "18014398509481984K", -ERANGE, 0 },
	{ "16777216T", -ERANGE, 0 },
	{ "", -EINVAL, 0 },
	{ "-1", -EINVAL, 0 },
	{ "+1", -EINVAL, 0 },
	{ "12Q", -EINVAL, 0 },
	{ "K", -EINVAL, 0 },
	{ " 5", -EINVAL, 0 },
	{ "5 ", -EINVAL, 0 },
	{ "4 K", -EINVAL, 0 },
	{ "4Kx", -EINVAL, 0 },
	{ "4KiBB", -EINVAL, 0 },
	{ "4Ki", -EINVAL, 0 },
	{ "1.5M", -EINVAL, 0 },
	{ "0x10", -EINVAL, 0 },
	{ "4KK", -EINVAL, 0 },
};

START_TEST(test_options_parse_size)
{
	for (size_t i = 0; i < TFA_ARRAY_SIZE(size_table); i++) {
		uint64_t v = 0xabababab;
		int r = tfa_parse_size(size_table[i].in, &v);
		ck_assert_msg(r == size_table[i].ret, "tfa_parse_size(\"%s\") returned %d, want %d",
		              size_table[i].in, r, size_table[i].ret);
		if (r == 0)
			ck_assert_msg(v == size_table[i].value,
			              "tfa_parse_size(\"%s\") = %llu, want %llu", size_table[i].in,
			              (unsigned long long)v,
			              (unsigned long long)size_table[i].value);
	}
	uint64_t v;
	ck_assert_int_eq(tfa_parse_size(NULL, &v), -EINVAL);
}
END_TEST

START_TEST(test_options_parse_bool)
{
	static const char *const yes[] = { "1", "true", "TRUE", "True", "yes", "YES", "on", "On" };
	static const char *const no[] = { "0", "false", "FALSE", "no", "No", "off", "OFF" };
	static const char *const bad[] = { "",  "2", "maybe", "truex", " 1",   "1 ", "y",
		                           "n", "t", "f",     "10",    "yess", "o",  "-1" };
	bool b;

	for (size_t i = 0; i < TFA_ARRAY_SIZE(yes); i++) {
		b = false;
		ck_assert_msg(tfa_parse_bool(yes[i], &b) == 0 && b, "\"%s\" is true", yes[i]);
	}
	for (size_t i = 0; i < TFA_ARRAY_SIZE(no); i++) {
		b = true;
		ck_assert_msg(tfa_parse_bool(no[i], &b) == 0 && !b, "\"%s\" is false", no[i]);
	}
	for (size_t i = 0; i < TFA_ARRAY_SIZE(bad); i++)
		ck_assert_msg(tfa_parse_bool(bad[i], &b) == -EINVAL, "\"%s\" is not a boolean",
		              bad[i]);
	ck_assert_int_eq(tfa_parse_bool(NULL, &b), -EINVAL);
}
END_TEST

START_TEST(test_options_parse_uint)
{
	uint64_t v;

	ck_assert_int_eq(tfa_parse_uint("0", &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(tfa_parse_uint("20", &v), 0);
	ck_assert_uint_eq(v, 20);
	ck_assert_int_eq(tfa_parse_uint("18446744073709551615", &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert_int_eq(tfa_parse_uint("18446744073709551616", &v), -ERANGE);
	ck_assert_int_eq(tfa_parse_uint("99999999999999999999999", &v), -ERANGE);
	ck_assert_int_eq(tfa_parse_uint("", &v), -EINVAL);
	ck_assert_int_eq(tfa_parse_uint("-1", &v), -EINVAL);
	ck_assert_int_eq(tfa_parse_uint("1K", &v), -EINVAL);
	ck_assert_int_eq(tfa_parse_uint(" 1", &v), -EINVAL);
	ck_assert_int_eq(tfa_parse_uint("1 ", &v), -EINVAL);
	ck_assert_int_eq(tfa_parse_uint("0x10", &v), -EINVAL);
	ck_assert_int_eq(tfa_parse_uint("abc", &v), -EINVAL);
	ck_assert_int_eq(tfa_parse_uint(NULL, &v), -EINVAL);
}
END_TEST

/* ---- tfa_options_parse -------------------------------------------------------------------- */

/* An environment entry: environ is char *const *, our literals are const. */
#define E(s) ((char *)(uintptr_t)(s))

#define MAX_LINES 16

struct diag_log {
	int n;
	char lines[MAX_LINES][1024];
};

static struct diag_log diags;

static void
collect(void *ctx, const char *msg)
{
	struct diag_log *d = ctx;

	ck_assert_ptr_eq(d, &diags);
	ck_assert_ptr_null(strchr(msg, '\n'));
	if (d->n < MAX_LINES)
		strncpy(d->lines[d->n], msg, sizeof(d->lines[0]) - 1);
	d->n++;
}

static void
reset_diags(void)
{
	memset(&diags, 0, sizeof(diags));
}

static tfa_options_t opts;

static int
parse(char **envp)
{
	reset_diags();
	memset(&opts, 0x5a, sizeof(opts));
	return tfa_options_parse(envp, &opts, collect, &diags);
}

static void
expect_defaults_except(const char *which)
{
	if (strcmp(which, "allocator") != 0) {
		ck_assert_str_eq(opts.allocator, "");
		ck_assert_int_eq(opts.allocator_state, TFA_OPT_DEFAULT);
	}
	if (strcmp(which, "limit") != 0) {
		ck_assert_uint_eq(opts.limit, 0);
		ck_assert_int_eq(opts.limit_state, TFA_OPT_DEFAULT);
	}
	if (strcmp(which, "output") != 0) {
		ck_assert_str_eq(opts.output, "");
		ck_assert_int_eq(opts.output_state, TFA_OPT_DEFAULT);
	}
	if (strcmp(which, "quiet") != 0) {
		ck_assert(!opts.quiet);
		ck_assert_int_eq(opts.quiet_state, TFA_OPT_DEFAULT);
	}
	if (strcmp(which, "profile") != 0) {
		ck_assert(opts.profile);
		ck_assert_int_eq(opts.profile_state, TFA_OPT_DEFAULT);
	}
	if (strcmp(which, "abort_on_error") != 0) {
		ck_assert(!opts.abort_on_error);
		ck_assert_int_eq(opts.abort_on_error_state, TFA_OPT_DEFAULT);
	}
	if (strcmp(which, "max_errors") != 0) {
		ck_assert_uint_eq(opts.max_errors, 20);
		ck_assert_int_eq(opts.max_errors_state, TFA_OPT_DEFAULT);
	}
}

START_TEST(test_options_defaults)
{
	memset(&opts, 0x5a, sizeof(opts));
	tfa_options_defaults(&opts);
	expect_defaults_except("");

	ck_assert_int_eq(parse(NULL), 0);
	ck_assert_int_eq(diags.n, 0);
	expect_defaults_except("");

	char *empty[] = { NULL };
	ck_assert_int_eq(parse(empty), 0);
	expect_defaults_except("");
}
END_TEST

/* A bad value after a good one of the same variable: the default, as its line says (fuzz_options). */
START_TEST(test_options_bad_value_after_good)
{
	static char longv[TFA_OPT_STR_MAX + 32];
	memcpy(longv, "TFALLOC_OUTPUT=", 15);
	memset(longv + 15, 'x', TFA_OPT_STR_MAX);
	char *envp[] = {
		E("TFALLOC_QUIET=yes"), E("TFALLOC_QUIET=bogus"),
		E("TFALLOC_LIMIT=4K"), E("TFALLOC_LIMIT=4Q"),
		E("TFALLOC_MAX_ERRORS=5"), E("TFALLOC_MAX_ERRORS=-1"),
		E("TFALLOC_OUTPUT=/tmp"), longv,
		NULL,
	};

	ck_assert_int_eq(parse(envp), 4);
	expect_defaults_except("");
}
END_TEST

START_TEST(test_options_parse_all_set)
{
	char *envp[] = {
		E("PATH=/usr/bin:/bin"),
		E("TFALLOC_ALLOCATOR=glibc"),
		E("TFALLOC_LIMIT=4K"),
		E("HOME=/root"),
		E("TFALLOC_OUTPUT=/tmp/profiles"),
		E("TFALLOC_QUIET=yes"),
		E("TFALLOC_PROFILE=0"),
		E("TFALLOC_ABORT_ON_ERROR=on"),
		E("TFALLOC_MAX_ERRORS=5"),
		NULL,
	};

	ck_assert_int_eq(parse(envp), 0);
	ck_assert_int_eq(diags.n, 0);
	ck_assert_str_eq(opts.allocator, "glibc");
	ck_assert_int_eq(opts.allocator_state, TFA_OPT_SET);
	ck_assert_uint_eq(opts.limit, 4096);
	ck_assert_int_eq(opts.limit_state, TFA_OPT_SET);
	ck_assert_str_eq(opts.output, "/tmp/profiles");
	ck_assert_int_eq(opts.output_state, TFA_OPT_SET);
	ck_assert(opts.quiet);
	ck_assert_int_eq(opts.quiet_state, TFA_OPT_SET);
	ck_assert(!opts.profile);
	ck_assert_int_eq(opts.profile_state, TFA_OPT_SET);
	ck_assert(opts.abort_on_error);
	ck_assert_int_eq(opts.abort_on_error_state, TFA_OPT_SET);
	ck_assert_uint_eq(opts.max_errors, 5);
	ck_assert_int_eq(opts.max_errors_state, TFA_OPT_SET);
}
END_TEST

START_TEST(test_options_set_to_default_value)
{
	/* Set to the value the default has: still SET (the user said so). */
	char *envp[] = { E("TFALLOC_MAX_ERRORS=20"), E("TFALLOC_PROFILE=1"),
		         E("TFALLOC_ALLOCATOR="), NULL };

	ck_assert_int_eq(parse(envp), 0);
	ck_assert_uint_eq(opts.max_errors, 20);
	ck_assert_int_eq(opts.max_errors_state, TFA_OPT_SET);
	ck_assert(opts.profile);
	ck_assert_int_eq(opts.profile_state, TFA_OPT_SET);
	ck_assert_str_eq(opts.allocator, "");
	ck_assert_int_eq(opts.allocator_state, TFA_OPT_SET);
}
END_TEST

/* One bad value per run: the default stays, one line names the variable. */
static const struct {
	const char *entry;
	const char *variable;
	const char *field;
} bad_values[] = {
	{ "TFALLOC_LIMIT=12Q", "TFALLOC_LIMIT", "limit" },
	{ "TFALLOC_LIMIT=", "TFALLOC_LIMIT", "limit" },
	{ "TFALLOC_LIMIT=99999999999999999999", "TFALLOC_LIMIT", "limit" },
	{ "TFALLOC_QUIET=maybe", "TFALLOC_QUIET", "quiet" },
	{ "TFALLOC_PROFILE=", "TFALLOC_PROFILE", "profile" },
	{ "TFALLOC_ABORT_ON_ERROR=2", "TFALLOC_ABORT_ON_ERROR", "abort_on_error" },
	{ "TFALLOC_MAX_ERRORS=-3", "TFALLOC_MAX_ERRORS", "max_errors" },
	{ "TFALLOC_MAX_ERRORS=1K", "TFALLOC_MAX_ERRORS", "max_errors" },
};

START_TEST(test_options_bad_value)
{
	char *envp[] = { E("PATH=/bin"), E(bad_values[_i].entry), NULL };

	ck_assert_int_eq(parse(envp), 1);
	ck_assert_int_eq(diags.n, 1);
	ck_assert_msg(strstr(diags.lines[0], bad_values[_i].variable) != NULL,
	              "\"%s\" does not name %s", diags.lines[0], bad_values[_i].variable);
	expect_defaults_except("");
}
END_TEST

START_TEST(test_options_bad_value_keeps_others)
{
	char *envp[] = { E("TFALLOC_QUIET=1"), E("TFALLOC_LIMIT=lots"), E("TFALLOC_MAX_ERRORS=3"),
		         NULL };

	ck_assert_int_eq(parse(envp), 1);
	ck_assert_int_eq(diags.n, 1);
	ck_assert_ptr_nonnull(strstr(diags.lines[0], "TFALLOC_LIMIT"));
	ck_assert(opts.quiet);
	ck_assert_int_eq(opts.quiet_state, TFA_OPT_SET);
	ck_assert_uint_eq(opts.max_errors, 3);
	ck_assert_uint_eq(opts.limit, 0);
	ck_assert_int_eq(opts.limit_state, TFA_OPT_DEFAULT);
}
END_TEST

START_TEST(test_options_unknown_variable)
{
	char *envp[] = { E("TFALLOC_FOO=1"), NULL };

	ck_assert_int_eq(parse(envp), 1);
	ck_assert_int_eq(diags.n, 1);
	ck_assert_ptr_nonnull(strstr(diags.lines[0], "TFALLOC_FOO"));
	expect_defaults_except("");

	/* A near miss of a real name is unknown too; so is one without '='. */
	char *envp2[] = { E("TFALLOC_QUIETT=1"), E("TFALLOC_LIMITS=1"), E("TFALLOC_BAR"), NULL };
	ck_assert_int_eq(parse(envp2), 3);
	ck_assert_int_eq(diags.n, 3);
	ck_assert_ptr_nonnull(strstr(diags.lines[0], "TFALLOC_QUIETT"));
	ck_assert_ptr_nonnull(strstr(diags.lines[1], "TFALLOC_LIMITS"));
	ck_assert_ptr_nonnull(strstr(diags.lines[2], "TFALLOC_BAR"));
	expect_defaults_except("");
}
END_TEST

START_TEST(test_options_others_ignored)
{
	char *envp[] = {
		E("TFALLOCX=1"),
		E("TFALLOC=1"),
		E("MALLOC_CONF=prof:true"),
		E("LD_PRELOAD=/x/libtfalloc.so"),
		E("XTFALLOC_QUIET=1"),
		E("=weird"),
		E(""),
		E("tfalloc_quiet=1"),
		NULL,
	};

	ck_assert_int_eq(parse(envp), 0);
	ck_assert_int_eq(diags.n, 0);
	expect_defaults_except("");
}
END_TEST

START_TEST(test_options_tool_variable_silent)
{
	char *envp[] = { E("TFALLOC_LIBRARY=/opt/tfalloc/lib/libtfalloc.so"), E("TFALLOC_QUIET=1"),
		         NULL };

	ck_assert_int_eq(parse(envp), 0);
	ck_assert_int_eq(diags.n, 0);
	ck_assert(opts.quiet);
	expect_defaults_except("quiet");
}
END_TEST

START_TEST(test_options_overlong_string)
{
	static char entry[sizeof("TFALLOC_OUTPUT=") + TFA_OPT_STR_MAX + 8];
	char *envp[] = { entry, NULL };
	size_t prefix = strlen("TFALLOC_OUTPUT=");

	/* TFA_OPT_STR_MAX bytes: one too many. */
	memcpy(entry, "TFALLOC_OUTPUT=", prefix);
	memset(entry + prefix, 'd', TFA_OPT_STR_MAX);
	entry[prefix + TFA_OPT_STR_MAX] = '\0';
	ck_assert_int_eq(parse(envp), 1);
	ck_assert_int_eq(diags.n, 1);
	ck_assert_ptr_nonnull(strstr(diags.lines[0], "TFALLOC_OUTPUT"));
	ck_assert_str_eq(opts.output, "");
	ck_assert_int_eq(opts.output_state, TFA_OPT_DEFAULT);
	expect_defaults_except("");

	/* TFA_OPT_STR_MAX - 1 bytes: the longest accepted. */
	entry[prefix + TFA_OPT_STR_MAX - 1] = '\0';
	ck_assert_int_eq(parse(envp), 0);
	ck_assert_int_eq(diags.n, 0);
	ck_assert_uint_eq(strlen(opts.output), TFA_OPT_STR_MAX - 1);
	ck_assert_int_eq(opts.output_state, TFA_OPT_SET);
	ck_assert_int_eq(opts.output[0], 'd');
}
END_TEST

START_TEST(test_options_null_diag)
{
	char *envp[] = { E("TFALLOC_FOO=1"), E("TFALLOC_LIMIT=x"), E("TFALLOC_QUIET=1"), NULL };

	/* Without a diag function the complaints are still counted. */
	ck_assert_int_eq(tfa_options_parse(envp, &opts, NULL, NULL), 2);
	ck_assert(opts.quiet);
	ck_assert_uint_eq(opts.limit, 0);
}
END_TEST

/* ---- describe ----------------------------------------------------------------------------- */

static int describe_lines;
static bool describe_seen[20];

static void
describe_cb(void *ctx, const char *line)
{
	static const char *const names[] = { "TFALLOC_ALLOCATOR ", "TFALLOC_LIMIT ",
		                             "TFALLOC_OUTPUT ",    "TFALLOC_QUIET ",
		                             "TFALLOC_PROFILE ",   "TFALLOC_ABORT_ON_ERROR ",
		                             "TFALLOC_MAX_ERRORS ", "TFALLOC_CATCH_SIGNALS ",
		                             "TFALLOC_CONTROL_SIGNAL ",
		                             "TFALLOC_STACKS ",     "TFALLOC_STACK_DEPTH ",
		                             "TFALLOC_SAMPLE_BYTES ", "TFALLOC_MAX_STACKS ",
		                             "TFALLOC_FLUSH_INTERVAL_MS ", "TFALLOC_LEAK_CLASSES ",
		                             "TFALLOC_TAG_BY ",     "TFALLOC_TRACK ",
		                             "TFALLOC_STACK_CACHE ", "TFALLOC_UNDER_VALGRIND ",
		                             "TFALLOC_LOG " };

	ck_assert_ptr_eq(ctx, &describe_lines);
	ck_assert_msg(strncmp(line, "TFALLOC_", 8) == 0, "line \"%s\"", line);
	ck_assert_ptr_null(strchr(line, '%'));
	for (size_t i = 0; i < TFA_ARRAY_SIZE(names); i++)
		if (strncmp(line, names[i], strlen(names[i])) == 0)
			describe_seen[i] = true;
	describe_lines++;
}

START_TEST(test_options_describe)
{
	tfa_options_describe(describe_cb, &describe_lines);
	ck_assert_int_eq(describe_lines, 22);
	for (size_t i = 0; i < TFA_ARRAY_SIZE(describe_seen); i++)
		ck_assert_msg(describe_seen[i], "option %zu not described", i);
}
END_TEST

static Suite *
options_suite(void)
{
	Suite *s = suite_create("options");
	TCase *tc;

	tc = tcase_create("parsers");
	tcase_add_test(tc, test_options_parse_size);
	tcase_add_test(tc, test_options_parse_bool);
	tcase_add_test(tc, test_options_parse_uint);
	suite_add_tcase(s, tc);

	tc = tcase_create("environment");
	tcase_add_test(tc, test_options_defaults);
	tcase_add_test(tc, test_options_parse_all_set);
	tcase_add_test(tc, test_options_bad_value_after_good);
	tcase_add_test(tc, test_options_set_to_default_value);
	tcase_add_loop_test(tc, test_options_bad_value, 0, (int)TFA_ARRAY_SIZE(bad_values));
	tcase_add_test(tc, test_options_bad_value_keeps_others);
	tcase_add_test(tc, test_options_unknown_variable);
	tcase_add_test(tc, test_options_others_ignored);
	tcase_add_test(tc, test_options_tool_variable_silent);
	tcase_add_test(tc, test_options_overlong_string);
	tcase_add_test(tc, test_options_null_diag);
	tcase_add_test(tc, test_options_describe);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(options_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
