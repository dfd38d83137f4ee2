/* SPDX-License-Identifier: MIT */
/*
 * core/sites.h: per-site counts, and the breakdown of the peak checked
 * against a brute-force model that copies every site at every new peak.
 */
#include "core/sites.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static tfa_sites_t sites;

/* The tracker's side: a free first takes a snapshot when in use is at the peak. */
static int64_t in_use, peak, snap_peak;

static void
model_alloc(uint32_t site, int64_t bytes)
{
	tfa_sites_alloc(&sites, site, (uint64_t)bytes);
	in_use += bytes;
	if (in_use > peak)
		peak = in_use;
}

static void
model_free(uint32_t site, int64_t bytes)
{
	if (in_use == peak && peak > snap_peak) {
		tfa_sites_snapshot(&sites, in_use);
		snap_peak = peak;
	}
	tfa_sites_free(&sites, site, (uint64_t)bytes);
	in_use -= bytes;
}

#define NSITES 3000 /* spans three chunks */

struct seen {
	int64_t peak_bytes[NSITES];
	int64_t in_use[NSITES];
	uint64_t allocs[NSITES];
	int64_t sum_peak;
	uint32_t calls;
};

static void
collect(void *arg, uint32_t id, const tfa_site_t *s)
{
	struct seen *c = arg;

	ck_assert_uint_lt(id, NSITES);
	c->peak_bytes[id] = s->peak_bytes;
	c->in_use[id] = s->in_use_bytes;
	c->allocs[id] = s->allocs;
	c->sum_peak += s->peak_bytes;
	c->calls++;
}

START_TEST(test_sites_peak_breakdown_by_hand)
{
	static struct seen c;

	model_alloc(1, 100);
	model_alloc(2, 50);
	model_free(1, 100);
	model_alloc(3, 20);
	memset(&c, 0, sizeof(c));
	tfa_sites_foreach(&sites, peak, in_use, collect, &c);
	ck_assert_uint_eq(c.calls, 3);
	ck_assert_int_eq(c.peak_bytes[1], 100);
	ck_assert_int_eq(c.peak_bytes[2], 50);
	ck_assert_int_eq(c.peak_bytes[3], 0);
	ck_assert_int_eq(c.in_use[1], 0);
	ck_assert_int_eq(c.in_use[3], 20);
	ck_assert_int_eq(c.sum_peak, 150);

	/* A new peak, now: the figures of now. */
	model_alloc(2000, 200);
	memset(&c, 0, sizeof(c));
	tfa_sites_foreach(&sites, peak, in_use, collect, &c);
	ck_assert_int_eq(c.sum_peak, 270);
	ck_assert_int_eq(c.peak_bytes[2000], 200);
	ck_assert_int_eq(c.peak_bytes[1], 0);

	model_free(2000, 200);
	model_free(2, 50);
	memset(&c, 0, sizeof(c));
	tfa_sites_foreach(&sites, peak, in_use, collect, &c);
	ck_assert_int_eq(c.sum_peak, 270);
	ck_assert_int_eq(c.peak_bytes[2000], 200);
	ck_assert_int_eq(c.peak_bytes[2], 50);
	ck_assert_int_eq(c.peak_bytes[3], 20);
	ck_assert_uint_eq(c.allocs[2], 1);
	ck_assert_uint_eq(c.allocs[2000], 1);
	ck_assert_uint_gt(tfa_sites_bytes(&sites), 0);
}
END_TEST

START_TEST(test_sites_model_random)
{
	enum { BLOCKS = 5000, OPS = 300000 };
	static uint32_t blk_site[BLOCKS];
	static int64_t blk_bytes[BLOCKS];
	static int64_t model_now[NSITES], model_at_peak[NSITES];
	static struct seen c;
	uint64_t rng = 12345;

	for (uint32_t op = 0; op < OPS; op++) {
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		uint32_t b = (uint32_t)(rng >> 33) % BLOCKS;
		if (blk_bytes[b] != 0) {
			model_free(blk_site[b], blk_bytes[b]);
			model_now[blk_site[b]] -= blk_bytes[b];
			blk_bytes[b] = 0;
		} else {
			/* Phases: the heap grows for a while, then shrinks. */
			uint32_t site = (uint32_t)(rng >> 20) % NSITES;
			int64_t bytes = 1 + (int64_t)((rng >> 40) % 4096);
			int64_t before = peak;
			model_alloc(site, bytes);
			model_now[site] += bytes;
			blk_site[b] = site;
			blk_bytes[b] = bytes;
			if (peak > before)
				memcpy(model_at_peak, model_now, sizeof(model_now));
		}
		if (op % 50000 == 49999) {
			memset(&c, 0, sizeof(c));
			tfa_sites_foreach(&sites, peak, in_use, collect, &c);
			ck_assert_int_eq(c.sum_peak, peak);
			for (uint32_t s = 0; s < NSITES; s++) {
				if (c.peak_bytes[s] != model_at_peak[s])
					ck_abort_msg("op %u site %u: peak share %lld, model %lld", op, s,
						     (long long)c.peak_bytes[s],
						     (long long)model_at_peak[s]);
				ck_assert_int_eq(c.in_use[s], model_now[s]);
			}
		}
	}
}
END_TEST

static Suite *
sites_suite(void)
{
	Suite *s = suite_create("sites");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_sites_peak_breakdown_by_hand);
	tcase_add_test(tc, test_sites_model_random);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(sites_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
