/* SPDX-License-Identifier: MIT */
/*
 * TEST DOUBLE helper: FC_SLOTS exported trampolines PREFIX_0 ... PREFIX_159,
 * 16 bytes apart, each jumping through its entry of the exported table
 * PREFIX_targets (filled in by fake_driver.c).  Built twice: into
 * libcuda.so.1 as fakecuda_alias_N (FAKECUDA_GPA_MODE=alias: a pointer inside
 * libcuda whose symbol is not the CUDA name asked for) and into
 * libfakecuda_foreign.so as fakecuda_foreign_N (FAKECUDA_GPA_MODE=foreign: a
 * pointer inside another library).  Plain assembly in a C file, so the build
 * needs no ASM language.
 */
#ifndef FC_PREFIX
#error FC_PREFIX must be defined
#endif

#define FC_STR2(x) #x
#define FC_STR(x) FC_STR2(x)
#define P FC_STR(FC_PREFIX)

#if defined(__x86_64__)
#define FC_JUMP "\tjmp *(.Lfc_targets + 8 * \\n)(%rip)\n"
#define FC_FUNC "@function"
#define FC_OBJ "@object"
#elif defined(__aarch64__)
#define FC_JUMP                                                  \
	"\tadrp x16, .Lfc_targets + 8 * \\n\n"                   \
	"\tldr x16, [x16, #:lo12:.Lfc_targets + 8 * \\n]\n"      \
	"\tbr x16\n"
#define FC_FUNC "%function"
#define FC_OBJ "%object"
#else
#error unsupported architecture
#endif

__asm__(".altmacro\n"
        ".macro fc_slot n\n"
        "\t.globl " P "_\\n\n"
        "\t.type " P "_\\n, " FC_FUNC "\n"
        "\t.p2align 4\n"
        P "_\\n:\n"
        FC_JUMP
        "\t.size " P "_\\n, . - " P "_\\n\n"
        ".endm\n"
        "\t.text\n"
        "\t.set fc_i, 0\n"
        "\t.rept 160\n"
        "\tfc_slot %fc_i\n"
        "\t.set fc_i, fc_i + 1\n"
        "\t.endr\n"
        "\t.purgem fc_slot\n"
        ".noaltmacro\n"
        "\t.data\n"
        "\t.p2align 3\n"
        "\t.globl " P "_targets\n"
        "\t.type " P "_targets, " FC_OBJ "\n"
        "\t.size " P "_targets, 8 * 160\n"
        P "_targets:\n"
        ".Lfc_targets:\n"
        "\t.zero 8 * 160\n"
        "\t.text\n");
