# SPDX-License-Identifier: MIT
"""Tests of `tfalloc run`: options, exit statuses, signals, the environment the
command gets, the output directory, finding the shim, and the one-line
warnings for programs LD_PRELOAD cannot reach.  The shim is a stand-in
(fake_shim.c) named by TFALLOC_LIBRARY: these tests are about the command.

usage: test_run.py TFALLOC FAKE_SHIM STATIC_HELLO CASE
"""

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

TFALLOC = FAKE = STATIC = TMP = None

# Prints what the command sees of tfalloc's environment, one value a line.
SHOW_ENV = ('printf "%s\\n" "$LD_PRELOAD" "$TFALLOC_OUTPUT" "${TFALLOC_ALLOCATOR-unset}" '
            '"${TFALLOC_LIMIT-unset}" "${TFALLOC_QUIET-unset}"')


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def eq(got, want, what="value"):
    if got != want:
        raise Failure(f"{what}:\n  got:  {got!r}\n  want: {want!r}")


def env(**extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("TFALLOC_") and k != "LD_PRELOAD"}
    e["TFALLOC_LIBRARY"] = FAKE
    for k, v in extra.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def run(*args, exe=None, cwd=None, **extra):
    p = subprocess.run([exe or TFALLOC, "run", *args], capture_output=True, env=env(**extra),
                       cwd=cwd or TMP, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def final_line(d):
    return f"tfalloc: {count_prof(d)} profile(s) in {d}; read them with: tfalloc report {d}\n"


def count_prof(d):
    return sum(1 for n in os.listdir(d) if n.endswith(".prof") and len(n) > 5)


def case_usage():
    hint = " (see 'tfalloc run --help')"
    for args, msg in [
        ((), "no command given (usage: tfalloc run [options] [--] CMD [ARGS...])"),
        (("--quiet",), "no command given (usage: tfalloc run [options] [--] CMD [ARGS...])"),
        (("--quiet", "--"), "no command given (usage: tfalloc run [options] [--] CMD [ARGS...])"),
        (("--bogus", "--", "true"), "unknown option '--bogus'" + hint),
        (("-x", "true"), "unknown option '-x'" + hint),
        (("--outputs", "d", "true"), "unknown option '--outputs'" + hint),
        (("--quiet=1", "true"), "option --quiet takes no value"),
        (("--output",), "option --output needs a value" + hint),
        (("--output=", "true"), "option --output needs a non-empty value"),
        (("--allocator", "", "true"), "option --allocator needs a non-empty value"),
        (("--limit", "12Q", "true"), "--limit 12Q: not a size (digits with an optional K, M, G or T suffix)"),
        (("--limit=-1", "true"), "--limit -1: not a size (digits with an optional K, M, G or T suffix)"),
        (("--limit", "1.5M", "true"), "--limit 1.5M: not a size (digits with an optional K, M, G or T suffix)"),
        (("--limit", "M", "true"), "--limit M: not a size (digits with an optional K, M, G or T suffix)"),
        (("--limit", "1KB2", "true"), "--limit 1KB2: not a size (digits with an optional K, M, G or T suffix)"),
        (("--limit", "1 K", "true"), "--limit 1 K: not a size (digits with an optional K, M, G or T suffix)"),
        (("--limit", "0x10", "true"), "--limit 0x10: not a size (digits with an optional K, M, G or T suffix)"),
        (("--limit", "1iB", "true"), "--limit 1iB: not a size (digits with an optional K, M, G or T suffix)"),
        (("--limit", "99999999999999999999", "true"), "--limit 99999999999999999999: too large"),
        (("--limit", "16777216T", "true"), "--limit 16777216T: too large"),
    ]:
        marker = os.path.join(TMP, "ran")
        if args and args[-1] == "true":
            args = args[:-1] + ("touch", marker)
        rc, out, err = run(*args)
        eq((rc, err), (125, f"tfalloc: run: {msg}\n"), f"tfalloc run {args}")
        check(not os.path.exists(marker), "the command must not run after a usage error")
        check(not any(n.startswith("tfalloc.") for n in os.listdir(TMP)),
              "no output directory after a usage error")
    for h in ("-h", "--help"):
        rc, out, err = run(h, "true")
        eq((rc, err), (0, ""), h)
        check(out.startswith("usage: tfalloc run [options] [--] CMD [ARGS...]\n"), f"{h}: {out!r}")
    # valid sizes pass through unchanged; the largest one fits
    for size in ("0", "512", "64K", "64k", "1M", "2G", "1T", "10MB", "10MiB", "3kib", "7B",
                 "16777215T", "18446744073709551615"):
        rc, out, err = run("--quiet", "--output", "o", "--limit", size, "sh", "-c", SHOW_ENV)
        eq(rc, 0, f"--limit {size}: {err}")
        eq(out.split("\n")[3], size, f"TFALLOC_LIMIT for --limit {size}")
    # options after CMD are CMD's; -- lets CMD start with a dash
    rc, out, err = run("--quiet", "--output=o", "sh", "-c", 'echo "$@"', "x", "--quiet", "--limit")
    eq((rc, out), (0, "--quiet --limit\n"), "arguments after CMD")
    rc, out, err = run("--quiet", "--output=o", "--", "sh", "-c", "echo ok")
    eq((rc, out), (0, "ok\n"), "-- before CMD")


def case_exit_status():
    for cmd, want in [(["true"], 0), (["false"], 1), (["sh", "-c", "exit 7"], 7),
                      (["sh", "-c", "exit 255"], 255), (["sh", "-c", "kill -SEGV $$"], 139),
                      (["sh", "-c", "kill -KILL $$"], 137), (["sh", "-c", "kill -TERM $$"], 143),
                      (["sh", "-c", "kill -ABRT $$"], 134)]:
        rc, out, err = run("--quiet", "--output", "o", *cmd)
        eq(rc, want, f"exit status of {cmd} (stderr {err!r})")
        eq(err, "", f"stderr of {cmd} with --quiet")
    # stdin, stdout and stderr are the command's
    p = subprocess.run([TFALLOC, "run", "--quiet", "--output", "o", "sh", "-c",
                        "read x; echo out:$x; echo err:$x >&2"], input=b"hello\n",
                       capture_output=True, env=env(), cwd=TMP, timeout=30)
    eq((p.returncode, p.stdout, p.stderr), (0, b"out:hello\n", b"err:hello\n"), "stdio")


def spawn(*args):
    return subprocess.Popen([TFALLOC, "run", "--quiet", "--output", "o", *args], env=env(),
                            cwd=TMP, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_child(p, marker):
    """Waits until the command has written marker (so it runs and has its handlers)."""
    for _ in range(500):
        if os.path.exists(marker):
            return
        if p.poll() is not None:
            raise Failure(f"tfalloc ended early: {p.returncode} {p.stderr.read()!r}")
        time.sleep(0.01)
    raise Failure("the command did not start")


def case_signals():
    marker = os.path.join(TMP, "started")
    # SIGTERM and SIGHUP sent to tfalloc reach the command: 128 + signal
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if os.path.exists(marker):
            os.unlink(marker)
        p = spawn("sh", "-c", f"touch {marker}; exec sleep 20")
        wait_for_child(p, marker)
        t0 = time.time()
        p.send_signal(sig)
        rc = p.wait(timeout=10)
        eq(rc, 128 + sig, f"exit status after {sig.name}")
        check(time.time() - t0 < 5, f"{sig.name} was forwarded at once")
    # SIGINT and SIGQUIT sent to tfalloc alone are ignored (the terminal sends
    # them to the whole foreground group): the command finishes normally
    for sig in (signal.SIGINT, signal.SIGQUIT):
        os.unlink(marker)
        p = spawn("sh", "-c", f"touch {marker}; sleep 0.5; exit 3")
        wait_for_child(p, marker)
        p.send_signal(sig)
        eq(p.wait(timeout=10), 3, f"exit status after {sig.name} to tfalloc")
    # ... while the command itself gets its default dispositions back
    os.unlink(marker)
    p = spawn("sh", "-c", f"touch {marker}; kill -INT $$; exit 0")
    eq(p.wait(timeout=10), 128 + signal.SIGINT, "SIGINT is not ignored in the command")


def case_environment():
    rc, out, err = run("--output", "out", "sh", "-c", SHOW_ENV, LD_PRELOAD=None)
    d = os.path.join(TMP, "out")
    eq(rc, 0, f"status ({err})")
    eq(out.split("\n"), [FAKE, d, "unset", "unset", "unset", ""], "default environment")
    eq(err, final_line(d), "final line")
    prev = os.path.join(TMP, "libprevious.so")  # something preloaded already: kept after the shim
    shutil.copy(FAKE, prev)
    rc, out, err = run("--allocator", "glibc", "--limit", "64K", "--quiet", "--output=out2",
                       "sh", "-c", SHOW_ENV, LD_PRELOAD=prev,
                       ASAN_OPTIONS="verify_asan_link_order=0")  # for a TFA_SANITIZE build of tfalloc
    eq(rc, 0, f"status ({err})")
    eq(out.split("\n"), [f"{FAKE}:{prev}", os.path.join(TMP, "out2"), "glibc", "64K", "1", ""],
       "environment with options and a previous LD_PRELOAD")
    eq(err, "", "--quiet: no final line")
    # an empty LD_PRELOAD is not kept
    rc, out, err = run("--quiet", "--output=o", "sh", "-c", SHOW_ENV, LD_PRELOAD="")
    eq(out.split("\n")[0], FAKE, "empty previous LD_PRELOAD")
    # the user's own TFALLOC_* settings pass through; TFALLOC_OUTPUT is replaced
    rc, out, err = run("--quiet", "--output=o", "sh", "-c", SHOW_ENV, TFALLOC_ALLOCATOR="mine",
                       TFALLOC_OUTPUT="/elsewhere")
    eq(out.split("\n")[1:3], [os.path.join(TMP, "o"), "mine"], "user settings")
    # the shim is really preloaded into the command and its children
    rc, out, err = run("--output", "p", "sh", "-c", "sh -c 'echo $$'; echo $$", TFALLOC_FAKE_PROFILE="1")
    pids = sorted(out.split())
    eq(sorted(n[:-5] for n in os.listdir(os.path.join(TMP, "p"))), pids, "profiles of every process")
    eq(err, final_line(os.path.join(TMP, "p")), "final line counts them")
    check(err.startswith("tfalloc: 2 profile(s) in "), f"two profiles: {err!r}")


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def case_output_dir():
    os.umask(0o022)
    # default: ./tfalloc.<basename of CMD>.<pid of tfalloc>
    p = subprocess.Popen([TFALLOC, "run", "/bin/sh", "-c", 'echo "$TFALLOC_OUTPUT"'], env=env(),
                         cwd=TMP, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=30)
    d = os.path.join(TMP, f"tfalloc.sh.{p.pid}")
    eq((p.returncode, out.decode()), (0, d + "\n"), "default output directory")
    eq(mode(d), 0o700, "mode of the default directory")
    eq(err.decode(), f"tfalloc: 0 profile(s) in {d}; read them with: tfalloc report {d}\n",
       "final line")
    # nested, relative: created 0700 and given as an absolute path
    rc, out, err = run("--quiet", "--output", "a/b/c", "sh", "-c", 'echo "$TFALLOC_OUTPUT"')
    eq((rc, out), (0, os.path.join(TMP, "a/b/c") + "\n"), "nested directory")
    for sub in ("a", "a/b", "a/b/c"):
        eq(mode(os.path.join(TMP, sub)), 0o700, f"mode of {sub}")
    # relative with .. and a symlink: canonical
    os.symlink("a", os.path.join(TMP, "link"))
    rc, out, err = run("--quiet", "--output", "link/b/../x/", "sh", "-c", 'echo "$TFALLOC_OUTPUT"')
    eq(out, os.path.join(TMP, "a/x") + "\n", "canonical path")
    # an existing directory is used as it is
    os.mkdir(os.path.join(TMP, "old"), 0o755)
    rc, out, err = run("--quiet", "--output", os.path.join(TMP, "old"), "true")
    eq((rc, mode(os.path.join(TMP, "old"))), (0, 0o755), "existing directory kept")
    # a file in the way
    open(os.path.join(TMP, "file"), "w").close()
    marker = os.path.join(TMP, "ran")
    rc, out, err = run("--output", "file", "touch", marker)
    eq((rc, err), (125, "tfalloc: run: cannot create the output directory file: Not a directory\n"),
       "file in the way")
    rc, out, err = run("--output", "file/sub", "touch", marker)
    eq((rc, err), (125, "tfalloc: run: cannot create the output directory file/sub: Not a directory\n"),
       "file in the path")
    check(not os.path.exists(marker), "the command must not run without its output directory")
    # a directory whose name needs quoting in the suggested command
    rc, out, err = run("--output", "it's here", "true")
    d = os.path.join(TMP, "it's here")
    eq(err, f"tfalloc: 0 profile(s) in {d}; read them with: tfalloc report "
       f"'{TMP}/it'\\''s here'\n", "quoted suggestion")


def case_library():
    marker = os.path.join(TMP, "ran")
    for lib, msg in [
        ("libtfalloc.so", "TFALLOC_LIBRARY=libtfalloc.so: not an absolute path"),
        ("/nonexistent/libtfalloc.so",
         "TFALLOC_LIBRARY=/nonexistent/libtfalloc.so: No such file or directory; the command was not run"),
        (TMP, f"TFALLOC_LIBRARY={TMP}: not a regular file; the command was not run"),
    ]:
        rc, out, err = run("touch", marker, TFALLOC_LIBRARY=lib)
        eq((rc, err), (125, f"tfalloc: run: {msg}\n"), f"TFALLOC_LIBRARY={lib}")
        check(not os.path.exists(marker), "the command must not run unprofiled")
    # a path LD_PRELOAD cannot hold
    spaced = os.path.join(TMP, "with space")
    os.mkdir(spaced)
    shutil.copy(FAKE, os.path.join(spaced, "libtfalloc.so"))
    rc, out, err = run("touch", marker, TFALLOC_LIBRARY=os.path.join(spaced, "libtfalloc.so"))
    eq((rc, err), (125, f"tfalloc: run: the shim's path '{spaced}/libtfalloc.so' contains a space "
                        "or a colon: LD_PRELOAD cannot name it\n"), "space in the path")
    # unset (or empty): <dir of tfalloc>/../lib/libtfalloc.so, canonical
    tree = os.path.join(TMP, "tree")
    os.makedirs(os.path.join(tree, "bin"))
    exe = os.path.join(tree, "bin", "tfalloc")
    shutil.copy(TFALLOC, exe)
    want = os.path.join(tree, "bin/../lib/libtfalloc.so")
    for value in (None, ""):
        rc, out, err = run("touch", marker, exe=exe, TFALLOC_LIBRARY=value)
        eq((rc, err), (125, f"tfalloc: run: cannot find the shim {want}: No such file or directory; "
                            "the command was not run (set TFALLOC_LIBRARY)\n"), "no shim beside tfalloc")
        check(not os.path.exists(marker), "the command must not run unprofiled")
    os.makedirs(os.path.join(tree, "lib"))
    shutil.copy(FAKE, os.path.join(tree, "lib", "libtfalloc.so"))
    rc, out, err = run("--quiet", "--output=o", "sh", "-c", SHOW_ENV, exe=exe, TFALLOC_LIBRARY=None)
    eq((rc, out.split("\n")[0]), (0, os.path.join(tree, "lib", "libtfalloc.so")), "shim beside tfalloc")


def static_line(path):
    return (f"tfalloc: {path} is statically linked: LD_PRELOAD cannot reach its allocations; "
            "it runs without a profile\n")


def case_checks():
    # a static program: one line, and it still runs
    rc, out, err = run("--quiet", "--output=o", STATIC)
    eq((rc, out, err), (0, "static hello\n", static_line(STATIC)), "static program")
    # found on PATH
    bindir = os.path.dirname(STATIC)
    rc, out, err = run("--quiet", "--output=o", os.path.basename(STATIC),
                       PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    eq((rc, err), (0, static_line(STATIC)), "static program from PATH")
    # a dynamic program: nothing
    rc, out, err = run("--quiet", "--output=o", "/bin/true")
    eq((rc, err), (0, ""), "dynamic program")
    # a script: the check applies to its interpreter
    script = os.path.join(TMP, "script")
    with open(script, "w") as f:
        f.write(f"#!{STATIC} -x\nnot read\n")
    os.chmod(script, 0o755)
    rc, out, err = run("--quiet", "--output=o", script)
    eq((rc, out, err), (0, "static hello\n", static_line(STATIC)), "script with a static interpreter")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho shell\n")
    rc, out, err = run("--quiet", "--output=o", script)
    eq((rc, out, err), (0, "shell\n", ""), "script with a dynamic interpreter")
    with open(script, "w") as f:
        f.write(f"#! /usr/bin/env {os.path.basename(STATIC)}\n")
    rc, out, err = run("--quiet", "--output=o", script,
                       PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    eq((rc, out, err), (0, "static hello\n", static_line(STATIC)), "#!/usr/bin/env of a static program")
    # setuid and setgid programs owned by someone else
    prog = os.path.join(TMP, "suid-true")
    shutil.copy("/bin/true", prog)
    if os.getuid() == 0:
        os.chown(prog, 65534, 65534)
        os.chmod(prog, 0o4755)
        rc, out, err = run("--quiet", "--output=o", prog)
        eq((rc, err), (0, f"tfalloc: {prog} is setuid: the loader ignores LD_PRELOAD for it; "
                          "it runs without a profile\n"), "setuid program")
        os.chown(prog, 0, 65534)
        os.chmod(prog, 0o2755)
        rc, out, err = run("--quiet", "--output=o", prog)
        eq((rc, err), (0, f"tfalloc: {prog} is setgid: the loader ignores LD_PRELOAD for it; "
                          "it runs without a profile\n"), "setgid program")
        os.chown(prog, 0, 0)
    # setuid to ourselves: the loader treats it as usual, no line
    os.chmod(prog, 0o6755)
    rc, out, err = run("--quiet", "--output=o", prog)
    eq((rc, err), (0, ""), "setuid to ourselves")


def case_not_found():
    d = os.path.join(TMP, "o")
    rc, out, err = run("--output=o", "tfalloc-no-such-command-xyz")
    eq((rc, err), (127, "tfalloc: run: tfalloc-no-such-command-xyz: command not found\n"), "not on PATH")
    rc, out, err = run("--output=o", "./nope")
    eq((rc, err), (127, "tfalloc: run: ./nope: No such file or directory\n"), "no such file")
    data = os.path.join(TMP, "data.txt")
    with open(data, "w") as f:
        f.write("echo hi\n")
    os.chmod(data, 0o644)
    rc, out, err = run("--output=o", "./data.txt")
    eq((rc, err), (126, "tfalloc: run: ./data.txt: Permission denied\n"), "not executable")
    rc, out, err = run("--output=o", TMP)
    eq((rc, err), (126, f"tfalloc: run: {TMP}: Permission denied\n"), "a directory")
    rc, out, err = run("--output=o", "")
    eq((rc, err), (127, "tfalloc: run: : command not found\n"), "empty command")
    # a file without #! runs through /bin/sh, as execvp does
    os.chmod(data, 0o755)
    rc, out, err = run("--quiet", "--output=o", "./data.txt")
    eq((rc, out, err), (0, "hi\n", ""), "script without #!")
    eq(count_prof(d), 0, "nothing written")


def case_final_line():
    touch = 'touch "$TFALLOC_OUTPUT/a.prof" "$TFALLOC_OUTPUT/b.prof" "$TFALLOC_OUTPUT/c.txt" "$TFALLOC_OUTPUT/.prof"'
    d = os.path.join(TMP, "fl")
    rc, out, err = run("--output", "fl", "sh", "-c", touch)
    eq((rc, err), (0, f"tfalloc: 2 profile(s) in {d}; read them with: tfalloc report {d}\n"), "count")
    # also after a failure of the command
    rc, out, err = run("--output", "fl", "sh", "-c", "exit 3")
    eq((rc, err), (3, f"tfalloc: 2 profile(s) in {d}; read them with: tfalloc report {d}\n"), "on failure")
    rc, out, err = run("--quiet", "--output", "fl", "sh", "-c", touch)
    eq((rc, err), (0, ""), "--quiet")
    for v in ("1", "true", "YES", "on"):
        rc, out, err = run("--output", "fl", "true", TFALLOC_QUIET=v)
        eq((rc, err), (0, ""), f"TFALLOC_QUIET={v}")
    rc, out, err = run("--output", "fl", "true", TFALLOC_QUIET="0")
    eq((rc, err.startswith("tfalloc: 2 profile(s)")), (0, True), "TFALLOC_QUIET=0")


def main():
    global TFALLOC, FAKE, STATIC, TMP
    if len(sys.argv) != 5:
        sys.exit("usage: test_run.py TFALLOC FAKE_SHIM STATIC_HELLO CASE")
    TFALLOC, FAKE, STATIC = (os.path.realpath(a) for a in sys.argv[1:4])
    case = globals().get("case_" + sys.argv[4])
    if case is None:
        sys.exit(f"unknown case {sys.argv[4]}")
    with tempfile.TemporaryDirectory(prefix="tfa-run-") as tmp:
        TMP = os.path.realpath(tmp)
        try:
            case()
        except Failure as e:
            print(f"FAIL {sys.argv[4]}: {e}")
            sys.exit(1)
    print(f"PASS {sys.argv[4]}")


if __name__ == "__main__":
    main()
