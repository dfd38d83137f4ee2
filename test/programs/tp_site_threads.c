/* SPDX-License-Identifier: MIT */
/*
 * tp_site_threads: THREADS threads allocate at the same 24 sites (24
 * functions, so 24 stacks shared by every thread) and at one site of 8 KiB
 * blocks kept RING at a time, freeing most at once and keeping every 10th block of the small
 * sites, then the main thread frees every 3rd kept block (a free by another
 * thread than the allocating one).  More sites than a thread's cache of
 * sites holds (core/sites.h), and the large site moves more than its flush
 * threshold each time.  Prints, per site, what the profile's site must say:
 *   SITE name num_allocs total_bytes bytes_in_use
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4
#define ROUNDS  300
#define SITES   24
#define KEEP    10
#define LARGE   (8 * 1024) /* a small block still (the shim's fast path); 12 live pass 64 KiB */
#define RING    12

static void *kept[THREADS][ROUNDS * SITES / KEEP + SITES];
static int nkept[THREADS];

#define SITE_FN(k) \
	static __attribute__((noinline)) void *site_##k(size_t n) { void *p = malloc(n); __asm__ volatile("" ::: "memory"); return p; }
SITE_FN(0) SITE_FN(1) SITE_FN(2) SITE_FN(3) SITE_FN(4) SITE_FN(5) SITE_FN(6) SITE_FN(7)
SITE_FN(8) SITE_FN(9) SITE_FN(10) SITE_FN(11) SITE_FN(12) SITE_FN(13) SITE_FN(14) SITE_FN(15)
SITE_FN(16) SITE_FN(17) SITE_FN(18) SITE_FN(19) SITE_FN(20) SITE_FN(21) SITE_FN(22) SITE_FN(23)
SITE_FN(large)

static void *(*const site[SITES])(size_t) = {
	site_0, site_1, site_2, site_3, site_4, site_5, site_6, site_7, site_8, site_9, site_10, site_11,
	site_12, site_13, site_14, site_15, site_16, site_17, site_18, site_19, site_20, site_21, site_22,
	site_23,
};

static size_t
size_of(int k)
{
	return (size_t)(k + 1) * 24;
}

static void *
worker(void *arg)
{
	int t = (int)(long)arg;
	long n = 0;
	char *ring[RING];

	for (int r = 0; r < ROUNDS; r++) {
		for (int k = 0; k < SITES; k++, n++) {
			char *p = site[k](size_of(k));
			if (p == NULL)
				abort();
			p[0] = (char)k;
			if (n % KEEP == 0)
				kept[t][nkept[t]++] = p;
			else
				free(p);
		}
		if (r >= RING)
			free(ring[r % RING]);
		ring[r % RING] = site_large(LARGE);
		if (ring[r % RING] == NULL)
			abort();
		ring[r % RING][LARGE - 1] = 1;
	}
	for (int i = 0; i < RING; i++)
		free(ring[i]);
	return NULL;
}

int
main(void)
{
	pthread_t th[THREADS];
	unsigned long allocs[SITES] = { 0 }, live[SITES] = { 0 };

	for (long t = 0; t < THREADS; t++)
		if (pthread_create(&th[t], NULL, worker, (void *)t) != 0)
			return 1;
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < THREADS; t++) {
		for (int i = 0; i < nkept[t]; i++) {
			int k = ((char *)kept[t][i])[0];
			if (i % 3 == 0)
				free(kept[t][i]);
			else
				live[k]++;
		}
	}
	for (int k = 0; k < SITES; k++) {
		allocs[k] = (unsigned long)THREADS * ROUNDS;
		printf("SITE site_%d %lu %lu %lu\n", k, allocs[k], allocs[k] * size_of(k), live[k] * size_of(k));
	}
	printf("SITE site_large %lu %lu 0\n", (unsigned long)THREADS * ROUNDS, (unsigned long)THREADS * ROUNDS * LARGE);
	return 0;
}
