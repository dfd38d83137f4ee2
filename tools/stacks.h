/* SPDX-License-Identifier: MIT */
/*
 * Stacks of a profile as people read them: the symbolizer made from the
 * module map a profile recorded, and one name per frame.  Shared by every
 * output of `tfalloc report` (text, JSON, folded stacks, pprof, HTML), so
 * that a frame reads the same everywhere.
 */
#ifndef TFA_TOOLS_STACKS_H
#define TFA_TOOLS_STACKS_H

#include <stddef.h>
#include <stdint.h>

#include "core/profile_read.h"
#include "tools/symbolize.h"

/*
 * A symbolizer over p's module map (p->modules, in the order of discovery, so
 * that a module loaded where an unloaded one was wins for later stacks).
 * NULL with a one-line message in err when it cannot be made (out of memory,
 * libdwfl failed); a profile without modules gives a symbolizer that answers
 * every address with TFA_SYM_NO_MODULE.
 */
tfa_symbolizer_t *tfa_profile_symbolizer(const tfa_profile_t *p, char *err, size_t errlen);

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
