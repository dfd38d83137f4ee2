/* SPDX-License-Identifier: MIT */
/*
 * realloc: mixed sizes with realloc chains.  A pool of string builders grows
 * by realloc, each step by a random 1..4096 bytes, towards a random target
 * size between 8 bytes and 1 MiB (uniform in its logarithm); a builder that
 * reaches its target is freed and a new one starts, so frees interleave with
 * the chains.  Every byte appended is written, and the contents are folded
 * into the checksum.
 * usage: realloc [OPS]   (default 1500000 appends)
 */
#include <string.h>

#include "bench_common.h"

#define BUILDERS 256

typedef struct {
	unsigned char *buf;
	size_t len, target;
} builder_t;

int
main(int argc, char **argv)
{
	long ops = bench_arg(argc, argv, 1, 1500000);
	uint64_t rng = 42, sum = 0;
	builder_t b[BUILDERS];
	long reallocs = 0, completed = 0;

	for (int i = 0; i < BUILDERS; i++)
		b[i] = (builder_t){NULL, 0, bench_log_size(&rng, 8, 1 << 20)};

	for (long op = 0; op < ops; op++) {
		builder_t *s = &b[bench_rand(&rng) % BUILDERS];
		size_t add = (size_t)bench_range(&rng, 1, 4096);
		if (s->len + add > s->target)
			add = s->target - s->len;
		if (add == 0)
			add = 1;
		unsigned char *nb = realloc(s->buf, s->len + add);
		if (nb == NULL) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
		reallocs++;
		memset(nb + s->len, (int)(op & 0xff), add);
		s->buf = nb;
		s->len += add;
		if (s->len >= s->target) {
			/* Read a few bytes spread over the block, then drop it. */
			for (size_t k = 0; k < s->len; k += 4099)
				sum = bench_mix(sum, s->buf[k]);
			sum = bench_mix(sum, s->len);
			free(s->buf);
			completed++;
			*s = (builder_t){NULL, 0, bench_log_size(&rng, 8, 1 << 20)};
		}
	}
	for (int i = 0; i < BUILDERS; i++) {
		sum = bench_mix(sum, b[i].len);
		free(b[i].buf);
	}
	printf("reallocs %ld, completed strings %ld\n", reallocs, completed);
	printf("CHECKSUM %016" PRIx64 "\n", sum);
	return 0;
}
