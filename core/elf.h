/* SPDX-License-Identifier: MIT */
/*
 * What the shim and `tfalloc run` ask of an ELF file before it is loaded or
 * exec'd: whether it is of this process's kind, whether the loader runs for
 * it (PT_INTERP), and which libraries it needs.  Read from a descriptor with
 * pread only, into the caller's buffers: the exec hooks ask from a vfork
 * child, where malloc and stdio are out of bounds.
 */
#ifndef TFA_CORE_ELF_H
#define TFA_CORE_ELF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"

/*
 * The start of the file: a program's program headers follow its header
 * (13 of them on Debian's, 728 bytes in all), so one read of this many bytes
 * has both.
 */
#define TFA_ELF_HEAD_BYTES 1024

typedef struct tfa_elf_s {
	int fd;
	bool is64, big_endian;
	uint16_t type, machine; /* e_type (2: ET_EXEC, 3: ET_DYN), e_machine */
	uint64_t phoff;
	uint16_t phentsize, phnum;
	const unsigned char *head; /* the file's first head_len bytes */
	size_t head_len;
} tfa_elf_t;

typedef struct tfa_elf_phdr_s {
	uint32_t type; /* PT_LOAD 1, PT_DYNAMIC 2, PT_INTERP 3 */
	uint64_t offset, vaddr, filesz;
} tfa_elf_phdr_t;

/*
 * Reads the header of the ELF file open as fd into buf (up to
 * TFA_ELF_HEAD_BYTES).  false: no ELF file of either class and byte order.
 * Anything else is the caller's to judge from the fields (glibc's loader
 * looks at the class and machine first, then the type).
 */
TFA_HIDDEN bool tfa_elf_open(int fd, unsigned char buf[TFA_ELF_HEAD_BYTES], tfa_elf_t *e);

/* Program header i (< e->phnum), from the bytes read or else from the file.  false: unreadable, or not of its class's size. */
TFA_HIDDEN bool tfa_elf_phdr(const tfa_elf_t *e, unsigned i, tfa_elf_phdr_t *out);

/* Whether the file is of this process's class and machine (another can never take this process's shim). */
TFA_HIDDEN bool tfa_elf_is_native(const tfa_elf_t *e);

/*
 * Calls fn with each library the file needs (DT_NEEDED), as the first
 * name_cap - 1 bytes of its name, until fn returns true; true then.  A
 * file of another kind than this process's, or without a dynamic section:
 * false.
 */
TFA_HIDDEN bool tfa_elf_any_needed(const tfa_elf_t *e, bool (*fn)(const char *name, void *arg), void *arg);

#endif /* TFA_CORE_ELF_H */
