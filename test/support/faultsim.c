/* SPDX-License-Identifier: MIT */
#include "test/support/faultsim.h"

#include <stddef.h>

#include "core/common.h"

static inline tfa_faultsim_t *
faultsim_of(tfa_allocator_t *self)
{
	return tfa_container_of(self, tfa_faultsim_t, wrapper.base);
}

/*
 * Decides the fate of one allocation: true means fail it.  Locked by nothing:
 * the counters are updated with atomics, and a test that injects from several
 * threads only needs every decision to be made exactly once.
 */
static bool
faultsim_should_fail(tfa_faultsim_t *f)
{
	long c = __atomic_load_n(&f->countdown, __ATOMIC_RELAXED);

	for (;;) {
		if (c < 0)
			return false;
		if (c == 0)
			break;
		if (__atomic_compare_exchange_n(&f->countdown, &c, c - 1, false, __ATOMIC_RELAXED,
		                                __ATOMIC_RELAXED))
			return false;
	}
	/* Failing: spend one repeat; the last one turns injection off. */
	long r = __atomic_load_n(&f->repeat, __ATOMIC_RELAXED);
	for (;;) {
		if (r == TFA_FAULTSIM_FOREVER)
			break;
		if (r <= 0)
			return false;
		if (__atomic_compare_exchange_n(&f->repeat, &r, r - 1, false, __ATOMIC_RELAXED,
		                                __ATOMIC_RELAXED)) {
			if (r == 1)
				__atomic_store_n(&f->countdown, -1L, __ATOMIC_RELAXED);
			break;
		}
	}
	__atomic_fetch_add(&f->failures, 1, __ATOMIC_RELAXED);
	return true;
}

static void *
faultsim_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
                      const tfa_allocation_attrs_t *attrs)
{
	tfa_faultsim_t *f = faultsim_of(self);

	if (faultsim_should_fail(f))
		return NULL;
	__atomic_fetch_add(&f->successes, 1, __ATOMIC_RELAXED);
	return tfa_allocator_allocate_raw(f->wrapper.wrapped, alignment, nbytes, attrs);
}

static void *
faultsim_reallocate_raw(tfa_allocator_t *self, void *ptr, size_t old_size, size_t nbytes,
                        size_t alignment)
{
	tfa_faultsim_t *f = faultsim_of(self);

	if (faultsim_should_fail(f))
		return NULL;
	__atomic_fetch_add(&f->successes, 1, __ATOMIC_RELAXED);
	return tfa_allocator_reallocate_raw(f->wrapper.wrapped, ptr, old_size, nbytes, alignment);
}

void
tfa_faultsim_init(tfa_faultsim_t *f, tfa_allocator_t *wrapped)
{
	f->ops = tfa_allocator_wrapper_ops;
	f->ops.name = "faultsim";
	f->ops.allocate_raw = faultsim_allocate_raw;
	f->ops.reallocate_raw = faultsim_reallocate_raw;
	tfa_allocator_wrapper_init(&f->wrapper, wrapped, &f->ops);
	f->countdown = -1;
	f->repeat = 0;
	f->successes = 0;
	f->failures = 0;
}

void
tfa_faultsim_config(tfa_faultsim_t *f, long after, long repeat)
{
	bool off = after < 0 || repeat == 0;

	__atomic_store_n(&f->repeat, off ? 0 : repeat, __ATOMIC_RELAXED);
	__atomic_store_n(&f->successes, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&f->failures, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&f->countdown, off ? -1L : after, __ATOMIC_RELAXED);
}

bool
tfa_faultsim_armed(const tfa_faultsim_t *f)
{
	return __atomic_load_n(&f->countdown, __ATOMIC_RELAXED) >= 0;
}

uint64_t
tfa_faultsim_failures(const tfa_faultsim_t *f)
{
	return __atomic_load_n(&f->failures, __ATOMIC_RELAXED);
}
