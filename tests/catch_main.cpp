// Catch2 v2's main(), compiled once and linked into every test executable.
// fiber::init comes first: test executables start themselves again as
// workers, and in a worker init() runs the worker and never returns.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#if __has_include(<fiber/init.hpp>)
#include <fiber/init.hpp>
#define FIBER_TEST_MAIN_HAS_INIT 1
#endif

int main(int argc, char** argv) {
#ifdef FIBER_TEST_MAIN_HAS_INIT
  fiber::init(argc, argv);
#endif
  return Catch::Session().run(argc, argv);
}
