/* SPDX-License-Identifier: MIT */
/*
 * A thread's last walk of its own stack, kept so that the next capture walks
 * only the frames that changed (TFA_STACKS_UNWIND).
 *
 * Consecutive allocations of a thread mostly share their outer frames: main,
 * the event loop, the interpreter, the parser, down to the function that
 * allocates.  A walk by the unwind tables (core/cfi.c) pays a rule lookup and
 * its loads for each of them, and the stack table hashes and compares every
 * frame again (core/stack_table.c).  With this cache a capture walks from the
 * allocating function outwards until it reaches a frame of the last walk, the
 * same return address at the same stack address with the same %rbp; from
 * there it only checks the words the last walk read: each frame's return
 * address, and the caller's %rbp where a rule restored it.  (Measured on
 * trees 14 with full stacks: 9% less CPU time, and 18% on python3 with
 * PYTHONMALLOC=malloc; the stacks of both are about 20 frames deep, of
 * which a capture walks 2 or 3.)  A walk is a
 * function of the registers it starts with and the stack words it reads, so
 * equal words give the same frames, and the stack table's node for those
 * outer frames is the same too: only the new inner frames are hashed and
 * compared.
 *
 * Why the words must be checked and not only the frame where the two walks
 * meet: a function F called at the same stack depth from two places of its
 * caller has the same %rsp and the same return address into F in both
 * stacks, but its own return address differs.  check_cfi's cached cases
 * build that stack.
 *
 * Glossary:
 *   level     one frame of the walk: its return address, the registers the
 *             walk had there (the caller's %rsp, i.e. the inner frame's CFA,
 *             and %rbp), and the two words the step outwards read, each with
 *             its address: the caller's return address (or the zero that
 *             ended the walk) and the caller's %rbp (the first word again
 *             when the step kept %rbp).  A step with nothing read (the
 *             outermost frame by its rule) checks a zero word of the cache;
 *             one whose rule read outside the frame (no compiler writes
 *             such rules), a word that never holds what the check wants.
 *             So a level is checked by two loads and two compares, no
 *             branch.
 *   position  a level's place counted from the outermost frame (0): the
 *             frames two walks share keep their positions, so only the new
 *             inner ones are written.
 *
 * Owned by one thread (its thread record's), used by one capture at a time:
 * a capture in a signal handler that interrupted one sees `busy` and walks
 * without it.  Mapped from the arena when the record's first capture wants
 * it (20 KiB of address space, of which a stack of a few dozen frames
 * touches 2 pages: the first levels, and the first hashes, nodes and new
 * levels, which share one; 3 when a capture walks more than 11 new frames); a
 * record passes to a
 * later thread with it, whose walks never match the old frames unless their
 * words are the same (they are checked).
 */
#ifndef TFA_CORE_STACK_CACHE_H
#define TFA_CORE_STACK_CACHE_H

#include <stdint.h>

#include "core/common.h"

/* Levels a cached walk holds; deeper stacks take the walk without the cache. */
#define TFA_STACK_CACHE_LEVELS 160
/* Frames of the shim's own at the inner end of a walk, left out of the stack. */
#define TFA_STACK_CACHE_SELF_MAX 8

typedef struct tfa_stack_level_s {
	uintptr_t pc;      /* the return address: the frame as the stack records it */
	uintptr_t sp;      /* the CFA of the next inner frame */
	uintptr_t bp;
	uintptr_t ra_at, ra; /* the step outwards read ra at ra_at */
	uintptr_t bp_at, bp_read; /* and bp_read at bp_at */
} tfa_stack_level_t;

struct tfa_stack_node_s;

typedef struct tfa_stack_cache_s {
	uint32_t busy;  /* a capture is using the cache */
	uint32_t len;   /* positions [0, len) hold the last stack; 0: nothing kept */
	uint32_t hashed; /* positions [0, hashed) have hash[] (core/stack_table.c) */
	uint32_t known;  /* positions [0, known) have node[]: the trie's node of frames 0..p */
	uint32_t gen;   /* cfi.c's rule generation of the walk */
	uint32_t n_self; /* the shim's frames before the stack (self_pcs) */
	uint32_t fresh; /* the last capture walked positions [len - fresh, len); the rest it checked */
	uint32_t backoff; /* captures left to take without the cache (a stack too deep for it) */
	uintptr_t top;  /* the end of the stack words the walk read: a walk on a shorter stack cannot use it */
	uintptr_t zero; /* always 0: what a step that read nothing checks */
	uintptr_t self_pcs[TFA_STACK_CACHE_SELF_MAX];
	tfa_stack_level_t lv[TFA_STACK_CACHE_LEVELS];
	/* The stack table's figures of each position: hash of frames 0..p, node of frames 0..p. */
	uint64_t hash[TFA_STACK_CACHE_LEVELS];
	const struct tfa_stack_node_s *node[TFA_STACK_CACHE_LEVELS];
	/* The walk's new levels, innermost first, until it knows their positions. */
	tfa_stack_level_t scratch[TFA_STACK_CACHE_LEVELS];
} tfa_stack_cache_t;

/*
 * The cache's stack as the walk without the cache lists it, innermost frame
 * first: its innermost `max` frames into pcs.  Returns how many.
 */
static inline unsigned
tfa_stack_cache_pcs(const tfa_stack_cache_t *c, uintptr_t *pcs, unsigned max)
{
	unsigned n = c->len < max ? c->len : max;

	for (unsigned i = 0; i < n; i++)
		pcs[i] = c->lv[c->len - 1 - i].pc;
	return n;
}

#endif /* TFA_CORE_STACK_CACHE_H */
