// SPDX-License-Identifier: BSL-1.0
// shared_values: fiber::Value and fiber::Array, as multiprocessing.Value and
// multiprocessing.Array. Three Processes sum the squares of their share of
// 1..n: each adds into one shared total (a read-modify-write, so under the
// Value's lock) and writes its own partial sum into its slot of an Array.
//
//   ./shared_values [n]                 # local child processes

#include <fiber/process.hpp>
#include <fiber/sharedctypes.hpp>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

constexpr long workers = 3;

// Worker `k` takes the numbers i = k+1, k+1+workers, ... up to n.
void sum_squares(fiber::Value<long> total, fiber::Array<long> partial, long k, long n) {
  long mine = 0, batch = 0, count = 0;
  for (long i = k + 1; i <= n; i += workers) {
    batch += i * i;
    if (++count % 100 == 0 || i + workers > n) { // into the total every 100 numbers, and at the end
      std::lock_guard guard{total.get_lock()};   // get + set together: no update lost
      total.set(total.get() + batch);
      mine += batch;
      batch = 0;
    }
  }
  partial.set(std::size_t(k), mine); // one element, one atomic set: no lock needed
}

int main(int argc, char** argv) {
  fiber::init(argc, argv);

  const long n = argc > 1 ? std::stol(argv[1]) : 3000;
  fiber::Value<long> total{0};         // kept in this process
  fiber::Array<long> partial(workers); // `workers` zeros

  std::vector<fiber::Process> procs;
  for (long k = 0; k < workers; ++k) procs.emplace_back(fiber::target<&sum_squares>, total, partial, k, n);
  for (auto& p : procs) p.start();
  for (auto& p : procs) p.join();

  long sum_of_partials = 0;
  for (std::size_t k = 0; k < partial.size(); ++k) sum_of_partials += partial.get(k);
  const long expected = n * (n + 1) * (2 * n + 1) / 6;
  std::printf("sum of squares 1..%ld: total %ld, partials add up to %ld, expected %ld\n", n, total.get(),
              sum_of_partials, expected);
  return total.get() == expected && sum_of_partials == expected ? 0 : 1;
}
