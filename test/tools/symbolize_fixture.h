/* SPDX-License-Identifier: MIT */
/*
 * The fixture library of check_symbolize (symbolize_fixture.c and
 * symbolize_fixture_cxx.cc, built with -O2 -g into libtfa_symfix.so and
 * copies of it).  tfa_symfix_run() calls a leaf function from a few call
 * sites and records, for each, the return address the leaf saw and the source
 * lines (__LINE__) a symbolizer must give for it, innermost frame first.
 */
#ifndef TFA_TEST_TOOLS_SYMBOLIZE_FIXTURE_H
#define TFA_TEST_TOOLS_SYMBOLIZE_FIXTURE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tfa_symfix_site_e {
	TFA_SYMFIX_DIRECT,  /* tfa_symfix_direct calls the leaf: one frame */
	TFA_SYMFIX_INLINED, /* tfa_symfix_inner (always_inline) inlined into tfa_symfix_middle
	                       (always_inline) inlined into tfa_symfix_outer: three frames */
	TFA_SYMFIX_CXX,     /* tfa_fixture::Widget<int>::poke(int), a C++ member function */
	TFA_SYMFIX_SITES
};

#define TFA_SYMFIX_MAX_DEPTH 3

struct tfa_symfix_site {
	uintptr_t ret;                  /* the return address into the call of the leaf */
	int depth;                      /* frames a symbolizer gives with the debug info */
	int line[TFA_SYMFIX_MAX_DEPTH]; /* innermost first: the line of the call in each frame */
};

struct tfa_symfix_result {
	struct tfa_symfix_site site[TFA_SYMFIX_SITES];
	uintptr_t direct_entry; /* the address of tfa_symfix_direct itself */
};

/* The leaf: returns its own return address. */
uintptr_t tfa_symfix_leaf(void);

/* The C++ call site (symbolize_fixture_cxx.cc). */
void tfa_symfix_cxx(struct tfa_symfix_site *s);

/* Fills *r; the entry point check_symbolize finds with dlsym. */
void tfa_symfix_run(struct tfa_symfix_result *r);
typedef void (*tfa_symfix_run_fn)(struct tfa_symfix_result *r);

#ifdef __cplusplus
}
#endif

#endif /* TFA_TEST_TOOLS_SYMBOLIZE_FIXTURE_H */
