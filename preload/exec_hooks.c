/* SPDX-License-Identifier: MIT */
/*
 * exec replaces the image: the profile of what ran until then is written
 * first (end reason "exec"), and removed again if exec fails and the process
 * goes on.  glibc's exec* functions reach the kernel through internal calls,
 * so each is wrapped; the variadic execl* ones are built on execve/execvp.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/common.h"
#include "core/shim.h"
#include "core/thread.h"

extern char **environ;

TFA_EXPORT int execve(const char *path, char *const argv[], char *const envp[]);
TFA_EXPORT int execv(const char *path, char *const argv[]);
TFA_EXPORT int execvp(const char *file, char *const argv[]);
TFA_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]);
TFA_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]);
TFA_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			int flags);
TFA_EXPORT int execl(const char *path, const char *arg, ...);
TFA_EXPORT int execle(const char *path, const char *arg, ...);
TFA_EXPORT int execlp(const char *file, const char *arg, ...);

static void *
real(const char *name)
{
	tfa_guard_enter();
	void *p = dlsym(RTLD_NEXT, name);
	tfa_guard_exit();
	return p;
}

#define REAL(type, name) \
	static void *name##_sym; \
	if (name##_sym == NULL) \
		name##_sym = real(#name); \
	type name##_fn; \
	memcpy(&name##_fn, &name##_sym, sizeof(name##_fn)); \
	if (name##_sym == NULL) { \
		errno = ENOSYS; \
		return -1; \
	}

/* Calls the exec, with the profile written before and withdrawn after a failure. */
#define AROUND_EXEC(call) \
	do { \
		bool wrote_ = tfa_shim_before_exec(); \
		int ret_ = (call); \
		int err_ = errno; \
		if (wrote_) \
			tfa_shim_exec_failed(); \
		errno = err_; \
		return ret_; \
	} while (0)

typedef int (*execve_t)(const char *, char *const[], char *const[]);
typedef int (*execvpe_t)(const char *, char *const[], char *const[]);
typedef int (*fexecve_t)(int, char *const[], char *const[]);
typedef int (*execveat_t)(int, const char *, char *const[], char *const[], int);

TFA_EXPORT int
execve(const char *path, char *const argv[], char *const envp[])
{
	REAL(execve_t, execve);
	AROUND_EXEC(execve_fn(path, argv, envp));
}

TFA_EXPORT int
execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

TFA_EXPORT int
execvpe(const char *file, char *const argv[], char *const envp[])
{
	REAL(execvpe_t, execvpe);
	AROUND_EXEC(execvpe_fn(file, argv, envp));
}

TFA_EXPORT int
execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

TFA_EXPORT int
fexecve(int fd, char *const argv[], char *const envp[])
{
	REAL(fexecve_t, fexecve);
	AROUND_EXEC(fexecve_fn(fd, argv, envp));
}

TFA_EXPORT int
execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	REAL(execveat_t, execveat);
	AROUND_EXEC(execveat_fn(dirfd, path, argv, envp, flags));
}

/*
 * The argument list of an execl* call as an argv array in mapped memory (the
 * list has no bound, and malloc is what is being profiled).  *envp receives
 * the environment argument when want_envp.
 */
static char **
collect_args(const char *arg, va_list ap, bool want_envp, char *const **envp, size_t *bytes)
{
	va_list count;
	size_t n = 1;

	va_copy(count, ap);
	if (arg != NULL)
		while (va_arg(count, const char *) != NULL)
			n++;
	va_end(count);
	*bytes = (n + 1) * sizeof(char *);
	char **argv = tfa_arena_map(*bytes);
	if (argv == NULL)
		return NULL;
	argv[0] = (char *)(uintptr_t)arg;
	for (size_t i = 1; arg != NULL && i < n; i++)
		argv[i] = va_arg(ap, char *);
	argv[arg != NULL ? n : 0] = NULL;
	if (want_envp) {
		if (arg != NULL)
			(void)va_arg(ap, char *); /* the terminating NULL */
		*envp = va_arg(ap, char *const *);
	}
	return argv;
}

/* Runs an execl* call: its arguments as an array, exec'd by execve (or execvpe for execlp). */
static int
exec_list(const char *path, bool search, char **argv, size_t bytes, char *const *envp)
{
	if (argv == NULL) {
		errno = ENOMEM;
		return -1;
	}
	int ret = search ? execvpe(path, argv, envp) : execve(path, argv, envp);
	int err = errno;
	tfa_arena_unmap(argv, bytes);
	errno = err;
	return ret;
}

TFA_EXPORT int
execl(const char *path, const char *arg, ...)
{
	va_list ap;
	size_t bytes;

	va_start(ap, arg);
	char **argv = collect_args(arg, ap, false, NULL, &bytes);
	va_end(ap);
	return exec_list(path, false, argv, bytes, environ);
}

TFA_EXPORT int
execle(const char *path, const char *arg, ...)
{
	va_list ap;
	size_t bytes;
	char *const *envp = NULL;

	va_start(ap, arg);
	char **argv = collect_args(arg, ap, true, &envp, &bytes);
	va_end(ap);
	return exec_list(path, false, argv, bytes, envp);
}

TFA_EXPORT int
execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	size_t bytes;

	va_start(ap, arg);
	char **argv = collect_args(arg, ap, false, NULL, &bytes);
	va_end(ap);
	return exec_list(file, true, argv, bytes, environ);
}
