/* SPDX-License-Identifier: MIT */
/*
 * The live-pointer table: for every pointer the shim handed out, a 32-byte
 * record of what it knows about it.
 *
 * Glossary:
 *   record   key (the pointer), requested size, allocation id, thread, stack
 *            id, resource tag, and packed metadata: the backend that owns the
 *            pointer, the kind of call that made it, the device, log2 of the
 *            alignment asked for.
 *   shard    the table is split into TFA_PTR_SHARDS open-addressing hash
 *            tables with linear probing, chosen by the pointer's 512 KiB region.
 *   tombstone a removed record's slot until the next rebuild: a free costs one
 *            probe run and one store, and concurrent probes stay valid.
 *   rebuild  a shard's tombstones purged in place, or the shard grown: the
 *            only change that excludes the shard's other operations.
 *
 * Concurrency: inserts and removes of different pointers run at the same time
 * on one shard; a pointer is inserted and removed by one thread at a time (the
 * allocator hands it out once).  No lock and no shared counter is written per
 * operation.  A shard has an owner, the thread that mapped it (both jemalloc
 * and glibc give each thread an arena of its own, so a region's blocks are
 * mostly made by one thread): the owner claims slots and frees them with
 * instructions that are atomic against its own signal handlers but carry no
 * lock prefix, for only it writes the empty slots and tombstones of its
 * shard (and its count of live records, live_hint).  Other threads free its
 * blocks with a compare-and-swap on the live key (live -> tombstone, never
 * touching an empty slot or a tombstone); the first other thread to insert
 * takes the ownership away for good (the shard is then shared: every insert
 * claims its slot by compare-and-swap), which excludes the shard's
 * operations once.
 *
 * Memory comes from mmap (core/arena.h), never from malloc.
 */
#ifndef TFA_CORE_PTR_TABLE_H
#define TFA_CORE_PTR_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <errno.h>
#include <sys/single_threaded.h>

#include "core/common.h"
#include "core/lock.h"
#include "core/thread.h"

#define TFA_PTR_SHARDS_LG  12
#define TFA_PTR_SHARDS     (1u << TFA_PTR_SHARDS_LG)

/* What kind of call made a pointer; a free by the wrong kind is a mismatch. */
typedef enum tfa_alloc_kind_e {
	TFA_KIND_MALLOC = 0,    /* malloc, calloc, realloc, memalign & co. */
	TFA_KIND_NEW = 1,       /* operator new */
	TFA_KIND_NEW_ARRAY = 2, /* operator new[] */
	TFA_KIND_INTERNAL = 3,  /* made while the guard was held: not the program's */
	TFA_KIND_DEVICE = 4,    /* a device API (CUDA) */
	TFA_KIND_DEVICE_HANDLE = 5, /* a device API's physical memory handle (CUDA VMM): the key is the handle */
} tfa_alloc_kind_t;

/* Larger requests cannot succeed on x86-64 (128 TiB of user address space). */
#define TFA_REQUESTED_MAX ((UINT64_C(1) << 47) - 1)
#define TFA_ID_MAX        ((UINT64_C(1) << 40) - 1)

typedef struct tfa_record_s {
	uint64_t ptr;       /* 0: empty slot */
	uint64_t size_meta; /* requested (47) | backend (3) | kind (3) | device (5) | lg_align (6) */
	uint64_t id_thread; /* allocation id (40) | thread index (24) */
	uint32_t stack_id;
	uint32_t tag;
} tfa_record_t;

_Static_assert(sizeof(tfa_record_t) == 32, "records are 32 bytes");

/* The unpacked view of a record. */
typedef struct tfa_alloc_info_s {
	uintptr_t ptr;
	uint64_t requested;
	uint64_t id;
	uint32_t thread;
	uint32_t stack_id;
	uint32_t tag;
	uint8_t backend;
	uint8_t kind;
	uint8_t device;
	uint8_t lg_align; /* 0: the default alignment */
} tfa_alloc_info_t;

static inline tfa_record_t
tfa_record_pack(const tfa_alloc_info_t *i)
{
	tfa_record_t r = {
		.ptr = i->ptr,
		.size_meta = (i->requested & TFA_REQUESTED_MAX) | ((uint64_t)(i->backend & 7) << 47)
			     | ((uint64_t)(i->kind & 7) << 50) | ((uint64_t)(i->device & 31) << 53)
			     | ((uint64_t)(i->lg_align & 63) << 58),
		.id_thread = (i->id & TFA_ID_MAX) | ((uint64_t)(i->thread & 0xffffff) << 40),
		.stack_id = i->stack_id,
		.tag = i->tag,
	};
	return r;
}

static inline void
tfa_record_unpack(const tfa_record_t *r, tfa_alloc_info_t *i)
{
	i->ptr = (uintptr_t)r->ptr;
	i->requested = r->size_meta & TFA_REQUESTED_MAX;
	i->backend = (uint8_t)((r->size_meta >> 47) & 7);
	i->kind = (uint8_t)((r->size_meta >> 50) & 7);
	i->device = (uint8_t)((r->size_meta >> 53) & 31);
	i->lg_align = (uint8_t)((r->size_meta >> 58) & 63);
	i->id = r->id_thread & TFA_ID_MAX;
	i->thread = (uint32_t)(r->id_thread >> 40);
	i->stack_id = r->stack_id;
	i->tag = r->tag;
}

/*
 * A shard.  Operations run concurrently on it without a lock: a slot is
 * claimed by compare-and-swap on its key.  Only a rebuild (growth, purge of
 * tombstones), a full walk and fork exclude them: they close the gate and
 * wait until no thread announces the shard (tfa_thread_rec_t.announce).
 */
typedef struct tfa_ptr_shard_s {
	tfa_record_t *slots; /* replaced only while operations are excluded */
	/* Changed only while operations are excluded; NULL: shared. */
	tfa_thread_rec_t *owner;
	uint64_t cap;        /* slots: TFA_PTR_CAP_INITIAL or a multiple of TFA_PTR_CAP_STEP; 0: nothing mapped yet */
	uint64_t home_range; /* the range of chunk places (tfa_ptr_home_range) */
	/* The fast insert's bound: it serves while used < fast_limit (0: unmapped
	 * or starved shards, which only the general insert serves). */
	uint64_t fast_limit;
	uint32_t gate;       /* nonzero: operations wait for the rebuild lock */
	tfa_lock_t rebuild_lock;
	bool starved;        /* growth failed: the last empty slot is kept */
	/* Written by inserts and (live_hint) by the owner's frees, never by other
	 * threads' frees: apart, so that the line every operation reads stays
	 * shared between cores. */
	uint64_t used TFA_ALIGNED_CACHELINE; /* live records and tombstones */
	/*
	 * Live records as the shard's owner counts them (its own inserts and
	 * frees; not the frees of other threads, nor the operations on a shared
	 * shard): the sweep's guess of what a shard holds, which tombstones hide
	 * from `used`.  Exact after every rebuild and every count the sweep
	 * makes.  Too high, a shard is not shrunk until a rebuild of its own;
	 * too low, the sweep counts it (and corrects it).
	 */
	uint64_t live_hint;
} TFA_ALIGNED_CACHELINE tfa_ptr_shard_t;

/* Zero-initialised storage is an empty, usable table. */
typedef struct tfa_ptr_table_s {
	tfa_ptr_shard_t shards[TFA_PTR_SHARDS];
	void (*stale_fn)(void *arg, const tfa_record_t *rec);
	void *stale_arg;
	/* The shards past TFA_PTR_CAP_INITIAL slots, one bit each: those a sweep may shrink. */
	uint64_t grown[TFA_PTR_SHARDS / 64];
	/*
	 * The shards that ever had slots, one bit each: the walks over every
	 * record (the profile's, the leak scan's) visit only those.  Reading
	 * every shard's header touched the table's 128 pages (512 KiB), zero
	 * pages the program's accesses never faulted in: 250 page faults at
	 * every exit, with the table of devices.
	 */
	uint64_t mapped[TFA_PTR_SHARDS / 64];
	/*
	 * Fork: the shards whose rebuild lock or gate was ever written, one bit
	 * each (the child resets those), and the lock a shard's first mapping
	 * takes (the parent holds it across fork, so the child never sees a
	 * shard half mapped).  prefork excludes only the mapped shards: closing
	 * every gate wrote the 4096 shards' headers, 128 pages, and the writes
	 * after fork copied each of them in both processes (about 0.8 ms of a
	 * fork's 1.4 under the shim).
	 */
	uint64_t touched[TFA_PTR_SHARDS / 64];
	uint64_t forked[TFA_PTR_SHARDS / 64]; /* the shards prefork excluded */
	tfa_lock_t map_lock;
	/* Every shard's first slots, TFA_PTR_CAP_INITIAL at shard k's place; reserved at the first need. */
	tfa_record_t *small;
	uint64_t slot_bytes;      /* mapped for the shards' slots now */
	uint64_t slot_bytes_peak; /* the most at once, between rebuilds */
	uint64_t used_peak;       /* the most records in grown shards that a sweep guessed */
} tfa_ptr_table_t;

/* How an operation holds its shard. */
enum tfa_ptr_hold_mode_e {
	TFA_PTR_EXCLUSIVE = 0, /* no other thread can touch the table: plain stores */
	TFA_PTR_ANNOUNCED = 1, /* the thread's record announces the shard */
	TFA_PTR_LOCKED = 2,    /* the rebuild lock is held (threads without a record) */
};

/*
 * A shard held for a sequence of operations: the tracker changes the table
 * and its statistics in one section, so that fork (which waits for every
 * section to end) never sees one without the other.
 */
typedef struct tfa_ptr_held_s {
	tfa_ptr_shard_t *shard;
	tfa_thread_rec_t *rec; /* the announcing record (TFA_PTR_ANNOUNCED) */
	uint8_t mode;
	uint8_t depth;
} tfa_ptr_held_t;

/* How the holder of a shard may change it. */
enum tfa_ptr_access_e {
	TFA_PTR_OWN = 0,     /* no other thread inserts: claim slots and free them without a lock prefix */
	TFA_PTR_SHARED = 1,  /* claim slots by compare-and-swap */
	TFA_PTR_FOREIGN = 2, /* another thread owns the shard: removes as SHARED, inserts revoke first */
};

/* REQUIRES: h holds its shard (the owner does not change meanwhile).  [hot path] */
static TFA_ALWAYS_INLINE int
tfa_ptr_access(tfa_ptr_held_t h)
{
	if (h.mode == TFA_PTR_EXCLUSIVE)
		return TFA_PTR_OWN;
	tfa_thread_rec_t *owner = __atomic_load_n(&h.shard->owner, __ATOMIC_RELAXED);
	if (owner == NULL)
		return TFA_PTR_SHARED;
	return h.mode == TFA_PTR_ANNOUNCED && owner == h.rec ? TFA_PTR_OWN : TFA_PTR_FOREIGN;
}

/*
 * tfa_ptr_access for the fast path, for a hold that tfa_ptr_fast_hold made
 * for r: the holder nearly always announced a shard of its own, and then
 * the hold's rec is r.  Given r, the caller keeps no copy of the hold's rec
 * across its calls (that copy had lived on the stack).  [hot path]
 */
static TFA_ALWAYS_INLINE int
tfa_ptr_fast_access_of(tfa_ptr_held_t h, const tfa_thread_rec_t *r)
{
	if (h.mode == TFA_PTR_EXCLUSIVE)
		return TFA_PTR_OWN;
	tfa_thread_rec_t *owner = __atomic_load_n(&h.shard->owner, __ATOMIC_RELAXED);
	if (tfa_likely(owner == r) && tfa_likely(h.mode == TFA_PTR_ANNOUNCED))
		return TFA_PTR_OWN;
	/* Held by its lock, its owner is someone else as far as this hold goes: tfa_ptr_access. */
	return owner == NULL ? TFA_PTR_SHARED : TFA_PTR_FOREIGN;
}

/*
 * Keys: 0 an empty slot; an odd key a tombstone, the freed pointer + 1 (no
 * pointer the shim records is odd; what was freed there helps tell a double
 * free); TFA_PTR_BUSY a slot being filled.
 */
#define TFA_PTR_BUSY ((uint64_t)2)
#define TFA_PTR_IS_TOMBSTONE(k) (((k) & 1) != 0)
#define TFA_PTR_AGAIN 2 /* insert: the shard needs room; release, make room, retry */

/*
 * An insert makes room when live records and tombstones would pass 3/4 of the
 * shard: it purges the tombstones in place, or grows the shard to twice its
 * live records (rounded down to whole pages), so that 32-byte slots cost at
 * most 64 bytes per live allocation just after growing (the benchmark's memory
 * target is 64 over the backend's own) and 43 just before.  Doubling cost 43
 * to 85 (and 128 when tombstones made half of it).  Capacities are then any
 * multiple of a page, not powers of two: the home slot comes from a
 * multiply-high (tfa_ptr_home) and probes wrap by a compare, as many
 * instructions as the shift and masks they replace.  Growing by 1.5 instead
 * of 2 rebuilds more often, and the fuller shards make longer probes
 * (callgrind: trees 14 -0.3% instructions, churn -1.0%, both measured when
 * a single thread's frees still emptied slots; the python3 workload +1.4% to
 * +2.6%, of which rebuilds 1.8 points at its smaller size).  Shards of less
 * than TFA_PTR_CAP_EXACT slots may grow by one page past 64 bytes a block:
 * with the page as the unit, a purge there would leave too little room.
 *
 * A shard never shrinks by itself, but a heap moves: the blocks of one 512
 * KiB region die and others are born elsewhere, and the sum of every shard's
 * own peak passes the process's peak (python3's workload: 1.25 times, 64 to
 * 80 bytes per block at its peak).
 * So before a shard grows or purges, while the table holds more than 56
 * bytes per record at the most it saw, a sweep shrinks other shards whose
 * live records fell below 1/4 of them (TFA_PTR_SHRINKABLE) to twice those
 * (python3's workload: 53 to 59 bytes per block at the table's peak, for
 * about 1% more instructions: the shards shrunk grow back).  Which to look
 * at, the owner's count of its records says (live_hint): the slots used
 * count the tombstones too.  A shard emptied by other threads' frees keeps
 * its count, and its size, until an insert of its own purges it.
 */
#define TFA_PTR_SHRINKABLE(live, cap) ((cap) > TFA_PTR_CAP_INITIAL && (live) * 4 < (cap))
#define TFA_PTR_OVERLOADED(used, cap) (((used) + 1) * 4 > (cap) * 3)
#define TFA_PTR_CAP_STEP    ((uint64_t)128) /* 32-byte slots: one 4 KiB page */
#define TFA_PTR_CAP_EXACT   ((uint64_t)512)
/*
 * A shard's first slots: 16 (512 bytes), at the shard's place in a range
 * reserved for all of them (tfa_ptr_table_t.small), so that eight shards
 * share a page.  A region holding a few large blocks had cost a page of
 * slots each: 540 KiB of table for the 256 blocks of the benchmark's
 * realloc chains.  A shard grows to a page of its own at its first rebuild
 * (a purge there would come every few allocations of a sparse region that
 * churns, each excluding the shard), and a sweep takes one whose records
 * fell to 4 back to its first slots.
 */
#define TFA_PTR_CAP_INITIAL ((uint64_t)16)

/*
 * The home slot of p in a shard whose chunk places range over home_range
 * (tfa_ptr_home_range of its capacity).  The blocks of one 2^TFA_PTR_CHUNK_LG-byte chunk have
 * neighbouring homes, in address order at 16 bytes a slot: blocks made or
 * freed one after the other usually lie next to each other, and their records
 * then share cache lines instead of each costing a miss once the table
 * outgrows the caches (trees 16 under callgrind with an 8 MiB last-level
 * cache: 4.9 M misses with a hashed home, 1.2 M).  The chunk's place is the
 * Fibonacci hash of its address.  Larger chunks save more misses but make
 * longer runs, and runs at hashed places merge into clusters (512-byte
 * chunks: a heap of 8-byte blocks took 2x the instructions).  How long the
 * clusters grow depends on where the heap lies: with 256-byte chunks (16
 * slots), `trees 16` without stacks took 357 to 658 ms of CPU time as a few
 * allocations before the run moved its blocks (`trees 16 LAYOUT`, LAYOUT 0
 * to 5; one free in seven then passed 16 to 127 other records), and 362 or 440 ms in
 * two runs of the same layout (the address space's random base moves the
 * places too).  128-byte chunks (8 slots): 370 to 445 ms, most layouts
 * 373 to 381; 64-byte chunks: 383 to 420 ms (plain jemalloc: 137 to 144).
 */
#define TFA_PTR_CHUNK_LG 7

static TFA_ALWAYS_INLINE uint64_t
tfa_ptr_home_fast(uintptr_t p, uint64_t home_range)
{
	/*
	 * The chunk's address, and bit 3: 8-byte blocks (jemalloc's smallest
	 * class) at odd multiples of 8 go to a chunk of their own.
	 */
	uint64_t key = (uint64_t)p & ~(uint64_t)(((1u << TFA_PTR_CHUNK_LG) - 1) & ~8u);
	key = (key >> TFA_PTR_CHUNK_LG) | (key << (64 - TFA_PTR_CHUNK_LG)); /* a rotation */
	/*
	 * The top of the hash scaled to [0, home_range) by a multiply-high (any
	 * capacity, no division); a chunk's slots then end before cap, with
	 * no wrap to compute.
	 */
	uint64_t chunk = (uint64_t)(((unsigned __int128)(key * UINT64_C(0x9E3779B97F4A7C15)) * home_range) >> 64);
	return chunk + ((p >> 4) & ((1u << (TFA_PTR_CHUNK_LG - 4)) - 1));
}

/* The range of chunk places in a shard of cap slots: each place is followed by its chunk's slots. */
static TFA_ALWAYS_INLINE uint64_t
tfa_ptr_home_range(uint64_t cap)
{
	return cap - ((1u << (TFA_PTR_CHUNK_LG - 4)) - 1);
}

static TFA_ALWAYS_INLINE uint64_t
tfa_ptr_home(uintptr_t p, uint64_t cap)
{
	return tfa_ptr_home_fast(p, tfa_ptr_home_range(cap));
}

/* The slot after i in a probe, and the one before (a shard of cap slots). */
static TFA_ALWAYS_INLINE uint64_t
tfa_ptr_next(uint64_t i, uint64_t cap)
{
	return tfa_likely(i + 1 != cap) ? i + 1 : 0;
}

static TFA_ALWAYS_INLINE uint64_t
tfa_ptr_prev(uint64_t i, uint64_t cap)
{
	return (tfa_likely(i != 0) ? i : cap) - 1;
}

/*
 * The shard comes from the pointer's 512 KiB region, not from the pointer:
 * blocks made or freed
 * one after the other usually lie close together, so consecutive operations
 * probe one small shard table that stays in cache (on a 500,000-block tree,
 * 25% faster than the 8 MiB regions over 32 shards before); and both jemalloc
 * and glibc give each thread its own arena, so a thread's operations mostly
 * touch slots no other core writes.  64 KiB regions measured the same under
 * callgrind on trees 15: the same instructions, 0.6% more L1 and 12% fewer
 * last-level data misses (of 0.2 M for 3.7 M pairs).  The region's number
 * itself, not a hash of it: the regions of a heap are consecutive, so their
 * shards' headers are too (a 70 MB heap of large blocks, the benchmark's
 * realloc chains, wrote 436 KiB of the 512 KiB of headers when a hash
 * spread its 140 regions over every page), and regions alias only 2 GiB
 * apart (a hash made any two collide by chance); a multiply and a constant
 * fewer (callgrind, trees 14: 1,391 -> 1,378 million instructions).
 */
static TFA_ALWAYS_INLINE tfa_ptr_shard_t *
tfa_ptr_shard_of(tfa_ptr_table_t *t, uintptr_t p)
{
	return &t->shards[(p >> 19) & (TFA_PTR_SHARDS - 1)];
}

/* Out-of-line parts of hold: no record, nested too deep, or the gate closed. */
void tfa_ptr_hold_locked(tfa_ptr_table_t *t, tfa_ptr_held_t *h);
void tfa_ptr_hold_gated(tfa_ptr_held_t *h);

/*
 * Nonzero: announcements are plain stores, and whoever closes a gate makes
 * every thread of the process execute a full barrier (membarrier's private
 * expedited command) before it reads them: the rare rebuild pays for the
 * barrier that every operation would otherwise make.  0: each announcement
 * is an exchange (a full barrier).  Set by tfa_ptr_table_init_barriers.
 */
extern uint8_t tfa_ptr_asym_announce;

/*
 * Registers the process for membarrier and, when the kernel has it, turns
 * tfa_ptr_asym_announce on.  Call once (the shim's init) and again in a fork
 * child (while it has one thread).
 */
void tfa_ptr_table_init_barriers(void);

/*
 * Announces shard s at depth d of this thread's record r, by a plain store
 * (plain: tfa_ptr_asym_announce is on) or an exchange, then says whether a
 * rebuild closed its gate (the caller then steps out: tfa_ptr_hold_gated).
 * [hot path]
 */
static TFA_ALWAYS_INLINE bool
tfa_ptr_announce_as(tfa_thread_rec_t *r, uint32_t d, tfa_ptr_shard_t *s, bool plain)
{
	tfa_tls.table_depth = d + 1;
	if (tfa_likely(plain)) {
		/* The closer of a gate issues the barrier between this store and the load below. */
		__atomic_store_n(&r->announce[d], s, __ATOMIC_RELAXED);
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	} else {
		(void)__atomic_exchange_n(&r->announce[d], s, __ATOMIC_SEQ_CST);
	}
	return __atomic_load_n(&s->gate, __ATOMIC_SEQ_CST) != 0;
}

/* tfa_ptr_announce_as, the kind of announcement the process uses.  [hot path] */
static TFA_ALWAYS_INLINE bool
tfa_ptr_announce(tfa_thread_rec_t *r, uint32_t d, tfa_ptr_shard_t *s)
{
	return tfa_ptr_announce_as(r, d, s, __atomic_load_n(&tfa_ptr_asym_announce, __ATOMIC_RELAXED) != 0);
}

/*
 * Holds the shard of ptr.  Nothing at all while the process has a single
 * thread (glibc clears __libc_single_threaded before the first thread starts,
 * never inside one of these sections), nor for the forking thread, which has
 * excluded everyone else.  Otherwise the thread announces the shard with one
 * exchange on its own cache line (a full barrier), then checks that no
 * rebuild closed the gate: no cache line shared with other threads is
 * written.  Two levels deep (a signal handler's malloc inside the shim's).
 * [hot path]
 */
static TFA_ALWAYS_INLINE tfa_ptr_held_t
tfa_ptr_table_hold(tfa_ptr_table_t *t, uintptr_t ptr)
{
	tfa_ptr_held_t h = { .shard = tfa_ptr_shard_of(t, ptr), .mode = TFA_PTR_EXCLUSIVE };

	if (tfa_likely(__libc_single_threaded) || tfa_unlikely(tfa_tls.holds_all_locks))
		return h;
	tfa_thread_rec_t *r = tfa_tls.rec;
	uint32_t d = tfa_tls.table_depth;
	if (tfa_unlikely(r == NULL || r == &tfa_orphan_rec || d >= TFA_ANNOUNCE_DEPTH)) {
		tfa_ptr_hold_locked(t, &h);
		return h;
	}
	h.mode = TFA_PTR_ANNOUNCED;
	h.rec = r;
	h.depth = (uint8_t)d;
	if (tfa_unlikely(tfa_ptr_announce(r, d, h.shard)))
		tfa_ptr_hold_gated(&h);
	return h;
}

/*
 * Lets the shard of h go; r is the record that announced it, when h was
 * announced.  The fast paths pass the thread's own record (a hold that
 * tfa_ptr_fast_hold made for r has it), so that they keep no copy of h.rec
 * across their calls (see tfa_ptr_fast_access_of).
 */
static TFA_ALWAYS_INLINE void
tfa_ptr_fast_release(tfa_ptr_held_t h, tfa_thread_rec_t *r)
{
	if (tfa_likely(h.mode == TFA_PTR_ANNOUNCED)) {
		__atomic_store_n(&r->announce[h.depth], NULL, __ATOMIC_RELEASE);
		tfa_tls.table_depth = h.depth;
	} else if (h.mode == TFA_PTR_LOCKED) {
		tfa_unlock(&h.shard->rebuild_lock);
	}
}

static TFA_ALWAYS_INLINE void
tfa_ptr_table_release(tfa_ptr_held_t h)
{
	tfa_ptr_fast_release(h, h.rec);
}

/*
 * Makes room in ptr's shard: maps, grows or purges it.  Returns 0, or
 * -ENOMEM when no memory could be had and the shard is full.  REQUIRES: the
 * caller holds no shard of t.
 */
int tfa_ptr_table_make_room(tfa_ptr_table_t *t, uintptr_t ptr) TFA_MUST_CHECK;

/* Remembers a freed pointer on this thread, to tell a double free later. */
static TFA_ALWAYS_INLINE void
tfa_ptr_note_freed(uintptr_t ptr)
{
	tfa_tls.recent_free[tfa_tls.recent_pos++ % TFA_RECENT_FREES] = ptr;
}

/*
 * As tfa_ptr_table_insert, on a held shard.  Returns TFA_PTR_AGAIN when the
 * shard must first make room (nothing was changed).  A stale record for the
 * same pointer (a free that bypassed the shim) is replaced when it lies on
 * the probe path; one further along is dropped at the shard's next rebuild.
 * REQUIRES: h holds rec->ptr's shard.  [hot path]
 */
static TFA_ALWAYS_INLINE int
tfa_ptr_held_insert(tfa_ptr_held_t h, const tfa_record_t *rec, tfa_record_t *replaced)
{
	tfa_ptr_shard_t *s = h.shard;
	tfa_record_t *slots = s->slots;
	uint64_t cap = s->cap;
	int access = tfa_ptr_access(h);
	uint64_t used = __atomic_load_n(&s->used, __ATOMIC_RELAXED);

	if (tfa_unlikely(slots == NULL) || tfa_unlikely(TFA_PTR_OVERLOADED(used, cap) && !s->starved)
	    || tfa_unlikely(access == TFA_PTR_FOREIGN))
		return TFA_PTR_AGAIN;
	uint64_t i = tfa_ptr_home_fast((uintptr_t)rec->ptr, s->home_range);
	for (uint64_t n = 0; n < cap; n++, i = tfa_ptr_next(i, cap)) {
		tfa_record_t *slot = &slots[i];
		uint64_t key = __atomic_load_n(&slot->ptr, __ATOMIC_ACQUIRE);
		if (tfa_unlikely(key == rec->ptr)) {
			if (replaced != NULL)
				*replaced = *slot;
			slot->size_meta = rec->size_meta;
			slot->id_thread = rec->id_thread;
			slot->stack_id = rec->stack_id;
			slot->tag = rec->tag;
			return 1;
		}
		if (key != 0 && !TFA_PTR_IS_TOMBSTONE(key))
			continue;
		/*
		 * A starved shard keeps one slot empty: every probe must end.
		 * Frees leave tombstones, which a purge turns into room without
		 * memory (make_room): while the owner's count says some are
		 * there, the caller makes room and comes back.
		 */
		if (key == 0 && tfa_unlikely(s->starved)
		    && __atomic_load_n(&s->used, __ATOMIC_RELAXED) + 2 > cap)
			return __atomic_load_n(&s->live_hint, __ATOMIC_RELAXED) + 2 <= cap ? TFA_PTR_AGAIN
											     : -ENOMEM;
		if (access == TFA_PTR_SHARED) {
			if (!__atomic_compare_exchange_n(&slot->ptr, &key, TFA_PTR_BUSY, false,
							 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				n--; /* lost the slot to another insert: look at it again */
				i = tfa_ptr_prev(i, cap);
				continue;
			}
			if (key == 0)
				__atomic_fetch_add(&s->used, 1, __ATOMIC_RELAXED);
		} else {
			if (!tfa_local_cas_u64(&slot->ptr, key, TFA_PTR_BUSY)) {
				n--; /* a signal handler's insert took it: look at it again */
				i = tfa_ptr_prev(i, cap);
				continue;
			}
			if (key == 0)
				tfa_local_add_u64(&s->used, 1);
			tfa_local_add_u64(&s->live_hint, 1);
		}
		slot->size_meta = rec->size_meta;
		slot->id_thread = rec->id_thread;
		slot->stack_id = rec->stack_id;
		slot->tag = rec->tag;
		__atomic_store_n(&slot->ptr, rec->ptr, __ATOMIC_RELEASE);
		return 0;
	}
	return TFA_PTR_AGAIN; /* every slot live: only a rebuild can help */
}

/* The out-of-line part of tfa_ptr_held_insert_room. */
int tfa_ptr_insert_after_room(tfa_ptr_table_t *t, tfa_ptr_held_t *h, const tfa_record_t *rec,
			      tfa_record_t *replaced);

/*
 * tfa_ptr_held_insert, making room when the shard needs it: *h is released
 * for the rebuild and held again.  Returns 0, 1 (see tfa_ptr_table_insert) or
 * -ENOMEM.  REQUIRES: the caller holds no lock (a rebuild waits for other
 * threads' operations, which may wait for it).  [hot path]
 */
static TFA_ALWAYS_INLINE int
tfa_ptr_held_insert_room(tfa_ptr_table_t *t, tfa_ptr_held_t *h, const tfa_record_t *rec,
			 tfa_record_t *replaced)
{
	int r = tfa_ptr_held_insert(*h, rec, replaced);

	if (tfa_unlikely(r == TFA_PTR_AGAIN))
		r = tfa_ptr_insert_after_room(t, h, rec, replaced);
	return r;
}

/*
 * Removes the record of ptr at slot i of s, held with TFA_PTR_OWN: the slot
 * becomes a tombstone, for inserts to take again, and rebuilds purge them.
 * Emptying the slot when the next one was empty (with the tombstones just
 * before it), as a single thread once did, cost more than its shorter probes
 * saved: a look at the next slot, a compare-and-swap and a count of used
 * slots lowered for each slot emptied (raised again by the insert that takes
 * it), and branches on what lies around a random slot.  Without it: churn's
 * loop in one thread 0.64 -> 0.47 s of CPU time for 10 million pairs;
 * `trees 14` 1,477 -> 1,426 million instructions and `trees 16` 21.2 ->
 * 14.0 million mispredictions (cachegrind).  The sweep learns what a shard
 * holds from live_hint.  [hot path]
 */
static TFA_ALWAYS_INLINE bool
tfa_ptr_owned_remove(tfa_ptr_shard_t *s, uint64_t i, uint64_t ptr)
{
	/* False: another thread freed ptr just now (a double free); only an exact tie goes unseen. */
	if (tfa_unlikely(!tfa_local_cas_u64(&s->slots[i].ptr, ptr, ptr + 1)))
		return false;
	tfa_local_add_u64(&s->live_hint, -1);
	return true;
}

/*
 * Removes ptr's record from a held shard into *out.  The slot becomes a
 * tombstone.  False when ptr is not there (or another thread freed it at the
 * same time).  [hot path]
 */
static TFA_ALWAYS_INLINE bool
tfa_ptr_held_remove(tfa_ptr_held_t h, uintptr_t ptr, tfa_record_t *out)
{
	tfa_ptr_shard_t *s = h.shard;
	tfa_record_t *slots = s->slots;

	if (tfa_unlikely(ptr <= TFA_PTR_BUSY || (ptr & 1) != 0 || slots == NULL))
		return false;
	uint64_t cap = s->cap;
	uint64_t i = tfa_ptr_home_fast(ptr, s->home_range);
	for (uint64_t n = cap;; i = tfa_ptr_next(i, cap)) {
		uint64_t key = __atomic_load_n(&slots[i].ptr, __ATOMIC_ACQUIRE);
		if (key == ptr)
			break;
		if (key == 0 || --n == 0)
			return false;
	}
	tfa_record_t *slot = &slots[i];
	if (out != NULL)
		*out = *slot;
	tfa_ptr_note_freed(ptr);
	if (tfa_ptr_access(h) != TFA_PTR_OWN) {
		uint64_t expected = ptr;
		return __atomic_compare_exchange_n(&slot->ptr, &expected, ptr + 1, false,
						   __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	}
	return tfa_ptr_owned_remove(s, i, ptr);
}

/* ---- the process tracker's fast path (core/shim.c) ------------------------------------------ */

/*
 * The fast hold's one test: a thread's table_depth below this announces
 * with a plain store.  TFA_ANNOUNCE_DEPTH when announcements are plain
 * stores (tfa_ptr_asym_announce), else 0: every fast hold then takes
 * tfa_ptr_fast_hold_slow.  A forking thread's table_depth is raised by
 * TFA_PTR_DEPTH_FORKING meanwhile (tfa_ptr_table_forking), so that it
 * fails the test too: three tests (holds_all_locks, the depth, the kind of
 * announcement) in one compare.
 */
extern uint32_t tfa_ptr_fast_depth_limit;
#define TFA_PTR_DEPTH_FORKING 0x10000u

/* The forking thread holds every lock (true) or no longer (false). */
void tfa_ptr_table_forking(bool forking);

/* What tfa_ptr_fast_hold does not serve: h announced by r, depth unset. */
void tfa_ptr_fast_hold_slow(tfa_ptr_table_t *t, tfa_ptr_held_t *h);

/*
 * tfa_ptr_table_hold for the fast path of a registered thread while the
 * process has threads: the caller knows the thread's own record r (never the
 * orphan) and that __libc_single_threaded is false, so only the announcement
 * is left.  [hot path]
 */
static TFA_ALWAYS_INLINE tfa_ptr_held_t
tfa_ptr_fast_hold(tfa_ptr_table_t *t, uintptr_t ptr, tfa_thread_rec_t *r)
{
	/* The slow paths work on a copy: h itself stays in registers. */
	tfa_ptr_held_t h = { .shard = tfa_ptr_shard_of(t, ptr), .rec = r, .mode = TFA_PTR_ANNOUNCED }, slow;
	uint32_t d = tfa_tls.table_depth;

	if (tfa_unlikely(d >= __atomic_load_n(&tfa_ptr_fast_depth_limit, __ATOMIC_RELAXED))) {
		slow = h;
		tfa_ptr_fast_hold_slow(t, &slow);
		return slow;
	}
	h.depth = (uint8_t)d;
	/* Below the limit, announcements are plain stores. */
	if (tfa_unlikely(tfa_ptr_announce_as(r, d, h.shard, true))) {
		slow = h;
		tfa_ptr_hold_gated(&slow);
		return slow;
	}
	return h;
}

/*
 * Claims the free slot (empty, or a tombstone) that held key, for an insert
 * into s held as tfa_ptr_fast_insert's caller holds it.  false: another
 * insert (or a signal handler's) took it first.  [hot path]
 */
static TFA_ALWAYS_INLINE bool
tfa_ptr_fast_claim(tfa_ptr_shard_t *s, tfa_record_t *slot, uint64_t key, bool shared)
{
	if (!shared) {
		if (tfa_unlikely(!tfa_local_cas_u64(&slot->ptr, key, TFA_PTR_BUSY)))
			return false;
		if (key == 0)
			tfa_local_add_u64(&s->used, 1);
		tfa_local_add_u64(&s->live_hint, 1);
		return true;
	}
	if (tfa_unlikely(!__atomic_compare_exchange_n(&slot->ptr, &key, TFA_PTR_BUSY, false, __ATOMIC_ACQUIRE,
						      __ATOMIC_RELAXED)))
		return false;
	if (key == 0)
		__atomic_fetch_add(&s->used, 1, __ATOMIC_RELAXED);
	return true;
}

/*
 * tfa_ptr_fast_insert's probe from slot i (the home slot, taken or lost):
 * the slot it claimed, or NULL (a stale record of ptr, or no free slot).
 * Out of line, so that the common case, a free home slot, keeps its
 * values in registers (trees 14: the loop's counter and capacity had
 * lived on the stack).
 */
TFA_NOINLINE tfa_record_t *tfa_ptr_fast_probe(tfa_ptr_shard_t *s, uint64_t ptr, uint64_t i, bool shared);

/*
 * Inserts the record of ptr into its shard s, held by the caller (concurrent:
 * announced or locked; otherwise exclusive), when that needs neither room nor
 * the replacement of a stale record.  Returns false, having changed nothing,
 * when it cannot serve: the general insert (tfa_ptr_held_insert_room) then
 * does.  shared: the holder's access is TFA_PTR_SHARED (never call it with
 * TFA_PTR_FOREIGN).  REQUIRES: ptr even and above TFA_PTR_BUSY.  [hot path]
 */
static TFA_ALWAYS_INLINE bool
tfa_ptr_fast_insert(tfa_ptr_shard_t *s, uint64_t ptr, uint64_t size_meta, uint64_t id_thread,
		    uint32_t stack_id, uint32_t tag, bool shared)
{
	uint64_t used = __atomic_load_n(&s->used, __ATOMIC_RELAXED);

	/* Below the limit the shard is mapped and keeps empty slots: every probe ends. */
	if (tfa_unlikely(used >= __atomic_load_n(&s->fast_limit, __ATOMIC_RELAXED)))
		return false;
	uint64_t i = tfa_ptr_home_fast(ptr, s->home_range);
	tfa_record_t *slot = &s->slots[i];
	uint64_t key = __atomic_load_n(&slot->ptr, __ATOMIC_ACQUIRE);
	if (tfa_unlikely(!((key == 0 || TFA_PTR_IS_TOMBSTONE(key)) && tfa_ptr_fast_claim(s, slot, key, shared)))) {
		slot = tfa_ptr_fast_probe(s, ptr, i, shared);
		if (slot == NULL)
			return false;
	}
	slot->size_meta = size_meta;
	slot->id_thread = id_thread;
	slot->stack_id = stack_id;
	slot->tag = tag;
	__atomic_store_n(&slot->ptr, ptr, __ATOMIC_RELEASE);
	return true;
}

/*
 * The slot of ptr's record in its held shard s, or -1.  REQUIRES: ptr even and
 * above TFA_PTR_BUSY.  [hot path]
 */
static TFA_ALWAYS_INLINE int64_t
tfa_ptr_fast_find(const tfa_ptr_shard_t *s, uint64_t ptr)
{
	const tfa_record_t *slots = s->slots;

	if (tfa_unlikely(slots == NULL))
		return -1;
	uint64_t cap = s->cap;
	uint64_t i = tfa_ptr_home_fast(ptr, s->home_range);
	for (uint64_t n = cap;; i = tfa_ptr_next(i, cap)) {
		uint64_t key = __atomic_load_n(&slots[i].ptr, __ATOMIC_ACQUIRE);
		if (tfa_likely(key == ptr))
			return (int64_t)i;
		if (key == 0 || tfa_unlikely(--n == 0))
			return -1;
	}
}

/*
 * Removes the record of ptr found at slot i of s, announced by this thread
 * while others may run: false when another thread freed ptr meanwhile (a
 * double free: nothing changed).  [hot path]
 */
static TFA_ALWAYS_INLINE bool
tfa_ptr_fast_remove_concurrent(tfa_ptr_shard_t *s, uint64_t i, uint64_t ptr)
{
	uint64_t expected = ptr;

	return __atomic_compare_exchange_n(&s->slots[i].ptr, &expected, ptr + 1, false,
					   __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

/*
 * Inserts a record.  Returns 0; 1 when a record for the same pointer was
 * already there (a free the shim never saw: *replaced receives the old record);
 * -ENOMEM when no memory for the table can be had.  [hot path]
 */
int tfa_ptr_table_insert(tfa_ptr_table_t *t, const tfa_record_t *rec, tfa_record_t *replaced)
	TFA_MUST_CHECK;

/* Removes ptr's record into *out.  Returns false when ptr is not in the table. [hot path] */
bool tfa_ptr_table_remove(tfa_ptr_table_t *t, uintptr_t ptr, tfa_record_t *out);

/* Copies ptr's record into *out (when out != NULL).  Returns false when absent. */
bool tfa_ptr_table_lookup(tfa_ptr_table_t *t, uintptr_t ptr, tfa_record_t *out);

/*
 * Whether ptr was freed lately: among this thread's last TFA_RECENT_FREES
 * frees, or still a tombstone in its shard.
 */
bool tfa_ptr_table_recently_freed(tfa_ptr_table_t *t, uintptr_t ptr);

/* Bytes mapped for the shards' slots (a walk of the shards, without locks: for reports). */
uint64_t tfa_ptr_table_bytes(const tfa_ptr_table_t *t);

/*
 * The most bytes mapped for the shards' slots at once (a rebuild's old and
 * new slots, together for a moment, count once): with shrinking shards, the
 * figure to compare with the most blocks live at once.
 */
uint64_t tfa_ptr_table_peak_bytes(const tfa_ptr_table_t *t);

/* Live records in the table (a walk: for reports and tests). */
uint64_t tfa_ptr_table_count(tfa_ptr_table_t *t);

/*
 * Calls fn on every record, shard by shard, with that shard's operations
 * excluded.  REQUIRES: fn neither allocates through the shim nor touches the
 * table.
 */
void tfa_ptr_table_foreach(tfa_ptr_table_t *t, void (*fn)(void *arg, const tfa_record_t *rec),
			   void *arg);

/*
 * Stale records (a pointer recorded twice: a free bypassed the shim) that a
 * rebuild dropped are passed to fn, with the shard's operations excluded.
 */
void tfa_ptr_table_set_stale_hook(tfa_ptr_table_t *t,
				  void (*fn)(void *arg, const tfa_record_t *rec), void *arg);

/* Unmaps every shard; the table is empty and usable again afterwards. */
void tfa_ptr_table_destroy(tfa_ptr_table_t *t);

/* Fork: exclude every operation before fork, admit them again after (parent, child). */
void tfa_ptr_table_prefork(tfa_ptr_table_t *t);
void tfa_ptr_table_postfork_parent(tfa_ptr_table_t *t);
void tfa_ptr_table_postfork_child(tfa_ptr_table_t *t);

#endif /* TFA_CORE_PTR_TABLE_H */
