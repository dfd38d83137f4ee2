// SPDX-License-Identifier: MIT
// Fixture of check_symbolize: a C++ call site, so that names are mangled in
// the symbol table and in DW_AT_linkage_name and the symbolizer must demangle
// them.  Built without exceptions or RTTI: the library needs no libstdc++.
#include "symbolize_fixture.h"

namespace tfa_fixture
{

template <typename T> struct Widget {
	T value;
	__attribute__((noinline, noclone)) void poke(T delta, tfa_symfix_site *s);
};

template <typename T>
void
Widget<T>::poke(T delta, tfa_symfix_site *s)
{
	value += delta;
	s->ret = tfa_symfix_leaf(), s->line[0] = __LINE__;
	value += delta;
	s->depth = 1;
}

template struct Widget<int>;

} // namespace tfa_fixture

extern "C" void
tfa_symfix_cxx(tfa_symfix_site *s)
{
	static tfa_fixture::Widget<int> w;
	w.poke(2, s);
}
