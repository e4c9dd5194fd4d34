// SPDX-License-Identifier: BSL-1.0
// Arguments of a remote call are checked against the method's parameters.
// expect-error: fiber::Remote<T>::call<&T::m>\(args\.\.\.\): the arguments do not match m's parameters
#include <fiber/manager.hpp>

#include <string>

struct counter {
  int add(int k) { return n += k; }
  int n = 0;
};
BOOST_DESCRIBE_STRUCT(counter, (), (add))

int main() {
  fiber::Remote<counter> r;
  auto h = r.call_async<&counter::add>(std::string("three"));
  (void)h;
}
