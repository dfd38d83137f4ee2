/* SPDX-License-Identifier: MIT */
/*
 * CUDA runtime interception, for a shared libcudart (PyTorch and JAX wheels,
 * nvcc -cudart shared).  A statically linked runtime (nvcc's default, and the
 * copies inside cuBLAS or NCCL) has no such symbols to interpose: it is seen
 * through the driver (cuda_hooks.c).
 *
 * Each allocation is counted here, once: the wrapper raises a thread-local
 * depth around the real call so that the driver wrappers the runtime reaches
 * underneath record nothing.  A limit refuses with cudaErrorMemoryAllocation.
 * The real runtime function is found with glibc's dlsym(RTLD_NEXT) called
 * from here (the shim's own dlsym would put the caller in the wrong place),
 * else in a libcudart loaded with RTLD_LOCAL (found by its soname, or adopted
 * when the program looks a "cuda" name up in a handle).
 */
#include "cuda_hooks/cuda_hooks.h"

#include <dlfcn.h>
#include <string.h>

#include "core/devices.h"
#include "core/log.h"
#include "core/ptr_table.h"

#define TFA_EXPORT __attribute__((visibility("default")))

typedef int cudaDriverEntryPointQueryResult;

enum {
	R_cudaMalloc,
	R_cudaFree,
	R_cudaMallocHost,
	R_cudaHostAlloc,
	R_cudaFreeHost,
	R_cudaMallocManaged,
	R_cudaMallocPitch,
	R_cudaMallocAsync,
	R_cudaMallocAsync_ptsz,
	R_cudaFreeAsync,
	R_cudaFreeAsync_ptsz,
	R_cudaMallocFromPoolAsync,
	R_cudaGetDriverEntryPoint,
	R_cudaGetDriverEntryPoint_ptsz,
	R_cudaGetDriverEntryPointByVersion,
	R_cudaGetDriverEntryPointByVersion_ptsz,
	R_cudaGetDevice, /* a helper, not wrapped */
	R_COUNT
};

struct rwrap {
	const char *name;
	void *wrapper;
};

static const struct rwrap rwraps[R_COUNT];
static void *rt_fn[R_COUNT];
static void *libcudart; /* (void *)-1: found through RTLD_NEXT */

static bool
resolve_from(void *h)
{
	void *(*rd)(void *, const char *) = tfa_cuda_real_dlsym();

	if (rd == NULL)
		return false;
	void *probe = rd(h, "cudaMalloc");
	if (probe == NULL || tfa_cuda_is_wrapper(probe))
		return false;
	for (int i = 0; i < R_COUNT; i++) {
		void *p = rd(h, rwraps[i].name);
		if (p != NULL && tfa_cuda_is_wrapper(p))
			p = NULL;
		__atomic_store_n(&rt_fn[i], p, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&libcudart, h, __ATOMIC_RELEASE);
	return true;
}

static bool
find_cudart(void)
{
	static const char *const sonames[] = { "libcudart.so.13", "libcudart.so.12", "libcudart.so" };

	if (tfa_likely(__atomic_load_n(&libcudart, __ATOMIC_ACQUIRE) != NULL))
		return true;
	tfa_guard_enter();
	/* glibc's dlsym called from the shim: RTLD_NEXT is the object after the shim. */
	bool ok = resolve_from(RTLD_NEXT);
	for (size_t i = 0; !ok && i < TFA_ARRAY_SIZE(sonames); i++) {
		void *h = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
		ok = h != NULL && resolve_from(h);
	}
	(void)dlerror();
	tfa_guard_exit();
	return ok;
}

bool
tfa_cudart_adopt(const void *p)
{
	Dl_info info;

	if (__atomic_load_n(&libcudart, __ATOMIC_ACQUIRE) != NULL)
		return false;
	if (dladdr(p, &info) == 0 || info.dli_fname == NULL)
		return false;
	const char *base = strrchr(info.dli_fname, '/');
	base = base != NULL ? base + 1 : info.dli_fname;
	if (strncmp(base, "libcudart.so", 12) != 0)
		return false;
	tfa_guard_enter();
	void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
	bool ok = h != NULL && resolve_from(h);
	(void)dlerror();
	tfa_guard_exit();
	return ok;
}

static inline void *
rt(int i)
{
	if (tfa_unlikely(__atomic_load_n(&libcudart, __ATOMIC_ACQUIRE) == NULL) && !find_cudart())
		return NULL;
	return __atomic_load_n(&rt_fn[i], __ATOMIC_RELAXED);
}

void *
tfa_cudart_wrapper_of(const void *p, const char **name)
{
	if (p == NULL || __atomic_load_n(&libcudart, __ATOMIC_ACQUIRE) == NULL)
		return NULL;
	for (int i = 0; i < R_COUNT; i++) {
		if (rwraps[i].wrapper != NULL && __atomic_load_n(&rt_fn[i], __ATOMIC_RELAXED) == p) {
			*name = rwraps[i].name;
			return rwraps[i].wrapper;
		}
	}
	return NULL;
}

bool
tfa_cudart_is_wrapper(const void *p)
{
	for (int i = 0; i < R_COUNT; i++)
		if (rwraps[i].wrapper != NULL && rwraps[i].wrapper == p)
			return true;
	return false;
}

/* The runtime's current device. */
static unsigned
rt_devcode(void)
{
	cudaError_t (*get)(int *) = (cudaError_t(*)(int *))rt(R_cudaGetDevice);
	int dev = 0;

	if (get == NULL || get(&dev) != cudaSuccess)
		dev = 0;
	return tfa_cuda_code_of_ordinal(dev);
}

static unsigned
rt_stream_devcode(CUstream stream, bool ptsz)
{
	if (stream == NULL || stream == TFA_CU_STREAM_LEGACY || stream == TFA_CU_STREAM_PER_THREAD)
		return rt_devcode();
	return tfa_cuda_stream_devcode(stream, ptsz);
}

#define RT(name, type) ((type)rt(R_##name))
#define NESTED()       (tfa_cuda_rt_depth > 0)
#define CALL(expr)                 \
	({                         \
		tfa_cuda_rt_depth++; \
		cudaError_t r_ = (expr); \
		tfa_cuda_rt_depth--; \
		r_;                \
	})

/* An allocation of nbytes on code by expr, which sets *out. */
#define RT_ALLOC(code_, nbytes_, out_, expr_)                                                    \
	do {                                                                                     \
		tfa_cuda_call_t c_;                                                              \
		if (!tfa_cuda_begin(&c_, (code_), (nbytes_)))                                    \
			return cudaErrorMemoryAllocation;                                        \
		cudaError_t r = CALL(expr_);                                                     \
		tfa_cuda_end(&c_, r == cudaSuccess && (out_) != NULL,                            \
			     (out_) != NULL ? (uintptr_t) * (out_) : 0, (nbytes_), TFA_KIND_DEVICE); \
		return r;                                                                        \
	} while (0)

TFA_EXPORT cudaError_t cudaMalloc(void **p, size_t size);
TFA_EXPORT cudaError_t
cudaMalloc(void **p, size_t size)
{
	cudaError_t (*fn)(void **, size_t) = RT(cudaMalloc, cudaError_t(*)(void **, size_t));

	if (fn == NULL)
		return cudaErrorInitializationError;
	if (NESTED())
		return fn(p, size);
	RT_ALLOC(rt_devcode(), size, p, fn(p, size));
}

TFA_EXPORT cudaError_t cudaMallocManaged(void **p, size_t size, unsigned flags);
TFA_EXPORT cudaError_t
cudaMallocManaged(void **p, size_t size, unsigned flags)
{
	cudaError_t (*fn)(void **, size_t, unsigned) = RT(cudaMallocManaged, cudaError_t(*)(void **, size_t, unsigned));

	if (fn == NULL)
		return cudaErrorInitializationError;
	if (NESTED())
		return fn(p, size, flags);
	RT_ALLOC(TFA_DEVCODE_CUDA_MANAGED, size, p, fn(p, size, flags));
}

TFA_EXPORT cudaError_t cudaMallocHost(void **p, size_t size);
TFA_EXPORT cudaError_t
cudaMallocHost(void **p, size_t size)
{
	cudaError_t (*fn)(void **, size_t) = RT(cudaMallocHost, cudaError_t(*)(void **, size_t));

	if (fn == NULL)
		return cudaErrorInitializationError;
	if (NESTED())
		return fn(p, size);
	RT_ALLOC(TFA_DEVCODE_CUDA_HOST, size, p, fn(p, size));
}

TFA_EXPORT cudaError_t cudaHostAlloc(void **p, size_t size, unsigned flags);
TFA_EXPORT cudaError_t
cudaHostAlloc(void **p, size_t size, unsigned flags)
{
	cudaError_t (*fn)(void **, size_t, unsigned) = RT(cudaHostAlloc, cudaError_t(*)(void **, size_t, unsigned));

	if (fn == NULL)
		return cudaErrorInitializationError;
	if (NESTED())
		return fn(p, size, flags);
	RT_ALLOC(TFA_DEVCODE_CUDA_HOST, size, p, fn(p, size, flags));
}

TFA_EXPORT cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height);
TFA_EXPORT cudaError_t
cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height)
{
	cudaError_t (*fn)(void **, size_t *, size_t, size_t) =
		RT(cudaMallocPitch, cudaError_t(*)(void **, size_t *, size_t, size_t));
	tfa_cuda_call_t c;
	size_t want, got;

	if (fn == NULL)
		return cudaErrorInitializationError;
	if (NESTED())
		return fn(p, pitch, width, height);
	if (__builtin_mul_overflow(width, height, &want))
		want = SIZE_MAX;
	if (!tfa_cuda_begin(&c, rt_devcode(), want))
		return cudaErrorMemoryAllocation;
	cudaError_t r = CALL(fn(p, pitch, width, height));
	bool ok = r == cudaSuccess && p != NULL && pitch != NULL;
	if (!ok || __builtin_mul_overflow(*pitch, height, &got))
		got = want;
	tfa_cuda_end(&c, ok, ok ? (uintptr_t)*p : 0, got, TFA_KIND_DEVICE);
	return r;
}

static cudaError_t
rt_malloc_async(int i, bool ptsz, void **p, size_t size, CUstream stream)
{
	cudaError_t (*fn)(void **, size_t, CUstream) = (cudaError_t(*)(void **, size_t, CUstream))rt(i);

	if (fn == NULL)
		return cudaErrorInitializationError;
	if (NESTED())
		return fn(p, size, stream);
	RT_ALLOC(rt_stream_devcode(stream, ptsz), size, p, fn(p, size, stream));
}

TFA_EXPORT cudaError_t cudaMallocAsync(void **p, size_t size, CUstream stream);
TFA_EXPORT cudaError_t
cudaMallocAsync(void **p, size_t size, CUstream stream)
{
	return rt_malloc_async(R_cudaMallocAsync, false, p, size, stream);
}

TFA_EXPORT cudaError_t cudaMallocAsync_ptsz(void **p, size_t size, CUstream stream);
TFA_EXPORT cudaError_t
cudaMallocAsync_ptsz(void **p, size_t size, CUstream stream)
{
	return rt_malloc_async(R_cudaMallocAsync_ptsz, true, p, size, stream);
}

TFA_EXPORT cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, CUmemoryPool pool, CUstream stream);
TFA_EXPORT cudaError_t
cudaMallocFromPoolAsync(void **p, size_t size, CUmemoryPool pool, CUstream stream)
{
	cudaError_t (*fn)(void **, size_t, CUmemoryPool, CUstream) =
		RT(cudaMallocFromPoolAsync, cudaError_t(*)(void **, size_t, CUmemoryPool, CUstream));

	if (fn == NULL)
		return cudaErrorInitializationError;
	if (NESTED())
		return fn(p, size, pool, stream);
	tfa_cuda_call_t c;
	if (!tfa_cuda_begin(&c, rt_stream_devcode(stream, false), size))
		return cudaErrorMemoryAllocation;
	cudaError_t r = CALL(fn(p, size, pool, stream));
	bool ok = r == cudaSuccess && p != NULL;
	uintptr_t got = ok ? (uintptr_t)*p : 0;
	tfa_cuda_end_on(&c, ok && c.active ? tfa_cuda_pointer_devcode(got, c.code) : c.code, ok, got, size,
			TFA_KIND_DEVICE);
	return r;
}

static cudaError_t
rt_free(int i, void *p)
{
	cudaError_t (*fn)(void *) = (cudaError_t(*)(void *))rt(i);

	if (fn == NULL)
		return cudaErrorInitializationError;
	tfa_cuda_forget((uintptr_t)p);
	return CALL(fn(p));
}

TFA_EXPORT cudaError_t cudaFree(void *p);
TFA_EXPORT cudaError_t
cudaFree(void *p)
{
	return rt_free(R_cudaFree, p);
}

TFA_EXPORT cudaError_t cudaFreeHost(void *p);
TFA_EXPORT cudaError_t
cudaFreeHost(void *p)
{
	return rt_free(R_cudaFreeHost, p);
}

static cudaError_t
rt_free_async(int i, void *p, CUstream stream)
{
	cudaError_t (*fn)(void *, CUstream) = (cudaError_t(*)(void *, CUstream))rt(i);

	if (fn == NULL)
		return cudaErrorInitializationError;
	tfa_cuda_forget((uintptr_t)p);
	return CALL(fn(p, stream));
}

TFA_EXPORT cudaError_t cudaFreeAsync(void *p, CUstream stream);
TFA_EXPORT cudaError_t
cudaFreeAsync(void *p, CUstream stream)
{
	return rt_free_async(R_cudaFreeAsync, p, stream);
}

TFA_EXPORT cudaError_t cudaFreeAsync_ptsz(void *p, CUstream stream);
TFA_EXPORT cudaError_t
cudaFreeAsync_ptsz(void *p, CUstream stream)
{
	return rt_free_async(R_cudaFreeAsync_ptsz, p, stream);
}

/* The driver entry points the runtime hands out: replaced as cuGetProcAddress's are. */
static cudaError_t
entry_point(int i, const char *symbol, void **pfn, unsigned long long flags,
	    cudaDriverEntryPointQueryResult *status)
{
	cudaError_t (*fn)(const char *, void **, unsigned long long, cudaDriverEntryPointQueryResult *) =
		(cudaError_t(*)(const char *, void **, unsigned long long, cudaDriverEntryPointQueryResult *))rt(i);

	if (fn == NULL)
		return cudaErrorInitializationError;
	cudaError_t r = CALL(fn(symbol, pfn, flags, status));
	if (r == cudaSuccess && pfn != NULL && (status == NULL || *status == 0))
		tfa_cuda_substitute(i == R_cudaGetDriverEntryPoint ? "cudaGetDriverEntryPoint"
								   : "cudaGetDriverEntryPoint_ptsz",
				    symbol, 13000, flags, pfn);
	return r;
}

TFA_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **pfn, unsigned long long flags,
					       cudaDriverEntryPointQueryResult *status);
TFA_EXPORT cudaError_t
cudaGetDriverEntryPoint(const char *symbol, void **pfn, unsigned long long flags,
			cudaDriverEntryPointQueryResult *status)
{
	return entry_point(R_cudaGetDriverEntryPoint, symbol, pfn, flags, status);
}

TFA_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **pfn, unsigned long long flags,
						    cudaDriverEntryPointQueryResult *status);
TFA_EXPORT cudaError_t
cudaGetDriverEntryPoint_ptsz(const char *symbol, void **pfn, unsigned long long flags,
			     cudaDriverEntryPointQueryResult *status)
{
	return entry_point(R_cudaGetDriverEntryPoint_ptsz, symbol, pfn, flags, status);
}

static cudaError_t
entry_point_by_version(int i, const char *symbol, void **pfn, unsigned version, unsigned long long flags,
		       cudaDriverEntryPointQueryResult *status)
{
	cudaError_t (*fn)(const char *, void **, unsigned, unsigned long long, cudaDriverEntryPointQueryResult *) =
		(cudaError_t(*)(const char *, void **, unsigned, unsigned long long,
				cudaDriverEntryPointQueryResult *))rt(i);

	if (fn == NULL)
		return cudaErrorInitializationError;
	cudaError_t r = CALL(fn(symbol, pfn, version, flags, status));
	if (r == cudaSuccess && pfn != NULL && (status == NULL || *status == 0))
		tfa_cuda_substitute(i == R_cudaGetDriverEntryPointByVersion ? "cudaGetDriverEntryPointByVersion"
									    : "cudaGetDriverEntryPointByVersion_ptsz",
				    symbol, (int)version, flags, pfn);
	return r;
}

TFA_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **pfn, unsigned version,
							unsigned long long flags,
							cudaDriverEntryPointQueryResult *status);
TFA_EXPORT cudaError_t
cudaGetDriverEntryPointByVersion(const char *symbol, void **pfn, unsigned version, unsigned long long flags,
				 cudaDriverEntryPointQueryResult *status)
{
	return entry_point_by_version(R_cudaGetDriverEntryPointByVersion, symbol, pfn, version, flags, status);
}

TFA_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **pfn, unsigned version,
							     unsigned long long flags,
							     cudaDriverEntryPointQueryResult *status);
TFA_EXPORT cudaError_t
cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **pfn, unsigned version,
				      unsigned long long flags, cudaDriverEntryPointQueryResult *status)
{
	return entry_point_by_version(R_cudaGetDriverEntryPointByVersion_ptsz, symbol, pfn, version, flags,
				      status);
}

#define RWRAP(n) [R_##n] = { #n, (void *)n }

static const struct rwrap rwraps[R_COUNT] = {
	RWRAP(cudaMalloc),
	RWRAP(cudaFree),
	RWRAP(cudaMallocHost),
	RWRAP(cudaHostAlloc),
	RWRAP(cudaFreeHost),
	RWRAP(cudaMallocManaged),
	RWRAP(cudaMallocPitch),
	RWRAP(cudaMallocAsync),
	RWRAP(cudaMallocAsync_ptsz),
	RWRAP(cudaFreeAsync),
	RWRAP(cudaFreeAsync_ptsz),
	RWRAP(cudaMallocFromPoolAsync),
	RWRAP(cudaGetDriverEntryPoint),
	RWRAP(cudaGetDriverEntryPoint_ptsz),
	RWRAP(cudaGetDriverEntryPointByVersion),
	RWRAP(cudaGetDriverEntryPointByVersion_ptsz),
	[R_cudaGetDevice] = { "cudaGetDevice", NULL },
};
