/* SPDX-License-Identifier: MIT */
/*
 * A fault-injecting decorator, after SQLite's faultsim (src/test_malloc.c):
 * it forwards every op to the allocator it wraps, and after `countdown` more
 * successful allocations it makes the next `repeat` allocations fail (NULL),
 * then succeeds again.  Tests drive every out-of-memory path by looping the
 * countdown from 0 upward until a run completes without an injected failure.
 *
 * Allocations are allocate_raw and reallocate_raw; frees and queries are
 * always forwarded.  The decorator keeps the wrapped allocator's backend id,
 * so a tracker records its pointers under that id.
 */
#ifndef TFA_TEST_SUPPORT_FAULTSIM_H
#define TFA_TEST_SUPPORT_FAULTSIM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/allocator.h"

#define TFA_FAULTSIM_FOREVER (-1L)

typedef struct tfa_faultsim_s {
	tfa_allocator_wrapper_t wrapper; /* first: its base is the decorator's allocator */
	tfa_allocator_ops_t ops; /* tfa_allocator_wrapper_ops with the allocations overridden */
	long countdown;          /* successes left before failing; < 0: injection off */
	long repeat;             /* failures left once failing; TFA_FAULTSIM_FOREVER: no end */
	uint64_t successes;      /* allocations forwarded (and their results) */
	uint64_t failures;       /* allocations failed by injection */
} tfa_faultsim_t;

/* Wraps `wrapped`; injection is off until tfa_faultsim_config. */
void tfa_faultsim_init(tfa_faultsim_t *f, tfa_allocator_t *wrapped);

/*
 * After `after` more successful allocations, fail `repeat` allocations in a
 * row (TFA_FAULTSIM_FOREVER: every one), then succeed again.  after < 0 or
 * repeat == 0 turns injection off.  Resets the counters.
 */
void tfa_faultsim_config(tfa_faultsim_t *f, long after, long repeat);

/* Whether injection is armed (a failure is still to come). */
bool tfa_faultsim_armed(const tfa_faultsim_t *f);

/* Allocations failed by injection since the last config. */
uint64_t tfa_faultsim_failures(const tfa_faultsim_t *f);

static inline tfa_allocator_t *
tfa_faultsim_base(tfa_faultsim_t *f)
{
	return &f->wrapper.base;
}

#endif /* TFA_TEST_SUPPORT_FAULTSIM_H */
