/* SPDX-License-Identifier: MIT */
/*
 * fork: parent and child each leave their own profile.
 *
 *   before fork  the parent allocates X (3000 bytes), inherited by the child
 *   child        frees X (a pointer it inherited: no error), leaks 3 x 333
 *                bytes, exits with status 0 through exit() (mode "exit") or
 *                _exit() (mode "_exit")
 *   parent       leaks X, 1111 and 2222 bytes, waits for the child, exits 0
 *
 * Relative to the baseline (same binary, no fork, nothing allocated):
 *   parent  bytes in use +6333 in 3 more blocks, num_allocs +3, num_frees +0
 *   child   bytes in use +999 in 3 more blocks (it inherited the parent's
 *           start-up blocks, and X which it freed)
 *
 * Mode "threads N": a thread mallocs and frees without pause while the main
 * thread forks N children one after the other; each child mallocs, frees,
 * leaks 100 bytes and exits 0.  A child that hangs on a lock the fork caught
 * held makes the test time out.
 *
 * Mode "storm N": three threads malloc, realloc and free without pause while
 * the main thread forks N children one after the other; each child makes
 * 20,000 allocations and frees of its own, on two threads (its own thread
 * started after the fork), leaks 100 bytes and leaves through exit() (odd
 * children through _exit()); every 4th child first forks a grandchild that
 * does the same on one thread.  Prints "GRANDCHILD pid" lines too.
 *
 * Mode "orphan MS [HOLD]": a daemon's double fork: the child forks a
 * grandchild and exits at once, the parent exits without waiting; the
 * grandchild, an orphan by then, leaks 777 bytes after MS milliseconds and
 * exits 0.  With HOLD, the child first forks another that sleeps HOLD
 * seconds (every descriptor but stdin closed, as a daemon's) and exits
 * without leaking.
 *
 * Mode "zombies N": a child forks N grandchildren and exits at once; each
 * grandchild, an orphan by then, exits 0 after 20 ms.  The process waits
 * for its child, sleeps 500 ms and prints "ZOMBIES k": how many children of
 * its own parent (tfalloc run, their subreaper) are zombies, not reaped.
 *
 * Mode "kill N": N times, forks a child that allocates and sleeps, and
 * sends it SIGTERM at once (every other time after 200 us), while it may
 * still be returning from fork; waits 10 s at most for each.  Prints
 * "killed K of N": the children that SIGTERM ended.
 *
 * Mode "held": a thread mallocs 4321 bytes, keeps the pointer on its stack
 * only and blocks; the main thread forks a child that exits at once, then
 * lets the thread free the block and end.  In the child the thread is gone
 * but its stack, and the pointer, are still there: the block is reachable.
 * The thread also holds a block of 2032 bytes in thread-specific data under
 * the first of 40 keys, and one of 1234 bytes under the last (past glibc's
 * first 32, in a second-level block): glibc clears both in the child, and
 * the key's destructor frees each in the parent.  The child forks a
 * grandchild that exits at once too.
 *
 * Prints "PARENT pid", "CHILD pid" and "GRANDCHILD pid" lines.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "tp_common.h"

static volatile int stop;

static void *
spinner(void *arg)
{
	(void)arg;
	unsigned n = 0;
	while (!stop) {
		void *p = malloc(16 + n % 5000);
		TP_CHECK(p != NULL, "malloc");
		void *q = calloc(1, 32 + n % 700);
		TP_CHECK(q != NULL, "calloc");
		free(p);
		free(q);
		n++;
	}
	return NULL;
}

static int
fork_threads(int children)
{
	pthread_t th;
	TP_CHECK(pthread_create(&th, NULL, spinner, NULL) == 0, "pthread_create");
	tp_out("PARENT %d\n", (int)getpid());
	for (int i = 0; i < children; i++) {
		pid_t pid = fork();
		TP_CHECK(pid >= 0, "fork");
		if (pid == 0) {
			void *p = malloc(5000);
			TP_CHECK(p != NULL, "malloc in child");
			free(p);
			void *leak = malloc(100);
			TP_CHECK(leak != NULL, "malloc in child");
			TP_KEEP(leak);
			exit(0);
		}
		tp_out("CHILD %d\n", (int)pid);
		int status;
		TP_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
		TP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d status 0x%x", i,
		         status);
	}
	stop = 1;
	TP_CHECK(pthread_join(th, NULL) == 0, "pthread_join");
	return 0;
}

/* 20,000 allocations of assorted sizes, all freed; arg != NULL: the half of it on a thread. */
static void *
child_work(void *arg)
{
	void *keep[64] = { 0 };
	int n = arg != NULL ? 10000 : 20000;
	for (int i = 0; i < n; i++) {
		int k = i % 64;
		free(keep[k]);
		keep[k] = (i % 7 == 0) ? calloc(1, 40 + (size_t)(i % 900)) : malloc(8 + (size_t)(i % 3000));
		TP_CHECK(keep[k] != NULL, "allocation in a child");
		if (i % 5 == 0) {
			void *q = realloc(keep[k], 16 + (size_t)(i % 5000));
			TP_CHECK(q != NULL, "realloc in a child");
			keep[k] = q;
		}
	}
	for (int k = 0; k < 64; k++)
		free(keep[k]);
	return NULL;
}

static void
storm_child(int i, int depth)
{
	if (depth == 0) {
		pthread_t th;
		static int half;
		TP_CHECK(pthread_create(&th, NULL, child_work, &half) == 0, "pthread_create in a child");
		child_work(&half);
		TP_CHECK(pthread_join(th, NULL) == 0, "pthread_join in a child");
	} else {
		child_work(NULL);
	}
	void *leak = malloc(100);
	TP_CHECK(leak != NULL, "malloc in a child");
	TP_KEEP(leak);
	if (i % 2 == 1)
		_exit(0);
	exit(0);
}

static void
wait_ok(pid_t pid, const char *what, int i)
{
	int status;
	TP_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	TP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s %d status 0x%x", what, i, status);
}

static void *
storm_spinner(void *arg)
{
	unsigned n = (unsigned)(uintptr_t)arg;
	while (!stop) {
		void *p = malloc(16 + n % 5000);
		TP_CHECK(p != NULL, "malloc");
		void *q = realloc(p, 32 + n % 9000);
		TP_CHECK(q != NULL, "realloc");
		void *r = calloc(1, 32 + n % 700);
		TP_CHECK(r != NULL, "calloc");
		free(q);
		free(r);
		n += 7;
	}
	return NULL;
}

static int
fork_storm(int children)
{
	pthread_t th[3];
	for (int t = 0; t < 3; t++)
		TP_CHECK(pthread_create(&th[t], NULL, storm_spinner, (void *)(uintptr_t)(t * 1000)) == 0,
		         "pthread_create");
	tp_out("PARENT %d\n", (int)getpid());
	for (int i = 0; i < children; i++) {
		pid_t pid = fork();
		TP_CHECK(pid >= 0, "fork");
		if (pid == 0) {
			if (i % 4 == 0) {
				pid_t g = fork();
				TP_CHECK(g >= 0, "fork in a child");
				if (g == 0)
					storm_child(i, 1);
				tp_out("GRANDCHILD %d\n", (int)g);
				wait_ok(g, "grandchild of child", i);
			}
			storm_child(i, 0);
		}
		tp_out("CHILD %d\n", (int)pid);
		wait_ok(pid, "child", i);
	}
	stop = 1;
	for (int t = 0; t < 3; t++)
		TP_CHECK(pthread_join(th[t], NULL) == 0, "pthread_join");
	return 0;
}

static int
orphan(int ms, int hold)
{
	pid_t child = fork();
	TP_CHECK(child >= 0, "fork");
	if (child == 0) {
		if (hold > 0) {
			pid_t h = fork();
			TP_CHECK(h >= 0, "fork");
			if (h == 0) {
				/* As a daemon does: every descriptor closed (tfalloc's copy of stderr too). */
				close(1);
				close(2);
				closefrom(3);
				sleep((unsigned)hold);
				_exit(0);
			}
		}
		pid_t g = fork();
		TP_CHECK(g >= 0, "fork");
		if (g == 0) {
			usleep((useconds_t)ms * 1000);
			TP_KEEP(malloc(777));
			return 0;
		}
		_exit(0);
	}
	tp_out("PARENT %d\n", (int)getpid());
	return 0;
}

/* A /proc file into buf, NUL-terminated; "" when it is empty or gone (a child reaped meanwhile). */
static void
read_proc(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
}

static int
zombies(int n)
{
	pid_t child = fork();
	TP_CHECK(child >= 0, "fork");
	if (child == 0) {
		for (int i = 0; i < n; i++) {
			pid_t g = fork();
			TP_CHECK(g >= 0, "fork");
			if (g == 0) {
				usleep(20 * 1000);
				_exit(0);
			}
		}
		_exit(0);
	}
	int status;
	TP_CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status), "child");
	usleep(500 * 1000);

	char path[96], list[4096], stat[512];
	int parent = (int)getppid(), found = 0;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", parent, parent);
	read_proc(path, list, sizeof(list));
	for (char *tok = strtok(list, " \n"); tok != NULL; tok = strtok(NULL, " \n")) {
		snprintf(path, sizeof(path), "/proc/%s/stat", tok);
		read_proc(path, stat, sizeof(stat));
		const char *state = strrchr(stat, ')');
		found += state != NULL && state[1] == ' ' && state[2] == 'Z';
	}
	tp_out("ZOMBIES %d\n", found);
	return 0;
}

static int
fork_kill(int n)
{
	int killed = 0;

	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		TP_CHECK(pid >= 0, "fork");
		if (pid == 0) {
			for (int k = 0; k < 100; k++)
				free(malloc(16 + (size_t)k));
			sleep(100);
			_exit(0);
		}
		if (i % 2 == 1)
			usleep(200);
		TP_CHECK(kill(pid, SIGTERM) == 0, "kill");
		int status = 0;
		pid_t got = 0;
		for (int waited = 0; waited < 10000 && got == 0; waited++) {
			got = waitpid(pid, &status, WNOHANG);
			if (got == 0)
				usleep(1000);
		}
		if (got == 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
		} else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) {
			killed++;
		}
	}
	tp_out("killed %d of %d\n", killed, n);
	return 0;
}

static int held_go[2], held_done[2];
static pthread_key_t held_keys[40];

static void *
held_thread(void *arg)
{
	char *volatile keep[2];
	char c = 0;

	(void)arg;
	TP_CHECK(pthread_setspecific(held_keys[0], malloc(2032)) == 0, "pthread_setspecific");
	TP_CHECK(pthread_setspecific(held_keys[39], malloc(1234)) == 0, "pthread_setspecific");
	keep[0] = malloc(4321);
	TP_CHECK(keep[0] != NULL, "malloc(4321)");
	memset(keep[0], 'h', 4321);
	keep[1] = NULL;
	TP_CHECK(write(held_go[1], &c, 1) == 1, "write");
	TP_CHECK(read(held_done[0], &c, 1) == 1, "read");
	free(keep[0]);
	return NULL;
}

static int
fork_held(void)
{
	pthread_t th;
	char c = 0;

	TP_CHECK(pipe(held_go) == 0 && pipe(held_done) == 0, "pipe");
	for (int i = 0; i < 40; i++)
		TP_CHECK(pthread_key_create(&held_keys[i], free) == 0, "pthread_key_create");
	TP_CHECK(pthread_create(&th, NULL, held_thread, NULL) == 0, "pthread_create");
	TP_CHECK(read(held_go[0], &c, 1) == 1, "read");
	tp_out("PARENT %d\n", (int)getpid());
	pid_t pid = fork();
	TP_CHECK(pid >= 0, "fork");
	if (pid == 0) {
		tp_out("CHILD %d\n", (int)getpid());
		/* Its own child: the parent's thread is gone from both. */
		pid_t grand = fork();
		TP_CHECK(grand >= 0, "fork");
		if (grand == 0) {
			tp_out("GRANDCHILD %d\n", (int)getpid());
			exit(0);
		}
		int gstatus;
		TP_CHECK(waitpid(grand, &gstatus, 0) == grand && WIFEXITED(gstatus) && WEXITSTATUS(gstatus) == 0,
			 "grandchild");
		exit(0);
	}
	int status;
	TP_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child");
	TP_CHECK(write(held_done[1], &c, 1) == 1, "write");
	TP_CHECK(pthread_join(th, NULL) == 0, "pthread_join");
	return 0;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	if (argc > 2 && strcmp(argv[1], "orphan") == 0)
		return orphan(atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 0);
	if (argc > 2 && strcmp(argv[1], "threads") == 0)
		return fork_threads(atoi(argv[2]));
	if (argc > 2 && strcmp(argv[1], "storm") == 0)
		return fork_storm(atoi(argv[2]));
	if (argc > 2 && strcmp(argv[1], "kill") == 0)
		return fork_kill(atoi(argv[2]));
	if (argc > 2 && strcmp(argv[1], "zombies") == 0)
		return zombies(atoi(argv[2]));
	if (argc > 1 && strcmp(argv[1], "held") == 0)
		return fork_held();
	int use_underscore_exit = argc > 1 && strcmp(argv[1], "_exit") == 0;

	unsigned char *x = malloc(3000);
	TP_CHECK(x != NULL, "malloc(3000)");
	tp_fill(x, 3000, 7);

	tp_out("PARENT %d\n", (int)getpid());
	pid_t pid = fork();
	TP_CHECK(pid >= 0, "fork");
	if (pid == 0) {
		TP_CHECK(tp_check_fill(x, 3000, 7), "inherited block clobbered");
		free(x);
		for (int i = 0; i < 3; i++) {
			void *p = malloc(333);
			TP_CHECK(p != NULL, "malloc(333)");
			TP_KEEP(p);
		}
		tp_out("CHILD %d\n", (int)getpid());
		if (use_underscore_exit)
			_exit(0);
		exit(0);
	}
	void *a = malloc(1111);
	void *b = malloc(2222);
	TP_CHECK(a != NULL && b != NULL, "malloc");
	TP_KEEP(a);
	TP_KEEP(b);
	TP_KEEP(x);
	int status;
	TP_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	TP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
	tp_out("parent done\n");
	return 0;
}
