/* SPDX-License-Identifier: MIT */
/*
 * A block handed to another thread and freed there: does the freeing thread's
 * next allocation of the same size get that very block back?  jemalloc's
 * thread cache is last in, first out, whatever thread made the block, so
 * plain jemalloc says yes; under tfalloc's private jemalloc it must say no:
 * the block goes back towards its maker, whose pointer-table shard then keeps
 * its owner (core/shim.c, foreign_free_flags).  Both threads stay alive
 * throughout (a thread that exits hands its record to the next one).
 *
 * The maker allocates ROUNDS blocks; the taker frees each and at once
 * allocates one of the same size, counting how often it got the freed
 * address back; then the maker frees the taker's blocks.  Prints
 * "REUSED n ROUNDS", then the ledger.  "baseline" starts and joins the same
 * threads, which then allocate nothing (glibc's own blocks for a thread cancel
 * out).
 */
#include <pthread.h>

#include "tp_common.h"

#define ROUNDS 64
#define SIZE   48

static void *made[ROUNDS];
static void *taken[ROUNDS];
static int reused;
static pthread_barrier_t made_all, taken_all;
static int baseline;

static void *
maker(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS && !baseline; i++) {
		made[i] = malloc(SIZE);
		TP_CHECK(made[i] != NULL, "malloc(%d) failed", SIZE);
		tp_l_alloc_mt(SIZE);
	}
	pthread_barrier_wait(&made_all);
	pthread_barrier_wait(&taken_all);
	for (int i = 0; i < ROUNDS && !baseline; i++) {
		free(taken[i]);
		tp_l_free_mt(SIZE);
	}
	return NULL;
}

static void *
taker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&made_all);
	for (int i = 0; i < ROUNDS && !baseline; i++) {
		void *freed = made[i];
		free(freed);
		tp_l_free_mt(SIZE);
		taken[i] = malloc(SIZE);
		TP_CHECK(taken[i] != NULL, "malloc(%d) failed", SIZE);
		tp_l_alloc_mt(SIZE);
		reused += taken[i] == freed;
	}
	pthread_barrier_wait(&taken_all);
	return NULL;
}

int
main(int argc, char **argv)
{
	pthread_t m, t;

	baseline = tp_is_baseline(argc, argv);
	tp_ledger.peak_unknown = 1;
	TP_CHECK(pthread_barrier_init(&made_all, NULL, 2) == 0, "pthread_barrier_init");
	TP_CHECK(pthread_barrier_init(&taken_all, NULL, 2) == 0, "pthread_barrier_init");
	TP_CHECK(pthread_create(&m, NULL, maker, NULL) == 0, "pthread_create");
	TP_CHECK(pthread_create(&t, NULL, taker, NULL) == 0, "pthread_create");
	TP_CHECK(pthread_join(t, NULL) == 0 && pthread_join(m, NULL) == 0, "pthread_join");
	if (baseline)
		return 0;
	tp_out("REUSED %d %d\n", reused, ROUNDS);
	tp_l_print();
	return 0;
}
