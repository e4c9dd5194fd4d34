// SPDX-License-Identifier: BSL-1.0
// A Process given arguments its target does not take.
// expect-first-error: fiber: wrong number of arguments for the target \(see F below\)
// expect-error: F = work
#include <fiber/process.hpp>

void work(int) {}

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  fiber::Process p{fiber::target<&work>, 1, 2};
  p.start();
  p.join();
  return 0;
}
