// SPDX-License-Identifier: BSL-1.0
// async_pool: a fiber::Pool awaited from an Asio coroutine. async_apply and
// async_map take any completion token; with asio::use_awaitable the
// coroutine co_awaits the result and resumes on its own executor (here, the
// io_context run by main), while the workers compute.
//
//   ./async_pool [n]                    # local workers

#include <fiber/pool.hpp>

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <cstdio>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

// Steps of the Collatz sequence from n down to 1.
long collatz_steps(long n) {
  long steps = 0;
  for (; n != 1; ++steps) n = n % 2 ? 3 * n + 1 : n / 2;
  return steps;
}

using StepsPool = fiber::Pool<&collatz_steps>;

asio::awaitable<bool> run(StepsPool& pool, long n) {
  long one = co_await pool.async_apply(27L, asio::use_awaitable); // one task
  std::vector<long> inputs(static_cast<std::size_t>(n));
  std::iota(inputs.begin(), inputs.end(), 1L);
  std::vector<long> all = co_await pool.async_map(inputs, asio::use_awaitable); // results in input order

  long total = std::accumulate(all.begin(), all.end(), 0L);
  std::printf("27 takes %ld steps; 1..%ld take %ld steps in all\n", one, n, total);
  bool ok = one == collatz_steps(27) && all.size() == inputs.size(); // check against computing it here
  for (std::size_t i = 0; ok && i < all.size(); ++i) ok = all[i] == collatz_steps(inputs[i]);
  co_return ok;
}

int main(int argc, char** argv) {
  fiber::init(argc, argv);

  const long n = argc > 1 ? std::stol(argv[1]) : 10'000;
  StepsPool pool{fiber::target<&collatz_steps>, {.processes = 2}};

  asio::io_context io;
  bool ok = false;
  std::exception_ptr error;
  asio::co_spawn(io, run(pool, n), [&](std::exception_ptr e, bool result) { // a failed task: e is set
    error = e;
    ok = result;
  });
  io.run(); // runs the coroutine until it completes

  pool.close();
  pool.join();
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "async_pool: %s\n", e.what());
    }
    return 1;
  }
  return ok ? 0 : 1;
}
