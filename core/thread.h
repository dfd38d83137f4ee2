/* SPDX-License-Identifier: MIT */
/*
 * Per-thread state of the shim.
 *
 * Glossary:
 *   tls          the thread's own state in initial-exec TLS: the reentrancy
 *                guard, the current resource tag, its thread record.
 *   thread rec   memory from the arena that holds the thread's statistics
 *                slots.  Records outlive their threads (their counts stay part
 *                of every sum) and are recycled when a thread exits.
 *   stat slot    one tracker's per-thread counters inside a thread record.
 *                A tracker reads its statistics by summing its slot over all
 *                records: no shared cache line is written on the hot path.
 *   orphan rec   the record used by a thread after its exit hook ran (glibc
 *                still frees thread memory then); shared, so it is locked.
 */
#ifndef TFA_CORE_THREAD_H
#define TFA_CORE_THREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/common.h"
#include "core/lock.h"

#define TFA_MAX_STAT_SLOTS 4

typedef struct tfa_stat_slot_s {
	uint64_t num_allocs;
	uint64_t num_frees;
	uint64_t num_reallocs;
	uint64_t total_bytes;
	uint64_t total_allocated_bytes;
	uint64_t largest_alloc_size;
	int64_t pending_bytes;     /* change of bytes in use not yet published */
	int64_t pending_allocated; /* the same in allocated bytes */
	int64_t published_blocks;  /* num_allocs - num_frees when the slot last published */
	uint64_t next_id;          /* the thread's block of allocation ids */
	uint64_t id_end;
} tfa_stat_slot_t;

/* Nesting of pointer-table sections a thread announces (a signal handler's malloc). */
/*
 * A thread's pending changes to one allocation site's figures (core/sites.h):
 * with threads, the sites of the process tracker are counted here first, so
 * that two threads allocating at one site do not pass its cache line back and
 * forth.  seq is odd while the owner moves the figures to the site.
 */
#define TFA_SITE_CACHE 16

typedef struct tfa_site_delta_s {
	uint32_t stack_id; /* 0: unused */
	uint32_t seq;
	uint64_t allocs;
	uint64_t total_bytes;
	int64_t in_use_bytes;
	int64_t in_use_blocks;
} tfa_site_delta_t;

#define TFA_ANNOUNCE_DEPTH 2
#define TFA_RECENT_FREES   32

typedef struct tfa_thread_rec_s {
	struct tfa_thread_rec_s *next_all; /* every record ever made; never unlinked */
	struct tfa_thread_rec_s *next_free;
	uint32_t index; /* 1-based registration number of the current owner */
	uint32_t live;
	uint64_t id_thread_bits; /* index as a record's id_thread has it (core/ptr_table.h) */
	/* The pointer-table shards this thread is inside (core/ptr_table.h). */
	void *announce[TFA_ANNOUNCE_DEPTH];
	tfa_stat_slot_t slots[TFA_MAX_STAT_SLOTS];
	tfa_site_delta_t site_cache[TFA_SITE_CACHE];
	/*
	 * The private jemalloc's explicit thread cache that takes this record's
	 * frees of blocks in another thread's pointer-table shard (core/shim.c),
	 * as TFA_JE_MALLOCX_TCACHE flags; 0: none yet; -1: none to be had.  Kept
	 * when the record passes to a new thread.
	 */
	int foreign_tcache_flags;
	/*
	 * The last walk of this record's thread, mapped at its first capture
	 * (core/stack_cache.h); kept when the record passes to a new thread.
	 * NULL: none yet; cache_failed: none to be had.
	 */
	struct tfa_stack_cache_s *stack_cache;
	bool stack_cache_failed;
	/* The alternate signal stack the record's thread runs handlers on (tfa_thread_altstack_on); kept with the record. */
	void *altstack;
	/* The owner's thread pointer (its pthread_t): where its stack mapping ends. */
	uintptr_t thread_pointer;
	/* Live in the parent when this process forked: its thread is not here (tfa_thread_left_by_fork). */
	bool left_by_fork;
} TFA_ALIGNED_CACHELINE tfa_thread_rec_t;

enum tfa_tls_state_e {
	TFA_TLS_NEW = 0,
	TFA_TLS_REGISTERED = 1,
	TFA_TLS_RETIRED = 2,
};

typedef struct tfa_tls_s {
	uint32_t guard;            /* > 0: nested call, go straight to the backend */
	uint32_t state;            /* enum tfa_tls_state_e */
	uint32_t tag;              /* current resource tag, 0 = none */
	uint32_t holds_all_locks;  /* this thread is forking and holds every lock */
	union {
		struct {
			uint32_t in_shim;   /* depth of shim calls on this thread */
			int pending_signal; /* a fatal signal that arrived inside a shim call */
		};
		/* Both: nonzero after a call's end unless it was the outermost with nothing pending. */
		uint64_t shim_word;
	};
	uint64_t deferred;         /* signals (bit sig - 1) blocked until the shim call ends */
	uint32_t table_depth;      /* pointer-table sections announced */
	uint32_t recent_pos;
	tfa_thread_rec_t *rec;
	tfa_thread_rec_t *fast_rec; /* rec while the thread is registered (never the orphan): NULL otherwise */
	int *errno_loc;            /* __errno_location() of the thread, set with fast_rec */
	int64_t sample_left;       /* bytes until the next sampled allocation (TFALLOC_SAMPLE_BYTES) */
	uint64_t sample_rng;       /* xorshift state of the sampling intervals; 0: not seeded */
	uint32_t tick_left;        /* allocations until the shim next looks at the clock (core/shim.c) */
	uint32_t walking;          /* nonzero: inside a stack walk of a capture (core/shim.c, walk_begin) */
	uintptr_t recent_free[TFA_RECENT_FREES]; /* the last pointers this thread freed */
} tfa_tls_t;

/* core/shim.c's shim_exit lowers the depth through the word: the depth is its low half. */
_Static_assert(offsetof(tfa_tls_t, in_shim) == offsetof(tfa_tls_t, shim_word)
		       && offsetof(tfa_tls_t, pending_signal) == offsetof(tfa_tls_t, in_shim) + 4
		       && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "in_shim is the low half of shim_word, pending_signal the high one");

extern TFA_TLS tfa_tls_t tfa_tls;
extern tfa_thread_rec_t tfa_orphan_rec;
extern tfa_lock_t tfa_orphan_lock;

/*
 * In a forked child: the thread pointers of the threads the parent had at
 * the fork, other than the forking one, that the shim knew (they had
 * allocated).  Their stacks are still mapped here, as they were at the
 * fork, and the blocks they pointed to are still pointed to.  Writes at most
 * max; returns how many there are.
 */
size_t tfa_thread_left_by_fork(uintptr_t *tps, size_t max);

/*
 * In a forked child: the values the parent's other threads held in
 * thread-specific data at the fork (glibc clears them in the child), copied
 * by tfa_thread_prefork; *values, and how many.  0 where glibc does not say
 * where they lie (tfa_thread_tsd_layout_init).
 */
size_t tfa_thread_left_by_fork_tsd(const uintptr_t **values);

/* Finds glibc's layout of thread-specific data (its libthread_db symbols); at start, outside any fork. */
void tfa_thread_tsd_layout_init(void);

/* Slot 0 belongs to the process's tracker, which exists before any constructor runs. */
#define TFA_SLOT_PROCESS 0

/* Called for each slot in use when a thread exits, to publish its pending deltas. */
typedef void (*tfa_slot_flush_fn)(void *ctx, tfa_stat_slot_t *slot);

static TFA_ALWAYS_INLINE bool
tfa_guard_active(void)
{
	return tfa_tls.guard != 0;
}

/* Brackets every call from the shim into code it does not own. */
static TFA_ALWAYS_INLINE void
tfa_guard_enter(void)
{
	tfa_tls.guard++;
}

static TFA_ALWAYS_INLINE void
tfa_guard_exit(void)
{
	tfa_tls.guard--;
}

tfa_thread_rec_t *tfa_thread_register_slow(void);

/*
 * The calling thread's record, registering the thread on first use.  Returns
 * &tfa_orphan_rec after the thread's exit hook ran or when no memory is left;
 * callers then hold tfa_orphan_lock while they update it.  [hot path]
 */
static TFA_ALWAYS_INLINE tfa_thread_rec_t *
tfa_thread_rec(void)
{
	tfa_thread_rec_t *r = tfa_tls.rec;
	if (tfa_likely(r != NULL))
		return r;
	return tfa_thread_register_slow();
}

/* Thread index of the caller for allocation records (0 when unknown). */
static TFA_ALWAYS_INLINE uint32_t
tfa_thread_index(const tfa_thread_rec_t *r)
{
	return r == &tfa_orphan_rec ? 0 : r->index;
}

/*
 * Reserves a statistics slot for a tracker; flush is called with ctx for each
 * record of an exiting thread.  Returns the slot index or -ENOSPC.
 */
int tfa_thread_slot_acquire(tfa_slot_flush_fn flush, void *ctx) TFA_MUST_CHECK;

/* Sets the exit flush of the process slot (TFA_SLOT_PROCESS). */
void tfa_thread_slot_set_process_flush(tfa_slot_flush_fn flush, void *ctx);

/* Releases a slot and zeroes it in every record.  REQUIRES: no thread uses it. */
void tfa_thread_slot_release(int slot);

/* Calls fn on every record, the orphan record included.  Lock-free reader. */
void tfa_thread_foreach(void (*fn)(void *arg, tfa_thread_rec_t *rec), void *arg);

/* Number of threads registered now (live records). */
uint32_t tfa_thread_live_count(void);

/*
 * Whether a registered thread without an alternate signal stack of its own
 * gets one of the shim's (the shim's fatal-signal handler runs there, so that
 * a stack overflow still leaves a profile).  Set once at init; then call
 * tfa_thread_altstack_self for the calling thread, registered before.
 */
extern bool tfa_thread_altstack_on;
void tfa_thread_altstack_self(void);

/*
 * bytes of stack for a signal handler, with a guard page below (the shim's
 * mmap: its own memory, address space until touched); NULL on failure.
 */
void *tfa_thread_map_stack(size_t bytes);

void tfa_thread_prefork(void);
void tfa_thread_postfork_parent(void);
void tfa_thread_postfork_child(void);

#endif /* TFA_CORE_THREAD_H */
