/* SPDX-License-Identifier: MIT */
/*
 * The driver API as a program linked with -lcuda calls it, through cuda.h's
 * unversioned names (fake_cuda.h: cuMemAlloc is cuMemAlloc_v2, ...).
 *
 *   cuda:0   (primary context of device 0 current)
 *            cuMemAlloc 5 MiB, leaked
 *            cuMemAllocPitch 300 x 7, element 4 (pitch 512 on the doubles), freed
 *            from a pool of device 0 on a stream of device 1: 10000, freed
 *            cuMemCreate 2 MiB at location device 0, mapped, released: physical
 *            bytes live from cuMemCreate to cuMemRelease
 *   cuda:1   (a created context of device 1, pushed, then popped)
 *            cuMemAlloc 1 MiB, freed; a stream of device 1 is created
 *            with device 0 current again: cuMemCreate 2 MiB at location
 *            device 1 (charged by prop->location), reserved 4 MiB of VA,
 *            mapped, written, unmapped, released; cuMemAllocAsync 777 on the
 *            stream of device 1 (freed) and 4096 (leaked)
 *   cuda_host     cuMemAllocHost 5000 (freed), cuMemHostAlloc 6000 (leaked)
 *   cuda_managed  cuMemAllocManaged 3000 (leaked)
 *
 * Also checks what the double answers (cuMemGetInfo, cuPointerGetAttribute,
 * cuMemGetAddressRange) and that a free of an unknown pointer and a double
 * free return CUDA_ERROR_INVALID_VALUE (1).
 */
#include "fake_cuda.h"

#include "tc_common.h"

#define MiB (1024 * 1024)

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	TC_OK(cuInit(0));
	int n = 0, v = 0;
	TC_OK(cuDriverGetVersion(&v));
	TC_OK(cuDeviceGetCount(&n));
	TP_CHECK(n >= 2, "needs 2 devices, has %d", n);
	CUdevice dev0, dev1;
	TC_OK(cuDeviceGet(&dev0, 0));
	TC_OK(cuDeviceGet(&dev1, 1));
	CUcontext ctx0, ctx1;
	TC_OK(cuDevicePrimaryCtxRetain(&ctx0, dev0));
	TC_OK(cuCtxSetCurrent(ctx0));

	/* cuda:0 */
	CUdeviceptr a0, pitched;
	TC_OK(cuMemAlloc(&a0, 5 * MiB));
	tc_alloc(TC_DEV0, 5 * MiB);
	size_t pitch = 0;
	TC_OK(cuMemAllocPitch(&pitched, &pitch, 300, 7, 4));
	TP_CHECK(pitch >= 300, "pitch %zu", pitch);
	tc_alloc2(TC_DEV0, 300 * 7, (long long)pitch * 7);
	TC_OK(cuMemFree(pitched));
	tc_free2(TC_DEV0, 300 * 7, (long long)pitch * 7);
	size_t freeb = 0, total = 0;
	TC_OK(cuMemGetInfo(&freeb, &total));
	TP_CHECK(total - freeb == 5 * MiB, "cuMemGetInfo: %zu used", total - freeb);

	/* cuda:1 through a created context */
	TC_OK(cuCtxCreate(&ctx1, 0, dev1));
	CUdevice cur = -1;
	TC_OK(cuCtxGetDevice(&cur));
	TP_CHECK(cur == 1, "cuCtxCreate made device %d current", cur);
	CUdeviceptr b0;
	TC_OK(cuMemAlloc(&b0, 1 * MiB));
	tc_alloc(TC_DEV1, 1 * MiB);
	int ordinal = -1;
	TC_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, b0));
	TP_CHECK(ordinal == 1, "DEVICE_ORDINAL %d", ordinal);
	CUdeviceptr base = 0;
	size_t range = 0;
	TC_OK(cuMemGetAddressRange(&base, &range, b0 + 100));
	TP_CHECK(base == b0 && range == 1 * MiB, "cuMemGetAddressRange");
	TC_OK(cuMemFree(b0));
	tc_free(TC_DEV1, 1 * MiB);
	CUstream s1;
	TC_OK(cuStreamCreate(&s1, 0));
	CUcontext popped = NULL;
	TC_OK(cuCtxPopCurrent(&popped));
	TP_CHECK(popped == ctx1, "popped the wrong context");
	TC_OK(cuCtxGetDevice(&cur));
	TP_CHECK(cur == 0, "after pop, device %d", cur);
	TC_OK(cuStreamGetDevice(s1, &cur));
	TP_CHECK(cur == 1, "stream device %d", cur);

	/* errors pass through: unknown pointer, double free */
	TC_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFree((CUdeviceptr)0xdead0000));
	TC_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFree(b0));
	TC_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost((void *)0xdead0000));

	/* VMM on device 1 while device 0 is current: prop->location decides */
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 1;
	size_t gran = 0;
	TC_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	TP_CHECK(gran == 2 * MiB, "granularity %zu", gran);
	CUmemGenericAllocationHandle h1;
	TC_OK(cuMemCreate(&h1, 2 * MiB, &prop, 0));
	tc_alloc(TC_DEV1, 2 * MiB);
	CUdeviceptr va;
	TC_OK(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
	TC_OK(cuMemMap(va, 2 * MiB, 0, h1, 0));
	CUmemAccessDesc acc;
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = 1;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	TC_OK(cuMemSetAccess(va, 2 * MiB, &acc, 1));
	TC_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + 100));
	TP_CHECK(ordinal == 1, "VMM mapping on device %d", ordinal);
	TC_OK(cuMemGetAddressRange(&base, &range, va + 4096));
	TP_CHECK(base == va && range == 2 * MiB, "cuMemGetAddressRange of a mapping");
	tp_fill((void *)(uintptr_t)va, 4096, 3);
	TP_CHECK(tp_check_fill((void *)(uintptr_t)va, 4096, 3), "VMM memory");
	TC_OK(cuMemUnmap(va, 2 * MiB));
	TC_OK(cuMemRelease(h1));
	tc_free(TC_DEV1, 2 * MiB);

	/* VMM on device 0: the handle is released while still mapped */
	CUmemGenericAllocationHandle h0;
	prop.location.id = 0;
	TC_OK(cuMemCreate(&h0, 2 * MiB, &prop, 0));
	tc_alloc(TC_DEV0, 2 * MiB);
	TC_OK(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h0, 0));
	acc.location.id = 0;
	TC_OK(cuMemSetAccess(va + 2 * MiB, 2 * MiB, &acc, 1));
	TC_OK(cuMemRelease(h0));
	tc_free(TC_DEV0, 2 * MiB);
	TC_OK(cuMemUnmap(va + 2 * MiB, 2 * MiB));
	TC_OK(cuMemAddressFree(va, 4 * MiB));

	/* stream-ordered, on the stream of device 1, device 0 current */
	CUdeviceptr c0, c1, c2;
	TC_OK(cuMemAllocAsync(&c0, 777, s1));
	tc_alloc(TC_DEV1, 777);
	TC_OK(cuMemFreeAsync(c0, s1));
	tc_free(TC_DEV1, 777);
	TC_OK(cuMemAllocAsync(&c1, 4096, s1));
	tc_alloc(TC_DEV1, 4096);
	CUmemPoolProps pp;
	memset(&pp, 0, sizeof(pp));
	pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	pp.location.id = 0;
	CUmemoryPool pool0;
	TC_OK(cuMemPoolCreate(&pool0, &pp));
	TC_OK(cuMemAllocFromPoolAsync(&c2, 10000, pool0, s1));
	tc_alloc(TC_DEV0, 10000);
	TC_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, c2));
	TP_CHECK(ordinal == 0, "pool allocation on device %d", ordinal);
	TC_OK(cuMemFreeAsync(c2, s1));
	tc_free(TC_DEV0, 10000);
	TC_OK(cuStreamSynchronize(s1));
	TC_OK(cuMemPoolDestroy(pool0));

	/* pinned host and managed memory */
	void *h = NULL, *hp = NULL;
	TC_OK(cuMemAllocHost(&h, 5000));
	tc_alloc(TC_HOST, 5000);
	TC_OK(cuMemHostAlloc(&hp, 6000, CU_MEMHOSTALLOC_PORTABLE));
	tc_alloc(TC_HOST, 6000);
	memset(hp, 1, 6000);
	TC_OK(cuMemFreeHost(h));
	tc_free(TC_HOST, 5000);
	CUdeviceptr m;
	TC_OK(cuMemAllocManaged(&m, 3000, CU_MEM_ATTACH_GLOBAL));
	tc_alloc(TC_MANAGED, 3000);

	TC_OK(cuStreamDestroy(s1));
	TC_OK(cuCtxDestroy(ctx1));
	TP_KEEP(a0);
	tc_print();
	tp_out("DONE\n");
	return 0;
}
