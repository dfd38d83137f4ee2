/* SPDX-License-Identifier: MIT */
/*
 * Folded stacks (`tfalloc report --format folded`), the input of
 * flamegraph.pl, inferno, speedscope and most flame-graph tools: one line per
 * stack, its frames outermost first separated by ';', a space, and an
 * integer value.
 *
 * Also the pieces that folded stacks and pprof (tools/pprof.h) share: the
 * figures of a profile's sites as whole-run estimates, with the allocations
 * that have no stack, and the frames of an address.
 */
#ifndef TFA_TOOLS_FOLDED_H
#define TFA_TOOLS_FOLDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/profile_read.h"
#include "tools/stacks.h"
#include "tools/symbolize.h"

/* The figure a folded line carries (--by). */
enum tfa_folded_by_e {
	TFA_FOLDED_PEAK = 0, /* bytes live at the peak (bytes_at_peak): the default */
	TFA_FOLDED_LEAKED,   /* bytes in use at exit (complete profiles only) */
	TFA_FOLDED_IN_USE,   /* bytes in use when the profile was written */
	TFA_FOLDED_TOTAL,    /* bytes allocated over the run */
	TFA_FOLDED_COUNT,    /* allocations */
};

/* "peak", "leaked", "in-use", "total", "count" -> *by; -1 for anything else. */
int tfa_folded_by_parse(const char *name, enum tfa_folded_by_e *by);

/*
 * Writes the folded stacks of profiles[0..n) to f.  The first frame of each
 * line is the process, "COMM[PID]" (so that processes never merge), then
 * "[DEVICE]" for a device other than cpu, then the call stack, outermost
 * first, each inlined call a frame of its own; frames are named by
 * tfa_frame_name.  A ';' in a name becomes ':', and control characters
 * (newlines) become spaces.  Lines with equal stacks are merged, lines with
 * value 0 left out; lines are sorted.  Allocations without a stack appear
 * under the frame "[no stack]".  Values of sampled profiles are the
 * estimates of tfa_site_estimate, rounded.
 *
 * Returns 0, or -1 with a one-line message in err when something was left
 * out (a symbolizer could not be made: those frames are named by address; out
 * of memory): what could be written was written.
 */
int tfa_folded_write(FILE *f, const tfa_profile_t *const *profiles, size_t n,
                     enum tfa_folded_by_e by, char *err, size_t errlen);

/* --------------------------------------------------------------------------
 * Shared with tools/pprof.c
 */

/* The frame name of allocations that have no stack. */
#define TFA_NO_STACK_NAME "[no stack]"

/* One site's figures, rounded estimates for the whole run. */
typedef struct tfa_site_figures_s {
	const char *device;                /* the profile's string */
	uint32_t stack_id;                 /* 0: the allocations without a stack */
	uint64_t v[TFA_SITEF_FIELD_COUNT]; /* by enum tfa_prof_site_field_e */
} tfa_site_figures_t;

/*
 * The figures of p's sites (tfa_site_estimate, rounded to integers) and, for
 * a profile whose stacks were not sampled, one entry with stack_id 0 per
 * device whose own figures exceed the sum of its sites' (the allocations
 * recorded without a stack: before the shim was ready, or every allocation
 * when stacks were off), so that the figures add up to the device's.  Entries
 * whose figures are all 0 are left out.  Returns 0 and a malloc'd array in
 * *out (free it), or -1 when out of memory.
 */
int tfa_site_figures(const tfa_profile_t *p, tfa_site_figures_t **out, size_t *n);


#endif /* TFA_TOOLS_FOLDED_H */
