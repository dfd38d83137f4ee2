/* SPDX-License-Identifier: MIT */
#include "core/stack_table.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "core/arena.h"
#include "core/log.h"
#include "core/thread.h"

tfa_stack_table_t tfa_process_stacks;

/*
 * An index word: the slots' address (page aligned) with lg_cap in its low
 * bits, so that a reader loads both consistently in one load.
 */
#define INDEX_LG_MASK ((uintptr_t)63)

static TFA_ALWAYS_INLINE uint64_t *
index_slots(uintptr_t index)
{
	return (uint64_t *)(index & ~INDEX_LG_MASK);
}

static TFA_ALWAYS_INLINE uint32_t
index_lg_cap(uintptr_t index)
{
	return (uint32_t)(index & INDEX_LG_MASK);
}

#define INDEX_LG_CAP_INITIAL    10 /* 1024 slots: 8 KiB */
#define CHILDREN_LG_CAP_INITIAL 10 /* 1024 slots: 4 KiB */
#define NODE_CHUNK_BYTES        (TFA_STACK_NODE_CHUNK * sizeof(tfa_stack_node_t))

_Static_assert(sizeof(tfa_stack_node_t) == 16, "nodes are 16 bytes");
_Static_assert(TFA_STACK_CACHE_LEVELS <= TFA_STACK_DEPTH_MAX, "a cached stack is never truncated");
_Static_assert(TFA_STACK_INDEX_LG_MAX <= INDEX_LG_MASK, "lg_cap fits below the page offset");
_Static_assert(TFA_STACK_DEPTH_MAX < TFA_STACK_NODE_CHUNK,
               "the nodes of one stack need at most one new chunk");
_Static_assert(TFA_STACK_DEPTH_MAX * 4 <= (3u << CHILDREN_LG_CAP_INITIAL),
               "one doubling of the child index makes room for any stack");

static TFA_ALWAYS_INLINE uint64_t
mix(uint64_t a, uint64_t b)
{
	__uint128_t r = (__uint128_t)a * b;
	return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/*
 * wyhash's multiply-fold, one frame at a time from the outermost inwards,
 * so that the hash of a stack is the hash of its outer frames taken one
 * frame further: a capture that kept its outer frames from the last one
 * (core/stack_cache.h) hashes only its new inner frames.  The constants
 * have their top bit set: no user-space address equals one, so no frame
 * zeroes a product.  (Two frames a multiplication, inner first, halved the
 * dependency chain of a whole stack; the cached captures hash a few frames.)
 */
#define HASH_SEED UINT64_C(0x8ebc6af09c88c6e3)

static TFA_ALWAYS_INLINE uint64_t
hash_step(uint64_t outer, uintptr_t pc)
{
	return mix(pc ^ UINT64_C(0xa0761d6478bd642f), outer ^ UINT64_C(0xe7037ed1a0b428db));
}

static TFA_ALWAYS_INLINE uint64_t
stack_hash(const uintptr_t *pcs, unsigned depth)
{
	uint64_t h = HASH_SEED;

	for (unsigned i = depth; i-- > 0;)
		h = hash_step(h, pcs[i]);
	return h;
}

/*
 * A slot: the top 29 bits of its stack's hash, its depth (9 bits) and its id
 * (26 bits), so that a probe tells most other stacks from the word alone.
 * Never 0 (the empty slot): depth is at least 1.  A slot's home is its hash
 * bits' low lg_cap bits, so a grown index places a slot without its frames.
 */
#define SLOT_ID_BITS    26
#define SLOT_DEPTH_BITS 9
#define SLOT_KEY_BITS   (64 - SLOT_ID_BITS)
#define SLOT_ID_MASK    ((UINT64_C(1) << SLOT_ID_BITS) - 1)

_Static_assert(TFA_STACK_ID_MAX <= SLOT_ID_MASK, "ids fit in a slot");
_Static_assert(TFA_STACK_DEPTH_MAX < (1u << SLOT_DEPTH_BITS), "depths fit in a slot");
_Static_assert(TFA_STACK_INDEX_LG_MAX <= SLOT_KEY_BITS - SLOT_DEPTH_BITS,
               "a slot's home is in its hash bits");

/* The slot's bits above the id: hash bits, then depth. */
static TFA_ALWAYS_INLINE uint64_t
slot_key(uint64_t h, unsigned depth)
{
	return (h >> (64 - (SLOT_KEY_BITS - SLOT_DEPTH_BITS))) << SLOT_DEPTH_BITS | depth;
}

/* The home of a hash or of a slot: their top 29 bits are the same. */
static TFA_ALWAYS_INLINE uint64_t
slot_home(uint64_t h_or_slot, uint64_t mask)
{
	return (h_or_slot >> (64 - (SLOT_KEY_BITS - SLOT_DEPTH_BITS))) & mask;
}

static TFA_ALWAYS_INLINE const tfa_stack_node_t *
node_at(const tfa_stack_table_t *t, uint32_t no)
{
	const tfa_stack_node_t *chunk =
	        __atomic_load_n(&t->node_chunks[no >> TFA_STACK_NODE_CHUNK_LG], __ATOMIC_RELAXED);
	return chunk + (no & (TFA_STACK_NODE_CHUNK - 1));
}

/*
 * Stack id's innermost frame, its directory entry (id: a slot's low bits
 * will do, the masks drop the rest).  REQUIRES: id <= a count loaded with
 * acquire, or the lock.
 */
static TFA_ALWAYS_INLINE const tfa_stack_node_t *
stack_node(const tfa_stack_table_t *t, uint32_t id)
{
	const tfa_stack_node_t *leaf = __atomic_load_n(
	        &t->dir[(id >> TFA_STACK_DIR_LEAF_LG) & (TFA_STACK_DIR_LEAVES - 1)], __ATOMIC_RELAXED);
	return &leaf[id & (TFA_STACK_DIR_LEAF - 1)];
}

/*
 * Whether the chain from n is pcs[0..depth), frame by frame (its depth is
 * the slot's, known equal).  An odd frame first, then two a turn: the chain
 * is one dependent load after another, the loop's own count need not add to
 * it.
 */
static TFA_ALWAYS_INLINE bool
chain_equals(const tfa_stack_node_t *n, const uintptr_t *pcs, unsigned depth)
{
	const uintptr_t *end = pcs + depth;

	if (depth & 1) {
		if (n->pc != *pcs++)
			return false;
		n = n->parent;
	}
	for (; pcs != end; pcs += 2) {
		if (n->pc != pcs[0])
			return false;
		n = n->parent;
		if (n->pc != pcs[1])
			return false;
		n = n->parent;
	}
	return true;
}

/*
 * The id of pcs in the index, or 0.  Safe against a concurrent insert: a
 * slot is published after its stack's nodes and directory entry, in one word.
 */
static TFA_ALWAYS_INLINE uint32_t
index_find(const tfa_stack_table_t *t, uintptr_t index, uint64_t h, const uintptr_t *pcs,
           unsigned depth)
{
	const uint64_t *slots = index_slots(index);
	uint32_t lg_cap = index_lg_cap(index);
	uint64_t mask = ((uint64_t)1 << lg_cap) - 1;
	uint64_t key = slot_key(h, depth);
	uint64_t i = slot_home(h, mask);

	for (;;) {
		/* 0: empty, or a replaced index whose pages were just given back. */
		uint64_t slot = __atomic_load_n(&slots[i], __ATOMIC_ACQUIRE);
		if (slot == 0)
			return 0;
		if (slot >> SLOT_ID_BITS == key && chain_equals(stack_node(t, (uint32_t)slot), pcs, depth)) {
			uint32_t id = (uint32_t)(slot & SLOT_ID_MASK);
			if (id == 0)
				__builtin_unreachable(); /* a slot's id: the caller need not test it */
			return id;
		}
		i = (i + 1) & mask;
	}
}

/* REQUIRES: the index is not published yet, or the table lock is held. */
static void
index_place(uint64_t *slots, uint32_t lg_cap, uint64_t slot)
{
	uint64_t mask = ((uint64_t)1 << lg_cap) - 1;
	uint64_t i = slot_home(slot, mask);

	while (slots[i] != 0)
		i = (i + 1) & mask;
	__atomic_store_n(&slots[i], slot, __ATOMIC_RELEASE);
}

/* filled: the caller writes all of it now (an index rehashed into), so its pages come in one call. */
static void *
table_map(tfa_stack_table_t *t, size_t bytes, bool filled)
{
	void *p = filled ? tfa_arena_map_filled(bytes) : tfa_arena_map(bytes);

	if (p != NULL)
		__atomic_fetch_add(&t->mapped, bytes, __ATOMIC_RELAXED);
	return p;
}

static void
table_unmap(tfa_stack_table_t *t, void *p, size_t bytes)
{
	tfa_arena_unmap(p, bytes);
	__atomic_fetch_sub(&t->mapped, bytes, __ATOMIC_RELAXED);
}

/*
 * Publishes an index of 2^lg_cap slots holding every stack of the current
 * one.  The current one stays mapped, but its pages go back to the system:
 * a reader that loaded it before the switch keeps probing valid memory, now
 * zeroes, and at worst misses a stack, which then takes the locked path and
 * finds it.  REQUIRES: lock held.
 */
static int
index_grow(tfa_stack_table_t *t, uint32_t lg_cap)
{
	uintptr_t old = t->index;
	/* The first index starts empty; a later one is filled here, every page of it. */
	uint64_t *slots = table_map(t, sizeof(uint64_t) << lg_cap, old != 0);

	if (slots == NULL)
		return -1;
	t->indexes[lg_cap] = slots;
	if (old == 0) {
		__atomic_store_n(&t->index, (uintptr_t)slots | lg_cap, __ATOMIC_RELEASE);
		return 0;
	}

	uint64_t *old_slots = index_slots(old);
	uint64_t old_cap = (uint64_t)1 << index_lg_cap(old);
	for (uint64_t i = 0; i < old_cap; i++)
		if (old_slots[i] != 0)
			index_place(slots, lg_cap, old_slots[i]);
	__atomic_store_n(&t->index, (uintptr_t)slots | lg_cap, __ATOMIC_RELEASE);
	if (madvise(old_slots, old_cap * sizeof(uint64_t), MADV_DONTNEED) == 0)
		__atomic_fetch_sub(&t->mapped, old_cap * sizeof(uint64_t), __ATOMIC_RELAXED);
	return 0;
}

/*
 * Room for one more stack: an index at most half full after the insert, or,
 * when it cannot grow, at most 3/4 full (probes stay short).  Returns false
 * when neither holds.  REQUIRES: lock held.
 */
static bool
index_make_room(tfa_stack_table_t *t)
{
	uint32_t lg_cap = index_lg_cap(t->index);
	uint64_t n = (uint64_t)t->count + 1;

	if (t->index == 0)
		return index_grow(t, INDEX_LG_CAP_INITIAL) == 0;
	if (n * 2 <= ((uint64_t)1 << lg_cap))
		return true;
	if (lg_cap < TFA_STACK_INDEX_LG_MAX && index_grow(t, lg_cap + 1) == 0)
		return true;
	return n * 4 <= ((uint64_t)3 << lg_cap);
}

/*
 * The directory slot of id, mapping its leaf when needed (id 0's slot is
 * never used: indexing by id saves the hot path a subtraction).  REQUIRES:
 * lock held.
 */
static tfa_stack_node_t *
dir_slot(tfa_stack_table_t *t, uint32_t id)
{
	uint32_t leaf_no = id >> TFA_STACK_DIR_LEAF_LG;
	tfa_stack_node_t *leaf = t->dir[leaf_no];

	if (leaf == NULL) {
		leaf = table_map(t, TFA_STACK_DIR_LEAF * sizeof(*leaf), false);
		if (leaf == NULL)
			return NULL;
		__atomic_store_n(&t->dir[leaf_no], leaf, __ATOMIC_RELEASE);
	}
	return &leaf[id & (TFA_STACK_DIR_LEAF - 1)];
}

static TFA_ALWAYS_INLINE uint64_t
child_hash(const tfa_stack_node_t *parent, uintptr_t pc)
{
	return mix(pc ^ UINT64_C(0xa0761d6478bd642f), (uintptr_t)parent ^ UINT64_C(0xe7037ed1a0b428db));
}

/*
 * A child index slot holds the node's number and, in the bits above the
 * largest number, bits of its hash other than those that chose the slot: a
 * probe past another node's slot reads the node (a cache miss, most of the
 * time, on a large table) only once in 32.  cc1plus's inserts had spent half
 * their samples on those reads.
 */
#define CHILD_NO_BITS 27
#define CHILD_NO_MASK ((1u << CHILD_NO_BITS) - 1)
_Static_assert(TFA_STACK_NODE_MAX <= CHILD_NO_MASK, "node numbers fit below the tag");

static TFA_ALWAYS_INLINE uint32_t
child_tag(uint64_t h)
{
	return (uint32_t)h & ~CHILD_NO_MASK;
}

/* The node of pc under parent (NULL: an outermost frame), or 0.  REQUIRES: lock held. */
static uint32_t
child_find(const tfa_stack_table_t *t, const tfa_stack_node_t *parent, uintptr_t pc)
{
	if (t->children == NULL)
		return 0;
	uint32_t mask = (1u << t->children_lg) - 1;
	uint64_t h = child_hash(parent, pc);
	uint32_t i = (uint32_t)(h >> (64 - t->children_lg)), tag = child_tag(h);

	for (;;) {
		uint32_t slot = t->children[i];
		if (slot == 0)
			return 0;
		if ((slot & ~CHILD_NO_MASK) == tag) {
			const tfa_stack_node_t *n = node_at(t, slot & CHILD_NO_MASK);
			if (n->pc == pc && n->parent == parent)
				return slot & CHILD_NO_MASK;
		}
		i = (i + 1) & mask;
	}
}

static void
child_place(uint32_t *children, uint32_t lg_cap, const tfa_stack_node_t *n, uint32_t no)
{
	uint32_t mask = (1u << lg_cap) - 1;
	uint64_t h = child_hash(n->parent, n->pc);
	uint32_t i = (uint32_t)(h >> (64 - lg_cap));

	while (children[i] != 0)
		i = (i + 1) & mask;
	children[i] = no | child_tag(h);
}

/*
 * Room for `more` nodes: their chunks mapped, a child index at most 3/4 full
 * with them.  Only inserts read the child index, under the lock: a replaced
 * one goes at once.  REQUIRES: lock held.
 */
static bool
nodes_make_room(tfa_stack_table_t *t, unsigned more)
{
	if (more == 0)
		return true;
	if ((uint64_t)t->nodes + more > TFA_STACK_NODE_MAX)
		return false;
	/* Chunks are mapped in order: the last new node's is the only one that can be missing. */
	uint32_t c = (t->nodes + more) >> TFA_STACK_NODE_CHUNK_LG;
	if (t->node_chunks[c] == NULL) {
		tfa_stack_node_t *chunk = table_map(t, NODE_CHUNK_BYTES, false);
		if (chunk == NULL)
			return false;
		__atomic_store_n(&t->node_chunks[c], chunk, __ATOMIC_RELEASE);
	}

	uint64_t n = (uint64_t)t->nodes + more;
	if (t->children != NULL && n * 4 <= ((uint64_t)3 << t->children_lg))
		return true;
	uint32_t lg_cap = t->children == NULL ? CHILDREN_LG_CAP_INITIAL : t->children_lg + 1;
	uint32_t *children = table_map(t, sizeof(uint32_t) << lg_cap, t->nodes != 0);
	if (children == NULL)
		return false;
	for (uint32_t no = 1; no <= t->nodes; no++)
		child_place(children, lg_cap, node_at(t, no), no);
	if (t->children != NULL)
		table_unmap(t, t->children, sizeof(uint32_t) << t->children_lg);
	t->children = children;
	t->children_lg = lg_cap;
	return true;
}

/*
 * A new node, pc under parent.  Readers reach it only through a stack
 * published after it.  REQUIRES: lock held, room made.
 */
static const tfa_stack_node_t *
node_add(tfa_stack_table_t *t, const tfa_stack_node_t *parent, uintptr_t pc)
{
	uint32_t no = ++t->nodes;
	tfa_stack_node_t *n =
	        t->node_chunks[no >> TFA_STACK_NODE_CHUNK_LG] + (no & (TFA_STACK_NODE_CHUNK - 1));
	n->pc = pc;
	n->parent = parent;
	child_place(t->children, t->children_lg, n, no);
	return n;
}

/*
 * The locked path: looks again (another thread may have interned the stack,
 * or the caller probed an index retired since), then inserts: follows the
 * stack's outer frames down the trie as far as it has them, and adds a node
 * for each of the others.  Everything that can fail is done before anything
 * is published, so a failure leaves the table's stacks as they were.
 */
static TFA_NOINLINE uint32_t
intern_slow(tfa_stack_table_t *t, const uintptr_t *pcs, unsigned depth, uint64_t h)
{
	/* The forking thread holds the lock already (taken by prefork). */
	bool locked = !tfa_tls.holds_all_locks;
	int saved_errno = errno; /* mmap and madvise failures are not the caller's */
	uint32_t id = 0;
	bool no_memory = false;

	if (locked)
		tfa_lock(&t->lock);
	if (t->index != 0) {
		id = index_find(t, t->index, h, pcs, depth);
		if (id != 0)
			goto out_unlock;
	}
	if (t->count >= TFA_STACK_ID_MAX || (t->limit != 0 && t->count >= t->limit))
		goto out_unlock;

	/*
	 * The trie holds the outer frames, pcs[1..depth): level k is frame
	 * pcs[depth - 1 - k].  The outer frames the last stack inserted had too
	 * need no probe of the child index (a program that makes new stacks
	 * walks a tree of calls: the next one differs from the last in its
	 * inner frames).
	 */
	unsigned levels = depth - 1;
	unsigned k = 0, shared = TFA_MIN(levels, t->path_len);
	const uintptr_t *outer = pcs + depth - 1;
	while (k < shared && outer[-(ptrdiff_t)k] == t->path_pcs[k])
		k++;
	const tfa_stack_node_t *node = k > 0 ? t->path_nodes[k - 1] : NULL;
	for (; k < levels; k++) {
		uint32_t no = child_find(t, node, outer[-(ptrdiff_t)k]);
		if (no == 0)
			break;
		node = node_at(t, no);
		t->path_pcs[k] = outer[-(ptrdiff_t)k];
		t->path_nodes[k] = node;
	}
	t->path_len = k;

	no_memory = true;
	if (!index_make_room(t) || !nodes_make_room(t, levels - k))
		goto out_unlock;
	tfa_stack_node_t *entry = dir_slot(t, t->count + 1);
	if (entry == NULL)
		goto out_unlock;
	no_memory = false;

	for (; k < levels; k++) {
		node = node_add(t, node, outer[-(ptrdiff_t)k]);
		t->path_pcs[k] = outer[-(ptrdiff_t)k];
		t->path_nodes[k] = node;
	}
	t->path_len = levels;
	entry->pc = pcs[0];
	entry->parent = node;
	id = t->count + 1;
	/* By id first: whoever finds the stack in the index can also get it by id. */
	__atomic_store_n(&t->count, id, __ATOMIC_RELEASE);
	index_place(index_slots(t->index), index_lg_cap(t->index), slot_key(h, depth) << SLOT_ID_BITS | id);
out_unlock:
	if (locked)
		tfa_unlock(&t->lock);
	if (tfa_unlikely(no_memory)) {
		/* The profile says so (TFA_PROC_FLAG_STACKS_LOST), and one line, outside the lock. */
		__atomic_store_n(&t->starved, true, __ATOMIC_RELAXED);
		TFA_LOG_ONCE("out of memory for the stack table: new call stacks are not recorded "
			     "from here on (allocations still are); the program continues");
	}
	errno = saved_errno;
	return id;
}

uint32_t
tfa_stack_table_intern(tfa_stack_table_t *t, const uintptr_t *pcs, unsigned depth)
{
	if (tfa_unlikely(depth == 0))
		return 0;
	if (tfa_unlikely(depth > TFA_STACK_DEPTH_MAX))
		depth = TFA_STACK_DEPTH_MAX;

	uint64_t h = stack_hash(pcs, depth);
	uintptr_t index = __atomic_load_n(&t->index, __ATOMIC_ACQUIRE);
	if (tfa_likely(index != 0)) {
		uint32_t id = index_find(t, index, h, pcs, depth);
		if (tfa_likely(id != 0))
			return id;
	}
	return intern_slow(t, pcs, depth, h);
}

/*
 * Whether the chain from n is the cache's positions [q, len), innermost
 * first, then the node `outer` (the trie's node of positions [0, q), NULL
 * for none): nodes are unique in the trie, so the outer frames need no
 * comparison.
 */
static TFA_ALWAYS_INLINE bool
chain_equals_cached(const tfa_stack_node_t *n, const tfa_stack_level_t *lv, unsigned len, unsigned q,
		    const tfa_stack_node_t *outer)
{
	for (unsigned p = len; p-- > q;) {
		if (n->pc != lv[p].pc)
			return false;
		n = n->parent;
	}
	return n == outer;
}

/* index_find for the cache's stack. */
static TFA_ALWAYS_INLINE uint32_t
index_find_cached(const tfa_stack_table_t *t, uintptr_t index, uint64_t h, const tfa_stack_cache_t *c,
		  unsigned len, unsigned q, const tfa_stack_node_t *outer)
{
	const uint64_t *slots = index_slots(index);
	uint64_t mask = ((uint64_t)1 << index_lg_cap(index)) - 1;
	uint64_t key = slot_key(h, len);

	for (uint64_t i = slot_home(h, mask);; i = (i + 1) & mask) {
		uint64_t slot = __atomic_load_n(&slots[i], __ATOMIC_ACQUIRE);
		if (slot == 0)
			return 0;
		if (slot >> SLOT_ID_BITS == key
		    && chain_equals_cached(stack_node(t, (uint32_t)slot), c->lv, len, q, outer))
			return (uint32_t)(slot & SLOT_ID_MASK);
	}
}

/* tfa_stack_table_intern_cached, and tfa_stack_table_find_cached (insert false). */
static TFA_ALWAYS_INLINE uint32_t
lookup_cached(tfa_stack_table_t *t, tfa_stack_cache_t *c, bool insert)
{
	unsigned len = c->len;

	if (tfa_unlikely(len == 0))
		return 0;
	const tfa_stack_level_t *lv = c->lv;
	unsigned p = c->hashed;
	uint64_t h = p != 0 ? c->hash[p - 1] : HASH_SEED;
	for (; p < len; p++) {
		h = hash_step(h, lv[p].pc);
		c->hash[p] = h;
	}
	c->hashed = len;
	/* The innermost frame has a directory entry, not a node of the trie. */
	unsigned q = TFA_MIN(c->known, len - 1);
	const tfa_stack_node_t *outer = q != 0 ? c->node[q - 1] : NULL;
	uint32_t id = 0;
	for (uintptr_t index = __atomic_load_n(&t->index, __ATOMIC_ACQUIRE); index != 0;) {
		id = index_find_cached(t, index, h, c, len, q, outer);
		if (id != 0 || insert)
			break;
		/* A miss in an index replaced meanwhile (its pages given back read as empty): again. */
		uintptr_t now = __atomic_load_n(&t->index, __ATOMIC_ACQUIRE);
		if (now == index)
			break;
		index = now;
	}
	if (id == 0) {
		if (!insert)
			return 0;
		uintptr_t pcs[TFA_STACK_CACHE_LEVELS];
		id = intern_slow(t, pcs, tfa_stack_cache_pcs(c, pcs, len), h);
		if (id == 0)
			return 0;
	}
	/* The nodes of the new positions, for the next capture that keeps them. */
	const tfa_stack_node_t *n = stack_node(t, id)->parent;
	for (p = len - 1; p-- > q;) {
		c->node[p] = n;
		n = n->parent;
	}
	c->known = len - 1;
	return id;
}

uint32_t
tfa_stack_table_intern_cached(tfa_stack_table_t *t, tfa_stack_cache_t *c)
{
	return lookup_cached(t, c, true);
}

uint32_t
tfa_stack_table_find_cached(tfa_stack_table_t *t, tfa_stack_cache_t *c)
{
	return lookup_cached(t, c, false);
}

uint32_t
tfa_stack_table_find(const tfa_stack_table_t *t, const uintptr_t *pcs, unsigned depth)
{
	if (depth == 0)
		return 0;
	if (depth > TFA_STACK_DEPTH_MAX)
		depth = TFA_STACK_DEPTH_MAX;
	uint64_t h = stack_hash(pcs, depth);
	for (uintptr_t index = __atomic_load_n(&t->index, __ATOMIC_ACQUIRE); index != 0;) {
		uint32_t id = index_find(t, index, h, pcs, depth);
		/* A miss in an index replaced meanwhile (its pages given back read as empty): again. */
		uintptr_t now = __atomic_load_n(&t->index, __ATOMIC_ACQUIRE);
		if (id != 0 || now == index)
			return id;
		index = now;
	}
	return 0;
}

uint64_t
tfa_stack_table_test_hash(const uintptr_t *pcs, unsigned depth)
{
	return stack_hash(pcs, depth);
}

void
tfa_stack_table_set_limit(tfa_stack_table_t *t, uint32_t limit)
{
	t->limit = limit;
}

unsigned
tfa_stack_table_get(const tfa_stack_table_t *t, uint32_t id, uintptr_t *out, unsigned max)
{
	/* The first test is the second's for the compiler, which cannot know count's range. */
	if (id == 0 || id > TFA_STACK_ID_MAX || id > __atomic_load_n(&t->count, __ATOMIC_ACQUIRE))
		return 0;
	unsigned depth = 0;
	for (const tfa_stack_node_t *n = stack_node(t, id); n != NULL && depth < max; n = n->parent)
		out[depth++] = n->pc;
	return depth;
}

uint32_t
tfa_stack_table_count(const tfa_stack_table_t *t)
{
	return __atomic_load_n(&t->count, __ATOMIC_ACQUIRE);
}

size_t
tfa_stack_table_bytes(const tfa_stack_table_t *t)
{
	return __atomic_load_n(&t->mapped, __ATOMIC_RELAXED);
}

void
tfa_stack_table_foreach(const tfa_stack_table_t *t,
                        void (*fn)(void *arg, uint32_t id, const uintptr_t *pcs, unsigned depth),
                        void *arg)
{
	uint32_t n = tfa_stack_table_count(t);
	uintptr_t pcs[TFA_STACK_DEPTH_MAX];

	for (uint32_t id = 1; id <= n; id++) {
		unsigned depth = tfa_stack_table_get(t, id, pcs, TFA_STACK_DEPTH_MAX);
		fn(arg, id, pcs, depth);
	}
}

/* A node chunk by its address, for node numbers from parent pointers. */
typedef struct chunk_ref_s {
	uintptr_t base;
	uint32_t chunk;
} chunk_ref_t;

/* The number of node n, from the chunks sorted by address; 0 for NULL (or a node of no chunk). */
static uint32_t
node_number(const chunk_ref_t *refs, uint32_t nrefs, const tfa_stack_node_t *n)
{
	uintptr_t at = (uintptr_t)n;
	uint32_t lo = 0, hi = nrefs;

	if (n == NULL)
		return 0;
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (refs[mid].base <= at)
			lo = mid;
		else
			hi = mid;
	}
	if (nrefs == 0 || at < refs[lo].base || at - refs[lo].base >= NODE_CHUNK_BYTES)
		return 0;
	return (refs[lo].chunk << TFA_STACK_NODE_CHUNK_LG)
	       | (uint32_t)((at - refs[lo].base) / sizeof(tfa_stack_node_t));
}

bool
tfa_stack_table_foreach_tree(const tfa_stack_table_t *t,
                             void (*node)(void *arg, uint32_t no, uintptr_t pc, uint32_t parent,
                                          uintptr_t parent_pc),
                             void (*stack)(void *arg, uint32_t id, uintptr_t pc, uint32_t parent,
                                           uintptr_t parent_pc),
                             void *arg)
{
	uint32_t n = tfa_stack_table_count(t), nrefs = 0, last = 0;

	if (n == 0)
		return true;
	while (nrefs < TFA_STACK_NODE_CHUNKS && __atomic_load_n(&t->node_chunks[nrefs], __ATOMIC_ACQUIRE) != NULL)
		nrefs++;
	size_t bytes = (sizeof(chunk_ref_t) * (nrefs + 1) + 4095) & ~(size_t)4095;
	chunk_ref_t *refs = tfa_arena_map(bytes);
	if (refs == NULL)
		return false;
	/* Chunks are mapped wherever mmap put them: sorted by address (shell sort: no malloc, few chunks). */
	for (uint32_t c = 0; c < nrefs; c++)
		refs[c] = (chunk_ref_t){ (uintptr_t)__atomic_load_n(&t->node_chunks[c], __ATOMIC_RELAXED), c };
	for (uint32_t gap = nrefs / 2; gap > 0; gap /= 2)
		for (uint32_t i = gap; i < nrefs; i++)
			for (uint32_t j = i; j >= gap && refs[j - gap].base > refs[j].base; j -= gap) {
				chunk_ref_t x = refs[j];
				refs[j] = refs[j - gap];
				refs[j - gap] = x;
			}
	/*
	 * Inserts run one at a time and number their nodes in order: every node
	 * up to the last one a published stack reaches is complete, the ones
	 * after may be an insert's in progress.
	 */
	for (uint32_t id = 1; id <= n; id++) {
		uint32_t no = node_number(refs, nrefs, stack_node(t, id)->parent);
		last = no > last ? no : last;
	}
	for (uint32_t no = 1; no <= last; no++) {
		const tfa_stack_node_t *nd = node_at(t, no);
		node(arg, no, nd->pc, node_number(refs, nrefs, nd->parent), nd->parent != NULL ? nd->parent->pc : 0);
	}
	for (uint32_t id = 1; id <= n; id++) {
		const tfa_stack_node_t *leaf = stack_node(t, id);
		stack(arg, id, leaf->pc, node_number(refs, nrefs, leaf->parent),
		      leaf->parent != NULL ? leaf->parent->pc : 0);
	}
	tfa_arena_unmap(refs, bytes);
	return true;
}

void
tfa_stack_table_destroy(tfa_stack_table_t *t)
{
	for (uint32_t lg = 0; lg <= TFA_STACK_INDEX_LG_MAX; lg++)
		if (t->indexes[lg] != NULL)
			tfa_arena_unmap(t->indexes[lg], sizeof(uint64_t) << lg);
	for (uint32_t c = 0; c < TFA_STACK_NODE_CHUNKS && t->node_chunks[c] != NULL; c++)
		tfa_arena_unmap(t->node_chunks[c], NODE_CHUNK_BYTES);
	if (t->children != NULL)
		tfa_arena_unmap(t->children, sizeof(uint32_t) << t->children_lg);
	for (uint32_t i = 0; i < TFA_STACK_DIR_LEAVES; i++)
		if (t->dir[i] != NULL)
			tfa_arena_unmap(t->dir[i], TFA_STACK_DIR_LEAF * sizeof(*t->dir[i]));
	memset(t, 0, sizeof(*t));
}

void
tfa_stack_table_prefork(tfa_stack_table_t *t)
{
	tfa_lock(&t->lock);
}

void
tfa_stack_table_postfork_parent(tfa_stack_table_t *t)
{
	tfa_unlock(&t->lock);
}

void
tfa_stack_table_postfork_child(tfa_stack_table_t *t)
{
	tfa_lock_init(&t->lock);
}
