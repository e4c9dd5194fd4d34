// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/stream_address.hpp
/// Who is at the other end of an nng stream or a socket, as an address a
/// log line or an error message can print.

#include <nng/nng.h>

#include <asio/error.hpp>
#include <asio/ip/address.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>

namespace fiber::detail {

/// Splits a URL's "host:port" or "[v6]:port" (the part after `tcp://`);
/// false if it is not one. Example: `split_host_port("[::1]:80", h, p)` sets h = "::1", p = "80".
inline bool split_host_port(const std::string& hp, std::string& host, std::string& port) {
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos || colon + 1 == hp.size()) return false;
  host = hp.substr(0, colon);
  port = hp.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return port.find_first_not_of("0123456789") == std::string::npos && port.size() <= 5 && std::stoul(port) <= 65535;
}

/// The host of a tcp:// or tls+tcp:// URL `url` if it is a name to resolve;
/// empty for a numeric (an IPv6 scope too), `*` or empty host and any other scheme.
/// Example: `listen_host_name("tcp://localhost:0") == "localhost"`.
inline std::string listen_host_name(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos || (url.compare(0, scheme, "tcp") != 0 && url.compare(0, scheme, "tls+tcp") != 0))
    return {};
  std::string host, port;
  if (!split_host_port(url.substr(scheme + 3), host, port) || host.empty() || host == "*") return {};
  std::error_code numeric;
  (void)asio::ip::make_address(host, numeric); // as socket_acceptor parses it
  return numeric ? host : std::string();
}

/// A tcp:// or tls+tcp:// listen URL whose host name is replaced by the
/// address it resolves to (blocking: call it off the runtime thread); a
/// URL without a host name (listen_host_name) comes back unchanged.
/// Throws std::system_error naming the URL if the name does not resolve.
/// Example: `numeric_listen_url("tcp://localhost:0") == "tcp://127.0.0.1:0"`.
inline std::string numeric_listen_url(const std::string& url) {
  const std::string host = listen_host_name(url);
  if (host.empty()) return url;
  const auto scheme = url.find("://");
  const std::string port = url.substr(url.rfind(':') + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found)
    throw std::system_error(asio::error::host_not_found, "fiber: cannot listen on " + url);
  const auto* sa = found->ai_addr;
  const bool v6 = sa->sa_family == AF_INET6;
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(sa->sa_family,
              v6 ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr)
                 : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr),
              buf, sizeof buf);
  ::freeaddrinfo(found);
  return url.substr(0, scheme + 3) + (v6 ? "[" + std::string(buf) + "]" : std::string(buf)) + ":" + port;
}

/// An IP peer as a URL: `tcp://10.0.0.2:5000`, `tcp://[::1]:5000`. `addr`
/// points to an in_addr or in6_addr; `port` is in network order.
inline std::string ip_peer_url(int family, const void* addr, std::uint16_t port) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, addr, buf, sizeof buf);
  const std::string host = family == AF_INET6 ? "[" + std::string(buf) + "]" : std::string(buf);
  return "tcp://" + host + ":" + std::to_string(ntohs(port));
}

/// An ipc:// peer: both ends see the socket's path, the peer's pid tells them apart.
inline std::string ipc_peer_url(const char* path, std::optional<std::uint64_t> pid) {
  return std::string("ipc://") + path + (pid ? " (pid " + std::to_string(*pid) + ")" : std::string());
}

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
  std::uint64_t pid = 0;
  switch (sa.s_family) {
  case NNG_AF_IPC:
    return ipc_peer_url(sa.s_ipc.sa_path, nng_stream_get_uint64(s, NNG_OPT_IPC_PEER_PID, &pid) == 0
                                              ? std::optional<std::uint64_t>(pid)
                                              : std::nullopt);
  case NNG_AF_ABSTRACT:
    return "abstract://" + std::string(reinterpret_cast<const char*>(sa.s_abstract.sa_name), sa.s_abstract.sa_len);
  case NNG_AF_INET: return ip_peer_url(AF_INET, &sa.s_in.sa_addr, sa.s_in.sa_port);
  case NNG_AF_INET6: return ip_peer_url(AF_INET6, sa.s_in6.sa_addr, sa.s_in6.sa_port);
  default: return {};
  }
}

/// The peer of the connected socket `fd`, as stream_peer_address, or empty.
inline std::string socket_peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  switch (ss.ss_family) {
  case AF_UNIX: {
    std::optional<std::uint64_t> pid;
    ucred cred{};
    socklen_t cl = sizeof cred;
    // An unnamed peer (a socketpair: inherited_link.hpp) has its maker's
    // credentials, not its own: no pid then.
    if (len > offsetof(sockaddr_un, sun_path) && ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
      pid = std::uint64_t(cred.pid);
    const char* sp = reinterpret_cast<const sockaddr_un&>(ss).sun_path;
    if (len > offsetof(sockaddr_un, sun_path) + 1 && sp[0] == '\0') // abstract: a name after a NUL
      return "abstract://" + std::string(sp + 1, len - offsetof(sockaddr_un, sun_path) - 1) +
             (pid ? " (pid " + std::to_string(*pid) + ")" : std::string());
    std::string path(sp, ::strnlen(sp, sizeof(sockaddr_un::sun_path)));
    return ipc_peer_url(path.c_str(), pid);
  }
  case AF_INET: {
    const auto& in = reinterpret_cast<const sockaddr_in&>(ss);
    return ip_peer_url(AF_INET, &in.sin_addr, in.sin_port);
  }
  case AF_INET6: {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss);
    return ip_peer_url(AF_INET6, &in6.sin6_addr, in6.sin6_port);
  }
  default: return {};
  }
}

} // namespace fiber::detail
