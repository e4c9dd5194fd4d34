#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Prints, one per line and relative to BUILD_DIR, the files of the build tree
that the named CTest tests run: their command lines and REQUIRED_FILES.

    ctest --test-dir BUILD_DIR -N -L runtime | ... | test_outputs.py BUILD_DIR

Reads the generated CTestTestfile.cmake files: unlike `ctest --show-only`,
this works before the executables exist. Test names come on stdin.
"""
import os
import re
import sys

root = os.path.abspath(sys.argv[1])
names = set(sys.stdin.read().split())
line_re = re.compile(r"(add_test|set_tests_properties)\(\[=\[(.*?)\]=\] (.*)\)$")
out = set()
for d, _, files in os.walk(root):
    if "CTestTestfile.cmake" not in files:
        continue
    with open(os.path.join(d, "CTestTestfile.cmake")) as f:
        for line in f:
            m = line_re.match(line.strip())
            if not m or m.group(2) not in names:
                continue
            if m.group(1) == "add_test":
                args = re.findall(r'"([^"]*)"', m.group(3))
            else:
                r = re.search(r'REQUIRED_FILES "([^"]*)"', m.group(3))
                args = r.group(1).split(";") if r else []
            out.update(os.path.relpath(a, root) for a in args if a.startswith(root + os.sep))
print("\n".join(sorted(out)))
