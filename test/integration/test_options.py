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
  env_sweep          every TFALLOC_* variable the shim reads (and one it does
                     not) set to each bad value (empty, 100 kB, -1, a word,
                     2^64, 1e400) and to values out of range: the program's
                     output and status unchanged, exactly the lines the table
                     says (one naming the variable and what is used instead),
                     none longer than 400 bytes, and every profile readable
  cli_sweep          every value-taking option of tfalloc run, report,
                     snapshot and top given the same bad values: one line on
                     stderr, the table's exit status (2 for a usage error,
                     125 for run: the command does not run; 1 for a file that
                     cannot be written), never a signal
  summary            without TFALLOC_QUIET the process prints exactly one
                     "tfalloc[PID]: ..." line on stderr; TFALLOC_QUIET=1 and
                     tfalloc run --quiet print nothing; tfalloc run without
                     --quiet prints the process's line
"""
import os
import re
import subprocess
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


BAD = {"empty": "", "100kB": "9" * 100000, "negative": "-1", "word": "abc",
       "2^64": "18446744073709551616", "1e400": "1e400"}

# variable: (its words for every bad value, {value key: words} where they
# differ).  Words are what the one line must hold; None: no line (a valid value).
NUMBER = "using"
BOOL = "not a boolean"
ENV_TABLE = {
    "ALLOCATOR": ("unknown allocator", {"empty": None, "100kB": "longer than 4095 bytes; using"}),
    "LIMIT": ("using 0", {}),
    "CUDA_LIMIT": ("ignored", {"empty": None, "100kB": "longer than 4095 bytes; using"}),
    "CUDA_TRACE": (BOOL, {}),
    "OUTPUT": ("no profile: cannot write", {"empty": None, "100kB": "longer than 4095 bytes; using"}),
    "QUIET": (BOOL, {}),
    "LOG": (None, {"100kB": "longer than 4095 bytes; using"}),
    "PROFILE": (BOOL, {}),
    "ABORT_ON_ERROR": (BOOL, {}),
    "MAX_ERRORS": ("using 20", {}),
    "CATCH_SIGNALS": (BOOL, {}),
    "CONTROL_SIGNAL": ("using 50", {"1": "not a real-time signal", "65": "not a real-time signal"}),
    "STACKS": ("not one of unwind, fp, none; using unwind", {"100kB": "longer than 4095 bytes; using"}),
    "STACK_DEPTH": ("using 64", {"0": "out of range", "129": "out of range"}),
    "STACK_CACHE": (BOOL, {}),
    "SAMPLE_BYTES": ("using 0", {}),
    "TRACK": ("not one of all, sampled; using all", {"100kB": "longer than 4095 bytes; using"}),
    "MAX_STACKS": ("using 100000", {}),
    "FLUSH_INTERVAL_MS": ("using 5000", {}),
    "LEAK_CLASSES": (BOOL, {}),
    "TAG_BY": ("tagging nothing", {"empty": None, "100kB": "longer than 4095 bytes; using"}),
    "UNDER_VALGRIND": (BOOL, {}),
    "NOSUCH": ("unknown variable, ignored", {}),
}


def case_env_sweep(ctx):
    argv = [ctx.prog("tp_leaks")]
    plain = ctx.run_plain(argv)
    out = ctx.mkdtemp("profiles")
    cwd = ctx.mkdtemp("cwd")
    expected_profiles = 0
    for var, (words, special) in ENV_TABLE.items():
        values = dict(BAD)
        values.update({k: k for k in special if k not in BAD})
        for key, value in values.items():
            want = special.get(key, words)
            name = "TFALLOC_" + var
            what = "%s=<%s>" % (name, key)
            r = ctx.run_preload(argv, outdir=out, env={name: value}, cwd=cwd)
            T.same_output(plain, r, what)
            lines = r.err_lines()
            if var == "QUIET":
                # The default (0) is used: the summary line follows.
                T.check(len(lines) == 2 and lines[1].startswith("tfalloc[%d]: tp_leaks: peak" % r.pid),
                        "%s: expected the line and the summary\n%s" % (what, r.describe()))
                lines = lines[:1]
            T.check_eq(len(lines), 0 if want is None else 1, "%s: lines on stderr\n%s" % (what, r.err[:2000]))
            for line in lines:
                T.check(line.startswith("tfalloc[%d]: " % r.pid), "%s: the line: %s" % (what, line[:400]))
                T.check(len(line) <= 400, "%s: a line of %d bytes" % (what, len(line)))
                T.check(want in line, "%s: the line does not say %r: %s" % (what, want, line))
                T.check(name in line or var == "OUTPUT", "%s: the line does not name %s: %s" % (what, name, line))
            if var == "OUTPUT" and key in ("empty", "100kB"):
                # The default: the working directory.
                here = os.listdir(cwd)
                T.check_eq(here, ["tfalloc.tp_leaks.%d.prof" % r.pid], what + ": profiles in the working directory")
                os.unlink(os.path.join(cwd, here[0]))
            elif var != "OUTPUT":
                expected_profiles += 1
    rep = ctx.report(out, "the sweep's profiles")
    T.check_eq(rep.get("unreadable"), [], "unreadable profiles")
    T.check_eq(len(rep["processes"]), expected_profiles, "profiles written")
    for proc in rep["processes"]:
        T.check_exited(proc, 0)
    T.check_eq(sorted(os.listdir(cwd)), [], "files left in the working directory")
    # The line about an unknown variable sends people to tfalloc --help-env: it lists them all.
    for args in (["--help-env"], ["help", "env"]):
        r = ctx._run([ctx.tool] + args, ctx.env(), None, 60, "tfalloc")
        T.check_eq((r.returncode, r.err), (0, ""), "tfalloc %s: status and stderr" % " ".join(args))
        listed = {l.split()[0] for l in r.out.splitlines() if l.startswith("TFALLOC_")}
        want = {"TFALLOC_" + v for v in ENV_TABLE if v != "NOSUCH"} | {"TFALLOC_LIBRARY"}
        T.check_eq(sorted(listed), sorted(want), "variables tfalloc %s lists" % " ".join(args))


# (command, option or PID, arguments before, arguments after, {value key: (status, words)}).
# A key missing from the row is a valid value there, not swept.
USAGE_RUN = (125, "")
USAGE = (2, "")
ALL_BAD_RUN = {k: USAGE_RUN for k in BAD}
ALL_BAD = {k: USAGE for k in BAD}


def cli_table(ctx, profile, pid):
    prog = ["--", "sh", "-c", "echo ran"]
    run = ["--quiet", "--output", "o"]
    gate = run + ["--leak-gate"]
    rows = [
        ("run", "--output", ["--quiet"], prog, {"empty": USAGE_RUN, "100kB": (125, "File name too long")}),
        ("run", "--allocator", ["--quiet", "--output", "o"], prog,
         {"empty": USAGE_RUN, "100kB": (125, "name too long")}),
        ("run", "--limit", run, prog, ALL_BAD_RUN),
        ("run", "--tag-by", run, prog, ALL_BAD_RUN),
        ("run", "--leak-exitcode", run, prog, ALL_BAD_RUN),
        ("run", "--max-leak-bytes", run, prog, ALL_BAD_RUN),
        ("run", "--max-leak-blocks", run, prog, ALL_BAD_RUN),
        ("run", "--leak-kinds", run, prog, ALL_BAD_RUN),
        ("run", "--suppressions", run, prog, {k: (125, "suppressions") for k in BAD}),
        ("run", "--junit", gate, prog, {"empty": USAGE_RUN}),
        ("run", "--sarif", gate, prog, {"empty": USAGE_RUN}),
        ("report", "--format", [], [profile], ALL_BAD),
        ("report", "--top", [], [profile], ALL_BAD),
        ("report", "--by", [], [profile], ALL_BAD),
        ("report", "-o", [], [profile], {"empty": USAGE, "100kB": (1, "File name too long")}),
        ("snapshot", "--timeout", [], [str(pid)], ALL_BAD),
        ("snapshot", "-o", [], [str(pid)], {"empty": USAGE}),
        ("snapshot", "PID", [], [], ALL_BAD),
        ("top", "-d", ["-n", "1"], [str(pid)], ALL_BAD),
        ("top", "-n", [], [str(pid)], ALL_BAD),
        ("top", "--timeout", ["-n", "1"], [str(pid)], ALL_BAD),
        ("top", "PID", ["-n", "1"], [], ALL_BAD),
    ]
    return rows


def case_cli_sweep(ctx):
    out = ctx.mkdtemp("profile")
    ctx.run_preload([ctx.prog("tp_empty")], outdir=out)
    cwd = ctx.mkdtemp("cwd")
    # A process under the shim for snapshot and top: the values must be refused
    # before it is asked.
    live = subprocess.Popen([ctx.prog("tp_live"), "idle", "10", "10"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd,
                            env=ctx.env({"LD_PRELOAD": ctx.lib, "TFALLOC_OUTPUT": out, "TFALLOC_QUIET": "1"}))
    try:
        T.check(live.stdout.readline().startswith(b"READY"), "tp_live did not get ready")
        for cmd, opt, pre, post, expect in cli_table(ctx, out, live.pid):
            for key, (status, words) in expect.items():
                args = pre + ([BAD[key]] if opt == "PID" else [opt, BAD[key]]) + post
                what = "tfalloc %s %s <%s>" % (cmd, opt, key)
                r = ctx._run([ctx.tool, cmd] + args, ctx.env(), None, 60, "tfalloc", cwd=cwd)
                T.check(isinstance(r.returncode, int) and r.returncode >= 0,
                        "%s: killed by a signal\n%s" % (what, r.describe()))
                T.check_eq(r.returncode, status, "%s: exit status\n%s" % (what, r.describe()))
                lines = r.err_lines()
                T.check_eq(len(lines), 1, "%s: lines on stderr: %s" % (what, [l[:200] for l in lines]))
                T.check(lines[0].startswith("tfalloc: ") and words in lines[0],
                        "%s: the line does not say %r: %s" % (what, words, lines[0][:300]))
                # The value is shown cut (64 bytes and "..."): a 100 kB argument, a short line.
                T.check(len(lines[0]) < 400, "%s: a line of %d bytes" % (what, len(lines[0])))
                T.check_eq(r.out, "", what + ": stdout (for run: the command must not run)")
        T.check(live.poll() is None, "tp_live ended during the sweep")
    finally:
        live.communicate(b"", timeout=60)
    T.check_eq(live.returncode, 0, "tp_live's status")
    T.check_eq([f for f in os.listdir(out) if not f.startswith("tfalloc.tp_empty.")],
               ["tfalloc.tp_live.%d.prof" % live.pid], "profiles (no snapshot was asked for)")


CASES = {
    "env_sweep": case_env_sweep,
    "cli_sweep": case_cli_sweep,
    "unknown_allocator": case_unknown_allocator,
    "bad_limit": case_bad_limit,
    "summary": case_summary,
}

if __name__ == "__main__":
    T.main(CASES)
