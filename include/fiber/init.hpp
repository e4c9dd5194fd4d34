#pragma once
/// @file init.hpp
/// Program entry and helpers: fiber::init, cpu_count, current_process.

#include <fiber/detail/runtime.hpp>
#include <fiber/detail/worker.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

namespace fiber {

/// Must be the first statement of main. In a process a backend started as a
/// worker (it finds how to reach its master and the run's secret in the
/// environment — never in argv) this connects back, runs what it is sent and
/// exits: it never returns. In the master it starts fiber's runtime (one
/// background thread that owns every socket) and returns.
/// Throws fiber::config_error on a bad configuration.
inline void init(int argc, char** argv) {
  if (std::getenv("FIBER_INTERNAL_MASTER")) detail::run_worker();
  auto& rt = detail::runtime::instance();
  auto& a = rt.argv();
  a.assign(argv, argv + argc);
  if (a.empty()) a.emplace_back("fiber");
  (void)detail::config_get("backend"); // surface configuration errors now, in main
}

/// Number of CPUs this process may run on (its affinity mask), at least 1.
inline unsigned cpu_count() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return unsigned(n);
  }
  auto n = std::thread::hardware_concurrency();
  return n ? n : 1;
}

/// Identity of the calling process, as multiprocessing.current_process().
struct process_info {
  std::string name;   ///< "master", or the worker's name, e.g. "Process-2", "pool-1-w3"
  std::int64_t pid;
  bool is_worker;     ///< started by a backend on behalf of a master
};

inline process_info current_process() {
  auto& rt = detail::runtime::instance();
  return {rt.process_name(), ::getpid(), rt.is_worker()};
}

} // namespace fiber
