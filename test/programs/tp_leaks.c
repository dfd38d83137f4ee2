/* SPDX-License-Identifier: MIT */
/*
 * Known leaks and a known peak, with malloc, calloc and malloc(0).
 *
 *   1 MiB malloc'd and freed                       peak 1048576
 *   3 x 100 KiB malloc'd, one freed                in use 204800
 *   malloc(0) (leaked: a block of 0 requested bytes)
 *   calloc(10, 100) (leaked), calloc(7, 9) freed
 *   40 blocks of 1..40 bytes, the odd ones freed   leaks 20 blocks, 420 bytes
 *
 * Leaks at exit: 2 x 102400 + 0 + 1000 + (2+4+...+40 = 420) = 206220 bytes
 * in 2 + 1 + 1 + 20 = 24 blocks.  Peak 1048576 bytes; at most 44 blocks
 * live at once (2 + 1 + 1 + 40 when the small ones are made).  num_allocs 46,
 * num_frees 22.  With "exit-code N" it exits with status N after the same
 * work; with "baseline" it does nothing.  With "many-sites" it makes only
 * 65536 blocks of 16 bytes, two from each of 32768 call stacks (a binary
 * recursion of depth 15, each branch a call from another place): both lost,
 * but the first of each stack of an even path number is held by a global
 * (reachable: 16384 blocks reachable, 49152 lost), and prints "SITES 32768".
 * With "reused" it frees a block of 48 bytes, loses the next block of 48
 * bytes (the allocator's cache gives the same address back) and prints
 * "REUSED 1" when the address was the same.  With "chdir DIR" it does the
 * same work and leaves for DIR before it returns (a daemon's chdir).
 */
#include "tp_common.h"

static void *volatile tp_leak_sink;
static volatile int leaf_blocks = 2;
static void *volatile kept_blocks[1 << 15]; /* volatile: stores to a static never read are dropped */

static __attribute__((noinline, noclone)) void
leak_leaf(unsigned path)
{
	/* A loop the compiler cannot unroll: one call site, so one stack for both. */
	for (int i = 0; i < leaf_blocks; i++) {
		unsigned *p = malloc(16);
		TP_CHECK(p != NULL, "malloc(16)");
		*p = path;
		if (i == 0 && path % 2 == 0)
			kept_blocks[path % (1 << 15)] = p; /* reachable */
		else
			tp_leak_sink = p; /* overwritten by the next: lost */
	}
}

/* Two call sites a level: 2^depth stacks.  The empty asm keeps each call a call. */
static __attribute__((noinline, noclone)) void
leak_tree(unsigned depth, unsigned path)
{
	if (depth == 0) {
		leak_leaf(path);
		return;
	}
	leak_tree(depth - 1, path * 2);
	__asm__ volatile("" ::: "memory");
	leak_tree(depth - 1, path * 2 + 1);
	__asm__ volatile("" ::: "memory");
}

/* Whether the lost block got the freed one's address: no copy of either address outlives the call. */
static __attribute__((noinline, noclone)) int
free_then_lose(void)
{
	void *freed = malloc(48);
	TP_CHECK(freed != NULL, "malloc(48)");
	uintptr_t was = (uintptr_t)freed;
	free(freed);
	void *lost = malloc(48);
	TP_CHECK(lost != NULL, "malloc(48)");
	int same = (uintptr_t)lost == was;
	tp_leak_sink = lost;
	tp_leak_sink = NULL;
	return same;
}

/* Overwrites the stack below the caller's frame, where the addresses above were. */
static __attribute__((noinline, noclone)) void
scrub_stack(void)
{
	volatile char pad[8192];
	for (size_t i = 0; i < sizeof(pad); i++)
		pad[i] = 0;
}

int
main(int argc, char **argv)
{
	int status = 0;
	if (tp_is_baseline(argc, argv))
		return 0;
	if (argc > 2 && strcmp(argv[1], "exit-code") == 0)
		status = atoi(argv[2]);
	if (argc > 1 && strcmp(argv[1], "reused") == 0) {
		int same = free_then_lose();
		scrub_stack();
		tp_out("REUSED %d\n", same);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "many-sites") == 0) {
		leak_tree(15, 0);
		tp_leak_sink = NULL;
		tp_out("SITES %d\n", 1 << 15);
		return 0;
	}

	char *big = malloc(1048576);
	TP_CHECK(big != NULL, "malloc(1 MiB)");
	memset(big, 1, 1048576);
	TP_KEEP(big);
	tp_l_alloc(1048576);
	free(big);
	tp_l_free(1048576);

	char *k[3];
	for (int i = 0; i < 3; i++) {
		k[i] = malloc(102400);
		TP_CHECK(k[i] != NULL, "malloc(100 KiB)");
		memset(k[i], i, 102400);
		tp_l_alloc(102400);
	}
	free(k[1]);
	tp_l_free(102400);
	TP_KEEP(k[0]);
	TP_KEEP(k[2]);

	void *z = malloc(0);
	TP_CHECK(z != NULL, "malloc(0) returned NULL");
	tp_l_alloc(0);
	TP_KEEP(z);

	unsigned char *c = calloc(10, 100);
	TP_CHECK(c != NULL && tp_all_zero(c, 1000), "calloc(10, 100)");
	tp_l_alloc(1000);
	TP_KEEP(c);
	unsigned char *c2 = calloc(7, 9);
	TP_CHECK(c2 != NULL && tp_all_zero(c2, 63), "calloc(7, 9)");
	tp_l_alloc(63);
	free(c2);
	tp_l_free(63);

	void *small[40];
	for (int i = 0; i < 40; i++) {
		small[i] = malloc((size_t)i + 1);
		TP_CHECK(small[i] != NULL, "malloc(%d)", i + 1);
		tp_fill(small[i], (size_t)i + 1, (unsigned char)i);
		tp_l_alloc(i + 1);
	}
	for (int i = 0; i < 40; i += 2) {
		TP_CHECK(tp_check_fill(small[i], (size_t)i + 1, (unsigned char)i), "block %d", i);
		free(small[i]);
		tp_l_free(i + 1);
	}
	for (int i = 1; i < 40; i += 2)
		TP_KEEP(small[i]);

	free(NULL); /* not a free of anything: no count, no error */

	tp_out("leaks done\n");
	tp_l_print();
	if (argc > 2 && strcmp(argv[1], "chdir") == 0)
		TP_CHECK(chdir(argv[2]) == 0, "chdir %s", argv[2]);
	return status;
}
