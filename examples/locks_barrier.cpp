// SPDX-License-Identifier: BSL-1.0
// locks_barrier: three Processes bump one shared counter under a fiber::Lock
// (no update is lost), then meet the master at a fiber::Barrier. Once all
// four parties have passed it, every one of them sees every increment.
//
//   ./locks_barrier [rounds]            # local child processes
//   FIBER_BACKEND=slurm ./locks_barrier # the same program on a Slurm cluster

#include <fiber/error.hpp>
#include <fiber/process.hpp>
#include <fiber/sharedctypes.hpp>
#include <fiber/synchronize.hpp>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

constexpr int workers = 3;

void bump(fiber::Lock lock, fiber::Value<long> counter, fiber::Barrier barrier, long rounds) {
  for (long i = 0; i < rounds; ++i) {
    std::lock_guard guard{lock}; // fiber::Lock is Lockable: held across get + set, no update is lost
    counter.set(counter.get() + 1);
  }
  barrier.wait(); // returns once the master and all workers have arrived
  // Every worker finished its increments before it arrived: all are in now.
  if (counter.get() != workers * rounds)
    throw std::runtime_error("counter is " + std::to_string(counter.get())); // exit code 1
}

int main(int argc, char** argv) {
  fiber::init(argc, argv);

  const long rounds = argc > 1 ? std::stol(argv[1]) : 100;
  fiber::Lock lock;
  fiber::Value<long> counter{0};
  fiber::Barrier barrier{workers + 1}; // the workers and the master

  std::vector<fiber::Process> procs;
  for (int i = 0; i < workers; ++i) procs.emplace_back(fiber::target<&bump>, lock, counter, barrier, rounds);
  for (auto& p : procs) p.start();

  // A timeout breaks the barrier (broken_barrier_error here and in every
  // worker) rather than waiting forever if a worker never arrives.
  std::size_t index = 0;
  try {
    index = barrier.wait(std::chrono::seconds(30));
  } catch (const fiber::broken_barrier_error& e) {
    std::fprintf(stderr, "locks_barrier: %s\n", e.what());
    return 1; // the Processes' destructors stop the workers
  }
  long seen = counter.get();

  bool ok = seen == workers * rounds;
  for (auto& p : procs) {
    p.join();
    ok = ok && p.exitcode() == 0;
  }
  std::printf("%d workers x %ld locked increments = %ld (master passed the barrier as #%zu): %s\n", workers, rounds,
              seen, index, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
