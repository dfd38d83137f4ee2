/* SPDX-License-Identifier: MIT */
/*
 * The seam between the exported entry points (preload/) and the tracker: the
 * handful of calls preload/ makes, in the role of heaptrack's libheaptrack.h.
 * preload/ handles the C semantics and errno; everything else is here.
 *
 * States: UNINIT (before the shim's constructor: allocations are served by
 * glibc and recorded already), INITIALIZING (options, allocator choice; under
 * the guard), READY, SHUTDOWN (the profile is written; calls keep working).
 */
#ifndef TFA_CORE_SHIM_H
#define TFA_CORE_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/allocator.h"
#include "core/ptr_table.h"

typedef enum tfa_shim_state_e {
	TFA_SHIM_UNINIT = 0,
	TFA_SHIM_INITIALIZING,
	TFA_SHIM_READY,
	TFA_SHIM_SHUTDOWN,
} tfa_shim_state_t;

/*
 * Allocates nbytes (0 allowed) at alignment (0: default; else a power of two)
 * for a call of `kind`.  NULL when refused.  [hot path]
 */
void *tfa_shim_alloc(size_t nbytes, size_t alignment, uint8_t kind, bool zero);

/*
 * Frees ptr (not NULL) for a call of `kind` (free: TFA_KIND_MALLOC, delete:
 * TFA_KIND_NEW, delete[]: TFA_KIND_NEW_ARRAY).  A pointer the shim did not hand
 * out is reported and never reaches a backend.  errno is preserved.  [hot path]
 */
void tfa_shim_free(void *ptr, uint8_t kind);

/*
 * The same, for an entry point made for one tracking mode (track): the tests
 * of the other mode fold away, and so do the registers its path would save
 * on entry.  Its fast path serves only when the fast path open is its mode's
 * (cpu_tracker.fast); otherwise the general path, which asks the mode.
 * Every process starts with TFA_SHIM_TRACK_ALL's entry points, and
 * tfa_shim_init calls tfa_shim_on_sample_only (when set) as it turns
 * sample-only tracking on, before the fast path opens; the mode never
 * changes after.  TFA_SHIM_TRACK_SAMPLED's are for sample-only tracking
 * only: their free trusts the filter of recorded blocks, kept in that mode.
 */
enum { TFA_SHIM_TRACK_ANY = 0, TFA_SHIM_TRACK_ALL = 1, TFA_SHIM_TRACK_SAMPLED = 2 };
void *tfa_shim_alloc_in(size_t nbytes, size_t alignment, uint8_t kind, bool zero, int track);
void tfa_shim_free_in(void *ptr, uint8_t kind, int track);
extern void (*tfa_shim_on_sample_only)(void);

/*
 * realloc of ptr (not NULL) to nbytes (> 0).  NULL when refused (ptr intact)
 * or when ptr is not the shim's (reported).
 */
void *tfa_shim_realloc(void *ptr, size_t nbytes);

/* malloc_usable_size: the backend's usable size, 0 for unknown pointers. */
size_t tfa_shim_usable_size(const void *ptr);

/* The constructor, the exit-status hook, the destructor. */
void tfa_shim_init(void);
void tfa_shim_fini(void);

/*
 * The process leaves through _exit: writes the profile, unless this is a
 * vfork child (it shares the parent's memory and must change nothing).
 */
void tfa_shim_on_fast_exit(int status);
/* quick_exit(status) is called: its status, for the profile its at_quick_exit handler writes. */
void tfa_shim_before_quick_exit(int status);

/*
 * exec: writes the profile (end reason exec) and returns true, unless this is
 * a vfork child or the profile is already written.  tfa_shim_exec_failed
 * withdraws it when exec returned and the process goes on.
 */
bool tfa_shim_before_exec(void);
void tfa_shim_exec_failed(void);

/*
 * What carries tfalloc to the programs this process executes, as it
 * reached the process (core/child_env.h); NULL before the shim started.
 */
struct tfa_child_env_s;
const struct tfa_child_env_s *tfa_shim_child_env(void);

/*
 * The process is about to change its user or group ids (setuid and the
 * rest), or its root directory (chroot; preload/cred_hooks.c): its profile's
 * name is reserved now and a descriptor to it kept, through which the
 * profile is written where the output directory is no longer the process's
 * to write, or to reach (a daemon that drops root, or confines itself).
 * A profile another thread writes meanwhile is waited for.  new_euid: the
 * effective user the call changes to ((uid_t)-1: none, or unknown); the
 * programs the process executes as that user write their profiles in the
 * output directory's uid-N, which it makes for them while it still can.
 */
void tfa_shim_before_credentials(uid_t new_euid);

/* Writes the profile now (a snapshot unless the process is ending).  Returns 0 or -errno. */
int tfa_shim_write_profile(uint32_t end_reason, int32_t exit_code) TFA_MUST_CHECK;

/*
 * For requests from outside the process (core/remote.h), each bracketed like
 * a shim call.  A snapshot of the profile now; in_handler: called from a
 * signal handler, which must not take the loader's lock.  0 or -errno; 0
 * without writing when the process is ending or profiles are off
 * (tfa_shim_profile_path then says nothing new).
 */
int tfa_shim_remote_snapshot(bool in_handler) TFA_MUST_CHECK;
/* The figures of now into fd (tfalloc top): PROCESS, DEVICE and the control API's records. */
int tfa_shim_write_stats(int fd) TFA_MUST_CHECK;

tfa_shim_state_t tfa_shim_state(void);

struct sigaction;
/*
 * sigaction as the program sees it.  For a fatal signal the shim keeps its
 * handler installed: a program that asks for SIG_DFL gets the default action
 * after its profile is written, one that installs a handler has it called by
 * the shim's; oldact reports what the program asked for.  Other signals, and
 * every call while the shim is not ready, go to glibc unchanged.
 */
int tfa_shim_sigaction(int sig, const struct sigaction *act, struct sigaction *oldact);

/* ---- for the control API (core/control.c) ---- */

/* Brackets a control call like an allocation: a fatal signal meanwhile waits for its end. */
void tfa_shim_call_begin(void);
void tfa_shim_call_end(void);

struct tfa_allocator_stats_s;
struct tfa_alloc_info_s;
struct tfa_record_s;
/* Statistics of a device code (0: cpu); false for a device the shim does not track. */
bool tfa_shim_device_stats(unsigned device, struct tfa_allocator_stats_s *out);
/* A live pointer's record and allocated size; false when the shim did not hand it out. */
bool tfa_shim_pointer_info(const void *ptr, struct tfa_alloc_info_s *info, uint64_t *allocated);
/* Calls fn for every live record (each shard of the table held meanwhile: fn takes no lock). */
void tfa_shim_foreach_record(void (*fn)(void *arg, const struct tfa_record_s *rec), void *arg);
/* Where the profile was last written ("" before the first). */
const char *tfa_shim_profile_path(void);
/* TFALLOC_CUDA_TRACE. */
bool tfa_shim_cuda_trace(void);
/* TFALLOC_QUIET. */
bool tfa_shim_quiet(void);

/*
 * The stack to record for an allocation of nbytes another API makes
 * (cuda_hooks/): as for malloc (every one, or a sample); 0: none.
 */
uint32_t tfa_shim_stack_for(size_t nbytes);

/* The fork triad of every module, in lock order. */
void tfa_shim_prefork(void);
void tfa_shim_postfork_parent(void);
void tfa_shim_postfork_child(void);

/* A library was loaded with RTLD_DEEPBIND: glibc may hold blocks its constructors made (preload/dl_hooks.c). */
void tfa_shim_note_deepbind(void);

/*
 * mallinfo2 and malloc_trim of the backend when it is jemalloc (glibc's
 * describe only glibc's heap, which then holds no block of the program):
 * false, or -1, when the backend is another, and glibc's own answer is right.
 */
struct mallinfo2;
bool tfa_shim_mallinfo(struct mallinfo2 *mi);
int tfa_shim_malloc_trim(void);

#endif /* TFA_CORE_SHIM_H */
