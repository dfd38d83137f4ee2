/* SPDX-License-Identifier: MIT */
/*
 * Allocation sites: statistics per stack id (core/stack_table.h), so that a
 * report answers "which code holds this memory", now and at the peak.
 *
 * Glossary:
 *   site      the allocations made with one stack id.  Counts: allocations,
 *             total requested bytes, bytes and blocks in use now, bytes in
 *             use at the process's peak.
 *   snapshot  the per-site bytes in use at the moment of the peak, kept
 *             lazily: taking one only bumps an epoch; a site copies its
 *             in-use figure into its at-peak figure the next time it changes
 *             (it has not changed since the snapshot, so that figure is the
 *             one the snapshot saw).  O(1) per operation whatever the number
 *             of sites, and the breakdown of the peak sums to the peak.
 *
 * Memory grows with the number of distinct stacks: a two-level array of
 * chunks mapped on first use.  Counters are updated with relaxed atomics.
 * With several threads the peak itself is approximate (see
 * core/tracking_allocator.h, "published"), and so is its breakdown.
 */
#ifndef TFA_CORE_SITES_H
#define TFA_CORE_SITES_H

#include <stdbool.h>
#include <stdint.h>

#include <sys/single_threaded.h>

#include "core/common.h"
#include "core/thread.h"

#define TFA_SITES_CHUNK_LG 10
#define TFA_SITES_CHUNK    (1u << TFA_SITES_CHUNK_LG)
#define TFA_SITES_CHUNKS   4096 /* 4M distinct stacks */

typedef struct tfa_site_s {
	uint64_t allocs;
	uint64_t total_bytes;
	int64_t in_use_bytes;
	int64_t in_use_blocks;
	int64_t peak_bytes; /* in use at the process's peak (valid when epoch is current) */
	uint64_t epoch;     /* the snapshot peak_bytes belongs to */
} tfa_site_t;

typedef struct tfa_sites_s {
	tfa_site_t *chunks[TFA_SITES_CHUNKS];
	uint64_t epoch;         /* snapshots taken */
	int64_t snapshot_bytes; /* bytes in use at the last snapshot */
	bool thread_cached;     /* threads' site caches (tfa_sites_alloc_cached) hold part of the figures */
} tfa_sites_t;

tfa_site_t *tfa_sites_get_slow(tfa_sites_t *t, uint32_t stack_id);

/* The site of a stack id, mapped on first use; NULL when memory ran out. [hot path] */
static TFA_ALWAYS_INLINE tfa_site_t *
tfa_sites_get(tfa_sites_t *t, uint32_t stack_id)
{
	tfa_site_t *c = __atomic_load_n(&t->chunks[(stack_id >> TFA_SITES_CHUNK_LG) % TFA_SITES_CHUNKS],
					__ATOMIC_ACQUIRE);
	if (tfa_likely(c != NULL) && tfa_likely((stack_id >> TFA_SITES_CHUNK_LG) < TFA_SITES_CHUNKS))
		return &c[stack_id & (TFA_SITES_CHUNK - 1)];
	return tfa_sites_get_slow(t, stack_id);
}

/* Brings a site's at-peak figure up to the last snapshot before it changes. */
static TFA_ALWAYS_INLINE void
tfa_site_catch_up(tfa_sites_t *t, tfa_site_t *s)
{
	uint64_t e = __atomic_load_n(&t->epoch, __ATOMIC_ACQUIRE);
	if (tfa_unlikely(__atomic_load_n(&s->epoch, __ATOMIC_RELAXED) != e)) {
		__atomic_store_n(&s->peak_bytes, __atomic_load_n(&s->in_use_bytes, __ATOMIC_RELAXED),
				 __ATOMIC_RELAXED);
		__atomic_store_n(&s->epoch, e, __ATOMIC_RELEASE);
	}
}

/*
 * Adds to a site's counter: a locked add with threads; with one thread an add
 * without the lock prefix, a single instruction all the same (a signal
 * handler's allocation in between cannot split it).  [hot path]
 */
static TFA_ALWAYS_INLINE void
tfa_site_add(void *counter, int64_t delta, bool single)
{
	if (single)
		tfa_local_add_u64(counter, delta);
	else
		__atomic_fetch_add((int64_t *)counter, delta, __ATOMIC_RELAXED);
}

/* A block of `bytes` made at stack_id.  [hot path] */
static TFA_ALWAYS_INLINE void
tfa_sites_alloc(tfa_sites_t *t, uint32_t stack_id, uint64_t bytes)
{
	tfa_site_t *s = tfa_sites_get(t, stack_id);
	if (tfa_unlikely(s == NULL))
		return;
	bool single = __libc_single_threaded;
	tfa_site_catch_up(t, s);
	tfa_site_add(&s->allocs, 1, single);
	tfa_site_add(&s->total_bytes, (int64_t)bytes, single);
	tfa_site_add(&s->in_use_bytes, (int64_t)bytes, single);
	tfa_site_add(&s->in_use_blocks, 1, single);
}

/* A block of `bytes` made at stack_id was freed.  [hot path] */
static TFA_ALWAYS_INLINE void
tfa_sites_free(tfa_sites_t *t, uint32_t stack_id, uint64_t bytes)
{
	tfa_site_t *s = tfa_sites_get(t, stack_id);
	if (tfa_unlikely(s == NULL))
		return;
	bool single = __libc_single_threaded;
	tfa_site_catch_up(t, s);
	tfa_site_add(&s->in_use_bytes, -(int64_t)bytes, single);
	tfa_site_add(&s->in_use_blocks, -1, single);
}

/*
 * A thread's cached figures move to their site when its bytes in use there
 * change by this much: the breakdown of the peak is then off by at most this
 * per thread and cached site.
 */
#define TFA_SITE_CACHE_FLUSH (64 * 1024)

/* Out of line: the cache entry d moves to stack_id (false: no memory, count directly). */
bool tfa_sites_cache_switch(tfa_sites_t *t, tfa_site_delta_t *d, uint32_t stack_id);
void tfa_sites_cache_flush(tfa_sites_t *t, tfa_site_delta_t *d);

static TFA_ALWAYS_INLINE void
tfa_site_delta_add(void *field, int64_t delta)
{
	/* Only this thread writes; readers (a profile being written) read it as it is. */
	__atomic_store_n((int64_t *)field, __atomic_load_n((int64_t *)field, __ATOMIC_RELAXED) + delta,
			 __ATOMIC_RELAXED);
}

/*
 * tfa_sites_alloc and tfa_sites_free with threads, for a table whose
 * thread_cached is set, by the thread of record r outside any signal handler
 * of its own shim call: the change goes to r's cache of sites.  [hot path]
 */
static TFA_ALWAYS_INLINE void
tfa_sites_change_cached(tfa_sites_t *t, tfa_thread_rec_t *r, uint32_t stack_id, int64_t bytes, bool made)
{
	tfa_site_delta_t *d = &r->site_cache[stack_id % TFA_SITE_CACHE];

	if (tfa_unlikely(d->stack_id != stack_id) && tfa_unlikely(!tfa_sites_cache_switch(t, d, stack_id))) {
		if (made)
			tfa_sites_alloc(t, stack_id, (uint64_t)bytes);
		else
			tfa_sites_free(t, stack_id, (uint64_t)-bytes);
		return;
	}
	if (made) {
		tfa_site_delta_add(&d->allocs, 1);
		tfa_site_delta_add(&d->total_bytes, bytes);
	}
	tfa_site_delta_add(&d->in_use_bytes, bytes);
	tfa_site_delta_add(&d->in_use_blocks, made ? 1 : -1);
	if (tfa_unlikely((uint64_t)(d->in_use_bytes + TFA_SITE_CACHE_FLUSH) > 2 * TFA_SITE_CACHE_FLUSH))
		tfa_sites_cache_flush(t, d);
}

/*
 * The process is at its peak (in_use bytes) and about to go down: the sites'
 * figures now are the breakdown of the peak.  [hot path, rare]
 */
void tfa_sites_snapshot(tfa_sites_t *t, int64_t in_use);

/*
 * Calls fn for every site with any allocation.  peak_bytes is the site's
 * share of the peak: its figure at the last snapshot, or its figure now when
 * the process is at its peak now (peak == in_use).  With thread_cached, the
 * figures threads hold in their caches are added.  Maps memory for that (never
 * malloc).
 */
void tfa_sites_foreach(tfa_sites_t *t, int64_t peak, int64_t in_use,
		       void (*fn)(void *arg, uint32_t stack_id, const tfa_site_t *site), void *arg);

/* Bytes mapped for site statistics. */
uint64_t tfa_sites_bytes(const tfa_sites_t *t);

#endif /* TFA_CORE_SITES_H */
