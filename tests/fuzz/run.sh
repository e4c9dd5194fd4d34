#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Builds a libFuzzer target from tests/fuzz/<FUZZER_NAME>.cpp and runs it for a
# bounded time on a copy of its seed corpus tests/fuzz/corpus/<NAME without
# the fuzz_ prefix>/ (an empty corpus if there is none). Exits non-zero when
# the fuzzer finds a crash, leak, timeout, out-of-memory or UB report, or
# fails to build.
#
#   tests/fuzz/run.sh FUZZER_NAME [SECONDS]      e.g. tests/fuzz/run.sh fuzz_deserialize 60
#
# Environment:
#   FUZZ_CXX           compiler (default: clang++, else clang++-14)
#   FUZZ_CXXFLAGS      extra compile flags (e.g. -I for other dependencies)
#   FUZZ_LDFLAGS       extra link flags (e.g. -lnng for a transport fuzzer)
#   FUZZ_ARGS          extra libFuzzer flags
#   FUZZ_BUILD_DIR     where binaries, the working corpus and artifacts go
#                      (default: build/fuzz, ignored by git)
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 FUZZER_NAME [SECONDS]" >&2
  exit 2
fi
name=$1
seconds=${2:-60}
if [[ ! $name =~ ^[A-Za-z0-9_]+$ ]]; then
  echo "$0: bad fuzzer name '$name'" >&2
  exit 2
fi
if [[ ! $seconds =~ ^[0-9]+$ ]]; then
  echo "$0: SECONDS must be a whole number, got '$seconds'" >&2
  exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
src=$root/tests/fuzz/$name.cpp
if [[ ! -f $src ]]; then
  echo "$0: no fuzzer source $src" >&2
  exit 2
fi

cxx=${FUZZ_CXX:-}
if [[ -z $cxx ]]; then
  for c in clang++ clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then cxx=$c; break; fi
  done
fi
if [[ -z $cxx ]]; then
  echo "$0: clang++ not found (libFuzzer needs clang; Debian: clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi

out=${FUZZ_BUILD_DIR:-$root/build/fuzz}
bin=$out/$name
mkdir -p "$out"

# Rebuild when the binary is missing or older than the sources it may include.
if [[ ! -x $bin ]] || [[ -n $(find "$root/include" "$root/tests/fuzz" -newer "$bin" \
                              \( -name '*.hpp' -o -name '*.cpp' \) -print -quit) ]]; then
  echo "== building $name with $cxx"
  # shellcheck disable=SC2086  # FUZZ_*FLAGS are word-split on purpose
  "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I "$root/include" ${FUZZ_CXXFLAGS:-} \
    "$src" -o "$bin.tmp" ${FUZZ_LDFLAGS:-}
  mv "$bin.tmp" "$bin"
fi

seeds=$root/tests/fuzz/corpus/${name#fuzz_}
work=$out/corpus-$name
artifacts=$out/artifacts-$name/
rm -rf "$work"
mkdir -p "$work" "$artifacts"
if [[ -d $seeds ]]; then
  cp -R "$seeds/." "$work/"
fi
echo "== running $name for ${seconds}s on $(find "$work" -type f | wc -l) seed(s); artifacts in $artifacts"

# Inputs are small (max_len defaults to 4096), so any single allocation above
# 64 MiB is a bug (an unchecked length), and so is a 10 s input.
status=0
# shellcheck disable=SC2086
"$bin" "$work" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
  -artifact_prefix="$artifacts" -print_final_stats=1 ${FUZZ_ARGS:-} || status=$?
if [[ $status -ne 0 ]]; then
  echo "== $name FAILED (exit $status); reproducers:" >&2
  find "$artifacts" -type f -newer "$bin" >&2 || true
  exit "$status"
fi
echo "== $name: no failures in ${seconds}s"
