// SPDX-License-Identifier: MIT
//
// A daemon that drops root: it keeps a block of 1000 bytes, changes its ids
// to nobody's (65534), keeps a block of 5000 bytes and returns; both blocks
// are leaked.  Its output directory is root's alone (mode 0700, as tfalloc
// run makes it), so that only a descriptor taken before the change can
// still write the profile.  Run as root.
//
//   setuid      setgid, then setuid.
//   setresuid   setresgid, then setresuid.
//   seteuid     seteuid to nobody and back to root, then the 1000 bytes and
//               a pause of 50 ms in which it allocates (a snapshot is
//               written meanwhile under TFALLOC_FLUSH_INTERVAL_MS=10, and
//               replaces the file the first change reserved), then setuid.
//   chroot DIR  a block of 4000 bytes kept in a global (reachable), then
//               chroot into DIR (empty: no /proc there either) and chdir /,
//               with the 1000 bytes before and the 5000 after, as above.
//
//   unshare     a block of 4000 bytes kept in a global (reachable) and the 1000
//               bytes; new mount and pid namespaces (the mounts made private
//               first, as unshare(1) does), a child (pid 1 there) mounts a
//               proc of the new pid namespace on /proc and exits; the parent,
//               outside that namespace, finds no /proc/self then; the 5000
//               bytes.  Prints "unshared", or "unshare refused" where the
//               namespaces cannot be made.
//   sandbox     a block of 4000 bytes kept in a global (reachable) and the 1000
//               bytes; then a seccomp filter (after PR_SET_NO_NEW_PRIVS, as
//               libseccomp sets it) that refuses open, openat and creat with
//               ENOSYS, as man-db's sandbox refuses to create files; the 5000
//               bytes.  Prints "sandboxed".  Needs no root.
//   sandbox-exec  a sandbox as man-db's: files may be opened to read, none to
//               write or create; then exec of itself as "after-sandbox",
//               which loses a block of 3000 bytes and prints "sandboxed
//               image" (man-db runs col so).
//   killed      setuid(0) (root stays root: the change is asked all the same),
//               then SIGKILL: what is left under the profile's name is the
//               snapshot the change made, not an empty file.
//
//   exec        the 1000 bytes, then setgid and setuid to nobody, and exec of
//               itself as "after-exec": a program started as nobody, in an
//               output directory nobody may not write, under a parent
//               nobody may not search (root's home is 0700).
//   after-exec  a block of 3000 bytes lost, "uid N", then system() of itself
//               as "after-system" (through a shell: a spawn, then an exec),
//               whose status it returns.
//   after-system  a block of 7000 bytes lost, "child uid N".
//   exec-swap DIR  as exec, the new image run as "after-swap DIR": it
//               allocates for 50 ms (snapshots are written meanwhile under
//               TFALLOC_FLUSH_INTERVAL_MS=10), then closes the descriptor
//               of the output directory's uid-N it was handed and opens DIR
//               under the same number, as a daemon that closed its
//               descriptors and opened its own might; "swapped FD".
//
//   early       prints "early prctl N": what prctl returned (0, or errno) in the
//               constructor of tp_early, a library the loader starts before
//               the shim (it had been ENOSYS: nothing resolved yet).
//
// Prints "uid 65534" when the ids changed, "chrooted" after a chroot.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>

#include "tp_common.h"

#define NOBODY 65534

int tp_early_prctl(void); /* tp_early.c */

static void *volatile reachable; /* stays: a root the scan must find */

static void
allocate_for(long ms)
{
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		void *p = malloc(64);
		TP_KEEP(p);
		free(p);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

/* Loads a seccomp filter, after PR_SET_NO_NEW_PRIVS as libseccomp sets it. */
static void
load_filter(struct sock_filter *filter, size_t n)
{
	struct sock_fprog prog = { .len = (unsigned short)n, .filter = filter };

	TP_CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS");
	TP_CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0, "PR_SET_SECCOMP");
}

/*
 * A seccomp filter that refuses open, openat and creat with ENOSYS, as
 * man-db's sandbox refuses to create files.
 */
static void
sandbox(void)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 3, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_open, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_creat, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
	};
	load_filter(filter, sizeof(filter) / sizeof(filter[0]));
	TP_CHECK(open("/dev/null", O_RDONLY) < 0 && errno == ENOSYS, "the filter refuses open");
}

/*
 * A filter as man-db's sandbox has it: files opened to read, none to write
 * or create (ENOSYS), so that an executed program still loads.
 */
static void
sandbox_writes(void)
{
	const unsigned writes = O_ACCMODE | O_CREAT;
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 2),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, writes, 5, 4),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_open, 0, 2),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, writes, 2, 1),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_creat, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
	};
	load_filter(filter, sizeof(filter) / sizeof(filter[0]));
	int fd = open("/dev/null", O_RDONLY);
	TP_CHECK(fd >= 0 && open("/dev/null", O_WRONLY) < 0 && errno == ENOSYS, "the filter refuses writes only");
	close(fd);
}

/* After the change: the 1000 bytes dropped, 5000 more lost, and the line said. */
static int
confined(void *kept, const char *said)
{
	TP_KEEP(kept);
	kept = NULL;
	void *more = malloc(5000);
	TP_KEEP(more);
	more = NULL;
	TP_KEEP(NULL);
	tp_out("%s\n", said);
	return 0;
}

int
main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	void *kept = NULL;

	if (strcmp(mode, "seteuid") == 0) {
		TP_CHECK(seteuid(NOBODY) == 0 && seteuid(0) == 0, "seteuid");
		kept = malloc(1000);
		allocate_for(50);
		TP_CHECK(setgid(NOBODY) == 0 && setuid(NOBODY) == 0, "setuid");
	} else if (strcmp(mode, "setuid") == 0) {
		kept = malloc(1000);
		TP_CHECK(setgid(NOBODY) == 0 && setuid(NOBODY) == 0, "setuid");
	} else if (strcmp(mode, "setresuid") == 0) {
		kept = malloc(1000);
		TP_CHECK(setresgid(NOBODY, NOBODY, NOBODY) == 0 && setresuid(NOBODY, NOBODY, NOBODY) == 0,
			 "setresuid");
	} else if (strcmp(mode, "chroot") == 0 && argc > 2) {
		reachable = malloc(4000);
		kept = malloc(1000);
		TP_CHECK(chroot(argv[2]) == 0 && chdir("/") == 0, "chroot %s", argv[2]);
		return confined(kept, "chrooted");
	} else if (strcmp(mode, "unshare") == 0) {
		reachable = malloc(4000);
		kept = malloc(1000);
		if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0) {
			tp_out("unshare refused\n");
			return 0;
		}
		TP_CHECK(mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0, "the mounts made private");
		pid_t child = fork();
		TP_CHECK(child >= 0, "fork");
		if (child == 0) {
			TP_CHECK(mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0,
				 "mount proc");
			_exit(0);
		}
		int status;
		TP_CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
			 "the child");
		TP_CHECK(access("/proc/self/maps", R_OK) != 0, "/proc/self still names this process");
		return confined(kept, "unshared");
	} else if (strcmp(mode, "sandbox") == 0) {
		reachable = malloc(4000);
		kept = malloc(1000);
		sandbox();
		return confined(kept, "sandboxed");
	} else if (strcmp(mode, "sandbox-exec") == 0) {
		sandbox_writes();
		execl(argv[0], argv[0], "after-sandbox", (char *)NULL);
		TP_CHECK(0, "exec %s", argv[0]);
	} else if (strcmp(mode, "after-sandbox") == 0) {
		TP_CHECK(open("/dev/null", O_WRONLY) < 0 && errno == ENOSYS, "the filter refuses open to write");
		void *lost = malloc(3000);
		TP_KEEP(lost);
		lost = NULL;
		TP_KEEP(NULL);
		tp_out("sandboxed image\n");
		return 0;
	} else if (strcmp(mode, "exec") == 0) {
		kept = malloc(1000);
		TP_KEEP(kept);
		TP_CHECK(setgid(NOBODY) == 0 && setuid(NOBODY) == 0, "setuid");
		execl(argv[0], argv[0], "after-exec", (char *)NULL);
		TP_CHECK(0, "exec %s", argv[0]);
	} else if (strcmp(mode, "after-exec") == 0) {
		void *lost = malloc(3000);
		TP_KEEP(lost);
		lost = NULL;
		TP_KEEP(NULL);
		tp_out("uid %d\n", (int)getuid());
		char line[4200];
		snprintf(line, sizeof(line), "%s after-system", argv[0]);
		int status = system(line);
		return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	} else if (strcmp(mode, "exec-swap") == 0 && argc > 2) {
		TP_CHECK(setgid(NOBODY) == 0 && setuid(NOBODY) == 0, "setuid");
		execl(argv[0], argv[0], "after-swap", argv[2], (char *)NULL);
		TP_CHECK(0, "exec %s", argv[0]);
	} else if (strcmp(mode, "after-swap") == 0 && argc > 2) {
		void *lost = malloc(3000);
		TP_KEEP(lost);
		lost = NULL;
		TP_KEEP(NULL);
		allocate_for(50);
		int handed = -1;
		for (int fd = 3; fd < 4096 && handed < 0; fd++) {
			char link[64], target[4096];
			snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
			ssize_t n = readlink(link, target, sizeof(target) - 1);
			if (n > 0) {
				target[n] = '\0';
				const char *base = strrchr(target, '/');
				if (base != NULL && strcmp(base, "/uid-65534") == 0)
					handed = fd;
			}
		}
		TP_CHECK(handed >= 0, "no descriptor of uid-65534");
		int mine = open(argv[2], O_RDONLY | O_DIRECTORY);
		TP_CHECK(mine >= 0 && dup2(mine, handed) == handed, "open %s onto %d", argv[2], handed);
		close(mine);
		tp_out("swapped %d\n", handed);
		return 0;
	} else if (strcmp(mode, "after-system") == 0) {
		void *lost = malloc(7000);
		TP_KEEP(lost);
		lost = NULL;
		TP_KEEP(NULL);
		tp_out("child uid %d\n", (int)getuid());
		return 0;
	} else if (strcmp(mode, "early") == 0) {
		tp_out("early prctl %d\n", tp_early_prctl());
		return 0;
	} else if (strcmp(mode, "killed") == 0) {
		kept = malloc(1000);
		TP_KEEP(kept);
		TP_CHECK(setuid(0) == 0, "setuid(0)");
		raise(SIGKILL);
		return 1;
	} else {
		tp_printf(2, "usage: tp_setuid setuid | setresuid | seteuid | exec | chroot DIR | unshare | sandbox | early | killed\n");
		return 2;
	}
	TP_KEEP(kept);
	kept = NULL;
	void *more = malloc(5000);
	TP_KEEP(more);
	more = NULL;
	TP_KEEP(NULL); /* no pointer left to either block: both definitely lost */
	tp_out("uid %d\n", (int)getuid());
	return 0;
}
