/* SPDX-License-Identifier: MIT */
/*
 * core/allocator.h: AllocatorAttributes, the typed helper, the defaults the
 * inline wrappers give for NULL optional members, AllocatorWrapper forwarding
 * and the realloc fallback.
 */
#include "core/allocator.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"
#include "test/support/exact_backend.h"

/* ---- a minimal allocator: only allocate_raw and deallocate_raw ------------------------------ */

typedef struct minimal_s {
	tfa_allocator_t base;
	int allocs;
	int frees;
	bool fail;
	const tfa_allocation_attrs_t *last_attrs;
} minimal_t;

static void *
minimal_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
                     const tfa_allocation_attrs_t *attrs)
{
	minimal_t *m = tfa_container_of(self, minimal_t, base);
	void *p = NULL;

	m->last_attrs = attrs;
	if (m->fail)
		return NULL;
	if (posix_memalign(&p, alignment > sizeof(void *) ? alignment : sizeof(void *), nbytes)
	    != 0)
		return NULL;
	m->allocs++;
	return p;
}

static void
minimal_deallocate_raw(tfa_allocator_t *self, void *ptr)
{
	minimal_t *m = tfa_container_of(self, minimal_t, base);

	m->frees++;
	free(ptr);
}

static size_t
never_good_size(const tfa_allocator_t *self, size_t nbytes, size_t alignment)
{
	(void)self;
	(void)alignment;
	return nbytes + 1000;
}

static const tfa_allocator_ops_t minimal_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "minimal",
	.allocate_raw = minimal_allocate_raw,
	.deallocate_raw = minimal_deallocate_raw,
};

/*
 * An ops table from an "older build": struct_size stops before good_size, so
 * the member that happens to be set there must be ignored.
 */
static const tfa_allocator_ops_t short_ops = {
	.struct_size = offsetof(tfa_allocator_ops_t, good_size),
	.name = "short",
	.allocate_raw = minimal_allocate_raw,
	.deallocate_raw = minimal_deallocate_raw,
	.good_size = never_good_size,
};

static void
minimal_init(minimal_t *m, const tfa_allocator_ops_t *ops)
{
	memset(m, 0, sizeof(*m));
	m->base.ops = ops;
	m->base.device = TFA_DEVICE_CPU;
	m->base.backend_id = TFA_BACKEND_TEST2;
}

static tfa_allocator_attrs_t
attrs_of(uint32_t v)
{
	tfa_allocator_attrs_t a = { v };
	return a;
}

/* ---- AllocatorAttributes ------------------------------------------------------------------ */

START_TEST(test_allocator_attrs_bits)
{
	ck_assert_uint_eq(TFA_ATTR_ON_HOST, 1u << 0);
	ck_assert_uint_eq(TFA_ATTR_NIC_COMPATIBLE, 1u << 1);
	ck_assert_uint_eq(TFA_ATTR_GPU_COMPATIBLE, 1u << 2);
	ck_assert_uint_eq(TFA_ATTR_TRACK_SIZES, 1u << 3);
	ck_assert_uint_eq(TFA_ATTR_DEVICE_MASK, 0xff000000u);

	tfa_allocator_attrs_t a = attrs_of(0);
	ck_assert(!tfa_attrs_on_host(a));
	ck_assert(!tfa_attrs_nic_compatible(a));
	ck_assert(!tfa_attrs_gpu_compatible(a));
	ck_assert(!tfa_attrs_track_sizes(a));

	tfa_attrs_set(&a, TFA_ATTR_ON_HOST, true);
	ck_assert_uint_eq(a.value, 0x1);
	ck_assert(tfa_attrs_on_host(a));
	tfa_attrs_set(&a, TFA_ATTR_NIC_COMPATIBLE, true);
	ck_assert_uint_eq(a.value, 0x3);
	ck_assert(tfa_attrs_nic_compatible(a));
	tfa_attrs_set(&a, TFA_ATTR_GPU_COMPATIBLE, true);
	ck_assert_uint_eq(a.value, 0x7);
	ck_assert(tfa_attrs_gpu_compatible(a));
	tfa_attrs_set(&a, TFA_ATTR_TRACK_SIZES, true);
	ck_assert_uint_eq(a.value, 0xf);
	ck_assert(tfa_attrs_track_sizes(a));

	/* Setting twice is idempotent; clearing touches only its bit. */
	tfa_attrs_set(&a, TFA_ATTR_GPU_COMPATIBLE, true);
	ck_assert_uint_eq(a.value, 0xf);
	tfa_attrs_set(&a, TFA_ATTR_NIC_COMPATIBLE, false);
	ck_assert_uint_eq(a.value, 0xd);
	ck_assert(!tfa_attrs_nic_compatible(a));
	ck_assert(tfa_attrs_on_host(a));
	tfa_attrs_set(&a, TFA_ATTR_ON_HOST, false);
	tfa_attrs_set(&a, TFA_ATTR_GPU_COMPATIBLE, false);
	tfa_attrs_set(&a, TFA_ATTR_TRACK_SIZES, false);
	ck_assert_uint_eq(a.value, 0);
	tfa_attrs_set(&a, TFA_ATTR_TRACK_SIZES, false);
	ck_assert_uint_eq(a.value, 0);
}
END_TEST

START_TEST(test_allocator_attrs_device_bits)
{
	tfa_allocator_attrs_t a = attrs_of(TFA_ATTR_ON_HOST | TFA_ATTR_GPU_COMPATIBLE);

	ck_assert_uint_eq(tfa_attrs_device_bits(a), 0);
	tfa_attrs_set_device_bits(&a, 0xab);
	ck_assert_uint_eq(tfa_attrs_device_bits(a), 0xab);
	ck_assert_uint_eq(a.value, 0xab000005u);
	/* Replacing the device bits keeps the generic ones, and vice versa. */
	tfa_attrs_set_device_bits(&a, 0x12);
	ck_assert_uint_eq(a.value, 0x12000005u);
	tfa_attrs_set(&a, TFA_ATTR_ON_HOST, false);
	ck_assert_uint_eq(a.value, 0x12000004u);
	ck_assert_uint_eq(tfa_attrs_device_bits(a), 0x12);
	tfa_attrs_set_device_bits(&a, 0xff);
	ck_assert_uint_eq(a.value, 0xff000004u);
	tfa_attrs_set_device_bits(&a, 0);
	ck_assert_uint_eq(a.value, 0x4u);
}
END_TEST

START_TEST(test_allocator_attrs_merge)
{
	tfa_allocator_attrs_t a = attrs_of(TFA_ATTR_ON_HOST);
	tfa_allocator_attrs_t b = attrs_of(TFA_ATTR_GPU_COMPATIBLE);

	tfa_attrs_set_device_bits(&a, 0x10);
	tfa_attrs_merge(&a, b);
	ck_assert_uint_eq(a.value, 0x10000005u);
	ck_assert(tfa_attrs_on_host(a));
	ck_assert(tfa_attrs_gpu_compatible(a));
	ck_assert_uint_eq(tfa_attrs_device_bits(a), 0x10);

	/* Merging the empty set changes nothing; merging is OR of everything. */
	tfa_attrs_merge(&a, attrs_of(0));
	ck_assert_uint_eq(a.value, 0x10000005u);
	tfa_allocator_attrs_t c = attrs_of(TFA_ATTR_NIC_COMPATIBLE | 0x01000000u);
	tfa_attrs_merge(&a, c);
	ck_assert_uint_eq(a.value, 0x11000007u);

	/* The other side's device bits survive a merge into an empty value. */
	tfa_allocator_attrs_t d = attrs_of(0);
	tfa_attrs_merge(&d, attrs_of(0x7f000008u));
	ck_assert_uint_eq(d.value, 0x7f000008u);
	ck_assert_uint_eq(tfa_attrs_device_bits(d), 0x7f);
	ck_assert(tfa_attrs_track_sizes(d));
}
END_TEST

START_TEST(test_allocator_attrs_less_restrictive)
{
	const tfa_allocator_attrs_t none = attrs_of(0);
	const tfa_allocator_attrs_t host = attrs_of(TFA_ATTR_ON_HOST);
	const tfa_allocator_attrs_t gpu = attrs_of(TFA_ATTR_GPU_COMPATIBLE);
	const tfa_allocator_attrs_t nic = attrs_of(TFA_ATTR_NIC_COMPATIBLE);
	const tfa_allocator_attrs_t pinned = attrs_of(TFA_ATTR_ON_HOST | TFA_ATTR_GPU_COMPATIBLE);
	const tfa_allocator_attrs_t all = attrs_of(0xf);

	/* a <= b exactly when a's bits are a subset of b's. */
	ck_assert(tfa_attrs_is_equal_or_less_restrictive_than(none, none));
	ck_assert(tfa_attrs_is_equal_or_less_restrictive_than(none, host));
	ck_assert(tfa_attrs_is_equal_or_less_restrictive_than(host, host));
	ck_assert(tfa_attrs_is_equal_or_less_restrictive_than(host, pinned));
	ck_assert(tfa_attrs_is_equal_or_less_restrictive_than(gpu, pinned));
	ck_assert(tfa_attrs_is_equal_or_less_restrictive_than(pinned, pinned));
	ck_assert(tfa_attrs_is_equal_or_less_restrictive_than(pinned, all));
	ck_assert(!tfa_attrs_is_equal_or_less_restrictive_than(pinned, host));
	ck_assert(!tfa_attrs_is_equal_or_less_restrictive_than(pinned, gpu));
	ck_assert(!tfa_attrs_is_equal_or_less_restrictive_than(host, none));
	ck_assert(!tfa_attrs_is_equal_or_less_restrictive_than(nic, pinned));
	ck_assert(!tfa_attrs_is_equal_or_less_restrictive_than(gpu, host));
	ck_assert(!tfa_attrs_is_equal_or_less_restrictive_than(all, pinned));

	/* Device bits take part like every other bit. */
	tfa_allocator_attrs_t dev_a = host, dev_b = pinned;
	tfa_attrs_set_device_bits(&dev_a, 0x01);
	tfa_attrs_set_device_bits(&dev_b, 0x03);
	ck_assert(tfa_attrs_is_equal_or_less_restrictive_than(dev_a, dev_b));
	ck_assert(!tfa_attrs_is_equal_or_less_restrictive_than(dev_a, pinned));
	ck_assert(!tfa_attrs_is_equal_or_less_restrictive_than(dev_b, dev_a));
}
END_TEST

/* ---- the typed helper --------------------------------------------------------------------- */

START_TEST(test_allocator_typed_helper)
{
	tfa_test_backend_t tb;
	tfa_test_counts_t c;

	tfa_test_backend_init_exact(&tb);
	tfa_allocator_t *a = tfa_test_backend_base(&tb);

	double *d = tfa_allocator_allocate(a, double, 10, NULL);
	ck_assert_ptr_nonnull(d);
	ck_assert_uint_eq((uintptr_t)d % _Alignof(double), 0);
	ck_assert_uint_eq(tfa_allocator_allocated_size_slow(a, d), 10 * sizeof(double));
	for (int i = 0; i < 10; i++)
		d[i] = i;
	tfa_allocator_deallocate(a, d, 10);

	/* n * sizeof(T) overflows: NULL, and the backend is never asked. */
	uint64_t *big = tfa_allocator_allocate(a, uint64_t, SIZE_MAX / 4, NULL);
	ck_assert_ptr_null(big);
	big = tfa_allocator_allocate(a, uint64_t, (SIZE_MAX / sizeof(uint64_t)) + 1, NULL);
	ck_assert_ptr_null(big);
	struct s24 {
		char x[24];
	};
	struct s24 *s = tfa_allocator_allocate(a, struct s24, SIZE_MAX / 16, NULL);
	ck_assert_ptr_null(s);

	tfa_test_backend_counts(&tb, &c);
	ck_assert_uint_eq(c.allocate_raw, 1);
	ck_assert_uint_eq(c.deallocate_raw, 1);
	ck_assert_uint_eq(c.live_blocks, 0);
}
END_TEST

/* ---- defaults for NULL optional members -------------------------------------------------- */

START_TEST(test_allocator_default_wrappers)
{
	minimal_t m;
	tfa_allocator_stats_t st;

	minimal_init(&m, &minimal_ops);
	tfa_allocator_t *a = &m.base;

	ck_assert_str_eq(tfa_allocator_name(a), "minimal");
	void *p = tfa_allocator_allocate_raw(a, 0, 40, NULL);
	ck_assert_ptr_nonnull(p);
	/* A NULL attrs reaches the backend as a zeroed struct, never as NULL. */
	ck_assert_ptr_nonnull(m.last_attrs);
	ck_assert(!m.last_attrs->no_retry_on_failure);
	ck_assert(!m.last_attrs->zero_fill);
	ck_assert_uint_eq(m.last_attrs->kind, 0);

	ck_assert(!tfa_allocator_tracks_allocation_sizes(a));
	ck_assert_uint_eq(tfa_allocator_requested_size(a, p), 0);
	ck_assert_uint_eq(tfa_allocator_allocated_size(a, p), 0);
	ck_assert_int_eq(tfa_allocator_allocation_id(a, p), 0);
	ck_assert_uint_eq(tfa_allocator_allocated_size_slow(a, p), 0);
	ck_assert_uint_eq(tfa_allocator_good_size(a, 40, 0), 0);
	memset(&st, 0x5a, sizeof(st));
	ck_assert(!tfa_allocator_get_stats(a, &st));
	ck_assert(!tfa_allocator_clear_stats(a));

	/* The sized free falls back to deallocate_raw; NULL is never passed on. */
	tfa_allocator_deallocate_raw_sized(a, p, 40, 0);
	ck_assert_int_eq(m.frees, 1);
	tfa_allocator_deallocate_raw(a, NULL);
	tfa_allocator_deallocate_raw_sized(a, NULL, 1, 0);
	ck_assert_int_eq(m.frees, 1);
	ck_assert_int_eq(m.allocs, 1);
}
END_TEST

START_TEST(test_allocator_short_ops_table)
{
	minimal_t m;

	minimal_init(&m, &short_ops);
	/* good_size lies past struct_size: it does not exist for this table. */
	ck_assert(!TFA_OPS_HAS(m.base.ops, good_size));
	ck_assert(TFA_OPS_HAS(m.base.ops, allocate_raw));
	ck_assert(!TFA_OPS_HAS(m.base.ops, get_stats));
	ck_assert_uint_eq(tfa_allocator_good_size(&m.base, 10, 0), 0);
	ck_assert(TFA_OPS_HAS(&minimal_ops, deallocate_raw));
	ck_assert(!TFA_OPS_HAS(&minimal_ops, reallocate_raw));
}
END_TEST

START_TEST(test_allocator_device_type_name)
{
	ck_assert_str_eq(tfa_device_type_name(TFA_DEVICE_CPU), "cpu");
	ck_assert_str_eq(tfa_device_type_name(TFA_DEVICE_CUDA), "cuda");
	ck_assert_str_eq(tfa_device_type_name(TFA_DEVICE_TYPE_COUNT), "unknown");
	ck_assert_str_eq(tfa_device_type_name((tfa_device_type_t)77), "unknown");
}
END_TEST

/* ---- AllocatorWrapper --------------------------------------------------------------------- */

START_TEST(test_allocator_wrapper_forwards_every_op)
{
	tfa_test_backend_t spy;
	tfa_allocator_wrapper_t w;
	tfa_test_counts_t before, after;
	tfa_allocator_stats_t st;

	tfa_test_backend_init_spy(&spy, TFA_BACKEND_TEST2);
	spy.base.device = TFA_DEVICE_CUDA;
	spy.base.device_ordinal = 3;
	tfa_allocator_wrapper_init(&w, &spy.base, NULL);
	tfa_allocator_t *a = &w.base;

	ck_assert_ptr_eq(w.base.ops, &tfa_allocator_wrapper_ops);
	ck_assert_ptr_eq(tfa_allocator_wrapped(a), &spy.base);
	ck_assert_int_eq(a->device, TFA_DEVICE_CUDA);
	ck_assert_int_eq(a->device_ordinal, 3);
	ck_assert_uint_eq(a->backend_id, TFA_BACKEND_TEST2);

#define OP_DELTA(field) (after.field - before.field)
#define SNAP_BEFORE()   tfa_test_backend_counts(&spy, &before)
#define SNAP_AFTER()    tfa_test_backend_counts(&spy, &after)

	SNAP_BEFORE();
	char *p = tfa_allocator_allocate_raw(a, 64, 100, NULL);
	SNAP_AFTER();
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq((uintptr_t)p % 64, 0);
	ck_assert(tfa_test_backend_owns(&spy, p));
	ck_assert_uint_eq(OP_DELTA(allocate_raw), 1);
	memset(p, 'x', 100);

	SNAP_BEFORE();
	ck_assert(tfa_allocator_tracks_allocation_sizes(a));
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(tracks_allocation_sizes), 1);

	SNAP_BEFORE();
	ck_assert_uint_eq(tfa_allocator_requested_size(a, p), 100);
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(requested_size), 1);

	SNAP_BEFORE();
	ck_assert_uint_eq(tfa_allocator_allocated_size(a, p), 100);
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(allocated_size), 1);

	SNAP_BEFORE();
	ck_assert_int_eq(tfa_allocator_allocation_id(a, p), 1);
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(allocation_id), 1);

	/*
	 * allocated_size_slow of a size-tracking allocator is its
	 * allocated_size: the spy answers through one or the other.
	 */
	SNAP_BEFORE();
	ck_assert_uint_eq(a->ops->allocated_size_slow(a, p), 100);
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(allocated_size_slow) + OP_DELTA(allocated_size), 1);

	SNAP_BEFORE();
	ck_assert(tfa_allocator_get_stats(a, &st));
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(get_stats), 1);
	ck_assert_int_eq(st.num_allocs, 1);
	ck_assert_int_eq(st.bytes_in_use, 100);

	SNAP_BEFORE();
	ck_assert(tfa_allocator_clear_stats(a));
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(clear_stats), 1);

	SNAP_BEFORE();
	ck_assert_uint_eq(tfa_allocator_good_size(a, 77, 0), 77);
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(good_size), 1);

	SNAP_BEFORE();
	char *q = tfa_allocator_reallocate_raw(a, p, 100, 300, 64);
	SNAP_AFTER();
	ck_assert_ptr_nonnull(q);
	ck_assert_uint_eq(OP_DELTA(reallocate_raw), 1);
	ck_assert_uint_eq(OP_DELTA(allocate_raw), 0); /* the spy's own realloc, no fallback */
	for (int i = 0; i < 100; i++)
		ck_assert_int_eq(q[i], 'x');

	SNAP_BEFORE();
	tfa_allocator_deallocate_raw_sized(a, q, 300, 64);
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(deallocate_raw_sized), 1);
	ck_assert_uint_eq(OP_DELTA(deallocate_raw), 0);

	SNAP_BEFORE();
	void *r = tfa_allocator_allocate_raw(a, 0, 8, NULL);
	tfa_allocator_deallocate_raw(a, r);
	SNAP_AFTER();
	ck_assert_uint_eq(OP_DELTA(deallocate_raw), 1);

	ck_assert_uint_eq(after.live_blocks, 0);
	ck_assert_uint_eq(after.foreign_frees, 0);
#undef OP_DELTA
#undef SNAP_BEFORE
#undef SNAP_AFTER
}
END_TEST

START_TEST(test_allocator_wrapper_custom_ops)
{
	tfa_test_backend_t tb;
	tfa_allocator_wrapper_t w;
	tfa_allocator_ops_t ops = tfa_allocator_wrapper_ops;

	ops.name = "custom";
	tfa_test_backend_init_rounding(&tb);
	tfa_allocator_wrapper_init(&w, &tb.base, &ops);
	ck_assert_str_eq(tfa_allocator_name(&w.base), "custom");
	ck_assert_uint_eq(w.base.backend_id, TFA_BACKEND_TEST1);
	void *p = tfa_allocator_allocate_raw(&w.base, 0, 5, NULL);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(tfa_allocator_allocated_size_slow(&w.base, p), 16);
	ck_assert_uint_eq(tfa_allocator_good_size(&w.base, 17, 0), 32);
	/* The rounding backend does not track sizes: neither does its wrapper. */
	ck_assert(!tfa_allocator_tracks_allocation_sizes(&w.base));
	ck_assert_uint_eq(tfa_allocator_requested_size(&w.base, p), 0);
	tfa_allocator_deallocate_raw(&w.base, p);
	ck_assert_uint_eq(tb.counts.live_blocks, 0);
}
END_TEST

/* ---- realloc fallback --------------------------------------------------------------------- */

START_TEST(test_allocator_reallocate_fallback)
{
	minimal_t m;

	minimal_init(&m, &minimal_ops);
	tfa_allocator_t *a = &m.base;

	unsigned char *p = tfa_allocator_allocate_raw(a, 0, 100, NULL);
	ck_assert_ptr_nonnull(p);
	for (int i = 0; i < 100; i++)
		p[i] = (unsigned char)(i * 7 + 1);

	/* Grow: allocate + copy + free. */
	unsigned char *q = tfa_allocator_reallocate_raw(a, p, 100, 1000, 0);
	ck_assert_ptr_nonnull(q);
	ck_assert_int_eq(m.allocs, 2);
	ck_assert_int_eq(m.frees, 1);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(q[i], (unsigned char)(i * 7 + 1));
	memset(q + 100, 0xee, 900);

	/* Shrink: the first bytes survive. */
	unsigned char *r = tfa_allocator_reallocate_raw(a, q, 1000, 10, 32);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq((uintptr_t)r % 32, 0);
	ck_assert_int_eq(m.allocs, 3);
	ck_assert_int_eq(m.frees, 2);
	for (int i = 0; i < 10; i++)
		ck_assert_uint_eq(r[i], (unsigned char)(i * 7 + 1));

	/* Failure: NULL, and the old block is neither freed nor changed. */
	m.fail = true;
	unsigned char *s = tfa_allocator_reallocate_raw(a, r, 10, 5000, 0);
	ck_assert_ptr_null(s);
	ck_assert_int_eq(m.frees, 2);
	for (int i = 0; i < 10; i++)
		ck_assert_uint_eq(r[i], (unsigned char)(i * 7 + 1));
	m.fail = false;
	tfa_allocator_deallocate_raw(a, r);
	ck_assert_int_eq(m.frees, 3);
}
END_TEST

static Suite *
allocator_suite(void)
{
	Suite *s = suite_create("allocator");
	TCase *tc;

	tc = tcase_create("attrs");
	tcase_add_test(tc, test_allocator_attrs_bits);
	tcase_add_test(tc, test_allocator_attrs_device_bits);
	tcase_add_test(tc, test_allocator_attrs_merge);
	tcase_add_test(tc, test_allocator_attrs_less_restrictive);
	suite_add_tcase(s, tc);

	tc = tcase_create("ops");
	tcase_add_test(tc, test_allocator_typed_helper);
	tcase_add_test(tc, test_allocator_default_wrappers);
	tcase_add_test(tc, test_allocator_short_ops_table);
	tcase_add_test(tc, test_allocator_device_type_name);
	tcase_add_test(tc, test_allocator_reallocate_fallback);
	suite_add_tcase(s, tc);

	tc = tcase_create("wrapper");
	tcase_add_test(tc, test_allocator_wrapper_forwards_every_op);
	tcase_add_test(tc, test_allocator_wrapper_custom_ops);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(allocator_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
