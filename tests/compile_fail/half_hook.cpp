// SPDX-License-Identifier: BSL-1.0
// Only fiber_serialize is defined: both hooks are required.
// expect-error: only one of fiber_serialize / fiber_deserialize
// expect-error: NotSerializable = app::clock_value|has_both_hooks<app::clock_value>
#include <fiber/serialize.hpp>

namespace app {
struct clock_value {
  long ticks;
};
inline void fiber_serialize(fiber::writer& w, const clock_value& c) { w.write(c.ticks); }
} // namespace app

int main() {
  const auto bytes = fiber::serialize(app::clock_value{3});
  return static_cast<int>(bytes.size());
}
