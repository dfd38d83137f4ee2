// SPDX-License-Identifier: MIT
//
// A daemon's start: every descriptor from 3 on is closed (close_range), then
// the program opens its own files, which take the lowest numbers, 3 and 4,
// and allocates where tfalloc's walker hands the stack to libunwind (a
// signal handler's frame).  libunwind had made its pipe at 3 and 4 at the
// shim's start, and kept using those numbers: it read a byte of the
// program's input per check and wrote one into its output.
//
// usage: tp_closefds DIR   (DIR/in is written, then DIR/in and DIR/out are
// the program's files).  Prints what it read, where its input's offset is,
// and what its output holds: the same with tfalloc.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tp_common.h"

#define INPUT "the program's own input\n"
#define OUTPUT "the program's own output\n"

static void
on_usr1(int sig)
{
	(void)sig;
	void *p = malloc(100);
	TP_KEEP(p);
	free(p);
}

static volatile int calls;

static __attribute__((noinline)) void
allocate_at_depth(int depth)
{
	if (depth > 0) {
		allocate_at_depth(depth - 1);
		calls++; /* not a tail call: a frame per level */
		return;
	}
	raise(SIGUSR1);
}

int
main(int argc, char **argv)
{
	char in[4096], out[4096];

	if (argc != 2) {
		tp_printf(2, "usage: tp_closefds DIR\n");
		return 2;
	}
	snprintf(in, sizeof(in), "%s/in", argv[1]);
	snprintf(out, sizeof(out), "%s/out", argv[1]);
	int w = open(in, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	TP_CHECK(w >= 0, "cannot create %s", in);
	tp_write_all(w, INPUT, strlen(INPUT));
	close(w);

	TP_CHECK(syscall(SYS_close_range, 3u, ~0u, 0u) == 0, "close_range");
	int a = open(in, O_RDONLY);
	int b = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	tp_out("descriptors %d %d\n", a, b);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	for (int i = 0; i < 64; i++)
		allocate_at_depth(i % 16);

	char buf[128];
	ssize_t n = read(a, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	tp_out("read %zd bytes: %s", n, buf);
	tp_out("input offset %ld\n", (long)lseek(a, 0, SEEK_CUR));
	tp_write_all(b, OUTPUT, strlen(OUTPUT));
	close(b);
	int c = open(out, O_RDONLY);
	n = read(c, buf, sizeof(buf) - 1);
	tp_out("output holds %zd bytes:", n);
	for (ssize_t i = 0; i < n; i++)
		tp_out(" %02x", (unsigned char)buf[i]);
	tp_out("\n");
	return 0;
}
