// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pending_count.hpp
/// A count of operations in flight that another thread can wait to see
/// reach zero (a Queue handle's async puts, a process's deliveries).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace fiber::detail {

/// Any thread.
class pending_count {
public:
  void started() {
    std::lock_guard lk(m_);
    ++n_;
  }
  void done() {
    std::lock_guard lk(m_);
    if (--n_ == 0) cv_.notify_all();
  }
  /// Until none is in flight.
  void wait() {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return n_ == 0; });
  }
  /// The same, at most `limit`; whether none is in flight.
  bool wait_for(std::chrono::milliseconds limit) {
    std::unique_lock lk(m_);
    return cv_.wait_for(lk, limit, [&] { return n_ == 0; });
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  std::size_t n_ = 0;
};

} // namespace fiber::detail
