/* SPDX-License-Identifier: MIT */
/*
 * An allocation inside an inlined call, for the folded and pprof tests
 * (test_formats.py, case inline_run): built -O2 -g, so that the return
 * address into `outer` stands for two frames, make_block (inlined) and outer.
 * It leaks one block of 77 bytes.
 */
#include <stdlib.h>

void *volatile formats_sink;

static inline __attribute__((always_inline)) void *
make_block(size_t n)
{
	return malloc(n); /* LINE_MAKE_BLOCK */
}

__attribute__((noinline)) void outer(void);

__attribute__((noinline)) void
outer(void)
{
	formats_sink = make_block(77); /* LINE_OUTER */
	__asm__ volatile("" ::: "memory"); /* no tail call: outer stays a frame */
}

int
main(void)
{
	outer(); /* LINE_MAIN */
	return 0;
}
