/* SPDX-License-Identifier: MIT */
/*
 * TEST DOUBLE of the CUDA runtime, libcudart.so.13, for tfalloc's tests on
 * machines without a GPU.  It is not NVIDIA's runtime and shares no code with
 * it.  It reaches the driver exactly as the real runtime does (CUDA.md §1):
 *
 *   dlopen("libcuda.so.1", RTLD_NOW); dlsym(h, "cuGetProcAddress_v2") once;
 *   cuGetProcAddress_v2("", 0, 0) (the probe); cuInit@2000;
 *   cuGetProcAddress@11030 and @12000 (cuGetProcAddress fetched through
 *   itself; the 12000 one serves every later lookup); then every driver call
 *   it uses at its real ABI version (cuMemAlloc@3020, cuMemAllocAsync@11020
 *   with flags 0 and 2, cuCtxGetDevice@2000 and @13000, ...);
 *   cuGetExportTable (optional probe), cuDriverGetVersion, cuInit(0).
 *
 * The calls it makes to the driver are only those pointers: it never calls a
 * driver symbol by name.  Kernels do not run: launches return success.
 * FAKECUDA_LOG=FILE: one line per runtime call and per lookup, prefixed
 * "cudart".  Thread-local state only; it never calls malloc.
 */
#define FAKECUDA_INTERNAL 1
#include "fake_cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RT_EXPORT __attribute__((visibility("default")))

/* ---- log ----------------------------------------------------------------------- */

static int rt_log_fd = -1;

__attribute__((constructor)) static void
rt_init_env(void)
{
	const char *log = getenv("FAKECUDA_LOG");
	if (log && *log)
		rt_log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static void __attribute__((format(printf, 1, 2))) rt_log(const char *fmt, ...)
{
	if (rt_log_fd < 0)
		return;
	int saved = errno;
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "[%d] cudart ", (int)getpid());
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	ssize_t w = write(rt_log_fd, buf, (size_t)n);
	(void)w;
	errno = saved;
}

/* ---- the driver, reached as the real runtime reaches it ---------------------------- */

static struct {
	PFN_cuGetProcAddress_v12000 gpa; /* cuGetProcAddress fetched through itself */
	CUresult (*init)(unsigned);
	CUresult (*driver_get_version)(int *);
	CUresult (*get_export_table)(const void **, const CUuuid *);
	CUresult (*device_get_count)(int *);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*primary_release)(CUdevice);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*ctx_get_device)(CUdevice *);             /* @2000: 1 argument */
	CUresult (*ctx_get_device_v2)(CUdevice *, CUcontext); /* @13000 */
	CUresult (*ctx_synchronize)(void);
	CUresult (*ctx_synchronize_v2)(CUcontext);
	CUresult (*stream_create)(CUstream *, unsigned);
	CUresult (*stream_destroy)(CUstream);
	CUresult (*stream_synchronize)(CUstream);
	CUresult (*stream_get_device)(CUstream, CUdevice *);
	CUresult (*stream_get_device_ptsz)(CUstream, CUdevice *);
	CUresult (*stream_get_ctx)(CUstream, CUcontext *);
	CUresult (*pointer_get_attribute)(void *, int, CUdeviceptr);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*mem_alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
	CUresult (*mem_alloc_managed)(CUdeviceptr *, size_t, unsigned);
	CUresult (*mem_host_alloc)(void **, size_t, unsigned);
	CUresult (*mem_free_host)(void *);
	CUresult (*mem_get_info)(size_t *, size_t *);
	CUresult (*mem_alloc_async[2])(CUdeviceptr *, size_t, CUstream); /* [1]: _ptsz */
	CUresult (*mem_alloc_from_pool_async[2])(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*mem_free_async[2])(CUdeviceptr, CUstream);
	CUresult (*mem_pool_create)(CUmemoryPool *, const CUmemPoolProps *);
	CUresult (*mem_pool_destroy)(CUmemoryPool);
	CUresult (*mem_pool_trim_to)(CUmemoryPool, size_t);
	CUresult (*device_get_default_mem_pool)(CUmemoryPool *, CUdevice);
} drv;

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static cudaError_t rt_init_error = cudaSuccess;
static int rt_device_count;

/* One lookup through the driver's cuGetProcAddress_v2; NULL when not found. */
static void *
rt_lookup(PFN_cuGetProcAddress_v12000 gpa, const char *name, int version, cuuint64_t flags)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult r = gpa(name, &fn, version, flags, &st);
	rt_log("lookup %s@%d flags=%llu -> %d status=%d %p", name, version, flags, r, (int)st, fn);
	if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS)
		return NULL;
	return fn;
}

#define LOOKUP(field, name, ver, flags) \
	(*(void **)&drv.field = rt_lookup(drv.gpa, name, ver, flags))

static void
rt_init(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	rt_log("dlopen libcuda.so.1 RTLD_NOW -> %s", h ? "ok" : "failed");
	if (!h) {
		rt_init_error = cudaErrorInsufficientDriver;
		return;
	}
	PFN_cuGetProcAddress_v12000 gpa0;
	*(void **)&gpa0 = dlsym(h, "cuGetProcAddress_v2");
	rt_log("dlsym cuGetProcAddress_v2 -> %p", *(void **)&gpa0);
	if (!gpa0) {
		rt_init_error = cudaErrorInsufficientDriver;
		return;
	}
	/* The empty-name probe, cuInit, and cuGetProcAddress through itself. */
	void *probe = NULL;
	CUdriverProcAddressQueryResult st;
	CUresult pr = gpa0("", &probe, 0, 0, &st);
	rt_log("lookup @0 (empty name) -> %d status=%d", pr, (int)st);
	*(void **)&drv.init = rt_lookup(gpa0, "cuInit", 2000, 0);
	void *gpa_v1 = rt_lookup(gpa0, "cuGetProcAddress", 11030, 0);
	(void)gpa_v1;
	*(void **)&drv.gpa = rt_lookup(gpa0, "cuGetProcAddress", 12000, 0);
	if (!drv.gpa || !drv.init) {
		rt_init_error = cudaErrorInsufficientDriver;
		return;
	}
	LOOKUP(driver_get_version, "cuDriverGetVersion", 2020, 0);
	LOOKUP(get_export_table, "cuGetExportTable", 3000, 0);
	LOOKUP(device_get_count, "cuDeviceGetCount", 2000, 0);
	LOOKUP(device_get, "cuDeviceGet", 2000, 0);
	LOOKUP(primary_retain, "cuDevicePrimaryCtxRetain", 7000, 0);
	LOOKUP(primary_release, "cuDevicePrimaryCtxRelease", 11000, 0);
	LOOKUP(ctx_set_current, "cuCtxSetCurrent", 4000, 0);
	LOOKUP(ctx_get_current, "cuCtxGetCurrent", 4000, 0);
	LOOKUP(ctx_get_device, "cuCtxGetDevice", 2000, 0);
	LOOKUP(ctx_get_device_v2, "cuCtxGetDevice", 13000, 0);
	LOOKUP(ctx_synchronize, "cuCtxSynchronize", 2000, 0);
	LOOKUP(ctx_synchronize_v2, "cuCtxSynchronize", 13000, 0);
	LOOKUP(stream_create, "cuStreamCreate", 2000, 0);
	LOOKUP(stream_destroy, "cuStreamDestroy", 4000, 0);
	LOOKUP(stream_synchronize, "cuStreamSynchronize", 2000, 0);
	LOOKUP(stream_get_device, "cuStreamGetDevice", 12080, 0);
	LOOKUP(stream_get_device_ptsz, "cuStreamGetDevice", 12080, 2);
	LOOKUP(stream_get_ctx, "cuStreamGetCtx", 9020, 0);
	LOOKUP(pointer_get_attribute, "cuPointerGetAttribute", 4000, 0);
	LOOKUP(mem_alloc, "cuMemAlloc", 3020, 0);
	LOOKUP(mem_free, "cuMemFree", 3020, 0);
	LOOKUP(mem_alloc_pitch, "cuMemAllocPitch", 3020, 0);
	LOOKUP(mem_alloc_managed, "cuMemAllocManaged", 6000, 0);
	LOOKUP(mem_host_alloc, "cuMemHostAlloc", 2020, 0);
	LOOKUP(mem_free_host, "cuMemFreeHost", 2000, 0);
	LOOKUP(mem_get_info, "cuMemGetInfo", 3020, 0);
	for (int p = 0; p < 2; p++) {
		cuuint64_t f = p ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
		LOOKUP(mem_alloc_async[p], "cuMemAllocAsync", 11020, f);
		LOOKUP(mem_alloc_from_pool_async[p], "cuMemAllocFromPoolAsync", 11020, f);
		LOOKUP(mem_free_async[p], "cuMemFreeAsync", 11020, f);
	}
	LOOKUP(mem_pool_create, "cuMemPoolCreate", 11020, 0);
	LOOKUP(mem_pool_destroy, "cuMemPoolDestroy", 11020, 0);
	LOOKUP(mem_pool_trim_to, "cuMemPoolTrimTo", 11020, 0);
	LOOKUP(device_get_default_mem_pool, "cuDeviceGetDefaultMemPool", 11020, 0);

	if (drv.get_export_table) {
		/* The optional probe the real runtime makes; NOT_FOUND is fine. */
		static const CUuuid probe_id = {{(char)0xf8, (char)0xcf, (char)0xf9, 0x51, 0x21, 0x46,
		                                 (char)0x8b, 0x4e, (char)0xb9, (char)0xe2, (char)0xfb,
		                                 0x46, (char)0x9e, 0x7c, 0x0d, (char)0xd9}};
		const void *table = NULL;
		drv.get_export_table(&table, &probe_id);
	}
	/* What every call needs. */
	if (!drv.device_get_count || !drv.device_get || !drv.primary_retain ||
	    !drv.ctx_set_current || !drv.ctx_get_current || !drv.ctx_get_device) {
		rt_log("initialized -> %d (a required driver function is missing)",
		       (int)cudaErrorCallRequiresNewerDriver);
		rt_init_error = cudaErrorCallRequiresNewerDriver;
		return;
	}
	int v = 0;
	if (!drv.driver_get_version || drv.driver_get_version(&v) != CUDA_SUCCESS || v < 13000) {
		rt_init_error = cudaErrorInsufficientDriver;
		return;
	}
	CUresult r = drv.init(0);
	if (r == CUDA_SUCCESS && drv.device_get_count)
		r = drv.device_get_count(&rt_device_count);
	if (r == CUDA_ERROR_NO_DEVICE)
		rt_init_error = cudaErrorNoDevice;
	else if (r != CUDA_SUCCESS)
		rt_init_error = cudaErrorInitializationError;
	rt_log("initialized -> %d devices=%d", (int)rt_init_error, rt_device_count);
}

/* ---- errors ------------------------------------------------------------------------- */

static __thread cudaError_t rt_last_error;

static cudaError_t
rt_from_driver(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS: return cudaSuccess;
	case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
	case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
	case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
	case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
	case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
	case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
	case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
	case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
	case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
	default: return cudaErrorUnknown;
	}
}

/*
 * Calls a driver function the runtime fetched; one the driver did not give
 * (not found, or NULL with success) fails the call as the real runtime does
 * with a driver too old for it: cudaErrorCallRequiresNewerDriver.
 */
static cudaError_t
rt_missing(const char *what)
{
	rt_log("no driver function for %s -> %d", what, (int)cudaErrorCallRequiresNewerDriver);
	return cudaErrorCallRequiresNewerDriver;
}
#define RT_CALL(f, ...) ((f) ? rt_from_driver((f)(__VA_ARGS__)) : rt_missing(#f))

static cudaError_t
rt_ret(cudaError_t e)
{
	if (e != cudaSuccess)
		rt_last_error = e;
	return e;
}

RT_EXPORT cudaError_t
cudaGetLastError(void)
{
	cudaError_t e = rt_last_error;
	rt_last_error = cudaSuccess;
	return e;
}

RT_EXPORT cudaError_t cudaPeekAtLastError(void);
RT_EXPORT cudaError_t
cudaPeekAtLastError(void)
{
	return rt_last_error;
}

RT_EXPORT const char *
cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInitializationError: return "initialization error";
	case cudaErrorInsufficientDriver:
		return "CUDA driver version is insufficient for CUDA runtime version";
	case cudaErrorCallRequiresNewerDriver: return "API call requires a newer driver";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorDeviceUninitialized: return "invalid device context";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorSymbolNotFound: return "named symbol not found";
	case cudaErrorNotSupported: return "operation not supported";
	default: return "unrecognized error code";
	}
}

RT_EXPORT const char *cudaGetErrorName(cudaError_t e);
RT_EXPORT const char *
cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorInitializationError: return "cudaErrorInitializationError";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	default: return "cudaErrorUnknown";
	}
}

/* ---- devices and contexts ----------------------------------------------------------- */

static __thread int rt_device;   /* the thread's current device */
static __thread int rt_ctx_made; /* its primary context was made current by us */

/*
 * Every runtime call that needs a context: initialise once, then make the
 * thread's device's primary context current unless a context is current.
 */
static cudaError_t
rt_ctx(void)
{
	pthread_once(&rt_once, rt_init);
	if (rt_init_error != cudaSuccess)
		return rt_init_error;
	CUcontext cur = NULL;
	if (drv.ctx_get_current(&cur) == CUDA_SUCCESS && cur && rt_ctx_made)
		return cudaSuccess;
	if (cur)
		return cudaSuccess; /* the program's own context */
	CUcontext pc;
	CUresult r = drv.primary_retain(&pc, rt_device);
	if (r == CUDA_SUCCESS)
		r = drv.ctx_set_current(pc);
	if (r == CUDA_SUCCESS)
		rt_ctx_made = 1;
	return rt_from_driver(r);
}

RT_EXPORT cudaError_t
cudaGetDeviceCount(int *count)
{
	pthread_once(&rt_once, rt_init);
	cudaError_t e = rt_init_error;
	if (e == cudaSuccess && !count)
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		*count = rt_device_count;
	rt_log("cudaGetDeviceCount -> %d count=%d", (int)e, e ? 0 : rt_device_count);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaSetDevice(int device)
{
	pthread_once(&rt_once, rt_init);
	cudaError_t e = rt_init_error;
	if (e == cudaSuccess && (device < 0 || device >= rt_device_count))
		e = cudaErrorInvalidDevice;
	if (e == cudaSuccess) {
		CUcontext pc;
		CUresult r = CUDA_SUCCESS;
		if (!rt_ctx_made || device != rt_device) {
			r = drv.primary_retain(&pc, device);
			if (r == CUDA_SUCCESS)
				r = drv.ctx_set_current(pc);
		}
		if (r == CUDA_SUCCESS) {
			rt_device = device;
			rt_ctx_made = 1;
		}
		e = rt_from_driver(r);
	}
	rt_log("cudaSetDevice device=%d -> %d", device, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaGetDevice(int *device)
{
	cudaError_t e = device ? rt_ctx() : cudaErrorInvalidValue;
	CUdevice d = -1;
	if (e == cudaSuccess)
		e = RT_CALL(drv.ctx_get_device, &d);
	if (e == cudaSuccess)
		*device = d;
	rt_log("cudaGetDevice -> %d device=%d", (int)e, d);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaDeviceSynchronize(void)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess)
		e = RT_CALL(drv.ctx_synchronize_v2, NULL);
	rt_log("cudaDeviceSynchronize -> %d", (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaDeviceReset(void);
RT_EXPORT cudaError_t
cudaDeviceReset(void)
{
	rt_log("cudaDeviceReset -> 0");
	return cudaSuccess;
}

RT_EXPORT cudaError_t
cudaDriverGetVersion(int *v)
{
	pthread_once(&rt_once, rt_init);
	if (!v)
		return rt_ret(cudaErrorInvalidValue);
	*v = 0;
	if (drv.driver_get_version)
		drv.driver_get_version(v);
	return cudaSuccess;
}

RT_EXPORT cudaError_t
cudaRuntimeGetVersion(int *v)
{
	if (!v)
		return rt_ret(cudaErrorInvalidValue);
	*v = 13000;
	return cudaSuccess;
}

/* ---- memory --------------------------------------------------------------------------- */

RT_EXPORT cudaError_t
cudaMalloc(void **devPtr, size_t size)
{
	cudaError_t e = devPtr ? rt_ctx() : cudaErrorInvalidValue;
	CUdeviceptr p = 0;
	if (e == cudaSuccess && size == 0)
		*devPtr = NULL; /* as the real runtime: success, NULL */
	else if (e == cudaSuccess) {
		e = RT_CALL(drv.mem_alloc, &p, size);
		if (e == cudaSuccess)
			*devPtr = (void *)(uintptr_t)p;
	}
	rt_log("cudaMalloc size=%zu -> %d ptr=0x%llx", size, (int)e, (unsigned long long)p);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaFree(void *devPtr)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess && devPtr)
		e = RT_CALL(drv.mem_free, (CUdeviceptr)(uintptr_t)devPtr);
	rt_log("cudaFree ptr=%p -> %d", devPtr, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	cudaError_t e = (devPtr && pitch) ? rt_ctx() : cudaErrorInvalidValue;
	CUdeviceptr p = 0;
	if (e == cudaSuccess) {
		e = RT_CALL(drv.mem_alloc_pitch, &p, pitch, width, height, 4);
		if (e == cudaSuccess)
			*devPtr = (void *)(uintptr_t)p;
	}
	rt_log("cudaMallocPitch width=%zu height=%zu -> %d ptr=0x%llx pitch=%zu", width, height,
	       (int)e, (unsigned long long)p, e ? (size_t)0 : *pitch);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	cudaError_t e = devPtr ? rt_ctx() : cudaErrorInvalidValue;
	CUdeviceptr p = 0;
	if (e == cudaSuccess) {
		e = RT_CALL(drv.mem_alloc_managed, &p, size, flags);
		if (e == cudaSuccess)
			*devPtr = (void *)(uintptr_t)p;
	}
	rt_log("cudaMallocManaged size=%zu flags=%u -> %d ptr=0x%llx", size, flags, (int)e,
	       (unsigned long long)p);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	cudaError_t e = pHost ? rt_ctx() : cudaErrorInvalidValue;
	void *p = NULL;
	if (e == cudaSuccess) {
		e = RT_CALL(drv.mem_host_alloc, &p, size, flags);
		if (e == cudaSuccess)
			*pHost = p;
	}
	rt_log("cudaHostAlloc size=%zu flags=%u -> %d ptr=%p", size, flags, (int)e, p);
	return rt_ret(e);
}

/* As the real runtime: cudaMallocHost is cuMemHostAlloc with no flags. */
RT_EXPORT cudaError_t
cudaMallocHost(void **ptr, size_t size)
{
	cudaError_t e = ptr ? rt_ctx() : cudaErrorInvalidValue;
	void *p = NULL;
	if (e == cudaSuccess) {
		e = RT_CALL(drv.mem_host_alloc, &p, size, 0);
		if (e == cudaSuccess)
			*ptr = p;
	}
	rt_log("cudaMallocHost size=%zu -> %d ptr=%p", size, (int)e, p);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaFreeHost(void *ptr)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess && ptr)
		e = RT_CALL(drv.mem_free_host, ptr);
	rt_log("cudaFreeHost ptr=%p -> %d", ptr, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaMemGetInfo(size_t *free_out, size_t *total)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess)
		e = RT_CALL(drv.mem_get_info, free_out, total);
	return rt_ret(e);
}

/* All memory of the doubles is host memory: copies and sets are plain ones. */
RT_EXPORT cudaError_t
cudaMemcpy(void *dst, const void *src, size_t count, int kind)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess && count && (!dst || !src))
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess && count)
		memmove(dst, src, count);
	rt_log("cudaMemcpy count=%zu kind=%d -> %d", count, kind, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, int kind);
RT_EXPORT cudaError_t
cudaMemcpy_ptds(void *dst, const void *src, size_t count, int kind)
{
	return cudaMemcpy(dst, src, count, kind);
}

RT_EXPORT cudaError_t
cudaMemset(void *devPtr, int value, size_t count)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess && count && !devPtr)
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess && count)
		memset(devPtr, value, count);
	rt_log("cudaMemset count=%zu -> %d", count, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count);
RT_EXPORT cudaError_t
cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	return cudaMemset(devPtr, value, count);
}

/* ---- streams and stream-ordered memory ------------------------------------------------ */

RT_EXPORT cudaError_t
cudaStreamCreate(cudaStream_t *s)
{
	cudaError_t e = s ? rt_ctx() : cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = RT_CALL(drv.stream_create, s, 0);
	rt_log("cudaStreamCreate -> %d stream=%p", (int)e, e ? NULL : (void *)*s);
	return rt_ret(e);
}

RT_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags);
RT_EXPORT cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	cudaError_t e = s ? rt_ctx() : cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = RT_CALL(drv.stream_create, s, flags);
	rt_log("cudaStreamCreateWithFlags flags=%u -> %d", flags, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess)
		e = RT_CALL(drv.stream_destroy, s);
	rt_log("cudaStreamDestroy stream=%p -> %d", (void *)s, (int)e);
	return rt_ret(e);
}

static cudaError_t
rt_stream_sync(const char *name, cudaStream_t s)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess)
		e = RT_CALL(drv.stream_synchronize, s);
	rt_log("%s stream=%p -> %d", name, (void *)s, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaStreamSynchronize(cudaStream_t s)
{
	return rt_stream_sync("cudaStreamSynchronize", s);
}

RT_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s);
RT_EXPORT cudaError_t
cudaStreamSynchronize_ptsz(cudaStream_t s)
{
	return rt_stream_sync("cudaStreamSynchronize_ptsz", s ? s : cudaStreamPerThread);
}

RT_EXPORT cudaError_t
cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
	cudaError_t e = pool ? rt_ctx() : cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = RT_CALL(drv.device_get_default_mem_pool, pool, device);
	rt_log("cudaDeviceGetDefaultMemPool device=%d -> %d", device, (int)e);
	return rt_ret(e);
}

/*
 * The stream-ordered calls.  ptsz: the _ptsz entry point (a program built
 * with --default-stream per-thread), which uses the driver's _ptsz pointer
 * and takes the NULL stream as the per-thread one.
 */
static cudaError_t
rt_malloc_async(const char *name, int ptsz, void **devPtr, size_t size, cudaMemPool_t pool,
                int use_pool, cudaStream_t s)
{
	cudaError_t e = devPtr ? rt_ctx() : cudaErrorInvalidValue;
	CUdeviceptr p = 0;
	if (e == cudaSuccess) {
		e = use_pool ? RT_CALL(drv.mem_alloc_from_pool_async[ptsz], &p, size, pool, s)
		             : RT_CALL(drv.mem_alloc_async[ptsz], &p, size, s);
		if (e == cudaSuccess)
			*devPtr = (void *)(uintptr_t)p;
	}
	rt_log("%s size=%zu stream=%p -> %d ptr=0x%llx", name, size, (void *)s, (int)e,
	       (unsigned long long)p);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s)
{
	return rt_malloc_async("cudaMallocAsync", 0, devPtr, size, NULL, 0, s);
}

RT_EXPORT cudaError_t
cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t s)
{
	return rt_malloc_async("cudaMallocAsync_ptsz", 1, devPtr, size, NULL, 0, s);
}

RT_EXPORT cudaError_t
cudaMallocFromPoolAsync(void **devPtr, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
	return rt_malloc_async("cudaMallocFromPoolAsync", 0, devPtr, size, pool, 1, s);
}

RT_EXPORT cudaError_t
cudaMallocFromPoolAsync_ptsz(void **devPtr, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
	return rt_malloc_async("cudaMallocFromPoolAsync_ptsz", 1, devPtr, size, pool, 1, s);
}

static cudaError_t
rt_free_async(const char *name, int ptsz, void *devPtr, cudaStream_t s)
{
	cudaError_t e = rt_ctx();
	if (e == cudaSuccess)
		e = RT_CALL(drv.mem_free_async[ptsz], (CUdeviceptr)(uintptr_t)devPtr, s);
	rt_log("%s ptr=%p stream=%p -> %d", name, devPtr, (void *)s, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaFreeAsync(void *devPtr, cudaStream_t s)
{
	return rt_free_async("cudaFreeAsync", 0, devPtr, s);
}

RT_EXPORT cudaError_t
cudaFreeAsync_ptsz(void *devPtr, cudaStream_t s)
{
	return rt_free_async("cudaFreeAsync_ptsz", 1, devPtr, s);
}

/* ---- driver entry points ----------------------------------------------------------------- */

static cudaError_t
rt_entry_point(const char *name, const char *symbol, void **funcPtr, unsigned int version,
               unsigned long long flags, cudaDriverEntryPointQueryResult *status)
{
	pthread_once(&rt_once, rt_init);
	cudaError_t e = rt_init_error;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	void *fn = NULL;
	if (e == cudaSuccess && (!symbol || !funcPtr || (flags & ~3ull)))
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess) {
		CUresult r = drv.gpa(symbol, &fn, (int)version, flags, &st);
		/* Not found is a status, not an error. */
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_FOUND)
			e = rt_from_driver(r);
		*funcPtr = fn;
		if (status)
			*status = (cudaDriverEntryPointQueryResult)st;
	}
	rt_log("%s symbol=%s cudaVersion=%u flags=%llu -> %d status=%d pfn=%p", name,
	       symbol ? symbol : "(null)", version, flags, (int)e, (int)st, fn);
	return rt_ret(e);
}

RT_EXPORT cudaError_t
cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                 unsigned long long flags,
                                 cudaDriverEntryPointQueryResult *driverStatus)
{
	return rt_entry_point("cudaGetDriverEntryPointByVersion", symbol, funcPtr, cudaVersion,
	                      flags, driverStatus);
}

RT_EXPORT cudaError_t
cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                      unsigned int cudaVersion, unsigned long long flags,
                                      cudaDriverEntryPointQueryResult *driverStatus)
{
	if (flags == cudaEnableDefault)
		flags = cudaEnablePerThreadDefaultStream;
	return rt_entry_point("cudaGetDriverEntryPointByVersion_ptsz", symbol, funcPtr,
	                      cudaVersion, flags, driverStatus);
}

/* The deprecated form asks for the runtime's own version, 13000. */
RT_EXPORT cudaError_t
cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                        cudaDriverEntryPointQueryResult *driverStatus)
{
	return rt_entry_point("cudaGetDriverEntryPoint", symbol, funcPtr, 13000, flags,
	                      driverStatus);
}

RT_EXPORT cudaError_t
cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                             cudaDriverEntryPointQueryResult *driverStatus)
{
	if (flags == cudaEnableDefault)
		flags = cudaEnablePerThreadDefaultStream;
	return rt_entry_point("cudaGetDriverEntryPoint_ptsz", symbol, funcPtr, 13000, flags,
	                      driverStatus);
}

/* ---- what nvcc's host code calls: registration and launches ------------------------------- */

static void *rt_fatbin_handle[4];

RT_EXPORT void **__cudaRegisterFatBinary(void *fatCubin);
RT_EXPORT void **
__cudaRegisterFatBinary(void *fatCubin)
{
	rt_log("__cudaRegisterFatBinary fatCubin=%p", fatCubin);
	rt_fatbin_handle[0] = fatCubin;
	return rt_fatbin_handle;
}

RT_EXPORT void __cudaRegisterFatBinaryEnd(void **handle);
RT_EXPORT void
__cudaRegisterFatBinaryEnd(void **handle)
{
	rt_log("__cudaRegisterFatBinaryEnd handle=%p", (void *)handle);
}

RT_EXPORT void __cudaUnregisterFatBinary(void **handle);
RT_EXPORT void
__cudaUnregisterFatBinary(void **handle)
{
	rt_log("__cudaUnregisterFatBinary handle=%p", (void *)handle);
}

RT_EXPORT char __cudaInitModule(void **handle);
RT_EXPORT char
__cudaInitModule(void **handle)
{
	(void)handle;
	return 1;
}

RT_EXPORT void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid,
                                      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
RT_EXPORT void
__cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                       int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim,
                       int *wSize)
{
	(void)handle;
	(void)deviceFun;
	(void)thread_limit;
	(void)tid;
	(void)bid;
	(void)bDim;
	(void)gDim;
	(void)wSize;
	rt_log("__cudaRegisterFunction hostFun=%p name=%s", (const void *)hostFun,
	       deviceName ? deviceName : "(null)");
}

RT_EXPORT void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress,
                                 const char *deviceName, int ext, size_t size, int constant,
                                 int global);
RT_EXPORT void
__cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName,
                  int ext, size_t size, int constant, int global)
{
	(void)handle;
	(void)hostVar;
	(void)deviceAddress;
	(void)ext;
	(void)constant;
	(void)global;
	rt_log("__cudaRegisterVar name=%s size=%zu", deviceName ? deviceName : "(null)", size);
}

/* One pending launch configuration per thread (nvcc pushes, the stub pops). */
static __thread struct {
	dim3 grid, block;
	size_t shmem;
	void *stream;
	int depth;
} rt_config;

RT_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                               void *stream);
RT_EXPORT unsigned
__cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, void *stream)
{
	rt_config.grid = gridDim;
	rt_config.block = blockDim;
	rt_config.shmem = sharedMem;
	rt_config.stream = stream;
	rt_config.depth++;
	return 0;
}

RT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                 void *stream);
RT_EXPORT cudaError_t
__cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
	if (rt_config.depth <= 0)
		return rt_ret(cudaErrorInvalidValue);
	rt_config.depth--;
	*gridDim = rt_config.grid;
	*blockDim = rt_config.block;
	*sharedMem = rt_config.shmem;
	*(void **)stream = rt_config.stream;
	return cudaSuccess;
}

RT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
RT_EXPORT cudaError_t
__cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	if (!kernel)
		return rt_ret(cudaErrorInvalidValue);
	*kernel = (cudaKernel_t)(uintptr_t)hostFun;
	return cudaSuccess;
}

static cudaError_t
rt_launch(const char *name, const void *fn, dim3 grid, dim3 block, size_t shmem, cudaStream_t s)
{
	cudaError_t e = rt_ctx();
	rt_log("%s fn=%p grid=%u,%u,%u block=%u,%u,%u shmem=%zu stream=%p -> %d (not run)", name,
	       fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, shmem, (void *)s, (int)e);
	return rt_ret(e);
}

RT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                         size_t shmem, cudaStream_t s);
RT_EXPORT cudaError_t
__cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args, size_t shmem,
                   cudaStream_t s)
{
	(void)args;
	return rt_launch("__cudaLaunchKernel", (const void *)kernel, grid, block, shmem, s);
}

RT_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block,
                                              void **args, size_t shmem, cudaStream_t s);
RT_EXPORT cudaError_t
__cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void **args, size_t shmem,
                        cudaStream_t s)
{
	(void)args;
	return rt_launch("__cudaLaunchKernel_ptsz", (const void *)kernel, grid, block, shmem, s);
}

RT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                       size_t shmem, cudaStream_t s);
RT_EXPORT cudaError_t
cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                 cudaStream_t s)
{
	(void)args;
	return rt_launch("cudaLaunchKernel", func, grid, block, shmem, s);
}

RT_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args,
                                            size_t shmem, cudaStream_t s);
RT_EXPORT cudaError_t
cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                      cudaStream_t s)
{
	(void)args;
	return rt_launch("cudaLaunchKernel_ptsz", func, grid, block, shmem, s);
}
