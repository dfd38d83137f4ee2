/* SPDX-License-Identifier: MIT */
/*
 * TEST DOUBLE of the CUDA driver, libcuda.so.1, for tfalloc's tests on
 * machines without a GPU.  It is not NVIDIA's driver and shares no code with
 * it: every call is written here from the documented behaviour, over host
 * memory.  See test/cuda/README.md.
 *
 * - Devices: FAKECUDA_DEVICES (default 2), each with FAKECUDA_MEMORY bytes
 *   (default 16 GiB) of "device memory"; an allocation past it fails with
 *   CUDA_ERROR_OUT_OF_MEMORY.
 * - Memory is real host memory from mmap (never malloc: tfalloc tracks
 *   malloc, and the double's storage must not look like the program's host
 *   allocations).  Each allocation is its own mapping, so pointers are unique
 *   while live.  The legacy 32-bit cuMemAlloc maps below 4 GiB (MAP_32BIT).
 * - Contexts: one primary context per device plus created ones; the current
 *   context is a per-thread stack.  Streams remember their context and
 *   device.  Stream-ordered frees happen at call time.
 * - VMM: cuMemCreate makes a memfd of the size, cuMemMap maps it over a range
 *   that cuMemAddressReserve reserved (PROT_NONE), cuMemSetAccess opens it.
 * - cuGetProcAddress(_v2): a table (base name, ABI version, per-thread?) ->
 *   function, newest first; FAKECUDA_GPA_MODE makes it return pointers the
 *   caller cannot identify (anonymous, alias, foreign, null).
 * - FAKECUDA_OOM_AFTER=N: every allocation after the first N fails with
 *   CUDA_ERROR_OUT_OF_MEMORY.  FAKECUDA_LOG=FILE: one line per call.
 *
 * Built with -Wl,-Bsymbolic-functions and without any dlsym: the pointers it
 * hands out are its own definitions, never a preloaded wrapper.
 */
#define FAKECUDA_INTERNAL 1
#include "fake_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FC_EXPORT __attribute__((visibility("default")))
#define FC_MAX_DEVICES 16
#define FC_MAX_CTX 256
#define FC_MAX_STREAMS 4096
#define FC_MAX_POOLS 256
#define FC_MAX_VMM 4096
#define FC_MAX_RESERVE 1024
#define FC_MAX_MAPS 4096
#define FC_TABLE_BITS 16
#define FC_TABLE_SIZE (1u << FC_TABLE_BITS)
#define FC_VMM_GRANULARITY ((size_t)2 << 20)
#define FC_PITCH_ALIGN 512
#define FC_CTX_MAGIC 0xfc0c7c7cu
#define FC_STREAM_MAGIC 0xfc057e4du
#define FC_POOL_MAGIC 0xfc09001u

/* ---- configuration and log ---------------------------------------------- */

static int fc_log_fd = -1;
static int fc_devices = 2;
static unsigned long long fc_memory = 16ull << 30;
static long long fc_oom_after = -1;
static unsigned long long fc_alloc_calls;
static int fc_initialized;

enum { GPA_NORMAL, GPA_ANONYMOUS, GPA_ALIAS, GPA_FOREIGN, GPA_NULL };
static int fc_gpa_mode = GPA_NORMAL;
static const char *fc_gpa_names; /* comma-separated base names, NULL: all but cuGetProcAddress */
static const char *const fc_gpa_mode_names[] = {"normal", "anonymous", "alias", "foreign", "null"};

static void __attribute__((format(printf, 1, 2))) fc_log(const char *fmt, ...)
{
	if (fc_log_fd < 0)
		return;
	int saved = errno;
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "[%d] ", (int)getpid());
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
	ssize_t w = write(fc_log_fd, buf, (size_t)n);
	(void)w;
	errno = saved;
}

static unsigned long long
fc_env_ull(const char *name, unsigned long long dflt)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return dflt;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end)
		return dflt;
	return v;
}

static void fc_atfork_prepare(void);
static void fc_atfork_parent(void);
static void fc_atfork_child(void);

__attribute__((constructor)) static void
fc_init_env(void)
{
	const char *log = getenv("FAKECUDA_LOG");
	if (log && *log)
		fc_log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	unsigned long long d = fc_env_ull("FAKECUDA_DEVICES", 2);
	fc_devices = d > FC_MAX_DEVICES ? FC_MAX_DEVICES : (int)d;
	fc_memory = fc_env_ull("FAKECUDA_MEMORY", fc_memory);
	const char *oom = getenv("FAKECUDA_OOM_AFTER");
	if (oom && *oom)
		fc_oom_after = (long long)fc_env_ull("FAKECUDA_OOM_AFTER", 0);
	const char *mode = getenv("FAKECUDA_GPA_MODE");
	if (mode && *mode) {
		for (int i = 0; i < 5; i++)
			if (strcmp(mode, fc_gpa_mode_names[i]) == 0)
				fc_gpa_mode = i;
	}
	const char *names = getenv("FAKECUDA_GPA_NAMES");
	if (names && *names)
		fc_gpa_names = names;
	pthread_atfork(fc_atfork_prepare, fc_atfork_parent, fc_atfork_child);
	fc_log("fakecuda: loaded devices=%d memory=%llu oom_after=%lld gpa_mode=%s", fc_devices,
	       fc_memory, fc_oom_after, fc_gpa_mode_names[fc_gpa_mode]);
}

static pthread_mutex_t fc_lock = PTHREAD_MUTEX_INITIALIZER;
static void
fc_atfork_prepare(void)
{
	pthread_mutex_lock(&fc_lock);
}
static void
fc_atfork_parent(void)
{
	pthread_mutex_unlock(&fc_lock);
}
static void
fc_atfork_child(void)
{
	pthread_mutex_init(&fc_lock, NULL);
}

/* ---- devices and contexts ------------------------------------------------ */

struct CUctx_st {
	unsigned magic;
	int device;
	int primary;
	int refcount;
	int live;
};
static struct CUctx_st fc_ctx[FC_MAX_CTX]; /* the first FC_MAX_DEVICES are the primary ones */
static unsigned long long fc_used[FC_MAX_DEVICES];

#define FC_STACK_DEPTH 32
static __thread CUcontext fc_tls_stack[FC_STACK_DEPTH];
static __thread int fc_tls_depth;

static CUcontext
fc_current(void)
{
	return fc_tls_depth > 0 ? fc_tls_stack[fc_tls_depth - 1] : NULL;
}

static int
fc_ctx_valid(CUcontext c)
{
	return c >= &fc_ctx[0] && c < &fc_ctx[FC_MAX_CTX] && c->magic == FC_CTX_MAGIC && c->live;
}

static int
fc_dev_valid(CUdevice d)
{
	return d >= 0 && d < fc_devices;
}

#define FC_NEED_INIT()                                \
	do {                                          \
		if (!fc_initialized)                  \
			return CUDA_ERROR_NOT_INITIALIZED; \
	} while (0)

/* The device of the current context, or an error. */
static CUresult
fc_current_device(int *dev)
{
	CUcontext c = fc_current();
	if (!c || !fc_ctx_valid(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	*dev = c->device;
	return CUDA_SUCCESS;
}

FC_EXPORT CUresult
cuInit(unsigned int flags)
{
	CUresult r = CUDA_SUCCESS;
	if (flags != 0)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (fc_devices == 0)
		r = CUDA_ERROR_NO_DEVICE;
	else
		__atomic_store_n(&fc_initialized, 1, __ATOMIC_RELEASE);
	fc_log("cuInit flags=%u -> %d", flags, r);
	return r;
}

FC_EXPORT CUresult
cuDriverGetVersion(int *v)
{
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 13000;
	fc_log("cuDriverGetVersion -> 0 version=13000");
	return CUDA_SUCCESS;
}

static const char *
fc_error_name(CUresult e)
{
	switch (e) {
	case CUDA_SUCCESS: return "CUDA_SUCCESS";
	case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
	case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
	case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
	case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
	case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
	case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
	case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
	case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
	case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
	default: return NULL;
	}
}

FC_EXPORT CUresult
cuGetErrorName(CUresult error, const char **p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	*p = fc_error_name(error);
	return *p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_EXPORT CUresult
cuGetErrorString(CUresult error, const char **p)
{
	return cuGetErrorName(error, p);
}

FC_EXPORT CUresult
cuGetExportTable(const void **pp, const CUuuid *id)
{
	char hex[33] = "";
	if (id)
		for (int i = 0; i < 16; i++)
			snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->bytes[i]);
	if (pp)
		*pp = NULL;
	fc_log("cuGetExportTable id=%s -> %d", hex, CUDA_ERROR_NOT_FOUND);
	return CUDA_ERROR_NOT_FOUND;
}

FC_EXPORT CUresult
cuDeviceGetCount(int *count)
{
	FC_NEED_INIT();
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = fc_devices;
	fc_log("cuDeviceGetCount -> 0 count=%d", fc_devices);
	return CUDA_SUCCESS;
}

FC_EXPORT CUresult
cuDeviceGet(CUdevice *device, int ordinal)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	if (!device)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!fc_dev_valid(ordinal))
		r = CUDA_ERROR_INVALID_DEVICE;
	else
		*device = ordinal;
	fc_log("cuDeviceGet ordinal=%d -> %d", ordinal, r);
	return r;
}

FC_EXPORT CUresult
cuDeviceGetName(char *name, int len, CUdevice dev)
{
	FC_NEED_INIT();
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "fakecuda test double device %d", dev);
	return CUDA_SUCCESS;
}

FC_EXPORT CUresult
cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	FC_NEED_INIT();
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = (size_t)fc_memory;
	return CUDA_SUCCESS;
}

FC_EXPORT CUresult
cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	size_t b;
	CUresult r = cuDeviceTotalMem_v2(&b, dev);
	if (r == CUDA_SUCCESS && bytes)
		*bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned int)b;
	return r;
}

static void
fc_primary_init(int dev)
{
	struct CUctx_st *c = &fc_ctx[dev];
	if (c->magic != FC_CTX_MAGIC) {
		c->device = dev;
		c->primary = 1;
		c->live = 1;
		__atomic_store_n(&c->magic, FC_CTX_MAGIC, __ATOMIC_RELEASE);
	}
}

FC_EXPORT CUresult
cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	if (!pctx)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!fc_dev_valid(dev))
		r = CUDA_ERROR_INVALID_DEVICE;
	else {
		pthread_mutex_lock(&fc_lock);
		fc_primary_init(dev);
		fc_ctx[dev].refcount++;
		pthread_mutex_unlock(&fc_lock);
		*pctx = &fc_ctx[dev];
	}
	fc_log("cuDevicePrimaryCtxRetain dev=%d -> %d ctx=%p", dev, r, r ? NULL : (void *)*pctx);
	return r;
}

FC_EXPORT CUresult
cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	if (!fc_dev_valid(dev))
		r = CUDA_ERROR_INVALID_DEVICE;
	else {
		pthread_mutex_lock(&fc_lock);
		if (fc_ctx[dev].refcount > 0)
			fc_ctx[dev].refcount--;
		else
			r = CUDA_ERROR_INVALID_CONTEXT;
		pthread_mutex_unlock(&fc_lock);
	}
	fc_log("cuDevicePrimaryCtxRelease dev=%d -> %d", dev, r);
	return r;
}

FC_EXPORT CUresult
cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return cuDevicePrimaryCtxRelease_v2(dev);
}

static void fc_push(CUcontext c);

FC_EXPORT CUresult
cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	if (!pctx)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!fc_dev_valid(dev))
		r = CUDA_ERROR_INVALID_DEVICE;
	else {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		pthread_mutex_lock(&fc_lock);
		for (int i = FC_MAX_DEVICES; i < FC_MAX_CTX; i++) {
			struct CUctx_st *c = &fc_ctx[i];
			if (c->magic == FC_CTX_MAGIC && c->live)
				continue;
			c->device = dev;
			c->primary = 0;
			c->refcount = 1;
			c->live = 1;
			c->magic = FC_CTX_MAGIC;
			*pctx = c;
			r = CUDA_SUCCESS;
			break;
		}
		pthread_mutex_unlock(&fc_lock);
		if (r == CUDA_SUCCESS)
			fc_push(*pctx);
	}
	fc_log("cuCtxCreate flags=%u dev=%d -> %d ctx=%p", flags, dev, r,
	       r ? NULL : (void *)*pctx);
	return r;
}

FC_EXPORT CUresult
cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}

FC_EXPORT CUresult
cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned int flags, CUdevice dev)
{
	(void)params;
	(void)n;
	return cuCtxCreate_v2(pctx, flags, dev);
}

FC_EXPORT CUresult
cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
{
	(void)params;
	return cuCtxCreate_v2(pctx, flags, dev);
}

FC_EXPORT CUresult
cuCtxDestroy_v2(CUcontext ctx)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&fc_lock);
	if (!fc_ctx_valid(ctx) || ctx->primary)
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		ctx->live = 0;
	pthread_mutex_unlock(&fc_lock);
	if (r == CUDA_SUCCESS)
		for (int i = 0; i < fc_tls_depth; i++)
			if (fc_tls_stack[i] == ctx)
				fc_tls_stack[i] = NULL;
	fc_log("cuCtxDestroy ctx=%p -> %d", (void *)ctx, r);
	return r;
}

FC_EXPORT CUresult
cuCtxDestroy(CUcontext ctx)
{
	return cuCtxDestroy_v2(ctx);
}

static void
fc_push(CUcontext c)
{
	if (fc_tls_depth < FC_STACK_DEPTH)
		fc_tls_stack[fc_tls_depth++] = c;
	else
		fc_tls_stack[FC_STACK_DEPTH - 1] = c;
}

FC_EXPORT CUresult
cuCtxSetCurrent(CUcontext ctx)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	if (ctx && !fc_ctx_valid(ctx))
		r = CUDA_ERROR_INVALID_CONTEXT;
	else if (!ctx) {
		if (fc_tls_depth > 0)
			fc_tls_depth--;
	} else if (fc_tls_depth > 0)
		fc_tls_stack[fc_tls_depth - 1] = ctx;
	else
		fc_push(ctx);
	fc_log("cuCtxSetCurrent ctx=%p -> %d", (void *)ctx, r);
	return r;
}

FC_EXPORT CUresult
cuCtxGetCurrent(CUcontext *pctx)
{
	FC_NEED_INIT();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = fc_current();
	fc_log("cuCtxGetCurrent -> 0 ctx=%p", (void *)*pctx);
	return CUDA_SUCCESS;
}

FC_EXPORT CUresult
cuCtxPushCurrent_v2(CUcontext ctx)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	if (!fc_ctx_valid(ctx))
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		fc_push(ctx);
	fc_log("cuCtxPushCurrent ctx=%p -> %d", (void *)ctx, r);
	return r;
}

FC_EXPORT CUresult
cuCtxPushCurrent(CUcontext ctx)
{
	return cuCtxPushCurrent_v2(ctx);
}

FC_EXPORT CUresult
cuCtxPopCurrent_v2(CUcontext *pctx)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	CUcontext c = NULL;
	if (fc_tls_depth == 0)
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		c = fc_tls_stack[--fc_tls_depth];
	if (pctx)
		*pctx = c;
	fc_log("cuCtxPopCurrent -> %d ctx=%p", r, (void *)c);
	return r;
}

FC_EXPORT CUresult
cuCtxPopCurrent(CUcontext *pctx)
{
	return cuCtxPopCurrent_v2(pctx);
}

/* CUDA 13: cuCtxGetDevice_v2(device, ctx); ctx NULL means the current one. */
FC_EXPORT CUresult
cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	int dev = -1;
	if (!device)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (ctx) {
		if (fc_ctx_valid(ctx))
			dev = ctx->device;
		else
			r = CUDA_ERROR_INVALID_CONTEXT;
	} else
		r = fc_current_device(&dev);
	if (r == CUDA_SUCCESS)
		*device = dev;
	fc_log("cuCtxGetDevice_v2 ctx=%p -> %d device=%d", (void *)ctx, r, dev);
	return r;
}

/* The 1-argument ABI (cudaVersion 2000). */
FC_EXPORT CUresult
cuCtxGetDevice(CUdevice *device)
{
	FC_NEED_INIT();
	int dev = -1;
	CUresult r = device ? fc_current_device(&dev) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*device = dev;
	fc_log("cuCtxGetDevice -> %d device=%d", r, dev);
	return r;
}

FC_EXPORT CUresult
cuCtxSynchronize_v2(CUcontext ctx)
{
	FC_NEED_INIT();
	CUresult r = ctx ? (fc_ctx_valid(ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT)
	                 : (fc_current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
	fc_log("cuCtxSynchronize_v2 ctx=%p -> %d", (void *)ctx, r);
	return r;
}

FC_EXPORT CUresult
cuCtxSynchronize(void)
{
	FC_NEED_INIT();
	CUresult r = fc_current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	fc_log("cuCtxSynchronize -> %d", r);
	return r;
}

/* ---- streams -------------------------------------------------------------- */

struct CUstream_st {
	unsigned magic;
	int live;
	CUcontext ctx;
	int device;
	unsigned flags;
};
static struct CUstream_st fc_streams[FC_MAX_STREAMS];

static int
fc_stream_valid(CUstream s)
{
	return s >= &fc_streams[0] && s < &fc_streams[FC_MAX_STREAMS] &&
	       s->magic == FC_STREAM_MAGIC && s->live;
}

/* The context and device of a stream; NULL, legacy and per-thread mean the current context. */
static CUresult
fc_stream_info(CUstream s, CUcontext *ctx, int *dev)
{
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
		CUcontext c = fc_current();
		if (!c || !fc_ctx_valid(c))
			return CUDA_ERROR_INVALID_CONTEXT;
		*ctx = c;
		*dev = c->device;
		return CUDA_SUCCESS;
	}
	if (!fc_stream_valid(s))
		return CUDA_ERROR_INVALID_HANDLE;
	*ctx = s->ctx;
	*dev = s->device;
	return CUDA_SUCCESS;
}

FC_EXPORT CUresult
cuStreamCreate(CUstream *ph, unsigned int flags)
{
	FC_NEED_INIT();
	int dev = -1;
	CUresult r = ph ? fc_current_device(&dev) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		pthread_mutex_lock(&fc_lock);
		for (int i = 0; i < FC_MAX_STREAMS; i++) {
			struct CUstream_st *s = &fc_streams[i];
			if (s->magic == FC_STREAM_MAGIC && s->live)
				continue;
			s->ctx = fc_current();
			s->device = dev;
			s->flags = flags;
			s->live = 1;
			s->magic = FC_STREAM_MAGIC;
			*ph = s;
			r = CUDA_SUCCESS;
			break;
		}
		pthread_mutex_unlock(&fc_lock);
	}
	fc_log("cuStreamCreate flags=%u -> %d stream=%p dev=%d", flags, r, r ? NULL : (void *)*ph,
	       dev);
	return r;
}

FC_EXPORT CUresult
cuStreamDestroy_v2(CUstream s)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&fc_lock);
	if (!fc_stream_valid(s))
		r = CUDA_ERROR_INVALID_HANDLE;
	else
		s->live = 0;
	pthread_mutex_unlock(&fc_lock);
	fc_log("cuStreamDestroy stream=%p -> %d", (void *)s, r);
	return r;
}

FC_EXPORT CUresult
cuStreamDestroy(CUstream s)
{
	return cuStreamDestroy_v2(s);
}

static CUresult
fc_stream_sync(const char *name, CUstream s)
{
	FC_NEED_INIT();
	CUcontext c;
	int dev;
	CUresult r = fc_stream_info(s, &c, &dev);
	fc_log("%s stream=%p -> %d", name, (void *)s, r);
	return r;
}

FC_EXPORT CUresult
cuStreamSynchronize(CUstream s)
{
	return fc_stream_sync("cuStreamSynchronize", s);
}

FC_EXPORT CUresult
cuStreamSynchronize_ptsz(CUstream s)
{
	return fc_stream_sync("cuStreamSynchronize_ptsz", s);
}

static CUresult
fc_stream_get_device(const char *name, CUstream s, CUdevice *device)
{
	FC_NEED_INIT();
	CUcontext c;
	int dev = -1;
	CUresult r = device ? fc_stream_info(s, &c, &dev) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*device = dev;
	fc_log("%s stream=%p -> %d device=%d", name, (void *)s, r, dev);
	return r;
}

FC_EXPORT CUresult
cuStreamGetDevice(CUstream s, CUdevice *device)
{
	return fc_stream_get_device("cuStreamGetDevice", s, device);
}

FC_EXPORT CUresult
cuStreamGetDevice_ptsz(CUstream s, CUdevice *device)
{
	return fc_stream_get_device("cuStreamGetDevice_ptsz", s, device);
}

static CUresult
fc_stream_get_ctx(const char *name, CUstream s, CUcontext *pctx)
{
	FC_NEED_INIT();
	CUcontext c = NULL;
	int dev;
	CUresult r = pctx ? fc_stream_info(s, &c, &dev) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*pctx = c;
	fc_log("%s stream=%p -> %d ctx=%p", name, (void *)s, r, (void *)c);
	return r;
}

FC_EXPORT CUresult
cuStreamGetCtx(CUstream s, CUcontext *pctx)
{
	return fc_stream_get_ctx("cuStreamGetCtx", s, pctx);
}

FC_EXPORT CUresult
cuStreamGetCtx_ptsz(CUstream s, CUcontext *pctx)
{
	return fc_stream_get_ctx("cuStreamGetCtx_ptsz", s, pctx);
}

/* ---- memory pools ------------------------------------------------------------ */

struct CUmemPoolHandle_st {
	unsigned magic;
	int live;
	int device;
	int is_default;
};
/* The first FC_MAX_DEVICES are the default pools. */
static struct CUmemPoolHandle_st fc_pools[FC_MAX_POOLS];

static int
fc_pool_valid(CUmemoryPool p)
{
	return p >= &fc_pools[0] && p < &fc_pools[FC_MAX_POOLS] && p->magic == FC_POOL_MAGIC &&
	       p->live;
}

FC_EXPORT CUresult
cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	if (!out)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!fc_dev_valid(dev))
		r = CUDA_ERROR_INVALID_DEVICE;
	else {
		pthread_mutex_lock(&fc_lock);
		struct CUmemPoolHandle_st *p = &fc_pools[dev];
		if (p->magic != FC_POOL_MAGIC) {
			p->device = dev;
			p->is_default = 1;
			p->live = 1;
			p->magic = FC_POOL_MAGIC;
		}
		pthread_mutex_unlock(&fc_lock);
		*out = p;
	}
	fc_log("cuDeviceGetDefaultMemPool dev=%d -> %d pool=%p", dev, r, r ? NULL : (void *)*out);
	return r;
}

FC_EXPORT CUresult
cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	int dev = props ? props->location.id : -1;
	if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!fc_dev_valid(dev))
		r = CUDA_ERROR_INVALID_DEVICE;
	else {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		pthread_mutex_lock(&fc_lock);
		for (int i = FC_MAX_DEVICES; i < FC_MAX_POOLS; i++) {
			struct CUmemPoolHandle_st *p = &fc_pools[i];
			if (p->magic == FC_POOL_MAGIC && p->live)
				continue;
			p->device = dev;
			p->is_default = 0;
			p->live = 1;
			p->magic = FC_POOL_MAGIC;
			*pool = p;
			r = CUDA_SUCCESS;
			break;
		}
		pthread_mutex_unlock(&fc_lock);
	}
	fc_log("cuMemPoolCreate dev=%d -> %d pool=%p", dev, r, r ? NULL : (void *)*pool);
	return r;
}

FC_EXPORT CUresult
cuMemPoolDestroy(CUmemoryPool pool)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&fc_lock);
	if (!fc_pool_valid(pool) || pool->is_default)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		pool->live = 0;
	pthread_mutex_unlock(&fc_lock);
	fc_log("cuMemPoolDestroy pool=%p -> %d", (void *)pool, r);
	return r;
}

FC_EXPORT CUresult
cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	FC_NEED_INIT();
	CUresult r = fc_pool_valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	fc_log("cuMemPoolTrimTo pool=%p keep=%zu -> %d", (void *)pool, keep, r);
	return r;
}

/* ---- the allocation table ---------------------------------------------------- */

enum { K_FREE = 0, K_DEVICE, K_PITCH, K_MANAGED, K_HOST, K_ASYNC, K_LEGACY, K_VMM, K_TOMB };
static const char *const fc_kind_names[] = {"free",  "device", "pitch", "managed", "host",
                                            "async", "legacy", "vmm",   "tomb"};

struct fc_block {
	uintptr_t addr;
	size_t size;     /* bytes the caller owns (pitch * height for pitch) */
	size_t map_size; /* bytes mapped */
	int kind;
	int device; /* -1: host memory */
	CUcontext ctx;
	CUmemoryPool pool;
};
static struct fc_block fc_table[FC_TABLE_SIZE];
static unsigned fc_table_live;

static unsigned
fc_hash(uintptr_t a)
{
	return (unsigned)(((a >> 12) * 0x9E3779B97F4A7C15ull) >> (64 - FC_TABLE_BITS));
}

/* With fc_lock held. */
static struct fc_block *
fc_find(uintptr_t a)
{
	unsigned h = fc_hash(a);
	for (unsigned i = 0; i < FC_TABLE_SIZE; i++) {
		struct fc_block *b = &fc_table[(h + i) & (FC_TABLE_SIZE - 1)];
		if (b->kind == K_FREE)
			return NULL;
		if (b->kind != K_TOMB && b->addr == a)
			return b;
	}
	return NULL;
}

static struct fc_block *
fc_insert(uintptr_t a)
{
	if (fc_table_live >= FC_TABLE_SIZE * 3 / 4)
		return NULL;
	unsigned h = fc_hash(a);
	for (unsigned i = 0; i < FC_TABLE_SIZE; i++) {
		struct fc_block *b = &fc_table[(h + i) & (FC_TABLE_SIZE - 1)];
		if (b->kind == K_FREE || b->kind == K_TOMB) {
			fc_table_live++;
			b->addr = a;
			return b;
		}
	}
	return NULL;
}

static int fc_vmm_block(uintptr_t a, struct fc_block *out);

/*
 * A copy of the block holding address a (interior pointers too; a VMM
 * mapping is a block of kind K_VMM), with fc_lock held.  0 when none.
 */
static int
fc_find_range(uintptr_t a, struct fc_block *out)
{
	struct fc_block *b = fc_find(a);
	if (b) {
		*out = *b;
		return 1;
	}
	for (unsigned i = 0; i < FC_TABLE_SIZE; i++) {
		b = &fc_table[i];
		if (b->kind != K_FREE && b->kind != K_TOMB && a >= b->addr && a < b->addr + b->size) {
			*out = *b;
			return 1;
		}
	}
	return fc_vmm_block(a, out);
}

static size_t
fc_page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return (n + pg - 1) / pg * pg;
}

/* Counts an allocation call against FAKECUDA_OOM_AFTER: 1 if it must fail. */
static int
fc_oom_injected(void)
{
	unsigned long long n = __atomic_add_fetch(&fc_alloc_calls, 1, __ATOMIC_RELAXED);
	return fc_oom_after >= 0 && n > (unsigned long long)fc_oom_after;
}

/*
 * Makes one allocation of `size` bytes (mapped `map_size`) of `kind` on
 * `device` (-1: host).  Device kinds count against FAKECUDA_MEMORY.
 */
static CUresult
fc_alloc(uintptr_t *out, size_t size, size_t map_size, int kind, int device, CUmemoryPool pool)
{
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (fc_oom_injected())
		return CUDA_ERROR_OUT_OF_MEMORY;
	int counted = kind == K_DEVICE || kind == K_PITCH || kind == K_ASYNC || kind == K_LEGACY;
	size_t msz = fc_page_round(map_size);
	if (msz < map_size)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fc_lock);
	if (counted && (fc_used[device] > fc_memory || size > fc_memory - fc_used[device])) {
		pthread_mutex_unlock(&fc_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (counted)
		fc_used[device] += size;
	pthread_mutex_unlock(&fc_lock);

	int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#ifdef MAP_32BIT
	if (kind == K_LEGACY)
		mflags |= MAP_32BIT;
#endif
	void *p = mmap(NULL, msz, PROT_READ | PROT_WRITE, mflags, -1, 0);
	int bad = p == MAP_FAILED;
	if (!bad && kind == K_LEGACY && (uintptr_t)p + msz > 0xffffffffu) {
		munmap(p, msz);
		bad = 1;
	}
	pthread_mutex_lock(&fc_lock);
	struct fc_block *b = bad ? NULL : fc_insert((uintptr_t)p);
	if (!b) {
		if (counted)
			fc_used[device] -= size;
		pthread_mutex_unlock(&fc_lock);
		if (!bad)
			munmap(p, msz);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	b->size = size;
	b->map_size = msz;
	b->kind = kind;
	b->device = device;
	b->ctx = fc_current();
	b->pool = pool;
	pthread_mutex_unlock(&fc_lock);
	*out = (uintptr_t)p;
	return CUDA_SUCCESS;
}

/* Frees the block at a if its kind is accepted by `kinds` (bit mask). */
static CUresult
fc_free(uintptr_t a, unsigned kinds, int *kind_out, int *dev_out, size_t *size_out)
{
	pthread_mutex_lock(&fc_lock);
	struct fc_block *b = fc_find(a);
	if (!b || !(kinds & (1u << b->kind))) {
		pthread_mutex_unlock(&fc_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	int kind = b->kind, dev = b->device;
	size_t size = b->size, msz = b->map_size;
	if (kind == K_DEVICE || kind == K_PITCH || kind == K_ASYNC || kind == K_LEGACY)
		fc_used[dev] -= size;
	b->kind = K_TOMB;
	fc_table_live--;
	/* Tombstones followed by an empty slot end no probe chain: empty them. */
	unsigned i = (unsigned)(b - fc_table);
	while (fc_table[(i + 1) & (FC_TABLE_SIZE - 1)].kind == K_FREE &&
	       fc_table[i].kind == K_TOMB) {
		fc_table[i].kind = K_FREE;
		i = (i - 1) & (FC_TABLE_SIZE - 1);
	}
	pthread_mutex_unlock(&fc_lock);
	munmap((void *)a, msz);
	*kind_out = kind;
	*dev_out = dev;
	*size_out = size;
	return CUDA_SUCCESS;
}

#define KM(k) (1u << (k))
#define FC_DEVICE_KINDS (KM(K_DEVICE) | KM(K_PITCH) | KM(K_MANAGED) | KM(K_ASYNC))

/* ---- synchronous allocations ------------------------------------------------- */

FC_EXPORT CUresult
cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	FC_NEED_INIT();
	int dev = -1;
	uintptr_t p = 0;
	CUresult r = dptr ? fc_current_device(&dev) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = fc_alloc(&p, bytesize, bytesize, K_DEVICE, dev, NULL);
	if (r == CUDA_SUCCESS)
		*dptr = p;
	fc_log("cuMemAlloc_v2 bytesize=%zu -> %d dptr=0x%llx dev=%d", bytesize, r,
	       (unsigned long long)p, dev);
	return r;
}

FC_EXPORT CUresult
cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                   unsigned int elem)
{
	FC_NEED_INIT();
	int dev = -1;
	uintptr_t p = 0;
	size_t pitch = (width + FC_PITCH_ALIGN - 1) / FC_PITCH_ALIGN * FC_PITCH_ALIGN;
	CUresult r = CUDA_SUCCESS;
	if (!dptr || !pPitch || width == 0 || height == 0 ||
	    (elem != 4 && elem != 8 && elem != 16) || pitch < width ||
	    (height && pitch > (size_t)-1 / height))
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = fc_current_device(&dev);
	if (r == CUDA_SUCCESS)
		r = fc_alloc(&p, pitch * height, pitch * height, K_PITCH, dev, NULL);
	if (r == CUDA_SUCCESS) {
		*dptr = p;
		*pPitch = pitch;
	}
	fc_log("cuMemAllocPitch_v2 width=%zu height=%zu elem=%u -> %d dptr=0x%llx pitch=%zu dev=%d",
	       width, height, elem, r, (unsigned long long)p, r ? (size_t)0 : pitch, dev);
	return r;
}

FC_EXPORT CUresult
cuMemFree_v2(CUdeviceptr dptr)
{
	FC_NEED_INIT();
	int kind = 0, dev = -1;
	size_t size = 0;
	CUresult r = fc_free((uintptr_t)dptr, FC_DEVICE_KINDS, &kind, &dev, &size);
	fc_log("cuMemFree_v2 dptr=0x%llx -> %d size=%zu dev=%d kind=%s", (unsigned long long)dptr,
	       r, size, dev, fc_kind_names[kind]);
	return r;
}

FC_EXPORT CUresult
cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	FC_NEED_INIT();
	int dev = -1;
	uintptr_t p = 0;
	CUresult r = CUDA_SUCCESS;
	if (!dptr || (flags != 1 && flags != 2))
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = fc_current_device(&dev);
	if (r == CUDA_SUCCESS)
		r = fc_alloc(&p, bytesize, bytesize, K_MANAGED, dev, NULL);
	if (r == CUDA_SUCCESS)
		*dptr = p;
	fc_log("cuMemAllocManaged bytesize=%zu flags=%u -> %d dptr=0x%llx dev=%d", bytesize, flags,
	       r, (unsigned long long)p, dev);
	return r;
}

static CUresult
fc_host_alloc(const char *name, void **pp, size_t bytesize, unsigned flags)
{
	FC_NEED_INIT();
	uintptr_t p = 0;
	int dev = -1;
	CUresult r = pp ? fc_current_device(&dev) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = fc_alloc(&p, bytesize, bytesize, K_HOST, -1, NULL);
	if (r == CUDA_SUCCESS)
		*pp = (void *)p;
	fc_log("%s bytesize=%zu flags=%u -> %d ptr=0x%llx", name, bytesize, flags, r,
	       (unsigned long long)p);
	return r;
}

FC_EXPORT CUresult
cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return fc_host_alloc("cuMemAllocHost_v2", pp, bytesize, 0);
}

FC_EXPORT CUresult
cuMemAllocHost(void **pp, unsigned int bytesize)
{
	return fc_host_alloc("cuMemAllocHost", pp, bytesize, 0);
}

FC_EXPORT CUresult
cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
	return fc_host_alloc("cuMemHostAlloc", pp, bytesize, flags);
}

FC_EXPORT CUresult
cuMemFreeHost(void *p)
{
	FC_NEED_INIT();
	int kind = 0, dev = -1;
	size_t size = 0;
	CUresult r = fc_free((uintptr_t)p, KM(K_HOST), &kind, &dev, &size);
	fc_log("cuMemFreeHost ptr=%p -> %d size=%zu", p, r, size);
	return r;
}

/* The legacy 32-bit ABI: pointers and sizes are 32 bits (cudaVersion 2000). */
FC_EXPORT CUresult
cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
	FC_NEED_INIT();
	int dev = -1;
	uintptr_t p = 0;
	CUresult r = dptr ? fc_current_device(&dev) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = fc_alloc(&p, bytesize, bytesize, K_LEGACY, dev, NULL);
	if (r == CUDA_SUCCESS)
		*dptr = (unsigned int)p;
	fc_log("cuMemAlloc(legacy) bytesize=%u -> %d dptr=0x%llx dev=%d", bytesize, r,
	       (unsigned long long)p, dev);
	return r;
}

FC_EXPORT CUresult
cuMemFree(unsigned int dptr)
{
	FC_NEED_INIT();
	int kind = 0, dev = -1;
	size_t size = 0;
	CUresult r = fc_free((uintptr_t)dptr, KM(K_LEGACY), &kind, &dev, &size);
	fc_log("cuMemFree(legacy) dptr=0x%x -> %d size=%zu dev=%d", dptr, r, size, dev);
	return r;
}

/* ---- stream-ordered allocations ------------------------------------------------ */

static CUresult
fc_alloc_async(const char *name, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
               int use_pool, CUstream s)
{
	FC_NEED_INIT();
	CUcontext c;
	int dev = -1;
	uintptr_t p = 0;
	CUresult r = dptr ? fc_stream_info(s, &c, &dev) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS && use_pool) {
		if (!fc_pool_valid(pool))
			r = CUDA_ERROR_INVALID_VALUE;
		else
			dev = pool->device;
	}
	if (r == CUDA_SUCCESS && !use_pool)
		r = cuDeviceGetDefaultMemPool(&pool, dev);
	if (r == CUDA_SUCCESS)
		r = fc_alloc(&p, bytesize, bytesize, K_ASYNC, dev, pool);
	if (r == CUDA_SUCCESS)
		*dptr = p;
	fc_log("%s bytesize=%zu pool=%p stream=%p -> %d dptr=0x%llx dev=%d", name, bytesize,
	       (void *)pool, (void *)s, r, (unsigned long long)p, dev);
	return r;
}

FC_EXPORT CUresult
cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	return fc_alloc_async("cuMemAllocAsync", dptr, bytesize, NULL, 0, s);
}

FC_EXPORT CUresult
cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	return fc_alloc_async("cuMemAllocAsync_ptsz", dptr, bytesize, NULL, 0, s);
}

FC_EXPORT CUresult
cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
	return fc_alloc_async("cuMemAllocFromPoolAsync", dptr, bytesize, pool, 1, s);
}

FC_EXPORT CUresult
cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
	return fc_alloc_async("cuMemAllocFromPoolAsync_ptsz", dptr, bytesize, pool, 1, s);
}

static CUresult
fc_free_async(const char *name, CUdeviceptr dptr, CUstream s)
{
	FC_NEED_INIT();
	CUcontext c;
	int sdev = -1, kind = 0, dev = -1;
	size_t size = 0;
	CUresult r = fc_stream_info(s, &c, &sdev);
	if (r == CUDA_SUCCESS)
		r = fc_free((uintptr_t)dptr, FC_DEVICE_KINDS, &kind, &dev, &size);
	fc_log("%s dptr=0x%llx stream=%p -> %d size=%zu dev=%d kind=%s", name,
	       (unsigned long long)dptr, (void *)s, r, size, dev, fc_kind_names[kind]);
	return r;
}

FC_EXPORT CUresult
cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	return fc_free_async("cuMemFreeAsync", dptr, s);
}

FC_EXPORT CUresult
cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
	return fc_free_async("cuMemFreeAsync_ptsz", dptr, s);
}

/* ---- queries ------------------------------------------------------------------- */

FC_EXPORT CUresult
cuMemGetInfo_v2(size_t *free_out, size_t *total)
{
	FC_NEED_INIT();
	int dev = -1;
	CUresult r = (free_out && total) ? fc_current_device(&dev) : CUDA_ERROR_INVALID_VALUE;
	unsigned long long used = 0;
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&fc_lock);
		used = fc_used[dev];
		pthread_mutex_unlock(&fc_lock);
		*free_out = (size_t)(used > fc_memory ? 0 : fc_memory - used);
		*total = (size_t)fc_memory;
	}
	fc_log("cuMemGetInfo_v2 -> %d dev=%d free=%llu total=%llu", r, dev,
	       r ? 0ull : fc_memory - used, r ? 0ull : fc_memory);
	return r;
}

FC_EXPORT CUresult
cuMemGetInfo(unsigned int *free_out, unsigned int *total)
{
	size_t f, t;
	CUresult r = cuMemGetInfo_v2(&f, &t);
	if (r == CUDA_SUCCESS && free_out && total) {
		*free_out = f > 0xffffffffu ? 0xffffffffu : (unsigned int)f;
		*total = t > 0xffffffffu ? 0xffffffffu : (unsigned int)t;
	}
	return r;
}

FC_EXPORT CUresult
cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	uintptr_t base = 0;
	size_t size = 0;
	struct fc_block b;
	pthread_mutex_lock(&fc_lock);
	if (!fc_find_range((uintptr_t)dptr, &b) || b.kind == K_HOST)
		r = CUDA_ERROR_NOT_FOUND;
	else {
		base = b.addr;
		size = b.size;
	}
	pthread_mutex_unlock(&fc_lock);
	if (r == CUDA_SUCCESS) {
		if (pbase)
			*pbase = base;
		if (psize)
			*psize = size;
	}
	fc_log("cuMemGetAddressRange_v2 dptr=0x%llx -> %d base=0x%llx size=%zu",
	       (unsigned long long)dptr, r, (unsigned long long)base, size);
	return r;
}

FC_EXPORT CUresult
cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	struct fc_block copy;
	pthread_mutex_lock(&fc_lock);
	int b = fc_find_range((uintptr_t)ptr, &copy);
	pthread_mutex_unlock(&fc_lock);
	long long shown = -1;
	if (!data)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!b)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		switch (attribute) {
		case CU_POINTER_ATTRIBUTE_CONTEXT:
			*(CUcontext *)data = copy.ctx;
			break;
		case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
			*(unsigned *)data = copy.kind == K_HOST ? CU_MEMORYTYPE_HOST
			                    : copy.kind == K_MANAGED ? CU_MEMORYTYPE_UNIFIED
			                                             : CU_MEMORYTYPE_DEVICE;
			shown = *(unsigned *)data;
			break;
		case CU_POINTER_ATTRIBUTE_IS_MANAGED:
			*(int *)data = copy.kind == K_MANAGED;
			shown = *(int *)data;
			break;
		case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
			/* Pinned host memory answers the device of its context, as the driver does. */
			*(int *)data = copy.kind == K_HOST ? (copy.ctx ? copy.ctx->device : 0)
			                                   : copy.device;
			shown = *(int *)data;
			break;
		case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
			*(CUdeviceptr *)data = copy.addr;
			shown = (long long)copy.addr;
			break;
		case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
			*(size_t *)data = copy.size;
			shown = (long long)copy.size;
			break;
		default:
			r = CUDA_ERROR_NOT_SUPPORTED;
		}
	fc_log("cuPointerGetAttribute attribute=%d ptr=0x%llx -> %d value=%lld", attribute,
	       (unsigned long long)ptr, r, shown);
	return r;
}

/* ---- virtual memory management -------------------------------------------------- */

struct fc_vmm {
	int live;     /* created and not yet gone */
	int released; /* cuMemRelease was called */
	int maps;     /* live mappings */
	int fd;
	size_t size;
	int loc_type, device;
};
static struct fc_vmm fc_vmm[FC_MAX_VMM];
#define FC_HANDLE_TAG 0xfc00000000000000ull

struct fc_range {
	uintptr_t addr;
	size_t size;
	int handle; /* fc_maps: index in fc_vmm; fc_reserves: 1 when live */
};
static struct fc_range fc_reserves[FC_MAX_RESERVE];
static struct fc_range fc_maps[FC_MAX_MAPS];

static struct fc_vmm *
fc_handle(CUmemGenericAllocationHandle h, int *idx)
{
	if ((h & 0xff00000000000000ull) != FC_HANDLE_TAG)
		return NULL;
	unsigned long long i = (h & ~0xff00000000000000ull) - 1;
	if (i >= FC_MAX_VMM || !fc_vmm[i].live || fc_vmm[i].released)
		return NULL;
	if (idx)
		*idx = (int)i;
	return &fc_vmm[i];
}

/* Drops a handle whose release and mappings are all gone (fc_lock held). */
static void
fc_vmm_maybe_close(struct fc_vmm *v)
{
	if (v->live && v->released && v->maps == 0) {
		close(v->fd);
		if (v->loc_type == CU_MEM_LOCATION_TYPE_DEVICE)
			fc_used[v->device] -= v->size;
		v->live = 0;
	}
}

FC_EXPORT CUresult
cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option)
{
	FC_NEED_INIT();
	CUresult r = (g && prop) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*g = FC_VMM_GRANULARITY;
	fc_log("cuMemGetAllocationGranularity option=%d -> %d granularity=%zu", option, r,
	       FC_VMM_GRANULARITY);
	return r;
}

FC_EXPORT CUresult
cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
            unsigned long long flags)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	int type = prop ? prop->location.type : -1, dev = prop ? prop->location.id : -1;
	CUmemGenericAllocationHandle h = 0;
	if (!handle || !prop || size == 0 || size % FC_VMM_GRANULARITY != 0 || flags != 0 ||
	    prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    type < CU_MEM_LOCATION_TYPE_DEVICE || type > CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (type == CU_MEM_LOCATION_TYPE_DEVICE && !fc_dev_valid(dev))
		r = CUDA_ERROR_INVALID_DEVICE;
	else if (fc_oom_injected())
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS) {
		int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
			if (fd >= 0)
				close(fd);
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			r = CUDA_ERROR_OUT_OF_MEMORY;
			pthread_mutex_lock(&fc_lock);
			int ok = type != CU_MEM_LOCATION_TYPE_DEVICE ||
			         (fc_used[dev] <= fc_memory && size <= fc_memory - fc_used[dev]);
			for (int i = 0; ok && i < FC_MAX_VMM; i++) {
				struct fc_vmm *v = &fc_vmm[i];
				if (v->live)
					continue;
				v->live = 1;
				v->released = 0;
				v->maps = 0;
				v->fd = fd;
				v->size = size;
				v->loc_type = type;
				v->device = type == CU_MEM_LOCATION_TYPE_DEVICE ? dev : -1;
				if (type == CU_MEM_LOCATION_TYPE_DEVICE)
					fc_used[dev] += size;
				h = FC_HANDLE_TAG | (unsigned long long)(i + 1);
				r = CUDA_SUCCESS;
				break;
			}
			pthread_mutex_unlock(&fc_lock);
			if (r != CUDA_SUCCESS)
				close(fd);
			else
				*handle = h;
		}
	}
	fc_log("cuMemCreate size=%zu location.type=%d location.id=%d -> %d handle=0x%llx", size,
	       type, dev, r, h);
	return r;
}

FC_EXPORT CUresult
cuMemRelease(CUmemGenericAllocationHandle h)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	size_t size = 0;
	int dev = -1;
	pthread_mutex_lock(&fc_lock);
	struct fc_vmm *v = fc_handle(h, NULL);
	if (!v)
		r = CUDA_ERROR_INVALID_VALUE;
	else {
		size = v->size;
		dev = v->device;
		v->released = 1;
		fc_vmm_maybe_close(v);
	}
	pthread_mutex_unlock(&fc_lock);
	fc_log("cuMemRelease handle=0x%llx -> %d size=%zu dev=%d", h, r, size, dev);
	return r;
}

FC_EXPORT CUresult
cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                    unsigned long long flags)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	uintptr_t p = 0;
	size_t align = alignment ? alignment : FC_VMM_GRANULARITY;
	if (!ptr || size == 0 || size % FC_VMM_GRANULARITY != 0 || (align & (align - 1)) != 0)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS) {
		/* Over-reserve, then trim to the alignment. */
		size_t span = size + align;
		void *m = mmap((void *)(uintptr_t)addr, span, PROT_NONE,
		               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED)
			r = CUDA_ERROR_OUT_OF_MEMORY;
		else {
			uintptr_t start = (uintptr_t)m, a = (start + align - 1) & ~(uintptr_t)(align - 1);
			if (a > start)
				munmap(m, a - start);
			if (start + span > a + size)
				munmap((void *)(a + size), start + span - (a + size));
			p = a;
			r = CUDA_ERROR_OUT_OF_MEMORY;
			pthread_mutex_lock(&fc_lock);
			for (int i = 0; i < FC_MAX_RESERVE; i++)
				if (!fc_reserves[i].handle) {
					fc_reserves[i] = (struct fc_range){p, size, 1};
					r = CUDA_SUCCESS;
					break;
				}
			pthread_mutex_unlock(&fc_lock);
			if (r == CUDA_SUCCESS)
				*ptr = p;
			else
				munmap((void *)p, size);
		}
	}
	fc_log("cuMemAddressReserve size=%zu alignment=%zu addr=0x%llx flags=%llu -> %d ptr=0x%llx",
	       size, alignment, addr, flags, r, (unsigned long long)p);
	return r;
}

FC_EXPORT CUresult
cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	FC_NEED_INIT();
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fc_lock);
	for (int i = 0; i < FC_MAX_RESERVE; i++)
		if (fc_reserves[i].handle && fc_reserves[i].addr == ptr && fc_reserves[i].size == size) {
			fc_reserves[i].handle = 0;
			r = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&fc_lock);
	if (r == CUDA_SUCCESS)
		munmap((void *)(uintptr_t)ptr, size);
	fc_log("cuMemAddressFree ptr=0x%llx size=%zu -> %d", ptr, size, r);
	return r;
}

/* A mapped VMM range holding a, as a block (fc_lock held). */
static int
fc_vmm_block(uintptr_t a, struct fc_block *out)
{
	for (int i = 0; i < FC_MAX_MAPS; i++)
		if (fc_maps[i].size && a >= fc_maps[i].addr && a < fc_maps[i].addr + fc_maps[i].size) {
			const struct fc_vmm *v = &fc_vmm[fc_maps[i].handle];
			memset(out, 0, sizeof(*out));
			out->addr = fc_maps[i].addr;
			out->size = fc_maps[i].size;
			out->map_size = fc_maps[i].size;
			out->kind = v->loc_type == CU_MEM_LOCATION_TYPE_DEVICE ? K_VMM : K_HOST;
			out->device = v->device;
			return 1;
		}
	return 0;
}

/* Is [a, a+n) inside a reservation?  fc_lock held. */
static int
fc_reserved(uintptr_t a, size_t n)
{
	for (int i = 0; i < FC_MAX_RESERVE; i++)
		if (fc_reserves[i].handle && a >= fc_reserves[i].addr &&
		    a + n <= fc_reserves[i].addr + fc_reserves[i].size)
			return 1;
	return 0;
}

FC_EXPORT CUresult
cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
         unsigned long long flags)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	int idx = -1;
	pthread_mutex_lock(&fc_lock);
	struct fc_vmm *v = fc_handle(h, &idx);
	if (!v || flags != 0 || size == 0 || offset > v->size || size > v->size - offset ||
	    size % FC_VMM_GRANULARITY || offset % FC_VMM_GRANULARITY ||
	    !fc_reserved((uintptr_t)ptr, size))
		r = CUDA_ERROR_INVALID_VALUE;
	else {
		int slot = -1;
		for (int i = 0; i < FC_MAX_MAPS; i++) {
			if (fc_maps[i].size && (uintptr_t)ptr < fc_maps[i].addr + fc_maps[i].size &&
			    fc_maps[i].addr < (uintptr_t)ptr + size) {
				slot = -2; /* overlaps a mapping */
				break;
			}
			if (!fc_maps[i].size && slot == -1)
				slot = i;
		}
		if (slot < 0)
			r = slot == -2 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
		else if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, v->fd,
		              (off_t)offset) == MAP_FAILED)
			r = CUDA_ERROR_OUT_OF_MEMORY;
		else {
			fc_maps[slot] = (struct fc_range){(uintptr_t)ptr, size, idx};
			v->maps++;
		}
	}
	pthread_mutex_unlock(&fc_lock);
	fc_log("cuMemMap ptr=0x%llx size=%zu offset=%zu handle=0x%llx -> %d", ptr, size, offset, h,
	       r);
	return r;
}

FC_EXPORT CUresult
cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	FC_NEED_INIT();
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fc_lock);
	for (int i = 0; i < FC_MAX_MAPS; i++)
		if (fc_maps[i].size && fc_maps[i].addr == ptr && fc_maps[i].size == size) {
			/* Back to a reserved, inaccessible range. */
			mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
			struct fc_vmm *v = &fc_vmm[fc_maps[i].handle];
			v->maps--;
			fc_vmm_maybe_close(v);
			fc_maps[i].size = 0;
			r = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&fc_lock);
	fc_log("cuMemUnmap ptr=0x%llx size=%zu -> %d", ptr, size, r);
	return r;
}

FC_EXPORT CUresult
cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	FC_NEED_INIT();
	CUresult r = CUDA_SUCCESS;
	int prot = PROT_NONE;
	if (!desc || count == 0)
		r = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
		if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
		    !fc_dev_valid(desc[i].location.id))
			r = CUDA_ERROR_INVALID_DEVICE;
		if (desc[i].flags & CU_MEM_ACCESS_FLAGS_PROT_READ)
			prot |= PROT_READ;
		if ((desc[i].flags & CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ==
		    CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			prot |= PROT_WRITE;
	}
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&fc_lock);
		/* Every byte must be mapped. */
		size_t covered = 0;
		for (int i = 0; i < FC_MAX_MAPS; i++)
			if (fc_maps[i].size && fc_maps[i].addr >= ptr &&
			    fc_maps[i].addr + fc_maps[i].size <= ptr + size)
				covered += fc_maps[i].size;
		if (covered != size || mprotect((void *)(uintptr_t)ptr, size, prot) != 0)
			r = CUDA_ERROR_INVALID_VALUE;
		pthread_mutex_unlock(&fc_lock);
	}
	fc_log("cuMemSetAccess ptr=0x%llx size=%zu count=%zu -> %d", ptr, size, count, r);
	return r;
}

/* ---- cuGetProcAddress ------------------------------------------------------------- */

struct fc_proc {
	const char *base;     /* the name callers ask for */
	int version;          /* lowest cudaVersion that gets this entry */
	int ptsz;             /* 1: the per-thread default stream variant */
	void *fn;             /* the exported function */
	const char *exported; /* its exported name */
};

#define P(base, ver, fn) {base, ver, 0, (void *)fn, #fn}
#define PT(base, ver, fn) {base, ver, 1, (void *)fn, #fn}

/* Entries of one base name: newest first. */
static const struct fc_proc fc_procs[] = {
	P("cuInit", 2000, cuInit),
	P("cuDriverGetVersion", 2020, cuDriverGetVersion),
	P("cuGetErrorName", 6000, cuGetErrorName),
	P("cuGetErrorString", 6000, cuGetErrorString),
	P("cuGetExportTable", 3000, cuGetExportTable),
	P("cuGetProcAddress", 12000, cuGetProcAddress_v2),
	P("cuGetProcAddress", 11030, cuGetProcAddress),
	P("cuDeviceGet", 2000, cuDeviceGet),
	P("cuDeviceGetCount", 2000, cuDeviceGetCount),
	P("cuDeviceGetName", 2000, cuDeviceGetName),
	P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
	P("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
	P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
	P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
	P("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
	P("cuCtxCreate", 12050, cuCtxCreate_v4),
	P("cuCtxCreate", 11040, cuCtxCreate_v3),
	P("cuCtxCreate", 3020, cuCtxCreate_v2),
	P("cuCtxCreate", 2000, cuCtxCreate),
	P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
	P("cuCtxDestroy", 2000, cuCtxDestroy),
	P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
	P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
	P("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
	P("cuCtxGetDevice", 2000, cuCtxGetDevice),
	P("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
	P("cuCtxSynchronize", 2000, cuCtxSynchronize),
	P("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
	P("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
	P("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
	P("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
	P("cuStreamCreate", 2000, cuStreamCreate),
	P("cuStreamDestroy", 4000, cuStreamDestroy_v2),
	P("cuStreamDestroy", 2000, cuStreamDestroy),
	PT("cuStreamSynchronize", 7000, cuStreamSynchronize_ptsz),
	P("cuStreamSynchronize", 2000, cuStreamSynchronize),
	PT("cuStreamGetDevice", 12080, cuStreamGetDevice_ptsz),
	P("cuStreamGetDevice", 12080, cuStreamGetDevice),
	PT("cuStreamGetCtx", 9020, cuStreamGetCtx_ptsz),
	P("cuStreamGetCtx", 9020, cuStreamGetCtx),
	P("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
	P("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
	P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
	P("cuMemGetInfo", 2000, cuMemGetInfo),
	P("cuMemAlloc", 3020, cuMemAlloc_v2),
	P("cuMemAlloc", 2000, cuMemAlloc),
	P("cuMemFree", 3020, cuMemFree_v2),
	P("cuMemFree", 2000, cuMemFree),
	P("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
	P("cuMemAllocManaged", 6000, cuMemAllocManaged),
	P("cuMemAllocHost", 3020, cuMemAllocHost_v2),
	P("cuMemAllocHost", 2000, cuMemAllocHost),
	P("cuMemHostAlloc", 2020, cuMemHostAlloc),
	P("cuMemFreeHost", 2000, cuMemFreeHost),
	PT("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
	P("cuMemAllocAsync", 11020, cuMemAllocAsync),
	PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
	P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
	PT("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
	P("cuMemFreeAsync", 11020, cuMemFreeAsync),
	P("cuMemPoolCreate", 11020, cuMemPoolCreate),
	P("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
	P("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
	P("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
	P("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
	P("cuMemCreate", 10020, cuMemCreate),
	P("cuMemRelease", 10020, cuMemRelease),
	P("cuMemAddressReserve", 10020, cuMemAddressReserve),
	P("cuMemAddressFree", 10020, cuMemAddressFree),
	P("cuMemMap", 10020, cuMemMap),
	P("cuMemUnmap", 10020, cuMemUnmap),
	P("cuMemSetAccess", 10020, cuMemSetAccess),
};
#define FC_NPROCS (sizeof(fc_procs) / sizeof(fc_procs[0]))
#define FC_SLOTS 160
_Static_assert(FC_NPROCS <= FC_SLOTS, "more table entries than trampoline slots");

/* The trampolines of fake_trampolines.c: alias ones in this library, foreign ones in another. */
extern void *fakecuda_alias_targets[FC_SLOTS];
extern void fakecuda_alias_0(void);
extern void *fakecuda_foreign_targets[FC_SLOTS];
extern void fakecuda_foreign_0(void);

/* Anonymous trampolines: executable code in an anonymous mapping, one per entry. */
static void *fc_anon_page;

static void *
fc_anonymous(unsigned i)
{
	pthread_mutex_lock(&fc_lock);
	if (!fc_anon_page) {
		size_t sz = fc_page_round(FC_SLOTS * 16);
		unsigned char *pg = mmap(NULL, sz, PROT_READ | PROT_WRITE,
		                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (pg != MAP_FAILED) {
			for (unsigned k = 0; k < FC_NPROCS; k++) {
				unsigned char *c = pg + 16 * k;
				uint64_t t = (uint64_t)(uintptr_t)fc_procs[k].fn;
#if defined(__x86_64__)
				c[0] = 0x48; /* movabs $t, %rax */
				c[1] = 0xb8;
				memcpy(c + 2, &t, 8);
				c[10] = 0xff; /* jmp *%rax */
				c[11] = 0xe0;
#elif defined(__aarch64__)
				uint32_t ldr = 0x58000050u, br = 0xd61f0200u; /* ldr x16, #8; br x16 */
				memcpy(c, &ldr, 4);
				memcpy(c + 4, &br, 4);
				memcpy(c + 8, &t, 8);
#endif
			}
			__builtin___clear_cache((char *)pg, (char *)pg + sz);
			if (mprotect(pg, sz, PROT_READ | PROT_EXEC) == 0)
				fc_anon_page = pg;
		}
	}
	pthread_mutex_unlock(&fc_lock);
	return fc_anon_page ? (unsigned char *)fc_anon_page + 16 * i : NULL;
}

/* Does FAKECUDA_GPA_MODE apply to this base name? */
static int
fc_mode_applies(const char *base)
{
	if (fc_gpa_mode == GPA_NORMAL)
		return 0;
	if (!fc_gpa_names)
		return strcmp(base, "cuGetProcAddress") != 0;
	if (strcmp(fc_gpa_names, "*") == 0)
		return 1;
	size_t n = strlen(base);
	for (const char *s = fc_gpa_names; *s;) {
		const char *e = strchr(s, ',');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		if (len == n && strncmp(s, base, n) == 0)
			return 1;
		if (!e)
			break;
		s = e + 1;
	}
	return 0;
}

static CUresult
fc_get_proc(const char *who, const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
            CUdriverProcAddressQueryResult *status)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult r = CUDA_ERROR_NOT_FOUND;
	void *fn = NULL;
	const char *what = "-";
	char shown[64];
	if (!pfn || !symbol || (flags & ~(cuuint64_t)3) != 0) {
		r = CUDA_ERROR_INVALID_VALUE;
		st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	} else {
		int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
		int has_ptsz = 0, found = 0;
		for (unsigned i = 0; i < FC_NPROCS; i++)
			if (strcmp(fc_procs[i].base, symbol) == 0) {
				found = 1;
				has_ptsz |= fc_procs[i].ptsz;
			}
		int pick = -1;
		for (unsigned i = 0; found && i < FC_NPROCS; i++) {
			const struct fc_proc *e = &fc_procs[i];
			if (strcmp(e->base, symbol) != 0 || e->ptsz != (want_ptsz && has_ptsz))
				continue;
			if (e->version <= cudaVersion) {
				pick = (int)i;
				break;
			}
		}
		if (pick >= 0) {
			const struct fc_proc *e = &fc_procs[pick];
			st = CU_GET_PROC_ADDRESS_SUCCESS;
			r = CUDA_SUCCESS;
			fn = e->fn;
			what = e->exported;
			if (fc_mode_applies(e->base)) {
				switch (fc_gpa_mode) {
				case GPA_ANONYMOUS:
					fn = fc_anonymous((unsigned)pick);
					what = "anonymous";
					break;
				case GPA_ALIAS:
					fakecuda_alias_targets[pick] = e->fn;
					fn = (void *)((uintptr_t)(void *)fakecuda_alias_0 + 16u * (unsigned)pick);
					snprintf(shown, sizeof(shown), "alias:fakecuda_alias_%d", pick);
					what = shown;
					break;
				case GPA_FOREIGN:
					fakecuda_foreign_targets[pick] = e->fn;
					fn = (void *)((uintptr_t)(void *)fakecuda_foreign_0 + 16u * (unsigned)pick);
					snprintf(shown, sizeof(shown), "foreign:fakecuda_foreign_%d", pick);
					what = shown;
					break;
				case GPA_NULL:
					fn = NULL;
					what = "null";
					break;
				}
			}
		} else if (found)
			st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		*pfn = fn;
	}
	if (status)
		*status = st;
	fc_log("%s symbol=%s cudaVersion=%d flags=%llu -> %d status=%d pfn=%s %p", who,
	       symbol ? symbol : "(null)", cudaVersion, flags, r, (int)st, what, fn);
	return r;
}

FC_EXPORT CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *symbolStatus)
{
	return fc_get_proc("cuGetProcAddress_v2", symbol, pfn, cudaVersion, flags, symbolStatus);
}

FC_EXPORT CUresult
cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return fc_get_proc("cuGetProcAddress", symbol, pfn, cudaVersion, flags, NULL);
}

/* For tests: the exported name behind a pointer this library handed out. */
FC_EXPORT const char *fakecuda_name_of(const void *fn);
FC_EXPORT const char *
fakecuda_name_of(const void *fn)
{
	for (unsigned i = 0; i < FC_NPROCS; i++)
		if (fc_procs[i].fn == fn)
			return fc_procs[i].exported;
	return NULL;
}

/* Called by the generated weak stubs (gen_stubs.sh) of every other exported name. */
__attribute__((visibility("hidden"))) void fakecuda_unimplemented(const char *name);
__attribute__((visibility("hidden"))) void
fakecuda_unimplemented(const char *name)
{
	fc_log("UNIMPLEMENTED %s -> %d", name, CUDA_ERROR_NOT_SUPPORTED);
}
