/* SPDX-License-Identifier: MIT */
/*
 * The library tp_dlopen loads and unloads.  Built twice, as libtp_dlib_a.so
 * (TP_DLIB_A) and libtp_dlib_b.so, with different function names, so that a
 * report that symbolizes a stack of one with the other's module (they are
 * mapped at the same address, one after the other) names the wrong function.
 */
#include <stdlib.h>

#ifdef TP_DLIB_A
#	define MAKE dlib_a_make
#	define PAD 1
#else
#	define MAKE dlib_b_make
#	define PAD 7
#endif

int dlib_pad(int x);
void *MAKE(size_t n);

/* Different code sizes, so that the two do not share addresses by accident. */
__attribute__((noinline)) int
dlib_pad(int x)
{
	for (int i = 0; i < PAD; i++)
		x = x * 31 + i;
	return x;
}

__attribute__((noinline)) void *
MAKE(size_t n)
{
	void *p = malloc(n); /* SITE_DLIB */
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}
