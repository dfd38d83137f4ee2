/* SPDX-License-Identifier: MIT */
/*
 * The resolver cases of CUDA.md §4.2: cuGetProcAddress_v2 (linked with
 * -lcuda, so a preloaded shim's exported wrapper answers first) for the real
 * (name, cudaVersion, flags) requests of cudart 13, and what pointer identity
 * each answer has.  One line per request:
 *
 *   RESOLVE <name>@<version> flags=<f> -> <result> status=<s|-> pfn=<identity>
 *
 * identity: "null"; "driver:<exported name>" (a function of the fake driver,
 * by its own table: fakecuda_name_of); otherwise what dladdr says,
 * "object:<file basename>:<symbol>[+offset]", or "anonymous" when dladdr
 * knows no object.  Against the doubles alone every found name is
 * driver:<versioned name>; under the shim the memory calls become
 * object:libtfalloc.so:<wrapper> while the others (cuCtxGetDevice@13000,
 * the legacy @2000 allocation ABI, ...) stay driver:.
 *
 * RESOLVE2 lines: the same requests through the cuGetProcAddress that
 * cuGetProcAddress@12000 returned; RESOLVE4: through the 4-argument one of
 * @11030.  Then CALL lines: each fetched function called with its ABI
 * (cuCtxGetDevice@2000 with 1 argument, @13000 with 2; the legacy 32-bit
 * cuMemAlloc/cuMemFree pair), and the CUDA_LEDGER (the legacy ABI is not
 * counted: only zeros), then DONE.
 */
#include <dlfcn.h>

#include "fake_cuda.h"

#include "tc_common.h"

const char *fakecuda_name_of(const void *fn);

static const char *
identity(void *fn, char *buf, size_t len)
{
	if (!fn)
		return "null";
	const char *name = fakecuda_name_of(fn);
	if (name) {
		snprintf(buf, len, "driver:%s", name);
		return buf;
	}
	Dl_info info;
	if (!dladdr(fn, &info) || !info.dli_fname)
		return "anonymous";
	const char *file = strrchr(info.dli_fname, '/');
	file = file ? file + 1 : info.dli_fname;
	if (!info.dli_sname)
		snprintf(buf, len, "object:%s:?", file);
	else if (info.dli_saddr == fn)
		snprintf(buf, len, "object:%s:%s", file, info.dli_sname);
	else
		snprintf(buf, len, "object:%s:%s+%#lx", file, info.dli_sname,
		         (unsigned long)((char *)fn - (char *)info.dli_saddr));
	return buf;
}

struct req {
	const char *name;
	int version;
	unsigned flags;
};

static const struct req reqs[] = {
	{"", 0, 0},
	{"cuInit", 2000, 0},
	{"cuGetProcAddress", 11030, 0},
	{"cuGetProcAddress", 12000, 0},
	{"cuMemAlloc", 3020, 0},
	{"cuMemAlloc", 13000, 0},
	{"cuMemAlloc", 2000, 0},
	{"cuMemFree", 3020, 0},
	{"cuMemFree", 2000, 0},
	{"cuMemAllocPitch", 3020, 0},
	{"cuMemAllocManaged", 6000, 0},
	{"cuMemAllocHost", 3020, 0},
	{"cuMemHostAlloc", 2020, 0},
	{"cuMemFreeHost", 2000, 0},
	{"cuMemGetInfo", 3020, 0},
	{"cuMemAllocAsync", 11020, 0},
	{"cuMemAllocAsync", 11020, 2},
	{"cuMemAllocFromPoolAsync", 11020, 0},
	{"cuMemAllocFromPoolAsync", 11020, 2},
	{"cuMemFreeAsync", 11020, 0},
	{"cuMemFreeAsync", 11020, 2},
	{"cuMemPoolCreate", 11020, 0},
	{"cuMemPoolDestroy", 11020, 0},
	{"cuMemCreate", 10020, 0},
	{"cuMemCreate", 10000, 0},
	{"cuMemRelease", 10020, 0},
	{"cuMemMap", 10020, 0},
	{"cuMemUnmap", 10020, 0},
	{"cuMemAddressReserve", 10020, 0},
	{"cuMemAddressFree", 10020, 0},
	{"cuCtxGetDevice", 2000, 0},
	{"cuCtxGetDevice", 13000, 0},
	{"cuCtxSynchronize", 2000, 0},
	{"cuCtxSynchronize", 13000, 0},
	{"cuStreamGetDevice", 12080, 0},
	{"cuStreamGetDevice", 12080, 2},
	{"cuStreamGetCtx", 9020, 0},
	{"cuPointerGetAttribute", 4000, 0},
	{"cuNoSuchFunction", 13000, 0},
};
#define NREQ (sizeof(reqs) / sizeof(reqs[0]))

typedef CUresult (*legacy_alloc_fn)(unsigned int *, unsigned int);
typedef CUresult (*legacy_free_fn)(unsigned int);

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	char buf[512];
	for (size_t i = 0; i < NREQ; i++) {
		void *fn = (void *)0x1;
		CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)77;
		CUresult r = cuGetProcAddress_v2(reqs[i].name, &fn, reqs[i].version, reqs[i].flags,
		                                 &st);
		tp_out("RESOLVE %s@%d flags=%u -> %d status=%d pfn=%s\n", reqs[i].name,
		       reqs[i].version, reqs[i].flags, r, (int)st, identity(fn, buf, sizeof(buf)));
	}
	/* NULL symbolStatus */
	void *fn = NULL;
	CUresult r = cuGetProcAddress_v2("cuMemAlloc", &fn, 3020, 0, NULL);
	tp_out("RESOLVE cuMemAlloc@3020 flags=0 -> %d status=- pfn=%s\n", r,
	       identity(fn, buf, sizeof(buf)));
	r = cuGetProcAddress_v2("cuNoSuchFunction", &fn, 13000, 0, NULL);
	tp_out("RESOLVE cuNoSuchFunction@13000 flags=0 -> %d status=- pfn=%s\n", r,
	       identity(fn, buf, sizeof(buf)));

	/* through cuGetProcAddress fetched through itself */
	PFN_cuGetProcAddress_v12000 gpa2 = NULL;
	PFN_cuGetProcAddress_v11030 gpa1 = NULL;
	CUdriverProcAddressQueryResult st;
	TC_OK(cuGetProcAddress_v2("cuGetProcAddress", (void **)&gpa2, 12000, 0, &st));
	TC_OK(cuGetProcAddress_v2("cuGetProcAddress", (void **)&gpa1, 11030, 0, &st));
	TP_CHECK(gpa1 && gpa2, "cuGetProcAddress through itself");
	for (size_t i = 0; i < NREQ; i++) {
		fn = (void *)0x1;
		st = (CUdriverProcAddressQueryResult)77;
		r = gpa2(reqs[i].name, &fn, reqs[i].version, reqs[i].flags, &st);
		tp_out("RESOLVE2 %s@%d flags=%u -> %d status=%d pfn=%s\n", reqs[i].name,
		       reqs[i].version, reqs[i].flags, r, (int)st, identity(fn, buf, sizeof(buf)));
	}
	for (size_t i = 0; i < NREQ; i++) {
		fn = (void *)0x1;
		r = gpa1(reqs[i].name, &fn, reqs[i].version, reqs[i].flags);
		tp_out("RESOLVE4 %s@%d flags=%u -> %d pfn=%s\n", reqs[i].name, reqs[i].version,
		       reqs[i].flags, r, identity(fn, buf, sizeof(buf)));
	}

	/* call them with their ABI */
	TC_OK(cuInit(0));
	CUcontext ctx;
	TC_OK(cuDevicePrimaryCtxRetain(&ctx, 1));
	TC_OK(cuCtxSetCurrent(ctx));
	PFN_cuCtxGetDevice_v2000 get1 = NULL;
	PFN_cuCtxGetDevice_v13000 get2 = NULL;
	TC_OK(cuGetProcAddress_v2("cuCtxGetDevice", (void **)&get1, 2000, 0, &st));
	TC_OK(cuGetProcAddress_v2("cuCtxGetDevice", (void **)&get2, 13000, 0, &st));
	CUdevice d1 = -1, d2 = -1;
	TC_OK(get1(&d1));
	TC_OK(get2(&d2, ctx));
	tp_out("CALL cuCtxGetDevice@2000 -> device %d; @13000 (explicit context) -> device %d\n",
	       d1, d2);
	TP_CHECK(d1 == 1 && d2 == 1, "cuCtxGetDevice");
	legacy_alloc_fn lalloc = NULL;
	legacy_free_fn lfree = NULL;
	TC_OK(cuGetProcAddress_v2("cuMemAlloc", (void **)&lalloc, 2000, 0, &st));
	TC_OK(cuGetProcAddress_v2("cuMemFree", (void **)&lfree, 2000, 0, &st));
	unsigned int p32 = 0;
	r = lalloc(&p32, 4096);
	tp_out("CALL legacy cuMemAlloc@2000 -> %d (32-bit pointer %s)\n", r, p32 ? "set" : "unset");
	TC_OK(r);
	((volatile char *)(uintptr_t)p32)[4095] = 1;
	TC_OK(lfree(p32));
	tp_out("CALL legacy cuMemFree@2000 -> 0\n");
	tc_print();
	tp_out("DONE\n");
	return 0;
}
