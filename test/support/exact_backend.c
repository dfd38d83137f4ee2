/* SPDX-License-Identifier: MIT */
#include "test/support/exact_backend.h"

#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"

#define TB_MAGIC    UINT32_C(0x7fa11ced)
#define TB_DEAD     UINT32_C(0xdeadf1ee)
#define TB_HDR_SIZE 32u

/* Lives just below every block the backend hands out. */
typedef struct tb_header_s {
	uint32_t magic;
	uint32_t offset; /* from the malloc'd start to the user pointer */
	const tfa_test_backend_t *owner;
	uint64_t size;   /* requested bytes */
	uint64_t serial; /* the spy's allocation id */
} tb_header_t;

_Static_assert(sizeof(tb_header_t) == TB_HDR_SIZE, "header is 32 bytes");

#define COUNT(tb, field) __atomic_fetch_add(&(tb)->counts.field, 1, __ATOMIC_RELAXED)

static inline tfa_test_backend_t *
tb_of(tfa_allocator_t *self)
{
	return tfa_container_of(self, tfa_test_backend_t, base);
}

/* Const ops still count their calls: the counters are the one mutable part. */
static inline tfa_test_backend_t *
tb_mut(const tfa_allocator_t *self)
{
	return tfa_container_of((tfa_allocator_t *)(uintptr_t)self, tfa_test_backend_t, base);
}

static inline tb_header_t *
hdr_of(const void *p)
{
	return (tb_header_t *)(uintptr_t)((const char *)p - TB_HDR_SIZE);
}

size_t
tfa_test_backend_size_for(const tfa_test_backend_t *tb, size_t nbytes)
{
	size_t r = tb->round > 1 ? tb->round : 1;

	if (nbytes == 0)
		nbytes = 1;
	return (nbytes + r - 1) / r * r;
}

bool
tfa_test_backend_owns(const tfa_test_backend_t *tb, const void *p)
{
	if (p == NULL || ((uintptr_t)p & 15) != 0)
		return false;
	const tb_header_t *h = hdr_of(p);
	return h->magic == TB_MAGIC && h->owner == tb;
}

/* Allocation without counting the op (shared by allocate_raw and reallocate_raw). */
static void *
tb_alloc(tfa_test_backend_t *tb, size_t alignment, size_t nbytes)
{
	size_t align = alignment > 16 ? alignment : 16;
	size_t room = (TB_HDR_SIZE + align - 1) / align * align;
	size_t total;
	void *raw = NULL;

	if (__atomic_load_n(&tb->fail_all, __ATOMIC_RELAXED)
	    || __builtin_add_overflow(room, tfa_test_backend_size_for(tb, nbytes), &total)
	    || posix_memalign(&raw, align, total) != 0) {
		__atomic_fetch_add(&tb->counts.failed_allocs, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	char *p = (char *)raw + room;
	tb_header_t *h = hdr_of(p);
	h->magic = TB_MAGIC;
	h->offset = (uint32_t)room;
	h->owner = tb;
	h->size = nbytes;
	h->serial = __atomic_add_fetch(&tb->next_serial, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&tb->counts.live_blocks, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&tb->counts.live_bytes, nbytes, __ATOMIC_RELAXED);
	return p;
}

static void
tb_free(tfa_test_backend_t *tb, void *p)
{
	if (!tfa_test_backend_owns(tb, p)) {
		__atomic_fetch_add(&tb->counts.foreign_frees, 1, __ATOMIC_RELAXED);
		return;
	}
	tb_header_t *h = hdr_of(p);
	__atomic_fetch_sub(&tb->counts.live_blocks, 1, __ATOMIC_RELAXED);
	__atomic_fetch_sub(&tb->counts.live_bytes, h->size, __ATOMIC_RELAXED);
	h->magic = TB_DEAD;
	free((char *)p - h->offset);
}

/* ---- the ops ------------------------------------------------------------------------------ */

static void *
tb_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
                const tfa_allocation_attrs_t *attrs)
{
	tfa_test_backend_t *tb = tb_of(self);

	COUNT(tb, allocate_raw);
	void *p = tb_alloc(tb, alignment, nbytes);
	if (p != NULL && attrs != NULL && attrs->zero_fill)
		memset(p, 0, nbytes);
	return p;
}

static void
tb_deallocate_raw(tfa_allocator_t *self, void *ptr)
{
	tfa_test_backend_t *tb = tb_of(self);

	COUNT(tb, deallocate_raw);
	tb_free(tb, ptr);
}

static size_t
tb_allocated_size_slow(const tfa_allocator_t *self, const void *ptr)
{
	tfa_test_backend_t *tb = tb_mut(self);

	COUNT(tb, allocated_size_slow);
	if (!tfa_test_backend_owns(tb, ptr))
		return 0;
	return tfa_test_backend_size_for(tb, hdr_of(ptr)->size);
}

static size_t
tb_good_size(const tfa_allocator_t *self, size_t nbytes, size_t alignment)
{
	tfa_test_backend_t *tb = tb_mut(self);

	(void)alignment;
	COUNT(tb, good_size);
	return tfa_test_backend_size_for(tb, nbytes);
}

/* The spy's extra ops. */

static bool
spy_tracks_allocation_sizes(const tfa_allocator_t *self)
{
	COUNT(tb_mut(self), tracks_allocation_sizes);
	return true;
}

static size_t
spy_requested_size(const tfa_allocator_t *self, const void *ptr)
{
	tfa_test_backend_t *tb = tb_mut(self);

	COUNT(tb, requested_size);
	return tfa_test_backend_owns(tb, ptr) ? hdr_of(ptr)->size : 0;
}

static size_t
spy_allocated_size(const tfa_allocator_t *self, const void *ptr)
{
	tfa_test_backend_t *tb = tb_mut(self);

	COUNT(tb, allocated_size);
	return tfa_test_backend_owns(tb, ptr) ? tfa_test_backend_size_for(tb, hdr_of(ptr)->size)
	                                      : 0;
}

static int64_t
spy_allocation_id(const tfa_allocator_t *self, const void *ptr)
{
	tfa_test_backend_t *tb = tb_mut(self);

	COUNT(tb, allocation_id);
	return tfa_test_backend_owns(tb, ptr) ? (int64_t)hdr_of(ptr)->serial : 0;
}

static bool
spy_get_stats(tfa_allocator_t *self, tfa_allocator_stats_t *out)
{
	tfa_test_backend_t *tb = tb_of(self);

	COUNT(tb, get_stats);
	memset(out, 0, sizeof(*out));
	out->struct_size = TFA_ALLOCATOR_STATS_SIZE;
	out->num_allocs = (int64_t)__atomic_load_n(&tb->counts.allocate_raw, __ATOMIC_RELAXED);
	out->bytes_in_use = (int64_t)__atomic_load_n(&tb->counts.live_bytes, __ATOMIC_RELAXED);
	return true;
}

static bool
spy_clear_stats(tfa_allocator_t *self)
{
	COUNT(tb_of(self), clear_stats);
	return true;
}

static void *
spy_reallocate_raw(tfa_allocator_t *self, void *ptr, size_t old_size, size_t nbytes,
                   size_t alignment)
{
	tfa_test_backend_t *tb = tb_of(self);

	COUNT(tb, reallocate_raw);
	void *q = tb_alloc(tb, alignment, nbytes);
	if (q == NULL)
		return NULL;
	memcpy(q, ptr, old_size < nbytes ? old_size : nbytes);
	tb_free(tb, ptr);
	return q;
}

static void
spy_deallocate_raw_sized(tfa_allocator_t *self, void *ptr, size_t nbytes, size_t alignment)
{
	tfa_test_backend_t *tb = tb_of(self);

	(void)nbytes;
	(void)alignment;
	COUNT(tb, deallocate_raw_sized);
	tb_free(tb, ptr);
}

static const tfa_allocator_ops_t exact_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "test-exact",
	.allocate_raw = tb_allocate_raw,
	.deallocate_raw = tb_deallocate_raw,
	.allocated_size_slow = tb_allocated_size_slow,
	.good_size = tb_good_size,
};

static const tfa_allocator_ops_t rounding_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "test-round16",
	.allocate_raw = tb_allocate_raw,
	.deallocate_raw = tb_deallocate_raw,
	.allocated_size_slow = tb_allocated_size_slow,
	.good_size = tb_good_size,
};

static const tfa_allocator_ops_t spy_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "test-spy",
	.allocate_raw = tb_allocate_raw,
	.deallocate_raw = tb_deallocate_raw,
	.tracks_allocation_sizes = spy_tracks_allocation_sizes,
	.requested_size = spy_requested_size,
	.allocated_size = spy_allocated_size,
	.allocation_id = spy_allocation_id,
	.allocated_size_slow = tb_allocated_size_slow,
	.get_stats = spy_get_stats,
	.clear_stats = spy_clear_stats,
	.reallocate_raw = spy_reallocate_raw,
	.deallocate_raw_sized = spy_deallocate_raw_sized,
	.good_size = tb_good_size,
};

static void
tb_init(tfa_test_backend_t *tb, const tfa_allocator_ops_t *ops, uint8_t backend_id, size_t round)
{
	memset(tb, 0, sizeof(*tb));
	tb->base.ops = ops;
	tb->base.device = TFA_DEVICE_CPU;
	tb->base.device_ordinal = 0;
	tb->base.backend_id = backend_id;
	tb->round = round;
}

void
tfa_test_backend_init_exact(tfa_test_backend_t *tb)
{
	tb_init(tb, &exact_ops, TFA_BACKEND_TEST0, 1);
}

void
tfa_test_backend_init_rounding(tfa_test_backend_t *tb)
{
	tb_init(tb, &rounding_ops, TFA_BACKEND_TEST1, 16);
}

void
tfa_test_backend_init_spy(tfa_test_backend_t *tb, uint8_t backend_id)
{
	tb_init(tb, &spy_ops, backend_id, 1);
}

void
tfa_test_backend_counts(const tfa_test_backend_t *tb, tfa_test_counts_t *out)
{
	const uint64_t *src = (const uint64_t *)(const void *)&tb->counts;
	uint64_t *dst = (uint64_t *)(void *)out;

	_Static_assert(sizeof(tfa_test_counts_t) % sizeof(uint64_t) == 0, "counters are u64");
	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}
