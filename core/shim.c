/* SPDX-License-Identifier: MIT */
/*
 * The process's tracker and everything around it: init, memory errors, the
 * profile written at exit, fork.
 *
 * Lock order (outer first; no lock is held across a call into foreign code):
 *   profile_lock -> timeline_lock (taken alone, by trylock, when sampling)
 *   errors_lock -> quarantine_lock -> ptr table shard locks -> orphan lock -> arena lock -> own maps lock
 *   jemalloc's mutexes -> own maps lock (it maps memory holding them)
 *   threads lock and the registry lock are never held with another.
 */
#include "core/shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h> /* rename */
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/child_env.h"
#include "core/handoff.h"
#include "core/leak_scan.h"
#include "core/log.h"
#include "core/modules.h"
#include "core/options.h"
#include "core/own_maps.h"
#include "core/profile_format.h"
#include "core/profile_write.h"
#include "core/remote.h"
#include "core/stack_table.h"
#include "core/thread.h"
#include "core/timeline.h"
#include "core/tracking_allocator.h"
#include "core/unwind.h"
#include "registry/backends.h"
#include "registry/jemalloc_fast.h"
#include "core/control.h"
#include "core/devices.h"
#include "registry/registry.h"

extern char **environ;

/* ---- the process tracker: usable before any constructor runs ----------------------------- */

static tfa_ptr_table_t process_table;

static tfa_tracking_allocator_t cpu_tracker = {
	.wrapper = {
		.base = { .ops = &tfa_tracking_allocator_ops, .device = TFA_DEVICE_CPU },
		.wrapped = &tfa_glibc_allocator,
	},
	.backends = { [TFA_BACKEND_GLIBC] = &tfa_glibc_allocator },
	.table = &process_table,
	.slot = TFA_SLOT_PROCESS,
};

static tfa_shim_state_t shim_state;
static tfa_options_t opts;

/* Call stacks: set once by init, before the shim is READY. */
static struct {
	tfa_stacks_mode_t mode; /* TFA_STACKS_NONE until init chose */
	unsigned depth;         /* frames kept per stack */
	uint64_t sample_bytes;  /* mean interval of sampled stacks; 0: every allocation */
	uintptr_t self_lo, self_hi; /* the shim's own code: its frames are never recorded */
	bool walk_cached;       /* TFALLOC_STACK_CACHE: each thread's last walk kept (core/stack_cache.h) */
	uint32_t checked;       /* stack ids up to this one had their modules checked */
	uint32_t max;           /* distinct stacks kept whole (TFALLOC_MAX_STACKS) */
	uint64_t truncated;     /* allocations whose new stack came when the table was full */
} stacks;

/* Frames a new stack keeps once the table holds stacks.max whole ones. */
#define TRUNCATED_DEPTH 8u

static tfa_sites_t process_sites;

/* Who this process is, captured at init (and again in a fork child). */
static struct {
	pid_t pid;
	pid_t ppid;
	uint64_t start_ns;
	uint32_t flags;
	bool exit_hooked; /* on_exit registered: the profile is written there */
	char command[TFA_PROF_MAX_STRING];
	char exe[TFA_PROF_MAX_STRING];
	char comm[64];
	char outdir[TFA_OPT_STR_MAX];
} proc;

static bool take_final_write(void);
static int final_write(uint32_t end_reason, int32_t exit_code);
static void wait_final_write(bool imminent);
static void capture_final_context(void);

/* ---- memory over time and periodic snapshots ------------------------------------------------ */

/* The first points of the series are this far apart; the spacing doubles as the series fills. */
#define TIMELINE_FIRST_INTERVAL_NS 10000000u /* 10 ms */
/* Allocations of a thread between two looks at the clock. */
#define TICK_EVERY 1024u

static tfa_timeline_t timeline;
static tfa_lock_t timeline_lock = TFA_LOCK_INIT;
static uint64_t next_flush_ns; /* CLOCK_MONOTONIC; 0: no periodic snapshots */

/*
 * Counts an allocation; true every TICK_EVERY: the borrow of one
 * subtraction in place (gcc made the decrement a load, a subtraction, a
 * store and a test of the old value).  [hot path]
 */
static TFA_ALWAYS_INLINE bool
tick_due(void)
{
#if defined(__x86_64__)
	bool borrow;
	__asm__ volatile("subl $1, %1" : "=@ccc"(borrow), "+m"(tfa_tls.tick_left));
	return borrow;
#else
	return tfa_tls.tick_left-- == 0;
#endif
}

static void timeline_sample(uint64_t now, bool force);
static TFA_COLD TFA_NOINLINE void shim_tick(void);

/* ---- memory errors ----------------------------------------------------------------------- */

#define MAX_ERROR_ROWS 1024

struct error_row {
	uint32_t kind;
	uint8_t made_by;
	uint8_t freed_by;
	uint32_t stack_id;       /* of the offending call, when it was first seen */
	uint32_t alloc_stack_id; /* of the allocation, when the record was at hand */
	uintptr_t address;
	uint64_t count;
};

static uint32_t capture_stack(void);

static tfa_lock_t errors_lock = TFA_LOCK_INIT;
static struct error_row *error_rows; /* arena memory, MAX_ERROR_ROWS */
static size_t nerror_rows;
static uint64_t error_totals[TFA_ERRC_FIELD_COUNT];
static uint64_t errors_printed[4];

static const char *
kind_call(uint8_t kind, bool allocating)
{
	switch (kind) {
	case TFA_KIND_MALLOC:
		return allocating ? "malloc" : "free";
	case TFA_KIND_NEW:
		return allocating ? "operator new" : "operator delete";
	case TFA_KIND_NEW_ARRAY:
		return allocating ? "operator new[]" : "operator delete[]";
	case TFA_KIND_DEVICE:
		return allocating ? "a device allocation" : "a device free";
	case TFA_KIND_DEVICE_HANDLE:
		return allocating ? "cuMemCreate" : "cuMemRelease";
	default:
		return "the runtime";
	}
}

static void
record_error(uint32_t kind, uintptr_t address, uint8_t made_by, uint8_t freed_by,
	     uint32_t alloc_stack_id)
{
	bool print;
	/* Taken before the lock: capturing may take the stack table's. */
	uint32_t stack_id = __atomic_load_n(&stacks.mode, __ATOMIC_ACQUIRE) != TFA_STACKS_NONE
				    && !tfa_guard_active()
			    ? capture_stack()
			    : 0;

	tfa_lock(&errors_lock);
	error_totals[kind - 1]++;
	struct error_row *row = NULL;
	if (error_rows == NULL)
		error_rows = tfa_arena_alloc(sizeof(*error_rows) * MAX_ERROR_ROWS);
	for (size_t i = 0; error_rows != NULL && i < nerror_rows; i++) {
		if (error_rows[i].kind == kind && error_rows[i].address == address) {
			row = &error_rows[i];
			break;
		}
	}
	if (row == NULL && error_rows != NULL && nerror_rows < MAX_ERROR_ROWS) {
		row = &error_rows[nerror_rows++];
		row->kind = kind;
		row->address = address;
		row->made_by = made_by;
		row->freed_by = freed_by;
		row->stack_id = stack_id;
		row->alloc_stack_id = alloc_stack_id;
	}
	if (row != NULL)
		row->count++;
	else
		error_totals[TFA_ERRC_NOT_RECORDED]++;
	print = errors_printed[kind]++ < opts.max_errors;
	tfa_unlock(&errors_lock);

	if (print) {
		switch (kind) {
		case TFA_ERR_DOUBLE_FREE:
			tfa_log("double free of %p by %s: the block was already freed; ignored",
				(void *)address, kind_call(freed_by, false));
			break;
		case TFA_ERR_INVALID_FREE:
			tfa_log("invalid free of %p by %s: not a block tfalloc handed out; ignored",
				(void *)address, kind_call(freed_by, false));
			break;
		default:
			tfa_log("mismatched free of %p: allocated by %s, released by %s",
				(void *)address, kind_call(made_by, true), kind_call(freed_by, false));
			break;
		}
	}
	if (opts.abort_on_error) {
		tfa_log("TFALLOC_ABORT_ON_ERROR is set: aborting");
		if (!take_final_write())
			wait_final_write(false);
		else if (final_write(TFA_END_SIGNAL, SIGABRT) != 0)
			tfa_log("the profile could not be written before the abort");
		abort();
	}
}

/*
 * Whether a pointer without a record may be a block glibc's malloc made out
 * of the shim's sight: where glibc's heap serves only blocks made before the
 * shim's start and by __libc_malloc (TFALLOC_ALLOCATOR other than glibc), or
 * once a library was loaded with RTLD_DEEPBIND.  With glibc as the backend
 * and no such library, such a pointer is the shim's own block freed long
 * ago (a double free), which is not given to glibc.
 */
static bool glibc_backend;
static bool deepbind_seen;

void
tfa_shim_note_deepbind(void)
{
	if (glibc_backend)
		tfa_glibc_no_fast_bins();
	__atomic_store_n(&deepbind_seen, true, __ATOMIC_RELAXED);
}

static bool
glibc_foreign_possible(void)
{
	return !glibc_backend || __atomic_load_n(&deepbind_seen, __ATOMIC_RELAXED);
}

/* A block glibc's malloc made out of the shim's sight (registry/backends.h): back to glibc. */
static bool
glibc_foreign_free(void *ptr)
{
	if (!glibc_foreign_possible() || !tfa_glibc_foreign_free(ptr))
		return false;
	TFA_LOG_ONCE("free of %p: a block glibc's malloc made out of tfalloc's sight (a constructor of a "
		     "library loaded with RTLD_DEEPBIND, or __libc_malloc), given back to glibc; such blocks "
		     "are not in the profile",
		     ptr);
	return true;
}

/*
 * The global operators new and delete the program replaced (the C++
 * standard lets it): bit 0 the scalar ones, bit 1 the array ones.  A
 * program's operator new over malloc, with the default operator delete
 * (whose free takes the block), makes blocks tfalloc sees made by malloc and
 * freed by delete: 108 mismatched frees on a program that merely replaced
 * new, which memcheck does not report either.  Set at the start.
 */
static uint8_t cxx_replaced;

static bool
mismatch_expected(uint8_t made_by, uint8_t freed_by)
{
	uint8_t a = TFA_MIN(made_by, freed_by), b = TFA_MAX(made_by, freed_by);

	if (a == TFA_KIND_MALLOC && b == TFA_KIND_NEW)
		return (cxx_replaced & 1) != 0;
	if (a == TFA_KIND_MALLOC && b == TFA_KIND_NEW_ARRAY)
		return (cxx_replaced & 2) != 0;
	return false;
}

static void
report_free_result(int r, void *ptr, uint8_t freed_by, const tfa_alloc_info_t *info)
{
	switch (r) {
	case TFA_FREE_DOUBLE:
		if (!glibc_foreign_free(ptr))
			record_error(TFA_ERR_DOUBLE_FREE, (uintptr_t)ptr, 0, freed_by, 0);
		break;
	case TFA_FREE_INVALID:
		if (!glibc_foreign_free(ptr))
			record_error(TFA_ERR_INVALID_FREE, (uintptr_t)ptr, 0, freed_by, 0);
		break;
	case TFA_FREE_MISMATCH:
		if (!mismatch_expected(info->kind, freed_by))
			record_error(TFA_ERR_MISMATCHED_FREE, (uintptr_t)ptr, info->kind, freed_by,
				     info->stack_id);
		break;
	default:
		break;
	}
}

/* Sample-only tracking (TFALLOC_TRACK=sampled): see its section below. */
static bool sample_only; /* set by init, before the shim is READY */
void (*tfa_shim_on_sample_only)(void);
static bool sfilter_on;  /* the filter counts recorded blocks: from init on, in that mode */

#define SFILTER_LG 16
static uint16_t sfilter[(size_t)1 << SFILTER_LG];

static TFA_ALWAYS_INLINE uint16_t *
sfilter_at(uintptr_t p)
{
	return &sfilter[((uint64_t)p * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - SFILTER_LG)];
}

static void
sfilter_add(uintptr_t p)
{
	__atomic_fetch_add(sfilter_at(p), 1, __ATOMIC_RELAXED);
}

static void
sfilter_sub(uintptr_t p)
{
	__atomic_fetch_sub(sfilter_at(p), 1, __ATOMIC_RELAXED);
}

/* false: p has no record (or is not the private jemalloc's).  [hot path] */
static TFA_ALWAYS_INLINE bool
sfilter_maybe(uintptr_t p)
{
	return __atomic_load_n(sfilter_at(p), __ATOMIC_RELAXED) != 0;
}

/* ---- the hot path ------------------------------------------------------------------------- */

static void handle_pending_signal(void);
static void release_deferred(void);
static void install_signal_handlers(void);

/*
 * Marks the thread as inside the shim: a fatal signal that arrives meanwhile
 * waits for the call to finish, so that the profile never sees the pointer
 * table in the middle of a change.
 */
static TFA_ALWAYS_INLINE void
shim_enter(void)
{
#if defined(__x86_64__)
	/*
	 * One instruction in place (gcc made it three, the counter through a
	 * register), on the whole word that shim_exit lowers: a 64-bit load
	 * cannot take its value from a 32-bit store still in the store buffer,
	 * and waits for it to retire.  The depth never reaches 2^32: it cannot
	 * carry into the pending signal.
	 */
	__asm__ volatile("addq $1, %0" : "+m"(tfa_tls.shim_word));
#else
	tfa_tls.in_shim++;
#endif
	/*
	 * Compiler barriers (no instruction): the call's changes of the table
	 * and the thread's counts stay between the mark and its end, where a
	 * signal handler's allocation is deferred (defer_signal); moved out, a
	 * handler could run between a load and a store of the same count.
	 */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static TFA_ALWAYS_INLINE void
shim_exit(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#if defined(__x86_64__)
	/*
	 * The depth and the pending signal in one word, lowered in one
	 * instruction (a handler cannot come between its read and its write):
	 * nonzero after it when the call was nested or a signal waits, one test
	 * for both.
	 */
	bool rest;
	__asm__ volatile("subq $1, %1" : "=@ccnz"(rest), "+m"(tfa_tls.shim_word));
	/* A handler that comes from here on runs at once: what came before is pending. */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (tfa_unlikely(rest) && tfa_tls.in_shim == 0 && tfa_tls.pending_signal != 0)
		handle_pending_signal();
#else
	uint32_t depth = tfa_tls.in_shim - 1;

	tfa_tls.in_shim = depth;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (depth == 0 && tfa_unlikely(tfa_tls.pending_signal != 0))
		handle_pending_signal();
#endif
}

/*
 * A stack seen for the first time may hold code the module map does not
 * know yet (a library loaded since the last look, or one loaded where an
 * unloaded one was): the map must hold it before the stack can be
 * symbolized.  The stamp says which modules held which addresses: those
 * found now serve this stack and later ones.
 */
static TFA_COLD void
check_new_stack(uint32_t id, const uintptr_t *pcs, unsigned depth)
{
	bool refresh = tfa_modules_changed();

	for (unsigned i = 0; i < depth && !refresh; i++)
		refresh = !tfa_modules_covers(pcs[i]);
	if (refresh)
		(void)tfa_modules_refresh(id - 1);
	uint32_t seen = __atomic_load_n(&stacks.checked, __ATOMIC_RELAXED);
	while (seen < id && !__atomic_compare_exchange_n(&stacks.checked, &seen, id, true,
							  __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
}

/*
 * The thread's cache of its last walk (core/stack_cache.h), mapped at its
 * first capture; NULL for a thread without a record of its own, when no
 * memory can be had, or while a capture this one interrupted (a signal
 * handler's allocation) is using it.
 */
static TFA_ALWAYS_INLINE tfa_stack_cache_t *
stack_cache_take(void)
{
	tfa_thread_rec_t *r = tfa_tls.rec;

	if (tfa_unlikely(r == NULL || r == &tfa_orphan_rec))
		return NULL;
	tfa_stack_cache_t *c = r->stack_cache;
	if (tfa_unlikely(c == NULL)) {
		if (r->stack_cache_failed)
			return NULL;
		int saved_errno = errno; /* a malloc that succeeds leaves errno as it was */
		c = tfa_arena_map(sizeof(*c));
		errno = saved_errno;
		if (c == NULL) {
			r->stack_cache_failed = true;
			return NULL;
		}
		r->stack_cache = c;
	}
	if (c->busy)
		return NULL;
	c->busy = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return c;
}

static TFA_ALWAYS_INLINE void
stack_cache_give_back(tfa_stack_cache_t *c)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	c->busy = 0;
}

/* Stacks the cache cannot serve skip it for this many captures before they try again. */
#define STACK_CACHE_BACKOFF 256u

/*
 * A capture's walk is where an allocation goes deepest into the stack: a
 * recursion without end that allocates overflows there most of the time.
 * The walk changes nothing the profile reads and holds none of the shim's
 * locks, so a fault inside it may still write the profile
 * (fatal_signal_handler), where any other fault inside a shim call may not.
 */
static TFA_ALWAYS_INLINE void
walk_begin(void)
{
	tfa_tls.walking = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static TFA_ALWAYS_INLINE void
walk_end(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	tfa_tls.walking = 0;
}

/*
 * capture_stack by the thread's last walk: the frames it shares with this
 * one are only checked, and the stack table finds the stack by its new
 * frames.  Returns 1 with *id_out when served; 0 when the walk was made but
 * the stack is deeper than stacks.depth or the table is full: its frames
 * are in pcs[0..*n_out), innermost first, for capture_stack to truncate;
 * -1 when not served (no cache, a stack the cached walk cannot take):
 * capture_stack walks without it.
 */
static int
capture_cached(const void *frame, uint32_t *id_out, uintptr_t *pcs, unsigned *n_out)
{
	tfa_stack_cache_t *c = stack_cache_take();

	if (c == NULL)
		return -1;
	if (tfa_unlikely(c->backoff != 0)) {
		c->backoff--;
		stack_cache_give_back(c);
		return -1;
	}
	walk_begin();
	int got = tfa_unwind_capture_cached_above(frame, c, stacks.self_lo, stacks.self_hi);
	walk_end();
	int served = 1;
	if (got == 0) {
		*id_out = 0;
	} else if (got > 0 && tfa_likely((unsigned)got <= stacks.depth)
		   && tfa_likely(tfa_stack_table_count(&tfa_process_stacks) < stacks.max)) {
		uint32_t id = tfa_stack_table_intern_cached(&tfa_process_stacks, c);
		if (tfa_unlikely(id > __atomic_load_n(&stacks.checked, __ATOMIC_RELAXED)))
			check_new_stack(id, pcs, tfa_stack_cache_pcs(c, pcs, (unsigned)got));
		*id_out = id;
	} else if (got > 0 && (unsigned)got <= stacks.depth
		   && (*id_out = tfa_stack_table_find_cached(&tfa_process_stacks, c)) != 0) {
		/* The table is full, and has this stack (whoever interned it checked it). */
	} else if (got > 0) {
		_Static_assert(TFA_STACK_CACHE_LEVELS <= TFA_UNWIND_FRAMES_MAX, "pcs holds a cached stack");
		/*
		 * Only the innermost frames that capture_stack keeps: a new
		 * stack in a full table keeps TRUNCATED_DEPTH (capture_stack
		 * takes that branch for it, full_and_new).
		 */
		(void)tfa_stack_cache_pcs(c, pcs, (unsigned)got <= stacks.depth ? TRUNCATED_DEPTH : stacks.depth);
		*n_out = (unsigned)got;
		served = 0;
	} else {
		/*
		 * A stack the cache cannot hold (-2), or one it walked to a frame
		 * it refuses (-1): the walk without the cache stops at its depth,
		 * maybe before that frame, and asks libunwind for the rest;
		 * walking it twice at every capture doubled the cost (a
		 * recursion 100 deep over a frame without unwind tables).
		 */
		c->backoff = STACK_CACHE_BACKOFF;
		served = -1;
	}
	stack_cache_give_back(c);
	return served;
}

/* The caller's stack, without the shim's own frames, interned; 0 when none. */
static TFA_NOINLINE uint32_t
capture_stack(void)
{
	uintptr_t pcs[TFA_UNWIND_FRAMES_MAX];
	unsigned max = TFA_MIN(stacks.depth + 8u, (unsigned)TFA_UNWIND_FRAMES_MAX);
	/*
	 * From the caller's caller on: both frames would be dropped as the
	 * shim's.  The caller's frame record is found by the frame-pointer
	 * chain: the shim is built with frame pointers (TFA_SHIM_FLAGS), as
	 * TFALLOC_STACKS=fp needs too.
	 */
	const void *frame = *(void *const *)__builtin_frame_address(0);

	/*
	 * libunwind may allocate (its first use on a thread): such calls are
	 * the shim's.  One guard for the capture and the interning.
	 */
	tfa_guard_enter();
	unsigned n = 0, skip = 0;
	int cached = -1;
	if (stacks.mode == TFA_STACKS_UNWIND && stacks.walk_cached) {
		uint32_t id;
		cached = capture_cached(frame, &id, pcs, &n);
		if (tfa_likely(cached > 0)) {
			tfa_guard_exit();
			return id;
		}
	}
	if (cached < 0) {
		walk_begin();
		n = tfa_unwind_capture_above(stacks.mode, frame, pcs, max, 0);
		walk_end();
		while (skip < n && pcs[skip] >= stacks.self_lo && pcs[skip] < stacks.self_hi)
			skip++;
	}
	unsigned depth = TFA_MIN(n - skip, stacks.depth);
	if (depth == 0) {
		tfa_guard_exit();
		return 0;
	}
	uint32_t id;
	/*
	 * Full (deep recursion that branches makes a stack per call): known
	 * stacks are still found; a new one keeps its innermost frames, which
	 * name the site, in the room left above the limit.  capture_cached
	 * looked for a stack it walked whole, and left only those frames.
	 */
	bool full_and_new = cached == 0 && n <= stacks.depth;
	if (!full_and_new && tfa_likely(tfa_stack_table_count(&tfa_process_stacks) < stacks.max)) {
		id = tfa_stack_table_intern(&tfa_process_stacks, pcs + skip, depth);
	} else {
		id = full_and_new ? 0 : tfa_stack_table_find(&tfa_process_stacks, pcs + skip, depth);
		if (id == 0) {
			depth = TFA_MIN(depth, TRUNCATED_DEPTH);
			id = tfa_stack_table_intern(&tfa_process_stacks, pcs + skip, depth);
			__atomic_fetch_add(&stacks.truncated, 1, __ATOMIC_RELAXED);
		}
	}
	if (tfa_unlikely(id > __atomic_load_n(&stacks.checked, __ATOMIC_RELAXED)))
		check_new_stack(id, pcs + skip, depth);
	tfa_guard_exit();
	return id;
}

/* Exponential with mean stacks.sample_bytes: sampled points form a Poisson process over bytes. */
static int64_t
next_sample_interval(void)
{
	uint64_t x = tfa_tls.sample_rng;

	if (x == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)(uintptr_t)&tfa_tls ^ (uint64_t)ts.tv_sec;
		x |= 1;
	}
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	tfa_tls.sample_rng = x;
	/* u in (0, 1]: 53 random bits. */
	double u = (double)((x >> 11) + 1) * (1.0 / 9007199254740992.0);
	double d = -log(u) * (double)stacks.sample_bytes;
	return d >= 9.0e18 ? INT64_MAX : (int64_t)d + 1;
}

/* Whether the allocation whose count took the thread's clock to left is sampled. */
static TFA_COLD bool
sample_slow(int64_t left)
{
	if (tfa_tls.sample_rng == 0) {
		/* A thread's first allocation starts its clock: no sample at a fixed place. */
		int64_t first = next_sample_interval();
		left += first;
		if (left > 0) {
			tfa_tls.sample_left = left;
			return false;
		}
	}
	tfa_tls.sample_left = next_sample_interval();
	return true;
}

/* The stack to record for an allocation of nbytes: every one, or a sample. */
static TFA_ALWAYS_INLINE uint32_t
stack_for(size_t nbytes)
{
	if (tfa_likely(stacks.mode == TFA_STACKS_NONE)) {
		/*
		 * No stacks, for good once the shim is ready (before, init may
		 * still choose some): the fast path's countdown never runs out
		 * (fast_unsampled).
		 */
		if (tfa_shim_state() == TFA_SHIM_READY)
			tfa_tls.sample_left = INT64_MAX;
		return 0;
	}
	if (tfa_unlikely(tfa_guard_active()))
		return 0;
	if (stacks.sample_bytes != 0) {
		int64_t left = tfa_tls.sample_left - (int64_t)TFA_MIN(nbytes, (size_t)INT64_MAX / 2);
		if (tfa_likely(left > 0)) {
			tfa_tls.sample_left = left;
			return 0;
		}
		if (!sample_slow(left))
			return 0;
	}
	return capture_stack();
}

uint32_t
tfa_shim_stack_for(size_t nbytes)
{
	if (tfa_shim_state() != TFA_SHIM_READY)
		return 0;
	return stack_for(nbytes);
}

/*
 * The process tracker's fast path: the calls of a registered thread, outside
 * the guard, with the private jemalloc as backend, no limit, small requests
 * at the default alignment (cpu_tracker.fast says the process-wide part).
 * Everything is known here: jemalloc is called directly, the allocated size
 * comes from its table, the record's metadata is a constant but for the size
 * and the kind, and the statistics go straight to the thread's slot of the
 * process tracker (TFA_SLOT_PROCESS); a stack, when one is captured (every
 * allocation, or a sample), goes to its site as on the general path.  What
 * this path cannot do (make room in the table, a stale or missing record, a
 * mismatched or aligned block, a realloc with a stack) goes to the general
 * path, which does the same things in the same order; so do the slow path's
 * results: exact counts, the peak exact with a single thread, the table and
 * the counts changed in one section.
 */

/* The record's bits 47 and up (backend, kind, device 0, lg_align 0) of a fast block. */
static TFA_ALWAYS_INLINE uint64_t
fast_meta_hi(uint8_t kind)
{
	return (uint64_t)TFA_BACKEND_JEMALLOC | ((uint64_t)(kind & 7) << 3);
}

/*
 * One thread, bytes in use going from before to now: when that leaves a new
 * peak, the peak's breakdown by site (sampled stacks) is the sites' figures
 * now, as tfa_tracking_settle_after takes it.  [hot path]
 */
static TFA_ALWAYS_INLINE void
fast_leaving(int64_t before, int64_t now)
{
	tfa_tracking_allocator_t *ta = &cpu_tracker;

	if (tfa_unlikely(before == __atomic_load_n(&ta->peak, __ATOMIC_RELAXED)) && now < before
	    && ta->sites != NULL && before > __atomic_load_n(&ta->sites->snapshot_bytes, __ATOMIC_RELAXED))
		tfa_sites_snapshot(ta->sites, before);
}

/*
 * Moves bytes in use by the change of one block (grew: made, else freed; a
 * change that is part of a larger one says grew, and the caller calls
 * fast_leaving for the whole).  The fast path's copy of
 * tfa_tracking_settle_after, without a pending balance when the process has
 * one thread.  [hot path]
 */
static TFA_ALWAYS_INLINE void
fast_count(tfa_stat_slot_t *s, int64_t bytes, int64_t allocated, bool single, bool grew)
{
	tfa_tracking_allocator_t *ta = &cpu_tracker;

	if (single) {
		/* One thread: published at once (its pending figures are 0), the peak exact. */
		int64_t before = __atomic_load_n(&ta->in_use, __ATOMIC_RELAXED);
		int64_t now = before + bytes;
		if (!grew)
			fast_leaving(before, now);
		int64_t anow = __atomic_load_n(&ta->allocated_in_use, __ATOMIC_RELAXED) + allocated;
		__atomic_store_n(&ta->in_use, now, __ATOMIC_RELAXED);
		__atomic_store_n(&ta->allocated_in_use, anow, __ATOMIC_RELAXED);
		if (grew && now > __atomic_load_n(&ta->peak, __ATOMIC_RELAXED))
			__atomic_store_n(&ta->peak, now, __ATOMIC_RELAXED);
		if (grew && anow > __atomic_load_n(&ta->allocated_peak, __ATOMIC_RELAXED))
			__atomic_store_n(&ta->allocated_peak, anow, __ATOMIC_RELAXED);
		if (grew)
			tfa_tracking_raise_blocks_single(ta, s);
		return;
	}
	s->pending_bytes += bytes;
	s->pending_allocated += allocated;
	if (tfa_tracking_publish_due(s))
		tfa_tracking_publish(ta, s);
}

/* A block made: the thread's totals, and bytes in use.  [hot path] */
static TFA_ALWAYS_INLINE void
fast_count_alloc(tfa_stat_slot_t *s, size_t nbytes, size_t asz, bool single)
{
	s->num_allocs++;
	s->total_bytes += nbytes;
	s->total_allocated_bytes += asz;
	if (tfa_unlikely(nbytes > s->largest_alloc_size))
		s->largest_alloc_size = nbytes;
	fast_count(s, (int64_t)nbytes, (int64_t)asz, single, true);
}

/*
 * A block made or freed without a record (sample-only tracking), in the
 * thread's slot: bytes in use move by its allocated size.  [hot path]
 */
static TFA_ALWAYS_INLINE void
fast_count_untracked(tfa_thread_rec_t *trec, size_t nbytes, size_t asz, bool made, bool single)
{
	tfa_stat_slot_t *s = &trec->slots[TFA_SLOT_PROCESS];

	if (made) {
		s->num_allocs++;
		s->total_bytes += nbytes;
		s->total_allocated_bytes += asz;
		if (tfa_unlikely(nbytes > s->largest_alloc_size))
			s->largest_alloc_size = nbytes;
		fast_count(s, (int64_t)asz, (int64_t)asz, single, true);
	} else {
		s->num_frees++;
		fast_count(s, -(int64_t)asz, -(int64_t)asz, single, false);
	}
}

/*
 * A block of the fast path made (or freed) at stack_id: with threads, counted
 * in the thread's cache of sites (two threads allocating at one site would
 * otherwise pass its line between their cores at every call), unless this is
 * a signal handler's call inside the thread's own (the cache entry may be
 * moving to its site just then).  [hot path]
 */
static TFA_ALWAYS_INLINE void
fast_site_change(tfa_thread_rec_t *trec, uint32_t stack_id, int64_t bytes, bool made, bool single)
{
	tfa_sites_t *sites = cpu_tracker.sites;

	if (!single && tfa_likely(tfa_tls.in_shim == 1) && sites->thread_cached)
		tfa_sites_change_cached(sites, trec, stack_id, bytes, made);
	else if (made)
		tfa_sites_alloc(sites, stack_id, (uint64_t)bytes);
	else
		tfa_sites_free(sites, stack_id, (uint64_t)-bytes);
}

/*
 * Records the block p of nbytes made by jemalloc, with its stack (0: none).
 * single: the process has one thread.  [hot path]
 */
static TFA_ALWAYS_INLINE void
fast_record(tfa_thread_rec_t *trec, uint64_t ptr, size_t nbytes, uint8_t kind, uint32_t stack_id,
	    bool single)
{
	tfa_tracking_allocator_t *ta = &cpu_tracker;
	size_t asz = tfa_jemalloc_usable[(nbytes + 7) >> 3];
	uint64_t meta = (uint64_t)nbytes | (fast_meta_hi(kind) << 47);
	tfa_stat_slot_t *s = &trec->slots[TFA_SLOT_PROCESS];
	tfa_ptr_held_t held = { .shard = tfa_ptr_shard_of(&process_table, ptr), .mode = TFA_PTR_EXCLUSIVE };

	int access = TFA_PTR_OWN;
	if (!single) {
		held = tfa_ptr_fast_hold(&process_table, ptr, trec);
		access = tfa_ptr_fast_access_of(held, trec);
	}
	uint64_t id = tfa_likely(s->next_id < s->id_end) ? s->next_id++ : tfa_tracking_id_block(ta, s);
	uint64_t id_thread = (id & TFA_ID_MAX) | trec->id_thread_bits;
	uint32_t tag = 0; /* a thread with a current resource takes the general path */
	/* A shard another thread owns: the general insert takes its ownership away. */
	if (tfa_likely(access != TFA_PTR_FOREIGN)
	    && tfa_likely(tfa_ptr_fast_insert(held.shard, ptr, meta, id_thread, stack_id, tag,
					      access == TFA_PTR_SHARED))) {
		fast_count_alloc(s, nbytes, asz, single);
		if (tfa_unlikely(stack_id != 0) && ta->sites != NULL)
			fast_site_change(trec, stack_id, (int64_t)nbytes, true, single);
		if (!single)
			tfa_ptr_fast_release(held, trec);
		return;
	}
	if (!single)
		tfa_ptr_fast_release(held, trec);
	tfa_record_t rec = { .ptr = ptr, .size_meta = meta, .id_thread = id_thread, .stack_id = stack_id,
			     .tag = tag };
	tfa_tracking_record_block(ta, &rec, asz);
}

/*
 * Sampled stacks (TFALLOC_SAMPLE_BYTES): false when an allocation of nbytes
 * reaches the thread's next sample point: stack_for then decides, as on the
 * general path, and captures its stack; otherwise counts it against the
 * interval, as stack_for does.  Without stacks the countdown starts at
 * INT64_MAX (stack_for) and never runs out; with a stack for every
 * allocation it stays at 0 and always runs out.  [hot path]
 */
static TFA_ALWAYS_INLINE bool
fast_unsampled(size_t nbytes)
{
#if defined(__x86_64__)
	/*
	 * One subtraction in place (gcc made it a load, a subtraction, a test
	 * and a store), given back when it reaches the sample: stack_for counts
	 * the allocation again.  nbytes is small here: no overflow.
	 */
	bool reached;
	__asm__ volatile("subq %2, %1" : "=@ccle"(reached), "+m"(tfa_tls.sample_left) : "r"((int64_t)nbytes));
	if (tfa_unlikely(reached)) {
		tfa_tls.sample_left += (int64_t)nbytes;
		return false;
	}
	return true;
#else
	int64_t left = tfa_tls.sample_left - (int64_t)nbytes;

	if (tfa_unlikely(left <= 0))
		return false;
	tfa_tls.sample_left = left;
	return true;
#endif
}

/* sampled: fast_unsampled said no, the stack is stack_for's to decide.  [hot path] */
static TFA_ALWAYS_INLINE void *
fast_alloc(tfa_thread_rec_t *trec, size_t nbytes, uint8_t kind, bool zero, bool sampled)
{
	uint32_t stack_id = 0;

	shim_enter();
	if (tfa_unlikely(sampled))
		stack_id = stack_for(nbytes);
	/* jemalloc serves malloc(0) as malloc(1). */
	void *p = tfa_likely(!zero) ? tfa_je_malloc(nbytes) : tfa_je_calloc(1, nbytes);
	if (tfa_unlikely(sampled) && sample_only && tfa_likely(p != NULL)) {
		/* Sample-only tracking: a block without a stack is not a sample. */
		if (stack_id == 0) {
			fast_count_untracked(trec, nbytes, tfa_jemalloc_usable[(nbytes + 7) >> 3], true,
					     __libc_single_threaded);
			shim_exit();
			return p;
		}
		sfilter_add((uintptr_t)p);
	}
	if (tfa_likely(p != NULL)) {
		if (tfa_likely(__libc_single_threaded))
			fast_record(trec, (uintptr_t)p, nbytes, kind, stack_id, true);
		else
			fast_record(trec, (uintptr_t)p, nbytes, kind, stack_id, false);
	}
	shim_exit();
	return p;
}

/* fast_alloc with a stack to decide, out of line: the common case keeps its stack id a constant 0. */
static TFA_NOINLINE void *
fast_alloc_sampled(tfa_thread_rec_t *trec, size_t nbytes, uint8_t kind, bool zero)
{
	return fast_alloc(trec, nbytes, kind, zero, true);
}

/* false: not served (nothing changed), the general path must.  [hot path] */
/*
 * foreign_out: the block lay in a shard another thread owns (it made the
 * block).  [hot path]
 */
static TFA_ALWAYS_INLINE bool
fast_unrecord(tfa_thread_rec_t *trec, uint64_t ptr, uint8_t kind, size_t *allocated_out, bool *foreign_out,
	      bool single)
{
	tfa_ptr_held_t held = { .shard = tfa_ptr_shard_of(&process_table, ptr), .mode = TFA_PTR_EXCLUSIVE };

	if (!single)
		held = tfa_ptr_fast_hold(&process_table, ptr, trec);
	int64_t i = tfa_ptr_fast_find(held.shard, ptr);
	if (tfa_unlikely(i < 0))
		goto not_served;
	/*
	 * The record's metadata less what a fast block of this kind has above
	 * bit 47 is its requested size when the rest matches: one comparison
	 * for both (another backend, kind or alignment leaves a difference of
	 * 2^47 or more, or wraps).
	 */
	uint64_t requested = held.shard->slots[i].size_meta - (fast_meta_hi(kind) << 47);
	if (tfa_unlikely(requested > TFA_JE_SMALL_MAX || held.shard->slots[i].tag != 0))
		goto not_served;
	uint32_t stack_id = held.shard->slots[i].stack_id;
	tfa_ptr_note_freed(ptr);
	int access = single ? TFA_PTR_OWN : tfa_ptr_fast_access_of(held, trec);
	if (access == TFA_PTR_OWN) {
		if (tfa_unlikely(!tfa_ptr_owned_remove(held.shard, (uint64_t)i, ptr)))
			goto not_served;
	} else if (tfa_unlikely(!tfa_ptr_fast_remove_concurrent(held.shard, (uint64_t)i, ptr))) {
		goto not_served;
	}
	*foreign_out = access == TFA_PTR_FOREIGN;
	size_t asz = tfa_jemalloc_usable[(requested + 7) >> 3];
	tfa_stat_slot_t *s = &trec->slots[TFA_SLOT_PROCESS];
	s->num_frees++;
	/* Counted first: leaving the peak snapshots the sites before one changes. */
	fast_count(s, -(int64_t)requested, -(int64_t)asz, single, false);
	if (tfa_unlikely(stack_id != 0) && cpu_tracker.sites != NULL)
		fast_site_change(trec, stack_id, -(int64_t)requested, false, single);
	if (!single)
		tfa_ptr_fast_release(held, trec);
	*allocated_out = asz;
	return true;

not_served:
	if (!single)
		tfa_ptr_fast_release(held, trec);
	return false;
}

/*
 * The jemalloc flags that send a free of another thread's block to the
 * record's explicit thread cache, made on first use.  jemalloc's own thread
 * cache would give the block to this thread's next allocation of its size:
 * recorded in the maker's shard, that insert takes the shard's ownership
 * away for good (every later operation on it then pays a locked
 * instruction).  In the explicit cache the block only waits to go back to
 * its arena, in batches as the thread cache sends them, and its maker gets
 * it again.  The benchmark's churn (two threads, one block in 32 freed by
 * the other): a locked compare-and-swap had been 30% of malloc's samples and
 * 48% of free's.
 */
static TFA_NOINLINE int
foreign_tcache_create(tfa_thread_rec_t *trec)
{
	int index = tfa_jemalloc_tcache_create();

	trec->foreign_tcache_flags = index < 0 ? -1 : TFA_JE_MALLOCX_TCACHE(index);
	return index < 0 ? 0 : trec->foreign_tcache_flags;
}

static TFA_ALWAYS_INLINE int
foreign_free_flags(tfa_thread_rec_t *trec)
{
	int flags = trec->foreign_tcache_flags;

	if (tfa_likely(flags > 0))
		return flags;
	return flags < 0 ? 0 : foreign_tcache_create(trec);
}

static TFA_ALWAYS_INLINE bool
fast_free(tfa_thread_rec_t *trec, void *p, uint8_t kind)
{
	size_t allocated;
	bool done, foreign = false;
	/* free keeps errno: the thread's errno, found once (core/thread.c). */
	int *errno_loc = tfa_tls.errno_loc;
	int saved_errno = *errno_loc;

	shim_enter();
	if (tfa_likely(__libc_single_threaded))
		done = fast_unrecord(trec, (uintptr_t)p, kind, &allocated, &foreign, true);
	else
		done = fast_unrecord(trec, (uintptr_t)p, kind, &allocated, &foreign, false);
	/*
	 * Counted before jemalloc can hand the address out again.  The allocated
	 * size is a size sdallocx accepts (from the request to the usable size),
	 * never 0.
	 */
	if (tfa_likely(done)) {
		tfa_je_sdallocx(p, allocated, tfa_unlikely(foreign) ? foreign_free_flags(trec) : 0);
		shim_exit();
		*errno_loc = saved_errno;
		return true;
	}
	shim_exit();
	*errno_loc = saved_errno;
	return false;
}

/* ---- sample-only tracking (TFALLOC_TRACK=sampled) ------------------------------------------ */

/*
 * Only the blocks whose allocation got a sampled stack are recorded (with
 * those made under the guard and those charged to a resource): the others
 * come from the private jemalloc and are only counted, at their allocated
 * size (the only size their free can know, from jemalloc).  A free tells
 * them apart with a filter: counts, by a hash of the address, of the
 * recorded blocks of the private jemalloc, raised before the program sees a
 * block and lowered once jemalloc has it back, so that a zero proves "no
 * record"; the address must then lie in jemalloc's mappings
 * (core/own_maps.h), or it is a foreign pointer.  A recorded block that is
 * freed waits in a small quarantine before jemalloc gets it back, so that a
 * second free of it is known for one (jemalloc could otherwise have handed
 * the address out again, unrecorded).
 */
/*
 * At most 63 blocks and 1 MiB wait, blocks of up to 64 KiB: the memory held
 * back is the mode's only cost in memory (4 MiB of them took python3's peak
 * RSS from 23 to 29 MiB: its 256 KiB arenas are sampled more often than not).
 */
#define QUARANTINE_MAX   64
#define QUARANTINE_BYTES ((uint64_t)1 << 20)
#define QUARANTINE_BLOCK ((size_t)64 << 10)

struct qentry {
	uintptr_t ptr;
	size_t requested;
	uint8_t backend;
	uint8_t lg_align;
};

static tfa_lock_t quarantine_lock = TFA_LOCK_INIT;
static struct qentry quarantine[QUARANTINE_MAX]; /* a ring: the oldest at qhead */
static size_t nquarantine, qhead;
static uint64_t qbytes;

/* Gives a freed recorded block back to its backend. */
static void
release_block(const struct qentry *e)
{
	tfa_allocator_t *b = tfa_tracking_allocator_backend(&cpu_tracker, e->backend);

	if (b == NULL)
		return;
	tfa_allocator_deallocate_raw_sized(b, (void *)e->ptr, e->requested == 0 ? 1 : e->requested,
					   e->lg_align == 0 ? 0 : (size_t)1 << e->lg_align);
	if (sfilter_on && e->backend == TFA_BACKEND_JEMALLOC)
		sfilter_sub(e->ptr);
}

/* A recorded block, uncounted: into the quarantine (the oldest leave it), or back at once. */
static void
quarantine_put(uintptr_t p, const tfa_alloc_info_t *info)
{
	struct qentry e = { .ptr = p, .requested = info->requested, .backend = info->backend,
			    .lg_align = info->lg_align };
	struct qentry out[QUARANTINE_MAX + 1];
	size_t nout = 0;

	if (info->backend != TFA_BACKEND_JEMALLOC || info->kind == TFA_KIND_INTERNAL
	    || info->requested > QUARANTINE_BLOCK || tfa_tls.holds_all_locks) {
		release_block(&e);
		return;
	}
	tfa_lock(&quarantine_lock);
	quarantine[(qhead + nquarantine) % QUARANTINE_MAX] = e;
	nquarantine++;
	qbytes += e.requested;
	while (nquarantine > QUARANTINE_MAX - 1 || qbytes > QUARANTINE_BYTES) {
		out[nout++] = quarantine[qhead];
		qbytes -= quarantine[qhead].requested;
		qhead = (qhead + 1) % QUARANTINE_MAX;
		nquarantine--;
	}
	tfa_unlock(&quarantine_lock);
	for (size_t i = 0; i < nout; i++)
		release_block(&out[i]);
}

/* Whether p is a freed recorded block still in quarantine (a second free). */
static bool
quarantine_holds(uintptr_t p)
{
	bool locked = !tfa_tls.holds_all_locks;
	bool in = false;

	if (__atomic_load_n(&nquarantine, __ATOMIC_RELAXED) == 0 && locked)
		return false;
	if (locked)
		tfa_lock(&quarantine_lock);
	for (size_t i = 0; i < nquarantine && !in; i++)
		in = quarantine[(qhead + i) % QUARANTINE_MAX].ptr == p;
	if (locked)
		tfa_unlock(&quarantine_lock);
	return in;
}

/* An unsampled small block of the fast path: made and counted, no record.  [hot path] */
static TFA_ALWAYS_INLINE void *
fast_alloc_untracked(tfa_thread_rec_t *trec, size_t nbytes, bool zero)
{
	shim_enter();
	void *p = tfa_likely(!zero) ? tfa_je_malloc(nbytes) : tfa_je_calloc(1, nbytes);
	if (tfa_likely(p != NULL)) {
		size_t asz = tfa_jemalloc_usable[(nbytes + 7) >> 3];
		if (tfa_likely(__libc_single_threaded))
			fast_count_untracked(trec, nbytes, asz, true, true);
		else
			fast_count_untracked(trec, nbytes, asz, true, false);
	}
	shim_exit();
	return p;
}

/* Any unsampled block: made by the private jemalloc and counted, no record. */
static void *
untracked_alloc(size_t nbytes, size_t alignment, bool zero)
{
	if (nbytes > TFA_REQUESTED_MAX)
		return NULL;
	int flags = (alignment != 0 ? TFA_JE_MALLOCX_LG_ALIGN(__builtin_ctzl(alignment)) : 0)
		    | (zero ? TFA_JE_MALLOCX_ZERO : 0);
	void *p = tfa_je_mallocx(nbytes == 0 ? 1 : nbytes, flags);
	if (p != NULL)
		tfa_tracking_count_untracked(&cpu_tracker, 1, nbytes, tfa_je_sallocx(p, 0), false);
	return p;
}

/*
 * Whether p can be where a block of jemalloc's with asz usable bytes starts:
 * a small one lies a multiple of its size class after its slab's start, a
 * page, so at a multiple of the class's lowest set bit (a page at most); a
 * large one (16 KiB and up) at a multiple of a cache line in its first page
 * (jemalloc's cache-oblivious offset).  Most pointers into the middle of a
 * block fail it.  [hot path]
 */
static TFA_ALWAYS_INLINE bool
block_start_fits(uintptr_t p, size_t asz)
{
	/* The lowest set bit less one, within a page (asz 0: 4095, never a fit but for a page). */
	size_t mask = asz >= ((size_t)16 << 10) ? 63 : ((asz & (~asz + 1)) - 1) & 4095;

	return (p & mask) == 0;
}

/* A block of the private jemalloc without a record, of asz usable bytes: counted, then freed.  [hot path] */
static TFA_ALWAYS_INLINE void
untracked_free_at(tfa_thread_rec_t *trec, void *ptr, size_t asz)
{
	if (tfa_likely(trec != NULL)) {
		if (tfa_likely(__libc_single_threaded))
			fast_count_untracked(trec, 0, asz, false, true);
		else
			fast_count_untracked(trec, 0, asz, false, false);
	} else {
		tfa_tracking_count_untracked(&cpu_tracker, -1, 0, asz, false);
	}
	/* Counted before jemalloc can hand the address out again. */
	tfa_je_sdallocx(ptr, asz, 0);
}

/* untracked_free_at, its size from jemalloc.  false: p is not where a block starts (nothing done). */
static TFA_ALWAYS_INLINE bool
untracked_free(tfa_thread_rec_t *trec, void *ptr)
{
	size_t asz = tfa_je_sallocx(ptr, 0);

	if (tfa_unlikely(!block_start_fits((uintptr_t)ptr, asz)))
		return false;
	untracked_free_at(trec, ptr, asz);
	return true;
}

/* Whether a pointer without a record is a block of the private jemalloc. */
static TFA_ALWAYS_INLINE bool
untracked_block(uintptr_t p)
{
	return (p & 7) == 0 && tfa_own_maps_backend_contains(p);
}

/* free and delete in sample-only mode, but for unrecorded blocks of a registered thread. */
static TFA_NOINLINE void
shim_free_sampled(void *ptr, uint8_t kind)
{
	uintptr_t p = (uintptr_t)ptr;
	uint8_t freed_by = tfa_guard_active() ? (uint8_t)TFA_KIND_INTERNAL : kind;
	int saved_errno = errno;
	tfa_alloc_info_t info;

	shim_enter();
	if (tfa_tracking_unrecord(&cpu_tracker, p, &info)) {
		quarantine_put(p, &info);
		if (!tfa_kinds_match(info.kind, freed_by))
			report_free_result(TFA_FREE_MISMATCH, ptr, kind, &info);
	} else if (sfilter_maybe(p) && quarantine_holds(p)) {
		record_error(TFA_ERR_DOUBLE_FREE, p, 0, kind, 0);
	} else if (untracked_block(p)) {
		if (!untracked_free(tfa_tls.fast_rec, ptr))
			record_error(TFA_ERR_INVALID_FREE, p, 0, kind, 0);
	} else {
		/* Not a block of the private jemalloc: what the general path says (invalid). */
		int r = tfa_tracking_free(&cpu_tracker, ptr, freed_by, &info);
		if (tfa_unlikely(r != TFA_FREE_OK))
			report_free_result(r, ptr, kind, &info);
	}
	shim_exit();
	errno = saved_errno;
}

/* A recorded block made for the program (or the shim, under the guard), with its stack. */
static void *
tracked_alloc(size_t nbytes, size_t alignment, uint8_t kind, bool zero, uint32_t stack_id)
{
	tfa_allocation_attrs_t attrs = {
		.zero_fill = zero,
		.kind = tfa_unlikely(tfa_guard_active()) ? (uint8_t)TFA_KIND_INTERNAL : kind,
		.stack_id = stack_id,
	};
	void *p = tfa_tracking_allocate_fast(&cpu_tracker, alignment, nbytes, &attrs);

	if (p != NULL && sfilter_on && tfa_jemalloc_is_private(cpu_tracker.wrapper.wrapped))
		sfilter_add((uintptr_t)p);
	return p;
}

/*
 * The block q the private jemalloc resized for a realloc (nbytes requested),
 * sampled now: recorded with its stack, as tracked_alloc records a block.
 */
static void
record_resized(tfa_thread_rec_t *trec, void *q, size_t nbytes, uint32_t stack_id)
{
	tfa_stat_slot_t *s = &trec->slots[TFA_SLOT_PROCESS];
	uint64_t id = tfa_likely(s->next_id < s->id_end) ? s->next_id++ : tfa_tracking_id_block(&cpu_tracker, s);
	tfa_record_t rec = {
		.ptr = (uintptr_t)q,
		.size_meta = (uint64_t)nbytes | (fast_meta_hi(TFA_KIND_MALLOC) << 47),
		.id_thread = (id & TFA_ID_MAX) | trec->id_thread_bits,
		.stack_id = stack_id,
	};

	if (sfilter_on)
		sfilter_add((uintptr_t)q);
	tfa_tracking_record_block(&cpu_tracker, &rec, tfa_je_sallocx(q, 0));
}

/*
 * realloc in sample-only mode: the new block is recorded when its size is
 * sampled, whatever the old one was.  A block that changes between recorded
 * and not is resized by jemalloc all the same (in place when it can: a
 * growing buffer, sampled at some sizes and not at others, was copied at
 * every change, and the benchmark's realloc chains took 2.6x plain
 * jemalloc's time), its record made or removed around the call; only a
 * thread without a record, or a block of a resource or the shim's, is made
 * anew and copied.  NULL with *done false: not served (a foreign pointer),
 * the general path says what it is.
 */
static TFA_NOINLINE void *
shim_realloc_sampled(void *ptr, size_t nbytes, bool *done)
{
	uintptr_t p = (uintptr_t)ptr;
	tfa_alloc_info_t info;
	void *q = NULL;
	int saved_errno = errno;

	*done = true;
	shim_enter();
	bool fixed = tfa_guard_active() || tfa_tls.tag != 0; /* always recorded */
	/* A block in the quarantine keeps its count in the filter: a zero also proves "not there". */
	bool maybe = sfilter_maybe(p);
	if (!maybe || !tfa_tracking_lookup(&cpu_tracker, ptr, &info)) {
		if (maybe && quarantine_holds(p)) {
			record_error(TFA_ERR_DOUBLE_FREE, p, 0, TFA_KIND_MALLOC, 0);
			goto out;
		}
		if (!untracked_block(p)) {
			*done = false;
			goto out;
		}
		size_t old_asz = tfa_je_sallocx(ptr, 0);
		if (!block_start_fits(p, old_asz)) {
			record_error(TFA_ERR_INVALID_FREE, p, 0, TFA_KIND_MALLOC, 0);
			goto out;
		}
		uint32_t stack_id = fixed ? 0 : stack_for(nbytes);
		if (stack_id == 0 && !fixed) {
			q = tfa_je_rallocx(ptr, nbytes, 0);
			if (q != NULL) {
				size_t asz = nbytes <= TFA_JE_SMALL_MAX ? tfa_jemalloc_usable[(nbytes + 7) >> 3]
								       : tfa_je_sallocx(q, 0);
				tfa_thread_rec_t *trec = tfa_tls.fast_rec;
				if (tfa_likely(trec != NULL)) {
					bool single = __libc_single_threaded;
					trec->slots[TFA_SLOT_PROCESS].num_reallocs++;
					fast_count_untracked(trec, 0, old_asz, false, single);
					fast_count_untracked(trec, nbytes, asz, true, single);
				} else {
					tfa_tracking_count_untracked(&cpu_tracker, -1, 0, old_asz, true);
					tfa_tracking_count_untracked(&cpu_tracker, 1, nbytes, asz, false);
				}
			}
			goto out;
		}
		tfa_thread_rec_t *trec = tfa_tls.fast_rec;
		if (!fixed && trec != NULL) {
			/* Not seen by the program before it is recorded: no other thread can free it meanwhile. */
			q = tfa_je_rallocx(ptr, nbytes, 0);
			if (q != NULL) {
				tfa_tracking_count_untracked(&cpu_tracker, -1, 0, old_asz, true);
				record_resized(trec, q, nbytes, stack_id);
			}
			goto out;
		}
		q = tracked_alloc(nbytes, 0, TFA_KIND_MALLOC, false, stack_id);
		if (q != NULL) {
			memcpy(q, ptr, TFA_MIN(old_asz, nbytes));
			tfa_tracking_count_untracked(&cpu_tracker, 0, 0, 0, true);
			(void)untracked_free(NULL, ptr); /* checked above */
		}
		goto out;
	}
	bool keep = fixed || info.tag != 0 || info.kind == TFA_KIND_INTERNAL
		    || info.backend != TFA_BACKEND_JEMALLOC;
	uint32_t stack_id = tfa_guard_active() ? 0 : stack_for(nbytes);
	if (keep || stack_id != 0) {
		/* Recorded before, recorded after: as with every block tracked. */
		int r;
		tfa_alloc_info_t old;
		q = tfa_tracking_reallocate(&cpu_tracker, ptr, nbytes, stack_id, &r, &old);
		/* Before the program sees q; a count left on p meanwhile costs a look, no more. */
		if (q != NULL && q != ptr && info.backend == TFA_BACKEND_JEMALLOC) {
			sfilter_add((uintptr_t)q);
			sfilter_sub(p);
		}
		if (tfa_unlikely(r != TFA_FREE_OK && r != TFA_FREE_NOMEM))
			report_free_result(r, ptr, TFA_KIND_MALLOC, &old);
		goto out;
	}
	/* Recorded before, not after: a realloc of a block new made is a mismatch, as in exact tracking. */
	if (!tfa_kinds_match(info.kind, TFA_KIND_MALLOC))
		report_free_result(TFA_FREE_MISMATCH, ptr, TFA_KIND_MALLOC, &info);
	if (tfa_tls.fast_rec != NULL && info.lg_align == 0) {
		/*
		 * The record goes first: once jemalloc has the old block back,
		 * another thread may get its address, sampled, and record it.
		 */
		if (!tfa_tracking_unrecord(&cpu_tracker, p, &info)) {
			/* Freed by another thread meanwhile: what the general path says. */
			*done = false;
			goto out;
		}
		q = tfa_je_rallocx(ptr, nbytes, 0);
		if (tfa_unlikely(q == NULL)) {
			/* Refused: the block is recorded again (counted as a free and an allocation). */
			tfa_record_t rec = tfa_record_pack(&info);
			tfa_tracking_record_block(&cpu_tracker, &rec, tfa_je_sallocx(ptr, 0));
			goto out;
		}
		tfa_tracking_count_untracked(&cpu_tracker, 1, nbytes, tfa_je_sallocx(q, 0), true);
		if (sfilter_on)
			sfilter_sub(p);
		goto out;
	}
	q = untracked_alloc(nbytes, 0, false);
	if (q != NULL) {
		memcpy(q, ptr, TFA_MIN(info.requested, nbytes));
		tfa_tracking_count_untracked(&cpu_tracker, 0, 0, 0, true);
		if (tfa_tracking_unrecord(&cpu_tracker, p, &info))
			quarantine_put(p, &info);
	}
out:
	shim_exit();
	if (q != NULL || !*done)
		errno = saved_errno;
	return q;
}

static void *shim_realloc_general(void *ptr, size_t nbytes);

/* Everything fast_alloc does not serve. */
static TFA_NOINLINE void *
shim_alloc_general(size_t nbytes, size_t alignment, uint8_t kind, bool zero)
{
	tfa_allocation_attrs_t attrs = {
		.zero_fill = zero,
		/* A nested call (the guard is held) is the shim's or its dependencies'. */
		.kind = tfa_unlikely(tfa_guard_active()) ? (uint8_t)TFA_KIND_INTERNAL : kind,
	};

	void *p;

	shim_enter();
	if (tfa_unlikely(tfa_control_tag_by_thread) && !tfa_guard_active())
		tfa_control_thread_tag();
	attrs.stack_id = stack_for(nbytes);
	if (tfa_unlikely(sample_only)) {
		/* Recorded: a sample, the shim's own, a resource's. */
		if (attrs.stack_id == 0 && attrs.kind != TFA_KIND_INTERNAL && tfa_tls.tag == 0)
			p = untracked_alloc(nbytes, alignment, zero);
		else
			p = tracked_alloc(nbytes, alignment, kind, zero, attrs.stack_id);
		shim_exit();
		if (tfa_unlikely(tick_due()))
			shim_tick();
		return p;
	}
	/* Constant arguments for malloc and new: the inline path folds their checks away. */
	if (tfa_likely(alignment == 0 && !zero)) {
		attrs.zero_fill = false;
		p = tfa_tracking_allocate_fast(&cpu_tracker, 0, nbytes, &attrs);
	} else {
		p = tfa_tracking_allocate_fast(&cpu_tracker, alignment, nbytes, &attrs);
	}
	shim_exit();
	if (tfa_unlikely(tick_due()))
		shim_tick();
	return p;
}

/*
 * malloc's general path, with malloc's failures: a size past PTRDIFF_MAX,
 * and ENOMEM with every NULL.  Here rather than in malloc itself: the fast
 * path takes small sizes only, and its NULL is jemalloc's, which set ENOMEM
 * (callgrind, trees 14: 4 instructions a malloc less).
 */
static TFA_NOINLINE void *
shim_malloc_general(size_t nbytes)
{
	void *p = NULL;

	if (tfa_likely(nbytes <= PTRDIFF_MAX))
		p = shim_alloc_general(nbytes, 0, TFA_KIND_MALLOC, false);
	if (tfa_unlikely(p == NULL))
		errno = ENOMEM;
	return p;
}

/*
 * cpu_tracker.fast, when the fast path is open: which mode's.  An entry
 * point made for one mode serves only when the fast path is that mode's: a
 * call to TFA_SHIM_TRACK_ALL's that began before init turned sample-only
 * tracking on, and reaches the fast path after it opened, takes the general
 * path, which asks the mode again.
 */
enum { FAST_TRACK_ALL = 1, FAST_SAMPLE_ONLY = 2 };

/* Whether the process tracks a sample only, as an entry point made for track sees it. */
static TFA_ALWAYS_INLINE bool
mode_sample_only(int track)
{
	return track == TFA_SHIM_TRACK_ANY ? sample_only : track == TFA_SHIM_TRACK_SAMPLED;
}

static TFA_ALWAYS_INLINE bool
fast_open(int track)
{
	uint8_t f = __atomic_load_n(&cpu_tracker.fast, __ATOMIC_RELAXED);

	if (track == TFA_SHIM_TRACK_ANY)
		return f != 0;
	return f == (track == TFA_SHIM_TRACK_SAMPLED ? FAST_SAMPLE_ONLY : FAST_TRACK_ALL);
}

/*
 * Inlined into the entry points of preload/ (the build uses link-time
 * optimisation): their constant alignment, kind and zero fill fold the tests
 * and the record's metadata, and no call is made on the fast path.
 */
TFA_ALWAYS_INLINE void *
tfa_shim_alloc_in(size_t nbytes, size_t alignment, uint8_t kind, bool zero, int track)
{
	tfa_thread_rec_t *trec = tfa_tls.fast_rec;
	bool only_sampled = mode_sample_only(track);

	if (tfa_likely(trec != NULL) && tfa_likely(fast_open(track))
	    && tfa_likely(!tfa_guard_active()) && tfa_likely(alignment == 0)
	    && tfa_likely(nbytes <= TFA_JE_SMALL_MAX) && tfa_likely(tfa_tls.tag == 0)) {
		void *p;
		if (tfa_unlikely(!fast_unsampled(nbytes)))
			p = fast_alloc_sampled(trec, nbytes, kind, zero);
		else if (tfa_unlikely(only_sampled))
			p = fast_alloc_untracked(trec, nbytes, zero);
		else
			p = fast_alloc(trec, nbytes, kind, zero, false);
		/* The clock is looked at every TICK_EVERY allocations (series, snapshots). */
		if (tfa_unlikely(tick_due()))
			shim_tick();
		return p;
	}
	if (kind == TFA_KIND_MALLOC && alignment == 0 && !zero)
		return shim_malloc_general(nbytes);
	return shim_alloc_general(nbytes, alignment, kind, zero);
}

TFA_ALWAYS_INLINE void *
tfa_shim_alloc(size_t nbytes, size_t alignment, uint8_t kind, bool zero)
{
	return tfa_shim_alloc_in(nbytes, alignment, kind, zero, TFA_SHIM_TRACK_ANY);
}

/* Everything fast_free does not serve. */
static TFA_NOINLINE void
shim_free_general(void *ptr, uint8_t kind)
{
	tfa_alloc_info_t info;
	uint8_t freed_by = tfa_guard_active() ? (uint8_t)TFA_KIND_INTERNAL : kind;
	int saved_errno = errno;

	shim_enter();
	int r = tfa_tracking_free(&cpu_tracker, ptr, freed_by, &info);
	if (tfa_unlikely(r != TFA_FREE_OK))
		report_free_result(r, ptr, kind, &info);
	shim_exit();
	errno = saved_errno;
}

static TFA_NOINLINE void shim_free_any(void *ptr, uint8_t kind);

/* Inlined into the entry points, as tfa_shim_alloc. */
TFA_ALWAYS_INLINE void
tfa_shim_free_in(void *ptr, uint8_t kind, int track)
{
	tfa_thread_rec_t *trec = tfa_tls.fast_rec;
	bool only_sampled = mode_sample_only(track);

	/*
	 * Pointers not a multiple of 8 are never records' keys (nor is NULL,
	 * which the caller never passes, nor TFA_PTR_BUSY): the general path
	 * says what they are.
	 */
	if (tfa_unlikely(only_sampled)) {
		/* No record (the filter proves it) and jemalloc's: counted and freed here. */
		uintptr_t p = (uintptr_t)ptr;
		if (tfa_likely(trec != NULL) && tfa_likely(!tfa_guard_active()) && tfa_likely(!sfilter_maybe(p))
		    && tfa_likely(untracked_block(p))) {
			int *errno_loc = tfa_tls.errno_loc;
			int saved_errno = *errno_loc;
			shim_enter();
			size_t asz = tfa_je_sallocx(ptr, 0);
			/*
			 * Each outcome with its own end: a flag kept across
			 * jemalloc's call cost a register saved, and its test.
			 */
			if (tfa_likely(block_start_fits(p, asz))) {
				untracked_free_at(trec, ptr, asz);
				shim_exit();
				*errno_loc = saved_errno;
				return;
			}
			shim_exit();
			*errno_loc = saved_errno;
			/* Inside a block: the general path says so. */
		}
		shim_free_sampled(ptr, kind);
		return;
	}
	if (tfa_likely(trec != NULL) && tfa_likely(fast_open(track))
	    && tfa_likely(!tfa_guard_active()) && tfa_likely(((uintptr_t)ptr & 7) == 0)
	    && tfa_likely(fast_free(trec, ptr, kind)))
		return;
	if (track != TFA_SHIM_TRACK_ANY && tfa_unlikely(sample_only)) {
		/* TFA_SHIM_TRACK_ALL's entry, called before sample-only tracking came on (fast_open). */
		shim_free_any(ptr, kind);
		return;
	}
	shim_free_general(ptr, kind);
}

TFA_ALWAYS_INLINE void
tfa_shim_free(void *ptr, uint8_t kind)
{
	tfa_shim_free_in(ptr, kind, TFA_SHIM_TRACK_ANY);
}

static TFA_NOINLINE void
shim_free_any(void *ptr, uint8_t kind)
{
	tfa_shim_free_in(ptr, kind, TFA_SHIM_TRACK_ANY);
}

/*
 * realloc of a small block of the fast path's kind to a small size, with one
 * thread: jemalloc's rallocx, then the record changed in place (or moved) and
 * the counts of one free, one allocation and one realloc, as
 * tfa_tracking_reallocate makes them.  false: not served (nothing changed).
 * [hot path]
 */
static TFA_ALWAYS_INLINE bool
fast_realloc(tfa_thread_rec_t *trec, void *p, size_t nbytes, void **out)
{
	tfa_tracking_allocator_t *ta = &cpu_tracker;
	uint64_t ptr = (uintptr_t)p;
	tfa_ptr_shard_t *sh = tfa_ptr_shard_of(&process_table, ptr);

	shim_enter();
	int64_t i = tfa_ptr_fast_find(sh, ptr);
	if (tfa_unlikely(i < 0))
		goto not_served;
	uint64_t old_meta = sh->slots[i].size_meta;
	size_t old = old_meta & TFA_REQUESTED_MAX;
	/* A resource's block, or one made for a resource: its figures and limit are the general path's. */
	if (tfa_unlikely((old_meta >> 47) != fast_meta_hi(TFA_KIND_MALLOC) || old > TFA_JE_SMALL_MAX
			 || (sh->slots[i].tag | tfa_tls.tag) != 0))
		goto not_served;
	/* A sampled old block, or a new one to sample (the last check: served from here on). */
	if (tfa_unlikely(sh->slots[i].stack_id != 0) || tfa_unlikely(!fast_unsampled(nbytes)))
		goto not_served;
	void *q = tfa_je_rallocx(p, nbytes, 0);
	if (tfa_unlikely(q == NULL)) {
		/* Refused: the old block and its record are intact. */
		*out = NULL;
		shim_exit();
		return true;
	}
	size_t old_asz = tfa_jemalloc_usable[(old + 7) >> 3];
	size_t asz = tfa_jemalloc_usable[(nbytes + 7) >> 3];
	uint64_t meta = (uint64_t)nbytes | (fast_meta_hi(TFA_KIND_MALLOC) << 47);
	tfa_stat_slot_t *s = &trec->slots[TFA_SLOT_PROCESS];
	uint64_t id = tfa_likely(s->next_id < s->id_end) ? s->next_id++ : tfa_tracking_id_block(ta, s);
	uint64_t id_thread = (id & TFA_ID_MAX) | trec->id_thread_bits;
	uint32_t tag = 0;

	/* The old block's free: one change with the new block's allocation, as the general path counts it. */
	int64_t before = __atomic_load_n(&ta->in_use, __ATOMIC_RELAXED);
	fast_leaving(before, before - (int64_t)old + (int64_t)nbytes);
	s->num_frees++;
	fast_count(s, -(int64_t)old, -(int64_t)old_asz, true, true);
	s->num_reallocs++;
	if (tfa_likely(q == p)) {
		tfa_record_t *slot = &sh->slots[i];
		slot->size_meta = meta;
		slot->id_thread = id_thread;
		slot->stack_id = 0;
		slot->tag = tag;
	} else {
		tfa_ptr_note_freed(ptr);
		(void)tfa_ptr_owned_remove(sh, (uint64_t)i, ptr); /* one thread: it cannot fail */
		uint64_t qp = (uintptr_t)q;
		if (tfa_unlikely(!tfa_ptr_fast_insert(tfa_ptr_shard_of(&process_table, qp), qp, meta,
						      id_thread, 0, tag, false))) {
			tfa_record_t rec = { .ptr = qp, .size_meta = meta, .id_thread = id_thread, .tag = tag };
			tfa_tracking_record_block(ta, &rec, asz);
			goto done;
		}
	}
	/* The new block's allocation. */
	fast_count_alloc(s, nbytes, asz, true);
done:
	*out = q;
	shim_exit();
	return true;

not_served:
	shim_exit();
	return false;
}

void *
tfa_shim_realloc(void *ptr, size_t nbytes)
{
	tfa_thread_rec_t *trec = tfa_tls.fast_rec;
	void *q;

	if (tfa_unlikely(sample_only)) {
		bool done;
		q = shim_realloc_sampled(ptr, nbytes, &done);
		if (done)
			return q;
		return shim_realloc_general(ptr, nbytes);
	}
	if (tfa_likely(trec != NULL) && tfa_likely(fast_open(TFA_SHIM_TRACK_ANY))
	    && tfa_likely(!tfa_guard_active()) && tfa_likely(((uintptr_t)ptr & 7) == 0)
	    && tfa_likely(nbytes <= TFA_JE_SMALL_MAX) && tfa_likely(__libc_single_threaded)
	    && tfa_likely(fast_realloc(trec, ptr, nbytes, &q)))
		return q;
	return shim_realloc_general(ptr, nbytes);
}

/* Everything fast_realloc does not serve. */
static TFA_NOINLINE void *
shim_realloc_general(void *ptr, size_t nbytes)
{
	int r;
	tfa_alloc_info_t old;

	shim_enter();
	uint32_t stack_id = nbytes != 0 ? stack_for(nbytes) : 0;
	void *q = tfa_tracking_reallocate(&cpu_tracker, ptr, nbytes, stack_id, &r, &old);
	size_t foreign = (r == TFA_FREE_INVALID || r == TFA_FREE_DOUBLE) && glibc_foreign_possible()
				 ? tfa_glibc_foreign_size(ptr)
				 : 0;
	if (tfa_unlikely(r != TFA_FREE_OK && r != TFA_FREE_NOMEM && foreign == 0))
		report_free_result(r, ptr, TFA_KIND_MALLOC, &old);
	shim_exit();
	if (tfa_unlikely(foreign != 0)) {
		/* glibc's block, made out of the shim's sight: the new one is the shim's. */
		q = nbytes != 0 ? tfa_shim_alloc(nbytes, 0, TFA_KIND_MALLOC, false) : NULL;
		if (q != NULL || nbytes == 0) {
			if (q != NULL)
				memcpy(q, ptr, TFA_MIN(foreign, nbytes));
			(void)glibc_foreign_free(ptr);
		}
	}
	return q;
}

size_t
tfa_shim_usable_size(const void *ptr)
{
	tfa_alloc_info_t info;
	size_t n = 0;

	shim_enter();
	if (tfa_tracking_lookup(&cpu_tracker, ptr, &info))
		n = tfa_tracking_backend_usable_size(&cpu_tracker, &info);
	else if (sample_only && !(sfilter_maybe((uintptr_t)ptr) && quarantine_holds((uintptr_t)ptr))
		 && untracked_block((uintptr_t)ptr)) {
		n = tfa_je_sallocx(ptr, 0);
		n = block_start_fits((uintptr_t)ptr, n) ? n : 0;
	} else if (glibc_foreign_possible()) {
		n = tfa_glibc_foreign_size(ptr);
	}
	shim_exit();
	return n;
}

bool
tfa_shim_mallinfo(struct mallinfo2 *mi)
{
	size_t allocated, active;
	tfa_allocator_t *b = __atomic_load_n(&cpu_tracker.wrapper.wrapped, __ATOMIC_ACQUIRE);

	if (b == NULL || !tfa_jemalloc_figures(b, &allocated, &active))
		return false;
	/* As glibc's main arena without mmapped chunks: the pages in use, of which the blocks' bytes. */
	memset(mi, 0, sizeof(*mi));
	mi->arena = active;
	mi->uordblks = allocated;
	mi->fordblks = active > allocated ? active - allocated : 0;
	return true;
}

int
tfa_shim_malloc_trim(void)
{
	tfa_allocator_t *b = __atomic_load_n(&cpu_tracker.wrapper.wrapped, __ATOMIC_ACQUIRE);
	return b != NULL ? tfa_jemalloc_trim(b) : -1;
}

tfa_shim_state_t
tfa_shim_state(void)
{
	return __atomic_load_n(&shim_state, __ATOMIC_ACQUIRE);
}

/*
 * Whether the caller writes the process's final profile: the first of the
 * ways out (exit, _exit, exec, a fatal signal, the destructor) to ask does.
 * Never a vfork or clone(CLONE_VM) child: it has a pid of its own but no fork
 * handler ran, and it shares the parent's memory, which it must not change.
 */
static pid_t final_tid;  /* the thread that took the final write; 0: none */
static bool final_done;  /* it is written (or failed, said in its line) */

static bool
take_final_write(void)
{
	if (getpid() != proc.pid)
		return false;
	/* Only from READY: a state the exchange had made SHUTDOWN without a writer held waiters for a minute. */
	tfa_shim_state_t ready = TFA_SHIM_READY;
	if (!__atomic_compare_exchange_n(&shim_state, &ready, TFA_SHIM_SHUTDOWN, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return false;
	__atomic_store_n(&final_tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	return true;
}

/* The final profile, by the thread that took its write. */
static int
final_write(uint32_t end_reason, int32_t exit_code)
{
	int err = tfa_shim_write_profile(end_reason, exit_code);

	__atomic_store_n(&final_done, true, __ATOMIC_RELEASE);
	return err;
}

/*
 * A thread that ends the process (_exit, a fatal signal, glibc's exit once
 * no exit handler is left) while another writes the final profile waits
 * until it is written: the process ended in the middle of it, and the
 * profile was lost (four threads calling exit at once: no profile, and no
 * line, in three runs of three).  At most a minute: a writer stopped for
 * good must not hold the process forever.
 */
static void
wait_final_write(bool imminent)
{
	if (getpid() != proc.pid)
		return;
	pid_t self = (pid_t)syscall(SYS_gettid);
	struct timespec ms = { .tv_sec = 0, .tv_nsec = 1000000 };
	/* nanosleep is a cancellation point: a thread ending the process must not end alone instead. */
	int cancel = tfa_cancel_off();

	for (int waited = 0; waited < 60000; waited++) {
		/* imminent: a thread is about to take the write (READY for a second at most). */
		tfa_shim_state_t state = tfa_shim_state();
		if ((state != TFA_SHIM_SHUTDOWN && !(imminent && state == TFA_SHIM_READY && waited < 1000))
		    || __atomic_load_n(&final_done, __ATOMIC_ACQUIRE)
		    || __atomic_load_n(&final_tid, __ATOMIC_ACQUIRE) == self)
			break;
		nanosleep(&ms, NULL);
	}
	tfa_cancel_restore(cancel);
}

/* ---- init ---------------------------------------------------------------------------------- */

static void
log_diag(void *ctx, const char *msg)
{
	(void)ctx;
	tfa_log("%s", msg);
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A small /proc file in buf, NUL-terminated; its length, 0 when it cannot be read. */
static size_t
read_small_file(const char *path, char *buf, size_t size)
{
	long n = tfa_read_small_file(path, buf, size);

	if (n < 0 && size > 0)
		buf[0] = '\0';
	return n < 0 ? 0 : (size_t)n;
}

static void
capture_identity(void)
{
	proc.pid = getpid();
	proc.ppid = getppid();
	proc.start_ns = now_ns();

	size_t n = read_small_file("/proc/self/cmdline", proc.command, sizeof(proc.command));
	/* argv is NUL-separated; join with spaces. */
	while (n > 0 && proc.command[n - 1] == '\0')
		n--;
	for (size_t i = 0; i < n; i++)
		if (proc.command[i] == '\0')
			proc.command[i] = ' ';
	proc.command[n] = '\0';

	if (tfa_modules_exe_path(proc.exe, sizeof(proc.exe)) == 0)
		proc.exe[0] = '\0';

	n = read_small_file("/proc/self/comm", proc.comm, sizeof(proc.comm));
	while (n > 0 && proc.comm[n - 1] == '\n')
		proc.comm[--n] = '\0';
	/*
	 * Without /proc (a chroot or sandbox that does not mount it): argv[0]
	 * for the command, and the kernel's own default for the name, the
	 * executable's base name cut to 15 bytes.  They had been empty: a
	 * summary line "tfalloc[PID]: : peak ...", a profile named "x".
	 */
	if (proc.command[0] == '\0')
		tfa_snprintf(proc.command, sizeof(proc.command), "%s", program_invocation_name);
	if (proc.comm[0] == '\0') {
		const char *slash = strrchr(proc.exe, '/');
		const char *base = proc.exe[0] == '\0' ? program_invocation_short_name : slash != NULL ? slash + 1 : proc.exe;
		tfa_snprintf(proc.comm, 16, "%s", base);
	}
}

static void
choose_allocator(void)
{
	tfa_allocator_t *chosen = NULL;
	char names[256];

	if (opts.allocator[0] != '\0') {
		chosen = tfa_registry_find(TFA_DEVICE_CPU, opts.allocator, 0);
		if (chosen == NULL) {
			tfa_registry_names(TFA_DEVICE_CPU, names, sizeof(names));
			tfa_allocator_t *fallback = tfa_registry_get_allocator(TFA_DEVICE_CPU, 0);
			const char *why = tfa_registry_has_name(TFA_DEVICE_CPU, opts.allocator)
						  ? "cannot be loaded here"
						  : "unknown allocator";
			tfa_log("TFALLOC_ALLOCATOR=\"%.*s\": %s (registered: %s); using %s", 64,
				opts.allocator, why, names,
				fallback != NULL ? tfa_allocator_name(fallback) : "glibc");
		}
	}
	if (chosen == NULL)
		chosen = tfa_registry_get_allocator(TFA_DEVICE_CPU, 0);
	if (chosen == NULL)
		chosen = &tfa_glibc_allocator;
	glibc_backend = chosen == &tfa_glibc_allocator;
	if (!glibc_backend)
		tfa_glibc_no_fast_bins();
	tfa_tracking_allocator_set_backend(&cpu_tracker, chosen);
}

/* Chooses the stack mode from the options; libunwind is loaded here, on the main thread. */
static void
init_stacks(void)
{
	static const char *const names[] = { [TFA_STACKS_NONE] = "none", [TFA_STACKS_FP] = "fp",
					     [TFA_STACKS_UNWIND] = "unwind" };
	tfa_stacks_mode_t mode = TFA_STACKS_UNWIND;
	bool known = false;
	uint64_t depth = opts.stack_depth;

	for (size_t i = 0; i < TFA_ARRAY_SIZE(names); i++) {
		if (strcmp(opts.stacks, names[i]) == 0) {
			mode = (tfa_stacks_mode_t)i;
			known = true;
		}
	}
	if (!known)
		tfa_log("TFALLOC_STACKS=\"%.*s\": not one of unwind, fp, none; using unwind", 64,
			opts.stacks);
	if (depth < 1 || depth > 128) {
		tfa_log("TFALLOC_STACK_DEPTH=%llu: out of range (1 to 128); using 64",
			(unsigned long long)depth);
		depth = 64;
	}
	if (mode == TFA_STACKS_NONE)
		return;
	int r = tfa_unwind_init(mode);
	if (r == -ENOENT && mode == TFA_STACKS_UNWIND) {
		tfa_log("TFALLOC_STACKS=unwind: libunwind.so.8 cannot be loaded; using frame pointers");
		mode = TFA_STACKS_FP;
		r = tfa_unwind_init(mode);
	}
	if (r != 0) {
		tfa_log("TFALLOC_STACKS=%s: %s; no stacks recorded", names[mode],
			strerrordesc_np(-r) != NULL ? strerrordesc_np(-r) : "error");
		return;
	}
	(void)tfa_modules_refresh(0);
	for (const tfa_module_t *m = tfa_modules_first(); m != NULL; m = m->next) {
		if (m->start <= (uintptr_t)&capture_stack && (uintptr_t)&capture_stack < m->end) {
			stacks.self_lo = m->start;
			stacks.self_hi = m->end;
		}
	}
	stacks.depth = (unsigned)depth;
	stacks.sample_bytes = opts.sample_bytes;
	stacks.walk_cached = opts.stack_cache;
	stacks.max = opts.max_stacks < 16 ? 16 : opts.max_stacks > TFA_STACK_ID_MAX / 2 ? TFA_STACK_ID_MAX / 2
									       : (uint32_t)opts.max_stacks;
	/* Room for the truncated stacks above the limit, and no more. */
	tfa_stack_table_set_limit(&tfa_process_stacks, stacks.max + stacks.max / 4);
	process_sites.thread_cached = true;
	cpu_tracker.sites = &process_sites;
	__atomic_store_n(&stacks.mode, mode, __ATOMIC_RELEASE);
}

/* The default mean interval of sample-only tracking, jemalloc's (lg_prof_sample 19). */
#define SAMPLE_ONLY_DEFAULT_BYTES ((uint64_t)512 << 10)

/* Why sample-only tracking cannot be had here; NULL: it can. */
static const char *
track_refused(void)
{
	if (!tfa_jemalloc_is_private(cpu_tracker.wrapper.wrapped))
		return "needs tfalloc's own jemalloc (not TFALLOC_ALLOCATOR=glibc, nor a program that links jemalloc)";
	if (opts.limit > 0)
		return "does not go with TFALLOC_LIMIT (the limit needs every block's size)";
	if (strcmp(opts.tag_by, "thread") == 0)
		return "does not go with TFALLOC_TAG_BY=thread (every block is a resource's)";
	if (strcmp(opts.stacks, "none") == 0)
		return "needs stacks (TFALLOC_STACKS=none): the sample is the blocks with a sampled stack";
	return NULL;
}

/* TFALLOC_TRACK, before the stacks are chosen: sampled needs a sample interval. */
static void
init_track_before_stacks(void)
{
	if (strcmp(opts.track, "all") == 0)
		return;
	if (strcmp(opts.track, "sampled") != 0) {
		tfa_log("TFALLOC_TRACK=\"%.*s\": not one of all, sampled; using all", 64, opts.track);
		sfilter_on = false;
		return;
	}
	const char *why = track_refused();
	if (why != NULL) {
		tfa_log("TFALLOC_TRACK=sampled: %s; using all", why);
		sfilter_on = false;
		return;
	}
	if (opts.sample_bytes == 0)
		opts.sample_bytes = SAMPLE_ONLY_DEFAULT_BYTES;
}

/* TFALLOC_TRACK, once the stacks are known (libunwind may be missing): on, or not. */
static void
init_track(void)
{
	if (!sfilter_on)
		return;
	if (__atomic_load_n(&stacks.mode, __ATOMIC_ACQUIRE) == TFA_STACKS_NONE) {
		tfa_log("TFALLOC_TRACK=sampled: no stacks could be recorded; using all");
		sfilter_on = false;
		return;
	}
	sample_only = true;
	/* Before the fast path opens (tfa_tracking_allocator_set_fast): no call takes the other mode's. */
	if (tfa_shim_on_sample_only != NULL)
		tfa_shim_on_sample_only();
}

/*
 * exit() runs this after every ELF destructor: __libc_start_main registers
 * the loader's fini after the shim's constructor registered this, and exit
 * handlers run in reverse order.  So the profile is written after the
 * program's static destructors and its libraries' destructors, and knows the
 * exit status.
 */
static void
on_exit_hook(int status, void *arg)
{
	(void)arg;
	if (!take_final_write())
		return;
	capture_final_context();
	/* A failure was reported on stderr by the summary line. */
	int err = final_write(TFA_END_EXIT, status);
	(void)err;
}

/*
 * Registered EXIT_BARRIERS times just before on_exit_hook, so run just after
 * it: glibc's exit in several threads at once runs the handlers between
 * them, and a thread that finds none left ends the process, whether or not
 * another still writes the profile in on_exit_hook.  A thread that runs one
 * waits for the profile: on_exit_hook is off the list by then, so its thread
 * is writing it or about to (the state may still be READY for a moment: it
 * waited for nothing there, and the profile was lost in 5 of 16 runs of ten
 * races under load).  While it waits the other barriers stay on the list, and
 * it registers one more (glibc refuses that once a thread found the list
 * empty: hence the ones registered at start).
 */
#define EXIT_BARRIERS 4

static void
exit_barrier(int status, void *arg)
{
	(void)status;
	if (getpid() != proc.pid || !proc.exit_hooked || __atomic_load_n(&final_done, __ATOMIC_ACQUIRE)
	    || __atomic_load_n(&final_tid, __ATOMIC_ACQUIRE) == (pid_t)syscall(SYS_gettid))
		return;
	(void)on_exit(exit_barrier, arg);
	wait_final_write(true);
}

/*
 * quick_exit skips exit handlers and ends the process by glibc's internal
 * _exit, which preload/exit_hooks.c does not see: the profile was lost.
 * tfalloc's quick_exit keeps the status; this handler, registered at start
 * and so run after the program's at_quick_exit handlers, writes it.
 */
static int quick_exit_status;

void
tfa_shim_before_quick_exit(int status)
{
	__atomic_store_n(&quick_exit_status, status, __ATOMIC_RELAXED);
}

static void
on_quick_exit_hook(void)
{
	if (!take_final_write()) {
		wait_final_write(false);
		return;
	}
	capture_final_context();
	int err = final_write(TFA_END_EXIT, __atomic_load_n(&quick_exit_status, __ATOMIC_RELAXED));
	(void)err;
}

static void leak_groups_reserve(void);

/*
 * Where profiles go: TFALLOC_OUTPUT, or the working directory; a relative
 * TFALLOC_OUTPUT from the working directory at start, made absolute here: a
 * program that changes directory (a daemon's chdir("/")) had its profile
 * looked for under the new one, and lost ("No such file or directory"), or
 * written into another directory of that name.  Kept relative only when the
 * absolute name would not fit.
 */
static void
absolute_path(const char *path, char out[TFA_OPT_STR_MAX])
{
	char cwd[TFA_OPT_STR_MAX];

	if (path[0] == '/') {
		memcpy(out, path, TFA_OPT_STR_MAX);
		return;
	}
	if (getcwd(cwd, sizeof(cwd)) == NULL) {
		tfa_snprintf(out, TFA_OPT_STR_MAX, "%s", path[0] != '\0' ? path : ".");
		return;
	}
	if (path[0] == '\0') {
		memcpy(out, cwd, TFA_OPT_STR_MAX);
		return;
	}
	size_t n = strlen(cwd), m = strlen(path);
	if (n + 1 + m >= TFA_OPT_STR_MAX) {
		memcpy(out, path, TFA_OPT_STR_MAX);
		return;
	}
	memcpy(out, cwd, n);
	out[n] = '/';
	memcpy(out + n + 1, path, m + 1);
}

static void
set_outdir(void)
{
	_Static_assert(sizeof(proc.outdir) == TFA_OPT_STR_MAX, "an output directory is an option's string");
	absolute_path(opts.output, proc.outdir);
}

/* TFALLOC_LOG, from the working directory at start as TFALLOC_OUTPUT is. */
static void
set_log_path(void)
{
	static char path[TFA_OPT_STR_MAX];

	if (opts.log[0] == '\0')
		return;
	absolute_path(opts.log, path);
	tfa_log_set_path(path);
}

/*
 * Whether the global scope's definition of name is a definition outside
 * libtfalloc.so (the program's); *where, when not NULL, names its object.
 * An executable that takes the function's address (python3 takes malloc's)
 * holds a PLT entry as the address everyone sees, undefined in its symbol
 * table: that entry jumps to tfalloc's function, and is no definition.
 */
static bool
defined_elsewhere(const char *name, const char **where)
{
	Dl_info theirs, ours;
	void *entry = NULL; /* dladdr1 writes a const ElfW(Sym) * there */
	void *f = dlsym(RTLD_DEFAULT, name);

	if (f == NULL || dladdr1(f, &theirs, &entry, RTLD_DL_SYMENT) == 0
	    || dladdr((void *)defined_elsewhere, &ours) == 0 || theirs.dli_fbase == ours.dli_fbase)
		return false;
	const ElfW(Sym) *sym = entry;
	if (sym == NULL || sym->st_shndx == SHN_UNDEF)
		return false;
	if (where != NULL)
		*where = theirs.dli_fname;
	return true;
}

static void
find_cxx_replaced(void)
{
	static const char *const scalar[] = { "_Znwm", "_ZnwmRKSt9nothrow_t", "_ZdlPv", "_ZdlPvm",
					      "_ZdlPvRKSt9nothrow_t", "_ZnwmSt11align_val_t",
					      "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZdlPvSt11align_val_t",
					      "_ZdlPvmSt11align_val_t" };
	static const char *const array[] = { "_Znam", "_ZnamRKSt9nothrow_t", "_ZdaPv", "_ZdaPvm",
					     "_ZdaPvRKSt9nothrow_t", "_ZnamSt11align_val_t",
					     "_ZnamSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_t",
					     "_ZdaPvmSt11align_val_t" };
	uint8_t found = 0;

	for (size_t i = 0; i < TFA_ARRAY_SIZE(scalar); i++)
		if (defined_elsewhere(scalar[i], NULL))
			found |= 1;
	for (size_t i = 0; i < TFA_ARRAY_SIZE(array); i++)
		if (defined_elsewhere(array[i], NULL))
			found |= 2;
	cxx_replaced = found;
}

/*
 * A malloc that the program's executable (or a library loaded before
 * tfalloc) defines comes first in the lookup: none of its calls reach
 * tfalloc, and the summary said "0 allocations" of a program that
 * allocates (a program linked with a static tcmalloc or mimalloc that
 * replaces malloc).  Said once, at the start.
 */
static void
say_foreign_malloc(void)
{
	const char *where = NULL;

	if (defined_elsewhere("malloc", &where))
		tfa_log("malloc of %s comes before tfalloc's: the blocks it makes are not seen",
			where != NULL && where[0] != '\0' ? where : proc.comm);
}

static tfa_child_env_t child_env;
static bool child_env_kept;

/* The kept profile's path, when the file was handed to this image at its start (core/handoff.h): for messages. */
static char handed_profile_path[TFA_OPT_STR_MAX + 128];

static char *
child_env_copy(const char *s, size_t n)
{
	return tfa_arena_strndup(s, n);
}

/*
 * What an exec must carry to the new program is kept (the run's options are
 * read already); then what the exec that started this program added to its
 * environment is taken out again, so that the program sees the environment
 * its parent gave it (core/child_env.h).
 */
static void
keep_child_env(void)
{
	Dl_info self;

	if (dladdr((void *)keep_child_env, &self) != 0 && self.dli_fname != NULL)
		(void)tfa_child_env_keep(&child_env, environ, self.dli_fname, child_env_copy);
	child_env.into_valgrind = opts.under_valgrind;
	__atomic_store_n(&child_env_kept, true, __ATOMIC_RELEASE);
	/* Before the variable goes: the descriptors of a process that changed its user. */
	const char *handoff = getenv(TFA_HANDOFF_VAR);
	if (handoff != NULL)
		tfa_handoff_receive(handoff);
	if (tfa_kept_fd_ours(&tfa_handoff_profile)) {
		char link[32];
		tfa_snprintf(link, sizeof(link), "/proc/self/fd/%d", tfa_handoff_profile.fd);
		ssize_t n = readlink(link, handed_profile_path, sizeof(handed_profile_path) - 1);
		handed_profile_path[n > 0 ? n : 0] = '\0';
	}
	(void)tfa_child_env_take_back(environ);
}

const struct tfa_child_env_s *
tfa_shim_child_env(void)
{
	return __atomic_load_n(&child_env_kept, __ATOMIC_ACQUIRE) ? &child_env : NULL;
}

void
tfa_shim_init(void)
{
	if (__atomic_load_n(&shim_state, __ATOMIC_ACQUIRE) != TFA_SHIM_UNINIT)
		return;
	__atomic_store_n(&shim_state, TFA_SHIM_INITIALIZING, __ATOMIC_RELEASE);
	tfa_guard_enter();

	tfa_log_init();
	tfa_ptr_table_init_barriers();
	tfa_options_parse(environ, &opts, log_diag, NULL);
	set_log_path();
	keep_child_env();
	/* Where the limit cannot be raised for the profile (fds_make_room), descriptors are kept for it. */
	struct rlimit nofile;
	if (opts.profile && getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur == nofile.rlim_max)
		tfa_fd_reserve_take();
	tfa_glibc_allocator_resolve();
	/*
	 * The own-maps lock is the innermost: the private jemalloc maps memory
	 * holding its mutexes.  Its fork handlers are registered before jemalloc
	 * registers its own (choose_allocator), so that glibc takes it after
	 * jemalloc's mutexes and lets it go before them; taken with the shim's
	 * other locks, before jemalloc's, it deadlocked a fork against a thread
	 * making its first jemalloc arena.
	 */
	pthread_atfork(tfa_own_maps_prefork, tfa_own_maps_postfork_parent, tfa_own_maps_postfork_child);
	tfa_tracking_allocator_claim_process_slot(&cpu_tracker);
	leak_groups_reserve();
	/* Before jemalloc serves anything: every recorded block of it is in the filter. */
	sfilter_on = strcmp(opts.track, "sampled") == 0;
	choose_allocator();
	say_foreign_malloc();
	find_cxx_replaced();
	if (opts.leak_classes)
		tfa_thread_tsd_layout_init();
	if (opts.limit > 0)
		tfa_tracking_allocator_set_bytes_limit(&cpu_tracker,
						       opts.limit > INT64_MAX ? INT64_MAX
									      : (int64_t)opts.limit);
	if (opts.cuda_limit[0] != '\0' && tfa_devices_set_limits(opts.cuda_limit) != 0)
		tfa_log("TFALLOC_CUDA_LIMIT=%s: expected ORDINAL:SIZE[,ORDINAL:SIZE...] "
			"(e.g. 0:8G,1:4G; also host:SIZE, managed:SIZE): ignored", opts.cuda_limit);
	capture_identity();
	init_track_before_stacks();
	init_stacks();
	init_track();
	tfa_control_init(opts.tag_by);
	tfa_timeline_init(&timeline, tfa_monotonic_ns(), TIMELINE_FIRST_INTERVAL_NS);
	tfa_devices_set_time_origin(timeline.start_ns);
	timeline_sample(timeline.start_ns, true);
	if (opts.profile && opts.flush_interval_ms != 0)
		next_flush_ns = timeline.start_ns
				+ TFA_MIN(opts.flush_interval_ms, (uint64_t)1 << 40) * 1000000u;
	set_outdir();
	for (int i = 0; i < EXIT_BARRIERS; i++)
		(void)on_exit(exit_barrier, NULL);
	proc.exit_hooked = on_exit(on_exit_hook, NULL) == 0;
	(void)at_quick_exit(on_quick_exit_hook);
	if (opts.catch_signals)
		install_signal_handlers();
	pthread_atfork(tfa_shim_prefork, tfa_shim_postfork_parent, tfa_shim_postfork_child);
	/* After the atfork above: its fork handlers run around the shim's. */
	tfa_remote_init(opts.control_signal);
	/* The fast path knows one backend and no resources: with --tag-by thread every allocation has one. */
	bool fast = tfa_jemalloc_is_private(cpu_tracker.wrapper.wrapped) && !tfa_control_tag_by_thread;
	tfa_tracking_allocator_set_fast(&cpu_tracker, !fast ? 0 : sample_only ? FAST_SAMPLE_ONLY : FAST_TRACK_ALL);

	tfa_unwind_started();
	tfa_guard_exit();
	__atomic_store_n(&shim_state, TFA_SHIM_READY, __ATOMIC_RELEASE);
}

/* ---- the profile --------------------------------------------------------------------------- */

/*
 * Leaks grouped by (stack id, resource tag, device, kind); groups past the
 * table's size land in `overflow`, by kind.  16,384 groups: a JVM's 65,000
 * blocks at exit came in more than 4,096, the size before, and the overflow
 * was one row of kind unclassified, 9.9 MB, which a leak gate counts as
 * definite: a JVM that leaked nothing of the kind failed every gate.
 */
#define LEAK_GROUPS_LG 14
_Static_assert(LEAK_GROUPS_LG < 16, "a group's number fits in leak_walk.index's uint16_t");

struct leak_group {
	uint32_t stack_id;
	uint32_t tag;
	uint8_t device;
	uint8_t kind; /* enum tfa_prof_leak_kind_e */
	uint64_t bytes;
	uint64_t blocks;
	uint64_t allocated;
	uint64_t sample;
	double est_bytes; /* sample-only tracking: what the group's sampled blocks stand for */
	double est_blocks;
};

struct leak_walk {
	/*
	 * The groups in the order they were made, cap - 1 at most: the
	 * profile's records are written from them, and only the pages they
	 * fill are touched.
	 */
	struct leak_group *groups;
	/*
	 * A group's number + 1 (0: empty) by the hash of its key, 2 * cap
	 * slots: at most half full, so that a probe ends within a few slots.
	 * (The groups were the hash table themselves, kept until one slot was
	 * left: with thousands of leaked stacks, as g++'s at exit, each new
	 * group then probed through most of the 4,096.)
	 */
	uint16_t *index;
	struct leak_group overflow[TFA_LEAK_REACHABLE + 1]; /* by kind; written with stack id 0: no stack */
	size_t ngroups;
	size_t cap;
	uint64_t bytes;
	uint64_t blocks;
	uint64_t class_bytes[TFA_LEAK_REACHABLE + 1];  /* by enum tfa_prof_leak_kind_e */
	uint64_t class_blocks[TFA_LEAK_REACHABLE + 1];
	/* The part of the figures above that other devices (CUDA) leaked. */
	uint64_t dev_bytes;
	uint64_t dev_blocks;
	uint64_t dev_class_bytes[TFA_LEAK_REACHABLE + 1];
	bool classified;
	uint64_t scanned; /* bytes the classification read */
	double est_bytes; /* sample-only tracking, the cpu's: the sum of the groups' */
	double est_blocks;
};

/*
 * The groups' memory, mapped at start: at the end a process may have no
 * address space left (a program that ran out of memory), and its profile
 * must still say what it leaked (mapped at the end, a failed mapping had
 * left every leak out: 0 leaked blocks, and a leak gate passed).  Its pages
 * are made as groups fill them, and given back after each profile
 * (MADV_DONTNEED: zero again for the next).  If the start could not map it
 * either, a few groups in bss serve: every leak is still counted, those of
 * further sites in the overflow row.  One profile at a time (profile_lock).
 */
#define LEAK_GROUPS_BYTES ((sizeof(struct leak_group) + 2 * sizeof(uint16_t)) << LEAK_GROUPS_LG)
#define LEAK_FALLBACK_LG  4
static struct leak_group *leak_groups_mem;
static struct leak_group leak_fallback_groups[1u << LEAK_FALLBACK_LG];
static uint16_t leak_fallback_index[2u << LEAK_FALLBACK_LG];

static void
leak_groups_reserve(void)
{
	leak_groups_mem = tfa_arena_map(LEAK_GROUPS_BYTES);
}

/* Points w at the groups' memory: the mapped groups, or the few in bss. */
static void
leak_groups_take(struct leak_walk *w)
{
	if (leak_groups_mem != NULL) {
		w->cap = (size_t)1 << LEAK_GROUPS_LG;
		w->groups = leak_groups_mem;
		w->index = (uint16_t *)(leak_groups_mem + w->cap);
		return;
	}
	w->cap = (size_t)1 << LEAK_FALLBACK_LG;
	w->groups = leak_fallback_groups;
	w->index = leak_fallback_index;
}

static void
leak_groups_give_back(struct leak_walk *w)
{
	if (w->groups == leak_groups_mem) {
		/* Zero for the next profile, and no longer resident. */
		madvise(leak_groups_mem, LEAK_GROUPS_BYTES, MADV_DONTNEED);
	} else {
		memset(leak_fallback_groups, 0, sizeof(leak_fallback_groups));
		memset(leak_fallback_index, 0, sizeof(leak_fallback_index));
	}
}

/* Adds one leaked block to its group of (stack id, resource tag, device, kind). */
static void
leak_add(struct leak_walk *w, uint32_t stack_id, uint32_t tag, uint8_t device, uint8_t kind,
	 uint64_t requested, uint64_t allocated, uintptr_t ptr)
{
	uint64_t h = ((((uint64_t)stack_id * 31 + device) * 8 + kind) * 65599 + tag)
		     * UINT64_C(0x9E3779B97F4A7C15);
	size_t mask = 2 * w->cap - 1;
	struct leak_group *g = NULL;
	for (size_t i = (size_t)(h >> 40) & mask;; i = (i + 1) & mask) {
		uint16_t e = w->index[i];
		if (e == 0) {
			if (w->ngroups + 1 >= w->cap)
				break;
			g = &w->groups[w->ngroups++];
			g->stack_id = stack_id;
			g->tag = tag;
			g->device = device;
			g->kind = kind;
			w->index[i] = (uint16_t)w->ngroups;
			break;
		}
		struct leak_group *c = &w->groups[e - 1];
		if (c->stack_id == stack_id && c->tag == tag && c->device == device && c->kind == kind) {
			g = c;
			break;
		}
	}
	if (g == NULL) {
		/* An overflow row for each kind: a reachable block past the table is no lost one. */
		g = &w->overflow[kind];
		if (g->blocks == 0) {
			g->kind = kind;
			g->device = device;
		}
	}
	g->bytes += requested;
	g->blocks++;
	g->allocated += allocated;
	if (sample_only) {
		/* A block with a stack is a sample; one without was recorded for another reason. */
		double weight = stack_id != 0 ? tfa_sample_weight(requested, stacks.sample_bytes) : 1.0;
		g->est_bytes += weight * (double)(requested == 0 ? 1 : requested);
		g->est_blocks += weight;
		if (device == TFA_DEVCODE_CPU) {
			w->est_bytes += weight * (double)(requested == 0 ? 1 : requested);
			w->est_blocks += weight;
		}
	}
	if (g->sample == 0)
		g->sample = ptr;
	w->bytes += requested;
	w->blocks++;
	w->class_bytes[kind] += requested;
	w->class_blocks[kind]++;
	if (device != TFA_DEVCODE_CPU) {
		w->dev_bytes += requested;
		w->dev_blocks++;
		w->dev_class_bytes[kind] += requested;
	}
}

static uint64_t
allocated_size_of(const tfa_alloc_info_t *info)
{
	tfa_allocator_t *b = tfa_tracking_allocator_backend(&cpu_tracker, info->backend);

	return b == NULL ? info->requested
			 : tfa_tracking_allocated_of(b, (const void *)info->ptr, info->requested,
						     info->lg_align ? (size_t)1 << info->lg_align : 0);
}

/* A live block; those of the other devices (core/devices.h) count their requested bytes as allocated. */
static void
leak_visit(void *arg, const tfa_record_t *rec)
{
	struct leak_walk *w = arg;
	tfa_alloc_info_t info;

	tfa_record_unpack(rec, &info);
	if (info.kind == TFA_KIND_INTERNAL)
		return;
	leak_add(w, info.stack_id, info.tag, info.device, TFA_LEAK_UNCLASSIFIED, info.requested,
		 info.device == TFA_DEVICE_CPU ? allocated_size_of(&info) : info.requested, info.ptr);
}

/* ---- leak classes at exit (core/leak_scan.h) ----------------------------------------------- */

/*
 * What the thread writing the final profile had in its registers and where
 * its stack was, taken where it entered the shim (exit hook, _exit, the
 * destructor), before the shim's own frames: roots of the leak scan.
 */
static struct {
	uintptr_t regs[8]; /* callee-saved registers: the caller's values live in them or below */
	uintptr_t stack_lo; /* the caller's stack pointer: the scan covers from here up */
} final_ctx;

static TFA_NOINLINE void
capture_final_context(void)
{
#if defined(__x86_64__)
	__asm__ volatile("mov %%rbx, 0(%0)\n\t"
			 "mov %%rbp, 8(%0)\n\t"
			 "mov %%r12, 16(%0)\n\t"
			 "mov %%r13, 24(%0)\n\t"
			 "mov %%r14, 32(%0)\n\t"
			 "mov %%r15, 40(%0)\n\t"
			 :
			 : "r"(final_ctx.regs)
			 : "memory");
#else
	__builtin_unwind_init();
#endif
	/* Above this frame's saved frame pointer and return address: the caller's frame. */
	final_ctx.stack_lo = (uintptr_t)__builtin_frame_address(0) + 2 * sizeof(uintptr_t);
}

/* A live block of the cpu device, beside its tfa_leak_block_t (same index as its `user`). */
struct leak_rec {
	uint64_t allocated;
	uint64_t id; /* the allocation id: whether the block is still the one collected */
	uint32_t stack_id;
	uint16_t tag; /* tags are below TFA_RES_MAX: 24 bytes a block */
	uint8_t device;
	uint8_t internal : 1;
	uint8_t current_backend : 1; /* made by the backend in use now */
};

struct leak_collect {
	tfa_leak_block_t *blocks;
	struct leak_rec *recs;
	size_t n, cap;
	size_t blocks_bytes, recs_bytes;
	bool failed;
	struct leak_walk *w; /* blocks of other devices go straight to their groups */
};

static bool
collect_grow(struct leak_collect *c)
{
	size_t cap = c->cap == 0 ? 4096 : c->cap * 2;
	size_t bb = cap * sizeof(*c->blocks), rb = cap * sizeof(*c->recs);
	tfa_leak_block_t *b = tfa_arena_map(bb);
	struct leak_rec *r = tfa_arena_map(rb);

	if (b == NULL || r == NULL || cap > UINT32_MAX) {
		tfa_arena_unmap(b, bb);
		tfa_arena_unmap(r, rb);
		return false;
	}
	if (c->n != 0) {
		memcpy(b, c->blocks, c->n * sizeof(*b));
		memcpy(r, c->recs, c->n * sizeof(*r));
	}
	tfa_arena_unmap(c->blocks, c->blocks_bytes);
	tfa_arena_unmap(c->recs, c->recs_bytes);
	c->blocks = b;
	c->recs = r;
	c->cap = cap;
	c->blocks_bytes = bb;
	c->recs_bytes = rb;
	return true;
}

static void
collect_visit(void *arg, const tfa_record_t *rec)
{
	struct leak_collect *c = arg;
	tfa_alloc_info_t info;

	tfa_record_unpack(rec, &info);
	if (info.device != TFA_DEVICE_CPU) {
		if (info.kind != TFA_KIND_INTERNAL)
			leak_add(c->w, info.stack_id, info.tag, info.device, TFA_LEAK_UNCLASSIFIED, info.requested,
				 allocated_size_of(&info), info.ptr);
		return;
	}
	if (c->failed || (c->n == c->cap && !collect_grow(c))) {
		c->failed = true;
		return;
	}
	c->blocks[c->n] = (tfa_leak_block_t){
		.addr = info.ptr,
		.size = info.requested,
		.user = (uint32_t)c->n,
	};
	/* The runtime's own blocks (made under the guard) are nodes of the graph, never reported. */
	c->recs[c->n] = (struct leak_rec){
		.allocated = info.kind == TFA_KIND_INTERNAL ? 0 : allocated_size_of(&info),
		.id = info.id,
		.stack_id = info.stack_id,
		.tag = (uint16_t)info.tag,
		.device = info.device,
		.internal = info.kind == TFA_KIND_INTERNAL,
		.current_backend = tfa_tracking_allocator_backend(&cpu_tracker, info.backend)
				   == cpu_tracker.wrapper.wrapped,
	};
	c->n++;
}

/*
 * A block of another device is a node of the graph like a heap block (its
 * own class is decided in classify_leaks: definite).  Device memory (cuda:N)
 * is never read; pinned host and managed memory is host memory and is
 * scanned for pointers like the heap, so that the host blocks it holds are
 * classified as usual.
 */
static void
collect_device_visit(void *arg, const tfa_record_t *rec)
{
	struct leak_collect *c = arg;
	tfa_alloc_info_t info;

	tfa_record_unpack(rec, &info);
	if (info.kind == TFA_KIND_INTERNAL)
		return;
	if (c->failed || (c->n == c->cap && !collect_grow(c))) {
		c->failed = true;
		return;
	}
	c->blocks[c->n] = (tfa_leak_block_t){
		.addr = info.ptr,
		.size = info.requested,
		.user = (uint32_t)c->n,
		/* Device memory cannot be read; a VMM record's key is a handle, not memory. */
		.flags = info.device >= TFA_DEVCODE_CUDA0 || info.kind == TFA_KIND_DEVICE_HANDLE
				 ? TFA_LEAK_NOSCAN
				 : 0,
	};
	c->recs[c->n] = (struct leak_rec){
		.allocated = info.requested,
		.stack_id = info.stack_id,
		.tag = (uint16_t)info.tag,
		.device = info.device,
	};
	c->n++;
}

/*
 * The anonymous memory the program mapped itself (pymalloc's arenas, the
 * loader's link_maps) is a root, as for memcheck, when the shim knows all of
 * its own: every mapping of its arena and of its private jemalloc went
 * through preload/own_maps_wrap.c.  Not with glibc or the program's jemalloc
 * as the backend: their metadata and freed memory (stale pointers) lie in
 * anonymous mappings the shim does not know.
 */
static void
add_anon_roots(tfa_leak_roots_t *roots, const tfa_leak_maps_t *maps, const struct leak_collect *c)
{
	bool trusted = false;

	if (!tfa_own_maps_complete())
		return;
	for (size_t i = 0; i < c->n; i++) {
		if (c->recs[c->blocks[i].user].current_backend) {
			trusted = tfa_own_maps_contains(c->blocks[i].addr);
			break;
		}
	}
	if (!trusted)
		return;
	size_t cap = tfa_own_maps_count() + 256;
	size_t bytes = cap * sizeof(tfa_leak_range_t);
	tfa_leak_range_t *own = tfa_arena_map(bytes);
	if (own == NULL)
		return;
	size_t n = tfa_own_maps_snapshot(own, cap);
	if (n != 0)
		(void)tfa_leak_roots_add_anon(roots, maps, own, n, c->blocks, c->n);
	tfa_arena_unmap(own, bytes);
}

/*
 * Groups the cpu device's live blocks by (stack, kind), their kind found by
 * reachability as memcheck finds it.  Time O(n log n + scanned bytes x log n)
 * for n live blocks (core/leak_scan.h); memory 48 bytes per live block
 * (the block list, its records, the worklist) plus the mappings list and the
 * roots, all mapped for the call and unmapped after.  Returns false (nothing
 * grouped) when memory ran out: the caller groups the blocks unclassified.
 */
/*
 * Whether the block collected at ptr with allocation id is still recorded.
 * With other threads running, one of them can free a block after the walk
 * of the table collected it, while the scan reads memory: its last pointer
 * may be gone by then, and it would be called lost.  It is no block live at
 * exit.  (A thread freeing a block waits at the shard's gate while the walk
 * holds it, and frees it as the scan starts.  The GLib gate test failed in 2
 * of 10 runs on two such blocks, most likely: a GSource's name and callback
 * data, which GLib's worker thread frees, called lost in a test's child.)
 */
static bool
still_recorded(uintptr_t ptr, uint64_t id)
{
	tfa_record_t rec;

	return tfa_ptr_table_lookup(&process_table, ptr, &rec) && (rec.id_thread & TFA_ID_MAX) == id;
}

static bool
classify_leaks(struct leak_walk *w)
{
	struct leak_collect c = { .w = w };
	tfa_leak_maps_t maps;
	tfa_leak_roots_t roots;
	uint32_t *work = NULL;
	size_t work_bytes = 0;
	bool ok = false;

	memset(&roots, 0, sizeof(roots));
	memset(&maps, 0, sizeof(maps));
	tfa_ptr_table_foreach(&process_table, collect_visit, &c);
	tfa_ptr_table_foreach(tfa_devices_table(), collect_device_visit, &c);
	if (c.failed)
		goto out_undo;
	/*
	 * Only the runtime's own blocks are live (the loader's for a dlopen
	 * of the shim's): nothing can be reported, so nothing is read.  The scan
	 * costs milliseconds at every exit (the roots of every module), which a
	 * test suite of many short processes pays many times.
	 */
	size_t reportable = 0;
	for (size_t i = 0; i < c.n; i++)
		reportable += !c.recs[i].internal;
	if (reportable == 0) {
		w->classified = true;
		ok = true;
		goto out;
	}
	if (tfa_leak_maps_read(&maps) != 0)
		goto out_undo;
	work_bytes = (2 * c.n + 1) * sizeof(uint32_t);
	work = tfa_arena_map(work_bytes);
	if (work == NULL)
		goto out_undo;
	/* A block whose memory is gone (freed behind the shim's back) is a node, never read. */
	for (size_t i = 0; i < c.n; i++) {
		tfa_leak_block_t *b = &c.blocks[i];
		if (b->size != 0 && !tfa_leak_maps_readable(&maps, b->addr, b->addr + b->size))
			b->flags |= TFA_LEAK_NOSCAN;
	}
	tfa_leak_sort(c.blocks, c.n);
	if (tfa_leak_collect_roots(&roots, &maps, (const void *)&cpu_tracker, final_ctx.stack_lo,
				   final_ctx.regs, TFA_ARRAY_SIZE(final_ctx.regs))
	    != 0)
		goto out_undo;
	add_anon_roots(&roots, &maps, &c);
	w->scanned = tfa_leak_classify(c.blocks, c.n, roots.r, roots.n, work, roots.alone);
	for (size_t i = 0; i < c.n; i++) {
		const tfa_leak_block_t *b = &c.blocks[i];
		const struct leak_rec *r = &c.recs[b->user];
		if (!roots.alone && r->device == TFA_DEVCODE_CPU && !r->internal && !still_recorded(b->addr, r->id))
			continue;
		/*
		 * A CUDA block still allocated at exit is definitely lost, as
		 * compute-sanitizer's leak check reports it: the driver keeps every
		 * allocation in its own tables (host memory the scan reads), so
		 * reachability says nothing, and only the context's teardown gives
		 * the memory back.  Pinned host and managed blocks were still
		 * scanned above: what they point to is classified as usual.
		 */
		uint8_t cls = r->device != TFA_DEVCODE_CPU ? (uint8_t)TFA_LEAK_DEFINITE : b->cls;
		if (!r->internal)
			leak_add(w, r->stack_id, r->tag, r->device, cls, b->size, r->allocated, b->addr);
	}
	w->classified = true;
	ok = true;
	goto out;
out_undo:
	/* Blocks of other devices were grouped already: start again from nothing. */
	memset(w->groups, 0, sizeof(*w->groups) * w->ngroups);
	memset(w->index, 0, sizeof(*w->index) * 2 * w->cap);
	memset(w->overflow, 0, sizeof(w->overflow));
	w->ngroups = 0;
	w->bytes = w->blocks = 0;
	memset(w->class_bytes, 0, sizeof(w->class_bytes));
	memset(w->class_blocks, 0, sizeof(w->class_blocks));
	w->dev_bytes = w->dev_blocks = 0;
	memset(w->dev_class_bytes, 0, sizeof(w->dev_class_bytes));
out:
	tfa_arena_unmap(work, work_bytes);
	tfa_arena_unmap(c.blocks, c.blocks_bytes);
	tfa_arena_unmap(c.recs, c.recs_bytes);
	tfa_leak_roots_free(&roots);
	tfa_leak_maps_free(&maps);
	return ok;
}

static uint8_t out_buf[64 << 10];
static uint8_t rec_buf[64 << 10];
static tfa_lock_t profile_lock = TFA_LOCK_INIT;
static char profile_path[TFA_OPT_STR_MAX + 128];
_Static_assert(sizeof(handed_profile_path) == sizeof(profile_path), "copied into each other");
/* The file a failed write was at, for its message. */
static char failed_path[sizeof(profile_path) + 8];
/*
 * A snapshot written from a signal handler (core/remote.c): the code it
 * interrupted may hold the loader's lock, so the module map is not refreshed
 * (each stack's modules were added when the stack was first seen).
 */
static TFA_TLS bool writing_in_handler;

/* Keeps a file name safe: letters, digits, '.', '_' and '-'. */
static void
sanitize(char *dst, size_t size, const char *src)
{
	size_t n = 0;

	for (; *src != '\0' && n + 1 < size; src++) {
		char c = *src;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
			  || c == '.' || c == '_' || c == '-';
		dst[n++] = ok ? c : '_';
	}
	if (n == 0)
		dst[n++] = 'x';
	dst[n] = '\0';
}

/*
 * Where the profile's file is: profile_path names it for messages and for
 * `tfalloc snapshot`; the system calls take profile_name relative to
 * profile_at, which is AT_FDCWD (profile_name is then profile_path) or the
 * descriptor of the user's directory (core/handoff.h).
 */
static int profile_at = AT_FDCWD;
static const char *profile_name = profile_path;

/*
 * Whether profile_at still names the directory the file was made in: a
 * program may close its descriptors, and open a directory of its own under
 * the number.
 */
static bool
profile_at_ok(void)
{
	return profile_at == AT_FDCWD
	       || (profile_at == tfa_handoff_user_dir.fd && tfa_kept_fd_ours(&tfa_handoff_user_dir));
}

/* Creates the profile's file in dir (at: its descriptor, or AT_FDCWD).  Returns the fd or -errno. */
static int
create_profile_in(int at, const char *dir, const char *comm)
{
	size_t dir_len = strlen(dir);

	profile_at = at;
	profile_name = at == AT_FDCWD ? profile_path : profile_path + dir_len + 1;
	for (int attempt = 0; attempt < 100; attempt++) {
		if (attempt == 0)
			tfa_snprintf(profile_path, sizeof(profile_path), "%s/tfalloc.%s.%d.prof", dir, comm,
				     (int)proc.pid);
		else
			tfa_snprintf(profile_path, sizeof(profile_path), "%s/tfalloc.%s.%d.%d.prof", dir, comm,
				     (int)proc.pid, attempt);
		int fd = openat(at, profile_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/*
 * Reserves the profile's name: creates it exclusively, never through a
 * symlink, and keeps the name in profile_path.  A process whose user may not
 * write the output directory (a program executed after its process dropped
 * root) writes in the directory its former self made for its user
 * (core/handoff.h); the name of the first failure is kept for the message
 * when that fails too.  Returns the fd or -errno.
 */
static int
create_profile_file(void)
{
	char comm[64];

	sanitize(comm, sizeof(comm), proc.comm);
	int fd = create_profile_in(AT_FDCWD, proc.outdir, comm);
	if (fd != -EACCES || !tfa_kept_fd_ours(&tfa_handoff_user_dir))
		return fd;
	char first[sizeof(profile_path)], dir[sizeof(profile_path)];
	memcpy(first, profile_path, sizeof(first));
	tfa_snprintf(dir, sizeof(dir), "%s/uid-%u", proc.outdir, (unsigned)geteuid());
	int alt = create_profile_in(tfa_handoff_user_dir.fd, dir, comm);
	if (alt >= 0)
		return alt;
	memcpy(profile_path, first, sizeof(profile_path));
	profile_at = AT_FDCWD;
	profile_name = profile_path;
	return fd;
}

/*
 * The profile's file kept before the process changed its credentials or
 * root (tfa_shim_before_credentials; tfa_handoff_profile, core/handoff.h).
 * A process that dropped root had "no profile: cannot write ...: Permission
 * denied" in the directory it could write at its start, and a leak gate
 * passed it, its leaks unseen.
 */
#define kept_profile tfa_handoff_profile

void
tfa_shim_before_credentials(uid_t new_euid)
{
	int saved_errno = errno;

	/* A vfork child (its own pid, its parent's memory) changes nothing of the parent's. */
	if (tfa_shim_state() != TFA_SHIM_READY || getpid() != proc.pid)
		return;
	tfa_log_keep(); /* errno kept */
	if (!opts.profile)
		return;
	if (new_euid != (uid_t)-1 && new_euid != geteuid())
		tfa_handoff_prepare_user_dir(proc.outdir, new_euid);
	/*
	 * No file yet: a snapshot makes it, a whole profile, so that a process
	 * killed later leaves that (as a periodic snapshot would), not an empty
	 * file under the profile's name.
	 */
	if (__atomic_load_n(&profile_path[0], __ATOMIC_RELAXED) == '\0'
	    && tfa_shim_write_profile(TFA_END_RUNNING, 0) != 0)
		profile_path[0] = '\0'; /* said once, as a failing snapshot is; the exit tries again */
	int cancel = tfa_cancel_off();
	tfa_guard_enter();
	/* A profile another thread writes meanwhile is waited for (set*id are no calls of the shim's). */
	tfa_lock(&profile_lock);
	if (!tfa_kept_fd_ours(&kept_profile) && profile_path[0] != '\0' && profile_at_ok()) {
		int fd = openat(profile_at, profile_name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0)
			tfa_kept_fd_take(&kept_profile, fd);
	}
	/* The leak scan's roots, where /proc will not be there (a chroot). */
	tfa_leak_keep_maps();
	tfa_unlock(&profile_lock);
	tfa_guard_exit();
	tfa_cancel_restore(cancel);
	errno = saved_errno;
}

static void
write_stack_visit(void *arg, uint32_t id, const uintptr_t *pcs, unsigned depth)
{
	tfa_pw_t *w = arg;

	if (tfa_pw_room(w) < 8 + (size_t)depth * 8) {
		tfa_pw_end(w);
		tfa_pw_begin(w, TFA_REC_STACKS);
	}
	tfa_pw_u32(w, id);
	tfa_pw_u32(w, depth);
	for (unsigned i = 0; i < depth; i++)
		tfa_pw_u64(w, pcs[i]);
}

/* The stack table's records being written: the type of the one open (0: none). */
struct tree_write {
	tfa_pw_t *w;
	uint32_t type;
};

/* Two LEB128 numbers of 10 bytes at most. */
#define TREE_ENTRY_MAX 20

/* An entry of a TFA_REC_STACK_NODES or _LEAVES record; a record starts with the number of its first. */
static void
tree_entry(struct tree_write *tw, uint32_t type, uint32_t number, uint64_t ref, uint64_t pc, uint64_t ref_pc)
{
	if (tw->type != type || tfa_pw_room(tw->w) < TREE_ENTRY_MAX) {
		if (tw->type != 0)
			tfa_pw_end(tw->w);
		tfa_pw_begin(tw->w, type);
		tfa_pw_u32(tw->w, number);
		tw->type = type;
	}
	tfa_pw_uleb(tw->w, ref);
	tfa_pw_zigzag(tw->w, (int64_t)(pc - ref_pc));
}

static void
write_node_visit(void *arg, uint32_t no, uintptr_t pc, uint32_t parent, uintptr_t parent_pc)
{
	tree_entry(arg, TFA_REC_STACK_NODES, no, no - parent, pc, parent_pc);
}

static void
write_leaf_visit(void *arg, uint32_t id, uintptr_t pc, uint32_t parent, uintptr_t parent_pc)
{
	tree_entry(arg, TFA_REC_STACK_LEAVES, id, parent, pc, parent_pc);
}

/* The TFA_REC_SITES record being written: open, and the last site's stack id in it. */
struct site_visit {
	tfa_pw_t *w;
	const char *device;
	bool open;
	uint32_t last;
};

/* A site's entry: three LEB128 numbers for its id and count, 10 bytes each for its figures. */
#define SITE_ENTRY_MAX (3 * 10 + TFA_SITEF_FIELD_COUNT * 10)

static void
write_site_visit(void *arg, uint32_t stack_id, const tfa_site_t *site)
{
	struct site_visit *v = arg;
	tfa_pw_t *w = v->w;
	uint64_t f[TFA_SITEF_FIELD_COUNT] = {
		[TFA_SITEF_NUM_ALLOCS] = site->allocs,
		[TFA_SITEF_TOTAL_BYTES] = site->total_bytes,
		[TFA_SITEF_BYTES_IN_USE] = (uint64_t)TFA_MAX(site->in_use_bytes, 0),
		[TFA_SITEF_BLOCKS_IN_USE] = (uint64_t)TFA_MAX(site->in_use_blocks, 0),
		[TFA_SITEF_BYTES_AT_PEAK] = (uint64_t)TFA_MAX(site->peak_bytes, 0),
	};

	if (!v->open || tfa_pw_room(w) < SITE_ENTRY_MAX) {
		if (v->open)
			tfa_pw_end(w);
		tfa_pw_begin(w, TFA_REC_SITES);
		tfa_pw_str(w, v->device);
		v->open = true;
		v->last = 0;
	}
	tfa_pw_uleb(w, stack_id - v->last);
	v->last = stack_id;
	tfa_pw_uleb(w, TFA_SITEF_FIELD_COUNT);
	for (unsigned i = 0; i < TFA_SITEF_FIELD_COUNT; i++)
		tfa_pw_uleb(w, f[i]);
}

/* The sites of one tracker, device's. */
static void
write_sites(tfa_pw_t *w, tfa_sites_t *sites, const char *device, int64_t peak, int64_t in_use)
{
	struct site_visit v = { .w = w, .device = device };

	tfa_sites_foreach(sites, peak, in_use, write_site_visit, &v);
	if (v.open)
		tfa_pw_end(w);
}

/* How stacks were recorded, the module map, the stack table and the sites. */
static void
write_stack_records(tfa_pw_t *w, uint32_t end_reason, const tfa_allocator_stats_t *st)
{
	tfa_stacks_mode_t mode = __atomic_load_n(&stacks.mode, __ATOMIC_ACQUIRE);

	tfa_pw_begin(w, TFA_REC_CONFIG);
	tfa_pw_u32(w, (uint32_t)mode);
	tfa_pw_u32(w, stacks.depth);
	tfa_pw_u64(w, stacks.sample_bytes);
	tfa_pw_u64(w, __atomic_load_n(&stacks.truncated, __ATOMIC_RELAXED));
	tfa_pw_u32(w, stacks.max);
	tfa_pw_u64(w, tfa_ptr_table_bytes(&process_table));
	tfa_pw_u64(w, tfa_stack_table_bytes(&tfa_process_stacks) + tfa_sites_bytes(&process_sites));
	tfa_pw_u32(w, sample_only ? TFA_PROF_TRACK_SAMPLED : TFA_PROF_TRACK_ALL);
	tfa_pw_u64(w, tfa_ptr_table_peak_bytes(&process_table));
	tfa_pw_end(w);
	if (mode == TFA_STACKS_NONE)
		return;
	/* The loader's lock is no place for a signal handler. */
	if (end_reason != TFA_END_SIGNAL && !writing_in_handler)
		(void)tfa_modules_refresh(tfa_stack_table_count(&tfa_process_stacks));
	for (const tfa_module_t *m = tfa_modules_first(); m != NULL; m = m->next) {
		tfa_pw_begin(w, TFA_REC_MODULE);
		tfa_pw_u64(w, m->bias);
		tfa_pw_u64(w, m->start);
		tfa_pw_u64(w, m->end);
		tfa_pw_u32(w, m->seen_at);
		tfa_pw_u32(w, __atomic_load_n(&m->gone, __ATOMIC_ACQUIRE) ? m->gone_at
									  : TFA_PROF_GONE_NEVER);
		tfa_pw_str(w, m->path);
		tfa_pw_bytes(w, m->build_id, m->build_id_len);
		tfa_pw_end(w);
	}
	struct tree_write tw = { .w = w };
	if (tfa_stack_table_foreach_tree(&tfa_process_stacks, write_node_visit, write_leaf_visit, &tw)) {
		if (tw.type != 0)
			tfa_pw_end(w);
	} else {
		/* No page for the scratch: every stack whole, as before the trie's records. */
		tfa_pw_begin(w, TFA_REC_STACKS);
		tfa_stack_table_foreach(&tfa_process_stacks, write_stack_visit, w);
		tfa_pw_end(w);
	}
	write_sites(w, &process_sites, "cpu", st->peak_bytes_in_use, st->bytes_in_use);
	for (unsigned i = 0; i + 1 < TFA_DEVCODES; i++) {
		unsigned c = tfa_devcode_at(i);
		tfa_tracking_allocator_t *ta = tfa_device_tracker_if_used(c);
		tfa_allocator_stats_t dst;
		if (ta == NULL || ta->sites == NULL)
			continue;
		tfa_tracking_allocator_get_stats(ta, &dst);
		write_sites(w, ta->sites, tfa_devcode_name(c), dst.peak_bytes_in_use, dst.bytes_in_use);
	}
}

#define TIMELINE_POINT_BYTES 36u

/* The series, with a last point for the figures of this profile. */
static void
write_timeline_records(tfa_pw_t *w, const tfa_allocator_stats_t *st)
{
	tfa_lock(&timeline_lock);
	if (timeline.start_ns != 0)
		tfa_timeline_add(&timeline, tfa_monotonic_ns(), (uint64_t)st->bytes_in_use,
				 (uint64_t)st->allocated_bytes_in_use, tfa_rss_bytes(),
				 (uint64_t)st->peak_bytes_in_use,
				 (uint64_t)st->peak_allocated_bytes_in_use, true);
	for (size_t i = 0; i < timeline.n;) {
		tfa_pw_begin(w, TFA_REC_TIMELINE);
		tfa_pw_u64(w, timeline.interval_ns);
		for (; i < timeline.n && tfa_pw_room(w) >= TIMELINE_POINT_BYTES; i++) {
			const tfa_timeline_point_t *p = &timeline.pts[i];
			tfa_pw_u64(w, p->t_ns);
			tfa_pw_u64(w, p->bytes_in_use);
			tfa_pw_u64(w, p->allocated_bytes);
			tfa_pw_u64(w, p->rss_bytes);
			tfa_pw_u32(w, p->flags);
		}
		tfa_pw_end(w);
	}
	tfa_unlock(&timeline_lock);
}

/* One DEVICE record per other device something was allocated on (core/devices.h). */
static void
write_device_records(tfa_pw_t *w)
{
	for (unsigned i = 0; i + 1 < TFA_DEVCODES; i++) {
		unsigned c = tfa_devcode_at(i);
		tfa_tracking_allocator_t *ta = tfa_device_tracker_if_used(c);
		tfa_allocator_stats_t d;
		if (ta == NULL)
			continue;
		tfa_tracking_allocator_get_stats(ta, &d);
		uint64_t f[TFA_DEV_FIELD_COUNT] = {
			[TFA_DEV_NUM_ALLOCS] = (uint64_t)d.num_allocs,
			[TFA_DEV_NUM_FREES] = (uint64_t)d.num_frees,
			[TFA_DEV_NUM_REALLOCS] = (uint64_t)d.num_reallocs,
			[TFA_DEV_BYTES_IN_USE] = (uint64_t)d.bytes_in_use,
			[TFA_DEV_PEAK_BYTES_IN_USE] = (uint64_t)d.peak_bytes_in_use,
			[TFA_DEV_LARGEST_ALLOC_SIZE] = (uint64_t)d.largest_alloc_size,
			[TFA_DEV_TOTAL_BYTES] = (uint64_t)d.total_bytes,
			[TFA_DEV_BYTES_LIMIT] = (uint64_t)d.bytes_limit,
			[TFA_DEV_ALLOCATED_BYTES_IN_USE] = (uint64_t)d.allocated_bytes_in_use,
			[TFA_DEV_PEAK_ALLOCATED_BYTES_IN_USE] = (uint64_t)d.peak_allocated_bytes_in_use,
			[TFA_DEV_TOTAL_ALLOCATED_BYTES] = (uint64_t)d.total_allocated_bytes,
			[TFA_DEV_SHIM_OVERHEAD_BYTES] = 0,
			[TFA_DEV_PEAK_BLOCKS_IN_USE] = (uint64_t)d.peak_blocks_in_use,
		};
		tfa_pw_begin(w, TFA_REC_DEVICE);
		tfa_pw_str(w, tfa_devcode_name(c));
		tfa_pw_str(w, tfa_allocator_name(ta->wrapper.wrapped));
		tfa_pw_counts(w, f, TFA_DEV_FIELD_COUNT);
		tfa_pw_end(w);
	}
}

static void
write_records(tfa_pw_t *w, uint32_t end_reason, int32_t exit_code, const tfa_allocator_stats_t *st,
	      struct leak_walk *leaks)
{
	tfa_pw_begin(w, TFA_REC_PROCESS);
	tfa_pw_u32(w, (uint32_t)proc.pid);
	tfa_pw_u32(w, (uint32_t)proc.ppid);
	tfa_pw_u64(w, proc.start_ns);
	/* A snapshot's end is when it was written: how much of the run it covers. */
	tfa_pw_u64(w, now_ns());
	tfa_pw_u32(w, end_reason);
	tfa_pw_u32(w, (uint32_t)exit_code);
	tfa_pw_u32(w, proc.flags | (cpu_tracker.degraded ? TFA_PROC_FLAG_DEGRADED : 0)
			      | (__atomic_load_n(&tfa_process_stacks.starved, __ATOMIC_RELAXED)
					 ? TFA_PROC_FLAG_STACKS_LOST
					 : 0));
	tfa_pw_str(w, proc.command);
	tfa_pw_str(w, proc.exe);
	tfa_pw_str(w, proc.comm);
	tfa_pw_str(w, TFA_VERSION);
	tfa_pw_end(w);

	uint64_t dev[TFA_DEV_FIELD_COUNT] = {
		[TFA_DEV_NUM_ALLOCS] = (uint64_t)st->num_allocs,
		[TFA_DEV_NUM_FREES] = (uint64_t)st->num_frees,
		[TFA_DEV_NUM_REALLOCS] = (uint64_t)st->num_reallocs,
		[TFA_DEV_BYTES_IN_USE] = (uint64_t)st->bytes_in_use,
		[TFA_DEV_PEAK_BYTES_IN_USE] = (uint64_t)st->peak_bytes_in_use,
		[TFA_DEV_LARGEST_ALLOC_SIZE] = (uint64_t)st->largest_alloc_size,
		[TFA_DEV_TOTAL_BYTES] = (uint64_t)st->total_bytes,
		[TFA_DEV_BYTES_LIMIT] = (uint64_t)st->bytes_limit,
		[TFA_DEV_ALLOCATED_BYTES_IN_USE] = (uint64_t)st->allocated_bytes_in_use,
		[TFA_DEV_PEAK_ALLOCATED_BYTES_IN_USE] = (uint64_t)st->peak_allocated_bytes_in_use,
		[TFA_DEV_TOTAL_ALLOCATED_BYTES] = (uint64_t)st->total_allocated_bytes,
		[TFA_DEV_SHIM_OVERHEAD_BYTES] = tfa_arena_mapped_bytes(),
		[TFA_DEV_PEAK_BLOCKS_IN_USE] = (uint64_t)st->peak_blocks_in_use,
		[TFA_DEV_LEAK_SCAN_BYTES] = leaks != NULL ? leaks->scanned : 0,
	};
	tfa_pw_begin(w, TFA_REC_DEVICE);
	tfa_pw_str(w, "cpu");
	tfa_pw_str(w, tfa_allocator_name(cpu_tracker.wrapper.wrapped));
	tfa_pw_counts(w, dev, TFA_DEV_FIELD_COUNT);
	tfa_pw_end(w);
	write_device_records(w);
	/* The figures alone (tfa_shim_write_stats): no stacks, series, leaks or errors. */
	if (leaks == NULL) {
		tfa_control_write_records(w);
		return;
	}

	write_stack_records(w, end_reason, st);
	write_timeline_records(w, st);
	tfa_devices_write_timelines(w);
	tfa_control_write_records(w);

	size_t ngroups = leaks->ngroups;
	for (size_t i = 0; i < ngroups + TFA_ARRAY_SIZE(leaks->overflow); i++) {
		const struct leak_group *g = i < ngroups ? &leaks->groups[i] : &leaks->overflow[i - ngroups];
		if (g->blocks == 0)
			continue;
		uint64_t f[TFA_LEAKF_FIELD_COUNT] = {
			[TFA_LEAKF_BYTES] = g->bytes,
			[TFA_LEAKF_BLOCKS] = g->blocks,
			[TFA_LEAKF_ALLOCATED_BYTES] = g->allocated,
			[TFA_LEAKF_SAMPLE_ADDRESS] = g->sample,
			[TFA_LEAKF_RESOURCE] = g->tag,
			[TFA_LEAKF_EST_BYTES] = (uint64_t)(g->est_bytes + 0.5),
			[TFA_LEAKF_EST_BLOCKS] = (uint64_t)(g->est_blocks + 0.5),
		};
		tfa_pw_begin(w, TFA_REC_LEAK);
		tfa_pw_str(w, tfa_devcode_name(g->device));
		tfa_pw_u32(w, g->stack_id);
		tfa_pw_u32(w, g->kind);
		tfa_pw_counts(w, f, TFA_LEAKF_FIELD_COUNT);
		tfa_pw_end(w);
	}

	uint64_t totals[TFA_ERRC_FIELD_COUNT];
	char detail[160];
	tfa_lock(&errors_lock);
	memcpy(totals, error_totals, sizeof(totals));
	for (size_t i = 0; i < nerror_rows; i++) {
		const struct error_row *row = &error_rows[i];
		if (row->kind == TFA_ERR_MISMATCHED_FREE)
			tfa_snprintf(detail, sizeof(detail), "allocated by %s, released by %s",
				     kind_call(row->made_by, true), kind_call(row->freed_by, false));
		else
			tfa_snprintf(detail, sizeof(detail), "%s of a block %s", kind_call(row->freed_by, false),
				     row->kind == TFA_ERR_DOUBLE_FREE ? "already freed"
								       : "tfalloc did not hand out");
		tfa_pw_begin(w, TFA_REC_ERROR);
		tfa_pw_u32(w, row->kind);
		tfa_pw_u64(w, row->address);
		tfa_pw_u32(w, row->stack_id);
		tfa_pw_u32(w, row->alloc_stack_id);
		tfa_pw_u64(w, row->count);
		tfa_pw_str(w, detail);
		tfa_pw_end(w);
	}
	tfa_unlock(&errors_lock);
	tfa_pw_begin(w, TFA_REC_ERROR_TOTALS);
	tfa_pw_counts(w, totals, TFA_ERRC_FIELD_COUNT);
	tfa_pw_end(w);
}

/* One line per other device something was allocated on (the first line's leaks include theirs). */
static void
print_device_summaries(const struct leak_walk *leaks)
{
	for (unsigned i = 0; i + 1 < TFA_DEVCODES; i++) {
		unsigned c = tfa_devcode_at(i);
		tfa_tracking_allocator_t *ta = tfa_device_tracker_if_used(c);
		tfa_allocator_stats_t d;
		uint64_t bytes = 0, blocks = 0;
		char peak[32], total[32], leaked[32];
		if (ta == NULL)
			continue;
		tfa_tracking_allocator_get_stats(ta, &d);
		for (size_t k = 0; k < leaks->ngroups; k++) {
			const struct leak_group *g = &leaks->groups[k];
			if (g->blocks != 0 && g->device == c) {
				bytes += g->bytes;
				blocks += g->blocks;
			}
		}
		for (size_t k = 0; k < TFA_ARRAY_SIZE(leaks->overflow); k++) {
			if (leaks->overflow[k].blocks != 0 && leaks->overflow[k].device == c) {
				bytes += leaks->overflow[k].bytes;
				blocks += leaks->overflow[k].blocks;
			}
		}
		tfa_format_bytes(peak, sizeof(peak), (uint64_t)d.peak_bytes_in_use);
		tfa_format_bytes(total, sizeof(total), (uint64_t)d.total_bytes);
		tfa_format_bytes(leaked, sizeof(leaked), bytes);
		tfa_log("%s: %s: peak %s in use, %lld allocations (%s), %llu leaked blocks (%s)", proc.comm,
			tfa_devcode_name(c), peak, (long long)d.num_allocs, total,
			(unsigned long long)blocks, leaked);
	}
}

static void
print_summary(const tfa_allocator_stats_t *st, const struct leak_walk *leaks, int write_err)
{
	char peak[32], total[32], leaked[32], where[TFA_OPT_STR_MAX + 160];
	uint64_t nerr = error_totals[TFA_ERRC_DOUBLE_FREE] + error_totals[TFA_ERRC_INVALID_FREE]
			+ error_totals[TFA_ERRC_MISMATCHED_FREE];

	tfa_format_bytes(peak, sizeof(peak), (uint64_t)st->peak_bytes_in_use);
	tfa_format_bytes(total, sizeof(total), (uint64_t)st->total_bytes);
	/* The cpu's figures: the CUDA devices have lines of their own. */
	uint64_t leaked_blocks = leaks->blocks - leaks->dev_blocks;
	tfa_format_bytes(leaked, sizeof(leaked), leaks->bytes - leaks->dev_bytes);
	/* With classes: how much of it memcheck would call lost. */
	char classes[160] = "";
	if (leaks->classified && leaked_blocks != 0) {
		char d[32], i[32], p[32], r[32];
		tfa_format_bytes(d, sizeof(d), leaks->class_bytes[TFA_LEAK_DEFINITE]
						   - leaks->dev_class_bytes[TFA_LEAK_DEFINITE]);
		tfa_format_bytes(i, sizeof(i), leaks->class_bytes[TFA_LEAK_INDIRECT]
						   - leaks->dev_class_bytes[TFA_LEAK_INDIRECT]);
		tfa_format_bytes(p, sizeof(p), leaks->class_bytes[TFA_LEAK_POSSIBLE]
						   - leaks->dev_class_bytes[TFA_LEAK_POSSIBLE]);
		tfa_format_bytes(r, sizeof(r), leaks->class_bytes[TFA_LEAK_REACHABLE]
						   - leaks->dev_class_bytes[TFA_LEAK_REACHABLE]);
		tfa_snprintf(classes, sizeof(classes), ": %s definitely lost, %s indirectly, %s possibly, %s reachable",
			     d, i, p, r);
	}
	if (!opts.profile)
		where[0] = '\0';
	else if (write_err != 0)
		tfa_snprintf(where, sizeof(where), "; no profile: cannot write %s: %s", failed_path,
			     strerrordesc_np(-write_err) != NULL ? strerrordesc_np(-write_err) : "error");
	else
		tfa_snprintf(where, sizeof(where), "; profile %s", profile_path);
	char errors[48] = "";
	if (nerr != 0)
		tfa_snprintf(errors, sizeof(errors), ", %llu memory error%s", (unsigned long long)nerr,
			     nerr == 1 ? "" : "s");
	if (sample_only) {
		/* A sample: what was live at exit is an estimate, and no proof of anything. */
		char est[32];
		tfa_format_bytes(est, sizeof(est), (uint64_t)(leaks->est_bytes + 0.5));
		tfa_log("%s: peak %s in use (estimated), %lld allocations (%s), about %llu blocks (%s) "
			"live at exit, estimated from %llu sampled%s%s",
			proc.comm, peak, (long long)st->num_allocs, total,
			(unsigned long long)(leaks->est_blocks + 0.5), est,
			(unsigned long long)leaked_blocks, errors, where);
		print_device_summaries(leaks);
		return;
	}
	tfa_log("%s: peak %s in use, %lld allocations (%s), %llu leaked blocks (%s%s)%s%s", proc.comm,
		peak, (long long)st->num_allocs, total, (unsigned long long)leaked_blocks, leaked,
		classes, errors, where);
	print_device_summaries(leaks);
}

/* A periodic snapshot could not be written: said once, not at every interval. */
static bool snapshot_failed;


/* Writes the records into fd and closes it.  Returns 0 or -errno. */
static int
write_profile_fd(int fd, uint32_t end_reason, int32_t exit_code, const tfa_allocator_stats_t *st,
		 struct leak_walk *leaks)
{
	tfa_pw_t w;

	tfa_pw_open(&w, fd, out_buf, sizeof(out_buf), rec_buf, sizeof(rec_buf));
	write_records(&w, end_reason, exit_code, st, leaks);
	int err = tfa_pw_finish(&w, end_reason != TFA_END_RUNNING);
	if (close(fd) != 0 && err == 0)
		err = -errno;
	return err;
}

/* The profile written in place into the kept file (kept_profile).  0 or -errno. */
static int
write_in_kept(uint32_t end_reason, int32_t exit_code, const tfa_allocator_stats_t *st, struct leak_walk *leaks)
{
	int kept = tfa_kept_fd_dup(&kept_profile);

	if (kept < 0)
		return -EBADF;
	if (ftruncate(kept, 0) != 0 || lseek(kept, 0, SEEK_SET) != 0) {
		int err = -errno;
		close(kept);
		return err;
	}
	return write_profile_fd(kept, end_reason, exit_code, st, leaks);
}

/*
 * Writes the profile: the first time straight into the name
 * create_profile_file reserves (nothing is there to replace: a reader that
 * comes meanwhile finds a file cut short, as one of a process killed while
 * writing, and no END record); every later snapshot into NAME.tmp (created
 * exclusively, never through a symlink) renamed over NAME, so the file under
 * NAME is always a whole profile, the last one written.  A first write
 * through NAME.tmp as well cost every process an open and a rename over the
 * empty file, which ext4 follows with a write-back of the new data
 * (auto_da_alloc): 0.1 to 0.4 ms at each exit.  Returns 0 or -errno.
 */
static int
write_profile_file(uint32_t end_reason, int32_t exit_code, const tfa_allocator_stats_t *st,
		   struct leak_walk *leaks)
{
	char tmp[sizeof(profile_path) + 8];
	int fd, err;

	if (profile_path[0] == '\0') {
		fd = create_profile_file();
		if (fd < 0) {
			/* The name is free for the next try; the message names what failed. */
			memcpy(failed_path, profile_path, sizeof(profile_path));
			profile_path[0] = '\0';
			/*
			 * The file its image before the exec kept, handed to this one:
			 * this image's profile in place of that one's.
			 */
			if (handed_profile_path[0] != '\0' && write_in_kept(end_reason, exit_code, st, leaks) == 0) {
				memcpy(profile_path, handed_profile_path, sizeof(profile_path));
				profile_at = AT_FDCWD;
				profile_name = profile_path;
				return 0;
			}
			return fd;
		}
		memcpy(failed_path, profile_path, sizeof(profile_path));
		err = write_profile_fd(fd, end_reason, exit_code, st, leaks);
		if (err != 0) {
			/* No file cut short under the name (a reader would take it for a killed process's). */
			if (profile_at_ok())
				unlinkat(profile_at, profile_name, 0);
			profile_path[0] = '\0';
		}
		return err;
	}
	tfa_snprintf(tmp, sizeof(tmp), "%s.tmp", profile_path);
	/* The same suffix of tmp as of profile_path. */
	const char *tmp_name = tmp + (profile_name - profile_path);
	memcpy(failed_path, tmp, sizeof(failed_path));
	if (profile_at_ok()) {
		fd = openat(profile_at, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	} else {
		fd = -1;
		errno = EBADF; /* the directory's descriptor is gone: the kept file, or nothing */
	}
	if (fd < 0 && errno == EEXIST) {
		/* Left by a write this process did not finish (it was killed in the middle). */
		unlinkat(profile_at, tmp_name, 0);
		fd = openat(profile_at, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		err = -errno;
	} else {
		err = write_profile_fd(fd, end_reason, exit_code, st, leaks);
		if (err == 0 && renameat(profile_at, tmp_name, profile_at, profile_name) != 0)
			err = -errno;
		if (err != 0)
			unlinkat(profile_at, tmp_name, 0);
	}
	if (err == 0) {
		/*
		 * The kept descriptor's file is the one just replaced: keep the new
		 * one, or none (a later profile written into the old file would be
		 * lost, and said written).
		 */
		if (tfa_kept_fd_ours(&kept_profile)) {
			int now = openat(profile_at, profile_name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
			if (now >= 0)
				tfa_kept_fd_take(&kept_profile, now);
			else
				tfa_kept_fd_drop(&kept_profile);
		}
		return 0;
	}
	/* The directory is no longer ours to write (credentials changed): the file itself, in place. */
	return write_in_kept(end_reason, exit_code, st, leaks) == 0 ? 0 : err;
}

#define FDS_ROOM 16 /* descriptors a profile opens at once, with room to spare */

/*
 * A process that used up its file descriptors (RLIMIT_NOFILE's soft limit)
 * had no profile: "no profile: cannot write ...: Too many open files".  When
 * no descriptor can be had, the soft limit is raised by a few, up to the hard
 * one, for as long as the profile takes (its file, /proc reads), and put back
 * after (what is open stays open); where it cannot be raised, the reserve
 * taken at init is closed meanwhile, and taken again after.  A program with
 * descriptors to spare keeps its limit and reserve untouched: a descriptor
 * is tried first, and given back at once.  Returns what was done
 * (FDS_RAISED: *saved is the program's limit).
 */
enum { FDS_RAISED = 1, FDS_RESERVE = 2 };

static int
fds_make_room(struct rlimit *saved)
{
	int saved_errno = errno;
	int made = 0;
	int fd = eventfd(0, EFD_CLOEXEC);

	if (fd >= 0) {
		close(fd);
	} else if (errno == EMFILE) {
		if (getrlimit(RLIMIT_NOFILE, saved) == 0 && saved->rlim_cur < saved->rlim_max) {
			struct rlimit more = *saved;
			more.rlim_cur = saved->rlim_max - saved->rlim_cur > FDS_ROOM ? saved->rlim_cur + FDS_ROOM
										      : saved->rlim_max;
			if (setrlimit(RLIMIT_NOFILE, &more) == 0)
				made |= FDS_RAISED;
		}
		if (!(made & FDS_RAISED) && tfa_fd_reserve_release())
			made |= FDS_RESERVE;
	}
	errno = saved_errno;
	return made;
}

/* What fds_make_room did, undone. */
static void
fds_give_back(int made, const struct rlimit *saved)
{
	int saved_errno = errno;

	if (made & FDS_RAISED)
		(void)setrlimit(RLIMIT_NOFILE, saved);
	if (made & FDS_RESERVE)
		tfa_fd_reserve_take();
	errno = saved_errno;
}

/*
 * A program that limits the size of the files it writes (RLIMIT_FSIZE:
 * `ulimit -f`, a sandbox) had no profile: "no profile: cannot write ...:
 * File too large".  For as long as the profile takes, the soft limit is
 * raised to the hard one, and the hard one lifted where the process may
 * (CAP_SYS_RESOURCE: root, outside most containers); then both are put back as
 * they were.  Returns whether *saved must be put back.
 */
static bool
fsize_make_room(struct rlimit *saved)
{
	int saved_errno = errno;
	bool made = false;

	if (getrlimit(RLIMIT_FSIZE, saved) == 0 && saved->rlim_cur != RLIM_INFINITY) {
		struct rlimit lifted = { RLIM_INFINITY, RLIM_INFINITY };
		struct rlimit to_hard = { saved->rlim_max, saved->rlim_max };
		made = setrlimit(RLIMIT_FSIZE, &lifted) == 0 || setrlimit(RLIMIT_FSIZE, &to_hard) == 0;
	}
	errno = saved_errno;
	return made;
}

int
tfa_shim_write_profile(uint32_t end_reason, int32_t exit_code)
{
	tfa_allocator_stats_t st;
	struct leak_walk leaks = { 0 };
	int err = 0;

	tfa_tls.in_shim++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	int cancel = tfa_cancel_off();
	tfa_guard_enter();
	tfa_lock(&profile_lock);
	/* A snapshot that lost the race to the final profile must not replace it. */
	if (end_reason == TFA_END_RUNNING && tfa_shim_state() != TFA_SHIM_READY) {
		tfa_unlock(&profile_lock);
		tfa_guard_exit();
		tfa_cancel_restore(cancel);
		tfa_tls.in_shim--;
		return 0;
	}
	struct rlimit nofile, fsize;
	int fds_made = fds_make_room(&nofile);
	bool fsize_made = fsize_make_room(&fsize);
	tfa_tracking_allocator_publish_self(&cpu_tracker);
	leak_groups_take(&leaks);
	/*
	 * Leak classes at the end only: a snapshot is taken while the program
	 * runs, and a signal handler is no place to read /proc and walk the
	 * loader's list.
	 */
	/* Sample-only: the unsampled blocks are unknown, no reachability can be told. */
	bool classify = opts.leak_classes && !sample_only && (end_reason == TFA_END_EXIT || end_reason == TFA_END_UNKNOWN);
	if (classify && final_ctx.stack_lo == 0)
		capture_final_context();
	if (!classify || !classify_leaks(&leaks)) {
		tfa_ptr_table_foreach(&process_table, leak_visit, &leaks);
		tfa_ptr_table_foreach(tfa_devices_table(), leak_visit, &leaks);
	}
	tfa_tracking_allocator_get_stats(&cpu_tracker, &st);

	if (opts.profile)
		err = write_profile_file(end_reason, exit_code, &st, &leaks);
	/* After exec the new image speaks for the process; snapshots speak only of failures. */
	if ((!opts.quiet && end_reason != TFA_END_EXEC && end_reason != TFA_END_RUNNING)
	    || (err != 0 && !snapshot_failed))
		print_summary(&st, &leaks, err);
	if (err != 0 && end_reason == TFA_END_RUNNING)
		snapshot_failed = true;
	leak_groups_give_back(&leaks);
	fds_give_back(fds_made, &nofile);
	if (fsize_made) {
		int saved_errno = errno;
		(void)setrlimit(RLIMIT_FSIZE, &fsize);
		errno = saved_errno;
	}
	tfa_unlock(&profile_lock);
	tfa_guard_exit();
	tfa_cancel_restore(cancel);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	tfa_tls.in_shim--;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	/* A program's handler deferred meanwhile (a snapshot, exec) runs now; a fatal signal is the caller's. */
	if (tfa_tls.in_shim == 0 && tfa_unlikely(tfa_tls.deferred != 0))
		release_deferred();
	return err;
}

int
tfa_shim_remote_snapshot(bool in_handler)
{
	shim_enter();
	writing_in_handler = in_handler;
	int err = tfa_shim_write_profile(TFA_END_RUNNING, 0);
	writing_in_handler = false;
	shim_exit();
	return err;
}

int
tfa_shim_write_stats(int fd)
{
	tfa_allocator_stats_t st;
	tfa_pw_t w;

	shim_enter();
	tfa_guard_enter();
	/* The writer's buffers are the profile's. */
	tfa_lock(&profile_lock);
	tfa_tracking_allocator_publish_self(&cpu_tracker);
	tfa_tracking_allocator_get_stats(&cpu_tracker, &st);
	tfa_pw_open(&w, fd, out_buf, sizeof(out_buf), rec_buf, sizeof(rec_buf));
	write_records(&w, TFA_END_RUNNING, 0, &st, NULL);
	int err = tfa_pw_finish(&w, false);
	tfa_unlock(&profile_lock);
	tfa_guard_exit();
	shim_exit();
	return err;
}

void
tfa_shim_on_fast_exit(int status)
{
	if (!take_final_write()) {
		wait_final_write(false);
		return;
	}
	capture_final_context();
	int err = final_write(TFA_END_EXIT, status);
	(void)err;
}

bool
tfa_shim_before_exec(void)
{
	if (!take_final_write())
		return false;
	int err = final_write(TFA_END_EXEC, 0);
	(void)err;
	return true;
}

void
tfa_shim_exec_failed(void)
{
	/* The process goes on: its profile is not final, and its name is free again. */
	int cancel = tfa_cancel_off();
	tfa_guard_enter();
	tfa_lock(&profile_lock);
	if (profile_path[0] != '\0' && profile_at_ok())
		unlinkat(profile_at, profile_name, 0);
	profile_path[0] = '\0';
	tfa_unlock(&profile_lock);
	tfa_guard_exit();
	tfa_cancel_restore(cancel);
	__atomic_store_n(&final_done, false, __ATOMIC_RELAXED);
	__atomic_store_n(&final_tid, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&shim_state, TFA_SHIM_READY, __ATOMIC_RELEASE);
}

/* The destructor writes only when exit() will not call on_exit_hook. */
void
tfa_shim_fini(void)
{
	if (proc.exit_hooked || !take_final_write())
		return;
	capture_final_context();
	int err = final_write(TFA_END_UNKNOWN, 0);
	(void)err;
}

/* ---- fatal signals ------------------------------------------------------------------------- */

/* Signals whose default action ends the process (SIGKILL cannot be caught). */
static const int fatal_signals[] = {
	SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGTRAP, SIGABRT, SIGBUS,    SIGFPE,    SIGUSR1, SIGSEGV,
	SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF,   SIGSYS,
};

/*
 * glibc's sigaction under its own name: the exported `sigaction` of this
 * library is the program's way in (tfa_shim_sigaction), not the shim's.
 */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *oldact);

/*
 * The signals tfalloc holds: the kernel has fatal_signal_handler for them,
 * and the current act says what the program asked for (SIG_DFL, or its own
 * handler, which fatal_signal_handler calls).  A program that sets SIG_DFL
 * again, or installs its handler after start, keeps its profile this way.
 * Written under sig_lock; the handler reads its signal's entry.  A new act
 * is written into the other of the two and then made current, so that a
 * handler running meanwhile (the signal held all along: no window where
 * tfalloc's handler meets an entry that says it is not held) reads a whole
 * one.
 */
static struct {
	bool held;
	uint8_t cur;
	struct sigaction acts[2];
} sigs[NSIG];

#define PROG_ACT(sig) (sigs[sig].acts[__atomic_load_n(&sigs[sig].cur, __ATOMIC_ACQUIRE)])

static void
set_prog_act(int sig, const struct sigaction *act)
{
	uint8_t next = sigs[sig].cur ^ 1;

	sigs[sig].acts[next] = *act;
	__atomic_store_n(&sigs[sig].cur, next, __ATOMIC_RELEASE);
}
static tfa_lock_t sig_lock = TFA_LOCK_INIT;

static bool
is_fatal_signal(int sig)
{
	for (size_t i = 0; i < TFA_ARRAY_SIZE(fatal_signals); i++)
		if (fatal_signals[i] == sig)
			return true;
	return false;
}

/* Ends the process with sig's default action, as if tfalloc were not there. */
static void
die_by(int sig, bool synchronous)
{
	struct sigaction dfl;
	sigset_t set;

	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigs[sig].held = false;
	__sigaction(sig, &dfl, NULL);
	/* A fault re-raises itself when the handler returns; a sent signal is sent again. */
	if (synchronous)
		return;
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
}

/*
 * Writing the profile takes 8 to 16 KiB of stack.  A program that set an
 * alternate stack of its own for its handlers (Rust does, in every thread:
 * 8 KiB) had tfalloc's handler run there too: it overflowed it, and the
 * process died of SIGSEGV instead of its signal, without a profile (SIGTERM
 * to a program with an alternate stack of 8 KiB: status 139).  The writer
 * moves to a stack of the shim's then: one for the process, as only the
 * thread that took the final write uses it.
 */
#define WRITER_STACK_BYTES ((size_t)64 << 10)
#define WRITER_STACK_ROOM  ((size_t)48 << 10) /* less left on an alternate stack: moved */

static char *writer_stack;
static ucontext_t writer_ctx, writer_back;
static int writer_sig;
static bool writer_synchronous;

/* The process ends from the writer's stack too: back on a small one, die_by's call could overflow it. */
static void
writer_on_stack(void)
{
	int err = final_write(TFA_END_SIGNAL, writer_sig);
	(void)err;
	die_by(writer_sig, writer_synchronous);
}

static bool
stack_short(void)
{
	stack_t cur;
	uintptr_t here = (uintptr_t)__builtin_frame_address(0);

	return sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_ONSTACK) != 0
	       && here - (uintptr_t)cur.ss_sp < WRITER_STACK_ROOM;
}

/*
 * The final profile for sig (or a wait for the thread writing it), then the
 * end by sig: die_by (for a fault, when the handler returns).
 */
static void
write_signal_profile_and_die(int sig, bool synchronous)
{
	if (!take_final_write()) {
		wait_final_write(false);
		die_by(sig, synchronous);
		return;
	}
	if (writer_stack != NULL && stack_short() && getcontext(&writer_ctx) == 0) {
		writer_ctx.uc_stack.ss_sp = writer_stack;
		writer_ctx.uc_stack.ss_size = WRITER_STACK_BYTES;
		writer_ctx.uc_link = &writer_back;
		writer_sig = sig;
		writer_synchronous = synchronous;
		makecontext(&writer_ctx, writer_on_stack, 0);
		/* Back here when writer_on_stack returns (uc_link): a fault, to be raised again. */
		if (swapcontext(&writer_back, &writer_ctx) == 0)
			return;
	}
	int err = final_write(TFA_END_SIGNAL, sig);
	(void)err;
	die_by(sig, synchronous);
}

/*
 * A program's handler for sig came while this thread is inside the shim (a
 * malloc, a free, fork): the backend and the shim's own records may be half
 * changed there, and a handler that allocates would meet them so (neither
 * glibc's malloc nor jemalloc is reentrant: a corrupt heap, or a deadlock on
 * a lock the interrupted call holds).  The signal is queued again to this
 * very thread with its siginfo and stays blocked (in the mask the kernel
 * restores when this handler returns) until the shim call ends, which
 * unblocks it: the kernel then delivers it with a frame of its own, as if it
 * had come a few instructions later.  false when it cannot be queued (a full
 * queue of real-time signals): the handler then runs at once, as it would
 * without tfalloc.
 */
static bool
defer_signal(int sig, siginfo_t *info, void *ucontext)
{
	ucontext_t *uc = ucontext;
	sigset_t set, old;

	if (uc == NULL || info == NULL || sig <= 0 || sig > 64)
		return false;
	sigemptyset(&set);
	sigaddset(&set, sig);
	/* Blocked first: with SA_NODEFER the signal queued below would come back at once. */
	if (pthread_sigmask(SIG_BLOCK, &set, &old) != 0)
		return false;
	/* To itself a thread may queue any siginfo, the kernel's own included. */
	if (syscall(SYS_rt_tgsigqueueinfo, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig,
		    info) != 0) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		return false;
	}
	sigaddset(&uc->uc_sigmask, sig);
	tfa_tls.deferred |= (uint64_t)1 << (sig - 1);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (tfa_tls.pending_signal == 0)
		tfa_tls.pending_signal = TFA_DEFERRED_PENDING;
	return true;
}

/* The shim call ended: the kernel delivers the deferred signals now. */
static void
release_deferred(void)
{
	uint64_t bits = tfa_tls.deferred;
	sigset_t set;

	sigemptyset(&set);
	for (int sig = 1; sig <= 64; sig++)
		if (bits & ((uint64_t)1 << (sig - 1)))
			sigaddset(&set, sig);
	tfa_tls.deferred = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static void
handle_pending_signal(void)
{
	int sig = tfa_tls.pending_signal;

	tfa_tls.pending_signal = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (tfa_tls.deferred != 0)
		release_deferred();
	if (sig == TFA_DEFERRED_PENDING)
		return;
	if (sig == TFA_REMOTE_PENDING) {
		/* A request of tfalloc snapshot or top came inside the call. */
		tfa_remote_serve_queue();
		return;
	}
	write_signal_profile_and_die(sig, false);
}

/* A fault of the thread's own instruction: its handler cannot wait (the instruction would fault again). */
static bool
is_fault(int sig, const siginfo_t *info)
{
	/* si_code > 0: the kernel's; SI_KERNEL too (a general protection fault is a SIGSEGV of it). */
	return info != NULL && info->si_code > 0
	       && (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP
		   || sig == SIGSYS);
}

static void
fatal_signal_handler(int sig, siginfo_t *info, void *ucontext)
{
	int saved_errno = errno;
	bool synchronous = info != NULL && info->si_code > 0 && sig != SIGTERM && sig != SIGINT
			   && sig != SIGHUP && sig != SIGQUIT && sig != SIGPIPE && sig != SIGALRM;

	if (sig > 0 && sig < NSIG && sigs[sig].held) {
		struct sigaction pa = PROG_ACT(sig);
		bool own_handler = (pa.sa_flags & SA_SIGINFO) != 0
				   || (pa.sa_handler != SIG_DFL && pa.sa_handler != SIG_IGN);
		if (own_handler && tfa_tls.in_shim != 0 && !is_fault(sig, info)
		    && defer_signal(sig, info, ucontext)) {
			errno = saved_errno;
			return;
		}
		if (own_handler) {
			/* The program's handler, as the kernel would have called it. */
			if (pa.sa_flags & SA_RESETHAND) {
				PROG_ACT(sig).sa_handler = SIG_DFL;
				PROG_ACT(sig).sa_flags &= ~(SA_SIGINFO | SA_RESETHAND);
			}
			errno = saved_errno;
			if (pa.sa_flags & SA_SIGINFO)
				pa.sa_sigaction(sig, info, ucontext);
			else
				pa.sa_handler(sig);
			return;
		}
	}
	if (!is_fatal_signal(sig)) {
		/* Not one that ends the process (a handler being replaced this instant): nothing to do. */
		errno = saved_errno;
		return;
	}
	if (tfa_tls.in_shim != 0 && !(synchronous && tfa_tls.walking != 0)) {
		if (synchronous) {
			/* A fault inside the shim itself: writing now could fault again. */
			die_by(sig, true);
		} else {
			tfa_tls.pending_signal = sig;
		}
		errno = saved_errno;
		return;
	}
	write_signal_profile_and_die(sig, synchronous);
	errno = saved_errno;
}

/* Catches only what would kill the process by default: handlers and SIG_IGN stay. */
static void
install_signal_handlers(void)
{
	/* Each thread's handler runs on an alternate stack (core/thread.h): a stack overflow keeps its profile. */
	__atomic_store_n(&tfa_thread_altstack_on, true, __ATOMIC_RELAXED);
	tfa_thread_altstack_self();
	/* The writer's stack when the program's alternate stack is too small (write_signal_profile_and_die). */
	writer_stack = tfa_thread_map_stack(WRITER_STACK_BYTES);
	for (size_t i = 0; i < TFA_ARRAY_SIZE(fatal_signals); i++) {
		struct sigaction old, sa;
		int sig = fatal_signals[i];
		if (__sigaction(sig, NULL, &old) != 0)
			continue;
		if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL)
			continue;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = fatal_signal_handler;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		set_prog_act(sig, &old);
		if (__sigaction(sig, &sa, NULL) == 0)
			sigs[sig].held = true;
	}
}

int
tfa_shim_sigaction(int sig, const struct sigaction *act, struct sigaction *oldact)
{
	if (tfa_remote_holds(sig))
		return tfa_remote_sigaction(act, oldact);
	if (!opts.catch_signals || tfa_shim_state() != TFA_SHIM_READY || sig <= 0 || sig >= NSIG
	    || sig == SIGKILL || sig == SIGSTOP)
		return __sigaction(sig, act, oldact);
	if (!is_fatal_signal(sig)) {
		/*
		 * Any other signal with a handler of the program is held too, so
		 * that the handler never runs inside a shim call (defer_signal).
		 * The default actions of these (ignore, stop, end without a
		 * profile) and one-shot handlers stay the kernel's.
		 */
		bool handler = act != NULL
			       && ((act->sa_flags & SA_SIGINFO) != 0
				   || (act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN))
			       && (act->sa_flags & SA_RESETHAND) == 0;
		if (act != NULL && !handler) {
			if (getpid() != proc.pid)
				return __sigaction(sig, act, oldact);
			struct sigaction prev;
			tfa_lock(&sig_lock);
			bool was_held = sigs[sig].held;
			if (was_held)
				prev = PROG_ACT(sig);
			/* The kernel first: until it has the new action, ours runs the old one. */
			int r = was_held ? __sigaction(sig, act, NULL) : __sigaction(sig, act, &prev);
			if (r == 0)
				sigs[sig].held = false;
			tfa_unlock(&sig_lock);
			if (r == 0 && oldact != NULL)
				*oldact = prev;
			return r;
		}
		if (act == NULL && !sigs[sig].held)
			return __sigaction(sig, act, oldact);
	}
	/*
	 * A vfork child shares the parent's memory: what it sets (python resets
	 * every handler there before exec) must not change the parent's table.
	 */
	if (getpid() != proc.pid)
		return __sigaction(sig, act, oldact);

	struct sigaction prev;
	int r = 0;
	tfa_lock(&sig_lock);
	if (sigs[sig].held)
		prev = PROG_ACT(sig);
	else
		r = __sigaction(sig, NULL, &prev);
	if (r == 0 && act != NULL) {
		bool ignore = (act->sa_flags & SA_SIGINFO) == 0 && act->sa_handler == SIG_IGN;
		if (ignore) {
			/* Nothing will end the process: the kernel has the program's wish. */
			r = __sigaction(sig, act, NULL);
			if (r == 0)
				sigs[sig].held = false;
		} else {
			struct sigaction ours;
			memset(&ours, 0, sizeof(ours));
			ours.sa_sigaction = fatal_signal_handler;
			/* Its mask and flags, but one-shot stays ours to emulate (prog_act). */
			ours.sa_mask = act->sa_mask;
			/*
			 * The shim's own work (the default action's profile) on the
			 * alternate stack, where a stack overflow leaves room for it;
			 * a program's handler where the program asked for it.
			 */
			bool dfl = (act->sa_flags & SA_SIGINFO) == 0 && act->sa_handler == SIG_DFL;
			ours.sa_flags = SA_SIGINFO | (dfl ? SA_ONSTACK : (act->sa_flags & SA_ONSTACK))
					| (act->sa_flags & (SA_RESTART | SA_NODEFER | SA_NOCLDSTOP | SA_NOCLDWAIT));
			set_prog_act(sig, act);
			r = __sigaction(sig, &ours, NULL);
			sigs[sig].held = sigs[sig].held || r == 0;
		}
	}
	tfa_unlock(&sig_lock);
	if (r == 0 && oldact != NULL)
		*oldact = prev;
	return r;
}

/* ---- fork ---------------------------------------------------------------------------------- */

void
tfa_shim_prefork(void)
{
	/* Held alone and briefly by sigaction: a child must not inherit it taken. */
	tfa_lock(&sig_lock);
	tfa_lock(&profile_lock);
	tfa_lock(&timeline_lock);
	tfa_lock(&errors_lock);
	tfa_lock(&quarantine_lock);
	tfa_control_prefork();
	tfa_stack_table_prefork(&tfa_process_stacks);
	tfa_modules_prefork();
	tfa_ptr_table_prefork(&process_table);
	tfa_devices_prefork();
	tfa_thread_prefork();
	tfa_arena_prefork();
	/* Anything this thread allocates until fork returns must not wait for these locks. */
	tfa_tls.holds_all_locks = 1;
	tfa_ptr_table_forking(true);
}

void
tfa_shim_postfork_parent(void)
{
	tfa_ptr_table_forking(false);
	tfa_tls.holds_all_locks = 0;
	tfa_arena_postfork_parent();
	tfa_thread_postfork_parent();
	tfa_devices_postfork_parent();
	tfa_ptr_table_postfork_parent(&process_table);
	tfa_modules_postfork_parent();
	tfa_stack_table_postfork_parent(&tfa_process_stacks);
	tfa_control_postfork_parent();
	tfa_unlock(&quarantine_lock);
	tfa_unlock(&errors_lock);
	tfa_unlock(&timeline_lock);
	tfa_unlock(&profile_lock);
	tfa_unlock(&sig_lock);
}

void
tfa_shim_postfork_child(void)
{
	tfa_ptr_table_forking(false);
	tfa_tls.holds_all_locks = 0;
	tfa_arena_postfork_child();
	tfa_thread_postfork_child();
	tfa_devices_postfork_child();
	tfa_ptr_table_postfork_child(&process_table);
	tfa_modules_postfork_child();
	tfa_stack_table_postfork_child(&tfa_process_stacks);
	tfa_control_postfork_child();
	tfa_lock_init(&quarantine_lock);
	tfa_lock_init(&errors_lock);
	tfa_lock_init(&profile_lock);
	/* Whether the child is registered for membarrier is the kernel's business: again. */
	tfa_ptr_table_init_barriers();
	/* The child has one thread: the fast path's single-thread accounting publishes at once
	 * and expects nothing pending in this thread's slot. */
	tfa_tracking_allocator_publish_self(&cpu_tracker);
	/* The child is a process of its own: its own identity and profile file. */
	proc.ppid = proc.pid;
	proc.pid = getpid();
	proc.start_ns = now_ns();
	proc.flags |= TFA_PROC_FLAG_FORKED;
	/* Its own file, its own series. */
	profile_path[0] = '\0';
	tfa_kept_fd_drop(&kept_profile);
	tfa_leak_drop_maps();
	snapshot_failed = false;
	/* Forked while its parent wrote the final profile: the parent's thread is not here to finish it. */
	final_tid = 0;
	final_done = tfa_shim_state() == TFA_SHIM_SHUTDOWN;
	tfa_lock_init(&timeline_lock);
	tfa_timeline_init(&timeline, tfa_monotonic_ns(), TIMELINE_FIRST_INTERVAL_NS);
	tfa_devices_set_time_origin(timeline.start_ns);
	if (next_flush_ns != 0)
		next_flush_ns = timeline.start_ns
				+ TFA_MIN(opts.flush_interval_ms, (uint64_t)1 << 40) * 1000000u;
	/* The heap is inherited; the parent's memory errors are the parent's. */
	nerror_rows = 0;
	memset(error_totals, 0, sizeof(error_totals));
	memset(errors_printed, 0, sizeof(errors_printed));
	tfa_lock_init(&sig_lock);
}

/* ---- memory over time and periodic snapshots ------------------------------------------------ */

/* Adds a point for the figures now, unless another thread is at it. */
static void
timeline_sample(uint64_t now, bool force)
{
	tfa_allocator_stats_t st;

	if (!tfa_trylock(&timeline_lock))
		return;
	if (force || tfa_timeline_due(&timeline, now)) {
		tfa_tracking_allocator_publish_self(&cpu_tracker);
		tfa_tracking_allocator_get_stats(&cpu_tracker, &st);
		tfa_timeline_add(&timeline, now, (uint64_t)st.bytes_in_use,
				 (uint64_t)st.allocated_bytes_in_use, tfa_rss_bytes(),
				 (uint64_t)st.peak_bytes_in_use, (uint64_t)st.peak_allocated_bytes_in_use,
				 force);
	}
	tfa_unlock(&timeline_lock);
}

/*
 * Every TICK_EVERY allocations of a thread, after the call is done (the
 * thread holds nothing): a point of the series when one is due, and a
 * snapshot of the profile when the flush interval has passed.  A fatal
 * signal meanwhile waits (in_shim), so its profile never meets the series
 * half changed.
 */
static void
shim_tick(void)
{
	int saved_errno = errno; /* a malloc that succeeds leaves errno as it was */

	tfa_tls.tick_left = TICK_EVERY - 1;
	if (tfa_shim_state() != TFA_SHIM_READY || tfa_guard_active() || tfa_tls.in_shim != 0
	    || tfa_tls.holds_all_locks)
		return;
	shim_enter();
	tfa_guard_enter();
	uint64_t now = tfa_monotonic_ns();
	if (tfa_timeline_due(&timeline, now))
		timeline_sample(now, false);
	uint64_t due = __atomic_load_n(&next_flush_ns, __ATOMIC_RELAXED);
	bool flush = false;
	if (due != 0 && now >= due && getpid() == proc.pid) {
		uint64_t next = now + TFA_MIN(opts.flush_interval_ms, (uint64_t)1 << 40) * 1000000u;
		flush = __atomic_compare_exchange_n(&next_flush_ns, &due, next, false,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
	tfa_guard_exit();
	if (flush) {
		int err = tfa_shim_write_profile(TFA_END_RUNNING, 0);
		(void)err;
	}
	shim_exit();
	errno = saved_errno;
}

/* ---- for the control API ------------------------------------------------------------------- */

void
tfa_shim_call_begin(void)
{
	shim_enter();
}

void
tfa_shim_call_end(void)
{
	shim_exit();
}

bool
tfa_shim_device_stats(unsigned device, tfa_allocator_stats_t *out)
{
	if (device != TFA_DEVICE_CPU) {
		tfa_tracking_allocator_t *ta = tfa_device_tracker_if_used(device);
		return ta != NULL && tfa_tracking_allocator_get_stats(ta, out);
	}
	tfa_tracking_allocator_publish_self(&cpu_tracker);
	return tfa_tracking_allocator_get_stats(&cpu_tracker, out);
}

bool
tfa_shim_pointer_info(const void *ptr, tfa_alloc_info_t *info, uint64_t *allocated)
{
	if (!tfa_tracking_lookup(&cpu_tracker, ptr, info)) {
		tfa_record_t rec;
		if (!tfa_ptr_table_lookup(tfa_devices_table(), (uintptr_t)ptr, &rec))
			return false;
		tfa_record_unpack(&rec, info);
		*allocated = info->requested;
		return true;
	}
	*allocated = allocated_size_of(info);
	return true;
}

void
tfa_shim_foreach_record(void (*fn)(void *arg, const tfa_record_t *rec), void *arg)
{
	tfa_ptr_table_foreach(&process_table, fn, arg);
}

const char *
tfa_shim_profile_path(void)
{
	return profile_path;
}

bool
tfa_shim_cuda_trace(void)
{
	return opts.cuda_trace;
}

bool
tfa_shim_quiet(void)
{
	return opts.quiet;
}
