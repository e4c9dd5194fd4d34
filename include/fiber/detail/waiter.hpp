// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/waiter.hpp
/// A request waiting at a synchronization service, and the lists the
/// services keep them in: find by (link, wait id), drop a vanished link's,
/// arm a timeout, answer them all.

#include <fiber/detail/broker_wire.hpp>
#include <fiber/detail/service.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// One waiting request. Runtime thread only.
struct waiter {
  std::uint64_t peer = 0, wait = 0, thread = 0; ///< who: link (0: this process), wait id, thread token
  reply_fn reply;                               ///< answered exactly once, then the waiter is dropped
  std::unique_ptr<asio::steady_timer> timer;    ///< its timeout; destroyed (cancelled) with it
  std::uint64_t n = 0;                          ///< the service's datum (RLock depth, Barrier index)
  std::uint8_t state = 0;                       ///< the service's state of this request
};

using waiter_list = std::deque<waiter>;

/// Removes and returns the waiter (peer, wait), if it is in `l`.
inline std::optional<waiter> take_waiter(waiter_list& l, std::uint64_t peer, std::uint64_t wait) {
  auto it = std::find_if(l.begin(), l.end(), [&](const waiter& w) { return w.peer == peer && w.wait == wait; });
  if (it == l.end()) return std::nullopt;
  waiter w = std::move(*it);
  l.erase(it);
  return w;
}

/// Drops `peer`'s waiters unanswered (its link is closed); how many there were.
inline std::size_t drop_waiters(waiter_list& l, std::uint64_t peer) {
  return std::erase_if(l, [&](const waiter& w) { return w.peer == peer; });
}

/// Answers every waiter of `l` with `tag` and `args`, and empties it.
template <class... A>
void answer_all(waiter_list& l, wait_tag tag, const A&... args) {
  for (auto& w : std::exchange(l, {})) reply_wait(w.reply, tag, args...);
}

/// Answers every waiter of `l` with the failure `status` (e.g. worker_lost).
inline void fail_all(waiter_list& l, wire_status status, const std::string& why) {
  for (auto& w : std::exchange(l, {})) reply_text(w.reply, status, why);
}

/// After `ms` (> 0), `fire(peer, wait)` runs on `ex` unless the waiter was
/// answered first (then the timer is gone with it, or `fire` finds no such
/// waiter any more and must do nothing). `fire` must hold its service weakly.
template <class Fire>
void arm_timeout(const asio::any_io_executor& ex, waiter& w, std::int64_t ms, Fire fire) {
  w.timer = std::make_unique<asio::steady_timer>(ex, std::chrono::milliseconds(ms));
  w.timer->async_wait([fire = std::move(fire), peer = w.peer, wait = w.wait](std::error_code ec) {
    if (!ec) fire(peer, wait);
  });
}

} // namespace fiber::detail
