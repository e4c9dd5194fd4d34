// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/heartbeat_period.hpp
/// How long a process waits between heartbeats: the configured period,
/// stretched with the number of links it holds so a large master stays cheap.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace fiber::detail {

/// The heartbeat period of a process holding `links` links: `interval`
/// (heartbeat_interval_ms), stretched to 1 ms a link, so that a master's
/// heartbeat work stays at a few % of a core however many workers it holds
/// (Dask's scheduler stretches its workers' period likewise;
/// docs/RATIONALE.md, "Scale"). `heartbeat_period(10000, 500ms) == 10s`.
inline std::chrono::milliseconds heartbeat_period(std::size_t links, std::chrono::milliseconds interval) {
  return std::max(interval, std::chrono::milliseconds(links));
}

/// Links open in this process (peer_link counts them). Any thread.
inline std::atomic<std::size_t>& open_links() {
  static std::atomic<std::size_t> n{0};
  return n;
}

/// The longest period this process has announced to a peer so far, in ms
/// (0: none): a peer that lost its link may wait that long, times
/// heartbeat_timeout_ms / heartbeat_interval_ms, before it notices. Any thread.
inline std::atomic<std::int64_t>& longest_announced_period() {
  static std::atomic<std::int64_t> ms{0};
  return ms;
}

/// `period` announced: remembered if it is the longest yet.
inline void note_announced_period(std::chrono::milliseconds period) {
  auto& m = longest_announced_period();
  auto cur = m.load(std::memory_order_relaxed);
  while (period.count() > cur && !m.compare_exchange_weak(cur, period.count(), std::memory_order_relaxed)) {
  }
}

} // namespace fiber::detail
