# SPDX-License-Identifier: MIT
"""The seed corpus of fuzz_profile: small hand-made profiles (test/tools/profgen.py)
and, when a shim and the test programs are given, the profiles real programs
leave under it, in WORKDIR/seeds_profile; WORKDIR is made anew, with empty
corpus_options and corpus_profile for what the fuzzers find.
Usage: make_seeds.py WORKDIR [SHIM BINDIR]"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import profgen as pg  # noqa: E402

# Real programs: leaks, call sites, memory errors, resources, threads.
PROGRAMS = ["tp_leaks", "tp_sites", "tp_errors", "tp_control", "tp_threads", "tp_leak_classes"]
# Run again with sample-only tracking (TFALLOC_TRACK=sampled, a small interval): its CONFIG and leaks.
SAMPLED_PROGRAMS = ["tp_leaks", "tp_threads"]
MAX_SEED = 256 << 10  # a larger profile would raise libFuzzer's -max_len for nothing


def handmade(out):
    seeds = {
        "empty_valid": pg.profile([pg.process()]),
        "device": pg.profile([pg.process(), pg.device(num_allocs=3, bytes_in_use=64)]),
        "leaks": pg.profile([pg.process(), pg.device(),
                             pg.leak(100, 2, stack_id=1), pg.leak(8, 1, kind=pg.LEAK_DEFINITE)]),
        "errors": pg.profile([pg.process(), pg.device(),
                              pg.error(pg.ERR_DOUBLE_FREE, 0x1000, 2, "twice", 1, 2),
                              pg.error_totals(double=2)]),
        "snapshot": pg.profile([pg.process(end_ns=0, end_reason=pg.END_RUNNING)], complete=0),
        "unknown_record": pg.profile([pg.process(), pg.record(99, b"\x01\x02\x03")]),
        # Sample-only tracking: the CONFIG record's track, leaks with estimated figures.
        "sampled": pg.profile([pg.process(), pg.config(sample_bytes=524288, track=1), pg.device(),
                               pg.leak(100, 2, stack_id=0)]),
    }
    # Memory over time: the cpu series and a GPU's, over two records in a row.
    def point(t, b):
        return pg.u64(t) + pg.u64(b) + pg.u64(b) + pg.u64(0) + pg.u32(0)

    def dev_timeline(points):
        return pg.record(13, pg.string("cuda:0") + pg.u64(1000) + b"".join(points))

    seeds["timelines"] = pg.profile([
        pg.process(), pg.device(),
        pg.record(10, pg.u64(1000) + point(0, 10) + point(1000, 20)),
        dev_timeline([point(0, 1), point(1000, 2)]), dev_timeline([point(2000, 3)])])
    whole = seeds["leaks"]
    seeds["truncated"] = whole[: len(whole) - 7]
    seeds["header_only"] = pg.header()
    for name, data in seeds.items():
        with open(os.path.join(out, "hand_" + name), "wb") as f:
            f.write(data)


def real(out, shim, bindir):
    n = 0
    runs = [(p, {}) for p in PROGRAMS]
    runs += [(p, {"TFALLOC_TRACK": "sampled", "TFALLOC_SAMPLE_BYTES": "256"}) for p in SAMPLED_PROGRAMS]
    for prog, extra in runs:
        path = os.path.join(bindir, prog)
        if not os.access(path, os.X_OK):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, LD_PRELOAD=shim, TFALLOC_OUTPUT=tmp, TFALLOC_QUIET="1", **extra)
            subprocess.run([path], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60, check=False)
            for name in sorted(os.listdir(tmp)):
                src = os.path.join(tmp, name)
                if os.path.isfile(src) and 0 < os.path.getsize(src) <= MAX_SEED:
                    with open(src, "rb") as f:
                        if f.read(8) != pg.MAGIC:
                            continue
                    shutil.copy(src, os.path.join(out, "real_%s_%d" % (prog, n)))
                    n += 1
    return n


def main():
    work = sys.argv[1]
    shutil.rmtree(work, ignore_errors=True)
    for d in ("corpus_options", "corpus_profile"):
        os.makedirs(os.path.join(work, d))
    out = os.path.join(work, "seeds_profile")
    os.makedirs(out)
    handmade(out)
    if len(sys.argv) >= 4 and sys.argv[2] and os.path.exists(sys.argv[2]):
        n = real(out, sys.argv[2], sys.argv[3])
        print("%d real profiles" % n)
        if n == 0:
            sys.exit("no profile from the programs in %s under %s" % (sys.argv[3], sys.argv[2]))
    else:
        print("no shim given: hand-made seeds only")


if __name__ == "__main__":
    main()
