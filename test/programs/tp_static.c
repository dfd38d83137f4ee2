/* SPDX-License-Identifier: MIT */
/*
 * Linked with -static: LD_PRELOAD cannot reach it.  Allocates, prints a line,
 * exits with status 3.
 */
#include "tp_common.h"

int
main(void)
{
	char *p = malloc(100);
	TP_CHECK(p != NULL, "malloc");
	memcpy(p, "static ok\n", 11);
	tp_write_all(1, p, strlen(p));
	free(p);
	return 3;
}
