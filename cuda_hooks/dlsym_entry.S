/* SPDX-License-Identifier: MIT */
/*
 * dlsym, interposed.  RTLD_DEFAULT and RTLD_NEXT lookups depend on who calls
 * (the caller's object fixes the scope): they tail-jump to glibc's dlsym with
 * the return address untouched, so glibc sees the real caller.  Lookups in a
 * handle go to tfa_dlsym_handle (cuda_hooks.c), which returns the shim's
 * wrapper when the result is a CUDA function it wraps.
 */
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
	mov	tfa_real_dlsym(%rip), %rax
	test	%rax, %rax
	je	2f
	jmp	*%rax
2:	/* Before the constructor resolved it: resolve, then jump with the arguments intact. */
	push	%rdi
	.cfi_adjust_cfa_offset 8
	push	%rsi
	.cfi_adjust_cfa_offset 8
	sub	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	tfa_dlsym_resolve
	add	$8, %rsp
	.cfi_adjust_cfa_offset -8
	pop	%rsi
	.cfi_adjust_cfa_offset -8
	pop	%rdi
	.cfi_adjust_cfa_offset -8
	jmp	*%rax
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
	adrp	x16, tfa_real_dlsym
	ldr	x16, [x16, :lo12:tfa_real_dlsym]
	cbz	x16, 2f
	br	x16
2:
	stp	x29, x30, [sp, #-32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	stp	x0, x1, [sp, #16]
	bl	tfa_dlsym_resolve
	mov	x16, x0
	ldp	x0, x1, [sp, #16]
	ldp	x29, x30, [sp], #32
	.cfi_def_cfa_offset 0
	.cfi_restore 29
	.cfi_restore 30
	br	x16
	.cfi_endproc
	.size	dlsym, .-dlsym
#else
#error "cuda_hooks/dlsym_entry.S: x86_64 and aarch64 only"
#endif
	.section .note.GNU-stack, "", %progbits
