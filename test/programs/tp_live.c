/* SPDX-License-Identifier: MIT */
/*
 * A program to ask while it runs (tfalloc snapshot, tfalloc top): it holds a
 * known number of bytes, prints "READY" when they are in place and then
 * waits, until its stdin reaches end of file, in one of these ways:
 *
 *   idle N SIZE           holds N blocks of SIZE bytes; blocked in read(2)
 *                         on stdin.  A read that fails with EINTR (a
 *                         request that was not restarted) exits with 3.
 *   sleep N SIZE          holds N blocks; sleeps in nanosleep, 20 ms at a
 *                         time (an interrupted sleep goes on with what was
 *                         left), looking at stdin between sleeps.
 *   busy T N SIZE         T threads, named ring0, ring1..., each hold a ring
 *                         of N blocks of SIZE and replace them one after the
 *                         other (free, then malloc) until stdin ends: N - 1
 *                         or N blocks each at any moment.  "READY" once
 *                         every ring is full.
 *   fork N SIZE M         holds N blocks, forks; the child allocates M more
 *                         and waits on stdin too; "READY" once the child's
 *                         are in place.  The parent waits for the child and
 *                         prints "CHILD status".
 *   spawn N SIZE          holds N blocks; a thread starts short-lived threads
 *                         one after the other (each allocates SIZE bytes,
 *                         frees them and ends) until stdin ends.
 *   main-exit N SIZE      holds N blocks; the main thread ends (pthread_exit)
 *                         and another, once it has, prints "READY" and waits
 *                         on stdin as idle does.
 *   handler N SIZE SIG    holds N blocks and installs a handler of its own
 *                         for signal SIG (it counts deliveries); checks that
 *                         sigaction reports it; prints "HANDLED count".
 *
 * Then every block is freed and it prints "DONE".  The pids go to stderr
 * ("pid P" and, for fork, "child C"), so that stdout is the same in every
 * run.  "baseline" does nothing.
 */
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>

#include "tp_common.h"

#define MAX_THREADS 16

static void **held;
static long nheld;

static void
hold(long n, size_t size)
{
	held = malloc((size_t)n * sizeof(*held));
	TP_CHECK(held != NULL, "malloc of the block list");
	for (long i = 0; i < n; i++) {
		held[i] = malloc(size);
		TP_CHECK(held[i] != NULL, "malloc(%zu)", size);
		memset(held[i], (int)i, size);
	}
	nheld = n;
}

static void
release(void)
{
	for (long i = 0; i < nheld; i++)
		free(held[i]);
	free(held);
}

/* Reads stdin until its end; a read interrupted by a signal is a failure here. */
static void
wait_stdin(void)
{
	char buf[256];

	for (;;) {
		ssize_t n = read(0, buf, sizeof(buf));
		if (n == 0)
			return;
		if (n < 0) {
			tp_printf(2, "read: %s\n", strerror(errno));
			_exit(3);
		}
	}
}

/* Sleeps 20 ms at a time until stdin ends, looking at it between sleeps. */
static void
sleep_until_stdin(void)
{
	for (;;) {
		struct timespec req = { 0, 20 * 1000 * 1000 }, rem, zero = { 0, 0 };
		while (nanosleep(&req, &rem) != 0 && errno == EINTR)
			req = rem;
		fd_set rd;
		FD_ZERO(&rd);
		FD_SET(0, &rd);
		char c;
		if (pselect(1, &rd, NULL, NULL, &zero, NULL) > 0 && read(0, &c, 1) == 0)
			return;
	}
}

/* ---- busy -------------------------------------------------------------------------------- */

struct ring {
	pthread_t th;
	int index;
	long n;
	size_t size;
	void **blocks;
};

static volatile int stop;
static int filled;
static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fill_cond = PTHREAD_COND_INITIALIZER;

static void *
spin(void *arg)
{
	struct ring *r = arg;
	char name[16];

	/* Named before it allocates: TFALLOC_TAG_BY=thread charges its blocks to threads/ringT. */
	snprintf(name, sizeof(name), "ring%d", r->index);
	TP_CHECK(pthread_setname_np(pthread_self(), name) == 0, "pthread_setname_np");
	for (long i = 0; i < r->n; i++) {
		r->blocks[i] = malloc(r->size);
		TP_CHECK(r->blocks[i] != NULL, "malloc");
	}
	pthread_mutex_lock(&fill_lock);
	filled++;
	pthread_cond_broadcast(&fill_cond);
	pthread_mutex_unlock(&fill_lock);
	for (long i = 0; !__atomic_load_n(&stop, __ATOMIC_RELAXED); i = (i + 1) % r->n) {
		free(r->blocks[i]);
		r->blocks[i] = malloc(r->size);
		TP_CHECK(r->blocks[i] != NULL, "malloc");
	}
	for (long i = 0; i < r->n; i++)
		free(r->blocks[i]);
	return NULL;
}

static void
busy(int nt, long n, size_t size)
{
	static struct ring rings[MAX_THREADS];

	TP_CHECK(nt >= 1 && nt <= MAX_THREADS, "threads: 1 to %d", MAX_THREADS);
	for (int t = 0; t < nt; t++) {
		rings[t].index = t;
		rings[t].n = n;
		rings[t].size = size;
		rings[t].blocks = malloc((size_t)n * sizeof(void *));
		TP_CHECK(rings[t].blocks != NULL, "malloc");
		TP_CHECK(pthread_create(&rings[t].th, NULL, spin, &rings[t]) == 0, "pthread_create");
	}
	pthread_mutex_lock(&fill_lock);
	while (filled < nt)
		pthread_cond_wait(&fill_cond, &fill_lock);
	pthread_mutex_unlock(&fill_lock);
	tp_out("READY\n");
	wait_stdin();
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int t = 0; t < nt; t++) {
		pthread_join(rings[t].th, NULL);
		free(rings[t].blocks);
	}
}

/* ---- spawn ------------------------------------------------------------------------------- */

static void *
short_life(void *arg)
{
	size_t size = *(size_t *)arg;
	void *p = malloc(size);

	TP_CHECK(p != NULL, "malloc");
	memset(p, 1, size);
	free(p);
	return NULL;
}

static void *
spawner(void *arg)
{
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		pthread_t th;
		TP_CHECK(pthread_create(&th, NULL, short_life, arg) == 0, "pthread_create");
		TP_CHECK(pthread_join(th, NULL) == 0, "pthread_join");
	}
	return NULL;
}

/* ---- main-exit --------------------------------------------------------------------------- */

/* Runs once the main thread has ended: the process's /proc/PID files are then the ended thread's. */
static void *
after_main(void *arg)
{
	char path[64], buf[512];
	pid_t main_tid = *(const pid_t *)arg;
	bool ended = false;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)main_tid);
	for (int i = 0; i < 500 && !ended; i++) {
		tp_read_file(path, buf, sizeof(buf));
		const char *p = strrchr(buf, ')');
		ended = p != NULL && p[1] == ' ' && p[2] == 'Z';
		if (!ended)
			usleep(10000);
	}
	TP_CHECK(ended, "the main thread did not end");
	tp_out("READY\n");
	wait_stdin();
	release();
	tp_out("DONE\n");
	exit(0);
}

/* ---- handler ----------------------------------------------------------------------------- */

static volatile sig_atomic_t handled;

static void
on_signal(int sig)
{
	(void)sig;
	handled++;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	TP_CHECK(argc >= 4, "usage: tp_live MODE ... (see the source)");
	const char *mode = argv[1];
	tp_printf(2, "pid %d\n", (int)getpid());

	if (strcmp(mode, "busy") == 0) {
		TP_CHECK(argc >= 5, "busy T N SIZE");
		busy(atoi(argv[2]), atol(argv[3]), (size_t)atol(argv[4]));
		tp_out("DONE\n");
		return 0;
	}

	hold(atol(argv[2]), (size_t)atol(argv[3]));
	if (strcmp(mode, "idle") == 0) {
		tp_out("READY\n");
		wait_stdin();
	} else if (strcmp(mode, "sleep") == 0) {
		tp_out("READY\n");
		sleep_until_stdin();
	} else if (strcmp(mode, "fork") == 0) {
		TP_CHECK(argc >= 5, "fork N SIZE M");
		int ready[2];
		TP_CHECK(pipe(ready) == 0, "pipe");
		pid_t child = fork();
		TP_CHECK(child >= 0, "fork");
		if (child == 0) {
			close(ready[0]);
			void **more = malloc((size_t)atol(argv[4]) * sizeof(void *));
			TP_CHECK(more != NULL, "malloc");
			for (long i = 0; i < atol(argv[4]); i++) {
				more[i] = malloc((size_t)atol(argv[3]));
				TP_CHECK(more[i] != NULL, "malloc");
			}
			tp_printf(2, "child %d\n", (int)getpid());
			TP_CHECK(write(ready[1], "x", 1) == 1, "write");
			wait_stdin();
			for (long i = 0; i < atol(argv[4]); i++)
				free(more[i]);
			free(more);
			release();
			_exit(0);
		}
		close(ready[1]);
		char c;
		TP_CHECK(read(ready[0], &c, 1) == 1, "the child's word");
		tp_out("READY\n");
		wait_stdin();
		int status = 0;
		TP_CHECK(waitpid(child, &status, 0) == child, "waitpid");
		tp_out("CHILD %d\n", status);
	} else if (strcmp(mode, "spawn") == 0) {
		static size_t size;
		pthread_t th;
		size = (size_t)atol(argv[3]);
		TP_CHECK(pthread_create(&th, NULL, spawner, &size) == 0, "pthread_create");
		tp_out("READY\n");
		wait_stdin();
		__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
		TP_CHECK(pthread_join(th, NULL) == 0, "pthread_join");
	} else if (strcmp(mode, "main-exit") == 0) {
		static pid_t main_tid;
		pthread_t th;
		main_tid = getpid();
		TP_CHECK(pthread_create(&th, NULL, after_main, &main_tid) == 0, "pthread_create");
		pthread_exit(NULL);
	} else if (strcmp(mode, "handler") == 0) {
		TP_CHECK(argc >= 5, "handler N SIZE SIG");
		int sig = atoi(argv[4]);
		struct sigaction act, old;
		memset(&act, 0, sizeof(act));
		act.sa_handler = on_signal;
		act.sa_flags = SA_RESTART;
		sigemptyset(&act.sa_mask);
		TP_CHECK(sigaction(sig, &act, &old) == 0, "sigaction");
		TP_CHECK(old.sa_handler == SIG_DFL && (old.sa_flags & SA_SIGINFO) == 0,
			 "the previous action is the default");
		TP_CHECK(sigaction(sig, NULL, &old) == 0 && old.sa_handler == on_signal,
			 "sigaction reports the program's own handler");
		tp_out("READY\n");
		wait_stdin();
		tp_out("HANDLED %d\n", (int)handled);
	} else {
		TP_CHECK(0, "unknown mode %s", mode);
	}
	release();
	tp_out("DONE\n");
	return 0;
}
