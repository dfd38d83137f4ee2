/* SPDX-License-Identifier: MIT */
/*
 * trees: many small short-lived objects in a recursive algorithm, as in the
 * benchmarks game's binary-trees (single-threaded).  Binary trees of depth
 * 4..D are built and freed repeatedly while one long-lived tree of depth D
 * stays allocated; every node is one 16-byte malloc.
 * usage: trees [D]   (default 18)
 */
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

int
main(int argc, char **argv)
{
	const int min_depth = 4;
	int max_depth = (int)bench_arg(argc, argv, 1, 18);
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
