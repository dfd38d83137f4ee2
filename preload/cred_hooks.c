/* SPDX-License-Identifier: MIT */
/*
 * setuid and the rest, and chroot: before a process changes its user or
 * group ids, or its root directory, its profile's name is reserved and a
 * descriptor to it kept (core/shim.h, tfa_shim_before_credentials), so that
 * a daemon that drops root, or confines itself to an empty directory (sshd's
 * privilege separation does both), still writes its profile into the
 * directory its former self could reach.  Each then calls glibc's, which
 * changes the ids of every thread.
 */
#include <dlfcn.h>
#include <errno.h>
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

/* glibc's function of that name (NULL: none). */
static void *
next(void **cache, const char *name)
{
	void *fn = __atomic_load_n(cache, __ATOMIC_RELAXED);

	if (fn == NULL) {
		fn = dlsym(RTLD_NEXT, name);
		__atomic_store_n(cache, fn, __ATOMIC_RELAXED);
	}
	return fn;
}

#define CRED_HOOK(name, params, args)                                \
	int name params                                              \
	{                                                            \
		static void *cache;                                  \
		int(*fn) params;                                     \
		void *sym = next(&cache, #name);                     \
		if (sym == NULL) {                                   \
			errno = ENOSYS;                              \
			return -1;                                   \
		}                                                    \
		__builtin_memcpy(&fn, &sym, sizeof(fn));             \
		tfa_shim_before_credentials();                       \
		return fn args;                                      \
	}

CRED_HOOK(setuid, (uid_t uid), (uid))
CRED_HOOK(setgid, (gid_t gid), (gid))
CRED_HOOK(seteuid, (uid_t uid), (uid))
CRED_HOOK(setegid, (gid_t gid), (gid))
CRED_HOOK(setreuid, (uid_t ruid, uid_t euid), (ruid, euid))
CRED_HOOK(setregid, (gid_t rgid, gid_t egid), (rgid, egid))
CRED_HOOK(setresuid, (uid_t ruid, uid_t euid, uid_t suid), (ruid, euid, suid))
CRED_HOOK(setresgid, (gid_t rgid, gid_t egid, gid_t sgid), (rgid, egid, sgid))
CRED_HOOK(chroot, (const char *path), (path))
