// SPDX-License-Identifier: MIT
// C++ frames for check_cfi: a template, a lambda through std::function, and
// std::sort's comparator (libstdc++'s inlined algorithm frames), -O2.
#include <algorithm>
#include <functional>
#include <vector>

#include "cfi_frames.h"

namespace {

template <int N>
__attribute__((noinline)) void
nest(const std::function<void()> &fn)
{
	volatile int pad = N;
	if constexpr (N == 0)
		fn();
	else
		nest<N - 1>(fn);
	__asm__ volatile("" ::: "memory");
	(void)pad;
}

} // namespace

extern "C" __attribute__((noinline)) void
frames_cxx(frames_leaf_fn leaf, void *arg)
{
	std::vector<int> v;
	for (int i = 0; i < 64; i++)
		v.push_back((i * 7919) % 97);
	int calls = 0;
	std::sort(v.begin(), v.end(), [&](int a, int b) {
		if (calls++ == 5)
			nest<3>([&] { leaf(arg); });
		return a < b;
	});
	__asm__ volatile("" ::: "memory");
}
