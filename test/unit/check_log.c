/* SPDX-License-Identifier: MIT */
/*
 * core/log.h: tfa_snprintf against the C library's snprintf for every
 * supported conversion, truncation and size 0; tfa_format_bytes; tfa_log and
 * tfa_write_all on real file descriptors.
 */
#include "core/log.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/*
 * Formats with both and compares output and return value.  A macro, so that
 * the format stays a literal for -Wformat=2 and the line of a failure is the
 * caller's.
 */
#define CMP(...)                                                                           \
	do {                                                                               \
		char ours_[512], libc_[512];                                               \
		size_t n_ours_ = tfa_snprintf(ours_, sizeof(ours_), __VA_ARGS__);          \
		int n_libc_ = snprintf(libc_, sizeof(libc_), __VA_ARGS__);                 \
		ck_assert_msg(strcmp(ours_, libc_) == 0, "%s: tfa \"%s\", libc \"%s\"",    \
		              #__VA_ARGS__, ours_, libc_);                                 \
		ck_assert_msg(n_ours_ == (size_t)n_libc_, "%s: tfa returned %zu, libc %d", \
		              #__VA_ARGS__, n_ours_, n_libc_);                             \
	} while (0)

START_TEST(test_log_snprintf_strings)
{
	CMP("plain text");
	CMP("%s", "hello");
	CMP("[%s] [%s]", "", "x");
	CMP("%c%c%c", 'a', 'b', 'c');
	CMP("100%%");
	CMP("%% %s %%", "mid");
	CMP("%.*s|", 3, "abcdef");
	CMP("%.*s|", 0, "abcdef");
	CMP("%.*s|", 10, "abc");
	CMP("%.*s|", 6, "abcdef");
	CMP("%5s|%-5s|", "ab", "cd");
	CMP("%-24s %-5s|", "TFALLOC_LIMIT", "size");
	CMP("%3s|", "abcdef");
}
END_TEST

START_TEST(test_log_snprintf_integers)
{
	CMP("%d %d %d", 0, 1, -1);
	CMP("%d %d", INT_MAX, INT_MIN);
	CMP("%i %i", 12345, -12345);
	CMP("%u %u", 0u, UINT_MAX);
	CMP("%x %X", 0xdeadbeefu, 0xdeadbeefu);
	CMP("%x", 0u);
	CMP("%ld %ld", LONG_MAX, LONG_MIN);
	CMP("%lu", ULONG_MAX);
	CMP("%lx %lX", 0x123456789abcdefUL, 0xfedcba987654321UL);
	CMP("%lld %lld", (long long)INT64_MAX, (long long)INT64_MIN);
	CMP("%llu", (unsigned long long)UINT64_MAX);
	CMP("%llx", 0xffffffffffffffffULL);
	CMP("%zu %zu", (size_t)0, SIZE_MAX);
	CMP("%zd %zd", (ssize_t)-42, (ssize_t)SSIZE_MAX);
	CMP("%zx", (size_t)0xabcdef);
	CMP("a%db%uc%sd", -7, 7u, "s");
}
END_TEST

START_TEST(test_log_snprintf_widths)
{
	CMP("%08x", 0xbeefu);
	CMP("%08x", 0x12345678u);
	CMP("%08x", (unsigned)(0x123456789ULL & 0xffffffffu));
	CMP("%5u|", 42u);
	CMP("%5u|", 1234567u);
	CMP("%05u|", 42u);
	CMP("%2x|", 0xabcu);
	CMP("%016lx", 0xabcUL);
	CMP("%5d|", 42);
	CMP("%05d|", 42);
	CMP("%3zu|", (size_t)7);
	CMP("%08llX", 0xabcULL);
}
END_TEST

/* Widths with negative numbers: the sign goes before the padding. */
START_TEST(test_log_snprintf_negative_width)
{
	CMP("%5d|", -42);
	CMP("%05d|", -42);
	CMP("%8ld|", -123456L);
	CMP("%3d|", -12345);
}
END_TEST

/* Widths wider than the longest number (the C library has no limit). */
START_TEST(test_log_snprintf_wide_width)
{
	CMP("%40u|", 7u);
	CMP("%040x|", 0xffu);
}
END_TEST

START_TEST(test_log_snprintf_pointers)
{
	int x;
	void *ps[] = { &x, (void *)(uintptr_t)0x1, (void *)(uintptr_t)0x7fffdeadbee0,
		       (void *)UINTPTR_MAX };

	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
		CMP("%p", ps[i]);
	CMP("<%p>", (void *)&x);
}
END_TEST

START_TEST(test_log_snprintf_truncation)
{
	char buf[16];
	size_t n;

	/* The return value is the full length; the buffer always ends in NUL. */
	memset(buf, 'x', sizeof(buf));
	n = tfa_snprintf(buf, 5, "%s", "hello world");
	ck_assert_uint_eq(n, 11);
	ck_assert_str_eq(buf, "hell");
	ck_assert_int_eq(buf[5], 'x');

	memset(buf, 'x', sizeof(buf));
	n = tfa_snprintf(buf, 1, "%d", 12345);
	ck_assert_uint_eq(n, 5);
	ck_assert_int_eq(buf[0], '\0');
	ck_assert_int_eq(buf[1], 'x');

	memset(buf, 'x', sizeof(buf));
	n = tfa_snprintf(buf, 6, "%s", "12345");
	ck_assert_uint_eq(n, 5);
	ck_assert_str_eq(buf, "12345");
	n = tfa_snprintf(buf, 5, "%s", "12345");
	ck_assert_uint_eq(n, 5);
	ck_assert_str_eq(buf, "1234");

	/* Truncation in the middle of a number and of a padded field. */
	n = tfa_snprintf(buf, 4, "%08x", 0xabcu);
	ck_assert_uint_eq(n, 8);
	ck_assert_str_eq(buf, "000");
	n = tfa_snprintf(buf, 8, "ab%lldcd", (long long)INT64_MIN);
	ck_assert_uint_eq(n, 24);
	ck_assert_str_eq(buf, "ab-9223");

	/* Size 0: nothing written, not even a NUL; NULL is fine then. */
	memset(buf, 'x', sizeof(buf));
	n = tfa_snprintf(buf, 0, "%s %d", "abc", 12);
	ck_assert_uint_eq(n, 6);
	ck_assert_int_eq(buf[0], 'x');
	n = tfa_snprintf(NULL, 0, "%zu", (size_t)123456);
	ck_assert_uint_eq(n, 6);
	n = tfa_snprintf(buf, sizeof(buf), "%s", "");
	ck_assert_uint_eq(n, 0);
	ck_assert_str_eq(buf, "");
}
END_TEST

/* ---- tfa_format_bytes --------------------------------------------------------------------- */

static const struct {
	uint64_t bytes;
	const char *text;
} bytes_table[] = {
	{ 0, "0 B" },
	{ 1, "1 B" },
	{ 512, "512 B" },
	{ 1023, "1023 B" },
	{ 1024, "1.0 KiB" },
	{ 1075, "1.0 KiB" },
	{ 1126, "1.1 KiB" },
	{ 1536, "1.5 KiB" },
	{ 10240, "10.0 KiB" },
	{ 1000 * 1024, "1000.0 KiB" },
	{ 1024 * 1024, "1.0 MiB" },
	{ 1536 * 1024, "1.5 MiB" },
	{ 12 * 1024 * 1024, "12.0 MiB" },
	{ UINT64_C(1) << 30, "1.0 GiB" },
	{ (UINT64_C(5) << 30) / 2, "2.5 GiB" },
	{ UINT64_C(1) << 40, "1.0 TiB" },
	{ UINT64_C(1) << 50, "1.0 PiB" },
	{ UINT64_C(1) << 60, "1.0 EiB" },
	{ UINT64_MAX, "16.0 EiB" },
};

START_TEST(test_log_format_bytes)
{
	char buf[64];

	for (size_t i = 0; i < sizeof(bytes_table) / sizeof(bytes_table[0]); i++) {
		size_t n = tfa_format_bytes(buf, sizeof(buf), bytes_table[i].bytes);
		ck_assert_msg(strcmp(buf, bytes_table[i].text) == 0,
		              "%llu bytes: \"%s\", want \"%s\"",
		              (unsigned long long)bytes_table[i].bytes, buf, bytes_table[i].text);
		ck_assert_uint_eq(n, strlen(bytes_table[i].text));
	}
	/* Cut like snprintf. */
	ck_assert_uint_eq(tfa_format_bytes(buf, 4, 1536), 7);
	ck_assert_str_eq(buf, "1.5");
}
END_TEST

/* Rounding to one decimal carries into the next unit: never "1024.0 KiB". */
START_TEST(test_log_format_bytes_carry)
{
	char buf[64];

	tfa_format_bytes(buf, sizeof(buf), 1024 * 1024 - 1);
	ck_assert_str_eq(buf, "1.0 MiB");
	tfa_format_bytes(buf, sizeof(buf), (UINT64_C(1) << 30) - 100);
	ck_assert_str_eq(buf, "1.0 GiB");
	/* Just below the carry, one decimal still shows. */
	tfa_format_bytes(buf, sizeof(buf), 1024 * 1024 - 60);
	ck_assert_str_eq(buf, "1023.9 KiB");
}
END_TEST

/* ---- output ------------------------------------------------------------------------------- */

static int
temp_fd(void)
{
	char path[] = "/tmp/tfa_check_log_XXXXXX";
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	unlink(path);
	return fd;
}

static size_t
read_back(int fd, char *buf, size_t size)
{
	size_t got = 0;
	ssize_t n;

	ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
	while (got < size && (n = read(fd, buf + got, size - got)) > 0)
		got += (size_t)n;
	return got;
}

START_TEST(test_log_write_all)
{
	enum { N = 1 << 20 };
	char *data = malloc(N), *back = malloc(N + 1);
	int fd = temp_fd();

	ck_assert(data != NULL && back != NULL);
	for (size_t i = 0; i < N; i++)
		data[i] = (char)(i * 31 + 7);
	ck_assert_int_eq(tfa_write_all(fd, data, N), 0);
	ck_assert_int_eq(tfa_write_all(fd, data, 0), 0);
	ck_assert_uint_eq(read_back(fd, back, N + 1), N);
	ck_assert_mem_eq(back, data, N);
	close(fd);
	ck_assert_int_eq(tfa_write_all(fd, "x", 1), -EBADF);
	free(data);
	free(back);
}
END_TEST

START_TEST(test_log_line_format)
{
	char buf[4096], want[128];
	int fd = temp_fd();
	int saved = dup(2);

	ck_assert_int_ge(saved, 0);
	ck_assert_int_eq(tfa_log_fd(), 2);
	ck_assert_int_eq(dup2(fd, 2), 2);

	errno = 1234;
	tfa_log("hello %d %s", 42, "world");
	ck_assert_int_eq(errno, 1234);

	/* A long message is cut to 1 KiB, still one line. */
	static char longmsg[3000];
	memset(longmsg, 'm', sizeof(longmsg) - 1);
	tfa_log("%s", longmsg);

	dup2(saved, 2);
	close(saved);
	size_t got = read_back(fd, buf, sizeof(buf));
	close(fd);

	int len = snprintf(want, sizeof(want), "tfalloc[%d]: hello 42 world\n", (int)getpid());
	ck_assert_uint_ge(got, (size_t)len);
	ck_assert_mem_eq(buf, want, (size_t)len);
	ck_assert_uint_le(got - (size_t)len, 1024);
	ck_assert_uint_ge(got - (size_t)len, 1000);
	ck_assert_int_eq(buf[got - 1], '\n');
	ck_assert_ptr_null(memchr(buf + len, '\n', got - (size_t)len - 1));
}
END_TEST

START_TEST(test_log_init_keeps_stderr)
{
	struct stat a, b;
	struct rlimit rl;

	/* The duplicate lives at fd >= 1021, or within 5 of a lower limit (test_log_low_limit_and_reserve). */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 1026)
		return;
	tfa_log_init();
	int fd = tfa_log_fd();
	ck_assert_int_ge(fd, 1021);
	ck_assert_int_eq(fstat(fd, &a), 0);
	ck_assert_int_eq(fstat(2, &b), 0);
	ck_assert(a.st_dev == b.st_dev && a.st_ino == b.st_ino);
	ck_assert_int_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}
END_TEST

/*
 * A temporary file holding text; its fd.  Left linked until the test ends
 * (the test's fork exits): an unlinked file's inode can be given to the next
 * one, as a kept descriptor's file never is (the profile stays in its
 * directory).
 */
static char temp_paths[4][32];
static int ntemp;

static int
temp_file(const char *text)
{
	char *path = temp_paths[ntemp++ % 4];
	strcpy(path, "/tmp/tfa-check-log-XXXXXX");
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	return fd;
}

static void
temp_files_remove(void)
{
	for (int i = 0; i < ntemp && i < 4; i++)
		unlink(temp_paths[i]);
}

/*
 * tfa_fd_far moves a descriptor to 1021 and up, close-on-exec; a kept
 * descriptor is told apart from a file the program opened later under its
 * number (device and inode): never read, written or closed then.
 */
START_TEST(test_log_kept_fd)
{
	struct rlimit rl;
	tfa_kept_fd_t k = TFA_KEPT_FD_NONE;
	char buf[16] = "";

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 1030)
		return;
	ck_assert(!tfa_kept_fd_ours(&k));
	ck_assert_int_eq(tfa_kept_fd_dup(&k), -1);
	int low = temp_file("kept");
	tfa_kept_fd_take(&k, low);
	ck_assert_int_ge(k.fd, 1021);
	ck_assert_int_eq(fcntl(low, F_GETFD), -1); /* moved, not copied */
	ck_assert_int_eq(fcntl(k.fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	ck_assert(tfa_kept_fd_ours(&k));
	int d = tfa_kept_fd_dup(&k);
	ck_assert_int_ge(d, 0);
	ck_assert_int_eq(pread(d, buf, 4, 0), 4);
	ck_assert_str_eq(buf, "kept");
	close(d);

	/* The program closes it and opens a file of its own under that number. */
	int number = k.fd;
	close(number);
	int other = temp_file("mine");
	ck_assert_int_eq(dup2(other, number), number);
	close(other);
	ck_assert(!tfa_kept_fd_ours(&k));
	ck_assert_int_eq(tfa_kept_fd_dup(&k), -1);
	tfa_kept_fd_drop(&k);
	ck_assert_int_eq(k.fd, -1);
	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(pread(number, buf, 4, 0), 4); /* still open: the program's */
	ck_assert_str_eq(buf, "mine");
	close(number);

	/* Taking a new one closes the old one while it is still ours. */
	tfa_kept_fd_take(&k, temp_file("one"));
	int first = k.fd;
	tfa_kept_fd_take(&k, temp_file("two"));
	ck_assert_int_ne(k.fd, first);
	ck_assert_int_eq(fcntl(first, F_GETFD), -1);
	tfa_kept_fd_drop(&k);
	temp_files_remove();
}
END_TEST

/*
 * Under a soft RLIMIT_NOFILE below 1026 the shim's descriptors go to the top
 * of what it allows (at the lowest numbers a daemon that closed its
 * descriptors and opened its own got them mixed up).  The reserve is a
 * pipe's two descriptors there; releasing it closes them, but never a
 * program's descriptor opened under one of their numbers after it closed
 * them.
 */
START_TEST(test_log_low_limit_and_reserve)
{
	struct rlimit rl = { .rlim_cur = 64, .rlim_max = 64 };

	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0); /* this test's own process (check forks) */
	int low = temp_file("low");
	ck_assert_int_lt(low, 59);
	int far = tfa_fd_far(low);
	ck_assert_int_eq(far, 59);
	ck_assert_int_eq(fcntl(low, F_GETFD), -1);
	ck_assert_int_eq(tfa_fd_far(far), far); /* already there: left */

	/* Nothing held: nothing released. */
	ck_assert(!tfa_fd_reserve_release());
	tfa_fd_reserve_take();
	struct stat a, b;
	ck_assert_int_eq(fstat(60, &a), 0);
	ck_assert_int_eq(fstat(61, &b), 0);
	ck_assert(S_ISFIFO(a.st_mode) && a.st_ino == b.st_ino);
	ck_assert_int_eq(fcntl(60, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	tfa_fd_reserve_take(); /* held already: nothing more taken */
	ck_assert_int_eq(fcntl(62, F_GETFD), -1);

	/* Out of descriptors: released, both numbers free for the profile's files. */
	int filler[64], n = 0;
	while (n < 64 && (filler[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		n++;
	ck_assert_int_eq(errno, EMFILE);
	ck_assert(tfa_fd_reserve_release());
	ck_assert_int_eq(fcntl(60, F_GETFD), -1);
	ck_assert_int_eq(fcntl(61, F_GETFD), -1);
	int f1 = open("/dev/null", O_RDONLY), f2 = open("/dev/null", O_RDONLY);
	ck_assert(f1 >= 0 && f2 >= 0);
	close(f1);
	close(f2);
	tfa_fd_reserve_take(); /* given back */
	/* LeakSanitizer's check at exit opens /proc files. */
	while (n > 0)
		close(filler[--n]);
	ck_assert_int_eq(fstat(60, &a), 0);
	ck_assert(S_ISFIFO(a.st_mode));

	/* The program closes them and opens a pipe of its own there: not the reserve's. */
	close(60);
	close(61);
	int mine[2];
	ck_assert_int_eq(pipe(mine), 0);
	ck_assert_int_eq(dup2(mine[0], 60), 60);
	ck_assert_int_eq(dup2(mine[1], 61), 61);
	close(mine[0]);
	close(mine[1]);
	ck_assert(!tfa_fd_reserve_release());
	ck_assert_int_eq(fcntl(60, F_GETFD) & FD_CLOEXEC, 0); /* still open: the program's */
	ck_assert_int_eq(fcntl(61, F_GETFD) & FD_CLOEXEC, 0);
	temp_files_remove();
}
END_TEST

static Suite *
log_suite(void)
{
	Suite *s = suite_create("log");
	TCase *tc;

	tc = tcase_create("snprintf");
	tcase_add_test(tc, test_log_snprintf_strings);
	tcase_add_test(tc, test_log_snprintf_integers);
	tcase_add_test(tc, test_log_snprintf_widths);
	tcase_add_test(tc, test_log_snprintf_negative_width);
	tcase_add_test(tc, test_log_snprintf_wide_width);
	tcase_add_test(tc, test_log_snprintf_pointers);
	tcase_add_test(tc, test_log_snprintf_truncation);
	suite_add_tcase(s, tc);

	tc = tcase_create("format_bytes");
	tcase_add_test(tc, test_log_format_bytes);
	tcase_add_test(tc, test_log_format_bytes_carry);
	suite_add_tcase(s, tc);

	tc = tcase_create("output");
	tcase_add_test(tc, test_log_write_all);
	tcase_add_test(tc, test_log_line_format);
	tcase_add_test(tc, test_log_init_keeps_stderr);
	tcase_add_test(tc, test_log_kept_fd);
	tcase_add_test(tc, test_log_low_limit_and_reserve);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(log_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
