/* SPDX-License-Identifier: MIT */
/*
 * glibc's allocator, reached through the __libc_* names that glibc exports
 * for exactly this purpose: they are not interposed by the shim's own malloc,
 * and need no dlsym, so they work from the first allocation of a process.
 */
#include <dlfcn.h>
#include <string.h>

#include "core/thread.h"
#include "registry/backends.h"
#include "registry/registry.h"

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *ptr);

/* glibc's malloc alignment on x86-64; larger alignments need memalign. */
#define GLIBC_ALIGNMENT 16
#define GLIBC_SIZE_SZ   8
#define GLIBC_MINSIZE   32

static size_t (*real_usable_size)(void *);

void
tfa_glibc_allocator_resolve(void)
{
	/* RTLD_NEXT from here finds glibc's definition, past the shim's own. */
	tfa_guard_enter();
	void *sym = dlvsym(RTLD_NEXT, "malloc_usable_size", "GLIBC_2.2.5");
	if (sym == NULL)
		sym = dlsym(RTLD_NEXT, "malloc_usable_size");
	tfa_guard_exit();
	memcpy(&real_usable_size, &sym, sizeof(sym));
}

size_t
tfa_glibc_usable_size(const void *ptr)
{
	size_t (*fn)(void *) = real_usable_size;
	return fn != NULL ? fn((void *)(uintptr_t)ptr) : 0;
}

static void *
glibc_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
		   const tfa_allocation_attrs_t *attrs)
{
	(void)self;
	if (alignment <= GLIBC_ALIGNMENT)
		return attrs->zero_fill ? __libc_calloc(1, nbytes) : __libc_malloc(nbytes);
	void *p = __libc_memalign(alignment, nbytes);
	if (p != NULL && attrs->zero_fill)
		memset(p, 0, nbytes);
	return p;
}

static void
glibc_deallocate_raw(tfa_allocator_t *self, void *ptr)
{
	(void)self;
	__libc_free(ptr);
}

static void *
glibc_reallocate_raw(tfa_allocator_t *self, void *ptr, size_t old_size, size_t nbytes,
		     size_t alignment)
{
	(void)self;
	if (alignment <= GLIBC_ALIGNMENT)
		return __libc_realloc(ptr, nbytes);
	/* realloc keeps only the default alignment; keep the one asked for. */
	void *fresh = __libc_memalign(alignment, nbytes);
	if (fresh == NULL)
		return NULL;
	memcpy(fresh, ptr, old_size < nbytes ? old_size : nbytes);
	__libc_free(ptr);
	return fresh;
}

static size_t
glibc_allocated_size_slow(const tfa_allocator_t *self, const void *ptr)
{
	(void)self;
	return tfa_glibc_usable_size(ptr);
}

/*
 * glibc's request2size less the chunk header: what a heap chunk for nbytes
 * gives.  Computed from the request, so a pointer's allocated size is the
 * same when it is made and when it is freed, before and after init.
 */
static size_t
glibc_good_size(const tfa_allocator_t *self, size_t nbytes, size_t alignment)
{
	(void)self;
	(void)alignment;
	size_t chunk = (nbytes + GLIBC_SIZE_SZ + GLIBC_ALIGNMENT - 1) & ~(size_t)(GLIBC_ALIGNMENT - 1);
	if (chunk < GLIBC_MINSIZE || chunk < nbytes)
		chunk = GLIBC_MINSIZE > nbytes ? GLIBC_MINSIZE : nbytes + GLIBC_SIZE_SZ;
	return chunk - GLIBC_SIZE_SZ;
}

static void
glibc_free_sized_fast(void *ptr, size_t nbytes)
{
	(void)nbytes;
	__libc_free(ptr);
}

static const tfa_allocator_ops_t glibc_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "glibc",
	.allocate_raw = glibc_allocate_raw,
	.deallocate_raw = glibc_deallocate_raw,
	.allocated_size_slow = glibc_allocated_size_slow,
	.reallocate_raw = glibc_reallocate_raw,
	.good_size = glibc_good_size,
	.malloc_fast = __libc_malloc,
	.free_sized_fast = glibc_free_sized_fast,
	/* No usable_table: glibc serves allocations before any constructor could fill one. */
};

tfa_allocator_t tfa_glibc_allocator = {
	.ops = &glibc_ops,
	.device = TFA_DEVICE_CPU,
	.device_ordinal = 0,
	.backend_id = TFA_BACKEND_GLIBC,
};

static tfa_allocator_t *
glibc_create(int ordinal)
{
	if (ordinal != 0)
		return NULL;
	if (real_usable_size == NULL)
		tfa_glibc_allocator_resolve();
	return &tfa_glibc_allocator;
}

TFA_REGISTER_ALLOCATOR("glibc", 100, TFA_DEVICE_CPU, TFA_ATTR_ON_HOST | TFA_ATTR_NIC_COMPATIBLE,
		       glibc_create)
