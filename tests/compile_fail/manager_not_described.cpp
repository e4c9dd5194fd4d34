// SPDX-License-Identifier: BSL-1.0
// A RemoteManager of a type without a Boost.Describe description.
// expect-first-error: fiber::RemoteManager<T> / fiber::Remote<T>: T must be described with BOOST_DESCRIBE_STRUCT or BOOST_DESCRIBE_CLASS
#include <fiber/manager.hpp>

struct env {
  int step(int a) { return a; }
};

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  fiber::RemoteManager<env> m{{.processes = 1}};
  auto e = m.make();
  return e.call<&env::step>(1);
}
