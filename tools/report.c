/* SPDX-License-Identifier: MIT */
/*
 * tfalloc report: reads profile files (or directories of *.prof files) and
 * prints them as text for people or JSON for machines.
 *
 * A file that cannot be read gives one line on stderr, "tfalloc: report:
 * MESSAGE"; the other files are still reported and the exit status is 1.
 * Usage errors exit with 2.
 */
#include "tools/tfalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "core/profile_read.h"
#include "tools/folded.h"
#include "tools/html.h"
#include "tools/profile_dir.h"
#include "tools/json.h"
#include "tools/stacks.h"
#include "tools/pprof.h"

#define REPORT_ERRLEN 1024

enum report_format_e {
	REPORT_TEXT,
	REPORT_JSON,
	REPORT_FOLDED,
	REPORT_PPROF,
	REPORT_HTML, /* tools/html.c */
};

struct report_entry {
	tfa_profile_t prof;
	char *file; /* absolute when it could be resolved */
	tfa_profile_symbols_t *sym; /* made on first use: see entry_symbolizer */
	bool sym_tried;
};

/* The tables of sites the text shows (--by). */
enum report_table_e {
	TABLE_PEAK = 1u << 0,    /* bytes live at the moment of the peak */
	TABLE_LEAKED = 1u << 1,  /* the leaks, grouped by stack */
	TABLE_TOTAL = 1u << 2,   /* total bytes allocated */
	TABLE_COUNT = 1u << 3,   /* allocations */
	TABLE_ALL = 0xf,
};

#define REPORT_TOP_DEFAULT 10

/* Every profile of the report shares one cache: a library's symbols are read once. */
static tfa_sym_cache_t *report_sym_cache;

static struct {
	size_t top;      /* rows per table; 0: all */
	unsigned tables; /* enum report_table_e */
} ropts = { REPORT_TOP_DEFAULT, TABLE_ALL };

struct report {
	struct report_entry *entries;
	size_t n, cap;
	char **failures; /* the messages of files that could not be read */
	size_t nfailures, failures_cap;
	bool oom;
};

void
tfa_report_usage(FILE *f)
{
	fputs("usage: tfalloc report [--format text|json|folded|pprof|html] [--top N] [--by LIST]\n"
	      "                      [-o FILE] PATH...\n"
	      "       tfalloc report --diff [--format text|json] [--top N] [--by KEY] A B\n"
	      "\n"
	      "Shows profile files.  A PATH that is a directory stands for every *.prof\n"
	      "file in it, ordered by pid, then start time.  Call stacks are symbolized\n"
	      "from the modules each process recorded (function, file and line where\n"
	      "debug information exists, else module+offset).\n"
	      "\n"
	      "Options:\n"
	      "  --format text|json   text for people (the default), or JSON\n"
	      "  --format folded      folded stacks for flame graphs (flamegraph.pl,\n"
	      "                       inferno, speedscope): \"PROCESS;OUTER;...;INNER VALUE\"\n"
	      "  --format pprof       gzip'd profile.proto for go tool pprof, Pyroscope,\n"
	      "                       Parca (binary: needs -o FILE or a redirection)\n"
	      "  --format html        one self-contained HTML page: summary, memory over\n"
	      "                       time, flame graphs of the peak and the leaks\n"
	      "  --top N              rows per table of the text (default 10; 0: all)\n"
	      "  --by LIST            text: its tables of allocation sites, comma-separated:\n"
	      "                       peak (bytes live at the peak), leaked (leaks by\n"
	      "                       stack), total (bytes allocated), count (allocations);\n"
	      "                       default: all four.  folded: the one figure of each\n"
	      "                       stack: peak (the default), leaked, in-use (bytes live\n"
	      "                       at the end, also of a snapshot), total, count\n"
	      "  --diff A B           what grew from A to B (each a profile or a directory of\n"
	      "                       a run), by site: sites are matched by their symbolized\n"
	      "                       stacks, so runs of other builds and addresses compare;\n"
	      "                       sorted by the first --by key (default: peak)\n"
	      "  -o, --output FILE    write to FILE instead of stdout\n"
	      "  -h, --help           this help\n"
	      "\n"
	      "Exit status: 0; 1 when a file could not be read (the others are still\n"
	      "reported); 2 on a usage error.\n",
	      f);
}

/* --------------------------------------------------------------------------
 * Collecting profiles
 */

static int
report_push(void **array, size_t n, size_t *cap, size_t elem)
{
	size_t ncap;
	void *p;

	if (n < *cap)
		return 0;
	ncap = *cap == 0 ? 16 : *cap * 2;
	p = realloc(*array, ncap * elem);
	if (p == NULL)
		return -1;
	*array = p;
	*cap = ncap;
	return 0;
}

static void
report_failure(struct report *r, const char *msg)
{
	char *copy;
	void *arr = r->failures;

	fprintf(stderr, "tfalloc: report: %s\n", msg);
	copy = strdup(msg);
	if (copy == NULL || report_push(&arr, r->nfailures, &r->failures_cap, sizeof(char *)) < 0) {
		free(copy);
		r->oom = true;
		return;
	}
	r->failures = arr;
	r->failures[r->nfailures++] = copy;
}

static void
report_read(struct report *r, const char *path)
{
	char err[REPORT_ERRLEN];
	struct report_entry e;
	void *arr = r->entries;

	memset(&e, 0, sizeof(e));
	if (tfa_profile_read_file(path, &e.prof, err, sizeof(err)) < 0) {
		report_failure(r, err);
		return;
	}
	e.file = realpath(path, NULL);
	if (e.file == NULL)
		e.file = strdup(path);
	if (e.file == NULL || report_push(&arr, r->n, &r->cap, sizeof(e)) < 0) {
		free(e.file);
		tfa_profile_free(&e.prof);
		report_failure(r, "out of memory");
		return;
	}
	r->entries = arr;
	r->entries[r->n++] = e;
}

static int
report_entry_cmp(const void *a, const void *b)
{
	const struct report_entry *x = a, *y = b;

	if (x->prof.pid != y->prof.pid)
		return x->prof.pid < y->prof.pid ? -1 : 1;
	if (x->prof.start_ns != y->prof.start_ns)
		return x->prof.start_ns < y->prof.start_ns ? -1 : 1;
	return strcmp(x->file, y->file);
}

/*
 * Every profile of dir and of its uid-N subdirectories (tools/profile_dir.h),
 * read in name order, then sorted by pid and start time.
 */
static void
report_read_dir(struct report *r, const char *dir)
{
	char err[REPORT_ERRLEN];
	char **names;
	size_t n, first = r->n;
	int rc = tfa_profile_dir_list(dir, &names, &n);

	if (rc == -ENOMEM) {
		r->oom = true;
		return;
	}
	if (rc != 0) {
		snprintf(err, sizeof(err), "%s: %s", dir, strerror(-rc));
		report_failure(r, err);
		return;
	}
	if (n == 0) {
		snprintf(err, sizeof(err), "%s: no profile files (*.prof) in this directory", dir);
		report_failure(r, err);
	}
	for (size_t i = 0; i < n; i++)
		report_read(r, names[i]);
	tfa_profile_dir_free(names, n);
	if (r->n > first)
		qsort(r->entries + first, r->n - first, sizeof(*r->entries), report_entry_cmp);
}

static void
report_read_path(struct report *r, const char *path)
{
	struct stat st;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		report_read_dir(r, path);
	else
		report_read(r, path);
}

static void
report_free(struct report *r)
{
	for (size_t i = 0; i < r->n; i++) {
		tfa_profile_symbols_free(r->entries[i].sym);
		tfa_profile_free(&r->entries[i].prof);
		free(r->entries[i].file);
	}
	tfa_sym_cache_free(report_sym_cache);
	report_sym_cache = NULL;
	for (size_t i = 0; i < r->nfailures; i++)
		free(r->failures[i]);
	free(r->entries);
	free(r->failures);
}

/* --------------------------------------------------------------------------
 * Figures shared by both formats
 */

struct error_sums {
	uint64_t by_kind[TFA_ERRC_FIELD_COUNT];
	uint64_t total; /* of the three kinds */
};

static void
report_error_sums(const tfa_profile_t *p, struct error_sums *s)
{
	s->total = tfa_profile_error_sums(p, s->by_kind);
}

/* Sample-only tracking (TFALLOC_TRACK=sampled): the live blocks are a sample, leaks estimates. */
static bool
report_sampled(const tfa_profile_t *p)
{
	return p->has_config && p->track == TFA_PROF_TRACK_SAMPLED;
}

/* A leak group's bytes and blocks: as recorded, or what its sample stands for. */
static uint64_t
leak_bytes(const tfa_profile_t *p, const tfa_profile_leak_t *l)
{
	return report_sampled(p) ? l->f[TFA_LEAKF_EST_BYTES] : l->f[TFA_LEAKF_BYTES];
}

static uint64_t
leak_blocks(const tfa_profile_t *p, const tfa_profile_leak_t *l)
{
	return report_sampled(p) ? l->f[TFA_LEAKF_EST_BLOCKS] : l->f[TFA_LEAKF_BLOCKS];
}

static void
report_leak_sums(const tfa_profile_t *p, uint64_t *bytes, uint64_t *blocks)
{
	*bytes = 0;
	*blocks = 0;
	for (size_t i = 0; i < p->nleaks; i++) {
		*bytes += leak_bytes(p, &p->leaks[i]);
		*blocks += leak_blocks(p, &p->leaks[i]);
	}
}

static bool
report_has_duration(const tfa_profile_t *p)
{
	return p->end_ns != 0 && p->end_ns >= p->start_ns;
}

/* Seconds from nanoseconds, exactly: "1700000000.123456789". */
static void
report_seconds(char *buf, size_t size, uint64_t ns)
{
	snprintf(buf, size, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u, ns % 1000000000u);
}

/* --------------------------------------------------------------------------
 * Stacks, symbolized
 */

/* The symbolizer of e's profile, made on first use; NULL when it has no stacks or none could be made. */
static tfa_profile_symbols_t *
entry_symbolizer(struct report_entry *e)
{
	char err[REPORT_ERRLEN];

	if (e->sym_tried)
		return e->sym;
	e->sym_tried = true;
	if (e->prof.nstacks == 0)
		return NULL;
	if (report_sym_cache == NULL)
		report_sym_cache = tfa_sym_cache_new();
	e->sym = tfa_profile_symbols_new(&e->prof, report_sym_cache, err, sizeof(err));
	if (e->sym == NULL)
		fprintf(stderr, "tfalloc: report: %s: stacks shown as module offsets: %s\n", e->file,
		        err);
	return e->sym;
}

/* The frames of stack id, symbolized (tfa_stack_frames); false when the profile has no such stack. */
static bool
for_each_frame(struct report_entry *e, uint32_t id, tfa_frame_fn fn, void *ctx)
{
	return id != 0 && tfa_stack_frames(entry_symbolizer(e), &e->prof, id, fn, ctx);
}

/* A site's figures for its device, estimated for the whole run when stacks were sampled. */
struct site_row {
	const tfa_profile_site_t *site;
	double v[TFA_SITEF_FIELD_COUNT];
	double leaked;
};

static int site_key; /* enum tfa_prof_site_field_e the rows are sorted by */

static int
site_row_cmp(const void *a, const void *b)
{
	const struct site_row *x = a, *y = b;

	if (x->v[site_key] != y->v[site_key])
		return x->v[site_key] > y->v[site_key] ? -1 : 1;
	if (x->v[TFA_SITEF_TOTAL_BYTES] != y->v[TFA_SITEF_TOTAL_BYTES])
		return x->v[TFA_SITEF_TOTAL_BYTES] > y->v[TFA_SITEF_TOTAL_BYTES] ? -1 : 1;
	return x->site->stack_id < y->site->stack_id ? -1 : x->site->stack_id > y->site->stack_id;
}

/* p's sites, sorted by key (largest first); NULL when it has none or memory ran out. */
static struct site_row *
site_rows(const tfa_profile_t *p, int key)
{
	struct site_row *rows;

	if (p->nsites == 0 || (rows = calloc(p->nsites, sizeof(*rows))) == NULL)
		return NULL;
	for (size_t i = 0; i < p->nsites; i++) {
		rows[i].site = &p->sites[i];
		tfa_site_estimate(p, &p->sites[i], rows[i].v);
		rows[i].leaked = p->complete ? rows[i].v[TFA_SITEF_BYTES_IN_USE] : 0;
	}
	site_key = key;
	qsort(rows, p->nsites, sizeof(*rows), site_row_cmp);
	return rows;
}

static uint64_t
round_u64(double v)
{
	return v <= 0 ? 0 : v >= 1.8e19 ? UINT64_MAX : (uint64_t)(v + 0.5);
}

/* --------------------------------------------------------------------------
 * JSON
 */

/*
 * The stacks of a JSON report are written once each, in "stack_table" after
 * the processes, as lists of indices into "frames", where each distinct frame
 * is written once; leaks, sites, errors and cleanups name their stack by
 * index.  Forked children repeat their parent's sites and leaks with the same
 * symbolized stacks, and the stacks of a process share most of their frames:
 * written inline, a shell script of 56 subshells gave 507 MB of which 90%
 * were frames, and stacks without frames shared, GLib's test suite 3.2 GB.
 */
struct json_stacks {
	char **text;      /* by index: a frame's or a stack's JSON text */
	size_t n, cap;
	uint32_t *slots;  /* open addressing: index + 1, 0 empty */
	uint64_t *hashes; /* by index */
	size_t nslots;
	bool oom;
};

static struct json_stacks *json_stacks, *json_frames; /* of the report being written */

/* Per process: stack id -> index in json_stacks + 1 (0: not yet), for ids up to stack_ids. */
static uint32_t *json_stack_index;
static size_t json_stack_ids;

static uint64_t
json_text_hash(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h;
}

/* The index of the stack text (taken over), or UINT32_MAX when memory ran out. */
static uint32_t
json_stacks_intern(struct json_stacks *t, char *text, size_t len)
{
	uint64_t h = json_text_hash(text, len);

	if (2 * (t->n + 1) > t->nslots) {
		size_t nslots = t->nslots == 0 ? 1024 : t->nslots * 2;
		uint32_t *slots = calloc(nslots, sizeof(*slots));
		if (slots == NULL)
			goto oom;
		for (size_t i = 0; i < t->n; i++) {
			size_t k = t->hashes[i] & (nslots - 1);
			while (slots[k] != 0)
				k = (k + 1) & (nslots - 1);
			slots[k] = (uint32_t)i + 1;
		}
		free(t->slots);
		t->slots = slots;
		t->nslots = nslots;
	}
	size_t k = h & (t->nslots - 1);
	for (; t->slots[k] != 0; k = (k + 1) & (t->nslots - 1)) {
		uint32_t i = t->slots[k] - 1;
		if (t->hashes[i] == h && strcmp(t->text[i], text) == 0) {
			free(text);
			return i;
		}
	}
	if (t->n == t->cap) {
		size_t ncap = t->cap == 0 ? 1024 : t->cap * 2;
		char **nt = realloc(t->text, ncap * sizeof(*nt));
		if (nt == NULL)
			goto oom;
		t->text = nt;
		uint64_t *nh = realloc(t->hashes, ncap * sizeof(*nh));
		if (nh == NULL)
			goto oom;
		t->hashes = nh;
		t->cap = ncap;
	}
	t->text[t->n] = text;
	t->hashes[t->n] = h;
	t->slots[k] = (uint32_t)t->n + 1;
	return (uint32_t)t->n++;
oom:
	free(text);
	t->oom = true;
	return UINT32_MAX;
}

static void
json_stacks_free(struct json_stacks *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->text[i]);
	free(t->text);
	free(t->hashes);
	free(t->slots);
	memset(t, 0, sizeof(*t));
}

static void
json_text_kv(FILE *f, const char *key, const char *v, bool first)
{
	fprintf(f, "%s\"%s\": ", first ? "" : ", ", key);
	if (v != NULL)
		tfa_json_write_string(f, v, strlen(v));
	else
		fputs("null", f);
}

/*
 * A process's frames already written, by what they were symbolized to: a
 * deep recursion repeats the same few frames in every stack (trees' 100,000
 * stacks with full stacks are 4 million frames of about 10 distinct ones),
 * and formatting each into text to find it again took most of the report's
 * time.  The symbolizer gives a frame's strings from its caches, so equal
 * pointers mean equal text; unequal ones only miss the memo.  Per process:
 * another process's symbolizer may reuse a freed string's address.
 */
struct json_frame_memo {
	uint64_t pc, module_offset;
	const char *function, *file, *module;
	uint32_t line, flags;
	uint32_t index; /* in "frames"; UINT32_MAX: an empty slot */
};

static struct json_frame_memo *json_memo; /* open addressing, json_memo_slots a power of 2 */
static size_t json_memo_slots, json_memo_used;

static uint64_t
json_memo_hash(uint64_t pc, const char *function, uint32_t line)
{
	uint64_t h = pc * 0x9E3779B97F4A7C15ull;

	h ^= ((uint64_t)(uintptr_t)function + line) * 0xC2B2AE3D27D4EB4Full;
	return h ^ (h >> 29);
}

static bool
json_memo_same(const struct json_frame_memo *m, const tfa_sym_frame_t *fr)
{
	return m->pc == fr->pc && m->function == fr->function && m->file == fr->file
	       && m->module == fr->module && m->line == fr->line && m->flags == fr->flags
	       && m->module_offset == fr->module_offset;
}

/* The slot of fr: its entry, or the empty slot where it goes; NULL without a memo. */
static struct json_frame_memo *
json_memo_slot(const tfa_sym_frame_t *fr)
{
	if (json_memo == NULL)
		return NULL;
	size_t mask = json_memo_slots - 1;
	for (size_t k = json_memo_hash(fr->pc, fr->function, fr->line) & mask;; k = (k + 1) & mask)
		if (json_memo[k].index == UINT32_MAX || json_memo_same(&json_memo[k], fr))
			return &json_memo[k];
}

static void
json_memo_reset(void)
{
	free(json_memo);
	json_memo = NULL;
	json_memo_slots = json_memo_used = 0;
}

/* Remembers fr at index; without memory, the next frames are only formatted again. */
static void
json_memo_add(const tfa_sym_frame_t *fr, uint32_t index)
{
	if (2 * (json_memo_used + 1) > json_memo_slots) {
		size_t nslots = json_memo_slots == 0 ? 256 : json_memo_slots * 2;
		struct json_frame_memo *old = json_memo, *m = malloc(nslots * sizeof(*m));
		size_t oslots = json_memo_slots;
		if (m == NULL)
			return;
		for (size_t i = 0; i < nslots; i++)
			m[i].index = UINT32_MAX;
		json_memo = m;
		json_memo_slots = nslots;
		for (size_t i = 0; i < oslots; i++) {
			if (old[i].index == UINT32_MAX)
				continue;
			size_t k = json_memo_hash(old[i].pc, old[i].function, old[i].line) & (nslots - 1);
			while (m[k].index != UINT32_MAX)
				k = (k + 1) & (nslots - 1);
			m[k] = old[i];
		}
		free(old);
	}
	struct json_frame_memo *slot = json_memo_slot(fr);
	*slot = (struct json_frame_memo){ .pc = fr->pc, .module_offset = fr->module_offset,
					  .function = fr->function, .file = fr->file, .module = fr->module,
					  .line = fr->line, .flags = fr->flags, .index = index };
	json_memo_used++;
}

/* A growing text (a stack's list of frame indices). */
struct json_buf {
	char *text;
	size_t len, cap;
	bool oom;
};

static void
json_buf_put(struct json_buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t ncap = b->cap == 0 ? 256 : b->cap;
		while (b->len + n + 1 > ncap)
			ncap *= 2;
		char *t = realloc(b->text, ncap);
		if (t == NULL) {
			b->oom = true;
			return;
		}
		b->text = t;
		b->cap = ncap;
	}
	memcpy(b->text + b->len, s, n);
	b->len += n;
	b->text[b->len] = '\0';
}

/* The frame's text as the compact objects of the JSON writer show it; NULL when memory ran out. */
static char *
json_frame_text(const tfa_sym_frame_t *fr, size_t *len)
{
	char buf[32], *text = NULL;
	FILE *f = open_memstream(&text, len);

	if (f == NULL)
		return NULL;
	fputc('{', f);
	snprintf(buf, sizeof(buf), "0x%" PRIx64, fr->pc);
	json_text_kv(f, "address", buf, true);
	json_text_kv(f, "function", fr->function, false);
	json_text_kv(f, "file", fr->file, false);
	if (fr->line != 0)
		fprintf(f, ", \"line\": %" PRIu32, fr->line);
	else
		fputs(", \"line\": null", f);
	snprintf(buf, sizeof(buf), "0x%" PRIx64, fr->module_offset);
	json_text_kv(f, "module", fr->module, false);
	json_text_kv(f, "offset", fr->module != NULL ? buf : NULL, false);
	fprintf(f, ", \"inlined\": %s}", (fr->flags & TFA_SYM_INLINED) != 0 ? "true" : "false");
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* A frame of a stack: its index in "frames" goes to the stack's text. */
static void
json_frame(void *ctx, unsigned index, const tfa_sym_frame_t *fr)
{
	struct json_buf *stack = ctx;
	struct json_frame_memo *m = json_memo_slot(fr);
	uint32_t fi = UINT32_MAX;

	if (m != NULL && m->index != UINT32_MAX) {
		fi = m->index;
	} else {
		size_t len = 0;
		char *text = json_frame_text(fr, &len);
		if (text != NULL)
			fi = json_stacks_intern(json_frames, text, len);
		if (fi != UINT32_MAX)
			json_memo_add(fr, fi);
	}
	if (fi == UINT32_MAX)
		json_frames->oom = true;
	char num[16];
	int n = snprintf(num, sizeof(num), index > 0 ? ", %" PRIu32 : "%" PRIu32, fi);
	json_buf_put(stack, num, (size_t)n);
}

/* "KEY": the index of the stack in "stack_table" (an empty list when unknown). */
static void
json_stack(tfa_json_t *j, struct report_entry *e, const char *key, uint32_t id)
{
	uint32_t index = UINT32_MAX;

	if (id < json_stack_ids && json_stack_index[id] != 0) {
		tfa_json_kv_u64(j, key, json_stack_index[id] - 1);
		return;
	}
	struct json_buf text = { 0 };
	json_buf_put(&text, "[", 1);
	(void)for_each_frame(e, id, json_frame, &text);
	json_buf_put(&text, "]", 1);
	if (!text.oom)
		index = json_stacks_intern(json_stacks, text.text, text.len);
	else
		free(text.text);
	if (index == UINT32_MAX)
		json_stacks->oom = true;
	else if (id < json_stack_ids)
		json_stack_index[id] = index + 1;
	tfa_json_kv_u64(j, key, index);
}

static void
json_sites(tfa_json_t *j, struct report_entry *e)
{
	const tfa_profile_t *p = &e->prof;
	struct site_row *rows = site_rows(p, TFA_SITEF_BYTES_AT_PEAK);

	tfa_json_key(j, "sites");
	tfa_json_begin_array(j);
	for (size_t i = 0; rows != NULL && i < p->nsites; i++) {
		const struct site_row *r = &rows[i];

		/* One line each: a forked child lists hundreds of its parent's sites and leaks. */
		tfa_json_begin_compact_object(j);
		tfa_json_kv_string(j, "device", r->site->device);
		tfa_json_kv_u64(j, "stack_id", r->site->stack_id);
		tfa_json_kv_u64(j, "num_allocs", round_u64(r->v[TFA_SITEF_NUM_ALLOCS]));
		tfa_json_kv_u64(j, "total_bytes", round_u64(r->v[TFA_SITEF_TOTAL_BYTES]));
		tfa_json_kv_u64(j, "bytes_in_use", round_u64(r->v[TFA_SITEF_BYTES_IN_USE]));
		tfa_json_kv_u64(j, "blocks_in_use", round_u64(r->v[TFA_SITEF_BLOCKS_IN_USE]));
		tfa_json_kv_u64(j, "bytes_at_peak", round_u64(r->v[TFA_SITEF_BYTES_AT_PEAK]));
		tfa_json_kv_u64(j, "leaked_bytes", round_u64(r->leaked));
		tfa_json_kv_bool(j, "estimated", p->sample_bytes != 0);
		json_stack(j, e, "stack", r->site->stack_id);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);
	free(rows);
}

static void
json_hex(tfa_json_t *j, const char *key, uint64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
	tfa_json_kv_string(j, key, buf);
}

/* "container/name" of a resource tag (NULL: none); the string lives in buf. */
static const char *
resource_label(const tfa_profile_t *p, uint32_t tag, char *buf, size_t size)
{
	const tfa_profile_resource_t *r = tag != 0 ? tfa_profile_resource(p, tag) : NULL;

	if (r == NULL)
		return NULL;
	snprintf(buf, size, "%s/%s", r->container, r->name);
	return buf;
}

/* "resource": "container/name" and "resource_id", or null and 0. */
static void
json_resource_ref(tfa_json_t *j, const tfa_profile_t *p, uint32_t tag)
{
	char buf[2 * TFA_PROF_MAX_STRING + 2];
	const char *label = resource_label(p, tag, buf, sizeof(buf));

	tfa_json_key(j, "resource");
	if (label != NULL)
		tfa_json_string(j, label);
	else
		tfa_json_null(j);
	tfa_json_kv_u64(j, "resource_id", label != NULL ? tag : 0);
}

/* "resources" (memory by container and resource) and "cleanups" (the scoped leak checks). */
static void
json_resources(tfa_json_t *j, struct report_entry *e)
{
	const tfa_profile_t *p = &e->prof;
	char num[64];

	tfa_json_key(j, "resources");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->nresources; i++) {
		const tfa_profile_resource_t *r = &p->resources[i];
		uint64_t lb, ln;

		tfa_profile_resource_leaks(p, r->tag, &lb, &ln);
		tfa_json_begin_object(j);
		tfa_json_kv_u64(j, "id", r->tag);
		tfa_json_kv_string(j, "container", r->container);
		tfa_json_kv_string(j, "type", r->type);
		tfa_json_kv_string(j, "name", r->name);
		tfa_json_kv_string(j, "debug_string", r->debug);
		tfa_json_kv_string(j, "state", tfa_prof_resource_state_name(r->state));
		tfa_json_kv_u64(j, "refcount", r->refcount);
		json_hex(j, "type_hash", r->type_hash);
		tfa_json_kv_u64(j, "bytes_limit", r->f[TFA_RESF_BYTES_LIMIT]);
		tfa_json_kv_u64(j, "memory_used", r->f[TFA_RESF_MEMORY_USED]);
		tfa_json_kv_u64(j, "peak_memory_used", r->f[TFA_RESF_PEAK_MEMORY_USED]);
		tfa_json_kv_u64(j, "leaked_bytes", lb);
		tfa_json_kv_u64(j, "leaked_blocks", ln);
		tfa_json_key(j, "devices");
		tfa_json_begin_array(j);
		for (size_t d = 0; d < r->ndevices; d++) {
			const tfa_profile_res_device_t *rd = &p->res_devices[r->first + d];
			tfa_json_begin_object(j);
			tfa_json_kv_string(j, "device", rd->device);
			for (unsigned k = 0; k < TFA_RESD_FIELD_COUNT; k++)
				tfa_json_kv_u64(j, tfa_prof_res_device_field_name(k), rd->f[k]);
			tfa_json_end_object(j);
		}
		tfa_json_end_array(j);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	tfa_json_key(j, "cleanups");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->ncleanups; i++) {
		const tfa_profile_cleanup_t *c = &p->cleanups[i];

		tfa_json_begin_object(j);
		tfa_json_kv_string(j, "container", c->container);
		report_seconds(num, sizeof(num), c->t_ns);
		tfa_json_key(j, "time");
		tfa_json_number(j, num);
		tfa_json_kv_u64(j, "blocks", c->f[TFA_CLEANF_BLOCKS]);
		tfa_json_kv_u64(j, "bytes", c->f[TFA_CLEANF_BYTES]);
		tfa_json_kv_u64(j, "resources_deleted", c->f[TFA_CLEANF_RESOURCES]);
		tfa_json_kv_u64(j, "groups_dropped", c->f[TFA_CLEANF_GROUPS_DROPPED]);
		tfa_json_key(j, "groups");
		tfa_json_begin_array(j);
		for (size_t g = 0; g < c->ngroups; g++) {
			const tfa_profile_cleanup_group_t *cg = &p->cleanup_groups[c->first + g];
			tfa_json_begin_object(j);
			json_resource_ref(j, p, cg->tag);
			tfa_json_kv_u64(j, "blocks", cg->blocks);
			tfa_json_kv_u64(j, "bytes", cg->bytes);
			json_hex(j, "sample_address", cg->sample_address);
			tfa_json_kv_u64(j, "stack_id", cg->stack_id);
			json_stack(j, e, "stack", cg->stack_id);
			tfa_json_end_object(j);
		}
		tfa_json_end_array(j);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);
}

static void
json_process(tfa_json_t *j, struct report_entry *e)
{
	const tfa_profile_t *p = &e->prof;
	struct error_sums sums;
	char num[64];

	tfa_json_begin_object(j);
	tfa_json_kv_u64(j, "pid", p->pid);
	tfa_json_kv_u64(j, "ppid", p->ppid);
	tfa_json_kv_string(j, "command", p->command);
	tfa_json_kv_string(j, "exe", p->exe);
	tfa_json_kv_string(j, "comm", p->comm);
	tfa_json_kv_string(j, "file", e->file);
	tfa_json_kv_bool(j, "complete", p->complete);
	tfa_json_kv_string(j, "end_reason", tfa_prof_end_reason_name(p->end_reason));
	tfa_json_kv_i64(j, "exit_code", p->exit_code);
	tfa_json_kv_bool(j, "forked", (p->flags & TFA_PROC_FLAG_FORKED) != 0);
	tfa_json_kv_bool(j, "degraded", (p->flags & TFA_PROC_FLAG_DEGRADED) != 0);
	tfa_json_kv_bool(j, "stacks_lost", (p->flags & TFA_PROC_FLAG_STACKS_LOST) != 0);
	tfa_json_kv_u64(j, "flags", p->flags);
	report_seconds(num, sizeof(num), p->start_ns);
	tfa_json_key(j, "start_time");
	tfa_json_number(j, num);
	tfa_json_key(j, "duration");
	if (report_has_duration(p)) {
		report_seconds(num, sizeof(num), p->end_ns - p->start_ns);
		tfa_json_number(j, num);
	} else {
		tfa_json_null(j);
	}
	tfa_json_kv_u64(j, "start_ns", p->start_ns);
	tfa_json_kv_u64(j, "end_ns", p->end_ns);
	tfa_json_kv_string(j, "tfalloc_version", p->tfalloc_version);
	tfa_json_kv_u64(j, "format_version", p->version);
	tfa_json_key(j, "stacks");
	tfa_json_begin_object(j);
	tfa_json_kv_string(j, "mode", p->has_config ? tfa_prof_stacks_mode_name(p->stacks_mode) : "none");
	tfa_json_kv_u64(j, "depth", p->stack_depth);
	tfa_json_kv_u64(j, "sample_bytes", p->sample_bytes);
	tfa_json_kv_u64(j, "distinct", p->nstacks);
	tfa_json_kv_u64(j, "max_stacks", p->max_stacks);
	tfa_json_kv_u64(j, "truncated_allocations", p->stacks_truncated);
	tfa_json_kv_u64(j, "table_bytes", p->stack_table_bytes);
	tfa_json_end_object(j);
	tfa_json_kv_u64(j, "pointer_table_bytes", p->pointer_table_bytes);
	if (p->pointer_table_peak_bytes != 0)
		tfa_json_kv_u64(j, "pointer_table_peak_bytes", p->pointer_table_peak_bytes);
	/* "sampled": only sampled blocks recorded; leaks and bytes_in_use are estimates. */
	tfa_json_kv_string(j, "tracking", report_sampled(p) ? "sampled" : "all");

	tfa_json_key(j, "devices");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->ndevices; i++) {
		const tfa_profile_device_t *d = &p->devices[i];

		tfa_json_begin_object(j);
		tfa_json_kv_string(j, "device", d->name);
		tfa_json_kv_string(j, "allocator", d->allocator);
		for (size_t k = 0; k < tfa_profile_device_fields_shown(d); k++)
			tfa_json_kv_u64(j, tfa_prof_device_field_name((unsigned)k), d->f[k]);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	tfa_json_key(j, "leaks");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->nleaks; i++) {
		const tfa_profile_leak_t *l = &p->leaks[i];

		tfa_json_begin_compact_object(j);
		tfa_json_kv_string(j, "device", l->device);
		tfa_json_kv_string(j, "kind", tfa_prof_leak_kind_name(l->kind));
		tfa_json_kv_u64(j, "bytes", l->f[TFA_LEAKF_BYTES]);
		tfa_json_kv_u64(j, "blocks", l->f[TFA_LEAKF_BLOCKS]);
		tfa_json_kv_u64(j, "allocated_bytes", l->f[TFA_LEAKF_ALLOCATED_BYTES]);
		json_hex(j, "sample_address", l->f[TFA_LEAKF_SAMPLE_ADDRESS]);
		json_resource_ref(j, p, (uint32_t)l->f[TFA_LEAKF_RESOURCE]);
		if (report_sampled(p)) {
			/* bytes and blocks: the sampled ones; these: what they stand for. */
			tfa_json_kv_u64(j, "estimated_bytes", l->f[TFA_LEAKF_EST_BYTES]);
			tfa_json_kv_u64(j, "estimated_blocks", l->f[TFA_LEAKF_EST_BLOCKS]);
		}
		tfa_json_kv_u64(j, "stack_id", l->stack_id);
		json_stack(j, e, "stack", l->stack_id);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	json_resources(j, e);

	tfa_json_key(j, "errors");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->nerrors; i++) {
		const tfa_profile_error_t *er = &p->errors[i];

		tfa_json_begin_object(j);
		tfa_json_kv_string(j, "kind", tfa_prof_error_kind_name(er->kind));
		json_hex(j, "address", er->address);
		tfa_json_kv_u64(j, "count", er->count);
		tfa_json_kv_string(j, "detail", er->detail);
		tfa_json_kv_u64(j, "stack_id", er->stack_id);
		tfa_json_kv_u64(j, "alloc_stack_id", er->alloc_stack_id);
		json_stack(j, e, "stack", er->stack_id);
		json_stack(j, e, "alloc_stack", er->alloc_stack_id);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	report_error_sums(p, &sums);
	tfa_json_key(j, "error_totals");
	tfa_json_begin_object(j);
	for (size_t k = 0; k < TFA_ERRC_FIELD_COUNT; k++)
		tfa_json_kv_u64(j, tfa_prof_error_count_name((unsigned)k), sums.by_kind[k]);
	tfa_json_end_object(j);

	json_sites(j, e);

	tfa_json_key(j, "timeline");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->ntimeline; i++) {
		const tfa_profile_point_t *pt = &p->timeline[i];

		tfa_json_begin_compact_object(j);
		report_seconds(num, sizeof(num), pt->t_ns);
		tfa_json_key(j, "t");
		tfa_json_number(j, num);
		tfa_json_kv_u64(j, "bytes_in_use", pt->bytes_in_use);
		tfa_json_kv_u64(j, "allocated_bytes", pt->allocated_bytes);
		tfa_json_kv_u64(j, "rss_bytes", pt->rss_bytes);
		tfa_json_kv_bool(j, "peak", (pt->flags & 1u) != 0);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	/* The other devices' series (CUDA): same points, no rss. */
	tfa_json_key(j, "device_timelines");
	tfa_json_begin_array(j);
	for (size_t d = 0; d < p->ndev_timelines; d++) {
		const tfa_profile_dev_timeline_t *t = &p->dev_timelines[d];

		tfa_json_begin_object(j);
		tfa_json_kv_string(j, "device", t->device);
		tfa_json_key(j, "points");
		tfa_json_begin_array(j);
		for (size_t i = 0; i < t->n; i++) {
			const tfa_profile_point_t *pt = &p->dev_points[t->first + i];

			tfa_json_begin_compact_object(j);
			report_seconds(num, sizeof(num), pt->t_ns);
			tfa_json_key(j, "t");
			tfa_json_number(j, num);
			tfa_json_kv_u64(j, "bytes_in_use", pt->bytes_in_use);
			tfa_json_kv_bool(j, "peak", (pt->flags & 1u) != 0);
			tfa_json_end_object(j);
		}
		tfa_json_end_array(j);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	tfa_json_end_object(j);
}

/* What tfa_sym_cache_problems says, kept for the JSON and HTML reports. */
struct symbol_problems {
	char **why;
	size_t n, cap;
	bool oom;
};

static void
symbol_problem_keep(void *arg, const char *why)
{
	struct symbol_problems *l = arg;

	if (l->n == l->cap) {
		size_t cap = l->cap != 0 ? l->cap * 2 : 8;
		char **v = realloc(l->why, cap * sizeof(*v));
		if (v == NULL) {
			l->oom = true;
			return;
		}
		l->why = v;
		l->cap = cap;
	}
	l->why[l->n] = strdup(why);
	if (l->why[l->n] == NULL)
		l->oom = true;
	else
		l->n++;
}

/* The files whose frames are shown as offsets, and why, once every stack is symbolized. */
static struct symbol_problems
symbol_problems_collect(void)
{
	struct symbol_problems l = { 0 };

	tfa_sym_cache_problems(report_sym_cache, symbol_problem_keep, &l);
	return l;
}

static void
symbol_problems_free(struct symbol_problems *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->why[i]);
	free(l->why);
	*l = (struct symbol_problems){ 0 };
}

static int
report_json(FILE *f, struct report *r)
{
	struct json_stacks stacks = { 0 }, frames = { 0 };
	tfa_json_t j;

	json_stacks = &stacks;
	json_frames = &frames;

	tfa_json_init(&j, f);
	tfa_json_begin_object(&j);
	tfa_json_key(&j, "processes");
	tfa_json_begin_array(&j);
	for (size_t i = 0; i < r->n; i++) {
		/* Stack ids are the profile's own, sorted; a file claiming huge ones gets no cache. */
		const tfa_profile_t *p = &r->entries[i].prof;
		json_stack_ids = p->nstacks != 0 ? (size_t)p->stacks[p->nstacks - 1].id + 1 : 1;
		if (json_stack_ids > (1u << 24))
			json_stack_ids = 0;
		json_stack_index = json_stack_ids != 0 ? calloc(json_stack_ids, sizeof(*json_stack_index)) : NULL;
		if (json_stack_index == NULL)
			json_stack_ids = 0;
		json_process(&j, &r->entries[i]);
		json_memo_reset();
		free(json_stack_index);
		json_stack_index = NULL;
		json_stack_ids = 0;
	}
	tfa_json_end_array(&j);
	tfa_json_key(&j, "stack_table");
	tfa_json_begin_array(&j);
	for (size_t i = 0; i < stacks.n; i++)
		tfa_json_number(&j, stacks.text[i]);
	tfa_json_end_array(&j);
	tfa_json_key(&j, "frames");
	tfa_json_begin_array(&j);
	for (size_t i = 0; i < frames.n; i++)
		tfa_json_number(&j, frames.text[i]);
	tfa_json_end_array(&j);
	tfa_json_key(&j, "unreadable");
	tfa_json_begin_array(&j);
	for (size_t i = 0; i < r->nfailures; i++)
		tfa_json_string(&j, r->failures[i]);
	tfa_json_end_array(&j);
	/* Frames shown as offsets say why once, here, not in every stack. */
	struct symbol_problems problems = symbol_problems_collect();
	tfa_json_key(&j, "symbols");
	tfa_json_begin_array(&j);
	for (size_t i = 0; i < problems.n; i++)
		tfa_json_string(&j, problems.why[i]);
	tfa_json_end_array(&j);
	tfa_json_end_object(&j);
	bool oom = stacks.oom || frames.oom || problems.oom;
	symbol_problems_free(&problems);
	json_stacks_free(&stacks);
	json_stacks_free(&frames);
	json_stacks = json_frames = NULL;
	return oom ? -1 : 0;
}

/* The HTML page (tools/html.c); -1 when memory ran out. */
static int
report_html(FILE *f, struct report *r)
{
	tfa_html_t h;

	tfa_html_begin(&h, f);
	for (size_t i = 0; i < r->n; i++)
		tfa_html_process(&h, &r->entries[i].prof, r->entries[i].file,
		                 entry_symbolizer(&r->entries[i]));
	struct symbol_problems problems = symbol_problems_collect();
	int rc = tfa_html_end(&h, r->failures, r->nfailures, problems.why, problems.n);
	if (problems.oom && rc == 0) {
		fputs("tfalloc: report: out of memory\n", stderr);
		rc = -1;
	}
	symbol_problems_free(&problems);
	return rc;
}

/* --------------------------------------------------------------------------
 * Text
 */

/*
 * A string from the file, for a terminal: control characters and bytes that
 * are not UTF-8 are shown as \xNN.
 */
static void
text_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len = strlen(s);

	for (size_t i = 0; i < len;) {
		size_t n = tfa_utf8_sequence(p + i, len - i);

		if (n == 0 || p[i] < 0x20 || p[i] == 0x7f) {
			fprintf(f, "\\x%02x", p[i]);
			i++;
		} else {
			fwrite(p + i, 1, n, f);
			i += n;
		}
	}
}

/* "512 bytes", or "1.5 KiB (1536 bytes)". */
static void
text_bytes(FILE *f, uint64_t b)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)b;
	size_t u = 0;

	if (b < 1024) {
		fprintf(f, "%" PRIu64 " byte%s", b, b == 1 ? "" : "s");
		return;
	}
	v /= 1024;
	while (v >= 1024 && u + 1 < TFA_ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	fprintf(f, "%.1f %s (%" PRIu64 " bytes)", v, units[u], b);
}

static void
text_count(FILE *f, uint64_t n, const char *one, const char *many)
{
	fprintf(f, "%" PRIu64 " %s", n, n == 1 ? one : many);
}

static void
text_label(FILE *f, const char *label)
{
	fprintf(f, "    %-17s", label);
}

/* "1.5 KiB (1536 bytes) requested, 1600 bytes allocated" */
static void
text_req_alloc(FILE *f, const char *label, uint64_t req, uint64_t alloc)
{
	text_label(f, label);
	text_bytes(f, req);
	fprintf(f, " requested, %" PRIu64 " bytes allocated\n", alloc);
}

static void
text_ended(FILE *f, const tfa_profile_t *p)
{
	fputs("  ended:      ", f);
	switch (p->end_reason) {
	case TFA_END_EXIT:
		fprintf(f, "exited with status %" PRId32 "\n", p->exit_code);
		break;
	case TFA_END_SIGNAL: {
		const char *abbrev = p->exit_code > 0 && p->exit_code < 128
		                             ? sigabbrev_np((int)p->exit_code)
		                             : NULL;

		fprintf(f, "killed by signal %" PRId32, p->exit_code);
		if (abbrev != NULL)
			fprintf(f, " (SIG%s)", abbrev);
		fputc('\n', f);
		break;
	}
	case TFA_END_EXEC:
		fputs("replaced its image by exec\n", f);
		break;
	case TFA_END_RUNNING:
		fputs("not seen: this is a snapshot, written while the process ran", f);
		if (report_has_duration(p)) {
			uint64_t ms = (p->end_ns - p->start_ns) / 1000000u;
			fprintf(f, " (%" PRIu64 ".%03" PRIu64 " s after it started)", ms / 1000, ms % 1000);
		}
		fputs("; a process killed by SIGKILL leaves its last periodic snapshot\n", f);
		break;
	case TFA_END_UNKNOWN:
		fputs("ended without telling how\n", f);
		break;
	default:
		fprintf(f, "unknown end reason %" PRIu32 "\n", p->end_reason);
		break;
	}
}

static void
text_started(FILE *f, const tfa_profile_t *p)
{
	time_t t = (time_t)(p->start_ns / 1000000000u);
	struct tm tm;
	char when[64];

	if (gmtime_r(&t, &tm) == NULL
	    || strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
		snprintf(when, sizeof(when), "%" PRIu64 " ns", p->start_ns);
	fprintf(f, "  started:    %s", when);
	if (report_has_duration(p)) {
		uint64_t ms = (p->end_ns - p->start_ns) / 1000000u;

		fprintf(f, ", ran %" PRIu64 ".%03" PRIu64 " s", ms / 1000, ms % 1000);
	}
	fputc('\n', f);
}

static void
text_device(FILE *f, const tfa_profile_device_t *d)
{
	const uint64_t *v = d->f;

	fputs("  device ", f);
	text_str(f, d->name);
	fputs(", allocator ", f);
	text_str(f, d->allocator);
	fputs(":\n", f);
	text_label(f, "allocations:");
	fprintf(f, "%" PRIu64 " (", v[TFA_DEV_NUM_ALLOCS]);
	text_count(f, v[TFA_DEV_NUM_FREES], "free", "frees");
	fputs(", ", f);
	text_count(f, v[TFA_DEV_NUM_REALLOCS], "realloc", "reallocs");
	fputs(")\n", f);
	text_req_alloc(f, "in use:", v[TFA_DEV_BYTES_IN_USE], v[TFA_DEV_ALLOCATED_BYTES_IN_USE]);
	text_req_alloc(f, "peak in use:", v[TFA_DEV_PEAK_BYTES_IN_USE],
	               v[TFA_DEV_PEAK_ALLOCATED_BYTES_IN_USE]);
	if (d->nfields > TFA_DEV_PEAK_BLOCKS_IN_USE) {
		text_label(f, "peak blocks:");
		fprintf(f, "%" PRIu64 " live at once\n", v[TFA_DEV_PEAK_BLOCKS_IN_USE]);
	}
	if (d->nfields > TFA_DEV_LEAK_SCAN_BYTES && v[TFA_DEV_LEAK_SCAN_BYTES] != 0) {
		text_label(f, "leak scan:");
		fputs("checked ", f);
		text_bytes(f, v[TFA_DEV_LEAK_SCAN_BYTES]);
		fputs(" (roots and the blocks scanned)\n", f);
	}
	text_req_alloc(f, "total allocated:", v[TFA_DEV_TOTAL_BYTES],
	               v[TFA_DEV_TOTAL_ALLOCATED_BYTES]);
	text_label(f, "largest block:");
	text_bytes(f, v[TFA_DEV_LARGEST_ALLOC_SIZE]);
	fputc('\n', f);
	text_label(f, "limit:");
	if (v[TFA_DEV_BYTES_LIMIT] == 0)
		fputs("none", f);
	else
		text_bytes(f, v[TFA_DEV_BYTES_LIMIT]);
	fputc('\n', f);
	text_label(f, "shim overhead:");
	text_bytes(f, v[TFA_DEV_SHIM_OVERHEAD_BYTES]);
	fputc('\n', f);
}

struct text_frames {
	FILE *f;
	bool below_main; /* the frames after main (the C runtime's start) are not shown */
};

static void
text_frame(void *ctx, unsigned index, const tfa_sym_frame_t *fr)
{
	struct text_frames *tf = ctx;
	FILE *f = tf->f;
	char name[1024];

	if (tf->below_main)
		return;
	tf->below_main = fr->function != NULL && strcmp(fr->function, "main") == 0;
	fprintf(f, "      #%u 0x%" PRIx64 " in ", index, fr->pc);
	text_str(f, tfa_frame_name(fr, name, sizeof(name)));
	if (fr->file != NULL) {
		fputc(' ', f);
		text_str(f, fr->file);
		if (fr->line != 0)
			fprintf(f, ":%" PRIu32, fr->line);
	} else if (fr->function != NULL && fr->module != NULL && fr->module[0] != '\0') {
		fputs(" (", f);
		text_str(f, tfa_base_name(fr->module));
		fprintf(f, "+0x%" PRIx64 ")", fr->module_offset);
	}
	if (fr->flags & TFA_SYM_INLINED)
		fputs(" (inlined)", f);
	fputc('\n', f);
}

static void
text_stack(FILE *f, struct report_entry *e, uint32_t stack_id)
{
	if (stack_id == 0)
		fputs(e->prof.sample_bytes != 0 ? "      (no stack: not sampled)\n"
		                                 : "      (no stack recorded)\n",
		      f);
	else if (!for_each_frame(e, stack_id, text_frame, &(struct text_frames){ .f = f }))
		fprintf(f, "      (stack %" PRIu32 ": frames not in this profile)\n", stack_id);
}

static const tfa_profile_t *leak_sort_profile;

static int
leak_index_cmp(const void *a, const void *b)
{
	const tfa_profile_leak_t *x = &leak_sort_profile->leaks[*(const size_t *)a];
	const tfa_profile_leak_t *y = &leak_sort_profile->leaks[*(const size_t *)b];

	const tfa_profile_t *p = leak_sort_profile;

	if (leak_bytes(p, x) != leak_bytes(p, y))
		return leak_bytes(p, x) > leak_bytes(p, y) ? -1 : 1;
	if (leak_blocks(p, x) != leak_blocks(p, y))
		return leak_blocks(p, x) > leak_blocks(p, y) ? -1 : 1;
	return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* "... and 12 more (3.0 KiB (3072 bytes) in 40 blocks)" */
static void
text_more(FILE *f, size_t more, const char *what, uint64_t bytes, uint64_t blocks)
{
	if (more == 0)
		return;
	fprintf(f, "    ... and %zu more %s (", more, what);
	text_bytes(f, bytes);
	fputs(" in ", f);
	text_count(f, blocks, "block", "blocks");
	fputs("); --top 0 shows all\n", f);
}

static void
text_leaks(FILE *f, struct report_entry *e)
{
	const tfa_profile_t *p = &e->prof;
	bool sampled = report_sampled(p);
	const char *what = sampled ? (p->complete ? "estimated live at exit" : "estimated live at snapshot")
	                           : p->complete ? "leaks" : "live at snapshot";
	uint64_t bytes, blocks, more_bytes = 0, more_blocks = 0;
	size_t *order, shown;

	report_leak_sums(p, &bytes, &blocks);
	if (p->nleaks == 0) {
		fprintf(f, "  %s: none\n", what);
		return;
	}
	fprintf(f, "  %s: ", what);
	text_bytes(f, bytes);
	fputs(" in ", f);
	text_count(f, blocks, "block", "blocks");
	fprintf(f, ", %zu %s by stack, largest first", p->nleaks, p->nleaks == 1 ? "group" : "groups");
	if (sampled) {
		uint64_t nb = 0;
		for (size_t i = 0; i < p->nleaks; i++)
			nb += p->leaks[i].f[TFA_LEAKF_BLOCKS];
		fprintf(f, " (sample-only tracking: scaled from %" PRIu64 " sampled %s; no reachability "
		           "classes, no proof of leaks)",
		        nb, nb == 1 ? "block" : "blocks");
	}
	fputc('\n', f);
	/* By kind, as valgrind's LEAK SUMMARY (when the process classified them). */
	uint64_t kb[TFA_LEAK_REACHABLE + 1] = { 0 }, kn[TFA_LEAK_REACHABLE + 1] = { 0 };
	bool classified = false;
	for (size_t i = 0; i < p->nleaks; i++) {
		uint32_t k = p->leaks[i].kind;
		if (k > TFA_LEAK_REACHABLE)
			continue;
		kb[k] += p->leaks[i].f[TFA_LEAKF_BYTES];
		kn[k] += p->leaks[i].f[TFA_LEAKF_BLOCKS];
		classified |= k != TFA_LEAK_UNCLASSIFIED;
	}
	if (classified) {
		const char *sep = "    by kind: ";
		for (uint32_t k = TFA_LEAK_DEFINITE; k <= TFA_LEAK_REACHABLE; k++) {
			fprintf(f, "%s%s ", sep, tfa_prof_leak_kind_name(k));
			text_bytes(f, kb[k]);
			fprintf(f, " in %" PRIu64 " %s", kn[k], kn[k] == 1 ? "block" : "blocks");
			sep = ", ";
		}
		if (kn[TFA_LEAK_UNCLASSIFIED] != 0) {
			fputs(", unclassified ", f);
			text_bytes(f, kb[TFA_LEAK_UNCLASSIFIED]);
		}
		fputc('\n', f);
	}
	order = calloc(p->nleaks, sizeof(*order));
	if (order == NULL) {
		fputs("    (out of memory)\n", f);
		return;
	}
	for (size_t i = 0; i < p->nleaks; i++)
		order[i] = i;
	leak_sort_profile = p;
	qsort(order, p->nleaks, sizeof(*order), leak_index_cmp);
	shown = ropts.top == 0 ? p->nleaks : TFA_MIN(ropts.top, p->nleaks);
	for (size_t k = 0; k < p->nleaks; k++) {
		const tfa_profile_leak_t *l = &p->leaks[order[k]];

		if (k >= shown) {
			more_bytes += leak_bytes(p, l);
			more_blocks += leak_blocks(p, l);
			continue;
		}
		fputs("    ", f);
		text_bytes(f, leak_bytes(p, l));
		fputs(" in ", f);
		text_count(f, leak_blocks(p, l), "block", "blocks");
		if (sampled)
			fprintf(f, " (estimated from %" PRIu64 " sampled, ", l->f[TFA_LEAKF_BLOCKS]);
		else
			fprintf(f, " (%s, ", tfa_prof_leak_kind_name(l->kind));
		text_str(f, l->device);
		char rbuf[2 * TFA_PROF_MAX_STRING + 2];
		const char *label = resource_label(p, (uint32_t)l->f[TFA_LEAKF_RESOURCE], rbuf, sizeof(rbuf));
		if (label != NULL) {
			fputs(", resource ", f);
			text_str(f, label);
		}
		fprintf(f, ", e.g. 0x%" PRIx64 ")\n", l->f[TFA_LEAKF_SAMPLE_ADDRESS]);
		text_stack(f, e, l->stack_id);
	}
	text_more(f, p->nleaks - shown, "groups", more_bytes, more_blocks);
	free(order);
}

/* Sum of a figure over the sites of one device. */
static double
sites_sum(const struct site_row *rows, size_t n, const char *device, int key)
{
	double sum = 0;

	for (size_t i = 0; i < n; i++)
		if (strcmp(rows[i].site->device, device) == 0)
			sum += rows[i].v[key];
	return sum;
}

static void
text_site_table(FILE *f, struct report_entry *e, int key, const char *title)
{
	const tfa_profile_t *p = &e->prof;
	struct site_row *rows = site_rows(p, key);
	size_t n = 0, shown;

	if (rows == NULL)
		return;
	while (n < p->nsites && rows[n].v[key] >= 0.5)
		n++;
	shown = ropts.top == 0 ? n : TFA_MIN(ropts.top, n);
	fprintf(f, "  sites by %s: %zu of %zu%s\n", title, shown, n,
	        p->sample_bytes != 0 ? " (estimated from sampled stacks)" : "");
	for (size_t i = 0; i < shown; i++) {
		const struct site_row *r = &rows[i];
		const char *dev = r->site->device;

		fputs("    ", f);
		if (key == TFA_SITEF_NUM_ALLOCS) {
			text_count(f, round_u64(r->v[key]), "allocation", "allocations");
			fputs(", ", f);
			text_bytes(f, round_u64(r->v[TFA_SITEF_TOTAL_BYTES]));
			fputs(" in all", f);
		} else {
			text_bytes(f, round_u64(r->v[key]));
			double sum = 0;
			for (size_t d = 0; d < p->ndevices; d++)
				if (strcmp(p->devices[d].name, dev) == 0)
					sum = (double)p->devices[d].f[key == TFA_SITEF_BYTES_AT_PEAK
					                                      ? TFA_DEV_PEAK_BYTES_IN_USE
					                                      : TFA_DEV_TOTAL_BYTES];
			fputs(key == TFA_SITEF_BYTES_AT_PEAK ? " at the peak" : " allocated", f);
			if (sum > 0)
				fprintf(f, " (%.1f%%)", 100.0 * r->v[key] / sum);
			fputs(", ", f);
			text_count(f, round_u64(r->v[TFA_SITEF_NUM_ALLOCS]), "allocation", "allocations");
		}
		fputs(", ", f);
		text_bytes(f, round_u64(r->v[TFA_SITEF_BYTES_IN_USE]));
		fputs(p->complete ? " leaked" : " in use", f);
		if (p->ndevices > 1) {
			fputs(", ", f);
			text_str(f, dev);
		}
		fputc('\n', f);
		text_stack(f, e, r->site->stack_id);
	}
	if (key == TFA_SITEF_BYTES_AT_PEAK) {
		/* What the sites do not hold: allocations without a stack (runtime, unsampled). */
		for (size_t d = 0; d < p->ndevices; d++) {
			double rest = (double)p->devices[d].f[TFA_DEV_PEAK_BYTES_IN_USE]
			              - sites_sum(rows, p->nsites, p->devices[d].name, key);
			if (p->sample_bytes == 0 && rest >= 0.5) {
				fputs("    ", f);
				text_bytes(f, round_u64(rest));
				fputs(" at the peak without a stack (", f);
				text_str(f, p->devices[d].name);
				fputs(")\n", f);
			}
		}
	}
	if (shown < n)
		fprintf(f, "    ... and %zu more; --top 0 shows all\n", n - shown);
	free(rows);
}

/* "  timeline: 812 points over 3.210 s (every 10 ms or more); the peak at 1.520 s" */
static void
text_timeline(FILE *f, const tfa_profile_t *p)
{
	const tfa_profile_point_t *peak = NULL;

	if (p->ntimeline == 0)
		return;
	for (size_t i = 0; i < p->ntimeline; i++)
		if (peak == NULL || p->timeline[i].bytes_in_use > peak->bytes_in_use)
			peak = &p->timeline[i];
	uint64_t span = p->timeline[p->ntimeline - 1].t_ns;
	fprintf(f, "  timeline:   %zu %s over %" PRIu64 ".%03" PRIu64 " s (every %" PRIu64
	           " ms or more); the most in use, ",
	        p->ntimeline, p->ntimeline == 1 ? "point" : "points", span / 1000000000u,
	        span / 1000000u % 1000, p->timeline_interval_ns / 1000000u);
	text_bytes(f, peak->bytes_in_use);
	fprintf(f, ", at %" PRIu64 ".%03" PRIu64 " s\n", peak->t_ns / 1000000000u,
	        peak->t_ns / 1000000u % 1000);
	for (size_t d = 0; d < p->ndev_timelines; d++) {
		const tfa_profile_dev_timeline_t *t = &p->dev_timelines[d];
		const tfa_profile_point_t *top = NULL;
		for (size_t i = 0; i < t->n; i++)
			if (top == NULL || p->dev_points[t->first + i].bytes_in_use > top->bytes_in_use)
				top = &p->dev_points[t->first + i];
		if (top == NULL)
			continue;
		fprintf(f, "  timeline %s: %zu %s; the most in use, ", t->device, t->n,
		        t->n == 1 ? "point" : "points");
		text_bytes(f, top->bytes_in_use);
		fprintf(f, ", at %" PRIu64 ".%03" PRIu64 " s\n", top->t_ns / 1000000000u,
		        top->t_ns / 1000000u % 1000);
	}
}

static void
text_stacks_config(FILE *f, const tfa_profile_t *p)
{
	if (!p->has_config)
		return;
	fprintf(f, "  stacks:     %s", tfa_prof_stacks_mode_name(p->stacks_mode));
	if (p->stacks_mode != TFA_PROF_STACKS_NONE) {
		fprintf(f, ", up to %" PRIu32 " frames, %zu distinct", p->stack_depth, p->nstacks);
		if (p->sample_bytes != 0) {
			fputs(", sampled: one every ", f);
			text_bytes(f, p->sample_bytes);
			fputs(" on average (site figures are estimates)", f);
		}
		if (p->stack_table_bytes != 0) {
			fputs(", table ", f);
			text_bytes(f, p->stack_table_bytes);
		}
		if (p->stacks_truncated != 0)
			fprintf(f, "\n  note:       the stack table was full (%" PRIu32 " stacks, "
			           "TFALLOC_MAX_STACKS): %" PRIu64 " allocations kept only their "
			           "innermost frames",
			        p->max_stacks, p->stacks_truncated);
	}
	fputc('\n', f);
	if (report_sampled(p))
		fputs("  tracking:   sample-only (TFALLOC_TRACK=sampled): only the sampled blocks were "
		      "recorded; counts, total and allocated bytes are exact, bytes in use (requested) "
		      "are estimates (unsampled blocks at their allocated size), what was live at exit "
		      "is estimated from the sample\n", f);
	if (p->pointer_table_bytes != 0) {
		fputs("  tables:     pointer table ", f);
		text_bytes(f, p->pointer_table_bytes);
		fputs(report_sampled(p) ? " mapped (32 bytes a slot, a slot for every sampled live block"
		                        : " mapped (32 bytes a slot, a slot for every live block", f);
		if (p->pointer_table_peak_bytes > p->pointer_table_bytes) {
			fputs("; ", f);
			text_bytes(f, p->pointer_table_peak_bytes);
			fputs(" at its peak", f);
		}
		fputs(")\n", f);
	}
}

/* "double_free" -> "double free" */
static void
text_kind(FILE *f, const char *name)
{
	for (; *name != '\0'; name++)
		fputc(*name == '_' ? ' ' : *name, f);
}

static void
text_errors(FILE *f, struct report_entry *entry)
{
	const tfa_profile_t *p = &entry->prof;
	static const uint32_t kinds[] = { TFA_ERR_DOUBLE_FREE, TFA_ERR_INVALID_FREE,
		                          TFA_ERR_MISMATCHED_FREE };
	struct error_sums s;
	const char *sep = " (";

	report_error_sums(p, &s);
	if (s.total == 0 && p->nerrors == 0) {
		fputs("  errors: none\n", f);
		return;
	}
	fprintf(f, "  errors: %" PRIu64, s.total);
	for (size_t i = 0; i < TFA_ARRAY_SIZE(kinds); i++) {
		uint64_t n = s.by_kind[kinds[i] - TFA_ERR_DOUBLE_FREE];

		if (n == 0)
			continue;
		fprintf(f, "%s%" PRIu64 " ", sep, n);
		text_kind(f, tfa_prof_error_kind_name(kinds[i]));
		if (n != 1)
			fputc('s', f);
		sep = ", ";
	}
	fputs(sep[0] == ',' ? ")\n" : "\n", f);
	for (size_t i = 0; i < p->nerrors; i++) {
		const tfa_profile_error_t *e = &p->errors[i];

		fputs("    ", f);
		text_kind(f, tfa_prof_error_kind_name(e->kind));
		fprintf(f, " of 0x%" PRIx64 " (", e->address);
		text_count(f, e->count, "time", "times");
		fputc(')', f);
		if (e->detail[0] != '\0') {
			fputs(": ", f);
			text_str(f, e->detail);
		}
		fputc('\n', f);
		if (e->stack_id != 0 || e->alloc_stack_id == 0)
			text_stack(f, entry, e->stack_id);
		if (e->alloc_stack_id != 0) {
			fputs("    the block was allocated at:\n", f);
			text_stack(f, entry, e->alloc_stack_id);
		}
	}
	if (s.by_kind[TFA_ERRC_NOT_RECORDED] > 0)
		fprintf(f, "    (%" PRIu64 " more not recorded)\n",
		        s.by_kind[TFA_ERRC_NOT_RECORDED]);
}

/* Memory by container and resource, the largest peak first. */
static const tfa_profile_t *res_sort_profile;

static int
res_index_cmp(const void *a, const void *b)
{
	const tfa_profile_resource_t *x = &res_sort_profile->resources[*(const size_t *)a];
	const tfa_profile_resource_t *y = &res_sort_profile->resources[*(const size_t *)b];
	uint64_t px = x->f[TFA_RESF_PEAK_MEMORY_USED], py = y->f[TFA_RESF_PEAK_MEMORY_USED];

	if (px != py)
		return px < py ? 1 : -1;
	return x->tag < y->tag ? -1 : x->tag > y->tag;
}

static void
text_resources(FILE *f, struct report_entry *e)
{
	const tfa_profile_t *p = &e->prof;

	if (p->nresources == 0)
		return;
	size_t *order = calloc(p->nresources, sizeof(*order));
	if (order == NULL) {
		fputs("  resources: (out of memory)\n", f);
		return;
	}
	for (size_t i = 0; i < p->nresources; i++)
		order[i] = i;
	res_sort_profile = p;
	qsort(order, p->nresources, sizeof(*order), res_index_cmp);
	size_t shown = ropts.top == 0 ? p->nresources : TFA_MIN(ropts.top, p->nresources);
	fprintf(f, "  resources: %zu, by peak (container/name [type]: in use, peak, allocations, leaked)\n",
		p->nresources);
	for (size_t k = 0; k < shown; k++) {
		const tfa_profile_resource_t *r = &p->resources[order[k]];
		uint64_t allocs = 0, lb, ln;
		for (size_t d = 0; d < r->ndevices; d++)
			allocs += p->res_devices[r->first + d].f[TFA_RESD_NUM_ALLOCS];
		tfa_profile_resource_leaks(p, r->tag, &lb, &ln);
		fputs("    ", f);
		text_str(f, r->container);
		fputc('/', f);
		text_str(f, r->name);
		fputs(" [", f);
		text_str(f, r->type);
		fputs("]: ", f);
		text_bytes(f, r->f[TFA_RESF_MEMORY_USED]);
		fputs(" in use, peak ", f);
		text_bytes(f, r->f[TFA_RESF_PEAK_MEMORY_USED]);
		fputs(", ", f);
		text_count(f, allocs, "allocation", "allocations");
		fputs(", leaked ", f);
		text_bytes(f, lb);
		fprintf(f, " in %" PRIu64 " %s", ln, ln == 1 ? "block" : "blocks");
		if (r->f[TFA_RESF_BYTES_LIMIT] != 0) {
			fputs(", limit ", f);
			text_bytes(f, r->f[TFA_RESF_BYTES_LIMIT]);
		}
		if (r->state == 2)
			fputs(" (deleted)", f);
		for (size_t d = 0; d < r->ndevices; d++) {
			const tfa_profile_res_device_t *rd = &p->res_devices[r->first + d];
			if (r->ndevices == 1)
				break;
			fputs("; ", f);
			text_str(f, rd->device);
			fputc(' ', f);
			text_bytes(f, rd->f[TFA_RESD_BYTES_IN_USE]);
		}
		fputc('\n', f);
	}
	if (shown < p->nresources)
		fprintf(f, "    ... %zu more\n", p->nresources - shown);
	free(order);
}

/* The scoped leak checks: what each container still held when it was cleaned up. */
static void
text_cleanups(FILE *f, struct report_entry *e)
{
	const tfa_profile_t *p = &e->prof;

	for (size_t i = 0; i < p->ncleanups; i++) {
		const tfa_profile_cleanup_t *c = &p->cleanups[i];
		fputs("  cleanup of container ", f);
		text_str(f, c->container);
		fputs(": ", f);
		text_bytes(f, c->f[TFA_CLEANF_BYTES]);
		fputs(" in ", f);
		text_count(f, c->f[TFA_CLEANF_BLOCKS], "block", "blocks");
		fputs(" still live\n", f);
		for (size_t g = 0; g < c->ngroups; g++) {
			const tfa_profile_cleanup_group_t *cg = &p->cleanup_groups[c->first + g];
			char rbuf[2 * TFA_PROF_MAX_STRING + 2];
			const char *label = resource_label(p, cg->tag, rbuf, sizeof(rbuf));
			fputs("    ", f);
			text_bytes(f, cg->bytes);
			fputs(" in ", f);
			text_count(f, cg->blocks, "block", "blocks");
			fputs(" of ", f);
			text_str(f, label != NULL ? label : "?");
			fprintf(f, ", e.g. 0x%" PRIx64 "\n", cg->sample_address);
			text_stack(f, e, cg->stack_id);
		}
		if (c->f[TFA_CLEANF_GROUPS_DROPPED] != 0)
			fprintf(f, "    ... and %" PRIu64 " blocks in groups not recorded\n",
				c->f[TFA_CLEANF_GROUPS_DROPPED]);
	}
}

static void
text_process(FILE *f, struct report_entry *e)
{
	const tfa_profile_t *p = &e->prof;

	fprintf(f, "process %" PRIu32 " (parent %" PRIu32 "): ", p->pid, p->ppid);
	text_str(f, p->command[0] != '\0' ? p->command : p->comm);
	fputc('\n', f);
	fputs("  executable: ", f);
	text_str(f, p->exe);
	fputs("\n  profile:    ", f);
	text_str(f, e->file);
	fputc('\n', f);
	text_started(f, p);
	text_ended(f, p);
	if (!p->complete)
		fputs("  note:       a snapshot: the figures are those of the moment it was "
		      "written\n",
		      f);
	if (p->flags & TFA_PROC_FLAG_FORKED)
		fputs("  note:       a fork child: it inherited its parent's heap\n", f);
	if (p->flags & TFA_PROC_FLAG_DEGRADED)
		fputs("  note:       the shim ran out of memory and stopped recording: figures are "
		      "partial\n",
		      f);
	if (p->flags & TFA_PROC_FLAG_STACKS_LOST)
		fputs("  note:       the shim ran out of memory for call stacks: later new stacks are "
		      "missing (their allocations show under no stack)\n",
		      f);
	text_stacks_config(f, p);
	for (size_t i = 0; i < p->ndevices; i++)
		text_device(f, &p->devices[i]);
	text_resources(f, e);
	text_timeline(f, p);
	if (ropts.tables & TABLE_PEAK)
		text_site_table(f, e, TFA_SITEF_BYTES_AT_PEAK, "bytes at the peak");
	if (ropts.tables & TABLE_LEAKED)
		text_leaks(f, e);
	if (ropts.tables & TABLE_TOTAL)
		text_site_table(f, e, TFA_SITEF_TOTAL_BYTES, "bytes allocated");
	if (ropts.tables & TABLE_COUNT)
		text_site_table(f, e, TFA_SITEF_NUM_ALLOCS, "allocations");
	text_errors(f, e);
	text_cleanups(f, e);
}

/* "249.7K": a size in a column. */
static void
text_short_bytes(char *buf, size_t size, uint64_t v)
{
	static const char units[] = "KMGTP";

	if (v < 1024) {
		snprintf(buf, size, "%" PRIu64, v);
		return;
	}
	double x = (double)v / 1024;
	size_t u = 0;
	while (x >= 1024 && u + 1 < sizeof(units) - 1) {
		x /= 1024;
		u++;
	}
	snprintf(buf, size, "%.1f%c", x, units[u]);
}

/*
 * With several processes, first one line each: a run of hundreds of them (a
 * test suite, a shell script's subshells) is read from this table, and the
 * details below are found by pid.
 */
static void
text_overview(FILE *f, struct report *r)
{
	size_t forked = 0, execd = 0;

	for (size_t i = 0; i < r->n; i++) {
		forked += (r->entries[i].prof.flags & TFA_PROC_FLAG_FORKED) != 0;
		execd += r->entries[i].prof.end_reason == TFA_END_EXEC;
	}
	fprintf(f, "%zu processes (%zu forked, %zu %s replaced by exec); lost: definitely and "
	           "indirectly lost bytes\n",
	        r->n, forked, execd, execd == 1 ? "image" : "images");
	fprintf(f, "%8s %8s %-10s %9s %12s %9s %9s  %s\n", "pid", "ppid", "ended", "peak", "allocations",
	        "lost", "leaked", "command");
	for (size_t i = 0; i < r->n; i++) {
		const tfa_profile_t *p = &r->entries[i].prof;
		uint64_t peak = 0, allocs = 0, lost = 0, leaked = 0;
		char end[32], peak_s[16], lost_s[16], leaked_s[16];

		for (size_t d = 0; d < p->ndevices; d++) {
			peak += p->devices[d].f[TFA_DEV_PEAK_BYTES_IN_USE];
			allocs += p->devices[d].f[TFA_DEV_NUM_ALLOCS];
		}
		for (size_t k = 0; k < p->nleaks; k++) {
			leaked += leak_bytes(p, &p->leaks[k]);
			if (p->leaks[k].kind == TFA_LEAK_DEFINITE || p->leaks[k].kind == TFA_LEAK_INDIRECT)
				lost += p->leaks[k].f[TFA_LEAKF_BYTES];
		}
		switch (p->end_reason) {
		case TFA_END_EXIT: snprintf(end, sizeof(end), "exit %" PRId32, p->exit_code); break;
		case TFA_END_SIGNAL: snprintf(end, sizeof(end), "signal %" PRId32, p->exit_code); break;
		case TFA_END_EXEC: snprintf(end, sizeof(end), "exec"); break;
		case TFA_END_RUNNING: snprintf(end, sizeof(end), "running"); break;
		default: snprintf(end, sizeof(end), "unknown"); break;
		}
		text_short_bytes(peak_s, sizeof(peak_s), peak);
		text_short_bytes(lost_s, sizeof(lost_s), lost);
		text_short_bytes(leaked_s, sizeof(leaked_s), leaked);
		fprintf(f, "%8" PRIu32 " %8" PRIu32 " %-10s %9s %12" PRIu64 " %9s %9s  ", p->pid, p->ppid, end,
		        peak_s, allocs, lost_s, leaked_s);
		char cmd[81];
		snprintf(cmd, sizeof(cmd), "%s", p->command[0] != '\0' ? p->command : p->comm);
		text_str(f, cmd);
		fputs(strlen(p->command) > sizeof(cmd) - 1 ? "...\n" : "\n", f);
	}
	fputc('\n', f);
}

/* A file that could not serve as recorded, and why (tfa_sym_cache_problems). */
static void
text_symbol_problem(void *arg, const char *why)
{
	fprintf(arg, "symbols: %s\n", why);
}

static void
report_text(FILE *f, struct report *r)
{
	uint64_t allocs = 0, leak_bytes = 0, leak_blocks = 0, errors = 0;

	if (r->n > 1)
		text_overview(f, r);

	for (size_t i = 0; i < r->n; i++) {
		const tfa_profile_t *p = &r->entries[i].prof;
		struct error_sums s;
		uint64_t b, n;

		if (i > 0)
			fputc('\n', f);
		text_process(f, &r->entries[i]);
		for (size_t d = 0; d < p->ndevices; d++)
			allocs += p->devices[d].f[TFA_DEV_NUM_ALLOCS];
		report_leak_sums(p, &b, &n);
		leak_bytes += b;
		leak_blocks += n;
		report_error_sums(p, &s);
		errors += s.total;
	}
	if (r->n > 1) {
		fputs("\ntotal: ", f);
		text_count(f, r->n, "process", "processes");
		fputs(", ", f);
		text_count(f, allocs, "allocation", "allocations");
		fputs(", ", f);
		text_bytes(f, leak_bytes);
		fputs(" leaked in ", f);
		text_count(f, leak_blocks, "block", "blocks");
		fputs(", ", f);
		text_count(f, errors, "error", "errors");
		fputc('\n', f);
	}
	/* Why a file's frames are offsets (or come from another file): once, at the end, not in every stack. */
	tfa_sym_cache_problems(report_sym_cache, text_symbol_problem, f);
}

/* --------------------------------------------------------------------------
 * --diff A B: what grew between two runs, by site
 *
 * Addresses differ between runs (ASLR, another build), so sites are matched
 * by their symbolized stacks: each frame's function, file and line, or its
 * module and offset where nothing better is known.  Every process of a PATH
 * adds to it (a directory of a whole run is compared with another).
 */

enum diff_key_e { DK_PEAK, DK_LEAKED, DK_TOTAL, DK_COUNT, DK_N };

static const char *const diff_key_names[DK_N] = { "bytes_at_peak", "leaked_bytes", "total_bytes",
	                                          "num_allocs" };

struct diff_site {
	char *sig;      /* frames, innermost first: "function\x1ffile\x1fline\x1fmodule\x1e"... */
	double v[2][DK_N]; /* [0]: A, [1]: B */
};

struct diff {
	struct diff_site *sites;
	size_t n, cap;
	size_t *slots; /* open addressing over sites by signature; SIZE_MAX: empty */
	size_t nslots;
	double dev[2][DK_N]; /* the devices' figures: peak, bytes in use at the end, total, allocs */
	size_t nproc[2];
	bool oom;
};

struct sig_buf {
	char *s;
	size_t len, cap;
	bool oom;
};

static void
sig_put(struct sig_buf *b, const char *s)
{
	size_t n = strlen(s);

	if (b->len + n + 1 > b->cap) {
		size_t ncap = (b->cap == 0 ? 256 : b->cap * 2) + n;
		char *p = realloc(b->s, ncap);
		if (p == NULL) {
			b->oom = true;
			return;
		}
		b->s = p;
		b->cap = ncap;
	}
	memcpy(b->s + b->len, s, n + 1);
	b->len += n;
}

static void
sig_frame(void *ctx, unsigned index, const tfa_sym_frame_t *fr)
{
	struct sig_buf *b = ctx;
	char num[48];

	(void)index;
	sig_put(b, fr->function != NULL ? fr->function : "");
	sig_put(b, "\x1f");
	sig_put(b, fr->file != NULL ? fr->file : "");
	sig_put(b, "\x1f");
	snprintf(num, sizeof(num), "%" PRIu32, fr->line);
	sig_put(b, fr->line != 0 ? num : "");
	sig_put(b, "\x1f");
	if (fr->function == NULL && fr->file == NULL && fr->module != NULL) {
		/* Nothing better: the module's name and the offset, the same in every run. */
		snprintf(num, sizeof(num), "+0x%" PRIx64, fr->module_offset);
		sig_put(b, tfa_base_name(fr->module));
		sig_put(b, num);
	} else if (fr->module != NULL) {
		sig_put(b, tfa_base_name(fr->module));
	}
	sig_put(b, "\x1e");
}

static uint64_t
sig_hash(const char *s)
{
	uint64_t h = 1469598103934665603u;

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211u;
	return h;
}

/* The row of signature sig (taken over by the diff when new); NULL when memory ran out. */
static struct diff_site *
diff_row(struct diff *d, char *sig)
{
	if (d->n * 2 >= d->nslots) {
		size_t nslots = d->nslots == 0 ? 1024 : d->nslots * 2;
		size_t *slots = malloc(nslots * sizeof(*slots));
		if (slots == NULL)
			return NULL;
		for (size_t i = 0; i < nslots; i++)
			slots[i] = SIZE_MAX;
		for (size_t k = 0; k < d->n; k++) {
			size_t i = (size_t)sig_hash(d->sites[k].sig) & (nslots - 1);
			while (slots[i] != SIZE_MAX)
				i = (i + 1) & (nslots - 1);
			slots[i] = k;
		}
		free(d->slots);
		d->slots = slots;
		d->nslots = nslots;
	}
	size_t i = (size_t)sig_hash(sig) & (d->nslots - 1);
	for (; d->slots[i] != SIZE_MAX; i = (i + 1) & (d->nslots - 1)) {
		if (strcmp(d->sites[d->slots[i]].sig, sig) == 0) {
			free(sig);
			return &d->sites[d->slots[i]];
		}
	}
	void *arr = d->sites;
	if (report_push(&arr, d->n, &d->cap, sizeof(*d->sites)) < 0)
		return NULL;
	d->sites = arr;
	struct diff_site *row = &d->sites[d->n];
	memset(row, 0, sizeof(*row));
	row->sig = sig;
	d->slots[i] = d->n++;
	return row;
}

static void
diff_add(struct diff *d, struct report *r, int side)
{
	for (size_t i = 0; i < r->n; i++) {
		struct report_entry *e = &r->entries[i];
		const tfa_profile_t *p = &e->prof;

		d->nproc[side]++;
		for (size_t k = 0; k < p->ndevices; k++) {
			d->dev[side][DK_PEAK] += (double)p->devices[k].f[TFA_DEV_PEAK_BYTES_IN_USE];
			d->dev[side][DK_LEAKED] += (double)p->devices[k].f[TFA_DEV_BYTES_IN_USE];
			d->dev[side][DK_TOTAL] += (double)p->devices[k].f[TFA_DEV_TOTAL_BYTES];
			d->dev[side][DK_COUNT] += (double)p->devices[k].f[TFA_DEV_NUM_ALLOCS];
		}
		for (size_t k = 0; k < p->nsites && !d->oom; k++) {
			const tfa_profile_site_t *site = &p->sites[k];
			struct sig_buf b = { 0 };
			double v[TFA_SITEF_FIELD_COUNT];

			/* A device other than cpu is a pseudo-frame "[cuda:0]" first: its sites are not the cpu's. */
			if (site->device != NULL && strcmp(site->device, "cpu") != 0) {
				sig_put(&b, "[");
				sig_put(&b, site->device);
				sig_put(&b, "]\x1f\x1f\x1f\x1e");
			}
			if (!for_each_frame(e, site->stack_id, sig_frame, &b))
				sig_put(&b, "");
			if (b.oom) {
				free(b.s);
				d->oom = true;
				break;
			}
			struct diff_site *row = diff_row(d, b.s);
			if (row == NULL) {
				free(b.s);
				d->oom = true;
				break;
			}
			tfa_site_estimate(p, site, v);
			row->v[side][DK_PEAK] += v[TFA_SITEF_BYTES_AT_PEAK];
			row->v[side][DK_LEAKED] += p->complete ? v[TFA_SITEF_BYTES_IN_USE] : 0;
			row->v[side][DK_TOTAL] += v[TFA_SITEF_TOTAL_BYTES];
			row->v[side][DK_COUNT] += v[TFA_SITEF_NUM_ALLOCS];
		}
	}
}

static int diff_sort_key;

static int
diff_row_cmp(const void *a, const void *b)
{
	const struct diff_site *x = a, *y = b;
	double dx = x->v[1][diff_sort_key] - x->v[0][diff_sort_key];
	double dy = y->v[1][diff_sort_key] - y->v[0][diff_sort_key];

	if (dx != dy)
		return dx > dy ? -1 : 1;
	return strcmp(x->sig, y->sig);
}

/* Calls fn(ctx, function, file, line, module) for each frame of a signature. */
static void
diff_frames(const char *sig, void (*fn)(void *ctx, const char *const f[4]), void *ctx)
{
	char buf[4][1024];
	const char *fields[4];

	while (*sig != '\0') {
		for (int k = 0; k < 4; k++) {
			size_t n = strcspn(sig, k < 3 ? "\x1f" : "\x1e");
			snprintf(buf[k], sizeof(buf[k]), "%.*s", (int)TFA_MIN(n, sizeof(buf[k]) - 1), sig);
			fields[k] = buf[k];
			sig += n;
			if (*sig != '\0')
				sig++;
		}
		fn(ctx, fields);
	}
}

struct diff_text_frames {
	FILE *f;
	unsigned index;
	bool below_main;
};

static void
diff_text_frame(void *ctx, const char *const fld[4])
{
	struct diff_text_frames *t = ctx;

	if (t->below_main)
		return;
	t->below_main = strcmp(fld[0], "main") == 0;
	fprintf(t->f, "      #%u ", t->index++);
	text_str(t->f, fld[0][0] != '\0' ? fld[0] : fld[3]);
	if (fld[1][0] != '\0') {
		fputc(' ', t->f);
		text_str(t->f, fld[1]);
		if (fld[2][0] != '\0')
			fprintf(t->f, ":%s", fld[2]);
	}
	fputc('\n', t->f);
}

static void
text_signed_bytes(FILE *f, double delta)
{
	fputc(delta < 0 ? '-' : '+', f);
	text_bytes(f, round_u64(delta < 0 ? -delta : delta));
}

static void
diff_text(FILE *f, struct diff *d, const char *a, const char *b, int key)
{
	static const char *const labels[DK_N] = { "peak in use:", "in use at end:",
		                                  "total allocated:", "allocations:" };
	static const char *const titles[DK_N] = { "bytes at the peak", "bytes leaked",
		                                  "bytes allocated", "allocations" };

	fprintf(f, "diff: %s (%zu %s) -> %s (%zu %s)\n", a, d->nproc[0],
	        d->nproc[0] == 1 ? "process" : "processes", b, d->nproc[1],
	        d->nproc[1] == 1 ? "process" : "processes");
	for (int k = 0; k < DK_N; k++) {
		text_label(f, labels[k]);
		if (k == DK_COUNT)
			fprintf(f, "%" PRIu64 " -> %" PRIu64 " (%+.0f)\n", round_u64(d->dev[0][k]),
			        round_u64(d->dev[1][k]), d->dev[1][k] - d->dev[0][k]);
		else {
			text_bytes(f, round_u64(d->dev[0][k]));
			fputs(" -> ", f);
			text_bytes(f, round_u64(d->dev[1][k]));
			fputs(" (", f);
			text_signed_bytes(f, d->dev[1][k] - d->dev[0][k]);
			fputs(")\n", f);
		}
	}
	diff_sort_key = key;
	qsort(d->sites, d->n, sizeof(*d->sites), diff_row_cmp);
	for (int grew = 1; grew >= 0; grew--) {
		size_t n = 0;
		for (size_t i = 0; i < d->n; i++) {
			double delta = d->sites[i].v[1][key] - d->sites[i].v[0][key];
			n += grew ? delta >= 0.5 : delta <= -0.5;
		}
		size_t shown = ropts.top == 0 ? n : TFA_MIN(n, ropts.top);
		fprintf(f, "  sites that %s, by %s: %zu of %zu\n", grew ? "grew" : "shrank", titles[key],
		        shown, n);
		for (size_t k = 0, done = 0; k < d->n && done < shown; k++) {
			size_t i = grew ? k : d->n - 1 - k;
			const struct diff_site *s = &d->sites[i];
			double delta = s->v[1][key] - s->v[0][key];
			if (grew ? delta < 0.5 : delta > -0.5)
				continue;
			done++;
			fputs("    ", f);
			if (key == DK_COUNT) {
				fprintf(f, "%+.0f allocations (%" PRIu64 " -> %" PRIu64 ")", delta,
				        round_u64(s->v[0][key]), round_u64(s->v[1][key]));
			} else {
				text_signed_bytes(f, delta);
				fprintf(f, " (%" PRIu64 " -> %" PRIu64 " bytes)", round_u64(s->v[0][key]),
				        round_u64(s->v[1][key]));
			}
			for (int o = 0; o < DK_N; o++) {
				if (o == key)
					continue;
				fprintf(f, ", %s %" PRIu64 " -> %" PRIu64, o == DK_PEAK ? "at the peak"
				        : o == DK_LEAKED ? "leaked" : o == DK_TOTAL ? "total" : "allocations",
				        round_u64(s->v[0][o]), round_u64(s->v[1][o]));
			}
			fputc('\n', f);
			diff_frames(s->sig, diff_text_frame, &(struct diff_text_frames){ .f = f });
		}
	}
}

static void
diff_json_frame(void *ctx, const char *const fld[4])
{
	tfa_json_t *j = ctx;

	tfa_json_begin_compact_object(j);
	tfa_json_kv_string(j, "function", fld[0][0] != '\0' ? fld[0] : NULL);
	tfa_json_kv_string(j, "file", fld[1][0] != '\0' ? fld[1] : NULL);
	tfa_json_key(j, "line");
	if (fld[2][0] != '\0')
		tfa_json_number(j, fld[2]);
	else
		tfa_json_null(j);
	tfa_json_kv_string(j, "module", fld[3][0] != '\0' ? fld[3] : NULL);
	tfa_json_end_object(j);
}

static void
diff_json_side(tfa_json_t *j, const char *key, const double v[DK_N])
{
	tfa_json_key(j, key);
	tfa_json_begin_compact_object(j);
	for (int k = 0; k < DK_N; k++)
		tfa_json_kv_u64(j, diff_key_names[k], round_u64(v[k]));
	tfa_json_end_object(j);
}

static void
diff_json(FILE *f, struct diff *d, const char *a, const char *b, int key)
{
	tfa_json_t j;
	double delta[DK_N];

	tfa_json_init(&j, f);
	tfa_json_begin_object(&j);
	tfa_json_kv_string(&j, "a", a);
	tfa_json_kv_string(&j, "b", b);
	tfa_json_kv_u64(&j, "a_processes", d->nproc[0]);
	tfa_json_kv_u64(&j, "b_processes", d->nproc[1]);
	tfa_json_kv_string(&j, "sorted_by", diff_key_names[key]);
	diff_json_side(&j, "a_totals", d->dev[0]);
	diff_json_side(&j, "b_totals", d->dev[1]);
	diff_sort_key = key;
	qsort(d->sites, d->n, sizeof(*d->sites), diff_row_cmp);
	tfa_json_key(&j, "sites");
	tfa_json_begin_array(&j);
	for (size_t i = 0; i < d->n; i++) {
		const struct diff_site *s = &d->sites[i];
		tfa_json_begin_object(&j);
		diff_json_side(&j, "a", s->v[0]);
		diff_json_side(&j, "b", s->v[1]);
		tfa_json_key(&j, "delta");
		tfa_json_begin_compact_object(&j);
		for (int k = 0; k < DK_N; k++) {
			char num[48];
			delta[k] = s->v[1][k] - s->v[0][k];
			snprintf(num, sizeof(num), "%.0f", delta[k]);
			tfa_json_key(&j, diff_key_names[k]);
			tfa_json_number(&j, num);
		}
		tfa_json_end_object(&j);
		tfa_json_key(&j, "stack");
		tfa_json_begin_array(&j);
		diff_frames(s->sig, diff_json_frame, &j);
		tfa_json_end_array(&j);
		tfa_json_end_object(&j);
	}
	tfa_json_end_array(&j);
	tfa_json_end_object(&j);
}

static void
diff_free(struct diff *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->sites[i].sig);
	free(d->sites);
	free(d->slots);
}

/* The first table --by chose is the order of the diff (default: bytes at the peak). */
static int
diff_key_of_tables(unsigned tables)
{
	if (tables == TABLE_ALL || (tables & TABLE_PEAK))
		return DK_PEAK;
	if (tables & TABLE_LEAKED)
		return DK_LEAKED;
	if (tables & TABLE_TOTAL)
		return DK_TOTAL;
	return DK_COUNT;
}

/* --------------------------------------------------------------------------
 * Folded stacks and pprof (tools/folded.c, tools/pprof.c)
 */

static int
report_stacks(FILE *f, const struct report *r, enum report_format_e format, enum tfa_folded_by_e by)
{
	const tfa_profile_t **profs = calloc(r->n + 1, sizeof(*profs));
	char err[REPORT_ERRLEN];
	int rc;

	if (profs == NULL) {
		fputs("tfalloc: report: out of memory\n", stderr);
		return 1;
	}
	for (size_t i = 0; i < r->n; i++)
		profs[i] = &r->entries[i].prof;
	if (format == REPORT_PPROF)
		rc = tfa_pprof_write(f, profs, r->n, err, sizeof(err));
	else
		rc = tfa_folded_write(f, profs, r->n, by, err, sizeof(err));
	if (rc < 0)
		fprintf(stderr, "tfalloc: report: %s\n", err);
	free(profs);
	return rc < 0 ? 1 : 0;
}

/* --------------------------------------------------------------------------
 * The command
 */

static __attribute__((format(printf, 1, 2))) int
report_usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("tfalloc: report: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see 'tfalloc report --help')\n", stderr);
	return TFA_EXIT_USAGE;
}

static int
report_parse_top(const char *v)
{
	char *end;

	if (v[0] < '0' || v[0] > '9')
		return -1;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno != 0 || *end != '\0' || n > SIZE_MAX)
		return -1;
	ropts.top = (size_t)n;
	return 0;
}

static int
report_parse_by(const char *v)
{
	static const tfa_name_bits_t names[] = { { "peak", TABLE_PEAK }, { "leaked", TABLE_LEAKED },
		                                 { "total", TABLE_TOTAL }, { "count", TABLE_COUNT } };

	return tfa_parse_name_list(v, names, TFA_ARRAY_SIZE(names), &ropts.tables);
}

int
tfa_cmd_report(int argc, char **argv)
{
	enum report_format_e format = REPORT_TEXT;
	const char *out_path = NULL, *fmt = NULL, *top = NULL, *by_name = NULL;
	enum tfa_folded_by_e by = TFA_FOLDED_PEAK;
	struct report r;
	char **paths;
	size_t npaths = 0;
	bool options_done = false, diff = false;
	struct report rb;
	FILE *out = stdout;
	int status = 0;

	paths = calloc((size_t)argc, sizeof(*paths));
	if (paths == NULL) {
		fputs("tfalloc: report: out of memory\n", stderr);
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (options_done || a[0] != '-' || a[1] == '\0') {
			paths[npaths++] = argv[i];
		} else if (strcmp(a, "--") == 0) {
			options_done = true;
		} else if (strcmp(a, "--diff") == 0) {
			diff = true;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			tfa_report_usage(stdout);
			free(paths);
			return 0;
		} else if (strcmp(a, "--format") == 0 || strcmp(a, "-o") == 0
		           || strcmp(a, "--output") == 0 || strcmp(a, "--top") == 0
		           || strcmp(a, "--by") == 0) {
			if (i + 1 >= argc) {
				free(paths);
				return report_usage_error("option %s needs a value", a);
			}
			if (strcmp(a, "--format") == 0)
				fmt = argv[++i];
			else if (strcmp(a, "--top") == 0)
				top = argv[++i];
			else if (strcmp(a, "--by") == 0)
				by_name = argv[++i];
			else
				out_path = argv[++i];
		} else if (strncmp(a, "--format=", 9) == 0) {
			fmt = a + 9;
		} else if (strncmp(a, "--by=", 5) == 0) {
			by_name = a + 5;
		} else if (strncmp(a, "--output=", 9) == 0) {
			out_path = a + 9;
		} else if (strncmp(a, "--top=", 6) == 0) {
			top = a + 6;
		} else {
			free(paths);
			return report_usage_error("unknown option '%s'", tfa_shown(a));
		}
	}
	if (fmt != NULL && strcmp(fmt, "json") == 0) {
		format = REPORT_JSON;
	} else if (fmt != NULL && strcmp(fmt, "folded") == 0) {
		format = REPORT_FOLDED;
	} else if (fmt != NULL && strcmp(fmt, "pprof") == 0) {
		format = REPORT_PPROF;
	} else if (fmt != NULL && strcmp(fmt, "html") == 0) {
		format = REPORT_HTML;
	} else if (fmt != NULL && strcmp(fmt, "text") != 0) {
		free(paths);
		return report_usage_error("unknown format '%s' (text, json, folded, pprof or html)",
		                          tfa_shown(fmt));
	}
	if (by_name != NULL && format == REPORT_PPROF) {
		free(paths);
		return report_usage_error("option --by does not apply to pprof: it holds every figure");
	}
	if (by_name != NULL && format == REPORT_FOLDED && tfa_folded_by_parse(by_name, &by) < 0) {
		free(paths);
		return report_usage_error("unknown figure '%s' for --by (peak, leaked, in-use, "
		                          "total or count)",
		                          tfa_shown(by_name));
	}
	if (format == REPORT_PPROF && out_path == NULL && isatty(STDOUT_FILENO)) {
		free(paths);
		return report_usage_error("pprof output is binary: give -o FILE");
	}
	if (top != NULL && report_parse_top(top) < 0) {
		free(paths);
		return report_usage_error("--top '%s': not a count (0 for all)", tfa_shown(top));
	}
	if (by_name != NULL && format != REPORT_FOLDED && report_parse_by(by_name) < 0) {
		free(paths);
		return report_usage_error("--by '%s': a comma-separated list of peak, leaked, "
		                          "total, count", tfa_shown(by_name));
	}
	if (out_path != NULL && out_path[0] == '\0') {
		free(paths);
		return report_usage_error("option -o needs a file name");
	}
	if (npaths == 0) {
		free(paths);
		return report_usage_error("no profile file or directory given");
	}
	if (diff && (npaths != 2 || format > REPORT_JSON)) {
		free(paths);
		if (npaths != 2)
			return report_usage_error("--diff compares two PATHs, got %zu", npaths);
		return report_usage_error("--diff writes text or json");
	}

	memset(&r, 0, sizeof(r));
	memset(&rb, 0, sizeof(rb));
	for (size_t i = 0; i < (diff ? 1 : npaths); i++)
		report_read_path(&r, paths[i]);
	if (diff)
		report_read_path(&rb, paths[1]);
	if (r.nfailures > 0 || r.oom || rb.nfailures > 0 || rb.oom)
		status = 1;
	if (r.oom || rb.oom)
		fputs("tfalloc: report: out of memory\n", stderr);

	if (out_path != NULL) {
		out = fopen(out_path, "w");
		if (out == NULL) {
			fprintf(stderr, "tfalloc: report: %s: %s\n", tfa_shown(out_path), strerror(errno));
			report_free(&r);
			report_free(&rb);
			free(paths);
			return 1;
		}
	}
	if (diff) {
		struct diff d = { 0 };
		diff_add(&d, &r, 0);
		diff_add(&d, &rb, 1);
		if (d.oom) {
			fputs("tfalloc: report: out of memory\n", stderr);
			status = 1;
		} else if (format == REPORT_JSON) {
			diff_json(out, &d, paths[0], paths[1], diff_key_of_tables(ropts.tables));
		} else {
			diff_text(out, &d, paths[0], paths[1], diff_key_of_tables(ropts.tables));
		}
		diff_free(&d);
	} else if (format == REPORT_JSON) {
		if (report_json(out, &r) < 0) {
			fputs("tfalloc: report: out of memory (the stack table is incomplete)\n", stderr);
			status |= 1;
		}
	} else if (format == REPORT_FOLDED || format == REPORT_PPROF) {
		status |= report_stacks(out, &r, format, by);
	} else if (format == REPORT_HTML) {
		status |= report_html(out, &r) < 0;
	} else {
		report_text(out, &r);
	}
	if (fflush(out) != 0 || ferror(out)) {
		fprintf(stderr, "tfalloc: report: %s: %s\n", out_path ? tfa_shown(out_path) : "stdout",
		        strerror(errno));
		status = 1;
	}
	if (out != stdout && fclose(out) != 0) {
		fprintf(stderr, "tfalloc: report: %s: %s\n", tfa_shown(out_path), strerror(errno));
		status = 1;
	}
	report_free(&r);
	report_free(&rb);
	free(paths);
	return status;
}
