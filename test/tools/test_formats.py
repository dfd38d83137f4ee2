# SPDX-License-Identifier: MIT
"""Tests of `tfalloc report --format folded` and `--format pprof`.

usage: test_formats.py TFALLOC PROTOC PROFILE_PROTO [PROGRAM SOURCE] CASE

pprof output is decoded by an independent decoder: gunzip (Python's zlib)
and `protoc --decode perftools.profiles.Profile` with the profile.proto that
Debian ships with pprof (golang-github-google-pprof-dev).  The *_run cases run
a program under the real shim (`tfalloc run`): test/programs/tp_sites, whose
sites, functions, lines and figures are known exactly, or formats_inline.c
(inline_run), whose one leak is made in an inlined call; the other cases use hand-made
profiles (test/tools/profgen.py, plus the stack records here) with known
modules, stacks, sites and sampling.
"""

import codecs
import gzip
import json
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profgen as pg  # noqa: E402

TFALLOC = PROTOC = PROTO = TP_SITES = TP_SITES_SRC = None
TMP = None

REC_CONFIG, REC_MODULE, REC_STACKS, REC_SITE = 6, 7, 8, 9
STACKS_FP, STACKS_UNWIND = 1, 2
GONE_NEVER = 0xFFFFFFFF


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def eq(got, want, what="value"):
    if got != want:
        raise Failure(f"{what}:\n--- got ---\n{got!r}\n--- want ---\n{want!r}")


def run(*args, timeout=60, env=None):
    p = subprocess.run(list(args), capture_output=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def tfalloc(*args):
    return run(TFALLOC, *args)


def write(name, data):
    path = os.path.join(TMP, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


# ---------------------------------------------------------------------------
# Stack records (core/profile_format.h), beside profgen's


def config(mode=STACKS_FP, depth=64, sample_bytes=0):
    return pg.record(REC_CONFIG, pg.u32(mode) + pg.u32(depth) + pg.u64(sample_bytes))


def module(path, bias, start, end, build_id=b"", seen_at=0, gone_at=GONE_NEVER):
    return pg.record(REC_MODULE, pg.u64(bias) + pg.u64(start) + pg.u64(end) + pg.u32(seen_at)
                     + pg.u32(gone_at) + pg.string(path) + pg.string(build_id))


def stacks(table):
    """table: {id: [pc, ...] innermost first}"""
    payload = b""
    for sid, pcs in table.items():
        payload += pg.u32(sid) + pg.u32(len(pcs)) + b"".join(pg.u64(pc) for pc in pcs)
    return pg.record(REC_STACKS, payload)


def site(stack_id, allocs, total, in_use, blocks, peak, device="cpu"):
    return pg.record(REC_SITE, pg.string(device) + pg.u32(stack_id)
                     + pg.counts([allocs, total, in_use, blocks, peak]))


# ---------------------------------------------------------------------------
# pprof: gunzip, protoc --decode, and a reader of protoc's text format


def parse_text_format(text):
    """protoc's text output -> nested dicts of lists: {field: [value or dict, ...]}."""
    root = {}
    stack = [root]
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
            continue
        m = re.fullmatch(r"(\w+) \{", line)
        if m:
            child = {}
            stack[-1].setdefault(m.group(1), []).append(child)
            stack.append(child)
            continue
        m = re.fullmatch(r"(\w+): (.*)", line)
        if not m:
            raise Failure(f"protoc output: cannot read {raw!r}")
        key, val = m.group(1), m.group(2)
        if val.startswith('"'):
            v = codecs.escape_decode(val[1:-1].encode("ascii"))[0].decode("utf-8")
        elif val in ("true", "false"):
            v = val == "true"
        else:
            v = int(val)
        stack[-1].setdefault(key, []).append(v)
    eq(len(stack), 1, "protoc output: balanced braces")
    return root


def decode_pprof(path):
    with open(path, "rb") as f:
        data = f.read()
    check(data[:2] == b"\x1f\x8b", f"{path}: gzip magic, got {data[:2]!r}")
    raw = gzip.decompress(data)
    p = subprocess.run([PROTOC, "--decode=perftools.profiles.Profile",
                        "-I", os.path.dirname(PROTO), os.path.basename(PROTO)],
                       input=raw, capture_output=True, timeout=60)
    if p.returncode != 0:
        raise Failure(f"protoc --decode failed: {p.stderr.decode()}")
    text = p.stdout.decode("utf-8")
    check(re.search(r"^\d+:", text, re.M) is None, f"no unknown fields:\n{text}")
    return Pprof(parse_text_format(text))


class Pprof:
    """A decoded profile with its references resolved."""

    def __init__(self, doc):
        self.doc = doc
        self.strings = doc.get("string_table", [])
        eq(self.strings[:1], [""], "string_table[0]")
        eq(len(set(self.strings)), len(self.strings), "strings are unique")
        self.functions = {f["id"][0]: f for f in doc.get("function", [])}
        self.locations = {loc["id"][0]: loc for loc in doc.get("location", [])}
        self.mappings = {m["id"][0]: m for m in doc.get("mapping", [])}
        eq(len(self.functions), len(doc.get("function", [])), "function ids unique")
        eq(len(self.locations), len(doc.get("location", [])), "location ids unique")
        eq(len(self.mappings), len(doc.get("mapping", [])), "mapping ids unique")
        for i in list(self.functions) + list(self.locations) + list(self.mappings):
            check(i > 0, "ids are not 0")

    def s(self, msg, field):
        return self.strings[msg.get(field, [0])[0]]

    def scalar(self, field, default=0):
        return self.doc.get(field, [default])[0]

    def sample_types(self):
        return [(self.s(v, "type"), self.s(v, "unit")) for v in self.doc.get("sample_type", [])]

    def function(self, fid):
        f = self.functions[fid]
        return self.s(f, "name"), self.s(f, "system_name"), self.s(f, "filename")

    def lines(self, loc_id):
        """[(function name, file, line), ...] innermost first."""
        loc = self.locations[loc_id]
        out = []
        for ln in loc.get("line", []):
            name, _, file = self.function(ln["function_id"][0])
            out.append((name, file, ln.get("line", [0])[0]))
        return out

    def samples(self):
        """[(labels, values, [[lines of each location], ...] leaf first)]"""
        out = []
        for smp in self.doc.get("sample", []):
            labels = {}
            for lab in smp.get("label", []):
                key = self.s(lab, "key")
                labels[key] = self.s(lab, "str") if "str" in lab else lab.get("num", [0])[0]
            locs = [self.lines(i) for i in smp.get("location_id", [])]
            out.append((labels, smp.get("value", []), locs, smp.get("location_id", [])))
        return out

    def comments(self):
        return [self.strings[i] for i in self.doc.get("comment", [])]


# ---------------------------------------------------------------------------
# Hand-made profiles

BIAS_A = 0x555500000000
BIAS_B = 0x566600000000
VDSO = 0x7FFF0000
PROG = "/nonexistent/tfa-formats/prog"
START_A, END_A = 1700000000_000000000, 1700000002_000000000
START_B = 1700000001_000000000


def profile_a(pid=10, comm="a;b\nc"):
    """Complete, every allocation's stack; sites on cpu and cuda:0, allocations without stack."""
    dev_cpu = dict(num_allocs=14, num_frees=11, bytes_in_use=157, peak_bytes_in_use=250,
                   total_bytes=950, largest_alloc_size=100)
    dev_cuda = dict(num_allocs=2, num_frees=1, bytes_in_use=1024, peak_bytes_in_use=2048,
                    total_bytes=2048, largest_alloc_size=1024)
    recs = [
        pg.process(pid=pid, comm=comm, command="prog --x", exe=PROG, start_ns=START_A,
                   end_ns=END_A),
        pg.device("cpu", **dev_cpu),
        pg.device("cuda:0", allocator="cuda", **dev_cuda),
        config(STACKS_FP, 64, 0),
        module(PROG, BIAS_A, BIAS_A, BIAS_A + 0x10000, bytes([1, 2, 0xAB, 0xCD])),
        module("", VDSO, VDSO, VDSO + 0x2000),
        stacks({
            1: [BIAS_A + 0x1010, BIAS_A + 0x1020, BIAS_A + 0x1030],
            2: [BIAS_A + 0x1040, BIAS_A + 0x1020, BIAS_A + 0x1030],
            3: [0x1234],
            4: [VDSO + 0x10, BIAS_A + 0x1030],
            5: [BIAS_A + 0x1010, BIAS_A + 0x1020, BIAS_A + 0x1030],
        }),
        # stack, allocs, total, in use, blocks in use, at peak
        site(1, 3, 300, 100, 1, 200),
        site(2, 5, 500, 0, 0, 0),
        site(3, 1, 7, 7, 1, 7),
        site(4, 2, 2048, 1024, 1, 2048, device="cuda:0"),
        site(5, 1, 50, 0, 0, 0),
    ]
    # without a stack (cpu): 4 allocations, 93 bytes, 50 in use in 1 block, 43 at the peak
    return pg.profile(recs)


SAMPLE_BYTES_B = 1000


def profile_b():
    """A snapshot, stacks sampled every 1000 bytes: figures are scaled."""
    recs = [
        pg.process(pid=20, comm="b", command="b", exe=PROG, start_ns=START_B, end_ns=0,
                   end_reason=pg.END_RUNNING),
        pg.device("cpu", num_allocs=50, num_frees=40, bytes_in_use=5000, total_bytes=9000,
                  peak_bytes_in_use=6000),
        config(STACKS_UNWIND, 64, SAMPLE_BYTES_B),
        module(PROG, BIAS_B, BIAS_B, BIAS_B + 0x10000, bytes([1, 2, 0xAB, 0xCD])),
        stacks({1: [BIAS_B + 0x1010]}),
        site(1, 2, 200, 100, 1, 100),
    ]
    return pg.profile(recs, complete=0)


def c_round(x):
    return int(math.floor(x + 0.5))


def scaled_b():
    """What tfa_site_estimate makes of profile_b's site, rounded."""
    def scale(mean):
        return 1.0 / -math.expm1(-mean / SAMPLE_BYTES_B)
    allocs, total, in_use, blocks, peak = 2, 200, 100, 1, 100
    a, live = scale(total / allocs), scale(in_use / blocks)
    return dict(allocs=c_round(allocs * a), total=c_round(total * a), peak=c_round(peak * a),
                in_use=c_round(in_use * live), blocks=c_round(blocks * live))


def handmade():
    return write("a/a.prof", profile_a()), write("b/b.prof", profile_b())


def folded(*args):
    rc, out, err = tfalloc("report", "--format", "folded", *args)
    eq((rc, err), (0, ""), "folded: exit status and stderr")
    return out.decode("utf-8")


def folded_lines(text):
    out = {}
    check(text == "" or text.endswith("\n"), "folded output ends with a newline")
    for line in text.splitlines():
        m = re.fullmatch(r"(\S.*) (\d+)", line)
        check(m is not None, f"folded line {line!r}")
        check(m.group(1) not in out, f"stack {m.group(1)!r} on one line only")
        out[m.group(1)] = int(m.group(2))
    return out


def case_folded_handmade():
    a, b = handmade()
    pa = "a:b c[10]"
    fa = lambda *fr: ";".join((pa,) + fr)  # noqa: E731
    p1 = ("prog+0x1030", "prog+0x1020", "prog+0x1010")
    p2 = ("prog+0x1030", "prog+0x1020", "prog+0x1040")
    cuda = ("[cuda:0]", "prog+0x1030", "0x7fff0010")
    sb = scaled_b()
    want_total = [
        (fa("0x1234"), 7),
        (fa(*cuda), 2048),
        (fa("[no stack]"), 93),
        (fa(*p1), 350),  # stacks 1 and 5 have the same frames: one line
        (fa(*p2), 500),
        ("b[20];prog+0x1010", sb["total"]),
    ]
    eq(folded("--by", "total", a, b),
       "".join(f"{s} {v}\n" for s, v in want_total), "--by total")
    eq(folded("--by=count", a, b), "".join(f"{s} {v}\n" for s, v in [
        (fa("0x1234"), 1), (fa(*cuda), 2), (fa("[no stack]"), 4), (fa(*p1), 4), (fa(*p2), 5),
        ("b[20];prog+0x1010", sb["allocs"])]), "--by count")
    want_peak = [(fa("0x1234"), 7), (fa(*cuda), 2048), (fa("[no stack]"), 43), (fa(*p1), 200),
                 ("b[20];prog+0x1010", sb["peak"])]
    eq(folded(a, b), "".join(f"{s} {v}\n" for s, v in want_peak), "default: --by peak")
    eq(folded("--by", "peak", a, b), folded(a, b), "--by peak is the default")
    want_leaked = [(fa("0x1234"), 7), (fa(*cuda), 1024), (fa("[no stack]"), 50), (fa(*p1), 100)]
    eq(folded("--by", "leaked", a, b), "".join(f"{s} {v}\n" for s, v in want_leaked),
       "--by leaked: the snapshot has no leaks")
    eq(folded("--by", "in-use", a, b),
       "".join(f"{s} {v}\n" for s, v in want_leaked + [("b[20];prog+0x1010", sb["in_use"])]),
       "--by in-use: the snapshot's too")
    # sums: what the devices say (profile a is not sampled)
    eq(sum(folded_lines(folded("--by", "total", a)).values()), 950 + 2048, "total of a")
    eq(sum(folded_lines(folded("--by", "peak", a)).values()), 250 + 2048, "peak of a")
    # the same stacks in two processes never merge
    a2 = write("a2/a.prof", profile_a(pid=11, comm="a"))
    lines = folded_lines(folded("--by", "total", a, a2))
    eq(lines[fa(*p1)], 350, "pid 10")
    eq(lines[";".join(("a[11]",) + p1)], 350, "pid 11")
    # a profile without stacks: everything under [no stack]
    c = write("c/c.prof", pg.profile([pg.process(pid=30, comm="c"),
                                      pg.device("cpu", num_allocs=3, num_frees=1, total_bytes=64,
                                                bytes_in_use=16, peak_bytes_in_use=48)]))
    eq(folded("--by", "total", c), "c[30];[no stack] 64\n", "no stacks: total")
    eq(folded("--by", "count", c), "c[30];[no stack] 3\n", "no stacks: count")


def case_pprof_handmade():
    a, b = handmade()
    out = os.path.join(TMP, "out.pb.gz")
    rc, stdout, err = tfalloc("report", "--format", "pprof", "-o", out, a, b)
    eq((rc, stdout, err), (0, b"", ""), "exit status, stdout, stderr")
    pp = decode_pprof(out)
    eq(pp.sample_types(), [("alloc_objects", "count"), ("alloc_space", "bytes"),
                           ("inuse_objects", "count"), ("inuse_space", "bytes")], "sample types")
    eq(pp.strings[pp.scalar("default_sample_type")], "inuse_space", "default sample type")
    eq(pp.scalar("time_nanos"), START_A, "time_nanos: the earliest start")
    eq(pp.scalar("duration_nanos"), END_A - START_A, "duration_nanos: to the latest end")
    pt = pp.doc["period_type"][0]
    eq((pp.s(pt, "type"), pp.s(pt, "unit")), ("space", "bytes"), "period type")
    eq(pp.scalar("period"), 0, "period: the profiles' sampling differs")
    comments = pp.comments()
    check(comments[0].startswith("tfalloc "), f"first comment names the tool: {comments}")
    check(any(c.startswith("pid 10 ") and "of every allocation" in c for c in comments),
          f"comment of pid 10 says stacks were not sampled: {comments}")
    check(any(c.startswith("pid 20 ") and "sampled every 1000 bytes" in c and "snapshot" in c
              for c in comments), f"comment of pid 20 says sampled: {comments}")

    samples = pp.samples()
    got = sorted((lab["pid"], lab["device"], [[ln[0] for ln in loc] for loc in locs], vals)
                 for lab, vals, locs, _ in samples)
    f = lambda *n: [[x] for x in n]  # noqa: E731  one frame per location
    sb = scaled_b()
    want = sorted([
        (10, "cpu", f("prog+0x1010", "prog+0x1020", "prog+0x1030"), [3, 300, 1, 100]),
        (10, "cpu", f("prog+0x1040", "prog+0x1020", "prog+0x1030"), [5, 500, 0, 0]),
        (10, "cpu", f("0x1234"), [1, 7, 1, 7]),
        (10, "cuda:0", f("0x7fff0010", "prog+0x1030"), [2, 2048, 1, 1024]),
        (10, "cpu", f("prog+0x1010", "prog+0x1020", "prog+0x1030"), [1, 50, 0, 0]),
        (10, "cpu", f("[no stack]"), [4, 93, 1, 50]),
        (20, "cpu", f("prog+0x1010"), [sb["allocs"], sb["total"], sb["blocks"], sb["in_use"]]),
    ])
    eq(got, want, "samples (pid, device, frames leaf first, values)")
    # one location per address of a process: stacks 1 and 5 share theirs
    ids = {tuple(lab.items()) + tuple(v): loc_ids for lab, v, _, loc_ids in samples}
    s1 = ids[(("pid", 10), ("device", "cpu"), 3, 300, 1, 100)]
    s5 = ids[(("pid", 10), ("device", "cpu"), 1, 50, 0, 0)]
    eq(s1, s5, "same addresses, same locations")
    s2 = ids[(("pid", 10), ("device", "cpu"), 5, 500, 0, 0)]
    eq(s2[1:], s1[1:], "callers shared between stacks")
    check(s2[0] != s1[0], "another leaf, another location")
    # locations: address - 1 (inside the call), mapping of the module
    by_addr = {}
    for loc in pp.locations.values():
        mid = loc.get("mapping_id", [0])[0]
        m = pp.mappings.get(mid)
        by_addr.setdefault(loc.get("address", [0])[0], []).append(
            None if m is None else (m["memory_start"][0], m["memory_limit"][0],
                                    pp.s(m, "filename"), pp.s(m, "build_id"),
                                    m.get("file_offset", [0])[0]))
    ma = (BIAS_A, BIAS_A + 0x10000, PROG, "0102abcd", 0)
    mb = (BIAS_B, BIAS_B + 0x10000, PROG, "0102abcd", 0)
    eq(by_addr.get(BIAS_A + 0x1010 - 1), [ma], "location of a's 0x1010")
    eq(by_addr.get(BIAS_B + 0x1010 - 1), [mb], "location of b's 0x1010")
    eq(by_addr.get(VDSO + 0x10 - 1), [(VDSO, VDSO + 0x2000, "[vdso]", "", 0)], "vdso location")
    eq(by_addr.get(0x1234 - 1), [None], "an address in no module has no mapping")
    eq(len(pp.locations), 8, "locations: 6 addresses in a, 1 in b, the no-stack one")
    eq(len(pp.mappings), 3, "mappings: prog in a, prog in b, vdso")
    for m in pp.mappings.values():
        eq(m.get("has_functions"), [True], "has_functions")
    # functions deduplicated: a's and b's prog+0x1010 are one function
    names = [pp.function(i)[0] for i in pp.functions]
    eq(sorted(names), sorted(["prog+0x1010", "prog+0x1020", "prog+0x1030", "prog+0x1040",
                              "0x1234", "0x7fff0010", "[no stack]"]), "functions")
    for i in pp.functions:
        name, system_name, _ = pp.function(i)
        eq(system_name, name, "system_name")
    # one profile: its period is its sampling interval
    out_b = os.path.join(TMP, "b.pb.gz")
    eq(tfalloc("report", "--format=pprof", f"--output={out_b}", b)[0], 0, "b alone")
    eq(decode_pprof(out_b).scalar("period"), SAMPLE_BYTES_B, "period of b")
    # to stdout when it is not a terminal
    rc, stdout, err = tfalloc("report", "--format", "pprof", a)
    eq((rc, err), (0, ""), "pprof to a pipe")
    with open(out_b, "wb") as fh:
        fh.write(stdout)
    eq(len(decode_pprof(out_b).samples()), 6, "samples of a, written to stdout")


def case_corrupt():
    a = write("ok/a.prof", profile_a())
    bad = write("bad/x.prof", b"hello, world, this is not it\n")
    want_err = f"tfalloc: report: {bad}: not a tfalloc profile (bad magic)\n"
    rc, out, err = tfalloc("report", "--format", "folded", "--by", "total", bad, a)
    eq((rc, err), (1, want_err), "folded: exit status and the one-line error")
    check(out.decode().startswith("a:b c[10];"), "folded: the readable file is still reported")
    rc, out, err = tfalloc("report", "--format", "folded", bad)
    eq((rc, out, err), (1, b"", want_err), "folded, only a bad file")
    path = os.path.join(TMP, "out.pb.gz")
    rc, out, err = tfalloc("report", "--format", "pprof", "-o", path, a, bad)
    eq((rc, out, err), (1, b"", want_err), "pprof: exit status and the one-line error")
    eq({lab["pid"] for lab, _, _, _ in decode_pprof(path).samples()}, {10},
       "pprof: the readable file is still reported")
    rc, out, err = tfalloc("report", "--format", "pprof", "-o", path, bad)
    eq((rc, out, err), (1, b"", want_err), "pprof, only a bad file")
    eq(decode_pprof(path).samples(), [], "a valid profile without samples")


def case_usage():
    a = write("ok/a.prof", profile_a())
    see = " (see 'tfalloc report --help')\n"
    for args, msg in [
        (["--by", "bytes", a], "--by 'bytes': a comma-separated list of peak, leaked, total, count"),
        (["--format", "pprof", "--by", "peak", a],
         "option --by does not apply to pprof: it holds every figure"),
        (["--format", "folded", "--by", "bytes", a],
         "unknown figure 'bytes' for --by (peak, leaked, in-use, total or count)"),
        (["--format", "folded", a, "--by"], "option --by needs a value"),
        (["--format", "svg", a], "unknown format 'svg' (text, json, folded, pprof or html)"),
    ]:
        rc, out, err = tfalloc("report", *args)
        eq((rc, out, err), (2, b"", "tfalloc: report: " + msg + see), f"usage: {args}")
    rc, out, err = tfalloc("report", "--help")
    check(rc == 0 and b"--format folded" in out and b"--by LIST" in out
          and b"--format pprof" in out, "--help tells of folded, pprof and --by")
    # pprof is binary: not onto a terminal (script(1) gives the command one)
    if os.path.exists("/usr/bin/script"):
        log = os.path.join(TMP, "tty.log")
        cmd = f"{TFALLOC} report --format pprof {a}; echo status=$?"
        run("/usr/bin/script", "-qec", cmd, log)
        with open(log, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        check("pprof output is binary: give -o FILE" in text and "status=2" in text,
              f"pprof onto a terminal: {text!r}")


# ---------------------------------------------------------------------------
# Real runs of tp_sites under the shim


def site_lines():
    """Line numbers in tp_sites.c: the SITE_* markers and the calls of each helper."""
    with open(TP_SITES_SRC) as f:
        src = f.read().split("\n")

    def line_of(pattern):
        hits = [i + 1 for i, ln in enumerate(src) if re.search(pattern, ln)]
        eq(len(hits), 1, f"lines of {pattern!r} in tp_sites.c")
        return hits[0]
    return {
        "cache_alloc": line_of(r"SITE_CACHE"), "config_alloc": line_of(r"SITE_CONFIG"),
        "token_alloc": line_of(r"SITE_TOKEN"), "node_alloc": line_of(r"SITE_NODE"),
        "build_cache": line_of(r"= cache_alloc\(\)"), "leak_config": line_of(r"= config_alloc\(\)"),
        "parse_tokens": line_of(r"= token_alloc\(\)"), "leak_list": line_of(r"= node_alloc\(\)"),
        "main/build_cache": line_of(r"^\s*build_cache\(cache"),
        "main/leak_config": line_of(r"^\s*leak_config\(\);"),
        "main/parse_tokens": line_of(r"= parse_tokens\("),
        "main/leak_list": line_of(r"^\s*leak_list\(10\);"),
    }


def run_tp_sites(name):
    d = os.path.join(TMP, name)
    rc, out, err = run(TFALLOC, "run", "--output", d, "--", TP_SITES, timeout=120)
    eq(rc, 0, f"tfalloc run tp_sites (stderr: {err})")
    rc, out, err = tfalloc("report", "--format", "json", d)
    eq((rc, err), (0, ""), "report --format json")
    doc = json.loads(out)
    eq(len(doc["processes"]), 1, "one process")
    return d, doc["processes"][0]


def build_id_of(path):
    rc, out, err = run("readelf", "-n", path)
    m = re.search(rb"Build ID: ([0-9a-f]+)", out)
    check(m is not None, f"readelf -n {path}: {out!r}")
    return m.group(1).decode()


SITES = {  # leaf: (caller, allocs, total bytes, blocks in use at exit, bytes in use, at peak)
    "cache_alloc": ("build_cache", 64, 262144, 0, 0, 262144),
    "config_alloc": ("leak_config", 1, 1000, 1, 1000, 1000),
    "token_alloc": ("parse_tokens", 1000, 24000, 0, 0, 24),
    "node_alloc": ("leak_list", 10, 480, 10, 480, 0),
}


def case_pprof_run():
    d1, p1 = run_tp_sites("one")
    d2, p2 = run_tp_sites("two")
    lines = site_lines()
    out = os.path.join(TMP, "sites.pb.gz")
    rc, stdout, err = tfalloc("report", "--format", "pprof", "-o", out, d1, d2)
    eq((rc, stdout, err), (0, b"", ""), "exit status, stdout, stderr")
    pp = decode_pprof(out)
    eq(pp.sample_types(), [("alloc_objects", "count"), ("alloc_space", "bytes"),
                           ("inuse_objects", "count"), ("inuse_space", "bytes")], "sample types")
    eq(pp.strings[pp.scalar("default_sample_type")], "inuse_space", "default sample type")
    check(any("of every allocation" in c for c in pp.comments()), "comment: not sampled")
    eq(pp.scalar("time_nanos"), min(p1["start_ns"], p2["start_ns"]), "time_nanos")
    eq(pp.scalar("duration_nanos"),
       max(p1["end_ns"], p2["end_ns"]) - min(p1["start_ns"], p2["start_ns"]), "duration_nanos")
    samples = pp.samples()
    exe_build_id = build_id_of(TP_SITES)
    for proc in (p1, p2):
        dev = proc["devices"][0]
        mine = [s for s in samples if s[0]["pid"] == proc["pid"]]
        check(mine, f"samples of pid {proc['pid']}")
        for lab, _, _, _ in mine:
            eq(lab["device"], "cpu", "device label")
        sums = [sum(v[i] for _, v, _, _ in mine) for i in range(4)]
        eq(sums, [dev["num_allocs"], dev["total_bytes"], dev["num_allocs"] - dev["num_frees"],
                  dev["bytes_in_use"]],
           f"pid {proc['pid']}: sums of alloc_objects, alloc_space, inuse_objects, inuse_space"
           " against the JSON's device")
        eq(sums[3], sum(lk["bytes"] for lk in proc["leaks"]), "inuse_space: the leaks")
        for leaf, (caller, allocs, total, blocks, in_use, _) in SITES.items():
            hit = [s for s in mine if s[2] and s[2][0] and s[2][0][-1][0] == leaf]
            eq(len(hit), 1, f"pid {proc['pid']}: one sample whose leaf is {leaf}")
            _, vals, locs, loc_ids = hit[0]
            eq(vals, [allocs, total, blocks, in_use], f"values of {leaf}")
            top = [loc[-1] for loc in locs[:3]]  # the real function of each location
            for (name, file, line), (wname, wline) in zip(top, [
                    (leaf, lines[leaf]), (caller, lines[caller]),
                    ("main", lines["main/" + caller])]):
                eq((name, os.path.basename(file), line), (wname, "tp_sites.c", wline),
                   f"frame {wname} of the {leaf} site")
            leaf_loc = pp.locations[loc_ids[0]]
            m = pp.mappings[leaf_loc["mapping_id"][0]]
            eq((pp.s(m, "filename"), pp.s(m, "build_id")), (TP_SITES, exe_build_id),
               "mapping of tp_sites: path and build id")
            a = leaf_loc["address"][0]
            check(m["memory_start"][0] <= a < m["memory_limit"][0], "address in its mapping")
    funcs = {pp.function(i)[0]: pp.function(i)[2] for i in pp.functions}
    for name in ("cache_alloc", "config_alloc", "token_alloc", "node_alloc", "main"):
        eq(os.path.basename(funcs.get(name, "")), "tp_sites.c", f"function {name} and its file")
    eq(len(pp.functions), len({pp.function(i) for i in pp.functions}), "functions deduplicated")


def case_folded_run():
    d1, p1 = run_tp_sites("one")
    dev = p1["devices"][0]
    head = f"tp_sites[{p1['pid']}];"

    def by(fig):
        lines = folded_lines(folded("--by", fig, d1))
        for stack in lines:
            check(stack.startswith(head), f"first frame is the process: {stack!r}")
        return lines

    def of(lines, leaf):
        hit = {s: v for s, v in lines.items() if s.endswith(f";main;{SITES[leaf][0]};{leaf}")}
        eq(len(hit), 1, f"one line ending main;{SITES[leaf][0]};{leaf} in {lines}")
        return list(hit.values())[0]

    total = by("total")
    eq(sum(total.values()), dev["total_bytes"], "--by total sums to total_bytes")
    for leaf, fig in SITES.items():
        eq(of(total, leaf), fig[2], f"--by total: {leaf}")
    count = by("count")
    eq(sum(count.values()), dev["num_allocs"], "--by count sums to num_allocs")
    for leaf, fig in SITES.items():
        eq(of(count, leaf), fig[1], f"--by count: {leaf}")
    peak = by("peak")
    eq(sum(peak.values()), dev["peak_bytes_in_use"], "--by peak sums to the peak")
    eq(folded(d1), folded("--by", "peak", d1), "peak is the default")
    for leaf in ("cache_alloc", "config_alloc", "token_alloc"):
        eq(of(peak, leaf), SITES[leaf][5], f"--by peak: {leaf}")
    leaked = by("leaked")
    eq(of(leaked, "config_alloc"), 1000, "leaked: config_alloc")
    eq(of(leaked, "node_alloc"), 480, "leaked: node_alloc")
    # whatever else leaked (the C runtime) is what the JSON's leaks say
    json_leaks = sorted(lk["bytes"] for lk in p1["leaks"])
    eq(sorted(leaked.values()), json_leaks, "--by leaked: the leaks of the JSON")
    eq(sum(leaked.values()), dev["bytes_in_use"], "--by leaked sums to bytes_in_use")
    eq(by("in-use"), leaked, "--by in-use of a complete profile: the leaks")


def case_inline_run():
    """PROGRAM SOURCE are formats_inline and its source."""
    with open(TP_SITES_SRC) as f:
        src = f.read().split("\n")
    line = {k: [i + 1 for i, ln in enumerate(src) if k in ln][0]
            for k in ("LINE_MAKE_BLOCK", "LINE_OUTER", "LINE_MAIN")}
    d, proc = run_tp_sites("inline")
    head = f"{os.path.basename(TP_SITES)[:15]}[{proc['pid']}];"
    leaked = folded_lines(folded("--by", "leaked", d))
    hit = {s: v for s, v in leaked.items() if s.endswith(";main;outer;make_block")}
    eq(list(hit.values()), [77], f"--by leaked: the inlined call is a frame: {leaked}")
    check(list(hit)[0].startswith(head), f"process frame {head!r}")
    out = os.path.join(TMP, "inline.pb.gz")
    eq(tfalloc("report", "--format", "pprof", "-o", out, d)[0], 0, "pprof")
    pp = decode_pprof(out)
    mine = [s for s in pp.samples() if s[2] and s[2][0][0][0] == "make_block"]
    eq(len(mine), 1, "one sample whose leaf is make_block")
    _, vals, locs, loc_ids = mine[0]
    eq(vals, [1, 77, 1, 77], "values")
    leaf = [(name, os.path.basename(file), ln) for name, file, ln in locs[0]]
    eq(leaf, [("make_block", "formats_inline.c", line["LINE_MAKE_BLOCK"]),
              ("outer", "formats_inline.c", line["LINE_OUTER"])],
       "one location, two lines: the inlined call first, then its caller")
    eq([(n, ln) for n, _, ln in locs[1]], [("main", line["LINE_MAIN"])], "main's location")
    m = pp.mappings[pp.locations[loc_ids[0]]["mapping_id"][0]]
    eq(m.get("has_inline_frames"), [True], "the mapping says it has inline frames")


def main():
    global TFALLOC, PROTOC, PROTO, TP_SITES, TP_SITES_SRC, TMP
    args = sys.argv[1:]
    if len(args) not in (4, 6):
        sys.exit("usage: test_formats.py TFALLOC PROTOC PROFILE_PROTO [PROGRAM SOURCE] CASE")
    TFALLOC, PROTOC, PROTO = os.path.abspath(args[0]), args[1], args[2]
    if len(args) == 6:
        TP_SITES, TP_SITES_SRC = os.path.abspath(args[3]), args[4]
    name = args[-1]
    case = globals().get("case_" + name)
    if case is None:
        sys.exit(f"unknown case {name}")
    if name.endswith("_run") and TP_SITES is None:
        sys.exit(f"case {name} needs PROGRAM and SOURCE")
    with tempfile.TemporaryDirectory(prefix="tfa-formats-") as tmp:
        TMP = os.path.realpath(tmp)
        try:
            case()
        except Failure as e:
            print(f"FAIL {name}: {e}")
            sys.exit(1)
    print(f"PASS {name}")


if __name__ == "__main__":
    main()
