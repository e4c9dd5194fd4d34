// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/host_share.hpp
/// One copy of an object per host: the first process on a host to want it
/// claims an abstract unix socket named after the object and fetches it;
/// the others connect and receive its sealed memfd (SCM_RIGHTS), served by
/// host_server, which other such sockets of a host use too.

#include <fiber/backend/detail/unique_fd.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace fiber::detail {

/// The abstract unix socket address `name` on this host (no file, gone
/// with its socket; one namespace per network namespace).
/// Example: `auto [a, len] = abstract_address("fiber-object-1f2e-lock");`
inline std::pair<sockaddr_un, socklen_t> abstract_address(const std::string& name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const auto n = std::min(name.size(), sizeof a.sun_path - 1);
  std::memcpy(a.sun_path + 1, name.data(), n); // sun_path[0] = 0: abstract
  return {a, socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n)};
}

/// The socket address of object `nonce` on this host.
inline std::pair<sockaddr_un, socklen_t> share_address(std::uint64_t nonce) {
  char name[64];
  std::snprintf(name, sizeof name, "fiber-object-%u-%016llx", unsigned(::geteuid()),
                static_cast<unsigned long long>(nonce));
  return abstract_address(name);
}

/// Whether the peer of the connected socket `fd` runs as this user.
inline bool same_user(int fd) {
  ucred c{};
  socklen_t len = sizeof c;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) == 0 && c.uid == ::geteuid();
}

/// One byte and room for one fd: what a holder sends and a reader receives.
struct fd_message {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  fd_message() {
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctrl;
    m.msg_controllen = sizeof ctrl;
  }
  fd_message(const fd_message&) = delete;
  fd_message& operator=(const fd_message&) = delete;
};

/// The segment of `nonce` from this host's holder, waiting until it has
/// all of it; empty when no process holds it here, or it ended first.
inline unique_fd receive_shared(std::uint64_t nonce) {
  unique_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto [a, len] = share_address(nonce);
  if (!s || ::connect(s.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0 || !same_user(s.get())) return {};
  fd_message msg;
  auto& m = msg.m;
  ssize_t n;
  do n = ::recvmsg(s.get(), &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  auto* c = CMSG_FIRSTHDR(&m);
  if (n != 1 || !c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return {};
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return unique_fd(fd);
}

/// Claims `nonce` on this host: a listening socket, or empty when another
/// process holds it already.
inline unique_fd claim_shared(std::uint64_t nonce) {
  unique_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  auto [a, len] = share_address(nonce);
  if (!s || ::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0 || ::listen(s.get(), 128) != 0) return {};
  return s;
}

/// Sends `segment` (an fd) over the connected socket `sock`, never
/// blocking: a fresh socket's buffer is empty, so it fits.
inline void send_fd(int sock, int segment) {
  fd_message msg;
  msg.byte = 1;
  auto& m = msg.m;
  auto* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
  (void)::sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/// Accepts every process of this user that connects to `listener` (a
/// non-blocking listening socket) and hands its connection to `serve`, on
/// the runtime thread, until close(); never blocks. Runtime thread only
/// after start. Example: the holder of a copy:
/// `host_server(ex, std::move(l), [fd](unique_fd c) { send_fd(c.get(), fd); })`
class host_server : public std::enable_shared_from_this<host_server> {
public:
  host_server(asio::any_io_executor ex, unique_fd listener, std::function<void(unique_fd)> serve)
      : sd_(ex, listener.release()), serve_(std::move(serve)) {}

  void start() {
    sd_.async_wait(asio::posix::descriptor_base::wait_read, [self = shared_from_this()](std::error_code ec) {
      if (ec) return;
      while (true) {
        unique_fd c(::accept4(self->sd_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!c) break;
        if (same_user(c.get())) self->serve_(std::move(c));
      }
      self->start();
    });
  }
  void close() {
    std::error_code ec;
    sd_.close(ec);
  }

private:
  asio::posix::stream_descriptor sd_;
  std::function<void(unique_fd)> serve_;
};

} // namespace fiber::detail
