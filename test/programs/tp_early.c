/* SPDX-License-Identifier: MIT */
/*
 * A library tp_setuid links, loaded after the shim and needing nothing of
 * it: the loader runs its constructor before the shim's.  The constructor
 * calls prctl (PR_SET_NAME, as programs name their process early) through
 * the shim's prctl, which finds glibc's then; tp_early_prctl says what it
 * returned.
 */
#include <errno.h>
#include <sys/prctl.h>

int tp_early_prctl(void);

static int early_rc = -2;

__attribute__((constructor)) static void
early_init(void)
{
	early_rc = prctl(PR_SET_NAME, "tp_setuid", 0, 0, 0) == 0 ? 0 : errno;
}

int
tp_early_prctl(void)
{
	return early_rc;
}
