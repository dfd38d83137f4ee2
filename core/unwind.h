/* SPDX-License-Identifier: MIT */
/*
 * Capture of the current call stack, for the stack of every allocation.
 *
 * Glossary:
 *   pc        a frame's return address: the instruction after the call, as
 *             the stack holds it.  A symbolizer subtracts 1 to land inside
 *             the call instruction (its line, and the right function when the
 *             call is the last instruction of a noreturn path).  One exception
 *             in TFA_STACKS_UNWIND: the frame interrupted by a signal is
 *             recorded at the interrupted instruction itself.
 *   frame 0   the function that called tfa_unwind_capture: pcs[0] is the
 *             return address into it, whatever frames the capture itself
 *             uses.  `skip` drops the next frames outwards (the shim's own).
 *
 * Modes (ranges of runs on a busy 2-core VM, Debian 12, libunwind 1.6.2):
 *   TFA_STACKS_NONE    records nothing.
 *   TFA_STACKS_FP      follows the frame-pointer chain (%rbp): 15-30 ns for
 *             10 frames, 26-52 ns for 20.  A function compiled without frame
 *             pointers (the default of gcc -O2, so most of a distribution's
 *             libraries) is missing from the chain, or ends it.  The shim
 *             itself must be compiled with -fno-omit-frame-pointer, or the
 *             allocating function, whose return address only the shim's
 *             frames hold, is lost.  Never faults: every frame pointer is
 *             checked against the bounds of the stack it must lie on before
 *             it is read (see unwind.c), and the walk stops at the first that
 *             fails.  [async-signal-safe] [never allocates]
 *   TFA_STACKS_UNWIND  the unwind tables (.eh_frame), exact for code
 *             without frame pointers, walked by core/cfi.c: each frame's rule
 *             (how to find the caller's %rsp, return address and %rbp) is
 *             worked out once per return address and cached for every
 *             thread; a cached frame costs a hash probe and the loads of its
 *             saved slots, about 30 instructions (40 when the frame saved
 *             %rbp) and 4-5 ns, one dependent chain per frame.  Measured in
 *             check_cfi's loop (min of 5 x 20,000, the whole
 *             tfa_unwind_capture): 42-52 ns for 12 frames, 95-110 ns for 22,
 *             where libunwind's unw_backtrace alone took 85-118 and 157-189
 *             (up to 550 in some runs).  In the shim, callgrind on trees 14
 *             (TFALLOC_FLUSH_INTERVAL_MS=0): 9,716 -> 7,648 million
 *             instructions in all (1,456 without stacks), the walk 51% of
 *             them; CPU time 15-20% less.  On trees 12, since: 1,469 ->
 *             1,047 million (313 without stacks), the walk 38%.  The
 *             shim's captures go through tfa_unwind_capture_cached_above:
 *             each thread keeps its last walk (core/stack_cache.h) and
 *             walks only the frames that changed, checking the words the
 *             last walk read for the others (trees 12: 1,162 -> 1,035
 *             million; trees 14 9% less CPU time, python3 with
 *             PYTHONMALLOC=malloc 18% less).
 *             A frame seen for the first time goes through _dl_find_object
 *             (lock-free) and the FDE's instructions: a few microseconds,
 *             once per return address.  What cfi.c cannot walk exactly (a
 *             signal frame, code without unwind tables such as JIT code or
 *             ld.so's start, a CFA computed by an expression, a stack whose
 *             bounds are unknown) it refuses as a whole, and libunwind's
 *             unw_backtrace() walks that stack instead (none of the 1.5
 *             million captures of python3, g++ and sqlite3 in
 *             test/integration/test_unwind.py).
 *             libunwind: a thread's first use costs 150-230 us and 260 KiB of
 *             memory for as long as the thread lives, and each frame it has
 *             not seen goes through dl_iterate_phdr with every signal blocked
 *             around it, about 0.7 us.  libunwind is loaded by
 *             tfa_unwind_init: see there.  cfi.c is async-signal-safe;
 *             libunwind is not (dl_iterate_phdr, pthread_once).
 *
 * Allocation in TFA_STACKS_UNWIND, counted with an interposed malloc:
 * tfa_unwind_init makes 13 calls (dlopen); cfi.c none (its rule cache is
 * mapped by tfa_unwind_init, 1 MiB of address space of which the first 16
 * KiB are used, doubled as rules are added); a capture that falls back to
 * libunwind, the first on its thread, makes one (16 bytes: glibc's block
 * for libunwind's thread-local variables, by __tls_get_addr, freed when
 * the thread exits); later ones none (libunwind's caches come from mmap).
 * Whatever it does, the caller holds the shim's guard around the capture,
 * so that a nested malloc goes straight to the backend, untracked.
 */
#ifndef TFA_CORE_UNWIND_H
#define TFA_CORE_UNWIND_H

#include <stdbool.h>
#include <stdint.h>

#include "core/common.h"
#include "core/stack_cache.h"

typedef enum tfa_stacks_mode_e {
	TFA_STACKS_NONE = 0,
	TFA_STACKS_FP = 1,
	TFA_STACKS_UNWIND = 2,
} tfa_stacks_mode_t;

/* TFA_STACKS_UNWIND walks at most this many frames, skipped ones included. */
#define TFA_UNWIND_FRAMES_MAX 160

/*
 * Prepares a mode.  For TFA_STACKS_UNWIND: maps cfi.c's rule cache, loads
 * libunwind.so.8, its fallback (RTLD_LOCAL: its _Unwind_* symbols must not
 * take over the program's C++ exceptions), selects per-thread caching (no
 * cache lock shared between threads; on one thread it measured no faster
 * than the default) and walks once, so that libunwind's first use happens
 * here: its state and this thread's cache of rules (see
 * tfa_unwind_started for unw_backtrace's own).  For
 * every mode: records the calling thread as the main thread (see unwind.c).
 * Returns 0, -ENOENT when libunwind cannot be loaded, -EINVAL for an unknown
 * mode (without its rule cache, cfi.c refuses every walk: libunwind serves).  REQUIRES: called on the main thread, from the shim's
 * initialisation, with the guard held; before any capture in
 * TFA_STACKS_UNWIND (which returns 0 frames until then).  Calling it again
 * is harmless.
 */
int tfa_unwind_init(tfa_stacks_mode_t mode) TFA_MUST_CHECK;

/*
 * The shim's start is over: the walks cfi.c refuses from now on are
 * unw_backtrace's, whose trace cache (256 KiB a thread) is then made only in
 * processes that need it.  Until then they walk frame by frame.
 */
void tfa_unwind_started(void);

/*
 * Whether the calling thread is inside a call of the shim's into libunwind.
 * libunwind validates the memory it reads in some frames (a signal frame, a
 * frame without unwind tables) by writing a byte of it to a pipe of its own,
 * made on its first use, and reading it back.  A program that closes its
 * descriptors and opens files under those numbers (a daemon's start) had
 * libunwind read and write its files: the pipe is made far above the
 * program's descriptors instead (preload/fd_hooks.c).
 */
bool tfa_unwind_in_libunwind(void);

/*
 * Stores in pcs[0..max) the return addresses of the calling function and of
 * its callers (see "frame 0" above), after dropping `skip` frames; returns
 * how many were stored.  [hot path] [never allocates in TFA_STACKS_FP]
 */
unsigned tfa_unwind_capture(tfa_stacks_mode_t mode, uintptr_t *pcs, unsigned max, unsigned skip);

/*
 * tfa_unwind_capture_above in TFA_STACKS_UNWIND against the thread's last
 * walk (core/stack_cache.h): the stack goes to c->lv (outermost first) with
 * the frames in [self_lo, self_hi) at its inner end left out (to
 * c->self_pcs).  Returns the depth, 0, or a negative number when the walk
 * cannot be made exactly this way (tfa_cfi_capture_cached): the caller then
 * takes tfa_unwind_capture_above, which asks libunwind where cfi.c cannot.
 * REQUIRES: the caller owns c.  [hot path] [never allocates]
 */
int tfa_unwind_capture_cached_above(const void *frame, tfa_stack_cache_t *c, uintptr_t self_lo,
				    uintptr_t self_hi);

/*
 * tfa_unwind_capture from the caller's caller: pcs[0] is the return address
 * into the function that called the caller.  `frame`: the caller's
 * __builtin_frame_address(0) (a frame record: [frame + 8] is that return
 * address).  The caller's own frame, which it would drop, is not walked:
 * one step less.  A frame that is not above this call's own, 8-aligned,
 * captures nothing (returns 0).  [hot path] [never allocates in TFA_STACKS_FP]
 */
unsigned tfa_unwind_capture_above(tfa_stacks_mode_t mode, const void *frame, uintptr_t *pcs,
				  unsigned max, unsigned skip);

/*
 * Forgets what cfi.c and libunwind cached about code addresses: called by
 * the shim's dlclose (preload/dl_hooks.c), before and after the real one, so
 * that a library mapped later at the same addresses is unwound by its own
 * rules.  [async-signal-safe for cfi.c's part]
 */
void tfa_unwind_flush_caches(void);

/*
 * A test hook: with `on` set (by preload/unwind_verify.c, linked into the
 * test build libtfalloc_verify.so only, never into libtfalloc.so), every
 * capture that core/cfi.c served in TFA_STACKS_UNWIND is made again by
 * libunwind and the two compared; the first mismatch is kept.
 */
typedef struct tfa_unwind_verify_s {
	bool on;
	uint64_t walks, mismatches;
	unsigned first_n[2];      /* cfi.c's frames, libunwind's */
	uintptr_t first[2][32];
} tfa_unwind_verify_t;
extern tfa_unwind_verify_t tfa_unwind_verify;

#endif /* TFA_CORE_UNWIND_H */
