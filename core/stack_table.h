/* SPDX-License-Identifier: MIT */
/*
 * The stack table: every distinct call stack the shim captured, stored once
 * and named by a small number, so that an allocation record holds 4 bytes of
 * stack instead of its frames.
 *
 * Glossary:
 *   stack id   1, 2, 3, ... in the order stacks were first seen; 0 means "no
 *              stack" (none captured, or no memory to keep it).  Ids are
 *              dense, so per-stack statistics can be arrays indexed by id.
 *   stack rec  a stack's id, depth and frames, in append-only chunks mapped
 *              from the arena: once interned, a stack's frames never move, and
 *              a pointer to them stays valid until the table is destroyed.
 *   index      an open-addressing hash table from the 64-bit hash of the
 *              frames to the stack rec.  Lookups take no lock: a slot is
 *              written before its hash is published, and a grown index is
 *              published whole, its address and size in one word.  An index
 *              replaced by a larger one stays mapped for readers still
 *              probing it, but its pages are given back (they read as zeroes,
 *              which a reader takes for a miss and retries under the lock).
 *   directory  id -> stack rec, in leaves of TFA_STACK_DIR_LEAF ids mapped on
 *              first use.
 *
 * Only inserts of a stack never seen before take the table's lock, for as
 * long as it takes to copy the frames (and, once per doubling, to rehash the
 * index: O(distinct stacks), readers are not held up).  Memory grows with the
 * number of distinct stacks, never with the number of calls: 8 + 8 * depth
 * bytes per stack for its rec, 32-64 for its share of the index (kept between
 * 1/4 and 1/2 full) and 8 for its directory entry.
 */
#ifndef TFA_CORE_STACK_TABLE_H
#define TFA_CORE_STACK_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/lock.h"

/* Deeper stacks are truncated to their innermost TFA_STACK_DEPTH_MAX frames. */
#define TFA_STACK_DEPTH_MAX 256

#define TFA_STACK_DIR_LEAF_LG 12
#define TFA_STACK_DIR_LEAF    (1u << TFA_STACK_DIR_LEAF_LG)
#define TFA_STACK_DIR_LEAVES  16384u
/* 67 million distinct stacks: past that, intern returns 0. */
#define TFA_STACK_ID_MAX      (TFA_STACK_DIR_LEAF * TFA_STACK_DIR_LEAVES - 1)

typedef struct tfa_stack_rec_s {
	uint32_t id;
	uint32_t depth;
	uintptr_t pcs[];
} tfa_stack_rec_t;

typedef struct tfa_stack_slot_s {
	uint64_t hash; /* 0: empty; written last */
	const tfa_stack_rec_t *rec;
} tfa_stack_slot_t;

/* An index has 2^lg_cap slots; lg_cap never passes this (ids run out first). */
#define TFA_STACK_INDEX_LG_MAX 31

/*
 * Zero-initialised storage is an empty, usable table.  The fields readers
 * load on every lookup sit on their own cache line, away from the writer's.
 */
typedef struct tfa_stack_table_s {
	uintptr_t index TFA_ALIGNED_CACHELINE; /* slots | lg_cap, published with release */
	uint32_t count;                        /* ids 1..count are published */
	tfa_lock_t lock TFA_ALIGNED_CACHELINE; /* serialises inserts */
	char *chunk_cur;                       /* bump allocation of stack recs */
	size_t chunk_left;
	void *chunks;  /* every chunk, linked through its first word */
	size_t mapped; /* bytes mapped for the table; read without the lock */
	uint32_t limit; /* ids past this are not handed out; 0: TFA_STACK_ID_MAX */
	bool starved;   /* a new stack found no memory: stacks are missing from here on */
	tfa_stack_slot_t *indexes[TFA_STACK_INDEX_LG_MAX + 1]; /* each one mapped, by lg_cap */
	const tfa_stack_rec_t **dir[TFA_STACK_DIR_LEAVES];
} tfa_stack_table_t;

/* The process's stacks, shared by every tracker. */
extern tfa_stack_table_t tfa_process_stacks;

/*
 * The id of the stack pcs[0..depth) (innermost frame first), interning it
 * when it is new.  Equal frame sequences get equal ids, from any thread.
 * Returns 0 when depth is 0 or no memory can be had for a new stack (the
 * caller records "no stack"); stacks already in the table are still found
 * then.  Not async-signal-safe: an insert takes the table's lock (not when
 * the caller holds every lock for fork, tfa_tls.holds_all_locks).
 * [hot path] [never allocates] [takes table lock when the stack is new]
 */
uint32_t tfa_stack_table_intern(tfa_stack_table_t *t, const uintptr_t *pcs, unsigned depth);

/* The id of stack pcs[0..depth) if it is in the table, else 0: never inserts.  [lock-free] */
uint32_t tfa_stack_table_find(const tfa_stack_table_t *t, const uintptr_t *pcs, unsigned depth);

/*
 * At most `limit` stacks (0: TFA_STACK_ID_MAX): past it, intern finds known
 * stacks and returns 0 for new ones.  Set before the table is used.
 */
void tfa_stack_table_set_limit(tfa_stack_table_t *t, uint32_t limit);

/*
 * The depth of stack id, and in *pcs its frames, which stay where they are
 * until the table is destroyed.  Returns 0 (and *pcs NULL) for id 0 and ids
 * never handed out.  [never allocates] [lock-free]
 */
unsigned tfa_stack_table_get(const tfa_stack_table_t *t, uint32_t id, const uintptr_t **pcs);

/* Stacks in the table: the ids in use are 1..count.  [lock-free] */
uint32_t tfa_stack_table_count(const tfa_stack_table_t *t);

/* Bytes mapped for the table (its share of the shim's overhead). */
size_t tfa_stack_table_bytes(const tfa_stack_table_t *t);

/*
 * Calls fn on every stack in id order.  Stacks interned meanwhile by other
 * threads may or may not be visited.  [lock-free]
 */
void tfa_stack_table_foreach(const tfa_stack_table_t *t,
                             void (*fn)(void *arg, uint32_t id, const uintptr_t *pcs,
                                        unsigned depth),
                             void *arg);

/*
 * Unmaps everything; the table is empty and usable again afterwards.
 * REQUIRES: no other thread uses the table, and no frame pointer from
 * tfa_stack_table_get is used afterwards.
 */
void tfa_stack_table_destroy(tfa_stack_table_t *t);

/* Fork: take the insert lock before fork, release (parent) or reset (child) after. */
void tfa_stack_table_prefork(tfa_stack_table_t *t);
void tfa_stack_table_postfork_parent(tfa_stack_table_t *t);
void tfa_stack_table_postfork_child(tfa_stack_table_t *t);

#endif /* TFA_CORE_STACK_TABLE_H */
