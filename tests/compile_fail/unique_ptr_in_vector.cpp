// SPDX-License-Identifier: BSL-1.0
// Ownership handles are not values: std::unique_ptr has no encoding.
// expect-error: cannot be serialized
// expect-error: unique_ptr
#include <fiber/serialize.hpp>

#include <memory>
#include <vector>

int main() {
  std::vector<std::unique_ptr<int>> v;
  const auto bytes = fiber::serialize(v);
  return static_cast<int>(bytes.size());
}
