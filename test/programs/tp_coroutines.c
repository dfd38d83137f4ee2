/* SPDX-License-Identifier: MIT */
/*
 * tp_coroutines: allocations on coroutine stacks (ucontext), with many
 * switches between the stacks of one thread, for the stacks the shim
 * records with and without its cache of each thread's last walk
 * (core/stack_cache.h).  Three runners, the main thread and WORKERS
 * threads, each run the same schedule (run_all) with its own coroutines:
 *
 *   phase 0  with_alloca called twice, through alloca_deep then through
 *            alloca_shallow, its buffer sized so that alloca_leaf's frame
 *            is at the same address both times: the same stack address and
 *            return address, another %rbp (see with_alloca).
 *   phase 1  coroutines of kinds a, b and c on three stacks, round robin:
 *            each recurses to its own depth through its own functions
 *            (walk_a, walk_b; ping_c and pong_c in turn, which have larger
 *            frames), allocates at intermediate depths and at the bottom
 *            (leaf), and switches back to the runner halfway down and in
 *            leaf; between two switches the runner allocates at depths 1
 *            to 4 (sched_leaf under sched_walk).
 *   phase 2  a "quiet" coroutine of kind a (no allocation but leaf's, at
 *            depth 6) on stack 0; stack 0 unmapped and mapped again at the
 *            same address (MAP_FIXED), then a quiet coroutine of kind b,
 *            also depth 6: walk_a and walk_b (entry_a and entry_b) have the
 *            same code, so leaf's frame is at the same address, with the
 *            same return address and %rbp, as in the last walk of the
 *            thread, but its callers are other functions.  Then stack 1
 *            remapped and kind c on it (other frames at those addresses).
 *   phase 3  a quiet coroutine of kind c on stack 1, which is then made
 *            PROT_NONE (the thread's last walk was on it); at once a
 *            coroutine on stack 0 (below it) allocates, then the runner,
 *            then a coroutine on stack 2 (above it).  Then kind d twice on
 *            stack 2, the second time on its lower half with the upper half
 *            PROT_NONE, where the first one's outer frames were (see dig).
 *   phase 4  the main thread only, last: kind g, whose entry returns to
 *            glibc's __start_context as makecontext leaves it (see
 *            OUTERMOST): the shim's walk refuses it, libunwind walks it,
 *            and a refused walk takes the thread's cache off for its next
 *            256 captures (core/shim.c, capture_cached).
 *
 * Each worker's stacks are carved below its own thread stack in one mapping
 * (pthread_attr_setstack), within reach of its thread pointer; the main
 * thread's are mapped 12 MiB below its stack, within reach of
 * __libc_stack_end (core/unwind.c, fp_stack_end), if that space is free:
 * the shim walks them itself, with the cache.  (Elsewhere it would refuse
 * them, as any stack of unknown bounds, and libunwind would walk them:
 * the same stacks, only not through the cache.)  Every stack has a
 * PROT_NONE guard page above it and below it.
 *
 * Prints, for each chain of callers of an allocation (innermost first,
 * "<" between frames, then "|coro", "|main" or "|thread" for what must
 * follow the outermost: nothing or __start_context, glibc's start of main,
 * or start_thread),
 *   CHAIN chain num_allocs total_bytes leaked_bytes
 * then a checksum of its work.  Leaked on purpose: every block leaf
 * allocates in a coroutine of kind c (the "leaked_bytes" of those chains);
 * everything else is freed, at once or at the end of run_all.
 */
#include <alloca.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

/* No inlining, cloning or merging of identical functions: each is a frame of its own. */
#define NOIPA static __attribute__((noipa))
#define BARRIER() __asm__ volatile("" ::: "memory")
/*
 * The stack's first frame by its unwind rule (the return address undefined,
 * as glibc's own clone3 and _start have it): the walks end here.  glibc's
 * makecontext puts the address of __start_context as the entry's return
 * address, where no unwind rule covers the address before it: the shim's
 * walk refuses such a stack and libunwind walks it (kind g).
 */
#define OUTERMOST() __asm__ volatile(".cfi_undefined rip")

#define PAGE         4096
#define CORO_STACK   (64 * 1024)
#define THREAD_STACK (256 * 1024)
#define NCORO        3
#define WORKERS      2
#define KEPT_MAX     512
#define CHAINS_MAX   128
#define CHAIN_LEN    320

enum kind { KIND_A, KIND_B, KIND_C, KIND_D, KIND_G };
enum fate { FREE_NOW, KEEP, LEAK };

struct runner;

struct coro {
	ucontext_t ctx;
	struct runner *r;
	enum kind kind;
	int depth;
	int quiet; /* no allocation but leaf's, no switch but leaf's */
	int done;
	long result;
};

struct runner {
	const char *base; /* the chain of run_all's callers */
	int is_main;
	ucontext_t home;
	struct coro *cur;
	struct coro co[NCORO];
	char *stack[NCORO];
	unsigned long seq;
	unsigned long sum;
	uintptr_t alloca_frame; /* with_alloca's first frame */
	char *alloca_buf;       /* and its buffer */
	uintptr_t dig_frame;    /* dig's first frame */
	char *dig_buf;          /* and its buffer */
	void *kept[KEPT_MAX];
	int n_kept;
};

static __thread struct runner *self;

/* ---- the ledger: what each chain of callers allocated ---- */

struct chain {
	char name[CHAIN_LEN];
	long allocs, bytes, leaked;
};

static struct chain chains[CHAINS_MAX];
static int n_chains;
static pthread_mutex_t chains_lock = PTHREAD_MUTEX_INITIALIZER;

static void
die(const char *what)
{
	fprintf(stderr, "tp_coroutines: %s\n", what);
	exit(1);
}

static void
append(char *buf, const char *name)
{
	size_t len = strlen(buf), n = strlen(name);

	if (len + n + 2 >= CHAIN_LEN)
		die("chain too long");
	if (len != 0)
		buf[len++] = '<';
	memcpy(buf + len, name, n + 1);
}

static const char *
frame_name(enum kind kind, int level)
{
	switch (kind) {
	case KIND_A:
		return "walk_a";
	case KIND_B:
		return "walk_b";
	case KIND_C:
		return level % 2 == 1 ? "ping_c" : "pong_c";
	case KIND_D:
		return "dig";
	case KIND_G:
		return "walk_g";
	}
	return "?";
}

static const char *const entry_name[] = { "entry_a", "entry_b", "entry_c", "entry_d", "entry_g" };

/* Fills the block, adds it to the ledger under `chain`, and frees it now, later or never. */
static void
account(struct runner *r, char *p, size_t n, const char *chain, enum fate fate)
{
	if (p == NULL)
		die("out of memory");
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(r->seq + i);
	for (size_t i = 0; i < n; i += 7)
		r->sum += (unsigned char)p[i];
	r->seq++;
	pthread_mutex_lock(&chains_lock);
	int k;
	for (k = 0; k < n_chains && strcmp(chains[k].name, chain) != 0; k++)
		;
	if (k == n_chains) {
		if (n_chains == CHAINS_MAX)
			die("too many chains");
		strcpy(chains[n_chains++].name, chain);
	}
	chains[k].allocs++;
	chains[k].bytes += (long)n;
	if (fate == LEAK)
		chains[k].leaked += (long)n;
	pthread_mutex_unlock(&chains_lock);
	if (fate == FREE_NOW) {
		free(p);
	} else if (fate == KEEP) {
		if (r->n_kept == KEPT_MAX)
			die("too many kept blocks");
		r->kept[r->n_kept++] = p;
	}
}

/* A coroutine's chain: `inner` (if any), its frames from `level` out to 1, its entry. */
static void
coro_chain(char *buf, const struct coro *c, const char *inner, int level)
{
	buf[0] = '\0';
	if (inner != NULL)
		append(buf, inner);
	for (int i = level; i >= 1; i--)
		append(buf, frame_name(c->kind, i));
	append(buf, entry_name[c->kind]);
	strcat(buf, "|coro");
}

static size_t
size_of(const struct coro *c, int level)
{
	return 24 + 8 * (size_t)level + 40 * (size_t)c->kind;
}

/* ---- switching ---- */

static void
yield(void)
{
	struct runner *r = self;

	if (swapcontext(&r->cur->ctx, &r->home) != 0)
		die("swapcontext");
}

static void
resume(struct runner *r, struct coro *c)
{
	r->cur = c;
	if (swapcontext(&r->home, &c->ctx) != 0)
		die("swapcontext");
}

/* ---- the coroutines' functions ---- */

/* The bottom of every coroutine's recursion. */
NOIPA long
leaf(struct coro *c, int level)
{
	size_t n = size_of(c, level) + 16;
	char *p = malloc(n);
	char chain[CHAIN_LEN];

	BARRIER();
	coro_chain(chain, c, "leaf", level);
	account(c->r, p, n, chain, c->kind == KIND_C ? LEAK : c->r->seq % 2 ? KEEP : FREE_NOW);
	yield();
	BARRIER();
	return (long)n;
}

static enum fate
walk_fate(const struct coro *c)
{
	return c->r->seq % 3 == 0 ? FREE_NOW : KEEP;
}

/*
 * walk_a and walk_b, entry_a and entry_b: the same code under other names;
 * walk_g and entry_g too, but for the entry's unwind rule (`first`).
 */
#define WALKER(x, first)                                                          \
	NOIPA long walk_##x(struct coro *c, int level)                            \
	{                                                                         \
		long ret = level;                                                 \
		if (level == c->depth) {                                          \
			ret += leaf(c, level);                                    \
			BARRIER();                                                \
			return ret;                                               \
		}                                                                 \
		if (!c->quiet && level % 2 == 1) {                                \
			size_t n = size_of(c, level);                             \
			char *p = malloc(n);                                      \
			char chain[CHAIN_LEN];                                    \
			BARRIER();                                                \
			coro_chain(chain, c, NULL, level);                        \
			account(c->r, p, n, chain, walk_fate(c));                 \
		}                                                                 \
		if (!c->quiet && level == c->depth / 2)                           \
			yield();                                                  \
		ret += walk_##x(c, level + 1);                                    \
		BARRIER();                                                        \
		return ret;                                                       \
	}                                                                         \
	NOIPA void entry_##x(void)                                                \
	{                                                                         \
		first;                                                            \
		struct coro *c = self->cur;                                       \
		c->result = walk_##x(c, 1);                                       \
		BARRIER();                                                        \
		c->done = 1;                                                      \
	}
WALKER(a, OUTERMOST())
WALKER(b, OUTERMOST())
WALKER(g, (void)0)

NOIPA long pong_c(struct coro *c, int level);

/* Odd levels of kind c: a larger frame, no allocation. */
NOIPA long
ping_c(struct coro *c, int level)
{
	volatile char pad[200];

	pad[level] = (char)level;
	if (level == c->depth)
		return leaf(c, level) + pad[level];
	if (!c->quiet && level == c->depth / 2)
		yield();
	long ret = pong_c(c, level + 1);
	BARRIER();
	return ret + pad[level];
}

/* Even levels of kind c: allocates, then recurses. */
NOIPA long
pong_c(struct coro *c, int level)
{
	volatile char pad[56];

	pad[level] = (char)level;
	if (level == c->depth)
		return leaf(c, level) + pad[level];
	if (!c->quiet) {
		size_t n = size_of(c, level);
		char *p = malloc(n);
		char chain[CHAIN_LEN];
		BARRIER();
		coro_chain(chain, c, NULL, level);
		account(c->r, p, n, chain, walk_fate(c));
	}
	long ret = ping_c(c, level + 1);
	BARRIER();
	return ret + pad[level];
}

NOIPA void
entry_c(void)
{
	OUTERMOST();
	struct coro *c = self->cur;
	c->result = ping_c(c, 1);
	BARRIER();
	c->done = 1;
}

/*
 * Kind d: dig's buffer puts dig_leaf's frame at the same address in two
 * coroutines on one stack, the first with the whole stack, the second with
 * its lower half while the upper half, where the first one's outer frames
 * were, is PROT_NONE: dig_leaf's level is the same (stack address, return
 * address, %rbp), the words above it are not, and the levels beyond the
 * first change must not be read (they lie in the PROT_NONE half).
 */
#define DIG_FIRST (40 * 1024)

NOIPA void
dig_leaf(struct coro *c)
{
	size_t n = 300 + 4 * (size_t)c->depth;
	char *p = malloc(n);
	char chain[CHAIN_LEN];

	BARRIER();
	coro_chain(chain, c, "dig_leaf", 1);
	account(c->r, p, n, chain, KEEP);
}

NOIPA size_t
dig_size(struct coro *c, uintptr_t frame)
{
	struct runner *r = c->r;

	if (c->depth == 1) {
		r->dig_frame = frame;
		return DIG_FIRST;
	}
	return DIG_FIRST - (r->dig_frame - frame);
}

NOIPA void
dig_check(struct coro *c, char *buf)
{
	struct runner *r = c->r;

	if (c->depth == 1)
		r->dig_buf = buf;
	else if (buf != r->dig_buf)
		die("dig: the second buffer is not where the first was");
}

/* No branch: one call of dig_leaf, one return address into it. */
NOIPA void
dig(struct coro *c)
{
	char *buf = alloca(dig_size(c, (uintptr_t)__builtin_frame_address(0)));

	__asm__ volatile("" : : "r"(buf) : "memory");
	dig_check(c, buf);
	dig_leaf(c);
	BARRIER();
}

NOIPA void
entry_d(void)
{
	OUTERMOST();
	struct coro *c = self->cur;
	dig(c);
	BARRIER();
	c->done = 1;
}

static void (*const entry_fn[])(void) = { entry_a, entry_b, entry_c, entry_d, entry_g };

static void
start_sized(struct runner *r, int slot, enum kind kind, int depth, int quiet, size_t size)
{
	struct coro *c = &r->co[slot];

	memset(c, 0, sizeof(*c));
	c->r = r;
	c->kind = kind;
	c->depth = depth;
	c->quiet = quiet;
	if (getcontext(&c->ctx) != 0)
		die("getcontext");
	c->ctx.uc_stack.ss_sp = r->stack[slot];
	c->ctx.uc_stack.ss_size = size;
	c->ctx.uc_link = &r->home;
	makecontext(&c->ctx, entry_fn[kind], 0);
}

static void
start(struct runner *r, int slot, enum kind kind, int depth, int quiet)
{
	start_sized(r, slot, kind, depth, quiet, CORO_STACK);
}

static void
finish(struct runner *r, int slot)
{
	struct coro *c = &r->co[slot];

	while (!c->done)
		resume(r, c);
	r->sum += (unsigned long)c->result;
}

/* ---- the runner's own allocations ---- */

NOIPA void
sched_leaf(struct runner *r, int depth)
{
	size_t n = 200 + 16 * (size_t)depth;
	char *p = malloc(n);
	char chain[CHAIN_LEN] = "";

	BARRIER();
	append(chain, "sched_leaf");
	for (int i = 0; i < depth; i++)
		append(chain, "sched_walk");
	append(chain, r->base);
	account(r, p, n, chain, r->seq % 2 ? KEEP : FREE_NOW);
}

NOIPA void
sched_walk(struct runner *r, int depth, int level)
{
	if (level == depth)
		sched_leaf(r, depth);
	else
		sched_walk(r, depth, level + 1);
	BARRIER();
}

/*
 * The same stack address, return address and words above, another frame:
 * with_alloca's first call, deeper, and its second, whose larger buffer puts
 * alloca_leaf's frame where it was; between them only %rbp differs (the
 * frame of with_alloca), and the words the first walk read above it lie
 * untouched in the second's buffer.  alloca_deep and alloca_shallow are
 * called from one place of via_alloca, and via_alloca from one place of
 * run_all, so that their return addresses are the same too: a walk that
 * matched with_alloca's level by its stack address and return address
 * alone would find every word it checks unchanged, and keep alloca_deep.
 */
NOIPA void
alloca_leaf(struct runner *r, int call)
{
	size_t n = 100 + 20 * (size_t)call;
	char *p = malloc(n);
	char chain[CHAIN_LEN] = "";

	BARRIER();
	append(chain, "alloca_leaf");
	append(chain, "with_alloca");
	append(chain, call == 1 ? "alloca_deep" : "alloca_shallow");
	append(chain, "via_alloca");
	append(chain, r->base);
	account(r, p, n, chain, KEEP);
}

/* with_alloca's buffer: the second ends where the first did. */
NOIPA size_t
alloca_size(struct runner *r, int call, uintptr_t frame)
{
	if (call == 1) {
		r->alloca_frame = frame;
		return 256;
	}
	return 256 + (frame - r->alloca_frame);
}

NOIPA void
alloca_check(struct runner *r, int call, char *buf)
{
	if (call == 1)
		r->alloca_buf = buf;
	else if (buf != r->alloca_buf)
		die("with_alloca: the second buffer is not where the first was");
}

/* No branch: one call of alloca_leaf, one return address into it. */
NOIPA void
with_alloca(struct runner *r, int call)
{
	char *buf = alloca(alloca_size(r, call, (uintptr_t)__builtin_frame_address(0)));

	__asm__ volatile("" : : "r"(buf) : "memory");
	alloca_check(r, call, buf);
	alloca_leaf(r, call);
	BARRIER();
}

NOIPA void
alloca_deep(struct runner *r)
{
	volatile char pad[256];

	pad[0] = 1;
	with_alloca(r, 1);
	BARRIER();
	r->sum += (unsigned long)pad[0];
}

NOIPA void
alloca_shallow(struct runner *r)
{
	with_alloca(r, 2);
	BARRIER();
}

static void (*const alloca_path[])(struct runner *) = { alloca_deep, alloca_shallow };

NOIPA void
via_alloca(struct runner *r, int i)
{
	alloca_path[i](r);
	BARRIER();
}

/* ---- the schedule ---- */

static void
remap(struct runner *r, int slot)
{
	if (munmap(r->stack[slot], CORO_STACK) != 0)
		die("munmap");
	void *p = mmap(r->stack[slot], CORO_STACK, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (p != r->stack[slot])
		die("mmap MAP_FIXED");
}

NOIPA void
run_all(struct runner *r)
{
	self = r;
	sched_walk(r, 1, 1); /* a last walk for phase 0 to follow (not the thread's first capture) */
	/* Phase 0, from one call site: the same return address into run_all (i opaque to the compiler). */
	for (int i = 0; i < 2; i++) {
		__asm__ volatile("" : "+r"(i));
		via_alloca(r, i);
	}
	/* Phase 1: three kinds round robin, the runner allocating between switches. */
	start(r, 0, KIND_A, 5, 0);
	start(r, 1, KIND_B, 7, 0);
	start(r, 2, KIND_C, 6, 0);
	for (int round = 0, live = NCORO; live > 0; round++) {
		live = 0;
		for (int i = 0; i < NCORO; i++) {
			if (r->co[i].done)
				continue;
			resume(r, &r->co[i]);
			sched_walk(r, 1 + (round + i) % 4, 1);
			live += !r->co[i].done;
		}
	}
	for (int i = 0; i < NCORO; i++)
		r->sum += (unsigned long)r->co[i].result;

	/* Phase 2: the same addresses, other frames. */
	start(r, 0, KIND_A, 6, 1);
	finish(r, 0);
	remap(r, 0);
	start(r, 0, KIND_B, 6, 1);
	finish(r, 0);
	remap(r, 1);
	start(r, 1, KIND_C, 7, 0);
	finish(r, 1);
	sched_walk(r, 2, 1);

	/* Phase 3: the last walk on a stack made PROT_NONE. */
	start(r, 1, KIND_C, 5, 1);
	finish(r, 1);
	if (mprotect(r->stack[1], CORO_STACK, PROT_NONE) != 0)
		die("mprotect");
	start(r, 0, KIND_A, 3, 0);
	finish(r, 0);
	sched_walk(r, 3, 1);
	start(r, 2, KIND_B, 4, 0);
	finish(r, 2);
	sched_walk(r, 1, 1);
	if (mprotect(r->stack[1], CORO_STACK, PROT_READ | PROT_WRITE) != 0)
		die("mprotect");
	/* The upper half of a stack PROT_NONE under the last walk's outer frames. */
	start(r, 2, KIND_D, 1, 1);
	finish(r, 2);
	if (mprotect(r->stack[2] + CORO_STACK / 2, CORO_STACK / 2, PROT_NONE) != 0)
		die("mprotect");
	start_sized(r, 2, KIND_D, 2, 1, CORO_STACK / 2);
	finish(r, 2);
	if (mprotect(r->stack[2] + CORO_STACK / 2, CORO_STACK / 2, PROT_READ | PROT_WRITE) != 0)
		die("mprotect");

	/* Phase 4: the main thread, last, a coroutine as glibc's makecontext leaves it. */
	if (r->is_main) {
		start(r, 2, KIND_G, 4, 0);
		finish(r, 2);
		sched_walk(r, 2, 1);
	}

	for (int i = 0; i < r->n_kept; i++)
		free(r->kept[i]);
	r->n_kept = 0;
	BARRIER();
}

/*
 * The layout of a runner's mapping, from low addresses: a guard page, then
 * each coroutine stack followed by a guard page; `above` bytes more on top
 * (a worker's thread stack).
 */
static char *
map_stacks(struct runner *r, void *hint, size_t above, size_t *size)
{
	size_t total = PAGE + NCORO * (CORO_STACK + PAGE) + above;
	char *m = mmap(hint, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		die("mmap");
	if (mprotect(m, PAGE, PROT_NONE) != 0)
		die("mprotect");
	for (int i = 0; i < NCORO; i++) {
		r->stack[i] = m + PAGE + (size_t)i * (CORO_STACK + PAGE);
		if (mprotect(r->stack[i] + CORO_STACK, PAGE, PROT_NONE) != 0)
			die("mprotect");
	}
	*size = total;
	return m;
}

NOIPA void *
worker(void *arg)
{
	run_all(arg);
	BARRIER();
	return NULL;
}

int
main(void)
{
	static struct runner runners[1 + WORKERS];
	char *maps[1 + WORKERS];
	size_t sizes[1 + WORKERS];
	pthread_t threads[WORKERS];

	runners[0].base = "run_all<main|main";
	runners[0].is_main = 1;
	/* 12 MiB below main's stack, if free: beyond its 8 MiB, within the shim's reach of it. */
	uintptr_t below = (((uintptr_t)__builtin_frame_address(0) & ~(uintptr_t)(PAGE - 1)) - ((uintptr_t)12 << 20));
	maps[0] = map_stacks(&runners[0], (void *)below, 0, &sizes[0]);
	for (int t = 0; t < WORKERS; t++) {
		struct runner *r = &runners[1 + t];
		pthread_attr_t attr;
		r->base = "run_all<worker|thread";
		maps[1 + t] = map_stacks(r, NULL, THREAD_STACK, &sizes[1 + t]);
		if (pthread_attr_init(&attr) != 0
		    || pthread_attr_setstack(&attr, maps[1 + t] + sizes[1 + t] - THREAD_STACK, THREAD_STACK) != 0
		    || pthread_create(&threads[t], &attr, worker, r) != 0)
			die("pthread_create");
		pthread_attr_destroy(&attr);
	}
	run_all(&runners[0]);
	for (int t = 0; t < WORKERS; t++)
		if (pthread_join(threads[t], NULL) != 0)
			die("pthread_join");
	unsigned long sum = 0;
	for (int i = 0; i <= WORKERS; i++) {
		sum = sum * 31 + runners[i].sum;
		if (munmap(maps[i], sizes[i]) != 0)
			die("munmap");
	}
	/* Sorted: the threads add their chains in any order. */
	for (int i = 1; i < n_chains; i++)
		for (int j = i; j > 0 && strcmp(chains[j - 1].name, chains[j].name) > 0; j--) {
			struct chain t = chains[j];
			chains[j] = chains[j - 1];
			chains[j - 1] = t;
		}
	for (int i = 0; i < n_chains; i++)
		printf("CHAIN %s %ld %ld %ld\n", chains[i].name, chains[i].allocs, chains[i].bytes,
		       chains[i].leaked);
	printf("checksum %lu\n", sum);
	return 0;
}
