/* SPDX-License-Identifier: MIT */
/*
 * dlopen, interposed.  glibc takes the caller from the return address: its
 * RPATH and RUNPATH are searched and $ORIGIN is its directory.  Every mode but
 * RTLD_DEEPBIND tail-jumps to glibc's dlopen with the return address
 * untouched; RTLD_DEEPBIND goes to tfa_dlopen_deepbind (dl_hooks.c) with the
 * caller's return address as a third argument, since the objects it loads
 * must be bound to the shim afterwards.
 */
#if defined(__x86_64__)
	.text
	.globl	dlopen
	.type	dlopen, @function
	.p2align 4
dlopen:
	.cfi_startproc
	test	$0x8, %esi		/* RTLD_DEEPBIND */
	jne	1f
	mov	tfa_real_dlopen(%rip), %rax
	test	%rax, %rax
	je	2f
	jmp	*%rax
1:
	mov	(%rsp), %rdx
	jmp	tfa_dlopen_deepbind
2:	/* Before the constructor resolved it: resolve, then jump with the arguments intact. */
	push	%rdi
	.cfi_adjust_cfa_offset 8
	push	%rsi
	.cfi_adjust_cfa_offset 8
	sub	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	tfa_dlopen_resolve
	add	$8, %rsp
	.cfi_adjust_cfa_offset -8
	pop	%rsi
	.cfi_adjust_cfa_offset -8
	pop	%rdi
	.cfi_adjust_cfa_offset -8
	jmp	*%rax
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
	adrp	x16, tfa_real_dlopen
	ldr	x16, [x16, :lo12:tfa_real_dlopen]
	cbz	x16, 2f
	br	x16
1:
	mov	x2, x30
	b	tfa_dlopen_deepbind
2:
	stp	x29, x30, [sp, #-32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	stp	x0, x1, [sp, #16]
	bl	tfa_dlopen_resolve
	mov	x16, x0
	ldp	x0, x1, [sp, #16]
	ldp	x29, x30, [sp], #32
	.cfi_def_cfa_offset 0
	.cfi_restore 29
	.cfi_restore 30
	br	x16
	.cfi_endproc
	.size	dlopen, .-dlopen
#else
#error "preload/dlopen_entry.S: x86_64 and aarch64 only"
#endif
	.section .note.GNU-stack, "", %progbits
