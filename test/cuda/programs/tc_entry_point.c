/* SPDX-License-Identifier: MIT */
/*
 * Driver calls fetched through the runtime, as PyTorch's c10::cuda::DriverAPI
 * does: cudaGetDriverEntryPointByVersion (and the deprecated
 * cudaGetDriverEntryPoint), linked against libcudart.so.13 (-lcudart).
 *
 *   cuda:0   cuMemAlloc@12000 3 MiB, leaked; 4096 freed by cuMemFree@12000;
 *            cuMemAllocAsync (cudaGetDriverEntryPoint, per-thread flag) 5000
 *            on the per-thread stream, freed by cuMemFreeAsync
 *            cuMemCreate@12000 2 MiB at device 0, never released (leaked)
 *   cuda:1   cuMemCreate@12000 2 MiB at device 1 (device 0 current), mapped,
 *            unmapped, released by cuMemRelease@12000
 *
 * Also: cuCtxGetDevice@13000 is the 2-argument cuCtxGetDevice_v2 (called so),
 * an unknown name gives status SYMBOL_NOT_FOUND with cudaSuccess, and
 * cuMemCreate@10000 gives VERSION_NOT_SUFFICIENT.
 */
#include "fake_cuda.h"

#include "tc_common.h"

#define MiB (1024 * 1024)

static void *
entry(const char *name, unsigned version)
{
	void *fn = NULL;
	cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
	TC_OK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &st));
	TP_CHECK(st == cudaDriverEntryPointSuccess && fn, "%s@%u: status %d", name, version,
	         (int)st);
	return fn;
}

typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*vafree_fn)(CUdeviceptr, size_t);

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	TC_OK(cudaSetDevice(0));
	PFN_cuMemAlloc_v3020 alloc;
	PFN_cuMemFree_v3020 mfree;
	PFN_cuMemCreate_v10020 create;
	PFN_cuMemRelease_v10020 release;
	PFN_cuCtxGetDevice_v13000 get_device;
	reserve_fn reserve;
	map_fn map;
	unmap_fn unmap;
	vafree_fn vafree;
	*(void **)&alloc = entry("cuMemAlloc", 12000);
	*(void **)&mfree = entry("cuMemFree", 12000);
	*(void **)&create = entry("cuMemCreate", 12000);
	*(void **)&release = entry("cuMemRelease", 12000);
	*(void **)&get_device = entry("cuCtxGetDevice", 13000);
	*(void **)&reserve = entry("cuMemAddressReserve", 12000);
	*(void **)&map = entry("cuMemMap", 12000);
	*(void **)&unmap = entry("cuMemUnmap", 12000);
	*(void **)&vafree = entry("cuMemAddressFree", 12000);

	CUdevice d = -1;
	TC_OK(get_device(&d, (CUcontext)0));
	TP_CHECK(d == 0, "cuCtxGetDevice_v2 says %d", d);

	void *fn = (void *)1;
	cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSuccess;
	TC_OK(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, 0, &st));
	TP_CHECK(st == cudaDriverEntryPointSymbolNotFound && !fn, "unknown name: status %d",
	         (int)st);
	TC_OK(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 10000, 0, &st));
	TP_CHECK(st == cudaDriverEntryPointVersionNotSufficent && !fn, "cuMemCreate@10000: %d",
	         (int)st);

	/* cuda:0 */
	CUdeviceptr a0, a1;
	TC_OK(alloc(&a0, 3 * MiB));
	tc_alloc(TC_DEV0, 3 * MiB);
	TC_OK(alloc(&a1, 4096));
	tc_alloc(TC_DEV0, 4096);
	TC_OK(mfree(a1));
	tc_free(TC_DEV0, 4096);

	PFN_cuMemAllocAsync_v11020 alloc_async;
	PFN_cuMemFreeAsync_v11020 free_async;
	TC_OK(cudaGetDriverEntryPoint("cuMemAllocAsync", &fn, cudaEnablePerThreadDefaultStream,
	                              &st));
	TP_CHECK(fn && st == cudaDriverEntryPointSuccess, "cuMemAllocAsync entry point");
	*(void **)&alloc_async = fn;
	TC_OK(cudaGetDriverEntryPoint("cuMemFreeAsync", &fn, cudaEnablePerThreadDefaultStream,
	                              &st));
	TP_CHECK(fn && st == cudaDriverEntryPointSuccess, "cuMemFreeAsync entry point");
	*(void **)&free_async = fn;
	CUdeviceptr c0;
	TC_OK(alloc_async(&c0, 5000, CU_STREAM_PER_THREAD));
	tc_alloc(TC_DEV0, 5000);
	TC_OK(free_async(c0, CU_STREAM_PER_THREAD));
	tc_free(TC_DEV0, 5000);

	/* VMM: device 1 by its location, device 0 current */
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 1;
	CUmemGenericAllocationHandle h1, h0;
	TC_OK(create(&h1, 2 * MiB, &prop, 0));
	tc_alloc(TC_DEV1, 2 * MiB);
	CUdeviceptr va;
	TC_OK(reserve(&va, 2 * MiB, 0, 0, 0));
	TC_OK(map(va, 2 * MiB, 0, h1, 0));
	TC_OK(unmap(va, 2 * MiB));
	TC_OK(vafree(va, 2 * MiB));
	TC_OK(release(h1));
	tc_free(TC_DEV1, 2 * MiB);
	prop.location.id = 0;
	TC_OK(create(&h0, 2 * MiB, &prop, 0));
	tc_alloc(TC_DEV0, 2 * MiB);

	TP_KEEP(a0);
	tc_print();
	tp_out("DONE\n");
	return 0;
}
