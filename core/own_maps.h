/* SPDX-License-Identifier: MIT */
/*
 * The mappings the shim made for itself: its arena (pointer table, stack
 * table, records) and its private jemalloc's extents and metadata.  The leak
 * scan must not take them for the program's memory: the pointer table holds
 * every live block's address, jemalloc's metadata the start of every slab.
 *
 * libtfalloc.so is linked with --wrap=mmap,--wrap=munmap, so every anonymous
 * mmap made from its code (core/arena.c, the private jemalloc) lands here
 * (preload/own_maps_wrap.c).  A fixed table in bss (no allocation); when it
 * is full, tfa_own_maps_complete() says so and the scan trusts no anonymous
 * memory.
 */
#ifndef TFA_CORE_OWN_MAPS_H
#define TFA_CORE_OWN_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/leak_scan.h"

void tfa_own_maps_add(uintptr_t lo, size_t len);
void tfa_own_maps_remove(uintptr_t lo, size_t len);
/* Whether every own mapping was recorded (the table never overflowed), and any was. */
bool tfa_own_maps_complete(void);
/* Whether addr lies in a recorded mapping. */
bool tfa_own_maps_contains(uintptr_t addr);
/*
 * Copies the recorded ranges into out (room for max), sorted by address;
 * returns how many (0 when more than max).
 */
size_t tfa_own_maps_snapshot(tfa_leak_range_t *out, size_t max);
/*
 * The backend's mappings: every recorded mapping but those core/arena.c made
 * (it says so around its mmap calls with tfa_own_maps_arena_begin/end).  In
 * libtfalloc.so that is the private jemalloc's memory: its blocks and its
 * metadata.  tfa_own_maps_backend_contains answers without a lock (a
 * per-thread cache of the last range found, then a scan checked by a
 * sequence count); it is how sample-only tracking (TFALLOC_TRACK=sampled)
 * tells a block of jemalloc's from a foreign pointer.  [async-signal-safe]
 */
void tfa_own_maps_arena_begin(void);
void tfa_own_maps_arena_end(void);
bool tfa_own_maps_backend_lookup(uintptr_t addr);

/* The range this thread found last, and the sequence count then (tfa_own_maps_backend_lookup). */
typedef struct tfa_own_maps_cache_s {
	uintptr_t lo, hi;
	uint64_t seq;
} tfa_own_maps_cache_t;
extern TFA_HIDDEN TFA_TLS tfa_own_maps_cache_t tfa_own_maps_cache;
extern TFA_HIDDEN uint64_t tfa_own_maps_be_seq;

static TFA_ALWAYS_INLINE bool
tfa_own_maps_backend_contains(uintptr_t addr)
{
	tfa_own_maps_cache_t *c = &tfa_own_maps_cache;

	if (tfa_likely(addr - c->lo < c->hi - c->lo)
	    && tfa_likely(__atomic_load_n(&tfa_own_maps_be_seq, __ATOMIC_ACQUIRE) == c->seq))
		return true;
	return tfa_own_maps_backend_lookup(addr);
}

/* Entries in the table now. */
size_t tfa_own_maps_count(void);
/* For tests: the backend's ranges now (those that touch are merged). */
size_t tfa_own_maps_backend_count(void);

void tfa_own_maps_prefork(void);
void tfa_own_maps_postfork_parent(void);
void tfa_own_maps_postfork_child(void);

#endif /* TFA_CORE_OWN_MAPS_H */
