/* SPDX-License-Identifier: MIT */
/*
 * The shim's options, read from TFALLOC_* environment variables.
 *
 * One X-macro table defines every option: the struct fields, the defaults,
 * the parser and the help text all come from it.  Parsing never allocates
 * (it runs inside the host program's first malloc calls) and never fails: a
 * bad value gives one line saying what was wrong and what is used instead,
 * and the default stays.
 *
 * Types: str (at most TFA_OPT_STR_MAX - 1 bytes), bool (1/0, true/false,
 * yes/no, on/off, any case), size (a count of bytes with an optional K, M, G,
 * T suffix, powers of 1024, optional "B" or "iB"), uint (a decimal count).
 */
#ifndef TFA_CORE_OPTIONS_H
#define TFA_CORE_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"

#define TFA_OPT_STR_MAX 4096

/*      NAME            field           type  default  help */
#define TFA_OPTIONS(X)                                                                        \
	X(ALLOCATOR,      allocator,      str,  "",     "host allocator by registry name (jemalloc, glibc); empty: the highest priority") \
	X(LIMIT,          limit,          size, 0,      "bytes_limit of the cpu device: allocations that would pass it fail with ENOMEM; 0: none") \
	X(CUDA_LIMIT,     cuda_limit,     str,  "",     "bytes_limit per CUDA device: ORDINAL:SIZE[,...] (e.g. 0:8G,1:4G; host:SIZE and managed:SIZE for pinned host and managed memory); allocations past it fail with the API's out-of-memory error") \
	X(CUDA_TRACE,     cuda_trace,     bool, false,  "log on stderr every CUDA function tfalloc hands out in place of the driver's or the runtime's (dlsym, cuGetProcAddress, cudaGetDriverEntryPoint)") \
	X(OUTPUT,         output,         str,  "",     "directory for profile files (relative: from the working directory at start); empty: the working directory at start") \
	X(QUIET,          quiet,          bool, false,  "no summary line on stderr at exit")                     \
	X(LOG,            log,            str,  "",     "a file or FIFO tfalloc's lines go to instead of stderr (relative: from the working directory at start): appended to, made with mode 0600 when missing; where it cannot be opened, stderr. tfalloc run sets a FIFO it reads; empty: stderr") \
	X(PROFILE,        profile,        bool, true,   "write a profile file at exit")                          \
	X(ABORT_ON_ERROR, abort_on_error, bool, false,  "abort() on a double, invalid or mismatched free")        \
	X(MAX_ERRORS,     max_errors,     uint, 20,     "memory errors printed on stderr, per kind (all are counted)") \
	X(CATCH_SIGNALS,  catch_signals,  bool, true,   "write the profile when a fatal signal ends the process") \
	X(CONTROL_SIGNAL, control_signal, uint, 50,     "real-time signal by which tfalloc snapshot and tfalloc top ask the running process for its profile or figures (the process's user only); 0: none") \
	X(STACKS,         stacks,         str,  "unwind", "call stacks of allocations: unwind (libunwind), fp (frame pointers), none") \
	X(STACK_DEPTH,    stack_depth,    uint, 64,     "frames recorded per stack (1 to 128)")                  \
	X(STACK_CACHE,    stack_cache,    bool, true,   "TFALLOC_STACKS=unwind: each thread keeps its last stack and walks only the frames that changed, checking the others; 0: every frame walked every time (the same stacks, slower)") \
	X(SAMPLE_BYTES,   sample_bytes,   size, 0,      "record stacks for a sample: one every N bytes on average (Poisson); 0: every allocation") \
	X(TRACK,          track,          str,  "all",  "blocks the pointer table records: all (exact bytes in use, leaks, every double and mismatched free) or sampled (only the blocks sampled for stacks, as jemalloc's heap profiler: exact counts and allocated bytes, estimated bytes and leaks, no leak gate; double and mismatched frees of unsampled blocks go unseen; TFALLOC_SAMPLE_BYTES=0 means 512K)") \
	X(MAX_STACKS,     max_stacks,     uint, 100000, "distinct call stacks kept whole; past that, new stacks keep their 8 innermost frames (memory and profile size stay bounded)") \
	X(FLUSH_INTERVAL_MS, flush_interval_ms, uint, 5000, "write a snapshot of the profile every N milliseconds while the program allocates, so a killed process leaves one; 0: only at the end") \
	X(LEAK_CLASSES,   leak_classes,   bool, true,   "at exit, classify leaked blocks by reachability as valgrind's memcheck does (definite, indirect, possible, reachable); 0: all unclassified") \
	X(TAG_BY,         tag_by,         str,  "",     "charge allocations to resources without code changes: thread (the resource threads/NAME of the allocating thread's name); empty: only the control API's scopes") \
	X(UNDER_VALGRIND, under_valgrind, bool, false,  "1: the programs valgrind's launcher starts keep the shim (to check the shim itself under memcheck); default: they get none, and memcheck reports the program's own errors only")

/*
 * Variables the tfalloc command reads (TFALLOC_RUN_LOG: the FIFO a tfalloc
 * run made, which a tfalloc run inside it replaces with its own), and what
 * an exec added (core/child_env.h); the shim accepts them silently.
 */
#define TFA_TOOL_VARIABLES "TFALLOC_LIBRARY TFALLOC_INJECTED TFALLOC_RUN_LOG TFALLOC_HANDOFF"

typedef enum tfa_opt_state_e {
	TFA_OPT_DEFAULT = 0, /* not set, or set to a bad value */
	TFA_OPT_SET = 1,
} tfa_opt_state_t;

#define TFA_OPT_TYPE_str  char
#define TFA_OPT_TYPE_bool bool
#define TFA_OPT_TYPE_size uint64_t
#define TFA_OPT_TYPE_uint uint64_t
#define TFA_OPT_DIM_str   [TFA_OPT_STR_MAX]
#define TFA_OPT_DIM_bool
#define TFA_OPT_DIM_size
#define TFA_OPT_DIM_uint

typedef struct tfa_options_s {
#define TFA_OPT_FIELD(NAME, field, type, def, help) TFA_OPT_TYPE_##type field TFA_OPT_DIM_##type;
	TFA_OPTIONS(TFA_OPT_FIELD)
#undef TFA_OPT_FIELD
#define TFA_OPT_STATE(NAME, field, type, def, help) tfa_opt_state_t field##_state;
	TFA_OPTIONS(TFA_OPT_STATE)
#undef TFA_OPT_STATE
} tfa_options_t;

/* Receives each one-line complaint (without newline). */
typedef void (*tfa_diag_fn)(void *ctx, const char *msg);

/* Fills out with every default. */
void tfa_options_defaults(tfa_options_t *out);

/*
 * Sets out from the TFALLOC_* entries of envp (a NULL-terminated environ
 * array; NULL: none) on top of the defaults.  Each bad value and unknown
 * TFALLOC_ variable gives one diag line.  Returns the number of complaints.
 * [never allocates]
 */
int tfa_options_parse(char *const *envp, tfa_options_t *out, tfa_diag_fn diag, void *ctx);

/*
 * Parses one value of a type ("size", "bool", "uint").  Return 0 and set
 * *out, or -EINVAL (not a value of the type), -ERANGE (too large).
 */
int tfa_parse_size(const char *s, uint64_t *out) TFA_MUST_CHECK;
int tfa_parse_bool(const char *s, bool *out) TFA_MUST_CHECK;
int tfa_parse_uint(const char *s, uint64_t *out) TFA_MUST_CHECK;

/* Prints "TFALLOC_NAME  type  default  help" lines through fn, for --help-env and docs. */
void tfa_options_describe(void (*fn)(void *ctx, const char *line), void *ctx);

#endif /* TFA_CORE_OPTIONS_H */
