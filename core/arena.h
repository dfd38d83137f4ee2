/* SPDX-License-Identifier: MIT */
/*
 * The shim's own memory.  Nothing the shim keeps (pointer table, thread
 * records, strings, error lists) may come from the intercepted malloc, so it
 * all comes from here: whole mappings from mmap, or small permanent pieces
 * carved from mmap'd chunks.
 */
#ifndef TFA_CORE_ARENA_H
#define TFA_CORE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

/* Maps at least `bytes` of zeroed memory; NULL on failure.  [never allocates] */
void *tfa_arena_map(size_t bytes);
void tfa_arena_unmap(void *p, size_t bytes);
/*
 * The same, for memory the caller is about to write throughout: its pages
 * are made in one system call (MAP_POPULATE) instead of a fault each.
 * [never allocates]
 */
void *tfa_arena_map_filled(size_t bytes);

/*
 * Reserves bytes of zeroed address space for pieces the caller hands out
 * itself: no page is made until it is written, none is a huge page, and
 * nothing is counted in tfa_arena_mapped_bytes until the caller says how
 * much of it it uses (tfa_arena_count).  The shim's own, as every mapping
 * here (the leak scan leaves it out).  NULL on failure.  [never allocates]
 */
void *tfa_arena_reserve(size_t bytes);

/* Counts delta bytes of reserved space as used (negative: no longer). */
void tfa_arena_count(long delta);

/*
 * A small zeroed piece that lives until the process ends (16-byte aligned).
 * NULL on failure.  [never allocates] [takes arena lock]
 */
void *tfa_arena_alloc(size_t bytes);

/* Copies s (at most max bytes) into arena memory; NULL on failure. */
char *tfa_arena_strndup(const char *s, size_t max);

/* Total bytes the shim has mapped for itself: reported as its overhead. */
size_t tfa_arena_mapped_bytes(void);

/*
 * Fault injection for tests: after `successes` more successful maps, every
 * map fails.  A negative value turns injection off.
 */
void tfa_arena_inject_failure(long successes);

void tfa_arena_prefork(void);
void tfa_arena_postfork_parent(void);
void tfa_arena_postfork_child(void);

#endif /* TFA_CORE_ARENA_H */
