// SPDX-License-Identifier: MIT
//
// Memory errors the shim must detect, count and report without crashing and
// without handing the pointer to the allocator:
//   double_free      free(p) twice (also past glibc's thread cache); delete[] twice
//   invalid_free     free of a stack address, of an interior pointer, of an
//                    mmap'd page; realloc of a stack address
//   mismatched_free  new[] then free; malloc then delete; new then delete[]
//                    (the block is freed: a mismatch is still a free)
// Prints "ERROR <kind> <address>" for each, then the ledger.  Without the
// shim this program would abort (glibc detects the double free): it is only
// run under it.  With "baseline" it does nothing.
#include <new>
#include <sys/mman.h>

#include "tp_common.h"

#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#pragma GCC diagnostic ignored "-Wuse-after-free"

// Launders a pointer so that the compiler cannot see where it came from.
template <typename T>
static T *
hide(T *p)
{
	T *volatile v = p;
	return v;
}

static void
report(const char *kind, const void *addr)
{
	tp_out("ERROR %s %p\n", kind, addr);
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;

	// A block that stays live through everything: it must survive intact.
	unsigned char *keep = static_cast<unsigned char *>(malloc(777));
	TP_CHECK(keep != nullptr, "malloc(777)");
	tp_fill(keep, 777, 1);
	tp_l_alloc(777);

	// double free
	char *p = static_cast<char *>(malloc(40));
	TP_CHECK(p != nullptr, "malloc(40)");
	tp_l_alloc(40);
	free(p);
	tp_l_free(40);
	free(hide(p));
	report("double_free", p);

	// A double free of a block past glibc's thread cache (seven blocks of its size
	// freed before it): under TFALLOC_ALLOCATOR=glibc it would sit in a fast bin
	// and look in use, like a block glibc made out of the shim's sight.
	char *eight[8];
	for (int i = 0; i < 8; i++) {
		eight[i] = static_cast<char *>(malloc(24));
		TP_CHECK(eight[i] != nullptr, "malloc(24)");
		tp_l_alloc(24);
	}
	// Live until the end: the eighth block does not merge into glibc's top chunk.
	void *after = malloc(24);
	TP_CHECK(after != nullptr, "malloc(24)");
	tp_l_alloc(24);
	for (int i = 0; i < 8; i++) {
		free(eight[i]);
		tp_l_free(24);
	}
	free(hide(eight[7]));
	report("double_free", eight[7]);

	char *s = new char[3000];
	tp_l_alloc(3000);
	delete[] s;
	tp_l_free(3000);
	delete[] hide(s);
	report("double_free", s);

	// invalid frees: never handed out
	char stack_buf[64];
	memset(stack_buf, 0, sizeof(stack_buf));
	free(hide(stack_buf));
	report("invalid_free", stack_buf);

	char *q = static_cast<char *>(malloc(256));
	TP_CHECK(q != nullptr, "malloc(256)");
	tp_l_alloc(256);
	tp_fill(q, 256, 2);
	free(hide(q + 8));
	report("invalid_free", q + 8);
	TP_CHECK(tp_check_fill(q, 256, 2), "the block of an interior free was clobbered");
	free(q);
	tp_l_free(256);

	void *page =
	        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	TP_CHECK(page != MAP_FAILED, "mmap");
	free(hide(page));
	report("invalid_free", page);
	munmap(page, 4096);

	long stack_word[4] = { 1, 2, 3, 4 };
	void *r = realloc(hide(stack_word), 100);
	report("invalid_free", stack_word);
	TP_CHECK(stack_word[0] == 1 && stack_word[3] == 4,
	         "realloc of a stack address wrote to it");
	if (r != nullptr) {
		// Not required either way; account for it if the shim made a block.
		tp_l_alloc(100);
		tp_l_maybe_realloc();
		free(r);
		tp_l_free(100);
	}

	// mismatched frees (the block is released).  All three are made before
	// any is freed, so that no address is reused between them.
	char *na = new char[100];
	tp_l_alloc(100);
	int *mi = static_cast<int *>(malloc(sizeof(int)));
	TP_CHECK(mi != nullptr, "malloc(4)");
	tp_l_alloc(sizeof(int));
	double *nd = new double(1.5);
	tp_l_alloc(sizeof(double));

	free(hide(na));
	tp_l_free(100);
	report("mismatched_free", na);
	delete hide(mi);
	tp_l_free(sizeof(int));
	report("mismatched_free", mi);
	delete[] hide(nd);
	tp_l_free(sizeof(double));
	report("mismatched_free", nd);

	TP_CHECK(tp_check_fill(keep, 777, 1), "a live block was clobbered");
	// keep (777 bytes) leaks
	TP_KEEP(keep);
	free(after);
	tp_l_free(24);
	tp_out("errors done\n");
	tp_l_print();
	return 0;
}
