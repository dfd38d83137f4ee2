/* SPDX-License-Identifier: MIT */
/*
 * Out-of-memory passes through unchanged.  Run with FAKECUDA_OOM_AFTER=3:
 * the fake driver fails every allocation after the first three.
 *
 *   runtime (-lcudart), device 0: cudaMalloc 1000 and 2000 succeed (leaked),
 *   the driver: cuMemAlloc 3000 succeeds (leaked); then
 *   cudaMalloc 4000 -> cudaErrorMemoryAllocation (2), cudaGetLastError says 2,
 *   cuMemAlloc 5000 -> CUDA_ERROR_OUT_OF_MEMORY (2),
 *   cudaMallocHost, cudaMallocManaged, cudaMallocAsync -> 2,
 *   cuMemCreate -> 2; frees still work: cudaFree of the first block.
 * Without FAKECUDA_OOM_AFTER (or with a larger one) it says so and exits 2.
 * Prints "cudaMalloc -> N" style lines, the ledger and DONE.
 */
#include "fake_cuda.h"

#include "tc_common.h"

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	const char *n = getenv("FAKECUDA_OOM_AFTER");
	if (!n || strcmp(n, "3") != 0) {
		tp_printf(2, "tc_oom: run with FAKECUDA_OOM_AFTER=3\n");
		return 2;
	}
	TC_OK(cudaSetDevice(0));
	void *a = NULL, *b = NULL, *c = NULL;
	TC_OK(cudaMalloc(&a, 1000));
	tc_alloc(TC_DEV0, 1000);
	TC_OK(cudaMalloc(&b, 2000));
	tc_alloc(TC_DEV0, 2000);
	CUdeviceptr d;
	TC_OK(cuMemAlloc(&d, 3000));
	tc_alloc(TC_DEV0, 3000);

	cudaError_t e = cudaMalloc(&c, 4000);
	tp_out("cudaMalloc -> %d\n", (int)e);
	TC_EXPECT(cudaErrorMemoryAllocation, e);
	TC_EXPECT(cudaErrorMemoryAllocation, cudaGetLastError());
	TC_EXPECT(cudaSuccess, cudaGetLastError());
	CUresult r = cuMemAlloc(&d, 5000);
	tp_out("cuMemAlloc -> %d\n", (int)r);
	TC_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, r);
	e = cudaMallocHost(&c, 100);
	tp_out("cudaMallocHost -> %d\n", (int)e);
	TC_EXPECT(cudaErrorMemoryAllocation, e);
	e = cudaMallocManaged(&c, 100, cudaMemAttachGlobal);
	tp_out("cudaMallocManaged -> %d\n", (int)e);
	TC_EXPECT(cudaErrorMemoryAllocation, e);
	e = cudaMallocAsync(&c, 100, 0);
	tp_out("cudaMallocAsync -> %d\n", (int)e);
	TC_EXPECT(cudaErrorMemoryAllocation, e);
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CUmemGenericAllocationHandle h;
	r = cuMemCreate(&h, 2 << 20, &prop, 0);
	tp_out("cuMemCreate -> %d\n", (int)r);
	TC_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, r);
	TC_OK(cudaFree(a));
	tc_free(TC_DEV0, 1000);
	TP_KEEP(b);
	tc_print();
	tp_out("DONE\n");
	return 0;
}
