/* SPDX-License-Identifier: MIT */
/*
 * The shim's lock: one compare-and-swap when free, a short spin when held (the
 * sections it guards are a few dozen instructions), then a futex sleep, so
 * that a holder preempted on a busy machine is not waited for by spinning.
 * pthread mutexes are avoided because the shim runs before libc is fully up
 * and inside fork handlers.
 *
 * States: 0 free, 1 held, 2 held with sleepers (Drepper, "Futexes are tricky").
 *
 * Fork: a lock held by another thread at fork() stays held in the child; every
 * module therefore takes its locks in its prefork handler and resets them with
 * tfa_lock_init() in the child.
 */
#ifndef TFA_CORE_LOCK_H
#define TFA_CORE_LOCK_H

#include <linux/futex.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct tfa_lock_s {
	uint32_t state;
} tfa_lock_t;

#define TFA_LOCK_INIT { 0 }
#define TFA_LOCK_SPINS 100

static inline void
tfa_lock_init(tfa_lock_t *l)
{
	__atomic_store_n(&l->state, 0, __ATOMIC_RELAXED);
}

static inline bool
tfa_trylock(tfa_lock_t *l)
{
	uint32_t expected = 0;
	return __atomic_compare_exchange_n(&l->state, &expected, 1, false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

void tfa_lock_slow(tfa_lock_t *l);

static inline void
tfa_lock(tfa_lock_t *l)
{
	if (__builtin_expect(!tfa_trylock(l), 0))
		tfa_lock_slow(l);
}

static inline void
tfa_unlock(tfa_lock_t *l)
{
	if (__builtin_expect(__atomic_exchange_n(&l->state, 0, __ATOMIC_RELEASE) == 2, 0))
		syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#endif /* TFA_CORE_LOCK_H */
