/* SPDX-License-Identifier: MIT */
/*
 * A program built with AddressSanitizer (gcc links its runtime, libasan.so,
 * as a needed library): the runtime must be the first library loaded, and
 * stops the program at start when a preloaded one comes before it.  Prints
 * "asan K" for its argument K, allocates and frees a block, exits 0.
 */
#include <stdio.h>
#include <stdlib.h>

int
main(int argc, char **argv)
{
	char *p = malloc(64);

	if (p == NULL)
		return 1;
	snprintf(p, 64, "asan %s", argc > 1 ? argv[1] : "-");
	puts(p);
	free(p);
	return 0;
}
