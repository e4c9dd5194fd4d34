// SPDX-License-Identifier: BSL-1.0
// wait: fiber::wait (multiprocessing.connection.wait) over several Pipe ends
// and Processes at once. Three workers count primes below different limits;
// the master handles each result, and each worker's exit, as soon as it is
// ready, whatever the order.
//
//   ./wait                              # local child processes

#include <fiber/error.hpp>
#include <fiber/pipe.hpp>
#include <fiber/process.hpp>
#include <fiber/wait.hpp>

#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

// A worker: sends the number of primes below `limit` (a sieve) and returns.
void count_primes(fiber::Connection<long> out, long limit) {
  std::vector<bool> composite(std::size_t(limit), false);
  long count = 0;
  for (long i = 2; i < limit; ++i) {
    if (composite[std::size_t(i)]) continue;
    ++count;
    for (long j = i * i; j < limit; j += i) composite[std::size_t(j)] = true;
  }
  out.send(count);
}

struct job {
  long limit, expected;
  fiber::Connection<long> result; // receive-only end
  fiber::Process proc;
  bool received = false, ended = false;
};

int main(int argc, char** argv) {
  fiber::init(argc, argv);

  std::vector<job> jobs;
  jobs.reserve(3); // fiber::wait names objects by address: keep them in place
  const std::pair<long, long> limits[] = {{2'000'000, 148'933}, {10'000, 1'229}, {200'000, 17'984}}; // (limit, primes)
  for (auto [limit, expected] : limits) {
    auto [rx, tx] = fiber::Pipe<long>(false); // rx only receives, tx only sends
    fiber::Process p{fiber::target<&count_primes>, std::move(tx), limit};
    jobs.push_back({limit, expected, std::move(rx), std::move(p)});
  }
  for (auto& j : jobs) j.proc.start();

  bool ok = true;
  for (std::size_t pending = 2 * jobs.size(); pending > 0 && ok;) {
    std::vector<fiber::waitable> watch; // what is still outstanding
    for (auto& j : jobs) {
      if (!j.received) watch.push_back(j.result);
      if (!j.ended) watch.push_back(j.proc);
    }
    auto ready = fiber::wait(watch, std::chrono::seconds(30));
    if (ready.empty()) ok = false; // nothing in 30 s: give up
    for (auto& r : ready)
      for (auto& j : jobs) {
        if (!j.received && r == j.result) {
          try {
            long n = j.result.recv(); // ready: does not block
            std::printf("primes below %ld: %ld\n", j.limit, n);
            ok = ok && n == j.expected;
          } catch (const fiber::eof_error&) { // ready because the worker's end is gone, unsent
            ok = false;
          }
          j.received = true, --pending;
        } else if (!j.ended && r == j.proc) {
          j.proc.join(); // ready: it has ended
          ok = ok && j.proc.exitcode() == 0;
          j.ended = true, --pending;
        }
      }
  }
  return ok ? 0 : 1;
}
