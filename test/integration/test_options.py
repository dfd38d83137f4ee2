# SPDX-License-Identifier: MIT
"""Options and their mistakes, and the summary line.

  unknown_allocator  TFALLOC_ALLOCATOR=nosuch (LD_PRELOAD alone, and through
                     tfalloc run --allocator nosuch): exactly one line on
                     stderr naming nosuch and the registered allocators; the
                     program runs normally on the default (the report says
                     jemalloc) with exact numbers
  bad_limit          TFALLOC_LIMIT=12Q: one line naming the value, the program
                     runs, bytes_limit 0; tfalloc run --limit 12Q: one line,
                     exit status 125 (tfalloc run's own failure), the program
                     does not run
  summary            without TFALLOC_QUIET the process prints exactly one
                     "tfalloc[PID]: ..." line on stderr; TFALLOC_QUIET=1 and
                     tfalloc run --quiet print nothing; tfalloc run without
                     --quiet prints the process's line
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402


def one_line(r, words, what):
    lines = r.err_lines()
    T.check(len(lines) == 1, "%s: expected exactly one line on stderr, got %d:\n%s" % (what, len(lines), r.err))
    for w in words:
        T.check(w in lines[0], "%s: the line does not mention %r: %s" % (what, w, lines[0]))
    return lines[0]


def leaks_run_ok(ctx, r, rep, plain, what, allocator, via):
    T.same_output(plain, r, what)
    proc = T.only_process(rep, what)
    T.check_exited(proc, 0)
    T.check_consistent(proc, allocator=allocator)
    base = ctx.baseline("tp_leaks", via=via, allocator=allocator)
    T.check_ledger(proc, base, T.parse_ledger(r))
    return proc


def case_unknown_allocator(ctx):
    path = ctx.prog("tp_leaks")
    plain = ctx.run_plain([path])
    r, rep = ctx.run_and_report([path], via="preload", allocator="nosuch", what="TFALLOC_ALLOCATOR=nosuch")
    one_line(r, ["nosuch", "jemalloc", "glibc"], "TFALLOC_ALLOCATOR=nosuch")
    leaks_run_ok(ctx, r, rep, plain, "TFALLOC_ALLOCATOR=nosuch", "jemalloc", "preload")

    r, rep = ctx.run_and_report([path], via="tool", allocator="nosuch", what="tfalloc run --allocator nosuch")
    one_line(r, ["nosuch", "jemalloc", "glibc"], "tfalloc run --allocator nosuch")
    leaks_run_ok(ctx, r, rep, plain, "tfalloc run --allocator nosuch", "jemalloc", "tool")


def case_bad_limit(ctx):
    path = ctx.prog("tp_leaks")
    plain = ctx.run_plain([path])
    r, rep = ctx.run_and_report([path], via="preload", env={"TFALLOC_LIMIT": "12Q"}, what="TFALLOC_LIMIT=12Q")
    one_line(r, ["12Q"], "TFALLOC_LIMIT=12Q")
    proc = leaks_run_ok(ctx, r, rep, plain, "TFALLOC_LIMIT=12Q", ctx.allocator, "preload")
    T.check_eq(T.device(proc).get("bytes_limit"), 0, "bytes_limit after TFALLOC_LIMIT=12Q")

    r = ctx.run_tool([path], limit="12Q")
    T.check_eq(r.returncode, 125, "tfalloc run --limit 12Q: exit status\n" + r.describe())
    one_line(r, ["12Q"], "tfalloc run --limit 12Q")
    T.check_eq(r.out, "", "stdout of tfalloc run --limit 12Q (the program must not run)")


def case_summary(ctx):
    path = ctx.prog("tp_leaks")
    r, rep = ctx.run_and_report([path], via="preload", quiet=False, what="summary line")
    lines = r.err_lines()
    T.check(len(lines) == 1 and lines[0].startswith("tfalloc[%d]:" % r.pid),
            "expected one line 'tfalloc[%d]: ...' on stderr, got:\n%s" % (r.pid, r.err))
    T.check(re.search(r"\d", lines[0][len("tfalloc[%d]:" % r.pid):]),
            "the summary line has no figures: " + lines[0])

    r = ctx.run_preload([path], quiet=False, env={"TFALLOC_QUIET": "1"})
    T.check_eq(r.err, "", "stderr with TFALLOC_QUIET=1")
    r = ctx.run_tool([path], quiet=True)
    T.check_eq(r.err, "", "stderr with tfalloc run --quiet")
    r = ctx.run_tool([path], quiet=False)
    T.check_eq(r.returncode, 0, "tfalloc run without --quiet: status")
    pid = T.only_process(ctx.report(r.outdir))["pid"]
    mine = [l for l in r.err_lines() if l.startswith("tfalloc[%d]:" % pid)]
    T.check(len(mine) == 1, "tfalloc run without --quiet: expected one 'tfalloc[%d]:' line, got:\n%s" % (pid, r.err))


CASES = {
    "unknown_allocator": case_unknown_allocator,
    "bad_limit": case_bad_limit,
    "summary": case_summary,
}

if __name__ == "__main__":
    T.main(CASES)
