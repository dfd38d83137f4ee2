/* SPDX-License-Identifier: MIT */
/*
 * A program with a malloc of its own (as one linked with a static tcmalloc
 * or mimalloc that replaces malloc): malloc, free, calloc and realloc here,
 * a bump allocator over a static array, come before any preloaded library's
 * in the lookup.  Copies a string with strdup (libc's strdup calls this
 * malloc), leaks a block and prints "OWN hello".
 */
#include <stdio.h>

#define TP_BUMP_BYTES (4 << 20)
#include "tp_bump_malloc.h"

int
main(void)
{
	char *s = strdup("hello");
	void *volatile lost = malloc(100);

	(void)lost;
	printf("OWN %s\n", s);
	return 0;
}
