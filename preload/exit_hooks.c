/* SPDX-License-Identifier: MIT */
/*
 * _exit and _Exit skip exit handlers, so the profile would be lost: shells
 * (dash) and fork children leave this way.  exit() reaches the kernel through
 * glibc's internal _exit, which these do not intercept.
 */
#include <sys/syscall.h>
#include <unistd.h>

#include "core/common.h"
#include "core/shim.h"

TFA_EXPORT void _exit(int status) __attribute__((noreturn));
TFA_EXPORT void _Exit(int status) __attribute__((noreturn));

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
