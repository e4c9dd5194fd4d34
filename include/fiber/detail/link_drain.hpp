// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/link_drain.hpp
/// Waiting for a link to end after its job's end was reported: the backend's
/// report can overtake the job's last frames.

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <system_error>

namespace fiber::detail {

/// A job's end reported while its link is still open: the backend's report
/// can overtake the job's last frames, so its owner (Process, Pool) waits
/// for the link to end (every frame read; a dead process's end closes at
/// once) before acting on it, and at most this long (a link that never
/// ends, e.g. a cut-off node).
inline constexpr std::chrono::seconds link_drain_limit{2};

/// Runs `expired` on `ex` after link_drain_limit, unless the returned timer
/// is cancelled or destroyed first. On `ex` (the runtime thread).
inline std::unique_ptr<asio::steady_timer> start_link_drain(const asio::any_io_executor& ex,
                                                            std::function<void()> expired) {
  auto t = std::make_unique<asio::steady_timer>(ex, link_drain_limit);
  t->async_wait([expired = std::move(expired)](std::error_code ec) {
    if (!ec) expired();
  });
  return t;
}

} // namespace fiber::detail
