# SPDX-License-Identifier: MIT
"""core/cfi.c, the walk behind TFALLOC_STACKS=unwind, on real programs:
each runs under libtfalloc_verify.so (the shim with preload/unwind_verify.c),
which walks every stack cfi.c served again with libunwind and compares the
two, and writes per process, at exit:
  tfalloc-unwind-verify: pid P walks W mismatches M refusals R
(refusals: the walks cfi.c refused and libunwind served; a capture at
start-up deep enough to reach ld.so's _dl_start_user, whose frames have no
unwind information, is one).

Cases:
  python3   python3 running a small script with two threads
  gxx       g++ compiling a file that includes <map>, <string>, <iostream>
            (the driver, cc1plus, as, collect2 and ld)
  sqlite3   sqlite3 building and querying a table of 2,000 rows with an index
  dlclose   tp_dlopen: stacks through a library, dlclosed, and another one
            loaded at its address: nothing refused but at start-up, and
            the leaks made in each name their function and reach main (not
            against libunwind, whose trace cache can keep the rules of the
            unloaded library: see test/unit/check_cfi.c)
  nocfi     tp_nocfi: 4 threads allocate below 20 frames without unwind
            tables, after 40 pthread keys: every such walk refused and
            served by libunwind's unw_backtrace, whose trace cache and key
            come at the first one (after the shim's start, inside an
            allocation); the output is the plain run's and each thread's
            lost block has a stack from tp_nocfi_leaf through tp_nocfi_deep
The first three: not one mismatch, and no more than 2% of the walks refused.
"""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

LINE = re.compile(r"^tfalloc-unwind-verify: pid (\d+) walks (\d+) mismatches (\d+) refusals (\d+)$")


def verified(ctx, argv, what, stdin=None, min_walks=1000, env=None):
    r = ctx.run_preload(argv, env=dict(env or {}, TFALLOC_STACKS="unwind"), stdin=stdin, timeout=600)
    T.check_eq(r.returncode, 0, "%s: exit status\n%s" % (what, r.describe()))
    walks = mismatches = refusals = 0
    procs = 0
    for line in r.err_lines():
        m = LINE.match(line)
        if m:
            procs += 1
            walks += int(m.group(2))
            mismatches += int(m.group(3))
            refusals += int(m.group(4))
    T.check(procs >= 1, "%s: no verification line on stderr\n%s" % (what, r.describe()))
    share = refusals / max(walks + refusals, 1)
    print("%s: %d processes, %d walks compared with libunwind, %d mismatches, %d refused "
          "(%.3f%%)" % (what, procs, walks, mismatches, refusals, 100 * share))
    T.check_eq(mismatches, 0, "%s: walks that differ from libunwind's\n%s" % (what, r.err))
    T.check_ge(walks, min_walks, "%s: walks compared" % what)
    T.check(share <= 0.02, "%s: %.2f%% of the walks refused" % (what, 100 * share))
    return r


def case_python3(ctx):
    script = "import json, threading\n" \
             "def work():\n    return json.dumps([{str(i): [i] * 3} for i in range(20000)])\n" \
             "ts = [threading.Thread(target=work) for _ in range(2)]\n" \
             "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(len(work()))\n"
    verified(ctx, ["/usr/bin/python3", "-c", script], "python3", env={"PYTHONMALLOC": "malloc"})


def case_gxx(ctx):
    if shutil.which("g++") is None:
        raise T.Skip("no g++")
    src = os.path.join(ctx.scratch, "t.cpp")
    with open(src, "w") as f:
        f.write("#include <iostream>\n#include <map>\n#include <string>\n"
                "int main() {\n  std::map<std::string, int> m;\n"
                "  for (int i = 0; i < 10; i++) m[std::to_string(i)] = i;\n"
                "  std::cout << m.size() << std::endl;\n}\n")
    verified(ctx, ["g++", "-O2", "-o", os.path.join(ctx.scratch, "t"), src], "g++")


def case_sqlite3(ctx):
    if shutil.which("sqlite3") is None:
        raise T.Skip("no sqlite3")
    sql = "create table t(a integer, b text);\n" \
          "with recursive c(x) as (select 1 union all select x + 1 from c where x < 2000)\n" \
          "  insert into t select x, printf('row %d', x) from c;\n" \
          "create index tb on t(b);\n" \
          "select count(*), sum(a) from t where b like 'row 1%';\n"
    verified(ctx, ["sqlite3", os.path.join(ctx.scratch, "t.db")], "sqlite3", stdin=sql, min_walks=200)


def case_dlclose(ctx):
    path = ctx.prog("tp_dlopen")
    outdir = ctx.mkdtemp("out")
    r = ctx.run_preload([path, "loop", "5"], outdir=outdir, env={"TFALLOC_STACKS": "unwind"})
    T.check_eq(r.returncode, 0, "tp_dlopen\n%s" % r.describe())
    T.check(any(LINE.match(l) for l in r.err_lines()), "no verification line\n%s" % r.describe())
    for line in r.err_lines():
        m = LINE.match(line)
        if m:
            T.check(int(m.group(4)) <= 1, "refusals: %s (the start-up capture at most)" % m.group(4))
    rep = ctx.report(outdir, "tp_dlopen")
    proc = T.only_process(rep, "tp_dlopen")
    for nbytes, fn in ((3000, "dlib_a_make"), (5000, "dlib_b_make"), (100, "dlib_a_make")):
        leaks = [l for l in proc["leaks"] if l["bytes"] == nbytes * l["blocks"]]
        T.check(leaks, "no leak of %d-byte blocks" % nbytes)
        for l in leaks:
            names = [f.get("function") for f in l["stack"]]
            T.check(fn in names[:2] and "call_lib" in names and "main" in names,
                    "the leak of %d-byte blocks: %s" % (nbytes, names))


def case_nocfi(ctx):
    path = ctx.prog("tp_nocfi")
    outdir = ctx.mkdtemp("out")
    r = ctx.run_preload([path], outdir=outdir, env={"TFALLOC_STACKS": "unwind"})
    T.check_eq(r.returncode, 0, "tp_nocfi\n%s" % r.describe())
    T.check_eq(r.out, "NOCFI 4\n", "tp_nocfi: stdout")
    counts = [LINE.match(l) for l in r.err_lines() if LINE.match(l)]
    T.check_eq(len(counts), 1, "one verification line\n%s" % r.describe())
    T.check(int(counts[0].group(4)) >= 4 * 2001, "walks refused: %s (each of 8,004 allocations)" % counts[0].group(4))
    T.check_eq(counts[0].group(3), "0", "mismatches")
    proc = T.only_process(ctx.report(outdir, "tp_nocfi"), "tp_nocfi")
    lost = [l for l in proc["leaks"] if l["bytes"] == 777 * l["blocks"]]
    T.check_eq(sum(l["blocks"] for l in lost), 4, "blocks of 777 bytes lost")
    for l in lost:
        names = [f.get("function") for f in l["stack"]]
        T.check(names[:1] == ["tp_nocfi_leaf"] and names[1:21] == ["tp_nocfi_deep"] * 20,
                "the stack of a 777-byte block: %s" % names)


T.main({
    "python3": case_python3,
    "gxx": case_gxx,
    "sqlite3": case_sqlite3,
    "dlclose": case_dlclose,
    "nocfi": case_nocfi,
})
