/* SPDX-License-Identifier: MIT */
/*
 * The environment of the programs a profiled process executes.
 *
 * tfalloc reaches a new program through its environment: LD_PRELOAD names
 * the shim, TFALLOC_* carry the run's options.  A process that executes
 * another with an environment of its own making (`env -i`, python's
 * subprocess with env={...}, a test runner's clean environment, a new
 * LD_PRELOAD) dropped them, and that program and everything it started ran
 * unprofiled: a leak gate passed a test suite whose children leaked.
 *
 * At start the shim keeps what reached it (the LD_PRELOAD element that
 * loaded it, every TFALLOC_* variable); an exec or a spawn whose
 * environment lacks any of it gets a copy with the missing parts added, and
 * TFALLOC_INJECTED naming them.  The new program's shim takes exactly those
 * back out of its environment at start, after reading its options: the
 * program sees the environment it was given (python's test of an empty
 * environment passes), and its own execs get them added again.
 *
 * Nothing here allocates through malloc: the exec side runs in vfork
 * children, on their parent's heap.
 */
#ifndef TFA_CORE_CHILD_ENV_H
#define TFA_CORE_CHILD_ENV_H

#include <stdbool.h>
#include <stddef.h>

#define TFA_CHILD_ENV_INJECTED "TFALLOC_INJECTED"
/* Descriptors an exec hands on (core/handoff.h): per exec, never kept. */
#define TFA_CHILD_ENV_HANDOFF "TFALLOC_HANDOFF"

/* At most this many TFALLOC_* variables are kept (there are fewer options). */
#define TFA_CHILD_ENV_MAX_VARS 64

typedef struct tfa_child_env_s {
	char *preload; /* the LD_PRELOAD element that loaded the shim; NULL: none (nothing is added) */
	size_t preload_len;
	char *vars[TFA_CHILD_ENV_MAX_VARS]; /* "TFALLOC_NAME=value", as they reached the process */
	size_t nvars;
	bool into_valgrind; /* TFALLOC_UNDER_VALGRIND: valgrind's programs keep the shim */
	/* "TFALLOC_HANDOFF=..." of one exec (a copy of the kept ce), added like vars; NULL: none. */
	char *handoff;
} tfa_child_env_t;

/*
 * Keeps, from the environment envp the process started with, the LD_PRELOAD
 * element that names self_path (the shim's file, as the loader opened it:
 * the same string, or the same file) and the TFALLOC_* variables; strings
 * are copied with copy_str (arena memory in the shim).  Returns false when
 * no element names the shim (it was loaded otherwise): nothing will be
 * added.
 */
bool tfa_child_env_keep(tfa_child_env_t *ce, char *const *envp, const char *self_path,
			char *(*copy_str)(const char *s, size_t n));

/*
 * Takes out of envp (in place: entries removed, LD_PRELOAD's value moved
 * within its string) what TFALLOC_INJECTED says an exec added, and
 * TFALLOC_INJECTED itself.  Returns how many entries were removed or
 * changed.
 */
int tfa_child_env_take_back(char **envp);

/*
 * Bytes tfa_child_env_build needs for envp; 0: nothing is missing (envp is
 * used as it is).
 */
size_t tfa_child_env_size(const tfa_child_env_t *ce, char *const *envp);

/*
 * envp with what is missing added, built in buf (size bytes, at least
 * tfa_child_env_size's answer, 8-byte aligned): the new array of pointers.
 * Its strings are envp's, ce's and buf's.
 */
char **tfa_child_env_build(const tfa_child_env_t *ce, char *const *envp, void *buf, size_t size);

/*
 * Whether envp is valgrind's launcher starting its tool (VALGRIND_LAUNCHER
 * set): the program valgrind runs must not get the shim, which would put its
 * own workings among memcheck's errors (libunwind's probes of memory, the
 * loader's blocks), and fail a test that runs valgrind with
 * --error-exitcode.  The program is valgrind's to watch, unless
 * TFALLOC_UNDER_VALGRIND asks for the shim there (its own memcheck tests).
 */
bool tfa_child_env_is_valgrind(char *const *envp);

/*
 * Bytes tfa_child_env_build_without needs for envp; 0: its LD_PRELOAD does
 * not name the shim (envp is used as it is).
 */
size_t tfa_child_env_size_without(const tfa_child_env_t *ce, char *const *envp);

/*
 * envp without the shim's element of LD_PRELOAD (without LD_PRELOAD when
 * nothing else is left in it), built in buf as tfa_child_env_build does.
 */
char **tfa_child_env_build_without(const tfa_child_env_t *ce, char *const *envp, void *buf, size_t size);

/*
 * Whether the program in the ELF file open as fd needs a sanitizer's runtime
 * that must be the first library loaded (DT_NEEDED libasan.so, libtsan.so,
 * liblsan.so, libhwasan.so, as gcc links them): with the shim ahead of it,
 * AddressSanitizer stops the program at start ("ASan runtime does not come
 * first").  Such a program is the sanitizer's to watch, and gets no shim.
 * Reads with pread only (an exec in a vfork child asks).
 */
bool tfa_child_env_needs_first(int fd);

/* The same for the program at path (relative to dirfd), or a #! script's interpreter. */
bool tfa_child_env_path_needs_first(int dirfd, const char *path);

#endif /* TFA_CORE_CHILD_ENV_H */
