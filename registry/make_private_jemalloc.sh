#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds a private copy of Debian's jemalloc for libtfalloc.so from
# libjemalloc_pic.a: every public name gets the prefix tfa_je_ (so the copy
# never interposes the program's malloc nor a jemalloc the program links) and
# the C++ object is left out (it would pull libstdc++ into every process).
# Usage: make_private_jemalloc.sh LIBJEMALLOC_PIC_A OUTPUT_A WORKDIR
set -eu
archive=$1
output=$2
work=$3

rm -rf "$work"
mkdir -p "$work"
cd "$work"
ar x "$archive"
rm -f jemalloc_cpp.pic.o
# No constructor: jemalloc's initialised it in every process, before the
# shim's start chose an allocator, so under a tight RLIMIT_AS its start-up ran
# even where the shim then chose glibc, and crashed when an mmap failed there
# (it writes to the page it could not map).  The shim's registry starts it
# when it chooses it (registry/jemalloc_allocator.c), and with glibc chosen
# it never starts.
objcopy --remove-section=.init_array --remove-section=.rela.init_array jemalloc.pic.o

# The names jemalloc exports (default visibility), and its configuration symbols.
for o in *.o; do
	readelf -sW "$o" | awk '$5 == "GLOBAL" && $6 == "DEFAULT" && $7 != "UND" { print $8 }'
done | sort -u > exported.txt
printf '%s\n' malloc_conf malloc_conf_2_conf_harder malloc_message >> exported.txt
sort -u exported.txt | awk '{ print $1 " tfa_je_" $1 }' > rename.map

for o in *.o; do
	objcopy --redefine-syms=rename.map "$o"
done
rm -f "$output"
ar rcs "$output" ./*.o
