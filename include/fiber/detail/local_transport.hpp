// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/local_transport.hpp
/// Where workers on this machine dial back (configuration key
/// local_transport): ipc:// in the 0700 run directory, or the loopback
/// interface over tcp:// or tls+tcp://.

#include <fiber/config.hpp>
#include <fiber/error.hpp>

#include <string>

namespace fiber::detail {

/// The URL a master listens on for its local workers: "ipc://" by default;
/// tcp/tls listen on 127.0.0.1 only. Throws config_error for another value.
/// Example: with local_transport = tcp, `local_listen_base() == "tcp://127.0.0.1:0"`.
inline std::string local_listen_base() {
  auto t = config_string("local_transport");
  if (t == "ipc" || t.empty()) return "ipc://";
  if (t == "tcp") return "tcp://127.0.0.1:0";
  if (t == "tls") return "tls+tcp://127.0.0.1:0";
  throw config_error("fiber: configuration key 'local_transport' must be ipc, tcp or tls, got '" + t + "'");
}

} // namespace fiber::detail
