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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/stack_cache.h"

/* Below this, a "return address" is a small integer: the chain went wrong (both walks). */
#define TFA_PC_MIN ((uintptr_t)4096)

/*
 * Maps the rule cache (arena memory, never freed).  Returns 0 or -ENOMEM.
 * Calling it again is harmless.  REQUIRES: before any tfa_cfi_capture
 * that should succeed (until then, each returns -1).
 */
int tfa_cfi_init(void);

/*
 * Walks the stack from `frame`, the frame record of the calling function
 * (its __builtin_frame_address(0): [frame] its caller's %rbp, [frame + 8]
 * the return address into its caller, frame + 16 its caller's %rsp), the
 * way libunwind 1.6's unw_backtrace would list it from there (return
 * addresses), and stores in pcs[0..max) the frames from the first one equal
 * to `anchor` (looked for among the first `search` + 1, those before it are
 * the capture's own), after dropping `skip` more; walks at most `limit`
 * frames in all, those before the anchor and skipped ones included.
 * Returns how many were stored (0 when the anchor is not there), or -1 when
 * the stack cannot be walked exactly here (nothing usable is in pcs then).
 * [frame, stack_end) must be mapped and hold the caller's frames: every
 * stack slot read lies between frame and stack_end.  [hot path]
 * [async-signal-safe] [never allocates] [preserves errno]
 */
int tfa_cfi_capture(uintptr_t frame, uintptr_t anchor, unsigned search, uintptr_t *pcs,
		    unsigned max, unsigned skip, unsigned limit, uintptr_t stack_end);

/*
 * tfa_cfi_capture against the thread's last walk, kept in c (see
 * core/stack_cache.h): from the anchor (among the first `search` + 1
 * frames), past the shim's own frames, [self_lo, self_hi), which go to
 * c->self_pcs, the stack goes to c->lv, outermost frame at position 0, and
 * the walk stops at the first frame whose level and outer words are the last
 * walk's.  Returns the stack's depth (c->len), 0 when the anchor is not
 * there or no frame follows, -1 when the stack cannot be walked exactly
 * here, -2 when the cache cannot hold it (deeper than
 * TFA_STACK_CACHE_LEVELS, or more than TFA_STACK_CACHE_SELF_MAX frames of
 * the shim's own): the cache is then empty, and the caller walks without
 * it.  REQUIRES: the caller owns c (not busy).  [hot path]
 * [async-signal-safe] [never allocates] [preserves errno]
 */
int tfa_cfi_capture_cached(uintptr_t frame, uintptr_t anchor, unsigned search, uintptr_t self_lo,
			   uintptr_t self_hi, uintptr_t stack_end, tfa_stack_cache_t *c);

/*
 * Forgets every cached rule (lazily: a generation count): to call after a
 * library is unloaded, before code mapped at the same addresses is walked.
 * [async-signal-safe]
 */
void tfa_cfi_flush(void);

/* For tests: how many walks returned -1 since the process started. */
uint64_t tfa_cfi_refusals(void);

/*
 * For tests: how many rules were worked out from the DWARF tables (the
 * cache's misses, those of stale generations and those not kept included).
 */
uint64_t tfa_cfi_rules_computed(void);

/* For tests: the rule cache as it is now. */
typedef struct tfa_cfi_cache_info_s {
	const void *table;     /* NULL before tfa_cfi_init */
	size_t reserved_bytes; /* mapped at init; only the first slots * 16 are used */
	uint32_t slots;        /* in use now: doubled as keys come */
	uint32_t min_slots;    /* in use at first */
	uint32_t keys;         /* slots claimed */
} tfa_cfi_cache_info_t;

void tfa_cfi_cache_info(tfa_cfi_cache_info_t *out);

/*
 * For tests: whether the words the last walk read from position m outwards
 * are unchanged (-1), else a position whose words changed.
 */
int tfa_cfi_test_outer_changed(const tfa_stack_cache_t *c, int m);

/*
 * For tests: the rule word of return address ra, as the walk gets it from
 * the cache (computed and kept on a miss) when cached, or worked out from
 * the DWARF tables without the cache.  Equal words: equal rules.
 */
uint64_t tfa_cfi_test_rule(uintptr_t ra, bool cached);

#endif /* TFA_CORE_CFI_H */
