/* SPDX-License-Identifier: MIT */
/*
 * core/devices.h: device codes and their names, TFALLOC_CUDA_LIMIT's
 * syntax, one tracker per device recording memory another API makes (limits,
 * pitched sizes, forgetting, the shared table), the per-device series.
 */
#include "core/devices.h"

#include <check.h>
#include <errno.h>
#include <string.h>

#include "core/timeline.h"

START_TEST(test_devices_names)
{
	unsigned code = 99;

	ck_assert_str_eq(tfa_devcode_name(0), "cpu");
	ck_assert_str_eq(tfa_devcode_name(1), "cuda_host");
	ck_assert_str_eq(tfa_devcode_name(2), "cuda_managed");
	ck_assert_str_eq(tfa_devcode_name(3), "cuda:0");
	ck_assert_str_eq(tfa_devcode_name(31), "cuda:28");
	ck_assert_str_eq(tfa_devcode_name(32), "unknown");
	ck_assert_uint_eq(tfa_devcode_cuda(0), 3);
	ck_assert_uint_eq(tfa_devcode_cuda(28), 31);
	ck_assert_uint_eq(tfa_devcode_cuda(29), TFA_DEVCODES);
	ck_assert_uint_eq(tfa_devcode_cuda(-1), TFA_DEVCODES);
	for (unsigned c = 0; c < TFA_DEVCODES; c++) {
		ck_assert_int_eq(tfa_devcode_parse(tfa_devcode_name(c), &code), 0);
		ck_assert_uint_eq(code, c);
	}
	static const char *const bad[] = { "cuda", "cuda:", "cuda:29", "cuda:01", "cuda:1x", "gpu:0",
					   "CPU", "", "cuda:-1", "cuda:0000" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(tfa_devcode_parse(bad[i], &code) == -ENOENT, "%s", bad[i]);
	ck_assert_int_eq(tfa_devcode_parse(NULL, &code), -ENOENT);
	/* Profiles list cuda:0.. first, then cuda_host and cuda_managed. */
	ck_assert_uint_eq(tfa_devcode_at(0), 3);
	ck_assert_uint_eq(tfa_devcode_at(28), 31);
	ck_assert_uint_eq(tfa_devcode_at(29), 1);
	ck_assert_uint_eq(tfa_devcode_at(30), 2);
}
END_TEST

START_TEST(test_devices_limits)
{
	tfa_tracking_allocator_t *d0 = tfa_device_tracker(tfa_devcode_cuda(0));
	tfa_allocator_stats_t st;
	bool reserved;

	ck_assert_int_eq(tfa_devices_set_limits("0:8G,1:4G,host:1M,managed:2K"), 0);
	tfa_tracking_allocator_get_stats(d0, &st);
	ck_assert_int_eq(st.bytes_limit, (int64_t)8 << 30);
	/* A tracker made later takes its limit then. */
	tfa_tracking_allocator_get_stats(tfa_device_tracker(TFA_DEVCODE_CUDA_HOST), &st);
	ck_assert_int_eq(st.bytes_limit, 1 << 20);
	tfa_tracking_allocator_get_stats(tfa_device_tracker(TFA_DEVCODE_CUDA_MANAGED), &st);
	ck_assert_int_eq(st.bytes_limit, 2048);
	static const char *const bad[] = { "0", "0:", ":1M", "x:1M", "29:1M", "0:1Q", "0:1M,",
					   ",0:1M", "0:1M,,1:1M", "-1:1M" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(tfa_devices_set_limits(bad[i]) == -EINVAL, "%s", bad[i]);
	/* A bad list changes nothing. */
	tfa_tracking_allocator_get_stats(d0, &st);
	ck_assert_int_eq(st.bytes_limit, (int64_t)8 << 30);
	/* Refused past the limit, nothing changed; an empty list removes the limits. */
	ck_assert_int_eq(tfa_devices_set_limits("0:1000"), 0);
	ck_assert(tfa_tracking_reserve(d0, 600, 0, &reserved));
	ck_assert(reserved);
	ck_assert(!tfa_tracking_reserve(d0, 500, 0, &reserved));
	tfa_tracking_unreserve(d0, 600, 0, true);
	ck_assert(tfa_tracking_reserve(d0, 1000, 0, &reserved));
	tfa_tracking_unreserve(d0, 1000, 0, reserved);
	ck_assert_int_eq(tfa_devices_set_limits(""), 0);
	ck_assert(tfa_tracking_reserve(d0, (size_t)1 << 40, 0, &reserved));
	ck_assert(!reserved);
}
END_TEST

START_TEST(test_devices_record_forget)
{
	unsigned c1 = tfa_devcode_cuda(1);
	tfa_tracking_allocator_t *d1 = tfa_device_tracker(c1);
	tfa_tracking_allocator_t *host = tfa_device_tracker(TFA_DEVCODE_CUDA_HOST);
	tfa_allocator_stats_t st;
	tfa_alloc_info_t info;
	tfa_record_t rec;
	bool reserved;

	ck_assert_ptr_null(tfa_device_tracker(TFA_DEVCODE_CPU));
	ck_assert_ptr_null(tfa_device_tracker(TFA_DEVCODES));
	ck_assert_ptr_eq(tfa_device_tracker_if_used(c1), d1);
	ck_assert_ptr_null(tfa_device_tracker_if_used(tfa_devcode_cuda(5)));
	ck_assert_int_eq(tfa_devices_set_limits("1:10000"), 0);

	/* A pitched block: reserved with width x height, recorded with pitch x height. */
	ck_assert(tfa_tracking_reserve(d1, 3000, 0, &reserved));
	tfa_tracking_record_external(d1, 0x10000, 3000, 4096, TFA_KIND_DEVICE, 0, 0, reserved);
	ck_assert(tfa_tracking_reserve(host, 100, 0, &reserved));
	tfa_tracking_record_external(host, 0x20000, 100, 100, TFA_KIND_DEVICE, 0, 0, reserved);
	tfa_tracking_allocator_get_stats(d1, &st);
	ck_assert_int_eq(st.num_allocs, 1);
	ck_assert_int_eq(st.bytes_in_use, 4096);
	ck_assert_int_eq(st.peak_bytes_in_use, 4096);
	ck_assert_int_eq(st.allocated_bytes_in_use, 4096);
	/* One table for every device: the record says which. */
	ck_assert(tfa_ptr_table_lookup(tfa_devices_table(), 0x10000, &rec));
	tfa_record_unpack(&rec, &info);
	ck_assert_uint_eq(info.device, c1);
	ck_assert_uint_eq(info.kind, TFA_KIND_DEVICE);
	ck_assert_uint_eq(info.requested, 4096);
	/* The limit sees the pitched size: 4096 + 6000 > 10000. */
	ck_assert(!tfa_tracking_reserve(d1, 6000, 0, &reserved));
	ck_assert(tfa_tracking_reserve(d1, 5904, 0, &reserved));
	tfa_tracking_unreserve(d1, 5904, 0, reserved);

	ck_assert(!tfa_tracking_forget(d1, 0x30000, NULL)); /* unknown */
	ck_assert(tfa_tracking_forget(d1, 0x10000, &info));
	ck_assert_uint_eq(info.requested, 4096);
	ck_assert(!tfa_tracking_forget(d1, 0x10000, NULL)); /* twice */
	tfa_tracking_allocator_get_stats(d1, &st);
	ck_assert_int_eq(st.num_frees, 1);
	ck_assert_int_eq(st.bytes_in_use, 0);
	ck_assert_int_eq(st.peak_bytes_in_use, 4096);
	tfa_tracking_allocator_get_stats(host, &st);
	ck_assert_int_eq(st.bytes_in_use, 100);
}
END_TEST

START_TEST(test_devices_timeline)
{
	unsigned c = tfa_devcode_cuda(2);
	tfa_tracking_allocator_t *d = tfa_device_tracker(c);
	bool reserved;

	tfa_devices_set_time_origin(tfa_monotonic_ns());
	ck_assert(tfa_tracking_reserve(d, 500, 0, &reserved));
	tfa_tracking_record_external(d, 0x40000, 500, 500, TFA_KIND_DEVICE, 0, 0, reserved);
	tfa_device_sample(c, true);
	ck_assert(tfa_tracking_forget(d, 0x40000, NULL));
	tfa_device_sample(c, true);
	/* Sampling a device never used does nothing. */
	tfa_device_sample(tfa_devcode_cuda(7), true);
	ck_assert_ptr_null(tfa_device_tracker_if_used(tfa_devcode_cuda(7)));
}
END_TEST

static Suite *
devices_suite(void)
{
	Suite *s = suite_create("devices");
	TCase *tc = tcase_create("devices");

	tcase_add_test(tc, test_devices_names);
	tcase_add_test(tc, test_devices_limits);
	tcase_add_test(tc, test_devices_record_forget);
	tcase_add_test(tc, test_devices_timeline);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(devices_suite());
	srunner_run_all(sr, CK_ENV);
	int failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures == 0 ? 0 : 1;
}
