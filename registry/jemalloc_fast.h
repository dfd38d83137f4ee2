/* SPDX-License-Identifier: MIT */
/*
 * The private jemalloc (registry/make_private_jemalloc.sh) by its own names,
 * for the process tracker's fast path (core/shim.c): direct calls instead of
 * the ops table's pointers, and the usable size of small requests from a
 * table.  Valid only when tfa_jemalloc_is_private(backend) said so: a program
 * that links jemalloc itself gets its own instance through the ops table.
 */
#ifndef TFA_REGISTRY_JEMALLOC_FAST_H
#define TFA_REGISTRY_JEMALLOC_FAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/allocator.h"
#include "core/common.h"

/* Requests up to this many bytes have their usable size in tfa_jemalloc_usable. */
#define TFA_JE_SMALL_MAX 16384

/* nallocx(max(n, 1), 0) at index (n + 7) / 8, for n up to TFA_JE_SMALL_MAX. */
extern TFA_HIDDEN uint32_t tfa_jemalloc_usable[TFA_JE_SMALL_MAX / 8 + 1];

/* Whether `a` is the registry's jemalloc and uses the private copy. */
TFA_HIDDEN bool tfa_jemalloc_is_private(const tfa_allocator_t *a);

/* The private copy's entry points. */
TFA_HIDDEN void *tfa_je_malloc(size_t size);
TFA_HIDDEN void *tfa_je_calloc(size_t n, size_t size);
TFA_HIDDEN void *tfa_je_rallocx(void *ptr, size_t size, int flags);
TFA_HIDDEN void tfa_je_sdallocx(void *ptr, size_t size, int flags);
TFA_HIDDEN void *tfa_je_mallocx(size_t size, int flags);
TFA_HIDDEN size_t tfa_je_sallocx(const void *ptr, int flags);

/* jemalloc's mallocx flags. */
#define TFA_JE_MALLOCX_LG_ALIGN(la) ((int)(la))
#define TFA_JE_MALLOCX_ZERO ((int)0x40)

/*
 * A new explicit thread cache of the private copy (mallctl "tcache.create"):
 * its index, or -1.  Frees with TFA_JE_MALLOCX_TCACHE(index) go to it.  It is
 * never destroyed: the shim gives one to a thread record, and the record's
 * next thread inherits it.
 */
TFA_HIDDEN int tfa_jemalloc_tcache_create(void);
#define TFA_JE_MALLOCX_TCACHE(index) ((int)(((unsigned)(index) + 2) << 8))

#endif /* TFA_REGISTRY_JEMALLOC_FAST_H */
