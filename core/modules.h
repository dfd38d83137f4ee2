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
 *             known.  Refreshes happen at init, when a newly recorded stack
 *             holds an address no known module covers, and before a profile
 *             is written; never from a signal handler.
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
} tfa_module_t;

/*
 * Appends the modules loaded now and not yet known.  Returns false when
 * another thread was refreshing (the caller goes on; the next refresh will
 * see them): a malloc inside the loader's own lock must not wait for a
 * thread that waits for that lock.  [takes modules lock, loader lock]
 */
bool tfa_modules_refresh(void);

/* Whether a known module covers addr.  [lock-free] [async-signal-safe] */
bool tfa_modules_covers(uintptr_t addr);

/* The first module discovered; follow ->next.  Entries never change once seen. */
const tfa_module_t *tfa_modules_first(void);

/* Number of modules known. */
uint32_t tfa_modules_count(void);

void tfa_modules_prefork(void);
void tfa_modules_postfork_parent(void);
void tfa_modules_postfork_child(void);

#endif /* TFA_CORE_MODULES_H */
