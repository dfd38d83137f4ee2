/* SPDX-License-Identifier: MIT */
#include "core/allocator.h"

#include <string.h>

const char *
tfa_device_type_name(tfa_device_type_t t)
{
	switch (t) {
	case TFA_DEVICE_CPU:
		return "cpu";
	case TFA_DEVICE_CUDA:
		return "cuda";
	default:
		return "unknown";
	}
}

void *
tfa_allocator_reallocate_raw(tfa_allocator_t *a, void *ptr, size_t old_size, size_t nbytes,
			     size_t alignment)
{
	if (TFA_OPS_HAS(a->ops, reallocate_raw))
		return a->ops->reallocate_raw(a, ptr, old_size, nbytes, alignment);

	void *fresh = tfa_allocator_allocate_raw(a, alignment, nbytes, NULL);
	if (fresh == NULL)
		return NULL;
	memcpy(fresh, ptr, old_size < nbytes ? old_size : nbytes);
	tfa_allocator_deallocate_raw(a, ptr);
	return fresh;
}

static void *
wrapper_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
		     const tfa_allocation_attrs_t *attrs)
{
	return tfa_allocator_allocate_raw(tfa_allocator_wrapped(self), alignment, nbytes, attrs);
}

static void
wrapper_deallocate_raw(tfa_allocator_t *self, void *ptr)
{
	tfa_allocator_deallocate_raw(tfa_allocator_wrapped(self), ptr);
}

static bool
wrapper_tracks_allocation_sizes(const tfa_allocator_t *self)
{
	return tfa_allocator_tracks_allocation_sizes(tfa_allocator_wrapped(self));
}

static size_t
wrapper_requested_size(const tfa_allocator_t *self, const void *ptr)
{
	return tfa_allocator_requested_size(tfa_allocator_wrapped(self), ptr);
}

static size_t
wrapper_allocated_size(const tfa_allocator_t *self, const void *ptr)
{
	return tfa_allocator_allocated_size(tfa_allocator_wrapped(self), ptr);
}

static int64_t
wrapper_allocation_id(const tfa_allocator_t *self, const void *ptr)
{
	return tfa_allocator_allocation_id(tfa_allocator_wrapped(self), ptr);
}

static size_t
wrapper_allocated_size_slow(const tfa_allocator_t *self, const void *ptr)
{
	return tfa_allocator_allocated_size_slow(tfa_allocator_wrapped(self), ptr);
}

static bool
wrapper_get_stats(tfa_allocator_t *self, tfa_allocator_stats_t *out)
{
	return tfa_allocator_get_stats(tfa_allocator_wrapped(self), out);
}

static bool
wrapper_clear_stats(tfa_allocator_t *self)
{
	return tfa_allocator_clear_stats(tfa_allocator_wrapped(self));
}

static void *
wrapper_reallocate_raw(tfa_allocator_t *self, void *ptr, size_t old_size, size_t nbytes,
		       size_t alignment)
{
	return tfa_allocator_reallocate_raw(tfa_allocator_wrapped(self), ptr, old_size, nbytes,
					    alignment);
}

static void
wrapper_deallocate_raw_sized(tfa_allocator_t *self, void *ptr, size_t nbytes, size_t alignment)
{
	tfa_allocator_deallocate_raw_sized(tfa_allocator_wrapped(self), ptr, nbytes, alignment);
}

static size_t
wrapper_good_size(const tfa_allocator_t *self, size_t nbytes, size_t alignment)
{
	return tfa_allocator_good_size(tfa_allocator_wrapped(self), nbytes, alignment);
}

const tfa_allocator_ops_t tfa_allocator_wrapper_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "wrapper",
	.allocate_raw = wrapper_allocate_raw,
	.deallocate_raw = wrapper_deallocate_raw,
	.tracks_allocation_sizes = wrapper_tracks_allocation_sizes,
	.requested_size = wrapper_requested_size,
	.allocated_size = wrapper_allocated_size,
	.allocation_id = wrapper_allocation_id,
	.allocated_size_slow = wrapper_allocated_size_slow,
	.get_stats = wrapper_get_stats,
	.clear_stats = wrapper_clear_stats,
	.reallocate_raw = wrapper_reallocate_raw,
	.deallocate_raw_sized = wrapper_deallocate_raw_sized,
	.good_size = wrapper_good_size,
};

void
tfa_allocator_wrapper_init(tfa_allocator_wrapper_t *w, tfa_allocator_t *wrapped,
			   const tfa_allocator_ops_t *ops)
{
	w->base.ops = ops != NULL ? ops : &tfa_allocator_wrapper_ops;
	w->base.device = wrapped->device;
	w->base.device_ordinal = wrapped->device_ordinal;
	w->base.backend_id = wrapped->backend_id;
	w->wrapped = wrapped;
}
