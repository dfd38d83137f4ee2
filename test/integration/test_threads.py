# SPDX-License-Identifier: MIT
"""Threads.

  threads  tp_threads: 4 threads allocate (malloc, calloc, posix_memalign),
           then free each other's blocks, realloc a third thread's and free a
           fourth's: exact counts, bytes and leaks against the ledger; the peak
           is the start-up bytes plus everything allocated before the first
           free, within the documented slack of per-thread publishing
           (threads x 64 KiB, core/tracking_allocator.h).
  churn    tp_churn: 4 threads of random malloc/calloc/realloc/
           posix_memalign/free with cross-thread frees for about a second:
           exact counts at exit, a consistent report.
  churn_seccomp  tp_churn in a seccomp sandbox that kills the process for
           membarrier (TP_SECCOMP=kill), or refuses it (errno): it runs to
           the end under tfalloc, with exact counts (it died of SIGSYS).
  handoff  tp_handoff (jemalloc): a thread frees 64 blocks another made, each
           followed by a malloc of the same size.  Plain jemalloc hands the
           freed block straight back (its thread cache); under the shim the
           block goes back towards its maker (core/shim.c, foreign_free_flags),
           never to the freeing thread's next malloc, and the counts are exact.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

PUBLISH_THRESHOLD = 64 * 1024


def case_threads(ctx):
    path = ctx.prog("tp_threads")
    plain = ctx.run_plain([path])
    T.check(plain.returncode == 0, "tp_threads fails without the shim\n" + plain.describe())
    r, rep = ctx.run_and_report([path], what="tp_threads")
    T.same_output(plain, r, "tp_threads")
    proc = T.only_process(rep, "tp_threads")
    T.check_exited(proc, 0)
    T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator)
    base = ctx.baseline("tp_threads")
    T.check_ledger(proc, base, T.parse_ledger(r))
    phase1 = int(T.parse_lines(r, "PHASE1_BYTES")[0][0])
    want = T.device(base)["bytes_in_use"] + phase1
    slack = (4 + 1) * PUBLISH_THRESHOLD
    T.check_range(T.device(proc)["peak_bytes_in_use"], want - slack, want + slack,
                  "tp_threads: peak_bytes_in_use (baseline in use + %d bytes allocated before any free)" % phase1)


def case_churn(ctx):
    path = ctx.prog("tp_churn")
    r, rep = ctx.run_and_report([path, "1.0"], what="tp_churn", timeout=90)
    T.check("churn done" in r.out, "tp_churn did not finish\n" + r.describe())
    proc = T.only_process(rep, "tp_churn")
    T.check_exited(proc, 0)
    T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator)
    base = ctx.baseline("tp_churn")
    T.check_ledger(proc, base, T.parse_ledger(r))


def case_churn_seccomp(ctx):
    """tp_churn in a seccomp sandbox that kills the process for membarrier,
    or refuses it: tfalloc, whose pointer table used membarrier when a shard
    is rebuilt while threads run, killed the program (SIGSYS) or went on
    without the barrier.  Now it asks whether a filter is installed first and
    takes another barrier there; the counts are as exact as without one."""
    path = ctx.prog("tp_churn")
    base = ctx.baseline("tp_churn")
    for how in ("kill", "errno"):
        what = "tp_churn with TP_SECCOMP=%s" % how
        plain = ctx.run_plain([path, "0.5"], env={"TP_SECCOMP": how})
        T.check("churn done" in plain.out, what + " without tfalloc\n" + plain.describe())
        r, rep = ctx.run_and_report([path, "0.5"], what=what, timeout=90, env={"TP_SECCOMP": how})
        T.check("churn done" in r.out, what + " did not finish\n" + r.describe())
        proc = T.only_process(rep, what)
        T.check_exited(proc, 0)
        T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator)
        T.check_ledger(proc, base, T.parse_ledger(r))


def case_handoff(ctx):
    path = ctx.prog("tp_handoff")
    plain = ctx.run_plain([path], env={"LD_PRELOAD": "libjemalloc.so.2"})
    T.check(plain.returncode == 0, "tp_handoff fails under plain jemalloc\n" + plain.describe())
    reused, rounds = map(int, T.parse_lines(plain, "REUSED")[0])
    # Shows what the test is about: without the shim's explicit cache, the block comes back.
    if os.path.exists("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"):
        T.check(reused >= rounds // 2, "plain jemalloc gave back %d of %d freed blocks: the premise "
                "of the test is gone" % (reused, rounds))
    r, rep = ctx.run_and_report([path], what="tp_handoff")
    reused, rounds = map(int, T.parse_lines(r, "REUSED")[0])
    T.check(reused == 0, "under the shim the freeing thread got %d of %d foreign blocks back at once "
            "(their maker's shard loses its owner)" % (reused, rounds))
    proc = T.only_process(rep, "tp_handoff")
    T.check_exited(proc, 0)
    T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator)
    T.check_ledger(proc, ctx.baseline("tp_handoff"), T.parse_ledger(r))


CASES = {
    "handoff": case_handoff,
    "threads": case_threads,
    "churn": case_churn,
    "churn_seccomp": case_churn_seccomp,
}

if __name__ == "__main__":
    T.main(CASES)
