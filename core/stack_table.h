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
 *   node       one frame of a trie of stacks: its pc and its parent, the
 *              node of the next outer frame (NULL for an outermost frame).
 *              The stacks of one program share most of their outer frames,
 *              which the trie stores once (heaptrack's trace tree): a stack
 *              costs the nodes of the frames no stack before it had, not its
 *              depth.  Nodes live in chunks of TFA_STACK_NODE_CHUNK mapped
 *              from the arena, named by their number (1, 2, ...); once
 *              written, a node never changes or moves.
 *   directory  id -> the stack's innermost frame, as a node of its own whose
 *              parent is the trie's node of the next outer frame: the
 *              stack's frames are the chain from there to the root.  An
 *              innermost frame (the allocation's call site under its
 *              callers) is rarely any other stack's, and no stack is ever
 *              looked for under it: it stays out of the trie and its child
 *              index.  In leaves of TFA_STACK_DIR_LEAF ids mapped on first
 *              use.
 *   index      an open-addressing hash table from the 64-bit hash of a
 *              stack's frames to its id: each slot one word, 29 bits of the
 *              hash, the depth and the id.  Lookups take no lock: a slot is one
 *              atomic store, made after everything the stack needs, and a
 *              grown index is published whole, its address and size in one
 *              word.  An index replaced by a larger one stays mapped for
 *              readers still probing it, but its pages are given back (they
 *              read as zeroes, which a reader takes for a miss and retries
 *              under the lock).  A slot whose hash matches is checked frame by
 *              frame against the node chain: equal ids mean equal frames.
 *   child index  (parent node, pc) -> node, an open-addressing table of node
 *              numbers that inserts walk from the outermost frame inward to
 *              find the frames already in the trie.  Only inserts use it,
 *              under the lock.
 *
 * Only inserts of a stack never seen before take the table's lock, for as
 * long as it takes to find its known outer frames and add the others (and,
 * once per doubling, to rehash an index: O(distinct stacks) or O(nodes),
 * readers are not held up).  Memory grows with the number of distinct stacks
 * and the outer frames they do not share, never with the number of calls:
 * 16 bytes per node and 5-11 for its share of the child index (kept between
 * 3/8 and 3/4 full), 16-32 bytes per stack for its share of the index
 * (between 1/4 and 1/2 full) and 16 for its directory entry, its innermost
 * frame.
 */
#ifndef TFA_CORE_STACK_TABLE_H
#define TFA_CORE_STACK_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/lock.h"
#include "core/stack_cache.h"

/* Deeper stacks are truncated to their innermost TFA_STACK_DEPTH_MAX frames (9 bits). */
#define TFA_STACK_DEPTH_MAX 256

#define TFA_STACK_DIR_LEAF_LG 12
#define TFA_STACK_DIR_LEAF    (1u << TFA_STACK_DIR_LEAF_LG)
#define TFA_STACK_DIR_LEAVES  16384u
/* 67 million distinct stacks (26 bits): past that, intern returns 0. */
#define TFA_STACK_ID_MAX      (TFA_STACK_DIR_LEAF * TFA_STACK_DIR_LEAVES - 1)

typedef struct tfa_stack_node_s {
	uintptr_t pc;
	const struct tfa_stack_node_s *parent; /* the next outer frame; NULL: outermost */
} tfa_stack_node_t;

#define TFA_STACK_NODE_CHUNK_LG 12 /* 4096 nodes: 64 KiB */
#define TFA_STACK_NODE_CHUNK    (1u << TFA_STACK_NODE_CHUNK_LG)
#define TFA_STACK_NODE_CHUNKS   32768u
/* 134 million nodes (2 GiB of them): past that, new stacks that need nodes get 0. */
#define TFA_STACK_NODE_MAX      (TFA_STACK_NODE_CHUNK * TFA_STACK_NODE_CHUNKS - 1)

/* An index has 2^lg_cap slots; lg_cap never passes this (ids run out first). */
#define TFA_STACK_INDEX_LG_MAX 28

/*
 * Zero-initialised storage is an empty, usable table.  The fields readers
 * load on every lookup sit on their own cache line, away from the writer's.
 */
typedef struct tfa_stack_table_s {
	uintptr_t index TFA_ALIGNED_CACHELINE; /* slots | lg_cap, published with release */
	uint32_t count;                        /* ids 1..count are published */
	tfa_lock_t lock TFA_ALIGNED_CACHELINE; /* serialises inserts */
	uint32_t nodes;          /* nodes 1..nodes are in use (0 is none) */
	uint32_t children_lg;    /* the child index has 2^children_lg slots */
	uint32_t *children;      /* the child index: node numbers, 0 empty */
	size_t mapped; /* bytes mapped for the table; read without the lock */
	uint32_t limit; /* ids past this are not handed out; 0: TFA_STACK_ID_MAX */
	bool starved;   /* a new stack found no memory: stacks are missing from here on */
	uint64_t *indexes[TFA_STACK_INDEX_LG_MAX + 1]; /* each one mapped, by lg_cap */
	/* The last stack inserted, outermost frame first: the next one likely shares its outer frames. */
	unsigned path_len;
	uintptr_t path_pcs[TFA_STACK_DEPTH_MAX];
	const tfa_stack_node_t *path_nodes[TFA_STACK_DEPTH_MAX];
	tfa_stack_node_t *node_chunks[TFA_STACK_NODE_CHUNKS]; /* mapped in order; lookups hold pointers */
	/* Read by lookups, written once per leaf: away from the writer's fields. */
	tfa_stack_node_t *dir[TFA_STACK_DIR_LEAVES] TFA_ALIGNED_CACHELINE; /* by id: innermost frames */
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

/*
 * tfa_stack_table_intern of the stack a cached capture left in c (positions
 * [0, c->len), outermost first): hashes the positions past c->hashed and
 * compares the frames past c->known, the node of the others standing for
 * them, then fills both for the next capture.  Returns 0 as intern does.
 * REQUIRES: c's positions [0, known) had their nodes from this table.
 * [hot path] [never allocates] [takes table lock when the stack is new]
 */
uint32_t tfa_stack_table_intern_cached(tfa_stack_table_t *t, tfa_stack_cache_t *c);

/* tfa_stack_table_find of the cache's stack, as intern_cached finds it: never inserts.  [lock-free] */
uint32_t tfa_stack_table_find_cached(tfa_stack_table_t *t, tfa_stack_cache_t *c);

/* The id of stack pcs[0..depth) if it is in the table, else 0: never inserts.  [lock-free] */
uint32_t tfa_stack_table_find(const tfa_stack_table_t *t, const uintptr_t *pcs, unsigned depth);

/* For tests: the hash of pcs[0..depth) (innermost first) that the index keeps 29 bits of. */
uint64_t tfa_stack_table_test_hash(const uintptr_t *pcs, unsigned depth);

/*
 * At most `limit` stacks (0: TFA_STACK_ID_MAX): past it, intern finds known
 * stacks and returns 0 for new ones.  Set before the table is used.
 */
void tfa_stack_table_set_limit(tfa_stack_table_t *t, uint32_t limit);

/*
 * Copies the frames of stack id, innermost first, into out[0..max): returns
 * how many it copied, the stack's depth when max is at least that
 * (TFA_STACK_DEPTH_MAX always is), its innermost frames otherwise.  Returns
 * 0 for id 0 and ids never handed out.  [never allocates] [lock-free]
 */
unsigned tfa_stack_table_get(const tfa_stack_table_t *t, uint32_t id, uintptr_t *out, unsigned max);

/* Stacks in the table: the ids in use are 1..count.  [lock-free] */
uint32_t tfa_stack_table_count(const tfa_stack_table_t *t);

/* Bytes mapped for the table (its share of the shim's overhead). */
size_t tfa_stack_table_bytes(const tfa_stack_table_t *t);

/*
 * The table as a profile keeps it (TFA_REC_STACK_NODES, _LEAVES): node(arg,
 * no, pc, parent, parent_pc) for nodes 1..n in number order, n the last
 * node a stack published so far reaches, each with its parent's number (0:
 * an outermost frame, parent_pc 0), always below its own; then stack(arg,
 * id, pc, parent, parent_pc) for ids 1..count with the innermost frame and
 * the node of the next outer one.  Stacks interned meanwhile by other
 * threads may or may not be visited.  false: no memory for the scratch it
 * maps (a sorted list of the node chunks), nothing visited.
 * [never allocates] [lock-free]
 */
bool tfa_stack_table_foreach_tree(const tfa_stack_table_t *t,
                                  void (*node)(void *arg, uint32_t no, uintptr_t pc, uint32_t parent,
                                               uintptr_t parent_pc),
                                  void (*stack)(void *arg, uint32_t id, uintptr_t pc, uint32_t parent,
                                                uintptr_t parent_pc),
                                  void *arg);

/*
 * Calls fn on every stack in id order, with its frames in a buffer of
 * foreach's (valid during the call; TFA_STACK_DEPTH_MAX frames on the
 * stack).  Stacks interned meanwhile by other threads may or may not be
 * visited.  [never allocates] [lock-free]
 */
void tfa_stack_table_foreach(const tfa_stack_table_t *t,
                             void (*fn)(void *arg, uint32_t id, const uintptr_t *pcs,
                                        unsigned depth),
                             void *arg);

/*
 * Unmaps everything; the table is empty and usable again afterwards.
 * REQUIRES: no other thread uses the table.
 */
void tfa_stack_table_destroy(tfa_stack_table_t *t);

/* Fork: take the insert lock before fork, release (parent) or reset (child) after. */
void tfa_stack_table_prefork(tfa_stack_table_t *t);
void tfa_stack_table_postfork_parent(tfa_stack_table_t *t);
void tfa_stack_table_postfork_child(tfa_stack_table_t *t);

#endif /* TFA_CORE_STACK_TABLE_H */
