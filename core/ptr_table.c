/* SPDX-License-Identifier: MIT */
#include "core/ptr_table.h"

#include <errno.h>
#include <string.h>
#include <sys/single_threaded.h>

#include "core/arena.h"
#include "core/thread.h"

#define LG_CAP_INITIAL TFA_PTR_LG_CAP_INITIAL
#define TOMBSTONE      TFA_PTR_TOMBSTONE
#define ptr_hash       tfa_ptr_hash
#define slot_of        tfa_ptr_slot_of
#define shard_of       tfa_ptr_shard_of

/* As tfa_ptr_table_hold, for a shard already found.  Returns whether the lock was taken. */
static inline bool
shard_lock(tfa_ptr_shard_t *s)
{
	if (tfa_likely(__libc_single_threaded) || tfa_unlikely(tfa_tls.holds_all_locks))
		return false;
	tfa_lock(&s->lock);
	return true;
}

static inline void
shard_unlock(tfa_ptr_shard_t *s, bool locked)
{
	if (locked)
		tfa_unlock(&s->lock);
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
 * Drops a shard's tombstones in place: no new mapping, so no munmap whose TLB
 * shootdown would interrupt every other core (under churn, tombstones fill a
 * shard every few hundred frees).  Starting after a slot that was empty
 * before (no probe sequence crosses it), each record is taken out and put
 * back from its home slot, in order, as linear probing would place it.
 */
static void
shard_purge(tfa_ptr_shard_t *s)
{
	uint64_t cap = (uint64_t)1 << s->lg_cap;
	uint64_t mask = cap - 1;
	uint64_t start = 0;

	while (s->slots[start].ptr != 0)
		start++; /* exists: used < cap always */
	for (uint64_t i = 0; i < cap; i++)
		if (s->slots[i].ptr == TOMBSTONE)
			s->slots[i].ptr = 0;
	for (uint64_t k = 1; k < cap; k++) {
		uint64_t j = (start + k) & mask;
		if (s->slots[j].ptr == 0)
			continue;
		tfa_record_t rec = s->slots[j];
		s->slots[j].ptr = 0;
		uint64_t i = slot_of(ptr_hash((uintptr_t)rec.ptr), s->lg_cap);
		while (s->slots[i].ptr != 0)
			i = (i + 1) & mask;
		s->slots[i] = rec;
	}
	s->used = s->count;
}

/*
 * Maps the shard, doubles it when more than 3/4 is live, or else purges its
 * tombstones in place.  Returns 0 or -ENOMEM.  REQUIRES: shard locked.
 */
static int
shard_rehash(tfa_ptr_shard_t *s)
{
	uint32_t new_lg = LG_CAP_INITIAL;

	if (s->lg_cap != 0) {
		if ((s->count + 1) * 4 <= ((uint64_t)3 << s->lg_cap)) {
			shard_purge(s);
			return 0;
		}
		new_lg = s->lg_cap + 1;
	}
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

int
tfa_ptr_shard_make_room(tfa_ptr_shard_t *s)
{
	if (shard_rehash(s) == 0)
		return 0;
	if (s->lg_cap == 0)
		return -ENOMEM;
	/* Without memory the slots left still serve, but one stays empty. */
	return s->used + 1 < ((uint64_t)1 << s->lg_cap) ? 0 : 1;
}

int
tfa_ptr_table_insert(tfa_ptr_table_t *t, const tfa_record_t *rec, tfa_record_t *replaced)
{
	tfa_ptr_held_t h = tfa_ptr_table_hold(t, (uintptr_t)rec->ptr);
	int ret = tfa_ptr_held_insert(h, rec, replaced);

	tfa_ptr_table_release(h);
	return ret;
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
		tfa_lock(&t->shards[k].lock);
}

void
tfa_ptr_table_postfork_parent(tfa_ptr_table_t *t)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++)
		tfa_unlock(&t->shards[k].lock);
}

void
tfa_ptr_table_postfork_child(tfa_ptr_table_t *t)
{
	for (unsigned k = 0; k < TFA_PTR_SHARDS; k++)
		tfa_lock_init(&t->shards[k].lock);
}
