/* SPDX-License-Identifier: MIT */
/*
 * Shared by the CUDA test programs (test/cuda/programs/tc_*), C and nvcc's C++.
 *
 * Same rules as test/programs/tp_common.h (whose helpers it uses): no stdio,
 * a failed check prints one line on stderr and exits with status 90, and a
 * ledger mirrors every allocation call, in a lo and a hi world where the rules
 * leave a figure open.  Here the ledger is kept per CUDA device of the
 * report: cuda:0, cuda:1 (device memory: synchronous, pitch, stream-ordered,
 * VMM physical memory), cuda_host (pinned host memory) and cuda_managed.  At
 * the end the program prints one line per device, every device, zeros
 * included:
 *
 *   CUDA_LEDGER {"device":"cuda:0","num_allocs":[lo,hi],"num_frees":[lo,hi],
 *                "bytes_in_use":[lo,hi],"peak_bytes_in_use":[lo,hi],
 *                "total_bytes":[lo,hi],"largest_alloc_size":[lo,hi],
 *                "leak_bytes":[lo,hi],"leak_blocks":[lo,hi]}
 *
 * (one line; peak_bytes_in_use and largest_alloc_size are left out when
 * threads make the peak inexact).  A fork child inherits the ledger and goes
 * on with it; its lines carry "process":"child" (the parent's "parent").
 * The only open reading so far: a pitch allocation counts width*height (lo)
 * or pitch*height (hi) requested bytes.
 */
#ifndef TC_COMMON_H
#define TC_COMMON_H

#include "tp_common.h"

enum { TC_DEV0, TC_DEV1, TC_HOST, TC_MANAGED, TC_NDEV };
static const char *const tc_dev_names[TC_NDEV] __attribute__((unused)) = {
	"cuda:0", "cuda:1", "cuda_host", "cuda_managed"};

static tp_world_t tc_w[TC_NDEV][2] __attribute__((unused));
static int tc_peak_unknown __attribute__((unused));
static const char *tc_process __attribute__((unused));

/* A CUDA call that must succeed. */
#define TC_OK(call)                                                                     \
	do {                                                                            \
		int tc_r_ = (int)(call);                                                \
		TP_CHECK(tc_r_ == 0, "%s returned %d", #call, tc_r_);                   \
	} while (0)

/* A CUDA call that must return exactly `want`. */
#define TC_EXPECT(want, call)                                                           \
	do {                                                                            \
		int tc_r_ = (int)(call);                                                \
		TP_CHECK(tc_r_ == (int)(want), "%s returned %d, expected %d", #call,   \
		         tc_r_, (int)(want));                                           \
	} while (0)

static inline void
tc_alloc2(int dev, long long lo, long long hi)
{
	tp_world_alloc(&tc_w[dev][0], lo);
	tp_world_alloc(&tc_w[dev][1], hi);
}

static inline void
tc_alloc(int dev, long long n)
{
	tc_alloc2(dev, n, n);
}

static inline void
tc_free2(int dev, long long lo, long long hi)
{
	tc_w[dev][0].num_frees++;
	tc_w[dev][0].bytes_in_use -= lo;
	tc_w[dev][1].num_frees++;
	tc_w[dev][1].bytes_in_use -= hi;
}

static inline void
tc_free(int dev, long long n)
{
	tc_free2(dev, n, n);
}

/* Thread-safe versions (they make the peak inexact: call tc_threaded() first). */
static inline void
tc_threaded(void)
{
	tc_peak_unknown = 1;
}

static inline void
tc_alloc_mt(int dev, long long n)
{
	for (int i = 0; i < 2; i++) {
		TP_ATOMIC_ADD(&tc_w[dev][i].num_allocs, 1);
		TP_ATOMIC_ADD(&tc_w[dev][i].bytes_in_use, n);
		TP_ATOMIC_ADD(&tc_w[dev][i].total_bytes, n);
	}
}

static inline void
tc_free_mt(int dev, long long n)
{
	for (int i = 0; i < 2; i++) {
		TP_ATOMIC_ADD(&tc_w[dev][i].num_frees, 1);
		TP_ATOMIC_ADD(&tc_w[dev][i].bytes_in_use, -n);
	}
}

/* Prints the CUDA_LEDGER lines.  Call it last. */
static inline void
tc_print(void)
{
	char proc[64] = "";
	if (tc_process)
		snprintf(proc, sizeof(proc), "\"process\":\"%s\",", tc_process);
	for (int d = 0; d < TC_NDEV; d++) {
		const tp_world_t *lo = &tc_w[d][0], *hi = &tc_w[d][1];
#define TC_PAIR(f) lo->f, hi->f
		if (!tc_peak_unknown)
			tp_out("CUDA_LEDGER {%s\"device\":\"%s\",\"num_allocs\":[%lld,%lld],"
			       "\"num_frees\":[%lld,%lld],\"bytes_in_use\":[%lld,%lld],"
			       "\"peak_bytes_in_use\":[%lld,%lld],\"total_bytes\":[%lld,%lld],"
			       "\"largest_alloc_size\":[%lld,%lld],\"leak_bytes\":[%lld,%lld],"
			       "\"leak_blocks\":[%lld,%lld]}\n",
			       proc, tc_dev_names[d], TC_PAIR(num_allocs), TC_PAIR(num_frees),
			       TC_PAIR(bytes_in_use), TC_PAIR(peak_bytes_in_use),
			       TC_PAIR(total_bytes), TC_PAIR(largest_alloc_size),
			       TC_PAIR(bytes_in_use), lo->num_allocs - lo->num_frees,
			       hi->num_allocs - hi->num_frees);
		else
			tp_out("CUDA_LEDGER {%s\"device\":\"%s\",\"num_allocs\":[%lld,%lld],"
			       "\"num_frees\":[%lld,%lld],\"bytes_in_use\":[%lld,%lld],"
			       "\"total_bytes\":[%lld,%lld],\"leak_bytes\":[%lld,%lld],"
			       "\"leak_blocks\":[%lld,%lld]}\n",
			       proc, tc_dev_names[d], TC_PAIR(num_allocs), TC_PAIR(num_frees),
			       TC_PAIR(bytes_in_use), TC_PAIR(total_bytes), TC_PAIR(bytes_in_use),
			       lo->num_allocs - lo->num_frees, hi->num_allocs - hi->num_frees);
#undef TC_PAIR
	}
}

#endif /* TC_COMMON_H */
