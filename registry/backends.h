/* SPDX-License-Identifier: MIT */
/*
 * The host backends that the shim needs by name, not only through the
 * registry: glibc serves every allocation made before the shim's constructor
 * runs, so it must exist as statically initialised storage.
 */
#ifndef TFA_REGISTRY_BACKENDS_H
#define TFA_REGISTRY_BACKENDS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/allocator.h"

/* glibc's malloc through __libc_malloc & co.; usable before any constructor. */
extern tfa_allocator_t tfa_glibc_allocator;

/*
 * Resolves glibc's own malloc_usable_size (the shim exports one of its own).
 * Called once by the shim's init, under the guard.
 */
void tfa_glibc_allocator_resolve(void);

/* glibc's malloc_usable_size of one of its pointers; 0 before resolve. */
size_t tfa_glibc_usable_size(const void *ptr);

/*
 * Blocks glibc's malloc made out of the shim's sight, freed or resized
 * through it: the constructors of a library loaded with RTLD_DEEPBIND run
 * on libc's malloc before the shim binds the library (preload/dl_hooks.c),
 * and a program may call __libc_malloc.  Recognised only as a chunk of
 * glibc's main arena (the program's break) that glibc's free takes without
 * complaint: in use, not in its thread cache.  Call only for pointers the
 * shim has no record of.  tfa_glibc_foreign_size: its usable size, 0 if it is
 * no such chunk.  tfa_glibc_foreign_free: gives it back to glibc; false (and
 * nothing done) if it is no such chunk.  [slow path: system calls]
 */
size_t tfa_glibc_foreign_size(const void *ptr);
bool tfa_glibc_foreign_free(void *ptr);

/*
 * Turns glibc's fast bins off, once: a chunk in one looks in use, so a
 * second free of a block there would pass for one glibc made out of the
 * shim's sight and abort in glibc.  Its thread cache serves the same small
 * sizes first.  The shim asks for it only where glibc's blocks may be given
 * back (core/shim.c): with glibc as the backend, by every block of the
 * program, its cost was within the noise (`trees 15` without stacks, 8
 * interleaved runs, twice: 367 and 370 ms with fast bins, 380 and 370 without).
 */
void tfa_glibc_no_fast_bins(void);

/*
 * The driver calls of the CUDA entries (registry/cuda_allocator.c), installed
 * by cuda_hooks/ in the shim (NULL elsewhere: the entries are unavailable).
 * Results are CUDA's (0: success).
 */
typedef struct tfa_cuda_backend_s {
	bool (*available)(void); /* libcuda is loaded in the process (never loads it) */
	int (*device_count)(void);
	int (*alloc)(int ordinal, size_t nbytes, void **out); /* device memory of that ordinal */
	int (*free)(void *ptr);
	int (*alloc_host)(size_t nbytes, void **out); /* pinned host memory */
	int (*free_host)(void *ptr);
} tfa_cuda_backend_t;

extern const tfa_cuda_backend_t *tfa_cuda_backend;

/*
 * For mallinfo and malloc_trim when jemalloc is the backend (`a` is it):
 * the bytes of its blocks in use and of the pages they occupy (false if `a`
 * is not jemalloc or it keeps no statistics); its unused pages given back
 * to the system (1 if its resident bytes fell, 0 if not or unknown, -1 if
 * `a` is not jemalloc).
 */
bool tfa_jemalloc_figures(const tfa_allocator_t *a, size_t *allocated, size_t *active);
int tfa_jemalloc_trim(const tfa_allocator_t *a);

#endif /* TFA_REGISTRY_BACKENDS_H */
