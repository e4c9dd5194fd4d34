// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/connect.hpp
/// Dialing a fiber connection: `async_connect(ex, url, options, token)`
/// completes with a framed `stream` (nng's TCP or IPC dialer; a tls+tcp://
/// stream then runs fiber's TLS handshake before its first frame).

#include <fiber/detail/aio_callback.hpp>
#include <fiber/detail/completion.hpp>
#include <fiber/detail/nng_error.hpp>
#include <fiber/detail/nng_ptr.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/tls_config.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/post.hpp>

#include <nng/nng.h>

#include <memory>
#include <string>
#include <system_error>

namespace fiber::detail {

/// One dial in flight. The dialer is freed with it: established streams do
/// not depend on their dialer (a TLS stream holds its own config reference).
class connect_core : public std::enable_shared_from_this<connect_core> {
public:
  connect_core(asio::any_io_executor ex, const transport_options& opt, completion<std::error_code, stream> done)
      : ex_(std::move(ex)), opt_(opt), done_(std::move(done)) {}

  void start(const std::string& url) {
    if (is_tls_url(url)) {
      try {
        tls_ = tls_start{opt_.tls_client ? *opt_.tls_client : tls_context(tls_context::role::client, opt_),
                         tls_name_for(url, opt_)};
      } catch (const std::system_error& e) {
        return done_(via::post, e.code(), stream{});
      }
    }
    nng_stream_dialer* d = nullptr;
    int rv = nng_stream_dialer_alloc(&d, tls_ ? url.substr(4).c_str() : url.c_str()); // TLS is fiber's: tcp://
    if (rv == 0) {
      d_.reset(d);
      nng_stream_dialer_set_bool(d, NNG_OPT_TCP_NODELAY, true);
      nng_stream_dialer_set_bool(d, NNG_OPT_TCP_KEEPALIVE, true);
    }
    nng_aio* a = nullptr;
    if (rv == 0 && (rv = nng_aio_alloc(&a, &connect_core::on_dial_cb, this)) == 0) aio_.reset(a);
    if (rv) return done_(via::post, make_nng_error(rv), stream{});
    nng_aio_set_timeout(a, NNG_DURATION_INFINITE);
    if (done_.slot().is_connected()) done_.slot().template emplace<canceller>(weak_from_this());
    keep_ = shared_from_this();
    nng_stream_dialer_dial(d_.get(), aio_.get());
  }

private:
  struct canceller {
    explicit canceller(std::weak_ptr<connect_core> c) : core(std::move(c)) {}
    std::weak_ptr<connect_core> core;
    // nng_aio_cancel is thread-safe and a no-op once the dial finished.
    void operator()(asio::cancellation_type_t) const {
      if (auto c = core.lock()) nng_aio_cancel(c->aio_.get());
    }
  };

  static void on_dial_cb(void* arg) {
    auto* self = static_cast<connect_core*>(arg);
    finish_on_executor(self->aio_.get(), self->ex_, self->keep_, aio_stream,
                       [](connect_core& c, int rv, nng_stream* s) { c.on_dial(rv, s); });
  }

  void on_dial(int rv, nng_stream* s) {
    if (rv) return done_(via::dispatch, make_nng_error(rv), stream{});
    stream st(ex_, s, opt_, std::move(tls_)); // a TLS handshake runs before its first frame
    done_(via::dispatch, {}, std::move(st));
  }

  asio::any_io_executor ex_;
  transport_options opt_;
  completion<std::error_code, stream> done_;
  std::optional<tls_start> tls_;
  dialer_ptr d_;
  aio_ptr aio_;
  std::shared_ptr<connect_core> keep_;
};

/// Connects to `url`; completes with void(std::error_code, stream). The
/// stream runs on `ex`. Errors: connection_refused, or an nng/system error.
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
