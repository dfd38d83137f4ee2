/* SPDX-License-Identifier: MIT */
/*
 * 4 threads, each on device (thread % 2) through the runtime (-lcudart):
 * 200 rounds of cudaMalloc(4096 * (t + 1)) + cudaFree and cudaMallocAsync(512)
 * on the thread's own stream + cudaFreeAsync; then each leaks
 * cudaMalloc(1000 * (t + 1)) on its device and cudaMallocHost(64 * (t + 1)).
 * The ledger has no peak (threads).
 */
#include <pthread.h>

#include "fake_cuda.h"

#include "tc_common.h"

#define THREADS 4
#define ROUNDS 200

static void *
worker(void *arg)
{
	int t = (int)(intptr_t)arg, dev = t % 2;
	TC_OK(cudaSetDevice(dev));
	cudaStream_t s;
	TC_OK(cudaStreamCreate(&s));
	for (int i = 0; i < ROUNDS; i++) {
		void *p = NULL, *q = NULL;
		TC_OK(cudaMalloc(&p, 4096 * (size_t)(t + 1)));
		tc_alloc_mt(dev, 4096 * (t + 1));
		TC_OK(cudaMallocAsync(&q, 512, s));
		tc_alloc_mt(dev, 512);
		TC_OK(cudaFree(p));
		tc_free_mt(dev, 4096 * (t + 1));
		TC_OK(cudaFreeAsync(q, s));
		tc_free_mt(dev, 512);
	}
	TC_OK(cudaStreamSynchronize(s));
	TC_OK(cudaStreamDestroy(s));
	void *leak = NULL, *host = NULL;
	TC_OK(cudaMalloc(&leak, 1000 * (size_t)(t + 1)));
	tc_alloc_mt(dev, 1000 * (t + 1));
	TC_OK(cudaMallocHost(&host, 64 * (size_t)(t + 1)));
	tc_alloc_mt(TC_HOST, 64 * (t + 1));
	int d = -1;
	TC_OK(cudaGetDevice(&d));
	TP_CHECK(d == dev, "thread %d on device %d", t, d);
	return leak;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	tc_threaded();
	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++)
		TP_CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0, "pthread_create");
	for (int t = 0; t < THREADS; t++) {
		void *r;
		TP_CHECK(pthread_join(th[t], &r) == 0, "pthread_join");
		TP_KEEP(r);
	}
	tc_print();
	tp_out("DONE\n");
	return 0;
}
