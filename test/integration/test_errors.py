# SPDX-License-Identifier: MIT
"""Memory errors: tp_errors makes three double frees (one of a block past
glibc's thread cache, which a fast bin would make look in use), four invalid frees (a
stack address, an interior pointer, an mmap'd page, a realloc of a stack
address) and three mismatched frees (new[] then free, malloc then delete,
new then delete[]), printing "ERROR kind address" for each.

Under the shim the program must not crash (exit status 0), every error must
be in the report once, with its kind and address, the totals must match,
and the counts must be exact: a double or invalid free frees nothing, a
mismatched free frees the block.  (Without the shim glibc aborts on the
double free, so there is no plain run to compare with.)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402


def errors(ctx, via):
    path = ctx.prog("tp_errors")
    r, rep = ctx.run_and_report([path], via=via, what="tp_errors", expect_status=0)
    T.check("errors done" in r.out, "tp_errors did not finish\n" + r.describe())
    proc = T.only_process(rep, "tp_errors")
    T.check_exited(proc, 0)
    T.check_consistent(proc, allow_errors=True, allocator=ctx.allocator)

    expected = {}
    for kind, addr in T.parse_lines(r, "ERROR"):
        expected.setdefault((kind, int(addr, 16)), 0)
        expected[(kind, int(addr, 16))] += 1
    T.check_eq(len(expected), 10, "distinct errors the program made (its own output)")

    got = {}
    for e in proc.get("errors") or []:
        T.check(e.get("kind") in ("double_free", "invalid_free", "mismatched_free"),
                "unknown error kind in %r" % e)
        key = (e["kind"], int(str(e["address"]), 16))
        T.check(key not in got, "error listed twice: %r" % e)
        got[key] = e.get("count", 1)

    def fmt(keys):
        return ", ".join("%s %#x" % k for k in sorted(keys))

    missing = set(expected) - set(got)
    extra = set(got) - set(expected)
    T.check(not missing and not extra,
            "errors in the report differ from those made:\n  missing: %s\n  unexpected: %s\n  report: %s"
            % (fmt(missing) or "none", fmt(extra) or "none", proc.get("errors")))
    for key, n in expected.items():
        T.check_eq(got[key], n, "count of error %s %#x" % key)
    T.check_eq(T.error_totals(proc),
               {"double_free": 3, "invalid_free": 4, "mismatched_free": 3, "not_recorded": 0},
               "error_totals")

    base = ctx.baseline("tp_errors", via=via)
    T.check_ledger(proc, base, T.parse_ledger(r))


def own_new(ctx, prog="tp_own_new"):
    """tp_own_new replaces the scalar operator new (over malloc) and keeps
    the default delete: its blocks, freed by delete, are no mismatch (there
    had been 108); new[] freed by delete and malloc freed by delete[] still
    are, each once.  tp_own_new_aligned replaces only the aligned operator
    new: its over-aligned objects, freed by the default aligned delete, are
    no mismatch either (there had been 10)."""
    path = ctx.prog(prog)
    plain = ctx.run_plain([path])
    T.check_eq(plain.returncode, 0, "tp_own_new without tfalloc\n" + plain.describe())
    r, rep = ctx.run_and_report([path], what="tp_own_new", expect_status=0)
    T.check("own new: 100 strings" in r.out, "tp_own_new did not finish\n" + r.describe())
    proc = T.only_process(rep, "tp_own_new")
    T.check_exited(proc, 0)
    T.check_consistent(proc, allow_errors=True, allocator=ctx.allocator)
    made = sorted(int(a, 16) for kind, a in T.parse_lines(r, "ERROR"))
    got = sorted(int(str(e["address"]), 16) for e in proc.get("errors") or [])
    T.check_eq(got, made, "the mismatched frees reported (%r)" % proc.get("errors"))
    T.check_eq(T.error_totals(proc), {"double_free": 0, "invalid_free": 0, "mismatched_free": 2, "not_recorded": 0},
               "error_totals")


CASES = {
    "errors": lambda ctx: errors(ctx, "tool"),
    "errors_preload": lambda ctx: errors(ctx, "preload"),
    "own_new": own_new,
    "own_new_aligned": lambda ctx: own_new(ctx, "tp_own_new_aligned"),
}

if __name__ == "__main__":
    T.main(CASES)
