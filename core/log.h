/* SPDX-License-Identifier: MIT */
/*
 * Allocation-free formatting and output.  The shim may not call stdio, which
 * can allocate (the first printf to a file allocates its buffer), so every
 * message of the shim is formatted here into a caller's buffer and written
 * with write(2).
 *
 * Supported conversions: %s %c %d %i %u %x %X %p %% with the length modifiers
 * l, ll, z; %.*s; a width for d/u/x (space or zero padded, e.g. %08x, %5u).
 */
#ifndef TFA_CORE_LOG_H
#define TFA_CORE_LOG_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Formats into buf (always NUL-terminated when size > 0) and returns the
 * length the full output would have had, like snprintf.  [never allocates]
 * [async-signal-safe]
 */
size_t tfa_vsnprintf(char *buf, size_t size, const char *fmt, va_list ap);
size_t tfa_snprintf(char *buf, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Writes all of buf to fd, retrying on EINTR and short writes.  Returns 0 or -errno. */
int tfa_write_all(int fd, const void *buf, size_t len);

/*
 * Reads a small file (/proc) into buf, NUL-terminated, at most size - 1
 * bytes.  Returns the length, or -1 when it cannot be opened.  errno is kept.
 */
long tfa_read_small_file(const char *path, char *buf, size_t size);

/*
 * The calling thread's /proc file of the process's memory ("statm", "stat",
 * "maps"): /proc/thread-self/FILE, or /proc/self/FILE where the kernel has
 * no thread-self (before 3.17).  /proc/self is the thread group's leader,
 * whose memory files are empty once it has ended (a main thread that
 * called pthread_exit): the leak scan then had no mappings and called the
 * loader's blocks lost.  tfa_read_proc_self reads it as tfa_read_small_file
 * does; tfa_open_proc_self opens it (O_RDONLY | O_CLOEXEC), or returns -1.
 */
long tfa_read_proc_self(const char *file, char *buf, size_t size);
int tfa_open_proc_self(const char *file);

/*
 * Keeps a private duplicate of stderr (fd >= 1021, close-on-exec) for the
 * shim's messages, so that they still reach the terminal after the program
 * closed fd 2.  Called once at init.
 */
void tfa_log_init(void);

/* The fd messages go to: the duplicate while it is still stderr's file, else 2. */
int tfa_log_fd(void);

/*
 * Sends the messages to the file or FIFO at path (absolute, kept by the
 * caller) from now on: each one appended in one write, the file made (mode
 * 0600) when missing; a message the path does not take (no reader on a
 * FIFO, no permission, no descriptor left) goes to stderr.  NULL: stderr.
 */
void tfa_log_set_path(const char *path);

/*
 * Opens TFALLOC_LOG's file now and keeps the descriptor (far up,
 * close-on-exec), for messages the path refuses later: the process is about
 * to change its user or its root, or to shut itself in a sandbox.
 */
void tfa_log_keep(void);

/*
 * The descriptor tfa_log_keep kept (core/handoff.h hands it to the programs
 * executed after a change of user, and takes it in theirs).
 */
struct tfa_kept_fd_s;
struct tfa_kept_fd_s *tfa_log_kept_path_fd(void);

/*
 * Moves fd to the lowest free descriptor from 1021 on (close-on-exec), where
 * a program that closed its descriptors and opens others does not take its
 * number; under a soft RLIMIT_NOFILE below 1026, from 5 below the limit on.
 * Returns the new one, or fd itself when it is there already or none is free
 * there.  errno is kept.
 */
int tfa_fd_far(int fd);

/*
 * The reserve: two descriptors (a pipe's, far up) taken for a process whose
 * descriptors cannot be raised past its limit, and released (closed) when
 * the profile finds none free, so that it can open its files.  Release
 * returns whether any was still held.
 */
void tfa_fd_reserve_take(void);
bool tfa_fd_reserve_release(void);

/*
 * A descriptor the shim keeps for later (far up: tfa_fd_far), with the
 * device and inode it had: a program that closed it, and got the number
 * again for a file of its own, must never see the shim write or read there.
 */
typedef struct tfa_kept_fd_s {
	int fd; /* -1: none */
	dev_t dev;
	ino_t ino;
} tfa_kept_fd_t;

#define TFA_KEPT_FD_NONE { .fd = -1 }

/* Whether k's descriptor is still the one kept. */
bool tfa_kept_fd_ours(const tfa_kept_fd_t *k);
/* Keeps fd (moved far up) in k, in place of the one kept before (closed if still ours). */
void tfa_kept_fd_take(tfa_kept_fd_t *k, int fd);
/* Forgets k's descriptor, closed if still ours. */
void tfa_kept_fd_drop(tfa_kept_fd_t *k);
/* A duplicate of k's descriptor (close-on-exec; its file offset shared), or -1. */
int tfa_kept_fd_dup(const tfa_kept_fd_t *k);

/*
 * The shim's system calls that are cancellation points (open, write, close,
 * nanosleep, libunwind's pipe) run with the thread's cancellation off: a
 * thread that pthread_cancel had marked was cancelled inside a snapshot, and
 * unwound with the shim's locks held; the exit's profile then waited for them
 * forever (a process that never ended).  Returns the state to restore.
 */
static inline int
tfa_cancel_off(void)
{
	int old = PTHREAD_CANCEL_ENABLE;

	(void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	return old;
}

static inline void
tfa_cancel_restore(int old)
{
	int was;

	(void)pthread_setcancelstate(old, &was);
}

/*
 * One line on stderr, "tfalloc[PID]: message\n".  Messages longer than 1 KiB
 * are cut.  [never allocates]
 */
void tfa_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Formats a byte count for people: "512 B", "1.5 KiB", "12.0 MiB". */
size_t tfa_format_bytes(char *buf, size_t size, uint64_t bytes);

/* Logs once per call site; later calls are silent. */
#define TFA_LOG_ONCE(...)                                          \
	do {                                                       \
		static int tfa_log_once_done_;                     \
		if (!__atomic_exchange_n(&tfa_log_once_done_, 1, __ATOMIC_RELAXED)) \
			tfa_log(__VA_ARGS__);                      \
	} while (0)

#endif /* TFA_CORE_LOG_H */
