#!/bin/sh
# SPDX-License-Identifier: MIT
# libtfalloc.so exports exactly the interposed entry points (and nothing of
# jemalloc or of the shim's internals), depends on libc, libm and the loader
# (__libc_stack_end, the main thread's stack bound for frame-pointer stacks)
# only, and has
# no undefined reference but weak C++ runtime ones: it must load into every
# process, LD_BIND_NOW included.
# Usage: check_exports.sh LIB EXPECTED_LIST
set -eu
lib=$1
expected=$2
actual=$(mktemp)
trap 'rm -f "$actual"' EXIT
nm -D --defined-only "$lib" | awk '{ print $3 }' | sort > "$actual"
if ! diff -u "$expected" "$actual"; then
	echo "exports: $lib exports differ from $expected (- expected, + actual)"
	exit 1
fi
needed=$(readelf -dW "$lib" | awk '/NEEDED/ { print $5 }' | tr -d '[]' | sort | tr '\n' ' ')
if [ "$needed" != "ld-linux-x86-64.so.2 libc.so.6 libm.so.6 " ]; then
	echo "exports: unexpected dependencies: $needed"
	exit 1
fi
undefined=$(nm -D --undefined-only "$lib" | awk '$1 == "U" && $2 !~ /@GLIBC_/ { print $2 }')
if [ -n "$undefined" ]; then
	echo "exports: undefined non-glibc symbols: $undefined"
	exit 1
fi
LD_BIND_NOW=1 LD_PRELOAD="$lib" TFALLOC_PROFILE=0 TFALLOC_QUIET=1 /bin/true
echo "exports: $(wc -l < "$expected") symbols, dependencies: $needed"
