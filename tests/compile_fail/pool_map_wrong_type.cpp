// SPDX-License-Identifier: BSL-1.0
// Pool::map over a range whose elements do not convert to the target's parameter.
// expect-first-error: fiber::Pool::map / imap / imap_unordered / async_map: the range's elements \(Inputs below\) do not convert
// expect-error: Inputs = std::vector<std::__cxx11::basic_string<char> >&
#include <fiber/pool.hpp>

#include <string>
#include <vector>

int square(int x) { return x * x; }

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  fiber::Pool pool{fiber::target<&square>};
  std::vector<std::string> words{"a", "b"};
  auto r = pool.map(words);
  return int(r.size());
}
