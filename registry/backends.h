/* SPDX-License-Identifier: MIT */
/*
 * The host backends that the shim needs by name, not only through the
 * registry: glibc serves every allocation made before the shim's constructor
 * runs, so it must exist as statically initialised storage.
 */
#ifndef TFA_REGISTRY_BACKENDS_H
#define TFA_REGISTRY_BACKENDS_H

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

#endif /* TFA_REGISTRY_BACKENDS_H */
