#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Formats fiber's C++ sources with clang-format and the repository's
# .clang-format, or checks that they are formatted (CI's `format` stage).
#
#   bash scripts/format.sh                 # rewrite every tracked C++ file in place
#   bash scripts/format.sh --check         # change nothing; list the files that would
#                                          #   change (lines per file); exit 1 if any
#   bash scripts/format.sh [--check] FILE...   # only these files
#
# Files: every tracked *.cpp, *.hpp, *.h, *.ipp (git ls-files; outside a git
# checkout: those under include/ tests/ examples/ bench/). The C baselines in
# bench/baselines/ are not C++ and stay as written. Debian bookworm's
# clang-format 14 is the reference: other versions may format differently.
# Environment: CLANG_FORMAT (default clang-format).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

check=0
files=()
for arg in "$@"; do
  case $arg in
    --check) check=1 ;;
    -h | --help) sed -n '3,16p' "$0"; exit 0 ;;
    -*) echo "format.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) files+=("$arg") ;;
  esac
done
cf=${CLANG_FORMAT:-clang-format}
command -v "$cf" >/dev/null || { echo "format.sh: $cf not found (bash scripts/setup.sh installs clang-format)" >&2; exit 1; }
[[ -f .clang-format ]] || { echo "format.sh: no .clang-format in $(pwd)" >&2; exit 1; }
if ((${#files[@]} == 0)); then
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.ipp')
  else
    mapfile -t files < <(find include tests examples bench -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.ipp' \) | sort)
  fi
fi

if ((!check)); then
  "$cf" -i --style=file "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files ($("$cf" --version))"
  exit 0
fi

# One clang-format per file, JOBS (default: the CPUs) at a time; each prints
# "FILE: N lines would change" for a file that is not formatted.
export cf
report=$(printf '%s\0' "${files[@]}" | xargs -0 -n 8 -P "${JOBS:-$(nproc)}" bash -c '
  for f; do
    n=$("$cf" --style=file --assume-filename="$f" <"$f" | diff "$f" - | grep -c "^<" || true)
    ((n == 0)) || echo "$f: $n lines would change"
  done' _)
changed=0 lines=0
if [[ -n $report ]]; then
  echo "$report"
  changed=$(wc -l <<<"$report")
  lines=$(awk '{ s += $2 } END { print s }' <<<"$report")
fi
if ((changed)); then
  echo "format.sh: $changed of ${#files[@]} files ($lines lines) are not formatted: run bash scripts/format.sh" >&2
  exit 1
fi
echo "format.sh: all ${#files[@]} files formatted ($("$cf" --version))"
