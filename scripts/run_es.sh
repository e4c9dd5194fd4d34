#!/usr/bin/env bash
# The README's first command runs this after scripts/setup.sh: fiber's main
# demo job.
# PLACEHOLDER until the evolution-strategies example (examples/es) lands: it
# builds and runs examples/pool_map.cpp if present, otherwise says so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=${BUILD_DIR:-build}
jobs=${JOBS:-2}

if [[ ! -f examples/pool_map.cpp ]]; then
  echo "run_es.sh: the ES example is not written yet (examples/es), nor examples/pool_map.cpp;"
  echo "run_es.sh: nothing to run. The test suite runs with: bash scripts/test.sh"
  exit 0
fi

generator=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
# Same configuration as scripts/test.sh, so the two share build/ without rebuilding.
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=${CXXFLAGS_OPT:--O2 -g1}" >/dev/null
cmake --build "$build" -j "$jobs" --target pool_map
exec "$build/examples/pool_map" "$@"
