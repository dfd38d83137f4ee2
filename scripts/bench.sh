#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The benchmark: builds tfalloc (scripts/setup.sh) and the workloads of
# test/bench/, runs every workload under every mode, interleaved, and prints
# one table of wall-time ratios to plain glibc and plain jemalloc measured in
# the same run.  Timings only: nothing here is a pass/fail test.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
	cat <<'EOF'
usage: scripts/bench.sh [--quick] [--reps N] [--only WORKLOAD,...] [--modes MODE,...]
       scripts/bench.sh --smoke

Builds build/ (scripts/setup.sh) and the workloads (test/bench/*.c into
build/bench/), installs the peers with apt-get when missing (as root), then
runs for rep in 1..N { for workload { for mode { run } } } and prints one table
(median, min, max wall time; ratios to plain glibc and plain jemalloc of the
same run; median peak RSS; throughput of churn and prodcons; profile bytes)
and a summary per mode (geometric mean and worst ratio to jemalloc, churn
throughput as % of jemalloc's).  Also written to build/bench/results.txt and
build/bench/results.json.  Each run's stdout (checksum lines) and exit status
must equal plain glibc's: a cell where one differs shows WRONG.

options:
  --quick            inputs about 4x smaller, fewer peer repetitions (under 2 minutes;
                     the full run: under 10)
  --reps N           repetitions of the tfalloc, glibc and jemalloc cells (default 5, --quick 3);
                     heaptrack, lsan, memcheck and jeprof run min(N, 3/3/2/2) times
                     (--quick: 1/2/1/1)
  --only W,...       workloads, of: trees realloc prodcons churn large python3
                     python3-malloc sqlite3 gxx git (default: all)
  --modes M,...      modes, of: glibc jemalloc tfalloc tfalloc-glibc tfalloc-stacks
                     tfalloc-fp tfalloc-sampled tfalloc-sampled-exact heaptrack memcheck
                     jeprof lsan
                     (default: all; glibc and jemalloc always run: they are the references)
  --smoke            no timing: each workload on a small input under glibc, jemalloc and
                     the shim (both allocators) must print the same; exit 1 if not
  -h, --help         this message

modes:
  glibc              plain
  jemalloc           LD_PRELOAD=libjemalloc.so.2 (Debian's)
  tfalloc            LD_PRELOAD=build/lib/libtfalloc.so TFALLOC_QUIET=1 TFALLOC_OUTPUT=<fresh dir>
  tfalloc-glibc      the same with TFALLOC_ALLOCATOR=glibc
  tfalloc-stacks, tfalloc-fp
                     TFALLOC_STACKS=unwind, TFALLOC_STACKS=fp;
                     n/a until the shim knows TFALLOC_STACKS
  tfalloc-sampled    sample-only tracking: TFALLOC_TRACK=sampled TFALLOC_SAMPLE_BYTES=524288
                     (only the sampled blocks recorded, libunwind stacks for them)
  tfalloc-sampled-exact
                     every block recorded, stacks for a sample: TFALLOC_SAMPLE_BYTES=524288
  heaptrack          heaptrack -o <dir>/ht CMD (--record-only too when the installed
                     heaptrack has it; 1.4 has not: it interprets and compresses while
                     recording); it does not follow exec (g++: only the driver)
  memcheck           valgrind --tool=memcheck --leak-check=full --trace-children=yes, on a
                     much smaller input, compared with glibc and jemalloc on that same input
  jeprof             libjemalloc.so.2 with MALLOC_CONF=prof:true,lg_prof_sample:0,
                     prof_final:true (every allocation recorded, dumped at exit); 100x to
                     300x, so on the small input too, like memcheck
  lsan               LD_PRELOAD=liblsan.so.0 LSAN_OPTIONS=exitcode=0, stderr to /dev/null

Every run has a 120 s limit (the runner kills its process group: "timeout").
EOF
}

args=()
while [ $# -gt 0 ]; do
	case "$1" in
	-h | --help)
		usage
		exit 0
		;;
	--quick | --smoke)
		args+=("$1")
		shift
		;;
	--reps | --only | --modes)
		if [ $# -lt 2 ]; then
			echo "bench: $1 needs a value" >&2
			usage >&2
			exit 2
		fi
		args+=("$1" "$2")
		shift 2
		;;
	--reps=* | --only=* | --modes=*)
		args+=("$1")
		shift
		;;
	*)
		echo "bench: unknown option '$1'" >&2
		usage >&2
		exit 2
		;;
	esac
done

# Peers and inputs of the benchmark: installed only when missing.
packages=(heaptrack valgrind git sqlite3 python3 g++ libjemalloc2 liblsan0)
missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "bench: not root, cannot install ${missing[*]}: the modes needing them show n/a" >&2
	else
		echo "bench: installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q
		apt-get install -y -q --no-install-recommends "${missing[@]}"
	fi
fi

bash scripts/setup.sh

mkdir -p build/bench
cflags=(-O2 -g -Wall -Wextra -Werror -pthread)
for w in runner trees realloc prodcons churn large; do
	gcc "${cflags[@]}" -o "build/bench/$w" "test/bench/$w.c"
done
echo "bench: built build/bench/{runner,trees,realloc,prodcons,churn,large}"

exec /usr/bin/python3 test/bench/bench.py --root . "${args[@]}"
