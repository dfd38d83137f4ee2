/* SPDX-License-Identifier: MIT */
/*
 * glibc's allocator, reached through the __libc_* names that glibc exports
 * for exactly this purpose: they are not interposed by the shim's own malloc,
 * and need no dlsym, so they work from the first allocation of a process.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"

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

void
tfa_glibc_no_fast_bins(void)
{
	static int done;

	if (!__atomic_exchange_n(&done, 1, __ATOMIC_RELAXED))
		(void)mallopt(M_MXFAST, 0);
}

size_t
tfa_glibc_usable_size(const void *ptr)
{
	size_t (*fn)(void *) = real_usable_size;
	return fn != NULL ? fn((void *)(uintptr_t)ptr) : 0;
}

/* ---- blocks glibc made for others ----------------------------------------------------------- */

#define CHUNK_PREV_INUSE     UINT64_C(1)
#define CHUNK_IS_MMAPPED     UINT64_C(2)
#define CHUNK_NON_MAIN_ARENA UINT64_C(4)
#define CHUNK_SIZE_BITS      UINT64_C(7)

/* The start of the program's break (the kernel's start_brk), glibc's main arena; 1: unknown. */
static uintptr_t brk_start;
/* What glibc's thread cache writes into a chunk it holds (glibc 2.34 on); 1: unknown. */
static uint64_t tcache_key;

/*
 * Reads len bytes at addr, or says it cannot (unmapped meanwhile, or
 * process_vm_readv refused).  errno is kept: malloc_usable_size and realloc
 * come here.
 */
static bool
read_words(uintptr_t addr, void *out, size_t len)
{
	struct iovec local = { .iov_base = out, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)addr, .iov_len = len };
	int saved_errno = errno;
	bool ok = process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len;

	errno = saved_errno;
	return ok;
}

static void
foreign_learn(void)
{
	char buf[1024];

	if (__atomic_load_n(&brk_start, __ATOMIC_ACQUIRE) != 0)
		return;
	int saved_errno = errno; /* __libc_malloc's ENOMEM is not the program's */
	/* start_brk is field 47 of /proc/self/stat, the 45th after the command's ")". */
	uintptr_t start = 1;
	long n = tfa_read_proc_self("stat", buf, sizeof(buf) - 1);
	if (n > 0) {
		buf[n] = '\0';
		char *p = strrchr(buf, ')');
		for (int field = 2; p != NULL && field < 47; field++)
			p = strchr(p + 1, ' ');
		if (p != NULL)
			start = (uintptr_t)strtoull(p + 1, NULL, 10);
	}
	/*
	 * The key, from a chunk just given to the cache: glibc puts it in the
	 * word after the link, and takes it out when the chunk is handed out.
	 */
	uint64_t key = 1;
	void *t = __libc_malloc(24);
	if (t != NULL) {
		__libc_free(t);
		/* By the kernel: a load of freed memory is what valgrind and the sanitizers report. */
		if (!read_words((uintptr_t)t + 8, &key, sizeof(key)))
			key = 1;
	}
	__atomic_store_n(&tcache_key, key != 0 ? key : 1, __ATOMIC_RELAXED);
	__atomic_store_n(&brk_start, start != 0 ? start : 1, __ATOMIC_RELEASE);
	errno = saved_errno;
}

/* The chunk's size if ptr is a chunk of the main arena glibc's free would take; 0 otherwise. */
static size_t
main_arena_chunk(const void *ptr)
{
	uintptr_t p = (uintptr_t)ptr;
	uint64_t head[4]; /* prev_size, size | flags, the first two words of the block */
	uint64_t next[2];

	foreign_learn();
	uintptr_t lo = __atomic_load_n(&brk_start, __ATOMIC_ACQUIRE);
	uintptr_t hi = (uintptr_t)sbrk(0);
	if (lo <= 1 || hi == (uintptr_t)-1 || (p & (GLIBC_ALIGNMENT - 1)) != 0 || p < lo + 2 * GLIBC_SIZE_SZ
	    || p >= hi || !read_words(p - 2 * GLIBC_SIZE_SZ, head, sizeof(head)))
		return 0;
	uint64_t size = head[1] & ~CHUNK_SIZE_BITS;
	uintptr_t chunk = p - 2 * GLIBC_SIZE_SZ;
	if ((head[1] & (CHUNK_IS_MMAPPED | CHUNK_NON_MAIN_ARENA)) != 0 || size < GLIBC_MINSIZE
	    || (size & (GLIBC_ALIGNMENT - 1)) != 0 || size > hi - chunk - 2 * GLIBC_SIZE_SZ
	    || !read_words(chunk + size, next, sizeof(next)))
		return 0;
	/* The next chunk says this one is in use (glibc: "double free or corruption (!prev)"). */
	uint64_t next_size = next[1] & ~CHUNK_SIZE_BITS;
	if ((next[1] & CHUNK_PREV_INUSE) == 0 || next_size < 2 * GLIBC_SIZE_SZ || next_size > hi - chunk - size)
		return 0;
	/*
	 * A free chunk before it must say the size this one says it has (glibc:
	 * "corrupted size vs. prev_size"): a chunk merged into a free one before
	 * it keeps its old header, and the one after it too.
	 */
	if ((head[1] & CHUNK_PREV_INUSE) == 0) {
		uint64_t prev[2];
		if (head[0] < GLIBC_MINSIZE || (head[0] & (GLIBC_ALIGNMENT - 1)) != 0 || head[0] > chunk - lo
		    || !read_words(chunk - head[0], prev, sizeof(prev)) || (prev[1] & ~CHUNK_SIZE_BITS) != head[0])
			return 0;
	}
	/* In the thread cache already: free would say "double free detected in tcache 2". */
	if (head[3] == __atomic_load_n(&tcache_key, __ATOMIC_RELAXED))
		return 0;
	return (size_t)size;
}

size_t
tfa_glibc_foreign_size(const void *ptr)
{
	size_t size = main_arena_chunk(ptr);
	return size != 0 ? size - GLIBC_SIZE_SZ : 0;
}

bool
tfa_glibc_foreign_free(void *ptr)
{
	if (main_arena_chunk(ptr) == 0)
		return false;
	__libc_free(ptr);
	return true;
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
