// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/connect.hpp
/// Dialing a fiber connection: `async_connect(ex, url, options, token)`
/// completes with a framed `stream` over an Asio socket on `ex`'s reactor (a
/// tls+tcp:// stream then runs fiber's TLS handshake before its first frame).

#include <fiber/detail/completion.hpp>
#include <fiber/detail/socket_byte_stream.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/stream_address.hpp>
#include <fiber/detail/tls_config.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

namespace fiber::detail {

/// One dial in flight: the URL's addresses (a host name is resolved
/// asynchronously), tried in order until one accepts.
class connect_core : public std::enable_shared_from_this<connect_core> {
public:
  using endpoint = asio::generic::stream_protocol::endpoint;

  connect_core(asio::any_io_executor ex, const transport_options& opt, completion<std::error_code, stream> done)
      : ex_(std::move(ex)), opt_(opt), done_(std::move(done)), sock_(ex_), resolver_(ex_) {}

  void start(const std::string& url) {
    if (is_tls_url(url)) {
      try {
        tls_ = tls_start{opt_.tls_client ? *opt_.tls_client : tls_context(tls_context::role::client, opt_),
                         tls_name_for(url, opt_)};
      } catch (const std::system_error& e) {
        return done_(via::post, e.code(), stream{});
      }
    }
    const std::string u = tls_ ? url.substr(4) : url; // TLS is fiber's: tcp://
    if (done_.slot().is_connected()) done_.slot().template emplace<canceller>(weak_from_this());
    if (u.starts_with("ipc://")) {
      const std::string path = u.substr(6);
      if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path))
        return done_(via::post, std::make_error_code(std::errc::invalid_argument), stream{});
      const asio::local::stream_protocol::endpoint ep(path);
      eps_.emplace_back(ep.data(), ep.size());
      return try_next();
    }
    if (u.starts_with("abstract://")) { // Linux's abstract namespace: a name, no file
      const std::string name = std::string(1, '\0') + u.substr(11);
      if (name.size() < 2 || name.size() >= sizeof(sockaddr_un::sun_path))
        return done_(via::post, std::make_error_code(std::errc::invalid_argument), stream{});
      const asio::local::stream_protocol::endpoint ep(name);
      eps_.emplace_back(ep.data(), ep.size());
      return try_next();
    }
    std::string host, port;
    if (!u.starts_with("tcp://") || !split_host_port(u.substr(6), host, port) || host.empty())
      return done_(via::post, std::make_error_code(std::errc::invalid_argument), stream{});
    std::error_code ec;
    if (const auto a = asio::ip::make_address(host, ec); !ec) {
      const asio::ip::tcp::endpoint ep(a, static_cast<unsigned short>(std::stoul(port)));
      eps_.emplace_back(ep.data(), ep.size());
      return try_next();
    }
    resolver_.async_resolve(host, port, [self = shared_from_this()](std::error_code ec, auto results) {
      if (self->cancelled_) ec = asio::error::operation_aborted;
      if (ec) return self->done_(via::dispatch, ec, stream{});
      for (const auto& r : results) self->eps_.emplace_back(r.endpoint().data(), r.endpoint().size());
      self->try_next();
    });
  }

private:
  struct canceller {
    explicit canceller(std::weak_ptr<connect_core> c) : core(std::move(c)) {}
    std::weak_ptr<connect_core> core;
    // Any thread: the dial stops on the executor.
    void operator()(asio::cancellation_type_t) const {
      if (auto c = core.lock()) {
        auto ex = c->ex_;
        asio::post(ex, [c = std::move(c)] {
          c->cancelled_ = true;
          c->resolver_.cancel();
          std::error_code ignored;
          c->sock_.close(ignored);
        });
      }
    }
  };

  // A non-blocking connect(2) of our own: Asio's would take a Unix socket's
  // EAGAIN (a full backlog) for "in progress" and report a socket that never
  // connected.
  void try_next(std::error_code last = asio::error::host_not_found) {
    if (cancelled_) return done_(via::post, asio::error::operation_aborted, stream{});
    if (next_ == eps_.size()) return done_(via::post, last, stream{});
    const endpoint& ep = eps_[next_++];
    std::error_code ignored;
    sock_.close(ignored);
    const int fd = ::socket(ep.data()->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return done_(via::post, std::error_code(errno, std::system_category()), stream{});
    sock_.assign(ep.protocol(), fd, ignored);
    if (ep.data()->sa_family != AF_UNIX) set_tcp_link_options(fd);
    if (::connect(fd, ep.data(), socklen_t(ep.size())) == 0)
      return asio::post(ex_, [self = shared_from_this()] { self->connected({}); });
    if (errno != EINPROGRESS) {
      const std::error_code ec(errno, std::system_category());
      return asio::post(ex_, [self = shared_from_this(), ec] { self->connected(ec); });
    }
    sock_.async_wait(asio::socket_base::wait_write, [self = shared_from_this()](std::error_code ec) {
      int err = 0;
      socklen_t len = sizeof err;
      if (!ec && ::getsockopt(self->sock_.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
        ec = std::error_code(err, std::system_category());
      self->connected(ec);
    });
  }

  void connected(std::error_code ec) {
    if (cancelled_) ec = asio::error::operation_aborted;
    if (ec == asio::error::operation_aborted || (ec && next_ == eps_.size())) {
      std::error_code ignored;
      sock_.close(ignored);
      return done_(via::dispatch, ec, stream{});
    }
    if (ec) return try_next(ec);
    done_(via::dispatch, {}, socket_stream(ex_, std::move(sock_), opt_, std::move(tls_)));
  }

  asio::any_io_executor ex_;
  transport_options opt_;
  completion<std::error_code, stream> done_;
  std::optional<tls_start> tls_;
  socket_byte_stream::socket_type sock_;
  asio::ip::tcp::resolver resolver_;
  std::vector<endpoint> eps_;
  std::size_t next_ = 0;
  bool cancelled_ = false;
};

/// Connects to `url` (`ipc://path`, `abstract://name`, `tcp://host:port`, `tls+tcp://host:port`);
/// completes with void(std::error_code, stream). The stream runs on `ex`,
/// over a socket of `ex`'s own reactor (no thread of its own). Errors, as
/// errno values (compare with std::errc, not Asio's enums):
/// connection_refused, resource_unavailable_try_again (a Unix socket's
/// backlog is full), no_such_file_or_directory (no socket at that path),
/// invalid_argument (a bad URL); or a resolver error. Cancellation: any type; completes with operation_aborted.
template <asio::completion_token_for<void(std::error_code, stream)> Token>
auto async_connect(asio::any_io_executor ex, const std::string& url, const transport_options& opt, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, stream)>(
      [](auto handler, asio::any_io_executor ex, std::string url, transport_options opt) {
        completion<std::error_code, stream> c(std::move(handler), ex);
        auto core = std::make_shared<connect_core>(ex, opt, std::move(c));
        core->start(url);
      },
      token, std::move(ex), url, opt);
}

} // namespace fiber::detail
