// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file init.hpp
/// Program entry and helpers: fiber::init, cpu_count, current_process,
/// parent_process.

#include <fiber/detail/host_name.hpp>
#include <fiber/detail/metrics_hook.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/worker.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace fiber {

/// Must be the first statement of main. In a process a backend started as a
/// worker (it finds how to reach its master and the run's secret in the
/// environment — never in argv) this connects back, runs what it is sent and
/// exits: it never returns. In the master it starts fiber's runtime (one
/// background thread that owns every socket) and returns.
/// fiber's own FIBER_INTERNAL_* variables are gone from the environment
/// before any code of the program runs (programs a worker starts do not see
/// them). With the key metrics_address set it starts the metrics endpoint
/// (fiber/metrics.hpp). Throws fiber::config_error on a bad configuration
/// (an unknown key, a value outside its range, metrics_address in a program
/// without fiber/metrics.hpp).
inline void init(int argc, char** argv) {
  if (detail::worker_environment().is_worker()) detail::run_worker();
  detail::check_config(); // surface configuration errors now, in main
  auto& rt = detail::runtime::instance();
  auto& a = rt.argv();
  a.assign(argv, argv + argc);
  if (a.empty()) a.emplace_back("fiber");
  (void)detail::config_get("backend");
  detail::start_metrics_if_configured();
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
  std::string name; ///< "master", or the worker's name, e.g. "Process-2", "pool-1-w3"
  std::int64_t pid; ///< the OS pid on this host (getpid())
  bool is_worker;   ///< started by a backend on behalf of a master
};

/// The calling process's name, pid and whether it is a worker; callable from any thread.
inline process_info current_process() {
  auto& rt = detail::runtime::instance();
  return {rt.process_name(), ::getpid(), rt.is_worker()};
}

/// The process that started this worker, as multiprocessing.parent_process().
/// Copyable; its functions may be called from any thread.
struct parent_info {
  std::string name; ///< the parent's name: "master", or a worker's name
  std::int64_t pid; ///< the parent's pid on its own host
  std::string host; ///< the parent's host name

  /// True while the parent runs. On another host than the parent's this is
  /// true for as long as this worker runs: a worker whose master vanishes
  /// exits within the heartbeat timeout.
  bool is_alive() const {
    if (host != detail::host_name()) return true;
    return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
  }

  /// Waits at most `timeout` for the parent to end; true if it has. On
  /// another host, waits the whole timeout and returns false (see is_alive).
  template <class Rep, class Period>
  bool join(std::chrono::duration<Rep, Period> timeout) const {
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
    if (host != detail::host_name()) {
      std::this_thread::sleep_for(timeout);
      return false;
    }
    int fd = int(::syscall(SYS_pidfd_open, pid_t(pid), 0));
    if (fd < 0) return !is_alive();
    ::pollfd p{fd, POLLIN, 0};
    int r;
    do r = ::poll(&p, 1, int(std::min<long long>(ms, 1LL << 30)));
    while (r < 0 && errno == EINTR);
    ::close(fd);
    return r > 0;
  }
};

/// The parent of this worker (the process whose Process or Pool started
/// it), or nullopt in a master. `if (auto p = fiber::parent_process()) p->join(1s);`
inline std::optional<parent_info> parent_process() {
  if (!detail::runtime::instance().is_worker()) return std::nullopt;
  const auto& env = detail::worker_environment();
  if (env.parent_name.empty() || env.parent_pid.empty() || env.parent_host.empty()) return std::nullopt;
  return parent_info{env.parent_name, std::strtoll(env.parent_pid.c_str(), nullptr, 10), env.parent_host};
}

} // namespace fiber
