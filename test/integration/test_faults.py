# SPDX-License-Identifier: MIT
"""Faults injected for real: memory that cannot be had, a file system that
refuses the profile, a hostile output directory, and how a process ends.

Cases:
  shim_memory   tp_nomem shim lowers its own RLIMIT_AS once the backend holds
                the memory it will need: tfalloc's pointer table cannot grow.
                The program prints what it prints without tfalloc and exits
                0; stderr holds exactly one line (recording stopped); the
                profile is complete and flagged degraded, and the text report
                says recording stopped
  shim_stacks   the same for the stack table: tp_nomem stacks 16 allocates
                (and frees at once) from 65536 distinct call stacks after
                the limit: the program unaffected, one line (new call stacks
                not recorded), every allocation still counted, the profile
                flagged stacks_lost (the text report says so); before, the
                stacks were dropped without a word
  start_memory  tp_leaks under RLIMIT_AS of 8 to 40 MiB (prlimit --as), so
                that memory runs out while the shim and jemalloc start: never
                killed by a signal (jemalloc's start-up crashed on a failed
                mmap, status -11 at 14 to 19 MiB); either the same output as
                without tfalloc or the program's own out-of-memory check
                (status 90) or the loader's refusal (127); the line saying
                jemalloc could not start is the only other line; and with
                glibc chosen, the private jemalloc never starts (4 MiB or
                more of address space less: its constructor had started it
                in every process, and crashed under 13 MiB)
  exit_memory   tp_nomem leaks keeps 5000 blocks of 48 bytes, then sets
                RLIMIT_AS to the address space in use and returns: no mapping
                can be had at exit, and the profile still lists the 5000
                blocks (it listed none: the leak groups were mapped at the
                end), and the leak gate fails the run (it passed)
  nofile        tp_nomem fds opens /dev/null until EMFILE and exits with a
                block kept: under RLIMIT_NOFILE 64:4096 the profile is written
                (it was lost: "Too many open files"; the soft limit is raised
                while it is written, then put back) and lists the leaks,
                classified; under 64:64, where nothing can be raised, too (it
                was lost: the shim keeps two descriptors of a pipe for it
                there, closed while it is written); the program opened one
                descriptor fewer than without tfalloc under 64:4096 (the
                duplicate of stderr, at the top of the limit) and three under
                64:64 (TFALLOC_STACKS=none: with unwind tables, libunwind's
                pipe holds two more, see the README's limits); under 64:64
                with snapshots every 5 ms while no descriptor is left, the
                final profile too (each snapshot gives the reserve back)
  closed_fds    tp_closefds closes every descriptor from 3 on, opens its
                input and output at 3 and 4, and allocates in signal
                handlers (walked by libunwind): with each stack mode its
                output is the same as without tfalloc (with unwind tables,
                libunwind's pipe had been at 3 and 4: it read 3 bytes of the
                input and wrote 3 into the output); with unwind tables under
                RLIMIT_NOFILE 64:4096 and 64:64 too (the pipe had stayed at 3
                and 4 there: it moved only to 1022 and up)
  setuid        tp_setuid drops root (setuid, setresuid, seteuid and back
                with a snapshot, then setuid) with its output directory
                root's alone: its final profile is written through a
                descriptor taken before the change (it was lost), with its
                two leaks, and the leak gate fails it (it passed); then
                chroots into an empty directory: the profile is written, its
                leaks classified (/proc/self/maps read through a kept
                descriptor: they were all unclassified); the same after
                new mount and pid namespaces whose proc a child mounted
                (unshare: /proc/self names no process then); killed by
                SIGKILL after the change, it leaves the snapshot the change
                made (an empty file); skipped when not run as root
  setuid_exec   programs started after their process dropped root (tp_setuid
                exec, then system() of itself; setpriv starting python3), the
                output directory under a parent only root may search: their
                profiles are in the directory's uid-65534, made by the process
                before it changed (they were lost, and a leak gate passed),
                their leaks fail the gate, and their lines come on tfalloc
                run's stderr; python's subprocess with user="nobody", whose
                child closes its descriptors (close_range) before the exec:
                the same (it had no profile, and its line in the stderr its
                parent captured); a program that closes the directory's
                descriptor and opens its own under the number gets no file
                of tfalloc's there (it did); skipped when not run as root
  sandbox       tp_setuid sandbox: a seccomp filter (after
                PR_SET_NO_NEW_PRIVS) that refuses to open files, as man-db's
                sandbox does: the profile is written, its leaks classified
                a program it executes there (man's col), which cannot
                create its file, writes its profile into the one its image
                before the exec kept (it had none), and the gate sees its leak
  backend_enomem  tp_nomem backend under RLIMIT_AS: 256 MiB requests and
                impossible ones fail as without tfalloc (NULL and ENOMEM,
                std::bad_alloc), what fits still succeeds and the report
                counts exactly what succeeded; not degraded
  fsize         RLIMIT_FSIZE below the profile's size (prlimit --fsize): a
                soft limit is raised to the hard one for the profile's
                writing, and put back (the program's own write past it still
                dies of SIGXFSZ, as without tfalloc); the profile is there.
                A hard limit too, where the process may lift it
                (CAP_SYS_RESOURCE); otherwise the write fails with EFBIG, and
                the SIGXFSZ the kernel sends must not kill the program (it
                did: status -25); one line saying "File too large"; the same
                for snapshots every millisecond, and for tfalloc report -o
                under the limit
  broken_pipe   stderr a pipe nobody reads: tfalloc's lines there (the
                summary, failing snapshots) raise SIGPIPE, which must not
                kill the program (it did: status -13, with
                TFALLOC_CATCH_SIGNALS=0 at the summary, and by the failing
                snapshots' line deferred to the next allocation); tfalloc
                run's status stays the command's (or the gate's: 23) when
                its own closing lines meet the broken pipe (it was -13)
  full_disk     a full tmpfs (mounted in a private mount namespace; skipped
                where mount is refused) as the output directory: one line
                "No space left on device", the program unaffected;
                tfalloc report -o /dev/full: one line, status 1
  output_dir    the output directory missing, a read-only file system
                (tmpfs mounted ro; skipped where mount is refused), a file:
                one line naming the path, output and status unchanged; a
                relative one is taken from the working directory at start:
                tp_leaks chdir leaves for another directory holding one of
                the same name, and the profile is where it was asked for
                (it was lost, or written there)
  no_proc       tp_leaks with /proc unmounted (a private mount namespace;
                skipped where that is refused), as in a chroot or sandbox:
                the profile is named after the program and says its command
                (argv[0]) and executable (the name execve was given), and the
                leaks' stacks are symbolized (they were "[executable]+0x..."
                in a profile named "x", the summary line "tfalloc[PID]: :")
  symlink       symlinks planted, by another user, where the profile and its
                temporary file will go, in a sticky world-writable directory:
                the files they point to are untouched, the profile is a
                regular file of mode 0600 under another name and reads back
  exit_paths    how a process ends, each leaving a profile that says so:
                abort() (signal 6), a real SIGSEGV (a store through NULL,
                signal 11), _exit(7) from main, quick_exit(9) after the
                program's at_quick_exit handler (it left no profile: glibc
                ends it by its internal _exit), and four threads calling
                exit(5) at once, 10 runs (the thread that found no exit
                handler left ended the process while another wrote the
                profile: none, in 3 runs of 3), and a thread calling
                _exit(5) while main's exit(5) writes the profile, 10 runs;
                a stack overflow (signal 11) in main, with each stack mode,
                and in a thread that allocates at every level, with stacks
                (the kernel had no stack to run the handler on: no
                profile; then, with stacks, the overflow came in the
                capture's walk, inside the shim); SIGTERM to a program
                with an alternate signal stack of its own as small as
                Rust's (the profile's writing overflowed it: status 139,
                no profile); a thread with a pthread_cancel pending that
                allocates while snapshots are due, and with snapshots off
                while the series takes its points (cancelled inside a
                snapshot, or in the series' read of /proc/self/statm, it
                left the shim's locks held, and the exit's profile waited
                for them forever)
  control_user  tfalloc snapshot of a process of another user, by a third
                user: refused in one line, status 1, the process unaffected;
                then the answers' directory of the process's user squatted
                by another user (a directory of daemon's, mode 0777; a
                symlink): the owner's own request is refused in one line,
                nothing is written there, the process unaffected
"""
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

NOBODY = 65534


def stderr_lines(r, what, n=1):
    lines = r.err_lines()
    T.check(len(lines) == n, "%s: expected %d line(s) on stderr, got %d\n%s" % (what, n, len(lines), r.describe()))
    return lines


def run_preloaded(ctx, prefix, argv, env=None, outdir=None, cwd=None):
    """prefix + argv where only argv runs under the shim (prlimit, setpriv
    and the shell that execs argv do not: they would leave profiles and
    messages of their own)."""
    if outdir is None:
        outdir = ctx.mkdtemp("out")
    extra = {"TFA_LIB": ctx.lib, "TFALLOC_OUTPUT": outdir, "TFALLOC_QUIET": "1"}
    extra.update(env or {})
    cmd = list(prefix) + ["sh", "-c", 'export LD_PRELOAD="$TFA_LIB"; exec "$@"', "sh"] + list(argv)
    return ctx._run(cmd, ctx.env(extra), None, 120, "LD_PRELOAD", outdir, cwd=cwd)


# ---- memory -----------------------------------------------------------------


def run_both(ctx, argv, what):
    """argv without tfalloc (status 0), then preloaded: the same output.
    Returns the preloaded run and its process's report."""
    plain = ctx.run_plain(argv)
    T.check_eq(plain.returncode, 0, "%s without tfalloc\n%s" % (what, plain.describe()))
    r, rep = ctx.run_and_report(argv, via="preload", what=what)
    T.same_output(plain, r, what)
    return plain, r, T.only_process(rep, what)


def case_shim_memory(ctx):
    argv = [ctx.prog("tp_nomem"), "shim", "300000"]
    _, r, proc = run_both(ctx, argv, "tp_nomem shim")
    line = stderr_lines(r, "tp_nomem shim")[0]
    T.check("stops recording" in line and "the program continues" in line,
            "the line does not say recording stopped: " + line)
    T.check_exited(proc, 0)
    T.check_eq(proc.get("degraded"), True, "degraded")
    # What was recorded before is there; the 300000 blocks after are not all.
    T.check_range(T.device(proc)["num_allocs"], 1000, 299999, "allocations recorded")
    text = ctx._run([ctx.tool, "report", r.outdir], ctx.env(), None, 60, "report")
    T.check_eq(text.returncode, 0, "text report\n" + text.describe())
    T.check("stopped recording" in text.out, "the text report does not say recording stopped:\n" + text.out[:1500])


def case_shim_stacks(ctx):
    argv = [ctx.prog("tp_nomem"), "stacks", "16"]
    _, r, proc = run_both(ctx, argv, "tp_nomem stacks")
    line = stderr_lines(r, "tp_nomem stacks")[0]
    T.check("new call stacks are not recorded" in line, "the line: " + line)
    T.check_exited(proc, 0)
    T.check_eq((proc.get("degraded"), proc.get("stacks_lost")), (False, True), "degraded, stacks_lost")
    T.check_ge(T.device(proc)["num_allocs"], 1 << 16, "allocations counted")
    T.check_range(proc["stacks"]["distinct"], 1, (1 << 16) - 1, "distinct stacks recorded")
    text = ctx._run([ctx.tool, "report", r.outdir], ctx.env(), None, 60, "report")
    T.check("ran out of memory for call stacks" in text.out, "the text report:\n" + text.out[:1500])


def case_start_memory(ctx):
    argv = [ctx.prog("tp_leaks")]
    plain = ctx.run_plain(argv)
    fell_back = 0
    for mib in range(8, 41):
        r = run_preloaded(ctx, ["prlimit", "--as=%d" % (mib << 20), "--"], argv)
        what = "tp_leaks under RLIMIT_AS of %d MiB" % mib
        T.check(r.returncode in (plain.returncode, 90, 127),
                "%s: exit status %s (plain %s)\n%s" % (what, r.returncode, plain.returncode, r.describe()))
        if r.returncode == plain.returncode:
            T.same_output(plain, r, what)
        for line in r.err_lines():
            T.check("jemalloc cannot start" in line or "check failed" in line or "libunwind" in line
                    or "stops recording" in line or "new call stacks are not recorded" in line
                    or "cannot be preloaded" in line or "error while loading" in line,
                    "%s: unexpected line: %s" % (what, line))
        fell_back += "jemalloc cannot start" in r.err
    T.check(fell_back > 0, "no limit made jemalloc's start-up fall back to glibc")
    # With glibc chosen the private jemalloc never starts (its constructor had started it in
    # every process: some 8 MiB of address space, and a crash under 13 MiB of RLIMIT_AS).
    vm = {}
    for alloc in ("jemalloc", "glibc"):
        r = run_preloaded(ctx, [], ["cat", "/proc/self/status"], env={"TFALLOC_ALLOCATOR": alloc})
        m = re.search(r"VmSize:\s+(\d+) kB", r.out)
        T.check(r.returncode == 0 and m is not None, "cat /proc/self/status\n" + r.describe())
        vm[alloc] = int(m.group(1))
    T.check(vm["glibc"] + 4096 <= vm["jemalloc"],
            "address space with glibc chosen %d kB, with jemalloc %d kB: jemalloc started all the same"
            % (vm["glibc"], vm["jemalloc"]))


def case_exit_memory(ctx):
    argv = [ctx.prog("tp_nomem"), "leaks", "5000"]
    plain = ctx.run_plain(argv)
    T.check_eq(plain.returncode, 0, "tp_nomem leaks without tfalloc\n" + plain.describe())
    r, rep = ctx.run_and_report(argv, via="preload", what="tp_nomem leaks")
    T.same_output(plain, r, "tp_nomem leaks")
    proc = T.only_process(rep, "tp_nomem leaks")
    T.check_exited(proc, 0)
    mine = [l for l in proc.get("leaks", []) if l["bytes"] == 48 * l["blocks"]]
    T.check_range(sum(l["blocks"] for l in mine), 5000, 5001, "leaked blocks of 48 bytes in the profile")
    # The profile's stacks with no page for the trie's scratch at exit: every stack written whole.
    funcs = [f.get("function", "") for l in mine for f in l.get("stack", [])]
    T.check(any("leaks_mode" in f for f in funcs), "the 5000 blocks' stack: %r" % funcs)
    g = ctx.run_tool(argv, tool_args=["--leak-gate", "--leak-kinds", "all"])
    T.check_eq(g.returncode, 23, "the leak gate's status\n" + g.describe())
    T.check("5000 blocks" in g.err or "5001 blocks" in g.err, "the gate's lines:\n" + g.err)


def case_nofile(ctx):
    argv = [ctx.prog("tp_nomem"), "fds"]
    for soft, hard in ((64, 4096), (64, 64)):
        prlimit = ["prlimit", "--nofile=%d:%d" % (soft, hard), "--"]
        what = "tp_nomem fds under RLIMIT_NOFILE %d:%d" % (soft, hard)
        plain = ctx._run(prlimit + argv, ctx.env(), None, 60, "plain")
        T.check_eq(plain.returncode, 0, what + " without tfalloc\n" + plain.describe())
        out = ctx.mkdtemp("out")
        r = run_preloaded(ctx, prlimit, argv, outdir=out, env={"TFALLOC_STACKS": "none"})
        T.check_eq(r.returncode, 0, what + "\n" + r.describe())
        T.check_eq(r.err, "", what + ": stderr")
        # The shim's descriptors, at the top of the limit: stderr's duplicate,
        # and where the limit cannot be raised for the profile the reserve's two.
        kept = 1 if soft < hard else 3
        T.check_eq(r.out, "fds %d\n" % (int(plain.out.split()[1]) - kept),
                   what + ": descriptors opened (%s without tfalloc)" % plain.out.strip())
        proc = T.only_process(ctx.report(out, what), what)
        T.check_exited(proc, 0)
        # Without stacks the block kept shares its group (no stack, its class) with the runtime's.
        leaks = proc.get("leaks", [])
        T.check(sum(l["blocks"] for l in leaks) >= 1 and sum(l["bytes"] for l in leaks) >= 48,
                what + ": the block kept is not among the leaks: %r" % leaks)
        T.check(all(l.get("kind") not in (None, "unclassified") for l in leaks),
                what + ": the leaks are classified (/proc/self/maps was read): %r" % leaks)
    # Snapshots while no descriptor is left: each takes the reserve and gives it back for the next,
    # and for the final profile.
    prlimit = ["prlimit", "--nofile=64:64", "--"]
    what = "tp_nomem fds busy under RLIMIT_NOFILE 64:64 with snapshots every 5 ms"
    out = ctx.mkdtemp("out")
    r = run_preloaded(ctx, prlimit, argv + ["busy"], outdir=out,
                      env={"TFALLOC_STACKS": "none", "TFALLOC_FLUSH_INTERVAL_MS": "5"})
    T.check_eq((r.returncode, r.err), (0, ""), what + "\n" + r.describe())
    proc = T.only_process(ctx.report(out, what), what)
    T.check_exited(proc, 0)
    T.check_eq(proc.get("complete"), True, what + ": the final profile, not a snapshot")


def case_closed_fds(ctx):
    """A daemon's start: the program closes every descriptor from 3 on and
    opens its own files at 3 and 4, then allocates in signal handlers, whose
    frames tfalloc's walker hands to libunwind.  libunwind checks memory
    through a pipe of its own: made at 3 and 4, it read the program's input
    and wrote into its output.  With each stack mode: the same output as
    without tfalloc, and the handler's blocks are in the profile."""
    for mode in ("unwind", "fp", "none"):
        what = "tp_closefds with TFALLOC_STACKS=%s" % mode
        d = ctx.mkdtemp("files")
        plain = ctx.run_plain([ctx.prog("tp_closefds"), d])
        T.check_eq(plain.returncode, 0, what + " without tfalloc\n" + plain.describe())
        T.check("descriptors 3 4" in plain.out and "input offset 24" in plain.out, plain.describe())
        d = ctx.mkdtemp("files")
        r, rep = ctx.run_and_report([ctx.prog("tp_closefds"), d], via="preload", what=what,
                                    env={"TFALLOC_STACKS": mode})
        T.same_output(plain, r, what)
        T.check_eq(r.err, "", what + ": stderr")
        proc = T.only_process(rep, what)
        T.check_exited(proc, 0)
        T.check(T.device(proc)["num_allocs"] >= 64, what + ": the handler's 64 blocks are counted")
    # Under a soft limit below 1021 the shim's descriptors go to its top: libunwind's pipe had stayed at 3 and 4.
    for soft, hard in ((64, 4096), (64, 64)):
        prlimit = ["prlimit", "--nofile=%d:%d" % (soft, hard), "--"]
        what = "tp_closefds with TFALLOC_STACKS=unwind under RLIMIT_NOFILE %d:%d" % (soft, hard)
        d = ctx.mkdtemp("files")
        plain = ctx._run(prlimit + [ctx.prog("tp_closefds"), d], ctx.env(), None, 60, "plain")
        T.check_eq(plain.returncode, 0, what + " without tfalloc\n" + plain.describe())
        d = ctx.mkdtemp("files")
        r = run_preloaded(ctx, prlimit, [ctx.prog("tp_closefds"), d], env={"TFALLOC_STACKS": "unwind"})
        T.same_output(plain, r, what)
        T.check_eq(r.err, "", what + ": stderr")


def case_setuid(ctx):
    """tp_setuid: a process that drops root (setuid, setresuid; seteuid there
    and back with a snapshot in between, then setuid) in an output directory
    only root may write: its profile is written all the same (it was lost,
    "Permission denied", and a leak gate passed it), final, with both leaks,
    and the leak gate fails it.  A chroot into an empty directory, and new
    mount and pid namespaces with their own proc (unshare): the leaks are
    still classified."""
    if os.geteuid() != 0:
        raise T.Skip("needs root: the program drops it")
    for mode in ("setuid", "setresuid", "seteuid"):
        what = "tp_setuid " + mode
        env = {"TFALLOC_FLUSH_INTERVAL_MS": "10"} if mode == "seteuid" else {}
        r, rep = ctx.run_and_report([ctx.prog("tp_setuid"), mode], what=what, env=env)
        T.check_eq(r.out, "uid 65534\n", what + ": output")
        T.check_eq(os.stat(r.outdir).st_mode & 0o777, 0o700, what + ": the directory is root's alone")
        T.check(not os.path.exists(os.path.join(r.outdir, "uid-65534")),
                what + ": the directory made for programs it did not execute is left: %r" % os.listdir(r.outdir))
        T.check("no profile" not in r.err, what + ": stderr\n" + r.err)
        proc = T.only_process(rep, what)
        T.check_exited(proc, 0)
        T.check_eq(proc.get("complete"), True, what + ": the final profile, not the snapshot")
        sizes = sorted(l["bytes"] for l in proc.get("leaks", []) if l.get("kind") == "definite")
        T.check_eq(sizes, [1000, 5000], what + ": the leaks: %r" % proc.get("leaks"))
        g = ctx.run_tool([ctx.prog("tp_setuid"), mode], env=env, tool_args=["--leak-gate"])
        T.check_eq(g.returncode, 23, what + ": the leak gate's status\n" + g.describe())
        lines_to_tool(ctx, [mode], what)
    # Killed after the change: the snapshot it made, not an empty file.
    what = "tp_setuid killed"
    r, rep = ctx.run_and_report([ctx.prog("tp_setuid"), "killed"], what=what, expect_status=137)
    proc = T.only_process(rep, what)
    T.check_eq(proc.get("complete"), False, what + ": a snapshot")
    T.check(any(l["bytes"] == 1000 for l in proc.get("leaks", [])), what + ": its block live at the snapshot")
    # chroot into an empty directory: the profile, and the leak scan's roots (no /proc there).
    empty = ctx.mkdtemp("root")
    what = "tp_setuid chroot"
    r, rep = ctx.run_and_report([ctx.prog("tp_setuid"), "chroot", empty], what=what)
    T.check_eq(r.out, "chrooted\n", what + ": output")
    lines_to_tool(ctx, ["chroot", empty], what)
    proc = T.only_process(rep, what)
    T.check_exited(proc, 0)
    kinds = sorted((l["bytes"], l["kind"]) for l in proc.get("leaks", []) if l["bytes"] in (1000, 4000, 5000))
    T.check_eq(kinds, [(1000, "definite"), (4000, "reachable"), (5000, "definite")],
               what + ": the leaks, classified: %r" % proc.get("leaks"))
    # New mount and pid namespaces whose proc is mounted: the parent, outside, has no /proc/self.
    what = "tp_setuid unshare"
    r, rep = ctx.run_and_report([ctx.prog("tp_setuid"), "unshare"], what=what)
    if r.out != "unshare refused\n":
        T.check_eq(r.out, "unshared\n", what + ": output")
        parent = [p for p in rep["processes"] if p.get("ppid") == r.pid]
        T.check(len(parent) == 1, what + ": the parent's profile:\n" + T.summary(rep["processes"]))
        T.check_exited(parent[0], 0)
        kinds = sorted((l["bytes"], l["kind"]) for l in parent[0].get("leaks", [])
                       if l["bytes"] in (1000, 4000, 5000))
        T.check_eq(kinds, [(1000, "definite"), (4000, "reachable"), (5000, "definite")],
                   what + ": the leaks, classified: %r" % parent[0].get("leaks"))


def case_setuid_exec(ctx):
    """Programs started after their process dropped root: tp_setuid exec
    (setuid to nobody, then exec of itself, which runs itself again through
    system(), a shell between them), with its output directory under a parent
    only root may search (root's home is 0700): each program's profile is in
    the directory's uid-65534, which the process made for them before it
    changed (they were lost, "Permission denied", and a leak gate passed);
    their leaks are found and fail the gate; their lines come on tfalloc
    run's stderr, none in the program's.  Then setpriv(1) starting python3
    as nobody, which leaks through ctypes."""
    if os.geteuid() != 0:
        raise T.Skip("needs root: the program drops it")
    home = ctx.mkdtemp("home")
    os.chmod(home, 0o700)
    outdir = os.path.join(home, "out")
    what = "tp_setuid exec"
    r, rep = ctx.run_and_report([ctx.prog("tp_setuid"), "exec"], what=what, outdir=outdir)
    T.check_eq(r.out, "uid 65534\nchild uid 65534\n", what + ": output")
    T.check("no profile" not in r.err, what + ": stderr\n" + r.err)
    user_dir = os.path.join(outdir, "uid-65534")
    st = os.lstat(user_dir)
    T.check_eq((st.st_uid, st.st_mode & 0o777), (65534, 0o700), what + ": the user's directory")
    procs = rep["processes"]
    by_command = {p.get("command", "").split()[-1]: p for p in procs}
    T.check_eq(sorted(by_command), ["after-exec", "after-system", "exec"],
               what + ": the processes\n" + T.summary(procs))
    for mode, size in (("after-exec", 3000), ("after-system", 7000)):
        proc = by_command[mode]
        T.check_eq(os.path.dirname(proc["file"]), user_dir, what + ": where %s wrote" % mode)
        T.check_exited(proc, 0)
        sizes = [l["bytes"] for l in proc.get("leaks", []) if l.get("kind") == "definite"]
        T.check_eq(sizes, [size], what + ": %s's leak: %r" % (mode, proc.get("leaks")))
    T.check_eq(os.path.dirname(by_command["exec"]["file"]), outdir, what + ": where the first image wrote")
    shells = [p for p in procs if p.get("comm") == "sh"]
    T.check(len(shells) == 1 and os.path.dirname(shells[0]["file"]) == user_dir,
            what + ": system()'s shell\n" + T.summary(procs))
    g = ctx.run_tool([ctx.prog("tp_setuid"), "exec"], outdir=ctx.mkdtemp("gate") + "/out",
                     tool_args=["--leak-gate"])
    T.check_eq(g.returncode, 23, what + ": the leak gate's status\n" + g.describe())
    for size in (3000, 7000):
        T.check("%d bytes in 1 block" % size in g.err, what + ": the gate names the %d bytes\n%s" % (size, g.err))
    # The lines: on tfalloc run's stderr, none in the program's (its own file, open to nobody).
    d = ctx.mkdtemp("stderr")
    os.chmod(d, 0o777)
    err = os.path.join(d, "child.err")
    script = "%s exec 2>%s" % (ctx.prog("tp_setuid"), err)
    lines = os.path.join(home, "lines")
    r = ctx.run_tool(["/bin/sh", "-c", script], quiet=False, outdir=lines)
    T.check_eq(r.returncode, 0, what + ": lines\n" + r.describe())
    child = open(err).read()
    T.check("tfalloc[" not in child, what + ": tfalloc's lines in the program's stderr:\n" + child)
    for prog in ("tp_setuid", "sh"):
        T.check(re.search(r"^tfalloc\[\d+\]: %s: peak .*; profile %s/uid-65534/" % (prog, re.escape(lines)),
                          r.err, re.M), what + ": %s's summary on tfalloc run's stderr:\n%s" % (prog, r.err))
    # The handed descriptor closed and another directory opened under its number: nothing is
    # written there; the snapshot made before stays in uid-65534.
    what = "tp_setuid exec-swap"
    theirs = ctx.mkdtemp("theirs")
    os.chmod(theirs, 0o777)
    swap_out = os.path.join(home, "swap")
    r = ctx.run_tool([ctx.prog("tp_setuid"), "exec-swap", theirs], outdir=swap_out,
                     env={"TFALLOC_FLUSH_INTERVAL_MS": "10"})
    T.check_eq(r.returncode, 0, what + "\n" + r.describe())
    T.check(r.out.startswith("swapped "), what + ": output\n" + r.describe())
    T.check_eq(os.listdir(theirs), [], what + ": files in the program's own directory")
    snaps = [f for f in os.listdir(os.path.join(swap_out, "uid-65534")) if f.endswith(".prof")]
    T.check_eq(len(snaps), 1, what + ": the snapshot in uid-65534: %r" % snaps)
    # python's subprocess with user="nobody": the child closes every descriptor but its own
    # (close_range) before the exec; tfalloc's to hand on are spared.
    what = "python3 subprocess user=nobody"
    script = ("import subprocess, sys\n"
              "code = \"import ctypes; c = ctypes.CDLL(None); c.malloc.restype = ctypes.c_void_p; "
              "[c.malloc(1000) for i in range(10)]; print('child')\"\n"
              "r = subprocess.run(['/usr/bin/python3', '-c', code], user='nobody', group='nogroup', "
              "extra_groups=[], capture_output=True, text=True)\n"
              "print(repr(r.stdout), repr(r.stderr), r.returncode)\n")
    sub_out = os.path.join(home, "subprocess")
    r, rep = ctx.run_and_report(["/usr/bin/python3", "-c", script], what=what, outdir=sub_out, quiet=False)
    T.check_eq(r.out, "'child\\n' '' 0\n", what + ": the child's output, and its stderr as its parent captured it")
    kids = [p for p in rep["processes"] if os.path.dirname(p["file"]) == os.path.join(sub_out, "uid-65534")]
    T.check(len(kids) == 1, what + ": the child's profile in uid-65534\n" + T.summary(rep["processes"]))
    lost = sum(l["bytes"] for l in kids[0].get("leaks", []) if l.get("kind") == "definite")
    T.check(lost >= 10000, what + ": its 10 blocks of 1000 bytes, lost: %r" % kids[0].get("leaks"))
    # A real program: setpriv(1) starts python3 as nobody.
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return
    what = "setpriv python3"
    code = ("import ctypes; c = ctypes.CDLL(None); c.malloc.restype = ctypes.c_void_p; "
            "[c.malloc(1000) for i in range(100)]; print('done')")
    argv = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-c", code]
    r, rep = ctx.run_and_report(argv, what=what, outdir=os.path.join(home, "setpriv"))
    T.check_eq(r.out, "done\n", what + ": output")
    py = [p for p in rep["processes"] if p.get("comm") == "python3"]
    T.check(len(py) == 1, what + ": python3's profile\n" + T.summary(rep["processes"]))
    lost = sum(l["bytes"] for l in py[0].get("leaks", []) if l.get("kind") == "definite")
    T.check(lost >= 100000, what + ": python3's 100 blocks of 1000 bytes, lost: %r" % py[0].get("leaks"))


def lines_to_tool(ctx, args, what):
    """tp_setuid ARGS under tfalloc run with the summaries on, its stderr to a file: its summary comes on
    tfalloc run's stderr through the FIFO's descriptor it kept from before it changed (it went to
    its own stderr: the FIFO, root's alone, refused it; a sandbox refused any open)."""
    d = ctx.mkdtemp("stderr")
    err = os.path.join(d, "child.err")
    os.chmod(d, 0o777)
    script = "%s %s 2>%s" % (ctx.prog("tp_setuid"), " ".join(args), err)
    r = ctx.run_tool(["/bin/sh", "-c", script], quiet=False)
    T.check_eq(r.returncode, 0, what + "\n" + r.describe())
    child = open(err).read()
    T.check("tfalloc[" not in child, what + ": tfalloc's lines in the program's stderr:\n" + child)
    T.check(re.search(r"^tfalloc\[\d+\]: tp_setuid: peak", r.err, re.M),
            what + ": the summary on tfalloc run's stderr:\n" + r.err)


def case_sandbox(ctx):
    """tp_setuid sandbox: a seccomp filter, after PR_SET_NO_NEW_PRIVS, that
    refuses to open files (ENOSYS, as man-db's sandbox): the profile is
    written all the same, through a descriptor reserved before the filter,
    and the leaks are classified (it was "no profile: ... Function not
    implemented").  And prctl from the constructor of a library the loader
    starts before the shim gets glibc's answer (it was ENOSYS)."""
    what = "tp_setuid sandbox"
    r, rep = ctx.run_and_report([ctx.prog("tp_setuid"), "sandbox"], what=what)
    T.check_eq(r.out, "sandboxed\n", what + ": output")
    T.check("no profile" not in r.err, what + ": stderr\n" + r.err)
    lines_to_tool(ctx, ["sandbox"], what)
    proc = T.only_process(rep, what)
    T.check_exited(proc, 0)
    T.check_eq(proc.get("complete"), True, what + ": the final profile, not the snapshot")
    kinds = sorted((l["bytes"], l["kind"]) for l in proc.get("leaks", []) if l["bytes"] in (1000, 4000, 5000))
    T.check_eq(kinds, [(1000, "definite"), (4000, "reachable"), (5000, "definite")],
               what + ": the leaks, classified: %r" % proc.get("leaks"))
    # A program executed inside the sandbox (man's col): it cannot create its file, and writes its
    # profile into the one its image before the exec kept (it had none: "Function not implemented").
    what = "tp_setuid sandbox-exec"
    r, rep = ctx.run_and_report([ctx.prog("tp_setuid"), "sandbox-exec"], what=what, quiet=False)
    T.check_eq(r.out, "sandboxed image\n", what + ": output")
    T.check("no profile" not in r.err, what + ": stderr\n" + r.err)
    proc = T.only_process(rep, what)
    T.check(proc["command"].endswith("after-sandbox"), what + ": the profile is the executed image's: %s"
            % proc["command"])
    T.check_exited(proc, 0)
    sizes = [l["bytes"] for l in proc.get("leaks", []) if l.get("kind") == "definite"]
    T.check_eq(sizes, [3000], what + ": its leak: %r" % proc.get("leaks"))
    T.check(("; profile %s\n" % proc["file"]) in r.err, what + ": the summary names the file\n" + r.err)
    g = ctx.run_tool([ctx.prog("tp_setuid"), "sandbox-exec"], tool_args=["--leak-gate"])
    T.check_eq(g.returncode, 23, what + ": the leak gate's status\n" + g.describe())
    # prctl in the constructor of a library the loader starts before the shim: glibc's answer.
    argv = [ctx.prog("tp_setuid"), "early"]
    plain = ctx.run_plain(argv)
    T.check_eq(plain.out, "early prctl 0\n", "tp_setuid early without tfalloc")
    r = ctx.run_preload(argv)
    T.check_eq(r.out, plain.out, "tp_setuid early: prctl before the shim's constructor")


def case_backend_enomem(ctx):
    plain, r, proc = run_both(ctx, [ctx.prog("tp_nomem"), "backend"], "tp_nomem backend")
    T.check("malloc 256M: NULL ENOMEM" in plain.out, "without tfalloc:\n" + plain.describe())
    T.check_eq(r.err, "", "stderr")
    T.check_exited(proc, 0)
    T.check_eq(proc.get("degraded"), False, "degraded")
    T.check_consistent(proc, allocator=ctx.allocator)
    throws = int(T.parse_lines(r, "THROWS")[0][0])
    base = ctx.baseline("tp_nomem", via="preload")
    T.check_ledger(proc, base, T.parse_ledger(r),
                   slack={"num_allocs": throws, "num_frees": throws, "total_bytes": throws * 1024,
                          "peak_bytes_in_use": 1024})


# ---- the file system --------------------------------------------------------


def can_lift_fsize():
    """Whether a process here may raise its hard RLIMIT_FSIZE (CAP_SYS_RESOURCE)."""
    code = ("import resource\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n")
    return subprocess.run(["/usr/bin/python3", "-c", code], stderr=subprocess.DEVNULL).returncode == 0


def case_fsize(ctx):
    # tp_sites' profile (its stacks, modules and sites) is about 2 KiB.
    argv = [ctx.prog("tp_sites")]
    plain = ctx.run_plain(argv)
    for limit, lifted in (("1024:unlimited", True), ("1024", can_lift_fsize())):
        what = "tp_sites under RLIMIT_FSIZE %s" % limit
        out = ctx.mkdtemp("out")
        r = run_preloaded(ctx, ["prlimit", "--fsize=" + limit, "--"], argv, outdir=out)
        T.same_output(plain, r, what)
        if lifted:
            T.check_eq(r.err, "", what + ": stderr")
            T.check_exited(T.only_process(ctx.report(out, what), what), 0)
        else:
            line = stderr_lines(r, what)[0]
            T.check("no profile: cannot write" in line and "File too large" in line, "the line: " + line)
    # The limit is the program's again after each snapshot (every millisecond while it allocates).
    script = ("import sys, time\n"
              "junk, t = [], time.monotonic()\n"
              "while time.monotonic() - t < 0.1:\n"
              "    junk.append(bytearray(64))\n"
              "try:\n"
              "    with open(sys.argv[1], 'wb') as f:\n"
              "        f.write(b'x' * 3000)\n"
              "    print('wrote 3000 bytes')\n"
              "except OSError as e:\n"
              "    print('errno', e.errno)\n")
    argv = ["/usr/bin/python3", "-c", script, os.path.join(ctx.scratch, "written")]
    prlimit = ["prlimit", "--fsize=2048:unlimited", "--"]
    plain = ctx._run(prlimit + argv, ctx.env(), None, 60, "plain")
    T.check_eq(plain.out, "errno 27\n", "python3 writing past the soft limit without tfalloc (EFBIG)")
    out = ctx.mkdtemp("out")
    r = run_preloaded(ctx, prlimit, argv, outdir=out, env={"TFALLOC_FLUSH_INTERVAL_MS": "1"})
    T.same_output(plain, r, "python3 writing past the soft limit under tfalloc, snapshots every ms")

    prlimit = ["prlimit", "--fsize=1024", "--"]

    # Snapshots that fail every millisecond: said once, the program unaffected.
    argv = [ctx.prog("tp_sites"), "errno", "200000"]
    plain = ctx.run_plain(argv)
    r = run_preloaded(ctx, prlimit, argv, env={"TFALLOC_FLUSH_INTERVAL_MS": "1"})
    T.same_output(plain, r, "tp_sites errno under RLIMIT_FSIZE, snapshots every ms")
    line = stderr_lines(r, "failing snapshots")[0]
    T.check("File too large" in line, "the line: " + line)

    # The tool: a usable message and status, not death by SIGXFSZ.
    out = ctx.mkdtemp("prof")
    ctx.run_preload([ctx.prog("tp_sites")], outdir=out)
    for fmt in ("text", "html"):
        dest = os.path.join(ctx.scratch, "report." + fmt)
        r = ctx._run(prlimit + [ctx.tool, "report", "--format", fmt, "-o", dest, out], ctx.env(), None, 60,
                     "report")
        T.check_eq(r.returncode, 1, "tfalloc report --format %s -o under RLIMIT_FSIZE: status\n%s"
                   % (fmt, r.describe()))
        T.check_eq(r.err, "tfalloc: report: %s: File too large\n" % dest, "tfalloc report's message")


def status_with_broken_stderr(ctx, argv, env):
    """argv's exit status with stdout to /dev/null and stderr a pipe whose
    reading end is closed before it starts."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=w,
                           env=ctx.env(env), cwd=ctx.scratch, timeout=120)
    finally:
        os.close(w)
    return p.returncode


def case_broken_pipe(ctx):
    out = ctx.mkdtemp("out")
    missing = os.path.join(ctx.scratch, "no", "such")
    shim = {"LD_PRELOAD": ctx.lib, "TFALLOC_OUTPUT": out}
    for argv, env in (([ctx.prog("tp_leaks")], {}),
                      ([ctx.prog("tp_leaks")], {"TFALLOC_CATCH_SIGNALS": "0"}),
                      ([ctx.prog("tp_sites"), "errno", "200000"],
                       {"TFALLOC_OUTPUT": missing, "TFALLOC_FLUSH_INTERVAL_MS": "1", "TFALLOC_QUIET": "1"})):
        what = "%s with %s, stderr a broken pipe" % (" ".join(os.path.basename(a) for a in argv), env)
        plain = status_with_broken_stderr(ctx, argv, {})
        T.check_eq(plain, 0, what + ": status without tfalloc")
        T.check_eq(status_with_broken_stderr(ctx, argv, dict(shim, **env)), plain, what + ": status under tfalloc")
    # tfalloc run's status is the command's (or the gate's), also when its closing lines go nowhere.
    for args, status in ((["--output", out, "--", ctx.prog("tp_leaks")], 0),
                         (["--quiet", "--output", out, "--leak-gate", "--", ctx.prog("tp_sites")], 23)):
        T.check_eq(status_with_broken_stderr(ctx, [ctx.tool, "run"] + args, {}), status,
                   "tfalloc run %s, stderr a broken pipe: status" % " ".join(args[:-2]))


def private_mount_ok(ctx, opts):
    """Whether this machine lets us mount a tmpfs in a mount namespace of our own."""
    d = ctx.mkdtemp("probe")
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "-o", opts,
                        "tmpfs", d], capture_output=True)
    return p.returncode == 0


def run_on_tmpfs(ctx, opts, argv, prepare="", env=None):
    """argv under the shim, its output directory a tmpfs mounted with opts in
    a mount namespace of its own (gone with the process).  prepare: shell
    commands run there first, with $D the directory.  Only argv runs under
    the shim."""
    if not private_mount_ok(ctx, opts):
        raise T.Skip("cannot mount a tmpfs in a private mount namespace here")
    d = ctx.mkdtemp("mnt")
    script = ('mount -t tmpfs -o "$TFA_OPTS" tmpfs "$D" || exit 99\n%s\n'
              'export LD_PRELOAD="$TFA_LIB"\nexec "$@"\n' % prepare)
    extra = {"D": d, "TFA_OPTS": opts, "TFA_LIB": ctx.lib, "TFALLOC_OUTPUT": d, "TFALLOC_QUIET": "1"}
    extra.update(env or {})
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"] + list(argv)
    r = ctx._run(cmd, ctx.env(extra), None, 120, "tmpfs", d)
    T.check(r.returncode != 99, "mount failed in the namespace\n" + r.describe())
    return r, d


def case_full_disk(ctx):
    fill = 'dd if=/dev/zero of="$D/fill" bs=4k 2>/dev/null; true'
    for argv, env in (([ctx.prog("tp_sites")], {}),
                      ([ctx.prog("tp_sites"), "errno", "200000"], {"TFALLOC_FLUSH_INTERVAL_MS": "1"})):
        plain = ctx.run_plain(argv)
        r, _ = run_on_tmpfs(ctx, "size=64k", argv, prepare=fill, env=env)
        what = " ".join(os.path.basename(a) for a in argv) + " on a full tmpfs"
        T.same_output(plain, r, what)
        line = stderr_lines(r, what)[0]
        T.check("no profile: cannot write" in line and "No space left on device" in line, "the line: " + line)

    out = ctx.mkdtemp("prof")
    ctx.run_preload([ctx.prog("tp_sites")], outdir=out)
    for fmt in ("text", "json", "folded", "pprof", "html"):
        r = ctx._run([ctx.tool, "report", "--format", fmt, "-o", "/dev/full", out], ctx.env(), None, 60, "report")
        T.check_eq((r.returncode, r.err), (1, "tfalloc: report: /dev/full: No space left on device\n"),
                   "tfalloc report --format %s -o /dev/full: status and message" % fmt)


def case_output_dir(ctx):
    argv = [ctx.prog("tp_leaks")]
    plain = ctx.run_plain(argv)
    missing = os.path.join(ctx.scratch, "no", "such")
    afile = os.path.join(ctx.scratch, "a-file")
    with open(afile, "w") as f:
        f.write("x")
    for outdir, why in ((missing, "No such file or directory"), (afile, "Not a directory")):
        r = ctx.run_preload(argv, outdir=outdir)
        T.same_output(plain, r, "TFALLOC_OUTPUT=" + outdir)
        line = stderr_lines(r, "TFALLOC_OUTPUT=" + outdir)[0]
        T.check(outdir in line and why in line, "the line does not name %s and %r: %s" % (outdir, why, line))
    T.check(not os.path.exists(missing), "the shim created the missing directory")
    with open(afile) as f:
        T.check_eq(f.read(), "x", "the file given as the directory")

    start = ctx.mkdtemp("start")
    elsewhere = os.path.join(start, "elsewhere")
    for d in (os.path.join(start, "out"), os.path.join(elsewhere, "out")):
        os.makedirs(d)
    chdir_argv = [ctx.prog("tp_leaks"), "chdir", elsewhere]
    r = ctx.run_preload(chdir_argv, outdir="out", cwd=start)
    T.same_output(ctx.run_plain(chdir_argv, cwd=start), r, "TFALLOC_OUTPUT=out, then chdir")
    T.check_eq(r.err, "", "TFALLOC_OUTPUT=out, then chdir: stderr")
    T.check_eq(os.listdir(os.path.join(elsewhere, "out")), [], "profiles in the directory the program moved to")
    T.only_process(ctx.report(os.path.join(start, "out"), "TFALLOC_OUTPUT=out"), "TFALLOC_OUTPUT=out")

    r, d = run_on_tmpfs(ctx, "ro,size=64k", argv)
    T.same_output(plain, r, "a read-only output directory")
    line = stderr_lines(r, "a read-only output directory")[0]
    T.check(d in line and "Read-only file system" in line, "the line: " + line)


def case_no_proc(ctx):
    if not private_mount_ok(ctx, "size=64k"):
        raise T.Skip("cannot mount in a private mount namespace here")
    argv = [ctx.prog("tp_leaks")]
    plain = ctx.run_plain(argv)
    out = ctx.mkdtemp("out")
    script = 'umount -l /proc || exit 99\nexport LD_PRELOAD="$TFA_LIB"\nexec "$@"\n'
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"] + argv
    r = ctx._run(cmd, ctx.env({"TFA_LIB": ctx.lib, "TFALLOC_OUTPUT": out, "TFALLOC_QUIET": "1"}), None, 60,
                 "no /proc", out)
    if r.returncode == 99:
        raise T.Skip("cannot unmount /proc in a private mount namespace here")
    T.same_output(plain, r, "tp_leaks without /proc")
    T.check_eq(r.err, "", "tp_leaks without /proc: stderr")
    files = os.listdir(out)
    T.check(len(files) == 1 and files[0].startswith("tfalloc.tp_leaks."), "the profile's name: %r" % files)
    rep = ctx.report(out, "no /proc")
    proc = T.only_process(rep, "no /proc")
    T.check_eq((proc["comm"], proc["command"], os.path.realpath(proc["exe"])),
               ("tp_leaks", argv[0], os.path.realpath(argv[0])), "comm, command, exe")
    frames = rep["frames"]
    mains = [f for f in frames if f.get("function") == "main" and os.path.realpath(f.get("module", "")) ==
             os.path.realpath(argv[0])]
    T.check(mains, "no frame symbolized as main in tp_leaks: %r" % frames[:4])


def case_symlink(ctx):
    shared = ctx.mkdtemp("shared")
    os.chmod(shared, 0o1777)
    victim = os.path.join(ctx.scratch, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    os.chmod(victim, 0o644)
    argv = [ctx.prog("tp_leaks")]
    plain = ctx.run_plain(argv)
    # sh plants the links under its own pid, which the program keeps through
    # exec; the links belong to another user where we can make one (root).
    plant = ('for n in "$D/tfalloc.tp_leaks.$$.prof" "$D/tfalloc.tp_leaks.$$.prof.tmp" '
             '"$D/tfalloc.tp_leaks.$$.1.prof.tmp"; do $AS ln -s "$V" "$n" || exit 98; done\n'
             'echo $$ >"$PIDFILE"\nexport LD_PRELOAD="$TFA_LIB"\nexec "$@"\n')
    as_other = "setpriv --reuid=%d --regid=%d --clear-groups" % (NOBODY, NOBODY) if os.geteuid() == 0 else ""
    pidfile = os.path.join(ctx.scratch, "pid")
    env = ctx.env({"D": shared, "V": victim, "AS": as_other, "PIDFILE": pidfile, "TFA_LIB": ctx.lib,
                   "TFALLOC_OUTPUT": shared, "TFALLOC_QUIET": "1"})
    r = ctx._run(["sh", "-c", plant, "sh"] + argv, env, None, 60, "planted", shared)
    T.same_output(plain, r, "tp_leaks with symlinks planted")
    T.check_eq(r.err, "", "stderr")
    with open(victim) as f:
        T.check_eq(f.read(), "precious\n", "the file the links point to")
    st = os.stat(victim)
    T.check_eq((stat.S_IMODE(st.st_mode), st.st_uid), (0o644, os.geteuid()), "mode and owner of the file")
    with open(pidfile) as f:
        pid = int(f.read())
    profs = sorted(n for n in os.listdir(shared) if not os.path.islink(os.path.join(shared, n)))
    T.check_eq(profs, ["tfalloc.tp_leaks.%d.1.prof" % pid], "files other than the planted links")
    prof = os.path.join(shared, profs[0])
    st = os.lstat(prof)
    T.check(stat.S_ISREG(st.st_mode), "the profile is not a regular file")
    T.check_eq(stat.S_IMODE(st.st_mode), 0o600, "the profile's mode")
    T.check_exited(T.only_process(ctx.report(prof, "profile"), "profile"), 0)


# ---- exit paths ------------------------------------------------------------


def case_exit_paths(ctx):
    path = ctx.prog("tp_signal")
    ways = [("abort", -6, "signal", 6), ("fault", -11, "signal", 11), ("_exit", 7, "exit", 7),
            ("quick_exit", 9, "exit", 9)] + [("exit_race", 5, "exit", 5), ("exit_fast", 5, "exit", 5)] * 10
    ways = [(w + (None,)) for w in ways]
    ways += [("overflow", -11, "signal", 11, m) for m in ("unwind", "fp", "none")]
    ways += [("altstack", -15, "signal", 15, m) for m in ("unwind", "none")]
    ways += [("cancel", 0, "exit", 0, m) for m in ("unwind", "none")]
    ways += [("cancel-series", 0, "exit", 0, m) for m in ("unwind", "none")]
    ways += [("overflow_alloc", -11, "signal", 11, m) for m in ("unwind", "fp")] * 3
    for how, status, reason, code, stacks in ways:
        argv = [path, str(code) if how == "altstack" else "0", how.split("-")[0]]
        plain = ctx.run_plain(argv)
        T.check_eq(plain.returncode, status, "tp_signal %s without tfalloc: status\n%s" % (how, plain.describe()))
        env = {"TFALLOC_STACKS": stacks} if stacks else None
        if how.startswith("cancel"):
            # Snapshots in the cancelled thread's calls; without them, the series' points (its
            # read of /proc/self/statm under the series' lock).
            env["TFALLOC_FLUSH_INTERVAL_MS"] = "5" if how == "cancel" else "0"
        how = how + (" with TFALLOC_STACKS=" + stacks if stacks else "")
        kw = {"timeout": 30} if how.startswith("cancel") else {}  # its failure is a hang
        r, rep = ctx.run_and_report(argv, via="preload", what="tp_signal " + how, expect_status=status, env=env,
                                    **kw)
        if how.startswith("altstack"):
            T.check_eq(r.out, "SIGNAL %d\n" % r.pid, "tp_signal %s: output" % how)  # its pid
        else:
            T.same_output(plain, r, "tp_signal " + how)
        proc = T.only_process(rep, "tp_signal " + how)
        T.check_eq((proc.get("complete"), proc.get("end_reason"), proc.get("exit_code")), (True, reason, code),
                   "tp_signal %s: complete, end_reason, exit_code" % how)
        T.check_ge(T.device(proc)["bytes_in_use"], 4444, "tp_signal %s: bytes in use at the end" % how)
        text = ctx._run([ctx.tool, "report", r.outdir], ctx.env(), None, 60, "report")
        want = "killed by signal %d" % code if reason == "signal" else "exited with status %d" % code
        T.check(want in text.out, "the text report does not say %r:\n%s" % (want, text.out[:800]))


# ---- the control channel ----------------------------------------------------


def case_control_user(ctx):
    if os.geteuid() != 0:
        raise T.Skip("needs root to run processes as two other users")
    argv = [ctx.prog("tp_live"), "idle", "10", "100"]
    out = ctx.mkdtemp("out")
    os.chmod(out, 0o777)
    env = ctx.env({"TFA_LIB": ctx.lib, "TFALLOC_OUTPUT": out, "TFALLOC_QUIET": "1"})
    as_nobody = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]
    p = subprocess.Popen(as_nobody + ["sh", "-c", 'export LD_PRELOAD="$TFA_LIB"; exec "$@"', "sh"] + argv,
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    try:
        T.check(p.stdout.readline().startswith(b"READY"), "tp_live did not get ready")
        # daemon (uid 1) asks for nobody's profile: the kernel refuses the signal.
        as_daemon = ["setpriv", "--reuid=1", "--regid=1", "--clear-groups"]
        r = ctx._run(as_daemon + [ctx.tool, "snapshot", str(p.pid)], ctx.env(), None, 60, "snapshot", cwd="/")
        T.check_eq(r.returncode, 1, "tfalloc snapshot of another user's process: status\n" + r.describe())
        stderr_lines(r, "tfalloc snapshot of another user's process")
        T.check_eq(r.out, "", "stdout of the refused snapshot")
        T.check_eq(os.listdir(out), [], "files written for the refused request")
        T.check(p.poll() is None, "the process ended after the refused request")

        # The answers' directory of nobody, squatted by daemon before nobody asks.
        answers = "/tmp/tfalloc-%d" % NOBODY
        if os.path.lexists(answers):
            raise T.Skip("%s exists already: it is not ours to squat" % answers)
        elsewhere = ctx.mkdtemp("elsewhere")
        os.chown(elsewhere, NOBODY, NOBODY)
        os.chmod(elsewhere, 0o700)
        for how in ("dir", "symlink"):
            try:
                if how == "dir":
                    os.mkdir(answers)
                    os.chown(answers, 1, 1)
                    os.chmod(answers, 0o777)
                else:
                    os.symlink(elsewhere, answers)
                    os.lchown(answers, 1, 1)
                r = ctx._run(as_nobody + [ctx.tool, "snapshot", "--timeout", "10", str(p.pid)], ctx.env(), None, 60,
                             "snapshot", cwd="/")
                what = "tfalloc snapshot with %s squatted (%s)" % (answers, how)
                T.check_eq(r.returncode, 1, what + ": status\n" + r.describe())
                stderr_lines(r, what)
                T.check(answers in r.err, what + ": the line does not name the directory: " + r.err)
                T.check_eq(os.listdir(elsewhere), [], what + ": files in the directory the link points to")
                if how == "dir":
                    T.check_eq(os.listdir(answers), [], what + ": files in the squatted directory")
                T.check(p.poll() is None, what + ": the process ended")
            finally:
                if os.path.islink(answers) or os.path.isfile(answers):
                    os.unlink(answers)
                elif os.path.isdir(answers):
                    for f in os.listdir(answers):
                        os.unlink(os.path.join(answers, f))
                    os.rmdir(answers)
        T.check_eq(os.listdir(out), [], "files written for the refused requests")
    finally:
        o, e = p.communicate(b"", timeout=60)
    T.check_eq(p.returncode, 0, "tp_live's status\n" + e.decode(errors="replace"))


T.main({
    "shim_memory": case_shim_memory,
    "shim_stacks": case_shim_stacks,
    "start_memory": case_start_memory,
    "backend_enomem": case_backend_enomem,
    "exit_memory": case_exit_memory,
    "nofile": case_nofile,
    "closed_fds": case_closed_fds,
    "setuid": case_setuid,
    "setuid_exec": case_setuid_exec,
    "sandbox": case_sandbox,
    "fsize": case_fsize,
    "broken_pipe": case_broken_pipe,
    "full_disk": case_full_disk,
    "output_dir": case_output_dir,
    "no_proc": case_no_proc,
    "symlink": case_symlink,
    "exit_paths": case_exit_paths,
    "control_user": case_control_user,
})
