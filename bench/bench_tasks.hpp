// SPDX-License-Identifier: BSL-1.0
#pragma once
// Tasks the overhead benchmarks time (bench_overhead, bench_hosts): a sleep
// that stamps its entry and exit, and the gaps between a worker's tasks.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace bench {

/// CLOCK_MONOTONIC in µs: one clock for every process on the machine.
inline double monotonic_us() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) / 1e3;
}

/// Which worker ran a task, and CLOCK_MONOTONIC at its entry and exit [µs].
struct stamp {
  std::int64_t pid;
  double in_us, out_us;
};

/// The timed task: sleeps `us` µs and stamps itself.
inline stamp sleep_task(int us) {
  const double in = monotonic_us();
  std::this_thread::sleep_for(std::chrono::microseconds(us));
  return {std::int64_t(getpid()), in, monotonic_us()};
}

/// Per worker, the gaps between consecutive tasks [µs]: from one task's exit
/// to the next one's entry.
inline std::vector<double> worker_gaps(std::vector<stamp> v) {
  std::sort(v.begin(), v.end(),
            [](const stamp& a, const stamp& b) { return a.pid != b.pid ? a.pid < b.pid : a.in_us < b.in_us; });
  std::vector<double> gaps;
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i].pid == v[i - 1].pid) gaps.push_back(v[i].in_us - v[i - 1].out_us);
  return gaps;
}

} // namespace bench
