// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/net_address.hpp
/// Addresses of this machine: the non-loopback addresses a host name resolves
/// to, the local address of the route towards a host (nothing is sent), and
/// the URL a master listens at for workers on other hosts.

#include <fiber/backend/detail/unique_fd.hpp>
#include <fiber/backend/launcher.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <vector>

namespace fiber::detail {

inline bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    auto& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return true;
}

inline std::string numeric(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  if (::getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return sa->sa_family == AF_INET6 ? "[" + std::string(host) + "]" : host;
}

/// Non-loopback addresses of `host` (IPv4 first), numeric, IPv6 in brackets.
inline std::vector<std::string> resolve(const std::string& host) {
  std::vector<std::string> v4, v6;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return {};
  for (auto* p = res; p; p = p->ai_next) {
    if (is_loopback(p->ai_addr)) continue;
    auto s = numeric(p->ai_addr, p->ai_addrlen);
    auto& v = p->ai_family == AF_INET ? v4 : v6;
    if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  }
  ::freeaddrinfo(res);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

/// The local address the kernel would use to reach `host` (UDP connect +
/// getsockname: no packet is sent). Empty if unroutable.
inline std::string route_source(const std::string& host, const std::string& port = "6817") {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return {};
  std::string out;
  for (auto* p = res; p && out.empty(); p = p->ai_next) {
    unique_fd s(::socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!s || ::connect(s.get(), p->ai_addr, p->ai_addrlen) != 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0)
      out = numeric(reinterpret_cast<sockaddr*>(&ss), len);
  }
  ::freeaddrinfo(res);
  return out;
}

/// Controller hosts/addresses from `scontrol show config` output:

/// What the jobs of `specs` run, for messages: the first one's executable.
inline std::string program_of(const std::vector<backend::job_spec>& specs) {
  return specs.empty() || specs[0].argv.empty() ? std::string("the program") : specs[0].argv[0];
}

/// The URL a master listens at for workers on other hosts: `addr` (an IPv6
/// address gets brackets) on an ephemeral port, over TLS or plain TCP.
/// tcp_listen_url("10.0.0.1", true) == "tls+tcp://10.0.0.1:0".
inline std::string tcp_listen_url(std::string addr, bool tls) {
  if (addr.find(':') != std::string::npos && addr.front() != '[') addr = "[" + addr + "]";
  return std::string(tls ? "tls+tcp://" : "tcp://") + addr + ":0";
}

} // namespace fiber::detail
