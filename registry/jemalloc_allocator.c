/* SPDX-License-Identifier: MIT */
/*
 * jemalloc through its non-standard API (mallocx, dallocx, sdallocx, rallocx,
 * sallocx, nallocx), whose names collide with no standard one.
 *
 * Which jemalloc: when the program links Debian's libjemalloc.so.2 itself,
 * that very instance (found with RTLD_NOLOAD), so that pointers the program
 * gets from malloc() stay valid for its own calls to jemalloc's extended API.
 * Otherwise a private copy linked into libtfalloc.so, built from Debian's
 * libjemalloc_pic.a with every public name prefixed tfa_je_
 * (registry/make_private_jemalloc.sh).  Loading libjemalloc.so.2 with dlopen
 * instead is not possible: it needs static TLS, which glibc reserves only at
 * start-up, and it would bring libstdc++ into every C program.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>

#include "core/log.h"
#include "core/thread.h"
#include "registry/backends.h"
#include "registry/jemalloc_fast.h"
#include "registry/registry.h"

#define JEMALLOC_SONAME "libjemalloc.so.2"
#define MALLOCX_ZERO    0x40
/* jemalloc aligns every block to 8 (its smallest class); more needs a flag. */
#define JE_MIN_ALIGN    TFA_MIN_HOST_ALIGNMENT

struct jemalloc_api {
	void *(*malloc)(size_t size);
	void *(*mallocx)(size_t size, int flags);
	void (*dallocx)(void *ptr, int flags);
	void (*sdallocx)(void *ptr, size_t size, int flags);
	void *(*rallocx)(void *ptr, size_t size, int flags);
	size_t (*sallocx)(const void *ptr, int flags);
	size_t (*nallocx)(size_t size, int flags);
	int (*mallctl)(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
};

static struct jemalloc_api je;

/*
 * Usable sizes of small requests, from nallocx at start-up: every size class
 * is a multiple of 8, so one entry per 8 bytes answers nallocx without the
 * call (it runs twice per malloc/free pair in the tracker).
 */
#define SMALL_MAX TFA_JE_SMALL_MAX
uint32_t tfa_jemalloc_usable[SMALL_MAX / 8 + 1];

static inline int
align_flag(size_t alignment)
{
	/* MALLOCX_LG_ALIGN(lg): the flag's low bits are lg(alignment). */
	return alignment > JE_MIN_ALIGN ? __builtin_ctzl(alignment) : 0;
}

static void *
jemalloc_allocate_raw(tfa_allocator_t *self, size_t alignment, size_t nbytes,
		      const tfa_allocation_attrs_t *attrs)
{
	(void)self;
	int flags = align_flag(alignment) | (attrs->zero_fill ? MALLOCX_ZERO : 0);
	/* malloc has jemalloc's fast path; mallocx goes through the general one. */
	return flags == 0 ? je.malloc(nbytes) : je.mallocx(nbytes, flags);
}

static void
jemalloc_deallocate_raw(tfa_allocator_t *self, void *ptr)
{
	(void)self;
	je.dallocx(ptr, 0);
}

static void
jemalloc_deallocate_raw_sized(tfa_allocator_t *self, void *ptr, size_t nbytes, size_t alignment)
{
	(void)self;
	je.sdallocx(ptr, nbytes, align_flag(alignment));
}

static void *
jemalloc_reallocate_raw(tfa_allocator_t *self, void *ptr, size_t old_size, size_t nbytes,
			size_t alignment)
{
	(void)self;
	(void)old_size;
	return je.rallocx(ptr, nbytes, align_flag(alignment));
}

static size_t
jemalloc_allocated_size_slow(const tfa_allocator_t *self, const void *ptr)
{
	(void)self;
	return je.sallocx(ptr, 0);
}

static size_t
jemalloc_good_size(const tfa_allocator_t *self, size_t nbytes, size_t alignment)
{
	(void)self;
	if (alignment <= JE_MIN_ALIGN && nbytes <= SMALL_MAX)
		return tfa_jemalloc_usable[(nbytes + 7) >> 3];
	return je.nallocx(nbytes, align_flag(alignment));
}

static void *
jemalloc_malloc_fast(size_t nbytes)
{
	return je.malloc(nbytes);
}

static void
jemalloc_free_sized_fast(void *ptr, size_t nbytes)
{
	je.sdallocx(ptr, nbytes, 0);
}

static const tfa_allocator_ops_t jemalloc_ops = {
	.struct_size = TFA_ALLOCATOR_OPS_SIZE,
	.name = "jemalloc",
	.allocate_raw = jemalloc_allocate_raw,
	.deallocate_raw = jemalloc_deallocate_raw,
	.allocated_size_slow = jemalloc_allocated_size_slow,
	.reallocate_raw = jemalloc_reallocate_raw,
	.deallocate_raw_sized = jemalloc_deallocate_raw_sized,
	.good_size = jemalloc_good_size,
	.malloc_fast = jemalloc_malloc_fast,
	.free_sized_fast = jemalloc_free_sized_fast,
	.usable_table = tfa_jemalloc_usable,
	.usable_table_max = SMALL_MAX,
};

static tfa_allocator_t jemalloc_allocator = {
	.ops = &jemalloc_ops,
	.device = TFA_DEVICE_CPU,
	.device_ordinal = 0,
	.backend_id = TFA_BACKEND_JEMALLOC,
};

/* The private copy (registry/make_private_jemalloc.sh; the rest in registry/jemalloc_fast.h). */
extern void tfa_je_dallocx(void *ptr, int flags);
extern size_t tfa_je_nallocx(size_t size, int flags);
extern int tfa_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static const struct jemalloc_api private_api = {
	.malloc = tfa_je_malloc,
	.mallocx = tfa_je_mallocx,
	.dallocx = tfa_je_dallocx,
	.sdallocx = tfa_je_sdallocx,
	.rallocx = tfa_je_rallocx,
	.sallocx = tfa_je_sallocx,
	.nallocx = tfa_je_nallocx,
	.mallctl = tfa_je_mallctl,
};

/* The program's own libjemalloc.so.2, when it has one loaded. */
static bool
program_api(struct jemalloc_api *api)
{
	static const char *const names[8] = { "malloc",  "mallocx", "dallocx", "sdallocx",
					      "rallocx", "sallocx", "nallocx", "mallctl" };
	void *sym[8];
	void *h = dlopen(JEMALLOC_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);

	if (h == NULL)
		return false;
	/* dlsym on the handle: the library's own malloc, not the shim's. */
	for (int i = 0; i < 8; i++) {
		sym[i] = dlsym(h, names[i]);
		if (sym[i] == NULL)
			return false;
	}
	memcpy(&api->malloc, &sym[0], sizeof(void *));
	memcpy(&api->mallocx, &sym[1], sizeof(void *));
	memcpy(&api->dallocx, &sym[2], sizeof(void *));
	memcpy(&api->sdallocx, &sym[3], sizeof(void *));
	memcpy(&api->rallocx, &sym[4], sizeof(void *));
	memcpy(&api->sallocx, &sym[5], sizeof(void *));
	memcpy(&api->nallocx, &sym[6], sizeof(void *));
	memcpy(&api->mallctl, &sym[7], sizeof(void *));
	return true;
}

bool
tfa_jemalloc_is_private(const tfa_allocator_t *a)
{
	return a == &jemalloc_allocator && je.malloc == tfa_je_malloc;
}

int
tfa_jemalloc_tcache_create(void)
{
	unsigned index;
	size_t len = sizeof(index);
	int saved_errno = errno;
	int r = tfa_je_mallctl("tcache.create", &index, &len, NULL, 0);

	errno = saved_errno;
	if (r != 0 || index > (unsigned)INT_MAX - 1)
		return -1;
	return (int)index;
}

/* jemalloc's statistics, refreshed ("epoch"); false if it keeps none. */
static bool
je_figures(size_t *allocated, size_t *active, size_t *resident)
{
	uint64_t epoch = 1;
	size_t len = sizeof(epoch);
	size_t *out[3] = { allocated, active, resident };
	static const char *const names[3] = { "stats.allocated", "stats.active", "stats.resident" };

	if (je.mallctl == NULL || je.mallctl("epoch", &epoch, &len, &epoch, sizeof(epoch)) != 0)
		return false;
	for (int i = 0; i < 3; i++) {
		len = sizeof(size_t);
		if (je.mallctl(names[i], out[i], &len, NULL, 0) != 0)
			return false;
	}
	return true;
}

bool
tfa_jemalloc_figures(const tfa_allocator_t *a, size_t *allocated, size_t *active)
{
	size_t resident;
	int saved_errno = errno;

	tfa_guard_enter();
	bool ok = a == &jemalloc_allocator && je_figures(allocated, active, &resident);
	tfa_guard_exit();
	errno = saved_errno;
	return ok;
}

int
tfa_jemalloc_trim(const tfa_allocator_t *a)
{
	size_t allocated, active, before = 0, after = 0;
	int saved_errno = errno;
	int r;

	if (a != &jemalloc_allocator || je.mallctl == NULL)
		return -1;
	tfa_guard_enter();
	bool known = je_figures(&allocated, &active, &before);
	/* MALLCTL_ARENAS_ALL: every arena's unused dirty and muzzy pages, now. */
	(void)je.mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
	r = known && je_figures(&allocated, &active, &after) && after < before;
	tfa_guard_exit();
	errno = saved_errno;
	return r;
}

/*
 * Address space jemalloc's start-up must be able to map.  jemalloc 5.3 does
 * not survive an mmap that fails while it starts: its thread cache is left
 * without its bins and the first mallocx dereferences NULL (a process under
 * RLIMIT_AS of 14 to 19.5 MiB crashed in tfa_shim_init; without tfalloc it ran).
 * It maps between 6 and 8 MiB there (measured: a probe of 6 MiB still let it
 * crash, 8 MiB did not); 12 MiB leaves room for other builds of it.
 */
#define JEMALLOC_START_MIB 12
#define JEMALLOC_START_HEADROOM ((size_t)JEMALLOC_START_MIB << 20)

static bool
jemalloc_can_start(void)
{
	void *p = mmap(NULL, JEMALLOC_START_HEADROOM, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return false;
	munmap(p, JEMALLOC_START_HEADROOM);
	return true;
}

static tfa_allocator_t *
jemalloc_create(int ordinal)
{
	struct jemalloc_api api;

	if (ordinal != 0)
		return NULL;
	/* dlopen allocates; and the first mallocx initialises jemalloc. */
	tfa_guard_enter();
	if (!program_api(&api)) {
		if (!jemalloc_can_start()) {
			tfa_guard_exit();
			TFA_LOG_ONCE("jemalloc cannot start: %d MiB of address space cannot be mapped "
				     "(RLIMIT_AS?); using glibc", JEMALLOC_START_MIB);
			return NULL;
		}
		api = private_api;
	}
	void *warm = api.mallocx(1, 0);
	if (warm != NULL)
		api.dallocx(warm, 0);
	tfa_guard_exit();
	if (warm == NULL)
		return NULL;
	/*
	 * One nallocx per size class, not per entry (40 calls instead of 2049,
	 * 85,000 instructions at every start): the requests from i * 8 up to a
	 * class's size all get that class, a multiple of 8.
	 */
	const size_t entries = sizeof(tfa_jemalloc_usable) / sizeof(tfa_jemalloc_usable[0]);
	for (size_t i = 0; i < entries;) {
		size_t usable = api.nallocx(i == 0 ? 1 : i * 8, 0);
		size_t last = usable / 8 > i ? usable / 8 : i; /* a class below the request: this entry only */
		for (; i <= last && i < entries; i++)
			tfa_jemalloc_usable[i] = (uint32_t)usable;
	}
	je = api;
	return &jemalloc_allocator;
}

TFA_REGISTER_ALLOCATOR("jemalloc", 200, TFA_DEVICE_CPU, TFA_ATTR_ON_HOST | TFA_ATTR_NIC_COMPATIBLE,
		       jemalloc_create)
