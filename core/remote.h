/* SPDX-License-Identifier: MIT */
/*
 * Requests from outside the process: `tfalloc snapshot PID` asks a running
 * process for its profile now, `tfalloc top PID` for its figures now.  The
 * shim's side (core/remote.c) and the protocol both sides share.
 *
 * Request  a real-time signal, the control signal (TFALLOC_CONTROL_SIGNAL,
 *          default TFA_REMOTE_DEFAULT_SIGNAL), queued with a value
 *          (rt_tgsigqueueinfo or sigqueue: si_code SI_QUEUE):
 *
 *              value = TFA_REMOTE_MAGIC << 32 | token << 4 | kind
 *
 *          kind says what is asked (enum tfa_remote_kind_e), the token
 *          (28 bits, nonzero, chosen by the asker) names the answer.  Only
 *          the process's user (or root) may send it: the kernel's rule for
 *          kill(2).  A delivery without the magic (kill -N PID) is the
 *          program's when it installed a handler for the signal, else it
 *          asks for a snapshot without an answer.
 *
 * Answer   the file ANSWER_DIR/PID.TOKEN.KIND: ANSWER_DIR is
 *          TFA_REMOTE_DIR_FMT of the process's effective uid (made mode 0700
 *          if missing; never used when another user owns it or others may
 *          write into it), TOKEN 8 hex digits, KIND "snapshot" or "stats".
 *          It is written as NAME.tmp and renamed, so it is whole when it
 *          appears; the asker removes it.
 *            snapshot  one line: "ok PATH" (the profile was written to PATH,
 *                      end reason running) or "error ERRNO MESSAGE"
 *            stats     a profile file (core/profile_format.h) holding the
 *                      PROCESS and DEVICE records and the control API's
 *                      RESOURCE (and CLEANUP) records only
 */
#ifndef TFA_CORE_REMOTE_H
#define TFA_CORE_REMOTE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* SIGRTMIN + 16 with glibc (SIGRTMIN 34): clear of glibc's own (32, 33) and valgrind's (the top). */
#define TFA_REMOTE_DEFAULT_SIGNAL 50

#define TFA_REMOTE_MAGIC     0x7fa1c0deu
#define TFA_REMOTE_TOKEN_MAX 0x0fffffffu

enum tfa_remote_kind_e {
	TFA_REMOTE_SNAPSHOT = 1, /* write the profile (a snapshot) and say where */
	TFA_REMOTE_STATS = 2,    /* write the figures of now (tfalloc top) */
};

#define TFA_REMOTE_DIR_FMT    "/tmp/tfalloc-%u"
#define TFA_REMOTE_ANSWER_FMT "%d.%08x.%s"

/* tfa_tls.pending_signal of a thread whose shim call a request interrupted: see the queue. */
#define TFA_REMOTE_PENDING (-1)
/* tfa_tls.pending_signal of a thread with a program's signal handler deferred (tfa_tls.deferred). */
#define TFA_DEFERRED_PENDING (-2)

static inline uint64_t
tfa_remote_value(unsigned kind, uint32_t token)
{
	return (uint64_t)TFA_REMOTE_MAGIC << 32 | (uint64_t)(token & TFA_REMOTE_TOKEN_MAX) << 4
	       | (kind & 0xf);
}

static inline const char *
tfa_remote_kind_name(unsigned kind)
{
	return kind == TFA_REMOTE_SNAPSHOT ? "snapshot" : kind == TFA_REMOTE_STATS ? "stats" : "unknown";
}

/* Whether sig may be the control signal: a real-time signal glibc leaves to programs. */
static inline bool
tfa_remote_signal_ok(uint64_t sig)
{
	return sig >= (uint64_t)SIGRTMIN && sig <= (uint64_t)SIGRTMAX;
}

/*
 * Called once by the shim's init, after its own pthread_atfork: fork
 * handlers that make fork a shim call (a signal that comes meanwhile waits
 * for it to return), and, unless sig is 0, the handler of the control
 * signal sig (a bad one is said and TFA_REMOTE_DEFAULT_SIGNAL used).
 */
void tfa_remote_init(uint64_t sig);

/* Whether sig is the control signal and tfalloc holds it (sigaction goes to tfa_remote_sigaction). */
bool tfa_remote_holds(int sig);

struct sigaction;
/*
 * sigaction of the control signal as the program sees it: what it sets is
 * kept (its handler is called for every delivery that is not tfalloc's) and
 * reported back; tfalloc's handler stays with the kernel.
 */
int tfa_remote_sigaction(const struct sigaction *act, struct sigaction *oldact);

/*
 * Serves the requests that came while this thread was inside a shim call.
 * Called by the shim when the call ends (tfa_tls.pending_signal was
 * TFA_REMOTE_PENDING).  errno is kept.
 */
void tfa_remote_serve_queue(void);

#endif /* TFA_CORE_REMOTE_H */
