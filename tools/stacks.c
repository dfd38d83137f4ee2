/* SPDX-License-Identifier: MIT */
#include "tools/stacks.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tfa_symbolizer_t *
tfa_profile_symbolizer(const tfa_profile_t *p, char *err, size_t errlen)
{
	tfa_sym_module_t *mods = calloc(p->nmodules != 0 ? p->nmodules : 1, sizeof(*mods));

	if (mods == NULL) {
		if (errlen > 0)
			snprintf(err, errlen, "%s: out of memory", p->path);
		return NULL;
	}
	for (size_t i = 0; i < p->nmodules; i++) {
		const tfa_profile_module_t *m = &p->modules[i];
		mods[i] = (tfa_sym_module_t){
			.path = m->path,
			.bias = m->bias,
			.start = m->start,
			.end = m->end,
			.build_id = m->build_id,
			.build_id_len = m->build_id_len,
		};
	}
	tfa_symbolizer_t *s = tfa_symbolizer_new(mods, p->nmodules, NULL, err, errlen);
	free(mods);
	return s;
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
