# SPDX-License-Identifier: BSL-1.0
# test_version compares fiber/version.hpp with the version CMake read from it.
target_compile_definitions(${target} PRIVATE FIBER_TEST_PROJECT_VERSION="${PROJECT_VERSION}")
