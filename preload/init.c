/* SPDX-License-Identifier: MIT */
/*
 * The shim's constructor and destructor.  The constructor runs after the
 * registrations (TFA_CTOR_PRIO_INIT > TFA_CTOR_PRIO_REGISTRY); allocations
 * that arrive earlier are served by glibc and recorded already.  The
 * destructor runs after the program's own exit handlers and static
 * destructors, and writes the profile.
 */
#include "core/common.h"
#include "core/shim.h"

__attribute__((constructor(TFA_CTOR_PRIO_INIT))) static void
tfalloc_init(void)
{
	tfa_shim_init();
}

__attribute__((destructor(TFA_CTOR_PRIO_INIT))) static void
tfalloc_fini(void)
{
	tfa_shim_fini();
}
