/* SPDX-License-Identifier: MIT */
/*
 * core/cfi.c, against libunwind: for stacks of every kind the shim meets
 * (deep recursion, -O2 -fomit-frame-pointer code, alloca and variable-length
 * arrays, a 64 KiB frame, callbacks from libc's qsort and from C++'s
 * std::sort through std::function, several threads at once, a library
 * unloaded and another loaded at its address), tfa_unwind_capture in
 * TFA_STACKS_UNWIND must give exactly the frames unw_backtrace gives, and
 * the walk of cfi.c must have served them (no refusal counted).  In a
 * signal handler (on the thread's stack or a sigaltstack) cfi.c refuses by
 * design and libunwind's frames come back, the same again.  The rule
 * cache: a few dozen return addresses leave it at its first size with at
 * most 4 pages resident; 12,000 in pairs that share a slot, cached by four
 * threads while it doubles, each get their own rule.  The timing case
 * prints ns per capture and asserts nothing about it.
 */
#include "core/cfi.h"
#include "core/unwind.h"

#include <check.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "function_of.h"
#include "cfi_frames.h"

#define DEPTH 128

typedef int (*backtrace_fn)(void **buffer, int size);
static backtrace_fn unw_backtrace_ref;

static void
setup(void)
{
	ck_assert_int_eq(tfa_unwind_init(TFA_STACKS_UNWIND), 0);
	void *lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
	ck_assert_ptr_nonnull(lib);
	unw_backtrace_ref = (backtrace_fn)dlsym(lib, "unw_backtrace");
	ck_assert_ptr_nonnull(unw_backtrace_ref);
}

struct probe {
	unsigned n;
	uintptr_t pcs[DEPTH];
	int ref_n;
	void *ref[DEPTH];
	uint64_t refusals; /* of this capture: before - after */
	uint64_t computed; /* rules this capture worked out from the DWARF tables */
};

/*
 * Both walks from here.  pcs[0] and ref[0] are return addresses into this
 * function from two different calls; from 1 on, the same frames.
 */
void probe_here(void *arg);

__attribute__((noinline)) void
probe_here(void *arg)
{
	struct probe *p = arg;
	uint64_t before = tfa_cfi_refusals(), computed = tfa_cfi_rules_computed();

	p->n = tfa_unwind_capture(TFA_STACKS_UNWIND, p->pcs, DEPTH, 0);
	p->refusals = tfa_cfi_refusals() - before;
	p->computed = tfa_cfi_rules_computed() - computed;
	p->ref_n = unw_backtrace_ref(p->ref, DEPTH);
	__asm__ volatile("" ::: "memory");
}

/* The two walks agree, frame by frame; the fast path served the first unless `refused`. */
static void
check_probe(const struct probe *p, bool refused, const char *what)
{
	ck_assert_msg(p->n >= 3, "%s: %u frames", what, p->n);
	ck_assert_msg(p->ref_n == (int)p->n, "%s: %u frames, libunwind %d", what, p->n, p->ref_n);
	ck_assert_str_eq(function_of(p->pcs[0]), "probe_here");
	for (unsigned i = 1; i < p->n; i++)
		ck_assert_msg(p->pcs[i] == (uintptr_t)p->ref[i], "%s: frame %u: %#lx (%s), libunwind %p (%s)",
			      what, i, (unsigned long)p->pcs[i], function_of(p->pcs[i]), p->ref[i],
			      function_of((uintptr_t)p->ref[i]));
	if (refused)
		ck_assert_msg(p->refusals >= 1, "%s: the walk was not refused", what);
	else
		ck_assert_msg(p->refusals == 0, "%s: refused, libunwind served it", what);
}

static bool
has_function(const struct probe *p, const char *name)
{
	for (unsigned i = 0; i < p->n; i++)
		if (strcmp(function_of(p->pcs[i]), name) == 0)
			return true;
	return false;
}

START_TEST(test_cfi_recursion)
{
	static const int levels[] = { 0, 1, 5, 40, 200 };

	for (unsigned i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		struct probe p = { 0 };
		frames_recurse(levels[i], probe_here, &p);
		check_probe(&p, false, "recursion");
		ck_assert(has_function(&p, "frames_recurse"));
		if (levels[i] < 100)
			ck_assert(has_function(&p, "main"));
		else
			ck_assert_uint_eq(p.n, DEPTH);
	}
}
END_TEST

START_TEST(test_cfi_alloca_vla_big)
{
	for (int n = 1; n < 5000; n = n * 3 + 1) {
		struct probe p = { 0 };
		frames_alloca((size_t)n, probe_here, &p);
		check_probe(&p, false, "alloca");
		ck_assert(has_function(&p, "frames_alloca"));

		struct probe q = { 0 };
		frames_vla(n, probe_here, &q);
		check_probe(&q, false, "vla");
		ck_assert(has_function(&q, "frames_vla"));
	}
	struct probe p = { 0 };
	frames_big(probe_here, &p);
	check_probe(&p, false, "64 KiB frame");
	ck_assert(has_function(&p, "frames_big"));
}
END_TEST

START_TEST(test_cfi_through_libc_and_cxx)
{
	struct probe p = { 0 };

	frames_qsort(probe_here, &p);
	check_probe(&p, false, "qsort");
	/* probe_here, by_value, then libc's qsort frames (or a sanitizer's). */
	unsigned at = 0;
	while (at < p.n && strcmp(function_of(p.pcs[at]), "frames_qsort") != 0)
		at++;
	ck_assert_uint_lt(at, p.n);
	ck_assert_uint_ge(at, 3);

	struct probe q = { 0 };
	frames_cxx(probe_here, &q);
	check_probe(&q, false, "c++");
	ck_assert(has_function(&q, "frames_cxx"));
	ck_assert_uint_ge(q.n, 10);
}
END_TEST

/* Repeated: the later captures come from the cache alone, and must be the same. */
START_TEST(test_cfi_cached)
{
	struct probe first = { 0 }, again = { 0 };

	for (int i = 0; i < 4; i++) {
		memset(&again, 0, sizeof(again));
		frames_vla(100, probe_here, &again);
		check_probe(&again, false, "cached");
		if (i == 0) {
			ck_assert_uint_gt(again.computed, 0); /* a first walk through new code */
			first = again;
		} else {
			ck_assert_uint_eq(again.computed, 0);
		}
		ck_assert_uint_eq(again.n, first.n);
		ck_assert_mem_eq(again.pcs, first.pcs, first.n * sizeof(uintptr_t));
	}
}
END_TEST

/* ---- the walk against the thread's last one (core/stack_cache.h) --------------------------- */

static tfa_stack_cache_t stack_cache;

/* A cached walk and a plain one from the same frame, and what the cached one left. */
struct cprobe {
	uintptr_t self_lo, self_hi;
	int got;       /* tfa_unwind_capture_cached_above */
	unsigned n;    /* tfa_unwind_capture_above: the shim's frames too */
	unsigned n_self, fresh;
	uint64_t refusals;
	uintptr_t pcs[TFA_UNWIND_FRAMES_MAX];
	uintptr_t cached[TFA_STACK_CACHE_SELF_MAX + TFA_STACK_CACHE_LEVELS]; /* self frames, then the stack */
};

void cached_here(void *arg);

__attribute__((noinline)) void
cached_here(void *arg)
{
	struct cprobe *p = arg;
	const void *frame = __builtin_frame_address(0);
	uint64_t before = tfa_cfi_refusals();

	p->got = tfa_unwind_capture_cached_above(frame, &stack_cache, p->self_lo, p->self_hi);
	p->n = tfa_unwind_capture_above(TFA_STACKS_UNWIND, frame, p->pcs, TFA_UNWIND_FRAMES_MAX - 8, 0);
	p->refusals = tfa_cfi_refusals() - before;
	p->n_self = stack_cache.n_self;
	p->fresh = stack_cache.fresh;
	unsigned k = 0;
	for (unsigned i = 0; i < stack_cache.n_self; i++)
		p->cached[k++] = stack_cache.self_pcs[i];
	for (int pos = p->got; pos-- > 0;)
		p->cached[k++] = stack_cache.lv[pos].pc;
	__asm__ volatile("" ::: "memory");
}

/* The cached walk gave the plain walk's frames, all of them, without a refusal. */
static void
check_cached(const struct cprobe *p, const char *what)
{
	ck_assert_msg(p->got > 0, "%s: cached walk returned %d", what, p->got);
	ck_assert_msg(p->refusals == 0, "%s: refused", what);
	ck_assert_msg(p->n < TFA_UNWIND_FRAMES_MAX - 8, "%s: too deep to compare", what);
	ck_assert_msg(p->n == p->n_self + (unsigned)p->got, "%s: %u frames, cached %u + %d", what, p->n,
		      p->n_self, p->got);
	for (unsigned i = 0; i < p->n; i++)
		ck_assert_msg(p->cached[i] == p->pcs[i], "%s: frame %u: cached %#lx (%s), walked %#lx (%s)",
			      what, i, (unsigned long)p->cached[i], function_of(p->cached[i]),
			      (unsigned long)p->pcs[i], function_of(p->pcs[i]));
}

/*
 * Shapes of every kind in a fixed random order, each walked against the
 * last: always the frames of the plain walk; most of them only checked.
 */
START_TEST(test_cfi_cached_walks)
{
	uint64_t rng = 0x9e3779b97f4a7c15u;
	unsigned long walked = 0, levels = 0;

	memset(&stack_cache, 0, sizeof(stack_cache));
	for (int round = 0; round < 600; round++) {
		struct cprobe p = { 0 };
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		switch (rng % 8) {
		case 0:
		case 1:
			frames_recurse((int)((rng >> 8) % 60), cached_here, &p);
			break;
		case 2:
			frames_vla((int)((rng >> 8) % 200) + 1, cached_here, &p);
			break;
		case 3:
			frames_alloca((rng >> 8) % 4000 + 16, cached_here, &p);
			break;
		case 4:
			frames_big(cached_here, &p);
			break;
		case 5:
			frames_qsort(cached_here, &p);
			break;
		case 6:
			frames_cxx(cached_here, &p);
			break;
		default:
			cached_here(&p);
			break;
		}
		check_cached(&p, "shapes");
		walked += p.fresh;
		levels += (unsigned)p.got;
	}
	/* Some levels were checked, not walked: the outer frames (this test, check's runner, main). */
	ck_assert_msg(walked < levels, "%lu levels walked of %lu", walked, levels);
}
END_TEST

/*
 * The same stack again: only the innermost frame is walked (its %rbp, here
 * the probe's argument, differs); the rest is checked.  From a cache that
 * is empty, and from one whose levels the slow step walked (the first walk
 * of this test's own frames works their rules out).
 */
START_TEST(test_cfi_cached_again)
{
	struct cprobe p[3];

	memset(&stack_cache, 0, sizeof(stack_cache));
	for (int i = 0; i < 3; i++) {
		memset(&p[i], 0, sizeof(p[i]));
		frames_recurse(30, cached_here, &p[i]);
		check_cached(&p[i], "again");
	}
	ck_assert_uint_eq(p[0].fresh, (unsigned)p[0].got);
	for (int i = 1; i < 3; i++) {
		ck_assert_uint_le(p[i].fresh, 1);
		ck_assert_int_eq(p[i].got, p[0].got);
	}
}
END_TEST

struct two_calls {
	int calls;
	struct cprobe p[2];
};

static void
cached_twice(void *arg)
{
	struct two_calls *t = arg;

	cached_here(&t->p[t->calls++]);
}

/*
 * Runs twice(cached_twice, t) from an empty cache: both walks give the plain
 * walk's frames, and differ in one frame only, a return address into the
 * function `site`: its index.
 */
static unsigned
two_walks_one_difference(struct two_calls *t, void (*twice)(frames_leaf_fn, void *), const char *site)
{
	unsigned at = 0, differ = 0;

	memset(&stack_cache, 0, sizeof(stack_cache));
	memset(t, 0, sizeof(*t));
	twice(cached_twice, t);
	ck_assert_int_eq(t->calls, 2);
	check_cached(&t->p[0], "first walk");
	check_cached(&t->p[1], "second walk");
	ck_assert_int_eq(t->p[0].got, t->p[1].got);
	for (unsigned i = 0; i < t->p[0].n; i++) {
		if (t->p[0].pcs[i] != t->p[1].pcs[i]) {
			differ++;
			at = i;
		}
	}
	ck_assert_uint_eq(differ, 1);
	ck_assert_str_eq(function_of(t->p[1].pcs[at]), site);
	return at;
}

/*
 * The case that makes the cache check every outer word: the second call of
 * frames_recurse from frames_two_sites lies at the same stack addresses as
 * the first, with the same return addresses into it, and the walk meets
 * the last one there; only the return address out of it differs.  A cache
 * that trusted the frame where the walks meet would give the first call
 * site again.
 */
START_TEST(test_cfi_cached_same_depth_other_site)
{
	static struct two_calls t;

	unsigned site = two_walks_one_difference(&t, frames_two_sites, "frames_two_sites");
	/* The second walk did use the cache: it walked past the call site, not the whole stack. */
	ck_assert_uint_lt(t.p[1].fresh, (unsigned)t.p[1].got);
	ck_assert_uint_gt(t.p[1].fresh, site - 1);
}
END_TEST

/*
 * A frame-pointer frame (its CFA from %rbp) at the same %rsp, with the same
 * return address, a %rbp 32 bytes apart (test/unit/cfi_rbp.S): the second
 * walk must not take it for the first, whose return address into
 * cfi_rbp_twice still lies, unchanged, where the first frame's CFA said.
 */
START_TEST(test_cfi_cached_rbp_frames)
{
	static struct two_calls t;

	(void)two_walks_one_difference(&t, cfi_rbp_twice, "cfi_rbp_twice");
}
END_TEST

/*
 * A frame whose return address the tables put at CFA - 24 (test/unit/cfi_rbp.S),
 * the usual slot zeroed: the fast step leaves it to the slow one (RULE_SLOW).
 * The plain walk gives libunwind's frames through it; the cached walk the
 * same, and again from the cache, with that frame's read kept and checked.
 */
START_TEST(test_cfi_ra_moved)
{
	struct probe p = { 0 };
	struct cprobe q[3];

	cfi_ra_moved(probe_here, &p);
	check_probe(&p, false, "return address at CFA - 24");
	ck_assert(has_function(&p, "cfi_ra_moved"));
	ck_assert(has_function(&p, "main"));
	memset(&stack_cache, 0, sizeof(stack_cache));
	for (int i = 0; i < 3; i++) {
		memset(&q[i], 0, sizeof(q[i]));
		cfi_ra_moved(cached_here, &q[i]);
		check_cached(&q[i], "return address at CFA - 24, cached");
	}
	ck_assert_int_eq(q[2].got, q[0].got);
	ck_assert_uint_le(q[2].fresh, 1);
}
END_TEST

/*
 * A flush (a library unloaded) and the rules may change: the next walk
 * checks nothing of the last.  (The captures come from one call site: from
 * another, the frames below it are at the same addresses, and are walked
 * again, as the two-sites case shows.)
 */
START_TEST(test_cfi_cached_flush)
{
	struct cprobe p[4];

	memset(&stack_cache, 0, sizeof(stack_cache));
	for (int i = 0; i < 4; i++) {
		if (i == 3)
			tfa_cfi_flush();
		memset(&p[i], 0, sizeof(p[i]));
		frames_recurse(10, cached_here, &p[i]);
		check_cached(&p[i], i < 3 ? "before the flush" : "after the flush");
	}
	ck_assert_uint_le(p[2].fresh, 1);
	ck_assert_uint_eq(p[3].fresh, (unsigned)p[3].got);
}
END_TEST

/* Deeper than the cache holds: -2 and an empty cache; the next stack that fits is walked whole. */
START_TEST(test_cfi_cached_too_deep)
{
	struct cprobe p = { 0 };

	memset(&stack_cache, 0, sizeof(stack_cache));
	frames_recurse(5, cached_here, &p);
	check_cached(&p, "shallow");
	memset(&p, 0, sizeof(p));
	frames_recurse(TFA_STACK_CACHE_LEVELS + 20, cached_here, &p);
	ck_assert_int_eq(p.got, -2);
	ck_assert_uint_eq(stack_cache.len, 0);
	memset(&p, 0, sizeof(p));
	frames_recurse(5, cached_here, &p);
	check_cached(&p, "shallow again");
	ck_assert_uint_eq(p.fresh, (unsigned)p.got);
}
END_TEST

/* The code range of the function holding pc. */
static void
function_range(uintptr_t pc, uintptr_t *lo, uintptr_t *hi)
{
	Dl_info info;
	void *extra = NULL;

	ck_assert_int_ne(dladdr1((void *)pc, &info, &extra, RTLD_DL_SYMENT), 0);
	const ElfW(Sym) *sym = extra;
	ck_assert_ptr_nonnull(sym);
	*lo = (uintptr_t)info.dli_saddr;
	*hi = *lo + sym->st_size;
}

/* The frames at the inner end in [self_lo, self_hi) go to self_pcs, not into the stack. */
START_TEST(test_cfi_cached_self_frames)
{
	struct cprobe p = { 0 };

	memset(&stack_cache, 0, sizeof(stack_cache));
	/* The anchor, the return address into cached_here's caller, is the innermost frames_recurse's. */
	function_range((uintptr_t)&frames_recurse, &p.self_lo, &p.self_hi);
	frames_recurse(3, cached_here, &p);
	check_cached(&p, "self frames");
	ck_assert_uint_eq(p.n_self, 4);
	ck_assert(p.cached[p.n_self] < p.self_lo || p.cached[p.n_self] >= p.self_hi);
	/* More than the cache keeps: not served. */
	struct cprobe q = { .self_lo = p.self_lo, .self_hi = p.self_hi };
	frames_recurse(TFA_STACK_CACHE_SELF_MAX + 2, cached_here, &q);
	ck_assert_int_eq(q.got, -2);
}
END_TEST

/*
 * The check of a kept walk, on levels made up over an array of words: each
 * word changed alone, at every position and for every level the check
 * starts from, is found (position 0's words are those of the walk's end);
 * of two changes, either is given.
 */
START_TEST(test_cfi_cached_check_every_word)
{
	enum { LEVELS = 40 };
	static tfa_stack_cache_t c;
	static uintptr_t words[2 * LEVELS];

	memset(&c, 0, sizeof(c));
	for (int p = 0; p < LEVELS; p++) {
		words[2 * p] = 0x1000u + (uintptr_t)p;
		words[2 * p + 1] = 0x2000u + (uintptr_t)p;
		c.lv[p].ra_at = (uintptr_t)&words[2 * p];
		c.lv[p].ra = words[2 * p];
		/* Every third level kept %rbp: its second check reads the first word again. */
		c.lv[p].bp_at = p % 3 == 0 ? c.lv[p].ra_at : (uintptr_t)&words[2 * p + 1];
		c.lv[p].bp_read = p % 3 == 0 ? c.lv[p].ra : words[2 * p + 1];
	}
	for (int m = 0; m < LEVELS; m++) {
		ck_assert_int_eq(tfa_cfi_test_outer_changed(&c, m), -1);
		for (int w = 0; w < 2 * LEVELS; w++) {
			words[w] ^= 0x40000;
			int changed = w / 2 <= m && (w % 2 == 0 || (w / 2) % 3 != 0) ? w / 2 : -1;
			ck_assert_msg(tfa_cfi_test_outer_changed(&c, m) == changed, "from %d, word %d: %d, want %d",
				      m, w, tfa_cfi_test_outer_changed(&c, m), changed);
			/* Two changes: either level may be given (a match beyond either cannot hold). */
			for (int v = 0; v < w; v += 7) {
				words[v] ^= 0x80000;
				int other = v / 2 <= m && (v % 2 == 0 || (v / 2) % 3 != 0) ? v / 2 : -1;
				int got = tfa_cfi_test_outer_changed(&c, m);
				ck_assert_msg(got == (changed >= 0 ? changed : other) || (got == other && other >= 0),
					      "from %d, words %d and %d: %d", m, w, v, got);
				words[v] ^= 0x80000;
			}
			words[w] ^= 0x40000;
		}
	}
}
END_TEST

/*
 * Beyond a level whose words changed, the kept addresses are the last
 * stack's: on a stack reused since (a coroutine's), they can lie in a page
 * unmapped meanwhile.  The check stops at the change and never reads them
 * (a check that read every level first died here).
 */
START_TEST(test_cfi_cached_check_stops_at_change)
{
	static tfa_stack_cache_t c;
	long page = sysconf(_SC_PAGESIZE);
	char *map = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(map, MAP_FAILED);
	uintptr_t *words = (uintptr_t *)map;
	uintptr_t gone = (uintptr_t)(map + page);
	ck_assert_int_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
	memset(&c, 0, sizeof(c));
	/* Levels 3..5 readable and unchanged but level 3, whose return address changed; 0..2 gone. */
	for (int p = 0; p < 6; p++) {
		c.lv[p].ra_at = p < 3 ? gone + 8 * (uintptr_t)p : (uintptr_t)&words[p];
		c.lv[p].ra = 0x5000 + (uintptr_t)p;
		c.lv[p].bp_at = c.lv[p].ra_at;
		c.lv[p].bp_read = c.lv[p].ra;
		if (p >= 3)
			words[p] = c.lv[p].ra;
	}
	words[3] ^= 1;
	ck_assert_int_eq(tfa_cfi_test_outer_changed(&c, 5), 3);
	ck_assert_int_eq(tfa_cfi_test_outer_changed(&c, 3), 3);
	ck_assert_int_eq(munmap(map, (size_t)page * 2), 0);
}
END_TEST

/* ---- threads ------------------------------------------------------------------------------ */

void *probe_on_thread(void *arg);

void *
probe_on_thread(void *arg)
{
	struct probe *p = arg;

	for (int round = 0; round < 200; round++) {
		memset(p, 0, sizeof(*p));
		switch (round % 4) {
		case 0:
			frames_recurse(round % 17, probe_here, p);
			break;
		case 1:
			frames_vla(round + 3, probe_here, p);
			break;
		case 2:
			frames_qsort(probe_here, p);
			break;
		default:
			frames_cxx(probe_here, p);
			break;
		}
		check_probe(p, false, "thread");
		ck_assert(has_function(p, "probe_on_thread"));
	}
	return NULL;
}

START_TEST(test_cfi_threads)
{
	pthread_t t[4];
	static struct probe probes[4];

	tfa_unwind_flush_caches(); /* every thread computes rules at the same time */
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, probe_on_thread, &probes[i]), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
}
END_TEST

/* ---- signals: refused, libunwind's frames ------------------------------------------------- */

static struct probe signal_probe;

void on_signal(int sig);

void
on_signal(int sig)
{
	(void)sig;
	frames_recurse(3, probe_here, &signal_probe);
}

static void
probe_in_handler(bool altstack)
{
	struct sigaction sa = { .sa_handler = on_signal };
	stack_t ss = { 0 };

	if (altstack) {
		ss.ss_size = 64 << 10;
		ss.ss_sp = malloc(ss.ss_size);
		ck_assert_int_eq(sigaltstack(&ss, NULL), 0);
		sa.sa_flags = SA_ONSTACK;
	}
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	memset(&signal_probe, 0, sizeof(signal_probe));
	frames_recurse(2, (frames_leaf_fn)(void (*)(void))raise, (void *)(intptr_t)SIGUSR1);
	check_probe(&signal_probe, true, altstack ? "sigaltstack" : "handler");
	ck_assert(has_function(&signal_probe, "on_signal"));
	ck_assert(has_function(&signal_probe, "main"));
	if (altstack) {
		ss.ss_flags = SS_DISABLE;
		ck_assert_int_eq(sigaltstack(&ss, NULL), 0);
	}
}

START_TEST(test_cfi_signal)
{
	probe_in_handler(false);
	probe_in_handler(true);
}
END_TEST

/* ---- a library unloaded, another at its address ------------------------------------------- */

typedef void (*lib_call_fn)(frames_leaf_fn fn, void *arg);

/*
 * Loads path, captures through its cfi_lib_call twice, unloads it.  The
 * frames are checked for what they must be: the library's function, then
 * this one, then the same frames as the first library's (the same call
 * site).  Not against libunwind: after the unload, libunwind 1.6's trace
 * cache keeps the first library's rule for the return address into
 * cfi_lib_call (unw_flush_cache does not reach it) and reads the wrong slot.
 */
void probe_through(const char *path, uintptr_t *base, struct probe *out);

TFA_NOINLINE __attribute__((noclone)) void
probe_through(const char *path, uintptr_t *base, struct probe *out)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(lib != NULL, "%s", dlerror());
	lib_call_fn call = (lib_call_fn)dlsym(lib, "cfi_lib_call");
	ck_assert_ptr_nonnull(call);
	Dl_info info;
	ck_assert(dladdr((void *)call, &info) != 0);
	*base = (uintptr_t)info.dli_fbase;
	for (int i = 0; i < 2; i++) {
		uint64_t before = tfa_cfi_refusals();
		memset(out, 0, sizeof(*out));
		call(probe_here, out);
		ck_assert_uint_eq(tfa_cfi_refusals(), before);
		ck_assert_str_eq(function_of(out->pcs[0]), "probe_here");
		ck_assert_str_eq(function_of(out->pcs[1]), "cfi_lib_call");
		ck_assert_str_eq(function_of(out->pcs[2]), "probe_through");
		ck_assert(has_function(out, "main"));
	}
	ck_assert_int_eq(dlclose(lib), 0);
	tfa_unwind_flush_caches(); /* what the shim's dlclose does */
}

START_TEST(test_cfi_dlclose)
{
	const char *paths[] = { CFI_LIB_A, CFI_LIB_B, CFI_LIB_A };
	uintptr_t bases[3];
	struct probe probes[3];

	/* The first, while nothing is stale, against libunwind too. */
	{
		void *lib = dlopen(CFI_LIB_A, RTLD_NOW | RTLD_LOCAL);
		ck_assert_ptr_nonnull(lib);
		struct probe p = { 0 };
		((lib_call_fn)dlsym(lib, "cfi_lib_call"))(probe_here, &p);
		check_probe(&p, false, "library");
		dlclose(lib);
		tfa_unwind_flush_caches();
	}
	for (int i = 0; i < 3; i++)
		probe_through(paths[i], &bases[i], &probes[i]);
	/* The case this is about: the second library where the first was. */
	ck_assert_uint_eq(bases[1], bases[0]);
	ck_assert_uint_eq(bases[2], bases[0]);
	for (int i = 1; i < 3; i++) {
		ck_assert_uint_eq(probes[i].n, probes[0].n);
		ck_assert_mem_eq(probes[i].pcs, probes[0].pcs, probes[0].n * sizeof(uintptr_t));
	}
}
END_TEST

/* ---- the cache: its size follows the keys ------------------------------------------------ */

/* Pages of the cache's reserve that are resident. */
static size_t
cache_resident_pages(const tfa_cfi_cache_info_t *info)
{
	size_t pages = info->reserved_bytes / 4096, n = 0;
	unsigned char *v = malloc(pages);

	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(mincore((void *)(uintptr_t)info->table, info->reserved_bytes, v), 0);
	for (size_t i = 0; i < pages; i++)
		n += v[i] & 1;
	free(v);
	return n;
}

/*
 * A program with few return addresses keeps the cache at its first size,
 * and only the pages of the slots in use are resident (the cache used to
 * spread its keys over the whole reserve by a hash: a page per key, up to
 * 1 MiB, for any program).
 */
START_TEST(test_cfi_cache_small)
{
	struct probe p = { 0 };
	tfa_cfi_cache_info_t info;

	frames_recurse(5, probe_here, &p);
	check_probe(&p, false, "small");
	frames_qsort(probe_here, &p);
	check_probe(&p, false, "small");
	tfa_cfi_cache_info(&info);
	ck_assert_ptr_nonnull(info.table);
	ck_assert_uint_gt(info.keys, 0);
	size_t in_use = ((size_t)info.slots * 16 + 4095) / 4096;
	size_t resident = cache_resident_pages(&info);
	ck_assert_msg(resident <= in_use, "%zu pages resident, %zu in use (%u slots, %u keys)",
		      resident, in_use, info.slots, info.keys);
	if (info.keys < 128) { /* else an earlier test in this process grew it */
		ck_assert_uint_eq(info.slots, info.min_slots);
		ck_assert_msg(resident <= 16384 / 4096, "%zu pages resident for %u keys", resident,
			      info.keys);
	}
}
END_TEST

/* Addresses in libc's code: many FDEs. */
struct code_range {
	uintptr_t lo, hi;
};

static int
find_libc_code(struct dl_phdr_info *dl, size_t size, void *arg)
{
	struct code_range *r = arg;
	(void)size;
	if (strstr(dl->dlpi_name, "libc.so") == NULL)
		return 0;
	for (int i = 0; i < dl->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &dl->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) != 0) {
			r->lo = dl->dlpi_addr + ph->p_vaddr;
			r->hi = r->lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

#define RULE_PAIRS 6000

struct rules_job {
	uintptr_t lo;
	unsigned start; /* each thread goes through the pairs from its own place */
	unsigned wrong;
};

/*
 * Pairs of return addresses 2 bytes apart, in the same slot at every
 * size: each must get its own rule from the cache, while it doubles
 * under the threads' feet.
 */
static void *
rules_through_cache(void *arg)
{
	struct rules_job *job = arg;

	for (unsigned k = 0; k < RULE_PAIRS; k++) {
		uintptr_t a = job->lo + 64 * (uintptr_t)((k + job->start) % RULE_PAIRS);
		for (uintptr_t ra = a; ra <= a + 2; ra += 2)
			if (tfa_cfi_test_rule(ra, true) != tfa_cfi_test_rule(ra, false))
				job->wrong++;
	}
	return NULL;
}

START_TEST(test_cfi_cache_grows)
{
	struct code_range code = { 0 };
	struct rules_job jobs[4];
	pthread_t t[4];
	tfa_cfi_cache_info_t info;

	ck_assert_int_eq(dl_iterate_phdr(find_libc_code, &code), 1);
	ck_assert_uint_gt(code.hi - code.lo, 64 * RULE_PAIRS + 64);
	uintptr_t lo = (code.lo + 64) & ~(uintptr_t)63;
	for (int i = 0; i < 4; i++) {
		jobs[i] = (struct rules_job){ .lo = lo, .start = (unsigned)i * RULE_PAIRS / 4 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, rules_through_cache, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_uint_eq(jobs[i].wrong, 0);
	}
	tfa_cfi_cache_info(&info);
	ck_assert_uint_gt(info.slots, info.min_slots);
	ck_assert_uint_le(cache_resident_pages(&info), ((size_t)info.slots * 16 + 4095) / 4096);

	/* All kept (but those where no object has unwind information): nearly nothing computed again. */
	uint64_t computed = tfa_cfi_rules_computed();
	struct rules_job again = { .lo = lo };
	rules_through_cache(&again);
	ck_assert_uint_eq(again.wrong, 0);
	uint64_t recomputed = tfa_cfi_rules_computed() - computed;
	ck_assert_msg(recomputed < 2 * RULE_PAIRS / 50, "%lu of %u computed again",
		      (unsigned long)recomputed, 2 * RULE_PAIRS);
}
END_TEST

/* ---- timing: printed, never asserted (but both walks must see the same frames) ------------- */

struct timing {
	int reps;
	bool libunwind;
	double ns;
	unsigned frames;
};

static double
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

__attribute__((noinline)) static void
time_here(void *arg)
{
	struct timing *t = arg;
	uintptr_t pcs[64];
	void *ref[64];
	double best = 1e30;

	for (int round = 0; round < 5; round++) {
		double t0 = now_ns();
		for (int i = 0; i < t->reps; i++) {
			if (t->libunwind)
				t->frames = (unsigned)unw_backtrace_ref(ref, 64);
			else
				t->frames = tfa_unwind_capture(TFA_STACKS_UNWIND, pcs, 64, 0);
			__asm__ volatile("" ::: "memory");
		}
		double ns = (now_ns() - t0) / t->reps;
		best = ns < best ? ns : best;
	}
	t->ns = best;
}

START_TEST(test_cfi_timing)
{
	/* frames_depth(k) puts k frames between main's callees and the leaf. */
	static const int depths[] = { 12, 22 };

	for (int i = 0; i < 2; i++) {
		struct timing cfi = { .reps = 20000 }, unw = { .reps = 20000, .libunwind = true };
		/* The test's own frames below: from the leaf to main and beyond. */
		struct probe p = { 0 };
		frames_depth(depths[i], probe_here, &p);
		unsigned extra = p.n - (unsigned)depths[i];
		frames_depth(depths[i] - (int)extra, time_here, &cfi);
		frames_depth(depths[i] - (int)extra, time_here, &unw);
		ck_assert_uint_gt(cfi.frames, (unsigned)depths[i] - extra);
		ck_assert_uint_eq(cfi.frames, unw.frames);
		printf("cfi timing: %u frames: cfi.c %.1f ns (%.2f ns/frame), libunwind %.1f ns "
		       "(%u frames)\n",
		       cfi.frames, cfi.ns, cfi.ns / cfi.frames, unw.ns, unw.frames);
	}
}
END_TEST

static Suite *
cfi_suite(void)
{
	Suite *s = suite_create("cfi");
	TCase *tc = tcase_create("against libunwind");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_cfi_recursion);
	tcase_add_test(tc, test_cfi_alloca_vla_big);
	tcase_add_test(tc, test_cfi_through_libc_and_cxx);
	tcase_add_test(tc, test_cfi_cached);
	tcase_add_test(tc, test_cfi_cached_walks);
	tcase_add_test(tc, test_cfi_cached_again);
	tcase_add_test(tc, test_cfi_cached_same_depth_other_site);
	tcase_add_test(tc, test_cfi_cached_rbp_frames);
	tcase_add_test(tc, test_cfi_ra_moved);
	tcase_add_test(tc, test_cfi_cached_flush);
	tcase_add_test(tc, test_cfi_cached_too_deep);
	tcase_add_test(tc, test_cfi_cached_self_frames);
	tcase_add_test(tc, test_cfi_cached_check_every_word);
	tcase_add_test(tc, test_cfi_cached_check_stops_at_change);
	tcase_add_test(tc, test_cfi_threads);
	tcase_add_test(tc, test_cfi_signal);
	tcase_add_test(tc, test_cfi_dlclose);
	tcase_add_test(tc, test_cfi_cache_small);
	tcase_add_test(tc, test_cfi_cache_grows);
	tcase_add_test(tc, test_cfi_timing);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(cfi_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
