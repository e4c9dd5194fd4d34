// SPDX-License-Identifier: BSL-1.0
// Pool::apply with an argument that does not convert to the target's parameter.
// expect-first-error: fiber: an argument does not convert to the target's parameter type \(see F and A below\)
// expect-error: F = square
#include <fiber/pool.hpp>

#include <string>

int square(int x) { return x * x; }

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  fiber::Pool pool{fiber::target<&square>};
  return pool.apply(std::string("three"));
}
