/* SPDX-License-Identifier: MIT */
#include "core/tracking_allocator.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/single_threaded.h>

#include "core/log.h"

static const tfa_allocation_attrs_t default_attrs;

static inline uint8_t
lg_of(size_t alignment)
{
	return alignment == 0 ? 0 : (uint8_t)__builtin_ctzl(alignment);
}

static inline size_t
align_of_lg(uint8_t lg)
{
	return lg == 0 ? 0 : (size_t)1 << lg;
}

/*
 * The allocated size of a pointer.  It must come out the same when the
 * pointer is made and when it is freed, or allocated bytes in use would drift:
 * both use this function with the same arguments.
 */
size_t
tfa_tracking_backend_allocated(const tfa_allocator_t *b, const void *p, size_t requested,
			       size_t alignment)
{
	size_t want = requested == 0 ? 1 : requested;
	size_t n = tfa_allocator_good_size(b, want, alignment);

	if (n == 0)
		n = tfa_allocator_allocated_size_slow(b, p);
	return n < want ? want : n;
}

static inline void
raise_peak(int64_t *peak, int64_t now)
{
	int64_t seen = __atomic_load_n(peak, __ATOMIC_RELAXED);

	while (now > seen
	       && !__atomic_compare_exchange_n(peak, &seen, now, true, __ATOMIC_RELAXED,
					       __ATOMIC_RELAXED))
		;
}

/* ---- stat slots ------------------------------------------------------------------------ */

typedef struct slot_ref_s {
	tfa_stat_slot_t *slot;
	tfa_lock_t *lock; /* held while the slot is shared */
	uint32_t thread;
} slot_ref_t;

static inline slot_ref_t
slot_enter(tfa_tracking_allocator_t *ta)
{
	slot_ref_t ref;

	if (tfa_unlikely(ta->slot < 0)) {
		ref.slot = &ta->shared;
		ref.lock = &ta->shared_lock;
		ref.thread = 0;
		tfa_lock(ref.lock);
		if (tfa_tls.rec != NULL)
			ref.thread = tfa_thread_index(tfa_tls.rec);
		return ref;
	}
	tfa_thread_rec_t *rec = tfa_thread_rec();
	ref.slot = &rec->slots[ta->slot];
	ref.thread = tfa_thread_index(rec);
	ref.lock = NULL;
	if (tfa_unlikely(rec == &tfa_orphan_rec)) {
		ref.lock = &tfa_orphan_lock;
		tfa_lock(ref.lock);
	}
	return ref;
}

static inline void
slot_exit(slot_ref_t ref)
{
	if (tfa_unlikely(ref.lock != NULL))
		tfa_unlock(ref.lock);
}

static uint64_t next_id(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s);

/*
 * A new allocation id and the thread, in a section of its own: the insert
 * that follows may rebuild a shard, which must not wait with a lock held.
 */
static void
take_id(tfa_tracking_allocator_t *ta, tfa_alloc_info_t *info)
{
	slot_ref_t ref = slot_enter(ta);
	info->id = next_id(ta, ref.slot);
	info->thread = ref.thread;
	slot_exit(ref);
}

static void leaving(tfa_tracking_allocator_t *ta, int64_t before);

void
tfa_tracking_publish(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s)
{
	if (s->pending_bytes != 0) {
		if (s->pending_bytes < 0)
			leaving(ta, __atomic_load_n(&ta->in_use, __ATOMIC_RELAXED));
		int64_t now = __atomic_add_fetch(&ta->in_use, s->pending_bytes, __ATOMIC_RELAXED);
		raise_peak(&ta->peak, now);
		s->pending_bytes = 0;
	}
	if (s->pending_allocated != 0) {
		int64_t now = __atomic_add_fetch(&ta->allocated_in_use, s->pending_allocated,
						 __ATOMIC_RELAXED);
		raise_peak(&ta->allocated_peak, now);
		s->pending_allocated = 0;
	}
	int64_t blocks = tfa_tracking_pending_blocks(s);
	if (blocks != 0) {
		s->published_blocks += blocks;
		raise_peak(&ta->peak_blocks, __atomic_add_fetch(&ta->blocks_in_use, blocks, __ATOMIC_RELAXED));
	}
}

uint64_t
tfa_tracking_id_block(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s)
{
	uint64_t block = ta->slot < 0 ? 1 : TFA_ID_BLOCK;
	uint64_t start = __atomic_fetch_add(&ta->next_id, block, __ATOMIC_RELAXED);

	s->next_id = start + 1;
	s->id_end = start + block + 1;
	return s->next_id++;
}

static inline uint64_t
next_id(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s)
{
	if (tfa_unlikely(s->next_id >= s->id_end))
		return tfa_tracking_id_block(ta, s);
	return s->next_id++;
}

static void
slot_flush(void *ctx, tfa_stat_slot_t *slot)
{
	tfa_tracking_publish(ctx, slot);
}

static void
account_alloc(tfa_stat_slot_t *s, size_t requested, size_t allocated, bool reserved)
{
	s->num_allocs++;
	s->total_bytes += requested;
	s->total_allocated_bytes += allocated;
	if (requested > s->largest_alloc_size)
		s->largest_alloc_size = requested;
	if (!reserved)
		s->pending_bytes += (int64_t)requested;
	s->pending_allocated += (int64_t)allocated;
}

static void
account_free(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s, size_t requested, size_t allocated)
{
	s->num_frees++;
	if (ta->bytes_limit > 0) {
		leaving(ta, __atomic_load_n(&ta->in_use, __ATOMIC_RELAXED));
		__atomic_sub_fetch(&ta->in_use, (int64_t)requested, __ATOMIC_RELAXED);
	} else {
		s->pending_bytes -= (int64_t)requested;
	}
	s->pending_allocated -= (int64_t)allocated;
}

/* Site statistics of the slow paths (the fast ones are in the header). */
static void
site_alloc(tfa_tracking_allocator_t *ta, uint32_t stack_id, uint64_t bytes)
{
	if (stack_id != 0 && ta->sites != NULL)
		tfa_sites_alloc(ta->sites, stack_id, bytes);
}

/* A block recorded without a reservation (no limit can refuse it any more): charged in full. */
static void
res_charge_unlimited(uint32_t tag, unsigned device, uint64_t bytes, uint64_t allocated)
{
	tfa_res_force_reserve(tag, bytes);
	tfa_res_charge(tag, device, bytes, allocated);
}

static void
site_free(tfa_tracking_allocator_t *ta, uint32_t stack_id, uint64_t bytes)
{
	if (stack_id != 0 && ta->sites != NULL)
		tfa_sites_free(ta->sites, stack_id, bytes);
}

/*
 * The published bytes in use go down from `before`: when that was the peak,
 * the sites' figures now are its breakdown.
 */
static void
leaving(tfa_tracking_allocator_t *ta, int64_t before)
{
	if (ta->sites != NULL && before >= __atomic_load_n(&ta->peak, __ATOMIC_RELAXED)
	    && before > __atomic_load_n(&ta->sites->snapshot_bytes, __ATOMIC_RELAXED))
		tfa_sites_snapshot(ta->sites, before);
}

/* A pointer recorded twice: the backend reused it after a free the shim never saw. */
static void
account_lost_free(tfa_tracking_allocator_t *ta, const tfa_record_t *old)
{
	tfa_alloc_info_t info;

	tfa_record_unpack(old, &info);
	if (info.kind == TFA_KIND_INTERNAL)
		return;
	tfa_allocator_t *b = tfa_tracking_allocator_backend(ta, info.backend);
	size_t asz = b != NULL ? tfa_tracking_backend_allocated(b, (void *)info.ptr, info.requested,
						   align_of_lg(info.lg_align))
			       : info.requested;
	slot_ref_t ref = slot_enter(ta);
	account_free(ta, ref.slot, info.requested, asz);
	tfa_tracking_settle(ta, ref.slot);
	slot_exit(ref);
	site_free(ta, info.stack_id, info.requested);
	if (info.tag != 0)
		tfa_res_uncharge(info.tag, info.device, info.requested, asz);
	TFA_LOG_ONCE("pointer %p was handed out again while tfalloc held it live: "
		     "a free bypassed tfalloc (counted as freed)",
		     (void *)info.ptr);
}

/* ---- the tracker ----------------------------------------------------------------------- */

static void
update_slow(tfa_tracking_allocator_t *ta)
{
	uint8_t slow = ta->slot < 0 || ta->degraded || ta->bytes_limit > 0;
	__atomic_store_n(&ta->slow, slow, __ATOMIC_RELAXED);
	__atomic_store_n(&ta->fast, slow ? 0 : ta->fast_wanted, __ATOMIC_RELAXED);
}

void
tfa_tracking_allocator_set_fast(tfa_tracking_allocator_t *ta, uint8_t on)
{
	ta->fast_wanted = on;
	update_slow(ta);
}

static void
degrade(tfa_tracking_allocator_t *ta)
{
	ta->degraded = true;
	update_slow(ta);
	TFA_LOG_ONCE("out of memory for the pointer table: tfalloc stops recording "
		     "allocations from here on; the program continues");
}

void
tfa_tracking_insert_failed(tfa_tracking_allocator_t *ta, int r, const tfa_record_t *old)
{
	if (r > 0)
		account_lost_free(ta, old);
	else
		degrade(ta);
}

/* A rebuild found a pointer recorded twice: the older record's free bypassed the shim. */
static void
stale_record(void *arg, const tfa_record_t *rec)
{
	account_lost_free(arg, rec);
}

int
tfa_tracking_allocator_init(tfa_tracking_allocator_t *ta, tfa_allocator_t *wrapped,
			    tfa_ptr_table_t *table, bool per_thread_stats)
{
	if (ta == NULL || wrapped == NULL || table == NULL || wrapped->backend_id >= TFA_MAX_BACKENDS)
		return -EINVAL;
	memset(ta, 0, sizeof(*ta));
	tfa_allocator_wrapper_init(&ta->wrapper, wrapped, &tfa_tracking_allocator_ops);
	ta->backends[wrapped->backend_id] = wrapped;
	ta->table = table;
	tfa_ptr_table_set_stale_hook(table, stale_record, ta);
	ta->slot = -1;
	if (per_thread_stats) {
		int slot = tfa_thread_slot_acquire(slot_flush, ta);
		if (slot >= 0)
			ta->slot = slot;
	}
	update_slow(ta);
	return 0;
}

void
tfa_tracking_allocator_claim_process_slot(tfa_tracking_allocator_t *ta)
{
	ta->slot = TFA_SLOT_PROCESS;
	tfa_thread_slot_set_process_flush(slot_flush, ta);
	update_slow(ta);
}

void
tfa_tracking_allocator_destroy(tfa_tracking_allocator_t *ta)
{
	if (ta->slot > TFA_SLOT_PROCESS)
		tfa_thread_slot_release(ta->slot);
	ta->slot = -1;
	tfa_ptr_table_destroy(ta->table);
}

void
tfa_tracking_allocator_set_backend(tfa_tracking_allocator_t *ta, tfa_allocator_t *backend)
{
	if (backend == NULL || backend->backend_id >= TFA_MAX_BACKENDS)
		return;
	ta->backends[backend->backend_id] = backend;
	tfa_tracking_allocator_set_fast(ta, 0);
	__atomic_store_n(&ta->wrapper.wrapped, backend, __ATOMIC_RELEASE);
}

void
tfa_tracking_allocator_set_bytes_limit(tfa_tracking_allocator_t *ta, int64_t limit)
{
	if (limit > 0) {
		/* Reservations need exact figures: publish what this thread holds. */
		tfa_tracking_allocator_publish_self(ta);
	}
	__atomic_store_n(&ta->bytes_limit, limit > 0 ? limit : 0, __ATOMIC_RELAXED);
	update_slow(ta);
}

void *
tfa_tracking_allocate_slow(tfa_tracking_allocator_t *ta, size_t alignment, size_t nbytes,
			   const tfa_allocation_attrs_t *attrs)
{
	if (tfa_unlikely(nbytes > TFA_REQUESTED_MAX))
		return NULL;

	tfa_allocator_t *b = __atomic_load_n(&ta->wrapper.wrapped, __ATOMIC_ACQUIRE);
	bool internal = attrs->kind == TFA_KIND_INTERNAL;
	int64_t limit = __atomic_load_n(&ta->bytes_limit, __ATOMIC_RELAXED);
	bool reserved = false;
	int64_t reserved_now = 0;

	if (tfa_unlikely(limit > 0 && !internal)) {
		reserved_now = __atomic_add_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
		if (reserved_now > limit) {
			__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
			return NULL;
		}
		reserved = true;
	}
	/* The current resource's limit, after the device's (core/resource_mgr.h). */
	uint32_t tag = internal ? 0 : tfa_tls.tag;
	if (tfa_unlikely(tag != 0) && !tfa_res_reserve(tag, nbytes)) {
		if (reserved)
			__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
		return NULL;
	}

	void *p = tfa_allocator_allocate_raw(b, alignment, nbytes == 0 ? 1 : nbytes, attrs);
	if (tfa_unlikely(p == NULL || ta->degraded)) {
		if (reserved)
			__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
		if (tag != 0)
			tfa_res_unreserve(tag, nbytes);
		return p;
	}
	/* The peak moves only for memory the program got. */
	if (reserved)
		raise_peak(&ta->peak, reserved_now);

	tfa_alloc_info_t info = {
		.ptr = (uintptr_t)p,
		.requested = nbytes,
		.backend = b->backend_id,
		.kind = attrs->kind,
		.device = ta->device_code,
		.lg_align = lg_of(alignment),
		.stack_id = internal ? 0 : attrs->stack_id,
		.tag = tag,
	};
	size_t asz = internal ? 0 : tfa_tracking_backend_allocated(b, p, nbytes, alignment);
	tfa_record_t old;
	int r;

	/* Record and count in one critical section: a fork sees both or neither. */
	if (!internal)
		take_id(ta, &info);
	tfa_record_t rec = tfa_record_pack(&info);
	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, (uintptr_t)p);
	r = tfa_ptr_held_insert_room(ta->table, &held, &rec, &old);
	if (!internal) {
		slot_ref_t ref = slot_enter(ta);
		if (tfa_likely(r >= 0))
			account_alloc(ref.slot, nbytes, asz, reserved);
		tfa_tracking_settle(ta, ref.slot);
		slot_exit(ref);
		if (tfa_likely(r >= 0))
			site_alloc(ta, info.stack_id, nbytes);
		if (tag != 0 && r >= 0)
			tfa_res_charge(tag, ta->device_code, nbytes, asz);
	}
	tfa_ptr_table_release(held);

	if (tfa_likely(r == 0))
		return p;
	if (r > 0) {
		account_lost_free(ta, &old);
		return p;
	}
	/* No memory for the table: stop recording, keep the program going. */
	if (reserved)
		__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
	if (tag != 0)
		tfa_res_unreserve(tag, nbytes);
	degrade(ta);
	return p;
}

void
tfa_tracking_record_block(tfa_tracking_allocator_t *ta, const tfa_record_t *rec, size_t asz)
{
	size_t nbytes = rec->size_meta & TFA_REQUESTED_MAX;
	tfa_record_t old;

	/* Record and count in one critical section: a fork sees both or neither. */
	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, (uintptr_t)rec->ptr);
	int r = tfa_ptr_held_insert_room(ta->table, &held, rec, &old);
	if (tfa_likely(r >= 0)) {
		slot_ref_t ref = slot_enter(ta);
		account_alloc(ref.slot, nbytes, asz, false);
		tfa_tracking_settle(ta, ref.slot);
		slot_exit(ref);
		site_alloc(ta, rec->stack_id, nbytes);
		if (rec->tag != 0)
			res_charge_unlimited(rec->tag, (unsigned)(rec->size_meta >> 53) & 31, nbytes, asz);
	}
	tfa_ptr_table_release(held);
	if (tfa_unlikely(r != 0))
		tfa_tracking_insert_failed(ta, r, &old);
}

/* ---- memory another API makes (cuda_hooks/) ------------------------------------------- */

bool
tfa_tracking_reserve(tfa_tracking_allocator_t *ta, size_t nbytes, uint32_t tag, bool *reserved)
{
	int64_t limit = __atomic_load_n(&ta->bytes_limit, __ATOMIC_RELAXED);

	*reserved = false;
	if (nbytes > TFA_REQUESTED_MAX)
		nbytes = TFA_REQUESTED_MAX;
	if (limit > 0) {
		int64_t now = __atomic_add_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
		if (now > limit) {
			__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
			return false;
		}
		*reserved = true;
	}
	if (tag != 0 && !tfa_res_reserve(tag, nbytes)) {
		if (*reserved)
			__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
		*reserved = false;
		return false;
	}
	return true;
}

void
tfa_tracking_unreserve(tfa_tracking_allocator_t *ta, size_t nbytes, uint32_t tag, bool reserved)
{
	if (nbytes > TFA_REQUESTED_MAX)
		nbytes = TFA_REQUESTED_MAX;
	if (reserved)
		__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
	if (tag != 0)
		tfa_res_unreserve(tag, nbytes);
}

void
tfa_tracking_record_external(tfa_tracking_allocator_t *ta, uintptr_t ptr, size_t nbytes,
			     size_t actual, uint8_t kind, uint32_t stack_id, uint32_t tag, bool reserved)
{
	if (nbytes > TFA_REQUESTED_MAX)
		nbytes = TFA_REQUESTED_MAX;
	if (actual > TFA_REQUESTED_MAX)
		actual = TFA_REQUESTED_MAX;
	/* A pitched block larger than reserved: the rest counted without a limit. */
	if (actual != nbytes) {
		int64_t more = (int64_t)actual - (int64_t)nbytes;
		if (reserved)
			__atomic_add_fetch(&ta->in_use, more, __ATOMIC_RELAXED);
		if (tag != 0) {
			if (more > 0)
				tfa_res_force_reserve(tag, (uint64_t)more);
			else
				tfa_res_unreserve(tag, (uint64_t)-more);
		}
	}
	if (ta->degraded) {
		tfa_tracking_unreserve(ta, actual, tag, reserved);
		return;
	}
	tfa_allocator_t *b = __atomic_load_n(&ta->wrapper.wrapped, __ATOMIC_ACQUIRE);
	tfa_alloc_info_t info = {
		.ptr = ptr,
		.requested = actual,
		.backend = b->backend_id,
		.kind = kind,
		.device = ta->device_code,
		.stack_id = stack_id,
		.tag = tag,
	};
	tfa_record_t old;

	take_id(ta, &info);
	tfa_record_t rec = tfa_record_pack(&info);
	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, ptr);
	int r = tfa_ptr_held_insert_room(ta->table, &held, &rec, &old);
	slot_ref_t ref = slot_enter(ta);
	if (r >= 0)
		account_alloc(ref.slot, actual, actual, reserved);
	tfa_tracking_settle(ta, ref.slot);
	slot_exit(ref);
	if (r >= 0) {
		if (reserved)
			raise_peak(&ta->peak, __atomic_load_n(&ta->in_use, __ATOMIC_RELAXED));
		site_alloc(ta, stack_id, actual);
		if (tag != 0)
			tfa_res_charge(tag, ta->device_code, actual, actual);
	}
	tfa_ptr_table_release(held);
	if (r > 0) {
		account_lost_free(ta, &old);
	} else if (r < 0) {
		tfa_tracking_unreserve(ta, actual, tag, reserved);
		degrade(ta);
	}
}

bool
tfa_tracking_forget(tfa_tracking_allocator_t *ta, uintptr_t ptr, tfa_alloc_info_t *info)
{
	tfa_record_t rec;
	tfa_alloc_info_t local;

	if (info == NULL)
		info = &local;
	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, ptr);
	bool found = tfa_ptr_held_remove(held, ptr, &rec);
	if (found) {
		tfa_record_unpack(&rec, info);
		slot_ref_t ref = slot_enter(ta);
		account_free(ta, ref.slot, info->requested, info->requested);
		tfa_tracking_settle(ta, ref.slot);
		slot_exit(ref);
		site_free(ta, info->stack_id, info->requested);
		if (info->tag != 0)
			tfa_res_uncharge(info->tag, info->device, info->requested, info->requested);
	}
	tfa_ptr_table_release(held);
	return found;
}

void
tfa_tracking_count_untracked(tfa_tracking_allocator_t *ta, int change, size_t requested,
			     size_t allocated, bool realloc)
{
	slot_ref_t ref = slot_enter(ta);
	tfa_stat_slot_t *s = ref.slot;

	if (realloc)
		s->num_reallocs++;
	/* Bytes in use move by the allocated size: the only one the block's free will know. */
	if (change > 0) {
		account_alloc(s, requested, allocated, true);
		s->pending_bytes += (int64_t)allocated;
	} else if (change < 0) {
		account_free(ta, s, allocated, allocated); /* no bytes limit in this mode */
	}
	tfa_tracking_settle_after(ta, s, change > 0, false);
	slot_exit(ref);
}

/* A free of the record info of ptr, made by backend b: its counts, its site's and its resource's. */
static void
uncount_freed(tfa_tracking_allocator_t *ta, tfa_allocator_t *b, const void *ptr, const tfa_alloc_info_t *info,
	      size_t alignment)
{
	size_t asz = tfa_tracking_backend_allocated(b, ptr, info->requested, alignment);
	slot_ref_t ref = slot_enter(ta);

	account_free(ta, ref.slot, info->requested, asz);
	tfa_tracking_settle(ta, ref.slot);
	slot_exit(ref);
	site_free(ta, info->stack_id, info->requested);
	if (info->tag != 0)
		tfa_res_uncharge(info->tag, info->device, info->requested, asz);
}

bool
tfa_tracking_unrecord(tfa_tracking_allocator_t *ta, uintptr_t ptr, tfa_alloc_info_t *info)
{
	tfa_record_t rec;

	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, ptr);
	bool found = tfa_ptr_held_remove(held, ptr, &rec);
	if (found) {
		tfa_record_unpack(&rec, info);
		if (info->kind != TFA_KIND_INTERNAL)
			uncount_freed(ta, tfa_tracking_allocator_backend(ta, info->backend), (const void *)ptr,
				      info, align_of_lg(info->lg_align));
	}
	tfa_ptr_table_release(held);
	return found;
}

void *
tfa_tracking_allocate(tfa_tracking_allocator_t *ta, size_t alignment, size_t nbytes,
		      const tfa_allocation_attrs_t *attrs)
{
	return tfa_tracking_allocate_fast(ta, alignment, nbytes, attrs != NULL ? attrs : &default_attrs);
}

int
tfa_tracking_deallocate(tfa_tracking_allocator_t *ta, void *ptr, uint8_t kind,
			tfa_alloc_info_t *info)
{
	tfa_record_t rec;
	tfa_alloc_info_t local;

	if (info == NULL)
		info = &local;

	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, (uintptr_t)ptr);
	bool found = tfa_ptr_held_remove(held, (uintptr_t)ptr, &rec);
	tfa_allocator_t *b = NULL;
	size_t alignment = 0;
	if (tfa_likely(found)) {
		tfa_record_unpack(&rec, info);
		b = tfa_tracking_allocator_backend(ta, info->backend);
		alignment = align_of_lg(info->lg_align);
		if (info->kind != TFA_KIND_INTERNAL)
			uncount_freed(ta, b, ptr, info, alignment);
	}
	tfa_ptr_table_release(held);

	if (tfa_unlikely(!found)) {
		if (ta->degraded) {
			tfa_allocator_deallocate_raw(ta->wrapper.wrapped, ptr);
			return TFA_FREE_OK;
		}
		memset(info, 0, sizeof(*info));
		info->ptr = (uintptr_t)ptr;
		return tfa_ptr_table_recently_freed(ta->table, (uintptr_t)ptr) ? TFA_FREE_DOUBLE
									       : TFA_FREE_INVALID;
	}
	/* Recorded before the backend can hand the address out again. */
	tfa_allocator_deallocate_raw_sized(b, ptr, info->requested == 0 ? 1 : info->requested,
					   alignment);
	return tfa_kinds_match(info->kind, kind) ? TFA_FREE_OK : TFA_FREE_MISMATCH;
}

/*
 * The two halves of a realloc's accounting, each done with the table change
 * it belongs to: the old block is uncounted when its record leaves the table,
 * the new one counted when its record goes in.  A fork in between sees the
 * block in neither.  With a bytes limit, in_use moves directly.
 */
static void
realloc_uncount_old(tfa_tracking_allocator_t *ta, tfa_stat_slot_t *s, size_t requested,
		    size_t asz, bool direct, int sign)
{
	s->num_frees += (uint64_t)(int64_t)sign;
	if (direct)
		__atomic_sub_fetch(&ta->in_use, sign * (int64_t)requested, __ATOMIC_RELAXED);
	else
		s->pending_bytes -= sign * (int64_t)requested;
	s->pending_allocated -= sign * (int64_t)asz;
}

void *
tfa_tracking_reallocate(tfa_tracking_allocator_t *ta, void *ptr, size_t nbytes, uint32_t stack_id,
			int *result, tfa_alloc_info_t *old_info)
{
	tfa_record_t rec;
	tfa_alloc_info_t info;
	int local_result;
	size_t old_asz = 0;
	tfa_allocator_t *b = NULL;
	size_t alignment = 0;
	bool internal = false;
	bool direct = __atomic_load_n(&ta->bytes_limit, __ATOMIC_RELAXED) > 0;

	if (result == NULL)
		result = &local_result;
	*result = TFA_FREE_OK;

	tfa_ptr_held_t held = tfa_ptr_table_hold(ta->table, (uintptr_t)ptr);
	bool found = tfa_ptr_held_remove(held, (uintptr_t)ptr, &rec);
	if (tfa_likely(found)) {
		tfa_record_unpack(&rec, &info);
		if (old_info != NULL)
			*old_info = info;
		b = tfa_tracking_allocator_backend(ta, info.backend);
		alignment = align_of_lg(info.lg_align);
		internal = info.kind == TFA_KIND_INTERNAL;
		if (!internal) {
			old_asz = tfa_tracking_backend_allocated(b, ptr, info.requested, alignment);
			slot_ref_t ref = slot_enter(ta);
			realloc_uncount_old(ta, ref.slot, info.requested, old_asz, direct, 1);
			slot_exit(ref);
			if (info.tag != 0)
				tfa_res_uncharge(info.tag, info.device, info.requested, old_asz);
		}
	}
	tfa_ptr_table_release(held);
	if (tfa_unlikely(!found)) {
		if (ta->degraded) {
			tfa_allocator_t *cur = ta->wrapper.wrapped;
			size_t old = tfa_allocator_allocated_size_slow(cur, ptr);
			void *q = tfa_allocator_reallocate_raw(cur, ptr, old, nbytes, 0);
			if (q == NULL)
				*result = TFA_FREE_NOMEM;
			return q;
		}
		*result = tfa_ptr_table_recently_freed(ta->table, (uintptr_t)ptr) ? TFA_FREE_DOUBLE
										  : TFA_FREE_INVALID;
		return NULL;
	}

	int64_t reserved_now = 0;
	bool reserved = false;
	if (nbytes > TFA_REQUESTED_MAX)
		goto out_refused;
	if (direct && !internal) {
		int64_t limit = __atomic_load_n(&ta->bytes_limit, __ATOMIC_RELAXED);
		reserved_now = __atomic_add_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
		if (limit > 0 && reserved_now > limit && nbytes > info.requested) {
			__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
			goto out_refused;
		}
		reserved = true;
	}
	/* The current resource's limit, which a block that does not grow always passes. */
	uint32_t new_tag = internal ? 0 : tfa_tls.tag;
	if (new_tag != 0 && !tfa_res_reserve(new_tag, nbytes)) {
		if (nbytes > info.requested) {
			if (reserved)
				__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
			goto out_refused;
		}
		tfa_res_force_reserve(new_tag, nbytes);
	}

	void *q = tfa_allocator_reallocate_raw(b, ptr, info.requested == 0 ? 1 : info.requested,
					       nbytes == 0 ? 1 : nbytes, alignment);
	if (q == NULL) {
		if (reserved)
			__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
		if (new_tag != 0)
			tfa_res_unreserve(new_tag, nbytes);
		goto out_refused;
	}
	if (reserved)
		raise_peak(&ta->peak, reserved_now);

	uint8_t made_by = info.kind;
	uint32_t old_stack = info.stack_id;
	size_t old_requested = info.requested;
	tfa_record_t old;
	int r;

	info.ptr = (uintptr_t)q;
	info.requested = nbytes;
	if (!internal) {
		take_id(ta, &info);
		info.tag = new_tag;
		info.kind = TFA_KIND_MALLOC;
		info.stack_id = stack_id;
	}
	rec = tfa_record_pack(&info);
	held = tfa_ptr_table_hold(ta->table, (uintptr_t)q);
	r = tfa_ptr_held_insert_room(ta->table, &held, &rec, &old);
	if (!internal) {
		size_t new_asz = tfa_tracking_backend_allocated(b, q, nbytes, alignment);
		slot_ref_t ref = slot_enter(ta);
		tfa_stat_slot_t *s = ref.slot;
		s->num_reallocs++;
		if (tfa_likely(r >= 0)) {
			account_alloc(s, nbytes, new_asz, reserved);
		} else if (reserved) {
			/* Not recorded from here on: not counted either. */
			__atomic_sub_fetch(&ta->in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
		}
		tfa_tracking_settle(ta, s);
		slot_exit(ref);
		site_free(ta, old_stack, old_requested);
		if (r >= 0)
			site_alloc(ta, stack_id, nbytes);
		if (new_tag != 0 && r >= 0)
			tfa_res_charge(new_tag, ta->device_code, nbytes, new_asz);
		else if (new_tag != 0)
			tfa_res_unreserve(new_tag, nbytes);
	}
	tfa_ptr_table_release(held);

	if (r > 0)
		account_lost_free(ta, &old);
	else if (r < 0)
		degrade(ta);
	if (!tfa_kinds_match(made_by, TFA_KIND_MALLOC))
		*result = TFA_FREE_MISMATCH;
	return q;

out_refused:
	/* The old block is intact: its record goes back, and its count with it. */
	held = tfa_ptr_table_hold(ta->table, (uintptr_t)ptr);
	if (tfa_ptr_held_insert_room(ta->table, &held, &rec, NULL) < 0) {
		tfa_ptr_table_release(held);
		degrade(ta);
		*result = TFA_FREE_NOMEM;
		return NULL;
	} else if (!internal) {
		slot_ref_t ref = slot_enter(ta);
		realloc_uncount_old(ta, ref.slot, info.requested, old_asz, direct, -1);
		tfa_tracking_settle(ta, ref.slot);
		slot_exit(ref);
		if (info.tag != 0)
			tfa_res_undo_uncharge(info.tag, info.device, info.requested, old_asz);
	}
	tfa_ptr_table_release(held);
	*result = TFA_FREE_NOMEM;
	return NULL;
}

bool
tfa_tracking_lookup(tfa_tracking_allocator_t *ta, const void *ptr, tfa_alloc_info_t *info)
{
	tfa_record_t rec;

	if (!tfa_ptr_table_lookup(ta->table, (uintptr_t)ptr, &rec))
		return false;
	if (info != NULL)
		tfa_record_unpack(&rec, info);
	return true;
}

size_t
tfa_tracking_backend_usable_size(tfa_tracking_allocator_t *ta, const tfa_alloc_info_t *info)
{
	tfa_allocator_t *b = tfa_tracking_allocator_backend(ta, info->backend);
	size_t n;

	if (b == NULL)
		return info->requested;
	n = tfa_allocator_allocated_size_slow(b, (const void *)info->ptr);
	return n != 0 ? n : tfa_tracking_backend_allocated(b, (const void *)info->ptr, info->requested,
					      align_of_lg(info->lg_align));
}

/* ---- statistics ------------------------------------------------------------------------ */

struct merge_ctx {
	int slot;
	tfa_stat_slot_t sum;
};

static void
merge_rec(void *arg, tfa_thread_rec_t *rec)
{
	struct merge_ctx *m = arg;
	const tfa_stat_slot_t *s = &rec->slots[m->slot];

	m->sum.num_allocs += __atomic_load_n(&s->num_allocs, __ATOMIC_RELAXED);
	m->sum.num_frees += __atomic_load_n(&s->num_frees, __ATOMIC_RELAXED);
	m->sum.num_reallocs += __atomic_load_n(&s->num_reallocs, __ATOMIC_RELAXED);
	m->sum.total_bytes += __atomic_load_n(&s->total_bytes, __ATOMIC_RELAXED);
	m->sum.total_allocated_bytes += __atomic_load_n(&s->total_allocated_bytes,
							__ATOMIC_RELAXED);
	uint64_t largest = __atomic_load_n(&s->largest_alloc_size, __ATOMIC_RELAXED);
	if (largest > m->sum.largest_alloc_size)
		m->sum.largest_alloc_size = largest;
	m->sum.pending_bytes += __atomic_load_n(&s->pending_bytes, __ATOMIC_RELAXED);
	m->sum.pending_allocated += __atomic_load_n(&s->pending_allocated, __ATOMIC_RELAXED);
}

static tfa_stat_slot_t
merged_slot(tfa_tracking_allocator_t *ta)
{
	struct merge_ctx m = { .slot = ta->slot };

	if (ta->slot < 0) {
		tfa_lock(&ta->shared_lock);
		m.sum = ta->shared;
		tfa_unlock(&ta->shared_lock);
		return m.sum;
	}
	tfa_thread_foreach(merge_rec, &m);
	return m.sum;
}

bool
tfa_tracking_allocator_get_stats(tfa_tracking_allocator_t *ta, tfa_allocator_stats_t *out)
{
	tfa_stat_slot_t s = merged_slot(ta);
	int64_t in_use = __atomic_load_n(&ta->in_use, __ATOMIC_RELAXED) + s.pending_bytes;
	int64_t alloc_in_use =
		__atomic_load_n(&ta->allocated_in_use, __ATOMIC_RELAXED) + s.pending_allocated;

	memset(out, 0, sizeof(*out));
	out->struct_size = TFA_ALLOCATOR_STATS_SIZE;
	out->num_allocs = (int64_t)s.num_allocs;
	out->num_frees = (int64_t)s.num_frees;
	out->num_reallocs = (int64_t)s.num_reallocs;
	out->bytes_in_use = in_use;
	out->peak_bytes_in_use = TFA_MAX(__atomic_load_n(&ta->peak, __ATOMIC_RELAXED), in_use);
	out->largest_alloc_size = (int64_t)s.largest_alloc_size;
	out->bytes_limit = __atomic_load_n(&ta->bytes_limit, __ATOMIC_RELAXED);
	out->total_bytes = (int64_t)s.total_bytes;
	out->allocated_bytes_in_use = alloc_in_use;
	out->peak_allocated_bytes_in_use =
		TFA_MAX(__atomic_load_n(&ta->allocated_peak, __ATOMIC_RELAXED), alloc_in_use);
	out->total_allocated_bytes = (int64_t)s.total_allocated_bytes;
	out->peak_blocks_in_use = TFA_MAX(__atomic_load_n(&ta->peak_blocks, __ATOMIC_RELAXED),
					  (int64_t)(s.num_allocs - s.num_frees));
	return true;
}

void
tfa_tracking_allocator_get_sizes(tfa_tracking_allocator_t *ta, uint64_t *total_bytes,
				 uint64_t *high_watermark, uint64_t *allocated)
{
	tfa_allocator_stats_t st;

	tfa_tracking_allocator_get_stats(ta, &st);
	*total_bytes = (uint64_t)st.total_allocated_bytes;
	*high_watermark = (uint64_t)st.peak_allocated_bytes_in_use;
	*allocated = (uint64_t)st.allocated_bytes_in_use;
}

static void
clear_slot(tfa_stat_slot_t *s)
{
	s->num_allocs = s->num_frees = s->num_reallocs = 0;
	s->total_bytes = s->total_allocated_bytes = s->largest_alloc_size = 0;
}

static void
clear_rec(void *arg, tfa_thread_rec_t *rec)
{
	clear_slot(&rec->slots[*(int *)arg]);
}

/* TensorFlow's ClearStats: counts restart, the peak becomes what is in use now. */
static bool
tracking_clear_stats(tfa_allocator_t *self)
{
	tfa_tracking_allocator_t *ta = tfa_container_of(self, tfa_tracking_allocator_t, wrapper.base);
	tfa_allocator_stats_t st;

	tfa_tracking_allocator_get_stats(ta, &st);
	if (ta->slot < 0) {
		tfa_lock(&ta->shared_lock);
		clear_slot(&ta->shared);
		tfa_unlock(&ta->shared_lock);
	} else {
		tfa_thread_foreach(clear_rec, &ta->slot);
	}
	__atomic_store_n(&ta->peak, st.bytes_in_use, __ATOMIC_RELAXED);
	__atomic_store_n(&ta->allocated_peak, st.allocated_bytes_in_use, __ATOMIC_RELAXED);
	return true;
}

void
tfa_tracking_allocator_publish_self(tfa_tracking_allocator_t *ta)
{
	slot_ref_t ref = slot_enter(ta);
	tfa_tracking_publish(ta, ref.slot);
	slot_exit(ref);
}

/* ---- the ops table --------------------------------------------------------------------- */

static inline tfa_tracking_allocator_t *
tracker_of(const tfa_allocator_t *self)
{
	return tfa_container_of((tfa_allocator_t *)(uintptr_t)self, tfa_tracking_allocator_t,
				wrapper.base);
}

static void *
tracking_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
		      const tfa_allocation_attrs_t *attrs)
{
	return tfa_tracking_allocate(tracker_of(self), alignment, nbytes, attrs);
}

static void
tracking_deallocate_raw(tfa_allocator_t *self, void *ptr)
{
	(void)tfa_tracking_deallocate(tracker_of(self), ptr, TFA_KIND_INTERNAL, NULL);
}

static bool
tracking_tracks_allocation_sizes(const tfa_allocator_t *self)
{
	(void)self;
	return true;
}

static size_t
tracking_requested_size(const tfa_allocator_t *self, const void *ptr)
{
	tfa_alloc_info_t info;
	return tfa_tracking_lookup(tracker_of(self), ptr, &info) ? info.requested : 0;
}

static size_t
tracking_allocated_size(const tfa_allocator_t *self, const void *ptr)
{
	tfa_tracking_allocator_t *ta = tracker_of(self);
	tfa_alloc_info_t info;

	if (!tfa_tracking_lookup(ta, ptr, &info))
		return 0;
	tfa_allocator_t *b = tfa_tracking_allocator_backend(ta, info.backend);
	return b == NULL ? info.requested
			 : tfa_tracking_backend_allocated(b, ptr, info.requested, align_of_lg(info.lg_align));
}

static int64_t
tracking_allocation_id(const tfa_allocator_t *self, const void *ptr)
{
	tfa_alloc_info_t info;
	return tfa_tracking_lookup(tracker_of(self), ptr, &info) ? (int64_t)info.id : 0;
}

static bool
tracking_get_stats(tfa_allocator_t *self, tfa_allocator_stats_t *out)
{
	return tfa_tracking_allocator_get_stats(tracker_of(self), out);
}

static void *
tracking_reallocate_raw(tfa_allocator_t *self, void *ptr, size_t old_size, size_t nbytes,
			size_t alignment)
{
	(void)old_size;
	(void)alignment;
	return tfa_tracking_reallocate(tracker_of(self), ptr, nbytes, 0, NULL, NULL);
}

const tfa_allocator_ops_t tfa_tracking_allocator_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "tracking",
	.allocate_raw = tracking_allocate_raw,
	.deallocate_raw = tracking_deallocate_raw,
	.tracks_allocation_sizes = tracking_tracks_allocation_sizes,
	.requested_size = tracking_requested_size,
	.allocated_size = tracking_allocated_size,
	.allocation_id = tracking_allocation_id,
	.allocated_size_slow = tracking_allocated_size,
	.get_stats = tracking_get_stats,
	.clear_stats = tracking_clear_stats,
	.reallocate_raw = tracking_reallocate_raw,
};
