/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the benchmark workloads (test/bench/): a deterministic
 * PRNG, a checksum mixer, a monotonic clock and argument parsing.  Every
 * workload prints the same "CHECKSUM" line whatever allocator serves it, so
 * that scripts/bench.sh can verify that a mode did not change the program's
 * behaviour; lines starting with "THROUGHPUT" are figures, not compared.
 */
#ifndef TFA_BENCH_COMMON_H
#define TFA_BENCH_COMMON_H

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* splitmix64: small, fast, and good enough for choosing sizes. */
static inline uint64_t
bench_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A value in [lo, hi]. */
static inline uint64_t
bench_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
	return lo + bench_rand(state) % (hi - lo + 1);
}

/* A size in [lo, hi] (lo >= 1), uniform in its logarithm: small sizes are
 * common and large ones rare, as in real programs. */
static inline size_t
bench_log_size(uint64_t *state, size_t lo, size_t hi)
{
	int lo_bits = 0, hi_bits = 0;
	while (((size_t)1 << (lo_bits + 1)) <= lo)
		lo_bits++;
	while (((size_t)1 << hi_bits) < hi)
		hi_bits++;
	int bits = (int)bench_range(state, (uint64_t)lo_bits, (uint64_t)hi_bits);
	size_t base = (size_t)1 << bits;
	size_t size = base + (size_t)(bench_rand(state) % base);
	if (size < lo)
		size = lo;
	if (size > hi)
		size = hi;
	return size;
}

static inline uint64_t
bench_mix(uint64_t sum, uint64_t value)
{
	sum ^= value + 0x9e3779b97f4a7c15ULL + (sum << 6) + (sum >> 2);
	return sum;
}

static inline double
bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* argv[i] as a positive integer, or def when absent; exits on garbage. */
static inline long
bench_arg(int argc, char **argv, int i, long def)
{
	if (i >= argc)
		return def;
	char *end;
	errno = 0;
	long v = strtol(argv[i], &end, 10);
	if (errno != 0 || *end != '\0' || end == argv[i] || v <= 0) {
		fprintf(stderr, "%s: bad argument '%s' (a positive integer)\n", argv[0], argv[i]);
		exit(2);
	}
	return v;
}

static inline void *
bench_xmalloc(size_t size)
{
	void *p = malloc(size);
	if (p == NULL) {
		fprintf(stderr, "out of memory (%zu bytes)\n", size);
		exit(1);
	}
	return p;
}

#endif
