// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/listener.hpp
/// Accepting fiber connections: `listener` binds an ipc://, tcp:// or
/// tls+tcp:// URL and completes async_accept with a framed `stream` (whose
/// TLS handshake, if any, then runs on its own: a slow peer holds up no accept).

#include <fiber/detail/aio_callback.hpp>
#include <fiber/detail/completion.hpp>
#include <fiber/detail/nng_byte_stream.hpp>
#include <fiber/detail/nng_error.hpp>
#include <fiber/detail/nng_ptr.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/tls_config.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include <nng/nng.h>

#include <cstdint>
#include <deque>
#include <memory>
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
    auto fail = [&](int rv, const char* what) {
      throw std::system_error(make_nng_error(rv), "fiber: cannot " + std::string(what) + " " + url);
    };
    if (is_tls_url(url)) // TLS is fiber's, over tcp://
      tls_.emplace(opt.tls_server ? *opt.tls_server : tls_context(tls_context::role::server, opt));
    nng_stream_listener* l = nullptr;
    if (int rv = nng_stream_listener_alloc(&l, tls_ ? url.substr(4).c_str() : url.c_str())) fail(rv, "listen on");
    l_.reset(l);
    nng_stream_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true); // ENOTSUP on ipc: fine
    nng_stream_listener_set_bool(l, NNG_OPT_TCP_KEEPALIVE, true);
    if (int rv = nng_stream_listener_listen(l)) fail(rv, "listen on");
    int port = 0;
    if (nng_stream_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0) url_ = with_port(url, port);
    aio_ = make_aio(&listener_core::on_accept_cb, this);
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
    nng_stream_listener_close(l_.get());
    nng_aio_stop(aio_.get()); // its callback has run: nothing posts after this
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

  // Like stream reads, an in-flight nng accept is not cancelled: a
  // connection it yields waits in ready_ for the next async_accept.
  void cancel(std::uint64_t id) {
    for (auto it = q_.begin(); it != q_.end(); ++it)
      if (it->id == id) {
        auto op = std::move(*it);
        q_.erase(it);
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
          stream s(ex_, std::make_unique<nng_byte_stream>(ex_, ready_.front().release()), opt_,
                   tls_ ? std::optional<tls_start>(tls_start{*tls_, {}}) : std::nullopt);
          ready_.pop_front();
          op.done(v, {}, std::move(s));
        } else {
          op.done(v, dead_ ? dead_ : std::exchange(err_, {}), stream{});
        }
      } else {
        if (!accepting_) {
          accepting_ = true;
          keep_ = shared_from_this();
          nng_stream_listener_accept(l_.get(), aio_.get());
        }
        break;
      }
    }
    pumping_ = false;
  }

  static void on_accept_cb(void* arg) {
    auto* self = static_cast<listener_core*>(arg);
    finish_on_executor(self->aio_.get(), self->ex_, self->keep_, aio_stream,
                       [](std::shared_ptr<listener_core>& c, int rv, nng_stream* s) { c->on_accept(rv, s); });
  }

  void on_accept(int rv, nng_stream* s) {
    accepting_ = false;
    stream_ptr owned(s);
    if (rv == 0 && !dead_) {
      ready_.push_back(std::move(owned));
    } else if (rv != 0 && !dead_ && rv != NNG_ECONNABORTED && rv != NNG_ECONNRESET) {
      // A client that vanished mid-accept is not an error; anything else
      // (e.g. out of file descriptors) fails one accept, as with Asio.
      err_ = make_nng_error(rv);
    }
    pump(via::dispatch);
  }

  asio::any_io_executor ex_;
  transport_options opt_;
  std::string url_;
  std::optional<tls_context> tls_; // tls+tcp://: each accepted stream's handshake
  listener_ptr l_;                 // declared before the aio: freed after it is stopped
  aio_ptr aio_;
  std::shared_ptr<listener_core> keep_;
  std::deque<accept_op> q_;
  std::deque<stream_ptr> ready_;
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
