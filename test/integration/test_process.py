# SPDX-License-Identifier: MIT
"""Processes: fork, exec, a shell pipeline, death by a signal, a static binary.

  fork        tp_fork: parent and child each write a profile: two processes,
              the child's ppid is the parent's pid and it is marked forked; the
              parent leaks 6333 bytes in 3 blocks more than its baseline, the
              child 999 bytes in 3 blocks (it freed the block it inherited)
  fork_exit_  the same with the child leaving through _exit()
  fork_threads  a thread allocates without pause while the main thread forks
              10 children, each allocating: no child hangs on a lock the fork
              caught held; 11 profiles
  exec        tp_exec leaks 500 bytes and execs tp_leaks.  Expected: two
              profiles with the same pid, tp_exec's (end_reason "exec", 500
              bytes more in use than its baseline) and tp_leaks' (end_reason
              "exit", its exact ledger)
  pipeline    tfalloc run -- sh -c 'tp_leaks | cat': a profile per process:
              sh, tp_leaks (exact ledger) and cat (consistent), both children
              of sh; the images sh forked before they exec'd may have profiles
              (end_reason "exec", forked), nothing else
  signal      tp_signal kills itself with SIGTERM: tfalloc run exits 143; with
              LD_PRELOAD alone the process still dies of SIGTERM; SIGKILL gives 137
  signal_profile  and its profile is written: end_reason "signal", exit_code
              15, its leaks exactly
  static      a statically linked program under tfalloc run: one line on
              stderr saying it cannot be profiled, its output and exit status
              unchanged, no profile file
  own_malloc  tp_own_malloc defines malloc itself (as a program linked with a
              static allocator that replaces malloc): one line on stderr
              naming it, saying that what it makes is not seen (the summary
              had said "0 allocations" and nothing else), its output and
              exit status unchanged, a profile all the same; none for
              tp_empty, nor for python3, whose malloc symbol is a PLT entry
  fork_held   tp_fork held: a thread holds a block (its pointer on its stack
              only) while the main thread forks a child that exits: in the
              child the block is reachable (the thread is gone, its stack
              and the pointer are not), not lost; so are the blocks it
              held in thread-specific data under its first key and under
              a key past glibc's first 32 (glibc clears them in the child:
              they were definitely lost), and the parent frees them
  deepbind_MODE  tp_deepbind loads a C++ library with RTLD_DEEPBIND (named by
              its path, by its bare name through the program's RUNPATH past a
              32-bit copy of it in LD_LIBRARY_PATH, or as $ORIGIN/...), which
              loads a lazily bound one the same way:
              blocks cross between program and libraries both ways (malloc,
              realloc, new[]), both see one malloc, and each library's leak
              is in the profile with its stack; the blocks the constructors
              made (glibc's: they ran before the shim bound them) are freed
              and resized; output and status unchanged, no memory error
              but the program's three last double frees (of blocks glibc's
              thread cache and fast bins, or a merge with its neighbours,
              would have made look in use)
  orphans     tfalloc run without the gate, on tp_fork orphan 300 (a double
              fork whose grandchild ends 300 ms after the command): the
              closing line counts the grandchild's profile too, which is there
              when tfalloc run returns; with one more process that sleeps
              30 s, tfalloc run returns within seconds, saying by pid that it
              still runs; tp_fork zombies 20 (20 orphans that end while the
              command runs), with the gate and without: none is left a zombie
              of tfalloc run's while the command runs
  child_env   tp_env run: children started by execve, posix_spawn, vfork +
              execve and posix_spawnp with environments of the parent's
              making (one variable; another LD_PRELOAD, empty, and a
              TFALLOC_QUIET of their own; none at all; a LD_PRELOAD that
              cannot be loaded; 600 variables), and a grandchild the first executes with the
              environment it got: each is profiled (its leak of 1000 + K
              bytes is in a profile), and each prints exactly the environment
              its parent gave it (the same output as without tfalloc); so
              do the two the child with no environment starts by system()
              and popen(); the child whose environment set TFALLOC_QUIET=1
              prints no summary.
              python3's subprocess with env={...} the same way
  valgrind    tfalloc run -- valgrind --leak-check=full --error-exitcode=9
              tp_empty: valgrind's errors and status are those of a plain
              run (0: the shim had put libunwind's probes of memory and its
              own blocks among memcheck's errors, 9); the program valgrind
              runs has no profile, valgrind's launcher has; with
              TFALLOC_UNDER_VALGRIND=1 it has one
  fork_kill   tp_fork kill 20: children sent SIGTERM as they return from
              fork each die of it (the signal had been dropped as the
              parent's, and the child never ended), as without tfalloc; each
              leaves a profile (end reason signal, 15)
  sanitizer   tp_asan (built with AddressSanitizer, whose runtime must be the
              first library): under tfalloc run, and started by a shell with
              its environment and with none (env -i), by name through PATH and
              by path, it runs as without tfalloc (it had stopped at start:
              "ASan runtime does not come first"), without a profile; tfalloc
              run says so in one line for its command
"""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402


def by_pid(procs):
    m = {}
    for p in procs:
        m.setdefault(p["pid"], []).append(p)
    return m


def fork_case(ctx, mode):
    path = ctx.prog("tp_fork")
    argv = [path] + ([mode] if mode else [])
    plain = ctx.run_plain(argv)
    T.check(plain.returncode == 0, "tp_fork fails without the shim\n" + plain.describe())
    r, rep = ctx.run_and_report(argv, what="tp_fork")
    T.check_eq(r.out.count("\n"), 3, "lines printed by tp_fork (PARENT, CHILD, parent done)\n" + r.describe())
    parent_pid = int(T.parse_lines(r, "PARENT")[0][0])
    child_pid = int(T.parse_lines(r, "CHILD")[0][0])
    procs = rep["processes"]
    T.check(len(procs) == 2, "expected 2 processes (parent and child), got %d:\n%s" % (len(procs), T.summary(procs)))
    m = by_pid(procs)
    T.check(parent_pid in m and child_pid in m,
            "profiles of pids %s, expected the parent %d and the child %d" % (sorted(m), parent_pid, child_pid))
    parent, child = m[parent_pid][0], m[child_pid][0]
    T.check_eq(parent.get("ppid"), r.pid, "parent's ppid (tfalloc run)")
    T.check_eq(parent.get("forked"), False, "parent's forked")
    T.check_eq(child.get("ppid"), parent_pid, "child's ppid")
    T.check_eq(child.get("forked"), True, "child's forked")
    T.check_eq(child.get("exe"), os.path.realpath(path), "child's exe")
    for p in (parent, child):
        T.check_exited(p, 0)
        T.check_consistent(p, allocator=ctx.allocator)
    base = ctx.baseline("tp_fork")
    b = T.device(base)
    bl = T.leak_totals(base)
    d = T.device(parent)
    T.check_eq(d["bytes_in_use"] - b["bytes_in_use"], 6333, "parent's bytes in use minus the baseline's")
    T.check_eq(T.leak_totals(parent)[:2], (bl[0] + 6333, bl[1] + 3), "parent's leaks (bytes, blocks)")
    T.check_eq(d["num_allocs"] - b["num_allocs"], 3, "parent's num_allocs minus the baseline's")
    T.check_eq(d["num_frees"] - b["num_frees"], 0, "parent's num_frees minus the baseline's")
    c = T.device(child)
    T.check_eq(c["bytes_in_use"] - b["bytes_in_use"], 999,
               "child's bytes in use minus the baseline's (it inherited the start-up blocks, freed X)")
    T.check_eq(T.leak_totals(child)[:2], (bl[0] + 999, bl[1] + 3), "child's leaks (bytes, blocks)")


def case_fork_threads(ctx):
    path = ctx.prog("tp_fork")
    n = 10
    r, rep = ctx.run_and_report([path, "threads", str(n)], what="tp_fork threads", timeout=60)
    parent_pid = int(T.parse_lines(r, "PARENT")[0][0])
    children = [int(x[0]) for x in T.parse_lines(r, "CHILD")]
    T.check_eq(len(children), n, "children forked")
    procs = rep["processes"]
    T.check(len(procs) == n + 1, "expected %d processes, got %d:\n%s" % (n + 1, len(procs), T.summary(procs)))
    m = by_pid(procs)
    T.check(parent_pid in m, "no profile of the parent %d" % parent_pid)
    parent = m[parent_pid][0]
    T.check_exited(parent, 0)
    T.check_consistent(parent, multithreaded=True, allocator=ctx.allocator)
    base = ctx.baseline("tp_fork")
    for pid in children:
        T.check(pid in m, "no profile of child %d" % pid)
        c = m[pid][0]
        T.check_eq(c.get("ppid"), parent_pid, "child %d: ppid" % pid)
        T.check_eq(c.get("forked"), True, "child %d: forked" % pid)
        T.check_exited(c, 0)
        # forked from a multi-threaded process: its inherited peak has the slack
        T.check_consistent(c, multithreaded=True, allocator=ctx.allocator)
        # its 100-byte leak, plus what the parent's threads held at the fork
        delta = T.device(c)["bytes_in_use"] - T.device(base)["bytes_in_use"]
        T.check_range(delta, 100, 100 + 16384, "child %d: bytes in use minus the baseline's" % pid)


def case_exec(ctx):
    exe, target = ctx.prog("tp_exec"), ctx.prog("tp_leaks")
    argv = [exe, target, "from-exec"]
    plain = ctx.run_plain(argv)
    T.check(plain.returncode == 0, "tp_exec fails without the shim\n" + plain.describe())
    r, rep = ctx.run_and_report(argv, what="tp_exec")
    pid = int(T.parse_lines(r, "EXEC")[0][0])
    # The EXEC line carries the pid: the rest must be the same.
    r.stdout = r.stdout.replace(b"EXEC %d\n" % pid, b"EXEC %d\n" % plain.pid)
    T.same_output(plain, r, "tp_exec")
    procs = rep["processes"]
    mine = [p for p in procs if p["pid"] == pid]
    T.check(len(procs) == 2 and len(mine) == 2,
            "expected two profiles of pid %d (before and after exec), got:\n%s" % (pid, T.summary(procs)))
    before = [p for p in mine if p.get("exe") == os.path.realpath(exe)]
    after = [p for p in mine if p.get("exe") == os.path.realpath(target)]
    T.check(len(before) == 1 and len(after) == 1,
            "expected one profile of each image, got:\n" + T.summary(procs))
    before, after = before[0], after[0]
    T.check_eq(after.get("command"), target + " from-exec", "exec'd image: command")
    T.check_exited(after, 0)
    T.check_consistent(after, allocator=ctx.allocator)
    T.check_eq(after.get("ppid"), r.pid, "exec'd image: ppid")
    T.check_eq(after.get("forked"), False, "exec'd image: forked")
    T.check_ledger(after, ctx.baseline("tp_leaks"), T.parse_ledger(r))
    T.check(before.get("complete") is True, "tp_exec's profile is not complete")
    T.check_eq(before.get("end_reason"), "exec", "tp_exec's profile: end_reason")
    T.check_consistent(before, allocator=ctx.allocator)
    b = ctx.baseline("tp_exec")
    T.check_eq(T.device(before)["bytes_in_use"] - T.device(b)["bytes_in_use"], 500,
               "tp_exec's bytes in use at exec minus the baseline's")
    T.check_eq(T.leak_totals(before)[1] - T.leak_totals(b)[1], 1, "tp_exec's blocks live at exec")


def case_pipeline(ctx):
    leaks = ctx.prog("tp_leaks")
    argv = ["/bin/sh", "-c", '"$0" | /bin/cat', leaks]
    plain = ctx.run_plain(argv)
    T.check(plain.returncode == 0, "the pipeline fails without the shim\n" + plain.describe())
    r, rep = ctx.run_and_report(argv, what="sh pipeline")
    T.same_output(plain, r, "sh pipeline")
    procs = rep["processes"]
    exited = [p for p in procs if p.get("end_reason") == "exit"]
    sh = [p for p in exited if p.get("ppid") == r.pid]
    T.check(len(sh) == 1, "expected one profile of sh (child of tfalloc run %d):\n%s" % (r.pid, T.summary(procs)))
    sh = sh[0]
    T.check_eq(sh.get("exe"), os.path.realpath("/bin/sh"), "sh's exe")
    T.check_exited(sh, 0)
    T.check_consistent(sh, require_allocs=False, allocator=ctx.allocator)
    tl = [p for p in exited if p.get("exe") == os.path.realpath(leaks)]
    cat = [p for p in exited if p.get("exe") == os.path.realpath("/bin/cat")]
    T.check(len(tl) == 1 and len(cat) == 1,
            "expected one exited profile each of tp_leaks and cat:\n" + T.summary(procs))
    T.check_eq(sh.get("forked"), False, "sh's forked")
    for p in (tl[0], cat[0]):
        T.check_eq(p.get("ppid"), sh["pid"], "%s: ppid (sh)" % T.proc_name(p))
        T.check_eq(p.get("forked"), False, "%s: forked (a new image after exec)" % T.proc_name(p))
        T.check_exited(p, 0)
        T.check_consistent(p, allocator=ctx.allocator)
    T.check_ledger(tl[0], ctx.baseline("tp_leaks"), T.parse_ledger(r))
    T.check(len(exited) == 3, "unexpected exited profiles:\n" + T.summary(procs))
    for p in procs:
        if p.get("end_reason") == "exit":
            continue
        T.check(p.get("end_reason") == "exec" and p.get("forked") is True and p.get("ppid") == sh["pid"]
                and p["pid"] in (tl[0]["pid"], cat[0]["pid"]),
                "unexpected profile (only sh's forked images may end by exec):\n" + T.summary([p]))
        T.check(p.get("complete") is True, "incomplete profile:\n" + T.summary([p]))


def case_signal(ctx):
    """tfalloc run's status for a program killed by a signal, and LD_PRELOAD
    alone does not hide the signal."""
    path = ctx.prog("tp_signal")
    plain = ctx.run_plain([path, "15"])
    T.check_eq(plain.returncode, -15, "tp_signal 15 without the shim: status")
    r = ctx.run_tool([path, "15"])
    T.check_eq(r.returncode, 143, "tfalloc run of a program killed by SIGTERM: status\n" + r.describe())
    T.check(r.out.startswith("SIGNAL "), "tp_signal's output: " + r.out)
    r = ctx.run_preload([path, "15"])
    T.check_eq(r.returncode, -15, "a program killed by SIGTERM with LD_PRELOAD=libtfalloc.so: status\n"
               + r.describe())
    r = ctx.run_tool([path, "9"])
    T.check_eq(r.returncode, 137, "tfalloc run of a program killed by SIGKILL: status\n" + r.describe())


def case_signal_profile(ctx):
    """A process killed by a fatal signal still leaves its profile
    (DESIGN.md: "Exit: ... also when the program ... dies on a fatal signal")."""
    path = ctx.prog("tp_signal")
    for via, status in (("tool", 143), ("preload", -15)):
        r, rep = ctx.run_and_report([path, "15"], via=via, what="tp_signal (%s)" % via, expect_status=status)
        proc = T.only_process(rep, "tp_signal")
        T.check_eq(r.out, "SIGNAL %d\n" % proc["pid"], "tp_signal's output")
        T.check(proc.get("complete") is True, "profile of a process killed by SIGTERM not complete")
        T.check_eq(proc.get("end_reason"), "signal", "end_reason")
        T.check_eq(proc.get("exit_code"), 15, "exit_code (the signal)")
        T.check_consistent(proc, allocator=ctx.allocator)
        base = ctx.baseline("tp_signal", via=via)
        T.check_eq(T.device(proc)["bytes_in_use"] - T.device(base)["bytes_in_use"], 4444,
                   "bytes in use at the signal minus the baseline's")
        T.check_eq(T.leak_totals(proc)[1] - T.leak_totals(base)[1], 2, "blocks live at the signal")
        T.check_eq(T.device(proc)["num_allocs"] - T.device(base)["num_allocs"], 3, "num_allocs")


def signal_disposition_case(ctx, how):
    """The program sets the fatal signal's disposition itself (SIG_DFL again,
    or a handler that re-raises, or a one-shot handler): same output and death
    as without the shim, and the profile still says how it ended."""
    path = ctx.prog("tp_signal")
    argv = [path, "15", how]
    plain = ctx.run_plain(argv)
    T.check_eq(plain.returncode, -15, "tp_signal 15 %s without the shim: status\n%s" % (how, plain.describe()))
    for via, status in (("tool", 143), ("preload", -15)):
        r, rep = ctx.run_and_report(argv, via=via, what="tp_signal %s (%s)" % (how, via),
                                    expect_status=status)
        proc = T.only_process(rep, "tp_signal")
        T.check_eq(r.out.replace(str(proc["pid"]), "PID"), plain.out.replace(str(plain.pid), "PID"),
                   "tp_signal %s: output" % how)
        T.check_eq((proc.get("complete"), proc.get("end_reason"), proc.get("exit_code")),
                   (True, "signal", 15), "tp_signal %s (%s): complete, end_reason, exit_code" % (how, via))
        T.check_ge(T.device(proc)["bytes_in_use"], 4444, "bytes in use at the signal")


VFORK_SIGNAL = """
import os, signal, subprocess, sys
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
# python's subprocess uses vfork, and the vfork child sets every handler back
# to SIG_DFL before exec: in memory it shares with this process.
for _ in range(3):
    subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getppid(), signal.SIGUSR1)"])
print("handled", len(got))
"""


def case_signal_vfork(ctx):
    """A vfork child that resets the handlers (python's subprocess) must not
    change the parent's: its SIGUSR1 handler still runs afterwards."""
    argv = ["/usr/bin/python3", "-c", VFORK_SIGNAL]
    plain = ctx.run_plain(argv)
    T.check_eq((plain.returncode, plain.out), (0, "handled 3\n"), "without the shim")
    r, rep = ctx.run_and_report(argv, what="python3 vfork")
    T.same_output(plain, r, "python3 vfork")


def case_static(ctx):
    path = ctx.prog("tp_static")
    plain = ctx.run_plain([path])
    T.check_eq(plain.returncode, 3, "tp_static without tfalloc: status")
    r = ctx.run_tool([path])
    T.check_eq(r.returncode, 3, "tfalloc run of a static program: exit status\n" + r.describe())
    T.check_eq(r.out, plain.out, "tfalloc run of a static program: stdout")
    lines = r.err_lines()
    T.check(len(lines) == 1 and "static" in lines[0].lower(),
            "expected one line on stderr saying the program is statically linked, got:\n" + r.err)
    files = os.listdir(r.outdir) if os.path.isdir(r.outdir) else []
    T.check_eq(files, [], "profile files written for a static program")


def case_own_malloc(ctx):
    path = ctx.prog("tp_own_malloc")
    plain = ctx.run_plain([path])
    T.check_eq((plain.returncode, plain.out), (0, "OWN hello\n"), "tp_own_malloc without tfalloc")
    r, rep = ctx.run_and_report([path], what="tp_own_malloc")
    T.check_eq(r.out, plain.out, "tp_own_malloc: stdout")
    lines = r.err_lines()
    T.check(len(lines) == 1 and "malloc of %s comes before tfalloc's" % path in lines[0]
            and "not seen" in lines[0], "expected one line naming the program's malloc, got:\n" + r.err)
    T.only_process(rep, "tp_own_malloc")
    # Programs whose malloc is tfalloc's get no such line; python3 takes malloc's address, so its
    # symbol table holds malloc as its own PLT entry (undefined), which dlsym finds first.
    for argv in ([ctx.prog("tp_empty")], ["/usr/bin/python3", "-c", "pass"]):
        r = ctx.run_preload(argv, quiet=True)
        T.check_eq(r.err, "", "%s: stderr" % argv[0])


def case_deepbind(ctx, mode):
    path = ctx.prog("tp_deepbind")
    env = None
    if mode == "bare":
        # The library with another ELF class, in a directory searched before the program's RUNPATH:
        # glibc's search passes over it, and so must tfalloc's for the caller.
        decoy = ctx.mkdtemp("decoy")
        with open(os.path.join(os.path.dirname(path), "libtp_deep_now.so"), "rb") as f:
            image = bytearray(f.read())
        image[4] = 1  # EI_CLASS: ELFCLASS32
        with open(os.path.join(decoy, "libtp_deep_now.so"), "wb") as f:
            f.write(image)
        env = {"LD_LIBRARY_PATH": decoy}
    plain = ctx.run_plain([path, mode], env=env)
    T.check_eq((plain.returncode, plain.out), (0, "DEEP %s ok\n" % mode), "tp_deepbind %s without tfalloc" % mode)
    # With "double", three double frees at the end, of blocks in and past glibc's thread cache,
    # and of one merged with the free blocks on both sides (plain glibc aborts).
    r, rep = ctx.run_and_report([path, mode, "double"], what="tp_deepbind", env=env)
    T.check_eq(r.out, plain.out, "tp_deepbind: stdout")
    # The blocks the libraries' constructors made are glibc's: freed and resized through tfalloc,
    # they go back to glibc, and one line says so; then the double free's.
    lines = r.err_lines()
    T.check(len(lines) == 4 and "a block glibc's malloc made out of tfalloc's sight" in lines[0]
            and "given back to glibc" in lines[0] and all("double free of" in x for x in lines[1:]),
            "tp_deepbind: expected four lines on stderr, got:\n" + r.err)
    p = T.only_process(rep, "tp_deepbind")
    T.check_exited(p, 0)
    T.check_consistent(p, allocator=ctx.allocator, allow_errors=True)
    T.check_eq(T.error_totals(p), {"double_free": 3, "invalid_free": 0, "mismatched_free": 0, "not_recorded": 0},
               "tp_deepbind: error_totals (its three double frees)")
    stacks = p.get("leaks", [])
    for size, lib in ((4242, "libtp_deep_now.so"), (4343, "libtp_deep_lazy.so")):
        found = [lk for lk in stacks if lk["bytes"] == size and lk["blocks"] == 1]
        # Lost (a stale word may point into it: possibly lost).
        T.check(len(found) == 1 and found[0]["kind"] in ("definite", "possible"),
                "the %d bytes %s loses: expected one lost block, got %s" % (size, lib, json.dumps(found)[:400]))
        fr = found[0].get("stack") or []
        T.check(any(f.get("function") == "deep_leak" and (f.get("module") or "").endswith("/" + lib) for f in fr),
                "the %d-byte leak's stack has no deep_leak in %s: %s" % (size, lib, json.dumps(fr)[:600]))


def case_fork_held(ctx):
    path = ctx.prog("tp_fork")
    r, rep = ctx.run_and_report([path, "held"], what="tp_fork held")
    parent_pid = int(T.parse_lines(r, "PARENT")[0][0])
    child_pid = int(T.parse_lines(r, "CHILD")[0][0])
    grand_pid = int(T.parse_lines(r, "GRANDCHILD")[0][0])
    m = by_pid(rep["processes"])
    T.check(parent_pid in m and child_pid in m and grand_pid in m, "profiles of pids %s, expected %d, %d and %d"
            % (sorted(m), parent_pid, child_pid, grand_pid))
    parent, child, grand = m[parent_pid][0], m[child_pid][0], m[grand_pid][0]
    for p in (parent, child, grand):
        T.check_exited(p, 0)
        T.check_consistent(p, multithreaded=True, allocator=ctx.allocator)
    T.check_eq([lk for lk in parent["leaks"] if lk["bytes"] == 4321], [], "the parent's leaks of 4321 bytes")
    for size, how in ((4321, "on its stack"), (2032, "under its first key"), (1234, "under its 40th key")):
        T.check_eq([lk for lk in parent["leaks"] if lk["bytes"] == size], [],
                   "the parent's leaks of %d bytes" % size)
        for who, proc in (("child", child), ("grandchild", grand)):
            held = [lk for lk in proc["leaks"] if lk["bytes"] == size]
            T.check(len(held) == 1 and held[0]["kind"] == "reachable",
                    "the %s's block of %d bytes, which the parent's thread held %s at the fork: expected one "
                    "reachable block, got %s" % (who, size, how, json.dumps(held)[:400]))


def case_orphans(ctx):
    path = ctx.prog("tp_fork")
    out = ctx.mkdtemp("orphans")
    r = ctx.run_tool([path, "orphan", "300"], outdir=out, quiet=False)
    T.check_eq(r.returncode, 0, "tp_fork orphan 300\n" + r.describe())
    profiles = [f for f in os.listdir(out) if f.endswith(".prof")]
    T.check_eq(len(profiles), 3, "profiles when tfalloc run returned (the command, its child, the grandchild): %s"
               % profiles)
    T.check("tfalloc: 3 profile(s) in %s;" % out in r.err, "the closing line's count:\n" + r.err)
    T.check("still run" not in r.err, "a line of processes still running:\n" + r.err)

    out = ctx.mkdtemp("orphans_hold")
    t0 = time.monotonic()
    r = ctx.run_tool([path, "orphan", "300", "30"], outdir=out, quiet=False)
    took = time.monotonic() - t0
    T.check_eq(r.returncode, 0, "tp_fork orphan 300 30\n" + r.describe())
    T.check(took < 10, "tfalloc run took %.1f s: it waited for the process that sleeps 30 s" % took)
    T.check(re.search(r"tfalloc: processes the command started still run \(pid \d+\): each writes its profile "
                      r"there when it ends\n", r.err), "the line of the process still running, by pid:\n" + r.err)
    T.check("tfalloc: 3 profile(s) in %s;" % out in r.err, "the closing line's count:\n" + r.err)
    pid = int(re.search(r"still run \(pid (\d+)\)", r.err).group(1))
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass

    for args in ([], ["--leak-gate", "--leak-kinds", "all"]):
        r = ctx.run_tool([path, "zombies", "20"], tool_args=args)
        T.check_eq(r.returncode, 0, "tp_fork zombies 20 %s\n%s" % (args, r.describe()))
        T.check_eq(T.parse_lines(r, "ZOMBIES")[0][0], "0",
                   "orphans that ended while the command ran, left zombies of tfalloc run %s" % args)


def case_log(ctx):
    # A program that reads its children's stderr (cmake's configure, `$(cmd 2>&1)`) reads theirs
    # only: the summary lines come on tfalloc run's stderr, through its FIFO (TFALLOC_LOG).
    script = 'x=$(/bin/true 2>&1); y=$(%s 2>&1 >/dev/null); printf "[%%s][%%s]\\n" "$x" "$y"' % ctx.prog("tp_leaks")
    plain = ctx.run_plain(["/bin/sh", "-c", script])
    T.check_eq(plain.returncode, 0, "plain run\n" + plain.describe())
    r = ctx.run_tool(["/bin/sh", "-c", script], quiet=False)
    T.check_eq((r.returncode, r.out), (0, plain.out), "what the script read of its children's stderr")
    for comm in ("true", "tp_leaks", "sh"):
        T.check(re.search(r"^tfalloc\[\d+\]: %s: peak .*; profile " % comm, r.err, re.M),
                "%s's summary on tfalloc run's stderr:\n%s" % (comm, r.err))
    T.check(re.match(r"tfalloc: \d+ profile\(s\) in ", r.err.rstrip("\n").split("\n")[-1]),
            "the closing line after the summaries:\n" + r.err)
    T.check_eq([f for f in os.listdir(ctx.scratch) if f.startswith("tfalloc-run.")], [],
               "tfalloc run's FIFO and its directory, left in TMPDIR")
    # No TMPDIR to make it in (a read-only /tmp): the FIFO goes in the output directory, and leaves it.
    out = ctx.mkdtemp("out_fifo")
    r = ctx.run_tool(["/bin/sh", "-c", script], quiet=False, outdir=out, env={"TMPDIR": "/nonexistent/tmp"})
    T.check_eq((r.returncode, r.out), (0, plain.out), "what the script read, without a TMPDIR for the FIFO")
    T.check(re.search(r"^tfalloc\[\d+\]: tp_leaks: peak", r.err, re.M), "the summary, without a TMPDIR:\n" + r.err)
    T.check_eq([f for f in os.listdir(out) if not f.endswith(".prof")], [], "what is left in the output directory")

    # A tfalloc run inside a tfalloc run: the inner one's processes' lines are its own.
    inner_out = ctx.mkdtemp("inner")
    inner_err = os.path.join(inner_out, "inner.err")
    r = ctx.run_tool(["/bin/sh", "-c", "%s run --output %s -- /bin/true 2>%s" % (ctx.tool, inner_out, inner_err)],
                     quiet=False)
    T.check_eq(r.returncode, 0, "tfalloc run inside tfalloc run\n" + r.describe())
    inner = open(inner_err).read()
    T.check(re.search(r"^tfalloc\[\d+\]: true: peak[^\n]*\ntfalloc: \d+ profile\(s\) in ", inner, re.M),
            "the inner run's stderr: the summary, then its closing line:\n" + inner)
    T.check(not re.search(r"^tfalloc\[\d+\]: true: peak", r.err, re.M),
            "the inner run's summary on the outer run's stderr:\n" + r.err)
    # A process that outlives the run writes its line on its own stderr (here: the same pipe).
    late = "(sleep 2.5; exec /bin/true) & echo started"  # past tfalloc run's 1 s wait for orphans, with room
    r = ctx.run_tool(["/bin/sh", "-c", late], quiet=False)
    T.check_eq((r.returncode, r.out), (0, "started\n"), "the late process's run\n" + r.describe())
    lines = r.err_lines()
    closing = [i for i, l in enumerate(lines) if l.startswith("tfalloc: ") and "profile(s) in" in l]
    true_line = [i for i, l in enumerate(lines) if re.match(r"tfalloc\[\d+\]: true: peak", l)]
    T.check(len(closing) == 1 and len(true_line) == 1 and true_line[0] > closing[0],
            "the late process's summary, after the closing line:\n" + r.err)
    T.check_eq([f for f in os.listdir(ctx.scratch) if f.startswith("tfalloc-run.")], [],
               "a file the late process made where the FIFO had been")

    # TFALLOC_LOG of one's own: a file (relative: from the working directory at start, made 0600), under
    # tfalloc run too; one that cannot be opened leaves the line on stderr.
    cwd = ctx.mkdtemp("cwd")
    os.mkdir(os.path.join(cwd, "logs"))
    argv = ["/usr/bin/python3", "-c", "import os; os.chdir('/')"]
    plain = ctx.run_plain(argv)
    r = ctx.run_preload(argv, quiet=False, env={"TFALLOC_LOG": "logs/tfa.log"}, cwd=cwd)
    T.same_output(plain, r, "TFALLOC_LOG=logs/tfa.log")
    path = os.path.join(cwd, "logs", "tfa.log")
    T.check(os.path.exists(path), "no logs/tfa.log from the working directory at start: %s" % os.listdir(cwd))
    T.check_eq(oct(os.stat(path).st_mode & 0o777), oct(0o600), "the log file's mode")
    text = open(path).read()
    T.check(re.search(r"^tfalloc\[\d+\]: python3: peak", text, re.M), "the summary in the log file:\n" + text)
    T.check("tfalloc[" not in r.err, "lines on stderr with TFALLOC_LOG:\n" + r.err)
    r = ctx.run_tool(["/bin/true"], quiet=False, env={"TFALLOC_LOG": path})
    T.check(re.search(r"^tfalloc\[\d+\]: true: peak", open(path).read(), re.M) and "tfalloc[" not in r.err,
            "the user's TFALLOC_LOG under tfalloc run:\n" + r.err)
    r = ctx.run_preload(["/bin/true"], quiet=False, env={"TFALLOC_LOG": "/nonexistent/dir/tfa.log"})
    T.check(re.search(r"^tfalloc\[\d+\]: true: peak", r.err, re.M),
            "a TFALLOC_LOG that cannot be opened: the line on stderr\n" + r.err)


def case_child_env(ctx):
    path = ctx.prog("tp_env")
    plain = ctx.run_plain([path, "run"])
    T.check_eq(plain.returncode, 0, "tp_env run without the shim\n" + plain.describe())
    r, rep = ctx.run_and_report([path, "run"], what="tp_env run", quiet=False)
    T.check_eq(r.out, plain.out, "the output: each child's environment, as its parent gave it")
    leaked = sorted(lk["bytes"] for p in rep["processes"] for lk in p.get("leaks", []) if 1000 < lk["bytes"] <= 1008)
    T.check_eq(leaked, [1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008],
               "the children's leaks in their profiles (each child K leaks 1000 + K bytes)\n" + T.summary(rep["processes"]))
    summaries = re.findall(r"tfalloc\[\d+\]: tp_env: peak (\d+) B in use", r.err)
    T.check("1002" not in summaries and "1005" in summaries,
            "summary lines: none from the child that set TFALLOC_QUIET=1 (1002 B), one from the "
            "grandchild (1005 B): %s\n%s" % (summaries, r.err))

    script = ("import os, subprocess, sys\n"
              "r = subprocess.run([sys.executable, '-c', 'import os; x = bytearray(3333); "
              "print(sorted(os.environ.items()))'], env={'FOO': 'bar', 'PATH': '/usr/bin'},\n"
              "                   capture_output=True, text=True)\n"
              "print(r.stdout, end='')\n")
    argv = ["/usr/bin/python3", "-c", script]
    plain = ctx.run_plain(argv)
    r, rep = ctx.run_and_report(argv, what="python3 subprocess with env={...}")
    T.check_eq(r.out, plain.out, "the child's environment, as python3 gave it")
    T.check_eq(len(rep["processes"]), 2, "profiles: python3 and its child\n" + T.summary(rep["processes"]))


def case_valgrind(ctx):
    argv = ["valgrind", "-q", "--leak-check=full", "--error-exitcode=9", ctx.prog("tp_empty")]
    plain = ctx.run_plain(argv, timeout=300)
    T.check_eq(plain.returncode, 0, "tp_empty under valgrind without tfalloc\n" + plain.describe())
    r = ctx.run_tool(argv, timeout=300)
    T.check_eq(r.returncode, 0, "tp_empty under valgrind under tfalloc run: valgrind's status\n" + r.describe())
    T.check_eq(r.err, plain.err, "valgrind's report")
    exes = sorted(os.path.basename(p["exe"]) for p in ctx.report(r.outdir, "valgrind")["processes"])
    T.check("tp_empty" not in exes and exes, "profiles of valgrind's launcher, none of its program: %s" % exes)
    # Asked for, the program keeps the shim (valgrind's report is then about both).
    argv = ["valgrind", "-q", "--soname-synonyms=somalloc=NONE", ctx.prog("tp_empty")]
    r = ctx.run_tool(argv, env={"TFALLOC_UNDER_VALGRIND": "1"}, timeout=300)
    exes = sorted(os.path.basename(p["exe"]) for p in ctx.report(r.outdir, "valgrind")["processes"])
    T.check("tp_empty" in exes, "with TFALLOC_UNDER_VALGRIND=1, a profile of valgrind's program: %s" % exes)


def case_fork_kill(ctx):
    argv = [ctx.prog("tp_fork"), "kill", "20"]
    plain = ctx.run_plain(argv)
    T.check_eq(plain.out, "killed 20 of 20\n", "tp_fork kill 20 without tfalloc\n" + plain.describe())
    r, rep = ctx.run_and_report(argv, what="tp_fork kill 20")
    T.check_eq(r.out, plain.out, "tp_fork kill 20 under tfalloc: children ended by SIGTERM")
    killed = [p for p in rep["processes"] if p.get("end_reason") == "signal"]
    T.check_eq(len(killed), 20, "profiles of children ended by a signal\n" + T.summary(rep["processes"]))
    T.check(all(p.get("exit_code") == 15 for p in killed), "their signal: %s" % [p.get("exit_code") for p in killed])


def case_sanitizer(ctx):
    path = ctx.prog("tp_asan")
    plain = ctx.run_plain([path, "1"])
    T.check_eq((plain.returncode, plain.out), (0, "asan 1\n"), "tp_asan without tfalloc\n" + plain.describe())
    r = ctx.run_tool([path, "1"], quiet=False)
    T.check_eq((r.returncode, r.out), (0, "asan 1\n"), "tp_asan under tfalloc run\n" + r.describe())
    T.check("tfalloc: %s needs its sanitizer's runtime" % path in r.err, "the line for the command\n" + r.err)
    T.check_eq(os.listdir(r.outdir), [], "profiles of tp_asan")
    script = ('"$1" 2; env -i "$1" 3; PATH="$(dirname "$1"):$PATH" tp_asan 4')
    r = ctx.run_tool(["/bin/sh", "-c", script, "sh", path])
    T.check_eq((r.returncode, r.out), (0, "asan 2\nasan 3\nasan 4\n"),
               "tp_asan started by a shell under tfalloc run\n" + r.describe())
    exes = sorted(os.path.basename(p["exe"]) for p in ctx.report(r.outdir, "sanitizer")["processes"])
    T.check("tp_asan" not in exes, "profiles: none of tp_asan: %s" % exes)


CASES = {
    "fork": lambda ctx: fork_case(ctx, None),
    "fork_exit_": lambda ctx: fork_case(ctx, "_exit"),
    "fork_threads": case_fork_threads,
    "fork_held": case_fork_held,
    "orphans": case_orphans,
    "log": case_log,
    "child_env": case_child_env,
    "valgrind": case_valgrind,
    "sanitizer": case_sanitizer,
    "fork_kill": case_fork_kill,
    "exec": case_exec,
    "pipeline": case_pipeline,
    "signal": case_signal,
    "signal_profile": case_signal_profile,
    "signal_dfl": lambda ctx: signal_disposition_case(ctx, "dfl"),
    "signal_handler": lambda ctx: signal_disposition_case(ctx, "handler"),
    "signal_sysv": lambda ctx: signal_disposition_case(ctx, "sysv"),
    "signal_query": lambda ctx: signal_disposition_case(ctx, "query"),
    "signal_vfork": case_signal_vfork,
    "static": case_static,
    "own_malloc": case_own_malloc,
    "deepbind_path": lambda ctx: case_deepbind(ctx, "path"),
    "deepbind_bare": lambda ctx: case_deepbind(ctx, "bare"),
    "deepbind_origin": lambda ctx: case_deepbind(ctx, "origin"),
}

if __name__ == "__main__":
    T.main(CASES)
