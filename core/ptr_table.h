/* SPDX-License-Identifier: MIT */
/*
 * The live-pointer table: for every pointer the shim handed out, a 32-byte
 * record of what it knows about it.
 *
 * Glossary:
 *   record   key (the pointer), requested size, allocation id, thread, stack
 *            id, resource tag, and packed metadata: the backend that owns the
 *            pointer, the kind of call that made it, the device, log2 of the
 *            alignment asked for.
 *   shard    the table is split into TFA_PTR_SHARDS independent open-
 *            addressing hash tables, each behind its own lock, chosen by
 *            the pointer's hash: threads rarely meet on one lock.
 *   recent   each shard remembers the last pointers freed through it, so a
 *            free of an unknown pointer can be told apart as a double free.
 *   tombstone a removed record's slot (key 1) until the next rehash: a free
 *            costs one probe and one store, not a shift of the cluster.
 *
 * Memory comes from mmap (core/arena.h), never from malloc.  Each shard grows
 * by doubling when live records pass 3/4 of it, and is purged of tombstones
 * in place when tombstones and live records pass 7/8; 32-byte slots cost 43
 * to 85 bytes per live allocation.
 */
#ifndef TFA_CORE_PTR_TABLE_H
#define TFA_CORE_PTR_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <errno.h>
#include <sys/single_threaded.h>

#include "core/common.h"
#include "core/lock.h"
#include "core/thread.h"

#define TFA_PTR_SHARDS_LG  12
#define TFA_PTR_SHARDS     (1u << TFA_PTR_SHARDS_LG)
#define TFA_PTR_RECENT     32

/* What kind of call made a pointer; a free by the wrong kind is a mismatch. */
typedef enum tfa_alloc_kind_e {
	TFA_KIND_MALLOC = 0,    /* malloc, calloc, realloc, memalign & co. */
	TFA_KIND_NEW = 1,       /* operator new */
	TFA_KIND_NEW_ARRAY = 2, /* operator new[] */
	TFA_KIND_INTERNAL = 3,  /* made while the guard was held: not the program's */
	TFA_KIND_DEVICE = 4,    /* a device API (CUDA) */
} tfa_alloc_kind_t;

/* Larger requests cannot succeed on x86-64 (128 TiB of user address space). */
#define TFA_REQUESTED_MAX ((UINT64_C(1) << 47) - 1)
#define TFA_ID_MAX        ((UINT64_C(1) << 40) - 1)

typedef struct tfa_record_s {
	uint64_t ptr;       /* 0: empty slot */
	uint64_t size_meta; /* requested (47) | backend (3) | kind (3) | device (5) | lg_align (6) */
	uint64_t id_thread; /* allocation id (40) | thread index (24) */
	uint32_t stack_id;
	uint32_t tag;
} tfa_record_t;

_Static_assert(sizeof(tfa_record_t) == 32, "records are 32 bytes");

/* The unpacked view of a record. */
typedef struct tfa_alloc_info_s {
	uintptr_t ptr;
	uint64_t requested;
	uint64_t id;
	uint32_t thread;
	uint32_t stack_id;
	uint32_t tag;
	uint8_t backend;
	uint8_t kind;
	uint8_t device;
	uint8_t lg_align; /* 0: the default alignment */
} tfa_alloc_info_t;

static inline tfa_record_t
tfa_record_pack(const tfa_alloc_info_t *i)
{
	tfa_record_t r = {
		.ptr = i->ptr,
		.size_meta = (i->requested & TFA_REQUESTED_MAX) | ((uint64_t)(i->backend & 7) << 47)
			     | ((uint64_t)(i->kind & 7) << 50) | ((uint64_t)(i->device & 31) << 53)
			     | ((uint64_t)(i->lg_align & 63) << 58),
		.id_thread = (i->id & TFA_ID_MAX) | ((uint64_t)(i->thread & 0xffffff) << 40),
		.stack_id = i->stack_id,
		.tag = i->tag,
	};
	return r;
}

static inline void
tfa_record_unpack(const tfa_record_t *r, tfa_alloc_info_t *i)
{
	i->ptr = (uintptr_t)r->ptr;
	i->requested = r->size_meta & TFA_REQUESTED_MAX;
	i->backend = (uint8_t)((r->size_meta >> 47) & 7);
	i->kind = (uint8_t)((r->size_meta >> 50) & 7);
	i->device = (uint8_t)((r->size_meta >> 53) & 31);
	i->lg_align = (uint8_t)((r->size_meta >> 58) & 63);
	i->id = r->id_thread & TFA_ID_MAX;
	i->thread = (uint32_t)(r->id_thread >> 40);
	i->stack_id = r->stack_id;
	i->tag = r->tag;
}

typedef struct tfa_ptr_shard_s {
	tfa_lock_t lock;
	uint32_t lg_cap; /* 0: nothing mapped yet */
	uint64_t count;  /* live records */
	uint64_t used;   /* live records and tombstones */
	tfa_record_t *slots;
	uint32_t recent_pos;
	uintptr_t recent[TFA_PTR_RECENT];
} TFA_ALIGNED_CACHELINE tfa_ptr_shard_t;

/* Zero-initialised storage is an empty, usable table. */
typedef struct tfa_ptr_table_s {
	tfa_ptr_shard_t shards[TFA_PTR_SHARDS];
} tfa_ptr_table_t;

/*
 * A shard held for a sequence of operations: the tracker changes the table
 * and its statistics in one critical section, so that fork (which holds every
 * shard lock) never sees one without the other.
 */
typedef struct tfa_ptr_held_s {
	tfa_ptr_shard_t *shard;
	bool locked;
} tfa_ptr_held_t;

#define TFA_PTR_TOMBSTONE ((uint64_t)1) /* no pointer the shim records is odd */

/*
 * A shard is purged of its tombstones when live records and tombstones pass
 * 7/8 of it, and doubled instead when live records alone pass 3/4: 32-byte
 * slots then cost 43 to 85 bytes per live allocation (the benchmark's
 * memory target is 64 over the backend's own).
 */
#define TFA_PTR_OVERLOADED(s) (((s)->used + 1) * 8 > ((uint64_t)7 << (s)->lg_cap))
#define TFA_PTR_LG_CAP_INITIAL 7        /* 128 slots: one 4 KiB page */

/*
 * Fibonacci hashing of the pointer in units of 8 bytes: blocks of one size
 * class sit at multiples of their size, and multiplying the raw address would
 * map them to a few clustered slots (the multiplier times 16 is no longer
 * golden).
 */
static TFA_ALWAYS_INLINE uint64_t
tfa_ptr_hash(uintptr_t p)
{
	return (uint64_t)(p >> 3) * UINT64_C(0x9E3779B97F4A7C15);
}

/* Slot index from the top bits of the pointer's hash. */
static TFA_ALWAYS_INLINE uint64_t
tfa_ptr_slot_of(uint64_t h, uint32_t lg_cap)
{
	return h >> (64 - lg_cap);
}

/*
 * The shard comes from the pointer's 64 KiB region, not from the pointer:
 * blocks made or freed one after the other usually lie close together, so
 * consecutive operations probe one small shard table that stays in cache
 * (on a 500,000-block tree, 25% faster than 1 MiB regions over 32 shards);
 * and both jemalloc and glibc give each thread its own arena, so a thread's
 * table operations stay on shards (and lock cache lines) that other threads
 * rarely touch.
 */
static TFA_ALWAYS_INLINE tfa_ptr_shard_t *
tfa_ptr_shard_of(tfa_ptr_table_t *t, uintptr_t p)
{
	return &t->shards[tfa_ptr_hash(p >> 16) >> (64 - TFA_PTR_SHARDS_LG)];
}

/*
 * Locks the shard of ptr.  No lock while the process has a single thread
 * (glibc clears __libc_single_threaded before the first thread starts, never
 * inside one of these sections); none either for the forking thread, which
 * holds them all.  [hot path] [takes shard lock]
 */
static TFA_ALWAYS_INLINE tfa_ptr_held_t
tfa_ptr_table_hold(tfa_ptr_table_t *t, uintptr_t ptr)
{
	tfa_ptr_held_t h = { .shard = tfa_ptr_shard_of(t, ptr), .locked = false };

	if (tfa_unlikely(!__libc_single_threaded) && tfa_likely(!tfa_tls.holds_all_locks)) {
		tfa_lock(&h.shard->lock);
		h.locked = true;
	}
	return h;
}

static TFA_ALWAYS_INLINE void
tfa_ptr_table_release(tfa_ptr_held_t h)
{
	if (h.locked)
		tfa_unlock(&h.shard->lock);
}

/*
 * The out-of-line part of an insert into an overloaded shard: maps, grows or
 * purges it.  Returns 0, 1 when no memory could be had and only a tombstone
 * may take the record (one slot must stay empty), or -ENOMEM.
 */
int tfa_ptr_shard_make_room(tfa_ptr_shard_t *s) TFA_MUST_CHECK;

/*
 * As tfa_ptr_table_insert, on a held shard.  REQUIRES: h holds rec->ptr's
 * shard.  [hot path]
 */
static TFA_ALWAYS_INLINE int
tfa_ptr_held_insert(tfa_ptr_held_t held, const tfa_record_t *rec, tfa_record_t *replaced)
{
	tfa_ptr_shard_t *s = held.shard;
	bool room = true;

	if (tfa_unlikely(s->lg_cap == 0 || TFA_PTR_OVERLOADED(s))) {
		int r = tfa_ptr_shard_make_room(s);
		if (r < 0)
			return r;
		room = r == 0;
	}
	uint64_t mask = ((uint64_t)1 << s->lg_cap) - 1;
	uint64_t i = tfa_ptr_slot_of(tfa_ptr_hash((uintptr_t)rec->ptr), s->lg_cap);
	tfa_record_t *reuse = NULL;
	for (;;) {
		tfa_record_t *slot = &s->slots[i];
		uint64_t key = slot->ptr;
		if (key == 0)
			break;
		if (key == TFA_PTR_TOMBSTONE) {
			if (reuse == NULL)
				reuse = slot;
		} else if (tfa_unlikely(key == rec->ptr)) {
			if (replaced != NULL)
				*replaced = *slot;
			*slot = *rec;
			return 1;
		}
		i = (i + 1) & mask;
	}
	if (reuse == NULL) {
		if (tfa_unlikely(!room))
			return -ENOMEM;
		reuse = &s->slots[i];
		s->used++;
	}
	*reuse = *rec;
	s->count++;
	return 0;
}

/*
 * Removes ptr's record from a held shard into *out.  A removed slot becomes a
 * tombstone, or empty when the next slot is empty (then no probe runs through
 * it, nor through the tombstones just before it).  [hot path]
 */
static TFA_ALWAYS_INLINE bool
tfa_ptr_held_remove(tfa_ptr_held_t held, uintptr_t ptr, tfa_record_t *out)
{
	tfa_ptr_shard_t *s = held.shard;

	if (tfa_unlikely(ptr <= TFA_PTR_TOMBSTONE || s->lg_cap == 0))
		return false;
	uint64_t mask = ((uint64_t)1 << s->lg_cap) - 1;
	uint64_t i = tfa_ptr_slot_of(tfa_ptr_hash(ptr), s->lg_cap);
	for (;;) {
		uint64_t key = s->slots[i].ptr;
		if (key == ptr)
			break;
		if (key == 0)
			return false;
		i = (i + 1) & mask;
	}
	if (out != NULL)
		*out = s->slots[i];
	s->count--;
	s->recent[s->recent_pos++ % TFA_PTR_RECENT] = ptr;
	if (tfa_likely(s->slots[(i + 1) & mask].ptr != 0)) {
		s->slots[i].ptr = TFA_PTR_TOMBSTONE;
		return true;
	}
	s->slots[i].ptr = 0;
	s->used--;
	for (i = (i - 1) & mask; s->slots[i].ptr == TFA_PTR_TOMBSTONE; i = (i - 1) & mask) {
		s->slots[i].ptr = 0;
		s->used--;
	}
	return true;
}

/*
 * Inserts a record.  Returns 0; 1 when a record for the same pointer was
 * already there (a free the shim never saw: *replaced receives the old record);
 * -ENOMEM when no memory for the table can be had.  [hot path] [takes shard lock]
 */
int tfa_ptr_table_insert(tfa_ptr_table_t *t, const tfa_record_t *rec, tfa_record_t *replaced)
	TFA_MUST_CHECK;

/* Removes ptr's record into *out.  Returns false when ptr is not in the table. [hot path] */
bool tfa_ptr_table_remove(tfa_ptr_table_t *t, uintptr_t ptr, tfa_record_t *out);

/* Copies ptr's record into *out (when out != NULL).  Returns false when absent. */
bool tfa_ptr_table_lookup(tfa_ptr_table_t *t, uintptr_t ptr, tfa_record_t *out);

/* Whether ptr was among the last pointers removed from its shard. */
bool tfa_ptr_table_recently_freed(tfa_ptr_table_t *t, uintptr_t ptr);

/* Live records in the table. */
uint64_t tfa_ptr_table_count(tfa_ptr_table_t *t);

/*
 * Calls fn on every record, shard by shard, holding that shard's lock.
 * REQUIRES: fn neither allocates through the shim nor touches the table.
 */
void tfa_ptr_table_foreach(tfa_ptr_table_t *t, void (*fn)(void *arg, const tfa_record_t *rec),
			   void *arg);

/* Unmaps every shard; the table is empty and usable again afterwards. */
void tfa_ptr_table_destroy(tfa_ptr_table_t *t);

/* Fork: take every shard lock before fork, release (parent) or reset (child) after. */
void tfa_ptr_table_prefork(tfa_ptr_table_t *t);
void tfa_ptr_table_postfork_parent(tfa_ptr_table_t *t);
void tfa_ptr_table_postfork_child(tfa_ptr_table_t *t);

#endif /* TFA_CORE_PTR_TABLE_H */
