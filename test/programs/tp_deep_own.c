/* SPDX-License-Identifier: MIT */
/*
 * A library with an allocator of its own (as one that links a static
 * tcmalloc exporting malloc), loaded by tp_deepbind with RTLD_DEEPBIND: its
 * references to malloc and free find its own first, and must keep them.
 * A bump allocator over a static arena; free does nothing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *own_make(size_t n);
void own_free(void *p);
int own_is_mine(const void *p);

static _Alignas(16) char arena[1 << 20];
static size_t used;

void *
malloc(size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n > sizeof(arena) - used)
		return NULL;
	void *p = arena + used;
	used += n;
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
		memcpy(q, p, n); /* the arena is large enough to read past a smaller block */
	return q;
}

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
	return (const char *)p >= arena && (const char *)p < arena + sizeof(arena);
}
