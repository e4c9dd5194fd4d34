// SPDX-License-Identifier: BSL-1.0
// Control for the remote_* cases: the same setup, valid. If this fails, the
// harness (include paths, flags) is broken, not the diagnostics.
// expect-compile: success
#include <fiber/manager.hpp>

#include <asio/use_future.hpp>

struct counter {
  int add(int k) { return n += k; }
  int value() const { return n; }
  int n = 0;
};
BOOST_DESCRIBE_STRUCT(counter, (), (add, value))

int main() {
  fiber::RemoteManager<counter> m{{.processes = 1}};
  fiber::Remote<counter> r = m.make();
  r.call<&counter::add>(short{3});
  auto f = r.async_call<&counter::value>(asio::use_future);
  return r.call_async<&counter::value>().get() == f.get() ? 0 : 1;
}
