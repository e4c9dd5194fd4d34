// SPDX-License-Identifier: BSL-1.0
#pragma once
// Helpers of the benchmarks that talk to a Slurm cluster themselves: running
// a Slurm command with a time limit, whether the controller answers, and
// waiting until a job name has left the queue.

#include <fiber/backend/slurm.hpp>

#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace bench {

/// Runs `argv` (no shell) and collects its output, killed after `timeout`.
inline fiber::detail::command_result run_command(std::vector<std::string> argv,
                                                 std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  fiber::detail::spawn_request r;
  r.argv = std::move(argv);
  return fiber::detail::run(r, timeout);
}

/// Whether sinfo answers within `timeout` and lists nodes; else `why` says
/// what went wrong (a dead controller makes sinfo retry for ~9 s).
inline bool slurm_reachable(std::string& why, std::chrono::milliseconds timeout) {
  try {
    auto r = run_command({"sinfo", "-h", "-o", "%D %t"}, timeout);
    if (r.timed_out) {
      why = "sinfo got no answer within " + std::to_string(timeout.count()) + " ms";
      return false;
    }
    if (r.ok() && !fiber::detail::trim(r.out).empty()) return true;
    why = r.message().empty() ? "sinfo printed nothing" : r.message();
  } catch (const std::exception& e) {
    why = e.what();
  }
  return false;
}

/// Waits (60 s at most) until squeue lists no job named `name`.
inline bool wait_gone(const std::string& name) {
  using namespace std::chrono_literals;
  for (auto deadline = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < deadline;) {
    auto r = run_command({"squeue", "-h", "-n", name, "-o", "%i"});
    if (r.ok() && fiber::detail::trim(r.out).empty()) return true;
    std::this_thread::sleep_for(50ms); // polling Slurm's state against a deadline
  }
  return false;
}

} // namespace bench
