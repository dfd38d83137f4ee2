/* SPDX-License-Identifier: MIT */
/*
 * exec: leaks 500 bytes (one block), prints "EXEC pid", then replaces itself
 * with argv[1] (argv[1..] as its arguments).  Expected under the shim: two
 * profiles with this pid, this image's (end_reason "exec", 500 bytes more in
 * use than its baseline) and the new image's (its own exit).  "baseline" does
 * nothing.
 */
#include "tp_common.h"

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	TP_CHECK(argc > 1, "usage: tp_exec PROGRAM [ARGS...]");
	void *p = malloc(500);
	TP_CHECK(p != NULL, "malloc(500)");
	TP_KEEP(p);
	tp_out("EXEC %d\n", (int)getpid());
	execv(argv[1], argv + 1);
	tp_printf(2, "tp_exec: execv %s: %s\n", argv[1], strerror(errno));
	return 127;
}
