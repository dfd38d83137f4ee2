/* SPDX-License-Identifier: MIT */
/*
 * core/stack_table.h: deduplication, dense ids, frames read back unchanged
 * however the table grows, 200,000 distinct stacks with memory that grows
 * with them and not with the calls, outer frames stored once (stacks that
 * share them, or differ only in the outermost frame or in depth), threads
 * interning overlapping sets, arena exhaustion at every map, and fork (the
 * insert lock held across it, reset in the child).
 */
#include "core/stack_table.h"

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/thread.h"

/* Zeroed static storage is an empty table; each forked test gets a fresh one. */
static tfa_stack_table_t table;

static void
teardown(void)
{
	tfa_arena_inject_failure(-1);
	tfa_stack_table_destroy(&table);
}

#define STACK_DEPTH_MAX 32

/*
 * Stack k: a distinct innermost frame (it encodes k), then frames drawn from
 * a few hundred call sites, as outer frames repeat in real programs.  Depth
 * 1 to STACK_DEPTH_MAX.
 */
static unsigned
make_stack(uint32_t k, uintptr_t *pcs)
{
	unsigned depth = 1 + (k * 7u) % STACK_DEPTH_MAX;

	pcs[0] = 0x400000 + (uintptr_t)k * 16 + 5;
	for (unsigned j = 1; j < depth; j++)
		pcs[j] = 0x7f0000000000 + (uintptr_t)((k / (j + 1) + j * 37) % 300) * 64 + j;
	return depth;
}

/* Stack k as the table numbers it when they come in order: id k + 1. */
static unsigned
stack_of_id(uint32_t id, uintptr_t *pcs)
{
	return make_stack(id - 1, pcs);
}

static uint32_t
intern_k(uint32_t k)
{
	uintptr_t pcs[STACK_DEPTH_MAX];
	unsigned depth = make_stack(k, pcs);
	return tfa_stack_table_intern(&table, pcs, depth);
}

/* Whether id holds stack k's frames. */
static bool
holds_stack(uint32_t id, uint32_t k)
{
	uintptr_t want[STACK_DEPTH_MAX];
	unsigned want_depth = make_stack(k, want);
	uintptr_t pcs[TFA_STACK_DEPTH_MAX];
	unsigned depth = tfa_stack_table_get(&table, id, pcs, TFA_STACK_DEPTH_MAX);

	return depth == want_depth && memcmp(pcs, want, depth * sizeof(*pcs)) == 0;
}

/* The k a stored stack was made from, when it is well formed; UINT32_MAX otherwise. */
static uint32_t
stack_k(uint32_t id)
{
	uintptr_t pcs[TFA_STACK_DEPTH_MAX];
	unsigned depth = tfa_stack_table_get(&table, id, pcs, TFA_STACK_DEPTH_MAX);

	if (depth == 0)
		return UINT32_MAX;
	uint32_t k = (uint32_t)((pcs[0] - 0x400000 - 5) / 16);
	return holds_stack(id, k) ? k : UINT32_MAX;
}

/* Whether id holds pcs[0..depth). */
static bool
holds(uint32_t id, const uintptr_t *pcs, unsigned depth)
{
	uintptr_t got[TFA_STACK_DEPTH_MAX];

	return tfa_stack_table_get(&table, id, got, TFA_STACK_DEPTH_MAX) == depth
	       && memcmp(got, pcs, depth * sizeof(*pcs)) == 0;
}

/*
 * tfa_stack_table_foreach's visitor: ids come in order from 1, each with the
 * frames make(id) gives.
 */
struct visit_ctx {
	unsigned (*make)(uint32_t id, uintptr_t *pcs);
	uint32_t next_id;
	uint32_t bad;
};

static void
visit(void *arg, uint32_t id, const uintptr_t *pcs, unsigned depth)
{
	struct visit_ctx *c = arg;
	uintptr_t want[TFA_STACK_DEPTH_MAX];
	unsigned want_depth = c->make(id, want);

	if (id != c->next_id++ || depth != want_depth
	    || memcmp(pcs, want, depth * sizeof(*pcs)) != 0)
		c->bad++;
}

/*
 * tfa_stack_table_foreach_tree's visitors: the nodes kept as they come (each
 * numbered on from the last, its parent numbered below it and its parent's
 * pc the one kept), then each stack's frames rebuilt from its innermost pc
 * and node chain, and compared with tfa_stack_table_get's.
 */
struct tree_ctx {
	const tfa_stack_table_t *t;
	uintptr_t *pc;
	uint32_t *parent;
	uint32_t nnodes, cap;
	uint32_t next_id;
	uint32_t bad;
};

static void
visit_tree_node(void *arg, uint32_t no, uintptr_t pc, uint32_t parent, uintptr_t parent_pc)
{
	struct tree_ctx *c = arg;

	if (no != c->nnodes + 1 || parent >= no || parent_pc != (parent != 0 ? c->pc[parent] : 0)) {
		c->bad++;
		return;
	}
	if (no >= c->cap) {
		c->cap = c->cap == 0 ? 1024 : c->cap * 2;
		c->pc = realloc(c->pc, c->cap * sizeof(*c->pc));
		c->parent = realloc(c->parent, c->cap * sizeof(*c->parent));
		if (c->pc == NULL || c->parent == NULL)
			abort();
	}
	c->pc[no] = pc;
	c->parent[no] = parent;
	c->nnodes = no;
}

static void
visit_tree_stack(void *arg, uint32_t id, uintptr_t pc, uint32_t parent, uintptr_t parent_pc)
{
	struct tree_ctx *c = arg;
	uintptr_t want[TFA_STACK_DEPTH_MAX], got[TFA_STACK_DEPTH_MAX];
	unsigned depth = 0;

	if (id != c->next_id++ || parent > c->nnodes || parent_pc != (parent != 0 ? c->pc[parent] : 0)) {
		c->bad++;
		return;
	}
	got[depth++] = pc;
	for (uint32_t no = parent; no != 0 && depth < TFA_STACK_DEPTH_MAX; no = c->parent[no])
		got[depth++] = c->pc[no];
	unsigned want_depth = tfa_stack_table_get(c->t, id, want, TFA_STACK_DEPTH_MAX);
	if (depth != want_depth || memcmp(got, want, depth * sizeof(*got)) != 0)
		c->bad++;
}

/* Problems foreach_tree's view of t has; *stacks: how many it visited. */
static uint32_t
check_tree(const tfa_stack_table_t *t, uint32_t *stacks)
{
	struct tree_ctx c = { .t = t, .next_id = 1 };

	if (!tfa_stack_table_foreach_tree(t, visit_tree_node, visit_tree_stack, &c))
		c.bad++;
	free(c.pc);
	free(c.parent);
	*stacks = c.next_id - 1;
	return c.bad;
}

/* ---- basics ------------------------------------------------------------------------------- */
/* ---- basics ------------------------------------------------------------------------------- */

START_TEST(test_stack_table_dedup)
{
	uintptr_t a[] = { 0x401000, 0x402000, 0x403000 }, b[] = { 0x401000, 0x402000, 0x403008 };
	uintptr_t a_copy[3], pcs[4];

	ck_assert_uint_eq(tfa_stack_table_count(&table), 0);
	ck_assert_uint_eq(tfa_stack_table_get(&table, 1, pcs, 4), 0);

	ck_assert_uint_eq(tfa_stack_table_intern(&table, a, 3), 1);
	ck_assert_uint_eq(tfa_stack_table_intern(&table, a, 3), 1);
	memcpy(a_copy, a, sizeof(a));
	ck_assert_uint_eq(tfa_stack_table_intern(&table, a_copy, 3), 1);
	ck_assert_uint_eq(tfa_stack_table_intern(&table, b, 3), 2);
	ck_assert_uint_eq(tfa_stack_table_intern(&table, a, 3), 1);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 2);

	/* The frames are a copy: the caller's may change. */
	memset(a_copy, 0, sizeof(a_copy));
	a[1] = 0x402008;
	pcs[3] = 0xdead;
	ck_assert_uint_eq(tfa_stack_table_get(&table, 1, pcs, 4), 3);
	ck_assert_mem_eq(pcs, ((uintptr_t[]){ 0x401000, 0x402000, 0x403000 }), sizeof(a));
	ck_assert_uint_eq(pcs[3], 0xdead); /* nothing past the depth */
	ck_assert_uint_eq(tfa_stack_table_get(&table, 2, pcs, 4), 3);
	ck_assert_mem_eq(pcs, b, sizeof(b));

	/* A short buffer gets the innermost frames, and nothing past it. */
	memset(pcs, 0, sizeof(pcs));
	ck_assert_uint_eq(tfa_stack_table_get(&table, 2, pcs, 2), 2);
	ck_assert_mem_eq(pcs, b, 2 * sizeof(*b));
	ck_assert_uint_eq(pcs[2], 0);
	ck_assert_uint_eq(tfa_stack_table_get(&table, 2, pcs, 0), 0);

	/* No stack, and ids never handed out. */
	ck_assert_uint_eq(tfa_stack_table_intern(&table, a, 0), 0);
	ck_assert_uint_eq(tfa_stack_table_get(&table, 0, pcs, 4), 0);
	ck_assert_uint_eq(tfa_stack_table_get(&table, 3, pcs, 4), 0);
	ck_assert_uint_eq(tfa_stack_table_get(&table, UINT32_MAX, pcs, 4), 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 2);
}
END_TEST

/* Depth and order are part of a stack: prefixes, extensions and permutations differ. */
/* A limit: known stacks are still found, new ones get 0; find never inserts. */
START_TEST(test_stack_table_limit_and_find)
{
	uintptr_t pcs[5][2];

	for (int i = 0; i < 5; i++) {
		pcs[i][0] = 0x1000 + (uintptr_t)i;
		pcs[i][1] = 0x2000;
	}
	tfa_stack_table_set_limit(&table, 3);
	ck_assert_uint_eq(tfa_stack_table_find(&table, pcs[0], 2), 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs[i], 2), (uint32_t)i + 1);
	ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs[3], 2), 0);
	ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs[4], 2), 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs[i], 2), (uint32_t)i + 1);
		ck_assert_uint_eq(tfa_stack_table_find(&table, pcs[i], 2), (uint32_t)i + 1);
	}
	ck_assert_uint_eq(tfa_stack_table_find(&table, pcs[4], 2), 0);
	ck_assert_uint_eq(tfa_stack_table_find(&table, pcs[0], 1), 0); /* a prefix is another stack */
	ck_assert_uint_eq(tfa_stack_table_find(&table, pcs[0], 0), 0);
}
END_TEST

START_TEST(test_stack_table_distinguishes)
{
	static const uintptr_t frames[][4] = {
		{ 0x1000, 0x2000, 0x3000, 0 },      { 0x1000, 0x2000, 0, 0 },
		{ 0x1000, 0x2000, 0x3000, 0x4000 }, { 0x3000, 0x2000, 0x1000, 0 },
		{ 0x1000, 0x2000, 0x4000, 0 },      { 0x1000, 0, 0, 0 },
		{ 0x2000, 0x1000, 0, 0 },
	};
	static const unsigned depths[] = { 3, 2, 4, 3, 3, 1, 2 };
	uint32_t ids[TFA_ARRAY_SIZE(depths)];

	for (size_t i = 0; i < TFA_ARRAY_SIZE(depths); i++) {
		ids[i] = tfa_stack_table_intern(&table, frames[i], depths[i]);
		ck_assert_uint_eq(ids[i], i + 1);
	}
	for (size_t i = 0; i < TFA_ARRAY_SIZE(depths); i++) {
		ck_assert_uint_eq(tfa_stack_table_intern(&table, frames[i], depths[i]), ids[i]);
		ck_assert(holds(ids[i], frames[i], depths[i]));
	}
	ck_assert_uint_eq(tfa_stack_table_count(&table), TFA_ARRAY_SIZE(depths));
}
END_TEST

/* Deeper stacks keep their innermost TFA_STACK_DEPTH_MAX frames. */
START_TEST(test_stack_table_truncates_deep_stacks)
{
	enum { DEEP = TFA_STACK_DEPTH_MAX + 44 };
	uintptr_t deep[DEEP];

	for (unsigned i = 0; i < DEEP; i++)
		deep[i] = 0x500000 + i * 8;
	uint32_t id = tfa_stack_table_intern(&table, deep, DEEP);
	ck_assert_uint_eq(id, 1);
	ck_assert(holds(id, deep, TFA_STACK_DEPTH_MAX));
	ck_assert_uint_eq(tfa_stack_table_intern(&table, deep, TFA_STACK_DEPTH_MAX), id);
	deep[DEEP - 1] = 1; /* beyond the limit: the same stack */
	ck_assert_uint_eq(tfa_stack_table_intern(&table, deep, DEEP), id);
	deep[TFA_STACK_DEPTH_MAX - 1] = 1; /* within it: another */
	ck_assert_uint_eq(tfa_stack_table_intern(&table, deep, DEEP), 2);
}
END_TEST

/* A stack reads back the same while the table grows around it (its nodes never move). */
START_TEST(test_stack_table_frames_never_move)
{
	ck_assert_uint_eq(intern_k(0), 1);
	ck_assert(holds_stack(1, 0));
	for (uint32_t k = 1; k < 100000; k++)
		ck_assert_uint_eq(intern_k(k), k + 1);
	ck_assert(holds_stack(1, 0));
	ck_assert(holds_stack(100000, 99999));
}
END_TEST

/* ---- the trie ----------------------------------------------------------------------------- */

/*
 * Stacks that differ only in their outermost frame, or only in depth (one
 * is the other's inner or outer part), are other stacks.  The trie holds
 * the frames outer to the innermost, once: a stack that is the outer part
 * of a known one needs no new node.
 */
START_TEST(test_stack_table_outer_frames_and_depth)
{
	static const uintptr_t a[] = { 0x1000, 0x2000, 0x3000, 0x4000 };
	static const uintptr_t b[] = { 0x1000, 0x2000, 0x3000, 0x4008 }; /* a's but the outermost */

	ck_assert_uint_eq(tfa_stack_table_intern(&table, a, 4), 1);
	ck_assert_uint_eq(table.nodes, 3);
	ck_assert_uint_eq(tfa_stack_table_intern(&table, b, 4), 2);
	ck_assert_uint_eq(table.nodes, 6); /* another root: nothing shared */

	/* a's outer parts: a + 1, a + 2, a + 3 are its chain from the second frame on. */
	for (unsigned skip = 1; skip < 4; skip++) {
		ck_assert_uint_eq(tfa_stack_table_find(&table, a + skip, 4 - skip), 0);
		ck_assert_uint_eq(tfa_stack_table_intern(&table, a + skip, 4 - skip), 2 + skip);
	}
	ck_assert_uint_eq(table.nodes, 6);

	/* a's inner parts (its first frames): their outermost frame is another root. */
	for (unsigned depth = 1; depth < 4; depth++)
		ck_assert_uint_eq(tfa_stack_table_intern(&table, a, depth), 5 + depth);
	ck_assert_uint_eq(table.nodes, 6 + 0 + 1 + 2);

	/* One frame more on the outside of a (a caller of its outermost): all new. */
	uintptr_t longer[] = { 0x1000, 0x2000, 0x3000, 0x4000, 0x5000 };
	uint32_t nodes = table.nodes;
	ck_assert_uint_eq(tfa_stack_table_intern(&table, longer, 5), 9);
	ck_assert_uint_eq(table.nodes, nodes + 4);
	/* ...and one more on the inside (a callee of its innermost): a's frames are its outer ones. */
	uintptr_t inner[] = { 0x0800, 0x1000, 0x2000, 0x3000, 0x4000 };
	nodes = table.nodes;
	ck_assert_uint_eq(tfa_stack_table_intern(&table, inner, 5), 10);
	ck_assert_uint_eq(table.nodes, nodes + 1);

	ck_assert_uint_eq(tfa_stack_table_count(&table), 10);
	ck_assert_uint_eq(tfa_stack_table_intern(&table, a, 4), 1);
	ck_assert_uint_eq(tfa_stack_table_intern(&table, b, 4), 2);
	ck_assert(holds(1, a, 4));
	ck_assert(holds(2, b, 4));
	for (unsigned skip = 1; skip < 4; skip++) {
		ck_assert_uint_eq(tfa_stack_table_intern(&table, a + skip, 4 - skip), 2 + skip);
		ck_assert(holds(2 + skip, a + skip, 4 - skip));
	}
	for (unsigned depth = 1; depth < 4; depth++) {
		ck_assert_uint_eq(tfa_stack_table_find(&table, a, depth), 5 + depth);
		ck_assert(holds(5 + depth, a, depth));
	}
	ck_assert(holds(9, longer, 5));
	ck_assert(holds(10, inner, 5));
}
END_TEST

/*
 * Stack k of a binary call tree: the path to k from the root of a complete
 * binary tree (heap numbering), one frame per level: a left or right call
 * site at that level, under a common outer part of `outer` frames.  Every
 * stack is its parent's with one frame more on the inside.
 */
static unsigned
tree_stack(uint32_t k, unsigned outer, uintptr_t *pcs)
{
	unsigned levels = 0;

	for (uint32_t j = k; j > 1; j >>= 1)
		levels++;
	unsigned depth = levels + 1 + outer;
	uintptr_t *p = pcs;
	*p++ = 0x600000 + levels; /* the allocation's site */
	for (uint32_t j = k; j > 1; j >>= 1)
		*p++ = 0x610000 + (uintptr_t)(j & 1) * 0x100 + (uintptr_t)levels-- * 8;
	for (unsigned i = 0; i < outer; i++)
		*p++ = 0x7f1000000000 + (uintptr_t)i * 64;
	return depth;
}

/* Tree stack id under 3 outer frames: what the round trip interned as id, in that order. */
static unsigned
tree_stack_3(uint32_t id, uintptr_t *pcs)
{
	return tree_stack(id, 3, pcs);
}

/* What the whole-array layout cost: 8 bytes of id and depth, then the frames, per stack. */
#define SHARED_STACKS 10000u
#define SHARED_OUTER  40u

/* 10,000 stacks under one 40-frame outer part: their innermost frames, not 41 frames each. */
START_TEST(test_stack_table_shared_outer_frames_bytes)
{
	uintptr_t pcs[SHARED_OUTER + 1];
	size_t whole_array = 0;

	for (unsigned i = 0; i < SHARED_OUTER; i++)
		pcs[1 + i] = 0x7f2000000000 + (uintptr_t)i * 64;
	for (uint32_t k = 0; k < SHARED_STACKS; k++) {
		pcs[0] = 0x400000 + (uintptr_t)k * 16;
		ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs, SHARED_OUTER + 1), k + 1);
		whole_array += 8 + (SHARED_OUTER + 1) * sizeof(uintptr_t);
	}
	ck_assert_uint_eq(table.nodes, SHARED_OUTER);
	size_t bytes = tfa_stack_table_bytes(&table);
	/*
	 * The index (16 to 32 bytes a stack), the directory (16), the nodes
	 * of the outer part and their child index, each in its mappings: 52
	 * a stack here, against 336 of frames alone in whole arrays.
	 */
	ck_assert_msg(bytes < 64 * SHARED_STACKS, "%zu bytes for %u stacks", bytes, SHARED_STACKS);
	ck_assert_uint_lt(bytes * 5, whole_array);
	for (uint32_t k = 0; k < SHARED_STACKS; k += 97) {
		pcs[0] = 0x400000 + (uintptr_t)k * 16;
		ck_assert_uint_eq(tfa_stack_table_find(&table, pcs, SHARED_OUTER + 1), k + 1);
		ck_assert(holds(k + 1, pcs, SHARED_OUTER + 1));
	}

	/* A binary call tree: its stacks share all but their innermost frame. */
	tfa_stack_table_destroy(&table);
	uint32_t n = 1u << 14;
	for (uint32_t k = 1; k < n; k++) {
		unsigned depth = tree_stack(k, 10, pcs);
		ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs, depth), k);
	}
	/* The outer part once, and per stack its level's call (its site is its own). */
	ck_assert_uint_eq(table.nodes, 10 + n - 2);
	for (uint32_t k = 1; k < n; k++) {
		unsigned depth = tree_stack(k, 10, pcs);
		ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs, depth), k);
		ck_assert(holds(k, pcs, depth));
	}
}
END_TEST

START_TEST(test_stack_table_get_foreach_round_trip)
{
	uintptr_t pcs[64], got[64];
	const uint32_t n = 5000;

	/* Deepest first: each stack's inner frames before the outer part they share. */
	for (uint32_t k = n - 1; k >= 1; k--) {
		unsigned depth = tree_stack(k, 3, pcs);
		ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs, depth), n - k);
	}
	for (uint32_t k = 1; k < n; k++) {
		unsigned depth = tree_stack(k, 3, pcs);
		ck_assert_uint_eq(tfa_stack_table_get(&table, n - k, got, 64), depth);
		ck_assert_mem_eq(got, pcs, depth * sizeof(*pcs));
	}
	ck_assert_uint_eq(tfa_stack_table_count(&table), n - 1);

	/* Outermost first. */
	tfa_stack_table_destroy(&table);
	for (uint32_t k = 1; k < n; k++) {
		unsigned depth = tree_stack(k, 3, pcs);
		ck_assert_uint_eq(tfa_stack_table_intern(&table, pcs, depth), k);
	}
	for (uint32_t k = 1; k < n; k++) {
		unsigned depth = tree_stack(k, 3, pcs);
		ck_assert_uint_eq(tfa_stack_table_get(&table, k, got, 64), depth);
		ck_assert_mem_eq(got, pcs, depth * sizeof(*pcs));
		ck_assert_uint_eq(tfa_stack_table_find(&table, got, depth), k);
	}
	struct visit_ctx ctx = { .make = tree_stack_3, .next_id = 1 };
	tfa_stack_table_foreach(&table, visit, &ctx);
	ck_assert_uint_eq(ctx.bad, 0);
	ck_assert_uint_eq(ctx.next_id, n);
	uint32_t visited;
	ck_assert_uint_eq(check_tree(&table, &visited), 0);
	ck_assert_uint_eq(visited, n - 1);
	/* No page for its scratch: false, nothing visited (the writer then writes every stack whole). */
	tfa_arena_inject_failure(0);
	ck_assert_uint_eq(check_tree(&table, &visited), 1);
	ck_assert_uint_eq(visited, 0);
	tfa_arena_inject_failure(-1);
}
END_TEST

/* ---- scale and memory --------------------------------------------------------------------- */

#define MANY 200000u

START_TEST(test_stack_table_many_distinct)
{
	size_t arena_before = tfa_arena_mapped_bytes();
	size_t frames = 0;

	/* Ids are dense, in the order stacks are first seen. */
	for (uint32_t k = 0; k < MANY; k++) {
		uintptr_t pcs[STACK_DEPTH_MAX];
		uint32_t id = intern_k(k);
		if (id != k + 1)
			ck_abort_msg("stack %u: id %u", k, id);
		frames += make_stack(k, pcs);
	}
	ck_assert_uint_eq(tfa_stack_table_count(&table), MANY);
	size_t bytes = tfa_stack_table_bytes(&table);
	size_t arena = tfa_arena_mapped_bytes();

	/* Calls that find their stack cost no memory at all. */
	for (int pass = 0; pass < 3; pass++)
		for (uint32_t k = MANY; k-- > 0;)
			if (intern_k(k) != k + 1)
				ck_abort_msg("pass %d: stack %u changed its id", pass, k);
	ck_assert_uint_eq(tfa_stack_table_bytes(&table), bytes);
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), arena);
	ck_assert_uint_eq(tfa_stack_table_count(&table), MANY);

	/*
	 * What distinct stacks cost: 16 bytes a node, and no more nodes than
	 * outer frames; a child index at most 8/3 slots of 4 bytes a node; an
	 * index at most 4 slots of 8 bytes per stack (the replaced ones given
	 * back); 16 bytes of directory per id in 64 KiB leaves; the unused
	 * part of the last node chunk (64 KiB).
	 */
	size_t nodes = table.nodes;
	size_t bound = nodes * 16 + nodes * 32 / 3 + (size_t)MANY * (32 + 16) + (64 << 10) + (64 << 10);
	ck_assert_uint_le(nodes, frames - MANY);
	ck_assert_uint_ge(bytes, nodes * 16 + (size_t)MANY * (16 + 16));
	ck_assert_uint_le(bytes, bound);
	ck_assert_uint_ge(arena - arena_before, bytes);

	struct visit_ctx ctx = { .make = stack_of_id, .next_id = 1 };
	tfa_stack_table_foreach(&table, visit, &ctx);
	ck_assert_uint_eq(ctx.bad, 0);
	/* Nodes over many chunks, wherever mmap put them. */
	uint32_t visited;
	ck_assert_uint_gt(table.nodes, 8 * TFA_STACK_NODE_CHUNK);
	ck_assert_uint_eq(check_tree(&table, &visited), 0);
	ck_assert_uint_eq(visited, MANY);
	ck_assert_uint_eq(ctx.next_id, MANY + 1);

	/* Every mapping goes back, the replaced indexes included. */
	tfa_stack_table_destroy(&table);
	ck_assert_uint_eq(tfa_arena_mapped_bytes(), arena_before);
	ck_assert_uint_eq(tfa_stack_table_bytes(&table), 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 0);
	ck_assert_uint_eq(intern_k(7), 1);
	ck_assert(holds_stack(1, 7));
}
END_TEST

/* ---- threads ------------------------------------------------------------------------------ */

#ifdef __SANITIZE_THREAD__
/* ThreadSanitizer (build-tsan/) runs it 10 times smaller: the table still grows under the readers. */
#	define MT_STACKS 6000u
#else
#	define MT_STACKS 60000u
#endif
#define MT_THREADS 4
#define MT_PASSES  3

static uint32_t mt_ids[MT_THREADS][MT_STACKS];
static uint32_t mt_errors;
static int mt_stop;

/*
 * Every thread interns every stack, each in its own order (a different
 * stride through the set), several times: new stacks race each other and
 * the index grows while others probe it.
 */
static void *
mt_intern(void *arg)
{
	uint32_t t = (uint32_t)(uintptr_t)arg;
	static const uint32_t strides[MT_THREADS] = { 1, 7, 11, 13 };

	for (int pass = 0; pass < MT_PASSES; pass++) {
		for (uint32_t j = 0; j < MT_STACKS; j++) {
			uint32_t k = (uint32_t)(((uint64_t)j * strides[t] + t * 1009u) % MT_STACKS);
			uint32_t id = intern_k(k);
			/* An id found in the index can be looked up at once. */
			if (id == 0 || (mt_ids[t][k] != 0 && mt_ids[t][k] != id)
			    || stack_k(id) != k)
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
			mt_ids[t][k] = id;
		}
	}
	return NULL;
}

/* A published id picked at random (xorshift state *x), or 0 while none is. */
static uint32_t
pick_published(uint64_t *x)
{
	uint32_t n = tfa_stack_table_count(&table);

	if (n == 0)
		return 0;
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return 1 + (uint32_t)(*x % n);
}

/* Readers of published ids never see a partial stack. */
static void *
mt_read(void *arg)
{
	uint64_t x = (uintptr_t)arg | 1;

	while (!__atomic_load_n(&mt_stop, __ATOMIC_RELAXED)) {
		uint32_t id = pick_published(&x);
		if (id == 0)
			continue;
		if (stack_k(id) == UINT32_MAX)
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* A profile's writer meanwhile: every stack published when it starts, whole, and its nodes. */
static void *
mt_read_tree(void *arg)
{
	uint32_t *walks = arg;

	while (!__atomic_load_n(&mt_stop, __ATOMIC_RELAXED)) {
		uint32_t before = tfa_stack_table_count(&table), visited;
		if (check_tree(&table, &visited) != 0 || visited < before)
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
		++*walks;
	}
	return NULL;
}

START_TEST(test_stack_table_threads)
{
	pthread_t th[MT_THREADS], reader, tree_reader;
	static bool seen[MT_STACKS + 1];
	uint32_t walks = 0;

	ck_assert_int_eq(pthread_create(&reader, NULL, mt_read, (void *)(uintptr_t)99), 0);
	ck_assert_int_eq(pthread_create(&tree_reader, NULL, mt_read_tree, &walks), 0);
	for (uintptr_t t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, mt_intern, (void *)t), 0);
	for (int t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	__atomic_store_n(&mt_stop, 1, __ATOMIC_RELAXED);
	ck_assert_int_eq(pthread_join(reader, NULL), 0);
	ck_assert_int_eq(pthread_join(tree_reader, NULL), 0);

	ck_assert_uint_eq(mt_errors, 0);
	ck_assert_uint_ge(walks, 1);
	ck_assert_uint_eq(tfa_stack_table_count(&table), MT_STACKS);
	for (uint32_t k = 0; k < MT_STACKS; k++) {
		uint32_t id = mt_ids[0][k];
		for (int t = 1; t < MT_THREADS; t++)
			if (mt_ids[t][k] != id)
				ck_abort_msg("stack %u: id %u on thread 0, %u on thread %d", k, id,
				             mt_ids[t][k], t);
		if (id == 0 || id > MT_STACKS || seen[id])
			ck_abort_msg("stack %u: id %u out of range or given twice", k, id);
		seen[id] = true;
		if (!holds_stack(id, k))
			ck_abort_msg("stack %u: id %u holds other frames", k, id);
	}
}
END_TEST

/*
 * Threads intern the stacks of one call tree, each in its own order: the
 * nodes of shared outer frames are created by whichever thread comes first,
 * the others find them; a reader checks every published stack meanwhile.
 */
#ifdef __SANITIZE_THREAD__
#	define TREE_STACKS 4000u
#else
#	define TREE_STACKS 40000u
#endif
#define TREE_OUTER 20u

static uint32_t tree_ids[MT_THREADS][TREE_STACKS];

/* The k a stored tree stack was made from, when it is whole; 0 otherwise. */
static uint32_t
tree_k(uint32_t id)
{
	uintptr_t pcs[TFA_STACK_DEPTH_MAX], want[TFA_STACK_DEPTH_MAX];
	unsigned depth = tfa_stack_table_get(&table, id, pcs, TFA_STACK_DEPTH_MAX);

	if (depth < 1 + TREE_OUTER || pcs[0] - 0x600000 != depth - 1 - TREE_OUTER)
		return 0;
	uint32_t k = 1;
	for (unsigned m = depth - 1 - TREE_OUTER; m >= 1; m--)
		k = 2 * k + (uint32_t)((pcs[m] >> 8) & 1);
	if (k >= TREE_STACKS || tree_stack(k, TREE_OUTER, want) != depth
	    || memcmp(pcs, want, depth * sizeof(*pcs)) != 0)
		return 0;
	return k;
}

/*
 * What a cached capture of pcs[0..depth) leaves in the thread's cache c:
 * the positions it shares with the last stack kept (their hashes and nodes
 * too), the others written.  Then the stack table's lookup from there.
 */
static uint32_t
intern_via_cache(tfa_stack_cache_t *c, const uintptr_t *pcs, unsigned depth)
{
	unsigned keep = 0;

	while (keep < c->len && keep < depth && c->lv[keep].pc == pcs[depth - 1 - keep])
		keep++;
	for (unsigned p = keep; p < depth; p++)
		c->lv[p].pc = pcs[depth - 1 - p];
	c->len = depth;
	c->hashed = TFA_MIN(c->hashed, keep);
	c->known = TFA_MIN(c->known, keep);
	return tfa_stack_table_intern_cached(&table, c);
}

static tfa_stack_cache_t tree_caches[MT_THREADS];

static void *
tree_intern(void *arg)
{
	uint32_t t = (uint32_t)(uintptr_t)arg;
	static const uint32_t strides[MT_THREADS] = { 1, 7, 11, 13 };
	uintptr_t pcs[TFA_STACK_DEPTH_MAX];

	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t j = 0; j < TREE_STACKS - 1; j++) {
			/* Thread 0 goes from the root down, thread 1 from the leaves up. */
			uint32_t k = 1 + (uint32_t)(((uint64_t)j * strides[t] + t * 101u) % (TREE_STACKS - 1));
			if (t == 1)
				k = TREE_STACKS - 1 - j;
			unsigned depth = tree_stack(k, TREE_OUTER, pcs);
			/* Odd threads look up as the shim's cached captures do, from the outer node kept. */
			uint32_t id = t % 2 == 0 ? tfa_stack_table_intern(&table, pcs, depth)
						 : intern_via_cache(&tree_caches[t], pcs, depth);
			if (id == 0 || (tree_ids[t][k] != 0 && tree_ids[t][k] != id) || tree_k(id) != k)
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
			tree_ids[t][k] = id;
		}
	}
	return NULL;
}

static void *
tree_read(void *arg)
{
	uint64_t x = (uintptr_t)arg | 1;

	while (!__atomic_load_n(&mt_stop, __ATOMIC_RELAXED)) {
		uint32_t id = pick_published(&x);
		if (id == 0)
			continue;
		uint32_t k = tree_k(id);
		uintptr_t pcs[TFA_STACK_DEPTH_MAX];
		/*
		 * Not find: an id is published (count) before its stack enters the
		 * index, so the newest may not be found yet; intern looks again
		 * under the lock, which the insert that published it holds.
		 */
		if (k == 0 || tfa_stack_table_intern(&table, pcs, tree_stack(k, TREE_OUTER, pcs)) != id)
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/*
 * find, lock-free, while one writer grows the index again and again: every
 * stack whose intern has returned is found, also by a probe that began in
 * an index replaced meanwhile (its pages given back read as empty).
 */
static uint32_t find_done;              /* stacks 0..find_done-1 interned, published with release */
static uint32_t find_ids[MT_STACKS];

static void *
find_writer(void *arg)
{
	(void)arg;
	for (uint32_t k = 0; k < MT_STACKS; k++) {
		find_ids[k] = intern_k(k);
		__atomic_store_n(&find_done, k + 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&mt_stop, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *
find_reader(void *arg)
{
	uint64_t x = (uintptr_t)arg | 1;
	uintptr_t pcs[STACK_DEPTH_MAX];

	while (!__atomic_load_n(&mt_stop, __ATOMIC_ACQUIRE)) {
		uint32_t done = __atomic_load_n(&find_done, __ATOMIC_ACQUIRE);
		if (done == 0)
			continue;
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint32_t k = (uint32_t)(x % done);
		if (tfa_stack_table_find(&table, pcs, make_stack(k, pcs)) != find_ids[k])
			__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

START_TEST(test_stack_table_find_while_growing)
{
	pthread_t w, r[2];

	for (uintptr_t t = 0; t < 2; t++)
		ck_assert_int_eq(pthread_create(&r[t], NULL, find_reader, (void *)(t + 5)), 0);
	ck_assert_int_eq(pthread_create(&w, NULL, find_writer, NULL), 0);
	ck_assert_int_eq(pthread_join(w, NULL), 0);
	for (int t = 0; t < 2; t++)
		ck_assert_int_eq(pthread_join(r[t], NULL), 0);
	ck_assert_uint_eq(mt_errors, 0);
}
END_TEST

START_TEST(test_stack_table_threads_shared_nodes)
{
	pthread_t th[MT_THREADS], reader;
	static bool seen[TREE_STACKS];

	ck_assert_int_eq(pthread_create(&reader, NULL, tree_read, (void *)(uintptr_t)77), 0);
	for (uintptr_t t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, tree_intern, (void *)t), 0);
	for (int t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	__atomic_store_n(&mt_stop, 1, __ATOMIC_RELAXED);
	ck_assert_int_eq(pthread_join(reader, NULL), 0);

	ck_assert_uint_eq(mt_errors, 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), TREE_STACKS - 1);
	/* Each node once: the outer part, a call per tree node but the root. */
	ck_assert_uint_eq(table.nodes, TREE_OUTER + (TREE_STACKS - 2));
	for (uint32_t k = 1; k < TREE_STACKS; k++) {
		uint32_t id = tree_ids[0][k];
		for (int t = 1; t < MT_THREADS; t++)
			if (tree_ids[t][k] != id)
				ck_abort_msg("stack %u: id %u on thread 0, %u on thread %d", k, id,
				             tree_ids[t][k], t);
		if (id == 0 || id >= TREE_STACKS || seen[id])
			ck_abort_msg("stack %u: id %u out of range or given twice", k, id);
		seen[id] = true;
		if (tree_k(id) != k)
			ck_abort_msg("stack %u: id %u holds other frames", k, id);
	}
}
END_TEST

/* ---- memory exhaustion -------------------------------------------------------------------- */

START_TEST(test_stack_table_arena_exhausted)
{
	uintptr_t pcs[TFA_STACK_DEPTH_MAX];

	tfa_arena_inject_failure(0);
	ck_assert_uint_eq(intern_k(0), 0);
	ck_assert_uint_eq(intern_k(0), 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 0);
	ck_assert_uint_eq(tfa_stack_table_bytes(&table), 0);
	ck_assert_uint_eq(tfa_stack_table_get(&table, 1, pcs, TFA_STACK_DEPTH_MAX), 0);

	tfa_arena_inject_failure(-1);
	ck_assert_uint_eq(intern_k(0), 1);
	ck_assert(holds_stack(1, 0));
	/* Stack 0 is one frame, which needs no node: stack 1 maps the first node chunk. */
	ck_assert_uint_eq(intern_k(1), 2);

	/*
	 * With every map failing, new stacks go in until the current node
	 * chunk (or the child index, or the index, or the directory leaf) is
	 * full, then get 0; known stacks keep their ids throughout, since
	 * finding one needs no memory.
	 */
	tfa_arena_inject_failure(0);
	uint32_t k = 2, id;
	while ((id = intern_k(k)) != 0) {
		ck_assert_uint_eq(id, k + 1);
		k++;
	}
	ck_assert_uint_gt(k, 2);
	ck_assert_uint_eq(tfa_stack_table_count(&table), k);
	for (uint32_t i = 0; i < k; i++)
		ck_assert_uint_eq(intern_k(i), i + 1);
	ck_assert_uint_eq(intern_k(k), 0);
	ck_assert_uint_eq(tfa_stack_table_get(&table, k + 1, pcs, TFA_STACK_DEPTH_MAX), 0);

	tfa_arena_inject_failure(-1);
	ck_assert_uint_eq(intern_k(k), k + 1);
	ck_assert(holds_stack(k + 1, k));
}
END_TEST

/*
 * Every map the table makes fails in turn (SQLite's faultsim): after `budget`
 * successful maps, all fail.  No crash, no id given twice or holding the
 * wrong frames, and once memory is back every stack gets its id.
 */
#define FAULT_STACKS 30000u

START_TEST(test_stack_table_every_map_fails)
{
	static uint32_t ids[FAULT_STACKS];
	bool failed_somewhere = false;

	for (long budget = 0; budget < 40; budget++) {
		tfa_stack_table_destroy(&table);
		tfa_arena_inject_failure(budget);
		uint32_t next_id = 1, failures = 0;
		for (uint32_t k = 0; k < FAULT_STACKS; k++) {
			ids[k] = intern_k(k);
			if (ids[k] == 0) {
				failures++;
			} else if (ids[k] != next_id++ || !holds_stack(ids[k], k)) {
				ck_abort_msg("budget %ld: stack %u got id %u", budget, k, ids[k]);
			}
		}
		ck_assert_uint_eq(tfa_stack_table_count(&table), next_id - 1);
		failed_somewhere |= failures > 0;

		tfa_arena_inject_failure(-1);
		for (uint32_t k = 0; k < FAULT_STACKS; k++) {
			uint32_t id = intern_k(k);
			if (ids[k] != 0 ? id != ids[k] : id != next_id++)
				ck_abort_msg("budget %ld: stack %u: id %u after recovery", budget,
				             k, id);
			if (!holds_stack(id, k))
				ck_abort_msg("budget %ld: stack %u: wrong frames", budget, k);
		}
		ck_assert_uint_eq(tfa_stack_table_count(&table), FAULT_STACKS);
	}
	ck_assert(failed_somewhere);
}
END_TEST

/* ---- fork --------------------------------------------------------------------------------- */

struct intern_job {
	uint32_t k;
	uint32_t id;
	int done;
};

static void *
intern_job_run(void *arg)
{
	struct intern_job *job = arg;

	job->id = intern_k(job->k);
	__atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* prefork holds back inserts, and only inserts: known stacks are still found. */
START_TEST(test_stack_table_prefork_holds_inserts)
{
	struct intern_job new_stack = { .k = 100 }, known_stack = { .k = 5 };
	pthread_t a, b;

	for (uint32_t k = 0; k < 10; k++)
		ck_assert_uint_eq(intern_k(k), k + 1);
	tfa_stack_table_prefork(&table);
	ck_assert_int_eq(pthread_create(&a, NULL, intern_job_run, &new_stack), 0);
	ck_assert_int_eq(pthread_create(&b, NULL, intern_job_run, &known_stack), 0);
	ck_assert_int_eq(pthread_join(b, NULL), 0);
	ck_assert_uint_eq(known_stack.id, 6);
	sleep_ms(100);
	ck_assert_int_eq(__atomic_load_n(&new_stack.done, __ATOMIC_ACQUIRE), 0);

	/* The forking thread itself may intern: it holds the lock already. */
	tfa_tls.holds_all_locks = 1;
	ck_assert_uint_eq(intern_k(200), 11);
	tfa_tls.holds_all_locks = 0;

	tfa_stack_table_postfork_parent(&table);
	ck_assert_int_eq(pthread_join(a, NULL), 0);
	ck_assert_uint_eq(new_stack.id, 12);
	ck_assert(holds_stack(12, 100));
}
END_TEST

static int fork_stop;

/*
 * Interns new stacks until told to stop, so that inserts are under way
 * around every fork; in bursts with pauses, or memory would grow by
 * gigabytes while the children run.
 */
static void *
fork_churn(void *arg)
{
	uint32_t k = (uint32_t)(uintptr_t)arg;

	while (!__atomic_load_n(&fork_stop, __ATOMIC_RELAXED)) {
		(void)intern_k(k++);
		if (k % 64 == 0)
			sleep_ms(1);
	}
	return NULL;
}

/* What the child checks; its exit status says which check failed. */
static int
child_checks(uint32_t known_k, uint32_t known_id)
{
	uint32_t n = tfa_stack_table_count(&table);

	for (uint32_t id = 1; id <= n; id++)
		if (stack_k(id) == UINT32_MAX)
			return 2;
	if (intern_k(known_k) != known_id)
		return 3;
	/* An insert: deadlocks if the lock stayed held. */
	if (intern_k(50000000) != n + 1 || !holds_stack(n + 1, 50000000))
		return 4;
	if (tfa_stack_table_count(&table) != n + 1)
		return 5;
	return 0;
}

START_TEST(test_stack_table_fork_child_consistent)
{
	pthread_t churn;
	int status;

	for (uint32_t k = 0; k < 1000; k++)
		ck_assert_uint_eq(intern_k(k), k + 1);
	ck_assert_int_eq(pthread_create(&churn, NULL, fork_churn, (void *)(uintptr_t)1000), 0);
	for (int round = 0; round < 20; round++) {
		sleep_ms(2);
		tfa_stack_table_prefork(&table);
		pid_t pid = fork();
		if (pid == 0) {
			tfa_stack_table_postfork_child(&table);
			alarm(20);
			_exit(child_checks(500, 501));
		}
		tfa_stack_table_postfork_parent(&table);
		ck_assert_int_gt(pid, 0);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		              "round %d: child status %#x", round, status);
	}
	__atomic_store_n(&fork_stop, 1, __ATOMIC_RELAXED);
	ck_assert_int_eq(pthread_join(churn, NULL), 0);
	ck_assert_uint_gt(tfa_stack_table_count(&table), 1000);
}
END_TEST

/* ---- stacks a cached capture leaves (core/stack_cache.h) -------------------------------- */

static tfa_stack_table_t plain_table;
static tfa_stack_cache_t stack_cache;

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t
next_rng(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/*
 * A walk that kept positions [0, keep) of the last stack and found `fresh`
 * new inner frames: what tfa_cfi_capture_cached leaves in the cache.
 */
static void
cache_walk(tfa_stack_cache_t *c, unsigned keep, unsigned fresh, uint64_t *rng)
{
	for (unsigned p = keep; p < keep + fresh; p++)
		/* Few call sites per position: stacks repeat and share their outer frames. */
		c->lv[p].pc = 0x7f0000000000 + (uintptr_t)(next_rng(rng) % 3) * 64 + p;
	c->len = keep + fresh;
	c->fresh = fresh;
	c->hashed = TFA_MIN(c->hashed, keep);
	c->known = TFA_MIN(c->known, keep);
}

/*
 * tfa_stack_table_intern_cached against tfa_stack_table_intern on a table of
 * its own, over 20,000 walks that keep any part of the last stack: the same
 * ids in the same order (ids go to stacks as they are first seen), the same
 * frames, found again by tfa_stack_table_find and by find_cached; and the
 * hashes and nodes the cache keeps are those of its positions.
 */
START_TEST(test_stack_table_intern_cached)
{
	uint64_t rng = 88172645463325252u;
	uintptr_t pcs[TFA_STACK_CACHE_LEVELS];
	unsigned reused = 0;

	memset(&stack_cache, 0, sizeof(stack_cache));
	for (int round = 0; round < 20000; round++) {
		tfa_stack_cache_t *c = &stack_cache;
		unsigned keep = c->len == 0 ? 0 : (unsigned)(next_rng(&rng) % (c->len + 1));
		unsigned fresh = (unsigned)(next_rng(&rng) % 4) + (keep == 0);
		if (keep + fresh > 40)
			keep = 0, fresh = 1 + (unsigned)(next_rng(&rng) % 30);
		reused += keep != 0 && TFA_MIN(c->known, keep) != 0;
		cache_walk(c, keep, fresh, &rng);
		unsigned depth = tfa_stack_cache_pcs(c, pcs, TFA_STACK_CACHE_LEVELS);
		uint32_t id = tfa_stack_table_intern_cached(&table, c);
		uint32_t want = tfa_stack_table_intern(&plain_table, pcs, depth);
		ck_assert_uint_ne(id, 0);
		ck_assert_msg(id == want, "round %d: id %u, the plain table %u", round, id, want);
		ck_assert(holds(id, pcs, depth));
		ck_assert_uint_eq(tfa_stack_table_find(&table, pcs, depth), id);
		ck_assert_uint_eq(tfa_stack_table_find_cached(&table, c), id);
		ck_assert_uint_eq(c->hashed, depth);
		ck_assert_uint_eq(c->known, depth - 1);
		/* Each position's node holds that position and the outer ones. */
		unsigned p = next_rng(&rng) % depth;
		if (p + 1 < depth) {
			const tfa_stack_node_t *n = c->node[p];
			for (unsigned q = p + 1; q-- > 0; n = n->parent)
				ck_assert_uint_eq(n->pc, c->lv[q].pc);
			ck_assert_ptr_null(n);
		}
	}
	ck_assert_uint_eq(tfa_stack_table_count(&table), tfa_stack_table_count(&plain_table));
	ck_assert_uint_gt(tfa_stack_table_count(&table), 1000);
	ck_assert_uint_gt(reused, 5000); /* most lookups started from a known outer node */
	tfa_stack_table_destroy(&plain_table);
}
END_TEST

/* find_cached never inserts; a stack it misses, intern_cached adds, and it finds. */
START_TEST(test_stack_table_find_cached)
{
	uint64_t rng = 7;
	tfa_stack_cache_t *c = &stack_cache;

	memset(c, 0, sizeof(*c));
	cache_walk(c, 0, 12, &rng);
	ck_assert_uint_eq(tfa_stack_table_find_cached(&table, c), 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 0);
	uint32_t id = tfa_stack_table_intern_cached(&table, c);
	ck_assert_uint_eq(id, 1);
	/* One more inner frame under the known ones: a stack of its own, absent until interned. */
	cache_walk(c, 12, 1, &rng);
	ck_assert_uint_eq(tfa_stack_table_find_cached(&table, c), 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 1);
	ck_assert_uint_eq(tfa_stack_table_intern_cached(&table, c), 2);
	/* Back to the first: its outer frames known, the innermost one again. */
	cache_walk(c, 12, 0, &rng);
	ck_assert_uint_eq(tfa_stack_table_find_cached(&table, c), id);
	/* A limit reached: intern_cached gives 0 for a new stack (8 frames: none is that deep). */
	tfa_stack_table_set_limit(&table, 2);
	cache_walk(c, 5, 3, &rng);
	uintptr_t pcs[TFA_STACK_CACHE_LEVELS];
	unsigned depth = tfa_stack_cache_pcs(c, pcs, TFA_STACK_CACHE_LEVELS);
	ck_assert_uint_eq(depth, 8);
	ck_assert_uint_eq(tfa_stack_table_find(&table, pcs, depth), 0);
	ck_assert_uint_eq(tfa_stack_table_intern_cached(&table, c), 0);
	ck_assert_uint_eq(tfa_stack_table_count(&table), 2);
}
END_TEST

/*
 * Two stacks whose hashes agree in the 29 bits the index keeps, with the
 * same inner frames and different outer ones: a lookup that starts from the
 * trie's node of the outer frames must compare that node, not only the
 * frames it hashed.  The pair is searched for among 200,000 outer frames
 * (the birthday bound of 29 bits is about 23,000).
 */
START_TEST(test_stack_table_cached_hash_collision)
{
	enum { TRIES = 200000 };
	static uint64_t keyed[TRIES]; /* the key's 29 bits, then the outer frame's number */
	uintptr_t pcs[3] = { 0x401000, 0x402000, 0 };
	uintptr_t outer_a = 0, outer_b = 0;

	for (uint32_t i = 0; i < TRIES; i++) {
		pcs[2] = 0x7f0000000000 + (uintptr_t)i * 16;
		keyed[i] = (tfa_stack_table_test_hash(pcs, 3) >> 35) << 32 | i;
	}
	qsort(keyed, TRIES, sizeof(keyed[0]), cmp_u64);
	for (uint32_t i = 1; i < TRIES && outer_b == 0; i++) {
		if (keyed[i] >> 32 == keyed[i - 1] >> 32) {
			outer_a = 0x7f0000000000 + (uintptr_t)(uint32_t)keyed[i - 1] * 16;
			outer_b = 0x7f0000000000 + (uintptr_t)(uint32_t)keyed[i] * 16;
		}
	}
	ck_assert_msg(outer_b != 0, "no pair of colliding stacks among %d", TRIES);

	tfa_stack_cache_t *c = &stack_cache;
	memset(c, 0, sizeof(*c));
	/* Stack A: outer_a, 0x402000, 0x401000 (positions 0..2). */
	c->lv[0].pc = outer_a;
	c->lv[1].pc = 0x402000;
	c->lv[2].pc = 0x401000;
	c->len = 3;
	uint32_t a = tfa_stack_table_intern_cached(&table, c);
	ck_assert_uint_ne(a, 0);
	/* outer_b's node, by a stack that goes through it: outer_b, 0x402000, 0x999000. */
	memset(c, 0, sizeof(*c));
	c->lv[0].pc = outer_b;
	c->lv[1].pc = 0x402000;
	c->lv[2].pc = 0x999000;
	c->len = 3;
	ck_assert_uint_ne(tfa_stack_table_intern_cached(&table, c), 0);
	ck_assert_uint_eq(c->known, 2);
	/* Stack B, from that node: its hash finds A's slot, its outer node is not A's. */
	c->lv[2].pc = 0x401000;
	c->hashed = 2;
	ck_assert_uint_eq(tfa_stack_table_find_cached(&table, c), 0);
	uint32_t b = tfa_stack_table_intern_cached(&table, c);
	ck_assert_uint_ne(b, 0);
	ck_assert_uint_ne(b, a);
	uintptr_t want_b[3] = { 0x401000, 0x402000, outer_b };
	ck_assert(holds(b, want_b, 3));
}
END_TEST

static Suite *
stack_table_suite(void)
{
	Suite *s = suite_create("stack_table");
	TCase *tc;

	tc = tcase_create("basics");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_stack_table_dedup);
	tcase_add_test(tc, test_stack_table_distinguishes);
	tcase_add_test(tc, test_stack_table_limit_and_find);
	tcase_add_test(tc, test_stack_table_truncates_deep_stacks);
	tcase_add_test(tc, test_stack_table_frames_never_move);
	tcase_add_test(tc, test_stack_table_outer_frames_and_depth);
	tcase_add_test(tc, test_stack_table_shared_outer_frames_bytes);
	tcase_add_test(tc, test_stack_table_get_foreach_round_trip);
	tcase_add_test(tc, test_stack_table_arena_exhausted);
	tcase_add_test(tc, test_stack_table_intern_cached);
	tcase_add_test(tc, test_stack_table_find_cached);
	tcase_add_test(tc, test_stack_table_cached_hash_collision);
	suite_add_tcase(s, tc);

	tc = tcase_create("scale");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_stack_table_many_distinct);
	tcase_add_test(tc, test_stack_table_every_map_fails);
	suite_add_tcase(s, tc);

	/* A case of its own: build-tsan/ runs it alone (CK_RUN_CASE=threads). */
	tc = tcase_create("threads");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_stack_table_threads);
	tcase_add_test(tc, test_stack_table_threads_shared_nodes);
	tcase_add_test(tc, test_stack_table_find_while_growing);
	suite_add_tcase(s, tc);

	tc = tcase_create("fork");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_stack_table_prefork_holds_inserts);
	tcase_add_test(tc, test_stack_table_fork_child_consistent);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(stack_table_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
