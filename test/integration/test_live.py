# SPDX-License-Identifier: MIT
"""Asking running processes: tfalloc snapshot PID and tfalloc top PID.

tp_live holds a known number of bytes and waits for the end of its stdin
(test/programs/tp_live.c); each case asks it while it waits, then ends its
stdin and checks that it printed what it prints without tfalloc and exited 0.

Cases:
  idle        blocked in read(2): two snapshots, each a valid profile
              (end_reason running, not complete) with exactly the bytes it
              holds; -o copies the snapshot; the read was not interrupted
  sleep       sleeping in nanosleep: it answers as well
  main_exit   the same once the main thread has ended (pthread_exit) and
              another waits: the process is still found, and answers
              (/proc/PID/maps, the ended leader's, is empty then)
  busy        4 threads replacing blocks without pause: three snapshots,
              bytes in use within one block per thread of what the rings
              hold, allocations growing from one snapshot to the next
  spawn       threads that come and go: every snapshot is answered (a request
              lost with the thread it was sent to goes again to the process)
  top         tfalloc top -n 3 on the busy program: 3 refreshes of the cpu
              device with plausible figures, "resources: none"
  resources   the same with TFALLOC_TAG_BY=thread: a row per ring thread's
              resource (threads/ring0, threads/ring1) with its own blocks
  top_end     tfalloc top ends with status 0 (and says why) when the process
              ends
  no_shim     a process without the shim: one clear line, exit status 1, and
              the process lives on; usage errors exit 2, help 0
  fork        a fork child answers with its own profile (its pid, forked,
              its bytes), the parent with its own
  handler     the program's own handler of the control signal: it never sees
              tfalloc's requests, it does see a plain kill, and sigaction
              reports it (checked by the program)
  kill        kill -50 PID (no request value) writes a snapshot, nothing else
  off         TFALLOC_CONTROL_SIGNAL=0: a clear refusal, the process lives on
  run         under tfalloc run with TFALLOC_CONTROL_SIGNAL=45: the tool
              finds the signal and the profile in --output
  python3     python3 blocked reading stdin answers; its output is unchanged
  fork_loop   python3 forking without pause while two threads allocate: every
              request is answered, every child ends normally
"""
import os
import re
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

N, SIZE = 1000, 100
HELD = N * SIZE + N * 8  # the blocks and the array of their pointers
# What glibc allocates for a thread it creates (its DTV: 304 bytes here), at most.
THREAD_BYTES = 512


class Live:
    """A program running in the background, its stdin a pipe that ends it."""

    def __init__(self, ctx, argv, how="preload", env=None, outdir=None, tool_args=None):
        self.ctx = ctx
        self.outdir = outdir or ctx.mkdtemp("out")
        if how == "preload":
            extra = {"LD_PRELOAD": ctx.lib, "TFALLOC_OUTPUT": self.outdir, "TFALLOC_QUIET": "1"}
            if ctx.allocator:
                extra["TFALLOC_ALLOCATOR"] = ctx.allocator
            extra.update(env or {})
            cmd = list(argv)
        elif how == "tool":
            extra = dict(env or {})
            cmd = [ctx.tool, "run", "--quiet", "--output", self.outdir] + list(tool_args or []) + ["--"] + list(argv)
        else:
            extra = dict(env or {})
            cmd = list(argv)
        self.argv = cmd
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=ctx.env(extra), cwd=ctx.scratch,
                                  start_new_session=True)
        self.out = b""
        self.err = b""
        self.open = {self.p.stdout.fileno(): "out", self.p.stderr.fileno(): "err"}

    def _pump(self, timeout):
        if not self.open:
            time.sleep(timeout)
            return
        ready, _, _ = select.select(list(self.open), [], [], timeout)
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                del self.open[fd]
            elif self.open[fd] == "out":
                self.out += data
            else:
                self.err += data

    def wait_for(self, pred, what, timeout=60):
        end = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > end:
                self.kill()
                raise T.Failure("%s: not within %ss\n%s" % (what, timeout, self.describe()))
            if self.p.poll() is not None and not self.open:
                raise T.Failure("%s: the program ended first\n%s" % (what, self.describe()))
            self._pump(0.05)

    def ready(self):
        self.wait_for(lambda: b"READY\n" in self.out, "READY")
        return self

    def err_number(self, key):
        self.wait_for(lambda: re.search(rb"^%s (\d+)$" % key.encode(), self.err, re.M),
                      "'%s N' on stderr" % key)
        return int(re.search(rb"^%s (\d+)$" % key.encode(), self.err, re.M).group(1))

    def alive(self):
        return self.p.poll() is None

    def finish(self, timeout=60):
        """Ends stdin and waits for the end: a Result."""
        self.p.stdin.close()
        end = time.monotonic() + timeout
        while self.open or self.p.poll() is None:
            if time.monotonic() > end:
                self.kill()
                raise T.Failure("the program did not end after its stdin did\n" + self.describe())
            self._pump(0.05)
        return T.Result(self.argv, self.p.returncode, self.out, self.err, self.p.pid, self.outdir,
                        "live")

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except OSError:
            pass

    def describe(self):
        return T.Result(self.argv, self.p.poll(), self.out, self.err, self.p.pid, self.outdir,
                        "live").describe()


def tool(ctx, *args, timeout=120):
    return ctx._run([ctx.tool] + [str(a) for a in args], ctx.env(), None, timeout, "tfalloc")


def snapshot(ctx, pid, *args):
    """tfalloc snapshot PID: the path it printed."""
    r = tool(ctx, "snapshot", *args, pid)
    T.check(r.returncode == 0, "tfalloc snapshot %d failed\n%s" % (pid, r.describe()))
    path = r.out.strip()
    T.check(os.path.isfile(path), "tfalloc snapshot printed %r, not a file\n%s" % (path, r.describe()))
    return path


def no_answers_left(pid):
    """The tool removed every answer of pid from the answers' directory."""
    d = "/tmp/tfalloc-%d" % os.geteuid()
    left = [f for f in (os.listdir(d) if os.path.isdir(d) else []) if f.startswith("%d." % pid)]
    T.check_eq(left, [], "answers of process %d left in %s" % (pid, d))


def running_profile(ctx, path, pid, what):
    """The report of one snapshot file: the process, checked to be a running snapshot of pid."""
    proc = T.only_process(ctx.report(path, what), what)
    T.check_eq(proc["pid"], pid, what + ": pid")
    T.check_eq(proc["end_reason"], "running", what + ": end_reason")
    T.check_eq(proc["complete"], False, what + ": complete")
    return proc


def plain_output(ctx, argv):
    """What the program prints without the shim when its stdin ends at once."""
    plain = ctx.run_plain(argv, stdin=b"")
    T.check_eq(plain.returncode, 0, "%s without the shim\n%s" % (" ".join(argv), plain.describe()))
    return plain


def same_as_plain(plain, r, what):
    T.check_eq(r.returncode, 0, what + ": exit status\n" + r.describe())
    T.check_eq(r.stdout, plain.stdout, what + ": stdout")


def case_idle(ctx, mode="idle"):
    base = T.device(ctx.baseline("tp_live", via="preload"))
    argv = [ctx.prog("tp_live"), mode, N, SIZE]
    argv = [str(a) for a in argv]
    plain = plain_output(ctx, argv)
    live = Live(ctx, argv).ready()
    pid = live.p.pid
    files = []
    for i in range(2):
        path = snapshot(ctx, pid)
        T.check_eq(os.path.dirname(path), live.outdir, "where the snapshot went")
        proc = running_profile(ctx, path, pid, "snapshot %d" % (i + 1))
        d = T.device(proc)
        # After main's pthread_exit, the runtime's too: the thread's, and libgcc_s loaded to unwind.
        slack = 16384 if mode == "main-exit" else 0
        T.check_range(d["bytes_in_use"] - base["bytes_in_use"], HELD, HELD + slack,
                      "snapshot %d: bytes in use minus the baseline's (%d - %d)"
                      % (i + 1, d["bytes_in_use"], base["bytes_in_use"]))
        T.check_eq(proc["leaks"] and sum(l["bytes"] for l in proc["leaks"]), d["bytes_in_use"],
                   "snapshot %d: live blocks listed" % (i + 1))
        files.append(path)
    T.check_eq(files[0], files[1], "both snapshots are the process's profile")
    copy = os.path.join(ctx.scratch, "copy.prof")
    r = tool(ctx, "snapshot", "-o", copy, pid)
    T.check_eq((r.returncode, r.out), (0, copy + "\n"), "snapshot -o FILE\n" + r.describe())
    running_profile(ctx, copy, pid, "the copy")
    T.check(live.alive(), "the process ended after the snapshots\n" + live.describe())
    r = live.finish()
    same_as_plain(plain, r, mode)
    no_answers_left(pid)
    proc = T.only_process(ctx.report(live.outdir, "final"), "final")
    T.check_exited(proc, 0)


def case_busy(ctx):
    threads = 4
    argv = [str(a) for a in (ctx.prog("tp_live"), "busy", threads, N, SIZE)]
    plain = plain_output(ctx, argv)
    base = T.device(ctx.baseline("tp_live", via="preload"))
    live = Live(ctx, argv).ready()
    pid = live.p.pid
    rings = threads * (N * SIZE + N * 8)
    allocs = 0
    for i in range(3):
        path = snapshot(ctx, pid)
        proc = running_profile(ctx, path, pid, "snapshot %d" % (i + 1))
        d = T.device(proc)
        # Each ring holds N - 1 or N blocks; pthread_create allocates for each thread too.
        T.check_range(d["bytes_in_use"] - base["bytes_in_use"], rings - threads * SIZE,
                      rings + threads * THREAD_BYTES,
                      "snapshot %d: bytes in use minus the baseline's (%d - %d)"
                      % (i + 1, d["bytes_in_use"], base["bytes_in_use"]))
        T.check(d["num_allocs"] > allocs, "snapshot %d: %d allocations, not more than the %d before"
                % (i + 1, d["num_allocs"], allocs))
        allocs = d["num_allocs"]
        time.sleep(0.1)
    r = live.finish()
    same_as_plain(plain, r, "busy")
    proc = T.only_process(ctx.report(live.outdir, "final"), "final")
    T.check_exited(proc, 0)
    T.check(T.device(proc)["num_allocs"] > allocs, "allocations at the end")


def case_spawn(ctx):
    """Threads that come and go: a request sent to one that ends before it runs the handler goes
    again to the process; every snapshot is answered, and soon."""
    argv = [str(a) for a in (ctx.prog("tp_live"), "spawn", N, SIZE)]
    live = Live(ctx, argv).ready()
    start = time.monotonic()
    for i in range(40):
        r = tool(ctx, "snapshot", "--timeout", 5, live.p.pid)
        T.check(r.returncode == 0, "snapshot %d while threads come and go\n%s" % (i + 1, r.describe()))
    T.check(time.monotonic() - start < 30, "40 snapshots took %.1f s" % (time.monotonic() - start))
    proc = running_profile(ctx, live.outdir, live.p.pid, "the last snapshot")
    T.check_ge(T.device(proc)["bytes_in_use"], HELD, "bytes in use")
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "READY\nDONE\n"), "spawn\n" + r.describe())


def case_top(ctx):
    argv = [str(a) for a in (ctx.prog("tp_live"), "busy", 2, N, SIZE)]
    live = Live(ctx, argv).ready()
    r = tool(ctx, "top", "-n", 3, "-d", "0.3", live.p.pid)
    T.check(r.returncode == 0, "tfalloc top failed\n" + r.describe())
    lines = r.out.splitlines()
    heads = [l for l in lines if l.startswith("tfalloc top: process %d (tp_live)" % live.p.pid)]
    T.check_eq(len(heads), 3, "refreshes printed:\n" + r.out)
    for k, h in enumerate(heads):
        T.check(h.endswith("refresh %d of 3" % (k + 1)), "refresh line: %r" % h)
    cpu = [l.split() for l in lines if l.startswith("cpu ")]
    T.check_eq(len(cpu), 3, "cpu rows:\n" + r.out)
    T.check_eq(lines.count("resources: none"), 3, "'resources: none' lines:\n" + r.out)
    prev = 0
    for k, row in enumerate(cpu):
        # cpu ALLOCATOR IN_USE UNIT PEAK UNIT ALLOCATIONS FREES RATE
        T.check_eq(len(row), 9, "cpu row %r" % row)
        T.check_eq(row[1], ctx.allocator or "jemalloc", "allocator")
        in_use = float(row[2]) * {"B": 1, "KiB": 1024, "MiB": 1 << 20}[row[3]]
        T.check_range(in_use, 2 * (N - 1) * SIZE, 2 * (N * SIZE + N * 8) + 64 * 1024,
                      "refresh %d: bytes in use" % (k + 1))
        allocs, frees, rate = int(row[6]), int(row[7]), int(row[8])
        T.check(allocs > prev and frees <= allocs, "refresh %d: allocations %d, frees %d, before %d"
                % (k + 1, allocs, frees, prev))
        T.check(rate > 0, "refresh %d: allocation rate %d" % (k + 1, rate))
        prev = allocs
    T.check(live.alive(), "the process ended under top\n" + live.describe())
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "READY\nDONE\n"), "busy under top\n" + r.describe())
    no_answers_left(live.p.pid)


def case_resources(ctx):
    """With TFALLOC_TAG_BY=thread each ring thread's blocks are its resource's."""
    argv = [str(a) for a in (ctx.prog("tp_live"), "busy", 2, N, SIZE)]
    live = Live(ctx, argv, env={"TFALLOC_TAG_BY": "thread"}).ready()
    r = tool(ctx, "top", "-n", 2, "-d", "0.3", live.p.pid)
    T.check(r.returncode == 0, "tfalloc top failed\n" + r.describe())
    T.check_eq(r.out.count("\nresource "), 2, "resource tables:\n" + r.out)
    for ring in ("ring0", "ring1"):
        rows = [l.split() for l in r.out.splitlines() if l.startswith("threads/%s " % ring)]
        T.check_eq(len(rows), 2, "rows of threads/%s:\n%s" % (ring, r.out))
        for row in rows:
            # NAME DEVICE IN_USE UNIT PEAK UNIT ALLOCATIONS FREES RATE
            T.check_eq(row[1], "cpu", "device of threads/" + ring)
            in_use = float(row[2]) * {"B": 1, "KiB": 1024, "MiB": 1 << 20}[row[3]]
            T.check_range(in_use, (N - 1) * SIZE * 0.99, N * SIZE * 1.01, "threads/%s: in use" % ring)
            T.check(int(row[6]) >= N and int(row[8]) > 0, "threads/%s: %r" % (ring, row))
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "READY\nDONE\n"), "busy, tagged by thread\n" + r.describe())


def case_top_end(ctx):
    """tfalloc top ends with status 0 when the process does."""
    argv = [str(a) for a in (ctx.prog("tp_live"), "idle", 10, 10)]
    live = Live(ctx, argv).ready()
    top = subprocess.Popen([ctx.tool, "top", "-d", "0.1", str(live.p.pid)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=ctx.env())
    # A refresh first (a fixed sleep was too short on a loaded machine), then the end.
    first = b""
    deadline = time.monotonic() + 30
    while b"\ncpu " not in first and time.monotonic() < deadline:
        line = top.stdout.readline()
        if not line:
            break
        first += line
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "READY\nDONE\n"), "tp_live under top")
    try:
        out, err = top.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        top.kill()
        raise T.Failure("tfalloc top did not end with the process")
    out = first + out
    T.check_eq((top.returncode, err.decode()), (0, "tfalloc: top: process %d ended\n" % live.p.pid),
               "tfalloc top at the end of the process")
    T.check_ge(out.decode().count("\ncpu "), 1, "refreshes before the end")
    no_answers_left(live.p.pid)


def case_no_shim(ctx):
    argv = [str(a) for a in (ctx.prog("tp_live"), "idle", 10, 10)]
    live = Live(ctx, argv, how="plain").ready()
    pid = live.p.pid
    for cmd in ("snapshot", "top"):
        r = tool(ctx, cmd, pid)
        T.check_eq(r.returncode, 1, "%s of a process without the shim: exit status\n%s" % (cmd, r.describe()))
        T.check_eq(r.err, "tfalloc: %s: process %d does not run under tfalloc\n" % (cmd, pid),
                   cmd + ": message")
    time.sleep(0.2)
    T.check(live.alive(), "the process ended\n" + live.describe())
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "READY\nDONE\n"), "the process after the refusal")
    for args in (("snapshot", "x12"), ("snapshot",), ("top", "-n", "0", pid), ("top", "-d", "x", pid),
                 ("snapshot", "--bogus", pid), ("top", pid, pid)):
        r = tool(ctx, *args)
        T.check(r.returncode == 2 and r.err.startswith("tfalloc: %s: " % args[0]) and r.out == "",
                "usage error %r\n%s" % (args, r.describe()))
    for args in (("help", "snapshot"), ("help", "top"), ("snapshot", "--help"), ("top", "-h")):
        r = tool(ctx, *args)
        name = args[1] if args[0] == "help" else args[0]
        T.check(r.returncode == 0 and r.out.startswith("usage: tfalloc %s " % name),
                "help %r\n%s" % (args, r.describe()))
    r = tool(ctx, "snapshot", pid)
    T.check_eq((r.returncode, r.err), (1, "tfalloc: snapshot: no process %d\n" % pid), "snapshot of a dead pid")


def case_fork(ctx):
    M = 3000
    argv = [str(a) for a in (ctx.prog("tp_live"), "fork", N, SIZE, M)]
    plain = plain_output(ctx, argv)
    base = T.device(ctx.baseline("tp_live", via="preload"))
    live = Live(ctx, argv).ready()
    parent = live.p.pid
    child = live.err_number("child")
    cpath = snapshot(ctx, child)
    ppath = snapshot(ctx, parent)
    T.check(cpath != ppath, "parent and child share the profile %s" % cpath)
    c = running_profile(ctx, cpath, child, "the child's snapshot")
    T.check_eq(c["forked"], True, "the child's profile: forked")
    T.check_eq(c["ppid"], parent, "the child's profile: ppid")
    cd = T.device(c)
    T.check_eq(cd["bytes_in_use"] - base["bytes_in_use"], HELD + M * SIZE + M * 8,
               "the child's bytes in use minus the baseline's")
    p = running_profile(ctx, ppath, parent, "the parent's snapshot")
    T.check_eq(p["forked"], False, "the parent's profile: forked")
    T.check_eq(T.device(p)["bytes_in_use"] - base["bytes_in_use"], HELD,
               "the parent's bytes in use minus the baseline's")
    r = live.finish()
    same_as_plain(plain, r, "fork")


def case_handler(ctx):
    argv = [str(a) for a in (ctx.prog("tp_live"), "handler", 10, 10, 50)]
    # Without the shim the program sees the one kill.
    live = Live(ctx, argv, how="plain").ready()
    os.kill(live.p.pid, 50)
    time.sleep(0.3)
    plain = live.finish()
    T.check_eq((plain.returncode, plain.out), (0, "READY\nHANDLED 1\nDONE\n"), "without the shim")
    live = Live(ctx, argv).ready()
    for _ in range(2):
        running_profile(ctx, snapshot(ctx, live.p.pid), live.p.pid, "snapshot")
    os.kill(live.p.pid, 50)
    time.sleep(0.3)
    r = live.finish()
    same_as_plain(plain, r, "handler")


def case_kill(ctx):
    argv = [str(a) for a in (ctx.prog("tp_live"), "idle", N, SIZE)]
    live = Live(ctx, argv).ready()
    T.check_eq(os.listdir(live.outdir), [], "files before the signal")
    os.kill(live.p.pid, 50)
    live.wait_for(lambda: any(f.endswith(".prof") for f in os.listdir(live.outdir)),
                  "a profile after kill -50", timeout=30)
    running_profile(ctx, live.outdir, live.p.pid, "the snapshot of kill -50")
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "READY\nDONE\n"), "after kill -50")


def case_off(ctx):
    argv = [str(a) for a in (ctx.prog("tp_live"), "idle", 10, 10)]
    live = Live(ctx, argv, env={"TFALLOC_CONTROL_SIGNAL": "0"}).ready()
    r = tool(ctx, "snapshot", live.p.pid)
    T.check_eq((r.returncode, r.err),
               (1, "tfalloc: snapshot: process %d does not take requests (TFALLOC_CONTROL_SIGNAL=0)\n"
                % live.p.pid), "snapshot with the control signal off\n" + r.describe())
    time.sleep(0.2)
    T.check(live.alive(), "the process ended\n" + live.describe())
    T.check_eq(os.listdir(live.outdir), [], "files while it runs")
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "READY\nDONE\n"), "after the refusal")


def case_run(ctx):
    argv = [str(a) for a in (ctx.prog("tp_live"), "idle", N, SIZE)]
    live = Live(ctx, argv, how="tool", env={"TFALLOC_CONTROL_SIGNAL": "45"}).ready()
    pid = live.err_number("pid")
    T.check(pid != live.p.pid, "the pid of tp_live is tfalloc run's")
    path = snapshot(ctx, pid)
    T.check_eq(os.path.dirname(path), live.outdir, "where the snapshot went")
    running_profile(ctx, path, pid, "snapshot")
    with open("/proc/%d/status" % pid) as f:
        caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)", f.read(), re.M).group(1), 16)
    T.check(caught >> 44 & 1 and not caught >> 49 & 1, "signals caught: %x (45, not 50)" % caught)
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "READY\nDONE\n"), "tp_live under tfalloc run\n" + r.describe())


PY = """
import sys
x = [str(i) * 3 for i in range(50000)]
print("ready", flush=True)
data = sys.stdin.read()
print("read", len(data), len(x))
"""


def case_python3(ctx):
    argv = ["/usr/bin/python3", "-c", PY]
    plain = ctx.run_plain(argv, stdin=b"abc")
    live = Live(ctx, argv, env={"PYTHONMALLOC": "malloc"})
    live.wait_for(lambda: b"ready\n" in live.out, "python3 ready")
    for _ in range(2):
        proc = running_profile(ctx, snapshot(ctx, live.p.pid), live.p.pid, "python3 snapshot")
        T.check_ge(T.device(proc)["bytes_in_use"], 50000 * 3, "python3's bytes in use")
    r = tool(ctx, "top", "-n", 2, "-d", "0.2", live.p.pid)
    T.check(r.returncode == 0 and r.out.count("\ncpu ") == 2, "top of python3\n" + r.describe())
    live.p.stdin.write(b"abc")
    r = live.finish()
    same_as_plain(plain, r, "python3")


FORK_LOOP = """
import os, select, threading
stop = False
def churn():
    while not stop:
        x = [str(i) for i in range(2000)]
threads = [threading.Thread(target=churn) for _ in range(2)]
for t in threads:
    t.start()
forks = 0
while True:
    pid = os.fork()
    if pid == 0:
        y = [str(i) for i in range(1000)]
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 7, status
    forks += 1
    if forks == 3:
        print("ready", flush=True)
    if forks > 3 and select.select([0], [], [], 0)[0] and os.read(0, 1) == b"":
        break
stop = True
for t in threads:
    t.join()
print("done")
"""


def case_fork_loop(ctx):
    """Requests that come while threads allocate and the process forks without pause: each is
    answered (one that comes during fork waits for it), every child lives and ends normally."""
    argv = ["/usr/bin/python3", "-c", FORK_LOOP]
    # Without stacks: the fast path, and reports that need no symbols.
    live = Live(ctx, argv, env={"PYTHONMALLOC": "malloc", "TFALLOC_STACKS": "none"})
    live.wait_for(lambda: b"ready\n" in live.out, "python3 ready")
    pid = live.p.pid
    for i in range(15):
        path = snapshot(ctx, pid)
        if i % 5 == 4:
            running_profile(ctx, path, pid, "snapshot of the forking python3")
    r = tool(ctx, "top", "-n", 10, "-d", "0.05", pid)
    T.check(r.returncode == 0 and r.out.count("\ncpu ") == 10, "top of the forking python3\n" + r.describe())
    r = live.finish()
    T.check_eq((r.returncode, r.out), (0, "ready\ndone\n"), "the forking python3\n" + r.describe())
    T.check_ge(len([f for f in os.listdir(live.outdir) if f.endswith(".prof")]), 5,
               "profiles of python3 and its children")


T.main({
    "idle": case_idle,
    "sleep": lambda ctx: case_idle(ctx, "sleep"),
    "main_exit": lambda ctx: case_idle(ctx, "main-exit"),
    "busy": case_busy,
    "spawn": case_spawn,
    "top": case_top,
    "resources": case_resources,
    "top_end": case_top_end,
    "no_shim": case_no_shim,
    "fork": case_fork,
    "handler": case_handler,
    "kill": case_kill,
    "off": case_off,
    "run": case_run,
    "python3": case_python3,
    "fork_loop": case_fork_loop,
})
