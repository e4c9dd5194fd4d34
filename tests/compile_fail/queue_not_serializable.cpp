// SPDX-License-Identifier: BSL-1.0
// A Queue of a type that cannot be serialized: one error naming the type and the fix.
// expect-first-error: fiber::Queue<T> / fiber::Pipe<T>: the item type T \(check_item_type<T> above\) is not serializable
// expect-error: check_item_type<app::opaque>
// expect-error: BOOST_DESCRIBE_STRUCT/CLASS
#include <fiber/queue.hpp>

namespace app {
class opaque {
public:
  explicit opaque(int v) : v_(v) {}

private:
  int v_;
};
} // namespace app

int main() {
  fiber::Queue<app::opaque> q;
  q.put(app::opaque{1});
  return 0;
}
