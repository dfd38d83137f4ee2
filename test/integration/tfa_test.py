# SPDX-License-Identifier: MIT
"""Helpers of the integration tests: run a command plain and under the shim,
compare what it printed and its exit status, load the JSON report, and check
its numbers with messages that say what was expected and what came back.

Every test script is run by CTest as

    /usr/bin/python3 test_x.py --tool PATH --lib PATH --prog tp_name=PATH ...
                               --case NAME [--allocator jemalloc|glibc]

and calls tfa_test.main(CASES), CASES mapping a case name to a function
taking a Ctx.  A case raises Failure (through the check helpers) when the
behaviour is wrong; main() prints the message, keeps the case's temporary
directories for inspection and exits 1.  On success they are removed.

Standard library only; runs on Debian 12's /usr/bin/python3.
"""

import argparse
import difflib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

DEFAULT_TIMEOUT = 120

# Environment of every run: no shim, no TFALLOC_* from the caller's shell.
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LC_ALL": "C",
    "LANG": "C",
}


class Failure(Exception):
    """The behaviour under test is wrong."""


class Skip(Exception):
    """The machine cannot run the case (e.g. mount is refused in a container):
    main() exits 77, CTest's SKIP_RETURN_CODE."""


# ---- assertions ------------------------------------------------------------


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def check_eq(actual, expected, what):
    if actual != expected:
        raise Failure("%s: expected %r, got %r" % (what, expected, actual))


def check_range(actual, lo, hi, what):
    if not (lo <= actual <= hi):
        if lo == hi:
            raise Failure("%s: expected %r, got %r" % (what, lo, actual))
        raise Failure("%s: expected between %r and %r, got %r" % (what, lo, hi, actual))


def check_ge(actual, bound, what):
    if not actual >= bound:
        raise Failure("%s: expected >= %r, got %r" % (what, bound, actual))


def text_diff(a, b, name_a, name_b, limit=40):
    lines = list(difflib.unified_diff(
        a.splitlines(keepends=True), b.splitlines(keepends=True), name_a, name_b, n=1))
    if len(lines) > limit:
        lines = lines[:limit] + ["... (%d more diff lines)\n" % (len(lines) - limit)]
    return "".join(lines)


def decode(b):
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else b


# ---- results of runs --------------------------------------------------------


class Result:
    """What a run gave back: exit status (negative: killed by that signal, as
    subprocess reports it), stdout and stderr as bytes, the pid of the process
    started, and the output directory (runs under the shim)."""

    def __init__(self, argv, returncode, stdout, stderr, pid, outdir=None, how="plain"):
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.pid = pid
        self.outdir = outdir
        self.how = how

    @property
    def out(self):
        return decode(self.stdout)

    @property
    def err(self):
        return decode(self.stderr)

    def err_lines(self):
        return [l for l in self.err.splitlines() if l.strip()]

    def describe(self):
        err = self.err
        if len(err) > 3000:
            err = err[:3000] + "... (%d more bytes)" % (len(err) - 3000)
        out = self.out
        if len(out) > 1500:
            out = out[:1500] + "... (%d more bytes)" % (len(out) - 1500)
        return ("%s run of %s: exit status %s\n--- stdout:\n%s\n--- stderr:\n%s"
                % (self.how, " ".join(self.argv), self.returncode, out, err))


def same_output(plain, shim, what="", compare_stderr=False):
    """The shim run printed the same on stdout and exited with the same status."""
    label = (what + ": ") if what else ""
    if plain.returncode != shim.returncode:
        raise Failure("%sexit status %s plain but %s under the shim\n%s"
                      % (label, plain.returncode, shim.returncode, shim.describe()))
    if plain.stdout != shim.stdout:
        if len(plain.stdout) > 200000 or b"\0" in plain.stdout[:4096]:
            raise Failure("%sstdout differs under the shim: %d bytes plain, %d under the shim"
                          % (label, len(plain.stdout), len(shim.stdout)))
        raise Failure("%sstdout differs under the shim:\n%s" % (
            label, text_diff(plain.out, shim.out, "plain", "under tfalloc")))
    if compare_stderr and plain.stderr != shim.stderr:
        raise Failure("%sstderr differs under the shim:\n%s" % (
            label, text_diff(plain.err, shim.err, "plain", "under tfalloc")))


def parse_ledger(result):
    """The LEDGER line a test program printed (see test/programs/tp_common.h)."""
    for line in result.out.splitlines():
        if line.startswith("LEDGER "):
            return json.loads(line[len("LEDGER "):])
    raise Failure("no LEDGER line in the output\n" + result.describe())


def parse_lines(result, prefix):
    """The words after `prefix` on each line that starts with it."""
    return [line.split()[1:] for line in result.out.splitlines() if line.startswith(prefix + " ")]


# ---- the report -------------------------------------------------------------


def device(proc, name="cpu"):
    for d in proc.get("devices", []):
        if d.get("device") == name:
            return d
    raise Failure("process %s (%s) has no %r device in its report: %r"
                  % (proc.get("pid"), proc.get("command"), name, proc.get("devices")))


def leak_totals(proc, dev="cpu"):
    """Sums of the leak entries of a device: (bytes, blocks, allocated_bytes or None)."""
    b = n = 0
    ab = 0
    have_ab = True
    for leak in proc.get("leaks", []):
        if leak.get("device", "cpu") != dev:
            continue
        b += leak["bytes"]
        n += leak["blocks"]
        if "allocated_bytes" in leak:
            ab += leak["allocated_bytes"]
        else:
            have_ab = False
    return b, n, (ab if have_ab else None)


def error_totals(proc):
    t = proc.get("error_totals") or {}
    return {k: t.get(k, 0) for k in ("double_free", "invalid_free", "mismatched_free", "not_recorded")}


def proc_name(proc):
    return "process %s (%s)" % (proc.get("pid"), proc.get("command"))


def check_exited(proc, exit_code):
    name = proc_name(proc)
    check(proc.get("complete") is True, "%s: profile not complete: %r" % (name, proc.get("complete")))
    check_eq(proc.get("end_reason"), "exit", name + ": end_reason")
    check_eq(proc.get("exit_code"), exit_code, name + ": exit_code")


def check_consistent(proc, multithreaded=False, require_allocs=True, allow_errors=False,
                     allocator=None, threads_at_exit=False):
    """What must hold in any profile of a finished process.

    multithreaded: the peak may miss by the per-thread publishing threshold
    (core/tracking_allocator.h: threads x 64 KiB), so the peak is checked
    against the largest allocation with that slack.
    threads_at_exit: other threads may still be running (finishing a free)
    while the profile is written at exit, e.g. the detached threads of
    python3 that join() does not wait for: bytes in use and the leaks may
    then differ by the few blocks in flight (at most 16 blocks, 64 KiB)."""
    name = proc_name(proc)
    d = device(proc)
    if allocator is not None:
        check_eq(d.get("allocator"), allocator, name + ": allocator")
    if require_allocs:
        check(d["num_allocs"] > 0, "%s: num_allocs is 0" % name)
    check(d["num_allocs"] >= d["num_frees"],
          "%s: num_frees %d > num_allocs %d" % (name, d["num_frees"], d["num_allocs"]))
    check(d["peak_bytes_in_use"] >= d["bytes_in_use"],
          "%s: peak_bytes_in_use %d < bytes_in_use %d" % (name, d["peak_bytes_in_use"], d["bytes_in_use"]))
    check(d["total_bytes"] >= d["peak_bytes_in_use"],
          "%s: total_bytes %d < peak_bytes_in_use %d" % (name, d["total_bytes"], d["peak_bytes_in_use"]))
    check(d["total_bytes"] >= d["largest_alloc_size"],
          "%s: total_bytes %d < largest_alloc_size %d" % (name, d["total_bytes"], d["largest_alloc_size"]))
    slack = 64 * 1024 * 32 if multithreaded else 0
    check(d["peak_bytes_in_use"] + slack >= d["largest_alloc_size"],
          "%s: peak_bytes_in_use %d < largest_alloc_size %d" % (name, d["peak_bytes_in_use"], d["largest_alloc_size"]))
    lb, ln, lab = leak_totals(proc)
    byte_slack, block_slack = (64 * 1024, 16) if threads_at_exit else (0, 0)
    check(abs(lb - d["bytes_in_use"]) <= byte_slack,
          "%s: bytes in use at exit %d != sum of the leaks' bytes %d (leaks: %s)"
          % (name, d["bytes_in_use"], lb, json.dumps(proc.get("leaks"))[:500]))
    check(abs(ln - (d["num_allocs"] - d["num_frees"])) <= block_slack,
          "%s: num_allocs - num_frees = %d - %d = %d != sum of the leaks' blocks %d"
          % (name, d["num_allocs"], d["num_frees"], d["num_allocs"] - d["num_frees"], ln))
    if "allocated_bytes_in_use" in d:
        check(d["allocated_bytes_in_use"] >= d["bytes_in_use"],
              "%s: allocated_bytes_in_use %d < bytes_in_use %d" % (name, d["allocated_bytes_in_use"], d["bytes_in_use"]))
        if lab is not None and not threads_at_exit:
            check(lab == d["allocated_bytes_in_use"],
                  "%s: allocated_bytes_in_use %d != sum of the leaks' allocated_bytes %d"
                  % (name, d["allocated_bytes_in_use"], lab))
    if "total_allocated_bytes" in d:
        check(d["total_allocated_bytes"] >= d["total_bytes"],
              "%s: total_allocated_bytes %d < total_bytes %d" % (name, d["total_allocated_bytes"], d["total_bytes"]))
    if "peak_allocated_bytes_in_use" in d:
        check(d["peak_allocated_bytes_in_use"] >= d["allocated_bytes_in_use"],
              "%s: peak_allocated_bytes_in_use %d < allocated_bytes_in_use %d"
              % (name, d["peak_allocated_bytes_in_use"], d["allocated_bytes_in_use"]))
        if not multithreaded:
            check(d["peak_allocated_bytes_in_use"] >= d["peak_bytes_in_use"],
                  "%s: peak_allocated_bytes_in_use %d < peak_bytes_in_use %d"
                  % (name, d["peak_allocated_bytes_in_use"], d["peak_bytes_in_use"]))
    for leak in proc.get("leaks", []):
        check(leak["blocks"] >= 0 and leak["bytes"] >= 0, "%s: negative leak entry %r" % (name, leak))
        check(leak["blocks"] > 0 or leak["bytes"] == 0,
              "%s: leak entry with bytes but no blocks %r" % (name, leak))
    if not allow_errors:
        tot = error_totals(proc)
        check(not proc.get("errors") and not any(tot.values()),
              "%s: memory errors reported: totals %r, first %s"
              % (name, tot, json.dumps((proc.get("errors") or [])[:3])))


def check_ledger(proc, base, ledger, slack=None):
    """The report of `proc` minus that of the baseline run `base` (same binary,
    nothing done) against the ledger the program printed.  slack maps a field
    to extra allowed on top of the ledger's hi reading."""
    slack = slack or {}
    name = proc_name(proc)
    d = device(proc)
    b = device(base)

    def rng(field):
        lo, hi = ledger[field]
        return lo, hi + slack.get(field, 0)

    for field in ("num_allocs", "num_frees", "num_reallocs", "bytes_in_use", "total_bytes"):
        if field not in ledger:
            continue
        lo, hi = rng(field)
        check_range(d[field] - b[field], lo, hi,
                    "%s: %s minus the baseline's (%d - %d)" % (name, field, d[field], b[field]))
    if "peak_bytes_in_use" in ledger:
        lo, hi = rng("peak_bytes_in_use")
        check_range(d["peak_bytes_in_use"],
                    max(b["peak_bytes_in_use"], b["bytes_in_use"] + lo),
                    max(b["peak_bytes_in_use"], b["bytes_in_use"] + hi),
                    "%s: peak_bytes_in_use (baseline peak %d, in use %d; the program's own peak %s)"
                    % (name, b["peak_bytes_in_use"], b["bytes_in_use"], ledger["peak_bytes_in_use"]))
    if "largest_alloc_size" in ledger:
        lo, hi = rng("largest_alloc_size")
        check_range(d["largest_alloc_size"], max(b["largest_alloc_size"], lo),
                    max(b["largest_alloc_size"], hi), name + ": largest_alloc_size")
    lb, ln, _ = leak_totals(proc)
    blb, bln, _ = leak_totals(base)
    lo, hi = rng("leak_bytes")
    check_range(lb - blb, lo, hi, "%s: leaked bytes minus the baseline's (%d - %d)" % (name, lb, blb))
    lo, hi = rng("leak_blocks")
    check_range(ln - bln, lo, hi, "%s: leaked blocks minus the baseline's (%d - %d)" % (name, ln, bln))


def inline_stacks(rep, label=""):
    """The report with each "stack" and "alloc_stack" index replaced by its
    frames: the stack_table's entry, a list of indices into "frames" (both
    checked), as readers of the JSON do."""
    table, frames = rep.get("stack_table"), rep.get("frames")
    check(isinstance(table, list) and isinstance(frames, list), "%sthe report has no stack_table or frames" % label)
    check(all(isinstance(i, int) and 0 <= i < len(frames) for st in table for i in st),
          "%sa stack_table entry names no frame" % label)
    stacks = [[frames[i] for i in st] for st in table]

    def resolve(x):
        for k in ("stack", "alloc_stack"):
            if k in x:
                check(isinstance(x[k], int) and 0 <= x[k] < len(stacks),
                      "%s%s %r is no index of the stack_table (%d stacks)" % (label, k, x[k], len(stacks)))
                x[k] = stacks[x[k]]
    for p in rep["processes"]:
        for key in ("leaks", "sites", "errors"):
            for x in p.get(key, []):
                resolve(x)
        for c in p.get("cleanups", []):
            for g in c.get("groups", []):
                resolve(g)
    return rep


def only_process(report, what=""):
    procs = report.get("processes", [])
    if len(procs) != 1:
        raise Failure("%sexpected one process in the report, got %d: %s"
                      % ((what + ": ") if what else "", len(procs),
                         [(p.get("pid"), p.get("command"), p.get("end_reason")) for p in procs]))
    return procs[0]


def summary(procs):
    return "\n".join("  pid %s ppid %s %s end %s/%s forked %s complete %s"
                     % (p.get("pid"), p.get("ppid"), p.get("exe"), p.get("end_reason"),
                        p.get("exit_code"), p.get("forked"), p.get("complete")) for p in procs)


# ---- the context of a case ---------------------------------------------------


class Ctx:
    def __init__(self, args):
        self.tool = os.path.abspath(args.tool)
        self.lib = os.path.abspath(args.lib)
        self.progs = {}
        for spec in args.prog or []:
            name, _, path = spec.partition("=")
            self.progs[name] = os.path.abspath(path)
        self.allocator = args.allocator
        self.case = args.case
        self.tmpdirs = []
        self._scratch = None

    def prog(self, name):
        path = self.progs.get(name)
        if path is None:
            raise Failure("test program %s was not passed with --prog" % name)
        if not os.access(path, os.X_OK):
            raise Failure("test program %s (%s) is not built" % (name, path))
        return path

    def mkdtemp(self, what="run"):
        d = tempfile.mkdtemp(prefix="tfa-%s-%s-%s-" % (self.case, self.allocator or "any", what))
        self.tmpdirs.append(d)
        return d

    @property
    def scratch(self):
        if self._scratch is None:
            self._scratch = self.mkdtemp("scratch")
        return self._scratch

    def env(self, extra=None):
        env = dict(BASE_ENV)
        env["HOME"] = self.scratch
        env["TMPDIR"] = self.scratch
        if extra:
            for k, v in extra.items():
                if v is None:
                    env.pop(k, None)
                else:
                    env[k] = v
        return env

    def _run(self, argv, env, stdin, timeout, how, outdir=None, cwd=None):
        stdin_data = stdin.encode() if isinstance(stdin, str) else stdin
        try:
            p = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                 cwd=cwd or self.scratch, start_new_session=True)
        except OSError as e:
            raise Failure("cannot start %s: %s" % (argv[0], e))
        try:
            out, err = p.communicate(stdin_data, timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            out, err = p.communicate()
            r = Result(argv, "timeout", out, err, p.pid, outdir, how)
            raise Failure("timed out after %ss (a hang, e.g. a deadlock)\n%s" % (timeout, r.describe()))
        return Result(argv, p.returncode, out, err, p.pid, outdir, how)

    def run_plain(self, argv, env=None, stdin=None, timeout=DEFAULT_TIMEOUT, cwd=None):
        """Runs argv without the shim."""
        return self._run(list(argv), self.env(env), stdin, timeout, "plain", cwd=cwd)

    def run_tool(self, argv, allocator="default", outdir=None, quiet=True, limit=None, env=None,
                 stdin=None, timeout=DEFAULT_TIMEOUT, tool_args=None, cwd=None):
        """Runs `tfalloc run [--output DIR] [--allocator A] [--limit L] [--quiet] -- argv`.
        allocator "default": the case's allocator; None: no --allocator."""
        if allocator == "default":
            allocator = self.allocator
        if outdir is None:
            outdir = self.mkdtemp("out")
        cmd = [self.tool, "run", "--output", outdir]
        if allocator:
            cmd += ["--allocator", allocator]
        if limit is not None:
            cmd += ["--limit", str(limit)]
        if quiet:
            cmd += ["--quiet"]
        cmd += list(tool_args or [])
        cmd += ["--"] + list(argv)
        return self._run(cmd, self.env(env), stdin, timeout, "tfalloc", outdir, cwd=cwd)

    def run_preload(self, argv, allocator="default", outdir=None, quiet=True, env=None,
                    stdin=None, timeout=DEFAULT_TIMEOUT, cwd=None):
        """Runs argv with LD_PRELOAD=libtfalloc.so and TFALLOC_* variables, without the tool."""
        if allocator == "default":
            allocator = self.allocator
        if outdir is None:
            outdir = self.mkdtemp("out")
        extra = {"LD_PRELOAD": self.lib, "TFALLOC_OUTPUT": outdir}
        if allocator:
            extra["TFALLOC_ALLOCATOR"] = allocator
        if quiet:
            extra["TFALLOC_QUIET"] = "1"
        extra.update(env or {})
        return self._run(list(argv), self.env(extra), stdin, timeout, "LD_PRELOAD", outdir, cwd=cwd)

    def report(self, outdir, what=""):
        """`tfalloc report --format json DIR`, parsed."""
        r = self._run([self.tool, "report", "--format", "json", outdir], self.env(), None, 120, "report")
        label = (what + ": ") if what else ""
        if r.returncode != 0:
            raise Failure("%stfalloc report failed\n%s\nfiles in %s: %s"
                          % (label, r.describe(), outdir, sorted(os.listdir(outdir))))
        try:
            rep = json.loads(r.out)
        except ValueError as e:
            raise Failure("%stfalloc report printed invalid JSON: %s\n%s" % (label, e, r.out[:2000]))
        check(isinstance(rep, dict) and isinstance(rep.get("processes"), list),
              "%sthe report has no processes list: %s" % (label, r.out[:500]))
        return inline_stacks(rep, label)

    def run_and_report(self, argv, via="tool", what="", expect_status=0, **kw):
        """Runs argv under the shim (via "tool" or "preload"), checks its exit
        status and returns (result, report)."""
        r = (self.run_tool if via == "tool" else self.run_preload)(argv, **kw)
        label = (what + ": ") if what else ""
        if expect_status is not None and r.returncode != expect_status:
            raise Failure("%sexit status %s, expected %s\n%s"
                          % (label, r.returncode, expect_status, r.describe()))
        if not os.path.isdir(r.outdir) or not os.listdir(r.outdir):
            raise Failure("%sno profile file was written into %s\n%s" % (label, r.outdir, r.describe()))
        return r, self.report(r.outdir, what)

    def baseline(self, prog, via="tool", **kw):
        """The profile of `prog baseline` (the program does nothing) under the
        same allocator: what the C runtime allocates at start-up and exit."""
        _, rep = self.run_and_report([self.prog(prog), "baseline"], via=via, what=prog + " baseline", **kw)
        p = only_process(rep, prog + " baseline")
        check_exited(p, 0)
        check_consistent(p, require_allocs=False)
        return p

    def cleanup(self):
        for d in self.tmpdirs:
            shutil.rmtree(d, ignore_errors=True)


def main(cases):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="build/bin/tfalloc")
    ap.add_argument("--lib", required=True, help="build/lib/libtfalloc.so")
    ap.add_argument("--prog", action="append", help="NAME=PATH of a test program")
    ap.add_argument("--allocator", default=None, help="jemalloc or glibc")
    ap.add_argument("--case", required=True, choices=sorted(cases))
    args = ap.parse_args()
    ctx = Ctx(args)
    for path, what in ((ctx.tool, "the tfalloc command"), (ctx.lib, "libtfalloc.so")):
        if not os.path.exists(path):
            print("FAIL: %s is missing: %s" % (what, path))
            sys.exit(1)
    t0 = time.monotonic()
    try:
        cases[args.case](ctx)
    except Skip as e:
        ctx.cleanup()
        print("SKIP [%s, allocator %s]: %s" % (args.case, args.allocator, e))
        sys.exit(77)
    except Failure as e:
        print("FAIL [%s, allocator %s]: %s" % (args.case, args.allocator, e))
        if ctx.tmpdirs:
            print("kept for inspection: " + " ".join(ctx.tmpdirs))
        sys.exit(1)
    except Exception:
        traceback.print_exc()
        print("ERROR in the test itself [%s]; kept: %s" % (args.case, " ".join(ctx.tmpdirs)))
        sys.exit(2)
    ctx.cleanup()
    print("ok [%s, allocator %s] in %.1fs" % (args.case, args.allocator, time.monotonic() - t0))
