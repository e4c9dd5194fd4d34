// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/call_sync.hpp
/// What waiting for one Pool call needs, whatever its result type: the
/// chunks submitted and finished, under a mutex the caller waits on.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>

namespace fiber::detail {

/// Filled on the runtime thread, read by the caller under `m`.
struct call_sync {
  std::mutex m;
  std::condition_variable cv;
  std::size_t expected = 0;      // chunks submitted
  std::size_t finished = 0;      // chunks finished (result or failure stored)
  std::size_t chunk_waiters = 0; // imap consumers waiting for the next chunk (others wait for completion)
  bool input_done = false;
  std::function<void()> on_complete; // runtime thread, once

  bool complete() const { return input_done && finished == expected; }
  void wait() {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return complete(); });
  }
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock lk(m);
    return cv.wait_for(lk, timeout, [&] { return complete(); });
  }
};

} // namespace fiber::detail
