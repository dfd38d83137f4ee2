/* SPDX-License-Identifier: MIT */
/*
 * libtfalloc.so is linked with --wrap=mmap,--wrap=munmap: every mmap and
 * munmap its own code makes (core/arena.c, the private jemalloc) comes here
 * and is recorded in core/own_maps.h, so that the leak scan knows which
 * anonymous memory is the shim's.
 */
#include <sys/mman.h>
#include <sys/types.h>

#include "core/own_maps.h"

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_munmap(void *addr, size_t len);

void *
__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p = __real_mmap(addr, len, prot, flags, fd, off);

	len = (len + 4095) & ~(size_t)4095;
	if (p != MAP_FAILED && (flags & MAP_ANONYMOUS) != 0) {
		/* MAP_FIXED over a recorded range: recorded once. */
		if ((flags & MAP_FIXED) != 0)
			tfa_own_maps_remove((uintptr_t)p, len);
		tfa_own_maps_add((uintptr_t)p, len);
	}
	return p;
}

int
__wrap_munmap(void *addr, size_t len)
{
	int r = __real_munmap(addr, len);

	len = (len + 4095) & ~(size_t)4095;
	if (r == 0)
		tfa_own_maps_remove((uintptr_t)addr, len);
	return r;
}
