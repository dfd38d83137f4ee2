/* SPDX-License-Identifier: MIT */
/*
 * churn: multi-threaded churn whose throughput is the figure (larson-like).
 * T threads each keep an array of slots and, for a fixed number of
 * operations, free a random slot and allocate a random small size (16 to 512
 * bytes, uniform in the logarithm) into it.  Every 32nd operation the old
 * block is handed to the next thread instead (through a mailbox), which frees
 * it: part of the frees are cross-thread.  Prints the checksum (sum of the
 * sizes of every block freed, and each thread's own sequence: independent of
 * scheduling) and the throughput in operations per second.
 * usage: churn [OPS_PER_THREAD] [THREADS]   (default 3000000 and 2)
 */
#include <pthread.h>
#include <string.h>

#include "bench_common.h"

#define SLOTS     1024
#define HAND_OFF  32       /* every HAND_OFF-th operation hands a block over */
#define DRAIN     256      /* a thread empties its mailbox this often */
#define MAILBOX   (1 << 14)
#define MAX_THR   64

typedef struct { /* 8 bytes: the smallest block is 16 */
	uint32_t size;
	uint32_t seq;
} block_t;

typedef struct {
	pthread_mutex_t lock;
	block_t *item[MAILBOX];
	int n;
} mailbox_t;

typedef struct {
	int id;
	uint64_t freed_bytes; /* sum of the sizes of every block this thread freed */
	uint64_t own;         /* mix of this thread's own sequence */
	double start, end;    /* when this thread's operations began and ended */
	block_t *drained[MAILBOX];
} worker_t;

static mailbox_t box[MAX_THR];
static worker_t *worker[MAX_THR];
static int threads;
static long ops;
static pthread_barrier_t go;

static void
release(worker_t *w, block_t *b)
{
	w->freed_bytes += b->size + (((unsigned char *)b)[b->size - 1]);
	free(b);
}

static void
drain(worker_t *w)
{
	mailbox_t *m = &box[w->id];
	pthread_mutex_lock(&m->lock);
	int n = m->n;
	memcpy(w->drained, m->item, (size_t)n * sizeof(m->item[0]));
	m->n = 0;
	pthread_mutex_unlock(&m->lock);
	for (int i = 0; i < n; i++)
		release(w, w->drained[i]);
}

static void
hand_over(worker_t *w, block_t *b)
{
	mailbox_t *m = &box[(w->id + 1) % threads];
	pthread_mutex_lock(&m->lock);
	if (m->n < MAILBOX) {
		m->item[m->n++] = b;
		b = NULL;
	}
	pthread_mutex_unlock(&m->lock);
	if (b != NULL) /* the receiver is behind: free it here */
		release(w, b);
}

static void *
run(void *arg)
{
	worker_t *w = arg;
	uint64_t rng = 1000 + (uint64_t)w->id;
	block_t *slot[SLOTS] = {0};

	pthread_barrier_wait(&go);
	w->start = bench_now();
	for (long op = 0; op < ops; op++) {
		int i = (int)(bench_rand(&rng) % SLOTS);
		if (slot[i] != NULL) {
			if (op % HAND_OFF == 0 && threads > 1)
				hand_over(w, slot[i]);
			else
				release(w, slot[i]);
		}
		size_t size = bench_log_size(&rng, 16, 512);
		block_t *b = bench_xmalloc(size);
		b->size = (uint32_t)size;
		b->seq = (uint32_t)op;
		((unsigned char *)b)[size - 1] = (unsigned char)op;
		slot[i] = b;
		w->own = bench_mix(w->own, size);
		if (op % DRAIN == 0)
			drain(w);
	}
	for (int i = 0; i < SLOTS; i++)
		if (slot[i] != NULL)
			release(w, slot[i]);
	w->end = bench_now();
	return NULL;
}

int
main(int argc, char **argv)
{
	ops = bench_arg(argc, argv, 1, 3000000);
	threads = (int)bench_arg(argc, argv, 2, 2);
	if (threads > MAX_THR) {
		fprintf(stderr, "churn: at most %d threads\n", MAX_THR);
		return 2;
	}
	pthread_t tid[MAX_THR];
	pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
	for (int t = 0; t < threads; t++) {
		pthread_mutex_init(&box[t].lock, NULL);
		worker[t] = bench_xmalloc(sizeof(worker_t));
		worker[t]->id = t;
		worker[t]->freed_bytes = 0;
		worker[t]->own = 0;
		if (pthread_create(&tid[t], NULL, run, worker[t]) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	}
	pthread_barrier_wait(&go);
	for (int t = 0; t < threads; t++)
		pthread_join(tid[t], NULL);
	/* From the first thread's start to the last one's end, measured by the
	 * workers: the main thread may run late after the barrier (valgrind
	 * runs one thread at a time). */
	double t0 = worker[0]->start, t1 = worker[0]->end;
	for (int t = 1; t < threads; t++) {
		t0 = worker[t]->start < t0 ? worker[t]->start : t0;
		t1 = worker[t]->end > t1 ? worker[t]->end : t1;
	}
	double dt = t1 - t0;

	uint64_t freed = 0, sum = 0;
	for (int t = 0; t < threads; t++) {
		drain(worker[t]); /* what arrived after its owner stopped */
		freed += worker[t]->freed_bytes;
		sum = bench_mix(sum, worker[t]->own);
	}
	sum = bench_mix(sum, freed);
	for (int t = 0; t < threads; t++)
		free(worker[t]);
	printf("threads %d, operations %ld\n", threads, ops * threads);
	printf("CHECKSUM %016" PRIx64 "\n", sum);
	printf("THROUGHPUT %.0f\n", (double)(ops * threads) / dt);
	return 0;
}
