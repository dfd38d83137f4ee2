/* SPDX-License-Identifier: MIT */
/*
 * core/arena.h: zeroed, 16-aligned, non-overlapping pieces; whole mappings;
 * strndup; the mapped-bytes figure; failure injection.
 */
#include "core/arena.h"

#include <check.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static void
teardown(void)
{
	tfa_arena_inject_failure(-1);
}

static bool
all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			return false;
	return true;
}

#define PIECES 600

START_TEST(test_arena_alloc_zeroed_aligned)
{
	static unsigned char *p[PIECES];
	static size_t n[PIECES];

	for (int i = 0; i < PIECES; i++) {
		n[i] = (size_t)(i % 300) + 1;
		p[i] = tfa_arena_alloc(n[i]);
		ck_assert_ptr_nonnull(p[i]);
		ck_assert_uint_eq((uintptr_t)p[i] % 16, 0);
		ck_assert_msg(all_zero(p[i], n[i]), "piece %d of %zu bytes not zeroed", i, n[i]);
		memset(p[i], (i % 250) + 1, n[i]);
	}
	/* No piece overlaps another: each still holds its own pattern. */
	for (int i = 0; i < PIECES; i++)
		for (size_t k = 0; k < n[i]; k++)
			if (p[i][k] != (unsigned char)((i % 250) + 1))
				ck_abort_msg("piece %d byte %zu overwritten", i, k);
}
END_TEST

START_TEST(test_arena_alloc_large)
{
	/* Pieces larger than a chunk's share get their own mapping. */
	static const size_t sizes[] = { 16 << 10, 64 << 10, (1 << 20) + 3, 8 << 20 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		unsigned char *p = tfa_arena_alloc(sizes[i]);
		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq((uintptr_t)p % 16, 0);
		ck_assert(all_zero(p, sizes[i]));
		memset(p, 0xff, sizes[i]);
	}
	/* A small piece after large ones is still zeroed. */
	unsigned char *q = tfa_arena_alloc(48);
	ck_assert_ptr_nonnull(q);
	ck_assert(all_zero(q, 48));
}
END_TEST

START_TEST(test_arena_map_unmap)
{
	size_t before = tfa_arena_mapped_bytes();
	unsigned char *p = tfa_arena_map(1 << 20);

	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq((uintptr_t)p % 4096, 0);
	ck_assert(all_zero(p, 1 << 20));
	memset(p, 1, 1 << 20);
	ck_assert_uint_ge(tfa_arena_mapped_bytes(), before + (1 << 20));
	tfa_arena_unmap(p, 1 << 20);
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), before);
	tfa_arena_unmap(NULL, 4096);
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), before);

	/* Pieces count in the overhead too. */
	ck_assert_ptr_nonnull(tfa_arena_alloc(100));
	ck_assert_uint_gt(tfa_arena_mapped_bytes(), before);
}
END_TEST

/* Pages of [p, p + n) that are resident now. */
static size_t
resident_pages(void *p, size_t n)
{
	unsigned char vec[1024];
	size_t pages = n / 4096, in = 0;

	ck_assert_uint_le(pages, sizeof(vec));
	ck_assert_int_eq(mincore(p, n, vec), 0);
	for (size_t i = 0; i < pages; i++)
		in += vec[i] & 1;
	return in;
}

/*
 * A filled mapping (a pointer-table shard being rebuilt, a stack index) has
 * its pages made when it is mapped: every page resident before a byte is
 * written, where a plain mapping has none; zeroed and counted all the same,
 * and failing under injection.  A mapping of 2 MiB and more (huge pages
 * asked for) too, where the kernel populates by madvise (Linux 5.14 on).
 */
START_TEST(test_arena_map_filled)
{
	size_t before = tfa_arena_mapped_bytes();
	unsigned char *plain = tfa_arena_map(64 << 10);
	unsigned char *filled = tfa_arena_map_filled(64 << 10);

	ck_assert_ptr_nonnull(plain);
	ck_assert_ptr_nonnull(filled);
	ck_assert_uint_eq(resident_pages(plain, 64 << 10), 0);
	ck_assert_uint_eq(resident_pages(filled, 64 << 10), 16);
	ck_assert(all_zero(filled, 64 << 10));
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), before + (128 << 10));
	tfa_arena_unmap(plain, 64 << 10);
	tfa_arena_unmap(filled, 64 << 10);

	unsigned char *big = tfa_arena_map_filled(4 << 20);
	ck_assert_ptr_nonnull(big);
#ifdef MADV_POPULATE_WRITE
	void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(probe, MAP_FAILED);
	if (madvise(probe, 4096, MADV_POPULATE_WRITE) == 0)
		ck_assert_uint_eq(resident_pages(big, 4 << 20), 1024);
	munmap(probe, 4096);
#endif
	ck_assert(all_zero(big, 4 << 20));
	tfa_arena_unmap(big, 4 << 20);
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), before);

	tfa_arena_inject_failure(0);
	ck_assert_ptr_null(tfa_arena_map_filled(4096));
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), before);
}
END_TEST

START_TEST(test_arena_strndup)
{
	char *s = tfa_arena_strndup("hello", 10);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, "hello");
	ck_assert_uint_eq((uintptr_t)s % 16, 0);

	char *t = tfa_arena_strndup("hello", 3);
	ck_assert_str_eq(t, "hel");
	char *e = tfa_arena_strndup("", 5);
	ck_assert_str_eq(e, "");
	char *z = tfa_arena_strndup("abc", 0);
	ck_assert_str_eq(z, "");
	ck_assert_str_eq(s, "hello"); /* untouched by the later copies */

	/* A string without a terminator within max is fine to copy. */
	char raw[4] = { 'w', 'x', 'y', 'z' };
	char *r = tfa_arena_strndup(raw, 4);
	ck_assert_str_eq(r, "wxyz");
}
END_TEST

START_TEST(test_arena_inject_failure)
{
	void *a, *b, *c;

	tfa_arena_inject_failure(2);
	a = tfa_arena_map(4096);
	b = tfa_arena_map(8192);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	size_t mapped = tfa_arena_mapped_bytes();
	c = tfa_arena_map(4096);
	ck_assert_ptr_null(c);
	/* It stays failing, and failures map nothing. */
	ck_assert_ptr_null(tfa_arena_map(4096));
	ck_assert_ptr_null(tfa_arena_map(1 << 20));
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), mapped);
	/* Large pieces come from map: they fail too. */
	ck_assert_ptr_null(tfa_arena_alloc(1 << 20));

	/* Off again: maps work. */
	tfa_arena_inject_failure(-1);
	c = tfa_arena_map(4096);
	ck_assert_ptr_nonnull(c);
	tfa_arena_unmap(a, 4096);
	tfa_arena_unmap(b, 8192);
	tfa_arena_unmap(c, 4096);

	/* 0: the very next map fails. */
	tfa_arena_inject_failure(0);
	ck_assert_ptr_null(tfa_arena_map(4096));
	tfa_arena_inject_failure(-1);
}
END_TEST

START_TEST(test_arena_alloc_fails_when_chunk_needed)
{
	/* Small pieces are carved from the current chunk until it runs out. */
	ck_assert_ptr_nonnull(tfa_arena_alloc(16));
	tfa_arena_inject_failure(0);
	void *p = NULL;
	size_t got = 0;
	for (int i = 0; i < 100000; i++) {
		p = tfa_arena_alloc(256);
		if (p == NULL)
			break;
		got++;
	}
	ck_assert_ptr_null(p);
	ck_assert_uint_lt(got, 100000);
	tfa_arena_inject_failure(-1);
	ck_assert_ptr_nonnull(tfa_arena_alloc(256));
}
END_TEST

static Suite *
arena_suite(void)
{
	Suite *s = suite_create("arena");
	TCase *tc = tcase_create("arena");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_arena_alloc_zeroed_aligned);
	tcase_add_test(tc, test_arena_alloc_large);
	tcase_add_test(tc, test_arena_map_unmap);
	tcase_add_test(tc, test_arena_map_filled);
	tcase_add_test(tc, test_arena_strndup);
	tcase_add_test(tc, test_arena_inject_failure);
	tcase_add_test(tc, test_arena_alloc_fails_when_chunk_needed);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(arena_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
