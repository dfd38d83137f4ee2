/* SPDX-License-Identifier: MIT */
/*
 * tfalloc report --format html: the page (tools/html.h).  This file writes
 * the frame of the page and the data; tools/html/report.js draws it.
 *
 * The data, one object per process (numbers are exact integers; site
 * figures rounded estimates when stacks were sampled):
 *
 *   {"pid", "ppid", "command", "exe", "comm", "file", "complete",
 *    "end_reason", "exit_code", "signal" (SIGxxx name or null), "forked",
 *    "degraded", "start_ns" (a string: more digits than a double holds),
 *    "duration_ns" (null when unknown), "tfalloc_version",
 *    "stacks": {"mode", "depth", "sample_bytes", "distinct"},
 *    "devices": [{"device", "allocator", "num_allocs", ...as in JSON}],
 *    "error_totals": {"double_free", "invalid_free", "mismatched_free", "not_recorded"},
 *    "errors": [{"kind", "address", "count", "detail", "stack", "alloc_stack"}],
 *    "timeline": {"interval_ns", "t_ns": [], "bytes_in_use": [], "allocated_bytes": [],
 *                 "rss_bytes": [], "flags": []},
 *    "sites": {"devices": [names], "device": [index into devices], "stack": [],
 *              "num_allocs": [], "total_bytes": [], "bytes_in_use": [],
 *              "blocks_in_use": [], "bytes_at_peak": []}: a column per field,
 *              the page makes one object per site of them,
 *    "leaks": [{"device", "kind", "bytes", "blocks", "allocated_bytes", "stack"}],
 *    "resources": [{"container", "type", "name", "state", "memory_used",
 *                   "peak_memory_used", "bytes_limit", "num_allocs", "total_bytes",
 *                   "leaked_bytes", "leaked_blocks"}],
 *    "stack_nodes": [caller node, frame index, ...]: the stacks as a tree
 *                   from main, node k (from 1) at 2 (k - 1); node 0 is the root,
 *    "stack_ids": [ID], "stack_leaves": [the node of each stack's innermost
 *                   frame]: the page walks up from a leaf for the stack's
 *                   frames, innermost first, as stacks_by_id,
 *    "cut_stacks": [IDs of the stacks cut at the recorded depth],
 *    "frames": [[name, file or null, line (0: unknown), module or null, inlined (0/1)]],
 *    "trimmed": frames outside main (the C runtime's start) were left out}
 *
 * Columns and a tree: `trees 16` with full stacks (100,585 sites and
 * stacks) made a 21.6 MB page when each site was an object with its keys
 * and each stack a list of frames.
 *
 * A stack id of 0, or one the profile does not hold, has no leaf.  Each stack stops at main, as the text report's do, or
 * before the C runtime's start (_start, __libc_start_main,
 * __libc_start_call_main) in a program without a main symbol.
 */
#include "tools/html.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"

/* The page's style and script: tools/html/report.{css,js}, made C strings by tools/html/embed.cmake. */
extern const char tfa_html_report_css[];
extern const char tfa_html_report_js[];

/* --------------------------------------------------------------------------
 * The JSON filter: '<', '>' and '&' never reach the page as they are.
 */

static ssize_t
html_data_write(void *cookie, const char *buf, size_t size)
{
	FILE *out = cookie;
	size_t i = 0;

	while (i < size) {
		size_t run = i;

		while (run < size && buf[run] != '<' && buf[run] != '>' && buf[run] != '&')
			run++;
		if (run > i && fwrite(buf + i, 1, run - i, out) != run - i)
			return 0;
		if (run == size)
			break;
		const char *esc = buf[run] == '<'   ? "\\u003c"
		                  : buf[run] == '>' ? "\\u003e"
		                                    : "\\u0026";
		if (fputs(esc, out) == EOF)
			return 0;
		i = run + 1;
	}
	return (ssize_t)size;
}

/* An array written on one line (numbers, frame indices). */
static void
json_begin_compact_array(tfa_json_t *j)
{
	tfa_json_begin_array(j);
	if (j->compact_from == 0)
		j->compact_from = j->depth - 1;
}

/* --------------------------------------------------------------------------
 * The frames of a process, each distinct one once.
 */

struct frame_entry {
	char *key;         /* name \0 file \0 module \0, then line and flags */
	size_t len;        /* of key */
	size_t file_off;   /* in key; 0: no file */
	size_t module_off; /* in key; 0: no module */
	uint32_t line;
	bool inlined;
};

struct frame_table {
	struct frame_entry *entries;
	size_t n, cap;
	uint32_t *slots; /* index + 1; 0: empty */
	size_t nslots;   /* a power of two */
	bool oom;
};

static uint64_t
frame_hash(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ull;
	}
	return h;
}

static int
frame_table_grow(struct frame_table *t)
{
	size_t nslots = t->nslots == 0 ? 256 : t->nslots * 2;
	uint32_t *slots = calloc(nslots, sizeof(*slots));

	if (slots == NULL)
		return -1;
	for (size_t i = 0; i < t->n; i++) {
		size_t k = frame_hash(t->entries[i].key, t->entries[i].len) & (nslots - 1);

		while (slots[k] != 0)
			k = (k + 1) & (nslots - 1);
		slots[k] = (uint32_t)(i + 1);
	}
	free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	return 0;
}

static void
frame_table_free(struct frame_table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->entries[i].key);
	free(t->entries);
	free(t->slots);
	memset(t, 0, sizeof(*t));
}

/* The index of the frame (name, file, line, module, inlined); -1 when memory ran out. */
static long
frame_index(struct frame_table *t, const char *name, const char *file, uint32_t line,
            const char *module, bool inlined)
{
	size_t nlen = strlen(name), flen = file ? strlen(file) : 0,
	       mlen = module ? strlen(module) : 0;
	size_t len = nlen + 1 + (file ? flen + 1 : 0) + (module ? mlen + 1 : 0) + sizeof(line) + 2;
	char *key = malloc(len), *k = key;

	if (key == NULL) {
		t->oom = true;
		return -1;
	}
	memcpy(k, name, nlen + 1);
	k += nlen + 1;
	size_t file_off = file ? (size_t)(k - key) : 0;
	if (file) {
		memcpy(k, file, flen + 1);
		k += flen + 1;
	}
	size_t module_off = module ? (size_t)(k - key) : 0;
	if (module) {
		memcpy(k, module, mlen + 1);
		k += mlen + 1;
	}
	memcpy(k, &line, sizeof(line));
	k += sizeof(line);
	*k++ = (char)((file ? 1 : 0) | (module ? 2 : 0));
	*k++ = (char)inlined;

	if ((t->n + 1) * 2 > t->nslots && frame_table_grow(t) < 0) {
		free(key);
		t->oom = true;
		return -1;
	}
	size_t s = frame_hash(key, len) & (t->nslots - 1);
	for (; t->slots[s] != 0; s = (s + 1) & (t->nslots - 1)) {
		const struct frame_entry *e = &t->entries[t->slots[s] - 1];

		if (e->len == len && memcmp(e->key, key, len) == 0) {
			free(key);
			return (long)(t->slots[s] - 1);
		}
	}
	if (t->n == t->cap) {
		size_t ncap = t->cap == 0 ? 256 : t->cap * 2;
		struct frame_entry *ne =
		        t->n < UINT32_MAX - 1 ? realloc(t->entries, ncap * sizeof(*ne)) : NULL;

		if (ne == NULL) {
			free(key);
			t->oom = true;
			return -1;
		}
		t->entries = ne;
		t->cap = ncap;
	}
	t->entries[t->n] = (struct frame_entry){ .key = key,
		                                 .len = len,
		                                 .file_off = file_off,
		                                 .module_off = module_off,
		                                 .line = line,
		                                 .inlined = inlined };
	t->slots[s] = (uint32_t)(t->n + 1);
	return (long)t->n++;
}

/* --------------------------------------------------------------------------
 * One process
 */

/*
 * The stacks' tree: node k (from 1) is a frame called from node parent[k]
 * (0: from the root), found by (parent, frame) in an open-addressed index.
 */
struct stack_tree {
	uint32_t *parent, *frame; /* [0] unused */
	size_t n, cap;            /* nodes, including the unused 0 */
	uint32_t *slots;          /* node numbers, 0: empty */
	size_t nslots;
	bool oom;
};

struct html_proc {
	tfa_html_t *h;
	const tfa_profile_t *p;
	tfa_profile_symbols_t *sym;
	struct frame_table frames;
	bool trimmed; /* a stack lost frames outside main */
	/* The frames of the stack being read, innermost first. */
	uint32_t *cur;
	size_t ncur, capcur;
	struct stack_tree tree;
};

static size_t
tree_hash(uint32_t parent, uint32_t frame, size_t nslots)
{
	uint64_t k = ((uint64_t)parent << 32 | frame) * UINT64_C(0x9E3779B97F4A7C15);

	return (size_t)(k >> 32) & (nslots - 1);
}

static bool
tree_grow(struct stack_tree *t)
{
	size_t cap = t->cap == 0 ? 1024 : t->cap * 2, nslots = cap * 2;
	uint32_t *parent = realloc(t->parent, cap * sizeof(*parent));
	if (parent != NULL)
		t->parent = parent;
	uint32_t *frame = parent != NULL ? realloc(t->frame, cap * sizeof(*frame)) : NULL;
	if (frame != NULL)
		t->frame = frame;
	uint32_t *slots = frame != NULL ? calloc(nslots, sizeof(*slots)) : NULL;
	if (slots == NULL)
		return false;
	if (t->n == 0)
		t->n = 1; /* node 0: the root */
	for (size_t k = 1; k < t->n; k++) {
		size_t i = tree_hash(t->parent[k], t->frame[k], nslots);
		while (slots[i] != 0)
			i = (i + 1) & (nslots - 1);
		slots[i] = (uint32_t)k;
	}
	free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	t->cap = cap;
	return true;
}

/* The node of frame called from parent, made when new; 0 without memory. */
static uint32_t
tree_node(struct stack_tree *t, uint32_t parent, uint32_t frame)
{
	if (t->n + 1 >= t->cap && !tree_grow(t)) {
		t->oom = true;
		return 0;
	}
	size_t i = tree_hash(parent, frame, t->nslots);
	for (; t->slots[i] != 0; i = (i + 1) & (t->nslots - 1)) {
		uint32_t k = t->slots[i];
		if (t->parent[k] == parent && t->frame[k] == frame)
			return k;
	}
	uint32_t k = (uint32_t)t->n++;
	t->parent[k] = parent;
	t->frame[k] = frame;
	t->slots[i] = k;
	return k;
}

static void
tree_free(struct stack_tree *t)
{
	free(t->parent);
	free(t->frame);
	free(t->slots);
}

/* The index in p->stacks of stack id, or -1. */
static long
stack_index(const tfa_profile_t *p, uint32_t id)
{
	size_t lo = 0, hi = p->nstacks;

	if (id == 0)
		return -1;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->stacks[mid].id == id)
			return (long)mid;
		if (p->stacks[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* The C runtime's start, which calls main: left out of stacks. */
static bool
html_is_start(const char *function)
{
	return strcmp(function, "_start") == 0 || strcmp(function, "__libc_start_call_main") == 0
	       || strncmp(function, "__libc_start_main", 17) == 0;
}

/*
 * Adds frame fr of a stack as its index; returns false when the stack ends
 * here: after main, or before the C runtime's start when there is no main
 * (a stripped program).
 */
static bool
html_frame(struct html_proc *hp, const tfa_sym_frame_t *fr)
{
	char name[1024];
	long idx;

	if (fr->function != NULL && html_is_start(fr->function)) {
		hp->trimmed = true;
		return false;
	}
	tfa_frame_name(fr, name, sizeof(name));
	idx = frame_index(&hp->frames, name, fr->file, fr->file != NULL ? fr->line : 0, fr->module,
	                  (fr->flags & TFA_SYM_INLINED) != 0);
	if (idx >= 0) {
		if (hp->ncur == hp->capcur) {
			size_t cap = hp->capcur == 0 ? 64 : hp->capcur * 2;
			uint32_t *cur = realloc(hp->cur, cap * sizeof(*cur));
			if (cur == NULL) {
				hp->tree.oom = true;
				return false;
			}
			hp->cur = cur;
			hp->capcur = cap;
		}
		hp->cur[hp->ncur++] = (uint32_t)idx;
	}
	return !(fr->function != NULL && strcmp(fr->function, "main") == 0);
}

/*
 * The frames of stack si, innermost first, up to main, into the tree: *leaf
 * is the node of its innermost frame (0: no frame).  Returns true when the
 * stack was cut at the recorded depth (its outermost frames are missing).
 */
static bool
html_stack(struct html_proc *hp, size_t si, uint32_t *leaf)
{
	const tfa_profile_t *p = hp->p;
	const tfa_profile_stack_t *st = &p->stacks[si];
	const uint64_t *pcs = &p->pcs[st->first];
	bool more = true;

	hp->ncur = 0;
	for (uint32_t i = 0; i < st->depth && more; i++) {
		tfa_sym_frame_t fallback;
		const tfa_sym_frame_t *frames;
		size_t n;

		tfa_pc_frames(hp->sym, p, st->id, pcs[i], &fallback, &frames, &n);
		for (size_t k = 0; k < n && more; k++)
			more = html_frame(hp, &frames[k]);
		if (!more && i + 1 < st->depth)
			hp->trimmed = true;
	}
	uint32_t node = 0;
	for (size_t k = hp->ncur; k > 0; k--)
		node = tree_node(&hp->tree, node, hp->cur[k - 1]);
	*leaf = node;
	return more && p->stack_depth != 0 && st->depth >= p->stack_depth;
}

/* The stacks that sites, leaks and errors refer to. */
static void
html_stacks(struct html_proc *hp)
{
	const tfa_profile_t *p = hp->p;
	tfa_json_t *j = &hp->h->j;
	uint8_t *used = calloc(p->nstacks != 0 ? p->nstacks : 1, sizeof(*used)); /* 1: used, 2: and cut */
	long k;

	uint32_t *leaves = calloc(p->nstacks != 0 ? p->nstacks : 1, sizeof(*leaves));

	if (used == NULL || leaves == NULL) {
		hp->h->oom = true;
		free(used);
		free(leaves);
		return;
	}
	for (size_t i = 0; i < p->nsites; i++)
		if ((k = stack_index(p, p->sites[i].stack_id)) >= 0)
			used[k] = true;
	for (size_t i = 0; i < p->nleaks; i++)
		if ((k = stack_index(p, p->leaks[i].stack_id)) >= 0)
			used[k] = true;
	for (size_t i = 0; i < p->nerrors; i++) {
		if ((k = stack_index(p, p->errors[i].stack_id)) >= 0)
			used[k] = true;
		if ((k = stack_index(p, p->errors[i].alloc_stack_id)) >= 0)
			used[k] = true;
	}
	for (size_t i = 0; i < p->nstacks; i++) {
		bool cut = used[i] && html_stack(hp, i, &leaves[i]);
		if (used[i] && leaves[i] == 0 && hp->ncur != 0)
			used[i] = false; /* no memory for its nodes */
		else if (used[i])
			used[i] = cut ? 2 : 1;
	}
	if (hp->tree.oom)
		hp->h->oom = true;
	tfa_json_key(j, "stack_nodes");
	json_begin_compact_array(j);
	for (size_t node = 1; node < hp->tree.n; node++) {
		tfa_json_u64(j, hp->tree.parent[node]);
		tfa_json_u64(j, hp->tree.frame[node]);
	}
	tfa_json_end_array(j);
	tfa_json_key(j, "stack_ids");
	json_begin_compact_array(j);
	for (size_t i = 0; i < p->nstacks; i++)
		if (used[i])
			tfa_json_u64(j, p->stacks[i].id);
	tfa_json_end_array(j);
	tfa_json_key(j, "stack_leaves");
	json_begin_compact_array(j);
	for (size_t i = 0; i < p->nstacks; i++)
		if (used[i])
			tfa_json_u64(j, leaves[i]);
	tfa_json_end_array(j);
	free(leaves);
	/* The stacks cut at the depth limit: the page groups them apart. */
	tfa_json_key(j, "cut_stacks");
	json_begin_compact_array(j);
	for (size_t i = 0; i < p->nstacks; i++)
		if (used[i] == 2)
			tfa_json_u64(j, p->stacks[i].id);
	tfa_json_end_array(j);
	free(used);
}

static void
html_frames(struct html_proc *hp)
{
	tfa_json_t *j = &hp->h->j;

	tfa_json_key(j, "frames");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < hp->frames.n; i++) {
		const struct frame_entry *e = &hp->frames.entries[i];

		json_begin_compact_array(j);
		tfa_json_string(j, e->key);
		tfa_json_string(j, e->file_off != 0 ? e->key + e->file_off : NULL);
		tfa_json_u64(j, e->line);
		tfa_json_string(j, e->module_off != 0 ? e->key + e->module_off : NULL);
		tfa_json_u64(j, e->inlined ? 1 : 0);
		tfa_json_end_array(j);
	}
	tfa_json_end_array(j);
}

static void
html_devices(tfa_json_t *j, const tfa_profile_t *p)
{
	tfa_json_key(j, "resources");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->nresources; i++) {
		const tfa_profile_resource_t *r = &p->resources[i];
		uint64_t allocs = 0, total = 0, lb, ln;

		for (size_t d = 0; d < r->ndevices; d++) {
			allocs += p->res_devices[r->first + d].f[TFA_RESD_NUM_ALLOCS];
			total += p->res_devices[r->first + d].f[TFA_RESD_TOTAL_BYTES];
		}
		tfa_profile_resource_leaks(p, r->tag, &lb, &ln);
		tfa_json_begin_compact_object(j);
		tfa_json_kv_string(j, "container", r->container);
		tfa_json_kv_string(j, "type", r->type);
		tfa_json_kv_string(j, "name", r->name);
		tfa_json_kv_string(j, "state", tfa_prof_resource_state_name(r->state));
		tfa_json_kv_u64(j, "memory_used", r->f[TFA_RESF_MEMORY_USED]);
		tfa_json_kv_u64(j, "peak_memory_used", r->f[TFA_RESF_PEAK_MEMORY_USED]);
		tfa_json_kv_u64(j, "bytes_limit", r->f[TFA_RESF_BYTES_LIMIT]);
		tfa_json_kv_u64(j, "num_allocs", allocs);
		tfa_json_kv_u64(j, "total_bytes", total);
		tfa_json_kv_u64(j, "leaked_bytes", lb);
		tfa_json_kv_u64(j, "leaked_blocks", ln);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	tfa_json_key(j, "devices");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->ndevices; i++) {
		const tfa_profile_device_t *d = &p->devices[i];

		tfa_json_begin_compact_object(j);
		tfa_json_kv_string(j, "device", d->name);
		tfa_json_kv_string(j, "allocator", d->allocator);
		for (size_t k = 0; k < tfa_profile_device_fields_shown(d); k++)
			tfa_json_kv_u64(j, tfa_prof_device_field_name((unsigned)k), d->f[k]);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);
}

static void
html_errors(tfa_json_t *j, const tfa_profile_t *p)
{
	uint64_t sums[TFA_ERRC_FIELD_COUNT];
	char addr[32];

	(void)tfa_profile_error_sums(p, sums);
	tfa_json_key(j, "error_totals");
	tfa_json_begin_compact_object(j);
	for (size_t k = 0; k < TFA_ERRC_FIELD_COUNT; k++)
		tfa_json_kv_u64(j, tfa_prof_error_count_name((unsigned)k), sums[k]);
	tfa_json_end_object(j);

	tfa_json_key(j, "errors");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->nerrors; i++) {
		const tfa_profile_error_t *e = &p->errors[i];

		tfa_json_begin_compact_object(j);
		tfa_json_kv_string(j, "kind", tfa_prof_error_kind_name(e->kind));
		snprintf(addr, sizeof(addr), "0x%" PRIx64, e->address);
		tfa_json_kv_string(j, "address", addr);
		tfa_json_kv_u64(j, "count", e->count);
		tfa_json_kv_string(j, "detail", e->detail);
		tfa_json_kv_u64(j, "stack", e->stack_id);
		tfa_json_kv_u64(j, "alloc_stack", e->alloc_stack_id);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);
}

static void
html_timeline(tfa_json_t *j, const tfa_profile_t *p)
{
	tfa_json_key(j, "timeline");
	tfa_json_begin_object(j);
	tfa_json_kv_u64(j, "interval_ns", p->timeline_interval_ns);
	for (int col = 0; col < 5; col++) {
		static const char *const names[] = { "t_ns", "bytes_in_use", "allocated_bytes",
			                             "rss_bytes", "flags" };

		tfa_json_key(j, names[col]);
		json_begin_compact_array(j);
		for (size_t i = 0; i < p->ntimeline; i++) {
			const tfa_profile_point_t *pt = &p->timeline[i];
			uint64_t v = col == 0   ? pt->t_ns
			             : col == 1 ? pt->bytes_in_use
			             : col == 2 ? pt->allocated_bytes
			             : col == 3 ? pt->rss_bytes
			                        : pt->flags;

			tfa_json_u64(j, v);
		}
		tfa_json_end_array(j);
	}
	tfa_json_end_object(j);

	/* The CUDA devices' series: bytes in use only. */
	tfa_json_key(j, "device_timelines");
	tfa_json_begin_array(j);
	for (size_t d = 0; d < p->ndev_timelines; d++) {
		const tfa_profile_dev_timeline_t *t = &p->dev_timelines[d];

		tfa_json_begin_object(j);
		tfa_json_kv_string(j, "device", t->device);
		tfa_json_kv_u64(j, "interval_ns", t->interval_ns);
		for (int col = 0; col < 3; col++) {
			static const char *const names[] = { "t_ns", "bytes_in_use", "flags" };

			tfa_json_key(j, names[col]);
			json_begin_compact_array(j);
			for (size_t i = 0; i < t->n; i++) {
				const tfa_profile_point_t *pt = &p->dev_points[t->first + i];
				tfa_json_u64(j, col == 0 ? pt->t_ns : col == 1 ? pt->bytes_in_use : pt->flags);
			}
			tfa_json_end_array(j);
		}
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);
}

static uint64_t
html_round(double v)
{
	return v <= 0 ? 0 : v >= 1.8e19 ? UINT64_MAX : (uint64_t)(v + 0.5);
}

static void
html_sites(tfa_json_t *j, const tfa_profile_t *p)
{
	static const char *const keys[TFA_SITEF_FIELD_COUNT] = {
		[TFA_SITEF_NUM_ALLOCS] = "num_allocs",
		[TFA_SITEF_TOTAL_BYTES] = "total_bytes",
		[TFA_SITEF_BYTES_IN_USE] = "bytes_in_use",
		[TFA_SITEF_BLOCKS_IN_USE] = "blocks_in_use",
		[TFA_SITEF_BYTES_AT_PEAK] = "bytes_at_peak",
	};
	/* The devices' names, each once: a site's is an index (a profile has a few devices). */
	const char *names[64];
	size_t nnames = 0;

	tfa_json_key(j, "sites");
	tfa_json_begin_object(j);
	tfa_json_key(j, "devices");
	json_begin_compact_array(j);
	for (size_t i = 0; i < p->nsites; i++) {
		size_t d = 0;
		while (d < nnames && strcmp(names[d], p->sites[i].device) != 0)
			d++;
		if (d == nnames && nnames < TFA_ARRAY_SIZE(names)) {
			names[nnames++] = p->sites[i].device;
			tfa_json_string(j, p->sites[i].device);
		}
	}
	tfa_json_end_array(j);
	tfa_json_key(j, "device");
	json_begin_compact_array(j);
	for (size_t i = 0; i < p->nsites; i++) {
		size_t d = 0;
		while (d < nnames && strcmp(names[d], p->sites[i].device) != 0)
			d++;
		tfa_json_u64(j, d < nnames ? d : 0);
	}
	tfa_json_end_array(j);
	tfa_json_key(j, "stack");
	json_begin_compact_array(j);
	for (size_t i = 0; i < p->nsites; i++)
		tfa_json_u64(j, p->sites[i].stack_id);
	tfa_json_end_array(j);
	for (size_t k = 0; k < TFA_SITEF_FIELD_COUNT; k++) {
		tfa_json_key(j, keys[k]);
		json_begin_compact_array(j);
		for (size_t i = 0; i < p->nsites; i++) {
			double v[TFA_SITEF_FIELD_COUNT];
			tfa_site_estimate(p, &p->sites[i], v);
			tfa_json_u64(j, html_round(v[k]));
		}
		tfa_json_end_array(j);
	}
	tfa_json_end_object(j);
}

static void
html_leaks(tfa_json_t *j, const tfa_profile_t *p)
{
	tfa_json_key(j, "leaks");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->nleaks; i++) {
		const tfa_profile_leak_t *l = &p->leaks[i];

		tfa_json_begin_compact_object(j);
		tfa_json_kv_string(j, "device", l->device);
		/* Sample-only tracking: what the sampled blocks stand for, as "estimated" ones. */
		bool est = p->has_config && p->track == TFA_PROF_TRACK_SAMPLED;
		tfa_json_kv_string(j, "kind", est ? "estimated" : tfa_prof_leak_kind_name(l->kind));
		tfa_json_kv_u64(j, "bytes", l->f[est ? TFA_LEAKF_EST_BYTES : TFA_LEAKF_BYTES]);
		tfa_json_kv_u64(j, "blocks", l->f[est ? TFA_LEAKF_EST_BLOCKS : TFA_LEAKF_BLOCKS]);
		tfa_json_kv_u64(j, "allocated_bytes", l->f[TFA_LEAKF_ALLOCATED_BYTES]);
		tfa_json_kv_u64(j, "stack", l->stack_id);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);
}

void
tfa_html_process(tfa_html_t *h, const tfa_profile_t *p, const char *file,
                 tfa_profile_symbols_t *sym)
{
	struct html_proc hp = { .h = h, .p = p, .sym = sym };
	tfa_json_t *j = &h->j;
	char num[32];

	if (h->data == NULL)
		return;
	h->nprocesses++;
	tfa_json_begin_object(j);
	tfa_json_kv_u64(j, "pid", p->pid);
	tfa_json_kv_u64(j, "ppid", p->ppid);
	tfa_json_kv_string(j, "command", p->command);
	tfa_json_kv_string(j, "exe", p->exe);
	tfa_json_kv_string(j, "comm", p->comm);
	tfa_json_kv_string(j, "file", file);
	tfa_json_kv_bool(j, "complete", p->complete);
	tfa_json_kv_string(j, "end_reason", tfa_prof_end_reason_name(p->end_reason));
	tfa_json_kv_i64(j, "exit_code", p->exit_code);
	tfa_json_key(j, "signal");
	if (p->end_reason == TFA_END_SIGNAL && p->exit_code > 0 && p->exit_code < 128
	    && sigabbrev_np((int)p->exit_code) != NULL) {
		snprintf(num, sizeof(num), "SIG%s", sigabbrev_np((int)p->exit_code));
		tfa_json_string(j, num);
	} else {
		tfa_json_null(j);
	}
	tfa_json_kv_bool(j, "forked", (p->flags & TFA_PROC_FLAG_FORKED) != 0);
	tfa_json_kv_bool(j, "degraded", (p->flags & TFA_PROC_FLAG_DEGRADED) != 0);
	tfa_json_kv_bool(j, "stacks_lost", (p->flags & TFA_PROC_FLAG_STACKS_LOST) != 0);
	snprintf(num, sizeof(num), "%" PRIu64, p->start_ns);
	tfa_json_kv_string(j, "start_ns", num);
	tfa_json_key(j, "duration_ns");
	if (p->end_ns != 0 && p->end_ns >= p->start_ns)
		tfa_json_u64(j, p->end_ns - p->start_ns);
	else
		tfa_json_null(j);
	tfa_json_kv_string(j, "tfalloc_version", p->tfalloc_version);

	tfa_json_key(j, "stacks");
	tfa_json_begin_compact_object(j);
	tfa_json_kv_string(j, "mode",
	                   p->has_config ? tfa_prof_stacks_mode_name(p->stacks_mode) : "none");
	tfa_json_kv_u64(j, "depth", p->stack_depth);
	tfa_json_kv_u64(j, "sample_bytes", p->sample_bytes);
	tfa_json_kv_u64(j, "distinct", p->nstacks);
	tfa_json_end_object(j);

	html_devices(j, p);
	html_errors(j, p);
	html_timeline(j, p);
	html_sites(j, p);
	html_leaks(j, p);
	html_stacks(&hp);
	html_frames(&hp);
	tfa_json_kv_bool(j, "trimmed", hp.trimmed);
	tfa_json_end_object(j);
	if (hp.frames.oom)
		h->oom = true;
	frame_table_free(&hp.frames);
	tree_free(&hp.tree);
	free(hp.cur);
}

/* --------------------------------------------------------------------------
 * The page
 */

void
tfa_html_begin(tfa_html_t *h, FILE *out)
{
	static const cookie_io_functions_t io = { .write = html_data_write };

	memset(h, 0, sizeof(*h));
	h->out = out;
	fputs("<!DOCTYPE html>\n"
	      "<html lang=\"en\">\n"
	      "<head>\n"
	      "<meta charset=\"utf-8\">\n"
	      /* Everything is in the page: nothing may be fetched, whatever the data holds. */
	      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
	      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
	      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
	      "<meta name=\"generator\" content=\"tfalloc " TFA_VERSION "\">\n"
	      "<title>tfalloc report</title>\n"
	      "<style>\n",
	      out);
	fputs(tfa_html_report_css, out);
	fputs("</style>\n"
	      "</head>\n"
	      "<body>\n"
	      "<div id=\"tfa-status\" data-ok=\"0\" hidden>loading</div>\n"
	      "<noscript><p>This report is drawn by its script: allow JavaScript to see "
	      "it.</p></noscript>\n"
	      "<div id=\"tfa-app\"></div>\n"
	      "<script type=\"application/json\" id=\"tfa-data\">\n",
	      out);
	h->data = fopencookie(out, "w", io);
	if (h->data == NULL) {
		h->oom = true;
		return;
	}
	tfa_json_init(&h->j, h->data);
	tfa_json_begin_object(&h->j);
	tfa_json_kv_string(&h->j, "tfalloc_version", TFA_VERSION);
	tfa_json_key(&h->j, "processes");
	tfa_json_begin_array(&h->j);
}

int
tfa_html_end(tfa_html_t *h, char *const *unreadable, size_t nunreadable, char *const *symbols,
             size_t nsymbols)
{
	if (h->data != NULL) {
		tfa_json_end_array(&h->j);
		tfa_json_key(&h->j, "unreadable");
		tfa_json_begin_array(&h->j);
		for (size_t i = 0; i < nunreadable; i++)
			tfa_json_string(&h->j, unreadable[i]);
		tfa_json_end_array(&h->j);
		tfa_json_key(&h->j, "symbols");
		tfa_json_begin_array(&h->j);
		for (size_t i = 0; i < nsymbols; i++)
			tfa_json_string(&h->j, symbols[i]);
		tfa_json_end_array(&h->j);
		tfa_json_end_object(&h->j);
		/* A write error of the filter shows on out, where the caller looks. */
		if (fclose(h->data) != 0 && !ferror(h->out))
			h->oom = true;
		h->data = NULL;
	} else {
		fputs("{\"tfalloc_version\": \"" TFA_VERSION "\", \"processes\": [], "
		      "\"unreadable\": [\"out of memory\"], \"symbols\": []}\n",
		      h->out);
	}
	fputs("</script>\n<script>\n", h->out);
	fputs(tfa_html_report_js, h->out);
	fputs("</script>\n</body>\n</html>\n", h->out);
	if (h->oom) {
		fputs("tfalloc: report: out of memory\n", stderr);
		return -1;
	}
	return 0;
}
