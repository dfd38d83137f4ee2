# SPDX-License-Identifier: MIT
"""Sample-only tracking (TFALLOC_TRACK=sampled): only the blocks of a sample
are recorded, the rest only counted.

  counts    tp_sampled makes 200,000 blocks (malloc, calloc, realloc,
            aligned_alloc, posix_memalign) and keeps 4,000 of known sizes
            alive at exit: counts, frees, reallocs, total and allocated bytes
            equal the exact mode's run of the same program and the program's
            own tally; bytes in use lie between the requested and allocated
            bytes of the exact run; the bytes estimated live at exit are within
            5 standard deviations of the truth (the variance of the estimator
            computed from the kept sizes); the profile and the report say
            "sampled"; the output equals a plain run's.
  default   without TFALLOC_SAMPLE_BYTES the interval is 512 KiB; a bad value
            of TFALLOC_TRACK gives one line and tracks all.
  errors    a free of a pointer malloc never made gives exactly one line
            (invalid free) and the exit status stays 0; so do a free and a
            realloc of a pointer 8 bytes into a block, sampled or not; a double free of a
            sampled block (32 KiB at a 1 KiB interval) is reported.
  gate      tfalloc run --leak-gate refuses TFALLOC_TRACK=sampled (and
            --track sampled) before running the command (status 122); a
            sample-only profile written by a child is refused by the gate with
            one line naming the file (122).
  programs  python3 and C++ programs (tp_new, tp_cxx) give the same output
            and exit status as plain runs.
  threads   tp_threads and tp_fork (a child, a fork from threads): output as
            plain, every process's counts equal the exact mode's.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

SAMPLED = {"TFALLOC_TRACK": "sampled"}
EXACT_KEYS = ("num_allocs", "num_frees", "num_reallocs", "total_bytes", "total_allocated_bytes",
              "allocated_bytes_in_use", "largest_alloc_size", "peak_blocks_in_use")


def weight(size, interval):
    """1 / P(a block of size bytes is sampled): core/profile_format.h tfa_sample_weight."""
    return 1.0 / -math.expm1(-max(size, 1) / float(interval))


def check_same_counts(exact, sampled, what, keys=EXACT_KEYS):
    de, ds = T.device(exact), T.device(sampled)
    for k in keys:
        T.check_eq(ds[k], de[k], "%s: %s under sample-only tracking (exact tracking's)" % (what, k))


def run_both(ctx, argv, what, env=None, **kw):
    """(plain, exact run, exact report, sampled run, sampled report) of argv."""
    plain = ctx.run_plain(argv)
    e, erep = ctx.run_and_report(argv, via="preload", what=what + " exact", env=env,
                                 expect_status=plain.returncode, **kw)
    s, srep = ctx.run_and_report(argv, via="preload", what=what + " sampled",
                                 env=dict(env or {}, **SAMPLED), expect_status=plain.returncode, **kw)
    T.same_output(plain, e, what + " exact")
    T.same_output(plain, s, what + " sampled")
    return plain, e, erep, s, srep


def case_counts(ctx):
    interval = 65536
    n, k = 200000, 4000
    argv = [ctx.prog("tp_sampled"), "counts", str(n), str(k), "12345"]
    env = {"TFALLOC_SAMPLE_BYTES": str(interval)}
    plain, e, erep, s, srep = run_both(ctx, argv, "tp_sampled counts", env=env)
    pe, ps = T.only_process(erep), T.only_process(srep)
    T.check_exited(ps, 0)
    T.check_eq(pe.get("tracking"), "all", "exact run: tracking")
    T.check_eq(ps.get("tracking"), "sampled", "sampled run: tracking")
    T.check_eq(ps["stacks"]["sample_bytes"], interval, "sampled run: sample_bytes")
    check_same_counts(pe, ps, "tp_sampled counts")

    # The program's own tally, on top of the C runtime's (the baseline, exact).
    base = T.only_process(ctx.run_and_report([ctx.prog("tp_sampled"), "baseline"], via="preload",
                                             what="baseline")[1])
    allocs, frees, reallocs, total = (int(x) for x in T.parse_lines(s, "TALLY")[0])
    db = T.device(base)
    ds = T.device(ps)
    T.check_eq(ds["num_allocs"] - db["num_allocs"], allocs, "num_allocs over the baseline (the program's tally)")
    T.check_eq(ds["num_frees"] - db["num_frees"], frees, "num_frees over the baseline (the program's tally)")
    T.check_eq(ds["num_reallocs"] - db["num_reallocs"], reallocs, "num_reallocs over the baseline")
    T.check_eq(ds["total_bytes"] - db["total_bytes"], total, "total_bytes over the baseline")

    # Bytes in use: unsampled blocks at their allocated size.
    de = T.device(pe)
    T.check_range(ds["bytes_in_use"], de["bytes_in_use"], de["allocated_bytes_in_use"],
                  "sampled bytes_in_use between the exact requested and allocated bytes in use")

    # What was live at exit, estimated: unbiased, its variance known from the kept sizes.
    live = [(int(sz), int(cnt)) for sz, cnt in T.parse_lines(s, "LIVE")]
    truth_bytes = sum(sz * cnt for sz, cnt in live)
    var = sum(cnt * sz * sz * (weight(sz, interval) - 1) for sz, cnt in live)
    # The exact run's other live blocks (the kept-pointer array, the runtime's): the same sampling.
    exact_live = sum(l["bytes"] for l in pe["leaks"])
    other = exact_live - truth_bytes
    T.check(other >= 0, "exact run: %d bytes live at exit, fewer than the %d kept" % (exact_live, truth_bytes))
    for l in pe["leaks"]:
        sz = l["bytes"] / max(l["blocks"], 1)
        if int(sz) not in [x for x, _ in live]:
            var += l["blocks"] * sz * sz * (weight(sz, interval) - 1)
    est = sum(l.get("estimated_bytes", -10**18) for l in ps["leaks"])
    sampled_blocks = sum(l["blocks"] for l in ps["leaks"])
    sd = math.sqrt(var)
    T.check(abs(est - exact_live) <= 5 * sd,
            "estimated live bytes at exit %d, truth %d: off by %.1f standard deviations (sd %.0f, %d sampled blocks)"
            % (est, exact_live, abs(est - exact_live) / sd, sd, sampled_blocks))
    # About 300 blocks are expected in the sample: far fewer than the 4,000 live.
    T.check_range(sampled_blocks, 150, 600, "sampled blocks live at exit (about 315 expected)")
    for l in ps["leaks"]:
        T.check_eq(l["kind"], "unclassified", "a sampled leak's kind (no reachability classes)")
        T.check(l["estimated_blocks"] >= l["blocks"], "estimated blocks below the sampled ones: %r" % l)

    # The text report and the summary line say it.
    r = ctx._run([ctx.tool, "report", s.outdir], ctx.env(), None, 120, "report")
    T.check(r.returncode == 0 and "tracking:   sample-only" in r.out and "estimated live at exit" in r.out,
            "text report of a sample-only profile\n" + r.describe())
    q = ctx.run_preload(argv, quiet=False, env=dict(env, **SAMPLED))
    lines = q.err_lines()
    T.check(len(lines) == 1 and "live at exit, estimated from" in lines[0] and "(estimated)" in lines[0],
            "the summary line of a sample-only run\n" + q.describe())


def case_default(ctx):
    argv = [ctx.prog("tp_sampled"), "counts", "20000", "100", "7"]
    r, rep = ctx.run_and_report(argv, via="preload", what="default interval", env=SAMPLED)
    p = T.only_process(rep)
    T.check_eq(p.get("tracking"), "sampled", "tracking")
    T.check_eq(p["stacks"]["sample_bytes"], 524288, "the default interval of sample-only tracking")
    for value, words in (("some", "not one of all, sampled; using all"),):
        r = ctx.run_preload(argv, env={"TFALLOC_TRACK": value})
        lines = r.err_lines()
        T.check(len(lines) == 1 and words in lines[0] and "TFALLOC_TRACK" in lines[0],
                "TFALLOC_TRACK=%s: one line\n%s" % (value, r.describe()))
        T.check_eq(ctx.report(r.outdir)["processes"][0].get("tracking"), "all", "a bad TFALLOC_TRACK: tracking")
    # Refused with what it cannot go with: one line, every block tracked.
    for extra, words in (({"TFALLOC_STACKS": "none"}, "needs stacks"),
                         ({"TFALLOC_ALLOCATOR": "glibc"}, "needs tfalloc's own jemalloc"),
                         ({"TFALLOC_LIMIT": "1G"}, "TFALLOC_LIMIT")):
        r = ctx.run_preload(argv, env=dict(SAMPLED, **extra))
        lines = r.err_lines()
        T.check(len(lines) == 1 and words in lines[0] and "using all" in lines[0],
                "TFALLOC_TRACK=sampled with %r: one line\n%s" % (extra, r.describe()))
        T.check_eq(ctx.report(r.outdir)["processes"][0].get("tracking"), "all", "refused: tracking")


def case_errors(ctx):
    prog = ctx.prog("tp_sampled")
    r, rep = ctx.run_and_report([prog, "foreign"], via="preload", what="foreign free", env=SAMPLED)
    T.check_eq(r.out, "foreign done\n", "tp_sampled foreign: stdout")
    lines = r.err_lines()
    T.check(len(lines) == 1 and "invalid free of" in lines[0], "a foreign free: one line\n" + r.describe())
    p = T.only_process(rep)
    T.check_exited(p, 0)
    T.check_eq(T.error_totals(p)["invalid_free"], 1, "invalid frees counted")

    # A pointer into a block: one invalid free, one invalid realloc, the block intact; unsampled
    # (the default interval: sampled with a chance of 1 in 2,000) and sampled (a 1-byte interval).
    for extra in ({}, {"TFALLOC_SAMPLE_BYTES": "1"}):
        r, rep = ctx.run_and_report([prog, "interior"], via="preload", what="interior free %r" % extra,
                                    env=dict(SAMPLED, **extra))
        T.check_eq(r.out, "interior done\n", "tp_sampled interior %r: stdout" % extra)
        lines = r.err_lines()
        T.check(len(lines) == 2 and all("invalid free of" in l for l in lines),
                "a free and a realloc inside a block %r: two lines\n%s" % (extra, r.describe()))
        p = T.only_process(rep)
        T.check_exited(p, 0)
        T.check_eq(T.error_totals(p)["invalid_free"], 2, "invalid frees counted %r" % extra)

    # Sampled for sure (1 - exp(-32)), small enough for the quarantine (64 KiB).
    r, rep = ctx.run_and_report([prog, "double", str(32 << 10)], via="preload", what="double free",
                                env=dict(SAMPLED, TFALLOC_SAMPLE_BYTES="1024"))
    T.check_eq(r.out, "double done\n", "tp_sampled double: stdout")
    lines = r.err_lines()
    T.check(len(lines) == 1 and "double free of" in lines[0], "a double free of a sampled block\n" + r.describe())
    p = T.only_process(rep)
    T.check_exited(p, 0)
    T.check_eq(T.error_totals(p)["double_free"], 1, "double frees counted")


def case_gate(ctx):
    marker = os.path.join(ctx.scratch, "ran")
    cmd = ["/bin/sh", "-c", "touch " + marker]
    for tool_args, env in (([], SAMPLED), (["--track", "sampled"], None)):
        r = ctx.run_tool(cmd, tool_args=["--leak-gate"] + tool_args, env=env)
        lines = r.err_lines()
        T.check_eq(r.returncode, 122, "run --leak-gate with sample-only tracking: status")
        T.check(len(lines) == 1 and "cannot show that nothing leaked" in lines[0],
                "run --leak-gate with sample-only tracking: one line\n" + r.describe())
        T.check(not os.path.exists(marker), "the command ran although the gate refused")
    # A child turns it on for itself: its profile is refused by name.
    prog = ctx.prog("tp_sampled")
    r = ctx.run_tool(["/usr/bin/env", "TFALLOC_TRACK=sampled", prog, "counts", "1000", "10", "1"],
                     tool_args=["--leak-gate"])
    T.check_eq(r.returncode, 122, "a sample-only profile under the gate: status\n" + r.describe())
    refused = [l for l in r.err_lines() if "refused: sample-only tracking" in l]
    T.check(len(refused) == 1 and ".prof" in refused[0] and r.outdir in refused[0],
            "the gate names the refused profile\n" + r.describe())
    T.check(any("leak gate: REFUSED" in l for l in r.err_lines()), "the gate's verdict\n" + r.describe())


def case_programs(ctx):
    runs = [["/usr/bin/python3", "-c",
             "import json,collections\n"
             "d=collections.Counter(json.dumps(list(range(i % 500))) for i in range(20000))\n"
             "print(len(d), sum(len(k) for k in d))"],
            [ctx.prog("tp_new")], [ctx.prog("tp_cxx")]]
    for argv in runs:
        plain = ctx.run_plain(argv)
        r = ctx.run_preload(argv, env=SAMPLED)
        T.same_output(plain, r, os.path.basename(argv[0]) + " sampled")
        T.check_eq(r.err, plain.err, os.path.basename(argv[0]) + ": stderr as plain")
        rep = ctx.report(r.outdir)
        for p in rep["processes"]:
            T.check_eq(p.get("tracking"), "sampled", os.path.basename(argv[0]) + ": tracking")


def case_threads(ctx):
    plain, e, erep, s, srep = run_both(ctx, [ctx.prog("tp_threads")], "tp_threads")
    check_same_counts(T.only_process(erep), T.only_process(srep), "tp_threads",
                      keys=("num_allocs", "num_frees", "num_reallocs", "total_bytes",
                            "total_allocated_bytes", "allocated_bytes_in_use"))
    for argv in ([ctx.prog("tp_fork")], [ctx.prog("tp_fork"), "threads", "8"]):
        plain = ctx.run_plain(argv)
        s, srep = ctx.run_and_report(argv, via="preload", what="tp_fork sampled", env=SAMPLED,
                                     expect_status=plain.returncode)
        # The same lines but for the pids they print.
        T.check_eq(sorted(l.split()[0] for l in s.out.splitlines()),
                   sorted(l.split()[0] for l in plain.out.splitlines()), "tp_fork sampled: output lines")
        procs = srep["processes"]
        T.check(len(procs) >= 2, "tp_fork sampled: processes\n" + T.summary(procs))
        for p in procs:
            T.check_eq(p.get("tracking"), "sampled", "tp_fork: tracking")
            T.check_eq(p.get("end_reason"), "exit", "tp_fork: end_reason of pid %s" % p.get("pid"))
            T.check_eq(p.get("exit_code"), 0, "tp_fork: exit code of pid %s" % p.get("pid"))
            T.check_eq(T.error_totals(p), {"double_free": 0, "invalid_free": 0, "mismatched_free": 0,
                                           "not_recorded": 0}, "tp_fork: no memory errors")


if __name__ == "__main__":
    T.main({
        "counts": case_counts,
        "default": case_default,
        "errors": case_errors,
        "gate": case_gate,
        "programs": case_programs,
        "threads": case_threads,
    })
