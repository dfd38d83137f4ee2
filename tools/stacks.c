/* SPDX-License-Identifier: MIT */
#include "tools/stacks.h"

#include <errno.h>
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

/*
 * One module file, symbolized once for every profile that mapped it: the
 * answers do not depend on where a process had it, only on the offset.
 */
struct sym_cache_entry {
	char *path;
	uint8_t *build_id;
	uint32_t build_id_len;
	uint64_t bias; /* where the symbolizer has it: the first profile's bias */
	uint64_t size; /* of the mapped range */
	tfa_symbolizer_t *sym; /* NULL: it could not be made */
};

struct tfa_sym_cache_s {
	struct sym_cache_entry *entries;
	size_t n, cap;
};

tfa_sym_cache_t *
tfa_sym_cache_new(void)
{
	return calloc(1, sizeof(tfa_sym_cache_t));
}

void
tfa_sym_cache_free(tfa_sym_cache_t *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->n; i++) {
		tfa_symbolizer_free(c->entries[i].sym);
		free(c->entries[i].path);
		free(c->entries[i].build_id);
	}
	free(c->entries);
	free(c);
}

size_t
tfa_sym_cache_problems(const tfa_sym_cache_t *c, void (*fn)(void *arg, const char *why), void *arg)
{
	size_t n = 0;

	for (size_t i = 0; c != NULL && i < c->n; i++) {
		const char *why = NULL;
		const struct sym_cache_entry *e = &c->entries[i];
		if (e->sym == NULL || e->path[0] == '\0' || e->path[0] == '[')
			continue;
		uint32_t flags = tfa_symbolizer_module_state(e->sym, 0, &why);
		if (flags == 0 || why == NULL || why[0] == '\0')
			continue;
		fn(arg, why);
		n++;
	}
	return n;
}

/*
 * The entry of m's file: same path and build id (a file without one is
 * matched by path and mapped size, which a rebuild seldom keeps).  NULL when
 * memory ran out.
 */
static struct sym_cache_entry *
sym_cache_get(tfa_sym_cache_t *c, const tfa_profile_module_t *m)
{
	for (size_t i = 0; i < c->n; i++) {
		struct sym_cache_entry *e = &c->entries[i];
		if (e->build_id_len == m->build_id_len && strcmp(e->path, m->path) == 0
		    && (m->build_id_len == 0 ? e->size == m->end - m->start
		                             : memcmp(e->build_id, m->build_id, m->build_id_len) == 0))
			return e;
	}
	if (c->n == c->cap) {
		size_t ncap = c->cap == 0 ? 16 : c->cap * 2;
		void *arr = realloc(c->entries, ncap * sizeof(*c->entries));
		if (arr == NULL)
			return NULL;
		c->entries = arr;
		c->cap = ncap;
	}
	struct sym_cache_entry *e = &c->entries[c->n];
	memset(e, 0, sizeof(*e));
	e->path = strdup(m->path);
	e->build_id = m->build_id_len != 0 ? malloc(m->build_id_len) : NULL;
	if (e->path == NULL || (m->build_id_len != 0 && e->build_id == NULL)) {
		free(e->path);
		free(e->build_id);
		return NULL;
	}
	if (m->build_id_len != 0)
		memcpy(e->build_id, m->build_id, m->build_id_len);
	e->build_id_len = m->build_id_len;
	e->bias = m->bias;
	e->size = m->end - m->start;
	tfa_sym_module_t one = sym_module(m);
	e->sym = tfa_symbolizer_new(&one, 1, NULL, NULL, 0);
	c->n++;
	return e;
}

struct tfa_profile_symbols_s {
	const tfa_profile_t *p;
	tfa_sym_cache_t *cache;
	bool own_cache;
	tfa_sym_frame_t *buf; /* frames moved to this profile's addresses */
	size_t buf_cap;
	tfa_sym_frame_t raw;  /* an address no module or file explains */
};

tfa_profile_symbols_t *
tfa_profile_symbols_new(const tfa_profile_t *p, tfa_sym_cache_t *cache, char *err, size_t errlen)
{
	tfa_profile_symbols_t *ps = calloc(1, sizeof(*ps));

	if (ps != NULL && cache == NULL) {
		cache = tfa_sym_cache_new();
		ps->own_cache = true;
	}
	if (ps == NULL || cache == NULL) {
		free(ps);
		if (errlen > 0)
			snprintf(err, errlen, "%s: out of memory", p->path);
		return NULL;
	}
	ps->p = p;
	ps->cache = cache;
	return ps;
}

int
tfa_profile_symbolize(tfa_profile_symbols_t *ps, uint32_t stack_id, uint64_t pc,
                      const tfa_sym_frame_t **frames, size_t *nframes)
{
	const tfa_profile_module_t *m = tfa_profile_module_at(ps->p, stack_id, pc);
	struct sym_cache_entry *e = m != NULL ? sym_cache_get(ps->cache, m) : NULL;
	const tfa_sym_frame_t *got;
	size_t n;

	if (e == NULL || e->sym == NULL) {
		ps->raw = (tfa_sym_frame_t){ .pc = pc, .flags = TFA_SYM_NO_MODULE };
		if (m != NULL) {
			ps->raw.module = m->path;
			ps->raw.module_offset = pc - m->bias;
			ps->raw.flags = TFA_SYM_NO_FILE;
		}
		*frames = &ps->raw;
		*nframes = 1;
		return 0;
	}
	int r = tfa_symbolize(e->sym, pc - m->bias + e->bias, &got, &n);
	if (r != 0 || e->bias == m->bias) {
		*frames = got;
		*nframes = n;
		return r;
	}
	if (n > ps->buf_cap) {
		void *arr = realloc(ps->buf, n * sizeof(*ps->buf));
		if (arr == NULL)
			return -ENOMEM;
		ps->buf = arr;
		ps->buf_cap = n;
	}
	for (size_t i = 0; i < n; i++) {
		ps->buf[i] = got[i];
		ps->buf[i].pc = pc;
	}
	*frames = ps->buf;
	*nframes = n;
	return 0;
}

void
tfa_profile_symbols_free(tfa_profile_symbols_t *ps)
{
	if (ps == NULL)
		return;
	if (ps->own_cache)
		tfa_sym_cache_free(ps->cache);
	free(ps->buf);
	free(ps);
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

void
tfa_pc_frames(tfa_profile_symbols_t *s, const tfa_profile_t *p, uint32_t stack_id, uint64_t pc,
              tfa_sym_frame_t *fallback, const tfa_sym_frame_t **frames, size_t *nframes)
{
	const tfa_profile_module_t *m;

	if (s != NULL && tfa_profile_symbolize(s, stack_id, pc, frames, nframes) == 0 && *nframes > 0)
		return;
	memset(fallback, 0, sizeof(*fallback));
	fallback->pc = pc;
	m = tfa_profile_module_at(p, stack_id, pc);
	if (m != NULL) {
		fallback->module = m->path;
		fallback->module_offset = pc - m->bias;
		fallback->flags = TFA_SYM_NO_FILE;
	} else {
		fallback->flags = TFA_SYM_NO_MODULE;
	}
	*frames = fallback;
	*nframes = 1;
}

bool
tfa_stack_frames(tfa_profile_symbols_t *s, const tfa_profile_t *p, uint32_t stack_id,
                 tfa_frame_fn fn, void *ctx)
{
	uint32_t depth;
	const uint64_t *pcs = stack_id != 0 ? tfa_profile_stack(p, stack_id, &depth) : NULL;
	unsigned index = 0;

	if (pcs == NULL)
		return false;
	for (uint32_t i = 0; i < depth; i++) {
		tfa_sym_frame_t fallback;
		const tfa_sym_frame_t *frames;
		size_t n;

		tfa_pc_frames(s, p, stack_id, pcs[i], &fallback, &frames, &n);
		for (size_t k = 0; k < n; k++)
			fn(ctx, index++, &frames[k]);
	}
	return true;
}
