# SPDX-License-Identifier: MIT
"""Exact numbers: test programs whose allocations are known to the byte.

Each program checks the C semantics of its calls itself (exit status 90 and a
message when one is wrong) and prints a LEDGER of what the report must say;
the report minus that of the same binary run with "baseline" (start-up
allocations of the C runtime) must match it.  Every program is run plain
first: its semantic checks must pass against glibc too, and its stdout must
be the same under the shim.

Cases (each run with --allocator jemalloc and glibc):
  empty           a C program that allocates nothing has an empty profile:
                  the shim's own dependencies (libjemalloc, libstdc++'s
                  emergency pool) do not show
  leaks           known leaks (bytes and blocks), a known peak, malloc(0), calloc
  calloc_realloc  calloc and reallocarray overflow, realloc corner cases,
                  refused requests count nothing, malloc_usable_size
  aligned         posix_memalign, aligned_alloc, memalign, valloc, pvalloc and
                  their error cases
  new             every operator new / delete form
  preload         tp_leaks with LD_PRELOAD=libtfalloc.so and TFALLOC_* only
  exit_status     tp_leaks exiting with status 7: the status and exit_code kept
  libc            tp_libc: glibc allocates for the program (strdup, getline,
                  open_memstream, scandir, realpath, glob, regcomp, iconv, NSS,
                  dlopen, pthread key destructors) and the program frees with
                  free(): the same output, no memory error, a consistent report
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402


def exact(ctx, prog, args=(), via="tool", status=0):
    path = ctx.prog(prog)
    argv = [path] + list(args)
    plain = ctx.run_plain(argv)
    T.check(plain.returncode == status,
            "%s fails its own checks without the shim (a broken test program)\n%s" % (prog, plain.describe()))
    r, rep = ctx.run_and_report(argv, via=via, what=prog, expect_status=status)
    T.same_output(plain, r, prog)
    proc = T.only_process(rep, prog)
    T.check_exited(proc, status)
    T.check_consistent(proc, allocator=ctx.allocator or "jemalloc")
    T.check_eq(proc.get("exe"), os.path.realpath(path), prog + ": exe")
    T.check_eq(proc.get("command"), " ".join(argv), prog + ": command")
    T.check_eq(proc.get("forked"), False, prog + ": forked")
    if via == "tool":
        T.check_eq(proc.get("ppid"), r.pid, prog + ": ppid (the tfalloc run process)")
    else:
        T.check_eq(proc.get("pid"), r.pid, prog + ": pid")
        T.check_eq(proc.get("ppid"), os.getpid(), prog + ": ppid")
    base = ctx.baseline(prog, via=via)
    T.check_ledger(proc, base, T.parse_ledger(r))
    return proc, base, r


def case_empty(ctx):
    path = ctx.prog("tp_empty")
    r, rep = ctx.run_and_report([path], what="tp_empty")
    proc = T.only_process(rep, "tp_empty")
    T.check_exited(proc, 0)
    T.check_consistent(proc, require_allocs=False, allocator=ctx.allocator)
    d = T.device(proc)
    for f in ("num_allocs", "num_frees", "bytes_in_use", "peak_bytes_in_use", "total_bytes"):
        T.check_eq(d[f], 0, "tp_empty (allocates nothing; what shows is the shim's or its "
                   "dependencies' own memory): " + f)
    T.check_eq(T.leak_totals(proc)[:2], (0, 0), "tp_empty: leaked (bytes, blocks)")


def case_leaks(ctx):
    proc, base, _ = exact(ctx, "tp_leaks")
    # The numbers of the program's header comment, independent of its ledger.
    d, b = T.device(proc), T.device(base)
    T.check_eq(d["bytes_in_use"] - b["bytes_in_use"], 206220, "tp_leaks: bytes in use at exit")
    T.check_eq(d["num_allocs"] - b["num_allocs"], 47, "tp_leaks: num_allocs")
    T.check_eq(d["num_frees"] - b["num_frees"], 23, "tp_leaks: num_frees")
    T.check_eq(T.leak_totals(proc)[1] - T.leak_totals(base)[1], 24, "tp_leaks: leaked blocks")
    if b["peak_bytes_in_use"] == 0:
        T.check_eq(d["peak_bytes_in_use"], 1048576, "tp_leaks: peak")
        T.check_eq(d["largest_alloc_size"], 1048576, "tp_leaks: largest_alloc_size")
    if b["peak_blocks_in_use"] == 0:
        T.check_eq(d["peak_blocks_in_use"], 44, "tp_leaks: peak_blocks_in_use (2 + 3 + 40 - 1 small ones)")


def case_calloc_realloc(ctx):
    exact(ctx, "tp_calloc_realloc")


def case_aligned(ctx):
    exact(ctx, "tp_aligned")


def case_new(ctx):
    exact(ctx, "tp_new")


def case_preload(ctx):
    proc, _, r = exact(ctx, "tp_leaks", via="preload")
    T.check_eq(r.err, "", "stderr with TFALLOC_QUIET=1")
    files = os.listdir(r.outdir)
    T.check_eq(len(files), 1, "profile files in TFALLOC_OUTPUT %s: %s" % (r.outdir, files))
    mode = os.stat(os.path.join(r.outdir, files[0])).st_mode & 0o777
    T.check_eq(oct(mode), oct(0o600), "mode of the profile file " + files[0])


def case_exit_status(ctx):
    exact(ctx, "tp_leaks", args=["exit-code", "7"], status=7)


def case_libc(ctx):
    path = ctx.prog("tp_libc")
    plain = ctx.run_plain([path])
    T.check(plain.returncode == 0, "tp_libc fails without the shim\n" + plain.describe())
    for via in ("tool", "preload"):
        r, rep = ctx.run_and_report([path], via=via, what="tp_libc")
        T.same_output(plain, r, "tp_libc")
        proc = T.only_process(rep, "tp_libc")
        T.check_exited(proc, 0)
        T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator)
        T.check_ge(T.device(proc)["num_allocs"], 100, "tp_libc: num_allocs")


CASES = {
    "empty": case_empty,
    "leaks": case_leaks,
    "calloc_realloc": case_calloc_realloc,
    "aligned": case_aligned,
    "new": case_new,
    "preload": case_preload,
    "exit_status": case_exit_status,
    "libc": case_libc,
}

if __name__ == "__main__":
    T.main(CASES)
