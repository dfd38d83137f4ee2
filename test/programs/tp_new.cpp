// SPDX-License-Identifier: MIT
//
// Every form of operator new and delete, with exact counts: plain, array,
// sized delete, aligned (std::align_val_t), nothrow, over-aligned types,
// operator new(0).  No exception is thrown, no iostream is used.  A form the
// shim did not interpose would show up as a mismatched free or a wrong count.
// Leaks: one new'd int (4 bytes), one new int[25] (100 bytes), one aligned
// operator new(640, 128).  "baseline" does nothing.
#include <new>

#include "tp_common.h"

struct alignas(256) Big {
	char data[1000];
};

struct Plain {
	long a, b, c;
};

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;

	int *i1 = new int(42);
	tp_l_alloc(sizeof(int));
	int *arr = new int[10];
	tp_l_alloc(10 * sizeof(int));
	delete i1; // sized delete (C++14)
	tp_l_free(sizeof(int));
	delete[] arr;
	tp_l_free(10 * sizeof(int));

	void *a = ::operator new(100);
	tp_l_alloc(100);
	void *b = ::operator new(101);
	tp_l_alloc(101);
	::operator delete(a);
	tp_l_free(100);
	::operator delete(b, 101);
	tp_l_free(101);

	void *c = ::operator new[](200);
	tp_l_alloc(200);
	void *d = ::operator new[](201);
	tp_l_alloc(201);
	::operator delete[](c);
	tp_l_free(200);
	::operator delete[](d, 201);
	tp_l_free(201);

	void *e = ::operator new(100, std::align_val_t(64));
	TP_CHECK(tp_aligned(e, 64), "aligned new(64) gave %p", e);
	tp_l_alloc(100);
	void *f = ::operator new(4000, std::align_val_t(4096));
	TP_CHECK(tp_aligned(f, 4096), "aligned new(4096) gave %p", f);
	tp_l_alloc(4000);
	::operator delete(e, std::align_val_t(64));
	tp_l_free(100);
	::operator delete(f, 4000, std::align_val_t(4096));
	tp_l_free(4000);

	void *g = ::operator new[](300, std::align_val_t(128));
	TP_CHECK(tp_aligned(g, 128), "aligned new[](128) gave %p", g);
	tp_l_alloc(300);
	void *h = ::operator new[](301, std::align_val_t(32));
	TP_CHECK(tp_aligned(h, 32), "aligned new[](32) gave %p", h);
	tp_l_alloc(301);
	::operator delete[](g, std::align_val_t(128));
	tp_l_free(300);
	::operator delete[](h, 301, std::align_val_t(32));
	tp_l_free(301);

	void *n1 = ::operator new(50, std::nothrow);
	TP_CHECK(n1 != nullptr, "nothrow new");
	tp_l_alloc(50);
	void *n2 = ::operator new[](60, std::nothrow);
	TP_CHECK(n2 != nullptr, "nothrow new[]");
	tp_l_alloc(60);
	void *n3 = ::operator new(70, std::align_val_t(64), std::nothrow);
	TP_CHECK(n3 != nullptr && tp_aligned(n3, 64), "nothrow aligned new gave %p", n3);
	tp_l_alloc(70);
	void *n4 = ::operator new[](80, std::align_val_t(512), std::nothrow);
	TP_CHECK(n4 != nullptr && tp_aligned(n4, 512), "nothrow aligned new[] gave %p", n4);
	tp_l_alloc(80);
	::operator delete(n1, std::nothrow);
	tp_l_free(50);
	::operator delete[](n2, std::nothrow);
	tp_l_free(60);
	::operator delete(n3, std::align_val_t(64), std::nothrow);
	tp_l_free(70);
	::operator delete[](n4, std::align_val_t(512), std::nothrow);
	tp_l_free(80);

	// Over-aligned types use the aligned forms implicitly.
	Big *big = new Big;
	TP_CHECK(tp_aligned(big, 256), "new Big gave %p", static_cast<void *>(big));
	tp_l_alloc(sizeof(Big));
	Big *bigs = new Big[3];
	TP_CHECK(tp_aligned(bigs, 256), "new Big[3] gave %p", static_cast<void *>(bigs));
	tp_l_alloc(3 * sizeof(Big));
	delete big;
	tp_l_free(sizeof(Big));
	delete[] bigs;
	tp_l_free(3 * sizeof(Big));

	Plain *pl = new Plain[4];
	tp_l_alloc(4 * sizeof(Plain));
	delete[] pl;
	tp_l_free(4 * sizeof(Plain));

	// operator new(0) returns a unique pointer
	void *z1 = ::operator new(0);
	void *z2 = ::operator new(0);
	TP_CHECK(z1 != nullptr && z2 != nullptr && z1 != z2, "operator new(0) gave %p and %p", z1,
	         z2);
	tp_l_alloc(0);
	tp_l_alloc(0);
	::operator delete(z1);
	tp_l_free(0);
	::operator delete(z2);
	tp_l_free(0);

	// leaks
	int *leak1 = new int(7);
	tp_l_alloc(sizeof(int));
	int *leak2 = new int[25];
	tp_l_alloc(25 * sizeof(int));
	void *leak3 = ::operator new(640, std::align_val_t(128));
	tp_l_alloc(640);
	TP_KEEP(leak1);
	TP_KEEP(leak2);
	TP_KEEP(leak3);

	tp_out("new done\n");
	tp_l_print();
	return 0;
}
