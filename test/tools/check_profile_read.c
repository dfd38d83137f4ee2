/* SPDX-License-Identifier: MIT */
/*
 * core/profile_read.h and the helpers of core/profile_format.h: the reader
 * on valid, truncated and corrupt profiles built by a small encoder of this
 * file (independent of the shim's writer, with its own bitwise CRC-32), the
 * exact messages it gives, and that no prefix or mutation of a valid file
 * makes it read outside its buffer (run this suite under ASan to see it).
 */
#include "core/profile_read.h"

#include <check.h>
#include <math.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"

/* ---- the encoder ---------------------------------------------------------------------------- */

struct buf {
	uint8_t *p;
	size_t len, cap;
	size_t rec; /* start of the open record */
	uint64_t nrecords;
};

static void
put(struct buf *b, const void *data, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void
put_u32(struct buf *b, uint32_t v)
{
	uint8_t le[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };

	put(b, le, 4);
}

static void
put_u64(struct buf *b, uint64_t v)
{
	put_u32(b, (uint32_t)v);
	put_u32(b, (uint32_t)(v >> 32));
}

static void
put_str(struct buf *b, const char *s)
{
	put_u32(b, (uint32_t)strlen(s));
	put(b, s, strlen(s));
}

static void
put_counts(struct buf *b, uint32_t n, const uint64_t *v)
{
	put_u32(b, n);
	for (uint32_t i = 0; i < n; i++)
		put_u64(b, v[i]);
}

/* Bitwise CRC-32 (IEEE, reflected), independent of tfa_crc32's table. */
static uint32_t
test_crc32(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;

	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
	}
	return ~c;
}

static void
set_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void
header(struct buf *b, uint32_t version, uint32_t size)
{
	put(b, "TFAPROF", 8);
	put_u32(b, version);
	put_u32(b, size);
}

static void
begin(struct buf *b, uint32_t type)
{
	b->rec = b->len;
	put_u32(b, type);
	put_u32(b, 0);
}

static void
end(struct buf *b)
{
	set_u32(b->p + b->rec + 4, (uint32_t)(b->len - b->rec - 8));
	put_u32(b, test_crc32(b->p + b->rec, b->len - b->rec));
	b->nrecords++;
}

static void
rec_process(struct buf *b, uint32_t pid, const char *command)
{
	begin(b, TFA_REC_PROCESS);
	put_u32(b, pid);
	put_u32(b, 4321);
	put_u64(b, 1700000000123456789ull);
	put_u64(b, 1700000001623456789ull);
	put_u32(b, TFA_END_EXIT);
	put_u32(b, (uint32_t)-3);
	put_u32(b, TFA_PROC_FLAG_FORKED);
	put_str(b, command);
	put_str(b, "/usr/bin/prog");
	put_str(b, "prog");
	put_str(b, "0.1.0");
	end(b);
}

static void
rec_device(struct buf *b, const char *name, uint32_t n)
{
	uint64_t v[TFA_DEV_FIELD_COUNT + 3];

	for (size_t i = 0; i < TFA_ARRAY_SIZE(v); i++)
		v[i] = 1000 + i;
	v[TFA_DEV_TOTAL_BYTES] = 0xfedcba9876543210ull; /* needs all 64 bits */
	begin(b, TFA_REC_DEVICE);
	put_str(b, name);
	put_str(b, "jemalloc");
	put_counts(b, n, v);
	end(b);
}

static void
rec_leak(struct buf *b, uint64_t bytes, uint64_t blocks)
{
	uint64_t v[] = { bytes, blocks, bytes + 16, 0x7f0000001000ull };

	begin(b, TFA_REC_LEAK);
	put_str(b, "cpu");
	put_u32(b, 7);
	put_u32(b, TFA_LEAK_DEFINITE);
	put_counts(b, 4, v);
	end(b);
}

static void
rec_error(struct buf *b, uint32_t kind, uint64_t address, const char *detail)
{
	begin(b, TFA_REC_ERROR);
	put_u32(b, kind);
	put_u64(b, address);
	put_u32(b, 11);
	put_u32(b, 12);
	put_u64(b, 2);
	put_str(b, detail);
	end(b);
}

static void
rec_error_totals(struct buf *b)
{
	uint64_t v[] = { 2, 3, 4, 5 };

	begin(b, TFA_REC_ERROR_TOTALS);
	put_counts(b, 4, v);
	end(b);
}

static void
rec_end(struct buf *b, uint32_t complete)
{
	uint64_t n = b->nrecords;

	begin(b, TFA_REC_END);
	put_u64(b, n);
	put_u32(b, complete);
	end(b);
}

/* A complete profile with one of every record. */
static struct buf
valid_profile(void)
{
	struct buf b = { 0 };

	header(&b, 1, 16);
	rec_process(&b, 1234, "prog --flag arg");
	rec_device(&b, "cpu", TFA_DEV_FIELD_COUNT);
	rec_leak(&b, 100, 3);
	rec_leak(&b, 28, 1);
	rec_error(&b, TFA_ERR_DOUBLE_FREE, 0xdeadbeef, "freed twice");
	rec_error(&b, TFA_ERR_INVALID_FREE, 0x1000, "");
	rec_error_totals(&b);
	rec_end(&b, 1);
	return b;
}

/* Parses len bytes of a private copy (so that ASan sees any overread). */
static int
parse(const uint8_t *data, size_t len, tfa_profile_t *p, char *err, size_t errlen)
{
	uint8_t *copy = malloc(len ? len : 1);
	int rc;

	ck_assert_ptr_nonnull(copy);
	if (len)
		memcpy(copy, data, len);
	rc = tfa_profile_parse(copy, len, "t.prof", p, err, errlen);
	free(copy);
	return rc;
}

/* Expects a failure with exactly the message fmt. */
static __attribute__((format(printf, 3, 4))) void
expect_error(const struct buf *b, size_t len, const char *fmt, ...)
{
	char want[512], err[512];
	tfa_profile_t p;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	memset(&p, 0xa5, sizeof(p));
	ck_assert_int_eq(parse(b->p, len, &p, err, sizeof(err)), -1);
	ck_assert_str_eq(err, want);
	ck_assert_ptr_null(p.devices); /* zeroed on failure */
	ck_assert_ptr_null(p.path);
}

/* ---- tfa_crc32 and the names ---------------------------------------------------------------- */

START_TEST(test_profile_crc32_known_values)
{
	static const char check[] = "123456789";
	uint8_t big[5000];

	ck_assert_uint_eq(tfa_crc32(0, "", 0), 0);
	ck_assert_uint_eq(tfa_crc32(0, check, 9), 0xcbf43926u);
	ck_assert_uint_eq(tfa_crc32(0, "a", 1), 0xe8b7be43u);
	ck_assert_uint_eq(tfa_crc32(tfa_crc32(0, check, 4), check + 4, 5), 0xcbf43926u);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 131 + 7);
	ck_assert_uint_eq(tfa_crc32(0, big, sizeof(big)), test_crc32(big, sizeof(big)));
}
END_TEST

/* Bitwise CRC-32 continuing from crc (zlib's convention: 0 to start), one bit a step. */
static uint32_t
ref_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
	uint32_t c = ~crc;

	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0xedb88320u : c >> 1;
	}
	return ~c;
}

static void
fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed | 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 32);
	}
}

/*
 * tfa_crc32 reads 8 bytes a step: every length 0..300 at every start offset
 * 0..7 against the bitwise reference, each in a block of its own that ends
 * where the data ends (ASan sees a read past it), from 0 and from another
 * start value; a buffer split at every point gives the CRC of the whole.
 */
START_TEST(test_profile_crc32_lengths_offsets)
{
	enum { MAXLEN = 300 };
	static const char check[] = "123456789";
	uint8_t src[MAXLEN + 8];

	ck_assert_uint_eq(tfa_crc32(0, check, 9), 0xcbf43926u);
	ck_assert_uint_eq(ref_crc32(0, (const uint8_t *)check, 9), 0xcbf43926u);
	fill_random(src, sizeof(src), 0x9e3779b97f4a7c15u);
	for (size_t off = 0; off < 8; off++) {
		for (size_t len = 0; len <= MAXLEN; len++) {
			uint8_t *block = malloc(off + len + 1);

			ck_assert_ptr_nonnull(block);
			memcpy(block + off, src + off, len);
			ck_assert_msg(tfa_crc32(0, block + off, len) == ref_crc32(0, src + off, len),
			              "offset %zu length %zu", off, len);
			ck_assert_msg(tfa_crc32(0x12345678u, block + off, len)
			                  == ref_crc32(0x12345678u, src + off, len),
			              "offset %zu length %zu from 0x12345678", off, len);
			free(block);
		}
	}
	for (size_t off = 0; off < 8; off++) {
		const uint8_t *b = src + off;
		uint32_t whole = ref_crc32(0, b, MAXLEN);

		ck_assert_uint_eq(tfa_crc32(0, b, MAXLEN), whole);
		for (size_t cut = 0; cut <= MAXLEN; cut++)
			ck_assert_msg(tfa_crc32(tfa_crc32(0, b, cut), b + cut, MAXLEN - cut) == whole,
			              "offset %zu split at %zu", off, cut);
		for (size_t cut = 0; cut + 13 <= MAXLEN; cut += 5) {
			uint32_t c = tfa_crc32(0, b, cut);

			c = tfa_crc32(c, b + cut, 13);
			ck_assert_msg(tfa_crc32(c, b + cut + 13, MAXLEN - cut - 13) == whole,
			              "offset %zu split at %zu and %zu", off, cut, cut + 13);
		}
	}
}
END_TEST

/* A buffer of 1 MiB and a bit, the size of the profile's big records and more. */
START_TEST(test_profile_crc32_large)
{
	size_t n = (1u << 20) + 13;
	uint8_t *b = malloc(n);

	ck_assert_ptr_nonnull(b);
	fill_random(b, n, 42);
	ck_assert_uint_eq(tfa_crc32(0, b, n), ref_crc32(0, b, n));
	ck_assert_uint_eq(tfa_crc32(0, b + 3, n - 3), ref_crc32(0, b + 3, n - 3));
	free(b);
}
END_TEST

/*
 * Threads that meet tfa_crc32 first all at once (each test runs in a fresh
 * child: the tables are empty): those that come while one fills the tables
 * compute bit by bit, and all of them get the same result.
 */
enum { CRC_RACE_THREADS = 4, CRC_RACE_LEN = 1000 };
static pthread_barrier_t crc_race_barrier;
static uint8_t crc_race_buf[CRC_RACE_LEN];

static void *
crc_race_thread(void *arg)
{
	uint32_t *out = arg;

	pthread_barrier_wait(&crc_race_barrier);
	out[0] = tfa_crc32(0, crc_race_buf + 1, CRC_RACE_LEN - 1);
	out[1] = tfa_crc32(0, crc_race_buf + 1, CRC_RACE_LEN - 1);
	return NULL;
}

START_TEST(test_profile_crc32_first_use_race)
{
	pthread_t t[CRC_RACE_THREADS];
	uint32_t got[CRC_RACE_THREADS][2];
	uint32_t want;

	fill_random(crc_race_buf, sizeof(crc_race_buf), 7);
	want = ref_crc32(0, crc_race_buf + 1, CRC_RACE_LEN - 1);
	ck_assert_int_eq(pthread_barrier_init(&crc_race_barrier, NULL, CRC_RACE_THREADS), 0);
	for (int i = 0; i < CRC_RACE_THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, crc_race_thread, got[i]), 0);
	for (int i = 0; i < CRC_RACE_THREADS; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_uint_eq(got[i][0], want);
		ck_assert_uint_eq(got[i][1], want);
	}
	pthread_barrier_destroy(&crc_race_barrier);
}
END_TEST

START_TEST(test_profile_names)
{
	ck_assert_str_eq(tfa_prof_error_kind_name(TFA_ERR_DOUBLE_FREE), "double_free");
	ck_assert_str_eq(tfa_prof_error_kind_name(TFA_ERR_INVALID_FREE), "invalid_free");
	ck_assert_str_eq(tfa_prof_error_kind_name(TFA_ERR_MISMATCHED_FREE), "mismatched_free");
	ck_assert_str_eq(tfa_prof_error_kind_name(0), "unknown");
	ck_assert_str_eq(tfa_prof_error_kind_name(99), "unknown");
	ck_assert_str_eq(tfa_prof_leak_kind_name(TFA_LEAK_UNCLASSIFIED), "unclassified");
	ck_assert_str_eq(tfa_prof_leak_kind_name(TFA_LEAK_DEFINITE), "definite");
	ck_assert_str_eq(tfa_prof_leak_kind_name(TFA_LEAK_INDIRECT), "indirect");
	ck_assert_str_eq(tfa_prof_leak_kind_name(TFA_LEAK_POSSIBLE), "possible");
	ck_assert_str_eq(tfa_prof_leak_kind_name(TFA_LEAK_REACHABLE), "reachable");
	ck_assert_str_eq(tfa_prof_leak_kind_name(5), "unknown");
	ck_assert_str_eq(tfa_prof_end_reason_name(TFA_END_RUNNING), "running");
	ck_assert_str_eq(tfa_prof_end_reason_name(TFA_END_EXIT), "exit");
	ck_assert_str_eq(tfa_prof_end_reason_name(TFA_END_SIGNAL), "signal");
	ck_assert_str_eq(tfa_prof_end_reason_name(TFA_END_EXEC), "exec");
	ck_assert_str_eq(tfa_prof_end_reason_name(TFA_END_UNKNOWN), "unknown");
	ck_assert_str_eq(tfa_prof_end_reason_name(77), "unknown");
}
END_TEST

/* ---- valid files ---------------------------------------------------------------------------- */

START_TEST(test_profile_read_valid)
{
	struct buf b = valid_profile();
	tfa_profile_t p;
	char err[256] = "untouched";

	ck_assert_int_eq(parse(b.p, b.len, &p, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
	ck_assert_str_eq(p.path, "t.prof");
	ck_assert_uint_eq(p.version, 1);
	ck_assert(p.has_process);
	ck_assert_uint_eq(p.pid, 1234);
	ck_assert_uint_eq(p.ppid, 4321);
	ck_assert_uint_eq(p.start_ns, 1700000000123456789ull);
	ck_assert_uint_eq(p.end_ns, 1700000001623456789ull);
	ck_assert_uint_eq(p.end_reason, TFA_END_EXIT);
	ck_assert_int_eq(p.exit_code, -3);
	ck_assert_uint_eq(p.flags, TFA_PROC_FLAG_FORKED);
	ck_assert_str_eq(p.command, "prog --flag arg");
	ck_assert_str_eq(p.exe, "/usr/bin/prog");
	ck_assert_str_eq(p.comm, "prog");
	ck_assert_str_eq(p.tfalloc_version, "0.1.0");

	ck_assert_uint_eq(p.ndevices, 1);
	ck_assert_str_eq(p.devices[0].name, "cpu");
	ck_assert_str_eq(p.devices[0].allocator, "jemalloc");
	for (size_t i = 0; i < TFA_DEV_FIELD_COUNT; i++)
		if (i != TFA_DEV_TOTAL_BYTES)
			ck_assert_uint_eq(p.devices[0].f[i], 1000 + i);
	ck_assert_uint_eq(p.devices[0].f[TFA_DEV_TOTAL_BYTES], 0xfedcba9876543210ull);

	ck_assert_uint_eq(p.nleaks, 2);
	ck_assert_str_eq(p.leaks[0].device, "cpu");
	ck_assert_uint_eq(p.leaks[0].stack_id, 7);
	ck_assert_uint_eq(p.leaks[0].kind, TFA_LEAK_DEFINITE);
	ck_assert_uint_eq(p.leaks[0].f[TFA_LEAKF_BYTES], 100);
	ck_assert_uint_eq(p.leaks[0].f[TFA_LEAKF_BLOCKS], 3);
	ck_assert_uint_eq(p.leaks[0].f[TFA_LEAKF_ALLOCATED_BYTES], 116);
	ck_assert_uint_eq(p.leaks[0].f[TFA_LEAKF_SAMPLE_ADDRESS], 0x7f0000001000ull);
	ck_assert_uint_eq(p.leaks[1].f[TFA_LEAKF_BYTES], 28);
	ck_assert_uint_eq(p.leaks[1].f[TFA_LEAKF_BLOCKS], 1);

	ck_assert_uint_eq(p.nerrors, 2);
	ck_assert_uint_eq(p.errors[0].kind, TFA_ERR_DOUBLE_FREE);
	ck_assert_uint_eq(p.errors[0].address, 0xdeadbeef);
	ck_assert_uint_eq(p.errors[0].stack_id, 11);
	ck_assert_uint_eq(p.errors[0].alloc_stack_id, 12);
	ck_assert_uint_eq(p.errors[0].count, 2);
	ck_assert_str_eq(p.errors[0].detail, "freed twice");
	ck_assert_uint_eq(p.errors[1].kind, TFA_ERR_INVALID_FREE);
	ck_assert_str_eq(p.errors[1].detail, "");

	ck_assert(p.has_error_totals);
	ck_assert_uint_eq(p.error_totals[TFA_ERRC_DOUBLE_FREE], 2);
	ck_assert_uint_eq(p.error_totals[TFA_ERRC_INVALID_FREE], 3);
	ck_assert_uint_eq(p.error_totals[TFA_ERRC_MISMATCHED_FREE], 4);
	ck_assert_uint_eq(p.error_totals[TFA_ERRC_NOT_RECORDED], 5);
	ck_assert(p.has_end);
	ck_assert(p.complete);
	ck_assert_uint_eq(p.nrecords, 7);

	tfa_profile_free(&p);
	ck_assert_ptr_null(p.devices);
	tfa_profile_free(&p); /* a zeroed profile: no-op */
	tfa_profile_free(NULL);
	free(b.p);
}
END_TEST

START_TEST(test_profile_read_snapshot)
{
	struct buf b = { 0 };
	tfa_profile_t p;
	char err[256];

	header(&b, 1, 16);
	rec_process(&b, 5, "");
	rec_end(&b, 0);
	ck_assert_int_eq(parse(b.p, b.len, &p, err, sizeof(err)), 0);
	ck_assert(!p.complete);
	ck_assert(p.has_end);
	ck_assert_str_eq(p.command, "");
	ck_assert_uint_eq(p.ndevices, 0);
	ck_assert_uint_eq(p.nleaks, 0);
	ck_assert_uint_eq(p.nerrors, 0);
	ck_assert(!p.has_error_totals);
	ck_assert_uint_eq(p.error_totals[TFA_ERRC_DOUBLE_FREE], 0);
	tfa_profile_free(&p);
	free(b.p);
}
END_TEST

/* Fewer counts than known read as 0, more are skipped; unknown records and extra payload are skipped. */
START_TEST(test_profile_read_forward_compatible)
{
	struct buf b = { 0 };
	tfa_profile_t p;
	char err[256];
	uint64_t v[2] = { 9, 8 };

	header(&b, 1, 24); /* a longer header: its tail is skipped */
	put_u64(&b, 0x1122334455667788ull);
	begin(&b, 99); /* unknown type */
	put_str(&b, "from the future");
	end(&b);
	rec_process(&b, 5, "x");
	rec_device(&b, "cpu", 3);                          /* fewer */
	rec_device(&b, "cuda:0", TFA_DEV_FIELD_COUNT + 3); /* more */
	begin(&b, TFA_REC_ERROR_TOTALS);
	put_counts(&b, 2, v);
	put_u64(&b, 77); /* a field appended by a later writer */
	end(&b);
	begin(&b, 1000);
	end(&b); /* empty unknown record */
	rec_end(&b, 1);

	ck_assert_int_eq(parse(b.p, b.len, &p, err, sizeof(err)), 0);
	ck_assert_uint_eq(p.ndevices, 2);
	ck_assert_uint_eq(p.devices[0].f[0], 1000);
	ck_assert_uint_eq(p.devices[0].f[2], 1002);
	for (size_t i = 3; i < TFA_DEV_FIELD_COUNT; i++)
		ck_assert_uint_eq(p.devices[0].f[i], 0);
	ck_assert_str_eq(p.devices[1].name, "cuda:0");
	ck_assert_uint_eq(p.devices[1].f[TFA_DEV_SHIM_OVERHEAD_BYTES],
	                  1000 + TFA_DEV_SHIM_OVERHEAD_BYTES);
	ck_assert_uint_eq(p.error_totals[0], 9);
	ck_assert_uint_eq(p.error_totals[1], 8);
	ck_assert_uint_eq(p.error_totals[2], 0);
	ck_assert_uint_eq(p.error_totals[3], 0);
	ck_assert_uint_eq(p.nrecords, 6); /* the unknown ones count too */
	tfa_profile_free(&p);
	free(b.p);
}
END_TEST

/* LEB128 and zigzag, by the format's words (not the writer's code). */
static void
put_uleb(struct buf *b, uint64_t v)
{
	for (;;) {
		uint8_t x = v & 0x7f;
		v >>= 7;
		if (v != 0)
			x |= 0x80;
		put(b, &x, 1);
		if (v == 0)
			return;
	}
}

static void
put_zigzag(struct buf *b, uint64_t pc, uint64_t from)
{
	int64_t d = (int64_t)(pc - from);

	put_uleb(b, d >= 0 ? (uint64_t)d * 2 : (uint64_t)(-(d + 1)) * 2 + 1);
}

/* Node no, pc under parent (0: none) whose pc is parent_pc. */
static void
put_node(struct buf *b, uint32_t no, uint64_t pc, uint32_t parent, uint64_t parent_pc)
{
	put_uleb(b, no - parent);
	put_zigzag(b, pc, parent_pc);
}

static void
expect_stack(const tfa_profile_t *p, uint32_t id, const uint64_t *want, uint32_t n)
{
	uint32_t depth;
	const uint64_t *pcs = tfa_profile_stack(p, id, &depth);

	ck_assert_ptr_nonnull(pcs);
	ck_assert_uint_eq(depth, n);
	ck_assert_mem_eq(pcs, want, n * sizeof(*want));
}

#define ROOT_PC 0x7f0000001000ull

/* Nodes 1..4 over two records: 1 an outermost frame, 2 and 4 under it, 3 under 2. */
static void
rec_nodes(struct buf *b)
{
	begin(b, TFA_REC_STACK_NODES);
	put_u32(b, 1);
	put_node(b, 1, ROOT_PC, 0, 0);
	put_node(b, 2, 0x401000, 1, ROOT_PC);
	end(b);
	begin(b, TFA_REC_STACK_NODES);
	put_u32(b, 3);
	put_node(b, 3, 0x401200, 2, 0x401000);
	put_node(b, 4, 0x402000, 1, ROOT_PC);
	end(b);
}

/*
 * The stack tree's records: stacks rebuilt from their innermost frame and
 * node chain, ids counting on across records, beside a whole-stack record
 * of an older writer.
 */
START_TEST(test_profile_read_stack_tree)
{
	struct buf b = { 0 };
	tfa_profile_t p;
	char err[256];

	header(&b, 1, 16);
	rec_process(&b, 7, "x");
	rec_nodes(&b);
	begin(&b, TFA_REC_STACK_LEAVES);
	put_u32(&b, 1);
	put_uleb(&b, 3);
	put_zigzag(&b, 0x500000, 0x401200);
	put_uleb(&b, 0); /* one frame */
	put_zigzag(&b, 0x600000, 0);
	end(&b);
	begin(&b, TFA_REC_STACK_LEAVES);
	put_u32(&b, 3);
	put_uleb(&b, 4);
	put_zigzag(&b, UINT64_MAX, 0x402000); /* wraps */
	end(&b);
	begin(&b, TFA_REC_STACKS);
	put_u32(&b, 9);
	put_u32(&b, 2);
	put_u64(&b, 0x10);
	put_u64(&b, 0x20);
	end(&b);
	rec_end(&b, 1);

	ck_assert_int_eq(parse(b.p, b.len, &p, err, sizeof(err)), 0);
	ck_assert_uint_eq(p.nstacks, 4);
	expect_stack(&p, 1, (const uint64_t[]){ 0x500000, 0x401200, 0x401000, ROOT_PC }, 4);
	expect_stack(&p, 2, (const uint64_t[]){ 0x600000 }, 1);
	expect_stack(&p, 3, (const uint64_t[]){ UINT64_MAX, 0x402000, ROOT_PC }, 3);
	expect_stack(&p, 9, (const uint64_t[]){ 0x10, 0x20 }, 2);
	uint32_t depth;
	ck_assert_ptr_null(tfa_profile_stack(&p, 4, &depth));
	tfa_profile_free(&p);
	free(b.p);
}
END_TEST

/* Sites packed many to a record: ids by their steps, fields fewer or more than the reader knows. */
START_TEST(test_profile_read_sites)
{
	struct buf b = { 0 };
	tfa_profile_t p;
	char err[256];

	header(&b, 1, 16);
	rec_process(&b, 7, "x");
	begin(&b, TFA_REC_SITES);
	put_str(&b, "cpu");
	put_uleb(&b, 0); /* stack 0 */
	put_uleb(&b, TFA_SITEF_FIELD_COUNT);
	for (unsigned i = 0; i < TFA_SITEF_FIELD_COUNT; i++)
		put_uleb(&b, 100 + i);
	put_uleb(&b, 300); /* stack 300: two fields */
	put_uleb(&b, 2);
	put_uleb(&b, UINT64_MAX);
	put_uleb(&b, 7);
	end(&b);
	begin(&b, TFA_REC_SITES);
	put_str(&b, "cuda:0");
	put_uleb(&b, 5); /* stack 5: a field of a later writer */
	put_uleb(&b, TFA_SITEF_FIELD_COUNT + 1);
	for (unsigned i = 0; i <= TFA_SITEF_FIELD_COUNT; i++)
		put_uleb(&b, (uint64_t)1 << (7 * i));
	end(&b);
	rec_end(&b, 1);

	ck_assert_int_eq(parse(b.p, b.len, &p, err, sizeof(err)), 0);
	ck_assert_uint_eq(p.nsites, 3);
	ck_assert_str_eq(p.sites[0].device, "cpu");
	ck_assert_uint_eq(p.sites[0].stack_id, 0);
	for (unsigned i = 0; i < TFA_SITEF_FIELD_COUNT; i++)
		ck_assert_uint_eq(p.sites[0].f[i], 100 + i);
	ck_assert_str_eq(p.sites[1].device, "cpu");
	ck_assert_uint_eq(p.sites[1].stack_id, 300);
	ck_assert_uint_eq(p.sites[1].f[0], UINT64_MAX);
	ck_assert_uint_eq(p.sites[1].f[1], 7);
	for (unsigned i = 2; i < TFA_SITEF_FIELD_COUNT; i++)
		ck_assert_uint_eq(p.sites[1].f[i], 0);
	ck_assert_str_eq(p.sites[2].device, "cuda:0");
	ck_assert_uint_eq(p.sites[2].stack_id, 5);
	for (unsigned i = 0; i < TFA_SITEF_FIELD_COUNT; i++)
		ck_assert_uint_eq(p.sites[2].f[i], (uint64_t)1 << (7 * i));
	tfa_profile_free(&p);
	free(b.p);

	/* A site twice in a record; a stack id past 32 bits; figures cut short. */
	for (int kind = 0; kind < 3; kind++) {
		size_t at;
		b = (struct buf){ 0 };
		header(&b, 1, 16);
		rec_process(&b, 7, "x");
		begin(&b, TFA_REC_SITES);
		put_str(&b, "cpu");
		put_uleb(&b, 9);
		put_uleb(&b, 0);
		at = b.len;
		put_uleb(&b, kind == 1 ? UINT32_MAX : kind == 2 ? 1 : 0);
		put_uleb(&b, kind == 2 ? 3 : 0);
		if (kind == 2)
			put_uleb(&b, 1);
		end(&b);
		rec_end(&b, 1);
		if (kind == 0)
			expect_error(&b, b.len, "t.prof: offset %zu: sites record: stack id 9 twice", at);
		else if (kind == 1)
			expect_error(&b, b.len, "t.prof: offset %zu: sites record: stack id 4294967304 (0 to 4294967295)",
			             at);
		else
			expect_error(&b, b.len, "t.prof: offset %zu: sites record: field 'counts' overruns its record",
			             at + 3);
		free(b.p);
	}
}
END_TEST

/* A profile of a process record, the nodes of rec_nodes, then what the caller adds. */
static struct buf
tree_profile(void)
{
	struct buf b = { 0 };

	header(&b, 1, 16);
	rec_process(&b, 7, "x");
	rec_nodes(&b);
	return b;
}

/*
 * tree_profile, then a record of type whose first number is first and whose
 * one entry is (ref, delta), then the end: *at is the entry's offset.
 */
static struct buf
tree_with_entry(uint32_t type, uint32_t first, uint64_t ref, uint64_t delta, size_t *at)
{
	struct buf b = tree_profile();

	begin(&b, type);
	put_u32(&b, first);
	*at = b.len;
	put_uleb(&b, ref);
	put_uleb(&b, delta);
	end(&b);
	rec_end(&b, 1);
	return b;
}

START_TEST(test_profile_read_stack_tree_broken)
{
	struct buf b;
	size_t at;

	/* A record that does not follow on from the last. */
	b = tree_profile();
	begin(&b, TFA_REC_STACK_NODES);
	at = b.len;
	put_u32(&b, 6);
	put_node(&b, 6, 0x1, 0, 0);
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: offset %zu: stack nodes record: starts at node 6, 5 expected", at);
	free(b.p);

	/* A node its own parent, and one whose parent would come before node 1. */
	for (uint64_t back = 0; back <= 6; back += 6) {
		b = tree_with_entry(TFA_REC_STACK_NODES, 5, back, 0, &at);
		expect_error(&b, b.len,
		             "t.prof: offset %zu: stack nodes record: node 5 has its parent %" PRIu64
		             " back (1 to 5)", at, back);
		free(b.p);
	}

	/* A stack on a node not read (yet). */
	b = tree_with_entry(TFA_REC_STACK_LEAVES, 1, 5, 0, &at);
	expect_error(&b, b.len, "t.prof: offset %zu: stack leaves record: stack 1 on node 5, of 4 read", at);
	free(b.p);

	/* Stack id 0, and ids that would pass 2^32 - 1. */
	b = tree_with_entry(TFA_REC_STACK_LEAVES, 0, 1, 0, &at);
	expect_error(&b, b.len, "t.prof: offset %zu: stack leaves record: stack id 0 (1 to 4294967295)", at);
	free(b.p);
	b = tree_profile();
	begin(&b, TFA_REC_STACK_LEAVES);
	put_u32(&b, UINT32_MAX);
	put_uleb(&b, 1);
	put_uleb(&b, 0);
	at = b.len;
	put_uleb(&b, 1);
	put_uleb(&b, 0);
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: offset %zu: stack leaves record: stack id 4294967296 (1 to 4294967295)",
	             at);
	free(b.p);

	/* A number of 11 bytes, one whose tenth byte holds more than bit 63, one cut short. */
	for (int kind = 0; kind < 3; kind++) {
		b = tree_profile();
		begin(&b, TFA_REC_STACK_LEAVES);
		put_u32(&b, 1);
		at = b.len;
		uint8_t bytes[11];
		memset(bytes, 0x80, sizeof(bytes));
		bytes[10] = 0x01;
		if (kind == 1)
			bytes[9] = 0x02;
		put(&b, bytes, kind == 0 ? 11 : kind == 1 ? 10 : 3);
		end(&b);
		rec_end(&b, 1);
		if (kind < 2)
			expect_error(&b, b.len,
			             "t.prof: offset %zu: stack leaves record: field 'node' is longer than 64 bits", at);
		else
			expect_error(&b, b.len, "t.prof: offset %zu: stack leaves record: field 'node' overruns its record",
			             at);
		free(b.p);
	}

	/* A stack recorded twice: by the tree and by a whole-stack record. */
	b = tree_profile();
	begin(&b, TFA_REC_STACK_LEAVES);
	put_u32(&b, 1);
	put_uleb(&b, 1);
	put_uleb(&b, 0);
	end(&b);
	begin(&b, TFA_REC_STACKS);
	put_u32(&b, 1);
	put_u32(&b, 1);
	put_u64(&b, 0x10);
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: stack 1 is recorded twice");
	free(b.p);
}
END_TEST

/* A chain deeper than a stack may be; leaves that stand for more frames than the file could. */
START_TEST(test_profile_read_stack_tree_too_deep)
{
	struct buf b = { 0 };
	size_t at = 0;

	header(&b, 1, 16);
	rec_process(&b, 7, "x");
	begin(&b, TFA_REC_STACK_NODES);
	put_u32(&b, 1);
	for (uint32_t no = 1; no <= 4096; no++) {
		if (no == 4096)
			at = b.len;
		put_uleb(&b, 1);
		put_uleb(&b, 2);
	}
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len,
	             "t.prof: offset %zu: stack nodes record: node 4096 lies 4096 frames deep (stacks have up to 4096)",
	             at);
	free(b.p);

	/* 3,000 nodes deep, then 1,000 stacks of 2 bytes on the deepest: 3 million frames from 10 KB. */
	b = (struct buf){ 0 };
	header(&b, 1, 16);
	rec_process(&b, 7, "x");
	begin(&b, TFA_REC_STACK_NODES);
	put_u32(&b, 1);
	for (uint32_t no = 1; no <= 3000; no++) {
		put_uleb(&b, 1);
		put_uleb(&b, 2);
	}
	end(&b);
	begin(&b, TFA_REC_STACK_LEAVES);
	put_u32(&b, 1);
	size_t first = b.len;
	for (uint32_t id = 1; id <= 1000; id++) {
		put_uleb(&b, 3000);
		put_uleb(&b, 2);
	}
	end(&b);
	rec_end(&b, 1);
	/* The first leaf past 128 frames a byte (3,001 each). */
	size_t fits = (b.len * 128) / 3001;
	expect_error(&b, b.len,
	             "t.prof: offset %zu: stack leaves record: its stacks have more frames than a file of %zu bytes "
	             "holds (128 a byte)",
	             first + fits * 3, b.len);
	free(b.p);
}
END_TEST

static void
put_point(struct buf *b, uint64_t t, uint64_t in_use, uint32_t flags)
{
	put_u64(b, t);
	put_u64(b, in_use);
	put_u64(b, in_use + 8);
	put_u64(b, 4096);
	put_u32(b, flags);
}

/* The timeline: points across records, in order; a bad size or time going back is refused. */
START_TEST(test_profile_read_timeline)
{
	struct buf b = { 0 };
	tfa_profile_t p;
	char err[256];

	header(&b, 1, 16);
	rec_process(&b, 5, "x");
	begin(&b, TFA_REC_CONFIG);
	put_u32(&b, TFA_PROF_STACKS_FP);
	put_u32(&b, 16);
	put_u64(&b, 0);
	put_u64(&b, 1234); /* truncated allocations, appended later */
	put_u32(&b, 777);
	end(&b);
	begin(&b, TFA_REC_TIMELINE);
	put_u64(&b, 10000000);
	put_point(&b, 0, 0, 0);
	put_point(&b, 5, 100, 1);
	end(&b);
	begin(&b, TFA_REC_TIMELINE);
	put_u64(&b, 20000000);
	put_point(&b, 5, 50, 0);
	end(&b);
	size_t good = b.len;
	rec_end(&b, 1);
	ck_assert_int_eq(parse(b.p, b.len, &p, err, sizeof(err)), 0);
	ck_assert_uint_eq(p.ntimeline, 3);
	ck_assert_uint_eq(p.timeline_interval_ns, 20000000);
	ck_assert_uint_eq(p.timeline[1].bytes_in_use, 100);
	ck_assert_uint_eq(p.timeline[1].allocated_bytes, 108);
	ck_assert_uint_eq(p.timeline[1].rss_bytes, 4096);
	ck_assert_uint_eq(p.timeline[1].flags, 1);
	ck_assert_uint_eq(p.timeline[2].t_ns, 5);
	ck_assert_uint_eq(p.stacks_truncated, 1234);
	ck_assert_uint_eq(p.max_stacks, 777);
	tfa_profile_free(&p);

	/* Time going back. */
	b.len = good;
	begin(&b, TFA_REC_TIMELINE);
	put_u64(&b, 1);
	size_t at = b.len;
	put_point(&b, 4, 1, 0);
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: offset %zu: timeline record: a point at 4 ns after one at 5 ns", at);

	/* A partial point. */
	b.len = good;
	begin(&b, TFA_REC_TIMELINE);
	put_u64(&b, 1);
	at = b.len;
	put_u64(&b, 99);
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: offset %zu: timeline record: 8 bytes of points, not a multiple of 36", at);
	free(b.p);
}
END_TEST

/* A CONFIG record of sample-only tracking (track, appended last), at the start of b's records. */
static size_t
rec_config_track(struct buf *b, uint32_t mode, uint64_t sample_bytes, uint32_t track)
{
	size_t at = b->len;

	begin(b, TFA_REC_CONFIG);
	put_u32(b, mode);
	put_u32(b, 16);
	put_u64(b, sample_bytes);
	put_u64(b, 0);
	put_u32(b, 100);
	put_u64(b, 4096);
	put_u64(b, 8192);
	put_u32(b, track);
	end(b);
	return at;
}

/* Sample-only tracking: the CONFIG field is read, checked, and absent in older files. */
START_TEST(test_profile_read_track)
{
	struct buf b = { 0 };
	tfa_profile_t p;
	char err[256];

	header(&b, 1, 16);
	rec_process(&b, 5, "x");
	rec_config_track(&b, TFA_PROF_STACKS_FP, 4096, TFA_PROF_TRACK_SAMPLED);
	rec_end(&b, 1);
	ck_assert_int_eq(parse(b.p, b.len, &p, err, sizeof(err)), 0);
	ck_assert_uint_eq(p.track, TFA_PROF_TRACK_SAMPLED);
	ck_assert_uint_eq(p.sample_bytes, 4096);
	tfa_profile_free(&p);

	/* An unknown value. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_process(&b, 5, "x");
	size_t at = rec_config_track(&b, TFA_PROF_STACKS_FP, 4096, 2);
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: offset %zu: config record: unknown track 2", at);

	/* A sample without an interval, or without stacks. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_process(&b, 5, "x");
	at = rec_config_track(&b, TFA_PROF_STACKS_FP, 0, TFA_PROF_TRACK_SAMPLED);
	rec_end(&b, 1);
	expect_error(&b, b.len,
	             "t.prof: offset %zu: config record: sample-only tracking without a sample interval or stacks",
	             at);
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_process(&b, 5, "x");
	at = rec_config_track(&b, TFA_PROF_STACKS_NONE, 4096, TFA_PROF_TRACK_SAMPLED);
	rec_end(&b, 1);
	expect_error(&b, b.len,
	             "t.prof: offset %zu: config record: sample-only tracking without a sample interval or stacks",
	             at);
	free(b.p);
}
END_TEST

/* jemalloc's scaling of a sampled block: 1 / (1 - exp(-size / interval)). */
START_TEST(test_sample_weight)
{
	ck_assert(tfa_sample_weight(100, 0) == 1.0);
	/* size == interval: 1 / (1 - 1/e). */
	ck_assert_double_eq_tol(tfa_sample_weight(4096, 4096), 1.0 / (1.0 - exp(-1.0)), 1e-12);
	/* Small blocks: about interval / size; a size of 0 counts as 1 byte. */
	ck_assert_double_eq_tol(tfa_sample_weight(1, 524288), 524288.5, 0.01);
	ck_assert_double_eq_tol(tfa_sample_weight(0, 524288), tfa_sample_weight(1, 524288), 1e-9);
	ck_assert_double_eq_tol(tfa_sample_weight(48, 65536), 1.0 / -expm1(-48.0 / 65536.0), 1e-9);
	/* Far larger than the interval: sampled for sure, stands for itself. */
	ck_assert_double_eq_tol(tfa_sample_weight(UINT64_C(1) << 40, 4096), 1.0, 1e-12);
	/* Monotonic: a larger block stands for fewer blocks. */
	ck_assert(tfa_sample_weight(1000, 65536) > tfa_sample_weight(2000, 65536));
}
END_TEST

/* A few thousand records: the arrays grow. */
START_TEST(test_profile_read_many_records)
{
	struct buf b = { 0 };
	tfa_profile_t p;
	char err[256];

	header(&b, 1, 16);
	rec_process(&b, 5, "x");
	for (int i = 0; i < 3000; i++)
		rec_leak(&b, (uint64_t)i, 1);
	for (int i = 0; i < 100; i++)
		rec_device(&b, "cpu", TFA_DEV_FIELD_COUNT);
	rec_end(&b, 1);
	ck_assert_int_eq(parse(b.p, b.len, &p, err, sizeof(err)), 0);
	ck_assert_uint_eq(p.nleaks, 3000);
	ck_assert_uint_eq(p.ndevices, 100);
	ck_assert_uint_eq(p.leaks[2999].f[TFA_LEAKF_BYTES], 2999);
	tfa_profile_free(&p);
	free(b.p);
}
END_TEST

/* ---- broken files: the exact messages ------------------------------------------------------- */

START_TEST(test_profile_read_bad_headers)
{
	struct buf b = { 0 };

	expect_error(&b, 0, "t.prof: empty file: not a tfalloc profile");
	put(&b, "GIF89a..........", 16);
	expect_error(&b, 16, "t.prof: not a tfalloc profile (bad magic)");
	expect_error(&b, 3, "t.prof: not a tfalloc profile (bad magic)");
	b.len = 0;
	header(&b, 1, 16);
	expect_error(&b, 5, "t.prof: truncated header: 5 bytes, a profile starts with 16");
	expect_error(&b, 12, "t.prof: truncated header: 12 bytes, a profile starts with 16");
	expect_error(&b, 16, "t.prof: cut short: no end record (after 0 records, 16 bytes)");
	b.len = 0;
	header(&b, 2, 16); /* the trie's records: read too */
	expect_error(&b, 16, "t.prof: cut short: no end record (after 0 records, 16 bytes)");
	b.len = 0;
	header(&b, 3, 16);
	expect_error(&b, 16, "t.prof: unsupported format version 3 (this reader knows versions 1 to 2)");
	b.len = 0;
	header(&b, 0, 16);
	expect_error(&b, 16, "t.prof: unsupported format version 0 (this reader knows versions 1 to 2)");
	b.len = 0;
	header(&b, 1, 8);
	expect_error(&b, 16, "t.prof: offset 12: bad header size 8 (at least 16)");
	b.len = 0;
	header(&b, 1, 40);
	expect_error(&b, 16, "t.prof: truncated header: 16 bytes, the header says 40");
	free(b.p);
}
END_TEST

START_TEST(test_profile_read_truncated)
{
	struct buf b = valid_profile();
	size_t rec2; /* the device record */
	uint32_t plen;

	/* The process record starts at 16; find the device record after it. */
	plen = (uint32_t)b.p[20] | (uint32_t)b.p[21] << 8;
	rec2 = 16 + 12 + plen;
	expect_error(&b, 20,
	             "t.prof: truncated: record at offset 16 needs at least 12 bytes, 4 present");
	expect_error(&b, 30, "t.prof: truncated: record at offset 16 needs %zu bytes, 14 present",
	             (size_t)plen + 12);
	expect_error(&b, rec2, "t.prof: cut short: no end record (after 1 records, %zu bytes)",
	             rec2);
	expect_error(&b, rec2 + 9,
	             "t.prof: truncated: record at offset %zu needs %u bytes, 9 present", rec2,
	             8 + (4 + 3) + (4 + 8) + (4 + 8 * TFA_DEV_FIELD_COUNT) + 4);
	expect_error(&b, b.len - 1,
	             "t.prof: truncated: record at offset %zu needs 24 bytes, 23 present",
	             b.len - 24);
	free(b.p);
}
END_TEST

START_TEST(test_profile_read_too_large)
{
	struct buf b = { 0 };

	header(&b, 1, 16);
	put_u32(&b, TFA_REC_LEAK);
	put_u32(&b, TFA_PROF_MAX_RECORD + 1);
	put_u32(&b, 0);
	expect_error(
	        &b, b.len,
	        "t.prof: offset 16: record too large: type 3, 16777217 bytes (at most 16777216)");
	set_u32(b.p + 20, 0xffffffffu);
	expect_error(
	        &b, b.len,
	        "t.prof: offset 16: record too large: type 3, 4294967295 bytes (at most 16777216)");
	free(b.p);
}
END_TEST

START_TEST(test_profile_read_checksum)
{
	struct buf b = valid_profile();
	uint32_t plen = (uint32_t)b.p[20] | (uint32_t)b.p[21] << 8;
	uint32_t stored = test_crc32(b.p + 16, 8 + plen), computed;

	b.p[16 + 8 + 2] ^= 0x40; /* a byte of the pid */
	computed = test_crc32(b.p + 16, 8 + plen);
	expect_error(&b, b.len,
	             "t.prof: offset 16: checksum mismatch in process record (type 1): stored "
	             "0x%08x, computed 0x%08x",
	             stored, computed);
	b.p[16 + 8 + 2] ^= 0x40;
	b.p[16 + 8 + plen] ^= 1; /* the stored CRC itself */
	expect_error(&b, b.len,
	             "t.prof: offset 16: checksum mismatch in process record (type 1): stored "
	             "0x%08x, computed 0x%08x",
	             stored ^ 1, stored);
	free(b.p);
}
END_TEST

START_TEST(test_profile_read_overruns)
{
	struct buf b = { 0 };
	uint64_t v[1] = { 0 };
	size_t second;

	/* A string longer than what is left of its record. */
	header(&b, 1, 16);
	begin(&b, TFA_REC_PROCESS);
	put_u32(&b, 1);
	put_u32(&b, 2);
	put_u64(&b, 3);
	put_u64(&b, 4);
	put_u32(&b, 1);
	put_u32(&b, 0);
	put_u32(&b, 0);
	put_u32(&b, 100); /* command: 100 bytes, 10 follow */
	put(&b, "0123456789", 10);
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len,
	             "t.prof: offset 60: process record: string 'command' of 100 bytes overruns "
	             "its record (10 bytes left)");

	/* A string longer than TFA_PROF_MAX_STRING, though within its record. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	begin(&b, TFA_REC_DEVICE);
	put_u32(&b, 5000);
	for (int i = 0; i < 5000; i++)
		put(&b, "x", 1);
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len,
	             "t.prof: offset 24: device record: string 'device' of 5000 bytes is longer "
	             "than the maximum 4096");

	/* A field past the end of its record. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	begin(&b, TFA_REC_ERROR);
	put_u32(&b, TFA_ERR_DOUBLE_FREE);
	put_u32(&b, 0x1000); /* half an address */
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len,
	             "t.prof: offset 28: error record: field 'address' overruns its record (8 "
	             "bytes needed, 4 left)");

	/* A counts block of more values than its record holds. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	begin(&b, TFA_REC_ERROR_TOTALS);
	put_u32(&b, 0x20000000); /* 2^29 values: 4 GiB */
	put_u64(&b, 1);
	end(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len,
	             "t.prof: offset 24: error totals record: counts block 'counts' of 536870912 "
	             "values overruns its record (8 bytes left)");

	/* An end record too short. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_process(&b, 1, "x");
	second = b.len;
	begin(&b, TFA_REC_END);
	put_counts(&b, 0, v);
	end(&b);
	expect_error(&b, b.len,
	             "t.prof: offset %zu: end record: field 'records' overruns its record (8 bytes "
	             "needed, 4 left)",
	             second + 8);
	free(b.p);
}
END_TEST

START_TEST(test_profile_read_structure)
{
	struct buf b = { 0 };
	size_t second;

	/* Two process records. */
	header(&b, 1, 16);
	rec_process(&b, 1, "a");
	second = b.len;
	rec_process(&b, 1, "a");
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: offset %zu: duplicate process record", second);

	/* Two error totals. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_process(&b, 1, "a");
	rec_error_totals(&b);
	second = b.len;
	rec_error_totals(&b);
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: offset %zu: duplicate error totals record", second);

	/* No process record. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_device(&b, "cpu", 2);
	rec_end(&b, 1);
	expect_error(&b, b.len, "t.prof: no process record");

	/* The end record counts another number of records. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_process(&b, 1, "a");
	b.nrecords = 5;
	second = b.len;
	rec_end(&b, 1);
	expect_error(&b, b.len,
	             "t.prof: offset %zu: end record counts 5 records before it, the file has 1",
	             second);

	/* A bad complete flag. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_process(&b, 1, "a");
	second = b.len;
	rec_end(&b, 2);
	expect_error(&b, b.len,
	             "t.prof: offset %zu: end record: bad value 2 of 'complete' (0 or 1)", second);

	/* Bytes after the end record. */
	b.len = 0;
	b.nrecords = 0;
	header(&b, 1, 16);
	rec_process(&b, 1, "a");
	rec_end(&b, 1);
	second = b.len;
	put(&b, "junk", 4);
	expect_error(&b, b.len, "t.prof: offset %zu: 4 bytes after the end record", second);

	/* A record after the end record. */
	b.len = second;
	rec_process(&b, 1, "a");
	expect_error(&b, b.len, "t.prof: offset %zu: %zu bytes after the end record", second,
	             b.len - second);
	free(b.p);
}
END_TEST

START_TEST(test_profile_read_small_error_buffer)
{
	struct buf b = { 0 };
	tfa_profile_t p;
	char err[8];

	put(&b, "nope, not a profile", 19);
	ck_assert_int_eq(
	        tfa_profile_parse(b.p, b.len, "a-long-file-name.prof", &p, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "a-long-");
	ck_assert_int_eq(tfa_profile_parse(b.p, b.len, "x", &p, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "x: not ");
	ck_assert_int_eq(tfa_profile_parse(b.p, b.len, "x", &p, NULL, 0), -1);
	free(b.p);
}
END_TEST

/* ---- robustness ----------------------------------------------------------------------------- */

/* Every proper prefix of a valid file fails with a message; the whole file parses. */
START_TEST(test_profile_read_every_prefix)
{
	struct buf b = valid_profile();
	char err[512];

	for (size_t n = 0; n <= b.len; n++) {
		tfa_profile_t p;
		int rc = parse(b.p, n, &p, err, sizeof(err));

		if (n == b.len) {
			ck_assert_int_eq(rc, 0);
			tfa_profile_free(&p);
		} else {
			ck_assert_int_eq(rc, -1);
			ck_assert_msg(strncmp(err, "t.prof: ", 8) == 0 && strlen(err) > 10,
			              "n=%zu: %s", n, err);
		}
	}
	free(b.p);
}
END_TEST

/* Recomputes the CRC of every record so that mutations reach the field parsers. */
static void
fix_crcs(uint8_t *p, size_t len)
{
	size_t off = 16;

	while (len - off >= 12) {
		uint32_t plen = (uint32_t)p[off + 4] | (uint32_t)p[off + 5] << 8
		                | (uint32_t)p[off + 6] << 16 | (uint32_t)p[off + 7] << 24;

		if (plen > len - off - 12)
			return;
		set_u32(p + off + 8 + plen, test_crc32(p + off, 8 + (size_t)plen));
		off += 12 + (size_t)plen;
	}
}

/* Every byte changed to several values, with and without fixed CRCs: no crash, no overread. */
START_TEST(test_profile_read_mutations)
{
	static const uint8_t values[] = { 0x00, 0x01, 0x7f, 0x80, 0xff, 0x10 };
	struct buf b = valid_profile();
	uint8_t *m = malloc(b.len);
	char err[512];
	size_t ok = 0, failed = 0;

	ck_assert_ptr_nonnull(m);
	for (size_t i = 0; i < b.len; i++) {
		for (size_t v = 0; v < sizeof(values); v++) {
			for (int fix = 0; fix < 2; fix++) {
				tfa_profile_t p;

				memcpy(m, b.p, b.len);
				m[i] = values[v];
				if (fix)
					fix_crcs(m, b.len);
				if (parse(m, b.len, &p, err, sizeof(err)) == 0) {
					ck_assert_ptr_nonnull(p.command);
					ok++;
					tfa_profile_free(&p);
				} else {
					ck_assert_msg(strncmp(err, "t.prof: ", 8) == 0, "%s", err);
					failed++;
				}
			}
		}
	}
	ck_assert_uint_gt(ok, 0);
	ck_assert_uint_gt(failed, 0);
	free(m);
	free(b.p);
}
END_TEST

/* ---- files ---------------------------------------------------------------------------------- */

static char test_dir[] = "/tmp/tfa-profile-read-XXXXXX";

static void
make_dir(void)
{
	ck_assert_ptr_nonnull(mkdtemp(test_dir));
}

static void
remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_profile_read_files)
{
	struct buf b = valid_profile();
	char path[256], err[512], want[512];
	tfa_profile_t p;
	FILE *f;
	int fd;

	make_dir();
	snprintf(path, sizeof(path), "%s/ok.prof", test_dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(b.p, 1, b.len, f), b.len);
	fclose(f);
	ck_assert_int_eq(tfa_profile_read_file(path, &p, err, sizeof(err)), 0);
	ck_assert_str_eq(p.path, path);
	ck_assert_uint_eq(p.pid, 1234);
	tfa_profile_free(&p);

	snprintf(path, sizeof(path), "%s/missing.prof", test_dir);
	ck_assert_int_eq(tfa_profile_read_file(path, &p, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: No such file or directory", path);
	ck_assert_str_eq(err, want);

	ck_assert_int_eq(tfa_profile_read_file(test_dir, &p, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: not a regular file", test_dir);
	ck_assert_str_eq(err, want);

	snprintf(path, sizeof(path), "%s/fifo.prof", test_dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(tfa_profile_read_file(path, &p, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: not a regular file", path);
	ck_assert_str_eq(err, want);

	/* Larger than the cap: refused before reading (sparse, takes no disk). */
	snprintf(path, sizeof(path), "%s/huge.prof", test_dir);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)TFA_PROFILE_MAX_FILE + 1), 0);
	close(fd);
	ck_assert_int_eq(tfa_profile_read_file(path, &p, err, sizeof(err)), -1);
	snprintf(want, sizeof(want),
	         "%s: 1073741825 bytes: larger than the 1024 MiB a profile may have", path);
	ck_assert_str_eq(err, want);

	remove_dir();
	free(b.p);
}
END_TEST

static Suite *
profile_read_suite(void)
{
	Suite *s = suite_create("profile_read");
	TCase *tc;

	tc = tcase_create("format");
	tcase_add_test(tc, test_profile_crc32_known_values);
	tcase_add_test(tc, test_profile_crc32_lengths_offsets);
	tcase_add_test(tc, test_profile_crc32_large);
	tcase_add_test(tc, test_profile_crc32_first_use_race);
	tcase_add_test(tc, test_profile_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("valid");
	tcase_add_test(tc, test_profile_read_valid);
	tcase_add_test(tc, test_profile_read_snapshot);
	tcase_add_test(tc, test_profile_read_forward_compatible);
	tcase_add_test(tc, test_profile_read_timeline);
	tcase_add_test(tc, test_profile_read_stack_tree);
	tcase_add_test(tc, test_profile_read_sites);
	tcase_add_test(tc, test_profile_read_track);
	tcase_add_test(tc, test_sample_weight);
	tcase_add_test(tc, test_profile_read_many_records);
	suite_add_tcase(s, tc);

	tc = tcase_create("broken");
	tcase_add_test(tc, test_profile_read_bad_headers);
	tcase_add_test(tc, test_profile_read_truncated);
	tcase_add_test(tc, test_profile_read_too_large);
	tcase_add_test(tc, test_profile_read_stack_tree_broken);
	tcase_add_test(tc, test_profile_read_stack_tree_too_deep);
	tcase_add_test(tc, test_profile_read_checksum);
	tcase_add_test(tc, test_profile_read_overruns);
	tcase_add_test(tc, test_profile_read_structure);
	tcase_add_test(tc, test_profile_read_small_error_buffer);
	suite_add_tcase(s, tc);

	tc = tcase_create("robustness");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_profile_read_every_prefix);
	tcase_add_test(tc, test_profile_read_mutations);
	suite_add_tcase(s, tc);

	tc = tcase_create("files");
	tcase_add_test(tc, test_profile_read_files);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(profile_read_suite());
	int failures;

	srunner_run_all(sr, CK_ENV);
	failures = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failures != 0;
}
