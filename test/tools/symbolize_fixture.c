/* SPDX-License-Identifier: MIT */
/*
 * Fixture of check_symbolize: call sites whose return addresses and source
 * lines are known.  Every call and the store of __LINE__ that names its line
 * are one statement ("call(), SYMFIX_LINE(s, i);"), on one source line, so
 * the line the symbolizer gives for the return address (minus one) is that
 * __LINE__.
 *
 * The functions are exported, noinline and noclone: no clone renames them
 * (.constprop, .isra) and no tail call replaces a return address.  The two
 * always_inline functions are inlined into tfa_symfix_outer, which gives the
 * chain of three frames the test expects.
 */
#include "symbolize_fixture.h"

#define SYMFIX_NOINLINE      __attribute__((noinline, noclone, used))
#define SYMFIX_ALWAYS_INLINE static inline __attribute__((always_inline))
#define SYMFIX_LINE(s, i)    ((s)->line[i] = __LINE__)

/* Keeps the compiler from merging or moving the calls. */
static volatile int symfix_sink;

SYMFIX_NOINLINE uintptr_t
tfa_symfix_leaf(void)
{
	symfix_sink++;
	return (uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0));
}

SYMFIX_NOINLINE void tfa_symfix_direct(struct tfa_symfix_site *s);

SYMFIX_NOINLINE void
tfa_symfix_direct(struct tfa_symfix_site *s)
{
	symfix_sink++;
	s->ret = tfa_symfix_leaf(), SYMFIX_LINE(s, 0);
	s->depth = 1;
}

SYMFIX_ALWAYS_INLINE void
tfa_symfix_inner(struct tfa_symfix_site *s)
{
	symfix_sink++;
	s->ret = tfa_symfix_leaf(), SYMFIX_LINE(s, 0);
	symfix_sink++;
}

SYMFIX_ALWAYS_INLINE void
tfa_symfix_middle(struct tfa_symfix_site *s)
{
	symfix_sink++;
	tfa_symfix_inner(s), SYMFIX_LINE(s, 1);
	symfix_sink++;
}

SYMFIX_NOINLINE void tfa_symfix_outer(struct tfa_symfix_site *s);

SYMFIX_NOINLINE void
tfa_symfix_outer(struct tfa_symfix_site *s)
{
	symfix_sink++;
	tfa_symfix_middle(s), SYMFIX_LINE(s, 2);
	s->depth = 3;
}

void
tfa_symfix_run(struct tfa_symfix_result *r)
{
	tfa_symfix_direct(&r->site[TFA_SYMFIX_DIRECT]);
	tfa_symfix_outer(&r->site[TFA_SYMFIX_INLINED]);
	tfa_symfix_cxx(&r->site[TFA_SYMFIX_CXX]);
	r->direct_entry = (uintptr_t)&tfa_symfix_direct;
}
