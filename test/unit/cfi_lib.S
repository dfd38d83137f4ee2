/* SPDX-License-Identifier: MIT */
/*
 * check_cfi's unloaded library: cfi_lib_call(fn, arg) calls fn(arg) from a
 * frame of CFI_LIB_FRAME bytes (no frame pointer).  Built twice, with 8 and
 * 40: the same code layout, so the same return address, with a different
 * rule; a rule kept from the first library would read the wrong slot in the
 * second.
 */
	.text
	.globl cfi_lib_call
	.type cfi_lib_call, @function
cfi_lib_call:
	.cfi_startproc
	subq $CFI_LIB_FRAME, %rsp
	.cfi_adjust_cfa_offset CFI_LIB_FRAME
	movq %rdi, %rax
	movq %rsi, %rdi
	callq *%rax
	addq $CFI_LIB_FRAME, %rsp
	.cfi_adjust_cfa_offset -CFI_LIB_FRAME
	ret
	.cfi_endproc
	.size cfi_lib_call, .-cfi_lib_call
	.section .note.GNU-stack,"",@progbits
