// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/inherited_link.hpp
/// A local worker's link to its master as a socketpair made at launch: the
/// job inherits one end (job_spec::link_fd), the master keeps the other.

#include <fiber/detail/socket_byte_stream.hpp>
#include <fiber/detail/worker_env.hpp>
#include <fiber/error.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/local/stream_protocol.hpp>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <string>
#include <system_error>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace fiber::detail {

/// Master: a connected pair of Unix stream sockets, both close-on-exec:
/// `.first` for the job (closed with its last owner), `.second` the
/// master's end (the caller owns it). Throws backend_error.
/// Example: `auto [job_end, mine] = make_link_pair();`
inline std::pair<std::shared_ptr<const int>, int> make_link_pair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
    throw backend_error(std::string("fiber: socketpair for a worker's link failed: ") + std::strerror(errno));
  return {std::shared_ptr<const int>(new int(sv[1]),
                                     [](const int* p) {
                                       ::close(*p);
                                       delete p;
                                     }),
          sv[0]};
}

/// A connected Unix stream socket `fd` as socket_byte_stream's socket
/// type, on `ex`; it owns `fd` from then on, and closes it if this fails
/// (`ec`: the reactor's epoll_ctl failed).
/// Example: `auto s = adopt_socket(ex, fd, ec);`
inline socket_byte_stream::socket_type adopt_socket(asio::any_io_executor ex, int fd, std::error_code& ec) {
  socket_byte_stream::socket_type s(std::move(ex));
  s.assign(asio::local::stream_protocol(), fd, ec);
  if (ec) ::close(fd);
  return s;
}

/// adopt_socket(ex, fd, ec) that throws std::system_error.
inline socket_byte_stream::socket_type adopt_socket(asio::any_io_executor ex, int fd) {
  std::error_code ec;
  auto s = adopt_socket(std::move(ex), fd, ec);
  if (ec) throw std::system_error(ec, "fiber: adopting a worker's link");
  return s;
}

/// Master: calls `f(socket)` on `ex` once the job at the other end of `fd`
/// (its end of a link_pair) has written its first bytes; closes `fd`
/// without calling `f` if the job ended first. Takes `fd`.
/// Example: `when_link_speaks(ex, mine, [](auto s) { /* the handshake */ });`
template <class F>
void when_link_speaks(asio::any_io_executor ex, int fd, F f) {
  auto s = std::make_shared<socket_byte_stream::socket_type>(adopt_socket(std::move(ex), fd));
  s->async_wait(asio::socket_base::wait_read, [s, f = std::move(f)](std::error_code ec) mutable {
    char b;
    if (!ec && ::recv(s->native_handle(), &b, 1, MSG_PEEK) > 0) f(std::move(*s));
  });
}

/// Worker: the socket its launcher left it (FIBER_INTERNAL_LINK_FD), made
/// close-on-exec so that nothing it starts inherits it; -1 when there is
/// none, it was taken already (the first link only), or the number is not
/// a socket (then the worker dials its master's URL). Any thread.
inline int take_inherited_link() {
  static std::atomic<int> fd{worker_environment().link_fd};
  const int f = fd.exchange(-1);
  struct stat st {};
  if (f < 0 || ::fstat(f, &st) != 0 || !S_ISSOCK(st.st_mode)) return -1;
  ::fcntl(f, F_SETFD, FD_CLOEXEC);
  return f;
}

} // namespace fiber::detail
