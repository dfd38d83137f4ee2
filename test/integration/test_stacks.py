# SPDX-License-Identifier: MIT
"""Call stacks in profiles and reports: the report names the allocating
function, file and line of known sites, the breakdown of the peak by site sums
to the peak, and code unloaded before the end is still named right.

Cases:
  sites          tp_sites (stacks by libunwind, the default): every site with
                 its function, file and line, its exact figures; the peak's
                 breakdown sums to the peak; the text report shows the same
  sites_fp       the same with TFALLOC_STACKS=fp
  sites_threads  tp_site_threads: 4 threads at 25 shared sites (more than a
                 thread's cache of sites holds), frees by another thread, a
                 site whose bytes in use pass the cache's flush threshold:
                 every site's figures exact, the sites sum to the device's
  none           TFALLOC_STACKS=none: no stacks, no sites, figures unchanged
  sampled        TFALLOC_SAMPLE_BYTES=64K: figures of the devices stay exact,
                 sites are marked estimated, the 256 KiB cache is found; with
                 1K (hundreds of samples expected) some stack is sampled
  depth          TFALLOC_STACK_DEPTH=2: no stack is longer than 2 frames
  dlopen         tp_dlopen: leaks made by two libraries mapped one after the
                 other at the same address, both dlclose'd, are named in the
                 right one (dlib_a_make, dlib_b_make)
  max_stacks     TFALLOC_MAX_STACKS=16 on python3: the table stops at 16 whole
                 stacks (+ a quarter for truncated ones), later new stacks keep
                 their 8 innermost frames, the report says how many, and the
                 sites still add up to the device's figures
  debuglink      tp_sites stripped of its debug information, which sits in a
                 separate file behind .gnu_debuglink: still named with file
                 and line; stripped of everything: frames give module and
                 offset (the same offsets as the unstripped binary's), never
                 a wrong name
  rebuilt        tp_sites copied, profiled, then its file replaced by another
                 program's, then removed: the text report shows its frames as
                 module and offset and says why, once, at the end ("symbols:
                 PATH: not the file the process mapped (its build id was ...)",
                 then "No such file or directory"); it had said nothing
  diff           tfalloc report --diff of tp_sites with 64 and with 128
                 cache blocks (two runs, other addresses): the cache site grew
                 by 64 blocks, 256 KiB, and no other site changed
  errors         tp_errors: every double, invalid and mismatched free has the
                 stack of the offending call (main in tp_errors.cpp), and a
                 mismatched one also that of the allocation
  python3        a real interpreter: how many stacks reach main or a thread's
                 start (printed; most must)
  stack_cache    the stacks recorded with each thread's last walk kept
                 (TFALLOC_STACK_CACHE, the default) are those of the walk
                 without it, site by site with its figures: python3 with
                 PYTHONMALLOC=malloc, also with 12 frames a stack and a table
                 full at 40 stacks (the truncating paths), and sqlite3
  coroutines     tp_coroutines: three threads, each with coroutines (ucontext)
                 on stacks of their own, switching back and forth in the middle
                 of their recursions; a stack unmapped and mapped again at the
                 same address with other functions' frames where the last walk
                 had its own; a stack made PROT_NONE after the thread's last
                 walk on it, and one whose upper half is, under the outer
                 frames of the last walk; an alloca'd frame at the same stack
                 and return addresses with another %rbp: each allocating
                 function has the chain of callers the program printed, by
                 name, with the exact recursion depth, its entry function
                 (then glibc's __start_context, or nothing where the entry is
                 the outermost frame by its unwind rule) or main or the
                 thread's start, and the chain's exact figures and leaks; the
                 same output as a plain run; the same sites, frame by frame,
                 with the cache of each thread's last walk
                 (TFALLOC_STACK_CACHE) and without it; with TFALLOC_STACKS=fp
                 the same chains up to the entry and its caller (further out,
                 a coroutine's frame pointers lead to whatever the stack that
                 started it holds now: not checked).  Fails when the cache
                 skips the check of the kept levels' words (a stale stack),
                 ignores %rbp in its match (a stale stack), or reads the kept
                 levels beyond the first change (SIGSEGV)
  subshells      bash with a heap of 2000 hash entries starting 20 subshells:
                 each forked child repeats its parent's sites and leaks; the
                 JSON report writes each stack once (stack_table) and each
                 frame once (frames), and stays
                 within 4 times the profiles' size (it was 17 times, 564 MB
                 for 56 subshells); the text report starts with one line per
                 process
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(os.path.dirname(HERE), "programs")


def marker_line(source, marker):
    with open(os.path.join(PROGRAMS, source)) as f:
        for n, line in enumerate(f, 1):
            if marker in line:
                return n
    raise T.Failure("%s: no %s marker" % (source, marker))


# tp_sites: innermost function -> (caller, marker, num_allocs, total, at_peak, leaked)
TP_SITES = {
    "cache_alloc": ("build_cache", "SITE_CACHE", 64, 262144, 262144, 0),
    "config_alloc": ("leak_config", "SITE_CONFIG", 1, 1000, 1000, 1000),
    "token_alloc": ("parse_tokens", "SITE_TOKEN", 1000, 24000, 24, 0),
    "node_alloc": ("leak_list", "SITE_NODE", 10, 480, 0, 480),
}


def functions(stack):
    return [f.get("function") for f in stack]


def site_of(proc, function):
    found = [s for s in proc.get("sites", []) if s["stack"] and s["stack"][0].get("function") == function]
    T.check(len(found) == 1, "expected one site whose innermost frame is %s, found %d: %s"
            % (function, len(found), [functions(s["stack"])[:3] for s in proc.get("sites", [])]))
    return found[0]


def check_frame(frame, function, source, line, what):
    T.check_eq(frame.get("function"), function, what + ": function")
    T.check(str(frame.get("file", "")).endswith("/" + source),
            "%s: file %r is not .../%s" % (what, frame.get("file"), source))
    T.check_eq(frame.get("line"), line, what + ": line")
    T.check(frame.get("module"), what + ": no module")
    T.check(re.match(r"^0x[0-9a-f]+$", frame.get("address", "")), what + ": address")


def run_sites(ctx, env=None, exact=True):
    path = ctx.prog("tp_sites")
    plain = ctx.run_plain([path])
    T.check_eq(plain.returncode, 0, "tp_sites without the shim")
    r, rep = ctx.run_and_report([path], what="tp_sites", env=env)
    T.same_output(plain, r, "tp_sites")
    proc = T.only_process(rep, "tp_sites")
    T.check_exited(proc, 0)
    T.check_consistent(proc, allocator=ctx.allocator or "jemalloc")
    return r, proc


def check_sites(ctx, proc, mode):
    T.check_eq(proc["stacks"]["mode"], mode, "stacks mode")
    dev = T.device(proc)
    for fn, (caller, marker, n, total, at_peak, leaked) in TP_SITES.items():
        s = site_of(proc, fn)
        what = "site %s" % fn
        check_frame(s["stack"][0], fn, "tp_sites.c", marker_line("tp_sites.c", marker), what)
        names = functions(s["stack"])
        T.check(len(names) >= 3 and names[1] == caller and names[2] == "main",
                "%s: expected %s <- %s <- main, got %s" % (what, fn, caller, names))
        T.check_eq(s["device"], "cpu", what + ": device")
        T.check_eq(s["num_allocs"], n, what + ": num_allocs")
        T.check_eq(s["total_bytes"], total, what + ": total_bytes")
        T.check_eq(s["bytes_at_peak"], at_peak, what + ": bytes_at_peak")
        T.check_eq(s["leaked_bytes"], leaked, what + ": leaked_bytes")
        T.check_eq(s["bytes_in_use"], leaked, what + ": bytes_in_use")
        T.check_eq(s["estimated"], False, what + ": estimated")
    # The breakdown of the peak is exact: the sites sum to the device's peak
    # (the C runtime's start-up allocations have their sites too).
    T.check_eq(sum(s["bytes_at_peak"] for s in proc["sites"]), dev["peak_bytes_in_use"],
               "sum of bytes_at_peak over the sites")
    T.check_eq(sum(s["total_bytes"] for s in proc["sites"]), dev["total_bytes"],
               "sum of total_bytes over the sites")
    T.check_eq(sum(s["bytes_in_use"] for s in proc["sites"]), dev["bytes_in_use"],
               "sum of bytes_in_use over the sites")
    # Leaks carry the same stacks.
    leaks = {tuple(functions(l["stack"])[:1]): l for l in proc["leaks"]}
    for fn, nbytes, blocks in (("config_alloc", 1000, 1), ("node_alloc", 480, 10)):
        l = leaks.get((fn,))
        T.check(l is not None, "no leak entry whose stack starts in %s: %s"
                % (fn, [functions(x["stack"])[:3] for x in proc["leaks"]]))
        T.check_eq((l["bytes"], l["blocks"]), (nbytes, blocks), "leak of %s: bytes, blocks" % fn)
        check_frame(l["stack"][0], fn, "tp_sites.c",
                    marker_line("tp_sites.c", TP_SITES[fn][1]), "leak of " + fn)


def check_text(ctx, outdir):
    r = ctx._run([ctx.tool, "report", "--by", "peak,leaked", outdir], ctx.env(), None, 60, "report")
    T.check_eq(r.returncode, 0, "tfalloc report (text)")
    text = r.out
    for fn, marker in (("cache_alloc", "SITE_CACHE"), ("config_alloc", "SITE_CONFIG")):
        pat = r"#0 0x[0-9a-f]+ in %s \S*/tp_sites\.c:%d\n" % (fn, marker_line("tp_sites.c", marker))
        T.check(re.search(pat, text), "text report: no frame matching %r\n%s" % (pat, text[:3000]))
    T.check(re.search(r"256\.0 KiB \(262144 bytes\) at the peak \(99\.6%\), 64 allocations", text),
            "text report: the cache's line in the peak table\n" + text[:3000])
    T.check("sites by bytes allocated" not in text, "--by peak,leaked printed the total table")
    T.check("__libc_start_main" not in text, "text report shows frames below main")


def case_sites(ctx):
    r, proc = run_sites(ctx)
    check_sites(ctx, proc, "unwind")
    # The shim's two tables: a 4 KiB shard at least, and the stacks of tp_sites.
    T.check(proc["pointer_table_bytes"] >= 4096, "pointer_table_bytes %r" % proc["pointer_table_bytes"])
    # Shards shrink: the table's peak is at least its size at exit.
    T.check(proc.get("pointer_table_peak_bytes", 0) >= proc["pointer_table_bytes"],
            "pointer_table_peak_bytes %r" % proc.get("pointer_table_peak_bytes"))
    T.check(proc["stacks"]["table_bytes"] > 0, "stacks.table_bytes %r" % proc["stacks"]["table_bytes"])
    T.check(proc["pointer_table_bytes"] + proc["stacks"]["table_bytes"]
            <= T.device(proc)["shim_overhead_bytes"], "the tables within the shim's overhead")
    check_text(ctx, r.outdir)


def case_sites_fp(ctx):
    _, proc = run_sites(ctx, env={"TFALLOC_STACKS": "fp"})
    check_sites(ctx, proc, "fp")


def case_sites_threads(ctx):
    path = ctx.prog("tp_site_threads")
    plain = ctx.run_plain([path])
    T.check_eq(plain.returncode, 0, "tp_site_threads without the shim")
    r, rep = ctx.run_and_report([path], what="tp_site_threads")
    T.same_output(plain, r, "tp_site_threads")
    proc = T.only_process(rep, "tp_site_threads")
    T.check_exited(proc, 0)
    dev = T.device(proc)
    expected = {}
    for line in plain.out.splitlines():
        _, fn, n, total, in_use = line.split()
        expected[fn] = (int(n), int(total), int(in_use))
    T.check_eq(len(expected), 25, "SITE lines")
    for fn, (n, total, in_use) in expected.items():
        # The compiler may call one function from two places of worker: two stacks.
        sites = [s for s in proc["sites"] if s["stack"] and s["stack"][0].get("function") == fn]
        T.check(sites, "no site whose innermost frame is %s" % fn)
        got = tuple(sum(s[k] for s in sites) for k in ("num_allocs", "total_bytes", "bytes_in_use"))
        T.check_eq(got, (n, total, in_use), "site %s: num_allocs, total_bytes, bytes_in_use" % fn)
    T.check_eq(sum(s["total_bytes"] for s in proc["sites"]), dev["total_bytes"],
               "sum of total_bytes over the sites")
    T.check_eq(sum(s["bytes_in_use"] for s in proc["sites"]), dev["bytes_in_use"],
               "sum of bytes_in_use over the sites")
    T.check_eq(sum(s["num_allocs"] for s in proc["sites"]), dev["num_allocs"],
               "sum of num_allocs over the sites")


def case_none(ctx):
    _, proc = run_sites(ctx, env={"TFALLOC_STACKS": "none"})
    T.check_eq(proc["stacks"]["mode"], "none", "stacks mode")
    T.check_eq(proc["sites"], [], "sites without stacks")
    T.check(all(l["stack"] == [] for l in proc["leaks"]), "leaks have stacks without stacks")
    T.check_eq(T.leak_totals(proc)[0] >= 1480, True, "leaked bytes")


def case_sampled(ctx):
    r, proc = run_sites(ctx, env={"TFALLOC_SAMPLE_BYTES": "64K"})
    dev = T.device(proc)
    base = ctx.baseline("tp_sites", env={"TFALLOC_SAMPLE_BYTES": "64K"})
    T.check_ledger(proc, base, T.parse_ledger(r))
    T.check_eq(proc["stacks"]["sample_bytes"], 65536, "sample_bytes")
    T.check(all(s["estimated"] for s in proc["sites"]), "sampled sites not marked estimated")
    # 256 KiB of 4 KiB blocks: about 4 samples expected; the chance of none is e^-4 ~ 2%
    # per run.  The estimate scales what was sampled.
    cache = [s for s in proc["sites"] if functions(s["stack"])[:1] == ["cache_alloc"]]
    # Each sample stands for about 64 KiB: the estimated bytes stay within a few samples' worth of
    # the real total (the number of samples is Poisson with mean total / 64 KiB, about 4.4 here).
    estimated = sum(s["total_bytes"] for s in proc["sites"])
    T.check(estimated <= 10 * dev["total_bytes"] + 65536,
            "estimated bytes %d far above the real %d" % (estimated, dev["total_bytes"]))
    if cache:
        T.check_eq(cache[0]["stack"][1]["function"], "build_cache", "sampled cache site's caller")
    # One sample per KiB on average: with hundreds expected, none means the main thread never
    # samples (its countdown must not outlive the allocations it made before the shim's init).
    _, dense = run_sites(ctx, env={"TFALLOC_SAMPLE_BYTES": "1K"})
    expected = T.device(dense)["total_bytes"] / 1024
    T.check(expected >= 100, "tp_sites allocates %d bytes: too few for the dense sample" % T.device(dense)["total_bytes"])
    T.check(any(s["stack"] for s in dense["sites"]),
            "no sampled stack with TFALLOC_SAMPLE_BYTES=1K (%.0f samples expected)" % expected)


def case_depth(ctx):
    _, proc = run_sites(ctx, env={"TFALLOC_STACK_DEPTH": "2"})
    T.check_eq(proc["stacks"]["depth"], 2, "stack depth")
    for s in proc["sites"]:
        real = [f for f in s["stack"] if not f.get("inlined")]
        T.check(len(real) <= 2, "a stack of %d frames with depth 2: %s" % (len(real), functions(s["stack"])))
    site_of(proc, "cache_alloc")


def case_dlopen(ctx):
    path = ctx.prog("tp_dlopen")
    plain = ctx.run_plain([path, "loop", "5"])
    T.check_eq(plain.returncode, 0, "tp_dlopen without the shim")
    r, rep = ctx.run_and_report([path, "loop", "5"], what="tp_dlopen")
    proc = T.only_process(rep, "tp_dlopen")
    T.check_exited(proc, 0)
    line = marker_line("tp_dlib.c", "SITE_DLIB")
    by_size = {}
    for l in proc["leaks"]:
        by_size.setdefault(l["bytes"], []).append(l)
    for nbytes, fn in ((3000, "dlib_a_make"), (5000, "dlib_b_make")):
        ls = by_size.get(nbytes, [])
        T.check(len(ls) == 1, "leaks of %d bytes: %d entries" % (nbytes, len(ls)))
        check_frame(ls[0]["stack"][0], fn, "tp_dlib.c", line, "leak of %d bytes" % nbytes)
        T.check(ls[0]["stack"][0]["module"].endswith("libtp_dlib_%s.so" % fn[5]),
                "leak of %d bytes: module %s" % (nbytes, ls[0]["stack"][0]["module"]))
    loops = [l for l in proc["leaks"] if l["bytes"] == 100 * l["blocks"]
             and functions(l["stack"])[:1] == ["dlib_a_make"]]
    T.check_eq(sum(l["blocks"] for l in loops), 5, "blocks of 100 bytes leaked in dlib_a_make")


def case_max_stacks(ctx):
    argv = ["/usr/bin/python3", "-c", "import json, email.parser, sqlite3\nprint(len(json.dumps([str(i) for i in range(5000)])))"]
    plain = ctx.run_plain(argv)
    r, rep = ctx.run_and_report(argv, what="python3", env={"PYTHONMALLOC": "malloc",
                                                          "TFALLOC_MAX_STACKS": "16"})
    T.same_output(plain, r, "python3")
    proc = T.only_process(rep, "python3")
    st = proc["stacks"]
    T.check_eq(st["max_stacks"], 16, "max_stacks")
    T.check_range(st["distinct"], 16, 20, "distinct stacks (16 whole + up to 4 truncated)")
    T.check_ge(st["truncated_allocations"], 1000, "allocations with a truncated stack")
    dev = T.device(proc)
    T.check(sum(s["total_bytes"] for s in proc["sites"]) <= dev["total_bytes"], "sites' total")
    for s in proc["sites"]:
        real = [f for f in s["stack"] if not f.get("inlined")]
        T.check(len(real) <= 32, "a stack of %d frames" % len(real))
    text = ctx._run([ctx.tool, "report", "--by", "peak", r.outdir], ctx.env(), None, 60, "report").out
    T.check("the stack table was full (16 stacks, TFALLOC_MAX_STACKS)" in text, "text:\n" + text[:1500])


def objcopy(ctx, *args):
    r = ctx._run(["objcopy"] + list(args), ctx.env(), None, 60, "objcopy")
    T.check_eq(r.returncode, 0, "objcopy %s\n%s" % (" ".join(args), r.describe()))


def case_debuglink(ctx):
    import shutil
    d = ctx.mkdtemp("bin")
    orig = ctx.prog("tp_sites")
    dbg = os.path.join(d, "tp_sites.debug")
    linked = os.path.join(d, "tp_sites")
    bare = os.path.join(d, "tp_sites_bare")
    objcopy(ctx, "--only-keep-debug", orig, dbg)
    objcopy(ctx, "--strip-debug", "--add-gnu-debuglink=" + dbg, orig, linked)
    objcopy(ctx, "--strip-all", orig, bare)
    for f in (linked, bare):
        shutil.copymode(orig, f)
    # With the debug file beside it: the same answers as the original.
    _, rep = ctx.run_and_report([linked], what="debuglinked tp_sites")
    proc = T.only_process(rep, "debuglinked tp_sites")
    s = site_of(proc, "cache_alloc")
    check_frame(s["stack"][0], "cache_alloc", "tp_sites.c", marker_line("tp_sites.c", "SITE_CACHE"),
                "debuglinked cache_alloc")
    T.check_eq(s["stack"][0]["module"], linked, "module")
    offsets = {}
    for site in proc["sites"]:
        f = site["stack"][0]
        if f["function"] in TP_SITES:
            offsets[int(f["offset"], 16)] = f["function"]
    T.check_eq(sorted(offsets.values()), sorted(TP_SITES), "sites of the debuglinked binary")
    # Stripped of everything, no debug file: module and offset, never a wrong name.
    _, rep = ctx.run_and_report([bare], what="stripped tp_sites")
    proc = T.only_process(rep, "stripped tp_sites")
    seen = 0
    for site in proc["sites"]:
        f = site["stack"][0]
        if f.get("module") != bare:
            continue
        off = int(f["offset"], 16)
        T.check(off in offsets, "stripped: offset 0x%x is no known site (%r)" % (off, f))
        T.check(f["function"] in (None, offsets[off]),
                "stripped: 0x%x named %r, it is %s" % (off, f["function"], offsets[off]))
        T.check_eq(f["file"], None, "stripped: a file without debug information")
        seen += 1
    T.check_eq(seen, 4, "sites in the stripped binary")
    text = ctx._run([ctx.tool, "report", "--by", "leaked", os.path.dirname(proc["file"])],
                    ctx.env(), None, 60, "report").out
    T.check(re.search(r"#0 0x[0-9a-f]+ in tp_sites_bare\+0x[0-9a-f]+\n", text),
            "text report of the stripped binary: module+offset frames\n" + text[:2000])


def case_rebuilt(ctx):
    import shutil
    d = ctx.mkdtemp("bin")
    path = os.path.join(d, "tp_sites")
    shutil.copy2(ctx.prog("tp_sites"), path)
    _, rep = ctx.run_and_report([path], what="tp_sites copied")
    outdir = os.path.dirname(T.only_process(rep, "tp_sites copied")["file"])
    for what, change, why in (("rebuilt", lambda: shutil.copy2(ctx.prog("tp_empty"), path),
                               "%s: not the file the process mapped (its build id was " % path),
                              ("removed", lambda: os.unlink(path), "%s: No such file or directory" % path)):
        change()
        text = ctx._run([ctx.tool, "report", outdir], ctx.env(), None, 60, "report")
        T.check_eq(text.returncode, 0, what + ": text report\n" + text.describe())
        lines = [l for l in text.out.splitlines() if l.startswith("symbols: ")]
        T.check(len(lines) == 1 and lines[0].startswith("symbols: " + why),
                "%s: the line saying why its frames are offsets: %r" % (what, lines))
        T.check(" in cache_alloc " not in text.out, what + ": a function named from another file")
        # The JSON and the HTML page say it too, in their data.
        js = ctx._run([ctx.tool, "report", "--format", "json", outdir], ctx.env(), None, 60, "report json")
        T.check_eq(js.returncode, 0, what + ": JSON report\n" + js.describe())
        got = __import__("json").loads(js.out)["symbols"]
        T.check(len(got) == 1 and got[0] == lines[0][len("symbols: "):],
                "%s: the JSON's symbols: %r" % (what, got))
        page = ctx._run([ctx.tool, "report", "--format", "html", outdir], ctx.env(), None, 60, "report html")
        T.check_eq(page.returncode, 0, what + ": HTML report\n" + page.describe())
        data = page.out.split('<script type="application/json" id="tfa-data">\n', 1)[1].split("</script>", 1)[0]
        T.check_eq(__import__("json").loads(data)["symbols"], got, what + ": the page's symbols")


def case_diff(ctx):
    path = ctx.prog("tp_sites")
    runs = []
    for n in ("64", "128"):
        r, rep = ctx.run_and_report([path, "cache", n], what="tp_sites cache " + n)
        runs.append(r.outdir)
    r = ctx._run([ctx.tool, "report", "--diff", "--format", "json"] + runs, ctx.env(), None, 60,
                 "report --diff")
    T.check_eq(r.returncode, 0, "tfalloc report --diff: exit status\n" + r.describe())
    d = __import__("json").loads(r.out)
    T.check_eq(d["sorted_by"], "bytes_at_peak", "sorted_by")
    T.check_eq(d["b_totals"]["bytes_at_peak"] - d["a_totals"]["bytes_at_peak"], 262144, "peak growth")
    grew = [s for s in d["sites"] if any(v != 0 for v in s["delta"].values())]
    T.check_eq(len(grew), 1, "sites that changed: %s" % [functions(s["stack"])[:2] for s in grew])
    s = grew[0]
    T.check_eq(functions(s["stack"])[:3], ["cache_alloc", "build_cache", "main"], "the grown site")
    T.check_eq(s["delta"], {"bytes_at_peak": 262144, "leaked_bytes": 0, "total_bytes": 262144,
                            "num_allocs": 64}, "its growth")
    T.check_eq(s["a"]["num_allocs"], 64, "A's cache blocks")
    T.check_eq(d["sites"][0], s, "the largest growth first")
    text = ctx._run([ctx.tool, "report", "--diff"] + runs, ctx.env(), None, 60, "report --diff").out
    T.check("sites that grew, by bytes at the peak: 1 of 1" in text, "text diff:\n" + text)
    T.check(re.search(r"\+256\.0 KiB \(262144 bytes\) \(262144 -> 524288 bytes\)", text), "text diff:\n" + text)
    bad = ctx._run([ctx.tool, "report", "--diff", runs[0]], ctx.env(), None, 60, "report --diff A")
    T.check_eq(bad.returncode, 2, "--diff with one PATH: usage error")


def case_errors(ctx):
    path = ctx.prog("tp_errors")
    r, rep = ctx.run_and_report([path], what="tp_errors", expect_status=None)
    proc = T.only_process(rep, "tp_errors")
    errs = proc["errors"]
    T.check_ge(len(errs), 6, "error rows")
    for e in errs:
        what = "%s of %s" % (e["kind"], e["address"])
        T.check(e["stack"], what + ": no stack")
        f = e["stack"][0]
        T.check_eq(f.get("function"), "main", what + ": innermost frame")
        T.check(str(f.get("file", "")).endswith("/tp_errors.cpp"), what + ": file %r" % f.get("file"))
        if e["kind"] == "mismatched_free":
            T.check(e["alloc_stack"] and e["alloc_stack"][0].get("function") == "main",
                    what + ": the allocation's stack %r" % e["alloc_stack"][:1])
            T.check(e["alloc_stack"][0]["line"] < f["line"], what + ": allocated before it was freed")


def case_python3(ctx):
    script = "import threading\n" \
             "def work():\n    return [str(i) * 3 for i in range(20000)]\n" \
             "ts = [threading.Thread(target=work) for _ in range(2)]\n" \
             "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(len(work()))\n"
    argv = ["/usr/bin/python3", "-c", script]
    plain = ctx.run_plain(argv)
    r, rep = ctx.run_and_report(argv, what="python3", env={"PYTHONMALLOC": "malloc"})
    T.same_output(plain, r, "python3")
    proc = T.only_process(rep, "python3")
    allocs = complete = 0
    for s in proc["sites"]:
        names = functions(s["stack"])
        allocs += s["num_allocs"]
        if {"main", "__libc_start_call_main", "start_thread", "clone3", "_start"} & set(names):
            complete += s["num_allocs"]
    share = complete / max(allocs, 1)
    print("python3: %d of %d allocations (%.1f%%) have a stack that reaches main or a "
          "thread's start; %d distinct stacks" % (complete, allocs, 100 * share, len(proc["sites"])))
    T.check_ge(share, 0.9, "share of complete stacks")


def sites_by_stack(proc):
    """Each site's frames (module and offset: another run maps them elsewhere) -> its figures."""
    out = {}
    for s in proc["sites"]:
        key = tuple((f.get("module"), f.get("offset"), f.get("function"), bool(f.get("inlined")))
                    for f in s["stack"])
        fig = out.setdefault(key, [0, 0])
        fig[0] += s["num_allocs"]
        fig[1] += s["total_bytes"]
    return out


def check_same_sites(with_cache, without, what):
    """The sites (sites_by_stack) recorded with the cache of the last walk are those without it."""
    missing = [k for k in without if with_cache.get(k) != without[k]]
    extra = [k for k in with_cache if k not in without]
    T.check(not missing and not extra,
            "%s: %d stacks differ from the walk without the cache, %d only with it; first: %s"
            % (what, len(missing), len(extra), (missing or extra)[:1]))


def case_stack_cache(ctx):
    script = "import json\nprint(len(json.dumps([{str(i): [i, str(i) * 3]} for i in range(20000)])))\n"
    sql = "create table t(a, b); " + " ".join(
        "insert into t values(%d, '%s');" % (i, "x" * (i % 50)) for i in range(400)) + \
        " create index i on t(b); select count(*), sum(length(b)) from t where a % 7 = 3;"
    python = {"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"}
    runs = [
        (["/usr/bin/python3", "-c", script], "python3", python),
        (["/usr/bin/python3", "-c", script], "python3", dict(python, TFALLOC_STACK_DEPTH="12",
                                                           TFALLOC_MAX_STACKS="40")),
        (["sqlite3", ":memory:", sql], "sqlite3", {}),
    ]
    for argv, name, env in runs:
        plain = ctx.run_plain(argv, env=env)
        got = []
        for cache in ("1", "0"):
            r, rep = ctx.run_and_report(argv, what=name, env=dict(env, TFALLOC_STACK_CACHE=cache))
            T.same_output(plain, r, name)
            got.append(sites_by_stack(T.only_process(rep, name)))
        what = "%s %s" % (name, " ".join("%s=%s" % kv for kv in sorted(env.items())))
        T.check_ge(len(got[0]), 20, what + ": stacks")
        check_same_sites(got[0], got[1], what)
        print("%s: %d stacks, the same with and without the cache" % (what, len(got[0])))


# tp_coroutines: the functions that call malloc, and those that end a chain
# (the program's CHAIN lines: callers innermost first, "<" between them).
CORO_ALLOCATORS = ("leaf", "walk_a", "walk_b", "walk_g", "pong_c", "sched_leaf", "alloca_leaf",
                   "dig_leaf")
CORO_ENDS = ("entry_a", "entry_b", "entry_c", "entry_d", "entry_g", "run_all")


def coroutine_chain(stack, mode, libc_frames, what):
    """The CHAIN of a stack of tp_coroutines, its frames beyond the chain's
    end checked; libc_frames collects __start_context's (module, offset)."""
    names = functions(stack)
    ends = [i for i, n in enumerate(names) if n in CORO_ENDS]
    T.check(ends, "%s: no entry function nor run_all in %s" % (what, names))
    i = ends[0]
    tail = stack[i + 1:]
    if names[i] == "run_all":
        outer = names[i + 1:i + 3]
        kind = {("main", "__libc_start_call_main"): "main",
                ("worker", "start_thread"): "thread"}.get(tuple(outer))
        T.check(kind, "%s: run_all's callers %s, expected main <- __libc_start_call_main or "
                "worker <- start_thread: %s" % (what, outer, names))
        i += 1  # the chain ends with run_all's caller
    else:
        kind = "coro"
        # Every entry but entry_g is the outermost frame by its rule (the
        # return address undefined); entry_g returns to glibc's
        # __start_context, the last frame libunwind finds.  Frame pointers
        # go on: not checked.
        if mode == "unwind" and names[i] != "entry_g":
            T.check(tail == [], "%s: frames after %s, its outermost by its rule: %s"
                    % (what, names[i], names))
        else:
            T.check(tail and str(tail[0].get("module", "")).endswith("/libc.so.6")
                    and tail[0].get("function") in (None, "__start_context"),
                    "%s: %s's caller is not __start_context in libc: %s" % (what, names[i], tail[:1]))
            libc_frames.add((tail[0].get("module"), tail[0].get("offset")))
            T.check(mode == "fp" or len(tail) == 1,
                    "%s: frames after __start_context: %s" % (what, functions(tail)))
    return "<".join(names[:i + 1]) + "|" + kind


def check_coroutines(proc, expected, mode, what):
    """Each allocating function of tp_coroutines has the chains and figures the program printed."""
    T.check_eq(proc["stacks"]["mode"], mode, what + ": stacks mode")
    libc_frames = set()
    got = {}
    for s in proc["sites"]:
        if not s["stack"] or s["stack"][0].get("function") not in CORO_ALLOCATORS:
            continue
        key = coroutine_chain(s["stack"], mode, libc_frames, what + ": site")
        fig = got.setdefault(key, [0, 0, 0])
        fig[0] += s["num_allocs"]
        fig[1] += s["total_bytes"]
        fig[2] += s["bytes_in_use"]
    leaks = {}
    for l in proc["leaks"]:
        if l["stack"] and l["stack"][0].get("function") in CORO_ALLOCATORS:
            key = coroutine_chain(l["stack"], mode, libc_frames, what + ": leak")
            fig = leaks.setdefault(key, [0, 0])
            fig[0] += l["blocks"]
            fig[1] += l["bytes"]
    T.check(len(libc_frames) <= 1, "%s: __start_context at several places: %s" % (what, libc_frames))
    wrong = sorted((k, got.get(k), list(v)) for k, v in expected.items() if got.get(k) != list(v))
    extra = sorted((k, v) for k, v in got.items() if k not in expected)
    T.check(not wrong and not extra,
            "%s: %d chains with other figures than the program's (chain, got, expected), %d "
            "chains it never allocated from: %s %s" % (what, len(wrong), len(extra), wrong[:8], extra[:8]))
    want_leaks = {k: [v[0], v[1]] for k, v in expected.items() if v[2]}
    T.check(want_leaks, "tp_coroutines printed no leaked chain")
    T.check_eq(leaks, want_leaks, what + ": leaks by chain (blocks, bytes)")
    return len(got)


def case_coroutines(ctx):
    path = ctx.prog("tp_coroutines")
    plain = ctx.run_plain([path])
    T.check_eq(plain.returncode, 0, "tp_coroutines without the shim\n" + plain.describe())
    expected = {}
    for chain, allocs, total, leaked in T.parse_lines(plain, "CHAIN"):
        expected[chain] = (int(allocs), int(total), int(leaked))
    T.check_ge(len(expected), 20, "CHAIN lines")
    by_stack = {}
    for stacks, cache in (("unwind", "1"), ("unwind", "0"), ("fp", "1")):
        what = "TFALLOC_STACKS=%s TFALLOC_STACK_CACHE=%s" % (stacks, cache)
        r, rep = ctx.run_and_report([path], what="tp_coroutines " + what,
                                    env={"TFALLOC_STACKS": stacks, "TFALLOC_STACK_CACHE": cache})
        T.same_output(plain, r, "tp_coroutines " + what)
        proc = T.only_process(rep, "tp_coroutines")
        T.check_exited(proc, 0)
        T.check_consistent(proc, multithreaded=True, allocator=ctx.allocator or "jemalloc")
        n = check_coroutines(proc, expected, stacks, what)
        if stacks == "unwind":
            by_stack[cache] = sites_by_stack(proc)
        print("%s: %d chains of callers, each with its exact figures" % (what, n))
    check_same_sites(by_stack["1"], by_stack["0"], "tp_coroutines")


def case_subshells(ctx):
    script = ("declare -A h; for i in $(seq 1 2000); do h[k$i]=\"value $i\"; done; "
              "for i in $(seq 1 20); do ( : ); done; echo done")
    argv = ["/bin/bash", "-c", script]
    plain = ctx.run_plain(argv)
    r = ctx.run_tool(argv)
    T.same_output(plain, r, "bash")
    rep = ctx._run([ctx.tool, "report", "--format", "json", r.outdir], ctx.env(), None, 120, "report")
    T.check_eq(rep.returncode, 0, "tfalloc report\n" + rep.describe())
    doc = json.loads(rep.out)
    procs = doc["processes"]
    forked = [p for p in procs if p.get("forked") and p.get("end_reason") == "exit"]
    T.check_ge(len(forked), 20, "forked children")
    refs = [x["stack"] for p in procs for key in ("leaks", "sites") for x in p[key]]
    T.check(all(isinstance(i, int) and 0 <= i < len(doc["stack_table"]) for i in refs), "stack indices")
    T.check(len(doc["stack_table"]) * 5 < len(refs),
            "stacks shared by the children: %d in the table for %d references" % (len(doc["stack_table"]), len(refs)))
    # A child's leaks have its parent's stacks (the same addresses, the same symbols).
    parent = [p for p in procs if not p.get("forked") and p.get("comm") == "bash"]
    T.check_eq(len(parent), 1, "the script's own bash: %s" % T.summary(procs))
    parent_stacks = {l["stack"] for l in parent[0]["leaks"]}
    for c in forked:
        T.check(parent_stacks & {l["stack"] for l in c["leaks"]}, "child %d shares no leak stack" % c["pid"])
    prof_bytes = sum(os.path.getsize(os.path.join(r.outdir, f)) for f in os.listdir(r.outdir))
    # Stacks and frames once for all the processes: less than the profiles that each hold them.
    shared = len(json.dumps(doc["stack_table"])) + len(json.dumps(doc["frames"]))
    T.check(shared < prof_bytes, "JSON stacks and frames %d bytes for %d bytes of profiles" % (shared, prof_bytes))
    # The text starts with one line per process.
    txt = ctx._run([ctx.tool, "report", r.outdir], ctx.env(), None, 120, "report")
    T.check_eq(txt.returncode, 0, "tfalloc report (text)\n" + txt.describe())
    lines = txt.out.splitlines()
    T.check(lines[0].startswith("%d processes (" % len(procs)), "the overview's first line: %r" % lines[0])
    rows = {int(l.split()[0]) for l in lines[2:2 + len(procs)]}
    T.check_eq(rows, {p["pid"] for p in procs}, "pids in the overview")
    # Frames once each: far fewer than the stacks' frames.
    T.check(len(doc["frames"]) * 3 < sum(len(st) for st in doc["stack_table"]),
            "frames shared by the stacks: %d for %d" % (len(doc["frames"]), sum(len(st) for st in doc["stack_table"])))
    inlined = T.inline_stacks(doc)
    T.check(any(f.get("module") == "/usr/bin/bash" for p in inlined["processes"] for l in p["leaks"]
                for f in l["stack"]), "bash's frames in the leaks")


T.main({
    "sites": case_sites,
    "sites_fp": case_sites_fp,
    "sites_threads": case_sites_threads,
    "none": case_none,
    "sampled": case_sampled,
    "depth": case_depth,
    "dlopen": case_dlopen,
    "max_stacks": case_max_stacks,
    "debuglink": case_debuglink,
    "rebuilt": case_rebuilt,
    "diff": case_diff,
    "errors": case_errors,
    "python3": case_python3,
    "stack_cache": case_stack_cache,
    "coroutines": case_coroutines,
    "subshells": case_subshells,
})
