/* SPDX-License-Identifier: MIT */
/*
 * tfalloc run: runs a command with libtfalloc.so preloaded and configured,
 * waits for it, and exits with its status.
 *
 * What it does, in order:
 *   1. parse the options (errors: one line, exit 125, as env(1) does);
 *   2. find the shim: $TFALLOC_LIBRARY, else <dir of tfalloc>/../lib;
 *   3. warn, in one line, when the loader will not preload the shim into the
 *      command (statically linked, setuid/setgid, file capabilities),
 *      looking through #! scripts to their interpreter;
 *   4. create the output directory (mode 0700) and set the environment:
 *      LD_PRELOAD, TFALLOC_OUTPUT and the option variables;
 *   5. fork and exec with a close-on-exec pipe, so that a failed exec is
 *      told apart from the command's own exit status (127 not found, 126
 *      not executable, as a shell does);
 *   6. wait like system(3): SIGINT and SIGQUIT ignored (the terminal sends
 *      them to the command too), SIGTERM and SIGHUP forwarded;
 *   7. exit with the command's status, or 128 + the signal that killed it.
 */
#include "tools/tfalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "core/common.h"
#include "core/child_env.h"
#include "core/elf.h"
#include "core/options.h"
#include "tools/gate.h"
#include "tools/profile_dir.h"

/* The shim keeps string options in buffers of this size. */
#define RUN_ENV_STR_MAX TFA_OPT_STR_MAX

/* The kernel follows at most this many levels of #! interpreters. */
#define RUN_MAX_SCRIPT_DEPTH 4

/* How long the leak gate waits for processes that outlive CMD (--orphans-wait). */
#define RUN_ORPHANS_WAIT_MS 10000

/*
 * Without the gate: how long those are waited for before the closing line
 * counts the profiles.  A command's helpers end just after it (python's
 * multiprocessing forkserver and resource tracker, a pipeline's last stage),
 * and their profiles had come after the line that counted the directory; a
 * daemon it leaves running costs the run this much.
 */
#define RUN_ORPHANS_GRACE_MS 1000

struct run_opts {
	const char *output;
	const char *allocator;
	const char *limit;
	const char *tag_by;
	const char *track;
	bool quiet;
	long orphans_wait_ms; /* the gate's wait for what outlives CMD (run_reap_orphans) */
	tfa_gate_opts_t gate;
	char **cmd; /* NULL-terminated */
};

void
tfa_run_usage(FILE *f)
{
	fputs("usage: tfalloc run [options] [--] CMD [ARGS...]\n"
	      "\n"
	      "Runs CMD with libtfalloc.so preloaded; every process of the run (children\n"
	      "through fork and exec too) writes a profile file into the output directory.\n"
	      "The exit status is CMD's own (128+N when a signal N killed it; 127: CMD not\n"
	      "found; 126: CMD not executable; 125: tfalloc run itself failed).\n"
	      "\n"
	      "Options:\n"
	      "  --output DIR       directory for the profiles, created (mode 0700) if missing\n"
	      "                     (default: ./tfalloc.<name of CMD>.<pid of tfalloc>)\n"
	      "                     (programs started as user N after their process dropped\n"
	      "                     root write into DIR/uid-N, which tfalloc report reads)\n"
	      "  --allocator NAME   host allocator by registry name (jemalloc, glibc)\n"
	      "  --limit SIZE       bytes_limit of the cpu device: allocations past it fail\n"
	      "                     (digits with an optional K, M, G or T suffix; 0: none)\n"
	      "  --track MODE       which blocks are recorded (TFALLOC_TRACK): all (default),\n"
	      "                     or sampled: only those of a sample, one every\n"
	      "                     TFALLOC_SAMPLE_BYTES on average (default 512K): exact\n"
	      "                     counts, estimated bytes and leaks, little cost; refused\n"
	      "                     with the leak gate (status 122)\n"
	      "  --tag-by thread    charge each allocation to the resource threads/NAME of\n"
	      "                     the allocating thread's name (pthread_setname_np; the\n"
	      "                     program's name for the main thread): memory per thread\n"
	      "                     pool in the report without code changes\n"
	      "  --quiet            no summary from the processes, no closing line (the\n"
	      "                     leak gate silences the summaries unless TFALLOC_QUIET=0)\n"
	      "\n"
	      "Leak gate (any of these turns it on):\n"
	      "  --leak-gate        after CMD, fail the run when a process of it leaked more\n"
	      "                     than the budget or made a memory error: the exit status\n"
	      "                     is CMD's own when CMD failed, else --leak-exitcode\n"
	      "  --leak-exitcode N  the status of a failed gate (default 23); 122: a profile\n"
	      "                     of sample-only tracking (TFALLOC_TRACK=sampled) was\n"
	      "                     refused, or the run was, before CMD (a sample proves no\n"
	      "                     absence of leaks)\n"
	      "  --max-leak-bytes SIZE, --max-leak-blocks N\n"
	      "                     the budget of each process (default 0)\n"
	      "  --leak-kinds LIST  kinds that count: definite,indirect,possible,reachable\n"
	      "                     or all (default definite,indirect)\n"
	      "  --suppressions FILE  LeakSanitizer's format (leak:PATTERN); repeatable\n"
	      "  --no-fail-on-errors  memory errors do not fail the gate\n"
	      "  --junit FILE       JUnit XML: a testcase per process, a failure per leak\n"
	      "  --sarif FILE       SARIF 2.1.0: a result per leak site\n"
	      "  --orphans-wait SECONDS  processes CMD started that outlive it are waited for\n"
	      "                     this long (default 10), then judged; those still running\n"
	      "                     are named in a line, not judged\n"
	      "  -h, --help         this help\n"
	      "Options may also be written --output=DIR.\n"
	      "\n"
	      "Environment: TFALLOC_LIBRARY, an absolute path to libtfalloc.so (default:\n"
	      "<directory of tfalloc>/../lib/libtfalloc.so).\n",
	      f);
}

static __attribute__((format(printf, 1, 2))) int
run_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("tfalloc: run: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return TFA_EXIT_RUN_FAILED;
}

/* --------------------------------------------------------------------------
 * Options
 */

/*
 * Matches argv[*i] against --NAME and --NAME=VALUE.  Returns 1 with *value
 * set (taking the next argument when needed), 0 when it is another option,
 * or -1 after a complaint.
 */
static int
run_option_value(int argc, char **argv, int *i, const char *name, const char **value)
{
	const char *arg = argv[*i];
	size_t n = strlen(name);

	if (strncmp(arg, name, n) != 0)
		return 0;
	if (arg[n] == '=') {
		*value = arg + n + 1;
	} else if (arg[n] == '\0') {
		/* "--" ends the options: it is never a value. */
		if (*i + 1 >= argc || strcmp(argv[*i + 1], "--") == 0) {
			run_fail("option %s needs a value (see 'tfalloc run --help')", name);
			return -1;
		}
		*value = argv[++*i];
	} else {
		return 0;
	}
	if (**value == '\0') {
		run_fail("option %s needs a non-empty value", name);
		return -1;
	}
	return 1;
}

/* Returns 0 (options parsed), 1 (help printed) or -1 (complaint printed). */
static int
run_parse_args(int argc, char **argv, struct run_opts *o)
{
	int i;

	memset(o, 0, sizeof(*o));
	o->orphans_wait_ms = RUN_ORPHANS_WAIT_MS;
	tfa_gate_opts_init(&o->gate);
	for (i = 1; i < argc; i++) {
		const char *arg = argv[i];
		int rc;

		if (strcmp(arg, "--") == 0) {
			i++;
			break;
		}
		if (arg[0] != '-' || arg[1] == '\0')
			break;
		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			tfa_run_usage(stdout);
			return 1;
		}
		if (strcmp(arg, "--quiet") == 0) {
			o->quiet = true;
			continue;
		}
		if (strcmp(arg, "--leak-gate") == 0) {
			o->gate.enabled = true;
			continue;
		}
		if (strcmp(arg, "--no-fail-on-errors") == 0) {
			o->gate.enabled = true;
			o->gate.fail_on_errors = false;
			continue;
		}
		const char *v = NULL;
		if ((rc = run_option_value(argc, argv, &i, "--output", &o->output)) != 0
		    || (rc = run_option_value(argc, argv, &i, "--allocator", &o->allocator)) != 0
		    || (rc = run_option_value(argc, argv, &i, "--limit", &o->limit)) != 0
		    || (rc = run_option_value(argc, argv, &i, "--tag-by", &o->tag_by)) != 0
		    || (rc = run_option_value(argc, argv, &i, "--track", &o->track)) != 0) {
			if (rc < 0)
				return -1;
			continue;
		}
		if ((rc = run_option_value(argc, argv, &i, "--leak-exitcode", &v)) != 0) {
			char *end;
			long n = rc > 0 ? strtol(v, &end, 10) : 0;
			if (rc < 0)
				return -1;
			if (*v < '0' || *v > '9' || *end != '\0' || n < 1 || n > 255) {
				run_fail("--leak-exitcode %s: not a status from 1 to 255", tfa_shown(v));
				return -1;
			}
			o->gate.exitcode = (int)n;
			o->gate.enabled = true;
			continue;
		}
		if ((rc = run_option_value(argc, argv, &i, "--max-leak-bytes", &v)) != 0
		    || (rc = run_option_value(argc, argv, &i, "--max-leak-blocks", &v)) != 0) {
			uint64_t n;
			bool bytes = strncmp(arg, "--max-leak-bytes", 16) == 0;
			if (rc < 0)
				return -1;
			if (tfa_parse_size(v, &n) < 0 || (!bytes && (*v < '0' || *v > '9'))) {
				run_fail("%s %s: not a %s", bytes ? "--max-leak-bytes" : "--max-leak-blocks",
				         tfa_shown(v), bytes ? "size (digits with an optional K, M, G or T suffix)"
				                  : "count");
				return -1;
			}
			if (bytes)
				o->gate.max_leak_bytes = n;
			else
				o->gate.max_leak_blocks = n;
			o->gate.enabled = true;
			continue;
		}
		if ((rc = run_option_value(argc, argv, &i, "--orphans-wait", &v)) != 0) {
			char *end;
			long n = rc > 0 ? strtol(v, &end, 10) : 0;
			if (rc < 0)
				return -1;
			if (*v < '0' || *v > '9' || *end != '\0' || n > 86400) {
				run_fail("--orphans-wait %s: not a number of seconds from 0 to 86400", tfa_shown(v));
				return -1;
			}
			o->orphans_wait_ms = n * 1000;
			o->gate.enabled = true;
			continue;
		}
		if ((rc = run_option_value(argc, argv, &i, "--leak-kinds", &v)) != 0) {
			if (rc < 0)
				return -1;
			if (tfa_gate_parse_kinds(v, &o->gate.kinds) < 0) {
				run_fail("--leak-kinds %s: a comma-separated list of definite, indirect, "
				         "possible, reachable, or all", tfa_shown(v));
				return -1;
			}
			o->gate.enabled = true;
			continue;
		}
		if ((rc = run_option_value(argc, argv, &i, "--suppressions", &v)) != 0) {
			if (rc < 0)
				return -1;
			if (o->gate.nsuppressions == TFA_GATE_MAX_SUPPRESSION_FILES) {
				run_fail("--suppressions: at most %d files", TFA_GATE_MAX_SUPPRESSION_FILES);
				return -1;
			}
			o->gate.suppressions[o->gate.nsuppressions++] = v;
			o->gate.enabled = true;
			continue;
		}
		if ((rc = run_option_value(argc, argv, &i, "--junit", &o->gate.junit)) != 0
		    || (rc = run_option_value(argc, argv, &i, "--sarif", &o->gate.sarif)) != 0) {
			if (rc < 0)
				return -1;
			o->gate.enabled = true;
			continue;
		}
		if (strncmp(arg, "--quiet=", 8) == 0)
			run_fail("option --quiet takes no value");
		else
			run_fail("unknown option '%s' (see 'tfalloc run --help')", tfa_shown(arg));
		return -1;
	}
	if (i >= argc) {
		run_fail("no command given (usage: tfalloc run [options] [--] CMD [ARGS...])");
		return -1;
	}
	o->cmd = argv + i;

	if (o->limit != NULL) {
		uint64_t v;
		int rc = tfa_parse_size(o->limit, &v); /* the shim's own parser: the same syntax */

		if (rc == -ERANGE) {
			run_fail("--limit %s: too large", tfa_shown(o->limit));
			return -1;
		}
		if (rc < 0) {
			run_fail("--limit %s: not a size (digits with an optional K, M, G or T "
			         "suffix)",
			         tfa_shown(o->limit));
			return -1;
		}
	}
	if (o->track != NULL && strcmp(o->track, "all") != 0 && strcmp(o->track, "sampled") != 0) {
		run_fail("--track %s: not one of: all, sampled", tfa_shown(o->track));
		return -1;
	}
	if (o->tag_by != NULL && strcmp(o->tag_by, "thread") != 0) {
		run_fail("--tag-by %s: not one of: thread", tfa_shown(o->tag_by));
		return -1;
	}
	if (o->allocator != NULL && strlen(o->allocator) >= RUN_ENV_STR_MAX) {
		run_fail("--allocator: name too long");
		return -1;
	}
	return 0;
}

/* --------------------------------------------------------------------------
 * The shim
 */

/* LD_PRELOAD splits its list on spaces and colons. */
static bool
run_preloadable_path(const char *path)
{
	return strpbrk(path, " :\t\n") == NULL;
}

/* Sets *lib to a malloc'd absolute path of libtfalloc.so; 0 or -1 after a complaint. */
static int
run_find_library(char **lib)
{
	const char *env = getenv("TFALLOC_LIBRARY");
	char exe[PATH_MAX], guess[PATH_MAX + 32];
	struct stat st;
	ssize_t n;
	char *slash;

	if (env != NULL && env[0] != '\0') {
		/* The value as the line shows it: a path of 100 kB is no message. */
		int shown = 256;
		const char *more = strlen(env) > (size_t)shown ? "..." : "";

		if (env[0] != '/') {
			run_fail("TFALLOC_LIBRARY=%.*s%s: not an absolute path", shown, env, more);
			return -1;
		}
		if (stat(env, &st) < 0) {
			run_fail("TFALLOC_LIBRARY=%.*s%s: %s; the command was not run", shown, env, more,
			         strerror(errno));
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			run_fail("TFALLOC_LIBRARY=%.*s%s: not a regular file; the command was not run",
			         shown, env, more);
			return -1;
		}
		*lib = strdup(env);
	} else {
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n < 0) {
			run_fail("cannot find the shim: /proc/self/exe: %s (set TFALLOC_LIBRARY)",
			         strerror(errno));
			return -1;
		}
		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash != NULL)
			*slash = '\0';
		snprintf(guess, sizeof(guess), "%s/../lib/libtfalloc.so", exe);
		*lib = realpath(guess, NULL);
		if (*lib == NULL) {
			run_fail("cannot find the shim %s: %s; the command was not run (set "
			         "TFALLOC_LIBRARY)",
			         guess, strerror(errno));
			return -1;
		}
	}
	if (*lib == NULL) {
		run_fail("out of memory");
		return -1;
	}
	if (!run_preloadable_path(*lib)) {
		run_fail("the shim's path '%s' contains a space or a colon: LD_PRELOAD cannot name "
		         "it",
		         *lib);
		free(*lib);
		*lib = NULL;
		return -1;
	}
	return 0;
}

/* --------------------------------------------------------------------------
 * Will the loader preload the shim into the command?
 */

/* Finds name on PATH as execvp would; a malloc'd path, or NULL. */
static char *
run_search_path(const char *name)
{
	const char *path = getenv("PATH");
	const char *p;

	if (name[0] == '\0')
		return NULL;
	if (strchr(name, '/') != NULL)
		return strdup(name);
	if (path == NULL)
		path = "/bin:/usr/bin"; /* glibc's execvp default */
	for (p = path;; p++) {
		const char *end = strchrnul(p, ':');
		char *cand;
		struct stat st;

		if (asprintf(&cand, "%.*s%s%s", (int)(end - p), p, end == p ? "" : "/", name) < 0)
			return NULL;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return cand;
		free(cand);
		if (*end == '\0')
			return NULL;
		p = end;
	}
}

/* Whether the ELF file open as fd was linked statically: no PT_INTERP, no loader to preload the shim. */
static bool
elf_is_static(int fd)
{
	unsigned char head[TFA_ELF_HEAD_BYTES];
	tfa_elf_t e;

	if (!tfa_elf_open(fd, head, &e) || (e.type != 2 && e.type != 3)) /* ET_EXEC, ET_DYN */
		return false;
	for (unsigned i = 0; i < e.phnum; i++) {
		tfa_elf_phdr_t ph;
		if (!tfa_elf_phdr(&e, i, &ph))
			return false; /* cut short: the exec will say what is wrong */
		if (ph.type == 3) /* PT_INTERP */
			return false;
	}
	return true;
}

/* Warns when the file at path will run without the shim; follows #! lines. */
static void
run_check_program(const char *path, int depth)
{
	unsigned char buf[256]; /* the kernel reads this much of a #! line */
	struct stat st;
	ssize_t n;
	int fd;

	if (depth > RUN_MAX_SCRIPT_DEPTH)
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return; /* exec will say what is wrong */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		goto out_close;

	/* Secure-execution programs: glibc ignores LD_PRELOAD for them. */
	if ((st.st_mode & S_ISUID) && st.st_uid != getuid()) {
		fprintf(stderr,
		        "tfalloc: %s is setuid: the loader ignores LD_PRELOAD for it; "
		        "it runs without a profile\n",
		        path);
	} else if ((st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) && st.st_gid != getgid()) {
		fprintf(stderr,
		        "tfalloc: %s is setgid: the loader ignores LD_PRELOAD for it; "
		        "it runs without a profile\n",
		        path);
	} else if (getuid() != 0 && fgetxattr(fd, "security.capability", NULL, 0) > 0) {
		fprintf(stderr,
		        "tfalloc: %s has file capabilities: the loader ignores LD_PRELOAD "
		        "for it; it runs without a profile\n",
		        path);
	}

	n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n >= 2 && buf[0] == '#' && buf[1] == '!') {
		char *line = (char *)buf + 2, *interp, *arg, *end;

		buf[n] = '\0';
		line[strcspn(line, "\n")] = '\0';
		interp = line + strspn(line, " \t");
		end = interp + strcspn(interp, " \t");
		arg = end + strspn(end, " \t");
		*end = '\0';
		if (*interp == '\0')
			goto out_close;
		run_check_program(interp, depth + 1);
		/* "#!/usr/bin/env NAME": env runs NAME from PATH. */
		if (strcmp(strrchr(interp, '/') ? strrchr(interp, '/') + 1 : interp, "env") == 0
		    && *arg != '\0' && *arg != '-') {
			char *prog;

			arg[strcspn(arg, " \t")] = '\0';
			prog = run_search_path(arg);
			if (prog != NULL)
				run_check_program(prog, depth + 1);
			free(prog);
		}
	} else if (elf_is_static(fd)) {
		fprintf(stderr,
		        "tfalloc: %s is statically linked: LD_PRELOAD cannot reach its "
		        "allocations; it runs without a profile\n",
		        path);
	}
out_close:
	close(fd);
}

/* --------------------------------------------------------------------------
 * The output directory
 */

/* mkdir -p with mode 0700 for what it creates.  0 or -errno. */
static int
run_mkdirs(const char *dir)
{
	char *copy = strdup(dir);
	struct stat st;
	int rc = 0;

	if (copy == NULL)
		return -ENOMEM;
	for (char *p = copy + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;

		*p = '\0';
		if (mkdir(copy, 0700) < 0 && errno != EEXIST) {
			rc = -errno;
			break;
		}
		*p = c;
		if (c == '\0')
			break;
	}
	free(copy);
	if (rc == 0 && stat(dir, &st) < 0)
		rc = -errno;
	else if (rc == 0 && !S_ISDIR(st.st_mode))
		rc = -ENOTDIR;
	return rc;
}

/* Creates the output directory; a malloc'd absolute path, or NULL after a complaint. */
static char *
run_output_dir(const struct run_opts *o)
{
	char *dir = NULL, *abs;
	int rc;

	if (o->output != NULL) {
		dir = strdup(o->output);
	} else {
		const char *base =
		        strrchr(o->cmd[0], '/') ? strrchr(o->cmd[0], '/') + 1 : o->cmd[0];

		if (asprintf(&dir, "tfalloc.%s.%ld", base[0] ? base : "cmd", (long)getpid()) < 0)
			dir = NULL;
	}
	if (dir == NULL) {
		run_fail("out of memory");
		return NULL;
	}
	rc = run_mkdirs(dir);
	if (rc < 0) {
		run_fail("cannot create the output directory %s: %s", tfa_shown(dir), strerror(-rc));
		free(dir);
		return NULL;
	}
	abs = realpath(dir, NULL);
	if (abs == NULL) {
		run_fail("output directory %s: %s", tfa_shown(dir), strerror(errno));
		free(dir);
		return NULL;
	}
	if (access(abs, W_OK | X_OK) < 0) {
		run_fail("output directory %s: %s", tfa_shown(abs), strerror(errno));
		goto out_free;
	}
	if (strlen(abs) >= RUN_ENV_STR_MAX - 64) {
		run_fail("output directory %s: path too long", tfa_shown(abs));
		goto out_free;
	}
	free(dir);
	return abs;

out_free:
	free(dir);
	free(abs);
	return NULL;
}

/* The profiles `tfalloc report DIR` reads (tools/profile_dir.h). */
static size_t
run_count_profiles(const char *dir)
{
	char **paths;
	size_t n;

	if (tfa_profile_dir_list(dir, &paths, &n) != 0)
		return 0;
	tfa_profile_dir_free(paths, n);
	return n;
}

/* Prints s as one shell word. */
static void
run_print_shell_word(FILE *f, const char *s)
{
	if (s[0] != '\0'
	    && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	                 "0123456789/._-+,:@%=")
	               == strlen(s)) {
		fputs(s, f);
		return;
	}
	fputc('\'', f);
	for (; *s != '\0'; s++) {
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	}
	fputc('\'', f);
}

/* --------------------------------------------------------------------------
 * The environment
 */

/* A boolean TFALLOC_* variable as the shim reads it. */
static bool
run_env_true(const char *name)
{
	const char *v = getenv(name);
	bool b = false;

	return v != NULL && tfa_parse_bool(v, &b) == 0 && b;
}

static int
run_set_env(const struct run_opts *o, const char *lib, const char *dir)
{
	const char *prev = getenv("LD_PRELOAD");
	char *preload;
	int rc = 0;

	/* lib NULL: the command runs without the shim (its options are set all the same). */
	if (lib != NULL) {
		if (prev != NULL && prev[0] != '\0')
			rc = asprintf(&preload, "%s:%s", lib, prev);
		else
			rc = asprintf(&preload, "%s", lib);
		if (rc < 0)
			return run_fail("out of memory");
		rc = setenv("LD_PRELOAD", preload, 1);
		free(preload);
	}
	if (rc == 0)
		rc = setenv("TFALLOC_OUTPUT", dir, 1);
	if (rc == 0 && o->allocator != NULL)
		rc = setenv("TFALLOC_ALLOCATOR", o->allocator, 1);
	if (rc == 0 && o->limit != NULL)
		rc = setenv("TFALLOC_LIMIT", o->limit, 1);
	if (rc == 0 && o->tag_by != NULL)
		rc = setenv("TFALLOC_TAG_BY", o->tag_by, 1);
	if (rc == 0 && o->track != NULL)
		rc = setenv("TFALLOC_TRACK", o->track, 1);
	/*
	 * Under the gate the processes print no summary unless asked to: a test
	 * suite's tests compare what their children write on stderr (GLib's
	 * g_test_trap_assert_stderr, python's subprocess checks), and the gate's
	 * report says what the summaries would.
	 */
	if (rc == 0 && (o->quiet || (o->gate.enabled && getenv("TFALLOC_QUIET") == NULL)))
		rc = setenv("TFALLOC_QUIET", "1", 1);
	if (rc < 0)
		return run_fail("cannot set the environment: %s", strerror(errno));
	return 0;
}

/* --------------------------------------------------------------------------
 * The processes' lines
 *
 * Each process's shim writes its lines (the summary at exit, memory errors,
 * warnings) into a FIFO of tfalloc's (TFALLOC_LOG), and a thread of tfalloc
 * prints them on tfalloc's stderr.  On their own stderr they went into what
 * programs read of their children: cmake's configure reads its compiler
 * checks' output with their stderr, and failed on a summary line in it
 * ("include called with invalid argument"); a test comparing a child's
 * stderr failed.  A process that cannot open the FIFO (it changed its user,
 * its root, or outlived the run) writes to its stderr as before.
 */

struct run_log {
	char dir[PATH_MAX];
	char path[PATH_MAX + sizeof("/log")];
	int fd; /* read and write: never an end of file while the command runs */
	pthread_t thread;
	bool running;
};

/* Written by run_log_stop after every line there is: messages are text, never a NUL. */
#define RUN_LOG_END '\0'

static void *
run_log_forward(void *arg)
{
	struct run_log *l = arg;
	char buf[65536];

	for (;;) {
		ssize_t n = read(l->fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL;
		char *end = memchr(buf, RUN_LOG_END, (size_t)n);
		size_t keep = end != NULL ? (size_t)(end - buf) : (size_t)n;
		for (size_t at = 0; at < keep;) {
			ssize_t w = write(STDERR_FILENO, buf + at, keep - at);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break; /* stderr gone: the lines are dropped, the run goes on */
			at += (size_t)w;
		}
		if (end != NULL)
			return NULL;
	}
}

/* A directory of tfalloc run's own in parent, into l->dir; false when it cannot be made. */
static bool
run_log_dir(struct run_log *l, const char *parent, const char *name)
{
	return snprintf(l->dir, sizeof(l->dir), "%s/%s.XXXXXX", parent, name) < (int)sizeof(l->dir)
	       && mkdtemp(l->dir) != NULL;
}

/*
 * Makes the FIFO, under TMPDIR (or /tmp), else in the output directory (a
 * read-only /tmp), and starts the thread; false (nothing made) when it
 * cannot.
 */
static bool
run_log_start(struct run_log *l, const char *outdir)
{
	const char *tmp = getenv("TMPDIR");
	sigset_t all, old;

	l->running = false;
	if (tmp == NULL || tmp[0] != '/')
		tmp = "/tmp";
	if (!run_log_dir(l, tmp, "tfalloc-run") && !run_log_dir(l, outdir, ".tfalloc-run"))
		return false;
	snprintf(l->path, sizeof(l->path), "%s/log", l->dir);
	if (mkfifo(l->path, 0600) < 0) {
		rmdir(l->dir);
		return false;
	}
	l->fd = open(l->path, O_RDWR | O_CLOEXEC);
	/*
	 * Room for a burst of lines while the thread waits on a slow stderr: a
	 * line the FIFO has no room for goes to the process's own stderr.  As
	 * much as an unprivileged pipe may have (pipe-max-size), 64 KiB where
	 * refused.
	 */
	if (l->fd >= 0)
		(void)fcntl(l->fd, F_SETPIPE_SZ, 1 << 20);
	/* Signals stay the main thread's: it forwards SIGTERM and SIGHUP to the command. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	bool started = l->fd >= 0 && pthread_create(&l->thread, NULL, run_log_forward, l) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!started) {
		if (l->fd >= 0)
			close(l->fd);
		unlink(l->path);
		rmdir(l->dir);
		return false;
	}
	l->running = true;
	return true;
}

/* Prints what came before this, stops the thread and removes the FIFO. */
static void
run_log_stop(struct run_log *l)
{
	char end = RUN_LOG_END;

	if (!l->running)
		return;
	/* After everything the processes wrote: a FIFO keeps the order of its writes. */
	while (write(l->fd, &end, 1) < 0 && errno == EINTR)
		;
	pthread_join(l->thread, NULL);
	/* Gone: a process that outlived the run writes to its own stderr (no directory to make a file in). */
	unlink(l->path);
	rmdir(l->dir);
	close(l->fd);
	l->running = false;
}

/* --------------------------------------------------------------------------
 * Running the command
 */

static volatile sig_atomic_t run_child_pid;

static void
run_forward_signal(int sig)
{
	int saved_errno = errno;
	pid_t pid = (pid_t)run_child_pid;

	if (pid > 0)
		kill(pid, sig);
	errno = saved_errno;
}

struct run_signals {
	struct sigaction old_int, old_quit, old_term, old_hup, old_chld;
	sigset_t old_mask;
};

/*
 * Before fork: ignore SIGINT and SIGQUIT, and hold SIGTERM and SIGHUP blocked
 * until the child's pid is known to the forwarding handler.  SIGCHLD gets its
 * default action: when ignored (inherited from our parent) waitpid would
 * find no child.
 */
static void
run_signals_before_fork(struct run_signals *s)
{
	struct sigaction ign = { .sa_handler = SIG_IGN }, dfl = { .sa_handler = SIG_DFL },
	                 fwd = { .sa_handler = run_forward_signal, .sa_flags = SA_RESTART };
	sigset_t block;

	sigemptyset(&ign.sa_mask);
	sigemptyset(&dfl.sa_mask);
	sigemptyset(&fwd.sa_mask);
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	sigprocmask(SIG_BLOCK, &block, &s->old_mask);
	sigaction(SIGINT, &ign, &s->old_int);
	sigaction(SIGQUIT, &ign, &s->old_quit);
	sigaction(SIGTERM, &fwd, &s->old_term);
	sigaction(SIGHUP, &fwd, &s->old_hup);
	sigaction(SIGCHLD, &dfl, &s->old_chld);
}

/* In the child, or in the parent once it is done: the dispositions tfalloc started with. */
static void
run_signals_restore(const struct run_signals *s)
{
	sigaction(SIGINT, &s->old_int, NULL);
	sigaction(SIGQUIT, &s->old_quit, NULL);
	sigaction(SIGTERM, &s->old_term, NULL);
	sigaction(SIGHUP, &s->old_hup, NULL);
	sigaction(SIGCHLD, &s->old_chld, NULL);
	sigprocmask(SIG_SETMASK, &s->old_mask, NULL);
}

/* Exec fails: 127 when the command is not there, 126 otherwise (as bash). */
static int
run_exec_failed(const char *cmd, int err)
{
	if (err == ENOENT || err == ENOTDIR) {
		if (strchr(cmd, '/') == NULL)
			fprintf(stderr, "tfalloc: run: %s: command not found\n", cmd);
		else
			fprintf(stderr, "tfalloc: run: %s: %s\n", cmd, strerror(err));
		return TFA_EXIT_NOT_FOUND;
	}
	fprintf(stderr, "tfalloc: run: %s: %s\n", cmd, strerror(err));
	return TFA_EXIT_CANNOT_EXEC;
}

/*
 * Runs the command and waits for it.  Returns its exit status (128 + signal
 * when killed), or 126/127 when it could not be executed (*ran = false).
 */
static int
run_command(char **cmd, bool *ran)
{
	struct run_signals sigs;
	int pipefd[2], err, status;
	ssize_t n;
	pid_t pid;

	*ran = false;
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return run_fail("pipe: %s", strerror(errno));
	fflush(NULL);
	run_signals_before_fork(&sigs);
	pid = fork();
	if (pid < 0) {
		err = errno;
		run_signals_restore(&sigs);
		close(pipefd[0]);
		close(pipefd[1]);
		return run_fail("fork: %s", strerror(err));
	}
	if (pid == 0) {
		close(pipefd[0]);
		run_signals_restore(&sigs);
		execvp(cmd[0], cmd);
		err = errno;
		while (write(pipefd[1], &err, sizeof(err)) < 0 && errno == EINTR)
			;
		_exit(TFA_EXIT_NOT_FOUND);
	}
	run_child_pid = pid;
	sigprocmask(SIG_SETMASK, &sigs.old_mask, NULL); /* pending TERM/HUP are forwarded now */
	close(pipefd[1]);
	do
		n = read(pipefd[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	close(pipefd[0]);

	/*
	 * Orphans of the command come back to tfalloc (run_reap_orphans) while
	 * it runs too: each is reaped when it ends, or a long run whose command
	 * leaves processes behind would hold their zombies, which count against
	 * the user's process limit, until the command ended.
	 */
	for (;;) {
		pid_t p = waitpid(-1, &status, 0);
		if (p == pid)
			break;
		if (p < 0 && errno != EINTR) {
			err = errno;
			run_child_pid = 0;
			run_signals_restore(&sigs);
			return run_fail("waitpid: %s", strerror(err));
		}
	}
	run_child_pid = 0;
	run_signals_restore(&sigs);
	if (n == (ssize_t)sizeof(err))
		return run_exec_failed(cmd[0], err);
	*ran = true;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return TFA_EXIT_RUN_FAILED;
}

/*
 * The leak gate judges every process the command started, those that
 * outlive it too (a daemon forked twice, a pipeline's last stage left
 * behind): tfalloc is their subreaper (PR_SET_CHILD_SUBREAPER), so they come
 * back to it as orphans when their parents exit, and it waits for them,
 * wait_ms at most (--orphans-wait; without the gate RUN_ORPHANS_GRACE_MS,
 * for the closing line's count).  Before, the gate read the profiles
 * there were when the command's own process exited, and passed a run whose
 * grandchild leaked a second later.  Returns whether some still run; pids
 * (cap bytes) gets their pids, as the kernel lists a process's children
 * (CONFIG_PROC_CHILDREN), or "" when it cannot be read.
 */
static bool
run_reap_orphans(long wait_ms, char *pids, size_t cap)
{
	struct timespec start, now, pause = { 0, 10 * 1000 * 1000 };

	pids[0] = '\0';
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		pid_t p = waitpid(-1, NULL, WNOHANG);
		if (p > 0)
			continue;
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0) /* ECHILD: none left */
			return false;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if (ms >= wait_ms)
			break;
		nanosleep(&pause, NULL);
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t got = read(fd, pids, cap - 1);
		close(fd);
		while (got > 0 && (pids[got - 1] == ' ' || pids[got - 1] == '\n'))
			got--;
		pids[got > 0 ? got : 0] = '\0';
	}
	return true;
}

int
tfa_cmd_run(int argc, char **argv)
{
	struct run_opts o;
	char *lib = NULL, *dir = NULL, *prog;
	bool ran;
	int rc;

	rc = run_parse_args(argc, argv, &o);
	if (rc != 0)
		return rc > 0 ? 0 : TFA_EXIT_RUN_FAILED;
	if (run_find_library(&lib) < 0)
		return TFA_EXIT_RUN_FAILED;
	/* A sample cannot pass a leak gate: said before the command runs. */
	const char *track = o.track != NULL ? o.track : getenv("TFALLOC_TRACK");
	if (o.gate.enabled && track != NULL && strcmp(track, "sampled") == 0) {
		run_fail("--leak-gate: %s=sampled records a sample of the blocks, which cannot show "
		         "that nothing leaked (use TFALLOC_TRACK=all)", o.track != NULL ? "--track" : "TFALLOC_TRACK");
		free(lib);
		return TFA_GATE_EXIT_SAMPLED;
	}
	/* The line says what is wrong; 125 says the command did not run. */
	if (o.gate.enabled && tfa_gate_check_inputs(&o.gate) != 0) {
		free(lib);
		return TFA_EXIT_RUN_FAILED;
	}

	prog = run_search_path(o.cmd[0]);
	if (prog != NULL)
		run_check_program(prog, 0);
	/* A sanitizer that must be the first library stops the program if the shim comes before it. */
	bool no_shim = prog != NULL && tfa_child_env_path_needs_first(AT_FDCWD, prog);
	if (no_shim)
		fprintf(stderr, "tfalloc: %s needs its sanitizer's runtime (AddressSanitizer, ThreadSanitizer) "
		        "loaded first: it runs without the shim, and without a profile\n", prog);
	free(prog);

	dir = run_output_dir(&o);
	if (dir == NULL) {
		rc = TFA_EXIT_RUN_FAILED;
		goto out_free;
	}
	bool closing_line = !o.quiet && !run_env_true("TFALLOC_QUIET");
	if (run_set_env(&o, no_shim ? NULL : lib, dir) != 0) {
		rc = TFA_EXIT_RUN_FAILED;
		goto out_free;
	}
	/*
	 * A TFALLOC_LOG of the user's is theirs; one a tfalloc run around this
	 * one made is not: the lines of this run's processes are this run's.
	 */
	struct run_log log = { .running = false };
	const char *user_log = getenv("TFALLOC_LOG"), *outer_log = getenv("TFALLOC_RUN_LOG");
	bool users = user_log != NULL && user_log[0] != '\0'
		     && (outer_log == NULL || strcmp(outer_log, user_log) != 0);
	if (!users && run_log_start(&log, dir)
	    && (setenv("TFALLOC_LOG", log.path, 1) != 0 || setenv("TFALLOC_RUN_LOG", log.path, 1) != 0))
		run_log_stop(&log);
	/* Orphans of the command come back here, to be waited for (run_reap_orphans). */
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	/* Profiles of processes that started before this are an earlier run's (a reused --output). */
	struct timespec began;
	if (clock_gettime(CLOCK_REALTIME, &began) == 0)
		o.gate.since_ns = (uint64_t)began.tv_sec * 1000000000u + (uint64_t)began.tv_nsec;
	rc = run_command(o.cmd, &ran);
	char orphans[512];
	bool running = ran && run_reap_orphans(o.gate.enabled ? o.orphans_wait_ms : RUN_ORPHANS_GRACE_MS, orphans,
					       sizeof(orphans));
	/*
	 * From here the status is CMD's (or the gate's): tfalloc's own lines and
	 * reports must not turn it into a death by a full quota (see main) or by
	 * a stderr nobody reads any more (`tfalloc run -- make 2>&1 | head`).
	 */
	signal(SIGXFSZ, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	run_log_stop(&log);
	if (!running)
		tfa_profile_dir_tidy(dir);
	if (ran && closing_line) {
		fprintf(stderr, "tfalloc: %zu profile(s) in %s; read them with: tfalloc report ",
		        run_count_profiles(dir), dir);
		run_print_shell_word(stderr, dir);
		fputc('\n', stderr);
	}
	if (running && !o.gate.enabled && closing_line)
		fprintf(stderr, "tfalloc: processes the command started still run%s%s%s: each writes its profile "
		        "there when it ends\n", orphans[0] != '\0' ? " (pid " : "", orphans, orphans[0] != '\0' ? ")" : "");
	if (running && o.gate.enabled)
		fprintf(stderr, "tfalloc: leak gate: processes the command started still run after %ld s%s%s%s: "
		        "not judged\n", o.orphans_wait_ms / 1000, orphans[0] != '\0' ? " (pid " : "", orphans,
		        orphans[0] != '\0' ? ")" : "");
	if (ran && o.gate.enabled)
		rc = tfa_leak_gate(dir, &o.gate, rc);
out_free:
	free(dir);
	free(lib);
	return rc;
}
