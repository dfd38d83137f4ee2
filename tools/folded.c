/* SPDX-License-Identifier: MIT */
#include "tools/folded.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/stacks.h"

/* --------------------------------------------------------------------------
 * Shared with pprof
 */

int
tfa_folded_by_parse(const char *name, enum tfa_folded_by_e *by)
{
	static const struct {
		const char *name;
		enum tfa_folded_by_e by;
	} names[] = {
		{ "peak", TFA_FOLDED_PEAK },     { "leaked", TFA_FOLDED_LEAKED },
		{ "in-use", TFA_FOLDED_IN_USE }, { "total", TFA_FOLDED_TOTAL },
		{ "count", TFA_FOLDED_COUNT },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(name, names[i].name) == 0) {
			*by = names[i].by;
			return 0;
		}
	}
	return -1;
}

static uint64_t
round_u64(double x)
{
	if (!(x > 0))
		return 0;
	if (x >= 18446744073709549568.0) /* the largest double below 2^64 */
		return UINT64_MAX;
	return (uint64_t)(x + 0.5);
}

static uint64_t
sub_sat(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

static bool
figures_zero(const uint64_t v[TFA_SITEF_FIELD_COUNT])
{
	for (size_t k = 0; k < TFA_SITEF_FIELD_COUNT; k++)
		if (v[k] != 0)
			return false;
	return true;
}

int
tfa_site_figures(const tfa_profile_t *p, tfa_site_figures_t **out, size_t *n)
{
	tfa_site_figures_t *a = calloc(p->nsites + p->ndevices + 1, sizeof(*a));
	size_t k = 0;

	*out = NULL;
	*n = 0;
	if (a == NULL)
		return -1;
	for (size_t i = 0; i < p->nsites; i++) {
		const tfa_profile_site_t *s = &p->sites[i];
		double est[TFA_SITEF_FIELD_COUNT];

		tfa_site_estimate(p, s, est);
		a[k].device = s->device;
		a[k].stack_id = s->stack_id;
		for (size_t f = 0; f < TFA_SITEF_FIELD_COUNT; f++)
			a[k].v[f] = round_u64(est[f]);
		if (!figures_zero(a[k].v))
			k++;
	}
	/*
	 * Without sampling every allocation with a stack is in a site: what the
	 * device counted beyond the sites had no stack.  With sampling the
	 * estimates already stand for every allocation.
	 */
	if (p->sample_bytes == 0) {
		for (size_t d = 0; d < p->ndevices; d++) {
			const tfa_profile_device_t *dev = &p->devices[d];
			uint64_t sum[TFA_SITEF_FIELD_COUNT] = { 0 };
			tfa_site_figures_t *r = &a[k];

			for (size_t i = 0; i < p->nsites; i++) {
				if (strcmp(p->sites[i].device, dev->name) != 0)
					continue;
				for (size_t f = 0; f < TFA_SITEF_FIELD_COUNT; f++)
					sum[f] += p->sites[i].f[f];
			}
			r->device = dev->name;
			r->stack_id = 0;
			r->v[TFA_SITEF_NUM_ALLOCS] =
			        sub_sat(dev->f[TFA_DEV_NUM_ALLOCS], sum[TFA_SITEF_NUM_ALLOCS]);
			r->v[TFA_SITEF_TOTAL_BYTES] =
			        sub_sat(dev->f[TFA_DEV_TOTAL_BYTES], sum[TFA_SITEF_TOTAL_BYTES]);
			r->v[TFA_SITEF_BYTES_IN_USE] =
			        sub_sat(dev->f[TFA_DEV_BYTES_IN_USE], sum[TFA_SITEF_BYTES_IN_USE]);
			r->v[TFA_SITEF_BLOCKS_IN_USE] = sub_sat(
			        sub_sat(dev->f[TFA_DEV_NUM_ALLOCS], dev->f[TFA_DEV_NUM_FREES]),
			        sum[TFA_SITEF_BLOCKS_IN_USE]);
			r->v[TFA_SITEF_BYTES_AT_PEAK] = sub_sat(dev->f[TFA_DEV_PEAK_BYTES_IN_USE],
			                                        sum[TFA_SITEF_BYTES_AT_PEAK]);
			if (!figures_zero(r->v))
				k++;
		}
	}
	*out = a;
	*n = k;
	return 0;
}


/* --------------------------------------------------------------------------
 * Folded stacks
 */

struct fbuf {
	char *s;
	size_t len, cap;
	bool oom;
};

static void
fbuf_add(struct fbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t ncap = b->cap == 0 ? 256 : b->cap;
		char *p;

		while (b->len + n + 1 > ncap)
			ncap *= 2;
		p = realloc(b->s, ncap);
		if (p == NULL) {
			b->oom = true;
			return;
		}
		b->s = p;
		b->cap = ncap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

/* A frame: ';' would split it, a newline would end the line. */
static void
fbuf_frame(struct fbuf *b, const char *name)
{
	size_t start = b->len;

	if (b->len > 0) {
		fbuf_add(b, ";", 1);
		start++;
	}
	fbuf_add(b, name, strlen(name));
	if (b->oom)
		return;
	for (char *c = b->s + start; *c != '\0'; c++) {
		if (*c == ';')
			*c = ':';
		else if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = ' ';
	}
}

struct folded_line {
	char *stack;
	uint64_t value;
};

static int
folded_line_cmp(const void *a, const void *b)
{
	return strcmp(((const struct folded_line *)a)->stack,
	              ((const struct folded_line *)b)->stack);
}

static uint64_t
folded_value(const tfa_profile_t *p, const tfa_site_figures_t *s, enum tfa_folded_by_e by)
{
	switch (by) {
	case TFA_FOLDED_PEAK:
		return s->v[TFA_SITEF_BYTES_AT_PEAK];
	case TFA_FOLDED_LEAKED:
		return p->complete ? s->v[TFA_SITEF_BYTES_IN_USE] : 0;
	case TFA_FOLDED_IN_USE:
		return s->v[TFA_SITEF_BYTES_IN_USE];
	case TFA_FOLDED_TOTAL:
		return s->v[TFA_SITEF_TOTAL_BYTES];
	case TFA_FOLDED_COUNT:
		return s->v[TFA_SITEF_NUM_ALLOCS];
	}
	return 0;
}

/* The stack of one site: process, device, frames outermost first. */
static void
folded_stack(struct fbuf *b, tfa_profile_symbols_t *sym, const tfa_profile_t *p,
             const tfa_site_figures_t *s)
{
	char name[4096];
	uint32_t depth = 0;
	const uint64_t *pcs = NULL;

	b->len = 0;
	snprintf(name, sizeof(name), "%s[%" PRIu32 "]",
	         p->comm[0] != '\0' ? p->comm : tfa_base_name(p->exe), p->pid);
	fbuf_frame(b, name);
	if (strcmp(s->device, "cpu") != 0) {
		snprintf(name, sizeof(name), "[%s]", s->device);
		fbuf_frame(b, name);
	}
	if (s->stack_id != 0)
		pcs = tfa_profile_stack(p, s->stack_id, &depth);
	if (pcs == NULL || depth == 0) {
		fbuf_frame(b, TFA_NO_STACK_NAME);
		return;
	}
	for (uint32_t i = depth; i-- > 0;) {
		const tfa_sym_frame_t *frames;
		tfa_sym_frame_t fallback;
		size_t nframes;

		tfa_pc_frames(sym, p, s->stack_id, pcs[i], &fallback, &frames, &nframes);
		for (size_t j = nframes; j-- > 0;)
			fbuf_frame(b, tfa_frame_name(&frames[j], name, sizeof(name)));
	}
}

int
tfa_folded_write(FILE *f, const tfa_profile_t *const *profiles, size_t n, enum tfa_folded_by_e by,
                 char *err, size_t errlen)
{
	struct folded_line *lines = NULL;
	size_t nlines = 0, cap = 0;
	struct fbuf b = { 0 };
	int rc = 0;
	/* One read of each library's symbols for every profile. */
	tfa_sym_cache_t *cache = tfa_sym_cache_new();

	if (errlen > 0)
		err[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const tfa_profile_t *p = profiles[i];
		tfa_site_figures_t *figs;
		tfa_profile_symbols_t *sym = NULL;
		size_t nfigs;

		if (tfa_site_figures(p, &figs, &nfigs) < 0) {
			b.oom = true;
			break;
		}
		if (p->nsites > 0) {
			char serr[512];

			sym = tfa_profile_symbols_new(p, cache, serr, sizeof(serr));
			if (sym == NULL) {
				if (rc == 0 && errlen > 0)
					snprintf(err, errlen, "%s (frames named by address)", serr);
				rc = -1;
			}
		}
		for (size_t k = 0; k < nfigs && !b.oom; k++) {
			uint64_t v = folded_value(p, &figs[k], by);

			if (v == 0)
				continue;
			folded_stack(&b, sym, p, &figs[k]);
			if (b.oom)
				break;
			if (nlines == cap) {
				size_t ncap = cap == 0 ? 64 : cap * 2;
				struct folded_line *nl = realloc(lines, ncap * sizeof(*lines));

				if (nl == NULL) {
					b.oom = true;
					break;
				}
				lines = nl;
				cap = ncap;
			}
			lines[nlines].stack = strdup(b.s);
			if (lines[nlines].stack == NULL) {
				b.oom = true;
				break;
			}
			lines[nlines++].value = v;
		}
		tfa_profile_symbols_free(sym);
		free(figs);
	}
	if (nlines > 0)
		qsort(lines, nlines, sizeof(*lines), folded_line_cmp);
	for (size_t i = 0; i < nlines;) {
		uint64_t v = lines[i].value;
		size_t j = i + 1;

		for (; j < nlines && strcmp(lines[j].stack, lines[i].stack) == 0; j++)
			v = v + lines[j].value < v ? UINT64_MAX : v + lines[j].value;
		fprintf(f, "%s %" PRIu64 "\n", lines[i].stack, v);
		i = j;
	}
	for (size_t i = 0; i < nlines; i++)
		free(lines[i].stack);
	free(lines);
	free(b.s);
	tfa_sym_cache_free(cache);
	if (b.oom) {
		if (errlen > 0)
			snprintf(err, errlen, "out of memory: folded stacks incomplete");
		rc = -1;
	}
	return rc;
}
