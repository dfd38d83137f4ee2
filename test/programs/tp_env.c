/* SPDX-License-Identifier: MIT */
/*
 * Programs started with an environment of their parent's making (as `env -i`
 * or python's subprocess with env={...} do).
 *
 *   tp_env run       starts "tp_env child K" four times, waiting for each:
 *                    K=1 execve from a fork, environment {"A=1"};
 *                    K=2 posix_spawn, {"B=2", "LD_PRELOAD=", "TFALLOC_QUIET=1"};
 *                    K=3 vfork + execve, {} (empty);
 *                    K=4 posix_spawnp, {"C=3", "LD_PRELOAD=/nonexistent/x.so"}
 *                    (the loader says it cannot preload that, as without tfalloc);
 *                    K=8 vfork + execve, 600 variables V0..V599 (a copy of the
 *                    environment too large for the exec's frame)
 *   tp_env child K   prints "ENV K entry" for each entry of its environment,
 *                    in order (K=8: their number, the first and the last),
 *                    leaks 1000 + K bytes; K=1 then executes
 *                    "tp_env child 5" with its environment as it is (execv);
 *                    K=3 runs "tp_env child 6" by system() and "tp_env
 *                    child 7" by popen() (printing what it reads), each
 *                    through /bin/sh with K=3's environment
 *
 * The output has no pids: a run with tfalloc prints the same bytes as one
 * without.
 */
#include <spawn.h>
#include <sys/wait.h>

#include "tp_common.h"

extern char **environ;

static void
wait_for(pid_t pid, int k)
{
	int status;

	TP_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	tp_out("child %d: status %d\n", k, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

static int
run(const char *self)
{
	/* Writable strings, as exec's arguments are typed. */
	char *argv[][4] = {
		{ (char[]){ "tp_env" }, (char[]){ "child" }, (char[]){ "1" }, NULL },
		{ (char[]){ "tp_env" }, (char[]){ "child" }, (char[]){ "2" }, NULL },
		{ (char[]){ "tp_env" }, (char[]){ "child" }, (char[]){ "3" }, NULL },
		{ (char[]){ "tp_env" }, (char[]){ "child" }, (char[]){ "4" }, NULL },
	};
	char *env1[] = { (char[]){ "A=1" }, NULL };
	char *env2[] = { (char[]){ "B=2" }, (char[]){ "LD_PRELOAD=" }, (char[]){ "TFALLOC_QUIET=1" }, NULL };
	char *env3[] = { NULL };
	char *env4[] = { (char[]){ "C=3" }, (char[]){ "LD_PRELOAD=/nonexistent/x.so" }, NULL };
	pid_t pid;

	pid = fork();
	TP_CHECK(pid >= 0, "fork");
	if (pid == 0) {
		execve(self, argv[0], env1);
		_exit(127);
	}
	wait_for(pid, 1);

	TP_CHECK(posix_spawn(&pid, self, NULL, NULL, argv[1], env2) == 0, "posix_spawn");
	wait_for(pid, 2);

	pid = vfork();
	TP_CHECK(pid >= 0, "vfork");
	if (pid == 0) {
		execve(self, argv[2], env3);
		_exit(127);
	}
	wait_for(pid, 3);

	TP_CHECK(posix_spawnp(&pid, self, NULL, NULL, argv[3], env4) == 0, "posix_spawnp");
	wait_for(pid, 4);

	static char vars[600][16];
	static char *env8[601];
	for (int i = 0; i < 600; i++) {
		snprintf(vars[i], sizeof(vars[i]), "V%d=%d", i, i * 7);
		env8[i] = vars[i];
	}
	char *argv8[] = { (char[]){ "tp_env" }, (char[]){ "child" }, (char[]){ "8" }, NULL };
	pid = vfork();
	TP_CHECK(pid >= 0, "vfork");
	if (pid == 0) {
		execve(self, argv8, env8);
		_exit(127);
	}
	wait_for(pid, 8);
	return 0;
}

static int
child(const char *self, int k)
{
	size_t n = 0;
	for (char **e = environ; e != NULL && *e != NULL; e++, n++)
		if (k != 8)
			tp_out("ENV %d %s\n", k, *e);
	if (k == 8 && n > 0)
		tp_out("ENV 8 %zu variables, %s to %s\n", n, environ[0], environ[n - 1]);
	TP_KEEP(malloc(1000 + (size_t)k));
	if (k == 3) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "'%s' child 6", self);
		tp_out("system: %d\n", system(cmd));
		snprintf(cmd, sizeof(cmd), "'%s' child 7", self);
		FILE *f = popen(cmd, "r");
		TP_CHECK(f != NULL, "popen");
		char line[512];
		while (fgets(line, sizeof(line), f) != NULL)
			tp_out("popen: %s", line);
		tp_out("pclose: %d\n", pclose(f));
	}
	if (k == 1) {
		char *argv[] = { (char[]){ "tp_env" }, (char[]){ "child" }, (char[]){ "5" }, NULL };
		execv(self, argv);
		TP_CHECK(0, "execv");
	}
	return 0;
}

int
main(int argc, char **argv)
{
	/* Children are started by absolute path: PATH may be gone from their environment. */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	TP_CHECK(n > 0, "readlink /proc/self/exe");
	self[n] = '\0';

	if (tp_is_baseline(argc, argv))
		return 0;
	if (argc > 1 && strcmp(argv[1], "run") == 0)
		return run(self);
	if (argc > 2 && strcmp(argv[1], "child") == 0)
		return child(self, atoi(argv[2]));
	tp_printf(2, "usage: tp_env run | child K\n");
	return 2;
}
