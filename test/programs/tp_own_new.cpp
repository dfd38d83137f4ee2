// SPDX-License-Identifier: MIT
//
// A program that replaces the global scalar operator new with one over
// malloc and keeps the default operator delete (whose free takes the block),
// as the C++ standard lets it: the blocks of new and of the library's
// containers are malloc's, freed by delete, and that is no error.  Built
// again with TP_ALIGNED_ONLY as tp_own_new_aligned, which replaces only the
// aligned operator new (over aligned_alloc), for its over-aligned objects.  Two real
// mismatches stay errors: new[] (not replaced) freed by delete, and malloc
// freed by delete[].  Prints "ERROR mismatched_free ADDRESS" for each, and
// "own new: N strings".  With "baseline" it does nothing.
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "tp_common.h"

#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#ifdef TP_ALIGNED_ONLY
// The aligned operator new only (tp_own_new_aligned), over aligned_alloc.
void *
operator new(std::size_t n, std::align_val_t al)
{
	std::size_t a = static_cast<std::size_t>(al);
	void *p = std::aligned_alloc(a, (n + a - 1) / a * a);
	if (p == nullptr)
		throw std::bad_alloc();
	return p;
}
#else
void *
operator new(std::size_t n)
{
	void *p = std::malloc(n != 0 ? n : 1);
	if (p == nullptr)
		throw std::bad_alloc();
	return p;
}
#endif

struct alignas(64) Wide {
	char c[64];
};

template <typename T>
static T *
hide(T *p)
{
	T *volatile v = p;
	return v;
}

int
main(int argc, char **argv)
{
	if (tp_is_baseline(argc, argv))
		return 0;
	{
		std::vector<std::string> v;
		for (int i = 0; i < 100; i++)
			v.push_back(std::string(50, (char)('a' + i % 26)));
		int *x = new int(5);
		delete hide(x);
		for (int i = 0; i < 10; i++) {
			Wide *w = new Wide;
			delete hide(w);
		}
		tp_out("own new: %zu strings\n", v.size());
	}
	char *a = new char[64];
	delete hide(a);
	tp_out("ERROR mismatched_free %p\n", (void *)a);
	char *m = static_cast<char *>(std::malloc(80));
	delete[] hide(m);
	tp_out("ERROR mismatched_free %p\n", (void *)m);
	return 0;
}
