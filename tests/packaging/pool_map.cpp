// SPDX-License-Identifier: BSL-1.0
// A consumer that uses fiber for real: a Pool of two local worker processes
// maps a function over a vector. Built by the FetchContent (git) consumer.
#include <fiber/fiber.hpp>
#include <fiber/version.hpp>

#include <cstdio>
#include <vector>

int square(int x) { return x * x; }

int main(int argc, char** argv) {
  fiber::init(argc, argv); // in a worker this runs tasks and never returns

  fiber::Pool pool{fiber::target<&square>, {.processes = 2}};
  const std::vector<int> in{1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int> out = pool.map(in);
  const std::vector<int> want{1, 4, 9, 16, 25, 36, 49, 64};
  const bool ok = out == want;
  std::printf("consumer: fiber %s, Pool map over %u workers %s\n", FIBER_VERSION_STRING, pool.processes(),
              ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
