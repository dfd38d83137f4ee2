/* SPDX-License-Identifier: MIT */
/*
 * Leaks 4444 bytes (2 blocks: 4000 and 444), prints "SIGNAL pid", then kills
 * itself with the signal argv[1] (default SIGTERM).  argv[2] says how its
 * disposition is set first:
 *   (none)     left at the default
 *   dfl        set to SIG_DFL by sigaction
 *   handler    a handler, installed with signal(), prints "HANDLED sig",
 *              sets SIG_DFL again and re-raises (as python's faulthandler)
 *   sysv       a one-shot handler (sysv_signal) prints "HANDLED sig"; the
 *              second signal then kills
 *   query      the program checks what sigaction and signal() report back
 *              (its own handlers, not tfalloc's), then as "handler"
 *   abort      calls abort()
 *   fault      stores through a NULL pointer (a real SIGSEGV)
 *   _exit      calls _exit(7)
 *   quick_exit registers an at_quick_exit handler that prints "AT QUICK
 *              EXIT", then calls quick_exit(9)
 *   exit_race  four threads call exit(5) at once while main allocates and
 *              frees without end
 *   exit_fast  main calls exit(5); its atexit handler lets a thread go that
 *              calls _exit(5) at once, while exit goes on
 *   altstack   an alternate signal stack of its own, sized as Rust's runtime
 *              sizes it (SIGSTKSZ, at least AT_MINSIGSTKSZ, 8 KiB at least),
 *              then the signal argv[1] (no "ENDING")
 *   overflow   a recursion without end in main: its stack overflows (SIGSEGV)
 *   cancel     a thread allocates for 0.3 s and then reaches a cancellation
 *              point, pthread_cancel'd at its start; main joins it, prints
 *              "JOINED canceled" and returns 0
 *   overflow_alloc  the same in a thread, allocating 16 bytes at each level
 * (these print "ENDING how" and ignore argv[1]).
 * "baseline" does nothing.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "tp_common.h"

static volatile sig_atomic_t handled;
static void *volatile tp_null;

static void
on_signal(int sig)
{
	handled++;
	tp_out("HANDLED %d\n", sig);
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(sig, &dfl, NULL);
	raise(sig);
}

static void
on_signal_once(int sig)
{
	handled++;
	tp_out("HANDLED %d\n", sig);
}

static void
other_handler(int sig)
{
	(void)sig;
}

static void
at_quick(void)
{
	tp_out("AT QUICK EXIT\n");
}

static volatile int race_go;

static void *
race_fast_exit(void *arg)
{
	(void)arg;
	while (!race_go)
		;
	_exit(5);
}

static void
let_go(void)
{
	race_go = 1;
}

static double
seconds(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* No cancellation point of its own until the end: only a shim call's could act on the request. */
static void *
allocate_then_test(void *arg)
{
	(void)arg;
	double end = seconds() + 0.3;
	while (seconds() < end) {
		void *volatile p = malloc(64);
		free(p);
	}
	pthread_testcancel();
	return NULL;
}

static volatile int never = -1;
static void *levels[64];

static int
recurse(int n, int alloc)
{
	volatile char frame[512];

	frame[0] = (char)n;
	if (n == never)
		return 0;
	if (alloc)
		levels[n % 64] = malloc(16);
	return recurse(n + 1, alloc) + frame[0];
}

static void *
recurse_allocating(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)recurse(0, 1);
}

static void *
race_exit(void *arg)
{
	(void)arg;
	while (!race_go)
		;
	exit(5);
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	int sig = argc > 1 ? atoi(argv[1]) : SIGTERM;
	void *a = malloc(4000);
	void *b = malloc(444);
	TP_CHECK(a != NULL && b != NULL, "malloc");
	TP_KEEP(a);
	TP_KEEP(b);
	void *c = malloc(10000);
	TP_CHECK(c != NULL, "malloc");
	free(c);
	const char *how = argc > 2 ? argv[2] : "";
	/* The other ways out: none of them returns. */
	if (strcmp(how, "abort") == 0) {
		tp_out("ENDING abort\n");
		abort();
	} else if (strcmp(how, "fault") == 0) {
		tp_out("ENDING fault\n");
		*(volatile int *)tp_null = 1; /* a real SIGSEGV, from the MMU */
	} else if (strcmp(how, "_exit") == 0) {
		tp_out("ENDING _exit\n");
		_exit(7);
	} else if (strcmp(how, "quick_exit") == 0) {
		tp_out("ENDING quick_exit\n");
		TP_CHECK(at_quick_exit(at_quick) == 0, "at_quick_exit");
		quick_exit(9);
	} else if (strcmp(how, "exit_race") == 0) {
		tp_out("ENDING exit_race\n");
		pthread_t t[4];
		for (int i = 0; i < 4; i++)
			TP_CHECK(pthread_create(&t[i], NULL, race_exit, NULL) == 0, "pthread_create");
		race_go = 1;
		for (;;) {
			void *volatile p = malloc(32);
			free(p);
		}
	} else if (strcmp(how, "cancel") == 0) {
		tp_out("ENDING cancel\n");
		pthread_t t;
		void *result;
		TP_CHECK(pthread_create(&t, NULL, allocate_then_test, NULL) == 0, "pthread_create");
		TP_CHECK(pthread_cancel(t) == 0 && pthread_join(t, &result) == 0, "pthread_cancel, pthread_join");
		tp_out("JOINED %s\n", result == PTHREAD_CANCELED ? "canceled" : "returned");
		return 0;
	} else if (strcmp(how, "overflow") == 0) {
		tp_out("ENDING overflow\n");
		return recurse(0, 0);
	} else if (strcmp(how, "overflow_alloc") == 0) {
		tp_out("ENDING overflow_alloc\n");
		pthread_t t;
		TP_CHECK(pthread_create(&t, NULL, recurse_allocating, NULL) == 0, "pthread_create");
		pthread_join(t, NULL);
		return 1;
	} else if (strcmp(how, "exit_fast") == 0) {
		tp_out("ENDING exit_fast\n");
		pthread_t t;
		TP_CHECK(pthread_create(&t, NULL, race_fast_exit, NULL) == 0, "pthread_create");
		TP_CHECK(atexit(let_go) == 0, "atexit");
		exit(5);
	}
	if (strcmp(how, "altstack") == 0) {
		size_t size = 8192;
		if (getauxval(AT_MINSIGSTKSZ) > size)
			size = getauxval(AT_MINSIGSTKSZ);
		void *m = mmap(NULL, size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		TP_CHECK(m != MAP_FAILED && mprotect(m, 4096, PROT_NONE) == 0, "mmap");
		stack_t ss = { .ss_sp = (char *)m + 4096, .ss_size = size };
		TP_CHECK(sigaltstack(&ss, NULL) == 0, "sigaltstack");
	}
	if (strcmp(how, "dfl") == 0) {
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		TP_CHECK(sigaction(sig, &dfl, NULL) == 0, "sigaction SIG_DFL");
	} else if (strcmp(how, "handler") == 0) {
		TP_CHECK(signal(sig, on_signal) != SIG_ERR, "signal()");
	} else if (strcmp(how, "sysv") == 0) {
		TP_CHECK(sysv_signal(sig, on_signal_once) != SIG_ERR, "sysv_signal()");
	} else if (strcmp(how, "query") == 0) {
		struct sigaction act, old;
		memset(&act, 0, sizeof(act));
		act.sa_handler = other_handler;
		sigemptyset(&act.sa_mask);
		TP_CHECK(sigaction(sig, &act, &old) == 0, "sigaction");
		TP_CHECK(old.sa_handler == SIG_DFL && (old.sa_flags & SA_SIGINFO) == 0,
			 "sigaction reports the default as the previous action");
		TP_CHECK(sigaction(sig, NULL, &old) == 0 && old.sa_handler == other_handler,
			 "sigaction reports the program's own handler");
		TP_CHECK(signal(sig, on_signal) == other_handler, "signal() returns the previous handler");
		TP_CHECK(signal(sig, on_signal) == on_signal, "signal() returns its own handler");
		TP_CHECK(signal(0, on_signal) == SIG_ERR && errno == EINVAL, "signal(0) fails with EINVAL");
		TP_CHECK(sigaction(SIGKILL, &act, NULL) == -1 && errno == EINVAL,
			 "sigaction(SIGKILL) fails with EINVAL");
	}
	tp_out("SIGNAL %d\n", (int)getpid());
	raise(sig);
	if (strcmp(how, "sysv") == 0 && handled == 1)
		raise(sig); /* the handler was one-shot: this one kills */
	kill(getpid(), sig);
	tp_printf(2, "tp_signal: still alive after signal %d\n", sig);
	return 1;
}
