// SPDX-License-Identifier: BSL-1.0
// Remote<T>::call<&T::m> names only methods listed in T's description.
// expect-error: fiber::Remote<T>::call<&T::m>: m is not described
// expect-error: add it to BOOST_DESCRIBE_STRUCT/CLASS\(T, \.\.\.\)
#include <fiber/manager.hpp>

struct counter {
  int value() const { return n; }
  void bump() { ++n; } // not in the description below
  int n = 0;
};
BOOST_DESCRIBE_STRUCT(counter, (), (value))

int main() {
  fiber::Remote<counter> r;
  r.call<&counter::bump>();
}
