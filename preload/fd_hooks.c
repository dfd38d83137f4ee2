/* SPDX-License-Identifier: MIT */
/*
 * pipe2: the pipe libunwind makes for itself, on a call of the shim's into
 * it, goes far above the program's descriptors (core/unwind.h,
 * tfa_unwind_in_libunwind).  Every other pipe2 is the system call, as
 * glibc's is.
 *
 * close_range and closefrom spare the descriptors a process hands to the
 * programs it executes after a change of user, root or sandbox
 * (core/handoff.h): python's subprocess closes every descriptor but its own
 * in the child before the exec, and a child started with user="nobody" had
 * then no profile, and its line in the stderr its parent captured.  They
 * are close-on-exec, and far above the program's: a program that executes
 * nothing keeps them, as it kept them before it asked.
 */
#include <dlfcn.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/common.h"
#include "core/handoff.h"
#include "core/log.h"
#include "core/unwind.h"

TFA_EXPORT int pipe2(int fds[2], int flags);
TFA_EXPORT int close_range(unsigned int first, unsigned int last, int flags);
TFA_EXPORT void closefrom(int lowfd);

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

int
close_range(unsigned int first, unsigned int last, int flags)
{
	int keep[4];
	/* Setting close-on-exec on them changes nothing: they have it. */
	size_t n = first <= last && (flags & CLOSE_RANGE_CLOEXEC) == 0 ? tfa_handoff_fds(keep, 4) : 0;
	unsigned int lo = first;

	for (size_t i = 0; i < n; i++) {
		unsigned int k = (unsigned int)keep[i];
		if (k < lo || k > last)
			continue;
		if (k > lo && syscall(SYS_close_range, lo, k - 1, flags) != 0)
			return -1;
		flags &= ~CLOSE_RANGE_UNSHARE; /* the table is the process's own from the first call */
		lo = k + 1;
	}
	if (n != 0 && lo > last)
		return 0;
	return (int)syscall(SYS_close_range, lo, last, flags);
}

/*
 * glibc's closefrom, found at load: a vfork child calls closefrom before its
 * exec, and dlsym there (it allocates, and takes the loader's lock) could
 * meet a lock another thread of the parent holds.
 */
static void *real_closefrom;

__attribute__((constructor(TFA_CTOR_PRIO_REGISTRY))) static void
fd_hooks_resolve(void)
{
	__atomic_store_n(&real_closefrom, dlsym(RTLD_NEXT, "closefrom"), __ATOMIC_RELAXED);
}

void
closefrom(int lowfd)
{
	if (lowfd >= 0 && close_range((unsigned int)lowfd, ~0u, 0) == 0)
		return;
	/* No close_range (Linux before 5.9): glibc's walk of /proc/self/fd, which spares nothing. */
	void *sym = __atomic_load_n(&real_closefrom, __ATOMIC_RELAXED);
	if (sym != NULL) {
		void (*real)(int);
		__builtin_memcpy(&real, &sym, sizeof(real));
		real(lowfd);
	}
}
