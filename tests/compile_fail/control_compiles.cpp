// SPDX-License-Identifier: BSL-1.0
// Control: the same setup as the compile-fail cases, but valid. If this fails,
// the harness (include paths, flags) is broken, not the library.
// expect-compile: success
#include <fiber/serialize.hpp>

#include <string>
#include <vector>

struct point {
  int x;
  std::vector<std::string> tags;
};

int main() {
  const auto bytes = fiber::serialize(point{1, {"a"}});
  return fiber::deserialize<point>(bytes).x == 1 ? 0 : 1;
}
