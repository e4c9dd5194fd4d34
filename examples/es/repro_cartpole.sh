#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# CTest es_reproducible: CartPole, 5 generations, 1 vs 3 workers (so also
# different batching) must give bitwise-identical parameters in policy.bin.
# Usage: repro_cartpole.sh PATH/TO/es OUT_DIR
set -euo pipefail
es=$1 out=$2
for w in 1 3; do
  "$es" --env cartpole --generations 5 --seed 11 --workers "$w" --final-episodes 0 --out "$out/workers$w" >/dev/null
done
if cmp -s "$out/workers1/policy.bin" "$out/workers3/policy.bin"; then
  echo "reproducible: 1 and 3 workers give the same policy.bin"
else
  echo "NOT reproducible: policy.bin differs between 1 and 3 workers" >&2
  exit 1
fi
