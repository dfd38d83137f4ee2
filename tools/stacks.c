/* SPDX-License-Identifier: MIT */
#include "tools/stacks.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tfa_sym_module_t
sym_module(const tfa_profile_module_t *m)
{
	return (tfa_sym_module_t){
		.path = m->path,
		.bias = m->bias,
		.start = m->start,
		.end = m->end,
		.build_id = m->build_id,
		.build_id_len = m->build_id_len,
	};
}

tfa_symbolizer_t *
tfa_profile_symbolizer(const tfa_profile_t *p, char *err, size_t errlen)
{
	tfa_sym_module_t *mods = calloc(p->nmodules != 0 ? p->nmodules : 1, sizeof(*mods));

	if (mods == NULL) {
		if (errlen > 0)
			snprintf(err, errlen, "%s: out of memory", p->path);
		return NULL;
	}
	for (size_t i = 0; i < p->nmodules; i++)
		mods[i] = sym_module(&p->modules[i]);
	tfa_symbolizer_t *s = tfa_symbolizer_new(mods, p->nmodules, NULL, err, errlen);
	free(mods);
	return s;
}

struct tfa_profile_symbols_s {
	const tfa_profile_t *p;
	tfa_symbolizer_t *all;
	bool *shadowed;          /* by module index: a later module overlaps it */
	tfa_symbolizer_t **own;  /* by module index: the symbolizer of a shadowed module */
	bool *own_failed;
};

/* The same object loaded again at the same place: one file, no shadow. */
static bool
same_module(const tfa_profile_module_t *a, const tfa_profile_module_t *b)
{
	return a->bias == b->bias && strcmp(a->path, b->path) == 0
	       && a->build_id_len == b->build_id_len
	       && (a->build_id_len == 0 || memcmp(a->build_id, b->build_id, a->build_id_len) == 0);
}

tfa_profile_symbols_t *
tfa_profile_symbols_new(const tfa_profile_t *p, char *err, size_t errlen)
{
	tfa_profile_symbols_t *ps = calloc(1, sizeof(*ps));
	size_t n = p->nmodules != 0 ? p->nmodules : 1;

	if (ps == NULL || (ps->shadowed = calloc(n, sizeof(bool))) == NULL
	    || (ps->own = calloc(n, sizeof(*ps->own))) == NULL
	    || (ps->own_failed = calloc(n, sizeof(bool))) == NULL) {
		tfa_profile_symbols_free(ps);
		if (errlen > 0)
			snprintf(err, errlen, "%s: out of memory", p->path);
		return NULL;
	}
	ps->p = p;
	for (size_t i = 0; i < p->nmodules; i++) {
		const tfa_profile_module_t *a = &p->modules[i];
		for (size_t j = i + 1; j < p->nmodules && !ps->shadowed[i]; j++) {
			const tfa_profile_module_t *b = &p->modules[j];
			ps->shadowed[i] = a->start < b->end && b->start < a->end && !same_module(a, b);
		}
	}
	ps->all = tfa_profile_symbolizer(p, err, errlen);
	if (ps->all == NULL) {
		tfa_profile_symbols_free(ps);
		return NULL;
	}
	return ps;
}

int
tfa_profile_symbolize(tfa_profile_symbols_t *ps, uint32_t stack_id, uint64_t pc,
                      const tfa_sym_frame_t **frames, size_t *nframes)
{
	const tfa_profile_module_t *m = tfa_profile_module_at(ps->p, stack_id, pc);
	size_t i = m != NULL ? (size_t)(m - ps->p->modules) : 0;

	if (m != NULL && ps->shadowed[i] && !ps->own_failed[i]) {
		if (ps->own[i] == NULL) {
			tfa_sym_module_t one = sym_module(m);
			ps->own[i] = tfa_symbolizer_new(&one, 1, NULL, NULL, 0);
			ps->own_failed[i] = ps->own[i] == NULL;
		}
		if (ps->own[i] != NULL)
			return tfa_symbolize(ps->own[i], pc, frames, nframes);
	}
	return tfa_symbolize(ps->all, pc, frames, nframes);
}

void
tfa_profile_symbols_free(tfa_profile_symbols_t *ps)
{
	if (ps == NULL)
		return;
	for (size_t i = 0; ps->own != NULL && ps->p != NULL && i < ps->p->nmodules; i++)
		tfa_symbolizer_free(ps->own[i]);
	tfa_symbolizer_free(ps->all);
	free(ps->shadowed);
	free(ps->own);
	free(ps->own_failed);
	free(ps);
}

const char *
tfa_base_name(const char *path)
{
	if (path == NULL)
		return "";
	const char *slash = strrchr(path, '/');
	return slash != NULL ? slash + 1 : path;
}

const char *
tfa_frame_name(const tfa_sym_frame_t *f, char *buf, size_t size)
{
	if (size == 0)
		return buf;
	if (f->function != NULL)
		snprintf(buf, size, "%s", f->function);
	else if (f->module != NULL && f->module[0] != '\0')
		snprintf(buf, size, "%s+0x%" PRIx64, tfa_base_name(f->module), f->module_offset);
	else
		snprintf(buf, size, "0x%" PRIx64, f->pc);
	return buf;
}

/* 1 / the probability that an allocation of mean size `mean` was sampled. */
static double
sample_scale(uint64_t sample_bytes, double mean)
{
	if (sample_bytes == 0 || mean <= 0)
		return 1.0;
	double p = -expm1(-mean / (double)sample_bytes);
	return p > 0 ? 1.0 / p : 1.0;
}

void
tfa_site_estimate(const tfa_profile_t *p, const tfa_profile_site_t *site,
                  double out[TFA_SITEF_FIELD_COUNT])
{
	const uint64_t *f = site->f;

	for (size_t i = 0; i < TFA_SITEF_FIELD_COUNT; i++)
		out[i] = (double)f[i];
	if (p->sample_bytes == 0)
		return;
	double all = sample_scale(p->sample_bytes, f[TFA_SITEF_NUM_ALLOCS] != 0
		? (double)f[TFA_SITEF_TOTAL_BYTES] / (double)f[TFA_SITEF_NUM_ALLOCS] : 0);
	double live = f[TFA_SITEF_BLOCKS_IN_USE] != 0
		? sample_scale(p->sample_bytes, (double)f[TFA_SITEF_BYTES_IN_USE]
			       / (double)f[TFA_SITEF_BLOCKS_IN_USE])
		: all;
	out[TFA_SITEF_NUM_ALLOCS] *= all;
	out[TFA_SITEF_TOTAL_BYTES] *= all;
	out[TFA_SITEF_BYTES_AT_PEAK] *= all;
	out[TFA_SITEF_BYTES_IN_USE] *= live;
	out[TFA_SITEF_BLOCKS_IN_USE] *= live;
}
