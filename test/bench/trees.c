/* SPDX-License-Identifier: MIT */
/*
 * trees: many small short-lived objects in a recursive algorithm, as in the
 * benchmarks game's binary-trees (single-threaded).  Binary trees of depth
 * 4..D are built and freed repeatedly while one long-lived tree of depth D
 * stays allocated; every node is one 16-byte malloc.
 * usage: trees [D [LAYOUT]]   (default 18; LAYOUT 1 to 5 make a few
 * allocations first, each its own way, so that the heap's blocks lie
 * elsewhere: a hash table keyed by address can depend on where they lie)
 */
#include <string.h>

#include "bench_common.h"

typedef struct node_s {
	struct node_s *left, *right;
} node_t;

static node_t *
build(int depth)
{
	node_t *n = bench_xmalloc(sizeof(*n));
	if (depth > 0) {
		n->left = build(depth - 1);
		n->right = build(depth - 1);
	} else {
		n->left = n->right = NULL;
	}
	return n;
}

static long
check(const node_t *n)
{
	return 1 + (n->left != NULL ? check(n->left) + check(n->right) : 0);
}

static void
release(node_t *n)
{
	if (n->left != NULL) {
		release(n->left);
		release(n->right);
	}
	free(n);
}

static void *layout_blocks[4000];

/* The allocations of layout k (1 to 5) before the run; 0: none. */
static void
shift_layout(long k)
{
	static const size_t large[] = { 16384, 20480, 65536, 1 << 20 };
	int n = 0;

	switch (k) {
	case 1: /* a block of many size classes, and large ones, all freed */
		for (size_t s = 8; s <= 14336 && n < 60; s = s < 128 ? s + 16 : s * 5 / 4)
			layout_blocks[n++] = bench_xmalloc(s);
		for (size_t i = 0; i < sizeof(large) / sizeof(large[0]); i++)
			layout_blocks[n++] = bench_xmalloc(large[i]);
		for (int i = 0; i < n; i++)
			free(layout_blocks[i]);
		break;
	case 2: /* 1000 blocks of 100 bytes, kept */
		for (; n < 1000; n++)
			layout_blocks[n] = bench_xmalloc(100);
		break;
	case 3: /* one block of 1 MiB, kept */
		layout_blocks[0] = bench_xmalloc(1 << 20);
		break;
	case 4: /* 300 nodes' worth, kept */
		for (; n < 300; n++)
			layout_blocks[n] = bench_xmalloc(16);
		break;
	case 5: /* 4000 blocks of 8 to 71 bytes, every other one freed */
		for (; n < 4000; n++)
			layout_blocks[n] = bench_xmalloc(8 + (size_t)(n % 64));
		for (int i = 0; i < n; i += 2)
			free(layout_blocks[i]);
		break;
	default:
		break;
	}
}

int
main(int argc, char **argv)
{
	const int min_depth = 4;
	int max_depth = (int)bench_arg(argc, argv, 1, 18);
	long layout = argc > 2 && strcmp(argv[2], "0") == 0 ? 0 : bench_arg(argc, argv, 2, 0);
	if (layout > 5) {
		fprintf(stderr, "%s: layout %ld: 0 to 5\n", argv[0], layout);
		return 2;
	}
	shift_layout(layout);
	if (max_depth < min_depth + 2)
		max_depth = min_depth + 2;
	uint64_t sum = 0;

	node_t *stretch = build(max_depth + 1);
	long c = check(stretch);
	release(stretch);
	printf("stretch tree of depth %d\t check: %ld\n", max_depth + 1, c);
	sum = bench_mix(sum, (uint64_t)c);

	node_t *long_lived = build(max_depth);
	for (int d = min_depth; d <= max_depth; d += 2) {
		long iterations = 1L << (max_depth - d + min_depth);
		long total = 0;
		for (long i = 0; i < iterations; i++) {
			node_t *t = build(d);
			total += check(t);
			release(t);
		}
		printf("%ld\t trees of depth %d\t check: %ld\n", iterations, d, total);
		sum = bench_mix(sum, (uint64_t)total);
	}
	c = check(long_lived);
	printf("long lived tree of depth %d\t check: %ld\n", max_depth, c);
	sum = bench_mix(sum, (uint64_t)c);
	release(long_lived);
	printf("CHECKSUM %016" PRIx64 "\n", sum);
	return 0;
}
