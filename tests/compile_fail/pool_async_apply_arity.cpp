// SPDX-License-Identifier: BSL-1.0
// Pool::async_apply with the wrong number of arguments before the token.
// expect-first-error: fiber: wrong number of arguments for the target \(see F below\)
#include <fiber/pool.hpp>

#include <asio/use_future.hpp>

int square(int x) { return x * x; }

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  fiber::Pool pool{fiber::target<&square>};
  auto f = pool.async_apply(1, 2, asio::use_future);
  (void)f;
  return 0;
}
