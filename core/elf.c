/* SPDX-License-Identifier: MIT */
#include "core/elf.h"

#include <string.h>
#include <unistd.h>

/* Dynamic entries read at once: 64 of 16 bytes; a program's dynamic section has about 30. */
#define DYN_BYTES 1024
/* PT_LOAD headers kept to find the string table in the file. */
#define MAX_LOADS 8
/* What of a needed library's name is read: its start tells which it is. */
#define NAME_BYTES 64

static uint64_t
get(const tfa_elf_t *e, const unsigned char *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)p[e->big_endian ? n - 1 - i : i] << (8 * i);
	return v;
}

bool
tfa_elf_open(int fd, unsigned char buf[TFA_ELF_HEAD_BYTES], tfa_elf_t *e)
{
	ssize_t got = pread(fd, buf, TFA_ELF_HEAD_BYTES, 0);

	if (got < 52 || memcmp(buf, "\177ELF", 4) != 0)
		return false;
	if ((buf[4] != 1 && buf[4] != 2) || (buf[5] != 1 && buf[5] != 2))
		return false;
	*e = (tfa_elf_t){ .fd = fd, .is64 = buf[4] == 2, .big_endian = buf[5] == 2, .head = buf,
			  .head_len = (size_t)got };
	if (e->is64 && got < 64)
		return false;
	e->type = (uint16_t)get(e, buf + 16, 2);
	e->machine = (uint16_t)get(e, buf + 18, 2);
	e->phoff = get(e, buf + (e->is64 ? 32 : 28), e->is64 ? 8 : 4);
	e->phentsize = (uint16_t)get(e, buf + (e->is64 ? 54 : 42), 2);
	e->phnum = (uint16_t)get(e, buf + (e->is64 ? 56 : 44), 2);
	return true;
}

bool
tfa_elf_phdr(const tfa_elf_t *e, unsigned i, tfa_elf_phdr_t *out)
{
	unsigned char own[56];
	const unsigned char *ph;
	uint64_t at = e->phoff + (uint64_t)i * e->phentsize;

	if (e->phentsize != (e->is64 ? 56 : 32) || e->phoff > (uint64_t)INT64_MAX / 2)
		return false;
	if (at <= e->head_len && e->head_len - at >= e->phentsize)
		ph = e->head + at;
	else if (pread(e->fd, own, e->phentsize, (off_t)at) == (ssize_t)e->phentsize)
		ph = own;
	else
		return false;
	out->type = (uint32_t)get(e, ph, 4);
	if (e->is64) {
		out->offset = get(e, ph + 8, 8);
		out->vaddr = get(e, ph + 16, 8);
		out->filesz = get(e, ph + 32, 8);
	} else {
		out->offset = get(e, ph + 4, 4);
		out->vaddr = get(e, ph + 8, 4);
		out->filesz = get(e, ph + 16, 4);
	}
	return true;
}

bool
tfa_elf_is_native(const tfa_elf_t *e)
{
#if defined(__x86_64__)
	return e->is64 && !e->big_endian && e->machine == 62; /* EM_X86_64 */
#elif defined(__aarch64__)
	return e->is64 && !e->big_endian && e->machine == 183; /* EM_AARCH64 */
#else
	(void)e;
	return true; /* no check: the loader's answer stands */
#endif
}

bool
tfa_elf_any_needed(const tfa_elf_t *e, bool (*fn)(const char *name, void *arg), void *arg)
{
	unsigned char dyn[DYN_BYTES];
	uint64_t load[MAX_LOADS][3]; /* vaddr, offset, size in the file */
	uint64_t needed[DYN_BYTES / 16];
	uint64_t dyn_off = 0, dyn_size = 0, strtab = 0;
	size_t nload = 0, nneeded = 0;
	tfa_elf_phdr_t ph;

	if (!tfa_elf_is_native(e))
		return false;
	for (unsigned i = 0; i < e->phnum; i++) {
		if (!tfa_elf_phdr(e, i, &ph))
			return false;
		if (ph.type == 2) { /* PT_DYNAMIC */
			dyn_off = ph.offset;
			dyn_size = ph.filesz;
		} else if (ph.type == 1 && nload < MAX_LOADS) { /* PT_LOAD */
			load[nload][0] = ph.vaddr;
			load[nload][1] = ph.offset;
			load[nload][2] = ph.filesz;
			nload++;
		}
	}
	if (dyn_size == 0)
		return false;
	ssize_t got = pread(e->fd, dyn, dyn_size < DYN_BYTES ? dyn_size : DYN_BYTES, (off_t)dyn_off);
	for (ssize_t j = 0; j + 16 <= got; j += 16) {
		uint64_t tag = get(e, dyn + j, 8), val = get(e, dyn + j + 8, 8);
		if (tag == 0) /* DT_NULL */
			break;
		if (tag == 5) /* DT_STRTAB: an address */
			strtab = val;
		else if (tag == 1) /* DT_NEEDED: an offset into the string table */
			needed[nneeded++] = val;
	}
	for (size_t i = 0; i < nload; i++) {
		if (strtab < load[i][0] || strtab - load[i][0] >= load[i][2])
			continue;
		uint64_t strtab_off = strtab - load[i][0] + load[i][1];
		for (size_t k = 0; k < nneeded; k++) {
			char name[NAME_BYTES];
			ssize_t n = pread(e->fd, name, sizeof(name) - 1, (off_t)(strtab_off + needed[k]));
			if (n <= 0)
				continue;
			name[n] = '\0';
			if (fn(name, arg))
				return true;
		}
		return false;
	}
	return false;
}
