// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/socket_acceptor.hpp
/// byte_acceptor over a listening TCP socket on the executor's own reactor:
/// an accepted link is read by the thread that runs the executor, with no
/// hop through nng's poller and task threads.

#include <fiber/detail/byte_acceptor.hpp>
#include <fiber/detail/socket_byte_stream.hpp>
#include <fiber/detail/stream_address.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/basic_socket_acceptor.hpp>
#include <asio/error.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// Listens on `tcp://host:port` from construction (host: a numeric address,
/// or `*` or empty for any IPv4 address; a name is invalid_argument, since
/// resolving it would block: numeric_listen_url resolves it first; port 0:
/// any). Throws std::system_error whose message names the URL; errors are
/// Asio's (compare with asio::error). Sockets are close-on-exec, with
/// TCP_NODELAY and SO_KEEPALIVE, as fiber's dialled ones.
class socket_acceptor final : public byte_acceptor {
public:
  using acceptor_type = asio::basic_socket_acceptor<asio::generic::stream_protocol>;

  socket_acceptor(asio::any_io_executor ex, const std::string& url) : ex_(std::move(ex)), acc_(ex_) {
    auto fail = [&](std::error_code ec) { throw std::system_error(ec, "fiber: cannot listen on " + url); };
    std::string host, port;
    if (!url.starts_with("tcp://") || !split_host_port(url.substr(6), host, port))
      fail(std::make_error_code(std::errc::invalid_argument));
    std::error_code ec;
    asio::ip::tcp::endpoint ep(asio::ip::tcp::v4(), static_cast<unsigned short>(std::stoul(port)));
    if (host != "*" && !host.empty()) {
      const auto a = asio::ip::make_address(host, ec);
      if (ec) fail(std::make_error_code(std::errc::invalid_argument)); // a name: numeric_listen_url first
      ep.address(a);
    }
    const int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) fail({errno, asio::error::get_system_category()});
    const asio::generic::stream_protocol::endpoint gep(ep.data(), ep.size());
    protocol_ = gep.protocol();
    acc_.assign(protocol_, fd, ec);
    if (ec) {
      ::close(fd);
      fail(ec);
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, gep.data(), socklen_t(gep.size())) != 0 || ::listen(fd, SOMAXCONN) != 0)
      fail({errno, asio::error::get_system_category()});
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
      port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(ss).sin6_port
                                             : reinterpret_cast<sockaddr_in&>(ss).sin_port);
  }

  int bound_port() const override { return port_; }

  void async_accept(accept_done done) override { wait(std::move(done)); }
  void cancel() noexcept override {
    std::error_code ignored;
    acc_.cancel(ignored);
  }
  void close() noexcept override {
    std::error_code ignored;
    acc_.close(ignored);
  }

private:
  // accept4(2) of our own: Asio's accept makes sockets without
  // close-on-exec, which a job launched meanwhile would inherit.
  void wait(accept_done done) {
    acc_.async_wait(acceptor_type::wait_read, [this, done = std::move(done)](std::error_code ec) mutable {
      if (ec) return done(ec, nullptr);
      const int fd = ::accept4(acc_.native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return wait(std::move(done));
        return done({errno, asio::error::get_system_category()}, nullptr);
      }
      set_tcp_link_options(fd);
      socket_byte_stream::socket_type s(ex_);
      s.assign(protocol_, fd, ec);
      if (ec) {
        ::close(fd);
        return done(ec, nullptr);
      }
      done({}, std::make_unique<socket_byte_stream>(ex_, std::move(s)));
    });
  }

  asio::any_io_executor ex_;
  acceptor_type acc_;
  asio::generic::stream_protocol protocol_{AF_INET, IPPROTO_TCP};
  int port_ = 0;
};

} // namespace fiber::detail
