/* SPDX-License-Identifier: MIT */
#include "core/ptr_table.h"

#include <errno.h>
#include <string.h>
#include <sys/single_threaded.h>

#include "core/arena.h"
#include "core/thread.h"

#define LG_CAP_INITIAL 7 /* 128 slots: one 4 KiB page */
#define TOMBSTONE      ((uint64_t)1) /* no pointer the shim records is odd */

/*
 * Fibonacci hashing of the pointer in units of 8 bytes: blocks of one size
 * class sit at multiples of their size, and multiplying the raw address would
 * map them to a few clustered slots (the multiplier times 16 is no longer
 * golden).
 */
static inline uint64_t
ptr_hash(uintptr_t p)
{
	return (uint64_t)(p >> 3) * UINT64_C(0x9E3779B97F4A7C15);
}

/*
 * The shard comes from the pointer's 1 MiB region, not from the pointer: both
 * jemalloc and glibc give each thread its own arena, so a thread's pointers
 * share regions and its table operations stay on shards (and lock cache
 * lines) that other threads rarely touch.
 */
static inline tfa_ptr_shard_t *
shard_of(tfa_ptr_table_t *t, uintptr_t p)
{
	return &t->shards[ptr_hash(p >> 20) >> (64 - TFA_PTR_SHARDS_LG)];
}

/* Slot index from the top bits of the pointer's hash. */
static inline uint64_t
slot_of(uint64_t h, uint32_t lg_cap)
{
	return h >> (64 - lg_cap);
}

/*
 * No lock while the process has a single thread (glibc clears
 * __libc_single_threaded before the first thread starts, never inside one of
 * these sections); none either for the forking thread, which holds them all.
 * Returns whether the lock was taken.
 */
static inline bool
shard_lock(tfa_ptr_shard_t *s)
{
	if (tfa_likely(__libc_single_threaded) || tfa_unlikely(tfa_tls.holds_all_locks))
		return false;
	tfa_spin_lock(&s->lock);
	return true;
}

static inline void
shard_unlock(tfa_ptr_shard_t *s, bool locked)
{
	if (locked)
		tfa_spin_unlock(&s->lock);
}

/* REQUIRES: rec->ptr is not in slots, which have no tombstone and a free slot. */
static void
place(tfa_record_t *slots, uint32_t lg_cap, const tfa_record_t *rec)
{
	uint64_t mask = ((uint64_t)1 << lg_cap) - 1;
	uint64_t i = slot_of(ptr_hash((uintptr_t)rec->ptr), lg_cap);

	while (slots[i].ptr != 0)
		i = (i + 1) & mask;
	slots[i] = *rec;
}

/*
 * Maps the shard, doubles it when more than half is live, or else rehashes it
 * at the same size to drop its tombstones.  Returns 0 or -ENOMEM.
 * REQUIRES: shard locked.
 */
static int
shard_rehash(tfa_ptr_shard_t *s)
{
	uint32_t new_lg = LG_CAP_INITIAL;

	if (s->lg_cap != 0)
		new_lg = (s->count + 1) * 2 > ((uint64_t)1 << s->lg_cap) ? s->lg_cap + 1 : s->lg_cap;
	size_t new_bytes = sizeof(tfa_record_t) << new_lg;
	tfa_record_t *fresh = tfa_arena_map(new_bytes);

	if (fresh == NULL)
		return -ENOMEM;
	if (s->slots != NULL) {
		size_t cap = (size_t)1 << s->lg_cap;
		for (size_t i = 0; i < cap; i++)
			if (s->slots[i].ptr > TOMBSTONE)
				place(fresh, new_lg, &s->slots[i]);
		tfa_arena_unmap(s->slots, sizeof(tfa_record_t) << s->lg_cap);
	}
	s->slots = fresh;
	s->lg_cap = new_lg;
	s->used = s->count;
	return 0;
}

tfa_ptr_held_t
tfa_ptr_table_hold(tfa_ptr_table_t *t, uintptr_t ptr)
{
	tfa_ptr_held_t h = { .shard = shard_of(t, ptr) };

	h.locked = shard_lock(h.shard);
	return h;
}

void
tfa_ptr_table_release(tfa_ptr_held_t h)
{
	shard_unlock(h.shard, h.locked);
}

int
tfa_ptr_held_insert(tfa_ptr_held_t held, const tfa_record_t *rec, tfa_record_t *replaced)
{
	tfa_ptr_shard_t *s = held.shard;
	uint64_t h = ptr_hash((uintptr_t)rec->ptr);

	/* Without memory for a rehash the slots left still serve, but one stays empty. */
	bool room = true;
	if (tfa_unlikely(s->lg_cap == 0 || (s->used + 1) * 4 > ((uint64_t)3 << s->lg_cap))) {
		if (shard_rehash(s) != 0) {
			if (s->lg_cap == 0)
				return -ENOMEM;
			room = s->used + 1 < ((uint64_t)1 << s->lg_cap);
		}
	}
	uint64_t mask = ((uint64_t)1 << s->lg_cap) - 1;
	uint64_t i = slot_of(h, s->lg_cap);
	tfa_record_t *reuse = NULL;
	for (;;) {
		tfa_record_t *slot = &s->slots[i];
		uint64_t key = slot->ptr;
		if (key == 0)
			break;
		if (key == TOMBSTONE) {
			if (reuse == NULL)
				reuse = slot;
		} else if (key == rec->ptr) {
			if (replaced != NULL)
				*replaced = *slot;
			*slot = *rec;
			return 1;
		}
		i = (i + 1) & mask;
	}
	if (reuse == NULL) {
		if (tfa_unlikely(!room))
			return -ENOMEM; /* only a tombstone could have taken it */
		reuse = &s->slots[i];
		s->used++;
	}
	*reuse = *rec;
	s->count++;
	return 0;
}

int
tfa_ptr_table_insert(tfa_ptr_table_t *t, const tfa_record_t *rec, tfa_record_t *replaced)
{
	tfa_ptr_held_t h = tfa_ptr_table_hold(t, (uintptr_t)rec->ptr);
	int ret = tfa_ptr_held_insert(h, rec, replaced);

	tfa_ptr_table_release(h);
	return ret;
}

/*
 * Leaves a tombstone, or an empty slot when the next one is empty: then no
 * probe sequence runs through it, nor through the tombstones just before it.
 */
static void
shard_delete_at(tfa_ptr_shard_t *s, uint64_t i)
{
	uint64_t mask = ((uint64_t)1 << s->lg_cap) - 1;

	s->count--;
	if (s->slots[(i + 1) & mask].ptr != 0) {
		s->slots[i].ptr = TOMBSTONE;
		return;
	}
	s->slots[i].ptr = 0;
	s->used--;
	for (i = (i - 1) & mask; s->slots[i].ptr == TOMBSTONE; i = (i - 1) & mask) {
		s->slots[i].ptr = 0;
		s->used--;
	}
}

static bool
shard_find(tfa_ptr_shard_t *s, uintptr_t ptr, uint64_t h, uint64_t *at)
{
	if (s->lg_cap == 0)
		return false;
	uint64_t mask = ((uint64_t)1 << s->lg_cap) - 1;
	uint64_t i = slot_of(h, s->lg_cap);

	for (;;) {
		uint64_t key = s->slots[i].ptr;
		if (key == ptr) {
			*at = i;
			return true;
		}
		if (key == 0)
			return false;
		i = (i + 1) & mask;
	}
}

bool
tfa_ptr_held_remove(tfa_ptr_held_t held, uintptr_t ptr, tfa_record_t *out)
{
	tfa_ptr_shard_t *s = held.shard;
	uint64_t at;

	if (ptr <= TOMBSTONE || !shard_find(s, ptr, ptr_hash(ptr), &at))
		return false;
	if (out != NULL)
		*out = s->slots[at];
	shard_delete_at(s, at);
	s->recent[s->recent_pos++ % TFA_PTR_RECENT] = ptr;
	return true;
}

bool
tfa_ptr_table_remove(tfa_ptr_table_t *t, uintptr_t ptr, tfa_record_t *out)
{
	tfa_ptr_held_t h = tfa_ptr_table_hold(t, ptr);
	bool found = tfa_ptr_held_remove(h, ptr, out);

	tfa_ptr_table_release(h);
	return found;
}

bool
tfa_ptr_table_lookup(tfa_ptr_table_t *t, uintptr_t ptr, tfa_record_t *out)
{
	uint64_t h = ptr_hash(ptr);
	tfa_ptr_shard_t *s = shard_of(t, ptr);
	uint64_t at;
	bool found;

	if (ptr <= TOMBSTONE)
		return false;
	bool locked = shard_lock(s);
	found = shard_find(s, ptr, h, &at);
	if (found && out != NULL)
		*out = s->slots[at];
	shard_unlock(s, locked);
	return found;
}

bool
tfa_ptr_table_recently_freed(tfa_ptr_table_t *t, uintptr_t ptr)
{
	tfa_ptr_shard_t *s = shard_of(t, ptr);
	bool seen = false;
	bool locked = shard_lock(s);

	for (unsigned i = 0; i < TFA_PTR_RECENT && !seen; i++)
		seen = s->recent[i] == ptr;
	shard_unlock(s, locked);
	return seen;
}

uint64_t
tfa_ptr_table_count(tfa_ptr_table_t *t)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < TFA_PTR_SHARDS; i++)
		n += __atomic_load_n(&t->shards[i].count, __ATOMIC_RELAXED);
	return n;
}

void
tfa_ptr_table_foreach(tfa_ptr_table_t *t, void (*fn)(void *arg, const tfa_record_t *rec),
		      void *arg)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++) {
		tfa_ptr_shard_t *s = &t->shards[k];
		bool locked = shard_lock(s);
		if (s->slots != NULL) {
			size_t cap = (size_t)1 << s->lg_cap;
			for (size_t i = 0; i < cap; i++)
				if (s->slots[i].ptr > TOMBSTONE)
					fn(arg, &s->slots[i]);
		}
		shard_unlock(s, locked);
	}
}

void
tfa_ptr_table_destroy(tfa_ptr_table_t *t)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++) {
		tfa_ptr_shard_t *s = &t->shards[k];
		bool locked = shard_lock(s);
		if (s->slots != NULL)
			tfa_arena_unmap(s->slots, sizeof(tfa_record_t) << s->lg_cap);
		s->slots = NULL;
		s->lg_cap = 0;
		s->count = 0;
		s->used = 0;
		memset(s->recent, 0, sizeof(s->recent));
		shard_unlock(s, locked);
	}
}

void
tfa_ptr_table_prefork(tfa_ptr_table_t *t)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++)
		tfa_spin_lock(&t->shards[k].lock);
}

void
tfa_ptr_table_postfork_parent(tfa_ptr_table_t *t)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++)
		tfa_spin_unlock(&t->shards[k].lock);
}

void
tfa_ptr_table_postfork_child(tfa_ptr_table_t *t)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++)
		tfa_spin_init(&t->shards[k].lock);
}
