// SPDX-License-Identifier: MIT
/*
 * The library tp_deepbind loads with RTLD_DEEPBIND (built twice: bound at
 * load, -z now, and lazily).  Its references to malloc, free, realloc,
 * operator new[] and delete[] and dlopen look in its own dependencies
 * (libstdc++, libc) first.  deep_leak loses a block of TP_DEEP_LEAK bytes.
 * Its constructor runs before the shim can bind anything: the two blocks it
 * makes are glibc's, and the program frees one and reallocs the other.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#ifndef TP_DEEP_LEAK
#	define TP_DEEP_LEAK 4242
#endif

extern "C" {

static void *ctor_blocks[2];

__attribute__((constructor)) static void
deep_init(void)
{
	ctor_blocks[0] = malloc(777);
	ctor_blocks[1] = malloc(100);
	if (ctor_blocks[1] != NULL)
		memset(ctor_blocks[1], 'c', 100);
}

void *
deep_ctor_block(int i)
{
	return ctor_blocks[i];
}

/* A data reference to malloc: an absolute relocation in .data. */
void *(*deep_malloc_ref)(size_t) = malloc;

__attribute__((noinline)) void *
deep_make(size_t n)
{
	void *p = malloc(n);
	if (p != NULL)
		memset(p, 'x', n);
	return p;
}

void
deep_free(void *p)
{
	free(p);
}

void *
deep_grow(void *p, size_t n)
{
	return realloc(p, n);
}

char *
deep_new(size_t n)
{
	return new char[n];
}

void
deep_delete(char *p)
{
	delete[] p;
}

/* &malloc through the GOT, and through the absolute relocation. */
void *
deep_malloc_got(void)
{
	void *(*volatile m)(size_t) = malloc;
	return (void *)m;
}

void *
deep_malloc_data(void)
{
	return (void *)__atomic_load_n(&deep_malloc_ref, __ATOMIC_RELAXED);
}

__attribute__((noinline)) void
deep_leak(void)
{
	void *volatile p = deep_make(TP_DEEP_LEAK);
	p = NULL;
	(void)p;
}

void *
deep_dlopen(const char *path)
{
	return dlopen(path, RTLD_LAZY | RTLD_DEEPBIND);
}
}
