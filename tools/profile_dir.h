/* SPDX-License-Identifier: MIT */
/*
 * The profiles of a directory, as `tfalloc report`, the leak gate and
 * `tfalloc run` read it: its *.prof files, and those of its uid-N
 * subdirectories.  A program that a process executes after it changed its
 * user to N cannot write into a directory that was its former self's (root's
 * output directory of `tfalloc run` is 0700); the shim made it uid-N, owned
 * by N, while it could (core/shim.c, tfa_shim_before_credentials), and the
 * program's profile is there.
 */
#ifndef TFA_TOOLS_PROFILE_DIR_H
#define TFA_TOOLS_PROFILE_DIR_H

#include <stddef.h>

/*
 * The paths of the profiles in dir and in its uid-N subdirectories (N a
 * number; real directories, not symlinks), sorted by path: a malloc'd array
 * of malloc'd strings in *paths, their number in *n.  Only regular files are
 * taken from the subdirectories, which their user could fill with anything.
 * A subdirectory that cannot be read is passed over.  Returns 0, or -errno
 * (dir cannot be read: *paths NULL; ENOMEM: what was found is freed).
 */
int tfa_profile_dir_list(const char *dir, char ***paths, size_t *n);

void tfa_profile_dir_free(char **paths, size_t n);

/*
 * Removes dir's empty uid-N subdirectories: a process that dropped root
 * made one for programs it did not execute (apt's methods).  Only once no
 * process of the run is left to write there.
 */
void tfa_profile_dir_tidy(const char *dir);

#endif /* TFA_TOOLS_PROFILE_DIR_H */
