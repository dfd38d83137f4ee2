/* SPDX-License-Identifier: MIT */
/*
 * The control API's side in the shim (preload/tfalloc.h is the program's
 * side): scopes that make a resource current on a thread, the resource
 * calls over core/resource_mgr.h, container cleanups with their report, the
 * resources and cleanups in the profile, and --tag-by thread.
 *
 * Glossary:
 *   scope      a resource made current on a thread until the matching exit;
 *              scopes nest (a stack of the tags they replaced, per thread).
 *   cleanup    tfalloc_container_cleanup: the container's resources are
 *              deleted, and every live block charged to them is reported
 *              (stderr and the profile).  Only a container whose resources
 *              still hold blocks costs a walk of the pointer table.
 *   thread tag with TFALLOC_TAG_BY=thread, the resource "threads"/NAME of a
 *              thread named NAME (its comm: pthread_setname_np, or the
 *              program's name), current on it when no scope is.
 */
#ifndef TFA_CORE_CONTROL_H
#define TFA_CORE_CONTROL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/profile_write.h"

/* Reads TFALLOC_TAG_BY ("", "thread"); called once by the shim's init. */
void tfa_control_init(const char *tag_by);

/* true when TFALLOC_TAG_BY=thread: the general paths call tfa_control_thread_tag first. */
extern bool tfa_control_tag_by_thread;

/*
 * Brings the calling thread's tag up to its name (new thread, or a name
 * changed since).  Inside a shim call, before the allocation.  [cold]
 */
void tfa_control_thread_tag(void);

/* A thread was (re)named: every thread looks at its name again. */
void tfa_control_thread_renamed(void);

/* The resource and cleanup records of the profile.  Takes no lock the program's threads may hold. */
void tfa_control_write_records(tfa_pw_t *w);

void tfa_control_prefork(void);
void tfa_control_postfork_parent(void);
void tfa_control_postfork_child(void);

#endif /* TFA_CORE_CONTROL_H */
