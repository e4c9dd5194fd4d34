// SPDX-License-Identifier: BSL-1.0
// Pool::map on a target of two parameters: starmap is the fix.
// expect-first-error: fiber::Pool::map / imap / imap_unordered / async_map: the target takes several arguments \(or none\); use starmap
#include <fiber/pool.hpp>

#include <vector>

int add(int a, int b) { return a + b; }

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  fiber::Pool pool{fiber::target<&add>};
  for (int v : pool.imap(std::vector{1, 2})) (void)v;
  return 0;
}
