#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
# Writes docs/ARCHITECTURE.md's table of files: every header under
# include/fiber with the purpose comment at its top (the `/// @file` block).
#   python3 scripts/file_table.py          # rewrite the table in place
#   python3 scripts/file_table.py --check  # exit 1 if the table is stale (CTest)
import pathlib, re, sys

root = pathlib.Path(__file__).resolve().parent.parent
doc = root / "docs" / "ARCHITECTURE.md"
begin, end = "<!-- file table: scripts/file_table.py -->", "<!-- end of file table -->"

def purpose(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    out, inside = [], False
    for line in lines[:40]:
        s = line.strip()
        if s.startswith("/// @file"):
            inside = True
            continue
        if inside:
            if not s.startswith("///") or s == "///" or s.startswith("/// ```"):
                break
            out.append(s[3:].strip())
    text = " ".join(out)
    return text.replace("|", "\\|") or "(no purpose comment)"

def table():
    inc = root / "include" / "fiber"
    groups = {}
    for p in sorted(inc.rglob("*.hpp")):
        rel = p.relative_to(inc)
        groups.setdefault(str(rel.parent) if str(rel.parent) != "." else "", []).append((rel, p))
    order = ["", "impl", "detail", "backend", "backend/detail"]
    rows = ["| file | what it owns |", "| --- | --- |"]
    for g in order + sorted(set(groups) - set(order)):
        for rel, p in groups.get(g, []):
            rows.append(f"| `{rel}` | {purpose(p)} |")
    return "\n".join(rows)

text = doc.read_text(encoding="utf-8")
if begin not in text or end not in text:
    sys.exit(f"{doc}: markers {begin!r} ... {end!r} not found")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
new = head + begin + "\n" + table() + "\n" + end + tail
if "--check" in sys.argv:
    if new != text:
        sys.exit("docs/ARCHITECTURE.md: the table of files is stale: run python3 scripts/file_table.py")
    print("docs/ARCHITECTURE.md: the table of files is current")
else:
    doc.write_text(new, encoding="utf-8")
