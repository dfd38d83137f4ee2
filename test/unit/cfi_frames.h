/* SPDX-License-Identifier: MIT */
#ifndef TFA_TEST_CFI_FRAMES_H
#define TFA_TEST_CFI_FRAMES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*frames_leaf_fn)(void *arg);

void frames_recurse(int levels, frames_leaf_fn leaf, void *arg);
void frames_alloca(size_t bytes, frames_leaf_fn leaf, void *arg);
void frames_vla(int n, frames_leaf_fn leaf, void *arg);
void frames_big(frames_leaf_fn leaf, void *arg);
void frames_qsort(frames_leaf_fn leaf, void *arg);
void frames_depth(int levels, frames_leaf_fn leaf, void *arg);
void frames_cxx(frames_leaf_fn leaf, void *arg);
void frames_two_sites(frames_leaf_fn leaf, void *arg);
/* cfi_rbp.S */
void cfi_rbp_twice(frames_leaf_fn leaf, void *arg);
void cfi_ra_moved(frames_leaf_fn leaf, void *arg);

#ifdef __cplusplus
}
#endif

#endif
