/* SPDX-License-Identifier: MIT */
/*
 * Thread creation and exit churn: ROUNDS rounds of W joinable and W detached
 * short threads (argv: "ROUNDS"; "baseline ROUNDS" makes the same threads,
 * which allocate nothing).  Each thread allocates BLOCKS blocks (malloc,
 * calloc, realloc), frees most of them, frees the blocks a thread of the
 * round before left in its hand-off slot (a block made by one thread, freed
 * by another that did not exist yet when it was made) and exits with one
 * block of its own still live in its slot; thread 0 of each round also keeps
 * one block for good (a leak of known size).  The main thread frees what the
 * last round left.
 *
 * The threads run on stacks of this program (pthread_attr_setstack): glibc
 * then neither caches stacks nor keeps their TLS vectors, so that the
 * allocations glibc makes per thread (the DTV, one calloc freed when the
 * thread is gone) are the same in every run and cancel against the baseline:
 * the ledger is exact.  With "cached" before ROUNDS glibc makes the stacks
 * (256 KiB each, so that all 32 fit its cache of stacks): the first round's
 * are kept with their DTVs and every later round takes them again, the same
 * in the baseline (the threads of a round wait for each other before they
 * exit, so that no stack is taken again within a round).  After each round the main thread waits until the
 * kernel says the detached threads are gone (/proc/self/status), so that a
 * detached thread's last free is never in flight at exit.
 *
 * Prints "threads N" (created) and the LEDGER.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include "tp_common.h"

#define W          16
#define BLOCKS     24
#define STACK_SIZE (256 * 1024)

static int baseline;
static void *handoff[2][2 * W]; /* by round parity */
static size_t handoff_size[2][2 * W];
static int detached_done;
static pthread_barrier_t all_started;

struct job {
	int round, index;
};

static struct job jobs[2 * W];

static void *
worker(void *arg)
{
	struct job *j = arg;
	int i = j->index;
	if (baseline)
		goto out;
	int cur = j->round & 1, prev = cur ^ 1;
	void *mine[BLOCKS];
	size_t sz[BLOCKS];
	for (int k = 0; k < BLOCKS; k++) {
		size_t n = 8 + (size_t)((j->round * 37 + i * 101 + k * 13) % 1500);
		if (k % 3 == 1) {
			mine[k] = calloc(1, n);
			TP_CHECK(mine[k] != NULL && tp_all_zero(mine[k], n), "calloc");
		} else {
			mine[k] = malloc(n);
			TP_CHECK(mine[k] != NULL, "malloc");
		}
		sz[k] = n;
		tp_l_alloc_mt((long long)n);
		if (k % 5 == 4) {
			size_t m = n * 2 + 1;
			void *q = realloc(mine[k], m);
			TP_CHECK(q != NULL, "realloc");
			tp_l_realloc_mt((long long)n, (long long)m);
			mine[k] = q;
			sz[k] = m;
		}
	}
	/* the block a thread of the round before left here */
	if (j->round > 0 && handoff[prev][i] != NULL) {
		free(handoff[prev][i]);
		tp_l_free_mt((long long)handoff_size[prev][i]);
		handoff[prev][i] = NULL;
	}
	for (int k = 1; k < BLOCKS; k++) {
		free(mine[k]);
		tp_l_free_mt((long long)sz[k]);
	}
	/* exits with mine[0] live: a thread of the next round frees it */
	handoff[cur][i] = mine[0];
	handoff_size[cur][i] = sz[0];
	if (i == 0) {
		size_t n = 3000 + (size_t)j->round;
		void *p = malloc(n);
		TP_CHECK(p != NULL, "malloc");
		TP_KEEP(p);
		tp_l_alloc_mt((long long)n);
	}
out:
	pthread_barrier_wait(&all_started);
	if (i >= W)
		__atomic_add_fetch(&detached_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Threads of this process the kernel still has, -1 when unknown. */
static int
kernel_threads(void)
{
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *t = strstr(buf, "\nThreads:");
	return t == NULL ? -1 : atoi(t + 9);
}

int
main(int argc, char **argv)
{
	baseline = tp_is_baseline(argc, argv);
	int a = baseline ? 2 : 1;
	int cached = argc > a && strcmp(argv[a], "cached") == 0;
	int rounds = argc > a + cached ? atoi(argv[a + cached]) : 0;
	TP_CHECK(rounds > 0, "usage: tp_thread_churn [baseline] [cached] ROUNDS");
	tp_ledger.peak_unknown = 1;
	char *stacks = mmap(NULL, (size_t)2 * W * STACK_SIZE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	TP_CHECK(stacks != MAP_FAILED, "mmap");
	long created = 0;
	TP_CHECK(pthread_barrier_init(&all_started, NULL, 2 * W) == 0, "pthread_barrier_init");
	for (int r = 0; r < rounds; r++) {
		pthread_t th[W];
		__atomic_store_n(&detached_done, 0, __ATOMIC_RELAXED);
		for (int i = 0; i < 2 * W; i++) {
			pthread_attr_t attr;
			pthread_attr_init(&attr);
			if (cached)
				TP_CHECK(pthread_attr_setstacksize(&attr, STACK_SIZE) == 0, "pthread_attr_setstacksize");
			else
				TP_CHECK(pthread_attr_setstack(&attr, stacks + (size_t)i * STACK_SIZE, STACK_SIZE) == 0,
				         "pthread_attr_setstack");
			if (i >= W)
				pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
			jobs[i].round = r;
			jobs[i].index = i;
			pthread_t t;
			TP_CHECK(pthread_create(&t, &attr, worker, &jobs[i]) == 0, "pthread_create");
			pthread_attr_destroy(&attr);
			if (i < W)
				th[i] = t;
			created++;
		}
		for (int i = 0; i < W; i++)
			TP_CHECK(pthread_join(th[i], NULL) == 0, "pthread_join");
		/* The detached threads: done, then gone (their stacks are used again next round). */
		for (long spins = 0; kernel_threads() != 1; spins++) {
			TP_CHECK(spins < 200000, "detached threads never ended (%d done, %d threads)",
			         __atomic_load_n(&detached_done, __ATOMIC_ACQUIRE), kernel_threads());
			struct timespec ts = { 0, 50000 };
			nanosleep(&ts, NULL);
		}
		TP_CHECK(__atomic_load_n(&detached_done, __ATOMIC_ACQUIRE) == W, "detached threads");
	}
	if (baseline)
		return 0;
	for (int p = 0; p < 2; p++)
		for (int i = 0; i < 2 * W; i++)
			if (handoff[p][i] != NULL) {
				free(handoff[p][i]);
				tp_l_free_mt((long long)handoff_size[p][i]);
			}
	tp_printf(2, "threads %ld\n", created);
	tp_out("thread churn done\n");
	tp_l_print();
	return 0;
}
