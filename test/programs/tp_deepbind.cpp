// SPDX-License-Identifier: MIT
/*
 * Libraries loaded with RTLD_DEEPBIND, whose malloc family is libc's and
 * libstdc++'s unless the shim binds it (preload/dl_hooks.c).  Argument: how
 * the first library is named to dlopen:
 *   path     its full path (beside this program)
 *   bare     its file name: found through this program's RUNPATH ($ORIGIN)
 *   origin   "$ORIGIN/libtp_deep_now.so"
 * Then blocks cross between program and library both ways (malloc/free,
 * realloc, new[]/delete[]), malloc's address is compared, the library loads
 * the second library with RTLD_LAZY | RTLD_DEEPBIND itself (its calls bound
 * at their first use) and the same
 * is done with it; each library loses one block (4242 and 4343 bytes).
 * A third library, with a malloc of its own, keeps it.  The blocks each
 * library's constructor made before the shim bound it
 * (glibc's) are freed, realloc'ed and asked their usable size here.  With
 * a second argument "double", three double frees at the end (glibc aborts
 * on the first without tfalloc).
 * Prints "DEEP <mode> ok".  (No ledger: dlopen allocates as it likes.)
 */
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <new>

#include "tp_common.h"

typedef void *(*make_fn)(size_t);
typedef void (*free_fn)(void *);
typedef void *(*grow_fn)(void *, size_t);
typedef char *(*new_fn)(size_t);
typedef void (*delete_fn)(char *);
typedef void *(*addr_fn)(void);
typedef void (*leak_fn)(void);
typedef void *(*dlopen_fn)(const char *);
typedef void *(*ctor_fn)(int);

template <typename F>
static F
sym(void *h, const char *name)
{
	void *p = dlsym(h, name);
	TP_CHECK(p != NULL, "%s", name);
	F f;
	memcpy(&f, &p, sizeof(f));
	return f;
}

static void
exercise(void *h)
{
	make_fn make = sym<make_fn>(h, "deep_make");
	free_fn dfree = sym<free_fn>(h, "deep_free");
	grow_fn grow = sym<grow_fn>(h, "deep_grow");
	new_fn dnew = sym<new_fn>(h, "deep_new");
	delete_fn ddelete = sym<delete_fn>(h, "deep_delete");

	/* Made there, freed here; made here, freed there. */
	void *a = make(100);
	TP_CHECK(a != NULL, "deep_make");
	free(a);
	void *b = malloc(200);
	TP_CHECK(b != NULL, "malloc");
	dfree(b);
	/* realloc there of a block made here, and the other way. */
	void *c = malloc(64);
	c = grow(c, 9000);
	TP_CHECK(c != NULL, "deep_grow");
	free(c);
	void *d = make(50);
	d = realloc(d, 5000);
	TP_CHECK(d != NULL, "realloc");
	dfree(d);
	/* new[] there, delete[] here; new[] here, delete[] there: no mismatch. */
	char *e = dnew(300);
	delete[] e;
	char *f = new char[400];
	ddelete(f);
	/* Both see the same malloc, as without RTLD_DEEPBIND. */
	void *(*volatile m)(size_t) = malloc;
	TP_CHECK(sym<addr_fn>(h, "deep_malloc_got")() == (void *)m, "the library's malloc (GOT) is the program's");
	TP_CHECK(sym<addr_fn>(h, "deep_malloc_data")() == (void *)m, "the library's malloc (data) is the program's");
	sym<leak_fn>(h, "deep_leak")();

	/* glibc's blocks, made by the constructor. */
	void *c0 = sym<ctor_fn>(h, "deep_ctor_block")(0), *c1 = sym<ctor_fn>(h, "deep_ctor_block")(1);
	TP_CHECK(c0 != NULL && c1 != NULL, "the constructor's blocks");
	TP_CHECK(malloc_usable_size(c0) >= 777, "malloc_usable_size of the constructor's block: %zu",
		 malloc_usable_size(c0));
	free(c0);
	char *g = (char *)realloc(c1, 20000);
	TP_CHECK(g != NULL && g[0] == 'c' && g[99] == 'c', "realloc of the constructor's block");
	free(g);
}

int
main(int argc, char **argv)
{
	char dir[PATH_MAX], path[PATH_MAX + 64];

	if (tp_is_baseline(argc, argv))
		return 0;
	const char *mode = argc > 1 ? argv[1] : "path";
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	TP_CHECK(n > 0, "readlink /proc/self/exe");
	dir[n] = '\0';
	*strrchr(dir, '/') = '\0';

	const char *name;
	if (strcmp(mode, "bare") == 0)
		name = "libtp_deep_now.so";
	else if (strcmp(mode, "origin") == 0)
		name = "$ORIGIN/libtp_deep_now.so";
	else {
		snprintf(path, sizeof(path), "%s/libtp_deep_now.so", dir);
		name = path;
	}
	/*
	 * Under TFALLOC_ALLOCATOR=glibc the constructor's first block (777
	 * bytes, glibc's) takes the address of this one, just freed: an address
	 * the shim freed lately, which is no double free.
	 */
	void *pre = malloc(777);
	TP_CHECK(pre != NULL, "malloc");
	free(pre);
	void *h = dlopen(name, RTLD_NOW | RTLD_DEEPBIND);
	if (h == NULL) {
		tp_printf(2, "dlopen %s: %s\n", name, dlerror());
		return TP_FAIL_STATUS;
	}
	exercise(h);

	/* The library's own dlopen, with RTLD_DEEPBIND, of the lazily bound one. */
	snprintf(path, sizeof(path), "%s/libtp_deep_lazy.so", dir);
	void *h2 = sym<dlopen_fn>(h, "deep_dlopen")(path);
	if (h2 == NULL) {
		tp_printf(2, "deep_dlopen %s: %s\n", path, dlerror());
		return TP_FAIL_STATUS;
	}
	exercise(h2);
	/* A library with an allocator of its own keeps it. */
	snprintf(path, sizeof(path), "%s/libtp_deep_own.so", dir);
	void *h3 = dlopen(path, RTLD_NOW | RTLD_DEEPBIND);
	if (h3 == NULL) {
		tp_printf(2, "dlopen %s: %s\n", path, dlerror());
		return TP_FAIL_STATUS;
	}
	void *o = sym<make_fn>(h3, "own_make")(64);
	TP_CHECK(o != NULL && sym<int (*)(const void *)>(h3, "own_is_mine")(o),
		 "the library's malloc is its own allocator's");
	sym<free_fn>(h3, "own_free")(o);

	tp_printf(1, "DEEP %s ok\n", mode);
	if (argc < 3 || strcmp(argv[2], "double") != 0)
		return 0;
	/*
	 * Double frees after a library was loaded with RTLD_DEEPBIND, of blocks
	 * in and past glibc's thread cache: they must not pass for blocks glibc
	 * made.
	 */
	char *eight[8];
	for (int i = 0; i < 8; i++) {
		eight[i] = (char *)malloc(24);
		TP_CHECK(eight[i] != NULL, "malloc(24)");
	}
	void *after = malloc(24); /* the eighth does not merge into glibc's top chunk */
	TP_CHECK(after != NULL, "malloc(24)");
	for (int i = 0; i < 8; i++)
		free(eight[i]);
	/* The seventh is in glibc's thread cache, the eighth past it (a bin). */
	char *volatile again = eight[6];
	free(again);
	again = eight[7];
	free(again);
	free(after);
	/*
	 * Past the cache's sizes: the second of three blocks freed last merges
	 * with both others, and keeps its old header (the third's too).
	 */
	char *three[4];
	for (int i = 0; i < 4; i++) {
		three[i] = (char *)malloc(2000);
		TP_CHECK(three[i] != NULL, "malloc(2000)");
	}
	free(three[2]);
	free(three[0]);
	free(three[1]);
	again = three[1];
	free(again);
	free(three[3]);
	return 0;
}
