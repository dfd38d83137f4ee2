/* SPDX-License-Identifier: MIT */
/*
 * pthread_setname_np: with TFALLOC_TAG_BY=thread a thread's allocations are
 * charged to the resource of its name, so a new name must be seen.  Every
 * thread looks at its name again at its next allocation (core/control.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

#include "core/common.h"
#include "core/control.h"

TFA_EXPORT int pthread_setname_np(pthread_t thread, const char *name);

int
pthread_setname_np(pthread_t thread, const char *name)
{
	static int (*real)(pthread_t, const char *);
	int (*fn)(pthread_t, const char *) = __atomic_load_n(&real, __ATOMIC_RELAXED);

	if (fn == NULL) {
		void *sym = dlsym(RTLD_NEXT, "pthread_setname_np");
		if (sym == NULL)
			return ENOSYS;
		__builtin_memcpy(&fn, &sym, sizeof(fn));
		__atomic_store_n(&real, fn, __ATOMIC_RELAXED);
	}
	int r = fn(thread, name);
	if (r == 0 && tfa_control_tag_by_thread)
		tfa_control_thread_renamed();
	return r;
}
