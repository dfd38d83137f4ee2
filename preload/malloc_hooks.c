/* SPDX-License-Identifier: MIT */
/*
 * The exported malloc family.  Each entry point does four things only: the C
 * semantics of its arguments (overflow, alignment rules, the realloc corner
 * cases, as glibc 2.36 has them), errno, and one call into core/shim.h.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "core/allocator.h"
#include "core/common.h"
#include "core/ptr_table.h"
#include "core/shim.h"


/* Declared here rather than through <stdlib.h>/<malloc.h> to keep their attributes off. */
void *malloc(size_t size);
void free(void *ptr);
TFA_EXPORT void *calloc(size_t nmemb, size_t size);
TFA_EXPORT void *realloc(void *ptr, size_t size);
TFA_EXPORT void *reallocarray(void *ptr, size_t nmemb, size_t size);
TFA_EXPORT int posix_memalign(void **memptr, size_t alignment, size_t size);
TFA_EXPORT void *aligned_alloc(size_t alignment, size_t size);
TFA_EXPORT void *memalign(size_t alignment, size_t size);
TFA_EXPORT void *valloc(size_t size);
TFA_EXPORT void *pvalloc(size_t size);
TFA_EXPORT size_t malloc_usable_size(void *ptr);

/*
 * A size past PTRDIFF_MAX fails, and every NULL comes with ENOMEM: the
 * general path sees to both (shim_malloc_general), and the fast path's NULL
 * is jemalloc's, which set it.
 */
static TFA_ALWAYS_INLINE void *
malloc_in(size_t size, int track)
{
	return tfa_shim_alloc_in(size, 0, TFA_KIND_MALLOC, false, track);
}

static TFA_ALWAYS_INLINE void
free_in(void *ptr, int track)
{
	if (ptr == NULL)
		return;
	/* errno is kept there. */
	tfa_shim_free_in(ptr, TFA_KIND_MALLOC, track);
}

/*
 * malloc and free are one indirect jump to the entry point of the process's
 * tracking mode: gcc saves the registers of a function's costliest path at
 * its entry, ahead of any test, so sample-only tracking paid the six of the
 * recording path on every call (a split in C kept them: see the README).
 * A test of the mode and a direct jump instead cost the recording path four
 * instructions a malloc/free pair (callgrind, trees 14: 1,377 -> 1,390
 * million); the indirect jump, predicted, none.  Used (and global, hidden) for the asm
 * below, which link-time optimisation does not see.
 */
__attribute__((used)) TFA_HIDDEN void *malloc_tracking_all(size_t size);
__attribute__((used)) TFA_HIDDEN void *malloc_sample_only(size_t size);
__attribute__((used)) TFA_HIDDEN void free_tracking_all(void *ptr);
__attribute__((used)) TFA_HIDDEN void free_sample_only(void *ptr);

void *
malloc_tracking_all(size_t size)
{
	return malloc_in(size, TFA_SHIM_TRACK_ALL);
}

void *
malloc_sample_only(size_t size)
{
	return malloc_in(size, TFA_SHIM_TRACK_SAMPLED);
}

void
free_tracking_all(void *ptr)
{
	free_in(ptr, TFA_SHIM_TRACK_ALL);
}

void
free_sample_only(void *ptr)
{
	free_in(ptr, TFA_SHIM_TRACK_SAMPLED);
}

#if defined(__x86_64__)
/* Where malloc and free go: TFA_SHIM_TRACK_ALL's from the first call, until init says otherwise. */
__attribute__((used)) TFA_HIDDEN void *(*tfa_malloc_entry)(size_t) = malloc_tracking_all;
__attribute__((used)) TFA_HIDDEN void (*tfa_free_entry)(void *) = free_tracking_all;

static void
use_sample_only_entries(void)
{
	__atomic_store_n(&tfa_malloc_entry, malloc_sample_only, __ATOMIC_RELEASE);
	__atomic_store_n(&tfa_free_entry, free_sample_only, __ATOMIC_RELEASE);
}

/* Before tfa_shim_init (preload/init.c's constructor runs after this priority). */
__attribute__((constructor(TFA_CTOR_PRIO_REGISTRY))) static void
malloc_entries_init(void)
{
	tfa_shim_on_sample_only = use_sample_only_entries;
}

/*
 * The exported malloc and free (default visibility: they interpose libc's).
 * No frame: the CFI at entry (return address at the CFA - 8) holds for the
 * whole of each.
 */
__asm__(".text\n"
	".globl malloc\n"
	".type malloc, @function\n"
	"malloc:\n"
	"\t.cfi_startproc\n"
	"\tjmp *tfa_malloc_entry(%rip)\n"
	"\t.cfi_endproc\n"
	".size malloc, .-malloc\n"
	".globl free\n"
	".type free, @function\n"
	"free:\n"
	"\t.cfi_startproc\n"
	"\tjmp *tfa_free_entry(%rip)\n"
	"\t.cfi_endproc\n"
	".size free, .-free\n");
#else
TFA_EXPORT void *
malloc(size_t size)
{
	return malloc_in(size, TFA_SHIM_TRACK_ANY);
}

TFA_EXPORT void
free(void *ptr)
{
	free_in(ptr, TFA_SHIM_TRACK_ANY);
}
#endif

TFA_EXPORT void *
calloc(size_t nmemb, size_t size)
{
	size_t bytes;

	if (__builtin_mul_overflow(nmemb, size, &bytes) || bytes > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	void *p = tfa_shim_alloc(bytes, 0, TFA_KIND_MALLOC, true);
	if (tfa_unlikely(p == NULL))
		errno = ENOMEM;
	return p;
}

TFA_EXPORT void *
realloc(void *ptr, size_t size)
{
	if (ptr == NULL)
		return malloc(size);
	if (size == 0) {
		/* glibc frees and returns NULL, errno untouched. */
		free(ptr);
		return NULL;
	}
	if (tfa_unlikely(size > PTRDIFF_MAX)) {
		errno = ENOMEM;
		return NULL;
	}
	void *q = tfa_shim_realloc(ptr, size);
	if (tfa_unlikely(q == NULL))
		errno = ENOMEM;
	return q;
}

TFA_EXPORT void *
reallocarray(void *ptr, size_t nmemb, size_t size)
{
	size_t bytes;

	if (__builtin_mul_overflow(nmemb, size, &bytes)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(ptr, bytes);
}

/*
 * glibc's _mid_memalign argument rules: alignments that round up to a power
 * of two, absurd ones are EINVAL.  Alignments every backend gives anyway are
 * plain mallocs; the others reach the backend (glibc's own shortcut for 16
 * does not hold for jemalloc's 8-byte blocks).  Returns NULL with *err set.
 */
static void *
aligned(size_t alignment, size_t size, int *err)
{
	if (alignment > SIZE_MAX / 2 + 1) {
		*err = EINVAL;
		return NULL;
	}
	if (alignment <= TFA_MIN_HOST_ALIGNMENT)
		alignment = 0;
	else if (!tfa_is_pow2(alignment))
		alignment = tfa_pow2_ceil(alignment);
	if (size > PTRDIFF_MAX || (alignment != 0 && size > PTRDIFF_MAX - alignment)) {
		*err = ENOMEM;
		return NULL;
	}
	void *p = tfa_shim_alloc(size, alignment, TFA_KIND_MALLOC, false);
	if (tfa_unlikely(p == NULL))
		*err = ENOMEM;
	return p;
}

TFA_EXPORT int
posix_memalign(void **memptr, size_t alignment, size_t size)
{
	int saved_errno = errno;
	int err = 0;

	/* POSIX: a power of two multiple of sizeof(void *); errno is not touched. */
	if (alignment % sizeof(void *) != 0 || !tfa_is_pow2(alignment))
		return EINVAL;
	void *p = aligned(alignment, size, &err);
	/* glibc 2.36's ENOMEM comes from its malloc, which sets errno too. */
	errno = p == NULL && err == ENOMEM ? ENOMEM : saved_errno;
	if (p == NULL)
		return err;
	*memptr = p;
	return 0;
}

TFA_EXPORT void *
memalign(size_t alignment, size_t size)
{
	int err = 0;
	void *p = aligned(alignment, size, &err);

	if (p == NULL)
		errno = err;
	return p;
}

/* glibc 2.36 implements aligned_alloc as memalign: no error for odd alignments. */
TFA_EXPORT void *
aligned_alloc(size_t alignment, size_t size)
{
	return memalign(alignment, size);
}

TFA_EXPORT void *
valloc(size_t size)
{
	return memalign((size_t)sysconf(_SC_PAGESIZE), size);
}

TFA_EXPORT void *
pvalloc(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t rounded;

	if (__builtin_add_overflow(size, page - 1, &rounded)) {
		errno = ENOMEM;
		return NULL;
	}
	return memalign(page, rounded & ~(page - 1));
}

TFA_EXPORT size_t
malloc_usable_size(void *ptr)
{
	return ptr == NULL ? 0 : tfa_shim_usable_size(ptr);
}
