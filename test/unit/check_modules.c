/* SPDX-License-Identifier: MIT */
/*
 * core/modules.h: the executable, libc and a dlopen'ed library are found with
 * their ranges and build ids, and a library stays in the map after dlclose.
 */
#include "core/modules.h"

#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>

static const tfa_module_t *
find_module(const char *path_part)
{
	for (const tfa_module_t *m = tfa_modules_first(); m != NULL; m = m->next)
		if (strstr(m->path, path_part) != NULL)
			return m;
	return NULL;
}

START_TEST(test_modules_executable_and_libc)
{
	ck_assert(tfa_modules_refresh(0));
	ck_assert_uint_ge(tfa_modules_count(), 2);

	/* This test's own code and libc's. */
	ck_assert(tfa_modules_covers((uintptr_t)&find_module));
	ck_assert(tfa_modules_covers((uintptr_t)&getpid));
	ck_assert(!tfa_modules_covers(0x1000));
	ck_assert(!tfa_modules_covers((uintptr_t)1 << 46));

	const tfa_module_t *exe = find_module("check_modules");
	ck_assert_ptr_nonnull(exe);
	ck_assert_uint_le(exe->start, (uintptr_t)&find_module);
	ck_assert_uint_gt(exe->end, (uintptr_t)&find_module);

	const tfa_module_t *libc = find_module("libc.so");
	ck_assert_ptr_nonnull(libc);
	ck_assert_uint_le(libc->start, (uintptr_t)&getpid);
	ck_assert_uint_gt(libc->end, (uintptr_t)&getpid);
	/* Debian builds every library with a 20-byte (SHA-1) GNU build id. */
	ck_assert_uint_eq(libc->build_id_len, 20);

	/* A second refresh adds nothing. */
	uint32_t n = tfa_modules_count();
	ck_assert(tfa_modules_refresh(0));
	ck_assert_uint_eq(tfa_modules_count(), n);
}
END_TEST

START_TEST(test_modules_dlclose_keeps_entry)
{
	ck_assert(tfa_modules_refresh(0));
	ck_assert_ptr_null(find_module("libbz2"));
	ck_assert(!tfa_modules_changed());
	void *h = dlopen("libbz2.so.1.0", RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "dlopen: %s", dlerror());
	ck_assert(tfa_modules_changed());
	void *fn = dlsym(h, "BZ2_bzlibVersion");
	ck_assert_ptr_nonnull(fn);
	/* Not known until a refresh. */
	ck_assert(!tfa_modules_covers((uintptr_t)fn));
	ck_assert(tfa_modules_refresh(7));
	ck_assert(!tfa_modules_changed());
	ck_assert(tfa_modules_covers((uintptr_t)fn));
	const tfa_module_t *m = find_module("libbz2");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->seen_at, 7);
	ck_assert(!m->gone);
	uint64_t start = m->start, end = m->end, bias = m->bias;
	uint32_t n = tfa_modules_count();
	ck_assert_uint_eq(dlclose(h), 0);
	ck_assert(tfa_modules_changed());
	ck_assert(tfa_modules_refresh(9));
	/* Unloaded, and still in the map with what it was, and since when it is gone. */
	m = find_module("libbz2");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->start, start);
	ck_assert_uint_eq(m->end, end);
	ck_assert_uint_eq(m->bias, bias);
	ck_assert(m->gone);
	ck_assert_uint_eq(m->gone_at, 9);
	ck_assert(!tfa_modules_covers((uintptr_t)fn));
	ck_assert_uint_eq(tfa_modules_count(), n);

	/* Loaded again: an entry of its own, seen from the new stamp on. */
	h = dlopen("libbz2.so.1.0", RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "dlopen: %s", dlerror());
	ck_assert(tfa_modules_refresh(11));
	ck_assert_uint_eq(tfa_modules_count(), n + 1);
	const tfa_module_t *again = NULL;
	for (const tfa_module_t *e = tfa_modules_first(); e != NULL; e = e->next)
		if (strstr(e->path, "libbz2") != NULL && !e->gone)
			again = e;
	ck_assert_ptr_nonnull(again);
	ck_assert_ptr_ne(again, m);
	ck_assert_uint_eq(again->seen_at, 11);
	ck_assert(tfa_modules_covers((uintptr_t)dlsym(h, "BZ2_bzlibVersion")));
	ck_assert_uint_eq(dlclose(h), 0);
}
END_TEST

static Suite *
modules_suite(void)
{
	Suite *s = suite_create("modules");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_modules_executable_and_libc);
	tcase_add_test(tc, test_modules_dlclose_keeps_entry);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(modules_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
