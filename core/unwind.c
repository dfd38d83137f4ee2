/* SPDX-License-Identifier: MIT */
#include "core/unwind.h"

#include "core/cfi.h"
#include "core/log.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * Only the types and constants: libunwind's functions are looked up in the
 * library loaded by tfa_unwind_init, never linked (see there).
 */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

/* ld.so's record of where the main thread's stack began (the address of argc). */
extern void *__libc_stack_end;

/*
 * Frames a capture may put between the anchor and the unwinder (the
 * capture's entry point, the caller of tfa_unwind_capture_above and its
 * own caller, a helper, unw_backtrace's own frame), dropped before `skip`.
 * Through capture_stack with the verifying build and no tail call, the
 * anchor is the sixth return address: index 5.
 */
#define INTERNAL_FRAMES_MAX 5

/* ---- frame pointers ----------------------------------------------------------------------- */

/*
 * Frame pointers are followed only where the memory is known to be there.
 * Code compiled without frame pointers uses %rbp as an ordinary register, so
 * the chain can lead anywhere; the stack bounds pthread_getattr_np gives
 * would settle it, but it allocates (and reads /proc for the main thread).
 * Instead, the stack the walk starts on is recognised for what it is:
 *
 *   the main thread's stack: from any frame up to __libc_stack_end, all of it
 *     is one mapping (the kernel's stack, which only grows down);
 *   a thread glibc started: its TCB, where the thread pointer points, sits at
 *     the top of the same mapping as its stack (also for stacks the program
 *     gave with pthread_attr_setstack), so the memory from any frame up to
 *     the thread pointer is mapped.  Not on the main thread, whose TCB ld.so
 *     allocated elsewhere: a coroutine stack the program mapped just below it
 *     would pass for a thread stack, with a guard page in between.
 *
 * Both only within FP_WINDOW_MAX of the frame: a default stack is 8 MiB, and
 * the further away the bound, the likelier a frame is on some other stack
 * (a coroutine's, a sigaltstack) that merely lies below it.  On a stack of
 * neither kind, each frame pointer must stay within FP_FRAME_MAX of the last
 * one, and its page is checked with a system call before it is read (the
 * pages already checked are remembered for the rest of the walk).
 *
 * Every frame pointer must also lie above the previous one (stacks grow
 * down, so this also ends every loop) and be 8-aligned.  What this cannot
 * catch: a chain through a coroutine stack that lies within FP_WINDOW_MAX
 * below a thread's TCB, with %rbp holding garbage that points exactly into
 * the unmapped gap or guard page between them.
 */
#define FP_WINDOW_MAX ((uintptr_t)16 << 20)
#define FP_FRAME_MAX  ((uintptr_t)256 << 10)
#define FP_PAGE       ((uintptr_t)4096)

static uintptr_t main_thread_pointer;

static TFA_ALWAYS_INLINE uintptr_t
thread_pointer(void)
{
	return (uintptr_t)__builtin_thread_pointer();
}

/* Where the stack holding fp ends, when it is known: [fp, end) is mapped.  0: unknown. */
static TFA_ALWAYS_INLINE uintptr_t
fp_stack_end(uintptr_t fp)
{
	uintptr_t main_end = (uintptr_t)__libc_stack_end;
	uintptr_t tp = thread_pointer();

	if (fp < main_end && main_end - fp <= FP_WINDOW_MAX)
		return main_end;
	if (tp != __atomic_load_n(&main_thread_pointer, __ATOMIC_RELAXED) && fp < tp
	    && tp - fp <= FP_WINDOW_MAX)
		return tp;
	return 0;
}

/* The end of the page holding addr. */
static TFA_ALWAYS_INLINE uintptr_t
page_end(uintptr_t addr)
{
	return (addr | (FP_PAGE - 1)) + 1;
}

/*
 * Whether the 8 bytes at addr can be read, without reading them: the kernel
 * copies rt_sigprocmask's new set from user memory before it looks at `how`,
 * so an invalid `how` fails with EFAULT when addr cannot be read and EINVAL
 * (changing nothing) when it can (abseil's AddressIsReadable).
 * [async-signal-safe]
 */
static bool
readable(uintptr_t addr)
{
	int saved_errno = errno;
	long r = syscall(SYS_rt_sigprocmask, -1L, addr, 0L, (long)sizeof(uint64_t));
	bool ok = r == -1 && errno == EINVAL;

	errno = saved_errno;
	return ok;
}

/*
 * Walks the frame records from its own: [fp] is the caller's frame pointer,
 * [fp + 8] the return address into the caller.  Records before the one
 * whose return address is `anchor` belong to the capture itself.  Its own
 * frame (never inlined): the frame of a caller that tail-calls it is gone.
 * Reads other functions' stack frames: not instrumented by ASan.
 */
__attribute__((no_sanitize_address)) static TFA_NOINLINE unsigned
fp_capture(uintptr_t anchor, uintptr_t *pcs, unsigned max, unsigned skip)
{
	uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
	uintptr_t end = fp_stack_end(fp);
	/* On an unknown stack, only the page of the first record, which is ours, is known. */
	uintptr_t checked_end = end != 0 ? end : page_end(fp + 2 * sizeof(uintptr_t) - 1);
	unsigned internal = 0, n = 0;
	bool anchored = false;

	for (;;) {
		const uintptr_t *rec = (const uintptr_t *)fp;
		uintptr_t next = rec[0], pc = rec[1];

		if (pc < TFA_PC_MIN)
			break;
		if (!anchored) {
			anchored = pc == anchor;
			if (!anchored && ++internal > INTERNAL_FRAMES_MAX)
				return 0;
		}
		if (anchored) {
			if (skip > 0) {
				skip--;
			} else {
				pcs[n++] = pc;
				if (n == max)
					break;
			}
		}

		if (next <= fp || (next & (sizeof(uintptr_t) - 1)) != 0)
			break;
		if (next <= checked_end - 2 * sizeof(uintptr_t)) {
			fp = next;
			continue;
		}
		if (end != 0 || next - fp > FP_FRAME_MAX)
			break;
		/* Both words of the record, which may straddle a page boundary. */
		if (!readable(next) || !readable(next + sizeof(uintptr_t)))
			break;
		checked_end = page_end(next + 2 * sizeof(uintptr_t) - 1);
		fp = next;
	}
	return n;
}

/* ---- libunwind ---------------------------------------------------------------------------- */

#define SYMBOL_NAME_(x) #x
/* The name a libunwind macro stands for: unw_flush_cache -> "_Ux86_64_flush_cache". */
#define SYMBOL_NAME(x)  SYMBOL_NAME_(x)

typedef int (*unw_backtrace_fn)(void **buffer, int size);
typedef int (*unw_set_caching_policy_fn)(unw_addr_space_t as, unw_caching_policy_t policy);
typedef void (*unw_flush_cache_fn)(unw_addr_space_t as, unw_word_t lo, unw_word_t hi);
typedef int (*unw_getcontext_fn)(unw_context_t *uc);
typedef int (*unw_init_local_fn)(unw_cursor_t *c, unw_context_t *uc);
typedef int (*unw_step_fn)(unw_cursor_t *c);
typedef int (*unw_get_reg_fn)(unw_cursor_t *c, unw_regnum_t reg, unw_word_t *val);

static struct {
	unw_backtrace_fn backtrace; /* published last: non-NULL means ready */
	unw_flush_cache_fn flush_cache;
	unw_addr_space_t *local_addr_space;
	unw_getcontext_fn getcontext;
	unw_init_local_fn init_local;
	unw_step_fn step;
	unw_get_reg_fn get_reg;
	unw_backtrace_fn trace; /* unw_backtrace: libunwind's walks once the shim has started */
} libunwind;

/*
 * unw_backtrace's walk, frame by frame as its own fallback makes it, without
 * its trace cache: unw_backtrace maps and clears 256 KiB for that cache in
 * each thread that calls it (16,384 entries; libunwind 1.6 has no setting
 * for its size).  The warm-up at start uses this walk, so that only a process
 * with a walk cfi.c refuses later pays for the cache (a small program with
 * full stacks: 668 KiB resident over tracking alone, 456 without the cache),
 * and so do the walks cfi.c refuses until the shim has started.
 * Not for those later walks: through a frame without unwind tables, 20,000
 * walks took 0.9 s of CPU time this way (half of it in the kernel), 0.01 s
 * by unw_backtrace, which keeps what it learnt of each frame in that cache.
 */
/* Calls of the shim's into libunwind the thread is in (a signal handler's walk may nest). */
static TFA_TLS unsigned in_libunwind;

bool
tfa_unwind_in_libunwind(void)
{
	return in_libunwind != 0;
}

/*
 * unw_backtrace, as a call of the shim's (tfa_unwind_in_libunwind).  Inlined:
 * a frame of its own between its caller and libunwind's walk made that walk
 * miss the caller's anchor (integration.unwind.nocfi: 3 mismatches in 3).
 */
static TFA_ALWAYS_INLINE int
libunwind_trace(void **buffer, int size)
{
	/* Its pipe's write and read are cancellation points (core/log.h). */
	int cancel = tfa_cancel_off();
	in_libunwind++;
	int got = libunwind.backtrace(buffer, size);
	in_libunwind--;
	tfa_cancel_restore(cancel);
	return got;
}

static TFA_NOINLINE int
libunwind_backtrace(void **buffer, int size)
{
	unw_context_t uc;
	unw_cursor_t cursor;
	int n = 0;

	int cancel = tfa_cancel_off();
	in_libunwind++;
	/* From the caller's frame on, as unw_backtrace's entries begin. */
	if (libunwind.getcontext(&uc) != 0 || libunwind.init_local(&cursor, &uc) < 0 || libunwind.step(&cursor) <= 0) {
		in_libunwind--;
		tfa_cancel_restore(cancel);
		return 0;
	}
	while (n < size) {
		unw_word_t ip;
		if (libunwind.get_reg(&cursor, UNW_REG_IP, &ip) < 0)
			break;
		buffer[n++] = (void *)(uintptr_t)ip;
		if (libunwind.step(&cursor) <= 0)
			break;
	}
	in_libunwind--;
	tfa_cancel_restore(cancel);
	return n;
}

/*
 * The frames of unw_backtrace's walk from the anchor on, after `skip`
 * (tfa_cfi_capture does the same as it walks).  The first entries are
 * return addresses into the capture's own functions (unwind_capture_slow,
 * verify, tfa_unwind_capture unless it tail-calls unwind_capture_slow, the
 * callers of tfa_unwind_capture_above), so the anchor is found at index 1
 * to INTERNAL_FRAMES_MAX: what comes before it is the capture's own.
 * libunwind up to 1.6 records return addresses; later versions record return address - 1 for ordinary frames.
 * Recognising the anchor in that form too keeps one convention for every
 * mode.
 */
static unsigned
from_anchor(void *const *frames, int got, uintptr_t anchor, uintptr_t *pcs, unsigned max,
	    unsigned skip)
{
	uintptr_t adjust = 0;
	unsigned i, n = 0;

	if (got <= 0)
		return 0;
	for (i = 0; i < (unsigned)got && i <= INTERNAL_FRAMES_MAX; i++) {
		if ((uintptr_t)frames[i] == anchor)
			break;
		if ((uintptr_t)frames[i] == anchor - 1) {
			adjust = 1;
			break;
		}
	}
	if (i == (unsigned)got || i > INTERNAL_FRAMES_MAX)
		return 0;
	for (i += skip; i < (unsigned)got && n < max; i++)
		pcs[n++] = (uintptr_t)frames[i] + adjust;
	return n;
}

static void verify(const uintptr_t *pcs, unsigned n, uintptr_t anchor, unsigned max, unsigned skip);

/*
 * libunwind's walk, when cfi.c refused (got < 0), or cfi.c's walk compared
 * with it under verification.  Out of line: unwind_capture, inlined in
 * tfa_unwind_capture, keeps its frame small and the walk one frame shorter.
 */
static TFA_NOINLINE unsigned
unwind_capture_slow(int got, uintptr_t anchor, uintptr_t *pcs, unsigned max, unsigned skip,
		    unsigned want)
{
	if (got >= 0) {
		verify(pcs, (unsigned)got, anchor, max, skip);
		return (unsigned)got;
	}
	void *frames[TFA_UNWIND_FRAMES_MAX];
	got = libunwind_trace(frames, (int)want);
	return from_anchor(frames, got, anchor, pcs, max, skip);
}

/*
 * The walk of core/cfi.c, or libunwind's where it refuses (a signal frame,
 * code without unwind tables, a stack of unknown bounds): never less than
 * libunwind alone would give.
 */
static TFA_ALWAYS_INLINE unsigned
unwind_capture(uintptr_t frame, uintptr_t anchor, uintptr_t *pcs, unsigned max, unsigned skip)
{
	unsigned want = INTERNAL_FRAMES_MAX + skip + max;

	if (__atomic_load_n(&libunwind.backtrace, __ATOMIC_ACQUIRE) == NULL)
		return 0;
	if (want > TFA_UNWIND_FRAMES_MAX || want < max)
		want = TFA_UNWIND_FRAMES_MAX;
	int got = tfa_cfi_capture(frame, anchor, INTERNAL_FRAMES_MAX, pcs, max, skip, want,
				  fp_stack_end(frame));
	if (tfa_likely(got >= 0) && tfa_likely(!tfa_unwind_verify.on))
		return (unsigned)got;
	return unwind_capture_slow(got, anchor, pcs, max, skip, want);
}

tfa_unwind_verify_t tfa_unwind_verify;

/* The walk of cfi.c done again by libunwind, the two compared after the anchor. */
static TFA_COLD void
verify(const uintptr_t *pcs, unsigned n, uintptr_t anchor, unsigned max, unsigned skip)
{
	void *theirs[TFA_UNWIND_FRAMES_MAX];
	uintptr_t b[TFA_UNWIND_FRAMES_MAX];
	unsigned want = INTERNAL_FRAMES_MAX + skip + max;

	if (want > TFA_UNWIND_FRAMES_MAX || want < max)
		want = TFA_UNWIND_FRAMES_MAX;
	int their_got = libunwind_trace(theirs, (int)want);
	unsigned nb = from_anchor(theirs, their_got, anchor, b, max, skip);
	__atomic_fetch_add(&tfa_unwind_verify.walks, 1, __ATOMIC_RELAXED);
	if (n == nb && memcmp(pcs, b, n * sizeof(b[0])) == 0)
		return;
	if (__atomic_fetch_add(&tfa_unwind_verify.mismatches, 1, __ATOMIC_RELAXED) != 0)
		return;
	/* The first one, for the report (racy with another thread's first: a test's diagnostic). */
	tfa_unwind_verify.first_n[0] = TFA_MIN(n, (unsigned)TFA_ARRAY_SIZE(tfa_unwind_verify.first[0]));
	tfa_unwind_verify.first_n[1] = TFA_MIN(nb, (unsigned)TFA_ARRAY_SIZE(tfa_unwind_verify.first[1]));
	memcpy(tfa_unwind_verify.first[0], pcs, tfa_unwind_verify.first_n[0] * sizeof(b[0]));
	memcpy(tfa_unwind_verify.first[1], b, tfa_unwind_verify.first_n[1] * sizeof(b[0]));
}

/*
 * Not linked, but loaded here: Debian's libunwind.a is not position-
 * independent (it cannot go into libtfalloc.so), and a DT_NEEDED on
 * libunwind.so.8 would load it, and liblzma, into every process at start,
 * its 36 _Unwind_* symbols global: ahead of libgcc_s for every library
 * loaded later, so that a C program's dlopened C++ code (a Python extension)
 * would throw its exceptions through libunwind's _Unwind_RaiseException
 * (LD_DEBUG=bindings shows libstdc++ and libgcc_s itself bound to it).
 * RTLD_LOCAL keeps its symbols to itself; RTLD_NODELETE keeps the function
 * pointers valid.
 */
static int
libunwind_load(void)
{
	if (__atomic_load_n(&libunwind.backtrace, __ATOMIC_ACQUIRE) != NULL)
		return 0;

	int saved_errno = errno;
	void *lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	int ret = -ENOENT;

	if (lib == NULL)
		goto out;
	unw_backtrace_fn backtrace = (unw_backtrace_fn)dlsym(lib, "unw_backtrace");
	unw_getcontext_fn getcontext = (unw_getcontext_fn)dlsym(lib, SYMBOL_NAME(unw_tdep_getcontext));
	unw_init_local_fn init_local = (unw_init_local_fn)dlsym(lib, SYMBOL_NAME(unw_init_local));
	unw_step_fn step = (unw_step_fn)dlsym(lib, SYMBOL_NAME(unw_step));
	unw_get_reg_fn get_reg = (unw_get_reg_fn)dlsym(lib, SYMBOL_NAME(unw_get_reg));
	unw_set_caching_policy_fn set_caching_policy =
	        (unw_set_caching_policy_fn)dlsym(lib, SYMBOL_NAME(unw_set_caching_policy));
	unw_flush_cache_fn flush_cache =
	        (unw_flush_cache_fn)dlsym(lib, SYMBOL_NAME(unw_flush_cache));
	unw_addr_space_t *local_addr_space = dlsym(lib, SYMBOL_NAME(unw_local_addr_space));
	if (backtrace == NULL || getcontext == NULL || init_local == NULL || step == NULL || get_reg == NULL
	    || set_caching_policy == NULL || flush_cache == NULL || local_addr_space == NULL)
		goto out;

	/* Without its rule cache, cfi.c refuses every walk, and libunwind serves them all. */
	(void)tfa_cfi_init();
	/* libunwind's first call makes its pipe (tfa_unwind_in_libunwind). */
	in_libunwind++;
	set_caching_policy(*local_addr_space, UNW_CACHE_PER_THREAD);
	in_libunwind--;
	libunwind.flush_cache = flush_cache;
	libunwind.local_addr_space = local_addr_space;
	libunwind.getcontext = getcontext;
	libunwind.init_local = init_local;
	libunwind.step = step;
	libunwind.get_reg = get_reg;
	libunwind.trace = backtrace;
	__atomic_store_n(&libunwind.backtrace, libunwind_backtrace, __ATOMIC_RELEASE);

	/*
	 * libunwind's first use: its state and this thread's cache of unwind
	 * rules.  Called directly: cfi.c would serve a capture, and leave
	 * libunwind's first use to the first stack it refuses.  Then cfi.c's own
	 * first walk.  unw_backtrace's trace cache and its pthread key come at
	 * the first walk cfi.c refuses after start-up (tfa_unwind_started),
	 * inside an allocation under the guard: the key may be a high one then,
	 * whose setspecific allocates, which the guard sends straight to the
	 * backend.
	 */
	void *unw_warm_up[INTERNAL_FRAMES_MAX];
	(void)libunwind_backtrace(unw_warm_up, (int)TFA_ARRAY_SIZE(unw_warm_up));
	uintptr_t warm_up[INTERNAL_FRAMES_MAX];
	(void)tfa_unwind_capture(TFA_STACKS_UNWIND, warm_up, TFA_ARRAY_SIZE(warm_up), 0);
	ret = 0;
out:
	errno = saved_errno;
	return ret;
}

/* ---- interface ---------------------------------------------------------------------------- */

void
tfa_unwind_started(void)
{
	/* The walks cfi.c refuses at start (its tables of the modules are not all read yet) were libunwind_backtrace's. */
	if (__atomic_load_n(&libunwind.backtrace, __ATOMIC_ACQUIRE) != NULL)
		__atomic_store_n(&libunwind.backtrace, libunwind.trace, __ATOMIC_RELEASE);
}

int
tfa_unwind_init(tfa_stacks_mode_t mode)
{
	__atomic_store_n(&main_thread_pointer, thread_pointer(), __ATOMIC_RELAXED);
	switch (mode) {
	case TFA_STACKS_NONE:
	case TFA_STACKS_FP:
		return 0;
	case TFA_STACKS_UNWIND:
		return libunwind_load();
	}
	return -EINVAL;
}

/* The capture whose first frame is the return address `anchor`, held by the frame record `frame`. */
static TFA_ALWAYS_INLINE unsigned
capture_from(tfa_stacks_mode_t mode, uintptr_t frame, uintptr_t anchor, uintptr_t *pcs,
	     unsigned max, unsigned skip)
{
	if (pcs == NULL || max == 0)
		return 0;
	switch (mode) {
	case TFA_STACKS_NONE:
		return 0;
	case TFA_STACKS_FP:
		return fp_capture(anchor, pcs, max, skip);
	case TFA_STACKS_UNWIND:
		return unwind_capture(frame, anchor, pcs, max, skip);
	}
	return 0;
}

/* Never inlined: its return address is the anchor of both walks. */
TFA_NOINLINE unsigned
tfa_unwind_capture(tfa_stacks_mode_t mode, uintptr_t *pcs, unsigned max, unsigned skip)
{
	return capture_from(mode, (uintptr_t)__builtin_frame_address(0),
			    (uintptr_t)__builtin_return_address(0), pcs, max, skip);
}

/* Reads the caller's frame record: not instrumented by ASan. */
__attribute__((no_sanitize_address)) TFA_NOINLINE unsigned
tfa_unwind_capture_above(tfa_stacks_mode_t mode, const void *frame, uintptr_t *pcs, unsigned max,
			 unsigned skip)
{
	/*
	 * A caller's frame record lies above this frame, 8-aligned: anything
	 * else (a caller built without frame pointers) is not read.
	 */
	if (tfa_unlikely(((uintptr_t)frame & 7) != 0
			 || (uintptr_t)frame <= (uintptr_t)__builtin_frame_address(0)))
		return 0;
	return capture_from(mode, (uintptr_t)frame, ((const uintptr_t *)frame)[1], pcs, max, skip);
}

/*
 * The cached walk compared with libunwind's (tfa_unwind_verify): the shim's
 * frames, then the stack, as the walk without the cache would list them.
 * Out of line: its buffer stays off every capture's stack frame.
 */
static TFA_COLD TFA_NOINLINE void
verify_cached(const tfa_stack_cache_t *c, unsigned len, uintptr_t anchor)
{
	uintptr_t pcs[TFA_STACK_CACHE_SELF_MAX + TFA_STACK_CACHE_LEVELS];
	unsigned n = 0;

	for (unsigned i = 0; i < c->n_self; i++)
		pcs[n++] = c->self_pcs[i];
	n += tfa_stack_cache_pcs(c, pcs + n, len);
	/*
	 * One more than it has: a walk that ended too soon differs in length.
	 * libunwind walks at most TFA_UNWIND_FRAMES_MAX frames, the capture's
	 * own included: a deeper stack is compared as far as that goes.
	 */
	unsigned most = TFA_UNWIND_FRAMES_MAX - INTERNAL_FRAMES_MAX - 1;
	if (n + 1 > most)
		verify(pcs, most, anchor, most, 0);
	else
		verify(pcs, n, anchor, n + 1, 0);
}

/* Reads the caller's frame record: not instrumented by ASan. */
__attribute__((no_sanitize_address)) TFA_NOINLINE int
tfa_unwind_capture_cached_above(const void *frame, tfa_stack_cache_t *c, uintptr_t self_lo,
				uintptr_t self_hi)
{
	if (tfa_unlikely(((uintptr_t)frame & 7) != 0
			 || (uintptr_t)frame <= (uintptr_t)__builtin_frame_address(0))
	    || __atomic_load_n(&libunwind.backtrace, __ATOMIC_ACQUIRE) == NULL) {
		c->len = 0;
		return 0;
	}
	uintptr_t anchor = ((const uintptr_t *)frame)[1];
	int got = tfa_cfi_capture_cached((uintptr_t)frame, anchor, INTERNAL_FRAMES_MAX, self_lo, self_hi,
					 fp_stack_end((uintptr_t)frame), c);
	if (tfa_unlikely(tfa_unwind_verify.on) && got >= 0)
		verify_cached(c, (unsigned)got, anchor);
	return got;
}

void
tfa_unwind_flush_caches(void)
{
	tfa_cfi_flush();
	if (__atomic_load_n(&libunwind.backtrace, __ATOMIC_ACQUIRE) != NULL)
		libunwind.flush_cache(*libunwind.local_addr_space, 0, 0);
}
