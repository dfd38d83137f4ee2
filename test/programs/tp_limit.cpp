// SPDX-License-Identifier: MIT
//
// Run under a bytes limit of 8 MiB (TFALLOC_LIMIT=8M or tfalloc run --limit
// 8M): requests that would take the bytes in use past it fail as a real
// out-of-memory does.  Start-up allocations (libstdc++'s emergency pool) are
// assumed below 1 MiB.
//   malloc, calloc, aligned: NULL and ENOMEM; posix_memalign: ENOMEM
//   realloc: NULL and ENOMEM, the block intact
//   new, new[], aligned new: std::bad_alloc; nothrow new: nullptr
//   a new_handler is called, and new succeeds once it made room
// Prints the ledger of the allocations that succeeded (refused ones count
// nothing), and THROWS n: the exceptions thrown, each allocated by the C++
// runtime outside the ledger.  "baseline" does nothing.
#include <malloc.h>
#include <new>

#include "tp_common.h"

static const size_t MiB = 1048576;

static void *reserve;
static int handler_calls;

static void
free_reserve_handler()
{
	handler_calls++;
	if (reserve != nullptr) {
		free(reserve);
		tp_l_free(4 * MiB);
		reserve = nullptr;
	} else {
		std::set_new_handler(nullptr);
	}
}

static int giving_up_calls;

static void
giving_up_handler()
{
	giving_up_calls++;
	std::set_new_handler(nullptr); // the next failure throws
}

// Each exception thrown is allocated by the C++ runtime (one malloc and one
// free of a small block that the ledger cannot know): printed as THROWS n.
static int throws;

template <typename F>
static bool
throws_bad_alloc(F f)
{
	try {
		f();
	} catch (const std::bad_alloc &) {
		throws++;
		return true;
	}
	return false;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	void *p;

	errno = 0;
	p = malloc(16 * MiB);
	TP_CHECK(p == nullptr && errno == ENOMEM, "malloc(16 MiB) past the limit gave %p errno %d",
	         p, errno);

	reserve = malloc(4 * MiB);
	TP_CHECK(reserve != nullptr, "malloc(4 MiB) within the limit failed (errno %d)", errno);
	tp_l_alloc(4 * MiB);
	tp_fill(reserve, 4096, 9);

	// 4 MiB + 5 MiB > 8 MiB
	errno = 0;
	p = malloc(5 * MiB);
	TP_CHECK(p == nullptr && errno == ENOMEM, "malloc(5 MiB) past the limit gave %p errno %d",
	         p, errno);
	errno = 0;
	p = calloc(5, MiB);
	TP_CHECK(p == nullptr && errno == ENOMEM,
	         "calloc(5, 1 MiB) past the limit gave %p errno %d", p, errno);
	errno = 0;
	p = realloc(reserve, 9 * MiB);
	TP_CHECK(p == nullptr && errno == ENOMEM,
	         "realloc to 9 MiB past the limit gave %p errno %d", p, errno);
	TP_CHECK(tp_check_fill(reserve, 4096, 9), "refused realloc clobbered the block");
	void *sentinel = reinterpret_cast<void *>(0x5eed);
	p = sentinel;
	int rc = posix_memalign(&p, 64, 5 * MiB);
	TP_CHECK(rc == ENOMEM && p == sentinel, "posix_memalign past the limit returned %d, %p", rc,
	         p);
	errno = 0;
	p = aligned_alloc(64, 5 * MiB);
	TP_CHECK(p == nullptr && errno == ENOMEM, "aligned_alloc past the limit gave %p errno %d",
	         p, errno);
	errno = 0;
	p = memalign(4096, 5 * MiB);
	TP_CHECK(p == nullptr && errno == ENOMEM, "memalign past the limit gave %p errno %d", p,
	         errno);

	// Within the limit: 4 MiB + 2 MiB
	char *small = new char[2 * MiB];
	tp_l_alloc(2 * MiB);
	small[0] = 1;

	// new and new[] past the limit throw std::bad_alloc
	TP_CHECK(throws_bad_alloc([] {
		         volatile char *c = new char[5 * MiB];
		         c[0] = 0;
	         }),
	         "new char[5 MiB] past the limit did not throw");
	TP_CHECK(throws_bad_alloc([] {
		         volatile void *v = ::operator new(5 * MiB);
		         (void)v;
	         }),
	         "operator new(5 MiB) past the limit did not throw");
	TP_CHECK(throws_bad_alloc([] {
		         volatile void *v = ::operator new(5 * MiB, std::align_val_t(256));
		         (void)v;
	         }),
	         "aligned operator new past the limit did not throw");
	TP_CHECK(throws_bad_alloc([] {
		         volatile void *v = ::operator new[](5 * MiB, std::align_val_t(64));
		         (void)v;
	         }),
	         "aligned operator new[] past the limit did not throw");

	// nothrow new returns nullptr
	char *nt = new (std::nothrow) char[5 * MiB];
	TP_CHECK(nt == nullptr, "nothrow new[] past the limit gave %p", static_cast<void *>(nt));
	void *nt2 = ::operator new(5 * MiB, std::nothrow);
	TP_CHECK(nt2 == nullptr, "nothrow operator new past the limit gave %p", nt2);
	void *nt3 = ::operator new(5 * MiB, std::align_val_t(128), std::nothrow);
	TP_CHECK(nt3 == nullptr, "nothrow aligned operator new past the limit gave %p", nt3);

	// A new_handler that gives up: called once, then bad_alloc.
	std::set_new_handler(giving_up_handler);
	TP_CHECK(throws_bad_alloc([] {
		         volatile char *c = new char[5 * MiB];
		         c[0] = 0;
	         }),
	         "new past the limit with a giving-up handler did not throw");
	TP_CHECK(giving_up_calls == 1, "giving-up new_handler called %d times, want 1",
	         giving_up_calls);

	// A new_handler that makes room: new retries and succeeds.
	std::set_new_handler(free_reserve_handler);
	char *big = new char[5 * MiB]; // 6 MiB + 5 MiB > 8: handler frees 4 MiB, 2 + 5 fits
	TP_CHECK(handler_calls == 1, "room-making new_handler called %d times, want 1",
	         handler_calls);
	TP_CHECK(reserve == nullptr, "handler did not run");
	tp_l_alloc(5 * MiB);
	big[5 * MiB - 1] = 1;
	std::set_new_handler(nullptr);

	// Freed memory is usable again.
	delete[] big;
	tp_l_free(5 * MiB);
	void *again = malloc(5 * MiB);
	TP_CHECK(again != nullptr, "malloc(5 MiB) after freeing failed");
	tp_l_alloc(5 * MiB);
	free(again);
	tp_l_free(5 * MiB);
	delete[] small;
	tp_l_free(2 * MiB);

	// A small leak to check the report.
	void *leak = malloc(12345);
	TP_CHECK(leak != nullptr, "malloc(12345)");
	TP_KEEP(leak);
	tp_l_alloc(12345);

	tp_out("limit done\n");
	tp_out("THROWS %d\n", throws);
	tp_l_print();
	return 0;
}
