/* SPDX-License-Identifier: MIT */
/*
 * calloc, reallocarray and realloc corner cases, and refused requests, each
 * checked for its C (glibc) semantics here and mirrored in the ledger for the
 * report's numbers.  Refused requests (overflow, too large) return NULL with
 * ENOMEM and count nothing.  With "baseline" it does nothing.
 */
#include <malloc.h>
#include <stdint.h>

#include "tp_common.h"

/* Hidden from the optimiser, so that gcc cannot fold the overflow checks. */
static volatile size_t v_huge = SIZE_MAX;
static volatile size_t v_half = SIZE_MAX / 2 + 1;
static volatile size_t v_2_32 = (size_t)1 << 32;

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	size_t huge = v_huge, half = v_half;
	void *p;

	/* malloc refused: NULL, ENOMEM, nothing counted. */
	errno = 0;
	p = malloc(huge);
	TP_CHECK(p == NULL && errno == ENOMEM, "malloc(SIZE_MAX) gave %p errno %d", p, errno);
	errno = 0;
	p = malloc(half);
	TP_CHECK(p == NULL && errno == ENOMEM, "malloc(SIZE_MAX/2+1) gave %p errno %d", p, errno);

	/* calloc: zeroed memory; overflow of n*size is refused. */
	errno = 0;
	p = calloc(half, 2);
	TP_CHECK(p == NULL && errno == ENOMEM, "calloc overflow gave %p errno %d", p, errno);
	errno = 0;
	p = calloc(3, huge / 2);
	TP_CHECK(p == NULL && errno == ENOMEM, "calloc overflow 2 gave %p errno %d", p, errno);
	errno = 0;
	p = calloc(v_2_32, v_2_32);
	TP_CHECK(p == NULL && errno == ENOMEM, "calloc 2^32 x 2^32 gave %p errno %d", p, errno);
	unsigned char *c0 = calloc(0, 16); /* glibc: a unique pointer, 0 requested bytes */
	TP_CHECK(c0 != NULL, "calloc(0, 16) returned NULL");
	tp_l_alloc(0);
	unsigned char *c1 = calloc(1000, 33);
	TP_CHECK(c1 != NULL && tp_all_zero(c1, 33000), "calloc(1000, 33) not zeroed");
	tp_l_alloc(33000);
	/* Reused memory must be zeroed too. */
	unsigned char *d = malloc(4000);
	TP_CHECK(d != NULL, "malloc(4000)");
	memset(d, 0xab, 4000);
	tp_l_alloc(4000);
	free(d);
	tp_l_free(4000);
	unsigned char *c2 = calloc(40, 100);
	TP_CHECK(c2 != NULL && tp_all_zero(c2, 4000), "calloc(40, 100) after a free not zeroed");
	tp_l_alloc(4000);
	free(c0);
	tp_l_free(0);
	free(c2);
	tp_l_free(4000);
	/* c1 (33000 bytes) leaks. */
	TP_KEEP(c1);

	/* reallocarray: overflow refused, old block intact. */
	errno = 0;
	p = reallocarray(NULL, half, 2);
	TP_CHECK(p == NULL && errno == ENOMEM, "reallocarray(NULL) overflow gave %p errno %d", p,
	         errno);
	unsigned char *ra = reallocarray(NULL, 10, 10); /* a malloc(100) */
	TP_CHECK(ra != NULL, "reallocarray(NULL, 10, 10)");
	tp_l_alloc(100);
	tp_l_maybe_realloc();
	tp_fill(ra, 100, 3);
	errno = 0;
	p = reallocarray(ra, 3, huge / 2);
	TP_CHECK(p == NULL && errno == ENOMEM, "reallocarray(p) overflow gave %p errno %d", p,
	         errno);
	TP_CHECK(tp_check_fill(ra, 100, 3), "reallocarray overflow clobbered the block");
	unsigned char *rb = reallocarray(ra, 20, 10);
	TP_CHECK(rb != NULL && tp_check_fill(rb, 100, 3), "reallocarray(p, 20, 10) lost the data");
	tp_l_realloc(100, 200);
	/* rb (200 bytes) leaks. */
	TP_KEEP(rb);

	/* realloc(NULL, n) is malloc(n). */
	unsigned char *r = realloc(NULL, 50);
	TP_CHECK(r != NULL, "realloc(NULL, 50)");
	tp_l_alloc(50);
	tp_l_maybe_realloc();
	tp_fill(r, 50, 9);
	/* grow, keeping the contents */
	unsigned char *r2 = realloc(r, 100000);
	TP_CHECK(r2 != NULL && tp_check_fill(r2, 50, 9), "realloc grow lost the data");
	tp_l_realloc(50, 100000);
	tp_fill(r2, 100000, 11);
	/* shrink */
	unsigned char *r3 = realloc(r2, 10);
	TP_CHECK(r3 != NULL && tp_check_fill(r3, 10, 11), "realloc shrink lost the data");
	tp_l_realloc(100000, 10);
	/* same size */
	unsigned char *r4 = realloc(r3, 10);
	TP_CHECK(r4 != NULL && tp_check_fill(r4, 10, 11), "realloc same size lost the data");
	tp_l_realloc(10, 10);
	TP_CHECK(malloc_usable_size(r4) >= 10, "malloc_usable_size %zu < 10",
	         malloc_usable_size(r4));
	/* a refused realloc leaves the block as it was */
	errno = 0;
	p = realloc(r4, huge - 4096);
	TP_CHECK(p == NULL && errno == ENOMEM, "realloc(p, huge) gave %p errno %d", p, errno);
	TP_CHECK(tp_check_fill(r4, 10, 11), "refused realloc clobbered the block");
	errno = 0;
	p = realloc(r4, half);
	TP_CHECK(p == NULL && errno == ENOMEM, "realloc(p, SIZE_MAX/2+1) gave %p errno %d", p,
	         errno);
	TP_CHECK(tp_check_fill(r4, 10, 11), "refused realloc clobbered the block");
	/* realloc(p, 0) frees p and returns NULL (glibc) */
	p = realloc(r4, 0);
	TP_CHECK(p == NULL, "realloc(p, 0) returned %p, glibc returns NULL", p);
	tp_l_free(10);
	tp_l_maybe_realloc();
	/* realloc(NULL, 0) is malloc(0): a unique pointer */
	void *z = realloc(NULL, 0);
	TP_CHECK(z != NULL, "realloc(NULL, 0) returned NULL");
	tp_l_alloc(0);
	tp_l_maybe_realloc();
	/* grow from 0 */
	unsigned char *z2 = realloc(z, 300);
	TP_CHECK(z2 != NULL, "realloc(malloc(0), 300)");
	tp_l_realloc(0, 300);
	tp_fill(z2, 300, 5);
	/* z2 (300 bytes) leaks. */
	TP_KEEP(z2);

	/* usable sizes */
	TP_CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) != 0");
	static const size_t sizes[] = { 1, 7, 8, 24, 100, 1000, 4096, 65536, 300000 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		void *u = malloc(sizes[i]);
		TP_CHECK(u != NULL, "malloc(%zu)", sizes[i]);
		tp_l_alloc((long long)sizes[i]);
		size_t us = malloc_usable_size(u);
		TP_CHECK(us >= sizes[i], "malloc_usable_size %zu < request %zu", us, sizes[i]);
		memset(u, 0x5a, us); /* all of it is usable */
		free(u);
		tp_l_free((long long)sizes[i]);
	}

	tp_out("calloc_realloc done\n");
	tp_l_print();
	return 0;
}
