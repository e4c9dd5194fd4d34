#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Configure, build and test fiber (the README's test command).
#
#   bash scripts/test.sh [CMAKE_ARGS...] [-- CTEST_ARGS...]
#
# Builds in build/ (RelWithDebInfo with assertions on: -O0 -g1, no -DNDEBUG;
# a test program compiles in 40 s at -O0, 62 s at -O1, and the tests assert
# behaviour, not speed: the benchmarks build Release in their own tree),
# with Ninja when available, then runs every registered test.
# Environment: BUILD_DIR (default: build), JOBS (default: 2),
#              CXXFLAGS_OPT (default: "-O0 -g1"), KEEP_GOING=1 (see below),
#              TARGETS="test_a test_b" (build only these, not everything).
# Examples:
#   bash scripts/test.sh -- -R test_serialize        # one test
#   TARGETS=test_serialize bash scripts/test.sh -- -R test_serialize   # and build only it
#   BUILD_DIR=build-asan bash scripts/test.sh -DFIBER_SANITIZE=address,undefined -- -LE 'bench|packaging'
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=${BUILD_DIR:-build}
jobs=${JOBS:-2}
opt=${CXXFLAGS_OPT:--O0 -g1}

cmake_args=()
ctest_args=()
while (($#)); do
  if [[ $1 == -- ]]; then
    shift
    ctest_args=("$@")
    break
  fi
  cmake_args+=("$1")
  shift
done

generator=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi

cmake -S . -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$opt" \
  "${cmake_args[@]}"
# KEEP_GOING=1 (CI): build everything that compiles, run the tests that were
# built, and still fail at the end if anything did not compile.
build_rc=0
targets=()
if [[ -n ${TARGETS:-} ]]; then read -r -a targets <<<"$TARGETS"; targets=(--target "${targets[@]}"); fi
if [[ -n ${KEEP_GOING:-} ]]; then
  keep=()
  grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build/CMakeCache.txt" && keep=(-- -k 0)
  cmake --build "$build" -j "$jobs" "${targets[@]}" "${keep[@]}" || build_rc=$?
else
  cmake --build "$build" -j "$jobs" "${targets[@]}"
fi
ctest --test-dir "$build" --output-on-failure -j "$jobs" "${ctest_args[@]}"
if ((build_rc)); then
  echo "test.sh: the build failed (see above); the tests that built were run" >&2
  exit "$build_rc"
fi
