/* SPDX-License-Identifier: MIT */
/*
 * A library that wraps puts with dlsym(RTLD_NEXT, "puts"), the way LLVM's
 * OpenMP tool hook and many tracers do.  Under a dlsym interposer written in
 * C, RTLD_NEXT would be taken from the interposer's object and find this
 * very puts again: endless recursion (CUDA.md T6).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int puts(const char *s);

int
puts(const char *s)
{
	static int depth;
	int (*real)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "puts");
	if (real == NULL || real == puts || ++depth > 1) {
		fprintf(stderr, "t6_next: dlsym(RTLD_NEXT, \"puts\") found %s\n",
			real == NULL ? "nothing" : "this wrapper again");
		_exit(3);
	}
	fputs("next:", stdout);
	int r = real(s);
	depth--;
	return r;
}
