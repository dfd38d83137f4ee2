/* SPDX-License-Identifier: MIT */
/*
 * Frames for check_cfi, compiled -O2 -fomit-frame-pointer: the code of a
 * distribution's libraries, whose frames only the unwind tables describe.
 * Each calls leaf(arg) at the bottom; BARRIER keeps each call a call.
 */
#include <alloca.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cfi_frames.h"

#define BARRIER() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) void
frames_recurse(int levels, frames_leaf_fn leaf, void *arg)
{
	volatile long pad[3] = { levels, levels * 2, levels * 3 };

	if (levels <= 0)
		leaf(arg);
	else
		frames_recurse(levels - 1, leaf, arg);
	BARRIER();
	(void)pad[0];
}

/* alloca: the CFA from %rbp, which gcc keeps for this frame only. */
__attribute__((noinline)) void
frames_alloca(size_t bytes, frames_leaf_fn leaf, void *arg)
{
	char *p = alloca(bytes);

	memset(p, 1, bytes);
	__asm__ volatile("" : : "r"(p) : "memory");
	frames_recurse(2, leaf, arg);
	BARRIER();
}

__attribute__((noinline)) void
frames_vla(int n, frames_leaf_fn leaf, void *arg)
{
	volatile char buf[n];

	buf[0] = 1;
	buf[n - 1] = 2;
	frames_alloca((size_t)n * 3, leaf, arg);
	BARRIER();
	(void)buf[0];
}

/* A large fixed frame: the CFA is %rsp plus 64 KiB and more. */
__attribute__((noinline)) void
frames_big(frames_leaf_fn leaf, void *arg)
{
	volatile char buf[65536];

	buf[0] = 1;
	buf[sizeof(buf) - 1] = 2;
	frames_recurse(1, leaf, arg);
	BARRIER();
	(void)buf[100];
}

/* Through libc: qsort calls back here, with its own frames in between. */
/* Per thread: check_cfi's threads case sorts on four threads at once. */
static __thread frames_leaf_fn qsort_leaf;
static __thread void *qsort_arg;
static __thread int qsort_calls;

static int
by_value(const void *a, const void *b)
{
	if (qsort_calls++ == 3)
		qsort_leaf(qsort_arg);
	return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) void
frames_qsort(frames_leaf_fn leaf, void *arg)
{
	int values[32];

	for (int i = 0; i < 32; i++)
		values[i] = (i * 7919) % 101;
	qsort_leaf = leaf;
	qsort_arg = arg;
	qsort_calls = 0;
	qsort(values, 32, sizeof(values[0]), by_value);
	BARRIER();
}

/* Twelve and twenty-two frames below the caller, for the timing. */
__attribute__((noinline)) void
frames_depth(int levels, frames_leaf_fn leaf, void *arg)
{
	frames_recurse(levels - 1, leaf, arg);
	BARRIER();
}

/*
 * The same callee from two call sites at the same stack depth: its frames
 * lie at the same addresses with the same return addresses into it both
 * times, only its own return address (into here) differs.
 */
__attribute__((noinline)) void
frames_two_sites(frames_leaf_fn leaf, void *arg)
{
	frames_recurse(2, leaf, arg);
	BARRIER();
	frames_recurse(2, leaf, arg);
	BARRIER();
}
