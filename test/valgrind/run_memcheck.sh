#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs a test program with libtfalloc.so preloaded under valgrind memcheck and
# fails on any memory error in the shim.  Memcheck's own malloc replacement is
# turned off (somalloc=NONE) so that the shim's malloc is the one that runs:
# memcheck then checks every load and store of the shim's code.  The program
# is a traced child: valgrind's launcher starts it again, under the shim
# (LD_PRELOAD), which keeps itself in the program only when asked
# (TFALLOC_UNDER_VALGRIND).
# Usage: run_memcheck.sh LIB EXPECTED_STATUS PROGRAM [ARGS...]
set -u
lib=$1
expected=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind -q --soname-synonyms=somalloc=NONE --error-exitcode=99 --trace-children=yes \
	--suppressions="$(dirname "$0")/libunwind.supp" \
	env LD_PRELOAD="$lib" TFALLOC_OUTPUT="$out" TFALLOC_QUIET=1 TFALLOC_UNDER_VALGRIND=1 "$@" >/dev/null 2>"$out/stderr"
status=$?
if [ "$status" -ne "$expected" ]; then
	echo "memcheck: $* exited $status (expected $expected)"
	cat "$out/stderr"
	exit 1
fi
if grep -q '^==[0-9]*==' "$out/stderr"; then
	echo "memcheck: $* reported errors:"
	cat "$out/stderr"
	exit 1
fi
if ! ls "$out"/*.prof >/dev/null 2>&1; then
	echo "memcheck: $* left no profile"
	exit 1
fi
echo "memcheck: $* clean"
