/* SPDX-License-Identifier: MIT */
/*
 * For the assembly entry points that must leave the caller's return address
 * to glibc (preload/dlopen_entry.S, cuda_hooks/dlsym_entry.S): TFA_TAIL_JUMP
 * jumps to the function in the pointer variable REAL, or, before the
 * constructor set it, to the one RESOLVE returns, with the first two
 * arguments and the return address as they came.  Inside .cfi_startproc.
 */
#ifndef TFA_PRELOAD_TAIL_JUMP_H
#define TFA_PRELOAD_TAIL_JUMP_H

#if defined(__x86_64__)
	.macro TFA_TAIL_JUMP real, resolve
	mov	\real(%rip), %rax
	test	%rax, %rax
	je	9f
	jmp	*%rax
9:
	push	%rdi
	.cfi_adjust_cfa_offset 8
	push	%rsi
	.cfi_adjust_cfa_offset 8
	sub	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	\resolve
	add	$8, %rsp
	.cfi_adjust_cfa_offset -8
	pop	%rsi
	.cfi_adjust_cfa_offset -8
	pop	%rdi
	.cfi_adjust_cfa_offset -8
	jmp	*%rax
	.endm
#elif defined(__aarch64__)
	.macro TFA_TAIL_JUMP real, resolve
	adrp	x16, \real
	ldr	x16, [x16, :lo12:\real]
	cbz	x16, 9f
	br	x16
9:
	stp	x29, x30, [sp, #-32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	stp	x0, x1, [sp, #16]
	bl	\resolve
	mov	x16, x0
	ldp	x0, x1, [sp, #16]
	ldp	x29, x30, [sp], #32
	.cfi_def_cfa_offset 0
	.cfi_restore 29
	.cfi_restore 30
	br	x16
	.endm
#else
#error "preload/tail_jump.h: x86_64 and aarch64 only"
#endif

#endif /* TFA_PRELOAD_TAIL_JUMP_H */
