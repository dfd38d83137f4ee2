/* SPDX-License-Identifier: MIT */
/*
 * Writes profile files (core/profile_format.h) without allocating: records are
 * built in a caller's record buffer, then appended to a caller's output
 * buffer that is written out with write(2) whenever it fills.
 */
#ifndef TFA_CORE_PROFILE_WRITE_H
#define TFA_CORE_PROFILE_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"

typedef struct tfa_pw_s {
	int fd;
	int err;        /* first -errno of a write; 0: fine */
	uint8_t *out;   /* output buffer */
	size_t out_len;
	size_t out_cap;
	uint8_t *rec;   /* record being built (payload only) */
	size_t rec_len;
	size_t rec_cap;
	uint32_t rec_type;
	bool rec_overflow; /* the record did not fit and will be dropped */
	uint64_t records;
	uint64_t dropped;
} tfa_pw_t;

/*
 * Starts a profile on fd and writes the header.  out and rec are buffers of
 * the caller (rec must hold the largest record; 64 KiB is plenty).
 */
void tfa_pw_open(tfa_pw_t *w, int fd, void *out, size_t out_cap, void *rec, size_t rec_cap);

void tfa_pw_begin(tfa_pw_t *w, uint32_t type);
void tfa_pw_u32(tfa_pw_t *w, uint32_t v);
void tfa_pw_u64(tfa_pw_t *w, uint64_t v);
/* An unsigned LEB128 number: 7 bits a byte, low first, the top bit set on all but the last (1 to 10 bytes). */
void tfa_pw_uleb(tfa_pw_t *w, uint64_t v);
/* A signed difference as tfa_pw_uleb of its zigzag code, (d << 1) ^ (d >> 63): small either way, small. */
void tfa_pw_zigzag(tfa_pw_t *w, int64_t d);
/* A string, cut to TFA_PROF_MAX_STRING bytes. */
void tfa_pw_str(tfa_pw_t *w, const char *s);
/* n raw bytes (at most TFA_PROF_MAX_STRING), as a string is written. */
void tfa_pw_bytes(tfa_pw_t *w, const void *data, size_t n);
/* Bytes the current record can still take. */
size_t tfa_pw_room(const tfa_pw_t *w);
/* A counts block: n then the values. */
void tfa_pw_counts(tfa_pw_t *w, const uint64_t *v, uint32_t n);
/* Closes the record: appends it with its checksum (or drops it if it overflowed). */
void tfa_pw_end(tfa_pw_t *w);

/* Writes the END record and flushes.  Returns 0 or the first -errno. */
int tfa_pw_finish(tfa_pw_t *w, bool complete) TFA_MUST_CHECK;

#endif /* TFA_CORE_PROFILE_WRITE_H */
