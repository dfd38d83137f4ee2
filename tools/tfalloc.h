/* SPDX-License-Identifier: MIT */
/*
 * The subcommands of the tfalloc command.  Each takes the arguments after the
 * command's own name (argv[0] is the subcommand's name) and returns the exit
 * status of the tool.
 */
#ifndef TFA_TOOLS_TFALLOC_H
#define TFA_TOOLS_TFALLOC_H

#include <stddef.h>
#include <stdio.h>

/* Exit statuses of tfalloc's own failures, as env(1) and timeout(1) use them. */
#define TFA_EXIT_USAGE       2   /* a usage error of a subcommand other than run */
#define TFA_EXIT_RUN_FAILED  125 /* tfalloc run could not start the command */
#define TFA_EXIT_CANNOT_EXEC 126 /* the command was found but could not be executed */
#define TFA_EXIT_NOT_FOUND   127 /* the command was not found */

/* tfalloc run [options] [--] CMD [ARGS...] */
int tfa_cmd_run(int argc, char **argv);
void tfa_run_usage(FILE *f);

/* tfalloc report [--format text|json|folded|pprof|html] [--by LIST] [-o FILE] PATH... */
int tfa_cmd_report(int argc, char **argv);
void tfa_report_usage(FILE *f);

/* tfalloc snapshot [-o FILE] [--timeout SECONDS] PID (tools/live.c) */
int tfa_cmd_snapshot(int argc, char **argv);
void tfa_snapshot_usage(FILE *f);

/* tfalloc top [-d SECONDS] [-n COUNT] [-b] PID (tools/live.c) */
int tfa_cmd_top(int argc, char **argv);
void tfa_top_usage(FILE *f);

/* One name of an option's comma-separated list, and the bits it stands for. */
typedef struct tfa_name_bits_s {
	const char *name;
	unsigned bits;
} tfa_name_bits_t;

/*
 * The union of the bits of the names in list ("peak,leaked"), into *bits.
 * Returns -1 (*bits untouched) for an unknown or empty name, or no name.
 */
int tfa_parse_name_list(const char *list, const tfa_name_bits_t *names, size_t n, unsigned *bits);

/*
 * A value from the command line as an error line shows it: at most 64 bytes,
 * then "..." (a 100 kB argument stays a line one can read).  The result lives
 * until the fourth call after this one.
 */
const char *tfa_shown(const char *value);

#endif /* TFA_TOOLS_TFALLOC_H */
