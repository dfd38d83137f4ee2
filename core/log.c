/* SPDX-License-Identifier: MIT */
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <time.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct out {
	char *buf;
	size_t size;
	size_t len; /* what the full output would need */
};

static void
out_char(struct out *o, char c)
{
	if (o->len + 1 < o->size)
		o->buf[o->len] = c;
	o->len++;
}

static void
out_str(struct out *o, const char *s, size_t max)
{
	for (size_t i = 0; i < max && s[i] != '\0'; i++)
		out_char(o, s[i]);
}

/* A number with an optional sign, padded to width as printf does ('0' pads after the sign). */
static void
out_number(struct out *o, unsigned long long v, bool negative, unsigned base, bool upper, int width,
	   char pad, bool left)
{
	const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
	char tmp[24];
	int n = 0;

	do {
		tmp[n++] = digits[v % base];
		v /= base;
	} while (v != 0);
	int len = n + (negative ? 1 : 0);
	if (negative && pad == '0')
		out_char(o, '-');
	for (int i = len; !left && i < width; i++)
		out_char(o, pad);
	if (negative && pad != '0')
		out_char(o, '-');
	while (n > 0)
		out_char(o, tmp[--n]);
	for (int i = len; left && i < width; i++)
		out_char(o, ' ');
}

size_t
tfa_vsnprintf(char *buf, size_t size, const char *fmt, va_list ap)
{
	struct out o = { .buf = buf, .size = size, .len = 0 };

	for (const char *p = fmt; *p != '\0'; p++) {
		if (*p != '%') {
			out_char(&o, *p);
			continue;
		}
		p++;
		char pad = ' ';
		bool left = false;
		int width = 0;
		int precision = -1;
		int longs = 0;
		bool size_t_mod = false;

		if (*p == '-') {
			left = true;
			p++;
		}
		if (*p == '0' && !left) {
			pad = '0';
			p++;
		}
		while (*p >= '0' && *p <= '9')
			width = width * 10 + (*p++ - '0');
		if (*p == '.' && p[1] == '*') {
			precision = va_arg(ap, int);
			p += 2;
		}
		while (*p == 'l') {
			longs++;
			p++;
		}
		if (*p == 'z') {
			size_t_mod = true;
			p++;
		}
		switch (*p) {
		case 's': {
			const char *s = va_arg(ap, const char *);
			if (s == NULL)
				s = "(null)";
			size_t max = precision >= 0 ? (size_t)precision : (size_t)-1;
			size_t n = precision >= 0 ? strnlen(s, max) : strlen(s);
			for (int i = (int)n; !left && i < width; i++)
				out_char(&o, ' ');
			out_str(&o, s, max);
			for (int i = (int)n; left && i < width; i++)
				out_char(&o, ' ');
			break;
		}
		case 'c':
			out_char(&o, (char)va_arg(ap, int));
			break;
		case 'd':
		case 'i': {
			long long v;
			if (size_t_mod)
				v = va_arg(ap, ptrdiff_t);
			else if (longs >= 2)
				v = va_arg(ap, long long);
			else if (longs == 1)
				v = va_arg(ap, long);
			else
				v = va_arg(ap, int);
			if (v < 0)
				out_number(&o, 0ULL - (unsigned long long)v, true, 10, false, width, pad, left);
			else
				out_number(&o, (unsigned long long)v, false, 10, false, width, pad, left);
			break;
		}
		case 'u':
		case 'x':
		case 'X': {
			unsigned long long v;
			if (size_t_mod)
				v = va_arg(ap, size_t);
			else if (longs >= 2)
				v = va_arg(ap, unsigned long long);
			else if (longs == 1)
				v = va_arg(ap, unsigned long);
			else
				v = va_arg(ap, unsigned);
			out_number(&o, v, false, *p == 'u' ? 10 : 16, *p == 'X', width, pad, left);
			break;
		}
		case 'p':
			out_str(&o, "0x", 2);
			out_number(&o, (uintptr_t)va_arg(ap, void *), false, 16, false, 0, ' ', false);
			break;
		case '%':
			out_char(&o, '%');
			break;
		case '\0':
			p--;
			break;
		default:
			out_char(&o, '%');
			out_char(&o, *p);
			break;
		}
	}
	if (size > 0)
		buf[o.len < size ? o.len : size - 1] = '\0';
	return o.len;
}

size_t
tfa_snprintf(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t n = tfa_vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	return n;
}

/*
 * Two failures of write(2) come with a signal to the writing thread whose
 * default action ends the process: EFBIG with SIGXFSZ (a write at or past
 * RLIMIT_FSIZE: a full quota, `ulimit -f`) and EPIPE with SIGPIPE (stderr a
 * pipe nobody reads any more).  tfalloc's own profile or message must never
 * kill the program, so both are blocked around the write, and the one the
 * write raised is taken back (the kernel queues it on this thread, which
 * sigtimedwait looks at first), unless one was pending already.
 */
static void
take_back(int sig, const sigset_t *old, const sigset_t *pending_before)
{
	sigset_t one;
	const struct timespec now = { 0, 0 };

	/* Unblocked before, nothing could be pending: it would have been delivered. */
	if (sigismember(old, sig) && sigismember(pending_before, sig))
		return;
	sigemptyset(&one);
	sigaddset(&one, sig);
	while (sigtimedwait(&one, NULL, &now) < 0 && errno == EINTR)
		;
}

int
tfa_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	sigset_t quiet, old, pending;
	int err = 0, saved;

	sigemptyset(&quiet);
	sigaddset(&quiet, SIGXFSZ);
	sigaddset(&quiet, SIGPIPE);
	sigemptyset(&pending);
	bool blocked = pthread_sigmask(SIG_BLOCK, &quiet, &old) == 0;
	if (blocked && (sigismember(&old, SIGXFSZ) || sigismember(&old, SIGPIPE)))
		(void)sigpending(&pending);
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	if (blocked) {
		saved = errno;
		if (err == -EFBIG)
			take_back(SIGXFSZ, &old, &pending);
		else if (err == -EPIPE)
			take_back(SIGPIPE, &old, &pending);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		errno = saved;
	}
	return err;
}

/*
 * Messages go to the stderr the process started with: programs close or
 * redirect fd 2 (coreutils close it at exit, before the profile is written),
 * so tfa_log_init keeps a duplicate far above the fds programs use, and
 * checks before each write that it is still the same file.
 */
#define LOG_FD_MIN 1021

/*
 * The descriptors the shim may keep at once: the duplicate of stderr,
 * libunwind's pipe and the reserve's pipe.  Under a soft RLIMIT_NOFILE
 * below LOG_FD_MIN + SHIM_FDS they go to the top of what the limit allows:
 * at the lowest numbers (libunwind's pipe at 3 and 4 under a limit of 64) a
 * daemon that closed its descriptors and opened its own got them mixed up.
 */
#define SHIM_FDS 5

static int
fd_floor(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= (rlim_t)LOG_FD_MIN + SHIM_FDS)
		return LOG_FD_MIN;
	return rl.rlim_cur > 3 + SHIM_FDS ? (int)rl.rlim_cur - SHIM_FDS : 3;
}

static tfa_kept_fd_t log_kept = TFA_KEPT_FD_NONE;

void
tfa_log_init(void)
{
	int saved_errno = errno;
	int fd = fcntl(2, F_DUPFD_CLOEXEC, fd_floor());

	if (fd >= 0)
		tfa_kept_fd_take(&log_kept, fd);
	errno = saved_errno;
}

int
tfa_fd_far(int fd)
{
	if (fd >= LOG_FD_MIN)
		return fd;
	int saved_errno = errno;
	int floor = fd_floor();
	if (fd >= floor) {
		errno = saved_errno;
		return fd;
	}
	int far = fcntl(fd, F_DUPFD_CLOEXEC, floor);

	if (far >= 0)
		close(fd);
	errno = saved_errno;
	return far >= 0 ? far : fd;
}

bool
tfa_kept_fd_ours(const tfa_kept_fd_t *k)
{
	struct stat st;
	int saved_errno = errno;
	bool ours = k->fd >= 0 && fstat(k->fd, &st) == 0 && st.st_dev == k->dev && st.st_ino == k->ino;

	errno = saved_errno;
	return ours;
}

void
tfa_kept_fd_drop(tfa_kept_fd_t *k)
{
	if (tfa_kept_fd_ours(k))
		close(k->fd);
	k->fd = -1;
}

void
tfa_kept_fd_take(tfa_kept_fd_t *k, int fd)
{
	struct stat st;
	int saved_errno = errno;

	fd = tfa_fd_far(fd);
	tfa_kept_fd_drop(k);
	if (fstat(fd, &st) == 0) {
		*k = (tfa_kept_fd_t){ .fd = fd, .dev = st.st_dev, .ino = st.st_ino };
	} else {
		close(fd);
	}
	errno = saved_errno;
}

int
tfa_kept_fd_dup(const tfa_kept_fd_t *k)
{
	return tfa_kept_fd_ours(k) ? fcntl(k->fd, F_DUPFD_CLOEXEC, 0) : -1;
}

/*
 * The reserve: a pipe's two descriptors held for the profile, in a process
 * whose soft RLIMIT_NOFILE is its hard one.  A program that used up its
 * descriptors had no profile there ("Too many open files"): the soft limit
 * is raised while the profile is written (tfalloc's shim), but not past the
 * hard one.  A pipe, not /dev/null: each pipe is an inode of its own, so
 * that the device-and-inode check tells it from any file the program may
 * open under the same number after closing it (a daemon opens /dev/null).
 * Not "/": a descriptor to the root directory would let a chrooted process
 * out of its chroot.
 */
static tfa_kept_fd_t reserve[2] = { TFA_KEPT_FD_NONE, TFA_KEPT_FD_NONE };

void
tfa_fd_reserve_take(void)
{
	int saved_errno = errno;
	int fds[2];

	/* The system call: tfalloc's own pipe2 is for libunwind's. */
	if (!tfa_kept_fd_ours(&reserve[0]) && !tfa_kept_fd_ours(&reserve[1])
	    && syscall(SYS_pipe2, fds, O_CLOEXEC) == 0) {
		tfa_kept_fd_take(&reserve[0], fds[0]);
		tfa_kept_fd_take(&reserve[1], fds[1]);
	}
	errno = saved_errno;
}

bool
tfa_fd_reserve_release(void)
{
	bool any = tfa_kept_fd_ours(&reserve[0]) || tfa_kept_fd_ours(&reserve[1]);

	tfa_kept_fd_drop(&reserve[0]);
	tfa_kept_fd_drop(&reserve[1]);
	return any;
}

int
tfa_log_fd(void)
{
	/* Not ours any more: the program closed or reused it. */
	return tfa_kept_fd_ours(&log_kept) ? log_kept.fd : 2;
}

/*
 * TFALLOC_LOG: `tfalloc run` reads its FIFO and prints the lines on its own
 * stderr.  In each process's stderr, they went into what programs read of
 * their children's output: cmake's configure captures its compiler checks'
 * output with their stderr, and failed on a summary line in it ("include
 * called with invalid argument").
 */
static const char *log_path;

void
tfa_log_set_path(const char *path)
{
	__atomic_store_n(&log_path, path, __ATOMIC_RELEASE);
}

/* TFALLOC_LOG's file as it was opened before the process changed its user, its root or its sandbox. */
static tfa_kept_fd_t log_path_kept = TFA_KEPT_FD_NONE;

/* O_NONBLOCK: a FIFO without a reader refuses at once (ENXIO), a full one fails the write. */
#define LOG_PATH_FLAGS (O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)

void
tfa_log_keep(void)
{
	const char *path = __atomic_load_n(&log_path, __ATOMIC_ACQUIRE);
	int saved_errno = errno;

	if (path != NULL && !tfa_kept_fd_ours(&log_path_kept)) {
		int fd = open(path, LOG_PATH_FLAGS, 0600);
		if (fd >= 0)
			tfa_kept_fd_take(&log_path_kept, fd);
	}
	errno = saved_errno;
}

struct tfa_kept_fd_s *
tfa_log_kept_path_fd(void)
{
	return &log_path_kept;
}

/* Whether the message went to TFALLOC_LOG's file: opened for each message, as messages are few. */
static bool
log_to_path(const char *buf, size_t n)
{
	const char *path = __atomic_load_n(&log_path, __ATOMIC_ACQUIRE);

	if (path == NULL)
		return false;
	int fd = open(path, LOG_PATH_FLAGS, 0600);
	if (fd >= 0) {
		bool sent = tfa_write_all(fd, buf, n) == 0;
		close(fd);
		return sent;
	}
	/* Refused now (another user, root or sandbox): the descriptor kept from before, if any. */
	return tfa_kept_fd_ours(&log_path_kept) && tfa_write_all(log_path_kept.fd, buf, n) == 0;
}

void
tfa_log(const char *fmt, ...)
{
	char buf[1024];
	int saved_errno = errno;
	size_t n = tfa_snprintf(buf, sizeof(buf), "tfalloc[%d]: ", (int)getpid());
	va_list ap;

	va_start(ap, fmt);
	if (n < sizeof(buf))
		n += tfa_vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
	va_end(ap);
	if (n > sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	int cancel = tfa_cancel_off();
	if (!log_to_path(buf, n))
		(void)tfa_write_all(tfa_log_fd(), buf, n);
	tfa_cancel_restore(cancel);
	errno = saved_errno;
}

size_t
tfa_format_bytes(char *buf, size_t size, uint64_t bytes)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	unsigned u = 0;
	uint64_t unit = 1024;

	if (bytes < 1024)
		return tfa_snprintf(buf, size, "%llu B", (unsigned long long)bytes);
	while (u + 1 < sizeof(units) / sizeof(units[0]) && bytes / unit >= 1024) {
		unit *= 1024;
		u++;
	}
	/* One decimal, rounded, without floating point; 1023.96 KiB is 1.0 MiB. */
	uint64_t tenths = (bytes / unit) * 10 + ((bytes % unit) * 10 + unit / 2) / unit;
	if (tenths >= 10240 && u + 1 < sizeof(units) / sizeof(units[0])) {
		u++;
		unit *= 1024;
		tenths = (bytes / unit) * 10 + ((bytes % unit) * 10 + unit / 2) / unit;
	}
	return tfa_snprintf(buf, size, "%llu.%llu %s", (unsigned long long)(tenths / 10),
			    (unsigned long long)(tenths % 10), units[u]);
}

long
tfa_read_small_file(const char *path, char *buf, size_t size)
{
	int saved_errno = errno;
	int cancel = tfa_cancel_off();
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;

	if (fd < 0 || size == 0) {
		if (fd >= 0)
			close(fd);
		tfa_cancel_restore(cancel);
		errno = saved_errno;
		return -1;
	}
	while (len + 1 < size) {
		ssize_t n = read(fd, buf + len, size - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	tfa_cancel_restore(cancel);
	buf[len] = '\0';
	errno = saved_errno;
	return (long)len;
}

int
tfa_open_proc_self(const char *file)
{
	char path[64];

	tfa_snprintf(path, sizeof(path), "/proc/thread-self/%s", file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		tfa_snprintf(path, sizeof(path), "/proc/self/%s", file);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	return fd;
}

long
tfa_read_proc_self(const char *file, char *buf, size_t size)
{
	char path[64];

	tfa_snprintf(path, sizeof(path), "/proc/thread-self/%s", file);
	long n = tfa_read_small_file(path, buf, size);
	if (n < 0) {
		tfa_snprintf(path, sizeof(path), "/proc/self/%s", file);
		n = tfa_read_small_file(path, buf, size);
	}
	return n;
}
