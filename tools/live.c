/* SPDX-License-Identifier: MIT */
/*
 * tfalloc snapshot PID and tfalloc top PID: ask a running process for its
 * profile now, or for its figures every second.  The protocol is the shim's
 * (core/remote.h): a real-time signal carries the request, the answer is a
 * file in the process user's answer directory.
 *
 * Before anything is sent the process is checked: it must have libtfalloc.so
 * mapped and catch the control signal (a real-time signal nobody catches
 * ends the process: this is looked at again just before each request), and
 * some thread of it must not block the signal.  The request goes to one
 * thread (rt_tgsigqueueinfo): a running one when there is one, so that no
 * system call is interrupted, else the main thread.
 *
 * Exit status: 0, 1 when the process could not be asked or did not answer,
 * 2 for a usage error.
 */
#include "tools/tfalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "core/log.h"
#include "core/options.h"
#include "core/profile_read.h"
#include "core/remote.h"

#define LIVE_ERRLEN 1024

/* Seconds a snapshot may take by default: the profile of a large heap takes a while. */
#define SNAPSHOT_TIMEOUT_DEFAULT 30.0
#define TOP_TIMEOUT_DEFAULT      10.0

/* The process asked, as this tool reaches it. */
struct target {
	const char *cmd; /* "snapshot" or "top", for messages */
	pid_t pid;
	int sig;       /* its control signal */
	unsigned uid;  /* its effective uid: the answers' directory is this user's */
	char root[48]; /* "/proc/PID/root": its files as it sees them (its mount namespace); "" when unreachable */
	char dir[128]; /* its answers' directory, through root */
	uint32_t token;
};

static volatile sig_atomic_t live_stop; /* SIGINT or SIGTERM: top ends after this refresh */

static __attribute__((format(printf, 2, 3))) int
live_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tfalloc: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static __attribute__((format(printf, 2, 3))) int
live_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tfalloc: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see 'tfalloc %s --help')\n", cmd);
	return TFA_EXIT_USAGE;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
sleep_s(double s)
{
	if (s <= 0)
		return;
	struct timespec ts = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };
	nanosleep(&ts, NULL); /* a signal cuts it short: the caller looks at live_stop */
}

/* The whole of a file into a malloc'd, NUL-terminated buffer; NULL with errno set. */
static char *
slurp(const char *path, size_t *len_out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0, cap = 4096;
	char *buf;

	if (fd < 0)
		return NULL;
	buf = malloc(cap);
	while (buf != NULL) {
		if (len + 1 >= cap) {
			char *nb = realloc(buf, cap * 2);
			if (nb == NULL) {
				free(buf);
				buf = NULL;
				errno = ENOMEM;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			free(buf);
			buf = NULL;
			errno = e;
			break;
		}
		if (n == 0) {
			buf[len] = '\0';
			break;
		}
		len += (size_t)n;
	}
	int e = errno;
	close(fd);
	errno = e;
	if (buf != NULL && len_out != NULL)
		*len_out = len;
	return buf;
}

/* The state letter of /proc/PID/task/TID/stat (R, S, D, T, t, Z, X...), or 0 when gone. */
static char
task_state(pid_t pid, pid_t tid)
{
	char path[64];
	char *s;
	char state = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	s = slurp(path, NULL);
	if (s == NULL)
		return 0;
	/* "tid (comm) S ...": the comm may hold ") ". */
	char *p = strrchr(s, ')');
	if (p != NULL && p[1] == ' ')
		state = p[2];
	free(s);
	return state;
}

/*
 * A thread of the process that has not ended: the leader, or, once the
 * leader has ended (a main thread that called pthread_exit), another.  0
 * when none is left.
 */
static pid_t
live_task(pid_t pid)
{
	char path[64];
	char state = task_state(pid, pid);

	if (state != 0 && state != 'Z' && state != 'X')
		return pid;
	if (state == 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	pid_t found = 0;
	if (d == NULL)
		return 0;
	for (struct dirent *e; found == 0 && (e = readdir(d)) != NULL;) {
		pid_t tid = (pid_t)atoi(e->d_name);
		state = tid > 0 ? task_state(pid, tid) : 0;
		if (state != 0 && state != 'Z' && state != 'X')
			found = tid;
	}
	closedir(d);
	return found;
}

static bool
process_gone(pid_t pid)
{
	return live_task(pid) == 0;
}

/* The hex mask after "NAME:" in a status file, or 0. */
static uint64_t
status_mask(const char *status, const char *name)
{
	const char *p = strstr(status, name);

	return p != NULL ? strtoull(p + strlen(name), NULL, 16) : 0;
}

/* Whether thread tid blocks sig; *caught: whether the process catches it (1 when unknown). */
static bool
task_blocks(pid_t pid, pid_t tid, int sig, bool *caught)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
	char *s = slurp(path, NULL);
	if (s == NULL)
		return true;
	bool blocked = (status_mask(s, "\nSigBlk:") >> (sig - 1)) & 1;
	*caught = (status_mask(s, "\nSigCgt:") >> (sig - 1)) & 1;
	free(s);
	return blocked;
}

/* The value of NAME in /proc/PID/environ (the environment the process started with), or NULL. */
static char *
environ_value(pid_t pid, const char *name)
{
	char path[64];
	size_t len, n = strlen(name);
	char *env, *value = NULL;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	env = slurp(path, &len);
	if (env == NULL)
		return NULL;
	for (size_t i = 0; i < len; i += strlen(env + i) + 1) {
		if (strncmp(env + i, name, n) == 0 && env[i + n] == '=') {
			value = strdup(env + i + n + 1);
			break;
		}
	}
	free(env);
	return value;
}

/*
 * Whether the process's maps show libtfalloc.so.  -errno when they cannot be
 * read.  Read through a thread that has not ended: /proc/PID/maps is empty
 * once the leader has.
 */
static int
runs_tfalloc(pid_t pid)
{
	char path[64];
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	pid_t tid = live_task(pid);

	snprintf(path, sizeof(path), "/proc/%d/task/%d/maps", (int)pid, (int)(tid != 0 ? tid : pid));
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -errno;
	while (!found && getline(&line, &cap, f) > 0) {
		const char *slash = strrchr(line, '/');
		found = slash != NULL && strncmp(slash, "/libtfalloc", 11) == 0
			&& strstr(slash, ".so") != NULL;
	}
	int err = ferror(f) ? -EIO : 0;
	free(line);
	fclose(f);
	return err != 0 ? err : found;
}

/*
 * Checks that the process can be asked and finds its control signal and its
 * answers' directory.  Returns 0, or 1 after a one-line message.
 */
static int
target_open(struct target *t, const char *cmd, const char *arg)
{
	char path[64], *end;
	struct stat st;

	memset(t, 0, sizeof(*t));
	t->cmd = cmd;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (errno != 0 || *end != '\0' || end == arg || v <= 0 || v > INT_MAX)
		return live_usage_error(cmd, "'%s' is not a process id", tfa_shown(arg));
	t->pid = (pid_t)v;
	snprintf(path, sizeof(path), "/proc/%d", (int)t->pid);
	if (stat(path, &st) != 0 || process_gone(t->pid))
		return live_fail(cmd, "no process %d", (int)t->pid);

	int r = runs_tfalloc(t->pid);
	if (r < 0)
		return live_fail(cmd, "cannot read /proc/%d/maps: %s%s", (int)t->pid, strerror(-r),
				 r == -EACCES || r == -EPERM ? " (only the process's user can ask it)" : "");
	if (r == 0)
		return live_fail(cmd, "process %d does not run under tfalloc", (int)t->pid);

	/* Its signal: TFALLOC_CONTROL_SIGNAL as the shim read it at start. */
	t->sig = TFA_REMOTE_DEFAULT_SIGNAL;
	char *env = environ_value(t->pid, "TFALLOC_CONTROL_SIGNAL");
	if (env != NULL) {
		uint64_t n;
		if (tfa_parse_uint(env, &n) == 0 && n == 0) {
			free(env);
			return live_fail(cmd, "process %d does not take requests (TFALLOC_CONTROL_SIGNAL=0)",
					 (int)t->pid);
		}
		if (tfa_parse_uint(env, &n) == 0 && tfa_remote_signal_ok(n))
			t->sig = (int)n;
		free(env);
	}

	snprintf(path, sizeof(path), "/proc/%d/status", (int)t->pid);
	char *status = slurp(path, NULL);
	if (status == NULL)
		return live_fail(cmd, "cannot read %s: %s", path, strerror(errno));
	/* A real-time signal nobody catches would end the process: never sent then. */
	bool caught = (status_mask(status, "\nSigCgt:") >> (t->sig - 1)) & 1;
	unsigned ruid = 0, euid = 0;
	const char *uids = strstr(status, "\nUid:");
	bool have_uid = uids != NULL && sscanf(uids + 5, "%u %u", &ruid, &euid) == 2;
	free(status);
	if (!caught)
		return live_fail(cmd, "process %d does not catch tfalloc's control signal %d: it is "
				      "starting or ending, or its program took the signal",
				 (int)t->pid, t->sig);
	if (!have_uid)
		return live_fail(cmd, "cannot read the user of process %d", (int)t->pid);
	t->uid = euid;

	/* Its /tmp: through /proc/PID/root when this tool may look there (another mount namespace). */
	snprintf(t->root, sizeof(t->root), "/proc/%d/root", (int)t->pid);
	if (stat(t->root, &st) != 0)
		t->root[0] = '\0';
	snprintf(t->dir, sizeof(t->dir), "%s" TFA_REMOTE_DIR_FMT, t->root, t->uid);
	if (lstat(t->dir, &st) == 0
	    && (!S_ISDIR(st.st_mode) || st.st_uid != t->uid || (st.st_mode & 077) != 0))
		return live_fail(cmd, "%s is not a private directory of user %u: process %d cannot answer there",
				 t->dir + strlen(t->root), t->uid, (int)t->pid);

	uint32_t seed = 0;
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
		seed = (uint32_t)getpid() * 2654435761u ^ (uint32_t)time(NULL);
	t->token = seed & TFA_REMOTE_TOKEN_MAX;
	return 0;
}

/* What send_request and ask return when the process is gone (no message: the caller says it). */
#define LIVE_ENDED 3

/*
 * Sends the request to one thread that does not block the signal: a running
 * one when there is one (nothing is interrupted), else the main thread, else
 * any; its id in *sent_to.  to_process: to the process instead, which
 * chooses the thread (*sent_to 0).  Returns 0, 1 after a message, or
 * LIVE_ENDED.
 */
static int
send_request(struct target *t, uint64_t value, bool to_process, pid_t *sent_to)
{
	char path[64];
	pid_t running, main_ok, other;
	int threads, stopped, tries = 0;
	bool any_caught;

again:
	running = main_ok = other = 0;
	threads = stopped = 0;
	any_caught = false;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)t->pid);
	DIR *d = opendir(path);
	if (d == NULL)
		return errno == ENOENT ? LIVE_ENDED
				       : live_fail(t->cmd, "cannot read %s: %s", path, strerror(errno));
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		pid_t tid = (pid_t)atoi(e->d_name);
		if (tid <= 0)
			continue;
		char state = task_state(t->pid, tid);
		if (state == 0 || state == 'Z' || state == 'X')
			continue;
		threads++;
		if (state == 'T' || state == 't') {
			stopped++;
			continue;
		}
		bool caught = false;
		bool blocks = task_blocks(t->pid, tid, t->sig, &caught);
		/* Actions are the process's, but a thread that is ending shows none. */
		any_caught = any_caught || caught;
		if (blocks || !caught)
			continue;
		if (state == 'R' && running == 0)
			running = tid;
		else if (tid == t->pid)
			main_ok = tid;
		else if (other == 0)
			other = tid;
	}
	closedir(d);
	pid_t tid = running != 0 ? running : main_ok != 0 ? main_ok : other;
	if (threads == 0)
		return LIVE_ENDED;
	if (!any_caught && stopped < threads)
		/* It stopped catching it (an exec, or the end): a request would end it. */
		return live_fail(t->cmd, "process %d does not catch tfalloc's control signal %d now: it is "
					 "ending or replacing its image (exec)",
				 (int)t->pid, t->sig);
	if (tid == 0 && stopped == threads)
		return live_fail(t->cmd, "process %d is stopped: it answers when it runs again (kill -CONT %d)",
				 (int)t->pid, (int)t->pid);
	if (tid == 0 && ++tries < 10) {
		/* For an instant (pthread_create blocks every signal around clone), or for good. */
		usleep(20000);
		goto again;
	}
	if (tid == 0)
		return live_fail(t->cmd, "every thread of process %d blocks signal %d: it cannot be asked",
				 (int)t->pid, t->sig);

	siginfo_t si;
	memset(&si, 0, sizeof(si));
	si.si_signo = t->sig;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_ptr = (void *)(uintptr_t)value;
	*sent_to = tid;
	if (to_process || syscall(SYS_rt_tgsigqueueinfo, (int)t->pid, (int)tid, t->sig, &si) != 0) {
		/* Or the thread ended meanwhile: the process picks one. */
		*sent_to = 0;
		if ((to_process || errno == ESRCH)
		    && syscall(SYS_rt_sigqueueinfo, (int)t->pid, t->sig, &si) == 0)
			return 0;
		return errno == ESRCH ? LIVE_ENDED
				      : live_fail(t->cmd, "cannot send signal %d to process %d: %s", t->sig,
						  (int)t->pid, strerror(errno));
	}
	return 0;
}

/*
 * Asks for kind and waits for the answer (at most timeout seconds): a
 * malloc'd buffer in *data.  Returns 0, 1 after a message, or LIVE_ENDED
 * when the process ended before it answered.
 *
 * A signal sent to a thread is lost when the thread exits before it runs a
 * handler (a thread pool's short-lived threads): when the thread asked is
 * gone and its answer is not there, the request goes again to the process,
 * which gives it to a thread that is alive.
 */
static int
ask(struct target *t, unsigned kind, double timeout, char **data, size_t *len)
{
	char name[PATH_MAX];
	pid_t tid = 0;
	bool resent = false;
	double start = now_s();

send:
	t->token = (t->token + 1) & TFA_REMOTE_TOKEN_MAX;
	if (t->token == 0)
		t->token = 1;
	snprintf(name, sizeof(name), "%s/" TFA_REMOTE_ANSWER_FMT, t->dir, (int)t->pid, t->token,
		 tfa_remote_kind_name(kind));
	unlink(name); /* a stale one of a dead process whose pid this one has again */
	int rc = send_request(t, tfa_remote_value(kind, t->token), resent, &tid);
	if (rc != 0)
		return rc;
	useconds_t pause = 1000;
	for (;;) {
		/* Looked at before the answer: a thread writes its answer before it can exit. */
		char state = tid != 0 ? task_state(t->pid, tid) : 'R';
		*data = slurp(name, len);
		if (*data != NULL) {
			unlink(name);
			return 0;
		}
		int err = errno;
		if (err != ENOENT && err != EACCES)
			return live_fail(t->cmd, "cannot read the answer %s: %s", name, strerror(err));
		if (process_gone(t->pid)) {
			unlink(name); /* an answer written just before the end */
			return LIVE_ENDED;
		}
		if (err == ENOENT && (state == 0 || state == 'Z' || state == 'X') && !resent) {
			resent = true;
			goto send;
		}
		double waited = now_s() - start;
		if (waited > timeout || (live_stop && waited > 0.5))
			unlink(name); /* in case it came meanwhile */
		if (waited > timeout)
			return live_fail(t->cmd, "no answer from process %d within %.0f s (it may block signal "
						 "%d in the thread asked, or wait for it with sigwait)",
					 (int)t->pid, timeout, t->sig);
		if (live_stop && waited > 0.5)
			return 1;
		usleep(pause);
		if (pause < 20000)
			pause *= 2;
	}
}

static int
parse_seconds(const char *cmd, const char *opt, const char *v, double lo, double *out)
{
	char *end;

	errno = 0;
	double d = strtod(v, &end);
	if (errno != 0 || end == v || *end != '\0' || !(d >= lo) || d > 86400)
		return live_usage_error(cmd, "%s '%s': not a number of seconds (%g to 86400)", opt, tfa_shown(v), lo);
	*out = d;
	return 0;
}

/* --------------------------------------------------------------------------
 * tfalloc snapshot
 */

void
tfa_snapshot_usage(FILE *f)
{
	fputs("usage: tfalloc snapshot [-o FILE] [--timeout SECONDS] PID\n"
	      "\n"
	      "Asks process PID, which runs under tfalloc, to write its profile now (a\n"
	      "snapshot: end reason running), waits for it and prints the profile's path.\n"
	      "The program goes on as if nothing happened.  Only the process's user (or\n"
	      "root) can ask: the request is a signal (TFALLOC_CONTROL_SIGNAL, default 50).\n"
	      "\n"
	      "Options:\n"
	      "  -o FILE, --output FILE   copy the snapshot to FILE and print FILE\n"
	      "  --timeout SECONDS        wait at most this long (default 30)\n"
	      "  -h, --help               this help\n"
	      "\n"
	      "Exit status: 0, 1 when the process cannot be asked or did not answer, 2 for\n"
	      "a usage error.\n",
	      f);
}

static int
copy_file(const char *cmd, const char *from, const char *to)
{
	size_t len;
	char *data = slurp(from, &len);

	if (data == NULL)
		return live_fail(cmd, "cannot read %s: %s", from, strerror(errno));
	FILE *f = fopen(to, "wbe");
	if (f == NULL) {
		int e = errno;
		free(data);
		return live_fail(cmd, "cannot write %s: %s", to, strerror(e));
	}
	bool ok = fwrite(data, 1, len, f) == len;
	ok = fclose(f) == 0 && ok;
	free(data);
	return ok ? 0 : live_fail(cmd, "cannot write %s: %s", to, strerror(errno));
}

int
tfa_cmd_snapshot(int argc, char **argv)
{
	const char *out = NULL, *pid_arg = NULL;
	double timeout = SNAPSHOT_TIMEOUT_DEFAULT;
	struct target t;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			tfa_snapshot_usage(stdout);
			return 0;
		} else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 || strcmp(a, "--timeout") == 0) {
			if (i + 1 >= argc)
				return live_usage_error("snapshot", "option %s needs a value", a);
			if (strcmp(a, "--timeout") == 0) {
				if (parse_seconds("snapshot", a, argv[++i], 0.1, &timeout) != 0)
					return TFA_EXIT_USAGE;
			} else {
				out = argv[++i];
			}
		} else if (strncmp(a, "--output=", 9) == 0) {
			out = a + 9;
		} else if (strncmp(a, "--timeout=", 10) == 0) {
			if (parse_seconds("snapshot", "--timeout", a + 10, 0.1, &timeout) != 0)
				return TFA_EXIT_USAGE;
		} else if (a[0] == '-' && a[1] != '\0') {
			return live_usage_error("snapshot", "unknown option '%s'", tfa_shown(a));
		} else if (pid_arg != NULL) {
			return live_usage_error("snapshot", "one process id only");
		} else {
			pid_arg = a;
		}
	}
	if (pid_arg == NULL)
		return live_usage_error("snapshot", "which process? give its PID");
	/* Said before the process is asked, as report does, not after it wrote. */
	if (out != NULL && out[0] == '\0')
		return live_usage_error("snapshot", "option -o needs a file name");
	int rc = target_open(&t, "snapshot", pid_arg);
	if (rc != 0)
		return rc;

	char *answer;
	size_t len;
	rc = ask(&t, TFA_REMOTE_SNAPSHOT, timeout, &answer, &len);
	if (rc == LIVE_ENDED)
		return live_fail("snapshot", "process %d ended before it answered", (int)t.pid);
	if (rc != 0)
		return rc;
	while (len > 0 && answer[len - 1] == '\n')
		answer[--len] = '\0';
	if (strncmp(answer, "ok ", 3) != 0) {
		/* "error ERRNO MESSAGE" */
		const char *msg = answer;
		if (strncmp(answer, "error ", 6) == 0) {
			msg = answer + 6;
			msg += strspn(msg, "-0123456789");
			msg += strspn(msg, " ");
		}
		rc = live_fail("snapshot", "process %d: %s", (int)t.pid, msg);
		free(answer);
		return rc;
	}
	const char *path = answer + 3;
	if (out != NULL) {
		char from[PATH_MAX + 64];
		snprintf(from, sizeof(from), "%s%s", t.root, path);
		rc = copy_file("snapshot", from, out);
		if (rc == 0)
			printf("%s\n", out);
	} else {
		printf("%s\n", path);
	}
	free(answer);
	return rc;
}

/* --------------------------------------------------------------------------
 * tfalloc top
 */

void
tfa_top_usage(FILE *f)
{
	fputs("usage: tfalloc top [-d SECONDS] [-n COUNT] [-b] PID\n"
	      "\n"
	      "Shows the figures of process PID, which runs under tfalloc, refreshed every\n"
	      "second: per device and per resource (the control API's, or --tag-by thread),\n"
	      "bytes in use, peak, allocations, frees and allocations per second since the\n"
	      "previous refresh (the first: since the process started).  The process does\n"
	      "nothing for it between refreshes.  Only its user (or root) can ask.\n"
	      "\n"
	      "Options:\n"
	      "  -d SECONDS, --interval SECONDS   time between refreshes (default 1)\n"
	      "  -n COUNT, --count COUNT          stop after COUNT refreshes (default: until\n"
	      "                                   interrupted or the process ends)\n"
	      "  -b, --batch                      plain text, one refresh after the other (the\n"
	      "                                   default when stdout is not a terminal)\n"
	      "  --timeout SECONDS                wait at most this long for each answer\n"
	      "                                   (default 10)\n"
	      "  -h, --help                       this help\n",
	      f);
}

/* One row of the table: a device, or a resource on a device. */
struct top_row {
	char name[300]; /* device, or container/name of a resource */
	char device[32];
	uint64_t tag; /* the resource's (0: a device row) */
	uint64_t in_use, peak, allocs, frees;
};

struct top_rows {
	struct top_row *v;
	size_t n, cap;
};

static struct top_row *
rows_add(struct top_rows *r)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		struct top_row *v = realloc(r->v, cap * sizeof(*v));
		if (v == NULL)
			return NULL;
		r->v = v;
		r->cap = cap;
	}
	memset(&r->v[r->n], 0, sizeof(r->v[0]));
	return &r->v[r->n++];
}

/* The rows of the resources: one per resource and device it holds figures on. */
static void
resource_rows(const tfa_profile_t *p, struct top_rows *rows)
{
	for (size_t i = 0; i < p->nresources; i++) {
		const tfa_profile_resource_t *res = &p->resources[i];
		for (size_t k = 0; k < res->ndevices && res->first + k < p->nres_devices; k++) {
			const tfa_profile_res_device_t *d = &p->res_devices[res->first + k];
			struct top_row *r = rows_add(rows);
			if (r == NULL)
				return;
			snprintf(r->name, sizeof(r->name), "%s/%s%s", res->container, res->name,
				 res->state == 2 ? " (deleted)" : "");
			snprintf(r->device, sizeof(r->device), "%s", d->device);
			r->tag = res->tag;
			r->in_use = d->f[TFA_RESD_BYTES_IN_USE];
			r->peak = d->f[TFA_RESD_PEAK_BYTES_IN_USE];
			r->allocs = d->f[TFA_RESD_NUM_ALLOCS];
			r->frees = d->f[TFA_RESD_NUM_FREES];
		}
	}
}

/* The same row in the previous refresh, or NULL. */
static const struct top_row *
row_before(const struct top_rows *prev, const struct top_row *r)
{
	for (size_t i = 0; i < prev->n; i++)
		if (prev->v[i].tag == r->tag && strcmp(prev->v[i].device, r->device) == 0
		    && strcmp(prev->v[i].name, r->name) == 0)
			return &prev->v[i];
	return NULL;
}

static int
by_in_use(const void *a, const void *b)
{
	const struct top_row *x = a, *y = b;

	return x->in_use < y->in_use ? 1 : x->in_use > y->in_use ? -1 : strcmp(x->name, y->name);
}

/* Prints a table: the header, then a row each with the allocation rate over dt seconds. */
static void
print_rows(const char *what, struct top_rows *rows, const struct top_rows *prev, double dt,
	   bool first)
{
	char in_use[32], peak[32], rate[32];
	bool resources = strcmp(what, "resource") == 0;

	if (resources)
		qsort(rows->v, rows->n, sizeof(rows->v[0]), by_in_use);
	if (resources)
		printf("%-32s %-6s", what, "device");
	else
		printf("%-8s %-16s", what, "allocator");
	printf(" %12s %12s %14s %14s %12s\n", "in use", "peak", "allocations", "frees", "allocs/s");
	for (size_t i = 0; i < rows->n; i++) {
		const struct top_row *r = &rows->v[i];
		const struct top_row *b = first ? NULL : row_before(prev, r);
		uint64_t before = b != NULL ? b->allocs : 0;
		tfa_format_bytes(in_use, sizeof(in_use), r->in_use);
		tfa_format_bytes(peak, sizeof(peak), r->peak);
		if (dt > 0 && r->allocs >= before)
			snprintf(rate, sizeof(rate), "%.0f", (double)(r->allocs - before) / dt);
		else
			snprintf(rate, sizeof(rate), "-");
		if (resources)
			printf("%-32.32s %-6s", r->name, r->device);
		else
			printf("%-8s %-16s", r->name, r->device);
		printf(" %12s %12s %14llu %14llu %12s\n", in_use, peak, (unsigned long long)r->allocs,
		       (unsigned long long)r->frees, rate);
	}
}

static void
on_stop(int sig)
{
	(void)sig;
	live_stop = 1;
}

int
tfa_cmd_top(int argc, char **argv)
{
	const char *pid_arg = NULL;
	double interval = 1.0, timeout = TOP_TIMEOUT_DEFAULT;
	long count = 0;
	bool batch = !isatty(STDOUT_FILENO);
	struct target t;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			tfa_top_usage(stdout);
			return 0;
		} else if (strcmp(a, "-b") == 0 || strcmp(a, "--batch") == 0) {
			batch = true;
		} else if (strcmp(a, "-d") == 0 || strcmp(a, "--interval") == 0 || strcmp(a, "-n") == 0
			   || strcmp(a, "--count") == 0 || strcmp(a, "--timeout") == 0) {
			if (i + 1 >= argc)
				return live_usage_error("top", "option %s needs a value", a);
			const char *v = argv[++i];
			if (a[1] == 'n' || strcmp(a, "--count") == 0) {
				char *end;
				errno = 0;
				count = strtol(v, &end, 10);
				if (errno != 0 || end == v || *end != '\0' || count <= 0)
					return live_usage_error("top", "%s '%s': not a count (1 or more)", a, tfa_shown(v));
			} else if (parse_seconds("top", a, v, strcmp(a, "--timeout") == 0 ? 0.1 : 0.05,
						 strcmp(a, "--timeout") == 0 ? &timeout : &interval)
				   != 0) {
				return TFA_EXIT_USAGE;
			}
		} else if (a[0] == '-' && a[1] != '\0') {
			return live_usage_error("top", "unknown option '%s'", tfa_shown(a));
		} else if (pid_arg != NULL) {
			return live_usage_error("top", "one process id only");
		} else {
			pid_arg = a;
		}
	}
	if (pid_arg == NULL)
		return live_usage_error("top", "which process? give its PID");
	int rc = target_open(&t, "top", pid_arg);
	if (rc != 0)
		return rc;

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	struct top_rows devs = { 0 }, prev_devs = { 0 }, res = { 0 }, prev_res = { 0 };
	uint64_t prev_end = 0;
	char err[LIVE_ERRLEN];
	rc = 0;
	for (long n = 1; count == 0 || n <= count; n++) {
		double start = now_s();
		char *data;
		size_t len;
		int r = ask(&t, TFA_REMOTE_STATS, timeout, &data, &len);
		if (r == LIVE_ENDED) {
			fprintf(stderr, "tfalloc: top: process %d ended\n", (int)t.pid);
			break;
		}
		if (r != 0) {
			rc = live_stop ? 0 : r;
			break;
		}
		tfa_profile_t p;
		if (tfa_profile_parse((const uint8_t *)data, len, "answer", &p, err, sizeof(err)) != 0) {
			rc = live_fail("top", "process %d answered with a bad file: %s", (int)t.pid, err);
			free(data);
			break;
		}
		devs.n = 0;
		for (size_t i = 0; i < p.ndevices; i++) {
			struct top_row *row = rows_add(&devs);
			if (row == NULL)
				break;
			const tfa_profile_device_t *d = &p.devices[i];
			snprintf(row->name, sizeof(row->name), "%s", d->name);
			snprintf(row->device, sizeof(row->device), "%s", d->allocator);
			row->in_use = d->f[TFA_DEV_BYTES_IN_USE];
			row->peak = d->f[TFA_DEV_PEAK_BYTES_IN_USE];
			row->allocs = d->f[TFA_DEV_NUM_ALLOCS];
			row->frees = d->f[TFA_DEV_NUM_FREES];
		}
		free(data);
		res.n = 0;
		resource_rows(&p, &res);

		/* The rate: since the previous refresh, the first since the process started. */
		bool first = prev_end == 0 || p.end_ns <= prev_end;
		double dt = (double)(p.end_ns - (first ? p.start_ns : prev_end)) / 1e9;
		time_t at = (time_t)(p.end_ns / 1000000000u);
		char clock[16] = "";
		struct tm tm;
		if (localtime_r(&at, &tm) != NULL)
			strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
		if (!batch)
			fputs("\033[H\033[2J", stdout);
		else if (n > 1)
			putchar('\n');
		printf("tfalloc top: process %u (%s) at %s, up %.1f s, refresh %ld", p.pid, p.comm, clock,
		       (double)(p.end_ns - p.start_ns) / 1e9, n);
		if (count > 0)
			printf(" of %ld", count);
		putchar('\n');
		print_rows("device", &devs, &prev_devs, dt, first);
		if (res.n == 0)
			printf("resources: none\n");
		else
			print_rows("resource", &res, &prev_res, dt, first);
		fflush(stdout);
		prev_end = p.end_ns;
		tfa_profile_free(&p);

		struct top_rows swap = prev_devs;
		prev_devs = devs;
		devs = swap;
		swap = prev_res;
		prev_res = res;
		res = swap;
		if (live_stop || (count > 0 && n == count))
			break;
		double next = start + interval;
		while (!live_stop && now_s() < next)
			sleep_s(next - now_s());
		if (live_stop)
			break;
	}
	free(devs.v);
	free(prev_devs.v);
	free(res.v);
	free(prev_res.v);
	return rc;
}
