/* SPDX-License-Identifier: MIT */
/*
 * Device leaks for the leak gate, linked with the fake libcuda (-lcuda):
 * on device 0 a cuMemAlloc of 1 MiB whose pointer the program forgets, one
 * of 2 MiB still held in a global at exit, and pinned host memory of 4096
 * forgotten: all definitely lost (a device block left at exit is).
 * With the argument "clean" it frees all three.
 */
#include <string.h>
#include <unistd.h>

#include "fake_cuda.h"

CUdeviceptr t_kept;

static void __attribute__((noinline))
lose(void)
{
	CUdeviceptr lost = 0;
	void *host = NULL;
	if (cuMemAlloc(&lost, 1 << 20) != CUDA_SUCCESS || cuMemAllocHost(&host, 4096) != CUDA_SUCCESS)
		_exit(1);
	/* The pointers are forgotten: nothing in host memory holds them. */
	__asm__ volatile("" ::: "memory");
	lost = 0;
	host = NULL;
}

int
main(int argc, char **argv)
{
	CUcontext ctx;
	CUdevice dev;
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS
	    || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 1;
	if (argc > 1 && strcmp(argv[1], "clean") == 0) {
		CUdeviceptr a;
		void *h;
		if (cuMemAlloc(&a, 1 << 20) || cuMemAllocHost(&h, 4096) || cuMemFree(a) || cuMemFreeHost(h))
			return 1;
		return 0;
	}
	lose();
	if (cuMemAlloc(&t_kept, 2 << 20) != CUDA_SUCCESS)
		return 1;
	return 0;
}
