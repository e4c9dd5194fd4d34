#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Builds fiber's API reference with Doxygen (the `docs` CMake target, from the
# `///` comments of the public headers) and fails on any warning: an
# undocumented public entity, a broken reference or command. Prints the
# warnings grouped by file. CI's `docs` stage runs this.
#
#   bash scripts/docs.sh        # -> build-docs/docs/html/index.html
#
# Environment: BUILD_DIR (default build-docs: configured with tests, examples
# and benchmarks off; nothing is compiled).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v doxygen >/dev/null; then
  echo "docs.sh: doxygen is not installed (bash scripts/setup.sh installs it)" >&2
  exit 1
fi
build=${BUILD_DIR:-build-docs}
generator=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B "$build" "${generator[@]}" -DFIBER_BUILD_DOCS=ON -DFIBER_BUILD_TESTS=OFF \
  -DFIBER_BUILD_EXAMPLES=OFF -DFIBER_BUILD_BENCH=OFF -DFIBER_HEADER_CHECK=OFF >/dev/null
log=$build/docs/doxygen-warnings.log
rc=0
cmake --build "$build" --target docs || rc=$?

if [[ -s $log ]]; then
  # "<file>:<line>: warning: ..." plus continuation lines -> grouped by file.
  python3 - "$log" "$(pwd)/" <<'PY'
import collections, re, sys
log, root = sys.argv[1], sys.argv[2]
by_file, current = collections.OrderedDict(), None
for line in open(log, encoding="utf-8", errors="replace"):
    line = line.rstrip("\n")
    m = re.match(r"^(.*?):(\d+): (.*)$", line)
    if m:
        f = m.group(1).replace(root, "")
        current = [f"{m.group(2)}: {m.group(3)}"]
        by_file.setdefault(f, [])
        if current[0] not in [w[0] for w in by_file[f]]:
            by_file[f].append(current)
    elif line.strip() and current is not None:
        current.append(line.strip())
    elif line.strip():
        by_file.setdefault("(no file)", []).append([line.strip()])
n = sum(len(v) for v in by_file.values())
print(f"docs.sh: {n} Doxygen warnings in {len(by_file)} files:")
for f, ws in by_file.items():
    print(f"\n{f} ({len(ws)})")
    for w in sorted(ws, key=lambda w: int(w[0].split(":")[0]) if w[0].split(":")[0].isdigit() else 0):
        print("  " + w[0] + "".join(" " + c for c in w[1:]))
PY
  echo "docs.sh: FAILED: document every public entity above (/// comments), fix the references" >&2
  exit 1
fi
if ((rc)); then
  echo "docs.sh: FAILED: the docs target failed (exit $rc)" >&2
  exit "$rc"
fi
echo "docs.sh: no warnings; API reference in $build/docs/html/index.html"
