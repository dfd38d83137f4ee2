/* SPDX-License-Identifier: MIT */
#include "core/lock.h"

#include <errno.h>

void
tfa_lock_slow(tfa_lock_t *l)
{
	int saved_errno = errno;

	for (int i = 0; i < TFA_LOCK_SPINS; i++) {
		__builtin_ia32_pause();
		if (__atomic_load_n(&l->state, __ATOMIC_RELAXED) == 0 && tfa_trylock(l))
			return;
	}
	/* Mark the lock contended; sleep until the holder wakes us. */
	while (__atomic_exchange_n(&l->state, 2, __ATOMIC_ACQUIRE) != 0)
		syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
	errno = saved_errno;
}
