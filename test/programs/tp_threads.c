/* SPDX-License-Identifier: MIT */
/*
 * Cross-thread frees with exact counts.  NT threads, in phases separated by
 * barriers:
 *   1. thread t allocates K blocks of known sizes (malloc, calloc, aligned);
 *   2. thread t frees the blocks of thread t+1, except every 25th;
 *   3. thread t reallocs the kept blocks of thread t+2 to twice their size;
 *   4. thread t frees half of those (the even ones); the rest leak.
 * Nothing is freed before every thread has finished phase 1, so the peak is
 * the start-up bytes plus all of phase 1: printed as "PHASE1_BYTES n".  The
 * ledger has exact counts.  "baseline" starts and joins the same threads,
 * which allocate nothing, so that glibc's own per-thread allocations cancel.
 */
#include <pthread.h>

#include "tp_common.h"

#define NT 4
#define K  256

static pthread_barrier_t barrier;
static void *blocks[NT][K];
static size_t sizes[NT][K];
static int baseline;
static long long phase1_bytes;

static size_t
size_of(int t, int i)
{
	return 16 + (size_t)((t * 131 + i * 977) % 12000);
}

static void *
worker(void *arg)
{
	int t = (int)(intptr_t)arg;
	pthread_barrier_wait(&barrier);
	if (!baseline) {
		for (int i = 0; i < K; i++) {
			size_t n = size_of(t, i);
			void *p;
			if (i % 3 == 0) {
				p = malloc(n);
			} else if (i % 3 == 1) {
				p = calloc(1, n);
				TP_CHECK(p == NULL || tp_all_zero(p, n), "calloc not zeroed");
			} else {
				p = NULL;
				TP_CHECK(posix_memalign(&p, 64, n) == 0, "posix_memalign");
				TP_CHECK(tp_aligned(p, 64), "alignment");
			}
			TP_CHECK(p != NULL, "allocation of %zu", n);
			tp_fill(p, n, (unsigned char)(t + i));
			blocks[t][i] = p;
			sizes[t][i] = n;
			tp_l_alloc_mt((long long)n);
			TP_ATOMIC_ADD(&phase1_bytes, (long long)n);
		}
	}
	pthread_barrier_wait(&barrier);
	if (!baseline) {
		int o = (t + 1) % NT;
		for (int i = 0; i < K; i++) {
			if (i % 25 == 0)
				continue;
			TP_CHECK(tp_check_fill(blocks[o][i], sizes[o][i], (unsigned char)(o + i)),
			         "block %d of thread %d clobbered", i, o);
			free(blocks[o][i]);
			tp_l_free_mt((long long)sizes[o][i]);
			blocks[o][i] = NULL;
		}
	}
	pthread_barrier_wait(&barrier);
	if (!baseline) {
		int o = (t + 2) % NT;
		for (int i = 0; i < K; i += 25) {
			size_t n = sizes[o][i] * 2;
			void *p = realloc(blocks[o][i], n);
			TP_CHECK(p != NULL, "realloc");
			TP_CHECK(tp_check_fill(p, sizes[o][i], (unsigned char)(o + i)),
			         "realloc lost data");
			tp_l_realloc_mt((long long)sizes[o][i], (long long)n);
			blocks[o][i] = p;
			sizes[o][i] = n;
		}
	}
	pthread_barrier_wait(&barrier);
	if (!baseline) {
		int o = (t + 3) % NT;
		for (int i = 0; i < K; i += 50) {
			free(blocks[o][i]);
			tp_l_free_mt((long long)sizes[o][i]);
			blocks[o][i] = NULL;
		}
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	baseline = tp_is_baseline(argc, argv);
	tp_ledger.peak_unknown = 1;
	pthread_t th[NT];
	TP_CHECK(pthread_barrier_init(&barrier, NULL, NT) == 0, "barrier");
	for (int t = 0; t < NT; t++)
		TP_CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0,
		         "pthread_create");
	for (int t = 0; t < NT; t++)
		TP_CHECK(pthread_join(th[t], NULL) == 0, "pthread_join");
	pthread_barrier_destroy(&barrier);
	if (baseline)
		return 0;
	long long leaked = 0;
	for (int t = 0; t < NT; t++)
		for (int i = 0; i < K; i++)
			if (blocks[t][i] != NULL)
				leaked += (long long)sizes[t][i];
	TP_CHECK(leaked == tp_ledger.w[0].bytes_in_use, "ledger %lld != %lld", leaked,
	         tp_ledger.w[0].bytes_in_use);
	tp_out("threads done\n");
	tp_out("PHASE1_BYTES %lld\n", phase1_bytes);
	tp_l_print();
	return 0;
}
