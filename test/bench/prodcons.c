/* SPDX-License-Identifier: MIT */
/*
 * prodcons: a producer/consumer pair, as in xmalloc-test.  The producer
 * thread allocates messages of random sizes (32 bytes to 8 KiB, uniform in the
 * logarithm), writes a header into each and passes them in batches through a
 * bounded queue to the consumer thread, which reads and frees them: every
 * free is a cross-thread free.  Prints the consumer's checksum (messages
 * arrive in order, so it does not depend on scheduling) and the throughput in
 * messages per second.
 * usage: prodcons [MESSAGES]   (default 4000000)
 */
#include <pthread.h>
#include <string.h>

#include "bench_common.h"

#define BATCH 64
#define QUEUE 16 /* batches */

typedef struct {
	uint64_t seq;
	uint64_t size;
} header_t;

static struct {
	pthread_mutex_t lock;
	pthread_cond_t not_empty, not_full;
	header_t *batch[QUEUE][BATCH];
	int count[QUEUE];
	int head, tail, used;
} q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
       {{0}}, {0}, 0, 0, 0};

static long messages;

static void
push(header_t **items, int n)
{
	pthread_mutex_lock(&q.lock);
	while (q.used == QUEUE)
		pthread_cond_wait(&q.not_full, &q.lock);
	memcpy(q.batch[q.tail], items, (size_t)n * sizeof(items[0]));
	q.count[q.tail] = n;
	q.tail = (q.tail + 1) % QUEUE;
	q.used++;
	pthread_cond_signal(&q.not_empty);
	pthread_mutex_unlock(&q.lock);
}

/* Copies one batch out; returns its length (0: end of stream). */
static int
pop(header_t **items)
{
	pthread_mutex_lock(&q.lock);
	while (q.used == 0)
		pthread_cond_wait(&q.not_empty, &q.lock);
	int n = q.count[q.head];
	memcpy(items, q.batch[q.head], (size_t)n * sizeof(items[0]));
	q.head = (q.head + 1) % QUEUE;
	q.used--;
	pthread_cond_signal(&q.not_full);
	pthread_mutex_unlock(&q.lock);
	return n;
}

static void *
producer(void *arg)
{
	(void)arg;
	uint64_t rng = 1;
	header_t *items[BATCH];
	int n = 0;
	for (long i = 0; i < messages; i++) {
		size_t size = bench_log_size(&rng, 32, 8192);
		header_t *m = bench_xmalloc(size);
		m->seq = (uint64_t)i;
		m->size = size;
		((unsigned char *)m)[size - 1] = (unsigned char)i;
		items[n++] = m;
		if (n == BATCH) {
			push(items, n);
			n = 0;
		}
	}
	if (n > 0)
		push(items, n);
	push(items, 0);
	return NULL;
}

static void *
consumer(void *arg)
{
	uint64_t *sum = arg;
	header_t *items[BATCH];
	int n;
	while ((n = pop(items)) > 0) {
		for (int k = 0; k < n; k++) {
			header_t *m = items[k];
			*sum = bench_mix(*sum, m->seq);
			*sum = bench_mix(*sum, m->size + ((unsigned char *)m)[m->size - 1]);
			free(m);
		}
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	messages = bench_arg(argc, argv, 1, 4000000);
	uint64_t sum = 0;
	pthread_t tp, tc;
	double t0 = bench_now();
	if (pthread_create(&tc, NULL, consumer, &sum) != 0 ||
	    pthread_create(&tp, NULL, producer, NULL) != 0) {
		fprintf(stderr, "pthread_create failed\n");
		return 1;
	}
	pthread_join(tp, NULL);
	pthread_join(tc, NULL);
	double dt = bench_now() - t0;
	printf("messages %ld\n", messages);
	printf("CHECKSUM %016" PRIx64 "\n", sum);
	printf("THROUGHPUT %.0f\n", (double)messages / dt);
	return 0;
}
