// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pool_progress.hpp
/// How a Pool's map reports its progress: to pool_options::progress, and as
/// a `[fiber] n/N (x%)` line on stderr when that is a terminal.

#include <fiber/config.hpp>

#include <cstddef>
#include <cstdio>
#include <functional>
#include <utility>

#include <unistd.h>

namespace fiber::detail {

/// A Pool's progress settings: the caller's callback and whether a progress
/// bar was asked for (pool_options::progress_bar). Empty: nothing reported.
class pool_progress {
public:
  /// (items done, items total; 0 while unknown)
  using callback = std::function<void(std::size_t, std::size_t)>;

  pool_progress() = default;
  pool_progress(callback cb, bool bar) : callback_(std::move(cb)), bar_(bar) {}

  /// The hook a map of `total` items (0: unknown) calls with each finished
  /// chunk's items, on the runtime thread; empty when nobody listens. The
  /// bar is drawn if asked for here or by the `progress` configuration key,
  /// and stderr is a terminal.
  std::function<void(std::size_t)> hook(std::size_t total) const {
    bool bar = (bar_ || config_bool("progress")) && ::isatty(2);
    if (!callback_ && !bar) return {};
    return report{callback_, bar, total};
  }

private:
  struct report {
    callback cb;
    bool bar;
    std::size_t total;
    std::size_t done = 0;

    void operator()(std::size_t n) {
      done += n;
      if (cb) cb(done, total);
      if (!bar) return;
      if (total) std::fprintf(stderr, "\r[fiber] %zu/%zu (%3.0f%%)", done, total, 100.0 * double(done) / double(total));
      else std::fprintf(stderr, "\r[fiber] %zu done", done);
      if (total && done >= total) std::fputc('\n', stderr);
    }
  };

  callback callback_;
  bool bar_ = false;
};

} // namespace fiber::detail
