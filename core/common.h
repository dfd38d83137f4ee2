/* SPDX-License-Identifier: MIT */
/*
 * Small macros every module of tfalloc uses: symbol visibility, branch hints,
 * constructor priorities, container_of, and the return-value conventions.
 *
 * Conventions (kernel coding style §16): actions return int, 0 or -errno;
 * predicates return bool; functions that compute a value return it, with NULL
 * or 0 as the failure sentinel.  Only preload/ touches errno.
 */
#ifndef TFA_CORE_COMMON_H
#define TFA_CORE_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TFA_EXPORT    __attribute__((visibility("default")))
#define TFA_HIDDEN    __attribute__((visibility("hidden")))
#define TFA_MUST_CHECK __attribute__((warn_unused_result))
#define TFA_UNUSED    __attribute__((unused))
#define TFA_NOINLINE  __attribute__((noinline))
#define TFA_ALWAYS_INLINE inline __attribute__((always_inline))
#define TFA_COLD      __attribute__((cold, noinline))
#define TFA_CACHELINE 64
#define TFA_ALIGNED_CACHELINE __attribute__((aligned(TFA_CACHELINE)))

#define tfa_likely(x)   __builtin_expect(!!(x), 1)
#define tfa_unlikely(x) __builtin_expect(!!(x), 0)

#define TFA_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define tfa_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Thread-local state of the shim must be a %fs load, never __tls_get_addr. */
#define TFA_TLS __thread __attribute__((tls_model("initial-exec")))

/*
 * Constructor priorities, all in one place.  0-100 are reserved by the
 * toolchain.  Registrations run before the shim's init so that init sees every
 * registered allocator.
 */
#define TFA_CTOR_PRIO_REGISTRY 110
#define TFA_CTOR_PRIO_INIT     120

#define TFA_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TFA_MIN(a, b) ((a) < (b) ? (a) : (b))

static inline int
tfa_is_pow2(size_t x)
{
	return x != 0 && (x & (x - 1)) == 0;
}

/* Smallest power of two >= x; 0 when that does not fit in size_t. */
static inline size_t
tfa_pow2_ceil(size_t x)
{
	if (x <= 1)
		return 1;
	if (x > ((size_t)1 << (sizeof(size_t) * 8 - 1)))
		return 0;
	return (size_t)1 << (sizeof(size_t) * 8 - (size_t)__builtin_clzl(x - 1));
}

/*
 * Single instructions without a lock prefix: atomic against a signal handler
 * of this thread that runs in between, not against other cores.  For words
 * only this thread writes while others may read them (a failed cmpxchg writes
 * the old value back: harmless on such a word).
 */
static TFA_ALWAYS_INLINE bool
tfa_local_cas_u64(uint64_t *p, uint64_t expected, uint64_t desired)
{
#if defined(__x86_64__)
	bool ok;
	__asm__ volatile("cmpxchgq %3, %1" : "=@ccz"(ok), "+m"(*p), "+a"(expected) : "r"(desired) : "memory");
	return ok;
#else
	return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
#endif
}

static TFA_ALWAYS_INLINE void
tfa_local_add_u64(void *p, int64_t delta)
{
#if defined(__x86_64__)
	__asm__ volatile("addq %1, %0" : "+m"(*(uint64_t *)p) : "er"(delta) : "cc");
#else
	__atomic_fetch_add((uint64_t *)p, (uint64_t)delta, __ATOMIC_RELAXED);
#endif
}

#endif /* TFA_CORE_COMMON_H */
