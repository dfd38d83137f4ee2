/* SPDX-License-Identifier: MIT */
/*
 * The small helpers of the profile format, shared by the shim's writer and
 * the tools' reader.  Linked into libtfalloc.so: no malloc, no stdio, no
 * errno.
 */
#include "core/profile_format.h"

#include <math.h>

#include <stdbool.h>

#define CRC32_POLY 0xedb88320u /* IEEE 802.3, reflected */

enum crc32_table_state_e {
	CRC32_TABLE_EMPTY = 0,
	CRC32_TABLE_FILLING = 1,
	CRC32_TABLE_READY = 2,
};

static uint32_t crc32_table[256];
static int crc32_table_state;

static uint32_t
crc32_byte(uint32_t c)
{
	for (int k = 0; k < 8; k++)
		c = (c & 1) ? (c >> 1) ^ CRC32_POLY : c >> 1;
	return c;
}

/*
 * Fills the table once.  The first caller fills it; a caller that comes while
 * another thread is filling it does not wait (the shim may call this from a
 * signal handler or a fork child) and computes bit by bit instead.
 */
static bool
crc32_table_ready(void)
{
	int state = __atomic_load_n(&crc32_table_state, __ATOMIC_ACQUIRE);
	int expected = CRC32_TABLE_EMPTY;

	if (state == CRC32_TABLE_READY)
		return true;
	if (state != CRC32_TABLE_EMPTY
	    || !__atomic_compare_exchange_n(&crc32_table_state, &expected, CRC32_TABLE_FILLING,
	                                    false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return false;
	for (uint32_t i = 0; i < 256; i++)
		crc32_table[i] = crc32_byte(i);
	__atomic_store_n(&crc32_table_state, CRC32_TABLE_READY, __ATOMIC_RELEASE);
	return true;
}

uint32_t
tfa_crc32(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	uint32_t c = ~crc;

	if (crc32_table_ready()) {
		for (size_t i = 0; i < len; i++)
			c = crc32_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
	} else {
		for (size_t i = 0; i < len; i++)
			c = crc32_byte((c ^ p[i]) & 0xff) ^ (c >> 8);
	}
	return ~c;
}

const char *
tfa_prof_error_kind_name(uint32_t kind)
{
	switch (kind) {
	case TFA_ERR_DOUBLE_FREE:
		return "double_free";
	case TFA_ERR_INVALID_FREE:
		return "invalid_free";
	case TFA_ERR_MISMATCHED_FREE:
		return "mismatched_free";
	default:
		return "unknown";
	}
}

const char *
tfa_prof_leak_kind_name(uint32_t kind)
{
	switch (kind) {
	case TFA_LEAK_UNCLASSIFIED:
		return "unclassified";
	case TFA_LEAK_DEFINITE:
		return "definite";
	case TFA_LEAK_INDIRECT:
		return "indirect";
	case TFA_LEAK_POSSIBLE:
		return "possible";
	case TFA_LEAK_REACHABLE:
		return "reachable";
	default:
		return "unknown";
	}
}

const char *
tfa_prof_end_reason_name(uint32_t reason)
{
	switch (reason) {
	case TFA_END_RUNNING:
		return "running";
	case TFA_END_EXIT:
		return "exit";
	case TFA_END_SIGNAL:
		return "signal";
	case TFA_END_EXEC:
		return "exec";
	default:
		return "unknown";
	}
}

const char *
tfa_prof_stacks_mode_name(uint32_t mode)
{
	switch (mode) {
	case TFA_PROF_STACKS_NONE:
		return "none";
	case TFA_PROF_STACKS_FP:
		return "fp";
	case TFA_PROF_STACKS_UNWIND:
		return "unwind";
	default:
		return "unknown";
	}
}

const char *
tfa_prof_device_field_name(unsigned field)
{
	static const char *const names[TFA_DEV_FIELD_COUNT] = {
		[TFA_DEV_NUM_ALLOCS] = "num_allocs",
		[TFA_DEV_NUM_FREES] = "num_frees",
		[TFA_DEV_NUM_REALLOCS] = "num_reallocs",
		[TFA_DEV_BYTES_IN_USE] = "bytes_in_use",
		[TFA_DEV_PEAK_BYTES_IN_USE] = "peak_bytes_in_use",
		[TFA_DEV_LARGEST_ALLOC_SIZE] = "largest_alloc_size",
		[TFA_DEV_TOTAL_BYTES] = "total_bytes",
		[TFA_DEV_BYTES_LIMIT] = "bytes_limit",
		[TFA_DEV_ALLOCATED_BYTES_IN_USE] = "allocated_bytes_in_use",
		[TFA_DEV_PEAK_ALLOCATED_BYTES_IN_USE] = "peak_allocated_bytes_in_use",
		[TFA_DEV_TOTAL_ALLOCATED_BYTES] = "total_allocated_bytes",
		[TFA_DEV_SHIM_OVERHEAD_BYTES] = "shim_overhead_bytes",
		[TFA_DEV_PEAK_BLOCKS_IN_USE] = "peak_blocks_in_use",
		[TFA_DEV_LEAK_SCAN_BYTES] = "leak_scan_bytes",
	};

	return field < TFA_DEV_FIELD_COUNT ? names[field] : "unknown";
}

const char *
tfa_prof_error_count_name(unsigned field)
{
	static const char *const names[TFA_ERRC_FIELD_COUNT] = {
		[TFA_ERRC_DOUBLE_FREE] = "double_free",
		[TFA_ERRC_INVALID_FREE] = "invalid_free",
		[TFA_ERRC_MISMATCHED_FREE] = "mismatched_free",
		[TFA_ERRC_NOT_RECORDED] = "not_recorded",
	};

	return field < TFA_ERRC_FIELD_COUNT ? names[field] : "unknown";
}

const char *
tfa_prof_res_device_field_name(unsigned field)
{
	static const char *const names[TFA_RESD_FIELD_COUNT] = {
		[TFA_RESD_NUM_ALLOCS] = "num_allocs",
		[TFA_RESD_NUM_FREES] = "num_frees",
		[TFA_RESD_BYTES_IN_USE] = "bytes_in_use",
		[TFA_RESD_PEAK_BYTES_IN_USE] = "peak_bytes_in_use",
		[TFA_RESD_LARGEST_ALLOC_SIZE] = "largest_alloc_size",
		[TFA_RESD_TOTAL_BYTES] = "total_bytes",
		[TFA_RESD_ALLOCATED_BYTES_IN_USE] = "allocated_bytes_in_use",
		[TFA_RESD_PEAK_ALLOCATED_BYTES_IN_USE] = "peak_allocated_bytes_in_use",
		[TFA_RESD_TOTAL_ALLOCATED_BYTES] = "total_allocated_bytes",
	};

	return field < TFA_RESD_FIELD_COUNT ? names[field] : "unknown";
}

const char *
tfa_prof_resource_state_name(uint32_t state)
{
	switch (state) {
	case 1: return "live";
	case 2: return "deleted";
	default: return "unknown";
	}
}

double
tfa_sample_weight(uint64_t size, uint64_t interval)
{
	if (interval == 0)
		return 1.0;
	double p = -expm1(-(double)(size == 0 ? 1 : size) / (double)interval);
	return p > 0 ? 1.0 / p : 1.0;
}
