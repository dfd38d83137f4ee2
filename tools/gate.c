/* SPDX-License-Identifier: MIT */
/*
 * The leak gate (tools/gate.h).  It reads the profiles a run left, as
 * `tfalloc report` does, and decides: per process, the leaks of the kinds
 * that count and that no suppression names are summed and compared with the
 * budget; memory errors fail the gate too unless told otherwise.
 *
 * Suppressions are LeakSanitizer's format: one `leak:PATTERN` per line, `#`
 * comments, `*` matching any run of characters, `^` and `$` anchoring (a
 * pattern otherwise matches anywhere in a name).  A leak is suppressed when
 * its pattern matches the function, the source file or the module of any
 * frame of its stack.
 */
#include "tools/gate.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/common.h"
#include "core/profile_read.h"
#include "tools/json.h"
#include "tools/profile_dir.h"
#include "tools/stacks.h"
#include "tools/tfalloc.h"

#define GATE_ERRLEN 1024
#define GATE_PATTERN_MAX 512
#define GATE_CMD_MAX 400 /* bytes of a command line in a log line */

/*
 * Allocations of glibc's loader that the reachability scan cannot see are
 * referenced, and that the process does not own.
 */
static const struct {
	const char *pattern;
	const char *why;
} builtin_suppressions[] = {
	/*
	 * pthread_create -> allocate_stack -> _dl_allocate_tls: a thread's
	 * dynamic TLS vector, referenced from the thread control block (no root
	 * the scan reads); glibc frees it with the thread's stack, which it
	 * caches for reuse after the thread ends.  valgrind suppresses it too.
	 */
	{ "_dl_allocate_tls", "the dynamic TLS vector of a thread (glibc frees it with the thread)" },
};

struct rule {
	char *pattern;
	char *where; /* "FILE:LINE" or "built-in" */
	uint64_t leaks, bytes, blocks;
};

struct finding {
	const tfa_profile_t *p;
	const tfa_profile_leak_t *leak;
	tfa_profile_symbols_t *sym;
};

struct proc_sum {
	uint64_t bytes, blocks, sites;
};

struct gate {
	const tfa_gate_opts_t *g;
	struct rule *rules;
	size_t nrules, rules_cap;
	tfa_profile_t *profiles;
	tfa_profile_symbols_t **syms;
	size_t nprofiles, profiles_cap;
	tfa_sym_cache_t *cache;
	struct finding *findings;
	size_t nfindings, findings_cap;
	bool *over; /* per profile: over the budget or with errors */
	struct proc_sum *sums; /* per profile: what counted */
	bool oom;
	bool bad_input;
	size_t sampled; /* sample-only profiles: refused */
	size_t stale;   /* profiles of processes that started before the run (since_ns) */
	size_t failed, gated, not_gated;
	uint64_t errors_total;
};

void
tfa_gate_opts_init(tfa_gate_opts_t *g)
{
	memset(g, 0, sizeof(*g));
	g->exitcode = TFA_GATE_EXITCODE_DEFAULT;
	g->kinds = TFA_GATE_KIND_BIT(TFA_LEAK_DEFINITE) | TFA_GATE_KIND_BIT(TFA_LEAK_INDIRECT);
	g->fail_on_errors = true;
}

int
tfa_gate_parse_kinds(const char *list, unsigned *kinds)
{
	static const tfa_name_bits_t names[] = {
		{ "definite", TFA_GATE_KIND_BIT(TFA_LEAK_DEFINITE) },
		{ "indirect", TFA_GATE_KIND_BIT(TFA_LEAK_INDIRECT) },
		{ "possible", TFA_GATE_KIND_BIT(TFA_LEAK_POSSIBLE) },
		{ "reachable", TFA_GATE_KIND_BIT(TFA_LEAK_REACHABLE) },
		{ "all", TFA_GATE_KIND_BIT(TFA_LEAK_DEFINITE) | TFA_GATE_KIND_BIT(TFA_LEAK_INDIRECT)
		                 | TFA_GATE_KIND_BIT(TFA_LEAK_POSSIBLE)
		                 | TFA_GATE_KIND_BIT(TFA_LEAK_REACHABLE) },
	};

	return tfa_parse_name_list(list, names, TFA_ARRAY_SIZE(names), kinds);
}

/* ---- suppressions -------------------------------------------------------------------------- */

/* '*' matches any run; the whole of s must match p. */
static bool
glob_match(const char *p, const char *s)
{
	const char *star = NULL, *resume = NULL;

	while (*s != '\0') {
		if (*p == '*') {
			star = p++;
			resume = s;
		} else if (*p != '\0' && *p == *s) {
			p++;
			s++;
		} else if (star != NULL) {
			p = star + 1;
			s = ++resume;
		} else {
			return false;
		}
	}
	while (*p == '*')
		p++;
	return *p == '\0';
}

/* LeakSanitizer's reading: unanchored ends match anywhere. */
static bool
pattern_match(const char *pattern, const char *s)
{
	char buf[GATE_PATTERN_MAX + 4];
	size_t n = strlen(pattern);
	bool head = n > 0 && pattern[0] == '^';
	bool tail = n > 0 && pattern[n - 1] == '$' && (n > 1 || !head);

	if (s == NULL || n > GATE_PATTERN_MAX)
		return false;
	snprintf(buf, sizeof(buf), "%s%.*s%s", head ? "" : "*", (int)(n - head - tail),
	         pattern + head, tail ? "" : "*");
	return glob_match(buf, s);
}

static int
gate_add_rule(struct gate *gt, const char *pattern, size_t len, const char *where)
{
	if (gt->nrules == gt->rules_cap) {
		size_t ncap = gt->rules_cap == 0 ? 16 : gt->rules_cap * 2;
		void *arr = realloc(gt->rules, ncap * sizeof(*gt->rules));
		if (arr == NULL)
			return -1;
		gt->rules = arr;
		gt->rules_cap = ncap;
	}
	struct rule *r = &gt->rules[gt->nrules];
	memset(r, 0, sizeof(*r));
	r->pattern = strndup(pattern, len);
	r->where = strdup(where);
	if (r->pattern == NULL || r->where == NULL) {
		free(r->pattern);
		free(r->where);
		return -1;
	}
	gt->nrules++;
	return 0;
}

/* Reads a suppression file; a bad line is reported (FILE:LINE) and fails the gate. */
static void
gate_read_suppressions(struct gate *gt, const char *path)
{
	char line[4096], where[GATE_ERRLEN];
	unsigned lineno = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		fprintf(stderr, "tfalloc: leak gate: suppressions %s: %s\n", tfa_shown(path), strerror(errno));
		gt->bad_input = true;
		return;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t n = strlen(line);
		lineno++;
		if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
			fprintf(stderr, "tfalloc: leak gate: %s:%u: line longer than %zu bytes\n", path,
			        lineno, sizeof(line) - 2);
			gt->bad_input = true;
			break;
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '
		                 || line[n - 1] == '\t'))
			line[--n] = '\0';
		char *s = line;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s == '\0' || *s == '#')
			continue;
		if (strncmp(s, "leak:", 5) != 0 || s[5] == '\0' || strlen(s + 5) > GATE_PATTERN_MAX) {
			fprintf(stderr, "tfalloc: leak gate: %s:%u: not a suppression: expected "
			                "leak:PATTERN (at most %d bytes)\n",
			        path, lineno, GATE_PATTERN_MAX);
			gt->bad_input = true;
			continue;
		}
		snprintf(where, sizeof(where), "%s:%u", path, lineno);
		if (gate_add_rule(gt, s + 5, strlen(s + 5), where) < 0)
			gt->oom = true;
	}
	if (ferror(f)) {
		fprintf(stderr, "tfalloc: leak gate: suppressions %s: %s\n", tfa_shown(path), strerror(errno));
		gt->bad_input = true;
	}
	fclose(f);
}

struct match_ctx {
	struct gate *gt;
	tfa_profile_symbols_t *sym;
	const tfa_profile_t *p;
	uint32_t stack_id;
	ssize_t rule; /* the first rule that matched; -1: none */
};

static void
match_frame(struct match_ctx *m, const tfa_sym_frame_t *fr)
{
	for (size_t i = 0; i < m->gt->nrules && m->rule < 0; i++) {
		const char *pat = m->gt->rules[i].pattern;
		if (pattern_match(pat, fr->function) || pattern_match(pat, fr->file)
		    || pattern_match(pat, fr->module))
			m->rule = (ssize_t)i;
	}
}

/* Calls fn for each frame of a leak's stack, innermost first. */
static void
for_each_frame(tfa_profile_symbols_t *sym, const tfa_profile_t *p, uint32_t stack_id,
               tfa_frame_fn fn, void *ctx)
{
	(void)tfa_stack_frames(sym, p, stack_id, fn, ctx);
}

static void
match_visit(void *ctx, unsigned index, const tfa_sym_frame_t *fr)
{
	(void)index;
	match_frame(ctx, fr);
}

/* ---- reading the run ----------------------------------------------------------------------- */

/* Findings printed as one: their text, and the pids of the processes (the first LOG_GROUP_PIDS + 1). */
#define LOG_GROUP_PIDS 20
struct log_group {
	char *text;
	uint64_t hash;
	size_t first; /* the finding printed */
	size_t count;
	uint32_t pids[LOG_GROUP_PIDS + 1];
};

static void
log_group_add(struct log_group *g, uint32_t pid)
{
	if (g->count < TFA_ARRAY_SIZE(g->pids))
		g->pids[g->count] = pid;
	g->count++;
}

static bool kind_counts(const tfa_gate_opts_t *g, uint32_t kind);
static uint64_t errors_of(const tfa_profile_t *p);
static void gate_add_finding(struct gate *gt, const tfa_profile_t *p, tfa_profile_symbols_t *sym,
                             const tfa_profile_leak_t *l);

/*
 * The verdict on one profile, as soon as it is read.  A profile with nothing
 * to show is then cut down to its process's names and error counts: a run of
 * thousands of processes (a test suite) is not held in memory at once.
 */
static void
gate_judge(struct gate *gt, size_t i)
{
	const tfa_gate_opts_t *g = gt->g;
	tfa_profile_t *p = &gt->profiles[i];
	uint64_t bytes = 0, blocks = 0;

	/* exec replaced the image: its heap went with it. */
	if (p->end_reason != TFA_END_EXEC) {
		/*
		 * Killed by a signal, or cut short (SIGKILL leaves a snapshot): what
		 * it held was never meant to be freed yet.  Its memory errors count.
		 */
		bool leaks_count = p->complete && p->end_reason != TFA_END_SIGNAL;
		if (!leaks_count)
			gt->not_gated++;
		gt->gated++;
		for (size_t k = 0; k < p->nleaks && leaks_count; k++) {
			const tfa_profile_leak_t *l = &p->leaks[k];
			if (!kind_counts(g, l->kind))
				continue;
			struct match_ctx m = { .gt = gt, .sym = gt->syms[i], .p = p,
				               .stack_id = l->stack_id, .rule = -1 };
			for_each_frame(gt->syms[i], p, l->stack_id, match_visit, &m);
			if (m.rule >= 0) {
				struct rule *r = &gt->rules[m.rule];
				r->leaks++;
				r->bytes += l->f[TFA_LEAKF_BYTES];
				r->blocks += l->f[TFA_LEAKF_BLOCKS];
				continue;
			}
			bytes += l->f[TFA_LEAKF_BYTES];
			blocks += l->f[TFA_LEAKF_BLOCKS];
			gt->sums[i].sites++;
			gate_add_finding(gt, p, gt->syms[i], l);
		}
		gt->sums[i].bytes = bytes;
		gt->sums[i].blocks = blocks;
		uint64_t nerr = errors_of(p);
		gt->errors_total += nerr;
		gt->over[i] = bytes > g->max_leak_bytes || blocks > g->max_leak_blocks
		              || (nerr > 0 && g->fail_on_errors);
		if (gt->over[i])
			gt->failed++;
	}
	if (gt->sums[i].sites == 0) {
		/* Its pid, names, path and error counts stay (the strings and errors). */
		tfa_profile_symbols_free(gt->syms[i]);
		gt->syms[i] = NULL;
		tfa_profile_free_tables(p);
	}
}

static void
gate_read_profiles(struct gate *gt, const char *dir)
{
	char err[GATE_ERRLEN];
	char **names;
	size_t n;
	int rc = tfa_profile_dir_list(dir, &names, &n);

	if (rc != 0) {
		fprintf(stderr, "tfalloc: leak gate: %s: %s\n", tfa_shown(dir), strerror(-rc));
		if (rc == -ENOMEM)
			gt->oom = true;
		else
			gt->bad_input = true;
		return;
	}
	gt->profiles = calloc(n != 0 ? n : 1, sizeof(*gt->profiles));
	gt->syms = calloc(n != 0 ? n : 1, sizeof(*gt->syms));
	gt->over = calloc(n != 0 ? n : 1, sizeof(*gt->over));
	gt->sums = calloc(n != 0 ? n : 1, sizeof(*gt->sums));
	if (gt->profiles == NULL || gt->syms == NULL || gt->over == NULL || gt->sums == NULL)
		gt->oom = true;
	for (size_t i = 0; i < n; i++) {
		if (!gt->oom) {
			tfa_profile_t *p = &gt->profiles[gt->nprofiles];
			if (tfa_profile_read_file(names[i], p, err, sizeof(err)) < 0) {
				fprintf(stderr, "tfalloc: leak gate: %s\n", err);
				gt->bad_input = true;
			} else if (gt->g->since_ns != 0 && p->start_ns < gt->g->since_ns) {
				/* An earlier run's, in a reused directory: its verdict was that run's. */
				gt->stale++;
				tfa_profile_free(p);
			} else if (p->track == TFA_PROF_TRACK_SAMPLED) {
				/* What it did not sample is unknown: no verdict can come from it. */
				fprintf(stderr, "tfalloc: leak gate: %s: refused: sample-only tracking "
				                "(TFALLOC_TRACK=sampled) records a sample of the blocks, "
				                "which cannot show that nothing leaked\n", names[i]);
				gt->sampled++;
				tfa_profile_free(p);
			} else {
				gt->syms[gt->nprofiles] = tfa_profile_symbols_new(p, gt->cache, err,
				                                                  sizeof(err));
				gt->nprofiles++;
				gate_judge(gt, gt->nprofiles - 1);
			}
		}
		free(names[i]);
	}
	free(names);
	if (gt->stale > 0)
		fprintf(stderr, "tfalloc: leak gate: %zu profile%s in %s from before this run: not judged\n", gt->stale,
		        gt->stale == 1 ? "" : "s", tfa_shown(dir));
}

/* ---- the verdict --------------------------------------------------------------------------- */

static const char *
kind_name(uint32_t kind)
{
	return tfa_prof_leak_kind_name(kind);
}

static bool
kind_counts(const tfa_gate_opts_t *g, uint32_t kind)
{
	if (kind == TFA_LEAK_UNCLASSIFIED)
		kind = TFA_LEAK_DEFINITE; /* not analysed: the worst is assumed */
	return kind < 32 && (g->kinds & TFA_GATE_KIND_BIT(kind)) != 0;
}

static uint64_t
errors_of(const tfa_profile_t *p)
{
	uint64_t sums[TFA_ERRC_FIELD_COUNT];

	return tfa_profile_error_sums(p, sums);
}

/* Where a process or thread starts: no frame of the program's own code. */
static bool
start_frame(const tfa_sym_frame_t *fr)
{
	static const char *const names[] = { "__libc_start_call_main", "__libc_start_main",
		                             "__libc_start_main_impl", "_start", "start_thread",
		                             "clone", "clone3" };

	for (size_t i = 0; fr->function != NULL && i < TFA_ARRAY_SIZE(names); i++)
		if (strcmp(fr->function, names[i]) == 0)
			return true;
	return false;
}

/*
 * The first frame with a source file above the process's or thread's start,
 * or else the innermost frames' names: where a finding points.  (A program
 * without debug information, as Debian's, would otherwise point at libc's
 * start, whose source Debian's debug packages know.)
 */
#define SITE_NAMES 3
struct site_ctx {
	tfa_sym_frame_t first, with_file;
	bool has_first, has_file, at_start;
	unsigned nnames;
	char fn[512], file[1024], mod[1024];
	char names[SITE_NAMES][256];
};

static void
site_visit(void *ctx, unsigned index, const tfa_sym_frame_t *fr)
{
	(void)index;
	struct site_ctx *s = ctx;

	if (!s->has_first) {
		s->first = *fr;
		s->has_first = true;
	}
	s->at_start = s->at_start || start_frame(fr);
	if (s->at_start)
		return;
	if (s->nnames < SITE_NAMES) {
		tfa_frame_name(fr, s->names[s->nnames], sizeof(s->names[0]));
		s->nnames++;
	}
	if (!s->has_file && fr->file != NULL && fr->line != 0) {
		s->with_file = *fr;
		snprintf(s->file, sizeof(s->file), "%s", fr->file);
		snprintf(s->fn, sizeof(s->fn), "%s", fr->function != NULL ? fr->function : "?");
		s->has_file = true;
	}
}

struct text_ctx {
	FILE *f;
	bool below_main;
};

static void
text_frame(void *ctx, unsigned index, const tfa_sym_frame_t *fr)
{
	struct text_ctx *t = ctx;
	char name[1024];

	if (t->below_main || start_frame(fr)) {
		t->below_main = true; /* the C runtime's start, when main has no name */
		return;
	}
	t->below_main = fr->function != NULL && strcmp(fr->function, "main") == 0;
	fprintf(t->f, "    #%u %s", index, tfa_frame_name(fr, name, sizeof(name)));
	if (fr->file != NULL) {
		fprintf(t->f, " %s", fr->file);
		if (fr->line != 0)
			fprintf(t->f, ":%" PRIu32, fr->line);
	}
	fputc('\n', t->f);
}

/* "config_alloc tp_sites.c:38", or the innermost frame's name. */
static void
site_label(char *buf, size_t size, const struct finding *fd)
{
	struct site_ctx s = { 0 };
	char name[512];

	for_each_frame(fd->sym, fd->p, fd->leak->stack_id, site_visit, &s);
	if (s.has_file) {
		snprintf(buf, size, "%s %s:%" PRIu32, s.fn, tfa_base_name(s.file), s.with_file.line);
	} else if (s.nnames > 0) {
		size_t len = 0;
		buf[0] = '\0';
		for (unsigned i = 0; i < s.nnames && len < size; i++) {
			int n = snprintf(buf + len, size - len, "%s%s", i > 0 ? " < " : "", s.names[i]);
			if (n < 0)
				break;
			len += (size_t)n;
		}
	} else if (s.has_first)
		snprintf(buf, size, "%s", tfa_frame_name(&s.first, name, sizeof(name)));
	else
		snprintf(buf, size, "(no stack recorded)");
}

static void
gate_add_finding(struct gate *gt, const tfa_profile_t *p, tfa_profile_symbols_t *sym,
                 const tfa_profile_leak_t *l)
{
	if (gt->nfindings == gt->findings_cap) {
		size_t ncap = gt->findings_cap == 0 ? 64 : gt->findings_cap * 2;
		void *arr = realloc(gt->findings, ncap * sizeof(*gt->findings));
		if (arr == NULL) {
			gt->oom = true;
			return;
		}
		gt->findings = arr;
		gt->findings_cap = ncap;
	}
	gt->findings[gt->nfindings++] = (struct finding){ .p = p, .leak = l, .sym = sym };
}

/* ---- JUnit and SARIF ----------------------------------------------------------------------- */

static void
xml_text(FILE *f, const char *s)
{
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		switch (c) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&apos;", f); break;
		default:
			/* XML 1.0 forbids most control characters, even escaped. */
			if (c < 0x20 && c != '\n' && c != '\t')
				fputc('?', f);
			else
				fputc(c, f);
		}
	}
}

struct xml_frames {
	FILE *f;
};

static void
xml_frame(void *ctx, unsigned index, const tfa_sym_frame_t *fr)
{
	struct xml_frames *x = ctx;
	char name[1024], line[1400];

	if (fr->file != NULL)
		snprintf(line, sizeof(line), "#%u %s %s:%" PRIu32 "\n", index,
		         tfa_frame_name(fr, name, sizeof(name)), fr->file, fr->line);
	else
		snprintf(line, sizeof(line), "#%u %s\n", index, tfa_frame_name(fr, name, sizeof(name)));
	xml_text(x->f, line);
}

static int
write_junit(const struct gate *gt, const char *path)
{
	FILE *f = fopen(path, "w");
	size_t failures = 0;

	if (f == NULL) {
		fprintf(stderr, "tfalloc: leak gate: %s: %s\n", tfa_shown(path), strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < gt->nprofiles; i++)
		failures += gt->over[i];
	/* A testcase per gated process: an image replaced by exec is not one. */
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	           "<testsuites name=\"tfalloc leak gate\" tests=\"%zu\" failures=\"%zu\">\n"
	           "  <testsuite name=\"tfalloc leak gate\" tests=\"%zu\" failures=\"%zu\" errors=\"0\">\n",
	        gt->gated, failures, gt->gated, failures);
	for (size_t i = 0; i < gt->nprofiles; i++) {
		const tfa_profile_t *p = &gt->profiles[i];
		char name[64];

		if (p->end_reason == TFA_END_EXEC)
			continue;

		snprintf(name, sizeof(name), "pid %" PRIu32 ": ", p->pid);
		fputs("    <testcase classname=\"tfalloc.leaks\" name=\"", f);
		xml_text(f, name);
		xml_text(f, p->command[0] != '\0' ? p->command : p->comm);
		fputs("\">\n", f);
		for (size_t k = 0; k < gt->nfindings; k++) {
			const struct finding *fd = &gt->findings[k];
			char msg[2048], where[1024];
			if (fd->p != p)
				continue;
			site_label(where, sizeof(where), fd);
			snprintf(msg, sizeof(msg), "%" PRIu64 " bytes in %" PRIu64 " %s leaked (%s) at %s",
			         fd->leak->f[TFA_LEAKF_BYTES], fd->leak->f[TFA_LEAKF_BLOCKS],
			         fd->leak->f[TFA_LEAKF_BLOCKS] == 1 ? "block" : "blocks",
			         kind_name(fd->leak->kind), where);
			fputs("      <failure type=\"leak\" message=\"", f);
			xml_text(f, msg);
			fputs("\">", f);
			for_each_frame(fd->sym, p, fd->leak->stack_id, xml_frame,
			               &(struct xml_frames){ .f = f });
			fputs("</failure>\n", f);
		}
		uint64_t nerr = errors_of(p);
		if (nerr > 0 && gt->g->fail_on_errors)
			fprintf(f, "      <failure type=\"memory error\" message=\"%" PRIu64
			           " memory errors (double, invalid or mismatched frees)\"/>\n",
			        nerr);
		fputs("    </testcase>\n", f);
	}
	fputs("  </testsuite>\n</testsuites>\n", f);
	if (fclose(f) != 0) {
		fprintf(stderr, "tfalloc: leak gate: %s: %s\n", tfa_shown(path), strerror(errno));
		return -1;
	}
	return 0;
}

/* "physicalLocation": the frame's source file (a file:// URI when absolute) and line. */
static void
sarif_physical(tfa_json_t *j, const tfa_sym_frame_t *fr)
{
	char uri[2048];

	tfa_json_key(j, "physicalLocation");
	tfa_json_begin_object(j);
	tfa_json_key(j, "artifactLocation");
	tfa_json_begin_object(j);
	snprintf(uri, sizeof(uri), "%s%s", fr->file[0] == '/' ? "file://" : "", fr->file);
	tfa_json_kv_string(j, "uri", uri);
	tfa_json_end_object(j);
	tfa_json_key(j, "region");
	tfa_json_begin_object(j);
	tfa_json_kv_u64(j, "startLine", fr->line);
	tfa_json_end_object(j);
	tfa_json_end_object(j);
}

static void
sarif_location(tfa_json_t *j, const tfa_sym_frame_t *fr)
{
	tfa_json_begin_object(j);
	sarif_physical(j, fr);
	tfa_json_end_object(j);
}

struct sarif_frames {
	tfa_json_t *j;
};

static void
sarif_frame(void *ctx, unsigned index, const tfa_sym_frame_t *fr)
{
	(void)index;
	tfa_json_t *j = ((struct sarif_frames *)ctx)->j;
	char name[1024];

	tfa_json_begin_compact_object(j);
	tfa_json_key(j, "location");
	tfa_json_begin_object(j);
	tfa_json_key(j, "message");
	tfa_json_begin_object(j);
	tfa_json_kv_string(j, "text", tfa_frame_name(fr, name, sizeof(name)));
	tfa_json_end_object(j);
	if (fr->file != NULL && fr->line != 0)
		sarif_physical(j, fr);
	tfa_json_end_object(j);
	if (fr->module != NULL)
		tfa_json_kv_string(j, "module", fr->module);
	tfa_json_end_object(j);
}

static int
write_sarif(const struct gate *gt, const char *path)
{
	static const char *const kinds[] = { "unclassified", "definite", "indirect", "possible",
		                             "reachable" };
	FILE *f = fopen(path, "w");
	tfa_json_t j;

	if (f == NULL) {
		fprintf(stderr, "tfalloc: leak gate: %s: %s\n", tfa_shown(path), strerror(errno));
		return -1;
	}
	tfa_json_init(&j, f);
	tfa_json_begin_object(&j);
	tfa_json_kv_string(&j, "$schema", "https://json.schemastore.org/sarif-2.1.0.json");
	tfa_json_kv_string(&j, "version", "2.1.0");
	tfa_json_key(&j, "runs");
	tfa_json_begin_array(&j);
	tfa_json_begin_object(&j);
	tfa_json_key(&j, "tool");
	tfa_json_begin_object(&j);
	tfa_json_key(&j, "driver");
	tfa_json_begin_object(&j);
	tfa_json_kv_string(&j, "name", "tfalloc");
	tfa_json_kv_string(&j, "version", TFA_VERSION);
	tfa_json_key(&j, "rules");
	tfa_json_begin_array(&j);
	for (size_t k = 0; k < TFA_ARRAY_SIZE(kinds); k++) {
		char id[64], text[128];
		snprintf(id, sizeof(id), "leak/%s", kinds[k]);
		snprintf(text, sizeof(text), "Memory leak (%s)", kinds[k]);
		tfa_json_begin_object(&j);
		tfa_json_kv_string(&j, "id", id);
		tfa_json_key(&j, "shortDescription");
		tfa_json_begin_object(&j);
		tfa_json_kv_string(&j, "text", text);
		tfa_json_end_object(&j);
		tfa_json_end_object(&j);
	}
	tfa_json_end_array(&j);
	tfa_json_end_object(&j);
	tfa_json_end_object(&j);
	tfa_json_key(&j, "results");
	tfa_json_begin_array(&j);
	for (size_t k = 0; k < gt->nfindings; k++) {
		const struct finding *fd = &gt->findings[k];
		struct site_ctx s = { 0 };
		char id[64], msg[2048], where[1024];

		for_each_frame(fd->sym, fd->p, fd->leak->stack_id, site_visit, &s);
		site_label(where, sizeof(where), fd);
		snprintf(id, sizeof(id), "leak/%s",
		         fd->leak->kind < TFA_ARRAY_SIZE(kinds) ? kinds[fd->leak->kind] : "unclassified");
		snprintf(msg, sizeof(msg),
		         "%" PRIu64 " bytes in %" PRIu64 " %s leaked (%s) by process %" PRIu32
		         " (%s), allocated at %s",
		         fd->leak->f[TFA_LEAKF_BYTES], fd->leak->f[TFA_LEAKF_BLOCKS],
		         fd->leak->f[TFA_LEAKF_BLOCKS] == 1 ? "block" : "blocks",
		         kind_name(fd->leak->kind), fd->p->pid, fd->p->comm, where);
		tfa_json_begin_object(&j);
		tfa_json_kv_string(&j, "ruleId", id);
		tfa_json_kv_string(&j, "level", "error");
		tfa_json_key(&j, "message");
		tfa_json_begin_object(&j);
		tfa_json_kv_string(&j, "text", msg);
		tfa_json_end_object(&j);
		tfa_json_key(&j, "locations");
		tfa_json_begin_array(&j);
		if (s.has_file) {
			s.with_file.file = s.file;
			sarif_location(&j, &s.with_file);
		}
		tfa_json_end_array(&j);
		tfa_json_key(&j, "stacks");
		tfa_json_begin_array(&j);
		tfa_json_begin_object(&j);
		tfa_json_key(&j, "frames");
		tfa_json_begin_array(&j);
		for_each_frame(fd->sym, fd->p, fd->leak->stack_id, sarif_frame,
		               &(struct sarif_frames){ .j = &j });
		tfa_json_end_array(&j);
		tfa_json_end_object(&j);
		tfa_json_end_array(&j);
		tfa_json_key(&j, "properties");
		tfa_json_begin_object(&j);
		tfa_json_kv_u64(&j, "bytes", fd->leak->f[TFA_LEAKF_BYTES]);
		tfa_json_kv_u64(&j, "blocks", fd->leak->f[TFA_LEAKF_BLOCKS]);
		tfa_json_kv_u64(&j, "pid", fd->p->pid);
		tfa_json_kv_string(&j, "command", fd->p->command);
		tfa_json_kv_string(&j, "device", fd->leak->device);
		tfa_json_end_object(&j);
		tfa_json_end_object(&j);
	}
	tfa_json_end_array(&j);
	tfa_json_end_object(&j);
	tfa_json_end_array(&j);
	tfa_json_end_object(&j);
	if (fclose(f) != 0) {
		fprintf(stderr, "tfalloc: leak gate: %s: %s\n", tfa_shown(path), strerror(errno));
		return -1;
	}
	return 0;
}

/* ---- the gate ------------------------------------------------------------------------------ */

/*
 * The report files can be written: opened (created when missing, never
 * truncated: the gate writes them at the end) for writing now, so that a
 * missing directory or a read-only disk is said before a long run, not after.
 */
static bool
gate_output_ok(const char *option, const char *path)
{
	int fd = path != NULL ? open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644) : -2;

	if (fd == -1) {
		fprintf(stderr, "tfalloc: leak gate: %s %s: %s\n", option, tfa_shown(path), strerror(errno));
		return false;
	}
	if (fd >= 0)
		close(fd);
	return true;
}

int
tfa_gate_check_inputs(const tfa_gate_opts_t *g)
{
	struct gate gt = { .g = g };

	if (!gate_output_ok("--junit", g->junit) || !gate_output_ok("--sarif", g->sarif))
		return -1;
	for (size_t i = 0; i < g->nsuppressions; i++)
		gate_read_suppressions(&gt, g->suppressions[i]);
	for (size_t i = 0; i < gt.nrules; i++) {
		free(gt.rules[i].pattern);
		free(gt.rules[i].where);
	}
	free(gt.rules);
	return gt.bad_input || gt.oom ? -1 : 0;
}

int
tfa_leak_gate(const char *dir, const tfa_gate_opts_t *g, int cmd_status)
{
	struct gate gt = { .g = g };
	int status;

	gt.cache = tfa_sym_cache_new();
	if (gt.cache == NULL)
		gt.oom = true;
	for (size_t i = 0; i < TFA_ARRAY_SIZE(builtin_suppressions); i++)
		if (gate_add_rule(&gt, builtin_suppressions[i].pattern,
		                  strlen(builtin_suppressions[i].pattern), "built-in") < 0)
			gt.oom = true;
	for (size_t i = 0; i < g->nsuppressions; i++)
		gate_read_suppressions(&gt, g->suppressions[i]);
	gate_read_profiles(&gt, dir);

	/*
	 * The log: one line per leak site, then its stack.  The same leak (name,
	 * size, kind, stack) in other processes is one more line listing their
	 * pids: a shell's 56 runs of `tr` show one site, not 56.
	 */
	struct log_group *groups = calloc(gt.nfindings != 0 ? gt.nfindings : 1, sizeof(*groups));
	size_t ngroups = 0;
	for (size_t k = 0; k < gt.nfindings && groups != NULL; k++) {
		const struct finding *fd = &gt.findings[k];
		char where[1024], *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);

		if (f == NULL)
			continue;
		site_label(where, sizeof(where), fd);
		fprintf(f, "(%s): %" PRIu64 " bytes in %" PRIu64 " %s (%s) at %s\n", fd->p->comm,
		        fd->leak->f[TFA_LEAKF_BYTES], fd->leak->f[TFA_LEAKF_BLOCKS],
		        fd->leak->f[TFA_LEAKF_BLOCKS] == 1 ? "block" : "blocks", kind_name(fd->leak->kind),
		        where);
		for_each_frame(fd->sym, fd->p, fd->leak->stack_id, text_frame, &(struct text_ctx){ .f = f });
		if (fclose(f) != 0) {
			free(text);
			continue;
		}
		uint64_t h = 0xcbf29ce484222325ull;
		for (size_t i = 0; i < len; i++)
			h = (h ^ (unsigned char)text[i]) * 0x100000001b3ull;
		size_t gi = 0;
		while (gi < ngroups && (groups[gi].hash != h || strcmp(groups[gi].text, text) != 0))
			gi++;
		if (gi == ngroups) {
			groups[gi] = (struct log_group){ .text = text, .hash = h, .first = k };
			ngroups++;
		} else {
			free(text);
		}
		log_group_add(&groups[gi], fd->p->pid);
	}
	for (size_t gi = 0; gi < ngroups; gi++) {
		const struct log_group *lg = &groups[gi];
		fprintf(stderr, "tfalloc: leak: pid %" PRIu32 " %s", gt.findings[lg->first].p->pid, lg->text);
		if (lg->count > 1) {
			fprintf(stderr, "    (the same in %zu more %s: pid", lg->count - 1,
			        lg->count == 2 ? "process" : "processes");
			for (size_t i = 1; i < lg->count && i <= LOG_GROUP_PIDS; i++)
				fprintf(stderr, "%s %" PRIu32, i > 1 ? "," : "", lg->pids[i]);
			fputs(lg->count > LOG_GROUP_PIDS + 1 ? ", ...)\n" : ")\n", stderr);
		}
		free(lg->text);
	}
	free(groups);
	/*
	 * Each failing process by pid and whole command line: in a test suite
	 * of many processes the name alone (15 bytes of it) does not tell
	 * which test of a binary leaked.
	 */
	for (size_t i = 0; i < gt.nprofiles; i++) {
		const tfa_profile_t *p = &gt.profiles[i];
		const char *cmd = p->command[0] != '\0' ? p->command : p->comm;
		if (!gt.over[i])
			continue;
		fprintf(stderr, "tfalloc: leak gate: pid %" PRIu32 " failed: %" PRIu64 " bytes in %" PRIu64
		                " %s at %" PRIu64 " leak %s, %" PRIu64 " memory %s: %.*s%s\n",
		        p->pid, gt.sums[i].bytes, gt.sums[i].blocks, gt.sums[i].blocks == 1 ? "block" : "blocks",
		        gt.sums[i].sites, gt.sums[i].sites == 1 ? "site" : "sites", errors_of(p),
		        errors_of(p) == 1 ? "error" : "errors", GATE_CMD_MAX, cmd,
		        strlen(cmd) > GATE_CMD_MAX ? "..." : "");
	}
	for (size_t i = 0; i < gt.nprofiles; i++) {
		uint64_t nerr = errors_of(&gt.profiles[i]);
		if (nerr > 0)
			fprintf(stderr, "tfalloc: memory errors: pid %" PRIu32 " (%s): %" PRIu64
			                " (tfalloc report %s shows them)%s\n",
			        gt.profiles[i].pid, gt.profiles[i].comm, nerr, gt.profiles[i].path,
			        g->fail_on_errors ? "" : "; not failing the gate (--no-fail-on-errors)");
	}
	for (size_t i = 0; i < gt.nrules; i++)
		if (gt.rules[i].leaks > 0)
			fprintf(stderr, "tfalloc: suppressed: %" PRIu64 " leak %s (%" PRIu64 " bytes in %" PRIu64
			                " blocks) by leak:%s (%s)\n",
			        gt.rules[i].leaks, gt.rules[i].leaks == 1 ? "site" : "sites",
			        gt.rules[i].bytes, gt.rules[i].blocks, gt.rules[i].pattern, gt.rules[i].where);

	if (g->junit != NULL && write_junit(&gt, g->junit) < 0)
		gt.bad_input = true;
	if (g->sarif != NULL && write_sarif(&gt, g->sarif) < 0)
		gt.bad_input = true;

	if (gt.not_gated > 0)
		fprintf(stderr, "tfalloc: leak gate: the leaks of %zu %s killed by a signal or cut "
		                "short are not counted (their memory errors are)\n",
		        gt.not_gated, gt.not_gated == 1 ? "process" : "processes");
	bool gate_failed = gt.failed > 0 || gt.bad_input || gt.oom || gt.sampled > 0;
	if (gt.oom)
		fputs("tfalloc: leak gate: out of memory\n", stderr);
	fprintf(stderr, "tfalloc: leak gate: %s: %zu of %zu %s over the budget (%" PRIu64 " bytes, %" PRIu64
	                " blocks per process), %zu leak %s, %" PRIu64 " memory %s\n",
	        gt.sampled > 0 ? "REFUSED" : gate_failed ? "FAILED" : "passed", gt.failed, gt.gated, gt.gated == 1 ? "process" : "processes",
	        g->max_leak_bytes, g->max_leak_blocks, gt.nfindings,
	        gt.nfindings == 1 ? "site" : "sites", gt.errors_total, gt.errors_total == 1 ? "error" : "errors");

	if (cmd_status != 0)
		status = cmd_status;
	else if (gt.sampled > 0)
		status = TFA_GATE_EXIT_SAMPLED;
	else if (gt.bad_input && gt.gated == 0)
		status = TFA_EXIT_RUN_FAILED;
	else
		status = gate_failed ? g->exitcode : 0;

	for (size_t i = 0; i < gt.nprofiles; i++) {
		tfa_profile_symbols_free(gt.syms[i]);
		tfa_profile_free(&gt.profiles[i]);
	}
	for (size_t i = 0; i < gt.nrules; i++) {
		free(gt.rules[i].pattern);
		free(gt.rules[i].where);
	}
	tfa_sym_cache_free(gt.cache);
	free(gt.rules);
	free(gt.profiles);
	free(gt.syms);
	free(gt.over);
	free(gt.sums);
	free(gt.findings);
	return status;
}
