/* SPDX-License-Identifier: MIT */
/*
 * sigaction and the signal() family: a program that sets a fatal signal back
 * to SIG_DFL, or installs its own handler after start, would otherwise
 * replace the shim's handler and leave no profile when the signal kills it.
 * glibc's signal() does not call the exported sigaction, so each is here,
 * with glibc's own semantics.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "core/common.h"
#include "core/shim.h"

typedef void (*handler_t)(int);

TFA_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *oldact);
TFA_EXPORT handler_t signal(int sig, handler_t handler);
TFA_EXPORT handler_t bsd_signal(int sig, handler_t handler);
TFA_EXPORT handler_t sysv_signal(int sig, handler_t handler);

TFA_EXPORT int
sigaction(int sig, const struct sigaction *act, struct sigaction *oldact)
{
	return tfa_shim_sigaction(sig, act, oldact);
}

/* glibc's signal() as a sigaction with these flags; SIG_ERR and EINVAL for a bad signal. */
static handler_t
set_handler(int sig, handler_t handler, int flags, bool mask_self)
{
	struct sigaction act, old;

	if (handler == SIG_ERR || sig <= 0 || sig >= NSIG) {
		errno = EINVAL;
		return SIG_ERR;
	}
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	if (mask_self)
		sigaddset(&act.sa_mask, sig);
	act.sa_flags = flags;
	if (tfa_shim_sigaction(sig, &act, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

/* BSD semantics, glibc's default: the handler stays, the signal is blocked while it runs. */
TFA_EXPORT handler_t
signal(int sig, handler_t handler)
{
	return set_handler(sig, handler, SA_RESTART, true);
}

TFA_EXPORT handler_t
bsd_signal(int sig, handler_t handler)
{
	return set_handler(sig, handler, SA_RESTART, true);
}

/* System V semantics: one-shot, not blocked while it runs. */
TFA_EXPORT handler_t
sysv_signal(int sig, handler_t handler)
{
	return set_handler(sig, handler, SA_RESETHAND | SA_NODEFER, false);
}
