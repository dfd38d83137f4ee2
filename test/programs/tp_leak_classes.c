/* SPDX-License-Identifier: MIT */
/*
 * Leaks of every class memcheck knows, each with sizes of its own so that a
 * test can tell them apart (all calloc'd: no stale pointers inside):
 *
 *   definite   a 1000-byte block whose pointer is dropped           1000 in 1
 *              a self-referencing 32-byte block, dropped               32 in 1
 *              a lost list: head 48 bytes -> 4 nodes of 56 bytes       48 in 1
 *              a lost cycle of two 24-byte blocks                      24 in 1
 *   indirect   the 4 nodes behind the lost head; the cycle's other    248 in 5
 *   possible   a 640-byte block held only by a global pointing 64
 *              bytes into it, and the 72-byte block it points to
 *              (reached from a possibly lost block: possible too)     712 in 2
 *   reachable  a 300-byte block held by a global; a 200-byte block
 *              held by a local variable of main, which calls exit()
 *              (its frame is still on the stack)                      500 in 2
 *
 * Totals: definite 1104 bytes in 4 blocks, indirect 248 in 5, possible 712
 * in 2, reachable 500 in 2.  With "baseline" it does nothing (exit from main
 * too).  It prints "CLASSES {json}" with those figures.
 *
 * "mmap": also a 800-byte block held only by a pointer in memory the program
 * mapped itself (anonymous mmap), an 850-byte one held from a mapping that is
 * readable, writable and executable (a JIT's code), and an 870-byte one from
 * the one page made readable and writable in the middle of a PROT_NONE
 * reservation (a JVM's heap and metaspace): reachable for memcheck
 * (reachable 3020 in 5).
 * "dlopen": also dlopens libz.so.1 with RTLD_GLOBAL, which makes the loader
 * malloc a larger global scope, held by the main program's link_map (in the
 * rest of ld.so's last page): reachable, nothing more lost.
 * "fork": forks first; the child makes the leaks and leaves through _exit()
 * (as shells and fork children do), the parent makes none, waits for it and
 * exits.  "fork-none": the same, the child making nothing (the baseline of
 * both).  "fork-inherit": the leaks are made, then the process forks; the
 * child leaves through _exit() at once, holding its parent's blocks as its
 * own, the parent waits and exits: both have the same classes.  The parent
 * prints "FORKED pid-of-the-child".
 * "thread": also starts a thread that holds a 400-byte block in a local
 * variable and is blocked in read(2) when main exits: reachable through that
 * thread's stack (reachable 900 in 3).  "kill": the same leaks as without
 * arguments, then SIGTERM kills the process (no classes in that profile).
 * "main-exit": main frees the 200-byte block and ends with pthread_exit; a
 * thread it started waits until it has, makes and frees a 4 MiB block (a
 * new peak), and calls exit(): the process's /proc/self is then an ended
 * thread's (reachable 300 in 1).
 *
 * The stack is scrubbed before exit: a word left on it by a returned call is
 * no pointer to memcheck (it is undefined there), but it is to tfalloc.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "tp_common.h"

struct node {
	struct node *next;
	char payload[48];
};

/* Volatile: the compiler may not drop stores that nothing reads. */
static void *volatile reachable_global;
static char *volatile interior_global;

/*
 * The stores made through p are kept: p escapes into code the compiler cannot
 * see (without this, gcc removes stores into memory nothing reads again).
 */
#define ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

static __attribute__((noinline)) void
make_definite(void)
{
	void *p = calloc(1, 1000);
	TP_CHECK(p != NULL, "calloc(1000)");
}

static __attribute__((noinline)) void
make_self_ref(void)
{
	void **p = calloc(1, 32);
	TP_CHECK(p != NULL, "calloc(32)");
	p[0] = p;
	ESCAPE(p);
}

static __attribute__((noinline)) void
make_lost_list(void)
{
	void **head = calloc(1, 48);
	TP_CHECK(head != NULL, "calloc(48)");
	struct node *prev = NULL;
	for (int i = 0; i < 4; i++) {
		struct node *n = calloc(1, sizeof(*n));
		TP_CHECK(n != NULL, "calloc(node)");
		if (prev == NULL)
			head[0] = n;
		else
			prev->next = n;
		prev = n;
		ESCAPE(n);
	}
	ESCAPE(head);
}

static __attribute__((noinline)) void
make_lost_cycle(void)
{
	void **a = calloc(1, 24), **b = calloc(1, 24);
	TP_CHECK(a != NULL && b != NULL, "calloc(24)");
	a[0] = b;
	b[0] = a;
	ESCAPE(a);
	ESCAPE(b);
}

static __attribute__((noinline)) void
make_possible(void)
{
	char *p = calloc(1, 640);
	TP_CHECK(p != NULL, "calloc(640)");
	void *q = calloc(1, 72);
	TP_CHECK(q != NULL, "calloc(72)");
	memcpy(p + 128, &q, sizeof(q));
	ESCAPE(p);
	interior_global = p + 64;
}

static __attribute__((noinline)) void
make_reachable(void)
{
	reachable_global = calloc(1, 300);
	TP_CHECK(reachable_global != NULL, "calloc(300)");
}

static int ready_pipe[2], never_pipe[2];
static volatile pid_t holder_tid;

/* The state of thread tid, after "(comm) " in its stat file; 0 when it cannot be read. */
static char
thread_state(pid_t tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' ? p[2] : 0;
}

/* Whether thread tid sleeps (in its read(2)). */
static bool
sleeping(pid_t tid)
{
	return thread_state(tid) == 'S';
}

static void *
holder(void *arg)
{
	void *volatile mine = calloc(1, 400);
	char c = 1;

	(void)arg;
	holder_tid = (pid_t)syscall(SYS_gettid);
	TP_CHECK(mine != NULL, "calloc(400)");
	TP_CHECK(write(ready_pipe[1], &c, 1) == 1, "write");
	/* Blocked here, with `mine` on this stack, until the process exits. */
	while (read(never_pipe[0], &c, 1) != 0) {
	}
	return mine;
}

static pid_t main_tid;

/* "main-exit": ends the process once the main thread has ended. */
static void *
ender(void *arg)
{
	(void)arg;
	for (int i = 0; i < 500 && thread_state(main_tid) != 'Z'; i++)
		usleep(10000);
	TP_CHECK(thread_state(main_tid) == 'Z', "the main thread did not end");
	/* A new peak, for the timeline's resident memory then. */
	char *volatile big = calloc(1, 4 << 20);
	TP_CHECK(big != NULL, "calloc(4 MiB)");
	memset(big, 1, 4 << 20);
	free(big);
	tp_out("CLASSES {\"definite\":[1104,4],\"indirect\":[248,5],\"possible\":[712,2],"
	       "\"reachable\":[300,1]}\n");
	exit(0);
}

/* Overwrites the stack below the caller: no stale pointer survives there. */
static __attribute__((noinline)) void
scrub_stack(void)
{
	volatile char buf[32768];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = 0;
}

static void
wait_child(pid_t child)
{
	int status;

	TP_CHECK(waitpid(child, &status, 0) == child, "waitpid");
	TP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed");
}

int
main(int argc, char **argv)
{
	void *volatile held = NULL;

	if (tp_is_baseline(argc, argv))
		exit(0);
	const char *mode = argc > 1 ? argv[1] : "";
	bool fork_first = strcmp(mode, "fork") == 0 || strcmp(mode, "fork-none") == 0;
	if (fork_first) {
		pid_t child = fork();
		TP_CHECK(child >= 0, "fork");
		if (child > 0) {
			tp_out("FORKED %d\n", (int)child);
			wait_child(child);
			exit(0);
		}
		if (strcmp(mode, "fork-none") == 0)
			_exit(0);
	}
	make_definite();
	make_self_ref();
	make_lost_list();
	make_lost_cycle();
	make_possible();
	make_reachable();
	held = calloc(1, 200);
	TP_CHECK(held != NULL, "calloc(200)");
	if (strcmp(mode, "fork-inherit") == 0) {
		pid_t child = fork();
		TP_CHECK(child >= 0, "fork");
		if (child == 0) {
			scrub_stack();
			_exit(0);
		}
		tp_out("FORKED %d\n", (int)child);
		wait_child(child);
	}
	bool thread = argc > 1 && strcmp(argv[1], "thread") == 0;
	bool mapped = argc > 1 && strcmp(argv[1], "mmap") == 0;
	if (argc > 1 && strcmp(argv[1], "dlopen") == 0)
		TP_CHECK(dlopen("libz.so.1", RTLD_NOW | RTLD_GLOBAL) != NULL, "dlopen libz.so.1");
	if (mapped) {
		void **region = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		TP_CHECK(region != MAP_FAILED, "mmap");
		region[100] = calloc(1, 800);
		TP_CHECK(region[100] != NULL, "calloc(800)");
		ESCAPE(region);
		void **code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		TP_CHECK(code != MAP_FAILED, "mmap rwx");
		code[10] = calloc(1, 850);
		TP_CHECK(code[10] != NULL, "calloc(850)");
		ESCAPE(code);
		char *reserved = mmap(NULL, 3 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		TP_CHECK(reserved != MAP_FAILED && mprotect(reserved + 4096, 4096, PROT_READ | PROT_WRITE) == 0,
			 "a reservation with a page in use");
		void **piece = (void **)(reserved + 4096);
		piece[20] = calloc(1, 870);
		TP_CHECK(piece[20] != NULL, "calloc(870)");
		ESCAPE(piece);
	}
	if (thread) {
		pthread_t t;
		char c;
		TP_CHECK(pipe(ready_pipe) == 0 && pipe(never_pipe) == 0, "pipe");
		TP_CHECK(pthread_create(&t, NULL, holder, NULL) == 0, "pthread_create");
		TP_CHECK(read(ready_pipe[0], &c, 1) == 1, "read");
		/* Until the thread sits in read(2) (its stack is scanned from there). */
		for (int i = 0; i < 500 && !sleeping(holder_tid); i++)
			usleep(10000);
	}
	if (strcmp(mode, "main-exit") == 0) {
		pthread_t t;
		free((void *)held);
		held = NULL;
		main_tid = getpid();
		TP_CHECK(pthread_create(&t, NULL, ender, NULL) == 0, "pthread_create");
		scrub_stack();
		pthread_exit(NULL);
	}
	scrub_stack();
	tp_out("CLASSES {\"definite\":[1104,4],\"indirect\":[248,5],\"possible\":[712,2],"
	       "\"reachable\":[%d,%d]}\n", thread ? 900 : mapped ? 3020 : 500, thread ? 3 : mapped ? 5 : 2);
	if (argc > 1 && strcmp(argv[1], "kill") == 0)
		raise(SIGTERM);
	if (fork_first)
		_exit(0);
	exit(0);
}
