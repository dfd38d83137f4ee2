/* SPDX-License-Identifier: MIT */
/*
 * The module map: every ELF object the process had loaded while tfalloc
 * watched it (path, load bias, address range, GNU build id), so that a
 * report can symbolize recorded return addresses after the process is gone,
 * including code that dlclose has since unloaded.
 *
 * Glossary:
 *   module    one loaded object as dl_iterate_phdr reports it.  Entries are
 *             never removed: a module unloaded by dlclose stays in the map.
 *   refresh   a walk of the loader's list that appends the modules not yet
 *             known and marks the ones gone.  Refreshes happen at init, when
 *             a newly recorded stack holds an address no loaded module covers
 *             or the loader's load/unload counters moved, and before a
 *             profile is written; never from a signal handler.
 *   stamp     the caller's clock for "when": the shim passes the number of
 *             stacks recorded so far, so that a report knows which module
 *             held an address when a given stack was recorded, even after a
 *             dlclose and another object mapped at the same place.
 *   view      the sorted array of address ranges that answers "which module
 *             holds this address"; replaced (not changed) by a refresh, so
 *             readers need no lock.
 *
 * Memory comes from the arena, never from malloc.
 */
#ifndef TFA_CORE_MODULES_H
#define TFA_CORE_MODULES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/common.h"

#define TFA_BUILD_ID_MAX 32

typedef struct tfa_module_s {
	struct tfa_module_s *next; /* in load order of discovery */
	const char *path;          /* as the loader knows it; the executable's real path */
	uint64_t bias;             /* dlpi_addr: file virtual address + bias = run-time address */
	uint64_t start, end;       /* lowest and one past the highest address of its PT_LOAD segments */
	uint32_t build_id_len;
	uint8_t build_id[TFA_BUILD_ID_MAX];
	uint32_t seen_at; /* stamp of the refresh that found it */
	uint32_t gone_at; /* stamp of the refresh that found it unloaded; valid when gone */
	bool gone;        /* unloaded (dlclose) */
} tfa_module_t;

/*
 * Appends the modules loaded now and not yet known, and marks the known ones
 * no longer loaded as gone, both at stamp.  Returns false when another
 * thread was refreshing (the caller goes on; the next refresh will see
 * them): a malloc inside the loader's own lock must not wait for a thread
 * that waits for that lock.  [takes modules lock, loader lock]
 */
bool tfa_modules_refresh(uint32_t stamp);

/*
 * The executable's absolute path into out (cap bytes): /proc/self/exe, or
 * without /proc the name execve was given, from the working directory at
 * the first call.  Returns its length, or 0 when unknown or too long.
 */
size_t tfa_modules_exe_path(char *out, size_t cap);

/*
 * Whether objects were loaded or unloaded since the last refresh, from the
 * loader's own counters (dlpi_adds, dlpi_subs): one dl_iterate_phdr call
 * that stops at the first object.  [takes loader lock]
 */
bool tfa_modules_changed(void);

/* Whether a loaded module covers addr.  [lock-free] [async-signal-safe] */
bool tfa_modules_covers(uintptr_t addr);

/* The first module discovered; follow ->next.  Entries never change once seen. */
const tfa_module_t *tfa_modules_first(void);

/* Number of modules known. */
uint32_t tfa_modules_count(void);

void tfa_modules_prefork(void);
void tfa_modules_postfork_parent(void);
void tfa_modules_postfork_child(void);

#endif /* TFA_CORE_MODULES_H */
