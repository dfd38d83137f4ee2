/* SPDX-License-Identifier: MIT */
/*
 * tfalloc: run a program under libtfalloc.so, and read the profiles it
 * leaves.  This file only dispatches to the subcommands.
 */
#include "tools/tfalloc.h"

#include "core/options.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#ifndef TFA_VERSION
#	define TFA_VERSION "unknown"
#endif

static void
usage(FILE *f)
{
	fputs("usage: tfalloc COMMAND [ARGS...]\n"
	      "\n"
	      "Commands:\n"
	      "  run [options] [--] CMD [ARGS...]   run CMD with the memory profiler preloaded\n"
	      "  report [options] PATH...           show profile files, or directories of them\n"
	      "  snapshot [-o FILE] PID             ask a running process for its profile now\n"
	      "  top [-d SECONDS] [-n COUNT] PID    live figures of a running process, per device\n"
	      "                                     and per resource, refreshed every second\n"
	      "  help [COMMAND]                     this help, or the help of COMMAND\n"
	      "  help env, --help-env               the environment variables libtfalloc.so reads\n"
	      "  --version                          the version of tfalloc\n"
	      "\n"
	      "Run 'tfalloc help COMMAND' for the options of a command.\n",
	      f);
}

static void
print_line(void *ctx, const char *line)
{
	fprintf(ctx, "%s\n", line);
}

/* The shim's messages about unknown TFALLOC_* variables send people here. */
static int
help_env(void)
{
	printf("Environment variables of libtfalloc.so (a bad value gives the default, said in\n"
	       "one line on stderr; sizes take a K, M, G or T suffix):\n\n");
	printf("%-25s %-5s %-9s %s\n", "VARIABLE", "TYPE", "DEFAULT", "MEANING");
	tfa_options_describe(print_line, stdout);
	printf("%-25s %-5s %-9s %s\n", "TFALLOC_LIBRARY", "path", "(beside)",
	       "the shim tfalloc run preloads (tfalloc run only; default "
	       "<directory of tfalloc>/../lib/libtfalloc.so)");
	return 0;
}

static int
help(int argc, char **argv)
{
	if (argc < 2) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "env") == 0)
		return help_env();
	if (strcmp(argv[1], "run") == 0) {
		tfa_run_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "report") == 0) {
		tfa_report_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "snapshot") == 0) {
		tfa_snapshot_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "top") == 0) {
		tfa_top_usage(stdout);
		return 0;
	}
	fprintf(stderr, "tfalloc: help: unknown command '%s' (commands: run, report, snapshot, top, env)\n",
		argv[1]);
	return TFA_EXIT_USAGE;
}

int
main(int argc, char **argv)
{
	const char *cmd;

	if (argc < 2) {
		usage(stderr);
		return TFA_EXIT_USAGE;
	}
	cmd = argv[1];
	/*
	 * A write past RLIMIT_FSIZE (a full quota, `ulimit -f`) raises SIGXFSZ,
	 * which would kill tfalloc without a word: ignored, the write fails with
	 * EFBIG and the tool says so.  `run` ignores it only once the command has
	 * ended: the command inherits ignored signals through exec.
	 */
	if (strcmp(cmd, "run") != 0)
		signal(SIGXFSZ, SIG_IGN);
	if (strcmp(cmd, "run") == 0)
		return tfa_cmd_run(argc - 1, argv + 1);
	if (strcmp(cmd, "report") == 0)
		return tfa_cmd_report(argc - 1, argv + 1);
	if (strcmp(cmd, "snapshot") == 0)
		return tfa_cmd_snapshot(argc - 1, argv + 1);
	if (strcmp(cmd, "top") == 0)
		return tfa_cmd_top(argc - 1, argv + 1);
	if (strcmp(cmd, "--help-env") == 0)
		return help_env();
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
		return help(argc - 1, argv + 1);
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
		printf("tfalloc %s\n", TFA_VERSION);
		return 0;
	}
	fprintf(stderr, "tfalloc: unknown command '%s' (see 'tfalloc help')\n", cmd);
	return TFA_EXIT_USAGE;
}

const char *
tfa_shown(const char *value)
{
	static char bufs[4][64 + 4];
	static unsigned next;
	char *b = bufs[next++ % 4];

	if (value == NULL)
		return "(null)";
	if (strlen(value) <= 64)
		return value;
	memcpy(b, value, 64);
	memcpy(b + 64, "...", 4);
	return b;
}

int
tfa_parse_name_list(const char *list, const tfa_name_bits_t *names, size_t n, unsigned *bits)
{
	unsigned all = 0;

	while (*list != '\0') {
		size_t len = strcspn(list, ",");
		bool known = false;

		for (size_t i = 0; i < n; i++) {
			if (strlen(names[i].name) == len && strncmp(list, names[i].name, len) == 0) {
				all |= names[i].bits;
				known = true;
			}
		}
		if (!known)
			return -1;
		list += len;
		if (*list == ',' && *++list == '\0')
			return -1;
	}
	if (all == 0)
		return -1;
	*bits = all;
	return 0;
}
