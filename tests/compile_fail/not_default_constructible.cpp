// SPDX-License-Identifier: BSL-1.0
// Serializable (it has both hooks) but deserialize<T> must build a T first.
// expect-error: default-initializable
#include <fiber/serialize.hpp>

namespace app {
class token {
public:
  explicit token(int v) : v_(v) {}
  int value() const { return v_; }
  friend void fiber_serialize(fiber::writer& w, const token& t) { w.write(t.v_); }
  friend void fiber_deserialize(fiber::reader& r, token& t) { t.v_ = r.read<int>(); }

private:
  int v_;
};
} // namespace app

int main() {
  const auto bytes = fiber::serialize(app::token{4});
  return fiber::deserialize<app::token>(bytes).value();
}
