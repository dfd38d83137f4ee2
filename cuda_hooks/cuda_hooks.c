/* SPDX-License-Identifier: MIT */
/*
 * CUDA driver interception (CUDA.md §6): the exported versioned driver
 * entry points, the dlsym interposer's handle path, and cuGetProcAddress /
 * cuGetProcAddress_v2, which hand out the shim's wrappers in place of the
 * driver's functions, matched by pointer identity.
 *
 * Nothing CUDA happens at load time: the shim has no CUDA dependency and no
 * undefined CUDA symbol.  libcuda is found on the first wrapper call (or the
 * first dlsym of a "cu" name in a handle) with dlopen(RTLD_NOLOAD |
 * RTLD_NODELETE): an application's dlclose cannot unload it under the cached
 * pointers, and a process that does not use CUDA never loads it.  A wrapper
 * called before any libcuda is loaded loads it (the program asked for CUDA);
 * without one it returns CUDA_ERROR_NOT_INITIALIZED.
 *
 * Every wrapper calls the real function first (after a limit check), records
 * on success, and returns the real result unchanged.  Frees are always
 * forwarded, also for pointers the shim never saw.
 */
#include "cuda_hooks/cuda_hooks.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "core/control.h"
#include "core/devices.h"
#include "core/log.h"
#include "core/shim.h"
#include "core/thread.h"
#include "core/tracking_allocator.h"
#include "registry/backends.h"
#include "registry/registry.h"

#define TFA_EXPORT __attribute__((visibility("default")))

TFA_TLS int tfa_cuda_rt_depth;

/* Read by dlsym_entry.S. */
__attribute__((used)) void *(*tfa_real_dlsym)(void *handle, const char *name);

static pthread_once_t real_dlsym_once = PTHREAD_ONCE_INIT;

static void
find_real_dlsym(void)
{
	void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
#if defined(__x86_64__)
	if (p == NULL)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
#elif defined(__aarch64__)
	if (p == NULL)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
#endif
	if (p == NULL)
		(void)dlerror();
	__atomic_store_n(&tfa_real_dlsym, (void *(*)(void *, const char *))p, __ATOMIC_RELEASE);
}

void *(*tfa_cuda_real_dlsym(void))(void *, const char *)
{
	void *(*p)(void *, const char *) = __atomic_load_n(&tfa_real_dlsym, __ATOMIC_ACQUIRE);
	if (tfa_likely(p != NULL))
		return p;
	pthread_once(&real_dlsym_once, find_real_dlsym);
	return __atomic_load_n(&tfa_real_dlsym, __ATOMIC_ACQUIRE);
}

static void *
no_dlsym(void *handle, const char *name)
{
	(void)handle;
	(void)name;
	return NULL;
}

/* dlsym_entry.S, before the constructor: the function to jump to. */
__attribute__((used)) void *(*tfa_dlsym_resolve(void))(void *, const char *);
__attribute__((used)) void *(*tfa_dlsym_resolve(void))(void *, const char *)
{
	void *(*p)(void *, const char *) = tfa_cuda_real_dlsym();
	return p != NULL ? p : no_dlsym;
}

static const tfa_cuda_backend_t registry_backend;
static void retained_prefork(void);
static void retained_postfork_parent(void);
static void retained_postfork_child(void);

__attribute__((constructor)) static void
cuda_hooks_init(void)
{
	(void)tfa_cuda_real_dlsym();
	__atomic_store_n(&tfa_cuda_backend, &registry_backend, __ATOMIC_RELEASE);
	pthread_atfork(retained_prefork, retained_postfork_parent, retained_postfork_child);
}

/* ---- the driver's functions -------------------------------------------------------------- */

/* Each wrapped exported name: its wrapper, and the base name and ABI version cuGetProcAddress maps to it. */
enum {
	W_cuMemAlloc_v2,
	W_cuMemAllocPitch_v2,
	W_cuMemFree_v2,
	W_cuMemAllocManaged,
	W_cuMemAllocHost_v2,
	W_cuMemHostAlloc,
	W_cuMemFreeHost,
	W_cuMemAllocAsync,
	W_cuMemAllocAsync_ptsz,
	W_cuMemAllocFromPoolAsync,
	W_cuMemAllocFromPoolAsync_ptsz,
	W_cuMemFreeAsync,
	W_cuMemFreeAsync_ptsz,
	W_cuMemCreate,
	W_cuMemRelease,
	W_cuMemRetainAllocationHandle,
	W_cuMemMap,
	W_cuMemUnmap,
	W_cuGetProcAddress,
	W_cuGetProcAddress_v2,
	W_COUNT
};

/* Helpers called, never wrapped. */
enum {
	H_cuCtxGetDevice,
	H_cuStreamGetDevice,
	H_cuStreamGetDevice_ptsz,
	H_cuPointerGetAttribute,
	H_cuDeviceGetCount,
	H_cuDeviceGet,
	H_cuDevicePrimaryCtxRetain,
	H_cuCtxPushCurrent_v2,
	H_cuCtxPopCurrent_v2,
	H_COUNT
};

struct wrap {
	const char *name;
	const char *base;
	int abi;
	void *wrapper;
};

static void *real_fn[W_COUNT];
static void *helper_fn[H_COUNT];
static void *libcuda; /* set once every real_fn is */

static const char *const helper_names[H_COUNT] = {
	"cuCtxGetDevice",
	"cuStreamGetDevice",
	"cuStreamGetDevice_ptsz",
	"cuPointerGetAttribute",
	"cuDeviceGetCount",
	"cuDeviceGet",
	"cuDevicePrimaryCtxRetain",
	"cuCtxPushCurrent_v2",
	"cuCtxPopCurrent_v2",
};

/* Filled below the wrappers (they must be declared first). */
static const struct wrap wraps[W_COUNT];

/*
 * Finds libcuda, when loaded (or, with load, loads it), and resolves the
 * real functions.  Lock-free and idempotent: two threads racing store the
 * same values (each takes a reference, and libcuda is never unloaded).
 */
static bool
find_libcuda(bool load)
{
	if (tfa_likely(__atomic_load_n(&libcuda, __ATOMIC_ACQUIRE) != NULL))
		return true;
	void *(*rd)(void *, const char *) = tfa_cuda_real_dlsym();
	if (rd == NULL)
		return false;
	/* The loader's allocations here are the shim's. */
	tfa_guard_enter();
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
	if (h == NULL && load)
		h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (h == NULL) {
		/* The program's dlerror() must not see the shim's probe. */
		(void)dlerror();
		tfa_guard_exit();
		return false;
	}
	for (int i = 0; i < W_COUNT; i++)
		__atomic_store_n(&real_fn[i], rd(h, wraps[i].name), __ATOMIC_RELAXED);
	for (int i = 0; i < H_COUNT; i++)
		__atomic_store_n(&helper_fn[i], rd(h, helper_names[i]), __ATOMIC_RELAXED);
	(void)dlerror();
	tfa_guard_exit();
	__atomic_store_n(&libcuda, h, __ATOMIC_RELEASE);
	return true;
}

static inline void *
real(int w)
{
	if (tfa_unlikely(__atomic_load_n(&libcuda, __ATOMIC_ACQUIRE) == NULL) && !find_libcuda(true))
		return NULL;
	return __atomic_load_n(&real_fn[w], __ATOMIC_RELAXED);
}

#define REAL(name, type) ((type)real(W_##name))

/* ---- accounting --------------------------------------------------------------------------- */

unsigned
tfa_cuda_code_of_ordinal(int ordinal)
{
	unsigned code = tfa_devcode_cuda(ordinal);
	if (code >= TFA_DEVCODES) {
		TFA_LOG_ONCE("CUDA device %d: tfalloc tracks ordinals 0 to %u; counted as cuda:0",
			     ordinal, TFA_CUDA_ORDINALS - 1);
		code = TFA_DEVCODE_CUDA0;
	}
	return code;
}

unsigned
tfa_cuda_ctx_devcode(void)
{
	(void)find_libcuda(false);
	CUresult (*get)(CUdevice *) = (CUresult(*)(CUdevice *))__atomic_load_n(&helper_fn[H_cuCtxGetDevice], __ATOMIC_RELAXED);
	CUdevice dev = 0;

	if (get == NULL || get(&dev) != CUDA_SUCCESS)
		dev = 0;
	return tfa_cuda_code_of_ordinal(dev);
}

unsigned
tfa_cuda_stream_devcode(CUstream stream, bool ptsz)
{
	if (stream == NULL || stream == TFA_CU_STREAM_LEGACY || stream == TFA_CU_STREAM_PER_THREAD)
		return tfa_cuda_ctx_devcode();
	(void)find_libcuda(false);
	CUresult (*get)(CUstream, CUdevice *) = (CUresult(*)(CUstream, CUdevice *))__atomic_load_n(
		&helper_fn[ptsz ? H_cuStreamGetDevice_ptsz : H_cuStreamGetDevice], __ATOMIC_RELAXED);
	if (get == NULL)
		get = (CUresult(*)(CUstream, CUdevice *))__atomic_load_n(&helper_fn[H_cuStreamGetDevice],
									  __ATOMIC_RELAXED);
	CUdevice dev;
	if (get != NULL && get(stream, &dev) == CUDA_SUCCESS)
		return tfa_cuda_code_of_ordinal(dev);
	return tfa_cuda_ctx_devcode();
}

/* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
#define TFA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9

unsigned
tfa_cuda_pointer_devcode(uintptr_t ptr, unsigned otherwise)
{
	(void)find_libcuda(false);
	CUresult (*get)(void *, int, CUdeviceptr) = (CUresult(*)(void *, int, CUdeviceptr))__atomic_load_n(
		&helper_fn[H_cuPointerGetAttribute], __ATOMIC_RELAXED);
	int ordinal = -1;

	if (ptr == 0 || get == NULL || get(&ordinal, TFA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)ptr) != CUDA_SUCCESS
	    || ordinal < 0)
		return otherwise;
	return tfa_cuda_code_of_ordinal(ordinal);
}

void
tfa_cuda_end_on(tfa_cuda_call_t *c, unsigned code, bool ok, uintptr_t ptr, size_t actual, uint8_t kind)
{
	if (!c->active || code == c->code || !ok || ptr == 0) {
		tfa_cuda_end(c, ok, ptr, actual, kind);
		return;
	}
	tfa_tracking_allocator_t *to = tfa_device_tracker(code);
	if (to == NULL) {
		tfa_cuda_end(c, ok, ptr, actual, kind);
		return;
	}
	/* The device's reservation moves; the resource's stays (the same bytes). */
	tfa_shim_call_begin();
	tfa_tracking_unreserve(tfa_device_tracker(c->code), c->nbytes, 0, c->reserved);
	tfa_tracking_record_external(to, ptr, c->nbytes, actual, kind, c->stack_id, c->tag, false);
	tfa_device_sample(code, false);
	tfa_shim_call_end();
}

bool
tfa_cuda_begin(tfa_cuda_call_t *c, unsigned code, size_t nbytes)
{
	memset(c, 0, sizeof(*c));
	tfa_tracking_allocator_t *ta = tfa_device_tracker(code);
	if (ta == NULL || tfa_guard_active())
		return true;
	c->code = code;
	c->nbytes = nbytes;
	/* Bookkeeping holds the shim's locks: a fatal signal waits for its end (core/shim.h). */
	tfa_shim_call_begin();
	if (tfa_unlikely(tfa_control_tag_by_thread))
		tfa_control_thread_tag();
	c->tag = tfa_tls.tag;
	bool ok = tfa_tracking_reserve(ta, nbytes, c->tag, &c->reserved);
	if (ok) {
		c->active = true;
		c->stack_id = tfa_shim_stack_for(nbytes);
	}
	tfa_shim_call_end();
	return ok;
}

void
tfa_cuda_end(tfa_cuda_call_t *c, bool ok, uintptr_t ptr, size_t actual, uint8_t kind)
{
	if (!c->active)
		return;
	tfa_tracking_allocator_t *ta = tfa_device_tracker(c->code);
	tfa_shim_call_begin();
	if (ok && ptr != 0) {
		tfa_tracking_record_external(ta, ptr, c->nbytes, actual, kind, c->stack_id, c->tag,
					     c->reserved);
		tfa_device_sample(c->code, false);
	} else {
		tfa_tracking_unreserve(ta, c->nbytes, c->tag, c->reserved);
	}
	tfa_shim_call_end();
}

void
tfa_cuda_forget(uintptr_t ptr)
{
	tfa_record_t rec;

	if (ptr == 0 || !tfa_ptr_table_lookup(tfa_devices_table(), ptr, &rec))
		return;
	unsigned code = (unsigned)(rec.size_meta >> 53) & 31;
	tfa_tracking_allocator_t *ta = tfa_device_tracker_if_used(code);
	tfa_shim_call_begin();
	if (ta != NULL && tfa_tracking_forget(ta, ptr, NULL))
		tfa_device_sample(code, false);
	tfa_shim_call_end();
}

/*
 * A VMM handle's key in the device table: the handle shifted left by one.
 * Keys must be even (odd keys are the table's tombstones) and handles may be
 * odd; a handle below 2^47 (a driver's heap address) becomes a key in
 * [2^47, 2^48), which no user-space pointer reaches, so handle keys never
 * meet device or host pointers.
 */
static inline uintptr_t
handle_key(CUmemGenericAllocationHandle h)
{
	return (uintptr_t)h << 1;
}

/* ---- VMM handles retained again (cuMemRetainAllocationHandle) ------------------------------- */

#define RETAINED_MAX 256
static struct {
	CUmemGenericAllocationHandle handle;
	unsigned refs;
} retained[RETAINED_MAX];
static tfa_lock_t retained_lock = TFA_LOCK_INIT;

static void
retain_handle(CUmemGenericAllocationHandle h)
{
	tfa_lock(&retained_lock);
	int free_i = -1;
	for (int i = 0; i < RETAINED_MAX; i++) {
		if (retained[i].refs != 0 && retained[i].handle == h) {
			retained[i].refs++;
			tfa_unlock(&retained_lock);
			return;
		}
		if (retained[i].refs == 0 && free_i < 0)
			free_i = i;
	}
	if (free_i >= 0) {
		retained[free_i].handle = h;
		retained[free_i].refs = 1;
	} else {
		TFA_LOG_ONCE("more than %d retained CUDA allocation handles: a release may uncount one early",
			     RETAINED_MAX);
	}
	tfa_unlock(&retained_lock);
}

static void
retained_prefork(void)
{
	tfa_lock(&retained_lock);
}

static void
retained_postfork_parent(void)
{
	tfa_unlock(&retained_lock);
}

static void
retained_postfork_child(void)
{
	tfa_lock_init(&retained_lock);
}

/* True when h had an extra reference (now dropped): its memory stays. */
static bool
release_retained(CUmemGenericAllocationHandle h)
{
	bool had = false;

	tfa_lock(&retained_lock);
	for (int i = 0; i < RETAINED_MAX; i++) {
		if (retained[i].refs != 0 && retained[i].handle == h) {
			retained[i].refs--;
			had = true;
			break;
		}
	}
	tfa_unlock(&retained_lock);
	return had;
}

/* ---- the exported driver wrappers ---------------------------------------------------------- */

#define NESTED() (tfa_cuda_rt_depth > 0)

TFA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
TFA_EXPORT CUresult
cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	CUresult (*fn)(CUdeviceptr *, size_t) = REAL(cuMemAlloc_v2, CUresult(*)(CUdeviceptr *, size_t));
	tfa_cuda_call_t c;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (NESTED())
		return fn(dptr, bytesize);
	if (!tfa_cuda_begin(&c, tfa_cuda_ctx_devcode(), bytesize))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = fn(dptr, bytesize);
	tfa_cuda_end(&c, r == CUDA_SUCCESS && dptr != NULL, dptr != NULL ? (uintptr_t)*dptr : 0, bytesize,
		     TFA_KIND_DEVICE);
	return r;
}

TFA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
				       unsigned element_size);
TFA_EXPORT CUresult
cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned element_size)
{
	CUresult (*fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
		REAL(cuMemAllocPitch_v2, CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned));
	tfa_cuda_call_t c;
	size_t want, got;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (NESTED())
		return fn(dptr, pitch, width, height, element_size);
	if (__builtin_mul_overflow(width, height, &want))
		want = SIZE_MAX;
	if (!tfa_cuda_begin(&c, tfa_cuda_ctx_devcode(), want))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = fn(dptr, pitch, width, height, element_size);
	bool ok = r == CUDA_SUCCESS && dptr != NULL && pitch != NULL;
	if (!ok || __builtin_mul_overflow(*pitch, height, &got))
		got = want;
	tfa_cuda_end(&c, ok, ok ? (uintptr_t)*dptr : 0, got, TFA_KIND_DEVICE);
	return r;
}

TFA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr);
TFA_EXPORT CUresult
cuMemFree_v2(CUdeviceptr dptr)
{
	CUresult (*fn)(CUdeviceptr) = REAL(cuMemFree_v2, CUresult(*)(CUdeviceptr));

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	tfa_cuda_forget((uintptr_t)dptr);
	return fn(dptr);
}

TFA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned flags);
TFA_EXPORT CUresult
cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned flags)
{
	CUresult (*fn)(CUdeviceptr *, size_t, unsigned) =
		REAL(cuMemAllocManaged, CUresult(*)(CUdeviceptr *, size_t, unsigned));
	tfa_cuda_call_t c;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (NESTED())
		return fn(dptr, bytesize, flags);
	if (!tfa_cuda_begin(&c, TFA_DEVCODE_CUDA_MANAGED, bytesize))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = fn(dptr, bytesize, flags);
	tfa_cuda_end(&c, r == CUDA_SUCCESS && dptr != NULL, dptr != NULL ? (uintptr_t)*dptr : 0, bytesize,
		     TFA_KIND_DEVICE);
	return r;
}

TFA_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
TFA_EXPORT CUresult
cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	CUresult (*fn)(void **, size_t) = REAL(cuMemAllocHost_v2, CUresult(*)(void **, size_t));
	tfa_cuda_call_t c;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (NESTED())
		return fn(pp, bytesize);
	if (!tfa_cuda_begin(&c, TFA_DEVCODE_CUDA_HOST, bytesize))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = fn(pp, bytesize);
	tfa_cuda_end(&c, r == CUDA_SUCCESS && pp != NULL, pp != NULL ? (uintptr_t)*pp : 0, bytesize,
		     TFA_KIND_DEVICE);
	return r;
}

TFA_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned flags);
TFA_EXPORT CUresult
cuMemHostAlloc(void **pp, size_t bytesize, unsigned flags)
{
	CUresult (*fn)(void **, size_t, unsigned) = REAL(cuMemHostAlloc, CUresult(*)(void **, size_t, unsigned));
	tfa_cuda_call_t c;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (NESTED())
		return fn(pp, bytesize, flags);
	if (!tfa_cuda_begin(&c, TFA_DEVCODE_CUDA_HOST, bytesize))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = fn(pp, bytesize, flags);
	tfa_cuda_end(&c, r == CUDA_SUCCESS && pp != NULL, pp != NULL ? (uintptr_t)*pp : 0, bytesize,
		     TFA_KIND_DEVICE);
	return r;
}

TFA_EXPORT CUresult cuMemFreeHost(void *p);
TFA_EXPORT CUresult
cuMemFreeHost(void *p)
{
	CUresult (*fn)(void *) = REAL(cuMemFreeHost, CUresult(*)(void *));

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	tfa_cuda_forget((uintptr_t)p);
	return fn(p);
}

static CUresult
alloc_async(int w, bool ptsz, CUdeviceptr *dptr, size_t bytesize, CUstream stream)
{
	CUresult (*fn)(CUdeviceptr *, size_t, CUstream) = (CUresult(*)(CUdeviceptr *, size_t, CUstream))real(w);
	tfa_cuda_call_t c;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (NESTED())
		return fn(dptr, bytesize, stream);
	if (!tfa_cuda_begin(&c, tfa_cuda_stream_devcode(stream, ptsz), bytesize))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = fn(dptr, bytesize, stream);
	tfa_cuda_end(&c, r == CUDA_SUCCESS && dptr != NULL, dptr != NULL ? (uintptr_t)*dptr : 0, bytesize,
		     TFA_KIND_DEVICE);
	return r;
}

TFA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
TFA_EXPORT CUresult
cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream)
{
	return alloc_async(W_cuMemAllocAsync, false, dptr, bytesize, stream);
}

TFA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
TFA_EXPORT CUresult
cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream)
{
	return alloc_async(W_cuMemAllocAsync_ptsz, true, dptr, bytesize, stream);
}

/*
 * A pool may live on another device than the stream: the limit is checked on
 * the stream's device, the block charged to the device the driver says it is
 * on (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, asked right after the call).
 */
static CUresult
alloc_from_pool(int w, bool ptsz, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream)
{
	CUresult (*fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
		(CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))real(w);
	tfa_cuda_call_t c;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (NESTED())
		return fn(dptr, bytesize, pool, stream);
	if (!tfa_cuda_begin(&c, tfa_cuda_stream_devcode(stream, ptsz), bytesize))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = fn(dptr, bytesize, pool, stream);
	bool ok = r == CUDA_SUCCESS && dptr != NULL;
	uintptr_t p = ok ? (uintptr_t)*dptr : 0;
	tfa_cuda_end_on(&c, ok && c.active ? tfa_cuda_pointer_devcode(p, c.code) : c.code, ok, p, bytesize,
			TFA_KIND_DEVICE);
	return r;
}

TFA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					    CUstream stream);
TFA_EXPORT CUresult
cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream)
{
	return alloc_from_pool(W_cuMemAllocFromPoolAsync, false, dptr, bytesize, pool, stream);
}

TFA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
						 CUstream stream);
TFA_EXPORT CUresult
cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream)
{
	return alloc_from_pool(W_cuMemAllocFromPoolAsync_ptsz, true, dptr, bytesize, pool, stream);
}

/* Counted at call time: the program may not touch the memory after it (CUDA.md §5). */
static CUresult
free_async(int w, CUdeviceptr dptr, CUstream stream)
{
	CUresult (*fn)(CUdeviceptr, CUstream) = (CUresult(*)(CUdeviceptr, CUstream))real(w);

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	tfa_cuda_forget((uintptr_t)dptr);
	return fn(dptr, stream);
}

TFA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
TFA_EXPORT CUresult
cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
	return free_async(W_cuMemFreeAsync, dptr, stream);
}

TFA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
TFA_EXPORT CUresult
cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
	return free_async(W_cuMemFreeAsync_ptsz, dptr, stream);
}

/* VMM: the physical memory a handle holds, on the device of prop->location. */
TFA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
				const tfa_cu_mem_allocation_prop_t *prop, unsigned long long flags);
TFA_EXPORT CUresult
cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const tfa_cu_mem_allocation_prop_t *prop,
	    unsigned long long flags)
{
	CUresult (*fn)(CUmemGenericAllocationHandle *, size_t, const tfa_cu_mem_allocation_prop_t *,
		       unsigned long long) =
		REAL(cuMemCreate, CUresult(*)(CUmemGenericAllocationHandle *, size_t,
					      const tfa_cu_mem_allocation_prop_t *, unsigned long long));
	tfa_cuda_call_t c;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (NESTED() || prop == NULL)
		return fn(handle, size, prop, flags);
	unsigned code = prop->location.type == TFA_CU_MEM_LOCATION_TYPE_DEVICE
				? tfa_cuda_code_of_ordinal(prop->location.id)
				: TFA_DEVCODE_CUDA_HOST;
	if (!tfa_cuda_begin(&c, code, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = fn(handle, size, prop, flags);
	tfa_cuda_end(&c, r == CUDA_SUCCESS && handle != NULL, handle != NULL ? handle_key(*handle) : 0, size,
		     TFA_KIND_DEVICE_HANDLE);
	return r;
}

TFA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
TFA_EXPORT CUresult
cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult (*fn)(CUmemGenericAllocationHandle) = REAL(cuMemRelease, CUresult(*)(CUmemGenericAllocationHandle));

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!release_retained(handle))
		tfa_cuda_forget(handle_key(handle));
	return fn(handle);
}

TFA_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);
TFA_EXPORT CUresult
cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	CUresult (*fn)(CUmemGenericAllocationHandle *, void *) =
		REAL(cuMemRetainAllocationHandle, CUresult(*)(CUmemGenericAllocationHandle *, void *));
	tfa_record_t rec;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = fn(handle, addr);
	/* Another reference to a handle the shim counts: its release must not uncount it. */
	if (r == CUDA_SUCCESS && handle != NULL && *handle != 0
	    && tfa_ptr_table_lookup(tfa_devices_table(), handle_key(*handle), &rec))
		retain_handle(*handle);
	return r;
}

/* Mappings move no physical bytes: forwarded, wrapped so that every VMM entry point is the shim's. */
TFA_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			     unsigned long long flags);
TFA_EXPORT CUresult
cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
	 unsigned long long flags)
{
	CUresult (*fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) =
		REAL(cuMemMap, CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
					   unsigned long long));

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	return fn(ptr, size, offset, handle, flags);
}

TFA_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
TFA_EXPORT CUresult
cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult (*fn)(CUdeviceptr, size_t) = REAL(cuMemUnmap, CUresult(*)(CUdeviceptr, size_t));

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	return fn(ptr, size);
}

/* ---- cuGetProcAddress ---------------------------------------------------------------------- */

bool
tfa_cuda_is_wrapper(const void *p)
{
	for (int i = 0; i < W_COUNT; i++)
		if (wraps[i].wrapper == p)
			return true;
	return tfa_cudart_is_wrapper(p);
}

static void *
wrapper_of(void *p, const char **name)
{
	if (p == NULL)
		return NULL;
	if (find_libcuda(false)) {
		for (int i = 0; i < W_COUNT; i++) {
			if (__atomic_load_n(&real_fn[i], __ATOMIC_RELAXED) == p) {
				*name = wraps[i].name;
				return wraps[i].wrapper;
			}
		}
	}
	return tfa_cudart_wrapper_of(p, name);
}

void *
tfa_cuda_wrapper_of(void *p)
{
	const char *name;
	return wrapper_of(p, &name);
}

/*
 * A pointer handed out for `symbol`: the shim's wrapper when it is one of the
 * driver functions wrapped (identity, never name and version).  A request for
 * a wrapped base name at a version that maps to a wrapped ABI whose pointer
 * is not identified stays untracked, passed through (fail-open), said once.
 */
static void
substitute(const char *via, const char *symbol, int version, unsigned long long flags, void **pfn)
{
	const char *name = NULL;
	void *w = wrapper_of(*pfn, &name);

	/* Already the shim's (a runtime entry point over the driver's cuGetProcAddress wrapper). */
	if (w == NULL && tfa_cuda_is_wrapper(*pfn))
		return;
	if (w != NULL) {
		*pfn = w;
		if (tfa_shim_cuda_trace())
			tfa_log("cuda: %s(\"%s\", %d, flags %llu) -> tfalloc's %s", via,
				symbol != NULL ? symbol : "(null)", version, flags, name);
		return;
	}
	if (symbol == NULL)
		return;
	for (int i = 0; i < W_COUNT; i++) {
		if (version >= wraps[i].abi && strcmp(symbol, wraps[i].base) == 0) {
			/* A function of another library (a tool's own hook) or an alias: left alone. */
			TFA_LOG_ONCE("cuGetProcAddress(\"%s\", %d) returned a function tfalloc cannot "
				     "identify (%p): passed through, its allocations are not tracked",
				     symbol, version, *pfn);
			return;
		}
	}
}

TFA_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
TFA_EXPORT CUresult
cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	CUresult (*fn)(const char *, void **, int, cuuint64_t) =
		REAL(cuGetProcAddress, CUresult(*)(const char *, void **, int, cuuint64_t));

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = fn(symbol, pfn, version, flags);
	if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL)
		substitute("cuGetProcAddress", symbol, version, flags, pfn);
	return r;
}

TFA_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
					CUdriverProcAddressQueryResult *status);
TFA_EXPORT CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
		    CUdriverProcAddressQueryResult *status)
{
	CUresult (*fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
		REAL(cuGetProcAddress_v2,
		     CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *));

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = fn(symbol, pfn, version, flags, status);
	if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL
	    && (status == NULL || *status == CU_GET_PROC_ADDRESS_SUCCESS))
		substitute("cuGetProcAddress_v2", symbol, version, flags, pfn);
	return r;
}

void
tfa_cuda_substitute(const char *via, const char *symbol, int version, unsigned long long flags, void **pfn)
{
	if (pfn != NULL && *pfn != NULL)
		substitute(via, symbol, version, flags, pfn);
}

#define WRAP(n, base_, abi_) [W_##n] = { #n, base_, abi_, (void *)n }

static const struct wrap wraps[W_COUNT] = {
	WRAP(cuMemAlloc_v2, "cuMemAlloc", 3020),
	WRAP(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020),
	WRAP(cuMemFree_v2, "cuMemFree", 3020),
	WRAP(cuMemAllocManaged, "cuMemAllocManaged", 6000),
	WRAP(cuMemAllocHost_v2, "cuMemAllocHost", 3020),
	WRAP(cuMemHostAlloc, "cuMemHostAlloc", 2020),
	WRAP(cuMemFreeHost, "cuMemFreeHost", 2000),
	WRAP(cuMemAllocAsync, "cuMemAllocAsync", 11020),
	WRAP(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020),
	WRAP(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020),
	WRAP(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020),
	WRAP(cuMemFreeAsync, "cuMemFreeAsync", 11020),
	WRAP(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020),
	WRAP(cuMemCreate, "cuMemCreate", 10020),
	WRAP(cuMemRelease, "cuMemRelease", 10020),
	WRAP(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000),
	WRAP(cuMemMap, "cuMemMap", 10020),
	WRAP(cuMemUnmap, "cuMemUnmap", 10020),
	WRAP(cuGetProcAddress, "cuGetProcAddress", 11030),
	WRAP(cuGetProcAddress_v2, "cuGetProcAddress", 12000),
};

/* ---- dlsym in a handle (dlsym_entry.S) ------------------------------------------------------ */

__attribute__((used)) void *tfa_dlsym_handle(void *handle, const char *name);
__attribute__((used)) void *
tfa_dlsym_handle(void *handle, const char *name)
{
	void *(*rd)(void *, const char *) = tfa_cuda_real_dlsym();
	if (rd == NULL)
		return NULL;
	void *p = rd(handle, name);
	/* Only CUDA names cost more than the lookup. */
	if (p == NULL || name == NULL || name[0] != 'c' || name[1] != 'u')
		return p;
	const char *wname = NULL;
	void *w = wrapper_of(p, &wname);
	if (w == NULL && name[2] == 'd' && name[3] == 'a' && tfa_cudart_adopt(p))
		w = wrapper_of(p, &wname);
	if (w != NULL && tfa_shim_cuda_trace())
		tfa_log("cuda: dlsym(%p, \"%s\") -> tfalloc's %s", handle, name, wname);
	return w != NULL ? w : p;
}

/* ---- the registry's CUDA allocators (registry/cuda_allocator.c) ------------------------------ */

typedef struct CUctx_st *tfa_cu_context_t;

static bool
backend_available(void)
{
	return find_libcuda(false);
}

static void *
helper(int h)
{
	return find_libcuda(false) ? __atomic_load_n(&helper_fn[h], __ATOMIC_RELAXED) : NULL;
}

static int
backend_device_count(void)
{
	CUresult (*count)(int *) = (CUresult(*)(int *))helper(H_cuDeviceGetCount);
	int n = 0;

	return count != NULL && count(&n) == CUDA_SUCCESS ? n : 0;
}

/* Makes the primary context of `ordinal` current (retained once, kept). */
static bool
push_primary(int ordinal)
{
	static tfa_cu_context_t primary[TFA_REGISTRY_ORDINALS];
	CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))helper(H_cuDeviceGet);
	CUresult (*retain)(tfa_cu_context_t *, CUdevice) =
		(CUresult(*)(tfa_cu_context_t *, CUdevice))helper(H_cuDevicePrimaryCtxRetain);
	CUresult (*push)(tfa_cu_context_t) = (CUresult(*)(tfa_cu_context_t))helper(H_cuCtxPushCurrent_v2);
	CUdevice dev;

	if (ordinal < 0 || ordinal >= TFA_REGISTRY_ORDINALS || get == NULL || retain == NULL || push == NULL)
		return false;
	tfa_cu_context_t ctx = __atomic_load_n(&primary[ordinal], __ATOMIC_ACQUIRE);
	if (ctx == NULL) {
		if (get(&dev, ordinal) != CUDA_SUCCESS || retain(&ctx, dev) != CUDA_SUCCESS)
			return false;
		tfa_cu_context_t seen = NULL;
		/* A racing thread retained it too: one reference is kept more, harmless. */
		if (!__atomic_compare_exchange_n(&primary[ordinal], &seen, ctx, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			ctx = seen;
	}
	return push(ctx) == CUDA_SUCCESS;
}

static void
pop_context(void)
{
	CUresult (*pop)(tfa_cu_context_t *) = (CUresult(*)(tfa_cu_context_t *))helper(H_cuCtxPopCurrent_v2);
	tfa_cu_context_t old;

	if (pop != NULL)
		(void)pop(&old);
}

static int
backend_alloc(int ordinal, size_t nbytes, void **out)
{
	CUdeviceptr d = 0;

	if (!push_primary(ordinal))
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = cuMemAlloc_v2(&d, nbytes);
	pop_context();
	*out = r == CUDA_SUCCESS ? (void *)(uintptr_t)d : NULL;
	return r;
}

static int
backend_free(void *ptr)
{
	return cuMemFree_v2((CUdeviceptr)(uintptr_t)ptr);
}

static int
backend_alloc_host(size_t nbytes, void **out)
{
	if (!push_primary(0))
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = cuMemAllocHost_v2(out, nbytes);
	pop_context();
	return r;
}

static int
backend_free_host(void *ptr)
{
	return cuMemFreeHost(ptr);
}

static const tfa_cuda_backend_t registry_backend = {
	.available = backend_available,
	.device_count = backend_device_count,
	.alloc = backend_alloc,
	.free = backend_free,
	.alloc_host = backend_alloc_host,
	.free_host = backend_free_host,
};
