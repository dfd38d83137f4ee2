/* SPDX-License-Identifier: MIT */
/*
 * The CUDA entries of the registry (DESIGN.md, DeviceAllocator): one
 * allocator per CUDA device ordinal ("cuda", device memory of that ordinal)
 * and the pinned host allocator ("cuda_host", a cpu entry whose attributes
 * are on_host | gpu_compatible: what the registry hands out for host memory
 * the GPU can DMA from).  They reach the driver through the table
 * cuda_hooks/ installs (tfa_cuda_backend); without it, or while the process
 * has no libcuda loaded, create() returns NULL and lookups move on.  The
 * memory goes through the shim's own CUDA wrappers: it is recorded per
 * device like the program's.
 */
#include <errno.h>

#include "registry/backends.h"
#include "registry/registry.h"

const tfa_cuda_backend_t *tfa_cuda_backend;

typedef struct cuda_allocator_s {
	tfa_allocator_t base;
} cuda_allocator_t;

static cuda_allocator_t cuda_devices[TFA_REGISTRY_ORDINALS];
static tfa_allocator_t cuda_host;

static const tfa_cuda_backend_t *
backend(void)
{
	const tfa_cuda_backend_t *b = __atomic_load_n(&tfa_cuda_backend, __ATOMIC_ACQUIRE);
	return b != NULL && b->available() ? b : NULL;
}

static void *
cuda_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
		  const tfa_allocation_attrs_t *attrs)
{
	const tfa_cuda_backend_t *b = backend();
	void *p = NULL;

	(void)attrs;
	/* Device allocations are aligned to 256 bytes at least. */
	if (b == NULL || alignment > 256 || b->alloc(self->device_ordinal, nbytes, &p) != 0)
		return NULL;
	return p;
}

static void
cuda_deallocate_raw(tfa_allocator_t *self, void *ptr)
{
	const tfa_cuda_backend_t *b = __atomic_load_n(&tfa_cuda_backend, __ATOMIC_ACQUIRE);

	(void)self;
	if (b != NULL)
		b->free(ptr);
}

static const tfa_allocator_ops_t cuda_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "cuda",
	.allocate_raw = cuda_allocate_raw,
	.deallocate_raw = cuda_deallocate_raw,
};

static void *
cuda_host_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
		       const tfa_allocation_attrs_t *attrs)
{
	const tfa_cuda_backend_t *b = backend();
	void *p = NULL;

	(void)self;
	/* Pinned host memory is page aligned. */
	if (b == NULL || alignment > 4096 || b->alloc_host(nbytes, &p) != 0)
		return NULL;
	if (attrs != NULL && attrs->zero_fill)
		__builtin_memset(p, 0, nbytes);
	return p;
}

static void
cuda_host_deallocate_raw(tfa_allocator_t *self, void *ptr)
{
	const tfa_cuda_backend_t *b = __atomic_load_n(&tfa_cuda_backend, __ATOMIC_ACQUIRE);

	(void)self;
	if (b != NULL)
		b->free_host(ptr);
}

static const tfa_allocator_ops_t cuda_host_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "cuda_host",
	.allocate_raw = cuda_host_allocate_raw,
	.deallocate_raw = cuda_host_deallocate_raw,
};

static tfa_allocator_t *
cuda_create(int ordinal)
{
	const tfa_cuda_backend_t *b = backend();

	if (b == NULL || ordinal < 0 || ordinal >= TFA_REGISTRY_ORDINALS || ordinal >= b->device_count())
		return NULL;
	cuda_allocator_t *a = &cuda_devices[ordinal];
	a->base.ops = &cuda_ops;
	a->base.device = TFA_DEVICE_CUDA;
	a->base.device_ordinal = ordinal;
	a->base.backend_id = TFA_BACKEND_CUDA;
	return &a->base;
}

static tfa_allocator_t *
cuda_host_create(int ordinal)
{
	if (ordinal != 0 || backend() == NULL)
		return NULL;
	cuda_host.ops = &cuda_host_ops;
	cuda_host.device = TFA_DEVICE_CPU;
	cuda_host.device_ordinal = 0;
	cuda_host.backend_id = TFA_BACKEND_CUDA;
	return &cuda_host;
}

TFA_REGISTER_ALLOCATOR_LATE("cuda", 100, TFA_DEVICE_CUDA, TFA_ATTR_GPU_COMPATIBLE, cuda_create)
/* Below the host allocators: chosen only for gpu_compatible host memory (or by name). */
TFA_REGISTER_ALLOCATOR_LATE("cuda_host", 10, TFA_DEVICE_CPU,
		       TFA_ATTR_ON_HOST | TFA_ATTR_NIC_COMPATIBLE | TFA_ATTR_GPU_COMPATIBLE, cuda_host_create)
