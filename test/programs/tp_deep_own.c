/* SPDX-License-Identifier: MIT */
/*
 * A library with an allocator of its own (as one that links a static
 * tcmalloc exporting malloc), loaded by tp_deepbind with RTLD_DEEPBIND: its
 * references to malloc and free find its own first, and must keep them.
 * A bump allocator over a static array (tp_bump_malloc.h).
 */
#include <stddef.h>

void *own_make(size_t n);
void own_free(void *p);
int own_is_mine(const void *p);

#define TP_BUMP_BYTES (1 << 20)
#include "tp_bump_malloc.h"

/* Through the PLT: interposable, found in this library first. */
void *
own_make(size_t n)
{
	void *(*volatile m)(size_t) = malloc;
	return m(n);
}

void
own_free(void *p)
{
	void (*volatile f)(void *) = free;
	f(p);
}

int
own_is_mine(const void *p)
{
	return tp_bump_owns(p);
}
