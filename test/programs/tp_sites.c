/* SPDX-License-Identifier: MIT */
/*
 * Allocation sites with known functions, lines and figures, for the reports
 * of call stacks (text, JSON, folded stacks, pprof, HTML).  Built -g without
 * inlining, so each site is its own frame:
 *
 *   main -> build_cache -> cache_alloc        64 blocks of 4096 bytes, live at
 *                                              the peak, all freed: peak 262144,
 *                                              leaked 0, total 262144
 *   main -> leak_config -> config_alloc       1 block of 1000 bytes, leaked
 *   main -> parse_tokens -> token_alloc       1000 blocks of 24 bytes, freed
 *                                              at once (never more than one
 *                                              live): total 24000
 *   main -> leak_list -> node_alloc           10 blocks of 48 bytes, leaked
 *
 * Peak: 262144 + 1000 + 24 (one token) = 263168 bytes; at the peak
 * cache_alloc holds 262144, config_alloc 1000, token_alloc 24 (the cache is
 * built after the config and while one token is held).  Leaks: 1000 + 480 =
 * 1480 bytes in 11 blocks.  With "cache N" the cache has N blocks instead of 64
 * (for `tfalloc report --diff`: the cache site grows, nothing else).  With
 * "errno N" it only makes N malloc/free pairs, each with errno set before and
 * checked after: a malloc that succeeds leaves errno alone, whatever the shim
 * does meanwhile (snapshots that fail to be written, for one).  Each helper is noinline and calls malloc itself,
 * so the innermost frame of each site is the *_alloc function, and the line
 * of the malloc call is marked SITE_* below for the tests to find.
 */
#include "tp_common.h"

#define NOINLINE __attribute__((noinline, noclone))

static void *volatile sink;

NOINLINE static void *
cache_alloc(void)
{
	return malloc(4096); /* SITE_CACHE */
}

NOINLINE static void *
config_alloc(void)
{
	return malloc(1000); /* SITE_CONFIG */
}

NOINLINE static void *
token_alloc(void)
{
	return malloc(24); /* SITE_TOKEN */
}

NOINLINE static void *
node_alloc(void)
{
	return malloc(48); /* SITE_NODE */
}

NOINLINE static void
leak_config(void)
{
	sink = config_alloc();
	tp_l_alloc(1000);
}

NOINLINE static void
build_cache(void **cache, int n)
{
	for (int i = 0; i < n; i++) {
		cache[i] = cache_alloc();
		TP_CHECK(cache[i] != NULL, "malloc(4096)");
		tp_l_alloc(4096);
	}
}

NOINLINE static void *
parse_tokens(int n)
{
	void *held = NULL;
	for (int i = 0; i < n; i++) {
		void *t = token_alloc();
		TP_CHECK(t != NULL, "malloc(24)");
		tp_l_alloc(24);
		if (held != NULL) {
			free(held);
			tp_l_free(24);
		}
		held = t;
	}
	return held; /* one token still held */
}

NOINLINE static void
leak_list(int n)
{
	void **head = NULL;
	for (int i = 0; i < n; i++) {
		void **node = node_alloc();
		TP_CHECK(node != NULL, "malloc(48)");
		tp_l_alloc(48);
		*node = head;
		head = node;
	}
	sink = head;
}

int
main(int argc, char **argv)
{
	void *cache[1024];
	int ncache = 64;

	if (tp_is_baseline(argc, argv))
		return 0;
	if (argc > 2 && strcmp(argv[1], "cache") == 0)
		ncache = atoi(argv[2]);
	if (argc > 2 && strcmp(argv[1], "errno") == 0) {
		for (int i = 0, n = atoi(argv[2]); i < n; i++) {
			errno = 4242;
			void *p = malloc(24);
			TP_CHECK(p != NULL && errno == 4242, "malloc kept errno (4242)");
			free(p);
			TP_CHECK(errno == 4242, "free kept errno (4242)");
		}
		return 0;
	}
	TP_CHECK(ncache >= 0 && ncache <= 1024, "cache N: 0 to 1024 blocks");
	leak_config();
	void *token = parse_tokens(1000);
	build_cache(cache, ncache);
	for (int i = 0; i < ncache; i++) {
		free(cache[i]);
		tp_l_free(4096);
	}
	free(token);
	tp_l_free(24);
	leak_list(10);
	tp_l_print();
	return 0;
}
