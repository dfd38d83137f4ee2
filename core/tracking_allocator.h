/* SPDX-License-Identifier: MIT */
/*
 * TrackingAllocator: wraps the allocator the registry chose and records, per
 * live pointer, the requested size, the allocation id, the thread, the stack
 * id and the resource tag (core/ptr_table.h); the allocated size is asked of
 * the backend.  It keeps TensorFlow's total_bytes / high_watermark /
 * allocated figures (tfa_tracking_allocator_get_sizes) and full
 * AllocatorStats in requested and in allocated bytes.
 *
 * Glossary:
 *   backend      an allocator new pointers come from; the tracker remembers
 *                up to 8 by backend id, and every pointer goes back to the
 *                backend that made it even after the tracker switched.
 *   published    the tracker-wide bytes-in-use counters.  Each thread keeps
 *                its change in its stat slot and publishes it when it grows
 *                past the publish threshold, so threads do not fight over one
 *                cache line.  A single-threaded process, or one with a bytes
 *                limit, publishes on every call: its peak is exact.  With
 *                several threads the peak may miss by at most
 *                threads x TFA_PUBLISH_THRESHOLD bytes; totals and bytes in
 *                use are exact whenever they are read.
 *   degraded     the shim's own memory ran out: new pointers are no longer
 *                recorded and frees of unknown pointers go to the current
 *                backend.  The program continues.
 */
#ifndef TFA_CORE_TRACKING_ALLOCATOR_H
#define TFA_CORE_TRACKING_ALLOCATOR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/allocator.h"
#include "core/ptr_table.h"
#include "core/spinlock.h"
#include "core/thread.h"

#define TFA_MAX_BACKENDS       8
#define TFA_PUBLISH_THRESHOLD  ((int64_t)64 << 10)
#define TFA_ID_BLOCK           1024

typedef struct tfa_tracking_allocator_s {
	tfa_allocator_wrapper_t wrapper; /* base, and the backend new pointers come from */
	tfa_allocator_t *backends[TFA_MAX_BACKENDS];
	tfa_ptr_table_t *table;
	int slot;        /* per-thread stat slot, or -1: the shared slot below */
	uint8_t device_code;
	bool degraded;
	/* Nonzero when the fast paths cannot serve: a limit, degraded, a shared slot. */
	uint8_t slow;
	int64_t bytes_limit;

	int64_t in_use TFA_ALIGNED_CACHELINE; /* published figures */
	int64_t allocated_in_use;
	int64_t peak;
	int64_t allocated_peak;
	uint64_t next_id TFA_ALIGNED_CACHELINE;

	tfa_spinlock_t shared_lock TFA_ALIGNED_CACHELINE;
	tfa_stat_slot_t shared; /* slot == -1 */
} tfa_tracking_allocator_t;

extern const tfa_allocator_ops_t tfa_tracking_allocator_ops;

/*
 * Initialises ta around `wrapped`, recording into `table` (zeroed storage).
 * per_thread_stats asks for a per-thread stat slot; when none is free the
 * tracker uses a shared, locked one.  Returns 0 or -EINVAL.
 */
int tfa_tracking_allocator_init(tfa_tracking_allocator_t *ta, tfa_allocator_t *wrapped,
				tfa_ptr_table_t *table, bool per_thread_stats) TFA_MUST_CHECK;

/* Releases the stat slot and the table's memory. */
void tfa_tracking_allocator_destroy(tfa_tracking_allocator_t *ta);

/* New pointers come from `backend` from now on; old ones still go back to theirs. */
void tfa_tracking_allocator_set_backend(tfa_tracking_allocator_t *ta, tfa_allocator_t *backend);

/* The backend that pointers with this backend id belong to (NULL: none). */
static inline tfa_allocator_t *
tfa_tracking_allocator_backend(const tfa_tracking_allocator_t *ta, unsigned backend_id)
{
	return backend_id < TFA_MAX_BACKENDS ? ta->backends[backend_id] : NULL;
}

static inline tfa_allocator_t *
tfa_tracking_allocator_base(tfa_tracking_allocator_t *ta)
{
	return &ta->wrapper.base;
}

/* 0: no limit.  Requests that would take bytes in use past the limit fail. */
void tfa_tracking_allocator_set_bytes_limit(tfa_tracking_allocator_t *ta, int64_t limit);

/*
 * Allocates and records.  attrs->kind TFA_KIND_INTERNAL records the pointer
 * (so that its free is recognised) without counting it.  Returns NULL when the
 * backend fails, the limit refuses, or the size cannot be recorded.  [hot path]
 */
void *tfa_tracking_allocate(tfa_tracking_allocator_t *ta, size_t alignment, size_t nbytes,
			    const tfa_allocation_attrs_t *attrs);

/* Results of tfa_tracking_deallocate and tfa_tracking_reallocate. */
enum tfa_free_result_e {
	TFA_FREE_OK = 0,
	TFA_FREE_MISMATCH = 1, /* freed, but by a call of another kind (info has the maker's) */
	TFA_FREE_DOUBLE = -1,  /* not in the table, and freed recently: nothing done */
	TFA_FREE_INVALID = -2, /* not in the table: nothing done */
	TFA_FREE_NOMEM = -3,   /* realloc only: the backend refused; the old block is intact */
};

/*
 * Frees ptr if the tracker handed it out.  `kind` is the kind of the freeing
 * call (TFA_KIND_MALLOC for free, TFA_KIND_NEW for delete, ...).  *info (when
 * not NULL) receives the record of the freed pointer.  Pointers the tracker
 * does not know never reach a backend (unless degraded).  [hot path]
 */
int tfa_tracking_deallocate(tfa_tracking_allocator_t *ta, void *ptr, uint8_t kind,
			    tfa_alloc_info_t *info);

/*
 * realloc: resizes ptr (REQUIRES: ptr != NULL, nbytes > 0) within the backend
 * that owns it.  Returns the new pointer, or NULL with *result saying why.
 */
void *tfa_tracking_reallocate(tfa_tracking_allocator_t *ta, void *ptr, size_t nbytes, int *result);

/* Looks ptr up; false when the tracker did not hand it out. */
bool tfa_tracking_lookup(tfa_tracking_allocator_t *ta, const void *ptr, tfa_alloc_info_t *info);

/* The allocated size of a recorded pointer, as the backend reports it. */
size_t tfa_tracking_backend_usable_size(tfa_tracking_allocator_t *ta, const tfa_alloc_info_t *info);

/*
 * TensorFlow's GetSizes: total allocated bytes ever, the high watermark of
 * allocated bytes in use, allocated bytes in use now.
 */
void tfa_tracking_allocator_get_sizes(tfa_tracking_allocator_t *ta, uint64_t *total_bytes,
				      uint64_t *high_watermark, uint64_t *allocated);

/* Full statistics, merged over every thread.  Always true. */
bool tfa_tracking_allocator_get_stats(tfa_tracking_allocator_t *ta, tfa_allocator_stats_t *out);

/* Publishes the calling thread's pending deltas (before a report or at fork). */
void tfa_tracking_allocator_publish_self(tfa_tracking_allocator_t *ta);

#endif /* TFA_CORE_TRACKING_ALLOCATOR_H */
