// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/local.hpp
/// The local backend: each job-backed process is this same executable
/// (/proc/self/exe) started with posix_spawn in a process group of its own,
/// so a signal reaches everything it started. Exit is observed through a
/// pidfd (Linux >= 5.3) watched by Asio — no SIGCHLD handler is installed and
/// no polling loop runs; where pidfd_open is missing, a timer polls
/// waitpid(WNOHANG) instead. Workers dial back over ipc:// in a 0700 run
/// directory, so other users cannot reach the master.

#include <fiber/backend/launcher.hpp>
#include <fiber/backend/local/launcher.hpp>

#include <memory>
#include <string_view>

namespace fiber::backend {

/// Policy: job-backed processes are child processes of the master.
struct local {
  static constexpr std::string_view name = "local"; ///< the backend's name, as FIBER_BACKEND spells it
  /// A launcher that starts the master's own binary with posix_spawn; reads no configuration.
  static std::shared_ptr<launcher> make(const launch_context& ctx) {
    return std::make_shared<detail::local_launcher>(ctx.executor);
  }
};

} // namespace fiber::backend
