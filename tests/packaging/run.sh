#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Proves the ways to consume fiber:
#   1. cmake --install into a temporary prefix + find_package(fiber 0.1)
#   2. add_subdirectory(<fiber source>)
#   3. FetchContent_Declare(fiber SOURCE_DIR <fiber source>)
#   4. FetchContent_Declare(fiber GIT_REPOSITORY file://<clone> GIT_TAG <commit>),
#      the clone made from the source tree as it is now (local changes
#      included); this consumer runs a Pool map (pool_map.cpp)
#   5. consumer 4 again with FIBER_STATIC_DEPS=ON: linked without nng's,
#      mbedTLS's, libstdc++'s or libgcc's shared libraries, and it runs
# Each consumer is configured, built and run; for 2-4 the consumer's build
# tree must not contain any of fiber's tests, examples or benchmarks.
#
# usage: run.sh [--source DIR] [--build DIR] [--work DIR] [--cxx COMPILER] [--generator G]
#   --build  an already configured fiber build tree to install from
#            (default: configure a fresh one with tests/examples/bench off)
#   --work   scratch directory (default: a mktemp directory, removed afterwards)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
build_dir=""
work=""
cxx=""
generator=""
while (($#)); do
  case "$1" in
    --source) source_dir=$(cd "$2" && pwd); shift 2 ;;
    --build) build_dir=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --cxx) cxx=$2; shift 2 ;;
    --generator) generator=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ -z $work ]]; then
  work=$(mktemp -d /tmp/fiber-packaging.XXXXXX)
  trap 'rm -rf "$work"' EXIT
else
  rm -rf "$work"
  mkdir -p "$work"
fi
if [[ -z $generator ]] && command -v ninja >/dev/null; then generator=Ninja; fi

# Release as a user builds it, at -O0: the consumers test packaging, not the
# optimizer, and -O3 (or -O1: a third more) costs five builds compile time
# for nothing they check.
common=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG")
[[ -n $generator ]] && common+=(-G "$generator")
[[ -n $cxx ]] && common+=(-DCMAKE_CXX_COMPILER="$cxx")
jobs=${FIBER_PACKAGING_JOBS:-2}

step() { printf '\n=== packaging: %s\n' "$*"; }
fail() { printf 'packaging: FAILED: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------
step "1/5 install + find_package(fiber 0.1)"
prefix=$work/prefix
if [[ -z $build_dir ]]; then
  build_dir=$work/fiber-build
  cmake -S "$source_dir" -B "$build_dir" "${common[@]}" \
    -DFIBER_BUILD_TESTS=OFF -DFIBER_BUILD_EXAMPLES=OFF -DFIBER_BUILD_BENCH=OFF >/dev/null
fi
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
cfg=$(find "$prefix" -name fiberConfig.cmake -print -quit)
[[ -n $cfg ]] || fail "no fiberConfig.cmake installed under $prefix"
for f in fiberConfigVersion.cmake fiberTargets.cmake fiberDependencies.cmake; do
  [[ -f $(dirname "$cfg")/$f ]] || fail "$f not installed next to $cfg"
done
[[ -f $prefix/include/fiber/error.hpp ]] || fail "headers not installed in $prefix/include/fiber"
echo "installed: $(dirname "$cfg")"

cmake -S "$here/find_package" -B "$work/find_package" "${common[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
cmake --build "$work/find_package" -j "$jobs"
"$work/find_package/consumer"

# The installed headers are what the consumer compiled against, not the source tree.
if grep -rqF -- "$source_dir/include" "$work/find_package"; then
  fail "find_package consumer compiled against the source tree instead of $prefix"
fi

# SameMinorVersion: find_package(fiber 0.2) must refuse the installed 0.1.x.
if cmake -S "$here/find_package" -B "$work/find_package_0.2" "${common[@]}" \
     -DCMAKE_PREFIX_PATH="$prefix" -DFIBER_REQUIRED_VERSION=0.2 >"$work/find_package_0.2.log" 2>&1; then
  fail "find_package(fiber 0.2) accepted fiber 0.1"
fi
grep -q "version: 0.1.0" "$work/find_package_0.2.log" ||
  fail "find_package(fiber 0.2) failed for another reason: see $work/find_package_0.2.log"
echo "find_package(fiber 0.2) refused fiber 0.1, as it should"

# ---------------------------------------------------------------------------
check_no_fiber_extras() { # build dir
  local targets
  targets=$(cmake --build "$1" --target help 2>/dev/null | sed -e 's/^\.\.\. //' -e 's/:.*//' | awk '{print $1}')
  # fiber's own targets: every test/example/benchmark source's stem, plus helpers.
  local own=(fiber_catch_main fiber_header_check fiber_dev_options) src
  for src in "$source_dir"/tests/test_*.cpp "$source_dir"/examples/*.cpp "$source_dir"/bench/*.cpp; do
    [[ -f $src ]] && own+=("$(basename "$src" .cpp)")
  done
  local bad
  bad=$(grep -Fx -f <(printf '%s\n' "${own[@]}") <<<"$targets" || true)
  [[ -z $bad ]] || fail "consumer build tree in $1 contains fiber's own targets: $(tr '\n' ' ' <<<"$bad")"
  if grep -rlqs add_test --include=CTestTestfile.cmake "$1"; then
    fail "consumer build tree in $1 registers fiber's tests"
  fi
  echo "no fiber tests/examples/benchmarks in the consumer's build tree"
}

n=2
for mode in add_subdirectory fetchcontent; do
  step "$n/5 $mode"
  dir=$work/$mode
  cmake -S "$here/subdirectory" -B "$dir" "${common[@]}" \
    -DFIBER_SOURCE_DIR="$source_dir" -DFIBER_CONSUME="$mode"
  check_no_fiber_extras "$dir"
  cmake --build "$dir" -j "$jobs"
  "$dir/consumer"
  n=$((n + 1))
done

# ---------------------------------------------------------------------------
step "4/5 FetchContent from git: GIT_REPOSITORY file://<clone> GIT_TAG <commit>"
command -v git >/dev/null || fail "git is needed for the FetchContent (git) consumer"
clone=$work/fiber.git
mkdir -p "$clone"
if git -C "$source_dir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # The files git knows or would add (tracked, untracked but not ignored), as
  # they are on disk: the clone holds what is being tested, uncommitted
  # changes included, and no build tree.
  while IFS= read -r -d '' f; do
    [[ -e $source_dir/$f ]] && printf '%s\0' "$f"
  done < <(git -C "$source_dir" ls-files -z --cached --others --exclude-standard) |
    tar -C "$source_dir" --null -T - -cf - | tar -C "$clone" -xf -
else
  tar -C "$source_dir" --exclude='./build*' -cf - . | tar -C "$clone" -xf -
fi
git -C "$clone" init -q
git -C "$clone" add -A
git -C "$clone" -c user.name=fiber-packaging -c user.email=packaging@localhost \
  commit -q -m "fiber as tested by tests/packaging/run.sh"
commit=$(git -C "$clone" rev-parse HEAD)
echo "clone: file://$clone at $commit"
dir=$work/fetchcontent_git
cmake -S "$here/fetchcontent_git" -B "$dir" "${common[@]}" \
  -DFIBER_GIT_URL="file://$clone" -DFIBER_GIT_TAG="$commit"
[[ -f $dir/_deps/fiber-src/include/fiber/fiber.hpp ]] || fail "FetchContent did not fetch fiber into $dir/_deps/fiber-src"
[[ $(git -C "$dir/_deps/fiber-src" rev-parse HEAD) == "$commit" ]] || fail "FetchContent fetched another commit than $commit"
check_no_fiber_extras "$dir"
cmake --build "$dir" -j "$jobs"
if grep -rqF -- "$source_dir/include" "$dir"; then
  fail "the FetchContent (git) consumer compiled against the source tree instead of its fetched copy"
fi
"$dir/consumer"

# ---------------------------------------------------------------------------
step "5/5 the same consumer with FIBER_STATIC_DEPS=ON: no nng, mbedTLS or libstdc++ to load"
dir=$work/fetchcontent_git_static
cmake -S "$here/fetchcontent_git" -B "$dir" "${common[@]}" \
  -DFIBER_GIT_URL="file://$clone" -DFIBER_GIT_TAG="$commit" -DFIBER_STATIC_DEPS=ON
cmake --build "$dir" -j "$jobs"
needed=$(readelf -d "$dir/consumer" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: $(tr '\n' ' ' <<<"$needed")"
if grep -E '^lib(nng|mbed|stdc\+\+|gcc_s)' <<<"$needed"; then
  fail "FIBER_STATIC_DEPS=ON left the libraries above dynamically linked"
fi
"$dir/consumer"

printf '\npackaging: all consumers built and ran\n'
