# SPDX-License-Identifier: MIT
"""Tests of `tfalloc report --format html`: the page, and what a browser draws
from it (headless Chromium, --dump-dom: the DOM after the page's script ran).

usage: test_html.py TFALLOC CASE [TP_SITES | SYMFIX_LIB]

cases:
  many_stacks  3,000 hand-made stacks: the page's tree of stacks and columns of
             sites give each stack and site back
  sites      a real run of test/programs/tp_sites (TP_SITES): the page's script
             runs without error; the memory-over-time plot has one point per
             timeline point and marks the peak; the flame graph of the peak has
             cache_alloc, build_cache and main with their bytes, the leaks' has
             config_alloc and node_alloc; clicking cache_alloc zooms into it
             (its frame fills the width, its callers stay, the rest goes) and
             clicking the root zooms out; the top tables list the sites.
  escaping   hand-made profiles whose strings hold markup ("</script>", "<b>",
             "&", quotes) and whose stacks symbolize to C++ names with '<' in a
             real library (SYMFIX_LIB): the data is JSON with '<' '>' '&'
             escaped, and the browser shows the strings as text, adds no
             element, and runs no script of theirs.
  several    two processes: a selector, and #process=PID picks one.
  corrupt    a corrupt file among the inputs: the same one-line message and
             exit status 1 as the text format, the page still written with the
             others and the message.

The cases that need a browser exit with 77 (CTest's SKIP_RETURN_CODE) when
Chromium is not installed (scripts/setup.sh installs it).
"""

import html.parser
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profgen as pg  # noqa: E402

SKIP = 77
TFALLOC = None
TMP = None
EXTRA = None


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def eq(got, want, what="value"):
    if got != want:
        raise Failure(f"{what}:\n--- got ---\n{got!r}\n--- want ---\n{want!r}")


def tfalloc(*args, timeout=60):
    p = subprocess.run([TFALLOC, *args], capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def write(name, data):
    path = os.path.join(TMP, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------
# Records profgen.py does not write (core/profile_format.h)

REC_CONFIG, REC_MODULE, REC_STACKS, REC_SITE, REC_TIMELINE = 6, 7, 8, 9, 10
STACKS_UNWIND = 2


def config(mode=STACKS_UNWIND, depth=32, sample_bytes=0):
    return pg.record(REC_CONFIG, pg.u32(mode) + pg.u32(depth) + pg.u64(sample_bytes))


def module(path, bias, start, end, seen_at=0, gone_at=0xFFFFFFFF, build_id=b""):
    return pg.record(REC_MODULE, pg.u64(bias) + pg.u64(start) + pg.u64(end) + pg.u32(seen_at)
                     + pg.u32(gone_at) + pg.string(path) + pg.string(build_id))


def stacks(table):
    """table: {id: [return addresses, innermost first]}"""
    payload = b""
    for sid, pcs in table.items():
        payload += pg.u32(sid) + pg.u32(len(pcs)) + b"".join(pg.u64(pc) for pc in pcs)
    return pg.record(REC_STACKS, payload)


def site(stack_id, num_allocs, total, in_use, blocks_in_use, at_peak, device="cpu"):
    return pg.record(REC_SITE, pg.string(device) + pg.u32(stack_id)
                     + pg.counts([num_allocs, total, in_use, blocks_in_use, at_peak]))


def timeline(interval_ns, points):
    """points: [(t_ns, bytes_in_use, allocated_bytes, rss_bytes, flags)]"""
    payload = pg.u64(interval_ns)
    for t, b, a, r, fl in points:
        payload += pg.u64(t) + pg.u64(b) + pg.u64(a) + pg.u64(r) + pg.u32(fl)
    return pg.record(REC_TIMELINE, payload)


# ---------------------------------------------------------------------------
# The page, as written and as a browser leaves it


def data_of(page):
    """The JSON of the page's data element, checked to hold no '<', '>' or '&'."""
    m = re.search(r'<script type="application/json" id="tfa-data">\n(.*?)</script>', page, re.S)
    check(m is not None, "the page has its data element")
    text = m.group(1)
    for c in "<>&":
        check(c not in text, f"the data holds no raw {c!r}")
    return json.loads(text)


def check_self_contained(page):
    """One file: nothing fetched from anywhere, every script and style inline."""
    check(page.startswith("<!DOCTYPE html>"), "a whole HTML document")
    eq(len(re.findall(r"<script\b", page)), 2, "script elements: the data and the code")
    eq(len(re.findall(r"</script>", page)), 2, "ends of script elements")
    check(re.search(r"<script[^>]*\bsrc=", page) is None, "no script from a file")
    check(re.search(r"<link\b|<img\b|<iframe\b|@import|url\(", page) is None,
          "no stylesheet, image or frame from a file")
    check("Content-Security-Policy" in page and "default-src 'none'" in page,
          "a content security policy that lets nothing be fetched")


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.kids = []
        self.text = []

    def all_text(self):
        return "".join(self.text) + "".join(k.all_text() for k in self.kids)

    def walk(self):
        yield self
        for k in self.kids:
            yield from k.walk()

    def find_all(self, tag=None, **attrs):
        out = []
        for n in self.walk():
            if tag is not None and n.tag != tag:
                continue
            if all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(n)
        return out

    def by_id(self, ident):
        found = [n for n in self.walk() if n.attrs.get("id") == ident]
        return found[0] if found else None


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class DomBuilder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", [], None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.kids.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.kids.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text.append(data)


def parse_dom(text):
    b = DomBuilder()
    b.feed(text)
    b.close()
    return b.root


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise Skip("Chromium is not installed (scripts/setup.sh installs it)")


def browse(page_path, fragment=""):
    """The DOM of the page after its script ran, parsed; fails on the page's own error."""
    exe = chromium()
    with tempfile.TemporaryDirectory(prefix="tfa-chromium-") as profile_dir:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={profile_dir}", "--virtual-time-budget=5000",
               "--dump-dom", "file://" + page_path + fragment]
        p = subprocess.run(cmd, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    out = p.stdout.decode("utf-8", "replace")
    check(p.returncode == 0 and "<html" in out,
          f"chromium --dump-dom failed ({p.returncode}): {p.stderr.decode(errors='replace')[-2000:]}")
    dom = parse_dom(out)
    status = dom.by_id("tfa-status")
    check(status is not None, "the status element")
    check("data-error" not in status.attrs, f"the page's script failed: {status.attrs.get('data-error')}")
    eq(status.attrs.get("data-ok"), "1", "the page's script ran to its end")
    return dom


def frames_of(graph):
    """{name: data-value} of the drawn frames of a flame graph, and the names in order."""
    values, names = {}, []
    for g in graph.find_all("g"):
        if "frame" not in g.attrs.get("class", "").split():
            continue
        rects = g.find_all("rect")
        check(len(rects) == 1, "one rect per frame")
        eq(rects[0].attrs.get("data-name"), g.attrs["data-name"], "the rect is labelled")
        names.append(g.attrs["data-name"])
        values.setdefault(g.attrs["data-name"], int(g.attrs["data-value"]))
    return values, names


def path_points(d):
    """The points of an SVG path made of M and L commands."""
    return re.findall(r"[ML]\s*(-?[\d.]+),(-?[\d.]+)", d)


# ---------------------------------------------------------------------------
# Cases


def case_sites():
    tp_sites = EXTRA
    out_dir = os.path.join(TMP, "run")
    p = subprocess.run([TFALLOC, "run", "--quiet", "--output", out_dir, "--", tp_sites],
                       capture_output=True, timeout=60)
    eq(p.returncode, 0, f"tfalloc run tp_sites (stderr: {p.stderr.decode(errors='replace')})")
    page_path = os.path.join(TMP, "out.html")
    rc, out, err = tfalloc("report", "--format", "html", "-o", page_path, out_dir)
    eq((rc, out, err), (0, "", ""), "tfalloc report --format html")
    rc, js, err = tfalloc("report", "--format", "json", out_dir)
    eq(rc, 0, f"the JSON report ({err})")
    want = json.loads(js)["processes"][0]

    page = read(page_path)
    check_self_contained(page)
    data = data_of(page)
    eq(len(data["processes"]), 1, "processes in the data")
    dp = data["processes"][0]
    eq(dp["pid"], want["pid"], "pid")
    eq(dp["devices"][0]["peak_bytes_in_use"], 263168, "the peak in the data")
    eq(len(dp["timeline"]["t_ns"]), len(want["timeline"]), "timeline points in the data")
    check(dp["trimmed"], "frames outside main left out")
    # The sites as columns and the stacks as a tree (tools/html.c): the same sites as the JSON
    # report's, and every site's stack found by walking up from its leaf.
    cols = dp["sites"]
    sites = [(cols["devices"][cols["device"][i]], cols["stack"][i], cols["num_allocs"][i],
              cols["total_bytes"][i], cols["bytes_at_peak"][i]) for i in range(len(cols["stack"]))]
    eq(sorted(sites), sorted((s["device"], s["stack_id"], s["num_allocs"], s["total_bytes"], s["bytes_at_peak"])
                             for s in want["sites"]), "the sites in the data")
    nodes, stack_frames = dp["stack_nodes"], {}
    for sid, leaf in zip(dp["stack_ids"], dp["stack_leaves"]):
        fr = []
        while leaf:
            fr.append(nodes[2 * (leaf - 1) + 1])
            leaf = nodes[2 * (leaf - 1)]
        stack_frames[sid] = fr
    check(all(stack_frames.get(s[1]) for s in sites), "every site's stack in the tree")
    frame_names = {i: f[0] for i, f in enumerate(dp["frames"])}
    cache = [stack_frames[s[1]] for s in sites if s[2] == 64]
    check(cache and frame_names[cache[0][-1]] == "main" and "cache_alloc" in [frame_names[i] for i in cache[0]],
          "cache_alloc's stack, innermost first up to main: %r" % [[frame_names[i] for i in c] for c in cache])

    dom = browse(page_path, "#test-zoom=cache_alloc&search=_ALLOC")
    title = dom.by_id("tfa-process-title")
    check(title is not None and title.all_text() == f"Process {want['pid']}: {want['command']}",
          "the process's title")
    summary = dom.by_id("tfa-summary").all_text()
    for text in ("257.0 KiB", "263,168 bytes requested", "1,075", "1.4 KiB", "11 blocks",
                 "exit 0"):
        check(text in summary, f"the summary shows {text!r}: {summary!r}")
    eq(dom.by_id("tfa-complete").all_text(), "complete profile", "complete or a snapshot")

    # Memory over time: one point per timeline point in each series, the peak marked.
    plot = dom.by_id("tfa-timeline")
    check(plot is not None, "the memory-over-time plot")
    npoints = len(want["timeline"])
    check(npoints >= 2, f"tp_sites has a timeline ({npoints} points)")
    for series in ("bytes_in_use", "allocated_bytes", "rss_bytes"):
        paths = plot.find_all("path", data_series=series)
        eq(len(paths), 1, f"one path of {series}")
        eq(len(path_points(paths[0].attrs["d"])), npoints, f"points of {series}")
    peak_index = [i for i, pt in enumerate(want["timeline"]) if pt["peak"]]
    marker = dom.by_id("tfa-peak-marker")
    check(marker is not None, "the peak is marked")
    if peak_index:
        eq(int(marker.attrs["data-index"]), peak_index[-1], "the marked point is the peak's")
    check("peak 257.0 KiB" in marker.all_text(), f"the peak's label: {marker.all_text()!r}")
    axis_text = plot.all_text()
    check("KiB" in axis_text or "MiB" in axis_text, "the memory axis has units")
    check(re.search(r"time since the process started \((s|ms|µs|ns)\)", axis_text),
          "the time axis has units")

    # The flame graph of the peak: outermost at the top, widths by bytes.
    peak_graph = dom.by_id("tfa-flame-peak")
    values, names = frames_of(peak_graph)
    eq(values.get("all"), 263168, "the root holds the peak")
    eq(values.get("main"), 263168, "main holds the peak")
    eq(values.get("build_cache"), 262144, "build_cache")
    eq(values.get("cache_alloc"), 262144, "cache_alloc")
    eq(names[:2], ["all", "main"], "the root, then main, at the top")
    labels = [g.find_all("text")[0].all_text() for g in peak_graph.find_all("g")
              if g.attrs.get("data-name") in ("main", "cache_alloc")]
    eq(labels, ["main", "cache_alloc"], "main and cache_alloc are labelled in their frames")
    for name in ("_start", "__libc_start_call_main", "__libc_start_main_impl"):
        check(name not in values, f"{name} (outside main) is not drawn")
    titles = {g.attrs["data-name"]: g.find_all("title")[0].all_text()
              for g in peak_graph.find_all("g") if "data-name" in g.attrs}
    check(re.search(rf"tp_sites\.c:{site_line('SITE_CACHE')}\n", titles["cache_alloc"]),
          f"file:line in the title: {titles['cache_alloc']!r}")
    check("262,144 bytes" in titles["cache_alloc"] and "99.6%" in titles["cache_alloc"],
          f"bytes and share in the title: {titles['cache_alloc']!r}")

    # #search=_ALLOC: the *_alloc frames stand out, the bytes under them counted once.
    matched = sorted(g.attrs["data-name"] for g in peak_graph.find_all("g")
                     if "match" in g.attrs.get("class", "").split())
    eq(matched, ["cache_alloc", "config_alloc"], "highlighted frames (token_alloc is too narrow to draw)")
    label = [n for n in dom.walk() if "match-label" in n.attrs.get("class", "").split()]
    eq(label[0].attrs.get("data-matched"), "263168", "matched bytes of the peak")
    eq(label[0].all_text(), "matched: 257.0 KiB (100.0%)", "matched, as shown")

    # The leaks' flame graph.
    leak_values, _ = frames_of(dom.by_id("tfa-flame-leaks"))
    eq(leak_values.get("leaked"), 1480, "the leaks' root")
    eq(leak_values.get("config_alloc"), 1000, "config_alloc leaked")
    eq(leak_values.get("node_alloc"), 480, "node_alloc leaked")
    check("cache_alloc" not in leak_values, "cache_alloc did not leak")

    # The click on cache_alloc, then on the root (#test-zoom).
    t = dom.by_id("tfa-test")
    check(t is not None and "data-error" not in t.attrs, f"the zoom test ran: {t.attrs if t else None}")
    width = float(t.attrs["data-graph-width"])
    check(float(t.attrs["data-before-width"]) < width - 1, "cache_alloc narrower than the graph before")
    eq(t.attrs["data-zoomed"], "cache_alloc", "zoomed into cache_alloc")
    check(abs(float(t.attrs["data-zoom-width"]) - width) < 0.01,
          f"cache_alloc fills the width when zoomed: {t.attrs['data-zoom-width']} of {width}")
    eq(json.loads(t.attrs["data-zoom-visible"]), ["all", "main", "build_cache", "cache_alloc"],
       "zoomed: the callers and the frame only")
    eq(t.attrs["data-reset-zoomed"], "", "the root's click zooms out")
    eq(float(t.attrs["data-reset-width"]), float(t.attrs["data-before-width"]),
       "cache_alloc back to its width")
    check("config_alloc" in json.loads(t.attrs["data-reset-visible"]), "the other sites are back")

    # The top tables: the innermost frames of each site, largest first.
    first_rows = {}
    for key in ("peak", "leaked", "total", "count"):
        table = dom.by_id(f"tfa-table-{key}")
        check(table is not None, f"the table by {key}")
        rows = table.find_all("tr")[1:]
        check(rows, f"rows in the table by {key}")
        first_rows[key] = rows[0].all_text()
    check(first_rows["peak"].startswith("1256.0 KiB (262,144 bytes)99.6%64")
          and "cache_alloc" in first_rows["peak"], f"by peak: {first_rows['peak']!r}")
    check("config_alloc" in first_rows["leaked"] and "1,000 bytes" in first_rows["leaked"],
          f"leaked: {first_rows['leaked']!r}")
    check("cache_alloc" in first_rows["total"], f"by total: {first_rows['total']!r}")
    check("token_alloc" in first_rows["count"] and "1,000" in first_rows["count"],
          f"by count: {first_rows['count']!r}")
    check(re.search(rf"cache_alloc tp_sites\.c:{site_line('SITE_CACHE')}←build_cache tp_sites\.c:\d+"
                    r"←main tp_sites\.c:\d+", first_rows["peak"]),
          f"frames of the peak's first site: {first_rows['peak']!r}")


def site_line(marker):
    """The line of tp_sites.c marked /* MARKER */."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "programs", "tp_sites.c")
    with open(src) as f:
        for i, line in enumerate(f, 1):
            if f"/* {marker} */" in line:
                return i
    raise Failure(f"no {marker} in {src}")


def symfix_return_address(lib, function, callee="tfa_symfix_leaf"):
    """The return address (an offset in lib) of the call to callee in function."""
    p = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True,
                       timeout=60, check=True)
    lines = p.stdout.decode().splitlines()
    inside = False
    for i, line in enumerate(lines):
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            inside = m.group(1) == function
            continue
        if inside and "call" in line and f"<{callee}" in line:
            for nxt in lines[i + 1:]:
                m = re.match(r"^\s*([0-9a-f]+):", nxt)
                if m:
                    return int(m.group(1), 16)
    raise Failure(f"no call of {callee} in {function} of {lib}")


def symbol_address(lib, name):
    p = subprocess.run(["nm", "--defined-only", lib], capture_output=True, timeout=60, check=True)
    for line in p.stdout.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise Failure(f"no symbol {name} in {lib}")


NASTY_COMMAND = "prog </script><script>document.title='pwned'</script> <b>bold</b> & \"q\" 'a' <!--"
NASTY_EXE = "/opt/a&b/<x>\"y\"/prog"
NASTY_COMM = "<i>it</i>"
NASTY_DETAIL = "</script><img src=x onerror=alert(1)>"
POKE = "tfa_fixture::Widget<int>::poke(int, tfa_symfix_site*)"
NASTY_LIB = "/opt/gone<b>&amp;/libgone.so"  # mapped by the process, gone since


def nasty_profile(pid):
    lib = EXTRA
    bias = 0x7F0000000000
    poke = bias + symfix_return_address(lib, "_ZN11tfa_fixture6WidgetIiE4pokeEiP15tfa_symfix_site")
    outer = bias + symfix_return_address(lib, "tfa_symfix_outer")
    cxx = bias + symbol_address(lib, "tfa_symfix_cxx") + 8
    return pg.profile([
        pg.process(pid=pid, ppid=1, command=NASTY_COMMAND, exe=NASTY_EXE, comm=NASTY_COMM),
        pg.device(num_allocs=3, num_frees=1, bytes_in_use=3000, peak_bytes_in_use=7000,
                  total_bytes=9000, largest_alloc_size=4000),
        pg.device(name="cuda:0", allocator="cuda", num_allocs=1, peak_bytes_in_use=500,
                  total_bytes=500),
        config(),
        module(lib, bias, bias, bias + 0x5000),
        module(NASTY_LIB, 0x7F1000000000, 0x7F1000000000, 0x7F1000001000),
        stacks({1: [poke, cxx], 2: [outer], 3: [0x1234, 0x7F1000000100]}),
        site(1, 1, 4000, 0, 0, 4000),
        site(2, 1, 2000, 2000, 1, 2000),
        site(3, 1, 3000, 1000, 1, 1000),
        site(1, 1, 500, 0, 0, 500, device="cuda:0"),
        pg.leak(2000, 1, stack_id=2),
        pg.leak(1000, 1, stack_id=3),
        pg.error(pg.ERR_DOUBLE_FREE, 0xDEAD, count=2, detail=NASTY_DETAIL, stack_id=1),
        timeline(10_000_000, [(0, 0, 0, 1 << 20, 0), (5_000_000, 7000, 7100, 2 << 20, 1),
                              (9_000_000, 3000, 3100, 2 << 20, 0)]),
    ])


def case_escaping():
    good = write("in/tfalloc.prog.100.prof", nasty_profile(100))
    bad = write("in/a<b>&c\"/x.prof", b"not a profile")
    page_path = os.path.join(TMP, "page.html")
    rc, out, err = tfalloc("report", "--format", "html", "-o", page_path, good, bad)
    eq(rc, 1, f"a file could not be read (stderr: {err})")
    eq(err, f"tfalloc: report: {bad}: not a tfalloc profile (bad magic)\n", "its message")
    page = read(page_path)
    check_self_contained(page)
    for s in ("</script><script>", "<b>bold", "<i>it", "<img"):
        check(s not in page, f"{s!r} is not in the page as it is")
    data = data_of(page)
    p = data["processes"][0]
    eq((p["command"], p["exe"], p["comm"]), (NASTY_COMMAND, NASTY_EXE, NASTY_COMM),
       "the strings survive the escaping")
    eq(data["unreadable"], [f"{bad}: not a tfalloc profile (bad magic)"], "unreadable")
    eq(data["symbols"], [f"{NASTY_LIB}: No such file or directory"], "why a file's frames are offsets")
    names = [f[0] for f in p["frames"]]
    check(POKE in names, f"the C++ frame is symbolized: {names}")
    inlined = {f[0]: f[4] for f in p["frames"]}
    eq((inlined.get("tfa_symfix_inner"), inlined.get("tfa_symfix_middle"),
        inlined.get("tfa_symfix_outer")), (1, 1, 0), "inlined frames flagged")

    dom = browse(page_path, "#test-zoom=" + urllib.parse.quote(POKE, safe=""))
    eq(len(dom.find_all("script")), 2, "no script added")
    eq(dom.find_all("img"), [], "no image added")
    eq([n.all_text() for n in dom.find_all("title")][0], f"tfalloc: {NASTY_COMM} (100)",
       "the document's title, as text")
    eq(dom.by_id("tfa-process-title").all_text(), f"Process 100: {NASTY_COMMAND}",
       "the command, as text")
    check(NASTY_EXE in dom.by_id("tfa-head").all_text(), "the executable, as text")
    unreadable = dom.by_id("tfa-unreadable")
    check(unreadable is not None and f"{bad}: not a tfalloc profile" in unreadable.all_text(),
          "the unreadable file is listed")
    gone = dom.by_id("tfa-symbols")
    check(gone is not None and f"{NASTY_LIB}: No such file or directory" in gone.all_text(),
          "the file whose frames are offsets is listed, as text")
    values, names = frames_of(dom.by_id("tfa-flame-peak"))
    eq(names[:2], ["all", "device cpu"], "the root, then the devices, largest first")
    check("device cuda:0" in names, f"each device under the root: {names}")
    eq((values["device cpu"], values["device cuda:0"]), (7000, 500), "each device's peak")
    eq(values.get(POKE), 4000, "the C++ frame in the flame graph (its first, the cpu's)")
    eq(values.get("tfa_symfix_cxx"), 4000, "its caller")
    eq(values.get("0x1234"), 1000, "an address in no module")
    eq(values.get("all"), 7500, "the root holds the devices' peaks")
    devices = dom.find_all("table", **{"class": "devices"})
    check(len(devices) == 1 and "cuda:0" in devices[0].all_text(), "a table of the devices")
    inl = [g for g in dom.by_id("tfa-flame-peak").find_all("g")
           if g.attrs.get("data-name") == "tfa_symfix_inner"]
    check(inl and "inlined" in inl[0].attrs["class"].split(), "an inlined frame is marked")
    t = dom.by_id("tfa-test")
    check(t is not None and "data-error" not in t.attrs, f"zoom by a name with '<': {t.attrs if t else None}")
    eq(t.attrs["data-zoomed"], POKE, "zoomed into the C++ frame")
    errors = dom.by_id("tfa-errors")
    check(errors is not None and NASTY_DETAIL in errors.all_text(), "the error's detail, as text")


def case_many_stacks():
    """3,000 stacks of 1 to 12 return addresses out of 41, sharing their outer frames: the page's
    tree of stacks (tools/html.c), grown past its first 1,024 nodes, gives each stack back frame
    for frame, innermost first; the sites' columns give each site back."""
    rng = random.Random(1)
    table = {sid: [0x400000 + rng.randint(0, 40) * 16 for _ in range(rng.randint(1, 12))]
             for sid in range(1, 3001)}
    path = write("many.prof", pg.profile([pg.process(pid=7, command="many"), config(), stacks(table)]
                                         + [site(sid, sid, 16 * sid, 0, 0, sid % 7) for sid in table]))
    page_path = os.path.join(TMP, "many.html")
    rc, out, err = tfalloc("report", "--format", "html", "-o", page_path, path)
    eq((rc, out, err), (0, "", ""), "the report")
    dp = data_of(read(page_path))["processes"][0]
    nodes, names = dp["stack_nodes"], [f[0] for f in dp["frames"]]
    check(len(nodes) // 2 > 1024, "the tree grew: %d nodes" % (len(nodes) // 2))
    got = {}
    for sid, leaf in zip(dp["stack_ids"], dp["stack_leaves"]):
        fr = []
        while leaf:
            fr.append(names[nodes[2 * (leaf - 1) + 1]])
            leaf = nodes[2 * (leaf - 1)]
        got[sid] = fr
    eq(got, {sid: ["0x%x" % pc for pc in pcs] for sid, pcs in table.items()}, "every stack, frame for frame")
    cols = dp["sites"]
    eq(sorted(zip(cols["stack"], cols["num_allocs"], cols["total_bytes"], cols["bytes_at_peak"])),
       [(sid, sid, 16 * sid, sid % 7) for sid in sorted(table)], "the sites' columns")
    eq(cols["devices"], ["cpu"], "the devices' names, once")


def plain_profile(pid, command, complete=1):
    return pg.profile([
        pg.process(pid=pid, ppid=1, command=command,
                   end_reason=pg.END_EXIT if complete else pg.END_RUNNING,
                   end_ns=1700000001_000000000 if complete else 1700000000_500000000),
        pg.device(num_allocs=5, num_frees=5, peak_bytes_in_use=1000 * pid, total_bytes=5000),
        timeline(10_000_000, [(i * 10_000_000, 100 * i, 120 * i, 4096, 0) for i in range(50)]),
    ], complete=complete)


def case_several():
    d = os.path.join(TMP, "dir")
    write("dir/tfalloc.a.200.prof", plain_profile(200, "second", complete=0))
    write("dir/tfalloc.a.100.prof", plain_profile(100, "first"))
    page_path = os.path.join(TMP, "page.html")
    rc, out, err = tfalloc("report", "--format=html", "--output", page_path, d)
    eq((rc, out, err), (0, "", ""), "the report")
    data = data_of(read(page_path))
    eq([p["pid"] for p in data["processes"]], [100, 200], "processes in the report's order")

    dom = browse(page_path)
    sel = dom.by_id("tfa-process")
    check(sel is not None, "a process selector")
    eq([o.all_text() for o in sel.find_all("option")],
       ["pid 100: first", "pid 200 (snapshot): second"], "its options")
    eq(dom.by_id("tfa-process-title").all_text(), "Process 100: first", "the first is shown")
    eq(len(path_points(dom.find_all("path", data_series="bytes_in_use")[0].attrs["d"])), 50,
       "its timeline")
    check(dom.by_id("tfa-flame-peak").all_text().startswith("No stacks"), "no stacks: said so")

    dom = browse(page_path, "#process=200")
    eq(dom.by_id("tfa-process-title").all_text(), "Process 200: second", "#process=200")
    check(dom.by_id("tfa-complete").all_text().startswith("snapshot"), "a snapshot, said so")
    check("In use at the snapshot" in dom.by_id("tfa-summary").all_text(), "snapshot figures")


def case_corrupt():
    good = write("in/tfalloc.good.1.prof", pg.profile([pg.process(pid=1, command="good")]))
    crc = bytearray(read_bytes(good))
    crc[16 + 8] ^= 0xFF
    bad = write("in/tfalloc.bad.2.prof", bytes(crc))
    cut = write("in/tfalloc.cut.3.prof", read_bytes(good)[:30])
    rc, _, text_err = tfalloc("report", good, bad, cut)
    eq(rc, 1, "text: exit status")
    eq(len(text_err.splitlines()), 2, f"one line per bad file: {text_err!r}")
    page_path = os.path.join(TMP, "page.html")
    rc, out, err = tfalloc("report", "--format", "html", "-o", page_path, good, bad, cut)
    eq((rc, out), (1, ""), "html: exit status")
    eq(err, text_err, "the same messages as the text format")
    data = data_of(read(page_path))
    eq([p["command"] for p in data["processes"]], ["good"], "the good file is in the page")
    eq(data["unreadable"], [line[len("tfalloc: report: "):] for line in text_err.splitlines()],
       "the messages in the page")
    # Only bad files: still a page, status 1.
    rc, out, err = tfalloc("report", "--format", "html", bad)
    eq(rc, 1, "only bad files")
    check(out.startswith("<!DOCTYPE html>") and out.endswith("</html>\n"), "a page on stdout")
    eq(data_of(out)["processes"], [], "no processes")
    # Usage
    rc, out, err = tfalloc("report", "--format", "xml", good)
    eq(rc, 2, "unknown format")
    check(re.fullmatch(r"tfalloc: report: unknown format 'xml' \(text, json.* or html\) "
                       r"\(see 'tfalloc report --help'\)\n", err), f"its message: {err!r}")
    rc, out, err = tfalloc("report", "--help")
    check(rc == 0 and "--format" in out and "html" in out, "--help tells of html")


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    global TFALLOC, TMP, EXTRA
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: test_html.py TFALLOC CASE [TP_SITES | SYMFIX_LIB]")
    TFALLOC = os.path.abspath(sys.argv[1])
    EXTRA = os.path.abspath(sys.argv[3]) if len(sys.argv) == 4 else None
    case = globals().get("case_" + sys.argv[2])
    if case is None:
        sys.exit(f"unknown case {sys.argv[2]}")
    with tempfile.TemporaryDirectory(prefix="tfa-html-") as tmp:
        TMP = os.path.realpath(tmp)
        try:
            case()
        except Skip as e:
            print(f"SKIP {sys.argv[2]}: {e}")
            sys.exit(SKIP)
        except Failure as e:
            print(f"FAIL {sys.argv[2]}: {e}")
            sys.exit(1)
    print(f"PASS {sys.argv[2]}")


if __name__ == "__main__":
    main()
