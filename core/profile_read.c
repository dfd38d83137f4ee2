/* SPDX-License-Identifier: MIT */
/*
 * The reader of profile files.  See core/profile_read.h for what it accepts
 * and core/profile_format.h for the layout.
 *
 * Every read goes through a cursor that knows how many bytes its record has
 * left, so no length in the file can make the parser look outside the
 * buffer; the memory taken is a small multiple of the file's size.
 */
#include "core/profile_read.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"

#define REC_HEAD  8u /* u32 type, u32 length */
#define REC_CRC   4u
#define REC_EXTRA (REC_HEAD + REC_CRC)

/* Strings live in chunks of this size, owned by the profile. */
#define STRING_CHUNK ((size_t)64 << 10)

struct string_chunk {
	struct string_chunk *next;
	size_t used;
	char data[];
};

struct tfa_profile_strings {
	struct string_chunk *head;
};

struct parser {
	const uint8_t *data;
	size_t len;
	const char *name;
	char *err;
	size_t errlen;
	tfa_profile_t *prof;
	size_t ndevices_cap;
	size_t nleaks_cap;
	size_t nerrors_cap;
	size_t nmodules_cap;
	size_t nstacks_cap;
	size_t npcs_cap;
	size_t nsites_cap;
	size_t ntimeline_cap;
	size_t ndev_timelines_cap;
	size_t ndev_points_cap;
	size_t nresources_cap;
	size_t nres_devices_cap;
	size_t ncleanups_cap;
	size_t ncleanup_groups_cap;
	/* TFA_REC_STACK_NODES so far, by number - 1: what the leaves' stacks are made of. */
	struct read_node *nodes;
	size_t nnodes;
	size_t nnodes_cap;
};

struct read_node {
	uint64_t pc;
	uint32_t parent; /* 0: an outermost frame */
	uint32_t depth;  /* frames from this one to the root */
};

/* One record's payload, read front to back. */
struct record {
	struct parser *ps;
	const char *what; /* "process record", for messages */
	size_t pos;       /* file offset of the next field */
	size_t end;       /* file offset just past the payload */
};

static uint32_t
get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static __attribute__((format(printf, 4, 0))) void
set_error(char *err, size_t errlen, const char *name, const char *fmt, va_list ap)
{
	int n;

	if (err == NULL || errlen == 0)
		return;
	n = snprintf(err, errlen, "%s: ", name);
	if (n < 0 || (size_t)n >= errlen)
		return;
	vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
}

static __attribute__((format(printf, 2, 3))) int
fail(struct parser *ps, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	set_error(ps->err, ps->errlen, ps->name, fmt, ap);
	va_end(ap);
	return -1;
}

static __attribute__((format(printf, 3, 4))) int
fail_at(struct parser *ps, size_t off, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return fail(ps, "offset %zu: %s", off, what);
}

static int
fail_oom(struct parser *ps)
{
	return fail(ps, "out of memory");
}

/* A copy of len bytes of s, NUL-terminated, owned by the profile's string chunks. */
static char *
strings_add(struct tfa_profile_strings *st, const uint8_t *s, size_t len)
{
	struct string_chunk *c = st->head;
	char *copy;

	if (c == NULL || STRING_CHUNK - c->used < len + 1) {
		size_t size = TFA_MAX(STRING_CHUNK, len + 1);

		c = malloc(sizeof(*c) + size);
		if (c == NULL)
			return NULL;
		c->next = st->head;
		c->used = 0;
		st->head = c;
	}
	copy = c->data + c->used;
	if (len > 0)
		memcpy(copy, s, len);
	copy[len] = '\0';
	c->used += len + 1;
	return copy;
}

static void
strings_free(struct tfa_profile_strings *st)
{
	if (st == NULL)
		return;
	while (st->head != NULL) {
		struct string_chunk *next = st->head->next;

		free(st->head);
		st->head = next;
	}
	free(st);
}

static size_t
record_left(const struct record *r)
{
	return r->end - r->pos;
}

static int
read_u32(struct record *r, const char *field, uint32_t *v)
{
	if (record_left(r) < 4)
		return fail_at(r->ps, r->pos,
		               "%s: field '%s' overruns its record (4 bytes needed, %zu left)",
		               r->what, field, record_left(r));
	*v = get_u32(r->ps->data + r->pos);
	r->pos += 4;
	return 0;
}

static int
read_u64(struct record *r, const char *field, uint64_t *v)
{
	if (record_left(r) < 8)
		return fail_at(r->ps, r->pos,
		               "%s: field '%s' overruns its record (8 bytes needed, %zu left)",
		               r->what, field, record_left(r));
	*v = get_u64(r->ps->data + r->pos);
	r->pos += 8;
	return 0;
}

static int
read_str(struct record *r, const char *field, char **s)
{
	size_t at = r->pos;
	uint32_t n;

	if (read_u32(r, field, &n) < 0)
		return -1;
	if (n > TFA_PROF_MAX_STRING)
		return fail_at(r->ps, at,
		               "%s: string '%s' of %" PRIu32 " bytes is longer than the maximum %u",
		               r->what, field, n, TFA_PROF_MAX_STRING);
	if (n > record_left(r))
		return fail_at(r->ps, at,
		               "%s: string '%s' of %" PRIu32
		               " bytes overruns its record (%zu bytes left)",
		               r->what, field, n, record_left(r));
	*s = strings_add(r->ps->prof->strings_, r->ps->data + r->pos, n);
	if (*s == NULL)
		return fail_oom(r->ps);
	r->pos += n;
	return 0;
}

/*
 * A counts block: u32 n, then n u64 values.  The first min(n, nfields) go to
 * f; the others of f are 0; values past nfields are skipped.
 */
/* *present (when not NULL): how many of the nfields the record had. */
static int
read_counts_present(struct record *r, const char *field, uint64_t *f, size_t nfields,
		    uint32_t *present)
{
	size_t at = r->pos;
	uint32_t n;

	if (read_u32(r, field, &n) < 0)
		return -1;
	if ((uint64_t)n * 8 > record_left(r))
		return fail_at(r->ps, at,
		               "%s: counts block '%s' of %" PRIu32
		               " values overruns its record (%zu bytes left)",
		               r->what, field, n, record_left(r));
	for (size_t i = 0; i < nfields; i++)
		f[i] = i < n ? get_u64(r->ps->data + r->pos + 8 * i) : 0;
	r->pos += (size_t)n * 8;
	if (present != NULL)
		*present = n < nfields ? n : (uint32_t)nfields;
	return 0;
}

static int
read_counts(struct record *r, const char *field, uint64_t *f, size_t nfields)
{
	return read_counts_present(r, field, f, nfields, NULL);
}

/*
 * Makes room for one more element in array, which holds n of size elem and
 * has room for *cap.  Returns the array (maybe moved), or NULL with the error
 * set and the old array untouched.
 */
static void *
grow(struct parser *ps, void *array, size_t n, size_t *cap, size_t elem)
{
	size_t ncap;
	void *p;

	if (n < *cap)
		return array;
	ncap = *cap == 0 ? 8 : *cap * 2;
	if (ncap > SIZE_MAX / elem) {
		fail_oom(ps);
		return NULL;
	}
	p = realloc(array, ncap * elem);
	if (p == NULL) {
		fail_oom(ps);
		return NULL;
	}
	*cap = ncap;
	return p;
}

static int
parse_process(struct record *r, size_t off)
{
	tfa_profile_t *p = r->ps->prof;
	uint32_t exit_code;

	if (p->has_process)
		return fail_at(r->ps, off, "duplicate process record");
	if (read_u32(r, "pid", &p->pid) < 0 || read_u32(r, "ppid", &p->ppid) < 0
	    || read_u64(r, "start_ns", &p->start_ns) < 0 || read_u64(r, "end_ns", &p->end_ns) < 0
	    || read_u32(r, "end_reason", &p->end_reason) < 0
	    || read_u32(r, "exit_code", &exit_code) < 0 || read_u32(r, "flags", &p->flags) < 0
	    || read_str(r, "command", &p->command) < 0 || read_str(r, "exe", &p->exe) < 0
	    || read_str(r, "comm", &p->comm) < 0
	    || read_str(r, "tfalloc_version", &p->tfalloc_version) < 0)
		return -1;
	p->exit_code = (int32_t)exit_code;
	p->has_process = true;
	return 0;
}

static int
parse_device(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	tfa_profile_device_t *d;

	d = grow(ps, p->devices, p->ndevices, &ps->ndevices_cap, sizeof(*d));
	if (d == NULL)
		return -1;
	p->devices = d;
	d = &p->devices[p->ndevices];
	memset(d, 0, sizeof(*d));
	if (read_str(r, "device", &d->name) < 0 || read_str(r, "allocator", &d->allocator) < 0
	    || read_counts_present(r, "counts", d->f, TFA_DEV_FIELD_COUNT, &d->nfields) < 0)
		return -1;
	p->ndevices++;
	return 0;
}

static int
parse_leak(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	tfa_profile_leak_t *l;

	l = grow(ps, p->leaks, p->nleaks, &ps->nleaks_cap, sizeof(*l));
	if (l == NULL)
		return -1;
	p->leaks = l;
	l = &p->leaks[p->nleaks];
	memset(l, 0, sizeof(*l));
	if (read_str(r, "device", &l->device) < 0 || read_u32(r, "stack_id", &l->stack_id) < 0
	    || read_u32(r, "leak_kind", &l->kind) < 0
	    || read_counts(r, "counts", l->f, TFA_LEAKF_FIELD_COUNT) < 0)
		return -1;
	p->nleaks++;
	return 0;
}

static int
parse_error(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	tfa_profile_error_t *e;

	e = grow(ps, p->errors, p->nerrors, &ps->nerrors_cap, sizeof(*e));
	if (e == NULL)
		return -1;
	p->errors = e;
	e = &p->errors[p->nerrors];
	memset(e, 0, sizeof(*e));
	if (read_u32(r, "kind", &e->kind) < 0 || read_u64(r, "address", &e->address) < 0
	    || read_u32(r, "stack_id", &e->stack_id) < 0
	    || read_u32(r, "alloc_stack_id", &e->alloc_stack_id) < 0
	    || read_u64(r, "count", &e->count) < 0 || read_str(r, "detail", &e->detail) < 0)
		return -1;
	p->nerrors++;
	return 0;
}

static int
parse_config(struct record *r, size_t off)
{
	tfa_profile_t *p = r->ps->prof;

	if (p->has_config)
		return fail_at(r->ps, off, "duplicate config record");
	if (read_u32(r, "stacks_mode", &p->stacks_mode) < 0
	    || read_u32(r, "stack_depth", &p->stack_depth) < 0
	    || read_u64(r, "sample_bytes", &p->sample_bytes) < 0)
		return -1;
	/* Fields a later writer appended: absent in older files. */
	if (record_left(r) >= 12
	    && (read_u64(r, "truncated", &p->stacks_truncated) < 0
	        || read_u32(r, "max_stacks", &p->max_stacks) < 0))
		return -1;
	if (record_left(r) >= 16
	    && (read_u64(r, "pointer_table_bytes", &p->pointer_table_bytes) < 0
	        || read_u64(r, "stack_table_bytes", &p->stack_table_bytes) < 0))
		return -1;
	if (record_left(r) >= 4 && read_u32(r, "track", &p->track) < 0)
		return -1;
	if (record_left(r) >= 8 && read_u64(r, "pointer_table_peak_bytes", &p->pointer_table_peak_bytes) < 0)
		return -1;
	if (p->track > TFA_PROF_TRACK_SAMPLED)
		return fail_at(r->ps, off, "config record: unknown track %" PRIu32, p->track);
	if (p->track == TFA_PROF_TRACK_SAMPLED && (p->sample_bytes == 0 || p->stacks_mode == TFA_PROF_STACKS_NONE))
		return fail_at(r->ps, off, "config record: sample-only tracking without a sample interval or stacks");
	p->has_config = true;
	return 0;
}

static int
parse_module(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	tfa_profile_module_t *m;
	char *id;

	m = grow(ps, p->modules, p->nmodules, &ps->nmodules_cap, sizeof(*m));
	if (m == NULL)
		return -1;
	p->modules = m;
	m = &p->modules[p->nmodules];
	memset(m, 0, sizeof(*m));
	size_t id_at;
	if (read_u64(r, "bias", &m->bias) < 0 || read_u64(r, "start", &m->start) < 0
	    || read_u64(r, "end", &m->end) < 0 || read_u32(r, "seen_at", &m->seen_at) < 0
	    || read_u32(r, "gone_at", &m->gone_at) < 0 || read_str(r, "path", &m->path) < 0)
		return -1;
	id_at = r->pos;
	if (read_str(r, "build_id", &id) < 0)
		return -1;
	m->build_id_len = get_u32(ps->data + id_at);
	m->build_id = m->build_id_len > 0 ? (uint8_t *)id : NULL;
	p->nmodules++;
	return 0;
}

/* The largest stack a reader takes, in frames. */
#define STACK_DEPTH_MAX 4096u
/*
 * Frames a leaf of the stack tree may stand for, a byte of the file: a leaf
 * takes 2 bytes at least, tfalloc's stacks 256 frames at most.  A file of
 * leaves made to stand for more would take the reader's memory, not give a
 * profile.
 */
#define FRAMES_PER_BYTE 128u

/* A new stack of depth frames: where its frames go, innermost first; NULL (the error set) without memory. */
static uint64_t *
add_stack(struct parser *ps, uint32_t id, uint32_t depth)
{
	tfa_profile_t *p = ps->prof;
	tfa_profile_stack_t *st = grow(ps, p->stacks, p->nstacks, &ps->nstacks_cap, sizeof(*st));

	if (st == NULL)
		return NULL;
	p->stacks = st;
	while (p->npcs + depth > ps->npcs_cap) {
		uint64_t *pcs = grow(ps, p->pcs, ps->npcs_cap, &ps->npcs_cap, sizeof(*pcs));
		if (pcs == NULL)
			return NULL;
		p->pcs = pcs;
	}
	st = &p->stacks[p->nstacks++];
	st->id = id;
	st->depth = depth;
	st->first = p->npcs;
	p->npcs += depth;
	return p->pcs + st->first;
}

static int
parse_stacks(struct record *r)
{
	struct parser *ps = r->ps;

	while (record_left(r) > 0) {
		size_t at = r->pos;
		uint32_t id, depth;
		if (read_u32(r, "id", &id) < 0 || read_u32(r, "depth", &depth) < 0)
			return -1;
		if (id == 0)
			return fail_at(ps, at, "%s: stack id 0 (reserved for \"no stack\")", r->what);
		if (depth == 0 || depth > STACK_DEPTH_MAX)
			return fail_at(ps, at, "%s: stack %" PRIu32 " of depth %" PRIu32
			               " (1 to %u)", r->what, id, depth, STACK_DEPTH_MAX);
		if ((uint64_t)depth * 8 > record_left(r))
			return fail_at(ps, at, "%s: stack %" PRIu32 " of %" PRIu32
			               " frames overruns its record (%zu bytes left)",
			               r->what, id, depth, record_left(r));
		uint64_t *pcs = add_stack(ps, id, depth);
		if (pcs == NULL)
			return -1;
		for (uint32_t i = 0; i < depth; i++)
			pcs[i] = get_u64(ps->data + r->pos + 8 * (size_t)i);
		r->pos += (size_t)depth * 8;
	}
	return 0;
}

static int
read_uleb(struct record *r, const char *field, uint64_t *v)
{
	size_t at = r->pos;
	uint64_t x = 0;

	for (unsigned shift = 0;; shift += 7) {
		if (record_left(r) == 0)
			return fail_at(r->ps, at, "%s: field '%s' overruns its record", r->what, field);
		uint8_t b = r->ps->data[r->pos++];
		/* The tenth byte holds bit 63 alone. */
		if (shift == 63 && (b & 0xfe) != 0)
			return fail_at(r->ps, at, "%s: field '%s' is longer than 64 bits", r->what, field);
		x |= (uint64_t)(b & 0x7f) << shift;
		if ((b & 0x80) == 0)
			break;
	}
	*v = x;
	return 0;
}

static int
read_zigzag(struct record *r, const char *field, uint64_t *delta)
{
	uint64_t z;

	if (read_uleb(r, field, &z) < 0)
		return -1;
	*delta = (z >> 1) ^ (uint64_t)-(int64_t)(z & 1);
	return 0;
}

/* The u32 number a stack-tree record starts with, which must follow on from the last. */
static int
read_first(struct record *r, const char *field, uint64_t want, uint32_t *first)
{
	size_t at = r->pos;

	if (read_u32(r, field, first) < 0)
		return -1;
	if (*first != want)
		return fail_at(r->ps, at, "%s: starts at %s %" PRIu32 ", %" PRIu64 " expected", r->what, field,
		               *first, want);
	return 0;
}

static int
parse_stack_nodes(struct record *r)
{
	struct parser *ps = r->ps;
	uint32_t first;

	if (read_first(r, "node", ps->nnodes + 1, &first) < 0)
		return -1;
	while (record_left(r) > 0) {
		size_t at = r->pos;
		uint64_t back, delta, no = ps->nnodes + 1;
		if (read_uleb(r, "parent", &back) < 0 || read_zigzag(r, "address", &delta) < 0)
			return -1;
		if (no > UINT32_MAX)
			return fail_at(ps, at, "%s: more than %" PRIu32 " nodes", r->what, UINT32_MAX);
		if (back == 0 || back > no)
			return fail_at(ps, at, "%s: node %" PRIu64 " has its parent %" PRIu64 " back (1 to %" PRIu64 ")",
			               r->what, no, back, no);
		struct read_node *n = grow(ps, ps->nodes, ps->nnodes, &ps->nnodes_cap, sizeof(*n));
		if (n == NULL)
			return -1;
		ps->nodes = n;
		uint32_t parent = (uint32_t)(no - back);
		const struct read_node *up = parent != 0 ? &ps->nodes[parent - 1] : NULL;
		if (up != NULL && up->depth >= STACK_DEPTH_MAX - 1)
			return fail_at(ps, at, "%s: node %" PRIu64 " lies %u frames deep (stacks have up to %u)",
			               r->what, no, up->depth + 1, STACK_DEPTH_MAX);
		ps->nodes[ps->nnodes++] = (struct read_node){ .pc = (up != NULL ? up->pc : 0) + delta,
			                                      .parent = parent,
			                                      .depth = up != NULL ? up->depth + 1 : 1 };
	}
	return 0;
}

static int
parse_stack_leaves(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	uint32_t first;

	if (read_u32(r, "first id", &first) < 0)
		return -1;
	for (uint64_t id = first; record_left(r) > 0; id++) {
		size_t at = r->pos;
		uint64_t parent, delta;
		if (read_uleb(r, "node", &parent) < 0 || read_zigzag(r, "address", &delta) < 0)
			return -1;
		if (id == 0 || id > UINT32_MAX)
			return fail_at(ps, at, "%s: stack id %" PRIu64 " (1 to %" PRIu32 ")", r->what, id, UINT32_MAX);
		if (parent > ps->nnodes)
			return fail_at(ps, at, "%s: stack %" PRIu64 " on node %" PRIu64 ", of %zu read", r->what, id,
			               parent, ps->nnodes);
		const struct read_node *up = parent != 0 ? &ps->nodes[parent - 1] : NULL;
		uint32_t depth = up != NULL ? up->depth + 1 : 1;
		if (p->npcs + depth > (uint64_t)ps->len * FRAMES_PER_BYTE)
			return fail_at(ps, at, "%s: its stacks have more frames than a file of %zu bytes holds (%u a byte)",
			               r->what, ps->len, FRAMES_PER_BYTE);
		uint64_t *pcs = add_stack(ps, (uint32_t)id, depth);
		if (pcs == NULL)
			return -1;
		*pcs++ = (up != NULL ? up->pc : 0) + delta;
		for (; up != NULL; up = up->parent != 0 ? &ps->nodes[up->parent - 1] : NULL)
			*pcs++ = up->pc;
	}
	return 0;
}

#define TIMELINE_POINT_SIZE 36u

static int
parse_timeline(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;

	if (read_u64(r, "interval", &p->timeline_interval_ns) < 0)
		return -1;
	if (record_left(r) % TIMELINE_POINT_SIZE != 0)
		return fail_at(ps, r->pos, "%s: %zu bytes of points, not a multiple of %u", r->what,
		               record_left(r), TIMELINE_POINT_SIZE);
	while (record_left(r) > 0) {
		size_t at = r->pos;
		tfa_profile_point_t *pt = grow(ps, p->timeline, p->ntimeline, &ps->ntimeline_cap,
		                               sizeof(*pt));
		if (pt == NULL)
			return -1;
		p->timeline = pt;
		pt = &p->timeline[p->ntimeline];
		if (read_u64(r, "t", &pt->t_ns) < 0 || read_u64(r, "bytes in use", &pt->bytes_in_use) < 0
		    || read_u64(r, "allocated bytes", &pt->allocated_bytes) < 0
		    || read_u64(r, "rss", &pt->rss_bytes) < 0 || read_u32(r, "flags", &pt->flags) < 0)
			return -1;
		if (p->ntimeline > 0 && pt->t_ns < p->timeline[p->ntimeline - 1].t_ns)
			return fail_at(ps, at, "%s: a point at %" PRIu64 " ns after one at %" PRIu64 " ns",
			               r->what, pt->t_ns, p->timeline[p->ntimeline - 1].t_ns);
		p->ntimeline++;
	}
	return 0;
}

static int
parse_device_timeline(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	char *device;
	uint64_t interval;

	if (read_str(r, "device", &device) < 0 || read_u64(r, "interval", &interval) < 0)
		return -1;
	if (record_left(r) % TIMELINE_POINT_SIZE != 0)
		return fail_at(ps, r->pos, "%s: %zu bytes of points, not a multiple of %u", r->what,
		               record_left(r), TIMELINE_POINT_SIZE);
	/* A device's series may span several records in a row. */
	tfa_profile_dev_timeline_t *t = NULL;
	if (p->ndev_timelines > 0 && strcmp(p->dev_timelines[p->ndev_timelines - 1].device, device) == 0
	    && p->dev_timelines[p->ndev_timelines - 1].first + p->dev_timelines[p->ndev_timelines - 1].n
	               == p->ndev_points) {
		t = &p->dev_timelines[p->ndev_timelines - 1];
	} else {
		t = grow(ps, p->dev_timelines, p->ndev_timelines, &ps->ndev_timelines_cap, sizeof(*t));
		if (t == NULL)
			return -1;
		p->dev_timelines = t;
		t = &p->dev_timelines[p->ndev_timelines++];
		memset(t, 0, sizeof(*t));
		t->device = device;
		t->first = p->ndev_points;
	}
	t->interval_ns = interval;
	while (record_left(r) > 0) {
		size_t at = r->pos;
		tfa_profile_point_t *pt = grow(ps, p->dev_points, p->ndev_points, &ps->ndev_points_cap,
		                               sizeof(*pt));
		if (pt == NULL)
			return -1;
		p->dev_points = pt;
		pt = &p->dev_points[p->ndev_points];
		if (read_u64(r, "t", &pt->t_ns) < 0 || read_u64(r, "bytes in use", &pt->bytes_in_use) < 0
		    || read_u64(r, "allocated bytes", &pt->allocated_bytes) < 0
		    || read_u64(r, "rss", &pt->rss_bytes) < 0 || read_u32(r, "flags", &pt->flags) < 0)
			return -1;
		if (t->n > 0 && pt->t_ns < p->dev_points[p->ndev_points - 1].t_ns)
			return fail_at(ps, at, "%s: a point at %" PRIu64 " ns after one at %" PRIu64 " ns",
			               r->what, pt->t_ns, p->dev_points[p->ndev_points - 1].t_ns);
		p->ndev_points++;
		t->n++;
	}
	return 0;
}

static int
parse_site(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	tfa_profile_site_t *s;

	s = grow(ps, p->sites, p->nsites, &ps->nsites_cap, sizeof(*s));
	if (s == NULL)
		return -1;
	p->sites = s;
	s = &p->sites[p->nsites];
	memset(s, 0, sizeof(*s));
	if (read_str(r, "device", &s->device) < 0 || read_u32(r, "stack_id", &s->stack_id) < 0
	    || read_counts(r, "counts", s->f, TFA_SITEF_FIELD_COUNT) < 0)
		return -1;
	p->nsites++;
	return 0;
}

static int
parse_sites(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	char *device;
	uint64_t id = 0;

	if (read_str(r, "device", &device) < 0)
		return -1;
	for (bool first = true; record_left(r) > 0; first = false) {
		size_t at = r->pos;
		uint64_t step, n;
		if (read_uleb(r, "stack_id", &step) < 0)
			return -1;
		if (step == 0 && !first)
			return fail_at(ps, at, "%s: stack id %" PRIu64 " twice", r->what, id);
		id += step;
		if (id > UINT32_MAX)
			return fail_at(ps, at, "%s: stack id %" PRIu64 " (0 to %" PRIu32 ")", r->what, id, UINT32_MAX);
		tfa_profile_site_t *s = grow(ps, p->sites, p->nsites, &ps->nsites_cap, sizeof(*s));
		if (s == NULL)
			return -1;
		p->sites = s;
		s = &p->sites[p->nsites];
		memset(s, 0, sizeof(*s));
		s->device = device;
		s->stack_id = (uint32_t)id;
		if (read_uleb(r, "counts", &n) < 0)
			return -1;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t v;
			if (read_uleb(r, "counts", &v) < 0)
				return -1;
			if (i < TFA_SITEF_FIELD_COUNT)
				s->f[i] = v;
		}
		p->nsites++;
	}
	return 0;
}

static int
parse_resource(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	tfa_profile_resource_t *res;
	size_t at = r->pos;

	res = grow(ps, p->resources, p->nresources, &ps->nresources_cap, sizeof(*res));
	if (res == NULL)
		return -1;
	p->resources = res;
	res = &p->resources[p->nresources];
	memset(res, 0, sizeof(*res));
	if (read_u32(r, "tag", &res->tag) < 0 || read_u32(r, "state", &res->state) < 0
	    || read_u32(r, "refcount", &res->refcount) < 0 || read_u64(r, "type hash", &res->type_hash) < 0
	    || read_str(r, "container", &res->container) < 0 || read_str(r, "type", &res->type) < 0
	    || read_str(r, "name", &res->name) < 0 || read_str(r, "debug string", &res->debug) < 0
	    || read_counts(r, "counts", res->f, TFA_RESF_FIELD_COUNT) < 0)
		return -1;
	if (res->tag == 0 || (p->nresources > 0 && res->tag <= p->resources[p->nresources - 1].tag))
		return fail_at(ps, at, "%s: tag %" PRIu32 " out of order", r->what, res->tag);
	res->first = p->nres_devices;
	while (record_left(r) > 0) {
		tfa_profile_res_device_t *d = grow(ps, p->res_devices, p->nres_devices,
						   &ps->nres_devices_cap, sizeof(*d));
		if (d == NULL)
			return -1;
		p->res_devices = d;
		d = &p->res_devices[p->nres_devices];
		memset(d, 0, sizeof(*d));
		if (read_str(r, "device", &d->device) < 0
		    || read_counts(r, "device counts", d->f, TFA_RESD_FIELD_COUNT) < 0)
			return -1;
		p->nres_devices++;
		res->ndevices++;
	}
	p->nresources++;
	return 0;
}

#define CLEANUP_GROUP_SIZE 32u

static int
parse_cleanup(struct record *r)
{
	struct parser *ps = r->ps;
	tfa_profile_t *p = ps->prof;
	tfa_profile_cleanup_t *c;

	c = grow(ps, p->cleanups, p->ncleanups, &ps->ncleanups_cap, sizeof(*c));
	if (c == NULL)
		return -1;
	p->cleanups = c;
	c = &p->cleanups[p->ncleanups];
	memset(c, 0, sizeof(*c));
	if (read_u64(r, "time", &c->t_ns) < 0 || read_str(r, "container", &c->container) < 0
	    || read_counts(r, "counts", c->f, TFA_CLEANF_FIELD_COUNT) < 0)
		return -1;
	if (record_left(r) % CLEANUP_GROUP_SIZE != 0)
		return fail_at(ps, r->pos, "%s: %zu bytes of groups, not a multiple of %u", r->what,
		               record_left(r), CLEANUP_GROUP_SIZE);
	c->first = p->ncleanup_groups;
	while (record_left(r) > 0) {
		tfa_profile_cleanup_group_t *g = grow(ps, p->cleanup_groups, p->ncleanup_groups,
						      &ps->ncleanup_groups_cap, sizeof(*g));
		if (g == NULL)
			return -1;
		p->cleanup_groups = g;
		g = &p->cleanup_groups[p->ncleanup_groups];
		if (read_u32(r, "tag", &g->tag) < 0 || read_u32(r, "stack_id", &g->stack_id) < 0
		    || read_u64(r, "blocks", &g->blocks) < 0 || read_u64(r, "bytes", &g->bytes) < 0
		    || read_u64(r, "sample address", &g->sample_address) < 0)
			return -1;
		p->ncleanup_groups++;
		c->ngroups++;
	}
	p->ncleanups++;
	return 0;
}

static int
cmp_stack_id(const void *a, const void *b)
{
	uint32_t x = ((const tfa_profile_stack_t *)a)->id, y = ((const tfa_profile_stack_t *)b)->id;

	return x < y ? -1 : x > y;
}

/* Sorts the stacks by id; two stacks with one id make the file unusable. */
static int
index_stacks(struct parser *ps)
{
	tfa_profile_t *p = ps->prof;
	bool sorted = true;

	for (size_t i = 1; i < p->nstacks && sorted; i++)
		sorted = p->stacks[i - 1].id < p->stacks[i].id;
	if (!sorted)
		qsort(p->stacks, p->nstacks, sizeof(*p->stacks), cmp_stack_id);
	for (size_t i = 1; i < p->nstacks; i++)
		if (p->stacks[i - 1].id == p->stacks[i].id)
			return fail(ps, "stack %" PRIu32 " is recorded twice", p->stacks[i].id);
	return 0;
}

const uint64_t *
tfa_profile_stack(const tfa_profile_t *p, uint32_t id, uint32_t *depth)
{
	size_t lo = 0, hi = p->nstacks;

	*depth = 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (p->stacks[mid].id < id) {
			lo = mid + 1;
		} else if (p->stacks[mid].id > id) {
			hi = mid;
		} else {
			*depth = p->stacks[mid].depth;
			return p->pcs + p->stacks[mid].first;
		}
	}
	return NULL;
}

const tfa_profile_module_t *
tfa_profile_module_at(const tfa_profile_t *p, uint32_t stack_id, uint64_t pc)
{
	const tfa_profile_module_t *last = NULL;

	for (size_t i = 0; i < p->nmodules; i++) {
		const tfa_profile_module_t *m = &p->modules[i];
		if (pc < m->start || pc >= m->end)
			continue;
		if (m->seen_at < stack_id && stack_id <= m->gone_at)
			return m;
		last = m;
	}
	return last;
}

static int
parse_error_totals(struct record *r, size_t off)
{
	tfa_profile_t *p = r->ps->prof;

	if (p->has_error_totals)
		return fail_at(r->ps, off, "duplicate error totals record");
	if (read_counts(r, "counts", p->error_totals, TFA_ERRC_FIELD_COUNT) < 0)
		return -1;
	p->has_error_totals = true;
	return 0;
}

static int
parse_end(struct record *r, size_t off, uint64_t nrecords)
{
	tfa_profile_t *p = r->ps->prof;
	uint32_t complete;

	if (read_u64(r, "records", &p->nrecords) < 0 || read_u32(r, "complete", &complete) < 0)
		return -1;
	if (p->nrecords != nrecords)
		return fail_at(r->ps, off,
		               "end record counts %" PRIu64
		               " records before it, the file has %" PRIu64,
		               p->nrecords, nrecords);
	if (complete > 1)
		return fail_at(r->ps, off,
		               "end record: bad value %" PRIu32 " of 'complete' (0 or 1)",
		               complete);
	p->complete = complete == 1;
	p->has_end = true;
	return 0;
}

static int
parse_header(struct parser *ps, size_t *records_at)
{
	static const char magic[8] = TFA_PROF_MAGIC;
	const uint8_t *d = ps->data;
	uint32_t version, hsize;

	if (ps->len == 0)
		return fail(ps, "empty file: not a tfalloc profile");
	if (memcmp(d, magic, TFA_MIN(ps->len, sizeof(magic))) != 0)
		return fail(ps, "not a tfalloc profile (bad magic)");
	if (ps->len < TFA_PROF_HEADER_SIZE)
		return fail(ps, "truncated header: %zu bytes, a profile starts with %u", ps->len,
		            TFA_PROF_HEADER_SIZE);
	version = get_u32(d + 8);
	hsize = get_u32(d + 12);
	if (version < TFA_PROF_VERSION_MIN || version > TFA_PROF_VERSION)
		return fail(ps,
		            "unsupported format version %" PRIu32 " (this reader knows versions %u to %u)",
		            version, TFA_PROF_VERSION_MIN, TFA_PROF_VERSION);
	if (hsize < TFA_PROF_HEADER_SIZE)
		return fail_at(ps, 12, "bad header size %" PRIu32 " (at least %u)", hsize,
		               TFA_PROF_HEADER_SIZE);
	if (hsize > ps->len)
		return fail(ps, "truncated header: %zu bytes, the header says %" PRIu32, ps->len,
		            hsize);
	ps->prof->version = version;
	*records_at = hsize;
	return 0;
}

static const char *
record_name(uint32_t type)
{
	switch (type) {
	case TFA_REC_PROCESS:
		return "process record";
	case TFA_REC_DEVICE:
		return "device record";
	case TFA_REC_LEAK:
		return "leak record";
	case TFA_REC_ERROR:
		return "error record";
	case TFA_REC_ERROR_TOTALS:
		return "error totals record";
	case TFA_REC_CONFIG:
		return "config record";
	case TFA_REC_MODULE:
		return "module record";
	case TFA_REC_STACKS:
		return "stacks record";
	case TFA_REC_STACK_NODES:
		return "stack nodes record";
	case TFA_REC_STACK_LEAVES:
		return "stack leaves record";
	case TFA_REC_SITE:
		return "site record";
	case TFA_REC_SITES:
		return "sites record";
	case TFA_REC_TIMELINE:
		return "timeline record";
	case TFA_REC_DEVICE_TIMELINE:
		return "device timeline record";
	case TFA_REC_RESOURCE:
		return "resource record";
	case TFA_REC_CLEANUP:
		return "cleanup record";
	case TFA_REC_END:
		return "end record";
	default:
		return "record";
	}
}

static int
parse_records(struct parser *ps, size_t off)
{
	uint64_t nrecords = 0;

	for (;;) {
		size_t left = ps->len - off;
		uint32_t type, plen, stored, computed;
		struct record r;
		int rc;

		if (left == 0)
			return fail(ps,
			            "cut short: no end record (after %" PRIu64
			            " records, %zu bytes)",
			            nrecords, ps->len);
		if (left < REC_HEAD)
			return fail(ps,
			            "truncated: record at offset %zu needs at least %u bytes, %zu "
			            "present",
			            off, REC_EXTRA, left);
		type = get_u32(ps->data + off);
		plen = get_u32(ps->data + off + 4);
		if (plen > TFA_PROF_MAX_RECORD)
			return fail_at(ps, off,
			               "record too large: type %" PRIu32 ", %" PRIu32
			               " bytes (at most %u)",
			               type, plen, TFA_PROF_MAX_RECORD);
		if ((size_t)plen + REC_EXTRA > left)
			return fail(ps,
			            "truncated: record at offset %zu needs %zu bytes, %zu present",
			            off, (size_t)plen + REC_EXTRA, left);
		stored = get_u32(ps->data + off + REC_HEAD + plen);
		computed = tfa_crc32(0, ps->data + off, REC_HEAD + (size_t)plen);
		if (stored != computed)
			return fail_at(ps, off,
			               "checksum mismatch in %s (type %" PRIu32
			               "): stored 0x%08" PRIx32 ", computed 0x%08" PRIx32,
			               record_name(type), type, stored, computed);

		r = (struct record){ .ps = ps,
			             .what = record_name(type),
			             .pos = off + REC_HEAD,
			             .end = off + REC_HEAD + plen };
		switch (type) {
		case TFA_REC_PROCESS:
			rc = parse_process(&r, off);
			break;
		case TFA_REC_DEVICE:
			rc = parse_device(&r);
			break;
		case TFA_REC_LEAK:
			rc = parse_leak(&r);
			break;
		case TFA_REC_ERROR:
			rc = parse_error(&r);
			break;
		case TFA_REC_ERROR_TOTALS:
			rc = parse_error_totals(&r, off);
			break;
		case TFA_REC_CONFIG:
			rc = parse_config(&r, off);
			break;
		case TFA_REC_MODULE:
			rc = parse_module(&r);
			break;
		case TFA_REC_STACKS:
			rc = parse_stacks(&r);
			break;
		case TFA_REC_STACK_NODES:
			rc = parse_stack_nodes(&r);
			break;
		case TFA_REC_STACK_LEAVES:
			rc = parse_stack_leaves(&r);
			break;
		case TFA_REC_SITE:
			rc = parse_site(&r);
			break;
		case TFA_REC_SITES:
			rc = parse_sites(&r);
			break;
		case TFA_REC_TIMELINE:
			rc = parse_timeline(&r);
			break;
		case TFA_REC_DEVICE_TIMELINE:
			rc = parse_device_timeline(&r);
			break;
		case TFA_REC_RESOURCE:
			rc = parse_resource(&r);
			break;
		case TFA_REC_CLEANUP:
			rc = parse_cleanup(&r);
			break;
		case TFA_REC_END:
			rc = parse_end(&r, off, nrecords);
			break;
		default:
			rc = 0; /* a record of a later format: skipped */
			break;
		}
		if (rc < 0)
			return -1;
		off += (size_t)plen + REC_EXTRA;
		if (type == TFA_REC_END)
			break;
		nrecords++;
	}
	if (off != ps->len)
		return fail_at(ps, off, "%zu bytes after the end record", ps->len - off);
	if (!ps->prof->has_process)
		return fail(ps, "no process record");
	return index_stacks(ps);
}

int
tfa_profile_parse(const uint8_t *data, size_t len, const char *name, tfa_profile_t *out, char *err,
                  size_t errlen)
{
	tfa_profile_t prof;
	struct parser ps = {
		.data = data,
		.len = len,
		.name = name != NULL ? name : "(profile)",
		.err = err,
		.errlen = errlen,
		.prof = &prof,
	};
	size_t records_at = 0;

	memset(&prof, 0, sizeof(prof));
	memset(out, 0, sizeof(*out));
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	prof.strings_ = calloc(1, sizeof(*prof.strings_));
	if (prof.strings_ == NULL)
		return fail_oom(&ps);
	prof.path = strings_add(prof.strings_, (const uint8_t *)ps.name, strlen(ps.name));
	if (prof.path == NULL) {
		fail_oom(&ps);
		goto out_free;
	}
	if (parse_header(&ps, &records_at) < 0 || parse_records(&ps, records_at) < 0)
		goto out_free;
	free(ps.nodes);
	*out = prof;
	return 0;

out_free:
	free(ps.nodes);
	tfa_profile_free(&prof);
	return -1;
}

static __attribute__((format(printf, 4, 5))) int
file_error(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	set_error(err, errlen, path, fmt, ap);
	va_end(ap);
	return -1;
}

int
tfa_profile_read_file(const char *path, tfa_profile_t *out, char *err, size_t errlen)
{
	uint8_t *data = NULL;
	size_t len = 0;
	struct stat st;
	int fd, rc = -1;

	memset(out, 0, sizeof(*out));
	/* O_NONBLOCK: opening a FIFO must not hang; it is refused below. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return file_error(err, errlen, path, "%s", strerror(errno));
	if (fstat(fd, &st) < 0) {
		file_error(err, errlen, path, "%s", strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		file_error(err, errlen, path, "not a regular file");
		goto out_close;
	}
	if ((uint64_t)st.st_size > TFA_PROFILE_MAX_FILE) {
		file_error(err, errlen, path,
		           "%jd bytes: larger than the %" PRIu64 " MiB a profile may have",
		           (intmax_t)st.st_size, TFA_PROFILE_MAX_FILE >> 20);
		goto out_close;
	}
	data = malloc((size_t)st.st_size + 1);
	if (data == NULL) {
		file_error(err, errlen, path, "out of memory");
		goto out_close;
	}
	/* A file that shrinks while read is parsed as far as it goes; growth is ignored. */
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, data + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			file_error(err, errlen, path, "%s", strerror(errno));
			goto out_free;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	rc = tfa_profile_parse(data, len, path, out, err, errlen);
out_free:
	free(data);
out_close:
	close(fd);
	return rc;
}

void
tfa_profile_free_tables(tfa_profile_t *p)
{
	free(p->devices);
	free(p->leaks);
	free(p->modules);
	free(p->stacks);
	free(p->pcs);
	free(p->sites);
	free(p->timeline);
	free(p->dev_timelines);
	free(p->dev_points);
	free(p->resources);
	free(p->res_devices);
	free(p->cleanups);
	free(p->cleanup_groups);
	p->devices = NULL;
	p->leaks = NULL;
	p->modules = NULL;
	p->stacks = NULL;
	p->pcs = NULL;
	p->sites = NULL;
	p->timeline = NULL;
	p->dev_timelines = NULL;
	p->dev_points = NULL;
	p->resources = NULL;
	p->res_devices = NULL;
	p->cleanups = NULL;
	p->cleanup_groups = NULL;
	p->ndevices = p->nleaks = p->nmodules = p->nstacks = p->npcs = p->nsites = 0;
	p->ntimeline = p->ndev_timelines = p->ndev_points = p->nresources = 0;
	p->nres_devices = p->ncleanups = p->ncleanup_groups = 0;
}

void
tfa_profile_free(tfa_profile_t *p)
{
	if (p == NULL)
		return;
	tfa_profile_free_tables(p);
	free(p->errors);
	strings_free(p->strings_);
	memset(p, 0, sizeof(*p));
}

uint64_t
tfa_profile_error_sums(const tfa_profile_t *p, uint64_t out[TFA_ERRC_FIELD_COUNT])
{
	memset(out, 0, sizeof(uint64_t) * TFA_ERRC_FIELD_COUNT);
	if (p->has_error_totals) {
		memcpy(out, p->error_totals, sizeof(uint64_t) * TFA_ERRC_FIELD_COUNT);
	} else {
		for (size_t i = 0; i < p->nerrors; i++) {
			uint32_t k = p->errors[i].kind;
			if (k >= TFA_ERR_DOUBLE_FREE && k <= TFA_ERR_MISMATCHED_FREE)
				out[k - TFA_ERR_DOUBLE_FREE] += p->errors[i].count;
		}
	}
	return out[TFA_ERRC_DOUBLE_FREE] + out[TFA_ERRC_INVALID_FREE] + out[TFA_ERRC_MISMATCHED_FREE];
}

const tfa_profile_resource_t *
tfa_profile_resource(const tfa_profile_t *p, uint32_t tag)
{
	/* Tags are in increasing order (checked by the parser): a binary search. */
	size_t lo = 0, hi = p->nresources;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (p->resources[mid].tag < tag)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < p->nresources && p->resources[lo].tag == tag ? &p->resources[lo] : NULL;
}

void
tfa_profile_resource_leaks(const tfa_profile_t *p, uint32_t tag, uint64_t *bytes, uint64_t *blocks)
{
	*bytes = *blocks = 0;
	for (size_t i = 0; i < p->nleaks; i++) {
		if (p->leaks[i].f[TFA_LEAKF_RESOURCE] != tag)
			continue;
		*bytes += p->leaks[i].f[TFA_LEAKF_BYTES];
		*blocks += p->leaks[i].f[TFA_LEAKF_BLOCKS];
	}
}
