/* SPDX-License-Identifier: MIT */
/*
 * TFALLOC_CUDA_LIMIT: run with TFALLOC_CUDA_LIMIT=0:3M,1:1M,host:8K.  Each
 * call prints "name size -> result"; the test compares them with what the
 * limit allows (2: CUDA_ERROR_OUT_OF_MEMORY / cudaErrorMemoryAllocation).
 *
 *   cuda:0  cuMemAlloc 2M -> 0, cuMemAlloc 2M -> 2, cudaMalloc 1M -> 0,
 *           cudaMalloc 1 -> 2, cuMemFree(first) -> 0, cuMemAlloc 2M -> 0
 *   cuda:1  cudaMalloc 2M -> 2, cudaMalloc 1M -> 0
 *   host    cudaMallocHost 8K -> 0, cuMemAllocHost 1 -> 2
 */
#include <stdio.h>

#include "fake_cuda.h"

#define MiB (1u << 20)

int
main(void)
{
	CUdeviceptr a = 0, b = 0, c = 0;
	void *d = NULL, *e = NULL, *f = NULL, *g = NULL, *h = NULL;

	printf("cudaSetDevice 0 -> %d\n", (int)cudaSetDevice(0));
	printf("cudaFree 0 -> %d\n", (int)cudaFree(NULL));
	printf("cuMemAlloc %u -> %d\n", 2 * MiB, (int)cuMemAlloc(&a, 2 * MiB));
	printf("cuMemAlloc %u -> %d\n", 2 * MiB, (int)cuMemAlloc(&b, 2 * MiB));
	printf("cudaMalloc %u -> %d\n", MiB, (int)cudaMalloc(&d, MiB));
	printf("cudaMalloc 1 -> %d\n", (int)cudaMalloc(&e, 1));
	printf("cuMemFree -> %d\n", (int)cuMemFree(a));
	printf("cuMemAlloc %u -> %d\n", 2 * MiB, (int)cuMemAlloc(&c, 2 * MiB));
	printf("cudaSetDevice 1 -> %d\n", (int)cudaSetDevice(1));
	printf("cudaMalloc %u -> %d\n", 2 * MiB, (int)cudaMalloc(&f, 2 * MiB));
	printf("cudaMalloc %u -> %d\n", MiB, (int)cudaMalloc(&f, MiB));
	printf("cudaMallocHost 8192 -> %d\n", (int)cudaMallocHost(&g, 8192));
	printf("cuMemAllocHost 1 -> %d\n", (int)cuMemAllocHost(&h, 1));
	printf("DONE\n");
	return 0;
}
