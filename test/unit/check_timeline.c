/* SPDX-License-Identifier: MIT */
/*
 * core/timeline.h: points at least an interval apart, a bounded series that
 * halves itself and keeps its highs, the peak put on the series, time never
 * going back.
 */
#include "core/timeline.h"

#include <check.h>
#include <stdlib.h>

#define MS 1000000u

static tfa_timeline_t *
new_timeline(uint64_t interval)
{
	tfa_timeline_t *tl = calloc(1, sizeof(*tl));
	ck_assert_ptr_nonnull(tl);
	tfa_timeline_init(tl, 1000 * MS, interval);
	return tl;
}

START_TEST(test_timeline_interval)
{
	tfa_timeline_t *tl = new_timeline(10 * MS);

	ck_assert(tfa_timeline_due(tl, 1000 * MS));
	tfa_timeline_add(tl, 1000 * MS, 5, 8, 100, 5, 8, false);
	ck_assert_uint_eq(tl->n, 1);
	ck_assert(!tfa_timeline_due(tl, 1005 * MS));
	tfa_timeline_add(tl, 1005 * MS, 6, 8, 100, 6, 8, false); /* too early: dropped */
	ck_assert_uint_eq(tl->n, 1);
	tfa_timeline_add(tl, 1005 * MS, 7, 8, 100, 7, 8, true); /* forced: kept */
	ck_assert_uint_eq(tl->n, 2);
	ck_assert(tfa_timeline_due(tl, 1015 * MS));
	tfa_timeline_add(tl, 1015 * MS, 3, 4, 100, 7, 8, false);
	ck_assert_uint_eq(tl->n, 3);
	ck_assert_uint_eq(tl->pts[0].t_ns, 0);
	ck_assert_uint_eq(tl->pts[2].t_ns, 15 * MS);
	ck_assert_uint_eq(tl->pts[2].bytes_in_use, 3);
	ck_assert_uint_eq(tl->pts[2].rss_bytes, 100);
	free(tl);
}
END_TEST

/* A peak reached between two points gets a point of its own, flagged. */
START_TEST(test_timeline_peak_between_points)
{
	tfa_timeline_t *tl = new_timeline(10 * MS);

	tfa_timeline_add(tl, 1000 * MS, 10, 16, 0, 10, 16, false);
	tfa_timeline_add(tl, 1020 * MS, 20, 32, 0, 500, 512, false);
	ck_assert_uint_eq(tl->n, 3);
	ck_assert_uint_eq(tl->pts[1].bytes_in_use, 500);
	ck_assert_uint_eq(tl->pts[1].allocated_bytes, 512);
	ck_assert_uint_eq(tl->pts[1].flags, TFA_TL_PEAK);
	ck_assert_uint_eq(tl->pts[1].t_ns, 10 * MS); /* between its neighbours */
	ck_assert_uint_eq(tl->pts[2].bytes_in_use, 20);
	ck_assert_uint_eq(tl->pts[2].flags, 0);
	/* The same peak is not added again. */
	tfa_timeline_add(tl, 1040 * MS, 20, 32, 0, 500, 512, false);
	ck_assert_uint_eq(tl->n, 4);
	/* A point that is itself the peak is flagged. */
	tfa_timeline_add(tl, 1060 * MS, 900, 1024, 0, 900, 1024, false);
	ck_assert_uint_eq(tl->n, 5);
	ck_assert_uint_eq(tl->pts[4].flags, TFA_TL_PEAK);
	free(tl);
}
END_TEST

/* However many points come, at most TFA_TIMELINE_MAX stay, evenly spread, with the highs. */
START_TEST(test_timeline_bounded_keeps_highs)
{
	tfa_timeline_t *tl = new_timeline(1 * MS);
	uint64_t now = 1000 * MS, peak = 0;
	const uint64_t n = 100000;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = (i * 7919) % 100003; /* scattered values */
		if (i == 77777)
			v = 5000000; /* one spike */
		if (v > peak)
			peak = v;
		now += 1 * MS;
		tfa_timeline_add(tl, now, v, v, 0, peak, peak, false);
		ck_assert_uint_le(tl->n, TFA_TIMELINE_MAX);
	}
	ck_assert_uint_ge(tl->n, TFA_TIMELINE_MAX / 2);
	uint64_t max = 0;
	for (size_t i = 0; i < tl->n; i++) {
		if (tl->pts[i].bytes_in_use > max)
			max = tl->pts[i].bytes_in_use;
		if (i > 0)
			ck_assert_uint_ge(tl->pts[i].t_ns, tl->pts[i - 1].t_ns);
	}
	ck_assert_uint_eq(max, 5000000);
	/* The spacing grew so that the whole run fits: about n ms over the points. */
	ck_assert_uint_ge(tl->interval_ns * TFA_TIMELINE_MAX, n * MS / 2);
	ck_assert_uint_ge(tl->pts[tl->n - 1].t_ns, (n - 2 * tl->interval_ns / MS) * MS);
	free(tl);
}
END_TEST

START_TEST(test_timeline_time_never_goes_back)
{
	tfa_timeline_t *tl = new_timeline(1 * MS);

	tfa_timeline_add(tl, 1050 * MS, 1, 1, 0, 1, 1, false);
	tfa_timeline_add(tl, 1040 * MS, 2, 2, 0, 2, 2, true); /* a clock read before the last point */
	ck_assert_uint_eq(tl->n, 2);
	ck_assert_uint_eq(tl->pts[1].t_ns, tl->pts[0].t_ns);
	tfa_timeline_add(tl, 900 * MS, 3, 3, 0, 3, 3, true); /* before the start */
	ck_assert_uint_ge(tl->pts[tl->n - 1].t_ns, tl->pts[0].t_ns);
	free(tl);
}
END_TEST

START_TEST(test_rss_bytes)
{
	uint64_t rss = tfa_rss_bytes();

	ck_assert_uint_gt(rss, 0);
	ck_assert_uint_lt(rss, (uint64_t)1 << 40);
	ck_assert_uint_eq(rss % 4096, 0);
	ck_assert_uint_gt(tfa_monotonic_ns(), 0);
}
END_TEST

static Suite *
timeline_suite(void)
{
	Suite *s = suite_create("timeline");
	TCase *tc = tcase_create("timeline");

	tcase_add_test(tc, test_timeline_interval);
	tcase_add_test(tc, test_timeline_peak_between_points);
	tcase_add_test(tc, test_timeline_bounded_keeps_highs);
	tcase_add_test(tc, test_timeline_time_never_goes_back);
	tcase_add_test(tc, test_rss_bytes);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(timeline_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
