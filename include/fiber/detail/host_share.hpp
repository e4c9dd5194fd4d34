// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/host_share.hpp
/// One copy of an object per host: the first process on a host to want it
/// claims an abstract unix socket named after the object and fetches it;
/// the others connect and receive its sealed memfd (SCM_RIGHTS).

#include <fiber/backend/detail/unique_fd.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace fiber::detail {

/// The socket address of object `nonce` on this host (abstract: no file,
/// gone with its process; one namespace per network namespace).
inline std::pair<sockaddr_un, socklen_t> share_address(std::uint64_t nonce) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  char name[64];
  const int n = std::snprintf(name, sizeof name, "fiber-object-%u-%016llx", unsigned(::geteuid()),
                              static_cast<unsigned long long>(nonce));
  std::memcpy(a.sun_path + 1, name, std::size_t(n)); // sun_path[0] = 0: abstract
  return {a, socklen_t(offsetof(sockaddr_un, sun_path) + 1 + std::size_t(n))};
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

/// Hands `segment` to every process of this user that connects to
/// `listener`, on the runtime thread (accept and one sendmsg each, never
/// blocking), until close(). Runtime thread only after start.
class share_server : public std::enable_shared_from_this<share_server> {
public:
  share_server(asio::any_io_executor ex, unique_fd listener, int segment)
      : sd_(ex, listener.release()), segment_(segment) {}

  void start() {
    sd_.async_wait(asio::posix::descriptor_base::wait_read, [self = shared_from_this()](std::error_code ec) {
      if (ec) return;
      while (true) {
        unique_fd c(::accept4(self->sd_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!c) break;
        if (same_user(c.get())) self->send(c.get());
      }
      self->start();
    });
  }
  void close() {
    std::error_code ec;
    sd_.close(ec);
  }

private:
  void send(int fd) {
    fd_message msg;
    msg.byte = 1;
    auto& m = msg.m;
    auto* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &segment_, sizeof segment_);
    (void)::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT); // a fresh socket's buffer is empty: it fits
  }

  asio::posix::stream_descriptor sd_;
  int segment_;
};

} // namespace fiber::detail
