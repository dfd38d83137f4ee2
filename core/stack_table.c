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

static TFA_ALWAYS_INLINE tfa_stack_slot_t *
index_slots(uintptr_t index)
{
	return (tfa_stack_slot_t *)(index & ~INDEX_LG_MASK);
}

static TFA_ALWAYS_INLINE uint32_t
index_lg_cap(uintptr_t index)
{
	return (uint32_t)(index & INDEX_LG_MASK);
}

#define INDEX_LG_CAP_INITIAL 10 /* 1024 slots: 16 KiB */
#define CHUNK_SIZE           ((size_t)256 << 10)
/* A chunk starts with the link to the previous one. */
#define CHUNK_HEADER         sizeof(void *)

_Static_assert(sizeof(tfa_stack_rec_t) + TFA_STACK_DEPTH_MAX * sizeof(uintptr_t)
                       <= CHUNK_SIZE - CHUNK_HEADER,
               "the deepest stack fits in a chunk");
_Static_assert(sizeof(tfa_stack_slot_t) == 16, "slots are 16 bytes");
_Static_assert(TFA_STACK_INDEX_LG_MAX <= INDEX_LG_MASK, "lg_cap fits below the page offset");

static TFA_ALWAYS_INLINE uint64_t
mix(uint64_t a, uint64_t b)
{
	__uint128_t r = (__uint128_t)a * b;
	return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/*
 * wyhash's multiply-fold, two frames per multiplication so that the
 * dependency chain is half the depth.  Never 0 (the empty slot).  The
 * constants have their top bit set: no user-space address equals one, so no
 * frame zeroes a product.
 */
static TFA_ALWAYS_INLINE uint64_t
stack_hash(const uintptr_t *pcs, unsigned depth)
{
	const uint64_t k0 = UINT64_C(0xa0761d6478bd642f), k1 = UINT64_C(0xe7037ed1a0b428db);
	const uint64_t k2 = UINT64_C(0x8ebc6af09c88c6e3);
	uint64_t h = k2 ^ depth;
	unsigned i = 0;

	for (; i + 1 < depth; i += 2)
		h = mix(pcs[i] ^ k0, pcs[i + 1] ^ h);
	if (i < depth)
		h = mix(pcs[i] ^ k0, h ^ k1);
	h = mix(h ^ k1, k2);
	return h != 0 ? h : 1;
}

static TFA_ALWAYS_INLINE bool
rec_equals(const tfa_stack_rec_t *rec, const uintptr_t *pcs, unsigned depth)
{
	if (rec->depth != depth)
		return false;
	for (unsigned i = 0; i < depth; i++)
		if (rec->pcs[i] != pcs[i])
			return false;
	return true;
}

/* The rec of pcs in the index, or NULL.  Safe against a concurrent insert. */
static TFA_ALWAYS_INLINE const tfa_stack_rec_t *
index_find(uintptr_t index, uint64_t h, const uintptr_t *pcs, unsigned depth)
{
	const tfa_stack_slot_t *slots = index_slots(index);
	uint32_t lg_cap = index_lg_cap(index);
	uint64_t mask = ((uint64_t)1 << lg_cap) - 1;
	uint64_t i = h >> (64 - lg_cap);

	for (;;) {
		const tfa_stack_slot_t *slot = &slots[i];
		uint64_t sh = __atomic_load_n(&slot->hash, __ATOMIC_ACQUIRE);
		if (sh == 0)
			return NULL;
		if (sh == h) {
			const tfa_stack_rec_t *rec = __atomic_load_n(&slot->rec, __ATOMIC_RELAXED);
			/* NULL: a replaced index whose pages were just given back. */
			if (rec != NULL && rec_equals(rec, pcs, depth))
				return rec;
		}
		i = (i + 1) & mask;
	}
}

/* REQUIRES: the index is not published yet, or the table lock is held. */
static void
index_place(tfa_stack_slot_t *slots, uint32_t lg_cap, uint64_t h, const tfa_stack_rec_t *rec)
{
	uint64_t mask = ((uint64_t)1 << lg_cap) - 1;
	uint64_t i = h >> (64 - lg_cap);

	while (slots[i].hash != 0)
		i = (i + 1) & mask;
	__atomic_store_n(&slots[i].rec, rec, __ATOMIC_RELAXED);
	__atomic_store_n(&slots[i].hash, h, __ATOMIC_RELEASE);
}

static void *
table_map(tfa_stack_table_t *t, size_t bytes)
{
	void *p = tfa_arena_map(bytes);

	if (p != NULL)
		__atomic_fetch_add(&t->mapped, bytes, __ATOMIC_RELAXED);
	return p;
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
	tfa_stack_slot_t *slots = table_map(t, sizeof(tfa_stack_slot_t) << lg_cap);

	if (slots == NULL)
		return -1;
	t->indexes[lg_cap] = slots;
	if (old == 0) {
		__atomic_store_n(&t->index, (uintptr_t)slots | lg_cap, __ATOMIC_RELEASE);
		return 0;
	}

	tfa_stack_slot_t *old_slots = index_slots(old);
	uint64_t old_cap = (uint64_t)1 << index_lg_cap(old);
	for (uint64_t i = 0; i < old_cap; i++)
		if (old_slots[i].hash != 0)
			index_place(slots, lg_cap, old_slots[i].hash, old_slots[i].rec);
	__atomic_store_n(&t->index, (uintptr_t)slots | lg_cap, __ATOMIC_RELEASE);
	if (madvise(old_slots, old_cap * sizeof(tfa_stack_slot_t), MADV_DONTNEED) == 0)
		__atomic_fetch_sub(&t->mapped, old_cap * sizeof(tfa_stack_slot_t),
		                   __ATOMIC_RELAXED);
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

/* The directory slot of id, mapping its leaf when needed.  REQUIRES: lock held. */
static const tfa_stack_rec_t **
dir_slot(tfa_stack_table_t *t, uint32_t id)
{
	uint32_t leaf_no = (id - 1) >> TFA_STACK_DIR_LEAF_LG;
	const tfa_stack_rec_t **leaf = t->dir[leaf_no];

	if (leaf == NULL) {
		leaf = table_map(t, TFA_STACK_DIR_LEAF * sizeof(*leaf));
		if (leaf == NULL)
			return NULL;
		__atomic_store_n(&t->dir[leaf_no], leaf, __ATOMIC_RELEASE);
	}
	return &leaf[(id - 1) & (TFA_STACK_DIR_LEAF - 1)];
}

/*
 * Room for a rec of `bytes`: the tail of a chunk too short for it is left
 * unused (at most 1/128 of a chunk for the deepest stack).  REQUIRES: lock held.
 */
static tfa_stack_rec_t *
rec_alloc(tfa_stack_table_t *t, size_t bytes)
{
	if (t->chunk_left < bytes) {
		char *chunk = table_map(t, CHUNK_SIZE);
		if (chunk == NULL)
			return NULL;
		*(void **)chunk = t->chunks;
		t->chunks = chunk;
		t->chunk_cur = chunk + CHUNK_HEADER;
		t->chunk_left = CHUNK_SIZE - CHUNK_HEADER;
	}
	tfa_stack_rec_t *rec = (tfa_stack_rec_t *)t->chunk_cur;
	t->chunk_cur += bytes;
	t->chunk_left -= bytes;
	return rec;
}

/*
 * The locked path: looks again (another thread may have interned the stack,
 * or the caller probed an index retired since), then inserts.  Everything
 * that can fail is done before anything is published, so a failure leaves
 * the table as it was.
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
		const tfa_stack_rec_t *found = index_find(t->index, h, pcs, depth);
		if (found != NULL) {
			id = found->id;
			goto out_unlock;
		}
	}
	if (t->count >= TFA_STACK_ID_MAX || (t->limit != 0 && t->count >= t->limit))
		goto out_unlock;
	no_memory = true;
	if (!index_make_room(t))
		goto out_unlock;
	const tfa_stack_rec_t **slot = dir_slot(t, t->count + 1);
	if (slot == NULL)
		goto out_unlock;
	tfa_stack_rec_t *rec = rec_alloc(t, sizeof(*rec) + depth * sizeof(uintptr_t));
	if (rec == NULL)
		goto out_unlock;
	no_memory = false;

	id = t->count + 1;
	rec->id = id;
	rec->depth = depth;
	memcpy(rec->pcs, pcs, depth * sizeof(uintptr_t));
	/* By id first: whoever finds the stack in the index can also get it by id. */
	__atomic_store_n(slot, rec, __ATOMIC_RELEASE);
	__atomic_store_n(&t->count, id, __ATOMIC_RELEASE);
	index_place(index_slots(t->index), index_lg_cap(t->index), h, rec);
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
		const tfa_stack_rec_t *rec = index_find(index, h, pcs, depth);
		if (tfa_likely(rec != NULL))
			return rec->id;
	}
	return intern_slow(t, pcs, depth, h);
}

uint32_t
tfa_stack_table_find(const tfa_stack_table_t *t, const uintptr_t *pcs, unsigned depth)
{
	if (depth == 0)
		return 0;
	if (depth > TFA_STACK_DEPTH_MAX)
		depth = TFA_STACK_DEPTH_MAX;
	uintptr_t index = __atomic_load_n(&t->index, __ATOMIC_ACQUIRE);
	if (index == 0)
		return 0;
	const tfa_stack_rec_t *rec = index_find(index, stack_hash(pcs, depth), pcs, depth);
	return rec != NULL ? rec->id : 0;
}

void
tfa_stack_table_set_limit(tfa_stack_table_t *t, uint32_t limit)
{
	t->limit = limit;
}

unsigned
tfa_stack_table_get(const tfa_stack_table_t *t, uint32_t id, const uintptr_t **pcs)
{
	*pcs = NULL;
	/* The first test is the second's for the compiler, which cannot know count's range. */
	if (id == 0 || id > TFA_STACK_ID_MAX || id > __atomic_load_n(&t->count, __ATOMIC_ACQUIRE))
		return 0;
	const tfa_stack_rec_t **leaf =
	        __atomic_load_n(&t->dir[(id - 1) >> TFA_STACK_DIR_LEAF_LG], __ATOMIC_ACQUIRE);
	const tfa_stack_rec_t *rec =
	        __atomic_load_n(&leaf[(id - 1) & (TFA_STACK_DIR_LEAF - 1)], __ATOMIC_ACQUIRE);
	*pcs = rec->pcs;
	return rec->depth;
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

	for (uint32_t id = 1; id <= n; id++) {
		const uintptr_t *pcs;
		unsigned depth = tfa_stack_table_get(t, id, &pcs);
		fn(arg, id, pcs, depth);
	}
}

void
tfa_stack_table_destroy(tfa_stack_table_t *t)
{
	for (uint32_t lg = 0; lg <= TFA_STACK_INDEX_LG_MAX; lg++)
		if (t->indexes[lg] != NULL)
			tfa_arena_unmap(t->indexes[lg], sizeof(tfa_stack_slot_t) << lg);
	for (void *chunk = t->chunks; chunk != NULL;) {
		void *prev = *(void **)chunk;
		tfa_arena_unmap(chunk, CHUNK_SIZE);
		chunk = prev;
	}
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
