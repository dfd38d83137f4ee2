/* SPDX-License-Identifier: MIT */
/*
 * malloc and free from a signal handler that interrupts malloc, realloc and
 * free.  A fast timer (every 100 us) sends a
 * signal whose handler mallocs a block, frees the one before, and now and
 * then leaves a block for the main loop to free (a block made in a handler,
 * freed outside one); meanwhile the main thread loops malloc/realloc/free.
 * Every call is counted (the handler's counts apart: it runs on the main
 * thread, between any two instructions of the loop): at the end the ledger
 * is exact.
 *
 *   tp_sigalloc SECONDS SIGNAL [threads]
 *     SIGNAL: "alrm" (setitimer ITIMER_REAL: SIGALRM, a signal tfalloc
 *     catches and passes on to the program's handler) or "rt"
 *     (timer_create, SIGRTMIN+3 to the main thread: one it does not catch);
 *     "threads": a second
 *     thread allocates too (the process is multi-threaded)
 *   tp_sigalloc baseline [threads]
 *
 *   tp_sigalloc swap SECONDS SIGNAL
 *     one thread installs two handlers of SIGNAL ("usr1": SIGUSR1, "rt":
 *     SIGRTMIN+4, both end the process by default) in turn as fast as it
 *     can, while another sends SIGNAL to the process without pause: every
 *     delivery runs one of the two, none ends the process.  Prints
 *     "swapped N", "handled N".
 *
 * Prints "signals N", "loop N" and the LEDGER.  malloc in a signal handler is
 * not async-signal-safe by POSIX; this is what a program that does it anyway
 * (many do: loggers, profilers) meets.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include "tp_common.h"

#define HANDLER_KEEP 64

static volatile sig_atomic_t stop;
/* The handler's own tallies: it runs on the main thread only (the other thread blocks it). */
static volatile long long h_allocs, h_frees, h_bytes, h_total, h_signals;
static void *volatile h_prev;
static volatile size_t h_prev_size;
/* Blocks the handler leaves for the main loop: written by the handler, taken by main. */
static void *volatile handed[HANDLER_KEEP];
static volatile size_t handed_size[HANDLER_KEEP];
static long long m_allocs, m_frees, m_reallocs, m_bytes, m_total;
static long long t_allocs, t_frees, t_bytes, t_total;

static void
handler(int sig)
{
	(void)sig;
	int saved = errno;
	long long n = h_signals++;
	size_t size = 24 + (size_t)(n % 700);
	void *p = malloc(size);
	if (p == NULL)
		_exit(91);
	memset(p, 0x5a, size);
	h_allocs++;
	h_bytes += (long long)size;
	h_total += (long long)size;
	void *prev = h_prev;
	size_t prev_size = h_prev_size;
	h_prev = NULL;
	if (prev != NULL) {
		int slot = (int)(n % HANDLER_KEEP);
		if (n % 3 == 0 && handed[slot] == NULL) {
			handed_size[slot] = prev_size;
			handed[slot] = prev;
		} else {
			free(prev);
			h_frees++;
			h_bytes -= (long long)prev_size;
		}
	}
	h_prev_size = size;
	h_prev = p;
	errno = saved;
}

static void *
other_thread(void *arg)
{
	if (arg != NULL)
		return NULL; /* the baseline's */
	unsigned n = 0;
	while (!stop) {
		size_t size = 16 + n % 3000;
		void *p = malloc(size);
		TP_CHECK(p != NULL, "malloc");
		void *q = realloc(p, size + 100);
		TP_CHECK(q != NULL, "realloc");
		free(q);
		t_allocs += 2;
		t_frees += 2;
		t_total += (long long)size + (long long)size + 100;
		n++;
	}
	return NULL;
}

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile long long handled;
static volatile int swap_stop;
static int swap_sig;

static void
handler_a(int sig)
{
	(void)sig;
	__atomic_add_fetch(&handled, 1, __ATOMIC_RELAXED);
}

static void
handler_b(int sig, siginfo_t *info, void *uc)
{
	(void)sig;
	(void)info;
	(void)uc;
	__atomic_add_fetch(&handled, 1, __ATOMIC_RELAXED);
}

static void *
sender(void *arg)
{
	(void)arg;
	pid_t pid = getpid();
	while (!swap_stop)
		kill(pid, swap_sig); /* EAGAIN when the queue of real-time signals is full */
	return NULL;
}

static int
swap_main(double seconds, const char *which)
{
	swap_sig = strcmp(which, "rt") == 0 ? SIGRTMIN + 4 : SIGUSR1;
	struct sigaction a, b;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.sa_handler = handler_a;
	a.sa_flags = SA_RESTART;
	b.sa_sigaction = handler_b;
	b.sa_flags = SA_RESTART | SA_SIGINFO;
	TP_CHECK(sigaction(swap_sig, &a, NULL) == 0, "sigaction");
	pthread_t th;
	TP_CHECK(pthread_create(&th, NULL, sender, NULL) == 0, "pthread_create");
	double end = now() + seconds;
	long long swaps = 0;
	while (now() < end) {
		for (int i = 0; i < 100; i++, swaps++)
			TP_CHECK(sigaction(swap_sig, (swaps & 1) ? &a : &b, NULL) == 0, "sigaction");
	}
	swap_stop = 1;
	TP_CHECK(pthread_join(th, NULL) == 0, "pthread_join");
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, swap_sig);
	sigprocmask(SIG_BLOCK, &set, NULL);
	tp_printf(2, "swapped %lld\n", swaps);
	tp_printf(2, "handled %lld\n", (long long)handled);
	TP_CHECK(handled > 0, "no signal handled");
	tp_out("swap done\n");
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc > 3 && strcmp(argv[1], "swap") == 0)
		return swap_main(atof(argv[2]), argv[3]);
	int baseline = tp_is_baseline(argc, argv);
	int threads = argc > (baseline ? 2 : 3) && strcmp(argv[baseline ? 2 : 3], "threads") == 0;
	double seconds = baseline ? 0 : atof(argv[1]);
	int rt = !baseline && argc > 2 && strcmp(argv[2], "rt") == 0;
	int sig = rt ? SIGRTMIN + 3 : SIGALRM;
	pthread_t th;

	if (threads) {
		/* The other thread never takes the signal: the handler's tallies stay the main thread's. */
		sigset_t set, old;
		sigemptyset(&set);
		sigaddset(&set, SIGRTMIN + 3);
		sigaddset(&set, SIGALRM);
		pthread_sigmask(SIG_BLOCK, &set, &old);
		TP_CHECK(pthread_create(&th, NULL, other_thread, baseline ? &th : NULL) == 0,
		         "pthread_create");
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (baseline) {
		if (threads) {
			stop = 1;
			pthread_join(th, NULL);
		}
		return 0;
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	TP_CHECK(sigaction(sig, &sa, NULL) == 0, "sigaction");
	timer_t timer;
	if (rt) {
		struct sigevent sev;
		memset(&sev, 0, sizeof(sev));
		sev.sigev_notify = SIGEV_THREAD_ID;
		sev._sigev_un._tid = gettid();
		sev.sigev_signo = sig;
		TP_CHECK(timer_create(CLOCK_MONOTONIC, &sev, &timer) == 0, "timer_create");
		struct itimerspec its = { { 0, 100000 }, { 0, 100000 } };
		TP_CHECK(timer_settime(timer, 0, &its, NULL) == 0, "timer_settime");
	} else {
		struct itimerval itv = { { 0, 100 }, { 0, 100 } };
		TP_CHECK(setitimer(ITIMER_REAL, &itv, NULL) == 0, "setitimer");
	}

	void *slot[256] = { 0 };
	size_t ssize[256] = { 0 };
	double end = now() + seconds;
	long long loops = 0;
	for (unsigned n = 0;; n++, loops++) {
		if ((n & 255) == 0 && now() > end)
			break;
		int i = (int)((n * 2654435761u) >> 24);
		if (slot[i] == NULL) {
			size_t size = 8 + (n * 131) % 2000;
			slot[i] = malloc(size);
			TP_CHECK(slot[i] != NULL, "malloc");
			ssize[i] = size;
			m_allocs++;
			m_bytes += (long long)size;
			m_total += (long long)size;
		} else if (n % 3 == 0) {
			size_t size = 8 + (n * 71) % 3000;
			void *q = realloc(slot[i], size);
			TP_CHECK(q != NULL, "realloc");
			m_reallocs++;
			m_allocs++;
			m_frees++;
			m_bytes += (long long)size - (long long)ssize[i];
			m_total += (long long)size;
			slot[i] = q;
			ssize[i] = size;
		} else {
			free(slot[i]);
			slot[i] = NULL;
			m_frees++;
			m_bytes -= (long long)ssize[i];
		}
		/* A block the handler left: freed here, outside the handler. */
		int k = (int)(n % HANDLER_KEEP);
		if (handed[k] != NULL) {
			void *p = handed[k];
			size_t size = handed_size[k];
			handed[k] = NULL;
			free(p);
			m_frees++;
			m_bytes -= (long long)size;
		}
	}
	if (rt) {
		TP_CHECK(timer_delete(timer) == 0, "timer_delete");
	} else {
		struct itimerval off = { { 0, 0 }, { 0, 0 } };
		setitimer(ITIMER_REAL, &off, NULL);
	}
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (threads) {
		stop = 1;
		TP_CHECK(pthread_join(th, NULL) == 0, "pthread_join");
	}
	for (int i = 0; i < 256; i++) {
		if (slot[i] != NULL) {
			free(slot[i]);
			m_frees++;
			m_bytes -= (long long)ssize[i];
		}
	}
	for (int k = 0; k < HANDLER_KEEP; k++) {
		if (handed[k] != NULL) {
			free(handed[k]);
			m_frees++;
			m_bytes -= (long long)handed_size[k];
		}
	}
	/* h_prev stays: the one leak, made in a handler. */
	tp_world_t w = { 0 };
	w.num_allocs = m_allocs + h_allocs + t_allocs;
	w.num_frees = m_frees + h_frees + t_frees;
	w.num_reallocs = m_reallocs + (threads ? t_allocs / 2 : 0);
	w.bytes_in_use = m_bytes + h_bytes + t_bytes;
	w.total_bytes = m_total + h_total + t_total;
	tp_ledger.w[0] = tp_ledger.w[1] = w;
	tp_ledger.peak_unknown = 1;
	tp_printf(2, "signals %lld\n", (long long)h_signals);
	tp_printf(2, "loop %lld\n", loops);
	TP_CHECK(h_signals > 10, "only %lld signals", (long long)h_signals);
	tp_out("sigalloc done\n");
	tp_l_print();
	return 0;
}
