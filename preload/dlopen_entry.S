/* SPDX-License-Identifier: MIT */
/*
 * dlopen, interposed.  glibc takes the caller from the return address: its
 * RPATH and RUNPATH are searched and $ORIGIN is its directory.  Every mode but
 * RTLD_DEEPBIND tail-jumps to glibc's dlopen with the return address
 * untouched; RTLD_DEEPBIND goes to tfa_dlopen_deepbind (dl_hooks.c) with the
 * caller's return address as a third argument, since the objects it loads
 * must be bound to the shim afterwards.
 */
#include "preload/tail_jump.h"

#if defined(__x86_64__)
	.text
	.globl	dlopen
	.type	dlopen, @function
	.p2align 4
dlopen:
	.cfi_startproc
	test	$0x8, %esi		/* RTLD_DEEPBIND */
	jne	1f
	TFA_TAIL_JUMP tfa_real_dlopen, tfa_dlopen_resolve
1:
	mov	(%rsp), %rdx
	jmp	tfa_dlopen_deepbind
	.cfi_endproc
	.size	dlopen, .-dlopen
#elif defined(__aarch64__)
	.text
	.globl	dlopen
	.type	dlopen, %function
	.p2align 4
dlopen:
	.cfi_startproc
	tbnz	w1, #3, 1f		/* RTLD_DEEPBIND */
	TFA_TAIL_JUMP tfa_real_dlopen, tfa_dlopen_resolve
1:
	mov	x2, x30
	b	tfa_dlopen_deepbind
	.cfi_endproc
	.size	dlopen, .-dlopen
#endif
	.section .note.GNU-stack, "", %progbits
