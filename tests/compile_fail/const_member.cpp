// SPDX-License-Identifier: BSL-1.0
// A const member cannot be filled in place when deserializing.
// expect-error: const, volatile or a reference
// expect-error: NotSerializable = const int|is_deserializable_in_place<const int>
#include <fiber/serialize.hpp>

struct config {
  const int version;
  int value;
};

int main() {
  const auto bytes = fiber::serialize(config{1, 2});
  return static_cast<int>(bytes.size());
}
