/* SPDX-License-Identifier: MIT */
/*
 * A program with a malloc of its own (as one linked with a static tcmalloc
 * or mimalloc that replaces malloc): malloc, free, calloc and realloc here,
 * a bump allocator over a static array, come before any preloaded library's
 * in the lookup.  Copies a string with strdup (libc's strdup calls this
 * malloc), leaks a block and prints "OWN hello".
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Alignas(16) char heap[4 << 20];
static size_t used;

void *
malloc(size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n > sizeof(heap) - used)
		return NULL;
	void *p = heap + used;
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
		memcpy(q, p, n); /* the bump heap has room behind every block */
	return q;
}

int
main(void)
{
	char *s = strdup("hello");
	void *volatile lost = malloc(100);

	(void)lost;
	printf("OWN %s\n", s);
	return 0;
}
