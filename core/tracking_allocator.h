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
 *                threads x TFA_PUBLISH_THRESHOLD bytes (and the peak count
 *                of live blocks by threads x TFA_PUBLISH_BLOCKS); totals and
 *                bytes in use are exact whenever they are read.
 *   degraded     the shim's own memory ran out: new pointers are no longer
 *                recorded and frees of unknown pointers go to the current
 *                backend.  The program continues.
 */
#ifndef TFA_CORE_TRACKING_ALLOCATOR_H
#define TFA_CORE_TRACKING_ALLOCATOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/single_threaded.h>

#include "core/allocator.h"
#include "core/ptr_table.h"
#include "core/lock.h"
#include "core/resource_mgr.h"
#include "core/sites.h"
#include "core/thread.h"

#define TFA_MAX_BACKENDS       8
#define TFA_PUBLISH_THRESHOLD  ((int64_t)64 << 10)
/*
 * The count of live blocks is published with the bytes: every block takes 8
 * allocated bytes at least, so a thread's unpublished change is at most this
 * many blocks (a check of its own cost 15 instructions of a churn operation's
 * 578, callgrind on `churn 1000000 1`).
 */
#define TFA_PUBLISH_BLOCKS     (TFA_PUBLISH_THRESHOLD / 8)
#define TFA_ID_BLOCK           1024

typedef struct tfa_tracking_allocator_s {
	tfa_allocator_wrapper_t wrapper; /* base, and the backend new pointers come from */
	tfa_allocator_t *backends[TFA_MAX_BACKENDS];
	tfa_ptr_table_t *table;
	tfa_sites_t *sites; /* per-stack statistics; NULL: none kept */
	int slot;        /* per-thread stat slot, or -1: the shared slot below */
	uint8_t device_code;
	bool degraded;
	/* Nonzero when the fast paths cannot serve: a limit, degraded, a shared slot. */
	uint8_t slow;
	/* Nonzero when the process tracker's fast path (core/shim.c) may serve:
	 * its owner asked for it (fast_wanted, the value it takes) and slow is 0. */
	uint8_t fast;
	uint8_t fast_wanted;
	int64_t bytes_limit;

	int64_t in_use TFA_ALIGNED_CACHELINE; /* published figures */
	int64_t allocated_in_use;
	int64_t peak;
	int64_t allocated_peak;
	int64_t blocks_in_use; /* live blocks, as published */
	int64_t peak_blocks;
	uint64_t next_id TFA_ALIGNED_CACHELINE;

	tfa_lock_t shared_lock TFA_ALIGNED_CACHELINE;
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

/*
 * Makes ta the owner of the process slot (TFA_SLOT_PROCESS), which exists
 * before any constructor: exiting threads publish their pending figures to it.
 */
void tfa_tracking_allocator_claim_process_slot(tfa_tracking_allocator_t *ta);

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

/*
 * The owner of ta vouches that its own fast path serves ta's current backend
 * (core/shim.c); ta->fast says when it may run.  Changing the backend withdraws it.
 */
void tfa_tracking_allocator_set_fast(tfa_tracking_allocator_t *ta, uint8_t on);

/*
 * Records p, which ta's backend made, with the record rec already packed (its
 * id taken) and asz allocated bytes: the general insert (making room,
 * replacing a stale record) and the accounting.  For fast paths whose own
 * insert could not serve.  REQUIRES: the caller holds no shard.
 */
void tfa_tracking_record_block(tfa_tracking_allocator_t *ta, const tfa_record_t *rec, size_t asz);

/*
 * Memory another API makes (CUDA, cuda_hooks/): the caller asks the API
 * itself and tells the tracker around the call.
 *   tfa_tracking_reserve    before the call: nbytes against the bytes limit
 *                           and the limit of the resource `tag` (0: none).
 *                           false: refused, nothing changed.  *reserved says
 *                           whether the tracker's own limit took the bytes.
 *   tfa_tracking_unreserve  the call failed: gives the reservation back.
 *   tfa_tracking_record_external  the call made ptr of `actual` bytes
 *                           (reserved with `nbytes`; a pitched allocation
 *                           may get more): records and counts it, with the
 *                           tracker's device code and `kind` (TFA_KIND_DEVICE,
 *                           or TFA_KIND_DEVICE_HANDLE when ptr is a handle).
 *   tfa_tracking_forget     before the free is forwarded: removes and
 *                           uncounts ptr; false (nothing done) when unknown.
 * Allocated bytes equal requested bytes for such memory.
 */
bool tfa_tracking_reserve(tfa_tracking_allocator_t *ta, size_t nbytes, uint32_t tag, bool *reserved);
void tfa_tracking_unreserve(tfa_tracking_allocator_t *ta, size_t nbytes, uint32_t tag, bool reserved);
void tfa_tracking_record_external(tfa_tracking_allocator_t *ta, uintptr_t ptr, size_t nbytes,
				  size_t actual, uint8_t kind, uint32_t stack_id, uint32_t tag,
				  bool reserved);
bool tfa_tracking_forget(tfa_tracking_allocator_t *ta, uintptr_t ptr, tfa_alloc_info_t *info);

/*
 * Sample-only tracking (TFALLOC_TRACK=sampled, core/shim.c): blocks made
 * and freed without a record.
 *   tfa_tracking_count_untracked  counts a block made (change 1: requested
 *                           bytes into the totals; bytes in use move by its
 *                           allocated size, the only size its free will
 *                           know), freed (change -1, requested unused) or
 *                           neither (0); realloc: also one realloc.
 *   tfa_tracking_unrecord   removes and uncounts ptr's record as a free
 *                           would, without freeing it; false (nothing done)
 *                           when unknown.
 */
void tfa_tracking_count_untracked(tfa_tracking_allocator_t *ta, int change, size_t requested,
				  size_t allocated, bool realloc);
bool tfa_tracking_unrecord(tfa_tracking_allocator_t *ta, uintptr_t ptr, tfa_alloc_info_t *info);

/* Whether a block made by made_by may be freed by freed_by (the shim's own calls match any). */
static inline bool
tfa_kinds_match(uint8_t made_by, uint8_t freed_by)
{
	return made_by == TFA_KIND_INTERNAL || freed_by == TFA_KIND_INTERNAL || made_by == freed_by;
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
 * that owns it; the new block's stack is stack_id (0: none).  Returns the new pointer, or NULL with *result saying why.
 * *old (when not NULL) receives ptr's record as it was, when ptr was known.
 */
void *tfa_tracking_reallocate(tfa_tracking_allocator_t *ta, void *ptr, size_t nbytes,
			      uint32_t stack_id, int *result, tfa_alloc_info_t *old);

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

/* ---- the hot path, inline: the process's malloc and free ---------------------------------- */

/* Out-of-line pieces of the inline paths below. */
size_t tfa_tracking_backend_allocated(const tfa_allocator_t *b, const void *p, size_t requested,
				      size_t alignment);
void tfa_tracking_publish(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s);
uint64_t tfa_tracking_id_block(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s);
void tfa_tracking_insert_failed(tfa_tracking_allocator_t *ta, int r, const tfa_record_t *old);

/*
 * The allocated size counted for a request: the backend's usable size, from
 * its table when it has one.  The same arguments give the same answer when a
 * block is made and when it is freed.  [hot path]
 */
static TFA_ALWAYS_INLINE size_t
tfa_tracking_allocated_of(const tfa_allocator_t *b, const void *p, size_t requested,
			  size_t alignment)
{
	const tfa_allocator_ops_t *ops = b->ops;
	size_t want = requested == 0 ? 1 : requested;

	if (alignment == 0 && want <= ops->usable_table_max && ops->usable_table != NULL)
		return ops->usable_table[(want + 7) >> 3];
	return tfa_tracking_backend_allocated(b, p, requested, alignment);
}

/* The slot's live blocks not yet published: its allocations less its frees since it last published. */
static TFA_ALWAYS_INLINE int64_t
tfa_tracking_pending_blocks(const tfa_stat_slot_t *s)
{
	return (int64_t)(s->num_allocs - s->num_frees) - s->published_blocks;
}

/*
 * Whether a thread's slot must publish: |pending| > threshold, as one
 * unsigned comparison each.  [hot path]
 */
static TFA_ALWAYS_INLINE bool
tfa_tracking_publish_due(const tfa_stat_slot_t *s)
{
	return (uint64_t)(s->pending_bytes + TFA_PUBLISH_THRESHOLD) > (uint64_t)(2 * TFA_PUBLISH_THRESHOLD)
	       || (uint64_t)(s->pending_allocated + TFA_PUBLISH_THRESHOLD)
			  > (uint64_t)(2 * TFA_PUBLISH_THRESHOLD);
}

/*
 * The peak count of live blocks, kept by the thread of a single-threaded
 * process after a change that may have made a block: the live blocks are
 * the published count and this slot's pending change, which is left pending
 * (a free need not publish anything; with threads it goes with the bytes).
 * No atomic: the peak is exact.  [hot path]
 */
static TFA_ALWAYS_INLINE void
tfa_tracking_raise_blocks_single(tfa_tracking_allocator_t *ta, const tfa_stat_slot_t *s)
{
	int64_t blocks = __atomic_load_n(&ta->blocks_in_use, __ATOMIC_RELAXED) + tfa_tracking_pending_blocks(s);

	if (blocks > __atomic_load_n(&ta->peak_blocks, __ATOMIC_RELAXED))
		__atomic_store_n(&ta->peak_blocks, blocks, __ATOMIC_RELAXED);
}

/*
 * Moves the slot's pending change of bytes in use into the published figures
 * when it must.  With one thread: at once, with no atomic, so the peak is
 * exact.  With threads: when the balance moved by TFA_PUBLISH_THRESHOLD, so
 * threads do not fight over one cache line.  A shared slot: always.
 * grew: the change may have raised bytes in use (a free never sets a peak).
 * own_slot: s is a per-thread slot (the fast paths know it; others ask).
 * [hot path]
 */
static TFA_ALWAYS_INLINE void
tfa_tracking_settle_after(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s, bool grew,
			  bool own_slot)
{
	own_slot = own_slot || ta->slot >= 0;
	if (tfa_likely(__libc_single_threaded) && own_slot) {
		int64_t before = __atomic_load_n(&ta->in_use, __ATOMIC_RELAXED);
		int64_t now = before + s->pending_bytes;
		/* Leaving a new peak: its breakdown by site is the sites' figures now. */
		if (now < before && ta->sites != NULL && before == __atomic_load_n(&ta->peak, __ATOMIC_RELAXED)
		    && before > __atomic_load_n(&ta->sites->snapshot_bytes, __ATOMIC_RELAXED))
			tfa_sites_snapshot(ta->sites, before);
		int64_t anow =
			__atomic_load_n(&ta->allocated_in_use, __ATOMIC_RELAXED) + s->pending_allocated;
		__atomic_store_n(&ta->in_use, now, __ATOMIC_RELAXED);
		__atomic_store_n(&ta->allocated_in_use, anow, __ATOMIC_RELAXED);
		s->pending_bytes = 0;
		s->pending_allocated = 0;
		if (grew && now > __atomic_load_n(&ta->peak, __ATOMIC_RELAXED))
			__atomic_store_n(&ta->peak, now, __ATOMIC_RELAXED);
		if (grew && anow > __atomic_load_n(&ta->allocated_peak, __ATOMIC_RELAXED))
			__atomic_store_n(&ta->allocated_peak, anow, __ATOMIC_RELAXED);
		if (grew)
			tfa_tracking_raise_blocks_single(ta, s);
		return;
	}
	if (!own_slot || tfa_tracking_publish_due(s))
		tfa_tracking_publish(ta, s);
}

/* tfa_tracking_settle_after for any change. */
static TFA_ALWAYS_INLINE void
tfa_tracking_settle(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s)
{
	tfa_tracking_settle_after(ta, s, true, false);
}

/* Counts a block made (grew) or freed in the thread's own slot.  [hot path] */
static TFA_ALWAYS_INLINE void
tfa_tracking_count(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s, bool grew, size_t bytes,
		   size_t allocated)
{
	s->pending_bytes += grew ? (int64_t)bytes : -(int64_t)bytes;
	s->pending_allocated += grew ? (int64_t)allocated : -(int64_t)allocated;
	tfa_tracking_settle_after(ta, s, grew, true);
}

/* Every case tfa_tracking_allocate_fast does not serve (limits, internal calls, ...). */
void *tfa_tracking_allocate_slow(tfa_tracking_allocator_t *ta, size_t alignment, size_t nbytes,
				 const tfa_allocation_attrs_t *attrs);

/*
 * tfa_tracking_allocate, inline for the shim's entry points: the common case
 * here (a registered thread with its own slot, no limit, a program's call, a
 * backend with shortcuts), with its malloc_fast when no alignment or zero fill
 * is asked; everything else in tfa_tracking_allocate_slow.  [hot path]
 */
static TFA_ALWAYS_INLINE void *
tfa_tracking_allocate_fast(tfa_tracking_allocator_t *ta, size_t alignment, size_t nbytes,
			   const tfa_allocation_attrs_t *attrs)
{
	tfa_thread_rec_t *trec = tfa_tls.rec;
	tfa_allocator_t *b = __atomic_load_n(&ta->wrapper.wrapped, __ATOMIC_ACQUIRE);
	void *(*fast)(size_t) = b->ops->malloc_fast;

	if (tfa_unlikely((__atomic_load_n(&ta->slow, __ATOMIC_RELAXED) != 0) | (trec == NULL)
			 | (trec == &tfa_orphan_rec) | (nbytes > TFA_REQUESTED_MAX)
			 | (attrs->kind == TFA_KIND_INTERNAL) | (fast == NULL) | (tfa_tls.tag != 0)))
		return tfa_tracking_allocate_slow(ta, alignment, nbytes, attrs);
	size_t want = nbytes == 0 ? 1 : nbytes;
	void *p;
	if (tfa_likely(alignment == 0 && !attrs->zero_fill))
		p = fast(want);
	else
		p = tfa_allocator_allocate_raw(b, alignment, want, attrs);
	if (tfa_unlikely(p == NULL))
		return NULL;
	size_t asz = tfa_tracking_allocated_of(b, p, nbytes, alignment);
	uint64_t lg_align = alignment == 0 ? 0 : (uint64_t)__builtin_ctzl(alignment);
	tfa_stat_slot_t *s = &trec->slots[ta->slot];
	tfa_record_t rec = {
		.ptr = (uintptr_t)p,
		.size_meta = (uint64_t)nbytes | ((uint64_t)(b->backend_id & 7) << 47)
			     | ((uint64_t)(attrs->kind & 7) << 50)
			     | ((uint64_t)(ta->device_code & 31) << 53) | ((lg_align & 63) << 58),
		.stack_id = attrs->stack_id,
		.tag = tfa_tls.tag,
	};
	tfa_record_t old;

	/* Record and count in one critical section: a fork sees both or neither. */
	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, (uintptr_t)p);
	uint64_t id = tfa_likely(s->next_id < s->id_end) ? s->next_id++ : tfa_tracking_id_block(ta, s);
	rec.id_thread = (id & TFA_ID_MAX) | ((uint64_t)(trec->index & 0xffffff) << 40);
	int r = tfa_ptr_held_insert_room(ta->table, &held, &rec, &old);
	if (tfa_likely(r >= 0)) {
		s->num_allocs++;
		s->total_bytes += nbytes;
		s->total_allocated_bytes += asz;
		if (nbytes > s->largest_alloc_size)
			s->largest_alloc_size = nbytes;
		tfa_tracking_count(ta, s, true, nbytes, asz);
		if (rec.stack_id != 0 && ta->sites != NULL)
			tfa_sites_alloc(ta->sites, rec.stack_id, nbytes);
	}
	tfa_ptr_table_release(held);
	if (tfa_unlikely(r != 0))
		tfa_tracking_insert_failed(ta, r, &old);
	return p;
}

/*
 * free and operator delete of ptr by a call of kind.  Returns TFA_FREE_OK or
 * TFA_FREE_MISMATCH (then *info has the record) as tfa_tracking_deallocate
 * does, to which every other case goes.  [hot path]
 */
static TFA_ALWAYS_INLINE int
tfa_tracking_free(tfa_tracking_allocator_t *ta, void *ptr, uint8_t kind, tfa_alloc_info_t *info)
{
	tfa_thread_rec_t *trec = tfa_tls.rec;
	tfa_record_t rec;

	if (tfa_unlikely((__atomic_load_n(&ta->slow, __ATOMIC_RELAXED) != 0) | (trec == NULL)
			 | (trec == &tfa_orphan_rec)))
		return tfa_tracking_deallocate(ta, ptr, kind, info);
	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, (uintptr_t)ptr);
	if (tfa_unlikely(!tfa_ptr_held_remove(held, (uintptr_t)ptr, &rec))) {
		tfa_ptr_table_release(held);
		return tfa_tracking_deallocate(ta, ptr, kind, info);
	}
	uint64_t meta = rec.size_meta;
	size_t requested = meta & TFA_REQUESTED_MAX;
	unsigned made_by = (unsigned)(meta >> 50) & 7;
	unsigned lg_align = (unsigned)(meta >> 58);
	size_t alignment = lg_align == 0 ? 0 : (size_t)1 << lg_align;
	tfa_allocator_t *b = ta->backends[(meta >> 47) & 7];
	if (tfa_likely(made_by != TFA_KIND_INTERNAL)) {
		size_t asz = tfa_tracking_allocated_of(b, ptr, requested, alignment);
		tfa_stat_slot_t *s = &trec->slots[ta->slot];
		s->num_frees++;
		/* Counted first: leaving the peak snapshots the sites before one changes. */
		tfa_tracking_count(ta, s, false, requested, asz);
		if (rec.stack_id != 0 && ta->sites != NULL)
			tfa_sites_free(ta->sites, rec.stack_id, requested);
		if (tfa_unlikely(rec.tag != 0))
			tfa_res_uncharge(rec.tag, (unsigned)(meta >> 53) & 31, requested, asz);
	}
	tfa_ptr_table_release(held);

	/* Counted before the backend can hand the address out again. */
	size_t want = requested == 0 ? 1 : requested;
	if (alignment == 0 && b->ops->free_sized_fast != NULL)
		b->ops->free_sized_fast(ptr, want);
	else
		tfa_allocator_deallocate_raw_sized(b, ptr, want, alignment);
	if (tfa_likely(made_by == kind || made_by == TFA_KIND_INTERNAL || kind == TFA_KIND_INTERNAL))
		return TFA_FREE_OK;
	if (info != NULL)
		tfa_record_unpack(&rec, info);
	return TFA_FREE_MISMATCH;
}

#endif /* TFA_CORE_TRACKING_ALLOCATOR_H */
