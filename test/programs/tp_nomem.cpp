// SPDX-License-Identifier: MIT
//
// Memory that cannot be had, for real: the program lowers its own address
// space limit (RLIMIT_AS, the soft limit only) so that later mmap and brk
// calls fail, and prints only what it would print without tfalloc.
//
//   shim N     The backend keeps memory for later and tfalloc's pointer table
//              cannot grow: 96 * N bytes are taken in 4 KiB blocks and freed
//              (glibc keeps them below a fence block, jemalloc keeps the empty
//              slabs), the limit is set to the address space in use plus
//              1 MiB, then N blocks of 32 bytes are allocated and freed.  The
//              blocks come from the memory the backend kept; the table that
//              records them needs new mappings, which fail.  Prints "shim N ok".
//   stacks D   The same, but after the limit every allocation is made, and
//              freed at once, from a call stack of its own: a binary tree of
//              calls D deep (2^D leaves, each a distinct path of frames), so
//              the pointer table stays small and tfalloc's stack table needs
//              new mappings, which fail.  Prints "stacks D ok".
//   backend    Out of memory in the backend: the limit is the address space in
//              use plus 64 MiB, then requests of 256 MiB (malloc, calloc,
//              realloc, posix_memalign, aligned_alloc, new, new[], nothrow new)
//              fail as glibc's fail (NULL and ENOMEM, std::bad_alloc), and
//              requests no allocator can serve (2^62 bytes, SIZE_MAX) fail
//              too; then 1000 blocks of 100 bytes succeed.  Prints one line per
//              request and the ledger of what succeeded (THROWS n: the
//              exceptions thrown, each one runtime malloc outside the ledger).
//   leaks N    No memory left at the end: N blocks of 48 bytes are made and
//              kept (their addresses dropped: leaked), then the limit is set to
//              the address space in use, and main returns.  tfalloc must list
//              them at exit without a new mapping.  Prints "leaks N ok".
//   fds        No file descriptor left at the end: one block of 48 bytes is
//              kept, /dev/null opened until open fails (EMFILE), main returns.
//              Prints "fds N" (how many it opened).  "fds busy": then it
//              allocates and frees for 200 ms more, taking any descriptor
//              that comes free, before main returns (with snapshots due
//              meanwhile, each needs a descriptor as the final profile does).
// "baseline" does nothing.
#include <new>
#include <stdint.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>

#include "tp_common.h"

static const size_t MiB = 1048576;

// The address space in use, from /proc/self/status (VmSize, in kB); read
// without stdio, whose FILE would be an allocation outside the ledger.
static size_t
vm_size(void)
{
	char buf[8192];
	tp_read_file("/proc/self/status", buf, sizeof(buf));
	const char *v = strstr(buf, "VmSize:");
	TP_CHECK(v != nullptr, "VmSize");
	return (size_t)strtoull(v + 7, nullptr, 10) * 1024;
}

static void
limit_address_space(size_t margin)
{
	struct rlimit rl;
	TP_CHECK(getrlimit(RLIMIT_AS, &rl) == 0, "getrlimit");
	rl.rlim_cur = vm_size() + margin;
	TP_CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit");
}

static int
shim_mode(long n)
{
	void **blocks = (void **)malloc((size_t)n * sizeof(void *));
	size_t nprime = (size_t)n * 96 / 4096 + 1;
	void **prime = (void **)malloc(nprime * sizeof(void *));
	TP_CHECK(blocks != nullptr && prime != nullptr, "malloc");
	for (size_t i = 0; i < nprime; i++) {
		prime[i] = malloc(4096);
		TP_CHECK(prime[i] != nullptr, "prime %zu", i);
		memset(prime[i], 1, 4096);
	}
	void *fence = malloc(64);
	TP_CHECK(fence != nullptr, "fence");
	for (size_t i = 0; i < nprime; i++)
		free(prime[i]);
	limit_address_space(MiB);
	for (long i = 0; i < n; i++) {
		blocks[i] = malloc(32);
		TP_CHECK(blocks[i] != nullptr, "block %ld of 32 bytes: errno %d", i, errno);
		tp_fill(blocks[i], 32, (unsigned char)i);
	}
	for (long i = 0; i < n; i++) {
		TP_CHECK(tp_check_fill(blocks[i], 32, (unsigned char)i), "block %ld clobbered", i);
		free(blocks[i]);
	}
	free(fence);
	free(prime);
	free(blocks);
	tp_out("shim %ld ok\n", n);
	return 0;
}

// Two call sites per level: each leaf's stack is the path that led to it.
__attribute__((noinline)) static void tree(int depth, unsigned long *n);

__attribute__((noinline)) static void
left(int depth, unsigned long *n)
{
	tree(depth, n);
	__asm__ volatile("" ::: "memory"); // no tail call: this frame stays on the stack
}

__attribute__((noinline)) static void
right(int depth, unsigned long *n)
{
	tree(depth, n);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void
tree(int depth, unsigned long *n)
{
	if (depth == 0) {
		void *p = malloc(24);
		TP_CHECK(p != nullptr, "malloc(24) at leaf %lu: errno %d", *n, errno);
		TP_KEEP(p);
		free(p);
		++*n;
		return;
	}
	left(depth - 1, n);
	right(depth - 1, n);
	__asm__ volatile("" ::: "memory");
}

static int
stacks_mode(int depth)
{
	size_t nprime = 4096;
	void **prime = (void **)malloc(nprime * sizeof(void *));
	TP_CHECK(prime != nullptr, "malloc");
	for (size_t i = 0; i < nprime; i++) {
		prime[i] = malloc(4096);
		TP_CHECK(prime[i] != nullptr, "prime %zu", i);
	}
	void *fence = malloc(64);
	TP_CHECK(fence != nullptr, "fence");
	for (size_t i = 0; i < nprime; i++)
		free(prime[i]);
	limit_address_space(MiB);
	unsigned long n = 0;
	tree(depth, &n);
	TP_CHECK(n == 1ul << depth, "leaves: %lu", n);
	free(fence);
	free(prime);
	tp_out("stacks %d ok\n", depth);
	return 0;
}

static int
leaks_mode(long n)
{
	for (long i = 0; i < n; i++) {
		void *p = malloc(48);
		TP_CHECK(p != nullptr, "block %ld of 48 bytes: errno %d", i, errno);
		tp_fill(p, 48, (unsigned char)i);
	}
	limit_address_space(0);
	tp_out("leaks %ld ok\n", n);
	return 0;
}

static double
now_seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int
fds_mode(bool busy)
{
	void *p = malloc(48);
	TP_CHECK(p != nullptr, "malloc(48)");
	tp_fill(p, 48, 7);
	TP_KEEP(p);
	int n = 0;
	while (open("/dev/null", O_RDONLY) >= 0)
		n++;
	TP_CHECK(errno == EMFILE, "open failed with errno %d, want EMFILE", errno);
	tp_out("fds %d\n", n);
	for (double end = now_seconds() + 0.2; busy && now_seconds() < end;) {
		void *volatile q = malloc(32);
		free(q);
		(void)open("/dev/null", O_RDONLY); /* any descriptor that came free is taken again */
	}
	return 0;
}

static int throws;

static void
say(const char *what, const void *p, int err)
{
	tp_out("%s: %s%s\n", what, p == nullptr ? "NULL" : "a block",
	       p == nullptr ? (err == ENOMEM ? " ENOMEM" : " other errno") : "");
}

template <typename F>
static void
expect_bad_alloc(const char *what, F f)
{
	try {
		f();
		tp_out("%s: no exception\n", what);
	} catch (const std::bad_alloc &) {
		throws++;
		tp_out("%s: std::bad_alloc\n", what);
	}
}

static int
backend_mode(void)
{
	const size_t big = 256 * MiB;
	void *p, *small = malloc(64);
	TP_CHECK(small != nullptr, "malloc");
	tp_l_alloc(64);
	tp_fill(small, 64, 3);
	limit_address_space(64 * MiB);

	errno = 0;
	p = malloc(big);
	say("malloc 256M", p, errno);
	errno = 0;
	p = calloc(1, big);
	say("calloc 256M", p, errno);
	errno = 0;
	p = realloc(small, big);
	say("realloc 256M", p, errno);
	TP_CHECK(p == nullptr && tp_check_fill(small, 64, 3), "the block a refused realloc keeps");
	errno = 0;
	p = aligned_alloc(4096, big);
	say("aligned_alloc 256M", p, errno);
	p = &p;
	int r = posix_memalign(&p, 64, big);
	tp_out("posix_memalign 256M: %s\n", r == ENOMEM ? "ENOMEM" : r == 0 ? "a block" : "other error");
	expect_bad_alloc("new char[256M]", [&] { TP_KEEP(new char[big]); });
	expect_bad_alloc("new 256M", [&] { TP_KEEP(::operator new(big)); });
	p = new (std::nothrow) char[big];
	say("nothrow new 256M", p, ENOMEM);
	// What no allocator serves, limit or not.
	errno = 0;
	p = malloc((size_t)1 << 62);
	say("malloc 2^62", p, errno);
	errno = 0;
	volatile size_t all = SIZE_MAX; // hidden from gcc's -Walloc-size-larger-than
	p = malloc(all);
	say("malloc SIZE_MAX", p, errno);
	expect_bad_alloc("new 2^62", [&] { TP_KEEP(::operator new((size_t)1 << 62)); });

	// The allocator, and tfalloc, still serve what fits.
	for (int i = 0; i < 1000; i++) {
		void *q = malloc(100);
		TP_CHECK(q != nullptr, "malloc(100) after the refusals");
		tp_l_alloc(100);
		free(q);
		tp_l_free(100);
	}
	free(small);
	tp_l_free(64);
	tp_out("THROWS %d\n", throws);
	tp_l_print();
	return 0;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	if (argc > 1 && strcmp(argv[1], "shim") == 0)
		return shim_mode(argc > 2 ? atol(argv[2]) : 300000);
	if (argc > 1 && strcmp(argv[1], "stacks") == 0)
		return stacks_mode(argc > 2 ? atoi(argv[2]) : 16);
	if (argc > 1 && strcmp(argv[1], "backend") == 0)
		return backend_mode();
	if (argc > 1 && strcmp(argv[1], "leaks") == 0)
		return leaks_mode(argc > 2 ? atol(argv[2]) : 5000);
	if (argc > 1 && strcmp(argv[1], "fds") == 0)
		return fds_mode(argc > 2 && strcmp(argv[2], "busy") == 0);
	tp_printf(2, "usage: tp_nomem shim [N] | stacks [D] | backend | leaks [N] | fds | baseline\n");
	return 2;
}
