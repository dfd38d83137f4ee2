# SPDX-License-Identifier: MIT
"""Real, unmodified programs from Debian under the shim.

For each: the same stdout and exit status with and without the shim, and a
consistent report (tfa_test.check_consistent): num_allocs > 0, peak >= in
use, in use at exit == the sum of the leaks' bytes, num_allocs - num_frees
== the sum of the leaks' blocks, no memory errors, the allocator asked for.

  python3         /usr/bin/python3 -c a script doing real work (json, re,
                  hashlib, collections, fractions, heapq, classes)
  python3_malloc  the same with PYTHONMALLOC=malloc (every object through malloc)
  python3_threads python3 with 4 threads building and freeing objects
                  (PYTHONMALLOC=malloc: every object through the shim, from
                  several threads)
  sqlite3         the sqlite3 CLI on a file database: a table, 5000 inserted
                  rows, an index, joins, a recursive CTE, updates, VACUUM
  cmake           cmake -P a script (C++: lists, strings, regex, JSON, files)
  cmake_project   cmake configuring (header, symbol, compile and run checks) and
                  building a C project under tfalloc run with its summary lines on
  sort            sort --parallel=2 -S 64M on a 200000-line file (it sorts in a
                  second thread; a smaller buffer would make it single-threaded)
  xz              xz -T2 compressing 3 MB in blocks (worker threads, large buffers)
  python3_deepbind python3 importing C extensions with RTLD_DEEPBIND (sqlite3,
                  decimal, hashlib's libcrypto, bz2, lzma, expat, ssl): their
                  libraries' own malloc calls are seen, about as many as with
                  the default flags (without binding them to the shim, 4% were)
  links_jemalloc  tp_links_jemalloc, linked with -ljemalloc and calling its
                  mallocx/rallocx/dallocx/mallctl besides malloc: exact counts of
                  the malloc family
"""
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

PY_SCRIPT = r'''
import collections, decimal, fractions, gc, hashlib, heapq, json, random, re
random.seed(12345)
words = ["".join(random.choice("abcdefghij") for _ in range(random.randint(3, 10))) for _ in range(40000)]
c = collections.Counter(words)
print(len(c), c.most_common(3))
data = [{"id": i, "w": w, "v": [i, i * i, str(i)]} for i, w in enumerate(words[:20000])]
s = json.dumps(data, sort_keys=True)
print(len(s), hashlib.sha256(s.encode()).hexdigest())
back = json.loads(s)
print(sum(d["id"] for d in back), back[123]["w"])
pat = re.compile(r"([a-e]+)([f-j]+)")
print(sum(1 for w in words if pat.fullmatch(w)))
print(sorted(words, key=lambda w: (len(w), w))[:5])
h = []
for i in range(50000):
    heapq.heappush(h, (i * 7919) % 100003)
print([heapq.heappop(h) for _ in range(5)])
f = sum(fractions.Fraction(1, k) for k in range(1, 300))
print(f.numerator % 1000003, f.denominator % 1000003)
decimal.getcontext().prec = 50
print(decimal.Decimal(1) / decimal.Decimal(7))
class Node:
    def __init__(self, v, kids):
        self.v, self.kids = v, kids
def tree(d):
    return Node(d, [tree(d - 1) for _ in range(3)] if d else [])
def total(n):
    return n.v + sum(total(k) for k in n.kids)
t = tree(8)
print(total(t))
cyc = []
for i in range(2000):
    a = {"i": i}
    a["self"] = a
    cyc.append(a)
del cyc, t
gc.collect()
print(gc.isenabled())
print("".join(sorted(set("".join(words))))[:20], len(" ".join(words).split()))
'''


def real(ctx, argv, stdin=None, env=None, multithreaded=False, argv_shim=None, check_plain=True,
         threads_at_exit=False):
    plain = ctx.run_plain(argv, stdin=stdin, env=env)
    if check_plain:
        T.check(plain.returncode == 0, "%s fails without the shim\n%s" % (argv[0], plain.describe()))
    r, rep = ctx.run_and_report(argv_shim or argv, stdin=stdin, env=env, what=argv[0],
                                expect_status=plain.returncode)
    T.same_output(plain, r, argv[0])
    procs = rep["processes"]
    T.check(len(procs) >= 1, "no profile for " + argv[0])
    root = [p for p in procs if p.get("ppid") == r.pid]
    T.check(len(root) == 1, "expected one profile of %s (child of tfalloc run %d), got:\n%s"
            % (argv[0], r.pid, T.summary(procs)))
    proc = root[0]
    T.check_exited(proc, plain.returncode)
    T.check_consistent(proc, multithreaded=multithreaded, allocator=ctx.allocator,
                       threads_at_exit=threads_at_exit)
    for p in procs:
        if p is not proc:
            T.check(p.get("complete") is True, "incomplete profile:\n" + T.summary([p]))
            if p.get("end_reason") == "exit":
                T.check_consistent(p, require_allocs=False, allocator=ctx.allocator)
    return proc, r


def case_python3(ctx):
    real(ctx, ["/usr/bin/python3", "-s", "-c", PY_SCRIPT], env={"PYTHONHASHSEED": "0"})


def case_python3_malloc(ctx):
    proc, _ = real(ctx, ["/usr/bin/python3", "-s", "-c", PY_SCRIPT],
                   env={"PYTHONHASHSEED": "0", "PYTHONMALLOC": "malloc"})
    # Every Python object is a malloc now: hundreds of thousands at least.
    T.check_ge(T.device(proc)["num_allocs"], 200000, "python3 with PYTHONMALLOC=malloc: num_allocs")


PY_THREADS = r'''
import threading, hashlib, json
results = [None] * 4
def work(k):
    d = {}
    for i in range(30000):
        d["k%d-%d" % (k, i)] = [i, str(i) * (i % 5), {"x": i}]
    s = json.dumps(sorted(d)[:1000])
    results[k] = (len(d), hashlib.md5(s.encode()).hexdigest())
    d.clear()
threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for r in results:
    print(*r)
'''


def case_python3_threads(ctx):
    # Python's threads are detached: join() returns when the Python code is
    # done, the thread itself may still be freeing while the process exits.
    real(ctx, ["/usr/bin/python3", "-s", "-c", PY_THREADS], multithreaded=True, threads_at_exit=True,
         env={"PYTHONHASHSEED": "0", "PYTHONMALLOC": "malloc"})


def sql_workload():
    rnd = random.Random(7)
    out = ["CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, grp INTEGER, v REAL);", "BEGIN;"]
    for i in range(5000):
        out.append("INSERT INTO t(name, grp, v) VALUES('name-%d-%s', %d, %d.%02d);"
                   % (i, "".join(rnd.choice("xyzw") for _ in range(rnd.randint(1, 12))),
                      rnd.randint(0, 40), rnd.randint(0, 99), rnd.randint(0, 99)))
    out.append("COMMIT;")
    out.append("""
CREATE INDEX t_grp ON t(grp);
SELECT count(*), sum(grp), round(sum(v), 2) FROM t;
SELECT grp, count(*), round(avg(v), 3) FROM t GROUP BY grp ORDER BY grp;
SELECT name FROM t WHERE grp = 7 ORDER BY v DESC, id LIMIT 5;
CREATE TABLE g(grp INTEGER PRIMARY KEY, label TEXT);
INSERT INTO g SELECT DISTINCT grp, 'group ' || grp FROM t;
SELECT g.label, count(*) FROM t JOIN g USING(grp) WHERE t.v > 50 GROUP BY g.label ORDER BY 2 DESC, 1 LIMIT 5;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000) SELECT sum(x), count(*) FROM c;
UPDATE t SET v = v * 2 WHERE grp % 3 = 0;
DELETE FROM t WHERE id % 10 = 0;
SELECT count(*), round(sum(v), 2) FROM t;
SELECT group_concat(name, ',') FROM (SELECT name FROM t ORDER BY id LIMIT 20);
SELECT upper(name), length(name), substr(name, 3, 4) FROM t WHERE name LIKE '%xyz%' ORDER BY id LIMIT 10;
VACUUM;
PRAGMA integrity_check;
""")
    return "\n".join(out) + "\n"


def case_sqlite3(ctx):
    sql = sql_workload()
    db_plain = os.path.join(ctx.scratch, "plain.db")
    db_shim = os.path.join(ctx.scratch, "shim.db")
    real(ctx, ["/usr/bin/sqlite3", "-batch", "-bail", db_plain], stdin=sql,
         argv_shim=["/usr/bin/sqlite3", "-batch", "-bail", db_shim])


CMAKE_SCRIPT = r'''
set(items "")
foreach(i RANGE 1 4000)
  math(EXPR v "(${i} * 7919) % 10007")
  list(APPEND items "item-${v}")
endforeach()
list(SORT items)
list(REMOVE_DUPLICATES items)
list(LENGTH items n)
message(STATUS "items ${n}")
list(GET items 0 1 2 first)
message(STATUS "first ${first}")
string(JOIN "," joined ${items})
string(LENGTH "${joined}" len)
string(SHA256 h "${joined}")
message(STATUS "joined ${len} ${h}")
string(REGEX MATCHALL "item-1[0-9]+" m "${joined}")
list(LENGTH m mn)
message(STATUS "matches ${mn}")
string(REPLACE "item-" "I" short "${joined}")
string(MD5 h2 "${short}")
message(STATUS "replaced ${h2}")
file(WRITE "${OUT}/a.txt" "${joined}")
file(READ "${OUT}/a.txt" back)
if(back STREQUAL joined)
  message(STATUS "roundtrip ok")
endif()
set(json "{\"a\": [1, 2, 3], \"b\": {\"c\": \"d\"}}")
string(JSON c GET "${json}" b c)
string(JSON l LENGTH "${json}" a)
string(JSON json SET "${json}" e "[\"x\", \"y\"]")
message(STATUS "json ${c} ${l} ${json}")
function(fib n out)
  if(n LESS 2)
    set(${out} ${n} PARENT_SCOPE)
  else()
    math(EXPR a "${n} - 1")
    math(EXPR b "${n} - 2")
    fib(${a} ra)
    fib(${b} rb)
    math(EXPR r "${ra} + ${rb}")
    set(${out} ${r} PARENT_SCOPE)
  endif()
endfunction()
fib(15 f)
message(STATUS "fib ${f}")
'''


def case_cmake(ctx):
    script = os.path.join(ctx.scratch, "work.cmake")
    with open(script, "w") as f:
        f.write(CMAKE_SCRIPT)
    d1, d2 = ctx.mkdtemp("cmake-plain"), ctx.mkdtemp("cmake-shim")
    real(ctx, ["/usr/bin/cmake", "-DOUT=" + d1, "-P", script],
         argv_shim=["/usr/bin/cmake", "-DOUT=" + d2, "-P", script])


CMAKE_PROJECT = r'''
cmake_minimum_required(VERSION 3.13)
project(probe C)
include(CheckIncludeFile)
include(CheckSymbolExists)
include(CheckCSourceCompiles)
include(CheckCSourceRuns)
check_include_file(sys/mman.h HAVE_SYS_MMAN_H)
check_include_file(no/such_header.h HAVE_NO_SUCH_HEADER_H)
check_symbol_exists(posix_memalign stdlib.h HAVE_POSIX_MEMALIGN)
check_c_source_compiles("int main(void) { return __builtin_popcount(7) - 3; }" HAVE_POPCOUNT)
check_c_source_runs("#include <stdlib.h>
int main(void) { void *p = malloc(64); free(p); return p == 0; }" MALLOC_RUNS)
configure_file(${CMAKE_SOURCE_DIR}/config.h.in ${CMAKE_BINARY_DIR}/config.h)
add_executable(probe probe.c)
target_include_directories(probe PRIVATE ${CMAKE_BINARY_DIR})
'''

CONFIG_H_IN = """#cmakedefine HAVE_SYS_MMAN_H 1
#cmakedefine HAVE_NO_SUCH_HEADER_H 1
#cmakedefine HAVE_POSIX_MEMALIGN 1
#cmakedefine HAVE_POPCOUNT 1
#cmakedefine MALLOC_RUNS 1
"""

PROBE_C = r'''#include <stdio.h>
#include "config.h"
int main(void)
{
#ifdef HAVE_SYS_MMAN_H
	puts("sys/mman.h");
#endif
#ifdef HAVE_NO_SUCH_HEADER_H
	puts("no/such_header.h");
#endif
#ifdef HAVE_POSIX_MEMALIGN
	puts("posix_memalign");
#endif
#ifdef HAVE_POPCOUNT
	puts("popcount");
#endif
#ifdef MALLOC_RUNS
	puts("malloc runs");
#endif
	return 0;
}
'''


def case_cmake_project(ctx):
    """cmake configuring and building a project under tfalloc run, with the summaries on: it reads its
    checks' compiler output with their stderr, and failed on a summary line there."""
    src = ctx.mkdtemp("cmake-src")
    for name, text in (("CMakeLists.txt", CMAKE_PROJECT), ("config.h.in", CONFIG_H_IN), ("probe.c", PROBE_C)):
        with open(os.path.join(src, name), "w") as f:
            f.write(text)
    results = []
    for how in ("plain", "tfalloc"):
        b = ctx.mkdtemp("cmake-build-" + how)
        script = ("cmake -S %s -B %s >%s/configure.log 2>&1 && cmake --build %s >%s/build.log 2>&1 && %s/probe"
                  % (src, b, b, b, b, b))
        if how == "plain":
            r = ctx.run_plain(["/bin/sh", "-c", script], timeout=300)
        else:
            r = ctx.run_tool(["/bin/sh", "-c", script], quiet=False, timeout=300)
        logs = "".join(open(os.path.join(b, f)).read()[-3000:] for f in ("configure.log", "build.log")
                       if os.path.exists(os.path.join(b, f)))
        T.check_eq(r.returncode, 0, "cmake %s\n%s\n%s" % (how, r.describe(), logs))
        results.append((r.out, open(os.path.join(b, "config.h")).read()))
        if how == "tfalloc":
            T.check(re.search(r"^tfalloc\[\d+\]: cc1: peak", r.err, re.M),
                    "the compiler's summary lines on tfalloc run's stderr:\n" + r.err[-3000:])
    T.check_eq(results[1], results[0], "the probe's output and config.h under tfalloc run")
    T.check_eq(results[0][0], "sys/mman.h\nposix_memalign\npopcount\nmalloc runs\n", "the probe's output")


def text_file(ctx, name, lines, seed):
    rnd = random.Random(seed)
    path = os.path.join(ctx.scratch, name)
    with open(path, "w") as f:
        for i in range(lines):
            f.write("%s %d %s\n" % ("".join(rnd.choice("abcdefghijklmnop") for _ in range(rnd.randint(4, 16))),
                                    rnd.randint(0, 10 ** 6), "zz" * (i % 7)))
    return path


def case_sort(ctx):
    path = text_file(ctx, "sort.in", 200000, 1)
    real(ctx, ["/usr/bin/sort", "--parallel=2", "-S", "64M", "-T", ctx.scratch, path], multithreaded=True)


def case_xz(ctx):
    path = text_file(ctx, "xz.in", 150000, 2)
    real(ctx, ["/usr/bin/xz", "-T2", "-1", "--block-size=262144", "-c", path], multithreaded=True)


def case_links_jemalloc(ctx):
    path = ctx.prog("tp_links_jemalloc")
    proc, r = real(ctx, [path])
    T.check_ledger(proc, ctx.baseline("tp_links_jemalloc"), T.parse_ledger(r))


PY_DEEPBIND = r'''
import os, sys
if sys.argv[1] == "deep":
    sys.setdlopenflags(os.RTLD_NOW | os.RTLD_DEEPBIND)
import _bz2, _decimal, _hashlib, _lzma, _sqlite3, _ssl, pyexpat
d = [_decimal.Decimal(i) / 7 for i in range(20000)]
c = _sqlite3.connect(":memory:")
c.execute("create table t(a)")
c.executemany("insert into t values(?)", [(str(i) * 10,) for i in range(20000)])
print(len(d), c.execute("select count(*), sum(length(a)) from t").fetchone())
import hashlib
print(hashlib.sha256(b"x" * 100000).hexdigest()[:16])
import bz2, lzma
print(len(bz2.compress(b"abc" * 10000)), len(lzma.compress(b"abc" * 10000)))
import xml.etree.ElementTree as ET
print(len(ET.fromstring("<a>" + "<b>x</b>" * 5000 + "</a>")))
'''


def case_python3_deepbind(ctx):
    env = {"PYTHONHASHSEED": "0"}
    counts = {}
    for flags in ("default", "deep"):
        proc, _ = real(ctx, ["/usr/bin/python3", "-s", "-c", PY_DEEPBIND, flags], env=env)
        counts[flags] = T.device(proc)["num_allocs"]
    # sqlite3 alone makes some 40,000 blocks; the interpreter itself (pymalloc) few.
    T.check_ge(counts["default"], 40000, "python3 with the default dlopen flags: num_allocs")
    T.check_range(counts["deep"], counts["default"] * 0.9, counts["default"] * 1.1,
                  "python3 with RTLD_DEEPBIND: num_allocs (%d with the default flags)" % counts["default"])


CASES = {
    "python3": case_python3,
    "python3_malloc": case_python3_malloc,
    "python3_threads": case_python3_threads,
    "sqlite3": case_sqlite3,
    "cmake": case_cmake,
    "cmake_project": case_cmake_project,
    "sort": case_sort,
    "xz": case_xz,
    "python3_deepbind": case_python3_deepbind,
    "links_jemalloc": case_links_jemalloc,
}

if __name__ == "__main__":
    T.main(CASES)
