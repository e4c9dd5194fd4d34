#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Humanoid smoke test (CTest es_humanoid_smoke): 60 s of ES on 2 workers, then
# checks that the mean episode length of the last 5 generations is above that
# of the first 5. Usage: smoke_humanoid.sh PATH/TO/es OUT_DIR [BUDGET_S]
set -euo pipefail
es=$1 out=$2 budget=${3:-60}
"$es" --env humanoid --population 256 --workers 2 --time-budget "$budget" --final-episodes 0 --out "$out"
awk -F, 'NR > 1 { len[++n] = $8 }
  END {
    if (n < 10) { print "smoke: only " n " generations"; exit 1 }
    for (i = 1; i <= 5; ++i) { first += len[i] / 5; last += len[n - 5 + i] / 5 }
    printf "smoke: mean episode length %.1f (first 5 generations) -> %.1f (last 5 of %d)\n", first, last, n
    exit !(last > first)
  }' "$out/log.csv"
