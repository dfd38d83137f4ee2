/* SPDX-License-Identifier: MIT */
/*
 * Devices other than the cpu: one TrackingAllocator per device code, for the
 * memory CUDA hands out (cuda_hooks/ calls the API itself and tells the
 * tracker around each call: core/tracking_allocator.h, "memory another API
 * makes").
 *
 * Device codes (5 bits in a pointer record, core/ptr_table.h):
 *   0        cpu           the host heap (core/shim.c's tracker)
 *   1        cuda_host     pinned host memory (cuMemAllocHost, cuMemHostAlloc, cudaMallocHost, ...)
 *   2        cuda_managed  managed (unified) memory (cuMemAllocManaged, cudaMallocManaged)
 *   3 + N    cuda:N        memory of device ordinal N: cuMemAlloc, pitch,
 *                          stream-ordered, VMM physical memory; N < 29
 *
 * Every device tracker records into one table of its own (device pointers are
 * never host heap pointers, but a test double's may come from the host heap),
 * keeps statistics in one shared slot (device calls are slow anyway; the
 * peak is exact) and per-stack sites.  Trackers are made on first use: a
 * device appears in the profile when something was allocated on it.
 */
#ifndef TFA_CORE_DEVICES_H
#define TFA_CORE_DEVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ptr_table.h"
#include "core/tracking_allocator.h"

#define TFA_DEVCODE_CPU          0u
#define TFA_DEVCODE_CUDA_HOST    1u
#define TFA_DEVCODE_CUDA_MANAGED 2u
#define TFA_DEVCODE_CUDA0        3u
#define TFA_DEVCODES             32u
#define TFA_CUDA_ORDINALS        (TFA_DEVCODES - TFA_DEVCODE_CUDA0)

/* The code of CUDA device ordinal n; TFA_DEVCODES when it has none. */
static inline unsigned
tfa_devcode_cuda(int ordinal)
{
	return ordinal >= 0 && (unsigned)ordinal < TFA_CUDA_ORDINALS ? TFA_DEVCODE_CUDA0 + (unsigned)ordinal
								     : TFA_DEVCODES;
}

/*
 * The device codes other than cpu in the order profiles list them: cuda:0,
 * cuda:1, ..., then cuda_host and cuda_managed.  i from 0 to TFA_DEVCODES - 2.
 */
static inline unsigned
tfa_devcode_at(unsigned i)
{
	return i < TFA_CUDA_ORDINALS ? TFA_DEVCODE_CUDA0 + i : TFA_DEVCODE_CUDA_HOST + (i - TFA_CUDA_ORDINALS);
}

/* "cpu", "cuda_host", "cuda_managed", "cuda:N" (static strings), or "unknown". */
const char *tfa_devcode_name(unsigned code);

/* The code of such a name; -ENOENT when it names no device code. */
int tfa_devcode_parse(const char *name, unsigned *code);

/* The tracker of a device code (1 to 31), made on first use; NULL for others. */
tfa_tracking_allocator_t *tfa_device_tracker(unsigned code);

/* The tracker of a device code when it exists already (something was recorded on it). */
tfa_tracking_allocator_t *tfa_device_tracker_if_used(unsigned code);

/* The table every device tracker records into. */
tfa_ptr_table_t *tfa_devices_table(void);

/*
 * TFALLOC_CUDA_LIMIT: "ORDINAL:SIZE[,ORDINAL:SIZE...]" (sizes as
 * TFALLOC_LIMIT's, e.g. 0:8G,1:512M); also "host:SIZE" and "managed:SIZE".
 * Returns 0 or -EINVAL (nothing set).  [never allocates]
 */
int tfa_devices_set_limits(const char *spec);

/* The sites of a device's tracker (NULL: none). */
tfa_sites_t *tfa_device_sites(unsigned code);

/*
 * Memory over time per device: the series' times count from origin_ns
 * (CLOCK_MONOTONIC, the process's series start; the shim sets it at init
 * and in a fork child).  tfa_device_sample adds a point when one is due
 * (force: always), after a device's figures changed.
 */
void tfa_devices_set_time_origin(uint64_t origin_ns);
void tfa_device_sample(unsigned code, bool force);

struct tfa_pw_s;
/* Writes the TFA_REC_DEVICE_TIMELINE records of every device used, a last point first. */
void tfa_devices_write_timelines(struct tfa_pw_s *w);

/* Fork: the trackers' locks and the table. */
void tfa_devices_prefork(void);
void tfa_devices_postfork_parent(void);
void tfa_devices_postfork_child(void);

#endif /* TFA_CORE_DEVICES_H */
