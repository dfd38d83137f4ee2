/* SPDX-License-Identifier: MIT */
/*
 * runner: runs one command of the benchmark and measures it.
 *
 *   runner [-o FILE] [-e FILE] [-i FILE] [-t SECONDS] [-E NAME=VALUE]... [-U NAME]...
 *          -- CMD [ARG]...
 *
 * Forks, applies the environment changes in the child only (-E sets, -U
 * unsets: the runner itself never runs preloaded), redirects the child's
 * stdin/stdout/stderr to the given files (default /dev/null, stderr inherited),
 * puts it in its own process group and execs CMD (PATH searched).  Waits with
 * wait4, and prints one JSON line on stdout:
 *
 *   {"status": "exit", "code": 0, "wall_s": 0.5, "maxrss_kb": 1234,
 *    "user_s": 0.4, "sys_s": 0.1}
 *
 * status is "exit" (code: the exit status), "signal" (code: the signal
 * number), "timeout" (the group was killed after SECONDS) or "exec_failed".
 * wall_s is CLOCK_MONOTONIC from before fork to after the wait; maxrss_kb,
 * user_s and sys_s come from getrusage(RUSAGE_CHILDREN), so that processes
 * the command starts and waits for (a wrapper's grandchildren) count too.
 * The runner's own exit status is 0 when it measured something, 2 on a usage
 * error, 1 when it could not start at all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ENV 64

static volatile sig_atomic_t timed_out;

static void
on_alarm(int sig)
{
	(void)sig;
	timed_out = 1;
}

static void
usage(void)
{
	fprintf(stderr, "usage: runner [-o FILE] [-e FILE] [-i FILE] [-t SECONDS] "
	                "[-E NAME=VALUE]... [-U NAME]... -- CMD [ARG]...\n");
	exit(2);
}

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double
tv_seconds(struct timeval tv)
{
	return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* In the child: open path and put it on fd, or die with 127. */
static void
redirect(const char *path, int fd, int flags)
{
	int f = open(path, flags, 0644);
	if (f < 0) {
		dprintf(2, "runner: %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	if (f != fd) {
		dup2(f, fd);
		close(f);
	}
}

int
main(int argc, char **argv)
{
	const char *out = "/dev/null", *err = NULL, *in = "/dev/null";
	const char *set[MAX_ENV], *unset[MAX_ENV];
	int nset = 0, nunset = 0;
	double timeout = 0;
	int opt;

	while ((opt = getopt(argc, argv, "+o:e:i:t:E:U:")) != -1) {
		switch (opt) {
		case 'o': out = optarg; break;
		case 'e': err = optarg; break;
		case 'i': in = optarg; break;
		case 't': timeout = atof(optarg); break;
		case 'E':
			if (nset == MAX_ENV || strchr(optarg, '=') == NULL)
				usage();
			set[nset++] = optarg;
			break;
		case 'U':
			if (nunset == MAX_ENV)
				usage();
			unset[nunset++] = optarg;
			break;
		default: usage();
		}
	}
	if (optind >= argc)
		usage();
	char **cmd = &argv[optind];

	/* A pipe closed on exec tells the parent whether exec worked. */
	int status_pipe[2];
	if (pipe2(status_pipe, O_CLOEXEC) != 0) {
		perror("runner: pipe");
		return 1;
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm; /* no SA_RESTART: wait4 returns EINTR */
	sigaction(SIGALRM, &sa, NULL);

	double t0 = now();
	pid_t pid = fork();
	if (pid < 0) {
		perror("runner: fork");
		return 1;
	}
	if (pid == 0) {
		setpgid(0, 0);
		for (int i = 0; i < nunset; i++)
			unsetenv(unset[i]);
		for (int i = 0; i < nset; i++) {
			const char *eq = strchr(set[i], '=');
			char name[256];
			size_t len = (size_t)(eq - set[i]);
			if (len >= sizeof(name))
				_exit(127);
			memcpy(name, set[i], len);
			name[len] = '\0';
			setenv(name, eq + 1, 1);
		}
		redirect(in, 0, O_RDONLY);
		redirect(out, 1, O_WRONLY | O_CREAT | O_TRUNC);
		if (err != NULL)
			redirect(err, 2, O_WRONLY | O_CREAT | O_TRUNC);
		execvp(cmd[0], cmd);
		int e = errno;
		if (write(status_pipe[1], &e, sizeof(e)) < 0)
			_exit(127);
		_exit(127);
	}
	setpgid(pid, pid); /* also here, so that a timeout can never miss the group */
	close(status_pipe[1]);
	int exec_errno = 0;
	ssize_t got = read(status_pipe[0], &exec_errno, sizeof(exec_errno));
	close(status_pipe[0]);

	if (timeout > 0) {
		struct itimerval it;
		memset(&it, 0, sizeof(it));
		it.it_value.tv_sec = (time_t)timeout;
		it.it_value.tv_usec = (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6);
		it.it_interval.tv_sec = 1; /* again each second: no expiry is ever missed */
		setitimer(ITIMER_REAL, &it, NULL);
	}
	int status = 0;
	struct rusage ru_child;
	for (;;) {
		if (timed_out)
			kill(-pid, SIGKILL);
		pid_t r = wait4(pid, &status, 0, &ru_child);
		if (r == pid)
			break;
		if (r < 0 && errno == EINTR)
			continue;
		perror("runner: wait4");
		return 1;
	}
	double wall = now() - t0;
	if (timeout > 0) {
		struct itimerval off;
		memset(&off, 0, sizeof(off));
		setitimer(ITIMER_REAL, &off, NULL);
		kill(-pid, SIGKILL); /* whatever of the group is left behind */
	}

	struct rusage ru;
	getrusage(RUSAGE_CHILDREN, &ru);
	const char *what;
	int code;
	if (got == (ssize_t)sizeof(exec_errno)) {
		what = "exec_failed";
		code = exec_errno;
	} else if (timed_out) {
		what = "timeout";
		code = 0;
	} else if (WIFSIGNALED(status)) {
		what = "signal";
		code = WTERMSIG(status);
	} else {
		what = "exit";
		code = WEXITSTATUS(status);
	}
	printf("{\"status\": \"%s\", \"code\": %d, \"wall_s\": %.6f, \"maxrss_kb\": %ld, "
	       "\"user_s\": %.6f, \"sys_s\": %.6f}\n",
	       what, code, wall, ru.ru_maxrss, tv_seconds(ru.ru_utime), tv_seconds(ru.ru_stime));
	return 0;
}
