/* SPDX-License-Identifier: MIT */
/*
 * mallinfo, mallinfo2 and malloc_trim.  glibc's describe glibc's heap, which
 * holds none of the program's blocks when jemalloc serves them: a program
 * reading its own memory through mallinfo2 (LLVM's -time-passes, gold's
 * --stats, gcc's -ftime-report) saw next to nothing, and malloc_trim (tmux
 * calls it after freeing) gave nothing back.  With jemalloc they answer for
 * jemalloc; with glibc as the backend, glibc's own answer is the right one.
 */
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>

#include "core/common.h"
#include "core/shim.h"

TFA_EXPORT struct mallinfo2 mallinfo2(void);
TFA_EXPORT struct mallinfo mallinfo(void);
TFA_EXPORT int malloc_trim(size_t pad);

/* glibc's, found at load: dlsym allocates and takes the loader's lock. */
static struct mallinfo2 (*real_mallinfo2)(void);
static int (*real_malloc_trim)(size_t);

__attribute__((constructor(TFA_CTOR_PRIO_REGISTRY))) static void
mallinfo_hooks_resolve(void)
{
	void *sym = dlsym(RTLD_NEXT, "mallinfo2");
	__builtin_memcpy(&real_mallinfo2, &sym, sizeof(sym));
	sym = dlsym(RTLD_NEXT, "malloc_trim");
	__builtin_memcpy(&real_malloc_trim, &sym, sizeof(sym));
}

struct mallinfo2
mallinfo2(void)
{
	struct mallinfo2 mi = { 0 };

	if (tfa_shim_mallinfo(&mi))
		return mi;
	/* Before the shim's constructor (a library's that runs first): found now. */
	if (real_mallinfo2 == NULL)
		mallinfo_hooks_resolve();
	if (real_mallinfo2 != NULL)
		mi = real_mallinfo2();
	return mi;
}

/* The old structure's fields are int: glibc casts, and so does this. */
struct mallinfo
mallinfo(void)
{
	struct mallinfo2 m = mallinfo2();
	struct mallinfo mi = {
		.arena = (int)m.arena,
		.ordblks = (int)m.ordblks,
		.smblks = (int)m.smblks,
		.hblks = (int)m.hblks,
		.hblkhd = (int)m.hblkhd,
		.usmblks = (int)m.usmblks,
		.fsmblks = (int)m.fsmblks,
		.uordblks = (int)m.uordblks,
		.fordblks = (int)m.fordblks,
		.keepcost = (int)m.keepcost,
	};
	return mi;
}

int
malloc_trim(size_t pad)
{
	int r = tfa_shim_malloc_trim();

	if (r < 0 && real_malloc_trim == NULL)
		mallinfo_hooks_resolve();
	if (r < 0)
		r = real_malloc_trim != NULL ? real_malloc_trim(pad) : 0;
	return r;
}
