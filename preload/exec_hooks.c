/* SPDX-License-Identifier: MIT */
/*
 * exec replaces the image: the profile of what ran until then is written
 * first (end reason "exec"), and removed again if exec fails and the process
 * goes on.  glibc's exec* functions reach the kernel through internal calls,
 * so each is wrapped; the variadic execl* ones are built on execve/execvp.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/child_env.h"
#include "core/lock.h"
#include "core/common.h"
#include "core/handoff.h"
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
TFA_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
			    const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);
TFA_EXPORT int system(const char *line);
TFA_EXPORT FILE *popen(const char *command, const char *mode);
TFA_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
			     const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);

static void *
real(const char *name)
{
	tfa_guard_enter();
	void *p = dlsym(RTLD_NEXT, name);
	tfa_guard_exit();
	return p;
}

/* name##_sym: glibc's function, found at the first call (an exec fails with ENOSYS without it). */
#define REAL(name) \
	static void *name##_sym; \
	if (name##_sym == NULL) \
		name##_sym = real(#name); \
	if (name##_sym == NULL) { \
		errno = ENOSYS; \
		return -1; \
	}

typedef int (*execve_t)(const char *, char *const[], char *const[]);
typedef int (*execvpe_t)(const char *, char *const[], char *const[]);
typedef int (*fexecve_t)(int, char *const[], char *const[]);
typedef int (*execveat_t)(int, const char *, char *const[], char *const[], int);

/* One exec call but for its environment: which function, with what. */
struct exec_call {
	enum { CALL_EXECVE, CALL_EXECVPE, CALL_FEXECVE, CALL_EXECVEAT } kind;
	void *fn;
	int fd;
	const char *path;
	char *const *argv;
	int flags;
};

static int
exec_call_with(const struct exec_call *c, char *const envp[])
{
	union {
		void *p;
		execve_t execve;
		execvpe_t execvpe;
		fexecve_t fexecve;
		execveat_t execveat;
	} f = { .p = c->fn };

	switch (c->kind) {
	case CALL_EXECVE:
		return f.execve(c->path, c->argv, envp);
	case CALL_EXECVPE:
		return f.execvpe(c->path, c->argv, envp);
	case CALL_FEXECVE:
		return f.fexecve(c->fd, c->argv, envp);
	default:
		return f.execveat(c->fd, c->path, c->argv, envp, c->flags);
	}
}

/*
 * The first executable file named file in the caller's PATH, as execvp
 * searches it, needs its sanitizer's runtime first (core/child_env.h).
 */
static bool
search_needs_first(const char *file)
{
	if (strchr(file, '/') != NULL)
		return tfa_child_env_path_needs_first(AT_FDCWD, file);
	const char *dirs = getenv("PATH");
	char cand[4096];
	size_t flen = strlen(file);

	if (dirs == NULL)
		dirs = "/bin:/usr/bin";
	for (const char *p = dirs;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dlen = (size_t)(end - p);
		if (dlen + flen + 2 <= sizeof(cand)) {
			memcpy(cand, p, dlen);
			cand[dlen] = '/';
			memcpy(cand + dlen + (dlen > 0), file, flen + 1);
			if (access(dlen > 0 ? cand : file, X_OK) == 0)
				return tfa_child_env_path_needs_first(AT_FDCWD, dlen > 0 ? cand : file);
		}
		if (*end == '\0')
			return false;
		p = end;
	}
}

/* Whether the program the call starts needs its sanitizer's runtime first. */
static bool
exec_needs_first(const struct exec_call *c)
{
	switch (c->kind) {
	case CALL_EXECVE:
		return tfa_child_env_path_needs_first(AT_FDCWD, c->path);
	case CALL_EXECVPE:
		return search_needs_first(c->path);
	case CALL_FEXECVE:
		return tfa_child_env_needs_first(c->fd);
	default:
		if ((c->flags & AT_EMPTY_PATH) && c->path[0] == '\0')
			return tfa_child_env_needs_first(c->fd);
		return tfa_child_env_path_needs_first(c->fd, c->path);
	}
}

/*
 * The bytes of the environment the new program gets instead of envp (0:
 * envp as it is): tfalloc's parts added where missing, or the shim taken out
 * for valgrind's tool and for a program whose sanitizer runtime must come
 * first (core/child_env.h).  needs_first: the target is such a program.
 */
static size_t
child_env_size(const tfa_child_env_t *ce, char *const envp[], bool needs_first, bool *without)
{
	if (ce == NULL)
		return 0;
	*without = needs_first || (!ce->into_valgrind && tfa_child_env_is_valgrind(envp));
	return *without ? tfa_child_env_size_without(ce, envp) : tfa_child_env_size(ce, envp);
}

static char **
child_env_build(const tfa_child_env_t *ce, char *const envp[], bool without, void *buf, size_t size)
{
	return without ? tfa_child_env_build_without(ce, envp, buf, size) : tfa_child_env_build(ce, envp, buf, size);
}

/*
 * The descriptors a process that changed its user hands to the program it
 * starts (core/handoff.h): inheritable for the call, and named in the new
 * environment through a copy of the kept child environment.  Not to a
 * program that runs without the shim (valgrind's, a sanitizer's).
 */
struct handoff {
	bool on;
	tfa_child_env_t with;
	char var[160];
};

static bool
handoff_begin(struct handoff *h, const tfa_child_env_t **ce, bool without)
{
	h->on = *ce != NULL && (*ce)->preload != NULL && !without && tfa_handoff_begin(h->var, sizeof(h->var)) > 0;
	if (!h->on)
		return false;
	h->with = **ce;
	h->with.handoff = h->var;
	*ce = &h->with;
	return true;
}

/* After the call, when it returns (an exec that failed, a spawn): close-on-exec again. */
static void
handoff_end(const struct handoff *h)
{
	if (h->on)
		tfa_handoff_end();
}

/*
 * Makes the call with envp, or, where envp lacks what carries tfalloc to the
 * new program (LD_PRELOAD's element, the TFALLOC_* variables: `env -i`,
 * python's subprocess with env={...}), with a copy that has them
 * (core/child_env.h).  The copy is built on this frame, which the profile's
 * writing (before it) no longer uses; a vfork child shares its parent's
 * memory, so nothing is allocated, and mapped only past 4 KiB (about 400
 * variables; a mapping left to the parent of a vfork child whose exec
 * succeeds).  The frame stays small: a thread's stack may be.
 */
static TFA_NOINLINE int
exec_with_child_env(const struct exec_call *c, char *const envp[])
{
	char buf[4096] __attribute__((aligned(16)));
	const tfa_child_env_t *ce = tfa_shim_child_env();
	bool without = false;
	size_t need = child_env_size(ce, envp, ce != NULL && ce->preload != NULL && exec_needs_first(c), &without);
	struct handoff h;

	if (handoff_begin(&h, &ce, without)) {
		/* Built with the hand-off now, which the copy kept at start lacks. */
		need = tfa_child_env_size(ce, envp);
	}
	if (need == 0) {
		int ret = exec_call_with(c, envp);
		handoff_end(&h);
		return ret;
	}
	void *where = need <= sizeof(buf) ? (void *)buf : tfa_arena_map(need);
	char **child = where != NULL ? child_env_build(ce, envp, without, where, need) : NULL;
	int ret = exec_call_with(c, child != NULL ? child : envp);
	int err = errno;
	handoff_end(&h);
	if (where != NULL && where != (void *)buf)
		tfa_arena_unmap(where, need);
	errno = err;
	return ret;
}

/* Calls the exec, with the profile written before and withdrawn after a failure. */
#define AROUND_EXEC(call, envp) \
	do { \
		bool wrote_ = tfa_shim_before_exec(); \
		int ret_ = exec_with_child_env(&(call), (envp)); \
		int err_ = errno; \
		if (wrote_) \
			tfa_shim_exec_failed(); \
		errno = err_; \
		return ret_; \
	} while (0)

TFA_EXPORT int
execve(const char *path, char *const argv[], char *const envp[])
{
	REAL(execve);
	struct exec_call c = { .kind = CALL_EXECVE, .fn = execve_sym, .path = path, .argv = argv };
	AROUND_EXEC(c, envp);
}

TFA_EXPORT int
execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

TFA_EXPORT int
execvpe(const char *file, char *const argv[], char *const envp[])
{
	REAL(execvpe);
	struct exec_call c = { .kind = CALL_EXECVPE, .fn = execvpe_sym, .path = file, .argv = argv };
	AROUND_EXEC(c, envp);
}

TFA_EXPORT int
execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

TFA_EXPORT int
fexecve(int fd, char *const argv[], char *const envp[])
{
	REAL(fexecve);
	struct exec_call c = { .kind = CALL_FEXECVE, .fn = fexecve_sym, .fd = fd, .argv = argv };
	AROUND_EXEC(c, envp);
}

TFA_EXPORT int
execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	REAL(execveat);
	struct exec_call c = { .kind = CALL_EXECVEAT, .fn = execveat_sym, .fd = dirfd, .path = path, .argv = argv,
			       .flags = flags };
	AROUND_EXEC(c, envp);
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

/*
 * posix_spawn and posix_spawnp reach the kernel's exec inside glibc (no hook
 * of the exec sees them): the environment is made there.  glibc's system and
 * popen spawn through internal calls, with the process's environment.
 */
typedef int (*posix_spawn_t)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
			     char *const[], char *const[]);

static int
spawn_with_child_env(posix_spawn_t fn, bool search, pid_t *pid, const char *path,
		     const posix_spawn_file_actions_t *actions, const posix_spawnattr_t *attr, char *const argv[],
		     char *const envp[])
{
	const tfa_child_env_t *ce = tfa_shim_child_env();
	bool without = false;
	bool first = ce != NULL && ce->preload != NULL
		     && (search ? search_needs_first(path) : tfa_child_env_path_needs_first(AT_FDCWD, path));
	size_t need = child_env_size(ce, envp, first, &without);
	struct handoff h;

	if (handoff_begin(&h, &ce, without))
		need = tfa_child_env_size(ce, envp);
	if (need == 0) {
		int ret = fn(pid, path, actions, attr, argv, envp);
		handoff_end(&h);
		return ret;
	}
	void *where = tfa_arena_map(need);
	char **child = where != NULL ? child_env_build(ce, envp, without, where, need) : NULL;
	/* posix_spawn returns once the child has exec'd or failed: the copy is free then. */
	int ret = fn(pid, path, actions, attr, argv, child != NULL ? child : envp);
	handoff_end(&h);
	if (where != NULL)
		tfa_arena_unmap(where, need);
	return ret;
}

TFA_EXPORT int
posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions, const posix_spawnattr_t *attr,
	    char *const argv[], char *const envp[])
{
	static void *sym;
	posix_spawn_t fn;

	if (sym == NULL)
		sym = real("posix_spawn");
	if (sym == NULL)
		return ENOSYS;
	memcpy(&fn, &sym, sizeof(fn));
	return spawn_with_child_env(fn, false, pid, path, actions, attr, argv, envp);
}

TFA_EXPORT int
posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions, const posix_spawnattr_t *attr,
	     char *const argv[], char *const envp[])
{
	static void *sym;
	posix_spawn_t fn;

	if (sym == NULL)
		sym = real("posix_spawnp");
	if (sym == NULL)
		return ENOSYS;
	memcpy(&fn, &sym, sizeof(fn));
	return spawn_with_child_env(fn, true, pid, file, actions, attr, argv, envp);
}

/*
 * system and popen spawn with the process's environment, inside glibc: in a
 * program whose environment lacked tfalloc's variables (they were taken
 * back at its start), their shell would run unprofiled.  For the call,
 * environ is a copy that has them.  Another thread may read that copy
 * meanwhile (getenv, or its own system spawning with it), so it is mapped
 * and unmapped only a call later (the one copy kept retired); a setenv of
 * another thread meanwhile makes an array that points into it, which is
 * then never unmapped.
 */
typedef int (*system_t)(const char *);
typedef FILE *(*popen_t)(const char *, const char *);

struct env_call {
	void *fn;
	const char *line;
	const char *mode; /* popen's; NULL: system */
	FILE *file;
	int status;
};

static tfa_lock_t retired_lock = TFA_LOCK_INIT;
static void *retired;
static size_t retired_bytes;

static void
env_call_run(struct env_call *c)
{
	union {
		void *p;
		system_t system;
		popen_t popen;
	} f = { .p = c->fn };

	if (c->mode != NULL)
		c->file = f.popen(c->line, c->mode);
	else
		c->status = f.system(c->line);
}

static void
env_call_with_child_environ(struct env_call *c)
{
	const tfa_child_env_t *ce = tfa_shim_child_env();
	char **before = environ;
	struct handoff h;
	bool handed = handoff_begin(&h, &ce, false);
	size_t need = ce != NULL ? tfa_child_env_size(ce, before) : 0;
	/*
	 * The hand-off's entry goes into the copy too: the copy outlives this
	 * frame (other threads may still read it), h does not.
	 */
	size_t extra = handed ? strlen(h.var) + 1 : 0;
	void *where = need != 0 ? tfa_arena_map(need + extra) : NULL;
	if (where != NULL && handed)
		h.with.handoff = memcpy((char *)where + need, h.var, extra);
	char **child = where != NULL ? tfa_child_env_build(ce, before, where, need) : NULL;

	if (child == NULL) {
		if (where != NULL)
			tfa_arena_unmap(where, need + extra);
		env_call_run(c);
		handoff_end(&h);
		return;
	}
	environ = child;
	env_call_run(c);
	int err = errno;
	handoff_end(&h);
	if (environ != child) {
		errno = err;
		return; /* another thread's setenv: its array points into the copy */
	}
	environ = before;
	tfa_lock(&retired_lock);
	void *old = retired;
	size_t old_bytes = retired_bytes;
	retired = where;
	retired_bytes = need + extra;
	tfa_unlock(&retired_lock);
	if (old != NULL)
		tfa_arena_unmap(old, old_bytes);
	errno = err;
}

TFA_EXPORT int
system(const char *line)
{
	static void *sym;

	if (sym == NULL)
		sym = real("system");
	if (sym == NULL) {
		errno = ENOSYS;
		return -1;
	}
	struct env_call c = { .fn = sym, .line = line };
	env_call_with_child_environ(&c);
	return c.status;
}

TFA_EXPORT FILE *
popen(const char *command, const char *mode)
{
	static void *sym;

	if (sym == NULL)
		sym = real("popen");
	if (sym == NULL) {
		errno = ENOSYS;
		return NULL;
	}
	struct env_call c = { .fn = sym, .line = command, .mode = mode };
	env_call_with_child_environ(&c);
	return c.file;
}
