// SPDX-License-Identifier: BSL-1.0
// main() of every test executable, and Catch2 v2's implementation. This is the
// largest translation unit of the test suite and its speed does not matter,
// so tests/CMakeLists.txt compiles it with -O0 -g0.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

// tests/init_hook.cpp: fiber::init(argc, argv).
void fiber_test_init(int argc, char** argv);

int main(int argc, char** argv) {
  // fiber::init comes first: test executables start themselves again as
  // workers, and in a worker init() runs the worker and never returns.
  fiber_test_init(argc, argv);
  return Catch::Session().run(argc, argv);
}
