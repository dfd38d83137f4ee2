/* SPDX-License-Identifier: MIT */
#include "core/timeline.h"

#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t
tfa_monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void
tfa_timeline_init(tfa_timeline_t *tl, uint64_t now_ns, uint64_t interval_ns)
{
	tl->start_ns = now_ns;
	tl->interval_ns = interval_ns != 0 ? interval_ns : 1;
	tl->last_ns = UINT64_MAX;
	tl->last_peak = 0;
	tl->n = 0;
}

bool
tfa_timeline_due(const tfa_timeline_t *tl, uint64_t now_ns)
{
	uint64_t t = now_ns > tl->start_ns ? now_ns - tl->start_ns : 0;

	return tl->last_ns == UINT64_MAX || t - tl->last_ns >= tl->interval_ns || t < tl->last_ns;
}

/* Halves the series: of each pair of neighbours the one with more bytes in use stays. */
static void
compact(tfa_timeline_t *tl)
{
	size_t out = 0;

	for (size_t i = 0; i < tl->n; i += 2) {
		const tfa_timeline_point_t *a = &tl->pts[i];
		const tfa_timeline_point_t *keep = a;
		if (i + 1 < tl->n && tl->pts[i + 1].bytes_in_use > a->bytes_in_use)
			keep = &tl->pts[i + 1];
		tl->pts[out++] = *keep;
	}
	tl->n = out;
	if (tl->interval_ns < UINT64_MAX / 2)
		tl->interval_ns *= 2;
}

static void
push(tfa_timeline_t *tl, const tfa_timeline_point_t *p)
{
	if (tl->n == TFA_TIMELINE_MAX)
		compact(tl);
	tl->pts[tl->n++] = *p;
}

void
tfa_timeline_add(tfa_timeline_t *tl, uint64_t now_ns, uint64_t bytes_in_use,
		 uint64_t allocated_bytes, uint64_t rss_bytes, uint64_t peak, uint64_t peak_allocated,
		 bool force)
{
	uint64_t t = now_ns > tl->start_ns ? now_ns - tl->start_ns : 0;

	if (!force && !tfa_timeline_due(tl, now_ns))
		return;
	if (tl->last_ns != UINT64_MAX && t < tl->last_ns)
		t = tl->last_ns; /* never back in time */
	if (peak > tl->last_peak && peak > bytes_in_use) {
		uint64_t before = tl->last_ns == UINT64_MAX ? 0 : tl->last_ns;
		tfa_timeline_point_t pk = {
			.t_ns = before + (t - before) / 2,
			.bytes_in_use = peak,
			.allocated_bytes = peak_allocated,
			.rss_bytes = rss_bytes,
			.flags = TFA_TL_PEAK,
		};
		push(tl, &pk);
	}
	tfa_timeline_point_t p = {
		.t_ns = t,
		.bytes_in_use = bytes_in_use,
		.allocated_bytes = allocated_bytes,
		.rss_bytes = rss_bytes,
		.flags = peak == bytes_in_use && peak > tl->last_peak ? TFA_TL_PEAK : 0,
	};
	push(tl, &p);
	tl->last_ns = t;
	if (peak > tl->last_peak)
		tl->last_peak = peak;
}

uint64_t
tfa_rss_bytes(void)
{
	char buf[128];
	long n = tfa_read_proc_self("statm", buf, sizeof(buf));

	if (n <= 0)
		return 0;
	/* "size resident shared ...", in pages. */
	const char *s = buf;
	while (*s != '\0' && *s != ' ')
		s++;
	uint64_t pages = 0;
	for (s++; *s >= '0' && *s <= '9'; s++)
		pages = pages * 10 + (uint64_t)(*s - '0');
	long page = sysconf(_SC_PAGESIZE);
	return pages * (uint64_t)(page > 0 ? page : 4096);
}
