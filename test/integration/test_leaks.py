# SPDX-License-Identifier: MIT
"""Leak classes: what the profile written at exit says of each leaked block
(definite, indirect, possible, reachable), against what the test program
knows it made and against valgrind's memcheck as the oracle.

tp_leak_classes makes leaks of every class (see its header) and prints
"CLASSES {kind: [bytes, blocks]}"; the same binary run with "baseline" makes
none, so the C runtime's own blocks cancel out.

Cases:
  classes   the report's bytes and blocks per kind, minus the baseline's, are
            the program's; every leak site has the kind it must have; no
            block is unclassified; the text report shows the kinds, the
            summary line on stderr the bytes of each class
  memcheck  valgrind --leak-check=full on the same program and its baseline:
            its LEAK SUMMARY per class, minus the baseline's, equals the
            report's (the program's own blocks)
  thread    a block held only by a local variable of another thread, blocked
            in read(2) at exit, is reachable (memcheck says so too); the one
            block the C runtime leaks for that thread (its DTV, held through an
            interior pointer) is possible under both
  main_exit main ends with pthread_exit, another thread calls exit(): the
            classes are the program's, as memcheck's (/proc/self, the ended
            main thread's, has no mappings: the scan read none and called the
            loader's blocks lost)
  cxx       tp_cxx (C++, iostreams, threads that were joined): the same classes
            as memcheck's without its freeres hooks (--run-libc-freeres=no
            --run-cxx-freeres=no: the runtime's blocks stay, as under tfalloc):
            reachable equal to the byte, the DTVs of the joined threads (kept
            in glibc's stack cache) possible under both
  mmap      a block held only by a pointer in memory the program mapped
            itself (anonymous mmap) is reachable, as for memcheck: that memory
            is a root, the shim's own mappings are not (jemalloc only: with
            glibc as the backend anonymous memory is no root, see README);
            so are blocks held from an rwx mapping (a JIT's code) and from
            the page in use of a PROT_NONE reservation (both had been
            definitely lost: only rw-p mappings without a PROT_NONE one
            below were roots)
  dlopen    a dlopen with RTLD_GLOBAL: the global scope the loader mallocs is
            held by the main program's link_map, which lies in the rest of
            ld.so's last page: nothing more definitely or indirectly lost,
            as for memcheck
  fork      tp_leak_classes fork: a forked child makes every class and
            leaves through _exit(); fork-inherit: the parent makes them and
            forks, the child holds them as its own: per process, the same
            classes as valgrind --trace-children=yes finds (each minus the
            fork-none run, where the child makes nothing)
  exec      tp_exec (which leaks 500 bytes) execs tp_leak_classes: the
            exec'd image's classes are valgrind's for that pid (minus the
            baseline), the image before the exec is not classified
  python3   python3 importing C extensions (pymalloc's arenas are anonymous
            mappings; the loader's link_maps of the dlopen'd modules): nothing
            definitely or indirectly lost, as memcheck finds without freeres
  scan      the bytes the scan read (leak_scan_bytes, memcheck's "checked N
            bytes"): the program's memory, not the shim's own (its .bss holds
            8 MB of tables, an anonymous mapping past the file: 7.5 MB were
            read at every exit); none at all when no block of the program is
            live at exit (the baseline), which the text report leaves out
  disabled  TFALLOC_LEAK_CLASSES=0: every block unclassified, same totals
  signal    a process killed by SIGTERM: its profile keeps the blocks
            unclassified (no scan inside a signal handler)
  groups    tp_leaks many-sites: two blocks from each of 32768 call stacks,
            one of them reachable for the even ones; the profile keeps
            16383 groups, by stack and kind, and the rest in a group
            without a stack for each kind: every block counted once, in its
            own kind (the rest had been one group, unclassified where kinds
            mixed, which a leak gate counts as definite: a JVM's 9.9 MB)
  reused    tp_leaks reused: a block freed, then one at its address lost:
            definitely lost (the shim's record of the addresses a thread
            freed last, in its TLS, is no root)
"""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

PROG = "tp_leak_classes"
KINDS = ("definite", "indirect", "possible", "reachable")
VALGRIND_NAMES = {"definitely lost": "definite", "indirectly lost": "indirect",
                  "possibly lost": "possible", "still reachable": "reachable"}
VALGRIND_ARGS = ["--leak-check=full", "--show-leak-kinds=all", "--errors-for-leak-kinds=none"]


def by_kind(proc):
    """{kind: [bytes, blocks]} over the cpu leaks of a profile."""
    out = {}
    for leak in proc.get("leaks", []):
        if leak.get("device", "cpu") != "cpu":
            continue
        v = out.setdefault(leak["kind"], [0, 0])
        v[0] += leak["bytes"]
        v[1] += leak["blocks"]
    return out


def minus(a, b):
    kinds = set(a) | set(b)
    return {k: [a.get(k, [0, 0])[0] - b.get(k, [0, 0])[0], a.get(k, [0, 0])[1] - b.get(k, [0, 0])[1]]
            for k in kinds}


def nonzero(d):
    return {k: v for k, v in d.items() if v != [0, 0]}


def declared(result):
    for line in result.out.splitlines():
        if line.startswith("CLASSES "):
            return json.loads(line[len("CLASSES "):])
    raise T.Failure("no CLASSES line in the output\n" + result.describe())


def shim_run(ctx, args=(), env=None, expect_status=0):
    path = ctx.prog(PROG)
    argv = [path] + list(args)
    plain = ctx.run_plain(argv)
    T.check(plain.returncode == expect_status,
            "%s fails its own checks without the shim\n%s" % (PROG, plain.describe()))
    r, rep = ctx.run_and_report(argv, what=" ".join([PROG] + list(args)), env=env,
                                expect_status=expect_status)
    T.same_output(plain, r, PROG)
    return r, T.only_process(rep, PROG)


def memcheck(ctx, args=(), prog=PROG, status=0, freeres=True):
    """valgrind's LEAK SUMMARY of the program: {kind: [bytes, blocks]}."""
    vg = shutil.which("valgrind")
    T.check(vg is not None, "valgrind is not installed (scripts/setup.sh installs it)")
    extra = [] if freeres else ["--run-libc-freeres=no", "--run-cxx-freeres=no"]
    r = ctx.run_plain([vg] + VALGRIND_ARGS + extra + [ctx.prog(prog)] + list(args), timeout=300)
    T.check(r.returncode == status, "the program fails under valgrind\n" + r.describe())
    out = {k: [0, 0] for k in KINDS}
    seen = False
    for line in r.err.splitlines():
        m = re.search(r"(definitely lost|indirectly lost|possibly lost|still reachable): "
                      r"([\d,]+) bytes in ([\d,]+) blocks", line)
        if m:
            out[VALGRIND_NAMES[m.group(1)]] = [int(m.group(2).replace(",", "")),
                                                int(m.group(3).replace(",", ""))]
            seen = True
        elif "All heap blocks were freed -- no leaks are possible" in line:
            seen = True
    T.check(seen, "no LEAK SUMMARY from valgrind\n" + r.describe())
    return out


def check_classified(proc, what):
    kinds = sorted(set(l["kind"] for l in proc.get("leaks", [])))
    T.check(all(k in KINDS for k in kinds), "%s: leak kinds %r (none may be unclassified)" % (what, kinds))


# Per allocating function of the program: {kind: [bytes, blocks]}.
SITES = {
    "make_definite": {"definite": [1000, 1]},
    "make_self_ref": {"definite": [32, 1]},
    "make_lost_list": {"definite": [48, 1], "indirect": [224, 4]},
    "make_lost_cycle": {"definite": [24, 1], "indirect": [24, 1]},
    "make_possible": {"possible": [712, 2]},
    "make_reachable": {"reachable": [300, 1]},
}


def case_classes(ctx):
    r, proc = shim_run(ctx)
    T.check_exited(proc, 0)
    T.check_consistent(proc, allocator=ctx.allocator or "jemalloc")
    check_classified(proc, PROG)
    base = ctx.baseline(PROG)
    check_classified(base, PROG + " baseline")
    T.check_eq(nonzero(minus(by_kind(proc), by_kind(base))), declared(r),
               "bytes and blocks per kind minus the baseline's")

    sites = {}
    for leak in proc["leaks"]:
        fn = leak["stack"][0]["function"] if leak.get("stack") else None
        if fn in SITES:
            v = sites.setdefault(fn, {}).setdefault(leak["kind"], [0, 0])
            v[0] += leak["bytes"]
            v[1] += leak["blocks"]
    T.check_eq(sites, SITES, "kinds per allocating function")

    rep = ctx._run([ctx.tool, "report", "--top", "0", r.outdir], ctx.env(), None, 120, "report")
    T.check(rep.returncode == 0, "tfalloc report failed\n" + rep.describe())
    for kind in KINDS:
        T.check(re.search(r"bytes? in \d+ blocks? \(%s, cpu, " % kind, rep.out) is not None,
                "the text report shows no %s leak:\n%s" % (kind, rep.out[-3000:]))
    T.check("unclassified" not in rep.out, "the text report shows unclassified leaks:\n" + rep.out[-3000:])
    # The totals by kind, as valgrind's LEAK SUMMARY (the baseline leaves nothing here).
    want = ("by kind: definite 1.1 KiB (1104 bytes) in 4 blocks, indirect 248 bytes in 5 blocks, "
            "possible 712 bytes in 2 blocks, reachable 500 bytes in 2 blocks\n")
    T.check(want in rep.out, "the text report's totals by kind:\n" + rep.out[-3000:])

    # The summary line on stderr says how much is lost (the baseline leaves nothing here).
    T.check_eq(nonzero(by_kind(base)), {}, "the baseline's leaks")
    s = ctx.run_tool([ctx.prog(PROG)], quiet=False)
    T.check(re.search(r"leaked blocks \([^:)]*: 1\.1 KiB definitely lost, 248 B indirectly, "
                      r"712 B possibly, 500 B reachable\)", s.err) is not None,
            "the summary line does not show the classes:\n" + s.err)


def case_memcheck(ctx):
    r, proc = shim_run(ctx)
    base = ctx.baseline(PROG)
    ours = nonzero(minus(by_kind(proc), by_kind(base)))
    vg = nonzero(minus(memcheck(ctx), memcheck(ctx, ["baseline"])))
    T.check_eq(vg, declared(r), "valgrind's LEAK SUMMARY minus its baseline's (the program's own blocks)")
    T.check_eq(ours, vg, "tfalloc's classes against valgrind's (each minus its baseline)")


def against_memcheck(ctx, mode, kinds, what, freeres=True):
    """PROG mode under tfalloc and under memcheck, each minus its baseline:
    (the profile, the classes the program declares, tfalloc's, memcheck's),
    with the given kinds checked equal to the declared ones in both."""
    r, proc = shim_run(ctx, [mode])
    check_classified(proc, PROG + " " + mode)
    want = declared(r)
    ours = minus(by_kind(proc), by_kind(ctx.baseline(PROG)))
    vg = minus(memcheck(ctx, [mode], freeres=freeres), memcheck(ctx, ["baseline"], freeres=freeres))
    for kind in kinds:
        T.check_eq(ours.get(kind, [0, 0]), want[kind], "tfalloc: %s %s" % (kind, what))
        T.check_eq(vg.get(kind, [0, 0]), want[kind], "valgrind: %s %s" % (kind, what))
    return proc, want, ours, vg


def case_thread(ctx):
    _, want, ours, vg = against_memcheck(ctx, "thread", ("definite", "indirect", "reachable"), "with the thread")
    T.check_eq(want["reachable"], [900, 3], "the program's reachable blocks with the thread")
    # The thread's DTV, made by pthread_create, held by its control block
    # through &dtv[1]: possible under both; its size depends on the modules
    # with TLS (the shim brings some).
    T.check_eq(ours["possible"][1], want["possible"][1] + 1, "tfalloc: possible blocks with the thread")
    T.check_eq(vg["possible"][1], want["possible"][1] + 1, "valgrind: possible blocks with the thread")
    T.check(ours["possible"][0] >= vg["possible"][0],
            "tfalloc's possible bytes %d < valgrind's %d" % (ours["possible"][0], vg["possible"][0]))


def case_main_exit(ctx):
    # Without glibc's freeres hooks, which free the loader's blocks (pthread_exit loads libgcc_s) under
    # memcheck only.
    proc, want, ours, vg = against_memcheck(ctx, "main-exit", ("definite", "indirect"),
                                            "after main's pthread_exit", freeres=False)
    T.check_eq(want["reachable"], [300, 1], "the program's reachable blocks once main has freed its own")
    # The rest is the program's 300 bytes and the runtime's: the ending thread's DTV (possible under
    # both, its size depends on the modules with TLS), libgcc_s's link map and the loader's other
    # blocks; the loader's 2,304-byte table is held through a pointer it aligned up, which is its
    # start under jemalloc (reachable, as for memcheck) but not under glibc's 16-byte alignment.
    held = [sum(ours.get(k, [0, 0])[1] for k in ("possible", "reachable")),
            sum(vg.get(k, [0, 0])[1] for k in ("possible", "reachable"))]
    T.check_eq(held[0], held[1], "blocks possibly lost or reachable, tfalloc against valgrind (%r, %r)" % (ours, vg))
    T.check_ge(ours.get("reachable", [0, 0])[0], want["reachable"][0], "tfalloc: reachable bytes")
    if ctx.allocator != "glibc":
        T.check_eq(ours.get("reachable"), vg.get("reachable"), "tfalloc: reachable after main's pthread_exit")
    # The 4 MiB peak made after main ended: its point has the resident memory of then (0 when read
    # from /proc/self, the ended thread's).
    peak = [p for p in proc.get("timeline", []) if p.get("peak")]
    T.check(peak and peak[-1]["bytes_in_use"] >= 4 << 20 and peak[-1]["rss_bytes"] > 0,
            "the timeline's peak after main's pthread_exit: %r" % peak[-1:])


def case_cxx(ctx):
    path = ctx.prog("tp_cxx")
    r, rep = ctx.run_and_report([path], what="tp_cxx", expect_status=3)
    proc = T.only_process(rep, "tp_cxx")
    check_classified(proc, "tp_cxx")
    ours = by_kind(proc)
    vg = nonzero(memcheck(ctx, prog="tp_cxx", status=3, freeres=False))
    T.check_eq(sorted(ours), sorted(vg), "tp_cxx: the kinds tfalloc and memcheck find")
    T.check_eq(ours.get("reachable"), vg.get("reachable"), "tp_cxx: reachable bytes and blocks")
    for kind in ("definite", "indirect"):
        T.check_eq(ours.get(kind), vg.get(kind), "tp_cxx: %s" % kind)
    # The DTVs are larger under the shim, which brings modules with TLS.
    T.check_eq(ours["possible"][1], vg["possible"][1], "tp_cxx: possible blocks (the joined threads' DTVs)")


def case_mmap(ctx):
    r, proc = shim_run(ctx, ["mmap"])
    check_classified(proc, PROG + " mmap")
    base = ctx.baseline(PROG)
    want = declared(r)
    T.check_eq(want["reachable"], [3020, 5], "the program's reachable blocks with the mappings")
    ours = nonzero(minus(by_kind(proc), by_kind(base)))
    vg = nonzero(minus(memcheck(ctx, ["mmap"]), memcheck(ctx, ["baseline"])))
    T.check_eq(vg, want, "valgrind's classes with the mapping")
    T.check_eq(ours, vg, "tfalloc's classes against valgrind's with the mapping")


def case_dlopen(ctx):
    r, proc = shim_run(ctx, ["dlopen"])
    check_classified(proc, PROG + " dlopen")
    base = ctx.baseline(PROG)
    want = declared(r)
    ours = minus(by_kind(proc), by_kind(base))
    vg = minus(memcheck(ctx, ["dlopen"]), memcheck(ctx, ["baseline"]))
    # With glibc as the backend anonymous memory is no root (see README): a
    # block of the loader's is then possible, not reachable.
    kinds = ("definite", "indirect") + (("possible",) if ctx.allocator != "glibc" else ())
    for kind in kinds:
        T.check_eq(vg.get(kind, [0, 0]), want[kind], "valgrind: %s with the dlopen" % kind)
        T.check_eq(ours.get(kind, [0, 0]), want[kind], "tfalloc: %s with the dlopen" % kind)


def memcheck_procs(ctx, argv):
    """valgrind --trace-children=yes: {pid: {kind: [bytes, blocks]}} of every
    process that printed a LEAK SUMMARY, and the run's stdout."""
    vg = shutil.which("valgrind")
    T.check(vg is not None, "valgrind is not installed (scripts/setup.sh installs it)")
    r = ctx.run_plain([vg, "--trace-children=yes"] + VALGRIND_ARGS + list(argv), timeout=300)
    T.check(r.returncode == 0, "the program fails under valgrind\n" + r.describe())
    procs = {}
    for line in r.err.splitlines():
        m = re.match(r"==(\d+)== +(definitely lost|indirectly lost|possibly lost|still reachable): "
                     r"([\d,]+) bytes in ([\d,]+) blocks", line)
        if m:
            procs.setdefault(int(m.group(1)), {k: [0, 0] for k in KINDS})[VALGRIND_NAMES[m.group(2)]] = [
                int(m.group(3).replace(",", "")), int(m.group(4).replace(",", ""))]
        m = re.match(r"==(\d+)== All heap blocks were freed", line)
        if m:
            procs.setdefault(int(m.group(1)), {k: [0, 0] for k in KINDS})
    return procs, r


def forked_pid(result):
    m = re.search(r"^FORKED (\d+)$", result.out, re.M)
    T.check(m is not None, "no FORKED line\n" + result.describe())
    return int(m.group(1))


def fork_run(ctx, mode):
    """(parent's, child's) classes under tfalloc and under valgrind, and the run."""
    argv = [ctx.prog(PROG), mode]
    r, rep = ctx.run_and_report(argv, what=PROG + " " + mode)
    child = forked_pid(r)
    procs = {p["pid"]: p for p in rep["processes"]}
    T.check(len(procs) == 2 and child in procs, "processes of %s: %s" % (mode, T.summary(rep["processes"])))
    parent = [p for pid, p in procs.items() if pid != child][0]
    T.check_eq((procs[child].get("forked"), parent.get("forked")), (True, False), "forked flags")
    for p in (parent, procs[child]):
        T.check_exited(p, 0)
        check_classified(p, "%s %s pid %d" % (PROG, mode, p["pid"]))
    vg, vr = memcheck_procs(ctx, argv)
    vchild = forked_pid(vr)
    T.check_eq(len(vg), 2, "processes with a LEAK SUMMARY under valgrind\n" + vr.describe())
    vparent = [v for pid, v in vg.items() if pid != vchild][0]
    return (by_kind(parent), by_kind(procs[child])), (vparent, vg[vchild]), r


def case_fork(ctx):
    (base_p, base_c), (vbase_p, vbase_c), _ = fork_run(ctx, "fork-none")
    for mode, parent_leaks in (("fork", False), ("fork-inherit", True)):
        (ours_p, ours_c), (vg_p, vg_c), r = fork_run(ctx, mode)
        want = declared(r)
        T.check_eq(nonzero(minus(vg_c, vbase_c)), want, "%s: valgrind's classes of the child" % mode)
        T.check_eq(nonzero(minus(ours_c, base_c)), want, "%s: tfalloc's classes of the child" % mode)
        T.check_eq(nonzero(minus(vg_p, vbase_p)), want if parent_leaks else {},
                   "%s: valgrind's classes of the parent" % mode)
        T.check_eq(nonzero(minus(ours_p, base_p)), want if parent_leaks else {},
                   "%s: tfalloc's classes of the parent" % mode)


def case_exec(ctx):
    argv = [ctx.prog("tp_exec"), ctx.prog(PROG)]
    r, rep = ctx.run_and_report(argv, what="tp_exec " + PROG)
    m = re.search(r"^EXEC (\d+)$", r.out, re.M)
    T.check(m is not None, "no EXEC line\n" + r.describe())
    procs = [p for p in rep["processes"] if p["pid"] == int(m.group(1))]
    before = [p for p in procs if p.get("end_reason") == "exec"]
    after = [p for p in procs if p.get("end_reason") == "exit"]
    T.check(len(before) == 1 and len(after) == 1, "profiles of the pid: %s" % T.summary(procs))
    T.check_eq(sorted(by_kind(before[0])), ["unclassified"], "the image before the exec")
    check_classified(after[0], "the exec'd " + PROG)
    want = declared(r)
    base = ctx.baseline(PROG)
    T.check_eq(nonzero(minus(by_kind(after[0]), by_kind(base))), want, "tfalloc: the exec'd image's classes")
    vg, vr = memcheck_procs(ctx, argv)
    m = re.search(r"^EXEC (\d+)$", vr.out, re.M)
    T.check(m is not None and int(m.group(1)) in vg, "no LEAK SUMMARY of the exec'd image\n" + vr.describe())
    vbase = memcheck(ctx, ["baseline"])
    T.check_eq(nonzero(minus(vg[int(m.group(1))], vbase)), want, "valgrind: the exec'd image's classes")


def case_python3(ctx):
    argv = ["/usr/bin/python3", "-c", "import decimal, ctypes, json, sqlite3"]
    r, rep = ctx.run_and_report(argv, what="python3")
    procs = [p for p in rep["processes"] if p.get("exe", "").startswith("/usr/bin/python3")]
    T.check_eq(len(procs), 1, "python3 processes in the report")
    ours = by_kind(procs[0])
    check_classified(procs[0], "python3")
    vg = shutil.which("valgrind")
    v = ctx.run_plain([vg, "--run-libc-freeres=no", "--run-cxx-freeres=no"] + VALGRIND_ARGS + argv,
                      timeout=300)
    T.check(v.returncode == 0, "python3 fails under valgrind\n" + v.describe())
    lost = re.findall(r"(definitely|indirectly) lost: ([\d,]+) bytes in ([\d,]+) blocks", v.err)
    T.check(len(lost) == 2, "no LEAK SUMMARY from valgrind\n" + v.describe())
    T.check(all(b == "0" for _, _, b in lost), "memcheck finds python3 losing blocks: %r" % lost)
    for kind in ("definite", "indirect"):
        T.check_eq(ours.get(kind, [0, 0]), [0, 0], "python3: %s (memcheck: none)" % kind)
    T.check(ours.get("reachable", [0, 0])[1] > 100, "python3: reachable blocks %r" % ours)


def case_scan(ctx):
    r, proc = shim_run(ctx)
    scanned = T.device(proc).get("leak_scan_bytes")
    T.check(scanned is not None, "no leak_scan_bytes in the cpu device's figures")
    # Its roots: the C runtime's data, the stack, the TLS blocks, a few hundred KiB.
    T.check(0 < scanned < (2 << 20), "the scan read %d bytes (the shim's own .bss is no root)" % scanned)
    rep = ctx._run([ctx.tool, "report", "--top", "0", r.outdir], ctx.env(), None, 120, "report")
    T.check(re.search(r"leak scan: +checked [0-9.]+ KiB", rep.out) is not None,
            "the text report does not say what the scan read:\n" + rep.out[-3000:])

    base = ctx.baseline(PROG)
    T.check_eq(T.device(base).get("leak_scan_bytes"), 0, "bytes read with no block of the program live")


def case_disabled(ctx):
    r, proc = shim_run(ctx, env={"TFALLOC_LEAK_CLASSES": "0"})
    T.check_exited(proc, 0)
    T.check_consistent(proc)
    kinds = by_kind(proc)
    T.check_eq(sorted(kinds), ["unclassified"], "kinds with TFALLOC_LEAK_CLASSES=0")
    want = declared(r)
    base = T.leak_totals(ctx.baseline(PROG, env={"TFALLOC_LEAK_CLASSES": "0"}))
    T.check_eq([kinds["unclassified"][0] - base[0], kinds["unclassified"][1] - base[1]],
               [sum(v[0] for v in want.values()), sum(v[1] for v in want.values())],
               "unclassified bytes and blocks minus the baseline's")


def case_signal(ctx):
    # tfalloc run exits with 128 + the signal, as a shell does.
    r, rep = ctx.run_and_report([ctx.prog(PROG), "kill"], what=PROG + " kill", expect_status=128 + 15)
    proc = T.only_process(rep, PROG)
    T.check_eq(proc.get("end_reason"), "signal", "end_reason")
    kinds = by_kind(proc)
    T.check_eq(sorted(kinds), ["unclassified"], "kinds in a profile written on a fatal signal")
    want = declared(r)
    T.check(kinds["unclassified"][1] >= sum(v[1] for v in want.values()),
            "unclassified blocks %r" % kinds)


def case_groups(ctx):
    path = ctx.prog("tp_leaks")
    r, rep = ctx.run_and_report([path, "many-sites"], what="tp_leaks many-sites")
    T.check("SITES 32768" in r.out, "tp_leaks many-sites did not run:\n" + r.describe())
    proc = T.only_process(rep, "tp_leaks")
    base = by_kind(ctx.baseline("tp_leaks"))
    leaks = [l for l in proc.get("leaks", []) if l.get("device", "cpu") == "cpu"]
    with_stack = [l for l in leaks if l["stack_id"] != 0]
    no_stack = [l for l in leaks if l["stack_id"] == 0]
    T.check_eq(len(with_stack), 16383, "groups with a stack (the table's 16384 rows, one kept free)")
    T.check_eq(len(set((l["stack_id"], l["kind"]) for l in with_stack)), 16383, "distinct stacks and kinds")
    kinds = sorted(l["kind"] for l in no_stack)
    T.check_eq(kinds, ["definite", "reachable"], "groups past the table's: one for each kind")
    ours = minus(by_kind(proc), base)
    T.check_eq(ours.get("definite"), [49152 * 16, 49152], "definitely lost, minus the baseline's")
    T.check_eq(ours.get("reachable"), [16384 * 16, 16384], "reachable, minus the baseline's")
    T.check_eq(ours.get("unclassified", [0, 0]), [0, 0], "nothing unclassified")


def case_reused(ctx):
    r, rep = ctx.run_and_report([ctx.prog("tp_leaks"), "reused"], what="tp_leaks reused")
    T.check_eq(r.out, "REUSED 1\n", "tp_leaks reused: the freed block's address given again")
    proc = T.only_process(rep, "tp_leaks")
    lost = [l for l in proc.get("leaks", []) if l.get("device", "cpu") == "cpu" and l["bytes"] == 48]
    T.check_eq([(l["kind"], l["blocks"]) for l in lost], [("definite", 1)],
               "the block at the freed one's address\n" + json.dumps(lost))


if __name__ == "__main__":
    T.main({"classes": case_classes, "memcheck": case_memcheck, "thread": case_thread, "main_exit": case_main_exit,
             "cxx": case_cxx,
            "mmap": case_mmap, "dlopen": case_dlopen, "fork": case_fork, "exec": case_exec, "python3": case_python3,
            "scan": case_scan, "disabled": case_disabled, "signal": case_signal, "groups": case_groups,
            "reused": case_reused})
