#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# fiber's main demo (the README's first command runs this after scripts/setup.sh):
# OpenAI-style Evolution Strategies on the MuJoCo humanoid, rollouts farmed out
# through a fiber::Pool (examples/es). Builds the `es` program (Release), trains
# for ES_TIME_BUDGET seconds, then says where the CSV log and the PNG curve are.
#
#   bash scripts/run_es.sh [extra es flags...]      e.g. --seed 3, --policy linear
#
# Environment: ES_TIME_BUDGET (seconds, default 480), ES_WORKERS (default 2),
#              ES_POPULATION (default 256), ES_OUT (default es-out),
#              ES_HIDDEN (MLP widths, default 16,16),
#              ES_ACTION (pd or torque, default pd: the policy sets joint targets
#              that a PD controller tracks every 5-ms substep; with Gym's
#              torques ES stalls at ~60 steps, see examples/es/README.md),
#              ES_BATCH (mirrored pairs per Pool task, default 0: automatic, i.e.
#              2 here: half the tasks, each carrying θ, lifts efficiency from
#              ~0.93 to ~0.95; bench_es),
#              BUILD_DIR (default build-release), JOBS (default 1).
# What to expect: README.md in examples/es ("What to expect").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=${BUILD_DIR:-build-release}
jobs=${JOBS:-1}
budget=${ES_TIME_BUDGET:-480}
workers=${ES_WORKERS:-2}
population=${ES_POPULATION:-256}
out=${ES_OUT:-es-out}
hidden=${ES_HIDDEN:-16,16}
batch=${ES_BATCH:-0}
action=${ES_ACTION:-pd}

generator=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
echo "run_es.sh: building examples/es (Release) in $build/ ..."
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFIBER_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target es
es=$build/examples/es/es
if [[ ! -x $es ]]; then
  echo "run_es.sh: $es was not built (see the configure messages of examples/es above)" >&2
  exit 1
fi

echo "run_es.sh: ES on the humanoid: population $population, MLP $hidden, $action actions, $workers workers, ${budget} s budget -> $out/"
status=0
"$es" --env humanoid --population "$population" --hidden "$hidden" --action "$action" --workers "$workers" --batch "$batch" \
  --time-budget "$budget" --out "$out" "$@" ||
  status=$?

echo
echo "run_es.sh: per-generation log (CSV): $out/log.csv"
if [[ -f $out/learning_curve.png ]]; then
  echo "run_es.sh: learning curve (PNG):     $out/learning_curve.png"
else
  echo "run_es.sh: no learning_curve.png (gnuplot missing? install gnuplot-nox)"
fi
echo "run_es.sh: final policy:             $out/policy.bin  (replay: $es --load $out/policy.bin --evaluate 10)"
exit "$status"
