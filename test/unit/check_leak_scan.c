/* SPDX-License-Identifier: MIT */
/*
 * core/leak_scan.h: memcheck's leak classes on hand-made memory (a chain from
 * a root, cycles, interior pointers, an indirectly lost list behind a lost
 * head, a self-referencing lost block, zero-sized blocks, the upgrade from
 * possible to reachable); the sort and the lookup; and the roots of this very
 * process (a global, a local variable, another thread's stack).
 */
#include "core/leak_scan.h"

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/common.h"
#include "core/own_maps.h"

#define HEAP_WORDS 4096
#define MAX_BLOCKS 64

/*
 * The blocks, and the list of them, live in mapped memory, which is no root;
 * the first 64 words are left out (the pointer `heap` points there).
 */
static uintptr_t *heap;
static tfa_leak_block_t *blocks;
static size_t nblocks;
static uintptr_t rootmem[32];
static tfa_leak_range_t roots[4];
static size_t nroots;
static uint32_t work[2 * MAX_BLOCKS];

/* Whether classify reads the roots in place (no other thread: tfa_leak_classify's alone). */
static bool scan_alone;

static void
setup(void)
{
	scan_alone = false;
	heap = tfa_arena_map(HEAP_WORDS * sizeof(uintptr_t));
	ck_assert_ptr_nonnull(heap);
	blocks = tfa_arena_map(MAX_BLOCKS * sizeof(*blocks));
	ck_assert_ptr_nonnull(blocks);
	nblocks = 0;
	nroots = 0;
	memset(rootmem, 0, sizeof(rootmem));
}

static void
teardown(void)
{
	tfa_arena_unmap(heap, HEAP_WORDS * sizeof(uintptr_t));
	tfa_arena_unmap(blocks, MAX_BLOCKS * sizeof(*blocks));
}

static void
setup_in_place(void)
{
	setup();
	scan_alone = true;
}

/* Address of heap word w. */
#define H (heap + 64)
#define W(w) ((uintptr_t)&H[(w)])

/* A block of size bytes at heap word w; returns its number. */
static uint32_t
block(size_t w, uint64_t size)
{
	ck_assert_uint_lt(nblocks, MAX_BLOCKS);
	blocks[nblocks] = (tfa_leak_block_t){ .addr = W(w), .size = size, .user = (uint32_t)nblocks };
	return (uint32_t)nblocks++;
}

static void
root_words(size_t n)
{
	roots[nroots].lo = (uintptr_t)rootmem;
	roots[nroots].hi = (uintptr_t)(rootmem + n);
	nroots++;
}

static void
classify(void)
{
	tfa_leak_sort(blocks, nblocks);
	tfa_leak_classify(blocks, nblocks, roots, nroots, work, scan_alone);
}

static int
cls(uint32_t user)
{
	for (size_t i = 0; i < nblocks; i++)
		if (blocks[i].user == user)
			return blocks[i].cls;
	ck_abort_msg("block %u not found", user);
	return -1;
}

/*
 * The index (tfa_leak_index_find) answers as the plain search
 * (tfa_leak_find) for every address of several layouts: dense, with
 * blocks of 0 bytes, two clusters far apart (most buckets empty), one
 * block, blocks larger than a bucket.
 */
static uint64_t idx_rng = UINT64_C(0x9e3779b97f4a7c15);

static uint64_t
idx_next(void)
{
	idx_rng ^= idx_rng << 13;
	idx_rng ^= idx_rng >> 7;
	idx_rng ^= idx_rng << 17;
	return idx_rng;
}

static void
check_index_layout(tfa_leak_block_t *b, size_t n)
{
	uintptr_t min = UINTPTR_MAX, max = 0;
	tfa_leak_index_t x;

	tfa_leak_sort(b, n);
	for (size_t i = 0; i < n; i++) {
		min = TFA_MIN(min, b[i].addr);
		max = TFA_MAX(max, b[i].addr + (b[i].size != 0 ? b[i].size : 1));
	}
	tfa_leak_index_build(&x, b, n, min, max);
	ck_assert_ptr_nonnull(x.first);
	ck_assert_uint_le(x.nbuckets, n + 1);
	/* Every block's first and last byte, the bytes around them, and random addresses. */
	for (size_t k = 0; k < 8 * n + 1000; k++) {
		uintptr_t a;
		if (k < 4 * n) {
			const tfa_leak_block_t *blk = &b[k / 4];
			uintptr_t offs[4] = { 0, blk->size != 0 ? blk->size - 1 : 0, blk->size, (uintptr_t)-1 };
			a = blk->addr + offs[k % 4];
		} else {
			a = min + idx_next() % (max - min);
		}
		if (a < min || a >= max)
			continue;
		bool s1 = false, s2 = false;
		long i1 = tfa_leak_find(b, n, a, &s1), i2 = tfa_leak_index_find(&x, a, &s2);
		ck_assert_msg(i1 == i2, "address %#lx: %ld by the search, %ld by the index", (unsigned long)a, i1,
			      i2);
		if (i1 >= 0)
			ck_assert(s1 == s2);
	}
	tfa_leak_index_free(&x);
}

START_TEST(test_index_matches_search)
{
	static tfa_leak_block_t b[5000];
	size_t n;

	/* Dense 16-byte blocks with gaps and blocks of 0 bytes. */
	n = 0;
	for (uintptr_t a = 0x10000; n < 3000; a += 16 * (1 + idx_next() % 3))
		b[n++] = (tfa_leak_block_t){ .addr = a, .size = idx_next() % 5 == 0 ? 0 : 16 };
	check_index_layout(b, n);
	/* Two clusters 64 GiB apart, sizes up to 64 KiB. */
	n = 0;
	for (uintptr_t a = 0x7f0000000000; n < 2000; a += 65536 + 16)
		b[n++] = (tfa_leak_block_t){ .addr = a, .size = 16 + idx_next() % 65520 };
	for (uintptr_t a = 0x7f1000000000; n < 4000; a += 48)
		b[n++] = (tfa_leak_block_t){ .addr = a, .size = 8 + idx_next() % 40 };
	check_index_layout(b, n);
	/*
	 * Small blocks around one of 1 MiB that spans about a thousand buckets:
	 * an address in one of those has no block starting in its bucket.
	 */
	n = 0;
	for (uintptr_t a = 0x200000; n < 1000; a += 32)
		b[n++] = (tfa_leak_block_t){ .addr = a, .size = 16 };
	b[n++] = (tfa_leak_block_t){ .addr = 0x200000 + 32 * 1000, .size = 1 << 20 };
	for (uintptr_t a = 0x200000 + 32 * 1000 + (1 << 20); n < 2001; a += 32)
		b[n++] = (tfa_leak_block_t){ .addr = a, .size = 16 };
	check_index_layout(b, n);
	/* One block, and one of 0 bytes. */
	b[0] = (tfa_leak_block_t){ .addr = 0x5000, .size = 4096 };
	check_index_layout(b, 1);
	b[0] = (tfa_leak_block_t){ .addr = 0x5000, .size = 0 };
	check_index_layout(b, 1);
}
END_TEST

START_TEST(test_sort_and_find)
{
	/* Out of order, some of 0 bytes. */
	static const size_t at[] = { 40, 8, 100, 0, 64, 16, 17, 90 };
	static const uint64_t sz[] = { 16, 8, 32, 8, 0, 8, 0, 80 };
	bool start;

	for (size_t i = 0; i < TFA_ARRAY_SIZE(at); i++)
		(void)block(at[i], sz[i]);
	tfa_leak_sort(blocks, nblocks);
	for (size_t i = 1; i < nblocks; i++)
		ck_assert_uint_lt(blocks[i - 1].addr, blocks[i].addr);

	long i = tfa_leak_find(blocks, nblocks, W(40), &start);
	ck_assert_int_ge(i, 0);
	ck_assert_uint_eq(blocks[i].addr, W(40));
	ck_assert(start);
	i = tfa_leak_find(blocks, nblocks, W(40) + 15, &start);
	ck_assert_int_ge(i, 0);
	ck_assert_uint_eq(blocks[i].addr, W(40));
	ck_assert(!start);
	ck_assert_int_lt(tfa_leak_find(blocks, nblocks, W(42), &start), 0);      /* one past the end */
	ck_assert_int_lt(tfa_leak_find(blocks, nblocks, W(0) - 8, &start), 0);  /* below all */
	ck_assert_int_lt(tfa_leak_find(blocks, nblocks, W(200), &start), 0);    /* above all */
	/* A block of 0 bytes holds only its first address. */
	i = tfa_leak_find(blocks, nblocks, W(64), &start);
	ck_assert_int_ge(i, 0);
	ck_assert(start);
	ck_assert_int_lt(tfa_leak_find(blocks, nblocks, W(64) + 1, &start), 0);
	/* 90 holds 80 bytes: 100 is its own block. */
	i = tfa_leak_find(blocks, nblocks, W(99), &start);
	ck_assert_uint_eq(blocks[i].addr, W(90));
	i = tfa_leak_find(blocks, nblocks, W(100), &start);
	ck_assert_uint_eq(blocks[i].addr, W(100));
	ck_assert(start);
}
END_TEST

/*
 * Sorted, and the same blocks (each keeps its own fields): random addresses,
 * few distinct ones, already sorted, reversed, an organ pipe; by introsort,
 * by heap sort alone (depth 0) and with a depth that runs out midway.
 */
static void
check_sorted_permutation(tfa_leak_block_t *b, size_t n)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(b[i].size, b[i].addr * 3 + 1); /* moved whole */
		sum += b[i].user;
		if (i > 0)
			ck_assert_uint_le(b[i - 1].addr, b[i].addr);
	}
	ck_assert_uint_eq(sum, (uint64_t)n * (n - 1) / 2);
}

START_TEST(test_sort_many)
{
	static tfa_leak_block_t many[5000];
	size_t n = TFA_ARRAY_SIZE(many);
	uint64_t x = 88172645463325252u;

	for (int layout = 0; layout < 5; layout++) {
		for (unsigned depth = 0; depth <= 3; depth++) {
			for (size_t i = 0; i < n; i++) {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				uintptr_t a = layout == 0 ? (uintptr_t)(x % 1000000) * 16
					      : layout == 1 ? (uintptr_t)(x % 7) * 16
					      : layout == 2 ? (uintptr_t)i * 16
					      : layout == 3 ? (uintptr_t)(n - i) * 16
							    : (uintptr_t)(i < n / 2 ? i : n - i) * 16;
				many[i] = (tfa_leak_block_t){ .addr = a, .size = a * 3 + 1, .user = (uint32_t)i };
			}
			if (depth == 3)
				tfa_leak_sort(many, n);
			else
				tfa_leak_sort_limited(many, n, depth * 4);
			check_sorted_permutation(many, n);
		}
	}
}
END_TEST

/* root -> a -> b -> c by start pointers: all reachable; d, pointed to by nobody, definite. */
START_TEST(test_chain_from_root)
{
	uint32_t a = block(0, 32), b = block(8, 16), c = block(16, 8), d = block(24, 8);

	rootmem[3] = W(0);
	H[0 + 2] = W(8);
	H[8 + 1] = W(16);
	root_words(8);
	classify();
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(c), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(d), TFA_LEAK_CLASS_DEFINITE);
}
END_TEST

/*
 * Roots and blocks long enough for the scan's four-words-a-step loop, from
 * an address that is no multiple of 32 and to one that leaves a tail: every
 * word of every group is seen, whichever of the four holds the pointer, and
 * words in the blocks' span that point at no block (the gap between them,
 * the span's end) or outside it change nothing.
 */
START_TEST(test_scan_word_groups)
{
	uint32_t t[40], c;

	for (size_t i = 0; i < 40; i++)
		t[i] = block(2 * i, 16);
	c = block(100, 37 * sizeof(uintptr_t)); /* 9 groups of 4 and one word */
	uintptr_t noise[] = { 0, 1, W(0) - 8, W(90), W(100) + 37 * sizeof(uintptr_t), UINTPTR_MAX };
	rootmem[0] = W(0);  /* outside the root range: t0 stays lost */
	rootmem[30] = W(2); /* so do t1 and t2 */
	rootmem[31] = W(4);
	for (size_t k = 1; k < 30; k++)
		rootmem[k] = k % 2 == 1 ? W(2 * (3 + k / 2)) : noise[k % TFA_ARRAY_SIZE(noise)];
	rootmem[10] = W(100);
	for (size_t j = 0; j < 37; j++)
		H[100 + j] = j % 3 == 0 ? W(2 * (18 + j / 3)) : noise[j % TFA_ARRAY_SIZE(noise)];
	H[100 + 4] = W(2 * 32) + 8; /* into t32 */
	roots[0].lo = (uintptr_t)&rootmem[1];
	roots[0].hi = (uintptr_t)&rootmem[30];
	nroots = 1;
	classify();
	ck_assert_int_eq(cls(c), TFA_LEAK_CLASS_REACHABLE);
	for (size_t i = 0; i < 40; i++) {
		int want = i >= 3 && i <= 30 ? TFA_LEAK_CLASS_REACHABLE
			   : i == 32	     ? TFA_LEAK_CLASS_POSSIBLE
					     : TFA_LEAK_CLASS_DEFINITE;
		ck_assert_msg(cls(t[i]) == want, "block %zu: class %d, not %d", i, cls(t[i]), want);
	}
}
END_TEST

/* Without roots everything is lost; a pointer past a block's requested size is no pointer. */
START_TEST(test_no_roots_and_sizes)
{
	uint32_t a = block(0, 16), b = block(8, 8);

	H[0 + 1] = W(8);  /* a -> b, inside a's 16 bytes */
	H[8 + 1] = W(0);  /* past b's 8 bytes: never scanned */
	classify();
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_DEFINITE);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_INDIRECT);
}
END_TEST

/* A reachable cycle, and a lost one: the lost cycle's first block (by address) definite. */
START_TEST(test_cycles)
{
	uint32_t a = block(0, 16), b = block(8, 16);
	uint32_t e = block(40, 16), f = block(32, 16), g = block(48, 16);

	rootmem[0] = W(0);
	H[0] = W(8);
	H[8] = W(0);
	/* e -> f -> g -> e, f lowest */
	H[40] = W(32);
	H[32] = W(48);
	H[48] = W(40);
	root_words(1);
	classify();
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(f), TFA_LEAK_CLASS_DEFINITE);
	ck_assert_int_eq(cls(e), TFA_LEAK_CLASS_INDIRECT);
	ck_assert_int_eq(cls(g), TFA_LEAK_CLASS_INDIRECT);
}
END_TEST

/*
 * root -> a+8 (interior): a possible; a -> b (start) from a possible block:
 * b possible too; root -> c (start), c -> d+16: d possible; d -> e: possible.
 */
START_TEST(test_interior_pointer)
{
	uint32_t a = block(0, 32), b = block(8, 8), c = block(16, 8), d = block(24, 64),
		 e = block(40, 8);

	rootmem[0] = W(0) + 8;
	H[0 + 3] = W(8);
	rootmem[1] = W(16);
	H[16] = W(24) + 16;
	H[24 + 7] = W(40);
	root_words(2);
	classify();
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_POSSIBLE);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_POSSIBLE);
	ck_assert_int_eq(cls(c), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(d), TFA_LEAK_CLASS_POSSIBLE);
	ck_assert_int_eq(cls(e), TFA_LEAK_CLASS_POSSIBLE);
}
END_TEST

/*
 * First seen through an interior pointer, then through a start pointer: it
 * and what it holds become reachable (it is scanned again).
 */
START_TEST(test_possible_upgraded)
{
	uint32_t a = block(0, 32), b = block(8, 8), c = block(16, 8);

	rootmem[0] = W(0) + 8; /* first root range: a possible, b possible */
	H[1] = W(8);
	rootmem[8] = W(0);     /* second root range: a reachable, b reachable */
	roots[0] = (tfa_leak_range_t){ (uintptr_t)&rootmem[0], (uintptr_t)&rootmem[1] };
	roots[1] = (tfa_leak_range_t){ (uintptr_t)&rootmem[8], (uintptr_t)&rootmem[9] };
	nroots = 2;
	classify();
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(c), TFA_LEAK_CLASS_DEFINITE);
}
END_TEST

/*
 * A lost list of 5 nodes: the head definite, the 4 others indirect, wherever
 * they lie (here below the head, so that they lead cliques first and are
 * claimed by the head's later); an interior pointer links one of them.
 */
START_TEST(test_lost_list)
{
	uint32_t node[4];
	uint32_t head = block(100, 24);

	for (size_t i = 0; i < 4; i++)
		node[i] = block(10 * i, 24);
	H[100 + 1] = W(0);
	H[0 + 1] = W(10);
	H[10 + 1] = W(20) + 8; /* interior: still indirect */
	H[20 + 1] = W(30);
	classify();
	ck_assert_int_eq(cls(head), TFA_LEAK_CLASS_DEFINITE);
	for (size_t i = 0; i < 4; i++)
		ck_assert_int_eq(cls(node[i]), TFA_LEAK_CLASS_INDIRECT);
}
END_TEST

/* A block that points only to itself: definite; one pointing into itself too. */
START_TEST(test_self_reference)
{
	uint32_t a = block(0, 16), b = block(8, 64);

	H[0] = W(0);
	H[8 + 3] = W(8) + 40;
	classify();
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_DEFINITE);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_DEFINITE);
}
END_TEST

/* Zero-byte blocks: reached by their address only; never scanned; NOSCAN blocks neither. */
START_TEST(test_zero_size_and_noscan)
{
	uint32_t z = block(0, 0), y = block(2, 0), n = block(8, 16), m = block(16, 8);

	H[0] = W(16); /* inside z's word, but z holds no bytes: not scanned */
	H[8] = W(16); /* n is NOSCAN: not scanned */
	rootmem[0] = W(0);
	rootmem[1] = W(2) + 1; /* not z's nor y's */
	rootmem[2] = W(8);
	for (size_t i = 0; i < nblocks; i++)
		if (blocks[i].user == n)
			blocks[i].flags = TFA_LEAK_NOSCAN;
	root_words(3);
	classify();
	ck_assert_int_eq(cls(z), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(y), TFA_LEAK_CLASS_DEFINITE);
	ck_assert_int_eq(cls(n), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(m), TFA_LEAK_CLASS_DEFINITE);
}
END_TEST

/* Unaligned words are not pointers (memcheck scans aligned words only). */
START_TEST(test_unaligned_not_scanned)
{
	uint32_t a = block(0, 8);
	unsigned char raw[24];
	uintptr_t v = W(0);

	memset(raw, 0, sizeof(raw));
	memcpy(raw + ((8 - ((uintptr_t)raw & 7)) & 7) + 3, &v, sizeof(v));
	roots[0] = (tfa_leak_range_t){ (uintptr_t)raw, (uintptr_t)(raw + sizeof(raw)) };
	nroots = 1;
	classify();
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_DEFINITE);
}
END_TEST

/* ---- this process's roots ------------------------------------------------------------------ */

static uintptr_t global_ptr;
static int ready_pipe[2], done_pipe[2];
static uintptr_t thread_target;

static void *
blocked_thread(void *arg)
{
	volatile uintptr_t local = thread_target;
	char c = 0;

	(void)arg;
	if (write(ready_pipe[1], &c, 1) != 1)
		return NULL;
	/* Blocked in read(2) with `local` on its stack. */
	if (read(done_pipe[0], &c, 1) != 1)
		return NULL;
	return (void *)local;
}

static uint32_t last_tcbs; /* thread control blocks the last collection found */
static bool last_alone;    /* the last collection saw no other thread */

/* Classifies the blocks from this process's roots; returns the other threads covered. */
static uint32_t
classify_process(const void *self)
{
	tfa_leak_maps_t maps;
	tfa_leak_roots_t r;
	uintptr_t regs[1] = { 0 };

	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(tfa_leak_maps_read(&maps), 0);
	ck_assert_uint_gt(maps.n, 0);
	ck_assert_int_eq(tfa_leak_collect_roots(&r, &maps, self, (uintptr_t)__builtin_frame_address(0),
						 regs, 1),
			 0);
	ck_assert_uint_gt(r.modules, 0);
	tfa_leak_sort(blocks, nblocks);
	tfa_leak_classify(blocks, nblocks, r.r, r.n, work, r.alone);
	uint32_t threads = r.threads;
	last_tcbs = r.tcbs;
	last_alone = r.alone;
	tfa_leak_roots_free(&r);
	tfa_leak_maps_free(&maps);
	return threads;
}

/* classify_process(NULL) once the other thread sits in its system call (a loaded machine). */
static uint32_t
classify_blocked(void)
{
	uint32_t threads = 0;

	for (int i = 0; i < 100 && (threads = classify_process(NULL)) != 1; i++)
		usleep(20000);
	return threads;
}

START_TEST(test_process_roots)
{
	uint32_t g = block(0, 16), l = block(8, 16), t = block(16, 16), lost = block(24, 16);
	volatile uintptr_t local = W(8);
	pthread_t th;
	char c = 0;

	global_ptr = W(0);
	H[0] = W(24) + 8; /* scanned memory: an interior pointer to `lost` ... */
	H[0] = 0;         /* ... taken back: lost again */
	thread_target = W(16);
	ck_assert_int_eq(pipe(ready_pipe), 0);
	ck_assert_int_eq(pipe(done_pipe), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, blocked_thread, NULL), 0);
	ck_assert_int_eq(read(ready_pipe[0], &c, 1), 1);
	thread_target = 0;
	ck_assert_uint_eq(classify_blocked(), 1);
	ck_assert_int_eq(cls(g), TFA_LEAK_CLASS_REACHABLE);   /* data/bss */
	ck_assert_int_eq(cls(l), TFA_LEAK_CLASS_REACHABLE);   /* this thread's stack */
	ck_assert_int_eq(cls(t), TFA_LEAK_CLASS_REACHABLE);   /* the other thread's stack */
	ck_assert_int_eq(cls(lost), TFA_LEAK_CLASS_DEFINITE);
	ck_assert_uint_ge(last_tcbs, 1); /* the blocked thread's */
	ck_assert(!last_alone);          /* so roots are copied, never read in place */
	ck_assert_int_eq(write(done_pipe[1], &c, 1), 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_ne(local, 0);
}
END_TEST

/* The module holding `self` is no root: its globals do not keep blocks. */
START_TEST(test_process_roots_exclude_self)
{
	uint32_t g = block(0, 16);

	global_ptr = W(0);
	ck_assert_uint_eq(classify_process((const void *)&global_ptr), 0);
	ck_assert_int_eq(cls(g), TFA_LEAK_CLASS_DEFINITE);
	/* Check forks each test: this process has one thread, and the roots were read in place. */
	ck_assert(last_alone);
	global_ptr = 0;
}
END_TEST

static __thread uintptr_t tls_ptr;

static void *
tls_thread(void *arg)
{
	char c = 0;

	(void)arg;
	tls_ptr = thread_target;
	if (write(ready_pipe[1], &c, 1) != 1)
		return NULL;
	if (read(done_pipe[0], &c, 1) != 1)
		return NULL;
	return (void *)tls_ptr;
}

/*
 * Another thread's static TLS (at the top of its stack mapping) is a root,
 * except the excluded module's block of it: the shim's own thread-local
 * state is no root.
 */
START_TEST(test_other_thread_tls)
{
	uint32_t b = block(0, 16);
	pthread_t th;
	char c = 0;

	thread_target = W(0);
	ck_assert_int_eq(pipe(ready_pipe), 0);
	ck_assert_int_eq(pipe(done_pipe), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, tls_thread, NULL), 0);
	ck_assert_int_eq(read(ready_pipe[0], &c, 1), 1);
	thread_target = 0;
	ck_assert_uint_eq(classify_blocked(), 1);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_REACHABLE);
	/* This test binary excluded (global_ptr is one of its globals): its TLS block is cut out. */
	ck_assert_uint_eq(classify_process((const void *)&global_ptr), 1);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_DEFINITE);
	ck_assert_int_eq(write(done_pipe[1], &c, 1), 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
}
END_TEST

static void *
quit_thread(void *arg)
{
	return arg;
}

/*
 * A thread that was joined leaves its stack in glibc's cache, its control
 * block at the top of a guarded mapping: found by its signature.
 */
START_TEST(test_cached_thread_tcb)
{
	pthread_t th;
	tfa_leak_maps_t maps;
	size_t found = 0;

	ck_assert_int_eq(pthread_create(&th, NULL, quit_thread, NULL), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(tfa_leak_maps_read(&maps), 0);
	ck_assert_uint_ge(maps.nguarded, 1);
	for (size_t i = 0; i < maps.nguarded; i++) {
		uintptr_t a = tfa_leak_find_tcb(maps.guarded[i].lo, maps.guarded[i].hi);
		if (a != 0) {
			ck_assert_uint_ge(a, maps.guarded[i].lo);
			ck_assert_uint_lt(a, maps.guarded[i].hi);
			found++;
		}
	}
	ck_assert_uint_ge(found, 1);
	/* Mapped memory without the signature has none. */
	ck_assert_uint_eq(tfa_leak_find_tcb((uintptr_t)heap, (uintptr_t)(heap + HEAP_WORDS)), 0);
	tfa_leak_maps_free(&maps);
}
END_TEST

START_TEST(test_maps)
{
	tfa_leak_maps_t maps;
	uintptr_t lo, hi;
	static char in_data[64];

	ck_assert_int_eq(tfa_leak_maps_read(&maps), 0);
	ck_assert(tfa_leak_maps_find(&maps, (uintptr_t)in_data, &lo, &hi));
	ck_assert_uint_le(lo, (uintptr_t)in_data);
	ck_assert_uint_gt(hi, (uintptr_t)in_data);
	ck_assert(tfa_leak_maps_readable(&maps, (uintptr_t)heap, (uintptr_t)(heap + HEAP_WORDS)));
	ck_assert(!tfa_leak_maps_find(&maps, 4096, &lo, &hi));
	ck_assert(!tfa_leak_maps_readable(&maps, 4096, 8192));

	/* Roots are clipped to what is mapped: a hole in the middle is left out. */
	char *p = tfa_arena_map(3 * 4096);
	ck_assert_ptr_nonnull(p);
	tfa_arena_unmap(p + 4096, 4096);
	tfa_leak_maps_free(&maps);
	ck_assert_int_eq(tfa_leak_maps_read(&maps), 0);
	ck_assert(!tfa_leak_maps_readable(&maps, (uintptr_t)p, (uintptr_t)p + 3 * 4096));
	tfa_leak_roots_t r;
	memset(&r, 0, sizeof(r));
	tfa_leak_roots_add(&r, &maps, (uintptr_t)p, (uintptr_t)p + 3 * 4096);
	uint64_t covered = 0;
	for (size_t i = 0; i < r.n; i++) {
		ck_assert(r.r[i].hi <= (uintptr_t)p + 4096 || r.r[i].lo >= (uintptr_t)p + 2 * 4096);
		covered += r.r[i].hi - r.r[i].lo;
	}
	ck_assert_uint_eq(covered, 2 * 4096);
	tfa_leak_roots_free(&r);
	tfa_leak_maps_free(&maps);
	tfa_arena_unmap(p, 4096);
	tfa_arena_unmap(p + 2 * 4096, 4096);
}
END_TEST

/* The registry of the shim's mappings: added, cut, split, dropped; sorted snapshots. */
START_TEST(test_own_maps)
{
	tfa_leak_range_t snap[8];

	ck_assert(!tfa_own_maps_complete()); /* nothing recorded: the scan trusts no anonymous memory */
	tfa_own_maps_add(0x30000, 0x10000);
	tfa_own_maps_add(0x10000, 0x10000);
	ck_assert(tfa_own_maps_complete());
	ck_assert(tfa_own_maps_contains(0x10000));
	ck_assert(tfa_own_maps_contains(0x3ffff));
	ck_assert(!tfa_own_maps_contains(0x20000));
	tfa_own_maps_remove(0x34000, 0x4000); /* split */
	tfa_own_maps_remove(0x10000, 0x1000); /* cut the front */
	ck_assert_uint_eq(tfa_own_maps_snapshot(snap, 8), 3);
	ck_assert_uint_eq(snap[0].lo, 0x11000);
	ck_assert_uint_eq(snap[0].hi, 0x20000);
	ck_assert_uint_eq(snap[1].lo, 0x30000);
	ck_assert_uint_eq(snap[1].hi, 0x34000);
	ck_assert_uint_eq(snap[2].lo, 0x38000);
	ck_assert_uint_eq(snap[2].hi, 0x40000);
	ck_assert(!tfa_own_maps_contains(0x35000));
	ck_assert_uint_eq(tfa_own_maps_snapshot(snap, 2), 0); /* no room: nothing */
	tfa_own_maps_remove(0, 0x100000); /* everything */
	ck_assert_uint_eq(tfa_own_maps_count(), 0);
}
END_TEST

/*
 * The backend's ranges, which sample-only frees look pointers up in: those
 * that touch or overlap are one (jemalloc maps its metadata a page at a time,
 * its extents side by side), the arena's are none of them, and a cut splits.
 */
START_TEST(test_own_maps_backend)
{
	tfa_own_maps_add(0x100000, 0x1000);
	tfa_own_maps_add(0x101000, 0x1000); /* after */
	tfa_own_maps_add(0xff000, 0x1000);  /* before */
	ck_assert_uint_eq(tfa_own_maps_backend_count(), 1);
	ck_assert(tfa_own_maps_backend_contains(0xff000));
	ck_assert(tfa_own_maps_backend_contains(0x101fff));
	ck_assert(!tfa_own_maps_backend_contains(0x102000));
	ck_assert(!tfa_own_maps_backend_contains(0xfefff));
	tfa_own_maps_add(0x104000, 0x1000); /* a gap */
	ck_assert_uint_eq(tfa_own_maps_backend_count(), 2);
	ck_assert(!tfa_own_maps_backend_contains(0x103000));
	tfa_own_maps_add(0x102000, 0x2000); /* fills it: all one */
	ck_assert_uint_eq(tfa_own_maps_backend_count(), 1);
	ck_assert(tfa_own_maps_backend_contains(0x103000));
	ck_assert(tfa_own_maps_backend_contains(0x104fff));
	tfa_own_maps_add(0x100800, 0x2000); /* inside */
	ck_assert_uint_eq(tfa_own_maps_backend_count(), 1);
	tfa_own_maps_arena_begin();
	tfa_own_maps_add(0x105000, 0x1000); /* the arena's: touches, but not the backend's */
	tfa_own_maps_arena_end();
	ck_assert_uint_eq(tfa_own_maps_backend_count(), 1);
	ck_assert(!tfa_own_maps_backend_contains(0x105000));
	ck_assert(tfa_own_maps_contains(0x105000));
	ck_assert(tfa_own_maps_backend_contains(0x101800)); /* the thread's last range now */
	tfa_own_maps_remove(0x101000, 0x1000); /* a cut in the middle */
	ck_assert_uint_eq(tfa_own_maps_backend_count(), 2);
	ck_assert(!tfa_own_maps_backend_contains(0x101800));
	ck_assert(tfa_own_maps_backend_contains(0x100fff));
	ck_assert(tfa_own_maps_backend_contains(0x102000));
	ck_assert(tfa_own_maps_backend_contains(0xff000));
	ck_assert(tfa_own_maps_backend_contains(0x104fff));
}
END_TEST

/*
 * Anonymous memory the program mapped is a root; the shim's own mappings
 * and pieces holding live blocks (an allocator's heap) are not.
 */
START_TEST(test_anon_roots)
{
	uintptr_t *prog = tfa_arena_map(3 * 4096);
	uint32_t a = block(0, 16), b = block(8, 16), c = block(16, 16);
	tfa_leak_maps_t maps;
	tfa_leak_roots_t r;

	ck_assert_ptr_nonnull(prog);
	prog[0] = W(0);              /* page 0: the program's: a reachable */
	prog[512] = W(8);            /* page 1: the shim's own: b not */
	prog[1024] = W(16);          /* page 2: holds a block (below): c not */
	blocks[nblocks++] = (tfa_leak_block_t){ .addr = (uintptr_t)&prog[1030], .size = 8, .user = 99,
						.flags = TFA_LEAK_NOSCAN };
	tfa_leak_sort(blocks, nblocks);
	ck_assert_int_eq(tfa_leak_maps_read(&maps), 0);
	/* The blocks' "heap" and the list of blocks are the shim's too. */
	tfa_leak_range_t own[3] = {
		{ (uintptr_t)heap, (uintptr_t)(heap + HEAP_WORDS) },
		{ (uintptr_t)blocks, (uintptr_t)(blocks + MAX_BLOCKS) },
		{ (uintptr_t)&prog[512], (uintptr_t)&prog[1024] },
	};
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (own[j].lo < own[i].lo) {
				tfa_leak_range_t t = own[i];
				own[i] = own[j];
				own[j] = t;
			}
	memset(&r, 0, sizeof(r));
	ck_assert_uint_ge(tfa_leak_roots_add_anon(&r, &maps, own, 3, blocks, nblocks), 4096);
	/*
	 * Only the roots in this test's mapping are classified from: the rest
	 * of the process's anonymous memory (a sanitizer's shadow, terabytes
	 * of it) is not this test's business.
	 */
	tfa_leak_range_t mine[8];
	size_t nmine = 0;
	uintptr_t plo = (uintptr_t)prog, phi = (uintptr_t)(prog + 1536);
	for (size_t i = 0; i < r.n; i++) {
		if (r.r[i].hi <= plo || r.r[i].lo >= phi)
			continue;
		ck_assert_uint_lt(nmine, TFA_ARRAY_SIZE(mine));
		mine[nmine].lo = TFA_MAX(r.r[i].lo, plo);
		mine[nmine].hi = TFA_MIN(r.r[i].hi, phi);
		/* Never the shim's page, never the page that holds a block. */
		ck_assert(mine[nmine].hi <= (uintptr_t)&prog[512]);
		nmine++;
	}
	ck_assert_uint_eq(nmine, 1);
	tfa_leak_classify(blocks, nblocks, mine, nmine, work, scan_alone);
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_DEFINITE);
	ck_assert_int_eq(cls(c), TFA_LEAK_CLASS_DEFINITE);
	tfa_leak_roots_free(&r);
	tfa_leak_maps_free(&maps);
	tfa_arena_unmap(prog, 3 * 4096);
}
END_TEST

/*
 * The excluded module's range (roots.self_lo, self_hi: the shim's .bss, which
 * the loader maps anonymous past the file) is cut out of the anonymous
 * roots, and so is what is a root already (a module's .bss past its file):
 * the rest of the mapping is added once; the scan says how much it read.
 */
START_TEST(test_anon_roots_exclude_module)
{
	uintptr_t *prog = tfa_arena_map(3 * 4096);
	uint32_t a = block(0, 16), b = block(8, 16), c = block(16, 16);
	tfa_leak_maps_t maps;
	tfa_leak_roots_t r;

	ck_assert_ptr_nonnull(prog);
	prog[0] = W(0);     /* page 0: the program's: a reachable */
	prog[512] = W(8);   /* page 1: "the module's .bss": b not */
	prog[1024] = W(16); /* page 2: the program's: c reachable */
	tfa_leak_sort(blocks, nblocks);
	ck_assert_int_eq(tfa_leak_maps_read(&maps), 0);
	tfa_leak_range_t own[2] = {
		{ (uintptr_t)heap, (uintptr_t)(heap + HEAP_WORDS) },
		{ (uintptr_t)blocks, (uintptr_t)(blocks + MAX_BLOCKS) },
	};
	if (own[1].lo < own[0].lo) {
		tfa_leak_range_t t = own[0];
		own[0] = own[1];
		own[1] = t;
	}
	memset(&r, 0, sizeof(r));
	r.self_lo = (uintptr_t)&prog[512];
	r.self_hi = (uintptr_t)&prog[1024];
	tfa_leak_roots_add(&r, &maps, (uintptr_t)&prog[1024], (uintptr_t)&prog[1536]); /* a root already */
	ck_assert_uint_ge(tfa_leak_roots_add_anon(&r, &maps, own, 2, blocks, nblocks), 4096);
	tfa_leak_range_t mine[8];
	size_t nmine = 0;
	uint64_t bytes = 0;
	uintptr_t plo = (uintptr_t)prog, phi = (uintptr_t)(prog + 1536);
	for (size_t i = 0; i < r.n; i++) {
		if (r.r[i].hi <= plo || r.r[i].lo >= phi)
			continue;
		ck_assert_uint_lt(nmine, TFA_ARRAY_SIZE(mine));
		mine[nmine].lo = TFA_MAX(r.r[i].lo, plo);
		mine[nmine].hi = TFA_MIN(r.r[i].hi, phi);
		ck_assert(mine[nmine].hi <= r.self_lo || mine[nmine].lo >= r.self_hi);
		bytes += mine[nmine].hi - mine[nmine].lo;
		nmine++;
	}
	ck_assert_uint_eq(nmine, 2);
	ck_assert_uint_eq(bytes, 2 * 4096);
	/* The roots, the two reached blocks and the unreached one (its clique's scan), once each. */
	ck_assert_uint_eq(tfa_leak_classify(blocks, nblocks, mine, nmine, work, scan_alone), bytes + 3 * 16);
	ck_assert_int_eq(cls(a), TFA_LEAK_CLASS_REACHABLE);
	ck_assert_int_eq(cls(b), TFA_LEAK_CLASS_DEFINITE);
	ck_assert_int_eq(cls(c), TFA_LEAK_CLASS_REACHABLE);
	tfa_leak_roots_free(&r);
	tfa_leak_maps_free(&maps);
	tfa_arena_unmap(prog, 3 * 4096);
}
END_TEST

/* The cases that classify from given roots: run with copies, and read in place. */
static void
add_classification_cases(TCase *tc)
{
	tcase_add_test(tc, test_chain_from_root);
	tcase_add_test(tc, test_scan_word_groups);
	tcase_add_test(tc, test_no_roots_and_sizes);
	tcase_add_test(tc, test_cycles);
	tcase_add_test(tc, test_interior_pointer);
	tcase_add_test(tc, test_possible_upgraded);
	tcase_add_test(tc, test_lost_list);
	tcase_add_test(tc, test_self_reference);
	tcase_add_test(tc, test_anon_roots_exclude_module);
	tcase_add_test(tc, test_zero_size_and_noscan);
	tcase_add_test(tc, test_unaligned_not_scanned);
}

static Suite *
leak_scan_suite(void)
{
	Suite *s = suite_create("leak_scan");
	TCase *tc = tcase_create("classes");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_sort_and_find);
	tcase_add_test(tc, test_index_matches_search);
	tcase_add_test(tc, test_sort_many);
	add_classification_cases(tc);
	suite_add_tcase(s, tc);

	/* The same cases read in place, as with one thread (no copies through process_vm_readv). */
	tc = tcase_create("classes_in_place");
	tcase_add_checked_fixture(tc, setup_in_place, teardown);
	add_classification_cases(tc);
	suite_add_tcase(s, tc);

	tc = tcase_create("process");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_process_roots);
	tcase_add_test(tc, test_process_roots_exclude_self);
	tcase_add_test(tc, test_maps);
	tcase_add_test(tc, test_cached_thread_tcb);
	tcase_add_test(tc, test_other_thread_tls);
	tcase_add_test(tc, test_own_maps);
	tcase_add_test(tc, test_own_maps_backend);
	tcase_add_test(tc, test_anon_roots);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(leak_scan_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
