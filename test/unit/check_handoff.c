/* SPDX-License-Identifier: MIT */
/*
 * core/handoff.h: the user's directory made before a change of user, the
 * descriptors made inheritable for an exec and named in TFALLOC_HANDOFF, and
 * the new program taking only those that still name the file the variable
 * says.
 */
#include "core/handoff.h"

#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void
reset(void)
{
	tfa_kept_fd_drop(&tfa_handoff_user_dir);
}

static bool
cloexec(int fd)
{
	int flags = fcntl(fd, F_GETFD);

	ck_assert_int_ge(flags, 0);
	return (flags & FD_CLOEXEC) != 0;
}

/* A new directory under /tmp (its path into dir, 32 bytes) and a descriptor to it. */
static int
open_temp_dir(char *dir, int flags)
{
	strcpy(dir, "/tmp/check_handoff.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	int fd = open(dir, O_RDONLY | O_DIRECTORY | flags);
	ck_assert_int_ge(fd, 0);
	return fd;
}

/* "u:FD:DEV:INO" of fd. */
static void
entry_of(char *buf, size_t size, char what, int fd)
{
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	snprintf(buf, size, "%c:%d:%llu:%llu", what, fd, (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
}

START_TEST(receive_takes_the_named_file)
{
	char dir[32], value[128];
	int fd = open_temp_dir(dir, 0); /* inherited: no close-on-exec */

	reset();
	entry_of(value, sizeof(value), 'u', fd);
	tfa_handoff_receive(value);
	ck_assert_int_eq(tfa_handoff_user_dir.fd, fd);
	ck_assert(tfa_kept_fd_ours(&tfa_handoff_user_dir));
	ck_assert(cloexec(fd));
	reset();
	rmdir(dir);
}
END_TEST

START_TEST(receive_refuses_others)
{
	char dir[32], value[256], good[128];
	int fd = open_temp_dir(dir, 0);
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	entry_of(good, sizeof(good), 'u', fd);

	const char *bad[] = { "", "u", "u:", "u:x:1:1", "u:5:1", "u:5:1:", "u:5:1:1x", "x:5:1:1",
			      "u:99999999999999999999:1:1", "u:-3:1:1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		reset();
		tfa_handoff_receive(bad[i]);
		ck_assert_int_lt(tfa_handoff_user_dir.fd, 0);
	}
	/* The number names another file now: another inode, another device. */
	snprintf(value, sizeof(value), "u:%d:%llu:%llu", fd, (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino + 1);
	tfa_handoff_receive(value);
	ck_assert_int_lt(tfa_handoff_user_dir.fd, 0);
	snprintf(value, sizeof(value), "u:%d:%llu:%llu", fd, (unsigned long long)st.st_dev + 1,
		 (unsigned long long)st.st_ino);
	tfa_handoff_receive(value);
	ck_assert_int_lt(tfa_handoff_user_dir.fd, 0);
	ck_assert(!cloexec(fd));
	/* A good entry after an unknown kind is still taken; the first of a kind wins. */
	snprintf(value, sizeof(value), "z:1:2:3,%s,u:0:1:1", good);
	tfa_handoff_receive(value);
	ck_assert_int_eq(tfa_handoff_user_dir.fd, fd);
	reset();
	rmdir(dir);
}
END_TEST

START_TEST(begin_and_end)
{
	char dir[32], var[160], want[160];
	int fd = open_temp_dir(dir, O_CLOEXEC);

	reset();
	ck_assert_uint_eq(tfa_handoff_begin(var, sizeof(var)), 0);
	ck_assert_str_eq(var, "");
	tfa_kept_fd_take(&tfa_handoff_user_dir, fd);
	int kept = tfa_handoff_user_dir.fd;
	ck_assert(cloexec(kept));
	size_t n = tfa_handoff_begin(var, sizeof(var));
	ck_assert_uint_gt(n, 0);
	char entry[128];
	entry_of(entry, sizeof(entry), 'u', kept);
	snprintf(want, sizeof(want), "TFALLOC_HANDOFF=%s", entry);
	ck_assert_str_eq(var, want);
	ck_assert_uint_eq(n, strlen(want));
	ck_assert(!cloexec(kept));
	int fds[4];
	ck_assert_uint_eq(tfa_handoff_fds(fds, 4), 1);
	ck_assert_int_eq(fds[0], kept);
	tfa_handoff_end();
	ck_assert(cloexec(kept));
	/* Too small a buffer: nothing handed off, nothing made inheritable. */
	ck_assert_uint_eq(tfa_handoff_begin(var, 20), 0);
	ck_assert_str_eq(var, "");
	ck_assert(cloexec(kept));
	/* The program closed it and opened another file under the number: not ours, nothing handed off. */
	close(kept);
	int other = open("/dev/null", O_RDONLY);
	ck_assert_int_ge(other, 0);
	if (other != kept) {
		ck_assert_int_eq(dup2(other, kept), kept);
		close(other);
	}
	ck_assert_uint_eq(tfa_handoff_begin(var, sizeof(var)), 0);
	close(kept);
	tfa_handoff_user_dir.fd = -1;
	rmdir(dir);
}
END_TEST

START_TEST(user_dir)
{
	char out[] = "/tmp/check_handoff.XXXXXX", sub[PATH_MAX];
	ck_assert_ptr_nonnull(mkdtemp(out));
	ck_assert_int_eq(chmod(out, 0700), 0);
	snprintf(sub, sizeof(sub), "%s/uid-65534", out);
	struct stat st;

	reset();
	tfa_handoff_prepare_user_dir(out, 65534);
	if (geteuid() != 0) {
		/* Not privileged: it cannot give a directory away, and leaves none. */
		ck_assert_int_lt(tfa_handoff_user_dir.fd, 0);
		ck_assert_int_ne(lstat(sub, &st), 0);
		rmdir(out);
		return;
	}
	ck_assert(tfa_kept_fd_ours(&tfa_handoff_user_dir));
	ck_assert(cloexec(tfa_handoff_user_dir.fd));
	ck_assert_int_eq(lstat(sub, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_int_eq(st.st_uid, 65534);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	/* Made before: kept again. */
	reset();
	tfa_handoff_prepare_user_dir(out, 65534);
	ck_assert(tfa_kept_fd_ours(&tfa_handoff_user_dir));
	/* The user's own, or one open to all: nothing to make. */
	reset();
	ck_assert_int_eq(rmdir(sub), 0);
	ck_assert_int_eq(chmod(out, 01777), 0);
	tfa_handoff_prepare_user_dir(out, 65534);
	ck_assert_int_lt(tfa_handoff_user_dir.fd, 0);
	ck_assert_int_ne(lstat(sub, &st), 0);
	ck_assert_int_eq(chmod(out, 0700), 0);
	ck_assert_int_eq(chown(out, 65534, (gid_t)-1), 0);
	tfa_handoff_prepare_user_dir(out, 65534);
	ck_assert_int_lt(tfa_handoff_user_dir.fd, 0);
	ck_assert_int_eq(chown(out, 0, (gid_t)-1), 0);
	/* A symlink under the name, or a directory of someone else's: not taken. */
	ck_assert_int_eq(symlink("/", sub), 0);
	tfa_handoff_prepare_user_dir(out, 65534);
	ck_assert_int_lt(tfa_handoff_user_dir.fd, 0);
	ck_assert_int_eq(unlink(sub), 0);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	tfa_handoff_prepare_user_dir(out, 65534);
	ck_assert_int_lt(tfa_handoff_user_dir.fd, 0);
	rmdir(sub);
	rmdir(out);
}
END_TEST

static Suite *
handoff_suite(void)
{
	Suite *s = suite_create("handoff");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, receive_takes_the_named_file);
	tcase_add_test(tc, receive_refuses_others);
	tcase_add_test(tc, begin_and_end);
	tcase_add_test(tc, user_dir);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(handoff_suite());

	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
