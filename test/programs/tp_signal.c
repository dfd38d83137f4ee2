/* SPDX-License-Identifier: MIT */
/*
 * Leaks 4444 bytes (2 blocks: 4000 and 444), prints "SIGNAL pid", then kills
 * itself with the signal argv[1] (default SIGTERM), whose disposition it
 * left at the default.  (A program that sets SIG_DFL itself just before
 * raising replaces tfalloc's handler; keeping a profile then needs a
 * sigaction interposer, which the reliability work brings.)
 * "baseline" does nothing.
 */
#include <signal.h>

#include "tp_common.h"

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	int sig = argc > 1 ? atoi(argv[1]) : SIGTERM;
	void *a = malloc(4000);
	void *b = malloc(444);
	TP_CHECK(a != NULL && b != NULL, "malloc");
	TP_KEEP(a);
	TP_KEEP(b);
	void *c = malloc(10000);
	TP_CHECK(c != NULL, "malloc");
	free(c);
	tp_out("SIGNAL %d\n", (int)getpid());
	raise(sig);
	kill(getpid(), sig);
	tp_printf(2, "tp_signal: still alive after signal %d\n", sig);
	return 1;
}
