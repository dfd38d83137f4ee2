/* SPDX-License-Identifier: MIT */
/*
 * The driver reached without linking it: dlopen("libcuda.so.1", RTLD_LOCAL),
 * dlsym on the handle, cuGetProcAddress_v2 from dlsym, cuGetProcAddress
 * fetched through itself (the 5-argument one at 12000, the 4-argument one at
 * 11030), the per-thread (_ptsz) stream-ordered calls through flags 2, and
 * dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") (NULL without a preload that exports
 * it, since libcuda is RTLD_LOCAL; the program then uses the handle's).
 *
 *   cuda:0   dlsym'd cuMemAlloc_v2 1 MiB, freed by the dlsym'd cuMemFree_v2;
 *            RTLD_DEFAULT's (or the handle's) cuMemAlloc_v2 4096, leaked
 *   cuda:1   cuMemAlloc@3020 through cuGetProcAddress 2 MiB, leaked;
 *            64 KiB, freed by cuMemFree@3020 from the 4-argument cuGetProcAddress;
 *            cuMemAllocAsync _ptsz (flags 2) on the per-thread default stream:
 *            65536 freed by cuMemFreeAsync _ptsz, 3000 leaked
 *
 * Then calls cuArrayCreate_v2, which the double does not model: its generated
 * stub answers 801 ("cuArrayCreate_v2 -> 801"; "absent" when the double was
 * built without the toolkit's stub list).
 *
 * Prints "RTLD_DEFAULT cuMemAlloc_v2: found|absent", the CUDA_LEDGER lines, DONE.
 */
#include <dlfcn.h>

#include "fake_cuda.h"

#include "tc_common.h"

#define MiB (1024 * 1024)

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_fn)(CUcontext);

static void *
sym(void *h, const char *name)
{
	void *p = dlsym(h, name);
	TP_CHECK(p != NULL, "dlsym(%s): %s", name, dlerror());
	return p;
}

/* cuGetProcAddress_v2 that must find the symbol. */
static void *
gpa(PFN_cuGetProcAddress_v12000 f, const char *name, int version, cuuint64_t flags)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	TC_OK(f(name, &fn, version, flags, &st));
	TP_CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn, "%s@%d: status %d", name, version,
	         (int)st);
	return fn;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	TP_CHECK(h != NULL, "dlopen: %s", dlerror());
	init_fn init;
	retain_fn retain;
	set_fn set_current;
	PFN_cuMemAlloc_v3020 alloc;
	PFN_cuMemFree_v3020 mfree;
	PFN_cuGetProcAddress_v12000 gpa_dlsym;
	*(void **)&init = sym(h, "cuInit");
	*(void **)&retain = sym(h, "cuDevicePrimaryCtxRetain");
	*(void **)&set_current = sym(h, "cuCtxSetCurrent");
	*(void **)&alloc = sym(h, "cuMemAlloc_v2");
	*(void **)&mfree = sym(h, "cuMemFree_v2");
	*(void **)&gpa_dlsym = sym(h, "cuGetProcAddress_v2");
	TC_OK(init(0));
	CUcontext ctx0, ctx1;
	TC_OK(retain(&ctx0, 0));
	TC_OK(retain(&ctx1, 1));

	/* cuda:0 through dlsym */
	TC_OK(set_current(ctx0));
	CUdeviceptr a0, a1;
	TC_OK(alloc(&a0, 1 * MiB));
	tc_alloc(TC_DEV0, 1 * MiB);
	TC_OK(mfree(a0));
	tc_free(TC_DEV0, 1 * MiB);
	PFN_cuMemAlloc_v3020 alloc_default;
	*(void **)&alloc_default = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	tp_out("RTLD_DEFAULT cuMemAlloc_v2: %s\n", alloc_default ? "found" : "absent");
	TC_OK((alloc_default ? alloc_default : alloc)(&a1, 4096));
	tc_alloc(TC_DEV0, 4096);

	/* cuda:1 through cuGetProcAddress, fetched through itself */
	TC_OK(set_current(ctx1));
	PFN_cuGetProcAddress_v12000 gpa2;
	PFN_cuGetProcAddress_v11030 gpa1;
	*(void **)&gpa2 = gpa(gpa_dlsym, "cuGetProcAddress", 12000, 0);
	*(void **)&gpa1 = gpa(gpa2, "cuGetProcAddress", 11030, 0);
	PFN_cuMemAlloc_v3020 alloc2;
	PFN_cuMemFree_v3020 free1;
	*(void **)&alloc2 = gpa(gpa2, "cuMemAlloc", 3020, 0);
	void *fn = NULL;
	TC_OK(gpa1("cuMemFree", &fn, 3020, 0));
	TP_CHECK(fn != NULL, "4-argument cuGetProcAddress(cuMemFree)");
	*(void **)&free1 = fn;
	CUdeviceptr b0, b1;
	TC_OK(alloc2(&b0, 2 * MiB));
	tc_alloc(TC_DEV1, 2 * MiB);
	TC_OK(alloc2(&b1, 65536));
	tc_alloc(TC_DEV1, 65536);
	TC_OK(free1(b1));
	tc_free(TC_DEV1, 65536);

	/* the per-thread variants, flags 2 */
	PFN_cuMemAllocAsync_v11020 alloc_async;
	PFN_cuMemFreeAsync_v11020 free_async;
	*(void **)&alloc_async = gpa(gpa2, "cuMemAllocAsync", 11020,
	                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	*(void **)&free_async = gpa(gpa2, "cuMemFreeAsync", 11020,
	                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	TP_CHECK(*(void **)&alloc_async != sym(h, "cuMemAllocAsync"), "flags 2 gave the legacy-stream cuMemAllocAsync");
	CUdeviceptr c0, c1;
	TC_OK(alloc_async(&c0, 65536, CU_STREAM_PER_THREAD));
	tc_alloc(TC_DEV1, 65536);
	TC_OK(free_async(c0, CU_STREAM_PER_THREAD));
	tc_free(TC_DEV1, 65536);
	TC_OK(alloc_async(&c1, 3000, CU_STREAM_PER_THREAD));
	tc_alloc(TC_DEV1, 3000);

	/* a name the double does not model: its generated stub (toolkit builds only) */
	CUresult (*array_create)(void *, const void *);
	*(void **)&array_create = dlsym(h, "cuArrayCreate_v2");
	if (array_create)
		tp_out("cuArrayCreate_v2 -> %d\n", (int)array_create(NULL, NULL));
	else
		tp_out("cuArrayCreate_v2: absent\n");

	TP_KEEP(a1);
	TP_KEEP(b0);
	TP_KEEP(c1);
	tc_print();
	tp_out("DONE\n");
	return 0;
}
