/* SPDX-License-Identifier: MIT */
/* For check_cfi and check_unwind: the name of the function a captured frame returns into. */
#ifndef TFA_TEST_FUNCTION_OF_H
#define TFA_TEST_FUNCTION_OF_H

#include <dlfcn.h>
#include <stdint.h>

/*
 * The function a return address returns into (the call is at pc - 1), or
 * "?": the test programs export their functions (ENABLE_EXPORTS) for this.
 */
static inline const char *
function_of(uintptr_t pc)
{
	Dl_info info;

	if (pc == 0 || dladdr((void *)(pc - 1), &info) == 0 || info.dli_sname == NULL)
		return "?";
	return info.dli_sname;
}

#endif
