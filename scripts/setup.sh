#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs everything tfalloc needs to build and test on Debian 12, then
# builds it into build/ (build/lib/libtfalloc.so, build/bin/tfalloc).
# Quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
	# build
	cmake make gcc g++ pkg-config binutils libc6-dev
	# the symbolizer of tfalloc report (elfutils' libdw and libelf)
	libdw-dev libelf-dev
	# gzip of tfalloc report --format pprof
	zlib1g-dev
	# the pprof tests: protoc decodes the output with pprof's own profile.proto
	protobuf-compiler golang-github-google-pprof-dev
	# the real jemalloc the shim uses (its PIC archive) and programs that link it
	libjemalloc-dev libjemalloc2
	# unit tests, and the shim under memcheck
	check valgrind
	# call stacks: libunwind's header, and the library the shim loads at run time
	libunwind-dev libunwind8
	# real programs the tests run under the shim
	python3 sqlite3 coreutils xz-utils
	# the real-program matrix (test/integration/test_matrix.py)
	grep sed gawk bash perl git gcc g++ make tar zstd gzip bzip2 findutils diffutils
	bc jq m4 file openssl redis-server redis-tools
	# a real multi-process test suite under the leak gate: GLib's installed tests and their runner
	libglib2.0-tests gnome-desktop-testing
	# the HTML report's tests open the page in headless Chromium
	chromium
	# the libFuzzer targets (build-fuzz/): clang and compiler-rt's libFuzzer
	clang-14 libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: run as root (apt-get needs it), or install: ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build_type=${TFA_BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/lib/libtfalloc.so and build/bin/tfalloc"
