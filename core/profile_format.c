/* SPDX-License-Identifier: MIT */
/*
 * The small helpers of the profile format, shared by the shim's writer and
 * the tools' reader.  Linked into libtfalloc.so: no malloc, no stdio, no
 * errno.
 */
#include "core/profile_format.h"

#include <math.h>

#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <emmintrin.h>
#include <wmmintrin.h>
#define CRC32_CLMUL 1
#endif

#define CRC32_POLY 0xedb88320u /* IEEE 802.3, reflected */

enum crc32_table_state_e {
	CRC32_TABLE_EMPTY = 0,
	CRC32_TABLE_FILLING = 1,
	CRC32_TABLE_READY = 2,
};

/*
 * Slicing-by-8: crc32_table[0] is the byte-at-a-time table; crc32_table[k][b]
 * is the CRC register after byte b followed by k zero bytes, so that eight
 * lookups, one per byte of a 64-bit word, advance the CRC by 8 bytes at once
 * (8 KiB in .bss, the shim's own: no malloc).
 */
static uint32_t crc32_table[8][256];
static int crc32_table_state;
/* The CPU has PCLMULQDQ: set before the tables are published, read after. */
static bool crc32_have_clmul;

static uint32_t
crc32_byte(uint32_t c)
{
	for (int k = 0; k < 8; k++)
		c = (c & 1) ? (c >> 1) ^ CRC32_POLY : c >> 1;
	return c;
}

/*
 * Fills the tables once.  The first caller fills them; a caller that comes
 * while another thread is filling them does not wait (the shim may call this
 * from a signal handler or a fork child) and computes bit by bit instead.
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
		crc32_table[0][i] = crc32_byte(i);
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = crc32_table[0][i];

		for (int k = 1; k < 8; k++) {
			c = crc32_table[0][c & 0xff] ^ (c >> 8);
			crc32_table[k][i] = c;
		}
	}
#ifdef CRC32_CLMUL
	{
		unsigned int a, b, c, d;

		crc32_have_clmul = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_PCLMUL);
	}
#endif
	__atomic_store_n(&crc32_table_state, CRC32_TABLE_READY, __ATOMIC_RELEASE);
	return true;
}

/* The register after the 8 bytes of w (read little-endian): one lookup per byte. */
static inline uint32_t
crc32_word(uint32_t c, uint64_t w)
{
	w ^= c;
	return crc32_table[7][w & 0xff] ^ crc32_table[6][(w >> 8) & 0xff]
	       ^ crc32_table[5][(w >> 16) & 0xff] ^ crc32_table[4][(w >> 24) & 0xff]
	       ^ crc32_table[3][(w >> 32) & 0xff] ^ crc32_table[2][(w >> 40) & 0xff]
	       ^ crc32_table[1][(w >> 48) & 0xff] ^ crc32_table[0][w >> 56];
}

#ifdef CRC32_CLMUL
/*
 * Folding with carry-less multiplication (Intel, "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ Instruction", 2009; the bit-reflected
 * constants of its appendix, as Chromium's zlib uses them): four 16-byte
 * lanes folded 64 bytes a step, folded into one, then 16 bytes a step, then
 * reduced to 64 and by Barrett to 32 bits.  c is the register (not
 * inverted); len is at least 64 and a multiple of 16.  SSE2 and PCLMULQDQ
 * only, loads unaligned.
 */
__attribute__((target("sse2,pclmul"))) static uint32_t
crc32_clmul(uint32_t c, const unsigned char *p, size_t len)
{
	const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
	const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
	const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
	const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
	const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
	__m128i x1, x2, x3, x4, t1, t2, t3, t4;

	x1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)c));
	x2 = _mm_loadu_si128((const __m128i *)(p + 16));
	x3 = _mm_loadu_si128((const __m128i *)(p + 32));
	x4 = _mm_loadu_si128((const __m128i *)(p + 48));
	for (p += 64, len -= 64; len >= 64; p += 64, len -= 64) {
		t1 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
		t2 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
		t3 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
		t4 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
		x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
		x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
		x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
		x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
		x1 = _mm_xor_si128(_mm_xor_si128(x1, t1), _mm_loadu_si128((const __m128i *)p));
		x2 = _mm_xor_si128(_mm_xor_si128(x2, t2), _mm_loadu_si128((const __m128i *)(p + 16)));
		x3 = _mm_xor_si128(_mm_xor_si128(x3, t3), _mm_loadu_si128((const __m128i *)(p + 32)));
		x4 = _mm_xor_si128(_mm_xor_si128(x4, t4), _mm_loadu_si128((const __m128i *)(p + 48)));
	}
	/* Four lanes into one, then 16 bytes a step. */
	t1 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
	x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), t1);
	t1 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
	x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), t1);
	t1 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
	x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), t1);
	for (; len >= 16; p += 16, len -= 16) {
		t1 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
		x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11),
		                   _mm_loadu_si128((const __m128i *)p));
		x1 = _mm_xor_si128(x1, t1);
	}
	/* 128 bits to 64. */
	x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
	x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
	x2 = _mm_srli_si128(x1, 4);
	x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5k0, 0x00);
	x1 = _mm_xor_si128(x1, x2);
	/* Barrett reduction to 32 bits. */
	x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
	x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, mask32), poly, 0x00);
	x1 = _mm_xor_si128(x1, x2);
	return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(x1, 4));
}
#endif

uint32_t
tfa_crc32(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	uint32_t c = ~crc;

	if (!crc32_table_ready()) {
		for (size_t i = 0; i < len; i++)
			c = crc32_byte((c ^ p[i]) & 0xff) ^ (c >> 8);
		return ~c;
	}
#ifdef CRC32_CLMUL
	/* Folding pays from about 64 bytes on: the profile's big records (64 KiB). */
	if (len >= 64 && crc32_have_clmul) {
		size_t n = len & ~(size_t)15;

		c = crc32_clmul(c, p, n);
		p += n;
		len -= n;
	}
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* 8 bytes a step, any alignment (memcpy: one unaligned load on x86-64). */
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t w;

		memcpy(&w, p, sizeof(w));
		c = crc32_word(c, w);
	}
#endif
	for (; len > 0; p++, len--)
		c = crc32_table[0][(c ^ *p) & 0xff] ^ (c >> 8);
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
