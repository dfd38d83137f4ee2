/* SPDX-License-Identifier: MIT */
/*
 * core/unwind.h, in both walking modes: a known chain of functions comes back
 * as the exact return addresses each function saw, skip and the depth limit
 * hold, new threads and deep recursion work; and the frame-pointer walk
 * survives every %rbp a frame without frame pointers can leave behind
 * (garbage, non-canonical, past the top of the main stack, a guard page above
 * a thread's or a coroutine's stack), where following it blindly would fault.
 *
 * Compiled with -fno-omit-frame-pointer -fno-optimize-sibling-calls: every
 * test function has a frame record and none is left by a jump.
 */
#include "core/cfi.h"
#include "core/unwind.h"

#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "function_of.h"

extern void *__libc_stack_end;

#define MODE_NAME(m) ((m) == TFA_STACKS_FP ? "fp" : "unwind")

/* The two walking modes, for loop tests (_i is the loop index). */
static const tfa_stacks_mode_t walk_modes[] = { TFA_STACKS_FP, TFA_STACKS_UNWIND };

static void
setup(void)
{
	ck_assert_int_eq(tfa_unwind_init(TFA_STACKS_UNWIND), 0);
}

/* ---- a known chain ------------------------------------------------------------------------ */

struct capture {
	tfa_stacks_mode_t mode;
	unsigned max, skip;
	unsigned n;
	uintptr_t pcs[200];
	/* What each level of the chain saw as its return address: leaf, mid, top. */
	uintptr_t ret[3];
};

/* Exported (ENABLE_EXPORTS) for dladdr; noclone keeps their names. */
void unwind_chain_leaf(struct capture *c);
void unwind_chain_mid(struct capture *c);
void unwind_chain_top(struct capture *c);

#define BARRIER()        __asm__ volatile("" ::: "memory")
#define RETURN_ADDRESS() ((uintptr_t)__builtin_return_address(0))

TFA_NOINLINE __attribute__((noclone)) void
unwind_chain_leaf(struct capture *c)
{
	c->ret[0] = RETURN_ADDRESS();
	c->n = tfa_unwind_capture(c->mode, c->pcs, c->max, c->skip);
	BARRIER();
}

TFA_NOINLINE __attribute__((noclone)) void
unwind_chain_mid(struct capture *c)
{
	c->ret[1] = RETURN_ADDRESS();
	unwind_chain_leaf(c);
	BARRIER();
}

TFA_NOINLINE __attribute__((noclone)) void
unwind_chain_top(struct capture *c)
{
	c->ret[2] = RETURN_ADDRESS();
	unwind_chain_mid(c);
	BARRIER();
}

/* Checks the first four frames of a capture made through unwind_chain_top. */
static void
check_chain(const struct capture *c)
{
	ck_assert_msg(c->n >= 4, "%s: %u frames", MODE_NAME(c->mode), c->n);
	ck_assert_str_eq(function_of(c->pcs[0]), "unwind_chain_leaf");
	ck_assert_uint_eq(c->pcs[1], c->ret[0]);
	ck_assert_uint_eq(c->pcs[2], c->ret[1]);
	ck_assert_uint_eq(c->pcs[3], c->ret[2]);
	ck_assert_str_eq(function_of(c->pcs[1]), "unwind_chain_mid");
	ck_assert_str_eq(function_of(c->pcs[2]), "unwind_chain_top");
}

static TFA_NOINLINE void
capture_from_here(struct capture *c)
{
	unwind_chain_top(c);
	BARRIER();
}

/* From one call site, so each sees the same stack: a loop the compiler cannot unroll. */
static TFA_NOINLINE void
capture_each(struct capture *runs, int n)
{
	volatile int count = n;

	for (int i = 0; i < count; i++)
		capture_from_here(&runs[i]);
}

START_TEST(test_unwind_known_chain)
{
	struct capture c = { .mode = walk_modes[_i], .max = TFA_ARRAY_SIZE(c.pcs) };

	capture_from_here(&c);
	check_chain(&c);
	if (c.mode == TFA_STACKS_UNWIND) {
		/* The unwind tables of libcheck and libc lead on to main and beyond. */
		ck_assert_uint_ge(c.n, 8);
		bool found_main = false;
		for (unsigned i = 4; i < c.n; i++)
			found_main |= strcmp(function_of(c.pcs[i]), "main") == 0;
		ck_assert(found_main);
	}
	for (unsigned i = 0; i < c.n; i++)
		ck_assert_uint_ge(c.pcs[i], 4096);
}
END_TEST

START_TEST(test_unwind_skip)
{
	struct capture runs[3] = {
		{ .mode = walk_modes[_i], .max = 16 },
		{ .mode = walk_modes[_i], .max = 16, .skip = 2 },
		{ .mode = walk_modes[_i], .max = 16, .skip = 1000 },
	};
	const struct capture *all = &runs[0], *skipped = &runs[1], *too_many = &runs[2];

	capture_each(runs, 3);
	check_chain(all);
	ck_assert_uint_ge(skipped->n, 2);
	if (all->n < all->max)
		ck_assert_uint_eq(skipped->n, all->n - 2);
	for (unsigned i = 0; i < skipped->n && i + 2 < all->n; i++)
		ck_assert_uint_eq(skipped->pcs[i], all->pcs[i + 2]);
	ck_assert_uint_eq(skipped->pcs[0], skipped->ret[1]);
	ck_assert_uint_eq(too_many->n, 0);
}
END_TEST

START_TEST(test_unwind_depth_limit)
{
	for (unsigned max = 1; max <= 4; max++) {
		struct capture c = { .mode = walk_modes[_i], .max = max };
		memset(c.pcs, 0xa5, sizeof(c.pcs));
		capture_from_here(&c);
		ck_assert_uint_eq(c.n, max);
		ck_assert_str_eq(function_of(c.pcs[0]), "unwind_chain_leaf");
		if (max >= 2)
			ck_assert_uint_eq(c.pcs[1], c.ret[0]);
		/* Nothing written past max. */
		for (unsigned i = max; i < TFA_ARRAY_SIZE(c.pcs); i++)
			ck_assert_uint_eq(c.pcs[i], (uintptr_t)0xa5a5a5a5a5a5a5a5);
	}
}
END_TEST

START_TEST(test_unwind_nothing_asked)
{
	uintptr_t pcs[4] = { 1, 2, 3, 4 };

	ck_assert_uint_eq(tfa_unwind_capture(TFA_STACKS_NONE, pcs, 4, 0), 0);
	ck_assert_uint_eq(tfa_unwind_capture(walk_modes[_i], pcs, 0, 0), 0);
	ck_assert_uint_eq(tfa_unwind_capture(walk_modes[_i], NULL, 4, 0), 0);
	ck_assert_uint_eq(pcs[0], 1);
	ck_assert_uint_eq(pcs[3], 4);
}
END_TEST

/*
 * tfa_unwind_capture_above from its caller's frame record captures the
 * caller's caller on; a "record" that cannot be a caller's (misaligned, or
 * not above the capture's own frame: a caller without frame pointers) is
 * not read and captures nothing.
 */
START_TEST(test_unwind_capture_above_frames)
{
	uintptr_t pcs[8] = { 0 };
	char *own = __builtin_frame_address(0);

	ck_assert_uint_gt(tfa_unwind_capture_above(walk_modes[_i], own, pcs, 8, 0), 0);
	ck_assert_uint_eq(pcs[0], (uintptr_t)__builtin_return_address(0));
	ck_assert_uint_eq(tfa_unwind_capture_above(walk_modes[_i], own + 4, pcs, 8, 0), 0);
	/* A garbage %rbp below the stack, in no mapping: reading it would fault. */
	ck_assert_uint_eq(tfa_unwind_capture_above(walk_modes[_i], (void *)(uintptr_t)0x1000, pcs, 8, 0), 0);
}
END_TEST

/* Recursion deeper than the limit: the limit is what comes back. */
void unwind_recurse(struct capture *c, unsigned levels);

TFA_NOINLINE __attribute__((noclone)) void
unwind_recurse(struct capture *c, unsigned levels)
{
	if (levels == 0)
		c->n = tfa_unwind_capture(c->mode, c->pcs, c->max, c->skip);
	else
		unwind_recurse(c, levels - 1);
	BARRIER();
}

START_TEST(test_unwind_deep_recursion)
{
	struct capture c = { .mode = walk_modes[_i], .max = 128 };

	unwind_recurse(&c, 300);
	ck_assert_uint_eq(c.n, 128);
	/* Every frame but the innermost returns to the same call site. */
	for (unsigned i = 1; i < c.n; i++) {
		ck_assert_uint_eq(c.pcs[i], c.pcs[1]);
		ck_assert_str_eq(function_of(c.pcs[i]), "unwind_recurse");
	}
	ck_assert_uint_ne(c.pcs[0], c.pcs[1]);
}
END_TEST

static void *
capture_on_thread(void *arg)
{
	capture_from_here(arg);
	return NULL;
}

START_TEST(test_unwind_other_threads)
{
	for (int round = 0; round < 3; round++) {
		struct capture c = { .mode = walk_modes[_i], .max = 64 };
		pthread_t t;
		ck_assert_int_eq(pthread_create(&t, NULL, capture_on_thread, &c), 0);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		check_chain(&c);
	}
}
END_TEST

START_TEST(test_unwind_init)
{
	struct capture c = { .mode = TFA_STACKS_UNWIND, .max = 64 };

	ck_assert_int_eq(tfa_unwind_init(TFA_STACKS_NONE), 0);
	ck_assert_int_eq(tfa_unwind_init(TFA_STACKS_FP), 0);
	ck_assert_int_eq(tfa_unwind_init(TFA_STACKS_UNWIND), 0);
	ck_assert_int_eq(tfa_unwind_init((tfa_stacks_mode_t)7), -EINVAL);
	/* libunwind stays out of the global scope: its backtrace() does not replace glibc's. */
	ck_assert_ptr_null(dlsym(RTLD_DEFAULT, "unw_backtrace"));
	tfa_unwind_flush_caches();
	capture_from_here(&c);
	check_chain(&c);
}
END_TEST

/* ---- libunwind's part -------------------------------------------------------------------- */

/* Anonymous memory resident in this process, in KiB (/proc/self/smaps_rollup). */
static long
anonymous_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kib = -1;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "Anonymous: %ld kB", &kib) == 1)
			break;
	fclose(f);
	ck_assert_int_ge(kib, 0);
	return kib;
}

/*
 * Loading libunwind leaves out unw_backtrace's trace cache, 256 KiB mapped
 * and cleared at a thread's first unw_backtrace: that cache is made only
 * where a walk cfi.c refuses needs it, not in every process at start.
 * Measured here: 60 KiB more with the cache left out, 320 with it.
 */
START_TEST(test_unwind_init_resident)
{
#ifdef __SANITIZE_ADDRESS__
	/* AddressSanitizer's own memory grows with the loading (224 KiB): nothing to tell apart. */
	ck_assert_int_eq(tfa_unwind_init(TFA_STACKS_UNWIND), 0);
	return;
#endif
	long before = anonymous_kib();

	ck_assert_int_eq(tfa_unwind_init(TFA_STACKS_UNWIND), 0);
	long grew = anonymous_kib() - before;
	ck_assert_msg(grew < 128, "loading libunwind made %ld KiB of anonymous memory resident", grew);
}
END_TEST

/*
 * Calls fn(arg) from a frame without unwind tables (but with a frame
 * record): cfi.c refuses the walk there, and libunwind serves it.
 */
void unwind_call_without_cfi(void (*fn)(void *), void *arg);

__asm__(".pushsection .text\n"
        ".globl unwind_call_without_cfi\n"
        ".type unwind_call_without_cfi, @function\n"
        "unwind_call_without_cfi:\n"
        "	pushq %rbp\n"
        "	movq %rsp, %rbp\n"
        "	movq %rdi, %rax\n"
        "	movq %rsi, %rdi\n"
        "	callq *%rax\n"
        "	popq %rbp\n"
        "	ret\n"
        ".size unwind_call_without_cfi, .-unwind_call_without_cfi\n"
        ".popsection\n");

void unwind_capture_top(void *arg);

TFA_NOINLINE __attribute__((noclone)) void
unwind_capture_top(void *arg)
{
	unwind_chain_top(arg);
	BARRIER();
}

void unwind_call_refused(struct capture *c);

/* The caller of the frame without tables, by name in the walk. */
TFA_NOINLINE __attribute__((noclone)) void
unwind_call_refused(struct capture *c)
{
	unwind_call_without_cfi(unwind_capture_top, c);
	BARRIER();
}

/*
 * A walk cfi.c refuses, served by libunwind through the frame without tables
 * to its caller: while the shim starts (frame by frame, _i 0) and after
 * (unw_backtrace, _i 1).
 */
START_TEST(test_unwind_refused_served)
{
	struct capture c = { .mode = TFA_STACKS_UNWIND, .max = 64 };

	ck_assert_int_eq(tfa_unwind_init(TFA_STACKS_UNWIND), 0);
	if (_i == 1)
		tfa_unwind_started();
	uint64_t refused = tfa_cfi_refusals();
	unwind_call_refused(&c);
	ck_assert_uint_gt(tfa_cfi_refusals(), refused);
	check_chain(&c);
	ck_assert_msg(c.n >= 6, "%u frames", c.n);
	ck_assert_str_eq(function_of(c.pcs[3]), "unwind_capture_top");
	ck_assert_str_eq(function_of(c.pcs[4]), "unwind_call_without_cfi");
	ck_assert_str_eq(function_of(c.pcs[5]), "unwind_call_refused");
}
END_TEST

/* ---- frame pointers that lead astray ------------------------------------------------------ */

/*
 * Calls fn(arg) with %rbp = rbp, as a function compiled without frame
 * pointers may when it keeps a value in %rbp: fn's frame record then links
 * to that value.  fn is a normal function, so the walk sees fn's frame, then
 * this trampoline's return address, then whatever rbp points to.
 */
void unwind_call_with_rbp(uintptr_t rbp, void (*fn)(void *), void *arg);

__asm__(".pushsection .text\n"
        ".globl unwind_call_with_rbp\n"
        ".type unwind_call_with_rbp, @function\n"
        "unwind_call_with_rbp:\n"
        ".cfi_startproc\n"
        "	pushq %rbp\n"
        ".cfi_adjust_cfa_offset 8\n"
        ".cfi_rel_offset %rbp, 0\n"
        "	movq %rdi, %rbp\n"
        "	movq %rdx, %rdi\n"
        "	callq *%rsi\n"
        "	popq %rbp\n"
        ".cfi_adjust_cfa_offset -8\n"
        ".cfi_restore %rbp\n"
        "	ret\n"
        ".cfi_endproc\n"
        ".size unwind_call_with_rbp, .-unwind_call_with_rbp\n"
        ".popsection\n");

void unwind_under_rbp(void *arg);

TFA_NOINLINE __attribute__((noclone)) void
unwind_under_rbp(void *arg)
{
	struct capture *c = arg;

	c->ret[0] = RETURN_ADDRESS();
	c->n = tfa_unwind_capture(TFA_STACKS_FP, c->pcs, c->max, 0);
	BARRIER();
}

/* A capture under a frame that left `rbp` behind; the walk must stop right there. */
static void
expect_stop_at(uintptr_t rbp)
{
	struct capture c = { .mode = TFA_STACKS_FP, .max = 64 };

	unwind_call_with_rbp(rbp, unwind_under_rbp, &c);
	ck_assert_msg(c.n == 2, "rbp %#lx: %u frames", (unsigned long)rbp, c.n);
	ck_assert_str_eq(function_of(c.pcs[0]), "unwind_under_rbp");
	ck_assert_uint_eq(c.pcs[1], c.ret[0]);
	ck_assert_str_eq(function_of(c.pcs[1]), "unwind_call_with_rbp");
}

static uintptr_t
map_inaccessible_page(void)
{
	void *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	return (uintptr_t)p;
}

START_TEST(test_unwind_fp_garbage_rbp)
{
	uintptr_t here = (uintptr_t)__builtin_frame_address(0);
	uintptr_t above_main_stack = ((uintptr_t)__libc_stack_end + (64 << 10)) & ~(uintptr_t)15;

	expect_stop_at(0);
	expect_stop_at(1);
	expect_stop_at(0x1234560);         /* an integer */
	expect_stop_at(here + 3);          /* misaligned, on the stack */
	expect_stop_at(here - 4096);       /* below the frame: stacks grow down */
	expect_stop_at(UINT64_C(1) << 63); /* non-canonical */
	expect_stop_at(UINTPTR_MAX & ~(uintptr_t)15);
	expect_stop_at(above_main_stack); /* past the top of the main stack */
	expect_stop_at(map_inaccessible_page());
}
END_TEST

/* A plausible record is followed: the walk is not just stopping at the first odd rbp. */
START_TEST(test_unwind_fp_follows_records)
{
	uintptr_t record[2] __attribute__((aligned(16))) = { 0, 0x7123456 };
	struct capture c = { .mode = TFA_STACKS_FP, .max = 64 };

	unwind_call_with_rbp((uintptr_t)record, unwind_under_rbp, &c);
	ck_assert_uint_eq(c.n, 3);
	ck_assert_uint_eq(c.pcs[1], c.ret[0]);
	ck_assert_uint_eq(c.pcs[2], 0x7123456);
}
END_TEST

/*
 * A thread on a stack the test maps, with an inaccessible page right above
 * it: an %rbp pointing there is 16 KiB above the frame, well within the
 * 8 MiB a walk bounded by "current frame + stack size" would accept.
 */
#define THREAD_STACK (256u << 10)

struct guarded_stack {
	char *base; /* THREAD_STACK bytes of stack, then one PROT_NONE page */
};

static void *
garbage_on_thread(void *arg)
{
	struct guarded_stack *g = arg;
	uintptr_t tp = (uintptr_t)__builtin_thread_pointer();

	/* glibc put the thread's TCB at the top of the stack it was given. */
	ck_assert_uint_gt(tp, (uintptr_t)g->base);
	ck_assert_uint_lt(tp, (uintptr_t)g->base + THREAD_STACK);
	expect_stop_at((uintptr_t)g->base + THREAD_STACK);
	expect_stop_at((uintptr_t)g->base + THREAD_STACK + 256);
	expect_stop_at(tp + 64);

	struct capture c = { .mode = TFA_STACKS_FP, .max = 64 };
	capture_from_here(&c);
	check_chain(&c);
	return NULL;
}

START_TEST(test_unwind_fp_thread_stack_bounds)
{
	struct guarded_stack g;
	pthread_attr_t attr;
	pthread_t t;

	g.base = mmap(NULL, THREAD_STACK + 4096, PROT_READ | PROT_WRITE,
	              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(g.base, MAP_FAILED);
	ck_assert_int_eq(mprotect(g.base + THREAD_STACK, 4096, PROT_NONE), 0);
	ck_assert_int_eq(pthread_attr_init(&attr), 0);
	ck_assert_int_eq(pthread_attr_setstack(&attr, g.base, THREAD_STACK), 0);
	ck_assert_int_eq(pthread_create(&t, &attr, garbage_on_thread, &g), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	pthread_attr_destroy(&attr);
	munmap(g.base, THREAD_STACK + 4096);
}
END_TEST

/*
 * A coroutine on the main thread, on a mapped stack between two inaccessible
 * pages: neither the main stack nor a thread's, so each frame is checked
 * before it is read.
 */
#define COROUTINE_STACK (64u << 10)

static ucontext_t main_context, coroutine_context;
static char *coroutine_base; /* guard page, stack, guard page */
static struct capture coroutine_chain;

static void
coroutine_body(void)
{
	capture_from_here(&coroutine_chain);
	expect_stop_at((uintptr_t)coroutine_base + 4096 + COROUTINE_STACK);
	expect_stop_at((uintptr_t)coroutine_base + 4096 + COROUTINE_STACK + 512);
}

START_TEST(test_unwind_fp_coroutine)
{
	coroutine_base = mmap(NULL, COROUTINE_STACK + 2 * 4096, PROT_READ | PROT_WRITE,
	                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(coroutine_base, MAP_FAILED);
	ck_assert_int_eq(mprotect(coroutine_base, 4096, PROT_NONE), 0);
	ck_assert_int_eq(mprotect(coroutine_base + 4096 + COROUTINE_STACK, 4096, PROT_NONE), 0);

	coroutine_chain.mode = TFA_STACKS_FP;
	coroutine_chain.max = 64;
	ck_assert_int_eq(getcontext(&coroutine_context), 0);
	coroutine_context.uc_stack.ss_sp = coroutine_base + 4096;
	coroutine_context.uc_stack.ss_size = COROUTINE_STACK;
	coroutine_context.uc_link = &main_context;
	makecontext(&coroutine_context, coroutine_body, 0);
	ck_assert_int_eq(swapcontext(&main_context, &coroutine_context), 0);

	check_chain(&coroutine_chain);
	munmap(coroutine_base, COROUTINE_STACK + 2 * 4096);
}
END_TEST

/*
 * A function compiled with -fomit-frame-pointer keeps its own values in
 * %rbp, as gcc -O2 does when registers run short: here the address of an
 * inaccessible page, across the call.  Its callee's frame record links to
 * that value, which the walk must not follow.  The callee's return address
 * into it is still recorded: it sits in the callee's own frame record.
 */
void unwind_without_frame_pointer(struct capture *c, uintptr_t value);

TFA_NOINLINE __attribute__((noclone, optimize("omit-frame-pointer"))) void
unwind_without_frame_pointer(struct capture *c, uintptr_t value)
{
	register uintptr_t in_rbp __asm__("rbp") = value;

	__asm__ volatile("" : "+r"(in_rbp));
	unwind_chain_leaf(c);
	__asm__ volatile("" : "+r"(in_rbp));
	c->ret[1] = in_rbp;
}

START_TEST(test_unwind_fp_omitted_frame_pointer)
{
	struct capture c = { .mode = TFA_STACKS_FP, .max = 64 };
	uintptr_t page = map_inaccessible_page();
	uintptr_t above_main_stack = ((uintptr_t)__libc_stack_end + (64 << 10)) & ~(uintptr_t)15;

	for (int i = 0; i < 2; i++) {
		uintptr_t value = i == 0 ? page : above_main_stack;
		memset(&c.pcs, 0, sizeof(c.pcs));
		unwind_without_frame_pointer(&c, value);
		ck_assert_uint_eq(c.ret[1], value);
		ck_assert_uint_eq(c.n, 2);
		ck_assert_str_eq(function_of(c.pcs[0]), "unwind_chain_leaf");
		ck_assert_uint_eq(c.pcs[1], c.ret[0]);
		ck_assert_str_eq(function_of(c.pcs[1]), "unwind_without_frame_pointer");
	}
}
END_TEST

static Suite *
unwind_suite(void)
{
	Suite *s = suite_create("unwind");
	TCase *tc;
	int modes = (int)TFA_ARRAY_SIZE(walk_modes);

	tc = tcase_create("modes");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_loop_test(tc, test_unwind_known_chain, 0, modes);
	tcase_add_loop_test(tc, test_unwind_skip, 0, modes);
	tcase_add_loop_test(tc, test_unwind_depth_limit, 0, modes);
	tcase_add_loop_test(tc, test_unwind_nothing_asked, 0, modes);
	tcase_add_loop_test(tc, test_unwind_capture_above_frames, 0, modes);
	tcase_add_loop_test(tc, test_unwind_deep_recursion, 0, modes);
	tcase_add_loop_test(tc, test_unwind_other_threads, 0, modes);
	tcase_add_test(tc, test_unwind_init);
	suite_add_tcase(s, tc);

	tc = tcase_create("libunwind");
	tcase_add_test(tc, test_unwind_init_resident);
	tcase_add_loop_test(tc, test_unwind_refused_served, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("frame pointers");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_unwind_fp_garbage_rbp);
	tcase_add_test(tc, test_unwind_fp_follows_records);
	tcase_add_test(tc, test_unwind_fp_thread_stack_bounds);
	tcase_add_test(tc, test_unwind_fp_coroutine);
	tcase_add_test(tc, test_unwind_fp_omitted_frame_pointer);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(unwind_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
