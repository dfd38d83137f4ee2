/* SPDX-License-Identifier: MIT */
/*
 * large: large blocks.  Blocks of 64 KiB to 16 MiB (uniform in the logarithm)
 * are allocated, touched (one byte per 4 KiB page) and freed; up to WINDOW
 * blocks are live at once, the oldest freed first.
 * usage: large [BLOCKS]   (default 6000)
 */
#include "bench_common.h"

#define WINDOW 8
#define PAGE   4096

int
main(int argc, char **argv)
{
	long blocks = bench_arg(argc, argv, 1, 6000);
	uint64_t rng = 7, sum = 0;
	unsigned char *live[WINDOW] = {0};
	size_t live_size[WINDOW] = {0};
	unsigned long long bytes = 0;

	for (long i = 0; i < blocks; i++) {
		int slot = (int)(i % WINDOW);
		if (live[slot] != NULL) {
			for (size_t k = 0; k < live_size[slot]; k += PAGE)
				sum = bench_mix(sum, live[slot][k]);
			free(live[slot]);
		}
		size_t size = bench_log_size(&rng, 64 << 10, 16 << 20);
		unsigned char *p = bench_xmalloc(size);
		for (size_t k = 0; k < size; k += PAGE)
			p[k] = (unsigned char)(k / PAGE + (size_t)i);
		live[slot] = p;
		live_size[slot] = size;
		bytes += size;
	}
	for (int s = 0; s < WINDOW; s++) {
		for (size_t k = 0; k < live_size[s]; k += PAGE)
			sum = bench_mix(sum, live[s] != NULL ? live[s][k] : 0);
		free(live[s]);
	}
	printf("blocks %ld, bytes %llu\n", blocks, bytes);
	printf("CHECKSUM %016" PRIx64 "\n", sum);
	return 0;
}
