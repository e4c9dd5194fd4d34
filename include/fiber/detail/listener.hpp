// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/listener.hpp
/// Accepting fiber connections: `listener` binds an ipc://, tcp:// or
/// tls+tcp:// URL and completes async_accept with a framed `stream` (whose
/// TLS handshake, if any, then runs on its own: a slow peer holds up no accept).

#include <fiber/detail/byte_acceptor.hpp>
#include <fiber/detail/completion.hpp>
#include <fiber/detail/nng_acceptor.hpp>
#include <fiber/detail/socket_acceptor.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/tls_config.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

namespace fiber::detail {

/// Replaces a tcp URL's port (e.g. ":0") with the one actually bound.
inline std::string with_port(const std::string& url, int port) {
  const auto colon = url.rfind(':');
  if (colon == std::string::npos || url.find(']', colon) != std::string::npos) return url;
  return url.substr(0, colon + 1) + std::to_string(port);
}

class listener_core : public std::enable_shared_from_this<listener_core> {
public:
  listener_core(asio::any_io_executor ex, const std::string& url, const transport_options& opt)
      : ex_(std::move(ex)), opt_(opt), url_(url) {
    if (is_tls_url(url)) // TLS is fiber's, over tcp://
      tls_.emplace(opt.tls_server ? *opt.tls_server : tls_context(tls_context::role::server, opt));
    const std::string u = tls_ ? url.substr(4) : url;
    if (u.starts_with("tcp://")) acc_ = std::make_unique<socket_acceptor>(ex_, u);
    else acc_ = std::make_unique<nng_acceptor>(ex_, u);
    if (const int port = acc_->bound_port()) url_ = with_port(url, port);
  }

  const std::string& url() const noexcept { return url_; }
  const asio::any_io_executor& executor() const noexcept { return ex_; }

  void start_accept(completion<std::error_code, stream> done) {
    const auto id = ++next_id_;
    if (done.slot().is_connected()) done.slot().template emplace<canceller>(weak_from_this(), id);
    q_.push_back({id, std::move(done)});
    pump(via::post);
  }

  void close() {
    if (dead_) return;
    dead_ = asio::error::operation_aborted;
    acc_->close();
    ready_.clear();
    pump(via::post);
  }

private:
  struct accept_op {
    std::uint64_t id;
    completion<std::error_code, stream> done;
  };
  struct canceller {
    canceller(std::weak_ptr<listener_core> c, std::uint64_t i) : core(std::move(c)), id(i) {}
    std::weak_ptr<listener_core> core;
    std::uint64_t id;
    void operator()(asio::cancellation_type_t) const {
      if (auto c = core.lock()) {
        auto ex = c->ex_;
        asio::post(ex, [c = std::move(c), id = id] { c->cancel(id); });
      }
    }
  };

  // With no accept left waiting, the acceptor's is withdrawn where that
  // loses nothing; a connection it yields waits in ready_ for the next.
  void cancel(std::uint64_t id) {
    for (auto it = q_.begin(); it != q_.end(); ++it)
      if (it->id == id) {
        auto op = std::move(*it);
        q_.erase(it);
        if (q_.empty() && accepting_) acc_->cancel();
        return op.done(via::dispatch, asio::error::operation_aborted, stream{});
      }
  }

  void pump(via v) {
    if (pumping_) return;
    pumping_ = true;
    while (!q_.empty()) {
      if (!ready_.empty() || dead_ || err_) {
        auto op = std::move(q_.front());
        q_.pop_front();
        if (!ready_.empty()) {
          stream s(ex_, std::move(ready_.front()), opt_,
                   tls_ ? std::optional<tls_start>(tls_start{*tls_, {}}) : std::nullopt);
          ready_.pop_front();
          op.done(v, {}, std::move(s));
        } else {
          op.done(v, dead_ ? dead_ : std::exchange(err_, {}), stream{});
        }
      } else {
        if (!accepting_) {
          accepting_ = true;
          acc_->async_accept(accept_done::bind<&listener_core::on_accept>(shared_from_this()));
        }
        break;
      }
    }
    pumping_ = false;
  }

  void on_accept(std::error_code ec, byte_stream_ptr s) {
    accepting_ = false;
    if (!ec && !dead_) {
      ready_.push_back(std::move(s));
    } else if (ec && !dead_ && ec != asio::error::operation_aborted && ec != asio::error::connection_aborted &&
               ec != asio::error::connection_reset) {
      // A client that vanished mid-accept is not an error, nor a withdrawn
      // accept; anything else (e.g. out of file descriptors) fails one
      // accept, as with Asio.
      err_ = ec;
    }
    pump(via::dispatch);
  }

  asio::any_io_executor ex_;
  transport_options opt_;
  std::string url_;
  std::optional<tls_context> tls_; // tls+tcp://: each accepted stream's handshake
  byte_acceptor_ptr acc_;
  std::deque<accept_op> q_;
  std::deque<byte_stream_ptr> ready_;
  std::error_code dead_, err_;
  std::uint64_t next_id_ = 0;
  bool accepting_ = false, pumping_ = false;
};

/// Listens on ipc://path, tcp://host:port (port 0: any) or tls+tcp://...
/// Not thread-safe: use it on its executor.
class listener : public core_handle<listener_core> {
public:
  listener() noexcept = default;
  /// Binds now; throws std::system_error whose message names the URL.
  listener(asio::any_io_executor ex, const std::string& url, const transport_options& opt = {})
      : core_handle(std::make_shared<listener_core>(std::move(ex), url, opt)) {}

  /// The URL actually bound (a tcp port 0 is replaced by the real port).
  std::string url() const { return core_ ? core_->url() : std::string(); }

  /// Completes with void(std::error_code, stream).
  template <asio::completion_token_for<void(std::error_code, stream)> Token>
  auto async_accept(Token&& token) {
    return initiate_on_core<stream>(std::forward<Token>(token), core_,
                                    [](listener_core& c, auto done) { c.start_accept(std::move(done)); });
  }
};

} // namespace fiber::detail
