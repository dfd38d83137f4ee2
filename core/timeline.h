/* SPDX-License-Identifier: MIT */
/*
 * Memory over time: bytes in use, allocated bytes and the resident set,
 * sampled while the program runs, in a fixed array however long the run.
 *
 * Points come at least `interval` apart.  When the array is full, each pair
 * of neighbours becomes one (the one with more bytes in use, so the highs
 * stay) and the interval doubles: a run of any length keeps between half and
 * all of TFA_TIMELINE_MAX points, evenly spread.  The process's peak is put
 * on the series too: when the peak grew since the last point, a point with
 * the peak's figure (flag TFA_TL_PEAK) goes between them, its time known to
 * one interval.
 *
 * No allocation, no lock held across foreign code: the owner serialises
 * calls (the shim samples under a trylock, so at most one thread samples and
 * the others go on).
 */
#ifndef TFA_CORE_TIMELINE_H
#define TFA_CORE_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TFA_TIMELINE_MAX 2048u

enum tfa_timeline_flag_e {
	TFA_TL_PEAK = 1u << 0, /* the process's peak, reached between this point's neighbours */
};

typedef struct tfa_timeline_point_s {
	uint64_t t_ns; /* since the series started */
	uint64_t bytes_in_use;
	uint64_t allocated_bytes;
	uint64_t rss_bytes;
	uint32_t flags; /* enum tfa_timeline_flag_e */
} tfa_timeline_point_t;

typedef struct tfa_timeline_s {
	uint64_t start_ns;    /* CLOCK_MONOTONIC when the series started */
	uint64_t interval_ns; /* the least time between two points now */
	uint64_t last_ns;     /* of the last point, since start; UINT64_MAX: none yet */
	uint64_t last_peak;   /* the peak figure when the last point was taken */
	size_t n;
	tfa_timeline_point_t pts[TFA_TIMELINE_MAX];
} tfa_timeline_t;

/* Starts an empty series at now_ns (CLOCK_MONOTONIC) with points interval_ns apart at least. */
void tfa_timeline_init(tfa_timeline_t *tl, uint64_t now_ns, uint64_t interval_ns);

/* Whether a point taken at now_ns would be kept (the interval has passed). */
bool tfa_timeline_due(const tfa_timeline_t *tl, uint64_t now_ns);

/*
 * Adds the figures of now_ns; peak: the process's peak bytes in use so far,
 * peak_allocated its allocated bytes then.  force: add even when the
 * interval has not passed (the last point, written with the profile).
 */
void tfa_timeline_add(tfa_timeline_t *tl, uint64_t now_ns, uint64_t bytes_in_use,
		      uint64_t allocated_bytes, uint64_t rss_bytes, uint64_t peak,
		      uint64_t peak_allocated, bool force);

/* The resident set size of this process, from /proc/self/statm; 0 when unknown. */
uint64_t tfa_rss_bytes(void);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t tfa_monotonic_ns(void);

#endif /* TFA_CORE_TIMELINE_H */
