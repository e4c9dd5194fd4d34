// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file version.hpp
/// fiber's release version, for the preprocessor and for code. This file is
/// the one source of truth: CMakeLists.txt reads project(VERSION) from it and
/// a test checks that conanfile.py and CHANGELOG.md agree with it.

/// Major version: raised for changes that break the public API.
#define FIBER_VERSION_MAJOR 0
/// Minor version: raised for new features. While the major version is 0, a
/// new minor version may also break the API (CMake: SameMinorVersion).
#define FIBER_VERSION_MINOR 1
/// Patch version: raised for bug fixes only.
#define FIBER_VERSION_PATCH 0

/// The version as one integer, MAJOR * 10000 + MINOR * 100 + PATCH (0.1.0 is
/// 100, 1.2.3 is 10203; minor and patch stay below 100), for comparisons:
/// `#if FIBER_VERSION >= 100`.
#define FIBER_VERSION (FIBER_VERSION_MAJOR * 10000 + FIBER_VERSION_MINOR * 100 + FIBER_VERSION_PATCH)

/// @cond FIBER_INTERNAL
#define FIBER_DETAIL_STRINGIZE_(x) #x
#define FIBER_DETAIL_STRINGIZE(x) FIBER_DETAIL_STRINGIZE_(x)
/// @endcond

/// The version as a string literal, "MAJOR.MINOR.PATCH" (e.g. "0.1.0").
#define FIBER_VERSION_STRING                                                                                           \
  FIBER_DETAIL_STRINGIZE(FIBER_VERSION_MAJOR)                                                                          \
  "." FIBER_DETAIL_STRINGIZE(FIBER_VERSION_MINOR) "." FIBER_DETAIL_STRINGIZE(FIBER_VERSION_PATCH)
