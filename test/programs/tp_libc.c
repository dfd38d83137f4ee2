/* SPDX-License-Identifier: MIT */
/*
 * glibc allocates on the program's behalf and the program frees with free():
 * strdup, strndup, asprintf, getline, open_memstream, fopen/fclose, scandir,
 * realpath, getcwd, regcomp, qsort, glob, iconv, getpwuid (NSS), dlopen,
 * setlocale, pthread keys whose destructor frees.  And mallinfo2, mallinfo
 * and malloc_trim, which must see the program's blocks whatever serves them
 * (malloc_trim giving freed pages back).  Under the shim every such
 * pointer must be recognised: no invalid or mismatched free, no crash, the
 * same output as without the shim.  The program frees everything it owns;
 * what remains is glibc's own caches.  Prints results, never addresses.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <glob.h>
#include <iconv.h>
#include <limits.h>
#include <locale.h>
#include <malloc.h>
#include <pthread.h>
#include <pwd.h>
#include <regex.h>
#include <stdio.h>

#include "tp_common.h"

static pthread_key_t key;

/* Resident memory in KiB, from /proc/self/statm (no stdio: its buffer would be a block). */
static long
resident_kib(void)
{
	char buf[128];
	tp_read_file("/proc/self/statm", buf, sizeof(buf));
	long size = 0, resident = 0;
	TP_CHECK(sscanf(buf, "%ld %ld", &size, &resident) == 2, "/proc/self/statm");
	return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void
key_destructor(void *p)
{
	free(p);
}

static void *
thread_main(void *arg)
{
	char *s = strdup((const char *)arg);
	TP_CHECK(s != NULL, "strdup in thread");
	pthread_setspecific(key, s); /* freed by the key's destructor */
	char *t;
	TP_CHECK(asprintf(&t, "thread %s", s) > 0, "asprintf");
	return t; /* freed by the joiner */
}

static int
cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

static int
no_dots(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

int
main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	char *s = strdup("hello, world");
	char *n = strndup("abcdefgh", 3);
	TP_CHECK(s && n && strcmp(n, "abc") == 0, "strdup/strndup");
	char *a = NULL;
	TP_CHECK(asprintf(&a, "%s|%s|%d", s, n, 42) > 0, "asprintf");
	tp_out("asprintf: %s\n", a);
	free(s);
	free(n);
	free(a);

	/* open_memstream + fprintf + getline */
	char *buf = NULL;
	size_t len = 0;
	FILE *ms = open_memstream(&buf, &len);
	TP_CHECK(ms != NULL, "open_memstream");
	for (int i = 0; i < 2000; i++)
		fprintf(ms, "line %d %s\n", i, i % 3 ? "abc" : "defghijklmnopqrstuvwxyz");
	TP_CHECK(fclose(ms) == 0, "fclose memstream");
	tp_out("memstream: %zu bytes\n", len);
	FILE *in = fmemopen(buf, len, "r");
	TP_CHECK(in != NULL, "fmemopen");
	char *line = NULL;
	size_t cap = 0;
	long lines = 0, chars = 0;
	ssize_t got;
	while ((got = getline(&line, &cap, in)) > 0) {
		lines++;
		chars += got;
	}
	fclose(in);
	free(line);
	free(buf);
	tp_out("getline: %ld lines %ld chars\n", lines, chars);

	/* a real file through stdio */
	char path[] = "/tmp/tp_libc.XXXXXX";
	int fd = mkstemp(path);
	TP_CHECK(fd >= 0, "mkstemp");
	FILE *f = fdopen(fd, "w+");
	TP_CHECK(f != NULL, "fdopen");
	for (int i = 0; i < 5000; i++)
		fprintf(f, "%d\n", (i * 7919) % 10007);
	rewind(f);
	int *nums = malloc(5000 * sizeof(int));
	TP_CHECK(nums != NULL, "malloc");
	int cnt = 0;
	while (cnt < 5000 && fscanf(f, "%d", &nums[cnt]) == 1)
		cnt++;
	fclose(f);
	unlink(path);
	qsort(nums, (size_t)cnt, sizeof(int), cmp_int);
	tp_out("qsort: %d numbers, min %d max %d\n", cnt, nums[0], nums[cnt - 1]);
	free(nums);

	/* directories, paths */
	struct dirent **list = NULL;
	int nd = scandir("/usr/include/x86_64-linux-gnu/sys", &list, no_dots, alphasort);
	TP_CHECK(nd > 0, "scandir");
	int found = 0;
	for (int i = 0; i < nd; i++) {
		if (strcmp(list[i]->d_name, "types.h") == 0)
			found = 1;
		free(list[i]);
	}
	free(list);
	tp_out("scandir: types.h %s\n", found ? "found" : "missing");
	char *rp = realpath("/usr/bin/../lib", NULL);
	TP_CHECK(rp != NULL, "realpath");
	tp_out("realpath: %s\n", rp);
	free(rp);
	char *cwd = getcwd(NULL, 0);
	TP_CHECK(cwd != NULL, "getcwd");
	free(cwd);
	glob_t g;
	TP_CHECK(glob("/usr/include/std*.h", 0, NULL, &g) == 0, "glob");
	tp_out("glob: %zu matches\n", g.gl_pathc);
	globfree(&g);

	/* regex */
	regex_t re;
	TP_CHECK(regcomp(&re, "^([a-z]+)-([0-9]+)$", REG_EXTENDED) == 0, "regcomp");
	regmatch_t m[3];
	int ok = regexec(&re, "item-1234", 3, m, 0) == 0;
	regfree(&re);
	tp_out("regex: %s %d\n", ok ? "match" : "no match",
	       ok ? (int)(m[2].rm_eo - m[2].rm_so) : -1);

	/* iconv loads a gconv module */
	iconv_t cd = iconv_open("UTF-16LE", "UTF-8");
	TP_CHECK(cd != (iconv_t)-1, "iconv_open");
	char src[] = "caf\xc3\xa9";
	char dst[64];
	char *ip = src, *op = dst;
	size_t il = strlen(src), ol = sizeof(dst);
	TP_CHECK(iconv(cd, &ip, &il, &op, &ol) != (size_t)-1, "iconv");
	iconv_close(cd);
	tp_out("iconv: %zu bytes\n", sizeof(dst) - ol);

	/* NSS */
	struct passwd *pw = getpwuid(0);
	tp_out("getpwuid(0): %s\n", pw ? pw->pw_name : "(none)");

	/* dlopen runs ld.so's allocations through malloc */
	void *h = dlopen("libm.so.6", RTLD_NOW);
	TP_CHECK(h != NULL, "dlopen libm");
	double (*cosf_)(double) = (double (*)(double))dlsym(h, "cos");
	TP_CHECK(cosf_ != NULL, "dlsym cos");
	tp_out("cos(0) = %.1f\n", cosf_(0.0));
	dlclose(h);

	/* locale */
	TP_CHECK(setlocale(LC_ALL, "C.UTF-8") != NULL, "setlocale");
	setlocale(LC_ALL, "C");

	/* threads: TLS destructors, results freed by the joiner */
	TP_CHECK(pthread_key_create(&key, key_destructor) == 0, "pthread_key_create");
	pthread_t th[4];
	static char names[4][8] = { "a", "bb", "ccc", "dddd" };
	for (int i = 0; i < 4; i++)
		TP_CHECK(pthread_create(&th[i], NULL, thread_main, (void *)names[i]) == 0,
		         "pthread_create");
	for (int i = 0; i < 4; i++) {
		void *r;
		TP_CHECK(pthread_join(th[i], &r) == 0, "pthread_join");
		tp_out("%s\n", (char *)r);
		free(r);
	}
	pthread_key_delete(key);

	/*
	 * mallinfo2 sees the program's blocks come and go (whichever allocator
	 * serves them), mallinfo says the same, malloc_trim answers.
	 */
	struct mallinfo2 m0 = mallinfo2();
	char *volatile big = malloc(3 << 20);
	char *volatile small[1000];
	TP_CHECK(big != NULL, "malloc(3 MiB)");
	for (int i = 0; i < 1000; i++)
		TP_CHECK((small[i] = malloc(1000)) != NULL, "malloc(1000)");
	struct mallinfo2 m1 = mallinfo2();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
	for (int i = 0; i < 1000; i++)
		free(small[i]);
	free(big);
	struct mallinfo2 m2 = mallinfo2();
	const size_t made = ((size_t)3 << 20) + 1000 * 1000;
	int trimmed = malloc_trim(0);
	tp_out("mallinfo2: grew %d, fell %d, mallinfo agrees %d, malloc_trim %d\n",
	       m1.uordblks + m1.hblkhd >= m0.uordblks + m0.hblkhd + made,
	       m1.uordblks + m1.hblkhd >= m2.uordblks + m2.hblkhd + made,
	       (size_t)(unsigned)old.uordblks == (size_t)(unsigned)m1.uordblks
		       && (size_t)(unsigned)old.hblkhd == (size_t)(unsigned)m1.hblkhd,
	       trimmed == 0 || trimmed == 1);

	/* malloc_trim gives freed pages back: 64 MiB of small blocks made, touched and freed. */
	static char *volatile many[65536];
	for (int i = 0; i < 65536; i++) {
		TP_CHECK((many[i] = malloc(1000)) != NULL, "malloc(1000)");
		memset(many[i], 1, 1000);
	}
	long peak = resident_kib();
	for (int i = 0; i < 65536; i++)
		free(many[i]);
	(void)malloc_trim(0);
	tp_out("malloc_trim: half of the peak's resident memory given back %d\n", resident_kib() < peak / 2);
	tp_out("libc done\n");
	return 0;
}
