/* SPDX-License-Identifier: MIT */
/*
 * Requests from outside the process (core/remote.h): tfalloc snapshot and
 * tfalloc top ask with the control signal; the answer is a file.  Nothing
 * runs until a request comes: no thread, no polling, no work on the
 * allocation path (its end already looks at tfa_tls.pending_signal).
 *
 * Where a request is served:
 *   - in the signal handler, when the thread it interrupted is outside the
 *     shim (an idle program, blocked in read or sleep, answers this way).
 *     As on the fatal-signal path, the shim's locks are then free or held by
 *     other threads, which finish their call and let go; the writer takes
 *     no lock of the loader (tfa_shim_remote_snapshot) nor of libc.
 *   - at the end of the shim call it interrupted, otherwise: the handler
 *     puts it in a small queue and marks the thread (TFA_REMOTE_PENDING);
 *     shim_exit serves it a few instructions later, never in the middle of
 *     a change of the pointer table.
 * A fork is a shim call too: the fork handlers registered here run around
 * the shim's (glibc runs prepare handlers in the reverse order of their
 * registration, the others in order), so a signal that comes while the
 * forking thread holds every lock waits until fork returns, a fatal one
 * included.
 *
 * The program keeps what it sets for the control signal (its handler is
 * called for every delivery that is not tfalloc's, SIG_IGN ignores them) and
 * sigaction reports it back; tfalloc's handler stays with the kernel.  Its
 * action is kept twice, the handler reading the copy `cur` points to, so
 * that a handler never reads an action half written by sigaction.
 */
#include "core/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h> /* renameat */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "core/lock.h"
#include "core/log.h"
#include "core/options.h"
#include "core/shim.h"
#include "core/thread.h"

/* glibc's sigaction under its own name: the exported one is the program's (tfa_shim_sigaction). */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *oldact);

/* Requests that wait for the end of a shim call; more at once are dropped (the asker times out). */
#define QUEUE_LEN 16

static struct {
	int sig;   /* the control signal; 0: none */
	pid_t pid; /* the process answered for (a vfork child shares this memory, not the pid) */
	struct sigaction prog_act[2]; /* what the program set: prog_act[cur] */
	uint32_t cur;
} remote;
static tfa_lock_t remote_lock = TFA_LOCK_INIT; /* sigaction of the control signal */
static uint64_t queue[QUEUE_LEN];
static TFA_TLS uint32_t handler_depth; /* > 0: this thread runs the control signal's handler */

/* ---- answers ------------------------------------------------------------------------------- */

/* The answers' directory (made private to this user when missing): an fd, or -errno. */
static int
open_answer_dir(char *dir, size_t size)
{
	struct stat st;
	uid_t uid = geteuid();

	tfa_snprintf(dir, size, TFA_REMOTE_DIR_FMT, (unsigned)uid);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return -errno;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Another user's directory, or one others may write into, is never used. */
	if (fstat(fd, &st) != 0 || st.st_uid != uid || (st.st_mode & 077) != 0) {
		close(fd);
		return -EPERM;
	}
	if ((st.st_mode & 0700) != 0700) /* made under a umask that took the owner's bits */
		(void)fchmod(fd, 0700);
	return fd;
}

struct snapshot_answer {
	int err;
	const char *path;
};

static int
fill_snapshot(int fd, const void *arg)
{
	const struct snapshot_answer *a = arg;
	char line[TFA_OPT_STR_MAX + 256];

	if (a->err != 0) {
		const char *why = strerrordesc_np(-a->err);
		tfa_snprintf(line, sizeof(line), "error %d cannot write the profile: %s\n", -a->err,
			     why != NULL ? why : "error");
	} else if (tfa_shim_state() != TFA_SHIM_READY) {
		tfa_snprintf(line, sizeof(line), "error 0 the process is ending: its final profile comes instead\n");
	} else if (a->path[0] == '\0') {
		tfa_snprintf(line, sizeof(line), "error 0 the process writes no profile (TFALLOC_PROFILE=0)\n");
	} else {
		tfa_snprintf(line, sizeof(line), "ok %s\n", a->path);
	}
	return tfa_write_all(fd, line, strlen(line));
}

static int
fill_stats(int fd, const void *arg)
{
	(void)arg;
	return tfa_shim_write_stats(fd);
}

/* Writes the answer of (kind, token) as NAME.tmp, renamed NAME when whole. */
static void
answer(unsigned kind, uint32_t token, int (*fill)(int fd, const void *arg), const void *arg)
{
	char dir[64], name[64], tmp[72];
	int dfd = open_answer_dir(dir, sizeof(dir));

	if (dfd < 0) {
		TFA_LOG_ONCE("cannot answer tfalloc snapshot or top: %s: %s", dir,
			     dfd == -EPERM ? "not a private directory of this user"
					   : strerrordesc_np(-dfd) != NULL ? strerrordesc_np(-dfd) : "error");
		return;
	}
	tfa_snprintf(name, sizeof(name), TFA_REMOTE_ANSWER_FMT, (int)remote.pid, token,
		     tfa_remote_kind_name(kind));
	tfa_snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		/* Left by an answer this process did not finish. */
		unlinkat(dfd, tmp, 0);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	}
	if (fd >= 0) {
		int err = fill(fd, arg);
		if (close(fd) != 0 && err == 0)
			err = -errno;
		if (err == 0 && renameat(dfd, tmp, dfd, name) != 0)
			err = -errno;
		if (err != 0)
			unlinkat(dfd, tmp, 0);
	}
	close(dfd);
}

/* ---- serving -------------------------------------------------------------------------------- */

static void
serve(uint64_t req)
{
	unsigned kind = (unsigned)(req & 0xf);
	uint32_t token = (uint32_t)(req >> 4) & TFA_REMOTE_TOKEN_MAX;

	if (kind == TFA_REMOTE_SNAPSHOT) {
		/* From a handler, or under the guard (nested in foreign code): no loader lock. */
		struct snapshot_answer a = {
			.err = tfa_shim_remote_snapshot(handler_depth > 0 || tfa_guard_active()),
			.path = tfa_shim_profile_path(),
		};
		if (token != 0)
			answer(kind, token, fill_snapshot, &a);
	} else if (kind == TFA_REMOTE_STATS && token != 0) {
		answer(kind, token, fill_stats, NULL);
	}
}

static void
drain(void)
{
	for (size_t i = 0; i < QUEUE_LEN; i++) {
		uint64_t req = __atomic_exchange_n(&queue[i], 0, __ATOMIC_ACQ_REL);
		if (req != 0)
			serve(req);
	}
}

void
tfa_remote_serve_queue(void)
{
	int saved_errno = errno;

	if (getpid() != remote.pid) {
		/* A vfork child on its parent's thread: the parent serves them when it runs again. */
		tfa_tls.pending_signal = TFA_REMOTE_PENDING;
		return;
	}
	int cancel = tfa_cancel_off(); /* answers are files: open, write, close (core/log.h) */
	drain();
	tfa_cancel_restore(cancel);
	errno = saved_errno;
}

/* The request a delivery carries, 0 when it is not tfalloc's. */
static uint64_t
request_of(const siginfo_t *info)
{
	if (info == NULL || info->si_code != SI_QUEUE)
		return 0;
	uint64_t v = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
	return (v >> 32) == TFA_REMOTE_MAGIC ? v : 0;
}

static bool
is_handler(const struct sigaction *a)
{
	return (a->sa_flags & SA_SIGINFO) != 0 || (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN);
}

/* A delivery that is not tfalloc's: what the program asked for.  true: done with it. */
static bool
program_delivery(int sig, siginfo_t *info, void *ucontext, int saved_errno)
{
	uint32_t cur = __atomic_load_n(&remote.cur, __ATOMIC_ACQUIRE);
	struct sigaction pa = remote.prog_act[cur];

	if (!is_handler(&pa))
		return pa.sa_handler == SIG_IGN;
	if (pa.sa_flags & SA_RESETHAND) {
		/* One-shot: the program's action is the default from now on. */
		struct sigaction *next = &remote.prog_act[cur ^ 1];
		memset(next, 0, sizeof(*next));
		next->sa_handler = SIG_DFL;
		__atomic_store_n(&remote.cur, cur ^ 1, __ATOMIC_RELEASE);
	}
	errno = saved_errno;
	if (pa.sa_flags & SA_SIGINFO)
		pa.sa_sigaction(sig, info, ucontext);
	else
		pa.sa_handler(sig);
	return true;
}

static void
remote_handler(int sig, siginfo_t *info, void *ucontext)
{
	int saved_errno = errno;
	uint64_t req = request_of(info);

	if (req == 0) {
		if (program_delivery(sig, info, ucontext, saved_errno))
			return;
		/* The program left the default: kill -N PID asks for a snapshot, without answer. */
		req = tfa_remote_value(TFA_REMOTE_SNAPSHOT, 0);
	}
	if (getpid() != remote.pid || tfa_shim_state() != TFA_SHIM_READY) {
		/* A vfork child, or a process starting or ending: nobody answers. */
		errno = saved_errno;
		return;
	}
	if (tfa_tls.in_shim != 0) {
		/* Inside a shim call (or fork): served when it ends. */
		for (size_t i = 0; i < QUEUE_LEN; i++) {
			uint64_t free_slot = 0;
			if (__atomic_compare_exchange_n(&queue[i], &free_slot, req, false, __ATOMIC_ACQ_REL,
							__ATOMIC_RELAXED))
				break;
		}
		/* A pending fatal signal stays: the process ends there anyway. */
		int none = 0;
		if (!__atomic_compare_exchange_n(&tfa_tls.pending_signal, &none, TFA_REMOTE_PENDING, false,
						 __ATOMIC_RELAXED, __ATOMIC_RELAXED)
		    && none == TFA_DEFERRED_PENDING)
			/* The end of the call releases deferred signals whatever the mark says. */
			tfa_tls.pending_signal = TFA_REMOTE_PENDING;
	} else {
		handler_depth++;
		serve(req);
		drain();
		handler_depth--;
	}
	errno = saved_errno;
}

/* tfalloc's action for the control signal, given the program's (its mask and flags for its handler). */
static void
our_action(const struct sigaction *prog, struct sigaction *ours)
{
	memset(ours, 0, sizeof(*ours));
	ours->sa_sigaction = remote_handler;
	sigemptyset(&ours->sa_mask);
	/* Restarted: a program blocked in read(2) sees nothing of a request. */
	ours->sa_flags = SA_SIGINFO | SA_RESTART;
	if (is_handler(prog)) {
		ours->sa_mask = prog->sa_mask;
		ours->sa_flags = SA_SIGINFO | (prog->sa_flags & (SA_RESTART | SA_NODEFER | SA_ONSTACK));
	}
}

bool
tfa_remote_holds(int sig)
{
	return sig > 0 && sig == remote.sig && getpid() == remote.pid;
}

int
tfa_remote_sigaction(const struct sigaction *act, struct sigaction *oldact)
{
	struct sigaction prev, ours;
	int r = 0;

	tfa_lock(&remote_lock);
	uint32_t cur = __atomic_load_n(&remote.cur, __ATOMIC_ACQUIRE);
	prev = remote.prog_act[cur];
	if (act != NULL) {
		our_action(act, &ours);
		r = __sigaction(remote.sig, &ours, NULL);
		if (r == 0) {
			remote.prog_act[cur ^ 1] = *act;
			__atomic_store_n(&remote.cur, cur ^ 1, __ATOMIC_RELEASE);
		}
	}
	tfa_unlock(&remote_lock);
	if (r == 0 && oldact != NULL)
		*oldact = prev;
	return r;
}

/* ---- fork and init -------------------------------------------------------------------------- */

/*
 * Signals are blocked from the first prepare handler to the last of the
 * others, so that what reaches either process meanwhile waits in the kernel
 * (pending for the process it was sent to) instead of in the forking
 * thread's record, which the child inherits: the child took what came to it
 * after the clone for the parent's and dropped it.  A SIGTERM sent to a
 * child as it returned from fork (python's multiprocessing terminating the
 * children it had just started) was lost, and the child never ended: 8 of
 * 10 children in a fork-and-kill loop.  The forking thread's mask, kept
 * under remote_lock.
 */
static sigset_t fork_mask;

static void
remote_prefork(void)
{
	sigset_t all, old;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	tfa_shim_call_begin();
	tfa_lock(&remote_lock);
	fork_mask = old;
}

static void
remote_postfork_parent(void)
{
	sigset_t mask = fork_mask;

	tfa_unlock(&remote_lock);
	pthread_sigmask(SIG_SETMASK, &mask, NULL);
	/* A request or a fatal signal that came during fork is served, or ends the process, now. */
	tfa_shim_call_end();
}

static void
remote_postfork_child(void)
{
	tfa_lock_init(&remote_lock);
	remote.pid = getpid();
	/* What came before the signals were blocked was the parent's. */
	memset(queue, 0, sizeof(queue));
	/* A deferred signal is the parent's too, but the child must unblock it when fork returns. */
	tfa_tls.pending_signal = tfa_tls.deferred != 0 ? TFA_DEFERRED_PENDING : 0;
	/* What the kernel holds for the child comes now, and waits for the call's end. */
	pthread_sigmask(SIG_SETMASK, &fork_mask, NULL);
	tfa_shim_call_end();
}

void
tfa_remote_init(uint64_t sig)
{
	struct sigaction old, ours;

	remote.pid = getpid();
	if (pthread_atfork(remote_prefork, remote_postfork_parent, remote_postfork_child) != 0)
		tfa_log("pthread_atfork failed: a signal during fork may find the shim's locks held");
	if (sig == 0)
		return;
	if (!tfa_remote_signal_ok(sig)) {
		tfa_log("TFALLOC_CONTROL_SIGNAL=%llu: not a real-time signal (%d to %d); using %d",
			(unsigned long long)sig, (int)SIGRTMIN, (int)SIGRTMAX, TFA_REMOTE_DEFAULT_SIGNAL);
		sig = TFA_REMOTE_DEFAULT_SIGNAL;
	}
	if (__sigaction((int)sig, NULL, &old) != 0)
		return;
	/* What the program inherited (SIG_IGN through exec) or a constructor set stays the program's. */
	remote.prog_act[0] = old;
	our_action(&old, &ours);
	if (__sigaction((int)sig, &ours, NULL) == 0)
		remote.sig = (int)sig;
}
