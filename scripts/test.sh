#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite: set-up (a no-op when done), the build, every CTest
# test, then the unit tests and tools again under AddressSanitizer+UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

echo "== tests (build/)"
(cd build && ctest --output-on-failure -j"$(nproc)")

echo "== unit tests and tools under AddressSanitizer + UBSan (build-asan/)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTFA_BUILD_PRELOAD=OFF \
	-DTFA_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$(nproc)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	ctest --output-on-failure -j"$(nproc)")
