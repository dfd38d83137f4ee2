/* SPDX-License-Identifier: MIT */
/*
 * The aligned family: posix_memalign, aligned_alloc, memalign, valloc,
 * pvalloc, with their error cases, as glibc 2.36 behaves:
 *   posix_memalign  EINVAL for an alignment that is not a power of two
 *                   multiple of sizeof(void *); the result pointer and errno
 *                   are untouched on failure; ENOMEM when too large.
 *   memalign        a non-power-of-two alignment is rounded up to the next
 *                   power of two; > SIZE_MAX/2+1 fails with EINVAL.
 *   valloc, pvalloc page aligned; pvalloc rounds the size up to a page (its
 *                   requested bytes may be read either way: the ledger
 *                   accepts both).
 * With "baseline" it does nothing.
 */
#include <malloc.h>
#include <stdint.h>

#include "tp_common.h"

static volatile size_t v_huge = SIZE_MAX;

static void
check_pm_einval(size_t alignment)
{
	void *sentinel = (void *)(uintptr_t)0x5eed;
	void *p = sentinel;
	errno = 4242;
	int rc = posix_memalign(&p, alignment, 64);
	TP_CHECK(rc == EINVAL, "posix_memalign(alignment %zu) returned %d, want EINVAL", alignment,
	         rc);
	TP_CHECK(p == sentinel, "posix_memalign(alignment %zu) touched the result: %p", alignment,
	         p);
	TP_CHECK(errno == 4242, "posix_memalign(alignment %zu) changed errno to %d", alignment,
	         errno);
}

/* glibc 2.36 sets errno when posix_memalign fails for want of memory (its malloc's ENOMEM). */
static void
check_pm_enomem(void)
{
	void *sentinel = (void *)(uintptr_t)0x5eed;
	void *p = sentinel;
	errno = 4242;
	int rc = posix_memalign(&p, 64, v_huge / 2);
	TP_CHECK(rc == ENOMEM, "posix_memalign(64, huge) returned %d, want ENOMEM", rc);
	TP_CHECK(p == sentinel, "posix_memalign(64, huge) touched the result: %p", p);
	TP_CHECK(errno == ENOMEM, "posix_memalign(64, huge) left errno %d, glibc's ENOMEM", errno);
}

/* posix_memalign that must succeed; returns the block. */
static void *
pm_ok(size_t alignment, size_t size)
{
	void *p = NULL;
	errno = 4242;
	int rc = posix_memalign(&p, alignment, size);
	TP_CHECK(rc == 0 && p != NULL, "posix_memalign(%zu, %zu) returned %d", alignment, size, rc);
	TP_CHECK(errno == 4242, "posix_memalign(%zu, %zu) changed errno to %d", alignment, size,
	         errno);
	TP_CHECK(tp_aligned(p, alignment), "posix_memalign(%zu) gave %p", alignment, p);
	TP_CHECK(malloc_usable_size(p) >= size, "usable size %zu < %zu", malloc_usable_size(p),
	         size);
	memset(p, 0x33, size);
	tp_l_alloc((long long)size);
	return p;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t huge = v_huge;
	void *p;

	/* posix_memalign */
	check_pm_einval(0);
	check_pm_einval(3);
	check_pm_einval(4); /* a power of two, but not a multiple of sizeof(void *) */
	check_pm_einval(24);
	check_pm_einval(sizeof(void *) * 3);
	check_pm_einval(((size_t)1 << 20) + 8);
	check_pm_enomem();
	void *a8 = pm_ok(8, 100);
	void *a64 = pm_ok(64, 1000);
	void *a4k = pm_ok(4096, 5000);
	void *a1m = pm_ok((size_t)1 << 20, 100);
	void *a0 = pm_ok(32, 0);
	{
		void *sentinel = (void *)(uintptr_t)0x5eed;
		p = sentinel;
		int rc = posix_memalign(&p, 64, huge - 8192);
		TP_CHECK(rc == ENOMEM, "posix_memalign(64, huge) returned %d, want ENOMEM", rc);
		TP_CHECK(p == sentinel, "posix_memalign(64, huge) touched the result: %p", p);
	}
	free(a8);
	tp_l_free(100);
	free(a4k);
	tp_l_free(5000);
	free(a1m);
	tp_l_free(100);
	free(a0);
	tp_l_free(0);
	/* a64 (1000 bytes) leaks */
	TP_KEEP(a64);

	/* aligned_alloc */
	void *aa = aligned_alloc(64, 128);
	TP_CHECK(aa != NULL && tp_aligned(aa, 64), "aligned_alloc(64, 128) gave %p", aa);
	tp_l_alloc(128);
	void *ab = aligned_alloc(4096, 12288);
	TP_CHECK(ab != NULL && tp_aligned(ab, 4096), "aligned_alloc(4096, 12288) gave %p", ab);
	TP_CHECK(malloc_usable_size(ab) >= 12288, "usable size %zu", malloc_usable_size(ab));
	memset(ab, 1, 12288);
	tp_l_alloc(12288);
	errno = 0;
	p = aligned_alloc(16, huge - 8192);
	TP_CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(16, huge) gave %p errno %d", p,
	         errno);
	/*
	 * A non-power-of-two alignment: glibc 2.36 rounds it up as memalign
	 * does, newer ones refuse with EINVAL; both are accepted.
	 */
	errno = 0;
	p = aligned_alloc(48, 96);
	if (p != NULL) {
		TP_CHECK(tp_aligned(p, 64), "aligned_alloc(48, 96) gave %p", p);
		tp_l_alloc(96);
		free(p);
		tp_l_free(96);
	} else {
		TP_CHECK(errno == EINVAL, "aligned_alloc(48, 96) failed with errno %d", errno);
	}
	free(aa);
	tp_l_free(128);
	/* ab (12288 bytes) leaks */
	TP_KEEP(ab);

	/* memalign */
	void *m24 = memalign(24, 100); /* rounded up to 32 */
	TP_CHECK(m24 != NULL && tp_aligned(m24, 32), "memalign(24, 100) gave %p", m24);
	tp_l_alloc(100);
	void *m3 = memalign(3, 10); /* rounded up to 4 */
	TP_CHECK(m3 != NULL && tp_aligned(m3, 4), "memalign(3, 10) gave %p", m3);
	tp_l_alloc(10);
	void *m0 = memalign(0, 10); /* an alignment <= the default: a malloc */
	TP_CHECK(m0 != NULL && tp_aligned(m0, 16), "memalign(0, 10) gave %p", m0);
	tp_l_alloc(10);
	/*
	 * Small blocks at 16, all live at once: a backend's smallest class may
	 * be aligned to 8 only, and consecutive small blocks then alternate.
	 */
	void *s16[8], *m16[8], *a16[8];
	for (int i = 0; i < 8; i++) {
		s16[i] = pm_ok(16, 8);
		m16[i] = memalign(16, 4);
		TP_CHECK(m16[i] != NULL && tp_aligned(m16[i], 16), "memalign(16, 4) gave %p", m16[i]);
		tp_l_alloc(4);
		a16[i] = aligned_alloc(16, 8);
		TP_CHECK(a16[i] != NULL && tp_aligned(a16[i], 16), "aligned_alloc(16, 8) gave %p",
		         a16[i]);
		tp_l_alloc(8);
	}
	for (int i = 0; i < 8; i++) {
		free(s16[i]);
		tp_l_free(8);
		free(m16[i]);
		tp_l_free(4);
		free(a16[i]);
		tp_l_free(8);
	}
	void *m300 = memalign(300, 1000); /* rounded up to 512 */
	TP_CHECK(m300 != NULL && tp_aligned(m300, 512), "memalign(300, 1000) gave %p", m300);
	tp_l_alloc(1000);
	void *mp = memalign(page * 4, 7);
	TP_CHECK(mp != NULL && tp_aligned(mp, page * 4), "memalign(4 pages, 7) gave %p", mp);
	tp_l_alloc(7);
	errno = 0;
	p = memalign(SIZE_MAX / 2 + 2, 16);
	TP_CHECK(p == NULL && errno == EINVAL, "memalign(SIZE_MAX/2+2) gave %p errno %d", p, errno);
	p = memalign(64, huge - 8192);
	TP_CHECK(p == NULL, "memalign(64, huge) gave %p", p);
	free(m24);
	tp_l_free(100);
	free(m3);
	tp_l_free(10);
	free(m0);
	tp_l_free(10);
	free(mp);
	tp_l_free(7);
	/* m300 (1000 bytes) leaks */
	TP_KEEP(m300);

	/* valloc, pvalloc */
	void *v = valloc(100);
	TP_CHECK(v != NULL && tp_aligned(v, page), "valloc(100) gave %p", v);
	TP_CHECK(malloc_usable_size(v) >= 100, "valloc usable size %zu", malloc_usable_size(v));
	tp_l_alloc(100);
	void *pv = pvalloc(100);
	TP_CHECK(pv != NULL && tp_aligned(pv, page), "pvalloc(100) gave %p", pv);
	TP_CHECK(malloc_usable_size(pv) >= page, "pvalloc(100) usable size %zu < a page",
	         malloc_usable_size(pv));
	memset(pv, 2, page); /* the whole page is the program's */
	tp_l_alloc2(100, (long long)page);
	void *pv2 = pvalloc(page + 1);
	TP_CHECK(pv2 != NULL && tp_aligned(pv2, page), "pvalloc(page+1) gave %p", pv2);
	TP_CHECK(malloc_usable_size(pv2) >= 2 * page, "pvalloc(page+1) usable size %zu",
	         malloc_usable_size(pv2));
	tp_l_alloc2((long long)page + 1, 2 * (long long)page);
	errno = 0;
	p = valloc(huge - 8192);
	TP_CHECK(p == NULL && errno == ENOMEM, "valloc(huge) gave %p errno %d", p, errno);
	errno = 0;
	p = pvalloc(huge - 10);
	TP_CHECK(p == NULL && errno == ENOMEM, "pvalloc(huge) gave %p errno %d", p, errno);
	free(v);
	tp_l_free(100);
	free(pv2);
	tp_l_free2((long long)page + 1, 2 * (long long)page);
	/* pv (100 bytes or a page) leaks */
	TP_KEEP(pv);

	tp_out("aligned done\n");
	tp_l_print();
	return 0;
}
