/* SPDX-License-Identifier: MIT */
/*
 * Only in libtfalloc_verify.so, the test build of the shim
 * (test/integration/test_unwind.py): turns on the comparison of every
 * TFA_STACKS_UNWIND capture of core/cfi.c with libunwind's
 * (tfa_unwind_verify, core/unwind.h) and writes the counts to stderr when
 * the process exits:
 *   tfalloc-unwind-verify: pid P walks W mismatches M refusals R
 * then, after a mismatch, the frames of the first one, side by side.
 */
#include <stdio.h>
#include <unistd.h>

#include "core/cfi.h"
#include "core/common.h"
#include "core/unwind.h"

__attribute__((constructor(101))) static void
verify_on(void)
{
	tfa_unwind_verify.on = true;
}

__attribute__((destructor(101))) static void
verify_report(void)
{
	const tfa_unwind_verify_t *v = &tfa_unwind_verify;
	char text[4096];
	int len = snprintf(text, sizeof(text),
			   "tfalloc-unwind-verify: pid %d walks %lu mismatches %lu refusals %lu\n",
			   (int)getpid(), (unsigned long)__atomic_load_n(&v->walks, __ATOMIC_RELAXED),
			   (unsigned long)__atomic_load_n(&v->mismatches, __ATOMIC_RELAXED),
			   (unsigned long)tfa_cfi_refusals());
	unsigned rows = TFA_MAX(v->first_n[0], v->first_n[1]);
	for (unsigned i = 0; v->mismatches != 0 && i < rows && len < (int)sizeof(text) - 80; i++) {
		unsigned long a = i < v->first_n[0] ? (unsigned long)v->first[0][i] : 0;
		unsigned long b = i < v->first_n[1] ? (unsigned long)v->first[1][i] : 0;
		len += snprintf(text + len, sizeof(text) - (size_t)len,
				"tfalloc-unwind-verify:   %2u %#18lx %#18lx%s\n", i, a, b,
				a == b ? "" : "  <-");
	}
	if (write(2, text, (size_t)len) < 0)
		return;
}
