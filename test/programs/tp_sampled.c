/* SPDX-License-Identifier: MIT */
/*
 * Sample-only tracking (TFALLOC_TRACK=sampled): known counts, known blocks
 * alive at exit, and the memory errors the mode must still see.
 *
 *   tp_sampled baseline          nothing (the C runtime's start-up and exit)
 *   tp_sampled counts N K SEED   N rounds of malloc, calloc, realloc,
 *                                aligned_alloc and posix_memalign of
 *                                pseudo-random sizes (SEED), each block freed,
 *                                plus K blocks of 48, 400, 3000 and 20000
 *                                bytes in turn kept alive at exit; prints
 *                                TALLY allocs frees reallocs total_bytes
 *                                and LIVE size count for each kept size
 *   tp_sampled foreign           one free of a pointer malloc never made (a
 *                                static array); exit status 0
 *   tp_sampled interior          free of a pointer 8 bytes into a block of 256
 *                                (one invalid free; the block stays intact and is
 *                                freed after); realloc of the same (another);
 *                                exit status 0
 *   tp_sampled double SIZE       malloc(SIZE), freed twice; exit status 0
 *                                (a block far larger than the interval is
 *                                sampled for sure)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tp_common.h"

static const size_t live_sizes[4] = { 48, 400, 3000, 20000 };

static uint64_t rng;

static size_t
next_size(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	uint64_t x = rng >> 33;
	/* Mostly small; one in 97 large (past the shim's fast path). */
	return x % 97 == 0 ? 16384 + (size_t)(x % 60000) : 1 + (size_t)(x % 2048);
}

static int
counts(long n, long k, uint64_t seed)
{
	long long allocs = 0, frees = 0, reallocs = 0, total = 0;
	void **keep = calloc((size_t)k + 1, sizeof(void *));
	long every = k > 0 ? n / k : n + 1;
	long kept = 0;

	TP_CHECK(keep != NULL, "calloc keep");
	allocs++;
	total += (long long)(((size_t)k + 1) * sizeof(void *));
	rng = seed;
	for (long i = 0; i < n; i++) {
		size_t sz = next_size();
		void *p = NULL;
		switch (i % 10) {
		case 0:
			p = calloc(1, sz);
			TP_CHECK(p != NULL && ((unsigned char *)p)[sz - 1] == 0, "calloc");
			allocs++;
			total += (long long)sz;
			break;
		case 1:
			sz = (sz + 63) & ~(size_t)63;
			p = aligned_alloc(64, sz);
			TP_CHECK(p != NULL && tp_aligned(p, 64), "aligned_alloc");
			allocs++;
			total += (long long)sz;
			break;
		case 2:
			TP_CHECK(posix_memalign(&p, 32, sz) == 0 && tp_aligned(p, 32), "posix_memalign");
			allocs++;
			total += (long long)sz;
			break;
		case 3: {
			size_t half = sz / 2 + 1;
			p = malloc(half);
			TP_CHECK(p != NULL, "malloc");
			tp_fill(p, half, (unsigned char)i);
			void *q = realloc(p, sz);
			TP_CHECK(q != NULL && tp_check_fill(q, half < sz ? half : sz, (unsigned char)i),
			         "realloc");
			p = q;
			/* realloc: the old block freed, a new one made. */
			allocs += 2;
			frees++;
			reallocs++;
			total += (long long)(half + sz);
			break;
		}
		default:
			p = malloc(sz);
			TP_CHECK(p != NULL, "malloc");
			allocs++;
			total += (long long)sz;
			break;
		}
		tp_fill(p, sz < 64 ? sz : 64, (unsigned char)i);
		free(p);
		frees++;
		if (i % every == 0 && kept < k) {
			size_t ls = live_sizes[kept % 4];
			keep[kept] = malloc(ls);
			TP_CHECK(keep[kept] != NULL, "malloc kept");
			tp_fill(keep[kept], ls, 3);
			allocs++;
			total += (long long)ls;
			kept++;
		}
	}
	TP_KEEP(keep);
	tp_out("TALLY %lld %lld %lld %lld\n", allocs, frees, reallocs, total);
	for (int s = 0; s < 4; s++)
		tp_out("LIVE %zu %ld\n", live_sizes[s], kept / 4 + (kept % 4 > s ? 1 : 0));
	/* keep and the kept blocks stay live: they are what the profile estimates. */
	return 0;
}

static _Alignas(64) char not_malloced[256];

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	if (argc == 5 && strcmp(argv[1], "counts") == 0)
		return counts(atol(argv[2]), atol(argv[3]), strtoull(argv[4], NULL, 10));
	if (argc == 2 && strcmp(argv[1], "foreign") == 0) {
		void *p = not_malloced + 64;
		free(p);
		tp_out("foreign done\n");
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "interior") == 0) {
		unsigned char *q = malloc(256);
		TP_CHECK(q != NULL, "malloc(256)");
		tp_fill(q, 256, 9);
		void *volatile inside = q + 8;
		free(inside);
		void *r = realloc(inside, 100);
		TP_CHECK(r == NULL, "realloc of a pointer inside a block made one");
		TP_CHECK(tp_check_fill(q, 256, 9), "the block of an interior free was clobbered");
		free(q);
		tp_out("interior done\n");
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "double") == 0) {
		void *p = malloc((size_t)atol(argv[2]));
		TP_CHECK(p != NULL, "malloc");
		TP_KEEP(p);
		free(p);
		free(p);
		tp_out("double done\n");
		return 0;
	}
	tp_printf(2, "usage: tp_sampled baseline | counts N K SEED | foreign | interior | double SIZE\n");
	return 2;
}
