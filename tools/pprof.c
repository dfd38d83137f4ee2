/* SPDX-License-Identifier: MIT */
#include "tools/pprof.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tools/folded.h"
#include "tools/stacks.h"
#include "tools/symbolize.h"

/* Field numbers of profile.proto (perftools.profiles). */
enum {
	PROFILE_SAMPLE_TYPE = 1,
	PROFILE_SAMPLE = 2,
	PROFILE_MAPPING = 3,
	PROFILE_LOCATION = 4,
	PROFILE_FUNCTION = 5,
	PROFILE_STRING_TABLE = 6,
	PROFILE_TIME_NANOS = 9,
	PROFILE_DURATION_NANOS = 10,
	PROFILE_PERIOD_TYPE = 11,
	PROFILE_PERIOD = 12,
	PROFILE_COMMENT = 13,
	PROFILE_DEFAULT_SAMPLE_TYPE = 14,

	VALUE_TYPE_TYPE = 1,
	VALUE_TYPE_UNIT = 2,

	SAMPLE_LOCATION_ID = 1,
	SAMPLE_VALUE = 2,
	SAMPLE_LABEL = 3,

	LABEL_KEY = 1,
	LABEL_STR = 2,
	LABEL_NUM = 3,

	MAPPING_ID = 1,
	MAPPING_MEMORY_START = 2,
	MAPPING_MEMORY_LIMIT = 3,
	MAPPING_FILE_OFFSET = 4,
	MAPPING_FILENAME = 5,
	MAPPING_BUILD_ID = 6,
	MAPPING_HAS_FUNCTIONS = 7,
	MAPPING_HAS_FILENAMES = 8,
	MAPPING_HAS_LINE_NUMBERS = 9,
	MAPPING_HAS_INLINE_FRAMES = 10,

	LOCATION_ID = 1,
	LOCATION_MAPPING_ID = 2,
	LOCATION_ADDRESS = 3,
	LOCATION_LINE = 4,

	LINE_FUNCTION_ID = 1,
	LINE_LINE = 2,

	FUNCTION_ID = 1,
	FUNCTION_NAME = 2,
	FUNCTION_SYSTEM_NAME = 3,
	FUNCTION_FILENAME = 4,
};

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

/* Processes described in comments at most (go tool pprof prints every comment). */
#define MAX_PROCESS_COMMENTS 20

/* --------------------------------------------------------------------------
 * A protobuf encoder: a growing buffer; a message is its fields in a row.
 */

struct pb {
	uint8_t *d;
	size_t len, cap;
	bool oom;
};

static void
pb_raw(struct pb *b, const void *data, size_t n)
{
	if (b->oom || n == 0)
		return;
	if (b->len + n > b->cap) {
		size_t ncap = b->cap == 0 ? 256 : b->cap;
		uint8_t *p;

		while (b->len + n > ncap)
			ncap *= 2;
		p = realloc(b->d, ncap);
		if (p == NULL) {
			b->oom = true;
			return;
		}
		b->d = p;
		b->cap = ncap;
	}
	memcpy(b->d + b->len, data, n);
	b->len += n;
}

static void
pb_varint(struct pb *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;

	do {
		tmp[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v != 0)
			tmp[n] |= 0x80;
		n++;
	} while (v != 0);
	pb_raw(b, tmp, n);
}

static void
pb_key(struct pb *b, uint32_t field, uint32_t wire)
{
	pb_varint(b, (uint64_t)field << 3 | wire);
}

/* A varint field (uint64, int64 >= 0, bool); proto3 leaves out zeros. */
static void
pb_uint(struct pb *b, uint32_t field, uint64_t v)
{
	if (v == 0)
		return;
	pb_key(b, field, WIRE_VARINT);
	pb_varint(b, v);
}

static void
pb_bytes(struct pb *b, uint32_t field, const void *data, size_t n)
{
	pb_key(b, field, WIRE_LEN);
	pb_varint(b, n);
	pb_raw(b, data, n);
}

/* An embedded message, encoded in sub. */
static void
pb_msg(struct pb *b, uint32_t field, const struct pb *sub)
{
	if (sub->oom)
		b->oom = true;
	pb_bytes(b, field, sub->d, sub->len);
}

/* A packed repeated varint field. */
static void
pb_packed(struct pb *b, uint32_t field, const uint64_t *v, size_t n)
{
	size_t len = 0;

	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		uint64_t x = v[i];

		do {
			len++;
			x >>= 7;
		} while (x != 0);
	}
	pb_key(b, field, WIRE_LEN);
	pb_varint(b, len);
	for (size_t i = 0; i < n; i++)
		pb_varint(b, v[i]);
}

static void
pb_free(struct pb *b)
{
	free(b->d);
	memset(b, 0, sizeof(*b));
}

/* --------------------------------------------------------------------------
 * Hash maps: keys of KW 64-bit words to ids >= 1, and the string table.
 */

#define KW 4

struct hmap {
	uint64_t (*keys)[KW];
	uint64_t *vals; /* 0: empty slot */
	size_t cap, n;
};

static uint64_t
hash_words(const uint64_t *k)
{
	uint64_t h = 0x9e3779b97f4a7c15u;

	for (size_t i = 0; i < KW; i++) {
		h ^= k[i];
		h *= 0xff51afd7ed558ccdu;
		h ^= h >> 32;
	}
	return h;
}

static uint64_t *
hmap_slot(struct hmap *m, const uint64_t key[KW], bool *found)
{
	size_t i;

	*found = false;
	if (m->n + 1 > m->cap / 2) {
		size_t ncap = m->cap == 0 ? 64 : m->cap * 2;
		uint64_t(*nk)[KW] = calloc(ncap, sizeof(*nk));
		uint64_t *nv = calloc(ncap, sizeof(*nv));

		if (nk == NULL || nv == NULL) {
			free(nk);
			free(nv);
			return NULL;
		}
		for (size_t j = 0; j < m->cap; j++) {
			if (m->vals[j] == 0)
				continue;
			i = hash_words(m->keys[j]) & (ncap - 1);
			while (nv[i] != 0)
				i = (i + 1) & (ncap - 1);
			memcpy(nk[i], m->keys[j], sizeof(nk[i]));
			nv[i] = m->vals[j];
		}
		free(m->keys);
		free(m->vals);
		m->keys = nk;
		m->vals = nv;
		m->cap = ncap;
	}
	i = hash_words(key) & (m->cap - 1);
	while (m->vals[i] != 0) {
		if (memcmp(m->keys[i], key, sizeof(m->keys[i])) == 0) {
			*found = true;
			return &m->vals[i];
		}
		i = (i + 1) & (m->cap - 1);
	}
	memcpy(m->keys[i], key, sizeof(m->keys[i]));
	return &m->vals[i];
}

static void
hmap_free(struct hmap *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

struct strtab {
	char **s;
	size_t n, cap;
	uint64_t *slots; /* index + 1; 0: empty */
	size_t nslots;
};

static uint64_t
hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325u;

	for (; *s != '\0'; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3u;
	}
	return h;
}

/* The index of s in the string table; -1 when out of memory. */
static int64_t
strtab_index(struct strtab *t, const char *s)
{
	size_t i;

	if (s == NULL)
		s = "";
	if (t->n + 1 > t->nslots / 2) {
		size_t ncap = t->nslots == 0 ? 256 : t->nslots * 2;
		uint64_t *ns = calloc(ncap, sizeof(*ns));

		if (ns == NULL)
			return -1;
		for (size_t j = 0; j < t->n; j++) {
			i = hash_str(t->s[j]) & (ncap - 1);
			while (ns[i] != 0)
				i = (i + 1) & (ncap - 1);
			ns[i] = j + 1;
		}
		free(t->slots);
		t->slots = ns;
		t->nslots = ncap;
	}
	i = hash_str(s) & (t->nslots - 1);
	while (t->slots[i] != 0) {
		if (strcmp(t->s[t->slots[i] - 1], s) == 0)
			return (int64_t)(t->slots[i] - 1);
		i = (i + 1) & (t->nslots - 1);
	}
	if (t->n == t->cap) {
		size_t ncap = t->cap == 0 ? 256 : t->cap * 2;
		char **ns = realloc(t->s, ncap * sizeof(*ns));

		if (ns == NULL)
			return -1;
		t->s = ns;
		t->cap = ncap;
	}
	t->s[t->n] = strdup(s);
	if (t->s[t->n] == NULL)
		return -1;
	t->slots[i] = ++t->n;
	return (int64_t)(t->n - 1);
}

static void
strtab_free(struct strtab *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->s[i]);
	free(t->s);
	free(t->slots);
	memset(t, 0, sizeof(*t));
}

/* --------------------------------------------------------------------------
 * The profile being built
 */

struct mapping {
	uint64_t start, limit;
	int64_t filename, build_id;
	bool has_filenames, has_line_numbers, has_inline_frames;
};

struct builder {
	struct strtab strings;
	struct pb samples, locations, functions;
	struct hmap function_ids; /* (name, system_name, filename) -> id */
	struct hmap mapping_ids;  /* (start, limit, filename, build_id) -> id */
	struct hmap location_ids; /* (profile index, pc) -> id */
	struct mapping *mappings; /* id - 1 */
	size_t nmappings, mappings_cap;
	uint64_t nfunctions, nlocations;
	uint64_t *loc_scratch;
	size_t loc_scratch_cap;
	bool oom;
};

static uint64_t
b_str(struct builder *b, const char *s)
{
	int64_t i = strtab_index(&b->strings, s);

	if (i < 0) {
		b->oom = true;
		return 0;
	}
	return (uint64_t)i;
}

static uint64_t
b_function(struct builder *b, const char *name, const char *file)
{
	uint64_t key[KW] = { b_str(b, name), b_str(b, name), b_str(b, file), 0 };
	struct pb f = { 0 };
	uint64_t *slot;
	bool found;

	if (b->oom)
		return 0;
	slot = hmap_slot(&b->function_ids, key, &found);
	if (slot == NULL) {
		b->oom = true;
		return 0;
	}
	if (found)
		return *slot;
	*slot = ++b->function_ids.n;
	b->nfunctions = *slot;
	pb_uint(&f, FUNCTION_ID, *slot);
	pb_uint(&f, FUNCTION_NAME, key[0]);
	pb_uint(&f, FUNCTION_SYSTEM_NAME, key[1]);
	pb_uint(&f, FUNCTION_FILENAME, key[2]);
	pb_msg(&b->functions, PROFILE_FUNCTION, &f);
	pb_free(&f);
	return *slot;
}

/* The mapping id of module m (NULL: none, 0). */
static uint64_t
b_mapping(struct builder *b, const tfa_profile_module_t *m)
{
	char hex[2 * 64 + 1];
	const char *path;
	uint64_t key[KW];
	uint64_t *slot;
	bool found;
	size_t n;

	if (m == NULL)
		return 0;
	n = m->build_id_len < 64 ? m->build_id_len : 64;
	for (size_t i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", m->build_id[i]);
	hex[2 * n] = '\0';
	path = m->path[0] != '\0' ? m->path : "[vdso]";
	key[0] = m->start;
	key[1] = m->end;
	key[2] = b_str(b, path);
	key[3] = b_str(b, hex);
	if (b->oom)
		return 0;
	slot = hmap_slot(&b->mapping_ids, key, &found);
	if (slot == NULL) {
		b->oom = true;
		return 0;
	}
	if (found)
		return *slot;
	if (b->nmappings == b->mappings_cap) {
		size_t ncap = b->mappings_cap == 0 ? 16 : b->mappings_cap * 2;
		struct mapping *nm = realloc(b->mappings, ncap * sizeof(*nm));

		if (nm == NULL) {
			b->oom = true;
			return 0;
		}
		b->mappings = nm;
		b->mappings_cap = ncap;
	}
	b->mappings[b->nmappings] = (struct mapping){
		.start = m->start,
		.limit = m->end,
		.filename = (int64_t)key[2],
		.build_id = (int64_t)key[3],
	};
	*slot = ++b->nmappings;
	b->mapping_ids.n = b->nmappings;
	return *slot;
}

/*
 * The location id of return address pc of profile pi (pc 0: the location of
 * the allocations without a stack).
 */
static uint64_t
b_location(struct builder *b, tfa_profile_symbols_t *sym, const tfa_profile_t *p, size_t pi,
           uint32_t stack_id, uint64_t pc)
{
	uint64_t key[KW] = { pc != 0 ? pi : UINT64_MAX, pc, 0, 0 };
	const tfa_sym_frame_t *frames;
	tfa_sym_frame_t fallback;
	size_t nframes;
	struct pb loc = { 0 };
	struct mapping *mp = NULL;
	uint64_t *slot, mapping_id = 0, id;
	bool found;

	slot = hmap_slot(&b->location_ids, key, &found);
	if (slot == NULL) {
		b->oom = true;
		return 0;
	}
	if (found)
		return *slot;
	id = *slot = ++b->location_ids.n;
	b->nlocations = id;

	pb_uint(&loc, LOCATION_ID, id);
	if (pc == 0) {
		struct pb line = { 0 };

		pb_uint(&line, LINE_FUNCTION_ID, b_function(b, TFA_NO_STACK_NAME, ""));
		pb_msg(&loc, LOCATION_LINE, &line);
		pb_free(&line);
	} else {
		mapping_id = b_mapping(b, tfa_profile_module_at(p, stack_id, pc));
		if (mapping_id != 0)
			mp = &b->mappings[mapping_id - 1];
		pb_uint(&loc, LOCATION_MAPPING_ID, mapping_id);
		/* Inside the call instruction, where the symbolizer looked too. */
		pb_uint(&loc, LOCATION_ADDRESS, pc - 1);
		tfa_pc_frames(sym, p, stack_id, pc, &fallback, &frames, &nframes);
		for (size_t i = 0; i < nframes; i++) {
			const tfa_sym_frame_t *fr = &frames[i];
			struct pb line = { 0 };
			char name[4096];

			tfa_frame_name(fr, name, sizeof(name));
			pb_uint(&line, LINE_FUNCTION_ID, b_function(b, name, fr->file));
			pb_uint(&line, LINE_LINE, fr->line);
			pb_msg(&loc, LOCATION_LINE, &line);
			pb_free(&line);
			if (mp != NULL) {
				mp->has_filenames |= fr->file != NULL;
				mp->has_line_numbers |= fr->line != 0;
				mp->has_inline_frames |= (fr->flags & TFA_SYM_INLINED) != 0;
			}
		}
	}
	pb_msg(&b->locations, PROFILE_LOCATION, &loc);
	pb_free(&loc);
	return id;
}

static void
b_label(struct pb *sample, uint64_t key, uint64_t str, uint64_t num)
{
	struct pb l = { 0 };

	pb_uint(&l, LABEL_KEY, key);
	pb_uint(&l, LABEL_STR, str);
	pb_uint(&l, LABEL_NUM, num);
	pb_msg(sample, SAMPLE_LABEL, &l);
	pb_free(&l);
}

static void
b_sample(struct builder *b, tfa_profile_symbols_t *sym, const tfa_profile_t *p, size_t pi,
         const tfa_site_figures_t *s)
{
	uint64_t values[4] = {
		s->v[TFA_SITEF_NUM_ALLOCS],
		s->v[TFA_SITEF_TOTAL_BYTES],
		s->v[TFA_SITEF_BLOCKS_IN_USE],
		s->v[TFA_SITEF_BYTES_IN_USE],
	};
	const uint64_t *pcs = NULL;
	uint32_t depth = 0;
	struct pb sample = { 0 };

	if (s->stack_id != 0)
		pcs = tfa_profile_stack(p, s->stack_id, &depth);
	if (pcs == NULL)
		depth = 0;
	if (b->loc_scratch_cap < (size_t)depth + 1) {
		uint64_t *n = realloc(b->loc_scratch, ((size_t)depth + 1) * sizeof(*n));

		if (n == NULL) {
			b->oom = true;
			return;
		}
		b->loc_scratch = n;
		b->loc_scratch_cap = (size_t)depth + 1;
	}
	if (depth == 0) {
		b->loc_scratch[0] = b_location(b, sym, p, pi, 0, 0);
		depth = 1;
	} else {
		/* The leaf first, as pprof wants it: the stack's order. */
		for (uint32_t i = 0; i < depth; i++)
			b->loc_scratch[i] = b_location(b, sym, p, pi, s->stack_id, pcs[i]);
	}
	pb_packed(&sample, SAMPLE_LOCATION_ID, b->loc_scratch, depth);
	pb_packed(&sample, SAMPLE_VALUE, values, 4);
	b_label(&sample, b_str(b, "pid"), 0, p->pid);
	b_label(&sample, b_str(b, "device"), b_str(b, s->device), 0);
	pb_msg(&b->samples, PROFILE_SAMPLE, &sample);
	pb_free(&sample);
}

static void
b_value_type(struct builder *b, struct pb *out, uint32_t field, const char *type, const char *unit)
{
	struct pb vt = { 0 };

	pb_uint(&vt, VALUE_TYPE_TYPE, b_str(b, type));
	pb_uint(&vt, VALUE_TYPE_UNIT, b_str(b, unit));
	pb_msg(out, field, &vt);
	pb_free(&vt);
}

static void
b_comment(struct builder *b, struct pb *out, const char *text)
{
	pb_uint(out, PROFILE_COMMENT, b_str(b, text));
}

static void
b_process_comment(struct builder *b, struct pb *out, const tfa_profile_t *p)
{
	char how[160], *text = NULL;
	const char *mode = p->has_config ? tfa_prof_stacks_mode_name(p->stacks_mode) : "none";

	if (!p->has_config || p->stacks_mode == TFA_PROF_STACKS_NONE)
		snprintf(how, sizeof(how), "no stacks recorded");
	else if (p->sample_bytes == 0)
		snprintf(how, sizeof(how), "stacks (%s) of every allocation", mode);
	else
		snprintf(how, sizeof(how),
		         "stacks (%s) sampled every %" PRIu64
		         " bytes on average: values are estimates",
		         mode, p->sample_bytes);
	if (asprintf(&text, "pid %" PRIu32 " (%s): %s; %s%s", p->pid, p->comm,
	             p->command[0] != '\0' ? p->command : p->exe, how,
	             p->complete ? "" : "; a snapshot of a running process")
	    < 0) {
		b->oom = true;
		return;
	}
	b_comment(b, out, text);
	free(text);
}

/* The executable's module: by its path, else the first discovered (dl_iterate_phdr's first). */
static const tfa_profile_module_t *
exe_module(const tfa_profile_t *p)
{
	for (size_t i = 0; i < p->nmodules; i++)
		if (strcmp(p->modules[i].path, p->exe) == 0)
			return &p->modules[i];
	return p->nmodules > 0 ? &p->modules[0] : NULL;
}

static int
gzip_write(FILE *f, const uint8_t *data, size_t len, char *err, size_t errlen)
{
	z_stream z;
	uint8_t *out;
	uLong bound;
	int zr;

	memset(&z, 0, sizeof(z));
	/* windowBits 15 + 16: a gzip header and trailer instead of zlib's. */
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY)
	    != Z_OK) {
		snprintf(err, errlen, "zlib: deflateInit2 failed");
		return -1;
	}
	bound = deflateBound(&z, (uLong)len);
	out = malloc(bound);
	if (out == NULL) {
		deflateEnd(&z);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	z.next_in = (Bytef *)(uintptr_t)data;
	z.avail_in = (uInt)len;
	z.next_out = out;
	z.avail_out = (uInt)bound;
	zr = deflate(&z, Z_FINISH);
	if (zr != Z_STREAM_END) {
		snprintf(err, errlen, "zlib: deflate failed (%d)", zr);
		deflateEnd(&z);
		free(out);
		return -1;
	}
	fwrite(out, 1, z.total_out, f);
	deflateEnd(&z);
	free(out);
	return 0;
}

int
tfa_pprof_write(FILE *f, const tfa_profile_t *const *profiles, size_t n, char *err, size_t errlen)
{
	struct builder b;
	struct pb prof = { 0 };
	uint64_t start = UINT64_MAX, end = 0, period = 0;
	bool period_set = false;
	char serr[512] = "";
	int rc = 0;
	/* One read of each library's symbols for every profile. */
	tfa_sym_cache_t *cache = tfa_sym_cache_new();

	if (errlen > 0)
		err[0] = '\0';
	memset(&b, 0, sizeof(b));
	b_str(&b, ""); /* index 0 */

	b_value_type(&b, &prof, PROFILE_SAMPLE_TYPE, "alloc_objects", "count");
	b_value_type(&b, &prof, PROFILE_SAMPLE_TYPE, "alloc_space", "bytes");
	b_value_type(&b, &prof, PROFILE_SAMPLE_TYPE, "inuse_objects", "count");
	b_value_type(&b, &prof, PROFILE_SAMPLE_TYPE, "inuse_space", "bytes");

	for (size_t i = 0; i < n && !b.oom; i++) {
		const tfa_profile_t *p = profiles[i];
		tfa_profile_symbols_t *sym = NULL;
		tfa_site_figures_t *figs;
		size_t nfigs;

		if (p->start_ns < start)
			start = p->start_ns;
		if (p->end_ns > end)
			end = p->end_ns;
		if (!period_set) {
			period = p->sample_bytes;
			period_set = true;
		} else if (period != p->sample_bytes) {
			period = 0;
		}
		if (tfa_site_figures(p, &figs, &nfigs) < 0) {
			b.oom = true;
			break;
		}
		/* pprof takes the first mapping for the main binary ("File:"). */
		b_mapping(&b, exe_module(p));
		if (p->nsites > 0) {
			sym = tfa_profile_symbols_new(p, cache, serr, sizeof(serr));
			if (sym == NULL && rc == 0) {
				snprintf(err, errlen, "%s (frames named by address)", serr);
				rc = -1;
			}
		}
		for (size_t k = 0; k < nfigs && !b.oom; k++)
			b_sample(&b, sym, p, i, &figs[k]);
		tfa_profile_symbols_free(sym);
		free(figs);
	}

	for (size_t i = 0; i < b.nmappings; i++) {
		const struct mapping *m = &b.mappings[i];
		struct pb mp = { 0 };

		pb_uint(&mp, MAPPING_ID, i + 1);
		pb_uint(&mp, MAPPING_MEMORY_START, m->start);
		pb_uint(&mp, MAPPING_MEMORY_LIMIT, m->limit);
		/* The recorded range starts at the first PT_LOAD segment, which maps the
		 * start of the file in every object the linkers lay out: offset 0. */
		pb_uint(&mp, MAPPING_FILE_OFFSET, 0);
		pb_uint(&mp, MAPPING_FILENAME, (uint64_t)m->filename);
		pb_uint(&mp, MAPPING_BUILD_ID, (uint64_t)m->build_id);
		/* Every line has a function name: pprof need not symbolize again. */
		pb_uint(&mp, MAPPING_HAS_FUNCTIONS, 1);
		pb_uint(&mp, MAPPING_HAS_FILENAMES, m->has_filenames);
		pb_uint(&mp, MAPPING_HAS_LINE_NUMBERS, m->has_line_numbers);
		pb_uint(&mp, MAPPING_HAS_INLINE_FRAMES, m->has_inline_frames);
		pb_msg(&prof, PROFILE_MAPPING, &mp);
		pb_free(&mp);
	}
	pb_raw(&prof, b.samples.d, b.samples.len);
	pb_raw(&prof, b.locations.d, b.locations.len);
	pb_raw(&prof, b.functions.d, b.functions.len);
	if (b.samples.oom || b.locations.oom || b.functions.oom)
		b.oom = true;

	if (n > 0) {
		pb_uint(&prof, PROFILE_TIME_NANOS, start);
		if (end > start)
			pb_uint(&prof, PROFILE_DURATION_NANOS, end - start);
	}
	b_value_type(&b, &prof, PROFILE_PERIOD_TYPE, "space", "bytes");
	pb_uint(&prof, PROFILE_PERIOD, period);
	b_comment(&b, &prof, "tfalloc " TFA_VERSION " report: allocations by call stack");
	for (size_t i = 0; i < n && i < MAX_PROCESS_COMMENTS; i++)
		b_process_comment(&b, &prof, profiles[i]);
	if (n > MAX_PROCESS_COMMENTS) {
		char more[64];

		snprintf(more, sizeof(more), "... and %zu more processes",
		         n - MAX_PROCESS_COMMENTS);
		b_comment(&b, &prof, more);
	}
	pb_uint(&prof, PROFILE_DEFAULT_SAMPLE_TYPE, b_str(&b, "inuse_space"));

	/* Last: every string is in the table now. */
	for (size_t i = 0; i < b.strings.n; i++)
		pb_bytes(&prof, PROFILE_STRING_TABLE, b.strings.s[i], strlen(b.strings.s[i]));

	if (b.oom || prof.oom) {
		snprintf(err, errlen, "out of memory");
		rc = -1;
	} else if (gzip_write(f, prof.d, prof.len, err, errlen) < 0) {
		rc = -1;
	}
	pb_free(&prof);
	pb_free(&b.samples);
	pb_free(&b.locations);
	pb_free(&b.functions);
	hmap_free(&b.function_ids);
	hmap_free(&b.mapping_ids);
	hmap_free(&b.location_ids);
	strtab_free(&b.strings);
	free(b.mappings);
	free(b.loc_scratch);
	tfa_sym_cache_free(cache);
	return rc;
}
