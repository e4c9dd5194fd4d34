// SPDX-License-Identifier: BSL-1.0
// A class with a constructor and private data, no Describe, no hook.
// expect-error: cannot be serialized
// expect-error: make it an aggregate
// expect-error: BOOST_DESCRIBE_STRUCT or BOOST_DESCRIBE_CLASS
// expect-error: fiber_serialize\(fiber::writer&, const T&\)
// expect-error: NotSerializable = app::opaque|has_an_encoding<app::opaque>
#include <fiber/serialize.hpp>

namespace app {
class opaque {
public:
  explicit opaque(int v) : v_(v) {}
  int value() const { return v_; }

private:
  int v_;
};
} // namespace app

int main() {
  const auto bytes = fiber::serialize(app::opaque{1});
  return static_cast<int>(bytes.size());
}
