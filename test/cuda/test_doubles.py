#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The CUDA test doubles and programs, without the shim (CTest label cuda).

Each case runs a tc_* program against the doubles (LD_LIBRARY_PATH to the
doubles' directory, FAKECUDA_LOG to a fresh file) and checks that the doubles
behave: the program's exit status and output, its CUDA_LEDGER lines against
an independent account computed from the fake driver's log (every successful
allocation and free the driver made, with size and device), a few absolute
figures, and what the log says was looked up and called.

Usage: test_doubles.py --bin DIR --lib DIR --stubs 0|1 --nvcc 0|1 --case NAME
                       [--preload LIB]
Exit 0: pass, 1: fail, 77: skipped (CTest SKIP_RETURN_CODE).

--preload LIB runs the programs with LD_PRELOAD=LIB (the shim; its profiles go
to a temporary directory) and checks that they still behave: same outputs,
ledgers equal to the driver's log.  What the preload is expected to change is
then not checked: the identity of cuGetProcAddress's answers (resolver
cases) and ld.so's bindings into libcuda.so.1.
"""
import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77
ARGS = None
TMP = None


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FAKECUDA_") and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    return env


def run(prog, args=(), env=None, rc=0, tag=None, ld_debug=False):
    """Runs bin/prog against the doubles; returns (stdout, log lines, stderr)."""
    path = os.path.join(ARGS.bin, prog)
    if not os.path.exists(path):
        skip(prog + " was not built")
    log = os.path.join(TMP, (tag or prog) + ".log")
    if os.path.exists(log):
        os.unlink(log)
    e = clean_env()
    e["LD_LIBRARY_PATH"] = ARGS.lib
    e["FAKECUDA_LOG"] = log
    if ld_debug:
        e["LD_DEBUG"] = "bindings"
    if ARGS.preload:
        e["LD_PRELOAD"] = ARGS.preload
        e["TFALLOC_OUTPUT"] = os.path.join(TMP, "profiles")
        e["TFALLOC_QUIET"] = "1"
    e.update(env or {})
    p = subprocess.run([path] + list(args), env=e, capture_output=True, text=True, timeout=90)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    if p.returncode != rc:
        sys.stderr.write(p.stdout + p.stderr[-4000:])
        raise Fail("%s exited %d, expected %d" % (prog, p.returncode, rc))
    return p.stdout, lines, p.stderr


# ---- the ledger and the driver's own account ------------------------------------

def ledgers(out):
    """{(process or None, device): {field: [lo, hi]}} from CUDA_LEDGER lines."""
    res = {}
    for line in out.splitlines():
        if line.startswith("CUDA_LEDGER "):
            d = json.loads(line[len("CUDA_LEDGER "):])
            res[(d.pop("process", None), d.pop("device"))] = d
    check(res, "no CUDA_LEDGER line")
    return res


LOG_RE = re.compile(r"^\[(\d+)\] (\S+)(.*?) -> (-?\d+)(.*)$")
KV_RE = re.compile(r"([A-Za-z_][\w.]*)=(\S+)")


class World:
    def __init__(self):
        self.f = dict(num_allocs=0, num_frees=0, bytes_in_use=0, peak_bytes_in_use=0,
                      total_bytes=0, largest_alloc_size=0)

    def alloc(self, n):
        f = self.f
        f["num_allocs"] += 1
        f["bytes_in_use"] += n
        f["total_bytes"] += n
        f["largest_alloc_size"] = max(f["largest_alloc_size"], n)
        f["peak_bytes_in_use"] = max(f["peak_bytes_in_use"], f["bytes_in_use"])

    def free(self, n):
        self.f["num_frees"] += 1
        self.f["bytes_in_use"] -= n


def driver_account(lines):
    """{pid: {device: [World lo, World hi]}} from the fake driver's log.

    A process seen for the first time after the first one is a fork child: it
    starts from a copy of the first process's account at that point."""
    acc = {}
    first = None
    for line in lines:
        m = LOG_RE.match(line)
        if not m or m.group(2) == "cudart":
            continue
        pid, name, args, r, rest = m.group(1), m.group(2), m.group(3), int(m.group(4)), m.group(5)
        if pid not in acc:
            acc[pid] = copy.deepcopy(acc[first]) if first else {}
            first = first or pid
        if r != 0:
            continue
        kv = dict(KV_RE.findall(args))
        kv.update(KV_RE.findall(rest))
        dev = None
        lo = hi = None
        is_alloc = True
        if name in ("cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
                    "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"):
            dev, lo = "cuda:" + kv["dev"], int(kv["bytesize"])
        elif name == "cuMemAllocPitch_v2":
            dev = "cuda:" + kv["dev"]
            lo = int(kv["width"]) * int(kv["height"])
            hi = int(kv["pitch"]) * int(kv["height"])
        elif name == "cuMemAllocManaged":
            dev, lo = "cuda_managed", int(kv["bytesize"])
        elif name in ("cuMemAllocHost_v2", "cuMemAllocHost", "cuMemHostAlloc"):
            dev, lo = "cuda_host", int(kv["bytesize"])
        elif name == "cuMemCreate":
            dev = "cuda:" + kv["location.id"] if kv["location.type"] == "1" else "cuda_host"
            lo = int(kv["size"])
        elif name in ("cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"):
            is_alloc = False
            dev = "cuda_managed" if kv["kind"] == "managed" else "cuda:" + kv["dev"]
            lo = int(kv["size"])
            if kv["kind"] == "pitch":
                # The driver frees pitch * height; the lo world counted width * height.
                lo = None
        elif name == "cuMemFreeHost":
            is_alloc, dev, lo = False, "cuda_host", int(kv["size"])
        elif name == "cuMemRelease":
            is_alloc, lo = False, int(kv["size"])
            dev = "cuda:" + kv["dev"] if int(kv["dev"]) >= 0 else "cuda_host"
        else:
            continue
        w = acc[pid].setdefault(dev, [World(), World()])
        if is_alloc:
            w[0].alloc(lo)
            w[1].alloc(hi if hi is not None else lo)
            if hi is not None:
                w[0].pitch = getattr(w[0], "pitch", []) + [(hi, lo)]
        else:
            if lo is None:
                # a pitch block: find what the lo world allocated for it
                size = int(kv["size"])
                pairs = getattr(w[0], "pitch", [])
                lo_size = next(l for h, l in pairs if h == size)
                pairs.remove((size, lo_size))
                w[0].free(lo_size)
                w[1].free(size)
            else:
                w[0].free(lo)
                w[1].free(lo)
    return acc


def check_ledger(out, lines, pids=None):
    """Every CUDA_LEDGER line equals the driver's account of its process."""
    led = ledgers(out)
    acc = driver_account(lines)
    check(acc or all(all(v == [0, 0] for v in f.values()) for f in led.values()),
          "the driver logged no allocation")
    for (proc, dev), fields in sorted(led.items(), key=lambda x: (str(x[0][0]), x[0][1])):
        if pids:
            pid = pids[proc]
        else:
            check(len(acc) <= 1, "several processes in the log: %s" % list(acc))
            pid = next(iter(acc), None)
        worlds = acc.get(pid, {}).get(dev, [World(), World()])
        for k, pair in fields.items():
            if k in ("leak_bytes",):
                want = [worlds[0].f["bytes_in_use"], worlds[1].f["bytes_in_use"]]
            elif k == "leak_blocks":
                want = [w.f["num_allocs"] - w.f["num_frees"] for w in worlds]
            else:
                want = [worlds[0].f[k], worlds[1].f[k]]
            check(pair == want, "%s %s %s: ledger %s, driver log %s" %
                  (proc or "", dev, k, pair, want))
    # And nothing in the log that the ledger does not know of.
    for pid, devs in acc.items():
        for dev, worlds in devs.items():
            if worlds[1].f["num_allocs"]:
                check(any(d == dev for (_, d) in led), "the driver allocated on %s" % dev)
    return led


def one(led, dev, field, proc=None):
    lo, hi = led[(proc, dev)][field]
    check(lo == hi, "%s %s: lo %d != hi %d" % (dev, field, lo, hi))
    return lo


def expect_figures(led, figures, proc=None):
    for (dev, field), want in figures.items():
        got = one(led, dev, field, proc)
        check(got == want, "%s %s: %d, expected %d" % (dev, field, got, want))


def grep(lines, pattern):
    r = re.compile(pattern)
    return [l for l in lines if r.search(l)]


def expect_log(lines, pattern, count=None):
    found = grep(lines, pattern)
    if count is None:
        check(found, "log has no line matching %r" % pattern)
    else:
        check(len(found) == count, "log has %d lines matching %r, expected %d" %
              (len(found), pattern, count))
    return found


def gpa_line(name, version, flags, pfn):
    return r"\] cuGetProcAddress_v2 symbol=%s cudaVersion=%d flags=%d -> 0 status=0 pfn=%s " % (
        name, version, flags, pfn)


def driver_bindings(stderr):
    """The cu* symbols ld.so bound in libcuda.so.1 for lookups (LD_DEBUG=bindings)."""
    return re.findall(r"binding file .* to \S*libcuda\.so\.1 \[0\]: normal symbol `(cu\w*)'",
                      stderr)


# ---- cases ----------------------------------------------------------------------------

def need_nvcc():
    if ARGS.nvcc != "1":
        skip("nvcc programs not built (no CUDA toolkit)")


def case_runtime(ptds=False):
    need_nvcc()
    prog = "tc_runtime_ptds" if ptds else "tc_runtime"
    out, lines, _ = run(prog)
    check(out.rstrip().endswith("DONE"), "no DONE")
    led = check_ledger(out, lines)
    expect_figures(led, {
        ("cuda:0", "peak_bytes_in_use"): 1114112, ("cuda:0", "bytes_in_use"): 1048576,
        ("cuda:1", "peak_bytes_in_use"): 3145728, ("cuda:1", "bytes_in_use"): 12345,
        ("cuda:1", "num_allocs"): 5, ("cuda_host", "bytes_in_use"): 8192,
        ("cuda_managed", "bytes_in_use"): 65536})
    # How the runtime double reached the driver: one dlopen, one dlsym, lookups at ABI versions.
    expect_log(lines, r"cudart dlopen libcuda\.so\.1 RTLD_NOW -> ok", 1)
    expect_log(lines, r"cudart dlsym ", 1)
    expect_log(lines, r"cudart dlsym cuGetProcAddress_v2 ", 1)
    expect_log(lines, r"cuGetProcAddress_v2 symbol= cudaVersion=0 flags=0 -> 500 status=1", 1)
    for name, ver, flags, pfn in [
            ("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
            ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
            ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"), ("cuMemFree", 3020, 0, "cuMemFree_v2"),
            ("cuMemHostAlloc", 2020, 0, "cuMemHostAlloc"),
            ("cuMemAllocManaged", 6000, 0, "cuMemAllocManaged"),
            ("cuCtxGetDevice", 2000, 0, "cuCtxGetDevice"),
            ("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"),
            ("cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"),
            ("cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"),
            ("cuMemFreeAsync", 11020, 2, "cuMemFreeAsync_ptsz")]:
        expect_log(lines, gpa_line(name, ver, flags, pfn), 1)
    # Every later lookup went through the cuGetProcAddress fetched at 12000 (same function).
    check(not grep(lines, r"\] cuGetProcAddress symbol="), "the 4-argument one was used")
    # The stream of device 1 used while device 0 was current.
    expect_log(lines, r"\] cuMemAllocAsync(_ptsz)? bytesize=1048576 .* -> 0 .* dev=1$", 1)
    suffix = "_ptsz" if ptds else ""
    expect_log(lines, r"\] cuMemAllocAsync%s bytesize=" % suffix, 2)
    expect_log(lines, r"\] cuMemAllocFromPoolAsync%s bytesize=8192 .* dev=1$" % suffix, 1)
    expect_log(lines, r"\] cuMemFreeAsync%s dptr=" % suffix, 3)
    expect_log(lines, r"cudart cudaMallocAsync%s size=" % suffix, 2)
    expect_log(lines, r"cudart __cudaLaunchKernel%s fn=.* -> 0 \(not run\)" % suffix, 1)
    check(not grep(lines, "UNIMPLEMENTED"), "an unimplemented driver call")
    # ld.so's view: the only driver symbol looked up by name is cuGetProcAddress_v2.
    if ARGS.preload:
        return
    _, _, err = run(prog, tag=prog + ".bindings", ld_debug=True)
    check(driver_bindings(err) == ["cuGetProcAddress_v2"],
          "bindings into libcuda.so.1: %s" % driver_bindings(err))


def case_static(no_export_table=False):
    need_nvcc()
    env = {}
    if no_export_table:
        env = {"FAKECUDA_GPA_MODE": "null", "FAKECUDA_GPA_NAMES": "cuGetExportTable"}
    out, lines, _ = run("tc_static", env=env, tag="tc_static" + ("_net" if env else ""))
    code = 36 if no_export_table else 500
    check(out.splitlines()[:4] == ["cudaMalloc -> %d" % code, "cudaMallocAsync -> %d" % code,
                                   "cudaMallocHost -> %d" % code, "DONE"],
          "unexpected output: %r" % out)
    # NVIDIA's static runtime, against the double: its lookup protocol.
    lookups = grep(lines, r"\] cuGetProcAddress_v2 symbol=")
    print("static cudart made %d cuGetProcAddress_v2 lookups, %d found" %
          (len(lookups), len(grep(lookups, r"-> 0 status=0"))))
    check(len(lookups) > 300, "only %d lookups" % len(lookups))
    expect_log(lines, r"cuGetProcAddress_v2 symbol= cudaVersion=0 flags=0 -> 500 status=1")
    for name, ver, flags, pfn in [
            ("cuInit", 2000, 0, "cuInit"),
            ("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
            ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
            ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"), ("cuMemFree", 3020, 0, "cuMemFree_v2"),
            ("cuMemAllocPitch", 3020, 0, "cuMemAllocPitch_v2"),
            ("cuMemAllocManaged", 6000, 0, "cuMemAllocManaged"),
            ("cuMemHostAlloc", 2020, 0, "cuMemHostAlloc"),
            ("cuMemFreeHost", 2000, 0, "cuMemFreeHost"),
            ("cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"),
            ("cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"),
            ("cuMemAllocFromPoolAsync", 11020, 2, "cuMemAllocFromPoolAsync_ptsz"),
            ("cuMemFreeAsync", 11020, 0, "cuMemFreeAsync"),
            ("cuMemFreeAsync", 11020, 2, "cuMemFreeAsync_ptsz"),
            ("cuCtxGetDevice", 2000, 0, "cuCtxGetDevice"),
            ("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"),
            ("cuStreamGetDevice", 12080, 2, "cuStreamGetDevice_ptsz")]:
        expect_log(lines, gpa_line(name, ver, flags, pfn))
    expect_log(lines, r"\] cuInit flags=0 -> 0")
    if no_export_table:
        check(not grep(lines, r"\] cuGetExportTable "), "cuGetExportTable was called")
    else:
        expect_log(lines, r"\] cuGetExportTable id=6bd5fb6c5bf4e74a8987d93912fd9df9 -> 500")
    check(not grep(lines, r"\] cuMem\w* bytesize="), "the static runtime allocated")
    if not no_export_table and not ARGS.preload:
        _, _, err = run("tc_static", tag="tc_static.bindings", ld_debug=True)
        check(driver_bindings(err) == ["cuGetProcAddress_v2"],
              "bindings into libcuda.so.1: %s" % driver_bindings(err))


def case_driver():
    out, lines, _ = run("tc_driver")
    check(out.rstrip().endswith("DONE"), "no DONE")
    led = check_ledger(out, lines)
    expect_figures(led, {
        ("cuda:0", "bytes_in_use"): 5 << 20, ("cuda:0", "peak_bytes_in_use"): 7 << 20,
        ("cuda:1", "bytes_in_use"): 4096, ("cuda:1", "peak_bytes_in_use"): 2 << 20,
        ("cuda_host", "bytes_in_use"): 6000, ("cuda_managed", "bytes_in_use"): 3000})
    check(led[(None, "cuda:0")]["total_bytes"] != led[(None, "cuda:0")]["total_bytes"][::-1],
          "the pitch reading should differ between lo and hi")
    expect_log(lines, r"\] cuMemFree_v2 dptr=0xdead0000 -> 1 ", 1)
    expect_log(lines, r"\] cuMemCreate size=2097152 location.type=1 location.id=1 -> 0", 1)
    expect_log(lines, r"\] cuMemAllocFromPoolAsync bytesize=10000 .* -> 0 .* dev=0$", 1)
    check(not grep(lines, "UNIMPLEMENTED"), "an unimplemented driver call")


def case_dlsym():
    out, lines, _ = run("tc_dlsym")
    # libcuda is RTLD_LOCAL: only a preload that exports cuMemAlloc_v2 makes it found.
    found = ARGS.preload and "cuMemAlloc_v2" in dynsyms(ARGS.preload)
    rtld = "RTLD_DEFAULT cuMemAlloc_v2: %s" % ("found" if found else "absent")
    check(rtld in out.splitlines(), "no %r line" % rtld)
    led = check_ledger(out, lines)
    expect_figures(led, {("cuda:0", "bytes_in_use"): 4096,
                         ("cuda:1", "bytes_in_use"): (2 << 20) + 3000,
                         ("cuda:1", "peak_bytes_in_use"): (2 << 20) + 65536})
    expect_log(lines, r"\] cuGetProcAddress symbol=cuMemFree cudaVersion=3020 flags=0 -> 0 "
               r"status=0 pfn=cuMemFree_v2 ", 1)
    expect_log(lines, r"\] cuMemAllocAsync_ptsz bytesize=", 2)
    expect_log(lines, r"\] cuMemFreeAsync_ptsz dptr=", 1)


def case_unimplemented():
    if ARGS.stubs != "1":
        skip("the fake driver was built without the toolkit's stub list")
    out, lines, _ = run("tc_dlsym", tag="tc_dlsym_unimplemented")
    check("cuArrayCreate_v2 -> 801" in out.splitlines(), "cuArrayCreate_v2 line: %r" % out)
    expect_log(lines, r"\] UNIMPLEMENTED cuArrayCreate_v2 -> 801", 1)


def case_entry_point():
    out, lines, _ = run("tc_entry_point")
    led = check_ledger(out, lines)
    expect_figures(led, {("cuda:0", "bytes_in_use"): 5 << 20,
                         ("cuda:1", "peak_bytes_in_use"): 2 << 20,
                         ("cuda:1", "bytes_in_use"): 0})
    expect_log(lines, r"cudart cudaGetDriverEntryPointByVersion symbol=cuMemAlloc "
               r"cudaVersion=12000 flags=0 -> 0 status=0", 1)
    expect_log(lines, gpa_line("cuMemAlloc", 12000, 0, "cuMemAlloc_v2"), 1)
    expect_log(lines, gpa_line("cuMemCreate", 12000, 0, "cuMemCreate"), 1)
    expect_log(lines, gpa_line("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"))
    expect_log(lines, gpa_line("cuMemAllocAsync", 13000, 2, "cuMemAllocAsync_ptsz"), 1)
    expect_log(lines, r"cuGetProcAddress_v2 symbol=cuMemCreate cudaVersion=10000 flags=0 -> 500 "
               r"status=2", 1)


def case_threads():
    out, lines, _ = run("tc_threads")
    led = check_ledger(out, lines)
    check("peak_bytes_in_use" not in led[(None, "cuda:0")], "threads: no peak in the ledger")
    expect_figures(led, {("cuda:0", "bytes_in_use"): 1000 + 3000,
                         ("cuda:1", "bytes_in_use"): 2000 + 4000,
                         ("cuda:0", "num_allocs"): 802, ("cuda_host", "bytes_in_use"): 640})


def case_fork(mode):
    out, lines, _ = run("tc_fork", ["_exit"] if mode == "_exit" else [], tag="tc_fork" + mode)
    pids = {}
    for line in out.splitlines():
        if line.startswith("PARENT "):
            pids["parent"] = line.split()[1]
        if line.startswith("CHILD "):
            pids["child"] = line.split()[1]
    check(len(pids) == 2, "PARENT/CHILD lines")
    led = check_ledger(out, lines, pids)
    expect_figures(led, {("cuda:1", "bytes_in_use"): 1 << 20, ("cuda:0", "bytes_in_use"): 2222,
                         ("cuda_host", "bytes_in_use"): 300}, "parent")
    expect_figures(led, {("cuda:1", "bytes_in_use"): 0, ("cuda:1", "num_frees"): 2,
                         ("cuda_host", "bytes_in_use"): 400}, "child")


def case_oom():
    out, lines, _ = run("tc_oom", env={"FAKECUDA_OOM_AFTER": "3"})
    for want in ["cudaMalloc -> 2", "cuMemAlloc -> 2", "cudaMallocHost -> 2",
                 "cudaMallocManaged -> 2", "cudaMallocAsync -> 2", "cuMemCreate -> 2", "DONE"]:
        check(want in out.splitlines(), "missing %r" % want)
    check_ledger(out, lines)
    expect_log(lines, r"\] cuMemAlloc_v2 bytesize=5000 -> 2 ", 1)
    expect_log(lines, r"cudart cudaMalloc size=4000 -> 2 ", 1)
    run("tc_oom", rc=2, tag="tc_oom_unset")


def case_untracked():
    env = {"FAKECUDA_GPA_MODE": "anonymous", "FAKECUDA_GPA_NAMES": "cuMemAlloc,cuMemAllocAsync"}
    out, lines, _ = run("tc_untracked", env=env)
    for want in ["untracked free cuMemFree_v2 -> 0", "untracked free cuMemFreeAsync -> 0", "DONE"]:
        check(want in out.splitlines(), "missing %r" % want)
    led = ledgers(out)
    check(all(v == [0, 0] for f in led.values() for v in f.values()), "the ledger is all zeros")
    expect_log(lines, r"\] cuGetProcAddress_v2 symbol=cuMemAlloc cudaVersion=3020 .* "
               r"pfn=anonymous ", 1)
    expect_log(lines, r"\] cuMemFree_v2 dptr=0x[0-9a-f]+ -> 0 size=1048576 dev=0", 1)
    expect_log(lines, r"\] cuMemFreeAsync dptr=0x[0-9a-f]+ stream=\(nil\) -> 0 size=4096 dev=1", 1)
    expect_log(lines, r"\] cuMemFree_v2 dptr=0x[0-9a-f]+ -> 1 ", 1)
    run("tc_untracked", rc=2, tag="tc_untracked_unset")


# The resolver: expected identity of each request against the doubles alone.
RESOLVE = [
    ("", 0, 0, 500, 1, None),
    ("cuInit", 2000, 0, 0, 0, "cuInit"),
    ("cuGetProcAddress", 11030, 0, 0, 0, "cuGetProcAddress"),
    ("cuGetProcAddress", 12000, 0, 0, 0, "cuGetProcAddress_v2"),
    ("cuMemAlloc", 3020, 0, 0, 0, "cuMemAlloc_v2"),
    ("cuMemAlloc", 13000, 0, 0, 0, "cuMemAlloc_v2"),
    ("cuMemAlloc", 2000, 0, 0, 0, "cuMemAlloc"),
    ("cuMemFree", 3020, 0, 0, 0, "cuMemFree_v2"),
    ("cuMemFree", 2000, 0, 0, 0, "cuMemFree"),
    ("cuMemAllocPitch", 3020, 0, 0, 0, "cuMemAllocPitch_v2"),
    ("cuMemAllocManaged", 6000, 0, 0, 0, "cuMemAllocManaged"),
    ("cuMemAllocHost", 3020, 0, 0, 0, "cuMemAllocHost_v2"),
    ("cuMemHostAlloc", 2020, 0, 0, 0, "cuMemHostAlloc"),
    ("cuMemFreeHost", 2000, 0, 0, 0, "cuMemFreeHost"),
    ("cuMemGetInfo", 3020, 0, 0, 0, "cuMemGetInfo_v2"),
    ("cuMemAllocAsync", 11020, 0, 0, 0, "cuMemAllocAsync"),
    ("cuMemAllocAsync", 11020, 2, 0, 0, "cuMemAllocAsync_ptsz"),
    ("cuMemAllocFromPoolAsync", 11020, 0, 0, 0, "cuMemAllocFromPoolAsync"),
    ("cuMemAllocFromPoolAsync", 11020, 2, 0, 0, "cuMemAllocFromPoolAsync_ptsz"),
    ("cuMemFreeAsync", 11020, 0, 0, 0, "cuMemFreeAsync"),
    ("cuMemFreeAsync", 11020, 2, 0, 0, "cuMemFreeAsync_ptsz"),
    ("cuMemPoolCreate", 11020, 0, 0, 0, "cuMemPoolCreate"),
    ("cuMemPoolDestroy", 11020, 0, 0, 0, "cuMemPoolDestroy"),
    ("cuMemCreate", 10020, 0, 0, 0, "cuMemCreate"),
    ("cuMemCreate", 10000, 0, 500, 2, None),
    ("cuMemRelease", 10020, 0, 0, 0, "cuMemRelease"),
    ("cuMemMap", 10020, 0, 0, 0, "cuMemMap"),
    ("cuMemUnmap", 10020, 0, 0, 0, "cuMemUnmap"),
    ("cuMemAddressReserve", 10020, 0, 0, 0, "cuMemAddressReserve"),
    ("cuMemAddressFree", 10020, 0, 0, 0, "cuMemAddressFree"),
    ("cuCtxGetDevice", 2000, 0, 0, 0, "cuCtxGetDevice"),
    ("cuCtxGetDevice", 13000, 0, 0, 0, "cuCtxGetDevice_v2"),
    ("cuCtxSynchronize", 2000, 0, 0, 0, "cuCtxSynchronize"),
    ("cuCtxSynchronize", 13000, 0, 0, 0, "cuCtxSynchronize_v2"),
    ("cuStreamGetDevice", 12080, 0, 0, 0, "cuStreamGetDevice"),
    ("cuStreamGetDevice", 12080, 2, 0, 0, "cuStreamGetDevice_ptsz"),
    ("cuStreamGetCtx", 9020, 0, 0, 0, "cuStreamGetCtx"),
    ("cuPointerGetAttribute", 4000, 0, 0, 0, "cuPointerGetAttribute"),
    ("cuNoSuchFunction", 13000, 0, 500, 1, None),
]


def case_resolver(mode=None):
    env = {}
    if mode:
        env["FAKECUDA_GPA_MODE"] = mode
    if mode == "null":
        env["FAKECUDA_GPA_NAMES"] = "cuMemAllocAsync,cuMemCreate"
    out, lines, _ = run("tc_resolver", env=env, tag="tc_resolver_%s" % (mode or "normal"))
    got = out.splitlines()
    check(got and got[-1] == "DONE", "no DONE")

    def identity(name, exported):
        if exported is None:
            return "null"
        if ARGS.preload:
            return r"\S+"
        applies = name != "cuGetProcAddress" if mode != "null" else name in (
            "cuMemAllocAsync", "cuMemCreate")
        if not mode or not applies:
            return "driver:" + exported
        return {"anonymous": "anonymous",
                "alias": r"object:libcuda\.so\.1:fakecuda_alias_\d+",
                "foreign": r"object:libfakecuda_foreign\.so:fakecuda_foreign_\d+",
                "null": "null"}[mode]

    want = []
    for name, ver, flags, r, st, exported in RESOLVE:
        ident = identity(name, exported)
        want.append(r"RESOLVE %s@%d flags=%d -> %d status=%d pfn=%s$" %
                    (name, ver, flags, r, st, ident))
    want.append(r"RESOLVE cuMemAlloc@3020 flags=0 -> 0 status=- pfn=%s$" %
                identity("cuMemAlloc", "cuMemAlloc_v2"))
    want.append(r"RESOLVE cuNoSuchFunction@13000 flags=0 -> 500 status=- pfn=null$")
    for name, ver, flags, r, st, exported in RESOLVE:
        want.append(r"RESOLVE2 %s@%d flags=%d -> %d status=%d pfn=%s$" %
                    (name, ver, flags, r, st, identity(name, exported)))
    for name, ver, flags, r, st, exported in RESOLVE:
        want.append(r"RESOLVE4 %s@%d flags=%d -> %d pfn=%s$" %
                    (name, ver, flags, r, identity(name, exported)))
    want += [r"CALL cuCtxGetDevice@2000 -> device 1; @13000 \(explicit context\) -> device 1$",
             r"CALL legacy cuMemAlloc@2000 -> 0 \(32-bit pointer set\)$",
             r"CALL legacy cuMemFree@2000 -> 0$"]
    resolve = [l for l in got if l.startswith(("RESOLVE", "CALL"))]
    check(len(resolve) == len(want), "%d RESOLVE/CALL lines, expected %d" %
          (len(resolve), len(want)))
    for line, pat in zip(resolve, want):
        check(re.match(pat, line), "line %r does not match %r" % (line, pat))
    led = ledgers(out)
    check(all(v == [0, 0] for f in led.values() for v in f.values()),
          "the resolver's ledger is all zeros")
    expect_log(lines, r"\] cuMemAlloc\(legacy\) bytesize=4096 -> 0 dptr=0x[0-9a-f]{1,8} ", 1)


def case_env_devices():
    # FAKECUDA_DEVICES and FAKECUDA_MEMORY, through the driver from Python's ctypes.
    code = r"""
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
n = ctypes.c_int(-1)
assert cu.cuDeviceGetCount(ctypes.byref(n)) == 0
ctx = ctypes.c_void_p()
d = ctypes.c_int()
assert cu.cuDeviceGet(ctypes.byref(d), 1) == 101, "device 1 must not exist"
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
free, total = ctypes.c_size_t(), ctypes.c_size_t()
assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
p = ctypes.c_ulonglong()
a = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1000000))
b = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(2500000))
free2 = ctypes.c_size_t()
assert cu.cuMemGetInfo_v2(ctypes.byref(free2), ctypes.byref(total)) == 0
print(n.value, total.value, free.value, a, b, free2.value)
"""
    e = clean_env()
    e.update(LD_LIBRARY_PATH=ARGS.lib, FAKECUDA_DEVICES="1", FAKECUDA_MEMORY="3000000")
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0, "ctypes check failed: " + p.stderr)
    check(p.stdout.split() == ["1", "3000000", "3000000", "0", "2", "2000000"],
          "devices/memory: %r" % p.stdout)


def case_runtime_missing():
    # A driver function the runtime double did not get: the calls needing it fail with 36.
    code = r"""
import ctypes
rt = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
print(rt.cudaSetDevice(0), rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(100)),
      rt.cudaMallocHost(ctypes.byref(p), ctypes.c_size_t(100)))
"""
    for names, want in [("cuMemAlloc", ["0", "36", "0"]), ("cuCtxGetCurrent", ["36", "36", "36"])]:
        e = clean_env()
        e.update(LD_LIBRARY_PATH=ARGS.lib, FAKECUDA_GPA_MODE="null", FAKECUDA_GPA_NAMES=names)
        p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                           timeout=60)
        check(p.returncode == 0, "ctypes check failed: " + p.stderr)
        check(p.stdout.split() == want, "without %s: %r, expected %s" % (names, p.stdout, want))


def readelf(args, path):
    return subprocess.run(["readelf"] + args + [path], capture_output=True, text=True,
                          check=True).stdout


def dynsyms(path, undefined=False):
    out = subprocess.run(["nm", "-D", "--undefined-only" if undefined else "--defined-only",
                          path], capture_output=True, text=True, check=True).stdout
    return {l.split()[-1].split("@")[0] for l in out.splitlines() if l.strip()}


def case_exports():
    drv = os.path.join(ARGS.lib, "libcuda.so.1")
    rt = os.path.join(ARGS.lib, "libcudart.so.13")
    check("Library soname: [libcuda.so.1]" in readelf(["-d"], drv), "driver SONAME")
    check("Library soname: [libcudart.so.13]" in readelf(["-d"], rt), "runtime SONAME")
    check(os.path.realpath(os.path.join(ARGS.lib, "libcuda.so")) == os.path.realpath(drv),
          "libcuda.so -> libcuda.so.1")
    check(os.path.realpath(os.path.join(ARGS.lib, "libcudart.so")) == os.path.realpath(rt),
          "libcudart.so -> libcudart.so.13")
    # The driver double: no dlsym of its own, its functions bound to themselves.
    und = dynsyms(drv, undefined=True)
    check(not ({"dlsym", "dlvsym", "dlopen"} & und), "the driver double imports %s" %
          ({"dlsym", "dlvsym", "dlopen"} & und))
    exp = dynsyms(drv)
    for name in ["cuInit", "cuGetProcAddress", "cuGetProcAddress_v2", "cuMemAlloc",
                 "cuMemAlloc_v2", "cuMemFree", "cuMemFree_v2", "cuCtxGetDevice",
                 "cuCtxGetDevice_v2", "cuMemAllocAsync_ptsz", "cuMemCreate",
                 "cuStreamGetDevice_ptsz"]:
        check(name in exp, "the driver double does not export " + name)
    relocs = readelf(["-r"], drv)
    check(not re.search(r"JUMP_SLO.*\bcuMemAlloc_v2\b", relocs),
          "the driver's own calls go through the PLT (no -Bsymbolic-functions?)")
    if ARGS.stubs == "1":
        stub = dynsyms("/usr/local/cuda/lib64/stubs/libcuda.so") if os.path.exists(
            "/usr/local/cuda/lib64/stubs/libcuda.so") else set()
        missing = {s for s in stub if s.startswith("cu")} - exp
        check(not missing, "names of the stub not exported: %s" % sorted(missing)[:10])
    # The runtime double: versioned symbols, reaches the driver by dlopen only.
    vs = readelf(["-V"], rt)
    check("Name: libcudart.so.13" in vs, "no libcudart.so.13 version definition")
    check("libcuda" not in "".join(l for l in readelf(["-d"], rt).splitlines()
                                   if "NEEDED" in l), "the runtime double links libcuda")
    und = dynsyms(rt, undefined=True)
    check({"dlopen", "dlsym"} <= und, "the runtime double does not import dlopen/dlsym")
    check(not any(s.startswith("cu") and not s.startswith("cuda") for s in und),
          "the runtime double references driver symbols")
    syms = subprocess.run(["nm", "-D", "--defined-only", rt], capture_output=True, text=True,
                          check=True).stdout
    for name in ["cudaMalloc", "cudaMallocAsync_ptsz", "cudaGetDriverEntryPointByVersion",
                 "__cudaRegisterFatBinary", "__cudaLaunchKernel_ptsz"]:
        check(re.search(r" T %s@@libcudart\.so\.13$" % name, syms, re.M),
              "%s@@libcudart.so.13 not exported" % name)


def case_bind_now():
    """Every program loads with LD_BIND_NOW=1: the doubles define all they are asked for."""
    progs = ["tc_driver", "tc_dlsym", "tc_entry_point", "tc_threads", "tc_fork", "tc_resolver"]
    if ARGS.nvcc == "1":
        progs += ["tc_runtime", "tc_runtime_ptds", "tc_static"]
    for prog in progs:
        out, _, _ = run(prog, env={"LD_BIND_NOW": "1"}, tag=prog + ".bind_now")
        check(out.rstrip().endswith("DONE"), prog + ": no DONE")


def case_gpu():
    """A real GPU: /dev/nvidia0 and a real libcuda.so.1 with a device.  Otherwise SKIP."""
    if not os.path.exists("/dev/nvidia0"):
        skip("no /dev/nvidia0: no GPU on this machine")
    code = r"""
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("no libcuda.so.1: %s" % e); sys.exit(3)
if hasattr(cu, "fakecuda_name_of"):
    print("libcuda.so.1 is the test double"); sys.exit(3)
if cu.cuInit(0) != 0:
    print("cuInit failed"); sys.exit(3)
n = ctypes.c_int(0)
if cu.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
    print("no device"); sys.exit(3)
print(n.value)
"""
    e = clean_env()
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        skip("no usable GPU: " + p.stdout.strip() + p.stderr.strip()[-200:])
    devices = int(p.stdout.split()[-1])
    print("real GPU: %d device(s)" % devices)
    need_nvcc()
    # The nvcc programs with NVIDIA's own runtime and driver.
    for prog, want in [("tc_static", "cudaMalloc -> 0")]:
        r = subprocess.run([os.path.join(ARGS.bin, prog)], env=e, capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0 and want in r.stdout, "%s on the GPU: %r" % (prog, r.stdout))
    if devices >= 2:
        # tc_runtime needs NVIDIA's shared libcudart.so.13 on the library path.
        r = subprocess.run([os.path.join(ARGS.bin, "tc_runtime")], env=e, capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0 and r.stdout.rstrip().endswith("DONE"),
              "tc_runtime on the GPU: %r %r" % (r.stdout, r.stderr[-500:]))


CASES = {
    "runtime": lambda: case_runtime(False),
    "runtime_ptds": lambda: case_runtime(True),
    "static": lambda: case_static(False),
    "static_no_export_table": lambda: case_static(True),
    "driver": case_driver,
    "dlsym": case_dlsym,
    "unimplemented": case_unimplemented,
    "entry_point": case_entry_point,
    "threads": case_threads,
    "fork": lambda: case_fork("exit"),
    "fork_exit": lambda: case_fork("_exit"),
    "oom": case_oom,
    "untracked": case_untracked,
    "resolver": lambda: case_resolver(None),
    "resolver_anonymous": lambda: case_resolver("anonymous"),
    "resolver_alias": lambda: case_resolver("alias"),
    "resolver_foreign": lambda: case_resolver("foreign"),
    "resolver_null": lambda: case_resolver("null"),
    "env_devices": case_env_devices,
    "runtime_missing": case_runtime_missing,
    "exports": case_exports,
    "bind_now": case_bind_now,
    "gpu": case_gpu,
}


def main():
    global ARGS, TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--stubs", default="0")
    ap.add_argument("--nvcc", default="0")
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--keep", action="store_true", help="keep the logs (printed path)")
    ap.add_argument("--preload", default="", help="run the programs with LD_PRELOAD=this")
    ARGS = ap.parse_args()
    TMP = tempfile.mkdtemp(prefix="tc_%s." % ARGS.case)
    try:
        CASES[ARGS.case]()
    except Fail as e:
        print("FAIL: %s (logs in %s)" % (e, TMP))
        return 1
    print("PASS")
    if not ARGS.keep:
        subprocess.run(["rm", "-rf", TMP])
    return 0


if __name__ == "__main__":
    sys.exit(main())
