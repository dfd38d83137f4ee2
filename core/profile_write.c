/* SPDX-License-Identifier: MIT */
#include "core/profile_write.h"

#include <string.h>

#include "core/log.h"
#include "core/profile_format.h"

static void
flush_out(tfa_pw_t *w)
{
	if (w->out_len == 0)
		return;
	if (w->err == 0) {
		int r = tfa_write_all(w->fd, w->out, w->out_len);
		if (r != 0)
			w->err = r;
	}
	w->out_len = 0;
}

static void
put_out(tfa_pw_t *w, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len > 0) {
		if (w->out_len == w->out_cap)
			flush_out(w);
		size_t n = TFA_MIN(len, w->out_cap - w->out_len);
		memcpy(w->out + w->out_len, p, n);
		w->out_len += n;
		p += n;
		len -= n;
	}
}

static void
le32(uint8_t *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static void
le64(uint8_t *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

void
tfa_pw_open(tfa_pw_t *w, int fd, void *out, size_t out_cap, void *rec, size_t rec_cap)
{
	uint8_t header[TFA_PROF_HEADER_SIZE];

	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->out = out;
	w->out_cap = out_cap;
	w->rec = rec;
	w->rec_cap = rec_cap;
	memcpy(header, TFA_PROF_MAGIC, 8);
	le32(header + 8, TFA_PROF_VERSION);
	le32(header + 12, TFA_PROF_HEADER_SIZE);
	put_out(w, header, sizeof(header));
}

void
tfa_pw_begin(tfa_pw_t *w, uint32_t type)
{
	w->rec_type = type;
	w->rec_len = 0;
	w->rec_overflow = false;
}

static uint8_t *
rec_room(tfa_pw_t *w, size_t n)
{
	if (w->rec_overflow || w->rec_len + n > w->rec_cap) {
		w->rec_overflow = true;
		return NULL;
	}
	uint8_t *p = w->rec + w->rec_len;
	w->rec_len += n;
	return p;
}

void
tfa_pw_u32(tfa_pw_t *w, uint32_t v)
{
	uint8_t *p = rec_room(w, 4);
	if (p != NULL)
		le32(p, v);
}

void
tfa_pw_u64(tfa_pw_t *w, uint64_t v)
{
	uint8_t *p = rec_room(w, 8);
	if (p != NULL)
		le64(p, v);
}

void
tfa_pw_uleb(tfa_pw_t *w, uint64_t v)
{
	uint8_t b[10];
	size_t n = 0;

	do {
		b[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		b[n] |= v != 0 ? 0x80 : 0;
		n++;
	} while (v != 0);
	uint8_t *p = rec_room(w, n);
	if (p != NULL)
		memcpy(p, b, n);
}

void
tfa_pw_zigzag(tfa_pw_t *w, int64_t d)
{
	tfa_pw_uleb(w, ((uint64_t)d << 1) ^ (uint64_t)(d >> 63));
}

void
tfa_pw_bytes(tfa_pw_t *w, const void *data, size_t n)
{
	n = TFA_MIN(n, (size_t)TFA_PROF_MAX_STRING);
	tfa_pw_u32(w, (uint32_t)n);
	uint8_t *p = rec_room(w, n);
	if (p != NULL && n > 0)
		memcpy(p, data, n);
}

void
tfa_pw_str(tfa_pw_t *w, const char *s)
{
	size_t n = 0;

	/* By hand: strnlen's bound is larger than the constant strings LTO inlines here, which gcc
	 * then reports as an overread. */
	while (s != NULL && n < TFA_PROF_MAX_STRING && s[n] != '\0')
		n++;

	tfa_pw_u32(w, (uint32_t)n);
	uint8_t *p = rec_room(w, n);
	if (p != NULL && n > 0)
		memcpy(p, s, n);
}

size_t
tfa_pw_room(const tfa_pw_t *w)
{
	return w->rec_overflow ? 0 : w->rec_cap - w->rec_len;
}

void
tfa_pw_counts(tfa_pw_t *w, const uint64_t *v, uint32_t n)
{
	tfa_pw_u32(w, n);
	for (uint32_t i = 0; i < n; i++)
		tfa_pw_u64(w, v[i]);
}

void
tfa_pw_end(tfa_pw_t *w)
{
	uint8_t head[8];
	uint8_t tail[4];

	if (w->rec_overflow) {
		w->dropped++;
		return;
	}
	le32(head, w->rec_type);
	le32(head + 4, (uint32_t)w->rec_len);
	uint32_t crc = tfa_crc32(0, head, sizeof(head));
	crc = tfa_crc32(crc, w->rec, w->rec_len);
	le32(tail, crc);
	put_out(w, head, sizeof(head));
	put_out(w, w->rec, w->rec_len);
	put_out(w, tail, sizeof(tail));
	w->records++;
}

int
tfa_pw_finish(tfa_pw_t *w, bool complete)
{
	uint64_t records = w->records;

	tfa_pw_begin(w, TFA_REC_END);
	tfa_pw_u64(w, records);
	tfa_pw_u32(w, complete ? 1 : 0);
	tfa_pw_end(w);
	flush_out(w);
	return w->err;
}
