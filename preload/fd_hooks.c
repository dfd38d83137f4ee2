/* SPDX-License-Identifier: MIT */
/*
 * pipe2: the pipe libunwind makes for itself, on a call of the shim's into
 * it, goes far above the program's descriptors (core/unwind.h,
 * tfa_unwind_in_libunwind).  Every other pipe2 is the system call, as
 * glibc's is.
 */
#include <sys/syscall.h>
#include <unistd.h>

#include "core/common.h"
#include "core/log.h"
#include "core/unwind.h"

TFA_EXPORT int pipe2(int fds[2], int flags);

TFA_EXPORT int
pipe2(int fds[2], int flags)
{
	int r = (int)syscall(SYS_pipe2, fds, flags);

	if (r == 0 && tfa_unwind_in_libunwind()) {
		fds[0] = tfa_fd_far(fds[0]);
		fds[1] = tfa_fd_far(fds[1]);
	}
	return r;
}
