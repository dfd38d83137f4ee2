/* SPDX-License-Identifier: MIT */
/*
 * Shared by the test programs of the integration suite (test/programs/tp_*).
 *
 * These programs are plain executables: they never link tfalloc.  They make
 * allocations whose effect on the profile is known exactly, check the C
 * semantics of every call themselves (a wrong semantic prints one line on
 * stderr and exits with status 90), and print what the profile must say.
 *
 * No stdio: the first printf to a pipe makes glibc allocate a buffer that it
 * never frees, which would end up in the profile.  Output goes through
 * write(2) from a static buffer.
 *
 * The ledger.  Each program mirrors every allocation call it makes in a
 * ledger of two "worlds": lo and hi.  Where the rules leave a figure open
 * (does realloc(NULL, n) count as a realloc?  is pvalloc(100) a request of 100
 * or of a page?) the lo world takes one reading and the hi world the other;
 * everywhere else they agree and the expectation is exact.  At the end the
 * program prints the ledger as one line
 *
 *   LEDGER {"num_allocs":[lo,hi],"num_frees":[lo,hi],...}
 *
 * and the test checks lo <= (report figure - baseline figure) <= hi, where
 * the baseline is the same binary run with the single argument "baseline"
 * (it then does nothing), so start-up allocations of the C runtime cancel out.
 */
#ifndef TP_COMMON_H
#define TP_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TP_FAIL_STATUS 90

#ifdef __cplusplus
#	define TP_ATOMIC_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#else
#	define TP_ATOMIC_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#endif

/* Pointers stored here escape: the compiler cannot drop an allocation. */
static void *volatile tp_sink __attribute__((unused));
#define TP_KEEP(p) (tp_sink = (void *)(p))

/* Writes all of buf to fd. */
static inline void
tp_write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

/* printf to fd through a stack buffer (vsnprintf does not allocate for these formats). */
static inline void __attribute__((format(printf, 2, 3))) tp_printf(int fd, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf))
		n = (int)sizeof(buf) - 1;
	tp_write_all(fd, buf, (size_t)n);
}

#define tp_out(...) tp_printf(1, __VA_ARGS__)

/* A semantic check failed: one line on stderr, exit 90. */
#define TP_CHECK(cond, ...)                                                                   \
	do {                                                                                  \
		if (!(cond)) {                                                                \
			tp_printf(2, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
			tp_printf(2, __VA_ARGS__);                                            \
			tp_printf(2, "\n");                                                   \
			_exit(TP_FAIL_STATUS);                                                \
		}                                                                             \
	} while (0)

/* The start of a small file (a /proc one) into buf, NUL-terminated; no stdio, whose FILE is a block. */
static inline void
tp_read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	TP_CHECK(fd >= 0, "open %s", path);
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	TP_CHECK(n > 0, "read %s", path);
	buf[n] = '\0';
}

static inline int
tp_is_baseline(int argc, char **argv)
{
	return argc > 1 && strcmp(argv[1], "baseline") == 0;
}

static inline int
tp_aligned(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

/* Fills a block so that a later check can see it was not clobbered. */
static inline void
tp_fill(void *p, size_t n, unsigned char seed)
{
	unsigned char *c = (unsigned char *)p;
	for (size_t i = 0; i < n; i++)
		c[i] = (unsigned char)(seed + i * 7);
}

static inline int
tp_check_fill(const void *p, size_t n, unsigned char seed)
{
	const unsigned char *c = (const unsigned char *)p;
	for (size_t i = 0; i < n; i++)
		if (c[i] != (unsigned char)(seed + i * 7))
			return 0;
	return 1;
}

static inline int
tp_all_zero(const void *p, size_t n)
{
	const unsigned char *c = (const unsigned char *)p;
	for (size_t i = 0; i < n; i++)
		if (c[i] != 0)
			return 0;
	return 1;
}

/* ---- the ledger ---------------------------------------------------------- */

typedef struct tp_world_s {
	long long num_allocs, num_frees, num_reallocs;
	long long bytes_in_use, peak_bytes_in_use, total_bytes, largest_alloc_size;
} tp_world_t;

typedef struct tp_ledger_s {
	tp_world_t w[2];  /* 0: lo, 1: hi */
	int peak_unknown; /* 1 when threads make the peak inexact */
} tp_ledger_t;

static tp_ledger_t tp_ledger __attribute__((unused));

static inline void
tp_world_alloc(tp_world_t *w, long long n)
{
	w->num_allocs++;
	w->bytes_in_use += n;
	w->total_bytes += n;
	if (n > w->largest_alloc_size)
		w->largest_alloc_size = n;
	if (w->bytes_in_use > w->peak_bytes_in_use)
		w->peak_bytes_in_use = w->bytes_in_use;
}

/* One successful allocation of n requested bytes (lo and hi readings). */
static inline void
tp_l_alloc2(long long lo, long long hi)
{
	tp_world_alloc(&tp_ledger.w[0], lo);
	tp_world_alloc(&tp_ledger.w[1], hi);
}

static inline void
tp_l_alloc(long long n)
{
	tp_l_alloc2(n, n);
}

static inline void
tp_l_free2(long long lo, long long hi)
{
	tp_ledger.w[0].num_frees++;
	tp_ledger.w[0].bytes_in_use -= lo;
	tp_ledger.w[1].num_frees++;
	tp_ledger.w[1].bytes_in_use -= hi;
}

static inline void
tp_l_free(long long n)
{
	tp_l_free2(n, n);
}

/*
 * A successful realloc that moved or resized a live block: 1 realloc, 1
 * alloc (the result), 1 free (the old block).  The result is counted before
 * the old block is released (the peak sees both) in the hi world and after it
 * in the lo world: whether a backend's in-place resize is seen as old+new for
 * an instant is the implementation's business.
 */
static inline void
tp_l_realloc(long long old_n, long long new_n)
{
	tp_world_t *lo = &tp_ledger.w[0], *hi = &tp_ledger.w[1];
	lo->num_reallocs++;
	lo->num_frees++;
	lo->bytes_in_use -= old_n;
	tp_world_alloc(lo, new_n);
	hi->num_reallocs++;
	tp_world_alloc(hi, new_n);
	hi->num_frees++;
	hi->bytes_in_use -= old_n;
}

/*
 * A call that may or may not be counted in num_reallocs: realloc(NULL, n) (a
 * malloc) and realloc(p, 0) (a free).  A refused realloc counts nothing.
 */
static inline void
tp_l_maybe_realloc(void)
{
	tp_ledger.w[1].num_reallocs++;
}

/* Thread-safe versions for the threaded programs (no peak, no largest). */
static inline void
tp_l_alloc_mt(long long n)
{
	for (int i = 0; i < 2; i++) {
		TP_ATOMIC_ADD(&tp_ledger.w[i].num_allocs, 1);
		TP_ATOMIC_ADD(&tp_ledger.w[i].bytes_in_use, n);
		TP_ATOMIC_ADD(&tp_ledger.w[i].total_bytes, n);
	}
}

static inline void
tp_l_free_mt(long long n)
{
	for (int i = 0; i < 2; i++) {
		TP_ATOMIC_ADD(&tp_ledger.w[i].num_frees, 1);
		TP_ATOMIC_ADD(&tp_ledger.w[i].bytes_in_use, -n);
	}
}

static inline void
tp_l_realloc_mt(long long old_n, long long new_n)
{
	for (int i = 0; i < 2; i++) {
		TP_ATOMIC_ADD(&tp_ledger.w[i].num_reallocs, 1);
		TP_ATOMIC_ADD(&tp_ledger.w[i].num_allocs, 1);
		TP_ATOMIC_ADD(&tp_ledger.w[i].num_frees, 1);
		TP_ATOMIC_ADD(&tp_ledger.w[i].bytes_in_use, new_n - old_n);
		TP_ATOMIC_ADD(&tp_ledger.w[i].total_bytes, new_n);
	}
}

/*
 * Prints the LEDGER line.  Leaks are what is live at exit: bytes_in_use and
 * num_allocs - num_frees blocks.  Call it last, just before returning from
 * main (and with no allocation after it).
 */
static inline void
tp_l_print(void)
{
	const tp_world_t *lo = &tp_ledger.w[0], *hi = &tp_ledger.w[1];
#define TP_PAIR(f) lo->f, hi->f
	if (!tp_ledger.peak_unknown)
		tp_out("LEDGER {\"num_allocs\":[%lld,%lld],\"num_frees\":[%lld,%lld],"
		       "\"num_reallocs\":[%lld,%lld],\"bytes_in_use\":[%lld,%lld],"
		       "\"peak_bytes_in_use\":[%lld,%lld],\"total_bytes\":[%lld,%lld],"
		       "\"largest_alloc_size\":[%lld,%lld],\"leak_bytes\":[%lld,%lld],"
		       "\"leak_blocks\":[%lld,%lld]}\n",
		       TP_PAIR(num_allocs), TP_PAIR(num_frees), TP_PAIR(num_reallocs),
		       TP_PAIR(bytes_in_use), TP_PAIR(peak_bytes_in_use), TP_PAIR(total_bytes),
		       TP_PAIR(largest_alloc_size), TP_PAIR(bytes_in_use),
		       lo->num_allocs - lo->num_frees, hi->num_allocs - hi->num_frees);
	else
		tp_out("LEDGER {\"num_allocs\":[%lld,%lld],\"num_frees\":[%lld,%lld],"
		       "\"num_reallocs\":[%lld,%lld],\"bytes_in_use\":[%lld,%lld],"
		       "\"total_bytes\":[%lld,%lld],\"leak_bytes\":[%lld,%lld],"
		       "\"leak_blocks\":[%lld,%lld]}\n",
		       TP_PAIR(num_allocs), TP_PAIR(num_frees), TP_PAIR(num_reallocs),
		       TP_PAIR(bytes_in_use), TP_PAIR(total_bytes), TP_PAIR(bytes_in_use),
		       lo->num_allocs - lo->num_frees, hi->num_allocs - hi->num_frees);
#undef TP_PAIR
}

#endif /* TP_COMMON_H */
