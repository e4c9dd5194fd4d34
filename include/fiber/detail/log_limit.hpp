// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/log_limit.hpp
/// A log line that strangers can make repeat (a peer refused before it
/// authenticates): at most one record per interval, the next counting those left out.

#include <fiber/log.hpp>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <utility>

namespace fiber::detail {

/// Passes at most one record per `every`; the next one that passes says how
/// many were left out. Thread-safe.
class log_limit {
public:
  explicit log_limit(std::chrono::milliseconds every) : every_(every) {}

  /// Logs `parts` at `level` unless a record passed less than `every` ago;
  /// true if it did.
  template <class... Parts>
  bool operator()(log_level level, const Parts&... parts) {
    const auto now = std::chrono::steady_clock::now();
    std::uint64_t left_out = 0;
    {
      std::lock_guard lk(m_);
      if (passed_ && now - last_ < every_) {
        ++left_out_;
        return false;
      }
      passed_ = true;
      last_ = now;
      left_out = std::exchange(left_out_, 0);
    }
    if (left_out) log(level, parts..., " (and ", left_out, " more like it since the last such line)");
    else log(level, parts...);
    return true;
  }

  /// The next record passes, as at the start (tests that need the line).
  void reset() {
    std::lock_guard lk(m_);
    passed_ = false;
  }

private:
  std::mutex m_;
  std::chrono::milliseconds every_;
  std::chrono::steady_clock::time_point last_{};
  std::uint64_t left_out_ = 0;
  bool passed_ = false;
};

/// The limit on lines about refused peers: one per 5 s per process.
inline log_limit& refusal_log() {
  static log_limit l{std::chrono::seconds(5)};
  return l;
}

} // namespace fiber::detail
