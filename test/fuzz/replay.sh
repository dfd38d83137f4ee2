#!/bin/sh
# SPDX-License-Identifier: MIT
# replay.sh FUZZER DIR [FLAGS...]: runs FUZZER once on each file of DIR (none: passes).
set -eu
fuzzer=$1 dir=$2
shift 2
set -- "$@" "$dir"/*
[ -e "$dir" ] && ls "$dir"/* >/dev/null 2>&1 || { echo "no regression input in $dir"; exit 0; }
exec env ASAN_OPTIONS=detect_leaks=1 "$fuzzer" "$@"
