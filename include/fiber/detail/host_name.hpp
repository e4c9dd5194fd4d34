// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/host_name.hpp
/// This machine's host name (gethostname), read once: a job's host, a
/// worker's handshake, parent_process().

#include <string>

#include <unistd.h>

namespace fiber::detail {

/// The host name, "localhost" if the kernel gives none. Thread-safe.
inline const std::string& host_name() {
  static const std::string name = [] {
    char h[256] = {};
    if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return std::string("localhost");
    return std::string(h);
  }();
  return name;
}

} // namespace fiber::detail
