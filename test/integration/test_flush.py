# SPDX-License-Identifier: MIT
"""Memory over time and periodic snapshots.

Cases:
  timeline   a python3 run of about a second: a bounded series of points in
             time order whose last point is the figures at exit and whose
             highest point is the process's peak, with the resident set
  sigkill    a python3 loop killed by SIGKILL: its last periodic snapshot
             (TFALLOC_FLUSH_INTERVAL_MS=200) is a valid profile, marked not
             complete, at most an interval (plus scheduling slack) old
  fork       a process that forks while snapshots are on: parent and child
             each end with their own complete profile (the child never writes
             over the parent's file)
  errno      snapshots every millisecond into a directory that does not exist:
             each fails, and malloc and free still leave errno alone
  no_flush   TFALLOC_FLUSH_INTERVAL_MS=0: killed by SIGKILL, nothing is left
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

PY = "/usr/bin/python3"

BUSY = """
import time
x = []
t = time.time()
while time.time() - t < %(seconds)s:
    x.append([str(i) for i in range(1000)])
    if len(x) > 200:
        x = []
x = None
print("done")
"""


def check_timeline(proc, what):
    tl = proc.get("timeline")
    T.check(isinstance(tl, list) and len(tl) >= 2, "%s: timeline %r" % (what, tl and tl[:3]))
    T.check(len(tl) <= 2048, "%s: %d points (more than 2048)" % (what, len(tl)))
    for a, b in zip(tl, tl[1:]):
        T.check(b["t"] >= a["t"], "%s: timeline goes back in time: %r then %r" % (what, a, b))
    T.check(all(p["rss_bytes"] > 0 for p in tl[1:]), "%s: a point without a resident set" % what)
    return tl


def case_timeline(ctx):
    argv = [PY, "-c", BUSY % {"seconds": 1.0}]
    plain = ctx.run_plain(argv, env={"PYTHONMALLOC": "malloc"})
    r, rep = ctx.run_and_report(argv, what="python3", env={"PYTHONMALLOC": "malloc"})
    T.same_output(plain, r, "python3")
    proc = T.only_process(rep, "python3")
    T.check_eq(proc["complete"], True, "complete")
    dev = T.device(proc)
    tl = check_timeline(proc, "python3")
    T.check_ge(len(tl), 20, "points over a second of allocations")
    T.check_eq(tl[-1]["bytes_in_use"], dev["bytes_in_use"], "last point: bytes in use at exit")
    T.check_eq(tl[-1]["allocated_bytes"], dev["allocated_bytes_in_use"], "last point: allocated bytes")
    T.check_eq(max(p["bytes_in_use"] for p in tl), dev["peak_bytes_in_use"], "highest point = the peak")
    T.check(any(p["peak"] for p in tl), "no point is flagged as the peak")
    # The last point is taken as the profile is written, just after its end time.
    T.check_range(tl[-1]["t"], 0.9, float(proc["duration"]) + 0.1, "time of the last point")


def start(ctx, argv, outdir, interval):
    env = ctx.env({"LD_PRELOAD": ctx.lib, "TFALLOC_OUTPUT": outdir, "TFALLOC_QUIET": "1",
                   "TFALLOC_FLUSH_INTERVAL_MS": str(interval), "PYTHONMALLOC": "malloc"})
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=ctx.scratch)


def case_sigkill(ctx):
    outdir = ctx.mkdtemp("out")
    argv = [PY, "-c", BUSY % {"seconds": 60}]
    p = start(ctx, argv, outdir, 200)
    time.sleep(1.5)
    killed_at = time.time()
    p.kill()
    p.wait(timeout=30)
    T.check_eq(p.returncode, -signal.SIGKILL, "python3 exit status (killed)")
    profs = [f for f in os.listdir(outdir) if f.endswith(".prof")]
    T.check_eq(len(profs), 1, "profiles left by the killed process (%s)" % sorted(os.listdir(outdir)))
    rep = ctx.report(outdir, "killed python3")
    T.check_eq(rep["unreadable"], [], "unreadable profiles")
    proc = T.only_process(rep, "python3")
    T.check_eq(proc["complete"], False, "complete")
    T.check_eq(proc["end_reason"], "running", "end reason")
    T.check_eq(proc["pid"], p.pid, "pid")
    dev = T.device(proc)
    T.check_ge(dev["num_allocs"], 10000, "allocations in the snapshot")
    tl = check_timeline(proc, "killed python3")
    # The snapshot is at most one interval old, give or take scheduling on a busy machine.
    age = killed_at - float(proc["start_time"]) - tl[-1]["t"]
    T.check(age < 0.2 + 0.5, "the last snapshot is %.3f s old (interval 0.2 s)" % age)
    T.check(tl[-1]["t"] > 0.8, "the last snapshot was written %.3f s after start" % tl[-1]["t"])
    # The text report says what this is.
    r = ctx._run([ctx.tool, "report", outdir], ctx.env(), None, 60, "report")
    T.check("this is a snapshot" in r.out, "text report of a snapshot:\n" + r.out[:1500])


def case_errno(ctx):
    argv = [ctx.prog("tp_sites"), "errno", "300000"]
    missing = os.path.join(ctx.scratch, "no", "such", "dir")
    r = ctx.run_preload(argv, outdir=missing, env={"TFALLOC_FLUSH_INTERVAL_MS": "1",
                                                  "TFALLOC_STACKS": "none"})
    T.check_eq(r.returncode, 0, "tp_sites errno under failing snapshots\n" + r.describe())
    T.check("cannot write" in r.err, "no word of the failing snapshots:\n" + r.describe())
    r = ctx.run_preload(argv, outdir=missing, env={"TFALLOC_FLUSH_INTERVAL_MS": "1"})
    T.check_eq(r.returncode, 0, "the same with stacks\n" + r.describe())


def case_no_flush(ctx):
    outdir = ctx.mkdtemp("out")
    p = start(ctx, [PY, "-c", BUSY % {"seconds": 60}], outdir, 0)
    time.sleep(1.0)
    p.kill()
    p.wait(timeout=30)
    T.check_eq(os.listdir(outdir), [], "files left with TFALLOC_FLUSH_INTERVAL_MS=0")


def case_fork(ctx):
    script = BUSY % {"seconds": 0.4} + """
import os
pid = os.fork()
if pid == 0:
    y = [str(i) * 2 for i in range(200000)]
    time.sleep(0.3)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child", status)
"""
    argv = [PY, "-c", script]
    r, rep = ctx.run_and_report(argv, what="python3 fork",
                                env={"PYTHONMALLOC": "malloc", "TFALLOC_FLUSH_INTERVAL_MS": "50"})
    T.check(r.out.endswith("child 0\n"), "output: %r" % r.out[-200:])
    procs = rep["processes"]
    T.check_eq(len(procs), 2, "profiles of parent and child: %s" % [p["file"] for p in procs])
    files = {p["file"] for p in procs}
    T.check_eq(len(files), 2, "distinct files")
    for p in procs:
        T.check_eq(p["complete"], True, "complete (pid %d)" % p["pid"])
        check_timeline(p, "pid %d" % p["pid"])
    child = [p for p in procs if p["forked"]]
    T.check_eq(len(child), 1, "forked children")
    T.check_ge(T.device(child[0])["num_allocs"], 200000, "the child's own allocations")


T.main({
    "timeline": case_timeline,
    "sigkill": case_sigkill,
    "no_flush": case_no_flush,
    "errno": case_errno,
    "fork": case_fork,
})
