/* SPDX-License-Identifier: MIT */
/*
 * A default nvcc build: the runtime is NVIDIA's static cudart, linked in.
 * Against the fake libcuda.so.1 it runs its real lookup protocol (dlopen,
 * one dlsym of cuGetProcAddress_v2, ~440 cuGetProcAddress_v2 lookups, which
 * FAKECUDA_LOG records) and then stops: it demands a private export table
 * (cuGetExportTable) the double does not have, so every call fails.  With
 * the double's default answer (CUDA_ERROR_NOT_FOUND) the calls return 500;
 * when cuGetProcAddress does not offer cuGetExportTable at all
 * (FAKECUDA_GPA_MODE=null FAKECUDA_GPA_NAMES=cuGetExportTable) they return 36
 * (cudaErrorCallRequiresNewerDriver).  Both are expected.
 *
 * Prints "cudaMalloc -> N", "cudaMallocAsync -> N", "cudaMallocHost -> N",
 * then "DONE"; exits 0 whatever the runtime answered.
 */
#include <cuda_runtime.h>

#include "tc_common.h"

__global__ void
touch(int *p)
{
	p[threadIdx.x] = 1;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	void *p = NULL, *q = NULL, *h = NULL;
	cudaError_t e = cudaMalloc(&p, 1048576);
	tp_out("cudaMalloc -> %d\n", (int)e);
	if (e == cudaSuccess) {
		touch<<<1, 32>>>((int *)p);
		cudaFree(p);
	}
	e = cudaMallocAsync(&q, 4096, 0);
	tp_out("cudaMallocAsync -> %d\n", (int)e);
	if (e == cudaSuccess)
		cudaFreeAsync(q, 0);
	e = cudaMallocHost(&h, 4096);
	tp_out("cudaMallocHost -> %d\n", (int)e);
	if (e == cudaSuccess)
		cudaFreeHost(h);
	tp_out("DONE\n");
	return 0;
}
