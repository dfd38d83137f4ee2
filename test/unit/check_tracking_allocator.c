/* SPDX-License-Identifier: MIT */
/*
 * core/tracking_allocator.h: the seed's (total, high, allocated, id) tuples
 * exactly, full statistics in requested and allocated bytes, bytes_limit,
 * free errors, kinds, realloc, clear_stats, backend switching, threads, and
 * every out-of-memory path (backend refusals through faultsim, pointer-table
 * refusals through tfa_arena_inject_failure).
 */
#include "core/tracking_allocator.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "registry/registry.h"
#include "test/support/exact_backend.h"
#include "test/support/faultsim.h"

/* Big (~80 KiB) and must start zeroed: static storage, fresh in each forked test. */
static tfa_ptr_table_t table;
static tfa_tracking_allocator_t ta;
static bool ta_live;
static tfa_test_backend_t exact;
static tfa_test_backend_t rounding;

static void
setup(void)
{
	tfa_test_backend_init_exact(&exact);
	tfa_test_backend_init_rounding(&rounding);
	ta_live = false;
}

static void
teardown(void)
{
	if (ta_live)
		tfa_tracking_allocator_destroy(&ta);
	ta_live = false;
	tfa_arena_inject_failure(-1);
}

static void
tracker_init(tfa_allocator_t *backend, bool per_thread)
{
	ck_assert_int_eq(tfa_tracking_allocator_init(&ta, backend, &table, per_thread), 0);
	ta_live = true;
}

static void
tracker_destroy(void)
{
	tfa_tracking_allocator_destroy(&ta);
	ta_live = false;
}

static tfa_allocator_stats_t
stats(void)
{
	tfa_allocator_stats_t st;

	ck_assert(tfa_tracking_allocator_get_stats(&ta, &st));
	return st;
}

static tfa_allocator_t *
base(void)
{
	return tfa_tracking_allocator_base(&ta);
}

static tfa_allocation_attrs_t
kind_attrs(uint8_t kind)
{
	tfa_allocation_attrs_t a = { .kind = kind };
	return a;
}

/* Every counter of the stats at once, in the order of the struct. */
static void
expect_stats(int64_t allocs, int64_t frees, int64_t reallocs, int64_t in_use, int64_t peak,
             int64_t largest, int64_t total)
{
	tfa_allocator_stats_t st = stats();

	ck_assert_int_eq(st.num_allocs, allocs);
	ck_assert_int_eq(st.num_frees, frees);
	ck_assert_int_eq(st.num_reallocs, reallocs);
	ck_assert_int_eq(st.bytes_in_use, in_use);
	ck_assert_int_eq(st.peak_bytes_in_use, peak);
	ck_assert_int_eq(st.largest_alloc_size, largest);
	ck_assert_int_eq(st.total_bytes, total);
}

static void
expect_allocated(int64_t in_use, int64_t peak, int64_t total)
{
	tfa_allocator_stats_t st = stats();

	ck_assert_int_eq(st.allocated_bytes_in_use, in_use);
	ck_assert_int_eq(st.peak_allocated_bytes_in_use, peak);
	ck_assert_int_eq(st.total_allocated_bytes, total);
}

/* The most blocks live at once (exact with one thread), and those live now. */
static void
expect_blocks(int64_t peak)
{
	tfa_allocator_stats_t st = stats();

	ck_assert_int_eq(st.peak_blocks_in_use, peak);
}

static void
expect_sizes(uint64_t total, uint64_t high, uint64_t allocated)
{
	uint64_t t = 0, h = 0, a = 0;

	tfa_tracking_allocator_get_sizes(&ta, &t, &h, &a);
	ck_assert_uint_eq(t, total);
	ck_assert_uint_eq(h, high);
	ck_assert_uint_eq(a, allocated);
}

static tfa_test_counts_t
counts(const tfa_test_backend_t *tb)
{
	tfa_test_counts_t c;

	tfa_test_backend_counts(tb, &c);
	return c;
}

/* ---- init --------------------------------------------------------------------------------- */

START_TEST(test_tracking_allocator_init_rejects_bad_arguments)
{
	tfa_test_backend_t bad;

	ck_assert_int_eq(tfa_tracking_allocator_init(NULL, &exact.base, &table, false), -EINVAL);
	ck_assert_int_eq(tfa_tracking_allocator_init(&ta, NULL, &table, false), -EINVAL);
	ck_assert_int_eq(tfa_tracking_allocator_init(&ta, &exact.base, NULL, false), -EINVAL);
	tfa_test_backend_init_exact(&bad);
	bad.base.backend_id = TFA_MAX_BACKENDS;
	ck_assert_int_eq(tfa_tracking_allocator_init(&ta, &bad.base, &table, false), -EINVAL);

	tracker_init(&exact.base, true);
	ck_assert_str_eq(tfa_allocator_name(base()), "tracking");
	ck_assert_uint_eq(base()->backend_id, TFA_BACKEND_TEST0);
	ck_assert_ptr_eq(tfa_tracking_allocator_backend(&ta, TFA_BACKEND_TEST0), &exact.base);
	ck_assert_ptr_null(tfa_tracking_allocator_backend(&ta, TFA_BACKEND_TEST1));
	ck_assert_ptr_null(tfa_tracking_allocator_backend(&ta, TFA_MAX_BACKENDS));
	expect_stats(0, 0, 0, 0, 0, 0, 0);
	expect_sizes(0, 0, 0);
}
END_TEST

/* ---- the seed's tuples ------------------------------------------------------------------ */

struct seed_step {
	bool alloc;
	size_t nbytes;
	uint64_t total, high, allocated; /* TensorFlow's GetSizes */
	int64_t id;                      /* the id of the last allocation */
};

static const struct seed_step seed_4_then_12[] = {
	{ true, 4, 4, 4, 4, 1 },
	{ false, 0, 4, 4, 0, 1 },
	{ true, 12, 16, 12, 12, 2 },
	{ false, 0, 16, 12, 0, 2 },
};

static const struct seed_step seed_12_then_4[] = {
	{ true, 12, 12, 12, 12, 1 },
	{ false, 0, 12, 12, 0, 1 },
	{ true, 4, 16, 12, 4, 2 },
	{ false, 0, 16, 12, 0, 2 },
};

/*
 * _i bit 0: which sequence; bit 1: per-thread stat slot or the shared one;
 * bit 2: free through the ops table (TensorFlow's DeallocateRaw) or through
 * tfa_tracking_deallocate (what the shim's free calls).
 */
START_TEST(test_tracking_allocator_seed_tuples)
{
	const struct seed_step *steps = (_i & 1) ? seed_12_then_4 : seed_4_then_12;
	bool per_thread = (_i & 2) != 0;
	bool free_via_ops = (_i & 4) != 0;
	void *p = NULL;
	size_t last_n = 0;
	int64_t last_id = 0;

	tracker_init(&exact.base, per_thread);
	for (size_t k = 0; k < 4; k++) {
		const struct seed_step *s = &steps[k];
		if (s->alloc) {
			p = tfa_allocator_allocate_raw(base(), 4, s->nbytes, NULL);
			ck_assert_ptr_nonnull(p);
			memset(p, 0xab, s->nbytes);
			last_n = s->nbytes;
			last_id = tfa_allocator_allocation_id(base(), p);
			ck_assert_uint_eq(tfa_allocator_requested_size(base(), p), s->nbytes);
			ck_assert_uint_eq(tfa_allocator_allocated_size(base(), p), s->nbytes);
		} else if (free_via_ops) {
			tfa_allocator_deallocate_raw(base(), p);
			ck_assert_int_eq(tfa_allocator_allocation_id(base(), p), 0);
		} else {
			tfa_alloc_info_t info;
			ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, &info),
			                 TFA_FREE_OK);
			ck_assert_uint_eq(info.id, (uint64_t)last_id);
			ck_assert_uint_eq(info.requested, last_n);
			ck_assert_uint_eq(info.backend, TFA_BACKEND_TEST0);
			ck_assert_uint_eq(info.lg_align, 2);
			ck_assert_int_eq(tfa_allocator_allocation_id(base(), p), 0);
		}
		expect_sizes(s->total, s->high, s->allocated);
		ck_assert_int_eq(last_id, s->id);
	}
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
	ck_assert_uint_eq(counts(&exact).foreign_frees, 0);
}
END_TEST

/* ---- full statistics ---------------------------------------------------------------------- */

START_TEST(test_tracking_allocator_stats_requested_bytes)
{
	tracker_init(&exact.base, _i != 0);

	void *a = tfa_tracking_allocate(&ta, 0, 100, NULL);
	void *b = tfa_tracking_allocate(&ta, 0, 200, NULL);
	void *c = tfa_tracking_allocate(&ta, 0, 50, NULL);
	ck_assert(a != NULL && b != NULL && c != NULL);
	expect_stats(3, 0, 0, 350, 350, 200, 350);
	expect_allocated(350, 350, 350);
	expect_blocks(3);

	ck_assert_int_eq(tfa_tracking_deallocate(&ta, b, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	expect_stats(3, 1, 0, 150, 350, 200, 350);
	void *d = tfa_tracking_allocate(&ta, 0, 10, NULL);
	ck_assert_ptr_nonnull(d);
	expect_stats(4, 1, 0, 160, 350, 200, 360);
	expect_blocks(3); /* one freed, one made: never 4 at once */
	void *e = tfa_tracking_allocate(&ta, 0, 250, NULL);
	ck_assert_ptr_nonnull(e);
	expect_stats(5, 1, 0, 410, 410, 250, 610);
	expect_blocks(4);
	expect_allocated(410, 410, 610);
	expect_sizes(610, 410, 410);

	tfa_allocator_stats_t st = stats();
	ck_assert_uint_eq(st.struct_size, TFA_ALLOCATOR_STATS_SIZE);
	ck_assert_int_eq(st.bytes_limit, 0);

	void *all[] = { a, c, d, e };
	for (size_t k = 0; k < TFA_ARRAY_SIZE(all); k++)
		ck_assert_int_eq(tfa_tracking_deallocate(&ta, all[k], TFA_KIND_MALLOC, NULL),
		                 TFA_FREE_OK);
	expect_stats(5, 5, 0, 0, 410, 250, 610);
	expect_allocated(0, 410, 610);
	expect_blocks(4);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
}
END_TEST

START_TEST(test_tracking_allocator_stats_allocated_bytes)
{
	tracker_init(&rounding.base, _i != 0);

	void *p5 = tfa_tracking_allocate(&ta, 0, 5, NULL);
	void *p16 = tfa_tracking_allocate(&ta, 0, 16, NULL);
	void *p17 = tfa_tracking_allocate(&ta, 0, 17, NULL);
	ck_assert(p5 != NULL && p16 != NULL && p17 != NULL);

	/* Requested: 5 + 16 + 17; allocated: 16 + 16 + 32. */
	expect_stats(3, 0, 0, 38, 38, 17, 38);
	expect_allocated(64, 64, 64);
	expect_sizes(64, 64, 64);

	ck_assert_uint_eq(tfa_allocator_requested_size(base(), p5), 5);
	ck_assert_uint_eq(tfa_allocator_allocated_size(base(), p5), 16);
	ck_assert_uint_eq(tfa_allocator_allocated_size_slow(base(), p5), 16);
	ck_assert_uint_eq(tfa_allocator_requested_size(base(), p17), 17);
	ck_assert_uint_eq(tfa_allocator_allocated_size(base(), p17), 32);

	tfa_alloc_info_t info;
	ck_assert(tfa_tracking_lookup(&ta, p5, &info));
	ck_assert_uint_eq(info.requested, 5);
	ck_assert_uint_eq(info.backend, TFA_BACKEND_TEST1);
	ck_assert_uint_eq(tfa_tracking_backend_usable_size(&ta, &info), 16);

	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p17, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	expect_stats(3, 1, 0, 21, 38, 17, 38);
	expect_allocated(32, 64, 64);
	expect_sizes(64, 64, 32);

	void *p100 = tfa_tracking_allocate(&ta, 0, 100, NULL);
	ck_assert_ptr_nonnull(p100);
	expect_stats(4, 1, 0, 121, 121, 100, 138);
	expect_allocated(144, 144, 176);
	expect_sizes(176, 144, 144);

	tfa_tracking_deallocate(&ta, p5, TFA_KIND_MALLOC, NULL);
	tfa_tracking_deallocate(&ta, p16, TFA_KIND_MALLOC, NULL);
	tfa_tracking_deallocate(&ta, p100, TFA_KIND_MALLOC, NULL);
	expect_stats(4, 4, 0, 0, 121, 100, 138);
	expect_allocated(0, 144, 176);
	ck_assert_uint_eq(counts(&rounding).live_blocks, 0);
}
END_TEST

START_TEST(test_tracking_allocator_queries_via_ops)
{
	tracker_init(&exact.base, true);
	tfa_allocator_t *a = base();
	tfa_allocator_stats_t via_ops, direct;

	ck_assert(tfa_allocator_tracks_allocation_sizes(a));
	void *p = tfa_allocator_allocate_raw(a, 64, 300, NULL);
	void *q = tfa_allocator_allocate_raw(a, 0, 7, NULL);
	ck_assert(p != NULL && q != NULL);
	ck_assert_uint_eq((uintptr_t)p % 64, 0);
	ck_assert_uint_eq(tfa_allocator_requested_size(a, p), 300);
	ck_assert_uint_eq(tfa_allocator_allocated_size(a, p), 300);
	ck_assert_uint_eq(tfa_allocator_allocated_size_slow(a, p), 300);
	ck_assert_int_eq(tfa_allocator_allocation_id(a, p), 1);
	ck_assert_uint_eq(tfa_allocator_requested_size(a, q), 7);
	ck_assert_int_eq(tfa_allocator_allocation_id(a, q), 2);

	tfa_alloc_info_t info;
	ck_assert(tfa_tracking_lookup(&ta, p, &info));
	ck_assert_uint_eq(info.ptr, (uintptr_t)p);
	ck_assert_uint_eq(info.lg_align, 6);
	ck_assert_uint_eq(info.kind, TFA_KIND_MALLOC);
	ck_assert_uint_eq(info.backend, TFA_BACKEND_TEST0);

	/* A pointer the tracker never handed out. */
	int local;
	ck_assert(!tfa_tracking_lookup(&ta, &local, &info));
	ck_assert_uint_eq(tfa_allocator_requested_size(a, &local), 0);
	ck_assert_int_eq(tfa_allocator_allocation_id(a, &local), 0);
	ck_assert_uint_eq(tfa_allocator_allocated_size(a, &local), 0);

	ck_assert(tfa_allocator_get_stats(a, &via_ops));
	ck_assert(tfa_tracking_allocator_get_stats(&ta, &direct));
	ck_assert_mem_eq(&via_ops, &direct, sizeof(direct));
	ck_assert_int_eq(via_ops.num_allocs, 2);
	ck_assert_int_eq(via_ops.bytes_in_use, 307);

	tfa_allocator_deallocate_raw(a, p);
	tfa_allocator_deallocate_raw(a, q);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
}
END_TEST

/* ---- bytes_limit -------------------------------------------------------------------------- */

START_TEST(test_tracking_allocator_bytes_limit)
{
	tracker_init(&exact.base, _i != 0);
	tfa_tracking_allocator_set_bytes_limit(&ta, 100);
	ck_assert_int_eq(stats().bytes_limit, 100);

	void *a = tfa_tracking_allocate(&ta, 0, 60, NULL);
	ck_assert_ptr_nonnull(a);
	void *refused = tfa_tracking_allocate(&ta, 0, 50, NULL);
	ck_assert_ptr_null(refused);
	/* Refused before the backend was asked; not counted anywhere. */
	ck_assert_uint_eq(counts(&exact).allocate_raw, 1);
	expect_stats(1, 0, 0, 60, 60, 60, 60);

	void *b = tfa_tracking_allocate(&ta, 0, 40, NULL); /* exactly at the limit */
	ck_assert_ptr_nonnull(b);
	expect_stats(2, 0, 0, 100, 100, 60, 100);
	ck_assert_ptr_null(tfa_tracking_allocate(&ta, 0, 1, NULL));

	ck_assert_int_eq(tfa_tracking_deallocate(&ta, a, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	void *c = tfa_tracking_allocate(&ta, 0, 50, NULL); /* room again */
	ck_assert_ptr_nonnull(c);
	expect_stats(3, 1, 0, 90, 100, 60, 150);
	ck_assert_ptr_null(tfa_tracking_allocate(&ta, 0, 11, NULL));

	/* Internal allocations are not the program's: the limit ignores them. */
	tfa_allocation_attrs_t internal = kind_attrs(TFA_KIND_INTERNAL);
	void *i = tfa_tracking_allocate(&ta, 0, 1000, &internal);
	ck_assert_ptr_nonnull(i);
	expect_stats(3, 1, 0, 90, 100, 60, 150);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, i, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);

	/* Lifting the limit. */
	tfa_tracking_allocator_set_bytes_limit(&ta, 0);
	ck_assert_int_eq(stats().bytes_limit, 0);
	void *d = tfa_tracking_allocate(&ta, 0, 1000, NULL);
	ck_assert_ptr_nonnull(d);
	expect_stats(4, 1, 0, 1090, 1090, 1000, 1150);

	tfa_tracking_deallocate(&ta, b, TFA_KIND_MALLOC, NULL);
	tfa_tracking_deallocate(&ta, c, TFA_KIND_MALLOC, NULL);
	tfa_tracking_deallocate(&ta, d, TFA_KIND_MALLOC, NULL);
	expect_stats(4, 4, 0, 0, 1090, 1000, 1150);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
}
END_TEST

START_TEST(test_tracking_allocator_bytes_limit_realloc)
{
	int result = 12345;

	tracker_init(&exact.base, _i != 0);
	tfa_tracking_allocator_set_bytes_limit(&ta, 100);
	unsigned char *p = tfa_tracking_allocate(&ta, 0, 40, NULL);
	void *q = tfa_tracking_allocate(&ta, 0, 30, NULL);
	ck_assert(p != NULL && q != NULL);
	for (int k = 0; k < 40; k++)
		p[k] = (unsigned char)k;
	tfa_test_counts_t before = counts(&exact);

	/* 40 -> 80 would make 110 bytes in use. */
	void *r = tfa_tracking_reallocate(&ta, p, 80, 0, &result, NULL);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(result, TFA_FREE_NOMEM);
	tfa_alloc_info_t info;
	ck_assert(tfa_tracking_lookup(&ta, p, &info));
	ck_assert_uint_eq(info.requested, 40);
	ck_assert_uint_eq(info.id, 1);
	for (int k = 0; k < 40; k++)
		ck_assert_uint_eq(p[k], (unsigned char)k);
	expect_stats(2, 0, 0, 70, 70, 40, 70);
	expect_allocated(70, 70, 70);
	ck_assert_uint_eq(counts(&exact).allocate_raw, before.allocate_raw);
	ck_assert_uint_eq(counts(&exact).live_blocks, 2);

	/* 40 -> 70 fits exactly. */
	unsigned char *s = tfa_tracking_reallocate(&ta, p, 70, 0, &result, NULL);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(result, TFA_FREE_OK);
	for (int k = 0; k < 40; k++)
		ck_assert_uint_eq(s[k], (unsigned char)k);
	expect_stats(3, 1, 1, 100, 100, 70, 140);

	/* Shrinking always fits. */
	s = tfa_tracking_reallocate(&ta, s, 10, 0, &result, NULL);
	ck_assert_ptr_nonnull(s);
	expect_stats(4, 2, 2, 40, 100, 70, 150);
	tfa_tracking_deallocate(&ta, s, TFA_KIND_MALLOC, NULL);
	tfa_tracking_deallocate(&ta, q, TFA_KIND_MALLOC, NULL);
	expect_stats(4, 4, 2, 0, 100, 70, 150);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
}
END_TEST

/* ---- free errors and kinds ------------------------------------------------------------- */

START_TEST(test_tracking_allocator_double_and_invalid_free)
{
	tfa_test_backend_t spy;
	tfa_alloc_info_t info;
	int result;

	tfa_test_backend_init_spy(&spy, TFA_BACKEND_TEST2);
	tracker_init(&spy.base, true);

	void *p = tfa_tracking_allocate(&ta, 0, 24, NULL);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	tfa_test_counts_t after_first = counts(&spy);
	ck_assert_uint_eq(after_first.deallocate_raw + after_first.deallocate_raw_sized, 1);

	/* The same pointer again: a double free, nothing reaches the backend. */
	memset(&info, 0x5a, sizeof(info));
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, &info), TFA_FREE_DOUBLE);
	ck_assert_uint_eq(info.ptr, (uintptr_t)p);
	ck_assert_ptr_null(tfa_tracking_reallocate(&ta, p, 10, 0, &result, NULL));
	ck_assert_int_eq(result, TFA_FREE_DOUBLE);

	/* A heap pointer the tracker never handed out: invalid. */
	char *foreign = malloc(64);
	ck_assert_ptr_nonnull(foreign);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, foreign + 32, TFA_KIND_MALLOC, &info),
	                 TFA_FREE_INVALID);
	ck_assert_uint_eq(info.ptr, (uintptr_t)(foreign + 32));
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, foreign, TFA_KIND_NEW, NULL),
	                 TFA_FREE_INVALID);
	ck_assert_ptr_null(tfa_tracking_reallocate(&ta, foreign, 10, 0, &result, NULL));
	ck_assert_int_eq(result, TFA_FREE_INVALID);
	int on_stack;
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, &on_stack, TFA_KIND_MALLOC, NULL),
	                 TFA_FREE_INVALID);
	free(foreign);

	tfa_test_counts_t c = counts(&spy);
	ck_assert_uint_eq(c.deallocate_raw, after_first.deallocate_raw);
	ck_assert_uint_eq(c.deallocate_raw_sized, after_first.deallocate_raw_sized);
	ck_assert_uint_eq(c.reallocate_raw, 0);
	ck_assert_uint_eq(c.foreign_frees, 0);
	ck_assert_uint_eq(c.live_blocks, 0);
	expect_stats(1, 1, 0, 0, 24, 24, 24);
}
END_TEST

START_TEST(test_tracking_allocator_mismatched_kind)
{
	tfa_alloc_info_t info;
	tfa_allocation_attrs_t as_new = kind_attrs(TFA_KIND_NEW);
	tfa_allocation_attrs_t as_new_array = kind_attrs(TFA_KIND_NEW_ARRAY);
	int result;

	tracker_init(&exact.base, true);

	/* new, then free(): a mismatch, and the block is still freed. */
	void *p = tfa_tracking_allocate(&ta, 0, 32, &as_new);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, &info),
	                 TFA_FREE_MISMATCH);
	ck_assert_uint_eq(info.kind, TFA_KIND_NEW);
	ck_assert_uint_eq(info.requested, 32);
	ck_assert(!tfa_tracking_lookup(&ta, p, NULL));
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
	expect_stats(1, 1, 0, 0, 32, 32, 32);

	/* new[], then delete (not delete[]). */
	p = tfa_tracking_allocate(&ta, 0, 8, &as_new_array);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_NEW, &info), TFA_FREE_MISMATCH);
	ck_assert_uint_eq(info.kind, TFA_KIND_NEW_ARRAY);

	/* Matching kinds are fine. */
	p = tfa_tracking_allocate(&ta, 0, 8, &as_new);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_NEW, NULL), TFA_FREE_OK);
	p = tfa_tracking_allocate(&ta, 0, 8, &as_new_array);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_NEW_ARRAY, NULL), TFA_FREE_OK);

	/* malloc, then delete. */
	p = tfa_tracking_allocate(&ta, 0, 8, NULL);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_NEW, &info), TFA_FREE_MISMATCH);
	ck_assert_uint_eq(info.kind, TFA_KIND_MALLOC);

	/* realloc of memory from new: resized, reported as a mismatch naming the maker. */
	p = tfa_tracking_allocate(&ta, 0, 8, &as_new);
	tfa_alloc_info_t old;
	void *q = tfa_tracking_reallocate(&ta, p, 16, 0, &result, &old);
	ck_assert_ptr_nonnull(q);
	ck_assert_int_eq(result, TFA_FREE_MISMATCH);
	ck_assert_uint_eq(old.kind, TFA_KIND_NEW);
	ck_assert_uint_eq(old.ptr, (uintptr_t)p);
	ck_assert_uint_eq(old.requested, 8);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, q, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);

	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
	expect_stats(7, 7, 1, 0, 32, 32, 88);
}
END_TEST

START_TEST(test_tracking_allocator_internal_not_counted)
{
	tfa_alloc_info_t info;
	tfa_allocation_attrs_t internal = kind_attrs(TFA_KIND_INTERNAL);
	int result;

	tracker_init(&exact.base, _i != 0);
	void *p = tfa_tracking_allocate(&ta, 0, 1000, &internal);
	ck_assert_ptr_nonnull(p);
	ck_assert(tfa_tracking_lookup(&ta, p, &info));
	ck_assert_uint_eq(info.kind, TFA_KIND_INTERNAL);
	ck_assert_uint_eq(info.requested, 1000);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);
	expect_stats(0, 0, 0, 0, 0, 0, 0);
	expect_allocated(0, 0, 0);

	/* Resizing keeps it internal. */
	void *q = tfa_tracking_reallocate(&ta, p, 5000, 0, &result, NULL);
	ck_assert_ptr_nonnull(q);
	ck_assert_int_eq(result, TFA_FREE_OK);
	ck_assert(tfa_tracking_lookup(&ta, q, &info));
	ck_assert_uint_eq(info.kind, TFA_KIND_INTERNAL);
	ck_assert_uint_eq(info.requested, 5000);
	expect_stats(0, 0, 0, 0, 0, 0, 0);

	/* Any kind of free is fine for it, and is not counted either. */
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, q, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	ck_assert(!tfa_tracking_lookup(&ta, q, NULL));
	expect_stats(0, 0, 0, 0, 0, 0, 0);
	expect_allocated(0, 0, 0);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);

	/* Counted allocations next to it are unaffected. */
	p = tfa_tracking_allocate(&ta, 0, 10, NULL);
	q = tfa_tracking_allocate(&ta, 0, 20, &internal);
	expect_stats(1, 0, 0, 10, 10, 10, 10);
	tfa_tracking_deallocate(&ta, q, TFA_KIND_INTERNAL, NULL);
	tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, NULL);
	expect_stats(1, 1, 0, 0, 10, 10, 10);
}
END_TEST

/* ---- realloc ------------------------------------------------------------------------------ */

START_TEST(test_tracking_allocator_realloc)
{
	tfa_alloc_info_t info;
	int result;

	tracker_init(&exact.base, _i != 0);
	unsigned char *p = tfa_tracking_allocate(&ta, 0, 100, NULL);
	ck_assert_ptr_nonnull(p);
	for (int k = 0; k < 100; k++)
		p[k] = (unsigned char)(k ^ 0x5a);
	ck_assert_int_eq(tfa_allocator_allocation_id(base(), p), 1);

	/* Grow: one realloc = one free + one alloc; in use changes by the difference. */
	unsigned char *q = tfa_tracking_reallocate(&ta, p, 300, 0, &result, NULL);
	ck_assert_ptr_nonnull(q);
	ck_assert_int_eq(result, TFA_FREE_OK);
	for (int k = 0; k < 100; k++)
		ck_assert_uint_eq(q[k], (unsigned char)(k ^ 0x5a));
	expect_stats(2, 1, 1, 300, 300, 300, 400);
	expect_allocated(300, 300, 400);
	expect_blocks(1); /* the old block and the new are never counted live together */
	ck_assert(tfa_tracking_lookup(&ta, q, &info));
	ck_assert_uint_eq(info.requested, 300);
	ck_assert_uint_eq(info.id, 2);
	if (q != p)
		ck_assert(!tfa_tracking_lookup(&ta, p, NULL));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);

	/* Shrink. */
	unsigned char *r = tfa_tracking_reallocate(&ta, q, 50, 0, &result, NULL);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(result, TFA_FREE_OK);
	for (int k = 0; k < 50; k++)
		ck_assert_uint_eq(r[k], (unsigned char)(k ^ 0x5a));
	expect_stats(3, 2, 2, 50, 300, 300, 450);
	expect_allocated(50, 300, 450);
	expect_blocks(1);
	ck_assert_int_eq(tfa_allocator_allocation_id(base(), r), 3);

	/* Through the ops table too. */
	void *s = tfa_allocator_reallocate_raw(base(), r, 50, 60, 0);
	ck_assert_ptr_nonnull(s);
	expect_stats(4, 3, 3, 60, 300, 300, 510);

	ck_assert_int_eq(tfa_tracking_deallocate(&ta, s, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	expect_stats(4, 4, 3, 0, 300, 300, 510);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
}
END_TEST

START_TEST(test_tracking_allocator_realloc_allocated_bytes)
{
	int result;

	tracker_init(&rounding.base, true);
	void *p = tfa_tracking_allocate(&ta, 0, 5, NULL);
	expect_allocated(16, 16, 16);
	void *q = tfa_tracking_reallocate(&ta, p, 17, 0, &result, NULL);
	ck_assert_ptr_nonnull(q);
	expect_stats(2, 1, 1, 17, 17, 17, 22);
	expect_allocated(32, 32, 48);
	ck_assert_uint_eq(tfa_allocator_allocated_size(base(), q), 32);
	q = tfa_tracking_reallocate(&ta, q, 3, 0, &result, NULL);
	expect_allocated(16, 32, 64);
	tfa_tracking_deallocate(&ta, q, TFA_KIND_MALLOC, NULL);
	expect_allocated(0, 32, 64);
	expect_sizes(64, 32, 0);
}
END_TEST

/*
 * Site statistics through every path (fast allocate and free, general
 * deallocate, realloc), and the peak's breakdown by site summing to the peak.
 * _i: 0 one thread with a per-thread slot, 1 the shared slot (general paths).
 */
static tfa_sites_t sites;

struct site_sum {
	int64_t peak, in_use;
	uint64_t allocs[8];
	int64_t peak_of[8];
};

static void
site_sum_cb(void *arg, uint32_t id, const tfa_site_t *s)
{
	struct site_sum *c = arg;

	ck_assert_uint_lt(id, 8);
	c->peak += s->peak_bytes;
	c->in_use += s->in_use_bytes;
	c->allocs[id] = s->allocs;
	c->peak_of[id] = s->peak_bytes;
}

static struct site_sum
site_sums(void)
{
	struct site_sum c;
	tfa_allocator_stats_t st = stats();

	memset(&c, 0, sizeof(c));
	tfa_sites_foreach(&sites, st.peak_bytes_in_use, st.bytes_in_use, site_sum_cb, &c);
	ck_assert_int_eq(c.peak, st.peak_bytes_in_use);
	ck_assert_int_eq(c.in_use, st.bytes_in_use);
	return c;
}

START_TEST(test_tracking_allocator_sites)
{
	tfa_allocation_attrs_t a1 = { .stack_id = 1 }, a2 = { .stack_id = 2 };
	int result;

	memset(&sites, 0, sizeof(sites));
	tracker_init(&exact.base, _i == 0);
	ta.sites = &sites;
	void *p = tfa_tracking_allocate(&ta, 0, 100, &a1);
	void *q = tfa_tracking_allocate(&ta, 0, 40, &a2);
	void *r = tfa_tracking_allocate(&ta, 0, 10, NULL); /* no stack: in no site */
	ck_assert(p != NULL && q != NULL && r != NULL);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, r, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	/* The peak was 150 with r; the sites hold 140 of it. */
	struct site_sum c;
	memset(&c, 0, sizeof(c));
	tfa_sites_foreach(&sites, 150, 140, site_sum_cb, &c);
	ck_assert_int_eq(c.peak, 140);

	/* realloc moves the bytes to the realloc's own stack. */
	p = tfa_tracking_reallocate(&ta, p, 300, 3, &result, NULL);
	ck_assert_ptr_nonnull(p);
	c = site_sums(); /* 340 now, and the peak */
	ck_assert_int_eq(c.peak_of[1], 0);
	ck_assert_int_eq(c.peak_of[3], 300);
	ck_assert_uint_eq(c.allocs[1], 1);
	ck_assert_uint_eq(c.allocs[3], 1);

	/* Leave the peak: its breakdown stays. */
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	void *big = tfa_tracking_allocate(&ta, 0, 200, &a1);
	c = site_sums();
	ck_assert_int_eq(c.peak_of[2], 40);
	ck_assert_int_eq(c.peak_of[3], 300);
	ck_assert_int_eq(c.peak_of[1], 0);
	ck_assert_int_eq(c.in_use, 240);

	/* A new peak through the fast path. */
	void *more = tfa_tracking_allocate(&ta, 0, 500, &a2);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, more, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	c = site_sums();
	ck_assert_int_eq(c.peak_of[1], 200);
	ck_assert_int_eq(c.peak_of[2], 540);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, big, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, q, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	c = site_sums();
	ck_assert_int_eq(c.in_use, 0);
	ta.sites = NULL;
}
END_TEST

START_TEST(test_tracking_allocator_zero_bytes)
{
	tfa_alloc_info_t info;

	tracker_init(&exact.base, true);
	void *p = tfa_tracking_allocate(&ta, 0, 0, NULL);
	void *q = tfa_tracking_allocate(&ta, 0, 0, NULL);
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(q);
	ck_assert_ptr_ne(p, q);
	ck_assert(tfa_tracking_lookup(&ta, p, &info));
	ck_assert_uint_eq(info.requested, 0);
	ck_assert_uint_eq(tfa_allocator_requested_size(base(), q), 0);
	ck_assert_int_eq(tfa_allocator_allocation_id(base(), p), 1);
	ck_assert_int_eq(tfa_allocator_allocation_id(base(), q), 2);
	expect_stats(2, 0, 0, 0, 0, 0, 0);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, q, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	expect_stats(2, 2, 0, 0, 0, 0, 0);
	expect_allocated(0, stats().peak_allocated_bytes_in_use, stats().total_allocated_bytes);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
}
END_TEST

/* ---- clear_stats -------------------------------------------------------------------------- */

START_TEST(test_tracking_allocator_clear_stats)
{
	tracker_init(&exact.base, _i != 0);
	void *a = tfa_tracking_allocate(&ta, 0, 100, NULL);
	void *b = tfa_tracking_allocate(&ta, 0, 200, NULL);
	tfa_tracking_deallocate(&ta, b, TFA_KIND_MALLOC, NULL);
	expect_stats(2, 1, 0, 100, 300, 200, 300);

	ck_assert(tfa_allocator_clear_stats(base()));
	/* Counts restart; the peak becomes what is in use now; in use stays. */
	expect_stats(0, 0, 0, 100, 100, 0, 0);
	expect_allocated(100, 100, 0);

	void *c = tfa_tracking_allocate(&ta, 0, 50, NULL);
	expect_stats(1, 0, 0, 150, 150, 50, 50);
	tfa_tracking_deallocate(&ta, c, TFA_KIND_MALLOC, NULL);
	tfa_tracking_deallocate(&ta, a, TFA_KIND_MALLOC, NULL);
	expect_stats(1, 2, 0, 0, 150, 50, 50);
	/* Ids keep counting: clearing stats does not reuse ids. */
	void *d = tfa_tracking_allocate(&ta, 0, 1, NULL);
	ck_assert_int_eq(tfa_allocator_allocation_id(base(), d), 4);
	tfa_tracking_deallocate(&ta, d, TFA_KIND_MALLOC, NULL);
}
END_TEST

/* ---- backends ----------------------------------------------------------------------------- */

START_TEST(test_tracking_allocator_set_backend)
{
	tfa_test_backend_t spy_a, spy_b;
	tfa_alloc_info_t info;
	int result;

	tfa_test_backend_init_spy(&spy_a, TFA_BACKEND_TEST0);
	tfa_test_backend_init_spy(&spy_b, TFA_BACKEND_TEST2);
	tracker_init(&spy_a.base, true);

	void *pa = tfa_tracking_allocate(&ta, 0, 10, NULL);
	void *pa2 = tfa_tracking_allocate(&ta, 0, 20, NULL);
	tfa_tracking_allocator_set_backend(&ta, &spy_b.base);
	ck_assert_ptr_eq(tfa_tracking_allocator_backend(&ta, TFA_BACKEND_TEST0), &spy_a.base);
	ck_assert_ptr_eq(tfa_tracking_allocator_backend(&ta, TFA_BACKEND_TEST2), &spy_b.base);
	void *pb = tfa_tracking_allocate(&ta, 0, 30, NULL);
	ck_assert(pa != NULL && pa2 != NULL && pb != NULL);
	ck_assert(tfa_test_backend_owns(&spy_a, pa));
	ck_assert(tfa_test_backend_owns(&spy_b, pb));
	ck_assert_uint_eq(counts(&spy_a).allocate_raw, 2);
	ck_assert_uint_eq(counts(&spy_b).allocate_raw, 1);
	ck_assert(tfa_tracking_lookup(&ta, pa, &info));
	ck_assert_uint_eq(info.backend, TFA_BACKEND_TEST0);
	ck_assert(tfa_tracking_lookup(&ta, pb, &info));
	ck_assert_uint_eq(info.backend, TFA_BACKEND_TEST2);

	/* Old pointers go back to their own backend, for free and for realloc. */
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, pa, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	tfa_test_counts_t a = counts(&spy_a), b = counts(&spy_b);
	ck_assert_uint_eq(a.deallocate_raw + a.deallocate_raw_sized, 1);
	ck_assert_uint_eq(b.deallocate_raw + b.deallocate_raw_sized, 0);

	void *pa3 = tfa_tracking_reallocate(&ta, pa2, 200, 0, &result, NULL);
	ck_assert_ptr_nonnull(pa3);
	ck_assert(tfa_test_backend_owns(&spy_a, pa3));
	ck_assert(tfa_tracking_lookup(&ta, pa3, &info));
	ck_assert_uint_eq(info.backend, TFA_BACKEND_TEST0);

	ck_assert_int_eq(tfa_tracking_deallocate(&ta, pb, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, pa3, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	a = counts(&spy_a);
	b = counts(&spy_b);
	ck_assert_uint_eq(a.live_blocks, 0);
	ck_assert_uint_eq(b.live_blocks, 0);
	ck_assert_uint_eq(a.foreign_frees, 0);
	ck_assert_uint_eq(b.foreign_frees, 0);
	ck_assert_uint_eq(b.deallocate_raw + b.deallocate_raw_sized, 1);
	/* Peak: 20 + 30 live when pa2 grows to 200. */
	expect_stats(4, 4, 1, 0, 230, 200, 260);

	/* A backend id out of range is ignored. */
	tfa_test_backend_t bad;
	tfa_test_backend_init_exact(&bad);
	bad.base.backend_id = TFA_MAX_BACKENDS;
	tfa_tracking_allocator_set_backend(&ta, &bad.base);
	tfa_tracking_allocator_set_backend(&ta, NULL);
	void *pc = tfa_tracking_allocate(&ta, 0, 1, NULL);
	ck_assert(tfa_test_backend_owns(&spy_b, pc));
	tfa_tracking_deallocate(&ta, pc, TFA_KIND_MALLOC, NULL);
}
END_TEST

/* Stat slots run out: further trackers share a locked slot and still count exactly. */
START_TEST(test_tracking_allocator_slots_exhausted)
{
	static tfa_ptr_table_t tables[TFA_MAX_STAT_SLOTS + 1];
	static tfa_tracking_allocator_t trackers[TFA_MAX_STAT_SLOTS + 1];
	void *ptrs[TFA_MAX_STAT_SLOTS + 1];
	const int n = TFA_MAX_STAT_SLOTS + 1;
	tfa_allocator_stats_t st;

	for (int k = 0; k < n; k++)
		ck_assert_int_eq(
		        tfa_tracking_allocator_init(&trackers[k], &exact.base, &tables[k], true),
		        0);
	/* Slot 0 is the process tracker's: 1..MAX-1 are handed out, then -1. */
	ck_assert_int_eq(trackers[n - 1].slot, -1);
	ck_assert_int_eq(trackers[n - 2].slot, -1);
	for (int k = 0; k < n; k++) {
		ptrs[k] = tfa_tracking_allocate(&trackers[k], 0, (size_t)(k + 1) * 10, NULL);
		ck_assert_ptr_nonnull(ptrs[k]);
	}
	for (int k = 0; k < n; k++) {
		ck_assert(tfa_tracking_allocator_get_stats(&trackers[k], &st));
		ck_assert_int_eq(st.num_allocs, 1);
		ck_assert_int_eq(st.bytes_in_use, (k + 1) * 10);
		ck_assert_int_eq(tfa_allocator_allocation_id(&trackers[k].wrapper.base, ptrs[k]),
		                 1);
		/* Each tracker knows only its own pointers. */
		ck_assert(!tfa_tracking_lookup(&trackers[k], ptrs[(k + 1) % n], NULL));
	}
	for (int k = 0; k < n; k++) {
		ck_assert_int_eq(
		        tfa_tracking_deallocate(&trackers[k], ptrs[k], TFA_KIND_MALLOC, NULL),
		        TFA_FREE_OK);
		tfa_tracking_allocator_destroy(&trackers[k]);
	}
	/* Released slots can be had again, and start from zero. */
	ck_assert_int_eq(tfa_tracking_allocator_init(&trackers[0], &exact.base, &tables[0], true),
	                 0);
	ck_assert_int_gt(trackers[0].slot, 0);
	ck_assert(tfa_tracking_allocator_get_stats(&trackers[0], &st));
	ck_assert_int_eq(st.num_allocs, 0);
	ck_assert_int_eq(st.total_bytes, 0);
	tfa_tracking_allocator_destroy(&trackers[0]);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
}
END_TEST

/* ---- threads ------------------------------------------------------------------------------ */

#ifdef __SANITIZE_THREAD__
/* ThreadSanitizer (build-tsan/) runs the threaded cases 10 times smaller: shards still grow and
 * purge under the other threads, and TSan sees each racing pair of accesses once it happens. */
#	define TSAN_SCALE 10
#else
#	define TSAN_SCALE 1
#endif

#define MT_THREADS 4
#define MT_ROUNDS  (100 / TSAN_SCALE)
#define MT_BATCH   1000

static void *mt_slots[MT_THREADS][MT_BATCH];
static uint64_t *mt_ids;
static pthread_barrier_t mt_barrier;
static uint64_t mt_errors;

static size_t
mt_size(int i)
{
	return (size_t)(i % 64) + 1;
}

static void *
mt_worker(void *arg)
{
	int t = (int)(intptr_t)arg;
	int victim = (t + 1) % MT_THREADS;
	uint64_t *ids = mt_ids + (size_t)t * MT_ROUNDS * MT_BATCH;

	for (int r = 0; r < MT_ROUNDS; r++) {
		for (int i = 0; i < MT_BATCH; i++) {
			unsigned char *p = tfa_tracking_allocate(&ta, 0, mt_size(i), NULL);
			tfa_alloc_info_t info;
			if (p == NULL || !tfa_tracking_lookup(&ta, p, &info)
			    || info.requested != mt_size(i)) {
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
				continue;
			}
			p[0] = (unsigned char)t;
			ids[(size_t)r * MT_BATCH + (size_t)i] = info.id;
			mt_slots[t][i] = p;
		}
		pthread_barrier_wait(&mt_barrier);
		/* Free what the neighbour made: every free crosses threads. */
		for (int i = 0; i < MT_BATCH; i++) {
			unsigned char *p = mt_slots[victim][i];
			if (p == NULL || p[0] != (unsigned char)victim
			    || tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, NULL)
			               != TFA_FREE_OK)
				__atomic_fetch_add(&mt_errors, 1, __ATOMIC_RELAXED);
			mt_slots[victim][i] = NULL;
		}
		pthread_barrier_wait(&mt_barrier);
	}
	return NULL;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

START_TEST(test_tracking_allocator_threads_cross_free)
{
	const size_t n = (size_t)MT_THREADS * MT_ROUNDS * MT_BATCH;
	pthread_t th[MT_THREADS];
	int64_t per_batch = 0;

	tracker_init(&exact.base, _i != 0);
	mt_ids = calloc(n, sizeof(*mt_ids));
	ck_assert_ptr_nonnull(mt_ids);
	ck_assert_int_eq(pthread_barrier_init(&mt_barrier, NULL, MT_THREADS), 0);
	for (int t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, mt_worker, (void *)(intptr_t)t), 0);
	for (int t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	pthread_barrier_destroy(&mt_barrier);

	for (int i = 0; i < MT_BATCH; i++)
		per_batch += (int64_t)mt_size(i);

	ck_assert_uint_eq(mt_errors, 0);
	tfa_allocator_stats_t st = stats();
	ck_assert_int_eq(st.num_allocs, (int64_t)n);
	ck_assert_int_eq(st.num_frees, (int64_t)n);
	ck_assert_int_eq(st.num_reallocs, 0);
	ck_assert_int_eq(st.bytes_in_use, 0);
	ck_assert_int_eq(st.allocated_bytes_in_use, 0);
	ck_assert_int_eq(st.total_bytes, per_batch * MT_THREADS * MT_ROUNDS);
	ck_assert_int_eq(st.total_allocated_bytes, per_batch * MT_THREADS * MT_ROUNDS);
	ck_assert_int_eq(st.largest_alloc_size, 64);
	/*
	 * Every thread's batch is live at the first barrier and nothing more
	 * ever is: the true peak is 4 batches.  The shared slot publishes on
	 * every call, so its peak is exact; per-thread slots may miss by up to
	 * threads x TFA_PUBLISH_THRESHOLD (tracking_allocator.h).
	 */
	if (_i == 0) {
		ck_assert_int_eq(st.peak_bytes_in_use, per_batch * MT_THREADS);
		ck_assert_int_eq(st.peak_allocated_bytes_in_use, per_batch * MT_THREADS);
		ck_assert_int_eq(st.peak_blocks_in_use, MT_BATCH * MT_THREADS);
	} else {
		ck_assert_int_ge(st.peak_bytes_in_use, 0);
		ck_assert_int_le(st.peak_bytes_in_use,
		                 per_batch * MT_THREADS + MT_THREADS * TFA_PUBLISH_THRESHOLD);
		ck_assert_int_ge(st.peak_blocks_in_use, 0);
		ck_assert_int_le(st.peak_blocks_in_use, MT_BATCH * MT_THREADS + MT_THREADS * TFA_PUBLISH_BLOCKS);
	}
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	tfa_test_counts_t c = counts(&exact);
	ck_assert_uint_eq(c.live_blocks, 0);
	ck_assert_uint_eq(c.foreign_frees, 0);

	/* Allocation ids are unique across threads. */
	qsort(mt_ids, n, sizeof(*mt_ids), cmp_u64);
	ck_assert_uint_gt(mt_ids[0], 0);
	for (size_t k = 1; k < n; k++)
		if (mt_ids[k] == mt_ids[k - 1])
			ck_abort_msg("allocation id %llu handed out twice",
			             (unsigned long long)mt_ids[k]);
	free(mt_ids);
}
END_TEST

/* ---- out of memory: the backend (faultsim) ----------------------------------------------- */

START_TEST(test_tracking_allocator_backend_failure)
{
	tfa_faultsim_t fs;
	int result;

	tfa_faultsim_init(&fs, &exact.base);
	tracker_init(tfa_faultsim_base(&fs), true);
	ck_assert_uint_eq(base()->backend_id, TFA_BACKEND_TEST0);

	void *keep = tfa_tracking_allocate(&ta, 0, 10, NULL);
	ck_assert_ptr_nonnull(keep);
	tfa_allocator_stats_t before = stats();

	tfa_faultsim_config(&fs, 0, 1);
	ck_assert_ptr_null(tfa_tracking_allocate(&ta, 0, 100, NULL));
	ck_assert_uint_eq(tfa_faultsim_failures(&fs), 1);
	tfa_allocator_stats_t after = stats();
	ck_assert_mem_eq(&before, &after, sizeof(before));
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 1);

	/* One failure only: the next allocation works. */
	void *p = tfa_tracking_allocate(&ta, 0, 100, NULL);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(tfa_allocator_allocation_id(base(), p), 2);

	/* A failed realloc leaves the block, its record and the stats. */
	before = stats();
	tfa_faultsim_config(&fs, 0, 1);
	ck_assert_ptr_null(tfa_tracking_reallocate(&ta, p, 1000, 0, &result, NULL));
	ck_assert_int_eq(result, TFA_FREE_NOMEM);
	after = stats();
	ck_assert_mem_eq(&before, &after, sizeof(before));
	tfa_alloc_info_t info;
	ck_assert(tfa_tracking_lookup(&ta, p, &info));
	ck_assert_uint_eq(info.requested, 100);
	ck_assert_uint_eq(info.id, 2);

	tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, NULL);
	tfa_tracking_deallocate(&ta, keep, TFA_KIND_MALLOC, NULL);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
	expect_stats(2, 2, 0, 0, 110, 100, 110);
}
END_TEST

/* With a bytes limit the tracker reserves before asking the backend: a refusal must undo it. */
START_TEST(test_tracking_allocator_backend_failure_with_limit)
{
	tfa_faultsim_t fs;
	int result;

	tfa_faultsim_init(&fs, &exact.base);
	tracker_init(tfa_faultsim_base(&fs), _i != 0);
	tfa_tracking_allocator_set_bytes_limit(&ta, 1000);

	void *keep = tfa_tracking_allocate(&ta, 0, 100, NULL);
	ck_assert_ptr_nonnull(keep);
	tfa_allocator_stats_t before = stats();

	tfa_faultsim_config(&fs, 0, 1);
	ck_assert_ptr_null(tfa_tracking_allocate(&ta, 0, 500, NULL));
	tfa_allocator_stats_t after = stats();
	ck_assert_int_eq(after.bytes_in_use, 100);
	ck_assert_int_eq(after.num_allocs, 1);
	/* Nothing was ever in use beyond 100 bytes: the peak must not say 600. */
	ck_assert_int_eq(after.peak_bytes_in_use, before.peak_bytes_in_use);

	tfa_faultsim_config(&fs, 0, 1);
	ck_assert_ptr_null(tfa_tracking_reallocate(&ta, keep, 800, 0, &result, NULL));
	ck_assert_int_eq(result, TFA_FREE_NOMEM);
	after = stats();
	ck_assert_int_eq(after.bytes_in_use, 100);
	ck_assert_int_eq(after.peak_bytes_in_use, before.peak_bytes_in_use);

	/* The reservations were returned: the whole limit is usable. */
	void *p = tfa_tracking_allocate(&ta, 0, 900, NULL);
	ck_assert_ptr_nonnull(p);
	tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, NULL);
	tfa_tracking_deallocate(&ta, keep, TFA_KIND_MALLOC, NULL);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
}
END_TEST

/*
 * SQLite's loop: run a scenario with the n-th allocation failing (for one
 * repeat, then for ever), n = 0, 1, 2, ... until a run sees no failure.
 * Every run must leave exact statistics and no block behind.
 */
#define FS_BLOCKS 8

static void
faultsim_scenario(tfa_faultsim_t *fs, long n, long repeat, uint64_t *failures)
{
	void *p[FS_BLOCKS] = { 0 };
	int64_t live = 0, count = 0;
	int result;

	tracker_init(tfa_faultsim_base(fs), true);
	tfa_faultsim_config(fs, n, repeat);
	for (int k = 0; k < FS_BLOCKS; k++) {
		size_t sz = (size_t)(k + 1) * 10;
		p[k] = tfa_tracking_allocate(&ta, 0, sz, NULL);
		if (p[k] != NULL) {
			live += (int64_t)sz;
			count++;
		}
	}
	ck_assert_int_eq(stats().bytes_in_use, live);
	ck_assert_int_eq(stats().num_allocs, count);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), (uint64_t)count);
	for (int k = 0; k < FS_BLOCKS; k += 3) {
		if (p[k] == NULL)
			continue;
		size_t old = (size_t)(k + 1) * 10;
		void *q = tfa_tracking_reallocate(&ta, p[k], old * 5, 0, &result, NULL);
		if (q == NULL) {
			ck_assert_int_eq(result, TFA_FREE_NOMEM);
			ck_assert(tfa_tracking_lookup(&ta, p[k], NULL));
		} else {
			ck_assert_int_eq(result, TFA_FREE_OK);
			live += (int64_t)(old * 4);
			p[k] = q;
		}
		ck_assert_int_eq(stats().bytes_in_use, live);
	}
	for (int k = 0; k < FS_BLOCKS; k++)
		if (p[k] != NULL)
			ck_assert_int_eq(tfa_tracking_deallocate(&ta, p[k], TFA_KIND_MALLOC, NULL),
			                 TFA_FREE_OK);
	tfa_allocator_stats_t st = stats();
	ck_assert_int_eq(st.bytes_in_use, 0);
	ck_assert_int_eq(st.allocated_bytes_in_use, 0);
	ck_assert_int_eq(st.num_allocs, st.num_frees);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	ck_assert_uint_eq(counts(&exact).live_blocks, 0);
	*failures = tfa_faultsim_failures(fs);
	tfa_faultsim_config(fs, -1, 0);
	tracker_destroy();
}

START_TEST(test_tracking_allocator_faultsim_loop)
{
	tfa_faultsim_t fs;
	long repeat = _i == 0 ? 1 : TFA_FAULTSIM_FOREVER;
	uint64_t failures = 1;
	long n;

	tfa_faultsim_init(&fs, &exact.base);
	for (n = 0; failures != 0; n++) {
		ck_assert_int_lt(n, 100);
		faultsim_scenario(&fs, n, repeat, &failures);
	}
	/* 8 allocations and 3 reallocs: the first clean run is n = 11. */
	ck_assert_int_eq(n, 12);
}
END_TEST

/* ---- out of memory: the pointer table (arena) -------------------------------------------- */

#define DEGRADE_N 2000

START_TEST(test_tracking_allocator_table_oom_degrades)
{
	static void *p[DEGRADE_N];
	int result;

	tracker_init(&exact.base, true);
	/* Warm up: the thread's record and one shard exist before the arena fails. */
	void *warm = tfa_tracking_allocate(&ta, 0, 8, NULL);
	ck_assert_ptr_nonnull(warm);

	tfa_arena_inject_failure(0);
	for (int k = 0; k < DEGRADE_N; k++) {
		p[k] = tfa_tracking_allocate(&ta, 0, 24, NULL);
		ck_assert_ptr_nonnull(p[k]); /* allocations still succeed */
		memset(p[k], 0x33, 24);
	}
	ck_assert(ta.degraded);
	uint64_t recorded = tfa_ptr_table_count(&table);
	ck_assert_uint_lt(recorded, DEGRADE_N + 1);
	/* What is counted is exactly what is recorded. */
	tfa_allocator_stats_t st = stats();
	ck_assert_int_eq(st.num_allocs, (int64_t)recorded);
	ck_assert_int_eq(st.bytes_in_use, 8 + 24 * ((int64_t)recorded - 1));

	/* realloc of an unrecorded pointer is forwarded and keeps the contents. */
	int unrecorded = -1;
	for (int k = 0; k < DEGRADE_N && unrecorded < 0; k++)
		if (!tfa_tracking_lookup(&ta, p[k], NULL))
			unrecorded = k;
	ck_assert_int_ge(unrecorded, 0);
	unsigned char *q = tfa_tracking_reallocate(&ta, p[unrecorded], 4000, 0, &result, NULL);
	ck_assert_ptr_nonnull(q);
	for (int k = 0; k < 24; k++)
		ck_assert_uint_eq(q[k], 0x33);
	p[unrecorded] = q;

	/* Every free works: recorded ones through the table, the rest forwarded. */
	for (int k = 0; k < DEGRADE_N; k++)
		ck_assert_int_ge(tfa_tracking_deallocate(&ta, p[k], TFA_KIND_MALLOC, NULL), 0);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, warm, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	tfa_test_counts_t c = counts(&exact);
	ck_assert_uint_eq(c.live_blocks, 0);
	ck_assert_uint_eq(c.foreign_frees, 0);
	st = stats();
	ck_assert_int_eq(st.num_allocs, st.num_frees);
	ck_assert_int_eq(st.bytes_in_use, 0);
	ck_assert_int_eq(st.allocated_bytes_in_use, 0);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	tfa_arena_inject_failure(-1);
}
END_TEST

START_TEST(test_tracking_allocator_table_oom_from_start)
{
	tfa_allocation_attrs_t internal = kind_attrs(TFA_KIND_INTERNAL);

	tracker_init(&exact.base, _i != 0);
	tfa_arena_inject_failure(0);
	void *p = tfa_tracking_allocate(&ta, 0, 100, NULL);
	void *q = tfa_tracking_allocate(&ta, 0, 100, &internal);
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(q);
	ck_assert(ta.degraded);
	ck_assert_uint_eq(tfa_ptr_table_count(&table), 0);
	expect_stats(0, 0, 0, 0, stats().peak_bytes_in_use, stats().largest_alloc_size, 0);
	ck_assert_int_eq(stats().bytes_in_use, 0);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, p, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	ck_assert_int_eq(tfa_tracking_deallocate(&ta, q, TFA_KIND_MALLOC, NULL), TFA_FREE_OK);
	tfa_test_counts_t c = counts(&exact);
	ck_assert_uint_eq(c.live_blocks, 0);
	ck_assert_uint_eq(c.foreign_frees, 0);
	tfa_arena_inject_failure(-1);
}
END_TEST

static Suite *
tracking_allocator_suite(void)
{
	Suite *s = suite_create("tracking_allocator");
	TCase *tc;

	tc = tcase_create("seed");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_tracking_allocator_init_rejects_bad_arguments);
	tcase_add_loop_test(tc, test_tracking_allocator_seed_tuples, 0, 8);
	suite_add_tcase(s, tc);

	tc = tcase_create("stats");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_tracking_allocator_stats_requested_bytes, 0, 2);
	tcase_add_loop_test(tc, test_tracking_allocator_stats_allocated_bytes, 0, 2);
	tcase_add_test(tc, test_tracking_allocator_queries_via_ops);
	tcase_add_loop_test(tc, test_tracking_allocator_clear_stats, 0, 2);
	tcase_add_test(tc, test_tracking_allocator_slots_exhausted);
	suite_add_tcase(s, tc);

	tc = tcase_create("limit");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_tracking_allocator_bytes_limit, 0, 2);
	tcase_add_loop_test(tc, test_tracking_allocator_bytes_limit_realloc, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("free_errors");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_tracking_allocator_double_and_invalid_free);
	tcase_add_test(tc, test_tracking_allocator_mismatched_kind);
	tcase_add_loop_test(tc, test_tracking_allocator_internal_not_counted, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("realloc");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_tracking_allocator_realloc, 0, 2);
	tcase_add_test(tc, test_tracking_allocator_realloc_allocated_bytes);
	tcase_add_test(tc, test_tracking_allocator_zero_bytes);
	suite_add_tcase(s, tc);

	tc = tcase_create("backends");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_tracking_allocator_set_backend);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, test_tracking_allocator_threads_cross_free, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("oom");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_tracking_allocator_backend_failure);
	tcase_add_loop_test(tc, test_tracking_allocator_backend_failure_with_limit, 0, 2);
	tcase_add_loop_test(tc, test_tracking_allocator_faultsim_loop, 0, 2);
	tcase_add_test(tc, test_tracking_allocator_table_oom_degrades);
	tcase_add_loop_test(tc, test_tracking_allocator_sites, 0, 2);
	tcase_add_loop_test(tc, test_tracking_allocator_table_oom_from_start, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(tracking_allocator_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
