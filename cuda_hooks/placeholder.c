/* SPDX-License-Identifier: MIT */
/*
 * Placeholder of the CUDA hooks (cuda_hooks/ will hold the exported
 * cudaMalloc / cuMemAlloc_v2 / cuGetProcAddress wrappers).  It defines no
 * symbol: libtfalloc.so exports nothing CUDA until those wrappers exist.
 */
typedef int tfa_cuda_hooks_placeholder_t;
