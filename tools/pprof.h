/* SPDX-License-Identifier: MIT */
/*
 * pprof output (`tfalloc report --format pprof`): a gzip-compressed
 * perftools.profiles.Profile (profile.proto of github.com/google/pprof), as
 * `go tool pprof`, Pyroscope and Parca read it.  Encoded here (varints,
 * length-delimited fields, packed repeated fields) and compressed with zlib:
 * no protobuf library.
 *
 * Sample types alloc_objects/count, alloc_space/bytes, inuse_objects/count,
 * inuse_space/bytes (in use when the profile was written: at exit, the
 * leaks), the default inuse_space.  One sample per site and process, with a
 * numeric label "pid" and a string label "device"; allocations recorded
 * without a stack are one sample per device whose only frame is the function
 * "[no stack]".  A location per distinct address of a process, with its
 * mapping (the module the process had there: range, path, build id in hex)
 * and one Line per frame, the inlined calls first; its address is the return
 * address minus 1 (inside the call, as pprof expects).  Functions are
 * deduplicated by name, system name and file; a frame without a function is
 * named as in the other formats (tfa_frame_name: "MODULE+0xOFFSET").
 */
#ifndef TFA_TOOLS_PPROF_H
#define TFA_TOOLS_PPROF_H

#include <stddef.h>
#include <stdio.h>

#include "core/profile_read.h"

/*
 * Writes the profiles[0..n) as one gzip'd pprof profile to f.  Returns 0; or
 * -1 with a one-line message in err: nothing written (out of memory, zlib
 * failed), or, when err does not say so, written with frames named by
 * address because a symbolizer could not be made.
 */
int tfa_pprof_write(FILE *f, const tfa_profile_t *const *profiles, size_t n, char *err,
                    size_t errlen);

#endif /* TFA_TOOLS_PPROF_H */
