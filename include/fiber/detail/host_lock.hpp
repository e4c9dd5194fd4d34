// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/host_lock.hpp
/// A lock held by one thread of one process on a host at a time: a bound,
/// listening abstract unix socket. A waiter connects to it and blocks until
/// the holder closes it (or dies), then tries again.

#include <fiber/backend/detail/unique_fd.hpp>
#include <fiber/detail/host_share.hpp>
#include <fiber/error.hpp>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

#include <sys/socket.h>
#include <unistd.h>

namespace fiber::detail {

/// Holds the host-wide lock `name` from construction to destruction (or
/// release()). Blocks the calling thread while another holds it: never on
/// fiber's runtime thread. `on_wait` (may be empty) is called each time the
/// constructor starts to wait. Throws error when no socket can be made or
/// another user holds the name.
/// Move-only. Example: `host_lock lk("fiber-object-1f2e-lock");`
class host_lock {
public:
  explicit host_lock(const std::string& name, const std::function<void()>& on_wait = {}) {
    const auto [a, len] = abstract_address(name);
    const auto* addr = reinterpret_cast<const sockaddr*>(&a);
    while (true) {
      unique_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!s) throw error(std::string("fiber: cannot make the host lock's socket: ") + std::strerror(errno));
      if (::bind(s.get(), addr, len) == 0 && ::listen(s.get(), 4096) == 0) {
        fd_ = std::move(s);
        return;
      }
      if (errno != EADDRINUSE) throw error(std::string("fiber: cannot take the host lock: ") + std::strerror(errno));
      unique_fd w(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!w || ::connect(w.get(), addr, len) != 0) continue; // released meanwhile
      if (!same_user(w.get()))
        throw error("fiber: the host lock " + name +
                    " is held by another user's process; end it, or run as another user");
      if (on_wait) on_wait();
      char byte;
      while (::read(w.get(), &byte, 1) < 0 && errno == EINTR) {
      } // 0 or ECONNRESET: the holder closed its socket
    }
  }
  host_lock(host_lock&&) noexcept = default;
  host_lock& operator=(host_lock&&) noexcept = default;

  /// Lets the next waiter in, before destruction.
  void release() noexcept { fd_.reset(); }

private:
  unique_fd fd_;
};

} // namespace fiber::detail
