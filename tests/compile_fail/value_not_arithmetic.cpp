// SPDX-License-Identifier: BSL-1.0
// A Value of a type that is not arithmetic: one error naming the type and the fix.
// expect-first-error: fiber::Value<T> / fiber::Array<T>: T \(check_shared_ctype<T> above\) must be an arithmetic type
// expect-error: check_shared_ctype<std::
// expect-error: fiber::Queue
#include <fiber/sharedctypes.hpp>

#include <string>

int main() {
  fiber::Value<std::string> v{"no"};
  return v.get().empty() ? 0 : 1;
}
