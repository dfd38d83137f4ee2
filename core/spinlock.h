/* SPDX-License-Identifier: MIT */
/*
 * A test-and-test-and-set spinlock that yields after a short spin.  The
 * critical sections it guards in tfalloc are a handful of instructions (a
 * hash-table probe), so a futex would cost more than it saves; pthread mutexes
 * are avoided because the shim must also work before libc is fully up.
 *
 * Fork: a lock held by another thread at fork() stays held in the child; every
 * module therefore takes its locks in its prefork handler and resets them with
 * tfa_spin_init() in the child.
 */
#ifndef TFA_CORE_SPINLOCK_H
#define TFA_CORE_SPINLOCK_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct tfa_spinlock_s {
	uint32_t locked;
} tfa_spinlock_t;

#define TFA_SPINLOCK_INIT { 0 }

static inline void
tfa_spin_init(tfa_spinlock_t *l)
{
	__atomic_store_n(&l->locked, 0, __ATOMIC_RELAXED);
}

static inline bool
tfa_spin_trylock(tfa_spinlock_t *l)
{
	return __atomic_exchange_n(&l->locked, 1, __ATOMIC_ACQUIRE) == 0;
}

static inline void
tfa_spin_lock(tfa_spinlock_t *l)
{
	if (__builtin_expect(tfa_spin_trylock(l), 1))
		return;
	for (unsigned spins = 0;; spins++) {
		while (__atomic_load_n(&l->locked, __ATOMIC_RELAXED) != 0) {
			if (++spins < 128)
				__builtin_ia32_pause();
			else
				sched_yield();
		}
		if (tfa_spin_trylock(l))
			return;
	}
}

static inline void
tfa_spin_unlock(tfa_spinlock_t *l)
{
	__atomic_store_n(&l->locked, 0, __ATOMIC_RELEASE);
}

#endif /* TFA_CORE_SPINLOCK_H */
