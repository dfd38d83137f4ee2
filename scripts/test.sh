#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite: set-up (a no-op when done), the build, every CTest
# test, then the unit tests and tools again under AddressSanitizer+UBSan, the
# threaded unit tests under ThreadSanitizer, and short fuzzing runs.
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

echo "== threaded unit tests under ThreadSanitizer (build-tsan/)"
# Only the concurrent modules' threaded cases (label tsan, test/unit/CMakeLists.txt), at a tenth
# of their size: about 15 s of tests on 2 cores once built.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DTFA_BUILD_PRELOAD=OFF \
	-DTFA_SANITIZE=thread >/dev/null
cmake --build build-tsan -j"$(nproc)" --target check_ptr_table check_tracking_allocator \
	check_resource_mgr check_stack_table
(cd build-tsan && ctest --output-on-failure -j"$(nproc)" -L tsan)

echo "== libFuzzer targets, short runs (build-fuzz/)"
fuzz_cc=$(command -v clang-14 || command -v clang || true)
if [ -n "$fuzz_cc" ] && echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { (void)d; (void)n; return 0; }' |
	"$fuzz_cc" -fsanitize=fuzzer -x c - -o /dev/null 2>/dev/null; then
	CC=$fuzz_cc cmake -S . -B build-fuzz -DTFA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DTFA_FUZZ_SHIM="$PWD/build/lib/libtfalloc.so" -DTFA_FUZZ_PROGRAMS="$PWD/build/bin" >/dev/null
	cmake --build build-fuzz -j"$(nproc)"
	(cd build-fuzz && ctest --output-on-failure -j"$(nproc)")
else
	echo "no clang with -fsanitize=fuzzer: fuzzing skipped"
fi
