/* SPDX-License-Identifier: MIT */
/* Built without unwind tables (test/programs/CMakeLists.txt), with frame pointers: see tp_nocfi.c. */
#include <stdlib.h>

#include "tp_common.h"

void tp_nocfi_churn(int blocks);

static void *volatile tp_nocfi_sink;

__attribute__((noinline, noclone)) void tp_nocfi_leaf(int blocks);

__attribute__((noinline, noclone)) void
tp_nocfi_leaf(int blocks)
{
	for (int i = 0; i < blocks; i++) {
		tp_nocfi_sink = malloc(32 + (size_t)(i & 63));
		TP_CHECK(tp_nocfi_sink != NULL, "malloc");
		free(tp_nocfi_sink);
	}
	tp_nocfi_sink = malloc(777);
	tp_nocfi_sink = NULL; /* lost */
}

/* 20 frames without tables above the leaf: tfalloc's walk refuses the stack. */
__attribute__((noinline, noclone)) void tp_nocfi_deep(int depth, int blocks);

__attribute__((noinline, noclone)) void
tp_nocfi_deep(int depth, int blocks)
{
	if (depth == 0)
		tp_nocfi_leaf(blocks);
	else
		tp_nocfi_deep(depth - 1, blocks);
	__asm__ volatile("" ::: "memory");
}

void
tp_nocfi_churn(int blocks)
{
	tp_nocfi_deep(20, blocks);
	__asm__ volatile("" ::: "memory");
}
