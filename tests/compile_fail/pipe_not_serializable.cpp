// SPDX-License-Identifier: BSL-1.0
// A Pipe of a type that cannot be serialized: one error naming the type and the fix.
// expect-first-error: fiber::Queue<T> / fiber::Pipe<T>: the item type T \(check_item_type<T> above\) is not serializable
// expect-error: check_item_type<std::unique_ptr<int> >
#include <fiber/pipe.hpp>

#include <memory>

int main() {
  auto [a, b] = fiber::Pipe<std::unique_ptr<int>>();
  a.send(std::make_unique<int>(1));
  return 0;
}
