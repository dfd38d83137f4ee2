/* SPDX-License-Identifier: MIT */
/*
 * What the driver hooks (cuda_hooks.c) share with the runtime hooks
 * (cudart_hooks.c).
 */
#ifndef TFA_CUDA_HOOKS_CUDA_HOOKS_H
#define TFA_CUDA_HOOKS_CUDA_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/thread.h"
#include "cuda_hooks/cuda_abi.h"

/* glibc's dlsym (never the shim's interposer); NULL until resolved. */
extern void *(*tfa_real_dlsym)(void *handle, const char *name);
void *(*tfa_cuda_real_dlsym(void))(void *, const char *);

/* Inside a runtime wrapper: the driver wrappers underneath record nothing. */
extern TFA_TLS int tfa_cuda_rt_depth;

/* The device code of the calling thread's current context (cuda:0 when there is none). */
unsigned tfa_cuda_ctx_devcode(void);
/* The device code of a stream's device: its own, or the current context's for the special streams. */
unsigned tfa_cuda_stream_devcode(CUstream stream, bool ptsz);

/*
 * Around an allocation another API makes, on device code `code`:
 * tfa_cuda_begin reserves nbytes (false: a limit refuses, return the API's
 * out-of-memory error without calling it); tfa_cuda_end records ptr when
 * ok (with `actual` bytes) or gives the reservation back.
 */
typedef struct tfa_cuda_call_s {
	unsigned code;
	size_t nbytes;
	uint32_t tag;
	uint32_t stack_id;
	bool reserved;
	bool active; /* false: nothing to record (inside a runtime wrapper, or no tracker) */
} tfa_cuda_call_t;

bool tfa_cuda_begin(tfa_cuda_call_t *c, unsigned code, size_t nbytes);
void tfa_cuda_end(tfa_cuda_call_t *c, bool ok, uintptr_t ptr, size_t actual, uint8_t kind);
/* tfa_cuda_end, the block charged to device code `code` (a pool's device) instead of c's. */
void tfa_cuda_end_on(tfa_cuda_call_t *c, unsigned code, bool ok, uintptr_t ptr, size_t actual, uint8_t kind);
/* The device code the driver gives ptr, or `otherwise`. */
unsigned tfa_cuda_pointer_devcode(uintptr_t ptr, unsigned otherwise);

/* Before a free is forwarded: uncounts ptr (nothing when unknown). */
void tfa_cuda_forget(uintptr_t ptr);

/*
 * The wrapper for a real CUDA function pointer (libcuda's or libcudart's),
 * or NULL when the pointer is none the shim wraps.
 */
void *tfa_cuda_wrapper_of(void *real);

/* Whether p is one of the shim's own wrappers (driver or runtime). */
bool tfa_cuda_is_wrapper(const void *p);

/* Replaces *pfn, a function handed out for symbol at version, by its wrapper (cuGetProcAddress's rule). */
void tfa_cuda_substitute(const char *via, const char *symbol, int version, unsigned long long flags,
			 void **pfn);

/* The device code of CUDA ordinal n (cuda:0, said once, past the codes there are). */
unsigned tfa_cuda_code_of_ordinal(int ordinal);

/* cudart_hooks.c: the runtime wrapper of a real libcudart function, NULL when none. */
void *tfa_cudart_wrapper_of(const void *p, const char **name);
bool tfa_cudart_is_wrapper(const void *p);
/* p came from a handle lookup of a "cuda" name: when it is libcudart's, adopt that library. */
bool tfa_cudart_adopt(const void *p);

#endif /* TFA_CUDA_HOOKS_CUDA_HOOKS_H */
