/* SPDX-License-Identifier: MIT */
/*
 * core/elf.h: the header facts read from real programs on this machine (this
 * test's own binary, a static-pie ldconfig, /bin/sh) and from files written
 * here with headers of the other class and byte order, program headers far
 * from the file's start, or cut short.
 */
#include "core/elf.h"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int
open_ro(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	ck_assert_msg(fd >= 0, "cannot open %s", path);
	return fd;
}

/* Stores v in n bytes at p in the byte order asked for. */
static void
put(unsigned char *p, size_t n, uint64_t v, bool big_endian)
{
	for (size_t i = 0; i < n; i++)
		p[big_endian ? n - 1 - i : i] = (unsigned char)(v >> (8 * i));
}

typedef struct synth_s {
	bool is64, big_endian;
	uint16_t type, machine, phentsize, phnum;
	uint64_t phoff;
	size_t file_len; /* bytes written (the headers may lie past them: a file cut short) */
} synth_t;

/* An ELF file of only headers: program header i has type i + 1, offset 0x1000 * (i + 1), vaddr + 0x400000, filesz 0x10 * (i + 1). */
static int
write_synth(const synth_t *s, char *path)
{
	static unsigned char file[8192];
	bool be = s->big_endian;

	memset(file, 0, sizeof(file));
	memcpy(file, "\177ELF", 4);
	file[4] = s->is64 ? 2 : 1;
	file[5] = be ? 2 : 1;
	file[6] = 1;
	put(file + 16, 2, s->type, be);
	put(file + 18, 2, s->machine, be);
	put(file + (s->is64 ? 32 : 28), s->is64 ? 8 : 4, s->phoff, be);
	put(file + (s->is64 ? 54 : 42), 2, s->phentsize, be);
	put(file + (s->is64 ? 56 : 44), 2, s->phnum, be);
	for (unsigned i = 0; i < s->phnum && s->phoff + (i + 1) * (uint64_t)s->phentsize <= sizeof(file); i++) {
		unsigned char *ph = file + s->phoff + i * s->phentsize;
		uint64_t off = 0x1000 * (i + 1), vaddr = off + 0x400000, filesz = 0x10 * (i + 1);
		put(ph, 4, i + 1, be);
		if (s->is64) {
			put(ph + 8, 8, off, be);
			put(ph + 16, 8, vaddr, be);
			put(ph + 32, 8, filesz, be);
		} else {
			put(ph + 4, 4, off, be);
			put(ph + 8, 4, vaddr, be);
			put(ph + 16, 4, filesz, be);
		}
	}
	strcpy(path, "/tmp/check_elf.XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, file, s->file_len), (ssize_t)s->file_len);
	return fd;
}

static bool
collect(const char *name, void *arg)
{
	char *names = arg;

	strcat(names, name);
	strcat(names, " ");
	return false;
}

static bool
is_libc(const char *name, void *arg)
{
	int *calls = arg;

	++*calls;
	return strcmp(name, "libc.so.6") == 0;
}

/* PT_INTERP among the program headers, or -1: unreadable. */
static int
has_interp(const tfa_elf_t *e)
{
	for (unsigned i = 0; i < e->phnum; i++) {
		tfa_elf_phdr_t ph;
		if (!tfa_elf_phdr(e, i, &ph))
			return -1;
		if (ph.type == 3)
			return 1;
	}
	return 0;
}

START_TEST(own_binary)
{
	unsigned char head[TFA_ELF_HEAD_BYTES];
	char names[4096] = "";
	tfa_elf_t e;
	int fd = open_ro("/proc/self/exe"), calls = 0;

	ck_assert(tfa_elf_open(fd, head, &e));
	ck_assert(e.is64 && !e.big_endian);
	ck_assert(tfa_elf_is_native(&e));
	ck_assert_int_eq(has_interp(&e), 1);
	ck_assert(!tfa_elf_any_needed(&e, collect, names));
	ck_assert_msg(strstr(names, "libc.so.6 ") != NULL, "needed: %s", names);
	ck_assert_msg(strstr(names, "libcheck") != NULL || strstr(names, "libsubunit") != NULL, "needed: %s",
		      names);
	/* Stops at the first yes. */
	ck_assert(tfa_elf_any_needed(&e, is_libc, &calls));
	ck_assert_int_le(calls, (int)(strlen(names) / 2));
	close(fd);
}
END_TEST

START_TEST(static_pie_and_shell)
{
	unsigned char head[TFA_ELF_HEAD_BYTES];
	char names[4096] = "";
	tfa_elf_t e;
	int fd = open_ro("/sbin/ldconfig"); /* libc-bin: static-pie, ET_DYN without a loader */

	ck_assert(tfa_elf_open(fd, head, &e));
	ck_assert_uint_eq(e.type, 3);
	ck_assert_int_eq(has_interp(&e), 0);
	ck_assert(!tfa_elf_any_needed(&e, collect, names));
	ck_assert_str_eq(names, "");
	close(fd);

	fd = open_ro("/bin/sh");
	ck_assert(tfa_elf_open(fd, head, &e));
	ck_assert_int_eq(has_interp(&e), 1);
	ck_assert(!tfa_elf_any_needed(&e, collect, names));
	ck_assert_msg(strstr(names, "libc.so.6 ") != NULL, "needed: %s", names);
	close(fd);
}
END_TEST

START_TEST(not_elf)
{
	unsigned char head[TFA_ELF_HEAD_BYTES];
	char path[64];
	tfa_elf_t e;
	int fd = open_ro("/etc/passwd");

	ck_assert(!tfa_elf_open(fd, head, &e));
	close(fd);
	/* A header cut short. */
	synth_t cut = { .is64 = true, .type = 2, .machine = 62, .phentsize = 56, .phoff = 64, .file_len = 60 };
	fd = write_synth(&cut, path);
	ck_assert(!tfa_elf_open(fd, head, &e));
	close(fd);
	unlink(path);
	/* A relocatable object: an ELF file, its type the caller's to judge. */
	synth_t rel = { .is64 = true, .type = 1, .machine = 62, .phentsize = 0, .phoff = 0, .file_len = 64 };
	fd = write_synth(&rel, path);
	ck_assert(tfa_elf_open(fd, head, &e));
	ck_assert_uint_eq(e.type, 1);
	ck_assert(tfa_elf_is_native(&e));
	close(fd);
	unlink(path);
	/*
	 * A 64-bit program with its class byte made 32 (test_process.py's
	 * decoy): of another class, whatever its other fields say; its program
	 * headers are not of the class's size.
	 */
	fd = open_ro("/proc/self/exe");
	ck_assert(tfa_elf_open(fd, head, &e));
	close(fd);
	head[4] = 1;
	synth_t flipped = { .file_len = 0 };
	fd = write_synth(&flipped, path);
	ck_assert_int_eq(pwrite(fd, head, TFA_ELF_HEAD_BYTES, 0), TFA_ELF_HEAD_BYTES);
	ck_assert(tfa_elf_open(fd, head, &e));
	ck_assert(!e.is64);
	ck_assert(!tfa_elf_is_native(&e));
	tfa_elf_phdr_t ph;
	ck_assert(!tfa_elf_phdr(&e, 0, &ph));
	close(fd);
	unlink(path);
}
END_TEST

START_TEST(other_class_and_byte_order)
{
	unsigned char head[TFA_ELF_HEAD_BYTES];
	char path[64];
	tfa_elf_t e;
	tfa_elf_phdr_t ph;
	/* i386 (EM_386 3), 32-bit headers; ppc64 (EM_PPC64 21), big-endian. */
	synth_t i386 = { .is64 = false, .type = 2, .machine = 3, .phentsize = 32, .phnum = 4, .phoff = 52,
			 .file_len = 52 + 4 * 32 };
	synth_t ppc = { .is64 = true, .big_endian = true, .type = 3, .machine = 21, .phentsize = 56, .phnum = 4,
			.phoff = 64, .file_len = 64 + 4 * 56 };
	const synth_t *kinds[] = { &i386, &ppc };

	for (size_t k = 0; k < 2; k++) {
		int fd = write_synth(kinds[k], path);
		ck_assert(tfa_elf_open(fd, head, &e));
		ck_assert_int_eq(e.is64, kinds[k]->is64);
		ck_assert_int_eq(e.big_endian, kinds[k]->big_endian);
		ck_assert_uint_eq(e.machine, kinds[k]->machine);
		ck_assert_uint_eq(e.phnum, 4);
		ck_assert(!tfa_elf_is_native(&e));
		for (unsigned i = 0; i < 4; i++) {
			ck_assert(tfa_elf_phdr(&e, i, &ph));
			ck_assert_uint_eq(ph.type, i + 1);
			ck_assert_uint_eq(ph.offset, 0x1000 * (i + 1));
			ck_assert_uint_eq(ph.vaddr, 0x1000 * (i + 1) + 0x400000);
			ck_assert_uint_eq(ph.filesz, 0x10 * (i + 1));
		}
		ck_assert_int_eq(has_interp(&e), 1);
		/* Another kind's libraries are never this process's question. */
		int calls = 0;
		ck_assert(!tfa_elf_any_needed(&e, is_libc, &calls));
		ck_assert_int_eq(calls, 0);
		close(fd);
		unlink(path);
	}
}
END_TEST

START_TEST(headers_past_the_first_read)
{
	unsigned char head[TFA_ELF_HEAD_BYTES];
	char path[64];
	tfa_elf_t e;
	tfa_elf_phdr_t ph;
	/* Program headers at 4 KiB: read from the file one by one. */
	synth_t far = { .is64 = true, .type = 2, .machine = 62, .phentsize = 56, .phnum = 3, .phoff = 4096,
			.file_len = 4096 + 3 * 56 };
	/* One straddling the first read's end, then the file ends inside the third. */
	synth_t straddle = { .is64 = true, .type = 2, .machine = 62, .phentsize = 56, .phnum = 3,
			     .phoff = TFA_ELF_HEAD_BYTES - 30, .file_len = TFA_ELF_HEAD_BYTES - 30 + 2 * 56 + 20 };
	int fd = write_synth(&far, path);

	ck_assert(tfa_elf_open(fd, head, &e));
	for (unsigned i = 0; i < 3; i++) {
		ck_assert(tfa_elf_phdr(&e, i, &ph));
		ck_assert_uint_eq(ph.type, i + 1);
		ck_assert_uint_eq(ph.offset, 0x1000 * (i + 1));
	}
	ck_assert_int_eq(has_interp(&e), 1);
	close(fd);
	unlink(path);

	fd = write_synth(&straddle, path);
	ck_assert(tfa_elf_open(fd, head, &e));
	ck_assert(tfa_elf_phdr(&e, 0, &ph));
	ck_assert_uint_eq(ph.vaddr, 0x401000);
	ck_assert(tfa_elf_phdr(&e, 1, &ph));
	ck_assert_uint_eq(ph.filesz, 0x20);
	ck_assert(!tfa_elf_phdr(&e, 2, &ph));
	ck_assert_int_eq(has_interp(&e), -1);
	close(fd);
	unlink(path);
}
END_TEST

static Suite *
elf_suite(void)
{
	Suite *s = suite_create("elf");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, own_binary);
	tcase_add_test(tc, static_pie_and_shell);
	tcase_add_test(tc, not_elf);
	tcase_add_test(tc, other_class_and_byte_order);
	tcase_add_test(tc, headers_past_the_first_read);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(elf_suite());

	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
