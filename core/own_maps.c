/* SPDX-License-Identifier: MIT */
/* The shim's own mappings (see core/own_maps.h). */
#include "core/own_maps.h"

#include "core/common.h"
#include "core/lock.h"

/* The pointer table maps each of its 4096 shards apart; jemalloc's extents grow geometrically. */
#define OWN_MAX 16384

static tfa_leak_range_t own[OWN_MAX];
static size_t nown;
static bool overflowed;
static tfa_lock_t own_lock = TFA_LOCK_INIT;

/*
 * The backend's ranges (not the arena's), for tfa_own_maps_backend_contains:
 * changed under own_lock with seq odd meanwhile; readers scan without a lock
 * and trust the answer when seq was even and unchanged.  More ranges than
 * this: the locked scan of own[] (be_overflowed).
 */
#define BE_MAX 512
static tfa_leak_range_t be[BE_MAX];
static size_t nbe;
static bool be_overflowed;
uint64_t tfa_own_maps_be_seq;
#define be_seq tfa_own_maps_be_seq
static TFA_TLS uint32_t arena_mapping;
TFA_TLS tfa_own_maps_cache_t tfa_own_maps_cache;

void
tfa_own_maps_arena_begin(void)
{
	arena_mapping++;
}

void
tfa_own_maps_arena_end(void)
{
	arena_mapping--;
}

/* Takes [lo, hi) out of the ranges t[0..*n): an entry is cut, split or dropped. */
static void
ranges_remove(tfa_leak_range_t *t, size_t *n, size_t max, bool *overflow, uintptr_t lo, uintptr_t hi)
{
	for (size_t i = 0; i < *n;) {
		tfa_leak_range_t *r = &t[i];
		if (r->hi <= lo || r->lo >= hi) {
			i++;
			continue;
		}
		if (r->lo < lo && r->hi > hi) {
			/* The middle goes: two pieces. */
			if (*n < max) {
				t[*n].lo = hi;
				t[*n].hi = r->hi;
				(*n)++;
			} else {
				*overflow = true;
			}
			r->hi = lo;
			i++;
		} else if (r->lo < lo) {
			r->hi = lo;
			i++;
		} else if (r->hi > hi) {
			r->lo = hi;
			i++;
		} else {
			*r = t[--(*n)];
		}
	}
}

/*
 * gcc's ThreadSanitizer rejects fences: under it the writer's step is an
 * acquire-release read-modify-write (later stores stay after it) and the
 * reader's second look at the count one too (earlier loads stay before it),
 * as the fences order them.  Only there: a reader's write would pass the
 * count's line between every core that frees.
 */
#ifdef __SANITIZE_THREAD__
#	define BE_TSAN 1
#else
#	define BE_TSAN 0
#endif

static void
be_begin(void)
{
#if BE_TSAN
	(void)__atomic_fetch_add(&be_seq, 1, __ATOMIC_ACQ_REL);
#else
	__atomic_store_n(&be_seq, be_seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

/* The count again, after the loads it guards. */
static uint64_t
be_seq_again(void)
{
#if BE_TSAN
	return __atomic_fetch_add(&be_seq, 0, __ATOMIC_ACQ_REL);
#else
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&be_seq, __ATOMIC_RELAXED);
#endif
}

static void
be_end(void)
{
	__atomic_store_n(&be_seq, be_seq + 1, __ATOMIC_RELEASE);
}

bool
tfa_own_maps_backend_lookup(uintptr_t addr)
{
	uint64_t seq = __atomic_load_n(&be_seq, __ATOMIC_ACQUIRE);

	for (int tries = 0; tries < 4 && (seq & 1) == 0; tries++) {
		size_t n = __atomic_load_n(&nbe, __ATOMIC_RELAXED);
		bool over = __atomic_load_n(&be_overflowed, __ATOMIC_RELAXED);
		uintptr_t lo = 0, hi = 0;
		for (size_t i = 0; i < n && i < BE_MAX; i++) {
			uintptr_t l = __atomic_load_n(&be[i].lo, __ATOMIC_RELAXED);
			uintptr_t h = __atomic_load_n(&be[i].hi, __ATOMIC_RELAXED);
			if (addr >= l && addr < h) {
				lo = l;
				hi = h;
				break;
			}
		}
		uint64_t again = be_seq_again();
		if (again != seq) {
			seq = again;
			continue;
		}
		if (hi != 0) {
			tfa_own_maps_cache.lo = lo;
			tfa_own_maps_cache.hi = hi;
			tfa_own_maps_cache.seq = seq;
			return true;
		}
		if (!over)
			return false;
		break;
	}
	/* Changing all the time, or too many ranges: the locked scan. */
	tfa_lock(&own_lock);
	bool in = false;
	for (size_t i = 0; i < nbe && !in; i++)
		in = addr >= be[i].lo && addr < be[i].hi;
	if (!in && be_overflowed)
		in = true; /* not known: taken for the backend's, as without the check */
	tfa_unlock(&own_lock);
	return in;
}

/*
 * [lo, hi) joins the backend's ranges, merged with those it touches: jemalloc
 * maps its metadata a page at a time and its extents side by side (python3
 * with PYTHONMALLOC=malloc: 49 ranges unmerged), and a lookup that misses the
 * thread's last range scans them all.
 */
static void
be_add(uintptr_t lo, uintptr_t hi)
{
	for (size_t i = 0; i < nbe;) {
		if (be[i].hi < lo || be[i].lo > hi) {
			i++;
			continue;
		}
		lo = be[i].lo < lo ? be[i].lo : lo;
		hi = be[i].hi > hi ? be[i].hi : hi;
		be[i] = be[--nbe];
	}
	if (nbe < BE_MAX) {
		be[nbe].lo = lo;
		be[nbe].hi = hi;
		nbe++;
	} else {
		be_overflowed = true;
	}
}

void
tfa_own_maps_add(uintptr_t lo, size_t len)
{
	if (len == 0)
		return;
	tfa_lock(&own_lock);
	if (nown < OWN_MAX) {
		own[nown].lo = lo;
		own[nown].hi = lo + len;
		nown++;
	} else {
		overflowed = true;
	}
	if (arena_mapping == 0) {
		be_begin();
		be_add(lo, lo + len);
		be_end();
	}
	tfa_unlock(&own_lock);
}

/* Takes [lo, lo + len) out of every entry: an entry is cut, split or dropped. */
void
tfa_own_maps_remove(uintptr_t lo, size_t len)
{
	uintptr_t hi = lo + len;

	if (len == 0)
		return;
	tfa_lock(&own_lock);
	ranges_remove(own, &nown, OWN_MAX, &overflowed, lo, hi);
	be_begin();
	ranges_remove(be, &nbe, BE_MAX, &be_overflowed, lo, hi);
	be_end();
	tfa_unlock(&own_lock);
}

bool
tfa_own_maps_complete(void)
{
	tfa_lock(&own_lock);
	bool ok = !overflowed && nown != 0;
	tfa_unlock(&own_lock);
	return ok;
}

bool
tfa_own_maps_contains(uintptr_t addr)
{
	bool in = false;

	tfa_lock(&own_lock);
	for (size_t i = 0; i < nown && !in; i++)
		in = addr >= own[i].lo && addr < own[i].hi;
	tfa_unlock(&own_lock);
	return in;
}

static void
sift(tfa_leak_range_t *r, size_t root, size_t n)
{
	for (;;) {
		size_t c = 2 * root + 1;
		if (c >= n)
			return;
		if (c + 1 < n && r[c + 1].lo > r[c].lo)
			c++;
		if (r[root].lo >= r[c].lo)
			return;
		tfa_leak_range_t t = r[root];
		r[root] = r[c];
		r[c] = t;
		root = c;
	}
}

size_t
tfa_own_maps_snapshot(tfa_leak_range_t *out, size_t max)
{
	tfa_lock(&own_lock);
	size_t n = nown;
	if (n <= max)
		for (size_t i = 0; i < n; i++)
			out[i] = own[i];
	tfa_unlock(&own_lock);
	if (n > max)
		return 0;
	for (size_t i = n / 2; i-- > 0;)
		sift(out, i, n);
	for (size_t end = n; end-- > 1;) {
		tfa_leak_range_t t = out[0];
		out[0] = out[end];
		out[end] = t;
		sift(out, 0, end);
	}
	return n;
}

size_t
tfa_own_maps_count(void)
{
	tfa_lock(&own_lock);
	size_t n = nown;
	tfa_unlock(&own_lock);
	return n;
}

size_t
tfa_own_maps_backend_count(void)
{
	tfa_lock(&own_lock);
	size_t n = nbe;
	tfa_unlock(&own_lock);
	return n;
}

void
tfa_own_maps_prefork(void)
{
	tfa_lock(&own_lock);
}

void
tfa_own_maps_postfork_parent(void)
{
	tfa_unlock(&own_lock);
}

void
tfa_own_maps_postfork_child(void)
{
	tfa_lock_init(&own_lock);
}
