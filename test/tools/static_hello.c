/* SPDX-License-Identifier: MIT */
/* Linked with -static: LD_PRELOAD cannot reach it, and `tfalloc run` must say so. */
#include <stdio.h>

int
main(void)
{
	puts("static hello");
	return 0;
}
