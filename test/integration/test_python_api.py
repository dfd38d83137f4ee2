# SPDX-License-Identifier: MIT
"""The Python module of the control API (tools/python/tfalloc.py) in python3
scripts run under the shim, and without it.

Python's small objects come from pymalloc's arenas, not malloc: the scripts
allocate bytearrays of 100 KB and more, which reach malloc as one block of
n + 1 bytes each, so what a scope charges is known exactly.  Every name a
script binds inside a scope is bound before it (a new key can grow a dict
past 512 bytes: a malloc charged to the scope), and a dict written inside a
scope has its keys already.

Cases:
  layout     the ctypes structures of the module against the C compiler's
             layout of preload/tfalloc.h (tp_api_layout), member by member
  scope      a scope charges its allocations to its resource: the module's
             stats and pointer_info, and the JSON report of a snapshot
             (dump_profile) and of the final profile
  nested     nested scopes, the decorator, a resource of another type as a
             scope, scopes per thread, a scope left by an exception, 64 deep
  cleanup    cleanup returns the live blocks and bytes of the container's
             resources; the container can be used again; the report lists
             the cleanups
  limit      a resource's limit makes a bytearray allocation raise MemoryError
  bad_calls  None and overlong names, unbalanced scope exits, unknown
             resources and containers, ...: tfalloc.Error with the right
             code, never a crash
  no_shim    the same script prints the same without the shim (through
             `tfalloc run` and LD_PRELOAD with it), tfalloc.active() False
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tfa_test as T  # noqa: E402

MODULE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "python"))
PYTHON = "/usr/bin/python3"
MiB = 1 << 20


def import_module():
    sys.path.insert(0, MODULE_DIR)
    import tfalloc  # noqa: E402 (the test's own process: no shim, inactive)
    return tfalloc


def write_script(ctx, name, text):
    path = os.path.join(ctx.scratch, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def py_env(extra=None):
    env = {"PYTHONPATH": MODULE_DIR, "PYTHONDONTWRITEBYTECODE": "1"}
    env.update(extra or {})
    return env


def run_script(ctx, text, args=(), via="tool", quiet=True, expect_status=0, what=""):
    """Runs a python3 script under the shim; returns (result, json of its last stdout line, report)."""
    path = write_script(ctx, (what or "script") + ".py", text)
    argv = [PYTHON, path] + list(args)
    if via == "tool":
        r = ctx.run_tool(argv, env=py_env(), quiet=quiet)
    else:
        r = ctx.run_preload(argv, env=py_env(), quiet=quiet)
    if r.returncode != expect_status:
        raise T.Failure("%s: exit status %s, expected %s\n%s"
                        % (what, r.returncode, expect_status, r.describe()))
    lines = r.out.strip().splitlines()
    T.check(lines, "%s: the script printed nothing\n%s" % (what, r.describe()))
    try:
        out = json.loads(lines[-1])
    except ValueError:
        raise T.Failure("%s: the last line is no JSON\n%s" % (what, r.describe()))
    rep = ctx.report(r.outdir, what)
    return r, out, rep


def python_process(rep, what):
    procs = [p for p in rep["processes"] if os.path.basename(p.get("exe") or "").startswith("python3")]
    T.check(len(procs) == 1, "%s: expected one python3 process in the report, got %s"
            % (what, T.summary(rep["processes"])))
    return procs[0]


def resources_of(proc, what):
    T.check("resources" in proc, "%s: the report has no \"resources\"" % what)
    return {(r["container"], r["type"], r["name"]): r for r in proc["resources"]}


def res_device(res, dev="cpu"):
    for d in res.get("devices", []):
        if d.get("device") == dev:
            return d
    raise T.Failure("resource %s/%s has no %r device: %r" % (res["container"], res["name"], dev, res))


# ---- layout ------------------------------------------------------------------------------------


def case_layout(ctx):
    tfalloc = import_module()
    r = ctx.run_plain([ctx.prog("tp_api_layout")])
    T.check_eq(r.returncode, 0, "tp_api_layout exit status")
    c = json.loads(r.out)
    mirror = {
        "tfalloc_resource_handle": tfalloc._ResourceHandle,
        "tfalloc_stats": tfalloc._Stats,
        "tfalloc_resource_info": tfalloc._ResourceInfo,
        "tfalloc_cleanup_result": tfalloc._CleanupResult,
        "tfalloc_pointer_info": tfalloc._PointerInfo,
        "tfalloc_container_info": tfalloc._ContainerInfo,
        "tfalloc_api": tfalloc._Api,
    }
    import ctypes
    for cname, st in mirror.items():
        T.check(cname in c, "tp_api_layout does not print %s" % cname)
        T.check_eq(ctypes.sizeof(st), c[cname]["size"], "sizeof(%s) in ctypes" % cname)
        names = [f[0] for f in st._fields_]
        T.check_eq(names, list(c[cname]["fields"]), "members of %s, in order" % cname)
        for name, off in c[cname]["fields"].items():
            T.check_eq(getattr(st, name).offset, off, "offset of %s.%s in ctypes" % (cname, name))
    k = c["constants"]
    T.check_eq(tfalloc.API_VERSION, k["TFALLOC_API_VERSION"], "API_VERSION")
    T.check_eq(tfalloc.NAME_MAX, k["TFALLOC_NAME_MAX"], "NAME_MAX")
    T.check_eq(tfalloc.DEBUG_MAX, k["TFALLOC_DEBUG_MAX"], "DEBUG_MAX")
    for name in ("ENOTACTIVE", "EINVAL", "ENAMETOOLONG", "ENOENT", "EEXIST", "ESCOPE", "ENOMEM", "EIO"):
        T.check_eq(getattr(tfalloc, name), k["TFALLOC_" + name], name)
    T.check(not tfalloc.active(), "tfalloc.active() is True in the test's own process")


# ---- scope -------------------------------------------------------------------------------------

SCOPE_SCRIPT = r'''
import json, shutil, sys
import tfalloc
MiB = 1 << 20
assert tfalloc.active()
a = b = None
with tfalloc.scope("model", "encoder"):
    a = bytearray(MiB)
    b = bytearray(2 * MiB)
del b                      # freed outside the scope: it leaves the resource all the same
c = bytearray(3 * MiB)     # no scope: nobody's
enc = tfalloc.lookup("model", "scope", "encoder")
out = {
    "id": enc.id, "container": enc.container, "name": enc.name, "type": enc.type,
    "stats": enc.stats("cpu"),
    "info": {k: v for k, v in enc.info()._asdict().items() if k != "resource"},
    "ptr_a": tfalloc.pointer_info(a)._asdict(),
    "ptr_c": tfalloc.pointer_info(c)._asdict(),
    "device": tfalloc.device_stats("cpu"),
}
path = tfalloc.dump_profile()
out["profile"] = path
shutil.copy(path, sys.argv[1])    # the snapshot: the final profile replaces it at exit
enc.unref()
print(json.dumps(out))
'''


def case_scope(ctx):
    snapdir = ctx.mkdtemp("snapshot")
    r, out, rep = run_script(ctx, SCOPE_SCRIPT, [os.path.join(snapdir, "snapshot.prof")], what="scope")
    T.check_eq((out["container"], out["name"], out["type"]), ("model", "encoder", "scope"), "handle")
    st = out["stats"]
    for k, v in {"num_allocs": 2, "num_frees": 1, "bytes_in_use": MiB + 1,
                 "peak_bytes_in_use": 3 * MiB + 2, "total_bytes": 3 * MiB + 2,
                 "largest_alloc_size": 2 * MiB + 1, "bytes_limit": 0}.items():
        T.check_eq(st[k], v, "module stats of model/encoder: " + k)
    T.check_ge(st["allocated_bytes_in_use"], MiB + 1, "allocated_bytes_in_use")
    T.check_ge(st["total_allocated_bytes"], 3 * MiB + 2, "total_allocated_bytes")
    info = out["info"]
    T.check_eq(info["memory_used"], MiB + 1, "info memory_used")
    T.check_eq(info["peak_memory_used"], 3 * MiB + 2, "info peak_memory_used")
    T.check_eq(info["refcount"], 2, "refcount (the manager's and the lookup's; the scope's given back)")
    T.check_eq(info["deleted"], False, "deleted")
    T.check_eq(info["debug_string"], "scope encoder", "debug_string")
    T.check_eq(out["ptr_a"]["resource_id"], out["id"], "pointer_info(a).resource_id")
    T.check_eq(out["ptr_a"]["requested_size"], MiB + 1, "pointer_info(a).requested_size")
    T.check_ge(out["ptr_a"]["allocated_size"], MiB + 1, "pointer_info(a).allocated_size")
    T.check_eq(out["ptr_a"]["device"], "cpu", "pointer_info(a).device")
    T.check_eq(out["ptr_c"]["resource_id"], 0, "pointer_info(c).resource_id (no scope)")
    T.check_ge(out["device"]["bytes_in_use"], 4 * MiB + 2, "device_stats bytes_in_use")
    T.check_ge(out["device"]["num_allocs"], 3, "device_stats num_allocs")

    # The snapshot: memory used by the resource at that moment, through the report.
    snap = ctx.report(snapdir, "snapshot")
    proc = python_process(snap, "snapshot")
    T.check_eq(proc.get("end_reason"), "running", "the snapshot's end_reason")
    res = resources_of(proc, "snapshot").get(("model", "scope", "encoder"))
    T.check(res is not None, "snapshot: no resource model/encoder in %r" % proc["resources"])
    T.check_eq(res["id"], out["id"], "snapshot: id of model/encoder")
    T.check_eq(res["state"], "live", "snapshot: state")
    T.check_eq(res["memory_used"], MiB + 1, "snapshot: memory_used")
    T.check_eq(res["peak_memory_used"], 3 * MiB + 2, "snapshot: peak_memory_used")
    d = res_device(res)
    for k, v in {"num_allocs": 2, "num_frees": 1, "bytes_in_use": MiB + 1,
                 "peak_bytes_in_use": 3 * MiB + 2, "total_bytes": 3 * MiB + 2,
                 "largest_alloc_size": 2 * MiB + 1}.items():
        T.check_eq(d[k], v, "snapshot: model/encoder cpu " + k)

    # The final profile: the same totals (a may be freed by then, or leaked to it).
    proc = python_process(rep, "final")
    T.check_exited(proc, 0)
    res = resources_of(proc, "final").get(("model", "scope", "encoder"))
    T.check(res is not None, "final: no resource model/encoder")
    d = res_device(res)
    T.check_eq(d["num_allocs"], 2, "final: num_allocs")
    T.check_eq(d["total_bytes"], 3 * MiB + 2, "final: total_bytes")
    T.check_eq(res["peak_memory_used"], 3 * MiB + 2, "final: peak_memory_used")
    T.check_eq(res["memory_used"], res["leaked_bytes"], "final: memory_used = leaked_bytes")
    T.check(res["memory_used"] in (0, MiB + 1), "final: memory_used %d" % res["memory_used"])


# ---- nested ------------------------------------------------------------------------------------

NESTED_SCRIPT = r'''
import json, threading
import tfalloc
K = 100000
blocks = dict.fromkeys("abcdefghijklmnopqrs")
too_deep = None
with tfalloc.scope("model", "outer"):
    blocks["a"] = bytearray(1 * K)
    with tfalloc.scope("model", "inner"):
        blocks["b"] = bytearray(2 * K)
        with tfalloc.scope("other", "deep"):
            blocks["c"] = bytearray(3 * K)
        blocks["d"] = bytearray(4 * K)
    blocks["e"] = bytearray(5 * K)
blocks["f"] = bytearray(6 * K)

@tfalloc.scope("model", "decorated")
def work(n):
    return bytearray(n)

blocks["g"] = work(7 * K)
with tfalloc.scope("model", "outer"):
    blocks["h"] = work(8 * K)            # the decorator's scope inside another
    blocks["i"] = bytearray(9 * K)       # and back to outer

r = tfalloc.lookup_or_create("model", "weights", "table")   # a resource of another type
with tfalloc.scope(r):
    blocks["j"] = bytearray(10 * K)
with r.scope():
    blocks["k"] = bytearray(11 * K)
with tfalloc.scope("single"):                               # the default container
    blocks["l"] = bytearray(12 * K)

# Scopes are per thread: the main thread's allocation while a thread is in a scope is nobody's.
entered, allocated = threading.Event(), threading.Event()
def worker():
    with tfalloc.scope("threads", "worker"):
        blocks["m"] = bytearray(13 * K)
        entered.set()
        allocated.wait()
t = threading.Thread(target=worker)
t.start()
entered.wait()
blocks["n"] = bytearray(14 * K)
allocated.set()
t.join()

# A scope left by an exception.
try:
    with tfalloc.scope("model", "raises"):
        blocks["o"] = bytearray(15 * K)
        raise ValueError("out")
except ValueError:
    pass
blocks["p"] = bytearray(16 * K)

# 64 deep, not 65.
for i in range(64):
    tfalloc.scope_enter("deep", "level%d" % i)
blocks["q"] = bytearray(17 * K)
try:
    tfalloc.scope_enter("deep", "level64")
    too_deep = "entered"
except tfalloc.Error as e:
    too_deep = e.name
blocks["r"] = bytearray(18 * K)
for i in range(64):
    tfalloc.scope_exit()
blocks["s"] = bytearray(19 * K)

names = {}
def name_of(rid):
    if rid == 0:
        return None
    if rid not in names:
        for key in [("model", "scope", n) for n in ("outer", "inner", "decorated", "raises")] + [
                ("other", "scope", "deep"), ("model", "weights", "table"), ("", "scope", "single"),
                ("threads", "scope", "worker"), ("deep", "scope", "level63")]:
            try:
                res = tfalloc.lookup(*key)
            except tfalloc.Error:
                continue
            names[res.id] = "%s/%s" % (res.container, res.name)
            res.unref()
    return names.get(rid, "?%d" % rid)
owner = {k: name_of(tfalloc.pointer_info(v).resource_id) for k, v in sorted(blocks.items())}
used = {}
for key in [("model", "scope", "outer"), ("model", "scope", "inner"), ("other", "scope", "deep"),
            ("model", "scope", "decorated"), ("model", "weights", "table"), ("", "scope", "single"),
            ("threads", "scope", "worker"), ("model", "scope", "raises")]:
    res = tfalloc.lookup(*key)
    inf = res.info()
    used["%s/%s" % (res.container, res.name)] = [inf.memory_used, inf.refcount]
    res.unref()
print(json.dumps({"owner": owner, "used": used, "too_deep": too_deep}))
'''


def case_nested(ctx):
    K = 100000
    r, out, rep = run_script(ctx, NESTED_SCRIPT, what="nested")
    expect = {"a": "model/outer", "b": "model/inner", "c": "other/deep", "d": "model/inner",
              "e": "model/outer", "f": None, "g": "model/decorated", "h": "model/decorated",
              "i": "model/outer", "j": "model/table", "k": "model/table", "l": "default/single",
              "m": "threads/worker", "n": None, "o": "model/raises", "p": None,
              "q": "deep/level63", "r": "deep/level63", "s": None}
    for k, v in expect.items():
        T.check_eq(out["owner"].get(k), v, "the resource of block %s" % k)
    T.check_eq(out["too_deep"], "ESCOPE", "the 65th nested scope")

    def size(*letters):
        return sum((ord(l) - ord("a") + 1) * K + 1 for l in letters)
    # memory_used and refcount (the manager's and the lookup's: every scope gave its reference back)
    want = {"model/outer": size("a", "e", "i"), "model/inner": size("b", "d"), "other/deep": size("c"),
            "model/decorated": size("g", "h"), "model/table": size("j", "k"),
            "default/single": size("l"), "threads/worker": size("m"), "model/raises": size("o")}
    for k, v in want.items():
        T.check_eq(out["used"][k][0], v, "memory_used of " + k)
    for k in ("model/outer", "model/inner", "other/deep", "model/decorated", "default/single",
              "threads/worker", "model/raises"):
        T.check_eq(out["used"][k][1], 2, "refcount of %s while looked up" % k)
    # lookup_or_create's reference is kept by the script: 3.
    T.check_eq(out["used"]["model/table"][1], 3, "refcount of model/table while looked up")

    proc = python_process(rep, "nested")
    T.check_exited(proc, 0)
    res = resources_of(proc, "nested")
    # (Not threads/worker: its wait for the main thread makes a lock, a malloc of its own.)
    for key, letters in ((("model", "scope", "outer"), "aei"), (("model", "scope", "inner"), "bd"),
                         (("model", "weights", "table"), "jk"), (("default", "scope", "single"), "l"),
                         (("other", "scope", "deep"), "c"), (("model", "scope", "decorated"), "gh")):
        T.check(key in res, "no resource %s in the report" % (key,))
        d = res_device(res[key])
        T.check_eq(d["num_allocs"], len(letters), "report: num_allocs of %s" % (key,))
        T.check_eq(d["total_bytes"], size(*letters), "report: total_bytes of %s" % (key,))
    d = res_device(res[("threads", "scope", "worker")])
    T.check_range(d["total_bytes"], size("m"), size("m") + 4096, "report: total_bytes of threads/worker")
    T.check_ge(d["peak_bytes_in_use"], size("m"), "report: peak_bytes_in_use of threads/worker")


# ---- cleanup -----------------------------------------------------------------------------------

CLEANUP_SCRIPT = r'''
import json
import tfalloc
K = 100000
out = {}
a = b = c = d = e = f = tmp = None
with tfalloc.scope("req", "parse"):
    a = bytearray(1 * K)
    b = bytearray(2 * K)
    tmp = bytearray(3 * K)
    del tmp                              # freed: not a leak of the request
with tfalloc.scope("req", "render"):
    c = bytearray(4 * K)
res = tfalloc.cleanup("req")
out["first"] = [res.blocks, res.bytes, res.resources]
blocks, nbytes = res                     # a (blocks, bytes) pair
out["pair"] = [blocks, nbytes]
try:
    tfalloc.cleanup("req")
    out["again"] = "no error"
except tfalloc.Error as e:
    out["again"] = e.name
try:
    tfalloc.lookup("req", "scope", "parse")
    out["lookup_after"] = "found"
except tfalloc.Error as e:
    out["lookup_after"] = e.name
# The container once more: only what this request left.
with tfalloc.scope("req", "parse"):
    d = bytearray(5 * K)
out["second"] = list(tfalloc.cleanup("req"))
# Everything freed: nothing to report.
with tfalloc.scope("clean", "x"):
    e = bytearray(6 * K)
    del e
out["clean"] = list(tfalloc.cleanup("clean"))
# The default container, and a resource deleted before the cleanup still counts.
r = tfalloc.create("", "scope", "gone")
with tfalloc.scope(r):
    f = bytearray(7 * K)
r.delete()
out["default"] = list(tfalloc.cleanup(""))
print(json.dumps(out))
'''


def case_cleanup(ctx):
    K = 100000
    r, out, rep = run_script(ctx, CLEANUP_SCRIPT, quiet=False, what="cleanup")
    T.check_eq(out["first"], [3, 1 * K + 2 * K + 4 * K + 3, 2], "first cleanup of req (blocks, bytes, resources)")
    T.check_eq(out["pair"], [3, 7 * K + 3], "cleanup as a (blocks, bytes) pair")
    T.check_eq(out["again"], "ENOENT", "cleanup of a container cleaned up")
    T.check_eq(out["lookup_after"], "ENOENT", "lookup in a container cleaned up")
    T.check_eq(out["second"], [1, 5 * K + 1], "second cleanup of req: only the new request's block")
    T.check_eq(out["clean"], [0, 0], "cleanup of a container whose blocks were freed")
    T.check_eq(out["default"], [1, 7 * K + 1], "cleanup of the default container")
    T.check("cleanup of container \"req\": 3 blocks" in r.err,
            "no cleanup line for req on stderr\n" + r.describe())

    proc = python_process(rep, "cleanup")
    T.check_exited(proc, 0)
    T.check("cleanups" in proc, "the report has no \"cleanups\"")
    got = [(c["container"], c["blocks"], c["bytes"]) for c in proc["cleanups"]]
    T.check_eq(got, [("req", 3, 7 * K + 3), ("req", 1, 5 * K + 1), ("default", 1, 7 * K + 1)],
               "cleanups in the report (container, blocks, bytes)")
    first = proc["cleanups"][0]
    by_res = {}
    for g in first["groups"]:
        by_res.setdefault(g["resource"], [0, 0])
        by_res[g["resource"]][0] += g["blocks"]
        by_res[g["resource"]][1] += g["bytes"]
    T.check_eq(by_res, {"req/parse": [2, 3 * K + 2], "req/render": [1, 4 * K + 1]},
               "the first cleanup's groups by resource")
    res = resources_of(proc, "cleanup")
    T.check_eq(res[("req", "scope", "parse")]["state"], "deleted", "state of a cleaned up resource")


# ---- limit -------------------------------------------------------------------------------------

LIMIT_SCRIPT = r'''
import json
import tfalloc
K = 100000
out = {}
a = b = c = d = e = f = None
over = one_more = "allocated"
r = tfalloc.create("model", "scope", "capped")    # the type scope() uses: the scope finds it
r.set_limit(10 * K)
with tfalloc.scope("model", "capped"):
    a = bytearray(6 * K)
    try:
        b = bytearray(6 * K)
    except MemoryError:
        over = "MemoryError"
    c = bytearray(4 * K - 2)                       # (6 K + 1) + (4 K - 1): the limit exactly
    try:
        d = bytearray(1000)                        # past 512 bytes: from malloc, not pymalloc
    except MemoryError:
        one_more = "MemoryError"
out["over"], out["one_more"] = over, one_more
out["used"] = r.info().memory_used
out["limit"] = r.info().bytes_limit
out["outside"] = len(bytearray(20 * K))            # no scope: no limit
del c
with tfalloc.scope(r):
    e = bytearray(4 * K - 2)                       # room again
r.set_limit(0)
with tfalloc.scope(r):
    f = bytearray(50 * K)
out["unlimited"] = r.info().memory_used
r.set_limit(123 * K)
print(json.dumps(out))
'''


def case_limit(ctx):
    K = 100000
    r, out, rep = run_script(ctx, LIMIT_SCRIPT, what="limit")
    T.check_eq(out["over"], "MemoryError", "a bytearray past the resource's limit")
    T.check_eq(out["one_more"], "MemoryError", "one byte past the limit")
    T.check_eq(out["used"], 10 * K, "memory_used at the limit")
    T.check_eq(out["limit"], 10 * K, "bytes_limit")
    T.check_eq(out["outside"], 20 * K, "an allocation outside the scope")
    T.check_eq(out["unlimited"], 10 * K + 50 * K + 1, "memory_used without the limit")
    proc = python_process(rep, "limit")
    T.check_exited(proc, 0)
    res = resources_of(proc, "limit")[("model", "scope", "capped")]
    T.check_eq(res["bytes_limit"], 123 * K, "report: bytes_limit of model/capped")
    T.check_eq(res["peak_memory_used"], 10 * K + 50 * K + 1, "report: peak_memory_used")
    T.check_eq(T.device(proc).get("bytes_limit"), 0, "the cpu device has no limit")


# ---- bad calls ---------------------------------------------------------------------------------

BAD_SCRIPT = r'''
import json
import tfalloc
results = {}
def attempt(what, f):
    try:
        f()
        results[what] = "ok"
    except tfalloc.Error as e:
        assert isinstance(e.code, int) and e.message and str(e)
        results[what] = e.name
long_name = "n" * 200
r = tfalloc.create("bad", "T", "r")
calls = {
    "scope None name": lambda: tfalloc.scope("c", None).__enter__(),
    "scope None container": lambda: tfalloc.scope(None, "n").__enter__(),
    "scope long name": lambda: tfalloc.scope("c", long_name).__enter__(),
    "scope long container": lambda: tfalloc.scope(long_name, "n").__enter__(),
    "scope empty name": lambda: tfalloc.scope("c", "").__enter__(),
    "scope 127 bytes": lambda: (tfalloc.scope_enter("c", "x" * 127), tfalloc.scope_exit()),
    "scope 128 bytes": lambda: tfalloc.scope_enter("c", "x" * 128),
    "scope name with NUL": lambda: tfalloc.scope_enter("c", "a\0b"),
    "scope exit without enter": tfalloc.scope_exit,
    "with: exit already done": lambda: exec("with tfalloc.scope('c', 'n'):\n    tfalloc.scope_exit()"),
    "create None type": lambda: tfalloc.create("c", None, "n"),
    "create long type": lambda: tfalloc.create("c", long_name, "n"),
    "create twice": lambda: tfalloc.create("bad", "T", "r"),
    "lookup missing": lambda: tfalloc.lookup("bad", "T", "missing"),
    "lookup unknown container": lambda: tfalloc.lookup("nowhere", "T", "r"),
    "lookup_or_create None": lambda: tfalloc.lookup_or_create("c", "T", None),
    "delete missing": lambda: tfalloc.delete("bad", "T", "missing"),
    "delete long name": lambda: tfalloc.delete("bad", "T", long_name),
    "cleanup unknown": lambda: tfalloc.cleanup("never-made"),
    "cleanup None": lambda: tfalloc.cleanup(None),
    "cleanup long": lambda: tfalloc.cleanup(long_name),
    "set_limit negative": lambda: r.set_limit(-1),
    "set_limit past int64": lambda: r.set_limit(1 << 63),
    "stats unknown device": lambda: r.stats("cuda:7"),
    "stats None device": lambda: r.stats(None),
    "device_stats unknown": lambda: tfalloc.device_stats("tpu"),
    "pointer_info unknown": lambda: tfalloc.pointer_info(4096),
    "pointer_info NULL": lambda: tfalloc.pointer_info(0),
    "container_info _shared": lambda: tfalloc.container_info("", "_x", "node"),
    "container_info no node": lambda: tfalloc.container_info("", "", ""),
}
for what, f in calls.items():
    attempt(what, f)
# A deleted resource's handle, twice; unref past zero; a forged handle.
tfalloc.delete(r)
attempt("delete deleted handle", r.delete)
attempt("unref to zero", r.unref)          # create's reference was the manager's: none left
attempt("info of deleted", r.info)
forged = tfalloc.Resource()
forged._handle.id = 1 << 20
attempt("info forged", forged.info)
attempt("scope forged", lambda: tfalloc.scope(forged).__enter__())
# After all that the thread has no scope left over, and allocations are nobody's.
attempt("final scope exit", tfalloc.scope_exit)
x = bytearray(300000)
results["last block's resource"] = tfalloc.pointer_info(x).resource_id
print(json.dumps(results, sort_keys=True))
'''

BAD_EXPECT = {
    "scope None name": "EINVAL",
    "scope None container": "EINVAL",
    "scope long name": "ENAMETOOLONG",
    "scope long container": "ENAMETOOLONG",
    "scope empty name": "EINVAL",
    "scope 127 bytes": "ok",
    "scope 128 bytes": "ENAMETOOLONG",
    "scope name with NUL": "EINVAL",
    "scope exit without enter": "ESCOPE",
    "with: exit already done": "ESCOPE",
    "create None type": "EINVAL",
    "create long type": "ENAMETOOLONG",
    "create twice": "EEXIST",
    "lookup missing": "ENOENT",
    "lookup unknown container": "ENOENT",
    "lookup_or_create None": "EINVAL",
    "delete missing": "ENOENT",
    "delete long name": "ENAMETOOLONG",
    "cleanup unknown": "ENOENT",
    "cleanup None": "EINVAL",
    "cleanup long": "ENAMETOOLONG",
    "set_limit negative": "EINVAL",
    "set_limit past int64": "EINVAL",
    "stats unknown device": "ENOENT",
    "stats None device": "EINVAL",
    "device_stats unknown": "ENOENT",
    "pointer_info unknown": "ENOENT",
    "pointer_info NULL": "EINVAL",
    "container_info _shared": "EINVAL",
    "container_info no node": "EINVAL",
    "delete deleted handle": "ENOENT",
    "unref to zero": "EINVAL",
    "info of deleted": "ok",
    "info forged": "ENOENT",
    "scope forged": "ENOENT",
    "final scope exit": "ESCOPE",
    "last block's resource": 0,
}


def case_bad_calls(ctx):
    r, out, rep = run_script(ctx, BAD_SCRIPT, what="bad_calls")
    T.check_eq(sorted(out), sorted(BAD_EXPECT), "the calls made")
    for k, v in BAD_EXPECT.items():
        T.check_eq(out[k], v, k)
    proc = python_process(rep, "bad_calls")
    T.check_exited(proc, 0)
    T.check_consistent(proc, threads_at_exit=True)


# ---- without the shim --------------------------------------------------------------------------

WORKLOAD_SCRIPT = r'''
import sys
import tfalloc
K = 100000
total = 0
data = parsed = cache = req = None

@tfalloc.scope("app", "step")
def step(i):
    return bytearray((i + 1) * K)

with tfalloc.scope("app", "load"):
    data = [bytearray(K) for _ in range(4)]
    with tfalloc.scope("app", "parse"):
        parsed = bytearray(3 * K)
total += sum(len(d) for d in data) + len(parsed)
steps = [step(i) for i in range(3)]
total += sum(len(s) for s in steps)
r = tfalloc.lookup_or_create("app", "cache", "lru", "the LRU cache")
r.set_limit(64 * K)
with r.scope():
    cache = bytearray(10 * K)
total += len(cache)
info = r.info()
st = r.stats()
r.unref()
with tfalloc.scope("request", "handler"):
    req = bytearray(2 * K)
total += len(req)
res = tfalloc.cleanup("request")
blocks, nbytes = res
ci = tfalloc.container_info("", "", "node", True)
dev = tfalloc.device_stats("cpu")
pi = tfalloc.pointer_info(cache)
path = tfalloc.dump_profile()
tfalloc.delete("app", "cache", "lru")
tfalloc.clear()
print("total", total)
print("types", type(info).__name__, type(st).__name__, type(res).__name__, type(ci).__name__,
      type(dev).__name__, type(pi).__name__, sorted(st) == sorted(dev))
print("done")
# What differs with and without the shim goes to stderr.
print("active=%s blocks=%d bytes=%d used=%d profile=%s exit=%r ci=%r" % (
    tfalloc.active(), blocks, nbytes, info.memory_used, path is not None,
    tfalloc.scope_exit() if not tfalloc.active() else "-", tuple(ci)), file=sys.stderr)
'''


def case_no_shim(ctx):
    path = write_script(ctx, "workload.py", WORKLOAD_SCRIPT)
    argv = [PYTHON, path]
    plain = ctx.run_plain(argv, env=py_env())
    T.check_eq(plain.returncode, 0, "plain run's exit status\n" + plain.describe())
    T.check("done" in plain.out, "plain run did not finish\n" + plain.describe())
    T.check("active=False blocks=0 bytes=0 used=0 profile=False exit=-1 ci=('', '', False)" in plain.err,
            "without the shim: active() False, zeroed results, ENOTACTIVE from scope_exit\n"
            + plain.describe())
    for via in ("tool", "preload"):
        if via == "tool":
            shim = ctx.run_tool(argv, env=py_env())
        else:
            shim = ctx.run_preload(argv, env=py_env())
        T.same_output(plain, shim, "workload via " + via)
        T.check("active=True blocks=1 bytes=200001 used=1000001 profile=True exit='-' "
                "ci=('default', 'node', False)" in shim.err,
                "under the shim (%s): active() True and the figures\n%s" % (via, shim.describe()))
    # The module without the shim, in a process where the symbol is absent: nothing raises.
    r = ctx.run_plain([PYTHON, "-c", "import tfalloc as t; t.scope_exit(); t.scope_enter(None, None); "
                       "print(t.active(), t.cleanup('nope'), t.api_version())"], env=py_env())
    T.check_eq(r.returncode, 0, "bad calls without the shim\n" + r.describe())
    T.check_eq(r.out.strip(), "False CleanupResult(blocks=0, bytes=0, resources=0) None",
               "bad calls without the shim are no-ops")


CASES = {
    "layout": case_layout,
    "scope": case_scope,
    "nested": case_nested,
    "cleanup": case_cleanup,
    "limit": case_limit,
    "bad_calls": case_bad_calls,
    "no_shim": case_no_shim,
}

if __name__ == "__main__":
    T.main(CASES)
