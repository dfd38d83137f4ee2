/* SPDX-License-Identifier: MIT */
/*
 * The symbolizer of the tools: turns the addresses a profile recorded into
 * functions, source files and lines, with the chain of inlined calls, long
 * after the process that recorded them is gone.  For `tfalloc report` and the
 * tests only: it uses malloc freely and is never linked into the shim.
 *
 * Input: the module map the process recorded (for each ELF object it had
 * mapped: path, load bias, mapped range, GNU build id) and addresses.  One
 * libdwfl session (elfutils) holds every module of the map at the address the
 * process had it at, so the addresses of the dead process resolve as they
 * were, also for libraries the process dlclose'd before the profile was
 * written.  Debug information is found as gdb finds it: in the file itself,
 * then through the standard debuginfo path (":.debug:/usr/lib/debug": by
 * build id in DIR/.build-id/xx/rest.debug, by .gnu_debuglink next to the
 * file, in its .debug/ subdirectory, or under DIR/<the file's directory>),
 * including dwz's .gnu_debugaltlink files.  libdwfl also asks debuginfod
 * servers when DEBUGINFOD_URLS is set in the environment (Debian's
 * libdebuginfod-common sets it in login shells when the administrator chose
 * so); unset it to stay offline.
 *
 * The build id guards against a file replaced since the run (a package
 * upgrade, a rebuild): when the file at the recorded path has another build
 * id, or none, nothing is read from it (wrong lines are worse than none), and
 * the symbolizer looks for DIR/.build-id/xx/rest.debug by the recorded build
 * id in the absolute directories of the debuginfo path instead; the same when
 * the file is gone.  A module with no build id recorded is used as found.
 *
 * Each module's file is opened once, when the symbolizer is made; its debug
 * information is read the first time an address in it is asked about.  Each
 * distinct address is symbolized once: the answers are cached and stay valid
 * (same pointers) until tfa_symbolizer_free.  Equal strings in answers are
 * the same pointer (interned), so callers may compare functions and files by
 * pointer.  Not thread-safe: one thread at a time per symbolizer.
 */
#ifndef TFA_TOOLS_SYMBOLIZE_H
#define TFA_TOOLS_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One ELF object of the recorded module map. */
typedef struct tfa_sym_module_s {
	const char *path; /* the file the process mapped; NULL or "" when none ([vdso]) */
	uint64_t bias;    /* load bias (dlpi_addr, l_addr): address = ELF vaddr + bias */
	uint64_t start,
	        end; /* the mapped range [start, end); end <= start: take it from the file */
	const uint8_t *build_id; /* NT_GNU_BUILD_ID bytes; NULL: none recorded */
	size_t build_id_len;
} tfa_sym_module_t;

/* Options of tfa_symbolizer_new; NULL means all defaults. */
typedef struct tfa_sym_options_s {
	/*
	 * libdwfl's debuginfo path: ':'-separated directories; an empty entry is
	 * the file's own directory, a relative one a subdirectory of it.  NULL:
	 * libdwfl's default, ":.debug:/usr/lib/debug".
	 */
	const char *debuginfo_path;
} tfa_sym_options_t;

enum tfa_sym_flag_e {
	/* This frame is an inlined call: the next frame is the function it was inlined into. */
	TFA_SYM_INLINED = 1u << 0,
	/* The address is in no module of the map: only pc is known. */
	TFA_SYM_NO_MODULE = 1u << 1,
	/* The module's file could not be opened (gone, or no file: "", [vdso], linux-vdso.so.1)
	 * and no debug file by build id was found: module and module_offset only. */
	TFA_SYM_NO_FILE = 1u << 2,
	/* The file at the module's path has another build id than the process mapped (replaced
	 * since the run) and no debug file by build id was found: module and module_offset only. */
	TFA_SYM_BUILD_ID_MISMATCH = 1u << 3,
	/* The module's file was gone or replaced; what is known comes from the separate debug
	 * file found by the recorded build id (DIR/.build-id/xx/rest.debug). */
	TFA_SYM_DEBUG_BY_BUILD_ID = 1u << 4,
};

/*
 * One frame of an address.  Every field but pc may be unknown: NULL strings,
 * 0 numbers.  Only the flags of the address's module (TFA_SYM_NO_FILE,
 * TFA_SYM_BUILD_ID_MISMATCH, TFA_SYM_DEBUG_BY_BUILD_ID) and TFA_SYM_INLINED
 * appear in frames of an address in a module.
 */
typedef struct tfa_sym_frame_s {
	uint64_t pc;          /* the address asked about (as given: before any -1) */
	const char *function; /* demangled (C++); NULL: unknown */
	const char *file;     /* source file, absolute when the debug info allows; NULL: unknown */
	uint32_t line;        /* 0: unknown (then file is NULL too) */
	uint32_t column;      /* 0: unknown */
	const char *module;   /* the module's path as recorded ("" when the map gave none);
	                         * NULL with TFA_SYM_NO_MODULE */
	uint64_t module_offset; /* pc - the module's load bias: the address `addr2line -e
	                         * MODULE` takes (for a return address, take 1 off) */
	uint64_t symbol_offset; /* in the last (outermost) frame: pc - the address of the
	                         * symbol table's function symbol containing it; 0 when none */
	uint32_t flags;         /* enum tfa_sym_flag_e */
} tfa_sym_frame_t;

typedef struct tfa_symbolizer_s tfa_symbolizer_t;

/*
 * Makes a symbolizer for the module map mods[0..n) (copied: the caller may
 * free it afterwards) and opens every module's file.  A module whose file is
 * missing or replaced is no error (its frames say so).  Paths should be
 * absolute (a relative one is opened from the current directory).  When
 * ranges overlap (a library unloaded and another loaded in its place), the
 * module listed later wins; entries with the same path, bias and build id
 * (a library loaded again at the same place) share one file.  Returns NULL on
 * failure (out of memory, libdwfl could not start) with a one-line message
 * in err (when errlen > 0).
 */
tfa_symbolizer_t *tfa_symbolizer_new(const tfa_sym_module_t *mods, size_t n,
                                     const tfa_sym_options_t *opts, char *err, size_t errlen);

/*
 * Symbolizes a return address, as stack captures record them: looks up
 * pc - 1, inside the call instruction, so that the line is that of the call
 * even when the call is the last instruction of its function.  Sets *frames
 * to nframes >= 1 frames, innermost first (the inlined calls, then the real
 * function); they belong to the symbolizer.  Returns 0, or -ENOMEM (nothing
 * set; the symbolizer stays usable).
 */
int tfa_symbolize(tfa_symbolizer_t *s, uint64_t pc, const tfa_sym_frame_t **frames,
                  size_t *nframes);

/* The same for an address that is not a return address (a function's entry, a faulting pc). */
int tfa_symbolize_addr(tfa_symbolizer_t *s, uint64_t addr, const tfa_sym_frame_t **frames,
                       size_t *nframes);

/*
 * The state of module i (index in the map given to tfa_symbolizer_new): its
 * flags (TFA_SYM_NO_FILE, TFA_SYM_BUILD_ID_MISMATCH, TFA_SYM_DEBUG_BY_BUILD_ID,
 * 0 when the file was found as recorded) and, when why is not NULL, a short
 * message saying what went wrong or which file serves it ("" when nothing to
 * say), for reports to show once per module instead of in every frame.
 */
uint32_t tfa_symbolizer_module_state(const tfa_symbolizer_t *s, size_t i, const char **why);

/* Distinct addresses symbolized so far (the cache's size). */
size_t tfa_symbolizer_cached(const tfa_symbolizer_t *s);

/* Closes every file and frees every answer.  NULL: no-op. */
void tfa_symbolizer_free(tfa_symbolizer_t *s);

/*
 * Demangles a C++ (Itanium ABI) symbol name with libstdc++'s __cxa_demangle.
 * Returns a malloc'd string, or NULL when name is not a mangled name.
 */
char *tfa_demangle(const char *name);

#endif /* TFA_TOOLS_SYMBOLIZE_H */
