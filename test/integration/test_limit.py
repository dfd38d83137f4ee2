# SPDX-License-Identifier: MIT
"""The bytes limit (tfalloc run --limit 8M, TFALLOC_LIMIT=8388608).

tp_limit checks the semantics itself: malloc, calloc, aligned_alloc,
memalign past the limit give NULL and ENOMEM, posix_memalign ENOMEM, realloc
NULL and ENOMEM with the block intact; new, new[] and aligned new throw
std::bad_alloc; nothrow new returns nullptr; a new_handler is called (once)
and new succeeds when it made room.  The report must say bytes_limit 8388608
and count only what succeeded (each exception thrown is one runtime malloc
outside the ledger: allowed on top).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

LIMIT = 8 * 1024 * 1024


def limit_case(ctx, via):
    path = ctx.prog("tp_limit")
    if via == "tool":
        kw = {"limit": "8M"}
    else:
        kw = {"env": {"TFALLOC_LIMIT": str(LIMIT)}}
    r, rep = ctx.run_and_report([path], via=via, what="tp_limit", expect_status=0, **kw)
    T.check("limit done" in r.out, "tp_limit did not finish\n" + r.describe())
    proc = T.only_process(rep, "tp_limit")
    T.check_exited(proc, 0)
    T.check_consistent(proc, allocator=ctx.allocator)
    T.check_eq(T.device(proc).get("bytes_limit"), LIMIT, "bytes_limit")
    throws = int(T.parse_lines(r, "THROWS")[0][0])
    base = ctx.baseline("tp_limit", via=via, **kw)
    T.check_eq(T.device(base).get("bytes_limit"), LIMIT, "baseline's bytes_limit")
    T.check_ledger(proc, base, T.parse_ledger(r),
                   slack={"num_allocs": throws, "num_frees": throws, "total_bytes": throws * 1024})


CASES = {
    "limit": lambda ctx: limit_case(ctx, "tool"),
    "limit_env": lambda ctx: limit_case(ctx, "preload"),
}

if __name__ == "__main__":
    T.main(CASES)
