/* SPDX-License-Identifier: MIT */
/*
 * The Allocator of TensorFlow's core/framework, in C.
 *
 * Glossary:
 *   allocator        an ops table plus state.  Concrete allocators embed
 *                    tfa_allocator_t first and recover themselves with
 *                    tfa_container_of.
 *   allocator attrs  (AllocatorAttributes) what memory a caller wants from a
 *                    device: bit 0 on_host, bit 1 nic_compatible, bit 2
 *                    gpu_compatible, bit 3 track_sizes; the high 8 bits are
 *                    device specific.  Used to choose an allocator.
 *   allocation attrs (AllocationAttributes) per call: retry policy, logging,
 *                    and tfalloc's additions (zero fill, the kind of call).
 *   stats            (AllocatorStats) TensorFlow's counters plus what a
 *                    profiler needs: frees, reallocs, totals, and every byte
 *                    figure both in requested and in allocated bytes.
 *
 * Nobody calls a->ops->x outside this header: the inline tfa_allocator_*()
 * wrappers supply TensorFlow's defaults for the [optional] members.  Unlike
 * TensorFlow's CHECK(false) defaults, no default aborts.
 */
#ifndef TFA_CORE_ALLOCATOR_H
#define TFA_CORE_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"

typedef enum tfa_device_type_e {
	TFA_DEVICE_CPU = 0,
	TFA_DEVICE_CUDA = 1,
	TFA_DEVICE_TYPE_COUNT
} tfa_device_type_t;

/* "cpu", "cuda", or "unknown". */
const char *tfa_device_type_name(tfa_device_type_t t);

/*
 * The alignment every host backend gives every block, whatever its size.
 * glibc gives 16, but jemalloc's 8-byte class is aligned to 8 only: an
 * alignment above this must reach the backend, which maps it to its own rules.
 */
#define TFA_MIN_HOST_ALIGNMENT 8

/* ---- AllocatorAttributes ---------------------------------------------------------------- */

typedef struct tfa_allocator_attrs_s {
	uint32_t value;
} tfa_allocator_attrs_t;

#define TFA_ATTR_ON_HOST        (1u << 0)
#define TFA_ATTR_NIC_COMPATIBLE (1u << 1)
#define TFA_ATTR_GPU_COMPATIBLE (1u << 2)
#define TFA_ATTR_TRACK_SIZES    (1u << 3)
#define TFA_ATTR_DEVICE_SHIFT   24 /* the high 8 bits belong to the device */
#define TFA_ATTR_DEVICE_MASK    (0xffu << TFA_ATTR_DEVICE_SHIFT)

static inline bool
tfa_attrs_on_host(tfa_allocator_attrs_t a)
{
	return (a.value & TFA_ATTR_ON_HOST) != 0;
}

static inline bool
tfa_attrs_nic_compatible(tfa_allocator_attrs_t a)
{
	return (a.value & TFA_ATTR_NIC_COMPATIBLE) != 0;
}

static inline bool
tfa_attrs_gpu_compatible(tfa_allocator_attrs_t a)
{
	return (a.value & TFA_ATTR_GPU_COMPATIBLE) != 0;
}

static inline bool
tfa_attrs_track_sizes(tfa_allocator_attrs_t a)
{
	return (a.value & TFA_ATTR_TRACK_SIZES) != 0;
}

static inline void
tfa_attrs_set(tfa_allocator_attrs_t *a, uint32_t bit, bool on)
{
	if (on)
		a->value |= bit;
	else
		a->value &= ~bit;
}

static inline uint8_t
tfa_attrs_device_bits(tfa_allocator_attrs_t a)
{
	return (uint8_t)(a.value >> TFA_ATTR_DEVICE_SHIFT);
}

static inline void
tfa_attrs_set_device_bits(tfa_allocator_attrs_t *a, uint8_t bits)
{
	a->value = (a->value & ~TFA_ATTR_DEVICE_MASK) | ((uint32_t)bits << TFA_ATTR_DEVICE_SHIFT);
}

/* Merge: the result asks for everything either side asks for. */
static inline void
tfa_attrs_merge(tfa_allocator_attrs_t *a, tfa_allocator_attrs_t other)
{
	a->value |= other.value;
}

/* True when every requirement of a is also a requirement of other. */
static inline bool
tfa_attrs_is_equal_or_less_restrictive_than(tfa_allocator_attrs_t a, tfa_allocator_attrs_t other)
{
	return (a.value | other.value) == other.value;
}

/* ---- AllocationAttributes --------------------------------------------------------------- */

typedef struct tfa_allocation_attrs_s {
	bool no_retry_on_failure;      /* fail at once instead of retrying */
	bool allocation_will_be_logged;
	bool zero_fill;                /* tfalloc: calloc semantics */
	uint8_t kind;                  /* tfalloc: enum tfa_alloc_kind_e of the call */
	uint32_t stack_id;             /* tfalloc: the call's stack (core/stack_table.h); 0: none */
} tfa_allocation_attrs_t;

/* ---- AllocatorStats --------------------------------------------------------------------- */

typedef struct tfa_allocator_stats_s {
	size_t struct_size; /* TFA_ALLOCATOR_STATS_SIZE, for versioning */
	int64_t num_allocs;
	int64_t bytes_in_use;      /* requested bytes live now */
	int64_t peak_bytes_in_use;
	int64_t largest_alloc_size;
	int64_t bytes_limit;       /* 0: no limit */
	/* tfalloc's additions */
	int64_t num_frees;
	int64_t num_reallocs;
	int64_t total_bytes;       /* requested bytes of every allocation made */
	int64_t allocated_bytes_in_use; /* the same three in allocated (backend) bytes */
	int64_t peak_allocated_bytes_in_use;
	int64_t total_allocated_bytes;
	int64_t peak_blocks_in_use; /* most blocks live at once */
} tfa_allocator_stats_t;

#define TFA_ALLOCATOR_STATS_SIZE \
	(offsetof(tfa_allocator_stats_t, peak_blocks_in_use) + sizeof(int64_t))

/* ---- the ops table ---------------------------------------------------------------------- */

typedef struct tfa_allocator_s tfa_allocator_t;

typedef struct tfa_allocator_ops_s {
	size_t struct_size; /* TFA_ALLOCATOR_OPS_SIZE */
	const char *name;   /* static storage */

	/*
	 * Returns NULL on failure.  REQUIRES: alignment is 0 (the allocator's
	 * default) or a power of two; nbytes > 0.  [hot path]
	 */
	void *(*allocate_raw)(tfa_allocator_t *self, size_t alignment, size_t nbytes,
			      const tfa_allocation_attrs_t *attrs);
	/* REQUIRES: ptr came from allocate_raw of this allocator.  [hot path] */
	void (*deallocate_raw)(tfa_allocator_t *self, void *ptr);

	/* [optional] NULL: false. */
	bool (*tracks_allocation_sizes)(const tfa_allocator_t *self);
	/* [optional] REQUIRES: tracks_allocation_sizes().  NULL: 0. */
	size_t (*requested_size)(const tfa_allocator_t *self, const void *ptr);
	/* [optional] NULL: requested_size(). */
	size_t (*allocated_size)(const tfa_allocator_t *self, const void *ptr);
	/* [optional] NULL: 0 (no id). */
	int64_t (*allocation_id)(const tfa_allocator_t *self, const void *ptr);
	/* [optional] May be slow; works without size tracking.  NULL: 0 (unknown). */
	size_t (*allocated_size_slow)(const tfa_allocator_t *self, const void *ptr);
	/* [optional] Returns false when the allocator keeps no stats. */
	bool (*get_stats)(tfa_allocator_t *self, tfa_allocator_stats_t *out);
	/* [optional] Returns false when there is nothing to clear. */
	bool (*clear_stats)(tfa_allocator_t *self);

	/*
	 * [optional] Resizes in the backend (realloc).  Returns NULL on failure,
	 * leaving ptr valid.  NULL member: allocate, copy old_size bytes, free.
	 */
	void *(*reallocate_raw)(tfa_allocator_t *self, void *ptr, size_t old_size, size_t nbytes,
				size_t alignment);
	/*
	 * [optional] A faster free when the caller knows the size it asked for
	 * and the alignment it used (jemalloc's sdallocx).  NULL: deallocate_raw.
	 */
	void (*deallocate_raw_sized)(tfa_allocator_t *self, void *ptr, size_t nbytes,
				     size_t alignment);
	/*
	 * [optional] The allocated size a request of nbytes at alignment gets,
	 * without allocating (jemalloc's nallocx).  NULL: allocated_size_slow of
	 * the pointer is used.
	 */
	size_t (*good_size)(const tfa_allocator_t *self, size_t nbytes, size_t alignment);

	/*
	 * [optional] The hot path's shortcuts, for allocators whose instance
	 * state is global (glibc, jemalloc): allocate nbytes (> 0) at the
	 * default alignment, and free such a block given the nbytes it was
	 * asked for (both or neither); and good_size of such requests up to
	 * usable_table_max bytes, as usable_table[(nbytes + 7) / 8] (NULL: call
	 * good_size).
	 */
	void *(*malloc_fast)(size_t nbytes);
	void (*free_sized_fast)(void *ptr, size_t nbytes);
	const uint32_t *usable_table;
	size_t usable_table_max;
} tfa_allocator_ops_t;

#define TFA_ALLOCATOR_OPS_SIZE \
	(offsetof(tfa_allocator_ops_t, usable_table_max) + sizeof(size_t))

struct tfa_allocator_s {
	const tfa_allocator_ops_t *ops;
	tfa_device_type_t device;
	int device_ordinal;
	uint8_t backend_id; /* index in the registry's backend table, for records */
};

/* Whether ops has member m (tables from older builds may be shorter). */
#define TFA_OPS_HAS(ops, m) \
	((ops)->struct_size >= offsetof(tfa_allocator_ops_t, m) + sizeof((ops)->m) && (ops)->m != NULL)

static inline const char *
tfa_allocator_name(const tfa_allocator_t *a)
{
	return a->ops->name;
}

static inline void *
tfa_allocator_allocate_raw(tfa_allocator_t *a, size_t alignment, size_t nbytes,
			   const tfa_allocation_attrs_t *attrs)
{
	static const tfa_allocation_attrs_t no_attrs;
	return a->ops->allocate_raw(a, alignment, nbytes, attrs != NULL ? attrs : &no_attrs);
}

static inline void
tfa_allocator_deallocate_raw(tfa_allocator_t *a, void *ptr)
{
	if (ptr != NULL)
		a->ops->deallocate_raw(a, ptr);
}

static inline void
tfa_allocator_deallocate_raw_sized(tfa_allocator_t *a, void *ptr, size_t nbytes, size_t alignment)
{
	if (ptr == NULL)
		return;
	if (TFA_OPS_HAS(a->ops, deallocate_raw_sized))
		a->ops->deallocate_raw_sized(a, ptr, nbytes, alignment);
	else
		a->ops->deallocate_raw(a, ptr);
}

static inline bool
tfa_allocator_tracks_allocation_sizes(const tfa_allocator_t *a)
{
	return TFA_OPS_HAS(a->ops, tracks_allocation_sizes) && a->ops->tracks_allocation_sizes(a);
}

static inline size_t
tfa_allocator_requested_size(const tfa_allocator_t *a, const void *ptr)
{
	if (!TFA_OPS_HAS(a->ops, requested_size) || !tfa_allocator_tracks_allocation_sizes(a))
		return 0;
	return a->ops->requested_size(a, ptr);
}

static inline size_t
tfa_allocator_allocated_size(const tfa_allocator_t *a, const void *ptr)
{
	if (TFA_OPS_HAS(a->ops, allocated_size))
		return a->ops->allocated_size(a, ptr);
	return tfa_allocator_requested_size(a, ptr);
}

static inline int64_t
tfa_allocator_allocation_id(const tfa_allocator_t *a, const void *ptr)
{
	return TFA_OPS_HAS(a->ops, allocation_id) ? a->ops->allocation_id(a, ptr) : 0;
}

static inline size_t
tfa_allocator_allocated_size_slow(const tfa_allocator_t *a, const void *ptr)
{
	if (tfa_allocator_tracks_allocation_sizes(a))
		return tfa_allocator_allocated_size(a, ptr);
	return TFA_OPS_HAS(a->ops, allocated_size_slow) ? a->ops->allocated_size_slow(a, ptr) : 0;
}

static inline bool
tfa_allocator_get_stats(tfa_allocator_t *a, tfa_allocator_stats_t *out)
{
	return TFA_OPS_HAS(a->ops, get_stats) && a->ops->get_stats(a, out);
}

static inline bool
tfa_allocator_clear_stats(tfa_allocator_t *a)
{
	return TFA_OPS_HAS(a->ops, clear_stats) && a->ops->clear_stats(a);
}

static inline size_t
tfa_allocator_good_size(const tfa_allocator_t *a, size_t nbytes, size_t alignment)
{
	return TFA_OPS_HAS(a->ops, good_size) ? a->ops->good_size(a, nbytes, alignment) : 0;
}

/*
 * Resizes ptr (of old_size requested bytes) to nbytes.  Returns the new
 * pointer or NULL, in which case ptr is untouched.
 */
void *tfa_allocator_reallocate_raw(tfa_allocator_t *a, void *ptr, size_t old_size, size_t nbytes,
				   size_t alignment);

/*
 * The typed helper (TensorFlow's Allocate<T>): n elements of type T, NULL when
 * n * sizeof(T) overflows.
 */
#define tfa_allocator_allocate(a, T, n, attrs) \
	((T *)tfa_allocator_allocate_array_((a), _Alignof(T), sizeof(T), (n), (attrs)))
#define tfa_allocator_deallocate(a, ptr, n) tfa_allocator_deallocate_raw((a), (ptr))

static inline void *
tfa_allocator_allocate_array_(tfa_allocator_t *a, size_t align, size_t elem, size_t n,
			      const tfa_allocation_attrs_t *attrs)
{
	size_t bytes;
	if (__builtin_mul_overflow(elem, n, &bytes) || bytes == 0)
		return NULL;
	return tfa_allocator_allocate_raw(a, align, bytes, attrs);
}

/* ---- AllocatorWrapper ------------------------------------------------------------------- */

/*
 * A decorator that forwards every op to `wrapped`.  Decorators (the tracking
 * allocator, the tests' fault injector) copy tfa_allocator_wrapper_ops and
 * override what they need, as SQLite's faultsim copies its methods table.
 */
typedef struct tfa_allocator_wrapper_s {
	tfa_allocator_t base;
	tfa_allocator_t *wrapped;
} tfa_allocator_wrapper_t;

extern const tfa_allocator_ops_t tfa_allocator_wrapper_ops;

/* Makes w forward to wrapped, with ops (NULL: tfa_allocator_wrapper_ops). */
void tfa_allocator_wrapper_init(tfa_allocator_wrapper_t *w, tfa_allocator_t *wrapped,
				const tfa_allocator_ops_t *ops);

static inline tfa_allocator_t *
tfa_allocator_wrapped(const tfa_allocator_t *self)
{
	/* base is the first member: the wrapper starts where its base does. */
	const tfa_allocator_wrapper_t *w = (const tfa_allocator_wrapper_t *)(const void *)self;
	return w->wrapped;
}

#endif /* TFA_CORE_ALLOCATOR_H */
