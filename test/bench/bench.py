# SPDX-License-Identifier: MIT
"""The benchmark harness of scripts/bench.sh (which builds everything first).

Runs every workload under every mode, interleaved (for rep: for workload: for
mode), through the C runner (build/bench/runner: fork/exec, wait4, wall time,
peak RSS of the children), verifies that each run printed what plain glibc
printed and exited the same way, and prints one table with the median, min
and max wall time, the ratios to plain glibc and plain jemalloc, the peak RSS,
the throughput of the threaded workloads and the profile size.  Also writes
build/bench/results.txt and build/bench/results.json.  Timings only: nothing
here passes or fails, except --smoke, which checks checksums, not times.

Python standard library only.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
LIBLSAN = "/usr/lib/x86_64-linux-gnu/liblsan.so.0"
TIMEOUT_S = 120  # every run; a run killed at the limit is marked "timeout"
PEER_REPS = {"heaptrack": 3, "memcheck": 2, "jeprof": 2, "lsan": 3}  # full run; at most --reps
PEER_REPS_QUICK = {"heaptrack": 1, "memcheck": 1, "jeprof": 1, "lsan": 2}
REPORT_REPS = 5  # timings of `tfalloc report` on the trees profile

# Environment variables a run must never inherit from the caller.
SCRUB_ENV = ("LD_PRELOAD", "MALLOC_CONF", "LSAN_OPTIONS", "PYTHONMALLOC", "GLIBC_TUNABLES",
             "DEBUGINFOD_URLS")


# --------------------------------------------------------------------------
# Workloads: each gives the command for a size, and the sizes of a full run,
# of --quick (about 4x less work) and of the small input that memcheck (and
# jeprof) run on.  A full run's inputs take plain jemalloc 0.2 to 1 s: enough
# for a median of 5, and the whole run within 10 minutes.
# --------------------------------------------------------------------------

class Workload:
    def __init__(self, name, kind, sizes, command, env=None, describe=""):
        self.name = name
        self.kind = kind  # "synthetic" or "real"
        self.sizes = sizes  # {"full":, "quick":, "small":} (small None: peers skip)
        self.command = command  # command(ctx, size, workdir) -> (argv, [files to verify])
        self.env = env or {}
        self.describe = describe


class Context:
    """Paths and prepared inputs, shared by the workloads."""

    def __init__(self, root, bindir):
        self.root = root
        self.bindir = bindir
        self.inputs = os.path.join(bindir, "inputs")
        os.makedirs(self.inputs, exist_ok=True)
        self.home = os.path.join(bindir, "home")  # an empty HOME for git
        os.makedirs(self.home, exist_ok=True)

    def prog(self, name):
        return os.path.join(self.bindir, name)

    def sqlite_script(self, rows):
        with open(os.path.join(self.root, "test/bench/workload.sql")) as f:
            text = f.read().replace("@ROWS@", str(rows))
        tag = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = os.path.join(self.inputs, f"workload-{rows}-{tag}.sql")
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
        return path

    def git_repo(self):
        """A local repository made once (GIT_COMMITS commits of generated files)."""
        path = os.path.join(self.inputs, f"git-repo-{GIT_COMMITS}")
        if os.path.exists(os.path.join(path, ".bench-done")):
            return path
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        env = git_env(self)
        env.update({k: v for k, v in os.environ.items() if k not in env and k not in SCRUB_ENV})
        subprocess.run(["git", "init", "-q", "-b", "main", path], check=True, env=env)
        stream = git_fast_import_stream(GIT_COMMITS)
        subprocess.run(["git", "-C", path, "fast-import", "--quiet"], input=stream, check=True,
                       env=env)
        subprocess.run(["git", "-C", path, "checkout", "-q", "-f", "main"], check=True, env=env)
        subprocess.run(["git", "-C", path, "repack", "-a", "-d", "-q"], check=True, env=env)
        with open(os.path.join(path, ".bench-done"), "w") as f:
            f.write("ok\n")
        return path


GIT_COMMITS = 1500


def git_env(ctx):
    return {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": ctx.home,
            "LC_ALL": "C", "GIT_PAGER": "cat", "TZ": "UTC"}


def git_fast_import_stream(commits):
    """A deterministic history: 300 files in 10 directories, each commit edits a few."""
    state = [12345]

    def rnd():
        state[0] = (state[0] * 1103515245 + 12345) & 0x7FFFFFFF
        return state[0]

    nfiles = 300
    content = {f: [f"line {i} of file {f}: {rnd() % 100000}" for i in range(60)]
               for f in range(nfiles)}
    out = []
    for c in range(commits):
        if c == 0:
            changed = list(range(nfiles))
        else:
            changed = sorted({rnd() % nfiles for _ in range(6)})
            for f in changed:
                lines = content[f]
                for _ in range(rnd() % 8 + 1):
                    i = rnd() % len(lines)
                    if rnd() % 3 == 0:
                        lines.insert(i, f"added in {c}: {rnd()}")
                    else:
                        lines[i] = f"changed in {c}: {rnd()}"
        msg = f"commit {c}: edit {len(changed)} files\n".encode()
        stamp = 1700000000 + c * 60
        out.append(b"commit refs/heads/main\n")
        out.append(f"author Bench <bench@example.com> {stamp} +0000\n".encode())
        out.append(f"committer Bench <bench@example.com> {stamp} +0000\n".encode())
        out.append(f"data {len(msg)}\n".encode() + msg)
        for f in changed:
            data = ("\n".join(content[f]) + "\n").encode()
            out.append(f"M 100644 inline dir{f % 10}/file{f}.txt\ndata {len(data)}\n".encode())
            out.append(data)
        out.append(b"\n")
    return b"".join(out)


def make_workloads():
    def synthetic(name):
        return lambda ctx, size, work: ([ctx.prog(name), str(size)], [])

    def python(ctx, size, work):
        return ["/usr/bin/python3", os.path.join(ctx.root, "test/bench/workload.py"),
                str(size)], []

    def sqlite(ctx, size, work):
        return ["sqlite3", ":memory:", ".read " + ctx.sqlite_script(size)], []

    def gxx(ctx, size, work):
        src = {"small.cpp": "test/bench/small.cpp", "tiny.cpp": "test/bench/tiny.cpp"}[size]
        obj = os.path.join(work, "gxx.o")
        return ["g++", "-O1", "-c", os.path.join(ctx.root, src), "-o", obj], [obj]

    def git(ctx, size, work):
        return ["git", "-C", ctx.git_repo(), "log", "--stat", "-n", str(size)], []

    return [
        Workload("trees", "synthetic", {"full": 16, "quick": 14, "small": 11}, synthetic("trees"),
                 describe="binary trees of depth 4..D built and freed (16-byte nodes); size D"),
        Workload("realloc", "synthetic", {"full": 40000, "quick": 10000, "small": 4000},
                 synthetic("realloc"),
                 describe="256 string builders grown by realloc (+1..4096 B) to 8 B..1 MiB; "
                          "size = appends"),
        Workload("prodcons", "synthetic", {"full": 1000000, "quick": 250000, "small": 60000},
                 synthetic("prodcons"),
                 describe="producer thread allocates 32 B..8 KiB, consumer thread frees; "
                          "size = messages"),
        Workload("churn", "synthetic", {"full": 4000000, "quick": 1000000, "small": 200000},
                 synthetic("churn"),
                 describe="2 threads free+malloc 16..512 B in random slots, 1/32 handed over; "
                          "size = ops per thread"),
        Workload("large", "synthetic", {"full": 250, "quick": 64, "small": 40},
                 synthetic("large"),
                 describe="64 KiB..16 MiB blocks allocated, one byte per page touched, freed; "
                          "size = blocks"),
        Workload("python3", "real", {"full": 15000, "quick": 3750, "small": 1000}, python,
                 describe="/usr/bin/python3 test/bench/workload.py SHAPES"),
        Workload("python3-malloc", "real", {"full": 15000, "quick": 3750, "small": 1000}, python,
                 env={"PYTHONMALLOC": "malloc"},
                 describe="the same with PYTHONMALLOC=malloc"),
        Workload("sqlite3", "real", {"full": 40000, "quick": 10000, "small": 4000}, sqlite,
                 describe="sqlite3 :memory: running test/bench/workload.sql; size = rows"),
        Workload("gxx", "real",
                 {"full": "small.cpp", "quick": "tiny.cpp", "small": "tiny.cpp"}, gxx,
                 describe="g++ -O1 -c test/bench/small.cpp (--quick and small input: "
                          "test/bench/tiny.cpp)"),
        Workload("git", "real", {"full": GIT_COMMITS // 2, "quick": GIT_COMMITS // 8, "small": 60}, git,
                 env={},  # git_env() is added in command_env
                 describe=f"git log --stat -n N on a generated repository of {GIT_COMMITS} "
                          "commits; size = N"),
    ]


# --------------------------------------------------------------------------
# Modes: how the same command is run.
# --------------------------------------------------------------------------

MODE_ORDER = ["glibc", "jemalloc", "tfalloc", "tfalloc-glibc", "tfalloc-stacks", "tfalloc-fp",
              "tfalloc-sampled", "tfalloc-sampled-exact", "heaptrack", "memcheck", "jeprof", "lsan"]
# Run on the workload's small input (with glibc and jemalloc on that same input
# as their references): at full size they take minutes (jeprof: 100x to 300x).
SMALL_INPUT_MODES = ("memcheck", "jeprof")


class Mode:
    def __init__(self, name, available=True, why=""):
        self.name = name
        self.available = available
        self.why = why  # why it is not available


BUILD_DIR = None  # --build: the CMake build with the shim and the tool (default ROOT/build)


def build_path(root, rel):
    return os.path.join(BUILD_DIR or os.path.join(root, "build"), rel)


def detect_modes(root):
    tool = build_path(root, "bin/tfalloc")
    modes = {}
    for m in ("glibc", "jemalloc", "tfalloc", "tfalloc-glibc"):
        modes[m] = Mode(m)
    if not os.path.exists(JEMALLOC):
        modes["jemalloc"] = Mode("jemalloc", False, "n/a (libjemalloc2 not installed)")

    try:
        r = subprocess.run([tool, "--help-env"], capture_output=True, text=True, timeout=10)
        help_env = r.stdout + r.stderr if r.returncode == 0 else ""
    except OSError:
        help_env = ""
    stacks = "TFALLOC_STACKS" in help_env
    for m in ("tfalloc-stacks", "tfalloc-fp", "tfalloc-sampled-exact"):
        modes[m] = Mode(m, stacks, "" if stacks else "n/a (the shim has no TFALLOC_STACKS)")
    track = "TFALLOC_TRACK" in help_env
    modes["tfalloc-sampled"] = Mode("tfalloc-sampled", track,
                                    "" if track else "n/a (the shim has no TFALLOC_TRACK)")

    global HEAPTRACK_ARGS
    if shutil.which("heaptrack"):
        r = subprocess.run(["heaptrack", "--help"], capture_output=True, text=True)
        HEAPTRACK_ARGS = ["--record-only"] if "--record-only" in r.stdout + r.stderr else []
        modes["heaptrack"] = Mode("heaptrack")
    else:
        modes["heaptrack"] = Mode("heaptrack", False, "n/a (heaptrack not installed)")
    if shutil.which("valgrind"):
        modes["memcheck"] = Mode("memcheck")
    else:
        modes["memcheck"] = Mode("memcheck", False, "n/a (valgrind not installed)")

    if not os.path.exists(JEMALLOC):
        modes["jeprof"] = Mode("jeprof", False, "n/a (libjemalloc2 not installed)")
    else:
        env = clean_env()
        env.update({"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": "prof:true"})
        r = subprocess.run(["/bin/sh", "-c", "exit 0"], env=env, capture_output=True, text=True)
        if "Invalid conf" in r.stderr or "prof" in r.stderr:
            modes["jeprof"] = Mode("jeprof", False, "n/a (jemalloc built without --enable-prof)")
        else:
            modes["jeprof"] = Mode("jeprof")
    if os.path.exists(LIBLSAN):
        modes["lsan"] = Mode("lsan")
    else:
        modes["lsan"] = Mode("lsan", False, "n/a (liblsan0 not installed)")
    return modes


HEAPTRACK_ARGS = []


def mode_command(mode, argv, root, outdir):
    """(argv, env to set, stderr to /dev/null) for running argv under mode; profiles in outdir."""
    shim = build_path(root, "lib/libtfalloc.so")
    tfa = {"LD_PRELOAD": shim, "TFALLOC_QUIET": "1", "TFALLOC_OUTPUT": outdir}
    if mode == "glibc":
        return argv, {}, False
    if mode == "jemalloc":
        return argv, {"LD_PRELOAD": JEMALLOC}, False
    if mode == "tfalloc":
        return argv, dict(tfa, TFALLOC_STACKS="none"), False
    if mode == "tfalloc-glibc":
        return argv, dict(tfa, TFALLOC_ALLOCATOR="glibc", TFALLOC_STACKS="none"), False
    if mode == "tfalloc-stacks":
        return argv, dict(tfa, TFALLOC_STACKS="unwind"), False
    if mode == "tfalloc-fp":
        return argv, dict(tfa, TFALLOC_STACKS="fp"), False
    if mode == "tfalloc-sampled":
        # Sample-only tracking: only the sampled blocks are recorded (libunwind stacks for them).
        return argv, dict(tfa, TFALLOC_TRACK="sampled", TFALLOC_SAMPLE_BYTES="524288"), False
    if mode == "tfalloc-sampled-exact":
        # Every block recorded, stacks (libunwind) for a sample.
        return argv, dict(tfa, TFALLOC_SAMPLE_BYTES="524288"), False
    if mode == "heaptrack":
        return ["heaptrack"] + HEAPTRACK_ARGS + ["-o", os.path.join(outdir, "ht")] + argv, {}, False
    if mode == "memcheck":
        return (["valgrind", "--tool=memcheck", "--leak-check=full", "--trace-children=yes",
                 "--log-file=" + os.path.join(outdir, "memcheck.%p")] + argv, {}, False)
    if mode == "jeprof":
        conf = ("prof:true,lg_prof_sample:0,prof_final:true,prof_prefix:"
                + os.path.join(outdir, "jeprof"))
        return argv, {"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": conf}, False
    if mode == "lsan":
        return argv, {"LD_PRELOAD": LIBLSAN, "LSAN_OPTIONS": "exitcode=0"}, True
    raise ValueError(mode)


def clean_env():
    return {k: v for k, v in os.environ.items()
            if k not in SCRUB_ENV and not k.startswith("TFALLOC_")}


# --------------------------------------------------------------------------
# Running and verifying one command.
# --------------------------------------------------------------------------

HEAPTRACK_HEAD = (re.compile(r"^heaptrack output will be written to "),
                  re.compile(r"^/\S*libheaptrack_\w+\.so$"),
                  re.compile(r"^starting application, this might take some time\.\.\.$"))
HEAPTRACK_TAIL = re.compile(r"^Heaptrack finished! Now run the following")


def strip_heaptrack(lines):
    """heaptrack's script prints its own lines on stdout, around the program's."""
    i = 0
    while i < len(lines) and i < len(HEAPTRACK_HEAD) and HEAPTRACK_HEAD[i].match(lines[i]):
        i += 1
    lines = lines[i:]
    for j in range(len(lines) - 1, -1, -1):
        if HEAPTRACK_TAIL.match(lines[j]):
            rest = lines[j + 1:]
            if all(x == "" or x.startswith("  heaptrack --analyze") or "heaptrack_gui" in x
                   for x in rest):
                return lines[:j] + [""]  # the program's output ended with a newline
            break
    return lines


def digest(stdout_path, mode, verify_files):
    """(sha256 of what must be equal across modes, throughput or None)."""
    with open(stdout_path, "rb") as f:
        data = f.read()
    lines = data.decode("utf-8", "replace").split("\n")
    if mode == "heaptrack":
        lines = strip_heaptrack(lines)
    throughput = None
    kept = []
    for line in lines:
        if line.startswith("THROUGHPUT "):
            throughput = float(line.split()[1])
        else:
            kept.append(line)
    h = hashlib.sha256("\n".join(kept).encode())
    for path in verify_files:
        h.update(b"\0file\0")
        try:
            with open(path, "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(b"missing")
    return h.hexdigest(), throughput


def dir_bytes(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


class Runner:
    def __init__(self, root, bindir, ctx):
        self.root = root
        self.runner = os.path.join(bindir, "runner")
        self.scratch = os.path.join(bindir, "run")
        self.ctx = ctx
        self.env = clean_env()

    def tables(self, outdir):
        """The largest pointer table and stack table of the profiles in outdir (bytes), and the
        most blocks any one process had live at once."""
        tool = build_path(self.root, "bin/tfalloc")
        r = subprocess.run([tool, "report", "--format", "json", outdir], env=self.env,
                           capture_output=True, text=True)
        try:
            procs = json.loads(r.stdout)["processes"]
        except (ValueError, KeyError):
            return None, None, None
        cpu = [d for p in procs for d in p.get("devices", []) if d.get("device") == "cpu"]
        return (max((p.get("pointer_table_peak_bytes") or p.get("pointer_table_bytes", 0) for p in procs),
                    default=None),
                max((p.get("stacks", {}).get("table_bytes", 0) for p in procs), default=None),
                max((d.get("peak_blocks_in_use", 0) for d in cpu), default=None))

    def run(self, workload, mode, size, keep=None, tables=False):
        """One run; returns a dict.  keep: a folder to move the profiles to.  tables: read
        the sizes of the shim's tables from the profiles (tfalloc modes)."""
        shutil.rmtree(self.scratch, ignore_errors=True)
        outdir = os.path.join(self.scratch, "profile")
        work = os.path.join(self.scratch, "work")
        os.makedirs(outdir)
        os.makedirs(work)
        argv, verify = workload.command(self.ctx, size, work)
        env = dict(workload.env)
        if workload.name == "git":
            env.update(git_env(self.ctx))
        full_argv, mode_env, quiet = mode_command(mode, argv, self.root, outdir)
        env.update(mode_env)
        stdout = os.path.join(self.scratch, "stdout")
        stderr = "/dev/null" if quiet else os.path.join(self.scratch, "stderr")
        cmd = [self.runner, "-o", stdout, "-e", stderr, "-t", str(TIMEOUT_S)]
        for k, v in env.items():
            cmd += ["-E", f"{k}={v}"]
        cmd += ["--"] + full_argv
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, cwd=work)
        if r.returncode != 0:
            raise RuntimeError(f"runner failed: {r.stderr.strip()}")
        res = json.loads(r.stdout)
        res["digest"], res["throughput"] = digest(stdout, mode, verify)
        res["profile_bytes"] = dir_bytes(outdir)
        if tables:
            (res["pointer_table_bytes"], res["stack_table_bytes"],
             res["peak_blocks"]) = self.tables(outdir)
        if not quiet:
            with open(stderr, "rb") as f:
                res["stderr_tail"] = f.read()[-600:].decode("utf-8", "replace")
        if keep is not None:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.move(outdir, keep)
        return res


# --------------------------------------------------------------------------
# The benchmark.
# --------------------------------------------------------------------------

class Cell:
    def __init__(self, workload, mode, size):
        self.workload = workload
        self.mode = mode
        self.size = size
        self.runs = []
        self.bad = []  # descriptions of runs that were wrong / timed out
        self.status = "ok"  # ok, WRONG, timeout, n/a, skipped
        self.note = ""

    def add(self, res, ref):
        self.runs.append(res)
        if res["status"] == "timeout":
            self.status = "timeout"
            self.bad.append("timeout")
            return
        if ref is None:
            return
        problems = []
        if (res["status"], res["code"]) != (ref["status"], ref["code"]):
            problems.append(f"{res['status']} {res['code']} (glibc: {ref['status']} {ref['code']})")
        if res["digest"] != ref["digest"]:
            problems.append("output differs from glibc's")
        if problems:
            if self.status != "timeout":
                self.status = "WRONG"
            self.bad.append("; ".join(problems))

    def good_runs(self):
        return [r for r in self.runs if r["status"] != "timeout"]

    def median(self, key):
        vals = [r[key] for r in self.good_runs() if r.get(key) is not None]
        return statistics.median(vals) if vals else None


def machine_header(root):
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    commit = "?"
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        if dirty:
            commit += " (with uncommitted changes)"
    except (OSError, subprocess.CalledProcessError):
        pass
    versions = {}
    for pkg in ("heaptrack", "valgrind", "libjemalloc2", "liblsan0", "python3", "sqlite3", "g++",
                "git"):
        r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                           text=True)
        versions[pkg] = r.stdout.strip() if r.returncode == 0 else None
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "kernel": platform.release(),
        "commit": commit,
        "versions": versions,
    }


def cpu_snapshot():
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its children,
    CPU seconds the hypervisor gave to other guests: steal)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal ...
        tck = os.sysconf("SC_CLK_TCK")
        # Steal apart: this machine's own processes are charged part of it as CPU time.
        busy = (sum(fields[:3]) + sum(fields[5:7])) / tck
        steal = fields[7] / tck if len(fields) > 7 else None
    except (OSError, ValueError):
        busy = steal = None
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy, me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, steal


def other_cpu(start, end):
    """CPU seconds the rest of the machine used between two snapshots: other jobs skew timings."""
    if start[0] is None or end[0] is None:
        return None
    return max(0.0, (end[0] - start[0]) - (end[1] - start[1]))


def stolen_cpu(start, end):
    """CPU seconds a virtual machine's hypervisor ran other guests instead of this one."""
    if start[2] is None or end[2] is None:
        return None
    return max(0.0, end[2] - start[2])


def fmt_time(s):
    return "-" if s is None else f"{s:.3f}"


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}x"


def fmt_bytes(n):
    if n is None:
        return "-"
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024.0
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    return "-"


def fmt_rate(x):
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M/s"
    return f"{x / 1e3:.1f}k/s"


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions of the tfalloc, glibc and jemalloc cells (5; --quick: 3)")
    ap.add_argument("--only", default="")
    ap.add_argument("--modes", default="")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--build", default=None,
                    help="the build with lib/libtfalloc.so and bin/tfalloc (default ROOT/build)")
    ap.add_argument("--bindir", default=None,
                    help="the workloads' programs, inputs, scratch and results (default ROOT/build/bench)")
    args = ap.parse_args()

    global BUILD_DIR
    root = os.path.abspath(args.root)
    BUILD_DIR = os.path.abspath(args.build) if args.build else None
    bindir = os.path.abspath(args.bindir) if args.bindir else os.path.join(root, "build/bench")
    ctx = Context(root, bindir)
    workloads = make_workloads()
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in [w.name for w in workloads]]
        if unknown:
            sys.exit(f"bench: unknown workload(s) {','.join(unknown)} "
                     f"(known: {','.join(w.name for w in workloads)})")
        workloads = [w for w in workloads if w.name in names]
    mode_names = MODE_ORDER
    if args.modes:
        names = args.modes.split(",")
        unknown = [n for n in names if n not in MODE_ORDER]
        if unknown:
            sys.exit(f"bench: unknown mode(s) {','.join(unknown)} (known: {','.join(MODE_ORDER)})")
        # glibc is every cell's reference output and ratio base, jemalloc the other base.
        mode_names = [m for m in MODE_ORDER if m in names or m in ("glibc", "jemalloc")]
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    if args.reps < 1:
        sys.exit("bench: --reps must be at least 1")

    modes = detect_modes(root)
    runner = Runner(root, bindir, ctx)
    if args.smoke:
        return smoke(runner, workloads, modes)
    profile = "quick" if args.quick else "full"
    reps = args.reps
    peer_reps = PEER_REPS_QUICK if args.quick else PEER_REPS
    header = machine_header(root)
    started = time.monotonic()
    cpu_start = cpu_snapshot()

    if any(w.name == "git" for w in workloads):
        print(f"bench: preparing the git repository ({GIT_COMMITS} commits)...", flush=True)
        ctx.git_repo()

    # cells[(workload, mode)]; the small-input modes (memcheck, jeprof) also need
    # glibc and jemalloc on that small input: cells (workload, "glibc@small") and
    # (workload, "jemalloc@small"), run just before them, as often as the most
    # repeated of them.
    cells = {}
    plan = []  # [workload, mode, size, cell key, reps of the cell]
    for w in workloads:
        small_plan = []
        for m in mode_names:
            mode = modes[m]
            small = m in SMALL_INPUT_MODES
            size = w.sizes["small"] if small else w.sizes[profile]
            cell = Cell(w.name, m, size)
            cells[(w.name, m)] = cell
            skip = SKIP_WHY.get((w.name, m, profile))
            if not mode.available:
                cell.status = "n/a"
                cell.note = mode.why
                continue
            if skip or size is None:
                cell.status = "skipped"
                cell.note = skip or "skipped: no small input"
                continue
            n = min(reps, peer_reps.get(m, reps))
            notes = []
            if n < reps:
                notes.append(f"{n} rep{'s' if n > 1 else ''} (time budget)")
            if small:
                notes.append(f"small input {size}")
            if (w.name, m) in NOT_COMPARABLE:
                notes.append(NOT_COMPARABLE[(w.name, m)] + "; not in the summary")
            cell.note = "; ".join(notes)
            (small_plan if small else plan).append([w, m, size, (w.name, m), n])
        if small_plan:
            n = max(p[4] for p in small_plan)
            size = w.sizes["small"]
            for base in ("glibc", "jemalloc"):
                key = (w.name, base + "@small")
                cells[key] = Cell(w.name, base, size)
                plan.append([w, base, size, key, n])
            plan += small_plan

    refs = {}  # (workload, size) -> glibc's first run
    trees_profile = os.path.join(bindir, "trees-profile")
    # The densest profile: trees with a stack for every allocation (100,000 distinct stacks,
    # 24 MB), symbolized by the report; tracking only when that mode does not run.
    report_mode = "tfalloc-stacks" if "tfalloc-stacks" in mode_names else "tfalloc"
    total_runs = sum(n for *_, n in plan)
    done = 0
    for rep in range(reps):
        for w in workloads:
            for (pw, m, size, key, n) in plan:
                if pw is not w or rep >= n:
                    continue
                keep = trees_profile if (w.name == "trees" and m == report_mode) else None
                # The shim's tables, once per cell (reading the profiles takes time).
                res = runner.run(w, m, size, keep=keep, tables=m.startswith("tfalloc") and rep == 0)
                ref = refs.get((w.name, size))
                if m == "glibc" and ref is None:
                    refs[(w.name, size)] = res
                    ref = None
                    if (res["status"], res["code"]) != ("exit", 0):
                        cells[key].note = f"glibc: {res['status']} {res['code']}"
                cells[key].add(res, ref)
                done += 1
                elapsed = time.monotonic() - started
                print(f"\rbench: rep {rep + 1}/{reps}, {done}/{total_runs} runs, "
                      f"{elapsed:.0f} s   ", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    layouts = None
    trees = [w for w in workloads if w.name == "trees"]
    if trees and "tfalloc" in mode_names and modes["jemalloc"].available:
        layouts = measure_layouts(runner, trees[0], trees[0].sizes[profile], 1 if args.quick else 3)

    cpu_end = cpu_snapshot()
    header["other_cpu_s"] = other_cpu(cpu_start, cpu_end)
    header["stolen_cpu_s"] = stolen_cpu(cpu_start, cpu_end)
    report = time_report(runner, root, trees_profile, report_mode) if os.path.isdir(trees_profile) else None
    elapsed = time.monotonic() - started
    results = summarize(cells, workloads, mode_names, header, report, elapsed, args, profile)
    results["layouts"] = layouts
    text = render(results)
    print(text)
    with open(os.path.join(bindir, "results.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(bindir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    print(f"bench: wrote {os.path.relpath(os.path.join(bindir, 'results.txt'), root)} and "
          f"{os.path.relpath(os.path.join(bindir, 'results.json'), root)}")
    shutil.rmtree(runner.scratch, ignore_errors=True)
    return 0


LSAN_SIGNAL_NOTE = (
    "lsan: Debian 12's liblsan.so.0 (gcc 12), preloaded into a program not built with "
    "-fsanitize=leak, crashes (SIGSEGV) in every call to signal(): its interceptor jumps to a "
    "null REAL(signal). sqlite3 and git call signal(), and so does binutils' as under g++ "
    "(g++ then exits 4); programs using sigaction() only (python3) run.")

# (workload, mode, profile): why the cell is not run.
SKIP_WHY = {
    ("gxx", "memcheck", "quick"): "skipped in --quick: cc1plus under memcheck takes ~13 s even "
                                  "on test/bench/tiny.cpp",
    ("python3", "memcheck", "quick"): "skipped in --quick: python3 starts in ~5 s under memcheck "
                                      "(python3-malloc is measured)",
    ("sqlite3", "memcheck", "quick"): "skipped in --quick (2 to 3 s); measured in a full run",
    ("git", "memcheck", "quick"): "skipped in --quick (2 to 4 s); measured in a full run",
}
# (workload, mode): measured and shown, but not the same work, so left out of the summary.
NOT_COMPARABLE = {
    ("gxx", "heaptrack"): "heaptrack does not follow exec: it records the g++ driver, not cc1plus",
}


LAYOUTS = 6  # trees D LAYOUT: 0 is the table's trees, 1 to 5 other beginnings of the heap


def measure_layouts(runner, trees, size, reps):
    """trees at each LAYOUT under plain jemalloc and tfalloc (tracking), interleaved: where the
    heap's blocks lie moves the pointer table's clusters (core/ptr_table.h, TFA_PTR_CHUNK_LG),
    and the table above measures one layout.  Returns {"size", "reps", "ratios": [per layout]}."""
    times = {}
    for rep in range(reps):
        for layout in range(LAYOUTS):
            w = Workload("trees", "synthetic", trees.sizes,
                         lambda ctx, sz, work, layout=layout: ([ctx.prog("trees"), str(sz), str(layout)], []))
            for m in ("jemalloc", "tfalloc"):
                res = runner.run(w, m, size)
                if (res["status"], res["code"]) == ("exit", 0):
                    times.setdefault((layout, m), []).append(res["wall_s"])
            print(f"\rbench: heap layouts, rep {rep + 1}/{reps}, layout {layout + 1}/{LAYOUTS}   ",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    ratios = []
    for layout in range(LAYOUTS):
        je, tf = times.get((layout, "jemalloc")), times.get((layout, "tfalloc"))
        ratios.append(statistics.median(tf) / statistics.median(je) if je and tf else None)
    return {"size": size, "reps": reps, "ratios": ratios}


def time_report(runner, root, profile_dir, mode):
    """Median wall time of `tfalloc report` (json and text) on the trees profile of mode."""
    tool = build_path(root, "bin/tfalloc")
    out = {"profile_bytes": dir_bytes(profile_dir), "mode": mode}
    for fmt in ("json", "text"):
        times = []
        status = None
        for _ in range(REPORT_REPS):
            r = subprocess.run([runner.runner, "-o", "/dev/null", "-e", "/dev/null", "--", tool,
                                "report", "--format", fmt, profile_dir],
                               env=runner.env, capture_output=True, text=True, check=True)
            res = json.loads(r.stdout)
            status = (res["status"], res["code"])
            times.append(res["wall_s"])
        out[fmt] = {"median_s": statistics.median(times), "min_s": min(times),
                    "max_s": max(times), "status": f"{status[0]} {status[1]}"}
    return out


def summarize(cells, workloads, mode_names, header, report, elapsed, args, profile):
    rows = []  # rows of the modes "glibc@small" and "jemalloc@small" are in JSON only
    for w in workloads:
        for m in mode_names + ["glibc@small", "jemalloc@small"]:
            cell = cells.get((w.name, m))
            if cell is None:
                continue
            small = m in SMALL_INPUT_MODES or m.endswith("@small")
            g = cells.get((w.name, "glibc@small" if small else "glibc"))
            j = cells.get((w.name, "jemalloc@small" if small else "jemalloc"))
            row = {"workload": w.name, "mode": m, "size": cell.size, "status": cell.status,
                   "note": cell.note, "reps": len(cell.runs), "problems": cell.bad}
            times = [r["wall_s"] for r in cell.good_runs()]
            if times:
                row.update({"median_s": statistics.median(times), "min_s": min(times),
                            "max_s": max(times), "wall_s": times,
                            "maxrss_kb": cell.median("maxrss_kb"),
                            "throughput": cell.median("throughput"),
                            "profile_bytes": cell.median("profile_bytes"),
                            "pointer_table_bytes": cell.median("pointer_table_bytes"),
                            "stack_table_bytes": cell.median("stack_table_bytes"),
                            "peak_blocks": cell.median("peak_blocks")})
            if cell.status == "ok" and times:
                for base, bc in (("glibc", g), ("jemalloc", j)):
                    bt = [r["wall_s"] for r in bc.good_runs()] if bc else []
                    if bc is not None and bc.status == "ok" and bt:
                        row["ratio_" + base] = row["median_s"] / statistics.median(bt)
                        if small:
                            row[base + "_small_median_s"] = statistics.median(bt)
            if cell.status == "WRONG" and cell.runs:
                tail = cell.runs[-1].get("stderr_tail", "")
                row["stderr_tail"] = tail
            rows.append(row)

    summary = []
    for m in mode_names:
        mrows = [r for r in rows if r["mode"] == m]
        ratios = [(r["ratio_jemalloc"], r["workload"]) for r in mrows
                  if "ratio_jemalloc" in r and (r["workload"], m) not in NOT_COMPARABLE]
        entry = {"mode": m, "workloads": len(ratios)}
        if ratios:
            entry["geomean_vs_jemalloc"] = geomean([x for x, _ in ratios])
            worst = max(ratios)
            entry["worst_vs_jemalloc"] = worst[0]
            entry["worst_workload"] = worst[1]
        base = "jemalloc@small" if m in SMALL_INPUT_MODES else "jemalloc"
        for tw in ("churn", "prodcons"):
            r = next((r for r in mrows if r["workload"] == tw), None)
            je = next((r for r in rows if r["workload"] == tw and r["mode"] == base), None)
            if (r and je and r["status"] == "ok" and r.get("throughput")
                    and je.get("throughput") and je["status"] == "ok"):
                pct = 100.0 * r["throughput"] / je["throughput"]
                entry[tw + "_throughput_pct_of_jemalloc"] = pct
        bad = [r["workload"] + ": " + r["status"] for r in mrows
               if r["status"] in ("WRONG", "timeout")]
        if bad:
            entry["problems"] = bad
        if all(r["status"] == "n/a" for r in mrows) and mrows:
            entry["na"] = mrows[0]["note"]
        summary.append(entry)

    footnotes = []
    goals = targets(rows, summary, report)
    if any(r["mode"] == "lsan" and r["status"] == "WRONG" for r in rows):
        footnotes.append(LSAN_SIGNAL_NOTE)
    return {"header": header, "profile": profile, "reps": args.reps, "footnotes": footnotes,
            "elapsed_s": elapsed, "timeout_s": TIMEOUT_S,
            "workloads": {w.name: {"kind": w.kind, "describe": w.describe, "env": w.env,
                                   "size": w.sizes[profile], "small_size": w.sizes["small"]}
                          for w in workloads},
            "rows": rows, "summary": summary, "tfalloc_report": report, "targets": goals}


MEMORY_PER_BLOCK = 64
MEMORY_MODES = ("tfalloc", "tfalloc-stacks")


def memory_budget(r, rows):
    """The memory target for one row: RSS above plain jemalloc's in the same run ("over", bytes)
    against 64 bytes per block live at the peak plus the stack table ("budget"); None when a
    figure is missing (a profile older than the peak count, a failed run)."""
    je = [x for x in rows if x["workload"] == r["workload"] and x["mode"] == "jemalloc"]
    if not je or not je[0].get("maxrss_kb") or not r.get("maxrss_kb") or not r.get("peak_blocks"):
        return None
    return {"over": (r["maxrss_kb"] - je[0]["maxrss_kb"]) * 1024,
            "budget": MEMORY_PER_BLOCK * r["peak_blocks"] + (r.get("stack_table_bytes") or 0)}


def targets(rows, summary, report):
    """The performance issue's targets against this run: [target, measured, "met"/"missed"]."""
    by_mode = {e["mode"]: e for e in summary}
    out = []

    def verdict(ok):
        return "met" if ok else "missed"

    def ratio_goal(mode, limit, what):
        e = by_mode.get(mode, {})
        if "geomean_vs_jemalloc" in e:
            g = e["geomean_vs_jemalloc"]
            out.append([f"{mode}: geomean <= {limit}x jemalloc{what}", f"{g:.2f}x", verdict(g <= limit)])

    ratio_goal("tfalloc", 1.25, "")
    e = by_mode.get("tfalloc", {})
    if "worst_vs_jemalloc" in e:
        over = sorted((r["workload"], r["ratio_jemalloc"]) for r in rows
                      if r["mode"] == "tfalloc" and r.get("ratio_jemalloc", 0) > 1.5)
        out.append(["tfalloc: no workload above 1.5x",
                    ", ".join(f"{w} {x:.2f}x" for w, x in over) or f"worst {e['worst_vs_jemalloc']:.2f}x",
                    verdict(not over)])
    ratio_goal("tfalloc-stacks", 2.5, " (full stacks)")
    stacks = {r["workload"]: r for r in rows if r["mode"] == "tfalloc-stacks" and "median_s" in r}
    heap = {r["workload"]: r for r in rows if r["mode"] == "heaptrack" and "median_s" in r}
    pairs = [(w, stacks[w]["median_s"] / heap[w]["median_s"]) for w in stacks
             if w in heap and (w, "heaptrack") not in NOT_COMPARABLE]
    if pairs:
        within = [w for w, x in pairs if x <= 1 / 3]
        out.append(["tfalloc-stacks: at most 1/3 of heaptrack's time, every workload",
                    f"{len(within)} of {len(pairs)}: "
                    + ", ".join(f"{w} {x:.2f}" for w, x in sorted(pairs)),
                    verdict(len(within) == len(pairs))])
    ratio_goal("tfalloc-sampled", 1.1, " (sample-only tracking, sampled stacks)")
    for mode, pct in (("tfalloc", 80), ("tfalloc-stacks", 50)):
        e = by_mode.get(mode, {})
        if "churn_throughput_pct_of_jemalloc" in e:
            got = e["churn_throughput_pct_of_jemalloc"]
            out.append([f"{mode}: churn keeps >= {pct}% of jemalloc's throughput", f"{got:.0f}%",
                        verdict(got >= pct)])
    for mode in MEMORY_MODES:
        judged = [(r["workload"], memory_budget(r, rows)) for r in rows if r["mode"] == mode]
        judged = [(w, m) for w, m in judged if m is not None]
        if judged:
            over = [(w, m) for w, m in judged if m["over"] > m["budget"]]
            out.append([f"{mode}: peak RSS <= jemalloc's + {MEMORY_PER_BLOCK} B a live block + stack table",
                        f"{len(judged) - len(over)} of {len(judged)} within"
                        + ("; over: " + ", ".join(f"{w} +{fmt_bytes(m['over'])} (budget "
                                                   f"{fmt_bytes(m['budget'])})" for w, m in over)
                           if over else ""),
                        verdict(not over)])
    if report:
        worst = max(report[f]["median_s"] for f in ("json", "text"))
        out.append([f"tfalloc report on the densest profile ({report.get('mode')}) under 1 s",
                    f"{worst:.2f} s", verdict(worst < 1.0)])
    return out


def table(headers, rows, right):
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *[r for r in rows if r])]
    lines = []

    def line(vals):
        out = []
        for i, v in enumerate(vals):
            v = str(v)
            out.append(v.rjust(widths[i]) if right[i] else v.ljust(widths[i]))
        return "  ".join(out).rstrip()

    lines.append(line(headers))
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append(line(r) if r else "")
    return lines


def render(res):
    h = res["header"]
    out = []
    out.append(f"tfalloc benchmark ({res['profile']} run, {res['reps']} reps, interleaved), "
               f"{h['date']}")
    out.append(f"machine: {h['nproc']} CPUs, {h['cpu']}, Linux {h['kernel']}; "
               f"commit {h['commit']}")
    if h.get("other_cpu_s") is not None:
        stolen = h.get("stolen_cpu_s")
        out.append(f"CPU time used by other processes during the runs: {h['other_cpu_s']:.1f} s "
                   f"({100 * h['other_cpu_s'] / res['elapsed_s']:.0f}% of one CPU"
                   + (f"; and {stolen:.1f} s the hypervisor gave other guests" if stolen is not None
                      else "")
                   + "; more than a few % skews the timings)")
    v = h["versions"]
    out.append("peers: " + ", ".join(f"{k} {v[k]}" for k in ("heaptrack", "valgrind",
                                                             "libjemalloc2", "liblsan0")
                                     if v.get(k)))
    out.append("median/min/max: wall seconds. x glibc, x jemalloc: the median over the median of "
               "plain glibc / plain jemalloc in the same run")
    out.append("(memcheck and jeprof run on a small input, and are compared with glibc and "
               "jemalloc on that same input). RSS: median peak RSS")
    out.append("of the command and its waited-for children. profile: median bytes written per run "
               "(tfalloc profiles, heaptrack trace, jeprof dumps, memcheck log).")
    out.append("")
    headers = ["workload", "mode", "reps", "median", "min", "max", "x glibc", "x jemalloc",
               "RSS", "throughput", "profile", "note"]
    right = [False, False, True, True, True, True, True, True, True, True, True, False]
    rows = []
    last = None
    for r in res["rows"]:
        if r["mode"].endswith("@small"):
            continue
        if last is not None and r["workload"] != last:
            rows.append(None)
        last = r["workload"]
        note = r["note"]
        if r["status"] in ("n/a", "skipped"):
            rows.append([r["workload"], r["mode"], "-", "-", "-", "-", "-", "-", "-", "-", "-",
                         note])
            continue
        median = fmt_time(r.get("median_s"))
        if r["status"] in ("WRONG", "timeout"):
            median = r["status"]
            note = (note + "; " if note else "") + f"{len(r['problems'])}/{r['reps']} bad: " + \
                r["problems"][0]
        if r["mode"] in SMALL_INPUT_MODES and "glibc_small_median_s" in r:
            note += f" (glibc {r['glibc_small_median_s']:.3f} s)"
        prof = r.get("profile_bytes")
        rows.append([r["workload"], r["mode"], r["reps"], median, fmt_time(r.get("min_s")),
                     fmt_time(r.get("max_s")), fmt_ratio(r.get("ratio_glibc")),
                     fmt_ratio(r.get("ratio_jemalloc")),
                     fmt_bytes(r["maxrss_kb"] * 1024) if r.get("maxrss_kb") else "-",
                     fmt_rate(r.get("throughput")) if r.get("throughput") else "",
                     fmt_bytes(prof) if prof else "", note])
    out += table(headers, rows, right)
    out.append("")
    out.append("summary: ratio to plain jemalloc, geometric mean and worst over the workloads each "
               "mode ran; churn, prodcons:")
    out.append("throughput as % of plain jemalloc's (memcheck, jeprof: on the small input)")
    srows = []
    for s in res["summary"]:
        if "na" in s:
            srows.append([s["mode"], "-", "-", "-", "-", "-", s["na"]])
            continue
        worst = (f"{s['worst_vs_jemalloc']:.2f}x ({s['worst_workload']})"
                 if "worst_vs_jemalloc" in s else "-")
        pct = [f"{s[k + '_throughput_pct_of_jemalloc']:.0f}%"
               if k + "_throughput_pct_of_jemalloc" in s else "-" for k in ("churn", "prodcons")]
        srows.append([s["mode"], s["workloads"], fmt_ratio(s.get("geomean_vs_jemalloc")), worst,
                      pct[0], pct[1], "; ".join(s.get("problems", []))])
    out += table(["mode", "workloads", "geomean", "worst", "churn", "prodcons", "problems"],
                 srows, [False, True, True, False, True, True, False])
    lay = res.get("layouts")
    if lay and all(r is not None for r in lay["ratios"]):
        rs = lay["ratios"]
        out.append("")
        out.append(f"trees {lay['size']} LAYOUT 0 to {len(rs) - 1} (the heap's blocks elsewhere; "
                   f"median of {lay['reps']}): tfalloc {min(rs):.2f}x to {max(rs):.2f}x plain jemalloc "
                   f"(" + ", ".join(f"{x:.2f}x" for x in rs) + ")")
    rep = res["tfalloc_report"]
    if rep:
        out.append("")
        out.append(f"tfalloc report on the trees profile of {rep.get('mode', 'tfalloc')} "
                   f"({fmt_bytes(rep['profile_bytes'])}, symbolized): "
                   f"--format json {rep['json']['median_s']:.3f} s, "
                   f"--format text {rep['text']['median_s']:.3f} s "
                   f"(median of {REPORT_REPS}; exit: {rep['json']['status']})")
    def signed_bytes(d):
        return "-" if d is None else ("-" if d < 0 else "") + fmt_bytes(abs(d))

    trows = []
    for r in res["rows"]:
        if not r.get("pointer_table_bytes"):
            continue
        m = memory_budget(r, res["rows"])
        trows.append([r["workload"], r["mode"], fmt_bytes(r["pointer_table_bytes"]),
                      fmt_bytes(r["stack_table_bytes"]) if r.get("stack_table_bytes") else "-",
                      f"{r['peak_blocks']:,.0f}" if r.get("peak_blocks") else "-",
                      fmt_bytes(r["maxrss_kb"] * 1024) if r.get("maxrss_kb") else "-",
                      signed_bytes(m and m["over"]), signed_bytes(m and m["budget"]),
                      "-" if m is None else ("within" if m["over"] <= m["budget"] else "over")])
    if trows:
        out.append("")
        out.append("the shim's tables (the largest process of the first run): the pointer table at "
                   "its peak, the stack table at the end (stacks, index, site figures), the most blocks one "
                   "process had live at once, the run's RSS, how much that is above plain "
                   "jemalloc's, and the memory target's budget for it: 64 bytes a live block "
                   "plus the stack table")
        out += table(["workload", "mode", "pointer table", "stack table", "peak blocks", "RSS",
                      "over jemalloc", "budget", ""], trows,
                     [False, False, True, True, True, True, True, True, False])
    if res.get("targets"):
        out.append("")
        out.append("the performance targets (issue 3) in this run:")
        out += table(["target", "measured", ""], res["targets"], [False, False, False])
    for note in res["footnotes"]:
        out.append("")
        out.append(note)
    out.append(f"wall time of the benchmark: {res['elapsed_s']:.0f} s")
    return "\n".join(out)


def smoke(runner, workloads, modes):
    """Each workload on its small input under glibc, jemalloc and the shim: same output?"""
    failed = 0
    for w in workloads:
        size = w.sizes["small"] if w.sizes["small"] is not None else w.sizes["quick"]
        ref = None
        for m in ("glibc", "jemalloc", "tfalloc", "tfalloc-glibc"):
            if not modes[m].available:
                continue
            res = runner.run(w, m, size)
            ok = (ref is None and (res["status"], res["code"]) == ("exit", 0)) or (
                ref is not None and (res["status"], res["code"], res["digest"])
                == (ref["status"], ref["code"], ref["digest"]))
            if ref is None:
                ref = res
            print(f"smoke: {w.name:15} {m:14} {'ok' if ok else 'DIFFERENT'}")
            if not ok:
                failed += 1
                print(res.get("stderr_tail", ""))
    print(f"smoke: {failed} different" if failed else "smoke: all identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
