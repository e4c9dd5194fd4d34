// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/listen_once.hpp
/// A launcher's listen URL, found once by a lookup that may block (a DNS
/// lookup, a command, an API call): what launcher::prepare() does off the runtime thread.

#include <mutex>
#include <string>
#include <utility>

namespace fiber::detail {

/// The URL a launcher's workers dial, found by the first get(); a lookup
/// that throws is tried again by the next call. Any thread.
class listen_once {
public:
  /// The URL; `find()` (returns it, may block, may throw) runs the first time.
  /// Example: `return listen_.get([&] { return tcp_listen_url(route_source(host, port), tls); });`
  template <class Find>
  const std::string& get(Find&& find) {
    std::call_once(once_, [&] { url_ = std::forward<Find>(find)(); });
    return url_;
  }

private:
  std::once_flag once_;
  std::string url_;
};

} // namespace fiber::detail
