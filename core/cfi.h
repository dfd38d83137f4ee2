/* SPDX-License-Identifier: MIT */
/*
 * The engine of TFA_STACKS_UNWIND: a walk of the current thread's stack by
 * the DWARF call frame information of .eh_frame, x86-64 only, with the rule
 * of each return address cached (see cfi.c).  What it cannot walk exactly
 * (a signal frame, a frame without unwind information, a CFA computed by a
 * DWARF expression, a stack it cannot bound) it refuses as a whole, and the
 * caller asks libunwind instead: the result is never worse than libunwind's.
 */
#ifndef TFA_CORE_CFI_H
#define TFA_CORE_CFI_H

#include <stdint.h>

#include "core/common.h"

/*
 * Maps the rule cache (arena memory, never freed).  Returns 0 or -ENOMEM.
 * Calling it again is harmless.  REQUIRES: before any tfa_cfi_backtrace
 * that should succeed (until then, each returns -1).
 */
int tfa_cfi_init(void) TFA_MUST_CHECK;

/*
 * As libunwind 1.6's unw_backtrace: stores in frames[0..size) the return
 * address into the calling function, then those of its callers, outwards;
 * returns how many, or -1 when the stack cannot be walked exactly here
 * (nothing usable is in frames then).  [stack_lo, stack_end) must be mapped
 * and hold the caller's frames: every stack slot read lies in it.
 * [hot path] [async-signal-safe] [never allocates] [preserves errno]
 */
int tfa_cfi_backtrace(void **frames, int size, uintptr_t stack_end);

/*
 * Forgets every cached rule (lazily: a generation count): to call after a
 * library is unloaded, before code mapped at the same addresses is walked.
 * [async-signal-safe]
 */
void tfa_cfi_flush(void);

/* For tests: how many walks returned -1 since the process started. */
uint64_t tfa_cfi_refusals(void);

#endif /* TFA_CORE_CFI_H */
