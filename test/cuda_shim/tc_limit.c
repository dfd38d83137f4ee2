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
 *   a resource "jobs/train" with a 1M limit, current (scope): managed
 *           memory (no device limit) cuMemAllocManaged 700K -> 0, 400K -> 2;
 *           out of the scope 400K -> 0; the control API's figures:
 *           "resource cuda_managed in_use N allocs N", "device cuda:0 in_use
 *           N limit N", "pointer cuda_managed N resource yes|no"
 */
#include <stdio.h>

#include "fake_cuda.h"
#include "preload/tfalloc.h"

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
	tfalloc_resource_handle_t job;
	tfalloc_stats_t st;
	tfalloc_pointer_info_t pi;
	CUdeviceptr m1 = 0, m2 = 0, m3 = 0;
	if (tfalloc_resource_create("jobs", "scope", "train", "a training job", &job) == 0
	    && tfalloc_resource_set_limit(&job, MiB) == 0 && tfalloc_scope_enter_handle(&job) == 0) {
		printf("cuMemAllocManaged 716800 -> %d\n", (int)cuMemAllocManaged(&m1, 700 << 10, CU_MEM_ATTACH_GLOBAL));
		printf("cuMemAllocManaged 409600 -> %d\n", (int)cuMemAllocManaged(&m2, 400 << 10, CU_MEM_ATTACH_GLOBAL));
		tfalloc_scope_exit();
		printf("cuMemAllocManaged 409600 -> %d\n", (int)cuMemAllocManaged(&m3, 400 << 10, CU_MEM_ATTACH_GLOBAL));
		if (tfalloc_resource_stats(&job, "cuda_managed", &st) == 0)
			printf("resource cuda_managed in_use %llu allocs %llu\n",
			       (unsigned long long)st.bytes_in_use, (unsigned long long)st.num_allocs);
		if (tfalloc_device_stats("cuda:0", &st) == 0)
			printf("device cuda:0 in_use %llu limit %llu\n", (unsigned long long)st.bytes_in_use,
			       (unsigned long long)st.bytes_limit);
		if (tfalloc_pointer_info((void *)(uintptr_t)m1, &pi) == 0)
			printf("pointer %s %llu resource %s\n", pi.device, (unsigned long long)pi.requested_size,
			       pi.resource_id != 0 ? "yes" : "no");
	} else {
		printf("no control API\n");
	}
	printf("DONE\n");
	return 0;
}
