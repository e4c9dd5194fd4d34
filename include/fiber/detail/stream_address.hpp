// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/stream_address.hpp
/// Who is at the other end of an nng stream, as an address a log line or
/// an error message can print.

#include <nng/nng.h>

#include <arpa/inet.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fiber::detail {

/// The peer's address of `s`, if nng knows it.
inline std::optional<nng_sockaddr> stream_remote_addr(nng_stream* s) {
  nng_sockaddr sa{};
  if (nng_stream_get_addr(s, NNG_OPT_REMADDR, &sa) != 0) return std::nullopt;
  return sa;
}

/// The peer of `s` as a URL (`tcp://10.0.0.2:5000`, `ipc://path (pid 42)`),
/// or empty. Example: `log("from ", stream_peer_address(s))`.
inline std::string stream_peer_address(nng_stream* s) {
  const auto addr = stream_remote_addr(s);
  if (!addr) return {};
  const auto& sa = *addr;
  char buf[INET6_ADDRSTRLEN] = {};
  std::uint64_t pid = 0;
  switch (sa.s_family) {
  case NNG_AF_IPC: // both ends see the socket path: the peer's pid tells them apart
    if (nng_stream_get_uint64(s, NNG_OPT_IPC_PEER_PID, &pid) == 0)
      return std::string("ipc://") + sa.s_ipc.sa_path + " (pid " + std::to_string(pid) + ")";
    return std::string("ipc://") + sa.s_ipc.sa_path;
  case NNG_AF_INET:
    inet_ntop(AF_INET, &sa.s_in.sa_addr, buf, sizeof buf);
    return "tcp://" + std::string(buf) + ":" + std::to_string(ntohs(sa.s_in.sa_port));
  case NNG_AF_INET6:
    inet_ntop(AF_INET6, sa.s_in6.sa_addr, buf, sizeof buf);
    return "tcp://[" + std::string(buf) + "]:" + std::to_string(ntohs(sa.s_in6.sa_port));
  default: return {};
  }
}

} // namespace fiber::detail
