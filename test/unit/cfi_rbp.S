/* SPDX-License-Identifier: MIT */
/*
 * check_cfi's hand-made frames.  First, frames whose CFA comes from %rbp at
 * one %rsp:
 * cfi_rbp_twice(fn, arg) calls cfi_rbp_inner(fn, arg, pad) twice, the
 * second time from 32 bytes lower with 32 bytes less pad.  cfi_rbp_inner
 * keeps a frame pointer (CFA = %rbp + 16) and calls fn(arg): at the same
 * %rsp with the same return address both times, its %rbp 32 bytes apart.
 * The return address of the first call into cfi_rbp_twice stays where the
 * first frame was, in the second call's unused space: a walk that took the
 * second frame for the first, %rbp aside, would read it and find it
 * unchanged.
 */
	.text
	.globl cfi_rbp_twice
	.type cfi_rbp_twice, @function
cfi_rbp_twice:
	.cfi_startproc
	subq $56, %rsp
	.cfi_adjust_cfa_offset 56
	movq %rdi, 0(%rsp)
	movq %rsi, 8(%rsp)
	movq $64, %rdx
	callq cfi_rbp_inner
	subq $32, %rsp
	.cfi_adjust_cfa_offset 32
	movq 32(%rsp), %rdi
	movq 40(%rsp), %rsi
	movq $32, %rdx
	callq cfi_rbp_inner
	addq $88, %rsp
	.cfi_adjust_cfa_offset -88
	ret
	.cfi_endproc
	.size cfi_rbp_twice, .-cfi_rbp_twice

	.type cfi_rbp_inner, @function
cfi_rbp_inner:
	.cfi_startproc
	pushq %rbp
	.cfi_adjust_cfa_offset 8
	.cfi_offset %rbp, -16
	movq %rsp, %rbp
	.cfi_def_cfa_register %rbp
	subq %rdx, %rsp
	movq %rdi, %rax
	movq %rsi, %rdi
	callq *%rax
	movq %rbp, %rsp
	popq %rbp
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_endproc
	.size cfi_rbp_inner, .-cfi_rbp_inner

/*
 * cfi_ra_moved(fn, arg): a frame whose return address the unwind tables put
 * at CFA - 24, not at CFA - 8 (a rule fast_step leaves to slow_step,
 * RULE_SLOW): it copies its return address there and zeroes the usual slot
 * while it calls fn(arg), so that a walk reading CFA - 8 would end the
 * stack here.
 */
	.globl cfi_ra_moved
	.type cfi_ra_moved, @function
cfi_ra_moved:
	.cfi_startproc
	subq $24, %rsp
	.cfi_adjust_cfa_offset 24
	movq 24(%rsp), %rax
	movq %rax, 8(%rsp)
	.cfi_offset %rip, -24
	movq $0, 24(%rsp)
	movq %rdi, %rax
	movq %rsi, %rdi
	callq *%rax
	movq 8(%rsp), %rax
	movq %rax, 24(%rsp)
	.cfi_offset %rip, -8
	addq $24, %rsp
	.cfi_adjust_cfa_offset -24
	ret
	.cfi_endproc
	.size cfi_ra_moved, .-cfi_ra_moved
	.section .note.GNU-stack,"",@progbits
