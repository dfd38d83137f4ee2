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

#include <dirent.h>
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
#include "tools/json.h"
#include "tools/pprof.h"

#define REPORT_ERRLEN 1024

enum report_format_e {
	REPORT_TEXT,
	REPORT_JSON,
	REPORT_FOLDED,
	REPORT_PPROF,
};

struct report_entry {
	tfa_profile_t prof;
	char *file; /* absolute when it could be resolved */
};

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
	fputs("usage: tfalloc report [--format text|json|folded|pprof] [--by FIGURE] [-o FILE]\n"
	      "                      PATH...\n"
	      "\n"
	      "Shows profile files.  A PATH that is a directory stands for every *.prof\n"
	      "file in it, ordered by pid, then start time.\n"
	      "\n"
	      "Options:\n"
	      "  --format text|json   text for people (the default), or JSON\n"
	      "  --format folded      folded stacks for flame graphs (flamegraph.pl,\n"
	      "                       inferno, speedscope): \"PROCESS;OUTER;...;INNER VALUE\"\n"
	      "  --format pprof       gzip'd profile.proto for go tool pprof, Pyroscope,\n"
	      "                       Parca (binary: needs -o FILE or a redirection)\n"
	      "  --by FIGURE          the value of folded stacks: peak (bytes live at the\n"
	      "                       peak, the default), leaked (bytes live at exit),\n"
	      "                       in-use (bytes live at the end), total (bytes\n"
	      "                       allocated), count (allocations)\n"
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

static int
report_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool
report_is_prof_name(const char *name)
{
	size_t n = strlen(name);

	return n > 5 && strcmp(name + n - 5, ".prof") == 0;
}

/* Every *.prof file of dir, read in name order, then sorted by pid and start time. */
static void
report_read_dir(struct report *r, const char *dir)
{
	char err[REPORT_ERRLEN];
	char **names = NULL;
	size_t n = 0, cap = 0, first = r->n;
	struct dirent *de;
	DIR *d;

	d = opendir(dir);
	if (d == NULL) {
		snprintf(err, sizeof(err), "%s: %s", dir, strerror(errno));
		report_failure(r, err);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		void *arr = names;
		char *path;

		if (!report_is_prof_name(de->d_name))
			continue;
		if (asprintf(&path, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
		             de->d_name)
		    < 0) {
			r->oom = true;
			break;
		}
		if (report_push(&arr, n, &cap, sizeof(char *)) < 0) {
			free(path);
			r->oom = true;
			break;
		}
		names = arr;
		names[n++] = path;
	}
	closedir(d);
	if (n == 0 && !r->oom) {
		snprintf(err, sizeof(err), "%s: no profile files (*.prof) in this directory", dir);
		report_failure(r, err);
	}
	if (n > 0)
		qsort(names, n, sizeof(char *), report_name_cmp);
	for (size_t i = 0; i < n; i++) {
		report_read(r, names[i]);
		free(names[i]);
	}
	free(names);
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
		tfa_profile_free(&r->entries[i].prof);
		free(r->entries[i].file);
	}
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

/* The totals record when there is one, else the sum of the rows. */
static void
report_error_sums(const tfa_profile_t *p, struct error_sums *s)
{
	memset(s, 0, sizeof(*s));
	if (p->has_error_totals) {
		memcpy(s->by_kind, p->error_totals, sizeof(s->by_kind));
	} else {
		for (size_t i = 0; i < p->nerrors; i++) {
			uint32_t k = p->errors[i].kind;

			if (k >= TFA_ERR_DOUBLE_FREE && k <= TFA_ERR_MISMATCHED_FREE)
				s->by_kind[k - TFA_ERR_DOUBLE_FREE] += p->errors[i].count;
		}
	}
	s->total = s->by_kind[TFA_ERRC_DOUBLE_FREE] + s->by_kind[TFA_ERRC_INVALID_FREE]
	           + s->by_kind[TFA_ERRC_MISMATCHED_FREE];
}

static void
report_leak_sums(const tfa_profile_t *p, uint64_t *bytes, uint64_t *blocks)
{
	*bytes = 0;
	*blocks = 0;
	for (size_t i = 0; i < p->nleaks; i++) {
		*bytes += p->leaks[i].f[TFA_LEAKF_BYTES];
		*blocks += p->leaks[i].f[TFA_LEAKF_BLOCKS];
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
 * JSON
 */

static void
json_hex(tfa_json_t *j, const char *key, uint64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
	tfa_json_kv_string(j, key, buf);
}

static void
json_process(tfa_json_t *j, const struct report_entry *e)
{
	static const char *const dev_keys[TFA_DEV_FIELD_COUNT] = {
		[TFA_DEV_NUM_ALLOCS] = "num_allocs",
		[TFA_DEV_NUM_FREES] = "num_frees",
		[TFA_DEV_NUM_REALLOCS] = "num_reallocs",
		[TFA_DEV_BYTES_IN_USE] = "bytes_in_use",
		[TFA_DEV_PEAK_BYTES_IN_USE] = "peak_bytes_in_use",
		[TFA_DEV_LARGEST_ALLOC_SIZE] = "largest_alloc_size",
		[TFA_DEV_TOTAL_BYTES] = "total_bytes",
		[TFA_DEV_BYTES_LIMIT] = "bytes_limit",
		[TFA_DEV_ALLOCATED_BYTES_IN_USE] = "allocated_bytes_in_use",
		[TFA_DEV_PEAK_ALLOCATED_BYTES_IN_USE] = "peak_allocated_bytes_in_use",
		[TFA_DEV_TOTAL_ALLOCATED_BYTES] = "total_allocated_bytes",
		[TFA_DEV_SHIM_OVERHEAD_BYTES] = "shim_overhead_bytes",
	};
	static const char *const errc_keys[TFA_ERRC_FIELD_COUNT] = {
		[TFA_ERRC_DOUBLE_FREE] = "double_free",
		[TFA_ERRC_INVALID_FREE] = "invalid_free",
		[TFA_ERRC_MISMATCHED_FREE] = "mismatched_free",
		[TFA_ERRC_NOT_RECORDED] = "not_recorded",
	};
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

	tfa_json_key(j, "devices");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->ndevices; i++) {
		const tfa_profile_device_t *d = &p->devices[i];

		tfa_json_begin_object(j);
		tfa_json_kv_string(j, "device", d->name);
		tfa_json_kv_string(j, "allocator", d->allocator);
		for (size_t k = 0; k < TFA_DEV_FIELD_COUNT; k++)
			tfa_json_kv_u64(j, dev_keys[k], d->f[k]);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	tfa_json_key(j, "leaks");
	tfa_json_begin_array(j);
	for (size_t i = 0; i < p->nleaks; i++) {
		const tfa_profile_leak_t *l = &p->leaks[i];

		tfa_json_begin_object(j);
		tfa_json_kv_string(j, "device", l->device);
		tfa_json_kv_string(j, "kind", tfa_prof_leak_kind_name(l->kind));
		tfa_json_kv_u64(j, "bytes", l->f[TFA_LEAKF_BYTES]);
		tfa_json_kv_u64(j, "blocks", l->f[TFA_LEAKF_BLOCKS]);
		tfa_json_kv_u64(j, "allocated_bytes", l->f[TFA_LEAKF_ALLOCATED_BYTES]);
		json_hex(j, "sample_address", l->f[TFA_LEAKF_SAMPLE_ADDRESS]);
		tfa_json_kv_u64(j, "stack_id", l->stack_id);
		tfa_json_key(j, "stack");
		tfa_json_begin_array(j);
		tfa_json_end_array(j);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

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
		tfa_json_key(j, "stack");
		tfa_json_begin_array(j);
		tfa_json_end_array(j);
		tfa_json_end_object(j);
	}
	tfa_json_end_array(j);

	report_error_sums(p, &sums);
	tfa_json_key(j, "error_totals");
	tfa_json_begin_object(j);
	for (size_t k = 0; k < TFA_ERRC_FIELD_COUNT; k++)
		tfa_json_kv_u64(j, errc_keys[k], sums.by_kind[k]);
	tfa_json_end_object(j);

	tfa_json_end_object(j);
}

static void
report_json(FILE *f, const struct report *r)
{
	tfa_json_t j;

	tfa_json_init(&j, f);
	tfa_json_begin_object(&j);
	tfa_json_key(&j, "processes");
	tfa_json_begin_array(&j);
	for (size_t i = 0; i < r->n; i++)
		json_process(&j, &r->entries[i]);
	tfa_json_end_array(&j);
	tfa_json_key(&j, "unreadable");
	tfa_json_begin_array(&j);
	for (size_t i = 0; i < r->nfailures; i++)
		tfa_json_string(&j, r->failures[i]);
	tfa_json_end_array(&j);
	tfa_json_end_object(&j);
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
		fputs("still running when this snapshot was written\n", f);
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

static void
text_stack(FILE *f, uint32_t stack_id)
{
	if (stack_id == 0)
		fputs("      (no stack recorded)\n", f);
	else
		fprintf(f, "      (stack %" PRIu32 ": frames not in this profile)\n", stack_id);
}

static void
text_leaks(FILE *f, const tfa_profile_t *p)
{
	const char *what = p->complete ? "leaks" : "live at snapshot";
	uint64_t bytes, blocks;

	report_leak_sums(p, &bytes, &blocks);
	if (p->nleaks == 0) {
		fprintf(f, "  %s: none\n", what);
		return;
	}
	fprintf(f, "  %s: ", what);
	text_bytes(f, bytes);
	fputs(" in ", f);
	text_count(f, blocks, "block", "blocks");
	fputc('\n', f);
	for (size_t i = 0; i < p->nleaks; i++) {
		const tfa_profile_leak_t *l = &p->leaks[i];

		fputs("    ", f);
		text_bytes(f, l->f[TFA_LEAKF_BYTES]);
		fputs(" in ", f);
		text_count(f, l->f[TFA_LEAKF_BLOCKS], "block", "blocks");
		fprintf(f, " (%s, ", tfa_prof_leak_kind_name(l->kind));
		text_str(f, l->device);
		fprintf(f, ", e.g. 0x%" PRIx64 ")\n", l->f[TFA_LEAKF_SAMPLE_ADDRESS]);
		text_stack(f, l->stack_id);
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
text_errors(FILE *f, const tfa_profile_t *p)
{
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
		text_stack(f, e->stack_id);
	}
	if (s.by_kind[TFA_ERRC_NOT_RECORDED] > 0)
		fprintf(f, "    (%" PRIu64 " more not recorded)\n",
		        s.by_kind[TFA_ERRC_NOT_RECORDED]);
}

static void
text_process(FILE *f, const struct report_entry *e)
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
	for (size_t i = 0; i < p->ndevices; i++)
		text_device(f, &p->devices[i]);
	text_leaks(f, p);
	text_errors(f, p);
}

static void
report_text(FILE *f, const struct report *r)
{
	uint64_t allocs = 0, leak_bytes = 0, leak_blocks = 0, errors = 0;

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

int
tfa_cmd_report(int argc, char **argv)
{
	enum report_format_e format = REPORT_TEXT;
	const char *out_path = NULL, *fmt = NULL, *by_name = NULL;
	enum tfa_folded_by_e by = TFA_FOLDED_PEAK;
	struct report r;
	char **paths;
	size_t npaths = 0;
	bool options_done = false;
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
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			tfa_report_usage(stdout);
			free(paths);
			return 0;
		} else if (strcmp(a, "--format") == 0 || strcmp(a, "-o") == 0
		           || strcmp(a, "--output") == 0 || strcmp(a, "--by") == 0) {
			if (i + 1 >= argc) {
				free(paths);
				return report_usage_error("option %s needs a value", a);
			}
			if (strcmp(a, "--format") == 0)
				fmt = argv[++i];
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
		} else {
			free(paths);
			return report_usage_error("unknown option '%s'", a);
		}
	}
	if (fmt != NULL && strcmp(fmt, "json") == 0) {
		format = REPORT_JSON;
	} else if (fmt != NULL && strcmp(fmt, "folded") == 0) {
		format = REPORT_FOLDED;
	} else if (fmt != NULL && strcmp(fmt, "pprof") == 0) {
		format = REPORT_PPROF;
	} else if (fmt != NULL && strcmp(fmt, "text") != 0) {
		free(paths);
		return report_usage_error("unknown format '%s' (text, json, folded or pprof)", fmt);
	}
	if (by_name != NULL && format != REPORT_FOLDED) {
		free(paths);
		return report_usage_error("option --by applies to --format folded only");
	}
	if (by_name != NULL && tfa_folded_by_parse(by_name, &by) < 0) {
		free(paths);
		return report_usage_error("unknown figure '%s' for --by (peak, leaked, in-use, "
		                          "total or count)",
		                          by_name);
	}
	if (format == REPORT_PPROF && out_path == NULL && isatty(STDOUT_FILENO)) {
		free(paths);
		return report_usage_error("pprof output is binary: give -o FILE");
	}
	if (out_path != NULL && out_path[0] == '\0') {
		free(paths);
		return report_usage_error("option -o needs a file name");
	}
	if (npaths == 0) {
		free(paths);
		return report_usage_error("no profile file or directory given");
	}

	memset(&r, 0, sizeof(r));
	for (size_t i = 0; i < npaths; i++)
		report_read_path(&r, paths[i]);
	free(paths);
	if (r.nfailures > 0 || r.oom)
		status = 1;
	if (r.oom)
		fputs("tfalloc: report: out of memory\n", stderr);

	if (out_path != NULL) {
		out = fopen(out_path, "w");
		if (out == NULL) {
			fprintf(stderr, "tfalloc: report: %s: %s\n", out_path, strerror(errno));
			report_free(&r);
			return 1;
		}
	}
	if (format == REPORT_JSON)
		report_json(out, &r);
	else if (format == REPORT_FOLDED || format == REPORT_PPROF)
		status |= report_stacks(out, &r, format, by);
	else
		report_text(out, &r);
	if (fflush(out) != 0 || ferror(out)) {
		fprintf(stderr, "tfalloc: report: %s: %s\n", out_path ? out_path : "stdout",
		        strerror(errno));
		status = 1;
	}
	if (out != stdout && fclose(out) != 0) {
		fprintf(stderr, "tfalloc: report: %s: %s\n", out_path, strerror(errno));
		status = 1;
	}
	report_free(&r);
	return status;
}
