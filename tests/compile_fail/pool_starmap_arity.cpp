// SPDX-License-Identifier: BSL-1.0
// Pool::starmap with tuples of the wrong arity.
// expect-first-error: fiber::Pool::starmap: each element \(of Tuples below\) must be a std::tuple holding exactly the target's arguments
#include <fiber/pool.hpp>

#include <tuple>
#include <vector>

int add(int a, int b) { return a + b; }

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  fiber::Pool pool{fiber::target<&add>};
  std::vector<std::tuple<int, int, int>> triples{{1, 2, 3}};
  auto r = pool.starmap(triples);
  return int(r.size());
}
