/* SPDX-License-Identifier: MIT */
/*
 * The runtime API as an nvcc program sees it (built with -cudart shared; the
 * same source with --default-stream per-thread is tc_runtime_ptds, whose
 * stream-ordered calls are the _ptsz ones).  Run against the doubles:
 * LD_LIBRARY_PATH=<doubles> makes it load the fake libcudart.so.13, which
 * dlopens the fake libcuda.so.1.
 *
 *   a kernel launch (it does not run on the doubles; the launch succeeds)
 *   cuda:0   cudaMalloc 1 MiB (leaked) and 64 KiB (freed): peak 1114112;
 *            cudaMallocPitch 1000 x 10 (pitch 1024 on the doubles), freed
 *   cuda:1   cudaMalloc 2 MiB, then, with device 0 current, cudaMallocAsync
 *            1 MiB on a stream of device 1 (charged to the stream's device):
 *            peak 3 MiB; both freed with device 0 current; from the default
 *            pool of device 1 8 KiB, freed; on the default stream of device 1
 *            4 KiB, freed; 12345 bytes leaked
 *   cuda_host     cudaMallocHost 4096 (freed), 8192 (leaked); cudaHostAlloc
 *                 100 portable (freed)
 *   cuda_managed  cudaMallocManaged 65536 (leaked), 1000 (freed)
 *
 * Prints its CUDA_LEDGER lines (tc_common.h) and "DONE".
 */
#include <cuda_runtime.h>

#include "tc_common.h"

__global__ void
fill(int *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = i;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	int n = 0;
	TC_OK(cudaGetDeviceCount(&n));
	TP_CHECK(n >= 2, "needs 2 devices, has %d", n);

	/* cuda:0 */
	TC_OK(cudaSetDevice(0));
	void *a0 = NULL, *a1 = NULL;
	TC_OK(cudaMalloc(&a0, 1048576));
	tc_alloc(TC_DEV0, 1048576);
	TC_OK(cudaMalloc(&a1, 65536));
	tc_alloc(TC_DEV0, 65536);
	fill<<<1, 256>>>((int *)a0, 256);
	TC_OK(cudaGetLastError());
	TC_OK(cudaDeviceSynchronize());
	TC_OK(cudaMemset(a1, 0x5a, 65536));
	unsigned char back[16];
	TC_OK(cudaMemcpy(back, a1, sizeof(back), cudaMemcpyDeviceToHost));
	TP_CHECK(back[0] == 0x5a && back[15] == 0x5a, "memset/memcpy");
	TC_OK(cudaFree(a1));
	tc_free(TC_DEV0, 65536);
	void *pitched = NULL;
	size_t pitch = 0;
	TC_OK(cudaMallocPitch(&pitched, &pitch, 1000, 10));
	TP_CHECK(pitch >= 1000, "pitch %zu", pitch);
	tc_alloc2(TC_DEV0, 1000 * 10, (long long)pitch * 10);
	TC_OK(cudaFree(pitched));
	tc_free2(TC_DEV0, 1000 * 10, (long long)pitch * 10);

	/* cuda:1, and a stream of device 1 used while device 0 is current */
	TC_OK(cudaSetDevice(1));
	cudaStream_t s1;
	TC_OK(cudaStreamCreate(&s1));
	void *b0 = NULL, *c0 = NULL, *d0 = NULL, *e0 = NULL, *b1 = NULL;
	TC_OK(cudaMalloc(&b0, 2097152));
	tc_alloc(TC_DEV1, 2097152);
	TC_OK(cudaSetDevice(0));
	TC_OK(cudaMallocAsync(&c0, 1048576, s1));
	tc_alloc(TC_DEV1, 1048576);
	TC_OK(cudaFreeAsync(c0, s1));
	tc_free(TC_DEV1, 1048576);
	TC_OK(cudaFree(b0));
	tc_free(TC_DEV1, 2097152);
	cudaMemPool_t pool1;
	TC_OK(cudaDeviceGetDefaultMemPool(&pool1, 1));
	TC_OK(cudaMallocFromPoolAsync(&d0, 8192, pool1, s1));
	tc_alloc(TC_DEV1, 8192);
	TC_OK(cudaFreeAsync(d0, s1));
	tc_free(TC_DEV1, 8192);
	TC_OK(cudaStreamSynchronize(s1));
	TC_OK(cudaSetDevice(1));
	TC_OK(cudaMallocAsync(&e0, 4096, 0));
	tc_alloc(TC_DEV1, 4096);
	TC_OK(cudaFreeAsync(e0, 0));
	tc_free(TC_DEV1, 4096);
	TC_OK(cudaMalloc(&b1, 12345));
	tc_alloc(TC_DEV1, 12345);
	TC_OK(cudaStreamDestroy(s1));

	/* pinned host memory */
	void *h0 = NULL, *h1 = NULL, *h2 = NULL;
	TC_OK(cudaMallocHost(&h0, 4096));
	tc_alloc(TC_HOST, 4096);
	TC_OK(cudaMallocHost(&h1, 8192));
	tc_alloc(TC_HOST, 8192);
	TC_OK(cudaHostAlloc(&h2, 100, cudaHostAllocPortable));
	tc_alloc(TC_HOST, 100);
	((char *)h2)[99] = 1;
	TC_OK(cudaFreeHost(h0));
	tc_free(TC_HOST, 4096);
	TC_OK(cudaFreeHost(h2));
	tc_free(TC_HOST, 100);

	/* managed memory */
	void *m0 = NULL, *m1 = NULL;
	TC_OK(cudaMallocManaged(&m0, 65536, cudaMemAttachGlobal));
	tc_alloc(TC_MANAGED, 65536);
	TC_OK(cudaMallocManaged(&m1, 1000, cudaMemAttachGlobal));
	tc_alloc(TC_MANAGED, 1000);
	TC_OK(cudaFree(m1));
	tc_free(TC_MANAGED, 1000);

	TP_KEEP(a0);
	TP_KEEP(b1);
	TP_KEEP(h1);
	TP_KEEP(m0);
	tc_print();
	tp_out("DONE\n");
	return 0;
}
