/* SPDX-License-Identifier: MIT */
/*
 * The leak gate of `tfalloc run --leak-gate`: after the command, every
 * profile of the run is read, its leaks filtered by kind and suppressions,
 * and the run fails (exit status 23 by default) when a process leaked more
 * than the budget or made a memory error.  Findings go to stderr in a form a
 * CI log shows well, and optionally to JUnit XML and SARIF 2.1.0 files.
 */
#ifndef TFA_TOOLS_GATE_H
#define TFA_TOOLS_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TFA_GATE_EXITCODE_DEFAULT 23
/* A profile of sample-only tracking (TFALLOC_TRACK=sampled) was found: no verdict. */
#define TFA_GATE_EXIT_SAMPLED 122
#define TFA_GATE_MAX_SUPPRESSION_FILES 64

/* Leak kinds as bits (enum tfa_prof_leak_kind_e: 1 << kind). */
#define TFA_GATE_KIND_BIT(k) (1u << (k))

typedef struct tfa_gate_opts_s {
	bool enabled;
	int exitcode;            /* the status of a failed gate */
	uint64_t max_leak_bytes; /* per process: more fails */
	uint64_t max_leak_blocks;
	unsigned kinds;          /* TFA_GATE_KIND_BIT of the kinds that count */
	bool fail_on_errors;     /* memory errors fail the gate */
	const char *suppressions[TFA_GATE_MAX_SUPPRESSION_FILES];
	size_t nsuppressions;
	const char *junit;       /* NULL: none */
	const char *sarif;
	/*
	 * CLOCK_REALTIME when the run began (0: none): a profile of a process
	 * that started before it is an earlier run's, left in a reused output
	 * directory, and is not judged.
	 */
	uint64_t since_ns;
} tfa_gate_opts_t;

/* Defaults: exit code 23, budget 0, definite and indirect leaks, errors fail. */
void tfa_gate_opts_init(tfa_gate_opts_t *g);

/*
 * "definite,indirect,possible,reachable" (any subset, or "all") into *kinds;
 * -1 for anything else.  An unclassified leak (a profile written without the
 * reachability scan) counts as definite.
 */
int tfa_gate_parse_kinds(const char *list, unsigned *kinds);

/*
 * Reads the suppression files and opens the --junit and --sarif files for
 * writing before the command runs: a missing file, a bad line (FILE:LINE) or
 * a report that cannot be written is said then, not after a long run.  0 or -1.
 */
int tfa_gate_check_inputs(const tfa_gate_opts_t *g);

/*
 * Gates the profiles in dir after the command ended with status cmd_status
 * (as tfalloc run returns it).  Returns the run's exit status: cmd_status
 * when the command failed; else g->exitcode when the gate failed, else 0.
 * A profile or suppression file that cannot be read fails the gate with one
 * line saying why (125 when nothing could be gated).  A profile of
 * sample-only tracking is refused with one line naming it, and the status is
 * TFA_GATE_EXIT_SAMPLED (122) unless the command failed.
 */
int tfa_leak_gate(const char *dir, const tfa_gate_opts_t *g, int cmd_status);

#endif /* TFA_TOOLS_GATE_H */
