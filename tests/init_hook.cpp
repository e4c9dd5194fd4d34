// SPDX-License-Identifier: BSL-1.0
// Called first by main() in catch_main.cpp. Kept apart from Catch2's
// implementation so that fiber's runtime is compiled with the build's normal
// optimisation and sanitizer flags.
#if __has_include(<fiber/init.hpp>)
#include <fiber/init.hpp>

void fiber_test_init(int argc, char** argv) { fiber::init(argc, argv); }
#else
void fiber_test_init(int, char**) {}
#endif
