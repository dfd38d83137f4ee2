#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The shim's CUDA interception against the GPU-less test doubles.

Each case runs a program of test/cuda/programs (or of this directory) under
libtfalloc.so, with LD_LIBRARY_PATH pointing at the fake libcuda.so.1 and
libcudart.so.13, and checks what `tfalloc report --format json` says against
the CUDA_LEDGER lines the program printed (tc_common.h): per device, every
statistic and the leaked bytes and blocks within the ledger's [lo, hi].

    test_cuda_shim.py --tool T --lib L --bin DIR --doubles DIR --t6 P
                      --t6-plugin P --gate-prog P --limit-prog P --case NAME

Exit status 0 pass, 1 fail, 77 skipped (CTest SKIP_RETURN_CODE).
Standard library only.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C", "LANG": "C"}
# The driver's exported names the shim wraps (cuda_hooks.c), and the runtime's.
WRAPPED = {
    "cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemFree_v2", "cuMemAllocManaged",
    "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemFreeHost", "cuMemAllocAsync",
    "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz",
    "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemCreate", "cuMemRelease",
    "cuMemRetainAllocationHandle", "cuMemMap", "cuMemUnmap", "cuGetProcAddress",
    "cuGetProcAddress_v2",
}
STATS = ("num_allocs", "num_frees", "bytes_in_use", "peak_bytes_in_use", "total_bytes",
         "largest_alloc_size")


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


class Ctx:
    def __init__(self, a):
        self.a = a
        self.dirs = []

    def tmp(self):
        d = tempfile.mkdtemp(prefix="tfa-cuda-")
        self.dirs.append(d)
        return d

    def prog(self, name):
        p = os.path.join(self.a.bin, name)
        if not os.path.exists(p):
            raise Skip("%s not built (no nvcc?)" % name)
        return p

    def run(self, argv, shim=True, env=None, outdir=None, doubles=True, timeout=120):
        e = dict(BASE_ENV)
        if doubles:
            e["LD_LIBRARY_PATH"] = self.a.doubles
        if shim:
            e["LD_PRELOAD"] = self.a.lib
            e["TFALLOC_QUIET"] = "1"
            if outdir is None:
                e["TFALLOC_PROFILE"] = "0"
            else:
                e["TFALLOC_OUTPUT"] = outdir
        e.update(env or {})
        p = subprocess.run(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")

    def reports(self, outdir):
        procs = []
        for f in sorted(glob.glob(os.path.join(outdir, "*.prof"))):
            r = subprocess.run([self.a.tool, "report", "--format", "json", f],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=BASE_ENV)
            check(r.returncode == 0, "tfalloc report %s: %s" % (f, r.stderr.decode()))
            doc = json.loads(r.stdout)
            table = [[doc["frames"][i] for i in st] for st in doc["stack_table"]]
            for p in doc["processes"]:
                for x in p.get("leaks", []) + p.get("sites", []) + p.get("errors", []):
                    for k in ("stack", "alloc_stack"):
                        if k in x:
                            x[k] = table[x[k]]
            procs.extend(doc["processes"])
        return procs

    def cleanup(self):
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)


def ledgers(out):
    led = {}
    for line in out.splitlines():
        if line.startswith("CUDA_LEDGER "):
            d = json.loads(line[len("CUDA_LEDGER "):])
            led[(d.get("process", ""), d["device"])] = d
    return led


def check_ledger(proc, ledger, what):
    devs = {d["device"]: d for d in proc["devices"]}
    for dev, want in ledger.items():
        got = devs.get(dev, {})
        for k in STATS:
            if k in want:
                lo, hi = want[k]
                v = got.get(k, 0)
                check(lo <= v <= hi, "%s %s %s: %d, ledger [%d, %d]" % (what, dev, k, v, lo, hi))
        lb = sum(l["bytes"] for l in proc["leaks"] if l["device"] == dev)
        lk = sum(l["blocks"] for l in proc["leaks"] if l["device"] == dev)
        lo, hi = want["leak_bytes"]
        check(lo <= lb <= hi, "%s %s leaked bytes: %d, ledger [%d, %d]" % (what, dev, lb, lo, hi))
        lo, hi = want["leak_blocks"]
        check(lo <= lk <= hi, "%s %s leaked blocks: %d, ledger [%d, %d]" % (what, dev, lk, lo, hi))
        for l in proc["leaks"]:
            if l["device"] == dev:
                check(l["stack"], "%s %s: a leak without a stack" % (what, dev))
        # The same devices in sites, with the same bytes in use.
        in_use = sum(s["bytes_in_use"] for s in proc["sites"] if s["device"] == dev)
        check(in_use == got.get("bytes_in_use", 0),
              "%s %s: sites hold %d bytes, the device %d" % (what, dev, in_use,
                                                             got.get("bytes_in_use", 0)))
    # Memory over time per device: it ends at the bytes in use, never passes the peak.
    tls = {t["device"]: t["points"] for t in proc.get("device_timelines", [])}
    for dev, got in devs.items():
        if dev == "cpu" or got["num_allocs"] == 0:
            continue
        pts = tls.get(dev)
        check(pts, "%s %s: no timeline" % (what, dev))
        check(pts[-1]["bytes_in_use"] == got["bytes_in_use"],
              "%s %s: timeline ends at %d, bytes in use %d" % (what, dev, pts[-1]["bytes_in_use"],
                                                              got["bytes_in_use"]))
        check(max(p["bytes_in_use"] for p in pts) <= got["peak_bytes_in_use"],
              "%s %s: timeline above the peak" % (what, dev))
        check(all(a["t"] <= b["t"] for a, b in zip(pts, pts[1:])), "%s %s: time goes back" % (what, dev))
    # cpu keeps its own figures: no device allocation counted there.
    check(devs["cpu"]["allocator"] != "cuda", "cpu device")


def ledger_case(ctx, prog, args=(), env=None, expect_lines=("DONE",)):
    out_dir = ctx.tmp()
    rc, out, err = ctx.run([ctx.prog(prog)] + list(args), env=env, outdir=out_dir)
    check(rc == 0, "%s exited %d: %s" % (prog, rc, err[-2000:]))
    for l in expect_lines:
        check(l in out, "%s: no %r in its output" % (prog, l))
    led = ledgers(out)
    check(led, "%s printed no ledger" % prog)
    procs = ctx.reports(out_dir)
    roles = {}
    for line in out.splitlines():
        m = re.match(r"(PARENT|CHILD) (\d+)$", line)
        if m:
            roles[int(m.group(2))] = m.group(1).lower()
    checked = 0
    for p in procs:
        role = roles.get(p["pid"], "")
        mine = {dev: d for (r, dev), d in led.items() if r == role}
        if not mine:
            continue
        # An exec'ing wrapper or a snapshot of the same pid: the last complete one counts.
        check_ledger(p, mine, "%s[%s]" % (prog, role or p["pid"]))
        checked += 1
    check(checked == len({r for r, _ in led}), "%s: %d profiles for %d ledgers"
          % (prog, checked, len({r for r, _ in led})))
    return out, err, procs


# ---- cases -------------------------------------------------------------------


def case_driver(ctx):
    ledger_case(ctx, "tc_driver")


def case_runtime(ctx):
    ledger_case(ctx, "tc_runtime")


def case_runtime_ptds(ctx):
    ledger_case(ctx, "tc_runtime_ptds")


def case_dlsym(ctx):
    out, _, _ = ledger_case(ctx, "tc_dlsym")
    # Exported by the shim: found in the global scope although libcuda is RTLD_LOCAL.
    check("RTLD_DEFAULT cuMemAlloc_v2: found" in out, "RTLD_DEFAULT lookup: %s" % out[:300])


def case_entry_point(ctx):
    ledger_case(ctx, "tc_entry_point")


def case_threads(ctx):
    ledger_case(ctx, "tc_threads")


def case_fork(ctx):
    ledger_case(ctx, "tc_fork")


def case_fork_exit(ctx):
    ledger_case(ctx, "tc_fork", ["_exit"])


def case_oom(ctx):
    out, _, _ = ledger_case(ctx, "tc_oom", env={"FAKECUDA_OOM_AFTER": "3"})
    for name in ("cudaMalloc", "cuMemAlloc", "cudaMallocHost", "cudaMallocManaged",
                 "cudaMallocAsync", "cuMemCreate"):
        check("%s -> 2" % name in out, "OOM of %s not passed through: %s" % (name, out))


def case_untracked(ctx):
    """Frees of pointers the shim never saw (unidentifiable entry points) are forwarded."""
    env = {"FAKECUDA_GPA_MODE": "anonymous", "FAKECUDA_GPA_NAMES": "cuMemAlloc,cuMemAllocAsync"}
    out, err, _ = ledger_case(ctx, "tc_untracked", env=env)
    for want in ("untracked free cuMemFree_v2 -> 0", "untracked free cuMemFreeAsync -> 0"):
        check(want in out, "tc_untracked: no %r: %s" % (want, out))


def case_limit(ctx):
    out_dir = ctx.tmp()
    rc, out, err = ctx.run([ctx.a.limit_prog], outdir=out_dir,
                           env={"TFALLOC_CUDA_LIMIT": "0:3M,1:1M,host:8K"})
    check(rc == 0, "tc_limit exited %d: %s" % (rc, err))
    want = ["cudaSetDevice 0 -> 0", "cuMemAlloc 2097152 -> 0", "cuMemAlloc 2097152 -> 2",
            "cudaMalloc 1048576 -> 0", "cudaMalloc 1 -> 2", "cuMemFree -> 0",
            "cuMemAlloc 2097152 -> 0", "cudaSetDevice 1 -> 0", "cudaMalloc 2097152 -> 2",
            "cudaMalloc 1048576 -> 0", "cudaMallocHost 8192 -> 0", "cuMemAllocHost 1 -> 2",
            # the resource's limit refuses device memory the same way
            "cuMemAllocManaged 716800 -> 0", "cuMemAllocManaged 409600 -> 2",
            "cuMemAllocManaged 409600 -> 0",
            "resource cuda_managed in_use 716800 allocs 1",
            "device cuda:0 in_use 3145728 limit 3145728",
            "pointer cuda_managed 716800 resource yes", "DONE"]
    lines = [l for l in out.splitlines() if not l.startswith("cudaFree")]
    check(lines[:len(want)] == want, "tc_limit:\n%s\nexpected:\n%s" % ("\n".join(lines), "\n".join(want)))
    (p,) = ctx.reports(out_dir)
    devs = {d["device"]: d for d in p["devices"]}
    check(devs["cuda:0"]["bytes_limit"] == 3 << 20, "cuda:0 bytes_limit %r" % devs["cuda:0"])
    check(devs["cuda:0"]["bytes_in_use"] == 3 << 20 and devs["cuda:0"]["peak_bytes_in_use"] == 3 << 20,
          "cuda:0 %r" % devs["cuda:0"])
    check(devs["cuda:1"]["bytes_in_use"] == 1 << 20, "cuda:1 %r" % devs["cuda:1"])
    check(devs["cuda_host"]["bytes_in_use"] == 8192 and devs["cuda_host"]["bytes_limit"] == 8192,
          "cuda_host %r" % devs["cuda_host"])
    # A bad value is refused with a message, and no limit applies.
    rc, out, err = ctx.run([ctx.a.limit_prog], env={"TFALLOC_CUDA_LIMIT": "zero:1M",
                                                     "TFALLOC_QUIET": "0"})
    check("TFALLOC_CUDA_LIMIT" in err and "cuMemAlloc 2097152 -> 0\ncuMemAlloc 2097152 -> 0" in out
          and "cudaMalloc 1 -> 0" in out,
          "bad TFALLOC_CUDA_LIMIT: %s / %s" % (err, out))


def case_tag(ctx):
    """Device memory is charged to the current resource (--tag-by thread)."""
    out_dir = ctx.tmp()
    rc, out, err = ctx.run([ctx.prog("tc_driver")], outdir=out_dir,
                           env={"TFALLOC_TAG_BY": "thread"})
    check(rc == 0, "tc_driver exited %d: %s" % (rc, err))
    (p,) = ctx.reports(out_dir)
    devs = {d["device"]: d for d in p["devices"]}
    res = [r for r in p["resources"] if r["container"] == "threads"]
    check(res, "no thread resource: %r" % p["resources"])
    charged = {}
    for r in res:
        for d in r["devices"]:
            charged[d["device"]] = charged.get(d["device"], 0) + d["total_bytes"]
    for dev in ("cuda:0", "cuda:1", "cuda_host", "cuda_managed"):
        check(charged.get(dev) == devs[dev]["total_bytes"],
              "%s: resource charged %r, device total %d" % (dev, charged.get(dev),
                                                             devs[dev]["total_bytes"]))
    leaks = [l for l in p["leaks"] if l["device"] != "cpu"]
    check(leaks and all(l["resource"] and l["resource"].startswith("threads/") for l in leaks),
          "device leaks without their resource: %r" % leaks)


RESOLVE = re.compile(r"^(RESOLVE[24]?) (\S*) flags=(\d+) -> (-?\d+)(?: status=(\S+))? pfn=(\S+)$")


def resolver_lines(out):
    return [RESOLVE.match(l) for l in out.splitlines() if RESOLVE.match(l)]


def compare_resolver(plain, shim, what):
    """Every answer equal, except driver:X that became the shim's X (X wrapped)."""
    a, b = resolver_lines(plain), resolver_lines(shim)
    check(len(a) == len(b) and a, "%s: %d lines plain, %d under the shim" % (what, len(a), len(b)))
    replaced = 0
    for x, y in zip(a, b):
        check(x.groups()[:5] == y.groups()[:5], "%s: %s vs %s" % (what, x.group(0), y.group(0)))
        if x.group(6) == y.group(6):
            continue
        check(x.group(6).startswith("driver:") and
              y.group(6) == "object:libtfalloc.so:" + x.group(6)[len("driver:"):] and
              x.group(6)[len("driver:"):] in WRAPPED,
              "%s: %s became %s" % (what, x.group(0), y.group(6)))
        replaced += 1
    return a, b, replaced


def case_html(ctx):
    """The HTML report draws a plot per CUDA device (as Chromium renders it, when installed)."""
    out_dir = ctx.tmp()
    rc, out, err = ctx.run([ctx.prog("tc_driver")], outdir=out_dir)
    check(rc == 0, "tc_driver exited %d: %s" % (rc, err))
    (prof,) = glob.glob(os.path.join(out_dir, "*.prof"))
    html = os.path.join(out_dir, "r.html")
    with open(html, "w") as f:
        r = subprocess.run([ctx.a.tool, "report", "--format", "html", prof], stdout=f,
                           stderr=subprocess.PIPE, env=BASE_ENV)
    check(r.returncode == 0, "report --format html: %s" % r.stderr.decode())
    text = open(html).read()
    check('"device_timelines"' in text and '"cuda:0"' in text, "no device series in the HTML")
    chromium = shutil.which("chromium")
    if chromium is None:
        return
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                        "file://" + html], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       timeout=120)
    dom = r.stdout.decode(errors="replace")
    for dev in ("cuda_0", "cuda_1", "cuda_host", "cuda_managed"):
        check('id="tfa-timeline-%s"' % dev in dom, "no plot of %s in the rendered page" % dev)
    check(dom.count('id="tfa-timeline"') == 1 and dom.count('id="tfa-peak-marker"') == 1,
          "the cpu plot's ids are not unique")


def case_resolver(ctx):
    prog = ctx.prog("tc_resolver")
    rc1, plain, err1 = ctx.run([prog], shim=False)
    rc2, shim, err2 = ctx.run([prog])
    check(rc1 == 0 and rc2 == 0, "tc_resolver: plain %d, shim %d: %s" % (rc1, rc2, err2))
    _, b, replaced = compare_resolver(plain, shim, "tc_resolver")
    got = {(m.group(1), m.group(2), m.group(3)): (m.group(4), m.group(5), m.group(6)) for m in b}
    lib = "object:libtfalloc.so:"
    want = {
        ("RESOLVE", "cuMemAlloc@3020", "0"): lib + "cuMemAlloc_v2",
        ("RESOLVE", "cuMemAllocAsync@11020", "0"): lib + "cuMemAllocAsync",
        ("RESOLVE", "cuMemAllocAsync@11020", "2"): lib + "cuMemAllocAsync_ptsz",
        ("RESOLVE", "cuMemFreeAsync@11020", "2"): lib + "cuMemFreeAsync_ptsz",
        ("RESOLVE", "cuGetProcAddress@11030", "0"): lib + "cuGetProcAddress",
        ("RESOLVE", "cuGetProcAddress@12000", "0"): lib + "cuGetProcAddress_v2",
        ("RESOLVE", "cuCtxGetDevice@13000", "0"): "driver:cuCtxGetDevice_v2",
        ("RESOLVE", "cuCtxGetDevice@2000", "0"): "driver:cuCtxGetDevice",
        ("RESOLVE", "cuMemAlloc@2000", "0"): "driver:cuMemAlloc",
        ("RESOLVE", "@0", "0"): "null",
        ("RESOLVE", "cuMemCreate@10000", "0"): "null",
    }
    for k, v in want.items():
        check(k in got and got[k][2] == v, "%s: %r, expected %s" % (k, got.get(k), v))
    # NULL symbolStatus (status=-) still replaced; RESOLVE2/4: through the fetched cuGetProcAddress.
    check(any(m.group(5) == "-" and m.group(6) == lib + "cuMemAlloc_v2" for m in b),
          "NULL symbolStatus: not replaced")
    for kind in ("RESOLVE2", "RESOLVE4"):
        check(any(m.group(1) == kind and m.group(6) == lib + "cuMemAlloc_v2" for m in b),
              "%s: cuMemAlloc not replaced" % kind)
    check("CALL cuCtxGetDevice@2000 -> device 1; @13000 (explicit context) -> device 1" in shim,
          "cuCtxGetDevice calls: %s" % shim)
    check(replaced >= 20, "only %d answers replaced" % replaced)
    check("cannot identify" not in err2, "identity failures logged: %s" % err2)


def case_resolver_fail_open(ctx):
    """Pointers the shim cannot identify pass through unchanged (fail-open), said once."""
    prog = ctx.prog("tc_resolver")
    for mode in ("anonymous", "alias", "foreign", "null"):
        env = {"FAKECUDA_GPA_MODE": mode, "TFALLOC_QUIET": "0"}
        rc1, plain, _ = ctx.run([prog], shim=False, env=env)
        rc2, shim, err = ctx.run([prog], env=env)
        check(rc1 == rc2, "%s: plain %d, shim %d: %s" % (mode, rc1, rc2, err))
        if rc1 != 0:
            continue
        compare_resolver(plain, shim, "tc_resolver " + mode)
        check(err.count("cannot identify") <= 1, "%s: logged more than once: %s" % (mode, err))


def case_static(ctx):
    """T5: the real static cudart's lookups, every memory entry point swapped."""
    prog = ctx.prog("tc_static")
    d = ctx.tmp()
    log = os.path.join(d, "fakecuda.log")
    rc, out, err = ctx.run([prog], env={"FAKECUDA_LOG": log, "TFALLOC_CUDA_TRACE": "1",
                                        "TFALLOC_QUIET": "0"})
    check(rc == 0 and "DONE" in out, "tc_static exited %d: %s %s" % (rc, out, err[-1000:]))
    check(re.search(r"cudaMalloc -> (500|36)", out), "cudaMalloc: %s" % out)
    asked = set()
    for line in open(log, errors="replace"):
        m = re.search(r"cuGetProcAddress(?:_v2)? symbol=(\S+) cudaVersion=(\d+) flags=(\d+) -> 0 "
                      r"status=0 pfn=(\S+)", line)
        if m and m.group(4) in WRAPPED:
            asked.add((m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)))
    swapped = set()
    for m in re.finditer(r'cuda: cuGetProcAddress(?:_v2)?\("(\S+)", (\d+), flags (\d+)\) -> '
                         r"tfalloc's (\S+)", err):
        swapped.add((m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)))
    check('dlsym(' in err and '"cuGetProcAddress_v2") -> tfalloc\'s cuGetProcAddress_v2' in err,
          "the runtime's dlsym of cuGetProcAddress_v2 was not swapped: %s" % err[-2000:])
    missing = asked - swapped
    check(not missing, "asked for but not swapped: %s" % sorted(missing))
    names = {a[3] for a in asked}
    for n in ("cuGetProcAddress", "cuGetProcAddress_v2", "cuMemAlloc_v2", "cuMemFree_v2",
              "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"):
        check(n in names, "the runtime did not ask for %s (%s)" % (n, sorted(names)))


def case_gate(ctx):
    """Device leaks reach the leak gate with their reachability class."""
    d = ctx.tmp()
    e = dict(BASE_ENV, LD_LIBRARY_PATH=ctx.a.doubles, TFALLOC_LIBRARY=ctx.a.lib)
    r = subprocess.run([ctx.a.tool, "run", "--leak-gate", "--output", d, "--", ctx.a.gate_prog],
                       env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check(r.returncode == 23, "leaky run: status %d: %s" % (r.returncode, r.stderr.decode()))
    (p,) = ctx.reports(d)
    kinds = {}
    for l in p["leaks"]:
        kinds[(l["device"], l["kind"])] = kinds.get((l["device"], l["kind"]), 0) + l["bytes"]
    # Every device block left at exit is definite (compute-sanitizer's rule), held or not.
    check(kinds.get(("cuda:0", "definite")) == 3 << 20, "cuda:0 definite: %r" % kinds)
    check(("cuda:0", "reachable") not in kinds, "cuda:0 reachable: %r" % kinds)
    check(kinds.get(("cuda_host", "definite")) == 4096, "cuda_host definite: %r" % kinds)
    d2 = ctx.tmp()
    r = subprocess.run([ctx.a.tool, "run", "--leak-gate", "--output", d2, "--", ctx.a.gate_prog, "clean"],
                       env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check(r.returncode == 0, "clean run: status %d: %s" % (r.returncode, r.stderr.decode()))


def case_hygiene(ctx):
    """T7: the shim loads everywhere under LD_BIND_NOW (no undefined CUDA symbol)."""
    for argv in (["/bin/true"], ["python3", "-c", "1"]):
        rc, out, err = ctx.run(argv, env={"LD_BIND_NOW": "1"}, doubles=False)
        check(rc == 0 and "symbol lookup error" not in err, "%s: %d %s" % (argv, rc, err))


def case_no_cuda(ctx):
    """A program that uses no CUDA loads no CUDA library because of the shim."""
    code = ("import ctypes\n"
            "ctypes.CDLL(None).dlsym\n"
            "m = open('/proc/self/maps').read()\n"
            "print('cuda' if 'libcuda' in m else 'none')\n")
    rc, out, err = ctx.run(["python3", "-c", code])
    check(rc == 0 and out.strip() == "none", "python3: %d %r %s" % (rc, out, err))
    rc, out, err = ctx.run([ctx.a.t6, ctx.a.t6_plugin])
    check(rc == 0 and "no cuda library" in out, "t6_main: %d %r %s" % (rc, out, err))


def case_rtld(ctx):
    """T6: RTLD_NEXT from a wrapper library, RTLD_DEFAULT from an RTLD_LOCAL plugin."""
    want = ["next:hello", "plugin 42", "cu symbol 7", "next:no cuda library"]
    for shim in (False, True):
        rc, out, err = ctx.run([ctx.a.t6, ctx.a.t6_plugin], shim=shim)
        check(rc == 0 and out.splitlines() == want,
              "t6_main %s: %d %r %s" % ("under the shim" if shim else "plain", rc, out, err))


def case_gpu(ctx):
    """With a real GPU and driver: tc_runtime against NVIDIA's libraries."""
    if not os.path.exists("/dev/nvidiactl"):
        raise Skip("no GPU (/dev/nvidiactl)")
    real = subprocess.run(["/sbin/ldconfig", "-p"], stdout=subprocess.PIPE).stdout.decode()
    if "libcuda.so.1" not in real:
        raise Skip("no NVIDIA driver (libcuda.so.1)")
    prog = ctx.prog("tc_runtime")
    out_dir = ctx.tmp()
    rc, out, err = ctx.run([prog], outdir=out_dir, doubles=False)
    if rc != 0 and "needs 2 devices" in err:
        raise Skip("fewer than 2 GPUs")
    check(rc == 0, "tc_runtime on the GPU: %d %s" % (rc, err))
    for p in ctx.reports(out_dir):
        check_ledger(p, {dev: d for (_, dev), d in ledgers(out).items()}, "tc_runtime (GPU)")


CASES = {k[len("case_"):]: v for k, v in globals().items() if k.startswith("case_")}


def main():
    ap = argparse.ArgumentParser()
    for a in ("tool", "lib", "bin", "doubles", "t6", "t6-plugin", "gate-prog", "limit-prog",
              "case"):
        ap.add_argument("--" + a, required=True)
    args = ap.parse_args()
    ctx = Ctx(args)
    try:
        CASES[args.case](ctx)
    except Skip as e:
        print("SKIP [%s]: %s" % (args.case, e))
        ctx.cleanup()
        return SKIP
    except Failure as e:
        print("FAIL [%s]: %s" % (args.case, e))
        print("kept for inspection: %s" % " ".join(ctx.dirs))
        return 1
    ctx.cleanup()
    print("PASS [%s]" % args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
