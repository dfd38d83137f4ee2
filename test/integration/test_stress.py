# SPDX-License-Identifier: MIT
"""Threads and processes under load (CTest labels integration and stress).

  threads32     tp_churn with 32 threads for 3 s: malloc, calloc, realloc,
                posix_memalign and free on random sizes, most blocks freed
                (a quarter of them first reallocated) by another thread than
                the one that made them: no crash, no hang, and the profile's
                allocations, frees, reallocs, bytes in use, total bytes and
                leaks minus the baseline's (the same 32 threads doing nothing)
                exactly the program's own tallies
  thread_churn  tp_thread_churn: 100 rounds of 16 joinable and 16 detached
                threads (3,200 in all), each allocating, freeing a block a
                thread of the round before left live at its exit, and leaving
                one of its own: the ledger exact (no record lost across thread
                exits), and the shim's memory (shim_overhead_bytes) the same
                after 100 rounds as after 25 within 64 KiB: thread records are
                recycled.  On the program's stacks, and again on glibc's
                (its cache of stacks and their TLS vectors reused)
  sigalloc      tp_sigalloc: a 10 kHz timer whose handler mallocs and frees
                (and leaves blocks for the main loop to free) while the main
                thread loops malloc/realloc/free, for SIGALRM (a signal
                tfalloc catches and passes on) and a real-time signal (one it
                does not catch), with one thread and with a second one
                allocating: no deadlock, no error, the ledger exact.  Without
                tfalloc glibc's malloc itself corrupts its heap or deadlocks
                here (malloc is not async-signal-safe): there is no plain run
                to compare with
  sigaction_swap  tp_sigalloc swap: one thread installs two handlers of
                SIGUSR1 (held by tfalloc as a fatal signal) or of a real-time
                signal in turn without pause while another sends it: every
                delivery runs one of the program's handlers, as without
                tfalloc; none ends the process or writes its final profile
  fork_storm    tp_fork storm 40: three threads malloc/realloc/free without
                pause while the main thread forks 40 children; each child
                allocates and frees 20,000 blocks on two threads and every 4th
                forks a grandchild that does the same: no child hangs, every
                process (1 + 40 + 10) leaves a complete profile of its own
                (forked, its parent's pid, exit status 0 through exit or _exit,
                consistent figures, its 100-byte leak)
  spawn         tp_spawn run 3: from a multi-threaded process, children by
                posix_spawn, vfork + execv and system() (27 in all): the same
                stdout and exit status as without tfalloc, and each child's
                profile (its exit status 3, its K leaked blocks of known size)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402


def baseline_of(ctx, argv, what):
    _, rep = ctx.run_and_report(argv, what=what + " baseline")
    p = T.only_process(rep, what + " baseline")
    T.check_exited(p, 0)
    T.check_consistent(p, require_allocs=False, multithreaded=True)
    return p


def case_threads32(ctx):
    path = ctx.prog("tp_churn")
    r, rep = ctx.run_and_report([path, "3.0", "32"], what="tp_churn 32 threads", timeout=120)
    T.check("churn done" in r.out, "tp_churn did not finish\n" + r.describe())
    proc = T.only_process(rep, "tp_churn")
    T.check_exited(proc, 0)
    T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator)
    base = baseline_of(ctx, [path, "baseline", "32"], "tp_churn")
    T.check_ledger(proc, base, T.parse_ledger(r))
    ops = [l for l in r.err_lines() if l.startswith("churn:")]
    print("%s; %d allocations in the profile" % (ops[0] if ops else "?", T.device(proc)["num_allocs"]))


def churn_run(ctx, rounds, cached=False):
    path = ctx.prog("tp_thread_churn")
    mode = ["cached"] if cached else []
    r, rep = ctx.run_and_report([path] + mode + [str(rounds)], what="tp_thread_churn %d" % rounds, timeout=120)
    T.check("thread churn done" in r.out, "tp_thread_churn did not finish\n" + r.describe())
    proc = T.only_process(rep, "tp_thread_churn")
    T.check_exited(proc, 0)
    T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator)
    base = baseline_of(ctx, [path, "baseline"] + mode + [str(rounds)], "tp_thread_churn")
    T.check_ledger(proc, base, T.parse_ledger(r))
    return proc


def case_thread_churn(ctx):
    small = churn_run(ctx, 25)
    big = churn_run(ctx, 100)
    a, b = T.device(small)["shim_overhead_bytes"], T.device(big)["shim_overhead_bytes"]
    T.check(b - a <= 64 * 1024,
            "the shim's own memory grew with the threads made: %d bytes after 800 threads, %d after 3200"
            % (a, b))
    churn_run(ctx, 100, cached=True)
    print("3200 threads twice; shim_overhead_bytes %d after 800 threads, %d after 3200" % (a, b))


def case_sigalloc(ctx, variants=([], ["threads"])):
    path = ctx.prog("tp_sigalloc")
    for sig in ("alrm", "rt"):
        for threads in variants:
            what = "tp_sigalloc %s %s" % (sig, " ".join(threads))
            r, rep = ctx.run_and_report([path, "1.5", sig] + threads, what=what, timeout=60)
            T.check("sigalloc done" in r.out, what + " did not finish\n" + r.describe())
            proc = T.only_process(rep, what)
            T.check_exited(proc, 0)
            T.check_consistent(proc, multithreaded=bool(threads), allocator=ctx.allocator)
            base = baseline_of(ctx, [path, "baseline"] + threads, "tp_sigalloc")
            T.check_ledger(proc, base, T.parse_ledger(r))
            sigs = [l for l in r.err_lines() if l.startswith("signals ")]
            T.check(sigs and int(sigs[0].split()[1]) > 100, what + ": too few signals\n" + r.describe())
            print("%s: %s, %d allocations" % (what, sigs[0], T.device(proc)["num_allocs"]))


def case_sigaction_swap(ctx):
    path = ctx.prog("tp_sigalloc")
    for sig in ("usr1", "rt"):
        argv = [path, "swap", "1.0", sig]
        plain = ctx.run_plain(argv, timeout=60)
        T.check(plain.returncode == 0, "tp_sigalloc swap fails without the shim\n" + plain.describe())
        r, rep = ctx.run_and_report(argv, what="tp_sigalloc swap " + sig, timeout=60)
        T.check("swap done" in r.out, "tp_sigalloc swap did not finish\n" + r.describe())
        proc = T.only_process(rep, "tp_sigalloc swap")
        T.check_exited(proc, 0)
        T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator, require_allocs=False)
        print("swap %s: %s" % (sig, ", ".join(l for l in r.err_lines() if l.startswith(("swapped", "handled")))))


def by_pid(procs):
    m = {}
    for p in procs:
        m.setdefault(p["pid"], []).append(p)
    return m


def case_fork_storm(ctx):
    path = ctx.prog("tp_fork")
    n = 40
    r, rep = ctx.run_and_report([path, "storm", str(n)], what="tp_fork storm", timeout=150)
    parent_pid = int(T.parse_lines(r, "PARENT")[0][0])
    children = [int(x[0]) for x in T.parse_lines(r, "CHILD")]
    grandchildren = [int(x[0]) for x in T.parse_lines(r, "GRANDCHILD")]
    T.check_eq(len(children), n, "children forked")
    T.check_eq(len(grandchildren), n // 4, "grandchildren forked")
    procs = rep["processes"]
    T.check_eq(len(procs), 1 + n + n // 4, "profiles (parent, children, grandchildren)")
    m = by_pid(procs)
    T.check(parent_pid in m, "no profile of the parent %d" % parent_pid)
    T.check_exited(m[parent_pid][0], 0)
    T.check_consistent(m[parent_pid][0], multithreaded=True, allocator=ctx.allocator)
    base = T.device(ctx.baseline("tp_fork"))["bytes_in_use"]
    for pid in children + grandchildren:
        T.check(pid in m and len(m[pid]) == 1, "child %d: %d profiles" % (pid, len(m.get(pid, []))))
        c = m[pid][0]
        T.check_eq(c.get("forked"), True, "process %d: forked" % pid)
        want_ppid = parent_pid if pid in children else None
        if want_ppid is not None:
            T.check_eq(c.get("ppid"), parent_pid, "child %d: ppid" % pid)
        else:
            T.check(c.get("ppid") in children, "grandchild %d: ppid %s is none of the children" % (pid, c.get("ppid")))
        T.check_exited(c, 0)
        T.check_consistent(c, multithreaded=True, allocator=ctx.allocator)
        d = T.device(c)
        T.check(d["num_allocs"] >= 20000, "process %d: %d allocations, expected 20,000 and more" % (pid, d["num_allocs"]))
        # its 100-byte leak, plus what the parent's threads held at the fork
        T.check_ge(d["bytes_in_use"] - base, 100, "process %d: bytes in use minus the baseline's" % pid)
    print("%d forks (%d children, %d grandchildren), %d profiles" % (n + n // 4, n, n // 4, len(procs)))


def case_spawn(ctx):
    path = ctx.prog("tp_spawn")
    rounds = 3
    plain = ctx.run_plain([path, "run", str(rounds)])
    T.check(plain.returncode == 0, "tp_spawn fails without the shim\n" + plain.describe())
    r, rep = ctx.run_and_report([path, "run", str(rounds)], what="tp_spawn", timeout=120)
    T.same_output(plain, r, "tp_spawn")
    child_pids = [int(l.split()[1]) for l in r.err_lines() if l.startswith("CHILDPID ")]
    T.check_eq(len(child_pids), rounds * 9, "children that ran")
    procs = rep["processes"]
    exe = os.path.realpath(path)
    mine = [p for p in procs if p.get("exe") == exe]
    kids = [p for p in mine if (p.get("command") or "").split()[1:2] == ["child"]]
    T.check_eq(len(kids), rounds * 9, "profiles of the children:\n" + T.summary(procs))
    T.check_eq(sorted(p["pid"] for p in kids), sorted(child_pids), "pids of the children's profiles")
    parent = [p for p in mine if (p.get("command") or "").split()[1:2] == ["run"]]
    T.check_eq(len(parent), 1, "profiles of the parent")
    T.check_exited(parent[0], 0)
    T.check_consistent(parent[0], multithreaded=True, allocator=ctx.allocator)
    base = ctx.baseline("tp_spawn")
    b, bl = T.device(base), T.leak_totals(base)
    for p in kids:
        k = int(p["command"].split()[2])
        T.check_exited(p, 3)
        T.check_eq(p.get("forked"), False, "%s: forked (a new image)" % T.proc_name(p))
        T.check_consistent(p, allocator=ctx.allocator)
        want = sum(1000 + i for i in range(k))
        T.check_eq(T.device(p)["bytes_in_use"] - b["bytes_in_use"], want, "%s: bytes in use minus the baseline's" % T.proc_name(p))
        T.check_eq(T.leak_totals(p)[1] - bl[1], k, "%s: leaked blocks minus the baseline's" % T.proc_name(p))
        T.check_eq(T.device(p)["num_allocs"] - b["num_allocs"], 200 + k, "%s: num_allocs minus the baseline's" % T.proc_name(p))
    # system()'s shells: complete profiles (ended by exec into the child, or by exit)
    others = [p for p in procs if p.get("exe") != exe]
    for p in others:
        T.check(p.get("complete") is True, "%s: profile not complete" % T.proc_name(p))
    print("%d children (posix_spawn, vfork+exec, system), %d profiles" % (len(kids), len(procs)))


CASES = {
    "sigaction_swap": case_sigaction_swap,
    "fork_storm": case_fork_storm,
    "spawn": case_spawn,
    "threads32": case_threads32,
    "thread_churn": case_thread_churn,
    "sigalloc": case_sigalloc,
}

if __name__ == "__main__":
    T.main(CASES)
