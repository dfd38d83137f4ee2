/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for libtfalloc.so in the tests of `tfalloc run`: it is
 * preloaded like the shim and, when TFALLOC_FAKE_PROFILE is set, leaves an
 * empty file named <pid>.prof in $TFALLOC_OUTPUT, so that the test sees
 * which processes it reached.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void
fake_shim_init(void)
{
	const char *dir = getenv("TFALLOC_OUTPUT");
	char path[4200];
	int fd;

	if (dir == NULL || getenv("TFALLOC_FAKE_PROFILE") == NULL)
		return;
	snprintf(path, sizeof(path), "%s/%ld.prof", dir, (long)getpid());
	fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}
