/* SPDX-License-Identifier: MIT */
/*
 * malloc, free, calloc and realloc of a bump allocator over a static array
 * of TP_BUMP_BYTES, for the test programs that bring an allocator of their
 * own (as one linked with a static tcmalloc or mimalloc that replaces
 * malloc): free does nothing, realloc copies n bytes (the array has room
 * behind every block).  tp_bump_owns says whether a block is the array's.
 * Included once, by the program or library that defines them.
 */
#ifndef TP_BUMP_MALLOC_H
#define TP_BUMP_MALLOC_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static _Alignas(16) char tp_bump_heap[TP_BUMP_BYTES];
static size_t tp_bump_used;

void *
malloc(size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n > sizeof(tp_bump_heap) - tp_bump_used)
		return NULL;
	void *p = tp_bump_heap + tp_bump_used;
	tp_bump_used += n;
	return p;
}

void
free(void *p)
{
	(void)p;
}

void *
calloc(size_t count, size_t size)
{
	if (size != 0 && count > (size_t)-1 / size)
		return NULL;
	void *p = malloc(count * size);
	if (p != NULL)
		memset(p, 0, count * size);
	return p;
}

void *
realloc(void *p, size_t n)
{
	void *q = malloc(n);
	if (q != NULL && p != NULL)
		memcpy(q, p, n);
	return q;
}

static inline int
tp_bump_owns(const void *p)
{
	return (const char *)p >= tp_bump_heap && (const char *)p < tp_bump_heap + sizeof(tp_bump_heap);
}

#endif /* TP_BUMP_MALLOC_H */
