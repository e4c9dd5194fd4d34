#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Checks conanfile.py against the rest of the source tree (CTest
`packaging_recipe`). Conan itself is not needed: the recipe is compiled and
read with Python's ast module, never run.

    python3 tests/packaging/check_recipe.py [SOURCE_DIR]

Checks:
  1. conanfile.py compiles (what `python3 -m py_compile conanfile.py` does,
     without writing __pycache__ into the source tree).
  2. Its `version` equals include/fiber/version.hpp's
     FIBER_VERSION_MAJOR.MINOR.PATCH, and so does the newest release in
     CHANGELOG.md (the first `## [X.Y.Z]` heading).
  3. Its `license` is "BSL-1.0", LICENSE exists and the recipe exports it.
  4. Its requirements are the dependencies cmake/fiberDependencies.cmake
     finds: the same packages, each required or optional on both sides.

Convention for dependencies (keep both files to it):

  cmake/fiberDependencies.cmake is split into sections, each starting with a
  heading comment `# --- <what> ...`. A section that calls find_package() or
  find_path() is one dependency:
    * it is OPTIONAL when its heading contains the word "optional"; such a
      section must never set fiber_DEPENDENCY_ERROR (fiber works without it);
    * otherwise it is REQUIRED and must set fiber_DEPENDENCY_ERROR when the
      dependency is missing.
  The Conan names of a section's dependencies come from CMAKE_TO_CONAN below
  (every find_package() name and find_path() NAMES file of the section; one
  section may find several packages, all optional or all required), unless
  a comment `# conan: <name> ...` in the section lists them itself;
  `# conan: -` says they have no Conan package. Threads maps to none: the
  recipe covers it with system_libs.

  conanfile.py's requirements() calls self.requires("<name>/<version>") for
  each dependency:
    * a REQUIRED one unconditionally;
    * an OPTIONAL one under `if self.options.<option>:`, an option the recipe
      declares in `options` with a default in `default_options` (e.g.
      with_tomlplusplus), so a Conan user can turn it off as a CMake user can.
  Where both sides state a version (find_package(nng 1.5) and "nng/1.5.2"),
  the recipe's must not be older than CMake's minimum.
"""
import ast
import os
import py_compile
import re
import sys
import tempfile

# CMake package name (find_package) or header (find_path NAMES) -> Conan
# Center package name; None: no Conan package (a system library).
CMAKE_TO_CONAN = {
    "Threads": None,
    "nng": "nng",
    "OpenSSL": "openssl",
    "MbedTLS": "mbedtls",
    "mbedtls/md.h": "mbedtls",
    "Boost": "boost",
    "asio.hpp": "asio",
    "tomlplusplus": "tomlplusplus",
    "toml++/toml.h": "tomlplusplus",
    "CURL": "libcurl",
    "nlohmann_json": "nlohmann_json",
    "nlohmann/json.hpp": "nlohmann_json",
}

errors = []


def error(msg):
    errors.append(msg)


def version_tuple(text):
    return tuple(int(x) for x in re.findall(r"\d+", text))


# --- CMake side ---------------------------------------------------------------
def cmake_dependencies(path):
    """{conan name: (optional, min version or None, section heading)}"""
    text = open(path, encoding="utf-8").read()
    sections = re.split(r"^# ---+ ", text, flags=re.M)[1:]
    deps = {}
    for sec in sections:
        heading = sec.splitlines()[0].strip(" -")
        code = "\n".join(l for l in sec.splitlines()[1:] if not l.lstrip().startswith("#"))
        packages = re.findall(r"find_package\(\s*(\w+)(?:\s+([0-9][0-9.]*))?", code)
        paths = re.findall(r"find_path\(\s*\w+\s+NAMES\s+(\S+?)[\s)]", code)
        if not packages and not paths:
            continue
        override = re.search(r"^\s*#\s*conan:\s*(.+?)\s*$", sec, flags=re.M)
        names = {}  # conan name -> min version
        if override:
            for n in override.group(1).split():
                if n != "-":
                    names[n] = None
        else:
            for key in [p for p, _ in packages] + paths:
                if key not in CMAKE_TO_CONAN:
                    error(f"fiberDependencies.cmake, section '{heading}': no Conan name known for {key}: "
                          f"add it to CMAKE_TO_CONAN in {os.path.basename(__file__)} or put "
                          f"'# conan: <name>...' (or '# conan: -') in the section")
                elif CMAKE_TO_CONAN[key] is not None:
                    names.setdefault(CMAKE_TO_CONAN[key], None)
            for key, v in packages:
                if v and CMAKE_TO_CONAN.get(key):
                    names[CMAKE_TO_CONAN[key]] = v
        optional = re.search(r"\boptional\b", heading, flags=re.I) is not None
        sets_error = re.search(r"set\(\s*fiber_DEPENDENCY_ERROR\s+\S", code) is not None
        if optional and sets_error:
            error(f"fiberDependencies.cmake, section '{heading}': marked optional but sets "
                  f"fiber_DEPENDENCY_ERROR (an optional dependency must never stop fiber)")
        if not optional and not sets_error:
            error(f"fiberDependencies.cmake, section '{heading}': sets no fiber_DEPENDENCY_ERROR, "
                  f"so it is optional: say so in its heading ('# --- {heading} (optional: ...)')")
        for n, v in names.items():
            if n in deps:
                error(f"fiberDependencies.cmake: {n} is found in two sections ('{deps[n][2]}', '{heading}')")
            deps[n] = (optional, v, heading)
    return deps


# --- Conan side ------------------------------------------------------------------
def is_self_attr(node, attr):
    return (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def option_names(test):
    """Names X of every `self.options.X` in an if-test."""
    return [n.attr for n in ast.walk(test)
            if isinstance(n, ast.Attribute) and is_self_attr(n.value, "options")]


def conan_recipe(path):
    source = open(path, encoding="utf-8").read()
    tree = ast.parse(source, path)
    recipe = next((c for c in tree.body if isinstance(c, ast.ClassDef)
                   and any(getattr(b, "id", "") == "ConanFile" for b in c.bases)), None)
    if recipe is None:
        error("conanfile.py: no class deriving from ConanFile")
        return {}, {}
    attrs = {}
    for stmt in recipe.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                attrs[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except ValueError:
                pass
    requirements = next((f for f in recipe.body if isinstance(f, ast.FunctionDef) and f.name == "requirements"),
                        None)
    deps = {}
    if requirements is None:
        error("conanfile.py: no requirements() method")
        return attrs, deps

    def visit(stmts, conditions):
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                visit(stmt.body, conditions + option_names(stmt.test))
                visit(stmt.orelse, conditions)
                continue
            for node in ast.walk(stmt):
                if not (isinstance(node, ast.Call) and is_self_attr(node.func, "requires")):
                    continue
                if not node.args or not isinstance(node.args[0], ast.Constant):
                    error(f"conanfile.py line {node.lineno}: self.requires() without a literal reference")
                    continue
                ref = node.args[0].value
                name, _, version = ref.partition("/")
                deps[name] = (bool(conditions), version, conditions, node.lineno)

    visit(requirements.body, [])
    declared = attrs.get("options", {}) or {}
    defaults = attrs.get("default_options", {}) or {}
    for name, (optional, _, conditions, line) in deps.items():
        for opt in conditions:
            if opt not in declared:
                error(f"conanfile.py line {line}: {name} depends on self.options.{opt}, "
                      f"which `options` does not declare")
            elif opt not in defaults:
                error(f"conanfile.py: option {opt} has no value in default_options")
    return attrs, deps


def header_version(path):
    text = open(path, encoding="utf-8").read()
    parts = []
    for p in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define FIBER_VERSION_{p} +(\d+)\s*$", text, flags=re.M)
        if not m:
            error(f"version.hpp: no FIBER_VERSION_{p}")
            return None
        parts.append(m.group(1))
    return ".".join(parts)


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    conanfile = os.path.join(src, "conanfile.py")

    # 1. compiles (py_compile, the .pyc into a scratch directory)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            py_compile.compile(conanfile, cfile=os.path.join(tmp, "conanfile.pyc"), doraise=True)
        except py_compile.PyCompileError as e:
            print(f"check_recipe: conanfile.py does not compile:\n{e.msg}", file=sys.stderr)
            return 1
    print("check_recipe: conanfile.py compiles")

    attrs, conan = conan_recipe(conanfile)
    cmake = cmake_dependencies(os.path.join(src, "cmake", "fiberDependencies.cmake"))

    # 2. versions
    version = header_version(os.path.join(src, "include", "fiber", "version.hpp"))
    if version:
        if attrs.get("version") != version:
            error(f"conanfile.py: version = {attrs.get('version')!r}, include/fiber/version.hpp says {version}")
        changelog = os.path.join(src, "CHANGELOG.md")
        if os.path.exists(changelog):
            released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", open(changelog, encoding="utf-8").read(), flags=re.M)
            if not released or released[0] != version:
                error(f"CHANGELOG.md: newest release is {released[0] if released else 'none'}, "
                      f"include/fiber/version.hpp says {version}")
        else:
            error("CHANGELOG.md is missing")
        print(f"check_recipe: version {version}")

    # 3. license
    if attrs.get("license") != "BSL-1.0":
        error(f"conanfile.py: license = {attrs.get('license')!r}, expected 'BSL-1.0'")
    if not os.path.exists(os.path.join(src, "LICENSE")):
        error("LICENSE is missing")
    exported = attrs.get("exports_sources", ())
    exported = (exported,) if isinstance(exported, str) else exported
    if "LICENSE" not in exported:
        error("conanfile.py: exports_sources does not list LICENSE (package() copies it into licenses/)")

    # 4. dependencies
    def show(deps):
        return ", ".join(f"{n} ({'optional' if d[0] else 'required'})" for n, d in sorted(deps.items()))

    print(f"check_recipe: fiberDependencies.cmake: {show(cmake)}")
    print(f"check_recipe: conanfile.py:            {show(conan)}")
    for name in sorted(set(cmake) | set(conan)):
        if name not in conan:
            error(f"conanfile.py does not require {name}, which fiberDependencies.cmake finds "
                  f"({'optional' if cmake[name][0] else 'required'}; section '{cmake[name][2]}')")
            continue
        if name not in cmake:
            error(f"conanfile.py requires {name} (line {conan[name][3]}), which fiberDependencies.cmake never finds")
            continue
        c_opt, c_min, heading = cmake[name]
        r_opt, r_version, conditions, line = conan[name]
        if c_opt != r_opt:
            error(f"{name}: {'optional' if c_opt else 'required'} in fiberDependencies.cmake ('{heading}') but "
                  f"{'optional (under self.options.' + conditions[0] + ')' if r_opt else 'required'} "
                  f"in conanfile.py (line {line})")
        pinned = re.fullmatch(r"\d+(\.\d+)*", r_version or "")
        if c_min and pinned and version_tuple(r_version) < version_tuple(c_min):
            error(f"{name}: conanfile.py asks for {r_version}, older than fiberDependencies.cmake's minimum {c_min}")

    if errors:
        for e in errors:
            print(f"check_recipe: ERROR: {e}", file=sys.stderr)
        return 1
    print("check_recipe: conanfile.py agrees with version.hpp, CHANGELOG.md, LICENSE and fiberDependencies.cmake")
    return 0


if __name__ == "__main__":
    sys.exit(main())
