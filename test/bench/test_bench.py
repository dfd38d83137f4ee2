# SPDX-License-Identifier: MIT
"""The benchmark itself still runs: no timing is judged here (rule 4), only that
scripts/bench.sh's driver measures, renders and judges what it should.

  smoke  every workload prints the same under glibc, jemalloc and the shim
         (bench.py --smoke)
  run    a one-repetition run of two workloads (realloc, sqlite3) with tracking
         only and full stacks: every cell ran, the tables of the shim's memory
         name the most blocks live at once, and the targets table judges the
         memory target for both modes.

usage: test_bench.py SOURCE_DIR BUILD_DIR CASE
The workloads' programs are built into a temporary folder (as bench.sh does
into build/bench), so that a developer's results there are left alone.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

PROGRAMS = ("runner", "trees", "realloc", "prodcons", "churn", "large")


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def build_programs(src, bindir):
    for name in PROGRAMS:
        subprocess.run(["gcc", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-pthread", "-o",
                        os.path.join(bindir, name), os.path.join(src, "test/bench", name + ".c")],
                       check=True)


def bench(src, build, bindir, *args):
    p = subprocess.run([sys.executable, os.path.join(src, "test/bench/bench.py"), "--root", src,
                        "--build", build, "--bindir", bindir, *args],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def case_smoke(src, build, bindir):
    rc, out, err = bench(src, build, bindir, "--smoke")
    check(rc == 0 and "smoke: all identical" in out,
          f"bench --smoke: exit {rc}\n{out}\n{err}")


def case_run(src, build, bindir):
    modes = ("tfalloc", "tfalloc-stacks")
    workloads = ("realloc", "sqlite3", "trees")
    rc, out, err = bench(src, build, bindir, "--quick", "--reps", "1", "--only", ",".join(workloads),
                         "--modes", ",".join(modes))
    check(rc == 0, f"bench: exit {rc}\n{out}\n{err}")
    with open(os.path.join(bindir, "results.json")) as f:
        res = json.load(f)
    cells = {(r["workload"], r["mode"]): r for r in res["rows"]}
    for w in workloads:
        for m in ("glibc", "jemalloc") + modes:
            r = cells.get((w, m))
            check(r is not None and r.get("status") == "ok" and r.get("median_s", 0) > 0,
                  f"cell {w} {m}: {r}")
        for m in modes:
            r = cells[(w, m)]
            check(r.get("ratio_jemalloc", 0) > 0, f"{w} {m}: no ratio to jemalloc: {r}")
            check(r.get("pointer_table_bytes", 0) > 0, f"{w} {m}: no pointer table size: {r}")
            check(r.get("peak_blocks", 0) > 0, f"{w} {m}: no peak count of live blocks: {r}")
            check(r.get("maxrss_kb", 0) > 0, f"{w} {m}: no peak RSS: {r}")
    memory = [t for t in res["targets"] if "a live block" in t[0]]
    check([t[0].split(":")[0] for t in memory] == list(modes),
          f"memory target judged for {[t[0] for t in memory]}, want {modes}")
    for t in memory:
        check(t[2] in ("met", "missed") and re.match(r"[0-3] of 3 within", t[1]) is not None,
              f"memory verdict: {t}")
    # trees at each heap layout, tfalloc against jemalloc.
    lay = res.get("layouts") or {}
    ratios = lay.get("ratios") or []
    check(len(ratios) == 6 and all(r is not None and r > 0 for r in ratios),
          f"trees LAYOUT 0 to 5: {lay}")
    with open(os.path.join(bindir, "results.txt")) as f:
        text = f.read()
    for want in ("the performance targets (issue 3) in this run:", "peak blocks", "budget",
                 "LAYOUT 0 to 5"):
        check(want in text, f"results.txt lacks {want!r}:\n{text}")


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: test_bench.py SOURCE_DIR BUILD_DIR CASE")
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    case = globals().get("case_" + sys.argv[3])
    if case is None:
        sys.exit(f"unknown case {sys.argv[3]}")
    with tempfile.TemporaryDirectory(prefix="tfa-bench-") as bindir:
        build_programs(src, bindir)
        try:
            case(src, build, bindir)
        except Failure as e:
            print(f"FAIL {sys.argv[3]}: {e}")
            sys.exit(1)
    print(f"PASS {sys.argv[3]}")


if __name__ == "__main__":
    main()
