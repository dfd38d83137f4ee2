/* SPDX-License-Identifier: MIT */
/*
 * Test backends: allocators over the C library's malloc whose numbers the
 * unit tests know exactly.  The tests are not preloaded, so malloc is fine.
 *
 * Glossary:
 *   exact     allocated size == requested size (good_size returns nbytes):
 *             the seed's TrackingAllocator tuples hold over it.
 *             backend_id TFA_BACKEND_TEST0.
 *   rounding  allocated size == requested size rounded up to 16.
 *             backend_id TFA_BACKEND_TEST1.
 *   spy       implements every op of the table, the optional ones included,
 *             so that a decorator's forwarding can be counted.
 *
 * Every backend counts the calls of each op and the blocks and bytes it has
 * live.  A block carries a header with a magic number; a free of a pointer
 * the backend did not hand out is counted in `foreign_frees` and otherwise
 * ignored, so a test can assert that nothing foreign reached the backend.
 * Counters are updated atomically: the backends are thread-safe.
 */
#ifndef TFA_TEST_SUPPORT_EXACT_BACKEND_H
#define TFA_TEST_SUPPORT_EXACT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/allocator.h"

/* Calls of each op, plus what is live. */
typedef struct tfa_test_counts_s {
	uint64_t allocate_raw;
	uint64_t deallocate_raw;
	uint64_t tracks_allocation_sizes;
	uint64_t requested_size;
	uint64_t allocated_size;
	uint64_t allocation_id;
	uint64_t allocated_size_slow;
	uint64_t get_stats;
	uint64_t clear_stats;
	uint64_t reallocate_raw;
	uint64_t deallocate_raw_sized;
	uint64_t good_size;

	uint64_t live_blocks;   /* blocks handed out and not yet freed */
	uint64_t live_bytes;    /* their requested bytes */
	uint64_t foreign_frees; /* frees of pointers this backend never made */
	uint64_t failed_allocs; /* allocations refused (fail_all, or malloc failed) */
} tfa_test_counts_t;

typedef struct tfa_test_backend_s {
	tfa_allocator_t base; /* first: the tfa_allocator_t * of this backend */
	size_t round;         /* allocated size = requested rounded up to this (1: exact) */
	bool fail_all;        /* every allocation fails (NULL) while set */
	uint64_t next_serial; /* the spy's allocation ids: 1, 2, ... */
	tfa_test_counts_t counts;
} tfa_test_backend_t;

/* Exact backend: allocated == requested.  backend_id TFA_BACKEND_TEST0. */
void tfa_test_backend_init_exact(tfa_test_backend_t *tb);

/* Rounding backend: allocated == requested rounded up to 16.  backend_id TFA_BACKEND_TEST1. */
void tfa_test_backend_init_rounding(tfa_test_backend_t *tb);

/*
 * Spy backend: exact sizes, every optional op implemented (tracks sizes,
 * allocation ids 1, 2, ..., its own stats, realloc, sized free), each counted.
 * backend_id as given (TFA_BACKEND_TEST0..TEST2).
 */
void tfa_test_backend_init_spy(tfa_test_backend_t *tb, uint8_t backend_id);

static inline tfa_allocator_t *
tfa_test_backend_base(tfa_test_backend_t *tb)
{
	return &tb->base;
}

/* A consistent snapshot of the counters (each read atomically). */
void tfa_test_backend_counts(const tfa_test_backend_t *tb, tfa_test_counts_t *out);

/* The allocated size the backend gives a request of nbytes. */
size_t tfa_test_backend_size_for(const tfa_test_backend_t *tb, size_t nbytes);

/* Whether p is a live block of this backend (header magic intact). */
bool tfa_test_backend_owns(const tfa_test_backend_t *tb, const void *p);

#endif /* TFA_TEST_SUPPORT_EXACT_BACKEND_H */
