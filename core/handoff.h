/* SPDX-License-Identifier: MIT */
/*
 * Descriptors handed to the programs a process executes after it changed
 * its user (or its root, or shut itself in a sandbox: the FIFO's).
 *
 * A process that drops root keeps descriptors to what its new user may not
 * open (core/shim.h, tfa_shim_before_credentials): its profile's file, and
 * TFALLOC_LOG's FIFO, which `tfalloc run` makes 0600 in a directory of its
 * own.  Close-on-exec drops them at exec, and a program executed as the new
 * user (`setpriv --reuid`, `su`, `runuser`, apt's methods, man-db's mandb)
 * had neither: no profile ("cannot write ...: Permission denied": the output
 * directory is root's, 0700, often under root's 0700 home) and its lines in
 * its own stderr.  Before such a process changes its user, it makes the
 * output directory's uid-N for user N and keeps a descriptor to it; the
 * program writes its profile there through that descriptor (openat: the
 * directories above it need not be N's to search).
 *
 * The profile's file that process kept is handed on too (tfa_handoff_profile).
 *
 * The descriptors stay close-on-exec, but for the exec itself: the exec
 * hooks clear the flag just before (tfa_handoff_begin) and set it again if
 * the exec fails (tfa_handoff_end), and the new program's environment gets
 * TFALLOC_HANDOFF with each descriptor's number, device and inode.  The new
 * program's shim takes them (tfa_handoff_receive) only where the number
 * still names that file, and sets close-on-exec again.  A program that
 * closed every descriptor before its exec (python's subprocess) hands off
 * nothing: the descriptors are no longer the ones kept, and no variable is
 * added.
 */
#ifndef TFA_CORE_HANDOFF_H
#define TFA_CORE_HANDOFF_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/child_env.h"
#include "core/log.h"

#define TFA_HANDOFF_VAR TFA_CHILD_ENV_HANDOFF

/*
 * The output directory's uid-N of this process's user, when one was made
 * for it or handed to it: profiles are created there (openat) where the
 * output directory refuses them.
 */
extern tfa_kept_fd_t tfa_handoff_user_dir;

/*
 * The profile's file, kept before a change of user, root or sandbox
 * (core/shim.c writes there when the directory refuses it).  Handed on too:
 * a program executed in a sandbox that refuses to create files (man's
 * sandbox, where it runs col) writes its profile there, in place of the
 * one its image before the exec wrote.
 */
extern tfa_kept_fd_t tfa_handoff_profile;

/*
 * Before a change of the effective user to uid, by a process that may still
 * give a directory away: makes outdir/uid-N (0700, owned by uid) unless uid
 * can write outdir already, and keeps a descriptor to it (one that exists
 * and is uid's is kept as it is).  Nothing allocated.
 */
void tfa_handoff_prepare_user_dir(const char *outdir, uid_t uid);

/*
 * Before an exec or a spawn: clears close-on-exec on the kept descriptors
 * that are still the shim's, and writes "TFALLOC_HANDOFF=..." naming them
 * into buf.  Returns the entry's length, or 0 (nothing to hand off, or buf
 * too small: buf[0] is then '\0').  Safe in a vfork child.
 */
size_t tfa_handoff_begin(char *buf, size_t size);

/*
 * The kept descriptors that are still the shim's, for close_range and
 * closefrom to spare (preload/fd_hooks.c): at most max, in ascending order.
 * Safe in a vfork child.
 */
size_t tfa_handoff_fds(int *fds, size_t max);

/* After an exec that failed, or a spawn: close-on-exec again. */
void tfa_handoff_end(void);

/*
 * At start: takes the descriptors TFALLOC_HANDOFF's value names, those that
 * still name the file it says, and sets close-on-exec on them.
 */
void tfa_handoff_receive(const char *value);

#endif /* TFA_CORE_HANDOFF_H */
