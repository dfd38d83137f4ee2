# SPDX-License-Identifier: MIT
"""Tests of `tfalloc report` on hand-made profile files (test/tools/profgen.py).

usage: test_report.py TFALLOC CASE
Each case checks exact output: text lines, JSON values, messages, exit status.
"""

import json
import os
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profgen as pg  # noqa: E402

TFALLOC = None
TMP = None


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def eq(got, want, what="value"):
    if got != want:
        raise Failure(f"{what}:\n--- got ---\n{got!r}\n--- want ---\n{want!r}")


def eq_lines(got, want, what="output"):
    g, w = got.split("\n"), want.split("\n")
    for i, (a, b) in enumerate(zip(g, w)):
        if a != b:
            raise Failure(f"{what}: line {i + 1} differs:\n  got:  {a!r}\n  want: {b!r}\n"
                          f"--- whole output ---\n{got}")
    eq(len(g), len(w), f"{what}: number of lines (output:\n{got})")


def tfalloc(*args):
    p = subprocess.run([TFALLOC, *args], capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8", "replace")


def write(name, data):
    path = os.path.join(TMP, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def report_json(*paths, rc_want=0):
    rc, out, err = tfalloc("report", "--format", "json", *paths)
    eq(rc, rc_want, f"exit status (stderr: {err})")
    return json.loads(out), err


# The profile whose text report is spelled out in full below.
def sample_profile():
    return pg.profile([
        pg.process(pid=4242, ppid=1, start_ns=1700000000_250000000,
                   end_ns=1700000001_750000000, command="prog --n 3"),
        pg.device(num_allocs=10, num_frees=7, num_reallocs=2, bytes_in_use=1536,
                  peak_bytes_in_use=12582912, largest_alloc_size=1048576,
                  total_bytes=20971520, bytes_limit=0, allocated_bytes_in_use=1600,
                  peak_allocated_bytes_in_use=12600000, total_allocated_bytes=21000000,
                  shim_overhead_bytes=2097152),
        pg.leak(1024, 2, allocated=1040, sample=0x5000),
        pg.leak(512, 1, sample=0x6000),
        pg.error(pg.ERR_DOUBLE_FREE, 0xDEAD, count=1, detail="freed twice"),
        pg.error(pg.ERR_INVALID_FREE, 0x1234, count=2),
        pg.error_totals(double=1, invalid=2),
    ])


def sample_text(path):
    return f"""process 4242 (parent 1): prog --n 3
  executable: /usr/bin/prog
  profile:    {path}
  started:    2023-11-14 22:13:20 UTC, ran 1.500 s
  ended:      exited with status 0
  device cpu, allocator jemalloc:
    allocations:     10 (7 frees, 2 reallocs)
    in use:          1.5 KiB (1536 bytes) requested, 1600 bytes allocated
    peak in use:     12.0 MiB (12582912 bytes) requested, 12600000 bytes allocated
    total allocated: 20.0 MiB (20971520 bytes) requested, 21000000 bytes allocated
    largest block:   1.0 MiB (1048576 bytes)
    limit:           none
    shim overhead:   2.0 MiB (2097152 bytes)
  leaks: 1.5 KiB (1536 bytes) in 3 blocks, 2 groups by stack, largest first
    1.0 KiB (1024 bytes) in 2 blocks (unclassified, cpu, e.g. 0x5000)
      (no stack recorded)
    512 bytes in 1 block (unclassified, cpu, e.g. 0x6000)
      (no stack recorded)
  errors: 3 (1 double free, 2 invalid frees)
    double free of 0xdead (1 time): freed twice
      (no stack recorded)
    invalid free of 0x1234 (2 times)
      (no stack recorded)
"""


def case_text_single():
    path = write("one.prof", sample_profile())
    rc, out, err = tfalloc("report", path)
    eq(rc, 0, "exit status")
    eq(err, "", "stderr")
    eq_lines(out, sample_text(path))
    # text is the default, and can be asked for
    rc, out2, err = tfalloc("report", "--format=text", path)
    eq((rc, out2), (0, out), "--format=text")


def case_json_single():
    path = write("one.prof", sample_profile())
    doc, err = report_json(path)
    eq(err, "", "stderr")
    eq(list(doc.keys()), ["processes", "stack_table", "frames", "unreadable", "symbols"], "top-level keys")
    # Every stack once, in the table, as indices into frames; an unknown stack is the empty list.
    eq((doc["stack_table"], doc["frames"]), ([[]], []), "stack_table and frames")
    eq(doc["unreadable"], [], "unreadable")
    eq(doc["symbols"], [], "symbols: every file served its frames")
    eq(len(doc["processes"]), 1, "processes")
    p = doc["processes"][0]
    want = {
        "pid": 4242, "ppid": 1, "command": "prog --n 3", "exe": "/usr/bin/prog", "comm": "prog",
        "file": path, "complete": True, "end_reason": "exit", "exit_code": 0,
        "forked": False, "degraded": False, "stacks_lost": False, "flags": 0,
        "start_time": 1700000000.25, "duration": 1.5,
        "start_ns": 1700000000_250000000, "end_ns": 1700000001_750000000,
        "tfalloc_version": "0.1.0", "format_version": 1,
        "devices": [{
            "device": "cpu", "allocator": "jemalloc", "num_allocs": 10, "num_frees": 7,
            "num_reallocs": 2, "bytes_in_use": 1536, "peak_bytes_in_use": 12582912,
            "largest_alloc_size": 1048576, "total_bytes": 20971520, "bytes_limit": 0,
            "allocated_bytes_in_use": 1600, "peak_allocated_bytes_in_use": 12600000,
            "total_allocated_bytes": 21000000, "shim_overhead_bytes": 2097152,
        }],
        "leaks": [
            {"device": "cpu", "kind": "unclassified", "bytes": 1024, "blocks": 2,
             "allocated_bytes": 1040, "sample_address": "0x5000", "resource": None, "resource_id": 0,
             "stack_id": 0, "stack": 0},
            {"device": "cpu", "kind": "unclassified", "bytes": 512, "blocks": 1,
             "allocated_bytes": 512, "sample_address": "0x6000", "resource": None, "resource_id": 0,
             "stack_id": 0, "stack": 0},
        ],
        "errors": [
            {"kind": "double_free", "address": "0xdead", "count": 1, "detail": "freed twice",
             "stack_id": 0, "alloc_stack_id": 0, "stack": 0, "alloc_stack": 0},
            {"kind": "invalid_free", "address": "0x1234", "count": 2, "detail": "",
             "stack_id": 0, "alloc_stack_id": 0, "stack": 0, "alloc_stack": 0},
        ],
        "error_totals": {"double_free": 1, "invalid_free": 2, "mismatched_free": 0,
                         "not_recorded": 0},
        # A profile without a CONFIG record (tfalloc before stacks): no stacks, no sites.
        "stacks": {"mode": "none", "depth": 0, "sample_bytes": 0, "distinct": 0, "max_stacks": 0,
                   "truncated_allocations": 0, "table_bytes": 0},
        "pointer_table_bytes": 0,
        "tracking": "all",
        "sites": [],
        "timeline": [],
        "device_timelines": [],
        "resources": [],
        "cleanups": [],
    }
    for k in want:
        eq(p.get(k), want[k], f"key {k}")
    eq(set(p.keys()), set(want.keys()), "keys of a process")
    # the exact decimal text of the times, not only their float value
    rc, out, _ = tfalloc("report", "--format", "json", path)
    check('"start_time": 1700000000.250000000,' in out, "start_time printed exactly")
    check('"duration": 1.500000000,' in out, "duration printed exactly")


def case_json_escaping():
    nasty = (b'say "hi"\\ \n\t\r\x01\x1f\x7f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80'
             b' bad:\xff\xfe over:\xc0\x80 surr:\xed\xa0\x80 cut:\xe2\x82')
    big = 2**64 - 1
    path = write("esc.prof", pg.profile([
        pg.process(pid=2**32 - 1, ppid=0, command=nasty, exe="/x\"y", comm="c\\",
                   exit_code=-1, flags=pg.FLAG_FORKED | pg.FLAG_DEGRADED),
        pg.device(name="cpu", allocator="a\x02b", values=[big] * 12),
        pg.leak(big, big, allocated=big, sample=big, kind=pg.LEAK_DEFINITE, stack_id=9),
        pg.error(pg.ERR_MISMATCHED_FREE, big, count=big, detail=b"\xff\n"),
        pg.error(77, 1),
    ]))
    rc, out, err = tfalloc("report", "--format", "json", path)
    eq(rc, 0, "exit status")
    raw = out.encode("utf-8")  # the output decoded as UTF-8: it is valid
    check(b"\\u0001" in raw and b"\\u001f" in raw and b"\\u007f" in raw, "control characters as \\u00XX")
    check(b'say \\"hi\\"\\\\ \\n\\t\\r' in raw, "short escapes")
    doc = json.loads(out)
    p = doc["processes"][0]
    eq(p["command"], 'say "hi"\\ \n\t\r\x01\x1f\x7f café € 😀 bad:\ufffd\ufffd over:\ufffd\ufffd'
       ' surr:\ufffd\ufffd\ufffd cut:\ufffd\ufffd', "command")
    eq(p["exe"], '/x"y', "exe")
    eq(p["comm"], "c\\", "comm")
    eq(p["pid"], 2**32 - 1, "pid")
    eq(p["exit_code"], -1, "exit_code is signed")
    eq((p["forked"], p["degraded"], p["flags"]), (True, True, 3), "flags")
    eq(p["devices"][0]["allocator"], "a\x02b", "allocator")
    for k in pg.DEVICE_FIELDS:
        eq(p["devices"][0][k], big, f"device {k} (uint64 exact)")
    eq(p["leaks"][0]["bytes"], big, "leak bytes")
    eq(p["leaks"][0]["blocks"], big, "leak blocks")
    eq(p["leaks"][0]["sample_address"], "0xffffffffffffffff", "leak sample")
    eq((p["leaks"][0]["kind"], p["leaks"][0]["stack_id"]), ("definite", 9), "leak kind")
    eq(p["errors"][0]["kind"], "mismatched_free", "error kind")
    eq(p["errors"][0]["count"], big, "error count")
    eq(p["errors"][0]["detail"], "\ufffd\n", "error detail")
    eq(p["errors"][1]["kind"], "unknown", "unknown error kind")
    # without a totals record, the totals are the sum of the rows' counts
    eq(p["error_totals"], {"double_free": 0, "invalid_free": 0, "mismatched_free": big,
                           "not_recorded": 0}, "error totals from rows")
    # the text report shows control characters escaped, on one line per field
    rc, out, err = tfalloc("report", path)
    eq(rc, 0, "text exit status")
    first = out.split("\n")[0]
    eq(first, 'process 4294967295 (parent 0): say "hi"\\ \\x0a\\x09\\x0d\\x01\\x1f\\x7f café € 😀'
       ' bad:\\xff\\xfe over:\\xc0\\x80 surr:\\xed\\xa0\\x80 cut:\\xe2\\x82', "text command line")
    check("  note:       a fork child: it inherited its parent's heap" in out, "forked note")


def case_directory_order():
    d = os.path.join(TMP, "run")
    write("run/a.prof", pg.profile([pg.process(pid=30, start_ns=5, command="third")]))
    write("run/b.prof", pg.profile([pg.process(pid=10, start_ns=200, command="second")]))
    write("run/c.prof", pg.profile([pg.process(pid=10, start_ns=100, command="first")]))
    write("run/notes.txt", b"not a profile, not read")
    write("run/prof", b"no .prof suffix, not read")
    doc, err = report_json(d)
    eq(err, "", "stderr")
    eq([p["command"] for p in doc["processes"]], ["first", "second", "third"], "order")
    eq([p["file"] for p in doc["processes"]],
       [os.path.join(d, n) for n in ("c.prof", "b.prof", "a.prof")], "files")
    # a trailing slash changes nothing
    doc2, _ = report_json(d + "/")
    eq(doc2, doc, "directory with a trailing slash")
    # several paths: each in command-line order
    single = write("single.prof", pg.profile([pg.process(pid=1, command="single")]))
    doc3, _ = report_json(d, single)
    eq([p["command"] for p in doc3["processes"]], ["first", "second", "third", "single"],
       "paths in order")


def case_user_dirs():
    """The profiles of programs started after their process changed its user
    are in the directory's uid-N (core/handoff.h): read with the directory's
    own, in path order and then by pid; other subdirectories, a uid-N that is
    a symlink, and what is not a regular file in a uid-N are passed over."""
    d = os.path.join(TMP, "run")
    write("run/tfalloc.a.5.prof", pg.profile([pg.process(pid=5, start_ns=1, command="root's")]))
    write("run/uid-65534/tfalloc.b.5.prof", pg.profile([pg.process(pid=5, start_ns=2, command="nobody's")]))
    write("run/uid-1000/tfalloc.c.7.prof", pg.profile([pg.process(pid=7, start_ns=3, command="user's")]))
    write("run/other/tfalloc.d.8.prof", pg.profile([pg.process(pid=8, command="not read")]))
    write("run/uid-x/tfalloc.e.9.prof", pg.profile([pg.process(pid=9, command="not read")]))
    write("elsewhere/tfalloc.f.10.prof", pg.profile([pg.process(pid=10, command="not read")]))
    os.symlink(os.path.join(TMP, "elsewhere"), os.path.join(d, "uid-42"))
    os.symlink(os.path.join(TMP, "elsewhere", "tfalloc.f.10.prof"), os.path.join(d, "uid-1000", "link.prof"))
    os.mkdir(os.path.join(d, "uid-1000", "dir.prof"))
    doc, err = report_json(d)
    eq(err, "", "stderr")
    eq([p["command"] for p in doc["processes"]], ["root's", "nobody's", "user's"], "processes")
    eq([p["file"] for p in doc["processes"]],
       [os.path.join(d, "tfalloc.a.5.prof"), os.path.join(d, "uid-65534", "tfalloc.b.5.prof"),
        os.path.join(d, "uid-1000", "tfalloc.c.7.prof")], "files")
    # Only uid-N's: a directory with none but them is read all the same.
    only = os.path.join(TMP, "only")
    write("only/uid-65534/tfalloc.g.11.prof", pg.profile([pg.process(pid=11, command="only")]))
    doc, err = report_json(only)
    eq([p["command"] for p in doc["processes"]], ["only"], "a directory with uid-N's profiles only")
    # An unreadable uid-N is passed over (root reads any).
    if os.geteuid() != 0:
        os.chmod(os.path.join(d, "uid-1000"), 0)
        doc, err = report_json(d)
        eq([p["command"] for p in doc["processes"]], ["root's", "nobody's"], "an unreadable uid-N")


def case_several_text():
    d = os.path.join(TMP, "two")
    write("two/1.prof", pg.profile([
        pg.process(pid=1, ppid=0, command="parent", end_ns=1700000000_000000000 + 2_000_000),
        pg.device(num_allocs=3, bytes_in_use=100),
        pg.leak(100, 1, sample=0x10),
    ]))
    write("two/2.prof", pg.profile([
        pg.process(pid=2, ppid=1, command="child", flags=pg.FLAG_FORKED, end_reason=pg.END_EXEC),
        pg.device(allocator="glibc", num_allocs=4, bytes_limit=1 << 30),
        pg.error_totals(double=1),
        pg.error(pg.ERR_DOUBLE_FREE, 0x42, detail=""),
    ]))
    rc, out, err = tfalloc("report", d)
    eq((rc, err), (0, ""), "status and stderr")
    p1, p2 = os.path.join(d, "1.prof"), os.path.join(d, "2.prof")
    # First one line per process; "lost" counts definitely and indirectly lost bytes only.
    eq_lines(out, f"""2 processes (1 forked, 1 image replaced by exec); lost: definitely and indirectly lost bytes
     pid     ppid ended           peak  allocations      lost    leaked  command
       1        0 exit 0             0            3         0       100  parent
       2        1 exec               0            4         0         0  child

process 1 (parent 0): parent
  executable: /usr/bin/prog
  profile:    {p1}
  started:    2023-11-14 22:13:20 UTC, ran 0.002 s
  ended:      exited with status 0
  device cpu, allocator jemalloc:
    allocations:     3 (0 frees, 0 reallocs)
    in use:          100 bytes requested, 0 bytes allocated
    peak in use:     0 bytes requested, 0 bytes allocated
    total allocated: 0 bytes requested, 0 bytes allocated
    largest block:   0 bytes
    limit:           none
    shim overhead:   0 bytes
  leaks: 100 bytes in 1 block, 1 group by stack, largest first
    100 bytes in 1 block (unclassified, cpu, e.g. 0x10)
      (no stack recorded)
  errors: none

process 2 (parent 1): child
  executable: /usr/bin/prog
  profile:    {p2}
  started:    2023-11-14 22:13:20 UTC, ran 1.000 s
  ended:      replaced its image by exec
  note:       a fork child: it inherited its parent's heap
  device cpu, allocator glibc:
    allocations:     4 (0 frees, 0 reallocs)
    in use:          0 bytes requested, 0 bytes allocated
    peak in use:     0 bytes requested, 0 bytes allocated
    total allocated: 0 bytes requested, 0 bytes allocated
    largest block:   0 bytes
    limit:           1.0 GiB (1073741824 bytes)
    shim overhead:   0 bytes
  leaks: none
  errors: 1 (1 double free)
    double free of 0x42 (1 time)
      (no stack recorded)

total: 2 processes, 7 allocations, 100 bytes leaked in 1 block, 1 error
""")


def case_snapshot_and_signal():
    snap = write("snap.prof", pg.profile([
        pg.process(pid=7, end_ns=0, end_reason=pg.END_RUNNING, flags=pg.FLAG_DEGRADED),
        pg.leak(10, 1),
    ], complete=0))
    sig = write("sig.prof", pg.profile([
        pg.process(pid=8, end_reason=pg.END_SIGNAL, exit_code=11),
        pg.error_totals(double=2, not_recorded=2),
    ]))
    doc, err = report_json(snap, sig)
    eq(err, "", "stderr")
    a, b = doc["processes"]
    eq((a["complete"], a["end_reason"], a["duration"], a["degraded"]),
       (False, "running", None, True), "snapshot")
    eq((b["complete"], b["end_reason"], b["exit_code"]), (True, "signal", 11), "signal")
    eq(b["error_totals"], {"double_free": 2, "invalid_free": 0, "mismatched_free": 0,
                           "not_recorded": 2}, "totals")
    rc, out, err = tfalloc("report", snap, sig)
    eq(rc, 0, "text status")
    lines = out.split("\n")
    for want in ["  started:    2023-11-14 22:13:20 UTC",
                 "  ended:      not seen: this is a snapshot, written while the process ran; a process "
                 "killed by SIGKILL leaves its last periodic snapshot",
                 "  note:       a snapshot: the figures are those of the moment it was written",
                 "  note:       the shim ran out of memory and stopped recording: figures are partial",
                 "  live at snapshot: 10 bytes in 1 block, 1 group by stack, largest first",
                 "  ended:      killed by signal 11 (SIGSEGV)",
                 "  errors: 2 (2 double frees)",
                 "    (2 more not recorded)",
                 "total: 2 processes, 0 allocations, 10 bytes leaked in 1 block, 2 errors"]:
        check(want in lines, f"line {want!r} in:\n{out}")


def case_forward_compatible():
    data = (pg.header(size=20) + b"\0\0\0\0"
            + pg.record(200, b"a record of a later format")
            + pg.process(pid=5)
            + pg.device(values=[1, 2])
            + pg.device(name="cuda:0", values=list(range(100, 120)))
            + pg.end(4))
    path = write("future.prof", data)
    doc, err = report_json(path)
    eq(err, "", "stderr")
    devs = doc["processes"][0]["devices"]
    eq([devs[0][k] for k in pg.DEVICE_FIELDS], [1, 2] + [0] * 10, "fewer counts")
    eq([devs[1][k] for k in pg.DEVICE_FIELDS], list(range(100, 112)), "more counts")
    # A figure added later is shown only by files that have it: a 0 would claim it.
    eq("peak_blocks_in_use" in devs[0], False, "fewer counts: peak_blocks_in_use shown")
    eq(devs[1].get("peak_blocks_in_use"), 112, "more counts: peak_blocks_in_use")
    rc, out, err = tfalloc("report", path)
    eq(rc, 0, "text status")
    blocks = [l for l in out.split("\n") if "peak blocks:" in l]
    eq(blocks, ["    peak blocks:     112 live at once"], "text: peak blocks of the device that has them")


def corrupt_set():
    good = pg.profile([pg.process(pid=1, command="good")])
    body = pg.process(pid=2)
    files = {}
    files["a-good.prof"] = good
    files["b-trunc.prof"] = good[:30]
    crc = bytearray(good)
    crc[16 + 8] ^= 0xFF
    files["c-crc.prof"] = bytes(crc)
    files["d-text.prof"] = b"hello, world, this is not it\n"
    files["e-cut.prof"] = pg.header() + body
    files["f-version.prof"] = pg.header(version=9) + body
    files["g-empty.prof"] = b""
    files["h-dup.prof"] = pg.profile([body, body])
    return good, body, files


def case_corrupt_files():
    good, body, files = corrupt_set()
    d = os.path.join(TMP, "bad")
    for name, data in files.items():
        write("bad/" + name, data)
    plen = int.from_bytes(good[20:24], "little")  # of the good file's process record
    crc_was = int.from_bytes(good[24 + plen:28 + plen], "little")
    crc_computed = zlib.crc32(files["c-crc.prof"][16:24 + plen])
    p = lambda n: os.path.join(d, n)  # noqa: E731
    want_err = [
        f"tfalloc: report: {p('b-trunc.prof')}: truncated: record at offset 16 needs {plen + 12} bytes, 14 present",
        f"tfalloc: report: {p('c-crc.prof')}: offset 16: checksum mismatch in process record (type 1): "
        f"stored 0x{crc_was:08x}, computed 0x{crc_computed:08x}",
        f"tfalloc: report: {p('d-text.prof')}: not a tfalloc profile (bad magic)",
        f"tfalloc: report: {p('e-cut.prof')}: cut short: no end record (after 1 records, {16 + len(body)} bytes)",
        f"tfalloc: report: {p('f-version.prof')}: unsupported format version 9 (this reader knows versions 1 to 2)",
        f"tfalloc: report: {p('g-empty.prof')}: empty file: not a tfalloc profile",
        f"tfalloc: report: {p('h-dup.prof')}: offset {16 + len(body)}: duplicate process record",
        "tfalloc: report: /nonexistent/x.prof: No such file or directory",
    ]
    doc, err = report_json(d, "/nonexistent/x.prof", rc_want=1)
    eq_lines(err, "\n".join(want_err) + "\n", "stderr")
    eq([x["command"] for x in doc["processes"]], ["good"], "the good file is still reported")
    eq(doc["unreadable"], [e[len("tfalloc: report: "):] for e in want_err], "unreadable")
    # text too: the good one is reported, status 1
    rc, out, err2 = tfalloc("report", d, "/nonexistent/x.prof")
    eq(rc, 1, "text exit status")
    eq(err2, err, "text stderr")
    check(out.startswith("process 1 (parent 1): good\n"), f"text output: {out!r}")
    # only bad files: status 1, an empty list
    doc, err = report_json(p("d-text.prof"), rc_want=1)
    eq(doc["processes"], [], "no processes")


def case_empty_dir():
    d = os.path.join(TMP, "empty")
    os.makedirs(d)
    rc, out, err = tfalloc("report", d)
    eq(rc, 1, "exit status")
    eq(err, f"tfalloc: report: {d}: no profile files (*.prof) in this directory\n", "stderr")
    eq(out, "", "stdout")


def case_usage():
    rc, out, err = tfalloc("report")
    eq((rc, out), (2, ""), "no path")
    eq(err, "tfalloc: report: no profile file or directory given (see 'tfalloc report --help')\n",
       "no path message")
    rc, out, err = tfalloc("report", "--format", "xml", "x.prof")
    eq(rc, 2, "bad format")
    eq(err, "tfalloc: report: unknown format 'xml' (text, json, folded, pprof or html) (see 'tfalloc report --help')\n",
       "bad format message")
    rc, out, err = tfalloc("report", "--bogus", "x.prof")
    eq(rc, 2, "unknown option")
    eq(err, "tfalloc: report: unknown option '--bogus' (see 'tfalloc report --help')\n",
       "unknown option message")
    rc, out, err = tfalloc("report", "x.prof", "--format")
    eq(rc, 2, "missing value")
    eq(err, "tfalloc: report: option --format needs a value (see 'tfalloc report --help')\n",
       "missing value message")
    rc, out, err = tfalloc("report", "--help")
    eq((rc, err), (0, ""), "--help")
    check(out.startswith("usage: tfalloc report "), "--help text")
    rc, out, err = tfalloc("help", "report")
    eq((rc, out.startswith("usage: tfalloc report ")), (0, True), "tfalloc help report")
    rc, out, err = tfalloc("--version")
    check(rc == 0 and out.startswith("tfalloc ") and out.endswith("\n"), "--version")
    rc, out, err = tfalloc()
    eq(rc, 2, "no command")
    rc, out, err = tfalloc("frobnicate")
    eq((rc, err), (2, "tfalloc: unknown command 'frobnicate' (see 'tfalloc help')\n"), "bad command")
    # a file named like an option, after --
    path = write("-dash.prof", pg.profile([pg.process(pid=3)]))
    os.chdir(TMP)
    rc, out, err = tfalloc("report", "--format=json", "--", "-dash.prof")
    eq((rc, err), (0, ""), "path after --")
    eq(json.loads(out)["processes"][0]["file"], path, "file after --")


def case_output_file():
    path = write("one.prof", sample_profile())
    out_path = os.path.join(TMP, "report.json")
    rc, out, err = tfalloc("report", "--format=json", "-o", out_path, path)
    eq((rc, out, err), (0, "", ""), "status, stdout, stderr")
    with open(out_path) as f:
        doc = json.load(f)
    eq(doc["processes"][0]["pid"], 4242, "pid in the file")
    rc, out, err = tfalloc("report", f"--output={out_path}", path)
    eq((rc, out), (0, ""), "text to a file")
    with open(out_path) as f:
        eq_lines(f.read(), sample_text(path), "text in the file")
    rc, out, err = tfalloc("report", "-o", "/nonexistent/dir/r.txt", path)
    eq(rc, 1, "unwritable output")
    eq(err, "tfalloc: report: /nonexistent/dir/r.txt: No such file or directory\n", "message")


def main():
    global TFALLOC, TMP
    if len(sys.argv) != 3:
        sys.exit("usage: test_report.py TFALLOC CASE")
    TFALLOC = os.path.abspath(sys.argv[1])
    case = globals().get("case_" + sys.argv[2])
    if case is None:
        sys.exit(f"unknown case {sys.argv[2]}")
    with tempfile.TemporaryDirectory(prefix="tfa-report-") as tmp:
        TMP = os.path.realpath(tmp)
        try:
            case()
        except Failure as e:
            print(f"FAIL {sys.argv[2]}: {e}")
            sys.exit(1)
    print(f"PASS {sys.argv[2]}")


if __name__ == "__main__":
    main()
