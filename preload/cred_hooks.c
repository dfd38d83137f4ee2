/* SPDX-License-Identifier: MIT */
/*
 * setuid and the rest, and chroot: before a process changes its user or
 * group ids, or its root directory, its profile's name is reserved and a
 * descriptor to it kept (core/shim.h, tfa_shim_before_credentials), so that
 * a daemon that drops root, or confines itself to an empty directory (sshd's
 * privilege separation does both), still writes its profile into the
 * directory its former self could reach.  The calls that change the
 * effective user also make that directory's uid-N for the programs the
 * process executes as user N (core/handoff.h).  Each then calls glibc's, which
 * changes the ids of every thread.  unshare and setns as well, for a new or
 * another mount, pid or user namespace: /proc/self of a process that stays
 * outside the pid namespace whose proc its mount namespace then shows (the
 * parent of `unshare --pid --fork --mount-proc`) names no process, and the
 * leak scan found no mappings there.  And prctl(PR_SET_NO_NEW_PRIVS), which a
 * seccomp filter of an unprivileged process needs first (libseccomp sets it
 * by default), and prctl(PR_SET_SECCOMP): a sandbox that refuses to create
 * files (man-db's children: ENOSYS) had cost every such process its profile.
 */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/common.h"
#include "core/shim.h"

TFA_EXPORT int setuid(uid_t uid);
TFA_EXPORT int setgid(gid_t gid);
TFA_EXPORT int seteuid(uid_t uid);
TFA_EXPORT int setegid(gid_t gid);
TFA_EXPORT int setreuid(uid_t ruid, uid_t euid);
TFA_EXPORT int setregid(gid_t rgid, gid_t egid);
TFA_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid);
TFA_EXPORT int setresgid(gid_t rgid, gid_t egid, gid_t sgid);
TFA_EXPORT int chroot(const char *path);
TFA_EXPORT int unshare(int flags);
TFA_EXPORT int setns(int fd, int nstype);
TFA_EXPORT int prctl(int option, ...);

/*
 * glibc's functions, found at load: a vfork child may call setuid before
 * exec, and dlsym there (it allocates, and takes the loader's lock) could
 * meet a lock another thread of the parent holds.
 */
enum { SETUID, SETGID, SETEUID, SETEGID, SETREUID, SETREGID, SETRESUID, SETRESGID, CHROOT, UNSHARE, SETNS, PRCTL, NFUNCS };
static const char *const names[NFUNCS] = { "setuid",    "setgid",    "seteuid", "setegid", "setreuid", "setregid",
					   "setresuid", "setresgid", "chroot",  "unshare", "setns",    "prctl" };
static void *real[NFUNCS];

__attribute__((constructor(TFA_CTOR_PRIO_REGISTRY))) static void
cred_hooks_resolve(void)
{
	for (int i = 0; i < NFUNCS; i++)
		__atomic_store_n(&real[i], dlsym(RTLD_NEXT, names[i]), __ATOMIC_RELAXED);
}

/*
 * glibc's function.  A library that comes after the shim in the load order
 * and needs nothing of it runs its constructors first: one that calls prctl
 * there (PR_SET_NAME, PR_SET_PDEATHSIG) finds nothing resolved yet, and it
 * is looked up then (no vfork child exists before the constructors end).
 */
static void *
real_fn(int i)
{
	void *sym = __atomic_load_n(&real[i], __ATOMIC_RELAXED);
	if (sym == NULL) {
		sym = dlsym(RTLD_NEXT, names[i]);
		__atomic_store_n(&real[i], sym, __ATOMIC_RELAXED);
	}
	return sym;
}

/*
 * new_euid: the effective user id the call asks for ((uid_t)-1: none, or
 * not a change of user), for which the programs the process executes later
 * get a directory of their own to write their profiles in.
 */
#define CRED_HOOK_IF(name, index, params, args, when, new_euid) \
	int name params                                        \
	{                                                      \
		int(*fn) params;                               \
		void *sym = real_fn(index);                    \
		if (sym == NULL) {                             \
			errno = ENOSYS;                        \
			return -1;                             \
		}                                              \
		__builtin_memcpy(&fn, &sym, sizeof(fn));       \
		if (when)                                      \
			tfa_shim_before_credentials(new_euid); \
		return fn args;                                \
	}
#define CRED_HOOK(name, index, params, args) CRED_HOOK_IF(name, index, params, args, true, (uid_t)-1)
#define UID_HOOK(name, index, params, args, new_euid) CRED_HOOK_IF(name, index, params, args, true, new_euid)

UID_HOOK(setuid, SETUID, (uid_t uid), (uid), uid)
CRED_HOOK(setgid, SETGID, (gid_t gid), (gid))
UID_HOOK(seteuid, SETEUID, (uid_t uid), (uid), uid)
CRED_HOOK(setegid, SETEGID, (gid_t gid), (gid))
UID_HOOK(setreuid, SETREUID, (uid_t ruid, uid_t euid), (ruid, euid), euid)
CRED_HOOK(setregid, SETREGID, (gid_t rgid, gid_t egid), (rgid, egid))
UID_HOOK(setresuid, SETRESUID, (uid_t ruid, uid_t euid, uid_t suid), (ruid, euid, suid), euid)
CRED_HOOK(setresgid, SETRESGID, (gid_t rgid, gid_t egid, gid_t sgid), (rgid, egid, sgid))
CRED_HOOK(chroot, CHROOT, (const char *path), (path))
CRED_HOOK_IF(unshare, UNSHARE, (int flags), (flags), (flags & (CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUSER)) != 0,
	     (uid_t)-1)
CRED_HOOK(setns, SETNS, (int fd, int nstype), (fd, nstype))
/* Variadic, as glibc's, which reads four more arguments whatever the option. */
int
prctl(int option, ...)
{
	int (*fn)(int, ...);
	void *sym = real_fn(PRCTL);
	va_list ap;

	if (sym == NULL) {
		errno = ENOSYS;
		return -1;
	}
	__builtin_memcpy(&fn, &sym, sizeof(fn));
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
	unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_NO_NEW_PRIVS || option == PR_SET_SECCOMP)
		tfa_shim_before_credentials((uid_t)-1);
	return fn(option, a2, a3, a4, a5);
}
