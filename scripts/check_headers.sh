#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Compiles every header under include/fiber/ alone (syntax only) with each
# compiler given, warnings as errors: -Wall -Wextra -Wpedantic -Werror.
#
#   bash scripts/check_headers.sh [compiler...]     # default: g++ clang++ (those installed)
#
# CTest's headers_self_contained does the same with the build's compiler;
# CI runs this one for GCC 12 and Clang 14 both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

compilers=("$@")
if ((${#compilers[@]} == 0)); then
  for c in g++ clang++; do command -v "$c" >/dev/null && compilers+=("$c"); done
fi
flags=(-x c++ -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -DASIO_STANDALONE -Iinclude)
# The optional dependencies' switches, as fiberDependencies.cmake sets them when found.
[[ -f /usr/include/toml++/toml.h ]] && flags+=(-DFIBER_HAS_TOMLPLUSPLUS=1 -DTOML_HEADER_ONLY=0 -DTOML_SHARED_LIB=1)
[[ -f /usr/include/curl/curl.h ]] && flags+=(-DFIBER_HAS_CURL=1)
[[ -f /usr/include/nlohmann/json.hpp ]] && flags+=(-DFIBER_HAS_JSON=1)
jobs=${JOBS:-$(nproc)}

mapfile -t headers < <(cd include && find fiber -name '*.hpp' | sort)
failed=0
for cxx in "${compilers[@]}"; do
  echo "check_headers: ${#headers[@]} headers with $("$cxx" --version | head -n 1)"
  log=$(mktemp)
  # One compiler process per header, $jobs at a time; each prints its header on failure.
  if ! printf '%s\n' "${headers[@]}" |
    xargs -P "$jobs" -I{} sh -c 'echo "#include <{}>" | "$0" "$@" - 2>&1 >/dev/null || { echo "FAILED: {}"; exit 1; }' \
      "$cxx" "${flags[@]}" >"$log" 2>&1; then
    grep -B1 -A12 "FAILED\|error:" "$log" | head -n 80
    failed=1
  fi
  rm -f "$log"
done
((failed == 0)) && echo "check_headers: every header compiles alone, without a warning"
exit "$failed"
