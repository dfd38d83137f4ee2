/* SPDX-License-Identifier: MIT */
/*
 * Allocations made by code that is gone when the profile is written:
 *   dlopen libtp_dlib_a.so, dlib_a_make(3000) (leaked), dlclose;
 *   dlopen libtp_dlib_b.so (mapped where a was), dlib_b_make(5000) (leaked),
 *   dlclose;
 * then, with "loop N", N more dlopen/dlclose rounds of a, each leaking 100
 * bytes.  The libraries sit beside this program.  The leak of 3000 bytes must
 * be reported in dlib_a_make, that of 5000 in dlib_b_make.
 */
#include <dlfcn.h>
#include <limits.h>

#include "tp_common.h"

static void *
call_lib(const char *dir, const char *lib, const char *fn, size_t n)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, lib);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	TP_CHECK(h != NULL, "dlopen of a test library");
	void *(*make)(size_t) = (void *(*)(size_t))dlsym(h, fn);
	TP_CHECK(make != NULL, "dlsym of a test library's function");
	void *p = make(n);
	TP_CHECK(p != NULL, "the library's malloc");
	TP_CHECK(dlclose(h) == 0, "dlclose");
	return p;
}

int
main(int argc, char **argv)
{
	char dir[PATH_MAX];
	static void *keep[1024];
	int loops = 0;

	if (tp_is_baseline(argc, argv))
		return 0;
	if (argc > 2 && strcmp(argv[1], "loop") == 0)
		loops = atoi(argv[2]);
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	TP_CHECK(n > 0, "readlink /proc/self/exe");
	dir[n] = '\0';
	*strrchr(dir, '/') = '\0';

	keep[0] = call_lib(dir, "libtp_dlib_a.so", "dlib_a_make", 3000);
	keep[1] = call_lib(dir, "libtp_dlib_b.so", "dlib_b_make", 5000);
	for (int i = 0; i < loops && i + 2 < 1024; i++)
		keep[i + 2] = call_lib(dir, "libtp_dlib_a.so", "dlib_a_make", 100);
	TP_KEEP(keep);
	return 0;
}
