/* SPDX-License-Identifier: MIT */
/*
 * Stacks of a profile as people read them: the symbolizer made from the
 * module map a profile recorded, and one name per frame.  Shared by every
 * output of `tfalloc report` (text, JSON, folded stacks, pprof, HTML), so
 * that a frame reads the same everywhere.
 */
#ifndef TFA_TOOLS_STACKS_H
#define TFA_TOOLS_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/profile_read.h"
#include "tools/symbolize.h"

/*
 * A symbolizer over p's module map (p->modules, in the order of discovery).
 * When ranges overlap (a library unloaded and another loaded in its place),
 * the module listed later wins: right for stacks recorded after the change
 * only.  tfa_profile_symbols below is right for every stack.  NULL with a
 * one-line message in err when it cannot be made (out of memory, libdwfl
 * failed); a profile without modules gives a symbolizer that answers every
 * address with TFA_SYM_NO_MODULE.
 */
tfa_symbolizer_t *tfa_profile_symbolizer(const tfa_profile_t *p, char *err, size_t errlen);

/*
 * Symbolizers by module file, shared by the profiles of one report: each file
 * (path and build id) is opened and its debug information read once, however
 * many processes mapped it and wherever they had it.
 */
typedef struct tfa_sym_cache_s tfa_sym_cache_t;

tfa_sym_cache_t *tfa_sym_cache_new(void); /* NULL: out of memory */
void tfa_sym_cache_free(tfa_sym_cache_t *c); /* NULL: no-op */

/*
 * Calls fn with the reason (tfa_symbolizer_module_state's message) of every
 * file the cache was asked for that could not serve its frames as recorded:
 * not the file the process mapped (a rebuilt executable), gone, not ELF.
 * Pseudo files ([vdso], anonymous code) are left out: they never have one.
 * A file found another way (by build id) is listed too, with the file used.
 * Returns how many.
 */
size_t tfa_sym_cache_problems(const tfa_sym_cache_t *c, void (*fn)(void *arg, const char *why), void *arg);

/*
 * The symbols of a profile's stacks: each address is resolved in the module
 * that held it when its stack was recorded (the map's seen_at/gone_at
 * stamps), also when a library was unloaded and another mapped at its
 * addresses later.  cache: shared with other profiles (NULL: one of its
 * own).  p and cache must outlive it.  NULL when memory ran out (message in
 * err).
 */
typedef struct tfa_profile_symbols_s tfa_profile_symbols_t;

tfa_profile_symbols_t *tfa_profile_symbols_new(const tfa_profile_t *p, tfa_sym_cache_t *cache,
                                               char *err, size_t errlen);

/*
 * As tfa_symbolize (tools/symbolize.h), for return address pc of stack
 * stack_id.  The frames are valid until the next call.
 */
int tfa_profile_symbolize(tfa_profile_symbols_t *ps, uint32_t stack_id, uint64_t pc,
                          const tfa_sym_frame_t **frames, size_t *nframes);

/*
 * The frames of return address pc of stack stack_id, innermost first.  With
 * no symbols (s NULL) or when they run out of memory, one frame in *fallback
 * with the pc and the module of p's map that held it (so that tfa_frame_name
 * gives "MODULE+0xOFFSET").  Never fails: every format shows every frame.
 */
void tfa_pc_frames(tfa_profile_symbols_t *s, const tfa_profile_t *p, uint32_t stack_id, uint64_t pc,
                   tfa_sym_frame_t *fallback, const tfa_sym_frame_t **frames, size_t *nframes);

/*
 * Calls fn for each frame of stack id (innermost first, inlined calls
 * before the function they were inlined into; index counts them).  Returns
 * false when p has no such stack (id 0 included).
 */
typedef void (*tfa_frame_fn)(void *ctx, unsigned index, const tfa_sym_frame_t *fr);
bool tfa_stack_frames(tfa_profile_symbols_t *s, const tfa_profile_t *p, uint32_t stack_id,
                      tfa_frame_fn fn, void *ctx);

/* NULL: no-op. */
void tfa_profile_symbols_free(tfa_profile_symbols_t *ps);

/*
 * One line's name for a frame: the function when known, else
 * "MODULE+0xOFFSET" (the module's base name), else "0xPC".  Written into
 * buf (always NUL-terminated); returns buf.
 */
const char *tfa_frame_name(const tfa_sym_frame_t *f, char *buf, size_t size);

/*
 * A site's figures (enum tfa_prof_site_field_e) as estimates for the whole
 * run.  Without sampling (p->sample_bytes 0) they are the recorded ones.
 * With sampling, a site holds only its sampled allocations: an allocation of
 * z bytes was sampled with probability 1 - exp(-z / sample_bytes) (the
 * Poisson process over bytes of jemalloc and tcmalloc), so each figure is
 * divided by that probability for its own mean block size (blocks and bytes
 * in use by the mean live block, the rest by the mean allocation).
 */
void tfa_site_estimate(const tfa_profile_t *p, const tfa_profile_site_t *site,
                       double out[TFA_SITEF_FIELD_COUNT]);

/* The base name of a path ("/usr/lib/libc.so.6" -> "libc.so.6"); "" for NULL. */
const char *tfa_base_name(const char *path);

#endif /* TFA_TOOLS_STACKS_H */
