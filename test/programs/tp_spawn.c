/* SPDX-License-Identifier: MIT */
/*
 * Children started by posix_spawn, vfork + exec and system().
 *
 *   tp_spawn run N   N rounds; each starts this program as "tp_spawn child K"
 *                    (K = 1..3) by posix_spawn, by vfork + execv, and by
 *                    system() (through /bin/sh), waits for it and prints its
 *                    exit status; meanwhile a thread of the parent allocates
 *                    without pause (spawning from a multi-threaded process)
 *   tp_spawn child K leaks K blocks of 1000 + i bytes (i = 0..K-1), frees
 *                    200 more, prints "child K" and exits with status 3
 *   tp_spawn baseline
 *
 * The output has no pids: a run with tfalloc prints the same bytes as one
 * without.  Each child prints "CHILDPID pid" on stderr.
 */
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>

#include "tp_common.h"

extern char **environ;

static volatile int stop;

static void *
spinner(void *arg)
{
	(void)arg;
	unsigned n = 0;
	while (!stop) {
		void *p = malloc(16 + n % 4000);
		TP_CHECK(p != NULL, "malloc");
		free(p);
		n++;
	}
	return NULL;
}

static int
child(int k)
{
	for (int i = 0; i < 200; i++) {
		void *p = malloc(64 + (size_t)i);
		TP_CHECK(p != NULL, "malloc");
		free(p);
	}
	for (int i = 0; i < k; i++) {
		void *p = malloc(1000 + (size_t)i);
		TP_CHECK(p != NULL, "malloc");
		TP_KEEP(p);
	}
	tp_printf(2, "CHILDPID %d\n", (int)getpid());
	tp_out("child %d\n", k);
	return 3;
}

static void
report(const char *how, int k, int status)
{
	TP_CHECK(WIFEXITED(status), "%s child %d: status 0x%x", how, k, status);
	tp_out("%s child %d: exit %d\n", how, k, WEXITSTATUS(status));
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	if (argc > 2 && strcmp(argv[1], "child") == 0)
		return child(atoi(argv[2]));
	TP_CHECK(argc > 2 && strcmp(argv[1], "run") == 0, "usage: tp_spawn run N | child K");
	int rounds = atoi(argv[2]);
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	TP_CHECK(n > 0, "readlink");
	self[n] = '\0';

	pthread_t th;
	TP_CHECK(pthread_create(&th, NULL, spinner, NULL) == 0, "pthread_create");
	for (int r = 0; r < rounds; r++) {
		for (int k = 1; k <= 3; k++) {
			char karg[16];
			snprintf(karg, sizeof(karg), "%d", k);
			static char child_word[] = "child";
			char *cargv[] = { self, child_word, karg, NULL };
			int status;

			pid_t pid;
			TP_CHECK(posix_spawn(&pid, self, NULL, NULL, cargv, environ) == 0, "posix_spawn");
			TP_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
			report("posix_spawn", k, status);

			pid = vfork();
			TP_CHECK(pid >= 0, "vfork");
			if (pid == 0) {
				execv(self, cargv);
				_exit(127);
			}
			TP_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
			report("vfork", k, status);

			char cmd[4200];
			snprintf(cmd, sizeof(cmd), "'%s' child %d", self, k);
			status = system(cmd);
			TP_CHECK(status != -1, "system");
			report("system", k, status);
		}
	}
	stop = 1;
	TP_CHECK(pthread_join(th, NULL) == 0, "pthread_join");
	tp_out("spawn done\n");
	return 0;
}
