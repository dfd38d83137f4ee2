/* SPDX-License-Identifier: MIT */
/*
 * A program that links jemalloc itself (-ljemalloc): without the shim its
 * malloc and free are jemalloc's; it also calls jemalloc's own API (mallocx,
 * rallocx, sallocx, nallocx, dallocx, sdallocx, mallctl).  Under the shim
 * malloc & co. are the shim's and must be counted exactly; the *allocx calls
 * go to jemalloc directly and are not the malloc family: the ledger does not
 * count them.  Prints jemalloc's version and checksums of its work.
 * "baseline" does nothing.
 */
#include <jemalloc/jemalloc.h>

#include "tp_common.h"

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;

	const char *version = NULL;
	size_t sz = sizeof(version);
	TP_CHECK(mallctl("version", &version, &sz, NULL, 0) == 0 && version != NULL,
	         "mallctl version");
	tp_out("jemalloc %s\n", version);

	/* the malloc family: 100 blocks, 60 freed, 10 realloc'd */
	void *p[100];
	size_t n[100];
	for (int i = 0; i < 100; i++) {
		n[i] = 8 + (size_t)i * 37;
		p[i] = (i % 4 == 0) ? calloc(1, n[i]) : malloc(n[i]);
		TP_CHECK(p[i] != NULL, "malloc(%zu)", n[i]);
		tp_fill(p[i], n[i], (unsigned char)i);
		tp_l_alloc((long long)n[i]);
	}
	for (int i = 0; i < 100; i += 10) {
		void *q = realloc(p[i], n[i] * 3);
		TP_CHECK(q != NULL && tp_check_fill(q, n[i], (unsigned char)i), "realloc");
		tp_l_realloc((long long)n[i], (long long)n[i] * 3);
		p[i] = q;
		n[i] *= 3;
	}
	for (int i = 0; i < 100; i++) {
		if (i % 5 < 3) {
			free(p[i]);
			tp_l_free((long long)n[i]);
		} else {
			TP_KEEP(p[i]);
		}
	}

	/* jemalloc's own API */
	unsigned long checksum = 0;
	for (int i = 0; i < 50; i++) {
		size_t want = 16 + (size_t)i * 100;
		void *x = mallocx(want, MALLOCX_ALIGN(64) | (i % 2 ? MALLOCX_ZERO : 0));
		TP_CHECK(x != NULL && tp_aligned(x, 64), "mallocx");
		TP_CHECK(sallocx(x, 0) >= want, "sallocx");
		TP_CHECK(nallocx(want, MALLOCX_ALIGN(64)) >= want, "nallocx");
		memset(x, i, want);
		x = rallocx(x, want * 2, 0);
		TP_CHECK(x != NULL, "rallocx");
		checksum = checksum * 31 + ((unsigned char *)x)[want - 1];
		if (i % 2)
			dallocx(x, 0);
		else
			sdallocx(x, want * 2, 0);
	}
	tp_out("mallocx checksum %lu\n", checksum);

	uint64_t epoch = 1;
	sz = sizeof(epoch);
	TP_CHECK(mallctl("epoch", &epoch, &sz, &epoch, sz) == 0, "mallctl epoch");
	size_t allocated = 0;
	sz = sizeof(allocated);
	TP_CHECK(mallctl("stats.allocated", &allocated, &sz, NULL, 0) == 0,
	         "mallctl stats.allocated");
	TP_CHECK(allocated > 0, "stats.allocated is 0");

	tp_out("links_jemalloc done\n");
	tp_l_print();
	return 0;
}
