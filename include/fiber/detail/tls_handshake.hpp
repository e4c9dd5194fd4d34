// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/tls_handshake.hpp
/// A TLS 1.3 handshake driven over a byte stream by OpenSSL on memory
/// buffers (`async_tls_handshake`); it yields the channel binding.

#include <fiber/detail/byte_stream.hpp>
#include <fiber/detail/completion.hpp>
#include <fiber/detail/tls_context.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace fiber::detail {

/// What a handshake yields: the binding and the frame keys, or with an
/// error OpenSSL's reason.
struct tls_handshake_result {
  channel_binding binding{};
  /// Keys of the frames that follow, one per direction: TLS exporters
  /// ("EXPORTER-fiber-frames-c2s", "-s2c"), i.e. HKDF under the handshake's
  /// secret (RFC 8446, §7.5). frame_mac encrypts with them.
  std::array<std::uint8_t, 32> client_to_server{}, server_to_client{};
  /// Bytes the peer sent after its last handshake message (its first frames).
  std::vector<std::byte> early;
  std::string detail; ///< with an error: OpenSSL's words ("hostname mismatch", ...)
};

/// How a stream starts TLS before its first frame: the side's context, and
/// for a client the server name it verifies (tls_name_for).
struct tls_start {
  tls_context context;
  std::string server_name;
};

/// One handshake in flight over a stream it does not own.
class tls_handshake_core : public std::enable_shared_from_this<tls_handshake_core> {
public:
  using done_type = completion<std::error_code, tls_handshake_result>;

  tls_handshake_core(asio::any_io_executor ex, byte_stream& s, tls_context ctx, done_type done)
      : ex_(std::move(ex)), s_(&s), ctx_(std::move(ctx)), api_(ctx_.api()), done_(std::move(done)) {}
  tls_handshake_core(const tls_handshake_core&) = delete;
  tls_handshake_core& operator=(const tls_handshake_core&) = delete;
  ~tls_handshake_core() {
    if (ssl_) api_.ssl_free(ssl_); // frees both BIOs
  }

  void start(const std::string& server_name) {
    api_.err_clear();
    void* rbio = api_.bio_new(api_.bio_s_mem());
    void* wbio = api_.bio_new(api_.bio_s_mem());
    ssl_ = api_.ssl_new(ctx_.native());
    if (ssl_ && rbio && wbio) api_.set_bio(ssl_, rbio, wbio); // the SSL owns them from here
    else {
      if (rbio) api_.bio_free(rbio);
      if (wbio) api_.bio_free(wbio);
    }
    rbio_ = rbio;
    wbio_ = wbio;
    if (!ssl_ || !rbio || !wbio)
      return finish_error(make_error_code(tls_errc::protocol), take_openssl_errors(api_, "out of memory"), via::post);
    if (ctx_.side() == tls_context::role::server) {
      api_.set_accept_state(ssl_);
    } else {
      api_.set_connect_state(ssl_);
      if (ctx_.verifies() && !server_name.empty() &&
          (api_.set1_host(ssl_, server_name.c_str()) != 1 ||
           api_.ssl_ctrl(ssl_, libssl_api::ctrl_set_tlsext_hostname, 0, const_cast<char*>(server_name.c_str())) != 1))
        return finish_error(make_error_code(tls_errc::bad_settings),
                            "server name '" + server_name + "': " + take_openssl_errors(api_, "refused"), via::post);
    }
    if (done_.slot().is_connected()) done_.slot().template emplace<canceller>(weak_from_this());
    asio::post(ex_, [self = shared_from_this()] { self->step(); });
  }

  /// Executor: the operation completes with an error once the byte
  /// stream's I/O in flight ends (close and stop the stream), or never if
  /// its executor is gone.
  void stop() { cancelled_.store(true); }

private:
  struct canceller {
    explicit canceller(std::weak_ptr<tls_handshake_core> c) : core(std::move(c)) {}
    std::weak_ptr<tls_handshake_core> core;
    // Any thread: the byte stream is cancelled on the executor; the step
    // that runs next sees `cancelled`.
    void operator()(asio::cancellation_type_t) const {
      if (auto c = core.lock()) {
        c->cancelled_.store(true);
        auto ex = c->ex_;
        asio::post(ex, [c = std::move(c)] {
          if (c->finished_) return;
          c->s_->cancel_read();
          c->s_->cancel_write();
        });
      }
    }
  };

  // Runs OpenSSL until it needs the network: bytes to send go first, then
  // a read if it wants one. Executor only.
  void step() {
    if (cancelled_.load()) return finish_error(asio::error::operation_aborted, {});
    api_.err_clear();
    const int r = failed_ ? 0 : api_.do_handshake(ssl_);
    const int e = r == 1 || failed_ ? 0 : api_.get_error(ssl_, r);
    if (!failed_ && r != 1 && e != libssl_api::error_want_read && e != libssl_api::error_want_write) note_failure();
    if (const std::size_t n = api_.bio_ctrl_pending(wbio_)) { // e.g. our flight, or an alert
      out_.resize(n);
      api_.bio_read(wbio_, out_.data(), int(n));
      sent_ = 0;
      return send_more();
    }
    if (failed_) return finish_error(fail_ec_, fail_detail_);
    if (r == 1) {
      tls_handshake_result res;
      res.early.resize(api_.bio_ctrl_pending(rbio_));
      if (!res.early.empty()) api_.bio_read(rbio_, res.early.data(), int(res.early.size()));
      auto exporter = [&](std::string_view label, std::array<std::uint8_t, 32>& out) {
        return api_.export_keying_material(ssl_, out.data(), out.size(), label.data(), label.size(), nullptr, 0, 0) ==
               1;
      };
      if (!exporter("EXPORTER-Channel-Binding", res.binding) ||
          !exporter("EXPORTER-fiber-frames-c2s", res.client_to_server) ||
          !exporter("EXPORTER-fiber-frames-s2c", res.server_to_client))
        return finish_error(make_error_code(tls_errc::protocol), take_openssl_errors(api_, "no exporter"));
      return finish({}, std::move(res));
    }
    s_->async_read_some({in_.data(), in_.size()}, io_done::bind<&tls_handshake_core::on_recv>(shared_from_this()));
  }

  // The handshake failed: the alert OpenSSL wrote still goes out.
  void note_failure() {
    failed_ = true;
    if (const long v = api_.get_verify_result(ssl_); v != 0) {
      fail_ec_ = tls_verify_error(v);
      fail_detail_ = api_.verify_error_string(v);
      api_.err_clear();
    } else {
      fail_ec_ = make_error_code(tls_errc::protocol);
      fail_detail_ = take_openssl_errors(api_, "the peer closed the connection");
    }
  }

  void send_more() {
    const nng_iov iov{out_.data() + sent_, out_.size() - sent_};
    s_->async_write_some({&iov, 1}, io_done::bind<&tls_handshake_core::on_send>(shared_from_this()));
  }

  void on_send(std::error_code ec, std::size_t n) {
    if (ec) return io_failed(ec);
    if ((sent_ += n) < out_.size()) return send_more();
    step();
  }

  void on_recv(std::error_code ec, std::size_t n) {
    if (!ec && n == 0) ec = asio::error::eof;
    if (ec) return io_failed(ec);
    api_.bio_write(rbio_, in_.data(), int(n));
    step();
  }

  void io_failed(std::error_code ec) {
    if (failed_) return finish_error(fail_ec_, fail_detail_); // the peer left before our alert
    if (cancelled_.load() || ec == asio::error::operation_aborted)
      return finish_error(asio::error::operation_aborted, {});
    finish_error(ec, {});
  }

  void finish_error(std::error_code ec, std::string detail, via v = via::dispatch) {
    tls_handshake_result r;
    r.detail = std::move(detail);
    finish(ec, std::move(r), v);
  }
  void finish(std::error_code ec, tls_handshake_result r, via v = via::dispatch) {
    if (finished_) return;
    finished_ = true;
    done_(v, ec, std::move(r));
  }

  asio::any_io_executor ex_;
  byte_stream* s_;
  tls_context ctx_;
  const libssl_api& api_;
  done_type done_;
  void* ssl_ = nullptr;  // SSL*
  void* rbio_ = nullptr; // owned by ssl_
  void* wbio_ = nullptr;
  std::vector<std::byte> out_;
  std::size_t sent_ = 0;
  std::array<std::byte, 16 * 1024> in_{};
  std::atomic<bool> cancelled_{false};
  bool failed_ = false, finished_ = false;
  std::error_code fail_ec_;
  std::string fail_detail_;
};

/// Runs the TLS 1.3 handshake of `ctx`'s side over `s` and completes with
/// `void(std::error_code, tls_handshake_result)`: the channel binding, or
/// a tls_verify_error / tls_errc::protocol with OpenSSL's reason in
/// `detail`, tls_errc::trailing_bytes, an error of the stream, or
/// asio::error::operation_aborted when cancelled. A client with a
/// verifying context checks `server_name` (a DNS name, or an IP literal
/// against the certificate's IP addresses) and sends it as SNI.
/// `s` is not owned and must outlive the operation; afterwards it carries
/// no TLS record (bytes that came early are in the result) but fiber's
/// frames, encrypted under the result's keys. The handler
/// runs on `ex`; the operation's state lives there. Cancellation: any type
/// (the stream is then in an undefined state: close it).
/// Example:
/// @code
/// async_tls_handshake(ex, s, tls_context(tls_context::role::client, o), "10.0.0.1",
///                     [](std::error_code ec, tls_handshake_result r) { ... });
/// @endcode
template <asio::completion_token_for<void(std::error_code, tls_handshake_result)> Token>
auto async_tls_handshake(asio::any_io_executor ex, byte_stream& s, tls_context ctx, std::string server_name,
                         Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, tls_handshake_result)>(
      [](auto handler, asio::any_io_executor ex, byte_stream* s, tls_context ctx, std::string name) {
        tls_handshake_core::done_type done(std::move(handler), ex);
        auto core = std::make_shared<tls_handshake_core>(ex, *s, std::move(ctx), std::move(done));
        core->start(name);
      },
      token, std::move(ex), &s, std::move(ctx), std::move(server_name));
}

} // namespace fiber::detail
