/* SPDX-License-Identifier: MIT */
#include "core/ptr_table.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/lock.h"
#include "core/log.h"
#include "core/thread.h"

#define CAP_STEP    TFA_PTR_CAP_STEP
#define CAP_INITIAL TFA_PTR_CAP_INITIAL
#define CAP_EXACT   TFA_PTR_CAP_EXACT
#define shard_of    tfa_ptr_shard_of

static bool
is_live(uint64_t key)
{
	return key > TFA_PTR_BUSY && !TFA_PTR_IS_TOMBSTONE(key);
}

/* ---- exclusion -------------------------------------------------------------------------- */

struct wait_ctx {
	const void *shard; /* NULL: wait for every announcement */
	const tfa_thread_rec_t *self;
};

static void
wait_for_rec(void *arg, tfa_thread_rec_t *rec)
{
	const struct wait_ctx *w = arg;

	if (rec == w->self)
		return;
	for (unsigned d = 0; d < TFA_ANNOUNCE_DEPTH; d++) {
		for (unsigned spins = 0;; spins++) {
			const void *a = __atomic_load_n(&rec->announce[d], __ATOMIC_SEQ_CST);
			if (a == NULL || (w->shard != NULL && a != w->shard))
				break;
			/* The announcer may be preempted mid-operation: let it run. */
			if (spins < 64)
				__builtin_ia32_pause();
			else
				sched_yield();
		}
	}
}

/*
 * Waits until no other thread is inside an operation on `shard` (every shard:
 * NULL).  REQUIRES: the gate(s) closed, with a full barrier after, so that an
 * operation either sees the gate or is seen here (Dekker's pattern with the
 * exchange in tfa_ptr_table_hold).
 */
uint8_t tfa_ptr_asym_announce;
/* Set before tfa_ptr_asym_announce, cleared after: a closer that may meet a
 * plain announcement always issues the process-wide barrier. */
static uint8_t asym_registered;

static long
membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

#ifdef __SANITIZE_THREAD__
/*
 * ThreadSanitizer knows neither membarrier (it would see the plain
 * announcements race with the closer's reads) nor, in gcc, fences: under it
 * every announcement is an exchange and the fence a read-modify-write, both
 * full barriers on x86-64 as well.
 */
#	define TFA_TSAN 1
static uint64_t fence_word;
#	define full_fence() ((void)__atomic_fetch_add(&fence_word, 0, __ATOMIC_SEQ_CST))
#else
#	define TFA_TSAN 0
#	define full_fence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

uint32_t tfa_ptr_fast_depth_limit;

/*
 * Whether a seccomp filter is installed (a sandbox the program set up after
 * the shim's start).  It may refuse membarrier, or kill the process for it:
 * the program never makes that call, tfalloc does.
 */
static bool
seccomp_filtered(void)
{
	int saved_errno = errno;
	int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
	bool none = mode == 0 || (mode < 0 && errno == EINVAL); /* EINVAL: a kernel without seccomp */

	errno = saved_errno;
	return !none;
}

/*
 * The barrier membarrier gives, by another way: taking away the access to a
 * page the process has touched makes the kernel flush its translations on
 * every CPU that runs one of the process's threads, by an interrupt, which
 * drains that CPU's store buffer before the call returns (a thread not
 * running drained it when it was switched out).  .NET does the same where
 * membarrier is missing.  Taken where membarrier may not be made: under a
 * seccomp filter.
 */
static tfa_lock_t flush_lock;
static char *flush_page;

static void
tlb_flush_barrier(void)
{
	bool done = false;

	tfa_lock(&flush_lock);
	if (flush_page == NULL)
		flush_page = tfa_arena_map((size_t)sysconf(_SC_PAGESIZE));
	if (flush_page != NULL && mprotect((void *)flush_page, 1, PROT_READ | PROT_WRITE) == 0) {
		*(volatile char *)flush_page += 1; /* present, in this CPU's translations too */
		done = mprotect((void *)flush_page, 1, PROT_NONE) == 0;
	}
	tfa_unlock(&flush_lock);
	if (!done) {
		/* Refused too: store buffers drain within microseconds; wait far longer. */
		TFA_LOG_ONCE("neither membarrier nor mprotect can be made (a seccomp filter): "
			     "the pointer table waits 1 ms where it needs a barrier");
		struct timespec ms = { .tv_sec = 0, .tv_nsec = 1000000 };
		int cancel = tfa_cancel_off(); /* the gate is closed meanwhile (core/log.h) */
		nanosleep(&ms, NULL);
		tfa_cancel_restore(cancel);
	}
}

void
tfa_ptr_table_init_barriers(void)
{
	bool ok = !TFA_TSAN && !seccomp_filtered() && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;

	if (ok) {
		__atomic_store_n(&asym_registered, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&tfa_ptr_asym_announce, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&tfa_ptr_fast_depth_limit, TFA_ANNOUNCE_DEPTH, __ATOMIC_SEQ_CST);
	} else {
		__atomic_store_n(&tfa_ptr_fast_depth_limit, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&tfa_ptr_asym_announce, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&asym_registered, 0, __ATOMIC_SEQ_CST);
	}
}

void
tfa_ptr_table_forking(bool forking)
{
	/* A signal handler's call meanwhile returns table_depth as it found it. */
	if (forking)
		tfa_tls.table_depth += TFA_PTR_DEPTH_FORKING;
	else
		tfa_tls.table_depth -= TFA_PTR_DEPTH_FORKING;
}

/*
 * Every other thread's announcement made before this point is visible after
 * it, or that thread sees the gates closed before it (see tfa_ptr_table_hold).
 */
static void
process_barrier(void)
{
	full_fence();
	if (__atomic_load_n(&asym_registered, __ATOMIC_SEQ_CST) == 0)
		return;
	/* Refused only by a seccomp filter installed since the registration, which might kill instead. */
	if (!seccomp_filtered() && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
		return;
	tlb_flush_barrier();
}

static void
wait_announcements(const void *shard)
{
	struct wait_ctx w = { .shard = shard, .self = tfa_tls.rec };

	process_barrier();
	tfa_thread_foreach(wait_for_rec, &w);
}

/* Whether this thread itself is inside an operation on s (a nested call). */
static bool
self_inside(const tfa_ptr_shard_t *s)
{
	tfa_thread_rec_t *r = tfa_tls.rec;

	if (r == NULL || r == &tfa_orphan_rec)
		return false;
	for (unsigned d = 0; d < TFA_ANNOUNCE_DEPTH; d++)
		if (__atomic_load_n(&r->announce[d], __ATOMIC_RELAXED) == s)
			return true;
	return false;
}

/*
 * Marks s as one whose lock or gate a fork child must reset (its table:
 * t->touched), before the first time they are written.  The table is found
 * from the shard: shards lie in one of the process's tables.
 */
static void
mark_touched(tfa_ptr_table_t *t, const tfa_ptr_shard_t *s)
{
	size_t k = (size_t)(s - t->shards);
	uint64_t bit = (uint64_t)1 << (k % 64);

	if ((__atomic_load_n(&t->touched[k / 64], __ATOMIC_RELAXED) & bit) == 0)
		__atomic_fetch_or(&t->touched[k / 64], bit, __ATOMIC_RELAXED);
}

/*
 * Excludes every other operation on s.  Returns false (nothing held) when this
 * very thread is inside one, below a signal handler: waiting would never end.
 * [takes rebuild lock]
 */
static bool
shard_exclude(tfa_ptr_table_t *t, tfa_ptr_shard_t *s)
{
	if (tfa_likely(__libc_single_threaded) || tfa_tls.holds_all_locks)
		return !self_inside(s);
	if (self_inside(s))
		return false;
	mark_touched(t, s);
	tfa_lock(&s->rebuild_lock);
	__atomic_store_n(&s->gate, 1, __ATOMIC_SEQ_CST);
	wait_announcements(s);
	return true;
}

static void
shard_admit(tfa_ptr_shard_t *s)
{
	if (tfa_likely(__libc_single_threaded) || tfa_tls.holds_all_locks)
		return;
	__atomic_store_n(&s->gate, 0, __ATOMIC_RELEASE);
	tfa_unlock(&s->rebuild_lock);
}

static void
hold_by_lock(tfa_ptr_held_t *h)
{
	tfa_lock(&h->shard->rebuild_lock);
	h->mode = TFA_PTR_LOCKED;
	h->rec = NULL;
}

void
tfa_ptr_hold_locked(tfa_ptr_table_t *t, tfa_ptr_held_t *h)
{
	mark_touched(t, h->shard);
	hold_by_lock(h);
}

void
tfa_ptr_fast_hold_slow(tfa_ptr_table_t *t, tfa_ptr_held_t *h)
{
	uint32_t d = tfa_tls.table_depth;

	if (tfa_tls.holds_all_locks) {
		h->mode = TFA_PTR_EXCLUSIVE;
		h->rec = NULL;
		return;
	}
	if (d < TFA_ANNOUNCE_DEPTH) {
		/* Announcements are exchanges (tfa_ptr_fast_depth_limit 0). */
		h->depth = (uint8_t)d;
		if (tfa_ptr_announce(h->rec, d, h->shard))
			tfa_ptr_hold_gated(h);
		return;
	}
	tfa_ptr_hold_locked(t, h);
}

void
tfa_ptr_hold_gated(tfa_ptr_held_t *h)
{
	/* Step out, and wait for the rebuild behind its lock. */
	__atomic_store_n(&h->rec->announce[h->depth], NULL, __ATOMIC_RELEASE);
	tfa_tls.table_depth = h->depth;
	/* Its gate was closed: by an exclusion, which marked it touched, or by prefork (a mapped shard). */
	hold_by_lock(h);
}

/* ---- rebuild ------------------------------------------------------------------------------ */

/*
 * The slot for a record of key by linear probing from its home (home_range:
 * tfa_ptr_home_range of cap), or -1 when a record of the same key lies on
 * the way: that one is the live one (it came earlier in probe order), the
 * record being placed is stale.  REQUIRES: a free slot.
 */
static TFA_ALWAYS_INLINE int64_t
place_at(const tfa_record_t *slots, uint64_t cap, uint64_t home_range, uint64_t key)
{
	uint64_t i = tfa_ptr_home_fast((uintptr_t)key, home_range);

	for (; slots[i].ptr != 0; i = tfa_ptr_next(i, cap))
		if (slots[i].ptr == key)
			return -1;
	return (int64_t)i;
}

static void
drop_stale(tfa_ptr_table_t *t, const tfa_record_t *rec)
{
	if (t->stale_fn != NULL)
		t->stale_fn(t->stale_arg, rec);
}

/*
 * The first slot of a probe run: one after an empty slot, so that the records
 * of every run are visited in probe order (a shard without an empty slot,
 * which concurrent inserts can leave, has no such place: any will do).
 */
static uint64_t
run_start(const tfa_record_t *slots, uint64_t cap)
{
	for (uint64_t i = 0; i < cap; i++)
		if (slots[i].ptr == 0)
			return tfa_ptr_next(i, cap);
	return 0;
}

/*
 * Empties the slots of tombstones (and busy slots of threads fork left
 * behind); returns the live records.  Before a growth as well as a purge:
 * the count decides between them, and one pass is cheaper than two.
 */
static uint64_t
clear_dead(tfa_record_t *slots, uint64_t cap)
{
	uint64_t live = 0;

	for (uint64_t i = 0; i < cap; i++) {
		uint64_t key = slots[i].ptr;
		if (is_live(key))
			live++;
		else if (key != 0)
			slots[i].ptr = 0;
	}
	return live;
}

/*
 * Drops a shard's tombstones in place: no new mapping, so no munmap whose TLB
 * shootdown would interrupt every other core (under churn, tombstones fill a
 * shard every few hundred frees).  Each record, in probe order from start (a
 * run_start taken before clear_dead), is taken out and put back from its home
 * slot, as linear probing would place it: most stay where they are.  Returns
 * the live records.
 */
static uint64_t
shard_purge(tfa_ptr_table_t *t, tfa_ptr_shard_t *s, uint64_t start)
{
	tfa_record_t *slots = s->slots;
	uint64_t cap = s->cap, range = tfa_ptr_home_range(cap);
	uint64_t live = 0;

	for (uint64_t k = 0, j = start; k < cap; k++, j = tfa_ptr_next(j, cap)) {
		uint64_t key = slots[j].ptr;
		if (key == 0)
			continue;
		slots[j].ptr = 0;
		int64_t i = place_at(slots, cap, range, key);
		if (i < 0) {
			tfa_record_t rec = slots[j];
			rec.ptr = key;
			drop_stale(t, &rec);
			continue;
		}
		live++;
		if ((uint64_t)i != j)
			slots[i] = slots[j]; /* its key stays 0 until the record is whole */
		slots[i].ptr = key;
	}
	return live;
}

/* The fast insert's bound after a change of the shard's mapping or starvation. */
static void
set_fast_limit(tfa_ptr_shard_t *s)
{
	uint64_t limit = 0;

	if (s->slots != NULL && !s->starved)
		limit = s->cap * 3 / 4; /* used below it: not TFA_PTR_OVERLOADED */
	__atomic_store_n(&s->fast_limit, limit, __ATOMIC_RELAXED);
	s->home_range = s->slots != NULL ? tfa_ptr_home_range(s->cap) : 0;
}

static uint64_t
count_live(const tfa_ptr_shard_t *s)
{
	uint64_t n = 0;

	if (s->slots != NULL)
		for (uint64_t i = 0; i < s->cap; i++)
			n += is_live(s->slots[i].ptr);
	return n;
}

/* A shard's mapping changed from old_cap to new_cap slots. */
static void
account_slots(tfa_ptr_table_t *t, tfa_ptr_shard_t *s, uint64_t old_cap, uint64_t new_cap)
{
	uint64_t now = __atomic_add_fetch(&t->slot_bytes, sizeof(tfa_record_t) * (new_cap - old_cap),
					  __ATOMIC_RELAXED);
	uint64_t peak = __atomic_load_n(&t->slot_bytes_peak, __ATOMIC_RELAXED);

	while (now > peak && !__atomic_compare_exchange_n(&t->slot_bytes_peak, &peak, now, true,
							   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	size_t k = (size_t)(s - t->shards);
	uint64_t bit = (uint64_t)1 << (k % 64);
	if (new_cap != 0 && (__atomic_load_n(&t->mapped[k / 64], __ATOMIC_RELAXED) & bit) == 0)
		__atomic_fetch_or(&t->mapped[k / 64], bit, __ATOMIC_RELAXED);
	if (new_cap > CAP_INITIAL)
		__atomic_fetch_or(&t->grown[k / 64], bit, __ATOMIC_RELAXED);
	else
		__atomic_fetch_and(&t->grown[k / 64], ~bit, __ATOMIC_RELAXED);
}

/* Shard s's first slots (TFA_PTR_CAP_INITIAL): all empty while not its slots.  NULL: none to be had. */
static tfa_record_t *
small_slots(tfa_ptr_table_t *t, const tfa_ptr_shard_t *s)
{
	tfa_record_t *small = __atomic_load_n(&t->small, __ATOMIC_ACQUIRE);

	if (small == NULL) {
		size_t bytes = sizeof(tfa_record_t) * CAP_INITIAL * TFA_PTR_SHARDS;
		tfa_record_t *fresh = tfa_arena_reserve(bytes);
		if (fresh == NULL)
			return NULL;
		/* Two shards' first rebuilds at once: one reservation stays. */
		if (__atomic_compare_exchange_n(&t->small, &small, fresh, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			small = fresh;
		else
			munmap(fresh, bytes);
	}
	return small + (size_t)(s - t->shards) * CAP_INITIAL;
}

/* Gives a shard's slots back: its first slots emptied for its next use, others unmapped. */
static void
release_slots(tfa_record_t *slots, uint64_t cap)
{
	if (cap == CAP_INITIAL) {
		memset(slots, 0, sizeof(tfa_record_t) * cap);
		tfa_arena_count(-(long)(sizeof(tfa_record_t) * cap));
	} else {
		tfa_arena_unmap(slots, sizeof(tfa_record_t) * cap);
	}
}

/*
 * Moves s's live records to a new mapping of new_cap slots, visiting from
 * start (run_start of the old slots: stale records go in probe order).
 * Returns false, with nothing changed, when no memory could be had.
 */
static bool
shard_move(tfa_ptr_table_t *t, tfa_ptr_shard_t *s, uint64_t new_cap, uint64_t start)
{
	tfa_record_t *fresh = NULL;
	uint64_t live = 0, cap = s->cap;

	if (new_cap == CAP_INITIAL) {
		fresh = small_slots(t, s);
		if (fresh != NULL)
			tfa_arena_count((long)(sizeof(tfa_record_t) * new_cap));
		else
			new_cap = CAP_STEP; /* no reservation: a page */
	}
	if (fresh == NULL)
		fresh = tfa_arena_map_filled(sizeof(tfa_record_t) * new_cap);
	if (fresh == NULL)
		return false;
	if (s->slots != NULL) {
		uint64_t range = tfa_ptr_home_range(new_cap);
		for (uint64_t k = 0, j = start; k < cap; k++, j = tfa_ptr_next(j, cap)) {
			const tfa_record_t *rec = &s->slots[j];
			if (!is_live(rec->ptr))
				continue;
			int64_t i = place_at(fresh, new_cap, range, rec->ptr);
			if (i >= 0) {
				fresh[i] = *rec;
				live++;
			} else {
				drop_stale(t, rec);
			}
		}
		release_slots(s->slots, cap);
	}
	__atomic_store_n(&s->slots, fresh, __ATOMIC_RELAXED);
	__atomic_store_n(&s->cap, new_cap, __ATOMIC_RELAXED);
	s->starved = false;
	__atomic_store_n(&s->used, live, __ATOMIC_RELAXED);
	__atomic_store_n(&s->live_hint, live, __ATOMIC_RELAXED);
	set_fast_limit(s);
	account_slots(t, s, cap, new_cap);
	return true;
}

/*
 * The capacity a shard of cap slots with `live` records grows to, or 0 when
 * purging its tombstones makes enough room.  Twice the live records, in whole
 * pages, makes the slots cost at most 64 bytes a record; a purge that leaves
 * less than 1/8 of the shard to fill before the next rebuild would make
 * rebuilds too frequent, and then the shard grows by a page: possible only
 * below CAP_EXACT slots (a purge is chosen while live < cap / 2 + CAP_STEP / 2,
 * which leaves 3/4 cap - live > cap / 4 - CAP_STEP / 2 >= cap / 8 to fill).
 */
static uint64_t
grown_cap(uint64_t cap, uint64_t live)
{
	uint64_t want = live * 2 / CAP_STEP * CAP_STEP;

	if (cap < CAP_STEP)
		return CAP_STEP; /* first slots: never purged (TFA_PTR_CAP_INITIAL) */

	if (want > cap)
		return want;
	if ((live + cap / 8) * 4 <= cap * 3)
		return 0;
	return cap + CAP_STEP;
}

_Static_assert(CAP_EXACT / 4 - CAP_STEP / 2 >= CAP_EXACT / 8, "purges leave room from CAP_EXACT on");

/*
 * Maps the shard, grows it (grown_cap), or else purges its tombstones in
 * place.  REQUIRES: the shard's operations excluded.
 * Returns 0 or -ENOMEM (the shard is then starved, and usable as it is).
 */
static int
shard_rebuild(tfa_ptr_table_t *t, tfa_ptr_shard_t *s)
{
	uint64_t new_cap = CAP_INITIAL, live = 0, start = 0;

	if (__atomic_load_n(&s->slots, __ATOMIC_RELAXED) != NULL) {
		start = run_start(s->slots, s->cap);
		live = clear_dead(s->slots, s->cap);
		new_cap = grown_cap(s->cap, live);
		if (new_cap == 0) {
			live = shard_purge(t, s, start);
			__atomic_store_n(&s->used, live, __ATOMIC_RELAXED);
			__atomic_store_n(&s->live_hint, live, __ATOMIC_RELAXED);
			s->starved = false;
			set_fast_limit(s);
			return 0;
		}
	} else {
		/*
		 * The first mapping, under the table's map lock: fork excludes only
		 * the mapped shards, and holds this lock so that none becomes
		 * mapped meanwhile.  Nothing is waited for inside it.
		 */
		bool locking = !__libc_single_threaded && !tfa_tls.holds_all_locks;
		if (locking)
			tfa_lock(&t->map_lock);
		/*
		 * Mapped meanwhile: by the forking thread, which holds every lock
		 * (an atfork handler's allocation) and so enters shards excluded
		 * by others.  The caller finds the slots and tries again.
		 */
		bool mapped = __atomic_load_n(&s->slots, __ATOMIC_RELAXED) != NULL
			      || shard_move(t, s, new_cap, start);
		if (locking)
			tfa_unlock(&t->map_lock);
		return mapped ? 0 : -ENOMEM;
	}
	if (shard_move(t, s, new_cap, start))
		return 0;
	/* Without memory the slots left still serve; tombstones go. */
	live = shard_purge(t, s, start);
	__atomic_store_n(&s->used, live, __ATOMIC_RELAXED);
	__atomic_store_n(&s->live_hint, live, __ATOMIC_RELAXED);
	s->starved = true;
	set_fast_limit(s);
	return -ENOMEM;
}

/*
 * What a sweep takes a shard to hold: its slots used, or fewer, the live
 * records its owner counted.  Used slots count tombstones as well, and frees
 * leave tombstones: a shard that a moving heap left behind keeps its slots
 * used, its live records gone.  The owner's count misses other threads'
 * frees and a shared shard's operations: too high, the shard is not shrunk
 * until a rebuild of its own sets the count; too low, the sweep counts the
 * shard's records (under exclusion) and corrects it.
 */
static uint64_t
sweep_guess(const tfa_ptr_shard_t *o)
{
	uint64_t used = __atomic_load_n(&o->used, __ATOMIC_RELAXED);
	uint64_t live = __atomic_load_n(&o->live_hint, __ATOMIC_RELAXED);

	return live < used ? live : used;
}

/*
 * Shrinks shards other than `except` whose live records fell below 1/4 of
 * their slots to twice their live records (whole pages), while the grown
 * shards' slots, with what `except` is about to take, pass 7/4 of the most
 * records the sweeps have seen in them (56 bytes a record): a heap that
 * moves from region to region leaves shards behind it, and they are shrunk;
 * one that empties and fills again in place stays within the bound and pays
 * for no rebuild (python3's workload.py 3750: 2.7% more instructions when
 * every such shard shrank, 0.7% with the bound).  What a shard holds is
 * sweep_guess's.  Since frees leave tombstones everywhere, that is the
 * owner's count of live records, not the slots used, and a bound of 64
 * bytes a record would serve; 56 keeps the table smaller for about 1% more
 * instructions (workload.py 3750 with PYTHONMALLOC=malloc: 8.98 against
 * 9.66 MB of table at its peak, 986 against 969 million instructions).
 * The look is cheap: three loads per grown shard.  REQUIRES: the caller
 * holds no shard of t (each shard shrunk is excluded in turn).
 */
static void
sweep(tfa_ptr_table_t *t, const tfa_ptr_shard_t *except)
{
	uint64_t slots = 0, used = 0;

	for (unsigned w = 0; w < TFA_PTR_SHARDS / 64; w++)
		for (uint64_t bits = __atomic_load_n(&t->grown[w], __ATOMIC_RELAXED); bits != 0;
		     bits &= bits - 1) {
			const tfa_ptr_shard_t *o = &t->shards[w * 64 + (unsigned)__builtin_ctzll(bits)];
			slots += __atomic_load_n(&o->cap, __ATOMIC_RELAXED);
			used += sweep_guess(o);
		}
	/* What `except` is about to take: half its slots more when it grows. */
	uint64_t grows = __atomic_load_n(&except->cap, __ATOMIC_RELAXED);
	if (__atomic_load_n(&except->used, __ATOMIC_RELAXED) * 2 > grows)
		slots += grows / 2;
	uint64_t most = __atomic_load_n(&t->used_peak, __ATOMIC_RELAXED);
	if (used > most) {
		__atomic_store_n(&t->used_peak, used, __ATOMIC_RELAXED); /* a race only loses a sample */
		most = used;
	}
	for (unsigned w = 0; w < TFA_PTR_SHARDS / 64 && slots * 4 > most * 7; w++) {
		for (uint64_t bits = __atomic_load_n(&t->grown[w], __ATOMIC_RELAXED);
		     bits != 0 && slots * 4 > most * 7; bits &= bits - 1) {
			tfa_ptr_shard_t *o = &t->shards[w * 64 + (unsigned)__builtin_ctzll(bits)];
			if (o == except
			    || !TFA_PTR_SHRINKABLE(sweep_guess(o), __atomic_load_n(&o->cap, __ATOMIC_RELAXED))
			    || !shard_exclude(t, o))
				continue;
			uint64_t live = count_live(o), cap = o->cap;
			__atomic_store_n(&o->live_hint, live, __ATOMIC_RELAXED);
			uint64_t want = live * 4 <= CAP_INITIAL ? CAP_INITIAL
							       : (live * 2 + CAP_STEP - 1) / CAP_STEP * CAP_STEP;
			if (o->slots != NULL && TFA_PTR_SHRINKABLE(live, cap) && want < cap) {
				/* No memory: the shard stays as it is. */
				if (shard_move(t, o, want, run_start(o->slots, cap)))
					slots -= cap - o->cap;
			}
			shard_admit(o);
		}
	}
}

/* The owner this thread would be of a shard it maps: a registered thread (it can announce). */
static tfa_thread_rec_t *
owner_self(void)
{
	tfa_thread_rec_t *r = tfa_tls.rec;

	return r == &tfa_orphan_rec ? NULL : r;
}

/*
 * Whether this thread may exclude shards other than the one it makes room
 * in: not from inside another operation (a signal handler's malloc), nor
 * while it holds shards by their rebuild locks (threads without a record):
 * it would wait for threads that may be waiting for it.
 */
static bool
may_sweep(void)
{
	/*
	 * in_shim: a signal handler's call inside the shim's (a single thread
	 * announces nothing, so table_depth cannot tell).
	 */
	if (tfa_tls.table_depth != 0 || tfa_tls.holds_all_locks || tfa_tls.in_shim > 1)
		return false;
	if (__libc_single_threaded)
		return true;
	return tfa_tls.rec != NULL && tfa_tls.rec != &tfa_orphan_rec;
}

/* revoke: the caller is not the shard's owner and inserts; the shard becomes shared. */
static int
make_room(tfa_ptr_table_t *t, uintptr_t ptr, bool revoke)
{
	tfa_ptr_shard_t *s = shard_of(t, ptr);

	/* Before this shard grows (or purges), others give back what they no longer use. */
	if (__atomic_load_n(&s->cap, __ATOMIC_RELAXED) != 0 && may_sweep())
		sweep(t, s);
	if (!shard_exclude(t, s))
		return -ENOMEM;
	int r = 0;
	/* Atomic: the forking thread, holding every lock, may map the shard meanwhile (shard_rebuild). */
	if (__atomic_load_n(&s->slots, __ATOMIC_RELAXED) == NULL) {
		r = shard_rebuild(t, s);
		if (r == 0)
			__atomic_store_n(&s->owner, owner_self(), __ATOMIC_RELAXED);
	} else if (TFA_PTR_OVERLOADED(s->used, s->cap)) { /* or another thread made room meanwhile */
		r = shard_rebuild(t, s);
	}
	/* Another thread's shard (or its own, held without announcing: too deeply nested). */
	if (revoke)
		__atomic_store_n(&s->owner, NULL, __ATOMIC_RELAXED);
	/* A starved shard still takes records while it has tombstones or room. */
	if (r < 0 && s->slots != NULL && s->used + 2 <= s->cap)
		r = 0;
	shard_admit(s);
	return r;
}

int
tfa_ptr_table_make_room(tfa_ptr_table_t *t, uintptr_t ptr)
{
	return make_room(t, ptr, false);
}

/* ---- operations ----------------------------------------------------------------------------- */

tfa_record_t *
tfa_ptr_fast_probe(tfa_ptr_shard_t *s, uint64_t ptr, uint64_t i, bool shared)
{
	tfa_record_t *slots = s->slots;
	uint64_t cap = s->cap;

	for (uint64_t n = cap;;) {
		tfa_record_t *slot = &slots[i];
		uint64_t key = __atomic_load_n(&slot->ptr, __ATOMIC_ACQUIRE);
		if (tfa_likely(key == 0 || TFA_PTR_IS_TOMBSTONE(key))) {
			if (tfa_likely(tfa_ptr_fast_claim(s, slot, key, shared)))
				return slot;
			continue; /* lost the slot to another insert (or a signal handler's): look at it again */
		}
		/* A stale record of ptr, or (threads filling the shard meanwhile) no slot. */
		if (tfa_unlikely(key == ptr) || tfa_unlikely(--n == 0))
			return NULL;
		i = tfa_ptr_next(i, cap);
	}
}

int
tfa_ptr_insert_after_room(tfa_ptr_table_t *t, tfa_ptr_held_t *h, const tfa_record_t *rec,
			  tfa_record_t *replaced)
{
	for (;;) {
		bool revoke = tfa_ptr_access(*h) == TFA_PTR_FOREIGN;
		tfa_ptr_table_release(*h);
		int room = make_room(t, (uintptr_t)rec->ptr, revoke);
		*h = tfa_ptr_table_hold(t, (uintptr_t)rec->ptr);
		if (room < 0)
			return -ENOMEM;
		int r = tfa_ptr_held_insert(*h, rec, replaced);
		if (r != TFA_PTR_AGAIN)
			return r;
	}
}

int
tfa_ptr_table_insert(tfa_ptr_table_t *t, const tfa_record_t *rec, tfa_record_t *replaced)
{
	tfa_ptr_held_t h = tfa_ptr_table_hold(t, (uintptr_t)rec->ptr);
	int r = tfa_ptr_held_insert_room(t, &h, rec, replaced);

	tfa_ptr_table_release(h);
	return r;
}

bool
tfa_ptr_table_remove(tfa_ptr_table_t *t, uintptr_t ptr, tfa_record_t *out)
{
	tfa_ptr_held_t h = tfa_ptr_table_hold(t, ptr);
	bool found = tfa_ptr_held_remove(h, ptr, out);

	tfa_ptr_table_release(h);
	return found;
}

/* Probes for key from ptr's home slot; the slot index, or -1. */
static int64_t
shard_find(const tfa_ptr_shard_t *s, uintptr_t ptr, uint64_t key)
{
	const tfa_record_t *slots = s->slots;

	if (slots == NULL)
		return -1;
	uint64_t cap = s->cap;
	uint64_t i = tfa_ptr_home_fast(ptr, s->home_range);
	for (uint64_t n = 0; n < cap; n++, i = tfa_ptr_next(i, cap)) {
		uint64_t k = __atomic_load_n(&slots[i].ptr, __ATOMIC_ACQUIRE);
		if (k == key)
			return (int64_t)i;
		if (k == 0)
			return -1;
	}
	return -1;
}

bool
tfa_ptr_table_lookup(tfa_ptr_table_t *t, uintptr_t ptr, tfa_record_t *out)
{
	if (ptr <= TFA_PTR_BUSY || (ptr & 1) != 0)
		return false;
	tfa_ptr_held_t h = tfa_ptr_table_hold(t, ptr);
	int64_t at = shard_find(h.shard, ptr, ptr);
	if (at >= 0 && out != NULL) {
		const tfa_record_t *slot = &h.shard->slots[at];
		/* The key only atomically: other threads' inserts compare-and-swap it as they probe. */
		out->ptr = ptr;
		out->size_meta = slot->size_meta;
		out->id_thread = slot->id_thread;
		out->stack_id = slot->stack_id;
		out->tag = slot->tag;
		/* Freed by another thread while it was copied: it is gone. */
		if (__atomic_load_n(&h.shard->slots[at].ptr, __ATOMIC_ACQUIRE) != ptr)
			at = -1;
	}
	tfa_ptr_table_release(h);
	return at >= 0;
}

bool
tfa_ptr_table_recently_freed(tfa_ptr_table_t *t, uintptr_t ptr)
{
	if (ptr <= TFA_PTR_BUSY || (ptr & 1) != 0)
		return false;
	for (unsigned i = 0; i < TFA_RECENT_FREES; i++)
		if (tfa_tls.recent_free[i] == ptr)
			return true;
	tfa_ptr_held_t h = tfa_ptr_table_hold(t, ptr);
	bool seen = shard_find(h.shard, ptr, ptr + 1) >= 0;
	tfa_ptr_table_release(h);
	return seen;
}

/* The next shard from k on whose bit is set in words, or TFA_PTR_SHARDS. */
static unsigned
next_set(const uint64_t *words, unsigned k)
{
	while (k < TFA_PTR_SHARDS) {
		uint64_t bits = __atomic_load_n(&words[k / 64], __ATOMIC_RELAXED) >> (k % 64);
		if (bits != 0)
			return k + (unsigned)__builtin_ctzll(bits);
		k = (k | 63) + 1;
	}
	return TFA_PTR_SHARDS;
}

/* The next shard from k on that ever had slots (t->mapped), or TFA_PTR_SHARDS. */
static unsigned
next_mapped(const tfa_ptr_table_t *t, unsigned k)
{
	return next_set(t->mapped, k);
}

uint64_t
tfa_ptr_table_count(tfa_ptr_table_t *t)
{
	uint64_t n = 0;

	for (unsigned k = next_mapped(t, 0); k < TFA_PTR_SHARDS; k = next_mapped(t, k + 1)) {
		tfa_ptr_shard_t *s = &t->shards[k];
		if (__atomic_load_n(&s->cap, __ATOMIC_RELAXED) == 0)
			continue;
		if (!shard_exclude(t, s))
			continue;
		n += count_live(s);
		shard_admit(s);
	}
	return n;
}

void
tfa_ptr_table_foreach(tfa_ptr_table_t *t, void (*fn)(void *arg, const tfa_record_t *rec),
		      void *arg)
{
	for (unsigned k = next_mapped(t, 0); k < TFA_PTR_SHARDS; k = next_mapped(t, k + 1)) {
		tfa_ptr_shard_t *s = &t->shards[k];
		if (__atomic_load_n(&s->cap, __ATOMIC_RELAXED) == 0)
			continue;
		if (!shard_exclude(t, s))
			continue;
		if (s->slots != NULL) {
			size_t cap = s->cap;
			for (size_t i = 0; i < cap; i++)
				if (is_live(s->slots[i].ptr))
					fn(arg, &s->slots[i]);
		}
		shard_admit(s);
	}
}

void
tfa_ptr_table_set_stale_hook(tfa_ptr_table_t *t, void (*fn)(void *arg, const tfa_record_t *rec),
			     void *arg)
{
	t->stale_fn = fn;
	t->stale_arg = arg;
}

uint64_t
tfa_ptr_table_bytes(const tfa_ptr_table_t *t)
{
	return __atomic_load_n(&t->slot_bytes, __ATOMIC_RELAXED);
}

uint64_t
tfa_ptr_table_peak_bytes(const tfa_ptr_table_t *t)
{
	return __atomic_load_n(&t->slot_bytes_peak, __ATOMIC_RELAXED);
}

void
tfa_ptr_table_destroy(tfa_ptr_table_t *t)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++) {
		tfa_ptr_shard_t *s = &t->shards[k];
		if (!shard_exclude(t, s))
			continue;
		if (s->slots != NULL) {
			release_slots(s->slots, s->cap);
			account_slots(t, s, s->cap, 0);
		}
		s->slots = NULL;
		__atomic_store_n(&s->owner, NULL, __ATOMIC_RELAXED);
		__atomic_store_n(&s->cap, 0, __ATOMIC_RELAXED);
		s->starved = false;
		__atomic_store_n(&s->used, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->live_hint, 0, __ATOMIC_RELAXED);
		set_fast_limit(s);
		shard_admit(s);
	}
	__atomic_store_n(&t->slot_bytes_peak, __atomic_load_n(&t->slot_bytes, __ATOMIC_RELAXED),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&t->used_peak, 0, __ATOMIC_RELAXED); /* a table used again starts its bound anew */
	memset(t->mapped, 0, sizeof(t->mapped));
	memset(tfa_tls.recent_free, 0, sizeof(tfa_tls.recent_free));
}

/*
 * Fork: no shard becomes mapped (the map lock), every mapped shard's gate
 * closed and rebuild lock taken, then no operation is in flight anywhere:
 * the child inherits a table whose every record is whole.  A shard not
 * mapped has no record to change: what may hold its lock meanwhile (an
 * operation of a thread without a record, which finds nothing there; a
 * first mapping, excluded and waiting for the map lock) has changed nothing
 * the child would keep, and the child resets its lock and gate.
 */
void
tfa_ptr_table_prefork(tfa_ptr_table_t *t)
{
	tfa_lock(&t->map_lock);
	/* What postfork_parent gives back: the forking thread may map shards meanwhile. */
	memcpy(t->forked, t->mapped, sizeof(t->forked));
	for (unsigned k = next_set(t->forked, 0); k < TFA_PTR_SHARDS; k = next_set(t->forked, k + 1)) {
		tfa_lock(&t->shards[k].rebuild_lock);
		__atomic_store_n(&t->shards[k].gate, 1, __ATOMIC_RELAXED);
	}
	wait_announcements(NULL);
}

void
tfa_ptr_table_postfork_parent(tfa_ptr_table_t *t)
{
	/*
	 * prefork's shards, not those mapped now: the forking thread may have
	 * mapped one meanwhile whose lock another thread holds (its first
	 * mapping waits for the map lock).
	 */
	for (unsigned k = next_set(t->forked, 0); k < TFA_PTR_SHARDS; k = next_set(t->forked, k + 1)) {
		__atomic_store_n(&t->shards[k].gate, 0, __ATOMIC_RELEASE);
		tfa_unlock(&t->shards[k].rebuild_lock);
	}
	tfa_unlock(&t->map_lock);
}

void
tfa_ptr_table_postfork_child(tfa_ptr_table_t *t)
{
	for (unsigned w = 0; w < TFA_PTR_SHARDS / 64; w++) {
		for (uint64_t bits = t->mapped[w] | t->touched[w]; bits != 0; bits &= bits - 1) {
			tfa_ptr_shard_t *s = &t->shards[w * 64 + (unsigned)__builtin_ctzll(bits)];
			__atomic_store_n(&s->gate, 0, __ATOMIC_RELAXED);
			tfa_lock_init(&s->rebuild_lock);
		}
	}
	tfa_lock_init(&t->map_lock);
}
