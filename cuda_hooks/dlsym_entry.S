/* SPDX-License-Identifier: MIT */
/*
 * dlsym, interposed.  RTLD_DEFAULT and RTLD_NEXT lookups depend on who calls
 * (the caller's object fixes the scope): they tail-jump to glibc's dlsym with
 * the return address untouched, so glibc sees the real caller.  Lookups in a
 * handle go to tfa_dlsym_handle (cuda_hooks.c), which returns the shim's
 * wrapper when the result is a CUDA function it wraps.
 */
#include "preload/tail_jump.h"

#if defined(__x86_64__)
	.text
	.globl	dlsym
	.type	dlsym, @function
	.p2align 4
dlsym:
	.cfi_startproc
	test	%rdi, %rdi		/* RTLD_DEFAULT (0) */
	je	1f
	cmp	$-1, %rdi		/* RTLD_NEXT (-1) */
	je	1f
	jmp	tfa_dlsym_handle
1:
	TFA_TAIL_JUMP tfa_real_dlsym, tfa_dlsym_resolve
	.cfi_endproc
	.size	dlsym, .-dlsym
#elif defined(__aarch64__)
	.text
	.globl	dlsym
	.type	dlsym, %function
	.p2align 4
dlsym:
	.cfi_startproc
	cbz	x0, 1f			/* RTLD_DEFAULT (0) */
	cmn	x0, #1			/* RTLD_NEXT (-1) */
	b.eq	1f
	b	tfa_dlsym_handle
1:
	TFA_TAIL_JUMP tfa_real_dlsym, tfa_dlsym_resolve
	.cfi_endproc
	.size	dlsym, .-dlsym
#endif
	.section .note.GNU-stack, "", %progbits
