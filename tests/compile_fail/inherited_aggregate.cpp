// SPDX-License-Identifier: BSL-1.0
// An aggregate with a base class: Boost.PFR cannot reflect it. fiber must say
// so itself (with the remedies) instead of letting PFR's assertion surface.
// expect-error: cannot be serialized
// expect-error: NotSerializable = app::point3|has_an_encoding<app::point3>
// forbid-output: Boost\.PFR:
#include <fiber/serialize.hpp>

namespace app {
struct point2 {
  float x, y;
};
struct point3 : point2 {
  float z;
};
} // namespace app

int main() {
  const auto bytes = fiber::serialize(app::point3{});
  return static_cast<int>(bytes.size());
}
