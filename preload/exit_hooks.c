/* SPDX-License-Identifier: MIT */
/*
 * _exit and _Exit skip exit handlers, so the profile would be lost: shells
 * (dash) and fork children leave this way.  exit() reaches the kernel through
 * glibc's internal _exit, which these do not intercept; so does quick_exit,
 * whose status is kept here for the at_quick_exit handler that writes the
 * profile (core/shim.c).
 */
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/common.h"
#include "core/shim.h"

TFA_EXPORT void _exit(int status) __attribute__((noreturn));
TFA_EXPORT void _Exit(int status) __attribute__((noreturn));
TFA_EXPORT void quick_exit(int status) __attribute__((noreturn));

static void __attribute__((noreturn))
exit_now(int status)
{
	tfa_shim_on_fast_exit(status);
	for (;;)
		syscall(SYS_exit_group, status);
}

TFA_EXPORT void
_exit(int status)
{
	exit_now(status);
}

TFA_EXPORT void
_Exit(int status)
{
	exit_now(status);
}

/* glibc's, found at load: dlsym allocates and takes the loader's lock. */
static void (*real_quick_exit)(int);

__attribute__((constructor(TFA_CTOR_PRIO_REGISTRY))) static void
exit_hooks_resolve(void)
{
	void *sym = dlsym(RTLD_NEXT, "quick_exit");

	__builtin_memcpy(&real_quick_exit, &sym, sizeof(sym));
}

TFA_EXPORT void
quick_exit(int status)
{
	tfa_shim_before_quick_exit(status);
	/* Called from the constructor of a library that runs before the shim's: found now. */
	if (real_quick_exit == NULL)
		exit_hooks_resolve();
	if (real_quick_exit != NULL)
		real_quick_exit(status);
	exit_now(status);
}
