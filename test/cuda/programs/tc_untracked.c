/* SPDX-License-Identifier: MIT */
/*
 * Frees of pointers a tracker never saw allocated, which the driver knows:
 * they must be forwarded and return the driver's result.  Run with
 * FAKECUDA_GPA_MODE=anonymous FAKECUDA_GPA_NAMES=cuMemAlloc,cuMemAllocAsync:
 * cuGetProcAddress then hands out anonymous trampolines for those two, which
 * a shim cannot identify (and, failing open, passes through untracked).
 *
 *   device 0: cuMemAlloc@3020 (anonymous) 1 MiB, freed by the exported
 *             cuMemFree_v2 (-lcuda) -> 0
 *   device 1: cuMemAllocAsync@11020 (anonymous) 4096 on the NULL stream,
 *             freed by the exported cuMemFreeAsync -> 0
 *   a second free of each -> CUDA_ERROR_INVALID_VALUE (1)
 *
 * Prints "untracked free -> N" lines, the ledger (all zeros: nothing was
 * allocated through an entry point a tracker can see) and DONE.  Without the
 * environment it says so and exits 2.
 */
#include "fake_cuda.h"

#include "tc_common.h"

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	const char *mode = getenv("FAKECUDA_GPA_MODE");
	const char *names = getenv("FAKECUDA_GPA_NAMES");
	if (!mode || strcmp(mode, "anonymous") != 0 || !names ||
	    strcmp(names, "cuMemAlloc,cuMemAllocAsync") != 0) {
		tp_printf(2, "tc_untracked: run with FAKECUDA_GPA_MODE=anonymous "
		             "FAKECUDA_GPA_NAMES=cuMemAlloc,cuMemAllocAsync\n");
		return 2;
	}
	TC_OK(cuInit(0));
	CUcontext c0, c1;
	TC_OK(cuDevicePrimaryCtxRetain(&c0, 0));
	TC_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	PFN_cuMemAlloc_v3020 alloc = NULL;
	PFN_cuMemAllocAsync_v11020 alloc_async = NULL;
	CUdriverProcAddressQueryResult st;
	TC_OK(cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc, 3020, 0, &st));
	TC_OK(cuGetProcAddress_v2("cuMemAllocAsync", (void **)&alloc_async, 11020, 0, &st));
	TP_CHECK(alloc && alloc_async, "lookups");

	TC_OK(cuCtxSetCurrent(c0));
	CUdeviceptr a, b;
	TC_OK(alloc(&a, 1 << 20));
	CUresult r = cuMemFree(a);
	tp_out("untracked free cuMemFree_v2 -> %d\n", r);
	TC_OK(r);
	TC_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFree(a));

	TC_OK(cuCtxSetCurrent(c1));
	TC_OK(alloc_async(&b, 4096, NULL));
	r = cuMemFreeAsync(b, NULL);
	tp_out("untracked free cuMemFreeAsync -> %d\n", r);
	TC_OK(r);
	TC_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFreeAsync(b, NULL));
	tc_print();
	tp_out("DONE\n");
	return 0;
}
