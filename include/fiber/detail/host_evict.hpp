// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/host_evict.hpp
/// The run's processes on one host ask each other for room in the object
/// store: each process that maps a segment listens on an abstract socket
/// named for the run and its pid; a connection asks it to evict.

#include <fiber/backend/detail/unique_fd.hpp>
#include <fiber/detail/host_share.hpp>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace fiber::detail {

/// The abstract socket name of process `pid`'s store in the run whose
/// segments are named `name`.
inline std::string evict_name(const std::string& name, int pid) { return name + "-p" + std::to_string(pid); }

/// This process's listening socket for eviction requests (non-blocking;
/// serve it with host_server), or empty when it cannot be bound.
inline unique_fd evict_listener(const std::string& name) {
  unique_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const auto [a, len] = abstract_address(evict_name(name, int(::getpid())));
  if (!s || ::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0 || ::listen(s.get(), 128) != 0) return {};
  return s;
}

/// Asks each process in `pids` (other than this one) to evict what no
/// reference of its own uses, all at once, and waits until each answered
/// (one byte, once its mappings are gone), ended, or let `patience` pass.
/// Blocks the calling thread: never fiber's runtime thread.
/// Example: `ask_to_evict(object_store::segment_name(), holders);`
inline void ask_to_evict(const std::string& name, const std::vector<int>& pids, int patience_ms = 2000) {
  std::vector<unique_fd> asked;
  for (int pid : pids) {
    if (pid == int(::getpid())) continue;
    unique_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const auto [a, len] = abstract_address(evict_name(name, pid));
    if (s && ::connect(s.get(), reinterpret_cast<const sockaddr*>(&a), len) == 0 && same_user(s.get()))
      asked.push_back(std::move(s));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(patience_ms);
  for (auto& s : asked) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const timeval tv{time_t(left.count() / 1000000), suseconds_t(left.count() % 1000000)};
    (void)::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char byte;
    while (::read(s.get(), &byte, 1) < 0 && errno == EINTR) {
    }
  }
}

} // namespace fiber::detail
