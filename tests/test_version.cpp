// SPDX-License-Identifier: BSL-1.0
// fiber/version.hpp: the macros agree with each other and with the version
// CMake read from the same header (project(VERSION), the package version file).
#include <fiber/version.hpp>

#include <catch2/catch.hpp>

#include <string>

static_assert(FIBER_VERSION == FIBER_VERSION_MAJOR * 10000 + FIBER_VERSION_MINOR * 100 + FIBER_VERSION_PATCH);
static_assert(FIBER_VERSION_MINOR < 100 && FIBER_VERSION_PATCH < 100, "FIBER_VERSION's formula needs both < 100");
#if FIBER_VERSION < 100
#error "FIBER_VERSION must be usable in #if"
#endif

TEST_CASE("version: string, integer and CMake's project version agree", "[version]") {
  const std::string s = FIBER_VERSION_STRING;
  CHECK(s == std::to_string(FIBER_VERSION_MAJOR) + "." + std::to_string(FIBER_VERSION_MINOR) + "." +
                 std::to_string(FIBER_VERSION_PATCH));
  CHECK(s == FIBER_TEST_PROJECT_VERSION);
}
