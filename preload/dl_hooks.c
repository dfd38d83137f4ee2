/* SPDX-License-Identifier: MIT */
/*
 * dlclose: the unwinder's caches know code by its address, and a library
 * loaded later may be mapped where the closed one was.  They are flushed
 * after the real dlclose: a rule a walk computed before, or while the library
 * went, is of an older generation then (core/cfi.c).  The loader's own
 * unloads (iconv's gconv modules) do not come through here.
 */
#include <dlfcn.h>
#include <errno.h>

#include "core/common.h"
#include "core/thread.h"
#include "core/unwind.h"

TFA_EXPORT int dlclose(void *handle);

int
dlclose(void *handle)
{
	static int (*real)(void *);
	int (*fn)(void *) = __atomic_load_n(&real, __ATOMIC_RELAXED);

	if (fn == NULL) {
		tfa_guard_enter();
		void *sym = dlsym(RTLD_NEXT, "dlclose");
		tfa_guard_exit();
		if (sym == NULL) {
			errno = ENOSYS;
			return -1;
		}
		__builtin_memcpy(&fn, &sym, sizeof(fn));
		__atomic_store_n(&real, fn, __ATOMIC_RELAXED);
	}
	int r = fn(handle);
	int saved_errno = errno;
	tfa_unwind_flush_caches();
	errno = saved_errno;
	return r;
}
