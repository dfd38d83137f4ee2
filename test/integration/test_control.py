# SPDX-License-Identifier: MIT
"""The control API (preload/tfalloc.h) and resources in the report.

tp_control checks the semantics of every call itself (FAIL lines, exit 1);
here: the program links nothing of tfalloc and runs unchanged without the
shim, the report groups memory by container and resource, leaks carry their
resource, cleanups are in the profile, --tag-by thread charges threads by
name, and the README's C, C++ and Python examples compile and run as
documented, with and without the shim.
"""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def resources(proc):
    return {(r["container"], r["type"], r["name"]): r for r in proc.get("resources", [])}


def cpu(res):
    devs = [d for d in res["devices"] if d["device"] == "cpu"]
    T.check(len(devs) == 1, "resource %s/%s has no cpu figures: %r" % (res["container"], res["name"], res))
    return devs[0]


def needed_libs(path):
    out = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE, universal_newlines=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.*)\]", out)


def api_case(ctx):
    prog = ctx.prog("tp_control")
    T.check(not any("tfalloc" in l for l in needed_libs(prog)),
            "tp_control must not need libtfalloc.so: %s" % needed_libs(prog))
    plain = ctx.run_plain([prog, "inactive"])
    T.check(plain.returncode == 0 and "inactive done, 0 failures" in plain.out,
            "without the shim every call must say not active\n" + plain.describe())
    r, rep = ctx.run_and_report([prog, "api"], what="tp_control api")
    T.check("api done, 0 failures" in r.out, "tp_control api\n" + r.describe())
    procs = [p for p in rep["processes"] if p.get("complete")]
    T.check(len(procs) == 1, "one complete profile expected: %s" % T.summary(rep["processes"]))
    proc = procs[0]
    res = resources(proc)
    layer1 = res.get(("model", "weights", "layer1"))
    T.check(layer1 is not None, "model/layer1 missing from the report: %r" % list(res))
    T.check_eq(layer1["debug_string"], "the first layer", "debug string")
    T.check_eq(layer1["bytes_limit"], 6000, "layer1's limit")
    T.check_eq(layer1["memory_used"], 3000, "layer1's memory at exit (w1 1000 + w2 2000)")
    T.check_eq(layer1["peak_memory_used"], 5900, "layer1's peak (3000 + 2000 + 900)")
    T.check_eq(layer1["state"], "live", "layer1's state")
    d = cpu(layer1)
    # malloc 3000, calloc 1000, realloc -> 2000, malloc 900, realloc 3000 -> 1000
    T.check_eq(d["num_allocs"], 5, "layer1's allocations")
    T.check_eq(d["num_frees"], 3, "layer1's frees")
    T.check_eq(d["bytes_in_use"], 3000, "layer1's bytes in use")
    T.check_eq(layer1["leaked_bytes"], 3000, "layer1's leaked bytes")
    T.check_eq(layer1["leaked_blocks"], 2, "layer1's leaked blocks")
    tmp = res.get(("model", "scope", "tmp"))
    T.check(tmp is not None and cpu(tmp)["total_bytes"] == 700 and tmp["memory_used"] == 0,
            "model/tmp: %r" % tmp)
    grads = res.get(("model", "grads", "layer1"))
    T.check(grads is not None and grads["state"] == "deleted", "model/grads/layer1 deleted: %r" % grads)
    handler = res.get(("req", "scope", "handler"))
    T.check(handler is not None and handler["state"] == "deleted"
            and cpu(handler)["num_allocs"] == 8 and cpu(handler)["total_bytes"] == 4 * 384,
            "req/handler: %r" % handler)
    # Every leak of layer1 names it; the rest name no resource.
    tagged = [l for l in proc["leaks"] if l.get("resource") == "model/layer1"]
    T.check_eq(sum(l["bytes"] for l in tagged), 3000, "leaked bytes charged to model/layer1")
    T.check(all(l.get("resource") in (None, "model/layer1") for l in proc["leaks"]),
            "leaks of other resources: %r" % [l.get("resource") for l in proc["leaks"]])
    cl = proc.get("cleanups", [])
    T.check_eq(len(cl), 1, "cleanups recorded (req leaves one block; the clean one is not recorded)")
    T.check_eq((cl[0]["container"], cl[0]["blocks"], cl[0]["bytes"]), ("req", 1, 256), "the cleanup of req")
    g = cl[0]["groups"]
    T.check(len(g) == 1 and g[0]["resource"] == "req/handler" and g[0]["bytes"] == 256,
            "the cleanup's group: %r" % g)
    T.check(any(f.get("function") == "api" for f in g[0]["stack"]),
            "the cleanup's block has its allocation stack (api): %r" % g[0]["stack"])
    # The text report too.
    text = ctx._run([ctx.tool, "report", r.outdir], ctx.env(), None, 60, "report")
    T.check("model/layer1 [weights]" in text.out and "cleanup of container req" in text.out,
            "the text report shows resources and cleanups\n" + text.out[:3000])
    # And the HTML page, drawn by a browser (scripts/setup.sh installs chromium).
    page = os.path.join(ctx.scratch, "report.html")
    h = ctx._run([ctx.tool, "report", "--format", "html", "-o", page, r.outdir], ctx.env(), None, 60, "report")
    T.check(h.returncode == 0, "tfalloc report --format html\n" + h.describe())
    dom = ctx._run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                    "file://" + page], ctx.env(), None, 90, "chromium")
    m = re.search(r'id="tfa-resources">(.*?)</table>', dom.out, re.S)
    T.check(m is not None and "<td>model/layer1</td><td>weights</td>" in m.group(1)
            and "<td>model/layer1 (deleted)</td><td>grads</td>" in m.group(1)
            and "req/handler (deleted)" in m.group(1),
            "the HTML page's resources table\n" + (m.group(1)[:2000] if m else dom.describe()))


def scopes_case(ctx):
    prog = ctx.prog("tp_control")
    r, rep = ctx.run_and_report([prog, "scopes"], what="tp_control scopes")
    T.check("scopes done, 0 failures" in r.out, "tp_control scopes\n" + r.describe())


def threads_case(ctx):
    prog = ctx.prog("tp_control")
    r, rep = ctx.run_and_report([prog, "threads"], what="tp_control threads",
                                tool_args=["--tag-by", "thread"])
    T.check("threads done" in r.out, r.describe())
    proc = T.only_process(rep, "tp_control threads")
    res = resources(proc)
    a = res.get(("threads", "thread", "pool-a"))
    b = res.get(("threads", "thread", "pool-b"))
    main = res.get(("threads", "thread", "tp_control"))
    T.check(a is not None and b is not None and main is not None,
            "threads/pool-a, pool-b and tp_control expected: %r" % list(res))
    T.check_eq((cpu(a)["num_allocs"], a["memory_used"]), (10, 10000), "pool-a")
    T.check_eq((cpu(b)["num_allocs"], b["memory_used"]), (30, 30000), "pool-b")
    sc = res.get(("explicit", "scope", "scope"))
    T.check(sc is not None and sc["memory_used"] == 5000, "the scope wins over the thread: %r" % sc)
    # Everything of the process is charged somewhere: the device's total is the resources' sum.
    total = sum(cpu(x)["total_bytes"] for x in res.values())
    T.check_eq(total, T.device(proc)["total_bytes"], "bytes charged to resources vs the device's")
    bad = ctx.run_tool([prog, "threads"], tool_args=["--tag-by", "process"])
    T.check(bad.returncode == 125 and "--tag-by process" in bad.err, "a bad --tag-by\n" + bad.describe())


def dump_signal_case(ctx):
    """A SIGTERM that comes while tfalloc_dump_profile writes ends the process (deferred, not lost)."""
    prog = ctx.prog("tp_control")
    out = ctx.mkdtemp("out")
    env = ctx.env({"LD_PRELOAD": ctx.lib, "TFALLOC_OUTPUT": out, "TFALLOC_QUIET": "1"})
    p = subprocess.Popen([prog, "dumploop"], stdout=subprocess.PIPE, env=env, cwd=ctx.scratch)
    T.check(p.stdout.readline() == b"dumping\n", "tp_control dumploop did not start")
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    try:
        status = p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise T.Failure("SIGTERM during tfalloc_dump_profile was lost: the process kept running")
    T.check_eq(status, -signal.SIGTERM, "exit status of tp_control dumploop after SIGTERM")
    proc = T.only_process(ctx.report(out), "tp_control dumploop")
    T.check_eq(proc["end_reason"], "signal", "end reason")


# ---- the README's examples --------------------------------------------------


def readme_example(kind):
    text = open(os.path.join(ROOT, "README.md")).read()
    m = re.search(r"<!-- example: %s -->\s*```[a-z]+\n(.*?)```" % kind, text, re.S)
    T.check(m is not None, "README.md has no example marked %s" % kind)
    return m.group(1)


def include_dir(ctx):
    # build/lib/libtfalloc.so -> build/include
    d = os.path.join(os.path.dirname(os.path.dirname(ctx.lib)), "include")
    T.check(os.path.exists(os.path.join(d, "tfalloc.h")), "no tfalloc.h in %s" % d)
    return d


def compile_example(ctx, kind, compiler, suffix):
    src = os.path.join(ctx.scratch, "example" + suffix)
    exe = os.path.join(ctx.scratch, "example-" + kind)
    with open(src, "w") as f:
        f.write(readme_example(kind))
    r = ctx._run([compiler, "-Wall", "-Wextra", "-Werror", "-I", include_dir(ctx), src, "-o", exe],
                 ctx.env(), None, 120, "compile")
    T.check(r.returncode == 0, "the README's %s example does not compile\n%s" % (kind, r.describe()))
    T.check(not any("tfalloc" in l for l in needed_libs(exe)), "the example must not need libtfalloc.so")
    return exe


def readme_c_case(ctx):
    exe = compile_example(ctx, "c", "gcc", ".c")
    plain = ctx.run_plain([exe])
    T.check_eq(plain.returncode, 0, "the C example's status without the shim")
    T.check_eq(plain.out, "no cleanup: tfalloc is not active in this process\n", "the C example without the shim")
    r, rep = ctx.run_and_report([exe], what="README C example")
    T.check_eq(r.out, "requests still hold 1 block(s), 10 bytes\n", "the C example under the shim")
    proc = T.only_process(rep, "README C example")
    parse = resources(proc).get(("requests", "scope", "parse"))
    T.check(parse is not None and cpu(parse)["num_allocs"] == 8 and parse["memory_used"] == 0,
            "requests/parse: 4 requests x 2 allocations, all freed at exit: %r" % parse)
    cl = proc.get("cleanups", [])
    T.check(len(cl) == 1 and cl[0]["blocks"] == 1 and cl[0]["bytes"] == 10, "the cleanup: %r" % cl)
    T.check(any(f.get("function") in ("handle_request", "__strdup", "strdup")
                for f in cl[0]["groups"][0]["stack"]), "the leaked reply's stack: %r" % cl[0]["groups"])


def readme_cxx_case(ctx):
    exe = compile_example(ctx, "cxx", "g++", ".cpp")
    plain = ctx.run_plain([exe])
    T.check_eq((plain.returncode, plain.out), (0, "not under tfalloc: no limit\n"), "the C++ example without the shim")
    r, rep = ctx.run_and_report([exe], what="README C++ example")
    T.check_eq(r.out, "the cache's limit refused 2 MiB\nmodel/embeddings uses 1000 bytes\n",
               "the C++ example under the shim")
    cache = resources(T.only_process(rep, "README C++ example")).get(("model", "cache", "embeddings"))
    T.check(cache is not None and cache["bytes_limit"] == 1 << 20 and cache["memory_used"] == 0,
            "model/embeddings at exit: %r" % cache)


def readme_python_case(ctx):
    src = os.path.join(ctx.scratch, "example.py")
    with open(src, "w") as f:
        f.write(readme_example("python"))
    env = {"PYTHONPATH": os.path.join(ROOT, "tools", "python")}
    plain = ctx.run_plain(["/usr/bin/python3", src], env=env)
    T.check_eq((plain.returncode, plain.out), (0, "inactive 0 0\n"), "the Python example without the shim")
    r, rep = ctx.run_and_report(["/usr/bin/python3", src], what="README Python example", env=env)
    # A bytearray of n bytes is a malloc of n + 1 (its terminating NUL).
    T.check_eq(r.out, "active 1 65537\n", "the Python example under the shim")


CASES = {
    "api": api_case,
    "scopes": scopes_case,
    "dump_signal": dump_signal_case,
    "threads": threads_case,
    "readme_c": readme_c_case,
    "readme_cxx": readme_cxx_case,
    "readme_python": readme_python_case,
}

if __name__ == "__main__":
    T.main(CASES)
